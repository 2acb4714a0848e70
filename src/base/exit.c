#include "base/exit.h"

#include "base/err.h"

#include <errno.h>

int mesh_exit_for(int err)
{
	switch (err) {
	case 0:
		return MESH_EXIT_OK;
	case MESH_E_CORRUPT:
	case MESH_E_DAMAGED:
	case MESH_E_FOREIGN:
	case MESH_E_VERSION:
	case MESH_E_RANGE:
	case MESH_E_MISMATCH:
	case MESH_E_PATH:
	case MESH_E_PARSE:
	case MESH_E_TOOBIG:
	case MESH_E_NOJOB:
	case MESH_E_BURIED:
	case MESH_E_NOTFOUND:
	case MESH_E_NOTPRIVATE:
		return MESH_EXIT_DATAERR;
	case MESH_E_CLOSED:
	case MESH_E_UNAVAILABLE:
		return MESH_EXIT_UNAVAILABLE;
	case MESH_E_REFUSED:
		return MESH_EXIT_REFUSED;
	case MESH_E_SCRIPT:
		return MESH_EXIT_SCRIPT;
	case MESH_E_ARCH:
		return MESH_EXIT_ARCH;
	case MESH_E_NOGPU:
		return MESH_EXIT_NOGPU;
	case MESH_E_LIMITS:
		return MESH_EXIT_LIMITS;
	case MESH_E_HANDLER:
		return MESH_EXIT_HANDLER;
	case MESH_E_TIMEOUT:
	case MESH_E_STATE:
	case MESH_E_STALE:
	case MESH_E_STOPPED:
	case MESH_E_BUSY:
		return MESH_EXIT_TEMPFAIL;
	case MESH_E_CRASHED:
	case MESH_E_PROTO:
		return MESH_EXIT_PROTOCOL;
	case -ENOENT:
	case -EACCES:
		return MESH_EXIT_NOINPUT;
	case -ENOSPC:
	case -EIO:
	case -EDQUOT:
	case -EFBIG:
	case -EROFS:
	case MESH_E_OUTPUT:
		return MESH_EXIT_IOERR;
	case -ECONNREFUSED:
	case -ECONNRESET:
		return MESH_EXIT_UNAVAILABLE;
	case -EAGAIN:
		return MESH_EXIT_TEMPFAIL;
	case -EPERM:
	case MESH_E_PEER:
		return MESH_EXIT_NOPERM;
	case MESH_E_UNSUPPORTED:
	case -ENOMEM:
	case -EMFILE:
	case -ENFILE:
		return MESH_EXIT_OSERR;
	}
	return MESH_EXIT_SOFTWARE;
}
