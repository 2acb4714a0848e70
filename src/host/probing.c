/* An HTTP program's readiness and liveness on its host's loop: the listen
 * tests, the warmth probe on the connection that found the port listening,
 * the periodic probe once warm.  See probing.h. */
#include "host/probing.h"

#include "base/clock.h"
#include "base/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* The start's pace (probing.h): listen tests every 1/4000 of the time since
 * the spawn within [LISTEN_MIN_NS, LISTEN_MAX_NS]; probes of a server that
 * listens but is not warm every 1/1000 within [PROBE_MIN_NS, PROBE_MAX_NS]. */
#define LISTEN_DIV 4000ull
#define LISTEN_MIN_NS 250000ull
#define LISTEN_MAX_NS 5000000ull
#define PROBE_DIV 1000ull
#define PROBE_MIN_NS 2000000ull
#define PROBE_MAX_NS 100000000ull
/* A connect that a test could not finish at once (not loopback). */
#define CONNECT_NS 500000000ull
/* The start's probe awaits its answer this long. */
#define START_ANSWER_NS 1000000000ull

enum { P_IDLE, P_LISTEN, P_CONNECTING, P_PROBE, P_WARM, P_CHECK };

static uint64_t pace(uint64_t elapsed, uint64_t div, uint64_t lo, uint64_t hi)
{
	uint64_t v = elapsed / div;
	return v < lo ? lo : v > hi ? hi : v;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * MESH_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* fd watched for events (EPOLLIN or EPOLLOUT), or not (0). */
static void watch(struct mesh__probing *pr, int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.u64 = pr->tag};
	if (pr->watched == fd && events)
		epoll_ctl(pr->epfd, EPOLL_CTL_MOD, fd, &ev);
	else if (events)
		epoll_ctl(pr->epfd, EPOLL_CTL_ADD, fd, &ev);
	else
		epoll_ctl(pr->epfd, EPOLL_CTL_DEL, fd, NULL);
	pr->watched = events ? fd : -1;
}

static void close_fd(struct mesh__probing *pr, int *fd)
{
	if (*fd < 0)
		return;
	if (pr->watched == *fd)
		watch(pr, *fd, 0);
	close(*fd);
	*fd = -1;
}

static void end_probe(struct mesh__probing *pr)
{
	mesh_probe_end(&pr->pc);
	memset(&pr->pc, 0, sizeof pr->pc);
}

void mesh__probing_init(struct mesh__probing *pr, int epfd, uint64_t tag)
{
	memset(pr, 0, sizeof *pr);
	pr->epfd = epfd;
	pr->tag = tag;
	pr->lfd = pr->pfd = pr->watched = -1;
	mesh_probe_target_default(&pr->t);
}

void mesh__probing_close(struct mesh__probing *pr)
{
	if (pr->phase == P_PROBE || pr->phase == P_CHECK)
		end_probe(pr);
	close_fd(pr, &pr->lfd);
	close_fd(pr, &pr->pfd);
	pr->phase = P_IDLE;
	pr->due = 0;
}

void mesh__probing_start(struct mesh__probing *pr, uint64_t t0, uint64_t t_exec)
{
	mesh__probing_close(pr);
	pr->t0 = t0;
	pr->t_exec = t_exec;
	pr->t_refused = pr->t_listen = pr->t_probe = pr->t_warm = pr->cpu_ns = 0;
	pr->listen_tests = pr->probes = pr->fails = 0;
	pr->listens = pr->checking = 0;
	pr->cur = 0;
	pr->addr[0] = 0;
	snprintf(pr->last, sizeof pr->last, "no probe yet");
	pr->phase = P_LISTEN;
	pr->due = t_exec + LISTEN_MIN_NS;
}

uint64_t mesh__probing_next(const struct mesh__probing *pr)
{
	switch (pr->phase) {
	case P_LISTEN:
	case P_WARM:
		return pr->due;
	case P_CONNECTING:
		return pr->conn_deadline;
	case P_PROBE:
	case P_CHECK:
		return pr->pc.deadline;
	default:
		return 0;
	}
}

int mesh__probing_take(struct mesh__probing *pr)
{
	int fd = pr->pfd, one = 1;
	if (fd < 0 || pr->phase != P_WARM)
		return -1;
	if (pr->watched == fd)
		watch(pr, fd, 0);
	pr->pfd = -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* A connect to the current address on pr->lfd (made, or a refused one
 * reused: connect(AF_UNSPEC) resets it, one socket for all the tests):
 * 0 connected, 1 in progress, or -errno. */
static int try_connect(struct mesh__probing *pr)
{
	const struct sockaddr_storage *a = &pr->addrs[pr->cur];
	if (pr->lfd < 0 && (pr->lfd = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	if (connect(pr->lfd, (const struct sockaddr *)a, pr->lens[pr->cur]) == 0)
		return 0;
	if (errno == EINPROGRESS || errno == EINTR)
		return 1;
	int e = -errno;
	struct sockaddr reset = {.sa_family = AF_UNSPEC};
	if (pr->naddrs > 1 || connect(pr->lfd, &reset, sizeof reset) < 0)
		close_fd(pr, &pr->lfd); /* another family next, or cannot be reused */
	return e;
}

static void addr_text(const struct sockaddr_storage *a, char *out, size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)a;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		snprintf(out, cap, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const void *)a;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		snprintf(out, cap, "%s:%u", ip, ntohs(s4->sin_port));
	}
}

/* The probe of a connected pr->pfd begins (its request sent). */
static void begin_probe(struct mesh__probing *pr, int phase, uint64_t answer_ns, uint64_t now)
{
	struct mesh_probe_result r;
	struct mesh_probe_opts o = pr->o;
	o.response_timeout_ns = answer_ns;
	pr->probes++;
	pr->t_probe = now;
	pr->phase = phase;
	if (mesh_probe_begin(&pr->pc, pr->pfd, &pr->t, &o, phase == P_PROBE, &r) != 0) {
		/* Sent nothing, or its send failed: a probe that did not pass. */
		snprintf(pr->last, sizeof pr->last, "%s", r.reason[0] ? r.reason : "cold: cannot send the probe");
		pr->pc.done = 1;
		return;
	}
	watch(pr, pr->pfd, EPOLLIN);
}

/* The listen test found nothing listening at now: the next one is due. */
static void refused(struct mesh__probing *pr, uint64_t now, int err)
{
	char a[64];
	addr_text(&pr->addrs[pr->cur], a, sizeof a);
	pr->t_refused = now;
	pr->listens = 0;
	pr->t_listen = 0;
	pr->cur = (pr->cur + 1) % (pr->naddrs ? pr->naddrs : 1);
	if (err == -ECONNREFUSED)
		snprintf(pr->last, sizeof pr->last, "cold: nothing listens on %s yet", a);
	else
		snprintf(pr->last, sizeof pr->last, "cold: connect to %s failed: %s", a, mesh_strerror(err));
	/* From the last test's due time: a cadence that does not drift by the
	 * test's own time. */
	pr->due += pace(now - pr->t0, LISTEN_DIV, LISTEN_MIN_NS, LISTEN_MAX_NS);
	if (pr->due < now)
		pr->due = now + LISTEN_MIN_NS;
	pr->phase = P_LISTEN;
}

/* The warm probe's answer is awaited at most the interval, at least 0.2 s,
 * at most 1 s. */
static uint64_t check_answer_ns(const struct mesh__probing *pr)
{
	return pr->interval < 200 * MESH_NS_PER_MS ? 200 * MESH_NS_PER_MS
	       : pr->interval > MESH_NS_PER_S	   ? MESH_NS_PER_S
						   : pr->interval;
}

/* A connect went through: the connection is the probe's (the start's, or
 * a warm program's check). */
static void connected(struct mesh__probing *pr, uint64_t now)
{
	if (pr->watched == pr->lfd)
		watch(pr, pr->lfd, 0);
	pr->pfd = pr->lfd;
	pr->lfd = -1;
	if (pr->checking) {
		begin_probe(pr, P_CHECK, check_answer_ns(pr), now);
		return;
	}
	if (!pr->listens) {
		pr->listens = 1;
		pr->t_listen = now;
	}
	begin_probe(pr, P_PROBE, START_ANSWER_NS, now);
}

/* A connect (try_connect's returns): connected, its probe begins; in
 * progress, its end watched. */
static int connect_step(struct mesh__probing *pr, uint64_t now)
{
	int rc = try_connect(pr);
	if (rc == 0) {
		connected(pr, now);
	} else if (rc == 1) {
		pr->phase = P_CONNECTING;
		pr->conn_deadline = now + CONNECT_NS;
		watch(pr, pr->lfd, EPOLLOUT);
	}
	return rc;
}

/* A listen test, due now. */
static void listen_test(struct mesh__probing *pr, uint64_t now)
{
	pr->listen_tests++;
	int rc = connect_step(pr, now);
	if (rc < 0)
		refused(pr, now, rc);
}

static int check_probed(struct mesh__probing *pr, struct mesh_probe_result *r, uint64_t now);

/* A warm program's check that could not connect: a failed probe. */
static int check_unconnected(struct mesh__probing *pr, int err, uint64_t now)
{
	struct mesh_probe_result r;
	close_fd(pr, &pr->lfd);
	memset(&r, 0, sizeof r);
	r.err = err;
	snprintf(r.reason, sizeof r.reason, "cold: cannot connect: %s", mesh_strerror(err));
	return check_probed(pr, &r, now);
}

/* A connect in progress: through, refused, or still under way. */
static int connecting(struct mesh__probing *pr, uint64_t now)
{
	struct pollfd pf = {pr->lfd, POLLOUT, 0};
	int e = 0;
	socklen_t sl = sizeof e;
	if (poll(&pf, 1, 0) == 0) {
		if (now < pr->conn_deadline)
			return MESH__PROBING_NOT_YET;
		e = ETIMEDOUT;
	} else if (getsockopt(pr->lfd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0) {
		e = errno;
	}
	if (!e) {
		connected(pr, now);
		return MESH__PROBING_NOT_YET;
	}
	if (pr->checking)
		return check_unconnected(pr, -e, now);
	close_fd(pr, &pr->lfd);
	refused(pr, now, -e);
	return MESH__PROBING_NOT_YET;
}

/* The probe's verdict: warm, by the judgement or the wanted status. */
static int verdict(struct mesh__probing *pr, struct mesh_probe_result *r)
{
	int warm = r->warm;
	if (pr->want_status) {
		warm = r->status == (int)pr->want_status && (r->warm || r->phase == MESH_PROBE_JUDGE);
		if (!warm && r->status)
			snprintf(r->reason, sizeof r->reason, "cold: HTTP %d, not %u, from GET %.180s", r->status,
				 pr->want_status, pr->t.path);
	}
	snprintf(pr->last, sizeof pr->last, "%s", r->reason);
	if (warm)
		snprintf(pr->addr, sizeof pr->addr, "%s", r->addr);
	return warm;
}

/* The start's probe is over: WARM, or the next test is due. */
static int start_probed(struct mesh__probing *pr, struct mesh_probe_result *r, uint64_t now)
{
	int warm = verdict(pr, r), keep = pr->pc.keep;
	end_probe(pr);
	if (pr->watched == pr->pfd)
		watch(pr, pr->pfd, 0);
	if (warm) {
		if (!keep)
			close_fd(pr, &pr->pfd);
		pr->t_warm = now;
		pr->phase = P_WARM;
		pr->due = pr->interval ? now + pr->interval : 0;
		return MESH__PROBING_WARM;
	}
	/* "Not yet": each probe on a new connection (a kept one leaves the
	 * kernel's quick ACKs: a server's second write, Nagle's, waited 40 ms
	 * for the delayed ACK of its first). */
	close_fd(pr, &pr->pfd);
	pr->phase = P_LISTEN;
	pr->due = now + pace(now - pr->t0, PROBE_DIV, PROBE_MIN_NS, PROBE_MAX_NS);
	return MESH__PROBING_NOT_YET;
}

/* A warm program's probe is over: HUNG after failures in a row. */
static int check_probed(struct mesh__probing *pr, struct mesh_probe_result *r, uint64_t now)
{
	int warm = verdict(pr, r);
	end_probe(pr);
	close_fd(pr, &pr->pfd);
	pr->phase = P_WARM;
	pr->due = now + pr->interval;
	if (warm) {
		pr->fails = 0;
		return MESH__PROBING_NOT_YET;
	}
	return ++pr->fails >= pr->failures ? MESH__PROBING_HUNG : MESH__PROBING_NOT_YET;
}

/* Warm, its probe due: on a new connection. */
static int check(struct mesh__probing *pr, uint64_t now)
{
	close_fd(pr, &pr->pfd); /* a start's kept connection nobody took */
	pr->checking = 1;
	int rc = connect_step(pr, now);
	return rc < 0 ? check_unconnected(pr, rc, now) : MESH__PROBING_NOT_YET;
}

/* A probe in flight: its answer read, or its deadline (or its request
 * that could not be sent: over at once, its reason in pr->last). */
static int probing(struct mesh__probing *pr, uint64_t now)
{
	struct mesh_probe_result r;
	memset(&r, 0, sizeof r);
	if (!pr->pc.done && !mesh_probe_read(&pr->pc, &r)) {
		if (now < pr->pc.deadline)
			return MESH__PROBING_NOT_YET;
		mesh_probe_expire(&pr->pc, &r);
	} else if (pr->pc.done && !r.reason[0]) {
		snprintf(r.reason, sizeof r.reason, "%s", pr->last);
	}
	return pr->phase == P_PROBE ? start_probed(pr, &r, now) : check_probed(pr, &r, now);
}

int mesh__probing_step(struct mesh__probing *pr, uint64_t now)
{
	uint64_t cpu0 = pr->checking ? 0 : thread_cpu_ns();
	int rc = MESH__PROBING_NOT_YET;
	switch (pr->phase) {
	case P_LISTEN:
		if (now >= pr->due)
			listen_test(pr, now);
		break;
	case P_CONNECTING:
		rc = connecting(pr, now);
		break;
	case P_PROBE:
		rc = probing(pr, now);
		break;
	case P_WARM:
		if (pr->due && now >= pr->due)
			rc = check(pr, now);
		break;
	case P_CHECK:
		rc = probing(pr, now);
		break;
	}
	/* A probe begun in this step whose request could not go is over. */
	if (rc == MESH__PROBING_NOT_YET && (pr->phase == P_PROBE || pr->phase == P_CHECK) && pr->pc.done)
		rc = probing(pr, now);
	if (cpu0)
		pr->cpu_ns += thread_cpu_ns() - cpu0;
	return rc;
}
