/* "Did you mean": the word of a list nearest to a mistyped one, and the
 * options a --help text names (the one list of options a command has is
 * the text its --help prints). */
#ifndef MESH_BASE_NEAR_H
#define MESH_BASE_NEAR_H

#include <stddef.h>

struct mesh_buf;

/* Edit distance of a and b (insert, delete, replace, swap of neighbours)
 * for short words (under 40 bytes); 4 stands for anything above 3. */
unsigned mesh_edit_distance(const char *a, const char *b);
/* A set of words in a buffer, each followed by a space: appends word (n
 * bytes) unless the set has it. */
void mesh_word_set_add(struct mesh_buf *set, const char *word, size_t n);
/* Appends to opts each option the help text names ("--name", "-x": a word
 * that starts so after a space, '[', '|', '(' or ','), each once and each
 * followed by a space.  0, or -1 without memory. */
int mesh_help_options(const char *text, struct mesh_buf *opts);
/* The option of help text nearest to opt (which may carry "=value"): one
 * that starts with it (4 bytes or more) or within 2 edits (3 for words over
 * 4 bytes); one-letter options are never offered.  Into buf (cap bytes);
 * buf, or NULL when none or a tie. */
const char *mesh_help_nearest_option(const char *text, const char *opt, char *buf, size_t cap);

#endif
