/* The insides of meshd's core, shared by core.c (its life, the event loop
 * and its pass), core_programs.c (the program table: load, upgrade,
 * rollback, stop, unload, ps), core_workers.c (worker records, slots,
 * start, the workers held by jobs) and core_call.c (calls).  Not a
 * contract: meshd/core/ops.h is.
 *
 * Locks: d->mu guards programs and slots; the host has its own lock.  Order:
 * d->mu may be held while calling a host function that does not wait
 * (warm, launch, halt, exit, fail, state, stats); never across a wait. */
#ifndef MESH_MESHD_CORE_CORE_INT_H
#define MESH_MESHD_CORE_CORE_INT_H

#include "base/clock.h"
#include "meshd/core/core_gpu.h"
#include "meshd/core/ops.h"
#include "meshd/core/feed.h"
#include "host/host.h"
#include "host/image.h"
#include "shm/shm.h"

#include <event2/event.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* A caller waits this long for a worker that is already STOPPING to go. */
#define STOP_WAIT_NS (15ull * MESH_NS_PER_S)
/* Crash-loop backoff: the first retry after this, doubling, capped. */
#define CRASH_BACKOFF_NS (200ull * MESH_NS_PER_MS)
#define CRASH_BACKOFF_CAP_NS (10ull * MESH_NS_PER_S)
#define CRASH_FAIL_AFTER 5u
#define CRASH_WINDOW_NS (60ull * MESH_NS_PER_S)

struct worker {
	struct mesh_instance *inst;
	int slot;	      /* index into d->slots while on a slot, else -1 */
	int busy;	      /* a call runs on its slot */
	uint64_t last_used;
	uint64_t stuck_since; /* a call its caller gave up on may still run; 0: none */
	uint32_t seen_unready; /* the host's unready count already noted */
	int job;	      /* held by a job (meshd_job_worker_get): no call uses it */
	uint64_t gpu_res, gpu_prev; /* its GPU reservation (core_gpu.h), and the last one's */
	enum mesh_istate seen; /* loop thread: its state at the last pass (a change is an event) */
	pid_t seen_pid;	       /* loop thread: its last process's pid (its DOWN event names it) */
};

/* A program's warm/cold changes kept for ps (the page's timelines over
 * the last hour or day): the last this many, oldest dropped. */
#define WARM_HIST 256u

struct program {
	struct program *next;
	struct mesh_image img;
	struct worker w[MESH_MAX_WORKERS_CAP];
	unsigned nw;
	unsigned refs; /* ops using it; unload waits for 0 */
	unsigned stops; /* stop_all calls: a call cut by one says so */
	unsigned waiting; /* calls looking for a worker */
	int gone;
	/* Metrics, under d->metrics_mu. */
	struct mesh_hist cold_start, call;
	uint64_t cold_last_ns; /* the last cold start (spawn -> ready) */
	/* Its warm/cold changes as tick() saw them (d->mu): a ring of
	 * warm_n entries from warm_at; warm_was is the last state (none yet
	 * while warm_n is 0). */
	struct meshd_warm_change warm_hist[WARM_HIST];
	unsigned warm_at, warm_n;
	int warm_was;
	uint64_t calls[MESHD_CALL__N];
	/* crash-loop backoff */
	unsigned streak;		    /* deaths before ready in a row */
	uint64_t crash_at[CRASH_FAIL_AFTER]; /* the last ones' times (a ring) */
	unsigned ncrash;
	uint64_t retry_at;		    /* no spawn before this */
	char *crash_report;		    /* the last such death's report */
	char *failed;			    /* FAILED: why; NULL if not */
	/* Upgrade and rollback: a retired program (an image replaced by
	 * load or rollback) is also gone; its workers finish what they hold
	 * and exit, then the tick frees it.  keep_dir: this image's kept
	 * copy (meshd/core/images.h), prev_dir the previous image's; NULL: none. */
	atomic_int retired;
	char *keep_dir, *prev_dir;
	uint64_t prev_id; /* mesh_image_id of the previous image (0: none) */
};

struct meshd_core {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; a program unref'd, a worker freed */
	struct mesh_host *h;
	char *catalog, *logs;
	char *env[4];
	struct program *progs;
	struct mesh_slot **slots;
	unsigned nslots;
	unsigned *slot_busy; /* calls in flight on it */
	int *slot_taken;     /* given to a worker */
	atomic_int stop;
	enum mesh_gpu_access gpu;
	char *mps_dir; /* --isolation mps: CUDA_MPS_PIPE_DIRECTORY */
	/* A leaf lock for the programs' metrics: the host's loop records cold
	 * starts with the host's lock held, which d->mu may not be taken under. */
	pthread_mutex_t metrics_mu;
	uint64_t heartbeat_ns, backoff_ns;
	uint64_t pass_pause_ns; /* meshd_config's test_pass_pause_ns */
	struct meshd_feed *feed; /* the events (feed.h): the core's, posted to by its users too */
	struct meshd__gpu G; /* NVML, placement, MPS (core_gpu.h) */
	/* The event loop (meshd_core_run): the host's fd, one timer armed for
	 * the earliest deadline (the host's and the core's), and a kick that
	 * other threads activate when they make an earlier core deadline (a
	 * worker that went idle) or retire a program.  armed: the core's
	 * deadline the timer will reach (UINT64_MAX: none, or a pass is
	 * running), read by meshd__kick() to skip needless wake-ups. */
	struct event_base *base;
	struct event *host_ev, *timer_ev, *kick_ev;
	_Atomic uint64_t armed;
	uint64_t core_next; /* loop thread: tick()'s answer */
	int in_loop;	    /* loop thread: inside event_base_loop proper */
	pthread_mutex_t loop_mu; /* looping, and meshd_core_on_loop's queue */
	int looping;
	pthread_t loop_th;
	/* meshd_on_catalog_change's (under mu) */
	void (*catalog_fn)(void *arg);
	void *catalog_arg;
	/* The savings ledgers, a program name each (savings.c), under mu;
	 * when they are next written (monotonic); a failed write was said;
	 * the workers up at the last tick (a change writes them at once). */
	struct meshd__ledger *ledgers;
	uint64_t ledger_flush_at;
	int ledger_warned;
	unsigned ledger_up;
};

/* core.c */
/* Another thread made a core deadline at t (a worker idle from now, a
 * call or job that needs heal checks; 0: at once, a retired program):
 * the loop recomputes unless its timer already fires by then.  Any thread,
 * d->mu held or not. */
void meshd__kick(struct meshd_core *d, uint64_t t);
/* How often the loop's heal check looks at a worker that serves a call or
 * a job (at least 1 ns). */
uint64_t meshd__heal_every(const struct meshd_core *d);

/* core_programs.c */
/* Finds or loads name, with a reference held (meshd__unref when done).
 * 0, or the load's error (*err says why). */
int meshd__get_program(struct meshd_core *d, const char *name, struct program **out, char **err);
/* Drops a reference; a retired program left with none is freed by the
 * loop (kicked).  d->mu not held. */
void meshd__unref(struct meshd_core *d, struct program *p);
/* A program's own memory (its instances freed or never made). */
void meshd__program_free(struct program *p);
/* Workers of a retired p that hold nothing (no call, no job) are asked to
 * exit; the number still holding something.  d->mu held. */
unsigned meshd__retire_sweep(struct meshd_core *d, struct program *p);
/* 0, or MESH_E_CRASHED with *err when p is FAILED (a crash loop gave up,
 * until `mesh start`).  d->mu held. */
int meshd__failed(const struct program *p, char **err);

/* core_workers.c */
/* Gives back the slots of workers of p that left them, replaces a slot a
 * crash failed, and notes deaths before `ready` for the backoff.  d->mu
 * held. */
void meshd__reconcile(struct meshd_core *d, struct program *p);
/* meshd__reconcile of every program; d->mu held. */
void meshd__reconcile_all(struct meshd_core *d);
/* A free slot with rings of ring bytes, marked taken (a fresh one replaces
 * one of another size or one that failed); its index, or -1 when none is
 * free.  d->mu held. */
int meshd__take_slot(struct meshd_core *d, uint64_t ring);
/* Every slot is taken: halts the least recently used worker that serves
 * no call off its slot.  Its program with a reference held (meshd__unref
 * it) and its instance in *victim; NULL when every slot serves a call.
 * d->mu held. */
struct program *meshd__evict_lru(struct meshd_core *d, struct mesh_instance **victim);
/* A new worker record of p with its instance: its index or a negative
 * code.  d->mu held; p->nw < max_workers. */
int meshd__new_worker(struct meshd_core *d, struct program *p);
/* After a spawn of wk (rc: how it went) that meshd__gpu_before_spawn
 * reserved res for (0: nothing): the reservation settled and kept on wk. */
void meshd__spawned(struct meshd_core *d, struct worker *wk, uint64_t res, int rc);

/* savings.c: the savings ledgers, a program name each (d->mu held by all
 * but the flush). */
/* p was loaded (or is the name's new image): the name's window is open
 * from now, with p's max_workers (an earlier run's totals read first). */
void meshd__ledger_open(struct meshd_core *d, const struct program *p);
/* name was unloaded: its window closes until it is loaded again. */
void meshd__ledger_close(struct meshd_core *d, const char *name);
/* p (unloaded, or a retired image) is about to be freed: its workers'
 * worker-time stays in its name's ledger. */
void meshd__ledger_forget(struct meshd_core *d, const struct program *p);
/* name's savings at now (monotonic) into *s; 0, or MESH_E_NOTFOUND for a
 * name never loaded. */
int meshd__ledger_read(struct meshd_core *d, const char *name, uint64_t now, struct meshd_savings *s);
/* Writes every ledger to <logs>/.savings/<name> when due (force: now);
 * when the next write is due (monotonic).  d->mu NOT held (it takes it,
 * and writes the files off it). */
uint64_t meshd__ledger_flush(struct meshd_core *d, int force);
void meshd__ledgers_free(struct meshd_core *d);

#endif
