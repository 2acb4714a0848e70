/* The one exit-code table (base/exit.h): shared by mesh and meshd, so it
 * lives below both (test_layers checks that meshd does not include the CLI). */
#include "base/err.h"
#include "base/exit.h"
#include "runner/t.h"

#include <errno.h>

TEST(exit_codes_table_answers_never_collide_with_errors)
{
	static const struct {
		int code;
		const char *name;
	} rows[] = {
#define ROW(name, code, msg) {code, #name},
		MESH_EXIT_MAP(ROW)
#undef ROW
	};
	size_t n = sizeof rows / sizeof rows[0];
	for (size_t i = 0; i < n; i++) {
		/* answers are 0..9, errors sysexits (64..78) and mesh's own (79..99) */
		EXPECT_TRUE(rows[i].code <= 9 || (rows[i].code >= 64 && rows[i].code <= 99));
		for (size_t j = i + 1; j < n; j++)
			EXPECT_NE(rows[i].code, rows[j].code);
	}
	EXPECT_EQ(MESH_EXIT_USAGE, 64);
}

TEST(exit_codes_mesh_exit_for_classes)
{
	EXPECT_EQ(mesh_exit_for(0), MESH_EXIT_OK);
	EXPECT_EQ(mesh_exit_for(MESH_E_CORRUPT), MESH_EXIT_DATAERR);
	EXPECT_EQ(mesh_exit_for(-ENOENT), MESH_EXIT_NOINPUT);
	EXPECT_EQ(mesh_exit_for(-ENOSPC), MESH_EXIT_IOERR);
	EXPECT_EQ(mesh_exit_for(MESH_E_TIMEOUT), MESH_EXIT_TEMPFAIL);
	EXPECT_EQ(mesh_exit_for(MESH_E_CRASHED), MESH_EXIT_PROTOCOL);
	EXPECT_EQ(mesh_exit_for(-ECONNREFUSED), MESH_EXIT_UNAVAILABLE);
	EXPECT_EQ(mesh_exit_for(-EPERM), MESH_EXIT_NOPERM);
	EXPECT_EQ(mesh_exit_for(-ENOMEM), MESH_EXIT_OSERR);
	EXPECT_EQ(mesh_exit_for(-EXDEV), MESH_EXIT_SOFTWARE);
}

/* 69 says only "meshd cannot be reached"; each refusal has a code of its own. */
TEST(exit_codes_refusals_are_not_unreachable)
{
	static const int errs[] = {MESH_E_REFUSED, MESH_E_SCRIPT, MESH_E_ARCH, MESH_E_NOGPU,
				   MESH_E_LIMITS,  MESH_E_HANDLER, MESH_E_UNSUPPORTED, MESH_E_STOPPED};
	int seen[256] = {0};
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		int x = mesh_exit_for(errs[i]);
		EXPECT_NE(x, MESH_EXIT_UNAVAILABLE);
		EXPECT_NE(x, MESH_EXIT_SOFTWARE);
		if (i < 6) /* the six classes each apart */
			EXPECT_EQ(seen[x]++, 0);
	}
	EXPECT_EQ(mesh_exit_for(MESH_E_HANDLER), MESH_EXIT_HANDLER);
	EXPECT_EQ(mesh_exit_for(MESH_E_ARCH), MESH_EXIT_ARCH);
	EXPECT_EQ(mesh_exit_for(MESH_E_STOPPED), MESH_EXIT_TEMPFAIL);
}
