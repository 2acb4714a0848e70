/* The splice byte relay; see relay.h.  A direction holds a pipe (splice)
 * or a buffer (copy) only while bytes are in flight through it. */
#include "http/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

void mesh_relay_pool_init(struct mesh_relay_pool *p, size_t max_idle)
{
	memset(p, 0, sizeof *p);
	p->max_idle = max_idle < MESH_RELAY_POOL_MAX ? max_idle : MESH_RELAY_POOL_MAX;
}

void mesh_relay_pool_release(struct mesh_relay_pool *p)
{
	while (p->nspare) {
		p->nspare--;
		close(p->spare[p->nspare][0]);
		close(p->spare[p->nspare][1]);
	}
	free(p->scratch);
	p->scratch = NULL;
}

static void dir_init(struct mesh_relay_dir *d, int copy)
{
	memset(d, 0, sizeof *d);
	d->pipe[0] = d->pipe[1] = -1;
	d->copy = d->nosplice = (unsigned char)copy;
	d->cap = copy ? MESH_RELAY_BUF_BYTES : MESH_RELAY_PIPE_BYTES;
}

int mesh_relay_init_opts(struct mesh_relay *r, int a, int b, const struct mesh_relay_opts *o)
{
	static const struct mesh_relay_opts none = {0, NULL, NULL, NULL};
	if (!o)
		o = &none;
	r->fd[0] = a;
	r->fd[1] = b;
	r->pool = o->pool;
	r->watch = o->watch;
	r->watch_ctx = o->watch_ctx;
	r->failed_side = -1;
	/* The watcher must see the bytes: they go through user space. */
	int copy = (o->flags & MESH_RELAY_NO_SPLICE) || o->watch;
	dir_init(&r->dir[0], copy);
	dir_init(&r->dir[1], copy);
	return 0;
}

int mesh_relay_init(struct mesh_relay *r, int a, int b, unsigned flags)
{
	struct mesh_relay_opts o = {flags, NULL, NULL, NULL};
	return mesh_relay_init_opts(r, a, b, &o);
}

/* Gives d's pipe back: to the pool when it is empty and the pool has room,
 * else closed. */
static void pipe_put(struct mesh_relay *r, struct mesh_relay_dir *d)
{
	struct mesh_relay_pool *p = r->pool;
	if (d->pipe[0] < 0)
		return;
	if (p) {
		p->pipes_out--;
		if (d->pending == 0 && p->nspare < p->max_idle) {
			p->spare[p->nspare][0] = d->pipe[0];
			p->spare[p->nspare][1] = d->pipe[1];
			p->spare_cap[p->nspare] = d->cap; /* the pipe's size while it splices */
			p->nspare++;
			d->pipe[0] = d->pipe[1] = -1;
			return;
		}
	}
	close(d->pipe[0]);
	close(d->pipe[1]);
	d->pipe[0] = d->pipe[1] = -1;
}

/* Gives d a pipe: a spare one or a new one.  0 or -errno (no fds, the
 * per-user pipe quota). */
static int pipe_take(struct mesh_relay *r, struct mesh_relay_dir *d)
{
	struct mesh_relay_pool *p = r->pool;
	if (p && p->nspare) {
		/* Its size is known: no fcntl on the path of every request. */
		p->nspare--;
		d->pipe[0] = p->spare[p->nspare][0];
		d->pipe[1] = p->spare[p->nspare][1];
		d->cap = p->spare_cap[p->nspare];
		p->pipes_out++;
		return 0;
	}
	if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
		d->pipe[0] = d->pipe[1] = -1;
		return -errno;
	}
	/* A bigger pipe means fewer wakeups per byte on bulk transfers; the
	 * kernel may refuse (per-user pipe limits), then the default stands. */
	int sz = fcntl(d->pipe[1], F_SETPIPE_SZ, (int)MESH_RELAY_PIPE_BYTES); /* the size it got */
	if (sz <= 0)
		sz = fcntl(d->pipe[1], F_GETPIPE_SZ);
	if (p) {
		p->pipes_made++;
		p->pipes_out++;
	}
	d->cap = sz > 0 ? (size_t)sz : 65536;
	return 0;
}

/* After a pump of d: what is no longer in flight is given back; bytes left
 * in the pool's scratch buffer move to a buffer of their own. */
static int dir_settle(struct mesh_relay *r, struct mesh_relay_dir *d)
{
	if (d->pending == 0) {
		if (!d->copy) {
			if (r->pool)
				pipe_put(r, d);
		} else if (d->scratch || r->pool) {
			if (!d->scratch)
				free(d->buf);
			d->buf = NULL;
			d->scratch = 0;
			d->off = d->len = 0;
		}
		if (!d->nosplice && d->copy) {
			/* A copy forced by a missing pipe lasts one transfer. */
			d->copy = 0;
			d->cap = MESH_RELAY_PIPE_BYTES;
		}
		return 0;
	}
	if (d->scratch) {
		char *b = malloc(d->len);
		if (!b)
			return -ENOMEM;
		memcpy(b, d->buf + d->off, d->len);
		d->buf = b;
		d->off = 0;
		d->cap = d->len;
		d->scratch = 0;
	}
	return 0;
}

/* Moves a direction from splice to copying; the bytes already in the pipe
 * are read back into a buffer so that none is lost or reordered. */
static int to_copy(struct mesh_relay *r, struct mesh_relay_dir *d)
{
	size_t cap = d->cap > MESH_RELAY_BUF_BYTES ? d->cap : MESH_RELAY_BUF_BYTES;
	char *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	size_t got = 0;
	while (got < d->pending) {
		ssize_t n = read(d->pipe[0], b + got, d->pending - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(b);
			return n < 0 ? -errno : -EIO;
		}
		got += (size_t)n;
	}
	size_t pending = d->pending;
	d->pending = 0; /* the pipe is empty: it may go back to the pool */
	pipe_put(r, d);
	d->pending = pending;
	d->buf = b;
	d->cap = cap;
	d->off = 0;
	d->len = got;
	d->copy = d->nosplice = 1;
	return 0;
}

/* Writes what is pending.  >0 bytes moved, 0 would block, <0 error. */
static ssize_t dir_out(struct mesh_relay *r, struct mesh_relay_dir *d, int to)
{
	ssize_t w;
	for (;;) {
		if (d->copy)
			w = write(to, d->buf + d->off, d->len);
		else
			w = splice(d->pipe[0], NULL, to, NULL, d->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (w >= 0 || errno != EINTR)
			break;
	}
	if (w < 0) {
		if (errno == EAGAIN)
			return 0;
		if (!d->copy && errno == EINVAL) {
			int rc = to_copy(r, d);
			return rc < 0 ? rc : dir_out(r, d, to);
		}
		return -errno;
	}
	if (d->copy) {
		d->off += (size_t)w;
		d->len -= (size_t)w;
		if (d->len == 0) {
			d->off = 0;
			if (r->pool) {
				/* Emptied: the next read goes to the shared buffer,
				 * never into a leftover's buffer (sized to the leftover). */
				if (!d->scratch)
					free(d->buf);
				d->buf = NULL;
				d->scratch = 0;
			}
		}
	}
	d->pending -= (size_t)w;
	d->bytes += (uint64_t)w;
	d->full = 0;
	return w;
}

static size_t dir_room(const struct mesh_relay *r, const struct mesh_relay_dir *d)
{
	if (!d->copy)
		return d->cap - d->pending;
	/* A pooled copy reads into the shared buffer only when nothing of
	 * its own is left: the leftover is the bound. */
	if (r->pool)
		return d->len ? 0 : MESH_RELAY_BUF_BYTES;
	return d->cap - d->off - d->len;
}

/* Reads what fits.  >0 bytes, 0 would block, -1 EOF seen (d->eof set), <-1 error. */
static ssize_t dir_in(struct mesh_relay *r, struct mesh_relay_dir *d, int from)
{
	ssize_t n;
	if (!d->copy && d->pipe[0] < 0 && pipe_take(r, d) < 0) {
		/* No pipe now (fds, quota): this transfer copies. */
		d->copy = 1;
	}
	if (d->copy && !d->buf) {
		if (r->pool) {
			if (!r->pool->scratch && !(r->pool->scratch = malloc(MESH_RELAY_BUF_BYTES)))
				return -ENOMEM;
			d->buf = r->pool->scratch;
			d->scratch = 1;
			d->cap = MESH_RELAY_BUF_BYTES;
		} else {
			d->cap = MESH_RELAY_BUF_BYTES;
			if (!(d->buf = malloc(d->cap)))
				return -ENOMEM;
		}
		d->off = d->len = 0;
	}
	for (;;) {
		if (d->copy)
			n = read(from, d->buf + d->off + d->len, d->cap - d->off - d->len);
		else
			n = splice(from, NULL, d->pipe[1], NULL, d->cap - d->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n < 0) {
		if (errno == EAGAIN) {
			if (d->pending > 0)
				d->full = 1;
			return 0;
		}
		if (!d->copy && errno == EINVAL && d->pending == 0) {
			/* This fd cannot be spliced: copy instead, for good. */
			pipe_put(r, d);
			d->copy = d->nosplice = 1;
			return dir_in(r, d, from);
		}
		return -errno;
	}
	if (n == 0) {
		d->eof = 1;
		return -1;
	}
	if (d->copy)
		d->len += (size_t)n;
	d->pending += (size_t)n;
	return n;
}

static int pump_dir(struct mesh_relay *r, int i)
{
	struct mesh_relay_dir *d = &r->dir[i];
	int from = r->fd[i], to = r->fd[1 - i], rc = 0;
	for (;;) {
		int moved = 0;
		if (d->pending > 0) {
			ssize_t w = dir_out(r, d, to);
			if (w < 0) {
				rc = (int)w;
				r->failed_side = w == -ENOMEM ? -1 : 1 - i;
				break;
			}
			moved |= w > 0;
		}
		if (!d->eof && dir_room(r, d) > 0 && !d->full) {
			size_t want = dir_room(r, d), before = d->off + d->len;
			ssize_t n = dir_in(r, d, from);
			if (n < -1) {
				rc = (int)n;
				r->failed_side = n == -ENOMEM ? -1 : i;
				break;
			}
			if (r->watch && n != 0) {
				rc = n > 0 ? r->watch(r->watch_ctx, i, d->buf + before, (size_t)n)
					   : r->watch(r->watch_ctx, i, NULL, 0);
				if (rc < 0) {
					r->failed_side = -1;
					break;
				}
			}
			/* A short read drained the source: deliver it and stop;
			 * the level-triggered loop calls again when more comes.
			 * Saves a read that would only say EAGAIN (latency). */
			if (n > 0 && (size_t)n < want) {
				ssize_t w = dir_out(r, d, to);
				if (w < 0) {
					rc = (int)w;
					r->failed_side = w == -ENOMEM ? -1 : 1 - i;
				}
				break;
			}
			moved |= n != 0;
		}
		if (!moved)
			break;
	}
	int src = dir_settle(r, d);
	if (rc < 0)
		return rc;
	if (src < 0) {
		r->failed_side = -1;
		return src;
	}
	if (d->eof && d->pending == 0 && !d->shut) {
		/* ENOTCONN (the peer already gone) and ENOTSOCK (a pipe) leave
		 * nothing to tell: the other direction decides the end. */
		(void)shutdown(to, SHUT_WR);
		d->shut = 1;
	}
	return 0;
}

static int relay_state(const struct mesh_relay *r)
{
	return r->dir[0].shut && r->dir[1].shut;
}

int mesh_relay_pump(struct mesh_relay *r)
{
	for (int i = 0; i < 2; i++) {
		int rc = pump_dir(r, i);
		if (rc < 0)
			return rc;
	}
	return relay_state(r);
}

int mesh_relay_pump_events(struct mesh_relay *r, int side, uint32_t events)
{
	/* Readable (or hung up, or in error) side: its outgoing direction;
	 * writable (or in error): the direction into it. */
	int dirs[2] = {0, 0};
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		dirs[side] = 1;
	if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		dirs[1 - side] = 1;
	for (int i = 0; i < 2; i++) {
		if (!dirs[i])
			continue;
		int rc = pump_dir(r, i);
		if (rc < 0)
			return rc;
	}
	return relay_state(r);
}

uint32_t mesh_relay_events(const struct mesh_relay *r, int side)
{
	const struct mesh_relay_dir *in = &r->dir[side], *out = &r->dir[1 - side];
	uint32_t ev = 0;
	if (!in->eof && dir_room(r, in) > 0 && !in->full)
		ev |= EPOLLIN;
	if (out->pending > 0)
		ev |= EPOLLOUT;
	return ev;
}

int mesh_relay_busy(const struct mesh_relay *r)
{
	for (int i = 0; i < 2; i++)
		if (r->dir[i].pipe[0] >= 0 || r->dir[i].buf)
			return 1;
	return 0;
}

void mesh_relay_release(struct mesh_relay *r)
{
	for (int i = 0; i < 2; i++) {
		struct mesh_relay_dir *d = &r->dir[i];
		pipe_put(r, d); /* a pipe with bytes left is closed, not pooled */
		if (!d->scratch)
			free(d->buf);
		d->buf = NULL;
		d->scratch = 0;
	}
}
