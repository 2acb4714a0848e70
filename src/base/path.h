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
/* A lock directory a program places inside a directory private to it
 * (meshd's <state>/jobs/<id>/leases): an absolute path, no ".." component
 * and no existing symlink component.  Never for a path a user gives to a
 * `mesh job` command (their law is mesh_path_lockdir_ok).  0 or
 * MESH_E_PATH. */
int mesh_path_lockdir_private_ok(const char *p, const char **why);
/* 1 if any existing component of p (or p itself) is a symlink, else 0. */
int mesh_path_has_symlink(const char *p);
/* Opens directory dir (creating it 0700 first when create is set and it is
 * missing) without following a symlink at its last component, and checks on
 * the opened directory itself that it is private: owned by the effective uid
 * and not writable by group or others (what ssh-agent and systemd demand of a
 * socket's directory).  The directory fd (O_CLOEXEC, the caller closes it),
 * or MESH_E_NOTPRIVATE, MESH_E_PATH (a symlink or not a directory), -errno. */
int mesh_path_open_private_dir(const char *dir, int create);

/* mkdir -p: creates dir and the directories above it that are missing,
 * with mode (before the umask).  0 (also when dir exists as a directory),
 * -ENOTDIR (dir or a component above it is not a directory), -errno. */
int mesh_path_mkdirs(const char *dir, unsigned mode);

#endif
