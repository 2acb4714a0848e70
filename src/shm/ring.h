/* One single-producer single-consumer ring of variable-length messages in
 * shared memory, and its wake-ups.  Used by both sides of a slot (shm.h):
 * meshd produces requests and consumes replies; the worker the reverse.
 *
 * Layout (all little-endian, in the slot's memfd; the numbers are the format,
 * version 2 of the slot, see docs/worker-protocol.md):
 *   struct mesh_ring_ctl (256 bytes, in the slot header page)
 *     head  u64 @0    bytes ever written; only the producer stores it
 *     tail  u64 @64   bytes ever consumed; only the consumer stores it
 *     data_futex u32 @128, data_sleeping u32 @132   the consumer sleeps here
 *     space_futex u32 @192, space_sleeping u32 @196 the producer sleeps here
 *   data: cap bytes (a power of two, >= 4096), elsewhere in the slot.
 * head and tail are free-running; position = index & (cap - 1).
 *
 * A message is a 16-byte header {len, kind, seq, zero} at a 16-aligned
 * position followed by len payload bytes, padded to 16; a message that runs
 * past the end of data continues at offset 0 (split copy: no skip marker, so
 * the largest message is cap - 16 bytes whatever the positions).
 *
 * Ordering: the producer copies the message, then stores head with release;
 * the consumer loads head with acquire, copies, then stores tail with release.
 * Wake-ups: a side about to sleep bumps nothing; it sets its *_sleeping flag,
 * re-checks the ring (seq_cst fence in between), then FUTEX_WAITs on its
 * futex word with the value read before the flag.  The other side, after
 * publishing, fences and FUTEX_WAKEs only when the flag is set, clearing it
 * and bumping the word first: no lost wake-up, no syscall while the peer
 * spins, and one wake-up however many publishes come before the woken peer
 * runs.  A flag of MESH_RING_SLEEP_BELL instead asks for the slot's bell: an
 * eventfd that the sleeper polls with its other fds (a job's driver, which
 * has no thread to spare to a futex), written with 1 by the side that takes
 * the flag down.
 *
 * Trust: each side keeps its own index in private memory (pos) and only
 * stores it; the peer's index and every header it wrote are validated
 * (MESH_E_CORRUPT, with a reason) before use, and payload is copied out once,
 * never re-read.  A peer that scribbles can make this side see garbage
 * payload or an error, never read or write outside the ring. */
#ifndef MESH_SHM_RING_H
#define MESH_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MESH_RING_HDR 16u
#define MESH_RING_MIN_CAP 4096u
#define MESH_RING_MAX_CAP (1u << 30)
/* The largest payload a ring of cap bytes carries. */
#define MESH_RING_MAX_MSG(cap) ((size_t)(cap) - MESH_RING_HDR)
/* The bytes before a CHUNK message's input: chunk id u64, attempt u32. */
#define MESH_CHUNK_HDR 12u
/* The payload of each MORE record of a message sent in pieces: half the
 * ring, so the producer writes one piece while the consumer copies another. */
#define MESH_RING_PIECE(cap) ((size_t)(cap) / 2 - MESH_RING_HDR)
/* The protocol's message limit: a whole request, a whole reply, or one
 * streamed part of a reply, whatever the ring's size (docs/worker-protocol.md). */
#define MESH_MSG_MAX (16u << 20)
/* The largest input of a job's chunk: a CHUNK message less its header. */
#define MESH_CHUNK_INPUT_MAX (MESH_MSG_MAX - MESH_CHUNK_HDR)

enum mesh_msg_kind {
	MESH_MSG_REQ = 1, /* meshd -> worker: a request */
	MESH_MSG_REP = 2, /* worker -> meshd: the handler's reply */
	MESH_MSG_ERR = 3, /* worker -> meshd: the handler failed; payload is its message */
	/* meshd -> worker: one chunk of a job; payload = u64 chunk id (LE), u32
	 * attempt (LE), then the chunk's input bytes.  Answered by REP (the
	 * chunk's result) or ERR with the same seq. */
	MESH_MSG_CHUNK = 4,
	MESH_MSG_MORE = 5, /* either ring: a piece of a message that goes on in the next record, same seq */
	MESH_MSG_PART = 6, /* worker -> meshd: the last piece of one streamed part; the reply goes on */
	MESH_MSG__MAX = 6,
};

/* What a sleeper writes into its *_sleeping flag: how it is to be woken. */
#define MESH_RING_SLEEP_FUTEX 1u /* FUTEX_WAKE on the flag's futex word */
#define MESH_RING_SLEEP_BELL 2u	 /* write 1 (8 bytes) to the slot's bell eventfd */

struct mesh_ring_ctl {
	_Atomic uint64_t head;
	uint8_t pad0[56];
	_Atomic uint64_t tail;
	uint8_t pad1[56];
	_Atomic uint32_t data_futex, data_sleeping;
	uint8_t pad2[56];
	_Atomic uint32_t space_futex, space_sleeping;
	uint8_t pad3[56];
};

/* A process-local view of one ring from one side.  Nothing here is shared. */
struct mesh_ring {
	struct mesh_ring_ctl *ctl;
	uint8_t *data;
	uint64_t cap, mask;
	uint64_t pos;	/* this side's index (head for a producer, tail for a consumer) */
	uint64_t peer;	/* the last valid value of the peer's index */
	uint64_t next;	/* consumer: pos after the message being read (mesh_ring_peek) */
	int bell;	/* the bell this side rings for a peer that asked for it; -1 none */
	char why[96];	/* the reason of the last MESH_E_CORRUPT */
};

/* One message as seen by the consumer: payload in up to two spans (the second
 * non-empty only when it wrapped).  Valid until mesh_ring_pop. */
struct mesh_msg {
	uint32_t len, kind, seq;
	const uint8_t *p1, *p2;
	size_t n1, n2;
};

/* Zeroes the ring's shared control and attaches the view (the creator). */
void mesh_ring_init(struct mesh_ring *r, struct mesh_ring_ctl *ctl, uint8_t *data, uint64_t cap);
/* Attaches a view to a ring someone else initialised; pos and peer are taken
 * from the shared indices (is_producer: pos = head, peer = tail). */
void mesh_ring_attach(struct mesh_ring *r, struct mesh_ring_ctl *ctl, uint8_t *data, uint64_t cap, int is_producer);

/* Producer: appends one message.  0; -EAGAIN if there is no room now;
 * MESH_E_TOOBIG if n > MESH_RING_MAX_MSG(cap); MESH_E_CORRUPT if the
 * consumer's tail is impossible (r->why says why).  Wakes a sleeping consumer. */
int mesh_ring_put(struct mesh_ring *r, uint32_t kind, uint32_t seq, const void *p, size_t n);
/* Producer, batching: like put but publishes head only at mesh_ring_flush
 * (and never wakes).  For throughput; a put or flush publishes everything. */
int mesh_ring_put_nopub(struct mesh_ring *r, uint32_t kind, uint32_t seq, const void *p, size_t n);
void mesh_ring_flush(struct mesh_ring *r);

/* Consumer: the next message without removing it.  0; -EAGAIN if empty;
 * MESH_E_CORRUPT if head or the header is impossible (r->why). */
int mesh_ring_peek(struct mesh_ring *r, struct mesh_msg *m);
/* Consumer: releases the message last peeked; wakes a waiting producer. */
void mesh_ring_pop(struct mesh_ring *r);
/* Copies a peeked message's payload to dst (m->len bytes). */
void mesh_msg_copy(const struct mesh_msg *m, void *dst);

/* Consumer: waits until the ring is non-empty.  Spins spin_ns first, then
 * sleeps on the futex; returns early (1) when *stop is non-zero (stop may be
 * NULL); 0 when readable; MESH_E_TIMEOUT after timeout_ns (UINT64_MAX =
 * forever).  Readability is "head != tail", not validated: peek validates. */
int mesh_ring_wait_data(struct mesh_ring *r, uint64_t spin_ns, uint64_t timeout_ns, const _Atomic uint32_t *stop);
/* Producer: waits until need bytes of record space are free (same contract). */
int mesh_ring_wait_space(struct mesh_ring *r, size_t msg_len, uint64_t spin_ns, uint64_t timeout_ns,
			 const _Atomic uint32_t *stop);
/* Wakes whoever sleeps on this ring, either side (used after setting a stop
 * word the sleeper watches). */
void mesh_ring_kick(struct mesh_ring_ctl *ctl);
/* A sleeper that polls the slot's bell instead of waiting on a futex: sets
 * its flag to MESH_RING_SLEEP_BELL and looks again.  1 when it need not
 * sleep (data there; room for need bytes of record), 0 when the peer will
 * ring once it publishes (or frees room), <0 corrupt (space only).  No
 * wait here: the caller polls the bell, then reads it empty. */
int mesh_ring_bell_data(struct mesh_ring *r);
int mesh_ring_bell_space(struct mesh_ring *r, size_t msg_len);

/* A message being put in pieces (producer side); the payload stays the
 * caller's until the last record is in. */
struct mesh_ring_tx {
	const uint8_t *p;
	size_t n, off;
	uint32_t kind, seq;
	int started;
};
void mesh_ring_tx_init(struct mesh_ring_tx *tx, uint32_t kind, uint32_t seq, const void *p, size_t n);
/* Puts the records of tx that fit now: 1 once the last is in (published,
 * the consumer woken); -EAGAIN when the ring is full (wait for
 * mesh_ring_tx_next(r, tx) bytes with mesh_ring_wait_space, then call
 * again); MESH_E_CORRUPT (r->why). */
int mesh_ring_tx_put(struct mesh_ring *r, struct mesh_ring_tx *tx);
/* The payload length of tx's next record. */
size_t mesh_ring_tx_next(const struct mesh_ring *r, const struct mesh_ring_tx *tx);

/* Bytes a message of n payload bytes takes in the ring. */
static inline uint64_t mesh_ring_rec_size(size_t n)
{
	return MESH_RING_HDR + (((uint64_t)n + 15u) & ~(uint64_t)15u);
}

#endif
