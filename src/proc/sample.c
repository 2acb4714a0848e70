#include "proc/proc.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mesh_proc_sample(pid_t pid, uint64_t *cpu_ns, uint64_t *rss)
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
	if (!s)
		return MESH_E_PARSE;
	s += 2;
	/* s is field 3 (state); utime is 14, stime 15, rss 24 (pages). */
	unsigned long long utime = 0, stime = 0, rsspages = 0;
	int field = 3;
	char *save = NULL;
	for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
		if (field == 14)
			utime = strtoull(tok, NULL, 10);
		else if (field == 15)
			stime = strtoull(tok, NULL, 10);
		else if (field == 24) {
			rsspages = strtoull(tok, NULL, 10);
			break;
		}
	}
	if (field != 24)
		return MESH_E_PARSE;
	static long tick, page;
	if (!tick)
		tick = sysconf(_SC_CLK_TCK);
	if (!page)
		page = sysconf(_SC_PAGESIZE);
	*cpu_ns = (utime + stime) * (1000000000ull / (unsigned long long)(tick > 0 ? tick : 100));
	*rss = rsspages * (unsigned long long)(page > 0 ? page : 4096);
	return 0;
}
