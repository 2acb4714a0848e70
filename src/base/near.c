/* "Did you mean" over a help text's options. */
#include "base/near.h"
#include "base/buf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned mesh_edit_distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	unsigned d[40][40];
	if (n >= 40 || m >= 40)
		return 4;
	for (size_t i = 0; i <= n; i++)
		for (size_t j = 0; j <= m; j++) {
			unsigned v = i && j ? d[i - 1][j - 1] + (a[i - 1] != b[j - 1]) : (unsigned)(i + j);
			if (i && d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (j && d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[n][m] > 3 ? 4 : d[n][m];
}

void mesh_word_set_add(struct mesh_buf *set, const char *word, size_t n)
{
	for (const char *p = set->p; p && p < set->p + set->len;) {
		const char *sp = memchr(p, ' ', (size_t)(set->p + set->len - p));
		if ((size_t)(sp - p) == n && !memcmp(p, word, n))
			return;
		p = sp + 1;
	}
	mesh_buf_add(set, word, n);
	mesh_buf_add(set, " ", 1);
}

/* An option word at s: "--name" ([a-z0-9-], a letter first) or "-x"; its
 * length, 0 when none.  Preceded (by the caller's check) by a space, '[',
 * '|', '(' or ',', and followed by what ends a word. */
static size_t option_at(const char *s)
{
	size_t n = 0;
	if (s[0] != '-')
		return 0;
	if (s[1] == '-') {
		if (!islower((unsigned char)s[2]))
			return 0;
		for (n = 2; islower((unsigned char)s[n]) || isdigit((unsigned char)s[n]) || s[n] == '-'; n++)
			;
		if (s[n - 1] == '-')
			return 0;
	} else if (isalpha((unsigned char)s[1])) {
		n = 2;
	} else {
		return 0;
	}
	return strchr(" \t\n=]|,)", s[n]) ? n : 0;
}

int mesh_help_options(const char *text, struct mesh_buf *opts)
{
	size_t before = opts->len;
	for (const char *p = text; *p; p++)
		if (*p == '-' && (p == text || strchr(" \t[|(,", p[-1]))) {
			size_t n = option_at(p);
			if (n) {
				mesh_word_set_add(opts, p, n);
				p += n - 1;
			}
		}
	return opts->len >= before ? 0 : -1;
}

const char *mesh_help_nearest_option(const char *text, const char *opt, char *buf, size_t cap)
{
	struct mesh_buf opts = MESH_BUF_INIT;
	char word[64];
	size_t n = strcspn(opt, "="), best = 0, bestlen = 0;
	unsigned bd = n <= 4 ? 2 : 3, ties = 0;
	snprintf(word, sizeof word, "%.*s", (int)(n < sizeof word ? n : sizeof word - 1), opt);
	if (strlen(word) <= 2 || mesh_help_options(text, &opts) < 0) {
		mesh_buf_release(&opts);
		return NULL;
	}
	for (size_t at = 0; at < opts.len;) {
		char *w = opts.p + at, *sp = memchr(w, ' ', opts.len - at);
		size_t wl = (size_t)(sp - w);
		*sp = 0;
		at += wl + 1;
		if (wl <= 2) /* a one-letter option is near too much */
			continue;
		/* a start of one ("--spec"), or a few edits away */
		unsigned d = strlen(word) >= 4 && !strncmp(w, word, strlen(word)) ? 1 : mesh_edit_distance(word, w);
		if (d < bd)
			best = (size_t)(w - opts.p), bestlen = wl, bd = d, ties = 0;
		else if (d == bd && bestlen)
			ties++;
	}
	const char *r = NULL;
	if (bestlen && !ties && cap) {
		snprintf(buf, cap, "%s", opts.p + best);
		r = buf;
	}
	mesh_buf_release(&opts);
	return r;
}
