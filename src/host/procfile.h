/* Reading files whose size stat() does not tell (/proc, /sys): read until
 * end of file. */
#ifndef MESH_HOST_PROCFILE_H
#define MESH_HOST_PROCFILE_H

#include <stddef.h>

/* Reads at most max bytes of path into a malloc'd NUL-terminated buffer.
 * 0, -errno, or MESH_E_TOOBIG when there is more than max. */
int mesh__read_proc(const char *path, size_t max, char **out, size_t *len);

#endif
