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
