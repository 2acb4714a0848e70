#include "host/procfile.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int mesh__read_proc(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		if (n == cap) {
			if (cap >= max) {
				free(b);
				close(fd);
				return MESH_E_TOOBIG;
			}
			size_t nc = cap * 2 > max ? max : cap * 2;
			char *nb = realloc(b, nc + 1);
			if (!nb) {
				free(b);
				close(fd);
				return -ENOMEM;
			}
			b = nb;
			cap = nc;
		}
		ssize_t r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			free(b);
			close(fd);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	b[n] = 0;
	*out = b;
	if (len)
		*len = n;
	return 0;
}
