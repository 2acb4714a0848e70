/* Fuzzes the probe's judgement of a /v1/models body: any bytes give one of
 * three answers, and a listed model is really in the JSON. */
#include "autoscale/probe.h"
#include "base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The first byte picks the model name's length; it follows, then the body. */
	if (size < 1)
		return 0;
	size_t ml = data[0] % 16;
	if (size < 1 + ml)
		return 0;
	char model[17];
	memcpy(model, data + 1, ml);
	model[ml] = 0;
	const char *body = (const char *)data + 1 + ml;
	size_t n = size - 1 - ml;
	int rc = mesh_probe_model_listed(body, n, model);
	if (rc != 0 && rc != MESH_E_NOTFOUND && rc != MESH_E_PARSE)
		abort();
	if (rc == 0 && ml > 0 && strlen(model) == ml && !memmem(body, n, model, ml)) {
		/* JSON escapes can spell a name differently; only plain names must appear verbatim. */
		int plain = 1;
		for (size_t i = 0; i < n; i++)
			if (body[i] == '\\')
				plain = 0;
		if (plain)
			abort();
	}
	return 0;
}
