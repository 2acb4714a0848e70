#include "cli/exit.h"

#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int mesh_exit_run(int code)
{
	return code >= MESH_EXIT_USAGE ? code + MESH_EXIT_RUN_SHIFT : code;
}

int mesh_cli_fail(int err, const char *fmt, ...)
{
	va_list ap;
	fputs("mesh: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", mesh_strerror(err));
	return mesh_exit_for(err);
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
