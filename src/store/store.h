/* Where a job's lease state lives.  A store is an ops table plus its own
 * state, so that another backend (PostgreSQL, later) can sit behind the same
 * calls; only the `file` store exists now.  The durable half of a job (the
 * completion journal) is the journal module for the file store.
 *
 * The file store keeps one lease file per held chunk copy:
 *   <lockdir>/<job>.<cid>.lease        the primary lease (slot 0)
 *   <lockdir>/<job>.<cid>.s<k>.lease   speculative copy k (slot k >= 1)
 * holding one checked line (docs/journal.md, "Lease files"):
 *   mesh-lease 1 <deadline_ns> <started_ns> <attempt> <token hex16> <node> <crc32c hex8>\n
 * Every change of a lease file after its creation is made while holding
 * flock(LOCK_EX) on it, and every reader that acts on what it read (steal,
 * renew, release) re-reads under that lock; so of several stealers of one
 * expired lease exactly one wins, and a creator (O_CREAT|O_EXCL) writes its
 * stamp only into a still-empty file.  A file that is empty or does not
 * parse counts as expired (a creator that died before writing, or damage);
 * it never stops the chunk from being leased again. */
#ifndef MESH_STORE_STORE_H
#define MESH_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define MESH_NODE_MAX 64

struct mesh_lease_stamp {
	uint64_t deadline_ns; /* wall clock */
	uint64_t started_ns;  /* wall clock */
	uint32_t attempt;
	uint64_t token;	      /* random; identifies one holding */
	char node[MESH_NODE_MAX + 1];
};

struct mesh_store;

struct mesh_store_ops {
	const char *name;
	/* Creates the lease of (cid, slot) if none exists.  0 = ours,
	 * MESH_E_STATE = one exists, -errno. */
	int (*claim)(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *mine);
	/* Takes over an existing lease that expired before now (or is
	 * garbled): 0 = ours (mine->attempt becomes the old attempt + 1 when
	 * the old stamp was readable), MESH_E_STATE = it is live (*seen filled),
	 * -ENOENT = there is no lease (claim instead). */
	int (*steal)(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t now_ns, struct mesh_lease_stamp *mine,
		     struct mesh_lease_stamp *seen);
	/* Sets the deadline of our lease (token match).  0 or MESH_E_STATE. */
	int (*renew)(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token, uint64_t deadline_ns);
	/* Removes the lease: only when its token matches (token != 0), or
	 * whatever it holds (token == 0).  0 (also when absent) or -errno. */
	int (*release)(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token);
	/* Reads the lease: 0 with *st, -ENOENT, MESH_E_PARSE (garbled). */
	int (*read)(struct mesh_store *s, uint64_t cid, unsigned slot, struct mesh_lease_stamp *st);
	/* Calls fn for every primary lease of this job that is live at now_ns.
	 * Cost: the leases present, never the job size. */
	int (*each_live)(struct mesh_store *s, uint64_t now_ns,
			 void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg);
	void (*close)(struct mesh_store *s);
};

struct mesh_store {
	const struct mesh_store_ops *ops;
};

/* Opens the file store in lockdir (created, mode 0755, when create is set
 * and it is missing) for job name.  Errors: MESH_E_PATH (path law, or a
 * name that is not [A-Za-z0-9_.-]{1,64}), -errno. */
int mesh_store_file_open(struct mesh_store **out, const char *lockdir, const char *name, int create);

/* The lease line codec (pure; fuzzed and tested as a table).  format
 * returns the length written to buf (>= 128 bytes), parse 0 or
 * MESH_E_PARSE. */
size_t mesh_lease_format(char *buf, size_t cap, const struct mesh_lease_stamp *st);
int mesh_lease_parse(const char *buf, size_t n, struct mesh_lease_stamp *st);

/* A node name: 1..64 bytes of [A-Za-z0-9_.:@-]. */
int mesh_node_name_ok(const char *s);
/* A job name: 1..64 bytes of [A-Za-z0-9_.-], not starting with '.'. */
int mesh_job_name_ok(const char *s);

#endif
