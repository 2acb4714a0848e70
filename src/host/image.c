#include "host/image.h"

#include "base/buf.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "host/elf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH "x86_64"
#elif defined(__aarch64__)
#define ARCH "aarch64"
#elif defined(__riscv)
#define ARCH "riscv64"
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARCH "powerpc64le"
#elif defined(__s390x__)
#define ARCH "s390x"
#else
#error "mesh: add this machine's architecture to the target triple"
#endif
#if defined(__GLIBC__)
#define LIBC "gnu"
#else
#define LIBC "musl"
#endif

#define MANIFEST_MAX (1u << 20)

const char *mesh_target_triple(void)
{
	return ARCH "-linux-" LIBC;
}

uint64_t mesh_image_id(const struct mesh_image *img)
{
	uint8_t b[16];
	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(img->image_hash >> (8 * i));
		b[8 + i] = (uint8_t)(img->bin_hash >> (8 * i));
	}
	return mesh_fnv1a64(MESH_FNV1A64_INIT, b, sizeof b);
}

const char *mesh_gpu_access_name(enum mesh_gpu_access g)
{
	switch (g) {
	case MESH_GPU_NONE: return "none";
	case MESH_GPU_BLINK: return "blink";
	case MESH_GPU_MPS: return "mps";
	case MESH_GPU_METAL: return "metal";
	case MESH_GPU_CUDA: return "cuda";
	}
	return "?";
}

static int say(char **err, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char **err, int rc, const char *fmt, ...)
{
	if (err) {
		struct mesh_buf b = MESH_BUF_INIT;
		va_list ap;
		va_start(ap, fmt);
		mesh_buf_vaddf(&b, fmt, ap);
		va_end(ap);
		*err = b.p ? mesh_buf_detach(&b, NULL) : NULL;
	}
	return rc;
}

void mesh_image_release(struct mesh_image *img)
{
	free(img->name);
	free(img->manifest_path);
	free(img->bin_path);
	free(img->argv0);
	free(img->probe_model);
	free(img->log_path);
	mesh_manifest_release(&img->m);
	memset(img, 0, sizeof *img);
}

static const char *file_type(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	return "a special file";
}

/* Opens path for reading when it is a regular file, *st its stat; the fd, or
 * a negative code with *err said.  Never blocks: a FIFO is opened
 * O_NONBLOCK (the open of a FIFO with no writer would wait for one) and
 * refused, as is any other non-regular file, with its type in the message. */
static int open_regular(const char *path, const char *what, struct stat *st, char **err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, st) != 0) {
		int e = errno;
		close(fd);
		return say(err, -e, "cannot stat '%s': %s", path, strerror(e));
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return say(err, MESH_E_REFUSED, "%s '%s' is %s, not a regular file", what, path,
			   file_type(st->st_mode));
	}
	return fd;
}

/* The manifest's text (NUL-terminated), at most MANIFEST_MAX bytes. */
static int read_manifest(struct mesh_image *img, char **text, size_t *len, char **err)
{
	const char *path = img->manifest_path;
	struct stat st;
	int fd = open_regular(path, "manifest", &st, err);
	if (fd == -ENOENT)
		return say(err, MESH_E_NOTFOUND, "no program '%s' in the catalog (no '%s')", img->name, path);
	if (fd < 0)
		return err && *err ? fd : say(err, fd, "cannot read '%s': %s", path, mesh_strerror(fd));
	if (st.st_size > MANIFEST_MAX) {
		close(fd);
		return say(err, MESH_E_TOOBIG, "'%s' is over %u bytes", path, MANIFEST_MAX);
	}
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	ssize_t r = mesh_pread_full(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (r < 0) {
		free(buf);
		return say(err, (int)r, "cannot read '%s': %s", path, mesh_strerror((int)r));
	}
	buf[r] = 0;
	*text = buf;
	*len = (size_t)r;
	return 0;
}

/* Maps the regular file at path (what: "binary", ... in messages) read-only:
 * *b its st->st_size bytes (an empty file: a static empty buffer) and *map
 * what to munmap (NULL for none).  0, -ENOENT (nothing said), or another
 * negative code with *err said. */
static int map_regular(const char *path, const char *what, struct stat *st, const uint8_t **b, void **map, char **err)
{
	static const uint8_t empty;
	int fd = open_regular(path, what, st, err);
	if (fd < 0) {
		if ((err && *err) || fd == -ENOENT)
			return fd;
		return say(err, fd, "cannot open '%s': %s", path, strerror(-fd));
	}
	*b = &empty;
	*map = NULL;
	if (st->st_size > 0) {
		void *m = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			int e = errno;
			close(fd);
			return say(err, -e, "cannot read '%s': %s", path, strerror(e));
		}
		*b = *map = m;
	}
	close(fd);
	return 0;
}

static int check_binary(struct mesh_image *img, char **err)
{
	struct stat st;
	const uint8_t *b;
	void *map;
	int rc = map_regular(img->bin_path, "binary", &st, &b, &map, err);
	if (rc == -ENOENT)
		return say(err, MESH_E_NOTFOUND, "no binary for '%s' at '%s' (this machine is %s)", img->name,
			   img->bin_path, mesh_target_triple());
	if (rc)
		return rc;
	if (access(img->bin_path, X_OK) != 0) {
		if (map)
			munmap(map, (size_t)st.st_size);
		return say(err, MESH_E_REFUSED, "'%s' is not executable (no x permission)", img->bin_path);
	}
	rc = mesh_elf_check(img->bin_path, b, (size_t)st.st_size, err);
	/* Each refusal its own code, so a script reads apart from another machine's binary. */
	if (rc == MESH_E_REFUSED)
		rc = st.st_size >= 2 && b[0] == '#' && b[1] == '!' ? MESH_E_SCRIPT : MESH_E_ARCH;
	if (rc == 0) {
		img->bin_hash = mesh_fnv1a64(MESH_FNV1A64_INIT, b, (size_t)st.st_size);
		img->bin_bytes = (uint64_t)st.st_size;
	}
	if (map)
		munmap(map, (size_t)st.st_size);
	return rc;
}

/* The manifest's `python`: a virtual environment (its pyvenv.cfg there),
 * whose bin/python has the binary's bytes (the catalog's link to it, or a
 * kept copy of that interpreter); img->argv0 becomes that path, which is
 * how Python finds the environment (the executable's own path, unresolved,
 * is where it looks for pyvenv.cfg). */
static int check_venv(struct mesh_image *img, char **err)
{
	const char *venv = img->m.python;
	char *cfg = mesh_strf("%s/pyvenv.cfg", venv), *py = mesh_strf("%s/bin/python", venv);
	struct stat st;
	const uint8_t *b;
	void *map = NULL;
	int rc = !cfg || !py ? -ENOMEM : 0;
	if (!rc && (stat(cfg, &st) != 0 || !S_ISREG(st.st_mode)))
		rc = say(err, MESH_E_NOTFOUND,
			 "'%s': python = \"%s\" is not a virtual environment: it has no pyvenv.cfg (make one with "
			 "python3 -m venv %s)",
			 img->manifest_path, venv, venv);
	if (!rc && (rc = map_regular(py, "interpreter", &st, &b, &map, err)) != 0) {
		char *e = err ? *err : NULL;
		rc = say(err, rc == -ENOENT ? MESH_E_NOTFOUND : rc, "'%s': python = \"%s\": %s", img->manifest_path,
			 venv, e ? e : rc == -ENOENT ? "it has no bin/python" : mesh_strerror(rc));
		free(e);
	}
	if (!rc && ((uint64_t)st.st_size != img->bin_bytes ||
		    mesh_fnv1a64(MESH_FNV1A64_INIT, b, (size_t)st.st_size) != img->bin_hash))
		rc = say(err, MESH_E_MISMATCH,
			 "'%s' is not the interpreter of python = \"%s\" ('%s' has other bytes); link it: ln -sf %s %s",
			 img->bin_path, venv, py, py, img->bin_path);
	if (map)
		munmap(map, (size_t)st.st_size);
	if (!rc)
		img->argv0 = py, py = NULL;
	free(cfg);
	free(py);
	return rc;
}

int mesh_image_prepare(const char *catalog, const char *name, const struct mesh_limits_caps *caps,
		       enum mesh_gpu_access gpu, struct mesh_image *img, char **err)
{
	struct mesh_buf p = MESH_BUF_INIT;
	char *text = NULL;
	size_t len = 0;
	int rc;
	if (err)
		*err = NULL;
	memset(img, 0, sizeof *img);
	if (!mesh_manifest_name_ok(name))
		return say(err, MESH_E_PATH, "'%s' is not a program name (1 to 64 of A-Z a-z 0-9 _ -)", name);
	if (!(img->name = strdup(name)))
		return -ENOMEM;
	if (mesh_buf_addf(&p, "%s/%s.toml", catalog, name) || !(img->manifest_path = mesh_buf_detach(&p, NULL)))
		goto nomem;
	if (mesh_buf_addf(&p, "%s/%s/%s", catalog, mesh_target_triple(), name) ||
	    !(img->bin_path = mesh_buf_detach(&p, NULL)))
		goto nomem;
	rc = read_manifest(img, &text, &len, err);
	if (rc)
		goto bad;
	rc = mesh_manifest_parse(img->manifest_path, text, len, name, &img->m, err);
	if (rc)
		goto bad;
	if (img->m.backend == MESH_BACKEND_HTTP) {
		rc = say(err, MESH_E_STATE, "'%s' is an HTTP program (backend = \"http\"): meshd --http serves it by model",
			 name);
		goto bad;
	}
	img->image_hash = mesh_fnv1a64(MESH_FNV1A64_INIT, text, len);
	img->image_hash = mesh_fnv1a64(img->image_hash, "", 1);
	img->image_hash = mesh_fnv1a64(img->image_hash, img->m.source_hash, strlen(img->m.source_hash));
	if (img->m.device == MESH_DEVICE_GPU && gpu != MESH_GPU_MPS && gpu != MESH_GPU_CUDA) {
		if (gpu == MESH_GPU_METAL)
			rc = say(err, MESH_E_NOGPU, "'%s' needs a GPU, and Metal does not exist on Linux", name);
		else if (gpu == MESH_GPU_BLINK)
			rc = say(err, MESH_E_NOGPU,
				 "'%s' needs a GPU, and GPU workers are refused in blink mode (they would be time-sliced "
				 "against the resident kernels); run meshd with --isolation mps",
				 name);
		else
			rc = say(err, MESH_E_NOGPU,
				 "'%s' needs a GPU (device = \"gpu\"), and this meshd has no GPU access; run it with "
				 "--isolation mps on a machine with a GPU",
				 name);
		goto bad;
	}
	rc = check_binary(img, err);
	if (!rc && img->m.python)
		rc = check_venv(img, err);
	else if (!rc && !(img->argv0 = strdup(img->bin_path)))
		rc = -ENOMEM;
	if (rc)
		goto bad;
	char *lerr = NULL;
	rc = mesh_limits_plan(&img->m.limits, caps, &img->enforced, &lerr);
	if (rc) {
		rc = say(err, rc == MESH_E_UNSUPPORTED ? MESH_E_LIMITS : rc, "'%s': %s", img->manifest_path,
			 lerr ? lerr : mesh_strerror(rc));
		free(lerr);
		goto bad;
	}
	if (img->m.user) {
		char *uerr = NULL;
		rc = mesh_limits_run_as(img->m.user, &img->run_as, &uerr);
		if (rc) {
			rc = say(err, rc, "'%s': %s", img->manifest_path, uerr ? uerr : mesh_strerror(rc));
			free(uerr);
			goto bad;
		}
	}
	free(text);
	return 0;
nomem:
	rc = -ENOMEM;
bad:
	free(text);
	mesh_buf_release(&p);
	mesh_image_release(img);
	return rc;
}

int mesh_image_http(struct mesh_image *img, struct mesh_manifest *m, const struct mesh_limits_caps *caps, char **err)
{
	char *e = NULL;
	int rc;
	if (err)
		*err = NULL;
	memset(img, 0, sizeof *img);
	img->m = *m;
	memset(m, 0, sizeof *m);
	if (!(img->name = strdup(img->m.name ? img->m.name : "")))
		return -ENOMEM;
	if (img->m.backend != MESH_BACKEND_HTTP)
		return say(err, MESH_E_STATE, "'%s' is not an HTTP program", img->name);
	mesh_probe_target_default(&img->probe);
	snprintf(img->probe.path, sizeof img->probe.path, "%s",
		 img->m.probe_path ? img->m.probe_path : MESH_PROBE_DEFAULT_PATH);
	if (!img->m.probe_path && img->m.nmodels && !(img->probe_model = strdup(img->m.models[0])))
		return -ENOMEM;
	rc = mesh_limits_plan(&img->m.limits, caps, &img->enforced, &e);
	if (rc == 0 && img->m.user)
		rc = mesh_limits_run_as(img->m.user, &img->run_as, &e);
	if (rc) {
		rc = say(err, rc == MESH_E_UNSUPPORTED ? MESH_E_LIMITS : rc, "%s", e ? e : mesh_strerror(rc));
		free(e);
	}
	return rc;
}
