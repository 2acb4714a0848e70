#include "host/limits.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/io.h"
#include "host/procfile.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAP_SYS_ADMIN_BIT 21
#define CAP_SYS_RESOURCE_BIT 24

static void setwhy(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void setwhy(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
}

static char *slurp(const char *dir, const char *name)
{
	char p[600];
	char *out = NULL;
	size_t len;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	if (mesh__read_proc(p, 1 << 20, &out, &len))
		return NULL;
	return out;
}

/* Un-escapes mountinfo's \040-style octal escapes in place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
		    r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = 0;
}

/* The mount point of the first cgroup2 mount, or "" . */
static void cgroup2_mount(const char *mountinfo, char *out, size_t cap)
{
	out[0] = 0;
	if (!mountinfo)
		return;
	const char *line = mountinfo;
	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t ll = nl ? (size_t)(nl - line) : strlen(line);
		char buf[1024];
		if (ll < sizeof buf) {
			memcpy(buf, line, ll);
			buf[ll] = 0;
			/* id parent maj:min root mountpoint opts [optional...] - fstype src superopts */
			char *sep = strstr(buf, " - ");
			if (sep && strncmp(sep + 3, "cgroup2 ", 8) == 0) {
				char *f[5] = {0};
				char *save = NULL, *tok = strtok_r(buf, " ", &save);
				for (int i = 0; tok && i < 5; i++, tok = strtok_r(NULL, " ", &save))
					f[i] = tok;
				if (f[4]) {
					unescape(f[4]);
					snprintf(out, cap, "%s", f[4]);
					return;
				}
			}
		}
		if (!nl)
			break;
		line = nl + 1;
	}
}

static int has_word(const char *list, const char *w)
{
	size_t wl = strlen(w);
	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		const char *e = p;
		while (*e && *e != ' ' && *e != '\n')
			e++;
		if ((size_t)(e - p) == wl && strncmp(p, w, wl) == 0)
			return 1;
		p = e;
	}
	return 0;
}

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = 0;
}

static void detect_cgroups(struct mesh_limits_caps *caps, const char *root_override);

/* A cgroup of our own under dir, with cgroup.kill: made, looked at, removed. */
static int cgroup_kill_works(const char *dir, char *why, size_t cap)
{
	char probe[700], knob[760];
	snprintf(probe, sizeof probe, "%s/mesh-probe-%d", dir, (int)getpid());
	if (mkdir(probe, 0755) != 0 && errno != EEXIST) {
		setwhy(why, cap, "no cgroup: cannot make a group under %s: %s", dir, strerror(errno));
		return 0;
	}
	snprintf(knob, sizeof knob, "%s/cgroup.kill", probe);
	int ok = access(knob, W_OK) == 0;
	if (!ok)
		setwhy(why, cap, "no cgroup: %s has no writable cgroup.kill (Linux < 5.14?)", probe);
	rmdir(probe);
	return ok;
}

/* Groups "mesh-<pid>-..." of a meshd that is gone (SIGKILLed: no one
 * removed them) are killed and removed; a live meshd's are left alone. */
static void sweep_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		if (strncmp(de->d_name, "mesh-", 5) != 0)
			continue;
		long pid = strtol(de->d_name + 5, &end, 10);
		if (end == de->d_name + 5 || *end != '-' || pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		char p[800];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		mesh_limits_cgroup_remove(p, 1);
	}
	closedir(d);
}

static void detect_containment(struct mesh_limits_caps *caps, int try_cgroup)
{
	char pwhy[256] = "", cwhy[256] = "";
	if (mesh_proc_pidns_probe(pwhy, sizeof pwhy) == MESH_PROC_HOW_PIDNS)
		caps->contain |= MESH_CONTAIN_PIDNS;
	if (!try_cgroup)
		setwhy(cwhy, sizeof cwhy, "no cgroup: not tried");
	else if (!*caps->cgroup_dir)
		setwhy(cwhy, sizeof cwhy, "no cgroup: %s", caps->cgroup_why);
	else if (access(caps->cgroup_dir, W_OK) != 0)
		setwhy(cwhy, sizeof cwhy, "no cgroup: %s is not writable (not delegated to meshd)", caps->cgroup_dir);
	else if (cgroup_kill_works(caps->cgroup_dir, cwhy, sizeof cwhy)) {
		caps->contain |= MESH_CONTAIN_CGROUP;
		sweep_stale(caps->cgroup_dir);
	}
	setwhy(caps->contain_why, sizeof caps->contain_why, "%s%s%s", pwhy, *pwhy && *cwhy ? "; " : "", cwhy);
}

const char *mesh_limits_containment_name(unsigned contain)
{
	switch (contain & (MESH_CONTAIN_PIDNS | MESH_CONTAIN_CGROUP)) {
	case MESH_CONTAIN_PIDNS | MESH_CONTAIN_CGROUP:
		return "cgroup+pid-namespace";
	case MESH_CONTAIN_PIDNS:
		return "pid-namespace";
	case MESH_CONTAIN_CGROUP:
		return "cgroup";
	default:
		return "process-group";
	}
}

void mesh_limits_detect(struct mesh_limits_caps *caps, const char *root_override)
{
	memset(caps, 0, sizeof *caps);
	detect_cgroups(caps, root_override);
	detect_containment(caps, root_override == NULL);
}

static void detect_cgroups(struct mesh_limits_caps *caps, const char *root_override)
{
	const char *self = root_override ? root_override : "/proc/self";
	caps->avail = MESH_LIM_MEMORY_RLIMIT | MESH_LIM_NOFILE_RLIMIT;

	/* RLIMIT_NPROC: skipped by the kernel for CAP_SYS_ADMIN / CAP_SYS_RESOURCE. */
	char *status = slurp(self, "status");
	const char *ce = status ? strstr(status, "\nCapEff:") : NULL;
	if (!ce) {
		setwhy(caps->nproc_why, sizeof caps->nproc_why, "cannot read this process's capabilities");
	} else {
		unsigned long long eff = strtoull(ce + 8, NULL, 16);
		if (eff & (1ull << CAP_SYS_ADMIN_BIT | 1ull << CAP_SYS_RESOURCE_BIT))
			setwhy(caps->nproc_why, sizeof caps->nproc_why,
				 "meshd runs with CAP_SYS_ADMIN or CAP_SYS_RESOURCE (root), which RLIMIT_NPROC ignores");
		else
			caps->avail |= MESH_LIM_NPROC_RLIMIT;
	}
	free(status);

	char *mi = slurp(self, "mountinfo");
	char mnt[400];
	cgroup2_mount(mi, mnt, sizeof mnt);
	free(mi);
	if (!*mnt) {
		setwhy(caps->cgroup_why, sizeof caps->cgroup_why, "no cgroup2 file system is mounted");
		return;
	}
	char *cg = slurp(self, "cgroup");
	const char *rel = NULL;
	if (cg) {
		if (strncmp(cg, "0::", 3) == 0)
			rel = cg + 3;
		else if ((rel = strstr(cg, "\n0::")))
			rel += 4;
	}
	if (!rel) {
		setwhy(caps->cgroup_why, sizeof caps->cgroup_why, "this process is in no cgroup2 group");
		free(cg);
		return;
	}
	char relbuf[256];
	snprintf(relbuf, sizeof relbuf, "%.*s", (int)strcspn(rel, "\n"), rel);
	free(cg);
	setwhy(caps->cgroup_dir, sizeof caps->cgroup_dir, "%s%s", mnt, strcmp(relbuf, "/") == 0 ? "" : relbuf);
	char *sub = slurp(caps->cgroup_dir, "cgroup.subtree_control");
	char *ctl = slurp(caps->cgroup_dir, "cgroup.controllers");
	if (!sub) {
		setwhy(caps->cgroup_why, sizeof caps->cgroup_why, "cannot read %s/cgroup.subtree_control",
			 caps->cgroup_dir);
	} else if (access(caps->cgroup_dir, W_OK) != 0) {
		setwhy(caps->cgroup_why, sizeof caps->cgroup_why, "%s is not writable (not delegated to meshd)",
			 caps->cgroup_dir);
	} else {
		static const struct {
			const char *name;
			unsigned bit;
		} want[] = {{"memory", MESH_LIM_MEMORY_CGROUP}, {"cpu", MESH_LIM_CPU_CGROUP}, {"pids", MESH_LIM_PIDS_CGROUP}};
		struct mesh_buf miss = MESH_BUF_INIT;
		for (size_t i = 0; i < 3; i++) {
			if (has_word(sub, want[i].name))
				caps->avail |= want[i].bit;
			else
				mesh_buf_addf(&miss, "%s%s", miss.len ? " " : "", want[i].name);
		}
		if (miss.len) {
			if (ctl)
				trim(ctl);
			trim(sub);
			setwhy(caps->cgroup_why, sizeof caps->cgroup_why,
				 "cgroup2 group %s does not delegate '%s' to its children (subtree_control: '%s'; controllers: '%s')",
				 caps->cgroup_dir, miss.p, sub, ctl ? ctl : "?");
		}
		mesh_buf_release(&miss);
	}
	free(sub);
	free(ctl);
}

int mesh_limits_plan(const struct mesh_limits *want, const struct mesh_limits_caps *caps, unsigned *enforced,
		     char **err)
{
	unsigned e = 0;
	const char *what = NULL, *why = "";
	if (err)
		*err = NULL;
	if (want->memory)
		e |= caps->avail & MESH_LIM_MEMORY_CGROUP ? MESH_LIM_MEMORY_CGROUP : MESH_LIM_MEMORY_RLIMIT;
	if (want->open_files)
		e |= MESH_LIM_NOFILE_RLIMIT;
	if (want->cpu_milli) {
		if (caps->avail & MESH_LIM_CPU_CGROUP)
			e |= MESH_LIM_CPU_CGROUP;
		else
			what = "cpu", why = *caps->cgroup_why ? caps->cgroup_why : "no cgroup2 cpu controller";
	}
	if (!what && want->processes) {
		if (caps->avail & MESH_LIM_PIDS_CGROUP)
			e |= MESH_LIM_PIDS_CGROUP;
		else if (caps->avail & MESH_LIM_NPROC_RLIMIT)
			e |= MESH_LIM_NPROC_RLIMIT;
		else
			what = "processes", why = caps->nproc_why;
	}
	if (what) {
		if (err) {
			struct mesh_buf b = MESH_BUF_INIT;
			if (!strcmp(what, "cpu"))
				mesh_buf_addf(&b, "limits.cpu cannot be enforced on this machine: it needs a cgroup v2 "
						  "cpu controller and %s", why);
			else
				mesh_buf_addf(&b, "limits.processes cannot be enforced on this machine: no cgroup v2 "
						  "pids controller (%s) and %s",
					      *caps->cgroup_why ? caps->cgroup_why : "none", why);
			*err = b.p ? mesh_buf_detach(&b, NULL) : NULL;
		}
		return MESH_E_UNSUPPORTED;
	}
	*enforced = e;
	return 0;
}

void mesh_limits_describe(unsigned enforced, char *out, size_t cap)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {
		/* Say what is really bounded: RLIMIT_DATA caps each process's
		 * data segment, not the group's memory. */
		{MESH_LIM_MEMORY_CGROUP, "memory:whole group (cgroup)"},
		{MESH_LIM_MEMORY_RLIMIT, "memory:per-process data segment (rlimit)"},
		{MESH_LIM_CPU_CGROUP, "cpu:whole group (cgroup)"},
		{MESH_LIM_NOFILE_RLIMIT, "open_files:per-process (rlimit)"},
		{MESH_LIM_PIDS_CGROUP, "processes:whole group (cgroup)"},
		{MESH_LIM_NPROC_RLIMIT, "processes:per-user (rlimit)"},
	};
	size_t len = 0;
	if (!cap)
		return;
	out[0] = 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!(enforced & names[i].bit))
			continue;
		int k = snprintf(out + len, cap - len, "%s%s", len ? "," : "", names[i].name);
		if (k < 0 || (size_t)k >= cap - len)
			return;
		len += (size_t)k;
	}
	if (!len)
		snprintf(out, cap, "none");
}

static int write_knob(const char *dir, const char *knob, const char *val)
{
	char p[700];
	snprintf(p, sizeof p, "%s/%s", dir, knob);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = mesh_write_all(fd, val, strlen(val));
	close(fd);
	return rc;
}

int mesh_limits_cgroup_create(const struct mesh_limits_caps *caps, const char *tag, const struct mesh_limits *want,
			      unsigned enforced, char *dir_out, size_t dir_cap, int *procs_fd)
{
	char v[64];
	int rc;
	*procs_fd = -1;
	if (!*caps->cgroup_dir)
		return MESH_E_UNSUPPORTED;
	if ((size_t)snprintf(dir_out, dir_cap, "%s/mesh-%s", caps->cgroup_dir, tag) >= dir_cap)
		return -ENAMETOOLONG;
	if (mkdir(dir_out, 0755) != 0 && errno != EEXIST)
		return -errno;
	if (enforced & MESH_LIM_MEMORY_CGROUP) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)want->memory);
		if ((rc = write_knob(dir_out, "memory.max", v)))
			goto bad;
	}
	if (enforced & MESH_LIM_CPU_CGROUP) {
		snprintf(v, sizeof v, "%llu 100000", (unsigned long long)want->cpu_milli * 100ull);
		if ((rc = write_knob(dir_out, "cpu.max", v)))
			goto bad;
	}
	if (enforced & MESH_LIM_PIDS_CGROUP) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)want->processes);
		if ((rc = write_knob(dir_out, "pids.max", v)))
			goto bad;
	}
	char p[700];
	snprintf(p, sizeof p, "%s/cgroup.procs", dir_out);
	*procs_fd = open(p, O_WRONLY | O_CLOEXEC);
	if (*procs_fd < 0) {
		rc = -errno;
		goto bad;
	}
	return 0;
bad:
	rmdir(dir_out);
	return rc;
}

int mesh_limits_cgroup_kill(const char *dir)
{
	return write_knob(dir, "cgroup.kill", "1");
}

int mesh_limits_cgroup_remove(const char *dir, int kill_rest)
{
	if (!dir || !*dir)
		return 0;
	if (kill_rest)
		mesh_limits_cgroup_kill(dir);
	if (rmdir(dir) == 0 || errno == ENOENT)
		return 0;
	return -errno;
}

size_t mesh_limits_rlimits(const struct mesh_limits *want, unsigned enforced,
			   struct mesh_proc_rlimit out[MESH_PROC_RLIMITS_MAX])
{
	size_t n = 0;
	if (enforced & MESH_LIM_MEMORY_RLIMIT)
		out[n++] = (struct mesh_proc_rlimit){RLIMIT_DATA, want->memory};
	if (enforced & MESH_LIM_NOFILE_RLIMIT)
		out[n++] = (struct mesh_proc_rlimit){RLIMIT_NOFILE, want->open_files};
	if (enforced & MESH_LIM_NPROC_RLIMIT)
		out[n++] = (struct mesh_proc_rlimit){RLIMIT_NPROC, want->processes};
	return n;
}

/* A uid's digits: 1..10 digits, nothing else. */
static int all_digits(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 10)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

int mesh_limits_run_as(const char *user, struct mesh_run_as *out, char **err)
{
	struct passwd pw, *pp = NULL;
	char buf[4096];
	memset(out, 0, sizeof *out);
	if (err)
		*err = NULL;
	int num = all_digits(user);
	uid_t uid = num ? (uid_t)strtoul(user, NULL, 10) : 0;
	int rc = num ? getpwuid_r(uid, &pw, buf, sizeof buf, &pp) : getpwnam_r(user, &pw, buf, sizeof buf, &pp);
	if (!pp && !num) {
		if (err)
			*err = mesh_strf("user \"%s\" does not exist on this machine%s%s", user, rc ? ": " : "",
					 rc ? strerror(rc) : "");
		return MESH_E_NOTFOUND;
	}
	out->uid = pp ? pp->pw_uid : uid;
	out->gid = pp ? pp->pw_gid : (gid_t)uid;
	snprintf(out->name, sizeof out->name, "%s", user);
	if (geteuid() != 0) {
		if (out->uid == geteuid())
			return 0; /* already: nothing to change */
		if (err)
			*err = mesh_strf("user \"%s\" (uid %u) needs meshd to run as root: this meshd runs as uid %u and "
					 "starts workers as that user only",
					 user, (unsigned)out->uid, (unsigned)geteuid());
		return MESH_E_REFUSED;
	}
	if (pp) {
		int n = MESH_PROC_GROUPS_MAX;
		if (getgrouplist(pp->pw_name, pp->pw_gid, out->groups, &n) < 0)
			n = MESH_PROC_GROUPS_MAX; /* more than fit: the first ones */
		out->ngroups = (size_t)n;
	} else {
		out->groups[0] = out->gid;
		out->ngroups = 1;
	}
	out->set = 1;
	return 0;
}

const char *mesh_limits_default_user(void)
{
	struct passwd pw, *pp = NULL;
	char buf[4096];
	if (geteuid() != 0)
		return NULL;
	const char *e = getenv("MESHD_DEFAULT_USER");
	if (e && *e)
		return e;
	getpwnam_r("mesh", &pw, buf, sizeof buf, &pp);
	return pp ? "mesh" : "nobody";
}
