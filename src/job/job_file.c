/* The file store of jobs (job_file.h): the journal's index (each record
 * applied as it is tailed), the commit leader's check, submit, open and
 * close, and the ops table that joins the three files. */
#include "job/job_file.h"
#include "job/record.h"
#include "job/spec.h"

#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

uint32_t mesh__jf_node_hash(const char *name)
{
	uint64_t h = mesh_fnv1a64(MESH_FNV1A64_INIT, name, strlen(name));
	uint32_t v = (uint32_t)(h ^ (h >> 32));
	return v ? v : 1;
}

uint64_t mesh__jf_hist_quantile_ns(const struct jfile *j, double q)
{
	return mesh__spec_quantile_ns(j->hist, j->hist_n, q);
}

struct node *mesh__jf_node_find(struct jfile *j, uint32_t hash)
{
	if (j->last_node < j->nnodes && j->nodes[j->last_node].hash == hash)
		return &j->nodes[j->last_node];
	for (size_t i = 0; i < j->nnodes; i++)
		if (j->nodes[i].hash == hash) {
			j->last_node = i;
			return &j->nodes[i];
		}
	return NULL;
}

static struct node *node_add(struct jfile *j, uint32_t hash, const char *name, size_t len)
{
	struct node *nd = mesh__jf_node_find(j, hash);
	if (nd)
		return nd;
	if (j->nnodes == j->cnodes) {
		size_t c = j->cnodes ? 2 * j->cnodes : 8;
		struct node *p = realloc(j->nodes, c * sizeof *p);
		if (!p)
			return NULL;
		j->nodes = p;
		j->cnodes = c;
	}
	nd = &j->nodes[j->nnodes++];
	memset(nd, 0, sizeof *nd);
	nd->hash = hash;
	if (len > MESH_NODE_MAX)
		len = MESH_NODE_MAX;
	memcpy(nd->name, name, len);
	nd->name[len] = 0;
	return nd;
}

struct fail *mesh__jf_fail_find(struct jfile *j, uint64_t cid, int add)
{
	uint64_t key = cid + 1;
	if (add && (j->nfails + 1) * 2 > j->cfails) {
		size_t c = j->cfails ? 2 * j->cfails : 64;
		struct fail *nf = calloc(c, sizeof *nf);
		if (!nf)
			return NULL;
		for (size_t i = 0; i < j->cfails; i++) {
			if (!j->fails[i].key)
				continue;
			size_t h = (size_t)(j->fails[i].key * 0x9e3779b97f4a7c15ull) & (c - 1);
			while (nf[h].key)
				h = (h + 1) & (c - 1);
			nf[h] = j->fails[i];
		}
		free(j->fails);
		j->fails = nf;
		j->cfails = c;
	}
	if (!j->cfails)
		return NULL;
	size_t h = (size_t)(key * 0x9e3779b97f4a7c15ull) & (j->cfails - 1);
	while (j->fails[h].key) {
		if (j->fails[h].key == key)
			return &j->fails[h];
		h = (h + 1) & (j->cfails - 1);
	}
	if (!add)
		return NULL;
	j->fails[h].key = key;
	j->nfails++;
	return &j->fails[h];
}

int mesh__jf_is_buried(struct jfile *j, uint64_t cid)
{
	struct fail *f;
	if (!j->nfails)
		return 0;
	f = mesh__jf_fail_find(j, cid, 0);
	return f && f->buried;
}

/* A SUBMIT record of n chunks: the first one in range sizes the index (its
 * bitmaps); one above MESH_JOB_MAX_CHUNKS before it is kept in n_refused,
 * and any later one changes nothing.  The caller holds mu.  0 or -ENOMEM. */
static int apply_submit(struct jfile *j, uint64_t n)
{
	if (!j->have_n && n > MESH_JOB_MAX_CHUNKS)
		j->n_refused = n;
	if (j->have_n || n == 0 || n > MESH_JOB_MAX_CHUNKS)
		return 0;
	j->words = (n + 63) / 64;
	j->done_bits = calloc(j->words, 8);
	j->busy_bits = calloc(j->words, 8);
	if (!j->done_bits || !j->busy_bits)
		return -ENOMEM;
	j->n = n;
	j->have_n = 1;
	return 0;
}

/* A DONE record: its chunk DONE (a second DONE of it counts as a dup), its
 * node's count and, with a duration, the histogram and the node's mean.
 * The caller holds mu; a record that does not decode or is out of range
 * is skipped. */
static void apply_done(struct jfile *j, const struct mesh_jrec *r)
{
	struct mesh_rec_chunk c;
	if (mesh_rec_chunk_dec(r, &c) || c.cid >= j->n)
		return;
	uint32_t dur = c.value;
	if (bit(j->done_bits, c.cid)) {
		j->dups++;
		return;
	}
	bit_set(j->done_bits, c.cid);
	j->done++;
	if (r->flags & 1)
		j->spec_wins++;
	/* every DONE counts for its node (`mesh job complete` writes
	 * none with a duration); the mean is over those that have one */
	struct node *nd = mesh__jf_node_find(j, c.node);
	if (nd)
		nd->count++;
	if (dur) {
		j->hist[mesh__spec_bucket(dur)]++;
		j->hist_n++;
		if (nd) {
			nd->timed++;
			nd->sum_us += dur;
		}
	}
}

/* A FAIL record: one more attempt of its chunk, with its status and
 * whether its writer buried it.  The caller holds mu; a record that does
 * not decode or is out of range is skipped.  0 or -ENOMEM. */
static int apply_fail(struct jfile *j, const struct mesh_jrec *r)
{
	struct mesh_rec_chunk c;
	struct fail *f;
	if (mesh_rec_chunk_dec(r, &c) || c.cid >= j->n)
		return 0;
	f = mesh__jf_fail_find(j, c.cid, 1);
	if (!f)
		return -ENOMEM;
	f->attempts++;
	f->last_status = (int)c.value;
	f->buried = r->flags & 1;
	j->failed_attempts++;
	return 0;
}

/* A RETRY record (of one chunk, or of all with UINT64_MAX): their attempts
 * so far no longer count and none is buried.  The caller holds mu. */
static void apply_retry(struct jfile *j, const struct mesh_jrec *r)
{
	uint64_t cid;
	if (mesh_rec_u64_dec(r, &cid))
		return;
	if (cid == UINT64_MAX) {
		for (size_t i = 0; i < j->cfails; i++)
			if (j->fails[i].key) {
				j->fails[i].base = j->fails[i].attempts;
				j->fails[i].buried = 0;
			}
	} else if (cid < j->n) {
		struct fail *f = mesh__jf_fail_find(j, cid, 0);
		if (f) {
			f->base = f->attempts;
			f->buried = 0;
		}
	}
}

/* Applies one record to the index; the caller holds mu.  A record too
 * short for its type is skipped (record.h's decoders say so). */
static int apply(void *arg, const struct mesh_jrec *r)
{
	struct jfile *j = arg;
	struct mesh_rec_chunk c;
	uint64_t v;
	if (r->type == MESH_JREC_SUBMIT && mesh_rec_u64_dec(r, &v) == 0)
		return apply_submit(j, v);
	if (!j->have_n)
		return 0;
	switch (r->type) {
	case MESH_JREC_WORK:
		if (!j->ident_len && r->len > 0 && r->len <= MESH_JOB_IDENTITY_MAX) {
			memcpy(j->ident, r->data, r->len);
			j->ident_len = r->len;
			j->ident_owned = (r->flags & MESH_REC_WORK_OWNED) != 0;
		}
		break;
	case MESH_JREC_NODE: {
		uint32_t hash;
		const char *name;
		size_t len;
		if (mesh_rec_node_dec(r, &hash, &name, &len) == 0 && !node_add(j, hash, name, len))
			return -ENOMEM;
		break;
	}
	case MESH_JREC_DONE:
		apply_done(j, r);
		break;
	case MESH_JREC_FAIL:
		return apply_fail(j, r);
	case MESH_JREC_DUP:
		if (mesh_rec_chunk_dec(r, &c) == 0 && c.cid < j->n)
			j->dups++;
		break;
	case MESH_JREC_CLOSED:
		j->closed++;
		break;
	case MESH_JREC_RETRY:
		apply_retry(j, r);
		break;
	}
	return 0;
}

int mesh__jf_sync_locked(struct jfile *j)
{
	long n = mesh_journal_tail(j->jr);
	return n < 0 ? (int)n : 0;
}

/* The commit leader's check, under the journal lock: drop DONE/FAIL records
 * of chunks that are DONE by now, and node records already known. */
static int prepare(void *arg, const struct mesh_jrec *recs, size_t n, int *keep)
{
	struct jfile *j = arg;
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	for (size_t i = 0; !rc && i < n; i++) {
		struct mesh_rec_chunk c;
		uint32_t h, hk;
		const char *name;
		size_t len;
		if ((recs[i].type == MESH_JREC_DONE || recs[i].type == MESH_JREC_FAIL) &&
		    mesh_rec_chunk_dec(&recs[i], &c) == 0) {
			if (c.cid < j->n && bit(j->done_bits, c.cid))
				keep[i] = 0;
		} else if (recs[i].type == MESH_JREC_NODE && mesh_rec_node_dec(&recs[i], &h, &name, &len) == 0) {
			if (mesh__jf_node_find(j, h))
				keep[i] = 0;
			for (size_t k = 0; k < i && keep[i]; k++)
				if (keep[k] && recs[k].type == MESH_JREC_NODE &&
				    mesh_rec_node_dec(&recs[k], &hk, &name, &len) == 0 && hk == h)
					keep[i] = 0;
		}
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* Reads the start of an existing journal: n from its SUBMIT record and the
 * identity from the WORK record created with it.  0, -errno (-ENOENT),
 * MESH_E_PATH (not a regular file: opened non-blocking and never read),
 * the header errors, MESH_E_NOJOB. */
static int read_head(const char *journal, uint64_t *n, unsigned char *ident, size_t *ident_len,
		     struct mesh_job_why *why)
{
	unsigned char buf[MESH_JOURNAL_HDR_SIZE + 2 * MESH_JOURNAL_FRAME + 8 + MESH_JOB_IDENTITY_MAX + 8];
	struct mesh_jrec first, second;
	struct stat st;
	size_t sz, sz2;
	ssize_t got;
	int rc, fd = open(journal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		why->file_type = (unsigned)(st.st_mode & S_IFMT);
		close(fd);
		return MESH_E_PATH;
	}
	got = mesh_pread_full(fd, buf, sizeof buf, 0);
	close(fd);
	if (got < 0)
		return (int)got;
	rc = mesh_journal_header_check(buf, (size_t)got);
	if (rc)
		return rc;
	got -= MESH_JOURNAL_HDR_SIZE;
	if (mesh_journal_decode(buf + MESH_JOURNAL_HDR_SIZE, (size_t)got, &first, &sz) != 1 ||
	    first.type != MESH_JREC_SUBMIT || mesh_rec_u64_dec(&first, n))
		return MESH_E_NOJOB;
	*ident_len = 0;
	if (mesh_journal_decode(buf + MESH_JOURNAL_HDR_SIZE + sz, (size_t)got - sz, &second, &sz2) == 1 &&
	    second.type == MESH_JREC_WORK && second.len > 0 && second.len <= MESH_JOB_IDENTITY_MAX) {
		memcpy(ident, second.data, second.len);
		*ident_len = second.len;
	}
	return 0;
}

static int same_identity(const void *a, size_t alen, const void *b, size_t blen)
{
	return !alen || !blen || (alen == blen && !memcmp(a, b, alen));
}

static int jf_submit(const char *journal, uint64_t n, const void *identity, size_t identity_len,
		     struct mesh_job_why *why)
{
	unsigned char pay[8];
	struct mesh_jrec recs[2] = {{MESH_JREC_SUBMIT, 0, 8, pay, 0},
				    {MESH_JREC_WORK, 0, (uint16_t)identity_len, identity, 0}};
	const char *whytext;
	int rc;
	why->at = MESH_JOB_AT_JOURNAL;
	if (mesh_path_journal_ok(journal, &whytext))
		return MESH_E_PATH;
	if (n == 0 || n > MESH_JOB_MAX_CHUNKS)
		return MESH_E_RANGE;
	if (identity_len > MESH_JOB_IDENTITY_MAX)
		return MESH_E_TOOBIG;
	mesh_rec_u64_enc(pay, n);
	for (int tries = 0; tries < 2; tries++) {
		uint64_t have = 0;
		rc = read_head(journal, &have, why->identity, &why->identity_len, why);
		if (rc == 0) {
			if (have == n && same_identity(why->identity, why->identity_len, identity, identity_len))
				return 0;
			why->n = have;
			return MESH_E_MISMATCH;
		}
		if (rc != -ENOENT)
			return rc;
		rc = mesh_journal_create_many(journal, recs, identity_len ? 2 : 1);
		if (rc != -EEXIST) {
			if (rc)
				why->at = MESH_JOB_AT_JOURNAL_WRITE;
			return rc;
		}
	}
	return -EEXIST;
}


int mesh_job_lockdir_check(const char *lockdir)
{
	return mesh_store_file_check_dir(lockdir);
}

int mesh_job_submit_unsynced(const char *journal, uint64_t n, const void *identity, size_t identity_len, int owned)
{
	unsigned char pay[8];
	struct mesh_jrec recs[2] = {{MESH_JREC_SUBMIT, 0, 8, pay, 0},
				    {MESH_JREC_WORK, owned ? MESH_REC_WORK_OWNED : 0, (uint16_t)identity_len, identity, 0}};
	const char *whytext;
	if (mesh__jstore_for(journal) != &mesh__jstore_file || mesh_path_journal_ok(journal, &whytext))
		return MESH_E_PATH;
	if (n == 0 || n > MESH_JOB_MAX_CHUNKS)
		return MESH_E_RANGE;
	if (identity_len > MESH_JOB_IDENTITY_MAX)
		return MESH_E_TOOBIG;
	if (owned && !identity_len)
		return -EINVAL;
	mesh_rec_u64_enc(pay, n);
	return mesh_journal_create_unsynced(journal, recs, identity_len ? 2 : 1);
}

/* Now, judged as this process (whose pid changes in a forked child). */
void mesh__jf_lease_clock(struct jfile *j, struct mesh_lease_clock *c)
{
	if (j->self.pid != (uint32_t)getpid())
		mesh_lease_holder_self(&j->self);
	mesh_lease_clock_now(c, &j->self);
}

static void jf_detach(struct mesh__jstore *s)
{
	struct jfile *j = jfile_of(s);
	pthread_mutex_lock(&j->mu);
	j->detached = 1;
	pthread_mutex_unlock(&j->mu);
}

static void jf_close_handle(struct jfile *j)
{
	if (!j)
		return;
	mesh_journal_close(j->jr);
	if (j->st)
		j->st->ops->close(j->st);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j->done_bits);
	free(j->busy_bits);
	free(j->hbucket);
	free(j->nodes);
	free(j->fails);
	free(j->held);
	free(j->journal_path);
	free(j->name);
	free(j->node);
	free(j);
}

/* The journal must be a regular file (a FIFO or a device would block or
 * never end; nothing here opens one) and, for a handle that writes,
 * writable: else the first complete fails after the work is done. */
static int journal_file_ok(const char *path, int read_only, struct mesh_job_why *why)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode)) {
		why->file_type = (unsigned)(st.st_mode & S_IFMT);
		return MESH_E_PATH;
	}
	if (!read_only && faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) < 0) {
		why->at = MESH_JOB_AT_JOURNAL_WRITE;
		return -errno;
	}
	return 0;
}

/* A read-only open writes nothing: it takes the whole records after the
 * last COMMIT as a writer would adopt them (mesh_journal_recover_look waits
 * under LOCK_SH for any append in flight), and what is still not whole then
 * is a torn tail (0, with why->torn, damage_off and size set: not counted,
 * the next writer or `check` cuts it) or damage (MESH_E_CORRUPT, why says
 * where). */
static int check_whole(struct jfile *j, struct mesh_job_why *why)
{
	struct stat st;
	int rc;
	if (stat(j->journal_path, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size <= mesh_journal_position(j->jr))
		return 0;
	/* Whole records past the last COMMIT (a writer that died before it, a
	 * COMMIT torn or lost, a journal from before COMMITs) count here as
	 * every writer counts them once it has adopted them: the one rule of
	 * docs/journal.md.  Made durable and trusted, without a write. */
	pthread_mutex_lock(&j->mu);
	rc = mesh_journal_recover_look(j->jr);
	pthread_mutex_unlock(&j->mu);
	if (rc == MESH_E_DAMAGED)
		rc = MESH_E_CORRUPT;
	else if (!rc && stat(j->journal_path, &st) < 0)
		rc = -errno;
	else if (!rc && (uint64_t)st.st_size > mesh_journal_position(j->jr))
		rc = MESH_E_CORRUPT;
	if (rc != MESH_E_CORRUPT)
		return rc;
	/* Bytes past the whole records: a torn tail is not damage (it is not
	 * counted, and the next writer cuts it); anything else is, and the
	 * check says where. */
	struct mesh_journal_report rep;
	rc = mesh_job_journal_check(j->journal_path, 0, &rep);
	if (rc == 0 && !rep.header_bad)
		return 0;
	if (rc != MESH_E_CORRUPT && rc != 0)
		return rc;
	why->damage_off = rep.bad_off != UINT64_MAX ? rep.bad_off : rep.good_end;
	why->size = rep.size;
	why->torn = rep.torn;
	why->identity_damaged = rep.identity;
	if (rep.torn && !rep.header_bad && !rep.identity)
		return 0; /* said in why; counted as every writer counts */
	return MESH_E_CORRUPT;
}

/* o's paths and sizes, checked before anything is opened: MESH_E_PATH (a
 * journal, lock dir or job name not allowed), MESH_E_PARSE (the node name),
 * MESH_E_TOOBIG (the identity), or journal_file_ok's answer; why->at says
 * which. */
static int open_args_ok(const struct mesh_job_opts *o)
{
	struct mesh_job_why *why = o->why;
	const char *whytext;
	why->at = MESH_JOB_AT_JOURNAL;
	if (mesh_path_journal_ok(o->journal, &whytext))
		return MESH_E_PATH;
	if (o->lockdir && ((o->lockdir_private ? mesh_path_lockdir_private_ok(o->lockdir, &whytext)
					       : mesh_path_lockdir_ok(o->lockdir, &whytext)) ||
			   !mesh_job_name_ok(o->name))) {
		why->at = MESH_JOB_AT_LOCKDIR;
		return MESH_E_PATH;
	}
	if (o->node && !mesh_node_name_ok(o->node)) {
		why->at = MESH_JOB_AT_NONE;
		return MESH_E_PARSE;
	}
	if (o->identity_len > MESH_JOB_IDENTITY_MAX) {
		why->at = MESH_JOB_AT_NONE;
		return MESH_E_TOOBIG;
	}
	return journal_file_ok(o->journal, o->read_only, why);
}

/* A handle of o's job for node, with nothing opened yet: its locks, names
 * and options.  NULL when out of memory. */
static struct jfile *handle_new(const struct mesh_job_opts *o, const char *node)
{
	struct jfile *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->read_only = o->read_only;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->journal_path = strdup(o->journal);
	j->name = strdup(o->name ? o->name : "job");
	j->base.ops = &mesh__jstore_file;
	j->node = strdup(node);
	mesh_lease_holder_self(&j->self);
	if (!j->journal_path || !j->name || !j->node) {
		jf_close_handle(j);
		return NULL;
	}
	j->node_hash = mesh__jf_node_hash(j->node);
	j->max_attempts = o->max_attempts ? o->max_attempts : MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	mesh__spec_rule_of(&j->spec, o);
	return j;
}

/* Opens j's journal and builds its index: a handle that writes recovers
 * the journal (mesh_journal_recover), a read-only one tails it and then
 * checks what is past the last COMMIT (check_whole).  0 or the journal's
 * error; on MESH_E_DAMAGED why says where, and whether a repair keeps the
 * identity. */
static int journal_load(struct jfile *j, const struct mesh_job_opts *o)
{
	struct mesh_job_why *why = o->why;
	int rc = mesh_journal_open(&j->jr, o->journal, apply, j);
	if (rc)
		return rc;
	mesh_journal_set_prepare(j->jr, prepare, j);
	mesh_journal_set_kinds(j->jr, &mesh_job_records);
	pthread_mutex_lock(&j->mu);
	if (o->read_only)
		rc = mesh__jf_sync_locked(j);
	else
		rc = mesh_journal_recover(j->jr, NULL);
	pthread_mutex_unlock(&j->mu);
	if (rc == MESH_E_DAMAGED) {
		/* Where, and whether a repair can keep it (why->identity_damaged). */
		struct mesh_journal_report rep;
		if (mesh_job_journal_check(o->journal, 0, &rep) == MESH_E_CORRUPT) {
			why->damage_off = rep.bad_off;
			why->size = rep.size;
			why->identity_damaged = rep.identity;
		}
	}
	if (!rc && o->read_only)
		rc = check_whole(j, why);
	return rc;
}

/* The loaded journal is the job o asks for: it has a SUBMIT (else
 * MESH_E_RANGE for one of too many chunks, or MESH_E_NOJOB), o's count of
 * chunks if o gives one, an identity like o's and, for a handle that
 * writes an owner's journal, o's identity exactly (else MESH_E_MISMATCH,
 * why saying what the journal has).  0 or that error. */
static int job_matches(const struct jfile *j, const struct mesh_job_opts *o)
{
	struct mesh_job_why *why = o->why;
	if (!j->have_n) {
		why->n = j->n_refused;
		return j->n_refused ? MESH_E_RANGE : MESH_E_NOJOB;
	}
	/* An owner's journal is written only by a handle of its identity
	 * (meshd's jobs: their results are meshd's); anyone may read it. */
	int not_owner = j->ident_owned && !o->read_only &&
			(o->identity_len != j->ident_len || memcmp(o->identity, j->ident, j->ident_len) != 0);
	if ((o->nchunks && o->nchunks != j->n) || not_owner ||
	    !same_identity(j->ident, j->ident_len, o->identity, o->identity_len)) {
		why->owned = not_owner;
		why->n = j->n;
		why->identity_len = j->ident_len;
		memcpy(why->identity, j->ident, j->ident_len);
		return MESH_E_MISMATCH;
	}
	return 0;
}

/* Opens the lease files of j's job in o->lockdir, creating them for a
 * handle that writes; a read-only handle with no lock dir has none
 * (nothing is leased).  0, or the store's error with why->at the lock dir. */
static int lockdir_open(struct jfile *j, const struct mesh_job_opts *o)
{
	int rc = mesh_store_file_open(&j->st, o->lockdir, j->name,
				      (o->read_only ? 0 : MESH_STORE_FILE_CREATE) |
					      (o->lockdir_private ? MESH_STORE_FILE_PRIVATE : 0));
	if (rc == -ENOENT && o->read_only) {
		rc = 0; /* no lock dir: nothing is leased */
		j->st = NULL;
	}
	if (rc)
		o->why->at = MESH_JOB_AT_LOCKDIR;
	return rc;
}

static int jf_open(struct mesh__jstore **out, const struct mesh_job_opts *o, const char *node)
{
	struct jfile *j;
	int rc = open_args_ok(o);
	if (rc)
		return rc;
	j = handle_new(o, node);
	if (!j)
		return -ENOMEM;
	rc = journal_load(j, o);
	if (!rc)
		rc = job_matches(j, o);
	if (!rc && o->lockdir)
		rc = lockdir_open(j, o);
	if (rc) {
		jf_close_handle(j);
		return rc;
	}
	*out = &j->base;
	return 0;
}

static void jf_close(struct mesh__jstore *s)
{
	jf_close_handle(jfile_of(s));
}

static uint64_t jf_nchunks(const struct mesh__jstore *s)
{
	return ((const struct jfile *)s)->n;
}

static void jf_commit_stats(const struct mesh__jstore *s, uint64_t *fsyncs, uint64_t *records)
{
	mesh_journal_stats(((const struct jfile *)s)->jr, fsyncs, records);
}

static const char *jf_where(const struct mesh__jstore *s)
{
	return ((const struct jfile *)s)->journal_path;
}

static const void *jf_identity(const struct mesh__jstore *s, size_t *len)
{
	const struct jfile *j = (const struct jfile *)s;
	*len = j->ident_len;
	return j->ident_len ? j->ident : NULL;
}

const struct mesh__jstore_ops mesh__jstore_file = {
	.kind = "file",
	.idle_max_ns = 50 * MESH_NS_PER_MS,
	.submit = jf_submit,
	.open = jf_open,
	.close = jf_close,
	.detach = jf_detach,
	.lease = mesh__jf_lease,
	.lease_many = mesh__jf_lease_many,
	.renew = mesh__jf_renew,
	.complete_many = mesh__jf_complete_many,
	.result_max = MESH_REC_RESULT_MAX,
	.fail = mesh__jf_fail,
	.retry = mesh__jf_retry,
	.status = mesh__jf_status,
	.failures = mesh__jf_failures,
	.is_done = mesh__jf_is_done,
	.done_word = mesh__jf_done_word,
	.feed = mesh__jf_feed,
	.nodes = mesh__jf_nodes,
	.note_closed = mesh__jf_note_closed,
	.wait_work = mesh__jf_wait_work,
	.straggler_ns = mesh__jf_straggler_ns,
	.nchunks = jf_nchunks,
	.where = jf_where,
	.identity = jf_identity,
	.commit_stats = jf_commit_stats,
};
