/* CUDA MPS glue for GPU workers under `meshd --isolation mps`.
 *
 * UNTESTED ON A GPU: written and tested on a machine without one, against a
 * stand-in of NVIDIA's control tool (tests/integration/test_host_mps.c).
 *
 * The hooks take ctx = the MPS pipe directory (a NUL-terminated path). */
#ifndef MESH_HOST_MPS_H
#define MESH_HOST_MPS_H

#include <stdint.h>
#include <sys/types.h>

/* The control tool, looked up in PATH. */
#define MESH_MPS_CONTROL "nvidia-cuda-mps-control"

/* Runs the control tool with CUDA_MPS_PIPE_DIRECTORY=pipe_dir, writes cmd
 * and a newline to its stdin, and collects its stdout (malloc'd, NUL-ended)
 * within timeout_ns (then it is killed).  0, -errno, MESH_E_TIMEOUT, or
 * MESH_E_REFUSED when it exits non-zero. */
int mesh_mps_control(const char *pipe_dir, const char *cmd, char **out, uint64_t timeout_ns);

/* meshd's control daemon for pipe_dir: found when its control socket is
 * there and answers `get_server_list` (*started 0); else started:
 * `nvidia-cuda-mps-control -d` with CUDA_MPS_PIPE_DIRECTORY=pipe_dir and
 * CUDA_MPS_LOG_DIRECTORY=log_dir (both made when missing), then waited for
 * (at most timeout_ns) until it answers (*started 1).  0, -ENOMEM, or
 * MESH_E_NOGPU with *err: the tool is not in PATH, it failed, or no daemon
 * answered. */
int mesh_mps_daemon_up(const char *pipe_dir, const char *log_dir, uint64_t timeout_ns, int *started, char **err);
/* `quit` to the control daemon of pipe_dir: for the one mesh_mps_daemon_up
 * started only.  0 or a negative code with *err. */
int mesh_mps_daemon_quit(const char *pipe_dir, char **err);

/* After `ready`: pid runs with this pipe directory in its environment and
 * the MPS control socket exists there.  A weak check (it cannot see that the
 * process really opened a CUDA context through the server).  0 or
 * MESH_E_REFUSED with *err malloc'd. */
int mesh_mps_check_client(void *ctx, pid_t pid, char **err);

/* Before a GPU worker is signalled: `get_server_list`, then
 * `terminate_client <server> <pid>` for each server (NVIDIA's per-client
 * terminate, so its in-flight GPU work cannot wedge the server for every
 * client).  0 or a negative code with *err malloc'd.  Blocks up to ~2 s. */
int mesh_mps_terminate_client(void *ctx, pid_t pid, char **err);

#endif
