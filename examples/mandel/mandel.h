/* The Mandelbrot demo's image and its tile format, shared by the worker
 * (mandel.c) and the assembler (assemble.c): one pack, one unpack.
 *
 * The image is MANDEL_W x MANDEL_H 8-bit gray pixels of the whole set
 * (real -2.25 .. 0.75, imaginary -1.25 .. 1.25), cut into MANDEL_COLS x
 * MANDEL_ROWS tiles of MANDEL_TW x MANDEL_TH, numbered row by row.  Pixel
 * (x, y) samples c at its centre; its value is 255 inside the set (no
 * escape within maxit iterations of z = z^2 + c, |z|^2 > 4 escapes), else
 * floor(254 * sqrt(it / maxit)) for the iteration it escaped at.
 *
 * A request is one line: "TILE" or "TILE MAXIT" in decimal (TILE
 * 0..MANDEL_TILES-1, MAXIT 1..MANDEL_MAXIT_MAX, default MANDEL_MAXIT).  A
 * reply is a MANDEL_HDR-byte header -- "MDL1", the tile (u32), its width
 * and height, the grid's columns and rows (u16 each), little-endian --
 * then width x height pixels, row by row. */
#ifndef MESH_EXAMPLES_MANDEL_H
#define MESH_EXAMPLES_MANDEL_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
	MANDEL_W = 1200,
	MANDEL_H = 1000,
	MANDEL_TW = 80,
	MANDEL_TH = 50,
	MANDEL_COLS = MANDEL_W / MANDEL_TW,
	MANDEL_ROWS = MANDEL_H / MANDEL_TH,
	MANDEL_TILES = MANDEL_COLS * MANDEL_ROWS, /* 300 */
	MANDEL_MAXIT = 255,
	MANDEL_MAXIT_MAX = 1000000,
	MANDEL_HDR = 16,
	MANDEL_REPLY = MANDEL_HDR + MANDEL_TW * MANDEL_TH,
};
_Static_assert(MANDEL_COLS * MANDEL_TW == MANDEL_W && MANDEL_ROWS * MANDEL_TH == MANDEL_H, "tiles cover the image");

#define MANDEL_RE0 (-2.25)
#define MANDEL_IM0 (-1.25)
#define MANDEL_STEP (3.0 / MANDEL_W) /* square pixels: 2.5 / MANDEL_H too */

/* The pixel value at image coordinates (x, y). */
static inline uint8_t mandel_pixel(int x, int y, unsigned maxit)
{
	double cr = MANDEL_RE0 + (x + 0.5) * MANDEL_STEP, ci = MANDEL_IM0 + (y + 0.5) * MANDEL_STEP;
	double zr = 0, zi = 0;
	unsigned it = 0;
	while (it < maxit && zr * zr + zi * zi <= 4.0) {
		double t = zr * zr - zi * zi + cr;
		zi = 2 * zr * zi + ci;
		zr = t;
		it++;
	}
	if (it >= maxit)
		return 255;
	return (uint8_t)(254.0 * sqrt((double)it / maxit));
}

/* Parses a request line.  0, or -EINVAL. */
static inline int mandel_parse_request(const char *req, size_t n, unsigned *tile, unsigned *maxit)
{
	char line[64], *end;
	while (n && (req[n - 1] == '\n' || req[n - 1] == '\r' || req[n - 1] == ' '))
		n--;
	if (n == 0 || n >= sizeof line)
		return -EINVAL;
	memcpy(line, req, n);
	line[n] = 0;
	if (line[0] < '0' || line[0] > '9')
		return -EINVAL;
	errno = 0;
	unsigned long t = strtoul(line, &end, 10), m = MANDEL_MAXIT;
	if (errno || t >= MANDEL_TILES)
		return -EINVAL;
	if (*end == ' ') {
		const char *s = end + 1;
		if (*s < '0' || *s > '9')
			return -EINVAL;
		m = strtoul(s, &end, 10);
		if (errno || m == 0 || m > MANDEL_MAXIT_MAX)
			return -EINVAL;
	}
	if (*end)
		return -EINVAL;
	*tile = (unsigned)t;
	*maxit = (unsigned)m;
	return 0;
}

static inline void mandel_put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}
static inline unsigned mandel_get16(const uint8_t *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

/* The header of tile's reply into hdr[MANDEL_HDR]. */
static inline void mandel_pack_header(uint8_t *hdr, unsigned tile)
{
	memcpy(hdr, "MDL1", 4);
	hdr[4] = (uint8_t)tile, hdr[5] = (uint8_t)(tile >> 8), hdr[6] = (uint8_t)(tile >> 16),
	hdr[7] = (uint8_t)(tile >> 24);
	mandel_put16(hdr + 8, MANDEL_TW);
	mandel_put16(hdr + 10, MANDEL_TH);
	mandel_put16(hdr + 12, MANDEL_COLS);
	mandel_put16(hdr + 14, MANDEL_ROWS);
}

/* Checks a header against this image's geometry; its tile in *tile.  0,
 * or -EINVAL (*why says what is wrong). */
static inline int mandel_unpack_header(const uint8_t *hdr, unsigned *tile, const char **why)
{
	uint32_t t = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
	if (memcmp(hdr, "MDL1", 4)) {
		*why = "not a tile (no MDL1 header)";
		return -EINVAL;
	}
	if (mandel_get16(hdr + 8) != MANDEL_TW || mandel_get16(hdr + 10) != MANDEL_TH ||
	    mandel_get16(hdr + 12) != MANDEL_COLS || mandel_get16(hdr + 14) != MANDEL_ROWS) {
		*why = "a tile of another image geometry";
		return -EINVAL;
	}
	if (t >= MANDEL_TILES) {
		*why = "tile index out of range";
		return -EINVAL;
	}
	*tile = t;
	return 0;
}

#endif
