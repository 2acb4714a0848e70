/* meshd end to end with messages larger than the ring and streamed replies:
 * the real meshd and mesh binaries, tests-workers/stream_worker. */
#include "base/exit.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static char out[65536];
static pid_t meshd_pid;

/* `mesh ARGS --socket SOCK`: its exit status, stdout (and stderr if merge) in out. */
static int mesh(int merge, const char *args)
{
	return t_sh(out, sizeof out, merge, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

/* The "ring" of the first worker of program name in `mesh ps --json`; -1 if none. */
static long long ps_ring(const char *name)
{
	long long ring = -1;
	ASSERT_EQ(mesh(0, "ps --json"), 0);
	json_t *j = json_loads(out, 0, NULL);
	ASSERT_TRUE(j != NULL);
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(j, "programs"), i, p)
	{
		json_t *w0 = json_array_get(json_object_get(p, "workers"), 0);
		if (!strcmp(json_string_value(json_object_get(p, "name")), name) && w0 &&
		    json_is_integer(json_object_get(w0, "ring")))
			ring = json_integer_value(json_object_get(w0, "ring"));
	}
	json_decref(j);
	return ring;
}

/* ring = "64K" in the manifest: meshd binds that program to a slot of that
 * size, and a slot of another size is replaced when another program binds. */
TEST_TIMEOUT(meshd_ring_size_from_the_manifest, 60)
{
	meshd_t_add_program(out, sizeof out, "small", t_bin("tests-workers/stream_worker"), "ring = \"64K\"\n");
	meshd_t_add_program(out, sizeof out, "plain", t_bin("tests-workers/stream_worker"), NULL);
	meshd_pid = meshd_t_start(.args = "--slots 1");
	EXPECT_EQ(mesh(1, "call small x"), 0);
	EXPECT_STREQ(out, "\""); /* 'x' ^ 0x5a */
	EXPECT_EQ(ps_ring("small"), 64 << 10);
	EXPECT_EQ(mesh(1, "stop small"), 0);
	/* The only slot is free again, and 64 KiB: replaced by one of 1 MiB. */
	EXPECT_EQ(mesh(1, "call plain x"), 0);
	EXPECT_EQ(ps_ring("plain"), 1 << 20);
	EXPECT_EQ(mesh(1, "stop plain"), 0);
	EXPECT_EQ(mesh(1, "call small x"), 0);
	EXPECT_EQ(ps_ring("small"), 64 << 10);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 131 + (i >> 16) + 7);
}

/* Writes n pattern bytes to path. */
static void write_pattern(const char *path, size_t n)
{
	unsigned char *b = malloc(n);
	ASSERT_TRUE(b != NULL);
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(i);
	FILE *f = fopen(path, "w");
	ASSERT_TRUE(f != NULL);
	ASSERT_EQ(fwrite(b, 1, n, f), n);
	fclose(f);
	free(b);
}

/* Bytes of path that are not the pattern xor 0x5a; its length in *n. */
static size_t mismatches(const char *path, size_t *n)
{
	unsigned char *b = (unsigned char *)t_read_file(path, n);
	ASSERT_TRUE(b != NULL);
	size_t bad = 0;
	for (size_t i = 0; i < *n; i++)
		bad += b[i] != (pattern(i) ^ 0x5a);
	free(b);
	return bad;
}

/* 5 MiB in and 5 MiB out through 1 MiB rings, byte for byte; the limit is
 * the documented 16 MiB (also the API's body bound), not the ring. */
TEST_TIMEOUT(meshd_call_larger_than_the_ring_both_ways, 90)
{
	meshd_t_add_program(out, sizeof out, "big", t_bin("tests-workers/stream_worker"), "ring = \"1M\"\n");
	meshd_pid = meshd_t_start();
	size_t n = 0;
	write_pattern("in5.bin", 5u << 20);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' call big - --socket " SOCK " <in5.bin >out5.bin", t_bin("mesh")), 0);
	uint64_t t1 = t_now_ms();
	EXPECT_EQ(mismatches("out5.bin", &n), 0);
	EXPECT_EQ(n, 5u << 20);
	fprintf(stderr, "    5 MiB each way through a 1 MiB ring: %llu ms (mesh call, cold worker)\n",
		(unsigned long long)(t1 - t0));
	EXPECT_EQ(ps_ring("big"), 1 << 20);
	/* Exactly the limit goes; one byte more is refused before it is sent. */
	write_pattern("in16.bin", 16u << 20);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' call big - --socket " SOCK " <in16.bin >out16.bin", t_bin("mesh")),
		  0);
	EXPECT_EQ(mismatches("out16.bin", &n), 0);
	EXPECT_EQ(n, 16u << 20);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp in16.bin in17.bin && printf x >>in17.bin"), 0);
	EXPECT_NE(t_sh(out, sizeof out, 1, "'%s' call big - --socket " SOCK " <in17.bin", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "too large");
	/* The API: a whole reply has a Content-Length. */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -D head.txt -o curl.bin --unix-socket " SOCK
		       " --data-binary @in5.bin http://x/v1/programs/big/call"),
		  0);
	EXPECT_EQ(mismatches("curl.bin", &n), 0);
	EXPECT_EQ(n, 5u << 20);
	char *head = t_read_file("head.txt", NULL);
	EXPECT_CONTAINS(head, "Content-Length: 5242880");
	free(head);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* A worker that sends 3 parts 200 ms apart: `mesh call` prints the first
 * before the last is produced; the API answers with chunked encoding. */
TEST_TIMEOUT(meshd_call_streams_parts_as_they_come, 60)
{
	meshd_t_add_program(out, sizeof out, "st", t_bin("tests-workers/stream_worker"), NULL);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh(1, "start st"), 0); /* warm: the times below are the call's own */
	int p[2];
	ASSERT_EQ(pipe(p), 0);
	uint64_t t0 = t_now_ms();
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execl(t_bin("mesh"), "mesh", "call", "st", "parts", "--socket", SOCK, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char got[256] = "";
	size_t len = 0;
	uint64_t first = 0, last = 0, at[3] = {0};
	for (;;) {
		ssize_t k = read(p[0], got + len, sizeof got - 1 - len);
		if (k <= 0)
			break;
		uint64_t now = t_now_ms();
		if (!first)
			first = now;
		last = now;
		len += (size_t)k;
		got[len] = 0;
		for (int i = 0; i < 3; i++) {
			char want[16];
			snprintf(want, sizeof want, "part %d\n", i + 1);
			if (!at[i] && strstr(got, want))
				at[i] = now - t0;
		}
	}
	close(p[0]);
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_STREQ(got, "part 1\npart 2\npart 3\n");
	fprintf(stderr, "    arrivals after the call began: part 1 %llu ms, part 2 %llu ms, part 3 %llu ms\n",
		(unsigned long long)at[0], (unsigned long long)at[1], (unsigned long long)at[2]);
	/* The first part is on stdout before the last is produced (the worker
	 * sleeps 400 ms in all between them; 150 ms of margin for a loaded machine). */
	EXPECT_GT(at[0], 0);
	EXPECT_GE(at[2] - at[0], 150);
	EXPECT_GE(last - first, 150);

	/* curl sees a chunked answer with the same bytes. */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "curl -sS -D head.txt -o body.txt --unix-socket " SOCK
		       " --data-binary parts http://x/v1/programs/st/call"),
		  0);
	char *head = t_read_file("head.txt", NULL), *body = t_read_file("body.txt", NULL);
	EXPECT_CONTAINS(head, "HTTP/1.1 200");
	EXPECT_CONTAINS(head, "Transfer-Encoding: chunked");
	EXPECT_STREQ(body, "part 1\npart 2\npart 3\n");
	free(head);
	free(body);

	/* A failure after a part: the part came out, the call fails, meshd logs why. */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' call st fail --socket " SOCK " 2>err.txt", t_bin("mesh")),
		  MESH_EXIT_PROTOCOL);
	EXPECT_STREQ(out, "before the failure\n");
	char *err = t_read_file("err.txt", NULL);
	EXPECT_CONTAINS(err, "the reply stopped after 19 bytes");
	free(err);
	EXPECT_NE(t_sh(out, sizeof out, 1, "curl -sS --unix-socket " SOCK " --data-binary fail http://x/v1/programs/st/call"),
		  0);
	EXPECT_CONTAINS(out, "before the failure\n");
	/* The worker goes on. */
	EXPECT_EQ(mesh(1, "call st x"), 0);
	EXPECT_STREQ(out, "\"");
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	char *log = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(log, "cut=1");
	EXPECT_CONTAINS(log, "failed after a part");
	free(log);
}

/* A client that goes away in the middle of a stream: meshd stops the call
 * at the next part, frees the request once, and serves the next call. */
TEST_TIMEOUT(meshd_stream_client_gone_midway, 60)
{
	meshd_t_add_program(out, sizeof out, "st", t_bin("tests-workers/stream_worker"), NULL);
	meshd_pid = meshd_t_start();
	EXPECT_EQ(mesh(1, "start st"), 0);
	/* curl gives up 100 ms in: after part 1, before part 2. */
	EXPECT_NE(t_sh(out, sizeof out, 1,
		       "curl -sS --max-time 0.1 --unix-socket " SOCK " --data-binary parts http://x/v1/programs/st/call"),
		  0);
	EXPECT_CONTAINS(out, "part 1\n");
	/* This call waits for the slot until the cut one is over. */
	EXPECT_EQ(mesh(0, "call st parts"), 0);
	EXPECT_STREQ(out, "part 1\npart 2\npart 3\n");
	EXPECT_EQ(mesh(1, "call st x"), 0);
	EXPECT_STREQ(out, "\"");
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	char *log = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(log, "stream=1");
	EXPECT_CONTAINS(log, "aborted=1");
	free(log);
}
