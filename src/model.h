/* model.h -- the opened bundle: weights as typed views into mapped files, per layer; and
 * the session with its three chunk states. forward.c computes one step over these. */
#ifndef PLUME_MODEL_H
#define PLUME_MODEL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common.h"
#include "config.h"
#include "encoders/encoders.h"
#include "kernels/kernels.h"
#include "kernels/qact.h"
#include "pool.h"

/* One decoder layer: views into a mapped chunk, weights stored [out, in]. */
typedef struct {
    plume_weight q_proj;    /* [H*hd, D]   hd = hd_sliding or hd_full */
    plume_weight k_proj;    /* [Hkv*hd, D] only if the layer owns a cache */
    plume_weight v_proj;    /* [Hkv*hd, D] */
    plume_weight o_proj;    /* [D, H*hd] */
    plume_weight gate_proj; /* [I, D]      I doubles on KV-shared layers */
    plume_weight up_proj;   /* [I, D] */
    plume_weight down_proj; /* [D, I] */
    plume_weight pl_gate;   /* [Dp, D]     per_layer_input_gate */
    plume_weight pl_proj;   /* [D, Dp]     per_layer_projection */
    const float *attn_norm;     /* [D] input_layernorm, applied as x * w (no +1) */
    const float *post_attn_norm;/* [D] */
    const float *pre_ff_norm;   /* [D] */
    const float *post_ff_norm;  /* [D] */
    const float *post_pl_norm;  /* [D] post_per_layer_input_norm */
    const float *q_norm;        /* [hd] */
    const float *k_norm;        /* [hd] (owners only) */
    float layer_scalar;         /* multiplies the whole residual stream at the end */
} plume_layer;

struct plume_model {
    plume_config c;
    char *dir;
    plume_map embed_q8, embed_scales;  /* int8 [V, D], fp16 [V] */
    plume_map ple_q8, ple_scales;      /* int8 [V, L*Dp], fp16 [V] */
    plume_map proj_map, pnorm_map;     /* fp16 [L*Dp, D], fp32 [Dp] */
    plume_map chunk_map[PLUME_N_CHUNKS];
    plume_layer layer[PLUME_MAX_LAYERS];
    plume_weight ple_proj;             /* F16 [L*Dp, D] per_layer_model_projection */
    float *ple_norm;                   /* [Dp] per_layer_projection_norm (copied: tiny) */
    const float *final_norm;           /* [D] */
    plume_weight head;                 /* [V, D]: the q8 sidecar or the chunk's lm_head */
    float *inv_freq[2];                /* [hd/2] RoPE inverse frequencies: sliding, full */
    const plume_kernels *k;
    plume_qact_quantize_fn qact_quantize; /* int8 activations (exact = 0), or NULL */
    plume_qact_matmul_fn qact_matmul;
    plume_pool *pool;
    int32_t tiles_cols;                /* widest PLUME_L_TILES weight (0: none) */
    uint8_t *untile;                   /* [threads, untile_bytes]: a tiled group unpacked for */
    size_t untile_bytes;               /* a kernel that reads rows (forward.c) */
    plume_tokenizer *tok;
    int32_t end_ids[16];               /* [n_end] ids that end a model turn (plume_model_ends_turn) */
    int32_t n_end;
    enc_vision *vision;              /* the vision tower (vision.safetensors), or NULL */
    enc_audio *audio;                  /* the audio tower (audio.safetensors), or NULL */
    uint64_t decode_bytes;
    uint64_t identity;                 /* hash of model_config.json, file sizes, chunk headers */
    pthread_t prefault;                /* maps the weights' page tables in the background, */
    atomic_flag prefault_claimed;      /* started by the first step of any session */
    int32_t prefault_started;
};

/* The KV cache of one layer that owns one. K and V are stored post-norm, post-RoPE. */
typedef struct {
    int32_t layer;
    int32_t slots;    /* W + n_rewind (ring, slot = pos % slots) or n_ctx (linear) */
    int32_t ring;     /* 1 for sliding layers */
    int32_t width;    /* Hkv * hd */
    float *k, *v;     /* [slots, width] float cache, or NULL when q8 */
    int8_t *k8, *v8;  /* [slots, width] int8 cache (kv_bits 8, full layers only) */
    float *ks, *vs;   /* [slots, Hkv] their scales: row = q * scale */
} plume_kv;

/* The state of one chunk: the caches of its layers that own one. */
typedef struct {
    int32_t first, end; /* layers [first, end) */
    int32_t n_kv;
    plume_kv *kv;
} plume_chunk_state;

/* The buffers of one forward step of up to B token rows, which may belong to several
 * sessions (a batch): a session owns one for its own steps, a plume_batch one for all. */
typedef struct {
    int32_t B;       /* rows it holds */
    int64_t span;    /* scores per query head: the longest attention span it can hold */
    float *h;        /* [B, D]     residual stream */
    float *xa;       /* [B, D]     normed input of a sub-block */
    float *q;        /* [B, H*hd_max] */
    float *att;      /* [B, H*hd_max] attention output */
    float *o;        /* [B, D] */
    float *gate, *up;/* [B, I_max] */
    float *ple;      /* [B, L*Dp]  per-layer inputs */
    float *plg;      /* [B, Dp] */
    float *rope_cos[2], *rope_sin[2]; /* [B, hd/2] per type */
    float *k_new[PLUME_MAX_LAYERS];   /* [B, width] the step's K of a cache-owning layer, */
    float *v_new[PLUME_MAX_LAYERS];   /* and V; committed to each session after the step */
    int8_t *k8_new[PLUME_MAX_LAYERS]; /* [B, width] the same rounded as an int8 cache holds them */
    int8_t *v8_new[PLUME_MAX_LAYERS]; /*   (rows of kv_bits 8 sessions only), */
    float *ks_new[PLUME_MAX_LAYERS];  /* [B, Hkv] with their scales */
    float *vs_new[PLUME_MAX_LAYERS];
    float *scores;   /* [threads, H/Hkv, PLUME_ATTN_BLOCK] attention weights of a block */
    float *blk;      /* [threads, H/Hkv * (hd_max + 4)] a block's state and the running m, l */
    float *part;     /* [part_slots, part_blocks, H/Hkv * (hd_max + 2)] block states of split rows */
    int32_t part_slots;  /* (row, KV head) pairs whose blocks may be split across threads */
    int32_t part_blocks; /* blocks per pair: enough for span */
    int8_t *xq;      /* [B, qact stride of the widest input] int8 activations (qact.h) */
    float *xs;       /* [B, qact groups] block scales */
    int32_t *xcor;   /* [B, qact lanes] u8 x s8 corrections */
    int8_t *xq_in;   /* [B, qact stride of D] the gate/up loop's int8 input, while that loop */
    float *xs_in;    /*   writes the rounded gelu(gate) * up, the down matmul's, into xq */
    int32_t *xcor_in;
    int32_t *row_ent;/* [B] entry of each row */
    int32_t *row_pos;/* [B] position of each row */
    int32_t *row_head;/* [B] rows the head runs on */
} plume_scratch;

/* Rows of media a session was fed: positions [pos, pos + n) took these rows (a copy), so a
 * rewind into them can recompute and a saved session carries them. */
typedef struct {
    int32_t pos, n;
    float *rows;     /* [n, D] */
} plume_media_span;

struct plume_session {
    plume_model *m;
    int32_t n_ctx, n_batch;
    int32_t n_past;
    int32_t n_rewind;        /* extra ring slots beyond W */
    int32_t ring_slots;      /* slots of every sliding ring (W + n_rewind), 0 if none is a ring */
    int32_t kv_bits;         /* 32 or 8 (full-attention caches) */
    int32_t snap_every;      /* 0: no snapshots */
    int32_t n_snap;          /* snapshot k holds the rings at position (k + 1) * snap_every */
    int32_t snap_valid;      /* snapshots [0, snap_valid) are current */
    float *snap;             /* [n_snap, ring caches, 2, W - 1, width] */
    size_t snap_stride;      /* floats per snapshot */
    int32_t *tokens;                      /* [n_ctx] */
    uint64_t *keys;                       /* [n_ctx] each position's key (embd.h; 0: a token), or
                                             NULL while the session has seen no media */
    plume_media_span *spans;              /* [n_spans] the media rows fed, by position */
    int32_t n_spans, cap_spans;
    plume_chunk_state chunk[PLUME_N_CHUNKS];
    plume_kv *kv_of[PLUME_MAX_LAYERS];    /* cache a layer reads (its own or kv_src's) */
    plume_scratch x;                      /* [n_batch] rows, span n_ctx + n_batch */
    /* the MTP drafter's handover (drafter.c): the final-norm rows of the last step's head */
    float *hid;              /* [n_batch, D] rows of positions [hid_pos, hid_pos + hid_n) */
    int32_t hid_pos, hid_n;
    int32_t fwd_end;         /* the last step's end: its K/V reach position fwd_end - 1 */
    /* what the sliding rings hold (session.c, rewinding): every step's positions overwrite
     * the slots of those `ring_slots` before them, and a rewind leaves the later positions'
     * K/V in their slots, so positions up to ring_end - ring_slots may be gone whatever
     * n_past is now; and after a ring restore only [ring_floor, n_past) is known whole */
    int32_t ring_end;        /* one past the highest position written since the last restore */
    int32_t ring_floor;      /* the lowest position the last restore (or none: 0) vouches for */
    /* tests: when set, a step of T tokens copies the residual stream before layer 0 and
     * after every layer into trace_hidden [L+1, T, D], and the per-layer inputs into
     * trace_ple [T, L, Dp] */
    float *trace_hidden, *trace_ple;
};

/* Whether every one of ids[0, n) is in the vocabulary: 0, or PLUME_EINVAL naming the first
 * that is not and its index (what a feed and a batch say alike). */
int plume_model_check_ids(const plume_model *m, const int32_t *ids, int32_t n, char **err);
/* Start mapping the weights' page tables in the background (once per model). */
void plume_model_prefault(plume_model *m);
/* The maps every step reads whole, mapped dense (the chunks, the PLE projection, the tied
 * head's rows), into maps; returns how many (bandwidth.c streams them). */
enum { PLUME_DENSE_MAPS = 5 };
int plume_model_dense_maps(const plume_model *m, const plume_map *maps[PLUME_DENSE_MAPS]);

#endif
