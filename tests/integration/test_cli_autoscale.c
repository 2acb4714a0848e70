/* `mesh autoscale`: decision lines, action exit codes, strict arguments. */
#include "runner/t.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[8192];

TEST(cli_decide_table_exit_codes)
{
	static const struct {
		const char *args;
		int code;
		const char *line;
	} rows[] = {
		{"0 1 0 60", 1, "decide warm=0 demand=1 idle=0s ttl=60s -> SPAWN\n"},
		{"1 1 0 60", 2, "decide warm=1 demand=1 idle=0s ttl=60s -> SERVE\n"},
		{"1 0 90 60", 3, "decide warm=1 demand=0 idle=90s ttl=60s -> REAP\n"},
		{"1 0 30 60", 0, "decide warm=1 demand=0 idle=30s ttl=60s -> HOLD\n"},
		{"0 0 999 60", 0, "decide warm=0 demand=0 idle=999s ttl=60s -> HOLD\n"},
		{"0 1 999 60", 1, "decide warm=0 demand=1 idle=999s ttl=60s -> SPAWN\n"},
		{"1 1 999 60", 2, "decide warm=1 demand=1 idle=999s ttl=60s -> SERVE\n"},
		{"1 0 60 60", 3, "decide warm=1 demand=0 idle=60s ttl=60s -> REAP\n"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int rc = t_sh(out, sizeof out, 0, "%s autoscale decide %s", t_bin("mesh"), rows[i].args);
		EXPECT_EQ(rc, rows[i].code);
		EXPECT_STREQ(out, rows[i].line);
	}
	int rc = t_sh(out, sizeof out, 0, "%s autoscale decide 1 0 90 60 --json", t_bin("mesh"));
	EXPECT_EQ(rc, 3);
	EXPECT_CONTAINS(out, "\"action\":\"REAP\"");
	EXPECT_CONTAINS(out, "\"code\":3");
}

TEST(cli_bad_arguments_exit_64)
{
	static const char *bad[] = {
		"",
		"bogus",
		"decide",
		"decide 1 0 90",
		"decide 1 0 90 60 7",
		"decide 12x 0 1 1",
		"decide 2 0 1 1",
		"decide 1 -1 1 1",
		"decide 1 0 -1 60",
		"decide 1 0 +5 60",
		"decide 1 0 ' 5' 60",
		"decide 1 0 99999999999999999999 60",
		"decide 1 0 9223372036854775808 60",
		"decide 1 0 1.5 60",
		"decide 1 0 1 60 --url http://127.0.0.1:1/",
		"decide 1 0 1 60 --nope",
		"tick",
		"tick 1 0",
		"tick 1 0 60 127 0 0",
		"tick 2 0 60",
		"tick 1 0 60 256 0 0 1",
		"tick 1 0 60 127 0 0 1 --url http://127.0.0.1:1/",
		"tick 1 0 60 --url https://127.0.0.1/",
		"tick 1 0 60 --url 'http://h h/'",
		"tick 1 0 60 --url",
		"tick 1 0 60 --model ''",
		"tick 1 0 60 --timeout 0",
		"tick 1 0 60 --connect-timeout 5000",
		"tick 1 0 60 --timeout x",
		"savings 30",
		"savings 30 -100",
		"table extra",
		"plan 5",
		"plan --max 0",
		"plan --min 3 --max 2",
		"plan --concurrency 0",
		"plan --demand x",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "%s autoscale %s", t_bin("mesh"), bad[i]);
		if (rc != 64)
			printf("  'autoscale %s' -> %d: %s\n", bad[i], rc, out);
		EXPECT_EQ(rc, 64);
		EXPECT_CONTAINS(out, "mesh: ");
	}
}

TEST(cli_help_table_savings_plan)
{
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale --help", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "usage: mesh autoscale decide");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s help autoscale", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "mesh autoscale tick");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale table", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "from-zero");
	EXPECT_CONTAINS(out, "to-zero");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale savings 30 100", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "-> 700 permil");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale savings 30 0", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "-> 0 permil");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale plan --demand 5 --concurrency 2 --max 4", t_bin("mesh")), 1);
	EXPECT_CONTAINS(out, "-> SPAWN 3 (row from-zero");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale plan --warm 1 --idle 100 --ttl 60 --linger 120", t_bin("mesh")),
		  0);
	EXPECT_CONTAINS(out, "-> HOLD 0 (row none");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale plan --warm 1 --idle 120 --ttl 60 --linger 120", t_bin("mesh")),
		  3);
	EXPECT_CONTAINS(out, "-> REAP 1 (row to-zero");
}

/* A loopback HTTP server in a child: answers `body` with 200 to every
 * request; with `later`, the first answer is `{"data":[]}`. */
static pid_t server(uint16_t *port, const char *body, int later)
{
	struct sockaddr_in a = {0};
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (void *)&a, sizeof a) || listen(l, 16) || getsockname(l, (void *)&a, &sl))
		FAIL("cannot listen on loopback");
	*port = ntohs(a.sin_port);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGPIPE, SIG_IGN);
		for (int nth = 0;; nth++) {
			char buf[4096];
			int c = accept(l, NULL, NULL);
			if (c < 0)
				continue;
			if (read(c, buf, sizeof buf) > 0) {
				const char *b = later && nth == 0 ? "{\"data\":[]}" : body;
				int n = snprintf(buf, sizeof buf, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
						 strlen(b), b);
				if (write(c, buf, (size_t)n) < 0)
					_exit(1);
			}
			close(c);
		}
	}
	close(l);
	return pid;
}

static uint16_t closed_port(void)
{
	struct sockaddr_in a = {0};
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (void *)&a, sizeof a) || getsockname(l, (void *)&a, &sl))
		FAIL("cannot bind on loopback");
	close(l);
	return ntohs(a.sin_port);
}

TEST(cli_tick_probes_then_decides)
{
	uint16_t port;
	pid_t pid = server(&port, "{\"data\":[{\"id\":\"llama\"}]}", 1);
	const char *mesh = t_bin("mesh");

	/* First answer lists no model: a server is up, but not with it: warm
	 * but wrong model (6), not SPAWN (it would start a second one). */
	int rc = t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://127.0.0.1:%u/v1/models --model llama",
		      mesh, port);
	EXPECT_EQ(rc, 7);
	EXPECT_CONTAINS(out, "tick warm=0 demand=1 idle=0s ttl=60s -> WRONG_MODEL: warm but wrong model (probe cold: HTTP "
			     "200 but model 'llama' not listed");
	/* Now it is listed: warm, demand -> SERVE. */
	rc = t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://127.0.0.1:%u/v1/models --model llama", mesh,
		  port);
	EXPECT_EQ(rc, 2);
	EXPECT_CONTAINS(out, "-> SERVE (probe warm: HTTP 200, model 'llama' listed");
	/* Warm, idle past ttl, no demand -> REAP. */
	rc = t_sh(out, sizeof out, 0, "%s autoscale tick 0 90 60 --url 127.0.0.1:%u", mesh, port);
	EXPECT_EQ(rc, 3);
	EXPECT_CONTAINS(out, "tick warm=1 demand=0 idle=90s ttl=60s -> REAP");
	rc = t_sh(out, sizeof out, 0, "%s autoscale tick 0 30 60 --url 127.0.0.1:%u --json", mesh, port);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "\"action\":\"HOLD\"");
	EXPECT_CONTAINS(out, "\"warm\":1");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	/* Refused: cold at once. */
	uint64_t t0 = t_now_ms();
	rc = t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://127.0.0.1:%u/", mesh, closed_port());
	EXPECT_EQ(rc, 1);
	EXPECT_CONTAINS(out, "-> SPAWN (probe cold: connect refused by 127.0.0.1:");
	EXPECT_LT(t_now_ms() - t0, 2500); /* not its 1 s connect + 2 s response timeouts */

	/* The seed's a b c d form probes a.b.c.d at the default port 7861;
	 * whatever is there, no demand and a fresh idle clock means HOLD. */
	rc = t_sh(out, sizeof out, 0, "%s autoscale tick 0 0 60 127 0 0 1 --connect-timeout 0.3 --timeout 0.3", mesh);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "-> HOLD (probe ");
	EXPECT_CONTAINS(out, "127.0.0.1:7861");
}
