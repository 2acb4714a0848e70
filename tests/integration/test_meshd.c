/* meshd end to end: the real meshd and mesh binaries, a catalog built in the
 * test's directory from build/examples/echo_worker, real signals. */
#include "base/exit.h"
#include "host/image.h"
#include "integration/contain_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static char cwd[4096];
static char out[65536];

/* The catalog's binary directory: <catalog>/<target triple> (docs/catalog.md). */
static const char *triple(void)
{
	return mesh_target_triple();
}

/* A program that prints 40 numbered lines and dies of SIGSEGV before ready. */
static void add_crasher(void)
{
	meshd_t_add_program(out, sizeof out, "crasher", "/bin/sh",
		    "args = [\"-c\", \"i=1; while [ $i -le 40 ]; do echo crash-line-$i; i=$((i+1)); done; "
		    "kill -SEGV $$\"]\n");
}

static pid_t meshd_pid;

/* Runs `mesh ARGS --socket SOCK`; the exit status, output in out. */
static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

static int mesh_stdout(const char *args)
{
	return t_sh(out, sizeof out, 0, "'%s' %s --socket " SOCK " 2>mesh.err", t_bin("mesh"), args);
}

/* A zombie counts as gone: it holds no memory. */
static int alive(pid_t pid)
{
	return !contain_t_gone(&pid);
}

/* Worker pids from `mesh ps --json` (any "pid" integer > 0 under programs). */
static void collect_pids(json_t *v, pid_t *pids, int *n, int cap)
{
	if (json_is_object(v)) {
		const char *k;
		json_t *e;
		json_object_foreach(v, k, e)
		{
			if (!strcmp(k, "pid") && json_is_integer(e) && json_integer_value(e) > 0 && *n < cap)
				pids[(*n)++] = (pid_t)json_integer_value(e);
			else
				collect_pids(e, pids, n, cap);
		}
	} else if (json_is_array(v)) {
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e) collect_pids(e, pids, n, cap);
	}
}

static int worker_pids(pid_t *pids, int cap)
{
	int n = 0;
	ASSERT_EQ(mesh_stdout("ps --json"), 0);
	json_t *j = json_loads(out, 0, NULL);
	ASSERT_TRUE(j != NULL);
	collect_pids(json_object_get(j, "programs"), pids, &n, cap);
	json_decref(j);
	return n;
}

static int wait_exit(pid_t pid, unsigned ms)
{
	uint64_t end = t_now_ms() + ms;
	int st;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (t_now_ms() > end)
			return -1;
		usleep(5000);
	}
}

TEST_TIMEOUT(meshd_end_to_end, 60)
{
	struct stat st;
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	meshd_pid = meshd_t_start();
	ASSERT_EQ(stat(SOCK, &st), 0);
	EXPECT_TRUE(S_ISSOCK(st.st_mode));
	EXPECT_EQ(st.st_mode & 0777, 0600);

	EXPECT_EQ(mesh("load echo"), 0);
	EXPECT_CONTAINS(out, "loaded echo");
	EXPECT_EQ(mesh("start echo"), 0);
	EXPECT_CONTAINS(out, "started echo");

	pid_t pids[16];
	int n = worker_pids(pids, 16);
	ASSERT_GE(n, 1);
	EXPECT_TRUE(alive(pids[0]));

	EXPECT_EQ(mesh_stdout("call echo 'hello mesh'"), 0);
	EXPECT_STREQ(out, "hello mesh");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "printf 'from\\nstdin' | '%s' call echo - --socket " SOCK, t_bin("mesh")),
		  0);
	EXPECT_STREQ(out, "from\nstdin");

	EXPECT_EQ(mesh_stdout("ps"), 0);
	EXPECT_CONTAINS(out, "NAME");
	EXPECT_CONTAINS(out, "echo");
	EXPECT_CONTAINS(out, "host:");

	/* Plain curl speaks to the same socket. */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "curl -sS --unix-socket " SOCK " http://x/v1/ps"), 0);
	EXPECT_CONTAINS(out, "\"programs\"");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "curl -sS --unix-socket " SOCK " --data-binary 'via curl' "
					   "http://x/v1/programs/echo/call"),
		  0);
	EXPECT_STREQ(out, "via curl");

	EXPECT_EQ(mesh("logs echo"), 0);
	EXPECT_CONTAINS(out, "echo_worker: ready");
	EXPECT_EQ(mesh_stdout("logs echo -n 1"), 0);
	EXPECT_STREQ(out, "echo_worker: ready\n");

	EXPECT_EQ(mesh("stop echo"), 0);
	EXPECT_CONTAINS(out, "stopped echo");
	for (int i = 0; i < n; i++)
		EXPECT_FALSE(alive(pids[i]));
	EXPECT_EQ(mesh("unload echo"), 0);
	EXPECT_CONTAINS(out, "unloaded echo");

	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
	EXPECT_NE(access(SOCK, F_OK), 0);
}

TEST_TIMEOUT(meshd_bad_requests, 30)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	meshd_pid = meshd_t_start();
	static const struct {
		const char *curl_args;
		const char *status;
	} rows[] = {
		{"-X POST http://x/v1/programs/nope/load", "404"},
		{"-X POST http://x/v1/programs/%2e%2e/load", "400"},
		{"-X POST http://x/v1/programs/a.b/start", "400"},
		{"http://x/v1/programs/echo/load", "405"},
		{"-X DELETE http://x/v1/ps", "405"},
		{"http://x/v1/nothing", "404"},
		{"'http://x/v1/programs/echo/logs?tail=x'", "400"},
		{"-X POST -H 'Content-Length: 99999999' http://x/v1/programs/echo/call", "413"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int rc = t_sh(out, sizeof out, 1,
			      "curl -s -o body -w '%%{http_code}' --unix-socket " SOCK " %s", rows[i].curl_args);
		EXPECT_EQ(rc, 0);
		if (strcmp(out, rows[i].status))
			fprintf(stderr, "    row %zu: curl %s\n", i, rows[i].curl_args);
		EXPECT_STREQ(out, rows[i].status);
		char *b = t_read_file("body", NULL);
		EXPECT_CONTAINS(b, "\"code\"");
		free(b);
	}
	/* The CLI turns them into messages and exit codes. */
	EXPECT_EQ(mesh("load nope"), 65);
	EXPECT_CONTAINS(out, "mesh: cannot load 'nope'");
	EXPECT_EQ(mesh("load ../etc"), 64);
	EXPECT_EQ(mesh("call"), 64);
	EXPECT_EQ(mesh("ps --bogus"), 64);
}

TEST_TIMEOUT(meshd_crash_is_reported, 60)
{
	add_crasher();
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("load crasher"), 0);
	/* A call needs a warm worker; this one dies before ready. */
	int rc = mesh("call crasher ping");
	EXPECT_EQ(rc, 76); /* MESH_EXIT_PROTOCOL: the worker crashed */
	EXPECT_CONTAINS(out, "mesh: call to 'crasher' failed");
	EXPECT_CONTAINS(out, "crash-line-40");
	EXPECT_CONTAINS(out, "crash-line-11");
	/* The 30-line tail: the tenth line is not in it. */
	EXPECT_TRUE(strstr(out, "crash-line-10\n") == NULL);

	EXPECT_EQ(mesh_stdout("ps --json"), 0);
	json_t *j = json_loads(out, 0, NULL);
	ASSERT_TRUE(j != NULL);
	char *s = json_dumps(j, JSON_COMPACT);
	EXPECT_CONTAINS(s, "\"crashes\":1");
	EXPECT_CONTAINS(s, "139");
	free(s);
	json_decref(j);
	EXPECT_EQ(mesh_stdout("ps"), 0);
	EXPECT_CONTAINS(out, "crasher");
	EXPECT_CONTAINS(out, "139");
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
}

/* A program that is no mesh worker (/bin/true: it exits 0 at once) is
 * said to be so, not reported as a crash "exit status 0" (issue 35 item 7);
 * a Python worker's exception is named on the report's first line. */
TEST_TIMEOUT(meshd_a_program_that_exits_0_is_not_called_a_crash, 60)
{
	meshd_t_add_program(out, sizeof out, "t", "/bin/true", NULL);
	meshd_t_add_program(out, sizeof out, "py", "/bin/sh",
		    "args = [\"-c\", \"echo 'Traceback (most recent call last):'; echo '  File \\\"w.py\\\", line 3, in <module>';"
		    " echo 'ValueError: model file missing'; exit 1\"]\n");
	meshd_pid = meshd_t_start();
	EXPECT_NE(mesh("call t ping"), 0);
	EXPECT_CONTAINS(out, "worker 't' (pid ");
	EXPECT_CONTAINS(out, "exited before ready with status 0 without being asked to: it never said ready (a mesh worker "
			     "calls mesh_worker_ready: is it one?)");
	EXPECT_FALSE(strstr(out, "crashed") != NULL);
	EXPECT_NE(mesh("call py ping"), 0);
	EXPECT_CONTAINS(out, "crashed before ready: exit status 1 (Python: ValueError: model file missing)\n");
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
}

/* A meshd with two echo programs started; their worker pids in pids. */
static int start_two_workers(pid_t *pids, int cap)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	meshd_t_add_program(out, sizeof out, "echo2", t_bin("examples/echo_worker"), NULL);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("start echo"), 0);
	EXPECT_EQ(mesh("start echo2"), 0);
	int n = worker_pids(pids, cap);
	ASSERT_GE(n, 2);
	return n;
}

TEST_TIMEOUT(meshd_kill9_leaves_no_worker, 60)
{
	pid_t pids[16];
	int n = start_two_workers(pids, 16);
	for (int i = 0; i < n; i++)
		EXPECT_TRUE(alive(pids[i]));
	kill(meshd_pid, SIGKILL);
	EXPECT_EQ(wait_exit(meshd_pid, 5000), 128 + SIGKILL);
	uint64_t end = t_now_ms() + 5000;
	int left;
	do {
		left = 0;
		for (int i = 0; i < n; i++)
			left += alive(pids[i]);
		if (left)
			usleep(10000);
	} while (left && t_now_ms() < end);
	EXPECT_EQ(left, 0);
	/* The stale socket stays; the next meshd replaces it. */
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh_stdout("ps"), 0);
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
}

TEST_TIMEOUT(meshd_sigterm_stops_every_worker, 60)
{
	pid_t pids[16];
	int n = start_two_workers(pids, 16);
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
	for (int i = 0; i < n; i++)
		EXPECT_FALSE(alive(pids[i]));
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(err, "] info stopped");
	free(err);
	/* Not reachable any more: 69 with the documented message. */
	EXPECT_EQ(mesh("ps"), 69);
	EXPECT_CONTAINS(out, "mesh: cannot reach meshd at 'run/meshd.sock'");
}

/* A call that waits on a worker that never gets ready must not hold up
 * meshd's exit for the ready timeout (60 s): meshd stops the programs the
 * requests in flight wait on, they get an answer, meshd exits 0. */
TEST_TIMEOUT(meshd_sigterm_during_a_waiting_call, 60)
{
	meshd_t_add_program(out, sizeof out, "sleeper", "/bin/sh", "args = [\"-c\", \"sleep 100\"]\n");
	meshd_pid = meshd_t_start();
	pid_t caller = fork();
	ASSERT_GE(caller, 0);
	if (caller == 0) {
		int rc = t_sh(out, sizeof out, 1, "'%s' call sleeper x --socket " SOCK " >call.out 2>&1", t_bin("mesh"));
		_exit(rc);
	}
	/* Wait until the worker was spawned (its log appears), then stop meshd. */
	uint64_t end = t_now_ms() + 10000;
	while (access("logs/sleeper.log", F_OK) != 0 && t_now_ms() < end)
		usleep(10000);
	usleep(100000);
	pid_t pids[4];
	int n = worker_pids(pids, 4);
	EXPECT_EQ(n, 1);
	uint64_t t0 = t_now_ms();
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 20000), 0);
	EXPECT_LT(t_now_ms() - t0, 15000);
	int st = wait_exit(caller, 10000);
	EXPECT_NE(st, 69); /* answered, not cut off */
	EXPECT_NE(st, 0);
	char *o = t_read_file("call.out", NULL);
	if (st == 69 || st == 0)
		fprintf(stderr, "    mesh call said: %s\n", o ? o : "");
	EXPECT_CONTAINS(o, "mesh: call to 'sleeper' failed");
	free(o);
	for (int i = 0; i < n; i++)
		EXPECT_FALSE(alive(pids[i]));
}

TEST(mesh_without_meshd_exits_69)
{
	EXPECT_EQ(mesh("ps"), 69);
	EXPECT_CONTAINS(out, "mesh: cannot reach meshd at 'run/meshd.sock': No such file or directory");
	/* A socket file nobody serves. */
	mkdir("run", 0700);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = SOCK};
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	close(fd);
	EXPECT_EQ(mesh("call echo x"), 69);
	EXPECT_CONTAINS(out, "mesh: cannot reach meshd at 'run/meshd.sock': Connection refused");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "MESH_SOCKET=%s/" SOCK " '%s' start echo", getcwd(cwd, sizeof cwd),
		       t_bin("mesh")),
		  69);
	EXPECT_CONTAINS(out, "Connection refused");
}

TEST(meshd_usage_errors)
{
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' --help", t_bin("meshd")), 0);
	EXPECT_CONTAINS(out, "usage: meshd");
	EXPECT_CONTAINS(out, "--socket");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s'", t_bin("meshd")), 64);
	EXPECT_CONTAINS(out, "--catalog DIR is required");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog c --logs l --slots 0", t_bin("meshd")), 64);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog c --logs l --isolation blink", t_bin("meshd")), 64);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog c --logs l --bogus", t_bin("meshd")), 64);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog", t_bin("meshd")), 64);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog c --logs l --http-threads 0", t_bin("meshd")), 64);
	EXPECT_CONTAINS(out, "--http-threads wants a number from 1 to 64, not '0'");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog c --logs l --http-threads 65", t_bin("meshd")), 64);
	/* A missing catalog is not a usage error: 66, with the reason on one log line. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog nowhere --logs . --socket s.sock", t_bin("meshd")), 66);
	EXPECT_CONTAINS(out, "] error cannot start: cannot use catalog 'nowhere'");
	/* Another meshd already serves the socket: 69, and the first keeps
	 * serving.  (With the same state directory too, the state's lock
	 * refuses it first: 75, test_meshd_jobs_months.c.) */
	mkdir("catalog", 0755);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --catalog catalog --logs logs --state other-state --socket " SOCK,
		       t_bin("meshd")),
		  69);
	EXPECT_CONTAINS(out, "in use");
	EXPECT_EQ(mesh("ps"), 0);
	kill(meshd_pid, SIGTERM);
	EXPECT_EQ(wait_exit(meshd_pid, 15000), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' ps --help", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "usage: mesh ps");
}

/* U+FFFD, what an invalid byte of a worker's text becomes in the API's JSON. */
#define FFFD "\xef\xbf\xbd"

/* A crash report whose tail holds a Latin-1 byte and a character cut in
 * the middle still arrives whole: status and tail, not "out of memory". */
TEST_TIMEOUT(meshd_crash_report_with_invalid_utf8, 60)
{
	meshd_t_add_program(out, sizeof out, "latin", "/bin/sh",
		    "args = [\"-c\", \"printf 'caf\\\\351 au lait\\\\n'; printf 'cut \\\\342\\\\202\\\\n'; "
		    "kill -SEGV $$\"]\n");
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("load latin"), 0);
	EXPECT_EQ(mesh("call latin ping"), 76);
	EXPECT_CONTAINS(out, "mesh: call to 'latin' failed: worker 'latin'");
	EXPECT_CONTAINS(out, "exit status 139");
	EXPECT_CONTAINS(out, "caf" FFFD " au lait");
	EXPECT_CONTAINS(out, "cut " FFFD);
	EXPECT_TRUE(strstr(out, "out of memory") == NULL);
	/* The raw answer is JSON that any parser takes. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o body -w '%%{http_code}' --unix-socket " SOCK
					    " -X POST http://x/v1/programs/latin/call"),
		  0);
	EXPECT_STREQ(out, "502");
	char *b = t_read_file("body", NULL);
	json_t *j = b ? json_loads(b, 0, NULL) : NULL;
	ASSERT_TRUE(j != NULL);
	EXPECT_STREQ(json_string_value(json_object_get(j, "code")), "E_CRASHED");
	EXPECT_CONTAINS(json_string_value(json_object_get(j, "error")), "caf" FFFD " au lait");
	json_decref(j);
	free(b);
}

/* A handler's error message with such bytes arrives too, with its own exit code. */
TEST_TIMEOUT(meshd_handler_error_with_invalid_utf8, 60)
{
	meshd_t_add_program(out, sizeof out, "fails", t_bin("tests-workers/host_worker"), "args = [\"fail-latin1\"]\n");
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("call fails ping"), MESH_EXIT_HANDLER);
	EXPECT_CONTAINS(out, "the worker's handler failed: caf" FFFD " refused, cut " FFFD);
}

/* A manifest that starts with a UTF-8 byte order mark loads. */
TEST_TIMEOUT(meshd_manifest_with_bom_loads, 60)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	char *m = t_read_file("catalog/echo.toml", NULL);
	ASSERT_TRUE(m != NULL);
	char bom[4096];
	snprintf(bom, sizeof bom, "\xef\xbb\xbf%s", m);
	free(m);
	t_write_file("catalog/echo.toml", bom);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("load echo"), 0);
	EXPECT_CONTAINS(out, "loaded echo");
}

/* A FIFO as a manifest or a binary is refused at once, naming it and its type. */
TEST_TIMEOUT(meshd_load_refuses_a_fifo, 30)
{
	char path[512];
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	ASSERT_EQ(mkfifo("catalog/pipe.toml", 0644), 0);
	meshd_t_add_program(out, sizeof out, "pipebin", t_bin("examples/echo_worker"), NULL);
	snprintf(path, sizeof path, "catalog/%s/pipebin", triple());
	unlink(path);
	ASSERT_EQ(mkfifo(path, 0755), 0);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("load pipe"), MESH_EXIT_REFUSED);
	EXPECT_CONTAINS(out, "pipe.toml' is a FIFO, not a regular file");
	EXPECT_EQ(mesh("load pipebin"), MESH_EXIT_REFUSED);
	EXPECT_CONTAINS(out, "binary '");
	EXPECT_CONTAINS(out, "pipebin' is a FIFO, not a regular file");
	/* meshd still serves. */
	EXPECT_EQ(mesh("load echo"), 0);
}

/* 69 is "meshd cannot be reached" only: a refused script, a GPU program
 * here, another machine's binary each exit with their own code. */
TEST_TIMEOUT(meshd_refusals_have_their_own_exit_codes, 30)
{
	char path[512];
	meshd_t_add_program(out, sizeof out, "gpu", t_bin("examples/echo_worker"), "device = \"gpu\"\n");
	meshd_t_add_program(out, sizeof out, "script", t_bin("examples/echo_worker"), NULL);
	snprintf(path, sizeof path, "catalog/%s/script", triple());
	t_write_file(path, "#!/bin/sh\necho hi\n");
	chmod(path, 0755);
	meshd_t_add_program(out, sizeof out, "foreign", t_bin("examples/echo_worker"), NULL);
	snprintf(path, sizeof path, "catalog/%s/foreign", triple());
	t_write_file(path, "MZ not an ELF file\n");
	chmod(path, 0755);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("load gpu"), MESH_EXIT_NOGPU);
	EXPECT_CONTAINS(out, "needs a GPU");
	EXPECT_EQ(mesh("load script"), MESH_EXIT_SCRIPT);
	EXPECT_CONTAINS(out, "script");
	EXPECT_EQ(mesh("load foreign"), MESH_EXIT_ARCH);
	EXPECT_CONTAINS(out, "not an executable for this machine");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' help exit-codes", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "83");
}

/* A worker that crashes while idle (no caller to tell) is in meshd's own
 * log: its status and the last line of its output. */
TEST_TIMEOUT(meshd_idle_crash_is_logged, 30)
{
	meshd_t_add_program(out, sizeof out, "idler", t_bin("tests-workers/host_worker"), "args = [\"echo\"]\n");
	/* Under ASan (make check) the worker must die of the SIGSEGV itself,
	 * not exit 1 from ASan's handler; meshd passes its environment on. */
	setenv("ASAN_OPTIONS", "handle_segv=0", 1);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("start idler"), 0);
	pid_t pids[4];
	ASSERT_EQ(worker_pids(pids, 4), 1);
	/* Its output is in its log before it dies, so its tail holds it. */
	uint64_t end = t_now_ms() + 5000;
	char *log = NULL;
	while (!(log = t_read_file("logs/idler.log", NULL)) || !strstr(log, "ready")) {
		free(log);
		log = NULL;
		if (t_now_ms() > end)
			FAIL("the worker's ready line never reached its log");
		usleep(10000);
	}
	free(log);
	kill(pids[0], SIGSEGV);
	char *err = NULL;
	end = t_now_ms() + 10000;
	while (!(err = t_read_file("meshd.err", NULL)) || !strstr(err, "failed name=idler")) {
		free(err);
		err = NULL;
		if (t_now_ms() > end)
			break;
		usleep(20000);
	}
	EXPECT_CONTAINS(err, "failed name=idler: worker 'idler' (pid ");
	EXPECT_CONTAINS(err, "crashed while idle: exit status 139");
	EXPECT_CONTAINS(err, "last output: host_worker echo: ready");
	free(err);
}

/* Precise JSON errors: a bad Content-Length is a 400 that says so, headers
 * over 32 KiB a JSON 413 (as docs/api.md says). */
TEST_TIMEOUT(meshd_bad_length_and_big_headers, 30)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	meshd_pid = meshd_t_start();
	static const char *const lengths[] = {"-1", "12x", "99999999999999999999999"};
	for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
		EXPECT_EQ(t_sh(out, sizeof out, 1,
			       "curl -s -o body -w '%%{http_code}' --unix-socket " SOCK
			       " -X POST -H 'Content-Length: %s' http://x/v1/programs/echo/call",
			       lengths[i]),
			  0);
		if (strcmp(out, "400"))
			fprintf(stderr, "    Content-Length: %s\n", lengths[i]);
		EXPECT_STREQ(out, "400");
		char *b = t_read_file("body", NULL);
		EXPECT_CONTAINS(b, "\"error\":\"bad Content-Length\"");
		EXPECT_CONTAINS(b, "\"code\":\"E_PARSE\"");
		free(b);
	}
	/* 40 KiB of headers. */
	static char hdr[41000];
	memset(hdr, 'a', sizeof hdr - 1);
	memcpy(hdr, "X-Big: ", 7);
	t_write_file("hdr", hdr);
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "curl -s -o body -w '%%{http_code}' --unix-socket " SOCK " -H @hdr http://x/v1/ps"),
		  0);
	EXPECT_STREQ(out, "413");
	char *b = t_read_file("body", NULL);
	EXPECT_CONTAINS(b, "\"error\":\"request headers over 32768 bytes\"");
	free(b);
	/* meshd still serves. */
	EXPECT_EQ(mesh_stdout("ps"), 0);
}

/* A call cut by `mesh stop` says so, not "not allowed in the current state". */
TEST_TIMEOUT(meshd_call_cut_by_stop_says_so, 60)
{
	meshd_t_add_program(out, sizeof out, "slow", t_bin("tests-workers/host_worker"), "args = [\"slow-call\"]\n");
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh("start slow"), 0);
	pid_t caller = fork();
	ASSERT_GE(caller, 0);
	if (caller == 0) {
		int rc = t_sh(out, sizeof out, 1, "'%s' call slow x --socket " SOCK " >call.out 2>&1", t_bin("mesh"));
		_exit(rc);
	}
	/* The call is in the handler once it said so in its log. */
	uint64_t end = t_now_ms() + 10000;
	char *log = NULL;
	while (!(log = t_read_file("logs/slow.log", NULL)) || !strstr(log, "slow call begins")) {
		free(log);
		log = NULL;
		if (t_now_ms() > end)
			FAIL("the call never reached the handler");
		usleep(10000);
	}
	free(log);
	EXPECT_EQ(mesh("stop slow"), 0);
	EXPECT_EQ(wait_exit(caller, 20000), MESH_EXIT_TEMPFAIL);
	char *o = t_read_file("call.out", NULL);
	EXPECT_CONTAINS(o, "mesh: call to 'slow' failed: worker of 'slow' stopped while the call ran");
	free(o);
}
