/* A meshd job's spec file ("key value" lines, src/job/home_file.c) through
 * the seams mesh__home_spec_check (its check line: whole or not, nothing
 * else) and mesh__home_spec_parse: never crashes, never leaks (a key given
 * twice), and what it accepts is a spec meshd can run.  The same bytes as
 * the job's end file (mesh__home_end_state) name a finished state. */
#include "base/err.h"
#include "job/home.h"
#include "job/job.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the reader hands it a NUL-terminated file */
	char *text = malloc(size + 1);
	struct mesh_home_spec sp;
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	memset(&sp, 0, sizeof sp);
	int ck = mesh__home_spec_check((const char *)data, size);
	if (ck != 0 && ck != MESH_E_CORRUPT)
		abort();
	/* the same bytes as an end file */
	enum mesh_home_state st = mesh__home_end_state(text);
	if (st != MESH_HOME_COMPLETE && st != MESH_HOME_CANCELLED && st != MESH_HOME_FAILED)
		abort();
	int rc = mesh__home_spec_parse(&sp, text);
	if (rc != 0 && rc != MESH_E_PARSE)
		abort();
	if (rc == 0 && (!sp.program[0] || !sp.n || sp.n > MESH_JOB_MAX_CHUNKS || !sp.max_workers || !sp.retries))
		abort();
	free(text);
	return 0;
}
