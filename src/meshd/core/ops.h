/* What meshd's control API can ask of the daemon core.
 *
 * meshd/core/core.c implements these (the core owns the host, the slots and the
 * event loop); meshd/api/api.c (HTTP/1.1 + JSON on a unix socket) calls them.
 * Every op is thread-safe: the API may call it from any of its threads while
 * the core's loop runs.  Each returns 0 or a negative mesh error (base/err.h);
 * on error *err (when err is not NULL) receives a malloc'd one-line message
 * for the user, which the caller frees.  Answers are plain structs; JSON is
 * rendered by the API (meshd/api/api.c), never here.
 *
 * Caller protocol (meshd/main.c):
 *   1. meshd_core_new(&d, &cfg, &err)  -- checks the catalog and logs dirs
 *   2. start the control API; sd_notify READY=1 once it listens
 *   3. meshd_core_run(d)               -- the event loop (one libevent event_base,
 *      meshd_core_base: the host's workers, the core's timers, and the API's
 *      and metrics listeners on it); returns after meshd_core_stop
 *   4. meshd_core_free(d)              -- every worker asked to exit, then killed and reaped */
#ifndef MESH_MESHD_CORE_OPS_H
#define MESH_MESHD_CORE_OPS_H

#include "base/hist.h"
#include "gpu/gpu.h"
#include "host/host.h"
#include "host/limits.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct meshd_core;

struct meshd_config {
	const char *catalog;	/* catalog directory */
	const char *logs;	/* <logs>/<name>.log per program */
	unsigned slots;		/* number of shared-memory slots (default 8) */
	const char *isolation;	/* "none" or "mps" */
	uint64_t ready_timeout_ns, online_timeout_ns; /* 0 = manifest or default 60 s */
	uint64_t log_max; /* <name>.log rotates past this many bytes; 0 = MESH_HOST_LOG_MAX */
	/* A worker whose heartbeat is this old while a request waits for it is
	 * killed; 0 = 10 s.  The first crash-loop backoff; 0 = 200 ms. */
	uint64_t heartbeat_timeout_ns, crash_backoff_ns;
	/* Tests only (0 in meshd): the loop sleeps this long after each pass,
	 * before it arms its timer, to widen the window in which other threads
	 * change the core while a pass runs. */
	uint64_t test_pass_pause_ns;
};

int meshd_core_new(struct meshd_core **out, const struct meshd_config *cfg, char **err);
/* The core's feed of events (meshd/core/feed.h): alive until meshd_core_free. */
struct meshd_feed *meshd_core_feed(struct meshd_core *d);
/* Runs the loop until meshd_core_stop (async-signal-safe) is called.  0,
 * or -EIO when libevent's loop failed. */
int meshd_core_run(struct meshd_core *d);
void meshd_core_stop(struct meshd_core *d);
/* The loop's event_base: the control API and the metrics listener add
 * their events to it (before meshd_core_free).  Its callbacks must never
 * block on a worker or wait for another thread that waits on the loop. */
struct event_base *meshd_core_base(struct meshd_core *d);
/* The host the core drives from its loop (its logs, limits, user,
 * containment): the gateway's programs are its instances too (one
 * supervisor).  Valid until meshd_core_free. */
struct mesh_host *meshd_core_host(struct meshd_core *d);
/* Runs fn(arg) on the loop's thread and waits for it; when no loop runs
 * (before meshd_core_run, after it returned) or when called from the loop
 * itself, runs it here.  0 or -ENOMEM. */
int meshd_core_on_loop(struct meshd_core *d, void (*fn)(void *), void *arg);
void meshd_core_free(struct meshd_core *d);

/* A program's savings (one definition, for ps, /metrics and the API):
 * the worker-time its workers were up against what max_workers always-on
 * workers would have held over its window, the time it was loaded in this
 * and earlier runs of meshd with these --logs (since: the window's start,
 * unix seconds).  permil: 1000 * (1 - warm / always_on). */
struct meshd_savings {
	uint64_t window_ns, always_ns, warm_ns;
	int64_t since;
	int permil;
};

/* A program went warm (a worker STARTING, LAUNCHING, RUNNING, IDLE or
 * HALTING) or cold (every worker down or stopping), at unix ms. */
struct meshd_warm_change {
	int64_t at_ms;
	int warm;
};

/* A worker of a program, as ps sees it. */
struct meshd_worker_info {
	struct mesh_instance_stats st;
	int slot; /* the slot it is on, or -1 */
	size_t ring; /* that slot's bytes per ring (0 when on none) */
	/* A GPU worker placed through NVML: its reservation (GPUs, VRAM held,
	 * time_to_free); state MESH_GPU_NONE_ otherwise. */
	struct mesh_gpu_use gpu;
	int64_t gpu_last_free_ns; /* time_to_free of its previous process; -1 if none */
	uint64_t image_id; /* mesh_image_id of the image it runs */
	int retired;	   /* of an image replaced by load or rollback: it finishes what it holds, then exits */
	int busy;	   /* a call runs on it, or a job holds it */
};

/* A loaded program.  Filled by load (image fields) and ps (all); the
 * strings and workers are malloc'd: meshd_program_info_release. */
struct meshd_program_info {
	char *name, *binary;
	int gpu; /* device = "gpu" */
	uint64_t image_hash, bin_hash, bin_bytes;
	unsigned max_workers;
	unsigned limits;	  /* MESH_LIM_* bits its limits are enforced with */
	uint32_t spawns, crashes; /* over its workers */
	struct meshd_worker_info *workers;
	unsigned nworkers;
	char *failed; /* FAILED (crash loop): why; NULL if not.  `start` clears it */
	uint64_t image_id; /* mesh_image_id (host/image.h) */
	uint64_t prev_id;  /* the image rollback goes back to; 0: none */
	int replaced;	   /* load, rollback: the image changed (an upgrade) */
	unsigned warm;	   /* workers IDLE or RUNNING now */
	struct meshd_savings savings;
	/* Its cold starts (a worker's spawn to its ready) since it was
	 * loaded: how many, their sum, the last one. */
	uint64_t cold_starts, cold_sum_ns, cold_last_ns;
	/* Its last warm/cold changes since it was loaded, oldest first
	 * (malloc'd; at most WARM_HIST of core_int.h). */
	struct meshd_warm_change *warm_hist;
	unsigned nwarm_hist;
};
void meshd_program_info_release(struct meshd_program_info *pi);

/* The stats table (meshd_ps_release frees what it holds). */
struct meshd_ps {
	struct mesh_host_totals host;
	struct mesh_limits_caps caps; /* what this machine can enforce, and why not */
	unsigned slots;
	struct meshd_program_info *programs;
	unsigned nprograms;
	const char *gpu_access;	 /* "none", "cuda" (NVML), "mps" (static) */
	char *gpu_none;		 /* why there is no NVML (malloc'd); NULL when there is */
	const char *gpu_mps;	 /* --isolation mps: "found" or "started" (meshd's control daemon, static) */
	const char *gpu_mps_dir; /* its pipe directory (the core's) */
	struct mesh_gpu_dev *gpus; /* each GPU (malloc'd) */
	unsigned ngpus;
};
void meshd_ps_release(struct meshd_ps *ps);

/* What the core counts for /metrics (meshd/api/metrics.h renders it). */

/* What a call ended as (mesh_calls_total's result label). */
enum meshd_call_result {
	MESHD_CALL_OK,		/* a reply */
	MESHD_CALL_HANDLER,	/* the worker's handler refused (MESH_E_HANDLER) */
	MESHD_CALL_TIMEOUT,	/* no reply in time, or no worker in time */
	MESHD_CALL_CRASHED,	/* its worker died */
	MESHD_CALL_STOPPED,	/* its worker was stopped meanwhile */
	MESHD_CALL_ERROR,	/* anything else (no slot, spawn failed, ...) */
	MESHD_CALL__N
};
const char *meshd_call_result_name(enum meshd_call_result r);
/* The result label for a meshd_op_call return code. */
enum meshd_call_result meshd_call_result_of(int rc);
/* The bounds of the two histograms: a worker's spawn to its `ready`, and
 * a call's latency as its caller saw it. */
extern const struct mesh_hist_bounds meshd_cold_start_bounds, meshd_call_bounds;

/* One loaded program.  name is malloc'd (meshd_core_metrics_release). */
struct meshd_program_metrics {
	char *name;
	unsigned max_workers;
	unsigned workers[MESH_IS__N]; /* its workers by lifecycle state */
	uint64_t spawns, crashes;
	uint64_t calls[MESHD_CALL__N];
	struct mesh_hist cold_start; /* spawn -> ready (meshd_cold_start_bounds) */
	struct mesh_hist call;	     /* a call's latency (meshd_call_bounds) */
	struct meshd_savings savings;
};
struct meshd_core_metrics {
	unsigned slots, slots_in_use;
	uint64_t spawns, crashes; /* the host's, over every program ever loaded */
	uint32_t processes;	  /* live worker processes */
	struct meshd_program_metrics *programs;
	unsigned nprograms;
};
/* The snapshot.  0 or -ENOMEM (*out then holds nothing). */
int meshd_op_metrics(struct meshd_core *d, struct meshd_core_metrics *out);
void meshd_core_metrics_release(struct meshd_core_metrics *m);

/* Loads <catalog>/<name>: manifest, binary, hash, limits (no process yet).
 * *out (NULL: not wanted) is filled on success only.  A copy of the image
 * is kept (meshd/core/images.h) for a later rollback to it.  Loaded already:
 * the catalog is read again; the same image (mesh_image_id) changes
 * nothing; a changed one (manifest or binary) is an upgrade: new calls and
 * new job workers get workers of the new image, while the old image's
 * workers finish the calls and job chunks they hold and then exit (a job
 * stops sending them chunks: meshd_job_worker_stale); the old image
 * becomes the previous one.  A new image that does not load is the error
 * and changes nothing. */
int meshd_op_load(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err);
/* SIGHUP and `mesh reload`: meshd_op_load of every loaded program (not one
 * that is not: nothing is loaded by it), each upgraded or left as the load
 * says.  *summary (malloc'd; NULL when no program is loaded): "native
 * programs reloaded: 1 upgraded (w), 1 refused (v: why), 2 unchanged",
 * also logged.  0; MESH_E_PARSE when one was refused (its old image stays;
 * the others are done); -ENOMEM. */
int meshd_op_reload(struct meshd_core *d, char **summary);
/* Goes back to the previous image of a loaded program, from its kept copy,
 * as an upgrade does (the image rolled back from becomes the previous one:
 * a second rollback goes forward again).  MESH_E_NOTFOUND (*err says which)
 * when name is not loaded or has no previous image (none was replaced
 * since meshd started, or its copy could not be kept). */
int meshd_op_rollback(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err);
/* Unloads: its workers exit (EXIT), are reaped; the image is forgotten. */
int meshd_op_unload(struct meshd_core *d, const char *name, char **err);
/* Starts a worker now and waits for `ready` (loads first if needed); *out
 * (NULL: not wanted): that worker's stats, on success. */
int meshd_op_start(struct meshd_core *d, const char *name, struct mesh_instance_stats *out, char **err);
/* Why name is FAILED (a crash loop; malloc'd), or NULL: not FAILED, not
 * loaded, or no memory. */
char *meshd_core_program_failed(struct meshd_core *d, const char *name);
/* Asks its workers to exit (EXIT, grace, SIGKILL of the group); stays loaded. */
int meshd_op_stop(struct meshd_core *d, const char *name, char **err);
/* Asks its workers that hold nothing (no job, no call) to exit, without
 * waiting for them; the others go on.  The number asked (0 when name is
 * not loaded). */
unsigned meshd_op_stop_idle(struct meshd_core *d, const char *name);
/* The stats table: the host's totals, then each loaded program with its
 * workers.  0 or -ENOMEM (*out then holds nothing to release). */
int meshd_op_ps(struct meshd_core *d, struct meshd_ps *out);
/* The last tail_bytes of <logs>/<name>.log (0 = all, capped at 1 MiB). */
int meshd_op_logs(struct meshd_core *d, const char *name, size_t tail_bytes, char **text, size_t *len, char **err);
/* Sends one request through a slot of a warm worker of name (spawning one
 * on demand) and waits for its reply (malloc'd *reply).  Request and reply
 * are at most MESH_MSG_MAX (16 MiB) each, whatever the ring's size; a
 * streamed reply comes back joined. */
int meshd_op_call(struct meshd_core *d, const char *name, const void *req, size_t n, void **reply, size_t *reply_len,
		  uint64_t timeout_ns, char **err);
/* One streamed part of a reply (n > 0 bytes at p, valid during the call),
 * as the worker sent it; 0 to go on, or a negative code that ends the call
 * with that code (the client went away).  Called on the op's thread. */
typedef int (*meshd_part_fn)(void *arg, const void *p, size_t n);
/* meshd_op_call, passing the parts of a reply the worker streams
 * (mesh_worker_reply_part) to on_part as they come (NULL: the reply comes
 * back joined); *reply is then the reply's last part.  A failure after
 * parts were passed on fails the call as usual: the caller must tell its
 * client the stream is not whole.  While it waits for a worker (not once
 * the worker has the request) it gives up with MESH_E_STOPPED when *cancel
 * (NULL: never) becomes non-zero: the client went away. */
int meshd_op_call_ex(struct meshd_core *d, const char *name, const void *req, size_t n, meshd_part_fn on_part,
		     void *arg, void **reply, size_t *reply_len, uint64_t timeout_ns, const atomic_int *cancel,
		     char **err);

/* Workers held by a job (meshd/jobs/job_exec.c).  A held worker serves only
 * its job (calls and other jobs skip it; the loop's scale-to-zero pass
 * never reaps it); its slot stays allocated (never freed or handed on)
 * until it is put back, even after the worker died. */
struct meshd_job_worker {
	void *prog;		  /* the core's; NULL = none held */
	unsigned idx;
	int slot_index;
	struct mesh_slot *slot;	  /* the job drives it with mesh_slot_send/recv */
	struct mesh_instance *inst;
	pid_t pid;
	int online;		  /* 0: armed, its `online` not seen yet (meshd_job_worker_get_armed) */
};
/* Takes one more worker of name for a job: a free warm one, else one
 * started (spawned, launched on a free slot) and waited for until online.
 * Blocks (the job asks from a helper thread).  0 with *out; -EAGAIN (*err
 * says why) when the program's max_workers are all in use or no slot is
 * free; MESH_E_CRASHED (*err: the report) when it died coming up; the
 * load's errors (unknown program, ...). */
int meshd_job_worker_get(struct meshd_core *d, const char *name, struct meshd_job_worker *out, char **err);
/* meshd_job_worker_get, but a worker that is not online yet is returned
 * as soon as its slot is armed for it (the `run` sent, out->online 0):
 * what is sent into the slot's request ring from now on is what the
 * worker reads first once it maps the slot, so the first chunk waits for
 * no round trip after `ready`.  The hold is the caller's either way; with
 * out->online 0 the caller must call meshd_job_worker_online (any thread,
 * once) to learn whether it came.  And when the call spawns the worker,
 * armed(arg, h) as soon as its slot is armed, before the spawn (with the
 * core's and the host's locks held: publish h and wake, nothing more): h
 * is the handle out will be, its pid 0 (the spawn's is in out later).
 * From armed on the hold is the caller's whatever follows: a spawn that
 * then fails returns its error with *out set (online 0; put it back, no
 * meshd_job_worker_online); *armed_called says whether armed ran. */
int meshd_job_worker_get_armed(struct meshd_core *d, const char *name, struct meshd_job_worker *out,
			       void (*armed)(void *arg, const struct meshd_job_worker *h), void *arg, int *armed_called,
			       char **err);
/* After meshd_job_worker_get_armed with w->online 0 (w: a copy of that
 * handle; it stays usable until this returns, even once the hold was put
 * back): waits until the worker said `online` (0, w->online set) or it
 * did not come: MESH_E_REFUSED (it refused the run and lives on, off the
 * slot; *err the reason) or MESH_E_CRASHED (it died or was failed: its
 * slot is failed; *err the report).  The caller still puts the hold back. */
int meshd_job_worker_online(struct meshd_core *d, struct meshd_job_worker *w, char **err);
/* Gives a held worker back (w is cleared): idle from now (the loop reaps
 * it when its idle TTL expires), or with kill_it asked to exit and its
 * process group SIGKILLed at once (a hung or broken worker). */
void meshd_job_worker_put(struct meshd_core *d, struct meshd_job_worker *w, int kill_it);
/* A held worker whose job was cancelled while it still owes replies:
 *   1. meshd_job_worker_halt asks it to halt: its node loop stops once the
 *      chunk in hand is answered, and what else its ring holds is dropped
 *      with the slot.  0 with *grace_ns its program's stop grace, or
 *      MESH_E_STATE (the table refused: put it back with kill_it);
 *   2. meshd_job_worker_halted waits for `halted`, at most timeout_ns
 *      (the caller's share of that grace).  0: it is warm, off its slot
 *      (IDLE): put it back without kill_it.  MESH_E_TIMEOUT (still in its
 *      chunk), or the failure that ended it: put it back with kill_it. */
int meshd_job_worker_halt(struct meshd_core *d, struct meshd_job_worker *w, uint64_t *grace_ns);
int meshd_job_worker_halted(struct meshd_core *d, struct meshd_job_worker *w, uint64_t timeout_ns);
/* After a held worker's slot failed: waits (at most timeout_ns) until its
 * process is reaped; *status its exit status (128 + signal), *report (may
 * be NULL) a copy of the crash report (status line, then the output tail)
 * or NULL.  0 or MESH_E_TIMEOUT. */
int meshd_job_worker_down(struct meshd_core *d, struct meshd_job_worker *w, uint64_t timeout_ns, int *status,
			  char **report);
/* 1 when the held worker's image was replaced (load, rollback): the job
 * sends it nothing more and puts it back once it answered what it holds
 * (it then exits).  Any thread; no lock. */
int meshd_job_worker_stale(const struct meshd_job_worker *w);
/* The held worker's program's call_timeout (its manifest's, of the image
 * it runs), 0 = none: a chunk's limit on it unless the job has its own
 * (--timeout).  Any thread; no lock. */
uint64_t meshd_job_worker_call_timeout(const struct meshd_job_worker *w);
/* The manifest's max_workers of name (loading it), or 0 (*err says why). */
unsigned meshd_program_max_workers(struct meshd_core *d, const char *name, char **err);
/* fn(arg) is called after each `mesh load` that succeeded (a program new
 * to this meshd, or its image replaced), on that caller's thread with the
 * core's lock held: it must only take note (set a flag, write an eventfd).
 * fn NULL: no more calls once this returns.  One at a time. */
void meshd_on_catalog_change(struct meshd_core *d, void (*fn)(void *arg), void *arg);

#endif
