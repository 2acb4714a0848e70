#include "job/record.h"

#include "base/bytes.h"
#include "base/err.h"
#include "job/job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t mesh_rec_u64_enc(unsigned char *p, uint64_t v)
{
	mesh_put64le(p, v);
	return MESH_REC_U64_LEN;
}

static size_t chunk_enc(unsigned char *p, uint64_t cid, uint32_t node, uint32_t value)
{
	mesh_put64le(p, cid);
	mesh_put32le(p + 8, node);
	mesh_put32le(p + 12, value);
	return 16;
}

size_t mesh_rec_done_enc(unsigned char *p, uint64_t cid, uint32_t node, uint64_t dur_ns)
{
	uint64_t us = dur_ns / 1000;
	if (dur_ns && !us)
		us = 1;
	return chunk_enc(p, cid, node, us > UINT32_MAX ? UINT32_MAX : (uint32_t)us);
}

size_t mesh_rec_done_result_enc(unsigned char *p, uint64_t cid, uint32_t node, uint64_t dur_ns, const void *res,
				size_t n)
{
	mesh_rec_done_enc(p, cid, node, dur_ns);
	if (n)
		memcpy(p + 16, res, n);
	return 16 + n;
}

size_t mesh_rec_fail_enc(unsigned char *p, uint64_t cid, uint32_t node, int status)
{
	return chunk_enc(p, cid, node, (uint32_t)status);
}

size_t mesh_rec_dup_enc(unsigned char *p, uint64_t cid, uint32_t node)
{
	chunk_enc(p, cid, node, 0);
	return MESH_REC_DUP_LEN;
}

size_t mesh_rec_closed_enc(unsigned char *p, uint32_t node)
{
	mesh_put32le(p, node);
	return MESH_REC_CLOSED_LEN;
}

size_t mesh_rec_node_enc(unsigned char *p, uint32_t hash, const char *name, size_t len)
{
	if (len > MESH_REC_NODE_MAX - 4)
		len = MESH_REC_NODE_MAX - 4;
	mesh_put32le(p, hash);
	memcpy(p + 4, name, len);
	return 4 + len;
}

int mesh_rec_u64_dec(const struct mesh_jrec *r, uint64_t *v)
{
	if (r->len < MESH_REC_U64_LEN)
		return MESH_E_PARSE;
	*v = mesh_get64le(r->data);
	return 0;
}

int mesh_rec_chunk_dec(const struct mesh_jrec *r, struct mesh_rec_chunk *c)
{
	const unsigned char *p = r->data;
	if (r->len < (r->type == MESH_JREC_DUP ? MESH_REC_DUP_LEN : 16))
		return MESH_E_PARSE;
	c->cid = mesh_get64le(p);
	c->node = mesh_get32le(p + 8);
	c->value = r->type == MESH_JREC_DUP ? 0 : mesh_get32le(p + 12);
	return 0;
}

int mesh_rec_done_result(const struct mesh_jrec *r, const void **p, size_t *n)
{
	if (r->type != MESH_JREC_DONE || !(r->flags & MESH_REC_DONE_RESULT) || r->len < 16)
		return 0;
	*p = (const unsigned char *)r->data + 16;
	*n = r->len - 16u;
	return 1;
}

struct each_ctx {
	unsigned char *seen;
	uint64_t n;
	int (*fn)(void *, uint64_t, const void *, size_t);
	void *arg;
};

static int each_rec(void *arg, const struct mesh_jrec *r)
{
	struct each_ctx *c = arg;
	struct mesh_rec_chunk ch;
	const void *p;
	size_t n;
	if (r->type != MESH_JREC_DONE || mesh_rec_chunk_dec(r, &ch) || ch.cid >= c->n)
		return 0;
	/* The first DONE is the chunk's (a later one is a duplicate). */
	if (c->seen[ch.cid / 8] & (1u << (ch.cid % 8)))
		return 0;
	c->seen[ch.cid / 8] |= (unsigned char)(1u << (ch.cid % 8));
	return mesh_rec_done_result(r, &p, &n) ? c->fn(c->arg, ch.cid, p, n) : 0;
}

int mesh_rec_each_result(const char *path, uint64_t nchunks,
			 int (*fn)(void *arg, uint64_t cid, const void *p, size_t n), void *arg)
{
	struct each_ctx c = {calloc(nchunks / 8 + 1, 1), nchunks, fn, arg};
	struct mesh_journal *jr = NULL;
	long got;
	int rc;
	if (!c.seen)
		return -ENOMEM;
	rc = mesh_journal_open(&jr, path, each_rec, &c);
	if (rc == 0) {
		mesh_journal_set_kinds(jr, &mesh_job_records);
		while ((got = mesh_journal_tail(jr)) > 0)
			;
		rc = got < 0 ? (int)got : 0;
		mesh_journal_close(jr);
	}
	free(c.seen);
	return rc;
}

int mesh_rec_node_dec(const struct mesh_jrec *r, uint32_t *hash, const char **name, size_t *len)
{
	if (r->len < 5)
		return MESH_E_PARSE;
	*hash = mesh_get32le(r->data);
	*name = (const char *)r->data + 4;
	*len = r->len - 4u;
	return 0;
}

int mesh_rec_len_ok(uint8_t type, uint16_t len)
{
	switch (type) {
	case MESH_JREC_SUBMIT:
	case MESH_JREC_RETRY:
		return len == MESH_REC_U64_LEN;
	case MESH_JREC_NODE:
		return len >= 5 && len <= MESH_REC_NODE_MAX;
	case MESH_JREC_DONE:
		return len >= 16 && len <= 16 + MESH_REC_RESULT_MAX;
	case MESH_JREC_FAIL:
		return len == 16;
	case MESH_JREC_DUP:
		return len == MESH_REC_DUP_LEN;
	case MESH_JREC_COMMIT:
		return len == 0 || len == MESH_JOURNAL_COMMIT_LEN;
	case MESH_JREC_WORK:
		return len >= 1 && len <= MESH_JOB_IDENTITY_MAX;
	case MESH_JREC_CLOSED:
		return len == MESH_REC_CLOSED_LEN;
	default:
		return 0;
	}
}

const struct mesh_journal_kinds mesh_job_records = {mesh_rec_len_ok, MESH_JREC_SUBMIT};

int mesh_job_journal_check(const char *path, int repair, struct mesh_journal_report *rep)
{
	return mesh_journal_check_kinds(path, repair, &mesh_job_records, rep);
}
