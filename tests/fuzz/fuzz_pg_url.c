/* The PostgreSQL store URL's own parsing before libpq (src/store/store_pg.c):
 * mesh_pg_url_is and mesh_pg_url_safe (the form shown in messages: the
 * password hidden) on any string and any buffer size.  Byte 0 is the
 * buffer size (0..255); the rest, NUL-terminated, the URL. */
#include "store/store_pg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t cap = data[0];
	char *url = malloc(size), *buf = malloc(cap ? cap : 1);
	if (!url || !buf)
		abort();
	memcpy(url, data + 1, size - 1);
	url[size - 1] = 0;
	mesh_pg_url_is(url);
	mesh_pg_url_safe(url, buf, cap);
	if (cap && strlen(buf) >= cap)
		abort();
	free(url);
	free(buf);
	return 0;
}
