/* Resource limits of a worker, and what this machine can really enforce.
 *
 * Two mechanisms:
 * - rlimits, applied in the child before exec, always available:
 *   memory -> RLIMIT_DATA (private writable memory: heap and anonymous
 *   mappings; not RLIMIT_AS, which breaks CUDA's huge address-space
 *   reservations), open_files -> RLIMIT_NOFILE, processes -> RLIMIT_NPROC
 *   (which the kernel counts per user and does not check at all for a
 *   process with CAP_SYS_ADMIN or CAP_SYS_RESOURCE, e.g. root: then it is
 *   NOT enforced).  No rlimit caps a cpu share (RLIMIT_CPU caps cpu seconds).
 * - cgroup v2 (memory.max, cpu.max, pids.max; the child joins its group
 *   before exec), only where meshd's own cgroup is on a cgroup2 mount, has
 *   the controller enabled in its cgroup.subtree_control and is writable.
 *
 * A manifest limit that no mechanism can enforce is refused when the image is
 * prepared (mesh_limits_plan); nothing is reported as enforced unless it is. */
#ifndef MESH_HOST_LIMITS_H
#define MESH_HOST_LIMITS_H

#include "proc/proc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What a manifest asks for; 0 = no limit. */
struct mesh_limits {
	uint64_t memory;	/* bytes */
	uint32_t cpu_milli;	/* thousandths of a core */
	uint64_t open_files;
	uint64_t processes;
};

/* Bits of what is enforced, one per limit and mechanism. */
enum {
	MESH_LIM_MEMORY_RLIMIT = 1u << 0,
	MESH_LIM_NOFILE_RLIMIT = 1u << 1,
	MESH_LIM_NPROC_RLIMIT = 1u << 2,
	MESH_LIM_MEMORY_CGROUP = 1u << 3,
	MESH_LIM_CPU_CGROUP = 1u << 4,
	MESH_LIM_PIDS_CGROUP = 1u << 5,
};

/* How a worker's processes are held together (docs/host.md, "Containment"):
 * bits, both where both are possible. */
enum {
	/* Its own PID namespace behind mesh-init (proc.h): nothing of it
	 * outlives the worker, a stop, or meshd's death. */
	MESH_CONTAIN_PIDNS = 1u << 0,
	/* A cgroup v2 group of its own, ended by cgroup.kill at a stop's
	 * SIGKILL and after its death (not at meshd's death: no one is left to
	 * write cgroup.kill). */
	MESH_CONTAIN_CGROUP = 1u << 1,
	/* Neither: its process group and session; a child that calls
	 * setsid() escapes. */
};

/* This machine's means, found once by mesh_limits_detect. */
struct mesh_limits_caps {
	unsigned avail;		/* MESH_LIM_* bits this machine can enforce */
	char cgroup_dir[512];	/* meshd's cgroup2 directory ("" if none) */
	char cgroup_why[256];	/* why cgroup limits are (partly) unavailable; "" if all are */
	char nproc_why[128];	/* why RLIMIT_NPROC is not enforced; "" if it is */
	unsigned contain;	/* MESH_CONTAIN_* this machine allows */
	char contain_why[512];	/* why a means is missing; "" if both are there */
};

/* Looks at /proc/self/mountinfo, /proc/self/cgroup, the cgroup's
 * cgroup.subtree_control and this process's capabilities.  Containment is
 * tried for real: a PID namespace by mesh_proc_pidns_probe, a cgroup by
 * making (and removing) an empty group under meshd's and looking for its
 * cgroup.kill.  Never fails: what cannot be read or made is unavailable,
 * with the reason in the *_why fields.  root_override (tests; NULL
 * normally) replaces "/proc/self" as the directory holding mountinfo and
 * cgroup, and then no cgroup is tried. */
void mesh_limits_detect(struct mesh_limits_caps *caps, const char *root_override);

/* Chooses how each requested limit is enforced (cgroup first, then rlimit)
 * into *enforced (MESH_LIM_* bits).  0, or MESH_E_UNSUPPORTED with *err a
 * malloc'd message naming the first limit that cannot be enforced here and
 * why. */
int mesh_limits_plan(const struct mesh_limits *want, const struct mesh_limits_caps *caps, unsigned *enforced,
		     char **err);

/* "cgroup+pid-namespace", "pid-namespace", "cgroup" or "process-group". */
const char *mesh_limits_containment_name(unsigned contain);

/* Comma-separated names of the enforced bits, each saying what it bounds
 * ("memory:per-process data segment (rlimit),open_files:per-process
 * (rlimit)"), or "none"; writes at most cap bytes (NUL included). */
void mesh_limits_describe(unsigned enforced, char *out, size_t cap);

/* The enforced rlimits of want, for mesh_proc_opts.rlimits.  Returns how
 * many it wrote to out (at most 3). */
size_t mesh_limits_rlimits(const struct mesh_limits *want, unsigned enforced,
			   struct mesh_proc_rlimit out[MESH_PROC_RLIMITS_MAX]);

/* Whether a process (a native worker, an HTTP program) gets a cgroup of its
 * own: where its enforced limits need one, or for containment where no PID
 * namespace can be made.  The namespace already holds everything it starts,
 * and joining a new group makes the child wait for the kernel's cgroup
 * migration, an RCU grace period after an idle while (docs/host.md,
 * "Containment", has the cost measured). */
static inline int mesh_limits_want_cgroup(unsigned enforced, unsigned contain)
{
	return (enforced & (MESH_LIM_MEMORY_CGROUP | MESH_LIM_CPU_CGROUP | MESH_LIM_PIDS_CGROUP)) ||
	       ((contain & MESH_CONTAIN_CGROUP) && !(contain & MESH_CONTAIN_PIDNS));
}

/* Creates the worker's cgroup "<caps->cgroup_dir>/mesh-<tag>" and writes its
 * limits; *procs_fd receives an open fd of its cgroup.procs for the child to
 * join (write "0") before exec.  0 or -errno.  Untested: no machine this was
 * written on delegates cgroup v2 controllers. */
int mesh_limits_cgroup_create(const struct mesh_limits_caps *caps, const char *tag, const struct mesh_limits *want,
			      unsigned enforced, char *dir_out, size_t dir_cap, int *procs_fd);
/* Removes a worker cgroup created above: cgroup.kill first when kill_rest
 * (what is left in it is SIGKILLed), then rmdir.  0, or -EBUSY while
 * killed processes are still on their way out (call again later). */
int mesh_limits_cgroup_remove(const char *dir, int kill_rest);
/* SIGKILLs every process in the group dir (cgroup.kill).  0 or -errno. */
int mesh_limits_cgroup_kill(const char *dir);

/* Who a worker runs as (manifest `user`; docs/catalog.md). */
struct mesh_run_as {
	int set;	/* 0: as meshd itself (nothing to change) */
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	gid_t groups[MESH_PROC_GROUPS_MAX];
	char name[64];	/* the name, or the uid's digits */
};

/* Resolves user (a name or a uid's digits) for this meshd: 0 with *out
 * set, or a code with *err malloc'd.  As root: any user of the passwd
 * database, or any uid (one without an entry gets gid = uid and no
 * supplementary groups); its groups from getgrouplist.  Not as root: only
 * meshd's own user (out->set = 0); another is MESH_E_REFUSED ("... needs
 * meshd to run as root").  An unknown name: MESH_E_NOTFOUND. */
int mesh_limits_run_as(const char *user, struct mesh_run_as *out, char **err);

/* The user for a program without `user` when meshd runs as root:
 * $MESHD_DEFAULT_USER when set (the test runner sets "root": its test
 * directories are private to root), else "mesh" where that user exists,
 * else "nobody".  NULL when meshd is not root (a worker then runs as
 * meshd's own user). */
const char *mesh_limits_default_user(void);

#endif
