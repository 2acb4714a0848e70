/* GNU parallel's argument sources (exec/input.h) and replacement strings
 * (exec/template.h), without processes. */
#include "base/buf.h"
#include "base/err.h"
#include "exec/input.h"
#include "exec/template.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(run_args_list_split)
{
	struct mesh_exec_list l;
	uint64_t bad = 0;
	ASSERT_EQ(mesh_exec_list_split(&l, "a\nb\n\nc", 6, '\n', &bad), 0);
	EXPECT_UEQ(l.n, 4);
	EXPECT_STREQ(l.data + l.start[2], "");
	EXPECT_STREQ(l.data + l.start[3], "c");
	mesh_exec_list_release(&l);
	ASSERT_EQ(mesh_exec_list_split(&l, "x y\0z\n\0", 7, 0, &bad), 0);
	EXPECT_UEQ(l.n, 2);
	EXPECT_STREQ(l.data + l.start[1], "z\n");
	mesh_exec_list_release(&l);
	EXPECT_EQ(mesh_exec_list_split(&l, "ok\nb\0d", 6, '\n', &bad), MESH_E_PARSE);
	EXPECT_UEQ(bad, 2);
	mesh_exec_list_release(&l);
	ASSERT_EQ(mesh_exec_list_split(&l, "", 0, '\n', &bad), 0);
	EXPECT_UEQ(l.n, 0);
	mesh_exec_list_release(&l);
}

static void list(struct mesh_exec_list *l, const char *words)
{
	ASSERT_EQ(mesh_exec_list_split(l, words, strlen(words), ' ', NULL), 0);
}

TEST(run_args_cross_product_linked_and_colsep)
{
	struct mesh_exec_list a, b, c;
	struct mesh_exec_input in;
	list(&a, "x y");
	list(&b, "1 2 3");
	list(&c, "p,q r");
	struct mesh_exec_source cross[] = {{&a, 0}, {&b, 0}}, linked[] = {{&a, 0}, {&b, 1}}, cols[] = {{&c, 0}};
	ASSERT_EQ(mesh_exec_input_combine(&in, cross, 2, NULL), 0);
	ASSERT_UEQ(in.n, 6);
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, NULL), "x 1");
	EXPECT_STREQ(mesh_exec_input_line(&in, 2, NULL), "x 3");
	EXPECT_STREQ(mesh_exec_input_line(&in, 3, NULL), "y 1");
	EXPECT_TRUE(mesh_exec_input_line(&in, 6, NULL) == NULL);
	uint64_t h = in.hash;
	mesh_exec_input_release(&in);
	ASSERT_EQ(mesh_exec_input_combine(&in, linked, 2, NULL), 0);
	ASSERT_UEQ(in.n, 2); /* as long as the shorter */
	EXPECT_STREQ(mesh_exec_input_line(&in, 1, NULL), "y 2");
	EXPECT_NE(in.hash, h);
	mesh_exec_input_release(&in);

	regex_t re;
	ASSERT_EQ(regcomp(&re, ",", REG_EXTENDED), 0);
	ASSERT_EQ(mesh_exec_input_combine(&in, cols, 1, &re), 0);
	const char *v[MESH_EXEC_INPUT_MAX_ARGS];
	size_t n;
	ASSERT_EQ(mesh_exec_input_values(&in, 0, v, &n), 0);
	EXPECT_UEQ(n, 1);
	EXPECT_STREQ(v[0], "p,q");
	ASSERT_EQ(mesh_exec_input_args(&in, 0, v, &n), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_STREQ(v[1], "q");
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, NULL), "p q");
	EXPECT_EQ(mesh_exec_input_args(&in, 2, v, &n), MESH_E_RANGE);
	mesh_exec_input_release(&in);
	regfree(&re);

	/* among several sources one without records is one empty record, as
	 * GNU parallel's `::: x y :::` runs twice; all of them empty: none */
	struct mesh_exec_list e;
	ASSERT_EQ(mesh_exec_list_split(&e, "", 0, '\n', NULL), 0);
	struct mesh_exec_source none[] = {{&a, 0}, {&e, 0}}, first[] = {{&e, 0}, {&a, 0}}, all[] = {{&e, 0}, {&e, 0}},
				one[] = {{&e, 0}}, link_none[] = {{&a, 0}, {&e, 1}};
	ASSERT_EQ(mesh_exec_input_combine(&in, none, 2, NULL), 0);
	ASSERT_UEQ(in.n, 2);
	EXPECT_STREQ(mesh_exec_input_line(&in, 1, NULL), "y ");
	ASSERT_EQ(mesh_exec_input_args(&in, 1, v, &n), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_STREQ(v[1], "");
	mesh_exec_input_release(&in);
	ASSERT_EQ(mesh_exec_input_combine(&in, first, 2, NULL), 0);
	ASSERT_UEQ(in.n, 2);
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, NULL), " x");
	mesh_exec_input_release(&in);
	ASSERT_EQ(mesh_exec_input_combine(&in, link_none, 2, NULL), 0);
	EXPECT_UEQ(in.n, 1); /* paired with one empty record */
	mesh_exec_input_release(&in);
	ASSERT_EQ(mesh_exec_input_combine(&in, all, 2, NULL), 0);
	EXPECT_UEQ(in.n, 0);
	mesh_exec_input_release(&in);
	ASSERT_EQ(mesh_exec_input_combine(&in, one, 1, NULL), 0);
	EXPECT_UEQ(in.n, 0);
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&e);

	/* --link: as long as the longest, the shorter one starting over */
	struct mesh_exec_source wrap[] = {{&a, 0}, {&b, 2}};
	ASSERT_EQ(mesh_exec_input_combine(&in, wrap, 2, NULL), 0);
	ASSERT_UEQ(in.n, 3);
	EXPECT_STREQ(mesh_exec_input_line(&in, 2, NULL), "x 3");
	mesh_exec_input_release(&in);

	/* --colsep: columns without the white space around them */
	struct mesh_exec_list sp;
	list(&sp, "_a_,_b_");
	for (char *q = sp.data; q < sp.data + 8; q++)
		if (*q == '_')
			*q = ' ';
	struct mesh_exec_source spaced[] = {{&sp, 0}};
	regcomp(&re, ",", REG_EXTENDED);
	ASSERT_EQ(mesh_exec_input_combine(&in, spaced, 1, &re), 0);
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, NULL), "a b");
	EXPECT_TRUE(in.cols);
	mesh_exec_input_release(&in);
	regfree(&re);
	mesh_exec_list_release(&sp);

	/* too many columns */
	char many[2 * MESH_EXEC_INPUT_MAX_ARGS + 8];
	memset(many, ',', sizeof many - 1);
	many[sizeof many - 1] = 0;
	for (size_t i = 0; i + 1 < sizeof many; i += 2)
		many[i] = 'a';
	ASSERT_EQ(mesh_exec_list_split(&e, many, strlen(many), '\n', NULL), 0);
	struct mesh_exec_source wide[] = {{&e, 0}};
	regcomp(&re, ",", REG_EXTENDED);
	EXPECT_EQ(mesh_exec_input_combine(&in, wide, 1, &re), MESH_E_TOOBIG);
	mesh_exec_input_release(&in);
	regfree(&re);
	mesh_exec_list_release(&e);
	mesh_exec_list_release(&a);
	mesh_exec_list_release(&b);
	mesh_exec_list_release(&c);
}

static void join(char **av, char *out, size_t cap)
{
	out[0] = 0;
	for (size_t i = 0; av[i]; i++) {
		strncat(out, i ? "|" : "", cap - strlen(out) - 1);
		strncat(out, av[i], cap - strlen(out) - 1);
	}
}

TEST(run_args_replacement_strings)
{
	static const struct {
		const char *argv[6];
		const char *src1, *src2; /* space-separated records; NULL: none */
		uint64_t cid;
		const char *want;
	} rows[] = {
		{{"e", "{.}", "{/}", "{//}", NULL}, "d/a.b.c", NULL, 0, "e|d/a.b|a.b.c|d"},
		{{"e", "{/.}", "{//}", "{.}", NULL}, "/x", NULL, 0, "e|x|/|/x"},
		{{"e", "{//}", "{.}", NULL}, "a", NULL, 0, "e|.|a"},
		{{"e", "{.}", NULL}, "d.x/a", NULL, 0, "e|d.x/a"},
		{{"e", "{#}", "{%}", NULL}, "a b", NULL, 1, "e|2|3"},
		{{"e", NULL}, "a", "1 2", 1, "e|a|2"},
		{{"e", "{}", NULL}, "a", "1", 0, "e|a|1"},	   /* whole: one argument per value */
		{{"e", "<{}>", NULL}, "a", "1", 0, "e|<a 1>"},	   /* inside: joined by spaces */
		{{"e", "{2}{1}", "{2/}", "{1.}", NULL}, "a.x", "p/q", 0, "e|p/qa.x|q|a"},
		{{"e", "{3}", "{1}", NULL}, "a", "b", 0, "e|a"},	   /* past the arguments: gone */
		{{"e", "x{3}y", NULL}, "a", NULL, 0, "e|xy"},
		{{"e", "{x}", "{ }", "{0}", "{", NULL}, "a", NULL, 0, "e|{x}|{ }|{0}|{|a"}, /* none: appended */
		{{"/bin/sh", "-c", "echo {}", NULL}, "a'b c", NULL, 0, "/bin/sh|-c|echo 'a'\"'\"'b c'"},
		{{"/bin/sh", "-c", "echo", NULL}, "a", NULL, 0, "/bin/sh|-c|echo a"},
		{{"/bin/sh", "-c", "{}", NULL}, "ls;", NULL, 0, "/bin/sh|-c|ls;"}, /* the line is the command */
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_exec_list l1, l2;
		struct mesh_exec_input in;
		struct mesh_exec_template t;
		struct mesh_buf b = MESH_BUF_INIT;
		char got[256];
		ASSERT_EQ(mesh_exec_list_split(&l1, rows[i].src1, strlen(rows[i].src1), '\n', NULL), 0);
		if (strchr(rows[i].src1, ' ') && rows[i].cid) { /* a list of records */
			mesh_exec_list_release(&l1);
			list(&l1, rows[i].src1);
		}
		struct mesh_exec_source src[2] = {{&l1, 0}, {&l2, 0}};
		if (rows[i].src2)
			list(&l2, rows[i].src2);
		ASSERT_EQ(mesh_exec_input_combine(&in, src, rows[i].src2 ? 2 : 1, NULL), 0);
		ASSERT_EQ(mesh_exec_template_init(&t, (char *const *)rows[i].argv), 0);
		char **av = calloc(mesh_exec_template_slots(&t), sizeof *av);
		ASSERT_EQ(mesh_exec_template_expand(&t, &in, rows[i].cid, 3, &b, av), 0);
		join(av, got, sizeof got);
		EXPECT_STREQ(got, rows[i].want);
		EXPECT_EQ(mesh_exec_template_expand(&t, &in, in.n, 3, &b, av), MESH_E_RANGE);
		free(av);
		mesh_buf_release(&b);
		mesh_exec_template_release(&t);
		mesh_exec_input_release(&in);
		mesh_exec_list_release(&l1);
		if (rows[i].src2)
			mesh_exec_list_release(&l2);
	}
}

/* The command line of grouped chunk cid of input "words" (one source,
 * regrouped with per / max_bytes), with -X's context when context is set. */
static int grouped(const char *words, uint64_t per, size_t max_bytes, int context, const char *const *argv, uint64_t cid,
		   char *out, size_t cap, uint64_t *n, uint64_t *hash_before, uint64_t *hash_after)
{
	struct mesh_exec_list l;
	struct mesh_exec_input in;
	struct mesh_exec_template t;
	struct mesh_buf b = MESH_BUF_INIT;
	struct mesh_exec_source src[1] = {{&l, 0}};
	list(&l, words);
	int rc = mesh_exec_input_combine(&in, src, 1, NULL);
	if (hash_before)
		*hash_before = in.hash;
	if (rc == 0)
		rc = mesh_exec_input_group(&in, NULL, per, max_bytes);
	in.context = context;
	*n = in.n;
	if (hash_after)
		*hash_after = in.hash;
	if (rc == 0 && argv) {
		ASSERT_EQ(mesh_exec_template_init(&t, (char *const *)argv), 0);
		char **av = calloc(mesh_exec_template_slots(&t), sizeof *av);
		rc = mesh_exec_template_expand(&t, &in, cid, 1, &b, av);
		if (rc == 0)
			join(av, out, cap);
		free(av);
		mesh_exec_template_release(&t);
	}
	mesh_buf_release(&b);
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&l);
	return rc;
}

/* -N 2: chunks of two records, the last shorter; {} every value, {n}
 * the n-th; the boundaries are part of the input's identity. */
TEST(run_args_group_fixed_count)
{
	char got[512];
	uint64_t n, h0, h1;
	const char *const pos[] = {"e", "{}", "/", "{1}", "{2}", NULL};
	ASSERT_EQ(grouped("a b c d e", 2, 0, 0, pos, 0, got, sizeof got, &n, &h0, &h1), 0);
	EXPECT_UEQ(n, 3);
	EXPECT_STREQ(got, "e|a|b|/|a|b");
	EXPECT_NE(h0, h1);
	ASSERT_EQ(grouped("a b c d e", 2, 0, 0, pos, 2, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_STREQ(got, "e|e|/|e"); /* {2} past the last record: gone */
	const char *const inside[] = {"e", "<{}>", NULL};
	ASSERT_EQ(grouped("a b c", 3, 0, 0, inside, 0, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_UEQ(n, 1);
	EXPECT_STREQ(got, "e|<a b c>");
	/* one record a group is still another input than no grouping */
	ASSERT_EQ(grouped("a b", 1, 0, 0, NULL, 0, got, sizeof got, &n, &h0, &h1), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_NE(h0, h1);
}

/* -m / --xargs: as many as fit, bounded by bytes and by the argument cap;
 * a fixed -N past the cap is refused and leaves the input alone. */
TEST(run_args_group_bounded)
{
	char got[512];
	uint64_t n;
	const char *const app[] = {"e", NULL};
	/* "aa bb cc dd": 5 bytes fit two records ("aa bb"), not three */
	ASSERT_EQ(grouped("aa bb cc dd", 0, 5, 0, app, 1, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_STREQ(got, "e|cc|dd");
	/* a record longer than the bound alone stays alone */
	ASSERT_EQ(grouped("toolong x", 0, 3, 0, app, 0, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_STREQ(got, "e|toolong");
	/* the argument cap: MAX + 1 records make two chunks, or TOOBIG at -N */
	size_t cap = MESH_EXEC_INPUT_MAX_ARGS + 1;
	char *many = malloc(cap * 2 + 1);
	ASSERT_TRUE(many != NULL);
	for (size_t i = 0; i < cap; i++)
		many[2 * i] = 'x', many[2 * i + 1] = ' ';
	many[2 * cap - 1] = 0;
	ASSERT_EQ(grouped(many, 0, 0, 0, app, 1, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_UEQ(n, 2);
	EXPECT_STREQ(got, "e|x");
	struct mesh_exec_list l;
	struct mesh_exec_input in;
	struct mesh_exec_source src[1] = {{&l, 0}};
	list(&l, many);
	ASSERT_EQ(mesh_exec_input_combine(&in, src, 1, NULL), 0);
	EXPECT_EQ(mesh_exec_input_group(&in, NULL, cap, 0), MESH_E_TOOBIG);
	EXPECT_UEQ(in.n, cap); /* unchanged */
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&l);
	free(many);
}

/* -X: a longer argument holding {} is repeated once a value; in a shell
 * script each blank-separated word holding one is. */
TEST(run_args_group_context_replace)
{
	char got[512];
	uint64_t n;
	const char *const argv[] = {"e", "p{}q", "{}", "{1}", "x{#}", NULL};
	ASSERT_EQ(grouped("a b c", 2, 0, 1, argv, 0, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_STREQ(got, "e|paq|pbq|a|b|a|x1");
	ASSERT_EQ(grouped("a b c", 2, 0, 0, argv, 0, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_STREQ(got, "e|pa bq|a|b|a|x1"); /* -m: joined */
	const char *const sh[] = {"/bin/sh", "-c", "cat  p{}q {1} 'x y'", NULL};
	ASSERT_EQ(grouped("a b c", 2, 0, 1, sh, 0, got, sizeof got, &n, NULL, NULL), 0);
	EXPECT_STREQ(got, "/bin/sh|-c|cat  paq pbq a 'x y'");
}

/* --pipe: blocks of whole records up to a byte bound (or -N records), no
 * bound on records a block; the block's standard input is its records,
 * each ended by the delimiter; the command sees no values. */
TEST(run_args_pipe_blocks)
{
	struct mesh_exec_list l;
	struct mesh_exec_input in;
	struct mesh_exec_source src[1] = {{&l, 0}};
	/* more records than a command could take as arguments */
	size_t n = MESH_EXEC_INPUT_MAX_ARGS + 10;
	char *text = malloc(n * 2 + 1);
	ASSERT_TRUE(text != NULL);
	for (size_t i = 0; i < n; i++)
		text[2 * i] = (char)('a' + i % 26), text[2 * i + 1] = '\n';
	ASSERT_EQ(mesh_exec_list_split(&l, text, n * 2, '\n', NULL), 0);
	ASSERT_EQ(mesh_exec_input_combine(&in, src, 1, NULL), 0);
	uint64_t h = in.hash;
	ASSERT_EQ(mesh_exec_input_blocks(&in, 0, 0, '\n'), 0);
	EXPECT_UEQ(in.n, 1); /* one block holds them all */
	EXPECT_NE(in.hash, h);
	int fd = mesh_exec_input_block_fd(&in, 0);
	ASSERT_GE(fd, 0);
	char *got = malloc(n * 2 + 16);
	ASSERT_TRUE(got != NULL);
	ssize_t r = read(fd, got, n * 2 + 16);
	EXPECT_EQ(r, (ssize_t)(n * 2));
	EXPECT_TRUE(r > 0 && !memcmp(got, text, n * 2));
	close(fd);
	EXPECT_EQ(mesh_exec_input_block_fd(&in, 1), MESH_E_RANGE);
	mesh_exec_input_release(&in);

	/* bytes: "a\nb\n..." is 2 bytes a record: 5 bytes hold two records */
	ASSERT_EQ(mesh_exec_input_combine(&in, src, 1, NULL), 0);
	ASSERT_EQ(mesh_exec_input_blocks(&in, 0, 5, '\n'), 0);
	EXPECT_UEQ(in.n, (n + 1) / 2);
	fd = mesh_exec_input_block_fd(&in, 1);
	ASSERT_GE(fd, 0);
	r = read(fd, got, 16);
	EXPECT_EQ(r, 4);
	EXPECT_TRUE(r == 4 && !memcmp(got, "c\nd\n", 4));
	close(fd);
	/* the command sees no values: nothing appended, {} empty */
	const char *const argv[] = {"wc", "-l", "<{}>", NULL};
	struct mesh_exec_template t;
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(mesh_exec_template_init(&t, (char *const *)argv), 0);
	char **av = calloc(mesh_exec_template_slots(&t), sizeof *av), line[256];
	ASSERT_EQ(mesh_exec_template_expand(&t, &in, 0, 1, &b, av), 0);
	join(av, line, sizeof line);
	EXPECT_STREQ(line, "wc|-l|<>");
	free(av);
	mesh_buf_release(&b);
	mesh_exec_template_release(&t);
	mesh_exec_input_release(&in);

	/* -N 3: three records a block, the last shorter */
	ASSERT_EQ(mesh_exec_input_combine(&in, src, 1, NULL), 0);
	ASSERT_EQ(mesh_exec_input_blocks(&in, 3, 0, '\n'), 0);
	EXPECT_UEQ(in.n, (n + 2) / 3);
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&l);
	free(text);
	free(got);
}

/* Chunk cid of the records "words" (one source) through argv with the
 * table r (NULL: the built-in one): the argv joined by '|' (render 0), the
 * shell line (1) or the string (2). */
static void through(const char *const *argv, const struct mesh_exec_rpls *r, const char *words, uint64_t cid,
		    int render, char *out, size_t cap)
{
	struct mesh_exec_list l;
	struct mesh_exec_input in;
	struct mesh_exec_template t;
	struct mesh_buf b = MESH_BUF_INIT;
	struct mesh_exec_source src[1] = {{&l, 0}};
	ASSERT_EQ(mesh_exec_list_split(&l, words, strlen(words), '|', NULL), 0);
	ASSERT_EQ(mesh_exec_input_combine(&in, src, 1, NULL), 0);
	ASSERT_EQ(mesh_exec_template_init_rpls(&t, (char *const *)argv, r), 0);
	if (render == 0) {
		char **av = calloc(mesh_exec_template_slots(&t), sizeof *av);
		ASSERT_EQ(mesh_exec_template_expand(&t, &in, cid, 2, &b, av), 0);
		join(av, out, cap);
		free(av);
	} else {
		ASSERT_EQ(render == 1 ? mesh_exec_template_render(&t, &in, cid, 2, &b)
				      : mesh_exec_template_string(&t, &in, cid, 2, &b),
			  0);
		ASSERT_EQ(strlen(b.p), b.len);
		snprintf(out, cap, "%s", b.p);
	}
	mesh_buf_release(&b);
	mesh_exec_template_release(&t);
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&l);
}

/* GNU parallel's path strings: {//} is Perl's dirname, trailing slashes
 * first; {.} drops a last extension without '/', even an empty one. */
TEST(run_args_path_strings_as_gnu_parallel)
{
	static const struct {
		const char *value, *dir, *noext;
	} rows[] = {
		{"a/b/", "a", "a/b/"}, {"a/b.c/", "a", "a/b.c/"}, {"/", "/", "/"},   {"//", "/", "//"},
		{"a.b/", ".", "a.b/"}, {"a//b", "a", "a//b"},	   {"./", ".", "./"}, {"x", ".", "x"},
		{"a.", ".", "a"},      {".x", ".", ""},		   {"a/.x", "a", "a/"}, {"/a", "/", "/a"},
	};
	const char *argv[] = {"e", "{//}", "{.}", NULL};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char got[128], want[128];
		through(argv, NULL, rows[i].value, 0, 0, got, sizeof got);
		snprintf(want, sizeof want, "e|%s|%s", rows[i].dir, rows[i].noext);
		EXPECT_STREQ(got, want);
	}
}

/* Values quoted as GNU parallel quotes them; the command's own words only
 * where a shell would read them otherwise. */
TEST(run_args_render_quotes_as_gnu_parallel)
{
	static const struct {
		const char *value, *want;
	} q[] = {
		{"abc-_.+/9", "abc-_.+/9"}, {"", "''"},	       {"a b", "'a b'"},	 {"'", "\"'\""},
		{"a'", "'a'\"'\""},	    {"'a", "\"'\"'a'"}, {"a'b", "'a'\"'\"'b'"}, {"a=b", "'a=b'"},
		{"{}", "'{}'"},		    {"x,y", "'x,y'"},
	};
	for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
		struct mesh_buf b = MESH_BUF_INIT;
		ASSERT_EQ(mesh_exec_quote(&b, q[i].value, strlen(q[i].value)), 0);
		ASSERT_EQ(mesh_buf_add(&b, "", 1), 0);
		EXPECT_STREQ(b.p, q[i].want);
		mesh_buf_release(&b);
	}
	static const struct {
		const char *argv[5];
		const char *words, *want;
	} rows[] = {
		{{"echo", "{}", "x", NULL}, "a b", "echo 'a b' x"},
		{{"echo", "pre{}post", NULL}, "a b", "echo pre'a b'post"},
		{{"echo", "$x{}", "a;b", NULL}, "c d", "echo '$xc d' 'a;b'"}, /* mesh runs them without a shell */
		{{"echo", NULL}, "a'b", "echo 'a'\"'\"'b'"},
		{{"echo", "{2}", "{1}", NULL}, "a", "echo  a"}, /* past the arguments: an empty word, as GNU parallel */
		{{"/bin/sh", "-c", "echo {} | wc", NULL}, "a b", "echo 'a b' | wc"},
		{{"/bin/sh", "-c", "{} | wc", NULL}, "ls /", "ls / | wc"}, /* a string starting the line: as it is */
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char got[256];
		through(rows[i].argv, NULL, rows[i].words, 0, 1, got, sizeof got);
		EXPECT_STREQ(got, rows[i].want);
	}
	/* a string: no quoting, nothing appended (--tagstring) */
	const char *tag[] = {"<{}>{#}", NULL}, *plain[] = {"X", NULL};
	char got[64];
	through(tag, NULL, "a b", 0, 2, got, sizeof got);
	EXPECT_STREQ(got, "<a b>1");
	through(plain, NULL, "a", 0, 2, got, sizeof got);
	EXPECT_STREQ(got, "X");
}

/* -I and its kin rename the built-in strings; --rpl defines strings in
 * mesh's part of Perl and refuses the rest, saying what. */
TEST(run_args_replacement_string_table)
{
	struct mesh_exec_rpls r;
	const char *why = NULL;
	char got[512];
	ASSERT_EQ(mesh_exec_rpls_init(&r), 0);
	ASSERT_EQ(mesh_exec_rpls_rename(&r, MESH_EXEC_RPL_VALUE, ",,"), 0);
	ASSERT_EQ(mesh_exec_rpls_rename(&r, MESH_EXEC_RPL_NOEXT, "{x}"), 0);
	EXPECT_EQ(mesh_exec_rpls_rename(&r, MESH_EXEC_RPL_SEQ, ""), MESH_E_PARSE);
	static const char *defs[] = {
		"{..} s:\\.[^/.]+\\.[^/.]+$::",
		"{u} $_ = uc",
		"{sw} s/(\\w+)-(\\w+)/$2-$1/",
		"{g} s/A/x/gi",
		"{or} s/q/Q/ || s/.*/none/",
		"{tr} tr/a-c/A-C/; s/^/[/",
		"{n} 1 $_=$job->seq()",
		"{t} $_=total_jobs()",
		"{e} s/z*//g",
	};
	for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
		int rc = mesh_exec_rpls_define(&r, defs[i], &why);
		EXPECT_EQ(rc, 0);
		if (rc)
			fprintf(stderr, "%s: %s\n", defs[i], why);
	}
	const char *argv[] = {"e", ",,", "{}", "{1}", "{x}", "{1x}", "{..}", "{u}", "{sw}", "{g}", "{or}", "{tr}",
			      "{n}", "{t}", "{e}", NULL};
	through(argv, &r, "ab-cd.tar.gz|aAq", 0, 0, got, sizeof got);
	EXPECT_STREQ(got, "e|ab-cd.tar.gz|{}|{1}|ab-cd.tar|ab-cd.tar|ab-cd|AB-CD.TAR.GZ|cd-ab.tar.gz|xb-cd.txr.gz|none|"
			  "[AB-Cd.tAr.gz|1|2|ab-cd.tar.g");
	through(argv, &r, "ab-cd.tar.gz|aAq", 1, 0, got, sizeof got);
	EXPECT_STREQ(got, "e|aAq|{}|{1}|aAq|aAq|aAq|AAQ|aAq|xxq|aAQ|[AAq|2|2|aAq");
	EXPECT_TRUE(mesh_exec_rpls_starts(&r, ",, x"));
	EXPECT_FALSE(mesh_exec_rpls_starts(&r, "{} x"));
	EXPECT_FALSE(mesh_exec_rpls_starts(NULL, "x{}"));
	static const char *bad[] = {
		"{a}", "{a} system('x')", "{a} s/x*?//", "{a} s/(?i)x//", "{a} s/x/$y/", "{a} s/x/y/e",
		"{a} s{x}{y}", "{a} s/x/y", "{a} s/\\bx//", "{a} 0 s/x//", "{a} s/x// s/y//", "{a} tr/b-a//",
		"{a} s/x//; ||",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why = NULL;
		EXPECT_EQ(mesh_exec_rpls_define(&r, bad[i], &why), i == 0 ? 0 : MESH_E_PARSE);
		EXPECT_TRUE(i == 0 || (why && *why));
	}
	mesh_exec_rpls_release(&r);
}
