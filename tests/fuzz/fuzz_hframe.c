/* Fuzzes the HTTP/1.1 framer of mesh serve --http (http/hframe.h).  The
 * input is a script: each record is a control byte (bit 0: direction, bits
 * 1-7: length) and that many bytes; a control byte 0xff is the server's
 * close.  The script is run twice, records whole and cut into pieces of a
 * size taken from the first byte: both runs must agree on every count and
 * error, and the counts must stay in bounds.
 *
 * The same input after its first byte is also a request head for the
 * gateway's reading of one (mesh_hframe_head_end, _parse_request,
 * _head_forward): its end is found the same in pieces; a head that parses
 * has its parts inside it, agrees with the framer fed the same bytes, and
 * what goes on parses again behind a request line of its own, with the
 * same length, no hop-by-hop field and no Expect. */
#include "base/err.h"
#include "http/hframe.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void run(const uint8_t *d, size_t n, size_t piece, struct mesh_hframe *f, int *err)
{
	mesh_hframe_init(f);
	*err = 0;
	size_t i = 0;
	while (i < n) {
		uint8_t ctl = d[i++];
		if (ctl == 0xff) {
			mesh_hframe_eof(f, 1);
			continue;
		}
		size_t len = ctl >> 1, dir = ctl & 1;
		if (len > n - i)
			len = n - i;
		for (size_t off = 0; off < len;) {
			size_t k = len - off < piece ? len - off : piece;
			int rc = mesh_hframe_feed(f, (int)dir, (const char *)d + i + off, k);
			if (rc < 0 && !*err)
				*err = rc;
			if (rc < 0 && rc != MESH_E_PROTO && rc != MESH_E_TOOBIG)
				abort();
			if (rc < 0 && !*mesh_hframe_why(f, (int)dir))
				abort();
			off += k;
		}
		i += len;
		if (f->inflight > MESH_HFRAME_MAX_PIPELINE || f->responses > f->requests ||
		    f->requests - f->responses != f->inflight)
			abort();
	}
}

/* 1 when the head p[0..n) has a field named name (case-insensitive). */
static int has_field(const char *p, size_t n, const char *name)
{
	size_t k = strlen(name);
	for (size_t i = 0; i + k + 2 < n; i++)
		if (p[i] == '\n' && !strncasecmp(p + i + 1, name, k) && p[i + 1 + k] == ':')
			return 1;
	return 0;
}

static void head(const char *p, size_t n, size_t piece)
{
	size_t sc = 0, end = mesh_hframe_head_end(p, n, &sc), got = 0;
	sc = 0;
	for (size_t k = 0; k < n && !got;) {
		k = k + piece < n ? k + piece : n;
		got = mesh_hframe_head_end(p, k, &sc);
	}
	if (got != end || end > n)
		abort();
	if (!end)
		return;
	struct mesh_hframe_head h;
	int rc = mesh_hframe_parse_request(p, end, &h);
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	int frc = mesh_hframe_feed(&f, 0, p, end);
	if (rc) {
		if ((rc != MESH_E_PROTO && rc != MESH_E_TOOBIG) || !h.why || !*h.why)
			abort();
		return;
	}
	/* The framer read it the same: no error, one request. */
	if (frc || f.requests != 1 || h.len != end || h.line_off + h.line_len > end || h.method_len == 0 ||
	    h.target_len == 0 || h.target_off + h.target_len > h.line_off + h.line_len || (h.chunked && h.content_length) ||
	    h.nfields > MESH_HFRAME_MAX_FIELDS || memcmp(p + end - 2, "\r\n", 2))
		abort();
	static char fwd[MESH_HFRAME_MAX_HEAD + 64];
	char *copy = malloc(end);
	if (!copy)
		abort();
	memcpy(copy, p, end);
	size_t off = mesh_hframe_head_forward(copy, &h);
	if (off < h.line_off + h.line_len || off > end - 2 || memcmp(copy + end - 2, "\r\n", 2) ||
	    memcmp(copy, p, h.line_off + h.line_len))
		abort();
	size_t fl = (size_t)snprintf(fwd, sizeof fwd, "GET / HTTP/1.1\r\n");
	memcpy(fwd + fl, copy + off, end - off);
	fl += end - off;
	free(copy);
	struct mesh_hframe_head h2;
	if (mesh_hframe_parse_request(fwd, fl, &h2) || h2.content_length != h.content_length || h2.chunked || h2.expect ||
	    h2.close)
		abort();
	static const char *const hop[] = {"connection", "keep-alive", "proxy-connection", "te",
					  "transfer-encoding", "upgrade", "trailer", "expect"};
	for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
		if (has_field(fwd, fl, hop[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	head((const char *)data + 1, size - 1, (size_t)data[0] % 17 + 1);
	size_t piece = (size_t)data[0] % 17 + 1;
	struct mesh_hframe a, b;
	int ea, eb;
	run(data + 1, size - 1, 1u << 20, &a, &ea);
	run(data + 1, size - 1, piece, &b, &eb);
	if (ea != eb || a.inflight != b.inflight || a.requests != b.requests || a.responses != b.responses ||
	    a.tunnel != b.tunnel)
		abort();
	return 0;
}
