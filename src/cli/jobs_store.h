/* mesh submit|jobs|wait|results|cancel with --store URL (cmd_jobs_store.c):
 * the meshd jobs of a PostgreSQL store, straight from the database.  Each
 * returns the command's exit code, its messages printed. */
#ifndef MESH_CLI_JOBS_STORE_H
#define MESH_CLI_JOBS_STORE_H

#include "store/store_pg_results.h"

#include <stddef.h>
#include <stdint.h>

/* "running", "complete", "failed" (every chunk DONE or buried, some
 * buried) or "cancelled". */
const char *mesh__sjob_state(const struct mesh_pgr_job *j);
/* Prints the new job's id. */
int mesh__sjobs_submit(const char *url, const struct mesh_pgr_job *spec, const void *input, size_t len);
int mesh__sjobs_list(const char *url, int json);
int mesh__sjobs_wait(const char *url, uint64_t id, int quiet);
int mesh__sjobs_results(const char *url, uint64_t id, int no_wait);
int mesh__sjobs_cancel(const char *url, uint64_t id);

#endif
