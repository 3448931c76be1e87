/* bench_tokenizer.c -- how fast the tokenizer opens, encodes and decodes. Not a test:
 * nothing here can fail (docs/TOKENIZER.md quotes its output).
 *
 * Prints the time to open tokenizer.bin (the first open of the process, then the median of
 * OPEN_RUNS more; each maps the file and validates every byte), optionally the time to
 * parse a tokenizer.json, then for each
 * UTF-8 text file the encode and decode throughput (best of RUNS, one call over the whole
 * file, in MB of text per second).
 *
 *   make && cc -O2 -Iinclude -Isrc bench/bench_tokenizer.c build/libplume.a -lcjson -lm \
 *       -lpthread -o build/bench_tokenizer &&
 *   build/bench_tokenizer tests/vocab/tokenizer.bin [--json tests/vocab/tokenizer.json] FILE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum {
    OPEN_RUNS = 50, /* opens of tokenizer.bin timed */
    RUNS = 3        /* timed encodes / decodes per file, best reported */
};

/* qsort order of doubles. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Time opening tokenizer.bin; the last one stays open in *out. */
static int bench_open(const char *path, plume_tokenizer **out) {
    double t[OPEN_RUNS];
    char *err = NULL;
    for (int i = 0; i < OPEN_RUNS; i++) {
        double t0 = plume_now();
        if (plume_tokenizer_open(out, path, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            free(err);
            return 1;
        }
        t[i] = plume_now() - t0;
        if (i + 1 < OPEN_RUNS) plume_tokenizer_free(*out);
    }
    double first = t[0];
    qsort(t, OPEN_RUNS, sizeof *t, cmp_double);
    printf("open %s: first %.2f ms, then median %.2f ms of %d\n", path, first * 1e3,
           t[OPEN_RUNS / 2] * 1e3, OPEN_RUNS);
    return 0;
}

/* Time encoding and decoding one whole file. */
static void bench_file(const plume_tokenizer *tok, const char *path) {
    char *text = NULL, *err = NULL;
    size_t len = 0;
    if (plume_read_file(path, &text, &len, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        free(err);
        return;
    }
    int32_t n = plume_tokenize(tok, text, len, NULL, 0);
    int32_t *ids = n > 0 ? malloc(sizeof *ids * (size_t)n) : NULL;
    if (n <= 0 || !ids) {
        printf("%s: cannot encode (%d)\n", path, n);
        free(text);
        free(ids);
        return;
    }
    double enc = 1e30, dec = 1e30;
    char *back = malloc(len + 1);
    int64_t blen = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = plume_now();
        plume_tokenize(tok, text, len, ids, n);
        double t1 = plume_now();
        blen = plume_detokenize(tok, ids, n, 0, back, len + 1);
        double t2 = plume_now();
        if (t1 - t0 < enc) enc = t1 - t0;
        if (t2 - t1 < dec) dec = t2 - t1;
    }
    printf("%s: %.2f MB, %d tokens: encode %.1f MB/s (%.2f M tokens/s), decode %.0f MB/s%s\n",
           path, len / 1e6, n, len / enc / 1e6, n / enc / 1e6, len / dec / 1e6,
           blen == (int64_t)len && !memcmp(back, text, len) ? "" : " (round trip differs)");
    free(back);
    free(ids);
    free(text);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenizer tokenizer.bin [--json tokenizer.json] [FILE...]\n");
        return 2;
    }
    plume_tokenizer *tok = NULL;
    if (bench_open(argv[1], &tok)) return 1;
    int i = 2;
    if (i + 1 < argc && !strcmp(argv[i], "--json")) {
        plume_tokenizer *tj = NULL;
        char *err = NULL;
        double t0 = plume_now();
        if (plume_tokenizer_open_json(&tj, argv[i + 1], &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            free(err);
        } else {
            printf("open_json %s: %.2f s\n", argv[i + 1], plume_now() - t0);
        }
        plume_tokenizer_free(tj);
        i += 2;
    }
    for (; i < argc; i++) bench_file(tok, argv[i]);
    plume_tokenizer_free(tok);
    return 0;
}
