/* avx512.c -- the kernel table for AVX-512 F/BW/VL (with AVX2, FMA, F16C): 16 floats a
 * vector. Same math as scalar.c with the sums reassociated; activations stay float32.
 *
 * Two workloads shaped it. Decode (T = 1) reads every weight once and is bound by memory
 * bandwidth: a tile of 8 rows shares each load of x and keeps 8 FMA chains in flight.
 * Prefill (T > 1) is bound by arithmetic: a tile of 4 rows x up to 6 tokens holds 24
 * accumulators, so a weight vector is converted once per 6 tokens and an x vector loaded once
 * per 4 rows; rows are walked in panels of about PANEL_BYTES that stay in L2 while every block
 * of tokens passes over them, so each weight comes from memory once per call.
 *
 * Q4 looks its nibbles up in a 16-entry table of (q - 8) * d with vpermps, which reads only the
 * low 4 bits of each index: the byte itself gives the even column, the byte >> 4 the odd one.
 * x is split into even and odd columns in registers, once per token for all rows of a tile.
 *
 * Not used: VNNI and the BF16 dot product, which would need activations rounded to int8 or
 * bf16. So the file runs on any CPU with AVX-512 F/BW/VL, which is what dispatch.c checks.
 */
#include <immintrin.h>
#include <math.h>

#include "../common.h"
#include "kernels.h"
#include "tile.h"

enum {
    ROWS_DECODE = 8,        /* rows per tile when T = 1 */
    ROWS_PREFILL = 4,       /* rows per tile when T > 1 */
    TOKENS_MAX = 6,         /* tokens per tile: 4 x 6 accumulators + 6 x + 1 weight < 32 zmm */
    TOKENS_MAX_Q4 = 4,      /* Q4 holds 2 weight vectors per row: 4 x 4 + 8 + 5 < 32 */
    PANEL_BYTES = 256 << 10 /* weights of a row panel, re-read from L2 by each token block */
};

static const tile_plan plan = {ROWS_DECODE, ROWS_PREFILL, PANEL_BYTES};

/* ---- weights as floats --------------------------------------------------------------- */

/* Columns c..c+15 of a row of F32, F16, BF16 or Q8 weights, as floats (Q8 unscaled). */
static inline __attribute__((always_inline)) __m512 load16(plume_wtype type, const uint8_t *row,
                                                           int32_t c) {
    switch (type) {
    case PLUME_W_F32:
        return _mm512_loadu_ps((const float *)row + c);
    case PLUME_W_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c)));
    case PLUME_W_BF16: {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case PLUME_W_Q8:
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)row + c))));
    default:
        return _mm512_setzero_ps();
    }
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
    __m512 acc[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++) wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
    UNROLL
    for (int t = 0; t < TT; t++) xt[t] = a->x + (int64_t)(t0 + t) * a->ldx;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();

    /* Decode of 1- and 2-byte weights: fetch the next tile's rows (contiguous after ours) as
     * fast as we read ours. F32 streams well enough on the hardware prefetcher alone. */
    const int esize = type == PLUME_W_F32 ? 4 : type == PLUME_W_Q8 ? 1 : 2;
    const int prefetch = a->stream && type != PLUME_W_F32;
    const int lines = R * 16 * esize / 64 > 0 ? R * 16 * esize / 64 : 1;
    const char *next = (const char *)wr[0] + R * a->row_bytes;
    int32_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        if (prefetch) {
            UNROLL
            for (int k = 0; k < lines; k++)
                _mm_prefetch(next + (size_t)c * R * esize + 64 * k, PLUME_PREFETCH_STREAM);
        }
        /* x first, then one weight vector at a time: R*TT + TT + 1 registers */
        __m512 xv[TOKENS_MAX];
        UNROLL
        for (int t = 0; t < TT; t++) xv[t] = _mm512_loadu_ps(xt[t] + c);
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512 wv = load16(type, wr[i], c);
            UNROLL
            for (int t = 0; t < TT; t++) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
        }
    }
    float sum[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) sum[i][t] = _mm512_reduce_add_ps(acc[i][t]);
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

/* The Q4 twin of tile_body: 32 columns (one scale group) a step, see the file comment. */
static inline __attribute__((always_inline)) void tile_body_q4(const mm_args *a, int32_t r,
                                                               int32_t t0, const int R,
                                                               const int TT) {
    const int32_t groups = a->w->cols / 32;
    const __m512 iota8 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const uint8_t *wr[ROWS_DECODE];
    const uint16_t *sr[ROWS_DECODE];
    const float *xt[TOKENS_MAX];
    __m512 acc[ROWS_DECODE][TOKENS_MAX];
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
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();

    const char *next = (const char *)wr[0] + R * a->row_bytes;
    for (int32_t g0 = 0; g0 < groups; g0 += 16) {
        /* The scales of the next 16 groups as floats, so the table multiply can broadcast
         * its operand straight from memory. */
        int32_t n = groups - g0 < 16 ? groups - g0 : 16;
        float d[ROWS_DECODE][16];
        for (int i = 0; i < R; i++) {
            if (n == 16)
                _mm512_storeu_ps(d[i], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sr[i] + g0))));
            else
                for (int32_t j = 0; j < n; j++) d[i][j] = plume_f16_to_f32(sr[i][g0 + j]);
        }
        for (int32_t g = g0; g < g0 + n; g++) {
            if (a->stream) { /* as in tile_body */
                UNROLL
                for (int k = 0; k < (R * 16 + 63) / 64; k++)
                    _mm_prefetch(next + (size_t)g * R * 16 + 64 * k, PLUME_PREFETCH_STREAM);
            }
            __m512 we[ROWS_DECODE], wo[ROWS_DECODE];
            UNROLL
            for (int i = 0; i < R; i++) {
                __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(wr[i] + 16 * g)));
                __m512 table = _mm512_mul_ps(iota8, _mm512_set1_ps(d[i][g - g0]));
                we[i] = _mm512_permutexvar_ps(b, table);
                wo[i] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                __m512 lo = _mm512_loadu_ps(xt[t] + 32 * g), hi = _mm512_loadu_ps(xt[t] + 32 * g + 16);
                __m512 xe = _mm512_permutex2var_ps(lo, even, hi);
                __m512 xo = _mm512_permutex2var_ps(lo, odd, hi);
                UNROLL
                for (int i = 0; i < R; i++) {
                    acc[i][t] = _mm512_fmadd_ps(we[i], xe, acc[i][t]);
                    acc[i][t] = _mm512_fmadd_ps(wo[i], xo, acc[i][t]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++)
            a->y[(int64_t)(t0 + t) * a->ldy + r + i] = _mm512_reduce_add_ps(acc[i][t]);
}

/* One tile of the given shape, with R and TT turned into constants (the shapes mm_drive uses). */
static inline __attribute__((always_inline)) void tile_shape(plume_wtype type, const mm_args *a,
                                                             int32_t r, int32_t t0, int R, int TT) {
    if (type == PLUME_W_Q4) {
        switch (R * 8 + TT) {
        case ROWS_DECODE * 8 + 1: tile_body_q4(a, r, t0, ROWS_DECODE, 1); break;
        case ROWS_PREFILL * 8 + 1: tile_body_q4(a, r, t0, ROWS_PREFILL, 1); break;
        case ROWS_PREFILL * 8 + 2: tile_body_q4(a, r, t0, ROWS_PREFILL, 2); break;
        case ROWS_PREFILL * 8 + 3: tile_body_q4(a, r, t0, ROWS_PREFILL, 3); break;
        case ROWS_PREFILL * 8 + 4: tile_body_q4(a, r, t0, ROWS_PREFILL, 4); break;
        case 1 * 8 + 1: tile_body_q4(a, r, t0, 1, 1); break;
        case 1 * 8 + 2: tile_body_q4(a, r, t0, 1, 2); break;
        case 1 * 8 + 3: tile_body_q4(a, r, t0, 1, 3); break;
        case 1 * 8 + 4: tile_body_q4(a, r, t0, 1, 4); break;
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
    case ROWS_PREFILL * 8 + 5: tile_body(type, a, r, t0, ROWS_PREFILL, 5); break;
    case ROWS_PREFILL * 8 + 6: tile_body(type, a, r, t0, ROWS_PREFILL, 6); break;
    case 1 * 8 + 1: tile_body(type, a, r, t0, 1, 1); break;
    case 1 * 8 + 2: tile_body(type, a, r, t0, 1, 2); break;
    case 1 * 8 + 3: tile_body(type, a, r, t0, 1, 3); break;
    case 1 * 8 + 4: tile_body(type, a, r, t0, 1, 4); break;
    case 1 * 8 + 5: tile_body(type, a, r, t0, 1, 5); break;
    case 1 * 8 + 6: tile_body(type, a, r, t0, 1, 6); break;
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

/* ---- the tiles layout ------------------------------------------------------------------ */

/* A Q8/Q4 weight in PLUME_L_TILES (kernels.h) holds 16 rows' columns c..c+3 in a 64-byte line,
 * one int32 lane per row: the line becomes 4 vectors of 16 rows (Q8: byte k of each lane
 * sign-extended by two shifts; Q4: each nibble q + 8 turned into q, then times d), each met
 * by x[c + k] broadcast. Each (row, token) keeps one sum, one FMA per column in the order the
 * lines hold them (Q8: column order; Q4: per line its 4 low-nibble columns, then its 4 high
 * ones): the same operations for every tile shape, so a row's result does not depend on T.
 * A widened weight vector meets every token of its tile, and a broadcast x every group:
 * prefill tiles are 2 groups x up to 12 tokens (Q8: 24 sums; Q4 11 tokens, its scales take 2
 * more registers), decode tiles 4 groups x 1 token (4 chains in flight; 8-group Q4 tiles ran
 * slower, out of registers).
 * Why one sum: the 4 partial sums per row and token this kernel had (column c to c % 4) left
 * room for 6 tokens only, and widening 4 vectors (11 operations) per 24 FMAs held a tile of it
 * at 57-81% of the FMA peak (AMD EPYC Zen 5, a scratch loop in L1: 165-188 of 231 GFLOP/s a
 * core); 2 groups x 12 tokens with one sum reached 231. */

enum {
    TILE_TOKENS = 12,       /* Q8: 2 x 12 sums + 2 lines + 2 widened + x < 32 zmm */
    TILE_TOKENS_Q4 = 11,    /* Q4: 2 x 11 sums + 2 lines, 2 scales, 2 widened, the 8s, x */
    TILE_GROUPS_DECODE = 4  /* groups per tile at T = 1 */
};

/* UNROLL for loops of up to 16 (the tiles' token loops: 12). */
#if defined(__clang__)
#define UNROLL16 _Pragma("clang loop unroll(full)")
#else
#define UNROLL16 _Pragma("GCC unroll 16")
#endif

/* Column k (0..3) of each of a Q8 line's 16 rows (byte k of each int32 lane), as floats. */
static inline __attribute__((always_inline)) __m512 widen_q8(__m512i v, const int k) {
    if (k < 3) v = _mm512_slli_epi32(v, 24 - 8 * k);
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
}

/* v[i] = the line at byte off of group g + i (wg: group g's start), i < G; prefetched 1 KiB
 * ahead when the weights stream from memory. */
static inline __attribute__((always_inline)) void tiles_lines(const mm_args *a, const uint8_t *wg, size_t off,
                                                              const int G, __m512i *v) {
    const size_t gbytes = (size_t)PLUME_TILE_ROWS * a->row_bytes;
    UNROLL
    for (int i = 0; i < G; i++) {
        const uint8_t *line = wg + (size_t)i * gbytes + off;
        if (a->stream) _mm_prefetch((const char *)line + 1024, PLUME_PREFETCH_STREAM);
        v[i] = _mm512_loadu_si512(line);
    }
}

/* d[i] = the Q4 scales of block b of group g + i (its 16 rows), i < G. */
static inline __attribute__((always_inline)) void tiles_q4_scales(const plume_weight *w, int32_t g, int32_t b,
                                                                  const int G, __m512 *d) {
    const int32_t nb = w->cols / 32;
    UNROLL
    for (int i = 0; i < G; i++)
        d[i] = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(w->scale + ((size_t)(g + i) * nb + b) * PLUME_TILE_ROWS)));
}

/* Y for groups g..g+G-1 x tokens t0..t0+TT-1, storing rows [lo, hi) only. */
static inline __attribute__((always_inline)) void tiles_body(const mm_args *a, int32_t g, int32_t t0, const int G,
                                                             const int TT, const int q8, int32_t lo, int32_t hi) {
    const plume_weight *w = a->w;
    const size_t gbytes = (size_t)PLUME_TILE_ROWS * a->row_bytes;
    const uint8_t *wg = (const uint8_t *)w->data + (size_t)g * gbytes;
    const int32_t nb = w->cols / 32;
    const float *x = a->x + (int64_t)t0 * a->ldx;
    __m512 acc[TILE_GROUPS_DECODE][TILE_TOKENS]; /* [G][TT] used */
    UNROLL
    for (int i = 0; i < G; i++)
        UNROLL16
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    if (q8) {
        for (int32_t q = 0; q < w->cols / 4; q++) {
            __m512i v[TILE_GROUPS_DECODE];
            tiles_lines(a, wg, (size_t)q * 64, G, v);
            UNROLL
            for (int k = 0; k < 4; k++) {
                __m512 wk[TILE_GROUPS_DECODE];
                UNROLL
                for (int i = 0; i < G; i++) wk[i] = widen_q8(v[i], k);
                UNROLL16
                for (int t = 0; t < TT; t++) {
                    const __m512 xb = _mm512_set1_ps(x[t * a->ldx + 4 * q + k]);
                    UNROLL
                    for (int i = 0; i < G; i++) acc[i][t] = _mm512_fmadd_ps(wk[i], xb, acc[i][t]);
                }
            }
        }
    } else if (TT == 1) {
        /* Decode: each nibble q + 8 masked out, then (q + 8) d - 8 d = q d, rounded once: the
         * value the xor and shifts below give, in fewer shifts (fewer pipes do those), with
         * the groups' offsets -8 d held in registers */
        const __m512i low4 = _mm512_set1_epi32(0x0f);
        for (int32_t b = 0; b < nb; b++) {
            __m512 d[TILE_GROUPS_DECODE], d8[TILE_GROUPS_DECODE];
            tiles_q4_scales(w, g, b, G, d);
            UNROLL
            for (int i = 0; i < G; i++) d8[i] = _mm512_mul_ps(d[i], _mm512_set1_ps(-8.0f)); /* exact */
            UNROLL
            for (int p = 0; p < 4; p++) {
                __m512i v[TILE_GROUPS_DECODE];
                tiles_lines(a, wg, (size_t)b * 256 + 64 * (size_t)p, G, v);
                UNROLL
                for (int h = 0; h < 2; h++)
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        const __m512 xb = _mm512_set1_ps(x[b * 32 + 16 * h + 4 * p + k]);
                        UNROLL
                        for (int i = 0; i < G; i++) {
                            const __m512 wk = _mm512_fmadd_ps(
                                _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v[i], 8 * k + 4 * h), low4)),
                                d[i], d8[i]);
                            acc[i][0] = _mm512_fmadd_ps(wk, xb, acc[i][0]);
                        }
                    }
            }
        }
    } else {
        /* nibble n of a line, xored with 8, is n - 8 as a signed 4-bit number: shifted to the
         * top of its lane and back (arithmetic), then times d: (n - 8) d rounded once */
        const __m512i eights = _mm512_set1_epi8((char)0x88);
        for (int32_t b = 0; b < nb; b++) {
            __m512 d[TILE_GROUPS_DECODE];
            tiles_q4_scales(w, g, b, G, d);
            UNROLL
            for (int p = 0; p < 4; p++) {
                __m512i v[TILE_GROUPS_DECODE];
                tiles_lines(a, wg, (size_t)b * 256 + 64 * (size_t)p, G, v);
                UNROLL
                for (int i = 0; i < G; i++) v[i] = _mm512_xor_si512(v[i], eights);
                UNROLL
                for (int h = 0; h < 2; h++) /* low nibbles: columns 4p + k; high: 16 + 4p + k */
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        const int bit = 8 * k + 4 * h; /* the nibble's lowest bit in its lane */
                        const int32_t c = b * 32 + 16 * h + 4 * p + k;
                        __m512 wk[TILE_GROUPS_DECODE];
                        UNROLL
                        for (int i = 0; i < G; i++) {
                            const __m512i top = bit < 28 ? _mm512_slli_epi32(v[i], 28 - bit) : v[i];
                            wk[i] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srai_epi32(top, 28)), d[i]);
                        }
                        UNROLL16
                        for (int t = 0; t < TT; t++) {
                            const __m512 xb = _mm512_set1_ps(x[t * a->ldx + c]);
                            UNROLL
                            for (int i = 0; i < G; i++) acc[i][t] = _mm512_fmadd_ps(wk[i], xb, acc[i][t]);
                        }
                    }
            }
        }
    }
    UNROLL
    for (int i = 0; i < G; i++) {
        const int32_t r = (g + i) * PLUME_TILE_ROWS;
        __mmask16 keep = 0xffff;
        if (r < lo) keep &= (__mmask16)(0xffffu << (lo - r));
        if (r + PLUME_TILE_ROWS > hi) keep &= (__mmask16)(0xffffu >> (r + PLUME_TILE_ROWS - hi));
        __m512 f = _mm512_set1_ps(1.0f);
        if (q8) f = _mm512_div_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w->scale + r))), _mm512_set1_ps(127.0f));
        UNROLL16
        for (int t = 0; t < TT; t++)
            _mm512_mask_storeu_ps(a->y + (int64_t)(t0 + t) * a->ldy + r, keep, q8 ? _mm512_mul_ps(acc[i][t], f) : acc[i][t]);
    }
}

/* A prefill tile of G (1 or 2) groups x tt tokens (1..TILE_TOKENS; Q4 up to TILE_TOKENS_Q4),
 * with G and tt made constants. */
#define TILES_TT(G, Q8)                                                                           \
    switch (tt) {                                                                                 \
    case 1: tiles_body(a, g, t0, G, 1, Q8, lo, hi); break;                                        \
    case 2: tiles_body(a, g, t0, G, 2, Q8, lo, hi); break;                                        \
    case 3: tiles_body(a, g, t0, G, 3, Q8, lo, hi); break;                                        \
    case 4: tiles_body(a, g, t0, G, 4, Q8, lo, hi); break;                                        \
    case 5: tiles_body(a, g, t0, G, 5, Q8, lo, hi); break;                                        \
    case 6: tiles_body(a, g, t0, G, 6, Q8, lo, hi); break;                                        \
    case 7: tiles_body(a, g, t0, G, 7, Q8, lo, hi); break;                                        \
    case 8: tiles_body(a, g, t0, G, 8, Q8, lo, hi); break;                                        \
    case 9: tiles_body(a, g, t0, G, 9, Q8, lo, hi); break;                                        \
    case 10: tiles_body(a, g, t0, G, 10, Q8, lo, hi); break;                                      \
    case 11: tiles_body(a, g, t0, G, 11, Q8, lo, hi); break;                                      \
    case 12: if (Q8) tiles_body(a, g, t0, G, 12, 1, lo, hi); break;                               \
    default: break;                                                                               \
    }
static void tiles_pair_q8(const mm_args *a, int32_t g, int32_t t0, int tt, int32_t lo, int32_t hi) { TILES_TT(2, 1) }
static void tiles_one_q8(const mm_args *a, int32_t g, int32_t t0, int tt, int32_t lo, int32_t hi) { TILES_TT(1, 1) }
static void tiles_pair_q4(const mm_args *a, int32_t g, int32_t t0, int tt, int32_t lo, int32_t hi) { TILES_TT(2, 0) }
static void tiles_one_q4(const mm_args *a, int32_t g, int32_t t0, int tt, int32_t lo, int32_t hi) { TILES_TT(1, 0) }

/* Y[T, rows r0..r1-1] over a tiled Q8/Q4 weight, in tiles of whole groups that store only
 * the rows in range (a group split by r0 or r1 is computed once per call that touches it).
 * T = 1: runs of TILE_GROUPS_DECODE groups, then a tile of 2 and one of 1 if left. T > 1:
 * panels of groups (about PANEL_BYTES, re-read from L2 by each token block) crossed with
 * balanced blocks of at most TILE_TOKENS tokens, pairs of groups then a single one; the first
 * block streams the panel. */
static void tiles_run(const int q8, float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                      const plume_weight *w, int32_t r0, int32_t r1) {
    if (T <= 0 || r1 <= r0) return;
    mm_args a = {.y = y, .ldy = ldy, .x = x, .ldx = ldx, .w = w,
                 .row_bytes = row_bytes(q8 ? PLUME_W_Q8 : PLUME_W_Q4, w->cols), .stream = 1};
    const int32_t g0 = r0 / PLUME_TILE_ROWS, g1 = (r1 + PLUME_TILE_ROWS - 1) / PLUME_TILE_ROWS;
    if (T == 1) {
        int32_t g = g0;
        if (q8) {
            for (; g + TILE_GROUPS_DECODE <= g1; g += TILE_GROUPS_DECODE) tiles_body(&a, g, 0, TILE_GROUPS_DECODE, 1, 1, r0, r1);
            if (g + 2 <= g1) tiles_body(&a, g, 0, 2, 1, 1, r0, r1), g += 2;
            if (g < g1) tiles_body(&a, g, 0, 1, 1, 1, r0, r1);
        } else {
            for (; g + TILE_GROUPS_DECODE <= g1; g += TILE_GROUPS_DECODE) tiles_body(&a, g, 0, TILE_GROUPS_DECODE, 1, 0, r0, r1);
            if (g + 2 <= g1) tiles_body(&a, g, 0, 2, 1, 0, r0, r1), g += 2;
            if (g < g1) tiles_body(&a, g, 0, 1, 1, 0, r0, r1);
        }
        return;
    }
    const int tokens = q8 ? TILE_TOKENS : TILE_TOKENS_Q4;
    int32_t panel = (int32_t)(PANEL_BYTES / ((size_t)PLUME_TILE_ROWS * a.row_bytes));
    panel = panel < 2 ? 2 : panel - panel % 2;
    const int32_t blocks = (T + tokens - 1) / tokens;
    for (int32_t p0 = g0; p0 < g1; p0 += panel) {
        const int32_t p1 = g1 - p0 < panel ? g1 : p0 + panel;
        for (int32_t b = 0, t0 = 0; b < blocks; b++) {
            const int tt = (T - t0 + (blocks - b) - 1) / (blocks - b);
            a.stream = b == 0; /* later blocks find the panel in L2 */
            int32_t g = p0;
            for (; g + 2 <= p1; g += 2) (q8 ? tiles_pair_q8 : tiles_pair_q4)(&a, g, t0, tt, r0, r1);
            if (g < p1) (q8 ? tiles_one_q8 : tiles_one_q4)(&a, g, t0, tt, r0, r1);
            t0 += tt;
        }
    }
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
    if (w->layout == PLUME_L_TILES) tiles_run(1, y, ldy, x, ldx, T, w, r0, r1);
    else mm_run(PLUME_W_Q8, tile_q8, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}
static void mm_q4(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                  const plume_weight *w, int32_t r0, int32_t r1) {
    if (w->layout == PLUME_L_TILES) tiles_run(0, y, ldy, x, ldx, T, w, r0, r1);
    else mm_run(PLUME_W_Q4, tile_q4, &plan, TOKENS_MAX_Q4, y, ldy, x, ldx, T, w, r0, r1);
}

/* ---- vectors ------------------------------------------------------------------------- */

/* sum a[i] * b[i]: four accumulators of 16, then one, then a scalar tail. */
static float dot_avx512(const float *a, const float *b, int32_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float acc = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y += a * x. */
static void axpy_avx512(float *y, float a, const float *x, int32_t n) {
    __m512 av = _mm512_set1_ps(a);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* ---- elementwise --------------------------------------------------------------------- */

/* exp(y) for y <= 0 (clamped at -87): 2^n * p(r), r = y - n ln2 in [-ln2/2, ln2/2], p a
 * degree-6 Taylor polynomial (relative error below 2e-7). */
static inline __m512 exp_neg512(__m512 y) {
    y = _mm512_max_ps(y, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), y);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* tanh(x) = sign(x) (1 - t) / (1 + t), t = exp(-2|x|): absolute error about 1e-7. */
static inline __m512 tanh512(__m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __m512 t = exp_neg512(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
    __m512 th = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), t), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(th),
                                               _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
}

/* g = gelu_tanh(g) * u, 16 at a time, the tail in scalar. */
static void gelu_mul_avx512(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 in = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
        __m512 gl = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh512(in)));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(gl, _mm512_loadu_ps(u + i)));
    }
    plume_gelu_mul_ref(g + i, u + i, n - i);
}

/* x = cap * tanh(x / cap), 16 at a time, the tail in scalar. */
static void softcap_avx512(float *x, int64_t n, float cap) {
    int64_t i = 0;
    __m512 c = _mm512_set1_ps(cap), ic = _mm512_set1_ps(1.0f / cap);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(c, tanh512(_mm512_mul_ps(_mm512_loadu_ps(x + i), ic))));
    plume_softcap_ref(x + i, n - i, cap);
}

/* y = a * sigmoid(g), 16 at a time in plume_sigmoid_mul_ref's form, the tail in scalar. */
static void sigmoid_mul_avx512(float *y, const float *a, const float *g, int64_t n) {
    int64_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 t = exp_neg512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
        __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, t));
        __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        __m512 s = _mm512_mask_mul_ps(r, neg, t, r);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(a + i), s));
    }
    plume_sigmoid_mul_ref(y + i, a + i, g + i, n - i);
}

/* plume_softmax_ref with exp_neg512 (x - max <= 0), 16 at a time; the sum in 16 lanes. */
static void softmax_avx512(float *x, int64_t n) {
    __m512 mv = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
    float mx = _mm512_reduce_max_ps(mv);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m512 sv = _mm512_setzero_ps(), m16 = _mm512_set1_ps(mx);
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 e = exp_neg512(_mm512_sub_ps(_mm512_loadu_ps(x + i), m16));
        _mm512_storeu_ps(x + i, e);
        sv = _mm512_add_ps(sv, e);
    }
    float sum = _mm512_reduce_add_ps(sv);
    for (; i < n; i++) sum += x[i] = expf(x[i] - mx);
    const __m512 inv = _mm512_set1_ps(1.0f / sum);
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

/* plume_rmsnorm_ref's bits: its 8 partial sums are the 8 double lanes of one accumulator. */
static void rmsnorm_avx512(float *y, const float *x, const float *w, int32_t n, float eps) {
    __m512d s = _mm512_setzero_pd();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        s = _mm512_fmadd_pd(v, v, s); /* the square is exact: fma rounds as mul + add */
    }
    double p[8];
    _mm512_storeu_pd(p, s);
    const float r = plume_rmsnorm_factor(p, x, i, n, eps);
    const __m512 rv = _mm512_set1_ps(r);
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), rv);
        _mm512_storeu_ps(y + i, w ? _mm512_mul_ps(v, _mm512_loadu_ps(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? x[i] * r * w[i] : x[i] * r;
}

/* ---- attention ----------------------------------------------------------------------- */

/* Columns c..c+15 of a K or V row as floats: float rows, or int8 rows unscaled. */
static inline __attribute__((always_inline)) __m512 kv16(const void *row, int i8, int32_t c) {
    if (i8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)row + c))));
    return _mm512_loadu_ps((const float *)row + c);
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

enum {
    KV_AHEAD = 4, /* K rows prefetched this far ahead */
    SCORE_ROWS = 3 /* K rows whose scores share each load of q (3 x 8 heads accumulators) */
};

/* The scores of K rows j..j+JR-1 for NH heads: q_h . k_j (times the row's scale if int8) into
 * p[h * ldp + j]. Each load of q serves the JR rows, each load of a K row the NH heads; a
 * row's sums are the same operations in the same order whatever JR (the T-independence of
 * the bits: a run's last row may go alone). */
static inline __attribute__((always_inline)) void attn_scores_rows(int NH, int JR, int i8, float *p, int64_t ldp,
                                                                   const float *q, int32_t hd, const plume_kv_run *r,
                                                                   int32_t j) {
    const int32_t hv = hd & ~15;
    const void *row[SCORE_ROWS];
    const char *ahead[SCORE_ROWS];
    __m512 acc[SCORE_ROWS][8];
    UNROLL
    for (int u = 0; u < JR; u++) {
        row[u] = kv_rowp(r, 0, i8, j + u);
        ahead[u] = j + u + KV_AHEAD < r->n ? (const char *)kv_rowp(r, 0, i8, j + u + KV_AHEAD) : NULL;
        UNROLL
        for (int h = 0; h < NH; h++) acc[u][h] = _mm512_setzero_ps();
    }
    for (int32_t c = 0; c < hv; c += 16) {
        __m512 k[SCORE_ROWS];
        UNROLL
        for (int u = 0; u < JR; u++) {
            if (ahead[u] && (!i8 || c % 64 == 0)) _mm_prefetch(ahead[u] + (int64_t)c * (i8 ? 1 : 4), _MM_HINT_T0);
            k[u] = kv16(row[u], i8, c);
        }
        UNROLL
        for (int h = 0; h < NH; h++) {
            __m512 qv = _mm512_loadu_ps(q + (int64_t)h * hd + c);
            __asm__("" : "+v"(qv)); /* one load for the JR rows, not one folded into each FMA */
            UNROLL
            for (int u = 0; u < JR; u++) acc[u][h] = _mm512_fmadd_ps(qv, k[u], acc[u][h]);
        }
    }
    UNROLL
    for (int u = 0; u < JR; u++)
        UNROLL
        for (int h = 0; h < NH; h++) {
            float sc = _mm512_reduce_add_ps(acc[u][h]);
            for (int32_t c = hv; c < hd; c++) sc += q[(int64_t)h * hd + c] * kv1(row[u], i8, c);
            p[h * ldp + j + u] = i8 ? sc * r->ks[(j + u) * r->sstride] : sc;
        }
}

/* p[h * ldp + j] = q_h . k_j for NH heads and the run's rows, SCORE_ROWS rows at a time. */
static inline __attribute__((always_inline)) void attn_scores(int NH, int i8, float *p, int64_t ldp, const float *q,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t j = 0;
    for (; j + SCORE_ROWS <= r->n; j += SCORE_ROWS) attn_scores_rows(NH, SCORE_ROWS, i8, p, ldp, q, hd, r, j);
    for (; j < r->n; j++) attn_scores_rows(NH, 1, i8, p, ldp, q, hd, r, j);
}

/* Columns c..c+16 CW - 1 of acc[h] += sum_j p[h * ldp + j] v_j for NH heads over rows
 * j0..j0+nj-1: the NH x CW sums stay in registers across the rows, each weight broadcast once
 * for the CW column blocks; a column's sum takes the rows in order whatever CW. */
static inline __attribute__((always_inline)) void attn_values_cols(int NH, int CW, int i8, float *acc, const float *p,
                                                                   int64_t ldp, int32_t hd, const plume_kv_run *r,
                                                                   int32_t j0, int32_t nj, int32_t c) {
    __m512 a[2][8];
    UNROLL
    for (int w = 0; w < CW; w++)
        UNROLL
        for (int h = 0; h < NH; h++) a[w][h] = _mm512_loadu_ps(acc + (int64_t)h * hd + c + 16 * w);
    for (int32_t j = 0; j < nj; j++) {
        const void *row = kv_rowp(r, 1, i8, j0 + j);
        __m512 v[2];
        UNROLL
        for (int w = 0; w < CW; w++) v[w] = kv16(row, i8, c + 16 * w);
        UNROLL
        for (int h = 0; h < NH; h++) {
            const __m512 pb = _mm512_set1_ps(p[h * ldp + j0 + j]);
            UNROLL
            for (int w = 0; w < CW; w++) a[w][h] = _mm512_fmadd_ps(pb, v[w], a[w][h]);
        }
    }
    UNROLL
    for (int w = 0; w < CW; w++)
        UNROLL
        for (int h = 0; h < NH; h++) _mm512_storeu_ps(acc + (int64_t)h * hd + c + 16 * w, a[w][h]);
}

/* acc[h] += sum_j p[h * ldp + j] v_j for NH heads over the run's rows (int8: p holds the row's
 * scale already). Rows go 8 at a time, 32 columns at a time (then 16), and the next 8 rows
 * are prefetched meanwhile. */
static inline __attribute__((always_inline)) void attn_values(int NH, int i8, float *acc, const float *p, int64_t ldp,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t hv = hd & ~15, esize = i8 ? 1 : 4;
    for (int32_t j0 = 0; j0 < r->n; j0 += 8) {
        int32_t nj = r->n - j0 < 8 ? r->n - j0 : 8, nk = r->n - j0 - 8;
        nk = nk < 0 ? 0 : nk > 8 ? 8 : nk;
        int32_t c = 0;
        for (; c + 32 <= hv; c += 32) {
            for (int32_t j = 0; j < nk; j++) {
                const char *next = (const char *)kv_rowp(r, 1, i8, j0 + 8 + j) + (int64_t)c * esize;
                _mm_prefetch(next, _MM_HINT_T0);
                if (!i8) _mm_prefetch(next + 64, _MM_HINT_T0);
            }
            attn_values_cols(NH, 2, i8, acc, p, ldp, hd, r, j0, nj, c);
        }
        for (; c < hv; c += 16) {
            for (int32_t j = 0; j < nk; j++)
                _mm_prefetch((const char *)kv_rowp(r, 1, i8, j0 + 8 + j) + (int64_t)c * esize, _MM_HINT_T0);
            attn_values_cols(NH, 1, i8, acc, p, ldp, hd, r, j0, nj, c);
        }
        for (int32_t j = 0; j < nj; j++) {
            const void *row = kv_rowp(r, 1, i8, j0 + j);
            UNROLL
            for (int h = 0; h < NH; h++)
                for (int32_t cc = hv; cc < hd; cc++) acc[(int64_t)h * hd + cc] += p[h * ldp + j0 + j] * kv1(row, i8, cc);
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

/* The kernels.h contract: scores, per-head max, exp and sum (16 at a time), then V. */
static void attn_block_avx512(float *acc, float *m, float *l, const float *q, int32_t nh, int32_t hd,
                              const plume_kv_run *run, int32_t nrun, float *p) {
    int32_t n = 0;
    for (int32_t k = 0; k < nrun; k++) n += run[k].n;
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) attn_run(0, NULL, p + j0, n, q, nh, hd, &run[k]);
    for (int32_t h = 0; h < nh; h++) {
        float *ph = p + (int64_t)h * n, mx = -INFINITY;
        int32_t j = 0;
        __m512 vm = _mm512_set1_ps(-INFINITY), vs = _mm512_setzero_ps();
        for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(ph + j));
        mx = _mm512_reduce_max_ps(vm);
        for (; j < n; j++) mx = ph[j] > mx ? ph[j] : mx;
        float sum = 0.0f;
        for (j = 0; j + 16 <= n; j += 16) {
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(ph + j), _mm512_set1_ps(mx));
            __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(PLUME_ATTN_MIN_EXP), _CMP_GE_OQ),
                                           exp_neg512(d));
            _mm512_storeu_ps(ph + j, e);
            vs = _mm512_add_ps(vs, e);
        }
        for (; j < n; j++) sum += ph[j] = plume_attn_exp(ph[j] - mx);
        m[h] = mx;
        l[h] = _mm512_reduce_add_ps(vs) + sum;
        for (int32_t i = 0; i < hd; i++) acc[(int64_t)h * hd + i] = 0.0f;
    }
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) {
        if (run[k].vs) /* int8 V: fold each row's scale into its weights */
            for (int32_t h = 0; h < nh; h++)
                for (int32_t j = 0; j < run[k].n; j++) p[(int64_t)h * n + j0 + j] *= run[k].vs[j * run[k].sstride];
        attn_run(1, acc, p + j0, n, q, nh, hd, &run[k]);
    }
}

const plume_kernels plume_kernels_avx512 = {
    .name = "avx512",
    .matmul = {mm_f32, mm_f16, mm_bf16, mm_q8, mm_q4},
    .reads_tiles = 1,
    .dot = dot_avx512,
    .axpy = axpy_avx512,
    .gelu_mul = gelu_mul_avx512,
    .softcap = softcap_avx512,
    .sigmoid_mul = sigmoid_mul_avx512,
    .softmax = softmax_avx512,
    .rmsnorm = rmsnorm_avx512,
    .attn_block = attn_block_avx512,
};
