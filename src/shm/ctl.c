/* The control channel: a SOCK_SEQPACKET socketpair carrying short text
 * messages (docs/worker-protocol.md). */
#include "shm/shm.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct mesh_ctl {
	int fd;
};

/* A decimal u32 without sign or leading zeros, n bytes at s. */
static int parse_u32(const char *s, size_t n, uint32_t *out)
{
	uint64_t v;
	if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
		return MESH_E_PROTO;
	if (mesh_parse_u64n(s, n, UINT32_MAX, &v) < 0)
		return MESH_E_PROTO;
	*out = (uint32_t)v;
	return 0;
}

/* A printable copy of untrusted bytes for an error message. */
static void quote(char *dst, size_t cap, const uint8_t *b, size_t n)
{
	size_t o = 0, limit = n < 60 ? n : 60;
	for (size_t i = 0; i < limit && o + 5 < cap; i++) {
		uint8_t c = b[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			dst[o++] = (char)c;
		else
			o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
	}
	if (limit < n && o + 4 < cap) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o < cap ? o : cap - 1] = 0;
}

static int proto(struct mesh_ctl_msg *m, const uint8_t *b, size_t n, const char *what)
{
	char q[200];
	quote(q, sizeof q, b, n);
	snprintf(m->text, sizeof m->text, "%s: '%s'", what, q);
	return MESH_E_PROTO;
}

static int word_is(const uint8_t *b, size_t n, const char *w)
{
	size_t k = strlen(w);
	return n == k && memcmp(b, w, k) == 0;
}

int mesh_ctl_parse(const void *buf, size_t n, struct mesh_ctl_msg *m)
{
	const uint8_t *b = buf;
	memset(m, 0, sizeof *m);
	if (n > MESH_CTL_MAX)
		return proto(m, b, n, "control message too long");
	const uint8_t *sp = memchr(b, ' ', n);
	size_t wl = sp ? (size_t)(sp - b) : n;
	const uint8_t *arg = sp ? sp + 1 : NULL;
	size_t al = sp ? n - wl - 1 : 0;
	if (word_is(b, wl, "ready")) {
		if (sp)
			return proto(m, b, n, "'ready' takes no argument");
		m->kind = MESH_CTL_READY;
		return 0;
	}
	if (word_is(b, wl, "online") || word_is(b, wl, "halted")) {
		int online = b[0] == 'o';
		if (!sp || parse_u32((const char *)arg, al, &m->gen) < 0)
			return proto(m, b, n, "expected a generation number");
		/* "halted 0" is allowed: nothing had run. */
		if (online && m->gen == 0)
			return proto(m, b, n, "generation 0 is never run");
		m->kind = online ? MESH_CTL_ONLINE : MESH_CTL_HALTED;
		return 0;
	}
	if (word_is(b, wl, "fail")) {
		if (!sp || al == 0)
			return proto(m, b, n, "'fail' needs a reason");
		size_t o = 0;
		for (size_t i = 0; i < al && o < MESH_CTL_MAX; i++) {
			uint8_t c = arg[i];
			m->text[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
		}
		m->text[o] = 0;
		m->kind = MESH_CTL_FAIL;
		return 0;
	}
	return proto(m, b, n, "unknown control message");
}

int mesh__wcmd_parse(const void *buf, size_t n, struct mesh_wcmd *cmd)
{
	const uint8_t *b = buf;
	memset(cmd, 0, sizeof *cmd);
	if (word_is(b, n, "halt")) {
		cmd->kind = MESH_WCMD_HALT;
		return 0;
	}
	if (word_is(b, n, "exit")) {
		cmd->kind = MESH_WCMD_EXIT;
		return 0;
	}
	if (n < 5 || memcmp(b, "run ", 4) != 0)
		return MESH_E_PROTO;
	const uint8_t *a = b + 4, *end = b + n;
	const uint8_t *sp = memchr(a, ' ', (size_t)(end - a));
	if (!sp || parse_u32((const char *)a, (size_t)(sp - a), &cmd->gen) < 0 ||
	    parse_u32((const char *)sp + 1, (size_t)(end - sp - 1), &cmd->slot) < 0 || cmd->gen == 0)
		return MESH_E_PROTO;
	cmd->kind = MESH_WCMD_RUN;
	return 0;
}

int mesh_ctl_pair(struct mesh_ctl **out, int *child_fd)
{
	*out = NULL;
	*child_fd = -1;
	struct mesh_ctl *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		int err = -errno;
		free(c);
		return err;
	}
	int fl = fcntl(sv[0], F_GETFL);
	if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0) {
		int err = -errno;
		close(sv[0]);
		close(sv[1]);
		free(c);
		return err;
	}
	c->fd = sv[0];
	*out = c;
	*child_fd = sv[1];
	return 0;
}

void mesh_ctl_free(struct mesh_ctl *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

int mesh_ctl_fd(const struct mesh_ctl *c)
{
	return c->fd;
}

static void close_passed_fds(struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
			close(fd);
		}
	}
}

int mesh_ctl_recv(struct mesh_ctl *c, struct mesh_ctl_msg *m)
{
	uint8_t buf[MESH_CTL_MAX + 1];
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(8 * sizeof(int))];
	} cbuf;
	struct iovec iov = {buf, sizeof buf};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
	memset(m, 0, sizeof *m);
	ssize_t n;
	do
		n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : errno == ECONNRESET ? MESH_E_CLOSED : -errno;
	/* On a seqpacket socket 0 bytes is end of file; an empty datagram reads
	 * the same and is taken as the worker closing (meshd then reaps it). */
	if (n == 0)
		return MESH_E_CLOSED;
	if (mh.msg_controllen > 0) {
		close_passed_fds(&mh);
		snprintf(m->text, sizeof m->text, "the worker passed file descriptors");
		return MESH_E_PROTO;
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		return proto(m, buf, (size_t)n, "control message too long");
	return mesh_ctl_parse(buf, (size_t)n, m);
}

int mesh_ctl_wait(struct mesh_ctl *c, struct mesh_ctl_msg *m, uint64_t timeout_ns)
{
	uint64_t now = mesh_mono_ns();
	uint64_t deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
	for (;;) {
		int rc = mesh_ctl_recv(c, m);
		if (rc != -EAGAIN)
			return rc;
		now = mesh_mono_ns();
		if (now >= deadline)
			return MESH_E_TIMEOUT;
		uint64_t ms = (deadline - now + 999999) / 1000000;
		struct pollfd pfd = {c->fd, POLLIN, 0};
		if (poll(&pfd, 1, ms > 60000 ? 60000 : (int)ms) < 0 && errno != EINTR)
			return -errno;
	}
}

/* Sends one message, with the nfd (at most 2) fds attached. */
static int send_msg(int sock, const char *text, const int *fds, unsigned nfd)
{
	struct iovec iov = {(void *)text, strlen(text)};
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} cbuf;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfd) {
		memset(&cbuf, 0, sizeof cbuf);
		mh.msg_control = cbuf.b;
		mh.msg_controllen = CMSG_SPACE(nfd * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EPIPE || errno == ECONNRESET ? MESH_E_CLOSED : -errno;
	return 0;
}

int mesh__ctl_send(int sock, const char *text, int fd)
{
	return send_msg(sock, text, &fd, fd >= 0);
}

int mesh_ctl_run(struct mesh_ctl *c, struct mesh_slot *s, uint32_t gen)
{
	if (gen == 0)
		return MESH_E_RANGE;
	mesh_slot_arm(s, gen);
	return mesh_ctl_run_armed(c, s, gen);
}

int mesh_ctl_run_armed(struct mesh_ctl *c, struct mesh_slot *s, uint32_t gen)
{
	if (gen == 0)
		return MESH_E_RANGE;
	char text[64];
	snprintf(text, sizeof text, "run %u %u", gen, mesh_slot_index(s));
	int fds[2] = {mesh_slot_fd(s), mesh_slot_bell(s)};
	return send_msg(c->fd, text, fds, 2);
}

/* The message goes first: a worker that sees the word exits at once, and a
 * send after that would meet a closed socket. */
int mesh_ctl_halt(struct mesh_ctl *c, struct mesh_slot *s)
{
	int rc = send_msg(c->fd, "halt", NULL, 0);
	if (s)
		mesh_slot_set_shutdown(s, MESH_SHUTDOWN_HALT);
	return rc;
}

int mesh_ctl_exit(struct mesh_ctl *c, struct mesh_slot *s)
{
	int rc = send_msg(c->fd, "exit", NULL, 0);
	if (s)
		mesh_slot_set_shutdown(s, MESH_SHUTDOWN_EXIT);
	return rc;
}
