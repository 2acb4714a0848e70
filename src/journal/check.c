/* mesh_journal_check: verify a whole journal, resynchronise past damage,
 * repair by cutting a torn tail or by rewriting the file (journal.h). */
#include "journal/journal.h"

#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC_MAX (MESH_JOURNAL_FRAME + MESH_JOURNAL_MAX_PAYLOAD + 8)
#define WIN (1u << 20)

/* A read window over the file: at() returns the bytes at off (at least a
 * whole record's worth unless the file ends first). */
struct win {
	int fd;
	unsigned char *buf; /* WIN + REC_MAX */
	uint64_t base;
	size_t got;
	int err;
	const struct mesh_journal_kinds *kinds; /* what a record looks like (NULL: any) */
};

static const unsigned char *at(struct win *w, uint64_t off, size_t *avail)
{
	if (off < w->base || off - w->base + REC_MAX > w->got) {
		ssize_t got = mesh_pread_full(w->fd, w->buf, WIN + REC_MAX, (off_t)off);
		if (got < 0) {
			w->err = (int)got;
			got = 0;
		}
		w->base = off;
		w->got = (size_t)got;
	}
	*avail = off - w->base < w->got ? w->got - (size_t)(off - w->base) : 0;
	return w->buf + (off - w->base);
}

/* Output of the rewrite: kept records are buffered and written in blocks. */
struct out {
	int fd;
	unsigned char *buf;
	size_t n;
	int err;
	uint64_t fold; /* of the records emitted since the last COMMIT */
};

static void emit(struct out *o, const void *p, size_t n)
{
	if (o->err)
		return;
	if (o->n + n > WIN) {
		o->err = mesh_write_all(o->fd, o->buf, o->n);
		o->n = 0;
	}
	memcpy(o->buf + o->n, p, n);
	o->n += n;
}

static void note_damage(struct mesh_journal_report *rep, uint64_t off, uint64_t end)
{
	if (rep->bad_off == UINT64_MAX) {
		rep->bad_off = off;
		rep->good_end = off;
	}
	if (rep->ndropped < MESH_JOURNAL_RANGES)
		rep->dropped[rep->ndropped] = (struct mesh_journal_range){off, end - off};
	rep->ndropped++;
	rep->dropped_bytes += end - off;
}

/* With o: copies a whole record, a COMMIT made anew for what was copied
 * before it (records dropped as damage change its batch). */
static void emit_record(struct out *o, const struct mesh_jrec *r, const unsigned char *p, size_t sz)
{
	unsigned char commit_rec[MESH_JOURNAL_COMMIT_SIZE];
	if (r->type == MESH_JREC_COMMIT) {
		emit(o, commit_rec, mesh_journal_encode_commit(commit_rec, o->fold));
		o->fold = 0;
		return;
	}
	emit(o, p, sz);
	o->fold = mesh_journal_fold(o->fold, p);
}

/* One pass over the records after the header: counts them into rep and,
 * with o, copies every whole one.  After a bad record it resynchronises at
 * the next 8-aligned offset that holds a whole record of a known type and a
 * sane length: a checksum match inside garbage alone never makes a record.
 * A COMMIT that does not vouch for the records before it (their fold) is
 * damage too; after damage, the next COMMIT's batch is not known whole, so
 * its fold is not checked. */
static int scan(struct win *w, uint64_t size, struct mesh_journal_report *rep, struct out *o, uint64_t *tail_fold,
		uint64_t *tail_n)
{
	uint64_t off = MESH_JOURNAL_HDR_SIZE, fold = 0, since = 0, first_end = 0;
	int unsure = 0, committed = 0; /* a COMMIT seen before any damage */
	int a_commit = 0;	       /* the first damage is one COMMIT's bytes (its frame says so) */
	rep->good_end = size;
	while (off < size) {
		struct mesh_jrec r;
		size_t sz, avail;
		const unsigned char *p = at(w, off, &avail);
		if (mesh_journal_decode(p, avail, &r, &sz) == 1 &&
		    (r.type != MESH_JREC_COMMIT || unsure || mesh_journal_commit_vouches(&r, fold))) {
			rep->records++;
			rep->by_type[r.type]++;
			if (rep->bad_off != UINT64_MAX)
				rep->after_bad++;
			if (o)
				emit_record(o, &r, p, sz);
			if (off == MESH_JOURNAL_HDR_SIZE)
				first_end = off + sz;
			if (r.type == MESH_JREC_COMMIT) {
				committed |= rep->bad_off == UINT64_MAX;
				fold = 0;
				since = 0;
				unsure = 0;
			} else {
				fold = mesh_journal_fold(fold, p);
				since++;
			}
			off += sz;
			continue;
		}
		unsure = 1;
		uint64_t f = off + 8;
		for (; f < size; f += 8) {
			p = at(w, f, &avail);
			if (mesh_journal_decode(p, avail, &r, &sz) == 1 && mesh_journal_len_ok(w->kinds, r.type, r.len))
				break;
		}
		if (f > size)
			f = size;
		if (rep->bad_off == UINT64_MAX && first_end) {
			/* A damaged record whose frame still reads as a COMMIT of
			 * the range's length: no record of the work's is lost
			 * with it (a WORK would need four bits changed to read so). */
			p = at(w, off, &avail);
			uint16_t len = avail >= 8 ? (uint16_t)(p[6] | p[7] << 8) : 0xffff;
			a_commit = avail >= 8 && p[4] == MESH_JREC_COMMIT &&
				   (len == 0 || len == MESH_JOURNAL_COMMIT_LEN) && f - off == mesh_journal_size(len);
		}
		note_damage(rep, off, f);
		off = f;
	}
	rep->torn = rep->ndropped == 1 && rep->after_bad == 0;
	/* The first batch names the work (created whole, with its COMMIT):
	 * damage before the first COMMIT is in it, unless it is that COMMIT.  A journal without any
	 * COMMIT has no batches to tell: its first record and the place of the
	 * one after (a WORK's) name it. */
	if (rep->bad_off != UINT64_MAX && !committed && !a_commit)
		rep->identity = rep->by_type[MESH_JREC_COMMIT] > 0 || rep->bad_off <= (first_end ? first_end : MESH_JOURNAL_HDR_SIZE);
	/* the records after the last COMMIT, when nothing but a torn tail
	 * follows them */
	if (tail_fold) {
		*tail_fold = fold;
		*tail_n = rep->ndropped == 0 || rep->torn ? since : 0;
	}
	return w->err;
}

/* Writes header + every whole record + a COMMIT to a temp file beside path,
 * makes it durable and renames it over path. */
static int rewrite(const char *path, struct win *w, uint64_t size, const unsigned char *hdr, mode_t mode)
{
	char tmp[PATH_MAX];
	struct mesh_journal_report scratch;
	struct out o = {.fd = -1};
	unsigned char commit_rec[MESH_JOURNAL_COMMIT_SIZE];
	int rc;
	if (snprintf(tmp, sizeof tmp, "%s.%d.repair", path, (int)getpid()) >= (int)sizeof tmp)
		return -ENAMETOOLONG;
	o.buf = malloc(WIN);
	if (!o.buf)
		return -ENOMEM;
	o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode & 0777);
	if (o.fd < 0) {
		free(o.buf);
		return -errno;
	}
	memset(&scratch, 0, sizeof scratch);
	scratch.bad_off = UINT64_MAX;
	emit(&o, hdr, MESH_JOURNAL_HDR_SIZE);
	rc = scan(w, size, &scratch, &o, NULL, NULL);
	emit(&o, commit_rec, mesh_journal_encode_commit(commit_rec, o.fold));
	if (!rc)
		rc = o.err;
	if (!rc && o.n)
		rc = mesh_write_all(o.fd, o.buf, o.n);
	if (!rc)
		rc = mesh_fdatasync(o.fd);
	close(o.fd);
	free(o.buf);
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		rc = mesh_fsync_dir_of(path);
	return rc;
}

/* The first record is whole and of the type every journal of this user
 * starts with (the job's: SUBMIT). */
static int first_is_first(struct win *w, uint64_t size)
{
	struct mesh_jrec r;
	size_t sz, avail;
	const unsigned char *p;
	if (size <= MESH_JOURNAL_HDR_SIZE)
		return 0;
	p = at(w, MESH_JOURNAL_HDR_SIZE, &avail);
	return mesh_journal_decode(p, avail, &r, &sz) == 1 && (!w->kinds || r.type == w->kinds->first) &&
	       mesh_journal_len_ok(w->kinds, r.type, r.len);
}

int mesh_journal_check(const char *path, int repair, struct mesh_journal_report *rep)
{
	return mesh_journal_check_kinds(path, repair, NULL, rep);
}

int mesh_journal_check_kinds(const char *path, int repair, const struct mesh_journal_kinds *kinds,
			     struct mesh_journal_report *rep)
{
	unsigned char hdr[MESH_JOURNAL_HDR_SIZE];
	struct win w = {.fd = -1, .kinds = kinds};
	struct stat st;
	ssize_t got;
	int rc, fd;
	memset(rep, 0, sizeof *rep);
	rep->bad_off = UINT64_MAX;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && !repair && (errno == EACCES || errno == EROFS))
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	got = mesh_pread_full(fd, hdr, sizeof hdr, 0);
	rc = got < 0 ? (int)got : mesh_journal_header_check(hdr, (size_t)got);
	if (rc == MESH_E_CORRUPT && got == (ssize_t)sizeof hdr) {
		rep->header_bad = 1;
		rc = 0;
	}
	if (rc)
		goto out;
	/* Under LOCK_EX no append is in flight: whatever is not whole is
	 * damage, and no writer can slip a record in while we rewrite. */
	rc = mesh_flock_ex(fd);
	if (rc)
		goto out;
	w.fd = fd;
	w.buf = malloc(WIN + REC_MAX);
	if (!w.buf) {
		rc = -ENOMEM;
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	rep->size = (uint64_t)st.st_size;
	uint64_t tail_fold = 0, tail_n = 0;
	rc = scan(&w, rep->size, rep, NULL, &tail_fold, &tail_n);
	if (rc || (!rep->header_bad && rep->ndropped == 0 && (!tail_n || repair < 1)))
		goto out;
	if (rep->identity) {
		/* Repaired without the records that name its work, a journal
		 * would belong to no work, or take any command's: refused. */
		rc = MESH_E_CORRUPT;
	} else if (!rep->header_bad && (rep->torn || rep->ndropped == 0) && repair >= 1) {
		uint64_t end = rep->ndropped ? rep->good_end : rep->size;
		if (rep->ndropped && ftruncate(fd, (off_t)end) < 0)
			rc = -errno;
		else
			rc = mesh_fdatasync(fd);
		if (!rc && tail_n) {
			/* adopted, as the next writer would: durable now, and
			 * a COMMIT says so to every reader */
			unsigned char commit_rec[MESH_JOURNAL_COMMIT_SIZE];
			size_t cn = mesh_journal_encode_commit(commit_rec, tail_fold);
			rc = mesh_pwrite_all(fd, commit_rec, cn, (off_t)end);
			if (!rc)
				rc = mesh_fdatasync(fd);
			if (!rc) {
				rep->adopted = tail_n;
				rep->records++;
				rep->by_type[MESH_JREC_COMMIT]++;
			}
		}
		rep->repaired = !rc;
	} else if (repair >= 2 && (!rep->header_bad || first_is_first(&w, rep->size))) {
		if (rep->header_bad)
			mesh_journal_header(hdr);
		rc = rewrite(path, &w, rep->size, hdr, st.st_mode);
		rep->repaired = !rc;
	} else {
		rc = MESH_E_CORRUPT;
	}
out:
	free(w.buf);
	close(fd); /* drops the lock, after the rename: waiters then see a new file */
	return rc;
}
