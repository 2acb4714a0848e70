/* cold_http_server: a small HTTP/1.1 server that starts cold, like a model
 * server loading its weights.  The upstream for `mesh serve` in the tests,
 * the benchmarks and the README demo.
 *
 *   cold_http_server --port P [--host ADDR] [--listen-delay S] [--ready-delay S]
 *                    [--model NAME] [--ready-file PATH] [--pid-file PATH]
 *                    [--fork-helper] [--ignore-term]
 *
 * --listen-delay S  sleep S seconds before listening (connections refused)
 * --ready-delay S   after listening, GET /v1/models answers 503 for S seconds
 * --ready-file PATH when ready, write "<start_ns> <ready_ns>\n" (CLOCK_MONOTONIC,
 *                   start = entry to main) to PATH
 * --pid-file PATH   write the pid at start
 * --fork-helper     start a child process that sleeps (as vLLM's workers do),
 *                   so that a stop must take the whole process group
 * --ignore-term     ignore SIGTERM (a stop then needs SIGKILL)
 *
 * Routes: GET /v1/models (the model list, once ready), GET /ping ("pong"),
 * GET /hello ("hello from <pid>"), POST /echo (the body back),
 * GET /bytes/N (N bytes), GET /crash (exit 42 at once, no answer).
 * Keep-alive unless the request says Connection: close.  One thread per
 * connection; every request is logged on stdout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_s(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static const char *model = "demo";
static uint64_t ready_at_ns;

static int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int reply(int fd, int status, const char *reason, const char *ctype, const void *body, size_t n,
		 int keep)
{
	char head[256];
	int h = snprintf(head, sizeof head,
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
			 status, reason, ctype, n, keep ? "keep-alive" : "close");
	if (send_all(fd, head, (size_t)h) < 0)
		return -1;
	return n ? send_all(fd, body, n) : 0;
}

static int send_bytes(int fd, uint64_t n, int keep)
{
	static char block[1 << 16];
	char head[160];
	int h = snprintf(head, sizeof head,
			 "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %llu\r\n"
			 "Connection: %s\r\n\r\n",
			 (unsigned long long)n, keep ? "keep-alive" : "close");
	if (block[0] != 'x')
		memset(block, 'x', sizeof block);
	if (send_all(fd, head, (size_t)h) < 0)
		return -1;
	while (n) {
		size_t k = n < sizeof block ? (size_t)n : sizeof block;
		if (send_all(fd, block, k) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

struct ready_note {
	const char *path;
	uint64_t start_ns;
};

/* Waits out the ready delay, then says so (and stamps the ready file: the
 * moment /v1/models first answers 200). */
static void *ready_main(void *arg)
{
	struct ready_note *rn = arg;
	uint64_t now = mono_ns();
	if (now < ready_at_ns)
		sleep_s((double)(ready_at_ns - now) / 1e9);
	if (rn->path) {
		char tmp[4096];
		snprintf(tmp, sizeof tmp, "%s.tmp", rn->path);
		FILE *f = fopen(tmp, "w");
		if (f) {
			fprintf(f, "%llu %llu\n", (unsigned long long)rn->start_ns, (unsigned long long)ready_at_ns);
			fclose(f);
			rename(tmp, rn->path);
		}
	}
	printf("ready (model %s)\n", model);
	return NULL;
}

/* Serves one connection: requests until close or error. */
static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[16384];
	size_t have = 0;
	for (;;) {
		char *end;
		while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
			if (have == sizeof buf)
				goto out;
			ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				goto out;
			have += (size_t)r;
		}
		size_t head_len = (size_t)(end - buf) + 4;
		char method[16] = "", path[512] = "";
		if (sscanf(buf, "%15s %511s", method, path) != 2)
			goto out;
		size_t clen = 0;
		int keep = 1;
		for (char *l = strstr(buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
			if (!strncasecmp(l + 2, "Content-Length:", 15))
				clen = strtoul(l + 17, NULL, 10);
			if (!strncasecmp(l + 2, "Connection:", 11) && strstr(l + 2, "close") &&
			    strstr(l + 2, "close") < strstr(l + 2, "\r\n"))
				keep = 0;
		}
		printf("request %s %s\n", method, path);
		if (!strcmp(path, "/echo") && clen > sizeof buf - head_len) {
			/* A body bigger than the buffer streams straight back. */
			char hd[160];
			int h = snprintf(hd, sizeof hd,
					 "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
					 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
					 clen);
			if (send_all(fd, hd, (size_t)h) < 0 || send_all(fd, buf + head_len, have - head_len) < 0)
				goto out;
			size_t left = clen - (have - head_len);
			while (left) {
				ssize_t r = recv(fd, buf, left < sizeof buf ? left : sizeof buf, 0);
				if (r <= 0 || send_all(fd, buf, (size_t)r) < 0)
					goto out;
				left -= (size_t)r;
			}
			goto out;
		}
		if (clen > sizeof buf - head_len)
			goto out;
		while (have < head_len + clen) {
			ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
			if (r <= 0)
				goto out;
			have += (size_t)r;
		}
		int rc;
		if (!strcmp(path, "/crash")) {
			printf("crashing on request\n");
			fflush(stdout);
			_exit(42);
		} else if (!strcmp(path, "/v1/models")) {
			if (mono_ns() < ready_at_ns) {
				static const char msg[] = "{\"error\":\"loading\"}\n";
				rc = reply(fd, 503, "Service Unavailable", "application/json", msg, sizeof msg - 1, keep);
			} else {
				char body[512];
				int n = snprintf(body, sizeof body,
						 "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\"}]}\n",
						 model);
				rc = reply(fd, 200, "OK", "application/json", body, (size_t)n, keep);
			}
		} else if (!strcmp(path, "/ping")) {
			rc = reply(fd, 200, "OK", "text/plain", "pong\n", 5, keep);
		} else if (!strcmp(path, "/hello")) {
			char body[64];
			int n = snprintf(body, sizeof body, "hello from %d\n", (int)getpid());
			rc = reply(fd, 200, "OK", "text/plain", body, (size_t)n, keep);
		} else if (!strcmp(path, "/echo")) {
			rc = reply(fd, 200, "OK", "application/octet-stream", buf + head_len, clen, keep);
		} else if (!strncmp(path, "/bytes/", 7)) {
			rc = send_bytes(fd, strtoull(path + 7, NULL, 10), keep);
		} else {
			rc = reply(fd, 404, "Not Found", "text/plain", "not found\n", 10, keep);
		}
		fflush(stdout);
		if (rc < 0 || !keep)
			break;
		memmove(buf, buf + head_len + clen, have - head_len - clen);
		have -= head_len + clen;
	}
out:
	close(fd);
	return NULL;
}

static int usage(void)
{
	fprintf(stderr, "usage: cold_http_server --port P [--host ADDR] [--listen-delay S] [--ready-delay S]\n"
			"       [--model NAME] [--ready-file PATH] [--pid-file PATH] [--fork-helper] [--ignore-term]\n");
	return 64;
}

int main(int argc, char **argv)
{
	uint64_t start_ns = mono_ns();
	const char *host = "127.0.0.1", *port = NULL, *ready_file = NULL, *pid_file = NULL;
	double listen_delay = 0, ready_delay = 0;
	int fork_helper = 0, ignore_term = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--fork-helper")) {
			fork_helper = 1;
			continue;
		}
		if (!strcmp(a, "--ignore-term")) {
			ignore_term = 1;
			continue;
		}
		if (!v)
			return usage();
		i++;
		if (!strcmp(a, "--port"))
			port = v;
		else if (!strcmp(a, "--host"))
			host = v;
		else if (!strcmp(a, "--listen-delay"))
			listen_delay = atof(v);
		else if (!strcmp(a, "--ready-delay"))
			ready_delay = atof(v);
		else if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--ready-file"))
			ready_file = v;
		else if (!strcmp(a, "--pid-file"))
			pid_file = v;
		else
			return usage();
	}
	if (!port)
		return usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (ignore_term)
		signal(SIGTERM, SIG_IGN);
	if (pid_file) {
		FILE *f = fopen(pid_file, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	if (fork_helper) {
		pid_t h = fork();
		if (h == 0) {
			/* Bounded, should a test that started it die without
			 * stopping its group. */
			alarm(120);
			for (;;)
				pause();
		}
		printf("helper process %d\n", (int)h);
	}
	printf("cold_http_server %d: loading (listen in %.3f s, ready %.3f s later)\n", (int)getpid(), listen_delay,
	       ready_delay);
	sleep_s(listen_delay);

	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
	int gai = getaddrinfo(host, port, &hints, &ai);
	if (gai) {
		fprintf(stderr, "cold_http_server: bad address %s:%s: %s\n", host, port, gai_strerror(gai));
		return 64;
	}
	int l = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (l < 0 || bind(l, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l, 512) < 0) {
		fprintf(stderr, "cold_http_server: cannot listen on %s:%s: %s\n", host, port, strerror(errno));
		return 71;
	}
	freeaddrinfo(ai);
	ready_at_ns = mono_ns() + (uint64_t)(ready_delay * 1e9);
	printf("listening on %s:%s\n", host, port);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	static struct ready_note rn;
	rn.path = ready_file;
	rn.start_ns = start_ns;
	pthread_t rt;
	pthread_create(&rt, &at, ready_main, &rn);
	for (;;) {
		int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			return 71;
		}
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		pthread_t t;
		if (pthread_create(&t, &at, conn_main, (void *)(intptr_t)c))
			close(c);
	}
}
