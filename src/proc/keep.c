/* The keeper (proc.h): a process that outlives its creator and kills the
 * process groups the creator registered with it when the creator ends.
 * Both halves are here: the creator's (new, forget, free, and the record a
 * spawned child sends) and the keeper's loop, which runs in the mesh-init
 * binary (or in this binary through pidns.c's constructor). */
#include "proc/proc.h"

#include "base/buf.h"
#include "proc/spawn_int.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct mesh_proc_keeper {
	int fd;	   /* our end of the socket; the keeper's is its fd 3 */
	pid_t pid; /* the keeper */
};

/* One record on the socket: a group and +1 (registered) or -1 (forgotten),
 * both int32 in this machine's order (the two ends are one binary's
 * build or its mesh-init beside it). */
#define REC_LEN 8

static void rec_pack(unsigned char *p, pid_t pgid, int32_t op)
{
	int32_t g = (int32_t)pgid;
	memcpy(p, &g, 4);
	memcpy(p + 4, &op, 4);
}

void mesh__proc_keep_register(const struct mesh_proc_keeper *k)
{
	unsigned char rec[REC_LEN];
	/* In a clone that shares the spawner's memory: a raw call, no
	 * SIGPIPE (a keeper that died must not kill the child), no errno
	 * kept. */
	rec_pack(rec, (pid_t)syscall(SYS_getpid), 1);
	syscall(SYS_sendto, k->fd, rec, (size_t)REC_LEN, MSG_NOSIGNAL, NULL, 0);
}

void mesh_proc_keeper_forget(const struct mesh_proc_keeper *k, pid_t pgid)
{
	unsigned char rec[REC_LEN];
	if (!k || pgid <= 1)
		return;
	rec_pack(rec, pgid, -1);
	/* A keeper that died cannot kill anything any more: nothing to do. */
	while (send(k->fd, rec, REC_LEN, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

int mesh_proc_keeper_new(struct mesh_proc_spawner *sp, struct mesh_proc_keeper **out)
{
	int sv[2], rc;
	struct mesh_proc_keeper *k = calloc(1, sizeof *k);
	if (!k)
		return -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		rc = -errno;
		free(k);
		return rc;
	}
	char *const argv[] = {"mesh-init", MESH__PROC_KEEP_FLAG, NULL}, *const envp[] = {NULL};
	struct mesh_proc_fd fds[] = {{sv[1], 3}};
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = mesh__proc_init_path();
	o.argv = argv;
	o.envp = envp;
	o.fds = fds;
	o.nfds = 1;
	o.flags = MESH_PROC_OUTLIVE;
	rc = mesh_proc_spawn(sp, &o, &k->pid, NULL);
	close(sv[1]);
	if (rc < 0) {
		close(sv[0]);
		free(k);
		return rc;
	}
	k->fd = sv[0];
	*out = k;
	return 0;
}

void mesh_proc_keeper_free(struct mesh_proc_keeper *k)
{
	if (!k)
		return;
	close(k->fd);
	while (waitpid(k->pid, NULL, 0) < 0 && errno == EINTR)
		;
	free(k);
}

/* The keeper's loop: the set of registered groups, until the socket ends. */
void mesh__proc_keep_main(void)
{
	static const int quiet[] = {SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2};
	unsigned char buf[64 * REC_LEN];
	size_t have = 0, n = 0, cap = 0;
	pid_t *set = NULL;
	prctl(PR_SET_NAME, "mesh-keep");
	for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++)
		signal(quiet[i], SIG_IGN);
	for (;;) {
		ssize_t r = read(3, buf + have, sizeof buf - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
		size_t off = 0;
		for (; have - off >= REC_LEN; off += REC_LEN) {
			int32_t g, op;
			memcpy(&g, buf + off, 4);
			memcpy(&op, buf + off + 4, 4);
			if (op < 0) {
				for (size_t i = 0; i < n; i++)
					if (set[i] == g) {
						set[i] = set[--n];
						break;
					}
			} else if (g > 1) {
				pid_t *s2 = mesh_grow(set, &cap, n + 1, sizeof *s2);
				if (!s2) {
					/* Cannot remember it: kill it now rather
					 * than lose it. */
					kill(-g, SIGKILL);
					continue;
				}
				set = s2;
				set[n++] = g;
			}
		}
		memmove(buf, buf + off, have - off);
		have -= off;
	}
	/* The creator is gone, or let go of us: what is registered dies. */
	for (size_t i = 0; i < n; i++)
		kill(-set[i], SIGKILL);
	_exit(0);
}
