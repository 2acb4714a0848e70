#include "host/manifest.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/parse.h"
#include "host/toml.h"
#include "shm/shm.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_NAME, K_TEXT, K_BACKENDS, K_DEVICE, K_ARGS, K_COUNT, K_DURATION, K_SIZE, K_RING, K_CPU, K_SIGNAL, K_HASH, K_USER, K_BACKEND, K_STRV, K_PATH, K_VENV };

struct field {
	const char *table, *key;
	enum kind kind;
	uint64_t min, max; /* K_COUNT, K_DURATION (ns) */
	size_t off;	   /* offset in struct mesh_manifest */
};

#define OFF(f) offsetof(struct mesh_manifest, f)
#define H (3600ull * 1000000000ull)
static const struct field fields[] = {
	{"", "name", K_NAME, 0, 0, OFF(name)},
	{"", "description", K_TEXT, 0, 0, OFF(description)},
	{"", "backends", K_BACKENDS, 0, 0, 0},
	{"", "device", K_DEVICE, 0, 0, OFF(device)},
	{"", "args", K_ARGS, 0, 0, 0},
	{"", "max_workers", K_COUNT, 1, MESH_MAX_WORKERS_CAP, OFF(max_workers)},
	{"", "idle_ttl", K_DURATION, 0, 24 * 7 * H, OFF(idle_ttl_ns)},
	{"", "ring", K_RING, MESH_RING_MIN_CAP, MESH_RING_MAX_CAP, OFF(ring_bytes)},
	{"", "user", K_USER, 0, 0, OFF(user)},
	{"", "python", K_VENV, 0, 0, OFF(python)},
	{"", "gpus", K_COUNT, 1, 16, OFF(gpus)},
	{"", "vram", K_SIZE, 1 << 20, 1ull << 50, OFF(vram)},
	{"limits", "memory", K_SIZE, 1 << 20, 1ull << 50, OFF(limits.memory)},
	{"limits", "cpu", K_CPU, 0, 0, OFF(limits.cpu_milli)},
	{"limits", "open_files", K_COUNT, 16, 1u << 20, OFF(limits.open_files)},
	{"limits", "processes", K_COUNT, 1, 1u << 22, OFF(limits.processes)},
	{"lifecycle", "ready_timeout", K_DURATION, 1000000ull, 24 * H, OFF(ready_timeout_ns)},
	{"lifecycle", "online_timeout", K_DURATION, 1000000ull, 24 * H, OFF(online_timeout_ns)},
	{"lifecycle", "stop_signal", K_SIGNAL, 0, 0, OFF(stop_signal)},
	{"lifecycle", "stop_grace", K_DURATION, 0, H, OFF(stop_grace_ns)},
	{"lifecycle", "call_timeout", K_DURATION, 0, 24 * H, OFF(call_timeout_ns)},
	{"source", "hash", K_HASH, 0, 0, OFF(source_hash)},
	{"", "backend", K_BACKEND, 0, 0, OFF(backend)},
	{"", "command", K_STRV, 1, 4096, OFF(command)},
	{"", "models", K_STRV, 1, MESH_MODELS_MAX, OFF(models)},
	{"", "probe_path", K_PATH, 0, 0, OFF(probe_path)},
	{"", "probe_status", K_COUNT, 100, 599, OFF(probe_status)},
	{"", "max_concurrency", K_COUNT, 1, 65536, OFF(max_concurrency)},
	{"", "group", K_NAME, 0, 0, OFF(group)},
	{"", "memory", K_SIZE, 1 << 20, 1ull << 50, OFF(memory)},
	{"lifecycle", "start_timeout", K_DURATION, 1000000ull, 24 * H, OFF(start_timeout_ns)},
	{"", "upstream_paths", K_STRV, 1, 64, OFF(upstream_paths)},
	{"", "aliases", K_STRV, 1, MESH_MODELS_MAX, OFF(aliases)},
	{"", "upstream_model", K_TEXT, 0, 0, OFF(upstream_model)},
	{"filters", "strip_params", K_STRV, 1, 64, OFF(strip_params)},
};
static const char *const tables[] = {"", "env", "limits", "lifecycle", "source", "filters", "filters.defaults"};

struct ctx {
	const char *file;
	char **err;
};

static int fail(struct ctx *x, unsigned line, unsigned col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(struct ctx *x, unsigned line, unsigned col, const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_addf(&b, "%s:%u:%u: ", x->file, line, col);
	va_start(ap, fmt);
	mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (x->err && b.p)
		*x->err = mesh_buf_detach(&b, NULL);
	mesh_buf_release(&b);
	return MESH_E_PARSE;
}

int mesh_manifest_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 64 || name[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
		      ch == '-'))
			return 0;
	}
	return 1;
}

static const struct {
	const char *name;
	int sig;
} sigs[] = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"HUP", SIGHUP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};

int mesh_signal_from_name(const char *s)
{
	if (strncmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (strcmp(s, sigs[i].name) == 0)
			return sigs[i].sig;
	return 0;
}

const char *mesh_signal_name(int sig)
{
	static const char *const full[] = {"SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2"};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigs[i].sig == sig)
			return full[i];
	return sig == SIGKILL ? "SIGKILL" : "?";
}

static const char *want_type(enum kind k)
{
	switch (k) {
	case K_BACKENDS:
	case K_STRV:
	case K_ARGS: return "array";
	case K_COUNT: return "integer";
	case K_SIZE:
	case K_RING: return "integer or string";
	case K_USER: return "integer or string";
	default: return "string";
	}
}

static const char *art(const char *noun)
{
	return strchr("aeiou", noun[0]) ? "an" : "a";
}

static int type_ok(enum kind k, enum mesh_toml_type t)
{
	switch (k) {
	case K_BACKENDS:
	case K_STRV:
	case K_ARGS: return t == MESH_TOML_ARRAY;
	case K_COUNT: return t == MESH_TOML_INT;
	case K_SIZE:
	case K_RING: return t == MESH_TOML_INT || t == MESH_TOML_STRING;
	case K_USER:
	case K_DURATION: return t == MESH_TOML_INT || t == MESH_TOML_STRING;
	default: return t == MESH_TOML_STRING;
	}
}

static char **dup_strv(char *const *v, size_t n)
{
	char **out = calloc(n + 1, sizeof *out);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(out[i] = strdup(v[i]))) {
			for (size_t k = 0; k < i; k++)
				free(out[k]);
			free(out);
			return NULL;
		}
	return out;
}

/* 1 if v is a path an upstream_paths entry may name: "/" then bytes that
 * are neither space nor control, no query, fragment, escape or backslash,
 * and no "." or ".." segment (what the gateway compares a request's path
 * against must be what the program reads). */
static int upstream_path_ok(const char *v)
{
	size_t n = strlen(v);
	if (v[0] != '/' || n > 1000)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c <= ' ' || c == 0x7f || strchr("?#%\\", c))
			return 0;
		if (c == '/' && v[i + 1] == '.' && (v[i + 2] == '/' || !v[i + 2] || (v[i + 2] == '.' && (v[i + 3] == '/' || !v[i + 3]))))
			return 0;
	}
	return 1;
}

/* The setters of set_field, one a kind of field (its value's type is
 * checked): 0, -ENOMEM, or fail()'s code with x's message. */
#define WHERE it->vline, it->vcol
#define KEYFMT "%s%s%s"
#define KEYARGS *f->table ? f->table : "", *f->table ? "." : "", f->key

static int set_text(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	if (f->kind == K_NAME && !mesh_manifest_name_ok(it->str))
		return fail(x, WHERE, "'%s' must be 1 to 64 of A-Z a-z 0-9 _ - (not starting with '-')", f->key);
	if (f->kind == K_HASH && (!*it->str || strlen(it->str) > 256))
		return fail(x, WHERE, "'source.hash' must be 1 to 256 characters");
	if (f->off == OFF(upstream_model) && (!*it->str || strlen(it->str) > 256))
		return fail(x, WHERE, "'upstream_model' must be 1 to 256 bytes");
	char **dst = (char **)((char *)m + f->off);
	return (*dst = strdup(it->str)) ? 0 : -ENOMEM;
}

/* backends (a list that must say "native"), backend, device,
 * lifecycle.stop_signal: one word of a few. */
static int set_choice(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	switch (f->kind) {
	case K_BACKENDS:
		if (it->n == 0)
			return fail(x, WHERE, "'backends' is empty; use [\"native\"]");
		for (size_t i = 0; i < it->n; i++)
			if (strcmp(it->arr[i], "native") != 0)
				return fail(x, WHERE, "backend '%s' is not supported; this host runs only \"native\"",
					    it->arr[i]);
		return 0;
	case K_BACKEND:
		if (strcmp(it->str, "native") == 0)
			m->backend = MESH_BACKEND_NATIVE;
		else if (strcmp(it->str, "http") == 0)
			m->backend = MESH_BACKEND_HTTP;
		else
			return fail(x, WHERE, "'backend' must be \"native\" or \"http\", not \"%s\"", it->str);
		return 0;
	case K_DEVICE:
		if (strcmp(it->str, "cpu") == 0)
			m->device = MESH_DEVICE_CPU;
		else if (strcmp(it->str, "gpu") == 0)
			m->device = MESH_DEVICE_GPU;
		else if (strcmp(it->str, "metal") == 0)
			return fail(x, WHERE, "device \"metal\" does not exist on Linux; use \"cpu\" or \"gpu\"");
		else
			return fail(x, WHERE, "'device' must be \"cpu\" or \"gpu\", not \"%s\"", it->str);
		return 0;
	default: { /* K_SIGNAL */
		int sig = mesh_signal_from_name(it->str);
		if (!sig)
			return fail(x, WHERE,
				    "'lifecycle.stop_signal' must be one of SIGTERM SIGINT SIGQUIT SIGHUP SIGUSR1 SIGUSR2, not \"%s\"",
				    it->str);
		m->stop_signal = sig;
		return 0;
	}
	}
}

/* command, models, aliases, filters.strip_params, upstream_paths. */
static int set_strv(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	int models = f->off == OFF(models) || f->off == OFF(aliases), paths = f->off == OFF(upstream_paths);
	int strip = f->off == OFF(strip_params);
	if (it->n < f->min || it->n > f->max)
		return fail(x, WHERE, "'%s' must have %llu to %llu entries", f->key, (unsigned long long)f->min,
			    (unsigned long long)f->max);
	for (size_t i = 0; i < it->n; i++) {
		const char *v = it->arr[i];
		if (!*v)
			return fail(x, WHERE, "'%s' has an empty entry", f->key);
		if ((models || strip) && strlen(v) > 256)
			return fail(x, WHERE, "%s \"%.32s...\" is longer than 256 bytes", models ? "model" : "parameter", v);
		if (strip && !strcmp(v, "model"))
			return fail(x, WHERE, "'filters.strip_params' cannot strip \"model\" (use upstream_model to rewrite it)");
		for (const char *c = v; models && *c; c++)
			if ((unsigned char)*c < 0x21 || *c == 0x7f || *c == '/' || *c == '"' || *c == '\\')
				return fail(x, WHERE, "model \"%s\" has a space, a control byte, '/', '\"' or '\\'", v);
		for (size_t k = 0; models && k < i; k++)
			if (strcmp(it->arr[k], v) == 0)
				return fail(x, WHERE, "model \"%s\" is listed twice", v);
		if (paths && strcmp(v, "*") && !upstream_path_ok(v))
			return fail(x, WHERE,
				    "'upstream_paths' entries must be \"*\" or a path: starting with '/', no space, "
				    "'?', '#', '%%', '\\' or '.'/'..' segment, at most 1000 bytes (not \"%.64s\")",
				    v);
	}
	char ***dst = (char ***)((char *)m + f->off);
	if (!(*dst = dup_strv(it->arr, it->n)))
		return -ENOMEM;
	if (f->off == OFF(models))
		m->nmodels = it->n;
	else if (f->off == OFF(aliases))
		m->naliases = it->n;
	else if (strip)
		m->nstrip_params = it->n;
	else if (paths)
		m->nupstream_paths = it->n;
	else
		m->ncommand = it->n;
	return 0;
}

/* probe_path, python: a path. */
static int set_path(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	char **dst = (char **)((char *)m + f->off);
	if (f->kind == K_PATH && (it->str[0] != '/' || strlen(it->str) > 1000 || strpbrk(it->str, " \t\r\n#")))
		return fail(x, WHERE, "'probe_path' must start with '/' and hold no space or '#' (at most 1000 bytes)");
	/* python: the worker's argv[0] is built from it: absolute, so that
	 * Python finds <python>/pyvenv.cfg whatever meshd's directory. */
	if (f->kind == K_VENV && (it->str[0] != '/' || strlen(it->str) > 4000))
		return fail(x, WHERE, "'python' must be the absolute path of a virtual environment (at most 4000 bytes)");
	return (*dst = strdup(it->str)) ? 0 : -ENOMEM;
}

static int set_args(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	for (size_t i = 0; i < m->nargs; i++)
		free(m->args[i]);
	free(m->args);
	if (!(m->args = dup_strv(it->arr, it->n)))
		return -ENOMEM;
	m->nargs = it->n;
	return 0;
}

static int set_count(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	if (it->i < (int64_t)f->min || (uint64_t)it->i > f->max)
		return fail(x, WHERE, "'" KEYFMT "' must be between %llu and %llu", KEYARGS,
			    (unsigned long long)f->min, (unsigned long long)f->max);
	if (f->off == OFF(max_workers))
		m->max_workers = (unsigned)it->i;
	else if (f->off == OFF(gpus))
		m->gpus = (unsigned)it->i;
	else if (f->off == OFF(probe_status))
		m->probe_status = (unsigned)it->i;
	else if (f->off == OFF(max_concurrency))
		m->max_concurrency = (unsigned)it->i;
	else
		*(uint64_t *)((char *)m + f->off) = (uint64_t)it->i;
	return 0;
}

static int set_duration(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	uint64_t ns;
	char secs[32];
	if (it->type == MESH_TOML_INT) /* a number is seconds */
		snprintf(secs, sizeof secs, "%lld", (long long)it->i);
	int rc = mesh_parse_duration(it->type == MESH_TOML_INT ? secs : it->str, f->max, &ns);
	if (rc == MESH_E_PARSE)
		return fail(x, WHERE, "'" KEYFMT "' must be a duration like 300 (seconds), \"500ms\", \"3s\", \"1.5m\", \"2h\"",
			    KEYARGS);
	if (rc || ns < f->min)
		return fail(x, WHERE, "'" KEYFMT "' is out of range (%llu ms to %llu s)", KEYARGS,
			    (unsigned long long)(f->min / 1000000), (unsigned long long)(f->max / 1000000000));
	*(uint64_t *)((char *)m + f->off) = ns;
	return 0;
}

/* A size, and the ring (a power of two). */
static int set_size(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	uint64_t v;
	int rc = 0;
	if (it->type == MESH_TOML_INT) {
		if (it->i < 0)
			rc = MESH_E_RANGE;
		v = (uint64_t)it->i;
	} else {
		/* "20GiB" and "512MiB" as well as "20G": the same powers of 1024. */
		char s[64];
		size_t n = strlen(it->str);
		snprintf(s, sizeof s, "%s", it->str);
		if (n >= 3 && n < sizeof s && strcmp(s + n - 2, "iB") == 0 && strchr("KkMmGgTt", s[n - 3]))
			s[n - 2] = 0;
		rc = mesh_parse_size(s, UINT64_MAX, &v);
	}
	if (rc == MESH_E_PARSE)
		return fail(x, WHERE, "'" KEYFMT "' must be bytes or a size like \"%s\"", KEYARGS,
			    f->kind == K_RING ? "4M" : "512M\" or \"20GiB");
	if (f->kind == K_RING && (rc || v < f->min || v > f->max || (v & (v - 1))))
		return fail(x, WHERE, "'ring' must be a power of two between 4K and 1G");
	if (rc || v < f->min || v > f->max)
		return fail(x, WHERE, "'" KEYFMT "' must be between 1M and 1024T", KEYARGS);
	*(uint64_t *)((char *)m + f->off) = v;
	return 0;
}

static int set_cpu(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	uint64_t ns;
	/* Cores as a decimal: reuse the seconds parser (9 decimals) and
	 * keep thousandths. */
	int rc = mesh_parse_seconds(it->str, 4096ull * 1000000000ull, &ns);
	if (rc == 0 && (ns % 1000000 || ns == 0))
		rc = ns ? MESH_E_PARSE : MESH_E_RANGE;
	if (rc == MESH_E_PARSE)
		return fail(x, WHERE, "'limits.cpu' must be cores like \"0.5\" or \"2\" (at most 3 decimals)");
	if (rc)
		return fail(x, WHERE, "'limits.cpu' must be between 0.001 and 4096 cores");
	m->limits.cpu_milli = (uint32_t)(ns / 1000000);
	return 0;
}

static int set_user(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	/* A name as useradd takes it, or a uid (kept as its digits). */
	char num[24];
	const char *u = it->str;
	if (it->type == MESH_TOML_INT) {
		if (it->i < 0 || it->i > 0x7ffffffe)
			return fail(x, WHERE, "'user' must be a uid between 0 and 2147483646");
		snprintf(num, sizeof num, "%lld", (long long)it->i);
		u = num;
	} else {
		size_t n = strlen(u);
		int ok = n >= 1 && n <= 32 && u[0] != '-';
		for (size_t i = 0; ok && i < n; i++)
			ok = (u[i] >= 'a' && u[i] <= 'z') || (u[i] >= 'A' && u[i] <= 'Z') || (u[i] >= '0' && u[i] <= '9') ||
			     u[i] == '_' || u[i] == '-' || u[i] == '.';
		if (!ok)
			return fail(x, WHERE, "'user' must be a user name (1 to 32 of A-Z a-z 0-9 _ - .) or a uid");
	}
	free(m->user);
	if (!(m->user = strdup(u)))
		return -ENOMEM;
	return 0;
}

static int set_field(struct ctx *x, const struct field *f, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	if (!type_ok(f->kind, it->type))
		return fail(x, WHERE, "'" KEYFMT "' must be %s %s, not %s %s", KEYARGS, art(want_type(f->kind)),
			    want_type(f->kind), art(mesh_toml_type_name(it->type)), mesh_toml_type_name(it->type));
	switch (f->kind) {
	case K_NAME:
	case K_TEXT:
	case K_HASH: return set_text(x, f, it, m);
	case K_BACKENDS:
	case K_BACKEND:
	case K_DEVICE:
	case K_SIGNAL: return set_choice(x, f, it, m);
	case K_STRV: return set_strv(x, f, it, m);
	case K_PATH:
	case K_VENV: return set_path(x, f, it, m);
	case K_ARGS: return set_args(x, f, it, m);
	case K_COUNT: return set_count(x, f, it, m);
	case K_DURATION: return set_duration(x, f, it, m);
	case K_SIZE:
	case K_RING: return set_size(x, f, it, m);
	case K_CPU: return set_cpu(x, f, it, m);
	case K_USER: return set_user(x, f, it, m);
	}
	return 0;
}
#undef WHERE
#undef KEYFMT
#undef KEYARGS

static int env_name_ok(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9'))
		return 0;
	for (; *k; k++)
		if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '_'))
			return 0;
	return 1;
}

/* A [filters.defaults] entry: a string, an integer, a float or a boolean
 * for a top-level member other than "model". */
static int add_default(struct ctx *x, const struct mesh_toml_item *it, struct mesh_manifest *m)
{
	if (!strcmp(it->key, "model"))
		return fail(x, it->line, it->col, "'filters.defaults' cannot set \"model\" (use upstream_model to rewrite it)");
	if (it->type != MESH_TOML_STRING && it->type != MESH_TOML_INT && it->type != MESH_TOML_FLOAT &&
	    it->type != MESH_TOML_BOOL)
		return fail(x, it->vline, it->vcol,
			    "'filters.defaults.%s' must be a string, an integer, a float or a boolean, not %s %s",
			    it->key, art(mesh_toml_type_name(it->type)), mesh_toml_type_name(it->type));
	if (m->ndefaults == 64)
		return fail(x, it->line, it->col, "'filters.defaults' has more than 64 entries");
	struct mesh_manifest_default *nd = realloc(m->defaults, (m->ndefaults + 1) * sizeof *nd);
	if (!nd)
		return -ENOMEM;
	m->defaults = nd;
	struct mesh_manifest_default *d = &nd[m->ndefaults];
	memset(d, 0, sizeof *d);
	d->type = it->type == MESH_TOML_STRING ? MESH_VALUE_STRING
		  : it->type == MESH_TOML_INT  ? MESH_VALUE_INT
		  : it->type == MESH_TOML_FLOAT ? MESH_VALUE_FLOAT
						: MESH_VALUE_BOOL;
	d->i = it->i;
	d->b = it->b;
	d->f = it->f;
	if (!(d->key = strdup(it->key)) || (it->type == MESH_TOML_STRING && !(d->str = strdup(it->str)))) {
		free(d->key);
		return -ENOMEM;
	}
	m->ndefaults++;
	return 0;
}

/* No alias is also one of the models (a name routes to one place). */
static int aliases_distinct(struct ctx *x, const struct mesh_toml *t, const struct mesh_manifest *m)
{
	for (size_t i = 0; i < m->naliases; i++)
		for (size_t k = 0; k < m->nmodels; k++)
			if (!strcmp(m->aliases[i], m->models[k]))
				for (size_t j = 0; j < t->n; j++)
					if (t->items[j].key && !*t->items[j].table && !strcmp(t->items[j].key, "aliases"))
						return fail(x, t->items[j].vline, t->items[j].vcol,
							    "alias \"%s\" is also in 'models'", m->aliases[i]);
	return 0;
}

void mesh_manifest_release(struct mesh_manifest *m)
{
	free(m->name);
	free(m->description);
	for (size_t i = 0; m->args && i < m->nargs; i++)
		free(m->args[i]);
	free(m->args);
	for (size_t i = 0; m->env && i < m->nenv; i++)
		free(m->env[i]);
	free(m->env);
	free(m->source_hash);
	free(m->user);
	free(m->python);
	for (size_t i = 0; m->command && i < m->ncommand; i++)
		free(m->command[i]);
	free(m->command);
	for (size_t i = 0; m->models && i < m->nmodels; i++)
		free(m->models[i]);
	free(m->models);
	free(m->probe_path);
	free(m->group);
	for (size_t i = 0; m->upstream_paths && i < m->nupstream_paths; i++)
		free(m->upstream_paths[i]);
	free(m->upstream_paths);
	for (size_t i = 0; m->aliases && i < m->naliases; i++)
		free(m->aliases[i]);
	free(m->aliases);
	free(m->upstream_model);
	for (size_t i = 0; m->strip_params && i < m->nstrip_params; i++)
		free(m->strip_params[i]);
	free(m->strip_params);
	for (size_t i = 0; i < m->ndefaults; i++) {
		free(m->defaults[i].key);
		free(m->defaults[i].str);
	}
	free(m->defaults);
	memset(m, 0, sizeof *m);
}

/* One [env] entry: NAME=value on m->env (NULL-terminated; *cap its room). */
static int add_env(struct ctx *x, const struct mesh_toml_item *it, struct mesh_manifest *m, size_t *cap)
{
	if (!env_name_ok(it->key))
		return fail(x, it->line, it->col, "'%s' is not an environment variable name", it->key);
	/* MESH_WORKER_* are the worker library's own settings
	 * (MESH_WORKER_SPIN_US...): meshd sets none of them and
	 * passes none of its own environment's on */
	if (strncmp(it->key, "MESH_", 5) == 0 && strncmp(it->key, "MESH_WORKER_", 12) != 0)
		return fail(x, it->line, it->col,
			    "'%s': MESH_* variables are set by meshd (MESH_WORKER_* ones, the worker library's"
			    " settings, may be set here)",
			    it->key);
	if (it->type != MESH_TOML_STRING)
		return fail(x, it->vline, it->vcol, "'env.%s' must be a string, not %s %s", it->key,
			    art(mesh_toml_type_name(it->type)), mesh_toml_type_name(it->type));
	char **ne = mesh_grow(m->env, cap, m->nenv + 2, sizeof *ne);
	if (!ne)
		return -ENOMEM;
	m->env = ne;
	struct mesh_buf b = MESH_BUF_INIT;
	if (mesh_buf_addf(&b, "%s=%s", it->key, it->str))
		return -ENOMEM;
	m->env[m->nenv++] = mesh_buf_detach(&b, NULL);
	m->env[m->nenv] = NULL;
	return 0;
}

/* The keys read make one kind of program: an HTTP one has its command,
 * {port} and models, and no key of a native one (seen_native: the line
 * of the first); a native one no key of an HTTP one (seen_http) and its
 * backends. */
static int check_backend(struct ctx *x, const struct mesh_toml *t, struct mesh_manifest *m, unsigned seen_native,
			 unsigned seen_http, int have_backends)
{
	if (m->backend == MESH_BACKEND_HTTP) {
		int port = 0;
		for (size_t i = 0; i < m->ncommand; i++)
			port |= strstr(m->command[i], "{port}") != NULL;
		if (seen_native)
			return fail(x, seen_native, 1,
				    "this key is for native programs; backend = \"http\" takes command, models, probe_path, "
				    "probe_status, max_concurrency, group, memory, upstream_paths, aliases, upstream_model, "
				    "[filters], lifecycle.start_timeout");
		if (!m->command)
			return fail(x, 1, 1, "'command' is missing: backend = \"http\" needs the server's command line");
		if (!port)
			return fail(x, 1, 1, "'command' must contain {port}: the loopback port meshd picks for the server");
		if (!m->models)
			return fail(x, 1, 1, "'models' is missing: backend = \"http\" needs the model names it serves");
		return aliases_distinct(x, t, m);
	}
	if (seen_http)
		return fail(x, seen_http, 1, "this key is for HTTP programs: add backend = \"http\"");
	if (!have_backends)
		return fail(x, 1, 1, "'backends' is missing; use backends = [\"native\"]");
	return 0;
}

/* A manifest's values before its file is read. */
static void set_defaults(struct mesh_manifest *m)
{
	memset(m, 0, sizeof *m);
	m->device = MESH_DEVICE_CPU;
	m->ready_timeout_ns = MESH_READY_TIMEOUT_NS;
	m->online_timeout_ns = MESH_ONLINE_TIMEOUT_NS;
	m->stop_grace_ns = MESH_STOP_GRACE_NS;
	m->idle_ttl_ns = MESH_IDLE_TTL_NS;
	m->stop_signal = SIGTERM;
	m->max_workers = 1;
	m->ring_bytes = MESH_SLOT_DEFAULT_RING;
	m->start_timeout_ns = MESH_START_TIMEOUT_NS;
}

/* What the items read so far said of the backend: the first line of a key
 * only a native (shared-memory) program has, and of one only an HTTP
 * program has (0: none yet); whether `backends` was given. */
struct seen {
	int backends;
	unsigned native, http;
	size_t envcap; /* m->env's room */
};

/* One item of the file into m: a [table] header known, an [env] entry, a
 * filter default, or a known key's value.  0 or the error (x says where). */
static int take_item(struct ctx *x, const struct mesh_toml_item *it, struct mesh_manifest *m, const char *expect_name,
		     struct seen *sn)
{
	if (it->type == MESH_TOML_TABLE) {
		for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
			if (strcmp(tables[k], it->table) == 0)
				return 0;
		return fail(x, it->line, it->col,
			    "unknown table [%s] (known: env, limits, lifecycle, source, filters, filters.defaults)", it->table);
	}
	if (strcmp(it->table, "env") == 0)
		return add_env(x, it, m, &sn->envcap);
	if (strcmp(it->table, "filters.defaults") == 0) {
		sn->http = sn->http ? sn->http : it->line;
		return add_default(x, it, m);
	}
	const struct field *f = NULL;
	for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
		if (strcmp(fields[k].table, it->table) == 0 && strcmp(fields[k].key, it->key) == 0)
			f = &fields[k];
	if (!f) {
		if (*it->table)
			return fail(x, it->line, it->col, "unknown key '%s' in [%s]", it->key, it->table);
		return fail(x, it->line, it->col, "unknown key '%s'", it->key);
	}
	if (f->kind == K_BACKENDS)
		sn->backends = 1;
	if (f->kind == K_BACKENDS || f->kind == K_ARGS || f->kind == K_RING || f->kind == K_DEVICE || f->kind == K_VENV ||
	    f->off == OFF(max_workers) || f->off == OFF(ready_timeout_ns) || f->off == OFF(online_timeout_ns) ||
	    f->off == OFF(call_timeout_ns))
		sn->native = sn->native ? sn->native : it->line;
	else if (f->kind == K_STRV || f->kind == K_PATH || f->off == OFF(probe_status) || f->off == OFF(max_concurrency) ||
		 f->off == OFF(group) || f->off == OFF(start_timeout_ns) || f->off == OFF(memory) ||
		 f->off == OFF(upstream_model))
		sn->http = sn->http ? sn->http : it->line;
	int rc = set_field(x, f, it, m);
	if (!rc && f->kind == K_NAME && f->off == OFF(name) && expect_name && strcmp(m->name, expect_name) != 0)
		rc = fail(x, it->vline, it->vcol, "name \"%s\" does not match the file name \"%s\"", m->name,
			  expect_name);
	return rc;
}

/* After the last item: what the file must have said (a name, a backend,
 * device = "gpu" for GPU keys), and the defaults that follow from it. */
static int complete(struct ctx *x, const struct mesh_toml *t, struct mesh_manifest *m, const struct seen *sn)
{
	int rc = 0;
	if (!m->name)
		return fail(x, 1, 1, "'name' is missing");
	if ((rc = check_backend(x, t, m, sn->native, sn->http, sn->backends)))
		return rc;
	if (m->device != MESH_DEVICE_GPU && (m->gpus || m->vram))
		return fail(x, 1, 1, "'%s' is for GPU programs: add device = \"gpu\"", m->gpus ? "gpus" : "vram");
	if (m->device == MESH_DEVICE_GPU && !m->gpus)
		m->gpus = 1;
	if (!m->args && !(m->args = calloc(1, sizeof *m->args)))
		return -ENOMEM;
	if (!m->env && !(m->env = calloc(1, sizeof *m->env)))
		return -ENOMEM;
	if (!m->source_hash && !(m->source_hash = strdup("")))
		return -ENOMEM;
	return 0;
}

int mesh_manifest_parse(const char *file, const char *text, size_t len, const char *expect_name,
			struct mesh_manifest *m, char **err)
{
	struct ctx x = {file ? file : "(manifest)", err};
	struct mesh_toml t = MESH_TOML_INIT;
	struct seen sn = {0};
	int rc;
	if (err)
		*err = NULL;
	set_defaults(m);
	/* A UTF-8 byte order mark (editors on some systems write one) is not TOML: skipped. */
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
		text += 3;
		len -= 3;
	}
	rc = mesh_toml_parse(x.file, text, len, &t, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < t.n && !rc; i++)
		rc = take_item(&x, &t.items[i], m, expect_name, &sn);
	if (!rc)
		rc = complete(&x, &t, m, &sn);
	mesh_toml_release(&t);
	if (rc) {
		mesh_manifest_release(m);
		if (rc == -ENOMEM && err) {
			free(*err);
			*err = NULL;
		}
	}
	return rc;
}
