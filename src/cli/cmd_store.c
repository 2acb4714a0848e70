/* mesh store: the PostgreSQL job store's schema (job/home.h, mesh_home_pg_schema). */
#include "base/err.h"
#include "base/exit.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "job/home.h"
#include "job/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: mesh store init|migrate|status [URL]\n"
	"\n"
	"The PostgreSQL job store, for many machines on one job (docs/cluster.md).\n"
	"URL is postgresql://[user@]host[:port]/db[?...] (default: $MESH_STORE);\n"
	"libpq's environment is honoured (PGHOST, PGUSER, PGPASSFILE, PGPASSWORD...).\n"
	"Give the password in ~/.pgpass (or PGPASSFILE, PGPASSWORD), never in the URL:\n"
	"a URL holding one is refused (exit 64); mesh never prints one.\n"
	"\n"
	"  init     create the schema 'mesh' (nothing when it is there, at this version)\n"
	"  migrate  bring an older schema to this version (in one transaction)\n"
	"  status   print the schema version found and the one this mesh uses\n"
	"\n"
	"Exit codes: 0 (status: the schema is this mesh's version); 64 usage; 65 a\n"
	"schema missing (status), of another version or not mesh's; 69 the database\n"
	"cannot be reached or refused the login.\n";

int mesh_cmd_store(int argc, char **argv)
{
	enum mesh_home_pg_schema_op op;
	const char *url;
	char safe[512], why[512];
	int found = 0, now = 0, ours = mesh_home_pg_schema_version(), rc;
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc < 2 || argc > 3)
		return mesh_cli_usage("store: init, migrate or status, and a URL (see `mesh store --help`)");
	if (!strcmp(argv[1], "init"))
		op = MESH_HOME_PG_INIT;
	else if (!strcmp(argv[1], "migrate"))
		op = MESH_HOME_PG_MIGRATE;
	else if (!strcmp(argv[1], "status"))
		op = MESH_HOME_PG_STATUS;
	else
		return mesh_cli_usage("store: unknown command '%s' (init, migrate, status)", argv[1]);
	url = argc == 3 ? argv[2] : getenv("MESH_STORE");
	if (!url || !*url)
		return mesh_cli_usage("store %s: no URL (give one, or set MESH_STORE)", argv[1]);
	if (!mesh_job_is_store_url(url))
		return mesh_cli_usage("store %s: not a store URL (postgresql://...)", argv[1]);
	snprintf(safe, sizeof safe, "store %s", argv[1]);
	if ((rc = mesh_cli_store_url_refused(safe, url)))
		return rc;
	mesh_job_url_safe(url, safe, sizeof safe);
	rc = mesh_home_pg_schema(url, op, &found, &now, why, sizeof why);
	if (rc) {
		fprintf(stderr, "mesh: store %s %s: %s%s%s\n", argv[1], safe, mesh_strerror(rc), why[0] ? ": " : "", why);
		return mesh_exit_for(rc);
	}
	if (op != MESH_HOME_PG_STATUS) {
		printf("schema mesh: version %d -> %d\n", found, now);
		return 0;
	}
	printf("schema mesh: version %d (this mesh: %d)%s\n", found, ours,
	       found == 0 ? ", none: run `mesh store init`"
	       : found < ours ? ", older: run `mesh store migrate`"
	       : found > ours ? ", newer than this mesh: use a mesh of that version" : "");
	/* a schema this mesh cannot use is a failed check, for scripts */
	return found == ours ? 0 : mesh_exit_for(MESH_E_VERSION);
}
