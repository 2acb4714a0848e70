/* The one exit-code table (base/exit.h): shared by mesh and meshd, so it
 * lives below both; meshd must not reach into the CLI for it. */
#include "base/err.h"
#include "base/exit.h"
#include "runner/t.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
		/* answers are 0..9, errors sysexits (64..78) */
		EXPECT_TRUE(rows[i].code <= 9 || (rows[i].code >= 64 && rows[i].code <= 78));
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

/* DESIGN.md: the daemon sits beside the CLI, not above it. */
TEST(exit_codes_meshd_does_not_include_the_cli)
{
	static const char *const files[] = {"src/daemon/main.c", "src/daemon/core.c", "src/daemon/api.c",
					    "src/daemon/api_client.c"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		FILE *f = fopen(t_src(files[i]), "r");
		ASSERT_TRUE(f != NULL);
		char line[1024];
		while (fgets(line, sizeof line, f))
			if (strncmp(line, "#include \"cli/", 14) == 0)
				t__fail(__FILE__, __LINE__, "%s: %s", files[i], line);
		fclose(f);
	}
}
