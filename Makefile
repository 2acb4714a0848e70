# mesh — one Makefile.  Targets: all (default), test, check, bench, demo, fuzz,
# install (PREFIX, DESTDIR), clean.  `make test T=name` runs the tests whose
# name contains `name`.  SAN=1 builds with ASan+UBSan.
PREFIX  ?= /usr/local
# Where `make install` puts the Python package `mesh` (sdk/python): Debian's
# dist-packages for its own prefix /usr, else the versioned one under PREFIX
# (on Debian's sys.path for /usr/local).
PYTHON  ?= python3
PYDIR   ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages)
DESTDIR ?=
BUILD   ?= build
CC      ?= gcc
VERSION := 0.1.0

# Warnings fail the build at the flags it is tested with; with the user's
# own CFLAGS (other optimisation levels warn differently) they are shown.
ifeq ($(origin CFLAGS),command line)
WERROR   ?=
else
WERROR   ?= -Werror
endif
WARN     := -Wall -Wextra $(WERROR) -Wno-unused-parameter -Wshadow -Wstrict-prototypes
# CFLAGS, CPPFLAGS and LDFLAGS are the user's (`make CFLAGS=-O0`); what the
# build needs is added to them whatever the command line says (override).
CFLAGS   ?= -O2 -g
override CFLAGS   += -std=gnu11 -fPIC -pthread $(WARN) -D_GNU_SOURCE -DMESH_VERSION='"$(VERSION)"'
override CPPFLAGS += -Iinclude -Isrc -Itests -MMD -MP
LDLIBS   := -lpthread -lm
override LDFLAGS  += -Wl,--as-needed
EV_LIBS  := $(shell pkg-config --libs libevent_core libevent_extra libevent_pthreads 2>/dev/null || echo -levent_core -levent_extra -levent_pthreads)
JSON_LIBS:= $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
PNG_LIBS := $(shell pkg-config --libs libpng 2>/dev/null || echo -lpng)
# The PostgreSQL job store (src/store/store_pg.c): Debian's libpq, its
# header at build time; the library is loaded when a store is first used
# (src/store/pq.h), so only the tests that query the database link it.
PQ_CFLAGS:= $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
PQ_LIBS  := $(shell pkg-config --libs libpq 2>/dev/null || echo -lpq)
override CPPFLAGS += $(PQ_CFLAGS)
ALL_LIBS := $(EV_LIBS) $(JSON_LIBS) -lz -ldl $(LDLIBS)

ifeq ($(SAN),1)
override CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
override LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(FUZZ),1)
CC      := clang
override CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -DMESH_FUZZ=1
endif

LIB_DIRS   := base http proc journal store job exec autoscale shm host gpu serve gateway worker client ui meshd/core meshd/jobs meshd/api meshd
LIB_SRC    := $(filter-out src/meshd/main.c src/proc/init_main.c,$(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)))
WORKER_SRC := $(wildcard src/base/*.c src/shm/*.c src/worker/*.c)
CLI_SRC    := $(wildcard src/cli/*.c)
TEST_SRC   := $(wildcard tests/unit/test_*.c tests/integration/test_*.c tests/fault/test_*.c)
RUNNER_SRC := $(wildcard tests/runner/*.c)
BENCH_SRC  := $(wildcard bench/*.c)
EX_SRC     := $(wildcard examples/*.c)
TW_SRC     := $(wildcard tests/workers/*.c)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
# The PostgreSQL store's SQL (src/store/sql/*.sql) as C strings, made
# at build time (mk/sql2c.sh: sed alone).
PG_SQL     := $(wildcard src/store/sql/*.sql)
PG_SQL_OBJ := $(BUILD)/obj/gen/store_pg_sql.o
# `mesh ui`'s page (src/ui/assets, its vendor/) as C arrays (mk/asset2c.sh).
UI_ASSETS  := $(filter-out src/ui/assets/vendor,$(wildcard src/ui/assets/* src/ui/assets/vendor/*))
UI_ASSET_OBJ := $(BUILD)/obj/gen/ui_assets.o
LIB_OBJ    := $(call obj,$(LIB_SRC)) $(PG_SQL_OBJ) $(UI_ASSET_OBJ)
WORKER_OBJ := $(call obj,$(WORKER_SRC))
CLI_OBJ    := $(call obj,$(CLI_SRC))
RUNNER_OBJ := $(call obj,$(RUNNER_SRC))
TEST_BINS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
EX_BINS    := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC))
MANDEL_BINS:= $(BUILD)/examples/mandel/mandel $(BUILD)/examples/mandel/assemble
TW_BINS    := $(patsubst tests/workers/%.c,$(BUILD)/tests-workers/%,$(TW_SRC))
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))

PROGS := $(BUILD)/mesh $(BUILD)/meshd $(BUILD)/mesh-init $(BUILD)/libmesh.a \
	$(BUILD)/libmeshworker.a $(BUILD)/libmeshworker.so $(BUILD)/meshworker.pc

.PHONY: FORCE all test check bench demo demo-mandel demo-run fuzz fuzzers fuzz-bins install clean deps tests-build node-openai gpu-examples gpu-bundle
.PRECIOUS: $(BUILD)/obj/%.o
all: $(PROGS) $(EX_BINS) $(MANDEL_BINS) gpu-examples $(BUILD)/man/mesh.1 $(BUILD)/completion/mesh.bash

# The manual pages and the shell completions, made from the programs' own
# --help texts (mk/man.sh; mesh completion), so they cannot disagree.
$(BUILD)/man/mesh.1: $(BUILD)/mesh $(BUILD)/meshd mk/man.sh
	rm -rf $(BUILD)/man && mk/man.sh $(BUILD) $(BUILD)/man $(VERSION)
$(BUILD)/completion/mesh.bash: $(BUILD)/mesh
	@mkdir -p $(dir $@)
	$(BUILD)/mesh completion fish > $(BUILD)/completion/mesh.fish
	$(BUILD)/mesh completion bash > $@

# The CUDA example worker, when nvcc is found (PATH or /usr/local/cuda);
# built for Ampere and Hopper, with Hopper PTX for newer GPUs.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
gpu-examples: $(PROGS)
ifeq ($(NVCC),)
	@echo "nvcc not found: examples/gpu/cuda_worker.cu not built (set NVCC=/path/to/nvcc)"
else ifneq ($(SAN)$(FUZZ),)
	@echo "sanitizer or fuzz build: examples/gpu/cuda_worker.cu not built (nvcc links no sanitizer runtime)"
else
	@$(MAKE) --no-print-directory $(BUILD)/examples/gpu/cuda_worker
endif
$(BUILD)/examples/gpu/cuda_worker: examples/gpu/cuda_worker.cu $(BUILD)/libmeshworker.a
	@mkdir -p $(dir $@)
	$(NVCC) -O2 $(NVCC_ARCH) -Iinclude -Xcompiler -static-libstdc++ -o $@ $< $(BUILD)/libmeshworker.a -lpthread

# What tests/gpu/run.sh needs on a GPU machine that may lack the Debian
# packages and the network: build/gpu-bundle.tar.gz (docs/gpu.md).
gpu-bundle: all
	@tests/gpu/bundle.sh $(BUILD)

# The build's Debian packages (libevent, jansson, libpq, ...), checked once
# per build tree before the first compile: as root mk/deps.sh installs what
# is missing; otherwise it prints the one line to run and the build stops
# there, not at a compiler error about a missing header.
$(BUILD)/.deps-build:
	@mk/deps.sh build
	@mkdir -p $(dir $@) && touch $@

$(BUILD)/obj/%.o: %.c | $(BUILD)/.deps-build
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The list of the .sql files, rewritten only when it changes: a file
# removed or renamed remakes the C strings too (their times alone do not).
$(BUILD)/gen/sql.list: FORCE
	@mkdir -p $(dir $@)
	@echo $(PG_SQL) > $@.tmp; cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@
$(BUILD)/gen/store_pg_sql.c: $(PG_SQL) mk/sql2c.sh $(BUILD)/gen/sql.list
	@mkdir -p $(dir $@)
	mk/sql2c.sh src/store/sql > $@.tmp && mv $@.tmp $@
$(PG_SQL_OBJ): $(BUILD)/gen/store_pg_sql.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/gen/ui_assets.list: FORCE
	@mkdir -p $(dir $@)
	@echo $(UI_ASSETS) > $@.tmp; cmp -s $@.tmp $@ && rm $@.tmp || mv $@.tmp $@
$(BUILD)/gen/ui_assets.c: $(UI_ASSETS) mk/asset2c.sh $(BUILD)/gen/ui_assets.list
	@mkdir -p $(dir $@)
	mk/asset2c.sh src/ui/assets > $@.tmp && mv $@.tmp $@
$(UI_ASSET_OBJ): $(BUILD)/gen/ui_assets.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libmesh.a: $(LIB_OBJ)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/libmeshworker.a: $(WORKER_OBJ)
	@rm -f $@; ar rcs $@ $^
# Exports only include/mesh/worker.h's calls (the version script); the
# soname's 0 changes only when one of them changes incompatibly.
$(BUILD)/libmeshworker.so: $(WORKER_OBJ) src/worker/libmeshworker.map
	$(CC) -shared -Wl,-soname,libmeshworker.so.0 -Wl,--version-script=src/worker/libmeshworker.map \
		$(LDFLAGS) -o $@ $(WORKER_OBJ) $(LDLIBS)
	ln -sf libmeshworker.so $(BUILD)/libmeshworker.so.0
$(BUILD)/meshworker.pc: mk/meshworker.pc.in
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

$(BUILD)/mesh: $(CLI_OBJ) $(BUILD)/libmesh.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libmesh.a $(ALL_LIBS)
$(BUILD)/meshd: $(call obj,src/meshd/main.c) $(BUILD)/libmesh.a
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libmesh.a $(ALL_LIBS)
# mesh-init (src/proc/pidns.c): the init of a worker's PID namespace, exec'd
# at each spawn, while the worker starts beside it: libc alone, linked
# statically (no dynamic loader at its exec: 1.0 ms of CPU, not 1.8, on a
# 2-CPU VM), dynamically under the sanitizers or where there is no libc.a.
INIT_STATIC := $(if $(SAN)$(FUZZ),,-static)
$(BUILD)/mesh-init: $(call obj,src/proc/init_main.c) $(BUILD)/libmesh.a
	$(CC) $(LDFLAGS) $(INIT_STATIC) -o $@ $< $(BUILD)/libmesh.a -pthread 2>/dev/null || \
		$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libmesh.a -pthread

$(BUILD)/tests/%: tests/%.c $(RUNNER_OBJ) $(BUILD)/libmesh.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(RUNNER_OBJ) $(BUILD)/libmesh.a $(ALL_LIBS) $(PQ_LIBS)
$(BUILD)/bench/%: bench/%.c $(BUILD)/libmesh.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libmesh.a $(ALL_LIBS)
$(BUILD)/examples/%: examples/%.c $(BUILD)/libmeshworker.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libmeshworker.a -lz $(LDLIBS)
# The Mandelbrot demo (examples/mandel): its worker and its PNG assembler.
$(BUILD)/examples/mandel/mandel: examples/mandel/mandel.c examples/mandel/mandel.h $(BUILD)/libmeshworker.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libmeshworker.a $(LDLIBS)
$(BUILD)/examples/mandel/assemble: examples/mandel/assemble.c examples/mandel/mandel.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(PNG_LIBS) $(LDLIBS)
# Programs the tests drive (misbehaving workers); kept out of $(BUILD)/tests,
# where the runner executes every file.
$(BUILD)/tests-workers/%: tests/workers/%.c $(BUILD)/libmeshworker.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libmeshworker.a $(LDLIBS)

# The fake libnvidia-ml.so.1 the GPU tests load through meshd's dlopen seam.
FAKE_NVML  := $(BUILD)/tests-gpu/fake_nvml.so
$(FAKE_NVML): tests/gpu/fake_nvml.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $<

tests-build: all $(TW_BINS) $(TEST_BINS) $(FAKE_NVML)

# The npm packages the tests drive, pinned, from the npm registry into the
# build tree, in one install (two --no-save installs into one prefix undo
# each other): the official OpenAI client (the gateway tests) and
# playwright-core (mesh ui's browser test, with Debian's chromium).  A
# failure is written to $(BUILD)/node/npm.log and the tests that need them
# fail with it (make test goes on).
OPENAI_NPM_VERSION := 5.23.2
PLAYWRIGHT_NPM_VERSION := 1.65.2
NODE_STAMP := $(BUILD)/node/.installed-openai-$(OPENAI_NPM_VERSION)-playwright-$(PLAYWRIGHT_NPM_VERSION)
node-openai: $(NODE_STAMP)
$(NODE_STAMP):
	@mkdir -p $(BUILD)/node
	@rm -f $(BUILD)/node/.installed-*
	@echo '{"private": true}' > $(BUILD)/node/package.json
	npm install --prefix $(BUILD)/node --no-audit --no-fund --no-save --ignore-scripts \
		openai@$(OPENAI_NPM_VERSION) playwright-core@$(PLAYWRIGHT_NPM_VERSION) >$(BUILD)/node/npm.log 2>&1 || \
		{ cat $(BUILD)/node/npm.log; exit 1; }
	@touch $@

deps:
	@mk/deps.sh test

# `make test` runs two test binaries a CPU at a time, eight at most (most
# of a test's time is spent waiting on processes it started: one at a time
# the suite kept 2 CPUs under a load of 0.5); `make test -jN` runs N (make's
# own -j, -j1 one at a time; `-j` alone: one a CPU); `make test T=name` only
# the tests whose name contains name.
TEST_JOBS_DEFAULT = $(shell n=$$(( $$(nproc) * 2 )); [ $$n -gt 8 ] && n=8; echo $$n)
TEST_JOBS = $(or $(patsubst -j%,%,$(filter -j%,$(MAKEFLAGS))),$(if $(filter -j,$(MAKEFLAGS)),$(shell nproc),$(TEST_JOBS_DEFAULT)))
# The builds a target runs itself go a CPU at a time unless make was given
# -j (whose job slots they then share).
BUILD_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc))
test: deps
	@$(MAKE) $(BUILD_JOBS) --no-print-directory tests-build >$(BUILD).make.log 2>&1 || { cat $(BUILD).make.log; exit 1; }
	@$(MAKE) --no-print-directory node-openai >/dev/null 2>&1 || echo "mesh: npm install openai@$(OPENAI_NPM_VERSION) playwright-core@$(PLAYWRIGHT_NPM_VERSION) failed (see $(BUILD)/node/npm.log); their tests will fail"
	@JOBS=$(TEST_JOBS) tests/run.sh $(BUILD) $(T)

# The whole suite under ASan+UBSan (the journal stress for 30 s), then a
# short run of every fuzz target.
check: deps
	@MESH_STRESS_SECONDS=30 $(MAKE) --no-print-directory BUILD=build-san SAN=1 CC=clang test
	@$(MAKE) --no-print-directory fuzz

fuzzers:
	@$(MAKE) $(BUILD_JOBS) --no-print-directory BUILD=build-fuzz FUZZ=1 fuzz-bins
fuzz-bins: $(FUZZ_BINS)
$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libmesh.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libmesh.a $(ALL_LIBS)
FUZZ_SECONDS ?= 15
fuzz: deps fuzzers
	@tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(shell nproc)

bench: all
	@mk/deps.sh bench
	@$(MAKE) --no-print-directory $(BENCH_BINS)
	@bench/run.sh $(BUILD)

# The whole system: meshd scales a 300-tile job from zero, is killed midway
# and restarted, and reaps back to zero (examples/mandel/demo.sh); then the
# same image through `mesh run`, killed and resumed (examples/demo.sh).
demo:
	@mk/deps.sh demo
	@$(MAKE) --no-print-directory all >$(BUILD).make.log 2>&1 || { cat $(BUILD).make.log; exit 1; }
	@examples/mandel/demo.sh $(BUILD)
	@examples/demo.sh $(BUILD)
	@cat $(BUILD)/demo-ui.txt 2>/dev/null || true

# Each half alone.
demo-mandel:
	@mk/deps.sh demo
	@$(MAKE) --no-print-directory all >$(BUILD).make.log 2>&1 || { cat $(BUILD).make.log; exit 1; }
	@examples/mandel/demo.sh $(BUILD)

demo-run:
	@mk/deps.sh demo
	@$(MAKE) --no-print-directory all >$(BUILD).make.log 2>&1 || { cat $(BUILD).make.log; exit 1; }
	@examples/demo.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/mesh $(DESTDIR)$(PREFIX)/lib/systemd/system \
		$(DESTDIR)$(PREFIX)/lib/systemd/user $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 644 $(BUILD)/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(BUILD)/man/meshd.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 644 $(BUILD)/completion/mesh.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/mesh
	install -m 644 $(BUILD)/completion/mesh.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/mesh.fish
	install -m 755 $(BUILD)/mesh $(BUILD)/meshd $(BUILD)/mesh-init $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/libmeshworker.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libmeshworker.so $(DESTDIR)$(PREFIX)/lib/libmeshworker.so.$(VERSION)
	ln -sf libmeshworker.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libmeshworker.so.0
	ln -sf libmeshworker.so.0 $(DESTDIR)$(PREFIX)/lib/libmeshworker.so
	install -d $(DESTDIR)$(PYDIR)/mesh
	install -m 644 sdk/python/mesh/*.py sdk/python/mesh/py.typed $(DESTDIR)$(PYDIR)/mesh/
	ln -sf $(PREFIX)/lib/libmeshworker.so.0 $(DESTDIR)$(PYDIR)/mesh/libmeshworker.so.0
	install -m 644 include/mesh/*.h $(DESTDIR)$(PREFIX)/include/mesh/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' mk/meshworker.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/meshworker.pc
	sed 's|/usr/local/bin/meshd|$(PREFIX)/bin/meshd|g' mk/meshd.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/meshd.service
	sed 's|/usr/local/bin/meshd|$(PREFIX)/bin/meshd|g' mk/meshd-user.service > $(DESTDIR)$(PREFIX)/lib/systemd/user/meshd.service

clean:
	rm -rf build build-san build-fuzz build*.make.log

-include $(shell find $(BUILD)/obj $(BUILD)/tests $(BUILD)/tests-workers $(BUILD)/examples -name '*.d' 2>/dev/null)

FORCE:
