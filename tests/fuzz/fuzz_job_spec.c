/* A meshd job's spec file ("key value" lines, src/meshd/jobs/jobs.c) through
 * the seams mesh__job_spec_check (its check line: whole or not, nothing
 * else) and mesh__job_spec_parse: never crashes, never leaks (a key given
 * twice), and what it accepts is a spec meshd can run.  The same bytes as
 * the job's end file (mesh__job_end_state) name a finished state. */
#include "base/err.h"
#include "meshd/jobs/jobs_int.h"
#include "job/job.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the reader hands it a NUL-terminated file */
	char *text = malloc(size + 1);
	struct job jb;
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	memset(&jb, 0, sizeof jb);
	int ck = mesh__job_spec_check((const char *)data, size);
	if (ck != 0 && ck != MESH_E_CORRUPT)
		abort();
	/* the same bytes as an end file */
	enum meshd_job_state st = mesh__job_end_state(text);
	if (st != MESHD_JOB_COMPLETE && st != MESHD_JOB_CANCELLED && st != MESHD_JOB_FAILED)
		abort();
	int rc = mesh__job_spec_parse(&jb, text);
	if (rc != 0 && rc != MESH_E_PARSE)
		abort();
	if (rc == 0 && (!jb.program || !jb.n || jb.n > MESH_JOB_MAX_CHUNKS || !jb.max_workers || !jb.retries))
		abort();
	free(jb.program);
	free(jb.name);
	free(text);
	return 0;
}
