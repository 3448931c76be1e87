/* avx2_qact.h -- the body of the int8-activation matmul of qact.h on 256-bit vectors, included
 * twice: by avx2_qact.c (QA2_VNNI 0: AVX2 vpmaddubsw + vpmaddwd) and by avxvnni.c (QA2_VNNI 1:
 * AVX-VNNI vpdpbusd on ymm, compiled with -mavxvnni). QA2_FN(name) names the file's copy.
 *
 * A ymm holds half a chunk's 16 int32 lanes (qact.h): lanes 0-7 are groups 0 and 1 of the
 * chunk (xq bytes 0-31 and 64-95), lanes 8-15 groups 2 and 3 (bytes 32-63 and 96-127). Both
 * variants end a chunk on the same exact int32 lane sums, so on the same floats:
 *   Q8  VNNI: vpdpbusd of q + 128 from xcor; AVX2: vpmaddubsw(|q|, sign(x, q)) (|q| <= 128, so
 *       two products stay below 2^15) + vpmaddwd by 1, no correction needed: s = dot;
 *   Q4  nibbles q + 8 (u8 0..15) against x from (xcor - MAGIC) / 16 (= -8 x the lane's sum
 *       of x): s = dot.
 * then acc = fma(float(s), f, acc), f = xs (Q8) or d xs (Q4) of the lane's block, per lane,
 * chunk after chunk; at the end each (row, token) reduces its two accumulators by one fixed
 * tree whatever the tile, so a row's output does not depend on T, the batch or the row split.
 *
 * Tiles: 4 rows x 1 token (decode) or 2 rows x 2 tokens (prefill, panels of rows re-read from
 * L2 per pair of tokens): 8 accumulators of the 16 ymm. Weights are read as 16-byte pieces put
 * in xq's order (Q8) or unpacked within 128-bit lanes (Q4); a last partial chunk (never in
 * Gemma 4) goes through a zero-padded copy of the row's tail.
 */
#include <immintrin.h>
#include <string.h>

#include "../common.h"
#include "kernels.h"
#include "qact.h"

#if defined(__clang__)
#define QA2_UNROLL _Pragma("clang loop unroll(full)")
#else
#define QA2_UNROLL _Pragma("GCC unroll 8")
#endif

enum {
    QA2_ROWS_DECODE = 4, /* rows per tile at T = 1 */
    QA2_ROWS = 2,        /* rows x tokens per tile when T > 1 */
    QA2_TOKENS = 2,
    QA2_PANEL_BYTES = 128 << 10 /* weights of a row panel, re-read from L2 by each token pair */
};

/* What every tile of one matmul call shares. */
typedef struct {
    float *y;              /* Y[t*ldy + r] */
    int64_t ldy;
    const int8_t *xq;      /* [T, stride], chunk layout */
    const float *xs;       /* [T, groups] */
    const int32_t *xcor;   /* [T, lanes] */
    int64_t stride;
    int32_t groups, lanes;
    const plume_weight *w;
    size_t row_bytes;      /* bytes of one row of w->data */
    int32_t nfull;         /* whole chunks of a row */
    int32_t nchunks;       /* chunks of the padded row */
    int stream;            /* T = 1: the weights stream from memory once */
} QA2_FN(args);

/* 16 bytes at p and 16 at q as one ymm (p low). */
static inline __attribute__((always_inline)) __m256i QA2_FN(load2x16)(const void *p, const void *q) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                   _mm_loadu_si128((const __m128i *)q), 1);
}

/* Lanes 0-3 = a, 4-7 = b. */
static inline __attribute__((always_inline)) __m256 QA2_FN(pair)(float a, float b) {
    return _mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a));
}

/* The exact int32 lanes of one half chunk (wa against xa, wb against xb) from cor. */
static inline __attribute__((always_inline)) __m256i QA2_FN(dot_half)(int q8, __m256i wa, __m256i wb, __m256i xa,
                                                                      __m256i xb, __m256i cor) {
#if QA2_VNNI
    (void)q8;
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(cor, wa, xa), wb, xb);
#else
    const __m256i one16 = _mm256_set1_epi16(1);
    if (q8) { /* wa, wb signed here */
        __m256i pa = _mm256_maddubs_epi16(_mm256_abs_epi8(wa), _mm256_sign_epi8(xa, wa));
        __m256i pb = _mm256_maddubs_epi16(_mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb));
        (void)cor;
        return _mm256_add_epi32(_mm256_madd_epi16(pa, one16), _mm256_madd_epi16(pb, one16));
    }
    __m256i pa = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xa), one16);
    __m256i pb = _mm256_madd_epi16(_mm256_maddubs_epi16(wb, xb), one16);
    return _mm256_add_epi32(_mm256_add_epi32(pa, pb), cor);
#endif
}

/* Y for rows r..r+R-1 x tokens t0..t0+TT-1, all chunks. R, TT and q8 are constants once
 * inlined, so acc lives in registers. */
static inline __attribute__((always_inline)) void QA2_FN(tile_body)(const QA2_FN(args) * a, int32_t r, int32_t t0,
                                                                    const int R, const int TT, const int q8) {
    const plume_weight *w = a->w;
    const int32_t ng = w->cols / PLUME_QACT_GROUP;
    __m256 acc[QA2_ROWS_DECODE][QA2_TOKENS][2];
    QA2_UNROLL
    for (int i = 0; i < R; i++)
        QA2_UNROLL
        for (int t = 0; t < TT; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
    uint8_t tailbuf[QA2_ROWS_DECODE][PLUME_QACT_CHUNK]; /* a last partial chunk, zero padded */
    uint16_t tailsc[QA2_ROWS_DECODE][4];
    /* Streaming (decode): fetch the next tile's rows, contiguous after ours, a chunk's share
     * per chunk, as the float kernels do (avx512_vnni.c says what it was worth) */
    const size_t chunk_bytes = q8 ? PLUME_QACT_CHUNK : PLUME_QACT_CHUNK / 2;
    const char *next = (const char *)w->data + (size_t)(r + R) * a->row_bytes;
    for (int32_t k = 0; k < a->nchunks; k++) {
        const int64_t c = (int64_t)k * PLUME_QACT_CHUNK;
        if (a->stream) {
            QA2_UNROLL
            for (int l = 0; l < (int)(R * chunk_bytes / 64); l++)
                _mm_prefetch(next + (size_t)k * R * chunk_bytes + 64 * (size_t)l, PLUME_PREFETCH_STREAM);
        }
        const uint8_t *wr[QA2_ROWS_DECODE];
        const uint16_t *sr[QA2_ROWS_DECODE];
        QA2_UNROLL
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
        QA2_UNROLL
        for (int h = 0; h < 2; h++) { /* groups 2h, 2h + 1 of the chunk */
            __m256 f[QA2_TOKENS];
            QA2_UNROLL
            for (int t = 0; t < TT; t++) {
                const float *xs = a->xs + (int64_t)(t0 + t) * a->groups + 4 * k + 2 * h;
                f[t] = QA2_FN(pair)(xs[0], xs[1]);
            }
            QA2_UNROLL
            for (int i = 0; i < R; i++) {
                __m256i wa, wb;
                __m256 d = _mm256_setzero_ps();
                if (q8) { /* columns 32g..32g+15 against xq's first half, 32g+16.. its second */
                    wa = QA2_FN(load2x16)(wr[i] + 64 * h, wr[i] + 64 * h + 32);
                    wb = QA2_FN(load2x16)(wr[i] + 64 * h + 16, wr[i] + 64 * h + 48);
#if QA2_VNNI
                    const __m256i flip = _mm256_set1_epi8(-128);
                    wa = _mm256_xor_si256(wa, flip);
                    wb = _mm256_xor_si256(wb, flip);
#endif
                } else {
                    const __m256i low4 = _mm256_set1_epi8(0x0f);
                    __m256i b = _mm256_loadu_si256((const __m256i *)(wr[i] + 32 * h));
                    __m256i lo = _mm256_and_si256(b, low4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
                    wa = _mm256_unpacklo_epi8(lo, hi); /* columns 0-15 of both groups */
                    wb = _mm256_unpackhi_epi8(lo, hi); /* columns 16-31 */
                    d = QA2_FN(pair)(plume_f16_to_f32(sr[i][2 * h]), plume_f16_to_f32(sr[i][2 * h + 1]));
                }
                QA2_UNROLL
                for (int t = 0; t < TT; t++) {
                    const int8_t *x = a->xq + (int64_t)(t0 + t) * a->stride + c + 32 * h;
                    __m256i cor = _mm256_loadu_si256((const __m256i *)(a->xcor + (int64_t)(t0 + t) * a->lanes +
                                                                       PLUME_QACT_LANES * k + 8 * h));
                    cor = _mm256_sub_epi32(cor, _mm256_set1_epi32(PLUME_QACT_MAGIC)); /* -128 x the lane's sum */
                    if (!q8) cor = _mm256_srai_epi32(cor, 4);                         /* -8 x */
                    __m256i s = QA2_FN(dot_half)(q8, wa, wb, _mm256_loadu_si256((const __m256i *)x),
                                                 _mm256_loadu_si256((const __m256i *)(x + 64)), cor);
                    acc[i][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), q8 ? f[t] : _mm256_mul_ps(d, f[t]), acc[i][t][h]);
                }
            }
        }
    }
    /* per (row, token): (acc0 + acc1), then 8 -> 4 -> 2 -> 1 lanes */
    QA2_UNROLL
    for (int i = 0; i < R; i++) {
        const float fr = q8 ? plume_f16_to_f32(w->scale[r + i]) / 127.0f : 1.0f;
        QA2_UNROLL
        for (int t = 0; t < TT; t++) {
            __m256 v = _mm256_add_ps(acc[i][t][0], acc[i][t][1]);
            __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            q = _mm_add_ps(q, _mm_movehl_ps(q, q));
            q = _mm_add_ss(q, _mm_movehdup_ps(q));
            float sum = _mm_cvtss_f32(q);
            a->y[(int64_t)(t0 + t) * a->ldy + r + i] = q8 ? sum * fr : sum;
        }
    }
}

/* The tile shapes the driver uses, R and TT turned into constants. */
static void QA2_FN(tile)(const QA2_FN(args) * a, int32_t r, int32_t t0, int R, int TT, int q8) {
    switch ((R * 4 + TT) * 2 + q8) {
    case (4 * 4 + 1) * 2 + 1: QA2_FN(tile_body)(a, r, t0, 4, 1, 1); break;
    case (4 * 4 + 1) * 2 + 0: QA2_FN(tile_body)(a, r, t0, 4, 1, 0); break;
    case (2 * 4 + 2) * 2 + 1: QA2_FN(tile_body)(a, r, t0, 2, 2, 1); break;
    case (2 * 4 + 2) * 2 + 0: QA2_FN(tile_body)(a, r, t0, 2, 2, 0); break;
    case (2 * 4 + 1) * 2 + 1: QA2_FN(tile_body)(a, r, t0, 2, 1, 1); break;
    case (2 * 4 + 1) * 2 + 0: QA2_FN(tile_body)(a, r, t0, 2, 1, 0); break;
    case (1 * 4 + 2) * 2 + 1: QA2_FN(tile_body)(a, r, t0, 1, 2, 1); break;
    case (1 * 4 + 2) * 2 + 0: QA2_FN(tile_body)(a, r, t0, 1, 2, 0); break;
    case (1 * 4 + 1) * 2 + 1: QA2_FN(tile_body)(a, r, t0, 1, 1, 1); break;
    case (1 * 4 + 1) * 2 + 0: QA2_FN(tile_body)(a, r, t0, 1, 1, 0); break;
    default: break;
    }
}

/* Check the weight, then cover rows [r0, r1) x tokens [0, T): T = 1 in runs of 4 rows; more
 * in panels of rows crossed with pairs of tokens. */
static void QA2_FN(matmul)(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor, int32_t T,
                           const plume_weight *w, int32_t r0, int32_t r1) {
    if (T <= 0 || r1 <= r0 || !plume_qact_supported(w)) return;
    const int q8 = w->type == PLUME_W_Q8;
    QA2_FN(args) a = {.y = y, .ldy = ldy, .xq = xq, .xs = xs, .xcor = xcor,
                      .stride = plume_qact_stride(w->cols), .groups = plume_qact_groups(w->cols),
                      .lanes = plume_qact_lanes(w->cols), .w = w,
                      .row_bytes = q8 ? (size_t)w->cols : (size_t)w->cols / 2,
                      .nfull = w->cols / PLUME_QACT_CHUNK,
                      .nchunks = (int32_t)(plume_qact_stride(w->cols) / PLUME_QACT_CHUNK)};
    if (T == 1) {
        a.stream = 1;
        int32_t r = r0;
        for (; r + QA2_ROWS_DECODE <= r1; r += QA2_ROWS_DECODE) QA2_FN(tile)(&a, r, 0, QA2_ROWS_DECODE, 1, q8);
        for (; r < r1; r++) QA2_FN(tile)(&a, r, 0, 1, 1, q8);
        return;
    }
    size_t fit = QA2_PANEL_BYTES / a.row_bytes;
    int32_t panel = fit < QA2_ROWS ? QA2_ROWS : fit > (1 << 20) ? (1 << 20) : (int32_t)fit;
    panel -= panel % QA2_ROWS;
    for (int32_t p0 = r0; p0 < r1; p0 += panel) {
        const int32_t p1 = r1 - p0 < panel ? r1 : p0 + panel;
        for (int32_t t0 = 0; t0 < T; t0 += QA2_TOKENS) {
            const int tt = T - t0 < QA2_TOKENS ? T - t0 : QA2_TOKENS;
            int32_t r = p0;
            for (; r + QA2_ROWS <= p1; r += QA2_ROWS) QA2_FN(tile)(&a, r, t0, QA2_ROWS, tt, q8);
            for (; r < p1; r++) QA2_FN(tile)(&a, r, t0, 1, tt, q8);
        }
    }
}
