/* The path law for job files: what a journal or lock directory may be. */
#ifndef MESH_BASE_PATH_H
#define MESH_BASE_PATH_H

/* A journal path: non-empty, ends in ".log" (and is more than that), has no
 * ".." component, and no component that exists is a symlink.  0 or
 * MESH_E_PATH; *why (static text) says which rule failed. */
int mesh_path_journal_ok(const char *p, const char **why);
/* A lock directory: a bare name ("locks", no '/') or a path under "/tmp/";
 * no ".." component and no existing symlink component.  0 or MESH_E_PATH. */
int mesh_path_lockdir_ok(const char *p, const char **why);
/* 1 if any existing component of p (or p itself) is a symlink, else 0. */
int mesh_path_has_symlink(const char *p);

#endif
