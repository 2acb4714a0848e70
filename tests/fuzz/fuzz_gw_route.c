/* The gateway's routing inputs (src/gateway/gw.c), through its seams:
 * byte 0 even: the rest is a JSON request body, whose "model" it routes by
 *   (mesh__gw_body_model): never crashes or leaks; a model is non-empty;
 *   and where the scan without jansson (mesh__gw_json_model) is sure, its
 *   answer is jansson's: the body parses, and its "model" is that string
 *   (or is no string where the scan found none); and its rewrite
 *   (mesh__gw_body_edit) is JSON without keep_alive or a stripped member,
 *   with the model and the defaults it was given;
 * byte 0 odd: the rest follows "/upstream/" in a request target, split
 *   into model and the program's path (mesh__gw_upstream_split): the model
 *   holds no '/' or '?', the path starts with '/' and ends the target. */
#include "gateway/gw_loop.h"
#include "gateway/gw_json.h"

#include <jansson.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (!(data[0] & 1)) {
		const char *body = (const char *)data + 1, *fm;
		size_t n = size - 1, fl;
		char *m = mesh__gw_body_model(body, n);
		if (m && !m[0])
			abort();
		free(m);
		if (mesh__gw_json_model(body, n, &fm, &fl) == 0) {
			json_t *j = json_loadb(body, n, 0, NULL);
			if (!j)
				abort(); /* the scan took for JSON what is not */
			const char *jm = json_string_value(json_object_get(j, "model"));
			if (fm ? !jm || strlen(jm) != fl || memcmp(jm, fm, fl) : jm != NULL)
				abort();
			json_decref(j);
		}
		static char *strip[] = {"temperature", "top_p", NULL};
		static const struct mesh_manifest_default d[] = {{.key = "max_tokens", .type = MESH_VALUE_INT, .i = 512},
								 {.key = "top_p", .type = MESH_VALUE_BOOL, .b = 1}};
		struct mesh__gw_edit e = {.model = "up", .strip = strip, .nstrip = 2, .defaults = d, .ndefaults = 2};
		struct mesh_buf b = MESH_BUF_INIT;
		int64_t keep;
		char why[256];
		if (mesh__gw_body_edit(body, n, &e, &b, &keep, why, sizeof why) == 0) {
			json_t *j = json_loadb(b.p, b.len, 0, NULL), *in = json_loadb(body, n, 0, NULL), *dflt = json_integer(512);
			const char *um = json_string_value(json_object_get(j, "model"));
			json_t *mt = in ? json_object_get(in, "max_tokens") : NULL;
			if (!j || !in || json_object_get(j, "keep_alive") || json_object_get(j, "temperature") ||
			    !json_is_true(json_object_get(j, "top_p")) || !um || strcmp(um, "up") ||
			    !json_equal(json_object_get(j, "max_tokens"), mt ? mt : dflt))
				abort();
			json_decref(dflt);
			json_decref(j);
			json_decref(in);
		}
		mesh_buf_release(&b);
		return 0;
	}
	/* the request target as the head parser leaves it: NUL-terminated */
	char *t = malloc(size + 10), model[300], path[2100];
	if (!t)
		abort();
	memcpy(t, "/upstream/", 10);
	memcpy(t + 10, data + 1, size - 1);
	t[size + 9] = 0;
	mesh__gw_upstream_split(t, model, sizeof model, path, sizeof path);
	/* the model is the start of the segment; the path is the rest */
	size_t seg = strcspn(t + 10, "/?"), ml = strlen(model);
	const char *rest = t + 10 + seg;
	if (ml > seg || ml > sizeof model - 1 || (ml < seg && ml != sizeof model - 1) || memcmp(model, t + 10, ml))
		abort();
	if (path[0] != '/' || strncmp(path + (rest[0] == '/' ? 0 : 1), rest, sizeof path - 2))
		abort();
	free(t);
	return 0;
}
