/* meshd's kept copies of program images (images.h). */
#include "meshd/core/images.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* logs as an absolute path (a worker of a kept image is spawned from its
 * copy, whatever directory meshd runs in); logs itself if that fails. */
static const char *abs_logs(const char *logs, char buf[PATH_MAX])
{
	return realpath(logs, buf) ? buf : logs;
}

static int mkdir_ok(const char *path)
{
	return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -errno;
}

/* Copies the regular file src to dst (created, mode). */
static int copy_file(const char *src, const char *dst, mode_t mode)
{
	int in = open(src, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (in < 0)
		return -errno;
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (out < 0) {
		int e = errno;
		close(in);
		return -e;
	}
	char buf[65536];
	int rc = 0;
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : 0;
			break;
		}
		if ((rc = mesh_write_all(out, buf, (size_t)n)) != 0)
			break;
	}
	close(in);
	if (close(out) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* chown (uid -1: none) and chmod of path, a directory when dir, through
 * a descriptor opened without following a symlink. */
static int set_owner_mode(const char *path, int dir, uid_t uid, gid_t gid, mode_t mode)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (dir ? O_DIRECTORY : O_NONBLOCK));
	if (fd < 0)
		return -errno;
	int rc = (uid != (uid_t)-1 && fchown(fd, uid, gid) < 0) || fchmod(fd, mode) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

int meshd_image_share(const char *logs, const char *name, const char *dir, const struct mesh_run_as *ra, char **err)
{
	char lbuf[PATH_MAX];
	logs = abs_logs(logs, lbuf);
	if (err)
		*err = NULL;
	/* Not root (or no other user): the workers run as meshd's user, who
	 * owns the copy; 0700 as made. */
	if (!ra || !ra->set || geteuid() != 0)
		return 0;
	char *top = mesh_strf("%s/.images", logs), *base = mesh_strf("%s/.images/%s", logs, name),
	     *tri = mesh_strf("%s/%s", dir, mesh_target_triple()), *bin = mesh_strf("%s/%s/%s", dir, mesh_target_triple(), name),
	     *man = mesh_strf("%s/%s.toml", dir, name);
	const char *path = top;
	int rc = !top || !base || !tri || !bin || !man ? -ENOMEM : 0;
	/* Outermost first: the way in, then what it leads to. */
	if (!rc && !(rc = set_owner_mode(path = top, 1, (uid_t)-1, 0, 0711)) &&
	    !(rc = set_owner_mode(path = base, 1, (uid_t)-1, 0, 0711)) &&
	    !(rc = set_owner_mode(path = dir, 1, 0, ra->gid, 0710)) &&
	    !(rc = set_owner_mode(path = tri, 1, 0, ra->gid, 0710)) &&
	    !(rc = set_owner_mode(path = bin, 0, 0, ra->gid, 0510)))
		rc = set_owner_mode(path = man, 0, 0, 0, 0600);
	if (rc && rc != -ENOMEM)
		rc = mesh_errf(err, rc, "cannot make '%s' reachable by user '%s': %s", path, ra->name, mesh_strerror(rc));
	free(top);
	free(base);
	free(tri);
	free(bin);
	free(man);
	return rc;
}

/* Whether ra may pass (a directory) or run (a file) what st describes. */
static int may_exec(const struct stat *st, const struct mesh_run_as *ra)
{
	if (st->st_uid == ra->uid)
		return (st->st_mode & S_IXUSR) != 0;
	int in = st->st_gid == ra->gid;
	for (size_t i = 0; !in && i < ra->ngroups; i++)
		in = st->st_gid == ra->groups[i];
	return (st->st_mode & (in ? S_IXGRP : S_IXOTH)) != 0;
}

int meshd_image_reachable(const char *path, const struct mesh_run_as *ra, char **err)
{
	char buf[PATH_MAX];
	if (err)
		*err = NULL;
	if (!ra || !ra->set || ra->uid == 0)
		return 0;
	if (!realpath(path, buf))
		return mesh_errf(err, -errno, "cannot resolve '%s': %s", path, strerror(errno));
	for (char *p = buf + 1;; p++) {
		char c = *p;
		if (c && c != '/')
			continue;
		*p = 0;
		struct stat st;
		if (stat(buf, &st) != 0)
			return mesh_errf(err, -errno, "cannot stat '%s': %s", buf, strerror(errno));
		if (!may_exec(&st, ra))
			return mesh_errf(err, -EACCES, "user '%s' cannot %s '%s' (mode %04o, owner %u, group %u)", ra->name,
					 c ? "pass" : "run", buf, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
					 (unsigned)st.st_gid);
		if (!c)
			return 0;
		*p = c;
	}
}

/* Removes a copy laid out as images.h says (and nothing else it holds). */
static void remove_copy(const char *dir, const char *name)
{
	char *a = mesh_strf("%s/%s.toml", dir, name), *b = mesh_strf("%s/%s/%s", dir, mesh_target_triple(), name),
	     *c = mesh_strf("%s/%s", dir, mesh_target_triple());
	if (a)
		unlink(a);
	if (b)
		unlink(b);
	if (c)
		rmdir(c);
	rmdir(dir);
	free(a);
	free(b);
	free(c);
}

int meshd_image_keep(const char *logs, const struct mesh_image *img, const struct mesh_run_as *ra,
		     const struct mesh_limits_caps *caps, enum mesh_gpu_access gpu, char **dir, char **err)
{
	static atomic_uint seq;
	char lbuf[PATH_MAX];
	const char *name = img->name;
	logs = abs_logs(logs, lbuf);
	char *top = mesh_strf("%s/.images", logs), *base = mesh_strf("%s/.images/%s", logs, name);
	char *tmp = mesh_strf("%s/.images/%s/.tmp-%d-%u", logs, name, (int)getpid(), atomic_fetch_add(&seq, 1));
	char *final = mesh_strf("%s/.images/%s/%016" PRIx64, logs, name, mesh_image_id(img));
	char *tri = tmp ? mesh_strf("%s/%s", tmp, mesh_target_triple()) : NULL;
	char *man = tmp ? mesh_strf("%s/%s.toml", tmp, name) : NULL;
	char *bin = tri ? mesh_strf("%s/%s", tri, name) : NULL;
	int rc = -ENOMEM;
	*dir = NULL;
	if (err)
		*err = NULL;
	if (!top || !base || !tmp || !final || !tri || !man || !bin)
		goto out;
	struct stat st;
	if (stat(final, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* Kept before (ids name contents), maybe by a meshd that left it
		 * root's alone: its workers' user is given it now. */
		if ((rc = meshd_image_share(logs, name, final, ra, err)) == 0)
			*dir = final, final = NULL;
		goto out;
	}
	if ((rc = mkdir_ok(top)) || (rc = mkdir_ok(base)) || (rc = mkdir_ok(tmp)) || (rc = mkdir_ok(tri))) {
		rc = mesh_errf(err, rc, "cannot make '%s': %s", tmp, mesh_strerror(rc));
		goto clean;
	}
	if ((rc = copy_file(img->manifest_path, man, 0600)) || (rc = copy_file(img->bin_path, bin, 0700))) {
		rc = mesh_errf(err, rc, "cannot copy '%s' into '%s': %s", img->name, tmp, mesh_strerror(rc));
		goto clean;
	}
	struct mesh_image copy;
	char *e = NULL;
	if ((rc = mesh_image_prepare(tmp, name, caps, gpu, &copy, &e)) != 0) {
		rc = mesh_errf(err, rc, "the copy of '%s' does not load: %s", name, e ? e : mesh_strerror(rc));
		free(e);
		goto clean;
	}
	uint64_t id = mesh_image_id(&copy);
	mesh_image_release(&copy);
	if (id != mesh_image_id(img)) {
		rc = mesh_errf(err, MESH_E_MISMATCH, "'%s' changed in the catalog while it was loaded", name);
		goto clean;
	}
	if (rename(tmp, final) != 0 && errno != EEXIST && errno != ENOTEMPTY) {
		rc = mesh_errf(err, -errno, "cannot rename '%s': %s", tmp, strerror(errno));
		goto clean;
	}
	remove_copy(tmp, name); /* a no-op once renamed; another's copy won the rename otherwise */
	if ((rc = meshd_image_share(logs, name, final, ra, err)) == 0)
		*dir = final, final = NULL;
	goto out;
clean:
	remove_copy(tmp, name);
out:
	free(top);
	free(base);
	free(tmp);
	free(final);
	free(tri);
	free(man);
	free(bin);
	return rc;
}

static int same_dir(const char *a, const char *path)
{
	return a && !strcmp(a, path);
}

void meshd_image_prune(const char *logs, const char *name, const char *keep1, const char *keep2)
{
	char lbuf[PATH_MAX];
	logs = abs_logs(logs, lbuf);
	char *base = mesh_strf("%s/.images/%s", logs, name);
	DIR *dp = base ? opendir(base) : NULL;
	struct dirent *de;
	while (dp && (de = readdir(dp))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strncmp(de->d_name, ".tmp-", 5))
			continue;
		char *path = mesh_strf("%s/%s", base, de->d_name);
		if (path && !same_dir(keep1, path) && !same_dir(keep2, path))
			remove_copy(path, name);
		free(path);
	}
	if (dp)
		closedir(dp);
	free(base);
}

#define HISTORY_MAGIC "mesh-images 1\n"

int meshd_image_history_save(const char *logs, const char *name, uint64_t cur, uint64_t prev)
{
	char lbuf[PATH_MAX];
	logs = abs_logs(logs, lbuf);
	char text[96];
	int n = snprintf(text, sizeof text, HISTORY_MAGIC "current %016" PRIx64 "\nprevious %016" PRIx64 "\n", cur, prev);
	char *path = mesh_strf("%s/.images/%s/history", logs, name);
	int rc = path ? mesh_write_file_atomic(path, text, (size_t)n, 0600) : -ENOMEM;
	free(path);
	return rc;
}

/* The 16 hex digits after "<key> " at *p, which then points past the line. */
static int hex_line(const char **p, const char *key, uint64_t *v)
{
	size_t k = strlen(key);
	if (strncmp(*p, key, k) || (*p)[k] != ' ')
		return MESH_E_PARSE;
	const char *h = *p + k + 1;
	uint64_t x = 0;
	for (int i = 0; i < 16; i++) {
		char c = h[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return MESH_E_PARSE;
		x = x << 4 | (uint64_t)d;
	}
	if (h[16] != '\n')
		return MESH_E_PARSE;
	*v = x;
	*p = h + 17;
	return 0;
}

int meshd_image_history_prev(const char *logs, const char *name, uint64_t cur, uint64_t *prev, char **prev_dir)
{
	char lbuf[PATH_MAX];
	logs = abs_logs(logs, lbuf);
	char *path = mesh_strf("%s/.images/%s/history", logs, name), *text = NULL;
	size_t len = 0;
	uint64_t c = 0, p = 0;
	int rc = path ? mesh_read_file(path, 256, &text, &len) : -ENOMEM;
	free(path);
	*prev_dir = NULL;
	const char *at = text;
	if (rc == 0 && (strncmp(at, HISTORY_MAGIC, strlen(HISTORY_MAGIC)) != 0 ||
			(at += strlen(HISTORY_MAGIC), hex_line(&at, "current", &c)) || hex_line(&at, "previous", &p)))
		rc = MESH_E_PARSE;
	free(text);
	if (rc || c != cur || !p || p == cur)
		return MESH_E_NOTFOUND;
	char *dir = mesh_strf("%s/.images/%s/%016" PRIx64, logs, name, p);
	struct stat st;
	if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		free(dir);
		return MESH_E_NOTFOUND;
	}
	*prev = p;
	*prev_dir = dir;
	return 0;
}
