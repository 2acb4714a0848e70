/* meshd's control API (meshd/api/api.c) and its client (client/api_client.c),
 * in process, over the real core (meshd/core/core.c) and real workers. */
#include "base/err.h"
#include "base/log.h"
#include "meshd/api/api.h"
#include "client/api_client.h"
#include "meshd/notify.h"
#include "meshd/core/ops.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct meshd_core *core;
static pthread_t loop_thread;

static void *loop_main(void *arg)
{
	meshd_core_run(arg);
	return NULL;
}

/* The real core on a catalog in the test's directory, its loop on a thread:
 * echo (the example worker), crasher (dies before ready), sleeper and
 * sleeper3 (never ready, 1 s and 3 s ready timeouts). */
static void start_core(unsigned slots)
{
	struct meshd_config cfg = {.catalog = "catalog", .logs = "logs", .slots = slots, .isolation = "none"};
	char *err = NULL;
	mesh_log_init("test_api", MESH_LOG_ERROR); /* request lines would drown the test's own output */
	mkdir("logs", 0755);
	meshd_t_add_program(NULL, 0, "echo", t_bin("examples/echo_worker"), NULL);
	meshd_t_add_program(NULL, 0, "echo2", t_bin("examples/echo_worker"), NULL);
	meshd_t_add_program(NULL, 0, "crasher", "/bin/sh",
		    "args = [\"-c\", \"echo about to crash; kill -SEGV $$\"]\n");
	meshd_t_add_program(NULL, 0, "sleeper", "/bin/sh", "args = [\"-c\", \"sleep 30\"]\n[lifecycle]\nready_timeout = \"1s\"\n");
	meshd_t_add_program(NULL, 0, "sleeper3", "/bin/sh", "args = [\"-c\", \"sleep 30\"]\n[lifecycle]\nready_timeout = \"3s\"\n");
	int rc = meshd_core_new(&core, &cfg, &err);
	if (rc < 0)
		FAIL("meshd_core_new: %s", err ? err : mesh_strerror(rc));
	free(err);
	ASSERT_EQ(pthread_create(&loop_thread, NULL, loop_main, core), 0);
}

static void stop_all(struct meshd_api *a)
{
	meshd_core_stop(core);
	pthread_join(loop_thread, NULL);
	meshd_api_stop(a);
	meshd_core_free(core);
	core = NULL;
}

static struct meshd_parts parts; /* the core alone: no jobs, no gateway */

static struct meshd_api *start_api(const char *path)
{
	struct meshd_api *a = NULL;
	char *err = NULL;
	parts.core = core;
	int rc = meshd_api_start(&a, &parts, path, &err);
	if (rc < 0)
		FAIL("meshd_api_start: %s (%s)", err ? err : "", mesh_strerror(rc));
	free(err);
	return a;
}

static int req(const char *sock, const char *method, const char *target, const char *body, size_t n,
	       struct meshd_reply *r)
{
	int rc = meshd_client_request(sock, method, target, body, n, 10ull * 1000000000ull, r);
	ASSERT_EQ(rc, 0);
	return r->status;
}

/* The "code" of an error reply. */
static int code_of(struct meshd_reply *r)
{
	char *msg = NULL;
	int err = meshd_reply_error(r, &msg);
	free(msg);
	return err;
}

TEST(api_socket_modes_and_routes)
{
	char path[4096];
	struct stat st;
	struct meshd_reply r;
	snprintf(path, sizeof path, "%s/run/mesh/meshd.sock", getcwd(NULL, 0));
	ASSERT_EQ(mkdir("run", 0755), 0);
	start_core(8);
	struct meshd_api *a = start_api(path);
	ASSERT_EQ(stat("run/mesh", &st), 0);
	EXPECT_EQ(st.st_mode & 07777, 0700);
	ASSERT_EQ(stat(path, &st), 0);
	EXPECT_TRUE(S_ISSOCK(st.st_mode));
	EXPECT_EQ(st.st_mode & 07777, 0600);

	EXPECT_EQ(req(path, "GET", "/v1/ps", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.type, "application/json");
	EXPECT_CONTAINS(r.body, "\"programs\"");
	meshd_reply_release(&r);

	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/load", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.body, "\"ok\":true");
	EXPECT_CONTAINS(r.body, "\"image_hash\"");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/start", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.body, "\"pid\":");
	meshd_reply_release(&r);

	/* Binary bytes go through a call unchanged, NULs included. */
	static const char bin[] = {'a', 0, 'b', (char)0xff, '\n', 0};
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/call", bin, sizeof bin, &r), 200);
	EXPECT_EQ(r.len, sizeof bin);
	EXPECT_EQ(memcmp(r.body, bin, sizeof bin), 0);
	EXPECT_CONTAINS(r.type, "application/octet-stream");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/call", "", 0, &r), 200);
	EXPECT_EQ(r.len, 0);
	meshd_reply_release(&r);
	size_t big = 200000;
	char *payload = malloc(big);
	for (size_t i = 0; i < big; i++)
		payload[i] = (char)(i * 7 + 3);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/call", payload, big, &r), 200);
	EXPECT_EQ(r.len, big);
	EXPECT_TRUE(r.len == big && memcmp(r.body, payload, big) == 0);
	meshd_reply_release(&r);
	free(payload);

	EXPECT_EQ(req(path, "GET", "/v1/programs/echo/logs", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.type, "text/plain");
	EXPECT_CONTAINS(r.body, "echo_worker: ready\n");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "GET", "/v1/programs/echo/logs?tail=19", NULL, 0, &r), 200);
	EXPECT_STREQ(r.body, "echo_worker: ready\n");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "HEAD", "/v1/ps", NULL, 0, &r), 200);
	EXPECT_EQ(r.len, 0);
	meshd_reply_release(&r);

	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/stop", NULL, 0, &r), 200);
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/unload", NULL, 0, &r), 200);
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "GET", "/v1/ps", NULL, 0, &r), 200);
	EXPECT_TRUE(strstr(r.body, "\"echo\"") == NULL);
	meshd_reply_release(&r);
	stop_all(a);
	EXPECT_EQ(access(path, F_OK), -1);
}

/* The core answers with structs; the API renders them: the same keys as ever. */
TEST(api_renders_ps_load_start)
{
	char path[4096];
	struct meshd_reply r;
	snprintf(path, sizeof path, "%s/meshd.sock", getcwd(NULL, 0));
	start_core(3);
	struct meshd_api *a = start_api(path);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/load", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.body, "\"result\":{\"name\":\"echo\",\"device\":\"cpu\",\"binary\":");
	EXPECT_CONTAINS(r.body, "\"max_workers\":");
	EXPECT_CONTAINS(r.body, "\"limits\":\"");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "POST", "/v1/programs/echo/start", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.body, "\"result\":{\"name\":\"echo\",\"pid\":");
	EXPECT_CONTAINS(r.body, "\"state\":\"IDLE\"}");
	meshd_reply_release(&r);
	EXPECT_EQ(req(path, "GET", "/v1/ps", NULL, 0, &r), 200);
	EXPECT_CONTAINS(r.body, "{\"host\":{\"processes\":1,\"cpu_pct\":");
	EXPECT_CONTAINS(r.body, "\"spawns\":1,\"crashes\":0,\"limits_available\":\"");
	EXPECT_CONTAINS(r.body, "\"slots\":3},\"programs\":[{\"name\":\"echo\"");
	EXPECT_CONTAINS(r.body, "\"workers\":[{\"state\":\"IDLE\",\"pid\":");
	EXPECT_CONTAINS(r.body, "\"slot\":null,\"cpu_pct\":");
	EXPECT_CONTAINS(r.body, "\"last_exit\":null,\"limits_enforced\":\"");
	meshd_reply_release(&r);
	stop_all(a);
}

TEST(api_errors_have_fitting_statuses)
{
	static const struct {
		const char *method, *target;
		int status, code;
	} rows[] = {
		{"POST", "/v1/programs/nope/load", 404, MESH_E_NOTFOUND},
		{"POST", "/v1/programs/nope/call", 404, MESH_E_NOTFOUND},
		{"GET", "/v1/programs/nope/logs", 404, MESH_E_NOTFOUND},
		{"POST", "/v1/programs/nope/stop", 404, MESH_E_NOTFOUND},
		{"POST", "/v1/programs/crasher/call", 502, MESH_E_CRASHED},
		{"POST", "/v1/programs/sleeper/call", 504, MESH_E_TIMEOUT},
		{"GET", "/v1/programs/echo/load", 405, MESH_E_PROTO},
		{"POST", "/v1/ps", 405, MESH_E_PROTO},
		{"POST", "/v1/programs/echo/explode", 404, MESH_E_NOTFOUND},
		{"GET", "/v2/ps", 404, MESH_E_NOTFOUND},
		{"GET", "/", 404, MESH_E_NOTFOUND},
		{"POST", "/v1/programs//load", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/../load", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/%2e%2e/load", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/a%2fb/load", 404, MESH_E_NOTFOUND},
		{"POST", "/v1/programs/-x/load", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/a.b/load", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/echo/load/more", 404, MESH_E_NOTFOUND},
		{"POST",
		 "/v1/programs/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/load", 400,
		 MESH_E_PARSE},
		{"GET", "/v1/programs/echo/logs?tail=abc", 400, MESH_E_PARSE},
		{"GET", "/v1/programs/echo/logs?tail=-1", 400, MESH_E_PARSE},
		{"GET", "/v1/programs/echo/logs?tail=99999999999", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/echo/call?timeout=0", 400, MESH_E_PARSE},
		{"POST", "/v1/programs/echo/call?timeout=x", 400, MESH_E_PARSE},
	};
	start_core(8);
	struct meshd_api *a = start_api("api.sock");
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct meshd_reply r;
		int st = req("api.sock", rows[i].method, rows[i].target, NULL, 0, &r);
		if (st != rows[i].status || code_of(&r) != rows[i].code)
			fprintf(stderr, "    row %zu: %s %s -> %d %s\n", i, rows[i].method, rows[i].target, st, r.body);
		EXPECT_EQ(st, rows[i].status);
		EXPECT_EQ(code_of(&r), rows[i].code);
		EXPECT_CONTAINS(r.type, "application/json");
		meshd_reply_release(&r);
	}
	stop_all(a);
}

static void *slow_call(void *arg);

/* --slots 1: a second program takes the slot of an idle first one (it is
 * halted off it), but cannot get one while a call holds the only slot. */
TEST(api_state_conflict_is_409)
{
	struct meshd_reply r;
	start_core(1);
	struct meshd_api *a = start_api("api.sock");
	EXPECT_EQ(req("api.sock", "POST", "/v1/programs/echo/call", "x", 1, &r), 200);
	meshd_reply_release(&r);
	EXPECT_EQ(req("api.sock", "POST", "/v1/programs/echo2/call", "x", 1, &r), 200);
	meshd_reply_release(&r);
	/* sleeper3's call holds the slot (its worker never says ready, 3 s). */
	EXPECT_EQ(req("api.sock", "POST", "/v1/programs/echo2/stop", NULL, 0, &r), 200);
	meshd_reply_release(&r);
	pthread_t th;
	pthread_create(&th, NULL, slow_call, "api.sock");
	uint64_t until = t_now_ms() + 5000;
	while (access("logs/sleeper3.log", F_OK) != 0 && t_now_ms() < until)
		usleep(10000);
	EXPECT_EQ(req("api.sock", "POST", "/v1/programs/echo/call", "x", 1, &r), 409);
	EXPECT_EQ(code_of(&r), MESH_E_STATE);
	EXPECT_CONTAINS(r.body, "slot");
	meshd_reply_release(&r);
	pthread_join(th, NULL);
	stop_all(a);
}

/* The crash report reaches the caller: exit status and the output tail. */
TEST(api_crash_report)
{
	struct meshd_reply r;
	start_core(8);
	struct meshd_api *a = start_api("api.sock");
	EXPECT_EQ(req("api.sock", "POST", "/v1/programs/crasher/start", NULL, 0, &r), 502);
	char *msg = NULL;
	EXPECT_EQ(meshd_reply_error(&r, &msg), MESH_E_CRASHED);
	EXPECT_CONTAINS(msg, "139");
	EXPECT_CONTAINS(msg, "about to crash");
	free(msg);
	meshd_reply_release(&r);
	stop_all(a);
}

TEST(api_refuses_oversize_body_with_413)
{
	start_core(8);
	struct meshd_api *a = start_api("api.sock");
	char out[4096];
	/* Announced too big: answered before the body is read. */
	int rc = t_sh(out, sizeof out, 1,
		      "curl -s -o /dev/null -w '%%{http_code}' --unix-socket api.sock -X POST "
		      "-H 'Content-Length: 16777217' --data-binary '' http://x/v1/programs/echo/call");
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "413");
	/* Chunked, grows past the bound while it arrives. */
	rc = t_sh(out, sizeof out, 1,
		  "head -c 17000000 /dev/zero | curl -s -o body -w '%%{http_code}' --unix-socket api.sock "
		  "-H 'Transfer-Encoding: chunked' --data-binary @- http://x/v1/programs/echo/call");
	EXPECT_STREQ(out, "413");
	char *b = t_read_file("body", NULL);
	EXPECT_CONTAINS(b, "E_TOOBIG");
	free(b);
	/* Exactly the bound passes the API (the worker's slot may still refuse it). */
	rc = t_sh(out, sizeof out, 1,
		  "head -c 16777216 /dev/zero | curl -s -o body --unix-socket api.sock "
		  "--data-binary @- http://x/v1/programs/echo/call");
	EXPECT_EQ(rc, 0);
	b = t_read_file("body", NULL);
	EXPECT_TRUE(b && !strstr(b, "request body over"));
	free(b);
	/* The server still serves. */
	struct meshd_reply r;
	EXPECT_EQ(req("api.sock", "GET", "/v1/ps", NULL, 0, &r), 200);
	meshd_reply_release(&r);
	stop_all(a);
}

static void *slow_call(void *arg)
{
	struct meshd_reply r;
	/* sleeper3 never says ready: this call holds its connection until the ready timeout (3 s). */
	meshd_client_request(arg, "POST", "/v1/programs/sleeper3/call", "x", 1, 10ull * 1000000000ull, &r);
	meshd_reply_release(&r);
	return NULL;
}

TEST(api_slow_call_does_not_hold_up_ps)
{
	start_core(8);
	struct meshd_api *a = start_api("api.sock");
	pthread_t th;
	struct meshd_reply r;
	pthread_create(&th, NULL, slow_call, "api.sock");
	usleep(200000);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(req("api.sock", "GET", "/v1/ps", NULL, 0, &r), 200);
	/* The call holds its connection until 3 s: an answer well before proves ps was not queued behind it. */
	EXPECT_LT(t_now_ms() - t0, 1500);
	meshd_reply_release(&r);
	pthread_join(th, NULL);
	stop_all(a);
}

TEST(api_socket_stale_live_and_foreign)
{
	start_core(1);
	struct meshd_api *a = start_api("api.sock"), *b = NULL;
	char *err = NULL;
	/* A live socket is not taken over. */
	EXPECT_EQ(meshd_api_start(&b, &parts, "api.sock", &err), -EADDRINUSE);
	EXPECT_CONTAINS(err, "in use");
	free(err);
	meshd_api_stop(a);

	/* A stale one (nobody accepting) is replaced. */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "api.sock"};
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	close(fd);
	a = start_api("api.sock");
	struct meshd_reply r;
	EXPECT_EQ(req("api.sock", "GET", "/v1/ps", NULL, 0, &r), 200);
	meshd_reply_release(&r);
	meshd_api_stop(a);

	/* A file that is not a socket is left alone. */
	t_write_file("plain", "data");
	err = NULL;
	EXPECT_EQ(meshd_api_start(&b, &parts, "plain", &err), -EEXIST);
	free(err);
	char *c = t_read_file("plain", NULL);
	EXPECT_STREQ(c, "data");
	free(c);
	/* Too long for sun_path. */
	char longp[200];
	memset(longp, 'x', sizeof longp - 1);
	longp[sizeof longp - 1] = 0;
	err = NULL;
	EXPECT_EQ(meshd_api_start(&b, &parts, longp, &err), -ENAMETOOLONG);
	free(err);
	stop_all(NULL);
}

TEST(api_client_unreachable)
{
	struct meshd_reply r;
	int rc = meshd_client_request("nobody.sock", "GET", "/v1/ps", NULL, 0, 0, &r);
	EXPECT_EQ(rc, -ENOENT);
	EXPECT_TRUE(meshd_client_unreachable(rc));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "dead.sock"};
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	close(fd);
	rc = meshd_client_request("dead.sock", "GET", "/v1/ps", NULL, 0, 0, &r);
	EXPECT_EQ(rc, -ECONNREFUSED);
	EXPECT_TRUE(meshd_client_unreachable(rc));
}

TEST(api_client_times_out)
{
	/* A listener that never answers. */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "mute.sock"};
	struct meshd_reply r;
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ASSERT_EQ(listen(fd, 4), 0);
	EXPECT_EQ(meshd_client_request("mute.sock", "GET", "/v1/ps", NULL, 0, 100000000ull, &r), MESH_E_TIMEOUT);
	close(fd);
}

TEST(api_socket_default_path)
{
	char b[4096];
	setenv("MESH_SOCKET", "/x/y.sock", 1);
	EXPECT_EQ(meshd_socket_default(b, sizeof b), 0);
	EXPECT_STREQ(b, "/x/y.sock");
	unsetenv("MESH_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
	EXPECT_EQ(meshd_socket_default(b, sizeof b), 0);
	EXPECT_STREQ(b, "/run/user/7/mesh/meshd.sock");
	unsetenv("XDG_RUNTIME_DIR");
	EXPECT_EQ(meshd_socket_default(b, sizeof b), 0);
	char want[64];
	snprintf(want, sizeof want, "/tmp/mesh-%u/meshd.sock", (unsigned)getuid());
	EXPECT_STREQ(b, want);
	EXPECT_EQ(meshd_socket_default(b, 8), -ENAMETOOLONG);
}

TEST(api_name_rule)
{
	EXPECT_TRUE(meshd_api_name_ok("echo"));
	EXPECT_TRUE(meshd_api_name_ok("Model_v2-large"));
	EXPECT_FALSE(meshd_api_name_ok(""));
	EXPECT_FALSE(meshd_api_name_ok(".."));
	EXPECT_FALSE(meshd_api_name_ok("a/b"));
	EXPECT_FALSE(meshd_api_name_ok("-rf"));
	EXPECT_FALSE(meshd_api_name_ok("a b"));
	char n[80];
	memset(n, 'a', 64);
	n[64] = 0;
	EXPECT_TRUE(meshd_api_name_ok(n));
	n[64] = 'a';
	n[65] = 0;
	EXPECT_FALSE(meshd_api_name_ok(n));
}

TEST(api_status_table)
{
	EXPECT_EQ(meshd_api_status_for(MESH_E_NOTFOUND), 404);
	EXPECT_EQ(meshd_api_status_for(MESH_E_STATE), 409);
	EXPECT_EQ(meshd_api_status_for(MESH_E_CRASHED), 502);
	EXPECT_EQ(meshd_api_status_for(MESH_E_TIMEOUT), 504);
	EXPECT_EQ(meshd_api_status_for(MESH_E_TOOBIG), 413);
	EXPECT_EQ(meshd_api_status_for(MESH_E_PARSE), 422);
	EXPECT_EQ(meshd_api_status_for(-EIO), 500);
}

TEST(notify_sends_ready)
{
	char path[256], buf[64];
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(path, sizeof path, "%s/notify", getcwd(NULL, 0));
	strcpy(sa.sun_path, path);
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	unsetenv("NOTIFY_SOCKET");
	EXPECT_EQ(meshd_notify("READY=1"), 0);
	setenv("NOTIFY_SOCKET", path, 1);
	EXPECT_EQ(meshd_notify("READY=1"), 1);
	ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
	ASSERT_EQ(n, 7);
	buf[n] = 0;
	EXPECT_STREQ(buf, "READY=1");
	close(fd);

	/* Abstract namespace: '@' stands for the leading NUL. */
	char abs_name[64];
	snprintf(abs_name, sizeof abs_name, "@mesh-test-notify-%d", (int)getpid());
	fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un sb = {.sun_family = AF_UNIX};
	memcpy(sb.sun_path + 1, abs_name + 1, strlen(abs_name) - 1);
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sb,
		       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(abs_name))),
		  0);
	setenv("NOTIFY_SOCKET", abs_name, 1);
	EXPECT_EQ(meshd_notify("READY=1"), 1);
	n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
	EXPECT_EQ(n, 7);
	close(fd);
	setenv("NOTIFY_SOCKET", "relative", 1);
	EXPECT_EQ(meshd_notify("READY=1"), -EINVAL);
}
