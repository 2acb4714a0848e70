/* The PostgreSQL store (store_pg.h) over Debian's libpq. */
#include "store/store_pg.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "store/store.h"
#include "store/store_pg_int.h"
#include "store/store_pg_sql.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* The outage budget (mesh_pg_set_outage), one for the process. */
static _Atomic uint64_t outage_ns = MESH_PG_OUTAGE_DEFAULT_NS;

void mesh_pg_set_outage(uint64_t ns)
{
	outage_ns = ns;
}

int mesh_pg_url_is(const char *s)
{
	return s && (!strncmp(s, "postgresql://", 13) || !strncmp(s, "postgres://", 11));
}

void mesh_pg_url_safe(const char *url, char *buf, size_t cap)
{
	const char *scheme_end = strstr(url, "://"), *at, *colon;
	if (!cap)
		return;
	snprintf(buf, cap, "%s", url);
	if (!scheme_end)
		return;
	scheme_end += 3;
	at = strchr(scheme_end, '@');
	colon = at ? memchr(scheme_end, ':', (size_t)(at - scheme_end)) : NULL;
	if (colon)
		snprintf(buf, cap, "%.*s:***%s", (int)(colon - url), url, at);
	/* a password given as a parameter */
	char *p = strstr(buf, "password=");
	if (p) {
		/* "***" may be longer than the value: what no longer fits in
		 * cap is cut */
		char *e = p + 9;
		while (*e && *e != '&' && *e != '#')
			e++;
		size_t v = (size_t)(p + 9 - buf), room = cap - 1 - v, stars = room < 3 ? room : 3;
		size_t tail = strlen(e) < room - stars ? strlen(e) : room - stars;
		memmove(buf + v + stars, e, tail);
		memcpy(buf + v, "***", stars);
		buf[v + stars + tail] = 0;
	}
}

/* The password url's text shows: user:pw@ before the host, or a
 * parameter named password (mesh_pg_url_has_password without libpq). */
static int url_password_text(const char *url)
{
	const char *s = strstr(url, "://"), *q;
	if (!s)
		return 0;
	s += 3;
	size_t auth = strcspn(s, "/?#");
	const char *at = memrchr(s, '@', auth);
	if (at && memchr(s, ':', (size_t)(at - s)))
		return 1;
	if (s[auth] == '#' || !(q = strchr(s + auth, '?')) || (strchr(s, '#') && strchr(s, '#') < q))
		return 0;
	for (q++; *q && *q != '#';) {
		size_t k = strcspn(q, "=&#");
		if (k == 8 && !strncmp(q, "password", 8) && q[k] == '=')
			return 1;
		q += strcspn(q, "&#");
		if (*q == '&')
			q++;
	}
	return 0;
}

int mesh_pg_url_has_password(const char *url)
{
	char why[256], *err = NULL, *base;
	if (!url || !mesh_pg_url_is(url))
		return 0;
	if (url_password_text(url))
		return 1;
	if (mesh_pq_load(why, sizeof why) < 0 || !(base = strdup(url)))
		return 0;
	base[strcspn(base, "#")] = 0; /* the job's name is mesh's, not libpq's */
	PQconninfoOption *opts = PQconninfoParse(base, &err), *o;
	int has = 0;
	for (o = opts; o && o->keyword; o++)
		if (!strcmp(o->keyword, "password") && o->val && o->val[0])
			has = 1;
	PQconninfoFree(opts);
	PQfreemem(err);
	free(base);
	return has;
}

static void set_why(char *why, size_t cap, const char *msg)
{
	if (!why || !cap)
		return;
	snprintf(why, cap, "%s", msg ? msg : "");
	size_t n = strlen(why);
	while (n && (why[n - 1] == '\n' || why[n - 1] == ' '))
		why[--n] = 0;
}

/* This process's application_name (mesh_pg_set_app) and its start wait
 * (mesh_pg_set_start_wait): set before the first connection, read after. */
static char app_name[96] = "mesh";
static int app_with_job;
static mesh_pg_wait_fn start_wait_fn;
static void *start_wait_arg;

void mesh_pg_set_app(const char *name, int with_job)
{
	snprintf(app_name, sizeof app_name, "%s", name && name[0] ? name : "mesh");
	app_with_job = with_job;
}

void mesh_pg_set_start_wait(mesh_pg_wait_fn fn, void *arg)
{
	start_wait_fn = fn;
	start_wait_arg = arg;
}

/* Splits "#job" off url into job; the rest (a copy), with this process's
 * name as fallback_application_name (percent-encoded), is what libpq
 * gets. */
char *mesh__pg_conninfo(const char *url, char *job, size_t cap)
{
	const char *hash = strrchr(url, '#');
	char name[200], enc[3 * sizeof name], *conninfo;
	size_t base = hash ? (size_t)(hash - url) : strlen(url), k = 0;
	if (hash) {
		if (!mesh_job_name_ok(hash + 1))
			return NULL;
		snprintf(job, cap, "%s", hash + 1);
	} else {
		snprintf(job, cap, "default");
	}
	if (app_with_job)
		snprintf(name, sizeof name, "%s %s", app_name, job);
	else
		snprintf(name, sizeof name, "%s", app_name);
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~", *p))
			enc[k++] = (char)*p;
		else
			k += (size_t)snprintf(enc + k, 4, "%%%02X", *p);
	}
	enc[k] = 0;
	const char *sep = !memchr(url, '?', base) ? "?" : base && (url[base - 1] == '?' || url[base - 1] == '&') ? "" : "&";
	if (asprintf(&conninfo, "%.*s%sfallback_application_name=%s", (int)base, url, sep, enc) < 0)
		return NULL;
	return conninfo;
}

/* The library prints nothing: the server's notices (a shutdown's
 * WARNING) are dropped. */
static void no_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* An error that means the connection is gone or going (a restart): class
 * 08 (connection exception) or 57P01..57P03 (admin/crash shutdown, cannot
 * connect now). */
static int conn_lost(const PGresult *r)
{
	const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	return !st || !strncmp(st, "08", 2) || !strcmp(st, "57P01") || !strcmp(st, "57P02") || !strcmp(st, "57P03");
}

static void set_err(struct mesh_pg *pg, const char *msg)
{
	pthread_mutex_lock(&pg->emu);
	set_why(pg->err, sizeof pg->err, msg);
	pthread_mutex_unlock(&pg->emu);
}

void mesh_pg_error(struct mesh_pg *pg, char *buf, size_t cap)
{
	if (!cap)
		return;
	pthread_mutex_lock(&pg->emu);
	snprintf(buf, cap, "%s", pg->err);
	pthread_mutex_unlock(&pg->emu);
}

/* The server's words for a statement it refused (r, or c's message where
 * there is no result): its message, its SQLSTATE, its hint, and the
 * command that fixes it where there is one. */
static void refused(struct mesh_pg *pg, const PGresult *r, PGconn *c)
{
	const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *hint = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_HINT) : NULL;
	char m[400], first[200];
	snprintf(first, sizeof first, "%s", msg ? msg : PQerrorMessage(c));
	first[strcspn(first, "\n")] = 0;
	/* 3F000 no schema, 42P01 no table, 42883 no function, 42703 no
	 * column: a schema missing, dropped, or of another version */
	int schema = st && (!strcmp(st, "3F000") || !strcmp(st, "42P01") || !strcmp(st, "42883") || !strcmp(st, "42703"));
	snprintf(m, sizeof m, "%s (SQLSTATE %s)%s%s%s", first[0] ? first : "refused", st ? st : "none",
		 hint ? "; hint: " : "", hint ? hint : "",
		 schema ? "; the mesh schema is missing or not this mesh's: run `mesh store status URL`, then"
			  " `mesh store init URL` or `mesh store migrate URL`"
			: "");
	set_err(pg, m);
}

/* Every session's: synchronous commit on; and the plans the store's
 * functions settle on from their first call (their statements are
 * written for plans that do not know the values: a job's id, arrays of
 * chunks), instead of five planned for the values first -- most of what
 * a node's first calls cost the server.  One statement (set_config, not
 * SET), so that it can go in a pipeline (mesh_pg_open). */
#define SESSION_SETTINGS                                                                                      \
	"SELECT set_config('synchronous_commit', 'on', false), set_config('client_min_messages', 'warning', false)," \
	" set_config('plan_cache_mode', 'force_generic_plan', false)"

/* A job's status (mesh_pg_status), $1 its id. */
#define SQL_STATUS                                                                                    \
	"SELECT n, done, dups, failed, mesh.held($1, true),"                                          \
	" (SELECT count(*) FROM mesh.chunks WHERE job = $1 AND state = 'b'), spec FROM mesh.job_counts" \
	" WHERE id = $1"
/* Up to $2 leases of job $1, TTL $3 us, for holder $4 (mesh_pg_lease). */
#define SQL_LEASE                                          \
	"SELECT cid, attempt, stolen, deadline, started, token," \
	" set_config('synchronous_commit', 'off', true) FROM mesh.lease($1, $2, $3, $4)"

void mesh__pg_warm(PGconn *c)
{
	static const char *const vals[4] = {"-1", "1", "1000000", "1"};
	PQclear(PQexec(c, SESSION_SETTINGS));
	PQclear(PQexec(c, "BEGIN"));
	PQclear(PQexecParams(c, SQL_STATUS, 1, NULL, vals, NULL, NULL, 0));
	PQclear(PQexecParams(c, SQL_LEASE, 4, NULL, vals, NULL, NULL, 0));
	PQclear(PQexec(c, "ROLLBACK"));
}

int mesh_pg_start_busy(const char *msg)
{
	/* 53300: "sorry, too many clients already", "too many connections
	 * for role|database", "remaining connection slots are reserved ...";
	 * 57P03: "the database system is starting up" (also "... is
	 * shutting down", "... is in recovery mode", "... is not yet
	 * accepting connections") */
	static const char *const words[] = {"too many clients", "too many connections", "connection slots are reserved",
					    "the database system is"};
	for (size_t i = 0; msg && i < sizeof words / sizeof words[0]; i++)
		if (strstr(msg, words[i]))
			return 1;
	return 0;
}

/* PQconnectdb, tried again while the server has no room or is not up
 * (mesh_pg_set_start_wait): the connection (CONNECTION_OK or the last
 * one that failed). */
static PGconn *connect_waiting(const char *conninfo)
{
	PGconn *c = PQconnectdb(conninfo);
	uint64_t since = 0, pause = 50 * MESH_NS_PER_MS, said = 0;
	char why[200];
	while (start_wait_fn && PQstatus(c) != CONNECTION_OK && mesh_pg_start_busy(PQerrorMessage(c))) {
		uint64_t now = mesh_mono_ns(), budget = outage_ns;
		snprintf(why, sizeof why, "%s", PQerrorMessage(c));
		why[strcspn(why, "\n")] = 0;
		if (!since) {
			since = said = now;
			if (start_wait_fn(start_wait_arg, MESH_PG_WAIT_STOPPED, why, 0, budget))
				return c;
		} else if (now - since >= budget) {
			start_wait_fn(start_wait_arg, MESH_PG_WAIT_GAVE_UP, why, now - since, budget);
			return c;
		} else if (now - said >= MESH_NS_PER_S) {
			said = now;
			if (start_wait_fn(start_wait_arg, MESH_PG_WAIT_STILL, why, now - since, budget))
				return c;
		}
		mesh_sleep_ns(pause < since + budget - now ? pause : since + budget - now);
		if (pause < MESH_NS_PER_S)
			pause *= 2;
		PQfinish(c);
		c = PQconnectdb(conninfo);
	}
	if (since && PQstatus(c) == CONNECTION_OK)
		start_wait_fn(start_wait_arg, MESH_PG_WAIT_ANSWERS, NULL, mesh_mono_ns() - since, outage_ns);
	return c;
}

/* A connection, with SESSION_SETTINGS applied when settings is set, or
 * NULL with why filled. */
static PGconn *connect_db(const char *conninfo, int settings, int *rc, char *why, size_t cap)
{
	char *err = NULL;
	PQconninfoOption *opts;
	PGconn *c;
	PGresult *r;
	if ((*rc = mesh_pq_load(why, cap)) < 0)
		return NULL;
	opts = PQconninfoParse(conninfo, &err);
	if (!opts) {
		set_why(why, cap, err ? err : "not a connection URL");
		PQfreemem(err);
		*rc = MESH_E_PARSE;
		return NULL;
	}
	PQconninfoFree(opts);
	c = mesh__pg_spare_take(conninfo); /* one made already, where a meshd keeps some */
	if (!c)
		c = connect_waiting(conninfo);
	PQsetNoticeProcessor(c, no_notice, NULL);
	if (PQstatus(c) != CONNECTION_OK) {
		set_why(why, cap, PQerrorMessage(c));
		PQfinish(c);
		*rc = MESH_E_UNAVAILABLE;
		return NULL;
	}
	if (!settings)
		return c;
	r = PQexec(c, SESSION_SETTINGS);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		set_why(why, cap, PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
		*rc = MESH_E_UNAVAILABLE;
		return NULL;
	}
	PQclear(r);
	return c;
}

/* Reads what a pipeline of nres statements and nsync Syncs sent on c
 * returns (c in pipeline mode), and leaves pipeline mode: res[i] the
 * result of statement i (NULL where none came), the caller's to clear.
 * Returns 0, or -1 where the connection broke on the way (it is then
 * left for the caller's reconnect: see query()). */
static int pipe_collect(PGconn *c, int nsync, PGresult **res, int nres)
{
	int syncs = 0, i = 0, nulls = 0;
	for (int k = 0; k < nres; k++)
		res[k] = NULL;
	while (syncs < nsync) {
		PGresult *r = PQgetResult(c);
		if (!r) {
			/* one NULL ends each statement's results; two in a row:
			 * nothing more is coming */
			if (++nulls > 1 || PQstatus(c) != CONNECTION_OK)
				break;
			continue;
		}
		nulls = 0;
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			syncs++;
			PQclear(r);
		} else if (i < nres && !res[i]) {
			res[i++] = r;
		} else {
			PQclear(r);
		}
	}
	return syncs == nsync && PQexitPipelineMode(c) ? 0 : -1;
}

/* The schema version: 0 when there is none, or a negative error. */
static int schema_version(PGconn *c)
{
	PGresult *r = PQexec(c, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'mesh'),"
				" to_regclass('mesh.meta') IS NOT NULL");
	int v = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		PQclear(r);
		return MESH_E_UNAVAILABLE;
	}
	if (PQgetvalue(r, 0, 0)[0] != 't') {
		PQclear(r);
		return 0; /* no schema */
	}
	if (PQgetvalue(r, 0, 1)[0] != 't') {
		PQclear(r);
		return MESH_E_VERSION; /* a schema 'mesh' that is not ours */
	}
	PQclear(r);
	r = PQexec(c, "SELECT version FROM mesh.meta");
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		v = MESH_E_VERSION;
	else
		v = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v > 0 ? v : MESH_E_VERSION;
}

/* The statements every batch runs, prepared once a connection (bit slot
 * of pg->prepared) instead of parsed and planned at each call; the other
 * files' slots (store_pg_int.h) come after these. */
enum { PREP_LEASE, PREP_COMPLETE, PREP_RENEW, PREP_HANDBACK };

/* sql once: unnamed (slot < 0) or the connection's prepared statement of
 * slot, prepared first when it is not yet. */
static PGresult *exec_once(PGconn *c, unsigned *prepared, int slot, const char *sql, int n, const char *const *vals)
{
	char name[16];
	if (slot < 0)
		return PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
	snprintf(name, sizeof name, "mesh%d", slot);
	if (!(*prepared & 1u << slot)) {
		/* prepared and run in one round trip (a pipeline) */
		PGresult *r[2] = {NULL, NULL};
		if (!PQenterPipelineMode(c) || !PQsendPrepare(c, name, sql, n, NULL) ||
		    !PQsendQueryPrepared(c, name, n, vals, NULL, NULL, 0) || !PQpipelineSync(c) || pipe_collect(c, 1, r, 2)) {
			PQclear(r[0]);
			PQclear(r[1]);
			return NULL; /* lost on the way: query() makes it again */
		}
		if (PQresultStatus(r[0]) != PGRES_COMMAND_OK) {
			PQclear(r[1]);
			return r[0]; /* the caller's error: refused or lost */
		}
		PQclear(r[0]);
		*prepared |= 1u << slot;
		return r[1];
	}
	return PQexecPrepared(c, name, n, vals, NULL, NULL, 0);
}

void mesh_pg_set_wait_hook(struct mesh_pg *pg, mesh_pg_wait_fn fn, void *arg)
{
	pg->wait_fn = fn;
	pg->wait_arg = arg;
}

/* A call found pg's database gone on c: the outage's start (this one's,
 * told to the hook, or the one another call found already). */
static uint64_t outage_begin(struct mesh_pg *pg, PGconn *c)
{
	uint64_t zero = 0, now = mesh_mono_ns();
	if (!atomic_compare_exchange_strong(&pg->down_since, &zero, now))
		return zero; /* the start another call set */
	pg->gave_up = 0;
	if (pg->wait_fn) {
		/* libpq's first line ("server closed the connection
		 * unexpectedly"); its hints follow on lines of their own */
		char why[160];
		snprintf(why, sizeof why, "%s", PQerrorMessage(c));
		why[strcspn(why, "\n")] = 0;
		pg->wait_fn(pg->wait_arg, MESH_PG_WAIT_STOPPED, why[0] ? why : "connection lost", 0, outage_ns);
	}
	return now;
}

/* A call reached the database again: the outage of start since ends. */
static void outage_end(struct mesh_pg *pg, uint64_t since)
{
	if (atomic_compare_exchange_strong(&pg->down_since, &since, 0) && pg->wait_fn)
		pg->wait_fn(pg->wait_arg, MESH_PG_WAIT_ANSWERS, NULL, mesh_mono_ns() - since, outage_ns);
}

/* Makes c again without blocking past deadline (mono ns): 1 connected. */
static int reset_polled(PGconn *c, uint64_t deadline)
{
	PostgresPollingStatusType st = PQresetStart(c) ? PGRES_POLLING_WRITING : PGRES_POLLING_FAILED;
	while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
		uint64_t now = mesh_mono_ns();
		if (now >= deadline)
			return 0;
		uint64_t ms = (deadline - now) / MESH_NS_PER_MS;
		struct pollfd p = {PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
		int n = poll(&p, 1, ms > 100 ? 100 : (int)ms + 1);
		if (n > 0)
			st = PQresetPoll(c);
		else if (n < 0 && errno != EINTR)
			return 0;
	}
	return st == PGRES_POLLING_OK && PQstatus(c) == CONNECTION_OK;
}

/* Waits for c's database to answer again, making c anew (a session of
 * its own: no statement prepared, *prepared cleared), up to the outage
 * budget from the outage's start, or until the hook or a close stops it:
 * 0, or MESH_E_UNAVAILABLE with the error set. */
static int reconnect(struct mesh_pg *pg, PGconn *c, unsigned *prepared)
{
	uint64_t since = outage_begin(pg, c), pause = 50 * MESH_NS_PER_MS;
	for (;;) {
		uint64_t budget = outage_ns, end = since + budget;
		*prepared = 0;
		/* one try of up to a second, even past the budget (a call
		 * after the outage that ended another) */
		if (reset_polled(c, mesh_mono_ns() + MESH_NS_PER_S)) {
			PQclear(PQexec(c, SESSION_SETTINGS));
			if (c == pg->conn)
				pg->listening = 0; /* under pg->mu, as every use of conn */
			outage_end(pg, since);
			return 0;
		}
		uint64_t now = mesh_mono_ns();
		int stop = pg->closing;
		if (!stop && now < end && pg->wait_fn)
			stop = pg->wait_fn(pg->wait_arg, MESH_PG_WAIT_STILL, NULL, now - since, budget);
		if (stop || now >= end) {
			char m[300], d[32];
			mesh_say_duration(d, sizeof d, now - since);
			snprintf(m, sizeof m, "the database did not answer for %s%s: %s", d,
				 stop ? " (the node was told to stop)" : "", PQerrorMessage(c));
			m[strcspn(m, "\n")] = 0;
			set_err(pg, m);
			if (!stop && !atomic_exchange(&pg->gave_up, 1) && pg->wait_fn)
				pg->wait_fn(pg->wait_arg, MESH_PG_WAIT_GAVE_UP, NULL, now - since, budget);
			return MESH_E_UNAVAILABLE;
		}
		mesh_sleep_ns(pause < end - now ? pause : end - now);
		if (pause < MESH_NS_PER_S)
			pause *= 2;
	}
}

/* mesh__pg_q of the statement of slot (or unnamed: slot < 0), on c (pg's
 * conn or cconn, whose prepared statements are *prepared). */
static PGresult *query_on(struct mesh_pg *pg, PGconn *c, unsigned *prepared, int slot, const char *sql, int n,
			  const char *const *vals, int *rc)
{
	for (int victim = 0;;) {
		PGresult *r = exec_once(c, prepared, slot, sql, n, vals);
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
			return r;
		/* A deadlock's victim (40P01), a statement of its own (no
		 * transaction open): nothing of it is done, and PostgreSQL asks
		 * its client to run it again.  A bury (mesh.fail) and this
		 * node's completions met so, 1 s into their wait. */
		const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
		if (code && !strcmp(code, "40P01") && PQtransactionStatus(c) == PQTRANS_IDLE && victim++ < 3) {
			PQclear(r);
			continue;
		}
		int lost = PQstatus(c) != CONNECTION_OK || conn_lost(r);
		if (!lost)
			refused(pg, r, c);
		PQclear(r);
		if (!lost) {
			*rc = MESH_E_PROTO; /* the database refused the statement */
			return NULL;
		}
		if ((*rc = reconnect(pg, c, prepared)) < 0)
			return NULL;
	}
}

static PGresult *query(struct mesh_pg *pg, int slot, const char *sql, int n, const char *const *vals, int *rc)
{
	return query_on(pg, pg->conn, &pg->prepared, slot, sql, n, vals, rc);
}

PGresult *mesh__pg_q(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, int *rc)
{
	return query(pg, -1, sql, n, vals, rc);
}

PGconn *mesh__pg_connect_polled(const char *conninfo, int (*stopped)(void *), void *arg)
{
	if (mesh_pq_load(NULL, 0) < 0)
		return NULL;
	PGconn *c = PQconnectStart(conninfo);
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	int stop = 0;
	while (c && PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED && !stop) {
		struct pollfd p = {PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
		int n = poll(&p, 1, 100);
		if (n > 0)
			st = PQconnectPoll(c);
		else if (n < 0 && errno != EINTR)
			st = PGRES_POLLING_FAILED;
		stop = stopped(arg);
	}
	if (c && st != PGRES_POLLING_OK) {
		PQfinish(c);
		c = NULL;
	}
	if (c)
		PQsetNoticeProcessor(c, no_notice, NULL);
	return c;
}

static int beat_stopped(void *arg)
{
	struct mesh_pg *pg = arg;
	pthread_mutex_lock(&pg->cmu);
	int stop = pg->beat_stop;
	pthread_mutex_unlock(&pg->cmu);
	return stop;
}

/* The connection is made without blocking, looking at pg->beat_stop every
 * 100 ms: a handle closed while a cut-off database keeps the connection
 * from being made does not wait for TCP to give up. */
void mesh__pg_open_cconn(struct mesh_pg *pg)
{
	PGconn *c = mesh__pg_connect_polled(pg->conninfo, beat_stopped, pg);
	if (c) {
		PGresult *r = PQexec(c, SESSION_SETTINGS);
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			PQfinish(c);
			c = NULL;
		}
		PQclear(r);
	}
	pthread_mutex_lock(&pg->cmu);
	pg->cconn = c;
	pthread_mutex_unlock(&pg->cmu);
}

static void unhex_bytea(const char *s, unsigned char *ident, size_t *len);

/* A connection's start in one round trip (a pipeline): SESSION_SETTINGS,
 * then the schema's version and the job's row (for mesh_pg_job) where the
 * schema is this mesh's.  Returns that version; 0 where it could not say
 * (no schema, another version or another 'mesh': schema_version() looks
 * with care); or MESH_E_UNAVAILABLE (the settings failed or the connection
 * broke). */
static int open_fast(struct mesh_pg *pg)
{
	const char *vals[1] = {pg->job};
	PGresult *r[2] = {NULL, NULL};
	int v = 0;
	if (!PQenterPipelineMode(pg->conn) || !PQsendQueryParams(pg->conn, SESSION_SETTINGS, 0, NULL, NULL, NULL, NULL, 0) ||
	    !PQpipelineSync(pg->conn) ||
	    !PQsendQueryParams(pg->conn,
			       "SELECT m.version, j.id, j.n, j.identity FROM mesh.meta m"
			       " LEFT JOIN mesh.jobs j ON j.name = $1",
			       1, NULL, vals, NULL, NULL, 0) ||
	    !PQpipelineSync(pg->conn) || pipe_collect(pg->conn, 2, r, 2) || PQresultStatus(r[0]) != PGRES_TUPLES_OK) {
		PQclear(r[0]);
		PQclear(r[1]);
		return MESH_E_UNAVAILABLE;
	}
	if (PQresultStatus(r[1]) == PGRES_TUPLES_OK && PQntuples(r[1]) == 1) {
		v = atoi(PQgetvalue(r[1], 0, 0));
		if (v == MESH_PG_SCHEMA_VERSION && !PQgetisnull(r[1], 0, 1)) {
			snprintf(pg->idtext, sizeof pg->idtext, "%s", PQgetvalue(r[1], 0, 1));
			pg->job_n = strtoull(PQgetvalue(r[1], 0, 2), NULL, 10);
			unhex_bytea(PQgetisnull(r[1], 0, 3) ? NULL : PQgetvalue(r[1], 0, 3), pg->job_ident,
				    &pg->job_ident_len);
			pg->job_known = 1;
		}
	}
	PQclear(r[0]);
	PQclear(r[1]);
	return v > 0 ? v : 0;
}

int mesh_pg_open(struct mesh_pg **out, const char *url, char *why, size_t whycap)
{
	struct mesh_pg *pg;
	char job[MESH_NODE_MAX + 1];
	char *conninfo;
	int rc = 0, v;
	set_why(why, whycap, "");
	if (!mesh_pg_url_is(url))
		return MESH_E_PARSE;
	conninfo = mesh__pg_conninfo(url, job, sizeof job);
	if (!conninfo) {
		set_why(why, whycap, "the job name after '#' must be 1..64 of [A-Za-z0-9_.-]");
		return MESH_E_PARSE;
	}
	pg = calloc(1, sizeof *pg);
	if (!pg) {
		free(conninfo);
		return -ENOMEM;
	}
	pg->conninfo = conninfo;
	pg->conn = connect_db(conninfo, 0, &rc, why, whycap);
	if (!pg->conn) {
		free(conninfo);
		free(pg);
		return rc;
	}
	snprintf(pg->job, sizeof pg->job, "%s", job);
	v = open_fast(pg);
	if (v == MESH_E_UNAVAILABLE) {
		set_why(why, whycap, PQerrorMessage(pg->conn));
		PQfinish(pg->conn);
		free(pg->conninfo);
		free(pg);
		return v;
	}
	if (v != MESH_PG_SCHEMA_VERSION)
		v = schema_version(pg->conn);
	if (v == MESH_E_UNAVAILABLE) {
		set_why(why, whycap, PQerrorMessage(pg->conn));
		PQfinish(pg->conn);
		free(pg->conninfo);
		free(pg);
		return v;
	}
	if (v != MESH_PG_SCHEMA_VERSION) {
		char m[160];
		if (v == 0)
			snprintf(m, sizeof m, "the database has no mesh schema (run: mesh store init URL)");
		else if (v < 0)
			snprintf(m, sizeof m, "the schema 'mesh' in this database is not mesh's");
		else
			snprintf(m, sizeof m, "the mesh schema is version %d, this mesh uses %d (run: mesh store migrate URL)",
				 v, MESH_PG_SCHEMA_VERSION);
		set_why(why, whycap, m);
		PQfinish(pg->conn);
		free(pg->conninfo);
		free(pg);
		return MESH_E_VERSION;
	}
	if (getrandom(&pg->holder, sizeof pg->holder, 0) != (ssize_t)sizeof pg->holder)
		pg->holder = mesh_wall_ns() ^ (uint64_t)getpid();
	pg->holder &= INT64_MAX;
	pthread_mutex_init(&pg->mu, NULL);
	pthread_mutex_init(&pg->cmu, NULL);
	pthread_mutex_init(&pg->emu, NULL);
	pthread_cond_init(&pg->ccv, NULL);
	pthread_cond_init(&pg->bcv, NULL);
	*out = pg;
	return 0;
}

void mesh_pg_close(struct mesh_pg *pg)
{
	if (!pg)
		return;
	pg->closing = 1; /* a call waiting for the database gives up */
	mesh__pg_node_stop(pg);
	PQfinish(pg->conn);
	PQfinish(pg->cconn);
	free(pg->conninfo);
	pthread_cond_destroy(&pg->bcv);
	pthread_mutex_destroy(&pg->mu);
	pthread_mutex_destroy(&pg->cmu);
	pthread_mutex_destroy(&pg->emu);
	pthread_cond_destroy(&pg->ccv);
	free(pg);
}

static void hex_bytea(char *buf, const void *p, size_t n)
{
	const unsigned char *b = p;
	buf[0] = '\\';
	buf[1] = 'x';
	for (size_t i = 0; i < n; i++)
		snprintf(buf + 2 + 2 * i, 3, "%02x", b[i]);
	buf[2 + 2 * n] = 0;
}

/* The identity of a row's bytea column (hex text) into ident. */
static void unhex_bytea(const char *s, unsigned char *ident, size_t *len)
{
	size_t n = 0;
	*len = 0;
	if (!s || s[0] != '\\' || s[1] != 'x')
		return;
	for (s += 2; s[0] && s[1] && n < 200; s += 2) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			return;
		ident[n++] = (unsigned char)v;
	}
	*len = n;
}

int mesh_pg_submit(struct mesh_pg *pg, uint64_t n, const void *ident, size_t ident_len, uint64_t *have_n,
		   unsigned char *have_ident, size_t *have_ident_len)
{
	char ntext[24], itext[2 * 200 + 3];
	const char *vals[3] = {pg->job, ntext, ident_len ? itext : NULL};
	PGresult *r;
	int rc = 0;
	if (ident_len > 200)
		return MESH_E_TOOBIG;
	snprintf(ntext, sizeof ntext, "%" PRIu64, n);
	if (ident_len)
		hex_bytea(itext, ident, ident_len);
	pthread_mutex_lock(&pg->mu);
	r = mesh__pg_q(pg,
	      "WITH i AS (INSERT INTO mesh.jobs (name, n, identity) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING"
	      " RETURNING id, n, identity) SELECT n, identity, pg_notify('mesh', id::text) FROM i"
	      " UNION ALL SELECT n, identity, NULL FROM mesh.jobs WHERE name = $1",
	      3, vals, &rc);
	/* No row: another submit of the job inserted it after this
	 * statement's snapshot was taken (its insert waited for that one's
	 * commit, then did nothing, and its read could not see the row);
	 * a statement of its own sees it now.  Nodes started together join
	 * the job one of them created. */
	if (r && PQntuples(r) == 0) {
		PQclear(r);
		r = mesh__pg_q(pg, "SELECT n, identity FROM mesh.jobs WHERE name = $1", 1, vals, &rc);
	}
	if (r && PQntuples(r) >= 1) {
		*have_n = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
		unhex_bytea(PQgetisnull(r, 0, 1) ? NULL : PQgetvalue(r, 0, 1), have_ident, have_ident_len);
		if (*have_n != n || (*have_ident_len && ident_len &&
				     (*have_ident_len != ident_len || memcmp(have_ident, ident, ident_len))))
			rc = MESH_E_MISMATCH;
	} else if (r) {
		set_err(pg, "the job's row was neither inserted nor found");
		rc = MESH_E_PROTO;
	}
	PQclear(r);
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

int mesh_pg_job(struct mesh_pg *pg, uint64_t *n, unsigned char *ident, size_t *ident_len)
{
	const char *vals[1] = {pg->job};
	PGresult *r;
	int rc = 0;
	pthread_mutex_lock(&pg->mu);
	if (pg->job_known) {
		/* read by mesh_pg_open a moment ago (a job's row never changes) */
		pg->job_known = 0;
		*n = pg->job_n;
		memcpy(ident, pg->job_ident, pg->job_ident_len);
		*ident_len = pg->job_ident_len;
		pthread_mutex_unlock(&pg->mu);
		return 0;
	}
	r = mesh__pg_q(pg, "SELECT id, n, identity FROM mesh.jobs WHERE name = $1", 1, vals, &rc);
	if (r && PQntuples(r) == 1) {
		snprintf(pg->idtext, sizeof pg->idtext, "%s", PQgetvalue(r, 0, 0));
		*n = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
		unhex_bytea(PQgetisnull(r, 0, 2) ? NULL : PQgetvalue(r, 0, 2), ident, ident_len);
	} else if (r) {
		rc = MESH_E_NOJOB;
	}
	PQclear(r);
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

int mesh_pg_lease(struct mesh_pg *pg, const char *node, uint64_t ttl_ns, size_t k, struct mesh_pg_lease *out,
		  size_t *got)
{
	char ktext[24], ttext[24], htext[24];
	const char *vals[4] = {pg->idtext, ktext, ttext, htext};
	PGresult *r;
	int rc = 0;
	*got = 0;
	if (!pg->node_on)
		mesh__pg_node_start(pg, node, ttl_ns); /* a node without its row still works */
	snprintf(ktext, sizeof ktext, "%zu", k);
	snprintf(ttext, sizeof ttext, "%" PRIu64, ttl_ns / 1000);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	pthread_mutex_lock(&pg->mu);
	/* A lease is committed without waiting for the WAL flush
	 * (synchronous_commit off for this transaction only): one fsync a
	 * batch (the DONEs') instead of two.  A lease lost in a database
	 * crash returns its chunks to PENDING, as a lost lease file does; a
	 * DONE is never asynchronous, and its flush carries the lease's WAL
	 * before it anyway. */
	r = query(pg, PREP_LEASE, SQL_LEASE, 4, vals, &rc);
	for (int i = 0; r && i < PQntuples(r) && (size_t)i < k; i++) {
		struct mesh_pg_lease *l = &out[(*got)++];
		l->cid = strtoull(PQgetvalue(r, i, 0), NULL, 10);
		l->attempt = (uint32_t)strtoul(PQgetvalue(r, i, 1), NULL, 10);
		l->stolen = PQgetvalue(r, i, 2)[0] == 't';
		l->deadline_ns = strtoull(PQgetvalue(r, i, 3), NULL, 10) * 1000;
		l->started_ns = strtoull(PQgetvalue(r, i, 4), NULL, 10) * 1000;
		l->token = (uint64_t)strtoll(PQgetvalue(r, i, 5), NULL, 10);
	}
	PQclear(r);
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

int mesh_pg_renew(struct mesh_pg *pg, uint64_t cid, uint64_t token, uint64_t ttl_ns, uint64_t *deadline_ns)
{
	char ctext[24], ttext[24], ltext[24];
	const char *vals[4] = {pg->idtext, ctext, ttext, ltext};
	PGresult *r;
	int rc = 0;
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	snprintf(ttext, sizeof ttext, "%" PRId64, (int64_t)token);
	snprintf(ltext, sizeof ltext, "%" PRIu64, ttl_ns / 1000);
	pthread_mutex_lock(&pg->mu);
	/* A hand-back (a deadline under a millisecond away) wakes the idle.
	 * Committed without waiting for the WAL flush, as a lease is: a
	 * driver renews each running chunk every quarter of its TTL, one
	 * call after another on its loop's thread, and a flush each (64
	 * chunks, a TTL of 1 s: 256 a second) left it no time for its chunks
	 * on a busy disk.  A renew lost in a database crash leaves the older
	 * deadline: the chunk is taken over sooner, and the first completion
	 * still wins. */
	r = query(pg, ttl_ns < MESH_NS_PER_MS ? PREP_HANDBACK : PREP_RENEW,
	      ttl_ns < MESH_NS_PER_MS
		      ? "SELECT d, pg_notify('mesh', $1::text), set_config('synchronous_commit', 'off', true)"
			" FROM (SELECT mesh.renew($1, $2, $3, $4) AS d) x WHERE d IS NOT NULL"
		      : "SELECT d, set_config('synchronous_commit', 'off', true)"
			" FROM (SELECT mesh.renew($1, $2, $3, $4) AS d) x WHERE d IS NOT NULL",
	      4, vals, &rc);
	if (r && PQntuples(r) == 1)
		*deadline_ns = strtoull(PQgetvalue(r, 0, 0), NULL, 10) * 1000;
	else if (r)
		rc = MESH_E_STATE;
	PQclear(r);
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

struct pos {
	uint64_t cid;
	size_t at; /* index into the flat results */
};
static int cmp_pos(const void *a, const void *b)
{
	const struct pos *x = a, *y = b;
	return x->cid < y->cid ? -1 : x->cid > y->cid ? 1 : (x->at > y->at) - (x->at < y->at);
}

/* One commit's DONE bits, over every batch of its list. */
struct words {
	size_t total, nw; /* places in the batches; distinct words */
	uint64_t busy_us; /* the batches' durations */
	struct pos *ps;	  /* every place, by cid */
	uint64_t *mask;	  /* per word: its bits sent, then those this commit set first */
	int *flat;	  /* per place, in the batches' order: 0 DONE, 1 a duplicate */
	char *ws, *ms;	  /* the words and their masks as the text of a bigint[] */
};

/* Space for w->total places.  0, or -ENOMEM (then what was allocated is
 * for words_free). */
static int words_alloc(struct words *w)
{
	w->ps = malloc((w->total + 1) * sizeof *w->ps);
	w->flat = malloc((w->total + 1) * sizeof *w->flat);
	w->ws = malloc(w->total * 21 + 3);
	w->ms = malloc(w->total * 21 + 3);
	w->mask = malloc((w->total + 1) * sizeof *w->mask);
	return w->ps && w->flat && w->ws && w->ms && w->mask ? 0 : -ENOMEM;
}

static void words_free(struct words *w)
{
	free(w->ps);
	free(w->flat);
	free(w->ws);
	free(w->ms);
	free(w->mask);
}

/* The places of list's chunks sorted by cid, and the distinct words in
 * ascending order with their masks, also as text. */
static void words_of(struct words *w, const struct cbatch *list)
{
	size_t k = 0;
	for (const struct cbatch *b = list; b; b = b->next)
		for (size_t i = 0; i < b->n; i++, k++) {
			w->ps[k].cid = b->cids[i];
			w->ps[k].at = k;
		}
	qsort(w->ps, w->total, sizeof *w->ps, cmp_pos);
	/* the words' masks (ps is sorted: a word's chunks are together) */
	for (size_t i = 0; i < w->total; i++) {
		if (!i || w->ps[i - 1].cid / 64 != w->ps[i].cid / 64)
			w->mask[w->nw++] = 0;
		w->mask[w->nw - 1] |= 1ull << (w->ps[i].cid % 64);
	}
	size_t wl = 1, ml = 1;
	w->ws[0] = w->ms[0] = '{';
	for (size_t i = 0, n = 0; n < w->nw; i++) {
		if (i && w->ps[i - 1].cid / 64 == w->ps[i].cid / 64)
			continue;
		wl += (size_t)sprintf(w->ws + wl, "%s%" PRIu64, n ? "," : "", w->ps[i].cid / 64);
		ml += (size_t)sprintf(w->ms + ml, "%s%" PRId64, n ? "," : "", (int64_t)w->mask[n]);
		n++;
	}
	memcpy(w->ws + wl, "}", 2);
	memcpy(w->ms + ml, "}", 2);
}

/* Sends the words and their masks in one statement, with the node's
 * chunks and busy time, on the commit connection when there is one (else
 * on the main one, under pg->mu); w->mask becomes the bits this commit
 * set first.  0, the query's error, or MESH_E_PROTO (said in pg's error)
 * for an answer that is not a subset of a word's bits sent. */
static int words_commit(struct mesh_pg *pg, struct words *w)
{
	int rc = 0;
	char ntext[24], btext[24], htext[24];
	snprintf(ntext, sizeof ntext, "%zu", w->total);
	snprintf(btext, sizeof btext, "%" PRIu64, w->busy_us);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	const char *vals[6] = {pg->idtext, w->ws, w->ms, ntext, btext, htext};
	pthread_mutex_lock(&pg->cmu);
	PGconn *cc = pg->cconn;
	pthread_mutex_unlock(&pg->cmu);
	if (!cc)
		pthread_mutex_lock(&pg->mu);
	/* The node's speed rides in the same statement (no round trip).  A
	 * WITH the query does not read runs after it: the node's row is
	 * locked after the words and blocks, mesh.spec_complete's order. */
	PGresult *r = query_on(pg, cc ? cc : pg->conn, cc ? &pg->cprepared : &pg->prepared, PREP_COMPLETE,
				 "WITH nb AS (UPDATE mesh.nodes SET chunks = chunks + $4, busy_us = busy_us + $5,"
				 " beat = mesh.now_us() WHERE holder = $6)"
				 " SELECT * FROM mesh.complete_words($1, $2::bigint[], $3::bigint[], $6, $4)",
				 6, vals, &rc);
	if (r && (size_t)PQntuples(r) != w->nw)
		rc = MESH_E_PROTO;
	for (size_t i = 0; r && !rc && i < w->nw; i++) {
		/* the bits set first: a subset of what was sent */
		char *end;
		errno = 0;
		uint64_t f = (uint64_t)strtoll(PQgetvalue(r, (int)i, 0), &end, 10);
		if (errno || *end || (f & ~w->mask[i]))
			rc = MESH_E_PROTO;
		w->mask[i] = f;
	}
	if (r && rc == MESH_E_PROTO)
		set_err(pg, "mesh.complete_words answered other than one word of bits a word sent");
	PQclear(r);
	if (!cc)
		pthread_mutex_unlock(&pg->mu);
	return rc;
}

/* Each place's answer after the commit: a chunk's first place is DONE
 * when its bit is among those this commit set first, and every other
 * place is a duplicate. */
static void words_answer(struct words *w)
{
	for (size_t i = 0, n = 0; i < w->total; i++) {
		if (i && w->ps[i - 1].cid / 64 != w->ps[i].cid / 64)
			n++;
		uint64_t bit = 1ull << (w->ps[i].cid % 64);
		int first = !i || w->ps[i - 1].cid != w->ps[i].cid;
		w->flat[w->ps[i].at] = first && (w->mask[n] & bit) ? 0 : 1;
	}
}

/* One commit for every batch in list (pg->mu not held).  What goes to
 * the database is the DONE bits, a word (64 chunks) at a time: the
 * distinct words in ascending order (one lock order for every
 * committer) and their masks; it answers each word's bits that this
 * commit set first.  A chunk's first place in the batches is DONE when
 * its bit is among those, and every other place is a duplicate. */
static void complete_batches(struct mesh_pg *pg, struct cbatch *list)
{
	struct words w = {0};
	size_t k = 0;
	int rc;
	for (struct cbatch *b = list; b; b = b->next) {
		w.total += b->n;
		for (size_t i = 0; b->durs && i < b->n; i++)
			w.busy_us += b->durs[i] / 1000;
	}
	rc = words_alloc(&w);
	if (!rc) {
		words_of(&w, list);
		rc = words_commit(pg, &w);
	}
	if (!rc)
		words_answer(&w);
	for (struct cbatch *b = list; b; b = b->next) {
		for (size_t i = 0; i < b->n; i++, k++)
			b->results[i] = rc ? rc : w.flat[k];
		b->rc = rc;
	}
	words_free(&w);
}

int mesh_pg_complete(struct mesh_pg *pg, const uint64_t *cids, const uint64_t *durs_ns, size_t n, int *results)
{
	struct cbatch me = {cids, durs_ns, n, results, 0, 0, NULL};
	if (!n)
		return 0;
	pthread_mutex_lock(&pg->cmu);
	me.next = pg->queue;
	pg->queue = &me;
	while (!me.done) {
		if (!pg->leader) {
			struct cbatch *list = pg->queue;
			pg->queue = NULL;
			pg->leader = 1;
			pthread_mutex_unlock(&pg->cmu);
			complete_batches(pg, list);
			pthread_mutex_lock(&pg->cmu);
			for (struct cbatch *b = list; b; b = b->next)
				b->done = 1;
			pg->leader = 0;
			pthread_cond_broadcast(&pg->ccv);
		} else {
			pthread_cond_wait(&pg->ccv, &pg->cmu);
		}
	}
	pthread_mutex_unlock(&pg->cmu);
	return me.rc;
}

PGresult *mesh__pg_qlp(struct mesh_pg *pg, int slot, const char *sql, int n, const char *const *vals, int *rc)
{
	pthread_mutex_lock(&pg->mu);
	PGresult *r = query(pg, slot, sql, n, vals, rc);
	pthread_mutex_unlock(&pg->mu);
	return r;
}

PGresult *mesh__pg_ql(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, int *rc)
{
	return mesh__pg_qlp(pg, -1, sql, n, vals, rc);
}

int mesh__pg_q1(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, char *buf, size_t cap)
{
	int rc = 0;
	PGresult *r = mesh__pg_ql(pg, sql, n, vals, &rc);
	if (r && PQntuples(r) >= 1 && PQnfields(r) >= 1)
		snprintf(buf, cap, "%s", PQgetisnull(r, 0, 0) ? "" : PQgetvalue(r, 0, 0));
	else if (r)
		buf[0] = 0;
	PQclear(r);
	return rc;
}

int mesh_pg_fail(struct mesh_pg *pg, uint64_t cid, int status, uint32_t max_attempts)
{
	char ctext[24], stext[24], mtext[24], htext[24], out[8];
	const char *vals[5] = {pg->idtext, ctext, stext, mtext, htext};
	int rc;
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	snprintf(stext, sizeof stext, "%d", status);
	snprintf(mtext, sizeof mtext, "%" PRIu32, max_attempts);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	rc = mesh__pg_q1(pg, "SELECT mesh.fail($1, $2, $3, $4, $5)", 5, vals, out, sizeof out);
	return rc ? rc : out[0] == 't';
}

int mesh_pg_retry(struct mesh_pg *pg, uint64_t cid)
{
	char ctext[24], out[24];
	const char *vals[2] = {pg->idtext, ctext};
	int rc;
	snprintf(ctext, sizeof ctext, "%" PRId64, cid == UINT64_MAX ? (int64_t)-1 : (int64_t)cid);
	rc = mesh__pg_q1(pg,
		"WITH u AS (UPDATE mesh.chunks SET state = 'p', base = fails WHERE job = $1 AND state = 'b'"
		" AND ($2 < 0 OR cid = $2) RETURNING 1) SELECT count(*) FROM u",
		2, vals, out, sizeof out);
	return rc ? rc : atoi(out);
}

int mesh_pg_status(struct mesh_pg *pg, struct mesh_pg_status *st)
{
	const char *vals[1] = {pg->idtext};
	PGresult *r;
	int rc = 0;
	memset(st, 0, sizeof *st);
	pthread_mutex_lock(&pg->mu);
	r = mesh__pg_q(pg, SQL_STATUS, 1, vals, &rc);
	if (r && PQntuples(r) == 1) {
		uint64_t *f[7] = {&st->n, &st->done, &st->dups, &st->failed, &st->leased, &st->buried, &st->spec_wins};
		for (int i = 0; i < 7; i++)
			*f[i] = strtoull(PQgetvalue(r, 0, i), NULL, 10);
	} else if (r) {
		rc = MESH_E_NOJOB;
	}
	PQclear(r);
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

int mesh_pg_is_done(struct mesh_pg *pg, uint64_t cid)
{
	char ctext[24], out[8];
	const char *vals[2] = {pg->idtext, ctext};
	int rc;
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	rc = mesh__pg_q1(pg, "SELECT mesh.is_done($1, $2)", 2, vals, out, sizeof out);
	return rc ? rc : out[0] == 't';
}

int mesh_pg_failures(struct mesh_pg *pg, void (*fn)(const struct mesh_pg_failure *, void *), void *arg)
{
	const char *vals[1] = {pg->idtext};
	PGresult *r;
	int rc = 0;
	r = mesh__pg_ql(pg,
	      "SELECT cid, fails, coalesce(last_status, 0), state = 'b' FROM mesh.chunks"
	      " WHERE job = $1 AND fails > 0 ORDER BY cid",
	      1, vals, &rc);
	for (int i = 0; r && i < PQntuples(r); i++) {
		struct mesh_pg_failure f = {strtoull(PQgetvalue(r, i, 0), NULL, 10),
					    (uint32_t)strtoul(PQgetvalue(r, i, 1), NULL, 10), atoi(PQgetvalue(r, i, 2)),
					    PQgetvalue(r, i, 3)[0] == 't'};
		fn(&f, arg);
	}
	PQclear(r);
	return rc;
}

int mesh_pg_done_words(struct mesh_pg *pg, void (*fn)(uint64_t w, uint64_t bits, void *), void *arg)
{
	const char *vals[1] = {pg->idtext};
	PGresult *r;
	int rc = 0;
	r = mesh__pg_ql(pg, "SELECT w, bits FROM mesh.done_words WHERE job = $1 AND bits <> 0 ORDER BY w", 1, vals, &rc);
	/* fn runs without the connection's lock: it may call the store. */
	for (int i = 0; r && i < PQntuples(r); i++)
		fn(strtoull(PQgetvalue(r, i, 0), NULL, 10), (uint64_t)strtoll(PQgetvalue(r, i, 1), NULL, 10), arg);
	PQclear(r);
	return rc;
}

int mesh_pg_release_mine(struct mesh_pg *pg)
{
	char htext[24], out[8];
	const char *vals[2] = {pg->idtext, htext};
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	return mesh__pg_q1(pg, "SELECT mesh.release($1, $2)", 2, vals, out, sizeof out);
}

/* One statement (or several, or only comments) of the schema: 0, or
 * MESH_E_PROTO with the server's words in why. */
static int schema_exec(PGconn *c, const char *sql, char *why, size_t whycap)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	int rc = 0;
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
		set_why(why, whycap, PQerrorMessage(c));
		rc = MESH_E_PROTO;
	}
	PQclear(r);
	return rc;
}

/* Takes the schema from version v to this mesh's in one transaction:
 * the steps it lacks (tables), this version's functions, the number. */
static int migrate(PGconn *c, int v, char *why, size_t whycap)
{
	char sql[64];
	int rc = schema_exec(c, "BEGIN", why, whycap);
	for (; !rc && v < MESH_PG_SCHEMA_VERSION; v++)
		rc = schema_exec(c, mesh__pg_steps[v], why, whycap);
	if (!rc)
		rc = schema_exec(c, mesh__pg_functions, why, whycap);
	snprintf(sql, sizeof sql, "UPDATE mesh.meta SET version = %d", MESH_PG_SCHEMA_VERSION);
	if (!rc)
		rc = schema_exec(c, sql, why, whycap);
	if (!rc)
		return schema_exec(c, "COMMIT", why, whycap);
	PQclear(PQexec(c, "ROLLBACK"));
	return rc;
}

int mesh_pg_schema(const char *url, enum mesh_pg_schema_op op, int *found, int *now, char *why, size_t whycap)
{
	char job[MESH_NODE_MAX + 1];
	char *conninfo;
	PGconn *c;
	int rc = 0, v;
	set_why(why, whycap, "");
	*found = *now = 0;
	if (!mesh_pg_url_is(url) || !(conninfo = mesh__pg_conninfo(url, job, sizeof job)))
		return MESH_E_PARSE;
	c = connect_db(conninfo, 1, &rc, why, whycap);
	free(conninfo);
	if (!c)
		return rc;
	/* one migrator at a time */
	PQclear(PQexec(c, "SELECT pg_advisory_lock(7236915)"));
	v = schema_version(c);
	if (v < 0) {
		set_why(why, whycap, v == MESH_E_VERSION ? "the schema 'mesh' in this database is not mesh's"
							  : PQerrorMessage(c));
		rc = v;
	} else {
		*found = *now = v;
		if (v > MESH_PG_SCHEMA_VERSION) {
			set_why(why, whycap, "the mesh schema is newer than this mesh");
			rc = op == MESH_PG_SCHEMA_STATUS ? 0 : MESH_E_VERSION;
		} else if (op == MESH_PG_SCHEMA_INIT && v != 0 && v != MESH_PG_SCHEMA_VERSION) {
			set_why(why, whycap, "the mesh schema is of an older version (run: mesh store migrate URL)");
			rc = MESH_E_VERSION;
		} else if (op != MESH_PG_SCHEMA_STATUS && v < MESH_PG_SCHEMA_VERSION) {
			rc = migrate(c, v, why, whycap);
			if (!rc)
				*now = MESH_PG_SCHEMA_VERSION;
		}
	}
	PQfinish(c);
	return rc;
}
