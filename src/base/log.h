/* Logging: one grep-able line per event on stderr,
 *   2026-11-29T14:55:00.123Z meshd[4242] info spawned name=echo pid=4250
 * Only programs log (meshd, the CLI); library functions return codes. */
#ifndef MESH_BASE_LOG_H
#define MESH_BASE_LOG_H

enum mesh_log_level { MESH_LOG_DEBUG, MESH_LOG_INFO, MESH_LOG_WARN, MESH_LOG_ERROR };

/* Program name shown in each line; a static string. */
void mesh_log_init(const char *prog, enum mesh_log_level min);
void mesh_log(enum mesh_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define mesh_debug(...) mesh_log(MESH_LOG_DEBUG, __VA_ARGS__)
#define mesh_info(...) mesh_log(MESH_LOG_INFO, __VA_ARGS__)
#define mesh_warn(...) mesh_log(MESH_LOG_WARN, __VA_ARGS__)
#define mesh_error(...) mesh_log(MESH_LOG_ERROR, __VA_ARGS__)

#endif
