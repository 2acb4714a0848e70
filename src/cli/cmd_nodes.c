/* mesh nodes: every node of a PostgreSQL store (job/home.h,
 * mesh_home_pg_nodes), on every host: what it runs, its measured speed,
 * its last heartbeat.  A meshd's driver runs the program of its job's
 * spec, not a command line of its own: that program is shown; the
 * meshd's own node (of no job) shows its catalog's programs. */
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "job/home.h"
#include "job/job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: mesh nodes [--store URL] [--job]\n"
	"\n"
	"The nodes (mesh run, mesh job harvest, meshd...) of a PostgreSQL job store, on\n"
	"every host: name, host, program, job, chunks completed, speed (chunks/s from its\n"
	"registration to its last heartbeat), last heartbeat, state.  A meshd is a node\n"
	"from its start, of no job (-): its catalog's programs, and what its job drivers\n"
	"(rows of the same name) completed; speed - until they completed any.  State:\n"
	"  alive    beating (every third of its lease TTL)\n"
	"  silent   no heartbeat for longer than its TTL: its leases are taken by others\n"
	"  stopped  closed cleanly\n"
	"URL: postgresql://... (default $MESH_STORE); with --job, only the nodes of the\n"
	"job named after '#' in the URL.  docs/cluster.md.\n"
	"\n"
	"Exit codes: 0; 64 usage; 65 a schema of another version; 69 the database\n"
	"cannot be reached.\n";

static void row(void *arg, const struct mesh_home_node *nd)
{
	(void)arg;
	if (!nd) {
		printf("%-20s %-16s %-14s %-12s %8s %10s %10s %s\n", "NODE", "HOST", "PROGRAM", "JOB", "CHUNKS",
		       "CHUNKS/S", "LAST BEAT", "STATE");
		return;
	}
	/* A meshd's own node (no job): its catalog's programs; no speed until
	 * its drivers completed chunks. */
	char speed[24] = "-";
	if (nd->job[0] || nd->chunks)
		snprintf(speed, sizeof speed, "%.1f", nd->chunks_per_s);
	printf("%-20s %-16s %-14s %-12s %8llu %10s %9.1fs %s\n", nd->name, nd->host, nd->program[0] ? nd->program : "-",
	       nd->job[0] ? nd->job : "-", (unsigned long long)nd->chunks, speed, (double)nd->age_ns / 1e9,
	       nd->stopped ? "stopped" : nd->silent ? "silent" : "alive");
}

int mesh_cmd_nodes(int argc, char **argv)
{
	const char *url = getenv("MESH_STORE");
	int this_job = 0, rc;
	char why[512], safe[512];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--store") && i + 1 < argc) {
			url = argv[++i];
		} else if (!strncmp(argv[i], "--store=", 8)) {
			url = argv[i] + 8;
		} else if (!strcmp(argv[i], "--job")) {
			this_job = 1;
		} else {
			return mesh_cli_usage("nodes: unknown argument '%s' (see `mesh nodes --help`)", argv[i]);
		}
	}
	if (!url || !*url)
		return mesh_cli_usage("nodes: no store (give --store URL, or set MESH_STORE)");
	if (!mesh_job_is_store_url(url))
		return mesh_cli_usage("nodes: not a store URL (postgresql://...)");
	if ((rc = mesh_cli_store_url_refused("nodes", url)))
		return rc;
	mesh_job_url_safe(url, safe, sizeof safe);
	why[0] = 0;
	rc = mesh_home_pg_nodes(url, this_job, row, NULL, why, sizeof why);
	if (rc) {
		fprintf(stderr, "mesh: nodes %s: %s%s%s\n", safe, mesh_strerror(rc), why[0] ? ": " : "", why);
		return mesh_exit_for(rc);
	}
	return 0;
}
