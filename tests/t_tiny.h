/* t_tiny.h -- fixtures of the golden tiny models shared by the tests that step them: their
 * four bundles converted by the CLI, and their golden token ids. The models are the folders of
 * tests/data: "tiny-a" (E2B's structure) and "tiny-e4b" (E4B's: 2 KV heads, full attention
 * every 6th layer, KV shared from layers 4 and 5, no double-wide MLP); both have a vocabulary
 * of 512, a sliding window of 8 and 48 golden ids; and .npy fixtures as floats. */
#ifndef PLUME_T_TINY_H
#define PLUME_T_TINY_H

#include "npy.h"
#include "plume.h"
#include "t.h"

/* The weight types of t_tiny_bundles, in order. */
static const char *t_tiny_wnames[4] = {"f32", "bf16", "q8", "q4"};

/* Open bundle dir with kernels isa (NULL: the best), threads and exact; NULL (printed) on error. */
static plume_model *t_tiny_open(const char *dir, const char *isa, int32_t threads, int32_t exact) {
    plume_model_params p = plume_model_default_params();
    p.isa = isa;
    p.n_threads = threads;
    p.exact = exact;
    plume_model *m = NULL;
    char *err = NULL;
    if (plume_model_open(&m, dir, &p, &err)) { printf("  %s\n", err); free(err); }
    return m;
}

/* A session of model with context n_ctx, steps of n_batch rows, a ring of n_rewind positions
 * and snapshots every snap; NULL on error (printed). */
static plume_session *t_tiny_session(plume_model *model, int32_t n_ctx, int32_t n_batch, int32_t n_rewind,
                                     int32_t snap) {
    plume_session_params p = plume_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_rewind = n_rewind;
    p.snapshot_every = snap;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_new(&s, model, &p, &err)) printf("  %s\n", err);
    free(err);
    return s;
}

/* Logits [n, V] of bundle dir for ids, fed all at once with exact activations, by kernels isa
 * (NULL: the best); *count = n * V. NULL (printed) on error. */
static float *t_tiny_logits(const char *dir, const char *isa, const int32_t *ids, int32_t n, int64_t *count) {
    plume_model *m = t_tiny_open(dir, isa, 1, 1);
    plume_session *s = m ? t_tiny_session(m, 64, n, 0, 0) : NULL;
    int64_t V = m ? plume_model_n_vocab(m) : 0;
    float *lg = s ? malloc((size_t)(n * V) * sizeof *lg) : NULL;
    char *err = NULL;
    if (lg && plume_session_feed(s, ids, n, lg, 1, &err)) {
        printf("  %s\n", err);
        free(lg);
        lg = NULL;
    }
    free(err);
    *count = n * V;
    plume_session_free(s);
    plume_model_free(m);
    return lg;
}

/* Convert a tiny model's checkpoint into dir/MODEL-f32, -bf16, -q8 and -q4 (paths into out).
 * q4 with the absmax / 7 step rule: the one golden logits_w4 defines. */
static void t_tiny_bundles(const char *model, const char *dir, char out[4][600]) {
    char log[4096];
    for (int w = 0; w < 4; w++) {
        snprintf(out[w], 600, "%s/%s-%s", dir, model, t_tiny_wnames[w]);
        if (t_sh(log, sizeof log, "%s/plume convert %s/%s/hf %s --weights %s --quiet%s", t_build(), t_data(), model,
                 out[w], t_tiny_wnames[w], w == 3 ? " --q4-scale absmax" : ""))
            printf("  setup: %s\n", log);
    }
}

/* A tiny model's golden ids (ids.npy), at most max of them into ids; how many, or 0. */
static int64_t t_tiny_ids(const char *model, int32_t *ids, int64_t max) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s/ids.npy", t_data(), model);
    plume_map mp;
    npy_view v;
    char *err = NULL;
    int64_t n = 0;
    if (npy_open(path, &mp, &v, &err) == 0) {
        float *f = malloc((size_t)(v.count > 0 ? v.count : 1) * sizeof *f);
        if (f) npy_to_f32(&v, f);
        for (; f && n < v.count && n < max; n++) ids[n] = (int32_t)f[n];
        free(f);
        plume_map_free(&mp);
    }
    free(err);
    return n;
}

/* An .npy of tests/data (rel) as floats (malloc'd), with its element count and its first two
 * dimensions (1 for a missing one); either may be NULL. NULL (printed) on failure. */
static float *t_npy_floats(const char *rel, int64_t *count, int64_t *shape) {
    char *p = plume_path_join(t_data(), rel), *err = NULL;
    plume_map m;
    npy_view v;
    float *out = NULL;
    if (!p || npy_open(p, &m, &v, &err)) {
        printf("  %s\n", err ? err : "out of memory");
    } else {
        out = malloc((size_t)(v.count ? v.count : 1) * sizeof(float));
        if (out) npy_to_f32(&v, out);
        if (count) *count = v.count;
        if (shape) shape[0] = v.ndim > 0 ? v.shape[0] : 1, shape[1] = v.ndim > 1 ? v.shape[1] : 1;
        plume_map_free(&m);
    }
    free(p), free(err);
    return out;
}

#endif
