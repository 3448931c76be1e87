/* session.c -- a conversation's state: the three chunk states (KV caches), the tokens so far
 * and the scratch of a step, all allocated once at creation. */
#include <stdio.h>
#include <stdlib.h>

#include "forward.h"

plume_session_params plume_session_default_params(void) {
    plume_session_params p = {.n_ctx = 0, .n_batch = 64};
    return p;
}

/* Allocate the caches of chunk ci's layers that own one. */
static int chunk_state_init(plume_session *s, int32_t ci, char **err) {
    const plume_config *c = &s->m->c;
    plume_chunk_state *st = &s->chunk[ci];
    st->first = c->chunk[ci];
    st->end = c->chunk[ci + 1];
    for (int32_t l = st->first; l < st->end; l++) st->n_kv += c->kv_src[l] == l;
    st->kv = calloc((size_t)st->n_kv + 1, sizeof *st->kv);
    if (!st->kv) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int32_t i = 0;
    for (int32_t l = st->first; l < st->end; l++) {
        if (c->kv_src[l] != l) continue;
        plume_kv *kv = &st->kv[i++];
        kv->layer = l;
        kv->ring = !c->is_full[l];
        kv->slots = kv->ring && c->W < s->n_ctx ? c->W : s->n_ctx;
        kv->width = c->Hkv * c->hd[l];
        size_t cache = (size_t)kv->slots * (size_t)kv->width, step = (size_t)s->n_batch * (size_t)kv->width;
        kv->k = plume_alloc(cache * 4);
        kv->v = plume_alloc(cache * 4);
        kv->k_new = plume_alloc(step * 4);
        kv->v_new = plume_alloc(step * 4);
        if (!kv->k || !kv->v || !kv->k_new || !kv->v_new)
            return plume_fail(err, PLUME_ENOMEM, "out of memory for the KV cache of layer %d (%zu MB)", l,
                              cache * 8 >> 20);
        s->kv_of[l] = kv;
    }
    return 0;
}

int plume_session_new(plume_session **out, plume_model *m, const plume_session_params *pp, char **err) {
    *out = NULL;
    plume_session_params p = pp ? *pp : plume_session_default_params();
    const plume_config *c = &m->c;
    plume_session *s = calloc(1, sizeof *s);
    if (!s) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    s->m = m;
    s->n_ctx = p.n_ctx > 0 ? p.n_ctx : c->n_ctx;
    s->n_batch = p.n_batch > 0 ? p.n_batch : 64;
    int rc = 0;
    if (s->n_ctx > c->max_pos)
        rc = plume_fail(err, PLUME_EINVAL, "context %d exceeds the model's max_position_embeddings %d", s->n_ctx, c->max_pos);
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    for (int32_t ci = 0; !rc && ci < PLUME_N_CHUNKS; ci++) rc = chunk_state_init(s, ci, err);
    for (int32_t l = 0; !rc && l < c->L; l++) s->kv_of[l] = s->kv_of[c->kv_src[l]];
    if (!rc) {
        int64_t B = s->n_batch, D = c->D, hdmax = c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding;
        int64_t Imax = 0;
        for (int32_t l = 0; l < c->L; l++) Imax = c->I[l] > Imax ? c->I[l] : Imax;
        int32_t nth = plume_pool_size(m->pool);
        s->tokens = calloc((size_t)s->n_ctx, sizeof *s->tokens);
        s->h = plume_alloc((size_t)(B * D) * 4);
        s->xa = plume_alloc((size_t)(B * D) * 4);
        s->q = plume_alloc((size_t)(B * c->H * hdmax) * 4);
        s->att = plume_alloc((size_t)(B * c->H * hdmax) * 4);
        s->o = plume_alloc((size_t)(B * D) * 4);
        s->gate = plume_alloc((size_t)(B * Imax) * 4);
        s->up = plume_alloc((size_t)(B * Imax) * 4);
        s->ple = plume_alloc((size_t)(B * c->L * c->Dp) * 4);
        s->plg = plume_alloc((size_t)(B * c->Dp) * 4);
        for (int t = 0; t < 2; t++) {
            s->rope_cos[t] = plume_alloc((size_t)(B * hdmax / 2) * 4);
            s->rope_sin[t] = plume_alloc((size_t)(B * hdmax / 2) * 4);
        }
        s->scores = plume_alloc((size_t)nth * (size_t)(s->n_ctx + s->n_batch) * 4);
        s->hlast = plume_alloc((size_t)D * 4);
        if (!s->tokens || !s->h || !s->xa || !s->q || !s->att || !s->o || !s->gate || !s->up || !s->ple || !s->plg ||
            !s->rope_cos[0] || !s->rope_cos[1] || !s->rope_sin[0] || !s->rope_sin[1] || !s->scores || !s->hlast)
            rc = plume_fail(err, PLUME_ENOMEM, "out of memory for the session's scratch");
    }
    if (rc) {
        plume_session_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void plume_session_free(plume_session *s) {
    if (!s) return;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++) {
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            plume_kv *kv = &s->chunk[ci].kv[i];
            plume_dealloc(kv->k);
            plume_dealloc(kv->v);
            plume_dealloc(kv->k_new);
            plume_dealloc(kv->v_new);
        }
        free(s->chunk[ci].kv);
    }
    free(s->tokens);
    plume_dealloc(s->h);
    plume_dealloc(s->xa);
    plume_dealloc(s->q);
    plume_dealloc(s->att);
    plume_dealloc(s->o);
    plume_dealloc(s->gate);
    plume_dealloc(s->up);
    plume_dealloc(s->ple);
    plume_dealloc(s->plg);
    for (int t = 0; t < 2; t++) {
        plume_dealloc(s->rope_cos[t]);
        plume_dealloc(s->rope_sin[t]);
    }
    plume_dealloc(s->scores);
    plume_dealloc(s->hlast);
    free(s);
}

int plume_session_feed(plume_session *s, const int32_t *ids, int32_t n, float *logits, int32_t all, char **err) {
    const plume_config *c = &s->m->c;
    if (n < 1) return plume_fail(err, PLUME_EINVAL, "feed: no tokens");
    if (n > s->n_ctx - s->n_past)
        return plume_fail(err, PLUME_ERANGE, "%d tokens do not fit: %d of the context's %d are used", n, s->n_past,
                          s->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->V)
            return plume_fail(err, PLUME_EINVAL, "token id %d (at %d) is outside the vocabulary [0, %d)", ids[i], i, c->V);
    for (int32_t i = 0; i < n; i += s->n_batch) {
        int32_t T = n - i < s->n_batch ? n - i : s->n_batch;
        int last = i + T == n;
        float *lg = !logits ? NULL : all ? logits + (int64_t)i * c->V : last ? logits : NULL;
        plume_forward_step(s, ids + i, T, lg, all);
    }
    return 0;
}

int32_t plume_session_n_past(const plume_session *s) { return s->n_past; }
int32_t plume_session_n_ctx(const plume_session *s) { return s->n_ctx; }
const int32_t *plume_session_tokens(const plume_session *s) { return s->tokens; }
