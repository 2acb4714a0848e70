#include "job/job.h"

#include "base/bytes.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/path.h"
#include "job/job_pg.h"
#include "job/place.h"
#include "journal/journal.h"
#include "store/store.h"
#include "store/store_pg.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define HIST_BUCKETS 256

_Static_assert(MESH_JOB_LEASE_MANY_MAX == MESH_LEASE_BLOCK, "lease_many hands out at most one block");

struct node {
	uint32_t hash;
	char name[MESH_NODE_MAX + 1];
	uint64_t count, sum_us;
};

struct fail {
	uint64_t key; /* cid + 1; 0 = empty slot */
	uint32_t attempts, base;
	int last_status;
	int buried; /* the writer of the last FAIL buried it; a RETRY clears */
};

struct held {
	uint64_t cid, token, started_ns;
	uint64_t boot_deadline_ns; /* on this boot's CLOCK_BOOTTIME: a wall-clock step changes nothing */
	unsigned slot;
	uint32_t attempt;
	enum mesh_lease_kind kind;
	uint32_t hnext; /* held[]: the next of its bucket, index + 1 */
};

struct live {
	uint64_t cid;
	struct mesh_lease_stamp st;
};

struct mesh_job {
	char *journal_path, *name, *node;
	uint32_t node_hash;
	struct mesh_lease_holder self; /* this process, refreshed after a fork */
	int detached;
	uint32_t max_attempts, spec_copies;
	int spec_taken; /* mu: a copy's lease was claimed by this handle */
	double spec_mult, spec_q;
	uint64_t spec_min_ns;
	struct mesh_journal *jr;
	struct mesh_store *st;
	struct mesh__jpg *pgj; /* a job in PostgreSQL: every call goes there (job_pg.h) */
	int read_only;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* a busy chunk became free */
	int have_n;
	uint64_t n, words;
	uint64_t n_refused; /* a SUBMIT above MESH_JOB_MAX_CHUNKS (0: none) */
	size_t ident_len;   /* the WORK record's identity (0: none) */
	unsigned char ident[MESH_JOB_IDENTITY_MAX];
	uint64_t *done_bits, *busy_bits;
	uint64_t done, dups, failed_attempts, spec_wins;
	uint64_t cursor;
	uint64_t hist[HIST_BUCKETS], hist_n;
	struct node *nodes;
	size_t nnodes, cnodes, last_node;
	struct fail *fails;
	size_t nfails, cfails;
	struct held *held;
	size_t nheld, cheld;
	uint32_t *hbucket; /* cheld buckets (a power of 2): index + 1 of held[], chained by hnext */
	uint64_t token_seq;
	/* Chunks of our block leases not handed out yet (lease_many). */
	struct held resv[MESH_LEASE_BLOCK];
	size_t nresv;
	uint64_t rate_t0, rate_count, rate; /* leases handed out a second, measured over >= 100 ms */
};

static int bit(const uint64_t *b, uint64_t i)
{
	return (int)((b[i >> 6] >> (i & 63)) & 1);
}
static void bit_set(uint64_t *b, uint64_t i)
{
	b[i >> 6] |= 1ull << (i & 63);
}
static void bit_clr(uint64_t *b, uint64_t i)
{
	b[i >> 6] &= ~(1ull << (i & 63));
}

/* First cid >= from that is not DONE, or n. */
static uint64_t next_not_done(const struct mesh_job *j, uint64_t from)
{
	uint64_t w = from >> 6;
	uint64_t m;
	if (from >= j->n)
		return j->n;
	m = ~j->done_bits[w] & (~0ull << (from & 63));
	while (!m) {
		if (++w >= j->words)
			return j->n;
		m = ~j->done_bits[w];
	}
	uint64_t c = (w << 6) + (uint64_t)__builtin_ctzll(m);
	return c < j->n ? c : j->n;
}

static uint32_t node_hash(const char *name)
{
	uint64_t h = mesh_fnv1a64(MESH_FNV1A64_INIT, name, strlen(name));
	uint32_t v = (uint32_t)(h ^ (h >> 32));
	return v ? v : 1;
}

/* Histogram of durations in microseconds: 8 sub-buckets per power of 2. */
static unsigned hist_bucket(uint64_t us)
{
	unsigned e;
	if (us < 8)
		return (unsigned)us;
	e = 63u - (unsigned)__builtin_clzll(us);
	unsigned b = 8 + (e - 3) * 8 + (unsigned)((us >> (e - 3)) & 7);
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}
static uint64_t hist_value(unsigned b)
{
	if (b < 8)
		return b;
	unsigned e = (b - 8) / 8 + 3, sub = (b - 8) % 8;
	/* the middle of the bucket */
	return ((8ull + sub) << (e - 3)) + ((1ull << (e - 3)) >> 1);
}
static uint64_t hist_quantile_ns(const struct mesh_job *j, double q)
{
	uint64_t want, acc = 0;
	if (!j->hist_n)
		return 0;
	want = (uint64_t)(q * (double)j->hist_n + 0.999999);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < HIST_BUCKETS; b++) {
		acc += j->hist[b];
		if (acc >= want)
			return hist_value(b) * 1000;
	}
	return hist_value(HIST_BUCKETS - 1) * 1000;
}

static struct node *node_find(struct mesh_job *j, uint32_t hash)
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

static struct node *node_add(struct mesh_job *j, uint32_t hash, const char *name, size_t len)
{
	struct node *nd = node_find(j, hash);
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

static struct fail *fail_find(struct mesh_job *j, uint64_t cid, int add)
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

static int is_buried(struct mesh_job *j, uint64_t cid)
{
	struct fail *f;
	if (!j->nfails)
		return 0;
	f = fail_find(j, cid, 0);
	return f && f->buried;
}

/* Applies one record to the index; the caller holds mu. */
static int apply(void *arg, const struct mesh_jrec *r)
{
	struct mesh_job *j = arg;
	const unsigned char *p = r->data;
	if (r->type == MESH_JREC_SUBMIT && r->len >= 8) {
		uint64_t n = mesh_get64le(p);
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
	if (!j->have_n)
		return 0;
	switch (r->type) {
	case MESH_JREC_WORK:
		if (!j->ident_len && r->len > 0 && r->len <= MESH_JOB_IDENTITY_MAX) {
			memcpy(j->ident, p, r->len);
			j->ident_len = r->len;
		}
		break;
	case MESH_JREC_NODE:
		if (r->len >= 5 && !node_add(j, mesh_get32le(p), (const char *)p + 4, r->len - 4u))
			return -ENOMEM;
		break;
	case MESH_JREC_DONE: {
		if (r->len < 16)
			break;
		uint64_t cid = mesh_get64le(p);
		uint32_t dur = mesh_get32le(p + 12);
		if (cid >= j->n)
			break;
		if (bit(j->done_bits, cid)) {
			j->dups++;
			break;
		}
		bit_set(j->done_bits, cid);
		j->done++;
		if (r->flags & 1)
			j->spec_wins++;
		if (dur) {
			struct node *nd = node_find(j, mesh_get32le(p + 8));
			j->hist[hist_bucket(dur)]++;
			j->hist_n++;
			if (nd) {
				nd->count++;
				nd->sum_us += dur;
			}
		}
		break;
	}
	case MESH_JREC_FAIL: {
		if (r->len < 16)
			break;
		uint64_t cid = mesh_get64le(p);
		struct fail *f;
		if (cid >= j->n)
			break;
		f = fail_find(j, cid, 1);
		if (!f)
			return -ENOMEM;
		f->attempts++;
		f->last_status = (int)mesh_get32le(p + 12);
		f->buried = r->flags & 1;
		j->failed_attempts++;
		break;
	}
	case MESH_JREC_DUP:
		if (r->len >= 12 && mesh_get64le(p) < j->n)
			j->dups++;
		break;
	case MESH_JREC_RETRY: {
		if (r->len < 8)
			break;
		uint64_t cid = mesh_get64le(p);
		if (cid == UINT64_MAX) {
			for (size_t i = 0; i < j->cfails; i++)
				if (j->fails[i].key) {
					j->fails[i].base = j->fails[i].attempts;
					j->fails[i].buried = 0;
				}
		} else if (cid < j->n) {
			struct fail *f = fail_find(j, cid, 0);
			if (f) {
				f->base = f->attempts;
				f->buried = 0;
			}
		}
		break;
	}
	}
	return 0;
}

static int sync_locked(struct mesh_job *j)
{
	long n = mesh_journal_tail(j->jr);
	return n < 0 ? (int)n : 0;
}

/* The commit leader's check, under the journal lock: drop DONE/FAIL records
 * of chunks that are DONE by now, and node records already known. */
static int prepare(void *arg, const struct mesh_jrec *recs, size_t n, int *keep)
{
	struct mesh_job *j = arg;
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	for (size_t i = 0; !rc && i < n; i++) {
		const unsigned char *p = recs[i].data;
		if (recs[i].type == MESH_JREC_DONE || recs[i].type == MESH_JREC_FAIL) {
			uint64_t cid = mesh_get64le(p);
			if (cid < j->n && bit(j->done_bits, cid))
				keep[i] = 0;
		} else if (recs[i].type == MESH_JREC_NODE) {
			uint32_t h = mesh_get32le(p);
			if (node_find(j, h))
				keep[i] = 0;
			for (size_t k = 0; k < i && keep[i]; k++)
				if (keep[k] && recs[k].type == MESH_JREC_NODE && mesh_get32le(recs[k].data) == h)
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
	    first.type != MESH_JREC_SUBMIT || first.len < 8)
		return MESH_E_NOJOB;
	*n = mesh_get64le(first.data);
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

int mesh_job_submit(const char *journal, uint64_t n)
{
	return mesh_job_submit_id(journal, n, NULL, 0, NULL);
}

int mesh_job_submit_id(const char *journal, uint64_t n, const void *identity, size_t identity_len,
		       struct mesh_job_why *why)
{
	if (mesh_pg_url_is(journal)) {
		struct mesh_job_why dummy_pg;
		if (!why)
			why = &dummy_pg;
		memset(why, 0, sizeof *why);
		return mesh__jpg_submit(journal, n, identity, identity_len, why);
	}
	unsigned char pay[8];
	struct mesh_jrec recs[2] = {{MESH_JREC_SUBMIT, 0, 8, pay, 0},
				    {MESH_JREC_WORK, 0, (uint16_t)identity_len, identity, 0}};
	struct mesh_job_why dummy;
	const char *whytext;
	int rc;
	if (!why)
		why = &dummy;
	memset(why, 0, sizeof *why);
	why->at = MESH_JOB_AT_JOURNAL;
	if (mesh_path_journal_ok(journal, &whytext))
		return MESH_E_PATH;
	if (n == 0 || n > MESH_JOB_MAX_CHUNKS)
		return MESH_E_RANGE;
	if (identity_len > MESH_JOB_IDENTITY_MAX)
		return MESH_E_TOOBIG;
	mesh_put64le(pay, n);
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

static uint64_t new_token(struct mesh_job *j)
{
	uint64_t t = 0;
	if (getrandom(&t, sizeof t, GRND_NONBLOCK) != (ssize_t)sizeof t) {
		uint64_t x[3] = {mesh_wall_ns(), (uint64_t)getpid(), ++j->token_seq};
		t = mesh_fnv1a64(MESH_FNV1A64_INIT, x, sizeof x);
	}
	return t ? t : 1;
}

/* "<host>.<pid>": only a label for status and node statistics.  Whether
 * a holder is alive is judged from the holder fields of its lease line
 * (store.h), never from this name. */
static char *default_node(void)
{
	char host[64], buf[MESH_NODE_MAX + 1];
	if (gethostname(host, sizeof host) < 0)
		strcpy(host, "host");
	host[sizeof host - 1] = 0;
	for (char *c = host; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
		      *c == '.'))
			*c = '-';
	host[40] = 0;
	snprintf(buf, sizeof buf, "%s.%d", host, (int)getpid());
	return strdup(buf);
}

/* Now, judged as this process (whose pid changes in a forked child). */
static void lease_clock(struct mesh_job *j, struct mesh_lease_clock *c)
{
	if (j->self.pid != (uint32_t)getpid())
		mesh_lease_holder_self(&j->self);
	mesh_lease_clock_now(c, &j->self);
}

void mesh_job_detach_leases(struct mesh_job *j)
{
	if (j->pgj) {
		mesh__jpg_detach(j->pgj);
		return;
	}
	pthread_mutex_lock(&j->mu);
	j->detached = 1;
	pthread_mutex_unlock(&j->mu);
}

void mesh_job_close(struct mesh_job *j)
{
	if (j && j->pgj) {
		mesh__jpg_close(j->pgj);
		j->pgj = NULL;
	}
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

/* A read-only open cuts nothing, so bytes after the last whole record must
 * be an append in flight in another process or damage.  Appenders write
 * under LOCK_EX: a shared lock on our own descriptor waits for them, and
 * what is still not whole then is damage.  0 or MESH_E_CORRUPT (why says
 * where). */
static int check_whole(struct mesh_job *j, struct mesh_job_why *why)
{
	struct stat st;
	int fd, rc = 0;
	if (stat(j->journal_path, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size <= mesh_journal_position(j->jr))
		return 0;
	fd = open(j->journal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_SH) < 0)
		if (errno != EINTR) {
			rc = -errno;
			break;
		}
	if (!rc) {
		pthread_mutex_lock(&j->mu);
		rc = sync_locked(j);
		pthread_mutex_unlock(&j->mu);
	}
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (uint64_t)st.st_size > mesh_journal_position(j->jr))
		rc = MESH_E_CORRUPT;
	close(fd); /* drops the lock: the check below takes LOCK_EX */
	if (rc != MESH_E_CORRUPT)
		return rc;
	/* Bytes past the committed records: whole records of a writer that
	 * died before its COMMIT are not damage (they are simply not counted
	 * yet); anything else is, and the check says where. */
	struct mesh_journal_report rep;
	rc = mesh_journal_check(j->journal_path, 0, &rep);
	if (rc == 0 && !rep.header_bad)
		return 0;
	if (rc != MESH_E_CORRUPT && rc != 0)
		return rc;
	why->damage_off = rep.bad_off != UINT64_MAX ? rep.bad_off : rep.good_end;
	why->size = rep.size;
	why->torn = rep.torn;
	return MESH_E_CORRUPT;
}

/* A job in PostgreSQL: a handle that hands every call to job_pg.c. */
static int open_pg(struct mesh_job **out, const struct mesh_job_opts *o)
{
	struct mesh_job *j;
	int rc;
	if (o->node && !mesh_node_name_ok(o->node))
		return MESH_E_PARSE;
	j = calloc(1, sizeof *j);
	if (!j)
		return -ENOMEM;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->node = o->node ? strdup(o->node) : default_node();
	rc = j->node ? mesh__jpg_open(&j->pgj, o, j->node) : -ENOMEM;
	if (rc) {
		mesh_job_close(j);
		return rc;
	}
	*out = j;
	return 0;
}

int mesh_job_open(struct mesh_job **out, const struct mesh_job_opts *o)
{
	struct mesh_job *j;
	struct mesh_job_why dummy, *why = o->why ? o->why : &dummy;
	const char *whytext;
	int rc;
	memset(why, 0, sizeof *why);
	why->at = MESH_JOB_AT_JOURNAL;
	if (mesh_pg_url_is(o->journal))
		return open_pg(out, o);
	if (mesh_path_journal_ok(o->journal, &whytext))
		return MESH_E_PATH;
	if (o->lockdir && (mesh_path_lockdir_ok(o->lockdir, &whytext) || !mesh_job_name_ok(o->name))) {
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
	rc = journal_file_ok(o->journal, o->read_only, why);
	if (rc)
		return rc;
	j = calloc(1, sizeof *j);
	if (!j)
		return -ENOMEM;
	j->read_only = o->read_only;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->journal_path = strdup(o->journal);
	j->name = strdup(o->name ? o->name : "job");
	j->node = o->node ? strdup(o->node) : default_node();
	mesh_lease_holder_self(&j->self);
	if (!j->journal_path || !j->name || !j->node) {
		mesh_job_close(j);
		return -ENOMEM;
	}
	j->node_hash = node_hash(j->node);
	j->max_attempts = o->max_attempts ? o->max_attempts : MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	j->spec_mult = o->spec_multiplier > 0 ? o->spec_multiplier : 1.5;
	j->spec_q = o->spec_quantile > 0 && o->spec_quantile <= 1 ? o->spec_quantile : 0.75;
	j->spec_min_ns = o->spec_min_ns ? o->spec_min_ns : 100 * MESH_NS_PER_MS;
	j->spec_copies = o->spec_max_copies ? o->spec_max_copies : 1;
	rc = mesh_journal_open(&j->jr, o->journal, apply, j);
	if (rc)
		goto fail;
	mesh_journal_set_prepare(j->jr, prepare, j);
	pthread_mutex_lock(&j->mu);
	if (o->read_only)
		rc = sync_locked(j);
	else
		rc = mesh_journal_recover(j->jr, NULL);
	pthread_mutex_unlock(&j->mu);
	if (!rc && o->read_only)
		rc = check_whole(j, why);
	if (rc)
		goto fail;
	if (!j->have_n) {
		why->n = j->n_refused;
		rc = j->n_refused ? MESH_E_RANGE : MESH_E_NOJOB;
		goto fail;
	}
	if ((o->nchunks && o->nchunks != j->n) ||
	    !same_identity(j->ident, j->ident_len, o->identity, o->identity_len)) {
		why->n = j->n;
		why->identity_len = j->ident_len;
		memcpy(why->identity, j->ident, j->ident_len);
		rc = MESH_E_MISMATCH;
		goto fail;
	}
	if (o->lockdir) {
		rc = mesh_store_file_open(&j->st, o->lockdir, j->name, !o->read_only);
		if (rc == -ENOENT && o->read_only) {
			rc = 0; /* no lock dir: nothing is leased */
			j->st = NULL;
		}
		if (rc) {
			why->at = MESH_JOB_AT_LOCKDIR;
			goto fail;
		}
	}
	*out = j;
	return 0;
fail:
	mesh_job_close(j);
	return rc;
}

uint64_t mesh_job_nchunks(const struct mesh_job *j)
{
	if (j->pgj)
		return mesh__jpg_nchunks(j->pgj);
	return j->n;
}
const char *mesh_job_node(const struct mesh_job *j)
{
	if (j->pgj)
		return mesh__jpg_node(j->pgj);
	return j->node;
}
void mesh_job_commit_stats(const struct mesh_job *j, uint64_t *fsyncs, uint64_t *records)
{
	if (j->pgj) {
		*fsyncs = *records = 0;
		return;
	}
	mesh_journal_stats(j->jr, fsyncs, records);
}

const char *mesh_job_journal_path(const struct mesh_job *j)
{
	if (j->pgj)
		return mesh__jpg_where(j->pgj);
	return j->journal_path;
}

const void *mesh_job_identity(const struct mesh_job *j, size_t *len)
{
	if (j->pgj)
		return mesh__jpg_identity(j->pgj, len);
	*len = j->ident_len;
	return j->ident_len ? j->ident : NULL;
}

/* held[] is found by cid through buckets (cid mod cheld: chunks are
 * leased in order, so a chain is about one long): the driver asks about
 * every chunk it leases and completes, with hundreds held at once (a scan
 * of them each time was a good part of a fast job's CPU). */
static void held_link(struct mesh_job *j, size_t i)
{
	uint32_t *b = &j->hbucket[j->held[i].cid & (j->cheld - 1)];
	j->held[i].hnext = *b;
	*b = (uint32_t)i + 1;
}
static void held_unlink(struct mesh_job *j, size_t i)
{
	uint32_t *p = &j->hbucket[j->held[i].cid & (j->cheld - 1)];
	while (*p != i + 1)
		p = &j->held[*p - 1].hnext;
	*p = j->held[i].hnext;
}
static struct held *held_find(struct mesh_job *j, uint64_t cid)
{
	if (!j->nheld)
		return NULL;
	for (uint32_t k = j->hbucket[cid & (j->cheld - 1)]; k; k = j->held[k - 1].hnext)
		if (j->held[k - 1].cid == cid)
			return &j->held[k - 1];
	return NULL;
}
static void held_del(struct mesh_job *j, struct held *h)
{
	size_t i = (size_t)(h - j->held), last = j->nheld - 1;
	held_unlink(j, i);
	if (i != last) {
		held_unlink(j, last);
		j->held[i] = j->held[last];
		held_link(j, i);
	}
	j->nheld--;
}
static int held_add(struct mesh_job *j, const struct held *h)
{
	if (j->nheld == j->cheld) {
		size_t c = j->cheld ? 2 * j->cheld : 8;
		if (c > UINT32_MAX)
			return -ENOMEM;
		uint32_t *nb = calloc(c, sizeof *nb);
		struct held *p = nb ? realloc(j->held, c * sizeof *p) : NULL;
		if (!p) {
			free(nb);
			return -ENOMEM;
		}
		free(j->hbucket);
		j->hbucket = nb;
		j->held = p;
		j->cheld = c;
		for (size_t i = 0; i < j->nheld; i++)
			held_link(j, i);
	}
	j->held[j->nheld] = *h;
	held_link(j, j->nheld++);
	return 0;
}

/* 1 if this handle holds a live lease of cid; a holding that expired (or
 * was released by a renew to now) is forgotten, so the chunk can be leased
 * again -- by us too. */
static int held_live(struct mesh_job *j, uint64_t cid, const struct mesh_lease_clock *now)
{
	struct held *h = held_find(j, cid);
	if (!h)
		return 0;
	if (h->boot_deadline_ns > now->boot_ns)
		return 1;
	held_del(j, h);
	return 0;
}

static void stamp_init(struct mesh_job *j, struct mesh_lease_stamp *s, const struct mesh_lease_clock *now,
		       uint64_t ttl, uint32_t attempt)
{
	memset(s, 0, sizeof *s);
	s->started_ns = now->wall_ns;
	s->deadline_ns = now->wall_ns + ttl;
	s->boot_deadline_ns = now->boot_ns + ttl;
	s->attempt = attempt;
	s->token = new_token(j);
	snprintf(s->node, sizeof s->node, "%s", j->node);
	s->holder = now->self;
	if (j->detached) {
		s->holder.pid = 0;
		s->holder.pid_start = 0;
	}
}

static uint32_t attempts_of(struct mesh_job *j, uint64_t cid)
{
	struct fail *f = j->nfails ? fail_find(j, cid, 0) : NULL;
	return f ? f->attempts : 0;
}

/* After winning a lease: the chunk may have become DONE meanwhile (its
 * completer appends DONE before it removes the lease file).  1 = keep. */
static int won(struct mesh_job *j, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *s,
	       enum mesh_lease_kind kind, struct mesh_lease *l)
{
	struct held h;
	if (sync_locked(j) == 0 && bit(j->done_bits, cid)) {
		j->st->ops->release(j->st, cid, slot, s->token);
		return 0;
	}
	h.cid = cid;
	h.token = s->token;
	h.started_ns = s->started_ns;
	h.boot_deadline_ns = s->boot_deadline_ns;
	h.slot = slot;
	h.attempt = s->attempt;
	h.kind = kind;
	if (held_add(j, &h)) {
		j->st->ops->release(j->st, cid, slot, s->token);
		return 0;
	}
	l->cid = cid;
	l->attempt = s->attempt;
	l->kind = kind;
	l->deadline_ns = s->deadline_ns;
	l->started_ns = s->started_ns;
	return 1;
}

static int cmp_live_elapsed(const void *a, const void *b)
{
	const struct live *x = a, *y = b;
	return x->st.started_ns < y->st.started_ns ? -1 : x->st.started_ns > y->st.started_ns;
}

static uint64_t straggler_locked(struct mesh_job *j)
{
	uint64_t need = (uint64_t)(j->spec_q * (double)j->n + 0.999999), thr;
	if (!j->hist_n || j->done < need)
		return 0;
	thr = (uint64_t)(j->spec_mult * (double)hist_quantile_ns(j, j->spec_q));
	return thr > j->spec_min_ns ? thr : j->spec_min_ns;
}

uint64_t mesh_job_straggler_ns(struct mesh_job *j)
{
	if (j->pgj)
		return 0;
	uint64_t t;
	pthread_mutex_lock(&j->mu);
	sync_locked(j);
	t = straggler_locked(j);
	pthread_mutex_unlock(&j->mu);
	return t;
}

static struct mesh_place_node place_of(struct mesh_job *j, uint32_t hash)
{
	struct mesh_place_node p = {0, 0};
	struct node *nd = node_find(j, hash);
	if (nd && nd->count) {
		p.samples = nd->count;
		p.mean_ns = nd->sum_us / nd->count * 1000;
	}
	return p;
}

/* Speculative copy of the longest-running straggler that place() gives us. */
static int speculate(struct mesh_job *j, struct live *lv, size_t nlive, const struct mesh_lease_clock *now,
		     uint64_t ttl, struct mesh_lease *l)
{
	uint64_t thr = straggler_locked(j), typical;
	struct mesh_place_node self;
	if (!thr || !nlive)
		return 0;
	typical = hist_quantile_ns(j, 0.5);
	self = place_of(j, j->node_hash);
	qsort(lv, nlive, sizeof *lv, cmp_live_elapsed);
	for (size_t i = 0; i < nlive; i++) {
		uint64_t cid = lv[i].cid, elapsed;
		struct mesh_place_node holder;
		if (lv[i].st.started_ns >= now->wall_ns || bit(j->done_bits, cid) || held_live(j, cid, now))
			continue;
		elapsed = now->wall_ns - lv[i].st.started_ns;
		if (elapsed <= thr || !strcmp(lv[i].st.node, j->node))
			continue;
		holder = place_of(j, node_hash(lv[i].st.node));
		if (mesh_place(&holder, elapsed, &self, 1, typical) != 0)
			continue;
		for (unsigned k = 1; k <= j->spec_copies; k++) {
			struct mesh_lease_stamp s, seen;
			int rc;
			stamp_init(j, &s, now, ttl, lv[i].st.attempt);
			rc = j->st->ops->claim(j->st, cid, k, &s);
			if (rc == MESH_E_STATE)
				rc = j->st->ops->steal(j->st, cid, k, now, &s, &seen);
			if (rc == 0)
				j->spec_taken = 1;
			if (rc == 0 && won(j, cid, k, &s, MESH_LEASE_SPECULATIVE, l))
				return 1;
			if (rc < 0 && rc != MESH_E_STATE && rc != -ENOENT)
				return rc;
		}
	}
	return 0;
}

static int in_resv(const struct mesh_job *j, uint64_t cid)
{
	for (size_t i = 0; i < j->nresv; i++)
		if (j->resv[i].cid == cid)
			return 1;
	return 0;
}

/* Hands out up to k chunks of the reserve into ls (j->mu held), in cid
 * order; a chunk DONE or buried meanwhile is let go.  A block whose
 * deadline is less than ttl/2 away is renewed first, so a lease handed out
 * lives at least that long.  Returns how many. */
static int resv_take(struct mesh_job *j, const struct mesh_lease_clock *now, uint64_t ttl_ns, struct mesh_lease *ls,
		     size_t k)
{
	size_t got = 0, i = 0;
	while (got < k && i < j->nresv) {
		struct held h = j->resv[i];
		memmove(&j->resv[i], &j->resv[i + 1], (j->nresv - i - 1) * sizeof h);
		j->nresv--;
		if (bit(j->done_bits, h.cid) || is_buried(j, h.cid)) {
			j->st->ops->release(j->st, h.cid, 0, h.token);
			continue;
		}
		if (h.boot_deadline_ns < now->boot_ns + ttl_ns / 2) {
			uint64_t bdl = now->boot_ns + ttl_ns;
			if (j->st->ops->renew(j->st, h.cid, 0, h.token, now->wall_ns + ttl_ns, bdl))
				continue; /* lost to a stealer after it expired */
			for (size_t m = 0; m < j->nresv; m++)
				if (j->resv[m].token == h.token && j->resv[m].boot_deadline_ns < bdl)
					j->resv[m].boot_deadline_ns = bdl;
			h.boot_deadline_ns = bdl;
		}
		h.started_ns = now->wall_ns;
		if (held_add(j, &h)) {
			j->st->ops->release(j->st, h.cid, 0, h.token);
			continue;
		}
		ls[got].cid = h.cid;
		ls[got].attempt = h.attempt;
		ls[got].kind = h.kind;
		ls[got].deadline_ns = now->wall_ns + (h.boot_deadline_ns - now->boot_ns);
		ls[got].started_ns = h.started_ns;
		got++;
	}
	return (int)got;
}

/* One lease (mesh_job_lease), j->mu held. */
static int lease_one_locked(struct mesh_job *j, uint64_t ttl_ns, int spec, struct mesh_lease *l)
{
	struct mesh_lease_clock now;
	struct live *lv = NULL;
	size_t nlive = 0, clive = 0;
	int rc;
	rc = sync_locked(j);
	if (rc)
		goto out;
	if (j->done == j->n) {
		rc = MESH_JOB_COMPLETE;
		goto out;
	}
	lease_clock(j, &now);
	/* 0: a chunk of our block leases not handed out yet. */
	if (j->nresv && resv_take(j, &now, ttl_ns, l, 1) == 1) {
		rc = 0;
		goto out;
	}
	/* 1: the next PENDING chunk after our cursor. */
	while ((j->cursor = next_not_done(j, j->cursor)) < j->n) {
		uint64_t cid = j->cursor++;
		struct mesh_lease_stamp s;
		if (is_buried(j, cid) || held_live(j, cid, &now) || in_resv(j, cid))
			continue;
		stamp_init(j, &s, &now, ttl_ns, attempts_of(j, cid) + 1);
		rc = j->st->ops->claim(j->st, cid, 0, &s);
		if (rc == MESH_E_STATE)
			continue;
		if (rc < 0)
			goto out;
		if (won(j, cid, 0, &s, rc == 1 ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH, l)) {
			rc = 0;
			goto out;
		}
	}
	/* 2: the cursor has seen every chunk: sweep what is not DONE for lost
	 * lease files and expired leases. */
	rc = 0;
	for (uint64_t cid = next_not_done(j, 0); cid < j->n; cid = next_not_done(j, cid + 1)) {
		struct mesh_lease_stamp s, seen;
		if (is_buried(j, cid) || held_live(j, cid, &now) || in_resv(j, cid))
			continue;
		stamp_init(j, &s, &now, ttl_ns, attempts_of(j, cid) + 1);
		rc = j->st->ops->claim(j->st, cid, 0, &s);
		if (rc == 0 || rc == 1) {
			if (won(j, cid, 0, &s, rc == 1 ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH, l)) {
				rc = 0;
				goto out;
			}
			continue;
		}
		if (rc != MESH_E_STATE)
			goto out;
		rc = j->st->ops->steal(j->st, cid, 0, &now, &s, &seen);
		if (rc == 0) {
			if (won(j, cid, 0, &s, MESH_LEASE_STOLEN, l))
				goto out;
			continue;
		}
		if (rc == MESH_E_STATE && spec) {
			if (nlive == clive) {
				size_t c = clive ? 2 * clive : 16;
				struct live *p = realloc(lv, c * sizeof *p);
				if (!p) {
					rc = -ENOMEM;
					goto out;
				}
				lv = p;
				clive = c;
			}
			lv[nlive].cid = cid;
			lv[nlive++].st = seen;
		}
		if (rc != MESH_E_STATE && rc != -ENOENT)
			goto out;
		rc = 0;
	}
	/* 3: a speculative copy of a straggler. */
	rc = spec ? speculate(j, lv, nlive, &now, ttl_ns, l) : 0;
	if (rc == 1)
		rc = 0;
	else if (rc == 0)
		rc = j->done == j->n ? MESH_JOB_COMPLETE : MESH_JOB_NONE;
out:
	free(lv);
	return rc;
}

int mesh_job_lease(struct mesh_job *j, uint64_t ttl_ns, int spec, struct mesh_lease *l)
{
	if (j->pgj) {
		size_t got;
		return mesh__jpg_lease_many(j->pgj, ttl_ns, l, 1, &got);
	}
	int rc;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	pthread_mutex_lock(&j->mu);
	rc = lease_one_locked(j, ttl_ns, spec, l);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* How many chunks a block lease should take now: the k asked for, or, for
 * a node handing out leases fast, what it hands out in about 50 ms (so
 * that chunks it holds but has not started keep other nodes waiting no
 * longer than that), at most a block. */
static size_t batch_target(struct mesh_job *j, size_t k)
{
	uint64_t now = mesh_mono_ns(), t;
	if (!j->rate_t0)
		j->rate_t0 = now;
	else if (now - j->rate_t0 >= 100 * MESH_NS_PER_MS) {
		j->rate = j->rate_count * MESH_NS_PER_S / (now - j->rate_t0);
		j->rate_t0 = now;
		j->rate_count = 0;
	}
	t = j->rate / 20;
	if (t < k)
		t = k;
	return t > MESH_LEASE_BLOCK ? MESH_LEASE_BLOCK : (size_t)t;
}

/* Block leases from the cursor on (j->mu held): hands out up to k into ls
 * and keeps the rest of each block in the reserve.  Returns how many were
 * handed out, or a negative error. */
static int lease_blocks(struct mesh_job *j, const struct mesh_lease_clock *now, uint64_t ttl_ns,
			struct mesh_lease *ls, size_t k)
{
	size_t got = 0;
	while (got < k && j->nresv == 0 && (j->cursor = next_not_done(j, j->cursor)) < j->n) {
		uint64_t b = j->cursor / MESH_LEASE_BLOCK, end = (b + 1) * MESH_LEASE_BLOCK, want = 0, gotm = 0;
		size_t target = batch_target(j, k - got), nwant = 0;
		struct mesh_lease_stamp s;
		int rc;
		if (end > j->n)
			end = j->n;
		for (; j->cursor < end && nwant < target; j->cursor++) {
			uint64_t cid = j->cursor;
			if (bit(j->done_bits, cid) || is_buried(j, cid) || held_live(j, cid, now))
				continue;
			want |= 1ull << (cid % MESH_LEASE_BLOCK);
			nwant++;
		}
		if (!want)
			continue;
		stamp_init(j, &s, now, ttl_ns, 1);
		rc = j->st->ops->claim_block(j->st, b, want, now, &s, &gotm);
		if (rc == MESH_E_STATE)
			continue;
		if (rc < 0)
			return got ? (int)got : rc;
		/* DONE meanwhile (the completer appends DONE before it lets go). */
		int synced = sync_locked(j);
		for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++) {
			uint64_t cid = b * MESH_LEASE_BLOCK + i;
			struct held h;
			if (!(gotm >> i & 1))
				continue;
			if (synced < 0 || bit(j->done_bits, cid)) {
				j->st->ops->release(j->st, cid, 0, s.token);
				continue;
			}
			h.cid = cid;
			h.token = s.token;
			h.started_ns = now->wall_ns;
			h.boot_deadline_ns = s.boot_deadline_ns;
			h.slot = 0;
			h.attempt = attempts_of(j, cid) + 1;
			h.kind = rc == 1 ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH;
			j->resv[j->nresv++] = h;
		}
		got += (size_t)resv_take(j, now, ttl_ns, ls + got, k - got);
	}
	return (int)got;
}

int mesh_job_lease_many(struct mesh_job *j, uint64_t ttl_ns, int spec, struct mesh_lease *ls, size_t k, size_t *got)
{
	if (j->pgj)
		return mesh__jpg_lease_many(j->pgj, ttl_ns, ls, k, got);
	struct mesh_lease_clock now;
	int rc;
	size_t n = 0;
	*got = 0;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	if (k == 0)
		return MESH_E_RANGE;
	if (k > MESH_LEASE_BLOCK)
		k = MESH_LEASE_BLOCK;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	if (!rc && j->done == j->n)
		rc = MESH_JOB_COMPLETE;
	if (!rc) {
		lease_clock(j, &now);
		n = (size_t)resv_take(j, &now, ttl_ns, ls, k);
		/* A detached lease outlives us: never a block (its holder is
		 * gone before its chunks are done). */
		if (n < k && !j->detached) {
			rc = lease_blocks(j, &now, ttl_ns, ls + n, k - n);
			if (rc > 0)
				n += (size_t)rc;
			if (rc > 0 || n)
				rc = 0;
		}
		/* The rest one at a time: chunks in blocks of others, lost or
		 * expired leases, a speculative copy (for the first only). */
		while (rc == 0 && n < k) {
			rc = lease_one_locked(j, ttl_ns, n ? 0 : spec, ls + n);
			if (rc == 0)
				n++;
		}
		if (n)
			rc = 0;
	}
	j->rate_count += n;
	pthread_mutex_unlock(&j->mu);
	*got = n;
	return n ? 0 : rc;
}

int mesh_job_renew(struct mesh_job *j, struct mesh_lease *l, uint64_t ttl_ns)
{
	if (j->pgj)
		return mesh__jpg_renew(j->pgj, l, ttl_ns);
	struct held *h;
	struct mesh_lease_clock now;
	uint64_t dl, boot_dl;
	int rc;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	pthread_mutex_lock(&j->mu);
	lease_clock(j, &now);
	dl = now.wall_ns + ttl_ns;
	boot_dl = now.boot_ns + ttl_ns;
	rc = sync_locked(j);
	h = held_find(j, l->cid);
	if (!rc && (!h || l->cid >= j->n || bit(j->done_bits, l->cid)))
		rc = MESH_E_STATE;
	if (!rc)
		rc = j->st->ops->renew(j->st, l->cid, h->slot, h->token, dl, boot_dl);
	if (!rc) {
		l->deadline_ns = dl;
		h->boot_deadline_ns = boot_dl;
	} else if (rc == MESH_E_STATE && h)
		held_del(j, h);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* Removes every lease file of a DONE chunk and forgets our holding. */
static void release_done(struct mesh_job *j, uint64_t cid)
{
	struct held *h = held_find(j, cid);
	if (h)
		held_del(j, h);
	if (!j->st)
		return;
	/* The copies' slots only when this handle ever took one: another
	 * node's copy is its own to release (a lookup of a name that is
	 * not there for every chunk was a good part of a fast job's CPU). */
	for (unsigned k = 0; k <= (j->spec_taken ? j->spec_copies : 0); k++)
		j->st->ops->release(j->st, cid, k, 0);
}

static uint64_t duration_locked(struct mesh_job *j, uint64_t cid, uint64_t given, int *spec)
{
	struct held *h = held_find(j, cid);
	uint64_t now = mesh_wall_ns();
	*spec = h && h->kind == MESH_LEASE_SPECULATIVE;
	if (given)
		return given;
	if (h)
		return now > h->started_ns ? now - h->started_ns : 0;
	if (j->st) {
		struct mesh_lease_stamp s;
		if (j->st->ops->read(j->st, cid, 0, &s) == 0 && s.started_ns < now)
			return now - s.started_ns;
	}
	return 0;
}

static void enc_done(unsigned char *p, uint64_t cid, uint32_t node, uint64_t dur_ns)
{
	uint64_t us = dur_ns / 1000;
	if (dur_ns && !us)
		us = 1;
	mesh_put64le(p, cid);
	mesh_put32le(p + 8, node);
	mesh_put32le(p + 12, us > UINT32_MAX ? UINT32_MAX : (uint32_t)us);
}

static size_t enc_node(struct mesh_job *j, unsigned char *p)
{
	size_t n = strlen(j->node);
	mesh_put32le(p, j->node_hash);
	memcpy(p + 4, j->node, n);
	return 4 + n;
}

/* Journals a DUP record for every IGNORED answer so that status counts
 * duplicates across processes (the tail counts them).  The answers are
 * already final: a failed write loses only the count.  pay and recs are the
 * caller's scratch space, at least 16 bytes and one record per cid. */
static void record_dups(struct mesh_job *j, const uint64_t *cids, const int *results, size_t n, unsigned char *pay,
			struct mesh_jrec *recs)
{
	size_t nrec = 0;
	for (size_t i = 0; i < n; i++) {
		if (results[i] != MESH_JOB_IGNORED)
			continue;
		mesh_put64le(pay + 16 * nrec, cids[i]);
		mesh_put32le(pay + 16 * nrec + 8, j->node_hash);
		mesh_put32le(pay + 16 * nrec + 12, 0);
		recs[nrec] = (struct mesh_jrec){MESH_JREC_DUP, 0, 12, pay + 16 * nrec, 0};
		nrec++;
	}
	if (nrec)
		(void)mesh_journal_append(j->jr, recs, nrec, NULL);
}

int mesh_job_complete_many(struct mesh_job *j, const uint64_t *cids, const uint64_t *durs, size_t n, int *results)
{
	if (j->pgj)
		return mesh__jpg_complete_many(j->pgj, cids, durs, n, results);
	unsigned char nodep[4 + MESH_NODE_MAX];
	unsigned char *pay = NULL;
	struct mesh_jrec *recs = NULL;
	int *keep = NULL;
	size_t *rec_of = NULL; /* results index -> record index, or SIZE_MAX */
	size_t *dup_of = NULL;
	size_t nrec = 0;
	int rc = 0;

	if (j->read_only) {
		for (size_t k = 0; k < n; k++)
			results[k] = MESH_E_STATE;
		return MESH_E_STATE;
	}
	for (size_t i = 0; i < n; i++)
		if (cids[i] >= j->n) {
			for (size_t k = 0; k < n; k++)
				results[k] = cids[k] >= j->n ? MESH_E_RANGE : 0;
			return MESH_E_RANGE;
		}
	if (n == 0)
		return 0;
	pay = malloc(n * 16 + 1);
	recs = malloc((n + 1) * sizeof *recs);
	keep = malloc((n + 1) * sizeof *keep);
	rec_of = malloc(n * sizeof *rec_of);
	dup_of = malloc(n * sizeof *dup_of);
	if (!pay || !recs || !keep || !rec_of || !dup_of) {
		rc = -ENOMEM;
		goto out;
	}
	/* No tail here: the index may be behind other processes, and that is
	 * fine -- the commit leader re-checks every DONE under the journal
	 * lock and drops the ones done meanwhile (they come back IGNORED). */
	pthread_mutex_lock(&j->mu);
	for (;;) {
		int conflict = 0;
		for (size_t i = 0; i < n && !conflict; i++)
			conflict = !bit(j->done_bits, cids[i]) && bit(j->busy_bits, cids[i]);
		if (!conflict)
			break;
		pthread_cond_wait(&j->cv, &j->mu);
	}
	if (!node_find(j, j->node_hash)) {
		recs[nrec].type = MESH_JREC_NODE;
		recs[nrec].flags = 0;
		recs[nrec].len = (uint16_t)enc_node(j, nodep);
		recs[nrec].data = nodep;
		nrec++;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t c = cids[i];
		rec_of[i] = SIZE_MAX;
		dup_of[i] = SIZE_MAX;
		if (bit(j->done_bits, c)) {
			results[i] = MESH_JOB_IGNORED;
			continue;
		}
		if (bit(j->busy_bits, c)) {
			/* the same cid earlier in this call */
			for (size_t k = 0; k < i; k++)
				if (cids[k] == c && rec_of[k] != SIZE_MAX) {
					dup_of[i] = k;
					break;
				}
			continue;
		}
		int spec;
		uint64_t d = duration_locked(j, c, durs ? durs[i] : 0, &spec);
		bit_set(j->busy_bits, c);
		enc_done(pay + 16 * i, c, j->node_hash, d);
		recs[nrec].type = MESH_JREC_DONE;
		recs[nrec].flags = spec ? 1 : 0;
		recs[nrec].len = 16;
		recs[nrec].data = pay + 16 * i;
		rec_of[i] = nrec++;
	}
	pthread_mutex_unlock(&j->mu);

	rc = mesh_journal_append(j->jr, recs, nrec, keep);

	pthread_mutex_lock(&j->mu);
	for (size_t i = 0; i < n; i++)
		if (rec_of[i] != SIZE_MAX)
			bit_clr(j->busy_bits, cids[i]);
	pthread_cond_broadcast(&j->cv);
	/* No tail here: keep[] says what was written; the next call's tail
	 * puts it in the index (the leader's prepare already read the rest). */
	for (size_t i = 0; i < n; i++) {
		size_t src = dup_of[i] != SIZE_MAX ? dup_of[i] : i;
		if (rec_of[src] == SIZE_MAX) {
			if (dup_of[i] == SIZE_MAX && results[i] != MESH_JOB_IGNORED)
				results[i] = MESH_JOB_IGNORED;
			continue;
		}
		if (rc) {
			results[i] = rc;
		} else if (dup_of[i] != SIZE_MAX || !keep[rec_of[src]]) {
			results[i] = MESH_JOB_IGNORED;
		} else {
			results[i] = MESH_JOB_DONE;
		}
	}
	if (!rc)
		for (size_t i = 0; i < n; i++)
			release_done(j, cids[i]);
	pthread_mutex_unlock(&j->mu);
	if (!rc)
		record_dups(j, cids, results, n, pay, recs);
out:
	free(pay);
	free(recs);
	free(keep);
	free(rec_of);
	free(dup_of);
	return rc;
}

int mesh_job_complete(struct mesh_job *j, uint64_t cid, uint64_t duration_ns)
{
	int res = 0, rc = mesh_job_complete_many(j, &cid, &duration_ns, 1, &res);
	return rc ? rc : res;
}

int mesh_job_fail(struct mesh_job *j, uint64_t cid, int status)
{
	if (j->pgj)
		return mesh__jpg_fail(j->pgj, cid, status);
	unsigned char nodep[4 + MESH_NODE_MAX], pay[16];
	struct mesh_jrec recs[2];
	size_t nrec = 0;
	struct held *h;
	uint64_t token = 0;
	unsigned slot = 0;
	int rc, buried = 0;
	if (j->read_only)
		return MESH_E_STATE;
	if (cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	if (rc || bit(j->done_bits, cid)) {
		if (!rc)
			release_done(j, cid);
		pthread_mutex_unlock(&j->mu);
		return rc;
	}
	if (!node_find(j, j->node_hash)) {
		recs[nrec] = (struct mesh_jrec){MESH_JREC_NODE, 0, (uint16_t)enc_node(j, nodep), nodep, 0};
		nrec++;
	}
	mesh_put64le(pay, cid);
	mesh_put32le(pay + 8, j->node_hash);
	mesh_put32le(pay + 12, (uint32_t)status);
	{
		/* The writer decides burial with its own max_attempts, so every
		 * reader agrees whatever its options. */
		struct fail *f = j->nfails ? fail_find(j, cid, 0) : NULL;
		uint32_t since = f ? f->attempts - f->base : 0;
		recs[nrec++] = (struct mesh_jrec){MESH_JREC_FAIL, since + 1 >= j->max_attempts ? 1 : 0, 16, pay, 0};
	}
	pthread_mutex_unlock(&j->mu);

	rc = mesh_journal_append(j->jr, recs, nrec, NULL);

	pthread_mutex_lock(&j->mu);
	if (!rc)
		rc = sync_locked(j);
	if (!rc)
		buried = is_buried(j, cid);
	h = held_find(j, cid);
	if (h) {
		token = h->token;
		slot = h->slot;
		held_del(j, h);
	}
	pthread_mutex_unlock(&j->mu);
	if (token && j->st)
		j->st->ops->release(j->st, cid, slot, token);
	return rc ? rc : buried;
}

int mesh_job_retry(struct mesh_job *j, uint64_t cid)
{
	if (j->pgj)
		return mesh__jpg_retry(j->pgj, cid);
	unsigned char pay[8];
	struct mesh_jrec r = {MESH_JREC_RETRY, 0, 8, pay, 0};
	int count = 0, rc;
	if (j->read_only)
		return MESH_E_STATE;
	if (cid != UINT64_MAX && cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	for (size_t i = 0; !rc && i < j->cfails; i++) {
		struct fail *f = &j->fails[i];
		if (f->key && (cid == UINT64_MAX || f->key == cid + 1) && f->buried && !bit(j->done_bits, f->key - 1))
			count++;
	}
	pthread_mutex_unlock(&j->mu);
	if (rc || count == 0)
		return rc;
	mesh_put64le(pay, cid);
	rc = mesh_journal_append(j->jr, &r, 1, NULL);
	pthread_mutex_lock(&j->mu);
	if (!rc)
		rc = sync_locked(j);
	/* Our own cursor has passed these chunks; the sweep finds them. */
	pthread_mutex_unlock(&j->mu);
	return rc ? rc : count;
}

struct count_live {
	struct mesh_job *j;
	uint64_t n;
};
static void count_live_fn(void *arg, uint64_t cid, const struct mesh_lease_stamp *st)
{
	struct count_live *c = arg;
	(void)st;
	/* A block lease covers chunks buried meanwhile: they count as buried. */
	if (cid < c->j->n && !bit(c->j->done_bits, cid) && !is_buried(c->j, cid))
		c->n++;
}

int mesh_job_status(struct mesh_job *j, struct mesh_job_status *st)
{
	if (j->pgj)
		return mesh__jpg_status(j->pgj, st);
	struct count_live cl = {j, 0};
	int rc;
	memset(st, 0, sizeof *st);
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	if (!rc && j->st) {
		struct mesh_lease_clock now;
		lease_clock(j, &now);
		rc = j->st->ops->each_live(j->st, &now, count_live_fn, &cl);
	}
	if (rc == -ENOENT)
		rc = 0; /* the lock dir is gone: nothing is leased */
	if (!rc) {
		st->n = j->n;
		st->done = j->done;
		for (size_t i = 0; i < j->cfails; i++) {
			struct fail *f = &j->fails[i];
			if (f->key && f->buried && !bit(j->done_bits, f->key - 1))
				st->buried++;
		}
		st->leased = cl.n;
		st->pending = j->n - j->done;
		st->pending = st->pending > st->leased + st->buried ? st->pending - st->leased - st->buried : 0;
		st->duplicates = j->dups;
		st->failed_attempts = j->failed_attempts;
		st->speculative_wins = j->spec_wins;
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static int cmp_fail(const void *a, const void *b)
{
	const struct mesh_job_failure *x = a, *y = b;
	return x->cid < y->cid ? -1 : x->cid > y->cid;
}

int mesh_job_failures(struct mesh_job *j, void (*fn)(const struct mesh_job_failure *, void *), void *arg)
{
	if (j->pgj)
		return mesh__jpg_failures(j->pgj, fn, arg);
	struct mesh_job_failure *v;
	size_t n = 0;
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	v = malloc((j->nfails + 1) * sizeof *v);
	if (!v)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < j->cfails; i++) {
		struct fail *f = &j->fails[i];
		if (!f->key || !f->attempts)
			continue;
		v[n].cid = f->key - 1;
		v[n].attempts = f->attempts;
		v[n].last_status = f->last_status;
		v[n].buried = f->buried && !bit(j->done_bits, f->key - 1);
		n++;
	}
	pthread_mutex_unlock(&j->mu);
	if (!rc) {
		qsort(v, n, sizeof *v, cmp_fail);
		for (size_t i = 0; i < n; i++)
			fn(&v[i], arg);
	}
	free(v);
	return rc;
}

int mesh_job_is_done(struct mesh_job *j, uint64_t cid)
{
	if (j->pgj)
		return mesh__jpg_is_done(j->pgj, cid);
	int rc;
	if (cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	if (!rc)
		rc = bit(j->done_bits, cid);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int mesh_job_nodes(struct mesh_job *j, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg)
{
	if (j->pgj)
		return mesh__jpg_nodes(j->pgj, fn, arg); /* every host's nodes of this job */
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = sync_locked(j);
	for (size_t i = 0; !rc && i < j->nnodes; i++) {
		struct mesh_job_node_stat s = {j->nodes[i].name, j->nodes[i].count,
					       j->nodes[i].count ? j->nodes[i].sum_us / j->nodes[i].count * 1000 : 0};
		fn(&s, arg);
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int mesh_job_wait_work(struct mesh_job *j, uint64_t timeout_ns)
{
	if (j->pgj)
		return mesh__jpg_wait(j->pgj, timeout_ns);
	mesh_sleep_ns(timeout_ns);
	return 0;
}

int mesh_job_drain(struct mesh_job *j, uint64_t ttl_ns, uint64_t maxiter, int speculate_on, volatile int *stop,
		   struct mesh_job_drain_stats *st)
{
	struct mesh_job_drain_stats dummy;
	uint64_t backoff = 5 * MESH_NS_PER_MS;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof *st);
	for (;;) {
		struct mesh_lease l;
		int rc;
		if (stop && *stop)
			return MESH_JOB_INTERRUPTED;
		if (maxiter && st->leased >= maxiter)
			return MESH_JOB_LIMIT;
		rc = mesh_job_lease(j, ttl_ns, speculate_on, &l);
		if (rc == MESH_JOB_COMPLETE || rc < 0)
			return rc;
		if (rc == MESH_JOB_NONE) {
			struct mesh_job_status s;
			rc = mesh_job_status(j, &s);
			if (rc)
				return rc;
			if (s.done == s.n)
				return MESH_JOB_COMPLETE;
			if (s.leased == 0 && s.pending == 0 && s.buried > 0)
				return MESH_E_BURIED;
			/* In PostgreSQL a NOTIFY wakes us for chunks let go:
			 * poll it seldom (expired leases wake nobody). */
			rc = mesh_job_wait_work(j, backoff);
			if (rc < 0)
				return rc;
			if (backoff < (j->pgj ? 1000 : 50) * MESH_NS_PER_MS)
				backoff *= 2;
			continue;
		}
		backoff = 5 * MESH_NS_PER_MS;
		st->leased++;
		st->stolen += l.kind == MESH_LEASE_STOLEN;
		st->speculative += l.kind == MESH_LEASE_SPECULATIVE;
		rc = mesh_job_complete(j, l.cid, 0);
		if (rc < 0)
			return rc;
		if (rc == MESH_JOB_DONE)
			st->done++;
		else
			st->ignored++;
	}
}
