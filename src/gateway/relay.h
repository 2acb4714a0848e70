/* A byte relay between two non-blocking stream sockets, driven by the
 * caller's event loop (level-triggered epoll or poll).
 *
 * Each direction moves bytes through its own pipe with splice(2), so the
 * data never enters user space; where splice is refused (a socket type or
 * kernel that cannot do it, no fds left for the pipe) that direction falls
 * back to read/write through a bounded buffer.  Memory per relay is bounded:
 * at most MESH_RELAY_PIPE_BYTES per direction in the kernel pipe, or
 * MESH_RELAY_BUF_BYTES of user buffer on the fallback path.
 *
 * Half-close: when one side's reads end (EOF) and everything read from it
 * has been delivered, the other side gets shutdown(SHUT_WR); the opposite
 * direction keeps flowing until it ends too.
 *
 * Caller protocol:
 *   1. mesh_relay_init(&r, a, b, flags): the relay uses (does not own) a, b.
 *   2. Register both fds with the loop for mesh_relay_events(&r, side).
 *   3. On any readiness of either fd, call mesh_relay_pump(&r) (or
 *      mesh_relay_pump_events with what epoll said for that fd); then update
 *      the registration of each fd to mesh_relay_events(&r, side) (the mask
 *      only changes when pump ran).
 *   4. When pump returns 1 (both directions ended and delivered) or a
 *      negative code (a reset, a refused write), call mesh_relay_release(&r)
 *      and close both fds.
 * The fds must be O_NONBLOCK stream sockets (or pipes). */
#ifndef MESH_GATEWAY_RELAY_H
#define MESH_GATEWAY_RELAY_H

#include <stddef.h>
#include <stdint.h>

#define MESH_RELAY_PIPE_BYTES (256u * 1024u)
#define MESH_RELAY_BUF_BYTES (64u * 1024u)

/* Flags for mesh_relay_init. */
enum {
	MESH_RELAY_NO_SPLICE = 1, /* copy through user space (tests, benchmarks) */
};

struct mesh_relay_dir {
	int pipe[2];     /* splice path: bytes in flight; -1 when unused */
	char *buf;       /* copy path: bytes [off, off+len) in flight */
	size_t off, len;
	size_t pending;  /* bytes read from the source not yet written */
	size_t cap;      /* most bytes in flight at once */
	uint64_t bytes;  /* delivered so far */
	unsigned char eof;   /* the source said EOF */
	unsigned char shut;  /* the sink got shutdown(SHUT_WR) */
	unsigned char copy;  /* on the copy path */
	/* splice into the pipe said EAGAIN while it held data: the pipe may be
	 * full (it counts buffers, not bytes), so reading waits for a write
	 * to make room, or a level-triggered loop would spin */
	unsigned char full;
};

struct mesh_relay {
	int fd[2];                 /* side 0, side 1 (not owned) */
	struct mesh_relay_dir dir[2]; /* dir[0]: fd[0] -> fd[1]; dir[1]: fd[1] -> fd[0] */
};

/* Prepares a relay between a and b.  Always returns 0: a pipe that cannot be
 * created only moves that direction to the copy path (whose buffer is
 * allocated on first use). */
int mesh_relay_init(struct mesh_relay *r, int a, int b, unsigned flags);
/* Moves every byte that can move now, without blocking.  Returns 0 while
 * either direction is open, 1 when both have ended and been delivered, or a
 * negative code (-ECONNRESET, -EPIPE, -ENOMEM, ...) when the relay must end. */
int mesh_relay_pump(struct mesh_relay *r);
/* Like mesh_relay_pump, but moves only what an epoll event on side (0 or
 * 1) can have unblocked: the direction out of a readable side, the
 * direction into a writable one (both on EPOLLHUP/EPOLLERR).  Same returns. */
int mesh_relay_pump_events(struct mesh_relay *r, int side, uint32_t events);
/* The epoll mask (EPOLLIN / EPOLLOUT, possibly 0) side (0 or 1) needs now. */
uint32_t mesh_relay_events(const struct mesh_relay *r, int side);
/* Frees the pipes and buffers; leaves fd[0], fd[1] open (the caller's). */
void mesh_relay_release(struct mesh_relay *r);

#endif
