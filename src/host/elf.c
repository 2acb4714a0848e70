#include "host/elf.h"

#include "base/buf.h"
#include "base/err.h"

#include <elf.h>
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define NATIVE_MACHINE EM_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define NATIVE_MACHINE EM_RISCV
#elif defined(__powerpc64__)
#define NATIVE_MACHINE EM_PPC64
#elif defined(__s390x__)
#define NATIVE_MACHINE EM_S390
#else
#error "mesh: add this machine's ELF e_machine"
#endif

#if __SIZEOF_POINTER__ != 8
#error "mesh: the ELF check assumes a 64-bit host"
#endif

#if __BYTE_ORDER == __LITTLE_ENDIAN
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

unsigned mesh_elf_native_machine(void)
{
	return NATIVE_MACHINE;
}

static const char *machine_name(unsigned m)
{
	switch (m) {
	case EM_386: return "i386";
	case EM_X86_64: return "x86-64";
	case EM_ARM: return "arm";
	case EM_AARCH64: return "aarch64";
	case EM_RISCV: return "riscv";
	case EM_PPC: return "ppc";
	case EM_PPC64: return "ppc64";
	case EM_S390: return "s390";
	case EM_MIPS: return "mips";
	default: return NULL;
	}
}

static int refuse(char **err, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char **err, const char *path, const char *fmt, ...)
{
	if (!err)
		return MESH_E_REFUSED;
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_addf(&b, "'%s' is not an executable for this machine: ", path);
	va_start(ap, fmt);
	mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (!b.p)
		return -ENOMEM;
	*err = mesh_buf_detach(&b, NULL);
	return MESH_E_REFUSED;
}

/* The identification's bytes: an ELF (not a script) of this machine's
 * class and byte order, of the current version.  0, or refuse's code. */
static int check_ident(const char *path, const uint8_t *b, size_t n, char **err)
{
	if (n >= 2 && b[0] == '#' && b[1] == '!')
		return refuse(err, path, "a script (#!), not an ELF binary");
	if (n < SELFMAG || memcmp(b, ELFMAG, SELFMAG) != 0)
		return refuse(err, path, n < SELFMAG ? "too short to be an ELF file (%zu bytes)" : "no ELF magic", n);
	if (n < EI_NIDENT)
		return refuse(err, path, "truncated ELF identification (%zu bytes)", n);
	if (b[EI_CLASS] != ELFCLASS64)
		return refuse(err, path, "%s ELF; this machine runs 64-bit ELF",
			      b[EI_CLASS] == ELFCLASS32 ? "32-bit" : "unknown-class");
	if (b[EI_DATA] != NATIVE_DATA)
		return refuse(err, path, "%s ELF; this machine is %s",
			      b[EI_DATA] == ELFDATA2MSB ? "big-endian" : b[EI_DATA] == ELFDATA2LSB ? "little-endian" : "unknown byte order",
			      NATIVE_DATA == ELFDATA2LSB ? "little-endian" : "big-endian");
	if (b[EI_VERSION] != EV_CURRENT)
		return refuse(err, path, "unknown ELF version %u", b[EI_VERSION]);
	return 0;
}

/* The header of a file of n bytes: this machine's e_machine, a program
 * (EXEC or DYN), program headers of our size that lie inside the file.
 * 0, or refuse's code. */
static int check_header(const char *path, const Elf64_Ehdr *eh, size_t n, char **err)
{
	if (eh->e_machine != NATIVE_MACHINE) {
		const char *mn = machine_name(eh->e_machine);
		if (mn)
			return refuse(err, path, "built for %s (e_machine %u); this machine is %s", mn,
				      eh->e_machine, machine_name(NATIVE_MACHINE));
		return refuse(err, path, "built for e_machine %u; this machine is %s", eh->e_machine,
			      machine_name(NATIVE_MACHINE));
	}
	if (eh->e_type != ET_EXEC && eh->e_type != ET_DYN)
		return refuse(err, path, "ELF type %u is %s, not a program", eh->e_type,
			      eh->e_type == ET_REL ? "an object file" : eh->e_type == ET_CORE ? "a core dump" : "unknown");
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0 || eh->e_phnum >= PN_XNUM)
		return refuse(err, path, "no usable program headers (%u of %u bytes)", eh->e_phnum, eh->e_phentsize);
	if (eh->e_phoff > n || (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > n - eh->e_phoff)
		return refuse(err, path, "truncated: program headers end past the file's %zu bytes", n);
	return 0;
}

/* The PT_INTERP header ph (a copy) names a NUL-terminated path inside the
 * file, of an interpreter this machine has.  0, or refuse's code. */
static int check_interp(const char *path, const uint8_t *b, size_t n, Elf64_Phdr ph, char **err)
{
	if (ph.p_offset > n || ph.p_filesz > n - ph.p_offset || ph.p_filesz < 2 || ph.p_filesz > 4096 ||
	    b[ph.p_offset + ph.p_filesz - 1] != 0)
		return refuse(err, path, "malformed interpreter (PT_INTERP)");
	const char *ip = (const char *)b + ph.p_offset;
	if (strlen(ip) != ph.p_filesz - 1)
		return refuse(err, path, "malformed interpreter (PT_INTERP)");
	if (access(ip, X_OK) != 0)
		return refuse(err, path, "its interpreter '%s' is not on this machine", ip);
	return 0;
}

/* 1 if the PT_DYNAMIC header ph (a copy) lies inside the file and its
 * entries, up to DT_NULL, hold DT_FLAGS_1 with DF_1_PIE: a static PIE
 * says so there; a shared library does not. */
static int static_pie(const uint8_t *b, size_t n, Elf64_Phdr ph)
{
	if (ph.p_offset > n || ph.p_filesz > n - ph.p_offset)
		return 0;
	for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= ph.p_filesz; off += sizeof(Elf64_Dyn)) {
		Elf64_Dyn d;
		memcpy(&d, b + ph.p_offset + off, sizeof d);
		if (d.d_tag == DT_NULL)
			break;
		if (d.d_tag == DT_FLAGS_1 && (d.d_un.d_val & DF_1_PIE))
			return 1;
	}
	return 0;
}

int mesh_elf_check(const char *path, const uint8_t *b, size_t n, char **err)
{
	int rc;
	if (err)
		*err = NULL;
	if ((rc = check_ident(path, b, n, err)))
		return rc;
	if (n < sizeof(Elf64_Ehdr))
		return refuse(err, path, "truncated ELF header (%zu of %zu bytes)", n, sizeof(Elf64_Ehdr));
	Elf64_Ehdr eh;
	memcpy(&eh, b, sizeof eh);
	if ((rc = check_header(path, &eh, n, err)))
		return rc;
	/* Copies, never pointers into b: its headers may be misaligned (a
	 * zeroed one is PT_NULL: none found). */
	Elf64_Phdr interp = {0}, dyn = {0};
	int load = 0;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, b + eh.e_phoff + (size_t)i * sizeof ph, sizeof ph);
		if (ph.p_type == PT_LOAD) {
			load++;
			if (ph.p_offset > n || ph.p_filesz > n - ph.p_offset)
				return refuse(err, path, "truncated: a loadable segment ends past the file's %zu bytes",
					      n);
		}
		if (ph.p_type == PT_INTERP)
			interp = ph;
		if (ph.p_type == PT_DYNAMIC)
			dyn = ph;
	}
	if (!load)
		return refuse(err, path, "no loadable segment");
	if (interp.p_type == PT_INTERP)
		return check_interp(path, b, n, interp, err);
	if (eh.e_type == ET_EXEC)
		return 0; /* static */
	/* DYN without an interpreter: a static PIE, or a shared library. */
	if (dyn.p_type == PT_DYNAMIC && static_pie(b, n, dyn))
		return 0;
	return refuse(err, path, "a shared library (ELF DYN without an interpreter), not a program");
}
