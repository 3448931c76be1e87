/* scratch.c -- the buffers of one forward step (plume_scratch, model.h): sized once from the
 * config, the thread count and the rows and attention span a step may have, so that nothing
 * is allocated in the hot loop. A session owns one for its own steps, a plume_batch one for
 * all the sessions it steps together. Knows the layout forward.c reads, not how it computes. */
#include "scratch.h"

#include "forward.h"

/* The widest row of any layer's inputs, for the int8 activations. */
static int32_t widest_input(const plume_config *c, int64_t Imax, int64_t hdmax) {
    int64_t w = Imax > c->H * hdmax ? Imax : c->H * hdmax;
    return (int32_t)(w > c->D ? w : c->D);
}

/* Grow x->part for span positions (plume_pool_size - 1 split slots at most). */
int plume_scratch_grow_part(plume_scratch *x, const plume_model *m, int64_t span) {
    const plume_config *c = &m->c;
    int32_t nth = plume_pool_size(m->pool), hdmax = c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding;
    int32_t slots = nth - 1 < PLUME_ATTN_SPLIT_SLOTS ? nth - 1 : PLUME_ATTN_SPLIT_SLOTS;
    int64_t blocks = span / PLUME_ATTN_BLOCK + 2;
    if (slots > 0 && blocks > x->part_blocks) {
        float *part = plume_alloc((size_t)slots * (size_t)blocks * (size_t)(c->H / c->Hkv) * (size_t)(hdmax + 2) * 4);
        if (!part) return -1;
        plume_dealloc(x->part);
        x->part = part;
        x->part_slots = slots;
        x->part_blocks = (int32_t)blocks;
    }
    x->span = span;
    return 0;
}

/* Every buffer of B rows; the int8 activation buffers only when the model quantizes them. */
int plume_scratch_init(plume_scratch *x, const plume_model *m, int32_t B, int64_t span, char **err) {
    const plume_config *c = &m->c;
    memset(x, 0, sizeof *x);
    int64_t D = c->D, hdmax = c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding, Imax = 0;
    for (int32_t l = 0; l < c->L; l++) Imax = c->I[l] > Imax ? c->I[l] : Imax;
    int32_t nth = plume_pool_size(m->pool);
    x->B = B;
    x->h = plume_alloc((size_t)(B * D) * 4);
    x->xa = plume_alloc((size_t)(B * D) * 4);
    x->q = plume_alloc((size_t)(B * c->H * hdmax) * 4);
    x->att = plume_alloc((size_t)(B * c->H * hdmax) * 4);
    x->o = plume_alloc((size_t)(B * D) * 4);
    x->gate = plume_alloc((size_t)(B * Imax) * 4);
    x->up = plume_alloc((size_t)(B * Imax) * 4);
    x->ple = plume_alloc((size_t)(B * c->L * c->Dp) * 4);
    x->plg = plume_alloc((size_t)(B * c->Dp) * 4);
    int ok = x->h && x->xa && x->q && x->att && x->o && x->gate && x->up && x->ple && x->plg;
    for (int t = 0; t < 2; t++) {
        x->rope_cos[t] = plume_alloc((size_t)(B * hdmax / 2) * 4);
        x->rope_sin[t] = plume_alloc((size_t)(B * hdmax / 2) * 4);
        ok = ok && x->rope_cos[t] && x->rope_sin[t];
    }
    for (int32_t l = 0; l < c->L; l++) {
        if (c->kv_src[l] != l) continue;
        size_t step = (size_t)B * (size_t)(c->Hkv * c->hd[l]) * 4;
        x->k_new[l] = plume_alloc(step);
        x->v_new[l] = plume_alloc(step);
        x->k8_new[l] = plume_alloc(step / 4);
        x->v8_new[l] = plume_alloc(step / 4);
        x->ks_new[l] = plume_alloc((size_t)B * (size_t)c->Hkv * 4);
        x->vs_new[l] = plume_alloc((size_t)B * (size_t)c->Hkv * 4);
        ok = ok && x->k_new[l] && x->v_new[l] && x->k8_new[l] && x->v8_new[l] && x->ks_new[l] && x->vs_new[l];
    }
    size_t group = (size_t)(c->H / c->Hkv);
    x->scores = plume_alloc((size_t)nth * group * PLUME_ATTN_BLOCK * 4);
    x->blk = plume_alloc((size_t)nth * group * (size_t)(hdmax + 4) * 4);
    x->row_ent = plume_alloc((size_t)B * 4);
    x->row_pos = plume_alloc((size_t)B * 4);
    x->row_head = plume_alloc((size_t)B * 4);
    ok = ok && x->scores && x->blk && x->row_ent && x->row_pos && x->row_head;
    if (ok && plume_scratch_grow_part(x, m, span)) ok = 0;
    if (ok && m->qact_matmul) {
        int32_t widest = widest_input(c, Imax, hdmax);
        x->xq = plume_alloc((size_t)(B * plume_qact_stride(widest)));
        x->xs = plume_alloc((size_t)(B * plume_qact_groups(widest)) * 4);
        x->xcor = plume_alloc((size_t)(B * plume_qact_lanes(widest)) * 4);
        x->xq_in = plume_alloc((size_t)(B * plume_qact_stride((int32_t)D)));
        x->xs_in = plume_alloc((size_t)(B * plume_qact_groups((int32_t)D)) * 4);
        x->xcor_in = plume_alloc((size_t)(B * plume_qact_lanes((int32_t)D)) * 4);
        ok = x->xq && x->xs && x->xcor && x->xq_in && x->xs_in && x->xcor_in;
    }
    if (!ok) {
        plume_scratch_free(x);
        return plume_fail(err, PLUME_ENOMEM, "out of memory for a step scratch of %d tokens", B);
    }
    return 0;
}

/* Free every buffer (plume_dealloc(NULL) is a no-op, so a half-made scratch frees too). */
void plume_scratch_free(plume_scratch *x) {
    float *bufs[] = {x->h, x->xa, x->q, x->att, x->o, x->gate, x->up, x->ple, x->plg, x->rope_cos[0],
                     x->rope_cos[1], x->rope_sin[0], x->rope_sin[1], x->scores, x->blk, x->part, x->xs, x->xs_in};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) plume_dealloc(bufs[i]);
    for (int32_t l = 0; l < PLUME_MAX_LAYERS; l++) {
        plume_dealloc(x->k_new[l]);
        plume_dealloc(x->v_new[l]);
        plume_dealloc(x->k8_new[l]);
        plume_dealloc(x->v8_new[l]);
        plume_dealloc(x->ks_new[l]);
        plume_dealloc(x->vs_new[l]);
    }
    plume_dealloc(x->xq);
    plume_dealloc(x->xcor);
    plume_dealloc(x->xq_in);
    plume_dealloc(x->xcor_in);
    plume_dealloc(x->row_ent);
    plume_dealloc(x->row_pos);
    plume_dealloc(x->row_head);
    memset(x, 0, sizeof *x);
}
