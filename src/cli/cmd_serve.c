/* PLACEHOLDER: replaced by the implementation of `mesh serve`. */
#include "cli/cmds.h"
#include "cli/exit.h"

int mesh_cmd_serve(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return mesh_cli_usage("'serve' is not built yet");
}
