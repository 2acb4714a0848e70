/* PLACEHOLDER: replaced by the meshd client commands. */
#include "cli/cmds.h"
#include "cli/exit.h"

#define STUB(fn) int fn(int argc, char **argv) { (void)argc; return mesh_cli_usage("'%s' is not built yet", argv[0]); }
STUB(mesh_cmd_load)
STUB(mesh_cmd_unload)
STUB(mesh_cmd_start)
STUB(mesh_cmd_stop)
STUB(mesh_cmd_ps)
STUB(mesh_cmd_logs)
STUB(mesh_cmd_call)
