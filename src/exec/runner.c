#include "exec/runner.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "exec/capture.h"
#include "exec/input.h"
#include "exec/progress.h"
#include "exec/spawn.h"
#include "exec/template.h"
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define TTL_DEFAULT (10 * MESH_NS_PER_S)
#define KILL_GRACE (2 * MESH_NS_PER_S)
/* After the leader exits, how long its pipes may stay open (a background
 * grandchild holding them) before we stop waiting for their end. */
#define PIPE_GRACE (1 * MESH_NS_PER_S)
#define RETRY_NS (200 * MESH_NS_PER_MS)
#define DRAW_NS (100 * MESH_NS_PER_MS)

enum end_why { END_NORMAL, END_TIMEOUT, END_KILLED };

struct slot {
	int busy;
	struct mesh_job *jh; /* the handle that leased the chunk */
	unsigned idx; /* 1-based, MESH_SLOT */
	struct mesh_lease l;
	pid_t pid;
	int pidfd, fd_out, fd_err;
	int res_out, res_err; /* results temp files */
	char *res_dir, *tmp_out, *tmp_err;
	struct mesh__capture cout, cerr;
	uint64_t t_start, t_deadline, t_renew, t_kill, t_exit;
	int exited, wstatus, term_sent;
	enum end_why why;
	char env_chunk[48], env_attempt[48], env_slot[48];
	char **envp, **argv;
	struct mesh_buf argbuf;
};

/* Work for the completer thread: finalize results (fsyncs, renames) and
 * complete successful chunks, many at once. */
struct item {
	struct item *next;
	struct mesh_job *jh;
	struct mesh_lease l;
	uint64_t cid, dur_ns;
	int complete; /* 0: results only (a failed attempt) */
	int res_out, res_err;
	char *res_dir, *tmp_out, *tmp_err, *status;
	int result; /* MESH_JOB_DONE / IGNORED or a negative error */
};

struct runner {
	struct mesh_job *job;
	const struct mesh_exec_opts *o;
	struct mesh_exec_stats *st;
	struct mesh_exec_template tmpl;
	struct mesh__spawner sp;
	char *path; /* resolved argv[0], NULL when argv[0] holds a placeholder */
	int nullfd, evfd;
	struct slot *slots;
	unsigned nslots, busy;
	uint64_t n, ttl;
	char **env_base;
	size_t env_n;
	pid_t self;

	pthread_t thr;
	int thr_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct item *q_in, **q_in_tail, *q_out;
	unsigned in_flight; /* items queued or being processed */
	int quit;

	int stopping, sigs, fatal, complete_seen, none_seen;
	uint64_t retry_at, t0, next_draw, done_at_start;
	int drawn;
};

static int sig_w = -1, sig_r = -1;

static void on_signal(int sig)
{
	int e = errno;
	unsigned char c = (unsigned char)sig;
	if (sig_w >= 0 && write(sig_w, &c, 1) < 0) {
		/* the pipe is full: enough signals are pending */
	}
	errno = e;
}

static void note(struct runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct runner *r, const char *fmt, ...)
{
	if (r->o->note_fd < 0)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (r->drawn && r->o->progress_fd == r->o->note_fd)
		mesh_write_all_raw(r->o->progress_fd, "\r\033[K", 4);
	mesh_write_all_raw(r->o->note_fd, line, (size_t)n);
}

static void describe(char *b, size_t cap, int code, enum end_why why)
{
	if (why == END_TIMEOUT)
		snprintf(b, cap, "timeout");
	else if (code > 128 && code < 128 + 65)
		snprintf(b, cap, "signal %d", code - 128);
	else
		snprintf(b, cap, "exit %d", code);
}

/* ---- the completer thread ---- */

static int finalize_results(struct item *it)
{
	int rc = 0;
	char *path = NULL;
	struct mesh_buf b = MESH_BUF_INIT;
	if (it->res_out >= 0 && (rc = mesh_fsync(it->res_out)) < 0)
		goto out;
	if (it->res_err >= 0 && (rc = mesh_fsync(it->res_err)) < 0)
		goto out;
	if (mesh_buf_addf(&b, "%s/stdout", it->res_dir) < 0)
		goto nomem;
	if (it->tmp_out && rename(it->tmp_out, b.p) < 0) {
		rc = -errno;
		goto out;
	}
	mesh_buf_reset(&b);
	if (mesh_buf_addf(&b, "%s/stderr", it->res_dir) < 0)
		goto nomem;
	if (it->tmp_err && rename(it->tmp_err, b.p) < 0) {
		rc = -errno;
		goto out;
	}
	mesh_buf_reset(&b);
	if (mesh_buf_addf(&b, "%s/status", it->res_dir) < 0)
		goto nomem;
	/* Written last: a status file says the other two are whole. */
	rc = mesh_write_file_atomic(b.p, it->status, strlen(it->status), 0644);
	goto out;
nomem:
	rc = -ENOMEM;
out:
	free(path);
	mesh_buf_release(&b);
	return rc;
}

static void item_free(struct item *it)
{
	if (it->res_out >= 0)
		close(it->res_out);
	if (it->res_err >= 0)
		close(it->res_err);
	free(it->res_dir);
	free(it->tmp_out);
	free(it->tmp_err);
	free(it->status);
	free(it);
}

static void *completer(void *arg)
{
	struct runner *r = arg;
	uint64_t *cids = NULL, *durs = NULL;
	int *res = NULL;
	struct item **its = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->q_in && !r->quit)
			pthread_cond_wait(&r->cv, &r->mu);
		if (!r->q_in)
			break;
		struct item *batch = r->q_in;
		r->q_in = NULL;
		r->q_in_tail = &r->q_in;
		pthread_mutex_unlock(&r->mu);

		size_t n = 0, total = 0;
		for (struct item *it = batch; it; it = it->next)
			total++;
		if (total > cap) {
			size_t nc = total * 2;
			uint64_t *c2 = realloc(cids, nc * sizeof *c2), *d2 = NULL;
			if (c2)
				cids = c2;
			d2 = realloc(durs, nc * sizeof *d2);
			if (d2)
				durs = d2;
			int *r2 = realloc(res, nc * sizeof *r2);
			if (r2)
				res = r2;
			struct item **i2 = realloc(its, nc * sizeof *i2);
			if (i2)
				its = i2;
			if (c2 && d2 && r2 && i2)
				cap = nc;
		}
		for (struct item *it = batch; it; it = it->next) {
			it->result = 0;
			if (it->res_dir)
				it->result = finalize_results(it);
		}
		/* One fsync for the batch (two when speculative copies ran
		 * under the second handle). */
		for (int pass = 0; pass < 2; pass++) {
			struct mesh_job *jh = pass == 0 ? r->job : r->o->spec_job;
			n = 0;
			if (!jh)
				continue;
			for (struct item *it = batch; it; it = it->next) {
				if (it->jh != jh || it->result != 0 || !it->complete)
					continue;
				if (n >= cap) {
					it->result = -ENOMEM;
					continue;
				}
				cids[n] = it->cid;
				durs[n] = it->dur_ns;
				its[n++] = it;
			}
			if (n) {
				int rc = mesh_job_complete_many(jh, cids, durs, n, res);
				for (size_t i = 0; i < n; i++)
					its[i]->result =
						rc < 0 && res[i] >= 0 && res[i] != MESH_JOB_IGNORED ? rc : res[i];
			}
		}
		pthread_mutex_lock(&r->mu);
		struct item *last = batch;
		while (last->next)
			last = last->next;
		last->next = r->q_out;
		r->q_out = batch;
		r->in_flight -= (unsigned)total;
		uint64_t one = 1;
		if (write(r->evfd, &one, sizeof one) < 0) {
			/* the counter only wakes the loop; it cannot overflow here */
		}
	}
	pthread_mutex_unlock(&r->mu);
	free(cids);
	free(durs);
	free(res);
	free(its);
	return NULL;
}

static void queue_item(struct runner *r, struct item *it)
{
	pthread_mutex_lock(&r->mu);
	it->next = NULL;
	*r->q_in_tail = it;
	r->q_in_tail = &it->next;
	r->in_flight++;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void kill_slot(struct slot *s, int sig)
{
	if (s->busy && !s->exited && s->pid > 0)
		kill(-s->pid, sig);
}

static void stop_all(struct runner *r, int sig);

static void take_results(struct runner *r)
{
	uint64_t v;
	if (read(r->evfd, &v, sizeof v) < 0) {
		/* EAGAIN: nothing new */
	}
	pthread_mutex_lock(&r->mu);
	struct item *list = r->q_out;
	r->q_out = NULL;
	pthread_mutex_unlock(&r->mu);
	while (list) {
		struct item *it = list;
		list = it->next;
		if (it->result < 0) {
			/* Not DONE: let a rerun take the chunk at once. */
			mesh_job_renew(it->jh, &it->l, 1);
			if (!r->fatal) {
				r->fatal = it->result;
				stop_all(r, SIGKILL);
			}
		} else if (it->complete) {
			if (it->result == MESH_JOB_DONE)
				r->st->done++;
			else
				r->st->ignored++;
			/* First completion wins: a local copy still running lost. */
			for (unsigned i = 0; i < r->nslots; i++) {
				struct slot *s = &r->slots[i];
				if (s->busy && s->l.cid == it->cid && !s->exited && s->why == END_NORMAL) {
					s->why = END_KILLED;
					kill_slot(s, SIGKILL);
					r->st->killed++;
				}
			}
		}
		item_free(it);
	}
}

/* ---- slots ---- */

static void slot_close_fds(struct slot *s)
{
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->fd_out >= 0)
		close(s->fd_out);
	if (s->fd_err >= 0)
		close(s->fd_err);
	if (s->res_out >= 0)
		close(s->res_out);
	if (s->res_err >= 0)
		close(s->res_err);
	s->pidfd = s->fd_out = s->fd_err = s->res_out = s->res_err = -1;
}

static void slot_clear(struct slot *s)
{
	slot_close_fds(s);
	free(s->res_dir);
	free(s->tmp_out);
	free(s->tmp_err);
	s->res_dir = s->tmp_out = s->tmp_err = NULL;
	s->busy = 0;
	s->exited = 0;
	s->term_sent = 0;
	s->pid = 0;
	s->why = END_NORMAL;
}

static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	int rc = mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (rc < 0) {
		mesh_buf_release(&b);
		return NULL;
	}
	return mesh_buf_detach(&b, NULL);
}

static int open_results(struct runner *r, struct slot *s)
{
	s->res_dir = strf("%s/%" PRIu64, r->o->results_dir, s->l.cid);
	s->tmp_out = strf("%s/.stdout.%d.%u", s->res_dir ? s->res_dir : "", (int)r->self, s->idx);
	s->tmp_err = strf("%s/.stderr.%d.%u", s->res_dir ? s->res_dir : "", (int)r->self, s->idx);
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

static void finish_slot(struct runner *r, struct slot *s, int code);

/* Starts the leased chunk in slot s.  Returns 0 (running, or an exec
 * failure already recorded as a failed attempt) or a fatal error. */
static int start_slot(struct runner *r, struct slot *s)
{
	uint64_t cid = s->l.cid;
	int rc, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	char *path = r->path, *own_path = NULL;
	rc = mesh_exec_template_expand(&r->tmpl, r->o->input, cid, s->idx, &s->argbuf, s->argv);
	if (rc < 0)
		return rc;
	snprintf(s->env_chunk, sizeof s->env_chunk, "MESH_CHUNK=%" PRIu64, cid);
	snprintf(s->env_attempt, sizeof s->env_attempt, "MESH_ATTEMPT=%" PRIu32, s->l.attempt);
	s->busy = 1;
	r->busy++;
	s->t_start = mesh_mono_ns();
	s->t_renew = s->t_start + r->ttl / 4;
	s->t_deadline = r->o->timeout_ns ? s->t_start + r->o->timeout_ns : 0;
	r->st->started++;
	if (s->l.kind == MESH_LEASE_SPECULATIVE)
		r->st->speculative++;
	if (r->o->results_dir) {
		if ((rc = open_results(r, s)) < 0)
			return rc;
	} else {
		if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
			rc = -errno;
			goto fail_pipes;
		}
	}
	if (!path) {
		rc = mesh__resolve_cmd(s->argv[0], &own_path);
		path = own_path;
	}
	if (path) {
		int o = r->o->results_dir ? s->res_out : pout[1];
		int e = r->o->results_dir ? s->res_err : perr[1];
		rc = mesh__spawn(&r->sp, path, s->argv, s->envp, r->nullfd, o, e, &s->pid);
	}
	free(own_path);
	if (pout[1] >= 0)
		close(pout[1]);
	if (perr[1] >= 0)
		close(perr[1]);
	s->fd_out = pout[0];
	s->fd_err = perr[0];
	if (rc < 0) {
		/* Cannot exec: the attempt fails like a shell's would. */
		if (rc == -ENOMEM)
			return rc;
		note(r, "mesh: cannot run '%s' for chunk %" PRIu64 ": %s", s->argv[0], cid, mesh_strerror(rc));
		s->exited = 1;
		slot_close_fds(s);
		finish_slot(r, s, rc == -ENOENT ? 127 : 126);
		return 0;
	}
	s->pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
	if (s->pidfd < 0) {
		rc = -errno;
		kill(-s->pid, SIGKILL);
		while (waitpid(s->pid, &s->wstatus, 0) < 0 && errno == EINTR)
			;
		s->exited = 1;
		return rc;
	}
	return 0;
fail_pipes:
	for (int i = 0; i < 2; i++) {
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
	}
	return rc;
}

static void finish_slot(struct runner *r, struct slot *s, int code)
{
	uint64_t dur = mesh_mono_ns() - s->t_start;
	uint64_t cid = s->l.cid;
	char what[48];
	int rc;
	if (s->why == END_KILLED) {
		/* Lost a race, or interrupted: no record.  When interrupted, let
		 * the lease expire now so a rerun takes the chunk at once. */
		if (r->stopping || r->fatal)
			mesh_job_renew(s->jh, &s->l, 1);
		mesh__capture_flush(&s->cout, -1);
		mesh__capture_flush(&s->cerr, -1);
		goto done;
	}
	if (s->why == END_TIMEOUT)
		code = 128 + SIGKILL;
	if (!r->o->results_dir) {
		int out = r->o->out_fd, err = r->o->err_fd;
		/* The bar's line is cleared before any output (the terminal may
		 * show both even when the fds differ); the next draw restores it. */
		if (r->drawn && (s->cout.total || s->cerr.total)) {
			mesh_write_all_raw(r->o->progress_fd, "\r\033[K", 4);
			r->drawn = 0;
		}
		mesh__capture_flush(&s->cout, out);
		mesh__capture_flush(&s->cerr, err);
	}
	describe(what, sizeof what, code, s->why);
	struct item *it = NULL;
	if (r->o->results_dir || code == 0) {
		it = calloc(1, sizeof *it);
		if (!it) {
			if (!r->fatal)
				r->fatal = -ENOMEM;
			goto done;
		}
		it->cid = cid;
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
			it->status = strf("%s\n", what);
			if (!it->status) {
				item_free(it);
				if (!r->fatal)
					r->fatal = -ENOMEM;
				goto done;
			}
		}
	}
	if (code != 0) {
		r->st->failed++;
		if (s->why == END_TIMEOUT)
			r->st->timeouts++;
		rc = mesh_job_fail(s->jh, cid, code);
		if (rc < 0) {
			if (!r->fatal)
				r->fatal = rc;
		} else if (rc == 1) {
			r->st->buried++;
			note(r, "mesh: chunk %" PRIu64 " failed (%s), attempt %" PRIu32 "; buried", cid, what,
			     s->l.attempt);
		} else {
			note(r, "mesh: chunk %" PRIu64 " failed (%s), attempt %" PRIu32 "; will retry", cid, what,
			     s->l.attempt);
		}
	}
	if (it)
		queue_item(r, it);
done:
	slot_clear(s);
	r->busy--;
	r->retry_at = 0; /* something changed: leasing may succeed again */
}

/* Reaps the slot's leader if it exited; 1 when it did. */
static int reap(struct slot *s)
{
	int st;
	pid_t p;
	do
		p = waitpid(s->pid, &st, WNOHANG);
	while (p < 0 && errno == EINTR);
	if (p != s->pid)
		return 0;
	s->exited = 1;
	s->wstatus = st;
	s->t_exit = mesh_mono_ns();
	if (s->pidfd >= 0) {
		close(s->pidfd);
		s->pidfd = -1;
	}
	return 1;
}

static void read_pipe(struct slot *s, int *fd, struct mesh__capture *c)
{
	long n = mesh__capture_read(c, *fd);
	if (n == 0 || (n < 0 && n != -EAGAIN)) {
		close(*fd);
		*fd = -1;
	}
}

static void maybe_finish(struct runner *r, struct slot *s)
{
	if (!s->busy || !s->exited)
		return;
	if ((s->fd_out >= 0 || s->fd_err >= 0) && mesh_mono_ns() < s->t_exit + PIPE_GRACE)
		return;
	int code = mesh__exit_code(s->wstatus);
	finish_slot(r, s, code);
}

/* ---- the loop ---- */

static void draw(struct runner *r, int final)
{
	int fd = r->o->progress_fd;
	if (fd < 0)
		return;
	uint64_t now = mesh_mono_ns();
	if (!final && now < r->next_draw)
		return;
	r->next_draw = now + DRAW_NS;
	struct mesh_job_status js;
	if (mesh_job_status(r->job, &js) < 0)
		return;
	struct winsize ws;
	struct mesh__progress p = {
		.done = js.done,
		.total = js.n,
		.done_at_start = r->done_at_start,
		.running = r->busy,
		.failed = js.buried,
		.elapsed_ns = now - r->t0,
		.width = ioctl(fd, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 80,
		.color = getenv("NO_COLOR") == NULL || !getenv("NO_COLOR")[0],
	};
	char line[512];
	memcpy(line, "\r\033[K", 4);
	size_t n = 4 + mesh__progress_format(line + 4, sizeof line - 5, &p);
	if (final) {
		line[n++] = '\n';
		r->drawn = 0;
	} else {
		r->drawn = 1;
	}
	mesh_write_all_raw(fd, line, n);
}

static void stop_all(struct runner *r, int sig)
{
	uint64_t now = mesh_mono_ns();
	for (unsigned i = 0; i < r->nslots; i++) {
		struct slot *s = &r->slots[i];
		if (!s->busy || s->exited)
			continue;
		if (s->why == END_NORMAL) {
			s->why = END_KILLED;
			r->st->killed++;
		}
		kill_slot(s, sig);
		if (!s->term_sent) {
			s->term_sent = 1;
			s->t_kill = now + KILL_GRACE;
		}
	}
}

/* Leases and starts chunks for the free slots. */
static int fill(struct runner *r)
{
	while (r->busy < r->nslots && !r->stopping && !r->fatal) {
		if (r->o->max_chunks && r->st->started >= r->o->max_chunks)
			return 0;
		if (r->retry_at && mesh_mono_ns() < r->retry_at)
			return 0;
		struct slot *s = NULL;
		for (unsigned i = 0; i < r->nslots; i++)
			if (!r->slots[i].busy) {
				s = &r->slots[i];
				break;
			}
		s->jh = r->job;
		int rc = mesh_job_lease(r->job, r->ttl, r->o->speculate, &s->l);
		if (rc == MESH_JOB_NONE && r->o->speculate && r->o->spec_job) {
			s->jh = r->o->spec_job;
			rc = mesh_job_lease(s->jh, r->ttl, 1, &s->l);
		}
		if (rc < 0)
			return rc;
		if (rc == MESH_JOB_COMPLETE) {
			r->complete_seen = 1;
			return 0;
		}
		if (rc == MESH_JOB_NONE) {
			r->none_seen = 1;
			r->retry_at = mesh_mono_ns() + RETRY_NS;
			return 0;
		}
		r->none_seen = 0;
		if ((rc = start_slot(r, s)) < 0) {
			if (s->busy && (s->pid == 0 || s->exited)) {
				slot_clear(s);
				r->busy--;
			}
			return rc;
		}
	}
	return 0;
}

/* Decides whether the run is over; returns 1 with *answer set. */
static int over(struct runner *r, int *answer)
{
	if (r->busy)
		return 0;
	pthread_mutex_lock(&r->mu);
	unsigned in_flight = r->in_flight;
	pthread_mutex_unlock(&r->mu);
	if (in_flight)
		return 0;
	/* Results the completer handed over but the loop has not seen yet
	 * (a fatal error among them) count before deciding. */
	take_results(r);
	if (r->fatal) {
		*answer = r->fatal;
		return 1;
	}
	if (r->stopping) {
		*answer = MESH_EXEC_INTERRUPTED;
		return 1;
	}
	struct mesh_job_status js;
	int rc = mesh_job_status(r->job, &js);
	if (rc < 0) {
		*answer = rc;
		return 1;
	}
	if (r->complete_seen || js.done >= js.n) {
		*answer = MESH_EXEC_COMPLETE;
		return 1;
	}
	if (r->o->max_chunks && r->st->started >= r->o->max_chunks) {
		*answer = MESH_EXEC_LIMIT;
		return 1;
	}
	if (r->none_seen && js.done + js.buried >= js.n) {
		*answer = MESH_EXEC_FAILED;
		return 1;
	}
	return 0;
}

static void handle_signals(struct runner *r, int fd)
{
	unsigned char buf[16];
	ssize_t n = read(fd, buf, sizeof buf);
	if (n <= 0)
		return;
	r->sigs += (int)n;
	r->stopping = 1;
	stop_all(r, r->sigs > 1 ? SIGKILL : SIGTERM);
}

static int loop(struct runner *r)
{
	struct pollfd *pf = calloc(2 + 3 * (size_t)r->nslots, sizeof *pf);
	struct {
		struct slot *s;
		int kind;
	} *who = calloc(2 + 3 * (size_t)r->nslots, sizeof *who);
	int answer = 0;
	if (!pf || !who) {
		free(pf);
		free(who);
		return -ENOMEM;
	}
	for (;;) {
		int rc = fill(r);
		if (rc < 0 && !r->fatal) {
			r->fatal = rc;
			stop_all(r, SIGKILL);
		}
		if (over(r, &answer))
			break;
		draw(r, 0);

		nfds_t n = 0;
		uint64_t now = mesh_mono_ns(), wake = UINT64_MAX;
		if (sig_r >= 0) {
			pf[n] = (struct pollfd){.fd = sig_r, .events = POLLIN};
			who[n].s = NULL, who[n++].kind = 0;
		}
		pf[n] = (struct pollfd){.fd = r->evfd, .events = POLLIN};
		who[n].s = NULL, who[n++].kind = 1;
		for (unsigned i = 0; i < r->nslots; i++) {
			struct slot *s = &r->slots[i];
			if (!s->busy)
				continue;
			if (s->pidfd >= 0) {
				pf[n] = (struct pollfd){.fd = s->pidfd, .events = POLLIN};
				who[n].s = s, who[n++].kind = 2;
			}
			if (s->fd_out >= 0) {
				pf[n] = (struct pollfd){.fd = s->fd_out, .events = POLLIN};
				who[n].s = s, who[n++].kind = 3;
			}
			if (s->fd_err >= 0) {
				pf[n] = (struct pollfd){.fd = s->fd_err, .events = POLLIN};
				who[n].s = s, who[n++].kind = 4;
			}
			if (s->exited) {
				if (s->t_exit + PIPE_GRACE < wake)
					wake = s->t_exit + PIPE_GRACE;
				continue;
			}
			if (s->t_renew < wake)
				wake = s->t_renew;
			if (s->t_deadline && s->why == END_NORMAL && s->t_deadline < wake)
				wake = s->t_deadline;
			if (s->term_sent && s->t_kill < wake)
				wake = s->t_kill;
		}
		if (r->retry_at && r->busy < r->nslots && !r->stopping && r->retry_at < wake)
			wake = r->retry_at;
		if (r->o->progress_fd >= 0 && r->next_draw < wake)
			wake = r->next_draw;
		int timeout = -1;
		if (wake != UINT64_MAX)
			timeout = wake <= now ? 0 : (int)((wake - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS);
		int k = poll(pf, n, timeout);
		if (k < 0 && errno != EINTR) {
			r->fatal = -errno;
			stop_all(r, SIGKILL);
			continue;
		}
		for (nfds_t i = 0; k > 0 && i < n; i++) {
			if (!pf[i].revents)
				continue;
			struct slot *s = who[i].s;
			switch (who[i].kind) {
			case 0:
				handle_signals(r, pf[i].fd);
				break;
			case 1:
				take_results(r);
				break;
			case 2:
				reap(s);
				break;
			case 3:
				read_pipe(s, &s->fd_out, &s->cout);
				break;
			case 4:
				read_pipe(s, &s->fd_err, &s->cerr);
				break;
			}
		}
		now = mesh_mono_ns();
		for (unsigned i = 0; i < r->nslots; i++) {
			struct slot *s = &r->slots[i];
			if (!s->busy)
				continue;
			if (!s->exited) {
				if (s->t_deadline && s->why == END_NORMAL && now >= s->t_deadline) {
					s->why = END_TIMEOUT;
					kill_slot(s, SIGKILL);
				}
				if (s->term_sent && now >= s->t_kill)
					kill_slot(s, SIGKILL);
				if (now >= s->t_renew) {
					s->t_renew = now + r->ttl / 4;
					rc = mesh_job_renew(s->jh, &s->l, r->ttl);
					if (rc == MESH_E_STATE && mesh_job_is_done(r->job, s->l.cid) == 1 &&
					    s->why == END_NORMAL) {
						s->why = END_KILLED;
						kill_slot(s, SIGKILL);
						r->st->killed++;
					}
				}
			}
			maybe_finish(r, s);
		}
	}
	draw(r, 1);
	free(pf);
	free(who);
	return answer;
}

static int setup_env(struct runner *r)
{
	extern char **environ;
	size_t n = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	r->env_base = calloc(n + 1, sizeof *r->env_base);
	if (!r->env_base)
		return -ENOMEM;
	for (char **e = environ; e && *e; e++) {
		if (!strncmp(*e, "MESH_CHUNK=", 11) || !strncmp(*e, "MESH_ATTEMPT=", 13) ||
		    !strncmp(*e, "MESH_SLOT=", 10))
			continue;
		r->env_base[r->env_n++] = *e;
	}
	return 0;
}

static int setup_slots(struct runner *r)
{
	r->slots = calloc(r->nslots, sizeof *r->slots);
	if (!r->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < r->nslots; i++) {
		struct slot *s = &r->slots[i];
		s->idx = i + 1;
		s->pidfd = s->fd_out = s->fd_err = s->res_out = s->res_err = -1;
		s->cout = (struct mesh__capture)MESH__CAPTURE_INIT;
		s->cerr = (struct mesh__capture)MESH__CAPTURE_INIT;
		s->argbuf = (struct mesh_buf)MESH_BUF_INIT;
		s->envp = calloc(r->env_n + 4, sizeof *s->envp);
		s->argv = calloc(mesh_exec_template_slots(&r->tmpl), sizeof *s->argv);
		if (!s->envp || !s->argv)
			return -ENOMEM;
		memcpy(s->envp, r->env_base, r->env_n * sizeof *s->envp);
		snprintf(s->env_slot, sizeof s->env_slot, "MESH_SLOT=%u", s->idx);
		s->envp[r->env_n] = s->env_chunk;
		s->envp[r->env_n + 1] = s->env_attempt;
		s->envp[r->env_n + 2] = s->env_slot;
	}
	return 0;
}

int mesh_exec_run(struct mesh_job *job, const struct mesh_exec_opts *o, struct mesh_exec_stats *stats)
{
	struct mesh_exec_stats dummy;
	struct runner rr, *r = &rr;
	struct sigaction sa, old_int, old_term;
	int sigp[2] = {-1, -1}, rc, have_sig = 0;
	if (!stats)
		stats = &dummy;
	memset(stats, 0, sizeof *stats);
	memset(r, 0, sizeof *r);
	r->job = job;
	r->o = o;
	r->st = stats;
	r->nullfd = r->evfd = -1;
	r->sp.err_r = r->sp.err_w = -1;
	r->self = getpid();
	r->t0 = mesh_mono_ns();
	r->nslots = o->slots ? o->slots : 1;
	r->ttl = o->ttl_ns ? o->ttl_ns : TTL_DEFAULT;
	r->n = mesh_job_nchunks(job);
	r->q_in_tail = &r->q_in;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);

	if ((rc = mesh_exec_template_init(&r->tmpl, o->argv)) < 0)
		goto out;
	if (o->input && o->input->n < r->n) {
		rc = MESH_E_RANGE;
		goto out;
	}
	if (!strstr(o->argv[0], "{}") && !strstr(o->argv[0], "{#}") &&
	    (rc = mesh__resolve_cmd(o->argv[0], &r->path)) < 0)
		goto out;
	if (o->results_dir && mkdir(o->results_dir, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		goto out;
	}
	/* Our pipes and files must never land on 0..2 (the child's dup2s). */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) {
			rc = -errno;
			goto out;
		}
	r->nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->nullfd < 0 || r->evfd < 0) {
		rc = -errno;
		goto out;
	}
	if ((rc = setup_env(r)) < 0 || (rc = setup_slots(r)) < 0)
		goto out;
	if (o->handle_signals) {
		if (pipe2(sigp, O_CLOEXEC | O_NONBLOCK) < 0) {
			rc = -errno;
			goto out;
		}
		sig_w = sigp[1];
		sig_r = sigp[0];
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		sigaction(SIGINT, &sa, &old_int);
		sigaction(SIGTERM, &sa, &old_term);
		have_sig = 1;
	}
	/* After our handlers: the spawner resets them in the child. */
	if ((rc = mesh__spawner_init(&r->sp, NULL)) < 0)
		goto out;
	{
		struct mesh_job_status js;
		if ((rc = mesh_job_status(job, &js)) < 0)
			goto out;
		r->done_at_start = js.done;
	}
	/* The helper thread must not take our signals. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&r->thr, NULL, completer, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		rc = -rc;
		goto out;
	}
	r->thr_started = 1;
	rc = loop(r);
out:
	if (r->thr_started) {
		pthread_mutex_lock(&r->mu);
		r->quit = 1;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thr, NULL);
		take_results(r);
	}
	if (r->slots) {
		for (unsigned i = 0; i < r->nslots; i++) {
			struct slot *s = &r->slots[i];
			if (s->busy && !s->exited && s->pid > 0) {
				kill(-s->pid, SIGKILL);
				while (waitpid(s->pid, &s->wstatus, 0) < 0 && errno == EINTR)
					;
			}
			slot_clear(s);
			mesh__capture_release(&s->cout);
			mesh__capture_release(&s->cerr);
			mesh_buf_release(&s->argbuf);
			free(s->envp);
			free(s->argv);
		}
		free(r->slots);
	}
	if (have_sig) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	sig_w = -1;
	sig_r = -1;
	if (sigp[0] >= 0)
		close(sigp[0]);
	if (sigp[1] >= 0)
		close(sigp[1]);
	if (r->nullfd >= 0)
		close(r->nullfd);
	if (r->evfd >= 0)
		close(r->evfd);
	mesh__spawner_release(&r->sp);
	mesh_exec_template_release(&r->tmpl);
	free(r->env_base);
	free(r->path);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	stats->wall_ns = mesh_mono_ns() - r->t0;
	return rc;
}
