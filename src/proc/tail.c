#include "proc/proc.h"

#include <stdlib.h>
#include <string.h>

void mesh_proc_tail_reset(struct mesh_proc_tail *t)
{
	t->start = t->n = 0;
	t->cur_len = 0;
}

static void push_line(struct mesh_proc_tail *t)
{
	unsigned i = (t->start + t->n) % MESH_PROC_TAIL_LINES;
	memcpy(t->line[i], t->cur, t->cur_len);
	t->line[i][t->cur_len] = 0;
	if (t->n < MESH_PROC_TAIL_LINES)
		t->n++;
	else
		t->start = (t->start + 1) % MESH_PROC_TAIL_LINES;
	t->cur_len = 0;
}

void mesh_proc_tail_feed(struct mesh_proc_tail *t, const char *data, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)data[i];
		if (ch == '\n')
			push_line(t);
		else if (t->cur_len < MESH_PROC_TAIL_LINE_MAX)
			t->cur[t->cur_len++] = ch < 0x20 && ch != '\t' ? '?' : (char)ch;
	}
	t->cur[t->cur_len] = 0; /* the unfinished line reads as a string */
}

size_t mesh_proc_tail_lines(const struct mesh_proc_tail *t, const char *view[MESH_PROC_TAIL_LINES + 1])
{
	size_t k = 0;
	/* An unfinished last line takes the place of the oldest when full. */
	unsigned skip = t->cur_len && t->n == MESH_PROC_TAIL_LINES ? 1 : 0;
	for (unsigned i = skip; i < t->n; i++)
		view[k++] = t->line[(t->start + i) % MESH_PROC_TAIL_LINES];
	if (t->cur_len)
		view[k++] = t->cur;
	view[k] = NULL;
	return k;
}

char *mesh_proc_tail_text(const struct mesh_proc_tail *t)
{
	const char *view[MESH_PROC_TAIL_LINES + 1];
	size_t k = mesh_proc_tail_lines(t, view), total = 1;
	for (size_t i = 0; i < k; i++)
		total += strlen(view[i]) + 1;
	char *out = malloc(total), *w = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < k; i++) {
		size_t len = strlen(view[i]);
		memcpy(w, view[i], len);
		w += len;
		*w++ = '\n';
	}
	*w = 0;
	return out;
}
