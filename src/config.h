/* config.h -- the model's hyper-parameters: read from a Hugging Face config.json (convert,
 * synth) or a bundle's model_config.json (runtime), derived values, and the bundle writer.
 * Every dimension comes from here; nothing is hard-coded to E2B's sizes. */
#ifndef PLUME_CONFIG_H
#define PLUME_CONFIG_H

#include "common.h"

#define PLUME_MAX_LAYERS 128
#define PLUME_N_CHUNKS 3

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
    /* bundle */
    char weights[8];     /* "f32", "bf16", "q8", "q4" */
    int32_t head_sidecar;/* 1: the head is the INT8 token sidecar; 0: lm_head in the last chunk */
} plume_config;

/* Parse a Hugging Face config.json (Gemma4ForConditionalGeneration with text_config, or a
 * bare gemma4_text config) and derive the per-layer values. */
int plume_config_from_hf(plume_config *c, const char *path, char **err);
/* The same from JSON text already in memory (name is used in messages). */
int plume_config_from_hf_text(plume_config *c, const char *json, const char *name, char **err);
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

#endif
