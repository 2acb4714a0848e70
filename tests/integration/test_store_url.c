/* A password in a store URL is refused wherever a URL is taken (one
 * function, mesh_job_where_has_password): it would show in every process
 * list (meshd's for its lifetime) and shell history.  Exit 64, the message
 * saying where libpq takes a password from, the password never echoed.  No
 * database is needed: the refusal comes before any connection (the URLs
 * name a port nothing listens on, so a URL that got through fails 69). */
#include "base/exit.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

#define MESH t_bin("mesh")

/* The URLs: a user:password@ and a password parameter. */
static const char *const urls[] = {
	"postgresql://mesh:s3cretpw@127.0.0.1:1/x",
	"postgresql://mesh@127.0.0.1:1/x?connect_timeout=2&password=s3cretpw",
	"postgres://mesh:s3cretpw@127.0.0.1:1/x#job",
};

static void refused(const char *cmd, const char *url)
{
	char out[4096];
	int rc = t_sh(out, sizeof out, 1, cmd, url);
	EXPECT_EQ(rc, MESH_EXIT_USAGE);
	EXPECT_CONTAINS(out, "a password in the store URL is refused");
	EXPECT_CONTAINS(out, "~/.pgpass");
	EXPECT_CONTAINS(out, "PGPASSWORD");
	EXPECT_TRUE(strstr(out, "s3cretpw") == NULL);
	if (rc != MESH_EXIT_USAGE || !strstr(out, "~/.pgpass"))
		fprintf(stderr, "  command: %s\n  url: %s\n  said: %s\n", cmd, url, out);
}

TEST_TIMEOUT(store_url_password_refused_everywhere, 120)
{
	char c[64][600];
	int n = 0;
	const char *m = MESH, *d = t_bin("meshd");
	snprintf(c[n++], 600, "'%s' store init '%%s'", m);
	snprintf(c[n++], 600, "'%s' store migrate '%%s'", m);
	snprintf(c[n++], 600, "'%s' store status '%%s'", m);
	snprintf(c[n++], 600, "MESH_STORE='%%s' '%s' store status", m);
	snprintf(c[n++], 600, "'%s' run --store '%%s' --chunks 3 -- true", m);
	snprintf(c[n++], 600, "MESH_STORE='%%s' '%s' run --chunks 3 -- true", m);
	snprintf(c[n++], 600, "'%s' job submit '%%s' 5", m);
	snprintf(c[n++], 600, "'%s' job harvest '%%s' x h 5 30 n1", m);
	snprintf(c[n++], 600, "'%s' job status '%%s' x h 5", m);
	snprintf(c[n++], 600, "'%s' submit echo --chunks 3 --store '%%s'", m);
	snprintf(c[n++], 600, "MESH_STORE='%%s' '%s' submit echo --chunks 3", m);
	snprintf(c[n++], 600, "'%s' jobs --store '%%s'", m);
	snprintf(c[n++], 600, "'%s' nodes --store '%%s'", m);
	snprintf(c[n++], 600, "timeout 20 '%s' --catalog . --logs . --socket s.sock --state st --store '%%s'", d);
	snprintf(c[n++], 600, "MESH_STORE='%%s' timeout 20 '%s' --catalog . --logs . --socket s.sock --state st", d);
	for (int i = 0; i < n; i++)
		for (size_t u = 0; u < sizeof urls / sizeof urls[0]; u++)
			refused(c[i], urls[u]);
}

/* A URL without a password is not refused (it goes on to connect: 69
 * here), nor is one where the word is a parameter's value. */
TEST(store_url_without_password_goes_on)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' store status 'postgresql://mesh@127.0.0.1:1/x'", MESH),
		  MESH_EXIT_UNAVAILABLE);
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "'%s' store status 'postgresql://mesh@127.0.0.1:1/x?application_name=password'", MESH),
		  MESH_EXIT_UNAVAILABLE);
	EXPECT_TRUE(strstr(out, "password in the store URL") == NULL);
}
