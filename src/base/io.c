#include "base/io.h"

#include "base/err.h"
#include "base/thread.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct fault {
	atomic_int armed;
	int err;
	int sticky;
	atomic_uint_fast64_t left;
};
static struct fault faults[MESH_FAULT__N];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

void mesh_fault_arm(enum mesh_fault_op op, int err, uint64_t after, int sticky)
{
	faults[op].err = err;
	faults[op].sticky = sticky;
	atomic_store(&faults[op].left, after);
	atomic_store(&faults[op].armed, 1);
}

void mesh_fault_disarm(void)
{
	for (int i = 0; i < MESH_FAULT__N; i++)
		atomic_store(&faults[i].armed, 0);
}

static void fault_env(void)
{
	const char *e = getenv("MESH_FAULT");
	char op[16], name[16];
	unsigned long long after = 0;
	int sticky = 0, err;
	if (!e || sscanf(e, "%15[a-z]:%15[A-Z]:%llu:%d", op, name, &after, &sticky) < 3)
		return;
	if (!strcmp(name, "ENOSPC"))
		err = ENOSPC;
	else if (!strcmp(name, "EIO"))
		err = EIO;
	else if (!strcmp(name, "EDQUOT"))
		err = EDQUOT;
	else if (!strcmp(name, "EFBIG"))
		err = EFBIG;
	else
		return;
	if (!strcmp(op, "write"))
		mesh_fault_arm(MESH_FAULT_WRITE, err, after, sticky);
	else if (!strcmp(op, "fsync"))
		mesh_fault_arm(MESH_FAULT_FSYNC, err, after, sticky);
}

static struct pause {
	char point[24];
	unsigned ms;
} pauses[4];
static unsigned n_pauses;
static pthread_once_t pause_once = PTHREAD_ONCE_INIT;

static void pause_env(void)
{
	const char *e = getenv("MESH_FAULT_PAUSE");
	while (e && *e && n_pauses < sizeof pauses / sizeof pauses[0]) {
		struct pause *p = &pauses[n_pauses];
		int used = 0;
		if (sscanf(e, "%23[a-z._]:%u%n", p->point, &p->ms, &used) < 2)
			return;
		n_pauses++;
		e += used;
		e += *e == ',';
	}
}

void mesh_fault_pause(const char *point)
{
	pthread_once(&pause_once, pause_env);
	for (unsigned i = 0; i < n_pauses; i++)
		if (!strcmp(pauses[i].point, point))
			usleep(pauses[i].ms * 1000u);
}

/* 0 to go ahead, or the injected -errno. */
static int fault_hit(enum mesh_fault_op op)
{
	struct fault *f = &faults[op];
	pthread_once(&env_once, fault_env);
	if (!atomic_load_explicit(&f->armed, memory_order_relaxed))
		return 0;
	uint64_t left = atomic_load(&f->left);
	while (left > 0) {
		if (atomic_compare_exchange_weak(&f->left, &left, left - 1))
			return 0;
	}
	if (!f->sticky)
		atomic_store(&f->armed, 0);
	return -f->err;
}

int mesh_efd_ring(int fd)
{
	uint64_t one = 1;
	ssize_t n;
	do
		n = write(fd, &one, sizeof one);
	while (n < 0 && errno == EINTR);
	return n < 0 && errno != EAGAIN ? -errno : 0;
}

void mesh_efd_quiet(int fd)
{
	uint64_t v;
	if (read(fd, &v, sizeof v) < 0) {
		/* EAGAIN: nothing there (or another reader took it) */
	}
}

int mesh_write_all(int fd, const void *buf, size_t n)
{
	int rc = fault_hit(MESH_FAULT_WRITE);
	return rc ? rc : mesh_write_all_raw(fd, buf, n);
}

int mesh_write_all_raw(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int mesh_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	const char *p = buf;
	int rc = fault_hit(MESH_FAULT_WRITE);
	if (rc)
		return rc;
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		off += w;
		n -= (size_t)w;
	}
	return 0;
}

int mesh_fdatasync(int fd)
{
	int rc = fault_hit(MESH_FAULT_FSYNC);
	if (rc)
		return rc;
	while (fdatasync(fd) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

int mesh_fsync(int fd)
{
	int rc = fault_hit(MESH_FAULT_FSYNC);
	if (rc)
		return rc;
	while (fsync(fd) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

int mesh_fsync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd, rc;
	if (!slash) {
		strcpy(dir, ".");
	} else if (slash == path) {
		strcpy(dir, "/");
	} else {
		size_t n = (size_t)(slash - path);
		if (n >= sizeof dir)
			return -ENAMETOOLONG;
		memcpy(dir, path, n);
		dir[n] = 0;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = mesh_fsync(fd);
	close(fd);
	return rc;
}

ssize_t mesh_pread_full(int fd, void *buf, size_t n, off_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

struct sync_one {
	struct mesh_thread *th;
	int fd, data, rc, on;
};

static void *sync_main(void *arg)
{
	struct sync_one *o = arg;
	o->rc = o->data ? mesh_fdatasync(o->fd) : mesh_fsync(o->fd);
	return NULL;
}

int mesh_sync_many(const int *fds, const unsigned char *data, size_t n)
{
	struct sync_one o[MESH_SYNC_MANY_MAX];
	int rc = 0;
	if (n > MESH_SYNC_MANY_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		o[i].fd = fds[i];
		o[i].data = data[i];
		o[i].rc = 0;
		o[i].on = i > 0 && mesh_thread_run(&o[i].th, sync_main, &o[i], MESH_THREAD_BG) == 0;
	}
	for (size_t i = 0; i < n; i++)
		if (!o[i].on)
			sync_main(&o[i]);
	for (size_t i = 0; i < n; i++) {
		if (o[i].on)
			mesh_thread_join(o[i].th, NULL);
		if (!rc)
			rc = o[i].rc;
	}
	return rc;
}

int mesh_write_file_atomic(const char *path, const void *buf, size_t n, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd, rc;
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	rc = mesh_write_all(fd, buf, n);
	if (!rc)
		rc = mesh_fsync(fd);
	close(fd);
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		return rc;
	}
	return mesh_fsync_dir_of(path);
}

int mesh_read_file(const char *path, size_t max, char **out, size_t *len)
{
	/* Read to end of file rather than trusting st_size: /proc and pipes
	 * report 0 and still have content. */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0, cap = 4096;
	char *buf;
	if (fd < 0)
		return -errno;
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		if (got == cap - 1) {
			char *nb;
			if (cap - 1 > max) {
				free(buf);
				close(fd);
				return MESH_E_TOOBIG;
			}
			cap *= 2;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + got, cap - 1 - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = -errno;
			free(buf);
			close(fd);
			return e;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got > max) {
		free(buf);
		return MESH_E_TOOBIG;
	}
	buf[got] = 0;
	*out = buf;
	if (len)
		*len = got;
	return 0;
}

int mesh_flock_ex(int fd)
{
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}
