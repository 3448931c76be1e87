/* fuzz.h -- what the harnesses of fuzz/ share: a scratch file per process (the parsers under
 * test read paths), the fixtures a harness needs (a synth'd tiny bundle, a tokenizer), and a
 * byte reader that splits one input into fields.
 *
 * Every harness defines LLVMFuzzerTestOneInput and is built two ways: with clang and
 * -fsanitize=fuzzer,address,undefined (make fuzz), and with any compiler against
 * fuzz/replay.c, which runs it over files (make test replays fuzz/regressions/ and the seed
 * corpora that way). A harness aborts only on a broken invariant; a parser's error is a
 * normal outcome. */
#ifndef PLUME_FUZZ_H
#define PLUME_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A path unique to this process under $TMPDIR (or /tmp) ending in name; static storage,
 * one per name slot (0-3). */
static const char *fuzz_path(int slot, const char *name) {
    static char paths[4][512];
    if (!paths[slot][0]) {
        const char *t = getenv("TMPDIR");
        snprintf(paths[slot], sizeof paths[slot], "%s/plume-fuzz-%ld-%d-%s", t && *t ? t : "/tmp", (long)getpid(),
                 slot, name);
    }
    return paths[slot];
}

/* Write data[0..size) to path (truncating); 0 on success. */
static int fuzz_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = size == 0 || fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* A fixture directory: $name (an environment variable) or die with a message saying so (the
 * Makefile sets them; a harness cannot run without its fixture). */
static const char *fuzz_fixture(const char *env) {
    const char *d = getenv(env);
    if (!d || !*d) {
        fprintf(stderr, "fuzz: set %s (make fuzz does)\n", env);
        exit(2);
    }
    return d;
}

/* Print a parser's verdict on stderr when $PLUME_FUZZ_VERBOSE is set (to see what seeds
 * reach); msg NULL means accepted. */
static void fuzz_note(const char *msg) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("PLUME_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "  %s\n", msg ? msg : "accepted");
}

/* A cursor that takes fields out of the input. */
typedef struct { const uint8_t *p; size_t n; } fuzz_in;

/* One byte (0 when the input is used up). */
static uint8_t fuzz_byte(fuzz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

/* The next field: the bytes up to a 0xFF separator (or the end), as a malloc'd C string
 * (NUL bytes inside are kept; the C API then sees a shorter string). *len gets its length. */
static char *fuzz_field(fuzz_in *in, size_t *len) {
    size_t k = 0;
    while (k < in->n && in->p[k] != 0xff) k++;
    char *s = malloc(k + 1);
    if (!s) abort();
    memcpy(s, in->p, k);
    s[k] = 0;
    if (len) *len = k;
    in->p += k < in->n ? k + 1 : k;
    in->n -= k < in->n ? k + 1 : k;
    return s;
}

#endif
