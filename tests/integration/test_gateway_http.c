/* meshd --http as an HTTP intermediary: the end of a response the program
 * ends with its close (a body delimited by the close, a chunked stream it
 * cuts) reaches the client at once.  The program is a fake upstream written
 * here (upstream.py): a lenient parser, like python's http.server, that
 * records every request it receives (the probe's aside). */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <poll.h>

/* argv: port, the file of requests received.  GET /health: the probe.
 * /close: a body without a length, ended by the close; /cut: a chunked
 * stream closed before its last chunk; both end with "t=<CLOCK_MONOTONIC
 * ns>" taken just before the close.  /slow: answered after 300 ms.  Any
 * other: "path=<path>" with a length.  The head's end is a CRLF or LF blank
 * line; a header's name is what comes before its colon, trimmed (so
 * "Transfer-Encoding : chunked" is chunked here). */
static const char upstream_py[] =
	"import socket, sys, threading, time\n"
	"port, logpath = int(sys.argv[1]), sys.argv[2]\n"
	"lock = threading.Lock()\n"
	"def log(b):\n"
	"    with lock:\n"
	"        with open(logpath, 'ab') as f:\n"
	"            f.write(b)\n"
	"class Conn:\n"
	"    def __init__(self, s):\n"
	"        self.s, self.buf = s, b''\n"
	"    def more(self):\n"
	"        d = self.s.recv(65536)\n"
	"        if not d:\n"
	"            raise EOFError\n"
	"        self.buf += d\n"
	"    def line(self):\n"
	"        while b'\\n' not in self.buf:\n"
	"            self.more()\n"
	"        i = self.buf.index(b'\\n') + 1\n"
	"        l, self.buf = self.buf[:i], self.buf[i:]\n"
	"        return l\n"
	"    def take(self, n):\n"
	"        while len(self.buf) < n:\n"
	"            self.more()\n"
	"        b, self.buf = self.buf[:n], self.buf[n:]\n"
	"        return b\n"
	"def serve(s):\n"
	"    c = Conn(s)\n"
	"    while True:\n"
	"        head = c.line()\n"
	"        while True:\n"
	"            l = c.line()\n"
	"            head += l\n"
	"            if l.strip() == b'':\n"
	"                break\n"
	"        lines = head.replace(b'\\r\\n', b'\\n').split(b'\\n')\n"
	"        path = lines[0].split(b' ')[1] if len(lines[0].split(b' ')) > 1 else b'/'\n"
	"        h = {}\n"
	"        for l in lines[1:]:\n"
	"            if b':' in l:\n"
	"                k, v = l.split(b':', 1)\n"
	"                h[k.strip().lower()] = v.strip()\n"
	"        body = b''\n"
	"        if b'chunked' in h.get(b'transfer-encoding', b'').lower():\n"
	"            while True:\n"
	"                sz = c.line()\n"
	"                body += sz\n"
	"                n = int(sz.split(b';')[0].strip() or b'0', 16)\n"
	"                if n == 0:\n"
	"                    while True:\n"
	"                        l = c.line()\n"
	"                        body += l\n"
	"                        if l.strip() == b'':\n"
	"                            break\n"
	"                    break\n"
	"                body += c.take(n + 2)\n"
	"        else:\n"
	"            body = c.take(int(h.get(b'content-length', b'0') or b'0'))\n"
	"        if path == b'/health':\n"
	"            s.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok')\n"
	"            continue\n"
	"        log(b'<<' + head + body + b'>>\\n')\n"
	"        if path == b'/close':\n"
	"            s.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nfirst\\n')\n"
	"            time.sleep(0.002)\n"
	"            s.sendall(b'last t=%d\\n' % time.monotonic_ns())\n"
	"            s.close()\n"
	"            return\n"
	"        if path == b'/cut':\n"
	"            s.sendall(b'HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n6\\r\\nhello\\n\\r\\n')\n"
	"            time.sleep(0.002)\n"
	"            d = b'last t=%d\\n' % time.monotonic_ns()\n"
	"            s.sendall(b'%x\\r\\n%s\\r\\n' % (len(d), d))\n"
	"            s.close()\n"
	"            return\n"
	"        if path == b'/slow':\n"
	"            time.sleep(0.3)\n"
	"        b = b'path=' + path\n"
	"        s.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n%s' % (len(b), b))\n"
	"def one(s):\n"
	"    try:\n"
	"        serve(s)\n"
	"    except (EOFError, OSError, ValueError, IndexError):\n"
	"        pass\n"
	"    try:\n"
	"        s.close()\n"
	"    except OSError:\n"
	"        pass\n"
	"l = socket.socket()\n"
	"l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	"l.bind(('127.0.0.1', port))\n"
	"l.listen(512)\n"
	"while True:\n"
	"    s, _ = l.accept()\n"
	"    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
	"    threading.Thread(target=one, args=(s,), daemon=True).start()\n";

/* The catalog's one program "up" (model "m"): upstream.py, its requests
 * into ./received.log. */
static void add_upstream(void)
{
	char cwd[1024], text[4096];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	t_write_file("upstream.py", upstream_py);
	t_write_file("received.log", "");
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"up\"\nbackend = \"http\"\nmodels = [\"m\"]\nprobe_path = \"/health\"\n"
		 "command = [\"python3\", \"%s/upstream.py\", \"{port}\", \"%s/received.log\"]\n",
		 cwd, cwd);
	t_write_file("catalog/up.toml", text);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sends req on a new connection and reads until the gateway closes it, at
 * most ms: the bytes in buf (NUL-terminated), the close's time in *t_close
 * (0: no close came within ms).  The connection, open (the caller closes
 * it), or -1. */
static int send_read_to_close(int port, const char *req, char *buf, size_t cap, uint64_t *t_close, int ms)
{
	int fd = connect_to(port);
	size_t got = 0;
	uint64_t deadline = mono_ns() + (uint64_t)ms * 1000000ull;
	*t_close = 0;
	buf[0] = 0;
	if (fd < 0 || send_str(fd, req) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (;;) {
		uint64_t now = mono_ns();
		struct pollfd pf = {fd, POLLIN, 0};
		if (now >= deadline || poll(&pf, 1, (int)((deadline - now) / 1000000ull) + 1) <= 0)
			break;
		ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*t_close = mono_ns();
			break;
		}
		got += (size_t)n;
		buf[got] = 0;
		if (got + 1 >= cap)
			break;
	}
	return fd;
}

/* /metrics through the control socket: its text (malloc'd) or NULL. */
static char *metrics(void)
{
	char out[4096];
	if (t_sh(out, sizeof out, 1, "curl -sS -o metrics.txt --unix-socket run/meshd.sock http://x/metrics") != 0)
		return NULL;
	return t_read_file("metrics.txt", NULL);
}

static double metric(const char *series)
{
	char *m = metrics();
	double v = m ? meshd_t_sample(m, series) : -1;
	free(m);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Tries of each kind, and the bounds from the program's close to the
 * client's.  The gateway relays it in well under a millisecond (median
 * 0.16-0.27 ms here), but on a loaded 2-CPU VM one try in a hundred waited
 * 27-121 ms for a CPU (the program's thread, meshd's loop or this one):
 * 95 % of the tries within 50 ms, every one within 1 s, which is far below
 * the idle timeout (600 s here) that a missed close waits for; after 2 s
 * a try is called hung. */
#define CLOSE_TRIES 200
#define CLOSE_BOUND_MS 50
#define CLOSE_MAX_MS 1000
#define HANG_MS 2000

/* Runs the tries of path (on the warm path: the program is warm), each on
 * a new connection; checks each ends at the client within the bound of the
 * program's close, and cut says whether it must end without its last
 * chunk.  The delays, sorted, into d. */
static void close_tries(int port, const char *path, int cut, uint64_t *d)
{
	char req[256], buf[8192];
	snprintf(req, sizeof req, "GET /upstream/m%s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	for (int i = 0; i < CLOSE_TRIES; i++) {
		uint64_t t_close;
		int fd = send_read_to_close(port, req, buf, sizeof buf, &t_close, HANG_MS);
		const char *t = strstr(buf, "last t=");
		if (!t_close) {
			/* The request is still in flight in the gateway (it would
			 * hold up the program's stop or swap until the idle
			 * timeout), while its client waits. */
			double inflight = metric("mesh_gateway_requests_in_flight{program=\"up\"}");
			FAIL("%s try %d: no close %d ms after the program's (%s); in flight now: %.0f; got: %s", path, i, HANG_MS,
			     t ? "its last bytes came" : "its last bytes did not come", inflight, buf);
		}
		close(fd);
		ASSERT_TRUE(t != NULL);
		ASSERT_EQ(strncmp(buf, "HTTP/1.1 200", 12), 0);
		uint64_t up = strtoull(t + 7, NULL, 10);
		ASSERT_GT(up, 0);
		d[i] = t_close > up ? t_close - up : 0;
		if (cut) {
			/* Told from a whole stream: the connection ends without
			 * the last chunk (0 CRLF CRLF). */
			EXPECT_CONTAINS(buf, "Transfer-Encoding: chunked");
			EXPECT_CONTAINS(buf, "hello\n");
			EXPECT_TRUE(strstr(buf, "\r\n0\r\n") == NULL);
		} else {
			EXPECT_CONTAINS(buf, "\r\n\r\nfirst\nlast t=");
		}
	}
	qsort(d, CLOSE_TRIES, sizeof *d, cmp_u64);
	printf("%s: the program's close to the client's over %d tries: median %.3f ms, p95 %.3f ms, p99 %.3f ms, max %.3f ms\n",
	       path, CLOSE_TRIES, (double)d[CLOSE_TRIES / 2] / 1e6, (double)d[CLOSE_TRIES * 95 / 100] / 1e6,
	       (double)d[CLOSE_TRIES * 99 / 100] / 1e6, (double)d[CLOSE_TRIES - 1] / 1e6);
	EXPECT_LE(d[CLOSE_TRIES * 95 / 100], CLOSE_BOUND_MS * 1000000ull);
	EXPECT_LE(d[CLOSE_TRIES - 1], CLOSE_MAX_MS * 1000000ull);
}

/* The program ends a response with its close: a body without a length, or
 * a chunked stream it cuts.  On the warm path (the loops: the program's
 * bytes and its FIN often come in one wake-up) every try ends at the
 * client within the bound of the program's close, the cut stream without
 * its last chunk, counted as an error and logged cut; nothing stays in
 * flight (a stop or a swap would wait for it). */
TEST_TIMEOUT(gateway_upstream_close_ends_the_response_at_once, 90)
{
	static uint64_t d[CLOSE_TRIES];
	char resp[8192];
	add_upstream();
	struct gw g = start_gw("--http-idle-timeout 600");
	/* warm (a cold start is served on a thread) */
	ASSERT_EQ(http_get(g.port, "/upstream/m/warm", resp, sizeof resp), 200);
	close_tries(g.port, "/close", 0, d);
	EXPECT_EQ(metric("mesh_gateway_requests_in_flight{program=\"up\"}"), 0);
	close_tries(g.port, "/cut", 1, d);
	EXPECT_EQ(metric("mesh_gateway_requests_in_flight{program=\"up\"}"), 0);
	char *m = metrics();
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_requests_total{program=\"up\",result=\"ok\"}"), CLOSE_TRIES + 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_requests_total{program=\"up\",result=\"error\"}"), CLOSE_TRIES);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"up\",limit=\"idle_stream\"}"), 0);
	free(m);
	EXPECT_EQ(count_in("meshd.err", "program=up response cut after"), CLOSE_TRIES);
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	EXPECT_EQ(stop_gw(&g), 0);
}
