/* mesh-init as a binary of its own (Makefile: libc alone): the init of a
 * worker's PID namespace, exec'd by the namespace's first process at each
 * spawn (pidns.c); and the keeper of `mesh run`'s process groups
 * (keep.c).  Not for people: meshd and mesh run it. */
#include "proc/spawn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], MESH__PROC_INIT_FLAG) == 0) {
		pid_t prog = (pid_t)atoi(argv[2]);
		if (prog > 1)
			mesh__proc_init_main(prog);
	}
	if (argc == 2 && strcmp(argv[1], MESH__PROC_KEEP_FLAG) == 0)
		mesh__proc_keep_main();
	fprintf(stderr, "mesh-init: the init of a worker's PID namespace; meshd runs it, people do not\n");
	return 2;
}
