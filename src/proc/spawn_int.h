/* Between spawn.c (the spawner and the program's child) and pidns.c
 * (mesh-init): what the clone children share with the spawner thread. */
#ifndef MESH_PROC_SPAWN_INT_H
#define MESH_PROC_SPAWN_INT_H

#include "proc/proc.h"

#include <stdint.h>
#include <sys/types.h>

#define MESH__PROC_STACK (256u * 1024)

/* The clone children's arguments; they live on the spawner's stack and
 * the children write into them (CLONE_VM) while the spawner sleeps. */
struct mesh__proc_cargs {
	const struct mesh_proc_opts *o;
	pid_t parent; /* the program's expected parent (1 under mesh-init) */
	int errfd, devnull;
	uint64_t mask;
	/* MESH_PROC_PIDNS only: */
	void *stack2;	      /* the program's stack while mesh-init waits for its exec */
	int alivefd;	      /* a pidfd of the spawner's process (-1: none) */
	const char *maps[3];  /* setgroups, uid_map, gid_map; maps[0] NULL: no user namespace */
	volatile pid_t outer; /* the program's pid as seen from the spawner */
	volatile int failed;  /* the program's child failed before its exec */
};

int mesh__proc_child_main(void *arg);
/* Every disposition SIG_DFL (with MESH_PROC_INHERIT, ignored ones other
 * than SIGPIPE/SIGCHLD stay ignored), then the mask; raw system calls. */
void mesh__proc_child_signals(unsigned flags, uint64_t mask);

/* mesh-init before its exec (pidns.c): the clone entry of a child made
 * with CLONE_NEWPID. */
int mesh__proc_init_child(void *arg);
/* The clone flags that make a PID namespace here (CLONE_NEWPID, maybe with
 * CLONE_NEWUSER), or 0 when none can be made; probed once. */
int mesh__proc_ns_flags(void);
/* argv[1] of mesh-init's exec (argv[2]: the program's pid in the namespace). */
#define MESH__PROC_INIT_FLAG "--mesh-proc-init"
/* argv[1] of the keeper's exec (keep.c; fd 3 its socket). */
#define MESH__PROC_KEEP_FLAG "--mesh-proc-keep"
/* The keeper's loop (keep.c): never returns. */
void mesh__proc_keep_main(void) __attribute__((noreturn));
/* In a spawned child (spawn.c): registers the child's own group with k. */
void mesh__proc_keep_register(const struct mesh_proc_keeper *k);
/* The init loop of a PID namespace (pidns.c): waits for every signal and
 * passes it to the program's group (pid prog), reaps every child, and ends
 * with the program's status; mesh-init's main, in meshd's binary or its own
 * (src/proc/init_main.c). */
void mesh__proc_init_main(pid_t prog) __attribute__((noreturn));
/* The binary mesh-init execs (the mesh-init beside this one, or
 * /proc/self/exe). */
const char *mesh__proc_init_path(void);
/* The user namespace's map lines for this process's uid and gid, into
 * bufs of 32 bytes each; maps[] points at them. */
void mesh__proc_ns_maps(char bufs[3][32], const char *maps[3]);

#endif
