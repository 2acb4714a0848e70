/* What more than one benchmark client needs: a TCP connection to a
 * loopback port, Nagle off (requests are small and each waits for its
 * answer). */
#ifndef MESH_BENCH_NET_H
#define MESH_BENCH_NET_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connected socket (close-on-exec) to 127.0.0.1:port, or -1. */
static inline int bench_connect_loopback(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

#endif
