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
	static const char *const files[] = {"src/meshd/main.c", "src/meshd/core/core.c", "src/meshd/core/core_int.h",
					    "src/meshd/core/core_programs.c", "src/meshd/core/core_workers.c",
					    "src/meshd/core/core_call.c", "src/meshd/core/ops.h", "src/meshd/api/api.c",
					    "src/meshd/api/api_int.h", "src/meshd/api/api_ops.c", "src/meshd/api/api_json.c",
					    "src/client/api_client.c"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		refuse(files[i], "#include \"cli/");
}

/* The core returns data; JSON is rendered by the API (api.c, api_client.c) only. */
TEST(layers_meshd_core_builds_no_json)
{
	static const char *const files[] = {"src/meshd/main.c", "src/meshd/core/core.c", "src/meshd/core/core_int.h",
					    "src/meshd/core/core_programs.c", "src/meshd/core/core_workers.c",
					    "src/meshd/core/core_call.c", "src/meshd/core/ops.h", "src/meshd/notify.c"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		refuse(files[i], "jansson");
		refuse(files[i], "json_");
	}
}
