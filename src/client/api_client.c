#include "client/api_client.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "http/http.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int meshd_socket_default(char *buf, size_t n)
{
	const char *env = getenv("MESH_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int w;
	if (env && *env)
		w = snprintf(buf, n, "%s", env);
	else if (xdg && xdg[0] == '/')
		w = snprintf(buf, n, "%s/mesh/meshd.sock", xdg);
	else
		w = snprintf(buf, n, "/tmp/mesh-%u/meshd.sock", (unsigned)getuid());
	return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

void meshd_reply_release(struct meshd_reply *r)
{
	free(r->body);
	*r = (struct meshd_reply)MESHD_REPLY_INIT;
}

int meshd_client_unreachable(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -EACCES || err == -ENOTDIR || err == -ENOTSOCK ||
	       err == -ENAMETOOLONG || err == -EPERM || err == -ECONNRESET;
}

/* Whoever listens at the socket learns every request: only this user or
 * root may (a socket in a directory someone else could write is swappable). */
static int peer_ok(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return -errno;
	if (cr.uid != 0 && cr.uid != getuid() && cr.uid != geteuid())
		return MESH_E_PEER;
	return 0;
}

int meshd_client_request(const char *sock, const char *method, const char *target, const void *body, size_t n,
			 uint64_t timeout_ns, struct meshd_reply *out)
{
	return meshd_client_request_stream(sock, method, target, body, n, timeout_ns, NULL, NULL, out);
}

int meshd_client_request_stream(const char *sock, const char *method, const char *target, const void *body, size_t n,
				uint64_t timeout_ns, int (*sink)(void *arg, const void *p, size_t n), void *arg,
				struct meshd_reply *out)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct mesh_buf req = MESH_BUF_INIT;
	struct mesh_http_limits lim = {0, 0, 0, MESHD_CLIENT_MAX_RESPONSE};
	struct mesh_http_response resp;
	/* No limit is a day: long enough for anything meshd does. */
	uint64_t deadline = mesh_mono_ns() + (timeout_ns ? timeout_ns : 86400ull * 1000000000ull);
	const char *type;
	int fd, rc;
	*out = (struct meshd_reply)MESHD_REPLY_INIT;
	if (strlen(sock) >= sizeof sa.sun_path)
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, sock);
	/* Every POST carries a Content-Length, even 0, as HTTP/1.1 wants. */
	rc = mesh_http_request_build(&req, method, "localhost", target, "User-Agent: mesh\r\n",
				     body || strcmp(method, "GET") ? (body ? body : "") : NULL, n);
	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		mesh_buf_release(&req);
		return rc;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || (rc = peer_ok(fd)) < 0) {
		rc = rc < 0 ? rc : -errno;
		close(fd);
		mesh_buf_release(&req);
		return rc;
	}
	mesh_http_response_init(&resp, &lim);
	resp.no_body = !strcmp(method, "HEAD");
	resp.sink = sink;
	resp.sink_arg = arg;
	rc = mesh_http_exchange(fd, req.p, req.len, &resp, deadline);
	close(fd);
	mesh_buf_release(&req);
	if (rc == 0 && mesh_buf_grow(&resp.body, 1) < 0)
		rc = -ENOMEM;
	if (rc == 0) {
		out->status = resp.status;
		type = mesh_http_response_header(&resp, "Content-Type");
		snprintf(out->type, sizeof out->type, "%s", type ? type : "");
		out->body = mesh_buf_detach(&resp.body, &out->len);
	}
	mesh_http_response_release(&resp);
	return rc;
}

static int err_from_name(const char *name)
{
#define MESH__ERR_BY_NAME(nm, off, msg)          \
	if (!strcmp(name, "E_" #nm))             \
		return MESH_E_##nm;
	MESH_ERR_MAP(MESH__ERR_BY_NAME)
#undef MESH__ERR_BY_NAME
	for (int e = 1; e < 134; e++) {
		const char *n = strerrorname_np(e);
		if (n && !strcmp(n, name))
			return -e;
	}
	return MESH_E_PROTO;
}

int meshd_reply_error(const struct meshd_reply *r, char **msg)
{
	json_t *j = r->body && r->len ? json_loadb(r->body, r->len, 0, NULL) : NULL;
	const char *m = j ? json_string_value(json_object_get(j, "error")) : NULL;
	const char *c = j ? json_string_value(json_object_get(j, "code")) : NULL;
	int err = c ? err_from_name(c) : MESH_E_PROTO;
	if (m)
		*msg = strdup(m);
	else if (asprintf(msg, "meshd answered HTTP %d", r->status) < 0)
		*msg = NULL;
	json_decref(j);
	return err;
}
