/* mesh ui: a web page for meshd, on a loopback port (ui/ui.h).  A thin
 * layer: parse the options, open, print the URL, serve until a signal. */
#include "ui/ui.h"

#include "base/err.h"
#include "base/exit.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "client/api_client.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UI_LISTEN_DEFAULT "127.0.0.1:8737"

static const char usage_text[] =
	"usage: mesh ui [--listen 127.0.0.1:PORT] [--socket PATH]\n"
	"\n"
	"A web page for the meshd at the control socket: jobs filling in (a bar each, rate, ETA,\n"
	"failures with their last lines), programs warming and going cold with what they hold and\n"
	"what scale-to-zero saved, crash reports, the model gateway's requests, a program's log.\n"
	"It follows meshd's event stream (GET /v1/events), so it is live and costs meshd nothing\n"
	"while nothing happens. The page's files are in the binary: it works offline.\n"
	"\n"
	"It prints a URL with a token: open it in a browser on this machine. Every request needs\n"
	"the token (a cookie after the first); without it the answer is 403. It serves loopback\n"
	"addresses only (ssh -L PORT:127.0.0.1:PORT to look from elsewhere); meshd gains no port.\n"
	"\n"
	"  --listen ADDR:PORT   where the page is served (default " UI_LISTEN_DEFAULT "; port 0 picks one)\n"
	"  --socket PATH        meshd's control socket (default: what `mesh socket` prints)\n"
	"\n"
	"SIGINT/SIGTERM stop it. The token changes at each start.\n"
	"exit: 0 after a stop signal; 64 usage; 71 cannot listen (address in use: try --listen\n"
	"127.0.0.1:0). See docs/ui.md.\n";

enum { O_LISTEN = 256, O_SOCKET, O_HELP };

static const struct option longopts[] = {
	{"listen", required_argument, NULL, O_LISTEN},
	{"socket", required_argument, NULL, O_SOCKET},
	{"help", no_argument, NULL, O_HELP},
	{NULL, 0, NULL, 0},
};

static struct mesh_ui *the_ui;

static void on_stop(int sig)
{
	(void)sig;
	if (the_ui)
		mesh_ui_stop(the_ui);
}

int mesh_cmd_ui(int argc, char **argv)
{
	struct mesh_ui_config c = {.listen = UI_LISTEN_DEFAULT};
	char sock[512];
	int opt;
	if (mesh_cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return MESH_EXIT_OK;
	}
	if (meshd_socket_default(sock, sizeof sock) < 0)
		return mesh_cli_usage("ui: the default socket path is too long: give --socket PATH");
	c.sock = sock;
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+:", longopts, NULL)) != -1) {
		switch (opt) {
		case O_LISTEN:
			c.listen = optarg;
			break;
		case O_SOCKET:
			c.sock = optarg;
			break;
		case ':':
			return mesh_cli_usage("ui: %s wants a value", argv[optind - 1]);
		default: {
			char near[128];
			return mesh_cli_usage("ui: unknown option '%s'%s", argv[optind - 1],
					      mesh_cli_did_you_mean("ui", argv[optind - 1], near, sizeof near));
		}
		}
	}
	if (optind < argc)
		return mesh_cli_usage("ui: unexpected '%s' (`mesh ui --help`)", argv[optind]);
	char *err = NULL;
	int rc = mesh_ui_open(&the_ui, &c, &err);
	if (rc < 0) {
		int ex = rc == MESH_E_PARSE || rc == MESH_E_REFUSED ? mesh_cli_usage("ui: %s", err ? err : "?")
								    : mesh_cli_fail(rc, "ui: %s", err ? err : "cannot serve");
		free(err);
		return ex;
	}
	/* A browser that goes away mid-answer: a failed write, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	struct meshd_reply r = MESHD_REPLY_INIT;
	int up = meshd_client_request(c.sock, "GET", "/v1/ps", NULL, 0, 2000000000ull, &r) == 0;
	meshd_reply_release(&r);
	printf("mesh ui: the meshd at %s%s\n  open %s\n(Ctrl-C stops it)\n", c.sock,
	       up ? "" : " (not running yet: the page says so until it is)", mesh_ui_url(the_ui));
	fflush(stdout);
	rc = mesh_ui_run(the_ui);
	mesh_ui_free(the_ui);
	if (rc < 0)
		return mesh_cli_fail(rc, "ui: cannot serve");
	return MESH_EXIT_OK;
}
