/* mesh__gw_json_model (gateway/gw_json.h): the warm path's scan for a
 * request body's "model".  Whenever it answers, its answer is jansson's
 * (which gw.c asks otherwise): checked on hand-picked bodies and on many
 * mutations of them. */
#include "gateway/gw_json.h"
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
