#include "base/crc.h"

#include <pthread.h>
#include <string.h>

static uint32_t table[8][256];
static int have_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n)
{
	uint64_t c64 = c;
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
		p += 8;
		n -= 8;
	}
	c = (uint32_t)c64;
	while (n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
	while (n >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		lo ^= c;
		c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
		    table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		    table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return c;
}

uint32_t mesh_crc32c(uint32_t crc, const void *buf, size_t n)
{
	pthread_once(&once, init);
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (have_hw)
		return ~crc_hw(c, buf, n);
#endif
	return ~crc_sw(c, buf, n);
}

uint64_t mesh_fnv1a64(uint64_t h, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}
