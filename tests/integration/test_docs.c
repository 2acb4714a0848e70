/* The README's blocks as a new user pastes them: each is taken from
 * README.md itself (so the test follows the text) and run whole by bash in
 * the test's directory, with build/ the real build. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[65536];

/* Writes to file the ```sh block of README.md that contains marker; 0 or -1. */
static int readme_block(const char *marker, const char *file)
{
	char readme[4096];
	snprintf(readme, sizeof readme, "%s/README.md", getenv("MESH_SRC"));
	return t_sh(out, sizeof out, 1,
		    "awk -v m='%s' '/^```/ { if (inb) { if (hit) { printf \"%%s\", b; exit } inb = 0; b = \"\"; hit = 0; next }"
		    " if ($0 == \"```sh\") { inb = 1; next } }"
		    " inb { b = b $0 \"\\n\"; if (index($0, m)) hit = 1 }' '%s' > '%s' && test -s '%s'",
		    marker, readme, file, file) == 0
		       ? 0
		       : -1;
}

/* The meshd quick start pasted as one block: `build/meshd ... &` and, on
 * the next line, `build/mesh call` (which once failed "cannot reach meshd":
 * the socket was not there yet), ps, curl on `mesh socket`, kill %1. */
TEST_TIMEOUT(docs_readme_meshd_quick_start_pasted_whole, 60)
{
	if (t_sh(out, sizeof out, 1, "command -v curl") != 0)
		SKIP_TOOL("curl is not installed (mk/deps.sh test installs it)");
	ASSERT_EQ(readme_block("build/meshd --catalog catalog --logs logs &", "block.sh"), 0);
	ASSERT_EQ(symlink(getenv("MESH_BUILD"), "build"), 0);
	/* Its own socket: the default is shared with whatever else runs here. */
	int rc = t_sh(out, sizeof out, 1, "MESH_SOCKET=\"$PWD/m.sock\" bash -e block.sh 2>&1; wait");
	printf("%s", out);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "hello");
	EXPECT_CONTAINS(out, "\"programs\"");
	EXPECT_CONTAINS(out, "mesh_slots ");
	EXPECT_FALSE(strstr(out, "cannot reach meshd") != NULL);
}
