/* 200 crash-and-restart cycles leave no zombie and no leaked fd. */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "integration/host_t.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

/* Processes whose parent is this one and that are zombies. */
static int my_zombies(void)
{
	DIR *d = opendir("/proc");
	int z = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char p[300], buf[512];
		snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		char *r = strrchr(buf, ')');
		char st;
		int ppid;
		if (r && sscanf(r + 2, "%c %d", &st, &ppid) == 2 && ppid == getpid() && st == 'Z')
			z++;
	}
	if (d)
		closedir(d);
	return z;
}

static void catalog(const char *mode)
{
	char m[512];
	snprintf(m, sizeof m, "args = [\"%s\"]\n[lifecycle]\nstop_grace = \"1s\"\n", mode);
	host_t_program("w", m);
}

static volatile int loop_stop;
static void *loop_main(void *arg)
{
	while (!loop_stop)
		mesh_host_poll(arg, 50 * MESH_NS_PER_MS);
	return NULL;
}

TEST_TIMEOUT(crash_restart_200_cycles_leak_nothing, 120)
{
	struct mesh_host *h;
	struct mesh_image before, running;
	struct mesh_instance *wb, *wr;
	char *err = NULL;
	struct mesh_host_cfg cfg = {.logs = "logs"};
	catalog("exit-before-ready");
	ASSERT_EQ(mesh_host_new(&h, &cfg, &err), 0);
	struct mesh_limits_caps caps = *mesh_host_caps(h);
	ASSERT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &before, &err), 0);
	catalog("crash-on-call");
	ASSERT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &running, &err), 0);
	ASSERT_EQ(mesh_instance_new(h, &before, &wb), 0);
	ASSERT_EQ(mesh_instance_new(h, &running, &wr), 0);
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 1 << 16), 0);
	int fds0 = t_count_fds();
	pthread_t th;
	pthread_create(&th, NULL, loop_main, h);
	for (int i = 0; i < 200; i++) {
		if (i % 2 == 0) {
			ASSERT_EQ(mesh_instance_warm(wb, &err), 0);
			int rc = mesh_instance_wait(wb, 1u << MESH_IS_IDLE, S(20), &err);
			if (rc != MESH_E_CRASHED)
				FAIL("cycle %d: %s", i, mesh_strerror(rc));
			if (!strstr(err, "exit status 3"))
				FAIL("cycle %d: %s", i, err);
			free(err);
			free(mesh_instance_crashed(wb));
		} else {
			ASSERT_EQ(mesh_instance_launch(wr, s, &err), 0);
			int rc = mesh_instance_wait(wr, 1u << MESH_IS_RUNNING, S(20), &err);
			if (rc)
				FAIL("cycle %d: launch: %s", i, err);
			void *rep = NULL;
			size_t n;
			EXPECT_NE(mesh_slot_call(s, "x", 1, &rep, &n, S(20), 0), 0);
			free(rep);
			mesh_instance_wait(wr, 1u << MESH_IS_DOWN, S(10), NULL);
			ASSERT_EQ(mesh_instance_state(wr), MESH_IS_DOWN);
			char *r = mesh_instance_crashed(wr);
			if (!r || !strstr(r, "exit status 139"))
				FAIL("cycle %d: %s", i, r ? r : "(no report)");
			free(r);
			ASSERT_TRUE(mesh_instance_take_failed_slot(wr) == s);
		}
	}
	loop_stop = 1;
	pthread_join(th, NULL);
	EXPECT_EQ(mesh_instance_stats(wb).crashes, 100);
	EXPECT_EQ(mesh_instance_stats(wr).crashes, 100);
	EXPECT_EQ(mesh_host_totals(h).crashes, 200);
	EXPECT_EQ(mesh_host_totals(h).spawns, 200);
	EXPECT_EQ(mesh_host_totals(h).procs, 0);
	EXPECT_EQ(my_zombies(), 0);
	EXPECT_EQ(t_count_fds(), fds0);
	mesh_host_free(h);
	mesh_slot_free(s);
	mesh_image_release(&before);
	mesh_image_release(&running);
}
