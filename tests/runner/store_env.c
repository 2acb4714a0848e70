#include "runner/store_env.h"

#include "job/job.h"

#include <stdio.h>
#include <string.h>

int store_env_start(struct store_env *e, const char *kind)
{
	memset(e, 0, sizeof *e);
	snprintf(e->kind, sizeof e->kind, "%s", kind);
	if (!strcmp(kind, "file")) {
		snprintf(e->where, sizeof e->where, "conf.log");
		snprintf(e->lockdir, sizeof e->lockdir, "locks");
		return 0;
	}
	fprintf(stderr, "store_env: no store '%s'\n", kind);
	return -1;
}

void store_env_stop(struct store_env *e)
{
	(void)e;
}

int store_env_submit(const struct store_env *e, uint64_t n)
{
	return mesh_job_submit(e->where, n);
}

int store_env_open(const struct store_env *e, struct mesh_job **j, const char *node, uint32_t max_attempts)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = e->where;
	o.lockdir = e->lockdir[0] ? e->lockdir : NULL;
	o.name = "conf";
	o.node = node;
	o.max_attempts = max_attempts;
	return mesh_job_open(j, &o);
}
