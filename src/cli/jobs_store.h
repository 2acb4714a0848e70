/* mesh submit|jobs|wait|results|cancel with --store URL (cmd_jobs_store.c):
 * the meshd jobs of a PostgreSQL store, straight from the database.  Each
 * returns the command's exit code, its messages printed. */
#ifndef MESH_CLI_JOBS_STORE_H
#define MESH_CLI_JOBS_STORE_H

#include "exec/progress.h"
#include "store/store_pg_results.h"

#include <stddef.h>
#include <stdint.h>

/* "running", "complete", "failed" (every chunk DONE or buried, some
 * buried) or "cancelled". */
const char *mesh__sjob_state(const struct mesh_pgr_job *j);
/* Prints the new job's id. */
/* Prints the new job's id; with id set, gives it there too. */
int mesh__sjobs_submit(const char *url, const struct mesh_pgr_job *spec, const void *input, size_t len,
		       uint64_t *id);
int mesh__sjobs_list(const char *url, int json);
/* `mesh wait`'s progress line on stderr (cmd_jobs.c), for a meshd's job
 * and a store's alike: p's width and color are set here from the terminal
 * and NO_COLOR; final ends the line. */
void mesh__wait_draw(struct mesh__progress *p, int final);
/* Exit: 0 complete, 1 ended with buried chunks (each printed unless
 * quiet), 6 cancelled, 65 no such job; a progress bar on a terminal
 * unless quiet. */
int mesh__sjobs_wait(const char *url, uint64_t id, int quiet);
int mesh__sjobs_results(const char *url, uint64_t id, int no_wait);
int mesh__sjobs_cancel(const char *url, uint64_t id);

#endif
