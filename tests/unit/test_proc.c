#include "base/clock.h"
#include "proc/proc.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Runs sh -c script with stdout (and stderr) to out. */
static int spawn_sh(struct mesh_proc_spawner *sp, const char *script, int out, unsigned flags, pid_t *pid)
{
	char *const argv[] = {"sh", "-c", (char *)script, NULL};
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = "/bin/sh", o.argv = argv, o.envp = environ, o.out_fd = out, o.flags = flags;
	return mesh_proc_spawn(sp, &o, pid, NULL);
}

static int wait_code(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return mesh_proc_exit_code(st);
}

static char *read_all(int fd)
{
	static char buf[8192];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof buf - 1 && ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
		if (r > 0)
			n += (size_t)r;
	buf[n] = 0;
	return buf;
}

TEST(proc_spawn_group_fds_and_failure)
{
	struct mesh_proc_spawner *sp;
	ASSERT_EQ(mesh_proc_spawner_new(&sp), 0);
	int p[2];
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	pid_t pid;
	/* Its own process group; with MESH_PROC_SESSION its own session too. */
	ASSERT_EQ(spawn_sh(sp, "ps -o pgid=,sid= -p $$; echo $$", p[1], 0, &pid), 0);
	EXPECT_EQ(wait_code(pid), 0);
	ASSERT_EQ(spawn_sh(sp, "ps -o pgid=,sid= -p $$; echo $$", p[1], MESH_PROC_SESSION, &pid), 0);
	EXPECT_EQ(wait_code(pid), 0);
	close(p[1]);
	long pg1, sid1, me1, pg2, sid2, me2;
	ASSERT_EQ(sscanf(read_all(p[0]), "%ld %ld %ld %ld %ld %ld", &pg1, &sid1, &me1, &pg2, &sid2, &me2), 6);
	close(p[0]);
	EXPECT_EQ(pg1, me1);
	EXPECT_NE(sid1, me1);
	EXPECT_EQ(pg2, me2);
	EXPECT_EQ(sid2, me2);

	/* An extra fd lands where asked, an rlimit is set, stdin is /dev/null. */
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	char *const argv[] = {"sh", "-c", "ulimit -n >&5; cat; echo end >&5", NULL};
	struct mesh_proc_fd fds[1] = {{p[1], 5}};
	struct mesh_proc_rlimit rl[1] = {{RLIMIT_NOFILE, 17}};
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = "/bin/sh", o.argv = argv, o.envp = environ, o.fds = fds, o.nfds = 1, o.rlimits = rl, o.nrlimits = 1;
	int pidfd = -1;
	ASSERT_EQ(mesh_proc_spawn(sp, &o, &pid, &pidfd), 0);
	EXPECT_TRUE(pidfd >= 0);
	EXPECT_TRUE(fcntl(pidfd, F_GETFD) & FD_CLOEXEC);
	close(pidfd);
	EXPECT_EQ(wait_code(pid), 0);
	close(p[1]);
	EXPECT_STREQ(read_all(p[0]), "17\nend\n");
	close(p[0]);

	/* An exec failure comes back as the child's errno, already reaped. */
	char *const nope[] = {"nope", NULL};
	o = (struct mesh_proc_opts)MESH_PROC_OPTS_INIT;
	o.path = "/nonexistent/nope", o.argv = nope, o.envp = environ;
	EXPECT_EQ(mesh_proc_spawn(sp, &o, &pid, NULL), -ENOENT);
	int st;
	EXPECT_EQ(waitpid(-1, &st, WNOHANG), -1);
	mesh_proc_spawner_free(sp);

	char *path = NULL;
	EXPECT_EQ(mesh_proc_resolve("sh", &path), 0);
	EXPECT_TRUE(path && strchr(path, '/'));
	free(path);
	EXPECT_EQ(mesh_proc_resolve("no-such-command-xyz", &path), -ENOENT);
	EXPECT_EQ(mesh_proc_resolve("/etc", &path), -EACCES);
}

/* Hex masks of the child's SigIgn and SigBlk lines. */
static void child_sigs(struct mesh_proc_spawner *sp, unsigned flags, unsigned long long *ign, unsigned long long *blk)
{
	int p[2];
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	pid_t pid;
	ASSERT_EQ(spawn_sh(sp, "exec grep -E '^Sig(Ign|Blk)' /proc/self/status", p[1], flags, &pid), 0);
	close(p[1]);
	EXPECT_EQ(wait_code(pid), 0);
	char *s = read_all(p[0]);
	close(p[0]);
	char *b = strstr(s, "SigBlk:"), *i = strstr(s, "SigIgn:");
	ASSERT_TRUE(b && i);
	*blk = strtoull(b + 7, NULL, 16);
	*ign = strtoull(i + 7, NULL, 16);
}

TEST(proc_spawn_signals_clean_or_inherited)
{
	signal(SIGINT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	struct mesh_proc_spawner *sp;
	ASSERT_EQ(mesh_proc_spawner_new(&sp), 0);
	unsigned long long ign, blk, bit_int = 1ull << (SIGINT - 1), bit_pipe = 1ull << (SIGPIPE - 1);
	/* Like a shell: an ignored SIGINT stays ignored, SIGPIPE does not; the
	 * creator's mask is kept. */
	child_sigs(sp, MESH_PROC_INHERIT, &ign, &blk);
	EXPECT_TRUE(ign & bit_int);
	EXPECT_FALSE(ign & bit_pipe);
	EXPECT_UEQ(blk, 1ull << (SIGUSR1 - 1));
	/* Clean: everything default and unblocked. */
	child_sigs(sp, 0, &ign, &blk);
	EXPECT_UEQ(ign, 0);
	EXPECT_UEQ(blk, 0);
	mesh_proc_spawner_free(sp);
}

TEST(proc_exit_code_mapping)
{
	struct mesh_proc_spawner *sp;
	ASSERT_EQ(mesh_proc_spawner_new(&sp), 0);
	static const struct {
		const char *script;
		int code;
	} cases[] = {
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -TERM $$", 128 + SIGTERM},
		{"kill -KILL $$", 128 + SIGKILL},
		{"kill -SEGV $$", 128 + SIGSEGV},
	};
	int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		pid_t pid;
		/* Both forms: a wait status and waitid's siginfo. */
		ASSERT_EQ(spawn_sh(sp, cases[i].script, nul, 0, &pid), 0);
		EXPECT_EQ(wait_code(pid), cases[i].code);
		ASSERT_EQ(spawn_sh(sp, cases[i].script, nul, 0, &pid), 0);
		siginfo_t si;
		memset(&si, 0, sizeof si);
		ASSERT_EQ(waitid(P_PID, (id_t)pid, &si, WEXITED), 0);
		EXPECT_EQ(mesh_proc_exit_code_si(&si), cases[i].code);
	}
	close(nul);
	mesh_proc_spawner_free(sp);
}

TEST(proc_tail_keeps_exactly_30_lines)
{
	static struct mesh_proc_tail t;
	const char *view[MESH_PROC_TAIL_LINES + 1];
	mesh_proc_tail_reset(&t);
	EXPECT_UEQ(mesh_proc_tail_lines(&t, view), 0);
	EXPECT_TRUE(view[0] == NULL);
	char *txt = mesh_proc_tail_text(&t);
	EXPECT_STREQ(txt, "");
	free(txt);
	/* 45 lines fed in uneven pieces: the last 30 stay, oldest first. */
	char all[1024];
	size_t n = 0;
	for (int i = 0; i < 45; i++)
		n += (size_t)snprintf(all + n, sizeof all - n, "line %d\n", i);
	for (size_t off = 0; off < n; off += 7)
		mesh_proc_tail_feed(&t, all + off, n - off < 7 ? n - off : 7);
	ASSERT_UEQ(mesh_proc_tail_lines(&t, view), 30);
	EXPECT_STREQ(view[0], "line 15");
	EXPECT_STREQ(view[29], "line 44");
	EXPECT_TRUE(view[30] == NULL);
	txt = mesh_proc_tail_text(&t);
	EXPECT_TRUE(strncmp(txt, "line 15\nline 16\n", 16) == 0);
	EXPECT_UEQ(strlen(txt), strlen(strstr(all, "line 15\n")));
	free(txt);
	/* An unfinished line counts as one of the 30: the oldest goes. */
	mesh_proc_tail_feed(&t, "half\x1b[1m", 8);
	ASSERT_UEQ(mesh_proc_tail_lines(&t, view), 30);
	EXPECT_STREQ(view[0], "line 16");
	EXPECT_STREQ(view[29], "half?[1m");
	/* A long line keeps its first MESH_PROC_TAIL_LINE_MAX bytes. */
	char big[2000];
	memset(big, 'x', sizeof big);
	big[sizeof big - 1] = '\n';
	mesh_proc_tail_feed(&t, big, sizeof big);
	ASSERT_UEQ(mesh_proc_tail_lines(&t, view), 30);
	EXPECT_UEQ(strlen(view[29]), MESH_PROC_TAIL_LINE_MAX);
	EXPECT_TRUE(strncmp(view[29], "half?[1mxxx", 11) == 0);
	mesh_proc_tail_reset(&t);
	EXPECT_UEQ(mesh_proc_tail_lines(&t, view), 0);
}

TEST(proc_stop_kills_group_after_grace)
{
	/* Orphans of the group come back to us, so their end is an event. */
	ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	struct mesh_proc_spawner *sp;
	ASSERT_EQ(mesh_proc_spawner_new(&sp), 0);
	int p[2];
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	pid_t pid;
	/* The leader and a member of its group ignore SIGTERM. */
	ASSERT_EQ(spawn_sh(sp, "trap '' TERM; sleep 30 & echo ready; wait", p[1], 0, &pid), 0);
	close(p[1]);
	char buf[16];
	ASSERT_EQ(read(p[0], buf, 6), 6);
	struct mesh_proc_stop st;
	uint64_t t0 = mesh_mono_ns(), grace = 200 * MESH_NS_PER_MS;
	mesh_proc_stop_begin(&st, pid, SIGTERM, grace, t0);
	EXPECT_FALSE(st.killed);
	EXPECT_EQ(mesh_proc_stop_step(&st, t0 + grace - 1), 0);
	EXPECT_FALSE(mesh_proc_group_gone(pid));
	/* Still there once the grace is over: SIGTERM did nothing. */
	while (mesh_mono_ns() < t0 + grace)
		usleep(10000);
	int wst;
	EXPECT_EQ(waitpid(pid, &wst, WNOHANG), 0);
	EXPECT_EQ(mesh_proc_stop_step(&st, mesh_mono_ns()), 1);
	EXPECT_TRUE(st.killed);
	EXPECT_EQ(mesh_proc_stop_step(&st, mesh_mono_ns()), 0); /* once */
	EXPECT_EQ(wait_code(pid), 128 + SIGKILL);
	/* The sleep in its group got SIGKILL too. */
	pid_t q;
	int n = 0;
	while ((q = waitpid(-1, &wst, 0)) > 0) {
		EXPECT_EQ(mesh_proc_exit_code(wst), 128 + SIGKILL);
		n++;
	}
	EXPECT_EQ(n, 1);
	EXPECT_TRUE(mesh_proc_group_gone(pid));
	EXPECT_EQ(mesh_proc_kill_group(pid, 0), -ESRCH);
	EXPECT_EQ(mesh_proc_kill_group(0, SIGKILL), -EINVAL);
	close(p[0]);
	mesh_proc_spawner_free(sp);
}

struct spawn_req {
	struct mesh_proc_spawner *sp;
	int in, out;
	pid_t pid;
	int rc;
};

static void *spawn_thread(void *arg)
{
	struct spawn_req *r = arg;
	char *const argv[] = {"sh", "-c", "read x; echo alive; exec sleep 30", NULL};
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = "/bin/sh", o.argv = argv, o.envp = environ, o.in_fd = r->in, o.out_fd = r->out;
	r->rc = mesh_proc_spawn(r->sp, &o, &r->pid, NULL);
	return NULL;
}

TEST(proc_pdeathsig_from_long_lived_thread)
{
	ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	int rep[2];
	ASSERT_EQ(pipe2(rep, O_CLOEXEC), 0);
	pid_t parent = fork();
	ASSERT_TRUE(parent >= 0);
	if (parent == 0) {
		/* The parent: asks for the spawn from a thread that then ends. */
		int in[2], out[2];
		struct spawn_req r = {0};
		if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || mesh_proc_spawner_new(&r.sp) < 0)
			_exit(1);
		r.in = in[0], r.out = out[1];
		pthread_t th;
		if (pthread_create(&th, NULL, spawn_thread, &r) || pthread_join(th, NULL) || r.rc)
			_exit(2);
		/* The asking thread is gone; the child must not be. */
		char line[16] = {0};
		if (write(in[1], "go\n", 3) != 3 || read(out[0], line, sizeof line - 1) != 6 || strcmp(line, "alive\n"))
			_exit(3);
		if (write(rep[1], &r.pid, sizeof r.pid) != (ssize_t)sizeof r.pid)
			_exit(4);
		_exit(0); /* the spawner thread dies with this process */
	}
	close(rep[1]);
	EXPECT_EQ(wait_code(parent), 0);
	pid_t child = 0;
	ASSERT_EQ(read(rep[0], &child, sizeof child), (ssize_t)sizeof child);
	close(rep[0]);
	/* Reparented to us when its parent died, and killed by PDEATHSIG. */
	EXPECT_EQ(wait_code(child), 128 + SIGKILL);
}
