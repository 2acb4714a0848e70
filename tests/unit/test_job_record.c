/* The job's journal records (job/record.h): payload codecs round trip,
 * short payloads are refused, and the kinds the journal is given tell the
 * job's records from any others. */
#include "base/err.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <string.h>

TEST(job_record_codecs)
{
	unsigned char p[MESH_REC_NODE_MAX];
	struct mesh_rec_chunk c;
	struct mesh_jrec r = {MESH_JREC_DONE, 0, 0, p, 0};
	uint64_t v = 0;
	r.len = (uint16_t)mesh_rec_done_enc(p, 77, 0xabcd, 1500);
	EXPECT_EQ(r.len, MESH_REC_DONE_LEN);
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_UEQ(c.cid, 77);
	EXPECT_UEQ(c.node, 0xabcd);
	EXPECT_UEQ(c.value, 1); /* 1500 ns: 1 us */
	mesh_rec_done_enc(p, 1, 1, 999); /* under a microsecond but not 0: 1 */
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_UEQ(c.value, 1);
	mesh_rec_done_enc(p, 1, 1, 0);
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_UEQ(c.value, 0);
	mesh_rec_done_enc(p, 1, 1, UINT64_MAX);
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_UEQ(c.value, UINT32_MAX);
	r.type = MESH_JREC_FAIL;
	r.len = (uint16_t)mesh_rec_fail_enc(p, 5, 9, -3);
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_EQ((int)c.value, -3);
	r.type = MESH_JREC_DUP;
	r.len = (uint16_t)mesh_rec_dup_enc(p, 6, 9);
	EXPECT_EQ(r.len, MESH_REC_DUP_LEN);
	ASSERT_EQ(mesh_rec_chunk_dec(&r, &c), 0);
	EXPECT_UEQ(c.cid, 6);
	r.len = 11;
	EXPECT_EQ(mesh_rec_chunk_dec(&r, &c), MESH_E_PARSE);
	r.type = MESH_JREC_RETRY;
	r.len = (uint16_t)mesh_rec_u64_enc(p, UINT64_MAX);
	ASSERT_EQ(mesh_rec_u64_dec(&r, &v), 0);
	EXPECT_UEQ(v, UINT64_MAX);
	r.len = 7;
	EXPECT_EQ(mesh_rec_u64_dec(&r, &v), MESH_E_PARSE);
	r.type = MESH_JREC_NODE;
	r.len = (uint16_t)mesh_rec_node_enc(p, 42, "node-1", 6);
	uint32_t h = 0;
	const char *name = NULL;
	size_t len = 0;
	ASSERT_EQ(mesh_rec_node_dec(&r, &h, &name, &len), 0);
	EXPECT_UEQ(h, 42);
	ASSERT_EQ(len, 6);
	EXPECT_EQ(memcmp(name, "node-1", 6), 0);
	r.len = 4;
	EXPECT_EQ(mesh_rec_node_dec(&r, &h, &name, &len), MESH_E_PARSE);
}

TEST(job_record_kinds_for_the_journal)
{
	/* the job's kinds: exact lengths, known types only */
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_DONE, 16), 1);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_DONE, 12), 0);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_COMMIT, 0), 1);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_COMMIT, MESH_JOURNAL_COMMIT_LEN), 1);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_COMMIT, 16), 0);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, 9, 16), 0);
	EXPECT_EQ(mesh_journal_len_ok(&mesh_job_records, MESH_JREC_WORK, 201), 0);
	EXPECT_EQ(mesh_job_records.first, MESH_JREC_SUBMIT);
	/* without kinds: any type but 0, COMMIT empty or a fold, up to the frame's limit */
	EXPECT_EQ(mesh_journal_len_ok(NULL, 9, 16), 1);
	EXPECT_EQ(mesh_journal_len_ok(NULL, 0, 16), 0);
	EXPECT_EQ(mesh_journal_len_ok(NULL, MESH_JREC_COMMIT, 8), 1);
	EXPECT_EQ(mesh_journal_len_ok(NULL, MESH_JREC_COMMIT, 16), 0);
	EXPECT_EQ(mesh_journal_len_ok(NULL, 3, MESH_JOURNAL_MAX_PAYLOAD + 1), 0);
}
