/* The gateway's routing inputs (src/gateway/gw.c), through its seams:
 * byte 0 even: the rest is a JSON request body, whose "model" it routes by
 *   (mesh__gw_body_model): never crashes or leaks; a model is non-empty;
 *   and where the scan without jansson (mesh__gw_json_model) is sure, its
 *   answer is jansson's: the body parses, and its "model" is that string
 *   (or is no string where the scan found none);
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
