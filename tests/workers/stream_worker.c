/* A worker that streams its replies, for the streaming tests.  By request:
 *   "parts"  "part 1\n" (mesh_worker_reply_part), 200 ms, "part 2\n" (a
 *            part), 200 ms, then "part 3\n" as the handler's reply
 *   "fail"   "before the failure\n" as a part, then a handler error
 *   other    the request, each byte xor 0x5a (a whole reply, any size) */
#include <mesh/worker.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int handle(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	struct mesh_worker *w = ctx;
	if (n == 5 && !memcmp(req, "parts", 5)) {
		if (mesh_worker_reply_part(w, "part 1\n", 7) < 0)
			return -1;
		usleep(200 * 1000);
		if (mesh_worker_reply_part(w, "part 2\n", 7) < 0)
			return -1;
		usleep(200 * 1000);
		memcpy(reply, "part 3\n", 7);
		*reply_len = 7;
		return 0;
	}
	if (n == 4 && !memcmp(req, "fail", 4)) {
		if (mesh_worker_reply_part(w, "before the failure\n", 19) < 0)
			return -1;
		*reply_len = (size_t)snprintf(reply, cap, "failed after a part");
		return -1;
	}
	if (n > cap)
		return -1;
	for (size_t i = 0; i < n; i++)
		((unsigned char *)reply)[i] = ((const unsigned char *)req)[i] ^ 0x5a;
	*reply_len = n;
	return 0;
}

int main(void)
{
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "stream_worker: %s\n", mesh_worker_strerror(rc));
		return 1;
	}
	printf("stream_worker: ready\n");
	if ((rc = mesh_worker_ready(w)) == 0)
		rc = mesh_worker_serve(w, handle, w);
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
