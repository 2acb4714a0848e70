/* meshd --http's memory budget with measured memory (issue 13, "Swap under
 * a budget": "memory/VRAM declared in the manifest, measured where NVML is
 * present"; "on GPU, NVML lists none"): a program counts for max(its
 * manifest's `memory`, its processes' resident memory + the VRAM NVML
 * lists for their pids), and an evicted program's memory is free only once
 * NVML lists none of its pids.  VRAM through the fake NVML
 * (tests/gpu/fake_nvml.c, loaded by MESH_NVML_LIB). */
#include "runner/t.h"
#include "integration/gw_t.h"
#include "gpu/nvml.h"

#include <limits.h>
#include <sys/stat.h>

#define MIB (1024ull * 1024)
#define GIB (1024ull * MIB)

static char out[65536];

/* GET /v1/ps (mesh ps --json) into out: 0 or the exit code. */
static int ps_json(void)
{
	return t_sh(out, sizeof out, 1, "'%s' ps --json --socket run/meshd.sock", t_bin("mesh"));
}

/* `"name":"<prog>"` ... `"<key>":N` in /v1/ps: the program's memory number
 * (-1 when not found). */
static long long prog_mem(const char *prog, const char *key)
{
	char name[96], k[64];
	if (ps_json() != 0)
		return -1;
	snprintf(name, sizeof name, "\"name\":\"%s\"", prog);
	snprintf(k, sizeof k, "\"%s\":", key);
	const char *p = strstr(out, name), *end = p ? strstr(p + 1, "\"name\":\"") : NULL;
	const char *v = p ? strstr(p, k) : NULL;
	if (!v || (end && v > end))
		return -1;
	return atoll(v + strlen(k));
}

struct at_least {
	const char *prog, *key;
	long long min;
};
static int mem_at_least(void *arg)
{
	struct at_least *a = arg;
	return prog_mem(a->prog, a->key) >= a->min;
}

/* The fake NVML with one 80 GiB GPU, state file nvml.state here. */
static void fake_nvml(char *state, size_t cap)
{
	char cwd[PATH_MAX - 64], text[128];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(state, cap, "%s/nvml.state", cwd);
	snprintf(text, sizeof text, "gpu %llu 0 Fake H200\n", 80 * GIB);
	t_write_file(state, text);
	setenv("FAKE_NVML_STATE", state, 1);
	setenv(MESH_NVML_ENV, t_bin("tests-gpu/fake_nvml.so"), 1);
}

/* A program that declares 1G but holds 4 GiB of VRAM (its own pid in the
 * fake's state, lingering 600 ms after its end: a driver still freeing),
 * and one that declares 3G, under a 6G budget: 1 + 3 would fit, 4 + 3 does
 * not, so the second start evicts the first, and starts only once NVML
 * lists none of the first's pids. */
TEST_TIMEOUT(gateway_budget_counts_measured_vram_and_waits_for_it, 40)
{
	char state[PATH_MAX], resp[8192];
	fake_nvml(state, sizeof state);
	/* Its host pid: /proc/self is the shell's own in the host's /proc
	 * (NVML lists host pids; inside its namespace it is pid 2). */
	mkdir("catalog", 0755);
	char text[3 * PATH_MAX];
	snprintf(text, sizeof text,
		 "name = \"a\"\nbackend = \"http\"\n"
		 "command = [\"sh\", \"-c\", \"read -r pid rest < /proc/self/stat; echo \\\"proc 0 $pid %llu 600\\\" >> %s; "
		 "exec python3 %s --port {port} --models m-a\"]\nmodels = [\"m-a\"]\nmemory = \"1G\"\n",
		 4 * GIB, state, oa_server());
	t_write_file("catalog/a.toml", text);
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", "memory = \"3G\"\n");
	struct gw g = start_gw("--http-memory 6G");
	EXPECT_TRUE(file_has("meshd.err", "gateway: VRAM measured through NVML"));
	EXPECT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	struct at_least a4 = {"a", "vram", (long long)(4 * GIB)};
	ASSERT_TRUE(t_wait_for(mem_at_least, &a4, 5000));
	EXPECT_EQ(prog_mem("a", "declared"), (long long)GIB);
	/* A python holds a few MiB; its resident memory is sampled on its own
	 * tick, which may come after the VRAM sample above. */
	struct at_least a1 = {"a", "rss", (long long)MIB};
	EXPECT_TRUE(t_wait_for(mem_at_least, &a1, 5000));
	EXPECT_GE(prog_mem("a", "counted"), (long long)(4 * GIB));
	EXPECT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	EXPECT_TRUE(file_has("meshd.err", "program=b evicting a: needs 3221225472 bytes"));
	/* b was spawned after a's VRAM was free, 600 ms (the linger) after a's end. */
	char *err = t_read_file("meshd.err", NULL);
	ASSERT_TRUE(err != NULL);
	const char *fr = strstr(err, "program=a GPU memory free "), *sp = strstr(err, "program=b spawned");
	ASSERT_TRUE(fr != NULL);
	ASSERT_TRUE(sp != NULL);
	EXPECT_LT(fr, sp);
	EXPECT_GE(atof(fr + strlen("program=a GPU memory free ")), 450.0);
	free(err);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* Without NVML: resident memory.  A program that declares 1M but whose
 * process tree holds ~200 MiB (a child it started), beside one that
 * declares 150M, under a 300M budget: the second start evicts the first.
 * A start of the first again is counted at what its last run held. */
TEST_TIMEOUT(gateway_budget_counts_measured_rss, 40)
{
	char resp[8192], text[PATH_MAX + 1024];
	setenv(MESH_NVML_ENV, "none", 1);
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"a\"\nbackend = \"http\"\n"
		 "command = [\"sh\", \"-c\", \"python3 -c 'import time; x = b\\\"1\\\" * (200 << 20); time.sleep(300)' & "
		 "exec python3 %s --port {port} --models m-a\"]\nmodels = [\"m-a\"]\nmemory = \"1M\"\n",
		 oa_server());
	t_write_file("catalog/a.toml", text);
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", "memory = \"150M\"\n");
	struct gw g = start_gw("--http-memory 300M");
	EXPECT_TRUE(file_has("meshd.err", "gateway: no VRAM measured"));
	EXPECT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	struct at_least a200 = {"a", "rss", (long long)(200 * MIB)};
	ASSERT_TRUE(t_wait_for(mem_at_least, &a200, 8000));
	EXPECT_EQ(prog_mem("a", "vram"), 0);
	EXPECT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	EXPECT_TRUE(file_has("meshd.err", "program=b evicting a: needs 157286400 bytes"));
	ASSERT_TRUE(wait_file_has("meshd.err", "program=a stopped", 5000));
	EXPECT_GE(prog_mem("a", "last_peak"), (long long)(200 * MIB));
	EXPECT_EQ(stop_gw(&g), 0);
}
