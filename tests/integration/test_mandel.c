/* The Mandelbrot demo's pieces (examples/mandel): the worker through the
 * real meshd (`mesh call mandel TILE`), checked against an escape-time loop
 * written here from the documented view, and the assembler on tiles made
 * that way: all present (a PNG), one missing, one twice. */
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#define SOCK "run/meshd.sock"
/* The documented geometry (examples/mandel/mandel.h), restated. */
#define W 1200
#define TW 80
#define TH 50
#define COLS 15
#define TILES 300
#define HDR 16

static char out[1 << 16];

/* catalog/mandel.toml, the example's own, and its binary. */
static void add_mandel(void)
{
	char path[4096];
	snprintf(path, sizeof path, "catalog/%s", mesh_target_triple());
	mkdir("catalog", 0755);
	mkdir(path, 0755);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp '%s' 'catalog/%s/mandel' && cp '%s' catalog/",
		       t_bin("examples/mandel/mandel"), mesh_target_triple(), t_src("examples/mandel/catalog/mandel.toml")),
		  0);
}

/* The reference: the escape-time count of pixel (x, y) mapped to 8 bits as
 * documented (255 inside, else floor(254 * sqrt(it / maxit))). */
static int ref_pixel(int x, int y, unsigned maxit)
{
	double cr = -2.25 + (x + 0.5) * (3.0 / W), ci = -1.25 + (y + 0.5) * (3.0 / W);
	double zr = 0, zi = 0;
	unsigned it;
	for (it = 0; it < maxit && zr * zr + zi * zi <= 4.0; it++) {
		double t = zr * zr - zi * zi + cr;
		zi = 2 * zr * zi + ci;
		zr = t;
	}
	return it >= maxit ? 255 : (int)(254.0 * sqrt((double)it / maxit));
}

/* `mesh call mandel REQ` into file; the bytes, their count in *n. */
static unsigned char *call_tile(const char *req, const char *file, size_t *n)
{
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' call mandel '%s' --socket " SOCK " > %s", t_bin("mesh"), req, file), 0);
	unsigned char *b = (unsigned char *)t_read_file(file, n);
	ASSERT_TRUE(b != NULL);
	return b;
}

static void check_tile(const unsigned char *b, size_t n, unsigned tile, unsigned maxit)
{
	ASSERT_EQ(n, HDR + TW * TH);
	EXPECT_EQ(memcmp(b, "MDL1", 4), 0);
	EXPECT_EQ(b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24, tile);
	EXPECT_EQ(b[8] | b[9] << 8, TW);
	EXPECT_EQ(b[10] | b[11] << 8, TH);
	EXPECT_EQ(b[12] | b[13] << 8, COLS);
	EXPECT_EQ(b[14] | b[15] << 8, TILES / COLS);
	int x0 = (int)(tile % COLS) * TW, y0 = (int)(tile / COLS) * TH;
	static const int pts[][2] = {{0, 0}, {79, 49}, {40, 25}, {13, 37}, {71, 3}};
	for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
		int x = pts[i][0], y = pts[i][1];
		int got = b[HDR + y * TW + x], want = ref_pixel(x0 + x, y0 + y, maxit);
		if (got != want)
			printf("tile %u pixel (%d,%d): %d, want %d\n", tile, x, y, got, want);
		EXPECT_EQ(got, want);
	}
}

TEST_TIMEOUT(mandel_worker_renders_tiles, 30)
{
	add_mandel();
	pid_t pid = meshd_t_start(.args = "--log-level warn", .wait_accept = 1);
	size_t n;
	/* Tile 144 holds c = -0.25125 - 0.00125i (its last pixel), inside the main cardioid. */
	unsigned char *b = call_tile("144", "t144", &n);
	check_tile(b, n, 144, 255);
	EXPECT_EQ(b[HDR + 49 * TW + 79], 255);
	free(b);
	/* A corner tile is all outside: nothing is 255. */
	b = call_tile("0", "t0", &n);
	check_tile(b, n, 0, 255);
	EXPECT_TRUE(memchr(b + HDR, 255, TW * TH) == NULL);
	free(b);
	/* With its own iteration bound. */
	b = call_tile("17 1000", "t17", &n);
	check_tile(b, n, 17, 1000);
	free(b);
	/* A bad request is the handler's error, with the reason. */
	EXPECT_NE(t_sh(out, sizeof out, 1, "'%s' call mandel 300 --socket " SOCK, t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "a request is 'TILE'");
	EXPECT_NE(t_sh(out, sizeof out, 1, "'%s' call mandel '5 x' --socket " SOCK, t_bin("mesh")), 0);
	EXPECT_GE(meshd_t_stop(pid), 0);
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

TEST_TIMEOUT(mandel_assembler_needs_every_tile_once, 180)
{
	add_mandel();
	pid_t pid = meshd_t_start(.args = "--log-level warn", .wait_accept = 1);
	/* All 300 tiles, the way `mesh results` will print them: replies
	 * concatenated in tile order.  Four calls at a time: 300 `mesh`
	 * processes one after another took over 60 s under ASan at load 9. */
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "seq 0 %d | xargs -P 4 -I{} sh -c \"'%s' call mandel '{} 64' --socket " SOCK " > t.{}\" &&"
		       " for i in $(seq 0 %d); do cat t.$i; done > all.bin",
		       TILES - 1, t_bin("mesh"), TILES - 1),
		  0);
	EXPECT_GE(meshd_t_stop(pid), 0);
	const char *as = t_bin("examples/mandel/assemble");
	size_t one = HDR + TW * TH;

	/* Every tile once, in any order: a PNG of the whole image. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "tail -c +%zu all.bin > rot.bin && head -c %zu all.bin >> rot.bin",
		       one * 7 + 1, one * 7),
		  0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' < rot.bin > m.png", as), 0);
	size_t n;
	unsigned char *png = (unsigned char *)t_read_file("m.png", &n);
	ASSERT_TRUE(png != NULL && n > 33);
	EXPECT_EQ(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0);
	EXPECT_EQ(be32(png + 8), 13);
	EXPECT_EQ(memcmp(png + 12, "IHDR", 4), 0);
	EXPECT_EQ(be32(png + 16), 1200);
	EXPECT_EQ(be32(png + 20), 1000);
	EXPECT_EQ(png[24], 8); /* bit depth */
	EXPECT_EQ(png[25], 0); /* gray */
	EXPECT_EQ(be32(png + 29), (uint32_t)crc32(0, png + 12, 17));
	EXPECT_EQ(memcmp(png + n - 8, "IEND", 4), 0);
	free(png);
	/* -o writes the same file. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' -o o.png < all.bin && cmp o.png m.png", as), 0);

	/* One tile missing (the 42nd reply dropped): refused, and named. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "head -c %zu all.bin > miss.bin && tail -c +%zu all.bin >> miss.bin",
		       one * 42, one * 43 + 1),
		  0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' -o miss.png < miss.bin", as), 1);
	EXPECT_CONTAINS(out, "missing tiles: 42 (1 of 300 missing)");
	EXPECT_NE(access("miss.png", F_OK), 0);

	/* One tile twice: refused, and named. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp all.bin dup.bin && head -c %zu all.bin | tail -c %zu >> dup.bin",
		       one * 10, one),
		  0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' -o dup.png < dup.bin", as), 1);
	EXPECT_CONTAINS(out, "tile 9 appears more than once");
	EXPECT_NE(access("dup.png", F_OK), 0);

	/* A cut reply and a foreign one. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "head -c %zu all.bin | '%s' -o cut.png", one + 100, as), 1);
	EXPECT_CONTAINS(out, "cut short");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "printf 'hello, this is not a tile' | '%s' -o x.png", as), 1);
	EXPECT_CONTAINS(out, "not a tile");
}
