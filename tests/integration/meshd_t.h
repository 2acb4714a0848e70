/* Helpers shared by the tests that drive a real meshd (test_meshd*.c,
 * python_t.h, ...): a catalog entry (meshd_t_add_program), meshd started
 * and waited for (meshd_t_start, the one way a test starts it), `mesh` run
 * against it, a job's JSON, meshd stopped (meshd_t_stop).  Header-only
 * (static inline); the caller keeps its own output buffer and passes it in. */
#ifndef MESH_TESTS_MESHD_T_H
#define MESH_TESTS_MESHD_T_H

#include "host/image.h"
#include "runner/t.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#ifndef SOCK
#define SOCK "run/meshd.sock"
#endif

/* catalog/<triple>/<name>, a copy of binary, and catalog/<name>.toml:
 * name, the native backend, then tail (more manifest lines, or NULL).
 * out/cap: the buffer for cp's output. */
static inline void meshd_t_add_program(char *out, size_t cap, const char *name, const char *binary, const char *tail)
{
	char path[8192], toml[20000];
	snprintf(path, sizeof path, "catalog/%s", mesh_target_triple());
	mkdir("catalog", 0755);
	mkdir(path, 0755);
	ASSERT_EQ(t_sh(out, cap, 1, "cp '%s' 'catalog/%s/%s'", binary, mesh_target_triple(), name), 0);
	snprintf(toml, sizeof toml, "name = \"%s\"\nbackends = [\"native\"]\n%s", name, tail ? tail : "");
	snprintf(path, sizeof path, "catalog/%s.toml", name);
	t_write_file(path, toml);
}

/* Whether the unix socket at path (a char *) accepts a connection: a
 * t_wait_for condition. */
static inline int meshd_t_serving(void *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", (const char *)path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* How meshd_t_start runs meshd; a field left 0 takes its default. */
struct meshd_t_opt {
	const char *args;    /* more arguments (split by sh), or NULL */
	const char *catalog; /* --catalog: "catalog" (made when missing) */
	const char *state;   /* --state, or NULL for none */
	const char *sock;    /* --socket: SOCK */
	const char *dir;     /* where it runs (its catalog, logs/, socket and
			      * meshd.err are relative to it): the test's dir */
	void (*child)(void); /* called in the child before exec (setenv,
			      * setrlimit, another uid...), or NULL */
	int wait_accept;     /* wait until the socket accepts a connection,
			      * not for READY=1 on a NOTIFY_SOCKET of ours */
};

/* Starts `meshd --catalog C --logs logs --socket S [--state D] ARGS` in
 * o->dir (C and logs/ made there when missing; stderr appended to
 * meshd.err there) and waits up to 15 s for it to serve: for its first
 * notification, which must say READY=1, or, with o->wait_accept, until its
 * socket accepts a connection.  Fails the test (meshd killed, its stderr
 * printed) when it does not.  Its pid: the shell exec'd it. */
static inline pid_t meshd_t__start(const struct meshd_t_opt *o)
{
	const char *dir = o->dir ? o->dir : ".", *sock = o->sock ? o->sock : SOCK;
	char here[4096], npath[4200], cmd[16384], buf[256], path[8400];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = -1;
	if (!getcwd(here, sizeof here))
		FAIL("getcwd");
	snprintf(path, sizeof path, "%s/%s", dir, o->catalog ? o->catalog : "catalog");
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/logs", dir);
	mkdir(path, 0755);
	if (!o->wait_accept) {
		snprintf(npath, sizeof npath, "%s/notify.sock", here);
		unlink(npath);
		fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		ASSERT_GE(fd, 0);
		ASSERT_LT(strlen(npath), sizeof sa.sun_path);
		strcpy(sa.sun_path, npath);
		ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	}
	snprintf(cmd, sizeof cmd, "exec '%s' --catalog '%s' --logs logs --socket '%s'%s%s%s %s 2>>meshd.err",
		 t_bin("meshd"), o->catalog ? o->catalog : "catalog", sock, o->state ? " --state '" : "",
		 o->state ? o->state : "", o->state ? "'" : "", o->args ? o->args : "");
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (chdir(dir) < 0)
			_exit(121);
		if (fd >= 0)
			setenv("NOTIFY_SOCKET", npath, 1);
		if (o->child)
			o->child();
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	int up;
	if (fd >= 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n = -1;
		if ((up = poll(&pfd, 1, 15000) == 1) && (n = recv(fd, buf, sizeof buf - 1, 0)) > 0) {
			buf[n] = 0;
			EXPECT_CONTAINS(buf, "READY=1");
		}
		close(fd);
		up = up && n > 0;
	} else {
		snprintf(path, sizeof path, "%s/%s", dir, sock);
		up = t_wait_for(meshd_t_serving, path, 15000);
	}
	if (!up) {
		kill(pid, SIGKILL);
		snprintf(path, sizeof path, "%s/meshd.err", dir);
		char *err = t_read_file(path, NULL);
		FAIL("meshd did not serve within 15 s (%s); its stderr: %s", o->wait_accept ? sock : "no READY=1",
		     err ? err : "");
	}
	return pid;
}

/* meshd_t__start with its options named in place, e.g.
 * meshd_t_start(.state = "state", .args = "--log-level info"). */
#define meshd_t_start(...) meshd_t__start(&(struct meshd_t_opt){__VA_ARGS__})

/* meshd_t_start(.args = args), the older form (msg must be NULL): left
 * for test_store_pg_spec.c, another helper's file today, until it moves. */
static inline pid_t meshd_t_start_notified(const char *args, char *msg, size_t cap)
{
	(void)cap;
	ASSERT_TRUE(msg == NULL);
	return meshd_t_start(.args = args);
}

/* The port meshd's `--metrics` listener logged into ./meshd.err ("serving
 * metrics=... port=N"), into *(int *)arg: a t_wait_for condition. */
static inline int meshd_t_metrics_port(void *arg)
{
	int *port = arg;
	char *err = t_read_file("meshd.err", NULL);
	const char *p = err ? strstr(err, "serving metrics=") : NULL;
	p = p ? strstr(p, "port=") : NULL;
	if (p)
		*port = atoi(p + 5);
	free(err);
	return p && *port > 0;
}

/* The value of the Prometheus sample line starting with `series ` in text
 * (GET /metrics), or -1. */
static inline double meshd_t_sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

/* promtool accepts the metrics text in file (skips the test without
 * promtool). */
static inline void meshd_t_promtool_ok(const char *file)
{
	static char pout[65536];
	if (t_sh(pout, sizeof pout, 1, "command -v promtool") != 0)
		SKIP_TOOL("promtool is not installed: install Debian's 'prometheus' package (mk/deps.sh test)");
	int rc = t_sh(pout, sizeof pout, 1, "promtool check metrics < %s", file);
	if (rc != 0)
		printf("promtool on %s: %s\n", file, pout);
	EXPECT_EQ(rc, 0);
}

/* Waits for pid: its exit status, 128 + the signal that killed it, or -1. */
static inline int meshd_t_wait(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* SIGTERM to meshd, and its exit status as meshd_t_wait says (0 expected). */
static inline int meshd_t_stop(pid_t pid)
{
	kill(pid, SIGTERM);
	return meshd_t_wait(pid);
}

/* `mesh CMD --socket SOCK REST` where fmt... formats "CMD REST" (--socket
 * goes right after the command: after ::: it would be refused): the exit
 * status; stdout (and stderr when merge, else appended to mesh.err) in
 * out[cap]. */
static inline int meshd_t_mesh(char *out, size_t cap, int merge, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int meshd_t_mesh(char *out, size_t cap, int merge, const char *fmt, ...)
{
	char args[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	char *sp = strchr(args, ' ');
	int cmdlen = sp ? (int)(sp - args) : (int)strlen(args);
	return t_sh(out, cap, merge, "'%s' %.*s --socket " SOCK "%s%s", t_bin("mesh"), cmdlen, args, args + cmdlen,
		    merge ? "" : " 2>>mesh.err");
}

/* `mesh submit ARGS`: the job id it printed alone on its line (anything
 * else fails the test); the output in out[cap]. */
static inline unsigned meshd_t_submit(char *out, size_t cap, const char *args)
{
	ASSERT_EQ(meshd_t_mesh(out, cap, 0, "submit %s", args), 0);
	char *end;
	unsigned long id = strtoul(out, &end, 10);
	ASSERT_TRUE(id > 0 && *end == '\n' && end[1] == 0);
	return (unsigned)id;
}

/* Job id's object in `mesh jobs --json` (decref it); the output in
 * out[cap]. */
static inline json_t *meshd_t_job_json(char *out, size_t cap, unsigned id)
{
	ASSERT_EQ(meshd_t_mesh(out, cap, 0, "jobs --json --all"), 0);
	json_t *j = json_loads(out, 0, NULL), *e, *found = NULL;
	size_t i;
	char ids[16];
	snprintf(ids, sizeof ids, "%u", id);
	json_array_foreach(json_object_get(j, "jobs"), i, e) if (!strcmp(json_string_value(json_object_get(e, "id")), ids)) found = e;
	ASSERT_TRUE(found != NULL);
	json_incref(found);
	json_decref(j);
	return found;
}

/* `mesh job status` of a meshd job (its object j from GET /v1/jobs) on
 * its journal, lease dir and lease name, n chunks, run from the job's
 * directory: there its lease dir is a bare name, which the path law of
 * `mesh job` takes (it takes no other outside /tmp/).  The exit status;
 * the output (stderr merged) in out[cap]. */
static inline int meshd_t_job_status(char *out, size_t cap, json_t *j, uint64_t n)
{
	const char *lockdir = json_string_value(json_object_get(j, "lockdir")), *base;
	ASSERT_TRUE(lockdir != NULL);
	base = strrchr(lockdir, '/');
	return t_sh(out, cap, 1, "cd '%s' && '%s' job status journal.log '%s' '%s' %llu",
		    json_string_value(json_object_get(j, "dir")), t_bin("mesh"), base ? base + 1 : lockdir,
		    json_string_value(json_object_get(j, "lease_name")), (unsigned long long)n);
}

/* The integer member k of o (0 when it has none). */
static inline int64_t meshd_t_jint(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

#endif
