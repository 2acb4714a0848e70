#include "cli/exit.h"

#include "base/err.h"
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

/* One pair of lines for all of the process's job handles (a run or a
 * harvest may hold two on one store). */
static _Atomic int store_waiting;

void mesh_cli_store_wait(void *arg, int waiting, const char *why)
{
	if (waiting > 0) {
		if (atomic_fetch_add(&store_waiting, 1) == 0)
			fprintf(stderr, "mesh: the job store '%s' stopped answering (%s); reconnecting, for up to 15 s\n",
				(const char *)arg, why);
	} else if (atomic_fetch_sub(&store_waiting, 1) == 1 && waiting == 0) {
		fprintf(stderr, "mesh: the job store '%s' answers again\n", (const char *)arg);
	}
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
