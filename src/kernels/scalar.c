/* scalar.c -- the reference kernels: plain C loops, float32 accumulation in index order.
 * Every other kernel table is tested against this one. */
#include "../common.h"
#include "kernels.h"

#include <math.h>

/* One row of each weight type, dotted with x[cols]. */
static float row_f32(const plume_weight *w, int32_t r, const float *x) {
    const float *wr = (const float *)w->data + (int64_t)r * w->cols;
    float acc = 0.0f;
    for (int32_t c = 0; c < w->cols; c++) acc += wr[c] * x[c];
    return acc;
}

static float row_f16(const plume_weight *w, int32_t r, const float *x) {
    const uint16_t *wr = (const uint16_t *)w->data + (int64_t)r * w->cols;
    float acc = 0.0f;
    for (int32_t c = 0; c < w->cols; c++) acc += plume_f16_to_f32(wr[c]) * x[c];
    return acc;
}

static float row_bf16(const plume_weight *w, int32_t r, const float *x) {
    const uint16_t *wr = (const uint16_t *)w->data + (int64_t)r * w->cols;
    float acc = 0.0f;
    for (int32_t c = 0; c < w->cols; c++) acc += plume_bf16_to_f32(wr[c]) * x[c];
    return acc;
}

/* q8: W = q * s / 127, so row . x = (s / 127) * sum q * x. */
static float row_q8(const plume_weight *w, int32_t r, const float *x) {
    const int8_t *wr = (const int8_t *)w->data + (int64_t)r * w->cols;
    float acc = 0.0f;
    for (int32_t c = 0; c < w->cols; c++) acc += (float)wr[c] * x[c];
    return acc * (plume_f16_to_f32(w->scale[r]) / 127.0f);
}

/* q4: groups of 32 columns, W = q * d, q = nibble - 8. */
static float row_q4(const plume_weight *w, int32_t r, const float *x) {
    const uint8_t *wr = (const uint8_t *)w->data + (int64_t)r * (w->cols / 2);
    const uint16_t *sr = w->scale + (int64_t)r * (w->cols / 32);
    float acc = 0.0f;
    for (int32_t g = 0; g < w->cols / 32; g++) {
        float gacc = 0.0f;
        for (int32_t i = 0; i < 16; i++) {
            uint8_t b = wr[g * 16 + i];
            gacc += (float)((int)(b & 15) - 8) * x[g * 32 + 2 * i];
            gacc += (float)((int)(b >> 4) - 8) * x[g * 32 + 2 * i + 1];
        }
        acc += gacc * plume_f16_to_f32(sr[g]);
    }
    return acc;
}

typedef float (*row_fn)(const plume_weight *, int32_t, const float *);

/* Apply one row kernel to every (token, row) pair of the range. */
static void matmul_rows(row_fn f, float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                        const plume_weight *w, int32_t r0, int32_t r1) {
    for (int32_t t = 0; t < T; t++)
        for (int32_t r = r0; r < r1; r++) y[t * ldy + r] = f(w, r, x + t * ldx);
}

/* The table's matmul entries, one per weight type. */
static void mm_f32(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w,
                   int32_t r0, int32_t r1) {
    matmul_rows(row_f32, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_f16(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w,
                   int32_t r0, int32_t r1) {
    matmul_rows(row_f16, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w,
                    int32_t r0, int32_t r1) {
    matmul_rows(row_bf16, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_q8(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w,
                  int32_t r0, int32_t r1) {
    matmul_rows(row_q8, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_q4(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w,
                  int32_t r0, int32_t r1) {
    matmul_rows(row_q4, y, ldy, x, ldx, T, w, r0, r1);
}

/* sum a[i] * b[i], in index order. */
static float dot_scalar(const float *a, const float *b, int32_t n) {
    float acc = 0.0f;
    for (int32_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y += a * x. */
static void axpy_scalar(float *y, float a, const float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* ---- attention ----------------------------------------------------------------------- */

/* Element i of row j of a run's K or V rows: float, or int8 times the row's scale. */
static float kv_elem(const void *rows, const float *scales, const plume_kv_run *r, int32_t j, int32_t i) {
    if (!scales) return ((const float *)rows)[j * r->stride + i];
    return (float)((const int8_t *)rows)[j * r->stride + i] * scales[j * r->sstride];
}

/* The block's softmax state, in row order: scores, max, exp and sum, then V weighted. */
static void attn_block_scalar(float *acc, float *m, float *l, const float *q, int32_t nh, int32_t hd,
                              const plume_kv_run *run, int32_t nrun, float *p) {
    int32_t n = 0;
    for (int32_t k = 0; k < nrun; k++) n += run[k].n;
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n)
        for (int32_t j = 0; j < run[k].n; j++)
            for (int32_t h = 0; h < nh; h++) {
                float s = 0.0f;
                for (int32_t i = 0; i < hd; i++) s += q[(int64_t)h * hd + i] * kv_elem(run[k].k, run[k].ks, &run[k], j, i);
                p[(int64_t)h * n + j0 + j] = s;
            }
    for (int32_t h = 0; h < nh; h++) {
        float *ph = p + (int64_t)h * n, mx = -INFINITY, sum = 0.0f;
        for (int32_t j = 0; j < n; j++) mx = ph[j] > mx ? ph[j] : mx;
        for (int32_t j = 0; j < n; j++) {
            ph[j] = plume_attn_exp(ph[j] - mx);
            sum += ph[j];
        }
        m[h] = mx;
        l[h] = sum;
        for (int32_t i = 0; i < hd; i++) acc[(int64_t)h * hd + i] = 0.0f;
    }
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n)
        for (int32_t j = 0; j < run[k].n; j++)
            for (int32_t h = 0; h < nh; h++)
                for (int32_t i = 0; i < hd; i++)
                    acc[(int64_t)h * hd + i] += p[(int64_t)h * n + j0 + j] * kv_elem(run[k].v, run[k].vs, &run[k], j, i);
}

void plume_attn_fold(float *a, float *m, float *l, const float *a2, float m2, float l2, int32_t hd) {
    float mx = *m > m2 ? *m : m2, c1 = expf(*m - mx), c2 = expf(m2 - mx);
    for (int32_t i = 0; i < hd; i++) a[i] = a[i] * c1 + a2[i] * c2;
    *l = *l * c1 + l2 * c2;
    *m = mx;
}

void plume_attn_finish(float *out, const float *a, float l, int32_t hd) {
    for (int32_t i = 0; i < hd; i++) out[i] = a[i] / l;
}

/* gelu with the tanh approximation (gelu_pytorch_tanh), times u. */
void plume_gelu_mul_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
    }
}

/* The final logit softcap: cap * tanh(x / cap). */
void plume_softcap_ref(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void plume_sigmoid_mul_ref(float *y, const float *a, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float t = expf(-fabsf(g[i])), r = 1.0f / (1.0f + t);
        y[i] = a[i] * (g[i] >= 0.0f ? r : t * r);
    }
}

void plume_softmax_ref(float *x, int64_t n) {
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int64_t i = 0; i < n; i++) sum += x[i] = expf(x[i] - mx);
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float plume_rmsnorm_factor(const double s[8], const float *x, int32_t i, int32_t n, float eps) {
    double ss = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) ss += (double)x[i] * (double)x[i];
    return (float)(1.0 / sqrt(ss / n + (double)eps));
}

void plume_rmsnorm_ref(float *y, const float *x, const float *w, int32_t n, float eps) {
    double s[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += (double)x[i + k] * (double)x[i + k];
    float r = plume_rmsnorm_factor(s, x, i, n, eps);
    if (w)
        for (i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    else
        for (i = 0; i < n; i++) y[i] = x[i] * r;
}

const plume_kernels plume_kernels_scalar = {
    .name = "scalar",
    .matmul = {mm_f32, mm_f16, mm_bf16, mm_q8, mm_q4},
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .gelu_mul = plume_gelu_mul_ref,
    .softcap = plume_softcap_ref,
    .sigmoid_mul = plume_sigmoid_mul_ref,
    .softmax = plume_softmax_ref,
    .rmsnorm = plume_rmsnorm_ref,
    .attn_block = attn_block_scalar,
};
