#include "meshd/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int meshd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t plen;
	socklen_t salen;
	ssize_t w;
	int fd, rc = 1;
	if (!path || !path[0])
		return 0;
	plen = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof sa.sun_path)
		return -EINVAL;
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = 0; /* abstract namespace: no NUL terminator counted */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + (path[0] == '/'));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	do
		w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		rc = -errno;
	close(fd);
	return rc;
}
