/* meshd --http: an HTTP program's `user` and `[limits]` (issue 13, "HTTP
 * programs in the catalog": spawned by the same host code as native
 * workers).  It runs as its manifest's user, or as meshd's unprivileged
 * default when meshd is root; its limits are in force in its process; a
 * limit this machine cannot enforce, and a program that goes over its
 * memory limit, are reported with the reason.  Tests run as root. */
#include "runner/t.h"
#include "integration/gw_t.h"
#include "host/limits.h"

#include <sys/stat.h>

/* catalog/<name>.toml: openai_server.py by the system's python3 (which
 * other users can reach, unlike a python under /root) with more keys. */
static void add_sys_oa(const char *name, const char *extra)
{
	char path[256], text[8192];
	/* Programs under other users reach nothing of this 0700 directory
	 * but their catalog's and logs' paths are meshd's. */
	ASSERT_EQ(chmod(".", 0755), 0);
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"%s\"\nbackend = \"http\"\ncommand = [\"/usr/bin/python3\", \"%s\", \"--port\", \"{port}\", \"--models\", "
		 "\"%s-model\"]\nmodels = [\"%s-model\"]\n%s",
		 name, oa_server(), name, name, extra);
	snprintf(path, sizeof path, "catalog/%s.toml", name);
	t_write_file(path, text);
}

static char *proc_file(pid_t pid, const char *what)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/%s", (int)pid, what);
	return t_read_file(p, NULL);
}

/* "Uid:" of /proc/<pid>/status: the real uid. */
static long proc_uid(pid_t pid)
{
	char *s = proc_file(pid, "status");
	const char *l = s ? strstr(s, "\nUid:") : NULL;
	long u = l ? strtol(l + 5, NULL, 10) : -1;
	free(s);
	return u;
}

static void need_system_python(void)
{
	if (access("/usr/bin/python3", X_OK) != 0)
		FAIL("/usr/bin/python3 is missing (Debian's python3 package)");
}

/* `user` and `[limits]` of the manifest: the program's process runs as
 * that user with its rlimits, and answers. */
TEST_TIMEOUT(gateway_program_runs_as_its_user_with_its_limits, 30)
{
	char resp[8192];
	need_system_python();
	add_sys_oa("u", "user = \"nobody\"\n[limits]\nmemory = \"1G\"\nopen_files = 64\n");
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "u-model", "hi", 0, resp, sizeof resp), 200);
	pid_t pid = spawned_pid();
	ASSERT_GT(pid, 0);
	EXPECT_EQ(proc_uid(pid), 65534);
	char *lim = proc_file(pid, "limits");
	ASSERT_TRUE(lim != NULL);
	EXPECT_CONTAINS(lim, "Max open files            64                   64");
	EXPECT_CONTAINS(lim, "Max data size             1073741824           1073741824");
	free(lim);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* meshd as root, a manifest without `user`: the program runs as the
 * unprivileged default (`mesh` where it exists, else `nobody`), as native
 * workers do, not as root. */
TEST_TIMEOUT(gateway_program_without_user_runs_unprivileged, 30)
{
	char resp[8192];
	need_system_python();
	add_sys_oa("d", "");
	unsetenv("MESHD_DEFAULT_USER"); /* the runner's ("root"); here the real default */
	const char *def = mesh_limits_default_user();
	ASSERT_TRUE(def != NULL);
	struct mesh_run_as ra;
	char *e = NULL;
	ASSERT_EQ(mesh_limits_run_as(def, &ra, &e), 0);
	ASSERT_NE((long)ra.uid, 0);
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "d-model", "hi", 0, resp, sizeof resp), 200);
	pid_t pid = spawned_pid();
	ASSERT_GT(pid, 0);
	EXPECT_EQ(proc_uid(pid), (long)ra.uid);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A command its user cannot reach (a 0700 directory, as /root is): the
 * answer names the user and why it was that one. */
TEST_TIMEOUT(gateway_default_user_that_cannot_reach_the_command_is_named, 30)
{
	char resp[8192], text[3072], cwd[2048];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	ASSERT_EQ(chmod(".", 0700), 0);
	t_write_file("srv.sh", "#!/bin/sh\nexec sleep 30\n");
	ASSERT_EQ(chmod("srv.sh", 0755), 0);
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"x\"\nbackend = \"http\"\ncommand = [\"%s/srv.sh\", \"{port}\"]\nmodels = [\"x-model\"]\n", cwd);
	t_write_file("catalog/x.toml", text);
	unsetenv("MESHD_DEFAULT_USER");
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "x-model", "hi", 0, resp, sizeof resp), 502);
	EXPECT_CONTAINS(resp, "Permission denied as user '");
	EXPECT_CONTAINS(resp, "meshd runs as root and the manifest names no `user`");
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A limit this machine cannot enforce (here: `processes` for a root
 * meshd without a delegated pids controller; RLIMIT_NPROC does not bind
 * root) is not silently dropped: the program is shown failed with the
 * reason, and a request for it is answered 502 with it, at once. */
TEST_TIMEOUT(gateway_unenforceable_limit_is_reported, 30)
{
	char resp[8192];
	struct mesh_limits_caps caps;
	struct mesh_limits want = {.processes = 64};
	unsigned enforced = 0;
	char *e = NULL;
	mesh_limits_detect(&caps, NULL);
	int can = mesh_limits_plan(&want, &caps, &enforced, &e) == 0;
	free(e);
	add_oa("p", "\"p-model\"", "", "[limits]\nprocesses = 64\n");
	struct gw g = start_gw("");
	if (can) {
		/* A machine that delegates pids: then it is enforced, and serves. */
		EXPECT_EQ(post_chat(g.port, "p-model", "hi", 0, resp, sizeof resp), 200);
		EXPECT_EQ(stop_gw(&g), 0);
		return;
	}
	EXPECT_TRUE(file_has("meshd.err", "program 'p' cannot start: limits.processes cannot be enforced on this machine"));
	EXPECT_EQ(http_get(g.port, "/v1/models", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "\"state\":\"failed\"");
	EXPECT_CONTAINS(resp, "limits.processes cannot be enforced on this machine");
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(post_chat(g.port, "p-model", "hi", 0, resp, sizeof resp), 502);
	EXPECT_LT(t_now_ms() - t0, 2000);
	EXPECT_CONTAINS(resp, "limits.processes cannot be enforced on this machine");
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 0);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A program that goes over its memory limit (RLIMIT_DATA here, or a
 * cgroup's memory.max): its failed start is answered 502 with the limits
 * it ran under, meshd's log has its last lines (the MemoryError). */
TEST_TIMEOUT(gateway_program_over_its_memory_limit_is_reported, 30)
{
	char resp[16384];
	mkdir("catalog", 0755);
	t_write_file("catalog/m.toml",
		     "name = \"m\"\nbackend = \"http\"\n"
		     "command = [\"python3\", \"-c\", \"import sys; x = b'1' * (512 << 20); print('got it', sys.argv[1])\", "
		     "\"{port}\"]\nmodels = [\"m-model\"]\n[limits]\nmemory = \"64M\"\n");
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "m-model", "hi", 0, resp, sizeof resp), 502);
	EXPECT_CONTAINS(resp, "its limits: memory=67108864");
	EXPECT_TRUE(file_has("meshd.err", "MemoryError")); /* its output: meshd's log, not the client's */
	EXPECT_TRUE(strstr(resp, "MemoryError") == NULL);
	EXPECT_TRUE(strstr(resp, "got it") == NULL);
	EXPECT_EQ(http_get(g.port, "/v1/models", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "\"state\":\"failed\"");
	EXPECT_CONTAINS(resp, "its limits: memory=67108864");
	EXPECT_EQ(stop_gw(&g), 0);
}
