/* `mesh run` against GNU parallel, case by case (tests/parity/parity.sh):
 * the same command lines give the same output and exit status. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>

TEST_TIMEOUT(run_parity_with_gnu_parallel, 240)
{
	static char out[65536];
	int rc = t_sh(out, sizeof out, 1, "%s %s", t_src("tests/parity/parity.sh"), t_bin("mesh"));
	if (rc != 0)
		fputs(out, stderr);
	EXPECT_EQ(rc, 0);
	const char *sum = strstr(out, "parity: ");
	ASSERT_TRUE(sum != NULL);
	int equal = 0, differ = -1, xfail = -1;
	EXPECT_EQ(sscanf(sum, "parity: %d equal, %d differ, %d xfail", &equal, &differ, &xfail), 3);
	EXPECT_EQ(differ, 0);
	EXPECT_EQ(xfail, 0);
	EXPECT_GE(equal, 40);
}
