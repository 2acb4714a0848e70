/* A strict parser for the subset of TOML that manifests use.
 *
 * Accepted: comments (`# ...`, also after a value), `[table]` headers with a
 * bare name or bare names joined by dots (`[filters.defaults]`: the table
 * "filters.defaults"), `key = value` lines with bare keys ([A-Za-z0-9_-]+), and values
 * that are basic strings ("..." with \" \\ \b \t \n \f \r \uXXXX \UXXXXXXXX),
 * literal strings ('...'), decimal integers (optional sign, `_` between
 * digits, no leading zeros), floats (such an integer, then `.digits` and/or
 * an exponent `e[+-]digits`; finite as a double: no inf or nan), booleans,
 * and arrays of strings (which may span lines, with a trailing comma and
 * comments inside).  Everything else -- dates, inline tables, dotted keys, arrays of tables, multi-line
 * strings, a duplicate key or table, a NUL, invalid UTF-8 -- is an error
 * "file:line:col: message" (1-based line and byte column). */
#ifndef MESH_HOST_TOML_H
#define MESH_HOST_TOML_H

#include <stddef.h>
#include <stdint.h>

enum mesh_toml_type { MESH_TOML_TABLE, MESH_TOML_STRING, MESH_TOML_INT, MESH_TOML_BOOL, MESH_TOML_ARRAY, MESH_TOML_FLOAT };

/* One `[table]` header (type TABLE, key NULL) or one key with its value. */
struct mesh_toml_item {
	enum mesh_toml_type type;
	char *table;	/* "" for the top level */
	char *key;	/* NULL for a TABLE item */
	char *str;	/* STRING: the decoded text (no NUL inside) */
	int64_t i;	/* INT */
	double f;	/* FLOAT */
	int b;		/* BOOL */
	char **arr;	/* ARRAY: n decoded strings */
	size_t n;
	unsigned line, col;   /* where the key (or the header) starts */
	unsigned vline, vcol; /* where the value starts */
};

struct mesh_toml {
	struct mesh_toml_item *items;
	size_t n;
};
#define MESH_TOML_INIT {NULL, 0}

/* Parses len bytes of text (need not be NUL-terminated); file names the
 * source in messages.  0, or MESH_E_PARSE with *err a malloc'd
 * "file:line:col: message" (caller frees), or -ENOMEM.  On error *out is
 * left empty.  Release a parsed document with mesh_toml_release. */
int mesh_toml_parse(const char *file, const char *text, size_t len, struct mesh_toml *out, char **err);
void mesh_toml_release(struct mesh_toml *t);

/* "string", "integer", "float", "boolean", "array", "table". */
const char *mesh_toml_type_name(enum mesh_toml_type t);

#endif
