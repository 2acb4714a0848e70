/* `mesh ui`: a web page for the meshd on a control socket (docs/ui.md).
 * A small HTTP/1.1 server on a loopback address that serves the page's
 * files (embedded in the binary: nothing to install, works offline) and
 * passes the page's reads to meshd's control API: GET /api/<rest> is
 * meshd's GET /v1/<rest>, GET /api/events relays meshd's GET /v1/events.
 * meshd itself gains no TCP port.
 *
 * The door (the Jupyter model): every request needs the token, which the
 * printed URL carries once (?token=...) and a cookie after it (HttpOnly,
 * SameSite=Strict); without it 403.  The Host must be the loopback
 * address and port served (no DNS rebinding); only GET and HEAD; each
 * answer closes its connection.  One thread a connection (a few pages).
 *
 * Caller protocol: mesh_ui_open, then mesh_ui_run until mesh_ui_stop
 * (async-signal-safe) is called, then mesh_ui_free. */
#ifndef MESH_UI_UI_H
#define MESH_UI_UI_H

#include <stddef.h>

struct mesh_ui_config {
	const char *listen; /* "127.0.0.1:PORT" or "[::1]:PORT" (loopback only; PORT 0: any) */
	const char *sock;   /* meshd's control socket */
};

struct mesh_ui;

/* Binds and listens.  0, or MESH_E_PARSE (a bad address), MESH_E_REFUSED
 * (not loopback), -errno from bind/listen (-EADDRINUSE), -ENOMEM; *err
 * gets a malloc'd message. */
int mesh_ui_open(struct mesh_ui **out, const struct mesh_ui_config *c, char **err);
/* The URL to open (with its token), valid until mesh_ui_free. */
const char *mesh_ui_url(const struct mesh_ui *u);
/* Serves until mesh_ui_stop; 0 or -errno of a failed poll/accept. */
int mesh_ui_run(struct mesh_ui *u);
void mesh_ui_stop(struct mesh_ui *u);
/* After mesh_ui_run returned: waits (at most 2 s) for the connections'
 * threads, closes what is left, frees u. */
void mesh_ui_free(struct mesh_ui *u);

/* The embedded files (made at build time from src/ui/assets by
 * mk/asset2c.sh): name is the file's base name. */
struct mesh_ui_asset {
	const char *name, *type;
	const unsigned char *data;
	size_t len;
};
extern const struct mesh_ui_asset mesh_ui_assets[];
extern const size_t mesh_ui_nassets;

#endif
