/* The image history file of rollback (src/meshd/core/images.c): never crashes;
 * a previous image it names is one it was told, and saving it back reads
 * back the same.  The file is the input; the current image is 1 and the
 * image dir of 2 exists. */
#include "base/err.h"
#include "meshd/core/images.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char logs[64], hist[128];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(path);
}

static void cleanup(void)
{
	nftw(logs, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!logs[0]) {
		char d[128];
		snprintf(logs, sizeof logs, "%s/fuzz_images.%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
			 (int)getpid());
		snprintf(d, sizeof d, "%s/.images/p/%016x", logs, 2);
		mkdir(logs, 0700);
		snprintf(hist, sizeof hist, "%s/.images", logs);
		mkdir(hist, 0700);
		snprintf(hist, sizeof hist, "%s/.images/p", logs);
		mkdir(hist, 0700);
		mkdir(d, 0700);
		snprintf(hist, sizeof hist, "%s/.images/p/history", logs);
		atexit(cleanup);
	}
	int fd = open(hist, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 0;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	close(fd);
	uint64_t prev = 0;
	char *dir = NULL;
	int rc = meshd_image_history_prev(logs, "p", 1, &prev, &dir);
	if (rc != 0 && rc != MESH_E_NOTFOUND)
		abort();
	if (rc == 0) {
		if (prev != 2 || !dir)
			abort();
		free(dir);
		dir = NULL;
		if (meshd_image_history_save(logs, "p", 1, prev) != 0 ||
		    meshd_image_history_prev(logs, "p", 1, &prev, &dir) != 0 || prev != 2)
			abort();
		free(dir);
	} else if (dir) {
		abort();
	}
	return 0;
}
