/* PLACEHOLDER: replaced by the implementation of `mesh job`. */
#include "cli/cmds.h"
#include "cli/exit.h"

int mesh_cmd_job(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return mesh_cli_usage("'job' is not built yet");
}
