#include "exec/input.h"

#include "base/buf.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "job/job.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The whole input lives in memory: mesh run needs every chunk by index and
 * the hash of all of them before it can name its journal. */
#define INPUT_MAX (1ull << 40)

void mesh_exec_list_release(struct mesh_exec_list *l)
{
	free(l->data);
	free(l->start);
	memset(l, 0, sizeof *l);
}

int mesh_exec_list_split(struct mesh_exec_list *l, const void *buf, size_t len, int delim, uint64_t *bad)
{
	const char *b = buf;
	uint64_t n = 0;
	memset(l, 0, sizeof *l);
	for (size_t i = 0; i < len; i++)
		n += b[i] == (char)delim;
	if (len > 0 && b[len - 1] != (char)delim)
		n++;
	l->data = malloc(len + 1);
	l->start = malloc((size_t)(n + 1) * sizeof *l->start);
	if (!l->data || !l->start)
		return -ENOMEM;
	memcpy(l->data, b, len);
	l->data[len] = 0; /* the spare byte ends a last record without a delimiter */
	size_t s = 0;
	for (size_t i = 0; i < len; i++) {
		if (l->data[i] == (char)delim) {
			l->data[i] = 0;
			l->start[l->n++] = s;
			s = i + 1;
		} else if (l->data[i] == 0) {
			if (bad)
				*bad = l->n + 1;
			return MESH_E_PARSE;
		}
	}
	if (s < len)
		l->start[l->n++] = s;
	l->start[l->n] = len + 1;
	return 0;
}

int mesh_exec_list_from_argv(struct mesh_exec_list *l, char *const *v, size_t n)
{
	struct mesh_buf b = MESH_BUF_INIT;
	memset(l, 0, sizeof *l);
	l->start = malloc((n + 1) * sizeof *l->start);
	if (!l->start)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		l->start[i] = b.len;
		if (mesh_buf_add(&b, v[i], strlen(v[i]) + 1) < 0) {
			mesh_buf_release(&b);
			return -ENOMEM;
		}
	}
	l->start[n] = b.len;
	l->n = n;
	if (!b.p && mesh_buf_add(&b, "", 1) < 0)
		return -ENOMEM;
	l->data = b.p;
	return 0;
}

/* A growable array of offsets. */
struct offs {
	size_t *p;
	size_t n, cap;
};

static int offs_add(struct offs *o, size_t v)
{
	size_t *p = mesh_grow(o->p, &o->cap, o->n + 1, sizeof *p);
	if (!p)
		return -ENOMEM;
	o->p = p;
	o->p[o->n++] = v;
	return 0;
}

struct builder {
	struct mesh_buf data;
	struct offs line, val, arg;
	const regex_t *colsep;
	uint64_t hash;
	size_t max_args; /* a chunk's arguments at most (0: MESH_EXEC_INPUT_MAX_ARGS) */
};

static int add_str(struct builder *b, struct offs *to, const char *s, size_t len)
{
	if (offs_add(to, b->data.len) < 0 || mesh_buf_add(&b->data, s, len) < 0 || mesh_buf_add(&b->data, "", 1) < 0)
		return -ENOMEM;
	return 0;
}

/* A column without the white space around it (GNU parallel's --colsep
 * implies --trim rl). */
static int add_col(struct builder *b, const char *s, size_t len)
{
	static const char ws[] = " \t\n\r\f\v";
	while (len && memchr(ws, s[0], sizeof ws - 1))
		s++, len--;
	while (len && memchr(ws, s[len - 1], sizeof ws - 1))
		len--;
	return add_str(b, &b->arg, s, len);
}

/* Splits value v into arguments at each non-empty match of colsep. */
static int add_args(struct builder *b, const char *v, size_t *nargs)
{
	const char *p = v;
	regmatch_t m;
	int flags = 0;
	if (!b->colsep) {
		if (++*nargs > (b->max_args ? b->max_args : MESH_EXEC_INPUT_MAX_ARGS))
			return MESH_E_TOOBIG;
		return add_str(b, &b->arg, p, strlen(p));
	}
	while (*p && regexec(b->colsep, p, 1, &m, flags) == 0 && m.rm_eo > m.rm_so) {
		if (++*nargs > (b->max_args ? b->max_args : MESH_EXEC_INPUT_MAX_ARGS))
			return MESH_E_TOOBIG;
		if (add_col(b, p, (size_t)m.rm_so) < 0)
			return -ENOMEM;
		p += m.rm_eo;
		flags = REG_NOTBOL;
	}
	if (++*nargs > (b->max_args ? b->max_args : MESH_EXEC_INPUT_MAX_ARGS))
		return MESH_E_TOOBIG;
	return add_col(b, p, strlen(p));
}

/* Appends one chunk made of the values vals[0..nv-1]. */
static int add_chunk(struct builder *b, const char **vals, size_t nv)
{
	size_t a0 = b->arg.n, nargs = 0;
	int rc;
	for (size_t k = 0; k < nv; k++) {
		if (add_str(b, &b->val, vals[k], strlen(vals[k])) < 0)
			return -ENOMEM;
		b->hash = mesh_fnv1a64(b->hash, vals[k], strlen(vals[k]) + 1);
		if ((rc = add_args(b, vals[k], &nargs)) < 0)
			return rc;
	}
	b->hash = mesh_fnv1a64(b->hash, "\n", 1); /* chunk boundary */
	if (offs_add(&b->line, b->data.len) < 0)
		return -ENOMEM;
	for (size_t k = a0; k < b->arg.n; k++) {
		/* arguments live in b->data: copy through an offset, the buffer moves */
		size_t off = b->arg.p[k], len = strlen(b->data.p + off);
		if ((k > a0 && mesh_buf_add(&b->data, " ", 1) < 0) || mesh_buf_grow(&b->data, len) < 0)
			return -ENOMEM;
		mesh_buf_add(&b->data, b->data.p + off, len);
	}
	return mesh_buf_add(&b->data, "", 1) < 0 ? -ENOMEM : 0;
}

static uint64_t *firsts(uint64_t n, size_t per, const size_t *counts)
{
	uint64_t *f = malloc((size_t)(n + 1) * sizeof *f);
	if (!f)
		return NULL;
	f[0] = 0;
	for (uint64_t i = 0; i < n; i++)
		f[i + 1] = f[i] + (counts ? counts[i] : per);
	return f;
}

int mesh_exec_input_combine(struct mesh_exec_input *in, const struct mesh_exec_source *src, size_t nsrc,
			    const regex_t *colsep)
{
	struct builder b = {MESH_BUF_INIT, {0}, {0}, {0}, colsep, MESH_FNV1A64_INIT, 0};
	uint64_t *glen = calloc(nsrc, sizeof *glen), *idx = calloc(nsrc, sizeof *idx);
	size_t *grp = calloc(nsrc, sizeof *grp), *nargs = NULL, ng = 0;
	const char **vals = calloc(nsrc ? nsrc : 1, sizeof *vals);
	uint64_t total = 1;
	int rc = -ENOMEM;
	memset(in, 0, sizeof *in);
	if (!glen || !idx || !grp || !vals)
		goto out;
	if (nsrc > MESH_EXEC_INPUT_MAX_ARGS) {
		rc = MESH_E_TOOBIG;
		goto out;
	}
	/* Among several sources one without records is one empty record,
	 * unless all are empty (GNU parallel's nest_get). */
	int empty_one = 0;
	for (size_t s = 0; nsrc > 1 && s < nsrc; s++)
		empty_one |= src[s].list->n > 0;
	/* groups of linked sources: a group is as long as its shortest list
	 * (:::+), or its longest (--link) */
	for (size_t s = 0; s < nsrc; s++) {
		uint64_t len = src[s].list->n ? src[s].list->n : (uint64_t)empty_one;
		if (s == 0 || !src[s].linked)
			glen[ng++] = len;
		else if (src[s].linked == 2 ? len > glen[ng - 1] : len < glen[ng - 1])
			glen[ng - 1] = len;
		grp[s] = ng - 1;
	}
	for (size_t g = 0; g < ng; g++) {
		if (glen[g] && total > MESH_JOB_MAX_CHUNKS / glen[g]) {
			rc = MESH_E_TOOBIG;
			goto out;
		}
		total *= glen[g];
	}
	if (nsrc == 0)
		total = 0;
	if (!(nargs = malloc((size_t)(total ? total : 1) * sizeof *nargs)))
		goto out;
	for (uint64_t c = 0; c < total; c++) {
		/* mixed radix: the last group varies fastest */
		uint64_t r = c;
		for (size_t g = ng; g-- > 0;) {
			idx[g] = r % glen[g];
			r /= glen[g];
		}
		for (size_t s = 0; s < nsrc; s++) {
			const struct mesh_exec_list *l = src[s].list;
			vals[s] = l->n ? l->data + l->start[idx[grp[s]] % l->n] : "";
		}
		size_t a0 = b.arg.n;
		if ((rc = add_chunk(&b, vals, nsrc)) < 0)
			goto out;
		nargs[c] = b.arg.n - a0;
	}
	rc = -ENOMEM;
	in->n = total;
	in->hash = b.hash;
	in->cols = colsep != NULL;
	if (!b.data.p && mesh_buf_add(&b.data, "", 1) < 0)
		goto out;
	in->data = b.data.p, b.data.p = NULL;
	in->line = b.line.p, b.line.p = NULL;
	in->val = b.val.p, b.val.p = NULL;
	in->arg = b.arg.p, b.arg.p = NULL;
	if (!(in->vfirst = firsts(total, nsrc, NULL)) || !(in->afirst = firsts(total, 0, nargs)))
		goto out;
	rc = 0;
out:
	mesh_buf_release(&b.data);
	free(b.line.p), free(b.val.p), free(b.arg.p);
	free(glen), free(idx), free(grp), free(vals), free(nargs);
	return rc;
}

/* Adds entry v to the growable array *p of *n entries (capacity *cap). */
static int counts_add(size_t **p, uint64_t *n, uint64_t *cap, size_t v)
{
	if (*n == *cap) {
		uint64_t c = *cap ? *cap * 2 : 64;
		size_t *q = realloc(*p, (size_t)c * sizeof *q);
		if (!q)
			return -ENOMEM;
		*p = q, *cap = c;
	}
	(*p)[(*n)++] = v;
	return 0;
}

/* mesh_exec_input_group, and with cap = SIZE_MAX --pipe's blocks (their
 * bytes: each record with its end, not the records joined by spaces). */
static int regroup(struct mesh_exec_input *in, const regex_t *colsep, uint64_t per, size_t max_bytes, size_t cap)
{
	struct builder b = {MESH_BUF_INIT, {0}, {0}, {0}, colsep, MESH_FNV1A64_INIT, cap};
	const char **vals = NULL;
	size_t *nvals = NULL, *nargs = NULL, vcap = 0;
	uint64_t n = 0, nn = 0, capv = 0, capa = 0;
	struct mesh_exec_input out = MESH_EXEC_INPUT_INIT;
	int rc = 0;
	for (uint64_t i = 0; i < in->n && rc == 0;) {
		size_t nv = 0, na = 0, bytes = 0;
		for (uint64_t taken = 0; i < in->n && (!per || taken < per); i++, taken++) {
			size_t v = (size_t)(in->vfirst[i + 1] - in->vfirst[i]);
			size_t a = (size_t)(in->afirst[i + 1] - in->afirst[i]);
			size_t len = strlen(in->data + in->line[i]) + (taken || cap == SIZE_MAX ? 1 : 0);
			int full = nv + v > cap || na + a > cap;
			if (full && per) {
				rc = MESH_E_TOOBIG; /* -N asked for more than a command takes */
				goto out;
			}
			if (taken && (full || (max_bytes && bytes + len > max_bytes)))
				break;
			if (nv + v > vcap) {
				size_t c = (nv + v) * 2 + 64;
				const char **q = realloc(vals, c * sizeof *q);
				if (!q) {
					rc = -ENOMEM;
					goto out;
				}
				vals = q, vcap = c;
			}
			for (size_t k = 0; k < v; k++)
				vals[nv + k] = in->data + in->val[in->vfirst[i] + k];
			nv += v, na += a, bytes += len;
		}
		size_t a0 = b.arg.n;
		if ((rc = add_chunk(&b, vals, nv)) < 0 || (rc = counts_add(&nvals, &n, &capv, nv)) < 0 ||
		    (rc = counts_add(&nargs, &nn, &capa, b.arg.n - a0)) < 0)
			goto out;
	}
	rc = -ENOMEM;
	if (!b.data.p && mesh_buf_add(&b.data, "", 1) < 0)
		goto out;
	out.n = n;
	out.hash = mesh_fnv1a64(b.hash, "grouped", 8);
	out.context = in->context;
	out.cols = colsep != NULL;
	out.no_args = in->no_args;
	if (!(out.vfirst = firsts(n, 0, nvals)) || !(out.afirst = firsts(n, 0, nargs)))
		goto out;
	out.data = b.data.p, b.data.p = NULL;
	out.line = b.line.p, b.line.p = NULL;
	out.val = b.val.p, b.val.p = NULL;
	out.arg = b.arg.p, b.arg.p = NULL;
	mesh_exec_input_release(in);
	*in = out;
	memset(&out, 0, sizeof out);
	rc = 0;
out:
	mesh_exec_input_release(&out);
	mesh_buf_release(&b.data);
	free(b.line.p), free(b.val.p), free(b.arg.p);
	free(vals), free(nvals), free(nargs);
	return rc;
}

int mesh_exec_input_group(struct mesh_exec_input *in, const regex_t *colsep, uint64_t per, size_t max_bytes)
{
	return regroup(in, colsep, per, max_bytes, MESH_EXEC_INPUT_MAX_ARGS);
}

int mesh_exec_input_blocks(struct mesh_exec_input *in, uint64_t per, size_t max_bytes, char end)
{
	int rc = regroup(in, NULL, per, max_bytes, SIZE_MAX);
	if (rc == 0) {
		in->pipe = 1;
		in->pipe_end = end;
		/* the same blocks as arguments are other work */
		in->hash = mesh_fnv1a64(in->hash, "--pipe", 7);
	}
	return rc;
}

int mesh_exec_input_block_fd(const struct mesh_exec_input *in, uint64_t i)
{
	if (!in || i >= in->n)
		return MESH_E_RANGE;
	int fd = memfd_create("mesh-block", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The records are not contiguous in in->data (each ends in a NUL):
	 * gathered into writes of about 64 KiB, not two writes a record. */
	struct mesh_buf b = MESH_BUF_INIT;
	int rc = 0;
	for (uint64_t k = in->vfirst[i]; k < in->vfirst[i + 1] && rc == 0; k++) {
		const char *v = in->data + in->val[k];
		if (mesh_buf_add(&b, v, strlen(v)) < 0 || mesh_buf_add(&b, &in->pipe_end, 1) < 0)
			rc = -ENOMEM;
		else if (b.len >= 64 * 1024 || k + 1 == in->vfirst[i + 1]) {
			rc = mesh_write_all(fd, b.p, b.len);
			mesh_buf_reset(&b);
		}
	}
	mesh_buf_release(&b);
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

static int from_list(struct mesh_exec_list *l, int rc, struct mesh_exec_input *in)
{
	struct mesh_exec_source s = {l, 0};
	if (rc == 0 && l->n == 0)
		rc = MESH_E_RANGE;
	if (rc == 0)
		rc = mesh_exec_input_combine(in, &s, 1, NULL);
	mesh_exec_list_release(l);
	return rc;
}

int mesh_exec_input_from_mem(const void *buf, size_t n, struct mesh_exec_input *in, uint64_t *bad_line)
{
	struct mesh_exec_list l;
	memset(in, 0, sizeof *in);
	return from_list(&l, mesh_exec_list_split(&l, buf, n, '\n', bad_line), in);
}

int mesh_exec_input_load(const char *path, struct mesh_exec_input *in, uint64_t *bad_line)
{
	char *data;
	size_t len;
	memset(in, 0, sizeof *in);
	int rc = mesh_read_file(path, INPUT_MAX, &data, &len);
	if (rc < 0)
		return rc;
	rc = mesh_exec_input_from_mem(data, len, in, bad_line);
	free(data);
	return rc;
}

void mesh_exec_input_release(struct mesh_exec_input *in)
{
	free(in->data);
	free(in->line);
	free(in->val);
	free(in->vfirst);
	free(in->arg);
	free(in->afirst);
	memset(in, 0, sizeof *in);
}

const char *mesh_exec_input_line(const struct mesh_exec_input *in, uint64_t i, size_t *len)
{
	if (!in || i >= in->n)
		return NULL;
	const char *s = in->data + in->line[i];
	if (len)
		*len = strlen(s);
	return s;
}

static int strings(const struct mesh_exec_input *in, const size_t *offs, const uint64_t *first, uint64_t i,
		   const char **out, size_t *count)
{
	if (!in || i >= in->n)
		return MESH_E_RANGE;
	*count = (size_t)(first[i + 1] - first[i]);
	for (size_t k = 0; k < *count; k++)
		out[k] = in->data + offs[first[i] + k];
	return 0;
}

int mesh_exec_input_values(const struct mesh_exec_input *in, uint64_t i, const char **out, size_t *count)
{
	return strings(in, in ? in->val : NULL, in ? in->vfirst : NULL, i, out, count);
}

int mesh_exec_input_args(const struct mesh_exec_input *in, uint64_t i, const char **out, size_t *count)
{
	return strings(in, in ? in->arg : NULL, in ? in->afirst : NULL, i, out, count);
}
