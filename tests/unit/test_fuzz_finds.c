/* Regression tests for what the fuzz targets of tests/fuzz/ found. */
#include "base/err.h"
#include "exec/template.h"
#include "http/http.h"
#include "job/home.h"
#include "runner/t.h"
#include "store/store_pg.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fuzz_pg_url: a "password=" whose value is shorter than "***", near the
 * end of the buffer, grew the string past cap. */
TEST(fuzz_find_pg_url_safe_short_password)
{
	static const char *urls[] = {"postgres://db/x?user=u&password=", "postgres://db/x?password=a",
				     "postgres://db/x?password=ab&x=1", "postgres://u:pw@db/x?password="};
	for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
		size_t len = strlen(urls[i]);
		for (size_t cap = 1; cap <= len + 4; cap++) {
			char mem[128];
			memset(mem, 'Z', sizeof mem);
			mesh_pg_url_safe(urls[i], mem, cap);
			for (size_t k = cap; k < sizeof mem; k++)
				ASSERT_EQ(mem[k], 'Z'); /* nothing written past cap */
			ASSERT_LT(strlen(mem), cap);
		}
	}
	/* what fits is still hidden the same way */
	char buf[128];
	mesh_pg_url_safe("postgres://db/x?user=u&password=", buf, sizeof buf);
	EXPECT_STREQ(buf, "postgres://db/x?user=u&password=***");
	mesh_pg_url_safe("postgres://db/x?password=secret&sslmode=disable", buf, sizeof buf);
	EXPECT_STREQ(buf, "postgres://db/x?password=***&sslmode=disable");
	mesh_pg_url_safe("postgres://db/x?password=", buf, 28);
	EXPECT_STREQ(buf, "postgres://db/x?password=**");
}

/* fuzz_job_spec: a key given twice ("program", "name") leaked the first
 * value; the last one still wins (cut to the spec's length). */
TEST(fuzz_find_job_spec_duplicate_keys)
{
	char pad[4000];
	memset(pad, 'p', sizeof pad - 1);
	pad[sizeof pad - 1] = 0;
	size_t before = mallinfo2().uordblks;
	for (int i = 0; i < 200; i++) {
		struct mesh_home_spec sp;
		memset(&sp, 0, sizeof sp);
		char *text = NULL;
		ASSERT_GT(asprintf(&text, "program %s\nname %s\nprogram last\nchunks 2\nmax_workers 1\nretries 1\nname n2\n",
				   pad, pad),
			  0);
		ASSERT_EQ(mesh__home_spec_parse(&sp, text), 0);
		EXPECT_STREQ(sp.program, "last");
		EXPECT_STREQ(sp.name, "n2");
		free(text);
	}
	/* 200 x 2 x 4000 bytes would stay allocated by a leak */
	EXPECT_LT(mallinfo2().uordblks, before + 100000);
}

/* fuzz_http_response: a response whose bad status line began inside
 * max_head and ended past it was a protocol violation when its bytes came
 * together, "head too large" when they came one by one.  Now the framer
 * sees no byte past max_head: the same answer however the bytes are cut. */
static int feed_in_pieces(const char *d, size_t n, size_t piece, const struct mesh_http_limits *lim)
{
	struct mesh_http_response r;
	int rc = 0;
	mesh_http_response_init(&r, lim);
	for (size_t off = 0; rc == 0 && off < n; off += piece)
		rc = mesh_http_response_feed(&r, d + off, n - off < piece ? n - off : piece, NULL);
	if (rc == 0)
		rc = mesh_http_response_eof(&r);
	mesh_http_response_release(&r);
	return rc;
}
TEST(fuzz_find_http_response_head_limit_before_a_line_past_it)
{
	const struct mesh_http_limits lim = {64, 4, 64, 128};
	char d[256];
	/* an interim head (27 bytes), then a status line over the 64-byte head
	 * limit that has a bare LF after byte 64 */
	int n = snprintf(d, sizeof d, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK and a long reason phrase\nX: y\r\n\r\n");
	ASSERT_GT(n, 64);
	for (size_t piece = 1; piece <= (size_t)n; piece++)
		ASSERT_EQ(feed_in_pieces(d, (size_t)n, piece, &lim), MESH_E_TOOBIG);
}

/* fuzz_run_rpl: stacked quantifiers (Perl's possessive x++, undefined in
 * POSIX) and repeats inside repeats made glibc's regcomp copy the pattern
 * 2^depth times: 22 of them took over 2 GB.  Refused now, each with its
 * reason, at once; what stays within the bound still compiles. */
TEST(fuzz_find_run_rpl_regex_that_repeats_past_memory)
{
	static const char *const refused[] = {
		"b/++++++++++++++++++++++^/.]+",
		"x++",
		"x*+",
		"x{2}+",
		"((((((((((((((((((((((x+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+",
		"(x{1000}){1000}",
		"x{,30000}",
		"+x",
		"(((((((((((((((((((((((((((((((((x)))))))))))))))))))))))))))))))))",
	};
	static const char *const kept[] = {
		"\\.[^/.]+$", "(x+)+", "\\d{4}-\\d{2}-\\d{2}", "[[:alpha:]]{3,5}x*", "(a|b){2,}c?", "x{10000}", "[]{]+",
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
		regex_t re;
		const char *why = NULL;
		EXPECT_EQ(mesh_exec_regcomp_perl(&re, refused[i], strlen(refused[i]), 0, &why), MESH_E_PARSE);
		EXPECT_TRUE(why && *why);
	}
	for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
		regex_t re;
		const char *why = NULL;
		int rc = mesh_exec_regcomp_perl(&re, kept[i], strlen(kept[i]), 0, &why);
		EXPECT_EQ(rc, 0);
		if (rc == 0)
			regfree(&re);
		else
			fprintf(stderr, "%s: %s\n", kept[i], why ? why : "?");
	}
}
