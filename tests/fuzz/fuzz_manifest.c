/* Fuzzes the manifest parser (and the TOML subset under it). */
#include "host/manifest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mesh_manifest m;
	char *err = NULL;
	int rc = mesh_manifest_parse("f.toml", (const char *)data, size, NULL, &m, &err);
	if (rc == 0) {
		/* What parsed must be whole: strings terminated, vectors NULL-ended. */
		if (!m.name || !m.args || m.args[m.nargs] || !m.env || m.env[m.nenv] || !m.source_hash)
			abort();
		if (m.max_workers < 1 || m.max_workers > MESH_MAX_WORKERS_CAP)
			abort();
		mesh_manifest_release(&m);
	} else if (err && strncmp(err, "f.toml:", 7) != 0) {
		abort(); /* every parse error says where */
	}
	free(err);
	return 0;
}
