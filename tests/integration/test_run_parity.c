/* `mesh run` against GNU parallel, case by case (tests/parity/parity.sh):
 * the same command lines give the same output and exit status, and every
 * option of GNU parallel's man page is run equal by some case or listed in
 * docs/run.md as a difference with its reason. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>

/* 158 starts of GNU parallel (~0.4 s of CPU each) and of mesh run: about a
 * minute of CPU.  On the 2-CPU VM shared with other builds it took 3.6 min
 * at a load of 11-12 and 6.4 min at 13-17, so the bound is 10 min. */
TEST_TIMEOUT(run_parity_with_gnu_parallel, 600)
{
	static char out[1 << 18];
	int rc = t_sh(out, sizeof out, 1, "%s %s", t_src("tests/parity/parity.sh"), t_bin("mesh"));
	if (rc != 0)
		fputs(out, stderr);
	EXPECT_EQ(rc, 0);
	const char *sum = strstr(out, "parity: ");
	ASSERT_TRUE(sum != NULL);
	int cases = 0, equal = 0, doc = -1, differ = -1, opts = 0, oequal = 0, odoc = -1, oundoc = -1;
	EXPECT_EQ(sscanf(sum,
			 "parity: %d cases, %d equal, %d documented differences, %d undocumented differences; "
			 "options: %d in GNU parallel's man page, %d equal, %d documented differences, %d undocumented",
			 &cases, &equal, &doc, &differ, &opts, &oequal, &odoc, &oundoc),
		  8);
	EXPECT_EQ(differ, 0);
	EXPECT_EQ(oundoc, 0);
	EXPECT_GE(cases, 150);
	EXPECT_GE(opts, 150);
	EXPECT_EQ(opts, oequal + odoc);
}
