/* mesh__gw_json_model (gateway/gw_json.h): the warm path's scan for a
 * request body's "model".  Whenever it answers, its answer is jansson's
 * (which gw.c asks otherwise): checked on hand-picked bodies and on many
 * mutations of them. */
#include "gateway/gw_json.h"
#include "base/err.h"
#include "runner/t.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* jansson's model of body (as gw.c reads it): malloc'd, or NULL. */
static char *jansson_model(const char *body, size_t n)
{
	json_t *j = json_loadb(body, n, 0, NULL);
	const char *m = j ? json_string_value(json_object_get(j, "model")) : NULL;
	char *out = m && *m ? strdup(m) : NULL;
	json_decref(j);
	return out;
}

/* 1: the scan answered (and agreed with jansson), 0: it was not sure,
 * -1: it answered otherwise than jansson. */
static int check(const char *body, size_t n)
{
	const char *m;
	size_t len;
	if (mesh__gw_json_model(body, n, &m, &len))
		return 0;
	char *want = jansson_model(body, n);
	int same = want ? m && len == strlen(want) && !memcmp(m, want, len) : !m || !len;
	free(want);
	return same ? 1 : -1;
}

static int check_s(const char *body)
{
	return check(body, strlen(body));
}

TEST(gw_json_model_usual_bodies_answered)
{
	EXPECT_EQ(check_s("{\"model\":\"llama-3\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"), 1);
	EXPECT_EQ(check_s(" {\n \"messages\" : [ {\"role\": \"system\", \"content\": \"a \\\"quoted\\\"\\n line\"} ],\n"
			  "  \"temperature\": 0.7, \"max_tokens\": 128, \"stream\": true, \"stop\": null,\n"
			  "  \"model\": \"m-a\" }\r\n"),
		  1);
	EXPECT_EQ(check_s("{\"model\":\"a\",\"model\":\"b\"}"), 1); /* the last, as jansson */
	EXPECT_EQ(check_s("{\"model\":\"a\",\"model\":3}"), 1);	  /* not a string: none */
	EXPECT_EQ(check_s("{\"model\":\"\"}"), 1);
	EXPECT_EQ(check_s("{}"), 1);
	EXPECT_EQ(check_s("{\"x\":{\"model\":\"inner\"}}"), 1); /* not top-level: none */
	EXPECT_EQ(check_s("{\"n\":[-0, 1.5, 10, [], {}, false]}"), 1);
}

TEST(gw_json_model_unsure_goes_to_jansson)
{
	/* Not JSON, or outside the scan's subset: it does not answer. */
	const char *unsure[] = {"", "[]", "{\"model\":\"a\"", "{\"model\":\"a\"} x", "{\"model\":\"a\",}",
				"{\"a\":01}", "{\"a\":1e5}", "{\"a\":1234567890123456}", "{\"a\":\"\\u0041\"}",
				"{\"model\":\"caf\xc3\xa9\"}", "{\"a\":\"tab\there\"}", "{\"mod\\u0065l\":\"x\"}",
				"{\"model\":\"a\\nb\"}", "{\"a\":tru}", "{'a':1}", "{\"a\" 1}"};
	for (size_t i = 0; i < sizeof unsure / sizeof *unsure; i++)
		EXPECT_EQ(check_s(unsure[i]), 0);
	char deep[300]; /* 100 levels: past the scan's 64 */
	size_t d = (size_t)snprintf(deep, sizeof deep, "{\"a\":");
	memset(deep + d, '[', 100);
	memset(deep + d + 100, ']', 100);
	snprintf(deep + d + 200, sizeof deep - d - 200, "}");
	EXPECT_EQ(check_s(deep), 0);
	/* An embedded NUL. */
	EXPECT_EQ(check("{\"model\":\"a\"}\0", 14), 0);
}

TEST(gw_json_model_mutations_agree_with_jansson)
{
	static const char *seeds[] = {
		"{\"model\":\"llama-3\",\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"}],\"n\":-1.25}",
		"{\"stream\":false,\"model\":\"m\",\"x\":[true,false,null,{}],\"model\":\"z\"}",
	};
	static const char alphabet[] = "{}[]\":,\\ \t\n01-.eEtrufalsn\"model\x01\x80";
	unsigned seed = 12345;
	int answered = 0;
	for (int k = 0; k < 40000; k++) {
		char b[256];
		const char *s = seeds[k & 1];
		size_t n = strlen(s);
		memcpy(b, s, n);
		for (int m = 0; m <= (k >> 1) % 3; m++) {
			seed = seed * 1103515245u + 12345u;
			size_t at = (seed >> 8) % n;
			char c = alphabet[(seed >> 20) % (sizeof alphabet - 1)];
			switch ((seed >> 28) % 3) {
			case 0: /* replace */
				b[at] = c;
				break;
			case 1: /* delete */
				memmove(b + at, b + at + 1, n - at - 1);
				n--;
				break;
			default: /* insert */
				if (n + 1 < sizeof b) {
					memmove(b + at + 1, b + at, n - at);
					b[at] = c;
					n++;
				}
			}
		}
		int r = check(b, n);
		if (r < 0)
			FAIL("the scan disagrees with jansson on %.*s", (int)n, b);
		answered += r;
	}
	EXPECT_GT(answered, 1000); /* it answers on many of them, not only "not sure" */
}

/* mesh__gw_body_edit (gateway/gw_json.h) of body with e: 0 and the result
 * parsed (NULL: it is not JSON), *keep its keep_alive. */
static json_t *edited(const char *body, const struct mesh__gw_edit *e, int64_t *keep)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char why[256];
	int rc = mesh__gw_body_edit(body, strlen(body), e, &b, keep, why, sizeof why);
	EXPECT_EQ(rc, 0);
	json_t *j = rc ? NULL : json_loadb(b.p, b.len, 0, NULL);
	mesh_buf_release(&b);
	return j;
}

/* What a body becomes: the members kept as they came (escapes, nesting,
 * numbers, UTF-8), keep_alive and the stripped ones gone (every copy of a
 * duplicated key), model rewritten, defaults added where absent. */
TEST(gw_json_body_edit_keeps_what_it_does_not_touch)
{
	static char *strip[] = {"temperature", "top_p", NULL};
	struct mesh_manifest_default d[] = {{.key = "max_tokens", .type = MESH_VALUE_INT, .i = 512},
					    {.key = "top_p", .type = MESH_VALUE_STRING, .str = "forced"},
					    {.key = "stream", .type = MESH_VALUE_BOOL, .b = 1}};
	struct mesh__gw_edit e = {.model = "up\"model", .strip = strip, .nstrip = 2, .defaults = d, .ndefaults = 3};
	int64_t keep;
	json_t *j = edited(" {\"model\" : \"a\", \"temp\\u0065rature\":0.7,\"top_p\":1e-3 ,\"keep_alive\":\"5m\","
			   "\"messages\":[{\"content\":\"\\\"}{,\\u00e9 \xc3\xa9\"}],\"x\":{\"temperature\":[1,{}]},"
			   "\"n\":0.1, \"stream\":false,\"temperature\":2} \n",
			   &e, &keep);
	ASSERT_TRUE(j != NULL);
	EXPECT_EQ(keep, 5ll * 60 * 1000000000);
	EXPECT_STREQ(json_string_value(json_object_get(j, "model")), "up\"model");
	EXPECT_TRUE(json_object_get(j, "temperature") == NULL);
	EXPECT_TRUE(json_object_get(j, "keep_alive") == NULL);
	EXPECT_STREQ(json_string_value(json_object_get(j, "top_p")), "forced"); /* stripped, then set */
	EXPECT_EQ(json_integer_value(json_object_get(j, "max_tokens")), 512);
	EXPECT_TRUE(json_is_false(json_object_get(j, "stream"))); /* present: kept */
	EXPECT_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "messages"), 0), "content")),
		     "\"}{,\xc3\xa9 \xc3\xa9");
	EXPECT_EQ(json_array_size(json_object_get(json_object_get(j, "x"), "temperature")), 2u);
	EXPECT_TRUE(json_real_value(json_object_get(j, "n")) == 0.1);
	EXPECT_EQ(json_object_size(j), 7u);
	json_decref(j);

	/* Nothing to do but the keep_alive; an empty object; one member. */
	struct mesh__gw_edit none = {0};
	j = edited("{\"keep_alive\":-1}", &none, &keep);
	EXPECT_EQ(json_object_size(j), 0u);
	EXPECT_EQ(keep, MESH__GW_KEEP_FOREVER);
	json_decref(j);
	j = edited("{}", &e, &keep);
	EXPECT_EQ(keep, MESH__GW_KEEP_ABSENT);
	EXPECT_EQ(json_object_size(j), 4u);
	json_decref(j);
}

/* keep_alive's values, as Ollama takes them, and the ones refused. */
TEST(gw_json_keep_alive_values)
{
	static const struct {
		const char *v;
		int64_t want; /* -3: refused */
	} rows[] = {
		{"0", 0},	     {"\"0\"", 0},	     {"\"0s\"", 0},	  {"30", 30000000000ll},
		{"1.5", 1500000000}, {"\"5m\"", 300000000000ll}, {"\"250ms\"", 250000000}, {"-1", MESH__GW_KEEP_FOREVER},
		{"-0.5", MESH__GW_KEEP_FOREVER}, {"\"-1m\"", MESH__GW_KEEP_FOREVER}, {"null", MESH__GW_KEEP_ABSENT},
		{"\"7d\"", 7ll * 86400 * 1000000000}, {"\"8d\"", -3}, {"1e12", -3}, {"\"soon\"", -3}, {"true", -3},
		{"{}", -3},	     {"\"\"", -3},	     {"\"-\"", -3},	  {"\"5 m\"", -3},
	};
	struct mesh__gw_edit none = {0};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char body[128], why[256] = "";
		struct mesh_buf b = MESH_BUF_INIT;
		int64_t keep = 12345;
		snprintf(body, sizeof body, "{\"model\":\"m\",\"keep_alive\":%s}", rows[i].v);
		int rc = mesh__gw_body_edit(body, strlen(body), &none, &b, &keep, why, sizeof why);
		if (rows[i].want == -3) {
			if (rc != MESH_E_PARSE || !strstr(why, "'keep_alive' must be"))
				t__fail(__FILE__, __LINE__, "row %zu (%s): rc %d, why \"%s\"", i, rows[i].v, rc, why);
		} else if (rc || keep != rows[i].want || strcmp(b.p, "{\"model\":\"m\"}")) {
			t__fail(__FILE__, __LINE__, "row %zu (%s): rc %d, keep %lld, body %s", i, rows[i].v, rc,
				(long long)keep, b.p ? b.p : "");
		}
		mesh_buf_release(&b);
	}
}
