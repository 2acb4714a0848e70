/* Assembles the Mandelbrot demo's tiles into a PNG (libpng).
 *
 *   mandel-assemble [-o OUT.png] < RESULTS
 *
 * RESULTS is the worker's replies concatenated in any order (what `mesh
 * results JOB` prints, one reply per chunk).  Every tile must be there
 * exactly once: a missing tile, a duplicate or a malformed reply is an
 * error (exit 1, nothing written) that names the tiles.  The PNG goes to
 * OUT.png, else to stdout (never to a terminal). */
#include "mandel.h"

#include <png.h>
#include <stdio.h>
#include <unistd.h>

static int write_png(FILE *f, uint8_t *img)
{
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	if (!info) {
		png_destroy_write_struct(&png, NULL);
		return -1;
	}
	if (setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		return -1;
	}
	png_init_io(png, f);
	png_set_IHDR(png, info, MANDEL_W, MANDEL_H, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	for (int y = 0; y < MANDEL_H; y++)
		png_write_row(png, img + (size_t)y * MANDEL_W);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	return 0;
}

/* Reads exactly n bytes; n, or fewer at end of input. */
static size_t read_full(uint8_t *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		size_t r = fread(p + got, 1, n - got, stdin);
		if (r == 0)
			break;
		got += r;
	}
	return got;
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	static uint8_t img[MANDEL_W * MANDEL_H], tile[MANDEL_TW * MANDEL_TH];
	static unsigned seen[MANDEL_TILES];
	uint8_t hdr[MANDEL_HDR];
	unsigned long nreply = 0;
	int bad = 0;

	if (argc == 3 && !strcmp(argv[1], "-o"))
		out = argv[2];
	else if (argc != 1) {
		fprintf(stderr, "usage: mandel-assemble [-o OUT.png] < RESULTS\n");
		return 64;
	}
	if (!out && isatty(1)) {
		fprintf(stderr, "mandel-assemble: not writing a PNG to a terminal (use -o OUT.png or a redirect)\n");
		return 64;
	}
	for (;;) {
		size_t n = read_full(hdr, sizeof hdr);
		const char *why = NULL;
		unsigned t;
		if (n == 0)
			break;
		nreply++;
		if (n < sizeof hdr) {
			fprintf(stderr, "mandel-assemble: reply %lu: cut short in its header\n", nreply);
			return 1;
		}
		if (mandel_unpack_header(hdr, &t, &why) < 0) {
			fprintf(stderr, "mandel-assemble: reply %lu: %s\n", nreply, why);
			return 1;
		}
		if (read_full(tile, sizeof tile) != sizeof tile) {
			fprintf(stderr, "mandel-assemble: reply %lu (tile %u): cut short in its pixels\n", nreply, t);
			return 1;
		}
		if (seen[t]++) {
			fprintf(stderr, "mandel-assemble: tile %u appears more than once\n", t);
			bad = 1;
			continue;
		}
		int x0 = (int)(t % MANDEL_COLS) * MANDEL_TW, y0 = (int)(t / MANDEL_COLS) * MANDEL_TH;
		for (int y = 0; y < MANDEL_TH; y++)
			memcpy(img + (size_t)(y0 + y) * MANDEL_W + x0, tile + y * MANDEL_TW, MANDEL_TW);
	}
	unsigned missing = 0;
	for (unsigned t = 0; t < MANDEL_TILES; t++)
		if (!seen[t]) {
			if (missing < 20)
				fprintf(stderr, "%s%u", missing ? ", " : "mandel-assemble: missing tiles: ", t);
			missing++;
		}
	if (missing)
		fprintf(stderr, "%s (%u of %d missing)\n", missing > 20 ? ", ..." : "", missing, MANDEL_TILES);
	if (missing || bad)
		return 1;
	FILE *f = out ? fopen(out, "wb") : stdout;
	if (!f) {
		fprintf(stderr, "mandel-assemble: cannot open '%s': %s\n", out, strerror(errno));
		return 1;
	}
	int rc = write_png(f, img);
	if ((out ? fclose(f) : fflush(f)) != 0)
		rc = -1;
	if (rc < 0) {
		fprintf(stderr, "mandel-assemble: cannot write the PNG%s%s\n", out ? " to " : "", out ? out : "");
		if (out)
			unlink(out);
		return 1;
	}
	fprintf(stderr, "mandel-assemble: %dx%d from %d tiles\n", MANDEL_W, MANDEL_H, MANDEL_TILES);
	return 0;
}
