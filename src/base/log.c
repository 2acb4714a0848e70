#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "mesh";
static enum mesh_log_level log_min = MESH_LOG_INFO;

void mesh_log_init(const char *prog, enum mesh_log_level min)
{
	log_prog = prog;
	log_min = min;
}

void mesh_log(enum mesh_log_level lvl, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	char line[2048];
	struct timeval tv;
	struct tm tm;
	va_list ap;
	int n;
	if (lvl < log_min)
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s ", tm.tm_year + 1900,
		     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec / 1000, log_prog,
		     (int)getpid(), names[lvl]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	/* One line, one write: no newline inside a record. */
	for (int i = 0; i < n; i++)
		if (line[i] == '\n')
			line[i] = ' ';
	line[n++] = '\n';
	ssize_t w = write(2, line, (size_t)n);
	(void)w;
}
