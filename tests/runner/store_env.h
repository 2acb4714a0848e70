/* Where a test's job lives, for suites run against every store
 * (tests/unit/test_store_conf.c): the file store (a journal and a lock
 * directory in the test's temporary directory) or PostgreSQL (a server
 * the harness starts in that directory, tests/runner/pg_harness.c). */
#ifndef MESH_TEST_STORE_ENV_H
#define MESH_TEST_STORE_ENV_H

#include <stddef.h>
#include <stdint.h>

struct mesh_job;

struct store_env {
	char kind[16];	   /* "file" or "postgresql" */
	char where[512];   /* the journal path, or the store URL */
	char lockdir[64];  /* file store: the lock directory */
	char pgdir[256];   /* postgresql: the data and socket directory */
	char netns[64];	   /* postgresql: the network namespace it runs in ("" this one) */
	char listen[64];   /* postgresql: its TCP address (port 5432), "" none */
	char hba_cidr[64]; /* postgresql: the clients let in over TCP (trust) */
	int max_conns;	   /* postgresql: its max_connections (0: 64), none reserved */
};

/* 0; 1 when the store cannot run on this machine at all (PostgreSQL's
 * server programs are not installed), -1 when starting it failed; a
 * message was printed for either. */
int store_env_start(struct store_env *e, const char *kind);
/* PostgreSQL listening on TCP addr:5432 too (and its unix socket), run in
 * network namespace netns (NULL: this one), letting in the clients of
 * cidr without a password.  0 or -1 as store_env_start. */
int store_env_start_tcp(struct store_env *e, const char *netns, const char *addr, const char *cidr);
/* store_env_start of PostgreSQL with max_connections n and no slots
 * reserved for superusers (the harness's role is one): a server a test
 * fills.  0 or -1 as store_env_start. */
int store_env_start_conns(struct store_env *e, int n);
void store_env_stop(struct store_env *e);
int store_env_submit(const struct store_env *e, uint64_t n);
int store_env_open(const struct store_env *e, struct mesh_job **j, const char *node, uint32_t max_attempts);
/* store_env_open with speculation's threshold floor spec_min_ns. */
int store_env_open_spec(const struct store_env *e, struct mesh_job **j, const char *node, uint64_t spec_min_ns);
/* postgresql: pg_ctl with args ("-m immediate restart") on the server. */
int store_env_pg_ctl(const struct store_env *e, const char *args);
/* postgresql: one value from psql as the superuser (-1: psql failed). */
long long store_env_sql(const struct store_env *e, const char *sql);
/* store_env_sql, or the test fails (psql failed). */
long long store_env_sql1(const struct store_env *e, const char *sql);
/* postgresql: the server's client backends but psql's (store_env_sql's
 * own): mesh's connections -- handles, a meshd's spares (-1: psql failed). */
long long store_env_client_backends(const struct store_env *e);
/* postgresql: the server's URL without the job (store_env names it
 * "#conf"), into buf. */
void store_env_base_url(const struct store_env *e, char *buf, size_t cap);
/* postgresql: how many DONE bits job has (each chunk's DONE is one bit). */
long long store_env_done_bits(const struct store_env *e, const char *job);

/* A conformance case (tests/unit/test_store_conf*.c): test conf_STORE_FN
 * runs static void conf_FN(const struct store_env *) on a fresh store of
 * kind STORE, skipped (saying why) where that store cannot run.  For
 * files that include runner/t.h. */
#define STORE_CONF(store, fn)                                                              \
	TEST(conf_##store##_##fn)                                                          \
	{                                                                                  \
		struct store_env e;                                                        \
		int rc_ = store_env_start(&e, #store);                                     \
		if (rc_ == 1)                                                              \
			SKIP_TOOL("the %s store cannot run here (see above)", #store);     \
		if (rc_)                                                                   \
			FAIL("cannot start the %s store", #store);                         \
		conf_##fn(&e);                                                             \
		store_env_stop(&e);                                                        \
	}

#endif
