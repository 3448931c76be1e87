/* drafter.c -- Gemma 4's MTP drafter (gemma4_assistant; spec gemma4-assistant.md, docs/SPECULATIVE.md).
 *
 * A drafter step takes cat(E_target(token) * sqrt(Db), h) [2 Db], where h is the target's
 * final-norm hidden state (first step of a round) or the previous step's post_projection
 * output, projects it to the drafter's width, runs its layers (queries only: every layer
 * attends to the target's K/V of its type, as the target's caches hold them: k-normed and
 * roped at their positions, v-normed), and gives logits (no softcap) from the tied head or
 * the centroid head, and post_projection(y) for the next step. Every step of a round runs at
 * the same position (the pending token's), over the same K/V: all the positions of the
 * target's latest step up to the pending one (full layers), the last W + 1 of them (sliding).
 *
 * The bundle (convert.c) is config.json and drafter.safetensors: linears in the rows layout
 * at the bundle's precision (the head read row by row by the centroid head), vectors and
 * centroids float32, token_ordering int32. A step is one token: the matmuls take float
 * activations (the kernels of every weight type), their rows split over the target's pool. */
#include "drafter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "forward.h"
#include "safetensors.h"

#define DRAFT_MAX 64 /* tokens a round drafts at most */

/* One drafter layer: views into drafter.safetensors. */
typedef struct {
    plume_weight q, o, gate, up, down; /* [H*hd, D] [D, H*hd] [I, D] [I, D] [D, I] */
    const float *in_norm, *post_attn, *pre_ff, *post_ff; /* [D] */
    const float *q_norm;               /* [hd] */
    float scalar;                      /* layer_scalar */
} drafter_layer;

struct plume_drafter {
    plume_drafter_config c;
    plume_model *t;                    /* the target */
    plume_map map;
    st_file st;
    drafter_layer layer[PLUME_MAX_LAYERS];
    plume_weight pre, post, head;      /* [D, 2 Db] [Db, D] [V, D] */
    plume_weight centroids;            /* [n_centroids, D] float32 (ordered head only) */
    const float *norm;                 /* [D] */
    const int32_t *ordering;           /* [V] token_ordering (ordered head only) */
    int32_t src[2];                    /* the target layers whose caches it reads: sliding, full */
    /* the scratch of one step */
    float *in, *x, *a, *q, *att, *o, *gate, *up, *y, *proj; /* [2Db] [D] [D] [H*hdmax] x2 [D] [I] [I] [D] [Db] */
    float *cs, *sn;                    /* [hdmax/2] */
    float *score, *acc;                /* [group, PLUME_ATTN_BLOCK], [group, hdmax + 4] */
    float *cent, *sel;                 /* [n_centroids], [top_k * V / n_centroids] */
    int32_t *top;                      /* [top_k] */
    int32_t *sel_ids;                  /* [top_k * V / n_centroids] the token of each row of sel */
    float *logits;                     /* [V]: a step's, when the caller wants none */
    int64_t n_steps, n_rounds;
};

/* ---- opening ----------------------------------------------------------------------------- */

/* A tensor of drafter.safetensors with this dtype and shape, as a pointer into the map. */
static int dtensor_at(const plume_drafter *d, const char *name, st_dtype dt, int32_t ndim, const int64_t *shape,
                      const void **out, char **err) {
    const st_tensor *t = st_find(&d->st, name);
    if (!t) return plume_fail(err, PLUME_EFORMAT, "%s: missing tensor %s", d->st.path, name);
    int same = t->dtype == dt && t->ndim == ndim;
    for (int32_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has the wrong dtype or shape", d->st.path, name);
    if (t->offset + t->nbytes > d->map.size)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s runs past the end of the file", d->st.path, name);
    *out = d->map.data + t->offset;
    return 0;
}

/* A linear weight [rows, cols] in the rows layout at precision w (f32, bf16, q8, q4; q4 falls
 * back to q8 where cols % 32 != 0, as the converter does). */
static int dlinear(plume_drafter *d, const char *name, const char *w, int64_t rows, int64_t cols, plume_weight *out,
                   char **err) {
    *out = (plume_weight){.rows = (int32_t)rows, .cols = (int32_t)cols, .layout = PLUME_L_ROWS};
    const int64_t full[2] = {rows, cols};
    if (!strcmp(w, "f32")) return out->type = PLUME_W_F32, dtensor_at(d, name, ST_F32, 2, full, &out->data, err);
    if (!strcmp(w, "bf16")) return out->type = PLUME_W_BF16, dtensor_at(d, name, ST_BF16, 2, full, &out->data, err);
    if (strcmp(w, "q8") && strcmp(w, "q4"))
        return plume_fail(err, PLUME_EFORMAT, "%s: weights '%s' is not f32, bf16, q8 or q4", d->st.path, w);
    const int q4 = !strcmp(w, "q4") && cols % 32 == 0;
    out->type = q4 ? PLUME_W_Q4 : PLUME_W_Q8;
    const int64_t qshape[2] = {rows, q4 ? cols / 2 : cols}, q4s[2] = {rows, cols / 32};
    char sname[300];
    snprintf(sname, sizeof sname, "%s.scale", name);
    const void *s = NULL;
    int rc = dtensor_at(d, name, q4 ? ST_U8 : ST_I8, 2, qshape, &out->data, err);
    if (!rc) rc = q4 ? dtensor_at(d, sname, ST_F16, 2, q4s, &s, err) : dtensor_at(d, sname, ST_F16, 1, &rows, &s, err);
    out->scale = s;
    return rc;
}

/* A float32 vector of n elements. */
static int dvector(plume_drafter *d, const char *name, int64_t n, const float **out, char **err) {
    const void *p = NULL;
    int rc = dtensor_at(d, name, ST_F32, 1, &n, &p, err);
    *out = p;
    return rc;
}

/* Check the drafter's backbone is the target's (spec §1): what its attention reads and what
 * it hands back must have the target's shapes. */
static int check_backbone(const plume_drafter *d, const char *dir, char **err) {
    const plume_config *t = &d->t->c;
    const plume_drafter_config *c = &d->c;
    const char *what = c->Db != t->D ? "backbone_hidden_size" : c->V != t->V ? "vocab_size"
                       : c->Hkv != t->Hkv ? "num_key_value_heads" : c->hd_sliding != t->hd_sliding ? "head_dim"
                       : c->hd_full != t->hd_full ? "global_head_dim" : c->W != t->W ? "sliding_window"
                       : c->theta_sliding != t->theta_sliding || c->rot_sliding != t->rot_sliding
                           ? "rope_parameters.sliding_attention"
                       : c->theta_full != t->theta_full || c->rot_full != t->rot_full ? "rope_parameters.full_attention"
                                                                                       : NULL;
    if (!what) return 0;
    return plume_fail(err, PLUME_EFORMAT, "%s: this drafter does not match the model: its %s differs from the "
                      "model's (a drafter for another backbone; hidden %d vs %d, vocabulary %d vs %d)",
                      dir, what, c->Db, t->D, c->V, t->V);
}

/* Map the weights and make the layer views. */
static int load_weights(plume_drafter *d, const char *dir, char **err) {
    char *path = plume_path_join(dir, "drafter.safetensors");
    int rc = path ? st_open(&d->st, path, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = plume_map_open(&d->map, path, err);
    free(path);
    if (rc) return rc;
    const char *fmt = st_meta(&d->st, "format"), *w = st_meta(&d->st, "weights"), *hw = st_meta(&d->st, "head");
    if (!fmt || strcmp(fmt, "plume-drafter") || !w || !hw)
        return plume_fail(err, PLUME_EFORMAT, "%s: not a plume drafter file (convert the checkpoint again)", d->st.path);
    const plume_drafter_config *c = &d->c;
    int64_t D = c->D;
    for (int32_t l = 0; !rc && l < c->L; l++) {
        drafter_layer *L = &d->layer[l];
        int64_t qd = (int64_t)c->H * c->hd[l];
        char n[200];
        const float *sc = NULL;
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        if ((rc = dlinear(d, NAME("self_attn.q_proj.weight"), w, qd, D, &L->q, err)) ||
            (rc = dlinear(d, NAME("self_attn.o_proj.weight"), w, D, qd, &L->o, err)) ||
            (rc = dlinear(d, NAME("mlp.gate_proj.weight"), w, c->I, D, &L->gate, err)) ||
            (rc = dlinear(d, NAME("mlp.up_proj.weight"), w, c->I, D, &L->up, err)) ||
            (rc = dlinear(d, NAME("mlp.down_proj.weight"), w, D, c->I, &L->down, err)) ||
            (rc = dvector(d, NAME("input_layernorm.weight"), D, &L->in_norm, err)) ||
            (rc = dvector(d, NAME("post_attention_layernorm.weight"), D, &L->post_attn, err)) ||
            (rc = dvector(d, NAME("pre_feedforward_layernorm.weight"), D, &L->pre_ff, err)) ||
            (rc = dvector(d, NAME("post_feedforward_layernorm.weight"), D, &L->post_ff, err)) ||
            (rc = dvector(d, NAME("self_attn.q_norm.weight"), c->hd[l], &L->q_norm, err)) ||
            (rc = dvector(d, NAME("layer_scalar"), 1, &sc, err)))
            break;
#undef NAME
        L->scalar = sc[0];
    }
    if (!rc) rc = dvector(d, "norm.weight", D, &d->norm, err);
    if (!rc) rc = dlinear(d, "pre_projection.weight", w, D, 2 * (int64_t)c->Db, &d->pre, err);
    if (!rc) rc = dlinear(d, "post_projection.weight", w, c->Db, D, &d->post, err);
    if (!rc) rc = dlinear(d, "embed_tokens.weight", hw, c->V, D, &d->head, err);
    if (!rc && c->ordered) {
        const void *p = NULL;
        int64_t vs = c->V;
        rc = dlinear(d, "centroids.weight", "f32", c->n_centroids, D, &d->centroids, err);
        if (!rc) rc = dtensor_at(d, "token_ordering", ST_I32, 1, &vs, &p, err);
        d->ordering = p;
        for (int32_t i = 0; !rc && i < c->V; i++)
            if (d->ordering[i] < 0 || d->ordering[i] >= c->V)
                rc = plume_fail(err, PLUME_EFORMAT, "%s: token_ordering[%d] is outside the vocabulary", d->st.path, i);
    }
    return rc;
}

/* The step's scratch. */
static int alloc_scratch(plume_drafter *d, char **err) {
    const plume_drafter_config *c = &d->c;
    size_t hdmax = (size_t)(c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding), group = (size_t)(c->H / c->Hkv);
    size_t nsel = c->ordered ? (size_t)c->top_k * (size_t)(c->V / c->n_centroids) : 1;
    float **f[] = {&d->in, &d->x, &d->a, &d->q, &d->att, &d->o, &d->gate, &d->up, &d->y, &d->proj,
                   &d->cs, &d->sn, &d->score, &d->acc, &d->cent, &d->sel, &d->logits};
    size_t n[] = {2 * (size_t)c->Db, (size_t)c->D, (size_t)c->D, (size_t)c->H * hdmax, (size_t)c->H * hdmax,
                  (size_t)c->D, (size_t)c->I, (size_t)c->I, (size_t)c->D, (size_t)c->Db, hdmax / 2 + 1, hdmax / 2 + 1,
                  group * PLUME_ATTN_BLOCK, group * (hdmax + 4) * 2, (size_t)c->n_centroids, nsel, (size_t)c->V};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        if (!(*f[i] = plume_alloc(n[i] * sizeof(float)))) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    d->top = malloc((size_t)c->top_k * sizeof *d->top);
    d->sel_ids = malloc(nsel * sizeof *d->sel_ids);
    return d->top && d->sel_ids ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
}

int plume_drafter_open(plume_drafter **out, plume_model *m, const char *dir, char **err) {
    if (!out || !m || !dir) return plume_fail(err, PLUME_EINVAL, "drafter: a NULL argument");
    *out = NULL;
    plume_drafter *d = calloc(1, sizeof *d);
    if (!d) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    d->t = m;
    char *cfg = plume_path_join(dir, "config.json"), *text = NULL;
    int rc = cfg ? plume_read_file(cfg, &text, NULL, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = plume_drafter_config_from_hf_text(&d->c, text, cfg, err);
    free(cfg);
    free(text);
    if (!rc) rc = check_backbone(d, dir, err);
    const plume_config *t = &m->c;
    d->src[0] = d->src[1] = -1; /* the last cache-owning layer of each type (spec §3) */
    for (int32_t l = 0; !rc && l < t->L; l++)
        if (t->kv_src[l] == l) d->src[t->is_full[l]] = l;
    if (!rc && (d->src[0] < 0 || d->src[1] < 0))
        rc = plume_fail(err, PLUME_EFORMAT, "drafter: the model has no cache of one attention type");
    if (!rc) rc = load_weights(d, dir, err);
    if (!rc) rc = alloc_scratch(d, err);
    if (rc) {
        plume_drafter_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void plume_drafter_free(plume_drafter *d) {
    if (!d) return;
    float *f[] = {d->in, d->x, d->a, d->q, d->att, d->o, d->gate, d->up, d->y, d->proj,
                  d->cs, d->sn, d->score, d->acc, d->cent, d->sel, d->logits};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) plume_dealloc(f[i]);
    free(d->top);
    free(d->sel_ids);
    plume_map_free(&d->map);
    st_close(&d->st);
    free(d);
}

char *plume_drafter_find(const plume_model *m) {
    if (!m || !m->dir) return NULL;
    char *p = plume_path_join(m->dir, "drafter"), *cfg = p ? plume_path_join(p, "drafter.safetensors") : NULL;
    int ok = cfg && plume_file_exists(cfg);
    free(cfg);
    if (ok) return p;
    free(p);
    return NULL;
}

void plume_drafter_stats(const plume_drafter *d, int64_t *n_steps, int64_t *n_rounds) {
    if (n_steps) *n_steps = d ? d->n_steps : 0;
    if (n_rounds) *n_rounds = d ? d->n_rounds : 0;
}

/* ---- matmuls ------------------------------------------------------------------------------ */

/* y = W x for one token, rows split over the target's pool. */
typedef struct {
    const plume_kernels *k;
    float *y;
    const float *x;
    const plume_weight *w;
} dmm_task;

/* Rows [i0, i1) of a dmm_task. */
static void dmm_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const dmm_task *t = ctx;
    t->k->matmul[t->w->type](t->y, t->w->rows, t->x, t->w->cols, 1, t->w, (int32_t)i0, (int32_t)i1);
}

/* y [w.rows] = W x [w.cols]. */
static void dmm(const plume_drafter *d, float *y, const float *x, const plume_weight *w) {
    dmm_task t = {d->t->k, y, x, w};
    if ((int64_t)w->rows * w->cols < (1 << 16)) dmm_rows(&t, 0, 0, w->rows);
    else plume_pool_for(d->t->pool, w->rows, 64, dmm_rows, &t);
}

/* The rows ids[0, n) of the head against y, into out[0, n): each a one-row view. */
typedef struct {
    const plume_drafter *d;
    const int32_t *ids;
    const float *y;
    float *out;
} gather_task;

/* Items [i0, i1) of a gather_task. */
static void gather_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const gather_task *t = ctx;
    const plume_weight *h = &t->d->head;
    for (int64_t i = i0; i < i1; i++) {
        int64_t r = t->ids[i];
        plume_weight v = {h->type, 1, h->cols, NULL, NULL, PLUME_L_ROWS};
        switch (h->type) {
        case PLUME_W_F32: v.data = (const float *)h->data + r * h->cols; break;
        case PLUME_W_Q8:
            v.data = (const int8_t *)h->data + r * h->cols;
            v.scale = h->scale + r;
            break;
        case PLUME_W_Q4:
            v.data = (const uint8_t *)h->data + r * (h->cols / 2);
            v.scale = h->scale + r * (h->cols / 32);
            break;
        default: v.data = (const uint16_t *)h->data + r * h->cols; break; /* bf16, f16 */
        }
        t->d->t->k->matmul[v.type](t->out + i, 1, t->y, h->cols, 1, &v, 0, 1);
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

/* The runs of positions [a, z] of KV head g in kv (at most 2: a ring wraps once). */
static int32_t kv_runs(const drafter_kv *kv, int32_t g, int32_t hd, int32_t hkv, int32_t a, int32_t z,
                       plume_kv_run *r) {
    if (!kv->cache) {
        int64_t off = ((int64_t)g * kv->n + a) * hd;
        r[0] = (plume_kv_run){kv->k + off, kv->v + off, NULL, NULL, hd, 0, z - a + 1};
        return 1;
    }
    const plume_kv *c = kv->cache;
    int32_t n = 0;
    for (int32_t j = a; j <= z;) {
        int64_t slot = c->ring ? j % c->slots : j;
        int32_t len = z - j + 1;
        if (c->ring && slot + len > c->slots) len = (int32_t)(c->slots - slot);
        int64_t off = slot * c->width + (int64_t)g * hd;
        if (c->k8)
            r[n++] = (plume_kv_run){c->k8 + off, c->v8 + off, c->ks + slot * hkv + g, c->vs + slot * hkv + g, c->width,
                                    hkv, len};
        else r[n++] = (plume_kv_run){c->k + off, c->v + off, NULL, NULL, c->width, 0, len};
        j += len;
    }
    return n;
}

/* att [H, hd] = softmax(q k^T) v per head (scale 1.0) over kv's positions [lo, hi), in
 * blocks of PLUME_ATTN_BLOCK folded in order, as the target's attention does. */
static void dattention(plume_drafter *d, int32_t hd, const drafter_kv *kv) {
    const plume_drafter_config *c = &d->c;
    const int32_t group = c->H / c->Hkv;
    float *bacc = d->acc, *bm = bacc + (int64_t)group * hd, *bl = bm + group;
    float *racc = bl + group, *rm = racc + (int64_t)group * hd, *rl = rm + group;
    for (int32_t g = 0; g < c->Hkv; g++) {
        const float *q = d->q + (int64_t)g * group * hd;
        float *out = d->att + (int64_t)g * group * hd;
        if (kv->hi <= kv->lo) { /* nothing to attend to: zeros (not reached: a step has K/V) */
            memset(out, 0, (size_t)group * (size_t)hd * sizeof(float));
            continue;
        }
        for (int32_t a = kv->lo, first = 1; a < kv->hi; first = 0) {
            int32_t z = (a / PLUME_ATTN_BLOCK + 1) * PLUME_ATTN_BLOCK - 1;
            if (z > kv->hi - 1) z = kv->hi - 1;
            plume_kv_run run[2];
            int32_t nrun = kv_runs(kv, g, hd, c->Hkv, a, z, run);
            if (first) d->t->k->attn_block(racc, rm, rl, q, group, hd, run, nrun, d->score);
            else {
                d->t->k->attn_block(bacc, bm, bl, q, group, hd, run, nrun, d->score);
                for (int32_t h = 0; h < group; h++)
                    plume_attn_fold(racc + (int64_t)h * hd, &rm[h], &rl[h], bacc + (int64_t)h * hd, bm[h], bl[h], hd);
            }
            a = z + 1;
        }
        for (int32_t h = 0; h < group; h++) plume_attn_finish(out + (int64_t)h * hd, racc + (int64_t)h * hd, rl[h], hd);
    }
}

/* ---- a step ------------------------------------------------------------------------------- */

/* Rotate one head in place, NeoX layout: pairs (i, i + hd/2) for the rotated i < rot. */
static void drope(float *x, const float *cs, const float *sn, int32_t hd, int32_t rot) {
    int32_t half = hd / 2;
    for (int32_t i = 0; i < rot; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
    }
}

/* x += norm(o) * w. */
static void add_normed(const plume_drafter *d, const float *w) {
    d->t->k->rmsnorm(d->o, d->o, w, d->c.D, d->c.eps);
    for (int32_t i = 0; i < d->c.D; i++) d->x[i] += d->o[i];
}

/* One layer on the residual x at position pos. */
static void dlayer(plume_drafter *d, int32_t l, int32_t pos, const drafter_kv kv[2]) {
    const plume_drafter_config *c = &d->c;
    const drafter_layer *L = &d->layer[l];
    const plume_kernels *k = d->t->k;
    const int32_t full = c->is_full[l], hd = c->hd[l], rot = full ? c->rot_full : c->rot_sliding;
    k->rmsnorm(d->a, d->x, L->in_norm, c->D, c->eps);
    dmm(d, d->q, d->a, &L->q);
    const float *inv = d->t->inv_freq[full];
    for (int32_t i = 0; i < hd / 2; i++) {
        float ang = (float)pos * inv[i];
        d->cs[i] = cosf(ang);
        d->sn[i] = sinf(ang);
    }
    for (int32_t h = 0; h < c->H; h++) {
        float *q = d->q + (int64_t)h * hd;
        k->rmsnorm(q, q, L->q_norm, hd, c->eps);
        drope(q, d->cs, d->sn, hd, rot);
    }
    dattention(d, hd, &kv[full]);
    dmm(d, d->o, d->att, &L->o);
    add_normed(d, L->post_attn);
    k->rmsnorm(d->a, d->x, L->pre_ff, c->D, c->eps);
    dmm(d, d->gate, d->a, &L->gate);
    dmm(d, d->up, d->a, &L->up);
    k->gelu_mul(d->gate, d->up, c->I);
    dmm(d, d->o, d->gate, &L->down);
    add_normed(d, L->post_ff);
    for (int32_t i = 0; i < c->D; i++) d->x[i] *= L->scalar;
}

/* The centroid head (HF's Gemma4AssistantMaskedEmbedder) on y: the top_k clusters by
 * centroid score, the head rows of their tokens; every other logit is min(selected) - 1.
 * Returns the argmax (first on ties, by token id). */
static int32_t centroid_head(plume_drafter *d, float *logits) {
    const plume_drafter_config *c = &d->c;
    dmm(d, d->cent, d->y, &d->centroids);
    int32_t nt = 0; /* d->top [nt]: descending, the lower index first on ties (one pass) */
    for (int32_t i = 0; i < c->n_centroids; i++) {
        float v = d->cent[i];
        if (nt == c->top_k && !(v > d->cent[d->top[nt - 1]])) continue;
        int32_t u = nt < c->top_k ? nt++ : nt - 1;
        for (; u > 0 && v > d->cent[d->top[u - 1]]; u--) d->top[u] = d->top[u - 1];
        d->top[u] = i;
    }
    const int32_t per = c->V / c->n_centroids, n = c->top_k * per;
    int32_t *ids = d->sel_ids;
    for (int32_t j = 0; j < c->top_k; j++) memcpy(ids + j * per, d->ordering + (int64_t)d->top[j] * per, (size_t)per * 4);
    gather_task t = {d, ids, d->y, d->sel};
    plume_pool_for(d->t->pool, n, 64, gather_rows, &t);
    /* the argmax: every other logit is below the selected ones, so it is among them (the
     * lowest token id on ties, as a scan of all V finds it) */
    int32_t best = ids[0];
    float lo = d->sel[0], hi = d->sel[0];
    for (int32_t i = 1; i < n; i++) {
        lo = fminf(lo, d->sel[i]);
        if (d->sel[i] > hi || (d->sel[i] == hi && ids[i] < best)) hi = d->sel[i], best = ids[i];
    }
    if (logits) { /* the whole row only for a caller that asked for it */
        for (int32_t i = 0; i < c->V; i++) logits[i] = lo - 1.0f;
        for (int32_t i = 0; i < n; i++) logits[ids[i]] = d->sel[i];
    }
    return best;
}

int32_t drafter_step(plume_drafter *d, const float *in, int32_t pos, const drafter_kv kv[2], float *logits,
                     float *proj, float *normed) {
    const plume_drafter_config *c = &d->c;
    dmm(d, d->x, in, &d->pre); /* not scaled: inputs_embeds */
    for (int32_t l = 0; l < c->L; l++) dlayer(d, l, pos, kv);
    d->t->k->rmsnorm(d->y, d->x, d->norm, c->D, c->eps);
    if (normed) memcpy(normed, d->y, (size_t)c->D * sizeof(float));
    if (proj) dmm(d, proj, d->y, &d->post);
    d->n_steps++;
    if (c->ordered) return centroid_head(d, logits);
    if (!logits) logits = d->logits;
    dmm(d, logits, d->y, &d->head);
    int32_t best = 0;
    for (int32_t i = 1; i < c->V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

void drafter_embed(const plume_drafter *d, int32_t token, float *in) {
    const plume_model *m = d->t;
    const int64_t D = m->c.D;
    const int8_t *q = (const int8_t *)m->embed_q8.data + (int64_t)token * D;
    float f = plume_f16_to_f32(((const uint16_t *)m->embed_scales.data)[token]) / 127.0f, s = (float)m->c.embed_scale;
    for (int64_t i = 0; i < D; i++) in[i] = (float)q[i] * f * s; /* the target's own embedding (forward.c) */
}

int drafter_session_kv(const plume_drafter *d, const plume_session *s, drafter_kv kv[2]) {
    /* HF crops the latest step's K/V to the first n_past + 1 positions: the pending token's
     * own is there when that step ran past it (a rejected draft's, spec §4) */
    int32_t hi = s->fwd_end > s->n_past ? s->n_past + 1 : s->n_past;
    if (hi <= 0) return 1;
    for (int32_t t = 0; t < 2; t++) {
        const plume_kv *c = s->kv_of[d->src[t]];
        int32_t lo = t ? 0 : hi - (d->c.W + 1);
        int32_t end = s->fwd_end > hi ? s->fwd_end : hi; /* a ring holds [end - slots, end) */
        if (c->ring && lo < end - c->slots) lo = end - c->slots;
        kv[t] = (drafter_kv){c, NULL, NULL, 0, lo > 0 ? lo : 0, hi};
    }
    return 0;
}

int32_t plume_drafter_draft(plume_drafter *d, const plume_session *s, int32_t pending, int32_t k, int32_t *draft,
                            float *logits, char **err) {
    if (!d || !s || !draft || k < 0 || k > DRAFT_MAX)
        return plume_fail(err, PLUME_EINVAL, "drafter: a NULL argument or k %d outside [0, %d]", k, DRAFT_MAX);
    if (s->m != d->t) return plume_fail(err, PLUME_EINVAL, "drafter: the session belongs to another model");
    if (pending < 0 || pending >= d->c.V)
        return plume_fail(err, PLUME_EINVAL, "drafter: token %d is outside the vocabulary", pending);
    const int32_t P = s->n_past, Db = d->c.Db;
    drafter_kv kv[2];
    if (k == 0 || P < 1 || s->hid_n < 1 || P - 1 < s->hid_pos || P - 1 >= s->hid_pos + s->hid_n ||
        drafter_session_kv(d, s, kv))
        return 0; /* no handover of position P - 1 (the session's last step gave no logits there) */
    d->n_rounds++;
    const float *h = s->hid + (int64_t)(P - 1 - s->hid_pos) * Db;
    int32_t tok = pending, n = 0;
    while (n < k) {
        drafter_embed(d, tok, d->in);
        memcpy(d->in + Db, h, (size_t)Db * sizeof(float));
        tok = drafter_step(d, d->in, P, kv, logits ? logits + (int64_t)n * d->c.V : NULL, d->proj, NULL);
        draft[n++] = tok;
        h = d->proj;
        int end = 0;
        for (int32_t i = 0; i < d->t->c.n_eos && !end; i++) end = tok == d->t->c.eos_ids[i];
        if (end) break; /* HF stops drafting at an end id */
    }
    return n;
}
