/* synth.c -- deterministic random-weight Gemma 4 checkpoints in the real Hugging Face
 * layout (bf16 safetensors, sharded, with the tensors the real one carries), or a bundle
 * written directly through the converter (no 10 GB detour): a tensor source (source.h) and
 * the public plume_synth_checkpoint() / plume_synth_bundle() that `plume synth` calls.
 *
 * Every element is a pure function of (seed, tensor name, index): a counter-based
 * generator, so a tensor can be read in any order and both outputs hold the same numbers. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "convert.h"
#include "encoders/encoders.h"
#include "plume.h"
#include "safetensors.h"
#include "synth_configs.h"

#define SYNTH_MAX_TENSORS 4096

/* One tensor of the synthetic checkpoint. */
typedef struct {
    char name[160];
    int32_t ndim;      /* 0 (a scalar) .. 4 */
    int64_t shape[4];
    float lo, hi;   /* uniform range of its values */
    uint64_t key;   /* hash of (seed, name) */
} synth_tensor;

typedef struct {
    plume_config cfg;
    char *config_json;
    int32_t vision_out, audio_out; /* the towers' widths the embedders project from: vision
                                      hidden_size, audio output_proj_dims (8 without them) */
    int32_t n;
    synth_tensor t[SYNTH_MAX_TENSORS];
} synth_ctx;

/* FNV-1a of a string, mixed with the seed. */
static uint64_t name_key(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Add a tensor of up to 4 dimensions with a uniform value range. */
static void add3(synth_ctx *s, uint64_t seed, const char *name, int32_t ndim, const int64_t *shape, float lo, float hi) {
    if (s->n >= SYNTH_MAX_TENSORS) return;
    synth_tensor *t = &s->t[s->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int32_t i = 0; i < 4; i++) t->shape[i] = i < ndim ? shape[i] : 0;
    t->lo = lo;
    t->hi = hi;
    t->key = name_key(name, seed);
}

/* Add a tensor with a uniform value range: [r] (ndim 1) or [r, c]. */
static void add(synth_ctx *s, uint64_t seed, const char *name, int32_t ndim, int64_t r, int64_t c, float lo, float hi) {
    const int64_t shape[2] = {r, c};
    add3(s, seed, name, ndim, shape, lo, hi);
}

/* Elements of a tensor. */
static int64_t synth_count(const synth_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* A real vision tower for the config's vision_config (the tower list of encoders/encoders.h):
 * linears with standard deviation 1/sqrt(in), norms around 1 (q/k norms 0.3-0.5, as the text
 * layers), position tables small, clip bounds +-8..12 (loose enough that little clips). */
static void add_vision(synth_ctx *s, uint64_t seed) {
    const int32_t n = enc_vision_tensor_list(&s->cfg.vis, s->cfg.D, NULL, 0);
    enc_tensor_spec *list = malloc(sizeof *list * (size_t)n);
    if (!list) return;
    enc_vision_tensor_list(&s->cfg.vis, s->cfg.D, list, n);
    for (int32_t i = 0; i < n; i++) {
        const enc_tensor_spec *t = &list[i];
        const char *leaf = strrchr(t->name, '.') + 1;
        float lo = 0.5f, hi = 1.5f;
        if (t->ndim == 0) { /* input_min, input_max, output_min, output_max */
            lo = 8.0f, hi = 12.0f;
            if (strstr(leaf, "min")) lo = -12.0f, hi = -8.0f;
        } else if (t->ndim == 2) {
            hi = sqrtf(3.0f / (float)t->shape[1]), lo = -hi;
        } else if (t->ndim == 3) {
            lo = -0.1f, hi = 0.1f;
        } else if (strstr(t->name, "q_norm") || strstr(t->name, "k_norm")) {
            lo = 0.3f, hi = 0.5f;
        }
        add3(s, seed, t->name, t->ndim, t->shape, lo, hi);
    }
    free(list);
}

/* A real audio tower for the config's audio_config (the list of encoders.h): weights with
 * standard deviation 1/sqrt(fan-in) (a convolution's fan-in is its taps times its input
 * channels), norms around 1, per_dim_scale near 0 (softplus 0.6-0.8, as initialized), the
 * output bias small, clip bounds +-8..12 (loose enough that little clips). */
static void add_audio(synth_ctx *s, uint64_t seed) {
    const int32_t n = enc_audio_tensor_list(&s->cfg.aud, s->cfg.D, NULL, 0);
    enc_tensor_spec *list = malloc(sizeof *list * (size_t)n);
    if (!list) return;
    enc_audio_tensor_list(&s->cfg.aud, s->cfg.D, list, n);
    for (int32_t i = 0; i < n; i++) {
        const enc_tensor_spec *t = &list[i];
        float lo = 0.5f, hi = 1.5f;
        int64_t fan_in = 1;
        for (int32_t d = 1; d < t->ndim; d++) fan_in *= t->shape[d];
        if (t->ndim == 0) { /* input_min, input_max, output_min, output_max */
            lo = 8.0f, hi = 12.0f;
            if (strstr(strrchr(t->name, '.'), "min")) lo = -12.0f, hi = -8.0f;
        } else if (t->ndim >= 2) {
            hi = sqrtf(3.0f / (float)fan_in), lo = -hi;
        } else if (strstr(t->name, "per_dim_scale")) {
            lo = -0.2f, hi = 0.2f;
        } else if (strstr(t->name, "output_proj.bias")) {
            lo = -0.1f, hi = 0.1f;
        }
        add3(s, seed, t->name, t->ndim, t->shape, lo, hi);
    }
    free(list);
}

/* A linear weight [out, in], uniform with standard deviation 1/sqrt(in). */
static void add_linear(synth_ctx *s, uint64_t seed, const char *name, int64_t out, int64_t in) {
    float a = sqrtf(3.0f / (float)in);
    add(s, seed, name, 2, out, in, -a, a);
}

/* The whole tensor list, in the order of the real checkpoint. */
static void build_list(synth_ctx *s, uint64_t seed) {
    const plume_config *c = &s->cfg;
    const char *p = "model.language_model.";
    char n[200];
#define NAME(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
    add(s, seed, NAME("%sembed_tokens.weight", p), 2, c->V, c->D, -1.0f, 1.0f);
    add(s, seed, NAME("%sembed_tokens_per_layer.weight", p), 2, c->V, (int64_t)c->L * c->Dp, -1.0f, 1.0f);
    add_linear(s, seed, NAME("%sper_layer_model_projection.weight", p), (int64_t)c->L * c->Dp, c->D);
    add(s, seed, NAME("%sper_layer_projection_norm.weight", p), 1, c->Dp, 0, 0.5f, 1.5f);
    add(s, seed, NAME("%snorm.weight", p), 1, c->D, 0, 2.0f, 6.0f);
    for (int32_t l = 0; l < c->L; l++) {
        int64_t hd = c->hd[l], I = c->I[l], D = c->D;
        add(s, seed, NAME("%slayers.%d.input_layernorm.weight", p, l), 1, D, 0, 0.5f, 1.5f);
        add_linear(s, seed, NAME("%slayers.%d.self_attn.q_proj.weight", p, l), c->H * hd, D);
        add(s, seed, NAME("%slayers.%d.self_attn.q_norm.weight", p, l), 1, hd, 0, 0.3f, 0.5f);
        add_linear(s, seed, NAME("%slayers.%d.self_attn.k_proj.weight", p, l), c->Hkv * hd, D);
        add_linear(s, seed, NAME("%slayers.%d.self_attn.v_proj.weight", p, l), c->Hkv * hd, D);
        add(s, seed, NAME("%slayers.%d.self_attn.k_norm.weight", p, l), 1, hd, 0, 0.3f, 0.5f);
        add_linear(s, seed, NAME("%slayers.%d.self_attn.o_proj.weight", p, l), D, c->H * hd);
        add(s, seed, NAME("%slayers.%d.post_attention_layernorm.weight", p, l), 1, D, 0, 0.5f, 1.5f);
        add(s, seed, NAME("%slayers.%d.pre_feedforward_layernorm.weight", p, l), 1, D, 0, 0.5f, 1.5f);
        add_linear(s, seed, NAME("%slayers.%d.mlp.gate_proj.weight", p, l), I, D);
        add_linear(s, seed, NAME("%slayers.%d.mlp.up_proj.weight", p, l), I, D);
        add_linear(s, seed, NAME("%slayers.%d.mlp.down_proj.weight", p, l), D, I);
        add(s, seed, NAME("%slayers.%d.post_feedforward_layernorm.weight", p, l), 1, D, 0, 0.5f, 1.5f);
        add_linear(s, seed, NAME("%slayers.%d.per_layer_input_gate.weight", p, l), c->Dp, D);
        add_linear(s, seed, NAME("%slayers.%d.per_layer_projection.weight", p, l), D, c->Dp);
        add(s, seed, NAME("%slayers.%d.post_per_layer_input_norm.weight", p, l), 1, D, 0, 0.5f, 1.5f);
        add(s, seed, NAME("%slayers.%d.layer_scalar", p, l), 1, 1, 0, 0.1f, 0.9f);
    }
    /* A config with a whole vision_config or audio_config (e2b) gets a real tower; others small
     * stand-ins that a text-only loader must skip (as the golden tiny-a carries). */
    if (s->cfg.has_vision) add_vision(s, seed);
    else {
        add(s, seed, "model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", 2, 8, 8, -0.1f, 0.1f);
        add(s, seed, "model.vision_tower.patch_embedder.input_proj.weight", 2, 8, 12, -0.1f, 0.1f);
    }
    if (s->cfg.has_audio) add_audio(s, seed);
    else add(s, seed, "model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight", 2, 32, 8, -0.1f, 0.1f);
    if (!s->cfg.has_vision) add(s, seed, "model.embed_vision.embedding_projection.weight", 2, c->D, s->vision_out, -0.1f, 0.1f);
    if (!s->cfg.has_audio) add(s, seed, "model.embed_audio.embedding_projection.weight", 2, c->D, s->audio_out, -0.1f, 0.1f);
#undef NAME
}

/* An integer member of config.json's object `tower` (vision_config, audio_config), or dflt. */
static int32_t tower_int(const char *config_json, const char *tower, const char *key, int32_t dflt) {
    cJSON *root = cJSON_Parse(config_json);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, tower), key);
    int32_t out = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 1 << 16 ? (int32_t)v->valuedouble : dflt;
    cJSON_Delete(root);
    return out;
}

/* The entry of a name, or NULL. */
static const synth_tensor *synth_find(const synth_ctx *s, const char *name) {
    for (int32_t i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

static int synth_shape(void *ctx, const char *name, int32_t *ndim, int64_t *shape) {
    const synth_tensor *t = synth_find(ctx, name);
    if (!t) return 1;
    *ndim = t->ndim;
    for (int32_t i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    return 0;
}

static const char *synth_name_at(void *ctx, int32_t i) {
    const synth_ctx *s = ctx;
    return i >= 0 && i < s->n ? s->t[i].name : NULL;
}

/* Element i of a tensor, rounded to bf16 as the checkpoint stores it. */
static float synth_value(const synth_tensor *t, uint64_t i) {
    uint64_t rng = t->key + i * 0x9e3779b97f4a7c15ull;
    float u = plume_rng_float(&rng);
    return plume_bf16_to_f32(plume_f32_to_bf16(t->lo + (t->hi - t->lo) * u));
}

static int synth_read(void *ctx, const char *name, int64_t r0, int64_t n, float *out, char **err) {
    const synth_tensor *t = synth_find(ctx, name);
    if (!t) return plume_fail(err, PLUME_EFORMAT, "synth: no tensor %s", name);
    int64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : synth_count(t); /* rows: the leading dims */
    for (int64_t i = 0; i < n * cols; i++) out[i] = synth_value(t, (uint64_t)(r0 * cols + i));
    return 0;
}

/* Set text_config's vocab sizes to V (for a small model with the real vocabulary). */
static int override_vocab(char **json, int32_t V, char **err) {
    cJSON *root = cJSON_Parse(*json);
    cJSON *t = root ? cJSON_GetObjectItemCaseSensitive(root, "text_config") : NULL;
    if (!t) t = root;
    if (!cJSON_IsObject(t)) {
        cJSON_Delete(root);
        return plume_fail(err, PLUME_EFORMAT, "synth: the config is not a JSON object");
    }
    cJSON_ReplaceItemInObject(t, "vocab_size", cJSON_CreateNumber(V));
    cJSON_ReplaceItemInObject(t, "vocab_size_per_layer_input", cJSON_CreateNumber(V));
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    if (!out) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    free(*json);
    *json = out;
    return 0;
}

int source_synth_open(conv_source *src, const char *config, uint64_t seed, int32_t vocab, char **err) {
    memset(src, 0, sizeof *src);
    synth_ctx *s = calloc(1, sizeof *s);
    if (!s) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = 0;
    if (!strcmp(config, "tiny")) s->config_json = strdup(synth_config_tiny);
    else if (!strcmp(config, "e2b")) s->config_json = strdup(synth_config_e2b);
    else if (!strcmp(config, "e4b")) s->config_json = strdup(synth_config_e4b);
    else rc = plume_read_file(config, &s->config_json, NULL, err);
    if (!rc && !s->config_json) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc && vocab > 0) rc = override_vocab(&s->config_json, vocab, err);
    if (!rc) rc = plume_config_from_hf_text(&s->cfg, s->config_json, config, err);
    cJSON *root = rc ? NULL : cJSON_Parse(s->config_json);
    const cJSON *vc = root ? cJSON_GetObjectItemCaseSensitive(root, "vision_config") : NULL;
    if (cJSON_GetObjectItemCaseSensitive(vc, "position_embedding_size")) /* whole, not a stub */
        rc = plume_config_vision_from_hf(&s->cfg, s->config_json, config, err);
    const cJSON *ac = root ? cJSON_GetObjectItemCaseSensitive(root, "audio_config") : NULL;
    if (!rc && cJSON_GetObjectItemCaseSensitive(ac, "subsampling_conv_channels")) /* whole, not a stub */
        rc = plume_config_audio_from_hf(&s->cfg, s->config_json, config, err);
    cJSON_Delete(root);
    if (rc) {
        free(s->config_json);
        free(s);
        return rc;
    }
    s->vision_out = tower_int(s->config_json, "vision_config", "hidden_size", 8);
    s->audio_out = tower_int(s->config_json, "audio_config", "output_proj_dims", 8);
    build_list(s, seed);
    src->ctx = s;
    src->config_json = s->config_json;
    src->shape = synth_shape;
    src->read = synth_read;
    src->name_at = synth_name_at;
    return 0;
}

void source_synth_close(conv_source *src) {
    synth_ctx *s = src->ctx;
    if (!s) return;
    free(s->config_json);
    free(s);
    src->ctx = NULL;
}

/* ---- writing the HF checkpoint --------------------------------------------------------- */

/* Bytes of a tensor in bf16. */
static uint64_t tensor_bytes(const synth_tensor *t) { return (uint64_t)synth_count(t) * 2; }

/* Stream tensors [a, b) into one shard. */
static int write_shard(synth_ctx *s, const char *path, int32_t a, int32_t b, char **err) {
    st_writer w;
    int rc = st_writer_init(&w, path, 1, err);
    if (!rc) rc = st_writer_meta(&w, "format", "pt", err);
    for (int32_t i = a; !rc && i < b; i++) rc = st_writer_add(&w, s->t[i].name, ST_BF16, s->t[i].ndim, s->t[i].shape, err);
    if (!rc) rc = st_writer_begin(&w, err);
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * 2);
    if (!buf && !rc) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int32_t i = a; !rc && i < b; i++) {
        uint64_t n = tensor_bytes(&s->t[i]) / 2;
        for (uint64_t o = 0; !rc && o < n; o += CHUNK) {
            uint64_t k = n - o < CHUNK ? n - o : CHUNK;
            for (uint64_t j = 0; j < k; j++) buf[j] = plume_f32_to_bf16(synth_value(&s->t[i], o + j));
            rc = st_writer_write(&w, buf, (size_t)k * 2, err);
        }
    }
    free(buf);
    if (!rc) rc = st_writer_finish(&w, err);
    st_writer_free(&w);
    return rc;
}

/* Write config.json, the shards and model.safetensors.index.json into dir. */
static int write_hf(synth_ctx *s, const char *dir, int32_t shards, const char *tokenizer, char **err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return plume_fail(err, PLUME_EIO, "%s: cannot create: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = plume_write_file(path, s->config_json, strlen(s->config_json), PLUME_WRITE_REPLACE, err);
    uint64_t total = 0;
    for (int32_t i = 0; i < s->n; i++) total += tensor_bytes(&s->t[i]);
    cJSON *index = cJSON_CreateObject(), *wm = NULL;
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    wm = cJSON_AddObjectToObject(index, "weight_map");
    int32_t a = 0;
    uint64_t acc = 0;
    for (int32_t k = 0; !rc && k < shards; k++) {
        int32_t b = a;
        uint64_t goal = total * (uint64_t)(k + 1) / (uint64_t)shards;
        while (b < s->n && (k == shards - 1 || acc + tensor_bytes(&s->t[b]) / 2 <= goal || b == a)) acc += tensor_bytes(&s->t[b++]);
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = write_shard(s, path, a, b, err);
        for (int32_t i = a; i < b; i++) cJSON_AddStringToObject(wm, s->t[i].name, name);
        a = b;
    }
    if (!rc) {
        char *js = cJSON_Print(index);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        rc = js ? plume_write_file(path, js, strlen(js), PLUME_WRITE_REPLACE, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
        free(js);
    }
    cJSON_Delete(index);
    for (int i = 0; !rc && tokenizer && i < 2; i++) { /* tokenizer.json and tokenizer_config.json */
        const char *f = i ? "tokenizer_config.json" : "tokenizer.json";
        char from[4096], *buf;
        size_t len;
        snprintf(from, sizeof from, "%s/%s", tokenizer, f);
        if (!plume_file_exists(from) && i) continue;
        rc = plume_read_file(from, &buf, &len, err);
        snprintf(path, sizeof path, "%s/%s", dir, f);
        if (!rc) rc = plume_write_file(path, buf, len, PLUME_WRITE_REPLACE, err);
        if (!rc) free(buf);
    }
    return rc;
}

/* ---- the public API ------------------------------------------------------------------- */

plume_synth_params plume_synth_default_params(void) {
    return (plume_synth_params){.config = "tiny", .seed = 1, .vocab = 0, .tokenizer = NULL, .shards = 2};
}

/* Open the random source of p, checking its parameters. */
static int synth_open(const plume_synth_params *p, conv_source *src, char **err) {
    if (!p || !p->config) return plume_fail(err, PLUME_EINVAL, "synth: no config given");
    if (p->vocab < 0 || (p->vocab > 0 && p->vocab < 8))
        return plume_fail(err, PLUME_EINVAL, "synth: vocab must be 0 (the config's) or >= 8 (not %d)", p->vocab);
    return source_synth_open(src, p->config, p->seed, p->vocab, err);
}

int plume_synth_checkpoint(const plume_synth_params *p, const char *hf_dir, char **err) {
    if (!hf_dir) return plume_fail(err, PLUME_EINVAL, "synth: no output directory given");
    if (p && (p->shards < 1 || p->shards > 99)) return plume_fail(err, PLUME_EINVAL, "synth: shards must be 1..99 (not %d)", p->shards);
    conv_source src;
    int rc = synth_open(p, &src, err);
    if (rc) return rc;
    rc = write_hf(src.ctx, hf_dir, p->shards, p->tokenizer, err);
    source_synth_close(&src);
    return rc;
}

int plume_synth_bundle(const plume_synth_params *p, const plume_convert_params *cp, const char *bundle_dir, char **err) {
    plume_convert_params d = plume_convert_default_params();
    if (!cp) cp = &d;
    if (!bundle_dir) return plume_fail(err, PLUME_EINVAL, "synth: no output directory given");
    if (cp->n_ctx < 0) return plume_fail(err, PLUME_EINVAL, "synth: n_ctx must be >= 0 (not %d)", cp->n_ctx);
    conv_source src;
    int rc = synth_open(p, &src, err);
    if (rc) return rc;
    src.dir = p->tokenizer;
    conv_options opt = {
        .weights = cp->weights, .n_ctx = cp->n_ctx, .progress = cp->progress, .layout = cp->layout, .head = cp->head};
    rc = convert_run(&src, &opt, bundle_dir, err);
    source_synth_close(&src);
    return rc;
}
