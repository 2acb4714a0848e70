#include "base/err.h"

#include <errno.h>
#include <string.h>

const char *mesh_strerror(int err)
{
	switch (err) {
#define MESH__ERR_STR(name, off, msg) \
	case MESH_E_##name:           \
		return msg;
		MESH_ERR_MAP(MESH__ERR_STR)
#undef MESH__ERR_STR
	}
	if (err < 0 && err > MESH_E__BASE)
		return strerror(-err);
	return "unknown error";
}

const char *mesh_err_name(int err)
{
	switch (err) {
#define MESH__ERR_NAME(name, off, msg) \
	case MESH_E_##name:            \
		return "E_" #name;
		MESH_ERR_MAP(MESH__ERR_NAME)
#undef MESH__ERR_NAME
	}
	if (err < 0 && err > MESH_E__BASE) {
		const char *n = strerrorname_np(-err);
		return n ? n : "EUNKNOWN";
	}
	return "EUNKNOWN";
}
