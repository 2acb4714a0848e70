/* meshd's kept copies of program images, so that `mesh rollback` can go
 * back to an image whose files in the catalog were replaced since.
 *
 * A copy is <logs>/.images/<name>/<id>/ (id: mesh_image_id, 16 hex digits)
 * laid out as a catalog -- <name>.toml and <triple>/<name> -- so that
 * mesh_image_prepare(dir, name, ...) reads it as it reads the catalog.
 * Program names cannot start with '.', so the directory never meets a
 * worker's <name>.log.  Files only: which image is current or previous is
 * the core's (daemon/core.c), in memory. */
#ifndef MESH_DAEMON_IMAGES_H
#define MESH_DAEMON_IMAGES_H

#include "host/image.h"

/* Keeps a copy of img (prepared from a catalog): its manifest and binary
 * are copied, the copy is prepared again and must be the same image (a
 * catalog changed meanwhile is MESH_E_MISMATCH, nothing kept).  A copy
 * kept before is reused.  0 with *dir (malloc'd) the copy's directory, or
 * a negative code with *err (malloc'd) saying why. */
int meshd_image_keep(const char *logs, const struct mesh_image *img, const struct mesh_limits_caps *caps,
		     enum mesh_gpu_access gpu, char **dir, char **err);
/* Removes every kept copy of name but keep1 and keep2 (either may be NULL);
 * best effort, never fails. */
void meshd_image_prune(const char *logs, const char *name, const char *keep1, const char *keep2);

#endif
