/* avx2.c -- the kernel table for AVX2 + FMA + F16C: 8 floats a vector, 16 registers. Same
 * math as scalar.c with the sums reassociated; activations stay float32.
 *
 * Laid out as avx512.c, which explains the tiling: decode (T = 1) runs 8 rows at a time over
 * one load of x; prefill (T > 1) runs tiles of 3 rows x 3 tokens (9 accumulators, 3 x vectors
 * and a weight vector fit the 16 registers; 4 x 2 measured slower) over row panels that stay
 * in L2 while every block of tokens passes over them.
 *
 * Q4: the low nibbles of a group's 16 bytes are its even columns, the high nibbles its odd
 * ones, so a tile first copies its tokens' x into a small buffer split into even and odd
 * columns (once for all rows of the tile), and each row's bytes widen to 32-bit lanes that
 * give the even column by a mask and the odd one by a shift. Every token then adds
 * d * (sum q x - 8 sum x) per group, with -8 sum x stored beside the split x. (Turning the
 * nibbles into (q - 8) d once per tile would save an operation per token in prefill, but would
 * sum a token differently alone and in a batch; plume_batch promises the same bits.)
 */
#include <immintrin.h>
#include <math.h>

#include "../common.h"
#include "kernels.h"
#include "tile.h"

enum {
    ROWS_DECODE = 8,         /* rows per tile when T = 1 */
    ROWS_PREFILL = 3,        /* rows per tile when T > 1 */
    TOKENS_MAX = 3,          /* tokens per tile: 3 x 3 accumulators + 3 x + 1 weight < 16 */
    Q4_CHUNK = 16,           /* Q4 groups of x split per pass of a tile: 512 columns */
    Q4_STRIDE = 40,          /* floats per group of split x: 16 even, 16 odd, 8 offset */
    PANEL_BYTES = 128 << 10  /* weights of a row panel, re-read from L2 by each token block */
};

static const tile_plan plan = {ROWS_DECODE, ROWS_PREFILL, PANEL_BYTES};

/* ---- weights as floats --------------------------------------------------------------- */

/* Columns c..c+7 of a row of F32, F16, BF16 or Q8 weights, as floats (Q8 unscaled). */
static inline __attribute__((always_inline)) __m256 load8(plume_wtype type, const uint8_t *row,
                                                          int32_t c) {
    switch (type) {
    case PLUME_W_F32:
        return _mm256_loadu_ps((const float *)row + c);
    case PLUME_W_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + c)));
    case PLUME_W_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case PLUME_W_Q8:
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)row + c))));
    default:
        return _mm256_setzero_ps();
    }
}

/* Sum of the 8 lanes. */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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
    __m256 acc[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++) wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
    UNROLL
    for (int t = 0; t < TT; t++) xt[t] = a->x + (int64_t)(t0 + t) * a->ldx;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = _mm256_setzero_ps();

    /* Decode of 1- and 2-byte weights: fetch the next tile's rows (contiguous after ours) as
     * fast as we read ours. F32 streams well enough on the hardware prefetcher alone. */
    const int esize = type == PLUME_W_F32 ? 4 : type == PLUME_W_Q8 ? 1 : 2;
    const int prefetch = a->stream && type != PLUME_W_F32;
    const int lines = R * 8 * esize / 64 > 0 ? R * 8 * esize / 64 : 1;
    const char *next = (const char *)wr[0] + R * a->row_bytes;
    int32_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        if (prefetch) {
            UNROLL
            for (int k = 0; k < lines; k++)
                _mm_prefetch(next + (size_t)c * R * esize + 64 * k, PLUME_PREFETCH_STREAM);
        }
        /* x first, then one weight vector at a time: R*TT + TT + 1 registers */
        __m256 xv[TOKENS_MAX];
        UNROLL
        for (int t = 0; t < TT; t++) xv[t] = _mm256_loadu_ps(xt[t] + c);
        UNROLL
        for (int i = 0; i < R; i++) {
            __m256 wv = load8(type, wr[i], c);
            UNROLL
            for (int t = 0; t < TT; t++) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
        }
    }
    float sum[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) sum[i][t] = hsum8(acc[i][t]);
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

/* Copy groups [g0, g0+n) of one token's x into xs, Q4_STRIDE floats a group: its 16 even
 * columns, its 16 odd ones, then 8 floats summing to -8 times the group's sum of x (the
 * q - 8 offset, paid once per token instead of once per weight). */
static inline void split_even_odd(float *xs, const float *x, int32_t g0, int32_t n) {
    for (int32_t j = 0; j < n; j++) {
        const float *xg = x + 32 * (g0 + j);
        float *out = xs + Q4_STRIDE * j;
        __m256 sum = _mm256_setzero_ps();
        for (int h = 0; h < 2; h++) {
            __m256 a0 = _mm256_loadu_ps(xg + 16 * h), a1 = _mm256_loadu_ps(xg + 16 * h + 8);
            /* shuffle_ps works within 128-bit lanes: cols 0 2 8 10 | 4 6 12 14; permute4x64
             * puts the 64-bit pairs back in order */
            __m256 e = _mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
            __m256 o = _mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));
            e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
            o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
            _mm256_storeu_ps(out + 8 * h, e);
            _mm256_storeu_ps(out + 16 + 8 * h, o);
            sum = _mm256_add_ps(sum, _mm256_add_ps(a0, a1));
        }
        _mm256_storeu_ps(out + 32, _mm256_mul_ps(sum, _mm256_set1_ps(-8.0f)));
    }
}

/* The Q4 twin of tile_body: 32 columns (one scale group) a step, see the file comment. A
 * group adds d * (sum q x - 8 sum x), q the raw nibble. */
static inline __attribute__((always_inline)) void tile_body_q4(const mm_args *a, int32_t r,
                                                               int32_t t0, const int R,
                                                               const int TT) {
    const int32_t groups = a->w->cols / 32;
    const __m256i low4 = _mm256_set1_epi32(15);
    const uint8_t *wr[ROWS_DECODE];
    const uint16_t *sr[ROWS_DECODE];
    __m256 acc[ROWS_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < R; i++) {
        wr[i] = (const uint8_t *)a->w->data + (size_t)(r + i) * a->row_bytes;
        sr[i] = a->w->scale + (int64_t)(r + i) * groups;
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = _mm256_setzero_ps();

    const char *next = (const char *)wr[0] + R * a->row_bytes;
    for (int32_t g0 = 0; g0 < groups; g0 += Q4_CHUNK) {
        int32_t n = groups - g0 < Q4_CHUNK ? groups - g0 : Q4_CHUNK;
        float xs[TOKENS_MAX][Q4_STRIDE * Q4_CHUNK];
        float d[ROWS_DECODE][Q4_CHUNK];
        for (int t = 0; t < TT; t++) split_even_odd(xs[t], a->x + (int64_t)(t0 + t) * a->ldx, g0, n);
        for (int i = 0; i < R; i++) {
            int32_t j = 0;
            for (; j + 8 <= n; j += 8)
                _mm256_storeu_ps(d[i] + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sr[i] + g0 + j))));
            for (; j < n; j++) d[i][j] = plume_f16_to_f32(sr[i][g0 + j]);
        }
        for (int32_t j = 0; j < n; j++) {
            if (a->stream) { /* as in tile_body */
                UNROLL
                for (int k = 0; k < (R * 16 + 63) / 64; k++)
                    _mm_prefetch(next + (size_t)(g0 + j) * R * 16 + 64 * k, PLUME_PREFETCH_STREAM);
            }
            UNROLL
            for (int i = 0; i < R; i++) {
                /* bytes 0-7 and 8-15 of the group, one per 32-bit lane */
                const uint8_t *b = wr[i] + 16 * (g0 + j);
                __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b));
                __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + 8)));
                __m256 e0 = _mm256_cvtepi32_ps(_mm256_and_si256(b0, low4));
                __m256 e1 = _mm256_cvtepi32_ps(_mm256_and_si256(b1, low4));
                __m256 o0 = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
                __m256 o1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
                __m256 dv = _mm256_set1_ps(d[i][j]);
                /* d * (sum q x - 8 sum x), 5 operations per row, token and group: the same
                 * order for every token whatever TT, so a row's sums do not depend on the
                 * other tokens of the call (batches are bit-identical to single steps) */
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const float *xg = xs[t] + Q4_STRIDE * j;
                    __m256 s = _mm256_fmadd_ps(e0, _mm256_loadu_ps(xg), _mm256_loadu_ps(xg + 32));
                    s = _mm256_fmadd_ps(e1, _mm256_loadu_ps(xg + 8), s);
                    s = _mm256_fmadd_ps(o0, _mm256_loadu_ps(xg + 16), s);
                    s = _mm256_fmadd_ps(o1, _mm256_loadu_ps(xg + 24), s);
                    acc[i][t] = _mm256_fmadd_ps(s, dv, acc[i][t]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) a->y[(int64_t)(t0 + t) * a->ldy + r + i] = hsum8(acc[i][t]);
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
    case 1 * 8 + 1: tile_body(type, a, r, t0, 1, 1); break;
    case 1 * 8 + 2: tile_body(type, a, r, t0, 1, 2); break;
    case 1 * 8 + 3: tile_body(type, a, r, t0, 1, 3); break;
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
    mm_run(PLUME_W_Q4, tile_q4, &plan, TOKENS_MAX, y, ldy, x, ldx, T, w, r0, r1);
}

/* ---- vectors ------------------------------------------------------------------------- */

/* sum a[i] * b[i]: four accumulators of 8, then one, then a scalar tail. */
static float dot_avx2(const float *a, const float *b, int32_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float acc = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y += a * x. */
static void axpy_avx2(float *y, float a, const float *x, int32_t n) {
    __m256 av = _mm256_set1_ps(a);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* ---- elementwise --------------------------------------------------------------------- */

/* exp(y) for y <= 0 (clamped at -87): 2^n * p(r) as in avx512.c, 2^n built in the exponent
 * bits. */
static inline __m256 exp_neg256(__m256 y) {
    y = _mm256_max_ps(y, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), y);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* tanh(x) = sign(x) (1 - t) / (1 + t), t = exp(-2|x|). */
static inline __m256 tanh256(__m256 x) {
    __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 t = exp_neg256(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
    __m256 th = _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), t), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
    return _mm256_or_ps(th, sign);
}

/* g = gelu_tanh(g) * u, 8 at a time, the tail in scalar. */
static void gelu_mul_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 in = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
        __m256 gl = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh256(in)));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(gl, _mm256_loadu_ps(u + i)));
    }
    plume_gelu_mul_ref(g + i, u + i, n - i);
}

/* plume_softmax_ref with exp_neg256 (x - max <= 0), 8 at a time; the sum in 8 lanes. */
static void softmax_avx2(float *x, int64_t n) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float m8[8], mx = -INFINITY;
    _mm256_storeu_ps(m8, mv);
    for (int k = 0; k < 8; k++) mx = m8[k] > mx ? m8[k] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m256 sv = _mm256_setzero_ps(), mb = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp_neg256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mb));
        _mm256_storeu_ps(x + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    float sum = hsum8(sv);
    for (; i < n; i++) sum += x[i] = expf(x[i] - mx);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

/* x = cap * tanh(x / cap), 8 at a time, the tail in scalar. */
static void softcap_avx2(float *x, int64_t n, float cap) {
    int64_t i = 0;
    __m256 c = _mm256_set1_ps(cap), ic = _mm256_set1_ps(1.0f / cap);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(c, tanh256(_mm256_mul_ps(_mm256_loadu_ps(x + i), ic))));
    plume_softcap_ref(x + i, n - i, cap);
}

/* y = a * sigmoid(g), 8 at a time in plume_sigmoid_mul_ref's form, the tail in scalar. */
static void sigmoid_mul_avx2(float *y, const float *a, const float *g, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 t = exp_neg256(_mm256_or_ps(x, _mm256_set1_ps(-0.0f))); /* exp(-|x|) */
        __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, t));
        __m256 s = _mm256_blendv_ps(_mm256_mul_ps(t, r), r, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), s));
    }
    plume_sigmoid_mul_ref(y + i, a + i, g + i, n - i);
}

/* plume_rmsnorm_ref's bits: its 8 partial sums are the double lanes of two accumulators. */
static void rmsnorm_avx2(float *y, const float *x, const float *w, int32_t n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(a, a)); /* the square is exact */
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(b, b));
    }
    double p[8];
    _mm256_storeu_pd(p, s0);
    _mm256_storeu_pd(p + 4, s1);
    const float r = plume_rmsnorm_factor(p, x, i, n, eps);
    const __m256 rv = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), rv);
        _mm256_storeu_ps(y + i, w ? _mm256_mul_ps(v, _mm256_loadu_ps(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? x[i] * r * w[i] : x[i] * r;
}

/* ---- attention ----------------------------------------------------------------------- */

/* Columns c..c+7 of a K or V row as floats: float rows, or int8 rows unscaled. */
static inline __attribute__((always_inline)) __m256 kv8(const void *row, int i8, int32_t c) {
    if (i8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)row + c))));
    return _mm256_loadu_ps((const float *)row + c);
}

/* Largest of the 8 lanes. */
static inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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

enum { KV_AHEAD = 4 }; /* K rows prefetched this far ahead */

/* p[h * ldp + j] = q_h . k_j (times the row's scale if int8) for NH heads and the run's rows:
 * each K row is loaded once for all NH heads, one accumulator per head. */
static inline __attribute__((always_inline)) void attn_scores(int NH, int i8, float *p, int64_t ldp, const float *q,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t hv = hd & ~7;
    for (int32_t j = 0; j < r->n; j++) {
        const void *row = kv_rowp(r, 0, i8, j);
        __m256 acc[8];
        UNROLL
        for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_ps();
        const char *ahead = j + KV_AHEAD < r->n ? (const char *)kv_rowp(r, 0, i8, j + KV_AHEAD) : NULL;
        for (int32_t c = 0; c < hv; c += 8) {
            if (ahead && c % (i8 ? 64 : 16) == 0) _mm_prefetch(ahead + (int64_t)c * (i8 ? 1 : 4), _MM_HINT_T0);
            __m256 k = kv8(row, i8, c);
            UNROLL
            for (int h = 0; h < NH; h++) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (int64_t)h * hd + c), k, acc[h]);
        }
        UNROLL
        for (int h = 0; h < NH; h++) {
            float s = hsum8(acc[h]);
            for (int32_t c = hv; c < hd; c++) s += q[(int64_t)h * hd + c] * kv1(row, i8, c);
            p[h * ldp + j] = i8 ? s * r->ks[j * r->sstride] : s;
        }
    }
}

/* acc[h] += sum_j p[h * ldp + j] v_j for NH heads over the run's rows (int8: p holds the row's
 * scale already). Rows go 8 at a time; per 8 columns the NH sums stay in registers across
 * the 8 rows, and the next 8 rows are prefetched meanwhile. */
static inline __attribute__((always_inline)) void attn_values(int NH, int i8, float *acc, const float *p, int64_t ldp,
                                                              int32_t hd, const plume_kv_run *r) {
    int32_t hv = hd & ~7, esize = i8 ? 1 : 4;
    for (int32_t j0 = 0; j0 < r->n; j0 += 8) {
        int32_t nj = r->n - j0 < 8 ? r->n - j0 : 8, nk = r->n - j0 - 8;
        nk = nk < 0 ? 0 : nk > 8 ? 8 : nk;
        for (int32_t c = 0; c < hv; c += 8) {
            for (int32_t j = 0; j < nk; j++)
                _mm_prefetch((const char *)kv_rowp(r, 1, i8, j0 + 8 + j) + (int64_t)c * esize, _MM_HINT_T0);
            __m256 a[8];
            UNROLL
            for (int h = 0; h < NH; h++) a[h] = _mm256_loadu_ps(acc + (int64_t)h * hd + c);
            for (int32_t j = 0; j < nj; j++) {
                __m256 v = kv8(kv_rowp(r, 1, i8, j0 + j), i8, c);
                UNROLL
                for (int h = 0; h < NH; h++) a[h] = _mm256_fmadd_ps(_mm256_set1_ps(p[h * ldp + j0 + j]), v, a[h]);
            }
            UNROLL
            for (int h = 0; h < NH; h++) _mm256_storeu_ps(acc + (int64_t)h * hd + c, a[h]);
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

/* The kernels.h contract: scores, per-head max, exp and sum (8 at a time), then V. */
static void attn_block_avx2(float *acc, float *m, float *l, const float *q, int32_t nh, int32_t hd,
                              const plume_kv_run *run, int32_t nrun, float *p) {
    int32_t n = 0;
    for (int32_t k = 0; k < nrun; k++) n += run[k].n;
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) attn_run(0, NULL, p + j0, n, q, nh, hd, &run[k]);
    for (int32_t h = 0; h < nh; h++) {
        float *ph = p + (int64_t)h * n, mx = -INFINITY;
        int32_t j = 0;
        __m256 vm = _mm256_set1_ps(-INFINITY), vs = _mm256_setzero_ps();
        for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(ph + j));
        mx = hmax8(vm);
        for (; j < n; j++) mx = ph[j] > mx ? ph[j] : mx;
        float sum = 0.0f;
        for (j = 0; j + 8 <= n; j += 8) {
            __m256 d = _mm256_sub_ps(_mm256_loadu_ps(ph + j), _mm256_set1_ps(mx));
            __m256 e = _mm256_and_ps(_mm256_cmp_ps(d, _mm256_set1_ps(PLUME_ATTN_MIN_EXP), _CMP_GE_OQ), exp_neg256(d));
            _mm256_storeu_ps(ph + j, e);
            vs = _mm256_add_ps(vs, e);
        }
        for (; j < n; j++) sum += ph[j] = plume_attn_exp(ph[j] - mx);
        m[h] = mx;
        l[h] = hsum8(vs) + sum;
        for (int32_t i = 0; i < hd; i++) acc[(int64_t)h * hd + i] = 0.0f;
    }
    for (int32_t k = 0, j0 = 0; k < nrun; j0 += run[k++].n) {
        if (run[k].vs) /* int8 V: fold each row's scale into its weights */
            for (int32_t h = 0; h < nh; h++)
                for (int32_t j = 0; j < run[k].n; j++) p[(int64_t)h * n + j0 + j] *= run[k].vs[j * run[k].sstride];
        attn_run(1, acc, p + j0, n, q, nh, hd, &run[k]);
    }
}

const plume_kernels plume_kernels_avx2 = {
    .name = "avx2",
    .matmul = {mm_f32, mm_f16, mm_bf16, mm_q8, mm_q4},
    .dot = dot_avx2,
    .axpy = axpy_avx2,
    .gelu_mul = gelu_mul_avx2,
    .softcap = softcap_avx2,
    .sigmoid_mul = sigmoid_mul_avx2,
    .softmax = softmax_avx2,
    .rmsnorm = rmsnorm_avx2,
    .attn_block = attn_block_avx2,
};
