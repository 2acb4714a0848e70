/* meshd against other users on the same machine: a squatted or foreign
 * socket directory, a socket served by another uid, workers reaching
 * meshd's slot memfds through /proc, and worker logs (symlinks, mode,
 * size).  The tests run as root and play the other user as uid 4242. */
#include "host/image.h"
#include "integration/contain_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define OTHER 4242

static char out[65536];

/* In a child: become uid/gid OTHER for good, or _exit(120). */
static void become_other(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(OTHER, OTHER, OTHER) < 0 || setresuid(OTHER, OTHER, OTHER) < 0)
		_exit(120);
}

/* meshd run to its answer (5 s at most): its exit status, stderr in out. */
static int meshd_once(void)
{
	mkdir("catalog", 0755);
	mkdir("logs", 0755);
	return t_sh(out, sizeof out, 1, "timeout 5 '%s' --catalog catalog --logs logs --socket " SOCK, t_bin("meshd"));
}

TEST(meshd_refuses_world_writable_socket_dir)
{
	mkdir("run", 0700);
	ASSERT_EQ(chmod("run", 0777), 0);
	EXPECT_EQ(meshd_once(), 77); /* MESH_EXIT_NOPERM */
	EXPECT_CONTAINS(out, "refusing socket directory 'run'");
	EXPECT_CONTAINS(out, "not writable by group or others");
	EXPECT_EQ(access(SOCK, F_OK), -1);
}

TEST(meshd_refuses_socket_dir_of_another_user)
{
	mkdir("run", 0700);
	ASSERT_EQ(chown("run", OTHER, OTHER), 0);
	EXPECT_EQ(meshd_once(), 77);
	EXPECT_CONTAINS(out, "refusing socket directory 'run'");
	EXPECT_CONTAINS(out, "must be owned by uid 0");
	EXPECT_EQ(access(SOCK, F_OK), -1);
}

TEST(meshd_refuses_symlinked_socket_dir)
{
	mkdir("elsewhere", 0700);
	ASSERT_EQ(symlink("elsewhere", "run"), 0);
	EXPECT_EQ(meshd_once(), 65); /* MESH_EXIT_DATAERR: the path is refused */
	EXPECT_CONTAINS(out, "refusing socket directory 'run'");
	EXPECT_EQ(access("elsewhere/meshd.sock", F_OK), -1);
}

TEST(meshd_creates_its_socket_dir_private_and_socket_0600)
{
	struct stat st;
	pid_t pid = meshd_t_start(.wait_accept = 1);
	ASSERT_EQ(lstat("run", &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0700);
	ASSERT_EQ(lstat(SOCK, &st), 0);
	EXPECT_TRUE(S_ISSOCK(st.st_mode));
	EXPECT_EQ(st.st_mode & 0777, 0600);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* A listener that is not us: bound here as root, listening as OTHER (the
 * peer credentials are taken at listen), answering any request with 200. */
static pid_t foreign_listener(int report_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int ready[2];
	char c;
	mkdir("run", 0700);
	strcpy(sa.sun_path, SOCK);
	ASSERT_EQ(pipe(ready), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		char buf[65536];
		size_t got = 0;
		int ls = socket(AF_UNIX, SOCK_STREAM, 0), cs;
		if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0)
			_exit(122);
		become_other();
		if (listen(ls, 4) < 0 || write(ready[1], "r", 1) != 1)
			_exit(123);
		cs = accept(ls, NULL, NULL);
		while (cs >= 0 && got < sizeof buf - 1) {
			struct pollfd p = {.fd = cs, .events = POLLIN};
			if (poll(&p, 1, 5000) != 1)
				break;
			ssize_t n = read(cs, buf + got, sizeof buf - 1 - got);
			if (n <= 0)
				break;
			got += (size_t)n;
			buf[got] = 0;
			if (strstr(buf, "\r\n\r\n")) {
				const char *r = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
						"Content-Length: 5\r\nConnection: close\r\n\r\npwned";
				if (write(cs, r, strlen(r)) < 0)
					break;
				/* Take the body too, if any, until the client closes. */
			}
		}
		if (write(report_fd, &got, sizeof got) != sizeof got)
			_exit(124);
		_exit(0);
	}
	close(ready[1]);
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	close(ready[0]);
	return pid;
}

TEST(mesh_refuses_a_socket_served_by_another_user)
{
	int rep[2], st;
	size_t got = 99;
	ASSERT_EQ(pipe(rep), 0);
	pid_t pid = foreign_listener(rep[1]);
	close(rep[1]);
	int rc = t_sh(out, sizeof out, 1, "'%s' call echo 'secret payload' --socket " SOCK, t_bin("mesh"));
	EXPECT_EQ(rc, 77); /* MESH_EXIT_NOPERM */
	EXPECT_CONTAINS(out, "mesh: refusing to talk to 'run/meshd.sock'");
	EXPECT_CONTAINS(out, "served by another user");
	EXPECT_TRUE(strstr(out, "pwned") == NULL);
	ASSERT_EQ(read(rep[0], &got, sizeof got), (ssize_t)sizeof got);
	EXPECT_UEQ(got, 0); /* not one byte of the request reached it */
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A directory under /tmp that OTHER owns (the test's own is root's 0700). */
static void other_dir(char *dir, size_t n)
{
	snprintf(dir, n, "/tmp/mesh-sec-XXXXXX");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_EQ(chmod(dir, 0755), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "mkdir '%s/catalog' '%s/logs' && chown -R %d:%d '%s'", dir, dir, OTHER,
		       OTHER, dir),
		  0);
}

TEST(meshd_slots_are_not_reachable_through_proc_by_its_uid)
{
	char dir[64], p[128];
	struct stat st;
	int status;
	other_dir(dir, sizeof dir);
	pid_t meshd = meshd_t_start(.dir = dir, .child = become_other, .wait_accept = 1);
	/* The shell exec'd meshd: same pid. */
	int fd = contain_t_memfd_of(meshd);
	ASSERT_GE(fd, 0);
	snprintf(p, sizeof p, "/proc/%d/fd", (int)meshd);
	ASSERT_EQ(stat(p, &st), 0);
	EXPECT_EQ((int)st.st_uid, 0); /* non-dumpable: /proc/<pid> belongs to root */
	snprintf(p, sizeof p, "/proc/%d/fd/%d", (int)meshd, fd);
	pid_t c = fork();
	ASSERT_GE(c, 0);
	if (c == 0) {
		become_other();
		int f = open(p, O_RDWR);
		_exit(f >= 0 ? 1 : errno == EACCES || errno == EPERM ? 0 : 2);
	}
	ASSERT_EQ(waitpid(c, &status, 0), c);
	EXPECT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0); /* 1: a same-uid process opened a slot */
	EXPECT_EQ(meshd_t_stop(meshd), 0);
	t_sh(out, sizeof out, 1, "rm -rf '%s'", dir);
}

/* A program that prints 40 numbered lines and dies before ready. */
static void add_talker(void)
{
	meshd_t_add_program(out, sizeof out, "talker", "/bin/sh",
			    "args = [\"-c\", \"i=1; while [ $i -le 40 ]; do echo talk-line-$i; i=$((i+1)); done; exit 3\"]\n");
}

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

TEST(meshd_worker_log_refuses_a_symlink)
{
	add_talker();
	mkdir("logs", 0755);
	t_write_file("target", "untouched\n");
	ASSERT_EQ(symlink("../target", "logs/talker.log"), 0);
	pid_t pid = meshd_t_start(.wait_accept = 1);
	EXPECT_EQ(mesh("load talker"), 0);
	EXPECT_NE(mesh("start talker"), 0);
	EXPECT_CONTAINS(out, "refusing log 'logs/talker.log': a symlink");
	char *t = t_read_file("target", NULL);
	EXPECT_STREQ(t, "untouched\n");
	free(t);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

TEST(meshd_worker_log_is_private)
{
	struct stat st;
	add_talker();
	pid_t pid = meshd_t_start(.wait_accept = 1);
	EXPECT_EQ(mesh("load talker"), 0);
	EXPECT_NE(mesh("start talker"), 0);
	ASSERT_EQ(lstat("logs/talker.log", &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

TEST(meshd_worker_log_rotates_at_log_max)
{
	struct stat st;
	add_talker();
	pid_t pid = meshd_t_start(.args = "--log-max 200", .wait_accept = 1);
	EXPECT_EQ(mesh("load talker"), 0);
	/* Two runs of ~560 bytes each into a 200-byte log. */
	EXPECT_NE(mesh("start talker"), 0);
	EXPECT_CONTAINS(out, "talk-line-40");
	EXPECT_NE(mesh("start talker"), 0);
	/* The crash tail comes from memory, whole, whatever the file did. */
	EXPECT_CONTAINS(out, "talk-line-40");
	EXPECT_CONTAINS(out, "talk-line-11");
	ASSERT_EQ(lstat("logs/talker.log", &st), 0);
	EXPECT_LE(st.st_size, 1000);
	ASSERT_EQ(lstat("logs/talker.log.1", &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600);
	ASSERT_EQ(access("logs/talker.log.2", F_OK), -1);
	char *cur = t_read_file("logs/talker.log", NULL), *old = t_read_file("logs/talker.log.1", NULL);
	ASSERT_TRUE(cur && old);
	/* Only the newest file and one old one are kept: the first run's
	 * start is gone. */
	EXPECT_TRUE(strlen(cur) > 0 && strlen(old) > 0);
	EXPECT_TRUE(strstr(cur, "talk-line-1\n") == NULL || strstr(old, "talk-line-1\n") == NULL);
	free(cur);
	free(old);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}
