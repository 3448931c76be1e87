/* avx512_vnni.c -- the int8-activation matmul of qact.h with AVX-512 VNNI, for decode (T = 1)
 * and prefill alike. vpdpbusd multiplies 64 u8 by 64 s8 and adds each four products into one
 * of 16 int32 lanes: four times the multiply-adds of a float FMA in the same slot, on a
 * quarter of the activation bytes. Decode streams each weight row once past activations that
 * sit in L1; prefill re-reads a panel of rows from L2 per block of tokens.
 *
 * vpdpbusd wants one operand unsigned: the weights are made u8 = 16 q + 128 (Q4: the nibbles
 * q + 8 moved to the high half of a byte, no extra instruction) or q + 128 (Q8: one vpxord),
 * and each lane's accumulator starts at xcor = MAGIC - 128 x (the lane's sum of xq),
 * precomputed by the quantizer, so the lane ends on MAGIC + the exact dot (Q4: 16 dot), whose
 * bits read as a float are 12582912 + dot. Per 128-column chunk (4 blocks of 32, the 16
 * lanes of a zmm: 4 per block, qact.h), per row and token:
 *
 *   s = xcor;  s += w_half0 . x_half0;  s += w_half1 . x_half1      (2 vpdpbusd, exact)
 *   acc = fma(float(s) - 12582912, f, acc)   f = xs of the lane's block (Q8), d xs / 16 (Q4)
 *
 * the subtraction instead of vcvtdq2ps, which shares port 0 with vpdpbusd on Intel cores:
 * prefill is bound by that port.
 *
 * and at the end the 16 lanes of acc are reduced by one fixed tree (hsum4_ps + lanes_sum_ps)
 * for every row and token, whatever the tile, so a row's output does not depend on T, on the
 * batch or on how rows are split across threads. Q8 then multiplies by s_r / 127.
 *
 * A tile is up to 4 rows x 4 tokens, its accumulators in registers; per chunk the rows' weights
 * are loaded into registers first, then each token's activations once (tokens outer: 20 loads
 * for 32 vpdpbusd, where rows outer took 56). Q8 loads a row's chunk as
 * its two 64-byte lines and puts their 16-byte blocks in xq's order with two vshufi64x2
 * (0 2 4 6, then 1 3 5 7); Q4 unpacks a row's 64 bytes with shift / and / vpunpck{l,h}bw into two u8 vectors
 * whose 128-bit lanes are the chunk's 4 groups. A last chunk short of 128 columns (never in
 * Gemma 4) is read with masked loads; xq is zero padded there.
 *
 * Prefill walks rows in panels of about PANEL_BYTES that stay in L2 while every block of
 * tokens passes over them; the next panel is prefetched meanwhile. Rows longer than
 * KBLOCK_MAX columns (E2B's down projections) are cut into column blocks for prefill, the
 * lane accumulators carried in a->part between them, so that x of a token block stays in L1
 * and the float sums are the same as without the cut.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
    ROWS = 4,       /* rows per tile; the epilogue packs 4 rows into a 128-bit lane */
    TOKENS_MAX = 4, /* tokens per tile: 16 accumulators + 4 block factors + 2 weights < 32 zmm */
    PANEL_BYTES = 256 << 10, /* weights of a row panel, re-read from L2 by each token block */
    PANEL_ROWS_MAX = 256,    /* rows of a panel at most, when rows are cut into column blocks */
    KBLOCK_MAX = 3072, /* longer rows are cut into blocks of KBLOCK columns for prefill, so */
    KBLOCK = 2048,     /* that x of a token block (4 x 2 KiB) stays in L1 */
    STREAM_BLOCKS = PLUME_QACT_STREAM_TOKENS / TOKENS_MAX /* token blocks that stream the weights */
};

/* Tokens of block b when T tokens from t0 on are cut into blocks - b balanced blocks (5 tokens
 * in 2 blocks: 3 + 2). */
static inline int32_t block_tokens(int32_t T, int32_t t0, int32_t blocks, int32_t b) {
    return (T - t0 + (blocks - b) - 1) / (blocks - b);
}

/* The lane accumulators of the column blocks done so far: [row of the panel][token]. */
typedef struct {
    __m512 v[PANEL_ROWS_MAX * TOKENS_MAX];
} qa_part;

/* What every tile of one matmul call shares. */
typedef struct {
    float *y;              /* Y[t*ldy + r] */
    int64_t ldy;
    const int8_t *xq;      /* [T, stride], chunk layout */
    const float *xs;       /* [T, groups] */
    const int32_t *xcor;   /* [T, lanes] */
    int64_t stride;        /* bytes of a token row of xq */
    int32_t groups, lanes; /* entries of a token row of xs, xcor */
    const plume_weight *w;
    size_t row_bytes;      /* bytes of one row of w->data */
    int32_t p0;            /* first row of the current panel */
    int32_t k0, k1;        /* the current block of chunks */
    int32_t nfull;         /* whole chunks of a row; a last one past them is partial */
    int32_t nchunks;       /* chunks of a row */
    qa_part *part;         /* lane accumulators while a row is split into column blocks */
    int stream;            /* one token block: the weights stream from memory once */
    int32_t rstride;       /* row i of a tile is row r + i rstride */
} qa_args;

/* ---- horizontal sums ------------------------------------------------------------------- */

/* Four float vectors -> one whose 128-bit lane k holds [sum a, sum b, sum c, sum d] of lane
 * k; each sum (x0 + x2) + (x1 + x3) of its four floats, the same tree for a, b, c and d. */
static inline __attribute__((always_inline)) __m512 hsum4_ps(__m512 a, __m512 b, __m512 c,
                                                             __m512 d) {
    __m512d ab = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)));
    __m512d cd = _mm512_castps_pd(_mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d)));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab, cd)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(ab, cd)));
}

/* Four hsum4 results -> one vector: lane 4k + i = the whole sum of input i of s_k, each by
 * (L0 + L2) + (L1 + L3) of its 128-bit lanes. */
static inline __attribute__((always_inline)) __m512 lanes_sum_ps(__m512 s0, __m512 s1, __m512 s2,
                                                                 __m512 s3) {
    __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x44), _mm512_shuffle_f32x4(s0, s1, 0xEE));
    __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(s2, s3, 0x44), _mm512_shuffle_f32x4(s2, s3, 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
}

/* Lane k of a 4-row x 4-token vector: its token's value broadcast to the lane's 4 rows (or,
 * for block factors, 128-bit lane k of a chunk gets block k's value). */
static inline __attribute__((always_inline)) __m512 per_lane(__m128 v) {
    const __m512i rep4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(rep4, _mm512_castps128_ps512(v));
}

/* Bytes o.. of a load are valid while below n: the mask of a 64-byte load at offset o. */
static inline __mmask64 tail_mask(int64_t n, int64_t o) {
    int64_t k = n - o;
    return k >= 64 ? ~(__mmask64)0 : k <= 0 ? 0 : (((__mmask64)1 << k) - 1);
}

/* ---- the tiles ------------------------------------------------------------------------- */

/* One 128-column chunk k of rows r..r+R-1 against tokens t0..t0+TT-1 into acc. TAIL: the
 * last, partial chunk, read with masked loads. R, TT, TAIL and q8 are constants once inlined. */
static inline __attribute__((always_inline)) void tile_chunk(const qa_args *a, int32_t r, int32_t t0,
                                                             const int R, const int TT, const int q8,
                                                             const int TAIL, int32_t k,
                                                             __m512 acc[ROWS][TOKENS_MAX]) {
    const int64_t c = (int64_t)k * PLUME_QACT_CHUNK;
    __m512i w0[ROWS], w1[ROWS]; /* the chunk of each row as u8, halves in xq's order */
    __m512 d[ROWS];             /* Q4: the row's 4 block scales / 16, one per 128-bit lane */
    UNROLL
    for (int i = 0; i < R; i++) {
        d[i] = _mm512_setzero_ps();
        if (q8) {
            const int8_t *wr = (const int8_t *)a->w->data + (size_t)(r + i * a->rstride) * a->row_bytes + c;
            const int64_t n = (int64_t)a->w->cols - c;
            const __m512i flip = _mm512_set1_epi8(-128);
            /* the chunk's two cache lines, blocks 0-3 and 4-7 (16 bytes each) */
            __m512i lo = TAIL ? _mm512_maskz_loadu_epi8(tail_mask(n, 0), wr) : _mm512_loadu_si512(wr);
            __m512i hi = TAIL ? _mm512_maskz_loadu_epi8(tail_mask(n, 64), wr + 64) : _mm512_loadu_si512(wr + 64);
            w0[i] = _mm512_xor_si512(_mm512_shuffle_i64x2(lo, hi, 0x88), flip); /* blocks 0 2 4 6 */
            w1[i] = _mm512_xor_si512(_mm512_shuffle_i64x2(lo, hi, 0xDD), flip); /* blocks 1 3 5 7 */
        } else {
            const uint8_t *wr = (const uint8_t *)a->w->data + (size_t)(r + i * a->rstride) * a->row_bytes + c / 2;
            const uint16_t *sr = a->w->scale + (int64_t)(r + i * a->rstride) * (a->w->cols / PLUME_QACT_GROUP) + 4 * k;
            const int64_t n = (int64_t)a->w->cols / 2 - c / 2, ng = a->w->cols / PLUME_QACT_GROUP - 4 * k;
            const __m512i high4 = _mm512_set1_epi8((char)0xf0);
            __m512i b = TAIL ? _mm512_maskz_loadu_epi8(tail_mask(n, 0), wr) : _mm512_loadu_si512(wr);
            __m512i lo = _mm512_and_si512(_mm512_slli_epi16(b, 4), high4); /* 16 (q + 8), even cols */
            __m512i hi = _mm512_and_si512(b, high4);                       /* odd cols */
            w0[i] = _mm512_unpacklo_epi8(lo, hi);
            w1[i] = _mm512_unpackhi_epi8(lo, hi);
            __m128i s4 = TAIL ? _mm_maskz_loadu_epi16((__mmask8)((1u << (ng < 4 ? ng : 4)) - 1), sr)
                              : _mm_loadl_epi64((const __m128i *)sr);
            d[i] = _mm512_mul_ps(per_lane(_mm_cvtph_ps(s4)), _mm512_set1_ps(1.0f / 16));
        }
    }
    /* tokens outer: a token's activations are loaded once and meet the rows in registers */
    UNROLL
    for (int t = 0; t < TT; t++) {
        /* lanes 4g..4g+3 = xs of the chunk's block g */
        const __m512 f = per_lane(_mm_loadu_ps(a->xs + (int64_t)(t0 + t) * a->groups + 4 * k));
        const int8_t *x = a->xq + (int64_t)(t0 + t) * a->stride + c;
        const __m512i cor = _mm512_loadu_si512(a->xcor + (int64_t)(t0 + t) * a->lanes + PLUME_QACT_LANES * k);
        const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512i s = _mm512_dpbusd_epi32(cor, w0[i], x0);
            s = _mm512_dpbusd_epi32(s, w1[i], x1);
            /* s = MAGIC + dot: as a float 12582912 + dot, exactly (qact.h) */
            __m512 v = _mm512_sub_ps(_mm512_castsi512_ps(s), _mm512_set1_ps(12582912.0f));
            acc[i][t] = _mm512_fmadd_ps(v, q8 ? f : _mm512_mul_ps(d[i], f), acc[i][t]);
        }
    }
}

/* Y for rows r..r+R-1 x tokens t0..t0+TT-1 over the chunks k0..k1 of a->: the lane sums
 * carried from and to a->part unless that is the whole row. R (ROWS or 1), TT and q8 are
 * constants once inlined, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void tile_body(const qa_args *a, int32_t r, int32_t t0,
                                                            const int R, const int TT, const int q8) {
    __m512 acc[ROWS][TOKENS_MAX];
    __m512 *part = a->part->v + (int64_t)(r - a->p0) * TOKENS_MAX;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = a->k0 > 0 ? part[i * TOKENS_MAX + t] : _mm512_setzero_ps();
    const int32_t end = a->k1 < a->nfull ? a->k1 : a->nfull;
    /* Streaming (decode): fetch the next tile's rows (each row's successor: the rows of a
     * streaming tile are a quarter of the range apart, as in qt_drive), a chunk per chunk, as
     * fast as we read ours: the hardware prefetcher alone left a core at 20 of the 35 GB/s
     * the float kernel streams on AMD Zen 5 (bench_qact, T = 1). */
    const size_t chunk_bytes = q8 ? PLUME_QACT_CHUNK : PLUME_QACT_CHUNK / 2;
    const char *next = (const char *)a->w->data + (size_t)(r + 1) * a->row_bytes;
    for (int32_t k = a->k0; k < end; k++) {
        if (a->stream) {
            UNROLL
            for (int i = 0; i < R; i++)
                UNROLL
                for (int l = 0; l < (int)(chunk_bytes / 64); l++)
                    _mm_prefetch(next + (size_t)i * a->rstride * a->row_bytes + (size_t)k * chunk_bytes + 64 * (size_t)l,
                                 PLUME_PREFETCH_STREAM);
        }
        tile_chunk(a, r, t0, R, TT, q8, 0, k, acc);
    }
    if (a->k1 == a->nchunks && a->nfull < a->nchunks) tile_chunk(a, r, t0, R, TT, q8, 1, a->nfull, acc);
    if (a->k1 < a->nchunks) {
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
            for (int t = 0; t < TT; t++) part[i * TOKENS_MAX + t] = acc[i][t];
        return;
    }
    /* lane 4t + i of sum: row r + i, token t0 + t; rows past R and tokens past TT are zeros
     * that no stored lane depends on */
    const __m512 z = _mm512_setzero_ps();
    __m512 s[TOKENS_MAX];
    UNROLL
    for (int t = 0; t < TOKENS_MAX; t++)
        s[t] = t >= TT ? z : hsum4_ps(acc[0][t], R > 1 ? acc[1][t] : z, R > 2 ? acc[2][t] : z, R > 3 ? acc[3][t] : z);
    __m512 sum = lanes_sum_ps(s[0], s[1], s[2], s[3]);
    if (q8) {
        const uint16_t *sc = a->w->scale;
        const int32_t rs = a->rstride;
        __m128 f4 = R == ROWS ? _mm_cvtph_ps(_mm_setr_epi16((short)sc[r], (short)sc[r + rs], (short)sc[r + 2 * rs],
                                                            (short)sc[r + 3 * rs], 0, 0, 0, 0))
                              : _mm_set1_ps(plume_f16_to_f32(sc[r]));
        sum = _mm512_mul_ps(sum, _mm512_broadcast_f32x4(_mm_div_ps(f4, _mm_set1_ps(127.0f))));
    }
    float out[16];
    _mm512_storeu_ps(out, sum);
    UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
        for (int i = 0; i < R; i++) a->y[(int64_t)(t0 + t) * a->ldy + r + i * a->rstride] = out[4 * t + i];
}

typedef void (*tile_fn)(const qa_args *a, int32_t r, int32_t t0, int R, int TT);

/* A tile function NAME(a, r, t0, R, TT) calling BODY(a, r, t0, R, TT, Q8) with R (WIDE or 1)
 * and TT (1..4) turned into constants: the shapes qa_drive (rows) and qt_drive (groups) use. */
#define TILE_SHAPES_CASES(BODY, a, r, t0, WIDE, Q8)                                               \
    case WIDE * 8 + 1: BODY(a, r, t0, WIDE, 1, Q8); break;                                        \
    case WIDE * 8 + 2: BODY(a, r, t0, WIDE, 2, Q8); break;                                        \
    case WIDE * 8 + 3: BODY(a, r, t0, WIDE, 3, Q8); break;                                        \
    case WIDE * 8 + 4: BODY(a, r, t0, WIDE, 4, Q8); break;                                        \
    case 1 * 8 + 1: BODY(a, r, t0, 1, 1, Q8); break;                                              \
    case 1 * 8 + 2: BODY(a, r, t0, 1, 2, Q8); break;                                              \
    case 1 * 8 + 3: BODY(a, r, t0, 1, 3, Q8); break;                                              \
    case 1 * 8 + 4: BODY(a, r, t0, 1, 4, Q8); break;
#define TILE_SHAPES(NAME, ARGS, BODY, WIDE, Q8)                                                   \
    static void NAME(const ARGS *a, int32_t r, int32_t t0, int R, int TT) {                      \
        switch (R * 8 + TT) {                                                                     \
            TILE_SHAPES_CASES(BODY, a, r, t0, WIDE, Q8)                                           \
        default: break;                                                                           \
        }                                                                                         \
    }
TILE_SHAPES(tile_q8, qa_args, tile_body, ROWS, 1)
TILE_SHAPES(tile_q4, qa_args, tile_body, ROWS, 0)

/* ---- matmul ----------------------------------------------------------------------------- */

/* Whether streaming tiles (both layouts) of a weight of type `type` prefetch their rows
 * ahead: on Intel, where the tiles were measured at 91-98% of the bandwidth limit with it (q8,
 * Xeon, 2 threads); on AMD for q4 only. There the hardware prefetcher keeps up with q8's
 * far-apart spans alone and the prefetches only cost (EPYC, q8 decode, 2 threads, 5
 * interleaved rounds: 22.3 tok/s with, 25.0 without), but q4's tiles, which take a line in
 * twice the time (twice the weights a byte), stall without them (EPYC, loaded host,
 * e2b q4 decode, 3 interleaved rounds: 2 threads 1.11x with, per round 0.97-2.47, q8 0.53x;
 * one thread 14.1-15.2 tok/s with, 9.1-11.7 without). PLUME_PREFETCH=0 or 1 overrides (both
 * types), to measure both on a new CPU. */
static int qt_prefetch(int32_t type) {
    static _Atomic int cached = -1; /* 0 off, 1 on, 2 q4 only */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv("PLUME_PREFETCH");
        unsigned a = 0, vendor[3] = {0};
        __get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1]); /* EBX, EDX, ECX: the vendor string */
        v = env && (*env == '0' || *env == '1') ? *env == '1' : memcmp(vendor, "AuthenticAMD", 12) ? 1 : 2;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v == 1 || (v == 2 && type == PLUME_W_Q4);
}

/* Cover rows [r0, r1) x tokens [0, T) with tiles. Up to STREAM_BLOCKS token blocks (decode,
 * speculative steps and batches of up to PLUME_QACT_STREAM_TOKENS tokens): tiles of 4 rows a
 * quarter of the range apart (4 streams from memory, see qt_body), streamed once, whole rows,
 * each tile's rows met by every token block in turn (the later ones from cache). More: panels of rows (about PANEL_BYTES of weights)
 * crossed with balanced blocks of at most TOKENS_MAX tokens and blocks of columns, so a panel
 * is read from memory once and from L2 by each token block; meanwhile the next panel is
 * fetched into L2, a slice after each tile, so that the first token block does not wait on
 * memory. Which rows share a tile never changes a result (tile_body). */
static void qa_drive(tile_fn tile, qa_args *a, int32_t T, int32_t r0, int32_t r1) {
    const int32_t blocks = (T + TOKENS_MAX - 1) / TOKENS_MAX;
    const int32_t kblock = blocks > 1 && a->w->cols > KBLOCK_MAX ? KBLOCK / PLUME_QACT_CHUNK : a->nchunks;
    if (blocks <= STREAM_BLOCKS) {
        int32_t t0[STREAM_BLOCKS + 1] = {0};
        for (int32_t b = 0; b < blocks; b++) t0[b + 1] = t0[b] + block_tokens(T, t0[b], blocks, b);
        const int stream = qt_prefetch(a->w->type);
        a->p0 = r0;
        a->k0 = 0;
        a->k1 = a->nchunks;
        const int32_t q = (r1 - r0) / ROWS; /* tile k: rows r0 + k + i q, i < ROWS */
        for (int32_t k = 0; k < q + (r1 - r0) % ROWS; k++) {
            a->rstride = k < q ? q : 1;
            for (int32_t b = 0; b < blocks; b++) {
                a->stream = stream && b == 0; /* the later blocks find the lines in cache */
                tile(a, k < q ? r0 + k : r0 + q * ROWS + (k - q), t0[b], k < q ? ROWS : 1, t0[b + 1] - t0[b]);
            }
        }
        a->rstride = 1;
        return;
    }
    a->rstride = 1;
    size_t fit = PANEL_BYTES / a->row_bytes;
    int32_t panel = fit < ROWS ? ROWS : fit > PANEL_ROWS_MAX ? PANEL_ROWS_MAX : (int32_t)fit;
    panel -= panel % ROWS;
    for (int32_t p0 = r0; p0 < r1; p0 += panel) {
        const int32_t p1 = r1 - p0 < panel ? r1 : p0 + panel;
        const int32_t n1 = r1 - p1 < panel ? r1 : p1 + panel; /* the next panel: p1..n1 */
        const char *next = (const char *)a->w->data + (size_t)p1 * a->row_bytes;
        const size_t next_bytes = (size_t)(n1 - p1) * a->row_bytes;
        const int32_t kblocks = (a->nchunks + kblock - 1) / kblock;
        const int32_t tiles = blocks * kblocks * ((p1 - p0) / ROWS + (p1 - p0) % ROWS);
        const size_t slice = (next_bytes / (size_t)tiles + 63) & ~(size_t)63;
        size_t fetched = 0;
        a->p0 = p0;
        for (int32_t b = 0, t0 = 0; b < blocks; b++) {
            const int tt = block_tokens(T, t0, blocks, b);
            for (a->k0 = 0; a->k0 < a->nchunks; a->k0 += kblock) {
                a->k1 = a->nchunks - a->k0 < kblock ? a->nchunks : a->k0 + kblock;
                for (int32_t r = p0; r < p1;) {
                    int R = p1 - r >= ROWS ? ROWS : 1;
                    tile(a, r, t0, R, tt);
                    r += R;
                    for (size_t e = fetched + slice; fetched < e && fetched < next_bytes; fetched += 64)
                        _mm_prefetch(next + fetched, _MM_HINT_T1);
                }
            }
            t0 += tt;
        }
    }
}

/* ---- the tiles layout ------------------------------------------------------------------- */

/* A weight in PLUME_L_TILES (kernels.h) puts 16 rows' columns c..c+3 side by side in a 64-byte
 * line, one int32 lane per row. Per block of 32 columns, for a group of 16 rows and a token:
 *
 *   s = cor_b;  s += line_j . broadcast(x dword j), j = 0..7     (8 vpdpbusd, exact)
 *   acc += xs_b * (float(s) - 12582912)                          (Q8; Q4: (d xs_b) * dot)
 *
 * cor_b = MAGIC - 128 x (the block's sum of xq): the four xcor lanes of the block summed (Q8,
 * lines flipped to q + 128); Q4 lines enter as their nibbles q + 8 (one and, or a shift and an
 * and), so cor_b = MAGIC - 8 x the sum there, and s - MAGIC is the dot without the FMA that
 * scaled a 16 (q + 8) sum back. One lane per row: no horizontal sum, and the float sum runs
 * over blocks in order with a multiply then an add, exactly as plume_qact_matmul_ref does: the
 * same bits as the reference. 3 float operations per 8 vpdpbusd, where the rows layout needs
 * 2 per 2. Small tiles (4 sums or fewer: decode) keep two chains of 4 vpdpbusd a sum instead of
 * one of 8 (the latency of a chain, 4 cycles a step on Zen 4, bounded a 2-group q8 tile), added
 * at the end: the int32 sums wrap the same in any order.
 *
 * A tile is 2 groups (32 rows) x up to 4 tokens: 8 int32 sums and 8 float accumulators in
 * registers, each weight line met by every token of the tile. More tokens than a tile holds
 * walk panels of adjacent groups, each re-read from L2 by every block of tokens, the next
 * panel fetched meanwhile, as qa_drive does. One token block (decode) streams the groups
 * once, and there one core needs several streams from memory at once: reading one group at a
 * time, a Zen 5 core got 15 GB/s out of the page cache, two adjacent groups 22, two, four and
 * eight far-apart spans 28, 35 and 33 (the plain read loop of `plume bench`'s probe: 33-36).
 * So a streaming tile takes its groups from far-apart spans of the call's range: 4 for q4
 * (one or two tokens), 2 for q8 and from 3 tokens up (whole-model q8 decode, 2 threads:
 * 2 adjacent groups 18.5-19.4 tok/s, 4 far apart 18.0-19.3, 2 far apart 20.9-23.3), each
 * prefetched QT_AHEAD blocks ahead where that helps (qt_prefetch): past a group's end that is
 * the next group of its span, the next tile's. */

enum {
    TG = 2,        /* groups of 16 rows per tile */
    TG_DECODE = 4, /* per streaming q4 tile of one or two tokens (below) */
    QT_AHEAD = 4   /* blocks a streaming tile prefetches ahead in each of its groups */
};

/* What every tile of one matmul call over a tiled weight shares. */
typedef struct {
    float *y;
    int64_t ldy;
    const int8_t *xq;
    const float *xs;
    int64_t stride;
    int32_t groups;       /* entries of a token row of xs */
    const plume_weight *w;
    int32_t nb;           /* blocks of 32 columns */
    size_t group_bytes;   /* bytes of a group of 16 rows */
    int32_t r0, r1;       /* rows to store */
    int32_t gstride;      /* group i of a tile is group g + i gstride */
    const int32_t *cor;   /* [TOKENS_MAX, nb]: cor_b of the tile's tokens */
    int stream;           /* one token block, and prefetching helps (qt_prefetch): prefetch ahead */
} qt_args;

/* Byte of xq's token row that starts dword j (columns 4j..4j+3) of block b (qact.h layout). */
static inline __attribute__((always_inline)) int64_t qt_xpos(int32_t b, int j) {
    return (int64_t)(b / 4) * PLUME_QACT_CHUNK + 64 * (j / 4) + 16 * (b % 4) + 4 * (j % 4);
}

/* Y for the 16 G rows of groups g..g+G-1 x tokens t0..t0+TT-1; G, TT and q8 constants once
 * inlined. Rows outside [r0, r1) are computed but not stored. */
static inline __attribute__((always_inline)) void qt_body(const qt_args *a, int32_t g, int32_t t0, const int G,
                                                          const int TT, const int q8) {
    const uint8_t *wg = (const uint8_t *)a->w->data + (size_t)g * a->group_bytes;
    const size_t gsb = (size_t)a->gstride * a->group_bytes; /* from a tile's group to the next */
    const size_t bb = q8 ? 512 : 256;                          /* bytes of a block of a group */
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 acc[TG_DECODE][TOKENS_MAX];
    UNROLL
    for (int i = 0; i < G; i++)
        UNROLL
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    for (int32_t b = 0; b < a->nb; b++) {
        if (a->stream) { /* past a group's end: the next group (past the weight's end: harmless) */
            UNROLL
            for (int l = 0; l < (int)(G * bb / 64); l++)
                _mm_prefetch((const char *)wg + (size_t)(l / (int)(bb / 64)) * gsb + (size_t)(b + QT_AHEAD) * bb +
                                 64 * (size_t)(l % (int)(bb / 64)),
                             PLUME_PREFETCH_STREAM);
        }
        /* s (and s2, for small tiles: two chains of 4 vpdpbusd instead of one of 8, added at the
         * end, the same int32 since the sums wrap, never saturate) = cor_b + the block's dot */
        const int split = G * TT <= 4;
        __m512i s[TG_DECODE][TOKENS_MAX], s2[TG_DECODE][TOKENS_MAX];
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m512i c = _mm512_set1_epi32(a->cor[t * a->nb + b]);
            UNROLL
            for (int i = 0; i < G; i++) {
                s[i][t] = c;
                s2[i][t] = _mm512_setzero_si512();
            }
        }
        if (q8) {
            const __m512i flip = _mm512_set1_epi8(-128);
            UNROLL
            for (int j = 0; j < 8; j++) {
                __m512i wv[TG_DECODE];
                UNROLL
                for (int i = 0; i < G; i++)
                    wv[i] = _mm512_xor_si512(_mm512_loadu_si512(wg + (size_t)i * gsb + (size_t)b * bb + 64 * j), flip);
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const __m512i x = _mm512_set1_epi32(*(const int32_t *)(a->xq + (int64_t)(t0 + t) * a->stride + qt_xpos(b, j)));
                    UNROLL
                    for (int i = 0; i < G; i++) {
                        if (split && (j & 1)) s2[i][t] = _mm512_dpbusd_epi32(s2[i][t], wv[i], x);
                        else s[i][t] = _mm512_dpbusd_epi32(s[i][t], wv[i], x);
                    }
                }
            }
        } else {
            const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8((char)0xf0);
            UNROLL
            for (int j = 0; j < 4; j++) {
                /* q + 8 of dword j; of dword j + 4 too, or in split tiles 16 (q + 8) (one
                 * operation less a line; that chain's sum is a multiple of 16, shifted back) */
                __m512i lo[TG_DECODE], hi[TG_DECODE];
                UNROLL
                for (int i = 0; i < G; i++) {
                    const __m512i v = _mm512_loadu_si512(wg + (size_t)i * gsb + (size_t)b * bb + 64 * j);
                    lo[i] = _mm512_and_si512(v, low4);
                    hi[i] = split ? _mm512_and_si512(v, high4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                }
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const int8_t *xr = a->xq + (int64_t)(t0 + t) * a->stride;
                    const __m512i x0 = _mm512_set1_epi32(*(const int32_t *)(xr + qt_xpos(b, j)));
                    const __m512i x1 = _mm512_set1_epi32(*(const int32_t *)(xr + qt_xpos(b, j + 4)));
                    UNROLL
                    for (int i = 0; i < G; i++) {
                        s[i][t] = _mm512_dpbusd_epi32(s[i][t], lo[i], x0);
                        if (split) s2[i][t] = _mm512_dpbusd_epi32(s2[i][t], hi[i], x1);
                        else s[i][t] = _mm512_dpbusd_epi32(s[i][t], hi[i], x1);
                    }
                }
            }
        }
        if (split) {
            UNROLL
            for (int t = 0; t < TT; t++)
                UNROLL
                for (int i = 0; i < G; i++) s[i][t] = _mm512_add_epi32(s[i][t], q8 ? s2[i][t] : _mm512_srai_epi32(s2[i][t], 4));
        }
        /* the block's float step, as the reference: acc += f * dot, f = xs (Q8) or d xs (Q4) */
        __m512 d[TG_DECODE];
        UNROLL
        for (int i = 0; i < G; i++)
            d[i] = q8 ? magic
                      : _mm512_cvtph_ps(_mm256_loadu_si256(
                            (const __m256i *)(a->w->scale + ((size_t)(g + i * a->gstride) * a->nb + b) * PLUME_TILE_ROWS)));
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m512 xs = _mm512_set1_ps(a->xs[(int64_t)(t0 + t) * a->groups + b]);
            UNROLL
            for (int i = 0; i < G; i++) {
                /* s - MAGIC = dot exactly (Q4: cor_b made for nibbles q + 8, qt_cor) */
                const __m512 dot = _mm512_sub_ps(_mm512_castsi512_ps(s[i][t]), magic);
                const __m512 f = q8 ? xs : _mm512_mul_ps(d[i], xs);
                acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(f, dot));
            }
        }
    }
    UNROLL
    for (int i = 0; i < G; i++) {
        const int32_t r = (g + i * a->gstride) * PLUME_TILE_ROWS;
        __mmask16 keep = 0xffff;
        if (r < a->r0) keep &= (__mmask16)(0xffffu << (a->r0 - r));
        if (r + PLUME_TILE_ROWS > a->r1) keep &= (__mmask16)(0xffffu >> (r + PLUME_TILE_ROWS - a->r1));
        __m512 f = _mm512_set1_ps(1.0f);
        if (q8) f = _mm512_div_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a->w->scale + r))),
                                  _mm512_set1_ps(127.0f));
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m512 v = q8 ? _mm512_mul_ps(acc[i][t], f) : acc[i][t];
            _mm512_mask_storeu_ps(a->y + (int64_t)(t0 + t) * a->ldy + r, keep, v);
        }
    }
}

typedef void (*qt_fn)(const qt_args *a, int32_t g, int32_t t0, int G, int TT);

/* The shapes of qt tiles: TG groups x 1-4 tokens, TG_DECODE x 1-2, 1 x 1-4. */
#define QT_SHAPES(NAME, Q8)                                                                       \
    static void NAME(const qt_args *a, int32_t g, int32_t t0, int G, int TT) {                   \
        switch (G * 8 + TT) {                                                                     \
        case TG_DECODE * 8 + 1: qt_body(a, g, t0, TG_DECODE, 1, Q8); break;                      \
        case TG_DECODE * 8 + 2: qt_body(a, g, t0, TG_DECODE, 2, Q8); break;                      \
            TILE_SHAPES_CASES(qt_body, a, g, t0, TG, Q8)                                          \
        default: break;                                                                           \
        }                                                                                         \
    }
QT_SHAPES(qt_q8, 1)
QT_SHAPES(qt_q4, 0)

/* cor_b of tokens t0..t0+tt-1: the block's four xcor lanes summed, less 3 MAGIC (mod 2^32),
 * = MAGIC - 128 x (the block's sum of xq): the correction for u8 weights q + 128. Q4 weights
 * enter vpdpbusd as their nibbles q + 8, whose correction is MAGIC - 8 x the sum: q4 turns
 * one into the other (128 x the sum is a multiple of 16). Block g of a chunk owns 128-bit
 * lane g of the chunk's 16 lanes (qact.h): two in-lane shuffles sum it, one compress gathers
 * the four sums. */
static void qt_cor(const int32_t *xcor, int32_t lanes, int32_t t0, int tt, int32_t nb, int q4, int32_t *cor) {
    const __m512i magic3 = _mm512_set1_epi32((int32_t)(3u * PLUME_QACT_MAGIC));
    const __m512i magic = _mm512_set1_epi32(PLUME_QACT_MAGIC);
    for (int t = 0; t < tt; t++) {
        const int32_t *c = xcor + (int64_t)(t0 + t) * lanes;
        for (int32_t b = 0; b < nb; b += 4) { /* nb is a multiple of 4 or the chunk is the last */
            __m512i v = _mm512_loadu_si512(c + PLUME_QACT_LANES * (b / 4));
            v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x4E));
            v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xB1));
            v = _mm512_sub_epi32(v, magic3);
            if (q4) v = _mm512_sub_epi32(magic, _mm512_srai_epi32(_mm512_sub_epi32(magic, v), 4));
            v = _mm512_maskz_compress_epi32(0x1111, v);
            const int n = nb - b < 4 ? nb - b : 4;
            _mm_mask_storeu_epi32(cor + t * nb + b, (__mmask8)((1u << n) - 1), _mm512_castsi512_si128(v));
        }
    }
}


/* Groups g0..g1 x tokens [0, T) in tiles: up to STREAM_BLOCKS token blocks stream the groups
 * once (each tile's groups met by every block in turn, the later ones from cache: speculative
 * steps and batches read the weights once, as decode does) while their cor_b fit the buffer
 * (one block always; 4 blocks up to 16384 columns); more walk panels of groups crossed with
 * balanced token blocks, the next panel fetched meanwhile. */
static void qt_drive(qt_fn tile, qt_args *a, const int32_t *xcor, int32_t lanes, int32_t T, int32_t g0, int32_t g1) {
    int32_t cor[TOKENS_MAX * (PLUME_QACT_COLS_MAX / PLUME_QACT_GROUP)];
    a->cor = cor;
    const int32_t blocks = (T + TOKENS_MAX - 1) / TOKENS_MAX, per = TOKENS_MAX * a->nb;
    if (blocks <= STREAM_BLOCKS && (size_t)(blocks * per) <= sizeof cor / sizeof *cor) {
        int32_t t0[STREAM_BLOCKS + 1] = {0};
        for (int32_t b = 0; b < blocks; b++) {
            t0[b + 1] = t0[b] + block_tokens(T, t0[b], blocks, b);
            qt_cor(xcor, lanes, t0[b], t0[b + 1] - t0[b], a->nb, a->w->type == PLUME_W_Q4, cor + b * per);
        }
        const int stream = qt_prefetch(a->w->type);
        const int G = T <= 2 && a->w->type == PLUME_W_Q4 ? TG_DECODE : TG;
        const int32_t q = (g1 - g0) / G; /* tile k: groups g0 + k + i q, i < G */
        for (int32_t k = 0; k < q + (g1 - g0) % G; k++) {
            const int32_t g = k < q ? g0 + k : g0 + q * G + (k - q), n = k < q ? G : 1;
            a->gstride = k < q ? q : 1;
            for (int32_t b = 0; b < blocks; b++) {
                a->cor = cor + b * per;
                a->stream = stream && b == 0; /* the later blocks find the lines in cache */
                tile(a, g, t0[b], n, t0[b + 1] - t0[b]);
            }
        }
        a->gstride = 1;
        return;
    }
    a->stream = 0;
    a->gstride = 1;
    size_t fit = PANEL_BYTES / a->group_bytes;
    int32_t panel = fit < TG ? TG : (int32_t)fit;
    panel -= panel % TG;
    for (int32_t p0 = g0; p0 < g1; p0 += panel) {
        const int32_t p1 = g1 - p0 < panel ? g1 : p0 + panel;
        const int32_t n1 = g1 - p1 < panel ? g1 : p1 + panel; /* the next panel: p1..n1 */
        const char *next = (const char *)a->w->data + (size_t)p1 * a->group_bytes;
        const size_t next_bytes = (size_t)(n1 - p1) * a->group_bytes;
        const int32_t tiles = blocks * ((p1 - p0) / TG + (p1 - p0) % TG);
        const size_t slice = (next_bytes / (size_t)tiles + 63) & ~(size_t)63;
        size_t fetched = 0;
        for (int32_t b = 0, t0 = 0; b < blocks; b++) {
            const int tt = block_tokens(T, t0, blocks, b);
            qt_cor(xcor, lanes, t0, tt, a->nb, a->w->type == PLUME_W_Q4, cor);
            for (int32_t g = p0; g < p1;) {
                const int G = p1 - g >= TG ? TG : 1;
                tile(a, g, t0, G, tt);
                g += G;
                for (size_t e = fetched + slice; fetched < e && fetched < next_bytes; fetched += 64)
                    _mm_prefetch(next + fetched, _MM_HINT_T1);
            }
            t0 += tt;
        }
    }
}

/* A tiled weight: the groups that rows [r0, r1) touch. */
static void qt_matmul(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor, int32_t T,
                      const plume_weight *w, int32_t r0, int32_t r1) {
    const int q8 = w->type == PLUME_W_Q8;
    qt_args a = {.y = y, .ldy = ldy, .xq = xq, .xs = xs, .stride = plume_qact_stride(w->cols),
                 .groups = plume_qact_groups(w->cols), .w = w, .nb = w->cols / PLUME_QACT_GROUP,
                 .group_bytes = (size_t)PLUME_TILE_ROWS * (q8 ? (size_t)w->cols : (size_t)w->cols / 2),
                 .r0 = r0, .r1 = r1};
    qt_drive(q8 ? qt_q8 : qt_q4, &a, xcor, plume_qact_lanes(w->cols), T, r0 / PLUME_TILE_ROWS,
             (r1 + PLUME_TILE_ROWS - 1) / PLUME_TILE_ROWS);
}

/* Check the weight, gather the call's shared state, run the tiles. */
void plume_qact_matmul_vnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1) {
    if (T <= 0 || r1 <= r0 || !plume_qact_supported(w)) return;
    if (w->layout == PLUME_L_TILES) {
        /* AMX where the CPU and kernel allow it: the same bits (both are the reference's) */
        if (T >= PLUME_AMX_MIN_T && plume_qact_amx_available() &&
            plume_qact_matmul_amx(y, ldy, xq, xs, xcor, T, w, r0, r1) == 0)
            return;
        qt_matmul(y, ldy, xq, xs, xcor, T, w, r0, r1);
        return;
    }
    int q8 = w->type == PLUME_W_Q8;
    qa_part part;
    qa_args a = {.y = y, .ldy = ldy, .xq = xq, .xs = xs, .xcor = xcor,
                 .stride = plume_qact_stride(w->cols), .groups = plume_qact_groups(w->cols),
                 .lanes = plume_qact_lanes(w->cols), .w = w,
                 .row_bytes = q8 ? (size_t)w->cols : (size_t)w->cols / 2,
                 .nfull = w->cols / PLUME_QACT_CHUNK,
                 .nchunks = (int32_t)(plume_qact_stride(w->cols) / PLUME_QACT_CHUNK), .part = &part};
    qa_drive(q8 ? tile_q8 : tile_q4, &a, T, r0, r1);
}

/* ---- quantize --------------------------------------------------------------------------- */

/* qact.c's quantizer a block of 32 at a time: same products, same rounding (the MXCSR
 * default, nearest-even, made explicit), so the same bytes; xcor by vpdpbusd with 128s. */
void plume_qact_quantize_vnni(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xcor) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols), lanes = plume_qact_lanes(cols);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127), k128 = _mm512_set1_epi8(-128);
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        int8_t *q = xq + t * stride;
        float *s = xs + (int64_t)t * groups;
        for (int32_t b = 0; b < groups; b++) {
            const int32_t c = b * PLUME_QACT_GROUP, n = cols - c;
            int8_t *qb = q + (c - c % PLUME_QACT_CHUNK) + 16 * (b % 4);
            if (n <= 0) { /* padding block */
                s[b] = 0.0f;
                memset(qb, 0, 16);
                memset(qb + 64, 0, 16);
                continue;
            }
            __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
            __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
            __m512 v0 = _mm512_maskz_loadu_ps(m0, xr + c), v1 = _mm512_maskz_loadu_ps(m1, xr + c + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            if (!(amax >= PLUME_QACT_TINY)) {
                s[b] = 0.0f;
                memset(qb, 0, 16);
                memset(qb + 64, 0, 16);
                continue;
            }
            const __m512 inv = _mm512_set1_ps(127.0f / amax);
            s[b] = amax / 127.0f;
            __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512i i1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(_mm512_max_epi32(_mm512_min_epi32(i0, hi), lo)));
            _mm_storeu_si128((__m128i *)(qb + 64), _mm512_cvtepi32_epi8(_mm512_max_epi32(_mm512_min_epi32(i1, hi), lo)));
        }
        int32_t *cor = xcor + (int64_t)t * lanes;
        for (int64_t k = 0; k < stride / PLUME_QACT_CHUNK; k++) {
            const int8_t *qc = q + k * PLUME_QACT_CHUNK;
            __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, _mm512_loadu_si512(qc));
            v = _mm512_dpbusd_epi32(v, k128, _mm512_loadu_si512(qc + 64));
            _mm512_storeu_si512(cor + k * PLUME_QACT_LANES, _mm512_sub_epi32(_mm512_set1_epi32(PLUME_QACT_MAGIC), v));
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
