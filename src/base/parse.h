/* Strict number parsing for everything that comes from a command line, a file
 * or a socket: the whole string must be the number; no sign where none is
 * allowed, no leading or trailing junk, no spaces, no overflow. */
#ifndef MESH_BASE_PARSE_H
#define MESH_BASE_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Decimal unsigned integer in [0, max].  0, -MESH_E_PARSE (not a number: "",
 * "12x", "-1", "+3", " 4") or -MESH_E_RANGE (> max or overflow). *out is
 * written only on success. */
int mesh_parse_u64(const char *s, uint64_t max, uint64_t *out);
/* Same for a signed value in [min, max] ("-" allowed, "+" not). */
int mesh_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* Seconds with up to 9 decimals ("2", "0.5", "1.25") into nanoseconds,
 * at most max_ns.  Same errors as mesh_parse_u64. */
int mesh_parse_seconds(const char *s, uint64_t max_ns, uint64_t *out_ns);
/* A duration, mesh's one grammar for them (every option, manifest key and
 * API parameter that takes a time): seconds as mesh_parse_seconds takes
 * them ("300", "0.5"), or with a unit, one of ms, s, m, h, d ("250ms",
 * "300s", "5m", "1.5h", "7d"), into nanoseconds, at most max_ns.  Same
 * errors as mesh_parse_u64. */
int mesh_parse_duration(const char *s, uint64_t max_ns, uint64_t *out_ns);
/* A duration as people read it, into buf (always terminated): "250 ms"
 * under a second, else whole seconds as "4 s", "5 min", "1 min 30 s",
 * "2 h 5 min" (the seconds of an hour or more dropped). */
void mesh_say_duration(char *buf, size_t cap, uint64_t ns);
/* A size with an optional K/M/G/T suffix (powers of 1024), e.g. "512M". */
int mesh_parse_size(const char *s, uint64_t max, uint64_t *out);
/* Like mesh_parse_u64 over the n bytes at s (not NUL-terminated). */
int mesh_parse_u64n(const char *s, size_t n, uint64_t max, uint64_t *out);

#endif
