#include "client/api_client.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "http/http.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
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

/* path made absolute against dir (a process's cwd) into out; 0 or -1. */
static int absolute(const char *path, const char *dir, char *out, size_t n)
{
	int w = path[0] == '/' ? snprintf(out, n, "%s", path) : snprintf(out, n, "%s/%s", dir, path);
	return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* 1 if process pid is a meshd of ours that started less than
 * MESHD_CLIENT_START_WAIT_NS ago and serves (or will) the socket want (an
 * absolute path): its --socket, or ours by default when it has none. */
static int young_meshd_for(const char *pid, const char *want, double uptime)
{
	char path[300], buf[4096], arg[PATH_MAX], cwd[PATH_MAX], mine[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "/proc/%s", pid);
	if (stat(path, &st) < 0 || st.st_uid != getuid())
		return 0;
	snprintf(path, sizeof path, "/proc/%s/stat", pid);
	FILE *f = fopen(path, "r");
	size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[len] = 0;
	const char *close_paren = strrchr(buf, ')');
	unsigned long long start = 0;
	if (!close_paren || strncmp(strchr(buf, '(') ? strchr(buf, '(') : "", "(meshd)", 7) ||
	    sscanf(close_paren + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &start) != 1)
		return 0;
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0 || uptime - (double)start / (double)hz > (double)MESHD_CLIENT_START_WAIT_NS / 1e9)
		return 0;
	/* Its socket: --socket P or --socket=P in its command line. */
	snprintf(path, sizeof path, "/proc/%s/cmdline", pid);
	f = fopen(path, "r");
	len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[len] = 0;
	arg[0] = 0;
	for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
		if (!strncmp(buf + i, "--socket=", 9))
			snprintf(arg, sizeof arg, "%s", buf + i + 9);
		else if (!strcmp(buf + i, "--socket") && i + 9 < len)
			snprintf(arg, sizeof arg, "%s", buf + i + 9);
	}
	if (!arg[0])
		return meshd_socket_default(mine, sizeof mine) == 0 && !strcmp(mine, want);
	if (arg[0] == '/')
		return !strcmp(arg, want);
	/* A relative --socket: against meshd's cwd, which a meshd not run by
	 * root hides (it makes itself non-dumpable); then its tail is what
	 * can be compared. */
	snprintf(path, sizeof path, "/proc/%s/cwd", pid);
	ssize_t k = readlink(path, cwd, sizeof cwd - 1);
	if (k <= 0) {
		size_t al = strlen(arg), wl = strlen(want);
		return al < wl && want[wl - al - 1] == '/' && !strcmp(want + wl - al, arg);
	}
	cwd[k] = 0;
	return absolute(arg, cwd, mine, sizeof mine) == 0 && !strcmp(mine, want);
}

/* 1 if a meshd of ours that will serve sock is starting now (the quick
 * start's `meshd ... &` followed at once by `mesh call`). */
static int meshd_starting(const char *sock)
{
	char want[PATH_MAX], cwd[PATH_MAX];
	double uptime = 0;
	if (sock[0] != '/' && !getcwd(cwd, sizeof cwd))
		return 0;
	if (absolute(sock, cwd, want, sizeof want) < 0)
		return 0;
	FILE *f = fopen("/proc/uptime", "r");
	int ok = f && fscanf(f, "%lf", &uptime) == 1;
	if (f)
		fclose(f);
	DIR *d = ok ? opendir("/proc") : NULL;
	if (!d)
		return 0;
	int found = 0;
	for (struct dirent *e; !found && (e = readdir(d));)
		if (isdigit((unsigned char)e->d_name[0]))
			found = young_meshd_for(e->d_name, want, uptime);
	closedir(d);
	return found;
}

/* A connected socket to sa in *fd, or a negated errno.  Nobody listens yet
 * but a meshd for it is starting: waits for it (until it is no longer
 * starting or the deadline). */
static int connect_meshd(const struct sockaddr_un *sa, uint64_t deadline, int *fd)
{
	for (int tries = 0;; tries++) {
		*fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (*fd < 0)
			return -errno;
		if (connect(*fd, (const struct sockaddr *)sa, sizeof *sa) == 0)
			return 0;
		int rc = -errno;
		close(*fd);
		*fd = -1;
		if ((rc != -ENOENT && rc != -ECONNREFUSED) || mesh_mono_ns() >= deadline)
			return rc;
		if (!meshd_starting(sa->sun_path)) {
			/* One second look: `meshd &` may not have exec'd yet. */
			if (tries > 0)
				return rc;
			mesh_sleep_ns(30 * MESH_NS_PER_MS);
			if (!meshd_starting(sa->sun_path))
				return rc;
		}
		mesh_sleep_ns(10 * MESH_NS_PER_MS);
	}
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
	if ((rc = connect_meshd(&sa, deadline, &fd)) < 0 || (rc = peer_ok(fd)) < 0) {
		if (fd >= 0)
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

/* The number after "; key=" in a Content-Type; whether it was there. */
static int type_param(const char *type, const char *key, uint64_t *out)
{
	char k[16], v[24];
	snprintf(k, sizeof k, "; %s=", key);
	const char *p = strstr(type, k);
	if (!p)
		return 0;
	p += strlen(k);
	size_t n = strcspn(p, ";");
	snprintf(v, sizeof v, "%.*s", (int)(n < sizeof v ? n : sizeof v - 1), p);
	return mesh_parse_u64(v, UINT64_MAX, out) == 0;
}

int meshd_results_page(const char *type, uint64_t *next, int *end, uint64_t *missing)
{
	uint64_t e;
	if (!type_param(type, "next", next) || !type_param(type, "end", &e))
		return -1;
	*end = e != 0;
	if (!type_param(type, "missing", missing))
		*missing = UINT64_MAX;
	return 0;
}
