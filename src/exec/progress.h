/* The progress line of `mesh run` (a pure formatter, so it can be tested as
 * a table): "[#####-----] 123/400 30%  41.2/s  ETA 0:07  2 running  1 failed". */
#ifndef MESH_EXEC_PROGRESS_H
#define MESH_EXEC_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

struct mesh__progress {
	uint64_t done, total;	/* journal totals */
	uint64_t done_at_start;	/* DONE when this run began: the rate counts only this run's share */
	uint64_t running, failed; /* failed = buried chunks */
	uint64_t elapsed_ns;
	unsigned width;		/* terminal columns; 0 = 80 */
	int color;
	/* The words after the two counts; NULL: "running" and "failed" (mesh
	 * run, where a leased chunk is a running command).  mesh wait says
	 * "in flight" (chunks sent to workers, several a worker) and "buried". */
	const char *running_word, *failed_word;
};

/* Writes the line (no "\r", no newline) into buf, NUL-terminated,
 * truncated to cap - 1; returns its length.  The ETA is "--:--" until a
 * rate is known. */
size_t mesh__progress_format(char *buf, size_t cap, const struct mesh__progress *p);

#endif
