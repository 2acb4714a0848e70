/* Released block lease files (docs/journal.md, "Block leases"): a block
 * whose last chunk is let go is rewritten to the free stamp, not unlinked;
 * anyone takes it at once, and its holder renames it to its next block. */
#include "base/clock.h"
#include "base/err.h"
#include "job/job.h"
#include "runner/t.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S MESH_NS_PER_S

/* A live stamp of this process, 60 s long, and the clock to judge by. */
static void stamp(struct mesh_lease_stamp *st, struct mesh_lease_clock *now, uint64_t token)
{
	memset(st, 0, sizeof *st);
	mesh_lease_holder_self(&st->holder);
	mesh_lease_clock_now(now, &st->holder);
	st->deadline_ns = now->wall_ns + 60 * S;
	st->boot_deadline_ns = now->boot_ns + 60 * S;
	st->started_ns = now->wall_ns;
	st->attempt = 1;
	st->token = token;
	snprintf(st->node, sizeof st->node, "n%d", (int)getpid());
}

static uint64_t ino_of(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

static int read_block(const char *path, struct mesh_lease_stamp *st, uint64_t *mask)
{
	size_t len;
	char *text = t_read_file(path, &len);
	int rc = text ? mesh_lease_block_parse(text, len, st, mask) : -ENOENT;
	free(text);
	return rc;
}

static size_t files_in(const char *dir)
{
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void count_live(void *arg, uint64_t cid, const struct mesh_lease_stamp *st)
{
	(void)cid;
	(void)st;
	++*(size_t *)arg;
}

TEST(store_released_block_is_free_then_renamed_to_the_next_block)
{
	struct mesh_store *s;
	struct mesh_lease_stamp mine, st;
	struct mesh_lease_clock now;
	uint64_t got = 0, mask = 1, ino0;
	size_t live = 0;
	ASSERT_EQ(mesh_store_file_open(&s, "ld", "jb", 1), 0);
	stamp(&mine, &now, 0x1111);
	ASSERT_EQ(s->ops->claim_block(s, 0, 0xff, &now, &mine, &got), 0);
	EXPECT_UEQ(got, 0xff);
	ino0 = ino_of("ld/jb.b0.lease");
	ASSERT_NE(ino0, 0);
	for (uint64_t cid = 0; cid < 8; cid++) /* failures (token) and DONE sweeps (0) */
		EXPECT_EQ(s->ops->release(s, cid, 0, cid < 4 ? mine.token : 0), 0);
	/* released: still there, holding nothing, free by any clock */
	ASSERT_EQ(read_block("ld/jb.b0.lease", &st, &mask), 0);
	EXPECT_UEQ(mask, 0);
	EXPECT_UEQ(st.token, 0x1111);
	EXPECT_EQ(mesh_lease_free(&st, &now), 1);
	EXPECT_EQ(s->ops->read(s, 3, 0, &st), -ENOENT);
	EXPECT_EQ(s->ops->each_live(s, &now, count_live, &live), 0);
	EXPECT_EQ(live, 0);
	/* the next block is the same file, renamed: fresh, not a steal */
	stamp(&mine, &now, 0x2222);
	ASSERT_EQ(s->ops->claim_block(s, 1, 0xf, &now, &mine, &got), 0);
	EXPECT_UEQ(got, 0xf);
	EXPECT_EQ(access("ld/jb.b0.lease", F_OK), -1);
	EXPECT_UEQ(ino_of("ld/jb.b1.lease"), ino0);
	ASSERT_EQ(read_block("ld/jb.b1.lease", &st, &mask), 0);
	EXPECT_UEQ(mask, 0xf);
	EXPECT_UEQ(st.token, 0x2222);
	EXPECT_EQ(s->ops->read(s, 65, 0, &st), 0);
	EXPECT_UEQ(st.token, 0x2222);
	EXPECT_EQ(s->ops->each_live(s, &now, count_live, &live), 0);
	EXPECT_EQ(live, 4);
	s->ops->close(s);
	EXPECT_EQ(files_in("ld"), 0);
}

TEST(store_released_block_is_taken_at_once_by_another_node)
{
	struct mesh_store *a, *b;
	struct mesh_lease_stamp ma, mb, st;
	struct mesh_lease_clock now;
	uint64_t got = 0, mask = 0, ino0;
	ASSERT_EQ(mesh_store_file_open(&a, "ld", "jb", 1), 0);
	ASSERT_EQ(mesh_store_file_open(&b, "ld", "jb", 1), 0);
	stamp(&ma, &now, 0xaaaa);
	ASSERT_EQ(a->ops->claim_block(a, 0, 0x3, &now, &ma, &got), 0);
	ino0 = ino_of("ld/jb.b0.lease");
	EXPECT_EQ(a->ops->release(a, 0, 0, ma.token), 0);
	EXPECT_EQ(a->ops->release(a, 1, 0, 0), 0);
	/* b takes block 0 whole: fresh (nothing held was stolen), at once */
	stamp(&mb, &now, 0xbbbb);
	ASSERT_EQ(b->ops->claim_block(b, 0, UINT64_MAX, &now, &mb, &got), 0);
	EXPECT_UEQ(got, UINT64_MAX);
	EXPECT_UEQ(ino_of("ld/jb.b0.lease"), ino0);
	/* a's next block: its released file is b's now, so a new one */
	stamp(&ma, &now, 0xaaab);
	ASSERT_EQ(a->ops->claim_block(a, 2, 0x1, &now, &ma, &got), 0);
	EXPECT_UEQ(got, 0x1);
	EXPECT_NE(ino_of("ld/jb.b2.lease"), ino0);
	ASSERT_EQ(read_block("ld/jb.b0.lease", &st, &mask), 0);
	EXPECT_UEQ(st.token, 0xbbbb);
	EXPECT_UEQ(mask, UINT64_MAX);
	EXPECT_EQ(a->ops->read(a, 5, 0, &st), 0);
	EXPECT_UEQ(st.token, 0xbbbb);
	a->ops->close(a);
	/* a's close removed only its own: b's block stays */
	EXPECT_EQ(access("ld/jb.b0.lease", F_OK), 0);
	EXPECT_EQ(access("ld/jb.b2.lease", F_OK), -1);
	b->ops->close(b);
	EXPECT_EQ(files_in("ld"), 0);
}

/* Through the job: what one node finished of a block, another leases
 * the rest of as one block lease, at once. */
TEST(job_released_block_rest_leased_by_another_node_at_once)
{
	struct mesh_job_opts o = {.journal = "j.log", .lockdir = "ld", .name = "jb", .node = "a"};
	struct mesh_job *a, *b;
	struct mesh_lease ls[64];
	size_t got = 0;
	ASSERT_EQ(mesh_job_submit("j.log", 100), 0);
	ASSERT_EQ(mesh_job_open(&a, &o), 0);
	o.node = "b";
	ASSERT_EQ(mesh_job_open(&b, &o), 0);
	ASSERT_EQ(mesh_job_lease_many(a, 60 * S, 0, ls, 4, &got), 0);
	ASSERT_EQ(got, 4);
	for (size_t i = 0; i < got; i++)
		EXPECT_EQ(mesh_job_complete(a, ls[i].cid, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_lease_many(b, 60 * S, 0, ls, 64, &got), 0);
	EXPECT_EQ(got, 64); /* the 60 left of block 0 and 4 of block 1 */
	EXPECT_UEQ(ls[0].cid, 4);
	EXPECT_EQ(files_in("ld"), 2); /* two block files, no chunk lease files */
	mesh_job_close(b);
	mesh_job_close(a);
}

TEST(store_sigkilled_holder_of_a_reused_block_is_stolen_at_once)
{
	int p[2];
	uint64_t ino0 = 0;
	ASSERT_EQ(pipe(p), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct mesh_store *s;
		struct mesh_lease_stamp mine;
		struct mesh_lease_clock now;
		uint64_t got = 0, ino;
		close(p[0]);
		stamp(&mine, &now, 0xc0c0);
		if (mesh_store_file_open(&s, "ld", "jb", 1) || s->ops->claim_block(s, 0, 0x3, &now, &mine, &got))
			_exit(1);
		ino = ino_of("ld/jb.b0.lease");
		s->ops->release(s, 0, 0, 0);
		s->ops->release(s, 1, 0, 0);
		stamp(&mine, &now, 0xc1c1);
		if (s->ops->claim_block(s, 1, 0xff, &now, &mine, &got) || got != 0xff)
			_exit(1);
		if (write(p[1], &ino, sizeof ino) != sizeof ino)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	ASSERT_EQ(read(p[0], &ino0, sizeof ino0), (ssize_t)sizeof ino0);
	close(p[0]);
	/* the child holds block 1 through its reused file */
	EXPECT_EQ(access("ld/jb.b0.lease", F_OK), -1);
	EXPECT_UEQ(ino_of("ld/jb.b1.lease"), ino0);
	struct mesh_store *s;
	struct mesh_lease_stamp mine, st;
	struct mesh_lease_clock now;
	uint64_t got = 0, mask = 0;
	ASSERT_EQ(mesh_store_file_open(&s, "ld", "jb", 0), 0);
	stamp(&mine, &now, 0xdddd);
	EXPECT_EQ(s->ops->claim_block(s, 1, 0xff, &now, &mine, &got), MESH_E_STATE);
	EXPECT_EQ(kill(pid, SIGKILL), 0);
	ASSERT_EQ(waitpid(pid, NULL, 0), pid);
	/* its deadline is 60 s away: taken now because its holder is gone */
	stamp(&mine, &now, 0xdddd);
	ASSERT_EQ(s->ops->claim_block(s, 1, 0xff, &now, &mine, &got), 1);
	EXPECT_UEQ(got, 0xff);
	ASSERT_EQ(read_block("ld/jb.b1.lease", &st, &mask), 0);
	EXPECT_UEQ(st.token, 0xdddd);
	EXPECT_UEQ(mask, 0xff);
	s->ops->close(s);
}

#define TAKERS 8

TEST(store_racing_takers_of_a_free_block_exactly_one_wins)
{
	struct mesh_store *s;
	ASSERT_EQ(mesh_store_file_open(&s, "ld", "jb", 1), 0);
	for (uint64_t round = 0; round < 5; round++) {
		struct mesh_lease_stamp mine, st;
		struct mesh_lease_clock now;
		uint64_t got = 0, mask = 0;
		int go[2], res[2], quit[2], wins = 0, losses = 0;
		pid_t kids[TAKERS], winner = 0;
		char name[64];
		snprintf(name, sizeof name, "ld/jb.b%llu.lease", (unsigned long long)round);
		stamp(&mine, &now, 0x100 + round);
		ASSERT_EQ(s->ops->claim_block(s, round, 0x1, &now, &mine, &got), 0);
		EXPECT_EQ(s->ops->release(s, round * MESH_LEASE_BLOCK, 0, mine.token), 0);
		ASSERT_EQ(read_block(name, &st, &mask), 0);
		ASSERT_UEQ(mask, 0);
		ASSERT_EQ(pipe(go), 0);
		ASSERT_EQ(pipe(res), 0);
		ASSERT_EQ(pipe(quit), 0);
		for (int k = 0; k < TAKERS; k++) {
			kids[k] = fork();
			ASSERT_GE(kids[k], 0);
			if (kids[k] == 0) {
				struct mesh_store *c;
				char ch, out;
				close(go[1]);
				close(quit[1]);
				if (mesh_store_file_open(&c, "ld", "jb", 0))
					_exit(2);
				if (read(go[0], &ch, 1) != 0) /* all start when go closes */
					_exit(2);
				stamp(&mine, &now, 0x1000 + (uint64_t)k);
				int rc = c->ops->claim_block(c, round, UINT64_MAX, &now, &mine, &got);
				out = rc == 0 && got == UINT64_MAX ? 'w' : rc == MESH_E_STATE ? 'l' : 'x';
				if (write(res[1], &out, 1) != 1)
					_exit(2);
				/* live until every taker has tried (a gone holder frees its block) */
				if (read(quit[0], &ch, 1) < 0)
					_exit(2);
				_exit(out == 'w' ? 10 : 0);
			}
		}
		close(go[0]);
		close(res[1]);
		close(quit[0]);
		close(go[1]);
		for (int k = 0; k < TAKERS; k++) {
			char out = 0;
			ASSERT_EQ(read(res[0], &out, 1), 1);
			wins += out == 'w';
			losses += out == 'l';
		}
		close(res[0]);
		ASSERT_EQ(read_block(name, &st, &mask), 0);
		close(quit[1]);
		for (int k = 0; k < TAKERS; k++) {
			int status = 0;
			ASSERT_EQ(waitpid(kids[k], &status, 0), kids[k]);
			if (WIFEXITED(status) && WEXITSTATUS(status) == 10)
				winner = kids[k];
		}
		EXPECT_EQ(wins, 1);
		EXPECT_EQ(losses, TAKERS - 1);
		EXPECT_UEQ(mask, UINT64_MAX);
		EXPECT_UEQ(st.holder.pid, (uint64_t)winner);
	}
	s->ops->close(s);
}

/* A lock directory as the version before reuse left it when its node was
 * killed (a live block and a chunk lease of a process that is gone, no
 * free stamps): the job resumes at once and ends. */
TEST(job_lockdir_of_the_previous_version_resumes)
{
	struct mesh_job_opts o = {.journal = "j.log", .lockdir = "ld", .name = "jb", .node = "new"};
	struct mesh_lease_stamp st;
	struct mesh_lease_clock now;
	struct mesh_lease ls[64];
	struct mesh_job *j;
	char buf[MESH_LEASE_BLOCK_MAX];
	size_t got = 0, done = 0, stolen = 0;
	ASSERT_EQ(mesh_job_submit("j.log", 100), 0);
	ASSERT_EQ(mkdir("ld", 0700), 0);
	pid_t dead = fork();
	ASSERT_GE(dead, 0);
	if (dead == 0)
		_exit(0);
	ASSERT_EQ(waitpid(dead, NULL, 0), dead);
	stamp(&st, &now, 0x5eed);
	st.holder.pid = (uint32_t)dead;
	st.holder.pid_start = 0;
	size_t n = mesh_lease_block_format(buf, sizeof buf, &st, 0xffff);
	ASSERT_GT(n, 0);
	buf[n] = 0;
	t_write_file("ld/jb.b0.lease", buf);
	n = mesh_lease_format(buf, sizeof buf, &st);
	ASSERT_GT(n, 0);
	buf[n] = 0;
	t_write_file("ld/jb.70.lease", buf);
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	for (int guard = 0; guard < 100 && done < 100; guard++) {
		int rc = mesh_job_lease_many(j, 60 * S, 0, ls, 64, &got);
		if (rc == MESH_JOB_COMPLETE)
			break;
		ASSERT_EQ(rc, 0);
		for (size_t i = 0; i < got; i++) {
			stolen += ls[i].kind == MESH_LEASE_STOLEN;
			ASSERT_EQ(mesh_job_complete(j, ls[i].cid, 0), MESH_JOB_DONE);
			done++;
		}
	}
	EXPECT_EQ(done, 100);
	EXPECT_GE(stolen, 17); /* the dead node's 16 of block 0 and chunk 70 */
	mesh_job_close(j);
}
