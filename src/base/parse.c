#include "base/parse.h"

#include "base/err.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int mesh_parse_u64n(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0)
		return MESH_E_PARSE;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return MESH_E_PARSE;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return MESH_E_RANGE;
		v = v * 10 + d;
	}
	if (v > max)
		return MESH_E_RANGE;
	*out = v;
	return 0;
}

int mesh_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	if (!s)
		return MESH_E_PARSE;
	return mesh_parse_u64n(s, strlen(s), max, out);
}

int mesh_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	uint64_t mag;
	int neg = 0, rc;
	if (!s)
		return MESH_E_PARSE;
	if (*s == '-') {
		neg = 1;
		s++;
	}
	rc = mesh_parse_u64(s, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag);
	if (rc)
		return rc;
	int64_t v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
	if (v < min || v > max)
		return MESH_E_RANGE;
	*out = v;
	return 0;
}

int mesh_parse_seconds(const char *s, uint64_t max_ns, uint64_t *out_ns)
{
	const char *dot;
	uint64_t whole, frac = 0;
	size_t fl = 0;
	int rc;
	if (!s)
		return MESH_E_PARSE;
	dot = strchr(s, '.');
	rc = mesh_parse_u64n(s, dot ? (size_t)(dot - s) : strlen(s), UINT64_MAX / 1000000000ull, &whole);
	if (rc)
		return rc;
	if (dot) {
		fl = strlen(dot + 1);
		if (fl == 0 || fl > 9)
			return MESH_E_PARSE;
		rc = mesh_parse_u64n(dot + 1, fl, UINT64_MAX, &frac);
		if (rc)
			return rc;
		for (size_t i = fl; i < 9; i++)
			frac *= 10;
	}
	uint64_t ns = whole * 1000000000ull;
	if (ns > UINT64_MAX - frac)
		return MESH_E_RANGE;
	ns += frac;
	if (ns > max_ns)
		return MESH_E_RANGE;
	*out_ns = ns;
	return 0;
}

int mesh_parse_size(const char *s, uint64_t max, uint64_t *out)
{
	size_t n;
	unsigned shift = 0;
	uint64_t v;
	int rc;
	if (!s || !(n = strlen(s)))
		return MESH_E_PARSE;
	switch (s[n - 1]) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	}
	if (shift)
		n--;
	rc = mesh_parse_u64n(s, n, UINT64_MAX >> shift, &v);
	if (rc)
		return rc;
	v <<= shift;
	if (v > max)
		return MESH_E_RANGE;
	*out = v;
	return 0;
}

int mesh_parse_duration(const char *s, uint64_t max_ns, uint64_t *out_ns)
{
	size_t n = s ? strlen(s) : 0;
	uint64_t mul;
	size_t ulen;
	if (n >= 2 && strcmp(s + n - 2, "ms") == 0)
		mul = 0, ulen = 2;
	else if (n >= 1 && s[n - 1] == 's')
		mul = 1, ulen = 1;
	else if (n >= 1 && s[n - 1] == 'm')
		mul = 60, ulen = 1;
	else if (n >= 1 && s[n - 1] == 'h')
		mul = 3600, ulen = 1;
	else if (n >= 1 && s[n - 1] == 'd')
		mul = 86400, ulen = 1;
	else
		mul = 1, ulen = 0; /* bare seconds */
	char num[32];
	if (n - ulen == 0 || n - ulen >= sizeof num)
		return MESH_E_PARSE;
	memcpy(num, s, n - ulen);
	num[n - ulen] = 0;
	uint64_t v;
	int rc = mesh_parse_seconds(num, UINT64_MAX, &v);
	if (rc)
		return rc;
	if (mul == 0) {
		if (v % 1000)
			return MESH_E_PARSE; /* finer than a nanosecond */
		v /= 1000;
	} else {
		if (v > UINT64_MAX / mul)
			return MESH_E_RANGE;
		v *= mul;
	}
	if (v > max_ns)
		return MESH_E_RANGE;
	*out_ns = v;
	return 0;
}

void mesh_say_duration(char *buf, size_t cap, uint64_t ns)
{
	uint64_t t = ns / (uint64_t)1000000000, h = t / 3600, m = t / 60 % 60, sec = t % 60;
	if (!cap)
		return;
	if (!t)
		snprintf(buf, cap, "%" PRIu64 " ms", ns / (uint64_t)1000000);
	else if (h)
		snprintf(buf, cap, m ? "%" PRIu64 " h %" PRIu64 " min" : "%" PRIu64 " h", h, m);
	else if (m)
		snprintf(buf, cap, sec ? "%" PRIu64 " min %" PRIu64 " s" : "%" PRIu64 " min", m, sec);
	else
		snprintf(buf, cap, "%" PRIu64 " s", sec);
}
