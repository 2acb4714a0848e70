/* cold_upstream: an OpenAI-compatible HTTP program whose start takes a
 * fixed time, for bench_gateway.sh's cold start (issue 13).
 *
 *   cold_upstream PORT MODEL START_SECONDS READY_FILE
 *
 * At its first instruction it notes the time (CLOCK_REALTIME); it sleeps
 * START_SECONDS, listens on 127.0.0.1:PORT, then writes READY_FILE:
 * "STARTED_NS READY_NS\n", both wall-clock nanoseconds.  Then it serves,
 * keep-alive, one thread: `GET /v1/models` lists MODEL, any other request
 * gets a small chat completion.  Its own start is a sleep and a listen: a
 * few microseconds of jitter, where the Python test server's start (an
 * interpreter and its imports) varies by tens of milliseconds a start on a
 * small VM, more than the figure the benchmark measures.  Not hardened: a
 * benchmark's program on loopback; it ends with SIGTERM. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXC 64
#define CAP 65536

struct conn {
	int fd;
	size_t n;
	char buf[CAP];
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static const char *model;

/* Answers every whole request in c->buf; -1 when the connection ends. */
static int serve(struct conn *c)
{
	for (;;) {
		char *end = memmem(c->buf, c->n, "\r\n\r\n", 4);
		if (!end)
			return c->n < CAP ? 0 : -1;
		size_t head = (size_t)(end - c->buf) + 4, body = 0;
		char *cl = memmem(c->buf, head, "Content-Length:", 15);
		if (!cl)
			cl = memmem(c->buf, head, "content-length:", 15);
		if (cl)
			body = strtoul(cl + 15, NULL, 10);
		if (body > CAP - head)
			return -1;
		if (c->n < head + body)
			return 0;
		char out[512];
		const char *fmt = !strncmp(c->buf, "GET /v1/models", 14)
					  ? "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\"}]}"
					  : "{\"object\":\"chat.completion\",\"model\":\"%s\",\"choices\":[]}";
		char js[256];
		int jn = snprintf(js, sizeof js, fmt, model);
		int on = snprintf(out, sizeof out,
				  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", jn,
				  js);
		if (write(c->fd, out, (size_t)on) != on)
			return -1;
		memmove(c->buf, c->buf + head + body, c->n - head - body);
		c->n -= head + body;
	}
}

int main(int argc, char **argv)
{
	long long started = now_ns();
	if (argc != 5) {
		fprintf(stderr, "usage: cold_upstream PORT MODEL START_SECONDS READY_FILE\n");
		return 2;
	}
	model = argv[2];
	double delay = atof(argv[3]);
	struct timespec d = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
	while (nanosleep(&d, &d) < 0 && errno == EINTR)
		;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 128) < 0) {
		perror("cold_upstream: listen");
		return 1;
	}
	long long ready = now_ns();
	FILE *f = fopen(argv[4], "w");
	if (!f || fprintf(f, "%lld %lld\n", started, ready) < 0 || fclose(f) != 0) {
		perror("cold_upstream: ready file");
		return 1;
	}
	static struct conn cs[MAXC];
	struct pollfd pf[MAXC + 1];
	int nc = 0;
	for (;;) {
		pf[0] = (struct pollfd){ls, POLLIN, 0};
		for (int i = 0; i < nc; i++)
			pf[i + 1] = (struct pollfd){cs[i].fd, POLLIN, 0};
		if (poll(pf, (nfds_t)nc + 1, -1) < 0)
			continue;
		for (int i = nc - 1; i >= 0; i--) {
			if (!pf[i + 1].revents)
				continue;
			struct conn *c = &cs[i];
			ssize_t r = read(c->fd, c->buf + c->n, CAP - c->n);
			if (r > 0)
				c->n += (size_t)r;
			if (r <= 0 || serve(c) < 0) {
				close(c->fd);
				cs[i].fd = cs[nc - 1].fd;
				cs[i].n = cs[nc - 1].n;
				memcpy(cs[i].buf, cs[nc - 1].buf, cs[nc - 1].n);
				nc--;
			}
		}
		if (pf[0].revents && nc < MAXC) {
			int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0) {
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				cs[nc].fd = fd;
				cs[nc].n = 0;
				nc++;
			}
		}
	}
}
