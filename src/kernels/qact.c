/* qact.c -- the reference for int8 activations (qact.h): plain loops that define right.
 * Integer sums are exact; the float steps are written in the order avx512_vnni.c repeats.
 * Knows the weight formats of kernels.h and the xq chunk layout; nothing of the model. */
#include <math.h>
#include <string.h>

#include "../common.h"
#include "qact.h"

/* Q8 any cols, Q4 cols a multiple of 32, both within PLUME_QACT_COLS_MAX (qact.h). */
int plume_qact_supported(const plume_weight *w) {
    if (w->cols < 1 || w->cols > PLUME_QACT_COLS_MAX) return 0;
    if (w->type == PLUME_W_Q8) return 1;
    return w->type == PLUME_W_Q4 && w->cols % PLUME_QACT_GROUP == 0;
}

/* ---- quantize -------------------------------------------------------------------------- */

/* Per token: amax, then x * (127 / amax) rounded into the chunk layout; see qact.h. */
void plume_qact_quantize(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                         float *xs, int32_t *xsum) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols);
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        int8_t *q = xq + t * stride;
        int32_t *s = xsum + (int64_t)t * groups;
        memset(q, 0, (size_t)stride);
        memset(s, 0, (size_t)groups * sizeof *s);
        float amax = 0.0f;
        for (int32_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(xr[c]));
        if (!(amax >= PLUME_QACT_TINY)) {
            xs[t] = 0.0f;
            continue;
        }
        const float inv = 127.0f / amax;
        xs[t] = amax / 127.0f;
        for (int32_t c = 0; c < cols; c++) {
            int8_t v = plume_qact_round(xr[c] * inv);
            q[plume_qact_pos(c)] = v;
            s[c / PLUME_QACT_GROUP] += v;
        }
    }
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* Q8 row r . token row q: exact int32 sum of w * xq, then scaled as qact.h states. */
static float qact_row_q8(const plume_weight *w, int32_t r, const int8_t *q, float xs) {
    const int8_t *wr = (const int8_t *)w->data + (int64_t)r * w->cols;
    int32_t dot = 0;
    for (int32_t c = 0; c < w->cols; c++) dot += wr[c] * q[plume_qact_pos(c)];
    return ((float)dot * (plume_f16_to_f32(w->scale[r]) / 127.0f)) * xs;
}

/* Q4 row r . token row q: exact int32 sum per group of 32, each times its d, in group order. */
static float qact_row_q4(const plume_weight *w, int32_t r, const int8_t *q, float xs) {
    const uint8_t *wr = (const uint8_t *)w->data + (int64_t)r * (w->cols / 2);
    const uint16_t *sr = w->scale + (int64_t)r * (w->cols / PLUME_QACT_GROUP);
    float acc = 0.0f;
    for (int32_t g = 0; g < w->cols / PLUME_QACT_GROUP; g++) {
        int32_t dot = 0;
        for (int32_t c = g * PLUME_QACT_GROUP; c < (g + 1) * PLUME_QACT_GROUP; c++) {
            uint8_t b = wr[c / 2];
            int32_t nib = c % 2 ? b >> 4 : b & 15;
            dot += (nib - 8) * q[plume_qact_pos(c)];
        }
        acc += plume_f16_to_f32(sr[g]) * (float)dot;
    }
    return acc * xs;
}

/* Every (token, row) pair of the range, one row dot at a time. */
void plume_qact_matmul_ref(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                           const int32_t *xsum, int32_t T, const plume_weight *w, int32_t r0,
                           int32_t r1) {
    (void)xsum; /* a shortcut for the vector kernels; the reference sums xq itself */
    if (!plume_qact_supported(w)) return;
    const int64_t stride = plume_qact_stride(w->cols);
    for (int32_t t = 0; t < T; t++) {
        const int8_t *q = xq + t * stride;
        for (int32_t r = r0; r < r1; r++)
            y[t * ldy + r] = w->type == PLUME_W_Q8 ? qact_row_q8(w, r, q, xs[t])
                                                   : qact_row_q4(w, r, q, xs[t]);
    }
}
