/* PLACEHOLDER: replaced by the implementation of `mesh run`. */
#include "cli/cmds.h"
#include "cli/exit.h"

int mesh_cmd_run(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return mesh_cli_usage("'run' is not built yet");
}
