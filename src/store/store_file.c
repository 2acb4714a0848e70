#include "store/store.h"

#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_ 256

struct file_store {
	struct mesh_store base;
	char *dir;
	char *name;
	int dirfd;
};

static int name_chars(const char *s, const char *extra)
{
	size_t n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '-' || c == '.' || strchr(extra, c)))
			return 0;
	}
	return n >= 1 && n <= MESH_NODE_MAX;
}

int mesh_node_name_ok(const char *s)
{
	return s && name_chars(s, ":@");
}

int mesh_job_name_ok(const char *s)
{
	return s && s[0] != '.' && name_chars(s, "");
}

size_t mesh_lease_format(char *buf, size_t cap, const struct mesh_lease_stamp *st)
{
	int n = snprintf(buf, cap, "mesh-lease 1 %" PRIu64 " %" PRIu64 " %" PRIu32 " %016" PRIx64 " %s ", st->deadline_ns,
			 st->started_ns, st->attempt, st->token, st->node);
	if (n < 0 || (size_t)n + 10 > cap)
		return 0;
	n += snprintf(buf + n, cap - (size_t)n, "%08" PRIx32 "\n", mesh_crc32c(0, buf, (size_t)n));
	return (size_t)n;
}

/* Next space-separated field of [*p, end): its start and length. */
static int field(const char **p, const char *end, const char **f, size_t *n)
{
	const char *s = *p, *e = s;
	while (e < end && *e != ' ' && *e != '\n')
		e++;
	if (e == s || e >= end)
		return -1;
	*f = s;
	*n = (size_t)(e - s);
	*p = e + 1;
	return 0;
}

static int hexn(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0 || n > 16)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return -1;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return 0;
}

int mesh_lease_parse(const char *buf, size_t n, struct mesh_lease_stamp *st)
{
	const char *p = buf, *end = buf + n, *f;
	size_t fl;
	uint64_t v, crc;
	struct mesh_lease_stamp s;
	const char *crc_at;
	if (n < 16 || buf[n - 1] != '\n')
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 10 || memcmp(f, "mesh-lease", 10))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 1 || f[0] != '1')
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || mesh_parse_u64n(f, fl, UINT64_MAX, &s.deadline_ns))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || mesh_parse_u64n(f, fl, UINT64_MAX, &s.started_ns))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || mesh_parse_u64n(f, fl, UINT32_MAX, &v))
		return MESH_E_PARSE;
	s.attempt = (uint32_t)v;
	if (field(&p, end, &f, &fl) || fl != 16 || hexn(f, fl, &s.token))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl > MESH_NODE_MAX)
		return MESH_E_PARSE;
	memcpy(s.node, f, fl);
	s.node[fl] = 0;
	if (!mesh_node_name_ok(s.node))
		return MESH_E_PARSE;
	crc_at = p;
	if (field(&p, end, &f, &fl) || fl != 8 || hexn(f, fl, &crc) || p != end)
		return MESH_E_PARSE;
	if ((uint32_t)crc != mesh_crc32c(0, buf, (size_t)(crc_at - buf)))
		return MESH_E_PARSE;
	*st = s;
	return 0;
}

static struct file_store *fs_of(struct mesh_store *s)
{
	return (struct file_store *)s;
}

static int lease_name(struct file_store *fs, uint64_t cid, unsigned slot, char *buf, size_t cap)
{
	int n = slot ? snprintf(buf, cap, "%s.%" PRIu64 ".s%u.lease", fs->name, cid, slot)
		     : snprintf(buf, cap, "%s.%" PRIu64 ".lease", fs->name, cid);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static int lock_ex(int fd)
{
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Reads the stamp of an open lease file. */
static int read_fd(int fd, struct mesh_lease_stamp *st)
{
	char buf[LINE_MAX_];
	ssize_t got = mesh_pread_full(fd, buf, sizeof buf, 0);
	if (got < 0)
		return (int)got;
	return mesh_lease_parse(buf, (size_t)got, st);
}

static int write_fd(int fd, const struct mesh_lease_stamp *st)
{
	char buf[LINE_MAX_];
	size_t n = mesh_lease_format(buf, sizeof buf, st);
	int rc;
	if (!n)
		return MESH_E_TOOBIG;
	rc = mesh_pwrite_all(fd, buf, n, 0);
	if (!rc && ftruncate(fd, (off_t)n) < 0)
		rc = -errno;
	return rc;
}

/* Opens and locks an existing lease file; fails with -ENOENT when it is
 * gone (also when it was unlinked while we waited for the lock). */
static int open_locked(struct file_store *fs, const char *name)
{
	struct stat st;
	int rc, fd = openat(fs->dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = lock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && st.st_nlink == 0)
		rc = -ENOENT;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

static int fs_claim(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *mine)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct stat st;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return errno == EEXIST ? MESH_E_STATE : -errno;
	rc = lock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size != 0 || st.st_nlink == 0)) {
		/* A stealer took the empty file between our create and lock. */
		close(fd);
		return MESH_E_STATE;
	}
	if (!rc)
		rc = write_fd(fd, mine);
	if (rc)
		unlinkat(fs->dirfd, name, 0);
	close(fd);
	return rc;
}

/* A lease is as good as expired when its holder is a process of this host
 * that no longer exists: the default node name is "<host>.<pid>" (a
 * speculative handle adds ".spec"), so a rerun after kill -9 need not wait
 * out the TTL.  A reused pid only keeps the lease until its deadline, as
 * before; other node names are judged by the deadline alone. */
static int holder_dead(const struct mesh_lease_stamp *st)
{
	char host[256];
	size_t hl;
	uint64_t pid;
	const char *p, *end;
	if (gethostname(host, sizeof host - 1) < 0)
		return 0;
	host[sizeof host - 1] = 0;
	hl = strlen(host);
	if (strncmp(st->node, host, hl) != 0 || st->node[hl] != '.')
		return 0;
	p = st->node + hl + 1;
	end = strchr(p, '.');
	if (end && strcmp(end, ".spec") != 0)
		return 0;
	if (mesh_parse_u64n(p, end ? (size_t)(end - p) : strlen(p), INT32_MAX, &pid) || pid == 0)
		return 0;
	return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static int fs_steal(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t now_ns, struct mesh_lease_stamp *mine,
		    struct mesh_lease_stamp *seen)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp old;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd;
	rc = read_fd(fd, &old);
	if (rc == 0 && old.deadline_ns > now_ns && !holder_dead(&old)) {
		if (seen)
			*seen = old;
		close(fd);
		return MESH_E_STATE;
	}
	if (rc == 0 && old.attempt + 1 > mine->attempt)
		mine->attempt = old.attempt + 1;
	rc = write_fd(fd, mine);
	close(fd);
	return rc;
}

static int fs_renew(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token, uint64_t deadline_ns)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd == -ENOENT ? MESH_E_STATE : fd;
	rc = read_fd(fd, &cur);
	if (rc || cur.token != token) {
		close(fd);
		return MESH_E_STATE;
	}
	cur.deadline_ns = deadline_ns;
	rc = write_fd(fd, &cur);
	close(fd);
	return rc;
}

static int fs_release(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	if (!token) {
		if (unlinkat(fs->dirfd, name, 0) < 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	if (read_fd(fd, &cur) == 0 && cur.token == token && unlinkat(fs->dirfd, name, 0) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int fs_read(struct mesh_store *s, uint64_t cid, unsigned slot, struct mesh_lease_stamp *st)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = read_fd(fd, st);
	close(fd);
	return rc;
}

static int fs_each_live(struct mesh_store *s, uint64_t now_ns,
			void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg)
{
	struct file_store *fs = fs_of(s);
	size_t nl = strlen(fs->name);
	int fd = openat(fs->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *e;
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	while ((e = readdir(d))) {
		const char *n = e->d_name, *dot;
		size_t len = strlen(n);
		uint64_t cid;
		struct mesh_lease_stamp st;
		if (len <= nl + 7 || memcmp(n, fs->name, nl) || n[nl] != '.' || strcmp(n + len - 6, ".lease"))
			continue;
		dot = n + nl + 1;
		if (mesh_parse_u64n(dot, (size_t)(n + len - 6 - dot), UINT64_MAX, &cid))
			continue; /* speculative copies (".s1") and other jobs' files */
		if (fs_read(s, cid, 0, &st) == 0 && st.deadline_ns > now_ns && !holder_dead(&st))
			fn(arg, cid, &st);
	}
	closedir(d);
	return 0;
}

static void fs_close(struct mesh_store *s)
{
	struct file_store *fs = fs_of(s);
	if (!fs)
		return;
	close(fs->dirfd);
	free(fs->dir);
	free(fs->name);
	free(fs);
}

static const struct mesh_store_ops file_ops = {
	.name = "file",
	.claim = fs_claim,
	.steal = fs_steal,
	.renew = fs_renew,
	.release = fs_release,
	.read = fs_read,
	.each_live = fs_each_live,
	.close = fs_close,
};

int mesh_store_file_open(struct mesh_store **out, const char *lockdir, const char *name, int create)
{
	struct file_store *fs;
	const char *why;
	int dfd;
	if (mesh_path_lockdir_ok(lockdir, &why) || !mesh_job_name_ok(name))
		return MESH_E_PATH;
	if (create && mkdir(lockdir, 0755) < 0 && errno != EEXIST)
		return -errno;
	dfd = open(lockdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return errno == ENOTDIR || errno == ELOOP ? MESH_E_PATH : -errno;
	fs = calloc(1, sizeof *fs);
	if (!fs || !(fs->dir = strdup(lockdir)) || !(fs->name = strdup(name))) {
		if (fs) {
			free(fs->dir);
			free(fs);
		}
		close(dfd);
		return -ENOMEM;
	}
	fs->base.ops = &file_ops;
	fs->dirfd = dfd;
	*out = &fs->base;
	return 0;
}
