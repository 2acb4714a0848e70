#include "proc/proc.h"

#include "base/buf.h"
#include "base/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The fields of /proc/<pid>/stat that are used here. */
struct stat_fields {
	pid_t pid, ppid, pgid, sid;
	unsigned long long utime, stime, cutime, cstime, rsspages;
};

static int read_stat(pid_t pid, struct stat_fields *f)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	int e = errno;
	close(fd);
	if (n <= 0)
		return n < 0 ? -e : -ENOENT;
	buf[n] = 0;
	/* The command name may hold spaces and ')': fields start after the last ')'. */
	char *s = strrchr(buf, ')');
	if (!s || s[1] != ' ')
		return MESH_E_PARSE;
	s += 2;
	memset(f, 0, sizeof *f);
	f->pid = pid;
	/* s is field 3 (state); ppid 4, pgrp 5, session 6, utime 14, stime 15,
	 * cutime 16, cstime 17, rss 24 (pages). */
	int field = 3;
	char *save = NULL;
	for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
		unsigned long long v = strtoull(tok, NULL, 10);
		switch (field) {
		case 4: f->ppid = (pid_t)v; break;
		case 5: f->pgid = (pid_t)v; break;
		case 6: f->sid = (pid_t)v; break;
		case 14: f->utime = v; break;
		case 15: f->stime = v; break;
		case 16: f->cutime = v; break;
		case 17: f->cstime = v; break;
		case 24: f->rsspages = v; return 0;
		}
	}
	return MESH_E_PARSE;
}

static uint64_t ticks_ns(unsigned long long t)
{
	static long tick;
	if (!tick)
		tick = sysconf(_SC_CLK_TCK);
	return t * (1000000000ull / (unsigned long long)(tick > 0 ? tick : 100));
}

static uint64_t pages_bytes(unsigned long long p)
{
	static long page;
	if (!page)
		page = sysconf(_SC_PAGESIZE);
	return p * (unsigned long long)(page > 0 ? page : 4096);
}

struct mesh_proc_table {
	struct stat_fields *e;
	size_t n, cap;
};

int mesh_proc_table_read(struct mesh_proc_table **out)
{
	struct mesh_proc_table *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	DIR *d = opendir("/proc");
	if (!d) {
		int e = -errno;
		free(t);
		return e;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		struct stat_fields *ne = mesh_grow(t->e, &t->cap, t->n + 1, sizeof *ne);
		if (!ne) {
			closedir(d);
			mesh_proc_table_free(t);
			return -ENOMEM;
		}
		t->e = ne;
		/* A process gone since readdir is simply not in the table. */
		if (read_stat((pid_t)atoi(de->d_name), &t->e[t->n]) == 0)
			t->n++;
	}
	closedir(d);
	*out = t;
	return 0;
}

void mesh_proc_table_free(struct mesh_proc_table *t)
{
	if (!t)
		return;
	free(t->e);
	free(t);
}

/* Marks in[i] for what c contains as of t: 1 a process of it, 2 mesh-init
 * (PIDNS).  0, or -ESRCH when the program is not there. */
static int mark(const struct mesh_proc_table *t, const struct mesh_proc_child *c, unsigned char *in)
{
	int ns = c->how == MESH_PROC_HOW_PIDNS;
	pid_t root = ns ? c->init : c->pid;
	int found = 0;
	for (size_t i = 0; i < t->n; i++) {
		const struct stat_fields *f = &t->e[i];
		if (f->pid == root) {
			found = 1;
			/* mesh-init is ours, not the worker's: only what it
			 * reaped (the namespace's orphans) counts. */
			in[i] = ns ? 2 : 1;
		} else if (!ns && (f->sid == root || f->pgid == root)) {
			in[i] = 1;
		}
	}
	if (!found)
		return -ESRCH;
	/* Descendants: a pass a generation. */
	for (int more = 1; more;) {
		more = 0;
		for (size_t i = 0; i < t->n; i++) {
			if (in[i])
				continue;
			for (size_t k = 0; k < t->n; k++)
				if (in[k] && t->e[k].pid == t->e[i].ppid) {
					in[i] = 1;
					more = 1;
					break;
				}
		}
	}
	return 0;
}

int mesh_proc_table_sum(const struct mesh_proc_table *t, const struct mesh_proc_child *c, struct mesh_proc_usage *u)
{
	*u = (struct mesh_proc_usage){0};
	unsigned char *in = calloc(t->n ? t->n : 1, 1);
	if (!in)
		return -ENOMEM;
	int rc = mark(t, c, in);
	if (rc) {
		free(in);
		return rc;
	}
	for (size_t i = 0; i < t->n; i++) {
		const struct stat_fields *f = &t->e[i];
		if (in[i] == 2) {
			u->cpu_ns += ticks_ns(f->cutime + f->cstime);
		} else if (in[i]) {
			u->cpu_ns += ticks_ns(f->utime + f->stime + f->cutime + f->cstime);
			u->rss += pages_bytes(f->rsspages);
			u->procs++;
		}
	}
	free(in);
	return 0;
}

int mesh_proc_table_pids(const struct mesh_proc_table *t, const struct mesh_proc_child *c, pid_t *pids, size_t cap,
			 size_t *n)
{
	*n = 0;
	unsigned char *in = calloc(t->n ? t->n : 1, 1);
	if (!in)
		return -ENOMEM;
	int rc = mark(t, c, in);
	for (size_t i = 0; rc == 0 && i < t->n; i++)
		if (in[i] == 1) {
			if (*n < cap)
				pids[*n] = t->e[i].pid;
			(*n)++;
		}
	free(in);
	return rc;
}
