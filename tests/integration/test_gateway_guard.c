/* The gateway's door (gateway/gw_guard.h), with a real meshd --http and
 * raw requests: API keys (401, OpenAI-shaped, /health needs none), the Host
 * rule against DNS rebinding, the Origin rule against cross-site pages,
 * GET /v1/models/{id}. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* GET target with the extra header lines (each ending \r\n); the status,
 * the whole response in resp. */
static int get(int port, const char *target, const char *headers, char *resp, size_t cap)
{
	char req[2048];
	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\n%sConnection: close\r\n\r\n", target, headers);
	return exchange(port, req, resp, cap);
}

TEST_TIMEOUT(gateway_api_key_file_asks_a_key_in_constant_time_compare, 60)
{
	char resp[8192];
	add_oa("m", "\"test-model\"", "", "");
	t_write_file("keys", "# the gateway's keys\nsk-first-key\n\nsk-second\n");
	chmod("keys", 0600);
	struct gw g = start_gw("--http-api-key-file keys");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\n", resp, sizeof resp), 401);
	EXPECT_CONTAINS(resp, "\"code\":\"invalid_api_key\"");
	EXPECT_CONTAINS(resp, "You didn't provide an API key");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nAuthorization: Bearer sk-first-kez\r\n", resp,
		      sizeof resp),
		  401);
	EXPECT_CONTAINS(resp, "Incorrect API key provided");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nAuthorization: Bearer sk-first\r\n", resp, sizeof resp),
		  401); /* a prefix of a key is no key */
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nAuthorization: Bearer sk-second\r\n", resp, sizeof resp),
		  200);
	EXPECT_CONTAINS(resp, "\"id\":\"test-model\"");
	EXPECT_EQ(get(g.port, "/health", "Host: localhost\r\n", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "{\"status\":\"ok\"}");
	/* A chat without the key never starts the program. */
	char req[2048];
	chat_request(req, sizeof req, "test-model", "hi", 0, 0);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	read_all(fd, resp, sizeof resp);
	close(fd);
	EXPECT_CONTAINS(resp, "HTTP/1.1 401");
	EXPECT_FALSE(file_has("meshd.err", "spawned"));
	/* The keys are never logged. */
	EXPECT_FALSE(file_has("meshd.err", "sk-second"));
	EXPECT_FALSE(file_has("meshd.err", "sk-first-kez"));
	EXPECT_EQ(stop_gw(&g), 0);
}

TEST_TIMEOUT(gateway_api_key_file_refused_when_others_can_read_it, 30)
{
	t_write_file("keys", "sk-1\n");
	chmod("keys", 0644);
	char out[4096];
	int rc = t_sh(out, sizeof out, 1,
		      "'%s' --catalog . --logs . --socket m.sock --http 127.0.0.1:0 --http-api-key-file keys", t_bin("meshd"));
	EXPECT_NE(rc, 0);
	EXPECT_CONTAINS(out, "the API key file 'keys' is readable by others (mode 0644): chmod 600 it");
	t_write_file("keys", "# none\n");
	chmod("keys", 0600);
	rc = t_sh(out, sizeof out, 1,
		  "'%s' --catalog . --logs . --socket m.sock --http 127.0.0.1:0 --http-api-key-file keys", t_bin("meshd"));
	EXPECT_NE(rc, 0);
	EXPECT_CONTAINS(out, "names no key");
}

/* A page on another site that a DNS-rebinding name points at 127.0.0.1
 * sends its own Host; a page's fetch sends its Origin. */
TEST_TIMEOUT(gateway_host_and_origin_rules, 60)
{
	char resp[8192];
	add_oa("m", "\"test-model\"", "", "");
	struct gw g = start_gw("--http-allow-origin https://ui.example:8443");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: attacker.example\r\n", resp, sizeof resp), 403);
	EXPECT_CONTAINS(resp, "\"code\":\"host_not_allowed\"");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: 127.0.0.1:8080\r\n", resp, sizeof resp), 200);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: [::1]:8080\r\n", resp, sizeof resp), 200);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: LOCALHOST\r\n", resp, sizeof resp), 200);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: 127.0.0.1.attacker.example\r\n", resp, sizeof resp), 403);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nOrigin: https://attacker.example\r\n", resp, sizeof resp),
		  403);
	EXPECT_CONTAINS(resp, "\"code\":\"origin_not_allowed\"");
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nOrigin: http://localhost:3000\r\n", resp, sizeof resp),
		  200);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nOrigin: https://ui.example:8443\r\n", resp, sizeof resp),
		  200);
	EXPECT_EQ(get(g.port, "/v1/models", "Host: localhost\r\nOrigin: https://ui.example\r\n", resp, sizeof resp), 403);
	/* A model by id. */
	EXPECT_EQ(get(g.port, "/v1/models/test-model", "Host: localhost\r\n", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "{\"id\":\"test-model\",\"object\":\"model\"");
	EXPECT_EQ(get(g.port, "/v1/models/nope", "Host: localhost\r\n", resp, sizeof resp), 404);
	EXPECT_CONTAINS(resp, "\"code\":\"model_not_found\"");
	EXPECT_EQ(stop_gw(&g), 0);
}

/* How many times needle occurs in s (case-insensitive). */
static int occurs(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strcasestr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* A browser's page on an allowed origin: its preflight (OPTIONS) is
 * answered by meshd without the key and without starting anything, and
 * every answer to it (meshd's own errors, a relayed one, a stream) names
 * its origin once, whatever the program says of CORS itself. */
TEST_TIMEOUT(gateway_cors_preflight_and_answers_for_an_allowed_origin, 90)
{
	char out[16384];
	add_oa("m", "\"test-model\"", ", \"--cors\"", "");
	t_write_file("keys", "sk-cors\n");
	chmod("keys", 0600);
	struct gw g = start_gw("--http-allow-origin https://ui.example:8443 --http-api-key-file keys");
	const char *ok = "-H 'Origin: https://ui.example:8443'";
	/* The preflight: 204, no key, nothing spawned. */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i -X OPTIONS %s -H 'Access-Control-Request-Method: POST' "
		       "-H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       ok, g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 204");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Origin: https://ui.example:8443\r\n");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Methods: ");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Headers: authorization, content-type");
	EXPECT_CONTAINS(out, "x-stainless-os");
	EXPECT_CONTAINS(out, "Access-Control-Max-Age: ");
	EXPECT_CONTAINS(out, "Vary: Origin\r\n");
	EXPECT_FALSE(file_has("meshd.err", "spawned"));
	/* From an origin not allowed: 403. */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i -X OPTIONS -H 'Origin: https://evil.example' -H 'Access-Control-Request-Method: POST' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 403");
	EXPECT_CONTAINS(out, "origin_not_allowed");
	EXPECT_EQ(occurs(out, "Access-Control-Allow-Origin"), 0);
	/* meshd's own errors carry it: 401 without the key, 404 an unknown model. */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i %s -H 'Content-Type: application/json' -d '{\"model\":\"test-model\"}' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       ok, g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 401");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Origin: https://ui.example:8443\r\n");
	EXPECT_CONTAINS(out, "Vary: Origin\r\n");
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i %s -H 'Authorization: Bearer sk-cors' -d '{\"model\":\"nope\"}' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       ok, g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 404");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Origin: https://ui.example:8443\r\n");
	/* A relayed answer and a stream: the origin once (the program's own '*' dropped). */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i %s -H 'Authorization: Bearer sk-cors' "
		       "-d '{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       ok, g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 200");
	EXPECT_CONTAINS(out, "tok4");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Origin: https://ui.example:8443\r\n");
	EXPECT_EQ(occurs(out, "Access-Control-Allow-Origin"), 1);
	EXPECT_CONTAINS(out, "Vary: Origin\r\n");
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i -N %s -H 'Authorization: Bearer sk-cors' "
		       "-d '{\"model\":\"test-model\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
		       "http://127.0.0.1:%d/v1/chat/completions",
		       ok, g.port),
		  0);
	EXPECT_CONTAINS(out, "text/event-stream");
	EXPECT_CONTAINS(out, "data: [DONE]");
	EXPECT_CONTAINS(out, "Access-Control-Allow-Origin: https://ui.example:8443\r\n");
	EXPECT_EQ(occurs(out, "Access-Control-Allow-Origin"), 1);
	/* No Origin (curl, an SDK): no CORS fields of meshd's; the program's pass. */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -i -H 'Authorization: Bearer sk-cors' http://127.0.0.1:%d/v1/models", g.port),
		  0);
	EXPECT_CONTAINS(out, "HTTP/1.1 200");
	EXPECT_EQ(occurs(out, "Access-Control-Allow-Origin"), 0);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* /upstream/<model>/PATH reaches a program's own routes (llama-server's
 * /slots can erase a slot) only at the paths its manifest lists in
 * upstream_paths: none by default, refused before anything starts. */
TEST_TIMEOUT(gateway_upstream_paths_are_off_unless_the_manifest_lists_them, 90)
{
	char resp[8192];
	add_oa("none", "\"m-none\"", ", \"--models\", \"m-none\"", "");
	add_oa("some", "\"m-some\"", ", \"--models\", \"m-some\"", "upstream_paths = [\"/health\", \"/v1/models\"]\n");
	add_oa("all", "\"m-all\"", ", \"--models\", \"m-all\"", "upstream_paths = [\"*\"]\n");
	struct gw g = start_gw("");
	/* Off by default: 403, saying how to turn it on, and nothing started. */
	EXPECT_EQ(get(g.port, "/upstream/m-none/health", "Host: localhost\r\n", resp, sizeof resp), 403);
	EXPECT_CONTAINS(resp, "\"code\":\"upstream_path_not_allowed\"");
	EXPECT_CONTAINS(resp, "upstream_paths");
	EXPECT_CONTAINS(resp, "none.toml");
	EXPECT_EQ(get(g.port, "/upstream/m-some/slots", "Host: localhost\r\n", resp, sizeof resp), 403);
	EXPECT_EQ(get(g.port, "/upstream/m-some/healthz", "Host: localhost\r\n", resp, sizeof resp), 403);
	EXPECT_EQ(get(g.port, "/upstream/m-some/health/../slots", "Host: localhost\r\n", resp, sizeof resp), 403);
	EXPECT_EQ(get(g.port, "/upstream/m-some/health/%2e%2e/slots", "Host: localhost\r\n", resp, sizeof resp), 403);
	EXPECT_FALSE(file_has("meshd.err", "spawned"));
	/* Listed: a prefix of whole segments, the query kept. */
	EXPECT_EQ(get(g.port, "/upstream/m-some/health", "Host: localhost\r\n", resp, sizeof resp), 200);
	EXPECT_EQ(get(g.port, "/upstream/m-some/v1/models", "Host: localhost\r\n", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "\"id\": \"m-some\"");
	EXPECT_EQ(get(g.port, "/upstream/m-some/v1/models?x=1", "Host: localhost\r\n", resp, sizeof resp), 404);
	EXPECT_CONTAINS(resp, "no route /v1/models?x=1"); /* the program's answer: the query went */
	/* "*": every path. */
	EXPECT_EQ(get(g.port, "/upstream/m-all/health", "Host: localhost\r\n", resp, sizeof resp), 200);
	/* An unknown model is still 404. */
	EXPECT_EQ(get(g.port, "/upstream/nope/health", "Host: localhost\r\n", resp, sizeof resp), 404);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* The first line of meshd.err holding both needles, or NULL (malloc'd). */
static char *log_line_with(const char *a, const char *b)
{
	char *s = t_read_file("meshd.err", NULL), *found = NULL;
	for (char *l = s, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		if (strstr(l, a) && strstr(l, b)) {
			found = strdup(l);
			break;
		}
		if (!nl)
			break;
	}
	free(s);
	return found;
}

/* A program that fails to start: the client gets a short reason and a
 * request id, never the program's output nor its port; meshd's log keeps
 * its last lines under that id, and mesh logs shows them.  Every answer
 * carries X-Request-Id: the client's when it is sane, else meshd's own. */
TEST_TIMEOUT(gateway_error_bodies_are_short_and_carry_a_request_id, 60)
{
	char req[2048], resp[8192], out[8192];
	mkdir("catalog", 0755);
	t_write_file("catalog/leaky.toml",
		     "name = \"leaky\"\nbackend = \"http\"\nmodels = [\"leaky-model\"]\n"
		     "command = [\"sh\", \"-c\", \"echo 'db password=hunter2-SECRET' >&2; exit 1\", \"sh\", \"{port}\"]\n");
	struct gw g = start_gw("");
	int n = chat_request(req, sizeof req, "leaky-model", "hi", 0, 0);
	/* The client's own id, in its head. */
	char *hdr = strstr(req, "Content-Type:");
	ASSERT_TRUE(hdr != NULL);
	memmove(hdr + 30, hdr, (size_t)n - (size_t)(hdr - req) + 1);
	memcpy(hdr, "X-Request-Id: client-id-42.x\r\n", 30);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	read_all(fd, resp, sizeof resp);
	close(fd);
	EXPECT_CONTAINS(resp, "HTTP/1.1 502");
	EXPECT_CONTAINS(resp, "X-Request-Id: client-id-42.x\r\n");
	EXPECT_CONTAINS(resp, "exited with status 1");
	EXPECT_CONTAINS(resp, "client-id-42.x"); /* in the message too */
	EXPECT_FALSE(strstr(resp, "hunter2") != NULL);
	EXPECT_FALSE(strstr(resp, "last lines") != NULL);
	char *err = t_read_file("meshd.err", NULL), *sp = err ? strstr(err, "spawned pid=") : NULL;
	char *pp = sp ? strstr(sp, "port=") : NULL;
	ASSERT_TRUE(pp != NULL);
	char port[16];
	snprintf(port, sizeof port, "%d", atoi(pp + 5));
	free(err);
	EXPECT_FALSE(strstr(strstr(resp, "\r\n\r\n"), port) != NULL);
	EXPECT_FALSE(strstr(resp, "127.0.0.1") != NULL);
	/* meshd's log: the id with the program's last lines. */
	char *line = log_line_with("client-id-42.x", "502");
	EXPECT_TRUE(line != NULL);
	free(line);
	EXPECT_TRUE(wait_file_has("meshd.err", "db password=hunter2-SECRET", 3000));
	char *e2 = t_read_file("meshd.err", NULL), *at = e2 ? strstr(e2, "client-id-42.x") : NULL;
	EXPECT_TRUE(at && strstr(at, "hunter2-SECRET")); /* after the id's line: its last lines */
	free(e2);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "logs leaky"), 0);
	EXPECT_CONTAINS(out, "db password=hunter2-SECRET");
	/* An id that is not sane (a space, too long) is replaced by meshd's. */
	EXPECT_EQ(get(g.port, "/health", "Host: localhost\r\nX-Request-Id: two words\r\n", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Request-Id: ");
	EXPECT_FALSE(strstr(resp, "two words") != NULL);
	EXPECT_EQ(get(g.port, "/health",
		      "Host: localhost\r\nX-Request-Id: "
		      "a123456789b123456789c123456789d123456789e123456789f123456789g12345\r\n",
		      resp, sizeof resp),
		  200);
	EXPECT_FALSE(strstr(resp, "g12345") != NULL);
	/* Each answer its own: an error of meshd's, a relayed one. */
	EXPECT_EQ(get(g.port, "/v1/models/nope", "Host: localhost\r\n", resp, sizeof resp), 404);
	EXPECT_CONTAINS(resp, "X-Request-Id: ");
	char *bad = strstr(resp, "X-Request-Id: ");
	char id1[80] = "";
	if (bad)
		sscanf(bad + 14, "%79[A-Za-z0-9._-]", id1);
	EXPECT_EQ(get(g.port, "/v1/models/nope", "Host: localhost\r\n", resp, sizeof resp), 404);
	EXPECT_TRUE(id1[0] && !strstr(resp, id1));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* Issue 30, "/metrics may be served on the gateway port behind the key":
 * GET /metrics on the gateway port (curl) is the text meshd's /metrics
 * renders (the gateway's families too, after a request), 401 without the
 * key when keys are configured; a program's 200 is counted in it.  Without
 * keys configured it needs none (the Host rule applies as to any route). */
TEST_TIMEOUT(gateway_metrics_on_the_gateway_port_behind_the_key, 60)
{
	char out[4096], url[128];
	add_oa("m", "\"test-model\"", "", "");
	t_write_file("keys", "sk-metrics-key\n");
	chmod("keys", 0600);
	struct gw g = start_gw("--http-api-key-file keys");
	snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", g.port);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o nokey.txt -w '%%{http_code}' %s", url), 0);
	EXPECT_STREQ(out, "401");
	char *nokey = t_read_file("nokey.txt", NULL);
	EXPECT_TRUE(nokey && strstr(nokey, "\"code\":\"invalid_api_key\""));
	EXPECT_TRUE(nokey && !strstr(nokey, "mesh_gateway"));
	free(nokey);
	char req[2048];
	chat_request(req, sizeof req, "test-model", "hi", 0, 0);
	snprintf(req, sizeof req,
		 "curl -sS -o /dev/null -w '%%{http_code}' -H 'Authorization: Bearer sk-metrics-key' -H 'Content-Type: "
		 "application/json' -d '{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
		 "http://127.0.0.1:%d/v1/chat/completions",
		 g.port);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s", req), 0);
	EXPECT_STREQ(out, "200");
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -D head.txt -o gw.txt -w '%%{http_code}' -H 'Authorization: Bearer sk-metrics-key' %s", url),
		  0);
	EXPECT_STREQ(out, "200");
	EXPECT_TRUE(file_has("head.txt", "Content-Type: text/plain; version=0.0.4"));
	EXPECT_TRUE(file_has("gw.txt", "mesh_gateway_requests_total{program=\"m\",model=\"test-model\",code=\"2xx\"} 1"));
	/* The same renderer as the control socket's: the same families. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o sock.txt --unix-socket run/meshd.sock http://x/metrics"), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "grep '^# TYPE' gw.txt > gw.types && grep '^# TYPE' sock.txt > sock.types && "
		       "test -s gw.types && cmp gw.types sock.types && echo same"), 0);
	EXPECT_CONTAINS(out, "same");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o /dev/null -w '%%{http_code}' -X POST -H 'Authorization: Bearer "
				       "sk-metrics-key' %s", url), 0);
	EXPECT_STREQ(out, "405");
	EXPECT_EQ(stop_gw(&g), 0);
	/* No keys configured: no key asked. */
	struct gw g2 = start_gw("");
	snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", g2.port);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o open.txt -w '%%{http_code}' %s", url), 0);
	EXPECT_STREQ(out, "200");
	EXPECT_TRUE(file_has("open.txt", "# TYPE mesh_gateway_memory_bytes gauge"));
	EXPECT_EQ(stop_gw(&g2), 0);
}

/* HEAD on the gateway's own routes: the GET's head (its Content-Length
 * included), no body; the next request on the connection is read from
 * the right byte.  (Before, the body followed: a client that sent a
 * second request read the body as its next response's start.) */
TEST_TIMEOUT(gateway_head_on_its_own_routes_sends_no_body, 60)
{
	char resp[16384];
	add_oa("m", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	const char *targets[] = {"/v1/models", "/v1/models/test-model", "/metrics", "/health"};
	for (unsigned i = 0; i < sizeof targets / sizeof *targets; i++) {
		char req[512];
		snprintf(req, sizeof req,
			 "HEAD %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
			 "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
			 targets[i]);
		EXPECT_EQ(exchange(g.port, req, resp, sizeof resp), 200);
		/* The first answer's head, then at once the second answer. */
		const char *end = strstr(resp, "\r\n\r\n");
		ASSERT_TRUE(end != NULL);
		if (strncmp(end + 4, "HTTP/1.1 200", 12))
			FAIL("HEAD %s: after its head came '%.40s', not the next answer", targets[i], end + 4);
		EXPECT_TRUE(strstr(resp, "Content-Length: ") != NULL);
	}
	EXPECT_EQ(stop_gw(&g), 0);
}
