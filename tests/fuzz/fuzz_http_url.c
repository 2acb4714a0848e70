/* Fuzzes the probe's target parser (host:port, [v6]:port, http URLs): it
 * must never overrun, and what it accepts must be well-formed. */
#include "autoscale/probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char s[2048];
	struct mesh_probe_target t;
	if (size >= sizeof s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	if (mesh_probe_target_parse(&t, s) != 0)
		return 0;
	if (!t.host[0] || t.port == 0 || t.path[0] != '/' || !memchr(t.host, 0, sizeof t.host) ||
	    !memchr(t.path, 0, sizeof t.path))
		abort();
	for (const char *p = t.host; *p; p++)
		if ((unsigned char)*p <= 0x20 || strchr("/?#@[]", *p))
			abort();
	for (const char *p = t.path; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == '#')
			abort();
	return 0;
}
