/* Fuzzes the HTTP/1.1 response parser (http/http.h).  The first two bytes
 * pick the limits and how the rest is cut into pieces; the parse of the
 * whole input and the parse of the pieces must agree exactly, and every
 * limit must hold. */
#include "base/err.h"
#include "http/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int parse(const uint8_t *d, size_t n, size_t piece, const struct mesh_http_limits *lim, int no_body,
		 struct mesh_http_response *r)
{
	int rc = 0;
	size_t off = 0;
	mesh_http_response_init(r, lim);
	r->no_body = no_body;
	while (rc == 0 && off < n) {
		size_t k = n - off < piece ? n - off : piece;
		size_t used = 0;
		rc = mesh_http_response_feed(r, d + off, k, &used);
		if (used > k)
			abort();
		if (rc == 0 && used != k)
			abort();
		off += k;
	}
	if (rc == 0)
		rc = mesh_http_response_eof(r);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const struct mesh_http_limits small = {64, 4, 512, 128};
	const struct mesh_http_limits *lim = (data[0] & 1) ? &small : NULL;
	int no_body = (data[0] >> 1) & 1;
	size_t piece = (size_t)data[1] % 23 + 1;
	const uint8_t *d = data + 2;
	size_t n = size - 2;
	struct mesh_http_response a, b;
	int ra = parse(d, n, n ? n : 1, lim, no_body, &a);
	int rb = parse(d, n, piece, lim, no_body, &b);
	if (ra != rb)
		abort();
	if (ra != 1 && ra != MESH_E_PROTO && ra != MESH_E_TOOBIG && ra != MESH_E_CLOSED)
		abort();
	if (ra == 1) {
		size_t max_body = lim ? lim->max_body : MESH_HTTP_MAX_BODY;
		if (a.status != b.status || a.status < 100 || a.status > 599 || a.body.len != b.body.len ||
		    a.body.len > max_body || memcmp(a.body.p, b.body.p, a.body.len) != 0 || a.body.p[a.body.len] != 0)
			abort();
		size_t nh = mesh_http_response_nheaders(&a);
		for (size_t i = 0; i < nh; i++) {
			const char *name, *value;
			if (mesh_http_response_header_at(&a, i, &name, &value) || !*name)
				abort();
			if (mesh_http_response_header(&a, name) == NULL)
				abort();
		}
	} else if (!*mesh_http_response_why(&a)) {
		abort();
	}
	mesh_http_response_release(&a);
	mesh_http_response_release(&b);
	return 0;
}
