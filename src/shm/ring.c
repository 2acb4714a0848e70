#include "shm/ring.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Shared (not private) futexes: the words live in a MAP_SHARED memfd. */
static void futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = {(time_t)(timeout_ns / MESH_NS_PER_S), (long)(timeout_ns % MESH_NS_PER_S)};
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* After a publish and its fence: wakes the peer that sleeps (or is about
 * to) on this flag, the way it asked -- the flag is cleared here, so that
 * the publishes that follow before the peer runs again cost no second
 * wake-up (the peer clears it too once awake, and sets it again before it
 * sleeps again; its futex word moved, so a wait it had not begun returns
 * at once).  A bell asked of a side that has none (a peer's bad word) wakes
 * the futex. */
static void wake_sleeper(const struct mesh_ring *r, _Atomic uint32_t *futex, _Atomic uint32_t *sleeping)
{
	if (!atomic_load_explicit(sleeping, memory_order_relaxed))
		return;
	uint32_t how = atomic_exchange(sleeping, 0);
	if (!how)
		return;
	if (how == MESH_RING_SLEEP_BELL && r->bell >= 0) {
		mesh_efd_ring(r->bell);
		return;
	}
	atomic_fetch_add(futex, 1);
	futex_wake(futex);
}

static void ctl_zero(struct mesh_ring_ctl *ctl)
{
	atomic_store(&ctl->head, 0);
	atomic_store(&ctl->tail, 0);
	atomic_store(&ctl->data_futex, 0);
	atomic_store(&ctl->data_sleeping, 0);
	atomic_store(&ctl->space_futex, 0);
	atomic_store(&ctl->space_sleeping, 0);
}

void mesh_ring_init(struct mesh_ring *r, struct mesh_ring_ctl *ctl, uint8_t *data, uint64_t cap)
{
	ctl_zero(ctl);
	memset(r, 0, sizeof *r);
	r->ctl = ctl;
	r->data = data;
	r->cap = cap;
	r->mask = cap - 1;
	r->bell = -1;
}

void mesh_ring_attach(struct mesh_ring *r, struct mesh_ring_ctl *ctl, uint8_t *data, uint64_t cap, int is_producer)
{
	memset(r, 0, sizeof *r);
	r->ctl = ctl;
	r->data = data;
	r->cap = cap;
	r->mask = cap - 1;
	uint64_t h = atomic_load_explicit(&ctl->head, memory_order_acquire);
	uint64_t t = atomic_load_explicit(&ctl->tail, memory_order_acquire);
	r->pos = is_producer ? h : t;
	r->peer = is_producer ? t : h;
	r->next = r->pos;
	r->bell = -1;
}

static int corrupt(struct mesh_ring *r, const char *fmt, unsigned long long a, unsigned long long b)
{
	snprintf(r->why, sizeof r->why, fmt, a, b);
	return MESH_E_CORRUPT;
}

/* Producer: re-reads the consumer's tail; it must lie in [last tail, head]. */
static int refresh_tail(struct mesh_ring *r)
{
	uint64_t t = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
	if (t - r->peer > r->pos - r->peer)
		return corrupt(r, "tail %llu outside [last tail, head %llu]", (unsigned long long)t,
			       (unsigned long long)r->pos);
	if (t & 15u)
		return corrupt(r, "tail %llu not 16-aligned (head %llu)", (unsigned long long)t,
			       (unsigned long long)r->pos);
	r->peer = t;
	return 0;
}

static int put_common(struct mesh_ring *r, uint32_t kind, uint32_t seq, const void *p, size_t n)
{
	if (n > MESH_RING_MAX_MSG(r->cap))
		return MESH_E_TOOBIG;
	if (r->pos & 15u) /* attached to a ring whose own index was broken */
		return corrupt(r, "own index %llu not 16-aligned", (unsigned long long)r->pos, 0);
	uint64_t rec = mesh_ring_rec_size(n);
	if (r->pos + rec - r->peer > r->cap) {
		int rc = refresh_tail(r);
		if (rc < 0)
			return rc;
		if (r->pos + rec - r->peer > r->cap)
			return -EAGAIN;
	}
	uint64_t off = r->pos & r->mask;
	uint32_t h[4] = {(uint32_t)n, kind, seq, 0};
	memcpy(r->data + off, h, sizeof h);
	off = (off + MESH_RING_HDR) & r->mask;
	size_t first = n < r->cap - off ? n : (size_t)(r->cap - off);
	if (first)
		memcpy(r->data + off, p, first);
	if (n > first)
		memcpy(r->data, (const uint8_t *)p + first, n - first);
	r->pos += rec;
	return 0;
}

void mesh_ring_flush(struct mesh_ring *r)
{
	atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
	/* Pairs with the consumer's fence between setting data_sleeping and re-reading head. */
	atomic_thread_fence(memory_order_seq_cst);
	wake_sleeper(r, &r->ctl->data_futex, &r->ctl->data_sleeping);
}

int mesh_ring_put_nopub(struct mesh_ring *r, uint32_t kind, uint32_t seq, const void *p, size_t n)
{
	return put_common(r, kind, seq, p, n);
}

int mesh_ring_put(struct mesh_ring *r, uint32_t kind, uint32_t seq, const void *p, size_t n)
{
	int rc = put_common(r, kind, seq, p, n);
	if (rc == 0)
		mesh_ring_flush(r);
	return rc;
}

int mesh_ring_peek(struct mesh_ring *r, struct mesh_msg *m)
{
	if (r->pos & 15u)
		return corrupt(r, "own index %llu not 16-aligned", (unsigned long long)r->pos, 0);
	if (r->pos == r->peer) {
		uint64_t h = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
		if (h - r->pos > r->cap)
			return corrupt(r, "head %llu outside [tail %llu, tail + capacity]", (unsigned long long)h,
				       (unsigned long long)r->pos);
		if (h & 15u)
			return corrupt(r, "head %llu not 16-aligned (tail %llu)", (unsigned long long)h,
				       (unsigned long long)r->pos);
		r->peer = h;
		if (h == r->pos)
			return -EAGAIN;
	}
	uint64_t avail = r->peer - r->pos;
	uint64_t off = r->pos & r->mask;
	/* The peer may rewrite the header while we look: read each word once. */
	const uint32_t *hp = (const uint32_t *)(r->data + off);
	uint32_t len = __atomic_load_n(&hp[0], __ATOMIC_RELAXED);
	uint32_t kind = __atomic_load_n(&hp[1], __ATOMIC_RELAXED);
	uint32_t seq = __atomic_load_n(&hp[2], __ATOMIC_RELAXED);
	uint32_t zero = __atomic_load_n(&hp[3], __ATOMIC_RELAXED);
	if (zero != 0)
		return corrupt(r, "message at %llu: reserved word %llu, not 0", (unsigned long long)r->pos, zero);
	if (kind < 1 || kind > MESH_MSG__MAX)
		return corrupt(r, "message at %llu: unknown kind %llu", (unsigned long long)r->pos, kind);
	if (len > MESH_RING_MAX_MSG(r->cap) || mesh_ring_rec_size(len) > avail)
		return corrupt(r, "message length %llu exceeds the %llu bytes written", len,
			       (unsigned long long)avail);
	m->len = len;
	m->kind = kind;
	m->seq = seq;
	off = (off + MESH_RING_HDR) & r->mask;
	m->p1 = r->data + off;
	m->n1 = len < r->cap - off ? len : (size_t)(r->cap - off);
	m->p2 = r->data;
	m->n2 = len - m->n1;
	r->next = r->pos + mesh_ring_rec_size(len);
	return 0;
}

void mesh_msg_copy(const struct mesh_msg *m, void *dst)
{
	if (m->n1)
		memcpy(dst, m->p1, m->n1);
	if (m->n2)
		memcpy((uint8_t *)dst + m->n1, m->p2, m->n2);
}

void mesh_ring_pop(struct mesh_ring *r)
{
	r->pos = r->next;
	atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	wake_sleeper(r, &r->ctl->space_futex, &r->ctl->space_sleeping);
}

void mesh_ring_kick(struct mesh_ring_ctl *ctl)
{
	atomic_fetch_add(&ctl->data_futex, 1);
	futex_wake(&ctl->data_futex);
	atomic_fetch_add(&ctl->space_futex, 1);
	futex_wake(&ctl->space_futex);
}

/* 1 ready, 0 not yet, <0 corrupt. */
typedef int (*ready_fn)(struct mesh_ring *r, uint64_t arg);

static int data_ready(struct mesh_ring *r, uint64_t unused)
{
	return r->pos != r->peer || atomic_load_explicit(&r->ctl->head, memory_order_acquire) != r->pos;
}

static int space_ready(struct mesh_ring *r, uint64_t rec)
{
	if (r->pos + rec - r->peer <= r->cap)
		return 1;
	int rc = refresh_tail(r);
	if (rc < 0)
		return rc;
	return r->pos + rec - r->peer <= r->cap;
}

static int stopped(const _Atomic uint32_t *w)
{
	return w && atomic_load_explicit(w, memory_order_acquire);
}

static int wait_common(struct mesh_ring *r, ready_fn ready, uint64_t arg, _Atomic uint32_t *futex,
		       _Atomic uint32_t *sleeping, uint64_t spin_ns, uint64_t timeout_ns, const _Atomic uint32_t *stop)
{
	int rc = ready(r, arg);
	if (rc)
		return rc < 0 ? rc : 0;
	uint64_t start = mesh_mono_ns();
	uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
	if (spin_ns > timeout_ns)
		spin_ns = timeout_ns;
	for (unsigned i = 1;; i++) {
		if ((rc = ready(r, arg)) != 0)
			return rc < 0 ? rc : 0;
		if (stopped(stop))
			return 1;
		cpu_relax();
		if ((i & 15) == 0 && mesh_mono_ns() - start >= spin_ns)
			break;
	}
	for (;;) {
		uint32_t v = atomic_load(futex);
		atomic_store(sleeping, MESH_RING_SLEEP_FUTEX);
		atomic_thread_fence(memory_order_seq_cst);
		rc = ready(r, arg);
		if (rc || stopped(stop)) {
			atomic_store(sleeping, 0);
			return rc < 0 ? rc : rc ? 0 : 1;
		}
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			atomic_store(sleeping, 0);
			return MESH_E_TIMEOUT;
		}
		futex_wait(futex, v, deadline - now);
		atomic_store(sleeping, 0);
	}
}

int mesh_ring_wait_data(struct mesh_ring *r, uint64_t spin_ns, uint64_t timeout_ns, const _Atomic uint32_t *stop)
{
	return wait_common(r, data_ready, 0, &r->ctl->data_futex, &r->ctl->data_sleeping, spin_ns, timeout_ns,
			   stop);
}

int mesh_ring_wait_space(struct mesh_ring *r, size_t msg_len, uint64_t spin_ns, uint64_t timeout_ns,
			 const _Atomic uint32_t *stop)
{
	if (msg_len > MESH_RING_MAX_MSG(r->cap))
		return MESH_E_TOOBIG;
	return wait_common(r, space_ready, mesh_ring_rec_size(msg_len), &r->ctl->space_futex,
			   &r->ctl->space_sleeping, spin_ns, timeout_ns, stop);
}

/* Asks for the bell, then looks again (the fence pairs with the
 * publisher's, as in wait_common): 1 ready, 0 armed, <0 corrupt. */
static int bell_arm(struct mesh_ring *r, ready_fn ready, uint64_t arg, _Atomic uint32_t *sleeping)
{
	int rc = ready(r, arg);
	if (rc)
		return rc;
	atomic_store(sleeping, MESH_RING_SLEEP_BELL);
	atomic_thread_fence(memory_order_seq_cst);
	rc = ready(r, arg);
	if (rc)
		atomic_store(sleeping, 0);
	return rc;
}

int mesh_ring_bell_data(struct mesh_ring *r)
{
	return bell_arm(r, data_ready, 0, &r->ctl->data_sleeping);
}

int mesh_ring_bell_space(struct mesh_ring *r, size_t msg_len)
{
	if (msg_len > MESH_RING_MAX_MSG(r->cap))
		return MESH_E_TOOBIG;
	return bell_arm(r, space_ready, mesh_ring_rec_size(msg_len), &r->ctl->space_sleeping);
}

void mesh_ring_tx_init(struct mesh_ring_tx *tx, uint32_t kind, uint32_t seq, const void *p, size_t n)
{
	*tx = (struct mesh_ring_tx){.p = p, .n = n, .kind = kind, .seq = seq};
}

size_t mesh_ring_tx_next(const struct mesh_ring *r, const struct mesh_ring_tx *tx)
{
	size_t left = tx->n - tx->off;
	/* One record when the whole message fits; else pieces, the last of its own kind. */
	if (!tx->started && left <= MESH_RING_MAX_MSG(r->cap))
		return left;
	return left > MESH_RING_PIECE(r->cap) ? MESH_RING_PIECE(r->cap) : left;
}

int mesh_ring_tx_put(struct mesh_ring *r, struct mesh_ring_tx *tx)
{
	int put = 0;
	for (;;) {
		size_t k = mesh_ring_tx_next(r, tx);
		int last = k == tx->n - tx->off;
		int rc = put_common(r, last ? tx->kind : MESH_MSG_MORE, tx->seq, tx->p ? tx->p + tx->off : tx->p, k);
		if (rc < 0) {
			if (put) /* what is in goes out now: the consumer starts on it */
				mesh_ring_flush(r);
			return rc;
		}
		put = tx->started = 1;
		tx->off += k;
		if (last) {
			mesh_ring_flush(r);
			return 1;
		}
	}
}
