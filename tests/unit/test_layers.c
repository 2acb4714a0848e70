/* The module map of docs/DESIGN.md, checked on the source and the built
 * objects by mk/layers.sh: no include of, and no call into, a module
 * listed below; every src/ directory a row of the table; no JSON in
 * meshd's core or jobs. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>

TEST(layers_follow_the_module_order_of_design_md)
{
	static char out[65536];
	int rc = t_sh(out, sizeof out, 1, "cd '%s' && mk/layers.sh '%s'", t_src(""), getenv("MESH_BUILD"));
	if (rc != 0)
		printf("%s", out);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "no arrow runs up");
}
