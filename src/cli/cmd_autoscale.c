/* PLACEHOLDER: replaced by the implementation of `mesh autoscale`. */
#include "cli/cmds.h"
#include "cli/exit.h"

int mesh_cmd_autoscale(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return mesh_cli_usage("'autoscale' is not built yet");
}
