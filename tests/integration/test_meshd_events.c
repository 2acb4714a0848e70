/* GET /v1/events (meshd/api/api_events.c, docs/api.md "Events"): a real
 * meshd followed over its control socket as a browser's EventSource would
 * follow it -- a job's run and end, a crash with its report, a worker going
 * cold after its idle TTL; a reconnect with Last-Event-ID gets what it
 * missed and nothing twice; after a restart it is told so. */
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static char out[65536];

/* One follower: its connection and what it has read (the raw HTTP bytes). */
struct follow {
	int fd;
	char buf[1 << 20];
	size_t len;
};

/* Connects and asks for the stream, Last-Event-ID: last when not NULL.  0 or -1. */
static int follow_open(struct follow *f, const char *last)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char req[512];
	f->len = 0;
	f->buf[0] = 0;
	f->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	strcpy(sa.sun_path, SOCK);
	if (f->fd < 0 || connect(f->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		return -1;
	int n = snprintf(req, sizeof req, "GET /v1/events HTTP/1.1\r\nHost: meshd\r\nAccept: text/event-stream\r\n%s%s%s\r\n",
			 last ? "Last-Event-ID: " : "", last ? last : "", last ? "\r\n" : "");
	return write(f->fd, req, (size_t)n) == n ? 0 : -1;
}

/* Reads until needle is in what was read, the stream ends or ms pass:
 * whether needle came. */
static int follow_until(struct follow *f, const char *needle, unsigned ms)
{
	uint64_t end = t_now_ms() + ms;
	while (!strstr(f->buf, needle)) {
		uint64_t now = t_now_ms();
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		if (now >= end || poll(&p, 1, (int)(end - now)) != 1)
			return 0;
		ssize_t n = read(f->fd, f->buf + f->len, sizeof f->buf - 1 - f->len);
		if (n <= 0)
			return strstr(f->buf, needle) != NULL;
		f->len += (size_t)n;
		f->buf[f->len] = 0;
	}
	return 1;
}

/* The id of the last event read ("" when none) into id. */
static void last_id(const struct follow *f, char *id, size_t cap)
{
	const char *a = NULL;
	for (const char *p = f->buf; (p = strstr(p, "\nid: ")); p++)
		a = p + 5;
	id[0] = 0;
	if (a)
		snprintf(id, cap, "%.*s", (int)strcspn(a, "\r\n"), a);
}

static int count(const char *s, const char *needle)
{
	int n = 0;
	for (; (s = strstr(s, needle)); s++)
		n++;
	return n;
}

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

TEST_TIMEOUT(meshd_events_follow_a_job_a_crash_and_a_worker_going_cold, 60)
{
	static struct follow f;
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), "idle_ttl = \"1s\"\n");
	meshd_t_add_program(out, sizeof out, "crashy", t_bin("tests-workers/host_worker"),
			    "args = [\"crash-on-call\"]\n");
	pid_t m = meshd_t_start(.state = "state");
	ASSERT_EQ(follow_open(&f, NULL), 0);
	ASSERT_TRUE(follow_until(&f, "event: hello", 5000));
	EXPECT_CONTAINS(f.buf, "Content-Type: text/event-stream");
	ASSERT_EQ(mesh("submit echo --chunks 2000 --wait"), 0);
	EXPECT_TRUE(follow_until(&f, "\"state\":\"running\",\"done\":0,\"buried\":0,\"chunks\":2000", 5000));
	EXPECT_TRUE(follow_until(&f, "\"state\":\"complete\",\"done\":2000,\"buried\":0,\"chunks\":2000", 5000));
	EXPECT_TRUE(follow_until(&f, "\"program\":\"echo\",\"worker\":0,", 1000));
	EXPECT_CONTAINS(f.buf, "\"state\":\"RUNNING\"");
	/* Its idle TTL (1 s) later: cold, and the savings tick says so. */
	EXPECT_TRUE(follow_until(&f, "\"state\":\"DOWN\"", 10000));
	/* A crash: its report, with the worker's last lines. */
	EXPECT_NE(mesh("call crashy x"), 0);
	EXPECT_TRUE(follow_until(&f, "event: crash", 5000));
	EXPECT_TRUE(follow_until(&f, "about to crash", 2000));
	EXPECT_TRUE(follow_until(&f, "SIGSEGV", 2000));
	/* Ids go up by one, none twice. */
	int ids = count(f.buf, "\nid: "), events = count(f.buf, "\nevent: ") - 1; /* hello has none */
	EXPECT_EQ(ids, events);
	close(f.fd);
	/* "0": everything kept, from this life's start. */
	ASSERT_EQ(follow_open(&f, "0"), 0);
	EXPECT_TRUE(follow_until(&f, "event: crash", 5000));
	EXPECT_CONTAINS(f.buf, "\"state\":\"running\",\"done\":0,\"buried\":0,\"chunks\":2000");
	EXPECT_FALSE(strstr(f.buf, "event: reset") != NULL);
	close(f.fd);
	/* Other methods are refused; a control request still gets through. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o /dev/null -w '%%{http_code}' -X POST --unix-socket " SOCK
				       " http://m/v1/events"),
		  0);
	EXPECT_STREQ(out, "405");
	EXPECT_EQ(mesh("ps"), 0);
	EXPECT_EQ(meshd_t_stop(m), 0);
}

/* A follower that reconnects with the last id it had gets every event it
 * missed, in order, none twice; one from another meshd's life (a restart)
 * is told `reset` with the reason, then gets this life's events. */
TEST_TIMEOUT(meshd_events_resume_after_a_reconnect_and_reset_after_a_restart, 60)
{
	static struct follow f, g, h;
	char id[64];
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	pid_t m = meshd_t_start(.state = "state");
	ASSERT_EQ(follow_open(&f, NULL), 0);
	ASSERT_EQ(mesh("submit echo --chunks 10 --wait"), 0);
	ASSERT_TRUE(follow_until(&f, "\"state\":\"complete\",\"done\":10", 5000));
	last_id(&f, id, sizeof id);
	ASSERT_TRUE(id[0] != 0);
	close(f.fd);
	/* Missed while away: two more jobs. */
	ASSERT_EQ(mesh("submit echo --chunks 3 --wait"), 0);
	ASSERT_EQ(mesh("submit echo --chunks 4 --wait"), 0);
	ASSERT_EQ(follow_open(&g, id), 0);
	EXPECT_TRUE(follow_until(&g, "\"state\":\"complete\",\"done\":4", 5000));
	EXPECT_FALSE(strstr(g.buf, "event: reset") != NULL);
	EXPECT_FALSE(strstr(g.buf, "\"done\":10") != NULL); /* had already */
	const char *three = strstr(g.buf, "\"state\":\"complete\",\"done\":3"), *four = strstr(g.buf, "\"done\":4,");
	EXPECT_TRUE(three && four && three < four);
	/* The first id it sends is the one after ours. */
	char *dash = strrchr(id, '-');
	ASSERT_TRUE(dash != NULL);
	char next[64];
	snprintf(next, sizeof next, "id: %.*s-%llu\n", (int)(dash - id), id, strtoull(dash + 1, NULL, 10) + 1);
	const char *first = strstr(g.buf, "id: ");
	EXPECT_TRUE(first && !strncmp(first, next, strlen(next)));
	last_id(&g, id, sizeof id);
	/* meshd stops: the stream says bye and ends. */
	EXPECT_EQ(meshd_t_stop(m), 0);
	EXPECT_TRUE(follow_until(&g, "event: bye", 5000));
	close(g.fd);
	m = meshd_t_start(.state = "state");
	ASSERT_EQ(mesh("call echo hi"), 0);
	ASSERT_EQ(follow_open(&h, id), 0);
	EXPECT_TRUE(follow_until(&h, "event: reset\ndata: {\"reason\":\"restarted\"", 5000));
	/* This life's events from its start: echo's worker started. */
	EXPECT_TRUE(follow_until(&h, "\"program\":\"echo\",\"worker\":0,", 5000));
	close(h.fd);
	EXPECT_EQ(meshd_t_stop(m), 0);
}
