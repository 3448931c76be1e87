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
                _mm_prefetch(next + (size_t)c * R * esize + 64 * k, _MM_HINT_NTA);
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
                    _mm_prefetch(next + (size_t)g * R * 16 + 64 * k, _MM_HINT_NTA);
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

const plume_kernels plume_kernels_avx512 = {
    .name = "avx512",
    .matmul = {mm_f32, mm_f16, mm_bf16, mm_q8, mm_q4},
    .dot = dot_avx512,
    .axpy = axpy_avx512,
    .gelu_mul = gelu_mul_avx512,
    .softcap = softcap_avx512,
};
