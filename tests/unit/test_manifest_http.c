/* backend = "http" manifests: the keys of an HTTP program (docs/gateway.md),
 * parsed strictly. */
#include "base/err.h"
#include "host/manifest.h"
#include "runner/t.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

TEST(manifest_http_parses_every_key)
{
	static const char text[] = "name = \"a\"\n"
				   "backend = \"http\"\n"
				   "command = [\"llama-server\", \"--port\", \"{port}\", \"--host=127.0.0.1:{port}\"]\n"
				   "models = [\"qwen2.5-7b\", \"qwen:small\"]\n"
				   "probe_path = \"/health\"\n"
				   "probe_status = 204\n"
				   "max_concurrency = 4\n"
				   "group = \"big\"\n"
				   "memory = \"20G\"\n"
				   "idle_ttl = \"90s\"\n"
				   "upstream_paths = [\"/props\", \"/slots\"]\n"
				   "[limits]\nmemory = \"8G\"\n"
				   "[lifecycle]\nstart_timeout = \"2m\"\nstop_signal = \"QUIT\"\nstop_grace = \"1s\"\n";
	struct mesh_manifest m;
	char *err = NULL;
	ASSERT_EQ(mesh_manifest_parse("a.toml", text, strlen(text), "a", &m, &err), 0);
	EXPECT_EQ(m.backend, MESH_BACKEND_HTTP);
	EXPECT_EQ(m.ncommand, 4u);
	EXPECT_STREQ(m.command[3], "--host=127.0.0.1:{port}");
	EXPECT_TRUE(m.command[4] == NULL);
	EXPECT_EQ(m.nmodels, 2u);
	EXPECT_STREQ(m.models[1], "qwen:small");
	EXPECT_STREQ(m.probe_path, "/health");
	EXPECT_EQ(m.probe_status, 204u);
	EXPECT_EQ(m.max_concurrency, 4u);
	EXPECT_STREQ(m.group, "big");
	EXPECT_EQ(m.memory, 20ull << 30);
	EXPECT_EQ(m.idle_ttl_ns, 90000000000ull);
	EXPECT_EQ(m.start_timeout_ns, 120000000000ull);
	EXPECT_EQ(m.stop_signal, SIGQUIT);
	EXPECT_EQ(m.limits.memory, 8ull << 30);
	EXPECT_EQ(m.nupstream_paths, 2u);
	EXPECT_STREQ(m.upstream_paths[1], "/slots");
	mesh_manifest_release(&m);

	static const char dflt[] = "name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"m\"]\n";
	ASSERT_EQ(mesh_manifest_parse("a.toml", dflt, strlen(dflt), "a", &m, &err), 0);
	EXPECT_TRUE(m.probe_path == NULL);
	EXPECT_EQ(m.probe_status, 0u);
	EXPECT_EQ(m.max_concurrency, 0u);
	EXPECT_TRUE(m.group == NULL);
	EXPECT_EQ(m.start_timeout_ns, MESH_START_TIMEOUT_NS);
	EXPECT_EQ(m.stop_signal, SIGTERM);
	EXPECT_EQ(m.nupstream_paths, 0u); /* /upstream/ reaches none of its paths */
	EXPECT_EQ(m.naliases, 0u);
	EXPECT_TRUE(m.upstream_model == NULL);
	EXPECT_EQ(m.nstrip_params, 0u);
	EXPECT_EQ(m.ndefaults, 0u);
	mesh_manifest_release(&m);
}

/* aliases, upstream_model, [filters] and [filters.defaults] (a dotted
 * table header). */
TEST(manifest_http_aliases_and_filters)
{
	static const char text[] = "name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"m\"]\n"
				   "aliases = [\"gpt-4o-mini\", \"qwen\"]\n"
				   "upstream_model = \"qwen2.5-7b-instruct-q4\"\n"
				   "[filters]\nstrip_params = [\"temperature\", \"top_p\"]\n"
				   "[ filters . defaults ]\nmax_tokens = 512\nstop = \"END\"\necho = false\ntemperature = 0.7\n";
	struct mesh_manifest m;
	char *err = NULL;
	ASSERT_EQ(mesh_manifest_parse("a.toml", text, strlen(text), "a", &m, &err), 0);
	EXPECT_EQ(m.naliases, 2u);
	EXPECT_STREQ(m.aliases[1], "qwen");
	EXPECT_TRUE(m.aliases[2] == NULL);
	EXPECT_STREQ(m.upstream_model, "qwen2.5-7b-instruct-q4");
	EXPECT_EQ(m.nstrip_params, 2u);
	EXPECT_STREQ(m.strip_params[1], "top_p");
	ASSERT_EQ(m.ndefaults, 4u);
	EXPECT_EQ(m.defaults[3].type, MESH_VALUE_FLOAT);
	EXPECT_TRUE(m.defaults[3].f == 0.7);
	EXPECT_STREQ(m.defaults[0].key, "max_tokens");
	EXPECT_EQ(m.defaults[0].type, MESH_VALUE_INT);
	EXPECT_EQ(m.defaults[0].i, 512);
	EXPECT_EQ(m.defaults[1].type, MESH_VALUE_STRING);
	EXPECT_STREQ(m.defaults[1].str, "END");
	EXPECT_EQ(m.defaults[2].type, MESH_VALUE_BOOL);
	EXPECT_EQ(m.defaults[2].b, 0);
	mesh_manifest_release(&m);
}

TEST(manifest_http_errors_table)
{
#define HTTP "name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"m\"]\n"
	static const struct {
		const char *text, *want;
	} rows[] = {
		{"name = \"a\"\nbackend = \"grpc\"\n", "m.toml:2:11: 'backend' must be \"native\" or \"http\""},
		{"name = \"a\"\nbackend = \"http\"\nmodels = [\"m\"]\n", "m.toml:1:1: 'command' is missing"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"8080\"]\nmodels = [\"m\"]\n",
		 "m.toml:1:1: 'command' must contain {port}"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\n", "m.toml:1:1: 'models' is missing"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = []\n", "m.toml:3:11: 'command' must have 1 to"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"\"]\n", "m.toml:3:11: 'command' has an empty entry"},
		{HTTP "models = [\"x\"]\n", "m.toml:5:1: key 'models' defined twice"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"m\", \"m\"]\n",
		 "m.toml:4:10: model \"m\" is listed twice"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"a b\"]\n",
		 "m.toml:4:10: model \"a b\" has a space"},
		{"name = \"a\"\nbackend = \"http\"\ncommand = [\"s\", \"{port}\"]\nmodels = [\"a/b\"]\n",
		 "m.toml:4:10: model \"a/b\" has a space"},
		{HTTP "probe_path = \"health\"\n", "m.toml:5:14: 'probe_path' must start with '/'"},
		{HTTP "probe_status = 99\n", "m.toml:5:16: 'probe_status' must be between 100 and 599"},
		{HTTP "probe_status = \"200\"\n", "m.toml:5:16: 'probe_status' must be an integer"},
		{HTTP "max_concurrency = 0\n", "m.toml:5:19: 'max_concurrency' must be between 1"},
		{HTTP "group = \"a b\"\n", "m.toml:5:9: 'group' must be 1 to 64"},
		{HTTP "memory = \"12Q\"\n", "m.toml:5:10: 'memory' must be bytes or a size"},
		{HTTP "upstream_paths = [\"props\"]\n", "m.toml:5:18: 'upstream_paths' entries must be \"*\" or a path"},
		{HTTP "upstream_paths = [\"/a b\"]\n", "m.toml:5:18: 'upstream_paths' entries must be \"*\" or a path"},
		{HTTP "upstream_paths = [\"/a/../b\"]\n", "m.toml:5:18: 'upstream_paths' entries must be \"*\" or a path"},
		{HTTP "upstream_paths = []\n", "m.toml:5:18: 'upstream_paths' must have 1 to"},
		{HTTP "upstream_paths = \"/props\"\n", "m.toml:5:18: 'upstream_paths' must be an array"},
		{"name = \"a\"\nbackends = [\"native\"]\nupstream_paths = [\"*\"]\n", "m.toml:3:1: this key is for HTTP programs"},
		{"name = \"a\"\nbackends = [\"native\"]\nmemory = \"1G\"\n", "m.toml:3:1: this key is for HTTP programs"},
		{HTTP "[lifecycle]\nstart_timeout = \"0s\"\n", "m.toml:6:17: 'lifecycle.start_timeout' is out of range"},
		{HTTP "args = [\"x\"]\n", "m.toml:5:1: this key is for native programs"},
		{HTTP "backends = [\"native\"]\n", "m.toml:5:1: this key is for native programs"},
		{HTTP "[lifecycle]\nready_timeout = \"1s\"\n", "m.toml:6:1: this key is for native programs"},
		{"name = \"a\"\nbackends = [\"native\"]\nmodels = [\"m\"]\n", "m.toml:3:1: this key is for HTTP programs"},
		{"name = \"a\"\nbackends = [\"native\"]\n[lifecycle]\nstart_timeout = \"1s\"\n",
		 "m.toml:4:1: this key is for HTTP programs"},
		{HTTP "aliases = [\"m\"]\n", "m.toml:5:11: alias \"m\" is also in 'models'"},
		{HTTP "aliases = [\"x\", \"x\"]\n", "m.toml:5:11: model \"x\" is listed twice"},
		{HTTP "aliases = [\"a b\"]\n", "m.toml:5:11: model \"a b\" has a space"},
		{HTTP "aliases = []\n", "m.toml:5:11: 'aliases' must have 1 to"},
		{HTTP "upstream_model = \"\"\n", "m.toml:5:18: 'upstream_model' must be 1 to 256 bytes"},
		{HTTP "upstream_model = 3\n", "m.toml:5:18: 'upstream_model' must be a string"},
		{"name = \"a\"\nbackends = [\"native\"]\naliases = [\"x\"]\n", "m.toml:3:1: this key is for HTTP programs"},
		{"name = \"a\"\nbackends = [\"native\"]\nupstream_model = \"x\"\n", "m.toml:3:1: this key is for HTTP programs"},
		{"name = \"a\"\nbackends = [\"native\"]\n[filters.defaults]\nx = 1\n", "m.toml:4:1: this key is for HTTP programs"},
		{HTTP "[filters]\nstrip_params = [\"model\"]\n", "m.toml:6:16: 'filters.strip_params' cannot strip \"model\""},
		{HTTP "[filters]\nstrip_params = []\n", "m.toml:6:16: 'strip_params' must have 1 to"},
		{HTTP "[filters]\nstrip_params = [\"\"]\n", "m.toml:6:16: 'strip_params' has an empty entry"},
		{HTTP "[filters]\nset = 1\n", "m.toml:6:1: unknown key 'set' in [filters]"},
		{HTTP "[filters.defaults]\nmodel = \"x\"\n", "m.toml:6:1: 'filters.defaults' cannot set \"model\""},
		{HTTP "[filters.defaults]\nstop = [\"a\"]\n", "m.toml:6:8: 'filters.defaults.stop' must be a string, an integer, a float or a boolean"},
		{HTTP "[filters.other]\n", "m.toml:5:1: unknown table [filters.other]"},
		{HTTP "[filters.]\n", "m.toml:5:10: expected a table name"},
	};
#undef HTTP
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_manifest m;
		char *err = NULL;
		int rc = mesh_manifest_parse("m.toml", rows[i].text, strlen(rows[i].text), "a", &m, &err);
		EXPECT_EQ(rc, MESH_E_PARSE);
		if (!err || strncmp(err, rows[i].want, strlen(rows[i].want)) != 0)
			t__fail(__FILE__, __LINE__, "row %zu: got \"%s\", want a message starting \"%s\"", i,
				err ? err : "(null)", rows[i].want);
		free(err);
		mesh_manifest_release(&m);
	}
}
