/* The Mandelbrot demo's worker (libmeshworker): each request names a tile
 * ("TILE" or "TILE MAXIT"), the reply is that tile's pixels behind a small
 * header (mandel.h).  `mesh call mandel 17` renders tile 17. */
#include "mandel.h"

#include <mesh/worker.h>

#include <stdio.h>

static int render(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	unsigned tile, maxit;
	uint8_t *out = reply;
	(void)ctx;
	if (mandel_parse_request(req, n, &tile, &maxit) < 0) {
		*reply_len = (size_t)snprintf(reply, cap, "mandel: a request is 'TILE' (0..%d) or 'TILE MAXIT' (1..%d)",
					      MANDEL_TILES - 1, MANDEL_MAXIT_MAX);
		if (*reply_len > cap)
			*reply_len = cap;
		return -1;
	}
	if (cap < MANDEL_REPLY)
		return -1;
	mandel_pack_header(out, tile);
	int x0 = (int)(tile % MANDEL_COLS) * MANDEL_TW, y0 = (int)(tile / MANDEL_COLS) * MANDEL_TH;
	for (int y = 0; y < MANDEL_TH; y++)
		for (int x = 0; x < MANDEL_TW; x++)
			out[MANDEL_HDR + y * MANDEL_TW + x] = mandel_pixel(x0 + x, y0 + y, maxit);
	*reply_len = MANDEL_REPLY;
	return 0;
}

int main(void)
{
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "mandel: %s (start me from meshd)\n", mesh_worker_strerror(rc));
		return 1;
	}
	printf("mandel: ready, %dx%d in %d tiles of %dx%d\n", MANDEL_W, MANDEL_H, MANDEL_TILES, MANDEL_TW, MANDEL_TH);
	if ((rc = mesh_worker_ready(w)) == 0)
		rc = mesh_worker_serve(w, render, NULL);
	if (rc < 0)
		fprintf(stderr, "mandel: %s\n", mesh_worker_strerror(rc));
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
