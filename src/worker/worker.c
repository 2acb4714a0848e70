/* libmeshworker (include/mesh/worker.h): the worker's side of the control
 * channel and the node loop on its slot. */
#include "mesh/worker.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The node loop stores a heartbeat and looks at the control socket at least this often. */
#define HEARTBEAT_NS (250 * MESH_NS_PER_MS)
#define DEFAULT_SPIN_NS (50 * 1000ull)
/* After `ready`, how long the worker polls its channel for the first
 * command before it sleeps: a launched worker's `run` is there already
 * (sent at its spawn), else meshd sends it once it reads the `ready`
 * (soon after), and a sleeping process's wake-up costs more than the
 * wait, on the way to a job's first result (docs/DESIGN.md, "Figures
 * behind the code"). */
#define FIRST_RUN_SPIN_NS (1000 * 1000ull)

struct mesh_worker {
	int fd;
	int ready_sent;
	uint64_t spin_ns;
	uint32_t gen, slot;
	uint64_t chunk_id; /* the CHUNK being handled, UINT64_MAX for a plain request */
	struct mesh_slot_map map;
	struct mesh_buf req;	/* a request that came in pieces, or wrapped in the ring */
	uint32_t req_seq;	/* whose pieces req holds (req_open) */
	int req_open;
	uint8_t *rep_buf;	/* the handler's reply, MESH_MSG_MAX bytes (pages touched as used) */
	/* The request the handler answers, for mesh_worker_reply_part. */
	int in_call;
	uint32_t call_seq;
	int part_rc;		/* the first failure of a part put during this call */
};

/* What ended a node loop. */
enum loop_end { END_HALT, END_EXIT, END_CLOSED, END_BROKEN };

const char *mesh_worker_strerror(int err)
{
	/* The one ENOENT of this library: mesh_worker_open outside meshd. */
	if (err == -ENOENT)
		return "started outside meshd: MESH_CONTROL_FD is not set (meshd starts a worker from its catalog: "
		       "mesh call, mesh submit)";
	return mesh_strerror(err);
}

int mesh_worker_api_version(void)
{
	return MESH_WORKER_API_VERSION;
}

int mesh_worker_open(struct mesh_worker **out)
{
	*out = NULL;
	/* Before anything is printed: a crash must not lose buffered lines.
	 * stderr stays unbuffered (each fprintf is one write), which loses even less. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *e = getenv(MESH_CONTROL_FD_ENV);
	uint64_t fd;
	if (!e)
		return -ENOENT;
	if (mesh_parse_u64(e, 1u << 30, &fd) < 0)
		return -EBADF;
	struct stat st;
	if (fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -EBADF;
	int type = 0;
	socklen_t tl = sizeof type;
	if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET)
		return -EBADF;
	struct mesh_worker *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	/* The worker's own children must not hold meshd's channel open. */
	fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	w->fd = (int)fd;
	w->spin_ns = DEFAULT_SPIN_NS;
	w->chunk_id = UINT64_MAX;
	const char *spin = getenv("MESH_WORKER_SPIN_US");
	uint64_t us;
	if (spin && mesh_parse_u64(spin, 10ull * 1000 * 1000, &us) == 0)
		w->spin_ns = us * 1000;
	*out = w;
	return 0;
}

void mesh_worker_close(struct mesh_worker *w)
{
	if (!w)
		return;
	mesh__slot_unmap(&w->map);
	close(w->fd);
	mesh_buf_release(&w->req);
	free(w->rep_buf);
	free(w);
}

void mesh_worker_set_spin(struct mesh_worker *w, uint64_t spin_ns)
{
	w->spin_ns = spin_ns;
}

uint32_t mesh_worker_gen(const struct mesh_worker *w)
{
	return w->gen;
}

uint32_t mesh_worker_slot(const struct mesh_worker *w)
{
	return w->slot;
}

uint64_t mesh_worker_chunk_id(const struct mesh_worker *w)
{
	return w->chunk_id;
}

static int ensure_bufs(struct mesh_worker *w);

int mesh_worker_ready(struct mesh_worker *w)
{
	/* Its reply buffer before `ready`, not after `run`: the first chunk
	 * may be waiting already, and a 16 MiB allocation is not free
	 * (docs/jobs.md, "The first result").  One that fails is asked for
	 * again at `run`. */
	(void)ensure_bufs(w);
	int rc = mesh__ctl_send(w->fd, "ready", -1);
	if (rc == 0)
		w->ready_sent = 1;
	return rc;
}

static void sendf(struct mesh_worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sendf(struct mesh_worker *w, const char *fmt, ...)
{
	char text[MESH_CTL_MAX + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	mesh__ctl_send(w->fd, text, -1);
}

/* Receives one command; fd[0] and fd[1] get the fds passed with a `run`
 * (its slot's memfd and bell; else -1).  block: wait for one.  0; -EAGAIN
 * (non-blocking, none); MESH_E_CLOSED; MESH_E_PROTO (answered). */
static int recv_cmd(struct mesh_worker *w, struct mesh_wcmd *cmd, int fd[2], int block)
{
	uint8_t buf[MESH_CTL_MAX + 1];
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} cbuf;
	struct iovec iov = {buf, sizeof buf};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
	fd[0] = fd[1] = -1;
	ssize_t n;
	do
		n = recvmsg(w->fd, &mh, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : MESH_E_CLOSED;
	if (n == 0)
		return MESH_E_CLOSED;
	int nfds = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
			if (nfds < 2)
				fd[nfds] = f;
			else
				close(f);
			nfds++;
		}
	}
	int rc = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? MESH_E_PROTO : mesh__wcmd_parse(buf, (size_t)n, cmd);
	if (rc == 0 && nfds != (cmd->kind == MESH_WCMD_RUN ? 2 : 0))
		rc = MESH_E_PROTO;
	if (rc < 0) {
		for (int i = 0; i < 2; i++) {
			if (fd[i] >= 0)
				close(fd[i]);
			fd[i] = -1;
		}
		sendf(w, "fail malformed command");
	}
	return rc;
}

static int ensure_bufs(struct mesh_worker *w)
{
	if (!w->rep_buf)
		w->rep_buf = malloc(MESH_MSG_MAX);
	return w->rep_buf ? 0 : -ENOMEM;
}

/* Looks at the control socket while running (between requests). */
static int poll_control(struct mesh_worker *w, enum loop_end *end)
{
	struct mesh_wcmd cmd;
	int fd[2];
	int rc = recv_cmd(w, &cmd, fd, 0);
	if (rc == -EAGAIN || rc == MESH_E_PROTO)
		return 0;
	if (rc < 0) {
		*end = END_CLOSED;
		return 1;
	}
	switch (cmd.kind) {
	case MESH_WCMD_HALT:
		*end = END_HALT;
		return 1;
	case MESH_WCMD_EXIT:
		*end = END_EXIT;
		return 1;
	case MESH_WCMD_RUN:
		close(fd[0]);
		close(fd[1]);
		sendf(w, "fail run %u while gen %u runs", cmd.gen, w->gen);
		return 0;
	}
	return 0;
}

static void heartbeat(struct mesh_worker *w)
{
	atomic_store_explicit(&w->map.hdr->heartbeat_ns, mesh_mono_ns(), memory_order_release);
}

/* Puts one message on the reply ring (in pieces when it is larger than a
 * record), waiting for room; 0, 1 if shutdown came first, <0 broken. */
static int put_reply(struct mesh_worker *w, uint32_t kind, uint32_t seq, const void *p, size_t n)
{
	struct mesh_ring *r = &w->map.rep;
	struct mesh_ring_tx tx;
	mesh_ring_tx_init(&tx, kind, seq, p, n);
	for (;;) {
		int rc = mesh_ring_tx_put(r, &tx);
		if (rc != -EAGAIN)
			return rc == 1 ? 0 : rc;
		rc = mesh_ring_wait_space(r, mesh_ring_tx_next(r, &tx), w->spin_ns, HEARTBEAT_NS,
					  &w->map.hdr->shutdown);
		if (rc == 1 || (rc < 0 && rc != MESH_E_TIMEOUT))
			return rc;
		heartbeat(w);
	}
}

int mesh_worker_reply_part(struct mesh_worker *w, const void *p, size_t n)
{
	if (!w->in_call)
		return MESH_E_STATE;
	if (n > MESH_MSG_MAX)
		return MESH_E_TOOBIG;
	if (w->part_rc)
		return w->part_rc;
	int rc = put_reply(w, MESH_MSG_PART, w->call_seq, p, n);
	if (rc == 1)
		rc = MESH_E_STOPPED; /* HALT or EXIT: meshd takes no more of this reply */
	w->part_rc = rc;
	heartbeat(w);
	return rc;
}

/* Takes the next request off the ring, joining pieces: 1 with *m the last
 * record (REQ or CHUNK: its kind is the message's) and *req, *n the whole
 * request (in the ring or in w->req) -- pop
 * *m once done with it; 0 when none is complete yet (a piece was taken or
 * the ring is empty: *empty says which); <0 the ring is broken (*why). */
static int take_request(struct mesh_worker *w, struct mesh_msg *m, const void **req, size_t *n, int *empty,
			const char **why)
{
	*empty = 0;
	int rc = mesh_ring_peek(&w->map.req, m);
	if (rc == -EAGAIN) {
		*empty = 1;
		return 0;
	}
	if (rc < 0) {
		*why = w->map.req.why;
		return rc;
	}
	if (m->kind != MESH_MSG_REQ && m->kind != MESH_MSG_CHUNK && m->kind != MESH_MSG_MORE) {
		*why = "not a request";
		return MESH_E_PROTO;
	}
	/* Pieces of another seq: meshd gave up on that request half-sent. */
	if (w->req_open && w->req_seq != m->seq) {
		w->req_open = 0;
		mesh_buf_reset(&w->req);
	}
	if (m->kind != MESH_MSG_MORE && !w->req_open && m->n2 == 0) {
		*req = m->p1; /* whole and contiguous: the handler reads it in place */
		*n = m->len;
		return 1;
	}
	if (m->len > MESH_MSG_MAX - w->req.len) {
		*why = "a request over the message limit";
		return MESH_E_PROTO;
	}
	if (mesh_buf_grow(&w->req, m->len) < 0) {
		*why = "out of memory for a request";
		return -ENOMEM;
	}
	mesh_msg_copy(m, w->req.p + w->req.len);
	w->req.len += m->len;
	if (m->kind == MESH_MSG_MORE) {
		w->req_open = 1;
		w->req_seq = m->seq;
		mesh_ring_pop(&w->map.req);
		return 0;
	}
	w->req_open = 0;
	*req = w->req.p;
	*n = w->req.len;
	return 1;
}

/* Runs the handler on the request m (a chunk's header taken off its
 * input) and puts its reply or error in the reply ring.  0, or -1 when a
 * ring broke (said to meshd). */
static int serve_one(struct mesh_worker *w, const struct mesh_msg *m, const void *req, size_t n,
		     mesh_worker_handler handler, void *ctx)
{
	struct mesh_slot_hdr *h = w->map.hdr;
	size_t cap = MESH_MSG_MAX;
	atomic_fetch_add_explicit(&h->requests, 1, memory_order_release);
	w->chunk_id = UINT64_MAX;
	if (m->kind == MESH_MSG_CHUNK) {
		/* The handler sees only the input: a `mesh call` worker
		 * serves jobs unchanged. */
		const uint8_t *c = req;
		uint64_t cid = 0;
		for (int i = 7; i >= 0; i--)
			cid = cid << 8 | c[i];
		w->chunk_id = cid;
		req = c + MESH_CHUNK_HDR;
		n -= MESH_CHUNK_HDR;
	}
	size_t out = 0;
	w->in_call = 1;
	w->call_seq = m->seq;
	w->part_rc = 0;
	int hr = handler(ctx, req, n, w->rep_buf, cap, &out);
	w->in_call = 0;
	w->chunk_id = UINT64_MAX;
	uint32_t seq = m->seq;
	mesh_ring_pop(&w->map.req);
	mesh_buf_reset(&w->req);
	if (w->part_rc == MESH_E_STOPPED)
		return 0; /* shutdown: seen at the top */
	if (w->part_rc < 0) {
		sendf(w, "fail reply ring: %s", w->map.rep.why);
		return -1;
	}
	uint32_t kind = MESH_MSG_REP;
	if (hr < 0 || out > cap) {
		kind = MESH_MSG_ERR;
		if (out == 0 || out > cap)
			out = (size_t)snprintf((char *)w->rep_buf, cap, "handler failed: %s",
					       out > cap ? "reply longer than the message limit (16 MiB)"
							 : mesh_worker_strerror(hr));
	}
	/* Counted before it is published: meshd never sees a reply it cannot count. */
	atomic_fetch_add_explicit(kind == MESH_MSG_REP ? &h->replies : &h->errors, 1, memory_order_release);
	int rc = put_reply(w, kind, seq, w->rep_buf, out);
	if (rc == 1)
		return 0; /* shutdown: seen at the top */
	if (rc < 0) {
		sendf(w, "fail reply ring: %s", w->map.rep.why);
		return -1;
	}
	heartbeat(w);
	return 0;
}

static enum loop_end node_loop(struct mesh_worker *w, mesh_worker_handler handler, void *ctx)
{
	struct mesh_slot_hdr *h = w->map.hdr;
	enum loop_end end = END_BROKEN;
	w->req_open = 0;
	mesh_buf_reset(&w->req);
	for (;;) {
		uint32_t sd = atomic_load_explicit(&h->shutdown, memory_order_acquire);
		if (sd == MESH_SHUTDOWN_HALT)
			return END_HALT;
		if (sd != MESH_SHUTDOWN_NONE)
			return END_EXIT;
		struct mesh_msg m;
		const void *req = NULL;
		size_t n = 0;
		const char *why = NULL;
		int empty;
		int rc = take_request(w, &m, &req, &n, &empty, &why);
		if (rc == 0 && empty) {
			rc = mesh_ring_wait_data(&w->map.req, w->spin_ns, HEARTBEAT_NS, &h->shutdown);
			heartbeat(w);
			if (rc == MESH_E_TIMEOUT && poll_control(w, &end))
				return end;
			continue;
		}
		if (rc == 0)
			continue;
		if (rc < 0) {
			sendf(w, "fail request ring: %s", why);
			return END_BROKEN;
		}
		if (m.kind == MESH_MSG_CHUNK && n < MESH_CHUNK_HDR) {
			sendf(w, "fail request ring: chunk shorter than its header");
			return END_BROKEN;
		}
		if (serve_one(w, &m, req, n, handler, ctx) < 0)
			return END_BROKEN;
	}
}

/* Maps the slot of a run and serves it until HALT or EXIT. */
static enum loop_end run(struct mesh_worker *w, const struct mesh_wcmd *cmd, const int fd[2],
			 mesh_worker_handler handler, void *ctx)
{
	int bell = fd[1];
	int rc = mesh__slot_map(fd[0], bell, cmd->slot, &w->map);
	close(fd[0]);
	if (rc == 0)
		rc = ensure_bufs(w);
	if (rc == 0 && atomic_load(&w->map.hdr->gen) != cmd->gen)
		rc = MESH_E_MISMATCH;
	if (rc < 0) {
		mesh__slot_unmap(&w->map);
		close(bell);
		sendf(w, "fail run %u %u: %s", cmd->gen, cmd->slot, mesh_strerror(rc));
		return END_HALT; /* refused: back to waiting, as before the run */
	}
	w->gen = cmd->gen;
	w->slot = cmd->slot;
	struct mesh_slot_hdr *h = w->map.hdr;
	atomic_store(&h->heartbeat_ns, mesh_mono_ns());
	atomic_store(&h->online, cmd->gen);
	atomic_store(&h->state, MESH_SLOT_RUNNING);
	sendf(w, "online %u", cmd->gen);
	enum loop_end end = node_loop(w, handler, ctx);
	atomic_store(&h->online, 0);
	atomic_store(&h->state, end == END_HALT ? MESH_SLOT_HALTED : MESH_SLOT_EXITED);
	mesh__slot_unmap(&w->map);
	close(bell);
	if (end == END_HALT)
		sendf(w, "halted %u", cmd->gen);
	return end;
}

int mesh_worker_serve(struct mesh_worker *w, mesh_worker_handler handler, void *ctx)
{
	if (!w->ready_sent) {
		int rc = mesh_worker_ready(w);
		if (rc < 0)
			return rc;
	}
	uint64_t spin_until = mesh_mono_ns() + FIRST_RUN_SPIN_NS;
	for (;;) {
		struct mesh_wcmd cmd;
		int fd[2];
		int rc;
		/* The first command: polled for a while, then waited for. */
		while ((rc = recv_cmd(w, &cmd, fd, 0)) == -EAGAIN && mesh_mono_ns() < spin_until)
			; /* each try is a system call: no pause needed between */
		if (rc == -EAGAIN)
			rc = recv_cmd(w, &cmd, fd, 1);
		spin_until = 0;
		if (rc == MESH_E_PROTO)
			continue;
		if (rc < 0)
			return MESH_E_CLOSED;
		switch (cmd.kind) {
		case MESH_WCMD_HALT:
			continue; /* nothing runs; a late duplicate of a HALT seen in the slot */
		case MESH_WCMD_EXIT:
			return 0;
		case MESH_WCMD_RUN:
			switch (run(w, &cmd, fd, handler, ctx)) {
			case END_HALT:
				continue;
			case END_EXIT:
				return 0;
			case END_CLOSED:
				return MESH_E_CLOSED;
			case END_BROKEN:
				return MESH_E_PROTO;
			}
		}
	}
}
