/* meshd --http's request handling that llama-swap and Ollama users expect
 * (docs/gateway.md): a request's keep_alive, a program's aliases and
 * upstream_model, its [filters].  The fake upstream (openai_server.py
 * --echo) answers with the body it received, so each test sees what went
 * upstream: valid JSON of the Content-Length it was sent with. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <jansson.h>

/* POST /v1/chat/completions with body on a new connection (chunked when
 * chunked); the whole response in resp; its status. */
static int post_body(int port, const char *body, int chunked, char *resp, size_t cap)
{
	char req[8192];
	if (chunked)
		snprintf(req, sizeof req,
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
			 "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
			 strlen(body), body);
	else
		snprintf(req, sizeof req,
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 strlen(body), body);
	return exchange(port, req, resp, cap);
}

/* The body the program received (its --echo "received", parsed: NULL if it
 * is not JSON), checked to be as long as the Content-Length it came with. */
static json_t *received(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");
	json_t *r = b ? json_loads(b + 4, 0, NULL) : NULL;
	const char *raw = json_string_value(json_object_get(r, "received"));
	json_t *j = raw ? json_loads(raw, 0, NULL) : NULL;
	if (raw)
		EXPECT_EQ((long long)strlen(raw), (long long)json_integer_value(json_object_get(r, "received_length")));
	json_decref(r);
	return j;
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

/* "keep_alive": 0 unloads the program once its request ended (its
 * idle_ttl is 300 s), and the field does not reach the program. */
TEST_TIMEOUT(gateway_keep_alive_zero_unloads_after_the_request, 60)
{
	char resp[16384];
	add_oa("k", "\"test-model\"", ", \"--echo\"", "");
	struct gw g = start_gw("");
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"keep_alive\":0," MSGS "}", 0, resp, sizeof resp), 200);
	json_t *got = received(resp);
	ASSERT_TRUE(got != NULL);
	EXPECT_TRUE(json_object_get(got, "keep_alive") == NULL);
	EXPECT_STREQ(json_string_value(json_object_get(got, "model")), "test-model");
	EXPECT_TRUE(json_object_get(got, "messages") != NULL);
	json_decref(got);
	uint64_t t0 = t_now_ms();
	EXPECT_TRUE(wait_file_has("meshd.err", "program=k stopping", 5000));
	EXPECT_TRUE(file_has("meshd.err", "(keep_alive 0)"));
	EXPECT_LT(t_now_ms() - t0, 5000);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A duration holds the program past its idle_ttl (300 ms) and then lets it
 * go; -1 holds it until a keep_alive of 0, and a shorter duration after it
 * does not shorten that hold. */
TEST_TIMEOUT(gateway_keep_alive_holds_the_program_warm, 90)
{
	char resp[16384];
	add_oa("h", "\"test-model\"", ", \"--echo\"", "idle_ttl = \"300ms\"\n");
	struct gw g = start_gw("");
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"keep_alive\":\"3s\"," MSGS "}", 0, resp, sizeof resp), 200);
	uint64_t t0 = t_now_ms();
	usleep(1500 * 1000); /* five idle TTLs */
	EXPECT_EQ(count_in("meshd.err", "program=h stopping"), 0);
	EXPECT_TRUE(wait_file_has("meshd.err", "program=h stopping", 10000));
	uint64_t dt = t_now_ms() - t0;
	EXPECT_GE(dt, 2900);
	EXPECT_LT(dt, 3000 + 3000); /* the tick and a loaded VM */
	EXPECT_TRUE(wait_file_has("meshd.err", "program=h stopped", 10000));

	/* A number of seconds, as Ollama takes it; then -1. */
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"keep_alive\":-1," MSGS "}", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"keep_alive\":1," MSGS "}", 0, resp, sizeof resp), 200);
	usleep(2500 * 1000);
	EXPECT_EQ(count_in("meshd.err", "program=h stopping"), 1);
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"keep_alive\":\"0s\"," MSGS "}", 0, resp, sizeof resp), 200);
	EXPECT_TRUE(wait_file_has("meshd.err", "(keep_alive 0)", 5000));
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 2);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A keep_alive that is no duration: 400 in OpenAI's shape naming the
 * field, before anything starts. */
TEST_TIMEOUT(gateway_keep_alive_bad_value_is_400, 30)
{
	static const char *const bad[] = {"\"soon\"", "true", "\"9999h\"", "[1]", "\"5 m\""};
	char body[512], resp[16384];
	add_oa("b", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{\"model\":\"test-model\",\"keep_alive\":%s," MSGS "}", bad[i]);
		EXPECT_EQ(post_body(g.port, body, 0, resp, sizeof resp), 400);
		EXPECT_TRUE(strstr(resp, "\"type\": \"invalid_request_error\"") || strstr(resp, "\"type\":\"invalid_request_error\""));
		EXPECT_TRUE(strstr(resp, "'keep_alive' must be") != NULL);
	}
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 0);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* aliases route to the program like its models, upstream_model is the
 * model it is sent, and /v1/models lists the aliases (alias_of). */
TEST_TIMEOUT(gateway_aliases_route_and_upstream_model_is_sent, 60)
{
	char resp[16384];
	add_oa("q", "\"test-model\"", ", \"--echo\"",
	       "aliases = [\"gpt-4o-mini\", \"qwen\"]\nupstream_model = \"qwen2.5-7b-instruct-q4\"\n");
	struct gw g = start_gw("");
	static const char *const names[] = {"gpt-4o-mini", "qwen", "test-model"};
	for (size_t i = 0; i < 3; i++) {
		char body[512];
		snprintf(body, sizeof body, "{\"model\":\"%s\"," MSGS ",\"stream\":false}", names[i]);
		ASSERT_EQ(post_body(g.port, body, 0, resp, sizeof resp), 200);
		json_t *got = received(resp);
		ASSERT_TRUE(got != NULL);
		EXPECT_STREQ(json_string_value(json_object_get(got, "model")), "qwen2.5-7b-instruct-q4");
		EXPECT_TRUE(json_is_false(json_object_get(got, "stream")));
		json_decref(got);
	}
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	ASSERT_EQ(http_get(g.port, "/v1/models", resp, sizeof resp), 200);
	json_t *l = json_loads(strstr(resp, "\r\n\r\n") + 4, 0, NULL), *d = json_object_get(l, "data");
	ASSERT_EQ(json_array_size(d), 3u);
	EXPECT_STREQ(json_string_value(json_object_get(json_array_get(d, 0), "id")), "test-model");
	EXPECT_TRUE(json_object_get(json_array_get(d, 0), "alias_of") == NULL);
	EXPECT_STREQ(json_string_value(json_object_get(json_array_get(d, 1), "id")), "gpt-4o-mini");
	EXPECT_STREQ(json_string_value(json_object_get(json_array_get(d, 1), "alias_of")), "test-model");
	EXPECT_STREQ(json_string_value(json_object_get(json_array_get(d, 2), "program")), "q");
	json_decref(l);
	EXPECT_EQ(http_get(g.port, "/v1/models/qwen", resp, sizeof resp), 200);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* [filters.defaults] takes floats (issue 30 leftover; llama-swap's
 * setParams sets temperature): `temperature = 0.7` is accepted and set as a
 * JSON number when the body lacks it (a body's own is kept), exponents
 * too; a float no JSON number can hold refuses the manifest. */
TEST_TIMEOUT(gateway_filters_defaults_take_floats, 60)
{
	char resp[16384];
	add_oa("f", "\"test-model\"", ", \"--echo\"",
	       "[filters.defaults]\ntemperature = 0.7\ntop_p = 9_5e-2\nmin_p = -1.5E+1\n");
	add_oa("g", "\"big-model\"", ", \"--echo\"", "[filters.defaults]\ntemperature = 1e999\n");
	struct gw g = start_gw("");
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\"," MSGS "}", 0, resp, sizeof resp), 200);
	json_t *got = received(resp);
	ASSERT_TRUE(got != NULL);
	EXPECT_TRUE(json_is_real(json_object_get(got, "temperature")));
	EXPECT_TRUE(json_real_value(json_object_get(got, "temperature")) == 0.7);
	EXPECT_TRUE(json_real_value(json_object_get(got, "top_p")) == 0.95);
	EXPECT_TRUE(json_real_value(json_object_get(got, "min_p")) == -15.0);
	json_decref(got);
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"temperature\":0.2," MSGS "}", 0, resp, sizeof resp),
		  200);
	got = received(resp);
	ASSERT_TRUE(got != NULL);
	EXPECT_TRUE(json_real_value(json_object_get(got, "temperature")) == 0.2);
	json_decref(got);
	EXPECT_TRUE(file_has("meshd.err", "g.toml:6:15: float out of range"));
	EXPECT_EQ(http_get(g.port, "/v1/models/big-model", resp, sizeof resp), 404);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* [filters]: strip_params are removed, [filters.defaults] set when the
 * body lacks them; what goes is valid JSON of its new Content-Length, for
 * a chunked body too, and a pipelined request after it is read whole. */
TEST_TIMEOUT(gateway_filters_strip_and_set_defaults, 60)
{
	char resp[16384];
	add_oa("f", "\"test-model\"", ", \"--echo\"",
	       "[filters]\nstrip_params = [\"temperature\", \"top_p\"]\n"
	       "[filters.defaults]\nmax_tokens = 512\nstop = \"\\n\\n\"\nlogprobs = false\n");
	struct gw g = start_gw("");
	const char *body = "{\"model\":\"test-model\", \"temperature\": 0.7, \"top_p\" : 0.9," MSGS
			   ",\"note\":\"caf\\u00e9 \xc3\xa9\",\"n\":{\"temperature\":1}}";
	for (int chunked = 0; chunked < 2; chunked++) {
		ASSERT_EQ(post_body(g.port, body, chunked, resp, sizeof resp), 200);
		json_t *got = received(resp);
		ASSERT_TRUE(got != NULL);
		EXPECT_TRUE(json_object_get(got, "temperature") == NULL);
		EXPECT_TRUE(json_object_get(got, "top_p") == NULL);
		EXPECT_EQ(json_integer_value(json_object_get(got, "max_tokens")), 512);
		EXPECT_STREQ(json_string_value(json_object_get(got, "stop")), "\n\n");
		EXPECT_TRUE(json_is_false(json_object_get(got, "logprobs")));
		EXPECT_STREQ(json_string_value(json_object_get(got, "note")), "caf\xc3\xa9 \xc3\xa9");
		EXPECT_EQ(json_integer_value(json_object_get(json_object_get(got, "n"), "temperature")), 1); /* nested: kept */
		json_decref(got);
	}
	ASSERT_EQ(post_body(g.port, "{\"model\":\"test-model\",\"max_tokens\":7," MSGS "}", 0, resp, sizeof resp), 200);
	json_t *got = received(resp);
	ASSERT_TRUE(got != NULL);
	EXPECT_EQ(json_integer_value(json_object_get(got, "max_tokens")), 7);
	json_decref(got);

	/* Two requests in one write: the second's bytes follow the rewritten first. */
	char req[8192], one[2048];
	chat_request(one, sizeof one, "test-model", "hi", 0, 1);
	snprintf(req, sizeof req, "%s%s", one, one);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	close(fd);
	EXPECT_EQ(stop_gw(&g), 0);
}
