/* tower_audio.c -- the audio tower: log-mel frames -> soft tokens -> decoder rows (encoders.h).
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
#include <math.h>
#include <stdarg.h>
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

/* ---- the tensor list ------------------------------------------------------------------------ */

static const char *const ff_names[2] = {"feed_forward1", "feed_forward2"};
static const char *const bound_names[4] = {"input_min", "input_max", "output_min", "output_max"};

/* A list being written: out[cap] (out NULL: only counted), n so far. */
typedef struct {
    enc_tensor_spec *out;
    int32_t cap, n;
} spec_list;

/* Append a tensor of shape d[0..ndim) named like printf. */
static void spec_add(spec_list *s, int32_t ndim, const int64_t *d, int32_t optional, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void spec_add(spec_list *s, int32_t ndim, const int64_t *d, int32_t optional, const char *fmt, ...) {
    if (s->out && s->n < s->cap) {
        enc_tensor_spec *t = &s->out[s->n];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->name, sizeof t->name, fmt, ap);
        va_end(ap);
        t->ndim = ndim;
        for (int32_t k = 0; k < 4; k++) t->shape[k] = k < ndim ? d[k] : 0;
        t->optional = optional;
    }
    s->n++;
}

/* A vector [n] of layer l: PREFIX layers.l.<what>. */
static void spec_vec(spec_list *s, int64_t n, int32_t l, const char *what) {
    spec_add(s, 1, &n, 0, PREFIX "layers.%d.%s", l, what);
}

/* A clippable linear of layer l: <what>.linear.weight [out, in], then its four bounds
 * (optional) when the tower clips. */
static void spec_clippable(spec_list *s, const plume_audio_config *c, int64_t out, int64_t in, int32_t l, const char *what) {
    const int64_t d[2] = {out, in};
    spec_add(s, 2, d, 0, PREFIX "layers.%d.%s.linear.weight", l, what);
    for (int b = 0; c->clipped && b < 4; b++) spec_add(s, 0, NULL, 1, PREFIX "layers.%d.%s.%s", l, what, bound_names[b]);
}

int32_t enc_audio_tensor_list(const plume_audio_config *c, int32_t D_text, enc_tensor_spec *out, int32_t cap) {
    spec_list s = {out, cap, 0};
    const int64_t D = c->D, F1 = ((c->F - 1) / 2) / 2 + 1; /* bins after two stride-2 convolutions */
    const int64_t conv0[4] = {c->C0, 1, 3, 3}, conv1[4] = {c->C1, c->C0, 3, 3}, in_proj[2] = {D, F1 * c->C1};
    const int64_t c0 = c->C0, c1 = c->C1, rel[2] = {D, D}, dw[3] = {D, 1, c->K}, hd = c->hd;
    spec_add(&s, 4, conv0, 0, PREFIX "subsample_conv_projection.layer0.conv.weight");
    spec_add(&s, 1, &c0, 0, PREFIX "subsample_conv_projection.layer0.norm.weight");
    spec_add(&s, 4, conv1, 0, PREFIX "subsample_conv_projection.layer1.conv.weight");
    spec_add(&s, 1, &c1, 0, PREFIX "subsample_conv_projection.layer1.norm.weight");
    spec_add(&s, 2, in_proj, 0, PREFIX "subsample_conv_projection.input_proj_linear.weight");
    char what[64];
    for (int32_t l = 0; l < c->L; l++) {
        for (int f = 0; f < 2; f++) {
            snprintf(what, sizeof what, "%s.pre_layer_norm.weight", ff_names[f]);
            spec_vec(&s, D, l, what);
            snprintf(what, sizeof what, "%s.post_layer_norm.weight", ff_names[f]);
            spec_vec(&s, D, l, what);
            snprintf(what, sizeof what, "%s.ffw_layer_1", ff_names[f]);
            spec_clippable(&s, c, 4 * D, D, l, what);
            snprintf(what, sizeof what, "%s.ffw_layer_2", ff_names[f]);
            spec_clippable(&s, c, D, 4 * D, l, what);
        }
        spec_vec(&s, D, l, "norm_pre_attn.weight");
        spec_vec(&s, D, l, "norm_post_attn.weight");
        spec_vec(&s, D, l, "norm_out.weight");
        spec_clippable(&s, c, D, D, l, "self_attn.q_proj");
        spec_clippable(&s, c, D, D, l, "self_attn.k_proj");
        spec_clippable(&s, c, D, D, l, "self_attn.v_proj");
        spec_clippable(&s, c, D, D, l, "self_attn.post");
        spec_add(&s, 2, rel, 0, PREFIX "layers.%d.self_attn.relative_k_proj.weight", l);
        spec_add(&s, 1, &hd, 0, PREFIX "layers.%d.self_attn.per_dim_scale", l);
        spec_vec(&s, D, l, "lconv1d.pre_layer_norm.weight");
        spec_vec(&s, D, l, "lconv1d.conv_norm.weight");
        spec_clippable(&s, c, 2 * D, D, l, "lconv1d.linear_start");
        spec_clippable(&s, c, D, D, l, "lconv1d.linear_end");
        spec_add(&s, 3, dw, 0, PREFIX "layers.%d.lconv1d.depthwise_conv1d.weight", l);
    }
    const int64_t out_proj[2] = {c->out_dims, D}, bias = c->out_dims, embed[2] = {D_text, c->out_dims};
    spec_add(&s, 2, out_proj, 0, PREFIX "output_proj.weight");
    spec_add(&s, 1, &bias, 0, PREFIX "output_proj.bias");
    spec_add(&s, 2, embed, 0, "model.embed_audio.embedding_projection.weight");
    return s.n;
}

/* ---- loading: the list in its order ---------------------------------------------------------- */

/* A walk over the tensor list, taking each tensor's float32 view from the file. */
typedef struct {
    enc_audio *a;
    const enc_tensor_spec *list;
    int32_t n, i;
    int rc;
    char **err;
} binder;

/* The next tensor's values; NULL for an optional one the file lacks, or after an error (rc). */
static const float *take(binder *b) {
    if (b->rc || b->i >= b->n) {
        if (!b->rc) b->rc = plume_fail(b->err, PLUME_EFORMAT, "audio tower: the tensor list ran out");
        return NULL;
    }
    const enc_tensor_spec *t = &b->list[b->i++];
    if (t->optional && !st_find(&b->a->ts.st, t->name)) return NULL;
    const float *p = NULL;
    b->rc = enc_tensors_get(&b->a->ts, t->name, t->ndim, t->shape, &p, b->err);
    return p;
}

/* The next linear [out, in] (its shape checked by the list), then its bias, then its four clip
 * bounds when clippable (+-inf for those the file lacks). */
static void take_linear(binder *b, enc_linear *lin, int32_t out, int32_t in, int clippable, int bias) {
    memset(lin, 0, sizeof *lin);
    lin->in_lo = lin->out_lo = -INFINITY;
    lin->in_hi = lin->out_hi = INFINITY;
    const float *w = take(b);
    lin->w = (plume_weight){PLUME_W_F32, out, in, w, NULL, PLUME_L_ROWS};
    if (bias) lin->bias = take(b);
    float *v[4] = {&lin->in_lo, &lin->in_hi, &lin->out_lo, &lin->out_hi};
    for (int k = 0; clippable && b->a->c.clipped && k < 4; k++) {
        const char *name = b->i < b->n ? b->list[b->i].name : "";
        const float *p = take(b);
        if (p && isnan(*p) && !b->rc)
            b->rc = plume_fail(b->err, PLUME_EFORMAT, "%s: clip bound %s is not a number", b->a->ts.st.path, name);
        if (p) *v[k] = *p;
    }
}

/* A float buffer of n owned by the store (freed with it); NULL when out of memory. */
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

/* Layer ly's attention constants: the q scale from per_dim_scale, and the relative keys at
 * distances 0 .. left - 2 (relative_k_proj wrel [D, D] of the sinusoid, in double). */
static int attn_consts(enc_audio *a, enc_audio_layer *ly, const float *wrel, const float *pds, char **err) {
    const plume_audio_config *c = &a->c;
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

/* One conformer block, in the list's order. */
static int bind_layer(binder *b, enc_audio_layer *ly) {
    enc_audio *a = b->a;
    const int32_t D = a->c.D, K = a->c.K;
    enc_audio_ff *ff[2] = {&ly->ff1, &ly->ff2};
    for (int f = 0; f < 2; f++) {
        ff[f]->pre_norm = take(b);
        ff[f]->post_norm = take(b);
        take_linear(b, &ff[f]->up, 4 * D, D, 1, 0);
        take_linear(b, &ff[f]->down, D, 4 * D, 1, 0);
    }
    ly->norm_pre_attn = take(b);
    ly->norm_post_attn = take(b);
    ly->norm_out = take(b);
    take_linear(b, &ly->q, D, D, 1, 0);
    take_linear(b, &ly->k, D, D, 1, 0);
    take_linear(b, &ly->v, D, D, 1, 0);
    take_linear(b, &ly->post, D, D, 1, 0);
    const float *wrel = take(b), *pds = take(b);
    ly->conv_pre_norm = take(b);
    ly->conv_norm = take(b);
    take_linear(b, &ly->conv_start, 2 * D, D, 1, 0);
    take_linear(b, &ly->conv_end, D, D, 1, 0);
    const float *dw = take(b);
    if (b->rc) return b->rc;
    if ((b->rc = attn_consts(a, ly, wrel, pds, b->err))) return b->rc;
    if (!(ly->dw = owned(a, (int64_t)K * D))) return b->rc = plume_fail(b->err, PLUME_ENOMEM, "audio tower: out of memory");
    for (int32_t ch = 0; ch < D; ch++) /* [D, 1, K] -> [K, D]: a tap's weights side by side */
        for (int32_t k = 0; k < K; k++) ly->dw[(int64_t)k * D + ch] = dw[(int64_t)ch * K + k];
    return 0;
}

/* The subsampling convolutions (reordered for im2col), their norms, the input projection. */
static int bind_subsampling(binder *b) {
    enc_audio *a = b->a;
    const plume_audio_config *c = &a->c;
    const float *w0 = take(b);
    a->norm0 = take(b);
    const float *w1 = take(b);
    a->norm1 = take(b);
    take_linear(b, &a->in_proj, c->D, a->F1 * c->C1, 0, 0);
    if (b->rc) return b->rc;
    a->conv0 = owned(a, (int64_t)c->C0 * 9);
    a->conv1 = owned(a, (int64_t)c->C1 * 9 * c->C0);
    if (!a->conv0 || !a->conv1) return b->rc = plume_fail(b->err, PLUME_ENOMEM, "audio tower: out of memory");
    memcpy(a->conv0, w0, (size_t)c->C0 * 9 * sizeof(float)); /* [C0, 1, 3, 3] is already [C0, 9] */
    for (int32_t o = 0; o < c->C1; o++) /* [C1, C0, kt, kf] -> [C1, (kt * 3 + kf) * C0 + c] */
        for (int32_t ci = 0; ci < c->C0; ci++)
            for (int32_t j = 0; j < 9; j++)
                a->conv1[((int64_t)o * 9 + j) * c->C0 + ci] = w1[((int64_t)o * c->C0 + ci) * 9 + j];
    return 0;
}

int enc_audio_open(enc_audio *a, const plume_audio_config *c, int32_t D_text, const char *path, char **err) {
    memset(a, 0, sizeof *a);
    if (c->L < 1 || c->L > ENC_AUDIO_MAX_LAYERS || c->left > MAX_LEFT || c->F != MEL_BINS || D_text < 1)
        return plume_fail(err, PLUME_EINVAL, "%s: an audio config plume does not run", path);
    a->c = *c;
    a->D_text = D_text;
    a->F0 = (c->F - 1) / 2 + 1;
    a->F1 = (a->F0 - 1) / 2 + 1;
    const int32_t n = enc_audio_tensor_list(c, D_text, NULL, 0);
    enc_tensor_spec *list = malloc((size_t)n * sizeof *list);
    int rc = list ? enc_tensors_open(&a->ts, path, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) {
        enc_audio_tensor_list(c, D_text, list, n);
        binder b = {a, list, n, 0, 0, err};
        rc = bind_subsampling(&b);
        for (int32_t l = 0; l < c->L && !rc; l++) rc = bind_layer(&b, &a->layer[l]);
        if (!rc) take_linear(&b, &a->out_proj, c->out_dims, c->D, 0, 1);
        if (!rc) take_linear(&b, &a->embed, D_text, c->out_dims, 0, 0);
        rc = b.rc;
    }
    free(list);
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
    const plume_audio_config *c = &f->a->c;
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
    const plume_audio_config *c = &f->a->c;
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
    const plume_audio_config *c = &f->a->c;
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
    const plume_audio_config *c = &a->c;
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
        for (int32_t l = 0; !rc && l < c->L; l++) {
            if ((rc = enc_aborted(r, err))) break;
            f.ly = &a->layer[l];
            feed_forward(&f, &f.ly->ff1);
            attention(&f);
            light_conv(&f);
            feed_forward(&f, &f.ly->ff2);
            norm_rows(&f, f.x, f.x, f.ly->norm_out);
        }
        if (!rc) enc_linear_apply(r, &a->out_proj, soft, f.x, T);
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
