/* Is a file an executable this machine can run?  An ELF of this machine's
 * class (64-bit here), byte order and e_machine, of type EXEC (static or
 * with an interpreter) or DYN with an interpreter (a PIE) or a static PIE
 * (DF_1_PIE); program headers inside the file; an interpreter that exists. */
#ifndef MESH_HOST_ELF_H
#define MESH_HOST_ELF_H

#include <stddef.h>
#include <stdint.h>

/* Checks the n bytes b of the file at path (path only names it in the
 * message).  0, or MESH_E_REFUSED with *err a malloc'd message
 * "'<path>' is not ...: <why>" (caller frees), or -ENOMEM. */
int mesh_elf_check(const char *path, const uint8_t *b, size_t n, char **err);

/* This machine's e_machine (EM_X86_64 on x86-64) and its name. */
unsigned mesh_elf_native_machine(void);

#endif
