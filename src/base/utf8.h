/* UTF-8 for text that leaves mesh as JSON: worker output, crash reports,
 * handler messages, paths.  JSON strings must be valid UTF-8 (jansson
 * refuses anything else), and a worker may write any bytes. */
#ifndef MESH_BASE_UTF8_H
#define MESH_BASE_UTF8_H

#include <stddef.h>

/* The UTF-8 that replaces one invalid byte: U+FFFD REPLACEMENT CHARACTER. */
#define MESH_UTF8_REPLACEMENT "\xef\xbf\xbd"

/* The length of the valid UTF-8 prefix of s[0..n) (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF); n when all of it is valid. */
size_t mesh_utf8_valid_prefix(const char *s, size_t n);

/* A malloc'd, NUL-terminated copy of s[0..n) that is valid UTF-8: each byte
 * that does not start a valid sequence (a Latin-1 byte, a character cut in
 * the middle, a stray continuation byte) becomes U+FFFD; a NUL byte becomes
 * U+FFFD too, so the copy is one C string.  Valid text is copied as is.
 * NULL when out of memory; *out_len (when not NULL) gets its length. */
char *mesh_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif
