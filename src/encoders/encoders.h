/* encoders.h -- the encoders room: what src/media/ made of a file (mel frames, pixels) -> soft
 * tokens, and soft tokens -> rows of the decoder's input embeddings [n, D].
 *
 * Owns: the towers' weights (a safetensors file per tower, HF tensor names, read as float32
 * views), their forward passes, and the multimodal embedders (embed_audio, embed_vision).
 * May call: common.h, config.h (the towers' configs), safetensors.h, kernels/ (the matmuls and
 * elementwise tables), pool.h.
 * Must not know: files of media (src/media/ decodes them), the decoder, sessions, the
 * tokenizer or the prompt: an encoder returns rows, forward.c places them.
 *
 * Files, in calling order (the room's one header is this one; tower_ names the step):
 *   tensors.c        a tower's safetensors file -> float32 views by name and shape
 *   ops.c            what the audio tower runs on: parallel matmuls, clipped linears, rows on
 *                    the pool
 *   tower_audio.c    the audio tower (conformer, gemma4-multimodal.md §3.3-3.4) and embed_audio
 *   tower_vision.c   the vision tower (gemma4-multimodal.md §2.3-2.4) and embed_vision
 */
#ifndef PLUME_ENCODERS_H
#define PLUME_ENCODERS_H

#include "common.h"
#include "config.h"
#include "kernels/kernels.h"
#include "pool.h"
#include "safetensors.h"

/* ---- a tower's weights file (tensors.c) ------------------------------------------------- */

/* A safetensors file mapped once: float32 tensors are viewed in place (when 4-byte aligned),
 * BF16 and F16 ones (a Hugging Face checkpoint) are converted into copies the store owns. */
typedef struct {
    st_file st;
    plume_map map;
    float **owned;   /* [n_owned] converted copies */
    int32_t n_owned, cap_owned;
} enc_tensors;

/* Open path (header checked by st_open, file mapped). */
int enc_tensors_open(enc_tensors *ts, const char *path, char **err);
void enc_tensors_free(enc_tensors *ts);
/* The float32 values of tensor `name`, which must have exactly shape[ndim] (ndim 0: a scalar,
 * stored as [] or [1]); PLUME_EFORMAT naming the tensor when it is missing, of another shape
 * or of a dtype other than F32/BF16/F16; PLUME_ENOMEM. */
int enc_tensors_get(enc_tensors *ts, const char *name, int32_t ndim, const int64_t *shape, const float **out,
                    char **err);
/* An optional scalar: *v is left alone when there is no tensor of that name. */
int enc_tensors_scalar(enc_tensors *ts, const char *name, float *v, char **err);

/* ---- shared forward pieces (ops.c) ------------------------------------------------------- */

/* A linear layer, optionally clipped: y = clamp(W clamp(x, in_lo, in_hi), out_lo, out_hi)
 * (Gemma4ClippableLinear; bounds +-inf when the file has none), plus a bias or not. */
typedef struct {
    plume_weight w;        /* [out, in] float32 */
    const float *bias;     /* [out] or NULL */
    float in_lo, in_hi;    /* input clamp */
    float out_lo, out_hi;  /* output clamp */
} enc_linear;

/* Where an encoder runs: the kernel table and the pool (NULL: the calling thread alone), and
 * who may stop it (plume_encoder_set_abort). */
typedef struct {
    const plume_kernels *k;
    plume_pool *pool;
    int (*abort)(void *ctx); /* NULL, or asked between layers and clips: nonzero stops the encode */
    void *abort_ctx;
} enc_run;

/* PLUME_ECANCELED (with a message in *err) when r's abort callback asks to stop, else 0. */
int enc_aborted(const enc_run *r, char **err);

/* Threads of the pool (1 without one): the size of per-thread scratch. */
int32_t enc_threads(const enc_run *r);
/* Y[T, w.rows] (row stride ldy) = X[T, w.cols] (row stride ldx) @ W^T, rows split across the pool. */
void enc_matmul(const enc_run *r, float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w);
/* y[n] = min(max(x[n], lo), hi) as torch.clamp: hi wins when lo > hi, NaN stays NaN; y may be x. */
void enc_clamp(float *y, const float *x, int64_t n, float lo, float hi);
/* y[T, out] = lin(x[T, in]) (rows packed): x is clamped in place when lin has input bounds. */
void enc_linear_apply(const enc_run *r, const enc_linear *lin, float *y, float *x, int32_t T);
/* fn(ctx, t) for every row t < T on the pool. */
typedef void (*enc_row_fn)(void *ctx, int32_t t);
void enc_rows(const enc_run *r, int32_t T, enc_row_fn fn, void *ctx);

/* ---- the audio tower (tower_audio.c) ---------------------------------------------------- */

/* One tensor of a tower file: its checkpoint name, shape (ndim 0: a scalar) and whether it may
 * be missing (the clip bounds: +-inf then). */
typedef struct {
    char name[112];
    int32_t ndim;
    int64_t shape[4];
    int32_t optional;
} enc_tensor_spec;

/* The tensors of the audio tower of config c and of embed_audio for a decoder of width D_text,
 * in the order enc_audio_open reads them: writes up to cap into out, returns how many there
 * are (E2B: 752 with their clip bounds). The converter checks a checkpoint with it, synth
 * makes one. */
int32_t enc_audio_tensor_list(const plume_audio_config *c, int32_t D_text, enc_tensor_spec *out, int32_t cap);

/* A half-step feed-forward: x += residual * rms(down(silu(up(rms(x, pre)))), post). */
typedef struct {
    const float *pre_norm, *post_norm; /* [D] */
    enc_linear up;                     /* ffw_layer_1 [4D, D] */
    enc_linear down;                   /* ffw_layer_2 [D, 4D] */
} enc_audio_ff;

/* One conformer block: FF1, local attention, light convolution, FF2, norm_out. */
typedef struct {
    enc_audio_ff ff1, ff2;
    const float *norm_pre_attn, *norm_post_attn, *norm_out; /* [D] */
    enc_linear q, k, v, post;   /* [D, D] */
    float *q_scale;             /* [hd] hd^-0.5 / ln 2 * softplus(per_dim_scale), owned */
    float *rel;                 /* [left - 1, D] relative_k_proj of the sinusoid at distance d = 0.., owned */
    const float *conv_pre_norm; /* [D] lconv1d.pre_layer_norm */
    const float *conv_norm;     /* [D] lconv1d.conv_norm */
    enc_linear conv_start;      /* [2D, D] linear_start (then GLU) */
    enc_linear conv_end;        /* [D, D] linear_end */
    float *dw;                  /* [K, D] depthwise_conv1d, transposed from [D, 1, K], owned */
} enc_audio_layer;

#define ENC_AUDIO_MAX_LAYERS 64 /* config.c's limit on num_hidden_layers */

/* The audio tower and its embedder, views into one weights file. */
typedef struct {
    plume_audio_config c;
    enc_tensors ts;
    int32_t D_text;         /* embed_audio's output width: the decoder's D */
    int32_t F0, F1;         /* mel bins after the first and second stride-2 convolution: 64, 32 */
    float *conv0;           /* [C0, 9] layer0.conv, columns (kt * 3 + kf), owned */
    const float *norm0;     /* [C0] layer0.norm (LayerNorm, no bias) */
    float *conv1;           /* [C1, 9 * C0] layer1.conv, columns (kt * 3 + kf) * C0 + c, owned */
    const float *norm1;     /* [C1] */
    enc_linear in_proj;     /* [D, F1 * C1] input_proj_linear, columns f * C1 + c */
    enc_audio_layer layer[ENC_AUDIO_MAX_LAYERS];
    enc_linear out_proj;    /* [out_dims, D] + bias */
    enc_linear embed;       /* [D_text, out_dims] embed_audio.embedding_projection */
} enc_audio;

/* Load the tower of config c for a decoder of width D_text from a safetensors file holding
 * `model.audio_tower.*` and `model.embed_audio.*` under their HF names (a bundle's
 * audio.safetensors, or a checkpoint; F32, BF16 or F16): every tensor of
 * enc_audio_tensor_list. PLUME_EFORMAT names a missing tensor or a wrong shape. */
int enc_audio_open(enc_audio *a, const plume_audio_config *c, int32_t D_text, const char *path, char **err);
void enc_audio_free(enc_audio *a);

/* Soft tokens of a clip with n_valid valid mel frames: two stride-2 convolutions. */
int32_t enc_audio_tokens(int32_t n_valid);

/* The tower on one clip: mel frames [>= n_valid, F] of which [0, n_valid) are valid (later
 * ones are never read) -> soft [enc_audio_tokens(n_valid), out_dims] (HF last_hidden_state,
 * valid tokens). PLUME_EINVAL for n_valid < 1 or over 30 s; PLUME_ENOMEM. */
int enc_audio_tower(const enc_audio *a, const enc_run *r, const float *mel, int32_t n_valid, float *soft, char **err);
/* embed_audio: emb[n, D_text] = W rms_norm_noscale(soft[n, out_dims]) (the norm before the
 * projection, as HF). 0 or PLUME_ENOMEM. */
int enc_audio_embed(const enc_audio *a, const enc_run *r, const float *soft, int32_t n, float *emb, char **err);

/* ---- the vision tower (tower_vision.c) ---------------------------------------------------
 * The vision tower of a bundle's vision.safetensors (docs/MEDIA.md, shared/spec/
 * gemma4-multimodal.md §2.3-2.4): its tensor list (shared with the converter's check), loading
 * and validating it, and its forward: the patch embedding with the 2-D position tables, the
 * encoder layers (sandwich RMSNorms, clipped linears, q/k norms, 2-D RoPE, bidirectional
 * attention at scale 1), the 3x3 average pool times sqrt(D), and embed_vision (a scale-free
 * RMSNorm, then the projection to the decoder's width). */

/* A clipped linear: y = clamp(W clamp(x, in_min, in_max), out_min, out_max); a bound the
 * checkpoint lacks (or a tower without use_clipped_linears) is +-inf. */
typedef struct {
    plume_weight w;                /* [out, in] F32 */
    float in_min, in_max, out_min, out_max;
} enc_vision_linear;

/* One encoder layer: views into the mapped file. */
typedef struct {
    enc_vision_linear q, k, v, o;     /* [H*hd, D] x3, [D, H*hd] */
    enc_vision_linear gate, up, down; /* [I, D] x2, [D, I] */
    const float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff; /* [D], applied as x * w */
    const float *q_norm, *k_norm;     /* [hd] */
} enc_vision_layer;

/* An opened tower. */
typedef struct {
    plume_vision_config c;
    int32_t D_text;                /* the decoder's width: embed_vision's output */
    plume_map map;                 /* vision.safetensors */
    plume_weight patch_proj;       /* [D, patch*patch*3] patch_embedder.input_proj */
    const float *pos_table;        /* [2, n_pos, D] the x table, then the y table */
    enc_vision_layer *layer;       /* [L] */
    plume_weight embed_proj;       /* [D_text, D] embed_vision.embedding_projection */
    float inv_freq[64];            /* [hd/4] RoPE frequencies of each axis' half of a head */
} enc_vision;

/* The tensors of a tower of config c for a decoder of width D_text: writes up to cap into out
 * and returns how many there are (E2B: 659; the audio tower's list above has the same form, so
 * the converter checks both the same way). The converter checks a checkpoint with it, the
 * loader a bundle. */
int32_t enc_vision_tensor_list(const plume_vision_config *c, int32_t D_text, enc_tensor_spec *out, int32_t cap);

/* Map path (a bundle's vision.safetensors) and check every tensor against c. */
int enc_vision_open(enc_vision **out, const char *path, const plume_vision_config *c, int32_t D_text, char **err);
void enc_vision_free(enc_vision *v);

/* The tower on one image's patches: pix [ph*pw, patch*patch*3] (media_patchify), pos
 * [ph*pw, 2] = (x, y), with ph and pw multiples of the pool. Writes soft [n, D] (the pooled
 * tower output, HF's last_hidden_state; may be NULL) and emb [n, D_text], n = ph*pw / pool^2,
 * with run's kernel table on its pool's threads. 0, PLUME_EINVAL (a grid the tower cannot take),
 * PLUME_ENOMEM, PLUME_ECANCELED (run's abort callback asked to stop, checked between layers). */
int enc_vision_encode(const enc_vision *v, const enc_run *run, const float *pix,
                      const int32_t *pos, int32_t ph, int32_t pw, float *soft, float *emb, char **err);

#endif /* PLUME_ENCODERS_H */
