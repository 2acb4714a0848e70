/* The command line of `mesh run` (GNU parallel's): options, the command,
 * the argument sources.  Internal to the CLI. */
#ifndef MESH_CLI_RUN_OPTS_H
#define MESH_CLI_RUN_OPTS_H

#include "base/buf.h"
#include "exec/template.h"

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

struct run_src {
	const char *path; /* a file ("-": standard input); NULL: the words of a ::: list */
	char **words;	  /* borrowed from argv */
	size_t nwords;
	int linked; /* :::+ / ::::+ (1), --link (2) */
};

struct run_args {
	uint64_t slots, chunks, retries, timeout_ns, ttl_ns, delay_ns, memfree, halt_count;
	uint64_t store_outage_ns; /* --store-outage; 0: the default */
	unsigned timeout_pct, halt_percent;
	int halt_mode, halt_what, nice, delim;
	double load_max;
	const char *journal, *results, *node, *joblog, *tmpdir, *tagstring;
	int explicit_journal, have_chunks, speculate, keep_order, tag, line_buffer, ungroup;
	int dry_run, progress, verbose, silent, help;
	int joblog_plus; /* --joblog +FILE: appended to, no header (GNU parallel's) */
	int quote;	 /* -q: the command never goes through a shell */
	int dashdash;	 /* "--" ended the options: no word after ::: is refused as one */
	int link;	 /* --link: the sources are paired, the shorter ones repeated */
	const char *arg_sep, *file_sep; /* ::: and :::: (--arg-sep, --arg-file-sep) */
	/* The replacement strings: -I and its kin rename the built-in ones,
	 * --rpl defines more (applied in that order once all options are
	 * read, as GNU parallel does). */
	struct mesh_exec_rpls rpls;
	const char *rename[MESH_EXEC_RPL_BUILTIN];
	const char **rpl_defs; /* borrowed from argv; owned array */
	size_t nrpl_defs;
	int have_colsep;
	/* Several arguments a command: 'N' (-N/-n: max_args a chunk; -N0: one
	 * record a chunk that the command does not see), 'm' (-m), 'X' (-X,
	 * context replace), 'x' (--xargs); 0 one a command. */
	int multi;
	uint64_t max_args;
	int pipe;	/* --pipe: chunks are blocks of records on standard input */
	uint64_t block; /* --block: a block's bytes at most (0: the default) */
	regex_t colsep;
	const char *colsep_text;
	char **cmd;	    /* the command as given, NULL-terminated (owned); empty: the input is the command */
	char **argv;	    /* what runs: cmd, or /bin/sh -c LINE for a one-word command line */
	char *shargv[4];
	struct run_src *src; /* owned */
	size_t nsrc;
};

/* Parses argv (argv[0] = "run") into a (zeroed first).  0, or the exit code
 * of a usage error after saying why on stderr; with --help, a->help is set
 * and the usage is printed.  Release a with mesh__run_args_release, also
 * after an error. */
int mesh__run_parse(int argc, char **argv, struct run_args *a);
void mesh__run_args_release(struct run_args *a);
/* "mesh: run: <message>" and the hint to --help on stderr; mesh run's usage
 * exit code. */
int mesh__run_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mesh_cli_fail with mesh run's exit code. */
int mesh__run_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mesh_cli_fail_store with mesh run's exit code. */
int mesh__run_fail_store(int err, const char *words, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
