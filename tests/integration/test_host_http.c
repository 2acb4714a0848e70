/* The host's second kind of program: an HTTP program (a model server,
 * tests/workers/openai_server.py) started, probed warm, stopped by its stop
 * signal, reaped and reported by the same table as a native worker, its
 * changes of state told to its owner's callback. */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "host/image.h"
#include "integration/serve_t.h"
#include "runner/t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

/* The changes the notify callback was told, as "FROM>TO " words. */
static char told[4096];
static pthread_mutex_t told_mu = PTHREAD_MUTEX_INITIALIZER;
static void on_change(void *arg, struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to)
{
	(void)arg, (void)w;
	pthread_mutex_lock(&told_mu);
	size_t n = strlen(told);
	snprintf(told + n, sizeof told - n, "%s>%s ", mesh_istate_name(from), mesh_istate_name(to));
	pthread_mutex_unlock(&told_mu);
}

struct fx {
	struct mesh_host *h;
	struct mesh_image img;
	struct mesh_instance *w;
};

/* An HTTP program "p": openai_server.py on {port} with more arguments (a
 * TOML array's tail) and more manifest lines; a host; its instance. */
static void setup(struct fx *f, const char *srv, const char *extra)
{
	char text[8192], *err = NULL;
	struct mesh_manifest m;
	mkdir("logs", 0755);
	snprintf(text, sizeof text,
		 "name = \"p\"\nbackend = \"http\"\ncommand = [\"python3\", \"%s\", \"--port\", \"{port}\"%s]\n"
		 "models = [\"test-model\"]\n%s",
		 t_src("tests/workers/openai_server.py"), srv, extra);
	if (mesh_manifest_parse("p.toml", text, strlen(text), "p", &m, &err))
		FAIL("manifest: %s", err);
	struct mesh_host_cfg cfg = {.logs = "logs"};
	if (mesh_host_new(&f->h, &cfg, &err))
		FAIL("host: %s", err);
	if (mesh_image_http(&f->img, &m, mesh_host_caps(f->h), &err))
		FAIL("image: %s", err);
	ASSERT_EQ(mesh_instance_new(f->h, &f->img, &f->w), 0);
	told[0] = 0;
	mesh_instance_set_notify(f->w, on_change, NULL);
}

static void teardown(struct fx *f)
{
	mesh_instance_free(f->w);
	mesh_host_free(f->h);
	mesh_image_release(&f->img);
}

/* A request on fd (a chat completion), its whole answer in out. */
static void ask(int fd, char *out, size_t cap)
{
	static const char body[] = "{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	char req[512];
	int n = snprintf(req, sizeof req,
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 strlen(body), body);
	ASSERT_EQ(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	size_t have = 0;
	for (int i = 0; i < 500 && have < cap - 1; i++) {
		ssize_t r = recv(fd, out + have, cap - 1 - have, MSG_DONTWAIT);
		if (r == 0)
			break;
		if (r > 0)
			have += (size_t)r;
		else
			usleep(10000);
	}
	out[have] = 0;
}

/* Started, its port found listening and its probe passed: WARM; the probe's
 * connection carries a first request; exit stops it by its stop signal
 * (no control channel: the `exit` row goes on to the signal at once). */
TEST_TIMEOUT(host_http_program_start_warm_stop, 40)
{
	struct fx f;
	char *err = NULL, resp[8192];
	setup(&f, ", \"--start-delay\", \"0.3\"", "");
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_PROBING);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_WARM, S(20), &err), 0);
	struct mesh_instance_http hi;
	ASSERT_EQ(mesh_instance_http(f.w, &hi), 0);
	EXPECT_GT(hi.port, 0);
	EXPECT_GT(hi.listen_tests, 10u); /* nothing listened for 0.3 s: bare connects, 0.25 ms apart at first */
	EXPECT_GE(hi.probes, 1u);
	EXPECT_GT(hi.t_warm, hi.t_listen);
	EXPECT_GE(hi.t_listen, hi.t_exec);
	EXPECT_CONTAINS(hi.last_probe, "warm: HTTP 200, model 'test-model' listed");
	int fd = mesh_instance_take_conn(f.w);
	ASSERT_GE(fd, 0);
	EXPECT_EQ(mesh_instance_take_conn(f.w), -1); /* once */
	ask(fd, resp, sizeof resp);
	close(fd);
	EXPECT_CONTAINS(resp, "HTTP/1.1 200");
	EXPECT_CONTAINS(resp, "tok0 tok1");
	pid_t pid = mesh_instance_pid(f.w);
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(20), &err), 0);
	EXPECT_TRUE(kill(pid, 0) != 0);
	/* Asked to stop: no report, no crash. */
	char *r = mesh_instance_crashed(f.w);
	EXPECT_TRUE(r == NULL);
	free(r);
	EXPECT_EQ(mesh_instance_stats(f.w).crashes, 0u);
	EXPECT_STREQ(told, "DOWN>PROBING PROBING>WARM WARM>STOPPING_EXIT STOPPING_EXIT>STOPPING_TERM STOPPING_TERM>DOWN ");
	/* One log, as a worker's: its output and the host's lines. */
	EXPECT_TRUE(file_has("logs/p.log", "openai_server: listening on 127.0.0.1:"));
	EXPECT_TRUE(file_has("logs/p.log", "[meshd] started pid "));
	EXPECT_TRUE(file_has("logs/p.log", "[meshd] warm pid "));
	teardown(&f);
}

/* A program that exits before it is warm: a crash, reported with its
 * status, the last probe and its last lines. */
TEST_TIMEOUT(host_http_program_crash_before_warm_is_reported, 30)
{
	struct fx f;
	char *err = NULL;
	setup(&f, ", \"--exit-on-start\", \"3\"", "");
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(20), &err), MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "program 'p' exited with status 3 before it was warm (last probe: ");
	EXPECT_CONTAINS(err, "; its last lines:\nopenai_server: starting\nopenai_server: cannot start (asked to)\n");
	free(err);
	EXPECT_STREQ(told, "DOWN>PROBING PROBING>DOWN ");
	struct mesh_instance_http hi;
	ASSERT_EQ(mesh_instance_http(f.w, &hi), 0);
	EXPECT_EQ(hi.status, 3);
	EXPECT_EQ(mesh_instance_stats(f.w).unready, 1u);
	teardown(&f);
}

/* Not warm by its start timeout: its failure says so (504's words), then
 * it is stopped gracefully (its stop signal, not SIGKILL).  10 s: a python3
 * that starts slowly (3.5 s seen on a loaded 2-CPU machine) still listens
 * before it, so the failure names its 503. */
TEST_TIMEOUT(host_http_program_start_timeout_stops_it_gracefully, 45)
{
	struct fx f;
	char *err = NULL;
	setup(&f, ", \"--ready-delay\", \"60\"", "[lifecycle]\nstart_timeout = \"10s\"\nstop_grace = \"10s\"\n");
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(30), &err), MESH_E_TIMEOUT);
	EXPECT_CONTAINS(err, "program 'p' was not warm within 10.0 s (last probe: cold: HTTP 503");
	free(err);
	EXPECT_STREQ(told, "DOWN>PROBING PROBING>STOPPING_EXIT STOPPING_EXIT>STOPPING_TERM STOPPING_TERM>DOWN ");
	struct mesh_instance_http hi;
	ASSERT_EQ(mesh_instance_http(f.w, &hi), 0);
	EXPECT_EQ(hi.sig, SIGTERM); /* python's default SIGTERM: gone at the stop signal */
	teardown(&f);
}

/* A spawn that fails (no such command) is the start's failure at once. */
TEST_TIMEOUT(host_http_program_that_cannot_run_is_reported, 20)
{
	struct fx f;
	char *err = NULL, text[1024];
	struct mesh_manifest m;
	mkdir("logs", 0755);
	snprintf(text, sizeof text, "name = \"p\"\nbackend = \"http\"\ncommand = [\"no-such-server-x\", \"{port}\"]\n"
				    "models = [\"m\"]\n");
	ASSERT_EQ(mesh_manifest_parse("p.toml", text, strlen(text), "p", &m, &err), 0);
	struct mesh_host_cfg cfg = {.logs = "logs"};
	ASSERT_EQ(mesh_host_new(&f.h, &cfg, &err), 0);
	ASSERT_EQ(mesh_image_http(&f.img, &m, mesh_host_caps(f.h), &err), 0);
	ASSERT_EQ(mesh_instance_new(f.h, &f.img, &f.w), 0);
	EXPECT_EQ(mesh_instance_warm(f.w, &err), -ENOENT);
	EXPECT_CONTAINS(err, "program 'p' cannot run 'no-such-server-x': ");
	free(err);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_DOWN);
	teardown(&f);
}

/* Warm and probed every 0.2 s: a program that stops answering (SIGSTOP:
 * its kernel still accepts) is hung after 2 failed probes: SIGKILLed. */
TEST_TIMEOUT(host_http_program_hung_is_killed, 30)
{
	struct fx f;
	char *err = NULL;
	setup(&f, "", "");
	mesh_instance_set_check(f.w, 200 * MESH_NS_PER_MS, 2);
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_WARM, S(20), &err), 0);
	usleep(700000); /* probed and answering meanwhile */
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_WARM);
	ASSERT_EQ(kill(mesh_instance_pid(f.w), SIGSTOP), 0);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(20), &err), MESH_E_TIMEOUT);
	EXPECT_CONTAINS(err, "program 'p' hung: 2 probes in a row failed (last: cold: no complete response");
	free(err);
	EXPECT_STREQ(told, "DOWN>PROBING PROBING>WARM WARM>STOPPING_KILL STOPPING_KILL>DOWN ");
	teardown(&f);
}
