/* Per-program users (issue 9, "One worker corrupts other programs' slots"):
 * a worker runs as its manifest's `user`; workers of programs under
 * different users cannot open each other's fds (a slot's memfd) through
 * /proc; a meshd that is not root refuses a `user` other than its own at
 * load.  Tests run as root. */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "host/manifest.h"
#include "integration/contain_t.h"
#include "integration/host_t.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)
#define ALL_UP (1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING)

/* Program name running host_worker in mode as user (NULL: no `user`). */
static void add_program(const char *name, const char *mode, const char *user, const char *env)
{
	char m[2048];
	/* Workers under other users reach their binary and write nothing here. */
	chmod(".", 0755);
	snprintf(m, sizeof m, "args = [\"%s\"]\n%s%s%s[env]\n%s", mode, user ? "user = " : "", user ? user : "",
		 user ? "\n" : "", env ? env : "");
	host_t_program(name, m);
}

static struct mesh_host *host(const char *default_user)
{
	struct mesh_host_cfg cfg = {.logs = "logs", .default_user = default_user};
	struct mesh_host *h;
	char *err = NULL;
	if (mesh_host_new(&h, &cfg, &err))
		FAIL("host: %s", err);
	return h;
}

static struct mesh_instance *start(struct mesh_host *h, struct mesh_image *img, const char *name)
{
	char *err = NULL;
	struct mesh_instance *w;
	struct mesh_limits_caps caps = *mesh_host_caps(h);
	if (mesh_image_prepare("cat", name, &caps, MESH_GPU_NONE, img, &err))
		FAIL("prepare %s: %s", name, err);
	ASSERT_EQ(mesh_instance_new(h, img, &w), 0);
	if (mesh_instance_warm(w, &err) || mesh_instance_wait(w, ALL_UP, S(20), &err))
		FAIL("start %s: %s", name, err);
	return w;
}

/* "Uid:" of /proc/<pid>/status: the real uid. */
static long proc_uid(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	char *s = t_read_file(p, NULL);
	const char *l = s ? strstr(s, "\nUid:") : NULL;
	long u = l ? strtol(l + 5, NULL, 10) : -1;
	free(s);
	return u;
}

TEST(user_worker_runs_as_its_manifest_user)
{
	add_program("a", "whoami", "\"nobody\"", NULL);
	add_program("n", "whoami", "65533", NULL);
	add_program("r", "whoami", "\"root\"", NULL);
	add_program("d", "whoami", NULL, NULL);
	unsetenv("MESHD_DEFAULT_USER"); /* the runner's; here the real default */
	struct mesh_host *h = host(mesh_limits_default_user());
	struct mesh_image ia, in, ir, id;
	struct mesh_instance *a = start(h, &ia, "a"), *n = start(h, &in, "n"), *r = start(h, &ir, "r"),
			     *d = start(h, &id, "d");
	struct contain_t_log_has la = {"logs/a.log", "uid=65534 gid=65534"}, ln = {"logs/n.log", "uid=65533 gid=65533"},
		       lr = {"logs/r.log", "uid=0 gid=0"}, ld = {"logs/d.log", "uid=65534"};
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &la, 5000));
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &ln, 5000));
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &lr, 5000));
	/* As root without `user`: the unprivileged default, not root. */
	EXPECT_STREQ(mesh_limits_default_user(), "nobody");
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &ld, 5000));
	EXPECT_EQ(proc_uid(mesh_instance_pid(a)), 65534);
	EXPECT_EQ(proc_uid(mesh_instance_pid(n)), 65533);
	EXPECT_EQ(proc_uid(mesh_instance_pid(r)), 0);
	EXPECT_EQ(proc_uid(mesh_instance_pid(d)), 65534);
	mesh_host_free(h);
	mesh_image_release(&ia);
	mesh_image_release(&in);
	mesh_image_release(&ir);
	mesh_image_release(&id);
}

/* A catalog only root may enter (a 0700 directory, as /root is): the
 * default user cannot exec the binary, and the error says who tried and
 * why, rather than a bare "Permission denied". */
TEST(user_default_user_that_cannot_reach_the_binary_is_named)
{
	add_program("d", "echo", NULL, NULL);
	ASSERT_EQ(chmod(".", 0700), 0);
	unsetenv("MESHD_DEFAULT_USER");
	struct mesh_host *h = host(mesh_limits_default_user());
	struct mesh_image img;
	struct mesh_instance *w;
	char *err = NULL;
	struct mesh_limits_caps caps = *mesh_host_caps(h);
	ASSERT_EQ(mesh_image_prepare("cat", "d", &caps, MESH_GPU_NONE, &img, &err), 0);
	ASSERT_EQ(mesh_instance_new(h, &img, &w), 0);
	int rc = mesh_instance_warm(w, &err);
	if (rc == 0)
		rc = mesh_instance_wait(w, ALL_UP, S(10), &err);
	EXPECT_NE(rc, 0);
	EXPECT_CONTAINS(err ? err : "", "Permission denied as user 'nobody'");
	EXPECT_CONTAINS(err ? err : "", "meshd runs as root and the manifest names no `user`");
	free(err);
	mesh_host_free(h);
	mesh_image_release(&img);
}

/* The attack: a worker opens another program's slot memfd through
 * /proc/<pid>/fd.  Under another uid it cannot; under the same uid it can
 * (which is why each program should have its own `user`). */
TEST(user_programs_cannot_open_each_others_slot)
{
	char *err = NULL, env[256];
	add_program("a", "echo", "\"nobody\"", NULL);
	struct mesh_host *h = host(NULL);
	struct mesh_image ia, ib, ic;
	struct mesh_instance *a = start(h, &ia, "a");
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 0), 0);
	ASSERT_EQ(mesh_instance_launch(a, s, &err), 0);
	ASSERT_EQ(mesh_instance_wait(a, 1u << MESH_IS_RUNNING, S(10), &err), 0);
	pid_t pa = mesh_instance_pid(a);
	/* libmeshworker closes the memfd once mapped; then its control
	 * socket (fd 3), opened through /proc the same way. */
	int fd = contain_t_memfd_of(pa);
	if (fd < 0)
		fd = 3;
	snprintf(env, sizeof env, "HW_PEEK = \"/proc/%d/fd/%d\"\n", (int)pa, fd);
	add_program("b", "whoami", "65533", env);
	add_program("c", "whoami", "\"nobody\"", env);
	start(h, &ib, "b");
	start(h, &ic, "c");
	struct contain_t_log_has lb = {"logs/b.log", "peek="}, lc = {"logs/c.log", "peek="};
	ASSERT_TRUE(t_wait_for(contain_t_log_has, &lb, 5000));
	ASSERT_TRUE(t_wait_for(contain_t_log_has, &lc, 5000));
	char *b = t_read_file("logs/b.log", NULL), *c = t_read_file("logs/c.log", NULL);
	EXPECT_CONTAINS(b, "peek=EACCES");
	/* The same uid gets through the permission check (a socket then
	 * cannot be opened by path: ENXIO): the test can tell the two apart. */
	EXPECT_TRUE(c && strstr(c, "peek=") && !strstr(c, "peek=EACCES") && !strstr(c, "peek=EPERM"));
	free(b);
	free(c);
	mesh_host_free(h);
	mesh_slot_free(s);
	mesh_image_release(&ia);
	mesh_image_release(&ib);
	mesh_image_release(&ic);
}

TEST(user_other_than_its_own_refused_when_not_root)
{
	add_program("r", "echo", "\"root\"", NULL);
	add_program("o", "echo", "\"nobody\"", NULL);
	add_program("g", "echo", "\"no-such-user-here\"", NULL);
	pid_t k = fork();
	ASSERT_GE(k, 0);
	if (k == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(10);
		struct mesh_limits_caps caps;
		struct mesh_image img;
		char *err = NULL;
		mesh_limits_detect(&caps, NULL);
		if (mesh_image_prepare("cat", "r", &caps, MESH_GPU_NONE, &img, &err) != MESH_E_REFUSED)
			_exit(11);
		if (!strstr(err, "needs meshd to run as root"))
			_exit(12);
		free(err);
		/* Its own user: fine, nothing to change. */
		if (mesh_image_prepare("cat", "o", &caps, MESH_GPU_NONE, &img, &err) != 0 || img.run_as.set)
			_exit(13);
		mesh_image_release(&img);
		if (mesh_limits_default_user() != NULL)
			_exit(14);
		_exit(0);
	}
	int st;
	ASSERT_EQ(waitpid(k, &st, 0), k);
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(WEXITSTATUS(st), 0);
	/* An unknown user is refused at load, also as root. */
	struct mesh_limits_caps caps;
	struct mesh_image img;
	char *err = NULL;
	mesh_limits_detect(&caps, NULL);
	EXPECT_EQ(mesh_image_prepare("cat", "g", &caps, MESH_GPU_NONE, &img, &err), MESH_E_NOTFOUND);
	EXPECT_CONTAINS(err, "user \"no-such-user-here\" does not exist");
	free(err);
}

TEST(user_manifest_field)
{
	struct mesh_manifest m;
	char *err = NULL;
	const char *ok = "name = \"x\"\nbackends = [\"native\"]\nuser = \"svc-x.1\"\n";
	ASSERT_EQ(mesh_manifest_parse("x.toml", ok, strlen(ok), "x", &m, &err), 0);
	EXPECT_STREQ(m.user, "svc-x.1");
	mesh_manifest_release(&m);
	const char *num = "name = \"x\"\nbackends = [\"native\"]\nuser = 1234\n";
	ASSERT_EQ(mesh_manifest_parse("x.toml", num, strlen(num), "x", &m, &err), 0);
	EXPECT_STREQ(m.user, "1234");
	mesh_manifest_release(&m);
	const char *none = "name = \"x\"\nbackends = [\"native\"]\n";
	ASSERT_EQ(mesh_manifest_parse("x.toml", none, strlen(none), "x", &m, &err), 0);
	EXPECT_TRUE(m.user == NULL);
	mesh_manifest_release(&m);
	const char *bad = "name = \"x\"\nbackends = [\"native\"]\nuser = \"a b\"\n";
	EXPECT_EQ(mesh_manifest_parse("x.toml", bad, strlen(bad), "x", &m, &err), MESH_E_PARSE);
	EXPECT_CONTAINS(err, "x.toml:3:8: 'user' must be a user name");
	free(err);
	const char *neg = "name = \"x\"\nbackends = [\"native\"]\nuser = -1\n";
	EXPECT_EQ(mesh_manifest_parse("x.toml", neg, strlen(neg), "x", &m, &err), MESH_E_PARSE);
	EXPECT_CONTAINS(err, "'user' must be a uid");
	free(err);
}
