/* Python functions on meshd's workers (issue 35, item 13): @mesh.function
 * writes the catalog entry, mesh.map submits a job, waits and yields the
 * decoded results in order; a chunk's failure raises MeshChunkError with
 * its traceback, map's timeout TimeoutError; and README.md's Python example,
 * taken from README.md and run as it is written, in a fresh venv.  Each
 * check runs as a Python script against a real meshd with a state
 * directory; the test compares what it printed. */
#include "integration/python_t.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Runs script.py (written from src) with the test's package, the
 * catalog and the socket in its environment: its exit status; stdout and
 * stderr in out. */
static int run_script(const char *src)
{
	t_write_file("script.py", src);
	return t_sh(out, sizeof out, 1, "%sPYTHONPATH=py MESH_CATALOG=catalog MESH_SOCKET=run/meshd.sock '%s' script.py",
		    py_env(), PYTHON);
}

/* The package, an empty catalog, a meshd that runs jobs. */
static pid_t setup(void)
{
	make_package(NULL);
	mkdir("catalog", 0755);
	return meshd_t_start(.state = "state", .wait_accept = 1);
}

/* The [env] a sanitizer build's workers need, as a Python dict literal. */
static const char *san_env(void)
{
	static char env[1200];
	if (*asan_runtime())
		snprintf(env, sizeof env, "{'ASAN_OPTIONS': '" ASAN_OPTS "', 'LD_PRELOAD': '%s'}", asan_runtime());
	else
		snprintf(env, sizeof env, "{}");
	return env;
}

TEST_TIMEOUT(python_map_yields_decoded_results_in_order, 120)
{
	pid_t pid = setup();
	t_write_file("catalog/byhand.toml", "name = \"byhand\"\nbackends = [\"native\"]\n");
	mkdir("pkg", 0755);
	char mod[1600];
	snprintf(mod, sizeof mod,
		 "import mesh\n"
		 "@mesh.function(name='pkg-cube', env=%s)\n"
		 "def cube(x):\n"
		 "    return x ** 3\n",
		 san_env());
	t_write_file("pkg/__init__.py", "");
	t_write_file("pkg/mod.py", mod);
	char src[8000];
	snprintf(src, sizeof src,
		 "import os, sys, typing, mesh\n"
		 "from pkg.mod import cube\n"
		 "ENV = %s\n"
		 "@mesh.function(max_workers=2, env=ENV)\n"
		 "def square(x):\n"
		 "    return x * x\n"
		 "@mesh.function(codec='pickle', env=ENV)\n"
		 "def shapes(x):\n"
		 "    return (x, {'set': {x}}, b'\\n\\0raw')\n"
		 "class Point:\n"
		 "    def __init__(self, x, y):\n"
		 "        self.x, self.y = x, y\n"
		 "@mesh.function(codec='pickle', env=ENV)\n"
		 "def flip(p):\n"
		 "    return Point(p.y, p.x)\n"
		 "@mesh.function(codec='bytes', env=ENV)\n"
		 "def upper(b):\n"
		 "    return b.upper()\n"
		 "def plain(x):\n"
		 "    return {'x': x, 'pid': os.getpid()}\n"
		 "if __name__ == '__main__':\n"
		 "    r = mesh.map(square, range(300))\n"
		 "    print('id', type(r.job.id).__name__, r.job.id)\n"
		 "    got = list(r)\n"
		 "    print('square', got == [x * x for x in range(300)], got[:4])\n"
		 "    print('local', square(7))\n"
		 "    print('pickle', list(mesh.map(shapes, [1, (2, 'a')])))\n"
		 "    print('bytes', list(mesh.map(upper, [b'ab', 'c\\u00e9'])))\n"
		 "    print('class', [(type(p).__name__, p.x, p.y) for p in mesh.map(flip, [Point(1, 2)])])\n"
		 "    print('json', list(mesh.map(square, [0.5, -3])))\n"
		 "    print('by-name', list(mesh.map('square', [11, 12])))\n"
		 "    print('module', list(mesh.map(cube, [2, 3])))\n"
		 "    p = list(mesh.map(mesh.function(plain, env=ENV), ['a', 'b']))\n"
		 "    print('plain', [d['x'] for d in p], all(d['pid'] != os.getpid() for d in p))\n"
		 "    print('empty', list(mesh.map(square, [])))\n"
		 "    try:\n"
		 "        mesh.map(mesh.function(plain, name='byhand'), [1])\n"
		 "    except mesh.MeshError as e:\n"
		 "        print('byhand', e.code, e)\n"
		 "    print('state', mesh.Client().job(r.job.id).status()['state'])\n"
		 "    try:\n"
		 "        mesh.map(upper, [b'a\\nb'])\n"
		 "    except mesh.MeshError as e:\n"
		 "        print('newline', e.code)\n"
		 "    for f in (mesh.map, mesh.function, mesh.Function.__init__, mesh.Client.submit, mesh.Job.results):\n"
		 "        typing.get_type_hints(f)\n"
		 "    print('hints ok')\n",
		 san_env());
	int rc = run_script(src);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "id int 1\n");
	EXPECT_CONTAINS(out, "square True [0, 1, 4, 9]\n");
	EXPECT_CONTAINS(out, "local 49\n");
	EXPECT_CONTAINS(out, "pickle [(1, {'set': {1}}, b'\\n\\x00raw'), ((2, 'a'), {'set': {(2, 'a')}}, b'\\n\\x00raw')]\n");
	EXPECT_CONTAINS(out, "bytes [b'AB', b'C\\xc3\\xa9']\n");
	EXPECT_CONTAINS(out, "class [('Point', 2, 1)]\n");
	EXPECT_CONTAINS(out, "json [0.25, 9]\n");
	EXPECT_CONTAINS(out, "by-name [121, 144]\n");
	EXPECT_CONTAINS(out, "module [8, 27]\n");
	EXPECT_CONTAINS(out, "plain ['a', 'b'] True\n");
	EXPECT_CONTAINS(out, "empty []\n");
	/* A catalog entry written by hand is not replaced. */
	EXPECT_CONTAINS(out, "byhand E_MISMATCH mesh.function 'byhand': ");
	EXPECT_CONTAINS(out, "catalog/byhand.toml is a catalog entry mesh.function did not write");
	EXPECT_CONTAINS(out, "state complete\n");
	EXPECT_CONTAINS(out, "newline E_PARSE\n");
	EXPECT_CONTAINS(out, "hints ok\n");
	/* The catalog entry it wrote: the interpreter's link, the runner, the file's hash. */
	char *toml = t_read_file("catalog/square.toml", NULL);
	EXPECT_CONTAINS(toml, "args = [\"-m\", \"mesh._runner\", \"json\", \"file\", \"");
	EXPECT_CONTAINS(toml, "max_workers = 2\n");
	EXPECT_CONTAINS(toml, "hash = \"sha256:");
	free(toml);
	char link[4200], p[300];
	snprintf(p, sizeof p, "catalog/%s/square", mesh_target_triple());
	ssize_t n = readlink(p, link, sizeof link - 1);
	EXPECT_GT(n, 0);

	/* The file changed: a new image, whose workers run the new code. */
	char again[3000];
	snprintf(again, sizeof again,
		 "import mesh\n"
		 "@mesh.function(max_workers=2, env=%s)\n"
		 "def square(x):\n"
		 "    return -x\n"
		 "if __name__ == '__main__':\n"
		 "    print('changed', list(mesh.map(square, [1, 2, 3])))\n",
		 san_env());
	EXPECT_EQ(run_script(again), 0);
	EXPECT_CONTAINS(out, "changed [-1, -2, -3]\n");
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* A chunk that raises: MeshChunkError with the chunk, its input and the
 * function's traceback, at once (the job's other 100 chunks, 20 s of work
 * on its one worker, are cancelled);
 * map's timeout: TimeoutError; a file that calls mesh.map at import: the
 * program cannot start, and the error says why. */
TEST_TIMEOUT(python_map_raises_the_chunk_traceback_and_timeout, 120)
{
	pid_t pid = setup();
	char src[6000];
	snprintf(src, sizeof src,
		 "import time, mesh\n"
		 "ENV = %s\n"
		 "@mesh.function(env=ENV)\n"
		 "def inv(x):\n"
		 "    if x == 'slow':\n"
		 "        time.sleep(0.2)\n"
		 "        return 0\n"
		 "    return 1 / (x - 3)\n"
		 "@mesh.function(env=ENV)\n"
		 "def nap(x):\n"
		 "    time.sleep(x)\n"
		 "    return x\n"
		 "if __name__ == '__main__':\n"
		 "    t = time.monotonic()\n"
		 "    r = mesh.map(inv, [3] + ['slow'] * 100, retries=1)\n"
		 "    try:\n"
		 "        print(list(r))\n"
		 "    except mesh.MeshChunkError as e:\n"
		 "        print('chunk', e.chunk, e.input, e.status, e.code, e.attempts, e.job_id == r.job.id)\n"
		 "        print('fast', time.monotonic() - t < 15)\n"
		 "        print('report', e.report)\n"
		 "        print('message', str(e).splitlines()[0])\n"
		 "    print('after', r.job.wait(timeout=30))\n"
		 "    with mesh.map(inv, ['slow'] * 50) as r:\n"
		 "        print('first', next(r))\n"
		 "    print('closed', r.job.wait(timeout=30), r.job.info['done'] < 50)\n"
		 "    got = []\n"
		 "    try:\n"
		 "        for x in mesh.map(inv, [0, 1, 3, 4], retries=1):\n"
		 "            got.append(x)\n"
		 "    except mesh.MeshChunkError as e:\n"
		 "        print('in-order', got, e.chunk)\n"
		 "    t = time.monotonic()\n"
		 "    try:\n"
		 "        list(mesh.map(nap, [0, 30, 0], timeout=1))\n"
		 "    except TimeoutError as e:\n"
		 "        print('timeout', type(e).__name__, isinstance(e, mesh.MeshError), e.code, time.monotonic() - t < 10)\n"
		 "        print('timeout-message', e)\n",
		 san_env());
	EXPECT_EQ(run_script(src), 0);
	EXPECT_CONTAINS(out, "chunk 0 3 1 E_HANDLER 1 True\n");
	EXPECT_CONTAINS(out, "fast True\n");
	EXPECT_CONTAINS(out, "Traceback (most recent call last):\n");
	EXPECT_CONTAINS(out, "script.py\", line 8, in inv\n");
	EXPECT_CONTAINS(out, "ZeroDivisionError: division by zero\n");
	EXPECT_TRUE(!strstr(out, "_runner.py") && !strstr(out, "functions.py")); /* the function's frames only */
	EXPECT_CONTAINS(out, "message chunk 0 of job 1 (input 3) failed after 1 attempt:\n");
	EXPECT_CONTAINS(out, "after cancelled\n");
	EXPECT_CONTAINS(out, "first 0\nclosed cancelled True\n");
	EXPECT_CONTAINS(out, "in-order [-0.3333333333333333, -0.5] 2\n");
	EXPECT_CONTAINS(out, "timeout MeshTimeout True E_TIMEOUT True\n");
	EXPECT_CONTAINS(out, "(map's timeout); the rest is cancelled\n");

	/* No `if __name__ == "__main__":` -- the workers' import would run it. */
	snprintf(src, sizeof src,
		 "import mesh\n"
		 "@mesh.function(env=%s)\n"
		 "def dbl(x):\n"
		 "    return 2 * x\n"
		 "try:\n"
		 "    print(list(mesh.map(dbl, [1, 2])))\n"
		 "except mesh.MeshError as e:\n"
		 "    print('raised', e.code, e)\n",
		 san_env());
	EXPECT_EQ(run_script(src), 0);
	/* Its chunks buried (E_CRASHED, each attempt's report the worker's
	 * output), or the program FAILED first (E_STATE, its log's tail):
	 * either way the traceback says why. */
	EXPECT_TRUE(strstr(out, "raised E_CRASHED chunk 0 of job 5 (input 1) failed after 3 attempts:\n") ||
		    strstr(out, "raised E_STATE job 5 cannot run: its program 'dbl' is FAILED"));
	EXPECT_CONTAINS(out, "RuntimeError: mesh.map called while a mesh worker imports ");
	EXPECT_CONTAINS(out, "put the code that calls it under `if __name__ == \"__main__\":`");
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* Cuts meshd's log records ("2026-12-06T21:20:04.636Z meshd[608] ...\n")
 * out of s, wherever they start.  The block's meshd logs to the same file
 * as the script, and Python writes print()'s text and its "\n" in two
 * write(2)s, so a record can land between them (a CI run saw
 * "...64, 81]2026-12-06T21:20:04.636Z meshd[608] info job=1 driver
 * ended...\n\n"). */
static void drop_meshd_records(char *s)
{
	static const char shape[] = "####-##-##T##:##:##.###Z meshd[";
	size_t n = sizeof shape - 1;
	char *w = s;
	for (char *r = s; *r;) {
		size_t i = 0;
		while (i < n && r[i] && (shape[i] == '#' ? r[i] >= '0' && r[i] <= '9' : r[i] == shape[i]))
			i++;
		if (i < n) {
			*w++ = *r++;
			continue;
		}
		char *nl = strchr(r, '\n');
		r = nl ? nl + 1 : r + strlen(r);
	}
	*w = '\0';
}

/* README.md's Python section, run as it is written: its sh block (meshd,
 * a fresh venv, pip install ./sdk/python offline, the run) in a directory
 * where build/ and sdk/ are the tree's, its python block as squares.py. */
TEST_TIMEOUT(python_readme_example_runs_in_a_fresh_venv, 240)
{
	if (*asan_runtime())
		SKIP("a sanitizer build's libmeshworker needs the ASan runtime preloaded, which README's workers are not given");
	if (!cwd[0] && !getcwd(cwd, sizeof cwd))
		FAIL("getcwd");
	/* The blocks: the first ```sh and ```python fences of "## Python". */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "'%s' - '%s' <<'EOF'\n"
		       "import re, sys\n"
		       "text = open(sys.argv[1]).read()\n"
		       "sec = re.search(r'^## Python\\n(.*?)(?=^## )', text, re.S | re.M).group(1)\n"
		       "open('block.sh', 'w').write(re.search(r'^```sh\\n(.*?)^```', sec, re.S | re.M).group(1))\n"
		       "open('squares.py', 'w').write(re.search(r'^```python\\n(.*?)^```', sec, re.S | re.M).group(1))\n"
		       "EOF",
		       PYTHON, t_src("README.md")),
		  0);
	char *py = t_read_file("squares.py", NULL), *sh = t_read_file("block.sh", NULL);
	ASSERT_TRUE(py && sh);
	EXPECT_TRUE(strncmp(py, "# squares.py\n", 13) == 0);
	int lines = 0;
	for (const char *c = py; *c; c++)
		lines += *c == '\n';
	EXPECT_LE(lines, 10); /* "a ten-line example" */
	EXPECT_CONTAINS(py, "# [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]\n");
	free(py);
	free(sh);
	link_or_fail(t_src("sdk"), "sdk");
	link_or_fail(getenv("MESH_BUILD"), "build");
	/* Its own socket ($XDG_RUNTIME_DIR/mesh/meshd.sock), pip without an index. */
	mkdir("xdg", 0700);
	/* Its output to a file: the meshd it leaves running holds what it had. */
	int rc = t_sh(out, sizeof out, 1,
		      PIP_OFFLINE "env -u MESH_SOCKET -u MESH_CATALOG -u PYTHONPATH -u MESH_WORKER_LIB XDG_RUNTIME_DIR='%s/xdg' "
				  "PATH=/usr/bin:/bin sh -e block.sh >block.out 2>&1",
		      cwd);
	char *got = t_read_file("block.out", NULL);
	EXPECT_EQ(rc, 0);
	if (got)
		drop_meshd_records(got);
	EXPECT_CONTAINS(got, "\n[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]\n");
	if (rc)
		printf("%s\n", got ? got : "");
	free(got);
	/* It ran in the venv, with the library the wheel carries. */
	char *toml = t_read_file("catalog/square.toml", NULL);
	char want[4300];
	snprintf(want, sizeof want, "python = \"%s/venv\"\n", cwd);
	EXPECT_CONTAINS(toml, want);
	free(toml);
	/* The meshd the block started goes with the test's process group. */
}
