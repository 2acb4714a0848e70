/* The journal reader and recovery on arbitrary bytes: never crashes, never
 * hands out a record whose checksum fails.  Also the lease line parser. */
#include "base/crc.h"
#include "job/job.h"
#include "job/record.h"
#include "journal/journal.h"
#include "store/store.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check_record(const struct mesh_jrec *r)
{
	const unsigned char *frame = (const unsigned char *)r->data - MESH_JOURNAL_FRAME;
	size_t size = mesh_journal_size(r->len);
	uint32_t want;
	memcpy(&want, frame, 4);
	if (r->len > MESH_JOURNAL_MAX_PAYLOAD || mesh_crc32c(0, frame + 4, size - 4) != want)
		abort();
}

/* The chunk count the job layer would allocate for, from the first record;
 * UINT64_MAX when there is none. */
static uint64_t submitted_n(const char *path)
{
	unsigned char buf[MESH_JOURNAL_HDR_SIZE + 64];
	struct mesh_jrec r;
	size_t sz;
	uint64_t n = UINT64_MAX;
	int fd = open(path, O_RDONLY);
	ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof buf);
	if (fd >= 0)
		close(fd);
	if (got > MESH_JOURNAL_HDR_SIZE &&
	    mesh_journal_decode(buf + MESH_JOURNAL_HDR_SIZE, (size_t)got - MESH_JOURNAL_HDR_SIZE, &r, &sz) == 1 &&
	    r.type == MESH_JREC_SUBMIT && r.len >= 8)
		memcpy(&n, r.data, 8);
	return n;
}

static void count_failure(const struct mesh_job_failure *f, void *arg)
{
	(void)f;
	++*(int *)arg;
}

static int on_record(void *arg, const struct mesh_jrec *r)
{
	(void)arg;
	check_record(r);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	unsigned char hdr[MESH_JOURNAL_HDR_SIZE];
	struct mesh_journal *j;
	struct mesh_lease_stamp st;
	int fd;

	/* the pure decoder over every offset */
	for (size_t off = 0; off < size; off += 8) {
		struct mesh_jrec r;
		size_t sz;
		if (mesh_journal_decode(data + off, size - off, &r, &sz) == 1) {
			if (sz > size - off)
				abort();
			check_record(&r);
		}
	}
	mesh_journal_header_check(data, size);
	mesh_lease_parse((const char *)data, size, &st);

	/* the file reader: half the inputs get a valid header in front */
	/* tmpfs where there is one: recovery fsyncs, and a disk fsync per input
	 * would make the fuzzer crawl */
	snprintf(path, sizeof path, "%s/fuzz_journal.%d.log", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
		 (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 0;
	if (size && (data[0] & 1)) {
		mesh_journal_header(hdr);
		if (write(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr) {
			close(fd);
			return 0;
		}
		data++;
		size--;
	}
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	close(fd);
	if (mesh_journal_open(&j, path, on_record, NULL) == 0) {
		mesh_journal_set_kinds(j, &mesh_job_records);
		mesh_journal_recover(j, NULL);
		mesh_journal_tail(j);
		mesh_journal_close(j);
	}
	struct mesh_journal_report rep, fixed, again;
	mesh_job_journal_check(path, 0, &rep);
	/* repair keeps every whole record it counted and leaves a sound file;
	 * it never makes a record out of the damage */
	if (mesh_job_journal_check(path, 2, &fixed) == 0 && fixed.repaired) {
		if (mesh_job_journal_check(path, 0, &again) != 0 || again.ndropped || again.header_bad)
			abort();
		for (int t = 0; t < MESH_JREC_COMMIT; t++)
			if (again.by_type[t] != rep.by_type[t])
				abort();
	}
	/* the job index over the same records (small jobs only: the done
	 * bitmap of a huge n is a real allocation, not a bug) */
	if (submitted_n(path) <= (1u << 20)) {
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		struct mesh_job *job;
		o.journal = path;
		o.node = "fuzz";
		if (mesh_job_open(&job, &o) == 0) {
			struct mesh_job_status js;
			int nf = 0;
			mesh_job_status(job, &js);
			if (js.done > js.n)
				abort();
			mesh_job_failures(job, count_failure, &nf);
			mesh_job_is_done(job, 0);
			mesh_job_close(job);
		}
	}
	unlink(path);
	return 0;
}
