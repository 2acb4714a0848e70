/* The module map of docs/DESIGN.md, checked on the source: what a layer
 * may include, and where JSON may be built. */
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

/* Fails for each line of file that contains needle. */
static void refuse(const char *file, const char *needle)
{
	FILE *f = fopen(t_src(file), "r");
	if (!f)
		FAIL("cannot open %s", t_src(file));
	char line[2048];
	for (int no = 1; fgets(line, sizeof line, f); no++)
		if (strstr(line, needle))
			t__fail(__FILE__, __LINE__, "%s:%d has \"%s\": %s", file, no, needle, line);
	fclose(f);
}

/* meshd sits beside the CLI, not above it: the exit-code table is base/exit.h. */
TEST(layers_meshd_does_not_include_the_cli)
{
	static const char *const files[] = {"src/daemon/main.c", "src/daemon/core.c", "src/daemon/core_int.h",
					    "src/daemon/core_programs.c", "src/daemon/core_workers.c",
					    "src/daemon/core_call.c", "src/daemon/ops.h", "src/daemon/api.c",
					    "src/daemon/api_int.h", "src/daemon/api_ops.c", "src/daemon/api_json.c",
					    "src/daemon/api_client.c"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		refuse(files[i], "#include \"cli/");
}

/* The core returns data; JSON is rendered by the API (api.c, api_client.c) only. */
TEST(layers_meshd_core_builds_no_json)
{
	static const char *const files[] = {"src/daemon/main.c", "src/daemon/core.c", "src/daemon/core_int.h",
					    "src/daemon/core_programs.c", "src/daemon/core_workers.c",
					    "src/daemon/core_call.c", "src/daemon/ops.h", "src/daemon/notify.c"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		refuse(files[i], "jansson");
		refuse(files[i], "json_");
	}
}
