/* Fuzzes the path of a worker's output into the API's JSON: random bytes are
 * fed (in random pieces) to the output tail a crash report is made of, the
 * report goes through meshd_api_error_body, and the answer must be JSON
 * that parses, with the report in it -- never "out of memory". */
#include "base/buf.h"
#include "base/err.h"
#include "base/utf8.h"
#include "meshd/api/api.h"
#include "proc/proc.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct mesh_proc_tail tail;
	mesh_proc_tail_reset(&tail);
	/* The first byte sizes the pieces, as reads from a pipe cut anywhere. */
	size_t piece = size ? (size_t)data[0] % 64 + 1 : 1;
	for (size_t i = 1; i < size; i += piece)
		mesh_proc_tail_feed(&tail, (const char *)data + i, size - i < piece ? size - i : piece);
	char *text = mesh_proc_tail_text(&tail);
	if (!text)
		return 0;
	struct mesh_buf b = MESH_BUF_INIT;
	mesh_buf_addf(&b, "worker 'w' (pid 1) crashed while idle: exit status 139\n--- last 30 lines ---\n%s", text);
	char *report = b.p ? mesh_buf_detach(&b, NULL) : NULL;
	if (!report) {
		free(text);
		return 0;
	}
	size_t len = 0;
	char *body = meshd_api_error_body(MESH_E_CRASHED, report, &len);
	if (!body)
		abort(); /* jansson refused it: the report would be lost */
	if (mesh_utf8_valid_prefix(body, len) != len)
		abort();
	json_t *j = json_loadb(body, len, 0, NULL);
	if (!j)
		abort();
	const char *e = json_string_value(json_object_get(j, "error"));
	if (!e || strncmp(e, "worker 'w' (pid 1) crashed", 26) != 0)
		abort();
	/* Valid text comes through unchanged. */
	if (mesh_utf8_valid_prefix(report, strlen(report)) == strlen(report) && strcmp(e, report) != 0)
		abort();
	json_decref(j);
	free(body);
	free(report);
	free(text);
	return 0;
}
