#include "cli/exit.h"

#include "base/err.h"
#include "exec/runner.h"
#include "job/job.h"

#include <inttypes.h>
#include <stdarg.h>
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

int mesh_cli_store_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns)
{
	char msg[600];
	if (mesh_job_store_wait_words(state, why, waited_ns, budget_ns, msg, sizeof msg))
		fprintf(stderr, "mesh: the job store '%s' %s\n", (const char *)arg, msg);
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
