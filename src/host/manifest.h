/* A program's manifest: <catalog>/<name>.toml (docs/catalog.md).
 *
 *   name = "echo"                 # required; must equal the file's base name
 *   description = "..."           # optional
 *   backends = ["native"]         # required; only "native" exists
 *   device = "cpu"                # "cpu" (default) or "gpu"; "metal" refused
 *   gpus = 1                      # device = "gpu": how many GPUs (1..16, default 1)
 *   vram = "20GiB"                # device = "gpu": memory it needs on each (placement)
 *   args = ["--threads", "2"]     # argv[1..] of the worker
 *   max_workers = 1               # 1..64
 *   idle_ttl = "300s"             # durations: "<n>[.frac](ms|s|m|h)"
 *   ring = "4M"                   # bytes per ring of its slots: a power of two, 4K..1G (default 1M)
 *   user = "svc-echo"             # run as this user (or a uid); see mesh_limits_run_as
 *   python = "/srv/venv"          # a Python virtual environment: the worker's argv[0] is
 *                                 #   <python>/bin/python (the binary must be that interpreter)
 *   [env]                         # extra environment, string values
 *   LOG_LEVEL = "info"
 *   [limits]
 *   memory = "512M"               # bytes: integer or "<n>[K|M|G|T]"
 *   cpu = "1.5"                   # cores, up to 3 decimals
 *   open_files = 1024
 *   processes = 64
 *   [lifecycle]
 *   ready_timeout = "60s"
 *   online_timeout = "60s"
 *   stop_signal = "SIGTERM"       # TERM INT QUIT HUP USR1 USR2 (with or without SIG)
 *   stop_grace = "3s"
 *   call_timeout = "30s"          # a call running longer kills its worker; absent = no limit
 *   [source]
 *   hash = "sha256:..."           # what the binary was built from; part of the image hash
 *
 * An HTTP program (a model server the gateway fronts, docs/gateway.md) says
 * backend = "http" instead of `backends`, and has no binary in the catalog:
 *   backend = "http"
 *   command = ["llama-server", "-m", "q.gguf", "--port", "{port}"]  # {port}: a free loopback port
 *   models = ["qwen2.5-7b"]       # the `model` names routed to it (1..64 of them)
 *   probe_path = "/v1/models"     # warm iff GET probe_path answers (default: /v1/models listing the model)
 *   probe_status = 200            # the status that means warm (default: any 2xx)
 *   max_concurrency = 4           # requests at once per instance (default: no limit)
 *   group = "big"                 # programs of one group are never evicted for each other
 *   memory = "24G"                # what it needs (RAM or VRAM), for meshd's --http-memory budget
 *   upstream_paths = ["/props"]   # what /upstream/<model>/PATH may reach: path prefixes, or "*" (default none)
 *   aliases = ["gpt-4o-mini"]     # more `model` names routed to it (listed by /v1/models as well)
 *   upstream_model = "qwen2.5-7b-instruct-q4" # the `model` sent to the server, whatever name was asked
 *   [filters]
 *   strip_params = ["top_p"]      # top-level members of a JSON body removed before it goes on
 *   [filters.defaults]            # members set when the body lacks them (strings, integers, booleans)
 *   max_tokens = 512
 *   [lifecycle]
 *   start_timeout = "120s"        # spawn to warm (default 300 s)
 * `idle_ttl`, `[env]`, `[limits]`, `stop_signal`, `stop_grace` and `user`
 * apply as for native programs; `args`, `ring`, `max_workers`, `device`,
 * `python` and the other lifecycle timeouts are refused.
 *
 * Unknown tables or keys, a wrong type, an out-of-range value: an error
 * "file:line:col: message". */
#ifndef MESH_HOST_MANIFEST_H
#define MESH_HOST_MANIFEST_H

#include "host/limits.h"

#include <stddef.h>
#include <stdint.h>

enum mesh_device { MESH_DEVICE_CPU, MESH_DEVICE_GPU };
enum mesh_value_type { MESH_VALUE_STRING, MESH_VALUE_INT, MESH_VALUE_BOOL, MESH_VALUE_FLOAT };

/* One [filters.defaults] entry: a JSON body's top-level member key gets this
 * value when the body lacks it. */
struct mesh_manifest_default {
	char *key;
	enum mesh_value_type type;
	char *str; /* STRING */
	int64_t i; /* INT */
	int b;	   /* BOOL */
	double f;  /* FLOAT (finite) */
};
enum mesh_backend { MESH_BACKEND_NATIVE, MESH_BACKEND_HTTP };

#define MESH_READY_TIMEOUT_NS (60ull * 1000000000ull)
#define MESH_ONLINE_TIMEOUT_NS (60ull * 1000000000ull)
#define MESH_STOP_GRACE_NS (3ull * 1000000000ull)
#define MESH_IDLE_TTL_NS (300ull * 1000000000ull)
#define MESH_START_TIMEOUT_NS (300ull * 1000000000ull)
#define MESH_MODELS_MAX 64u
#define MESH_MAX_WORKERS_CAP 64u
/* The output lines kept per worker for a crash report. */
#define MESH_TAIL_LINES 30u

struct mesh_manifest {
	char *name, *description;
	enum mesh_device device;
	char **args;	/* NULL-terminated */
	size_t nargs;
	char **env;	/* "K=V", NULL-terminated */
	size_t nenv;
	struct mesh_limits limits;
	uint64_t ready_timeout_ns, online_timeout_ns, stop_grace_ns, idle_ttl_ns;
	uint64_t call_timeout_ns; /* one call's limit on the worker; 0 = none */
	int stop_signal;
	unsigned max_workers;
	uint64_t ring_bytes; /* each ring of its slots (MESH_SLOT_DEFAULT_RING when absent) */
	unsigned gpus;	   /* device = "gpu": GPUs per worker (1 by default), else 0 */
	uint64_t vram;	   /* bytes needed on each of its GPUs; 0 = not said */
	char *source_hash; /* "" when absent */
	char *user;	   /* a user name or a uid's digits; NULL when absent */
	char *python;	   /* a virtual environment's directory (absolute); NULL when absent */
	/* backend = "http" (else NULL / 0) */
	enum mesh_backend backend;
	char **command;	   /* NULL-terminated; "{port}" in an argument is the port */
	size_t ncommand;
	char **models;	   /* NULL-terminated, distinct */
	size_t nmodels;
	char *probe_path;  /* NULL: /v1/models, judged by the model being listed */
	unsigned probe_status; /* 0: any 2xx */
	unsigned max_concurrency; /* 0: no limit */
	char *group;	   /* NULL: its own */
	uint64_t memory;   /* bytes it needs, for the gateway's budget; 0: not counted */
	uint64_t start_timeout_ns;
	/* The paths the gateway's /upstream/<model>/PATH reaches (prefixes of
	 * whole segments, or "*": all); NULL-terminated; NULL: none. */
	char **upstream_paths;
	size_t nupstream_paths;
	/* More names routed to it, distinct from models (NULL-terminated;
	 * NULL: none); the model name sent upstream (NULL: the one asked). */
	char **aliases;
	size_t naliases;
	char *upstream_model;
	/* [filters]: members stripped (NULL-terminated; NULL: none), and
	 * those set when absent (in the file's order). */
	char **strip_params;
	size_t nstrip_params;
	struct mesh_manifest_default *defaults;
	size_t ndefaults;
};

/* Parses and checks a manifest (len bytes of text; file names it in
 * messages; a leading UTF-8 byte order mark is skipped).  expect_name, when
 * not NULL, must equal `name`.  0, or
 * MESH_E_PARSE / -ENOMEM with *err a malloc'd "file:line:col: message".
 * On success release *m with mesh_manifest_release (also safe on a zeroed
 * or failed one). */
int mesh_manifest_parse(const char *file, const char *text, size_t len, const char *expect_name,
			struct mesh_manifest *m, char **err);
void mesh_manifest_release(struct mesh_manifest *m);

/* A program name: 1..64 of [A-Za-z0-9_-], not starting with '-' (it becomes
 * a file name and a log name). */
int mesh_manifest_name_ok(const char *name);

/* "SIGTERM"/"TERM" -> SIGTERM etc. for the allowed stop signals; 0 if not one. */
int mesh_signal_from_name(const char *s);
const char *mesh_signal_name(int sig);

#endif
