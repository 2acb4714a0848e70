/* Where a chunk's output goes, and the rules that look at outcomes: the
 * joblog, the halt rule, --timeout N%'s median, the start throttles. */
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "exec/input.h"
#include "exec/run_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* -k: past this much held in memory, held outputs go to spill files. */
#define HOLD_MEM_MAX (64u << 20)

int mesh__out_tag(struct mesh__runner *r, struct mesh__slot *s)
{
	uint64_t cid = s->l.cid;
	const char *t = NULL;
	size_t len = 0;
	if (r->o->tagstring) {
		int rc = mesh_exec_template_string(&r->tagtmpl, r->o->input, cid, s->idx, &s->tagbuf);
		if (rc < 0)
			return rc;
		t = s->tagbuf.p, len = s->tagbuf.len;
	} else if (!(t = r->o->input ? mesh_exec_input_line(r->o->input, cid, &len) : NULL)) {
		int n = snprintf(s->tagnum, sizeof s->tagnum, "%" PRIu64, cid);
		t = s->tagnum, len = n > 0 ? (size_t)n : 0;
	}
	s->tag_out = s->tag_err = (struct mesh__tag){t, len, 0};
	return 0;
}

void mesh__out_clear_bar(struct mesh__runner *r)
{
	/* The bar's line is cleared before any output (the terminal may show
	 * both even when the fds differ); the next draw restores it. */
	if (r->drawn) {
		mesh_write_all_raw(r->o->progress_fd, "\r\033[K", 4);
		r->drawn = 0;
	}
}

void mesh__out_failed(struct mesh__runner *r, uint64_t cid, int rc, const char *what)
{
	if (r->fatal)
		return;
	if (rc == -EPIPE) {
		/* The reader is gone (`| head`): end the run as GNU parallel
		 * does, without a word. */
		r->fatal = -EPIPE;
	} else {
		mesh__run_note(r, "mesh: cannot write the %s of chunk %" PRIu64 ": %s", what, cid, mesh_strerror(rc));
		r->fatal = MESH_E_OUTPUT;
	}
	mesh__run_stop_all(r, SIGKILL);
}

static int write_both(struct mesh__runner *r, uint64_t cid, struct mesh__capture *out, struct mesh__capture *err,
		      struct mesh__tag *to, struct mesh__tag *te)
{
	if (out->total || err->total)
		mesh__out_clear_bar(r);
	int rc = mesh__capture_flush(out, r->o->out_fd, to, 0);
	if (rc == 0)
		rc = mesh__capture_flush(err, r->o->err_fd, te, 0);
	else
		mesh__capture_flush(err, -1, NULL, 0);
	if (rc < 0)
		mesh__out_failed(r, cid, rc, "output");
	return rc;
}

static void hold_free(struct mesh__hold *h)
{
	mesh__capture_release(&h->out);
	mesh__capture_release(&h->err);
	free(h->tagtext);
	free(h);
}

static void hold_unlink(struct mesh__runner *r, struct mesh__hold *h)
{
	mesh_list_remove(&r->hold, h, link);
	r->hold_mem -= h->out.mem.len + h->err.mem.len;
}

static int hold(struct mesh__runner *r, struct mesh__slot *s, struct mesh__item *it, int settles)
{
	struct mesh__hold *h = calloc(1, sizeof *h);
	if (!h) {
		if (!r->fatal)
			r->fatal = -ENOMEM;
		return -ENOMEM;
	}
	h->cid = s->l.cid;
	h->it = it;
	h->settles = settles;
	/* The slot's captures move over; the slot starts afresh. */
	h->out = s->cout;
	h->err = s->cerr;
	s->cout = (struct mesh__capture)MESH__CAPTURE_INIT;
	s->cerr = (struct mesh__capture)MESH__CAPTURE_INIT;
	s->cout.dir = s->cerr.dir = r->tmpdir;
	if (r->o->tag) {
		/* the slot's text goes on to its next attempt: a copy */
		if (!(h->tagtext = malloc(s->tag_out.n + 1))) {
			h->it = NULL;
			hold_free(h);
			if (!r->fatal)
				r->fatal = -ENOMEM;
			return -ENOMEM;
		}
		memcpy(h->tagtext, s->tag_out.p, s->tag_out.n);
		h->tag_out = h->tag_err = (struct mesh__tag){h->tagtext, s->tag_out.n, 0};
	}
	size_t mem = h->out.mem.len + h->err.mem.len;
	if (r->hold_mem + mem > HOLD_MEM_MAX) {
		int rc = mesh__capture_spill(&h->out);
		if (rc == 0)
			rc = mesh__capture_spill(&h->err);
		if (rc < 0) {
			mesh__run_note(r, "mesh: chunk %" PRIu64 ": cannot keep the output in %s: %s", h->cid,
				       h->out.spill_dir ? h->out.spill_dir : h->err.spill_dir, mesh_strerror(rc));
			h->it = NULL;
			hold_free(h);
			if (!r->fatal) {
				r->fatal = MESH_E_OUTPUT;
				mesh__run_stop_all(r, SIGKILL);
			}
			return rc;
		}
		mem = 0;
	}
	r->hold_mem += mem;
	/* Chunks end roughly in order: look from the tail. */
	struct mesh__hold *p = r->hold.tail;
	while (p && p->cid > h->cid)
		p = p->link.prev;
	mesh_list_insert_after(&r->hold, p, h, link);
	return 1;
}

int mesh__out_finished(struct mesh__runner *r, struct mesh__slot *s, struct mesh__item *it, int settles)
{
	if (r->o->keep_order && !r->o->line_buffer && !r->o->ungroup) {
		int rc = hold(r, s, it, settles);
		if (rc == 1)
			mesh__out_emit_ready(r, 0);
		return rc;
	}
	struct mesh__tag to = s->tag_out, te = s->tag_err;
	return write_both(r, s->l.cid, &s->cout, &s->cerr, &to, &te);
}

void mesh__out_settle(struct mesh__runner *r, uint64_t cid)
{
	if (r->settled && cid < r->n)
		r->settled[cid / 8] |= (unsigned char)(1u << (cid % 8));
}

static int settled(struct mesh__runner *r, uint64_t cid)
{
	if (r->settled[cid / 8] & (1u << (cid % 8)))
		return 1;
	return mesh_job_is_done(r->job, cid) == 1;
}

void mesh__out_emit_ready(struct mesh__runner *r, int force)
{
	struct mesh__hold *h;
	while ((h = r->hold.head) && !r->fatal) {
		/* Its turn comes once every chunk before it is settled: DONE
		 * (its output out) or buried. */
		while (!force && r->next_cid < h->cid && settled(r, r->next_cid))
			r->next_cid++;
		if (!force && r->next_cid < h->cid)
			return;
		hold_unlink(r, h);
		if (write_both(r, h->cid, &h->out, &h->err, &h->tag_out, &h->tag_err) < 0) {
			if (h->it) {
				mesh_job_renew(h->it->jh, &h->it->l, 1);
				mesh__run_item_free(h->it);
			}
		} else {
			if (h->it)
				mesh__run_queue(r, h->it);
			if (h->settles && r->next_cid <= h->cid)
				r->next_cid = h->cid + 1;
		}
		hold_free(h);
	}
}

void mesh__out_hold_renew(struct mesh__runner *r, uint64_t now)
{
	if (!r->hold.head || now < r->hold_renew)
		return;
	r->hold_renew = now + r->ttl / 4;
	for (struct mesh__hold *h = r->hold.head; h; h = h->link.next)
		if (h->it && h->it->complete)
			mesh_job_renew(h->it->jh, &h->it->l, r->ttl);
}

void mesh__out_hold_drop(struct mesh__runner *r)
{
	struct mesh__hold *h;
	while ((h = r->hold.head)) {
		hold_unlink(r, h);
		if (h->it) {
			/* Not written, so not DONE: a rerun takes it at once. */
			if (h->it->complete)
				mesh_job_renew(h->it->jh, &h->it->l, 1);
			mesh__run_item_free(h->it);
		}
		hold_free(h);
	}
}

/* ---- the joblog (GNU parallel's columns) ---- */

int mesh__out_joblog_open(struct mesh__runner *r)
{
	static const char head[] = "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand\n";
	struct stat st;
	int mode = r->o->joblog_mode;
	if (!r->o->joblog)
		return 0;
	r->joblog = open(r->o->joblog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (mode == MESH_EXEC_JOBLOG_NEW ? O_TRUNC : 0),
			 0644);
	if (r->joblog < 0 || fstat(r->joblog, &st) < 0)
		return -errno;
	/* GNU parallel writes no header in a +FILE, new or not */
	if (st.st_size == 0 && mode != MESH_EXEC_JOBLOG_PLUS)
		return mesh_write_all_raw(r->joblog, head, sizeof head - 1);
	return 0;
}

void mesh__out_joblog(struct mesh__runner *r, struct mesh__slot *s, int code, uint64_t dur)
{
	if (r->joblog < 0 || r->fatal)
		return;
	int exitval = code, sig = 0;
	if (s->why == END_TIMEOUT) {
		exitval = -1;
		sig = SIGKILL;
	} else if (s->res.signal) {
		exitval = 0;
		sig = s->res.signal;
	}
	struct mesh_buf b = MESH_BUF_INIT, cmd = MESH_BUF_INIT;
	int rc = mesh_exec_template_render(&r->tmpl, r->o->input, s->l.cid, s->idx, &cmd);
	if (rc == 0)
		rc = mesh_buf_addf(&b, "%" PRIu64 "\t:\t%.3f\t%10.3f\t0\t%" PRIu64 "\t%d\t%d\t%s\n", s->l.cid + 1,
				   (double)s->wall_start / 1e9, (double)dur / 1e9, s->recv, exitval, sig, cmd.p);
	if (rc == 0)
		rc = mesh_write_all_raw(r->joblog, b.p, b.len);
	mesh_buf_release(&b);
	mesh_buf_release(&cmd);
	if (rc < 0 && !r->fatal) {
		mesh__run_note(r, "mesh: cannot write the joblog %s: %s", r->o->joblog, mesh_strerror(rc));
		r->fatal = MESH_E_OUTPUT;
		mesh__run_stop_all(r, SIGKILL);
	}
}

/* ---- the halt rule ---- */

void mesh__out_halt_check(struct mesh__runner *r, int ok, int code)
{
	const struct mesh_exec_opts *o = r->o;
	if (ok)
		r->n_ok++;
	else
		r->n_fail++;
	if (o->halt_mode == MESH_EXEC_HALT_NEVER || r->halted)
		return;
	uint64_t c = o->halt_what == MESH_EXEC_HALT_SUCCESS ? r->n_ok
		     : o->halt_what == MESH_EXEC_HALT_DONE  ? r->n_ok + r->n_fail
							    : r->n_fail;
	if (o->halt_what == MESH_EXEC_HALT_FAIL && ok)
		return;
	if (o->halt_what == MESH_EXEC_HALT_SUCCESS && !ok)
		return;
	int hit = o->halt_percent ? c * 100 >= (uint64_t)o->halt_percent * r->n : o->halt_count && c >= o->halt_count;
	if (!hit)
		return;
	r->halted = 1;
	r->st->halt_status = code;
	r->st->halt_failed = r->n_fail;
	if (o->halt_mode == MESH_EXEC_HALT_NOW)
		mesh__run_stop_all(r, SIGTERM);
}

/* ---- --timeout N%: the median of the done chunks' runtimes ---- */

static void sift_up(uint64_t *h, size_t i, int max)
{
	while (i) {
		size_t p = (i - 1) / 2;
		if (max ? h[p] >= h[i] : h[p] <= h[i])
			break;
		uint64_t t = h[p];
		h[p] = h[i];
		h[i] = t;
		i = p;
	}
}

static void sift_down(uint64_t *h, size_t n, int max)
{
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, b = i;
		if (l < n && (max ? h[l] > h[b] : h[l] < h[b]))
			b = l;
		if (l + 1 < n && (max ? h[l + 1] > h[b] : h[l + 1] < h[b]))
			b = l + 1;
		if (b == i)
			return;
		uint64_t t = h[b];
		h[b] = h[i];
		h[i] = t;
		i = b;
	}
}

static uint64_t heap_pop(uint64_t *h, size_t *n, int max)
{
	uint64_t top = h[0];
	h[0] = h[--*n];
	sift_down(h, *n, max);
	return top;
}

void mesh__out_median_add(struct mesh__runner *r, uint64_t dur)
{
	struct mesh__median *m = &r->med;
	if (m->nlo + 1 > m->cap || m->nhi + 1 > m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 64;
		uint64_t *lo = realloc(m->lo, nc * sizeof *lo);
		if (lo)
			m->lo = lo;
		uint64_t *hi = realloc(m->hi, nc * sizeof *hi);
		if (hi)
			m->hi = hi;
		if (!lo || !hi)
			return; /* the limit stays as it was */
		m->cap = nc;
	}
	if (!m->nlo || dur <= m->lo[0]) {
		m->lo[m->nlo++] = dur;
		sift_up(m->lo, m->nlo - 1, 1);
	} else {
		m->hi[m->nhi++] = dur;
		sift_up(m->hi, m->nhi - 1, 0);
	}
	if (m->nlo > m->nhi + 1) {
		m->hi[m->nhi++] = heap_pop(m->lo, &m->nlo, 1);
		sift_up(m->hi, m->nhi - 1, 0);
	} else if (m->nhi > m->nlo) {
		m->lo[m->nlo++] = heap_pop(m->hi, &m->nhi, 0);
		sift_up(m->lo, m->nlo - 1, 1);
	}
	/* Only once a few chunks are done does a median say anything. */
	if (m->nlo + m->nhi >= 3)
		r->pct_limit = m->lo[0] * r->o->timeout_pct / 100;
}

void mesh__out_median_free(struct mesh__median *m)
{
	free(m->lo);
	free(m->hi);
	memset(m, 0, sizeof *m);
}

/* ---- --load, --memfree ---- */

static int read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

int mesh__out_resources_ok(struct mesh__runner *r)
{
	char buf[4096];
	if (r->o->load_max > 0 && read_small("/proc/loadavg", buf, sizeof buf) == 0 &&
	    strtod(buf, NULL) >= r->o->load_max)
		return 0;
	if (r->o->memfree_bytes && read_small("/proc/meminfo", buf, sizeof buf) == 0) {
		const char *m = strstr(buf, "MemAvailable:");
		if (m && strtoull(m + 13, NULL, 10) * 1024 < r->o->memfree_bytes)
			return 0;
	}
	return 1;
}
