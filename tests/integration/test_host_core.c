/* meshd's core (meshd/core/ops.h) driven directly, with its loop on a thread. */
#include "base/clock.h"
#include "base/err.h"
#include "meshd/core/ops.h"
#include "host/image.h"
#include "integration/host_t.h"
#include "runner/t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

static void program(const char *name, const char *mode, const char *extra)
{
	char m[1024];
	snprintf(m, sizeof m, "args = [\"%s\"]\n%s", mode, extra ? extra : "");
	host_t_program(name, m);
}

static void *run_main(void *d)
{
	meshd_core_run(d);
	return NULL;
}

TEST(core_load_start_call_crash_stop_unload)
{
	program("echo", "echo", NULL);
	program("boom", "crash-on-call", NULL);
	program("gpu", "echo", "device = \"gpu\"\n");
	struct meshd_config cfg = {.catalog = "cat", .logs = "logs", .slots = 2, .isolation = "none"};
	struct meshd_core *d;
	char *err = NULL;
	if (meshd_core_new(&d, &cfg, &err))
		FAIL("core: %s", err);
	pthread_t th;
	pthread_create(&th, NULL, run_main, d);

	struct meshd_program_info pi;
	struct meshd_ps ps;
	struct mesh_instance_stats st;
	ASSERT_EQ(meshd_op_load(d, "echo", &pi, &err), 0);
	EXPECT_STREQ(pi.name, "echo");
	EXPECT_TRUE(pi.image_hash != 0);
	meshd_program_info_release(&pi);
	EXPECT_EQ(meshd_op_load(d, "gpu", &pi, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "needs a GPU");
	free(err);
	EXPECT_EQ(meshd_op_load(d, "nothere", &pi, &err), MESH_E_NOTFOUND);
	free(err);

	/* No worker until asked: zero processes. */
	ASSERT_EQ(meshd_op_ps(d, &ps), 0);
	EXPECT_EQ(ps.host.procs, 0);
	meshd_ps_release(&ps);

	ASSERT_EQ(meshd_op_start(d, "echo", &st, &err), 0);
	EXPECT_GT(st.pid, 0);
	void *rep = NULL;
	size_t n = 0;
	int rc = meshd_op_call(d, "echo", "ping", 4, &rep, &n, S(10), &err);
	if (rc)
		FAIL("call: %s", err);
	ASSERT_EQ(n, 4);
	EXPECT_EQ(memcmp(rep, "ping", 4), 0);
	free(rep);
	/* A call spawns on demand. */
	rc = meshd_op_call(d, "boom", "x", 1, &rep, &n, S(10), &err);
	EXPECT_EQ(rc, MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "crashed while running: exit status 139");
	EXPECT_CONTAINS(err, "call line 40\n");
	free(err);
	/* The crash left echo alone; its slot can be reused. */
	rc = meshd_op_call(d, "echo", "pong", 4, &rep, &n, S(10), &err);
	EXPECT_EQ(rc, 0);
	free(rep);
	ASSERT_EQ(meshd_op_ps(d, &ps), 0);
	EXPECT_EQ(ps.host.procs, 1);
	EXPECT_EQ(ps.host.crashes, 1);
	EXPECT_EQ(ps.host.spawns, 2);
	EXPECT_EQ(ps.nprograms, 2);
	meshd_ps_release(&ps);
	char *text = NULL;
	size_t len = 0;
	ASSERT_EQ(meshd_op_logs(d, "boom", 0, &text, &len, &err), 0);
	EXPECT_CONTAINS(text, "call line 1\n");
	free(text);
	ASSERT_EQ(meshd_op_stop(d, "echo", &err), 0);
	ASSERT_EQ(meshd_op_ps(d, &ps), 0);
	EXPECT_EQ(ps.host.procs, 0);
	meshd_ps_release(&ps);
	ASSERT_EQ(meshd_op_unload(d, "echo", &err), 0);
	EXPECT_EQ(meshd_op_unload(d, "echo", &err), MESH_E_NOTFOUND);
	free(err);
	/* Start again then shut down with a worker up: it is reaped by free. */
	ASSERT_EQ(meshd_op_start(d, "echo", &st, &err), 0);
	pid_t pid = st.pid;
	meshd_core_stop(d);
	pthread_join(th, NULL);
	meshd_core_free(d);
	EXPECT_EQ(kill(pid, 0), -1);
}

TEST(core_idle_ttl_scales_to_zero)
{
	program("echo", "echo", "idle_ttl = \"300ms\"\n");
	struct meshd_config cfg = {.catalog = "cat", .logs = "logs", .slots = 1};
	struct meshd_core *d;
	char *err = NULL;
	ASSERT_EQ(meshd_core_new(&d, &cfg, &err), 0);
	pthread_t th;
	pthread_create(&th, NULL, run_main, d);
	void *rep = NULL;
	size_t n;
	ASSERT_EQ(meshd_op_call(d, "echo", "a", 1, &rep, &n, S(10), &err), 0);
	free(rep);
	struct meshd_ps ps;
	int procs = 1;
	uint64_t until = t_now_ms() + 5000;
	while (procs && t_now_ms() < until) {
		usleep(50000);
		if (meshd_op_ps(d, &ps) == 0) {
			procs = (int)ps.host.procs;
			meshd_ps_release(&ps);
		}
	}
	EXPECT_EQ(procs, 0);
	meshd_core_stop(d);
	pthread_join(th, NULL);
	meshd_core_free(d);
}

