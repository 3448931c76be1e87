/* neon.c -- the kernel table for AArch64 Advanced SIMD: 4 floats a vector, 32 registers.
 * Same math as scalar.c with the sums reassociated; activations stay float32.
 *
 * Laid out as avx512.c, which explains the tiling: decode (T = 1) runs 8 rows at a time over
 * one load of x; prefill (T > 1) runs tiles of 4 rows x up to 4 tokens (16 accumulators) over
 * row panels that stay in L2 while every block of tokens passes over them. A step is 8
 * columns, two vectors, so a Q8 step widens one 8-byte load.
 *
 * Q4 goes half a group (16 columns, 8 bytes) a step: the low nibbles are the even columns and
 * the high nibbles the odd ones, which is how vld2q_f32 splits x, so the nibbles widen to
 * floats without being interleaved. Every token adds d * (sum q x - 8 sum x) per half group,
 * as avx2.c, in the same order alone or among others (plume_batch promises the same bits). FP16 needs only the base ISA's vcvt_f32_f16. Not measured on hardware (only run
 * under QEMU): tile shapes were chosen so GCC keeps the accumulators in registers.
 */
#include <arm_neon.h>
#include <math.h>

#include "../common.h"
#include "kernels.h"
#include "tile.h"

enum {
    ROWS_DECODE = 8,        /* rows per tile when T = 1 */
    ROWS_PREFILL = 4,       /* rows per tile when T > 1 */
    TOKENS_MAX = 4,         /* tokens per tile: 4 x 4 accumulators + 8 x + 2 weights < 32 */
    TOKENS_MAX_Q4 = 3,      /* Q4: 4 x 3 accumulators + 4 weights + 4 x (reloaded per row) */
    Q4_CHUNK = 16,          /* Q4 groups whose scales are converted at once */
    PANEL_BYTES = 256 << 10 /* weights of a row panel, re-read from L2 by each token block */
};

static const tile_plan plan = {ROWS_DECODE, ROWS_PREFILL, PANEL_BYTES};

/* ---- weights as floats --------------------------------------------------------------- */

/* Columns c..c+7 of a row of F32, F16, BF16 or Q8 weights, as two float vectors (Q8
 * unscaled). */
static inline __attribute__((always_inline)) float32x4x2_t load8(plume_wtype type,
                                                                 const uint8_t *row, int32_t c) {
    float32x4x2_t v;
    switch (type) {
    case PLUME_W_F32:
        v.val[0] = vld1q_f32((const float *)row + c);
        v.val[1] = vld1q_f32((const float *)row + c + 4);
        break;
    case PLUME_W_F16: {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)row + c));
        v.val[0] = vcvt_f32_f16(vget_low_f16(h));
        v.val[1] = vcvt_high_f32_f16(h);
        break;
    }
    case PLUME_W_BF16: {
        uint16x8_t h = vld1q_u16((const uint16_t *)row + c);
        v.val[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        v.val[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
        break;
    }
    case PLUME_W_Q8: {
        int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)row + c));
        v.val[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(q)));
        v.val[1] = vcvtq_f32_s32(vmovl_high_s16(q));
        break;
    }
    default:
        v.val[0] = v.val[1] = vdupq_n_f32(0.0f);
        break;
    }
    return v;
}

/* ---- tiles --------------------------------------------------------------------------- */

/* Y for rows r..r+R-1 x tokens t0..t0+TT-1, F32/F16/BF16/Q8. R, TT and type are constants
 * once inlined, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void tile_body(plume_wtype type, const mm_args *a,
                                                            int32_t r, int32_t t0, const int R,
                                                            const int TT) {
    const int32_t cols = a->w->cols;
    const uint8_t *wr[ROWS_DECODE];
    const float *xt[TOKENS_MAX];
    float32x4_t acc[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++) wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
    UNROLL
    for (int t = 0; t < TT; t++) xt[t] = a->x + (int64_t)(t0 + t) * a->ldx;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = vdupq_n_f32(0.0f);

    int32_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        /* x first, then one row's weights at a time: R*TT + 2*TT + 2 registers */
        float32x4x2_t xv[TOKENS_MAX];
        UNROLL
        for (int t = 0; t < TT; t++) {
            xv[t].val[0] = vld1q_f32(xt[t] + c);
            xv[t].val[1] = vld1q_f32(xt[t] + c + 4);
        }
        UNROLL
        for (int i = 0; i < R; i++) {
            float32x4x2_t wv = load8(type, wr[i], c);
            UNROLL
            for (int t = 0; t < TT; t++) {
                acc[i][t] = vfmaq_f32(acc[i][t], wv.val[0], xv[t].val[0]);
                acc[i][t] = vfmaq_f32(acc[i][t], wv.val[1], xv[t].val[1]);
            }
        }
    }
    float sum[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) sum[i][t] = vaddvq_f32(acc[i][t]);
    for (; c < cols; c++) {
        for (int i = 0; i < R; i++) {
            float wc = load1(type, wr[i], c);
            for (int t = 0; t < TT; t++) sum[i][t] += wc * xt[t][c];
        }
    }
    for (int i = 0; i < R; i++) {
        float f = row_factor(type, a->w, r + i);
        for (int t = 0; t < TT; t++) a->y[(int64_t)(t0 + t) * a->ldy + r + i] = sum[i][t] * f;
    }
}

/* The Q4 twin of tile_body: half a scale group (16 columns) a step, see the file comment. */
static inline __attribute__((always_inline)) void tile_body_q4(const mm_args *a, int32_t r,
                                                               int32_t t0, const int R,
                                                               const int TT) {
    const int32_t groups = a->w->cols / 32;
    const uint8x8_t low4 = vdup_n_u8(15);
    const uint8_t *wr[ROWS_DECODE];
    const uint16_t *sr[ROWS_DECODE];
    const float *xt[TOKENS_MAX_Q4];
    float32x4_t acc[ROWS_DECODE][TOKENS_MAX_Q4];
    UNROLL
    for (int i = 0; i < R; i++) {
        wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
        sr[i] = a->w->scale + (int64_t)(r + i) * groups;
    }
    UNROLL
    for (int t = 0; t < TT; t++) xt[t] = a->x + (int64_t)(t0 + t) * a->ldx;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = vdupq_n_f32(0.0f);

    for (int32_t g0 = 0; g0 < groups; g0 += Q4_CHUNK) {
        int32_t n = groups - g0 < Q4_CHUNK ? groups - g0 : Q4_CHUNK;
        float d[ROWS_DECODE][Q4_CHUNK];
        for (int i = 0; i < R; i++) {
            int32_t j = 0;
            for (; j + 4 <= n; j += 4) vst1q_f32(d[i] + j, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(sr[i] + g0 + j))));
            for (; j < n; j++) d[i][j] = plume_f16_to_f32(sr[i][g0 + j]);
        }
        for (int32_t h = 2 * g0; h < 2 * (g0 + n); h++) { /* half groups of 16 columns */
            /* -8 times each token's sum of x over this half group, spread over 4 lanes */
            float32x4_t m8sx[TOKENS_MAX_Q4];
            UNROLL
            for (int t = 0; t < TT; t++) {
                float32x4x2_t x0 = vld2q_f32(xt[t] + 16 * h), x1 = vld2q_f32(xt[t] + 16 * h + 8);
                m8sx[t] = vmulq_n_f32(vaddq_f32(vaddq_f32(x0.val[0], x0.val[1]), vaddq_f32(x1.val[0], x1.val[1])),
                                      -8.0f);
            }
            UNROLL
            for (int i = 0; i < R; i++) {
                /* 8 bytes: low nibbles are columns 0 2 .. 14, high ones 1 3 .. 15 */
                uint8x8_t b = vld1_u8(wr[i] + 8 * h);
                uint16x8_t lo = vmovl_u8(vand_u8(b, low4)), hi = vmovl_u8(vshr_n_u8(b, 4));
                float32x4_t e0 = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
                float32x4_t e1 = vcvtq_f32_u32(vmovl_high_u16(lo));
                float32x4_t o0 = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
                float32x4_t o1 = vcvtq_f32_u32(vmovl_high_u16(hi));
                float dg = d[i][h / 2 - g0];
                /* d * (sum q x - 8 sum x) for every token, as avx2.c: the same order whatever
                 * TT, so batches are bit-identical to single steps (x reloads come from L1) */
                UNROLL
                for (int t = 0; t < TT; t++) {
                    float32x4x2_t u0 = vld2q_f32(xt[t] + 16 * h), u1 = vld2q_f32(xt[t] + 16 * h + 8);
                    float32x4_t sm = vfmaq_f32(m8sx[t], e0, u0.val[0]);
                    sm = vfmaq_f32(sm, o0, u0.val[1]);
                    sm = vfmaq_f32(sm, e1, u1.val[0]);
                    sm = vfmaq_f32(sm, o1, u1.val[1]);
                    acc[i][t] = vfmaq_n_f32(acc[i][t], sm, dg);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) a->y[(int64_t)(t0 + t) * a->ldy + r + i] = vaddvq_f32(acc[i][t]);
}

/* One tile of the given shape, with R and TT turned into constants (the shapes mm_drive uses). */
static inline __attribute__((always_inline)) void tile_shape(plume_wtype type, const mm_args *a,
                                                             int32_t r, int32_t t0, int R, int TT) {
    if (type == PLUME_W_Q4) {
        switch (R * 8 + TT) {
        case ROWS_DECODE * 8 + 1: /* as two tiles of 4: with 8, GCC widens every row's
                                     nibbles up front and spills */
            tile_body_q4(a, r, t0, ROWS_PREFILL, 1);
            tile_body_q4(a, r + ROWS_PREFILL, t0, ROWS_PREFILL, 1);
            break;
        case ROWS_PREFILL * 8 + 1: tile_body_q4(a, r, t0, ROWS_PREFILL, 1); break;
        case ROWS_PREFILL * 8 + 2: tile_body_q4(a, r, t0, ROWS_PREFILL, 2); break;
        case ROWS_PREFILL * 8 + 3: tile_body_q4(a, r, t0, ROWS_PREFILL, 3); break;
        case 1 * 8 + 1: tile_body_q4(a, r, t0, 1, 1); break;
        case 1 * 8 + 2: tile_body_q4(a, r, t0, 1, 2); break;
        case 1 * 8 + 3: tile_body_q4(a, r, t0, 1, 3); break;
        default: break;
        }
        return;
    }
    switch (R * 8 + TT) {
    case ROWS_DECODE * 8 + 1: tile_body(type, a, r, t0, ROWS_DECODE, 1); break;
    case ROWS_PREFILL * 8 + 1: tile_body(type, a, r, t0, ROWS_PREFILL, 1); break;
    case ROWS_PREFILL * 8 + 2: tile_body(type, a, r, t0, ROWS_PREFILL, 2); break;
    case ROWS_PREFILL * 8 + 3: tile_body(type, a, r, t0, ROWS_PREFILL, 3); break;
    case ROWS_PREFILL * 8 + 4: tile_body(type, a, r, t0, ROWS_PREFILL, 4); break;
    case 1 * 8 + 1: tile_body(type, a, r, t0, 1, 1); break;
    case 1 * 8 + 2: tile_body(type, a, r, t0, 1, 2); break;
    case 1 * 8 + 3: tile_body(type, a, r, t0, 1, 3); break;
    case 1 * 8 + 4: tile_body(type, a, r, t0, 1, 4); break;
    default: break;
    }
}

/* The tiles of each weight type, compiled separately. */
static void tile_f32(const mm_args *a, int32_t r, int32_t t0, int R, int TT) {
    tile_shape(PLUME_W_F32, a, r, t0, R, TT);
}
static void tile_f16(const mm_args *a, int32_t r, int32_t t0, int R, int TT) {
    tile_shape(PLUME_W_F16, a, r, t0, R, TT);
}
static void tile_bf16(const mm_args *a, int32_t r, int32_t t0, int R, int TT) {
    tile_shape(PLUME_W_BF16, a, r, t0, R, TT);
}
static void tile_q8(const mm_args *a, int32_t r, int32_t t0, int R, int TT) {
    tile_shape(PLUME_W_Q8, a, r, t0, R, TT);
}
static void tile_q4(const mm_args *a, int32_t r, int32_t t0, int R, int TT) {
    tile_shape(PLUME_W_Q4, a, r, t0, R, TT);
}

/* ---- matmul -------------------------------------------------------------------------- */

/* The table's matmul entries, one per weight type. */
static void mm_f32(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                   const plume_weight *w, int32_t r0, int32_t r1) {
    mm_run(PLUME_W_F32, tile_f32, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_f16(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                   const plume_weight *w, int32_t r0, int32_t r1) {
    mm_run(PLUME_W_F16, tile_f16, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_bf16(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                    const plume_weight *w, int32_t r0, int32_t r1) {
    mm_run(PLUME_W_BF16, tile_bf16, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_q8(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                  const plume_weight *w, int32_t r0, int32_t r1) {
    mm_run(PLUME_W_Q8, tile_q8, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_q4(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                  const plume_weight *w, int32_t r0, int32_t r1) {
    mm_run(PLUME_W_Q4, tile_q4, &plan, TOKENS_MAX_Q4, y, ldy, x, ldx, T, w, r0, r1);
}

/* ---- vectors ------------------------------------------------------------------------- */

/* sum a[i] * b[i]: four accumulators of 4, then one, then a scalar tail. */
static float dot_neon(const float *a, const float *b, int32_t n) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float acc = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y += a * x. */
static void axpy_neon(float *y, float a, const float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

/* exp(y) for y <= 0 (clamped at -87): 2^n * p(r), r = y - n ln2, p the degree-6 Taylor
 * polynomial of avx512.c's exp_neg512, 2^n built in the exponent bits. */
static inline float32x4_t exp_neg4(float32x4_t y) {
    y = vmaxq_f32(y, vdupq_n_f32(-87.0f));
    float32x4_t n = vrndnq_f32(vmulq_f32(y, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(y, n, vdupq_n_f32(0.693145751953125f));
    r = vfmsq_f32(r, n, vdupq_n_f32(1.428606765330187e-06f));
    float32x4_t p = vdupq_n_f32(1.0f / 720.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* y = a * sigmoid(g), 4 at a time in plume_sigmoid_mul_ref's form, the tail in scalar. */
static void sigmoid_mul_neon(float *y, const float *a, const float *g, int64_t n) {
    int64_t i = 0;
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (; i + 4 <= n; i += 4) {
        float32x4_t x = vld1q_f32(g + i);
        float32x4_t t = exp_neg4(vnegq_f32(vabsq_f32(x)));
        float32x4_t r = vdivq_f32(one, vaddq_f32(one, t));
        float32x4_t s = vbslq_f32(vcgeq_f32(x, vdupq_n_f32(0.0f)), r, vmulq_f32(t, r));
        vst1q_f32(y + i, vmulq_f32(vld1q_f32(a + i), s));
    }
    plume_sigmoid_mul_ref(y + i, a + i, g + i, n - i);
}

/* plume_rmsnorm_ref's bits: its 8 partial sums are the double lanes of four accumulators. */
static void rmsnorm_neon(float *y, const float *x, const float *w, int32_t n, float eps) {
    float64x2_t s[4] = {vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 4; k++) {
            const float64x2_t v = vcvt_f64_f32(vld1_f32(x + i + 2 * k));
            s[k] = vaddq_f64(s[k], vmulq_f64(v, v)); /* the square is exact */
        }
    double p[8];
    for (int k = 0; k < 4; k++) vst1q_f64(p + 2 * k, s[k]);
    const float r = plume_rmsnorm_factor(p, x, i, n, eps);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t v = vmulq_n_f32(vld1q_f32(x + i), r);
        vst1q_f32(y + i, w ? vmulq_f32(v, vld1q_f32(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? x[i] * r * w[i] : x[i] * r;
}

/* ---- attention ----------------------------------------------------------------------- */

/* Columns c..c+3 of a K or V row as floats: float rows, or int8 rows unscaled. */
static inline __attribute__((always_inline)) float32x4_t kv4(const void *row, int i8, int32_t c) {
    if (i8) {
        uint32_t b;
        memcpy(&b, (const int8_t *)row + c, 4);
        int16x4_t w = vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(b))));
        return vcvtq_f32_s32(vmovl_s16(w));
    }
    return vld1q_f32((const float *)row + c);
}

/* Column c of a K or V row (int8 unscaled). */
static inline float kv1(const void *row, int i8, int32_t c) {
    return i8 ? (float)((const int8_t *)row)[c] : ((const float *)row)[c];
}

/* Row j of a run's K (v = 0) or V (v = 1) rows. */
static inline const void *kv_rowp(const plume_kv_run *r, int v, int i8, int32_t j) {
    const void *base = v ? r->v : r->k;
    return i8 ? (const void *)((const int8_t *)base + j * r->stride) : (const void *)((const float *)base + j * r->stride);
}

/* p[h * ldp + j] = q_h . k_j (times the row's scale if int8) for NH heads and the run's rows:
 * each K row is loaded once for all NH heads, one accumulator per head. */
static inline __attribute__((always_inline)) void attn_scores(int NH, int i8, float *p, int64_t ldp, const float *q,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t hv = hd & ~3;
    for (int32_t j = 0; j < r->n; j++) {
        const void *row = kv_rowp(r, 0, i8, j);
        float32x4_t acc[8];
        UNROLL
        for (int h = 0; h < NH; h++) acc[h] = vdupq_n_f32(0.0f);
        for (int32_t c = 0; c < hv; c += 4) {
            float32x4_t k = kv4(row, i8, c);
            UNROLL
            for (int h = 0; h < NH; h++) acc[h] = vfmaq_f32(acc[h], vld1q_f32(q + (int64_t)h * hd + c), k);
        }
        UNROLL
        for (int h = 0; h < NH; h++) {
            float s = vaddvq_f32(acc[h]);
            for (int32_t c = hv; c < hd; c++) s += q[(int64_t)h * hd + c] * kv1(row, i8, c);
            p[h * ldp + j] = i8 ? s * r->ks[j * r->sstride] : s;
        }
    }
}

/* acc[h] += sum_j p[h * ldp + j] v_j for NH heads over the run's rows (int8: p holds the row's
 * scale already), 8 rows at a time with the NH sums of 4 columns in registers. */
static inline __attribute__((always_inline)) void attn_values(int NH, int i8, float *acc, const float *p, int64_t ldp,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t hv = hd & ~3;
    for (int32_t j0 = 0; j0 < r->n; j0 += 8) {
        int32_t nj = r->n - j0 < 8 ? r->n - j0 : 8;
        for (int32_t c = 0; c < hv; c += 4) {
            float32x4_t a[8];
            UNROLL
            for (int h = 0; h < NH; h++) a[h] = vld1q_f32(acc + (int64_t)h * hd + c);
            for (int32_t j = 0; j < nj; j++) {
                float32x4_t v = kv4(kv_rowp(r, 1, i8, j0 + j), i8, c);
                UNROLL
                for (int h = 0; h < NH; h++) a[h] = vfmaq_n_f32(a[h], v, p[h * ldp + j0 + j]);
            }
            UNROLL
            for (int h = 0; h < NH; h++) vst1q_f32(acc + (int64_t)h * hd + c, a[h]);
        }
        for (int32_t j = 0; j < nj; j++) {
            const void *row = kv_rowp(r, 1, i8, j0 + j);
            UNROLL
            for (int h = 0; h < NH; h++)
                for (int32_t c = hv; c < hd; c++) acc[(int64_t)h * hd + c] += p[h * ldp + j0 + j] * kv1(row, i8, c);
        }
    }
}

/* Scores (v = 0) or values (v = 1) of nh heads over one run, in chunks of 8, 4 and 1 heads. */
static void attn_run(int v, float *out, float *p, int64_t ldp, const float *q, int32_t nh, int32_t hd,
                     const plume_kv_run *r) {
    int i8 = r->ks != NULL;
    for (int32_t h = 0; h < nh;) {
        int32_t w = nh - h >= 8 ? 8 : nh - h >= 4 ? 4 : 1;
        /* out is NULL for the scores (v = 0): no offset from it then (NULL + 0 is undefined) */
        float *ph = p + h * ldp, *oh = v ? out + (int64_t)h * hd : NULL;
        const float *qh = q + (int64_t)h * hd;
        if (!v && w == 8) i8 ? attn_scores(8, 1, ph, ldp, qh, hd, r) : attn_scores(8, 0, ph, ldp, qh, hd, r);
        else if (!v && w == 4) i8 ? attn_scores(4, 1, ph, ldp, qh, hd, r) : attn_scores(4, 0, ph, ldp, qh, hd, r);
        else if (!v) i8 ? attn_scores(1, 1, ph, ldp, qh, hd, r) : attn_scores(1, 0, ph, ldp, qh, hd, r);
        else if (w == 8) i8 ? attn_values(8, 1, oh, ph, ldp, hd, r) : attn_values(8, 0, oh, ph, ldp, hd, r);
        else if (w == 4) i8 ? attn_values(4, 1, oh, ph, ldp, hd, r) : attn_values(4, 0, oh, ph, ldp, hd, r);
        else i8 ? attn_values(1, 1, oh, ph, ldp, hd, r) : attn_values(1, 0, oh, ph, ldp, hd, r);
        h += w;
    }
}

/* The kernels.h contract: scores, per-head max (4 at a time), exp (libm) and sum, then V. */
static void attn_block_neon(float *acc, float *m, float *l, const float *q, int32_t nh, int32_t hd,
                            const plume_kv_run *run, int32_t nrun, float *p) {
    int32_t n = 0;
    for (int32_t k = 0; k < nrun; k++) n += run[k].n;
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) attn_run(0, NULL, p + j0, n, q, nh, hd, &run[k]);
    for (int32_t h = 0; h < nh; h++) {
        float *ph = p + (int64_t)h * n, mx = -INFINITY, sum = 0.0f;
        int32_t j = 0;
        float32x4_t vm = vdupq_n_f32(-INFINITY);
        for (; j + 4 <= n; j += 4) vm = vmaxq_f32(vm, vld1q_f32(ph + j));
        mx = vmaxvq_f32(vm);
        for (; j < n; j++) mx = ph[j] > mx ? ph[j] : mx;
        for (j = 0; j < n; j++) sum += ph[j] = plume_attn_exp(ph[j] - mx);
        m[h] = mx;
        l[h] = sum;
        for (int32_t i = 0; i < hd; i++) acc[(int64_t)h * hd + i] = 0.0f;
    }
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) {
        if (run[k].vs) /* int8 V: fold each row's scale into its weights */
            for (int32_t h = 0; h < nh; h++)
                for (int32_t j = 0; j < run[k].n; j++) p[(int64_t)h * n + j0 + j] *= run[k].vs[j * run[k].sstride];
        attn_run(1, acc, p + j0, n, q, nh, hd, &run[k]);
    }
}

const plume_kernels plume_kernels_neon = {
    .name = "neon",
    .matmul = {mm_f32, mm_f16, mm_bf16, mm_q8, mm_q4},
    .dot = dot_neon,
    .axpy = axpy_neon,
    .gelu_mul = plume_gelu_mul_ref, /* libm: NEON has no fast tanh here yet */
    .softcap = plume_softcap_ref,
    .sigmoid_mul = sigmoid_mul_neon,
    .softmax = plume_softmax_ref, /* libm exp, as gelu_mul */
    .rmsnorm = rmsnorm_neon,
    .attn_block = attn_block_neon,
};
