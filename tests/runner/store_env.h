/* Where a test's job lives, for suites run against every store
 * (tests/unit/test_store_conf.c): the file store (a journal and a lock
 * directory in the test's temporary directory) or PostgreSQL (a server
 * the harness starts in that directory, tests/runner/pg_harness.c). */
#ifndef MESH_TEST_STORE_ENV_H
#define MESH_TEST_STORE_ENV_H

#include <stdint.h>

struct mesh_job;

struct store_env {
	char kind[16];	   /* "file" or "postgresql" */
	char where[512];   /* the journal path, or the store URL */
	char lockdir[64];  /* file store: the lock directory */
	char pgdir[256];   /* postgresql: the data and socket directory */
};

/* 0, or -1 when the store cannot be had here (then a message was printed). */
int store_env_start(struct store_env *e, const char *kind);
void store_env_stop(struct store_env *e);
int store_env_submit(const struct store_env *e, uint64_t n);
int store_env_open(const struct store_env *e, struct mesh_job **j, const char *node, uint32_t max_attempts);
/* postgresql: pg_ctl with args ("-m immediate restart") on the server. */
int store_env_pg_ctl(const struct store_env *e, const char *args);

#endif
