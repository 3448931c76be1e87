/* fuzz_bundle.c -- plume_model_open on a whole bundle ($PLUME_FUZZ_BUNDLE, a synth'd tiny
 * model) with one file replaced by the input: data[0] % 4 == 0, model_config.json is the
 * rest; 1..3, chunk_N.safetensors gets the rest as its JSON header, followed by the
 * original chunk's tensor bytes. A bundle that opens is stepped once. */
#include <sys/stat.h>

#include "fuzz.h"

static const char *const targets[4] = {"model_config.json", "chunk_1.safetensors", "chunk_2.safetensors",
                                       "chunk_3.safetensors"};
static char *orig[4];    /* the fixture's bytes of each target */
static size_t orig_n[4];
static char dir[600];    /* the scratch bundle: symlinks, and copies of the targets */

/* Build the scratch bundle: a symlink to every fixture file, a copy of each target. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *src = fuzz_fixture("PLUME_FUZZ_BUNDLE");
    snprintf(dir, sizeof dir, "%s", fuzz_path(0, "bundle"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && for f in '%s'/*; do ln -s \"$(realpath \"$f\")\" '%s'/; done",
             dir, dir, src, dir);
    if (system(cmd) != 0) { fprintf(stderr, "fuzz: cannot build %s\n", dir); exit(2); }
    for (int i = 0; i < 4; i++) {
        char *p = plume_path_join(src, targets[i]), *q = plume_path_join(dir, targets[i]), *err = NULL;
        if (!p || !q || plume_read_file(p, &orig[i], &orig_n[i], &err)) { fprintf(stderr, "fuzz: %s\n", err ? err : "?"); exit(2); }
        unlink(q);
        if (fuzz_write(q, orig[i], orig_n[i])) exit(2);
        free(p);
        free(q);
    }
    return 0;
}

/* Write target i of the scratch bundle from the input (or restore it when data is NULL). */
static void put_target(int i, const uint8_t *data, size_t size) {
    char *q = plume_path_join(dir, targets[i]);
    if (!q) abort();
    if (!data) fuzz_write(q, orig[i], orig_n[i]);
    else if (i == 0) fuzz_write(q, data, size);
    else { /* new header, then the original tensor bytes */
        uint64_t hl = orig_n[i] >= 8 ? plume_rd_u64le((const uint8_t *)orig[i]) : 0;
        size_t tail = 8 + hl <= orig_n[i] ? orig_n[i] - 8 - (size_t)hl : 0;
        uint8_t *b = malloc(8 + size + tail);
        if (!b) abort();
        plume_wr_u64le(b, size);
        memcpy(b + 8, data, size);
        memcpy(b + 8 + size, orig[i] + orig_n[i] - tail, tail);
        fuzz_write(q, b, 8 + size + tail);
        free(b);
    }
    free(q);
}

/* Open the bundle with one target fuzzed; step a session of an opened model once. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int i = data[0] % 4;
    put_target(i, data + 1, size - 1);
    plume_model_params mp = plume_model_default_params();
    mp.n_threads = 1;
    mp.isa = "scalar";
    plume_model *m = NULL;
    char *err = NULL;
    if (plume_model_open(&m, dir, &mp, &err) == 0) {
        plume_session_params sp = plume_session_default_params();
        sp.n_ctx = 8;
        plume_session *s = NULL;
        int32_t ids[2] = {2, 3 % plume_model_n_vocab(m)};
        if (plume_session_new(&s, m, &sp, &err) == 0) {
            float *lg = malloc((size_t)plume_model_n_vocab(m) * sizeof *lg);
            if (lg && plume_session_feed(s, ids, 2, lg, 0, &err) != 0) abort();
            free(lg);
        }
        plume_session_free(s);
        plume_model_free(m);
    } else if (!err) {
        abort();
    }
    fuzz_note(err);
    free(err);
    put_target(i, NULL, 0);
    return 0;
}
