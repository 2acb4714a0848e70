/* The demo's chunk program: renders one tile of a Mandelbrot image, or
 * assembles every tile into a PNG (zlib).
 *
 *   mandel_tile render TILE DIR      writes DIR/TILE.rgb (atomically: temp + rename)
 *   mandel_tile assemble DIR OUT.png
 *   mandel_tile tiles                prints the number of tiles
 *
 * The image is W x H pixels in TW x TH tiles, numbered row by row. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum { W = 960, H = 720, TW = 48, TH = 48, COLS = W / TW, ROWS = H / TH, TILES = COLS * ROWS, MAXIT = 1500 };

static int parse_tile(const char *s, int *t)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v >= TILES)
		return -1;
	*t = (int)v;
	return 0;
}

static void color(int it, double zr, double zi, unsigned char *px)
{
	if (it >= MAXIT) {
		px[0] = px[1] = px[2] = 0;
		return;
	}
	/* smooth iteration count, then a cosine palette */
	double mod = zr * zr + zi * zi;
	double nu = it + 1 - log2(log2(mod > 1.0001 ? mod : 1.0001) / 2.0);
	double t = nu / 48.0;
	double c[3] = {0.5 + 0.5 * cos(6.2832 * (t + 0.00)), 0.5 + 0.5 * cos(6.2832 * (t + 0.15)),
		       0.5 + 0.5 * cos(6.2832 * (t + 0.30))};
	for (int k = 0; k < 3; k++)
		px[k] = (unsigned char)(c[k] * 255.0);
}

static int render(int tile, const char *dir)
{
	static unsigned char buf[TW * TH * 3];
	int tx = tile % COLS, ty = tile / COLS;
	/* the seahorse valley, wide enough to show the whole bulb's edge */
	const double cx = -0.7453, cy = 0.1127, span = 0.012;
	for (int y = 0; y < TH; y++)
		for (int x = 0; x < TW; x++) {
			double px = tx * TW + x, py = ty * TH + y;
			double cr = cx + (px - W / 2.0) * span / W;
			double ci = cy + (py - H / 2.0) * span / W;
			double zr = 0, zi = 0;
			int it = 0;
			while (it < MAXIT && zr * zr + zi * zi <= 256.0) {
				double t = zr * zr - zi * zi + cr;
				zi = 2 * zr * zi + ci;
				zr = t;
				it++;
			}
			color(it, zr, zi, buf + (y * TW + x) * 3);
		}
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof tmp, "%s/.%d.tmp.%d", dir, tile, (int)getpid());
	snprintf(path, sizeof path, "%s/%d.rgb", dir, tile);
	FILE *f = fopen(tmp, "wb");
	if (!f || fwrite(buf, sizeof buf, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "mandel_tile: cannot write '%s': %s\n", path, strerror(errno));
		unlink(tmp);
		return 1;
	}
	printf("tile %d done\n", tile);
	return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
	p[3] = (unsigned char)v;
}

static int chunk(FILE *f, const char *type, const unsigned char *data, uint32_t len)
{
	unsigned char hdr[8], crcb[4];
	put32(hdr, len);
	memcpy(hdr + 4, type, 4);
	uLong crc = crc32(0, (const Bytef *)type, 4);
	if (len)
		crc = crc32(crc, data, len);
	put32(crcb, (uint32_t)crc);
	return fwrite(hdr, 8, 1, f) == 1 && (!len || fwrite(data, len, 1, f) == 1) && fwrite(crcb, 4, 1, f) == 1 ? 0
														: -1;
}

static int assemble(const char *dir, const char *out)
{
	const size_t stride = 1 + (size_t)W * 3;
	unsigned char *raw = calloc(stride, H), tile[TW * TH * 3];
	if (!raw)
		return 1;
	for (int t = 0; t < TILES; t++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%d.rgb", dir, t);
		FILE *f = fopen(path, "rb");
		if (!f || fread(tile, sizeof tile, 1, f) != 1) {
			fprintf(stderr, "mandel_tile: tile %d missing or short: '%s'\n", t, path);
			if (f)
				fclose(f);
			free(raw);
			return 1;
		}
		fclose(f);
		int tx = t % COLS, ty = t / COLS;
		for (int y = 0; y < TH; y++)
			memcpy(raw + (size_t)(ty * TH + y) * stride + 1 + (size_t)tx * TW * 3, tile + y * TW * 3, TW * 3);
	}
	uLongf zlen = compressBound(stride * H);
	unsigned char *z = malloc(zlen);
	if (!z || compress2(z, &zlen, raw, stride * H, 6) != Z_OK) {
		fprintf(stderr, "mandel_tile: compression failed\n");
		free(raw);
		free(z);
		return 1;
	}
	unsigned char ihdr[13];
	put32(ihdr, W);
	put32(ihdr + 4, H);
	ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0; /* 8-bit RGB */
	FILE *f = fopen(out, "wb");
	int rc = !f || fwrite("\x89PNG\r\n\x1a\n", 8, 1, f) != 1 || chunk(f, "IHDR", ihdr, 13) ||
		 chunk(f, "IDAT", z, (uint32_t)zlen) || chunk(f, "IEND", NULL, 0);
	if (f && fclose(f) != 0)
		rc = 1;
	if (rc)
		fprintf(stderr, "mandel_tile: cannot write '%s': %s\n", out, strerror(errno));
	free(raw);
	free(z);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	int t;
	if (argc == 2 && !strcmp(argv[1], "tiles")) {
		printf("%d\n", TILES);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "render") && parse_tile(argv[2], &t) == 0)
		return render(t, argv[3]);
	if (argc == 4 && !strcmp(argv[1], "assemble"))
		return assemble(argv[2], argv[3]);
	fprintf(stderr, "usage: mandel_tile render TILE DIR | assemble DIR OUT.png | tiles\n");
	return 64;
}
