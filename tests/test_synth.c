/* test_synth.c -- `plume synth`: deterministic for a seed, the real HF layout, and the same
 * bundle whether written directly or through a checkpoint and `plume convert`; the built-in
 * full-size configs (e2b, e4b) read as the models they stand for. */
#include <cjson/cJSON.h>
#include <math.h>

#include "config.h"
#include "npy.h"
#include "safetensors.h"
#include "synth_configs.h"
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

/* The built-in configs read as E2B and E4B (shared/spec/gemma4-multimodal.md section 4): the
 * shapes, the KV sources of the shared layers, the MLP widths, and the chunk split the seed
 * uses (section 4.3), derived from the config rather than written down anywhere. */
static void test_full_size_configs(void) {
    plume_config c;
    char *err = NULL;
    CHECK(plume_config_from_hf_text(&c, synth_config_e2b, "e2b", &err) == 0, "e2b: %s", err ? err : "");
    CHECK(c.D == 1536 && c.L == 35 && c.Hkv == 1 && c.first_shared == 15, "e2b shape");
    CHECK(c.chunk[1] == 8 && c.chunk[2] == 25 && c.chunk[3] == 35, "e2b chunks [0,%d) [%d,%d) [%d,%d)", c.chunk[1],
          c.chunk[1], c.chunk[2], c.chunk[2], c.chunk[3]);
    CHECK(c.kv_src[15] == 13 && c.kv_src[19] == 14 && c.kv_src[34] == 14 && c.I[14] == 6144 && c.I[15] == 12288,
          "e2b: KV sources 13/14, double-wide MLP from layer 15");
    CHECK(plume_config_from_hf_text(&c, synth_config_e4b, "e4b", &err) == 0, "e4b: %s", err ? err : "");
    CHECK(c.D == 2560 && c.L == 42 && c.H == 8 && c.Hkv == 2 && c.first_shared == 24 && c.V == 262144 && c.Dp == 256,
          "e4b shape");
    CHECK(c.chunk[1] == 12 && c.chunk[2] == 33 && c.chunk[3] == 42, "e4b chunks [0,%d) [%d,%d) [%d,%d)", c.chunk[1],
          c.chunk[1], c.chunk[2], c.chunk[2], c.chunk[3]);
    int ok = 1;
    for (int32_t l = 0; l < c.L; l++) {
        ok &= c.is_full[l] == (l % 6 == 5) && c.I[l] == 10240 && c.hd[l] == (l % 6 == 5 ? 512 : 256);
        ok &= c.kv_src[l] == (l < 24 ? l : c.is_full[l] ? 23 : 22);
    }
    CHECK(ok, "e4b: full attention every 6th layer, MLP 10240 everywhere, layers 24-41 read 22 (sliding) / 23 (full)");
    /* the towers' configs stay in config.json (every bundle keeps it in hf_model/) */
    cJSON *root = cJSON_Parse(synth_config_e4b);
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(root, "audio_config");
    const cJSON *vh = cJSON_GetObjectItemCaseSensitive(vc, "hidden_size"), *ao = cJSON_GetObjectItemCaseSensitive(ac, "output_proj_dims");
    CHECK(cJSON_IsNumber(vh) && vh->valueint == 768 && cJSON_IsNumber(ao) && ao->valueint == 1536, "e4b tower configs");
    cJSON_Delete(root);
    /* the tiny golden models: tiny-a's 10 layers own [0,5), tiny-e4b's 12 own [0,6) */
    CHECK(plume_config_from_hf_text(&c, synth_config_tiny, "tiny", &err) == 0 && c.chunk[1] == 3 && c.chunk[2] == 7,
          "tiny chunks [0,%d) [%d,%d)", c.chunk[1], c.chunk[1], c.chunk[2]);
    free(err);
}

/* The embedders of a synthetic checkpoint project from the widths of its config's towers. */
static void test_tower_widths_followed(void) {
    char out[8192], cfg[600];
    snprintf(cfg, sizeof cfg, "%s/towers.json", tmp);
    int st = t_sh(out, sizeof out, "%s/plume synth --config tiny --hf %s/t0 --shards 1 && sed "
                  "-e 's/\\(\"vision_config\"[^}]*\"hidden_size\"\\): *8/\\1: 24/' "
                  "-e 's/\"output_proj_dims\": *8/\"output_proj_dims\": 40/' %s/t0/config.json > %s && "
                  "%s/plume synth --config %s --hf %s/t1 --shards 1",
                  t_build(), tmp, tmp, cfg, t_build(), cfg, tmp);
    CHECK(st == 0, "synth: %s", out);
    char path[700];
    snprintf(path, sizeof path, "%s/t1/model-00001-of-00001.safetensors", tmp);
    st_file f;
    char *err = NULL;
    if (st_open(&f, path, &err)) { CHECK(0, "%s", err); free(err); return; }
    const st_tensor *v = st_find(&f, "model.embed_vision.embedding_projection.weight");
    const st_tensor *a = st_find(&f, "model.embed_audio.embedding_projection.weight");
    CHECK(v && v->shape[0] == 64 && v->shape[1] == 24, "embed_vision [64, 24]");
    CHECK(a && a->shape[0] == 64 && a->shape[1] == 40, "embed_audio [64, 40]");
    st_close(&f);
}

int main(void) {
    tmp = t_tmpdir("synth");
    RUN(test_deterministic_for_a_seed);
    RUN(test_real_layout);
    RUN(test_bundle_direct_equals_convert);
    RUN(test_synth_model_runs);
    RUN(test_single_file_checkpoint);
    RUN(test_full_size_configs);
    RUN(test_tower_widths_followed);
    char out[256];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
