/* Fuzzes the HTTP/1.1 framer of mesh serve --http (gateway/hframe.h).  The
 * input is a script: each record is a control byte (bit 0: direction, bits
 * 1-7: length) and that many bytes; a control byte 0xff is the server's
 * close.  The script is run twice, records whole and cut into pieces of a
 * size taken from the first byte: both runs must agree on every count and
 * error, and the counts must stay in bounds. */
#include "base/err.h"
#include "gateway/hframe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
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
