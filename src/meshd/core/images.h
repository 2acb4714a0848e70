/* meshd's kept copies of program images, so that `mesh rollback` can go
 * back to an image whose files in the catalog were replaced since.
 *
 * A copy is <logs>/.images/<name>/<id>/ (id: mesh_image_id, 16 hex digits)
 * laid out as a catalog -- <name>.toml and <triple>/<name> -- so that
 * mesh_image_prepare(dir, name, ...) reads it as it reads the catalog.
 * Program names cannot start with '.', so the directory never meets a
 * worker's <name>.log.  Files only: the core (meshd/core/core.c) decides which
 * image is current and which previous, and records it here. */
#ifndef MESH_MESHD_CORE_IMAGES_H
#define MESH_MESHD_CORE_IMAGES_H

#include "host/image.h"

/* Keeps a copy of img (prepared from a catalog): its manifest and binary
 * are copied, the copy is prepared again and must be the same image (a
 * catalog changed meanwhile is MESH_E_MISMATCH, nothing kept).  A copy
 * kept before is reused.  Either way it is made runnable by ra, who its
 * workers run as (mesh_host_run_as; NULL: meshd's user), and by no one
 * else (meshd_image_share).  0 with *dir (malloc'd) the copy's directory,
 * or a negative code with *err (malloc'd) saying why.  Paths under logs
 * are made absolute (realpath), here and below. */
int meshd_image_keep(const char *logs, const struct mesh_image *img, const struct mesh_run_as *ra,
		     const struct mesh_limits_caps *caps, enum mesh_gpu_access gpu, char **dir, char **err);
/* Makes the kept copy dir of program name (under logs) runnable by ra's
 * user and by no one else.  As root with ra set (workers under another
 * user, or root named): <logs>/.images and .images/<name> 0711 (passed,
 * not listed), dir and dir/<triple> 0710 and the binary 0510, all root's
 * and in ra's group, the manifest 0600 root's; otherwise the copy stays
 * meshd's user's alone (0700), which is whom the workers run as.  A copy
 * made 0700 by an older meshd is mended so.  Symlinks are not followed.
 * 0 or a negative code with *err (malloc'd). */
int meshd_image_share(const char *logs, const char *name, const char *dir, const struct mesh_run_as *ra, char **err);
/* 0 when ra's user may reach and run path: each directory from / down
 * may be passed by it and the file run (its owner's, group's or others'
 * x bit, as the kernel decides without ACLs); always for ra NULL, not set
 * or root.  Else -EACCES with *err (malloc'd) naming the first that stops
 * it, or -errno. */
int meshd_image_reachable(const char *path, const struct mesh_run_as *ra, char **err);
/* Removes every kept copy of name but keep1 and keep2 (either may be NULL);
 * best effort, never fails. */
void meshd_image_prune(const char *logs, const char *name, const char *keep1, const char *keep2);

/* Which image is current and which previous survives a restart of meshd
 * in <logs>/.images/<name>/history, three lines replaced atomically:
 *   mesh-images 1
 *   current <id, 16 hex digits>
 *   previous <id, or 0 for none>
 * Records them.  0 or -errno (a rollback after a restart then finds none). */
int meshd_image_history_save(const char *logs, const char *name, uint64_t cur, uint64_t prev);
/* When the history's current image is cur and the previous one's copy is
 * there: 0, *prev its id and *prev_dir (malloc'd) its copy's directory.
 * Else MESH_E_NOTFOUND (a missing, damaged or foreign file included). */
int meshd_image_history_prev(const char *logs, const char *name, uint64_t cur, uint64_t *prev, char **prev_dir);

#endif
