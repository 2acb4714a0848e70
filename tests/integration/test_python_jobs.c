/* Jobs with Python on both ends: a real meshd with a state directory runs
 * jobs whose chunks are served by python3 workers (mesh.worker, the
 * handler written handle(chunk_id, data)), and mesh.client submits them,
 * waits with progress, streams the results, cancels, and gets meshd's
 * errors as exceptions.  Each check runs as a Python script; the test
 * compares what it printed. */
#include "integration/python_t.h"
#include "runner/t.h"

#include <stdio.h>
#include <sys/stat.h>
#include <string.h>

/* Replies "<chunk id>:<input>\n" ("-" for a plain call); "slow" takes
 * 20 ms, "hang" 30 s; "gen" streams its reply in three parts.  A
 * two-parameter handler: the SDK passes the id. */
static const char worker_py[] =
	"import time\n"
	"import mesh.worker\n"
	"def handle(chunk_id, data):\n"
	"    if data == b'slow':\n"
	"        time.sleep(0.02)\n"
	"    if data == b'hang':\n"
	"        time.sleep(30)\n"
	"    if data == b'gen':\n"
	"        def parts():\n"
	"            yield b'%d' % chunk_id\n"
	"            yield b':gen'\n"
	"            return b'\\n'\n"
	"        return parts()\n"
	"    return b'%s:%s\\n' % (b'-' if chunk_id is None else b'%d' % chunk_id, data)\n"
	"mesh.worker.main(handle)\n";

/* Runs script (Python source) with the package on its path and meshd's
 * socket as argv[1]: its exit status; stdout and stderr in out. */
static int run_py(const char *script)
{
	t_write_file("t.py", script);
	return t_sh(out, sizeof out, 1, "%sPYTHONPATH=py '%s' t.py run/meshd.sock", py_env(), PYTHON);
}

static pid_t setup(unsigned max_workers)
{
	char extra[64];
	make_package(worker_py);
	snprintf(extra, sizeof extra, "max_workers = %u\nidle_ttl = \"300s\"\n", max_workers);
	add_program("catalog", "pyjob", NULL, "-", extra);
	return meshd_t_start(.state = "state", .wait_accept = 1);
}

TEST_TIMEOUT(python_job_two_arg_handler_gets_each_chunk_id, 60)
{
	pid_t pid = setup(2);
	int rc = run_py("import sys\n"
			"from mesh.client import Client\n"
			"c = Client(sys.argv[1])\n"
			"ins = ['w%d' % i for i in range(50)]\n"
			"ins[7] = 'gen'\n"
			"job = c.submit('pyjob', inputs=ins)\n"
			"print('state', job.wait())\n"
			"got = b''.join(job.results()).decode()\n"
			"want = ''.join('%d:%s\\n' % (i, x) for i, x in enumerate(ins))\n"
			"print('results', got == want, len(got.splitlines()))\n"
			"print('bad', [l for i, l in enumerate(got.splitlines()) if l != '%d:%s' % (i, ins[i])][:3])\n"
			"job = c.submit('pyjob', chunks=3)\n"
			"job.wait()\n"
			"print('empty', b''.join(job.results()))\n"
			"print('call', c.call('pyjob', b'plain'))\n");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "state complete\n");
	EXPECT_CONTAINS(out, "results True 50\n");
	EXPECT_CONTAINS(out, "bad []\n");
	/* --chunks N: empty inputs, the ids still come. */
	EXPECT_CONTAINS(out, "empty b'0:\\n1:\\n2:\\n'\n");
	/* A plain call is no chunk: the handler gets None. */
	EXPECT_CONTAINS(out, "call b'-:plain\\n'\n");
}

/* The worker killed is one serving the job (RUNNING on its slot): one
 * still starting would be a start that failed, not a death mid-job. */
TEST_TIMEOUT(python_job_worker_sigkilled_mid_job_every_result_once, 60)
{
	pid_t pid = setup(2);
	int rc = run_py("import os, signal, sys, time\n"
			"from mesh.client import Client\n"
			"c = Client(sys.argv[1])\n"
			"N = 200\n"
			"job = c.submit('pyjob', inputs=['slow'] * N)\n"
			"t0 = time.monotonic()\n"
			"while job.status()['done'] < 10 and job.state == 'running' and time.monotonic() - t0 < 10:\n"
			"    time.sleep(0.005)\n"
			"print('before', job.info['done'] < N // 2)\n"
			"pids = [w['pid'] for p in c.ps()['programs'] for w in p['workers']\n"
			"        if w['pid'] > 0 and w['state'] == 'RUNNING']\n"
			"os.kill(pids[0], signal.SIGKILL)\n"
			"print('state', job.wait())\n"
			"i = job.info\n"
			"print('done', i['done'], 'buried', i['buried'], 'deaths', i['worker_deaths'],\n"
			"      'dups', i['duplicates'], 'failed<=1', i['failed_attempts'] <= 1)\n"
			"print('fast', time.monotonic() - t0 < 8)\n"
			"f = job.status()['failures']\n"
			"print('failures', len(f) <= 1, all(x['status'] == 137 and not x['buried'] for x in f))\n"
			"got = b''.join(job.results()).decode()\n"
			"print('results', got == ''.join('%d:slow\\n' % k for k in range(N)))\n");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "before True\n");
	EXPECT_CONTAINS(out, "state complete\n");
	/* The chunk the killed worker held went back to pending at once (well
	 * inside the 10 s lease TTL), ran again, and every result is there once. */
	EXPECT_CONTAINS(out, "done 200 buried 0 deaths 1 dups 0 failed<=1 True\n");
	EXPECT_CONTAINS(out, "fast True\n");
	/* The chunk it held, if any: one failed attempt, killed by SIGKILL, not buried. */
	EXPECT_CONTAINS(out, "failures True True\n");
	EXPECT_CONTAINS(out, "results True\n");
}

TEST_TIMEOUT(python_client_submit_wait_results_cancel_errors, 60)
{
	pid_t pid = setup(1);
	int rc = run_py(
		"import sys\n"
		"from mesh.client import Client, Job, MeshError\n"
		"c = Client(sys.argv[1])\n"
		"N = 40\n"
		"job = c.submit('pyjob', inputs=['slow'] * N, max_workers=1, retries=2, name='py')\n"
		"print('submitted', isinstance(job, Job), repr(job.id), job.info['state'], job.info['chunks'],\n"
		"      job.info['name'], job.info['retries'])\n"
		"it = job.results()\n"
		"first = next(it)\n"
		"s = job.status()\n"
		"print('streaming', first.startswith(b'0:slow\\n'), s['state'], s['done'] < N)\n"
		"seen = []\n"
		"print('wait', job.wait(progress=lambda j: seen.append(j['done'])))\n"
		"print('progress', len(seen) >= 1, seen == sorted(seen), seen[-1])\n"
		"rest = list(it)\n"
		"print('results', first + b''.join(rest) == b''.join(b'%d:slow\\n' % k for k in range(N)))\n"
		"ids = list(job.results(ids=True))\n"
		"print('per-chunk', first == b'0:slow\\n', [c for c, _ in ids] == list(range(N)),\n"
		"      all(d == b'%d:slow\\n' % c for c, d in ids))\n"
		"pages = list(job.pages(wait=False))\n"
		"print('pages', pages[0][0], pages[-1][1], b''.join(p[2] for p in pages) == first + b''.join(rest))\n"
		"h = c.submit('pyjob', inputs=['a', 'hang', 'b'], max_workers=1)\n"
		"try:\n"
		"    h.wait(timeout=0.5)\n"
		"except TimeoutError as e:\n"
		"    print('wait-timeout', e.code, h.state, isinstance(e, MeshError))\n"
		"h.cancel()\n"
		"print('cancelled', h.wait())\n"
		"print('jobs', [(j.id, j.state) for j in c.jobs()])\n"
		"def err(what, f):\n"
		"    try:\n"
		"        f()\n"
		"        print(what, 'no error')\n"
		"    except MeshError as e:\n"
		"        print(what, e.status, e.code, e.message)\n"
		"err('again', h.cancel)\n"
		"err('nope', lambda: c.submit('nope', chunks=3))\n"
		"err('no-job', lambda: c.job(42).status())\n"
		"err('no-job-results', lambda: list(c.job(42).results()))\n"
		"err('no-job-cancel', lambda: c.job(42).cancel())\n"
		"err('bad-id', lambda: c.job('x1').wait())\n"
		"err('both', lambda: c.submit('pyjob', inputs=['a'], chunks=1))\n"
		"err('none', lambda: c.submit('pyjob', inputs=[]))\n"
		"err('newline', lambda: c.submit('pyjob', inputs=['a\\nb']))\n"
		"err('workers', lambda: c.submit('pyjob', chunks=1, max_workers=65))\n");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "submitted True 1 running 40 py 2\n");
	/* The first results came while the job was still running. */
	EXPECT_CONTAINS(out, "streaming True running True\n");
	EXPECT_CONTAINS(out, "wait complete\n");
	EXPECT_CONTAINS(out, "progress True True 40\n");
	EXPECT_CONTAINS(out, "results True\n");
	EXPECT_CONTAINS(out, "per-chunk True True True\n");
	EXPECT_CONTAINS(out, "pages 0 40 True\n");
	EXPECT_CONTAINS(out, "wait-timeout E_TIMEOUT running True\n");
	EXPECT_CONTAINS(out, "cancelled cancelled\n");
	/* Job ids are ints, as meshd numbers them. */
	EXPECT_CONTAINS(out, "jobs [(1, 'complete'), (2, 'cancelled')]\n");
	EXPECT_CONTAINS(out, "again 409 E_STATE ");
	EXPECT_CONTAINS(out, "nope 404 E_NOTFOUND no program 'nope' in the catalog");
	EXPECT_CONTAINS(out, "no-job 404 E_NOTFOUND no job 42");
	EXPECT_CONTAINS(out, "no-job-results 404 E_NOTFOUND no job 42");
	EXPECT_CONTAINS(out, "no-job-cancel 404 E_NOTFOUND no job 42");
	EXPECT_CONTAINS(out, "bad-id 400 E_PARSE 'x1' is not a job id (a whole number)");
	EXPECT_CONTAINS(out, "both 400 E_PARSE give the chunks once");
	EXPECT_CONTAINS(out, "none 422 E_RANGE ");
	EXPECT_CONTAINS(out, "newline 400 E_PARSE ");
	EXPECT_CONTAINS(out, "workers 400 E_PARSE max_workers must be a whole number from 1 to 64");
}

/* examples/python's manifests as shipped, with the paths pointed at this
 * tree and the package under test (and the model's load made short). */
static void add_example(const char *name)
{
	char path[4500], triple[256];
	snprintf(triple, sizeof triple, "catalog/%s", mesh_target_triple());
	mkdir("catalog", 0755);
	mkdir(triple, 0755);
	snprintf(path, sizeof path, "%s/%s", triple, name);
	link_or_fail(PYTHON, path);
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "sed -e 's|/usr/share/mesh/examples/python|%s|' -e 's|/usr/share/mesh/sdk/python|%s/py|' "
		       "-e 's|^MODEL_LOAD_S = .*|MODEL_LOAD_S = \"0.3\"|' %s%s%s%s '%s/catalog/%s.toml' >catalog/%s.toml",
		       t_src("examples/python"), cwd, *asan_runtime() ? "-e '/^\\[env\\]/a ASAN_OPTIONS = \"" ASAN_OPTS "\"' " : "",
		       *asan_runtime() ? "-e '/^\\[env\\]/a LD_PRELOAD = \"" : "", asan_runtime(),
		       *asan_runtime() ? "\"' " : "", t_src("examples/python"), name, name),
		  0);
}

TEST_TIMEOUT(python_examples_matrix_and_model_server_run_jobs, 60)
{
	make_package(NULL);
	add_example("pymatrix");
	add_example("pymodel");
	pid_t pid = meshd_t_start(.state = "state", .wait_accept = 1);
	int rc = run_py(
		"import sys\n"
		"import numpy as np\n"
		"from mesh.client import Client, MeshError\n"
		"c = Client(sys.argv[1])\n"
		"sizes = [8, 64, 3, 100, 1]\n"
		"job = c.submit('pymatrix', inputs=[str(n) for n in sizes], max_workers=2)\n"
		"print('matrix', job.wait())\n"
		"lines = b''.join(job.results()).decode().splitlines()\n"
		"ok = len(lines) == len(sizes)\n"
		"for k, (n, line) in enumerate(zip(sizes, lines)):\n"
		"    s = np.linalg.svd(np.random.default_rng(k).standard_normal((n, n)), compute_uv=False)\n"
		"    ok = ok and line == '%d n=%d smax=%.6g smin=%.6g cond=%.6g' % (k, n, s[0], s[-1], s[0] / s[-1])\n"
		"print('svd', ok, lines[0].split()[:2])\n"
		"try:\n"
		"    c.call('pymatrix', b'99999')\n"
		"except MeshError as e:\n"
		"    print('too-big', e.code, e.message)\n"
		"print('call', c.call('pymodel', b'the mesh').decode())\n"
		"job = c.submit('pymodel', inputs=['the mesh', 'warm workers', 'the mesh'])\n"
		"print('model', job.wait())\n"
		"r = b''.join(job.results()).decode().splitlines()\n"
		"print('lines', len(r), [l.split('\\t')[0] for l in r], r[0].split('\\t')[1] == r[2].split('\\t')[1],\n"
		"      len(r[1].split('\\t')[1].split()))\n"
		"print('loads', c.logs('pymodel').count(b'model loaded in'))\n");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "matrix complete\n");
	/* Each chunk's SVD of the matrix seeded by its chunk id. */
	EXPECT_CONTAINS(out, "svd True ['0', 'n=8']\n");
	EXPECT_CONTAINS(out, "too-big E_HANDLER the worker's handler failed: ValueError: matrix size 99999 is not in 1..2048");
	/* A call streams 8 tokens after the prompt's model loaded once. */
	EXPECT_CONTAINS(out, "call  ");
	EXPECT_CONTAINS(out, "model complete\n");
	EXPECT_CONTAINS(out, "lines 3 ['0', '1', '2'] True 8\n");
	/* The warm worker served the job too: the model was loaded once per
	 * worker (max_workers 2), never per request. */
	EXPECT_TRUE(strstr(out, "loads 1\n") || strstr(out, "loads 2\n"));
}

/* Which handlers get the chunk id: two positional parameters without a
 * default; bound methods and partials count what is left; more is refused. */
TEST(python_worker_handler_form_read_from_its_signature)
{
	make_package(NULL);
	int rc = t_sh(out, sizeof out, 1,
		      "%sPYTHONPATH=py '%s' -c '\n"
		      "import functools\n"
		      "from mesh.worker import _wants_chunk_id as f\n"
		      "class H:\n"
		      "    def one(self, data): pass\n"
		      "    def two(self, cid, data): pass\n"
		      "    def __call__(self, cid, data): pass\n"
		      "def two(cid, data, extra=1): pass\n"
		      "def three(a, b, c): pass\n"
		      "print(f(lambda d: d), f(lambda c, d: d), f(H().one), f(H().two), f(H()), f(two),\n"
		      "      f(functools.partial(three, 1)), f(bytes.upper), f(lambda *a: a), f(lambda d, *a: d))\n"
		      "try:\n"
		      "    f(three)\n"
		      "except TypeError as e:\n"
		      "    print(e)\n"
		      "'",
		      py_env(), PYTHON);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "False True False True True True True False False False\n");
	EXPECT_CONTAINS(out, "takes 3 parameters; it must be handle(data) or handle(chunk_id, data)");
}
