/* Fuzzes the ELF check meshd runs on a catalog program's file before it
 * spawns it (host/elf.c): bytes of any shape are refused with a message
 * that names the file, or accepted, never read past. */
#include "base/err.h"
#include "host/elf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes: ASan catches a read past them. */
	uint8_t *b = malloc(size ? size : 1);
	if (!b)
		return 0;
	memcpy(b, data, size);
	char *err = NULL;
	int rc = mesh_elf_check("f.bin", b, size, &err);
	if (rc == MESH_E_REFUSED) {
		if (!err || strncmp(err, "'f.bin' ", 8) != 0)
			abort(); /* a refusal says which file and why */
	} else if (rc != 0 && rc != -ENOMEM) {
		abort();
	} else if (rc == 0 && err) {
		abort();
	}
	free(err);
	free(b);
	return 0;
}
