/* Installing the Python package and running its workers from a virtual
 * environment (issue 35, item 12), with Debian's python3 and its venv
 * module (mk/deps.sh test), pip as a machine without an index sees it
 * (PIP_OFFLINE: anything fetched fails), and a real meshd:
 *
 * - `pip install sdk/python` in a plain `python3 -m venv`: built by the
 *   package's own backend (nothing to fetch), the wheel carries
 *   libmeshworker, which the installed package loads; py.typed is there;
 * - which library the wheel carries (the tree's build/ by default), an
 *   editable install, --no-build-isolation;
 * - a worker whose manifest says `python = "<venv>"` runs in that venv (its
 *   packages, its prefix), also from meshd's kept copy of the image; the
 *   key's refusals. */
#include "integration/python_t.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Replies where it runs: its prefix, whether that is a venv, the library. */
static const char where_py[] = "import sys\n"
			       "import mesh.worker\n"
			       "def handle(data):\n"
			       "    return ('prefix=%s venv=%s lib=%s' % (sys.prefix, sys.prefix != sys.base_prefix,\n"
			       "            mesh.worker.library_path)).encode()\n"
			       "mesh.worker.main(handle)\n";

/* `mesh ARGS` against the test's meshd: its exit status, output in out. */
static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket run/meshd.sock", t_bin("mesh"), args);
}

/* A plain venv at ./dir (Debian's python3), with pip in it or not. */
static void make_venv(const char *dir, int with_pip)
{
	if (t_sh(out, sizeof out, 1, "'%s' -m venv %s '%s'", PYTHON, with_pip ? "" : "--without-pip", dir) != 0)
		FAIL("python3 -m venv %s: %s", dir, out);
}

TEST_TIMEOUT(python_pip_install_offline_in_a_plain_venv, 240)
{
	if (!cwd[0] && !getcwd(cwd, sizeof cwd))
		FAIL("getcwd");
	make_venv("v", 1);
	/* The user's command, in the venv's own pip; the library under test named. */
	int rc = t_sh(out, sizeof out, 1, PIP_OFFLINE "MESH_WORKER_LIB='%s' v/bin/pip install '%s'",
		      t_bin("libmeshworker.so"), t_src("sdk/python"));
	if (rc != 0)
		FAIL("pip install: exit %d: %s", rc, out);
	EXPECT_CONTAINS(out, "Successfully installed mesh-0.1.0");
	/* From anywhere, without PYTHONPATH or MESH_WORKER_LIB: the carried library. */
	rc = t_sh(out, sizeof out, 1,
		  "cd / && env -u PYTHONPATH -u MESH_WORKER_LIB %s'%s/v/bin/python' -c \"\n"
		  "import os, mesh, mesh.worker, mesh.client\n"
		  "d = os.path.dirname(mesh.__file__)\n"
		  "print('pkg', d.startswith('%s/v/lib/'))\n"
		  "print('lib', mesh.worker.library_path == os.path.join(d, 'libmeshworker.so.0'))\n"
		  "print('typed', os.path.isfile(os.path.join(d, 'py.typed')))\n"
		  "print('api', mesh.worker.API_VERSION)\"",
		  py_env(), cwd, cwd);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "pkg True\nlib True\ntyped True\napi 3\n");
	/* The build wrote nothing into the source tree. */
	struct stat st;
	char p[4200];
	snprintf(p, sizeof p, "%s/build", t_src("sdk/python"));
	EXPECT_NE(stat(p, &st), 0);
	snprintf(p, sizeof p, "%s/mesh.egg-info", t_src("sdk/python"));
	EXPECT_NE(stat(p, &st), 0);

	/* A worker of that venv: only the venv has the package. */
	t_write_file("worker.py", where_py);
	char extra[4300];
	snprintf(extra, sizeof extra, "python = \"%s/v\"\n", cwd);
	snprintf(p, sizeof p, "%s/v/bin/python", cwd);
	add_py_program("catalog", "venvw", p, NULL, "-", extra, 0);
	pid_t pid = meshd_t_start(.wait_accept = 1);
	EXPECT_EQ(mesh("call venvw x"), 0);
	char want[8500];
	snprintf(want, sizeof want, "prefix=%s/v venv=True lib=%s/v/lib/", cwd, cwd);
	EXPECT_CONTAINS(out, want);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* The wheel carries build/libmeshworker.so of the tree it is built from
 * when nothing else is named; without one it is a pure wheel whose
 * mesh.worker says how to get the library; an editable install runs the
 * tree's package with the tree's library; --no-build-isolation works in a
 * venv without wheel or setuptools. */
TEST_TIMEOUT(python_pip_install_carries_the_tree_build_by_default, 240)
{
	if (!cwd[0] && !getcwd(cwd, sizeof cwd))
		FAIL("getcwd");
	make_venv("v", 0);
	make_venv("e", 0);
	make_venv("n", 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "mkdir -p tree/sdk tree/build bare/sdk && cp -r '%s' tree/sdk/python && cp -r '%s' bare/sdk/python && "
		       "cp '%s' tree/build/libmeshworker.so && rm -rf tree/sdk/python/_backend/__pycache__",
		       t_src("sdk/python"), t_src("sdk/python"), t_bin("libmeshworker.so")),
		  0);
	/* Debian's pip into each venv (--python): the venvs have none of their own. */
	int rc = t_sh(out, sizeof out, 1,
		      PIP_OFFLINE "env -u MESH_WORKER_LIB '%s' -m pip --python v/bin/python install ./tree/sdk/python",
		      PYTHON);
	if (rc != 0)
		FAIL("pip install: exit %d: %s", rc, out);
	const char *check = "cd / && env -u PYTHONPATH -u MESH_WORKER_LIB %s'%s/%s/bin/python' -c \"\n"
			    "import os, mesh\n"
			    "print('pkg', os.path.dirname(mesh.__file__))\n"
			    "try:\n"
			    "    import mesh.worker\n"
			    "    print('lib', mesh.worker.library_path)\n"
			    "except ImportError as e:\n"
			    "    print('ImportError', e)\"";
	char want[8500];
	EXPECT_EQ(t_sh(out, sizeof out, 1, check, py_env(), cwd, "v"), 0);
	snprintf(want, sizeof want, "lib %s/v/lib/", cwd);
	EXPECT_CONTAINS(out, want);
	EXPECT_CONTAINS(out, "/site-packages/mesh/libmeshworker.so.0\n");
	/* The wheel's library is the tree's, byte for byte. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "cmp tree/build/libmeshworker.so v/lib/python3*/site-packages/mesh/libmeshworker.so.0"),
		  0);

	/* Editable: the tree's package, the tree's build/. */
	rc = t_sh(out, sizeof out, 1,
		  PIP_OFFLINE "env -u MESH_WORKER_LIB '%s' -m pip --python e/bin/python install -e ./tree/sdk/python", PYTHON);
	if (rc != 0)
		FAIL("pip install -e: exit %d: %s", rc, out);
	EXPECT_EQ(t_sh(out, sizeof out, 1, check, py_env(), cwd, "e"), 0);
	snprintf(want, sizeof want, "pkg %s/tree/sdk/python/mesh\nlib %s/tree/build/libmeshworker.so\n", cwd, cwd);
	EXPECT_CONTAINS(out, want);

	/* No build: a pure wheel; mesh.client works, mesh.worker says what to do. */
	rc = t_sh(out, sizeof out, 1,
		  PIP_OFFLINE "env -u MESH_WORKER_LIB '%s' -m pip --python n/bin/python install --no-build-isolation ./bare/sdk/python",
		  PYTHON);
	if (rc != 0)
		FAIL("pip install --no-build-isolation: exit %d: %s", rc, out);
	EXPECT_EQ(t_sh(out, sizeof out, 1, check, py_env(), cwd, "n"), 0);
	EXPECT_CONTAINS(out, "ImportError mesh.worker: cannot load libmeshworker");
	EXPECT_CONTAINS(out, "MESH_WORKER_LIB");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "ls n/lib/python3*/site-packages/mesh-0.1.0.dist-info/WHEEL && "
					   "grep Tag: n/lib/python3*/site-packages/mesh-0.1.0.dist-info/WHEEL"),
		  0);
	EXPECT_CONTAINS(out, "Tag: py3-none-any\n");
}

/* python = "<venv>": the worker runs in the venv (a link to the venv's
 * interpreter alone loses it: Python looks for pyvenv.cfg beside the path it
 * was started as, which is the catalog's); its kept copy loads too.  A
 * relative path, a directory that is no venv, a binary that is not the
 * venv's interpreter: refused at load, saying so. */
TEST_TIMEOUT(python_manifest_python_runs_the_worker_in_its_venv, 90)
{
	char extra[4300], p[4300], want[8500];
	make_package(where_py);
	make_venv("v", 0);
	mkdir("notvenv", 0755);
	snprintf(p, sizeof p, "%s/v/bin/python", cwd);
	snprintf(extra, sizeof extra, "python = \"%s/v\"\n", cwd);
	add_py_program("catalog", "venvw", p, NULL, "-", extra, 1);
	add_py_program("catalog", "rel", p, NULL, "-", "python = \"v\"\n", 1);
	snprintf(extra, sizeof extra, "python = \"%s/notvenv\"\n", cwd);
	add_py_program("catalog", "novenv", p, NULL, "-", extra, 1);
	snprintf(extra, sizeof extra, "python = \"%s/v\"\n", cwd);
	add_py_program("catalog", "other", "/bin/true", NULL, "-", extra, 1);
	pid_t pid = meshd_t_start(.wait_accept = 1);

	EXPECT_EQ(mesh("call venvw x"), 0);
	snprintf(want, sizeof want, "prefix=%s/v venv=True lib=", cwd);
	EXPECT_CONTAINS(out, want);
	/* The load kept a copy of the image (for a rollback): it loaded too. */
	char *e = t_read_file("meshd.err", NULL);
	EXPECT_TRUE(e && !strstr(e, "no copy of its image kept"));
	free(e);

	EXPECT_NE(mesh("load rel"), 0);
	EXPECT_CONTAINS(out, "rel.toml:4:10: 'python' must be the absolute path of a virtual environment");
	EXPECT_NE(mesh("load novenv"), 0);
	snprintf(want, sizeof want, "python = \"%s/notvenv\" is not a virtual environment: it has no pyvenv.cfg", cwd);
	EXPECT_CONTAINS(out, want);
	EXPECT_NE(mesh("load other"), 0);
	snprintf(want, sizeof want, "is not the interpreter of python = \"%s/v\"", cwd);
	EXPECT_CONTAINS(out, want);
	EXPECT_CONTAINS(out, "ln -sf ");
	EXPECT_EQ(meshd_t_stop(pid), 0);
}
