/* Slots: creation and meshd's side of a call (shm.h). */
#include "shm/shm.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(struct mesh_ring_ctl) == 256, "ring control is 256 bytes");
_Static_assert(offsetof(struct mesh_slot_hdr, state) == 64, "state @64");
_Static_assert(offsetof(struct mesh_slot_hdr, heartbeat_ns) == 80, "heartbeat @80");
_Static_assert(offsetof(struct mesh_slot_hdr, errors) == 104, "errors @104");
_Static_assert(offsetof(struct mesh_slot_hdr, req) == 256, "request ring control @256");
_Static_assert(offsetof(struct mesh_slot_hdr, rep) == 512, "reply ring control @512");
_Static_assert(sizeof(struct mesh_slot_hdr) <= MESH_SLOT_HDR_SIZE, "header fits its page");

struct mesh_slot {
	int fd;
	int bell;			/* eventfd: the worker rings it when asked (mesh_slot_bell_arm) */
	uint32_t index;
	uint64_t cap;
	size_t size;
	struct mesh_slot_hdr *hdr;
	struct mesh_ring req, rep; /* meshd produces req, consumes rep */
	uint32_t gen, seq;
	_Atomic uint64_t sent;		/* requests begun since the run's arm (mesh_slot_sent) */
	_Atomic uint32_t shutdown;	/* meshd's own copy, never read back from the slot */
	pthread_mutex_t call_lock;	/* one call at a time */
	pthread_mutex_t why_lock;
	_Atomic uint32_t failed;
	_Atomic uint32_t stop;		/* a waiting call gives up: failed or shut down */
	char why[200];
	/* Pipelined use (call_lock): the oldest request not yet answered, how
	 * many are out, and where a two-part request is put together. */
	uint32_t pipe_next, pipe_out;
	uint8_t *pipe_buf;
	size_t pipe_cap;
	/* The reply to pipe_next received so far (it may come in pieces, or
	 * streamed parts that a pipelined caller gets joined). */
	struct mesh_buf pipe_cur, pipe_acc;
	/* A pipelined request larger than one record, being put in pieces:
	 * its copy (tx_buf), how far it went (tx), tx_open until its last
	 * piece is in (mesh_slot_bell_arm puts the rest as room comes). */
	struct mesh_ring_tx tx;
	uint8_t *tx_buf;
	_Atomic uint32_t tx_open;
};

/* A waiting call, and the pipeline's owner, give up: the slot failed, was
 * shut down or is being armed again (stop before the bell: a poller woken
 * by it sees stop). */
static void stop_waiters(struct mesh_slot *s)
{
	atomic_store(&s->stop, 1);
	mesh_efd_ring(s->bell);
}

/* One more request begun (call_lock held: one writer at a time, so no
 * locked add on the pipeline's path; readers on other threads). */
static void count_sent(struct mesh_slot *s)
{
	atomic_store_explicit(&s->sent, atomic_load_explicit(&s->sent, memory_order_relaxed) + 1, memory_order_relaxed);
}

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

int mesh_slot_create(struct mesh_slot **out, uint32_t index, size_t ring_bytes)
{
	*out = NULL;
	if (ring_bytes == 0)
		ring_bytes = MESH_SLOT_DEFAULT_RING;
	if (!is_pow2(ring_bytes) || ring_bytes < MESH_RING_MIN_CAP || ring_bytes > MESH_RING_MAX_CAP)
		return MESH_E_RANGE;
	struct mesh_slot *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->index = index;
	s->cap = ring_bytes;
	s->size = MESH_SLOT_HDR_SIZE + 2 * ring_bytes;
	char name[32];
	snprintf(name, sizeof name, "mesh-slot-%u", index);
	s->bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->bell < 0) {
		free(s);
		return -errno;
	}
	s->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->fd < 0)
		goto fail;
	if (ftruncate(s->fd, (off_t)s->size) < 0)
		goto fail;
	/* A worker holds this fd: sealing the size means it cannot shrink the
	 * file under meshd's mapping (which would SIGBUS meshd). */
	if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	void *p = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	s->hdr = p;
	pthread_mutex_init(&s->call_lock, NULL);
	pthread_mutex_init(&s->why_lock, NULL);
	mesh_slot_arm(s, 0);
	*out = s;
	return 0;
fail:;
	int err = -errno;
	if (s->fd >= 0)
		close(s->fd);
	close(s->bell);
	free(s);
	return err;
}

void mesh_slot_free(struct mesh_slot *s)
{
	if (!s)
		return;
	munmap(s->hdr, s->size);
	close(s->fd);
	close(s->bell);
	pthread_mutex_destroy(&s->call_lock);
	pthread_mutex_destroy(&s->why_lock);
	free(s->pipe_buf);
	free(s->tx_buf);
	mesh_buf_release(&s->pipe_cur);
	mesh_buf_release(&s->pipe_acc);
	free(s);
}

int mesh_slot_fd(const struct mesh_slot *s)
{
	return s->fd;
}

int mesh_slot_bell(const struct mesh_slot *s)
{
	return s->bell;
}

uint32_t mesh_slot_index(const struct mesh_slot *s)
{
	return s->index;
}

size_t mesh_slot_max_msg(const struct mesh_slot *s)
{
	(void)s;
	return MESH_MSG_MAX;
}

size_t mesh_slot_max_send(const struct mesh_slot *s)
{
	return MESH_RING_MAX_MSG(s->cap);
}

size_t mesh_slot_ring_cap(const struct mesh_slot *s)
{
	return (size_t)s->cap;
}

void mesh_slot_arm(struct mesh_slot *s, uint32_t gen)
{
	/* A call still waiting on the old run gives up now instead of holding the lock. */
	stop_waiters(s);
	mesh_ring_kick(&s->hdr->rep);
	mesh_ring_kick(&s->hdr->req);
	pthread_mutex_lock(&s->call_lock);
	struct mesh_slot_hdr *h = s->hdr;
	h->magic = MESH_SLOT_MAGIC;
	h->version = MESH_SLOT_VERSION;
	h->size = s->size;
	h->index = s->index;
	h->ring_cap = (uint32_t)s->cap;
	atomic_store(&h->state, MESH_SLOT_IDLE);
	atomic_store(&h->gen, gen);
	atomic_store(&h->shutdown, MESH_SHUTDOWN_NONE);
	atomic_store(&h->online, 0);
	atomic_store(&h->heartbeat_ns, 0);
	atomic_store(&h->requests, 0);
	atomic_store(&h->replies, 0);
	atomic_store(&h->errors, 0);
	uint8_t *base = (uint8_t *)s->hdr;
	mesh_ring_init(&s->req, &h->req, base + MESH_SLOT_HDR_SIZE, s->cap);
	mesh_ring_init(&s->rep, &h->rep, base + MESH_SLOT_HDR_SIZE + s->cap, s->cap);
	s->gen = gen;
	s->seq = 0;
	atomic_store(&s->sent, 0);
	s->pipe_next = 1;
	s->pipe_out = 0;
	free(s->tx_buf);
	s->tx_buf = NULL;
	atomic_store(&s->tx_open, 0);
	mesh_buf_reset(&s->pipe_cur);
	mesh_buf_reset(&s->pipe_acc);
	atomic_store(&s->shutdown, MESH_SHUTDOWN_NONE);
	pthread_mutex_lock(&s->why_lock);
	s->why[0] = 0;
	atomic_store(&s->failed, 0);
	atomic_store(&s->stop, 0);
	pthread_mutex_unlock(&s->why_lock);
	pthread_mutex_unlock(&s->call_lock);
}

void mesh_slot_set_shutdown(struct mesh_slot *s, enum mesh_shutdown how)
{
	atomic_store(&s->shutdown, how);
	stop_waiters(s);
	atomic_store(&s->hdr->shutdown, how);
	mesh_ring_kick(&s->hdr->req);
	mesh_ring_kick(&s->hdr->rep);
}

void mesh_slot_fail(struct mesh_slot *s, const char *fmt, ...)
{
	pthread_mutex_lock(&s->why_lock);
	if (!atomic_load(&s->failed)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->why, sizeof s->why, fmt, ap);
		va_end(ap);
		atomic_store(&s->failed, 1);
	}
	stop_waiters(s);
	pthread_mutex_unlock(&s->why_lock);
	/* A call waiting on the reply ring watches s->failed; wake it. */
	mesh_ring_kick(&s->hdr->rep);
	mesh_ring_kick(&s->hdr->req);
}

const char *mesh_slot_failed(const struct mesh_slot *s)
{
	return atomic_load(&s->failed) ? s->why : NULL;
}

static int fail_ring(struct mesh_slot *s, const char *which, const struct mesh_ring *r)
{
	mesh_slot_fail(s, "slot %u: %s ring: %s", s->index, which, r->why);
	return MESH_E_CORRUPT;
}

static uint64_t left_ns(uint64_t deadline)
{
	uint64_t now = mesh_mono_ns();
	return now >= deadline ? 0 : deadline - now;
}

/* Puts the records of a request (tx) that fit now: 1 once its last is in,
 * -EAGAIN when the rest waits for room, MESH_E_CORRUPT (the slot failed).
 * The one way a request goes out in pieces, a call's (send_request) and a
 * pipelined one's (mesh_slot_send, then mesh_slot_wait_reply). */
static int tx_put(struct mesh_slot *s, struct mesh_ring_tx *tx)
{
	int rc = mesh_ring_tx_put(&s->req, tx);
	return rc == MESH_E_CORRUPT ? fail_ring(s, "request", &s->req) : rc;
}

/* Waits for room for tx's next record: 0; MESH_E_STATE (the slot failed
 * or was shut down), MESH_E_TIMEOUT at deadline, MESH_E_CORRUPT (the slot
 * failed). */
static int tx_wait(struct mesh_slot *s, const struct mesh_ring_tx *tx, uint64_t deadline, uint64_t spin_ns)
{
	int rc = mesh_ring_wait_space(&s->req, mesh_ring_tx_next(&s->req, tx), spin_ns, left_ns(deadline), &s->stop);
	if (rc == MESH_E_CORRUPT)
		return fail_ring(s, "request", &s->req);
	return rc == 1 ? MESH_E_STATE : rc;
}

/* Sends the request (in pieces when it is larger than one record). */
static int send_request(struct mesh_slot *s, uint32_t seq, const void *req, size_t n, uint64_t deadline,
			uint64_t spin_ns)
{
	struct mesh_ring_tx tx;
	mesh_ring_tx_init(&tx, MESH_MSG_REQ, seq, req, n);
	for (;;) {
		int rc = tx_put(s, &tx);
		if (rc == 1)
			return 0;
		if (rc != -EAGAIN)
			return rc;
		if ((rc = tx_wait(s, &tx, deadline, spin_ns)) < 0)
			return rc;
	}
}

/* A reply being received: the records of the part in hand (cur) and, when
 * the caller takes the whole reply at once, the parts before it (acc). */
struct rx {
	mesh_slot_part_fn on_part;
	void *arg;
	struct mesh_buf cur, acc;
};

static int add_msg(struct mesh_buf *b, const struct mesh_msg *m)
{
	if (mesh_buf_grow(b, m->len) < 0)
		return -ENOMEM;
	mesh_msg_copy(m, b->p + b->len);
	b->len += m->len;
	b->p[b->len] = 0;
	return 0;
}

/* Takes one record of the reply to seq: 1 when the reply is complete
 * (*kind REP or ERR; the payload to return is in x->cur), 0 when more is to
 * come, or a negative code. */
static int take_reply_record(struct mesh_slot *s, struct rx *x, const struct mesh_msg *m, uint32_t *kind)
{
	if (m->kind != MESH_MSG_REP && m->kind != MESH_MSG_ERR && m->kind != MESH_MSG_MORE &&
	    m->kind != MESH_MSG_PART) {
		mesh_slot_fail(s, "slot %u: reply ring: message of kind %u where a reply belongs", s->index, m->kind);
		return MESH_E_CORRUPT;
	}
	if (m->len > MESH_MSG_MAX - x->cur.len) {
		mesh_slot_fail(s, "slot %u: reply ring: a reply part over the %u-byte message limit", s->index,
			       MESH_MSG_MAX);
		return MESH_E_CORRUPT;
	}
	if (add_msg(&x->cur, m) < 0)
		return -ENOMEM;
	if (m->kind == MESH_MSG_MORE)
		return 0;
	if (m->kind != MESH_MSG_PART) {
		*kind = m->kind;
		if (m->kind == MESH_MSG_REP && !x->on_part && x->acc.len) {
			/* The whole reply at once: the streamed parts, then the last. */
			if (x->cur.len > MESH_MSG_MAX - x->acc.len)
				return MESH_E_TOOBIG;
			if (mesh_buf_add(&x->acc, x->cur.p, x->cur.len) < 0)
				return -ENOMEM;
			struct mesh_buf t = x->cur;
			x->cur = x->acc;
			x->acc = t;
		}
		return 1;
	}
	int rc = 0;
	if (x->on_part)
		rc = x->cur.len ? x->on_part(x->arg, x->cur.p, x->cur.len) : 0;
	else if (x->cur.len > MESH_MSG_MAX - x->acc.len)
		rc = MESH_E_TOOBIG;
	else if (mesh_buf_add(&x->acc, x->cur.p, x->cur.len) < 0)
		rc = -ENOMEM;
	mesh_buf_reset(&x->cur);
	return rc;
}

/* Waits for the reply to seq, skipping replies to earlier calls that timed out. */
static int recv_reply(struct mesh_slot *s, uint32_t seq, struct rx *x, uint32_t *kind, uint64_t deadline,
		      uint64_t spin_ns)
{
	uint64_t skipped = 0;
	for (;;) {
		struct mesh_msg m;
		int rc = mesh_ring_peek(&s->rep, &m);
		if (rc == MESH_E_CORRUPT)
			return fail_ring(s, "reply", &s->rep);
		if (rc == 0) {
			if (m.seq != seq) {
				/* A reply (or a piece of one) to an earlier call that timed
				 * out: drop it.  A seq meshd never sent is a broken worker. */
				if ((int32_t)(m.seq - seq) < 0 && m.seq != 0) {
					mesh_ring_pop(&s->rep);
					/* More than a ringful of them is a worker flooding us. */
					if (++skipped > s->cap / MESH_RING_HDR && left_ns(deadline) == 0)
						return MESH_E_TIMEOUT;
					continue;
				}
				mesh_slot_fail(s, "slot %u: reply ring: reply to request %u, which was never sent",
					       s->index, m.seq);
				return MESH_E_CORRUPT;
			}
			rc = take_reply_record(s, x, &m, kind);
			if (rc != MESH_E_CORRUPT)
				mesh_ring_pop(&s->rep);
			if (rc != 0)
				return rc;
			continue;
		}
		rc = mesh_ring_wait_data(&s->rep, spin_ns, left_ns(deadline), &s->stop);
		if (rc == 1)
			return MESH_E_STATE;
		if (rc < 0)
			return rc;
	}
}

static int call_locked(struct mesh_slot *s, const void *req, size_t n, mesh_slot_part_fn on_part, void *arg,
		       void **reply, size_t *reply_len, uint64_t timeout_ns, uint64_t spin_ns)
{
	if (atomic_load(&s->failed) || atomic_load(&s->shutdown) != MESH_SHUTDOWN_NONE)
		return MESH_E_STATE;
	if (n > MESH_MSG_MAX)
		return MESH_E_TOOBIG;
	uint64_t now = mesh_mono_ns();
	uint64_t deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
	uint32_t seq = ++s->seq;
	if (seq == 0) /* 0 is never a sequence number */
		seq = s->seq = 1;
	count_sent(s);
	int rc = send_request(s, seq, req, n, deadline, spin_ns);
	if (rc < 0)
		return rc;
	struct rx x = {on_part, arg, MESH_BUF_INIT, MESH_BUF_INIT};
	uint32_t kind = 0;
	rc = recv_reply(s, seq, &x, &kind, deadline, spin_ns);
	mesh_buf_release(&x.acc);
	if (rc == 1 && !x.cur.p && mesh_buf_grow(&x.cur, 0) < 0)
		rc = -ENOMEM;
	if (rc != 1) {
		mesh_buf_release(&x.cur);
		return rc;
	}
	*reply = mesh_buf_detach(&x.cur, reply_len);
	return kind == MESH_MSG_REP ? 0 : MESH_E_REFUSED;
}

int mesh_slot_call(struct mesh_slot *s, const void *req, size_t n, void **reply, size_t *reply_len,
		   uint64_t timeout_ns, uint64_t spin_ns)
{
	return mesh_slot_call_stream(s, req, n, NULL, NULL, reply, reply_len, timeout_ns, spin_ns);
}

int mesh_slot_call_stream(struct mesh_slot *s, const void *req, size_t n, mesh_slot_part_fn on_part, void *arg,
			  void **reply, size_t *reply_len, uint64_t timeout_ns, uint64_t spin_ns)
{
	*reply = NULL;
	*reply_len = 0;
	pthread_mutex_lock(&s->call_lock);
	int rc = call_locked(s, req, n, on_part, arg, reply, reply_len, timeout_ns, spin_ns);
	pthread_mutex_unlock(&s->call_lock);
	return rc;
}

int mesh_slot_stats(struct mesh_slot *s, struct mesh_slot_stats *st)
{
	struct mesh_slot_hdr *h = s->hdr;
	memset(st, 0, sizeof *st);
	/* The worker bumps requests before replies/errors: read those first so an
	 * honest worker always satisfies replies + errors <= requests. */
	uint64_t replies = atomic_load_explicit(&h->replies, memory_order_acquire);
	uint64_t errors = atomic_load_explicit(&h->errors, memory_order_acquire);
	uint64_t requests = atomic_load_explicit(&h->requests, memory_order_acquire);
	uint32_t state = atomic_load_explicit(&h->state, memory_order_acquire);
	uint32_t online = atomic_load_explicit(&h->online, memory_order_acquire);
	uint64_t hb = atomic_load_explicit(&h->heartbeat_ns, memory_order_acquire);
	if (state > MESH_SLOT__MAX) {
		mesh_slot_fail(s, "slot %u: state word %u is not a state", s->index, state);
		return MESH_E_CORRUPT;
	}
	if (online != 0 && online != s->gen) {
		mesh_slot_fail(s, "slot %u: online word %u is neither 0 nor the run's gen %u", s->index, online,
			       s->gen);
		return MESH_E_CORRUPT;
	}
	if (hb > mesh_mono_ns() + MESH_NS_PER_S) {
		mesh_slot_fail(s, "slot %u: heartbeat %llu ns lies in the future", s->index, (unsigned long long)hb);
		return MESH_E_CORRUPT;
	}
	if (replies > requests || errors > requests - replies) {
		mesh_slot_fail(s, "slot %u: %llu replies + %llu errors for %llu requests", s->index,
			       (unsigned long long)replies, (unsigned long long)errors, (unsigned long long)requests);
		return MESH_E_CORRUPT;
	}
	st->state = state;
	st->gen = s->gen;
	st->online = online;
	st->heartbeat_ns = hb;
	st->requests = requests;
	st->replies = replies;
	st->errors = errors;
	return 0;
}

int mesh__slot_map(int fd, int bell, uint32_t expect_index, struct mesh_slot_map *m)
{
	memset(m, 0, sizeof *m);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)MESH_SLOT_HDR_SIZE)
		return MESH_E_FOREIGN;
	size_t size = (size_t)st.st_size;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	struct mesh_slot_hdr *h = p;
	int rc = 0;
	uint64_t cap = h->ring_cap;
	if (h->magic != MESH_SLOT_MAGIC)
		rc = MESH_E_FOREIGN;
	else if (h->version != MESH_SLOT_VERSION)
		rc = MESH_E_VERSION;
	else if (h->size != size || !is_pow2(cap) || cap < MESH_RING_MIN_CAP || cap > MESH_RING_MAX_CAP ||
		 MESH_SLOT_HDR_SIZE + 2 * cap != size || h->index != expect_index)
		rc = MESH_E_CORRUPT;
	if (rc < 0) {
		munmap(p, size);
		return rc;
	}
	m->hdr = h;
	m->size = size;
	mesh_ring_attach(&m->req, &h->req, (uint8_t *)p + MESH_SLOT_HDR_SIZE, cap, 0);
	mesh_ring_attach(&m->rep, &h->rep, (uint8_t *)p + MESH_SLOT_HDR_SIZE + cap, cap, 1);
	m->req.bell = m->rep.bell = bell;
	return 0;
}

void mesh__slot_unmap(struct mesh_slot_map *m)
{
	if (m->hdr)
		munmap(m->hdr, m->size);
	memset(m, 0, sizeof *m);
}

/* ---- pipelined use (shm.h) ---- */

/* One record: the request put whole (published when pub), or -EAGAIN
 * (no room now). */
static int send_one(struct mesh_slot *s, uint32_t kind, uint32_t seq, const void *hdr, size_t hn, const void *p,
		    size_t n, int pub)
{
	const void *msg = p;
	if (hn) {
		if (hn + n > s->pipe_cap) {
			size_t max = mesh_slot_max_send(s);
			size_t cap = (hn + n) * 2 < max ? (hn + n) * 2 : max;
			uint8_t *b = realloc(s->pipe_buf, cap);
			if (!b)
				return -ENOMEM;
			s->pipe_buf = b;
			s->pipe_cap = cap;
		}
		memcpy(s->pipe_buf, hdr, hn);
		if (n)
			memcpy(s->pipe_buf + hn, p, n);
		msg = s->pipe_buf;
	}
	int rc = pub ? mesh_ring_put(&s->req, kind, seq, msg, hn + n)
		     : mesh_ring_put_nopub(&s->req, kind, seq, msg, hn + n);
	return rc == MESH_E_CORRUPT ? fail_ring(s, "request", &s->req) : rc;
}

/* Larger than one record: a copy put in pieces, those that fit now; the
 * rest is mesh_slot_bell_arm's (the bell tells a poller on another thread
 * to put it).  0 or -ENOMEM, MESH_E_CORRUPT. */
static int send_pieces(struct mesh_slot *s, uint32_t kind, uint32_t seq, const void *hdr, size_t hn, const void *p,
		       size_t n)
{
	uint8_t *b = malloc(hn + n);
	if (!b)
		return -ENOMEM;
	memcpy(b, hdr, hn);
	memcpy(b + hn, p, n);
	mesh_ring_tx_init(&s->tx, kind, seq, b, hn + n);
	int rc = tx_put(s, &s->tx);
	if (rc != -EAGAIN) {
		free(b);
		return rc == 1 ? 0 : rc;
	}
	s->tx_buf = b;
	atomic_store(&s->tx_open, 1);
	mesh_efd_ring(s->bell);
	return 0;
}

static int send_req(struct mesh_slot *s, uint32_t kind, const void *hdr, size_t hn, const void *p, size_t n,
		    uint32_t *seq_out, int pub)
{
	int rc;
	if (kind != MESH_MSG_REQ && kind != MESH_MSG_CHUNK)
		return -EINVAL;
	if (hn > MESH_MSG_MAX || n > MESH_MSG_MAX - hn)
		return MESH_E_TOOBIG;
	pthread_mutex_lock(&s->call_lock);
	if (atomic_load(&s->failed) || atomic_load(&s->shutdown) != MESH_SHUTDOWN_NONE) {
		rc = MESH_E_STATE;
		goto out;
	}
	if (atomic_load(&s->tx_open)) {
		rc = -EAGAIN; /* the one before is still going in */
		goto out;
	}
	uint32_t seq = s->seq + 1;
	if (seq == 0) /* 0 is never a sequence number */
		seq = 1;
	if (hn + n <= mesh_slot_max_send(s))
		rc = send_one(s, kind, seq, hdr, hn, p, n, pub);
	else if (s->pipe_out)
		rc = -EAGAIN; /* in pieces only behind no request: none can be answered meanwhile */
	else
		rc = send_pieces(s, kind, seq, hdr, hn, p, n);
	if (rc < 0)
		goto out;
	s->seq = seq;
	count_sent(s);
	if (s->pipe_out++ == 0)
		s->pipe_next = seq;
	*seq_out = seq;
out:
	pthread_mutex_unlock(&s->call_lock);
	return rc;
}

int mesh_slot_send(struct mesh_slot *s, uint32_t kind, const void *hdr, size_t hn, const void *p, size_t n,
		   uint32_t *seq_out)
{
	return send_req(s, kind, hdr, hn, p, n, seq_out, 1);
}

int mesh_slot_send_held(struct mesh_slot *s, uint32_t kind, const void *hdr, size_t hn, const void *p, size_t n,
			uint32_t *seq_out)
{
	return send_req(s, kind, hdr, hn, p, n, seq_out, 0);
}

void mesh_slot_publish(struct mesh_slot *s)
{
	pthread_mutex_lock(&s->call_lock);
	mesh_ring_flush(&s->req);
	pthread_mutex_unlock(&s->call_lock);
}

int mesh_slot_sending(const struct mesh_slot *s)
{
	return (int)atomic_load(&s->tx_open);
}

/* The pipeline's request in pieces: the records that fit now (1 once all
 * are in), then (0) the caller waits for room; <0 the slot failed. */
static int send_rest(struct mesh_slot *s)
{
	if (!atomic_load(&s->tx_open))
		return 1; /* the common case: no lock taken */
	pthread_mutex_lock(&s->call_lock);
	int rc = 1;
	if (atomic_load(&s->tx_open)) {
		rc = atomic_load(&s->stop) ? MESH_E_STATE : tx_put(s, &s->tx);
		if (rc == 1) {
			free(s->tx_buf);
			s->tx_buf = NULL;
			atomic_store(&s->tx_open, 0);
		}
	}
	pthread_mutex_unlock(&s->call_lock);
	return rc == -EAGAIN ? 0 : rc;
}

int mesh_slot_recv(struct mesh_slot *s, struct mesh_slot_reply *r)
{
	int rc;
	memset(r, 0, sizeof *r);
	pthread_mutex_lock(&s->call_lock);
	/* A reply larger than one record comes in pieces, and a worker that
	 * streams parts (mesh_worker_reply_part) sends them before its REP: both
	 * are joined here, across calls when the ring runs dry midway. */
	struct rx x = {NULL, NULL, s->pipe_cur, s->pipe_acc};
	for (uint64_t skipped = 0;;) {
		struct mesh_msg m;
		rc = mesh_ring_peek(&s->rep, &m);
		if (rc == MESH_E_CORRUPT) {
			fail_ring(s, "reply", &s->rep);
			break;
		}
		if (rc == -EAGAIN) {
			/* Whole replies are taken even from a slot whose worker
			 * died: each was published complete. */
			if (atomic_load(&s->stop))
				rc = MESH_E_STATE;
			break;
		}
		if (!s->pipe_out || m.seq != s->pipe_next) {
			/* Older than the pipeline: a reply to a call that timed out. */
			if (m.seq != 0 && (int32_t)(m.seq - s->pipe_next) < 0 && skipped++ < s->cap / MESH_RING_HDR) {
				mesh_ring_pop(&s->rep);
				continue;
			}
			mesh_slot_fail(s, "slot %u: reply ring: reply to request %u where %u was next", s->index, m.seq,
				       s->pipe_out ? s->pipe_next : 0);
			rc = MESH_E_CORRUPT;
			break;
		}
		uint32_t kind = 0;
		rc = take_reply_record(s, &x, &m, &kind);
		if (rc == MESH_E_TOOBIG) {
			mesh_slot_fail(s, "slot %u: reply ring: a reply over the %u-byte message limit", s->index,
				       MESH_MSG_MAX);
			rc = MESH_E_CORRUPT;
		}
		if (rc < 0)
			break;
		mesh_ring_pop(&s->rep);
		if (rc == 0)
			continue;
		r->kind = kind;
		r->seq = m.seq;
		r->len = x.cur.len;
		r->data = (uint8_t *)mesh_buf_detach(&x.cur, NULL);
		mesh_buf_reset(&x.acc);
		if (!r->data) {
			rc = -ENOMEM;
			break;
		}
		s->pipe_out--;
		s->pipe_next = m.seq + 1 ? m.seq + 1 : 1;
		rc = 0;
		break;
	}
	s->pipe_cur = x.cur;
	s->pipe_acc = x.acc;
	pthread_mutex_unlock(&s->call_lock);
	return rc;
}

int mesh_slot_bell_arm(struct mesh_slot *s)
{
	/* A request going in pieces: the worker answers nothing before its
	 * last is in (mesh_slot_send begins one only when no other is in
	 * flight), so only room for its pieces is asked for. */
	for (;;) {
		int rc = send_rest(s);
		if (rc < 0)
			return 2;
		if (rc == 1)
			break;
		pthread_mutex_lock(&s->call_lock);
		rc = atomic_load(&s->tx_open) ? mesh_ring_bell_space(&s->req, mesh_ring_tx_next(&s->req, &s->tx)) : 1;
		pthread_mutex_unlock(&s->call_lock);
		if (rc == MESH_E_CORRUPT)
			fail_ring(s, "request", &s->req);
		if (rc < 0)
			return 2;
		if (rc == 0)
			return atomic_load(&s->stop) ? 2 : 0;
	}
	pthread_mutex_lock(&s->call_lock);
	int rc = mesh_ring_bell_data(&s->rep);
	pthread_mutex_unlock(&s->call_lock);
	if (rc)
		return 1;
	return atomic_load(&s->stop) ? 2 : 0;
}

int mesh_slot_wait_reply(struct mesh_slot *s, uint64_t timeout_ns, const _Atomic uint32_t *quit)
{
	uint64_t now = mesh_mono_ns();
	uint64_t deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
	for (;;) {
		if (quit && atomic_load(quit))
			return 1;
		int rc = mesh_slot_bell_arm(s);
		if (rc)
			return rc == 1 ? 0 : 1;
		uint64_t left = left_ns(deadline);
		if (!left)
			return MESH_E_TIMEOUT;
		uint64_t ms = (left + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS;
		struct pollfd pf = {s->bell, POLLIN, 0};
		if (poll(&pf, 1, ms > 60000 ? 60000 : (int)ms) > 0)
			mesh_efd_quiet(s->bell);
	}
}

void mesh_slot_kick_reply(struct mesh_slot *s)
{
	mesh_efd_ring(s->bell);
}

uint32_t mesh_slot_in_flight(const struct mesh_slot *s)
{
	return s->pipe_out;
}

uint64_t mesh_slot_sent(const struct mesh_slot *s)
{
	return atomic_load_explicit(&s->sent, memory_order_relaxed);
}

uint64_t mesh_slot_taken(const struct mesh_slot *s)
{
	return atomic_load_explicit(&s->hdr->requests, memory_order_acquire);
}
