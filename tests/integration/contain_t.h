/* Helpers shared by the containment and isolation tests
 * (test_host_contain.c, test_meshd_contain.c, test_proc_pidns.c,
 * test_host_user.c, test_meshd_security.c): a pid a program wrote to a file,
 * whether a pid is gone, a log line, a memfd a process holds.  Header-only
 * (static inline). */
#ifndef MESH_TESTS_CONTAIN_T_H
#define MESH_TESTS_CONTAIN_T_H

#include "runner/t.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

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

/* A t_wait_for condition: whether file holds text. */
struct contain_t_log_has {
	const char *file, *text;
};

static inline int contain_t_log_has(void *arg)
{
	struct contain_t_log_has *a = arg;
	char *s = t_read_file(a->file, NULL);
	int ok = s && strstr(s, a->text);
	free(s);
	return ok;
}

/* The first of pid's fds that is a memfd (a slot), or -1. */
static inline int contain_t_memfd_of(pid_t pid)
{
	char p[64], link[256];
	struct dirent *e;
	int found = -1;
	snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(p);
	while (d && found < 0 && (e = readdir(d))) {
		char fp[512];
		snprintf(fp, sizeof fp, "%s/%s", p, e->d_name);
		ssize_t n = readlink(fp, link, sizeof link - 1);
		if (n > 0) {
			link[n] = 0;
			if (strstr(link, "memfd:"))
				found = atoi(e->d_name);
		}
	}
	if (d)
		closedir(d);
	return found;
}

#endif
