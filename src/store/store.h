/* Where a job's lease state lives, for the file store: an ops table plus
 * its own state.  The durable half of a job (the completion journal) is the
 * journal module; the PostgreSQL store keeps both in the database
 * (store_pg.h).  The job layer (job/store_ops.h) puts either behind the
 * same calls.
 *
 * The file store keeps one lease file per held chunk copy:
 *   <lockdir>/<job>.<cid>.lease        the primary lease (slot 0)
 *   <lockdir>/<job>.<cid>.s<k>.lease   speculative copy k (slot k >= 1)
 * holding one checked line (docs/journal.md, "Lease files"), packed by
 * mesh_lease_format and unpacked by mesh_lease_parse only.
 * Every change of a lease file after its creation is made while holding
 * flock(LOCK_EX) on it, and every reader that acts on what it read (steal,
 * renew, release) re-reads under that lock; so of several stealers of one
 * expired lease exactly one wins, and a creator (O_CREAT|O_EXCL) writes its
 * stamp only into a still-empty file.  A file that does not parse counts
 * as expired (damage), and so does an empty one once it is older than
 * MESH_LEASE_EMPTY_GRACE_NS (a creator that died before writing); neither
 * stops the chunk from being leased again.
 *
 * When a lease is free (mesh_lease_free): its deadline passed -- judged by
 * CLOCK_BOOTTIME when the judge runs on the holder's boot (a wall-clock step
 * changes nothing), else by the wall clock plus MESH_LEASE_SKEW_NS -- or its
 * holder process is certainly gone (same boot, same PID namespace, and its
 * pid is free, a zombie, or a process started at another time).  Whatever
 * cannot be checked for certain (another machine, another PID namespace, a
 * line of format 1, a lease not bound to a process) waits for the
 * deadline. */
#ifndef MESH_STORE_STORE_H
#define MESH_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define MESH_NODE_MAX 64

/* How far apart the wall clocks of hosts sharing a lock directory may be:
 * a lease written on another boot is stolen only this long after its
 * deadline (docs/job.md). */
#define MESH_LEASE_SKEW_NS (5ull * 1000000000ull)
/* An empty lease file younger than this is a claimer's, between its
 * O_CREAT|O_EXCL and its write: it holds.  Older, its creator died before
 * writing, and it counts as expired. */
#define MESH_LEASE_EMPTY_GRACE_NS (2ull * 1000000000ull)

/* The process that holds a lease, as far as another one can check it.  A
 * field that is 0 (all-zero boot_id) is unknown, and an unknown fact never
 * lets a holder be judged gone. */
struct mesh_lease_holder {
	uint8_t boot_id[16]; /* /proc/sys/kernel/random/boot_id */
	uint64_t timens;     /* inode of /proc/self/ns/time: whose CLOCK_BOOTTIME */
	uint64_t pidns;	     /* inode of /proc/self/ns/pid: where pid means something */
	uint32_t pid;	     /* 0 = the lease is not bound to a process (it outlives it) */
	uint64_t pid_start;  /* field 22 of /proc/<pid>/stat: clock ticks after boot */
};

struct mesh_lease_stamp {
	uint64_t deadline_ns; /* wall clock */
	uint64_t started_ns;  /* wall clock */
	uint32_t attempt;
	uint64_t token;	      /* random; identifies one holding */
	char node[MESH_NODE_MAX + 1]; /* a label: never parsed */
	uint64_t boot_deadline_ns;    /* CLOCK_BOOTTIME of holder's boot; 0 = unknown */
	struct mesh_lease_holder holder;
};

/* "Now" as the judging process sees it. */
struct mesh_lease_clock {
	uint64_t wall_ns, boot_ns;
	struct mesh_lease_holder self;
};

struct mesh_store;

/* Batched leases: the chunks of a job are grouped in blocks of
 * MESH_LEASE_BLOCK (block b = cids b*64 .. b*64+63), and one lease may
 * cover any subset of one block (claim_block); its file says which (its
 * mask).  Who holds chunk cid:
 *   - while the lease of cid's block is live and its mask holds cid, the
 *     block's holder;
 *   - else whoever holds the primary lease of cid, as without blocks.
 * A claimer (or stealer) of a chunk lease writes its file and then looks
 * at the block: a live block of another whose mask holds cid wins (the
 * claimer removes its file and loses).  A claimer of a block writes the
 * block and then looks for chunk lease files among the chunks it wants:
 * those are left out, and the mask is written again without them.  Of two
 * such racers at least one sees the other.  A chunk let go of (a failure,
 * a hand-back) leaves the mask first.
 * The holder of a block keeps which chunks it holds in memory; a crash
 * leaves the block file, which is freed like any lease (its deadline, or
 * its holder certainly gone).  A block whose last chunk is let go is
 * released, not unlinked: rewritten under its lock to the free stamp
 * (deadlines 0, mask 0: anyone takes it over at once, as a fresh lease),
 * and its holder renames it (RENAME_NOREPLACE, under its lock) to the next
 * block it claims; so a locked open of a block file checks that the name
 * is still that file.  docs/journal.md, "Block leases". */
#define MESH_LEASE_BLOCK 64

struct mesh_store_ops {
	const char *name;
	/* Creates the lease of (cid, slot) if none exists.  0 = ours,
	 * 1 = ours over a free block lease that covered cid (slot 0: a steal),
	 * MESH_E_STATE = one exists (or a live block lease of another covers
	 * cid), -errno. */
	int (*claim)(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *mine);
	/* Takes over an existing lease that is free at now (mesh_lease_free,
	 * or garbled): 0 = ours (mine->attempt becomes the old attempt + 1 when
	 * the old stamp was readable), MESH_E_STATE = it is live (*seen filled;
	 * for slot 0 also when no chunk lease exists but a live block lease of
	 * another covers cid), -ENOENT = there is no lease (claim instead). */
	int (*steal)(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_clock *now,
		     struct mesh_lease_stamp *mine, struct mesh_lease_stamp *seen);
	/* Sets both deadlines of our lease (token match; boot_deadline_ns on
	 * the holder's boot).  0 or MESH_E_STATE. */
	int (*renew)(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token, uint64_t deadline_ns,
		     uint64_t boot_deadline_ns);
	/* Removes the lease: only when its token matches (token != 0), or
	 * whatever it holds (token == 0).  0 (also when absent) or -errno. */
	int (*release)(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token);
	/* Reads the lease: 0 with *st, -ENOENT, MESH_E_PARSE (garbled). */
	int (*read)(struct mesh_store *s, uint64_t cid, unsigned slot, struct mesh_lease_stamp *st);
	/* Calls fn for every primary lease of this job that is not free at
	 * now.  Cost: the leases present, never the job size. */
	int (*each_live)(struct mesh_store *s, const struct mesh_lease_clock *now,
			 void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg);
	/* Leases the chunks of want (bit i = cid block*64+i) in one block
	 * lease: a new one with *mine, a free one taken over (mine->attempt
	 * = old + 1), or, when this handle holds the block already, its own
	 * (deadlines moved to mine's when later).  *got = the chunks of want
	 * now held (those with a chunk lease left out); *mine = the block's
	 * stamp (its token renews and releases them).  0 = fresh, 1 = taken
	 * over, MESH_E_STATE (a live block of another, or nothing of want
	 * left), -errno.  renew and release of slot 0 work on block-held
	 * chunks too: release drops the chunk (the block goes with its last
	 * chunk); renew moves the block's deadlines, or, when the new deadline
	 * is earlier (a hand-back), moves the chunk to a chunk lease of its
	 * own with the same token.  A block whose last chunk goes is
	 * released (the free stamp) and kept for the handle's next claim
	 * (renamed); 0 = fresh also for a taken-over block that held
	 * nothing.  close unlinks every block and released file of the
	 * handle that is still its own. */
	int (*claim_block)(struct mesh_store *s, uint64_t block, uint64_t want, const struct mesh_lease_clock *now,
			   struct mesh_lease_stamp *mine, uint64_t *got);
	void (*close)(struct mesh_store *s);
};

struct mesh_store {
	const struct mesh_store_ops *ops;
};

/* mesh_store_file_open's flags. */
#define MESH_STORE_FILE_CREATE 1  /* create lockdir (mode 0700) when it is missing */
#define MESH_STORE_FILE_PRIVATE 2 /* lockdir is placed by the program inside a directory private
				   * to it: mesh_path_lockdir_private_ok, not the bare-name-or-/tmp/
				   * law (meshd's jobs, job.h lockdir_private) */
/* Opens the file store in lockdir for job name (flags: above; 1 is
 * CREATE alone).  The directory must be private to this user -- owned by
 * the effective uid, not writable by group or others, not a symlink -- or
 * anyone could plant or remove leases in it.  Errors: MESH_E_PATH (path
 * law, a symlink, or a name that is not [A-Za-z0-9_.-]{1,64}),
 * MESH_E_NOTPRIVATE, -errno. */
int mesh_store_file_open(struct mesh_store **out, const char *lockdir, const char *name, int flags);
/* Checks lockdir as mesh_store_file_open would, without creating it: 0
 * when it is private to this user or missing, else MESH_E_PATH,
 * MESH_E_NOTPRIVATE or -errno.  For a caller that names the directory in
 * its message before it opens a job. */
int mesh_store_file_check_dir(const char *lockdir);
/* Removes lockdir when it holds nothing but lease files (which it removes,
 * whatever job they belong to): for a lock directory that served one run.
 * flags: MESH_STORE_FILE_PRIVATE or 0, as given to open.  0, also when it
 * is missing; -ENOTEMPTY when another file is in it (then only lease files
 * are gone); MESH_E_PATH, MESH_E_NOTPRIVATE as for open (then nothing is
 * touched); -errno. */
int mesh_store_file_remove_dir(const char *lockdir, int flags);

/* The lease line codec (pure; fuzzed and tested as a table).  format
 * writes format 2 and returns the length written to buf (0 when cap is too
 * small; MESH_LEASE_LINE_MAX always fits); parse takes formats 1 and 2 (a
 * format-1 line has boot_deadline_ns 0 and an unknown holder) and returns 0
 * or MESH_E_PARSE. */
#define MESH_LEASE_LINE_MAX 320
size_t mesh_lease_format(char *buf, size_t cap, const struct mesh_lease_stamp *st);
int mesh_lease_parse(const char *buf, size_t n, struct mesh_lease_stamp *st);

/* The block lease file (docs/journal.md, "Block leases"): the lease line
 * of the block, then "mesh-block 1 <mask> <crc>\n" with the chunks it
 * holds (bit i = cid block*64+i, 16 lowercase hex digits; crc32c of the
 * second line before the crc).  format returns the length (0 when cap is
 * too small; MESH_LEASE_BLOCK_MAX always fits); parse: 0 or MESH_E_PARSE
 * (a block file that does not parse counts as expired). */
#define MESH_LEASE_BLOCK_MAX (MESH_LEASE_LINE_MAX + 48)
size_t mesh_lease_block_format(char *buf, size_t cap, const struct mesh_lease_stamp *st, uint64_t mask);
int mesh_lease_block_parse(const char *buf, size_t n, struct mesh_lease_stamp *st, uint64_t *mask);

/* The calling process as a holder: every fact it can read (pid bound). */
void mesh_lease_holder_self(struct mesh_lease_holder *h);
/* The clock of the calling process now, with self as the judge. */
void mesh_lease_clock_now(struct mesh_lease_clock *c, const struct mesh_lease_holder *self);
/* 1 when st's deadline has passed at now (pure): by CLOCK_BOOTTIME when
 * now.self is on the holder's boot and time namespace, else by the wall
 * clock plus MESH_LEASE_SKEW_NS. */
int mesh_lease_expired(const struct mesh_lease_stamp *st, const struct mesh_lease_clock *now);
/* 1 only when the holder process is certainly gone, as judged by self (a
 * process of the calling process's pid namespace and /proc); else 0. */
int mesh_lease_holder_gone(const struct mesh_lease_holder *h, const struct mesh_lease_holder *self);
/* 1 when the lease may be taken over: expired, or its holder is gone. */
int mesh_lease_free(const struct mesh_lease_stamp *st, const struct mesh_lease_clock *now);

/* A node name: 1..64 bytes of [A-Za-z0-9_.:@-]. */
int mesh_node_name_ok(const char *s);
/* A job name: 1..64 bytes of [A-Za-z0-9_.-], not starting with '.'. */
int mesh_job_name_ok(const char *s);

#endif
