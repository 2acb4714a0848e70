/* What the job homes (home_file.c, home_pg.c) share. */
#include "job/home.h"

#include <stdarg.h>
#include <stdio.h>

void mesh__home_note(struct mesh_home *h, int level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	if (!h->ev.note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	h->ev.note(h->ev.arg, level, msg);
}
