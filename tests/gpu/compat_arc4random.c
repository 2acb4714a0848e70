/* Linked into the GPU bundle's meshd only (tests/gpu/bundle.sh): the static
 * libevent of the build machine (glibc 2.36) calls arc4random, which older
 * glibc (Ubuntu 22.04's 2.35, the usual CUDA image) lacks; these keep the
 * bundle's meshd to glibc 2.34. */
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>

void arc4random_buf(void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n) {
		ssize_t r = getrandom(p, n, 0);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
		}
	}
}

uint32_t arc4random(void)
{
	uint32_t v;
	arc4random_buf(&v, sizeof v);
	return v;
}
