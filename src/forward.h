/* forward.h -- one forward step of one or several sessions (forward.c). */
#ifndef PLUME_FORWARD_H
#define PLUME_FORWARD_H

#include "model.h"

/* Attention cuts a row's keys on a grid of this many absolute positions (forward.c). */
#define PLUME_ATTN_BLOCK 256
/* At most this many (row, KV head) pairs of a step split their blocks across threads. */
#define PLUME_ATTN_SPLIT_SLOTS 4

/* One session's part of a step: T validated rows at positions P..P+T-1 in scratch rows
 * row0..row0+T-1, each a token id or a given embedding (an image's soft token: it enters the
 * residual stream unscaled and its per-layer input takes the pad row, multimodal spec §2.5).
 * logits: NULL, [V] of the last token (all == 0) or [T, V] (all != 0). */
typedef struct {
    plume_session *s;
    const int32_t *ids;       /* [T] the ids (a given embedding's row keeps its placeholder id) */
    int32_t T, P, row0;
    float *logits;
    int32_t all;
    const float *const *emb; /* NULL, or [T]: a row's embedding [D], NULL for a token */
    const uint64_t *keys;    /* NULL, or [T]: each row's key in the history (0: a token; embd.h) */
} plume_step_entry;

/* Run n entries (distinct sessions of model m, rows packed from 0, at most x->B, spans
 * within x->span) as one step through scratch x, commit their K/V and advance each session.
 * Each row's results are bit-identical whatever else is in the step. out_logits: [rows
 * wanted, V] scratch for the head when n > 1 (NULL when n == 1). */
void plume_forward(const plume_model *m, plume_scratch *x, plume_step_entry *e, int32_t n, float *out_logits);

/* Run T (1 <= T <= n_batch) validated rows at the session's position, commit their K/V and
 * advance. emb, keys: as in plume_step_entry (NULL: all tokens). logits: NULL, [V] of the last
 * token (all == 0) or [T, V] (all != 0). */
void plume_forward_step(plume_session *s, const int32_t *ids, const float *const *emb, const uint64_t *keys, int32_t T,
                        float *logits, int32_t all);

#endif
