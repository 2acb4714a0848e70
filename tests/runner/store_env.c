#include "runner/store_env.h"

#include "job/job.h"
#include "runner/leftover.h"
#include "runner/t.h"
#include "store/store_pg.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* PostgreSQL's server programs (Debian: /usr/lib/postgresql/<v>/bin). */
static int pg_bin(char *buf, size_t cap)
{
	glob_t g;
	int ok = glob("/usr/lib/postgresql/*/bin/pg_ctl", 0, NULL, &g) == 0 && g.gl_pathc > 0;
	if (ok) {
		snprintf(buf, cap, "%s", g.gl_pathv[g.gl_pathc - 1]);
		*strrchr(buf, '/') = 0;
	}
	globfree(&g);
	return ok ? 0 : -1;
}

/* Runs a shell command line as the server's user (postgres when we are
 * root: the server refuses to run as root), in network namespace netns
 * when one is given. */
static int as_pg_in(const char *netns, const char *cmd)
{
	char line[2048], pre[128] = "";
	if (netns && *netns)
		snprintf(pre, sizeof pre, "ip netns exec %s ", netns);
	if (geteuid() == 0)
		snprintf(line, sizeof line, "%srunuser -u postgres -- sh -c '%s' >/dev/null 2>&1", pre, cmd);
	else
		snprintf(line, sizeof line, "%ssh -c '%s' >/dev/null 2>&1", pre, cmd);
	return system(line);
}
static int as_pg(const char *cmd)
{
	return as_pg_in(NULL, cmd);
}

/* The server's options: a unix socket in its directory, and TCP on the
 * harness's listen address when one was asked for. */
static void pg_opts(const struct store_env *e, char *buf, size_t cap)
{
	snprintf(buf, cap, "-k %s -c listen_addresses=%s -c max_connections=%d%s -c shared_buffers=16MB", e->pgdir,
		 e->listen, e->max_conns ? e->max_conns : 64, e->max_conns ? " -c superuser_reserved_connections=0" : "");
}

/* A fresh data directory, copied from one initdb made once a machine
 * (under a lock: tests run in parallel). */
static int pg_datadir(const char *bin, const char *dir)
{
	char tmpl[128], lock[160], cmd[1024];
	struct stat st;
	int fd, rc = 0;
	snprintf(tmpl, sizeof tmpl, "/tmp/mesh-test-pgdata-%u", (unsigned)getuid());
	snprintf(lock, sizeof lock, "%s.lock", tmpl);
	fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0)
		return -1;
	if (stat(tmpl, &st) < 0) {
		char tmp[160];
		snprintf(tmp, sizeof tmp, "%s.new", tmpl);
		snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", tmp, tmp);
		rc = system(cmd);
		if (!rc && geteuid() == 0) {
			struct passwd *pw = getpwnam("postgres");
			rc = pw && chown(tmp, pw->pw_uid, pw->pw_gid) == 0 ? 0 : -1;
		}
		snprintf(cmd, sizeof cmd, "%s/initdb -D %s/data -A trust -N -U mesh", bin, tmp);
		if (!rc)
			rc = as_pg(cmd);
		if (!rc && rename(tmp, tmpl) < 0)
			rc = -1;
	}
	close(fd);
	if (rc)
		return -1;
	snprintf(cmd, sizeof cmd, "cp -a %s %s", tmpl, dir);
	return system(cmd) ? -1 : 0;
}

/* The server this test process started: stopped at exit too, so that a
 * test that fails (FAIL exits) leaves no server behind.  Only in the
 * process that started it (a forked child's exit stops nothing). */
static struct store_env *running;
static pid_t running_pid;

static void stop_at_exit(void)
{
	if (running && running_pid == getpid())
		store_env_stop(running);
}

static int pg_start(struct store_env *e)
{
	char bin[200], cwd[200], cmd[1400], why[256], opts[600];
	int found, now;
	if (pg_bin(bin, sizeof bin)) {
		fprintf(stderr, "store_env: no PostgreSQL server programs (mk/deps.sh test installs them)\n");
		return 1;
	}
	/* Under /tmp, not the test's directory: the server's user must reach
	 * it, and a unix socket's path is short. */
	snprintf(cwd, sizeof cwd, "/tmp/mesh-pg-XXXXXX");
	if (!mkdtemp(cwd) || chmod(cwd, 0755) < 0)
		return -1;
	snprintf(e->pgdir, sizeof e->pgdir, "%s/pg", cwd);
	t_leftover_note("pg", e->pgdir);
	if (pg_datadir(bin, e->pgdir)) {
		fprintf(stderr, "store_env: initdb failed\n");
		store_env_stop(e);
		return -1;
	}
	if (e->hba_cidr[0]) {
		char hba[300];
		snprintf(hba, sizeof hba, "%s/data/pg_hba.conf", e->pgdir);
		FILE *f = fopen(hba, "a");
		if (!f || fprintf(f, "host all all %s trust\n", e->hba_cidr) < 0 || fclose(f)) {
			fprintf(stderr, "store_env: cannot write %s\n", hba);
			store_env_stop(e);
			return -1;
		}
	}
	pg_opts(e, opts, sizeof opts);
	snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -l %s/log -w -t 30 -o \"%s -c fsync=on -c synchronous_commit=on\" start",
		 bin, e->pgdir, e->pgdir, opts);
	if (as_pg_in(e->netns, cmd)) {
		fprintf(stderr, "store_env: pg_ctl start failed (see %s/log)\n", e->pgdir);
		store_env_stop(e);
		return -1;
	}
	if (!running_pid)
		atexit(stop_at_exit);
	running = e;
	running_pid = getpid();
	snprintf(e->where, sizeof e->where, "postgresql:///postgres?host=%s&user=mesh#conf", e->pgdir);
	if (mesh_pg_schema(e->where, MESH_PG_SCHEMA_INIT, &found, &now, why, sizeof why)) {
		fprintf(stderr, "store_env: mesh store init: %s\n", why);
		store_env_stop(e);
		return -1;
	}
	return 0;
}

int store_env_pg_ctl(const struct store_env *e, const char *args)
{
	char bin[200], cmd[1400], opts[600];
	if (pg_bin(bin, sizeof bin))
		return -1;
	pg_opts(e, opts, sizeof opts);
	snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -l %s/log -w -t 30 -o \"%s\" %s", bin, e->pgdir, e->pgdir,
		 opts, args);
	return as_pg_in(e->netns, cmd);
}

int store_env_start(struct store_env *e, const char *kind)
{
	memset(e, 0, sizeof *e);
	snprintf(e->kind, sizeof e->kind, "%s", kind);
	if (!strcmp(kind, "file")) {
		snprintf(e->where, sizeof e->where, "conf.log");
		snprintf(e->lockdir, sizeof e->lockdir, "locks");
		return 0;
	}
	if (!strcmp(kind, "postgresql"))
		return pg_start(e);
	fprintf(stderr, "store_env: no store '%s'\n", kind);
	return -1;
}

int store_env_start_tcp(struct store_env *e, const char *netns, const char *addr, const char *cidr)
{
	memset(e, 0, sizeof *e);
	snprintf(e->kind, sizeof e->kind, "postgresql");
	snprintf(e->netns, sizeof e->netns, "%s", netns ? netns : "");
	snprintf(e->listen, sizeof e->listen, "%s", addr);
	snprintf(e->hba_cidr, sizeof e->hba_cidr, "%s", cidr);
	return pg_start(e);
}

int store_env_start_conns(struct store_env *e, int n)
{
	memset(e, 0, sizeof *e);
	snprintf(e->kind, sizeof e->kind, "postgresql");
	e->max_conns = n;
	return pg_start(e);
}

void store_env_stop(struct store_env *e)
{
	char cmd[600];
	if (!e->pgdir[0])
		return;
	if (running == e)
		running = NULL;
	store_env_pg_ctl(e, "-m immediate stop");
	/* T_KEEP: the server's log stays with the test's directory (the
	 * working directory), where a deadlock's two statements are named. */
	snprintf(cmd, sizeof cmd, "cp '%s/log' pg.log 2>/dev/null", e->pgdir);
	if (getenv("T_KEEP") && system(cmd) != 0)
		fprintf(stderr, "store_env: no server log to keep in %s/log\n", e->pgdir);
	*strrchr(e->pgdir, '/') = 0;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->pgdir);
	if (system(cmd) != 0)
		fprintf(stderr, "store_env: cannot remove %s\n", e->pgdir);
	e->pgdir[0] = 0;
}

int store_env_submit(const struct store_env *e, uint64_t n)
{
	return mesh_job_submit(e->where, n);
}

int store_env_open(const struct store_env *e, struct mesh_job **j, const char *node, uint32_t max_attempts)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = e->where;
	o.lockdir = e->lockdir[0] ? e->lockdir : NULL;
	o.name = "conf";
	o.node = node;
	o.max_attempts = max_attempts;
	return mesh_job_open(j, &o);
}

int store_env_open_spec(const struct store_env *e, struct mesh_job **j, const char *node, uint64_t spec_min_ns)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = e->where;
	o.lockdir = e->lockdir[0] ? e->lockdir : NULL;
	o.name = "conf";
	o.node = node;
	o.spec_min_ns = spec_min_ns;
	return mesh_job_open(j, &o);
}

long long store_env_sql(const struct store_env *e, const char *sql)
{
	char cmd[1400], out[256] = "";
	snprintf(cmd, sizeof cmd,
		 "PGOPTIONS='-c client_min_messages=warning' psql -q -X -A -t -h %s -U mesh -d postgres -c \"%s\" 2>&1",
		 e->pgdir, sql);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t n = fread(out, 1, sizeof out - 1, p);
	out[n] = 0;
	if (pclose(p) != 0)
		return -1;
	return atoll(out);
}

long long store_env_done_bits(const struct store_env *e, const char *job)
{
	char q[300];
	snprintf(q, sizeof q,
		 "SELECT coalesce(sum(length(replace(w.bits::bit(64)::text, '0', ''))), 0) FROM mesh.done_words w"
		 " JOIN mesh.jobs j ON j.id = w.job WHERE j.name = '%s'",
		 job);
	return store_env_sql(e, q);
}

long long store_env_sql1(const struct store_env *e, const char *sql)
{
	long long v = store_env_sql(e, sql);
	if (v < 0)
		FAIL("psql: %s", sql);
	return v;
}

long long store_env_client_backends(const struct store_env *e)
{
	return store_env_sql(e, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
				" AND application_name <> 'psql' AND pid <> pg_backend_pid()");
}

void store_env_base_url(const struct store_env *e, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", e->where);
	char *h = strrchr(buf, '#');
	if (h)
		*h = 0;
}
