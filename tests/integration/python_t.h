/* Helpers shared by the Python SDK tests (test_python*.c): a package
 * directory py/mesh linked to the sources with the libmeshworker.so under
 * test beside it (the package's second place to look; meshd passes no
 * MESH_* variable), catalog entries running python3, the environment a
 * sanitizer build needs, and a real meshd (meshd_t.h stops it).
 * Header-only (static), included by each tests/integration/test_python*.c. */
#ifndef MESH_TESTS_PYTHON_T_H
#define MESH_TESTS_PYTHON_T_H

#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Debian's interpreter (mk/deps.sh); an ELF, as the catalog wants. */
#define PYTHON "/usr/bin/python3"

static char out[1 << 20];
static char cwd[4096];

static void link_or_fail(const char *target, const char *path)
{
	unlink(path);
	if (symlink(target, path) != 0)
		FAIL("symlink %s -> %s: %s", path, target, strerror(errno));
}

/* A libmeshworker built with SAN=1 leaves the sanitizer runtime to the
 * program, which python3 is not built with: it is preloaded then.  The
 * runtime's path ("" when the library under test is a plain one). */
static char asan_rt[1024];
/* No leak report from python3 itself; faulthandler, not ASan, reports a SIGSEGV. */
#define ASAN_OPTS "detect_leaks=0:handle_segv=0:handle_abort=0"
static int asan_checked;
static const char *asan_runtime(void)
{
	if (!asan_checked) {
		asan_checked = 1;
		if (t_sh(out, sizeof out, 1, "nm -D -u '%s' | grep -q __asan_", t_bin("libmeshworker.so")) == 0 &&
		    t_sh(asan_rt, sizeof asan_rt, 0, "clang -print-file-name=libclang_rt.asan-$(uname -m).so") == 0)
			asan_rt[strcspn(asan_rt, "\n")] = 0;
		else
			asan_rt[0] = 0;
	}
	return asan_rt;
}

/* The environment python3 needs for the library under test, as shell words. */
static const char *py_env(void)
{
	static char env[1200];
	snprintf(env, sizeof env, "%s%s%s", *asan_runtime() ? "ASAN_OPTIONS=" ASAN_OPTS " LD_PRELOAD=" : "",
		 asan_runtime(), *asan_runtime() ? " " : "");
	return env;
}

/* py/mesh (the package, with the library under test beside it) and, when
 * worker_py is not NULL, worker.py holding it. */
static void make_package(const char *worker_py)
{
	char src[4200];
	if (!cwd[0] && !getcwd(cwd, sizeof cwd))
		FAIL("getcwd");
	mkdir("py", 0755);
	mkdir("py/mesh", 0755);
	/* Every module of the package, and py.typed. */
	DIR *d = opendir(t_src("sdk/python/mesh"));
	if (!d)
		FAIL("opendir %s: %s", t_src("sdk/python/mesh"), strerror(errno));
	for (struct dirent *de; (de = readdir(d));) {
		size_t n = strlen(de->d_name);
		if (!(n > 3 && strcmp(de->d_name + n - 3, ".py") == 0) && strcmp(de->d_name, "py.typed") != 0)
			continue;
		char dst[300];
		snprintf(src, sizeof src, "sdk/python/mesh/%s", de->d_name);
		snprintf(dst, sizeof dst, "py/mesh/%s", de->d_name);
		link_or_fail(t_src(src), dst);
	}
	closedir(d);
	link_or_fail(t_bin("libmeshworker.so"), "py/mesh/libmeshworker.so.0");
	if (worker_py)
		t_write_file("worker.py", worker_py);
}

/* A catalog entry <dir>/<name> running `interp script mode` (interp: the
 * interpreter the binary links to; script: an absolute path; NULL: the
 * test's worker.py); extra: more top-level manifest lines ("max_workers =
 * 2\n"), or NULL; with_path: [env] PYTHONPATH names the test's py/.
 * PYTHONUNBUFFERED is emptied (= unset) in case the test's environment has
 * it: the SDK itself must make the output line-buffered. */
__attribute__((unused)) static void add_py_program(const char *dir, const char *name, const char *interp, const char *script, const char *mode,
			   const char *extra, int with_path)
{
	char path[4300], toml[9000], san[1200] = "", here[4200], pp[4200] = "";
	if (!cwd[0] && !getcwd(cwd, sizeof cwd))
		FAIL("getcwd");
	snprintf(here, sizeof here, "%s/worker.py", cwd);
	if (with_path)
		snprintf(pp, sizeof pp, "PYTHONPATH = \"%s/py\"\n", cwd);
	if (*asan_runtime())
		snprintf(san, sizeof san, "ASAN_OPTIONS = \"" ASAN_OPTS "\"\nLD_PRELOAD = \"%s\"\n",
			 asan_runtime());
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/%s", dir, mesh_target_triple());
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/%s/%s", dir, mesh_target_triple(), name);
	link_or_fail(interp, path);
	snprintf(toml, sizeof toml,
		 "name = \"%s\"\nbackends = [\"native\"]\nargs = [\"%s\", \"%s\"]\n%s"
		 "[env]\n%sPYTHONUNBUFFERED = \"\"\n%s"
		 "[lifecycle]\nready_timeout = \"20s\"\nstop_grace = \"2s\"\n",
		 name, script ? script : here, mode, extra ? extra : "", pp, san);
	snprintf(path, sizeof path, "%s/%s.toml", dir, name);
	t_write_file(path, toml);
}

/* The same with Debian's python3 and the test's py/ on PYTHONPATH. */
__attribute__((unused)) static void add_program(const char *dir, const char *name, const char *script, const char *mode, const char *extra)
{
	add_py_program(dir, name, PYTHON, script, mode, extra, 1);
}

/* pip as a machine without an index sees it: no index, no find-links or
 * config file of this machine's, no cache; anything fetched fails. */
#define PIP_OFFLINE                                                                                               \
	"env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 " \
	"PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "

#endif
