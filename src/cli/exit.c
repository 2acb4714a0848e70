#include "cli/exit.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "exec/runner.h"
#include "job/job.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

int mesh_exit_run(int code)
{
	return code >= MESH_EXIT_USAGE ? code + MESH_EXIT_RUN_SHIFT : code;
}

void mesh_cli_vsay_fail(const char *pre, int err, const char *words, const char *fmt, va_list ap)
{
	fprintf(stderr, "mesh: %s", pre);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, ": %s%s%s\n", mesh_strerror(err), words && *words ? ": " : "", words ? words : "");
}

int mesh_cli_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mesh_cli_vsay_fail("", err, NULL, fmt, ap);
	va_end(ap);
	return mesh_exit_for(err);
}

int mesh_cli_fail_store(int err, const char *words, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mesh_cli_vsay_fail("", err, words, fmt, ap);
	va_end(ap);
	return mesh_exit_for(err);
}

int mesh_cli_identity_damaged(int rc, const char *journal, const struct mesh_job_why *w)
{
	fprintf(stderr,
		"mesh: journal '%s' is damaged at offset %" PRIu64 " (of %" PRIu64
		" bytes), in the records that name its work (SUBMIT, WORK): no repair can keep them. To start "
		"afresh, move it away (`mv %s %s.damaged`): every chunk runs again\n",
		journal, w->damage_off, w->size, journal, journal);
	return mesh_exit_for(rc);
}

/* One set of lines for all of the process's job handles (a run or a
 * harvest may hold two on one store): the outages they are in, the last
 * "still waiting" said (a step of still_step), whether it gave up. */
static _Atomic int store_down, store_said, store_gave_up;

/* "still waiting" at 10 s, 30 s, 1 min, then each minute: the step
 * waited reached. */
static int still_step(uint64_t waited_ns)
{
	uint64_t s = waited_ns / MESH_NS_PER_S;
	return s < 10 ? 0 : s < 30 ? 1 : s < 60 ? 2 : 2 + (int)(s / 60);
}

int mesh_cli_store_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns)
{
	const char *url = arg;
	char waited[32], budget[32], left[32];
	mesh_say_duration(waited, sizeof waited, waited_ns);
	mesh_say_duration(budget, sizeof budget, budget_ns);
	mesh_say_duration(left, sizeof left, budget_ns > waited_ns ? budget_ns - waited_ns : 0);
	switch (state) {
	case MESH_JOB_STORE_STOPPED:
		if (atomic_fetch_add(&store_down, 1) == 0) {
			store_said = 0;
			fprintf(stderr,
				"mesh: the job store '%s' stopped answering (%s); waiting for it up to %s (--store-outage),"
				" this node's leases and output kept\n",
				url, why, budget);
		}
		break;
	case MESH_JOB_STORE_STILL: {
		int step = still_step(waited_ns), said = store_said;
		if (step > said && atomic_compare_exchange_strong(&store_said, &said, step))
			fprintf(stderr, "mesh: the job store '%s' has not answered for %s; waiting %s more\n", url, waited,
				left);
		break;
	}
	case MESH_JOB_STORE_ANSWERS:
		if (atomic_fetch_sub(&store_down, 1) == 1)
			fprintf(stderr, "mesh: the job store '%s' answers again after %s\n", url, waited);
		break;
	case MESH_JOB_STORE_GAVE_UP:
		if (!atomic_exchange(&store_gave_up, 1))
			fprintf(stderr, "mesh: the job store '%s' did not answer for %s (--store-outage): giving up\n", url,
				budget);
		break;
	}
	return mesh_exec_stop_asked();
}

int mesh_cli_store_url_refused(const char *cmd, const char *url)
{
	if (!url || !mesh_job_where_has_password(url))
		return 0;
	return mesh_cli_usage("%s: %s", cmd, mesh_job_password_why());
}

int mesh_cli_usage(const char *fmt, ...)
{
	va_list ap;
	fputs("mesh: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(see `mesh help`)\n", stderr);
	return MESH_EXIT_USAGE;
}

int mesh_cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			return 0;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	}
	return 0;
}

int mesh_cli_option_input(char *const *words, size_t n, const char *sep, const char *where,
			  int (*is_option)(const char *name, size_t len), char *msg, size_t cap)
{
	for (size_t i = 0; i < n; i++) {
		const char *w = words[i];
		if (strncmp(w, "--", 2) || !w[2] || !is_option(w + 2, strcspn(w + 2, "=")))
			continue;
		snprintf(msg, cap,
			 "'%s' after '%s' would be an input, not an option of mesh; put options before %s (or '--' "
			 "before %s if it is an input)",
			 w, sep, where, where);
		return 1;
	}
	return 0;
}
