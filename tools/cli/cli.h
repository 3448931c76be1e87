/* cli.h -- the CLI room (tools/cli/): the `plume` command. plume.c is the dispatch table;
 * each cmd_<name>.c defines int cmd_<name>(int argc, char **argv), with argv[0] the
 * subcommand's name, and returns the process exit status; generate.[ch] is the generation
 * loop run, chat and transcribe share; cli_common.c what they all share (below);
 * bench_constrain.c the constraint's cost that `plume bench --json-schema` measures;
 * bench_drafter.c the MTP drafter's decode against plain that `plume bench --drafter` measures.
 *
 * Owns: flags, terminal output, exit statuses. May call: libplume's public API (plume.h, and
 * the utility headers common.h, npy.h, manifest.h for `plume verify`), the server room
 * (serve/serve.h: serve_run and its config) and the hub room (hub/store.h, hub/hub.h).
 * Must not know: the model's internals (model.h, forward.h, pool.h, config.h, ...:
 * tests/test_layers.py checks it), the server's or the hub's files beyond their headers.
 * Errors go to stderr as one line "plume <cmd>: <message>". */
#ifndef PLUME_CLI_H
#define PLUME_CLI_H

#include <stdint.h>

#include "plume.h"

/* Print "plume: <message>" on stderr; return 1 (an exit status). */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print a library error message as cli_error does, then free it (err may be NULL: "unknown
 * error"); return 1. */
int cli_lib_error_free(char *err);

/* Parse a whole decimal integer in [lo, hi]; 0 on success. */
int cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parse "a,b,c": whole decimal integers, each in [lo, hi] (within int32), separated by single
 * commas, at most max of them (0: any number), into *out (malloc'd) and *n. 0, or -1 with
 * nothing allocated (an empty item, a bad or out-of-range number, too many). */
int cli_int_list(const char *s, int64_t lo, int64_t hi, int32_t max, int32_t **out, int32_t *n);
/* Parse a finite float; 0 on success. */
int cli_float(const char *s, float *out);

/* The bundle to use: the -m value (a directory, or ORG/NAME[@REV] of the Hub: pulled and
 * converted on first use, docs/PULL.md), else the default bundle (tools/hub/store.h). Returns
 * NULL (having printed why, or how to make one) when there is none. */
const char *cli_model_path(const char *flag);
/* mkdir -p the directory that will hold path (an output file or directory); 0, or 1 having
 * printed the error. */
int cli_mkdir_parent(const char *path);

/* `plume bench --json-schema`: the cost of a constraint per decode step (bench_constrain.c). */
typedef struct {
    const char *model, *schema, *tokenizer, *isa; /* bundle, schema file, --tokenizer or NULL, --isa */
    int32_t threads, exact;
    int64_t n_gen, reps;  /* steps per repetition, repetitions */
    float temp;           /* the sampler's temperature */
    int64_t top_k;        /* its top-k, -1: the default */
    int json;             /* one JSON line instead of the table */
} bench_constraint_opts;
/* Measure and print; 0, or 1 having printed the error. */
int bench_constraint_costs(const bench_constraint_opts *o);

/* ---- plume bench --drafter (bench_drafter.c) ---- */
typedef struct {
    const char *model, *drafter, *isa;
    int32_t threads, exact, draft, json;
    int64_t n_prompt, n_gen, reps;
    double rates[8];      /* --accept-rate: forced acceptance per draft */
    int32_t n_rates;
    int32_t fixed;        /* --draft-fixed: draft K every round (adaptive length off) */
} bench_drafter_opts;
/* Plain decode against the drafter's speculative decode at forced acceptance rates,
 * interleaved; 0, or 1 having printed the error. */
int bench_drafter_costs(const bench_drafter_opts *o);

int cmd_convert(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_draft(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_transcribe(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_derive_tokenizer(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
