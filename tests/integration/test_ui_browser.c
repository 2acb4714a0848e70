/* `mesh ui` in a real browser: Debian's chromium driven by playwright-core
 * (tests/ui/browser.mjs) against a real `mesh ui` in front of a real meshd.
 * Once the page follows the stream, a job is submitted (its bar must move
 * to 100 %), a worker crashes (its report must show with its last lines),
 * and a program goes cold after its idle TTL; every view is screenshotted
 * at 1280x800 and at a phone's width, with no console error.  Last,
 * meshd is stopped and started again under the open page, which must say
 * so and go on by itself.  The
 * screenshots are checked for being there and not blank by the script;
 * docs/ui.md shows them (MESH_UI_SHOTS=DIR keeps a copy). */
#include "base/asan.h"
#include "integration/ui_t.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[65536];

/* Enough chunks that the bar is seen moving (a few seconds warm); fewer
 * under ASan, several times slower. */
#ifdef MESH_UNDER_ASAN
#define CHUNKS "40000"
#else
#define CHUNKS "300000"
#endif

/* The browser wrote file, or it ended (its status then in status). */
struct ready {
	pid_t pid;
	int ended, status;
};
static int browser_wrote(struct ready *r, const char *file)
{
	return access(file, F_OK) == 0 || (r->ended = waitpid(r->pid, &r->status, WNOHANG) == r->pid);
}
/* The page follows the stream. */
static int page_follows(void *arg)
{
	return browser_wrote(arg, "ready");
}
/* The page asks for meshd to stop; it saw meshd down. */
static int restart_asked(void *arg)
{
	return browser_wrote(arg, "restart");
}
static int page_saw_down(void *arg)
{
	return browser_wrote(arg, "restart.down");
}

TEST_TIMEOUT(ui_browser_watches_a_job_a_crash_and_a_program_going_cold, 200)
{
	char pw[1024];
	snprintf(pw, sizeof pw, "%s/node/node_modules/playwright-core/package.json", getenv("MESH_BUILD"));
	if (t_sh(out, sizeof out, 1, "command -v node") != 0)
		SKIP_TOOL("node is not installed (mk/deps.sh test installs nodejs)");
	if (access("/usr/bin/chromium", X_OK) != 0)
		SKIP_TOOL("/usr/bin/chromium is not installed (mk/deps.sh test installs chromium)");
	if (access(pw, F_OK) != 0)
		SKIP_TOOL("playwright-core is not in %s/node (make node-openai installs it with npm)", getenv("MESH_BUILD"));
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), "idle_ttl = \"3s\"\n");
	meshd_t_add_program(out, sizeof out, "crashy", t_bin("tests-workers/host_worker"),
			    "args = [\"crash-on-call\"]\n");
	pid_t m = meshd_t_start(.state = "state");
	struct ui_t u = ui_t_start();
	const char *url = u.url;
	/* The browser, in the background: it says when the page follows.  Its
	 * own temporary files in a short directory: chromium's sockets there
	 * must fit a unix socket's 108 bytes, which the test's directory
	 * (named after the test) does not. */
	char tmp[] = "/tmp/mesh-ui.XXXXXX";
	ASSERT_TRUE(mkdtemp(tmp) != NULL);
	pid_t br = fork();
	if (br == 0) {
		char cmd[2048];
		snprintf(cmd, sizeof cmd,
			 "TMPDIR=%s HOME=%s MESH_UI_READY_FILE=ready MESH_UI_MOVING=1 MESH_UI_COLD=echo "
			 "MESH_UI_RESTART_FILE=restart "
			 "exec node '%s' '%s' shots > browser.out 2>&1",
			 tmp, tmp, t_src("tests/ui/browser.mjs"), url);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	struct ready r = {br, 0, 0};
	if (!t_wait_for(page_follows, &r, 60000)) {
		char *b = t_read_file("browser.out", NULL);
		kill(br, SIGKILL);
		t_sh(out, sizeof out, 1, "rm -rf '%s'", tmp);
		FAIL("the page did not follow the stream within 60 s: %s", b ? b : "");
	}
	/* What the page must show: a job moving to 100 %, a crash, then echo
	 * cold after its idle TTL. */
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "submit echo --chunks " CHUNKS " --wait"), 0);
	EXPECT_NE(meshd_t_mesh(out, sizeof out, 1, "call crashy x"), 0);
	/* At its end the page asks for meshd to stop, says so, and must go on
	 * by itself once meshd is back on the same state. */
	int st = 1 << 8, restarted = 0;
	struct ready rs = r;
	if (t_wait_for(restart_asked, &rs, 120000) && !rs.ended) {
		EXPECT_EQ(meshd_t_stop(m), 0);
		if (t_wait_for(page_saw_down, &rs, 60000) && !rs.ended) {
			m = meshd_t_start(.state = "state");
			restarted = 1;
		}
	}
	if (!rs.ended)
		ASSERT_EQ(waitpid(br, &st, 0), br);
	else
		st = rs.status;
	t_sh(out, sizeof out, 1, "rm -rf '%s'", tmp);
	char *b = t_read_file("browser.out", NULL);
	printf("%s", b ? b : "");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAIL("the browser test failed (status %d): see its lines above", st);
	free(b);
	EXPECT_TRUE(restarted);
	const char *shots[] = {"jobs.png", "job.png", "programs.png", "gateway.png", "jobs-phone.png"};
	for (size_t i = 0; i < sizeof shots / sizeof *shots; i++) {
		char p[64];
		struct stat sb;
		snprintf(p, sizeof p, "shots/%s", shots[i]);
		EXPECT_EQ(stat(p, &sb), 0);
		EXPECT_GT(sb.st_size, 5000);
	}
	const char *keep = getenv("MESH_UI_SHOTS");
	if (keep && *keep)
		t_sh(out, sizeof out, 1, "mkdir -p '%s' && cp shots/*.png '%s'/", keep, keep);
	/* Without the token, the same URL's page is refused. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o /dev/null -w '%%{http_code}' 'http://127.0.0.1:%d/'", u.port), 0);
	EXPECT_STREQ(out, "403");
	EXPECT_EQ(ui_t_stop(&u), 0);
	EXPECT_EQ(meshd_t_stop(m), 0);
}
