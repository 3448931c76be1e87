/* neon_qact.h -- the body of the NEON int8-activation matmul (qact.h), included twice: by
 * neon_qact.c (QN_SDOT 0: widening multiplies, any AArch64 CPU) and by neon_qact_dot.c
 * (QN_SDOT 1: sdot, compiled with -march=armv8.2-a+dotprod). QN_FN(name) names the copy.
 *
 * Both multiply signed by signed, so neither needs xcor, and both end a chunk on the same exact
 * int32 lanes (lane j of group g sums columns 32g + 4j.. and 32g + 16 + 4j.., qact.h), so they
 * give the same bits.
 *
 * Per chunk, per row and token, four int32x4 (one per group) are converted and multiplied by
 * the group's factor (Q8: xs; Q4: d xs) into four float accumulators; at the end each (row,
 * token) reduces them by one fixed tree, whatever the tile: a row's output does not depend on
 * T, the batch or the row split. Tiles are 4 rows x 1 token (decode) or 2 x 2 (prefill), 16
 * accumulators of the 32 q registers. A last partial chunk (never in Gemma 4) goes through a
 * zero-padded copy of the row's tail.
 */
#include <arm_neon.h>
#include <string.h>

#include "../common.h"
#include "kernels.h"
#include "qact.h"

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

enum {
    ROWS_DECODE = 4, /* rows per tile at T = 1 */
    ROWS = 2,        /* rows x tokens per tile when T > 1 */
    TOKENS = 2,
    PANEL_BYTES = 64 << 10 /* weights of a row panel, re-read from L2 by each token pair */
};

/* What every tile of one matmul call shares. */
typedef struct {
    float *y;            /* Y[t*ldy + r] */
    int64_t ldy;
    const int8_t *xq;    /* [T, stride], chunk layout */
    const float *xs;     /* [T, groups] */
    int64_t stride;
    int32_t groups;
    const plume_weight *w;
    size_t row_bytes;    /* bytes of one row of w->data */
    int32_t nfull;       /* whole chunks of a row */
    int32_t nchunks;     /* chunks of the padded row */
} qn_args;

/* ---- the two dot products ---------------------------------------------------------------- */

/* Lanes j = sum of a[4j..4j+3] b[4j..4j+3] + c[..] d[..], plus acc: with sdot, or the
 * portable way (products in int16, pairwise sums). */
static inline __attribute__((always_inline)) int32x4_t QN_FN(dot2)(int32x4_t acc, int8x16_t a, int8x16_t b,
                                                                   int8x16_t c, int8x16_t d) {
#if QN_SDOT
    return vdotq_s32(vdotq_s32(acc, a, b), c, d);
#else
    int32x4_t ab = vpaddq_s32(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))),
                              vpaddlq_s16(vmull_high_s8(a, b)));
    int32x4_t cd = vpaddq_s32(vpaddlq_s16(vmull_s8(vget_low_s8(c), vget_low_s8(d))),
                              vpaddlq_s16(vmull_high_s8(c, d)));
    return vaddq_s32(acc, vaddq_s32(ab, cd));
#endif
}

/* ---- tiles ------------------------------------------------------------------------------- */

/* Y for rows r..r+R-1 x tokens t0..t0+TT-1, all chunks. R, TT and q8 are constants once
 * inlined, so acc lives in registers. */
static inline __attribute__((always_inline)) void QN_FN(tile_body)(const qn_args *a, int32_t r, int32_t t0,
                                                                   const int R, const int TT, const int q8) {
    const plume_weight *w = a->w;
    const int32_t ng = w->cols / PLUME_QACT_GROUP;
    float32x4_t acc[ROWS_DECODE][TOKENS][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++)
            UNROLL
            for (int g = 0; g < 4; g++) acc[i][t][g] = vdupq_n_f32(0.0f);
    uint8_t tailbuf[ROWS_DECODE][PLUME_QACT_CHUNK]; /* a last partial chunk, zero padded */
    uint16_t tailsc[ROWS_DECODE][4];
    for (int32_t k = 0; k < a->nchunks; k++) {
        const int64_t c = (int64_t)k * PLUME_QACT_CHUNK;
        const uint8_t *wr[ROWS_DECODE];
        const uint16_t *sr[ROWS_DECODE];
        UNROLL
        for (int i = 0; i < R; i++) {
            wr[i] = (const uint8_t *)w->data + (size_t)(r + i) * a->row_bytes + (q8 ? c : c / 2);
            sr[i] = q8 ? NULL : w->scale + (int64_t)(r + i) * ng + 4 * k;
        }
        if (k == a->nfull) { /* the partial chunk: copy what there is, zeros after */
            const size_t have = q8 ? (size_t)(w->cols - c) : (size_t)(w->cols - c) / 2;
            for (int i = 0; i < R; i++) {
                memset(tailbuf[i], 0, sizeof tailbuf[i]);
                memcpy(tailbuf[i], wr[i], have);
                wr[i] = tailbuf[i];
                if (!q8) {
                    memset(tailsc[i], 0, sizeof tailsc[i]);
                    memcpy(tailsc[i], sr[i], (size_t)(ng - 4 * k) * 2);
                    sr[i] = tailsc[i];
                }
            }
        }
        UNROLL
        for (int g = 0; g < 4; g++) {
            float f[TOKENS];
            UNROLL
            for (int t = 0; t < TT; t++) f[t] = a->xs[(int64_t)(t0 + t) * a->groups + 4 * k + g];
            UNROLL
            for (int i = 0; i < R; i++) {
                int8x16_t wa, wb;
                float d = 1.0f;
                if (q8) {
                    wa = vld1q_s8((const int8_t *)wr[i] + 32 * g);
                    wb = vld1q_s8((const int8_t *)wr[i] + 32 * g + 16);
                } else {
                    uint8x16_t b = vld1q_u8(wr[i] + 16 * g);
                    uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
                    wa = vsubq_s8(vreinterpretq_s8_u8(vzip1q_u8(lo, hi)), vdupq_n_s8(8)); /* cols 0-15 */
                    wb = vsubq_s8(vreinterpretq_s8_u8(vzip2q_u8(lo, hi)), vdupq_n_s8(8)); /* 16-31 */
                    d = plume_f16_to_f32(sr[i][g]);
                }
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const int8_t *x = a->xq + (int64_t)(t0 + t) * a->stride + c + 16 * g;
                    int32x4_t s = QN_FN(dot2)(vdupq_n_s32(0), wa, vld1q_s8(x), wb, vld1q_s8(x + 64));
                    acc[i][t][g] = vfmaq_n_f32(acc[i][t][g], vcvtq_f32_s32(s), q8 ? f[t] : d * f[t]);
                }
            }
        }
    }
    /* per (row, token): (acc0 + acc1) + (acc2 + acc3), then across the lanes */
    UNROLL
    for (int i = 0; i < R; i++) {
        const float fr = q8 ? plume_f16_to_f32(w->scale[r + i]) / 127.0f : 1.0f;
        UNROLL
        for (int t = 0; t < TT; t++) {
            float32x4_t v = vaddq_f32(vaddq_f32(acc[i][t][0], acc[i][t][1]), vaddq_f32(acc[i][t][2], acc[i][t][3]));
            float sum = vaddvq_f32(v);
            a->y[(int64_t)(t0 + t) * a->ldy + r + i] = q8 ? sum * fr : sum;
        }
    }
}

/* The tile shapes the driver uses, R and TT turned into constants. */
static void QN_FN(tile)(const qn_args *a, int32_t r, int32_t t0, int R, int TT, int q8) {
    switch ((R * 4 + TT) * 2 + q8) {
    case (4 * 4 + 1) * 2 + 1: QN_FN(tile_body)(a, r, t0, 4, 1, 1); break;
    case (4 * 4 + 1) * 2 + 0: QN_FN(tile_body)(a, r, t0, 4, 1, 0); break;
    case (2 * 4 + 2) * 2 + 1: QN_FN(tile_body)(a, r, t0, 2, 2, 1); break;
    case (2 * 4 + 2) * 2 + 0: QN_FN(tile_body)(a, r, t0, 2, 2, 0); break;
    case (2 * 4 + 1) * 2 + 1: QN_FN(tile_body)(a, r, t0, 2, 1, 1); break;
    case (2 * 4 + 1) * 2 + 0: QN_FN(tile_body)(a, r, t0, 2, 1, 0); break;
    case (1 * 4 + 2) * 2 + 1: QN_FN(tile_body)(a, r, t0, 1, 2, 1); break;
    case (1 * 4 + 2) * 2 + 0: QN_FN(tile_body)(a, r, t0, 1, 2, 0); break;
    case (1 * 4 + 1) * 2 + 1: QN_FN(tile_body)(a, r, t0, 1, 1, 1); break;
    case (1 * 4 + 1) * 2 + 0: QN_FN(tile_body)(a, r, t0, 1, 1, 0); break;
    default: break;
    }
}

/* Check the weight, then cover rows [r0, r1) x tokens [0, T): T = 1 in runs of 4 rows; more
 * in panels of rows crossed with pairs of tokens. */
static void QN_FN(matmul)(float *y, int64_t ldy, const int8_t *xq, const float *xs, int32_t T,
                      const plume_weight *w, int32_t r0, int32_t r1) {
    if (T <= 0 || r1 <= r0 || !plume_qact_supported(w)) return;
    const int q8 = w->type == PLUME_W_Q8;
    qn_args a = {.y = y, .ldy = ldy, .xq = xq, .xs = xs, .stride = plume_qact_stride(w->cols),
                 .groups = plume_qact_groups(w->cols), .w = w,
                 .row_bytes = q8 ? (size_t)w->cols : (size_t)w->cols / 2, .nfull = w->cols / PLUME_QACT_CHUNK,
                 .nchunks = (int32_t)(plume_qact_stride(w->cols) / PLUME_QACT_CHUNK)};
    if (T == 1) {
        int32_t r = r0;
        for (; r + ROWS_DECODE <= r1; r += ROWS_DECODE) QN_FN(tile)(&a, r, 0, ROWS_DECODE, 1, q8);
        for (; r < r1; r++) QN_FN(tile)(&a, r, 0, 1, 1, q8);
        return;
    }
    size_t fit = PANEL_BYTES / a.row_bytes;
    int32_t panel = fit < ROWS ? ROWS : fit > (1 << 20) ? (1 << 20) : (int32_t)fit;
    panel -= panel % ROWS;
    for (int32_t p0 = r0; p0 < r1; p0 += panel) {
        const int32_t p1 = r1 - p0 < panel ? r1 : p0 + panel;
        for (int32_t t0 = 0; t0 < T; t0 += TOKENS) {
            const int tt = T - t0 < TOKENS ? T - t0 : TOKENS;
            int32_t r = p0;
            for (; r + ROWS <= p1; r += ROWS) QN_FN(tile)(&a, r, t0, ROWS, tt, q8);
            for (; r < p1; r++) QN_FN(tile)(&a, r, t0, 1, tt, q8);
        }
    }
}

