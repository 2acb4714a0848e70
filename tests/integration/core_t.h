/* An in-process meshd core for the core's tests (meshd/core/ops.h): made on
 * cfg, its catalog "cat" and logs "logs" unless cfg names others, its
 * loop run on a thread of its own. */
#ifndef MESH_TESTS_CORE_T_H
#define MESH_TESTS_CORE_T_H

#include "meshd/core/ops.h"
#include "runner/t.h"

#include <pthread.h>

struct core_t {
	struct meshd_core *d;
	pthread_t th;
};

static inline void *core_t_run(void *d)
{
	meshd_core_run(d);
	return NULL;
}

static inline void core_t_up(struct core_t *c, struct meshd_config cfg)
{
	char *err = NULL;
	if (!cfg.catalog)
		cfg.catalog = "cat";
	if (!cfg.logs)
		cfg.logs = "logs";
	if (meshd_core_new(&c->d, &cfg, &err))
		FAIL("core: %s", err ? err : "?");
	pthread_create(&c->th, NULL, core_t_run, c->d);
}

/* Its loop stopped and joined, then the core freed. */
static inline void core_t_down(struct core_t *c)
{
	meshd_core_stop(c->d);
	pthread_join(c->th, NULL);
	meshd_core_free(c->d);
}

#endif
