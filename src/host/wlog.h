/* A worker's log file, <logs>/<name>.log: private (0600), never reached
 * through a symlink, and bounded: past its cap it becomes <name>.log.1 (the
 * one old file kept) and a new one starts.  Several instances of a program
 * may append to the same file; each holds its own struct mesh__wlog. */
#ifndef MESH_HOST_WLOG_H
#define MESH_HOST_WLOG_H

#include <stddef.h>
#include <stdint.h>

struct mesh__wlog {
	int fd;	    /* -1 when closed, or when a rotation could not reopen */
	char *path; /* malloc'd */
	uint64_t max;
};
#define MESH__WLOG_INIT {-1, NULL, 0}

/* Opens (creates 0600) <dir>/<name>.log for appending, refusing a symlink
 * there (MESH_E_PATH) or anything but a regular file.  0, or a negative code
 * with *err malloc'd saying which file and why; l is left closed then. */
int mesh__wlog_open(struct mesh__wlog *l, const char *dir, const char *name, uint64_t max, char **err);
/* The same for the file at path (mesh serve's --log). */
int mesh__wlog_open_path(struct mesh__wlog *l, const char *path, uint64_t max, char **err);
/* Appends n bytes, rotating first when the file already holds max bytes or
 * more.  Best effort: a log that cannot be written is skipped (the crash
 * tail is kept in memory, never read back from here). */
void mesh__wlog_write(struct mesh__wlog *l, const void *p, size_t n);
/* Closes it; a closed one is fine. */
void mesh__wlog_close(struct mesh__wlog *l);

#endif
