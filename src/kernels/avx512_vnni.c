/* avx512_vnni.c -- the int8-activation matmul of qact.h with AVX-512 VNNI. vpdpbusd multiplies
 * 64 u8 by 64 s8 and adds each four products into one of 16 int32 lanes: four times the
 * multiply-adds of a float FMA in the same slot. Prefill (T = 64..512) of Q8/Q4 weights is bound
 * by arithmetic, so that is the gain; integer sums are exact, so Q8 results are the reference's
 * bit for bit and Q4 results differ only in the order of the float sum over groups.
 *
 * vpdpbusd wants one operand unsigned. Q8: the weights, flipped to u8 = q + 128 (one vpxord per
 * weight vector, shared by a tile's tokens) against s8 activations; sum (q+128) x = dot +
 * 128 sum x, and sum x is xsum's. Q4: the nibbles already are u8 = q + 8; sum (q+8) x = dot +
 * 8 sum_group x, taken off in float as -8 d xsum, 16 groups at a time.
 *
 * A tile is 4 rows x up to 6 tokens (Q4: 4), its accumulators in registers; per 128-column chunk:
 *   Q8  loads each row as 2 vectors and puts their 16-byte blocks in xq's order with vshufi64x2
 *       (0 2 4 6, then 1 3 5 7): the shuffles and xors run beside vpdpbusd on Zen 5;
 *   Q4  unpacks each row's 64 bytes with and / shift / vpunpck{l,h}bw into two u8 vectors whose
 *       128-bit lanes are the chunk's 4 groups, sums them per group in int32, then converts and
 *       multiplies by d: 2 vpdpbusd per conversion and FMA, which is why Q4 runs at 2/3 of Q8.
 * The epilogue reduces 4 rows x 4 tokens of accumulators into one vector with unpacks and
 * shuffles, under 3 instructions an accumulator instead of 9 for a reduce each (still 10% of
 * the time at 1536 columns). Columns past the last whole chunk (never in Gemma 4: D, I and the
 * heads are multiples of 128) go to a scalar loop.
 *
 * Rows are walked in panels of about PANEL_BYTES that stay in L2 while every block of tokens
 * passes over them; the next panel is prefetched meanwhile. Rows longer than KBLOCK_MAX
 * columns (E2B's down projections, 6144 and 12288) are cut into column blocks with their sums
 * carried in a->part, so that x of a token block stays in L1: without that, 6144 columns ran
 * at 80% of the speed of 1536.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>

#include "../common.h"
#include "kernels.h"
#include "qact.h"

/* Unroll the next loop fully: its count is a constant once a tile body is inlined, and only
 * then do the accumulator arrays fit in registers. GCC and clang spell it differently. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 8")
#endif

enum {
    ROWS = 4,          /* rows per tile; the epilogue packs 4 rows into a 128-bit lane */
    TOKENS_MAX = 6,    /* Q8 tokens per tile: 4 x 6 accumulators + 4 weights + 1 x < 32 zmm */
    TOKENS_MAX_Q4 = 4, /* Q4 holds 2 unpacked weights, d and a partial sum per row as well */
    TOKENS_PAD = 8,    /* TOKENS_MAX rounded up to the epilogue's 4 tokens a vector */
    PANEL_BYTES = 256 << 10, /* weights of a row panel, re-read from L2 by each token block */
    PANEL_ROWS_MAX = 256,    /* rows of a panel at most: the size of the partial sums */
    KBLOCK_MAX = 3072, /* longer rows are cut into blocks of KBLOCK columns, so that x of a */
    KBLOCK = 2048      /* token block (6 x 2 KiB) stays in L1 while the rows stream past it */
};

/* The accumulators' type: vpdpbusd's own view of a vector (int32 x 16). Kept as __m512i
 * (int64 x 8), GCC's PRE carries both views around the loop and spills. */
typedef int32_t qa_v16si __attribute__((vector_size(64)));

/* Sums of the column blocks done so far: [row of the panel][TOKENS_PAD] (a 4-row tile keeps
 * its 4 rows token-major, [TOKENS_PAD][4], the epilogue's lane order). */
typedef union {
    int32_t i[PANEL_ROWS_MAX * TOKENS_PAD]; /* Q8: exact int32 */
    float f[PANEL_ROWS_MAX * TOKENS_PAD];   /* Q4 */
} qa_part;

/* What every tile of one matmul call shares. */
typedef struct {
    float *y;                   /* Y[t*ldy + r] */
    int64_t ldy;
    const int8_t *xq;           /* [T, stride], chunk layout */
    const float *xs;            /* [T] */
    const int32_t *xsum;        /* [T, groups] */
    int64_t stride;             /* bytes of a token row of xq */
    int32_t groups;             /* entries of a token row of xsum */
    const plume_weight *w;
    size_t row_bytes;           /* bytes of one row of w->data */
    int32_t p0;                 /* first row of the current panel */
    int32_t c0, c1;             /* the current block of columns: c0 a multiple of KBLOCK */
    int32_t xtotal[TOKENS_PAD]; /* Q8: sum of xq over each token of the current block, 0 past */
    qa_part *part;              /* partial sums while a row is split into column blocks */
} qa_args;

/* ---- horizontal sums ------------------------------------------------------------------- */

/* Four int32 vectors -> one whose 128-bit lane k holds [sum a, sum b, sum c, sum d] of lane k. */
static inline __attribute__((always_inline)) __m512i hsum4_epi32(__m512i a, __m512i b, __m512i c,
                                                                 __m512i d) {
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* Four hsum4 results -> one vector: lane 4k + i = the whole sum of input i of s_k. */
static inline __attribute__((always_inline)) __m512i lanes_sum_epi32(__m512i s0, __m512i s1,
                                                                     __m512i s2, __m512i s3) {
    __m512i t01 = _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, 0x44), _mm512_shuffle_i32x4(s0, s1, 0xEE));
    __m512i t23 = _mm512_add_epi32(_mm512_shuffle_i32x4(s2, s3, 0x44), _mm512_shuffle_i32x4(s2, s3, 0xEE));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(t01, t23, 0x88), _mm512_shuffle_i32x4(t01, t23, 0xDD));
}

/* hsum4_epi32 for floats. */
static inline __attribute__((always_inline)) __m512 hsum4_ps(__m512 a, __m512 b, __m512 c,
                                                             __m512 d) {
    __m512d ab = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)));
    __m512d cd = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d)));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab, cd)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(ab, cd)));
}

/* lanes_sum_epi32 for floats. */
static inline __attribute__((always_inline)) __m512 lanes_sum_ps(__m512 s0, __m512 s1, __m512 s2,
                                                                 __m512 s3) {
    __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x44), _mm512_shuffle_f32x4(s0, s1, 0xEE));
    __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(s2, s3, 0x44), _mm512_shuffle_f32x4(s2, s3, 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
}

/* Lane k of a 4-row x 4-token vector: its token's value broadcast to the lane's 4 rows. */
static inline __attribute__((always_inline)) __m512 per_token(__m128 v) {
    const __m512i rep4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(rep4, _mm512_castps128_ps512(v));
}

/* Y for rows r..r+3 of tokens t..t+n-1 (n <= 4) = v (lane 4k + i: token t + k, row r + i)
 * times xs[t + k]. */
static inline __attribute__((always_inline)) void store_4x4(const qa_args *a, int32_t r,
                                                            int32_t t, int n, __m512 v) {
    __m128 xs = _mm_maskz_loadu_ps((__mmask8)((1u << n) - 1), a->xs + t);
    float out[16];
    _mm512_storeu_ps(out, _mm512_mul_ps(v, per_token(xs)));
    for (int k = 0; k < n; k++) memcpy(a->y + (int64_t)(t + k) * a->ldy + r, out + 4 * k, 4 * sizeof(float));
}

/* ---- Q8 tile --------------------------------------------------------------------------- */

/* Y for rows r..r+R-1 x tokens t0..t0+TT-1 of Q8 weights, columns c0..c1 (the partial sums
 * carried from and to a->part unless that is the whole row). R (ROWS or 1) and TT are
 * constants once inlined, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void tile_body_q8(const qa_args *a, int32_t r,
                                                               int32_t t0, const int R,
                                                               const int TT) {
    const int32_t cols = a->w->cols, c0 = a->c0, c1 = a->c1;
    const int32_t body = c1 == cols ? cols - cols % PLUME_QACT_CHUNK : c1;
    const __m512i flip = _mm512_set1_epi8(-128);
    const int8_t *wr[ROWS], *xt[TOKENS_MAX];
    qa_v16si acc[ROWS][TOKENS_PAD];
    UNROLL
    for (int i = 0; i < R; i++) wr[i] = (const int8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
    UNROLL
    for (int t = 0; t < TT; t++) xt[t] = a->xq + (int64_t)(t0 + t) * a->stride;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = (qa_v16si)_mm512_setzero_si512();

    for (int32_t c = c0; c < body; c += PLUME_QACT_CHUNK) {
        /* blocks 0 2 4 6 of the row against the chunk's first 64 bytes of x, then 1 3 5 7:
         * lanes 0 and 2 of blocks h.. and 1 and 3 of blocks h+3.. (four different loads, or
         * GCC keeps the two of each row alive across both halves and spills accumulators) */
        UNROLL
        for (int h = 0; h < 2; h++) {
            __m512i wv[ROWS];
            UNROLL
            for (int i = 0; i < R; i++) {
                __m512i lo = _mm512_loadu_si512(wr[i] + c + 16 * h);
                __m512i hi = _mm512_loadu_si512(wr[i] + c + 48 + 16 * h);
                wv[i] = _mm512_xor_si512(_mm512_shuffle_i64x2(lo, hi, 0xD8), flip);
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                __m512i xv = _mm512_loadu_si512(xt[t] + c + 64 * h);
                UNROLL
                for (int i = 0; i < R; i++)
                    acc[i][t] = (qa_v16si)_mm512_dpbusd_epi32((__m512i)acc[i][t], wv[i], xv);
            }
        }
    }

    /* the scalar tail, flipped like the body so that one correction serves both */
    int32_t tail[TOKENS_PAD][ROWS] = {{0}}; /* token-major: the epilogue's lane order */
    for (int32_t c = body; c < c1; c++) {
        const int64_t p = plume_qact_pos(c);
        for (int i = 0; i < R; i++) {
            int32_t wq = wr[i][c] + 128;
            for (int t = 0; t < TT; t++) tail[t][i] += wq * xt[t][p];
        }
    }
    /* y = ((float)(sum - 128 xtotal) * (s / 127)) * xs, in qact.c's order */
    int32_t *part = a->part->i + (int64_t)(r - a->p0) * TOKENS_PAD;
    if (R == ROWS) {
        const __m128 s4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(a->w->scale + r)));
        const __m512 f = _mm512_broadcast_f32x4(_mm_div_ps(s4, _mm_set1_ps(127.0f)));
        UNROLL
        for (int t = 0; t < TT; t += 4) {
            __m512i s[4];
            UNROLL
            for (int k = 0; k < 4; k++)
                s[k] = t + k < TT ? hsum4_epi32((__m512i)acc[0][t + k], (__m512i)acc[1][t + k],
                                                (__m512i)acc[2][t + k], (__m512i)acc[3][t + k])
                                  : _mm512_setzero_si512();
            __m512i dot = _mm512_add_epi32(lanes_sum_epi32(s[0], s[1], s[2], s[3]),
                                           _mm512_loadu_si512(tail[t]));
            if (c0 > 0) dot = _mm512_add_epi32(dot, _mm512_loadu_si512(part + ROWS * t));
            if (c1 < cols) {
                _mm512_storeu_si512(part + ROWS * t, dot);
                continue;
            }
            __m512i xtot = _mm512_castps_si512(
                per_token(_mm_castsi128_ps(_mm_loadu_si128((const __m128i *)(a->xtotal + t)))));
            dot = _mm512_sub_epi32(dot, _mm512_slli_epi32(xtot, 7));
            store_4x4(a, r, t0 + t, TT - t < 4 ? TT - t : 4, _mm512_mul_ps(_mm512_cvtepi32_ps(dot), f));
        }
    } else {
        const float f = plume_f16_to_f32(a->w->scale[r]) / 127.0f;
        UNROLL
        for (int t = 0; t < TT; t++) {
            int32_t dot = _mm512_reduce_add_epi32((__m512i)acc[0][t]) + tail[t][0];
            if (c0 > 0) dot += part[t];
            if (c1 < cols)
                part[t] = dot;
            else
                a->y[(int64_t)(t0 + t) * a->ldy + r] = (float)(dot - 128 * a->xtotal[t]) * f * a->xs[t0 + t];
        }
    }
}

/* ---- Q4 tile --------------------------------------------------------------------------- */

/* The Q4 twin of tile_body_q8: a chunk is 4 scale groups, see the file comment. */
static inline __attribute__((always_inline)) void tile_body_q4(const qa_args *a, int32_t r,
                                                               int32_t t0, const int R,
                                                               const int TT) {
    const int32_t ngroups = a->w->cols / PLUME_QACT_GROUP;
    const int32_t g0 = a->c0 / PLUME_QACT_GROUP, g1 = a->c1 / PLUME_QACT_GROUP;
    const int32_t body = g1 == ngroups ? ngroups - ngroups % 4 : g1;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const uint8_t *wr[ROWS];
    const uint16_t *sr[ROWS];
    const int8_t *xt[TOKENS_MAX_Q4];
    const int32_t *st[TOKENS_MAX_Q4];
    __m512 acc[ROWS][TOKENS_PAD];
    UNROLL
    for (int i = 0; i < R; i++) {
        wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
        sr[i] = a->w->scale + (int64_t)(r + i) * ngroups;
    }
    UNROLL
    for (int t = 0; t < TT; t++) {
        xt[t] = a->xq + (int64_t)(t0 + t) * a->stride;
        st[t] = a->xsum + (int64_t)(t0 + t) * a->groups;
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();

    for (int32_t g = g0; g < body; g += 4) {
        const int32_t xo = g * PLUME_QACT_GROUP; /* the chunk's first byte in a token row */
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512i b = _mm512_loadu_si512(wr[i] + 16 * g);
            __m512i lo = _mm512_and_si512(b, low4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
            __m512i wa = _mm512_unpacklo_epi8(lo, hi), wb = _mm512_unpackhi_epi8(lo, hi);
            __m512 d = per_token(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(sr[i] + g))));
            UNROLL
            for (int t = 0; t < TT; t++) {
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa,
                                                _mm512_loadu_si512(xt[t] + xo));
                s = _mm512_dpbusd_epi32(s, wb, _mm512_loadu_si512(xt[t] + xo + 64));
                acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[i][t]);
            }
        }
    }
    /* the nibbles' +8: acc -= 8 d_g xsum_g over the body's groups, 16 at a time */
    const __m512 minus8 = _mm512_set1_ps(-8.0f);
    int32_t g = g0;
    for (; g + 16 <= body; g += 16) {
        __m512 xsf[TOKENS_MAX_Q4];
        UNROLL
        for (int t = 0; t < TT; t++) xsf[t] = _mm512_cvtepi32_ps(_mm512_loadu_si512(st[t] + g));
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sr[i] + g))), minus8);
            UNROLL
            for (int t = 0; t < TT; t++) acc[i][t] = _mm512_fmadd_ps(d, xsf[t], acc[i][t]);
        }
    }

    /* scalar tails: the rest of the +8 correction, then the groups past the last chunk */
    float fix[TOKENS_PAD][ROWS] = {{0}}; /* token-major: the epilogue's lane order */
    for (; g < body; g++)
        for (int i = 0; i < R; i++) {
            float d8 = -8.0f * plume_f16_to_f32(sr[i][g]);
            for (int t = 0; t < TT; t++) fix[t][i] += d8 * (float)st[t][g];
        }
    for (g = body; g < g1; g++)
        for (int i = 0; i < R; i++) {
            int32_t dot[TOKENS_MAX_Q4] = {0};
            for (int32_t c = g * PLUME_QACT_GROUP; c < (g + 1) * PLUME_QACT_GROUP; c++) {
                const int64_t p = plume_qact_pos(c);
                uint8_t b = wr[i][c / 2];
                int32_t q = (c % 2 ? b >> 4 : b & 15) - 8;
                for (int t = 0; t < TT; t++) dot[t] += q * xt[t][p];
            }
            float d = plume_f16_to_f32(sr[i][g]);
            for (int t = 0; t < TT; t++) fix[t][i] += d * (float)dot[t];
        }
    /* y = sum * xs */
    float *part = a->part->f + (int64_t)(r - a->p0) * TOKENS_PAD;
    if (R == ROWS) {
        UNROLL
        for (int t = 0; t < TT; t += 4) {
            __m512 s[4];
            UNROLL
            for (int k = 0; k < 4; k++)
                s[k] = t + k < TT ? hsum4_ps(acc[0][t + k], acc[1][t + k], acc[2][t + k], acc[3][t + k])
                                  : _mm512_setzero_ps();
            __m512 sum = _mm512_add_ps(lanes_sum_ps(s[0], s[1], s[2], s[3]), _mm512_loadu_ps(fix[t]));
            if (g0 > 0) sum = _mm512_add_ps(sum, _mm512_loadu_ps(part + ROWS * t));
            if (g1 < ngroups)
                _mm512_storeu_ps(part + ROWS * t, sum);
            else
                store_4x4(a, r, t0 + t, TT - t < 4 ? TT - t : 4, sum);
        }
    } else {
        UNROLL
        for (int t = 0; t < TT; t++) {
            float sum = _mm512_reduce_add_ps(acc[0][t]) + fix[t][0];
            if (g0 > 0) sum += part[t];
            if (g1 < ngroups)
                part[t] = sum;
            else
                a->y[(int64_t)(t0 + t) * a->ldy + r] = sum * a->xs[t0 + t];
        }
    }
}

/* ---- tiles ------------------------------------------------------------------------------ */

typedef void (*tile_fn)(const qa_args *a, int32_t r, int32_t t0, int R, int TT);

/* Q8 tiles of the shapes qa_drive uses, R and TT turned into constants. */
static void tile_q8(const qa_args *a, int32_t r, int32_t t0, int R, int TT) {
    switch (R * 8 + TT) {
    case ROWS * 8 + 1: tile_body_q8(a, r, t0, ROWS, 1); break;
    case ROWS * 8 + 2: tile_body_q8(a, r, t0, ROWS, 2); break;
    case ROWS * 8 + 3: tile_body_q8(a, r, t0, ROWS, 3); break;
    case ROWS * 8 + 4: tile_body_q8(a, r, t0, ROWS, 4); break;
    case ROWS * 8 + 5: tile_body_q8(a, r, t0, ROWS, 5); break;
    case ROWS * 8 + 6: tile_body_q8(a, r, t0, ROWS, 6); break;
    case 1 * 8 + 1: tile_body_q8(a, r, t0, 1, 1); break;
    case 1 * 8 + 2: tile_body_q8(a, r, t0, 1, 2); break;
    case 1 * 8 + 3: tile_body_q8(a, r, t0, 1, 3); break;
    case 1 * 8 + 4: tile_body_q8(a, r, t0, 1, 4); break;
    case 1 * 8 + 5: tile_body_q8(a, r, t0, 1, 5); break;
    case 1 * 8 + 6: tile_body_q8(a, r, t0, 1, 6); break;
    default: break;
    }
}

/* Q4 tiles of the shapes qa_drive uses. */
static void tile_q4(const qa_args *a, int32_t r, int32_t t0, int R, int TT) {
    switch (R * 8 + TT) {
    case ROWS * 8 + 1: tile_body_q4(a, r, t0, ROWS, 1); break;
    case ROWS * 8 + 2: tile_body_q4(a, r, t0, ROWS, 2); break;
    case ROWS * 8 + 3: tile_body_q4(a, r, t0, ROWS, 3); break;
    case ROWS * 8 + 4: tile_body_q4(a, r, t0, ROWS, 4); break;
    case 1 * 8 + 1: tile_body_q4(a, r, t0, 1, 1); break;
    case 1 * 8 + 2: tile_body_q4(a, r, t0, 1, 2); break;
    case 1 * 8 + 3: tile_body_q4(a, r, t0, 1, 3); break;
    case 1 * 8 + 4: tile_body_q4(a, r, t0, 1, 4); break;
    default: break;
    }
}

/* ---- matmul ----------------------------------------------------------------------------- */

/* sum v[i] for i < n. */
static int32_t sum_epi32(const int32_t *v, int32_t n) {
    __m512i acc = _mm512_setzero_si512();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(v + i));
    int32_t sum = _mm512_reduce_add_epi32(acc);
    for (; i < n; i++) sum += v[i];
    return sum;
}

/* Cover rows [r0, r1) x tokens [0, T) with tiles: panels of rows (about PANEL_BYTES of
 * weights) crossed with balanced blocks of at most tokens_max tokens and blocks of columns,
 * so a panel is read from memory once and from L2 by each token block. Meanwhile the next
 * panel is fetched into L2, a slice after each tile, so that the first token block does not
 * wait on memory. */
static void qa_drive(tile_fn tile, qa_args *a, int32_t T, int32_t r0, int32_t r1, int tokens_max) {
    const int32_t cols = a->w->cols, kblock = cols <= KBLOCK_MAX ? cols : KBLOCK;
    const int32_t kblocks = (cols + kblock - 1) / kblock, blocks = (T + tokens_max - 1) / tokens_max;
    size_t fit = PANEL_BYTES / a->row_bytes;
    int32_t panel = fit < ROWS ? ROWS : fit > PANEL_ROWS_MAX ? PANEL_ROWS_MAX : (int32_t)fit;
    panel -= panel % ROWS;
    for (int32_t p0 = r0; p0 < r1; p0 += panel) {
        const int32_t p1 = r1 - p0 < panel ? r1 : p0 + panel;
        const int32_t n1 = r1 - p1 < panel ? r1 : p1 + panel; /* the next panel: p1..n1 */
        const char *next = (const char *)a->w->data + (size_t)p1 * a->row_bytes;
        const size_t next_bytes = (size_t)(n1 - p1) * a->row_bytes;
        const int32_t tiles = blocks * kblocks * ((p1 - p0) / ROWS + (p1 - p0) % ROWS);
        const size_t slice = (next_bytes / (size_t)tiles + 63) & ~(size_t)63;
        size_t fetched = 0;
        a->p0 = p0;
        for (int32_t b = 0, t0 = 0; b < blocks; b++) {
            int tt = (T - t0 + (blocks - b) - 1) / (blocks - b);
            for (int k = 0; k < TOKENS_PAD; k++)
                a->xtotal[k] = a->w->type == PLUME_W_Q8 && k < tt
                                   ? sum_epi32(a->xsum + (int64_t)(t0 + k) * a->groups, a->groups)
                                   : 0;
            for (a->c0 = 0; a->c0 < cols; a->c0 += kblock) {
                a->c1 = cols - a->c0 < kblock ? cols : a->c0 + kblock;
                for (int32_t r = p0; r < p1;) {
                    int R = p1 - r >= ROWS ? ROWS : 1;
                    tile(a, r, t0, R, tt);
                    r += R;
                    for (size_t end = fetched + slice; fetched < end && fetched < next_bytes; fetched += 64)
                        _mm_prefetch(next + fetched, _MM_HINT_T1);
                }
            }
            t0 += tt;
        }
    }
}

/* Check the weight, gather the call's shared state, run the tiles. */
void plume_qact_matmul_vnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xsum, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1) {
    if (T <= 0 || r1 <= r0 || !plume_qact_supported(w)) return;
    int q8 = w->type == PLUME_W_Q8;
    qa_part part;
    qa_args a = {.y = y, .ldy = ldy, .xq = xq, .xs = xs, .xsum = xsum,
                 .stride = plume_qact_stride(w->cols), .groups = plume_qact_groups(w->cols),
                 .w = w, .row_bytes = q8 ? (size_t)w->cols : (size_t)w->cols / 2, .part = &part};
    qa_drive(q8 ? tile_q8 : tile_q4, &a, T, r0, r1, q8 ? TOKENS_MAX : TOKENS_MAX_Q4);
}

/* ---- quantize --------------------------------------------------------------------------- */

/* qact.c's quantizer 16 columns a step: same products, same rounding (the MXCSR default,
 * nearest-even, made explicit), so the same bytes. */
void plume_qact_quantize_vnni(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xsum) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        int8_t *q = xq + t * stride;
        int32_t *s = xsum + (int64_t)t * groups;
        memset(q, 0, (size_t)stride);
        memset(s, 0, (size_t)groups * sizeof *s);
        __m512 m = _mm512_setzero_ps();
        int32_t c = 0;
        for (; c + 16 <= cols; c += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xr + c)));
        float amax = _mm512_reduce_max_ps(m);
        for (; c < cols; c++) amax = fmaxf(amax, fabsf(xr[c]));
        if (!(amax >= PLUME_QACT_TINY)) {
            xs[t] = 0.0f;
            continue;
        }
        const float inv = 127.0f / amax;
        xs[t] = amax / 127.0f;
        const __m512 vinv = _mm512_set1_ps(inv);
        for (c = 0; c + 16 <= cols; c += 16) {
            __m512i v = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xr + c), vinv),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm512_max_epi32(_mm512_min_epi32(v, hi), lo);
            _mm_storeu_si128((__m128i *)(q + plume_qact_pos(c)), _mm512_cvtepi32_epi8(v));
            s[c / PLUME_QACT_GROUP] += _mm512_reduce_add_epi32(v);
        }
        for (; c < cols; c++) {
            int8_t v = plume_qact_round(xr[c] * inv);
            q[plume_qact_pos(c)] = v;
            s[c / PLUME_QACT_GROUP] += v;
        }
    }
}

/* ---- cpu check -------------------------------------------------------------------------- */

/* F16C from CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c"). */
static int qa_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* What the compile flags of this file assume, asked of the CPU (and OS, by the builtins). */
int plume_qact_vnni_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && qa_has_f16c() &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
