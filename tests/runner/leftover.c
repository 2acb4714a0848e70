#include "runner/leftover.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LIST ".t-leftovers"

void t_leftover_note(const char *kind, const char *what)
{
	const char *dir = getenv("T_DIR");
	char path[4200];
	if (!dir || !*dir)
		return;
	snprintf(path, sizeof path, "%s/" LIST, dir);
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "%s %s\n", kind, what);
	fclose(f);
}

pid_t t_leftover_postmaster(const char *pgdir)
{
	char path[4200], comm[64] = "";
	long pid = 0;
	snprintf(path, sizeof path, "%s/data/postmaster.pid", pgdir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 1)
		return 0;
	snprintf(path, sizeof path, "/proc/%ld/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof comm, f))
		comm[0] = 0;
	fclose(f);
	return strncmp(comm, "postgres", 8) ? 0 : (pid_t)pid;
}

static int gone(pid_t pid, unsigned ms)
{
	for (unsigned i = 0; i < ms / 10; i++) {
		if (kill(pid, 0) < 0 && errno == ESRCH)
			return 1;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return kill(pid, 0) < 0 && errno == ESRCH;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(p);
	return 0;
}

static int reap_pg(const char *pgdir)
{
	char top[4200];
	pid_t pid = t_leftover_postmaster(pgdir);
	if (pid > 0) {
		/* Its backends follow the postmaster out (they watch it). */
		kill(pid, SIGQUIT);
		if (!gone(pid, 5000)) {
			kill(pid, SIGKILL);
			gone(pid, 2000);
		}
	}
	/* The store harness's layout: /tmp/mesh-pg-XXXXXX/pg. */
	snprintf(top, sizeof top, "%s", pgdir);
	char *slash = strrchr(top, '/');
	if (slash && !strcmp(slash, "/pg") && !strncmp(top, "/tmp/mesh-pg-", 13)) {
		*slash = 0;
		nftw(top, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
	return pid > 0;
}

static int reap_netns(const char *name)
{
	char path[300], cmd[300];
	struct stat st;
	snprintf(path, sizeof path, "/run/netns/%s", name);
	if (stat(path, &st) < 0)
		return 0;
	snprintf(cmd, sizeof cmd, "ip netns del '%s' 2>/dev/null", name);
	return system(cmd) == 0;
}

int t_leftover_reap(const char *dir)
{
	char path[4200], line[4400];
	int n = 0;
	snprintf(path, sizeof path, "%s/" LIST, dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *what = strchr(line, ' ');
		if (!what)
			continue;
		*what++ = 0;
		if (!strcmp(line, "pg"))
			n += reap_pg(what);
		else if (!strcmp(line, "netns") && !strchr(what, '\''))
			n += reap_netns(what);
	}
	fclose(f);
	return n;
}
