/* The job engine's checks of what it is given: the identity of the work a
 * journal belongs to, read-only opens, files that are not journals, chunk
 * counts it cannot hold. */
#include "base/err.h"
#include "job/job.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static off_t fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static int open_as(struct mesh_job **j, const char *journal, const char *ident, int read_only,
		   struct mesh_job_why *why)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = journal;
	o.lockdir = "locks";
	o.name = "jb";
	o.identity = ident;
	o.identity_len = ident ? strlen(ident) : 0;
	o.read_only = read_only;
	o.why = why;
	return mesh_job_open(j, &o);
}

/* An owner's journal (meshd's jobs, mesh_job_submit_unsynced with owned):
 * a handle that would write it must present the owner's identity; reading
 * it is anyone's.  Without the flag, a handle without an identity takes
 * any journal (the rule before). */
TEST(job_work_an_owners_journal_is_written_by_its_owner_alone)
{
	struct mesh_job_why why;
	struct mesh_job *j = NULL;
	ASSERT_EQ(mkdir("d", 0700), 0);
	ASSERT_EQ(mesh_job_submit_unsynced("d/o.log", 4, "meshd job 1", 11, 1), 0);
	struct stat st;
	ASSERT_EQ(stat("d/o.log", &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600); /* the caller's private directory's */
	memset(&why, 0, sizeof why);
	EXPECT_EQ(open_as(&j, "d/o.log", NULL, 0, &why), MESH_E_MISMATCH);
	EXPECT_TRUE(why.owned);
	EXPECT_EQ(why.identity_len, 11);
	EXPECT_EQ(memcmp(why.identity, "meshd job 1", 11), 0);
	EXPECT_EQ(open_as(&j, "d/o.log", "meshd job 2", 0, &why), MESH_E_MISMATCH);
	EXPECT_TRUE(why.owned);
	ASSERT_EQ(open_as(&j, "d/o.log", NULL, 1, &why), 0); /* a reader */
	mesh_job_close(j);
	ASSERT_EQ(open_as(&j, "d/o.log", "meshd job 1", 0, &why), 0); /* its owner */
	EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_JOB_DONE);
	mesh_job_close(j);
	/* The same identity without the flag: anyone writes. */
	ASSERT_EQ(mesh_job_submit_unsynced("d/n.log", 4, "meshd job 1", 11, 0), 0);
	ASSERT_EQ(open_as(&j, "d/n.log", NULL, 0, &why), 0);
	mesh_job_close(j);
	EXPECT_EQ(mesh_job_submit_unsynced("d/x.log", 4, NULL, 0, 1), -EINVAL);
}

TEST(job_work_identity_at_submit_and_open)
{
	struct mesh_job_why why;
	struct mesh_job *j = NULL;
	size_t len;
	ASSERT_EQ(mesh_job_submit_id("j.log", 5, "cmd A", 5, &why), 0);
	off_t size = fsize("j.log");
	EXPECT_EQ(mesh_job_submit_id("j.log", 5, "cmd A", 5, &why), 0);
	/* other work: refused, nothing written, the journal's identity given */
	EXPECT_EQ(mesh_job_submit_id("j.log", 5, "cmd B", 5, &why), MESH_E_MISMATCH);
	EXPECT_EQ(why.identity_len, 5);
	EXPECT_EQ(memcmp(why.identity, "cmd A", 5), 0);
	EXPECT_UEQ(why.n, 5);
	EXPECT_EQ(mesh_job_submit_id("j.log", 6, "cmd A", 5, &why), MESH_E_MISMATCH);
	EXPECT_UEQ(why.n, 5);
	EXPECT_EQ(fsize("j.log"), size);
	/* no identity given: any journal of n chunks */
	EXPECT_EQ(mesh_job_submit("j.log", 5), 0);
	EXPECT_EQ(mesh_job_submit_id("j.log", 5, "x", MESH_JOB_IDENTITY_MAX + 1, NULL), MESH_E_TOOBIG);

	EXPECT_EQ(open_as(&j, "j.log", "cmd B", 0, &why), MESH_E_MISMATCH);
	EXPECT_EQ(why.identity_len, 5);
	EXPECT_EQ(memcmp(why.identity, "cmd A", 5), 0);
	ASSERT_EQ(open_as(&j, "j.log", "cmd A", 0, &why), 0);
	const char *id = mesh_job_identity(j, &len);
	EXPECT_EQ(len, 5);
	EXPECT_EQ(memcmp(id, "cmd A", 5), 0);
	EXPECT_EQ(mesh_job_complete(j, 1, 0), MESH_JOB_DONE);
	mesh_job_close(j);
	ASSERT_EQ(open_as(&j, "j.log", NULL, 0, NULL), 0);
	mesh_job_close(j);

	/* a journal made without an identity keeps working for any work */
	ASSERT_EQ(mesh_job_submit("old.log", 3), 0);
	EXPECT_EQ(mesh_job_submit_id("old.log", 3, "cmd B", 5, NULL), 0);
	ASSERT_EQ(open_as(&j, "old.log", "cmd B", 0, NULL), 0);
	EXPECT_TRUE(mesh_job_identity(j, &len) == NULL);
	EXPECT_EQ(len, 0);
	mesh_job_close(j);
}

TEST(job_work_read_only_open_changes_nothing)
{
	struct mesh_job_why why;
	struct mesh_job *j = NULL;
	struct mesh_job_status st;
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_submit("j.log", 4), 0);
	ASSERT_EQ(open_as(&j, "j.log", NULL, 1, &why), 0);
	EXPECT_EQ(access("locks", F_OK), -1); /* not created */
	EXPECT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.pending, 4);
	EXPECT_EQ(mesh_job_lease(j, 1000000000ull, 0, &l), MESH_E_STATE);
	EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_E_STATE);
	EXPECT_EQ(mesh_job_fail(j, 0, 1), MESH_E_STATE);
	EXPECT_EQ(mesh_job_retry(j, UINT64_MAX), MESH_E_STATE);
	mesh_job_close(j);
	off_t good = fsize("j.log");
	/* a torn tail: reported with where it is, not cut */
	int fd = open("j.log", O_WRONLY | O_APPEND);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, "torn", 4), 4);
	close(fd);
	ASSERT_EQ(open_as(&j, "j.log", NULL, 1, &why), 0);
	mesh_job_close(j);
	EXPECT_EQ(why.torn, 1);
	EXPECT_UEQ(why.damage_off, (uint64_t)good);
	EXPECT_UEQ(why.size, (uint64_t)good + 4);
	EXPECT_EQ(fsize("j.log"), good + 4);
	EXPECT_EQ(access("locks", F_OK), -1);
	/* a writer's open still recovers it */
	ASSERT_EQ(open_as(&j, "j.log", NULL, 0, &why), 0);
	mesh_job_close(j);
	EXPECT_EQ(fsize("j.log"), good);
	EXPECT_EQ(access("locks", F_OK), 0);
}

TEST(job_work_files_that_are_not_journals)
{
	struct mesh_job_why why;
	struct mesh_job *j = NULL;
	ASSERT_EQ(mkfifo("f.log", 0644), 0);
	ASSERT_EQ(mkdir("d.log", 0755), 0);
	/* a FIFO without a writer would block a plain open for reading */
	EXPECT_EQ(mesh_job_submit_id("f.log", 3, NULL, 0, &why), MESH_E_PATH);
	EXPECT_EQ(why.file_type, S_IFIFO);
	EXPECT_EQ(open_as(&j, "f.log", NULL, 1, &why), MESH_E_PATH);
	EXPECT_EQ(why.file_type, S_IFIFO);
	EXPECT_EQ(mesh_job_submit_id("d.log", 3, NULL, 0, &why), MESH_E_PATH);
	EXPECT_EQ(why.file_type, S_IFDIR);
	EXPECT_EQ(open_as(&j, "d.log", NULL, 0, &why), MESH_E_PATH);
	EXPECT_EQ(why.file_type, S_IFDIR);
	/* a lock dir that cannot be made is named as such */
	ASSERT_EQ(mesh_job_submit("j.log", 3), 0);
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = "j.log";
	o.lockdir = "/tmp/mesh-no-such-dir-for-test/locks";
	o.name = "jb";
	o.why = &why;
	EXPECT_EQ(mesh_job_open(&j, &o), -ENOENT);
	EXPECT_EQ(why.at, MESH_JOB_AT_LOCKDIR);
	o.read_only = 1; /* missing: nothing is leased */
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	mesh_job_close(j);
}

TEST(job_work_chunk_count_the_engine_holds)
{
	struct mesh_job_why why;
	struct mesh_job *j = NULL;
	EXPECT_EQ(mesh_job_submit_id("big.log", MESH_JOB_MAX_CHUNKS + 1, NULL, 0, &why), MESH_E_RANGE);
	EXPECT_EQ(access("big.log", F_OK), -1);
	/* a journal made before the limit: refused by name, not ENOMEM */
	unsigned char pay[8];
	uint64_t n = 1000000000000ull;
	for (int i = 0; i < 8; i++)
		pay[i] = (unsigned char)(n >> (8 * i));
	struct mesh_jrec r = {MESH_JREC_SUBMIT, 0, 8, pay, 0};
	ASSERT_EQ(mesh_journal_create("huge.log", &r), 0);
	EXPECT_EQ(open_as(&j, "huge.log", NULL, 1, &why), MESH_E_RANGE);
	EXPECT_UEQ(why.n, n);
}
