#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

/* The length of the valid sequence at s[0..n) (1..4), or 0 if none starts there. */
static size_t seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

size_t mesh_utf8_valid_prefix(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, k;
	while (i < n && (k = seq_len(u + i, n - i)) > 0)
		i += k;
	return i;
}

char *mesh_utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
	const unsigned char *u = (const unsigned char *)s;
	/* At worst every byte becomes three. */
	if (n > (((size_t)-1) - 1) / 3)
		return NULL;
	char *out = malloc(n * 3 + 1);
	size_t o = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = seq_len(u + i, n - i);
		if (k == 0 || u[i] == 0) {
			memcpy(out + o, MESH_UTF8_REPLACEMENT, 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, k);
		o += k;
		i += k;
	}
	out[o] = 0;
	if (out_len)
		*out_len = o;
	return out;
}
