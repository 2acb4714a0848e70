/* libmeshworker: the worker side of mesh.
 *
 * A worker is a program meshd starts from its catalog.  It loads what it
 * needs (a model, a table), says ready, then serves requests that arrive
 * through a shared-memory slot until meshd halts it (it then waits for the
 * next run, maybe on another slot) or tells it to exit.  A whole worker:
 *
 *   #include <mesh/worker.h>
 *   static int handle(void *ctx, const void *req, size_t n,
 *                     void *reply, size_t cap, size_t *reply_len)
 *   {
 *           if (n > cap) return -1;
 *           memcpy(reply, req, n); *reply_len = n;
 *           return 0;
 *   }
 *   int main(void)
 *   {
 *           struct mesh_worker *w;
 *           if (mesh_worker_open(&w) < 0) return 1;
 *           load_model();
 *           if (mesh_worker_ready(w) < 0) return 1;
 *           int rc = mesh_worker_serve(w, handle, NULL);
 *           mesh_worker_close(w);
 *           return rc < 0 ? 1 : 0;
 *   }
 *
 * Build: cc w.c $(pkg-config --cflags --libs meshworker)
 *
 * Errors: functions return 0 or a negative code (a negated errno, or one of
 * mesh's own codes); mesh_worker_strerror names it.  The library never prints
 * and never exits the process.
 *
 * Caller protocol:
 *   1. mesh_worker_open     -- first thing in main (before heavy setup, so
 *                              output is line-buffered from the start)
 *   2. your setup           -- load the model; crash or exit non-zero on failure
 *   3. mesh_worker_ready    -- meshd counts the worker warm from here
 *   4. mesh_worker_serve    -- returns 0 when meshd says exit
 *   5. mesh_worker_close, return from main
 *
 * Threads: one thread drives a struct mesh_worker; the handler runs on it. */
#ifndef MESH_WORKER_H
#define MESH_WORKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1: the first; 2: mesh_worker_chunk_id (jobs); 3: messages larger than the
 * ring, mesh_worker_reply_part (streamed replies). */
#define MESH_WORKER_API_VERSION 3

struct mesh_worker;

/* Handles one request: req_len bytes at req (valid only during the call; the
 * library owns it).  Writes the reply into reply (reply_cap bytes: the
 * message limit, 16 MiB, whatever the slot's ring size) and its length into
 * *reply_len (0 before the call).  Before returning it may stream parts of
 * the reply with mesh_worker_reply_part; what it writes to reply is then the
 * last part.
 * Returns 0 for a reply; a negative value makes it an error reply whose text
 * is what the handler wrote to reply (or, if it wrote nothing, the name of
 * the code), which meshd returns to the caller.  A reply_len > reply_cap is
 * treated as an error. */
typedef int (*mesh_worker_handler)(void *ctx, const void *req, size_t req_len, void *reply, size_t reply_cap,
				   size_t *reply_len);

/* Connects to meshd through the control fd named by MESH_CONTROL_FD (made
 * close-on-exec so the worker's own children do not inherit it) and makes
 * stdout line-buffered (stderr stays unbuffered), so a crash loses no line
 * of output: meshd reports the last 30.
 * 0; -ENOENT when the program was not started by meshd (no MESH_CONTROL_FD);
 * -EBADF when that is not an open socket; -ENOMEM.  On success *out is the caller's (mesh_worker_close). */
int mesh_worker_open(struct mesh_worker **out);
/* Tells meshd the setup is done.  0 or a negative code (meshd is gone). */
int mesh_worker_ready(struct mesh_worker *w);
/* The node loop: waits for `run`, maps the slot, takes each request, calls
 * handler(ctx, ...), puts the reply; on HALT unmaps and waits for the next
 * run; on EXIT returns 0.  Sends `ready` first if mesh_worker_ready was not
 * called.  Returns a negative code when meshd closes the channel (it died)
 * or breaks the protocol; the handler is never called after that. */
int mesh_worker_serve(struct mesh_worker *w, mesh_worker_handler handler, void *ctx);
/* Inside the handler only: sends n bytes (at most 16 MiB) as the next part
 * of the reply now, before the handler returns; the caller receives parts
 * as they come (meshd's API answers with chunked transfer encoding), then
 * what the handler returns as the last part.  A handler that fails after
 * parts were sent fails the whole call.  Returns 0 once the part is in the
 * slot (p is free again); MESH_E_STATE outside a handler; MESH_E_TOOBIG for
 * n over 16 MiB (nothing sent); MESH_E_STOPPED when meshd halted or exited
 * the worker meanwhile (the call is over: return from the handler);
 * MESH_E_CORRUPT when the slot is broken (serve then returns an error). */
int mesh_worker_reply_part(struct mesh_worker *w, const void *p, size_t n);

/* Closes the channel and frees w.  NULL is fine. */
void mesh_worker_close(struct mesh_worker *w);

/* How long the node loop spins on an empty ring before it sleeps on a futex,
 * nanoseconds.  Spinning buys ~1 us latency for a core's worth of CPU while
 * idle.  Default 50 us, or MESH_WORKER_SPIN_US from the environment. */
void mesh_worker_set_spin(struct mesh_worker *w, uint64_t spin_ns);
/* The run being served (valid inside the handler): its generation and slot. */
uint32_t mesh_worker_gen(const struct mesh_worker *w);
uint32_t mesh_worker_slot(const struct mesh_worker *w);
/* Inside the handler: the id of the job's chunk being handled (meshd sent
 * it as a chunk of a job; the handler gets only the chunk's input), or
 * UINT64_MAX for a plain request (`mesh call`).  Since API version 2. */
uint64_t mesh_worker_chunk_id(const struct mesh_worker *w);

/* A static description of a code returned by this library (-ENOENT, from
 * mesh_worker_open: "started outside meshd: MESH_CONTROL_FD is not set ..."). */
const char *mesh_worker_strerror(int err);

/* MESH_WORKER_API_VERSION of the library actually loaded (which may differ
 * from the header a program was built with): bindings that load the shared
 * library at run time (the Python SDK) check it before any other call. */
int mesh_worker_api_version(void);

#ifdef __cplusplus
}
#endif
#endif
