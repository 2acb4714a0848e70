/* Shared-memory slots and the control channel between meshd and a worker.
 *
 * A slot is one memfd (a worker maps only its own slot) holding a header page
 * (magic, version, geometry, control words, two ring controls) and two rings
 * (ring.h): requests meshd -> worker, replies worker -> meshd.  The control
 * channel is one AF_UNIX SOCK_SEQPACKET socketpair per worker process; the
 * worker's end is inherited as the fd named by the environment variable
 * MESH_CONTROL_FD.  The whole wire format is docs/worker-protocol.md.
 *
 * Both sides use this module: meshd through mesh_slot_* (creator side) and
 * mesh_ctl_*; libmeshworker through mesh_slot_map and the mesh__wctl_*
 * helpers.  It never spawns or reaps anything (the host does).
 *
 * Trust: meshd keeps the slot's geometry and its own ring indices in private
 * memory and never trusts a word the worker can write.  Every index, length,
 * kind and state read from the slot, and every control message, is validated;
 * a bad one makes the call return MESH_E_CORRUPT (slot) or MESH_E_PROTO
 * (control) and marks the slot failed with a one-line reason
 * (mesh_slot_failed).  Every wait on a worker takes a timeout.
 *
 * Caller protocol, meshd side (the host), per worker process:
 *   1. mesh_ctl_pair(&ctl, &child_fd): give child_fd to the child (dup2 it to
 *      a fixed number, put MESH_CONTROL_FD=<number> in its env), close
 *      child_fd in meshd after the spawn.
 *   2. poll mesh_ctl_fd(ctl) for POLLIN; mesh_ctl_recv() -> MESH_CTL_READY
 *      (the worker's setup is done).  MESH_E_CLOSED before that = it died.
 *   3. mesh_slot_create(&s, index, 0) once per slot (reusable across runs).
 *   4. mesh_ctl_run(ctl, s, gen): resets the slot, sends `run gen index` with
 *      the memfd and the bell; the worker answers MESH_CTL_ONLINE with that gen.
 *   5. mesh_slot_call(s, ...) any number of times (one at a time per slot; it
 *      locks internally so concurrent callers queue).
 *   6. mesh_ctl_halt(ctl, s): the worker answers MESH_CTL_HALTED once its
 *      node loop stopped (an in-flight request is answered first), unmaps
 *      the slot and waits for the next run: wait for HALTED before the next
 *      mesh_ctl_run (back to 4, same or other slot).  A halt while no run is
 *      active is ignored by the worker (no answer);
 *      or mesh_ctl_exit(ctl, s): the worker returns from its serve loop and
 *      exits; meshd sees MESH_E_CLOSED on the channel and reaps it.
 *   7. mesh_ctl_free(ctl) after the process is reaped; mesh_slot_free(s) at
 *      meshd's exit.  A slot that failed (mesh_slot_failed != NULL) or whose
 *      worker crashed is reset by the next mesh_ctl_run; to be certain no old
 *      process still maps it, free it and create a new one.  When a worker
 *      dies, call mesh_slot_fail(s, ...) first: it wakes a mesh_slot_call
 *      waiting on that slot (which returns MESH_E_STATE) at once. */
#ifndef MESH_SHM_SHM_H
#define MESH_SHM_SHM_H

#include "shm/ring.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MESH_SLOT_MAGIC 0x544c534du /* "MSLT" */
/* 2: `run` passes the slot's bell with its memfd, and a sleeper may ask
 * for the bell (MESH_RING_SLEEP_BELL).  A worker of another version refuses
 * the slot (MESH_E_VERSION). */
#define MESH_SLOT_VERSION 2u
#define MESH_SLOT_HDR_SIZE 4096u
#define MESH_SLOT_DEFAULT_RING (1u << 20)
/* The environment variable that names the worker's control fd. */
#define MESH_CONTROL_FD_ENV "MESH_CONTROL_FD"
/* The largest control message, bytes (text, no NUL on the wire). */
#define MESH_CTL_MAX 256u

/* shutdown word: written by meshd, watched by the worker's node loop. */
enum mesh_shutdown { MESH_SHUTDOWN_NONE = 0, MESH_SHUTDOWN_HALT = 1, MESH_SHUTDOWN_EXIT = 2 };
/* state word: written by the worker. */
enum mesh_slot_state {
	MESH_SLOT_IDLE = 0,    /* armed by meshd, no worker on it yet */
	MESH_SLOT_RUNNING = 1, /* a worker's node loop serves it (online = gen) */
	MESH_SLOT_HALTED = 2,  /* the node loop stopped on HALT */
	MESH_SLOT_EXITED = 3,  /* the node loop stopped on EXIT */
	MESH_SLOT__MAX = 3,
};

/* The header page of a slot, version 2.  Offsets are the format. */
struct mesh_slot_hdr {
	uint32_t magic, version;	/* @0, @4   written by meshd */
	uint64_t size;			/* @8       total bytes of the memfd */
	uint32_t index, ring_cap;	/* @16, @20 slot number; bytes of data per ring */
	uint8_t pad0[40];
	/* control words @64 */
	_Atomic uint32_t state;		/* @64  worker: enum mesh_slot_state */
	_Atomic uint32_t gen;		/* @68  meshd: the run's generation (>= 1) */
	_Atomic uint32_t shutdown;	/* @72  meshd: enum mesh_shutdown */
	_Atomic uint32_t online;	/* @76  worker: the gen its node loop serves, 0 if none */
	_Atomic uint64_t heartbeat_ns;	/* @80  worker: CLOCK_MONOTONIC at its last loop turn */
	_Atomic uint64_t requests;	/* @88  worker: requests taken */
	_Atomic uint64_t replies;	/* @96  worker: replies put (REP) */
	_Atomic uint64_t errors;	/* @104 worker: handler failures (ERR) */
	uint8_t pad1[144];
	struct mesh_ring_ctl req;	/* @256 meshd produces */
	struct mesh_ring_ctl rep;	/* @512 the worker produces */
	/* request data at MESH_SLOT_HDR_SIZE, reply data right after it */
};

/* meshd's handle on one slot.  Opaque. */
struct mesh_slot;

/* Creates slot number index: a sealed-size memfd of 4096 + 2 * ring_bytes,
 * mapped; ring_bytes a power of two in [MESH_RING_MIN_CAP, MESH_RING_MAX_CAP],
 * 0 = MESH_SLOT_DEFAULT_RING.  0 or -errno / MESH_E_RANGE; *out owned by the
 * caller (mesh_slot_free). */
int mesh_slot_create(struct mesh_slot **out, uint32_t index, size_t ring_bytes);
/* Unmaps and closes.  NULL is fine. */
void mesh_slot_free(struct mesh_slot *s);
/* The memfd (owned by the slot; mesh_ctl_run passes it).  Close-on-exec. */
int mesh_slot_fd(const struct mesh_slot *s);
/* The slot's bell: an eventfd (owned by the slot, non-blocking,
 * close-on-exec; mesh_ctl_run passes it too) that the worker writes when
 * meshd asked for it (mesh_slot_bell_arm), and that meshd writes itself
 * when the slot fails, is shut down or armed, or a send in pieces begins.
 * Its owner polls it for POLLIN and then reads it empty. */
int mesh_slot_bell(const struct mesh_slot *s);
uint32_t mesh_slot_index(const struct mesh_slot *s);
/* The largest request or reply, bytes: MESH_MSG_MAX whatever the ring's
 * size (a message larger than the ring travels in pieces). */
size_t mesh_slot_max_msg(const struct mesh_slot *s);
/* The largest request that goes in one record of the slot's ring (its
 * cap - 16 bytes); a larger one goes in pieces, a call's and a pipelined
 * one (mesh_slot_send) alike, up to mesh_slot_max_msg. */
size_t mesh_slot_max_send(const struct mesh_slot *s);
/* The bytes of data of each of its rings (what mesh_slot_create was given). */
size_t mesh_slot_ring_cap(const struct mesh_slot *s);
/* Re-initialises rings and control words for a run of gen (mesh_ctl_run
 * calls it; exposed for tests).  Clears a failure.  A call still waiting on
 * the slot returns MESH_E_STATE first, so this never waits on a worker.
 * No worker may still serve the slot (wait for HALTED, or the reap). */
void mesh_slot_arm(struct mesh_slot *s, uint32_t gen);
/* Sets the shutdown word and wakes the worker if it sleeps on the slot. */
void mesh_slot_set_shutdown(struct mesh_slot *s, enum mesh_shutdown how);

/* Sends one request and waits for its reply, at most timeout_ns in all
 * (spinning spin_ns before sleeping, 0 = sleep at once).  Either may be
 * larger than the ring (pieces, docs/worker-protocol.md), up to MESH_MSG_MAX.
 * Replies to earlier calls that timed out are skipped (sequence numbers).
 * A reply the worker streamed in parts comes back whole (the parts joined).
 *   0: *reply (malloc'd, NUL-appended, caller frees) and *reply_len hold it;
 *   MESH_E_REFUSED: the worker's handler failed; *reply holds its message;
 *   MESH_E_TIMEOUT: no reply in time (the slot stays usable);
 *   MESH_E_TOOBIG: n > mesh_slot_max_msg, or a streamed reply whose parts
 *     add up to more;
 *   MESH_E_CORRUPT: the worker broke the slot; it is failed (mesh_slot_failed);
 *   MESH_E_STATE: the slot failed, or HALT/EXIT was set (before or during
 *     the wait: a shutdown cancels a waiting call);
 *   -ENOMEM.
 * On error *reply is NULL. */
int mesh_slot_call(struct mesh_slot *s, const void *req, size_t n, void **reply, size_t *reply_len,
		   uint64_t timeout_ns, uint64_t spin_ns);
/* One streamed part of a reply, n > 0 bytes at p (valid during the call).
 * Returns 0 to go on, or a negative code that ends the call with it (the
 * rest of the reply is skipped by the next call on the slot). */
typedef int (*mesh_slot_part_fn)(void *arg, const void *p, size_t n);
/* mesh_slot_call, with the parts of a streamed reply passed to on_part as
 * each is complete, on the calling thread, with the slot's call lock held
 * (so it must not wait long).  *reply then holds the reply's last piece
 * only (possibly empty); for MESH_E_REFUSED the handler's error text (parts
 * may have gone to on_part before it).  Other codes as mesh_slot_call, and
 * MESH_E_TOOBIG for a reply over MESH_MSG_MAX only when on_part is NULL. */
int mesh_slot_call_stream(struct mesh_slot *s, const void *req, size_t n, mesh_slot_part_fn on_part, void *arg,
			  void **reply, size_t *reply_len, uint64_t timeout_ns, uint64_t spin_ns);
/* How long meshd spins on a reply before it sleeps: a worker that wakes
 * from its futex and answers at once is caught without a second wake-up. */
#define MESH_SLOT_CALL_SPIN_NS (20ull * 1000)
/* Pipelined use (a job's executor, meshd/jobs/job_exec.c): many requests in
 * flight on one slot, replies taken as they come, woken by the slot's bell
 * (mesh_slot_bell_arm) in the owner's own poll: no thread a worker.  One
 * owner drives the slot this way and makes no mesh_slot_call meanwhile;
 * mesh_slot_recv and mesh_slot_bell_arm (or mesh_slot_wait_reply) must not
 * run at once (the reply ring has one consumer view).
 *
 * mesh_slot_send puts one request of kind MESH_MSG_REQ or MESH_MSG_CHUNK
 * whose payload is hdr (hn bytes; 0 = none) followed by p (n bytes),
 * without waiting.  One larger than a record of the ring (over
 * mesh_slot_max_send) goes in pieces, as a call's does: it is taken only
 * when no other request is in flight (the worker then answers nothing
 * before its last piece, so nothing but room is waited for); a copy is
 * made, the pieces that fit are put, and mesh_slot_bell_arm puts the rest
 * as the worker takes them (mesh_slot_sending says it is not all in yet;
 * no other request is taken meanwhile).  0 with *seq its sequence
 * number; -EAGAIN: no room in the ring now, or (in pieces) a request in
 * flight or one still going in (take replies first); MESH_E_TOOBIG: hn +
 * n over MESH_MSG_MAX; MESH_E_STATE: the slot failed or was shut down;
 * MESH_E_CORRUPT (the slot is failed); -EINVAL (another kind), -ENOMEM. */
int mesh_slot_send(struct mesh_slot *s, uint32_t kind, const void *hdr, size_t hn, const void *p, size_t n,
		   uint32_t *seq);
/* The same, but a request that goes in one record is not published yet:
 * the worker sees it (and is woken, once) at mesh_slot_publish, or at the
 * next mesh_slot_send, with every request held before it.  For a batch of
 * requests: one wake-up of a sleeping worker a batch, not one a request.
 * The sender publishes before it waits for anything (held requests are
 * never answered). */
int mesh_slot_send_held(struct mesh_slot *s, uint32_t kind, const void *hdr, size_t hn, const void *p, size_t n,
			uint32_t *seq);
void mesh_slot_publish(struct mesh_slot *s);
/* 1 while a request mesh_slot_send began in pieces is not all in. */
int mesh_slot_sending(const struct mesh_slot *s);
struct mesh_slot_reply {
	uint32_t kind; /* MESH_MSG_REP or MESH_MSG_ERR */
	uint32_t seq;  /* the request it answers */
	void *data;    /* malloc'd, NUL-appended (not counted in len); the caller frees */
	size_t len;
};
/* Takes the next reply without waiting, validated as mesh_slot_call
 * validates, plus order: it must answer the oldest request sent and not
 * yet answered (a worker answers in order); replies to earlier calls that
 * timed out are skipped.  Replies already in the ring are taken even after
 * the slot failed (each was published whole).  0 with *r filled; -EAGAIN:
 * none yet; MESH_E_STATE: none, and the slot failed or was shut down;
 * MESH_E_CORRUPT (the slot is failed); -ENOMEM. */
int mesh_slot_recv(struct mesh_slot *s, struct mesh_slot_reply *r);
/* Before the owner polls the bell: puts the pieces of a request in
 * pieces that fit now, then asks the worker to ring the bell when it
 * publishes a reply (or, while pieces wait, frees room for the next).
 *   0: nothing to do before the bell rings (poll it);
 *   1: a reply may be there now (mesh_slot_recv);
 *   2: the slot failed or was shut down, and no reply waits (mesh_slot_recv
 *      says MESH_E_STATE).
 * A stale ring of the bell costs a spurious wake-up, nothing else. */
int mesh_slot_bell_arm(struct mesh_slot *s);
/* The same, waiting (for tests and simple callers): polls the bell until a
 * reply may be there (0), the slot failed or was shut down or *quit (the
 * caller's; may be NULL) is set (1), or timeout_ns passed (MESH_E_TIMEOUT).
 * Whoever sets *quit calls mesh_slot_kick_reply (it rings the bell).  May
 * run beside mesh_slot_send on another thread (a send in pieces rings it). */
int mesh_slot_wait_reply(struct mesh_slot *s, uint64_t timeout_ns, const _Atomic uint32_t *quit);
void mesh_slot_kick_reply(struct mesh_slot *s);
/* Pipelined requests sent and not answered yet. */
uint32_t mesh_slot_in_flight(const struct mesh_slot *s);
/* The requests meshd began to send on the slot since its run began (its
 * last arm), by calls and pipelined sends alike: with the worker's
 * `requests` word, whether a request waits for it (the heal check).  Any
 * thread. */
uint64_t mesh_slot_sent(const struct mesh_slot *s);
/* The worker's count of requests it took since the run began (its
 * `requests` word; untrusted: a hint of which request it is working on). */
uint64_t mesh_slot_taken(const struct mesh_slot *s);

/* The reason the slot failed (a static-lifetime string in the slot), or NULL. */
const char *mesh_slot_failed(const struct mesh_slot *s);
/* Marks the slot failed with a reason (printf-style), e.g. its worker crashed. */
void mesh_slot_fail(struct mesh_slot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What the worker reports in its control words, validated. */
struct mesh_slot_stats {
	uint32_t state;		/* enum mesh_slot_state */
	uint32_t gen;		/* meshd's gen for this run */
	uint32_t online;	/* the gen the worker serves, 0 if none */
	uint64_t heartbeat_ns;	/* CLOCK_MONOTONIC, 0 if never */
	uint64_t requests, replies, errors;
};
/* 0, or MESH_E_CORRUPT (and the slot failed) when a word is impossible:
 * a state out of range, online not 0 and not gen, a heartbeat in the future,
 * replies + errors > requests. */
int mesh_slot_stats(struct mesh_slot *s, struct mesh_slot_stats *st);

/* The control channel, meshd's end. */
struct mesh_ctl;

enum mesh_ctl_kind {
	MESH_CTL_READY = 1,  /* "ready": setup done, waiting for run */
	MESH_CTL_ONLINE = 2, /* "online <gen>": mapped the slot, node loop runs */
	MESH_CTL_HALTED = 3, /* "halted <gen>": node loop stopped, slot unmapped */
	MESH_CTL_FAIL = 4,   /* "fail <text>": the worker refused the last command */
};
struct mesh_ctl_msg {
	enum mesh_ctl_kind kind;
	uint32_t gen;			/* ONLINE, HALTED */
	char text[MESH_CTL_MAX + 1];	/* FAIL: its text; on MESH_E_PROTO: what was wrong */
};

/* A socketpair: *out is meshd's end (non-blocking, close-on-exec), *child_fd
 * the worker's (close-on-exec too: the spawner dup2s it into place, which
 * clears the flag).  0 or -errno. */
int mesh_ctl_pair(struct mesh_ctl **out, int *child_fd);
/* Closes meshd's end.  NULL is fine. */
void mesh_ctl_free(struct mesh_ctl *c);
/* For the event loop: readable when a message (or EOF) is there. */
int mesh_ctl_fd(const struct mesh_ctl *c);
/* Reads and parses one message without blocking.  0; -EAGAIN if none;
 * MESH_E_CLOSED at EOF (the worker closed its end or died); MESH_E_PROTO
 * for a malformed message (m->text says what) or passed fds (closed). */
int mesh_ctl_recv(struct mesh_ctl *c, struct mesh_ctl_msg *m);
/* Blocking convenience for tests and simple callers: poll + recv, at most
 * timeout_ns.  MESH_E_TIMEOUT if nothing came. */
int mesh_ctl_wait(struct mesh_ctl *c, struct mesh_ctl_msg *m, uint64_t timeout_ns);
/* mesh_slot_arm(s, gen) and sends "run <gen> <index>" with the memfd and
 * the bell.  gen >= 1.
 * 0, -errno, MESH_E_CLOSED (the worker is gone). */
int mesh_ctl_run(struct mesh_ctl *c, struct mesh_slot *s, uint32_t gen);
/* The same for a slot the caller armed for gen itself (mesh_slot_arm), for
 * instance before the worker was ready, so that requests put in it then
 * are the first the worker reads: sends only. */
int mesh_ctl_run_armed(struct mesh_ctl *c, struct mesh_slot *s, uint32_t gen);
/* Sends "halt", then sets HALT in the slot (s may be NULL: no run active)
 * and wakes the worker; the word is set even when the send fails.  0,
 * MESH_E_CLOSED (the worker is gone: for exit, that is what was asked),
 * -errno.  A waiting mesh_slot_call on s returns MESH_E_STATE. */
int mesh_ctl_halt(struct mesh_ctl *c, struct mesh_slot *s);
/* Same with EXIT and "exit". */
int mesh_ctl_exit(struct mesh_ctl *c, struct mesh_slot *s);

/* Parses one message meshd received (n bytes, not NUL-terminated).  0 or
 * MESH_E_PROTO (m->text says what).  Pure; fuzzed. */
int mesh_ctl_parse(const void *buf, size_t n, struct mesh_ctl_msg *m);

/* The worker's side (libmeshworker).  Not for meshd. */
enum mesh_wcmd_kind { MESH_WCMD_RUN = 1, MESH_WCMD_HALT = 2, MESH_WCMD_EXIT = 3 };
struct mesh_wcmd {
	enum mesh_wcmd_kind kind;
	uint32_t gen, slot;
};
/* Parses one command the worker received.  0 or MESH_E_PROTO.  Pure. */
int mesh__wcmd_parse(const void *buf, size_t n, struct mesh_wcmd *cmd);
/* Sends text (one datagram) on sock, with fd attached when fd >= 0.  0,
 * MESH_E_CLOSED (peer gone) or -errno.  Never raises SIGPIPE. */
int mesh__ctl_send(int sock, const char *text, int fd);
/* A worker's mapping of its slot. */
struct mesh_slot_map {
	struct mesh_slot_hdr *hdr;
	size_t size;
	struct mesh_ring req, rep; /* req: consumer view; rep: producer view */
};
/* Maps the slot memfd fd, checks magic, version and geometry against the fd's
 * size and expect_index; both views ring bell (the slot's, passed with
 * `run`; -1 none) for a meshd that asked for it.  0, -errno,
 * MESH_E_FOREIGN, MESH_E_VERSION or MESH_E_CORRUPT.  fd and bell stay the
 * caller's. */
int mesh__slot_map(int fd, int bell, uint32_t expect_index, struct mesh_slot_map *m);
void mesh__slot_unmap(struct mesh_slot_map *m);

#endif
