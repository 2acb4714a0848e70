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
		{{"/bin/sh", "-c", "echo {}", NULL}, "a'b c", NULL, 0, "/bin/sh|-c|echo 'a'\\''b c'"},
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
