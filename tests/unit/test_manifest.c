#include "base/err.h"
#include "host/elf.h"
#include "host/image.h"
#include "host/limits.h"
#include "host/manifest.h"
#include "host/toml.h"
#include "runner/t.h"

#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char GOOD[] = "# a manifest\n"
			   "name = \"echo\"\n"
			   "description = 'says it back'  # inline comment\n"
			   "backends = [\"native\"]\n"
			   "device = \"cpu\"\n"
			   "args = [\n"
			   "  \"--x\", # first\n"
			   "  \"tab\\there \\u00e9\",\n"
			   "]\n"
			   "max_workers = 4\n"
			   "idle_ttl = \"1.5m\"\n"
			   "\n"
			   "[env]\n"
			   "LOG_LEVEL = \"debug\"\n"
			   "[limits]\n"
			   "memory = \"512M\"\n"
			   "cpu = \"1.5\"\n"
			   "open_files = 1_024\n"
			   "processes = 64\n"
			   "[lifecycle]\n"
			   "ready_timeout = \"500ms\"\n"
			   "online_timeout = \"2s\"\n"
			   "stop_signal = \"INT\"\n"
			   "stop_grace = \"250ms\"\n"
			   "[source]\n"
			   "hash = \"sha256:abc\"\n";

TEST(manifest_good_parses_every_field)
{
	struct mesh_manifest m;
	char *err = NULL;
	int rc = mesh_manifest_parse("echo.toml", GOOD, strlen(GOOD), "echo", &m, &err);
	if (rc)
		FAIL("parse failed: %s", err);
	EXPECT_STREQ(m.name, "echo");
	EXPECT_STREQ(m.description, "says it back");
	EXPECT_EQ(m.device, MESH_DEVICE_CPU);
	ASSERT_EQ(m.nargs, 2);
	EXPECT_STREQ(m.args[0], "--x");
	EXPECT_STREQ(m.args[1], "tab\there \xc3\xa9");
	EXPECT_TRUE(m.args[2] == NULL);
	EXPECT_EQ(m.max_workers, 4);
	EXPECT_UEQ(m.idle_ttl_ns, 90ull * 1000000000ull);
	ASSERT_EQ(m.nenv, 1);
	EXPECT_STREQ(m.env[0], "LOG_LEVEL=debug");
	EXPECT_UEQ(m.limits.memory, 512ull << 20);
	EXPECT_EQ(m.limits.cpu_milli, 1500);
	EXPECT_UEQ(m.limits.open_files, 1024);
	EXPECT_UEQ(m.limits.processes, 64);
	EXPECT_UEQ(m.ready_timeout_ns, 500ull * 1000000);
	EXPECT_UEQ(m.online_timeout_ns, 2ull * 1000000000);
	EXPECT_EQ(m.stop_signal, SIGINT);
	EXPECT_UEQ(m.stop_grace_ns, 250ull * 1000000);
	EXPECT_STREQ(m.source_hash, "sha256:abc");
	mesh_manifest_release(&m);
}

/* Durations in mesh's one grammar: a number is seconds, as is a string
 * without a unit (both were refused: "must be a duration like 500ms"). */
TEST(manifest_durations_bare_seconds)
{
	static const char M[] = "name = \"echo\"\nbackends = [\"native\"]\nidle_ttl = 300\n"
				"[lifecycle]\nstop_grace = \"3\"\nready_timeout = \"1.5m\"\n";
	struct mesh_manifest m;
	char *err = NULL;
	int rc = mesh_manifest_parse("echo.toml", M, strlen(M), "echo", &m, &err);
	if (rc)
		FAIL("parse failed: %s", err);
	EXPECT_UEQ(m.idle_ttl_ns, 300ull * 1000000000ull);
	EXPECT_UEQ(m.stop_grace_ns, 3ull * 1000000000ull);
	EXPECT_UEQ(m.ready_timeout_ns, 90ull * 1000000000ull);
	mesh_manifest_release(&m);
}

TEST(manifest_defaults)
{
	const char *t = "name = \"a\"\nbackends = [\"native\"]\n";
	struct mesh_manifest m;
	char *err = NULL;
	ASSERT_EQ(mesh_manifest_parse("a.toml", t, strlen(t), NULL, &m, &err), 0);
	EXPECT_UEQ(m.ready_timeout_ns, 60ull * 1000000000);
	EXPECT_UEQ(m.online_timeout_ns, 60ull * 1000000000);
	EXPECT_UEQ(m.stop_grace_ns, 3ull * 1000000000);
	EXPECT_EQ(m.stop_signal, SIGTERM);
	EXPECT_EQ(m.max_workers, 1);
	EXPECT_EQ(m.nargs, 0);
	EXPECT_TRUE(m.args && !m.args[0]);
	EXPECT_STREQ(m.source_hash, "");
	EXPECT_UEQ(m.limits.memory, 0);
	mesh_manifest_release(&m);
}

/* Each bad manifest, with the exact "file:line:col: message" start. */
TEST(manifest_errors_table)
{
	static const struct {
		const char *text, *want;
	} rows[] = {
		{"name = \"a\"\nbackends = [\"native\"]\ncolour = \"red\"\n", "m.toml:3:1: unknown key 'colour'"},
		{"name = \"a\"\nbackends = [\"native\"]\n[limits]\n  mem = 3\n", "m.toml:4:3: unknown key 'mem' in [limits]"},
		{"name = \"a\"\nbackends = [\"native\"]\n[gpu]\n", "m.toml:3:1: unknown table [gpu]"},
		{"name = 3\n", "m.toml:1:8: 'name' must be a string, not an integer"},
		{"name = \"a\"\nbackends = \"native\"\n", "m.toml:2:12: 'backends' must be an array, not a string"},
		{"name = \"a\"\nbackends = [\"native\"]\nmax_workers = \"2\"\n",
		 "m.toml:3:15: 'max_workers' must be an integer, not a string"},
		{"name = \"a\"\nbackends = [\"native\"]\nmax_workers = 0\n", "m.toml:3:15: 'max_workers' must be between 1"},
		{"name = \"a\"\nbackends = [\"wasm\"]\n", "m.toml:2:12: backend 'wasm' is not supported"},
		{"name = \"a\"\nbackends = [\"native\"]\ndevice = \"metal\"\n",
		 "m.toml:3:10: device \"metal\" does not exist on Linux"},
		{"name = \"a\"\nbackends = [\"native\"]\ndevice = \"tpu\"\n", "m.toml:3:10: 'device' must be \"cpu\" or \"gpu\""},
		{"name = \"a\"\n", "m.toml:1:1: 'backends' is missing"},
		{"backends = [\"native\"]\n", "m.toml:1:1: 'name' is missing"},
		{"name = \"b\"\nbackends = [\"native\"]\n", "m.toml:1:8: name \"b\" does not match the file name \"a\""},
		{"name = \"a\"\nname = \"a\"\n", "m.toml:2:1: key 'name' defined twice"},
		{"name = \"a\"\n[limits]\n[limits]\n", "m.toml:3:1: table [limits] defined twice"},
		{"name = \"a\nbackends = []\n", "m.toml:1:8: unterminated string"},
		{"name = \"a\\q\"\n", "m.toml:1:10: unknown escape sequence"},
		{"name = \"a\" x\n", "m.toml:1:12: expected the end of the line"},
		{"name\n", "m.toml:1:5: expected '=' after the key"},
		{"name = \n", "m.toml:1:8: expected a value"},
		{"x = 1.5\n", "m.toml:1:1: unknown key 'x'"},
		{"name = \"a\"\nbackends = [\"native\"]\nmemory = 1.5\n", "m.toml:3:10: 'memory' must be"},
		{"x = 1.\n", "m.toml:1:7: a float's '.' must be followed by digits"},
		{"x = 1e\n", "m.toml:1:7: a float's exponent must have digits"},
		{"x = 1.5_\n", "m.toml:1:8: '_' must sit between digits"},
		{"x = 01.5\n", "m.toml:1:5: leading zeros are not allowed"},
		{"x = 1.5.2\n", "m.toml:1:5: not a decimal number"},
		{"x = 1e400\n", "m.toml:1:5: float out of range"},
		{"x = -1.5e+400\n", "m.toml:1:5: float out of range"},
		{"x = inf\n", "m.toml:1:5: expected a value"},
		{"x = 012\n", "m.toml:1:5: leading zeros are not allowed"},
		{"x = 1__2\n", "m.toml:1:7: '_' must sit between digits"},
		{"x = 99999999999999999999\n", "m.toml:1:5: integer out of range"},
		{"x = {a = 1}\n", "m.toml:1:5: inline tables are not supported"},
		{"a.b = 1\n", "m.toml:1:2: dotted keys are not supported"},
		{"[[t]]\n", "m.toml:1:1: arrays of tables are not supported"},
		{"x = [1, 2]\n", "m.toml:1:6: arrays may hold only strings"},
		{"x = [\"a\" \"b\"]\n", "m.toml:1:10: expected ',' or ']' in an array"},
		{"x = [\"a\",\n\"b\"\n", "m.toml:1:5: unterminated array"},
		{"x = \"\\u0000\"\n", "m.toml:1:6: NUL is not allowed in a string"},
		{"x = \"\\ud800\"\n", "m.toml:1:6: escape is not a Unicode scalar value"},
		{"x = \"a\xff\"\n", "m.toml:1:7: invalid UTF-8"},
		{"x = \"a\x01\"\n", "m.toml:1:7: control character 0x01 in a string"},
		{"\"q\" = 1\n", "m.toml:1:1: quoted keys are not supported"},
		{"x = '''a'''\n", "m.toml:1:5: multi-line strings are not supported"},
		{"x = true1\n", "m.toml:1:5: expected a value (string"},
		{"name = \"a\"\nbackends = [\"native\"]\n[lifecycle]\nstop_signal = \"KILL\"\n",
		 "m.toml:4:15: 'lifecycle.stop_signal' must be one of"},
		{"name = \"a\"\nbackends = [\"native\"]\n[lifecycle]\nstop_grace = \"3x\"\n",
		 "m.toml:4:14: 'lifecycle.stop_grace' must be a duration"},
		{"name = \"a\"\nbackends = [\"native\"]\n[lifecycle]\nready_timeout = \"0s\"\n",
		 "m.toml:4:17: 'lifecycle.ready_timeout' is out of range"},
		{"name = \"a\"\nbackends = [\"native\"]\n[limits]\nmemory = \"12Q\"\n",
		 "m.toml:4:10: 'limits.memory' must be bytes or a size"},
		{"name = \"a\"\nbackends = [\"native\"]\n[limits]\nmemory = 100\n", "m.toml:4:10: 'limits.memory' must be between"},
		{"name = \"a\"\nbackends = [\"native\"]\n[limits]\ncpu = \"0.0005\"\n", "m.toml:4:7: 'limits.cpu' must be cores"},
		{"name = \"a\"\nbackends = [\"native\"]\n[limits]\ncpu = 2\n", "m.toml:4:7: 'limits.cpu' must be a string"},
		{"name = \"a\"\nbackends = [\"native\"]\n[env]\nMESH_X = \"1\"\n", "m.toml:4:1: 'MESH_X': MESH_* variables"},
		{"name = \"a\"\nbackends = [\"native\"]\n[env]\nMESH_NAME = \"b\"\n", "m.toml:4:1: 'MESH_NAME': MESH_* variables"},
		{"name = \"a\"\nbackends = [\"native\"]\n[env]\nMESH_WORKERS = \"1\"\n", "m.toml:4:1: 'MESH_WORKERS': MESH_*"},
		{"name = \"a\"\nbackends = [\"native\"]\n[env]\nA-B = \"1\"\n", "m.toml:4:1: 'A-B' is not an environment"},
		{"name = \"a\"\nbackends = [\"native\"]\n[env]\nA = 1\n", "m.toml:4:5: 'env.A' must be a string, not an integer"},
		{"name = \"-a\"\n", "m.toml:1:8: 'name' must be 1 to 64"},
		{"name = \"a\"\r\nx = 1\rq\n", "m.toml:2:6: bare carriage return"},
		{"x = 1 # ok\x01\n", "m.toml:1:11: control character 0x01 in a comment"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_manifest m;
		char *err = NULL;
		int rc = mesh_manifest_parse("m.toml", rows[i].text, strlen(rows[i].text), "a", &m, &err);
		EXPECT_EQ(rc, MESH_E_PARSE);
		if (!err || strncmp(err, rows[i].want, strlen(rows[i].want)) != 0)
			t__fail(__FILE__, __LINE__, "row %zu: got \"%s\", want a message starting \"%s\"", i,
				err ? err : "(null)", rows[i].want);
		free(err);
		mesh_manifest_release(&m);
	}
}

/* The worker library's settings (MESH_WORKER_SPIN_US...) are the one
 * MESH_* a catalog may set: meshd sets none of them, and passes none of
 * its own environment's on (docs/worker-api.md names the knob). */
TEST(manifest_env_may_set_the_worker_librarys_settings)
{
	static const char text[] = "name = \"a\"\nbackends = [\"native\"]\n[env]\nMESH_WORKER_SPIN_US = \"0\"\n";
	struct mesh_manifest m;
	char *err = NULL;
	ASSERT_EQ(mesh_manifest_parse("m.toml", text, strlen(text), "a", &m, &err), 0);
	ASSERT_EQ(m.nenv, 1);
	EXPECT_STREQ(m.env[0], "MESH_WORKER_SPIN_US=0");
	mesh_manifest_release(&m);
}

TEST(toml_crlf_and_literal_strings)
{
	const char *t = "a = 'C:\\path'\r\n[x]\r\nb = true\r\nc = -5\r\n";
	struct mesh_toml doc;
	char *err = NULL;
	int rc = mesh_toml_parse("t", t, strlen(t), &doc, &err);
	if (rc)
		FAIL("%s", err);
	ASSERT_EQ(doc.n, 4);
	EXPECT_STREQ(doc.items[0].str, "C:\\path");
	EXPECT_EQ(doc.items[1].type, MESH_TOML_TABLE);
	EXPECT_STREQ(doc.items[2].table, "x");
	EXPECT_EQ(doc.items[2].b, 1);
	EXPECT_EQ(doc.items[3].i, -5);
	EXPECT_EQ(doc.items[3].line, 4);
	mesh_toml_release(&doc);
}

static void put_file(const char *path, const void *b, size_t n, mode_t mode)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		FAIL("cannot create %s", path);
	fwrite(b, 1, n, f);
	fclose(f);
	chmod(path, mode);
}

static char *read_bin(const char *path, size_t *n)
{
	char *b = t_read_file(path, n);
	if (!b)
		FAIL("cannot read %s", path);
	return b;
}

TEST(elf_accepts_real_programs)
{
	size_t n;
	char *b = read_bin(t_bin("examples/echo_worker"), &n);
	char *err = NULL;
	EXPECT_EQ(mesh_elf_check("echo_worker", (uint8_t *)b, n, &err), 0);
	free(err);
	free(b);
	b = read_bin("/bin/sh", &n);
	EXPECT_EQ(mesh_elf_check("/bin/sh", (uint8_t *)b, n, &err), 0);
	free(b);
}

TEST(elf_refusals_name_the_file_and_why)
{
	size_t n;
	char *sh = read_bin(t_bin("examples/echo_worker"), &n);
	static const char script[] = "#!/bin/sh\necho hi\n";
	char *err = NULL;
	EXPECT_EQ(mesh_elf_check("w.sh", (const uint8_t *)script, sizeof script - 1, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "'w.sh' is not an executable for this machine: a script");
	free(err);
	/* Truncated: the header only, then half of it. */
	EXPECT_EQ(mesh_elf_check("trunc", (uint8_t *)sh, 64, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "'trunc'");
	EXPECT_CONTAINS(err, "truncated");
	free(err);
	EXPECT_EQ(mesh_elf_check("half", (uint8_t *)sh, 40, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "truncated ELF header");
	free(err);
	EXPECT_EQ(mesh_elf_check("tiny", (uint8_t *)sh, 3, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "too short");
	free(err);
	/* A foreign machine: the same file with e_machine set to aarch64 (or x86-64 on arm). */
	char *foreign = malloc(n);
	memcpy(foreign, sh, n);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)foreign;
	eh->e_machine = mesh_elf_native_machine() == EM_AARCH64 ? EM_X86_64 : EM_AARCH64;
	EXPECT_EQ(mesh_elf_check("arm", (uint8_t *)foreign, n, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "built for");
	free(err);
	memcpy(foreign, sh, n);
	foreign[EI_CLASS] = ELFCLASS32;
	EXPECT_EQ(mesh_elf_check("x32", (uint8_t *)foreign, n, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "32-bit");
	free(err);
	memcpy(foreign, sh, n);
	foreign[EI_DATA] = ELFDATA2MSB;
	EXPECT_EQ(mesh_elf_check("be", (uint8_t *)foreign, n, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "big-endian");
	free(err);
	memcpy(foreign, sh, n);
	eh->e_type = ET_REL;
	EXPECT_EQ(mesh_elf_check("o", (uint8_t *)foreign, n, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "object file");
	free(err);
	free(foreign);
	/* A shared library is not a program. */
	const char *z = "/lib/x86_64-linux-gnu/libz.so.1";
	if (access(z, R_OK) == 0) {
		size_t ln;
		char *lib = read_bin(z, &ln);
		EXPECT_EQ(mesh_elf_check(z, (uint8_t *)lib, ln, &err), MESH_E_REFUSED);
		EXPECT_CONTAINS(err, "shared library");
		free(err);
		free(lib);
	}
	free(sh);
}

static void make_catalog(const char *manifest, const char *bin_src)
{
	char path[256];
	mkdir("cat", 0755);
	snprintf(path, sizeof path, "cat/%s", mesh_target_triple());
	mkdir(path, 0755);
	t_write_file("cat/w.toml", manifest);
	if (bin_src) {
		snprintf(path, sizeof path, "cat/%s/w", mesh_target_triple());
		size_t n;
		char *b = read_bin(bin_src, &n);
		put_file(path, b, n, 0755);
		free(b);
	}
}

TEST(image_prepare_hash_and_refusals)
{
	struct mesh_limits_caps caps;
	mesh_limits_detect(&caps, NULL);
	struct mesh_image img;
	char *err = NULL;
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n[source]\nhash = \"v1\"\n", t_bin("examples/echo_worker"));
	int rc = mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err);
	if (rc)
		FAIL("prepare: %s", err);
	uint64_t h1 = img.image_hash;
	EXPECT_NE(img.bin_hash, 0);
	EXPECT_GT(img.bin_bytes, 1000);
	EXPECT_CONTAINS(img.bin_path, mesh_target_triple());
	mesh_image_release(&img);
	/* The image hash covers source.hash... */
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n[source]\nhash = \"v2\"\n", NULL);
	ASSERT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), 0);
	EXPECT_NE(img.image_hash, h1);
	uint64_t h2 = img.image_hash;
	mesh_image_release(&img);
	/* ...and is stable. */
	ASSERT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), 0);
	EXPECT_UEQ(img.image_hash, h2);
	mesh_image_release(&img);
	/* A GPU program with no GPU, in blink mode, with Metal. */
	make_catalog("name = \"w\"\nbackends = [\"native\"]\ndevice = \"gpu\"\n", NULL);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "needs a GPU");
	free(err);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_BLINK, &img, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "blink mode");
	free(err);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_METAL, &img, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "Metal does not exist on Linux");
	free(err);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_MPS, &img, &err), 0);
	mesh_image_release(&img);
	/* A script as the binary. */
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n", NULL);
	char path[256];
	snprintf(path, sizeof path, "cat/%s/w", mesh_target_triple());
	put_file(path, "#!/bin/sh\nexit 0\n", 17, 0755);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_SCRIPT);
	EXPECT_CONTAINS(err, path);
	EXPECT_CONTAINS(err, "script");
	free(err);
	/* Not executable. */
	put_file(path, "x", 1, 0644);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_REFUSED);
	if (geteuid() != 0)
		EXPECT_CONTAINS(err, "not executable");
	free(err);
	unlink(path);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_NOTFOUND);
	EXPECT_CONTAINS(err, "no binary");
	free(err);
	EXPECT_EQ(mesh_image_prepare("cat", "nope", &caps, MESH_GPU_NONE, &img, &err), MESH_E_NOTFOUND);
	EXPECT_CONTAINS(err, "no program 'nope'");
	free(err);
	EXPECT_EQ(mesh_image_prepare("cat", "../etc", &caps, MESH_GPU_NONE, &img, &err), MESH_E_PATH);
	free(err);
	/* A bad manifest comes back with its file:line:col. */
	make_catalog("name = \"w\"\nbackends = [\"native\"]\nbogus = 1\n", t_bin("examples/echo_worker"));
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_PARSE);
	EXPECT_CONTAINS(err, "cat/w.toml:3:1: unknown key 'bogus'");
	free(err);
}

/* A fake /proc/self: detection reads only these files. */
static void fake_proc(const char *dir, const char *capeff, const char *mountinfo, const char *cgroup)
{
	char p[512];
	mkdir(dir, 0755);
	snprintf(p, sizeof p, "%s/status", dir);
	char st[256];
	snprintf(st, sizeof st, "Name:\tx\nCapInh:\t0\nCapEff:\t%s\nCapBnd:\t0\n", capeff);
	t_write_file(p, st);
	snprintf(p, sizeof p, "%s/mountinfo", dir);
	t_write_file(p, mountinfo);
	snprintf(p, sizeof p, "%s/cgroup", dir);
	t_write_file(p, cgroup);
}

TEST(limits_detection_honest)
{
	char cwd[400], mi[1024], grp[600];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	/* No cgroup2 at all, unprivileged: rlimits only, NPROC included. */
	fake_proc("p1", "0000000000000000", "22 1 0:20 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
		  "4:memory:/x\n");
	struct mesh_limits_caps c;
	mesh_limits_detect(&c, "p1");
	EXPECT_UEQ(c.avail, MESH_LIM_MEMORY_RLIMIT | MESH_LIM_NOFILE_RLIMIT | MESH_LIM_NPROC_RLIMIT);
	EXPECT_CONTAINS(c.cgroup_why, "no cgroup2");
	/* Root (CAP_SYS_ADMIN): RLIMIT_NPROC is not enforced and is not claimed. */
	fake_proc("p2", "000001ffffffffff", "22 1 0:20 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "");
	mesh_limits_detect(&c, "p2");
	EXPECT_FALSE(c.avail & MESH_LIM_NPROC_RLIMIT);
	EXPECT_CONTAINS(c.nproc_why, "CAP_SYS_ADMIN");
	/* A cgroup2 group with only some controllers delegated. */
	mkdir("cg", 0755);
	mkdir("cg/svc", 0755);
	t_write_file("cg/svc/cgroup.subtree_control", "memory pids\n");
	t_write_file("cg/svc/cgroup.controllers", "cpu memory pids\n");
	snprintf(mi, sizeof mi, "30 1 0:26 / %s/cg rw - cgroup2 cgroup2 rw\n", cwd);
	fake_proc("p3", "0000000000000000", mi, "0::/svc\n");
	mesh_limits_detect(&c, "p3");
	snprintf(grp, sizeof grp, "%s/cg/svc", cwd);
	EXPECT_STREQ(c.cgroup_dir, grp);
	EXPECT_TRUE(c.avail & MESH_LIM_MEMORY_CGROUP);
	EXPECT_TRUE(c.avail & MESH_LIM_PIDS_CGROUP);
	EXPECT_FALSE(c.avail & MESH_LIM_CPU_CGROUP);
	EXPECT_CONTAINS(c.cgroup_why, "'cpu'");
	/* Planning: cpu cannot be enforced there, memory goes to the cgroup. */
	struct mesh_limits want = {.memory = 1 << 30, .open_files = 100};
	unsigned e = 0;
	char *err = NULL;
	ASSERT_EQ(mesh_limits_plan(&want, &c, &e, &err), 0);
	EXPECT_UEQ(e, MESH_LIM_MEMORY_CGROUP | MESH_LIM_NOFILE_RLIMIT);
	want.cpu_milli = 500;
	EXPECT_EQ(mesh_limits_plan(&want, &c, &e, &err), MESH_E_UNSUPPORTED);
	EXPECT_CONTAINS(err, "limits.cpu cannot be enforced");
	free(err);
	/* Root on p2: processes can be enforced by nothing. */
	mesh_limits_detect(&c, "p2");
	struct mesh_limits wp = {.processes = 10};
	EXPECT_EQ(mesh_limits_plan(&wp, &c, &e, &err), MESH_E_UNSUPPORTED);
	EXPECT_CONTAINS(err, "limits.processes cannot be enforced");
	free(err);
	char d[160];
	mesh_limits_describe(MESH_LIM_MEMORY_RLIMIT | MESH_LIM_NOFILE_RLIMIT, d, sizeof d);
	/* What each bounds, said plainly: RLIMIT_DATA is per process. */
	EXPECT_STREQ(d, "memory:per-process data segment (rlimit),open_files:per-process (rlimit)");
	mesh_limits_describe(MESH_LIM_MEMORY_CGROUP | MESH_LIM_NPROC_RLIMIT, d, sizeof d);
	EXPECT_STREQ(d, "memory:whole group (cgroup),processes:per-user (rlimit)");
	mesh_limits_describe(0, d, sizeof d);
	EXPECT_STREQ(d, "none");
}

/* This machine, as it is: whatever is claimed must hold up. */
TEST(limits_detection_this_machine)
{
	struct mesh_limits_caps c;
	mesh_limits_detect(&c, NULL);
	EXPECT_TRUE(c.avail & MESH_LIM_MEMORY_RLIMIT);
	EXPECT_TRUE(c.avail & MESH_LIM_NOFILE_RLIMIT);
	if (geteuid() == 0) {
		EXPECT_FALSE(c.avail & MESH_LIM_NPROC_RLIMIT);
		EXPECT_CONTAINS(c.nproc_why, "CAP_SYS_ADMIN"); /* read, not guessed */
	}
	/* When a cgroup2 file system is mounted, detection found it. */
	char out[64];
	if (t_sh(out, sizeof out, 0, "grep -q ' - cgroup2 ' /proc/self/mountinfo") == 0)
		EXPECT_NE(c.cgroup_dir[0], 0);
	if (c.avail & MESH_LIM_MEMORY_CGROUP) {
		char p[700];
		snprintf(p, sizeof p, "%s/cgroup.subtree_control", c.cgroup_dir);
		char *s = t_read_file(p, NULL);
		EXPECT_CONTAINS(s, "memory");
		free(s);
	} else {
		EXPECT_NE(strlen(c.cgroup_why), 0);
	}
}

/* A manifest that starts with a UTF-8 byte order mark parses. */
TEST(manifest_bom_is_skipped)
{
	static const char text[] = "\xef\xbb\xbfname = \"w\"\nbackends = [\"native\"]\n";
	struct mesh_manifest m;
	char *err = NULL;
	int rc = mesh_manifest_parse("w.toml", text, sizeof text - 1, "w", &m, &err);
	if (rc)
		FAIL("parse: %s", err);
	EXPECT_STREQ(m.name, "w");
	mesh_manifest_release(&m);
}

/* A FIFO (or any non-regular file) as the manifest or the binary is refused
 * at once, never opened blocking; the message names the file and its type. */
TEST_TIMEOUT(image_prepare_refuses_fifos, 10)
{
	struct mesh_limits_caps caps;
	mesh_limits_detect(&caps, NULL);
	struct mesh_image img;
	char *err = NULL, path[256];
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n", NULL);
	unlink("cat/w.toml");
	ASSERT_EQ(mkfifo("cat/w.toml", 0644), 0);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "manifest 'cat/w.toml' is a FIFO");
	free(err);
	unlink("cat/w.toml");
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n", NULL);
	snprintf(path, sizeof path, "cat/%s/w", mesh_target_triple());
	ASSERT_EQ(mkfifo(path, 0755), 0);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "binary '");
	EXPECT_CONTAINS(err, "' is a FIFO, not a regular file");
	free(err);
	unlink(path);
	ASSERT_EQ(mkdir(path, 0755), 0);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "is a directory");
	free(err);
}

/* Another machine's binary and a script are told apart (their own codes). */
TEST(image_prepare_arch_and_script_codes)
{
	struct mesh_limits_caps caps;
	mesh_limits_detect(&caps, NULL);
	struct mesh_image img;
	char *err = NULL, path[256];
	make_catalog("name = \"w\"\nbackends = [\"native\"]\n", NULL);
	snprintf(path, sizeof path, "cat/%s/w", mesh_target_triple());
	put_file(path, "not an elf file at all", 22, 0755);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_ARCH);
	EXPECT_CONTAINS(err, "not an executable for this machine");
	free(err);
	put_file(path, "#!/bin/sh\n", 10, 0755);
	EXPECT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &img, &err), MESH_E_SCRIPT);
	free(err);
}

/* ring = the bytes of each ring of the program's slots: a power of two,
 * 4K..1G, integer or size string; 1 MiB when absent. */
TEST(manifest_ring_size)
{
	static const struct {
		const char *value;
		uint64_t want; /* 0: refused */
	} rows[] = {
		{NULL, 1u << 20},  {"\"4M\"", 4u << 20}, {"65536", 65536},       {"\"4K\"", 4096},
		{"\"1G\"", 1u << 30}, {"\"3M\"", 0},    {"\"2K\"", 0},          {"\"2G\"", 0},
		{"0", 0},          {"-4096", 0},        {"\"big\"", 0},         {"\"4.5M\"", 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char t[256];
		snprintf(t, sizeof t, "name = \"a\"\nbackends = [\"native\"]\n%s%s\n", rows[i].value ? "ring = " : "",
			 rows[i].value ? rows[i].value : "");
		struct mesh_manifest m;
		char *err = NULL;
		int rc = mesh_manifest_parse("a.toml", t, strlen(t), NULL, &m, &err);
		if (rows[i].want) {
			EXPECT_EQ(rc, 0);
			EXPECT_UEQ(m.ring_bytes, rows[i].want);
		} else {
			EXPECT_EQ(rc, MESH_E_PARSE);
			if (!err || (!strstr(err, "'ring' must be a power of two between 4K and 1G") &&
				     !strstr(err, "'ring' must be bytes or a size")))
				t__fail(__FILE__, __LINE__, "row %zu (%s): got \"%s\"", i, rows[i].value,
					err ? err : "(null)");
		}
		free(err);
		mesh_manifest_release(&m);
	}
}
