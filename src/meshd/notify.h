/* The systemd readiness protocol (sd_notify), without libsystemd: one
 * datagram to the unix socket named by $NOTIFY_SOCKET. */
#ifndef MESH_MESHD_NOTIFY_H
#define MESH_MESHD_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) to $NOTIFY_SOCKET: a path, or
 * an abstract socket when it starts with '@'.  1 if sent, 0 if
 * NOTIFY_SOCKET is unset or empty (not run by systemd), or -errno. */
int meshd_notify(const char *state);

#endif
