/* `mesh ui`'s server (ui/ui.c) with curl against a real meshd: the door
 * (no token, a wrong one, another Host: 403; the URL's token becomes an
 * HttpOnly cookie), the page's files, meshd's reads passed through, a
 * job's results as one download, the event stream relayed, a meshd that is down said so (502), SIGTERM.  The
 * page itself in a browser: test_ui_browser.c. */
#include "integration/serve_t.h" /* file_has */
#include "integration/ui_t.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[65536];

/* curl with args; the status code, or -1; the body in file body.txt,
 * the head in head.txt. */
static int curl(const struct ui_t *u, const char *args, const char *path)
{
	if (t_sh(out, sizeof out, 1, "curl -sS -D head.txt -o body.txt -w '%%{http_code}' %s 'http://127.0.0.1:%d%s'",
		 args, u->port, path) != 0)
		return -1;
	return atoi(out);
}

TEST_TIMEOUT(cli_ui_door_pages_reads_and_events, 60)
{
	char path[256], cookie[160];
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	pid_t m = meshd_t_start(.state = "state");
	struct ui_t u = ui_t_start();
	ASSERT_GT(u.port, 0);
	ASSERT_EQ(strlen(u.token), 32);
	EXPECT_TRUE(file_has("ui.out", "the meshd at " SOCK));
	/* No token, a wrong one: 403, nothing of meshd's. */
	EXPECT_EQ(curl(&u, "", "/"), 403);
	EXPECT_TRUE(file_has("body.txt", "needs the token"));
	EXPECT_EQ(curl(&u, "", "/api/ps"), 403);
	EXPECT_FALSE(file_has("body.txt", "programs"));
	EXPECT_EQ(curl(&u, "", "/?token=00000000000000000000000000000000"), 403);
	EXPECT_EQ(curl(&u, "-H 'Cookie: mesh_ui=0123'", "/api/ps"), 403);
	/* The token: a cookie, and the address bar loses it. */
	snprintf(path, sizeof path, "/?token=%s", u.token);
	EXPECT_EQ(curl(&u, "", path), 303);
	EXPECT_TRUE(file_has("head.txt", "Location: /\r\n"));
	EXPECT_TRUE(file_has("head.txt", "HttpOnly; SameSite=Strict"));
	snprintf(cookie, sizeof cookie, "-H 'Cookie: other=1; mesh_ui=%s'", u.token);
	/* Another Host (DNS rebinding): 403 even with the token. */
	char evil[256];
	snprintf(evil, sizeof evil, "%s -H 'Host: evil.example:%d'", cookie, u.port);
	EXPECT_EQ(curl(&u, evil, "/api/ps"), 403);
	/* The page and meshd's reads. */
	EXPECT_EQ(curl(&u, cookie, "/"), 200);
	EXPECT_TRUE(file_has("head.txt", "Content-Type: text/html"));
	EXPECT_TRUE(file_has("head.txt", "Content-Security-Policy: default-src 'self'"));
	EXPECT_EQ(curl(&u, cookie, "/no-such-file.js"), 404);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "call echo hi"), 0);
	EXPECT_EQ(curl(&u, cookie, "/api/ps"), 200);
	EXPECT_TRUE(file_has("body.txt", "\"name\":\"echo\""));
	EXPECT_EQ(curl(&u, cookie, "/api/metrics"), 200);
	EXPECT_TRUE(file_has("body.txt", "# TYPE"));
	EXPECT_EQ(curl(&u, cookie, "/api/programs/nosuch/logs"), 404);
	/* A job's results as one download: every one of meshd's 4 MiB pages,
	 * the same bytes as `mesh results`. */
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	for (int i = 0; i < 100000; i++)
		fprintf(f, "line %06d of the input, long enough that the results fill two pages\n", i);
	fclose(f);
	unsigned id = meshd_t_submit(out, sizeof out, "echo --input in.txt");
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "wait %u", id), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' results %u --socket " SOCK " > all.txt", t_bin("mesh"), id), 0);
	snprintf(path, sizeof path, "/results/%u", id);
	EXPECT_EQ(curl(&u, cookie, path), 200);
	EXPECT_TRUE(file_has("head.txt", "Content-Disposition: attachment; filename=\"job-1-results\""));
	EXPECT_EQ(t_sh(out, sizeof out, 1, "cmp body.txt all.txt && wc -c < body.txt"), 0);
	EXPECT_GT(atol(out), 5 << 20);
	EXPECT_EQ(curl(&u, cookie, "/results/99"), 404);
	EXPECT_TRUE(file_has("body.txt", "no job 99"));
	EXPECT_EQ(curl(&u, "", path), 403);
	/* Only reads. */
	char post[256];
	snprintf(post, sizeof post, "%s -X POST -d x", cookie);
	EXPECT_EQ(curl(&u, post, "/api/programs/echo/stop"), 405);
	/* The event stream, relayed: hello, then what happens. */
	char cmd[512];
	snprintf(cmd, sizeof cmd,
		 "curl -sSN --max-time 3 %s -H 'Last-Event-ID: 0' 'http://127.0.0.1:%d/api/events' > ev.txt; true", cookie,
		 u.port);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s", cmd), 0);
	EXPECT_TRUE(file_has("ev.txt", "event: hello"));
	EXPECT_TRUE(file_has("ev.txt", "\"program\":\"echo\",\"worker\":0,"));
	/* meshd gone: the page's reads say so. */
	EXPECT_EQ(meshd_t_stop(m), 0);
	EXPECT_EQ(curl(&u, cookie, "/api/ps"), 502);
	EXPECT_TRUE(file_has("body.txt", "cannot reach meshd at " SOCK));
	EXPECT_EQ(curl(&u, cookie, "/api/events"), 502);
	EXPECT_EQ(ui_t_stop(&u), 0);
}

TEST(cli_ui_refuses_an_address_that_is_not_loopback)
{
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' ui --listen 0.0.0.0:0 --socket x.sock", t_bin("mesh")), 64);
	EXPECT_CONTAINS(out, "not a loopback address");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' ui --listen nonsense --socket x.sock", t_bin("mesh")), 64);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' ui --lisen 127.0.0.1:0", t_bin("mesh")), 64);
	EXPECT_CONTAINS(out, "did you mean '--listen'");
}
