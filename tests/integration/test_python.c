/* The Python SDK (sdk/python) with real python3 processes: a worker hosted
 * through the host library (ready, calls, an error reply, halt, a second
 * run, exit; crashes with their traceback), the client against a real
 * meshd, libmeshworker's exports and the package's API version check.
 *
 * Each test builds its own package directory py/mesh: links to the sources
 * and, next to them, to the libmeshworker.so of the build under test (the
 * package's second place to look; meshd passes no MESH_* variable). */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "integration/python_t.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

/* A worker in every mode the tests need (argv[1]); the handler's answers
 * are what the tests check. */
static const char worker_py[] =
	"import sys\n"
	"import mesh.worker\n"
	"mode = sys.argv[1]\n"
	"def load_model():\n"
	"    raise RuntimeError('model file missing')\n"
	"w = mesh.worker.open()\n"
	"for i in range(1, 41):\n"
	"    print('setup line %d' % i)\n"
	"if mode == 'setup-raise':\n"
	"    load_model()\n"
	"def handle(data):\n"
	"    b = bytes(data)\n"
	"    if b == b'raise':\n"
	"        raise ValueError('bad request 42')\n"
	"    if b == b'big':\n"
	"        return b'x' * (64 << 20)\n"
	"    if b.startswith(b'stream'):\n"
	"        def parts():\n"
	"            yield b'one;'\n"
	"            yield bytearray(b'two;')\n"
	"            if b == b'stream-raise':\n"
	"                raise ValueError('midway')\n"
	"            return b'three'\n"
	"        return parts()\n"
	"    if b.startswith(b'size '):\n"
	"        return bytes(i * 7 & 255 for i in range(int(b[5:])))\n"
	"    if b == b'where':\n"
	"        return ('%s gen %d slot %d' % (type(data).__name__, w.gen, w.slot)).encode()\n"
	"    if b == b'crash':\n"
	"        for i in range(1, 11):\n"
	"            print('call line %d' % i)\n"
	"        import ctypes\n"
	"        ctypes.string_at(8)\n"
	"    return b\n"
	"print('worker.py: ready', flush=False)\n"
	"w.ready()\n"
	"w.serve(handle, view=(mode == 'view'))\n"
	"print('worker.py: exit')\n"
	"w.close()\n";

struct fx {
	struct mesh_host *h;
	struct mesh_image img;
	struct mesh_instance *w;
};

static void setup(struct fx *f, const char *mode)
{
	char *err = NULL;
	make_package(worker_py);
	add_program("cat", "pyw", NULL, mode, NULL);
	mkdir("logs", 0755);
	struct mesh_host_cfg cfg = {.logs = "logs"};
	if (mesh_host_new(&f->h, &cfg, &err))
		FAIL("host: %s", err);
	if (mesh_image_prepare("cat", "pyw", mesh_host_caps(f->h), MESH_GPU_NONE, &f->img, &err))
		FAIL("prepare: %s", err);
	ASSERT_EQ(mesh_instance_new(f->h, &f->img, &f->w), 0);
}

static void teardown(struct fx *f)
{
	mesh_host_free(f->h);
	mesh_image_release(&f->img);
}

/* One call; its result code, the reply (or error text) in out. */
static int call(struct mesh_slot *s, const char *msg)
{
	void *rep = NULL;
	size_t n = 0;
	int rc = mesh_slot_call(s, msg, strlen(msg), &rep, &n, S(10), 0);
	snprintf(out, sizeof out, "%.*s", rep ? (int)n : 0, rep ? (const char *)rep : "");
	free(rep);
	return rc;
}

static void launch_ok(struct fx *f, struct mesh_slot *s)
{
	char *err = NULL;
	ASSERT_EQ(mesh_instance_launch(f->w, s, &err), 0);
	int rc = mesh_instance_wait(f->w, 1u << MESH_IS_RUNNING, S(20), &err);
	if (rc)
		FAIL("launch: %s (%s)", err, mesh_strerror(rc));
}

TEST(python_worker_ready_calls_halt_run_again_exit)
{
	struct fx f;
	char *err = NULL;
	setup(&f, "view");
	struct mesh_slot *s0, *s1;
	ASSERT_EQ(mesh_slot_create(&s0, 0, 0), 0);
	ASSERT_EQ(mesh_slot_create(&s1, 1, 0), 0);
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	int rc = mesh_instance_wait(f.w, 1u << MESH_IS_IDLE, S(20), &err);
	if (rc)
		FAIL("ready: %s (%s)", err, mesh_strerror(rc));
	pid_t pid = mesh_instance_pid(f.w);

	launch_ok(&f, s0);
	EXPECT_EQ(call(s0, "hello"), 0);
	EXPECT_STREQ(out, "hello");
	EXPECT_EQ(call(s0, "where"), 0);
	EXPECT_CONTAINS(out, "memoryview gen ");
	EXPECT_CONTAINS(out, " slot 0");
	/* A handler that raises: an error reply with the exception's text ... */
	EXPECT_EQ(call(s0, "raise"), MESH_E_REFUSED);
	EXPECT_STREQ(out, "ValueError: bad request 42");
	/* ... a reply the slot cannot hold: an error reply too ... */
	EXPECT_EQ(call(s0, "big"), MESH_E_REFUSED);
	EXPECT_CONTAINS(out, "longer than the message limit");
	/* ... and the worker goes on. */
	EXPECT_EQ(call(s0, "still here"), 0);
	EXPECT_STREQ(out, "still here");

	ASSERT_EQ(mesh_instance_halt(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_IDLE, S(10), &err), 0);
	EXPECT_EQ(mesh_instance_pid(f.w), pid); /* the process stayed */
	launch_ok(&f, s1);
	EXPECT_EQ(call(s1, "where"), 0);
	EXPECT_CONTAINS(out, " slot 1");
	EXPECT_EQ(call(s1, "again"), 0);
	EXPECT_STREQ(out, "again");

	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.last_exit, 0);
	EXPECT_EQ(st.crashes, 0);
	EXPECT_EQ(st.spawns, 1);
	char *log = t_read_file("logs/pyw.log", NULL);
	EXPECT_CONTAINS(log, "worker.py: ready\n");
	EXPECT_CONTAINS(log, "worker.py: exit\n"); /* serve() returned on EXIT */
	free(log);
	teardown(&f);
	mesh_slot_free(s0);
	mesh_slot_free(s1);
}

/* The parts of a streamed reply, joined with '|'. */
static int collect(void *arg, const void *p, size_t n)
{
	char *acc = arg;
	snprintf(acc + strlen(acc), 256 - strlen(acc), "%.*s|", (int)n, (const char *)p);
	return 0;
}

/* A generator handler streams: each yield is a part, its return the last;
 * replies larger than the ring come back whole; an exception after parts
 * fails the call. */
TEST(python_worker_streams_a_generator_and_large_replies)
{
	struct fx f;
	char *err = NULL;
	setup(&f, "bytes");
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 64 << 10), 0);
	launch_ok(&f, s);
	char parts[256] = "";
	void *rep = NULL;
	size_t n = 0;
	ASSERT_EQ(mesh_slot_call_stream(s, "stream", 6, collect, parts, &rep, &n, S(10), 0), 0);
	EXPECT_STREQ(parts, "one;|two;|");
	EXPECT_STREQ(rep, "three");
	free(rep);
	/* Taken whole, the parts are joined. */
	EXPECT_EQ(call(s, "stream"), 0);
	EXPECT_STREQ(out, "one;two;three");
	parts[0] = 0;
	EXPECT_EQ(mesh_slot_call_stream(s, "stream-raise", 12, collect, parts, &rep, &n, S(10), 0), MESH_E_REFUSED);
	EXPECT_STREQ(parts, "one;|two;|");
	EXPECT_STREQ(rep, "ValueError: midway");
	free(rep);
	/* 1 MiB + 3 through a 64 KiB ring, byte for byte. */
	char req[32];
	size_t want = (1u << 20) + 3;
	snprintf(req, sizeof req, "size %zu", want);
	ASSERT_EQ(mesh_slot_call(s, req, strlen(req), &rep, &n, S(20), 0), 0);
	ASSERT_EQ(n, want);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += ((unsigned char *)rep)[i] != (unsigned char)(i * 7 & 255);
	EXPECT_EQ(bad, 0);
	free(rep);
	EXPECT_EQ(call(s, "still here"), 0);
	EXPECT_STREQ(out, "still here");
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	teardown(&f);
	mesh_slot_free(s);
}

/* The last line of a report. */
static const char *last_line(const char *s)
{
	size_t n = strlen(s);
	while (n && s[n - 1] == '\n')
		n--;
	while (n && s[n - 1] != '\n')
		n--;
	return s + n;
}

TEST(python_worker_traceback_before_ready_is_the_crash_tail)
{
	struct fx f;
	char *err = NULL;
	setup(&f, "setup-raise");
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_IDLE, S(20), &err), MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "crashed before ready: exit status 1 (Python: RuntimeError: model file missing)\n");
	/* stdout is line-buffered: the 40 setup lines came out before the
	 * traceback, so the 30-line tail ends with the whole traceback. */
	EXPECT_CONTAINS(err, "setup line 40\n");
	EXPECT_CONTAINS(err, "Traceback (most recent call last):\n");
	EXPECT_CONTAINS(err, "in load_model\n");
	EXPECT_STREQ(last_line(err), "RuntimeError: model file missing\n");
	free(err);
	teardown(&f);
}

static volatile int loop_stop;
static void *loop_main(void *arg)
{
	while (!loop_stop)
		mesh_host_poll(arg, 50 * MESH_NS_PER_MS);
	return NULL;
}

TEST(python_worker_segfault_reports_lines_and_python_stack)
{
	struct fx f;
	char *err = NULL;
	setup(&f, "bytes");
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 2, 0), 0);
	launch_ok(&f, s);
	EXPECT_EQ(call(s, "where"), 0);
	EXPECT_CONTAINS(out, "bytes gen ");
	pthread_t th;
	loop_stop = 0;
	pthread_create(&th, NULL, loop_main, f.h);
	EXPECT_NE(call(s, "crash"), 0);
	loop_stop = 1;
	pthread_join(th, NULL);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), MESH_E_CRASHED);
	free(err);
	char *rep = mesh_instance_crashed(f.w);
	EXPECT_CONTAINS(rep, "crashed while running: exit status 139 (killed by SIGSEGV)");
	/* print() lines written just before the crash are not lost in a buffer ... */
	EXPECT_CONTAINS(rep, "call line 1\n");
	EXPECT_CONTAINS(rep, "call line 10\n");
	/* ... and faulthandler names the Python frames that led there. */
	EXPECT_CONTAINS(rep, "Fatal Python error: Segmentation fault");
	EXPECT_CONTAINS(rep, "worker.py\", line");
	EXPECT_CONTAINS(rep, "in handle\n");
	free(rep);
	EXPECT_TRUE(mesh_instance_take_failed_slot(f.w) == s);
	teardown(&f);
	mesh_slot_free(s);
}

/* The client, run as a script against a real meshd. */
static const char client_py[] =
	"import sys\n"
	"from mesh.client import Client, MeshError, MeshUnreachable\n"
	"c = Client(sys.argv[1])\n"
	"print('load', c.load('pyecho')['name'])\n"
	"print('start', c.start('pyecho')['state'])\n"
	"print('call', c.call('pyecho', b'hello mesh').decode())\n"
	"print('call-str', c.call('pyecho', 'caf\\u00e9', timeout=5).decode())\n"
	"try:\n"
	"    c.call('pyecho', b'raise')\n"
	"except MeshError as e:\n"
	"    print('raise', e.status, e.code, e.message)\n"
	"ps = c.ps()\n"
	"p = [p for p in ps['programs'] if p['name'] == 'pyecho'][0]\n"
	"print('ps', ps['host']['processes'], p['workers'][0]['state'], p['workers'][0]['pid'] > 0)\n"
	"c.stop('pyecho')\n"
	"print('stopped', c.ps()['host']['processes'])\n"
	"import struct\n"
	"r = struct.unpack('<4d', c.call('pystats', struct.pack('<4d', 1, 2, 3, 6)))\n"
	"print('stats', r)\n"
	"try:\n"
	"    c.call('pystats', b'abc')\n"
	"except MeshError as e:\n"
	"    print('stats-error', e.message)\n"
	"try:\n"
	"    c.start('nope')\n"
	"except MeshError as e:\n"
	"    print('nope', e.status, e.code, e.message)\n"
	"try:\n"
	"    c.load('../x')\n"
	"except MeshError as e:\n"
	"    print('badname', e.code)\n"
	"try:\n"
	"    Client('gone.sock').ps()\n"
	"except MeshUnreachable as e:\n"
	"    print('unreachable', e.code, isinstance(e, ConnectionError))\n";

TEST_TIMEOUT(python_client_against_meshd, 60)
{
	make_package(worker_py);
	add_program("catalog", "pyecho", NULL, "bytes", NULL);
	add_program("catalog", "pystats", t_src("examples/python/stats.py"), "-", NULL);
	t_write_file("client.py", client_py);
	pid_t pid = meshd_t_start(.wait_accept = 1);
	int rc = t_sh(out, sizeof out, 1, "%sPYTHONPATH=py '%s' client.py run/meshd.sock", py_env(), PYTHON);
	meshd_t_stop(pid);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "load pyecho\n");
	EXPECT_CONTAINS(out, "start IDLE\n");
	EXPECT_CONTAINS(out, "call hello mesh\n");
	EXPECT_CONTAINS(out, "call-str caf\xc3\xa9\n");
	EXPECT_CONTAINS(out, "raise 422 E_HANDLER the worker's handler failed: ValueError: bad request 42\n");
	EXPECT_CONTAINS(out, "ps 1 RUNNING True\n");
	EXPECT_CONTAINS(out, "stopped 0\n");
	/* examples/python/stats.py: numpy on the request in place. */
	EXPECT_CONTAINS(out, "stats (4.0, 12.0, 3.0, 1.8708286933869707)\n");
	EXPECT_CONTAINS(out, "stats-error the worker's handler failed: ValueError: the request is 3 bytes");
	EXPECT_CONTAINS(out, "nope 404 E_NOTFOUND no program 'nope' in the catalog");
	EXPECT_CONTAINS(out, "badname E_PARSE\n");
	EXPECT_CONTAINS(out, "unreachable ENOENT True\n");
}

TEST(libmeshworker_exports_only_its_api)
{
	int rc = t_sh(out, sizeof out, 1, "nm -D --defined-only '%s' | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort",
		      t_bin("libmeshworker.so"));
	ASSERT_EQ(rc, 0);
	EXPECT_STREQ(out, "mesh_worker_api_version@@MESHWORKER_0\n"
			  "mesh_worker_chunk_id@@MESHWORKER_0\n"
			  "mesh_worker_close@@MESHWORKER_0\n"
			  "mesh_worker_gen@@MESHWORKER_0\n"
			  "mesh_worker_open@@MESHWORKER_0\n"
			  "mesh_worker_ready@@MESHWORKER_0\n"
			  "mesh_worker_reply_part@@MESHWORKER_0\n"
			  "mesh_worker_serve@@MESHWORKER_0\n"
			  "mesh_worker_set_spin@@MESHWORKER_0\n"
			  "mesh_worker_slot@@MESHWORKER_0\n"
			  "mesh_worker_strerror@@MESHWORKER_0\n");
	rc = t_sh(out, sizeof out, 1, "readelf -d '%s' | grep SONAME", t_bin("libmeshworker.so"));
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "[libmeshworker.so.0]");
}

TEST(python_package_names_an_api_mismatch)
{
	make_package(worker_py);
	/* A library of another API version, named by MESH_WORKER_LIB. */
	t_write_file("v99.c", "int mesh_worker_api_version(void) { return 99; }\n");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cc -shared -fPIC -o v99.so v99.c"), 0);
	int rc = t_sh(out, sizeof out, 1, "%sMESH_WORKER_LIB=%s/v99.so PYTHONPATH=py '%s' -c 'import mesh.worker'",
		      py_env(), cwd, PYTHON);
	EXPECT_EQ(rc, 1);
	EXPECT_CONTAINS(out, "v99.so is libmeshworker API version 99, and this package needs API version 3");
	/* Outside meshd the library loads and open() says why it cannot go on. */
	rc = t_sh(out, sizeof out, 1,
		  "%sPYTHONPATH=py '%s' -c 'import mesh.worker as w; print(w.library_path); w.open()'", py_env(),
		  PYTHON);
	EXPECT_EQ(rc, 1);
	EXPECT_CONTAINS(out, "libmeshworker.so");
	EXPECT_CONTAINS(out, "WorkerError: [Errno 2] mesh_worker_open");
	/* Importing the client loads no native library. */
	rc = t_sh(out, sizeof out, 1,
		  "MESH_WORKER_LIB=/nonexistent PYTHONPATH=py '%s' -c 'import mesh, mesh.client; print(mesh.__version__)'",
		  PYTHON);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "0.1.0\n");
}

/* make install (DESTDIR, PREFIX) puts the package on Debian's path with a
 * link to the installed library beside it; pip installs it from the tree
 * without a network; a virtualenv uses it through PYTHONPATH. */
TEST_TIMEOUT(python_package_installs_by_make_and_by_pip, 60)
{
	make_package(worker_py);
	int rc = t_sh(out, sizeof out, 1,
		      "make --no-print-directory -s -C '%s' BUILD='%s' DESTDIR='%s/dd' PREFIX=/usr install", t_src(""),
		      t_bin(""), cwd);
	ASSERT_EQ(rc, 0);
	char *link = realpath("dd/usr/lib/python3/dist-packages/mesh/__init__.py", NULL);
	EXPECT_TRUE(link != NULL);
	free(link);
	struct stat st;
	EXPECT_EQ(stat("dd/usr/lib/python3/dist-packages/mesh/py.typed", &st), 0);
	EXPECT_EQ(stat("dd/usr/lib/python3/dist-packages/mesh/functions.py", &st), 0);
	char target[256] = "";
	ssize_t n = readlink("dd/usr/lib/python3/dist-packages/mesh/libmeshworker.so.0", target, sizeof target - 1);
	EXPECT_GT(n, 0);
	EXPECT_STREQ(target, "/usr/lib/libmeshworker.so.0");
	rc = t_sh(out, sizeof out, 1,
		  "%sMESH_WORKER_LIB=dd/usr/lib/libmeshworker.so.0 PYTHONPATH=dd/usr/lib/python3/dist-packages '%s' -c "
		  "'import mesh.worker as w; print(w.__file__, w.library_path)'",
		  py_env(), PYTHON);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "dd/usr/lib/python3/dist-packages/mesh/worker.py");
	EXPECT_CONTAINS(out, "dd/usr/lib/libmeshworker.so.0.1.0\n");

	/* pip from a copy of the tree (the package's own build backend; test_python_install.c has the rest). */
	rc = t_sh(out, sizeof out, 1,
		  "cp -r '%s' src && '%s' -m pip install -q --no-build-isolation --no-index --no-deps --target site ./src",
		  t_src("sdk/python"), PYTHON);
	EXPECT_EQ(rc, 0);
	rc = t_sh(out, sizeof out, 1,
		  "'%s' -m venv --without-pip venv && %sMESH_WORKER_LIB='%s' PYTHONPATH=site venv/bin/python -c "
		  "'import sys, mesh.worker, mesh.client; print(sys.prefix != sys.base_prefix, mesh.worker.__file__)'",
		  PYTHON, py_env(), t_bin("libmeshworker.so"));
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "True ");
	EXPECT_CONTAINS(out, "site/mesh/worker.py\n");
}
