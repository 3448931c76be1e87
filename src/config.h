/* config.h -- the model's hyper-parameters: read from a Hugging Face config.json (convert,
 * synth) or a bundle's model_config.json (runtime), derived values, and the bundle writer.
 * Every dimension comes from here; nothing is hard-coded to E2B's sizes. */
#ifndef PLUME_CONFIG_H
#define PLUME_CONFIG_H

#include "common.h"

#define PLUME_MAX_LAYERS 128
#define PLUME_N_CHUNKS 3

/* The media token ids of config.json (top level), -1 when absent or outside the vocabulary. */
enum { PLUME_MEDIA_IMAGE, PLUME_MEDIA_BOI, PLUME_MEDIA_EOI, PLUME_MEDIA_AUDIO, PLUME_MEDIA_BOA, PLUME_MEDIA_EOA,
       PLUME_MEDIA_VIDEO, PLUME_MEDIA_NIDS };
/* Their config.json names, in enum order (also model_config.json's keys). */
extern const char *const plume_media_id_keys[PLUME_MEDIA_NIDS];

/* The vision tower's hyper-parameters: config.json's vision_config, model_config.json's
 * "vision" (multimodal spec §2.1; E2B: 768 wide, 16 layers, 12 heads of 64, 3072, patch 16,
 * pool 3, 10240 positions, theta 100, clipped linears). */
typedef struct {
    int32_t D;             /* hidden_size */
    int32_t L;             /* num_hidden_layers */
    int32_t H, Hkv, hd;    /* num_attention_heads, num_key_value_heads, head_dim */
    int32_t I;             /* intermediate_size */
    int32_t patch;         /* patch_size */
    int32_t pool;          /* pooling_kernel_size */
    int32_t n_pos;         /* position_embedding_size: rows of each axis' table */
    int32_t default_tokens;/* default_output_length: the budget when none is asked */
    int32_t clipped;       /* use_clipped_linears */
    float theta, eps;      /* rope_parameters.rope_theta, rms_norm_eps */
} plume_vision_config;

/* The audio tower's hyper-parameters: config.json's audio_config, model_config.json's "audio"
 * (multimodal spec §3.1; E2B/E4B: 1024 wide, 12 conformer layers, 8 heads of 128, subsampling
 * channels 128 and 32, depthwise kernel 5, chunk 12, context left 13 / right 0, logit cap 50,
 * residual weight 0.5, clipped linears, output 1536). Missing keys take HF's defaults (E2B's). */
typedef struct {
    int32_t D;         /* hidden_size */
    int32_t L;         /* num_hidden_layers */
    int32_t H, hd;     /* num_attention_heads; head_dim = D / H */
    int32_t C0, C1;    /* subsampling_conv_channels */
    int32_t F;         /* mel bins in: the feature extractor's feature_size, 128 */
    int32_t K;         /* conv_kernel_size (the causal depthwise convolution) */
    int32_t chunk;     /* attention_chunk_size */
    int32_t left;      /* attention_context_left: a query sees itself and left - 2 keys back */
    int32_t n_rel;     /* rows of the relative position table: (chunk + left - 1) / 2 + 1 */
    float cap;         /* attention_logit_cap */
    float residual;    /* residual_weight: the feed-forwards' half step */
    float eps;         /* rms_norm_eps (every norm, the subsampling LayerNorms too) */
    int32_t clipped;   /* use_clipped_linears */
    int32_t out_dims;  /* output_proj_dims */
} plume_audio_config;

typedef struct {
    char model_name[64];
    int32_t D;           /* hidden_size */
    int32_t L;           /* num_hidden_layers */
    int32_t H;           /* num_attention_heads */
    int32_t Hkv;         /* num_key_value_heads */
    int32_t hd_sliding;  /* head_dim */
    int32_t hd_full;     /* global_head_dim */
    int32_t Dp;          /* hidden_size_per_layer_input */
    int32_t V;           /* vocab_size */
    int32_t W;           /* sliding_window: keys a sliding query sees, itself included */
    int32_t n_kv_shared; /* num_kv_shared_layers */
    int32_t first_shared;/* L - n_kv_shared */
    int32_t I_base;      /* intermediate_size */
    int32_t double_wide; /* use_double_wide_mlp */
    int32_t n_ctx;       /* context_length of the bundle */
    int32_t max_pos;     /* max_position_embeddings */
    float theta_sliding, theta_full;
    int32_t rot_sliding, rot_full; /* rotated frequency pairs (the rest have inv_freq 0) */
    float eps, softcap;
    double embed_scale;     /* sqrt(D), exact */
    double ple_embed_scale; /* sqrt(Dp) */
    double proj_scale;      /* D^-0.5 */
    double input_scale;     /* 2^-0.5 */
    int32_t bos_id;
    int32_t n_eos;
    int32_t eos_ids[8];
    /* per layer */
    uint8_t is_full[PLUME_MAX_LAYERS];
    int32_t hd[PLUME_MAX_LAYERS];
    int32_t I[PLUME_MAX_LAYERS];
    int32_t kv_src[PLUME_MAX_LAYERS]; /* layer whose cache l reads; l itself if it owns one */
    int32_t chunk[PLUME_N_CHUNKS + 1]; /* chunk c holds layers [chunk[c], chunk[c+1]) */
    int32_t pad_id;      /* pad_token_id: the PLE row of media positions */
    int32_t media_id[PLUME_MEDIA_NIDS];
    int32_t has_vision;  /* the bundle carries vision.safetensors */
    plume_vision_config vis;
    int32_t has_audio;   /* the bundle carries audio.safetensors */
    plume_audio_config aud;
    /* bundle */
    char weights[8];     /* "f32", "bf16", "q8", "q4" */
    int32_t head_sidecar;/* 1: the head is the INT8 token sidecar; 0: lm_head in the last chunk */
} plume_config;

/* Parse a Hugging Face config.json (Gemma4ForConditionalGeneration with text_config, or a
 * bare gemma4_text config) and derive the per-layer values. */
int plume_config_from_hf(plume_config *c, const char *path, char **err);
/* The same from JSON text already in memory (name is used in messages). */
int plume_config_from_hf_text(plume_config *c, const char *json, const char *name, char **err);
/* Parse config.json's vision_config (the tower the checkpoint carries: the converter calls it
 * only when its tensors are there) into c->vis and set c->has_vision; the keys of the shape
 * are required, the rest have HF's defaults. */
int plume_config_vision_from_hf(plume_config *c, const char *json, const char *name, char **err);
/* Parse config.json's audio_config into c->aud and set c->has_audio (the converter calls it
 * only when the checkpoint carries the tower's tensors); the audio token ids must be known. */
int plume_config_audio_from_hf(plume_config *c, const char *json, const char *name, char **err);
/* Read a bundle's model_config.json. */
int plume_config_read_bundle(plume_config *c, const char *path, char **err);
/* Write model_config.json (Core ML keys plus plume's). */
int plume_config_write_bundle(const plume_config *c, const char *path, char **err);
/* Chunk boundaries as the seed (the public Core ML bundle) splits a model, after derive():
 * own = 1 + the last full-attention layer that has its own K/V (every cache a later layer
 * reads lies in [0, own)); chunks [0, (own+1)/2) [.., own + (L-own)/2) [.., L), none empty:
 * E2B [0,8) [8,25) [25,35), E4B [0,12) [12,33) [33,42) (spec gemma4-multimodal.md 4.3). */
void plume_config_default_chunks(plume_config *c);

/* RoPE inverse frequencies of a layer type: inv[hd/2], zero past the rotated pairs. */
void plume_rope_inv_freq(const plume_config *c, int32_t full, float *inv);
/* cos and sin rows [hd] of a position, exactly as HF: cat(p*f, p*f) in float32. */
void plume_rope_row(const float *inv, int32_t hd, int32_t pos, float *cos_row, float *sin_row);

/* ---- the MTP drafter (gemma4_assistant, spec gemma4-assistant.md §1) ------------------ */

/* A drafter's hyper-parameters, from its config.json (top level and text_config). */
typedef struct {
    int32_t D;           /* text_config.hidden_size (H of the spec) */
    int32_t Db;          /* backbone_hidden_size: the target's hidden size */
    int32_t L;           /* num_hidden_layers */
    int32_t H, Hkv;      /* num_attention_heads, num_key_value_heads (the target's) */
    int32_t hd_sliding, hd_full; /* head_dim, global_head_dim (the target's) */
    int32_t V, W, I;     /* vocab_size, sliding_window, intermediate_size */
    int32_t ordered;     /* use_ordered_embeddings: the centroid head */
    int32_t n_centroids, top_k; /* num_centroids, centroid_intermediate_top_k */
    float eps;
    float theta_sliding, theta_full;
    int32_t rot_sliding, rot_full; /* rotated frequency pairs, as plume_config */
    uint8_t is_full[PLUME_MAX_LAYERS];
    int32_t hd[PLUME_MAX_LAYERS];
} plume_drafter_config;

/* Parse a gemma4_assistant config.json (name in messages) and check what HF's validation
 * requires: no PLE, no MoE, no double-wide MLP, every layer KV-shared. */
int plume_drafter_config_from_hf_text(plume_drafter_config *c, const char *json, const char *name, char **err);
/* Whether config.json text names model_type gemma4_assistant (0 or 1; no error). */
int plume_config_is_drafter(const char *json);

#endif
