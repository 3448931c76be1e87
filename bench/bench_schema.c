/* bench_schema.c -- which JSON Schemas plume accepts, and how long each takes to compile
 * (bench/jsonschemabench.sh runs it over JSONSchemaBench's sets; docs/STRUCTURED.md quotes
 * it). Not a test: nothing here can fail.
 *
 * For each schema file: plume_constraint_new_json_schema over the real vocabulary (the schema
 * compiled to GBNF, parsed, the recognizer's start state made), timed, and then, when
 * STEPS > 0, the cost of a constrained step: the mask of the start state and of the states
 * after each of STEPS allowed ids picked at random (a fixed seed). One line per file, tab-separated:
 *   FILE  ok|refused  COMPILE_MS  STEP_MS  MESSAGE
 * (STEP_MS: the mean time of a mask read then an accept, -1 when not measured).
 *
 *   make build/bench/bench_schema && build/bench/bench_schema tests/vocab/tokenizer.bin [--steps N] FILE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* An allowed id of the current state picked by the random state *r (-1: none). */
static int32_t pick_allowed(plume_constraint *c, int32_t V, uint32_t *bits, uint64_t *r) {
    memset(bits, 0, (size_t)((V + 31) / 32) * sizeof *bits);
    int32_t n = plume_constraint_mask(c, bits);
    if (n <= 0) return -1;
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    int32_t k = (int32_t)((*r >> 33) % (uint64_t)n);
    for (int32_t w = 0; w < (V + 31) / 32; w++)
        for (uint32_t x = bits[w]; x; x &= x - 1)
            if (k-- == 0) return w * 32 + __builtin_ctz(x);
    return -1;
}

/* One schema file: compile, time, optionally step. */
static void bench_one(const plume_vocab *v, int32_t V, uint32_t *bits, const char *path, int steps) {
    char *text = NULL, *err = NULL;
    size_t len = 0;
    if (plume_read_file(path, &text, &len, &err)) {
        printf("%s\trefused\t0\t-1\tread: %s\n", path, err);
        free(err);
        return;
    }
    plume_constraint_params p = plume_constraint_default_params();
    plume_constraint *c = NULL;
    double t0 = plume_now();
    int rc = plume_constraint_new_json_schema(&c, v, text, len, &p, &err);
    double ms = (plume_now() - t0) * 1e3, step_ms = -1;
    if (!rc && steps > 0) {
        double t1 = plume_now();
        int k = 0;
        uint64_t r = 42;
        for (; k < steps; k++) {
            int32_t id = pick_allowed(c, V, bits, &r);
            if (id < 0 || plume_constraint_accept(c, id)) break;
        }
        step_ms = k ? (plume_now() - t1) * 1e3 / k : -1;
    }
    if (rc) {
        for (char *q = err; q && *q; q++)
            if (*q == '\n' || *q == '\t') *q = ' ';
    }
    printf("%s\t%s\t%.3f\t%.4f\t%s\n", path, rc ? "refused" : "ok", ms, step_ms, rc && err ? err : "");
    fflush(stdout);
    free(err);
    plume_constraint_free(c);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_schema TOKENIZER.bin [--steps N] FILE...\n");
        return 2;
    }
    plume_tokenizer *tok = NULL;
    plume_vocab *v = NULL;
    char *err = NULL;
    if (plume_tokenizer_open(&tok, argv[1], &err) || plume_vocab_new(&v, tok, &err)) {
        fprintf(stderr, "bench_schema: %s\n", err);
        free(err);
        return 1;
    }
    int32_t V = plume_tokenizer_n_vocab(tok);
    uint32_t *bits = malloc((size_t)((V + 31) / 32) * sizeof *bits);
    int steps = 0, i = 2;
    if (i + 1 < argc && !strcmp(argv[i], "--steps")) { steps = atoi(argv[i + 1]); i += 2; }
    for (; i < argc && bits; i++) bench_one(v, V, bits, argv[i], steps);
    free(bits);
    plume_vocab_free(v);
    plume_tokenizer_free(tok);
    return 0;
}
