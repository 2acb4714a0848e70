/* The results file scanner (src/job/results.c) on a file the fuzzer writes:
 * open indexes it and cuts a torn tail; every indexed record reads back;
 * a second open finds nothing more to cut; an append after the cut reads
 * back.  Byte 0 is the chunk count (1..64); the rest is the file. */
#include "base/err.h"
#include "job/results.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	struct mesh_results *r;
	uint64_t cut = 0, n;
	if (size == 0)
		return 0;
	n = (uint64_t)(data[0] % 64) + 1;
	data++, size--;
	snprintf(path, sizeof path, "%s/fuzz_results.%d.bin", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
		 (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 0;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	if (mesh_results_open(&r, path, n, &cut) == 0) {
		uint64_t sz = mesh_results_size(r);
		if (size >= 16 && sz > size) /* a file with a header only shrinks */
			abort();
		for (uint64_t cid = 0; cid < n; cid++) {
			for (int kind = MESH_RESULT_OK; kind <= MESH_RESULT_FAILURE; kind++) {
				void *p = NULL;
				size_t len = 0;
				int rc = mesh_results_get(r, cid, kind, &p, &len);
				if (rc == 0 && (!p || ((char *)p)[len] != 0))
					abort();
				if (rc != 0 && rc != -ENOENT)
					abort(); /* the file did not change under us */
				if (kind == MESH_RESULT_OK && (rc == 0) != (mesh_results_has(r, cid) == 1))
					abort();
				free(p);
			}
		}
		if (mesh_results_get(r, n, MESH_RESULT_OK, &(void *){NULL}, &(size_t){0}) != MESH_E_RANGE)
			abort();
		/* what was cut stays cut */
		mesh_results_close(r);
		if (mesh_results_open(&r, path, n, &cut) != 0 || cut != 0 || mesh_results_size(r) != sz)
			abort();
		/* a chunk with no result yet takes one and reads it back */
		for (uint64_t cid = 0; cid < n; cid++) {
			if (mesh_results_has(r, cid))
				continue;
			void *p = NULL;
			size_t len = 0;
			if (mesh_results_append(r, cid, MESH_RESULT_OK, "ok", 2) != 0 ||
			    mesh_results_get(r, cid, MESH_RESULT_OK, &p, &len) != 0 || len != 2 || memcmp(p, "ok", 2))
				abort();
			free(p);
			break;
		}
		mesh_results_close(r);
	}
	unlink(path);
	return 0;
}
