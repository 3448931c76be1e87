/* vision.h -- the encoders room, vision: pixels -> soft tokens [n, D_text] (docs/MEDIA.md,
 * shared/spec/gemma4-multimodal.md §2.3-2.4).
 *
 * Owns: the vision tower of a bundle's vision.safetensors (its tensor list, shared with the
 * converter's check; loading and validating it) and its forward: the patch embedding with the
 * 2-D position tables, the encoder layers (sandwich RMSNorms, clipped linears, q/k norms,
 * 2-D RoPE, bidirectional attention at scale 1), the 3x3 average pool times sqrt(D), and
 * embed_vision (a scale-free RMSNorm, then the projection to the decoder's width).
 * May call: kernels/ (the table: matmuls, rmsnorm, gelu_mul, softmax), pool, safetensors,
 * config (the vision config), common. Must not know: the decoder (model.h, forward.c),
 * sessions, image files (media/ makes the patches).
 *
 * Files: vision.c (load, forward). The audio tower (encoders/audio.c) will sit beside it. */
#ifndef PLUME_ENCODERS_VISION_H
#define PLUME_ENCODERS_VISION_H

#include "config.h"
#include "encoders/encoders.h"
#include "kernels/kernels.h"
#include "pool.h"

/* A clipped linear: y = clamp(W clamp(x, in_min, in_max), out_min, out_max); a bound the
 * checkpoint lacks (or a tower without use_clipped_linears) is +-inf. */
typedef struct {
    plume_weight w;                /* [out, in] F32 */
    float in_min, in_max, out_min, out_max;
} vision_linear;

/* One encoder layer: views into the mapped file. */
typedef struct {
    vision_linear q, k, v, o;      /* [H*hd, D] x3, [D, H*hd] */
    vision_linear gate, up, down;  /* [I, D] x2, [D, I] */
    const float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff; /* [D], applied as x * w */
    const float *q_norm, *k_norm;  /* [hd] */
} vision_layer;

/* An opened tower. */
typedef struct {
    plume_vision_config c;
    int32_t D_text;                /* the decoder's width: embed_vision's output */
    plume_map map;                 /* vision.safetensors */
    plume_weight patch_proj;       /* [D, patch*patch*3] patch_embedder.input_proj */
    const float *pos_table;        /* [2, n_pos, D] the x table, then the y table */
    vision_layer *layer;           /* [L] */
    plume_weight embed_proj;       /* [D_text, D] embed_vision.embedding_projection */
    float inv_freq[64];            /* [hd/4] RoPE frequencies of each axis' half of a head */
} plume_vision;

/* One tensor a tower holds (encoders.h's enc_tensor_spec, which the audio tower's list shares:
 * the converter checks both the same way): its checkpoint name, shape (ndim 0: a scalar), and
 * whether it may be missing (the clip bounds: missing means +-inf). */
typedef enc_tensor_spec vision_tensor;

/* The tensors of a tower of config c for a decoder of width D_text: writes up to cap into out
 * and returns how many there are (E2B: 659). The converter checks a checkpoint with it, the
 * loader a bundle. */
int32_t vision_tensor_list(const plume_vision_config *c, int32_t D_text, vision_tensor *out, int32_t cap);

/* Map path (a bundle's vision.safetensors) and check every tensor against c. */
int plume_vision_open(plume_vision **out, const char *path, const plume_vision_config *c, int32_t D_text, char **err);
void plume_vision_free(plume_vision *v);

/* The tower on one image's patches: pix [ph*pw, patch*patch*3] (media_patchify), pos
 * [ph*pw, 2] = (x, y), with ph and pw multiples of the pool. Writes soft [n, D] (the pooled
 * tower output, HF's last_hidden_state; may be NULL) and emb [n, D_text], n = ph*pw / pool^2,
 * with run's kernel table on its pool's threads. 0, PLUME_EINVAL (a grid the tower cannot take),
 * PLUME_ENOMEM, PLUME_ECANCELED (run's abort callback asked to stop, checked between layers). */
int plume_vision_encode(const plume_vision *v, const enc_run *run, const float *pix,
                        const int32_t *pos, int32_t ph, int32_t pw, float *soft, float *emb, char **err);

#endif
