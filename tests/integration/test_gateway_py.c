/* meshd --http with a second real client: Python's standard library
 * (urllib.request unstreamed, http.client streamed), cold then warm. */
#include "runner/t.h"
#include "integration/gw_t.h"

TEST_TIMEOUT(gateway_python_stdlib_client, 30)
{
	char out[8192];
	add_oa("p", "\"test-model\"", ", \"--token-delay\", \"0.01\"", "");
	struct gw g = start_gw("");
	int rc = t_sh(out, sizeof out, 1, "python3 %s http://127.0.0.1:%d/v1 test-model hi",
		      t_src("tests/workers/openai_stdlib_client.py"), g.port);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "reply: tok0 tok1 tok2 tok3 tok4\ncold: 1\n");
	EXPECT_CONTAINS(out, "piece: tok0\npiece:  tok1\npiece:  tok2\npiece:  tok3\npiece:  tok4\ndone\n");
	/* Warm now: no cold-start mark, one spawn in all. */
	rc = t_sh(out, sizeof out, 1, "python3 %s http://127.0.0.1:%d/v1 test-model hi",
		  t_src("tests/workers/openai_stdlib_client.py"), g.port);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "cold: 0\n");
	EXPECT_CONTAINS(out, "done\n");
	/* A stream cut by the program's crash is an error, not a short answer. */
	rc = t_sh(out, sizeof out, 1, "python3 %s http://127.0.0.1:%d/v1 test-model crash",
		  t_src("tests/workers/openai_stdlib_client.py"), g.port);
	EXPECT_EQ(rc, 1);
	/* An unknown model: OpenAI's 404. */
	rc = t_sh(out, sizeof out, 1, "python3 %s http://127.0.0.1:%d/v1 nope hi",
		  t_src("tests/workers/openai_stdlib_client.py"), g.port);
	EXPECT_EQ(rc, 1);
	EXPECT_CONTAINS(out, "error: 404");
	EXPECT_CONTAINS(out, "model_not_found");
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	EXPECT_EQ(stop_gw(&g), 0);
}
