/* forward.c -- one step of new tokens through the three chunks (gemma4-arch.md §3).
 *
 * Prefill (T > 1) and decode (T = 1) are the same code, and so is a batch: a step is a list
 * of entries, each T tokens of one session at its own position, packed as rows of one
 * scratch. A step:
 *   embed + per-layer inputs (§3.1) -> chunk 1 -> chunk 2 -> chunk 3 -> head (§3.3)
 * then the K/V of the new tokens are committed to each session's caches. Matmuls and norms
 * run on all rows at once (each weight is read once per step); attention runs per row on the
 * caches of the row's session, reading past keys from the cache and this step's keys from the
 * step buffer, so a sliding ring is enough even when T exceeds it, and the KV-shared layers
 * (which run after their source layer, maybe in a later chunk) see the same step's keys.
 *
 * Every output element of a row is computed in the same order whatever the other rows are
 * (kernels reduce per element, elementwise ops give the same bits however a row is cut on
 * multiples of 16: kernels.h), so a session's logits are
 * bit-identical alone or in any batch. Files, sampling and ISAs are not known here. */
#include <math.h>
#include <stdlib.h>

#include "forward.h"

/* Int8 activations of a matmul's input (qact.h): bytes, block scales, corrections. */
typedef struct {
    int8_t *xq;
    float *xs;
    int32_t *xcor;
} qact_buf;

/* What every function of one step shares. */
typedef struct {
    const plume_model *m;
    plume_scratch *x;
    plume_step_entry *e; /* [n] */
    int32_t n;           /* entries */
    int32_t T;           /* rows, all entries */
    int qact;            /* int8 activations (the model has the kernels: exact = 0) */
    plume_region mm;     /* the profile region of the matmuls now: the layers', embed's or the head's */
    int fold;            /* a layer's last row work (row_ple_out) runs in the next layer's first loop */
    qact_buf qa, qin;    /* x->xq..., and x->xq_in... (the gate/up loop's input) */
} step_ctx;

/* The profile region of what follows (plume bench --threads-profile; a no-op otherwise). */
static void region(const step_ctx *step, plume_region r) {
    plume_pool_region(step->m->pool, (int32_t)r);
}

/* ---- parallel matmul ------------------------------------------------------------------- */

/* One output of a parallel matmul region: Y[T, w.rows] (row stride ldy). */
typedef struct {
    float *y;
    int64_t ldy;
    const plume_weight *w;
} matmul_out;

/* What a matmul chunk does after its rows, on the same thread (no loop of its own):
 * nothing, gelu(gate) * up on the chunk's columns (the paired gate/up), or the softcap. */
typedef enum { EPI_NONE, EPI_GELU, EPI_SOFTCAP } matmul_epi;

/* Up to three weights applied to one input in one parallel region (q/k/v, gate/up): one
 * synchronization instead of three, and the int8 activations quantized once. Paired (gate/up):
 * item r is row r of both weights, so that a chunk holds the same columns of gate and up and
 * applies gelu(gate) * up to them itself, with no loop (and no synchronization) of its own. */
typedef struct {
    const plume_kernels *k;
    const float *x;
    int64_t ldx;
    int32_t T;
    const plume_model *m;
    const qact_buf *q;      /* the int8 input, or NULL (set by matmul_run unless the caller has) */
    int32_t n;
    matmul_out o[3];
    int64_t start[4];       /* o[j] owns items [start[j], start[j+1]); paired: all of them [0, start[1]) */
    int32_t pair;           /* o[0] and o[1] share the items (same rows) */
    matmul_epi epi;
    float cap;              /* EPI_SOFTCAP */
    const qact_buf *qin;    /* where matmul_run quantizes the input (NULL: step->qa) */
    const qact_buf *qout;   /* EPI_GELU: quantize the result into this too (chunks of 128 items) */
} matmul_task;

/* Rows [r0, r1) of one output with the task's kernel. */
static void matmul_call(const matmul_task *t, const matmul_out *o, float *y, const plume_weight *w, int32_t r0,
                        int32_t r1) {
    if (t->q)
        t->m->qact_matmul(y, o->ldy, t->q->xq, t->q->xs, t->q->xcor, t->T, w, r0, r1);
    else
        t->k->matmul[w->type](y, o->ldy, t->x, t->ldx, t->T, w, r0, r1);
}

/* Rows [r0, r1) (whole groups) of a tiled weight for a kernel that reads rows: each group of
 * 16 unpacked into thread ith's buffer and multiplied as a 16-row weight of its own. Which
 * rows share a call never changes a row's result, so these are the bits of the rows layout. */
static void matmul_untiled(const matmul_task *t, const matmul_out *o, int32_t ith, int32_t r0, int32_t r1) {
    const plume_weight *w = o->w;
    const int q4 = w->type == PLUME_W_Q4;
    const size_t gbytes = (size_t)PLUME_TILE_ROWS * (size_t)(q4 ? w->cols / 2 : w->cols);
    uint8_t *buf = t->m->untile + (size_t)ith * t->m->untile_bytes;
    uint16_t *sc = (uint16_t *)(buf + gbytes);
    for (int32_t r = r0; r < r1; r += PLUME_TILE_ROWS) {
        const int32_t g = r / PLUME_TILE_ROWS;
        const uint16_t *ts = q4 ? w->scale + (size_t)g * PLUME_TILE_ROWS * (w->cols / 32) : NULL;
        plume_tiles_unpack(w->type, w->cols, (const uint8_t *)w->data + (size_t)g * gbytes, ts, buf, sc);
        plume_weight v = {w->type, PLUME_TILE_ROWS, w->cols, buf, q4 ? sc : w->scale + r, PLUME_L_ROWS};
        matmul_call(t, o, o->y + r, &v, 0, PLUME_TILE_ROWS);
    }
}

/* The epilogue on output columns [c0, c1) of every token row. Chunks start on multiples of
 * 16 items and the last one of a row ends at its end, so these calls cut a row on multiples of
 * 16 and the same elements fall in the kernels' scalar tails (the last n % 16 or n % 8 of a
 * row) as in one call per row: the bits of any cut (kernels.h, the elementwise kernels). */
static void matmul_epilogue(const matmul_task *t, int32_t c0, int32_t c1) {
    const matmul_out *o = &t->o[0];
    const int32_t cols = o->w->rows; /* of the result, as the next matmul's input */
    for (int32_t r = 0; r < t->T; r++) {
        float *y = o->y + r * o->ldy + c0;
        if (t->epi == EPI_GELU) t->k->gelu_mul(y, t->o[1].y + r * t->o[1].ldy + c0, c1 - c0);
        else t->k->softcap(y, c1 - c0, t->cap);
        if (t->qout) /* its chunks of 128 columns, at their place in the row (chunks are independent) */
            t->m->qact_quantize(y, o->ldy, 1, c1 - c0, t->qout->xq + r * plume_qact_stride(cols) + c0,
                                t->qout->xs + (int64_t)r * plume_qact_groups(cols) + c0 / PLUME_QACT_GROUP,
                                t->qout->xcor + (int64_t)r * plume_qact_lanes(cols) + c0 / PLUME_QACT_CHUNK * PLUME_QACT_LANES);
    }
}

/* Items [i0, i1): rows of the outputs they fall in, then the epilogue on them. */
static void matmul_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    const matmul_task *t = ctx;
    for (int32_t j = 0; j < t->n; j++) {
        const matmul_out *o = &t->o[j];
        const int64_t start = t->pair ? 0 : t->start[j], end = start + o->w->rows;
        int64_t a = i0 > start ? i0 : start, b = i1 < end ? i1 : end;
        if (a >= b) continue;
        int32_t r0 = (int32_t)(a - start), r1 = (int32_t)(b - start);
        if (o->w->layout == PLUME_L_TILES && !(t->q ? plume_qact_reads_tiles(t->m->qact_matmul) : t->k->reads_tiles))
            matmul_untiled(t, o, ith, r0, r1);
        else
            matmul_call(t, o, o->y, o->w, r0, r1);
    }
    const int64_t rows = t->o[0].w->rows;
    if (t->epi != EPI_NONE && i0 < rows) matmul_epilogue(t, (int32_t)i0, (int32_t)(i1 < rows ? i1 : rows));
}

enum {
    ROWS_PARALLEL_MIN = 8, /* rows from which per-row work pays for a synchronization */
    STREAM_TOKENS_MAX = PLUME_QACT_STREAM_TOKENS, /* steps that read each weight once, in a stream */
    STREAM_GRAIN = 64      /* their chunks: whole tiles of 4 groups (no short, latency-bound ones) */
};

/* fn(ctx, 0, i0, i1) over rows [0, T) that do not depend on each other: on every thread once
 * there are enough rows (prefill), else on the calling thread (decode). */
static void on_rows(const plume_model *m, int32_t T, plume_pool_fn fn, void *ctx) {
    if (T < ROWS_PARALLEL_MIN || plume_pool_size(m->pool) < 2) fn(ctx, 0, 0, T);
    else plume_pool_for(m->pool, T, 1, fn, ctx);
}

/* Work on row t of layer l (norms, RoPE, residuals): rows are independent. */
typedef void (*row_fn)(const step_ctx *step, int32_t l, int32_t t);

/* A matmul's input made ready, row by row: per-row work that writes it (norms, residuals),
 * then its int8 rounding, in one loop. */
typedef struct {
    const step_ctx *step;
    int32_t l;
    row_fn prep;       /* or NULL */
    const float *x;
    int64_t ldx;
    int32_t cols;
    const qact_buf *q; /* quantize X into q, or NULL */
} prep_task;

/* Items [i0, i1): rows prepared, then quantized (the bytes of a row do not depend on the others). */
static void prep_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const prep_task *t = ctx;
    if (t->prep)
        for (int64_t r = i0; r < i1; r++) t->prep(t->step, t->l, (int32_t)r);
    if (t->q)
        t->step->m->qact_quantize(t->x + i0 * t->ldx, t->ldx, (int32_t)(i1 - i0), t->cols,
                                  t->q->xq + i0 * plume_qact_stride(t->cols), t->q->xs + i0 * plume_qact_groups(t->cols),
                                  t->q->xcor + i0 * plume_qact_lanes(t->cols));
}

/* Run a prep_task: one parallel loop over the rows once there are enough of them (prefill;
 * one synchronization for both parts), else on the calling thread, each part in its profile
 * region (decode). */
static void prep_run(prep_task *t, int32_t T) {
    const plume_model *m = t->step->m;
    if (T >= ROWS_PARALLEL_MIN && plume_pool_size(m->pool) >= 2) {
        region(t->step, t->prep ? PLUME_REG_NORMS : PLUME_REG_QUANT);
        plume_pool_for(m->pool, T, 1, prep_rows, t);
        return;
    }
    const qact_buf *q = t->q;
    if (t->prep) {
        region(t->step, PLUME_REG_NORMS);
        t->q = NULL;
        prep_rows(t, 0, 0, T);
        t->q = q;
    }
    if (q) {
        region(t->step, PLUME_REG_QUANT);
        t->prep = NULL;
        prep_rows(t, 0, 0, T);
    }
}

/* Y_j = X[T, cols] (row stride ldx) @ W_j^T for t's n weights of the same cols, on every thread.
 * Each weight starts on a multiple of 16 items, and chunks are whole multiples of 16 (of 128
 * when the epilogue quantizes), so that a chunk holds whole groups of a tiled weight. Prefill: chunks of about an eighth of a thread's
 * share. Decode and speculative steps (up to STREAM_TOKENS_MAX tokens): guided chunks, long
 * first, 4 groups last, so that a thread's streams seldom restart and the threads end together
 * (AMD EPYC, q8, 2 threads: 3% of samples spinning at the end of a loop, 6% with eighths), in
 * whole tiles of 4 groups (with chunks of 1 group, 3-13% slower: a 1-group tile has few chains
 * in flight).
 * Unless the model is exact, q8/q4 weights take int8 activations: X is quantized once per row
 * and block of 32 (the same bytes whatever T), then the int8 kernels run; a row's output is
 * the same bits in any step (qact.h, "Float order"). prep(step, l, row), when given, runs
 * on every row before (in the quantizer's loop: one synchronization for both). */
static void matmul_run(const step_ctx *step, matmul_task *t, int32_t l, row_fn prep) {
    const plume_model *m = step->m;
    const int32_t n = t->n, T = t->T;
    int q = step->qact && m->qact_matmul && !t->q;
    for (int32_t j = 0; j < n; j++) {
        t->start[j + 1] = t->start[j] + (t->o[j].w->rows + PLUME_TILE_ROWS - 1) / PLUME_TILE_ROWS * PLUME_TILE_ROWS;
        q = q && plume_qact_supported(t->o[j].w);
    }
    const qact_buf *qin = t->qin ? t->qin : &step->qa;
    if (q || prep) {
        prep_task pt = {step, l, prep, t->x, t->ldx, t->o[0].w->cols, q ? qin : NULL};
        prep_run(&pt, T);
    }
    if (q) t->q = qin;
    const int64_t items = t->pair ? t->start[1] : t->start[n];
    const int64_t align = t->qout ? PLUME_QACT_CHUNK : PLUME_TILE_ROWS; /* chunks start on multiples */
    region(step, step->mm);
    if (T <= STREAM_TOKENS_MAX) {
        plume_pool_for_guided(m->pool, items, STREAM_GRAIN > align ? STREAM_GRAIN : align, matmul_rows, t);
        return;
    }
    int32_t nth = plume_pool_size(m->pool);
    int64_t grain = (items / (nth * 8) + align - 1) / align * align;
    plume_pool_for(m->pool, items, grain < align ? align : grain, matmul_rows, t);
}

/* matmul_run of n weights of the same cols on X (row stride ldx), after prep(step, l, row)
 * on every row (NULL: none) has written X. */
static void matmul_n(const step_ctx *step, int32_t l, row_fn prep, const float *x, int64_t ldx, int32_t T, int32_t n,
                     const matmul_out *o) {
    matmul_task t = {step->m->k, x, ldx, T, step->m, NULL, n, {{0}}, {0}, 0, EPI_NONE, 0.0f, NULL, NULL};
    for (int32_t j = 0; j < n; j++) t.o[j] = o[j];
    matmul_run(step, &t, l, prep);
}

/* One weight: Y[T, w.rows] (row stride ldy) = X @ W^T, after prep (as matmul_n). */
static void matmul(const step_ctx *step, int32_t l, row_fn prep, float *y, int64_t ldy, const float *x, int64_t ldx,
                   int32_t T, const plume_weight *w) {
    matmul_out o = {y, ldy, w};
    matmul_n(step, l, prep, x, ldx, T, 1, &o);
}

/* ---- RoPE ---------------------------------------------------------------------------- */

/* Rotate one head in place, NeoX layout: pairs (i, i + hd/2) for the rotated i < rot. */
static void rope(float *x, const float *cs, const float *sn, int32_t hd, int32_t rot) {
    int32_t half = hd / 2;
    for (int32_t i = 0; i < rot; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
    }
}

/* ---- attention ------------------------------------------------------------------------- */
/*
 * A row's keys [lo, p] are cut on a fixed grid of PLUME_ATTN_BLOCK absolute positions. A block
 * gives a partial softmax state per query head (max m, sum l, acc = sum exp(s - m) v; the
 * kernel's attn_block reads each K and V row once for all heads of a KV head), and the
 * states are folded in block order: m = max(m, m2), acc = acc e^(m_old - m) + acc2 e^(m2 - m),
 * l likewise; the output is acc / l. Few rows (decode) split their blocks across threads,
 * the states going through x->part; many rows (prefill, batches) give each thread whole
 * rows. Both fold the same states in the same order, so a row's result does not depend on
 * which path ran it, nor on the thread count or the rest of the batch.
 */

typedef struct {
    const step_ctx *step;
    int32_t l;
    int32_t nblk; /* blocks of the row with the most; split rows keep that many states per slot */
} attn_task;

/* Quantize one head of a K/V row (hd floats) as an int8 cache holds it: scale = absmax / 127,
 * q = rne(x / scale). */
static void quantize_kv_head(int8_t *q, float *scale, const float *x, int32_t hd) {
    float amax = 0.0f;
    for (int32_t i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(x[i]));
    float sc = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    /* A non-finite K/V element (from NaN weights, say) is stored as 0: casting NaN or inf to
     * int8 is undefined. fmaxf skipped NaNs, so |x * inv| <= 127 otherwise. */
    for (int32_t i = 0; i < hd; i++) {
        float r = rintf(x[i] * inv);
        q[i] = r >= -127.0f && r <= 127.0f ? (int8_t)r : 0;
    }
    *scale = isfinite(sc) ? sc : 0.0f;
}

/* Quantize one step row (Hkv heads of hd) as an int8 cache row. */
static void quantize_kv_row(int8_t *q, float *scales, const float *x, int32_t hkv, int32_t hd) {
    for (int32_t g = 0; g < hkv; g++) quantize_kv_head(q + (int64_t)g * hd, &scales[g], x + (int64_t)g * hd, hd);
}

/* Round the step's K/V rows of cache-owning layer l, for the entries whose cache is int8,
 * into x->k8_new / v8_new: what attention reads of them and what commit() stores. */
static void round_step_kv(const step_ctx *step, int32_t l) {
    plume_scratch *x = step->x;
    int32_t hkv = step->m->c.Hkv, hd = step->m->c.hd[l], width = hkv * hd;
    region(step, PLUME_REG_KV);
    for (int32_t i = 0; i < step->n; i++) {
        const plume_step_entry *e = &step->e[i];
        if (!e->s->kv_of[l]->k8) continue;
        for (int64_t r = e->row0; r < e->row0 + e->T; r++) {
            quantize_kv_row(x->k8_new[l] + r * width, x->ks_new[l] + r * hkv, x->k_new[l] + r * width, hkv, hd);
            quantize_kv_row(x->v8_new[l] + r * width, x->vs_new[l] + r * hkv, x->v_new[l] + r * width, hkv, hd);
        }
    }
}

/* The span [lo, p] of the keys row t sees. */
static void attn_span(const step_ctx *step, int32_t l, int32_t t, int32_t *lo, int32_t *p) {
    const plume_config *c = &step->m->c;
    *p = step->x->row_pos[t];
    *lo = c->is_full[l] || *p - c->W + 1 < 0 ? 0 : *p - c->W + 1;
}

/* The K/V rows of positions [a, z] of KV head g of row t's session, as at most four runs:
 * cached rows (split where a ring wraps), then rows of this step. With an int8 cache, the
 * step's rows before the query's own are read rounded as the cache will hold them (x->k8_new)
 * and only its own row in float, so that a query sees the same keys and values whether the
 * tokens before it came in its step or in earlier ones (speculative decoding depends on it).
 * Returns the number of runs. */
static int32_t attn_runs(plume_kv_run *r, const step_ctx *step, int32_t l, int32_t t, int32_t g, int32_t a, int32_t z) {
    const plume_step_entry *e = &step->e[step->x->row_ent[t]];
    const plume_kv *kv = e->s->kv_of[l];
    int32_t hkv = step->m->c.Hkv, hd = kv->width / hkv, n = 0, P = e->P;
    for (int32_t j = a; j <= z && j < P;) { /* cached */
        int64_t slot = kv->ring ? j % kv->slots : j;
        int32_t len = (z < P - 1 ? z : P - 1) - j + 1;
        if (kv->ring && slot + len > kv->slots) len = (int32_t)(kv->slots - slot);
        int64_t off = slot * kv->width + (int64_t)g * hd;
        if (kv->k8)
            r[n++] = (plume_kv_run){kv->k8 + off, kv->v8 + off, kv->ks + slot * hkv + g, kv->vs + slot * hkv + g,
                                    kv->width, hkv, len};
        else r[n++] = (plume_kv_run){kv->k + off, kv->v + off, NULL, NULL, kv->width, 0, len};
        j += len;
    }
    if (z >= P) { /* this step's */
        int32_t j = a > P ? a : P, pos = step->x->row_pos[t];
        int64_t row = e->row0 + j - P, off = row * kv->width + (int64_t)g * hd;
        if (kv->k8 && j < pos) { /* earlier rows of the step, rounded */
            int32_t len = (z < pos - 1 ? z : pos - 1) - j + 1, L = kv->layer;
            r[n++] = (plume_kv_run){step->x->k8_new[L] + off, step->x->v8_new[L] + off, step->x->ks_new[L] + row * hkv + g,
                                    step->x->vs_new[L] + row * hkv + g, kv->width, hkv, len};
            j += len;
            off += (int64_t)len * kv->width;
        }
        if (j <= z)
            r[n++] = (plume_kv_run){step->x->k_new[kv->layer] + off, step->x->v_new[kv->layer] + off, NULL, NULL, kv->width,
                                    0, z - j + 1};
    }
    return n;
}

/* The state of block b (positions [b * PLUME_ATTN_BLOCK, + PLUME_ATTN_BLOCK) within [lo, pos])
 * of row t, KV head g: acc [group, hd], m and l [group]. p: scratch [group, PLUME_ATTN_BLOCK]. */
static void attn_block(const step_ctx *step, int32_t l, int32_t t, int32_t g, int32_t lo, int32_t pos, int32_t b,
                       float *acc, float *m, float *lsum, float *p) {
    const plume_config *c = &step->m->c;
    int32_t hd = c->hd[l], group = c->H / c->Hkv;
    int32_t a = b * PLUME_ATTN_BLOCK, z = a + PLUME_ATTN_BLOCK - 1;
    a = a > lo ? a : lo;
    z = z < pos ? z : pos;
    plume_kv_run run[4];
    int32_t nrun = attn_runs(run, step, l, t, g, a, z);
    const float *q = step->x->q + ((int64_t)t * c->H + (int64_t)g * group) * hd;
    step->m->k->attn_block(acc, m, lsum, q, group, hd, run, nrun, p);
}

/* Whole rows: items [i0, i1) are (row, KV head) pairs; the running state lives in the
 * output, a block's in the thread's x->blk. */
static void attn_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    const attn_task *a = ctx;
    const step_ctx *step = a->step;
    const plume_config *c = &step->m->c;
    plume_scratch *x = step->x;
    int32_t hd = c->hd[a->l], group = c->H / c->Hkv, hdmax = c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding;
    float *p = x->scores + (int64_t)ith * group * PLUME_ATTN_BLOCK;
    float *bacc = x->blk + (int64_t)ith * group * (hdmax + 4), *bm = bacc + (int64_t)group * hdmax, *bl = bm + group;
    float *rm = bl + group, *rl = rm + group;
    for (int64_t it = i0; it < i1; it++) {
        int32_t t = (int32_t)(it / c->Hkv), g = (int32_t)(it % c->Hkv), lo, pos;
        attn_span(step, a->l, t, &lo, &pos);
        float *out = x->att + ((int64_t)t * c->H + (int64_t)g * group) * hd;
        attn_block(step, a->l, t, g, lo, pos, lo / PLUME_ATTN_BLOCK, out, rm, rl, p);
        for (int32_t b = lo / PLUME_ATTN_BLOCK + 1; b <= pos / PLUME_ATTN_BLOCK; b++) {
            attn_block(step, a->l, t, g, lo, pos, b, bacc, bm, bl, p);
            for (int32_t h = 0; h < group; h++)
                plume_attn_fold(out + (int64_t)h * hd, &rm[h], &rl[h], bacc + (int64_t)h * hd, bm[h], bl[h], hd);
        }
        for (int32_t h = 0; h < group; h++) plume_attn_finish(out + (int64_t)h * hd, out + (int64_t)h * hd, rl[h], hd);
    }
}

/* The state of slot s's block bi in x->part: acc [group, hd], then m and l [group]. */
static float *attn_part(const attn_task *a, int64_t s, int64_t bi) {
    const plume_config *c = &a->step->m->c;
    int32_t group = c->H / c->Hkv;
    return a->step->x->part + (s * a->nblk + bi) * group * (c->hd[a->l] + 2);
}

/* Split rows, first pass: items [i0, i1) are (slot = row * Hkv + g, block) pairs. */
static void attn_split_blocks(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    const attn_task *a = ctx;
    const plume_config *c = &a->step->m->c;
    int32_t hd = c->hd[a->l], group = c->H / c->Hkv;
    float *p = a->step->x->scores + (int64_t)ith * group * PLUME_ATTN_BLOCK;
    for (int64_t it = i0; it < i1; it++) {
        int64_t s = it / a->nblk, bi = it % a->nblk;
        int32_t t = (int32_t)(s / c->Hkv), g = (int32_t)(s % c->Hkv), lo, pos;
        attn_span(a->step, a->l, t, &lo, &pos);
        int32_t b = lo / PLUME_ATTN_BLOCK + (int32_t)bi;
        if (b > pos / PLUME_ATTN_BLOCK) continue;
        float *state = attn_part(a, s, bi);
        attn_block(a->step, a->l, t, g, lo, pos, b, state, state + (int64_t)group * hd, state + (int64_t)group * (hd + 1),
                   p);
    }
}

/* Split rows, second pass: items [i0, i1) are (slot, query head) pairs; the states of the
 * slot's blocks are folded into its first block's, in block order. */
static void attn_split_fold(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const attn_task *a = ctx;
    const plume_config *c = &a->step->m->c;
    int32_t hd = c->hd[a->l], group = c->H / c->Hkv;
    for (int64_t it = i0; it < i1; it++) {
        int64_t s = it / group;
        int32_t h = (int32_t)(it % group), t = (int32_t)(s / c->Hkv), g = (int32_t)(s % c->Hkv), lo, pos;
        attn_span(a->step, a->l, t, &lo, &pos);
        float *s0 = attn_part(a, s, 0), *acc = s0 + (int64_t)h * hd, *m = s0 + (int64_t)group * hd + h, *l = m + group;
        for (int32_t bi = 1; bi <= pos / PLUME_ATTN_BLOCK - lo / PLUME_ATTN_BLOCK; bi++) {
            const float *sb = attn_part(a, s, bi);
            plume_attn_fold(acc, m, l, sb + (int64_t)h * hd, sb[(int64_t)group * hd + h], sb[(int64_t)group * (hd + 1) + h], hd);
        }
        plume_attn_finish(a->step->x->att + ((int64_t)t * c->H + (int64_t)g * group + h) * hd, acc, *l, hd);
    }
}

/* Attention of every row of the step for layer l (§3.2: scale 1.0, fp32 softmax), into x->att. */
static void attention(const step_ctx *step, int32_t l) {
    const plume_model *m = step->m;
    const plume_config *c = &m->c;
    plume_scratch *x = step->x;
    int64_t slots = (int64_t)step->T * c->Hkv;
    attn_task at = {step, l, 0};
    region(step, PLUME_REG_ATTN);
    for (int32_t t = 0; t < step->T; t++) {
        int32_t lo, pos;
        attn_span(step, l, t, &lo, &pos);
        int32_t nb = pos / PLUME_ATTN_BLOCK - lo / PLUME_ATTN_BLOCK + 1;
        at.nblk = nb > at.nblk ? nb : at.nblk;
    }
    if (slots > x->part_slots || at.nblk > x->part_blocks || at.nblk == 1) { /* whole rows */
        plume_pool_for(m->pool, slots, 1, attn_rows, &at);
        return;
    }
    plume_pool_for(m->pool, slots * at.nblk, 1, attn_split_blocks, &at);
    plume_pool_for(m->pool, slots * (c->H / c->Hkv), 1, attn_split_fold, &at);
}

/* ---- one decoder layer (§3.2) ---------------------------------------------------------- */

typedef struct {
    const step_ctx *step;
    int32_t l;
    row_fn fn;
} row_task;

/* Items [i0, i1): rows. */
static void row_items(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const row_task *r = ctx;
    for (int64_t t = i0; t < i1; t++) r->fn(r->step, r->l, (int32_t)t);
}

/* fn on every row of the step (on_rows). */
static void for_rows(const step_ctx *step, int32_t l, row_fn fn) {
    row_task r = {step, l, fn};
    region(step, PLUME_REG_NORMS);
    on_rows(step->m, step->T, row_items, &r);
}

/* h += norm(o) with weight w, for row t; returns h's row. */
static float *add_normed(const step_ctx *step, int32_t t, const float *w) {
    const int32_t D = step->m->c.D;
    float *o = step->x->o + (int64_t)t * D, *h = step->x->h + (int64_t)t * D;
    step->m->k->rmsnorm(o, o, w, D, step->m->c.eps);
    for (int32_t i = 0; i < D; i++) h[i] += o[i];
    return h;
}

/* xa = attn_norm(h). */
static void row_attn_in(const step_ctx *step, int32_t l, int32_t t) {
    const int32_t D = step->m->c.D;
    step->m->k->rmsnorm(step->x->xa + (int64_t)t * D, step->x->h + (int64_t)t * D, step->m->layer[l].attn_norm, D, step->m->c.eps);
}

/* q = rope(q_norm(q)) per head; a cache owner's k = rope(k_norm(k)), v = v_norm(v). */
static void row_qkv_norm(const step_ctx *step, int32_t l, int32_t t) {
    const plume_config *c = &step->m->c;
    const plume_layer *L = &step->m->layer[l];
    plume_scratch *x = step->x;
    const int32_t hd = c->hd[l], H = c->H, Hkv = c->Hkv, full = c->is_full[l], width = Hkv * hd;
    const int32_t rot = full ? c->rot_full : c->rot_sliding;
    const float *cs = x->rope_cos[full] + (int64_t)t * (hd / 2), *sn = x->rope_sin[full] + (int64_t)t * (hd / 2);
    for (int32_t h = 0; h < H; h++) {
        float *q = x->q + ((int64_t)t * H + h) * hd;
        step->m->k->rmsnorm(q, q, L->q_norm, hd, c->eps);
        rope(q, cs, sn, hd, rot);
    }
    if (c->kv_src[l] != l) return;
    for (int32_t g = 0; g < Hkv; g++) {
        float *k = x->k_new[l] + (int64_t)t * width + (int64_t)g * hd;
        float *v = x->v_new[l] + (int64_t)t * width + (int64_t)g * hd;
        step->m->k->rmsnorm(k, k, L->k_norm, hd, c->eps);
        rope(k, cs, sn, hd, rot);
        step->m->k->rmsnorm(v, v, NULL, hd, c->eps); /* v_norm: no scale, no RoPE */
    }
}

/* h += post_attn_norm(o); xa = pre_ff_norm(h). */
static void row_attn_out(const step_ctx *step, int32_t l, int32_t t) {
    const int32_t D = step->m->c.D;
    const float *h = add_normed(step, t, step->m->layer[l].post_attn_norm);
    step->m->k->rmsnorm(step->x->xa + (int64_t)t * D, h, step->m->layer[l].pre_ff_norm, D, step->m->c.eps);
}

/* h += post_ff_norm(o). */
static void row_ff_out(const step_ctx *step, int32_t l, int32_t t) {
    add_normed(step, t, step->m->layer[l].post_ff_norm);
}

/* plg = gelu(plg) * ple[t, l]. */
static void row_ple_mid(const step_ctx *step, int32_t l, int32_t t) {
    const plume_config *c = &step->m->c;
    step->m->k->gelu_mul(step->x->plg + (int64_t)t * c->Dp, step->x->ple + ((int64_t)t * c->L + l) * c->Dp, c->Dp);
}

/* h = (h + post_pl_norm(o)) * layer_scalar (the sum rounded, then the product: the bits of
 * one expression). */
static void row_ple_out(const step_ctx *step, int32_t l, int32_t t) {
    const plume_layer *L = &step->m->layer[l];
    float *h = add_normed(step, t, L->post_pl_norm);
    for (int32_t i = 0; i < step->m->c.D; i++) h[i] *= L->layer_scalar;
}

/* The end of layer l - 1 and the start of layer l in one pass over row t: row_ple_out of
 * l - 1, then row_attn_in of l (one loop instead of two in prefill). */
static void row_ple_out_attn_in(const step_ctx *step, int32_t l, int32_t t) {
    row_ple_out(step, l - 1, t);
    row_attn_in(step, l, t);
}

/* §3.2 for the step's rows; h [T, D] is updated in place. */
static void layer_forward(const step_ctx *step, int32_t l) {
    const plume_model *m = step->m;
    const plume_config *c = &m->c;
    const plume_layer *L = &m->layer[l];
    plume_scratch *x = step->x;
    int32_t T = step->T, D = c->D, hd = c->hd[l], H = c->H, Hkv = c->Hkv, I = c->I[l], Dp = c->Dp;
    int32_t width = Hkv * hd;

    /* attention: a = norm(h) (after the previous layer's last row work, when step->fold);
     * q = rope(norm(a Wq)); own K/V -> step buffer */
    row_fn first = l > 0 && step->fold ? row_ple_out_attn_in : row_attn_in;
    int own = c->kv_src[l] == l;
    if (own) { /* q, k and v in one region; K/V of a cache owner go to the step buffer */
        matmul_out qkv[3] = {{x->q, (int64_t)H * hd, &L->q_proj}, {x->k_new[l], width, &L->k_proj},
                             {x->v_new[l], width, &L->v_proj}};
        matmul_n(step, l, first, x->xa, D, T, 3, qkv);
    } else {
        matmul(step, l, first, x->q, (int64_t)H * hd, x->xa, D, T, &L->q_proj);
    }
    for_rows(step, l, row_qkv_norm);
    if (own) round_step_kv(step, l);
    attention(step, l);
    matmul(step, l, NULL, x->o, D, x->att, (int64_t)H * hd, T, &L->o_proj);

    /* MLP: h += norm(down(gelu(gate(x)) * up(x))), x = norm(h); gate and up paired, the gelu
     * in their loop, and with int8 activations the down matmul's input rounded there too (the
     * loop's own input in x->xq_in meanwhile) */
    const int qdown = step->qact && m->qact_matmul && plume_qact_supported(&L->down_proj);
    matmul_task gu = {m->k, x->xa, D, T, m, NULL, 2, {{x->gate, I, &L->gate_proj}, {x->up, I, &L->up_proj}},
                      {0}, 1, EPI_GELU, 0.0f, qdown ? &step->qin : NULL, qdown ? &step->qa : NULL};
    matmul_run(step, &gu, l, row_attn_out);
    matmul_task down = {m->k, x->gate, I, T, m, qdown ? &step->qa : NULL, 1, {{x->o, D, &L->down_proj}},
                        {0}, 0, EPI_NONE, 0.0f, NULL, NULL};
    matmul_run(step, &down, l, NULL);

    /* per-layer input: h += norm(proj(gelu(gate(h)) * ple[l])); then h *= layer_scalar (here,
     * or at the start of the next layer when step->fold) */
    matmul(step, l, row_ff_out, x->plg, Dp, x->h, D, T, &L->pl_gate);
    matmul(step, l, row_ple_mid, x->o, D, x->plg, Dp, T, &L->pl_proj);
    if (!step->fold) for_rows(step, l, row_ple_out);
}

/* ---- embeddings and per-layer inputs (§3.1) -------------------------------------------- */

/* Dequantize one INT8 row: q * (s / 127) * table_scale. */
static void deq_row(float *out, const int8_t *q, uint16_t s, int64_t n, float table_scale) {
    float f = plume_f16_to_f32(s) / 127.0f;
    for (int64_t i = 0; i < n; i++) out[i] = (float)q[i] * f * table_scale;
}

/* The id of row t of the step. */
static int32_t row_id(const step_ctx *step, int32_t t) {
    const plume_step_entry *e = &step->e[step->x->row_ent[t]];
    return e->ids[t - e->row0];
}

/* The given embedding of row t, or NULL (a token). */
static const float *row_emb(const step_ctx *step, int32_t t) {
    const plume_step_entry *e = &step->e[step->x->row_ent[t]];
    return e->emb ? e->emb[t - e->row0] : NULL;
}

/* h = E[ids] * sqrt(D), or a given embedding as it is; ple = (norm(h Wplmp^T / sqrt(D)) +
 * Eple[id] * sqrt(Dp)) / sqrt(2), where a given embedding's id is the pad id (HF sets
 * llm_input_ids to pad_token_id at multimodal positions). */
static void embed(const step_ctx *step) {
    const plume_model *m = step->m;
    const plume_config *c = &m->c;
    plume_scratch *x = step->x;
    int32_t T = step->T;
    int64_t D = c->D, LDp = (int64_t)c->L * c->Dp;
    const uint16_t *es = (const uint16_t *)m->embed_scales.data, *ps = (const uint16_t *)m->ple_scales.data;
    region(step, PLUME_REG_EMBED);
    for (int32_t t = 0; t < T; t++) {
        const int32_t id = row_id(step, t);
        const float *given = row_emb(step, t);
        if (given) memcpy(x->h + t * D, given, (size_t)D * sizeof(float));
        else deq_row(x->h + t * D, (const int8_t *)m->embed_q8.data + (int64_t)id * D, es[id], D, (float)c->embed_scale);
    }
    matmul(step, 0, NULL, x->ple, LDp, x->h, D, T, &m->ple_proj);
    region(step, PLUME_REG_EMBED);
    for (int32_t t = 0; t < T; t++) {
        const int32_t id = row_emb(step, t) ? c->pad_id : row_id(step, t);
        float *row = x->ple + t * LDp;
        const int8_t *q = (const int8_t *)m->ple_q8.data + (int64_t)id * LDp;
        float f = plume_f16_to_f32(ps[id]) / 127.0f, es2 = (float)c->ple_embed_scale;
        for (int32_t l = 0; l < c->L; l++) {
            float *xr = row + (int64_t)l * c->Dp;
            for (int32_t i = 0; i < c->Dp; i++) xr[i] *= (float)c->proj_scale;
            m->k->rmsnorm(xr, xr, m->ple_norm, c->Dp, c->eps);
            for (int32_t i = 0; i < c->Dp; i++)
                xr[i] = (xr[i] + (float)q[(int64_t)l * c->Dp + i] * f * es2) * (float)c->input_scale;
        }
    }
}

/* cos/sin rows of every row's position for both layer types. */
static void rope_rows(const step_ctx *step) {
    const plume_config *c = &step->m->c;
    plume_scratch *x = step->x;
    region(step, PLUME_REG_ROPE);
    for (int32_t full = 0; full < 2; full++) {
        int32_t half = (full ? c->hd_full : c->hd_sliding) / 2;
        const float *inv = step->m->inv_freq[full];
        for (int32_t t = 0; t < step->T; t++)
            for (int32_t i = 0; i < half; i++) {
                float a = (float)x->row_pos[t] * inv[i];
                x->rope_cos[full][(int64_t)t * half + i] = cosf(a);
                x->rope_sin[full][(int64_t)t * half + i] = sinf(a);
            }
    }
}

/* Copy an entry's K/V rows into its session's caches (ring slot pos % slots for sliding
 * layers). */
static void commit(const step_ctx *step, const plume_step_entry *e) {
    plume_session *s = e->s;
    int32_t hkv = step->m->c.Hkv, T = e->T, P = e->P;
    region(step, PLUME_REG_KV);
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            plume_kv *kv = &s->chunk[ci].kv[i];
            const float *kr = step->x->k_new[kv->layer] + (int64_t)e->row0 * kv->width;
            const float *vr = step->x->v_new[kv->layer] + (int64_t)e->row0 * kv->width;
            int32_t t0 = kv->ring && T > kv->slots ? T - kv->slots : 0; /* older ones would be overwritten */
            for (int32_t t = t0; t < T; t++) {
                int64_t slot = kv->ring ? (P + t) % kv->slots : P + t;
                const float *kn = kr + (int64_t)t * kv->width, *vn = vr + (int64_t)t * kv->width;
                if (kv->k8) { /* rounded by round_step_kv */
                    int64_t row = e->row0 + t, L = kv->layer;
                    memcpy(kv->k8 + slot * kv->width, step->x->k8_new[L] + row * kv->width, (size_t)kv->width);
                    memcpy(kv->v8 + slot * kv->width, step->x->v8_new[L] + row * kv->width, (size_t)kv->width);
                    memcpy(kv->ks + slot * hkv, step->x->ks_new[L] + row * hkv, (size_t)hkv * 4);
                    memcpy(kv->vs + slot * hkv, step->x->vs_new[L] + row * hkv, (size_t)hkv * 4);
                } else {
                    memcpy(kv->k + slot * kv->width, kn, (size_t)kv->width * 4);
                    memcpy(kv->v + slot * kv->width, vn, (size_t)kv->width * 4);
                }
            }
        }
}

/* The head on n rows of h (row indices rows[]): norm, tied projection, softcap 30 (§3.3),
 * into logits [n, V]. */
static void head(const step_ctx *step, const int32_t *rows, int32_t n, float *logits) {
    const plume_model *m = step->m;
    const plume_config *c = &m->c;
    plume_scratch *x = step->x;
    region(step, PLUME_REG_HEAD);
    for (int32_t i = 0; i < n; i++)
        m->k->rmsnorm(x->xa + (int64_t)i * c->D, x->h + (int64_t)rows[i] * c->D, m->final_norm, c->D, c->eps);
    matmul_task t = {m->k, x->xa, c->D, n, m, NULL, 1, {{logits, c->V, &m->head}}, {0}, 0,
                     c->softcap > 0 ? EPI_SOFTCAP : EPI_NONE, (float)c->softcap, NULL, NULL};
    matmul_run(step, &t, 0, NULL); /* the softcap in the head's loop */
}

/* The MTP drafter's handover (drafter.c): each entry's head rows, normed (the head left them
 * in x->xa, entries in order), into its session, the last n_batch of them at most; and where
 * the step's K/V end. nr: the head's rows. */
static void handover(const step_ctx *step, int32_t nr) {
    const int64_t D = step->m->c.D;
    int64_t at = 0; /* the entry's first row in xa */
    for (int32_t i = 0; i < step->n; i++) {
        const plume_step_entry *e = &step->e[i];
        plume_session *s = e->s;
        int32_t n = !e->logits ? 0 : e->all ? e->T : 1, keep = n < s->n_batch ? n : s->n_batch;
        s->fwd_end = e->P + e->T;
        s->hid_n = nr > 0 ? keep : 0;
        s->hid_pos = e->P + e->T - keep;
        if (s->hid_n) memcpy(s->hid, step->x->xa + (at + n - keep) * D, (size_t)(keep * D) * sizeof(float));
        at += n;
    }
}

/* ---- a step ---------------------------------------------------------------------------- */

void plume_forward(const plume_model *m, plume_scratch *x, plume_step_entry *e, int32_t n, float *out_logits) {
    const plume_config *c = &m->c;
    step_ctx step = {m, x, e, n, 0, 0, PLUME_REG_EMBED, 0, {0}, {0}};
    for (int32_t i = 0; i < n; i++) {
        for (int32_t t = 0; t < e[i].T; t++) {
            x->row_ent[e[i].row0 + t] = i;
            x->row_pos[e[i].row0 + t] = e[i].P + t;
        }
        step.T += e[i].T;
    }
    step.qact = m->qact_matmul != NULL;
    step.qa = (qact_buf){x->xq, x->xs, x->xcor};
    step.qin = (qact_buf){x->xq_in, x->xs_in, x->xcor_in};
    plume_session *tr = n == 1 ? e[0].s : NULL; /* test traces: single-session steps */
    step.fold = !(tr && tr->trace_hidden);      /* a trace copies h after each layer */
    int64_t TD = (int64_t)step.T * c->D;
    embed(&step);
    step.mm = PLUME_REG_MATMUL;
    rope_rows(&step);
    if (tr && tr->trace_hidden) memcpy(tr->trace_hidden, x->h, (size_t)TD * 4);
    if (tr && tr->trace_ple) memcpy(tr->trace_ple, x->ple, (size_t)step.T * c->L * c->Dp * 4);
    for (int32_t l = 0; l < c->L; l++) {
        layer_forward(&step, l);
        if (tr && tr->trace_hidden) memcpy(tr->trace_hidden + (l + 1) * TD, x->h, (size_t)TD * 4);
    }
    if (step.fold) for_rows(&step, c->L - 1, row_ple_out);
    for (int32_t i = 0; i < n; i++) commit(&step, &e[i]);
    /* the head: straight into the caller's logits for one entry, else through out_logits */
    step.mm = PLUME_REG_HEAD;
    int32_t *rows = x->row_head, nr = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!e[i].logits) continue;
        for (int32_t t = e[i].all ? 0 : e[i].T - 1; t < e[i].T; t++) rows[nr++] = e[i].row0 + t;
    }
    if (nr && n == 1) head(&step, rows, nr, e[0].logits);
    else if (nr) {
        head(&step, rows, nr, out_logits);
        const float *src = out_logits;
        for (int32_t i = 0; i < n; i++) {
            if (!e[i].logits) continue;
            size_t k = (size_t)(e[i].all ? e[i].T : 1) * (size_t)c->V;
            memcpy(e[i].logits, src, k * sizeof(float));
            src += k;
        }
    }
    handover(&step, nr);
    for (int32_t i = 0; i < n; i++) {
        plume_session *s = e[i].s;
        memcpy(s->tokens + e[i].P, e[i].ids, (size_t)e[i].T * sizeof *e[i].ids);
        if (s->keys) /* a session that has seen media keeps every position's key */
            for (int32_t t = 0; t < e[i].T; t++) s->keys[e[i].P + t] = e[i].keys ? e[i].keys[t] : 0;
        s->n_past = e[i].P + e[i].T;
        if (s->n_past > s->ring_end) s->ring_end = s->n_past;
    }
}

void plume_forward_step(plume_session *s, const int32_t *ids, const float *const *emb, const uint64_t *keys, int32_t T,
                        float *logits, int32_t all) {
    plume_step_entry e = {s, ids, T, s->n_past, 0, logits, all, emb, keys};
    plume_forward(s->m, &s->x, &e, 1, NULL);
}
