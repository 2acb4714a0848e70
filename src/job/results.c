/* A job's results file (results.h). */
#include "job/results.h"

#include "base/bytes.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "job/job.h"
#include "job/record.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define HDR_SIZE 16u
#define REC_HDR 24u
#define REC_MAGIC 0x52534552u /* "RESR" */
#define VERSION 1u
static const char file_magic[8] = {'M', 'E', 'S', 'H', 'R', 'E', 'S', 1};

struct mesh_results {
	int fd;
	uint64_t n;
	uint64_t end;	   /* bytes of whole records */
	uint64_t *ok_off;  /* [n]: offset of the first RESULT record, 0 = none */
	uint64_t *bad_off; /* [n]: offset of the last FAILURE record, 0 = none */
	int dirty;	   /* appended since the last sync */
	/* Appended records not written yet (they are the file's bytes from
	 * end - blen): one pwrite for many records, at the next sync or when
	 * the buffer is full.  Kept after a failed write, so that a sync
	 * answers 0 only once every record appended before it is on disk. */
	uint8_t *buf;
	size_t blen, bcap;
	pthread_mutex_t mu;
	/* The read window (rd): bytes win_off.. of the file, read in one
	 * pread for the records after the one asked for (a scan, a reader of
	 * results in chunk order).  Under wmu, taken with no other lock. */
	uint8_t *win;
	uint64_t win_off;
	size_t win_len;
	pthread_mutex_t wmu;
};

/* The read window's size; a read larger than a quarter of it skips it. */
#define WIN (256u * 1024)

/* What the buffer holds at most before it is written. */
#define BUF_MAX (64u * 1024)

/* The crc of a record: over kind, cid and len (header bytes 4..20), then
 * the payload. */
static uint32_t rec_crc(const uint8_t *h, const void *p, size_t n)
{
	return mesh_crc32c(mesh_crc32c(0, h + 4, 16), p, n);
}

/* Reads n bytes at off, all below size (bytes of the file that are
 * written and never change after: a record is rewritten only past the
 * written end), through the read window.  The count read, or -errno. */
static ssize_t rd(struct mesh_results *r, void *dst, size_t n, uint64_t off, uint64_t size)
{
	if (n > WIN / 4 || off > size || size - off < n)
		return mesh_pread_full(r->fd, dst, n, (off_t)off);
	pthread_mutex_lock(&r->wmu);
	if (!r->win || off < r->win_off || off + n > r->win_off + r->win_len) {
		if (!r->win && !(r->win = malloc(WIN))) {
			pthread_mutex_unlock(&r->wmu);
			return mesh_pread_full(r->fd, dst, n, (off_t)off);
		}
		ssize_t k = mesh_pread_full(r->fd, r->win, size - off < WIN ? (size_t)(size - off) : WIN, (off_t)off);
		r->win_off = off;
		r->win_len = k > 0 ? (size_t)k : 0;
		if (k < 0) {
			pthread_mutex_unlock(&r->wmu);
			return k;
		}
	}
	size_t have = r->win_len - (size_t)(off - r->win_off);
	if (have > n)
		have = n;
	memcpy(dst, r->win + (off - r->win_off), have);
	pthread_mutex_unlock(&r->wmu);
	return (ssize_t)have;
}

/* Reads and checks the record at off; 0 with *kind, *cid, *len; 1 when it
 * does not check (torn or damaged); -errno.  buf holds the payload after. */
static int read_rec(struct mesh_results *r, uint64_t off, uint64_t size, int *kind, uint64_t *cid, uint32_t *len,
		    uint8_t **buf, size_t *cap)
{
	uint8_t h[REC_HDR];
	if (size - off < REC_HDR)
		return 1;
	ssize_t k = rd(r, h, REC_HDR, off, size);
	if (k < 0)
		return (int)k;
	if ((size_t)k < REC_HDR || mesh_get32le(h) != REC_MAGIC)
		return 1;
	*kind = (int)mesh_get32le(h + 4);
	*cid = mesh_get64le(h + 8);
	*len = mesh_get32le(h + 16);
	if ((*kind != MESH_RESULT_OK && *kind != MESH_RESULT_FAILURE) || *cid >= r->n ||
	    *len > MESH_RESULTS_MAX_LEN || size - off - REC_HDR < *len)
		return 1;
	if (*len + 1 > *cap) {
		uint8_t *b = realloc(*buf, (size_t)*len + 1);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = (size_t)*len + 1;
	}
	k = rd(r, *buf, *len, off + REC_HDR, size);
	if (k < 0)
		return (int)k;
	if ((size_t)k < *len || rec_crc(h, *buf, *len) != mesh_get32le(h + 20))
		return 1;
	return 0;
}

/* Writes the buffered records at their place (r->mu held).  On a failure
 * they stay buffered (what reached the file is cut) for the next try. */
static int flush_locked(struct mesh_results *r)
{
	if (!r->blen)
		return 0;
	uint64_t off = r->end - r->blen;
	int rc = mesh_pwrite_all(r->fd, r->buf, r->blen, (off_t)off);
	if (rc < 0) {
		if (ftruncate(r->fd, (off_t)off) < 0) {
			/* the torn bytes are cut at the next open */
		}
		return rc;
	}
	r->blen = 0;
	return 0;
}

/* Indexes the whole records; what follows the last one (torn or damaged)
 * is cut unless read_only, and its size goes in *cut. */
static int scan(struct mesh_results *r, uint64_t size, uint64_t *cut, int read_only)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t off = HDR_SIZE;
	int rc = 0;
	for (;;) {
		int kind;
		uint64_t cid;
		uint32_t len;
		rc = read_rec(r, off, size, &kind, &cid, &len, &buf, &cap);
		if (rc != 0)
			break;
		if (kind == MESH_RESULT_OK && !r->ok_off[cid])
			r->ok_off[cid] = off;
		if (kind == MESH_RESULT_FAILURE)
			r->bad_off[cid] = off;
		off += REC_HDR + len;
	}
	free(buf);
	/* What the window holds past off may be cut below: forgotten. */
	r->win_len = 0;
	if (rc < 0)
		return rc;
	r->end = off;
	if (off < size && !read_only) {
		/* A torn or damaged tail: a writer died mid-record.  Nothing
		 * after it was ever a chunk's result (DONE follows a sync). */
		if (ftruncate(r->fd, (off_t)off) < 0 || mesh_fsync(r->fd) < 0)
			return -errno;
	}
	if (cut)
		*cut = size - off;
	return 0;
}

static int write_header(int fd)
{
	uint8_t h[HDR_SIZE];
	memcpy(h, file_magic, 8);
	mesh_put32le(h + 8, VERSION);
	mesh_put32le(h + 12, 0);
	return mesh_pwrite_all(fd, h, HDR_SIZE, 0);
}

int mesh_results_create(const char *path, int *fd)
{
	int rc;
	*fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (*fd < 0)
		return -errno;
	if ((rc = write_header(*fd)) < 0) {
		close(*fd);
		*fd = -1;
		unlink(path);
	}
	return rc;
}

static int results_open(struct mesh_results **out, const char *path, uint64_t nchunks, uint64_t *cut, int read_only)
{
	struct stat st;
	int rc;
	*out = NULL;
	if (cut)
		*cut = 0;
	struct mesh_results *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->n = nchunks;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->wmu, NULL);
	r->ok_off = calloc(nchunks ? nchunks : 1, sizeof *r->ok_off);
	r->bad_off = calloc(nchunks ? nchunks : 1, sizeof *r->bad_off);
	r->fd = read_only ? open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
			  : open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (!r->ok_off || !r->bad_off) {
		rc = -ENOMEM;
		goto fail;
	}
	if (r->fd < 0 || fstat(r->fd, &st) < 0) {
		rc = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = MESH_E_PATH;
		goto fail;
	}
	uint8_t h[HDR_SIZE];
	if (st.st_size < (off_t)HDR_SIZE && read_only) {
		rc = MESH_E_FOREIGN; /* not even a header */
		goto fail;
	}
	if (st.st_size < (off_t)HDR_SIZE) {
		/* New (or a creator that died before its header was whole). */
		if ((rc = write_header(r->fd)) < 0)
			goto fail;
		if (ftruncate(r->fd, HDR_SIZE) < 0) {
			rc = -errno;
			goto fail;
		}
		if ((rc = mesh_fsync(r->fd)) < 0 || (rc = mesh_fsync_dir_of(path)) < 0)
			goto fail;
		r->end = HDR_SIZE;
	} else {
		ssize_t k = mesh_pread_full(r->fd, h, HDR_SIZE, 0);
		if (k < 0) {
			rc = (int)k;
			goto fail;
		}
		if (memcmp(h, file_magic, 7) != 0) {
			rc = MESH_E_FOREIGN;
			goto fail;
		}
		if (h[7] != 1 || mesh_get32le(h + 8) != VERSION) {
			rc = MESH_E_VERSION;
			goto fail;
		}
		if ((rc = scan(r, (uint64_t)st.st_size, cut, read_only)) < 0)
			goto fail;
	}
	*out = r;
	return 0;
fail:
	mesh_results_close(r);
	return rc;
}

int mesh_results_open(struct mesh_results **out, const char *path, uint64_t nchunks, uint64_t *cut)
{
	return results_open(out, path, nchunks, cut, 0);
}

/* ---- the check: every DONE chunk has its result ---- */

struct check {
	struct mesh_job *jh;
	struct mesh_results *res;
	unsigned char *carried; /* bit per chunk: its DONE carries its result */
};

static int note_carried(void *arg, uint64_t cid, const void *p, size_t n)
{
	struct check *c = arg;
	(void)p;
	(void)n;
	c->carried[cid / 8] |= (unsigned char)(1u << (cid % 8));
	return 0;
}

int mesh_results_check(const char *path, const char *journal, struct mesh_results_report *rep)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job_status js;
	struct check c = {0};
	int rc;
	memset(rep, 0, sizeof *rep);
	o.journal = journal;
	o.read_only = 1;
	if ((rc = mesh_job_open(&c.jh, &o)) < 0)
		return rc;
	if ((rc = mesh_job_status(c.jh, &js)) < 0)
		goto out;
	rep->n = js.n;
	if (!(c.carried = calloc(js.n / 8 + 1, 1))) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = mesh_rec_each_result(journal, js.n, note_carried, &c)) < 0)
		goto out;
	if ((rc = results_open(&c.res, path, js.n, &rep->tail, 1)) < 0)
		goto out;
	rep->size = c.res->end + rep->tail;
	for (uint64_t cid = 0; cid < js.n; cid++) {
		if (mesh_job_is_done(c.jh, cid) != 1)
			continue;
		rep->done++;
		if (mesh_results_has(c.res, cid))
			rep->in_file++;
		else if (c.carried[cid / 8] & (1u << (cid % 8)))
			rep->in_done++;
		else if (rep->missing++ < MESH_RESULTS_REPORT_MISSING)
			rep->first_missing[rep->missing - 1] = cid;
	}
	rc = rep->missing || rep->tail ? MESH_E_CORRUPT : 0;
out:
	mesh_results_close(c.res);
	free(c.carried);
	mesh_job_close(c.jh);
	return rc;
}

void mesh_results_close(struct mesh_results *r)
{
	if (!r)
		return;
	if (r->fd >= 0) {
		(void)flush_locked(r); /* not synced: best effort */
		close(r->fd);
	}
	free(r->buf);
	free(r->win);
	free(r->ok_off);
	free(r->bad_off);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->wmu);
	free(r);
}

int mesh_results_append(struct mesh_results *r, uint64_t cid, int kind, const void *p, size_t n)
{
	uint8_t h[REC_HDR];
	int rc = 0;
	if (cid >= r->n || (kind != MESH_RESULT_OK && kind != MESH_RESULT_FAILURE))
		return MESH_E_RANGE;
	if (n > MESH_RESULTS_MAX_LEN)
		return MESH_E_TOOBIG;
	mesh_put32le(h, REC_MAGIC);
	mesh_put32le(h + 4, (uint32_t)kind);
	mesh_put64le(h + 8, cid);
	mesh_put32le(h + 16, (uint32_t)n);
	mesh_put32le(h + 20, rec_crc(h, p, n));
	pthread_mutex_lock(&r->mu);
	uint64_t off = r->end;
	if (r->blen && r->blen + REC_HDR + n > BUF_MAX)
		rc = flush_locked(r);
	if (rc == 0 && REC_HDR + n > BUF_MAX) {
		/* Too big to buffer (the buffer is empty): one record, one
		 * place, the header and the payload at off. */
		rc = mesh_pwrite_all(r->fd, h, REC_HDR, (off_t)off);
		if (rc == 0 && n)
			rc = mesh_pwrite_all(r->fd, p, n, (off_t)(off + REC_HDR));
		if (rc < 0 && ftruncate(r->fd, (off_t)off) < 0) {
			/* the torn bytes are cut at the next open */
		}
	} else if (rc == 0 && r->blen + REC_HDR + n > r->bcap) {
		size_t nc = r->bcap ? r->bcap : 4096;
		while (nc < r->blen + REC_HDR + n)
			nc *= 2;
		uint8_t *b = realloc(r->buf, nc);
		if (b) {
			r->buf = b;
			r->bcap = nc;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0 && REC_HDR + n <= BUF_MAX) {
		memcpy(r->buf + r->blen, h, REC_HDR);
		if (n)
			memcpy(r->buf + r->blen + REC_HDR, p, n);
		r->blen += REC_HDR + n;
	}
	if (rc == 0) {
		r->end = off + REC_HDR + n;
		r->dirty = 1;
		if (kind == MESH_RESULT_OK && !r->ok_off[cid])
			r->ok_off[cid] = off;
		if (kind == MESH_RESULT_FAILURE)
			r->bad_off[cid] = off;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int mesh_results_sync(struct mesh_results *r)
{
	pthread_mutex_lock(&r->mu);
	int rc = flush_locked(r);
	int dirty = r->dirty;
	if (rc == 0)
		r->dirty = 0;
	pthread_mutex_unlock(&r->mu);
	if (rc < 0 || !dirty)
		return rc;
	/* Outside the lock: appends go on while the disk works.  What was
	 * written before the flag was taken is covered by this call. */
	rc = mesh_fdatasync(r->fd);
	if (rc < 0) {
		pthread_mutex_lock(&r->mu);
		r->dirty = 1;
		pthread_mutex_unlock(&r->mu);
	}
	return rc;
}

int mesh_results_get(struct mesh_results *r, uint64_t cid, int kind, void **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	if (cid >= r->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&r->mu);
	uint64_t off = kind == MESH_RESULT_OK ? r->ok_off[cid] : r->bad_off[cid];
	uint64_t end = r->end, written = end - r->blen; /* the bytes on disk */
	if (off && off >= written) {
		/* Still in the buffer (appended, not written yet). */
		const uint8_t *h = r->buf + (off - (end - r->blen));
		uint32_t n = mesh_get32le(h + 16);
		uint8_t *b = malloc((size_t)n + 1);
		if (b) {
			memcpy(b, h + REC_HDR, n);
			b[n] = 0;
		}
		pthread_mutex_unlock(&r->mu);
		if (!b)
			return -ENOMEM;
		*data = b;
		*len = n;
		return 0;
	}
	pthread_mutex_unlock(&r->mu);
	if (!off)
		return -ENOENT;
	uint8_t *buf = NULL;
	size_t cap = 0;
	int k;
	uint64_t c;
	uint32_t n;
	int rc = read_rec(r, off, written, &k, &c, &n, &buf, &cap);
	if (rc == 0 && (c != cid || k != kind))
		rc = 1;
	if (rc != 0) {
		free(buf);
		return rc < 0 ? rc : MESH_E_CORRUPT;
	}
	if (!buf && !(buf = malloc(1)))
		return -ENOMEM;
	buf[n] = 0;
	*data = buf;
	*len = n;
	return 0;
}

int mesh_results_has(struct mesh_results *r, uint64_t cid)
{
	if (cid >= r->n)
		return 0;
	pthread_mutex_lock(&r->mu);
	int has = r->ok_off[cid] != 0;
	pthread_mutex_unlock(&r->mu);
	return has;
}

uint64_t mesh_results_size(struct mesh_results *r)
{
	pthread_mutex_lock(&r->mu);
	uint64_t e = r->end;
	pthread_mutex_unlock(&r->mu);
	return e;
}
