/* qact.c -- the reference for int8 activations (qact.h): plain loops that define right.
 * Integer sums are exact; the float sum runs over blocks in order (the vector kernels sum per
 * int32 lane, then reduce, and so differ by float rounding only). Knows the weight formats of
 * kernels.h and the xq chunk layout; nothing of the model. */
#include <math.h>
#include <string.h>

#include "../common.h"
#include "qact.h"

/* Q8 any cols, Q4 cols a multiple of 32, both within PLUME_QACT_COLS_MAX (qact.h). */
int plume_qact_supported(const plume_weight *w) {
    if (w->cols < 1 || w->cols > PLUME_QACT_COLS_MAX) return 0;
    if (w->layout == PLUME_L_TILES && !plume_tiles_fit(w->type, w->rows, w->cols)) return 0;
    if (w->type == PLUME_W_Q8) return 1;
    return w->type == PLUME_W_Q4 && w->cols % PLUME_QACT_GROUP == 0;
}

/* ---- quantize -------------------------------------------------------------------------- */

/* xcor of one token row from its bytes: MAGIC - 128 x the 8 bytes of each int32 lane (qact.h). */
static void qact_fill_cor(const int8_t *q, int64_t stride, int32_t *cor) {
    for (int64_t k = 0; k < stride / PLUME_QACT_CHUNK; k++)
        for (int j = 0; j < PLUME_QACT_LANES; j++) {
            const int8_t *p = q + k * PLUME_QACT_CHUNK + 4 * j;
            int32_t s = 0;
            for (int i = 0; i < 4; i++) s += p[i] + p[64 + i];
            cor[k * PLUME_QACT_LANES + j] = PLUME_QACT_MAGIC - 128 * s;
        }
}

/* Per token and block of 32: amax, then x * (127 / amax) rounded into the chunk layout. */
void plume_qact_quantize(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                         float *xs, int32_t *xcor) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols), lanes = plume_qact_lanes(cols);
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        int8_t *q = xq + t * stride;
        float *s = xs + (int64_t)t * groups;
        memset(q, 0, (size_t)stride);
        for (int32_t b = 0; b < groups; b++) {
            const int32_t c0 = b * PLUME_QACT_GROUP;
            const int32_t c1 = cols - c0 < PLUME_QACT_GROUP ? cols : c0 + PLUME_QACT_GROUP;
            float amax = 0.0f;
            for (int32_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(xr[c]));
            if (!(amax >= PLUME_QACT_TINY)) { /* also the padding blocks (c1 <= c0) */
                s[b] = 0.0f;
                continue;
            }
            const float inv = 127.0f / amax;
            s[b] = amax / 127.0f;
            for (int32_t c = c0; c < c1; c++) q[plume_qact_pos(c)] = plume_qact_round(xr[c] * inv);
        }
        qact_fill_cor(q, stride, xcor + (int64_t)t * lanes);
    }
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* Q8 row r . token row q: per block an exact int32 sum of w * xq, times xs, in block order
 * (the product and the sum apart: no fused multiply-add, as the tiles kernels do). */
static float qact_row_q8(const plume_weight *w, int32_t r, const int8_t *q, const float *xs) {
    float acc = 0.0f;
    for (int32_t c0 = 0; c0 < w->cols; c0 += PLUME_QACT_GROUP) {
        int32_t dot = 0;
        for (int32_t c = c0; c < w->cols && c < c0 + PLUME_QACT_GROUP; c++) dot += plume_weight_q(w, r, c) * q[plume_qact_pos(c)];
        const float p = xs[c0 / PLUME_QACT_GROUP] * (float)dot;
        acc += p;
    }
    return acc * (plume_f16_to_f32(w->scale[r]) / 127.0f);
}

/* Q4 row r . token row q: exact int32 sum per group of 32, each times d * xs, in group order. */
static float qact_row_q4(const plume_weight *w, int32_t r, const int8_t *q, const float *xs) {
    float acc = 0.0f;
    for (int32_t g = 0; g < w->cols / PLUME_QACT_GROUP; g++) {
        int32_t dot = 0;
        for (int32_t c = g * PLUME_QACT_GROUP; c < (g + 1) * PLUME_QACT_GROUP; c++)
            dot += plume_weight_q(w, r, c) * q[plume_qact_pos(c)];
        const float f = plume_f16_to_f32(plume_weight_q4_step(w, r, g)) * xs[g];
        const float p = f * (float)dot;
        acc += p;
    }
    return acc;
}

/* Every (token, row) pair of the range, one row dot at a time. */
void plume_qact_matmul_ref(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                           const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                           int32_t r1) {
    (void)xcor; /* a shortcut for the u8 x s8 kernels; the reference multiplies signed */
    if (!plume_qact_supported(w)) return;
    const int64_t stride = plume_qact_stride(w->cols);
    const int32_t groups = plume_qact_groups(w->cols);
    for (int32_t t = 0; t < T; t++) {
        const int8_t *q = xq + t * stride;
        const float *s = xs + (int64_t)t * groups;
        for (int32_t r = r0; r < r1; r++)
            y[t * ldy + r] = w->type == PLUME_W_Q8 ? qact_row_q8(w, r, q, s) : qact_row_q4(w, r, q, s);
    }
}
