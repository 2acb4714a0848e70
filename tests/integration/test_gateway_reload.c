/* meshd --http reads its catalog again on `mesh reload` (POST /v1/reload)
 * and on SIGHUP: an unchanged program goes on (same process), a changed one
 * ends its stream in flight on its old process and answers the next request
 * with the new definition, a removed one ends its stream and then answers
 * 404, a new one is served, a manifest that does not parse is refused and
 * its program keeps the old definition. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <dirent.h>
#include <pthread.h>

struct stream_arg {
	int port, status;
	const char *model;
	char resp[16384];
};

static void *stream_main(void *arg)
{
	struct stream_arg *a = arg;
	a->status = post_chat(a->port, a->model, "hi", 1, a->resp, sizeof a->resp);
	return NULL;
}

static const char *const slow6_b = ", \"--models\", \"m-b\", \"--tokens\", \"6\", \"--token-delay\", \"0.3\"";
static const char *const slow6_c = ", \"--models\", \"m-c\", \"--tokens\", \"6\", \"--token-delay\", \"0.3\"";

TEST_TIMEOUT(gateway_reload_changes_adds_removes_and_refuses, 120)
{
	char resp[8192], out[8192];
	add_oa("a", "\"m-a\"", ", \"--models\", \"m-a\"", "");
	add_oa("b", "\"m-b\"", slow6_b, "");
	add_oa("c", "\"m-c\"", slow6_c, "");
	add_oa("e", "\"m-e\"", ", \"--models\", \"m-e\"", "");
	struct gw g = start_gw("");
	ASSERT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_chat(g.port, "m-c", "hi", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_chat(g.port, "m-e", "hi", 0, resp, sizeof resp), 200);
	pid_t pid_a = spawned_pid_of("a"), pid_b = spawned_pid_of("b"), pid_e = spawned_pid_of("e");
	ASSERT_GT(pid_a, 1);
	ASSERT_GT(pid_b, 1);
	/* A stream in flight on b and on c (each program has logged it). */
	struct stream_arg sb = {.port = g.port, .model = "m-b"}, sc = {.port = g.port, .model = "m-c"};
	pthread_t tb, tc;
	ASSERT_EQ(pthread_create(&tb, NULL, stream_main, &sb), 0);
	ASSERT_EQ(pthread_create(&tc, NULL, stream_main, &sc), 0);
	struct has_n hb = {"logs/b.log", "req POST", 2}, hc = {"logs/c.log", "req POST", 2};
	ASSERT_TRUE(t_wait_for(has_n_cond, &hb, 10000));
	ASSERT_TRUE(t_wait_for(has_n_cond, &hc, 10000));
	/* b changed (3 tokens, none slow), c removed, d added, e broken. */
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\", \"--tokens\", \"3\"", "");
	ASSERT_EQ(unlink("catalog/c.toml"), 0);
	add_oa("d", "\"m-d\"", ", \"--models\", \"m-d\"", "");
	t_write_file("catalog/e.toml", "name = \"e\"\nbackend = \"http\"\ncommand = [\"python3\"\n");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload"), 65);
	EXPECT_CONTAINS(out, "reloaded: 1 changed (b), 1 added (d), 1 removed (c), 1 refused (e: ");
	EXPECT_CONTAINS(out, "e.toml:3:");
	EXPECT_CONTAINS(out, "1 unchanged");
	EXPECT_TRUE(file_has("meshd.err", "gateway reloaded: 1 changed (b), 1 added (d), 1 removed (c), 1 refused (e: "));
	/* c's models are gone at once; its stream ends whole. */
	EXPECT_EQ(post_chat(g.port, "m-c", "hi", 0, resp, sizeof resp), 404);
	EXPECT_CONTAINS(resp, "model_not_found");
	/* b's next request gets the new definition, after its stream ended
	 * whole on the old process. */
	EXPECT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok0 tok1 tok2\"");
	EXPECT_EQ(count_in("meshd.err", "program=b spawned"), 2);
	EXPECT_NE(spawned_pid_of("b"), pid_b);
	pthread_join(tb, NULL);
	pthread_join(tc, NULL);
	EXPECT_EQ(sb.status, 200);
	EXPECT_CONTAINS(sb.resp, "tok5");
	EXPECT_CONTAINS(sb.resp, "data: [DONE]");
	EXPECT_EQ(sc.status, 200);
	EXPECT_CONTAINS(sc.resp, "tok5");
	EXPECT_CONTAINS(sc.resp, "data: [DONE]");
	/* d is served; e and a go on as they were (the same processes). */
	EXPECT_EQ(post_chat(g.port, "m-d", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(post_chat(g.port, "m-e", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(count_in("meshd.err", "program=a spawned"), 1);
	EXPECT_EQ(count_in("meshd.err", "program=e spawned"), 1);
	EXPECT_EQ(kill(pid_a, 0), 0);
	EXPECT_EQ(kill(pid_e, 0), 0);
	/* The old b and c processes are stopped. */
	struct has_n sbn = {"meshd.err", "program=b stopped pid=", 1}, scn = {"meshd.err", "program=c stopped pid=", 1};
	EXPECT_TRUE(t_wait_for(has_n_cond, &sbn, 10000));
	EXPECT_TRUE(t_wait_for(has_n_cond, &scn, 10000));
	EXPECT_EQ(kill(pid_b, 0), -1);
	/* e's manifest as it was: nothing changes, the reload exits 0. */
	add_oa("e", "\"m-e\"", ", \"--models\", \"m-e\"", "");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload"), 0);
	EXPECT_CONTAINS(out, "reloaded: 4 unchanged");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -X POST --unix-socket run/meshd.sock http://x/v1/reload"), 0);
	EXPECT_CONTAINS(out, "\"summary\":\"reloaded: 4 unchanged\"");
	EXPECT_EQ(count_in("meshd.err", "program=e spawned"), 1);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload --help"), 0);
	EXPECT_CONTAINS(out, "usage: mesh reload");
	EXPECT_EQ(stop_gw(&g), 0);
}

TEST_TIMEOUT(gateway_sighup_reloads_the_catalog, 60)
{
	char resp[8192];
	add_oa("a", "\"m-a\"", ", \"--models\", \"m-a\"", "");
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", "");
	struct gw g = start_gw("");
	ASSERT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok4");
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\", \"--tokens\", \"2\"", "");
	add_oa("d", "\"m-d\"", ", \"--models\", \"m-d\"", "");
	add_oa("f", "\"m-a\"", ", \"--models\", \"m-a\"", ""); /* a's model: refused */
	ASSERT_EQ(kill(g.pid, SIGHUP), 0);
	struct has_n h = {"meshd.err",
			  "gateway reloaded: 1 changed (b), 1 added (d), 1 refused (f: model 'm-a' is served by 'a' "
			  "already), 1 unchanged",
			  1};
	EXPECT_TRUE(t_wait_for(has_n_cond, &h, 10000));
	EXPECT_EQ(kill(g.pid, 0), 0); /* meshd goes on */
	EXPECT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok0 tok1\"");
	EXPECT_EQ(post_chat(g.port, "m-d", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(count_in("meshd.err", "program=a spawned"), 1);
	EXPECT_EQ(count_in("meshd.err", "program=b spawned"), 2);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A reload re-reads the loaded native programs too, as `mesh load` does:
 * a changed manifest is an upgrade, an unchanged one nothing, one not
 * loaded stays so, one whose manifest no longer reads keeps its image. */
TEST_TIMEOUT(reload_upgrades_loaded_native_programs, 60)
{
	char out[8192];
	add_oa("a", "\"m-a\"", ", \"--models\", \"m-a\"", "");
	meshd_t_add_program(out, sizeof out, "w", t_bin("tests-workers/host_worker"), "idle_ttl = \"200s\"\n");
	meshd_t_add_program(out, sizeof out, "v", t_bin("tests-workers/host_worker"), NULL);
	meshd_t_add_program(out, sizeof out, "u", t_bin("tests-workers/host_worker"), NULL);
	meshd_t_add_program(out, sizeof out, "x", t_bin("tests-workers/host_worker"), NULL);
	struct gw g = start_gw("");
	int lrc = meshd_t_mesh(out, sizeof out, 1, "load w");
	if (lrc)
		FAIL("mesh load w: %s", out);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "load v"), 0);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "load u"), 0);
	meshd_t_add_program(out, sizeof out, "w", t_bin("tests-workers/host_worker"), "idle_ttl = \"300s\"\n");
	meshd_t_add_program(out, sizeof out, "x", t_bin("tests-workers/host_worker"), "idle_ttl = \"300s\"\n");
	t_write_file("catalog/u.toml", "name = \"u\"\nbackends = [\"native\"\n");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload"), 65);
	/* The gateway's line first (u's manifest may have been an HTTP
	 * program's: refused there too), then the native programs'. */
	EXPECT_CONTAINS(out, "cannot reload the catalog: reloaded: 1 refused (u: ");
	EXPECT_CONTAINS(out, "\nnative programs reloaded: 1 upgraded (w), 1 refused (u: ");
	EXPECT_CONTAINS(out, "u.toml:2:");
	EXPECT_CONTAINS(out, "), 1 unchanged");
	EXPECT_TRUE(file_has("meshd.err", "native programs reloaded: 1 upgraded (w), 1 refused (u: "));
	/* x was not loaded: a reload does not load it. */
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 0, "ps --json"), 0);
	EXPECT_FALSE(strstr(out, "\"name\":\"x\"") != NULL);
	EXPECT_CONTAINS(out, "\"name\":\"u\"");
	EXPECT_EQ(stop_gw(&g), 0);
}

static unsigned fds_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	unsigned n = 0;
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A meshd that serves for months sees its catalog changed again and again:
 * each reload that changes a program retires its old definition, which is
 * freed once its requests ended and its process is gone, not at meshd's
 * stop (before, each stayed until then).  Some definitions never serve a
 * request: the next one waits for nothing of theirs. */
TEST_TIMEOUT(gateway_reloads_free_the_definitions_they_retire, 120)
{
	char resp[8192], out[8192], extra[64];
	enum { RELOADS = 12 };
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", "");
	struct gw g = start_gw("");
	unsigned fds0 = 0;
	int served = 0;
	for (int i = 0; i < RELOADS; i++) {
		if (i % 3 == 0) {
			ASSERT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
			served++;
		}
		if (i == 3)
			fds0 = fds_of(g.pid);
		snprintf(extra, sizeof extra, "# edit %d\n", i);
		add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", extra);
		ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload"), 0);
		EXPECT_CONTAINS(out, "1 changed (b)");
	}
	struct has_n stopped = {"meshd.err", "program=b stopped pid=", served};
	EXPECT_TRUE(t_wait_for(has_n_cond, &stopped, 20000));
	struct has_n freed = {"meshd.err", "program=b its definition of before a reload is freed", RELOADS};
	EXPECT_TRUE(t_wait_for(has_n_cond, &freed, 20000));
	/* The last definition starts: what it waited for was freed. */
	EXPECT_EQ(post_chat(g.port, "m-b", "hi", 0, resp, sizeof resp), 200);
	unsigned fds1 = fds_of(g.pid);
	printf("meshd fds: %u at the 4th reload, %u after the 12th\n", fds0, fds1);
	/* Flat, give or take a connection or pipe in flight (49 against 47
	 * seen under ASan): one fd kept a reload would be 8 more. */
	EXPECT_GT(fds0, 0u);
	EXPECT_LE(fds1, fds0 + 5);
	EXPECT_EQ(stop_gw(&g), 0);
}

struct load_arg {
	int port, stop, n200, nother, last_other;
};

static void *load_main(void *arg)
{
	struct load_arg *a = arg;
	char resp[8192];
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		int st = post_chat(a->port, "m-b", "hi", 0, resp, sizeof resp);
		if (st == 200)
			a->n200++;
		else
			a->nother++, a->last_other = st;
	}
	return NULL;
}

/* Reloads while requests keep coming: the definitions retired under them
 * are freed as their requests end, and none is freed under a request
 * (ASan in make check).  A request that waited for a definition a reload
 * retired is answered 503, as before. */
TEST_TIMEOUT(gateway_reloads_under_requests_free_what_they_retire, 120)
{
	char out[8192], extra[64];
	enum { RELOADS = 6 };
	add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", "");
	struct gw g = start_gw("");
	struct load_arg la[2] = {{.port = g.port}, {.port = g.port}};
	pthread_t th[2];
	for (int k = 0; k < 2; k++)
		ASSERT_EQ(pthread_create(&th[k], NULL, load_main, &la[k]), 0);
	for (int i = 0; i < RELOADS; i++) {
		usleep(800000); /* a start (python) and a few requests */
		snprintf(extra, sizeof extra, "# edit %d\n", i);
		add_oa("b", "\"m-b\"", ", \"--models\", \"m-b\"", extra);
		EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "reload"), 0);
	}
	usleep(400000);
	for (int k = 0; k < 2; k++) {
		__atomic_store_n(&la[k].stop, 1, __ATOMIC_RELEASE);
		pthread_join(th[k], NULL);
	}
	int n200 = la[0].n200 + la[1].n200, nother = la[0].nother + la[1].nother;
	printf("requests: %d answered 200, %d otherwise (last %d), over %d reloads\n", n200, nother,
	       nother ? (la[0].nother ? la[0].last_other : la[1].last_other) : 0, RELOADS);
	/* Served across the reloads (16 under ASan in CI, 198 without: each
	 * reload's definition starts a python server before its first). */
	EXPECT_GE(n200, RELOADS / 2);
	for (int k = 0; k < 2; k++)
		EXPECT_TRUE(la[k].nother == 0 || la[k].last_other == 503);
	struct has_n freed = {"meshd.err", "program=b its definition of before a reload is freed", RELOADS};
	EXPECT_TRUE(t_wait_for(has_n_cond, &freed, 30000));
	EXPECT_EQ(stop_gw(&g), 0);
}
