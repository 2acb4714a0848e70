#include "base/path.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_dotdot(const char *p)
{
	const char *s = p;
	while (*s) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return 1;
		if (!e)
			break;
		s = e + 1;
	}
	return 0;
}

int mesh_path_has_symlink(const char *p)
{
	char buf[PATH_MAX];
	size_t n = strlen(p);
	struct stat st;
	if (n >= sizeof buf)
		return 1;
	memcpy(buf, p, n + 1);
	/* Check p itself, then every prefix ending before a '/'. */
	for (size_t i = n; i > 0; i--) {
		if (i == n || buf[i] == '/') {
			char c = buf[i];
			buf[i] = 0;
			if (lstat(buf, &st) == 0 && S_ISLNK(st.st_mode)) {
				return 1;
			}
			buf[i] = c;
		}
	}
	return 0;
}

int mesh_path_open_private_dir(const char *dir, int create)
{
	struct stat st;
	int dfd;
	if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return errno == ENOTDIR || errno == ELOOP ? MESH_E_PATH : -errno;
	if (fstat(dfd, &st) < 0) {
		int rc = -errno;
		close(dfd);
		return rc;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(dfd);
		return MESH_E_NOTPRIVATE;
	}
	return dfd;
}

static int common(const char *p, const char **why)
{
	if (strlen(p) >= PATH_MAX) {
		*why = "path too long";
		return MESH_E_PATH;
	}
	if (has_dotdot(p)) {
		*why = "'..' is not allowed";
		return MESH_E_PATH;
	}
	if (mesh_path_has_symlink(p)) {
		*why = "symlinks are not allowed";
		return MESH_E_PATH;
	}
	return 0;
}

int mesh_path_journal_ok(const char *p, const char **why)
{
	const char *dummy;
	size_t n;
	if (!why)
		why = &dummy;
	if (!p || !*p) {
		*why = "empty path";
		return MESH_E_PATH;
	}
	n = strlen(p);
	const char *base = strrchr(p, '/');
	base = base ? base + 1 : p;
	if (n < 4 || strcmp(p + n - 4, ".log") != 0 || strlen(base) <= 4) {
		*why = "a journal must be a file name ending in '.log'";
		return MESH_E_PATH;
	}
	return common(p, why);
}

int mesh_path_lockdir_ok(const char *p, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	if (!p || !*p) {
		*why = "empty path";
		return MESH_E_PATH;
	}
	if (strchr(p, '/') && (strncmp(p, "/tmp/", 5) != 0 || !p[5])) {
		*why = "a lock directory must be a bare name or under /tmp/";
		return MESH_E_PATH;
	}
	if (strcmp(p, ".") == 0) {
		*why = "a lock directory must be a bare name or under /tmp/";
		return MESH_E_PATH;
	}
	return common(p, why);
}

int mesh_path_lockdir_private_ok(const char *p, const char **why)
{
	const char *dummy;
	if (!why)
		why = &dummy;
	if (!p || p[0] != '/' || !p[1]) {
		*why = "a private lock directory must be an absolute path";
		return MESH_E_PATH;
	}
	return common(p, why);
}

int mesh_path_mkdirs(const char *dir, unsigned mode)
{
	char tmp[PATH_MAX];
	struct stat st;
	size_t n = strlen(dir);
	if (n == 0)
		return -ENOENT;
	if (n >= sizeof tmp)
		return -ENAMETOOLONG;
	memcpy(tmp, dir, n + 1);
	for (char *p = tmp + 1;; p++) {
		if (*p && *p != '/')
			continue;
		char c = *p;
		*p = 0;
		if (mkdir(tmp, (mode_t)mode) < 0 && errno != EEXIST)
			return -errno;
		*p = c;
		if (!c)
			break;
	}
	if (stat(dir, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}
