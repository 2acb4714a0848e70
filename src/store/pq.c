/* libpq loaded on first use (pq.h). */
#define MESH_PQ_IMPL
#include "store/pq.h"

#include "base/err.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mesh_pq mesh__pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_why[320];

static void load(void)
{
	const char *path = getenv(MESH_PQ_ENV);
	if (!path || !*path)
		path = MESH_PQ_SONAME;
	/* RTLD_LOCAL: its names stay out of the global scope (and out of
	 * the way of a test that links libpq itself: the same object). */
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		snprintf(load_why, sizeof load_why,
			 "cannot load %s (PostgreSQL's client library, Debian's package libpq5): %s", path, e ? e : "?");
		load_rc = MESH_E_UNAVAILABLE;
		return;
	}
	struct mesh_pq t;
#define MESH_PQ_SYM(f)                                                                                               \
	if (!(*(void **)&t.f = dlsym(dl, #f))) {                                                                     \
		snprintf(load_why, sizeof load_why, "%s lacks %s (libpq 14 or later is needed)", path, #f);          \
		load_rc = MESH_E_UNAVAILABLE;                                                                        \
		dlclose(dl);                                                                                          \
		return;                                                                                               \
	}
	MESH_PQ_CALLS(MESH_PQ_SYM)
#undef MESH_PQ_SYM
	mesh__pq = t; /* the object stays loaded for the process's life */
}

int mesh_pq_load(char *why, size_t cap)
{
	pthread_once(&once, load);
	if (load_rc && why && cap)
		snprintf(why, cap, "%s", load_why);
	return load_rc;
}
