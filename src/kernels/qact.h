/* qact.h -- int8 activations: each token row of X is rounded to int8 once per matmul input,
 * with one float scale per block of 32 columns (an outlier channel costs its block, not the
 * row), then multiplied with Q8 or Q4 weights by integer dot products (exact int32 sums per
 * block), scaled to float per block. qact.c is the portable reference; avx512_vnni.c
 * (vpdpbusd), avx2_qact.c (vpmaddubsw, or AVX-VNNI vpdpbusd ymm) and neon_qact.c (sdot, or a
 * widening multiply) do the same. The float kernels of kernels.h stay the reference for what
 * the model means; this path trades one int8 rounding of X for ~4x the arithmetic and 1/4 of
 * the activation bytes.
 *
 * Buffers (all the caller's; 64-byte alignment is best, none is required):
 *   xq   int8  [T, plume_qact_stride(cols)]  token rows in the chunk layout below, zero padded
 *   xs   float [T, plume_qact_groups(cols)]  xs[t*groups + b] = amax of block b / 127, so
 *                                            X[t, c] ~ xq * xs[block of c]; 0 past cols
 *   xcor int32 [T, plume_qact_lanes(cols)]   PLUME_QACT_MAGIC - 128 x the sum of the 8 bytes
 *                                            of xq that one int32 lane of a vpdpbusd over a
 *                                            chunk's two halves adds (below): the correction
 *                                            for weights offset into u8 by +128 (Q8 flipped,
 *                                            Q4 nibbles times 16 = q*16 + 128), plus the bits
 *                                            of 1.5 * 2^23, so that a lane ending on dot +
 *                                            MAGIC read as a float is 12582912 + dot exactly
 *                                            (|dot| < 2^22): a float subtraction, which any
 *                                            FMA port runs, replaces vcvtdq2ps (port 0 only
 *                                            on Intel, beside vpdpbusd)
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
 * 128-bit lane. That is the order in which the Q4 nibbles of a weight load unpack
 * (vpunpcklbw / vpunpckhbw and NEON's zip interleave within 128-bit lanes), and the order two
 * vshufi64x2 make of a Q8 row; plume_qact_pos() maps a column to its byte. Int32 lane j
 * (0..15) of a chunk sums bytes 4j..4j+3 of both halves: lanes 4g..4g+3 belong to group g of
 * the chunk in a zmm, a pair of ymm or four NEON registers alike, so xcor[16 * chunk + j] is
 * the same correction for all of them.
 *
 * Float order (what makes a row's result independent of T and of the batch): per output
 * (row r, token t), each int32 lane's exact sum over a chunk is converted to float, times its
 * block factor (Q8: xs; Q4: d * xs / 16), and added into that lane's float accumulator, chunk
 * after chunk; the lanes are then reduced by a fixed tree. Every kernel does exactly this for
 * every (r, t) whatever the tile it lies in, so T = 1 and T = 9 give the same bits. Kernels
 * of different ISAs reduce with different trees; the reference sums per block in order.
 */
#ifndef PLUME_QACT_H
#define PLUME_QACT_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define PLUME_QACT_CHUNK 128      /* columns per chunk of the xq layout */
#define PLUME_QACT_GROUP 32       /* columns per scale block (= the Q4 scale group) */
#define PLUME_QACT_LANES 16       /* int32 lanes (xcor entries) per chunk */
#define PLUME_QACT_MAGIC 0x4B400000 /* the bits of 12582912.0f = 1.5 * 2^23 (xcor) */
#define PLUME_QACT_STREAM_TOKENS 16 /* steps of up to this many tokens stream each weight once from
                                     * memory (the VNNI kernels; forward.c's guided chunks) */
#define PLUME_QACT_COLS_MAX 65536 /* bounds the per-lane float sums; int32 lane sums are far
                                     below 2^31 at any cols (8 products < 2^18 a chunk) */
#define PLUME_QACT_TINY 1e-30f    /* a block with amax below this quantizes to zeros, xs = 0
                                     (127 / amax would overflow near 4e-37) */

/* Bytes of one token row of xq: cols rounded up to a whole chunk. */
static inline int64_t plume_qact_stride(int32_t cols) {
    return ((int64_t)cols + PLUME_QACT_CHUNK - 1) / PLUME_QACT_CHUNK * PLUME_QACT_CHUNK;
}

/* Entries of one token row of xs: blocks of 32 in the padded row. */
static inline int32_t plume_qact_groups(int32_t cols) {
    return (int32_t)(plume_qact_stride(cols) / PLUME_QACT_GROUP);
}

/* Entries of one token row of xcor: 16 per chunk. */
static inline int32_t plume_qact_lanes(int32_t cols) {
    return (int32_t)(plume_qact_stride(cols) / PLUME_QACT_CHUNK * PLUME_QACT_LANES);
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

/* The n <= 32 values xr[c, c + n) of one block (c a multiple of 32) rounded into token row q
 * (its bytes zeroed by the caller) as the reference does; returns the block's scale, 0 for a
 * block below PLUME_QACT_TINY (left zero). The SIMD quantizers use it for a partial block. */
static inline float plume_qact_block_scalar(const float *xr, int32_t c, int32_t n, int8_t *q) {
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(xr[c + i]));
    if (!(amax >= PLUME_QACT_TINY)) return 0.0f;
    const float inv = 127.0f / amax;
    for (int32_t i = 0; i < n; i++) q[plume_qact_pos(c + i)] = plume_qact_round(xr[c + i] * inv);
    return amax / 127.0f;
}

/* Whether the int8 path takes this weight: Q8 or Q4 (cols a multiple of 32; either layout,
 * a tiled one whole groups of whole blocks), 1 <= cols <=
 * PLUME_QACT_COLS_MAX. The matmuls below leave Y untouched for any other weight. */
int plume_qact_supported(const plume_weight *w);

/* The int8-activation kernels a model uses. */
typedef void (*plume_qact_quantize_fn)(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                                       float *xs, int32_t *xcor);
typedef void (*plume_qact_matmul_fn)(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                                     const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                                     int32_t r1);
/* The fast pair for a kernel table: AVX-512 VNNI with the avx512 table, AVX2 (AVX-VNNI where
 * the CPU has it) with the avx2 table, NEON with the neon table; 0 when there is none (the
 * scalar table: the reference is slower than the float path). dispatch.c. */
int plume_qact_kernels(const plume_kernels *k, plume_qact_quantize_fn *quantize, plume_qact_matmul_fn *matmul);

/* Whether a matmul of this file reads PLUME_L_TILES weights itself (the reference and AVX-512
 * VNNI); the others read rows, and forward.c unpacks a tiled weight's groups for them. */
int plume_qact_reads_tiles(plume_qact_matmul_fn matmul);
/* Whether both paths of the kernels this CPU picks (plume_kernels_get(NULL): the float table
 * and its int8 pair) read PLUME_L_TILES weights themselves: the converter's "auto" layout. */
int plume_tiles_native(void);

/* Quantize X[t*ldx + c] (t < T, c < cols) per token and block of 32: amax = max |x| of the
 * block, xs = amax / 127, xq = round-half-even(x * (127 / amax)) clamped to [-127, 127],
 * written in the chunk layout with zero padding; xcor as above. A block with amax <
 * PLUME_QACT_TINY is all zeros, xs = 0. X must be finite (otherwise xq is unspecified but
 * within [-127, 127]). */
void plume_qact_quantize(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                         float *xs, int32_t *xcor);

/* Y[t*ldy + r] = sum_c W[r, c] * xq[t, c] * xs[t, block of c]   for t < T, r0 <= r < r1;
 * other Y untouched. With dot_b the exact int32 sum of a block:
 *   Q8: y = (sum_b xs_b * (float)dot_b) * (s_r / 127), the float sum in block order;
 *   Q4: y =  sum_b (d_rb * xs_b) * (float)dot_b.
 * w in either layout. xq, xs, xcor come from plume_qact_quantize with the same cols as w. */
void plume_qact_matmul_ref(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                           const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                           int32_t r1);

#if defined(__x86_64__)
/* Whether the CPU runs avx512_vnni.c: AVX-512 F/BW/VL/DQ + VNNI, AVX2, FMA, F16C. */
int plume_qact_vnni_available(void);

/* plume_qact_quantize with AVX-512: the same bytes, faster. */
void plume_qact_quantize_vnni(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xcor);

/* plume_qact_matmul_ref with vpdpbusd, in the float order of the file comment (per-lane
 * float sums, then a fixed reduction): differs from the reference by float rounding only.
 * A PLUME_L_TILES weight takes the reference's order (one lane per row): the same bits as the
 * reference. Rows may be split across threads by r0/r1. */
void plume_qact_matmul_vnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1);

/* Whether amx.c can run: AMX-TILE and AMX-INT8 in CPUID, the kernel's permission to use the
 * tile data granted (asked once, process-wide), and PLUME_AMX is not "0". */
int plume_qact_amx_available(void);
/* plume_qact_matmul_ref for a PLUME_L_TILES Q8 or Q4 weight with AMX-INT8 (tdpbssd): the same
 * bits as the reference. plume_qact_matmul_vnni calls it for T >= PLUME_AMX_MIN_T. Returns 0
 * when done, -1 (Y untouched) when AMX, the weight or a scratch buffer is not there. */
#define PLUME_AMX_MIN_T 16
int plume_qact_matmul_amx(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor,
                          int32_t T, const plume_weight *w, int32_t r0, int32_t r1);

/* Whether the CPU runs avx2_qact.c: AVX2, FMA, F16C. */
int plume_qact_avx2_available(void);
/* Whether the CPU has AVX-VNNI (vpdpbusd on ymm, VEX encoded), which avx2_qact.c then uses. */
int plume_qact_avxvnni_available(void);

/* plume_qact_quantize with AVX2: the same bytes. */
void plume_qact_quantize_avx2(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xcor);
/* The matmul with AVX2 vpmaddubsw + vpmaddwd: the same int32 lanes as vpdpbusd. */
void plume_qact_matmul_avx2(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1);
/* The same with AVX-VNNI vpdpbusd on ymm: bit-identical to plume_qact_matmul_avx2. */
void plume_qact_matmul_avxvnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                               const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                               int32_t r1);
#endif

#if defined(__aarch64__)
/* plume_qact_quantize with NEON: the same bytes. */
void plume_qact_quantize_neon(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xcor);
/* The matmul with NEON widening multiplies (vmull_s8): any AArch64 CPU. */
void plume_qact_matmul_neon(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1);
/* Whether the CPU has the dotprod extension (sdot). */
int plume_qact_neon_dot_available(void);
/* The matmul with sdot (vdotq_s32): the same int32 lanes as plume_qact_matmul_neon, so the
 * same bits. Only where plume_qact_neon_dot_available(). */
void plume_qact_matmul_neon_dot(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                                const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                                int32_t r1);
#endif

#endif /* PLUME_QACT_H */
