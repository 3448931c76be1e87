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
 * With --answers OUT.jsonl, each schema compiled also writes one answer: a random walk over
 * the allowed ids (uniform, as random logits would be) with a bias that lets a value finish:
 * half the steps pick among the allowed ids whose text holds '"', '}' or ']' (a string or a
 * container closing), and the end of turn is taken with probability 1/2 where allowed. A walk
 * that has not ended after 600 ids writes nothing. Each finished answer is a line
 * {"label": FILE, "schema": <the file's JSON>, "answer": TEXT} for bench/validate_answers.mjs
 * (ajv, by the schema's draft).
 *
 *   make build/bench/bench_schema && build/bench/bench_schema tests/vocab/tokenizer.bin [--steps N] [--answers OUT] FILE...
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

/* The walk of --answers: the tokenizer, which ids close something, the end-of-turn id. */
typedef struct {
    const plume_tokenizer *tok;
    uint8_t *closer; /* [V] the id's text holds '"', '}' or ']' */
    int32_t eot;     /* <turn|> */
    FILE *out;
    int32_t *ids;    /* [WALK_MAX] */
    int32_t *pool;   /* [V] candidates of one step */
} walker;

#define WALK_MAX 600

/* Write s as a JSON string (quotes and escapes). */
static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* One answer of a compiled constraint by the biased random walk, written when it ends. */
static void walk_answer(walker *w, plume_constraint *c, int32_t V, uint32_t *bits, const char *path, const char *schema,
                        uint64_t *r) {
    plume_constraint_reset(c);
    int32_t n = 0;
    for (; n < WALK_MAX; n++) {
        memset(bits, 0, (size_t)((V + 31) / 32) * sizeof *bits);
        if (plume_constraint_mask(c, bits) <= 0) return;
        *r = *r * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t x = *r >> 33;
        int32_t id = -1;
        if (w->eot >= 0 && (bits[w->eot >> 5] >> (w->eot & 31) & 1) && (x & 1)) id = w->eot;
        for (int pass = (x >> 1 & 1) ? 0 : 1; id < 0 && pass < 2; pass++) { /* closers first on half the steps */
            int32_t m = 0;
            for (int32_t k = 0; k < (V + 31) / 32; k++)
                for (uint32_t b = bits[k]; b; b &= b - 1) {
                    int32_t t = k * 32 + __builtin_ctz(b);
                    if (pass || w->closer[t]) w->pool[m++] = t;
                }
            if (m) id = w->pool[(x >> 2) % (uint64_t)m];
        }
        if (id < 0 || plume_constraint_accept(c, id)) return;
        w->ids[n] = id;
        if (id == w->eot) break;
    }
    if (n == WALK_MAX || plume_constraint_status(c) != PLUME_CONSTRAINT_DONE) return;
    int64_t need = plume_detokenize(w->tok, w->ids, n, 1, NULL, 0);
    char *text = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (!text) return;
    plume_detokenize(w->tok, w->ids, n, 1, text, (size_t)need + 1);
    fputs("{\"label\": ", w->out);
    put_json_string(w->out, path);
    fputs(", \"schema\": ", w->out);
    for (const char *p = schema; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, w->out); /* JSON: whitespace only */
    fputs(", \"answer\": ", w->out);
    put_json_string(w->out, text);
    fputs("}\n", w->out);
    fflush(w->out);
    free(text);
}

/* One schema file: compile, time, optionally step, optionally write an answer. */
static void bench_one(const plume_vocab *v, int32_t V, uint32_t *bits, const char *path, int steps, walker *w) {
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
    if (!rc && w && w->out) {
        uint64_t r = 7;
        walk_answer(w, c, V, bits, path, text, &r);
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
        fprintf(stderr, "usage: bench_schema TOKENIZER.bin [--steps N] [--answers OUT.jsonl] FILE...\n");
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
    walker w = {tok, NULL, -1, NULL, NULL, NULL};
    for (;;) {
        if (i + 1 < argc && !strcmp(argv[i], "--steps")) { steps = atoi(argv[i + 1]); i += 2; }
        else if (i + 1 < argc && !strcmp(argv[i], "--answers")) {
            w.out = fopen(argv[i + 1], "a");
            if (!w.out) { fprintf(stderr, "bench_schema: cannot write %s\n", argv[i + 1]); return 1; }
            i += 2;
        } else break;
    }
    if (w.out) { /* which ids close a string or a container */
        w.closer = calloc((size_t)V, 1);
        w.ids = malloc(WALK_MAX * sizeof *w.ids);
        w.pool = malloc((size_t)V * sizeof *w.pool);
        w.eot = plume_token_find(tok, "<turn|>");
        char piece[256];
        for (int32_t id = 0; w.closer && id < V; id++) {
            if (plume_token_is_special(tok, id)) continue;
            int64_t n = plume_detokenize(tok, &id, 1, 1, piece, sizeof piece);
            w.closer[id] = n > 0 && n < (int64_t)sizeof piece && strpbrk(piece, "\"}]") != NULL;
        }
        if (!w.closer || !w.ids || !w.pool) { fprintf(stderr, "bench_schema: out of memory\n"); return 1; }
    }
    for (; i < argc && bits; i++) bench_one(v, V, bits, argv[i], steps, &w);
    if (w.out) fclose(w.out);
    free(w.closer);
    free(w.ids);
    free(w.pool);
    free(bits);
    plume_vocab_free(v);
    plume_tokenizer_free(tok);
    return 0;
}
