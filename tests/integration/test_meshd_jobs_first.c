/* From `mesh submit` with zero workers to the first result (issue 8's
 * benchmark, docs/jobs.md "The first result"): the real meshd, the example
 * echo worker loaded and at zero workers, one chunk.  meshd's own numbers:
 * the job's first_result_s (the submit's arrival to the first DONE that is
 * durable), the worker's spawn-to-ready (the cold-start histogram), and
 * the path meshd logs (CLOCK_MONOTONIC stamps since the submit). */
#include "base/exit.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static char out[1 << 18];

#define mesh(merge, ...) meshd_t_mesh(out, sizeof out, (merge), __VA_ARGS__)

/* A check on the logged path: the line and the figures go with a failure. */
#define CHECK(cond)                                                                                              \
	do {                                                                                                     \
		if (!(cond))                                                                                     \
			t__fail(__FILE__, __LINE__, "expected %s; meshd: %s; first_result_s %.6f, spawn-to-ready %.6f", \
				#cond, line, first, ready);                                                      \
	} while (0)

/* The number after `key ` in line (its first occurrence), or -1. */
static double stamp(const char *line, const char *key)
{
	char k[64];
	snprintf(k, sizeof k, "%s ", key);
	const char *p = strstr(line, k);
	return p ? strtod(p + strlen(k), NULL) : -1;
}

/* meshd's line for job 1's first durable result (NULL while there is none;
 * free it). */
static char *first_line(void)
{
	char *err = t_read_file("meshd.err", NULL);
	const char *p = err ? strstr(err, "job=1 first result durable after ") : NULL;
	char *line = NULL;
	if (p) {
		const char *e = strchr(p, '\n');
		line = strndup(p, e ? (size_t)(e - p) : strlen(p));
	}
	free(err);
	return line;
}

static int have_first_line(void *arg)
{
	(void)arg;
	char *l = first_line();
	free(l);
	return l != NULL;
}

/* A program prog (manifest toml) in the catalog, meshd started (info: the
 * first-result line), prog loaded -- scaled to zero -- and job 1 `submit
 * prog ARGS` waited for: its results are want.  meshd's pid. */
static pid_t one_job(const char *prog, const char *binary, const char *toml, const char *args, const char *want)
{
	meshd_t_add_program(out, sizeof out, prog, binary, toml);
	pid_t pid = meshd_t_start(.state = "state", .args = "--log-level info");
	ASSERT_EQ(mesh(0, "load %s", prog), 0);
	ASSERT_EQ(mesh(0, "submit %s %s", prog, args), 0);
	EXPECT_STREQ(out, "1\n");
	EXPECT_EQ(mesh(0, "wait 1"), 0);
	EXPECT_EQ(mesh(0, "results 1"), 0);
	EXPECT_STREQ(out, want);
	return pid;
}

/* The first worker is asked for at the submit, before the job is stored
 * and before its first chunk is leased: the spawn (the long pole from
 * zero) runs while the journal and spec are fsynced and the driver starts,
 * instead of after.  The driver itself starts before those fsyncs (before,
 * after the journal's two).  The old path asked for it only once the driver had
 * leased the chunk, after the store.  And first_result_s is honest: it
 * spans the spawn and ends when the DONE is durable, after the reply. */
TEST_TIMEOUT(jobs_first_worker_is_asked_for_before_the_job_is_stored_and_leased, 60)
{
	/* Loaded (the image copied and hashed), no worker: scaled to zero. */
	pid_t pid = one_job("echo", t_bin("examples/echo_worker"), "max_workers = 2\nidle_ttl = \"30s\"\n",
			    "--chunks 1", "");

	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	double first = json_real_value(json_object_get(j, "first_result_s"));
	json_decref(j);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS --unix-socket " SOCK " http://x/metrics"), 0);
	double spawns = meshd_t_sample(out, "mesh_cold_start_seconds_count{program=\"echo\"}");
	double ready = meshd_t_sample(out, "mesh_cold_start_seconds_sum{program=\"echo\"}");
	EXPECT_TRUE(spawns == 1); /* its own worker's spawn-to-ready alone */

	ASSERT_TRUE(t_wait_for(have_first_line, NULL, 10000));
	char *line = first_line();
	double total = stamp(line, "after"), stored = stamp(line, "stored"), asked = stamp(line, "asked"),
	       lease = stamp(line, "lease"), online = stamp(line, "online"), sent = stamp(line, "sent"),
	       reply = stamp(line, "reply"), done = stamp(line, "DONE durable");
	EXPECT_CONTAINS(line, "(since the submit)");
	CHECK(stored > 0 && asked >= 0 && lease > 0 && sent > 0 && reply > 0 && done > 0);
	/* The structure: asked for before the spec was durable and before the
	 * first lease; the worker joined before a chunk went to it (its
	 * `online` may reach meshd after its first reply, and the getter that
	 * notes it may do so after the first DONE was logged: -1 then). */
	CHECK(online > 0 || online == -1);
	double joined = stamp(line, "joined"), results = stamp(line, "results file");
	CHECK(asked < stored);
	CHECK(asked < lease);
	/* The driver started on the journal's bytes, before their fsyncs
	 * (which run beside it, then the spec's): the job was durable, its
	 * journal first, before it was answered, but not before it ran. */
	double driver = stamp(line, "driver"), journal = stamp(line, "journal durable");
	CHECK(driver > 0 && journal > driver && stored > journal);
	CHECK(joined > 0 && joined <= sent && sent <= reply && reply <= done);
	/* The results file (created on a helper thread, off the first lease's
	 * way) was there before the first DONE. */
	CHECK(results > 0 && results <= done);
	/* The whole: the later of the DONE and the job's own store. */
	CHECK(total >= done && total >= stored && (total == done || total == stored));
	/* Honest: the API's figure is the logged one; it spans the worker's
	 * own spawn-to-ready and ends after the reply. */
	CHECK(first * 1000 >= total - 0.01 && first * 1000 <= total + 0.01);
	/* The reply came from the one worker spawned for it (spawns == 1),
	 * so the figure spans its spawn.  Not compared with the cold-start
	 * sum: that ends when meshd's loop reads `ready`, which a loaded
	 * machine may do after the worker, told `run` at its spawn, already
	 * replied (CI: first 20.5 ms, spawn-to-ready 36.4 ms). */
	CHECK(first * 1000 >= reply);
	/* Generous (a loaded 2-core machine): what meshd adds to the spawn. */
	CHECK(first - ready < 2.0);
	free(line);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* The first chunk does not wait for the worker's `online` round trip:
 * the worker joins the job once its slot is armed (meshd sent `run`), and
 * the chunk is in the slot's request ring when the worker maps it.  The
 * worker here answers `online` 300 ms after its `ready` (it sleeps before
 * it reads `run`): meshd's stamps show the chunk sent long before it saw
 * that `online`.  Before, a job's worker joined only once online (the
 * chunk sent after it). */
TEST_TIMEOUT(jobs_first_chunk_in_ring_before_online, 60)
{
	pid_t pid = one_job("slowon", t_bin("tests-workers/host_worker"),
			    "args = [\"slow-online\"]\nmax_workers = 1\nidle_ttl = \"30s\"\n", "::: alpha", "alpha");
	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	double first = json_real_value(json_object_get(j, "first_result_s"));
	EXPECT_EQ(meshd_t_jint(j, "failed_attempts"), 0);
	json_decref(j);
	double ready = 0;
	ASSERT_TRUE(t_wait_for(have_first_line, NULL, 10000));
	char *line = first_line();
	double joined = stamp(line, "joined"), sent = stamp(line, "sent"), online = stamp(line, "online"),
	       reply = stamp(line, "reply");
	CHECK(joined > 0 && sent > 0 && reply > 0);
	CHECK(joined <= sent);
	/* In the ring well before meshd heard `online` (300 ms late).  The
	 * thread that notes the `online` can come after the first DONE, whose
	 * line then has none (-1): the reply, which the worker sends after
	 * its `online`, bounds it then. */
	CHECK((online > 0 ? online : reply) - sent > 150);
	CHECK(reply > sent);
	free(line);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* A worker that dies after `ready`, before it reads `run`, with the first
 * chunk already in its ring: the chunk is not lost and no worker takes it
 * twice; each such start counts as a start that failed (one attempt fails
 * with status 127 and the reason), so the chunk is buried after its
 * retries instead of spawning workers for ever. */
/* The first chunk goes into the slot's ring at the worker's launch, not
 * at its `ready`: the host arms the slot then (arm_pending, host.c), so
 * the worker's first read after `run` finds it, and neither the getter's
 * nor the driver's wake-up is on the way.  A worker that takes 400 ms to
 * say ready: the chunk was sent more than 300 ms before its `online`
 * (before: after its `ready`, so a few ms before).  Its --timeout (250 ms)
 * counts from the `online`, not from the send: nothing is killed. */
TEST_TIMEOUT(jobs_first_chunk_in_ring_before_ready, 60)
{
	pid_t pid = one_job("slowready", t_bin("tests-workers/host_worker"),
			    "args = [\"slow-ready\"]\nmax_workers = 1\nidle_ttl = \"30s\"\n", "--timeout 0.25 ::: alpha",
			    "alpha");
	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	EXPECT_EQ(meshd_t_jint(j, "failed_attempts"), 0);
	EXPECT_EQ(meshd_t_jint(j, "worker_kills"), 0);
	double first = json_real_value(json_object_get(j, "first_result_s")), ready = 0;
	json_decref(j);
	ASSERT_TRUE(t_wait_for(have_first_line, NULL, 10000));
	char *line = first_line();
	double sent = stamp(line, "sent"), online = stamp(line, "online"), reply = stamp(line, "reply");
	CHECK(sent > 0 && reply > sent);
	CHECK((online > 0 ? online : reply) - sent > 300);
	free(line);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* The `run` of a worker launched for a job is in its channel before its
 * `ready` (send_run_early, host.c): after `ready` the worker maps its slot
 * and takes the chunk waiting there without waiting for meshd to read that
 * `ready`.  The worker here looks for it before it says ready (up to 3 s);
 * before, meshd sent `run` only once it had read `ready`, and the worker
 * printed "no". */
TEST_TIMEOUT(jobs_first_worker_run_is_sent_before_its_ready, 60)
{
	pid_t pid = one_job("early", t_bin("tests-workers/host_worker"),
			    "args = [\"run-before-ready\"]\nmax_workers = 1\nidle_ttl = \"30s\"\n", "::: alpha", "alpha");
	char *log = t_read_file("logs/early.log", NULL);
	ASSERT_TRUE(log != NULL);
	EXPECT_CONTAINS(log, "run waiting before ready: yes");
	free(log);
	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	EXPECT_EQ(meshd_t_jint(j, "failed_attempts"), 0);
	json_decref(j);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

TEST_TIMEOUT(jobs_death_before_online_fails_a_start, 60)
{
	meshd_t_add_program(out, sizeof out, "dies", t_bin("tests-workers/host_worker"),
			    "args = [\"crash-after-ready\"]\nmax_workers = 1\nidle_ttl = \"30s\"\n");
	pid_t pid = meshd_t_start(.state = "state", .args = "--log-level info");
	ASSERT_EQ(mesh(0, "submit dies --retries 2 ::: alpha"), 0);
	EXPECT_STREQ(out, "1\n");
	EXPECT_EQ(mesh(1, "wait 1"), MESH_EXIT_INCOMPLETE);
	EXPECT_CONTAINS(out, "1 buried");
	EXPECT_CONTAINS(out, "last status 127");
	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	EXPECT_EQ(meshd_t_jint(j, "failed_attempts"), 2);
	EXPECT_EQ(meshd_t_jint(j, "buried"), 1);
	json_decref(j);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

static unsigned count_lines(const char *path)
{
	size_t len = 0;
	char *t = t_read_file(path, &len);
	unsigned n = 0;
	for (size_t i = 0; t && i < len; i++)
		n += t[i] == '\n';
	free(t);
	return n;
}

/* More lines in answered.txt than *arg. */
static int answered_past(void *arg)
{
	return count_lines("answered.txt") > *(unsigned *)arg;
}

/* The submit writes a job's input and journal unsynced, starts its driver,
 * then syncs them and writes its spec, and answers after.  meshd SIGKILLed
 * at random points of a stream of submits, eight times: after a restart
 * every answered submit is there and runs to its end, each result once;
 * an unanswered one is absent or whole, and no job is left in error. */
TEST_TIMEOUT(jobs_meshd_sigkilled_during_submits_keeps_every_answered_job, 120)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"),
			    "max_workers = 2\nidle_ttl = \"30s\"\n");
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	fputs("a\nb\nc\n", f);
	fclose(f);
	srand((unsigned)getpid());
	unsigned answered = 0;
	for (int round = 0; round < 8; round++) {
		answered = count_lines("answered.txt");
		pid_t pid = meshd_t_start(.state = "state");
		/* Submits back to back; an id is written once the submit was
		 * answered. */
		char cmd[4096];
		snprintf(cmd, sizeof cmd,
			 "while id=$('%s' submit echo --input in.txt --socket " SOCK " 2>/dev/null); do"
			 " echo \"$id\" >>answered.txt; done",
			 t_bin("mesh"));
		pid_t sub = fork();
		ASSERT_GE(sub, 0);
		if (sub == 0) {
			execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
			_exit(127);
		}
		/* one answered in this round at least, then a random moment */
		ASSERT_TRUE(t_wait_for(answered_past, &answered, 20000));
		usleep((useconds_t)(rand() % 100000));
		ASSERT_EQ(kill(pid, SIGKILL), 0);
		EXPECT_EQ(meshd_t_wait(pid), 128 + SIGKILL);
		int st;
		ASSERT_EQ(waitpid(sub, &st, 0), sub); /* its next submit fails: it ends */
	}
	pid_t pid = meshd_t_start(.state = "state");
	size_t len = 0;
	char *ids = t_read_file("answered.txt", &len);
	ASSERT_TRUE(ids != NULL);
	answered = 0;
	for (char *l = strtok(ids, "\n"); l; l = strtok(NULL, "\n")) {
		unsigned id = (unsigned)strtoul(l, NULL, 10);
		ASSERT_TRUE(id > 0);
		EXPECT_EQ(mesh(0, "wait %u --quiet", id), 0);
		EXPECT_EQ(mesh(0, "results %u", id), 0);
		if (strcmp(out, "abc")) {
			printf("    job %u: results '%s'\n", id, out);
			EXPECT_STREQ(out, "abc");
		}
		answered++;
	}
	free(ids);
	printf("    %u submits answered in 8 rounds, every one there after the restart\n", answered);
	EXPECT_GE(answered, 8);
	/* None of the unanswered ones broke: no job in error. */
	ASSERT_EQ(mesh(0, "jobs --json"), 0);
	EXPECT_TRUE(strstr(out, "\"error\"") == NULL);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}
