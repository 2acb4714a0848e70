#include "gateway/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>


static void dir_init(struct mesh_relay_dir *d, unsigned flags)
{
	memset(d, 0, sizeof *d);
	d->pipe[0] = d->pipe[1] = -1;
	d->cap = MESH_RELAY_BUF_BYTES;
	d->copy = 1;
	if (flags & MESH_RELAY_NO_SPLICE)
		return;
	if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
		d->pipe[0] = d->pipe[1] = -1;
		return;
	}
	/* A bigger pipe means fewer wakeups per byte on bulk transfers; the
	 * kernel may refuse (per-user pipe limits), then the default stands. */
	(void)fcntl(d->pipe[1], F_SETPIPE_SZ, (int)MESH_RELAY_PIPE_BYTES);
	int sz = fcntl(d->pipe[1], F_GETPIPE_SZ);
	d->cap = sz > 0 ? (size_t)sz : 65536;
	d->copy = 0;
}

int mesh_relay_init(struct mesh_relay *r, int a, int b, unsigned flags)
{
	r->fd[0] = a;
	r->fd[1] = b;
	dir_init(&r->dir[0], flags);
	dir_init(&r->dir[1], flags);
	return 0;
}

static void close_pipe(struct mesh_relay_dir *d)
{
	if (d->pipe[0] >= 0)
		close(d->pipe[0]);
	if (d->pipe[1] >= 0)
		close(d->pipe[1]);
	d->pipe[0] = d->pipe[1] = -1;
}

/* Moves a direction from splice to copying; the bytes already in the pipe
 * are read back into the buffer so that none is lost or reordered. */
static int to_copy(struct mesh_relay_dir *d)
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
	close_pipe(d);
	d->buf = b;
	d->cap = cap;
	d->off = 0;
	d->len = got;
	d->copy = 1;
	return 0;
}

/* Writes what is pending.  >0 bytes moved, 0 would block, <0 error. */
static ssize_t dir_out(struct mesh_relay_dir *d, int to)
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
			int rc = to_copy(d);
			return rc < 0 ? rc : dir_out(d, to);
		}
		return -errno;
	}
	if (d->copy) {
		d->off += (size_t)w;
		d->len -= (size_t)w;
		if (d->len == 0)
			d->off = 0;
	}
	d->pending -= (size_t)w;
	d->bytes += (uint64_t)w;
	d->full = 0;
	return w;
}

/* Reads what fits.  >0 bytes, 0 would block, -1 EOF seen (d->eof set), <-1 error. */
static ssize_t dir_in(struct mesh_relay_dir *d, int from)
{
	ssize_t n;
	if (d->copy && !d->buf) {
		d->buf = malloc(d->cap);
		if (!d->buf)
			return -ENOMEM;
	}
	for (;;) {
		if (d->copy)
			n = read(from, d->buf + d->off + d->len, d->cap - d->off - d->len);
		else
			n = splice(from, NULL, d->pipe[1], NULL, d->cap - d->pending,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
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
			/* This fd cannot be spliced: copy instead. */
			close_pipe(d);
			d->copy = 1;
			d->cap = MESH_RELAY_BUF_BYTES;
			return dir_in(d, from);
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

static size_t dir_room(const struct mesh_relay_dir *d)
{
	if (d->copy)
		return d->cap - d->off - d->len;
	return d->cap - d->pending;
}


static int pump_dir(struct mesh_relay_dir *d, int from, int to)
{
	for (;;) {
		int moved = 0;
		if (d->pending > 0) {
			ssize_t w = dir_out(d, to);
			if (w < 0)
				return (int)w;
			moved |= w > 0;
		}
		if (!d->eof && dir_room(d) > 0 && !d->full) {
			size_t want = dir_room(d);
			ssize_t n = dir_in(d, from);
			if (n < -1)
				return (int)n;
			/* A short read drained the source: deliver it and stop;
			 * the level-triggered loop calls again when more comes.
			 * Saves a read that would only say EAGAIN (latency). */
			if (n > 0 && (size_t)n < want) {
				ssize_t w = dir_out(d, to);
				if (w < 0)
					return (int)w;
				break;
			}
			moved |= n != 0;
		}
		if (!moved)
			break;
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
		int rc = pump_dir(&r->dir[i], r->fd[i], r->fd[1 - i]);
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
		int rc = pump_dir(&r->dir[i], r->fd[i], r->fd[1 - i]);
		if (rc < 0)
			return rc;
	}
	return relay_state(r);
}

uint32_t mesh_relay_events(const struct mesh_relay *r, int side)
{
	const struct mesh_relay_dir *in = &r->dir[side], *out = &r->dir[1 - side];
	uint32_t ev = 0;
	if (!in->eof && dir_room(in) > 0 && !in->full)
		ev |= EPOLLIN;
	if (out->pending > 0)
		ev |= EPOLLOUT;
	return ev;
}

void mesh_relay_release(struct mesh_relay *r)
{
	for (int i = 0; i < 2; i++) {
		close_pipe(&r->dir[i]);
		free(r->dir[i].buf);
		r->dir[i].buf = NULL;
	}
}
