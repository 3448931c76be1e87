/* tower_vision.c -- Gemma 4's vision tower (HF Gemma4VisionModel + Gemma4MultimodalEmbedder; the
 * math in shared/spec/gemma4-multimodal.md §2.4) on one image's N patches:
 *
 *   h   = W_in (2 (pix - 0.5)) + (T_x[x] + T_y[y])                                 [N, D]
 *   per layer: a = rms(h, w_in)
 *              q, k, v = CL(a); q = rope2d(rms(q, w_qn)); k = rope2d(rms(k, w_kn)); v = rms(v)
 *              h += rms(CL_o(softmax(q k^T) v), w_post_attn)     (scale 1, all N keys)
 *              h += rms(CL_down(gelu_tanh(CL_gate(b)) * CL_up(b)), w_post_ff), b = rms(h, w_pre_ff)
 *   soft = avg over each 3x3 block of patches, times sqrt(D)                        [n, D]
 *   emb  = W_emb rms(soft)                                                           [n, D_text]
 *
 * CL is a clipped linear (clamp the input, multiply, clamp the output). The work is matmuls on
 * the kernel table, rows split over the pool's threads; attention runs per (head, block of
 * queries) as two matmuls on one thread each (scores against the head's keys, then the
 * softmaxed weights against its values transposed), so a block's scores stay in that thread's
 * cache. The MLP runs on blocks of rows, so its [rows, I] buffers stay small for big images.
 * Everything is float32, as HF computes it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "encoders/encoders.h"
#include "safetensors.h"

enum {
    VIS_QBLOCK = 64,  /* queries per attention item */
    VIS_MLP_ROWS = 256 /* rows per MLP block */
};

/* ---- the tensors ----------------------------------------------------------------------- */

static const char *const vis_linears[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
static const char *const vis_bounds[4] = {"input_min", "input_max", "output_min", "output_max"};
static const char *const vis_norms[4] = {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                                         "post_feedforward_layernorm"};

/* Append one entry to a tensor list (counting past cap). */
static void vt_add(enc_tensor_spec *out, int32_t cap, int32_t *n, const char *name, int32_t ndim, int64_t a, int64_t b,
                   int64_t c, int32_t optional) {
    if (*n < cap) {
        enc_tensor_spec *t = &out[*n];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->ndim = ndim;
        t->shape[0] = a;
        t->shape[1] = b;
        t->shape[2] = c;
        t->shape[3] = 0;
        t->optional = optional;
    }
    (*n)++;
}

/* [rows, cols] of linear j of a layer. */
static void vis_linear_shape(const plume_vision_config *c, int j, int64_t *rows, int64_t *cols) {
    const int64_t HD = (int64_t)c->H * c->hd;
    switch (j) {
    case 3: *rows = c->D; *cols = HD; break;       /* o_proj */
    case 4: case 5: *rows = c->I; *cols = c->D; break;
    case 6: *rows = c->D; *cols = c->I; break;     /* down_proj */
    default: *rows = HD; *cols = c->D; break;      /* q, k, v */
    }
}

int32_t enc_vision_tensor_list(const plume_vision_config *c, int32_t D_text, enc_tensor_spec *out, int32_t cap) {
    int32_t n = 0;
    char name[112];
    vt_add(out, cap, &n, "model.vision_tower.patch_embedder.input_proj.weight", 2, c->D, (int64_t)c->patch * c->patch * 3, 0, 0);
    vt_add(out, cap, &n, "model.vision_tower.patch_embedder.position_embedding_table", 3, 2, c->n_pos, c->D, 0);
    for (int32_t l = 0; l < c->L; l++) {
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "model.vision_tower.encoder.layers.%d.%s.weight", l, vis_norms[i]);
            vt_add(out, cap, &n, name, 1, c->D, 0, 0, 0);
        }
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "model.vision_tower.encoder.layers.%d.self_attn.%s_norm.weight", l, i ? "k" : "q");
            vt_add(out, cap, &n, name, 1, c->hd, 0, 0, 0);
        }
        for (int j = 0; j < 7; j++) {
            int64_t rows, cols;
            vis_linear_shape(c, j, &rows, &cols);
            snprintf(name, sizeof name, "model.vision_tower.encoder.layers.%d.%s.linear.weight", l, vis_linears[j]);
            vt_add(out, cap, &n, name, 2, rows, cols, 0, 0);
            for (int b = 0; b < 4; b++) {
                snprintf(name, sizeof name, "model.vision_tower.encoder.layers.%d.%s.%s", l, vis_linears[j], vis_bounds[b]);
                vt_add(out, cap, &n, name, 0, 0, 0, 0, 1);
            }
        }
    }
    vt_add(out, cap, &n, "model.embed_vision.embedding_projection.weight", 2, D_text, c->D, 0, 0);
    return n;
}

/* ---- loading --------------------------------------------------------------------------- */

/* The data of tensor t of the list, checked against the file (F32, shape, inside the map,
 * 4-byte aligned); NULL with *rc set when it is missing (0 for an optional one) or wrong. */
static const float *vis_tensor(const enc_vision *v, const st_file *f, const enc_tensor_spec *t, int *rc, char **err) {
    const st_tensor *e = st_find(f, t->name);
    *rc = 0;
    if (!e) {
        if (!t->optional) *rc = plume_fail(err, PLUME_EFORMAT, "%s: missing tensor %s", f->path, t->name);
        return NULL;
    }
    int same = e->dtype == ST_F32 && e->ndim == t->ndim;
    for (int32_t i = 0; same && i < t->ndim; i++) same = e->shape[i] == t->shape[i];
    if (!same) {
        *rc = plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has the wrong dtype or shape (want F32, %d dims)", f->path,
                         t->name, t->ndim);
        return NULL;
    }
    if (e->offset % 4 || e->offset > v->map.size || e->nbytes > v->map.size - e->offset) {
        *rc = plume_fail(err, PLUME_EFORMAT, "%s: tensor %s lies outside the file or is misaligned", f->path, t->name);
        return NULL;
    }
    return (const float *)(v->map.data + e->offset);
}

/* Walk the tensor list in its order, filling the views. */
static int vis_bind(enc_vision *v, const st_file *f, const enc_tensor_spec *list, int32_t n, char **err) {
    const plume_vision_config *c = &v->c;
    int32_t i = 0, rc = 0;
    const float *p;
#define NEXT() (p = vis_tensor(v, f, &list[i], &rc, err), i++, p)
    p = NEXT();
    v->patch_proj = (plume_weight){PLUME_W_F32, c->D, c->patch * c->patch * 3, p, NULL, PLUME_L_ROWS};
    if (!rc) v->pos_table = NEXT();
    for (int32_t l = 0; !rc && l < c->L; l++) {
        enc_vision_layer *L = &v->layer[l];
        const float **norms[6] = {&L->ln_in, &L->ln_post_attn, &L->ln_pre_ff, &L->ln_post_ff, &L->q_norm, &L->k_norm};
        for (int k = 0; !rc && k < 6; k++) *norms[k] = NEXT();
        enc_vision_linear *lin[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        for (int j = 0; !rc && j < 7; j++) {
            int64_t rows, cols;
            vis_linear_shape(c, j, &rows, &cols);
            p = NEXT();
            lin[j]->w = (plume_weight){PLUME_W_F32, (int32_t)rows, (int32_t)cols, p, NULL, PLUME_L_ROWS};
            float *bound[4] = {&lin[j]->in_min, &lin[j]->in_max, &lin[j]->out_min, &lin[j]->out_max};
            for (int b = 0; !rc && b < 4; b++) {
                p = NEXT();
                *bound[b] = p && c->clipped ? p[0] : (b % 2 ? INFINITY : -INFINITY);
                if (p && c->clipped && isnan(p[0]))
                    rc = plume_fail(err, PLUME_EFORMAT, "%s: %s is NaN", f->path, list[i - 1].name);
            }
        }
    }
    if (!rc) p = NEXT();
    v->embed_proj = (plume_weight){PLUME_W_F32, v->D_text, c->D, p, NULL, PLUME_L_ROWS};
#undef NEXT
    if (!rc && i != n) rc = plume_fail(err, PLUME_EFORMAT, "%s: internal tensor list mismatch", f->path);
    return rc;
}

int enc_vision_open(enc_vision **out, const char *path, const plume_vision_config *c, int32_t D_text, char **err) {
    *out = NULL;
    if (c->hd / 4 > 64) return plume_fail(err, PLUME_EFORMAT, "%s: vision head_dim %d is too large", path, c->hd);
    enc_vision *v = calloc(1, sizeof *v);
    if (!v) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    v->c = *c;
    v->D_text = D_text;
    int32_t n = enc_vision_tensor_list(c, D_text, NULL, 0);
    enc_tensor_spec *list = malloc(sizeof *list * (size_t)n);
    v->layer = calloc((size_t)c->L, sizeof *v->layer);
    st_file f = {0};
    int rc = list && v->layer ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = st_open(&f, path, err);
    if (!rc) rc = plume_map_open(&v->map, path, err);
    if (!rc) {
        const char *fmt = st_meta(&f, "format");
        if (!fmt || strcmp(fmt, "plume-tower")) rc = plume_fail(err, PLUME_EFORMAT, "%s: not a plume tower file", path);
    }
    if (!rc) {
        enc_vision_tensor_list(c, D_text, list, n);
        rc = vis_bind(v, &f, list, n, err);
    }
    st_close(&f);
    free(list);
    /* RoPE of each half of a head: HF's inv_freq over spatial_dim = hd / 2, in float32 */
    const int32_t half = c->hd / 2;
    for (int32_t i = 0; i < half / 2; i++) v->inv_freq[i] = 1.0f / powf(c->theta, (float)(2 * i) / (float)half);
    if (rc) {
        enc_vision_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void enc_vision_free(enc_vision *v) {
    if (!v) return;
    plume_map_free(&v->map);
    free(v->layer);
    free(v);
}

/* ---- parallel pieces ------------------------------------------------------------------- */

/* One encode's buffers and what every step reads. */
typedef struct {
    const enc_vision *v;
    const enc_run *run;    /* the kernel table, the pool, the abort callback */
    const plume_kernels *k;
    plume_pool *pool;
    int32_t N, ph, pw, nth;
    float *h;      /* [N, D] residual stream */
    float *xa;     /* [N, D] normed input of a sub-block */
    float *xc;     /* [N, max(D, HD, P)] a linear's clamped input */
    float *q, *kk, *vv, *att; /* [N, HD] */
    float *kh;     /* [H, N, hd] each head's keys, contiguous */
    float *vt;     /* [H, hd, N] each head's values, transposed */
    float *sc;     /* [nth, VIS_QBLOCK, N] attention weights of a block of queries */
    float *g, *u, *gc, *d; /* [VIS_MLP_ROWS, I] x3, [VIS_MLP_ROWS, D] */
    float *cx, *sx, *cy, *sy; /* [pw | ph, hd/4] RoPE cos/sin of each x and y */
    const float *pix;
    const int32_t *pos;
    int32_t l;     /* the layer being run */
} vis_run;

/* A parallel matmul: Y[T, w.rows] = X[T, w.cols] @ W^T, rows of W split over the threads. */
/* Y = X W^T, the rows of W split across the pool (the encoders' enc_matmul). */
static void vis_matmul(const vis_run *r, float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                       const plume_weight *w) {
    enc_matmul(r->run, y, ldy, x, ldx, T, w);
}

/* Work on row t (norms, RoPE, residuals, clamps): rows are independent. */
typedef void (*vis_row_fn)(const vis_run *r, void *arg, int32_t t);

typedef struct {
    const vis_run *r;
    vis_row_fn fn;
    void *arg;
} vis_rows_task;

/* Items [i0, i1): rows. */
static void vis_rows_items(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const vis_rows_task *t = ctx;
    for (int64_t i = i0; i < i1; i++) t->fn(t->r, t->arg, (int32_t)i);
}

/* fn on rows [0, T) on every thread. */
static void vis_for_rows(const vis_run *r, int32_t T, vis_row_fn fn, void *arg) {
    vis_rows_task t = {r, fn, arg};
    plume_pool_for(r->pool, T, 8, vis_rows_items, &t);
}

/* ---- clipped linears ------------------------------------------------------------------- */

/* A clamp of a [T, cols] block (row stride ld) into a packed [T, cols] one, or in place. */
typedef struct {
    float *y;
    const float *x;
    int64_t ldx, cols;
    float lo, hi;
} vis_clamp;

/* Row t of a clamp. */
static void vis_clamp_row(const vis_run *r, void *arg, int32_t t) {
    (void)r;
    const vis_clamp *c = arg;
    const float *x = c->x + (int64_t)t * c->ldx;
    float *y = c->y + (int64_t)t * c->cols;
    enc_clamp(y, x, c->cols, c->lo, c->hi);
}

/* Y[T, rows] (stride ldy) = CL(X[T, cols] (stride ldx)); the clamped input goes to tmp
 * [T, cols] when the input bounds are finite. */
static void vis_linear(const vis_run *r, const enc_vision_linear *L, float *y, int64_t ldy, const float *x, int64_t ldx,
                       int32_t T, float *tmp) {
    if (L->in_min != -INFINITY || L->in_max != INFINITY) {
        vis_clamp c = {tmp, x, ldx, L->w.cols, L->in_min, L->in_max};
        vis_for_rows(r, T, vis_clamp_row, &c);
        x = tmp;
        ldx = L->w.cols;
    }
    vis_matmul(r, y, ldy, x, ldx, T, &L->w);
    if (L->out_min != -INFINITY || L->out_max != INFINITY) {
        vis_clamp c = {y, y, ldy, L->w.rows, L->out_min, L->out_max};
        if (ldy != L->w.rows) { /* in place: clamp row by row where it lies */
            for (int32_t t = 0; t < T; t++) enc_clamp(y + (int64_t)t * ldy, y + (int64_t)t * ldy, L->w.rows, L->out_min, L->out_max);
        } else {
            vis_for_rows(r, T, vis_clamp_row, &c);
        }
    }
}

/* ---- the steps, row by row ------------------------------------------------------------- */

/* xc[t] = 2 (pix[t] - 0.5): HF's patch_embedder input, in float32. */
static void vis_row_pixels(const vis_run *r, void *arg, int32_t t) {
    (void)arg;
    const int64_t P = r->v->patch_proj.cols;
    const float *p = r->pix + (int64_t)t * P;
    float *x = r->xc + (int64_t)t * P;
    for (int64_t i = 0; i < P; i++) x[i] = 2.0f * (p[i] - 0.5f);
}

/* h[t] += T_x[x] + T_y[y]. */
static void vis_row_positions(const vis_run *r, void *arg, int32_t t) {
    (void)arg;
    const int32_t D = r->v->c.D;
    const float *tx = r->v->pos_table + (int64_t)r->pos[2 * t] * D;
    const float *ty = r->v->pos_table + ((int64_t)r->v->c.n_pos + r->pos[2 * t + 1]) * D;
    float *h = r->h + (int64_t)t * D;
    for (int32_t i = 0; i < D; i++) h[i] += tx[i] + ty[i];
}

/* xa[t] = rms(h[t], w) with arg the weight. */
static void vis_row_norm(const vis_run *r, void *arg, int32_t t) {
    const int32_t D = r->v->c.D;
    r->k->rmsnorm(r->xa + (int64_t)t * D, r->h + (int64_t)t * D, arg, D, r->v->c.eps);
}

/* Rotate one half of a head (2*q values) in place: NeoX pairs (i, i + q). */
static void vis_rope(float *x, const float *cs, const float *sn, int32_t q) {
    for (int32_t i = 0; i < q; i++) {
        float a = x[i], b = x[i + q];
        x[i] = a * cs[i] - b * sn[i];
        x[i + q] = b * cs[i] + a * sn[i];
    }
}

/* Per head of row t: q, k = rope2d(rms(., w)), v = rms(v); k and v copied to the heads'
 * contiguous and transposed buffers. */
static void vis_row_qkv(const vis_run *r, void *arg, int32_t t) {
    (void)arg;
    const plume_vision_config *c = &r->v->c;
    const enc_vision_layer *L = &r->v->layer[r->l];
    const int32_t hd = c->hd, q4 = hd / 4, HD = c->H * hd, x = r->pos[2 * t], y = r->pos[2 * t + 1];
    const float *cx = r->cx + (int64_t)x * q4, *sx = r->sx + (int64_t)x * q4;
    const float *cy = r->cy + (int64_t)y * q4, *sy = r->sy + (int64_t)y * q4;
    for (int32_t h = 0; h < c->H; h++) {
        float *q = r->q + (int64_t)t * HD + (int64_t)h * hd, *k = r->kk + (int64_t)t * HD + (int64_t)h * hd;
        float *v = r->vv + (int64_t)t * HD + (int64_t)h * hd;
        r->k->rmsnorm(q, q, L->q_norm, hd, c->eps);
        vis_rope(q, cx, sx, q4);
        vis_rope(q + hd / 2, cy, sy, q4);
        r->k->rmsnorm(k, k, L->k_norm, hd, c->eps);
        vis_rope(k, cx, sx, q4);
        vis_rope(k + hd / 2, cy, sy, q4);
        r->k->rmsnorm(v, v, NULL, hd, c->eps);
        memcpy(r->kh + ((int64_t)h * r->N + t) * hd, k, (size_t)hd * 4);
        for (int32_t i = 0; i < hd; i++) r->vt[((int64_t)h * hd + i) * r->N + t] = v[i];
    }
}

/* Attention items [i0, i1): (head, block of queries) pairs, each on this thread alone. */
static void vis_attn_items(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    const vis_run *r = ctx;
    const plume_vision_config *c = &r->v->c;
    const int32_t hd = c->hd, HD = c->H * hd, N = r->N, nq = (N + VIS_QBLOCK - 1) / VIS_QBLOCK;
    float *s = r->sc + (int64_t)ith * VIS_QBLOCK * N;
    for (int64_t it = i0; it < i1; it++) {
        const int32_t h = (int32_t)(it / nq), q0 = (int32_t)(it % nq) * VIS_QBLOCK;
        const int32_t T = N - q0 < VIS_QBLOCK ? N - q0 : VIS_QBLOCK;
        const plume_weight K = {PLUME_W_F32, N, hd, r->kh + (int64_t)h * N * hd, NULL, PLUME_L_ROWS};
        const plume_weight Vt = {PLUME_W_F32, hd, N, r->vt + (int64_t)h * hd * N, NULL, PLUME_L_ROWS};
        r->k->matmul[PLUME_W_F32](s, N, r->q + (int64_t)q0 * HD + (int64_t)h * hd, HD, T, &K, 0, N); /* scale 1 */
        for (int32_t t = 0; t < T; t++) r->k->softmax(s + (int64_t)t * N, N);
        r->k->matmul[PLUME_W_F32](r->att + (int64_t)q0 * HD + (int64_t)h * hd, HD, s, N, T, &Vt, 0, hd);
    }
}

/* h[t] += rms(o[t], w) (o in xc), then xa[t] = rms(h[t], pre-ff norm). */
static void vis_row_attn_out(const vis_run *r, void *arg, int32_t t) {
    (void)arg;
    const int32_t D = r->v->c.D;
    const enc_vision_layer *L = &r->v->layer[r->l];
    float *o = r->xc + (int64_t)t * D, *h = r->h + (int64_t)t * D;
    r->k->rmsnorm(o, o, L->ln_post_attn, D, r->v->c.eps);
    for (int32_t i = 0; i < D; i++) h[i] += o[i];
    r->k->rmsnorm(r->xa + (int64_t)t * D, h, L->ln_pre_ff, D, r->v->c.eps);
}

/* h[t0 + t] += rms(d[t], post-ff norm); arg points at t0. */
static void vis_row_ff_out(const vis_run *r, void *arg, int32_t t) {
    const int32_t D = r->v->c.D, t0 = *(const int32_t *)arg;
    float *d = r->d + (int64_t)t * D, *h = r->h + (int64_t)(t0 + t) * D;
    r->k->rmsnorm(d, d, r->v->layer[r->l].ln_post_ff, D, r->v->c.eps);
    for (int32_t i = 0; i < D; i++) h[i] += d[i];
}

/* ---- the tower ------------------------------------------------------------------------- */

/* One encoder layer on all rows. */
static void vis_layer(vis_run *r, int32_t l) {
    const plume_vision_config *c = &r->v->c;
    const enc_vision_layer *L = &r->v->layer[l];
    const int32_t N = r->N, D = c->D, HD = c->H * c->hd, I = c->I;
    r->l = l;
    vis_for_rows(r, N, vis_row_norm, (void *)L->ln_in);
    vis_linear(r, &L->q, r->q, HD, r->xa, D, N, r->xc);
    vis_linear(r, &L->k, r->kk, HD, r->xa, D, N, r->xc);
    vis_linear(r, &L->v, r->vv, HD, r->xa, D, N, r->xc);
    vis_for_rows(r, N, vis_row_qkv, NULL);
    plume_pool_for(r->pool, (int64_t)c->H * ((N + VIS_QBLOCK - 1) / VIS_QBLOCK), 1, vis_attn_items, r);
    vis_linear(r, &L->o, r->xc, D, r->att, HD, N, r->q); /* o into xc; q is free for the clamp */
    vis_for_rows(r, N, vis_row_attn_out, NULL);
    for (int32_t t0 = 0; t0 < N; t0 += VIS_MLP_ROWS) {
        const int32_t T = N - t0 < VIS_MLP_ROWS ? N - t0 : VIS_MLP_ROWS;
        const float *xa = r->xa + (int64_t)t0 * D;
        vis_linear(r, &L->gate, r->g, I, xa, D, T, r->d);
        vis_linear(r, &L->up, r->u, I, xa, D, T, r->d);
        r->k->gelu_mul(r->g, r->u, (int64_t)T * I);
        vis_linear(r, &L->down, r->d, D, r->g, I, T, r->gc);
        vis_for_rows(r, T, vis_row_ff_out, &t0);
    }
}

/* soft[n, D] = the average of each pool x pool block of h, in patch order, times sqrt(D). */
static void vis_pool(const vis_run *r, float *soft) {
    const plume_vision_config *c = &r->v->c;
    const int32_t D = c->D, k = c->pool, gw = r->pw / k, n = (r->ph / k) * gw;
    const float w = 1.0f / (float)(k * k), root = (float)sqrt((double)D);
    for (int32_t t = 0; t < n; t++) {
        float *o = soft + (int64_t)t * D;
        memset(o, 0, (size_t)D * 4);
        const int32_t R = t / gw, C = t % gw;
        for (int32_t dy = 0; dy < k; dy++)
            for (int32_t dx = 0; dx < k; dx++) {
                const float *h = r->h + ((int64_t)(R * k + dy) * r->pw + C * k + dx) * D;
                for (int32_t i = 0; i < D; i++) o[i] += h[i] * w;
            }
        for (int32_t i = 0; i < D; i++) o[i] *= root;
    }
}

/* Free an encode's buffers. */
static void vis_run_free(vis_run *r) {
    float *bufs[] = {r->h, r->xa, r->xc, r->q, r->kk, r->vv, r->att, r->kh, r->vt, r->sc,
                     r->g, r->u, r->gc, r->d, r->cx, r->sx, r->cy, r->sy};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) plume_dealloc(bufs[i]);
}

/* Allocate an encode's buffers; 0 or -1. */
static int vis_run_alloc(vis_run *r) {
    const plume_vision_config *c = &r->v->c;
    const size_t N = (size_t)r->N, D = (size_t)c->D, HD = (size_t)c->H * (size_t)c->hd, I = (size_t)c->I;
    size_t wide = D > HD ? D : HD;
    if ((size_t)r->v->patch_proj.cols > wide) wide = (size_t)r->v->patch_proj.cols;
    const size_t q4 = (size_t)c->hd / 4, M = VIS_MLP_ROWS;
    r->h = plume_alloc(N * D * 4);
    r->xa = plume_alloc(N * D * 4);
    r->xc = plume_alloc(N * wide * 4);
    r->q = plume_alloc(N * HD * 4);
    r->kk = plume_alloc(N * HD * 4);
    r->vv = plume_alloc(N * HD * 4);
    r->att = plume_alloc(N * HD * 4);
    r->kh = plume_alloc(N * HD * 4);
    r->vt = plume_alloc(N * HD * 4);
    r->sc = plume_alloc((size_t)r->nth * VIS_QBLOCK * N * 4);
    r->g = plume_alloc(M * I * 4);
    r->u = plume_alloc(M * I * 4);
    r->gc = plume_alloc(M * I * 4);
    r->d = plume_alloc(M * (D > I ? D : I) * 4);
    r->cx = plume_alloc((size_t)r->pw * q4 * 4);
    r->sx = plume_alloc((size_t)r->pw * q4 * 4);
    r->cy = plume_alloc((size_t)r->ph * q4 * 4);
    r->sy = plume_alloc((size_t)r->ph * q4 * 4);
    return r->h && r->xa && r->xc && r->q && r->kk && r->vv && r->att && r->kh && r->vt && r->sc && r->g && r->u &&
                   r->gc && r->d && r->cx && r->sx && r->cy && r->sy ? 0 : -1;
}

/* cos/sin of every x in [0, pw) and y in [0, ph): HF's float32 pos * inv_freq. */
static void vis_rope_tables(vis_run *r) {
    const int32_t q4 = r->v->c.hd / 4;
    for (int32_t axis = 0; axis < 2; axis++) {
        const int32_t n = axis ? r->ph : r->pw;
        float *cs = axis ? r->cy : r->cx, *sn = axis ? r->sy : r->sx;
        for (int32_t p = 0; p < n; p++)
            for (int32_t i = 0; i < q4; i++) {
                const float a = (float)p * r->v->inv_freq[i];
                cs[(int64_t)p * q4 + i] = cosf(a);
                sn[(int64_t)p * q4 + i] = sinf(a);
            }
    }
}

/* emb[t] = rms(soft[t]) (no scale), written into xa's rows first. */
static void vis_row_embed_norm(const vis_run *r, void *arg, int32_t t) {
    const int32_t D = r->v->c.D;
    const float *soft = arg;
    r->k->rmsnorm(r->xa + (int64_t)t * D, soft + (int64_t)t * D, NULL, D, r->v->c.eps);
}

int enc_vision_encode(const enc_vision *v, const enc_run *run, const float *pix,
                      const int32_t *pos, int32_t ph, int32_t pw, float *soft, float *emb, char **err) {
    const plume_vision_config *c = &v->c;
    if (ph < c->pool || pw < c->pool || ph % c->pool || pw % c->pool || ph > c->n_pos || pw > c->n_pos ||
        (int64_t)ph * pw > (1 << 20))
        return plume_fail(err, PLUME_EINVAL, "vision: a grid of %d x %d patches does not fit the tower (pool %d, %d positions)",
                          pw, ph, c->pool, c->n_pos);
    vis_run r = {.v = v, .run = run, .k = run->k, .pool = run->pool, .N = ph * pw, .ph = ph, .pw = pw,
                 .nth = plume_pool_size(run->pool),
                 .pix = pix, .pos = pos};
    for (int32_t t = 0; t < r.N; t++)
        if (pos[2 * t] < 0 || pos[2 * t] >= pw || pos[2 * t + 1] < 0 || pos[2 * t + 1] >= ph)
            return plume_fail(err, PLUME_EINVAL, "vision: patch %d has a position outside the grid", t);
    const int32_t n = r.N / (c->pool * c->pool);
    float *own = soft ? NULL : plume_alloc((size_t)n * (size_t)c->D * 4);
    if (vis_run_alloc(&r) || (!soft && !own)) {
        vis_run_free(&r);
        plume_dealloc(own);
        return plume_fail(err, PLUME_ENOMEM, "vision: out of memory for %d patches", r.N);
    }
    if (!soft) soft = own;
    vis_rope_tables(&r);
    vis_for_rows(&r, r.N, vis_row_pixels, NULL);
    vis_matmul(&r, r.h, c->D, r.xc, v->patch_proj.cols, r.N, &v->patch_proj);
    vis_for_rows(&r, r.N, vis_row_positions, NULL);
    int rc = 0;
    for (int32_t l = 0; !rc && l < c->L; l++)
        if (!(rc = enc_aborted(run, err))) vis_layer(&r, l);
    if (!rc) {
        vis_pool(&r, soft);
        vis_for_rows(&r, n, vis_row_embed_norm, soft);
        vis_matmul(&r, emb, v->D_text, r.xa, c->D, n, &v->embed_proj);
    }
    vis_run_free(&r);
    plume_dealloc(own);
    return rc;
}
