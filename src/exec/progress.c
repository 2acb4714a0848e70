#include "exec/progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void fmt_dur(char *b, size_t cap, double s)
{
	if (s < 0 || s > 359999.0) {
		snprintf(b, cap, "--:--");
		return;
	}
	unsigned long t = (unsigned long)(s + 0.5);
	if (t >= 3600)
		snprintf(b, cap, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(b, cap, "%lu:%02lu", t / 60, t % 60);
}

size_t mesh__progress_format(char *buf, size_t cap, const struct mesh__progress *p)
{
	char tail[160], eta[32];
	if (!cap)
		return 0;
	double secs = (double)p->elapsed_ns / 1e9;
	uint64_t mine = p->done > p->done_at_start ? p->done - p->done_at_start : 0;
	double rate = secs > 0.05 ? (double)mine / secs : 0.0;
	uint64_t left = p->total > p->done ? p->total - p->done : 0;
	if (rate > 0)
		fmt_dur(eta, sizeof eta, (double)left / rate);
	else
		fmt_dur(eta, sizeof eta, -1);
	unsigned pct = p->total ? (unsigned)(p->done * 100 / p->total) : 0;
	int tl = snprintf(tail, sizeof tail, " %" PRIu64 "/%" PRIu64 " %u%%  %.1f/s  ETA %s  %" PRIu64 " %s", p->done,
			  p->total, pct, rate, eta, p->running, p->running_word ? p->running_word : "running");
	if (p->failed && tl > 0 && (size_t)tl < sizeof tail)
		tl += snprintf(tail + tl, sizeof tail - (size_t)tl, "  %" PRIu64 " %s", p->failed,
			       p->failed_word ? p->failed_word : "failed");
	if (tl < 0)
		tl = 0;
	if ((size_t)tl >= sizeof tail)
		tl = (int)sizeof tail - 1;
	unsigned width = p->width ? p->width : 80;
	/* The bar takes what the text leaves, at most 40 columns, at least 10. */
	int bw = (int)width - 1 - tl - 2;
	if (bw > 40)
		bw = 40;
	if (bw < 10)
		bw = 10;
	int fill = p->total ? (int)((double)p->done / (double)p->total * bw) : 0;
	if (fill > bw)
		fill = bw;
	char bar[64 + 32];
	size_t k = 0;
	bar[k++] = '[';
	if (p->color) {
		memcpy(bar + k, "\033[32m", 5);
		k += 5;
	}
	for (int i = 0; i < fill; i++)
		bar[k++] = '#';
	if (p->color) {
		memcpy(bar + k, "\033[0m", 4);
		k += 4;
	}
	for (int i = fill; i < bw; i++)
		bar[k++] = '-';
	bar[k++] = ']';
	bar[k] = 0;
	int n = snprintf(buf, cap, "%s%s", bar, tail);
	if (n < 0)
		return 0;
	return (size_t)n >= cap ? cap - 1 : (size_t)n;
}
