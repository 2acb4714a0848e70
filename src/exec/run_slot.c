/* One attempt in a slot, the driver's side: start it on the executor, take
 * its output, and record how it ended (runner.h has the rules). */
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

static void describe(char *b, size_t cap, int code, enum mesh__end_why why)
{
	if (why == END_TIMEOUT)
		snprintf(b, cap, "timeout");
	else if (code > 128 && code < 128 + 65)
		snprintf(b, cap, "signal %d", code - 128);
	else
		snprintf(b, cap, "exit %d", code);
}

void mesh__slot_kill(struct mesh__runner *r, struct mesh__slot *s, int sig)
{
	if (s->busy && !s->exited)
		r->ex->ops->signal(r->ex, s->idx, sig);
}

static void busy_count(struct mesh__runner *r, uint64_t cid, int d)
{
	if (r->busy_by_cid)
		r->busy_by_cid[cid & r->busy_mask] += (uint32_t)d;
}

int mesh__slot_busy_with(const struct mesh__runner *r, uint64_t cid)
{
	return !r->busy_by_cid || r->busy_by_cid[cid & r->busy_mask] != 0;
}

void mesh__slot_clear(struct mesh__runner *r, struct mesh__slot *s)
{
	if (s->busy)
		busy_count(r, s->l.cid, -1);
	if (s->busy && r->ex)
		r->ex->ops->release(r->ex, s->idx);
	if (s->res_out >= 0)
		close(s->res_out);
	if (s->res_err >= 0)
		close(s->res_err);
	s->res_out = s->res_err = -1;
	free(s->res_dir);
	free(s->tmp_out);
	free(s->tmp_err);
	s->res_dir = s->tmp_out = s->tmp_err = NULL;
	free(s->report);
	s->report = NULL;
	s->report_len = 0;
	s->busy = 0;
	s->exited = 0;
	s->term_sent = 0;
	s->lost = 0;
	s->printed = 0;
	s->res = (struct mesh__exec_result){0, 0, 0};
	s->cap_err = 0;
	s->why = END_NORMAL;
}

uint64_t mesh__slot_deadline(const struct mesh__runner *r, const struct mesh__slot *s)
{
	uint64_t d = s->t_deadline;
	if (r->pct_limit && (!d || s->t_start + r->pct_limit < d))
		d = s->t_start + r->pct_limit;
	return d;
}

static int open_results(struct mesh__runner *r, struct mesh__slot *s)
{
	s->res_dir = mesh__run_strf("%s/%" PRIu64, r->o->results_dir, s->l.cid);
	s->tmp_out = mesh__run_strf("%s/.stdout.%d.%u", s->res_dir ? s->res_dir : "", (int)r->self, s->idx);
	s->tmp_err = mesh__run_strf("%s/.stderr.%d.%u", s->res_dir ? s->res_dir : "", (int)r->self, s->idx);
	if (!s->res_dir || !s->tmp_out || !s->tmp_err)
		return -ENOMEM;
	if (mkdir(s->res_dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	s->res_out = open(s->tmp_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (s->res_out < 0)
		return -errno;
	s->res_err = open(s->tmp_err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (s->res_err < 0)
		return -errno;
	return 0;
}

/* The attempt's command in s->argv: the template expanded for its chunk. */
static int expand_argv(struct mesh__runner *r, struct mesh__slot *s)
{
	int rc = mesh_exec_template_expand(&r->tmpl, r->o->input, s->l.cid, s->idx, &s->argbuf, r->argv_tmp);
	if (rc < 0)
		return rc;
	size_t argc = 0;
	while (r->argv_tmp[argc])
		argc++;
	if (argc + 1 > s->argv_cap) {
		char **a = realloc(s->argv, (argc + 1) * sizeof *a);
		if (!a)
			return -ENOMEM;
		s->argv = a;
		s->argv_cap = argc + 1;
	}
	memcpy(s->argv, r->argv_tmp, (argc + 1) * sizeof *s->argv);
	return 0;
}

int mesh__slot_start(struct mesh__runner *r, struct mesh__slot *s)
{
	uint64_t cid = s->l.cid;
	int rc;
	/* An executor that never reads it gets the template as it is (an
	 * expansion a chunk was 4% of meshd's CPU on a warm echo job). */
	char *const *argv = r->o->argv;
	if (!r->ex->argv_unused) {
		if ((rc = expand_argv(r, s)) < 0)
			return rc;
		argv = s->argv;
	}
	s->busy = 1;
	busy_count(r, cid, 1);
	r->busy++;
	s->t_start = mesh_mono_ns();
	r->last_start = s->t_start;
	if (r->joblog >= 0)
		s->wall_start = mesh_wall_ns();
	s->t_renew = s->t_start + r->ttl / 4;
	s->t_renewed = s->t_start;
	s->t_deadline = r->o->timeout_ns ? s->t_start + r->o->timeout_ns : 0;
	s->recv = 0;
	s->tag_out = s->tag_err = (struct mesh__tag){NULL, 0, 0};
	if (r->o->tag && (rc = mesh__out_tag(r, s)) < 0)
		goto fail;
	r->st->started++;
	if (s->l.kind == MESH_LEASE_SPECULATIVE)
		r->st->speculative++;
	if (r->o->results_dir && (rc = open_results(r, s)) < 0) {
		/* the results directory went away or cannot take it: as for
		 * any output that cannot be written */
		mesh__out_failed(r, cid, rc, "results");
		rc = r->fatal;
		goto fail;
	}
	struct mesh__exec_chunk c = {.cid = cid, .attempt = s->l.attempt, .slot = s->idx, .argv = argv};
	if (r->o->input)
		c.input = mesh_exec_input_line(r->o->input, cid, &c.input_len);
	if (r->o->input && r->o->input->pipe && (rc = c.stdin_fd = mesh_exec_input_block_fd(r->o->input, cid)) < 0)
		goto fail;
	rc = r->ex->ops->start(r->ex, &c, &s->res);
	if (c.stdin_fd > 2)
		close(c.stdin_fd); /* the child has its copy */
	if (rc < 0)
		goto fail;
	if (rc == 1) {
		/* Cannot start: the attempt fails like a shell's would, and
		 * trying again cannot help: buried at once. */
		mesh__run_note(r, "mesh: cannot run '%s' for chunk %" PRIu64 ": %s", argv[0], cid,
			       mesh_strerror(s->res.start_err));
		s->exited = 1;
		mesh__slot_finish(r, s);
	}
	return 0;
fail:
	/* Nothing of the attempt runs: the slot is free again. */
	busy_count(r, cid, -1);
	s->busy = 0;
	mesh__slot_clear(r, s);
	r->busy--;
	return rc;
}

/* Drops what the attempt in s wrote, unwritten. */
static void drop_output(struct mesh__slot *s)
{
	mesh__capture_flush(&s->cout, -1, NULL, 0);
	mesh__capture_flush(&s->cerr, -1, NULL, 0);
}

/* Records a failed attempt (hooks->failed gets its stderr, when that is
 * all in memory); 1 when it buried the chunk. */
static int record_failure(struct mesh__runner *r, struct mesh__slot *s, int code, const char *what)
{
	uint64_t cid = s->l.cid;
	if (r->o->hooks && r->o->hooks->failed && s->cerr.spill_fd < 0 && s->cerr.mem.len &&
	    (s->report = malloc(s->cerr.mem.len))) {
		/* The output goes on (and is gone) before the failure is recorded. */
		memcpy(s->report, s->cerr.mem.p, s->cerr.mem.len);
		s->report_len = s->cerr.mem.len;
	}
	r->st->failed++;
	if (s->why == END_TIMEOUT)
		r->st->timeouts++;
	int rc = mesh_job_fail(s->jh, cid, code);
	/* Each record counts one attempt: as many as max_attempts asks. */
	for (unsigned k = 0; s->res.start_err && rc == 0 && k < 100000; k++)
		rc = mesh_job_fail(s->jh, cid, code);
	if (rc < 0) {
		if (!r->fatal)
			r->fatal = rc;
		return 0;
	}
	if (r->o->hooks && r->o->hooks->failed)
		r->o->hooks->failed(r->o->hooks->arg, cid, s->l.attempt, code, s->report ? s->report : "",
				    s->report_len, rc == 1);
	if (rc == 1) {
		r->st->buried++;
		mesh__out_settle(r, cid);
		mesh__run_note(r, "mesh: chunk %" PRIu64 " failed (%s), attempt %" PRIu32 "; buried", cid, what,
			       s->l.attempt);
		return 1;
	}
	mesh__run_note(r, "mesh: chunk %" PRIu64 " failed (%s), attempt %" PRIu32 "; will retry", cid, what,
		       s->l.attempt);
	return 0;
}

static struct mesh__item *new_item(struct mesh__runner *r, struct mesh__slot *s, int code, uint64_t dur,
				   const char *what)
{
	struct mesh__item *it = calloc(1, sizeof *it);
	if (!it)
		return NULL;
	it->cid = s->l.cid;
	it->jh = s->jh;
	it->l = s->l;
	it->dur_ns = dur;
	it->complete = code == 0;
	it->res_out = it->res_err = -1;
	if (r->o->results_dir) {
		it->res_out = s->res_out;
		it->res_err = s->res_err;
		s->res_out = s->res_err = -1;
		it->res_dir = s->res_dir;
		it->tmp_out = s->tmp_out;
		it->tmp_err = s->tmp_err;
		s->res_dir = s->tmp_out = s->tmp_err = NULL;
		it->status = mesh__run_strf("%s\n", what);
		if (!it->status) {
			mesh__run_item_free(it);
			return NULL;
		}
	}
	return it;
}

/* Whether the lease of the attempt in s, which just ended, is still this
 * node's: 1, or 0 when another node took it over or the chunk is DONE
 * (then that node's run is the one whose output is printed).  A fresh
 * lease with more than half its TTL left is (no node may take it before
 * its deadline, and from its completion's queueing on the loop renews it
 * until that commits: run_done.c); one
 * with less, a stolen one (whose earlier holder may still complete it) and
 * a speculative copy are renewed first to know.  A renewal that fails for
 * another reason (the store out of reach) says nothing: 1, as before. */
static int lease_held(struct mesh__runner *r, struct mesh__slot *s, uint64_t now)
{
	if (s->lost)
		return 0;
	if (s->l.kind == MESH_LEASE_FRESH && now + r->ttl / 2 < s->t_expire)
		return 1;
	int rc = mesh_job_renew(s->jh, &s->l, r->ttl);
	if (rc == 0) {
		s->t_renewed = mesh_mono_ns();
		s->t_expire = now + r->ttl;
	}
	return rc != MESH_E_STATE;
}

/* The attempt in s was killed (a lost race, an interrupt, a halt) or the
 * run is failing: no record.  When stopping, lets the lease expire now so a
 * rerun takes the chunk at once; drops the output. */
static void finish_unrecorded(struct mesh__runner *r, struct mesh__slot *s)
{
	if (r->stopping || r->fatal || r->halted)
		mesh_job_renew(s->jh, &s->l, 1);
	if (r->fatal && s->printed)
		mesh__run_repeat(r, s->l.cid);
	drop_output(s);
}

/* The attempt in s ends with neither a record nor a completion: its lease
 * expires now, so a rerun takes the chunk at once; it (the attempt's
 * completion item, or NULL) is freed. */
static void abandon(struct mesh__slot *s, struct mesh__item *it)
{
	mesh_job_renew(s->jh, &s->l, 1);
	if (it)
		mesh__run_item_free(it);
}

/* The status the attempt in s is recorded with: its exit code, a timeout's
 * 128 + SIGKILL; an output that could not be kept whole fails the attempt,
 * and says why (the part that was kept is dropped with it). */
static int attempt_code(struct mesh__runner *r, struct mesh__slot *s)
{
	int code = s->res.code;
	if (s->why == END_TIMEOUT)
		code = 128 + SIGKILL;
	if (s->cap_err) {
		mesh__run_note(r, "mesh: chunk %" PRIu64 ": cannot keep the output in %s: %s", s->l.cid,
			       s->cout.spill_dir ? s->cout.spill_dir : s->cerr.spill_dir ? s->cerr.spill_dir : r->tmpdir,
			       mesh_strerror(s->cap_err));
		drop_output(s);
		if (code == 0)
			code = 1;
	}
	return code;
}

/* Hands the output of the attempt in s, which succeeded, to hooks->result:
 * the caller keeps the result; it must have it before the chunk may be
 * completed, whole: one over the in-memory bound comes back from its spill
 * file.  0, or the negative error of the gather or of the hook. */
static int hand_result(struct mesh__runner *r, struct mesh__slot *s, struct mesh__item *it)
{
	int rc = mesh__capture_gather(&s->cout);
	if (rc == 0)
		rc = r->o->hooks->result(r->o->hooks->arg, s->l.cid, s->l.attempt, s->cout.mem.p ? s->cout.mem.p : "",
					 s->cout.mem.len);
	/* A small one goes in its DONE too: durable with it. */
	if (rc == 0 && it && r->o->hooks->results_in_done && s->cout.mem.len <= mesh_job_result_max(s->jh)) {
		if ((it->res_p = malloc(s->cout.mem.len + 1))) {
			if (s->cout.mem.len)
				memcpy(it->res_p, s->cout.mem.p, s->cout.mem.len);
			it->res_len = s->cout.mem.len;
		}
	}
	return rc;
}

void mesh__slot_finish(struct mesh__runner *r, struct mesh__slot *s)
{
	uint64_t now = mesh_mono_ns(), dur = now - s->t_start;
	uint64_t cid = s->l.cid;
	char what[48];
	int code, rc, buried = 0;
	struct mesh__item *it = NULL;
	if (s->why == END_KILLED || r->fatal) {
		finish_unrecorded(r, s);
		goto done;
	}
	int unseen = 0; /* its output is not printed: the chunk is DONE */
	if (!lease_held(r, s, now)) {
		if (mesh_job_is_done(s->jh, cid) != 1) {
			/* Another node holds the lease and runs the chunk: that
			 * run's output and outcome count, this one's go unseen. */
			if (!s->lost)
				mesh__run_lease_lost(r, s, mesh_mono_ns());
			drop_output(s);
			goto done;
		}
		/* DONE by another node: its completion is sent as before (and
		 * answers IGNORED, counted), its output never printed. */
		unseen = 1;
	}
	code = attempt_code(r, s);
	what[0] = 0; /* read only for a results directory's status and a failure's note */
	if (r->o->results_dir || code != 0)
		describe(what, sizeof what, code, s->why);
	if (r->o->results_dir || code == 0) {
		if (!(it = new_item(r, s, code, dur, what))) {
			if (!r->fatal)
				r->fatal = -ENOMEM;
			abandon(s, NULL);
			goto done;
		}
	}
	mesh__out_joblog(r, s, code, dur);
	if (code == 0 && r->o->hooks && r->o->hooks->result && (rc = hand_result(r, s, it)) < 0) {
		mesh__out_failed(r, cid, rc, "result");
		abandon(s, it);
		drop_output(s);
		goto done;
	}
	if (code != 0)
		buried = record_failure(r, s, code, what);
	if (code != 0 && !buried && !r->o->line_buffer && !r->o->ungroup)
		drop_output(s); /* tried again: GNU parallel writes the last attempt's output only */
	if (!r->o->results_dir && unseen) {
		drop_output(s);
	} else if (!r->o->results_dir) {
		int h = mesh__out_finished(r, s, it, code == 0 || buried);
		if (h < 0) {
			/* Its output is not out: not DONE, not failed; a rerun
			 * runs it again. */
			abandon(s, it);
			goto done;
		}
		if (h == 1)
			it = NULL;
	}
	if (code == 0 && r->o->timeout_pct)
		mesh__out_median_add(r, dur);
	if (code == 0) {
		r->st->succeeded++;
		mesh__out_halt_check(r, 1, 0);
	} else if (buried) {
		mesh__out_halt_check(r, 0, code);
	}
	if (it)
		mesh__run_queue(r, it);
done:
	mesh__slot_clear(r, s);
	r->busy--;
	r->retry_at = 0; /* something changed: leasing may succeed again */
}

/* Output passed on as it comes (results files, -u). */
static int pass_through(struct mesh__runner *r, struct mesh__slot *s, int out, const void *p, size_t n)
{
	int rc;
	if (r->o->results_dir) {
		rc = mesh_write_all(out ? s->res_out : s->res_err, p, n);
		if (rc < 0)
			mesh__out_failed(r, s->l.cid, rc, "results");
	} else {
		mesh__out_clear_bar(r);
		int dst = out ? r->o->out_fd : r->o->err_fd;
		rc = dst >= 0 ? mesh__write_tagged(dst, out ? &s->tag_out : &s->tag_err, p, n, 0) : 0;
		s->printed |= dst >= 0 && n > 0;
		if (rc < 0)
			mesh__out_failed(r, s->l.cid, rc, "output");
	}
	return rc;
}

int mesh__slot_output(void *arg, unsigned slot, int out, const void *p, size_t n)
{
	struct mesh__runner *r = arg;
	struct mesh__slot *s = &r->slots[slot - 1];
	struct mesh__capture *c = out ? &s->cout : &s->cerr;
	int rc;
	if (out)
		s->recv += n;
	if (r->o->results_dir || r->o->ungroup)
		return pass_through(r, s, out, p, n);
	if ((rc = mesh__capture_add(c, p, n)) < 0) {
		/* The spill file failed: the data read is gone, so the attempt
		 * cannot end well; stop it now. */
		if (!s->cap_err)
			s->cap_err = rc;
		mesh__slot_kill(r, s, SIGKILL);
		return rc;
	}
	if (r->o->line_buffer) {
		int dst = out ? r->o->out_fd : r->o->err_fd;
		mesh__out_clear_bar(r);
		rc = mesh__capture_flush_lines(c, dst, out ? &s->tag_out : &s->tag_err);
		s->printed |= dst >= 0; /* perhaps a line went out */
		if (rc < 0)
			mesh__out_failed(r, s->l.cid, rc, "output");
	}
	return 0;
}
