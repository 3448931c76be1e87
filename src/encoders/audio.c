/* audio.c -- the audio tower: log-mel frames -> soft tokens -> decoder rows (encoders.h).
 * Hugging Face's Gemma4AudioModel and the audio Gemma4MultimodalEmbedder, as
 * gemma4-multimodal.md §3.3-3.4 writes them out:
 *
 *   mel [n_valid, 128]
 *   -> Conv2d 3x3 stride 2 (1 -> C0 channels), LayerNorm over channels, ReLU   [T0, 64, C0]
 *   -> Conv2d 3x3 stride 2 (C0 -> C1), LayerNorm, ReLU                           [T, 32, C1]
 *   -> input_proj_linear                                                         x [T, D]
 *   -> L conformer blocks:  x += 0.5 FF1(x)
 *                           x += rms(post(local attention(rms(x))))
 *                           x += linear_end(silu(rms(causal depthwise conv(GLU(linear_start(rms(x)))))))
 *                           x += 0.5 FF2(x);  x = rms(x, norm_out)
 *   -> output_proj (+ bias)                                                      soft [T, 1536]
 *   embed_audio: rms without scale, then embedding_projection                    [T, D_text]
 *
 * Only the valid tokens are computed. Every step looks back, never ahead (causal attention and
 * convolution, stride-2 convolutions reading rows 2t-1..2t+1 with invalid rows zeroed as HF
 * masks them), so the valid tokens of HF's padded batch are exactly these. HF's blockwise
 * attention (blocks of 12 queries, windows of 24 keys, Transformer-XL rel_shift) equals a
 * sliding window over keys t-11..t with the relative table indexed by distance (§3.4); HF's
 * clamps to +-1e10 are left out (no finite float32 tower reaches them).
 * Files and the decoder are not known here: frames come in, rows go out. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "encoders.h"

#define PREFIX "model.audio_tower."
enum {
    MEL_BINS = 128,        /* the feature extractor's feature_size: the tower's input width */
    MAX_FRAMES = 3000,     /* 30 s of frames (HF's max_length of 480000 samples) */
    MAX_LEFT = 256,        /* the widest attention_context_left taken */
    SUB_ROWS = 8           /* tokens per block of the subsampling convolutions */
};
#define K_SCALE 1.8946361239720115 /* ln(1 + e) / ln 2: the keys' fixed scale */

/* ---- config ------------------------------------------------------------------------------- */

/* An integer key in [lo, hi], or dflt when missing. */
static int cfg_int(const cJSON *o, const char *key, int32_t dflt, int32_t lo, int32_t hi, int32_t *out, const char *name,
                   char **err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.%s must be an integer in [%d, %d]", name, key, lo, hi);
    *out = (int32_t)v->valuedouble;
    return 0;
}

/* A number key in (lo, hi], or dflt when missing. */
static int cfg_num(const cJSON *o, const char *key, double dflt, double lo, double hi, float *out, const char *name,
                   char **err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double x = dflt;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v)) return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.%s must be a number", name, key);
        x = v->valuedouble;
    }
    if (!(x > lo && x <= hi)) return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.%s = %g is out of range", name, key, x);
    *out = (float)x;
    return 0;
}

int enc_audio_config_read(enc_audio_config *c, const cJSON *o, const char *name, char **err) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(o)) return plume_fail(err, PLUME_EFORMAT, "%s: audio_config is not an object", name);
    int32_t right = 0;
    int rc = cfg_int(o, "hidden_size", 1024, 2, 65536, &c->D, name, err);
    if (!rc) rc = cfg_int(o, "num_hidden_layers", 12, 1, ENC_AUDIO_MAX_LAYERS, &c->L, name, err);
    if (!rc) rc = cfg_int(o, "num_attention_heads", 8, 1, 1024, &c->H, name, err);
    if (!rc) rc = cfg_int(o, "conv_kernel_size", 5, 1, 64, &c->K, name, err);
    if (!rc) rc = cfg_int(o, "attention_chunk_size", 12, 1, 4096, &c->chunk, name, err);
    if (!rc) rc = cfg_int(o, "attention_context_left", 13, 2, MAX_LEFT, &c->left, name, err);
    if (!rc) rc = cfg_int(o, "attention_context_right", 0, 0, 4096, &right, name, err);
    if (!rc) rc = cfg_int(o, "output_proj_dims", 1536, 1, 65536, &c->out_dims, name, err);
    if (!rc) rc = cfg_num(o, "attention_logit_cap", 50.0, 0.0, 1e30, &c->cap, name, err);
    if (!rc) rc = cfg_num(o, "residual_weight", 0.5, -1e30, 1e30, &c->residual, name, err);
    if (!rc) rc = cfg_num(o, "rms_norm_eps", 1e-6, -1e-30, 1.0, &c->eps, name, err);
    if (rc) return rc;
    c->C0 = 128, c->C1 = 32;
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "subsampling_conv_channels");
    if (ch && !cJSON_IsNull(ch)) {
        const cJSON *a = cJSON_GetArrayItem(ch, 0), *b = cJSON_GetArrayItem(ch, 1);
        if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            a->valuedouble < 1 || a->valuedouble > 4096 || b->valuedouble < 1 || b->valuedouble > 4096 ||
            a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble))
            return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.subsampling_conv_channels must be two integers in [1, 4096]",
                              name);
        c->C0 = (int32_t)a->valuedouble, c->C1 = (int32_t)b->valuedouble;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "hidden_act");
    if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.hidden_act must be \"silu\"", name);
    const cJSON *clip = cJSON_GetObjectItemCaseSensitive(o, "use_clipped_linears");
    if (clip && !cJSON_IsNull(clip) && !cJSON_IsBool(clip))
        return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.use_clipped_linears must be true or false", name);
    c->clipped = !clip || cJSON_IsNull(clip) || cJSON_IsTrue(clip);
    if (c->D % c->H || c->D % 2)
        return plume_fail(err, PLUME_EFORMAT, "%s: audio_config.hidden_size must be even and a multiple of the heads", name);
    c->hd = c->D / c->H;
    c->F = MEL_BINS;
    c->n_rel = (c->chunk + c->left - 1) / 2 + 1;
    /* HF's rel_shift gives query t and key t - d the table row at position d only when the
     * table reaches back exactly left - 1 (12 for chunk 12, left 13); other shapes, and keys
     * ahead (right context), are not implemented */
    if (right != 0 || c->n_rel - 1 != c->left - 1)
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: audio attention with chunk %d, context left %d, right %d is not supported (chunk = left - 1, "
                          "right = 0 are)",
                          name, c->chunk, c->left, right);
    return 0;
}

int enc_audio_config_load(enc_audio_config *c, const char *path, char **err) {
    char *buf = NULL;
    int rc = plume_read_file(path, &buf, NULL, err);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root) return plume_fail(err, PLUME_EFORMAT, "%s: not valid JSON", path);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "audio_config");
    rc = o && !cJSON_IsNull(o) ? enc_audio_config_read(c, o, path, err)
                               : plume_fail(err, PLUME_EFORMAT, "%s: no audio_config (a model without an audio tower)", path);
    cJSON_Delete(root);
    return rc;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* A [D] (or any 1-D) weight under the tower's prefix, formatted like printf. */
static int get_vec(enc_audio *a, const float **out, int64_t n, char **err, const char *fmt, int32_t l, const char *what) {
    char key[256];
    snprintf(key, sizeof key, fmt, l, what);
    return enc_tensors_get(&a->ts, key, 1, &n, out, err);
}

/* A clipped linear of layer l: PREFIX layers.l.<what>. */
static int get_lin(enc_audio *a, enc_linear *lin, int32_t l, const char *what, int32_t out, int32_t in, char **err) {
    char key[256];
    snprintf(key, sizeof key, PREFIX "layers.%d.%s", l, what);
    return enc_linear_load(&a->ts, lin, key, out, in, a->c.clipped, 0, err);
}

/* A float buffer of n owned by the store (freed with it). */
static float *owned(enc_audio *a, int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p) return NULL;
    if (a->ts.n_owned == a->ts.cap_owned) {
        int32_t cap = a->ts.cap_owned ? 2 * a->ts.cap_owned : 64;
        float **o = realloc(a->ts.owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return NULL;
        }
        a->ts.owned = o;
        a->ts.cap_owned = cap;
    }
    a->ts.owned[a->ts.n_owned++] = p;
    return p;
}

/* The sinusoid of Gemma4AudioRelPositionalEncoding at position p: [sin(p w_i), cos(p w_i)],
 * w_i = exp(-i ln(1e4) / max(D/2 - 1, 1)), i < D/2; into s[D] (double). */
static void rel_sinusoid(double *s, int32_t D, int32_t p) {
    const int32_t n = D / 2;
    const double inc = log(10000.0) / (n - 1 > 1 ? n - 1 : 1);
    for (int32_t i = 0; i < n; i++) {
        const double w = exp(-i * inc);
        s[i] = sin(p * w);
        s[n + i] = cos(p * w);
    }
}

/* Layer l's attention constants: q scale from per_dim_scale, the relative keys at distances
 * 0 .. left - 2 (relative_k_proj of the sinusoid, in double). */
static int load_attn_consts(enc_audio *a, enc_audio_layer *ly, int32_t l, char **err) {
    const enc_audio_config *c = &a->c;
    const float *pds = NULL, *wrel = NULL;
    char key[256];
    const int64_t sq[2] = {c->D, c->D};
    int rc = get_vec(a, &pds, c->hd, err, PREFIX "layers.%d.%s", l, "self_attn.per_dim_scale");
    snprintf(key, sizeof key, PREFIX "layers.%d.self_attn.relative_k_proj.weight", l);
    if (!rc) rc = enc_tensors_get(&a->ts, key, 2, sq, &wrel, err);
    if (rc) return rc;
    double *s = malloc((size_t)c->D * sizeof(double));
    ly->q_scale = owned(a, c->hd);
    ly->rel = owned(a, (int64_t)(c->left - 1) * c->D);
    if (!s || !ly->q_scale || !ly->rel) {
        free(s);
        return plume_fail(err, PLUME_ENOMEM, "audio tower: out of memory");
    }
    for (int32_t i = 0; i < c->hd; i++) { /* torch softplus: x past its threshold of 20 */
        const double x = pds[i], sp = x > 20.0 ? x : log1p(exp(x));
        ly->q_scale[i] = (float)(1.0 / sqrt((double)c->hd) / log(2.0) * sp);
    }
    for (int32_t d = 0; d < c->left - 1; d++) {
        rel_sinusoid(s, c->D, d);
        for (int32_t r = 0; r < c->D; r++) {
            double acc = 0.0;
            for (int32_t j = 0; j < c->D; j++) acc += (double)wrel[(int64_t)r * c->D + j] * s[j];
            ly->rel[(int64_t)d * c->D + r] = (float)acc;
        }
    }
    free(s);
    return 0;
}

/* One conformer block's weights. */
static int load_layer(enc_audio *a, int32_t l, char **err) {
    const enc_audio_config *c = &a->c;
    enc_audio_layer *ly = &a->layer[l];
    const int32_t D = c->D;
    const char *const L = PREFIX "layers.%d.%s";
    enc_audio_ff *ff[2] = {&ly->ff1, &ly->ff2};
    static const char *const ffn[2][4] = {
        {"feed_forward1.pre_layer_norm.weight", "feed_forward1.post_layer_norm.weight", "feed_forward1.ffw_layer_1",
         "feed_forward1.ffw_layer_2"},
        {"feed_forward2.pre_layer_norm.weight", "feed_forward2.post_layer_norm.weight", "feed_forward2.ffw_layer_1",
         "feed_forward2.ffw_layer_2"}};
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        rc = get_vec(a, &ff[i]->pre_norm, D, err, L, l, ffn[i][0]);
        if (!rc) rc = get_vec(a, &ff[i]->post_norm, D, err, L, l, ffn[i][1]);
        if (!rc) rc = get_lin(a, &ff[i]->up, l, ffn[i][2], 4 * D, D, err);
        if (!rc) rc = get_lin(a, &ff[i]->down, l, ffn[i][3], D, 4 * D, err);
    }
    if (!rc) rc = get_vec(a, &ly->norm_pre_attn, D, err, L, l, "norm_pre_attn.weight");
    if (!rc) rc = get_vec(a, &ly->norm_post_attn, D, err, L, l, "norm_post_attn.weight");
    if (!rc) rc = get_vec(a, &ly->norm_out, D, err, L, l, "norm_out.weight");
    if (!rc) rc = get_lin(a, &ly->q, l, "self_attn.q_proj", D, D, err);
    if (!rc) rc = get_lin(a, &ly->k, l, "self_attn.k_proj", D, D, err);
    if (!rc) rc = get_lin(a, &ly->v, l, "self_attn.v_proj", D, D, err);
    if (!rc) rc = get_lin(a, &ly->post, l, "self_attn.post", D, D, err);
    if (!rc) rc = load_attn_consts(a, ly, l, err);
    if (!rc) rc = get_vec(a, &ly->conv_pre_norm, D, err, L, l, "lconv1d.pre_layer_norm.weight");
    if (!rc) rc = get_vec(a, &ly->conv_norm, D, err, L, l, "lconv1d.conv_norm.weight");
    if (!rc) rc = get_lin(a, &ly->conv_start, l, "lconv1d.linear_start", 2 * D, D, err);
    if (!rc) rc = get_lin(a, &ly->conv_end, l, "lconv1d.linear_end", D, D, err);
    if (rc) return rc;
    const float *dw = NULL;
    char key[256];
    const int64_t shape[3] = {D, 1, c->K};
    snprintf(key, sizeof key, PREFIX "layers.%d.lconv1d.depthwise_conv1d.weight", l);
    if ((rc = enc_tensors_get(&a->ts, key, 3, shape, &dw, err))) return rc;
    if (!(ly->dw = owned(a, (int64_t)c->K * D))) return plume_fail(err, PLUME_ENOMEM, "audio tower: out of memory");
    for (int32_t ch = 0; ch < D; ch++) /* [D, 1, K] -> [K, D]: a tap's weights side by side */
        for (int32_t k = 0; k < c->K; k++) ly->dw[(int64_t)k * D + ch] = dw[(int64_t)ch * c->K + k];
    return 0;
}

/* The subsampling convolutions, their norms and the input projection. */
static int load_subsampling(enc_audio *a, char **err) {
    const enc_audio_config *c = &a->c;
    const float *w0 = NULL, *w1 = NULL;
    const int64_t s0[4] = {c->C0, 1, 3, 3}, s1[4] = {c->C1, c->C0, 3, 3}, n0 = c->C0, n1 = c->C1;
    int rc = enc_tensors_get(&a->ts, PREFIX "subsample_conv_projection.layer0.conv.weight", 4, s0, &w0, err);
    if (!rc) rc = enc_tensors_get(&a->ts, PREFIX "subsample_conv_projection.layer0.norm.weight", 1, &n0, &a->norm0, err);
    if (!rc) rc = enc_tensors_get(&a->ts, PREFIX "subsample_conv_projection.layer1.conv.weight", 4, s1, &w1, err);
    if (!rc) rc = enc_tensors_get(&a->ts, PREFIX "subsample_conv_projection.layer1.norm.weight", 1, &n1, &a->norm1, err);
    if (!rc)
        rc = enc_linear_load(&a->ts, &a->in_proj, PREFIX "subsample_conv_projection.input_proj_linear", c->D,
                             a->F1 * c->C1, 0, 0, err);
    if (rc) return rc;
    a->conv0 = owned(a, (int64_t)c->C0 * 9);
    a->conv1 = owned(a, (int64_t)c->C1 * 9 * c->C0);
    if (!a->conv0 || !a->conv1) return plume_fail(err, PLUME_ENOMEM, "audio tower: out of memory");
    memcpy(a->conv0, w0, (size_t)c->C0 * 9 * sizeof(float)); /* [C0, 1, 3, 3] is already [C0, 9] */
    for (int32_t o = 0; o < c->C1; o++) /* [C1, C0, kt, kf] -> [C1, (kt * 3 + kf) * C0 + c] */
        for (int32_t ci = 0; ci < c->C0; ci++)
            for (int32_t j = 0; j < 9; j++)
                a->conv1[((int64_t)o * 9 + j) * c->C0 + ci] = w1[((int64_t)o * c->C0 + ci) * 9 + j];
    return 0;
}

int enc_audio_open(enc_audio *a, const enc_audio_config *c, const char *path, char **err) {
    memset(a, 0, sizeof *a);
    a->c = *c;
    a->F0 = (c->F - 1) / 2 + 1;
    a->F1 = (a->F0 - 1) / 2 + 1;
    int rc = enc_tensors_open(&a->ts, path, err);
    if (rc) return rc;
    rc = load_subsampling(a, err);
    for (int32_t l = 0; l < c->L && !rc; l++) rc = load_layer(a, l, err);
    if (!rc) rc = enc_linear_load(&a->ts, &a->out_proj, PREFIX "output_proj", c->out_dims, c->D, 0, 1, err);
    const st_tensor *e = st_find(&a->ts.st, "model.embed_audio.embedding_projection.weight");
    if (!rc && (!e || e->ndim != 2 || e->shape[0] < 1 || e->shape[0] > 65536))
        rc = plume_fail(err, PLUME_EFORMAT, "%s: model.embed_audio.embedding_projection.weight is missing or not [D, %d]",
                        path, c->out_dims);
    if (!rc) {
        a->D_text = (int32_t)e->shape[0];
        rc = enc_linear_load(&a->ts, &a->embed, "model.embed_audio.embedding_projection", a->D_text, c->out_dims, 0, 0, err);
    }
    if (rc) enc_audio_free(a);
    return rc;
}

void enc_audio_free(enc_audio *a) {
    if (!a) return;
    enc_tensors_free(&a->ts);
    memset(a, 0, sizeof *a);
}

int32_t enc_audio_tokens(int32_t n_valid) {
    if (n_valid <= 0) return 0;
    const int32_t t0 = (n_valid + 1) / 2; /* each stride-2 convolution keeps mask[::2] */
    return (t0 + 1) / 2;
}

/* ---- subsampling ---------------------------------------------------------------------------- */

/* LayerNorm over the n channels of x (no bias, biased variance), then ReLU; in place. */
static void layer_norm_relu(float *x, const float *w, int32_t n, float eps) {
    double s = 0.0, ss = 0.0;
    for (int32_t i = 0; i < n; i++) s += x[i];
    const double mean = s / n;
    for (int32_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    const double r = 1.0 / sqrt(ss / n + eps);
    for (int32_t i = 0; i < n; i++) {
        const float y = (float)((x[i] - mean) * r) * w[i];
        x[i] = y > 0.0f ? y : 0.0f;
    }
}

typedef struct {
    const enc_audio *a;
    const plume_kernels *k;
    const float *mel;   /* [n_valid, F] */
    int32_t n_valid;    /* valid frames */
    int32_t T0;         /* valid rows after the first convolution */
    int32_t T;          /* tokens */
    float *out;         /* [T, F1 * C1] */
    float *scratch;     /* [threads, per_thread] */
    size_t per_thread;
} sub_task;

/* Rows [r0, r1) of the first convolution (each row: F0 positions x C0 channels), into l0. */
static void sub_conv0(const sub_task *s, float *im, float *l0, int32_t r0, int32_t r1) {
    const enc_audio *a = s->a;
    const int32_t F = a->c.F, F0 = a->F0, C0 = a->c.C0, n = (r1 - r0) * F0;
    for (int32_t r = r0; r < r1; r++)
        for (int32_t f = 0; f < F0; f++) {
            float *v = im + ((int64_t)(r - r0) * F0 + f) * 9;
            for (int32_t kt = 0; kt < 3; kt++)
                for (int32_t kf = 0; kf < 3; kf++) {
                    const int32_t t = 2 * r + kt - 1, b = 2 * f + kf - 1; /* frames past n_valid are masked */
                    v[kt * 3 + kf] = t >= 0 && t < s->n_valid && b >= 0 && b < F ? s->mel[(int64_t)t * F + b] : 0.0f;
                }
        }
    const plume_weight w = {PLUME_W_F32, C0, 9, a->conv0, NULL, PLUME_L_ROWS};
    s->k->matmul[PLUME_W_F32](l0, C0, im, 9, n, &w, 0, C0);
    for (int32_t i = 0; i < n; i++) layer_norm_relu(l0 + (int64_t)i * C0, a->norm0, C0, a->c.eps);
}

/* Blocks [b0, b1) of SUB_ROWS tokens: the first convolution's rows they read (one shared with
 * the block before, computed twice), then the second convolution into out. */
static void sub_blocks(void *ctx, int32_t ith, int64_t b0, int64_t b1) {
    const sub_task *s = ctx;
    const enc_audio *a = s->a;
    const int32_t F0 = a->F0, F1 = a->F1, C0 = a->c.C0, C1 = a->c.C1;
    float *im0 = s->scratch + (size_t)ith * s->per_thread;
    float *l0 = im0 + (size_t)(2 * SUB_ROWS + 1) * F0 * 9;
    float *im1 = l0 + (size_t)(2 * SUB_ROWS + 1) * F0 * C0;
    for (int64_t b = b0; b < b1; b++) {
        const int32_t t0 = (int32_t)b * SUB_ROWS, t1 = t0 + SUB_ROWS < s->T ? t0 + SUB_ROWS : s->T;
        const int32_t r0 = 2 * t0 - 1 > 0 ? 2 * t0 - 1 : 0, r1 = 2 * t1 < s->T0 ? 2 * t1 : s->T0;
        sub_conv0(s, im0, l0, r0, r1);
        for (int32_t t = t0; t < t1; t++)
            for (int32_t f = 0; f < F1; f++) {
                float *v = im1 + ((int64_t)(t - t0) * F1 + f) * 9 * C0;
                for (int32_t kt = 0; kt < 3; kt++)
                    for (int32_t kf = 0; kf < 3; kf++) {
                        const int32_t r = 2 * t + kt - 1, g = 2 * f + kf - 1; /* rows past T0 are masked */
                        float *dst = v + (kt * 3 + kf) * C0;
                        if (r >= r0 && r < r1 && g >= 0 && g < F0)
                            memcpy(dst, l0 + ((int64_t)(r - r0) * F0 + g) * C0, (size_t)C0 * sizeof(float));
                        else
                            memset(dst, 0, (size_t)C0 * sizeof(float));
                    }
            }
        const plume_weight w = {PLUME_W_F32, C1, 9 * C0, a->conv1, NULL, PLUME_L_ROWS};
        float *y = s->out + (int64_t)t0 * F1 * C1; /* position (t, f) is row t * F1 + f, channels last */
        s->k->matmul[PLUME_W_F32](y, C1, im1, 9 * C0, (t1 - t0) * F1, &w, 0, C1);
        for (int32_t i = 0; i < (t1 - t0) * F1; i++) layer_norm_relu(y + (int64_t)i * C1, a->norm1, C1, a->c.eps);
    }
}

/* mel [n_valid, F] -> out [T, F1 * C1] (index f * C1 + c: HF's permute(0, 2, 3, 1)). */
static int subsample(const enc_audio *a, const enc_run *r, const float *mel, int32_t n_valid, float *out, char **err) {
    const int32_t F0 = a->F0, F1 = a->F1, C0 = a->c.C0;
    sub_task s = {a, r->k, mel, n_valid, (n_valid + 1) / 2, enc_audio_tokens(n_valid), out, NULL, 0};
    s.per_thread = (size_t)(2 * SUB_ROWS + 1) * F0 * (9 + C0) + (size_t)SUB_ROWS * F1 * 9 * C0;
    s.per_thread = (s.per_thread + 15) / 16 * 16;
    s.scratch = plume_alloc(s.per_thread * (size_t)enc_threads(r) * sizeof(float));
    if (!s.scratch) return plume_fail(err, PLUME_ENOMEM, "audio tower: out of memory");
    plume_pool_for(r->pool, (s.T + SUB_ROWS - 1) / SUB_ROWS, 1, sub_blocks, &s);
    plume_dealloc(s.scratch);
    return 0;
}

/* ---- conformer blocks ------------------------------------------------------------------------ */

/* One forward pass's buffers and the layer it is in. */
typedef struct {
    const enc_audio *a;
    const enc_run *r;
    const enc_audio_layer *ly;
    int32_t T;
    float *x;              /* [T, D] the residual stream */
    float *h;              /* [T, D] a sub-block's normed input, then its output */
    float *q, *k, *v;      /* [T, D] (q also holds the GLU's output) */
    float *att;            /* [T, D] attention output; the depthwise convolution's */
    float *big;            /* [T, 4D] feed-forward hidden; linear_start's [T, 2D] */
    const float *norm;     /* the weight of the current norm_rows */
    float *src, *dst;      /* norm_rows: dst[t] = rms(src[t], norm) */
    float scale;           /* add_rows: x[t] += scale * h[t] (after h[t] = rms(h[t], norm) if norm) */
} fwd;

/* Row t: dst = rms(src, norm). */
static void row_norm(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const int32_t D = f->a->c.D;
    f->r->k->rmsnorm(f->dst + (int64_t)t * D, f->src + (int64_t)t * D, f->norm, D, f->a->c.eps);
}

/* Row t: h = rms(h, norm) when norm is set; x += scale * h. */
static void row_add(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const int32_t D = f->a->c.D;
    float *h = f->h + (int64_t)t * D;
    if (f->norm) f->r->k->rmsnorm(h, h, f->norm, D, f->a->c.eps);
    f->r->k->axpy(f->x + (int64_t)t * D, f->scale, h, D);
}

/* Row t of the feed-forward hidden: silu in place. */
static void row_silu_big(void *ctx, int32_t t) {
    const fwd *f = ctx;
    float *u = f->big + (int64_t)t * 4 * f->a->c.D;
    f->r->k->sigmoid_mul(u, u, u, 4 * (int64_t)f->a->c.D);
}

/* dst = rms(src, w) on every row. */
static void norm_rows(fwd *f, float *dst, float *src, const float *w) {
    f->dst = dst, f->src = src, f->norm = w;
    enc_rows(f->r, f->T, row_norm, f);
}

/* x += scale * rms(h, w) (w NULL: no norm) on every row. */
static void add_rows(fwd *f, const float *w, float scale) {
    f->norm = w, f->scale = scale;
    enc_rows(f->r, f->T, row_add, f);
}

/* x += residual * rms(down(silu(up(rms(x, pre)))), post). */
static void feed_forward(fwd *f, const enc_audio_ff *ff) {
    norm_rows(f, f->h, f->x, ff->pre_norm);
    enc_linear_apply(f->r, &ff->up, f->big, f->h, f->T);
    enc_rows(f->r, f->T, row_silu_big, f);
    enc_linear_apply(f->r, &ff->down, f->h, f->big, f->T);
    add_rows(f, ff->post_norm, f->a->c.residual);
}

/* Row t: q scaled per head dimension, k by K_SCALE. */
static void row_qk_scale(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const enc_audio_config *c = &f->a->c;
    float *q = f->q + (int64_t)t * c->D, *k = f->k + (int64_t)t * c->D;
    for (int32_t i = 0; i < c->D; i++) {
        q[i] *= f->ly->q_scale[i % c->hd];
        k[i] *= (float)K_SCALE;
    }
}

/* Row t of the local attention: query t sees keys t - (left - 2) .. t (those >= 0); logit =
 * q.k + q.rel[t - s] (Transformer-XL's ac + bd), capped as cap tanh(logit / cap), softmax in
 * float over the window, then the weighted values. */
static void row_attn(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const enc_audio_config *c = &f->a->c;
    const plume_kernels *k = f->r->k;
    const int32_t D = c->D, hd = c->hd, s0 = t - (c->left - 2) > 0 ? t - (c->left - 2) : 0;
    float p[MAX_LEFT];
    for (int32_t h = 0; h < c->H; h++) {
        const float *q = f->q + (int64_t)t * D + h * hd;
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t s = s0; s <= t; s++) {
            float l = k->dot(q, f->k + (int64_t)s * D + h * hd, hd) + k->dot(q, f->ly->rel + (int64_t)(t - s) * D + h * hd, hd);
            l = c->cap * tanhf(l / c->cap);
            p[s - s0] = l;
            mx = l > mx ? l : mx;
        }
        for (int32_t s = s0; s <= t; s++) sum += p[s - s0] = expf(p[s - s0] - mx);
        float *o = f->att + (int64_t)t * D + h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int32_t s = s0; s <= t; s++) k->axpy(o, p[s - s0] / sum, f->v + (int64_t)s * D + h * hd, hd);
    }
}

/* Whether two linears clamp their inputs alike (then one clamp in place serves both). */
static int same_in(const enc_linear *a, const enc_linear *b) { return a->in_lo == b->in_lo && a->in_hi == b->in_hi; }

/* x += rms(post(attention(rms(x, pre))), post_norm). */
static void attention(fwd *f) {
    const enc_audio_layer *ly = f->ly;
    const size_t bytes = (size_t)f->T * f->a->c.D * sizeof(float);
    norm_rows(f, f->h, f->x, ly->norm_pre_attn);
    if (same_in(&ly->q, &ly->k) && same_in(&ly->q, &ly->v)) { /* HF: q, k and v share their bounds */
        enc_linear_apply(f->r, &ly->q, f->q, f->h, f->T);
        enc_linear_apply(f->r, &ly->k, f->k, f->h, f->T);
        enc_linear_apply(f->r, &ly->v, f->v, f->h, f->T);
    } else {
        const enc_linear *lin[3] = {&ly->q, &ly->k, &ly->v};
        float *out[3] = {f->q, f->k, f->v};
        for (int i = 0; i < 3; i++) {
            memcpy(f->att, f->h, bytes);
            enc_linear_apply(f->r, lin[i], out[i], f->att, f->T);
        }
    }
    enc_rows(f->r, f->T, row_qk_scale, f);
    enc_rows(f->r, f->T, row_attn, f);
    enc_linear_apply(f->r, &ly->post, f->h, f->att, f->T);
    add_rows(f, ly->norm_post_attn, 1.0f);
}

/* Row t: the GLU of linear_start's output, q[t] = big[t, :D] * sigmoid(big[t, D:]). */
static void row_glu(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const int32_t D = f->a->c.D;
    const float *g = f->big + (int64_t)t * 2 * D;
    f->r->k->sigmoid_mul(f->q + (int64_t)t * D, g, g + D, D);
}

/* Row t: the causal depthwise convolution of the GLU output (rows before 0 are 0), then
 * rms(conv_norm) and silu: att[t] = silu(rms(sum_k dw[k] * q[t - K + 1 + k])). */
static void row_dwconv(void *ctx, int32_t t) {
    const fwd *f = ctx;
    const enc_audio_config *c = &f->a->c;
    const int32_t D = c->D;
    float *o = f->att + (int64_t)t * D;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int32_t k = 0; k < c->K; k++) {
        const int32_t s = t - c->K + 1 + k;
        if (s < 0) continue;
        const float *u = f->q + (int64_t)s * D, *w = f->ly->dw + (int64_t)k * D;
        for (int32_t i = 0; i < D; i++) o[i] += w[i] * u[i];
    }
    f->r->k->rmsnorm(o, o, f->ly->conv_norm, D, c->eps);
    f->r->k->sigmoid_mul(o, o, o, D);
}

/* x += linear_end(silu(rms(dwconv(GLU(linear_start(rms(x, pre))))))). */
static void light_conv(fwd *f) {
    const enc_audio_layer *ly = f->ly;
    norm_rows(f, f->h, f->x, ly->conv_pre_norm);
    enc_linear_apply(f->r, &ly->conv_start, f->big, f->h, f->T);
    enc_rows(f->r, f->T, row_glu, f);
    enc_rows(f->r, f->T, row_dwconv, f);
    enc_linear_apply(f->r, &ly->conv_end, f->h, f->att, f->T);
    add_rows(f, NULL, 1.0f);
}

int enc_audio_tower(const enc_audio *a, const enc_run *r, const float *mel, int32_t n_valid, float *soft, char **err) {
    const enc_audio_config *c = &a->c;
    if (n_valid < 1 || n_valid > MAX_FRAMES)
        return plume_fail(err, PLUME_EINVAL, "audio tower: %d valid frames; a clip has 1 to %d", n_valid, MAX_FRAMES);
    const int32_t T = enc_audio_tokens(n_valid);
    const size_t row = (size_t)T * c->D;
    /* x, h, q, k, v, att [T, D] and big [T, 4D], then the subsampling's output [T, F1 * C1] */
    float *buf = plume_alloc((10 * row + (size_t)T * a->F1 * c->C1) * sizeof(float));
    if (!buf) return plume_fail(err, PLUME_ENOMEM, "audio tower: out of memory for %d tokens", T);
    fwd f = {a, r, NULL, T, buf, buf + row, buf + 2 * row, buf + 3 * row, buf + 4 * row, buf + 5 * row, buf + 6 * row,
             NULL, NULL, NULL, 0.0f};
    float *sub = buf + 10 * row; /* [T, F1 * C1] the subsampling's output */
    int rc = subsample(a, r, mel, n_valid, sub, err);
    if (!rc) {
        enc_linear_apply(r, &a->in_proj, f.x, sub, T);
        for (int32_t l = 0; l < c->L; l++) {
            f.ly = &a->layer[l];
            feed_forward(&f, &f.ly->ff1);
            attention(&f);
            light_conv(&f);
            feed_forward(&f, &f.ly->ff2);
            norm_rows(&f, f.x, f.x, f.ly->norm_out);
        }
        enc_linear_apply(r, &a->out_proj, soft, f.x, T);
    }
    plume_dealloc(buf);
    return rc;
}

/* ---- embed_audio ------------------------------------------------------------------------------ */

typedef struct {
    const enc_audio *a;
    const enc_run *r;
    const float *soft;
    float *normed;
} embed_task;

/* Row t: normed = soft / rms(soft) (the embedder's norm has no scale). */
static void row_embed_norm(void *ctx, int32_t t) {
    const embed_task *e = ctx;
    const int32_t n = e->a->c.out_dims;
    e->r->k->rmsnorm(e->normed + (int64_t)t * n, e->soft + (int64_t)t * n, NULL, n, e->a->c.eps);
}

int enc_audio_embed(const enc_audio *a, const enc_run *r, const float *soft, int32_t n, float *emb, char **err) {
    if (n <= 0) return 0;
    embed_task e = {a, r, soft, plume_alloc((size_t)n * a->c.out_dims * sizeof(float))};
    if (!e.normed) return plume_fail(err, PLUME_ENOMEM, "audio embedder: out of memory for %d tokens", n);
    enc_rows(r, n, row_embed_norm, &e);
    enc_linear_apply(r, &a->embed, emb, e.normed, n);
    plume_dealloc(e.normed);
    return 0;
}
