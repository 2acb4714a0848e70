/* NVML through the dlopen seam and the GPU ledger, against the fake
 * libnvidia-ml.so.1 (tests/gpu/fake_nvml.c): no GPU here. */
#include "base/clock.h"
#include "base/err.h"
#include "gpu/gpu.h"
#include "gpu/nvml.h"
#include "host/manifest.h"
#include "runner/t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB (1024ull * 1024 * 1024)
#define MS (1000000ull)

static const char *fake(void)
{
	const char *p = t_bin("tests-gpu/fake_nvml.so");
	if (access(p, R_OK) != 0)
		FAIL("%s is missing: make build/tests-gpu/fake_nvml.so", p);
	return p;
}

/* The fake's state file, in the test's directory. */
static void state(const char *text)
{
	t_write_file("nvml.state", text);
	setenv("FAKE_NVML_STATE", "nvml.state", 1);
}

/* A child that leads its own process group and sleeps; with a grandchild
 * in the same group when kid is not NULL. */
static pid_t sleeper(pid_t *kid)
{
	int p[2];
	ASSERT_EQ(pipe(p), 0);
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		pid_t parent = getppid(), me = getpid(), k = 0;
		setpgid(0, 0);
		/* a test that fails leaves no sleeper holding its output open */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(1);
		if (kid && (k = fork()) == 0) {
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != me)
				_exit(1);
			for (;;)
				pause();
		}
		if (write(p[1], &k, sizeof k) != sizeof k)
			_exit(1);
		for (;;)
			pause();
	}
	pid_t k = 0;
	ASSERT_EQ(read(p[0], &k, sizeof k), (long)sizeof k);
	close(p[0]);
	close(p[1]);
	if (kid)
		*kid = k;
	return pid;
}

static void end(pid_t pid)
{
	kill(-pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

TEST(nvml_absent_is_no_gpu)
{
	struct mesh_nvml *n;
	char *why = NULL;
	EXPECT_EQ(mesh_nvml_open("/nonexistent/libnvidia-ml.so.1", &n, &why), MESH_E_NOGPU);
	EXPECT_CONTAINS(why, "cannot load /nonexistent/libnvidia-ml.so.1");
	free(why);
	setenv(MESH_NVML_ENV, "none", 1);
	EXPECT_EQ(mesh_nvml_open(NULL, &n, &why), MESH_E_NOGPU);
	EXPECT_CONTAINS(why, "NVML disabled");
	free(why);
	struct mesh_gpu *g;
	EXPECT_EQ(mesh_gpu_new(&g, NULL, &why), MESH_E_NOGPU);
	EXPECT_TRUE(g == NULL);
	free(why);
	/* A library without NVML's calls. */
	EXPECT_EQ(mesh_nvml_open("libz.so.1", &n, &why), MESH_E_NOGPU);
	EXPECT_CONTAINS(why, "lacks a call");
	free(why);
}

TEST(nvml_init_failure_and_no_gpu)
{
	struct mesh_nvml *n;
	char *why = NULL;
	state("fail-init\ngpu 100 0 X\n");
	EXPECT_EQ(mesh_nvml_open(fake(), &n, &why), MESH_E_NOGPU);
	EXPECT_CONTAINS(why, "nvmlInit failed: Driver Not Loaded");
	free(why);
	state("");
	EXPECT_EQ(mesh_nvml_open(fake(), &n, &why), MESH_E_NOGPU);
	EXPECT_CONTAINS(why, "NVML sees no GPU");
	free(why);
}

TEST(nvml_reads_gpus_and_processes)
{
	pid_t a = sleeper(NULL), b = sleeper(NULL);
	char st[512];
	snprintf(st, sizeof st,
		 "gpu %llu %llu NVIDIA H200\ngpu %llu 0 NVIDIA H100 80GB HBM3\n"
		 "proc 0 %d %llu\nproc GPU-fake-0 %d ?\nproc 1 %d %llu mps\n",
		 141 * GIB, GIB / 2, 80 * GIB, (int)a, 3 * GIB, (int)b, (int)b, 5 * GIB);
	state(st);
	setenv(MESH_NVML_ENV, fake(), 1);
	struct mesh_nvml *n;
	char *why = NULL;
	ASSERT_EQ(mesh_nvml_open(NULL, &n, &why), 0);
	EXPECT_STREQ(mesh_nvml_path(n), fake());
	ASSERT_EQ(mesh_nvml_count(n), 2);
	struct mesh_nvml_gpu g;
	ASSERT_EQ(mesh_nvml_gpu(n, 0, &g), 0);
	EXPECT_STREQ(g.name, "NVIDIA H200");
	EXPECT_STREQ(g.uuid, "GPU-fake-0");
	EXPECT_UEQ(g.total, 141 * GIB);
	EXPECT_UEQ(g.used, GIB / 2 + 3 * GIB);
	EXPECT_UEQ(g.free, g.total - g.used);
	ASSERT_EQ(mesh_nvml_gpu(n, 1, &g), 0);
	EXPECT_STREQ(g.name, "NVIDIA H100 80GB HBM3");
	EXPECT_EQ(mesh_nvml_gpu(n, 2, &g), -EINVAL);
	struct mesh_nvml_proc *p;
	size_t np;
	ASSERT_EQ(mesh_nvml_procs(n, 0, &p, &np), 0);
	ASSERT_EQ(np, 2);
	EXPECT_EQ(p[0].pid, a);
	EXPECT_UEQ(p[0].used, 3 * GIB);
	EXPECT_EQ(p[1].pid, b);
	EXPECT_TRUE(p[1].used == MESH_NVML_UNKNOWN);
	free(p);
	/* The MPS list comes from its own call. */
	ASSERT_EQ(mesh_nvml_procs(n, 1, &p, &np), 0);
	ASSERT_EQ(np, 1);
	EXPECT_EQ(p[0].mps, 1);
	EXPECT_UEQ(p[0].used, 5 * GIB);
	free(p);
	/* More processes than the first buffer holds (64): it grows. */
	FILE *f = fopen("nvml.state", "a");
	for (int i = 0; i < 100; i++)
		fprintf(f, "proc 1 %d %d\n", (int)a, i);
	fclose(f);
	ASSERT_EQ(mesh_nvml_procs(n, 1, &p, &np), 0);
	EXPECT_EQ(np, 2); /* each pid once */
	free(p);
	mesh_nvml_close(n);
	end(a);
	end(b);
}

struct lister {
	struct mesh_nvml *n;
	pid_t pid;
	int misses;
};

static void *list_often(void *arg)
{
	struct lister *l = arg;
	for (int i = 0; i < 2000; i++) {
		struct mesh_nvml_proc *p = NULL;
		size_t np = 0;
		if (mesh_nvml_procs(l->n, 0, &p, &np) != 0 || np != 1 || (pid_t)p[0].pid != l->pid)
			l->misses++;
		free(p);
	}
	return NULL;
}

/* Two threads at once (meshd's GPU watcher and the gateway's tick, each
 * with its handle) each see the one process the fake lists, every time:
 * the fake is thread-safe, as NVML is.  It read its file into its table
 * on every call, and a call beside another one found the table emptied
 * for the reload: the gateway measured a program's VRAM at 0 and let
 * another start before it was free (gateway_budget_counts_measured_vram,
 * once in CI). */
TEST(nvml_fake_answers_two_threads_at_once)
{
	pid_t a = sleeper(NULL);
	char st[256];
	snprintf(st, sizeof st, "gpu %llu 0 Fake\nproc 0 %d %llu\n", 80 * GIB, (int)a, 4 * GIB);
	state(st);
	setenv(MESH_NVML_ENV, fake(), 1);
	struct lister l[2] = {{NULL, a, 0}, {NULL, a, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		char *why = NULL;
		ASSERT_EQ(mesh_nvml_open(NULL, &l[i].n, &why), 0);
	}
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(pthread_create(&th[i], NULL, list_often, &l[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(l[i].misses, 0);
		mesh_nvml_close(l[i].n);
	}
	end(a);
}

TEST(gpu_accounts_a_worker_by_its_process_group)
{
	pid_t kid, w = sleeper(&kid), other = sleeper(NULL);
	char st[512];
	snprintf(st, sizeof st, "gpu %llu 0 G\nproc 0 %d %llu\nproc 0 %d %llu\nproc 0 %d %llu\n", 80 * GIB, (int)w,
		 2 * GIB, (int)kid, 3 * GIB, (int)other, 7 * GIB);
	state(st);
	struct mesh_gpu_cfg cfg = {.nvml_path = fake()};
	struct mesh_gpu *g;
	char *why = NULL, *vis = NULL;
	ASSERT_EQ(mesh_gpu_new(&g, &cfg, &why), 0);
	uint64_t id;
	ASSERT_EQ(mesh_gpu_place(g, "w#0", 1, 10 * GIB, &id, &vis, &why), 0);
	EXPECT_STREQ(vis, "GPU-fake-0");
	free(vis);
	ASSERT_EQ(mesh_gpu_bind(g, id, w), 0);
	struct mesh_gpu_dev *d;
	unsigned nd;
	ASSERT_EQ(mesh_gpu_devices(g, &d, &nd), 0);
	ASSERT_EQ(nd, 1);
	EXPECT_UEQ(d[0].nv.used, 12 * GIB);
	EXPECT_UEQ(d[0].others, 7 * GIB);
	EXPECT_UEQ(d[0].reserved, 5 * GIB); /* 10 asked, 5 in use already */
	EXPECT_EQ(d[0].workers, 1);
	free(d);
	struct mesh_gpu_use u;
	ASSERT_EQ(mesh_gpu_use(g, id, &u), 0);
	EXPECT_EQ(u.state, MESH_GPU_LIVE);
	EXPECT_UEQ(u.vram, 5 * GIB); /* the leader and its child */
	EXPECT_UEQ(u.gpus, 1);
	EXPECT_EQ(u.pid, w);
	EXPECT_EQ(u.time_to_free_ns, -1);
	EXPECT_EQ(mesh_gpu_use(g, 999, &u), MESH_E_NOTFOUND);
	mesh_gpu_free(g);
	end(w);
	end(other);
}

TEST(gpu_places_where_memory_is_free_and_refuses_what_cannot_fit)
{
	pid_t other = sleeper(NULL);
	char st[512];
	snprintf(st, sizeof st, "gpu %llu 0 A\ngpu %llu 0 B\nproc 1 %d %llu\n", 80 * GIB, 80 * GIB, (int)other, 30 * GIB);
	state(st);
	struct mesh_gpu_cfg cfg = {.nvml_path = fake()};
	struct mesh_gpu *g;
	char *err = NULL, *vis = NULL;
	ASSERT_EQ(mesh_gpu_new(&g, &cfg, &err), 0);
	EXPECT_EQ(mesh_gpu_count(g), 2);
	/* At load: more GPUs than there are, more memory than one has. */
	EXPECT_EQ(mesh_gpu_check(g, "big", 3, 0, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "asks for 3 GPUs and this machine has 2");
	free(err);
	EXPECT_EQ(mesh_gpu_check(g, "big", 1, 100 * GIB, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "the largest GPU here has 80.0 GiB");
	free(err);
	EXPECT_EQ(mesh_gpu_check(g, "ok", 2, 80 * GIB, &err), 0);
	/* 40 GiB: GPU 0 (80 free) before GPU 1 (50 free). */
	uint64_t a, b, c;
	ASSERT_EQ(mesh_gpu_place(g, "a#0", 1, 40 * GIB, &a, &vis, &err), 0);
	EXPECT_STREQ(vis, "GPU-fake-0");
	free(vis);
	/* Reserved before it allocates: GPU 0 has 40 left, GPU 1 50. */
	ASSERT_EQ(mesh_gpu_place(g, "b#0", 1, 45 * GIB, &b, &vis, &err), 0);
	EXPECT_STREQ(vis, "GPU-fake-1");
	free(vis);
	/* 40 on GPU 0, 5 on GPU 1: 41 GiB fits nowhere. */
	EXPECT_EQ(mesh_gpu_place(g, "c#0", 1, 41 * GIB, &c, &vis, &err), MESH_E_NOGPU);
	EXPECT_TRUE(vis == NULL);
	EXPECT_CONTAINS(err, "cannot place c#0: it needs 41.0 GiB free on 1 GPU");
	EXPECT_CONTAINS(err, "GPU 0 (A) has 40.0 GiB free of 80.0 GiB (a#0 40.0 GiB)");
	EXPECT_CONTAINS(err, "GPU 1 (B) has 5.0 GiB free of 80.0 GiB (b#0 45.0 GiB, other processes 30.0 GiB)");
	free(err);
	/* A failed spawn gives its reservation back. */
	mesh_gpu_cancel(g, a);
	ASSERT_EQ(mesh_gpu_place(g, "c#0", 1, 41 * GIB, &c, &vis, &err), 0);
	EXPECT_STREQ(vis, "GPU-fake-0");
	free(vis);
	/* Two GPUs at once. */
	mesh_gpu_cancel(g, b);
	mesh_gpu_cancel(g, c);
	ASSERT_EQ(mesh_gpu_place(g, "d#0", 2, 20 * GIB, &a, &vis, &err), 0);
	EXPECT_STREQ(vis, "GPU-fake-0,GPU-fake-1");
	free(vis);
	mesh_gpu_free(g);
	end(other);
}

static int64_t ttf_of(struct mesh_gpu *g, uint64_t id)
{
	struct mesh_gpu_use u;
	if (mesh_gpu_use(g, id, &u) != 0 || u.state != MESH_GPU_FREED)
		return -1;
	return u.time_to_free_ns;
}

/* The memory of a dead worker counts until NVML stops listing its group:
 * the fake keeps listing the child 300 ms after it is gone. */
TEST(gpu_waits_until_memory_is_really_back)
{
	pid_t kid, w = sleeper(&kid);
	char st[512];
	snprintf(st, sizeof st, "gpu %llu 0 G\n", 80 * GIB);
	state(st);
	struct mesh_gpu_cfg cfg = {.nvml_path = fake(), .grace_ns = 5000 * MS};
	struct mesh_gpu *g;
	char *err = NULL, *vis = NULL;
	ASSERT_EQ(mesh_gpu_new(&g, &cfg, &err), 0);
	uint64_t id, id2;
	ASSERT_EQ(mesh_gpu_place(g, "w#0", 1, 60 * GIB, &id, &vis, &err), 0);
	free(vis);
	ASSERT_EQ(mesh_gpu_bind(g, id, w), 0);
	/* The worker allocates its "model". */
	snprintf(st, sizeof st, "gpu %llu 0 G\nproc 0 %d %llu\nproc 0 %d %llu 300\n", 80 * GIB, (int)w, 10 * GIB, (int)kid,
		 50 * GIB);
	state(st);
	EXPECT_EQ(mesh_gpu_settle(g, 0), 0); /* nothing drains */
	/* While it lives, 60 GiB more do not fit. */
	EXPECT_EQ(mesh_gpu_place(g, "n#0", 1, 60 * GIB, &id2, &vis, &err), MESH_E_NOGPU);
	free(err);
	uint64_t t0 = t_now_ms();
	end(w); /* the group dies; the fake lists the child 300 ms more */
	struct mesh_gpu_use u;
	/* Draining: the pidfd fired, the child is still listed. */
	for (int i = 0; i < 100; i++) {
		mesh_gpu_use(g, id, &u);
		if (u.state != MESH_GPU_LIVE)
			break;
		usleep(5000);
	}
	EXPECT_EQ(u.state, MESH_GPU_DRAINING);
	EXPECT_UEQ(u.vram, 50 * GIB);
	ASSERT_EQ(mesh_gpu_settle(g, 5000 * MS), 0);
	uint64_t waited = t_now_ms() - t0;
	EXPECT_GE(waited, 300);
	EXPECT_LT(waited, 2500); /* not the grace (5 s) */
	/* counted from this side's death stamp, which can come after the
	 * fake's own (299.4 ms was seen under a sanitizer): as
	 * test_gpu_core.c, at least 250 of the fake's 300 ms */
	int64_t ttf = ttf_of(g, id);
	EXPECT_GE(ttf, (int64_t)(250 * MS));
	EXPECT_LT(ttf, (int64_t)(2500 * MS));
	char *ev = mesh_gpu_next_event(g);
	EXPECT_CONTAINS(ev, "gpu: w#0 (pid ");
	EXPECT_CONTAINS(ev, "memory back after");
	free(ev);
	/* Now it fits. */
	ASSERT_EQ(mesh_gpu_place(g, "n#0", 1, 60 * GIB, &id2, &vis, &err), 0);
	free(vis);
	mesh_gpu_free(g);
}

TEST(gpu_names_a_holder_past_the_grace)
{
	pid_t w = sleeper(NULL);
	char st[512];
	snprintf(st, sizeof st, "gpu %llu 0 G\n", 80 * GIB);
	state(st);
	struct mesh_gpu_cfg cfg = {.nvml_path = fake(), .grace_ns = 200 * MS};
	struct mesh_gpu *g;
	char *err = NULL, *vis = NULL;
	ASSERT_EQ(mesh_gpu_new(&g, &cfg, &err), 0);
	uint64_t id, id2;
	ASSERT_EQ(mesh_gpu_place(g, "hog#0", 1, 0, &id, &vis, &err), 0);
	free(vis);
	ASSERT_EQ(mesh_gpu_bind(g, id, w), 0);
	snprintf(st, sizeof st, "gpu %llu 0 G\nproc 0 %d %llu 100000\n", 80 * GIB, (int)w, 50 * GIB);
	state(st);
	end(w);
	uint64_t t0 = t_now_ms();
	/* It stops blocking after the grace... */
	ASSERT_EQ(mesh_gpu_settle(g, 5000 * MS), 0);
	EXPECT_GE(t_now_ms() - t0, 150);
	struct mesh_gpu_use u;
	ASSERT_EQ(mesh_gpu_use(g, id, &u), 0);
	EXPECT_EQ(u.state, MESH_GPU_STUCK);
	char *ev = mesh_gpu_next_event(g);
	EXPECT_CONTAINS(ev, "hog#0");
	EXPECT_CONTAINS(ev, "still holds GPU memory");
	EXPECT_CONTAINS(ev, "51200 MiB on GPU 0");
	free(ev);
	/* ...but what it holds still counts. */
	EXPECT_EQ(mesh_gpu_place(g, "n#0", 1, 40 * GIB, &id2, &vis, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "hog#0 50.0 GiB still held after it exited");
	free(err);
	mesh_gpu_free(g);
}

/* meshd restarted after a kill -9: NVML lists a process that is gone (its
 * memory not yet freed) and one that lives.  Neither's memory is placed on. */
TEST(gpu_leftovers_at_start_are_not_placed_on)
{
	pid_t dead = sleeper(NULL), live = sleeper(NULL);
	end(dead);
	char st[512];
	snprintf(st, sizeof st, "gpu %llu 0 G\nproc 0 %d %llu 400\nproc 0 %d %llu\n", 80 * GIB, (int)dead, 50 * GIB,
		 (int)live, 20 * GIB);
	state(st);
	struct mesh_gpu_cfg cfg = {.nvml_path = fake()};
	struct mesh_gpu *g;
	char *err = NULL, *vis = NULL;
	ASSERT_EQ(mesh_gpu_new(&g, &cfg, &err), 0);
	char *e1 = mesh_gpu_next_event(g), *e2 = mesh_gpu_next_event(g);
	char both[1024];
	snprintf(both, sizeof both, "%s | %s", e1 ? e1 : "", e2 ? e2 : "");
	EXPECT_CONTAINS(both, "is gone but NVML lists it with 51200 MiB on GPU 0: waiting for it");
	EXPECT_CONTAINS(both, "holds 20480 MiB on GPU 0 (not a worker of this meshd");
	free(e1);
	free(e2);
	uint64_t id;
	EXPECT_EQ(mesh_gpu_place(g, "n#0", 1, 30 * GIB, &id, &vis, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "leftover pid");
	free(err);
	/* The dead one's memory comes back; then 30 GiB fit, 70 never. */
	ASSERT_EQ(mesh_gpu_settle(g, 5000 * MS), 0);
	ASSERT_EQ(mesh_gpu_place(g, "n#0", 1, 30 * GIB, &id, &vis, &err), 0);
	free(vis);
	EXPECT_EQ(mesh_gpu_place(g, "m#0", 1, 40 * GIB, &id, &vis, &err), MESH_E_NOGPU);
	free(err);
	mesh_gpu_free(g);
	end(live);
}

TEST(manifest_gpus_and_vram)
{
	static const char base[] = "name = \"g\"\nbackends = [\"native\"]\n";
	char text[512], *err = NULL;
	struct mesh_manifest m;
	snprintf(text, sizeof text, "%sdevice = \"gpu\"\ngpus = 2\nvram = \"20GiB\"\n", base);
	ASSERT_EQ(mesh_manifest_parse("g.toml", text, strlen(text), "g", &m, &err), 0);
	EXPECT_EQ(m.gpus, 2);
	EXPECT_UEQ(m.vram, 20 * GIB);
	mesh_manifest_release(&m);
	snprintf(text, sizeof text, "%sdevice = \"gpu\"\nvram = \"512MiB\"\n", base);
	ASSERT_EQ(mesh_manifest_parse("g.toml", text, strlen(text), "g", &m, &err), 0);
	EXPECT_EQ(m.gpus, 1); /* a GPU program gets one by default */
	EXPECT_UEQ(m.vram, 512ull << 20);
	mesh_manifest_release(&m);
	snprintf(text, sizeof text, "%sdevice = \"gpu\"\n", base);
	ASSERT_EQ(mesh_manifest_parse("g.toml", text, strlen(text), "g", &m, &err), 0);
	EXPECT_EQ(m.gpus, 1);
	EXPECT_UEQ(m.vram, 0);
	mesh_manifest_release(&m);
	snprintf(text, sizeof text, "%s", base);
	ASSERT_EQ(mesh_manifest_parse("g.toml", text, strlen(text), "g", &m, &err), 0);
	EXPECT_EQ(m.gpus, 0);
	mesh_manifest_release(&m);
	static const struct {
		const char *add, *msg;
	} bad[] = {
		{"gpus = 1\n", "'gpus' is for GPU programs: add device = \"gpu\""},
		{"vram = \"1G\"\n", "'vram' is for GPU programs"},
		{"device = \"gpu\"\ngpus = 0\n", "'gpus' must be between 1 and 16"},
		{"device = \"gpu\"\ngpus = 17\n", "'gpus' must be between 1 and 16"},
		{"device = \"gpu\"\nvram = \"20GB\"\n", "'vram' must be bytes or a size like"},
		{"device = \"gpu\"\nvram = \"lots\"\n", "'vram' must be bytes or a size like"},
		{"device = \"gpu\"\nvram = \"1K\"\n", "'vram' must be between 1M and 1024T"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(text, sizeof text, "%s%s", base, bad[i].add);
		EXPECT_EQ(mesh_manifest_parse("g.toml", text, strlen(text), "g", &m, &err), MESH_E_PARSE);
		EXPECT_CONTAINS(err, bad[i].msg);
		free(err);
		err = NULL;
	}
}
