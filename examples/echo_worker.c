/* The smallest useful mesh worker: replies with its request. */
#include <mesh/worker.h>

#include <stdio.h>
#include <string.h>

static int echo(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	(void)ctx;
	if (n > cap)
		return -1;
	memcpy(reply, req, n);
	*reply_len = n;
	return 0;
}

int main(void)
{
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "echo_worker: %s (start me from meshd)\n", mesh_worker_strerror(rc));
		return 1;
	}
	printf("echo_worker: ready\n");
	if ((rc = mesh_worker_ready(w)) == 0)
		rc = mesh_worker_serve(w, echo, NULL);
	if (rc < 0)
		fprintf(stderr, "echo_worker: %s\n", mesh_worker_strerror(rc));
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
