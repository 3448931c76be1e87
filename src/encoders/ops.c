/* ops.c -- what the towers share (encoders.h): matmuls with rows split across the pool,
 * clipped linears, per-row loops on the pool. A tower runs a clip of up to a few thousand rows
 * at once (prefill-sized), so every matmul reads each weight once for all rows. */
#include <math.h>
#include <stdio.h>

#include "encoders.h"

int32_t enc_threads(const enc_run *r) { return r->pool ? plume_pool_size(r->pool) : 1; }

int enc_aborted(const enc_run *r, char **err) {
    if (!r->abort || !r->abort(r->abort_ctx)) return 0;
    return plume_fail(err, PLUME_ECANCELED, "encode stopped: its abort callback asked to stop");
}

/* ---- matmul ------------------------------------------------------------------------------ */

typedef struct {
    const plume_kernels *k;
    float *y;
    int64_t ldy, ldx;
    const float *x;
    int32_t T;
    const plume_weight *w;
} mm_task;

/* Items [i0, i1): output rows of the weight, all T tokens. */
static void mm_rows(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const mm_task *t = ctx;
    t->k->matmul[t->w->type](t->y, t->ldy, t->x, t->ldx, t->T, t->w, (int32_t)i0, (int32_t)i1);
}

void enc_matmul(const enc_run *r, float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w) {
    mm_task t = {r->k, y, ldy, ldx, x, T, w};
    /* chunks of whole 16-row groups, about four per thread: enough to even out a noisy core */
    int64_t grain = ((int64_t)w->rows / (4 * enc_threads(r)) + 15) / 16 * 16;
    plume_pool_for(r->pool, w->rows, grain < 16 ? 16 : grain, mm_rows, &t);
}

/* ---- clipped linear ----------------------------------------------------------------------- */

/* y = min(max(x, lo), hi) over n values, as torch.clamp (hi wins when lo > hi, NaN stays);
 * y may be x. Compares, not fmaxf/fminf: those are libm calls per value (the vision tower
 * spent 18% of its time in them) and turn NaN into lo. */
void enc_clamp(float *y, const float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] < lo ? lo : x[i];
        y[i] = v > hi ? hi : v;
    }
}

/* x clamped in place; nothing to do without bounds. */
static void clamp(float *x, int64_t n, float lo, float hi) {
    if (lo == -INFINITY && hi == INFINITY) return;
    enc_clamp(x, x, n, lo, hi);
}

typedef struct {
    const enc_linear *lin;
    float *x, *y;
} lin_task;

/* Row t: the input clamp. */
static void lin_in(void *ctx, int32_t t) {
    const lin_task *l = ctx;
    clamp(l->x + (int64_t)t * l->lin->w.cols, l->lin->w.cols, l->lin->in_lo, l->lin->in_hi);
}

/* Row t: the bias, then the output clamp. */
static void lin_out(void *ctx, int32_t t) {
    const lin_task *l = ctx;
    float *y = l->y + (int64_t)t * l->lin->w.rows;
    if (l->lin->bias)
        for (int32_t i = 0; i < l->lin->w.rows; i++) y[i] += l->lin->bias[i];
    clamp(y, l->lin->w.rows, l->lin->out_lo, l->lin->out_hi);
}

void enc_linear_apply(const enc_run *r, const enc_linear *lin, float *y, float *x, int32_t T) {
    lin_task l = {lin, x, y};
    if (lin->in_lo != -INFINITY || lin->in_hi != INFINITY) enc_rows(r, T, lin_in, &l);
    enc_matmul(r, y, lin->w.rows, x, lin->w.cols, T, &lin->w);
    if (lin->bias || lin->out_lo != -INFINITY || lin->out_hi != INFINITY) enc_rows(r, T, lin_out, &l);
}

/* ---- rows ---------------------------------------------------------------------------------- */

typedef struct {
    enc_row_fn fn;
    void *ctx;
} rows_task;

/* Items [i0, i1): rows. */
static void rows_items(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ith;
    const rows_task *r = ctx;
    for (int64_t t = i0; t < i1; t++) r->fn(r->ctx, (int32_t)t);
}

void enc_rows(const enc_run *r, int32_t T, enc_row_fn fn, void *ctx) {
    rows_task t = {fn, ctx};
    int64_t grain = T / (8 * enc_threads(r));
    plume_pool_for(r->pool, T, grain < 1 ? 1 : grain, rows_items, &t);
}
