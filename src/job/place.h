/* place: which node should run a speculative copy of a straggling chunk
 * (LATE's idea: the copy goes to the node expected to finish it first, and
 * not at all when the holder is expected to finish first), and how many
 * chunks a node takes at once (its share of the speed of all nodes).  Pure
 * functions over measured speeds, tested as tables. */
#ifndef MESH_JOB_PLACE_H
#define MESH_JOB_PLACE_H

#include <stddef.h>
#include <stdint.h>

struct mesh_place_node {
	uint64_t mean_ns; /* mean chunk duration measured on this node */
	uint64_t samples; /* completions behind mean_ns; 0 = unknown */
};

/* Expected duration of a chunk on node: its mean, or typical_ns (the job's
 * median) when the node has no measurement. */
uint64_t mesh_place_estimate(const struct mesh_place_node *node, uint64_t typical_ns);

/* Time the holder still needs, having run elapsed_ns: its estimate minus
 * elapsed while it is within its estimate; past it, as long again as it has
 * run (a chunk that overran its node's mean tends to run long). */
uint64_t mesh_place_remaining(const struct mesh_place_node *holder, uint64_t typical_ns, uint64_t elapsed_ns);

/* Index of the candidate (idle node) expected to finish the chunk first,
 * or -1 when none would finish before the holder (or ncand == 0).  Ties go
 * to the lower index. */
int mesh_place(const struct mesh_place_node *holder, uint64_t elapsed_ns, const struct mesh_place_node *cands,
	       size_t ncand, uint64_t typical_ns);

/* How many chunks a node should take at once when it asks for k: k scaled
 * by its speed over the fastest node's (est(fastest) / est(self), rounded
 * up), between 1 and k, so that a slow host does not sit on many chunks
 * the fast ones would finish sooner.  nodes[0..n-1] are every node of the
 * job, self one of them; estimates as mesh_place_estimate.  k when self
 * has no measurement yet. */
size_t mesh_place_batch(const struct mesh_place_node *nodes, size_t n, size_t self, size_t k, uint64_t typical_ns);

#endif
