/* A byte relay between two non-blocking stream sockets, driven by the
 * caller's event loop (level-triggered epoll or poll).
 *
 * Each direction moves bytes through a pipe with splice(2), so the data
 * never enters user space; where splice is refused (a socket type or
 * kernel that cannot do it, no fds left for a pipe) that direction copies
 * through a bounded buffer instead.  Memory per relay is bounded: at most
 * one pipe's worth (MESH_RELAY_PIPE_BYTES asked) per direction in the
 * kernel, or MESH_RELAY_BUF_BYTES of user buffer on the copy path.
 *
 * Idle costs nothing: a pipe is taken only when bytes are to move, and
 * with a pool (below) it goes back to the pool as soon as it is empty, so
 * an idle relay holds no pipe, no buffer and no fd beyond its two sockets.
 * Without a pool a relay makes its pipes on first use and keeps them.
 *
 * A watcher (opts.watch) sees every byte of both directions as it is read,
 * before it is written on (HTTP request counting); a relay with a watcher
 * copies (spliced bytes never enter user space).
 *
 * Half-close: when one side's reads end (EOF) and everything read from it
 * has been delivered, the other side gets shutdown(SHUT_WR); the opposite
 * direction keeps flowing until it ends too.
 *
 * Caller protocol:
 *   1. mesh_relay_init(&r, a, b, flags) or mesh_relay_init_opts(&r, a, b,
 *      &opts): the relay uses (does not own) a, b, and the pool.
 *   2. Register both fds with the loop for mesh_relay_events(&r, side).
 *   3. On any readiness of either fd, call mesh_relay_pump(&r) (or
 *      mesh_relay_pump_events with what epoll said for that fd); then update
 *      the registration of each fd to mesh_relay_events(&r, side) (the mask
 *      only changes when pump ran).
 *   4. When pump returns 1 (both directions ended and delivered) or a
 *      negative code (a reset, a refused write, the watcher's refusal),
 *      call mesh_relay_release(&r) and close both fds.
 * The fds must be O_NONBLOCK stream sockets (or pipes).  One thread: a
 * pool and its relays belong to the loop that drives them. */
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

/* Spare empty pipes and the copy path's read buffer, shared by the relays
 * of one loop.  An empty pipe goes back to the pool; past max_idle spare
 * pipes it is closed. */
#define MESH_RELAY_POOL_MAX 64
struct mesh_relay_pool {
	int spare[MESH_RELAY_POOL_MAX][2];
	size_t spare_cap[MESH_RELAY_POOL_MAX]; /* each spare pipe's size, asked once when it was made */
	size_t nspare, max_idle; /* max_idle <= MESH_RELAY_POOL_MAX */
	char *scratch;          /* MESH_RELAY_BUF_BYTES, made on first use */
	uint64_t pipes_made;    /* pipes created so far */
	size_t pipes_out;       /* pipes held by relays now */
};

/* An empty pool keeping at most max_idle spare pipes.  Cannot fail. */
void mesh_relay_pool_init(struct mesh_relay_pool *p, size_t max_idle);
/* Closes the spare pipes, frees the buffer.  Relays using p must be
 * released first. */
void mesh_relay_pool_release(struct mesh_relay_pool *p);

/* Sees the n bytes at p just read from side dir's source (dir 0: side 0
 * -> side 1), before they are written on; p NULL, n 0: that source said
 * EOF.  0 to go on, a negative code ends the relay with it. */
typedef int (*mesh_relay_watch_fn)(void *ctx, int dir, const char *p, size_t n);

struct mesh_relay_opts {
	unsigned flags;                /* MESH_RELAY_NO_SPLICE */
	struct mesh_relay_pool *pool;  /* NULL: own pipes, own buffers */
	mesh_relay_watch_fn watch;     /* NULL: none */
	void *watch_ctx;
};

struct mesh_relay_dir {
	int pipe[2];     /* splice path: bytes in flight; -1 when none is held */
	char *buf;       /* copy path: bytes [off, off+len) in flight; NULL when none */
	size_t off, len;
	size_t pending;  /* bytes read from the source not yet written */
	size_t cap;      /* most bytes in flight at once (the pipe's size when one is held) */
	uint64_t bytes;  /* delivered so far */
	unsigned char eof;   /* the source said EOF */
	unsigned char shut;  /* the sink got shutdown(SHUT_WR) */
	unsigned char copy;  /* on the copy path */
	unsigned char nosplice; /* copy for good: asked, watched, or an fd that cannot splice */
	unsigned char scratch;  /* buf is the pool's scratch buffer (only inside a pump) */
	/* splice into the pipe said EAGAIN while it held data: the pipe may be
	 * full (it counts buffers, not bytes), so reading waits for a write
	 * to make room, or a level-triggered loop would spin */
	unsigned char full;
};

struct mesh_relay {
	int fd[2];                 /* side 0, side 1 (not owned) */
	struct mesh_relay_dir dir[2]; /* dir[0]: fd[0] -> fd[1]; dir[1]: fd[1] -> fd[0] */
	/* After a pump's negative return: the side whose fd failed (a read
	 * or a write on it: a reset, EPIPE), or -1 (the watcher refused, no
	 * memory). */
	int failed_side;
	struct mesh_relay_pool *pool;
	mesh_relay_watch_fn watch;
	void *watch_ctx;
};

/* Prepares a relay between a and b.  Always returns 0: pipes and buffers
 * are taken when bytes first move, and a pipe that cannot be created only
 * makes that transfer copy. */
int mesh_relay_init(struct mesh_relay *r, int a, int b, unsigned flags);
/* The same with a pool and a watcher (o NULL: as mesh_relay_init(.., 0)). */
int mesh_relay_init_opts(struct mesh_relay *r, int a, int b, const struct mesh_relay_opts *o);
/* 1 while the relay holds a pipe or a buffer (bytes in flight). */
int mesh_relay_busy(const struct mesh_relay *r);
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
/* Frees (or gives back to the pool) the pipes and buffers; leaves fd[0],
 * fd[1] open (the caller's). */
void mesh_relay_release(struct mesh_relay *r);

#endif
