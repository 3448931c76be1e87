/* test_synth.c -- `plume synth`: deterministic for a seed, the real HF layout, and the same
 * bundle whether written directly or through a checkpoint and `plume convert`. */
#include <math.h>

#include "npy.h"
#include "safetensors.h"
#include "t.h"

static char *tmp;

/* Whether two files have the same bytes. */
static int same_file(const char *a, const char *b) {
    char out[256];
    return t_sh(out, sizeof out, "cmp -s '%s' '%s'", a, b) == 0;
}

static void test_deterministic_for_a_seed(void) {
    char out[4096];
    int st = t_sh(out, sizeof out, "%s/plume synth --config tiny --seed 7 --hf %s/a && %s/plume synth --config tiny "
                  "--seed 7 --hf %s/b && %s/plume synth --config tiny --seed 8 --hf %s/c",
                  t_build(), tmp, t_build(), tmp, t_build(), tmp);
    CHECK(st == 0, "synth failed: %s", out);
    const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 4; i++) {
        char a[600], b[600], c[600];
        snprintf(a, sizeof a, "%s/a/%s", tmp, files[i]);
        snprintf(b, sizeof b, "%s/b/%s", tmp, files[i]);
        snprintf(c, sizeof c, "%s/c/%s", tmp, files[i]);
        CHECK(same_file(a, b), "%s differs between two runs with one seed", files[i]);
        if (i >= 2) CHECK(!same_file(a, c), "%s is the same for seeds 7 and 8", files[i]);
    }
}

static void test_real_layout(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/a/model-00001-of-00002.safetensors", tmp);
    st_file f1, f2;
    char *err = NULL;
    CHECK(st_open(&f1, path, &err) == 0, "open shard 1: %s", err ? err : "");
    snprintf(path, sizeof path, "%s/a/model-00002-of-00002.safetensors", tmp);
    CHECK(st_open(&f2, path, &err) == 0, "open shard 2: %s", err ? err : "");
    if (err) return;
    const st_tensor *e = st_find(&f1, "model.language_model.embed_tokens.weight");
    CHECK(e && e->dtype == ST_BF16 && e->shape[0] == 512 && e->shape[1] == 64, "embed_tokens");
    /* the unused tensors a real checkpoint carries: K/V of KV-shared layers, the towers */
    CHECK(st_find(&f1, "model.language_model.layers.7.self_attn.k_proj.weight") ||
              st_find(&f2, "model.language_model.layers.7.self_attn.k_proj.weight"),
          "k_proj of a KV-shared layer");
    CHECK(st_find(&f2, "model.vision_tower.patch_embedder.input_proj.weight"), "vision tower");
    CHECK(!st_find(&f1, "lm_head.weight") && !st_find(&f2, "lm_head.weight"), "tied head must be absent");
    st_close(&f1);
    st_close(&f2);
}

static void test_bundle_direct_equals_convert(void) {
    char out[4096];
    int st = t_sh(out, sizeof out, "%s/plume convert %s/a %s/conv --weights q4 --quiet && %s/plume synth --config tiny "
                  "--seed 7 --bundle %s/direct --weights q4",
                  t_build(), tmp, tmp, t_build(), tmp);
    CHECK(st == 0, "failed: %s", out);
    const char *files[] = {"chunk_1.safetensors", "chunk_2.safetensors", "chunk_3.safetensors", "embed_tokens_q8.bin",
                           "embed_tokens_per_layer_q8.bin", "per_layer_projection.bin", "model_config.json"};
    for (int i = 0; i < 7; i++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/conv/%s", tmp, files[i]);
        snprintf(b, sizeof b, "%s/direct/%s", tmp, files[i]);
        CHECK(same_file(a, b), "%s differs between synth --bundle and synth --hf + convert", files[i]);
    }
}

static void test_synth_model_runs(void) {
    char out[4096], npy[600];
    snprintf(npy, sizeof npy, "%s/l.npy", tmp);
    int st = t_sh(out, sizeof out, "%s/plume logits -m %s/direct --ids 2,100,200,300,7,8,9,10,11,12 -o %s", t_build(), tmp, npy);
    CHECK(st == 0, "logits: %s", out);
    plume_map m;
    npy_view v;
    char *err = NULL;
    CHECK(npy_open(npy, &m, &v, &err) == 0, "npy");
    if (err) return;
    float *f = malloc((size_t)v.count * 4);
    npy_to_f32(&v, f);
    int finite = 1;
    double ss = 0;
    for (int64_t i = 0; i < v.count; i++) {
        finite &= isfinite(f[i]) != 0;
        ss += (double)f[i] * f[i];
    }
    CHECK(finite && ss > 0 && v.count == 10 * 512, "logits must be finite and non-zero");
    free(f);
    plume_map_free(&m);
}

/* A checkpoint in one model.safetensors (no index) converts to the same bundle. */
static void test_single_file_checkpoint(void) {
    char out[4096];
    int st = t_sh(out, sizeof out, "%s/plume synth --config tiny --seed 7 --shards 1 --hf %s/one && (cd %s/one && "
                  "mv model-00001-of-00001.safetensors model.safetensors && rm model.safetensors.index.json) && "
                  "%s/plume convert %s/one %s/one-b --weights q4 --quiet",
                  t_build(), tmp, tmp, t_build(), tmp, tmp);
    CHECK(st == 0, "single file: %s", out);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/one-b/chunk_2.safetensors", tmp);
    snprintf(b, sizeof b, "%s/conv/chunk_2.safetensors", tmp);
    CHECK(same_file(a, b), "the single-file checkpoint converts differently from the sharded one");
}

int main(void) {
    tmp = t_tmpdir("synth");
    RUN(test_deterministic_for_a_seed);
    RUN(test_real_layout);
    RUN(test_bundle_direct_equals_convert);
    RUN(test_synth_model_runs);
    RUN(test_single_file_checkpoint);
    char out[256];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
