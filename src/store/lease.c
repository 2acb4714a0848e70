/* The lease line (one pack, one unpack), the holder's identity, and the
 * rules that say when a lease is free (store.h). */
#include "store/store.h"

#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEASE_VERSION 2

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
	const struct mesh_lease_holder *h = &st->holder;
	char boot[33];
	int n;
	for (int i = 0; i < 16; i++)
		snprintf(boot + 2 * i, 3, "%02x", h->boot_id[i]);
	n = snprintf(buf, cap,
		     "mesh-lease %d %" PRIu64 " %" PRIu64 " %" PRIu32 " %016" PRIx64 " %s %s %" PRIu64 " %" PRIu64
		     " %" PRIu64 " %" PRIu32 " %" PRIu64 " ",
		     LEASE_VERSION, st->deadline_ns, st->started_ns, st->attempt, st->token, st->node, boot,
		     st->boot_deadline_ns, h->timens, h->pidns, h->pid, h->pid_start);
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

/* The next field as a decimal number <= max. */
static int num(const char **p, const char *end, uint64_t max, uint64_t *v)
{
	const char *f;
	size_t fl;
	return field(p, end, &f, &fl) || mesh_parse_u64n(f, fl, max, v) ? -1 : 0;
}

/* The format-2 fields after the node: boot id, boot deadline, holder. */
static int parse_holder(const char **p, const char *end, struct mesh_lease_stamp *s)
{
	struct mesh_lease_holder *h = &s->holder;
	const char *f;
	size_t fl;
	uint64_t v;
	if (field(p, end, &f, &fl) || fl != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		if (hexn(f + 2 * i, 2, &v))
			return -1;
		h->boot_id[i] = (uint8_t)v;
	}
	if (num(p, end, UINT64_MAX, &s->boot_deadline_ns) || num(p, end, UINT64_MAX, &h->timens) ||
	    num(p, end, UINT64_MAX, &h->pidns) || num(p, end, INT32_MAX, &v) || num(p, end, UINT64_MAX, &h->pid_start))
		return -1;
	h->pid = (uint32_t)v;
	return 0;
}

int mesh_lease_parse(const char *buf, size_t n, struct mesh_lease_stamp *st)
{
	const char *p = buf, *end = buf + n, *f;
	size_t fl;
	uint64_t v, crc;
	struct mesh_lease_stamp s;
	const char *crc_at;
	int version;
	memset(&s, 0, sizeof s);
	if (n < 16 || buf[n - 1] != '\n')
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 10 || memcmp(f, "mesh-lease", 10))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 1 || (f[0] != '1' && f[0] != '2'))
		return MESH_E_PARSE;
	version = f[0] - '0';
	if (num(&p, end, UINT64_MAX, &s.deadline_ns) || num(&p, end, UINT64_MAX, &s.started_ns) ||
	    num(&p, end, UINT32_MAX, &v))
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
	if (version == 2 && parse_holder(&p, end, &s))
		return MESH_E_PARSE;
	crc_at = p;
	if (field(&p, end, &f, &fl) || fl != 8 || hexn(f, fl, &crc) || p != end)
		return MESH_E_PARSE;
	if ((uint32_t)crc != mesh_crc32c(0, buf, (size_t)(crc_at - buf)))
		return MESH_E_PARSE;
	*st = s;
	return 0;
}

static uint64_t ns_inode(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void read_boot_id(uint8_t id[16])
{
	char *text;
	size_t len, k = 0;
	uint64_t v;
	memset(id, 0, 16);
	if (mesh_read_file("/proc/sys/kernel/random/boot_id", 64, &text, &len))
		return;
	for (size_t i = 0; i + 1 < len && k < 16; i++) {
		if (text[i] == '-')
			continue;
		if (hexn(text + i, 2, &v))
			break;
		id[k++] = (uint8_t)v;
		i++;
	}
	if (k != 16)
		memset(id, 0, 16);
	free(text);
}

/* The state letter and start time (field 22) of /proc/<pid>/stat ("self"
 * for pid 0).  0, -ENOENT when there is no such process, -errno or
 * MESH_E_PARSE. */
static int proc_stat(uint32_t pid, char *state, uint64_t *start)
{
	char path[64], *text, *p;
	const char *f, *end;
	size_t len, fl;
	int rc;
	if (pid)
		snprintf(path, sizeof path, "/proc/%" PRIu32 "/stat", pid);
	else
		snprintf(path, sizeof path, "/proc/self/stat");
	rc = mesh_read_file(path, 4096, &text, &len);
	if (rc)
		return rc;
	rc = MESH_E_PARSE;
	/* the name (field 2) may hold spaces and parentheses: skip to the last ')' */
	p = strrchr(text, ')');
	end = text + len;
	if (p && p + 2 < end) {
		const char *q = p + 2;
		*state = *q;
		for (int i = 3; i <= 22 && !field(&q, end, &f, &fl); i++)
			if (i == 22 && !mesh_parse_u64n(f, fl, UINT64_MAX, start))
				rc = 0;
	}
	free(text);
	return rc;
}

/* 1 when this process's /proc shows its own PID namespace (so that
 * /proc/<pid> means the process kill(pid) reaches): NSpid then lists one
 * pid, ours. */
static int proc_is_ours(void)
{
	char *text, *p;
	size_t len;
	int ours = 0;
	if (mesh_read_file("/proc/self/status", 1 << 16, &text, &len))
		return 0;
	p = strstr(text, "\nNSpid:");
	if (p) {
		char *e = strchr(p + 1, '\n');
		uint64_t v;
		p += 7;
		while (*p == '\t' || *p == ' ')
			p++;
		if (e && !mesh_parse_u64n(p, (size_t)(e - p), INT32_MAX, &v))
			ours = v == (uint64_t)getpid();
	}
	free(text);
	return ours;
}

void mesh_lease_holder_self(struct mesh_lease_holder *h)
{
	char state;
	memset(h, 0, sizeof *h);
	read_boot_id(h->boot_id);
	h->timens = ns_inode("/proc/self/ns/time");
	h->pidns = ns_inode("/proc/self/ns/pid");
	h->pid = (uint32_t)getpid();
	if (proc_stat(0, &state, &h->pid_start))
		h->pid_start = 0;
}

void mesh_lease_clock_now(struct mesh_lease_clock *c, const struct mesh_lease_holder *self)
{
	c->wall_ns = mesh_wall_ns();
	c->boot_ns = mesh_boot_ns();
	c->self = *self;
}

static int boot_known(const uint8_t id[16])
{
	static const uint8_t zero[16];
	return memcmp(id, zero, 16) != 0;
}

static int same_boot(const struct mesh_lease_holder *a, const struct mesh_lease_holder *b)
{
	return boot_known(a->boot_id) && memcmp(a->boot_id, b->boot_id, 16) == 0;
}

int mesh_lease_expired(const struct mesh_lease_stamp *st, const struct mesh_lease_clock *now)
{
	if (st->boot_deadline_ns && same_boot(&st->holder, &now->self) && st->holder.timens == now->self.timens)
		return now->boot_ns >= st->boot_deadline_ns;
	if (st->deadline_ns > UINT64_MAX - MESH_LEASE_SKEW_NS)
		return 0;
	return now->wall_ns >= st->deadline_ns + MESH_LEASE_SKEW_NS;
}

int mesh_lease_holder_gone(const struct mesh_lease_holder *h, const struct mesh_lease_holder *self)
{
	char state;
	uint64_t start;
	int rc;
	if (!h->pid || h->pid > INT32_MAX || !h->pidns || h->pidns != self->pidns || !same_boot(h, self))
		return 0;
	if (kill((pid_t)h->pid, 0) < 0 && errno == ESRCH)
		return 1;
	/* The pid is taken: by the holder, by a zombie, or by a process that
	 * reused it.  Only a /proc of our namespace can tell which. */
	rc = proc_stat(h->pid, &state, &start);
	if (rc == 0 && state != 'Z' && state != 'X' && (!h->pid_start || start == h->pid_start))
		return 0;
	if (rc && rc != -ENOENT)
		return 0;
	return proc_is_ours();
}

int mesh_lease_free(const struct mesh_lease_stamp *st, const struct mesh_lease_clock *now)
{
	return mesh_lease_expired(st, now) || mesh_lease_holder_gone(&st->holder, &now->self);
}

#define BLOCK_VERSION 1

size_t mesh_lease_block_format(char *buf, size_t cap, const struct mesh_lease_stamp *st, uint64_t mask)
{
	size_t n = mesh_lease_format(buf, cap, st);
	int m;
	if (!n)
		return 0;
	m = snprintf(buf + n, cap - n, "mesh-block %d %016" PRIx64 " ", BLOCK_VERSION, mask);
	if (m < 0 || n + (size_t)m + 10 > cap)
		return 0;
	m += snprintf(buf + n + m, cap - n - (size_t)m, "%08" PRIx32 "\n", mesh_crc32c(0, buf + n, (size_t)m));
	return n + (size_t)m;
}

int mesh_lease_block_parse(const char *buf, size_t n, struct mesh_lease_stamp *st, uint64_t *mask)
{
	const char *nl = memchr(buf, '\n', n), *p, *end = buf + n, *f, *crc_at;
	size_t fl;
	uint64_t v, crc;
	struct mesh_lease_stamp s;
	if (!nl || mesh_lease_parse(buf, (size_t)(nl + 1 - buf), &s))
		return MESH_E_PARSE;
	p = nl + 1;
	if (field(&p, end, &f, &fl) || fl != 10 || memcmp(f, "mesh-block", 10))
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 1 || f[0] != '0' + BLOCK_VERSION)
		return MESH_E_PARSE;
	if (field(&p, end, &f, &fl) || fl != 16 || hexn(f, fl, &v))
		return MESH_E_PARSE;
	crc_at = p;
	if (field(&p, end, &f, &fl) || fl != 8 || hexn(f, fl, &crc) || p != end || end[-1] != '\n')
		return MESH_E_PARSE;
	if ((uint32_t)crc != mesh_crc32c(0, nl + 1, (size_t)(crc_at - nl - 1)))
		return MESH_E_PARSE;
	*st = s;
	*mask = v;
	return 0;
}
