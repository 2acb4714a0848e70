/* Helpers shared by the containment tests (test_host_contain.c,
 * test_meshd_contain.c, test_proc_pidns.c): a pid a program wrote to a file,
 * and whether a pid is gone.  Header-only (static inline). */
#ifndef MESH_TESTS_CONTAIN_T_H
#define MESH_TESTS_CONTAIN_T_H

#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Whether the file at path (a char *) exists and is not empty: a t_wait_for
 * condition. */
static inline int contain_t_has_file(void *path)
{
	struct stat st;
	return stat(path, &st) == 0 && st.st_size > 0;
}

/* The pid written to path once it is there (waiting up to ms), or -1. */
static inline pid_t contain_t_read_pid(const char *path, unsigned ms)
{
	if (!t_wait_for(contain_t_has_file, (void *)path, ms))
		return -1;
	char *s = t_read_file(path, NULL);
	pid_t p = s ? atoi(s) : -1;
	free(s);
	return p;
}

/* Whether the process *(pid_t *)arg is gone: no /proc entry, or a zombie
 * (it holds nothing any more).  A t_wait_for condition. */
static inline int contain_t_gone(void *arg)
{
	pid_t pid = *(pid_t *)arg;
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	char *st = t_read_file(p, NULL);
	const char *rp = st ? strrchr(st, ')') : NULL;
	int g = !st || (rp && (rp[2] == 'Z' || rp[2] == 'X'));
	free(st);
	return g;
}

#endif
