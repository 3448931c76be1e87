/* tile.h -- what the SIMD kernel files share: the arguments of one matmul call, the scalar
 * column loads their vector loops hand the tail to, and the driver that covers rows x tokens
 * with a file's tiles. Included by avx2.c, avx512.c and neon.c, each with its own tiles and
 * tile sizes (a tile_plan). */
#ifndef PLUME_TILE_H
#define PLUME_TILE_H

#include <stddef.h>

#include "../common.h"
#include "kernels.h"

/* Unroll the next loop fully: its count is a constant once a tile body is inlined, and only
 * then do the accumulator arrays fit in registers. GCC and clang spell it differently. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

/* What every tile of one matmul call shares. */
typedef struct {
    float *y;              /* Y[t*ldy + r] */
    int64_t ldy;
    const float *x;        /* X[t*ldx + c] */
    int64_t ldx;
    const plume_weight *w;
    size_t row_bytes;      /* bytes of one row of w->data */
    int stream;            /* the weights come from memory (decode, or the first token block
                              over a panel): tiles prefetch the next tile's rows */
} mm_args;

/* A tile: Y for rows r..r+R-1 x tokens t0..t0+TT-1. */
typedef void (*tile_fn)(const mm_args *a, int32_t r, int32_t t0, int R, int TT);

/* The tile sizes of a file. */
typedef struct {
    int rows_decode;    /* rows per tile when T = 1 */
    int rows_prefill;   /* rows per tile when T > 1 */
    size_t panel_bytes; /* weights of a row panel, re-read from L2 by each token block */
} tile_plan;

/* Column c of a row, as a float (Q8 unscaled): the scalar tail of the vector loads. */
static inline __attribute__((always_inline)) float load1(plume_wtype type, const uint8_t *row, int32_t c) {
    switch (type) {
    case PLUME_W_F32: return ((const float *)row)[c];
    case PLUME_W_F16: return plume_f16_to_f32(((const uint16_t *)row)[c]);
    case PLUME_W_BF16: return plume_bf16_to_f32(((const uint16_t *)row)[c]);
    case PLUME_W_Q8: return (float)((const int8_t *)row)[c];
    default: return 0.0f;
    }
}

/* The factor a row's sum is multiplied by: s / 127 for Q8 (as scalar.c), else 1. */
static inline float row_factor(plume_wtype type, const plume_weight *w, int32_t r) {
    return type == PLUME_W_Q8 ? plume_f16_to_f32(w->scale[r]) / 127.0f : 1.0f;
}

/* Bytes of one row of cols weights of a type. */
static inline size_t row_bytes(plume_wtype type, int32_t cols) {
    switch (type) {
    case PLUME_W_F32: return (size_t)cols * 4;
    case PLUME_W_F16:
    case PLUME_W_BF16: return (size_t)cols * 2;
    case PLUME_W_Q8: return (size_t)cols;
    case PLUME_W_Q4: return (size_t)cols / 2;
    default: return 0;
    }
}

/* Cover rows [r0, r1) x tokens [0, T) with tiles. T = 1: runs of rows_decode rows. T > 1:
 * panels of rows (about panel_bytes of weights) crossed with balanced blocks of at most
 * tokens_max tokens, so the panel is read from memory once (by the first block, which
 * prefetches: a batch of a few decode tokens is as bandwidth-bound as one) and from L2 per
 * later block. */
static inline void mm_drive(tile_fn tile, const tile_plan *pl, int tokens_max, mm_args *a, int32_t T,
                            int32_t r0, int32_t r1) {
    const int RD = pl->rows_decode, RP = pl->rows_prefill;
    if (T == 1) {
        int32_t r = r0;
        for (; r + RD <= r1; r += RD) tile(a, r, 0, RD, 1);
        for (; r + RP <= r1; r += RP) tile(a, r, 0, RP, 1);
        for (; r < r1; r++) tile(a, r, 0, 1, 1);
        return;
    }
    size_t fit = pl->panel_bytes / (a->row_bytes ? a->row_bytes : 1);
    int32_t panel = fit < (size_t)RP ? RP : fit > (size_t)1 << 20 ? 1 << 20 : (int32_t)fit;
    panel -= panel % RP;
    int32_t blocks = (T + tokens_max - 1) / tokens_max;
    for (int32_t p0 = r0; p0 < r1; p0 += panel) {
        int32_t p1 = r1 - p0 < panel ? r1 : p0 + panel;
        for (int32_t b = 0, t0 = 0; b < blocks; b++) {
            int tt = (T - t0 + (blocks - b) - 1) / (blocks - b);
            a->stream = b == 0; /* later blocks find the panel in L2 */
            int32_t r = p0;
            for (; r + RP <= p1; r += RP) tile(a, r, t0, RP, tt);
            for (; r < p1; r++) tile(a, r, t0, 1, tt);
            t0 += tt;
        }
    }
}

/* The plume_matmul_fn of one weight type, given a file's tiles and plan. */
static inline void mm_run(plume_wtype type, tile_fn tile, const tile_plan *pl, int tokens_max, float *y,
                          int64_t ldy, const float *x, int64_t ldx, int32_t T, const plume_weight *w, int32_t r0,
                          int32_t r1) {
    if (T <= 0 || r1 <= r0) return;
    mm_args a = {.y = y, .ldy = ldy, .x = x, .ldx = ldx, .w = w, .row_bytes = row_bytes(type, w->cols),
                 .stream = 1};
    mm_drive(tile, pl, tokens_max, &a, T, r0, r1);
}

#endif
