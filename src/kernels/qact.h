/* qact.h -- int8 activations for prefill: each token row of X is rounded to int8 once per
 * matmul input, then multiplied with Q8 or Q4 weights by integer dot products (exact int32
 * sums), scaled to float once per output. qact.c is the portable reference; avx512_vnni.c does
 * the same with vpdpbusd (u8 x s8 -> s32). The float kernels of kernels.h stay the reference
 * for what the model means; this path trades one int8 rounding of X for ~4x the arithmetic.
 *
 * Buffers (all the caller's; 64-byte alignment is best, none is required):
 *   xq   int8  [T, plume_qact_stride(cols)]  token rows in the chunk layout below, zero padded
 *   xs   float [T]                           xs[t] = amax_t / 127, so X[t, c] ~ xq * xs[t]
 *   xsum int32 [T, plume_qact_groups(cols)]  xsum[t*groups + g] = sum of xq over columns
 *                                            32g .. 32g+31 (0 past cols)
 *
 * Chunk layout of a token row: columns are cut into chunks of 128 (the last one zero padded)
 * and each chunk into eight blocks of 16 columns, stored in the order 0 2 4 6 1 3 5 7:
 *
 *   column  0   16   32   48   64   80   96  112  127
 *           | b0 | b1 | b2 | b3 | b4 | b5 | b6 | b7 |        groups of 32: g0 = b0 b1, ...
 *   byte    0   16   32   48   64   80   96  112  127
 *           | b0 | b2 | b4 | b6 | b1 | b3 | b5 | b7 |        first halves, then second halves
 *
 * so each 64-byte half holds 16 columns of each of the chunk's four groups, one group per
 * 128-bit lane. That is the order in which the Q4 nibbles of a 64-byte weight load unpack
 * (vpunpcklbw / vpunpckhbw interleave within lanes), and the order two vshufi64x2 make of a
 * Q8 row; plume_qact_pos() maps a column to its byte.
 */
#ifndef PLUME_QACT_H
#define PLUME_QACT_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define PLUME_QACT_CHUNK 128      /* columns per chunk of the xq layout */
#define PLUME_QACT_GROUP 32       /* columns per xsum entry (= the Q4 scale group) */
#define PLUME_QACT_COLS_MAX 65536 /* sum of cols u8 x s8 products (255 * 127 each) < 2^31 */
#define PLUME_QACT_TINY 1e-30f    /* a row with amax below this quantizes to zeros, xs = 0
                                     (127 / amax would overflow near 4e-37) */

/* Bytes of one token row of xq: cols rounded up to a whole chunk. */
static inline int64_t plume_qact_stride(int32_t cols) {
    return ((int64_t)cols + PLUME_QACT_CHUNK - 1) / PLUME_QACT_CHUNK * PLUME_QACT_CHUNK;
}

/* Entries of one token row of xsum: groups of 32 in the padded row. */
static inline int32_t plume_qact_groups(int32_t cols) {
    return (int32_t)(plume_qact_stride(cols) / PLUME_QACT_GROUP);
}

/* Byte of a token row of xq that holds column c (the chunk layout above). */
static inline int64_t plume_qact_pos(int32_t c) {
    int32_t n = c % PLUME_QACT_CHUNK; /* column in its chunk: 32 * group + 16 * half + i */
    return (int64_t)(c - n) + 64 * ((n >> 4) & 1) + 16 * (n >> 5) + (n & 15);
}

/* v (= x * (127 / amax)) to the nearest int8, ties to even, clamped to [-127, 127]; NaN gives
 * -127, as the vector conversion's 0x80000000 does once clamped. */
static inline int8_t plume_qact_round(float v) {
    v = nearbyintf(v);
    if (!(v >= -127.0f)) v = -127.0f;
    if (v > 127.0f) v = 127.0f;
    return (int8_t)v;
}

/* Whether the int8 path takes this weight: Q8 or Q4 (cols a multiple of 32), 1 <= cols <=
 * PLUME_QACT_COLS_MAX. The matmuls below leave Y untouched for any other weight. */
int plume_qact_supported(const plume_weight *w);

/* The int8-activation kernels a model uses for prefill. */
typedef void (*plume_qact_quantize_fn)(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                                       float *xs, int32_t *xsum);
typedef void (*plume_qact_matmul_fn)(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                                     const int32_t *xsum, int32_t T, const plume_weight *w, int32_t r0,
                                     int32_t r1);
/* The fast pair for a kernel table (AVX-512 VNNI with the avx512 table), or 0 when the CPU or
 * the table has none (dispatch.c). */
int plume_qact_kernels(const plume_kernels *k, plume_qact_quantize_fn *quantize, plume_qact_matmul_fn *matmul);

/* Quantize X[t*ldx + c] (t < T, c < cols) per token: amax = max |x|, xs[t] = amax / 127,
 * xq = round-half-even(x * (127 / amax)) clamped to [-127, 127], written in the chunk layout
 * with zero padding; xsum as above. A row with amax < PLUME_QACT_TINY is all zeros, xs = 0.
 * X must be finite (otherwise xq is unspecified but within [-127, 127]). */
void plume_qact_quantize(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                         float *xs, int32_t *xsum);

/* Y[t*ldy + r] = sum_c W[r, c] * xq[t, c] * xs[t]   for t < T, r0 <= r < r1; other Y untouched.
 * Q8: y = ((float)dot * (s_r / 127)) * xs[t], dot the exact int32 sum of q * xq.
 * Q4: y = (sum_g d_rg * (float)dot_g) * xs[t], dot_g exact per group of 32, the float sum in
 *     group order. xq, xs, xsum come from plume_qact_quantize with the same cols as w. */
void plume_qact_matmul_ref(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                           const int32_t *xsum, int32_t T, const plume_weight *w, int32_t r0,
                           int32_t r1);

#if defined(__x86_64__)
/* Whether the CPU runs avx512_vnni.c: AVX-512 F/BW/VL/DQ + VNNI, AVX2, FMA, F16C. */
int plume_qact_vnni_available(void);

/* plume_qact_quantize with AVX-512: the same bytes, faster. */
void plume_qact_quantize_vnni(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xsum);

/* plume_qact_matmul_ref with vpdpbusd. Q8 results equal the reference bit for bit; Q4 differ
 * only by the order of the float sum over groups. Rows may be split across threads by r0/r1. */
void plume_qact_matmul_vnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xsum, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1);
#endif

#endif /* PLUME_QACT_H */
