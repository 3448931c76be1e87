/* test_qact.c -- int8 activations (kernels/qact.h): the quantizer on hand-made rows with
 * known answers, its chunk layout and its corrections; every SIMD quantizer and matmul this
 * machine runs (AVX-512 VNNI, AVX2, AVX-VNNI, NEON) against the reference (qact.c) at awkward
 * sizes, exact where the float sums are exact and within the float rounding elsewhere; the
 * determinism the forward pass relies on (a row's output is the same bits at T = 1, 5, 9 and
 * whatever the row split); and the error int8 activations add to the float32 scalar kernel on
 * realistic data, against a bound derived from the rounding. Kernels this CPU lacks print
 * SKIP. */
#include "common.h"
#include "kernels/kernels.h"
#include "kernels/qact.h"
#include "t.h"

/* With exact scales (powers of two: xs from amax = 127 * 2^k, pow2 weight scales) and sums far
 * below 2^24 units of the smallest term, every partial sum is exact and any order gives the
 * same float; 1e-6 leaves a few ulps, while one integer unit wrong is far above it. */
static const double EXACT_REL = 1e-6;

/* With fp16 scales of any value the float sums round differently: the reference adds per
 * block in order (cols / 32 steps), a vector kernel per int32 lane over chunks, then reduces
 * (at most cols / 128 + 8 steps). Each step errs by at most 2^-24 of a partial sum no larger
 * than S = sum_b |f_b| sum_(c in b) |w_c xq_c| (f the block's float factor), so the two differ
 * by less than 2 (cols / 32 + ORDER_STEPS) 2^-24 S. */
static const int ORDER_STEPS = 16;

/* A value no kernel computes, to spot writes outside [r0, r1) and in ldy padding. */
static const float SENTINEL = -1234.5f;

/* A quantizer + matmul pair under test. */
typedef struct {
    const char *name;
    plume_qact_quantize_fn quantize;
    plume_qact_matmul_fn matmul;
} qkern;

/* The SIMD kernels this CPU runs: fills ks, returns the count. */
static int kernels_here(qkern *ks) {
    int n = 0;
#if defined(__x86_64__)
    if (plume_qact_vnni_available()) ks[n++] = (qkern){"avx512-vnni", plume_qact_quantize_vnni, plume_qact_matmul_vnni};
    if (plume_qact_avx2_available()) ks[n++] = (qkern){"avx2", plume_qact_quantize_avx2, plume_qact_matmul_avx2};
    if (plume_qact_avxvnni_available())
        ks[n++] = (qkern){"avx-vnni", plume_qact_quantize_avx2, plume_qact_matmul_avxvnni};
#endif
#if defined(__aarch64__)
    ks[n++] = (qkern){"neon", plume_qact_quantize_neon, plume_qact_matmul_neon};
    if (plume_qact_neon_dot_available()) ks[n++] = (qkern){"neon-dot", plume_qact_quantize_neon, plume_qact_matmul_neon_dot};
#endif
    return n;
}

#if defined(__x86_64__)
/* The AMX kernel alone (no VNNI fallback): a failed call leaves Y on the sentinel. */
static void matmul_amx_only(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor,
                            int32_t T, const plume_weight *w, int32_t r0, int32_t r1) {
    CHECK(plume_qact_matmul_amx(y, ldy, xq, xs, xcor, T, w, r0, r1) == 0, "the AMX matmul refused a tiled weight");
}
#endif

/* Quantized activations: the caller's buffers of qact.h, sized for T rows of cols. */
typedef struct {
    int8_t *xq;
    float *xs;
    int32_t *xcor;
} qbuf;

/* Allocate a qbuf (filled with garbage so that missed padding shows); 0 or -1. */
static int qbuf_new(qbuf *b, int32_t T, int32_t cols) {
    size_t nq = (size_t)T * plume_qact_stride(cols), ns = (size_t)T * plume_qact_groups(cols);
    size_t nc = (size_t)T * plume_qact_lanes(cols);
    b->xq = malloc(nq);
    b->xs = malloc(ns * sizeof(float));
    b->xcor = malloc(nc * sizeof(int32_t));
    if (!b->xq || !b->xs || !b->xcor) return -1;
    memset(b->xq, 0x5a, nq);
    memset(b->xs, 0x5a, ns * sizeof(float));
    memset(b->xcor, 0x5a, nc * sizeof(int32_t));
    return 0;
}

/* Free a qbuf (also a half-made one). */
static void qbuf_free(qbuf *b) {
    free(b->xq);
    free(b->xs);
    free(b->xcor);
}

/* xcor of a token row straight from the columns: lane j of chunk k adds columns
 * 128k + 32(j/4) + 4(j%4) + {0..3} and the same + 16 (qact.h), times -128, plus MAGIC. */
static int32_t cor_from_cols(const int8_t *q, int32_t k, int32_t j) {
    int32_t s = 0;
    for (int m = 0; m < 4; m++) {
        int32_t c = 128 * k + 32 * (j / 4) + 4 * (j % 4) + m;
        s += q[plume_qact_pos(c)] + q[plume_qact_pos(c + 16)];
    }
    return PLUME_QACT_MAGIC - 128 * s;
}

/* ---- quantizer -------------------------------------------------------------------------- */

/* Hand-made blocks: rounding ties to even, a scale per block, clamping of -amax, zero and
 * tiny blocks, and a block past cols. */
static void test_quantize_known_rows(void) {
    enum { COLS = 104 }; /* blocks 0..2 whole, block 3 has 8 columns (96..103) */
    float x[COLS] = {0};
    /* block 0: amax 127 (inv = 1: ties visible) */
    const float b0[8] = {127.0f, -63.5f, 2.5f, -2.5f, 0.5f, 1.5f, 0.0f, -127.0f};
    /* block 1: amax 1 (inv = 127) */
    const float b1[8] = {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f / 254};
    for (int i = 0; i < 8; i++) {
        x[i] = b0[i];
        x[32 + i] = b1[i];
    }
    x[64] = 1e-35f; /* block 2: below PLUME_QACT_TINY */
    x[100] = -3.0f; /* block 3: 8 columns, amax 3 */
    const int8_t w0[8] = {127, -64, 2, -2, 0, 2, 0, -127};
    const int8_t w1[8] = {64, -127, 32, 0, 0, 0, 0, 0}; /* 63.5 -> 64, 31.75 -> 32, 0.5 -> 0 */
    qbuf b = {0};
    CHECK(qbuf_new(&b, 1, COLS) == 0, "out of memory");
    if (t_failed_now) goto done;
    plume_qact_quantize(x, COLS, 1, COLS, b.xq, b.xs, b.xcor);
    CHECK(plume_qact_stride(COLS) == 128 && plume_qact_groups(COLS) == 4 && plume_qact_lanes(COLS) == 16,
          "stride %lld groups %d lanes %d", (long long)plume_qact_stride(COLS), plume_qact_groups(COLS),
          plume_qact_lanes(COLS));
    CHECK(b.xs[0] == 1.0f && b.xs[1] == 1.0f / 127.0f && b.xs[2] == 0.0f && b.xs[3] == 3.0f / 127.0f,
          "xs %g %g %g %g", b.xs[0], b.xs[1], b.xs[2], b.xs[3]);
    for (int c = 0; c < 128; c++) {
        int want = c < 8 ? w0[c] : c >= 32 && c < 40 ? w1[c - 32] : c == 100 ? -127 : 0;
        CHECK(b.xq[plume_qact_pos(c)] == want, "col %d: %d, want %d", c, b.xq[plume_qact_pos(c)], want);
    }
    for (int j = 0; j < 16; j++)
        CHECK(b.xcor[j] == cor_from_cols(b.xq, 0, j), "xcor lane %d: %d, want %d", j, b.xcor[j], cor_from_cols(b.xq, 0, j));
    CHECK(b.xcor[0] == PLUME_QACT_MAGIC - 128 * (127 - 64 + 2 - 2), "xcor lane 0: %d", b.xcor[0]);
done:
    qbuf_free(&b);
}

/* The chunk layout: column c at plume_qact_pos(c), by hand for a few, and a 300-column row
 * (two chunks and part of a third) whose integer values quantize to themselves (each block
 * holds a 127 or -127). */
static void test_quantize_layout(void) {
    enum { COLS = 300, LDX = 311, T = 2 };
    CHECK(plume_qact_pos(0) == 0 && plume_qact_pos(15) == 15 && plume_qact_pos(16) == 64 &&
              plume_qact_pos(32) == 16 && plume_qact_pos(48) == 80 && plume_qact_pos(100) == 52 &&
              plume_qact_pos(127) == 127 && plume_qact_pos(128) == 128 && plume_qact_pos(144) == 192,
          "plume_qact_pos disagrees with the drawing in qact.h");
    float *x = malloc(sizeof(float) * LDX * T);
    qbuf b = {0};
    CHECK(x && qbuf_new(&b, T, COLS) == 0, "out of memory");
    if (t_failed_now) goto done;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < LDX; c++)
            x[t * LDX + c] = c >= COLS ? 1e9f : c % 32 == 5 ? (c % 64 ? 127.0f : -127.0f) : (float)((c + 7 * t) % 255 - 127);
    plume_qact_quantize(x, LDX, T, COLS, b.xq, b.xs, b.xcor);
    const int64_t stride = plume_qact_stride(COLS);
    const int32_t groups = plume_qact_groups(COLS), lanes = plume_qact_lanes(COLS);
    CHECK(stride == 384 && groups == 12 && lanes == 48, "stride %lld groups %d lanes %d", (long long)stride, groups, lanes);
    for (int t = 0; t < T; t++) {
        const int8_t *q = b.xq + t * stride;
        int seen[384] = {0};
        for (int g = 0; g < groups; g++)
            CHECK(b.xs[t * groups + g] == (g * 32 < COLS ? 1.0f : 0.0f), "row %d block %d: xs %g", t, g, b.xs[t * groups + g]);
        for (int c = 0; c < COLS; c++) {
            int64_t p = plume_qact_pos(c);
            int v = (int)x[t * LDX + c];
            CHECK(p >= 0 && p < stride && !seen[p], "col %d: position %lld reused", c, (long long)p);
            if (t_failed_now) goto done;
            seen[p] = 1;
            CHECK(q[p] == v, "row %d col %d: %d at byte %lld, want %d", t, c, q[p], (long long)p, v);
        }
        for (int p = 0; p < stride; p++) CHECK(seen[p] || q[p] == 0, "row %d: padding byte %d", t, p);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 16; j++)
                CHECK(b.xcor[t * lanes + 16 * k + j] == cor_from_cols(q, k, j), "row %d chunk %d lane %d: xcor %d, want %d",
                      t, k, j, b.xcor[t * lanes + 16 * k + j], cor_from_cols(q, k, j));
    }
done:
    free(x);
    qbuf_free(&b);
}

/* Every SIMD quantizer writes the same bytes as the reference at sizes with vector tails, on
 * values with many exact ties (halves, after scaling by 1) and blocks of different scales. */
static void test_quantize_simd_matches(void) {
    static const int32_t sizes[] = {1, 15, 16, 17, 31, 33, 100, 128, 129, 1536, 1537};
    qkern ks[4];
    int nk = kernels_here(ks);
    if (!nk) printf("  (no SIMD int8 kernels on this CPU)\n");
    uint64_t rng = 11;
    for (int ki = 0; ki < nk; ki++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            const int32_t cols = sizes[k], T = 5, ldx = cols + 3;
            float *x = malloc(sizeof(float) * ldx * T);
            qbuf a = {0}, b = {0};
            int ok = x && qbuf_new(&a, T, cols) == 0 && qbuf_new(&b, T, cols) == 0;
            CHECK(ok, "out of memory");
            for (int t = 0; ok && t < T; t++)
                for (int c = 0; c < ldx; c++) {
                    float u = 2.0f * plume_rng_float(&rng) - 1.0f;
                    /* row 0: halves up to 127 (ties); row 1: zeros; others: spread values,
                     * a different magnitude per block */
                    x[t * ldx + c] = t == 0 ? (float)((int)(u * 254.0f)) * 0.5f
                                     : t == 1 ? 0.0f
                                              : u * (float)(t * t) * (float)(1 + (c / 32) % 5);
                }
            if (ok && cols > 2) x[0 * ldx + 1] = 127.0f; /* amax 127 on the tie row */
            if (ok) {
                plume_qact_quantize(x, ldx, T, cols, a.xq, a.xs, a.xcor);
                ks[ki].quantize(x, ldx, T, cols, b.xq, b.xs, b.xcor);
                int64_t nq = (int64_t)T * plume_qact_stride(cols), ns = (int64_t)T * plume_qact_groups(cols);
                int64_t nc = (int64_t)T * plume_qact_lanes(cols);
                CHECK(!memcmp(a.xq, b.xq, (size_t)nq), "%s cols %d: xq differs", ks[ki].name, cols);
                CHECK(!memcmp(a.xs, b.xs, sizeof(float) * ns), "%s cols %d: xs differs", ks[ki].name, cols);
                CHECK(!memcmp(a.xcor, b.xcor, sizeof(int32_t) * nc), "%s cols %d: xcor differs", ks[ki].name, cols);
            }
            free(x);
            qbuf_free(&a);
            qbuf_free(&b);
        }
}

/* A row quantized in column slices that start on multiples of 128 (the last ending at cols),
 * each slice's bytes, scales and corrections at its chunk's place in the row, gives the bytes
 * of the whole row at once (qact.h: chunks are independent), for the reference and every SIMD
 * quantizer: forward.c quantizes gelu(gate) * up per matmul chunk. */
static void test_quantize_slices(void) {
    static const int32_t sizes[] = {100, 128, 300, 1537, 6144};
    qkern ks[5];
    int nk = kernels_here(ks + 1) + 1;
    ks[0] = (qkern){"reference", plume_qact_quantize, plume_qact_matmul_ref};
    uint64_t rng = 5;
    for (int ki = 0; ki < nk; ki++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            const int32_t cols = sizes[k], T = 3, ldx = cols + 5;
            const int64_t stride = plume_qact_stride(cols), groups = plume_qact_groups(cols), lanes = plume_qact_lanes(cols);
            float *x = malloc(sizeof(float) * ldx * T);
            qbuf a = {0}, b = {0};
            int ok = x && qbuf_new(&a, T, cols) == 0 && qbuf_new(&b, T, cols) == 0;
            CHECK(ok, "out of memory");
            for (int i = 0; ok && i < ldx * T; i++) x[i] = (2.0f * plume_rng_float(&rng) - 1.0f) * (float)(1 + (i / 32) % 7);
            if (ok) {
                ks[ki].quantize(x, ldx, T, cols, a.xq, a.xs, a.xcor);
                memset(b.xq, 0x55, (size_t)(T * stride));
                for (int32_t t = 0; t < T; t++)
                    for (int32_t c0 = 0; c0 < cols;) {
                        int32_t len = PLUME_QACT_CHUNK * (1 + (int32_t)(plume_rng_float(&rng) * 3.0f));
                        if (c0 + len > cols) len = cols - c0;
                        ks[ki].quantize(x + t * ldx + c0, ldx, 1, len, b.xq + t * stride + c0,
                                        b.xs + t * groups + c0 / PLUME_QACT_GROUP,
                                        b.xcor + t * lanes + c0 / PLUME_QACT_CHUNK * PLUME_QACT_LANES);
                        c0 += len;
                    }
                CHECK(!memcmp(a.xq, b.xq, (size_t)(T * stride)), "%s cols %d: xq of slices differs", ks[ki].name, cols);
                CHECK(!memcmp(a.xs, b.xs, sizeof(float) * T * groups), "%s cols %d: xs of slices differs", ks[ki].name, cols);
                CHECK(!memcmp(a.xcor, b.xcor, sizeof(int32_t) * T * lanes), "%s cols %d: xcor of slices differs",
                      ks[ki].name, cols);
            }
            free(x);
            qbuf_free(&a);
            qbuf_free(&b);
        }
}

/* ---- matmul against the reference ------------------------------------------------------- */

/* Random Q8 or Q4 [rows, cols] matrix, data and scales a few bytes off alignment as in a
 * mapped file. pow2: scales are 2^-10 or 2^-9 (see EXACT_REL), else any fp16 in (0.001, 0.1).
 * Q8 bytes cover all of -128..127 (the flip to u8 must hold for -128 too). */
typedef struct {
    plume_weight w;
    uint8_t *data_block;
    uint16_t *scale_block;
} qweight;

/* Fill a qweight; 0 or -1 (out of memory; qweight_free what was made). */
static int qweight_new(qweight *qw, plume_wtype type, int32_t rows, int32_t cols, int pow2,
                       uint64_t *rng) {
    size_t bytes = type == PLUME_W_Q8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
    size_t nscale = type == PLUME_W_Q8 ? (size_t)rows : (size_t)rows * (cols / 32);
    qw->data_block = malloc(bytes + 1);
    qw->scale_block = malloc((nscale + 1) * 2);
    qw->w = (plume_weight){.type = type, .rows = rows, .cols = cols};
    if (!qw->data_block || !qw->scale_block) return -1;
    for (size_t i = 0; i < bytes + 1; i++) qw->data_block[i] = (uint8_t)plume_rng_next(rng);
    for (size_t i = 0; i < nscale + 1; i++) {
        float s = pow2 ? (plume_rng_next(rng) & 1 ? 1.0f / 1024 : 1.0f / 512)
                       : 0.001f + 0.099f * plume_rng_float(rng);
        qw->scale_block[i] = plume_f32_to_f16(s);
    }
    qw->w.data = qw->data_block + 1;
    qw->w.scale = qw->scale_block + 1;
    return 0;
}

/* Free a qweight (also a half-made one). */
static void qweight_free(qweight *qw) {
    free(qw->data_block);
    free(qw->scale_block);
}


/* S of ORDER_STEPS for row r and token row q (block factors xs): sum_b |f_b| sum |w xq|. */
static double abs_dot(const plume_weight *w, int32_t r, const int8_t *q, const float *xs) {
    double s = 0;
    for (int32_t c = 0; c < w->cols; c++) {
        double wc;
        if (w->type == PLUME_W_Q8) {
            wc = abs(((const int8_t *)w->data)[(int64_t)r * w->cols + c]) *
                 (double)plume_f16_to_f32(w->scale[r]) / 127.0;
        } else {
            uint8_t b = ((const uint8_t *)w->data)[(int64_t)r * (w->cols / 2) + c / 2];
            wc = abs((c % 2 ? b >> 4 : b & 15) - 8) *
                 (double)plume_f16_to_f32(w->scale[(int64_t)r * (w->cols / 32) + c / 32]);
        }
        s += fabs(wc * q[plume_qact_pos(c)] * xs[c / 32]);
    }
    return s;
}

/* Activations for a case: pow2 gives every block amax = 127 * 2^-k (k = 0..3) and integer
 * multiples of 2^-k, so xq = x * 2^k exactly and xs = 2^-k; else uniform in (-1, 1) times a
 * magnitude per block. Token 2 (if any) is all zero; the padding of a row up to ldx huge. */
static void fill_x(float *x, int64_t ldx, int32_t T, int32_t cols, int pow2, uint64_t *rng) {
    for (int32_t t = 0; t < T; t++)
        for (int32_t c = 0; c < ldx; c++) {
            float u = 2.0f * plume_rng_float(rng) - 1.0f, *v = &x[t * ldx + c];
            if (c >= cols) *v = 1e9f; /* ldx padding: must not be read */
            else if (t == 2) *v = 0.0f;
            else if (pow2) {
                float step = 1.0f / (float)(1 << ((c / 32 + t) % 4));
                *v = (c % 32 == 3 ? 127.0f : (float)(int)(u * 127.0f)) * step;
            } else
                *v = u * (float)(1 + (c / 32 + t) % 7);
        }
}

/* One case: kernel k vs the reference for rows [r0, r1) of a [rows, cols] matrix and T tokens,
 * with ldy > rows and a sentinel everywhere else. Returns the number of bad outputs. */
static int matmul_case(const qkern *k, plume_wtype type, int32_t rows, int32_t cols, int32_t T, int32_t r0,
                       int32_t r1, int pow2, uint64_t seed) {
    uint64_t rng = seed;
    const int64_t ldx = cols + 5, ldy = rows + 3;
    float *x = malloc(sizeof(float) * ldx * T);
    float *y = malloc(sizeof(float) * ldy * T), *yref = malloc(sizeof(float) * ldy * T);
    qbuf b = {0};
    qweight qw = {0};
    int bad = 0;
    if (!x || !y || !yref || qbuf_new(&b, T, cols) || qweight_new(&qw, type, rows, cols, pow2, &rng)) {
        CHECK(0, "out of memory");
        bad = 1;
        goto done;
    }
    fill_x(x, ldx, T, cols, pow2, &rng);
    for (int64_t i = 0; i < ldy * T; i++) y[i] = yref[i] = SENTINEL;
    plume_qact_quantize(x, ldx, T, cols, b.xq, b.xs, b.xcor);
    plume_qact_matmul_ref(yref, ldy, b.xq, b.xs, b.xcor, T, &qw.w, r0, r1);
    k->matmul(y, ldy, b.xq, b.xs, b.xcor, T, &qw.w, r0, r1);
    for (int32_t t = 0; t < T; t++)
        for (int64_t r = 0; r < ldy; r++) {
            float got = y[t * ldy + r], want = yref[t * ldy + r];
            if (r < r0 || r >= r1) {
                if (got != SENTINEL || want != SENTINEL) bad++;
                continue;
            }
            double tol = EXACT_REL * fabs(want);
            if (!pow2)
                tol = 2.0 * (cols / 32 + ORDER_STEPS) * 0x1p-24 *
                      abs_dot(&qw.w, (int32_t)r, b.xq + t * plume_qact_stride(cols), b.xs + (int64_t)t * plume_qact_groups(cols));
            if (!(fabs((double)got - want) <= tol)) {
                if (!bad)
                    printf("  %s %s rows %d cols %d T %d [%d, %d): t %d r %lld: %.9g, want %.9g\n", k->name,
                           type == PLUME_W_Q8 ? "q8" : "q4", rows, cols, T, r0, r1, t, (long long)r, got, want);
                bad++;
            }
        }
done:
    free(x);
    free(y);
    free(yref);
    qbuf_free(&b);
    qweight_free(&qw);
    return bad;
}

/* Which weights the int8 path takes; empty ranges and other types leave Y alone. */
static void test_supported_and_empty(void) {
    int8_t q8[64] = {1};
    uint16_t sc[2] = {0x3c00, 0x3c00};
    plume_weight w = {.type = PLUME_W_Q8, .rows = 1, .cols = 64, .data = q8, .scale = sc};
    CHECK(plume_qact_supported(&w), "q8 64 cols");
    w.cols = 17;
    CHECK(plume_qact_supported(&w), "q8 17 cols");
    w.cols = PLUME_QACT_COLS_MAX + 1;
    CHECK(!plume_qact_supported(&w), "q8 too many cols");
    w.cols = 0;
    CHECK(!plume_qact_supported(&w), "q8 0 cols");
    w.type = PLUME_W_Q4;
    w.cols = 64;
    CHECK(plume_qact_supported(&w), "q4 64 cols");
    w.cols = 48;
    CHECK(!plume_qact_supported(&w), "q4 48 cols");
    w.type = PLUME_W_F32;
    w.cols = 16;
    CHECK(!plume_qact_supported(&w), "f32");

    int8_t xq[128] = {5};
    float xs[4] = {1.0f}, y[2] = {SENTINEL, SENTINEL};
    int32_t xcor[16]; /* as plume_qact_quantize makes it for xq */
    for (int j = 0; j < 16; j++) xcor[j] = PLUME_QACT_MAGIC - (j ? 0 : 640);
    qkern ks[4];
    int nk = kernels_here(ks);
    plume_qact_matmul_ref(y, 1, xq, xs, xcor, 1, &w, 0, 1); /* f32: not ours */
    for (int i = 0; i < nk; i++) ks[i].matmul(y, 1, xq, xs, xcor, 1, &w, 0, 1);
    w.type = PLUME_W_Q8;
    plume_qact_matmul_ref(y, 1, xq, xs, xcor, 1, &w, 0, 0); /* empty range */
    plume_qact_matmul_ref(y, 1, xq, xs, xcor, 0, &w, 0, 1); /* no tokens */
    for (int i = 0; i < nk; i++) {
        ks[i].matmul(y, 1, xq, xs, xcor, 1, &w, 0, 0);
        ks[i].matmul(y, 1, xq, xs, xcor, 0, &w, 0, 1);
    }
    CHECK(y[0] == SENTINEL && y[1] == SENTINEL, "Y written: %g %g", y[0], y[1]);
    w.cols = 16;
    plume_qact_matmul_ref(y, 1, xq, xs, xcor, 1, &w, 0, 1);
    CHECK(y[0] == 5.0f * (1.0f / 127.0f) && y[1] == SENTINEL, "q8 1 x 1: %g, want 5/127", y[0]);
    for (int i = 0; i < nk; i++) {
        y[0] = SENTINEL;
        ks[i].matmul(y, 1, xq, xs, xcor, 1, &w, 0, 1);
        CHECK(y[0] == 5.0f * (1.0f / 127.0f) && y[1] == SENTINEL, "%s q8 1 x 1: %g, want 5/127", ks[i].name, y[0]);
    }
}

/* Every awkward size, both weight types, whole and partial row ranges, exact scales. */
static void test_matmul_simd_exact(void) {
    static const int32_t Ts[] = {1, 3, 5, 8, 12, 17};
    static const int32_t rowss[] = {1, 5, 16, 33};
    static const int32_t colss[] = {32, 64, 96, 160, 1536};
    static const int32_t q8_only[] = {1, 100, 200}; /* Q8 takes any cols */
    qkern ks[4];
    int nk = kernels_here(ks);
    for (int ki = 0; ki < nk; ki++) {
        uint64_t seed = 1;
        for (int ty = 0; ty < 2; ty++) {
            plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
            for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
                for (size_t j = 0; j < sizeof rowss / sizeof *rowss; j++)
                    for (size_t k = 0; k < sizeof colss / sizeof *colss + (ty ? 0 : 3); k++) {
                        int32_t T = Ts[i], rows = rowss[j];
                        int32_t cols = k < sizeof colss / sizeof *colss ? colss[k] : q8_only[k - 5];
                        int32_t r0 = rows / 3, r1 = rows - rows / 4;
                        int bad = matmul_case(&ks[ki], type, rows, cols, T, 0, rows, 1, seed++);
                        bad += matmul_case(&ks[ki], type, rows, cols, T, r0, r1, 1, seed++);
                        CHECK(bad == 0, "%s %s rows %d cols %d T %d: %d outputs differ", ks[ki].name,
                              ty ? "q4" : "q8", rows, cols, T, bad);
                    }
        }
    }
}

/* Realistic fp16 scales; the long rows of E2B's FFN, which a kernel may cut into column
 * blocks (with single-row tiles, several panels, a tail of columns). */
static void test_matmul_simd_any_scales(void) {
    qkern ks[4];
    int nk = kernels_here(ks);
    for (int ki = 0; ki < nk; ki++) {
        uint64_t seed = 1000;
        for (int ty = 0; ty < 2; ty++) {
            plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
            const qkern *k = &ks[ki];
            int bad = matmul_case(k, type, 37, 1536, 13, 2, 35, 0, seed++);
            bad += matmul_case(k, type, 9, 6144, 7, 0, 9, 0, seed++);
            bad += matmul_case(k, type, 6, 12288, 1, 1, 6, 0, seed++);
            bad += matmul_case(k, type, 133, 4096, 7, 0, 133, 0, seed++);
            bad += matmul_case(k, type, 7, 3584, 9, 0, 7, 0, seed++);
            if (type == PLUME_W_Q8) bad += matmul_case(k, type, 7, 5000, 9, 0, 7, 0, seed++);
            CHECK(bad == 0, "%s %s: %d outputs differ", k->name, ty ? "q4" : "q8", bad);
        }
    }
}

/* ---- determinism ------------------------------------------------------------------------ */

/* Y of tokens [t0, t0 + n) of the quantized rows in b, rows [r0, r1), into y [n, rows]. */
static void run_tokens(const qkern *k, const qbuf *b, int32_t cols, int32_t t0, int32_t n, const plume_weight *w,
                       int32_t r0, int32_t r1, float *y) {
    k->matmul(y, w->rows, b->xq + t0 * plume_qact_stride(cols), b->xs + (int64_t)t0 * plume_qact_groups(cols),
              b->xcor + (int64_t)t0 * plume_qact_lanes(cols), n, w, r0, r1);
}

/* A token row's outputs are the same bits whether it runs alone (decode, T = 1), in a step of
 * 5 or of 9 (prefill, a speculative check), and however the rows are split (threads): what the
 * forward pass needs for batched == alone and for k-token verification == single steps. Rows
 * long enough to be cut into column blocks in prefill, and row counts that leave 1-row tiles. */
static void test_matmul_same_bits_any_T(void) {
    static const int32_t shapes[][2] = {{37, 1536}, {13, 6144}, {9, 160}};
    qkern ks[4];
    int nk = kernels_here(ks);
    enum { T = 9 };
    for (int ki = 0; ki < nk; ki++)
        for (int ty = 0; ty < 2; ty++)
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
                const int32_t rows = shapes[si][0], cols = shapes[si][1];
                uint64_t rng = 500 + si;
                float *x = malloc(sizeof(float) * cols * T);
                float *all = malloc(sizeof(float) * rows * T), *part = malloc(sizeof(float) * rows * T);
                qbuf b = {0};
                qweight qw = {0};
                int ok = x && all && part && !qbuf_new(&b, T, cols) &&
                         !qweight_new(&qw, ty ? PLUME_W_Q4 : PLUME_W_Q8, rows, cols, 0, &rng);
                CHECK(ok, "out of memory");
                if (ok) {
                    fill_x(x, cols, T, cols, 0, &rng);
                    ks[ki].quantize(x, cols, T, cols, b.xq, b.xs, b.xcor);
                    run_tokens(&ks[ki], &b, cols, 0, T, &qw.w, 0, rows, all);
                    for (int32_t t = 0; t < T; t++) /* alone, all rows at once */
                        run_tokens(&ks[ki], &b, cols, t, 1, &qw.w, 0, rows, part + (int64_t)t * rows);
                    CHECK(!memcmp(all, part, sizeof(float) * rows * T), "%s %s %dx%d: T = 1 differs from T = 9",
                          ks[ki].name, ty ? "q4" : "q8", rows, cols);
                    /* tokens 0..4 and 5..8 in two steps, rows cut at 3 and rows - 2 */
                    const int32_t cut[] = {0, 3, rows - 2, rows};
                    for (int c = 0; c < 3; c++) {
                        run_tokens(&ks[ki], &b, cols, 0, 5, &qw.w, cut[c], cut[c + 1], part);
                        run_tokens(&ks[ki], &b, cols, 5, 4, &qw.w, cut[c], cut[c + 1], part + 5 * rows);
                    }
                    CHECK(!memcmp(all, part, sizeof(float) * rows * T), "%s %s %dx%d: T = 5 + 4, split rows, differs",
                          ks[ki].name, ty ? "q4" : "q8", rows, cols);
                }
                free(x);
                free(all);
                free(part);
                qbuf_free(&b);
                qweight_free(&qw);
            }
}

/* The two matmuls of one file (avx2 and avx-vnni; neon and neon-dot) compute the same int32
 * lanes by different instructions, so they give the same bits (avx2_qact.h, neon_qact.h). */
static void test_variants_same_bits(void) {
    qkern ks[4];
    int nk = kernels_here(ks), pairs = 0;
    enum { ROWS = 21, COLS = 1664, T = 5 }; /* 13 chunks, 1-row tiles at the end */
    for (int i = 0; i < nk; i++)
        for (int j = i + 1; j < nk; j++) {
            if (ks[i].quantize != ks[j].quantize || !strcmp(ks[i].name, "avx512-vnni")) continue;
            pairs++;
            for (int ty = 0; ty < 2; ty++) {
                uint64_t rng = 99 + ty;
                float *x = malloc(sizeof(float) * COLS * T), *a = malloc(sizeof(float) * ROWS * T);
                float *b = malloc(sizeof(float) * ROWS * T);
                qbuf q = {0};
                qweight qw = {0};
                int ok = x && a && b && !qbuf_new(&q, T, COLS) &&
                         !qweight_new(&qw, ty ? PLUME_W_Q4 : PLUME_W_Q8, ROWS, COLS, 0, &rng);
                CHECK(ok, "out of memory");
                if (ok) {
                    fill_x(x, COLS, T, COLS, 0, &rng);
                    ks[i].quantize(x, COLS, T, COLS, q.xq, q.xs, q.xcor);
                    for (int32_t n = 1; n <= T; n += T - 1) { /* T = 1 and T = 5 */
                        ks[i].matmul(a, ROWS, q.xq, q.xs, q.xcor, n, &qw.w, 0, ROWS);
                        ks[j].matmul(b, ROWS, q.xq, q.xs, q.xcor, n, &qw.w, 0, ROWS);
                        CHECK(!memcmp(a, b, sizeof(float) * ROWS * n), "%s and %s differ (%s, T = %d)", ks[i].name,
                              ks[j].name, ty ? "q4" : "q8", n);
                    }
                }
                free(x);
                free(a);
                free(b);
                qbuf_free(&q);
                qweight_free(&qw);
            }
        }
    if (!pairs) printf("  (no pair of int8 kernel variants on this CPU)\n");
}

/* ---- error against float activations ---------------------------------------------------- */

/* Rounding x to the grid of step xs = amax / 127 of its block leaves an error e uniform in
 * [-xs/2, xs/2]: variance xs^2 / 12, independent across columns. An output then errs by
 * sum_c W_rc e_c, of variance sum_c W_rc^2 xs_c^2 / 12; summed over outputs that is the
 * predicted noise energy, measured against the energy of the float32 outputs (the weights are
 * the same on both paths, so nothing else differs but float rounding, ~1e-7). Over seeds the
 * measured relative RMS error stays within 5% of the prediction; the bound is the prediction
 * times ROUNDING_MARGIN. A scale off by 1/127, a dropped column or a second rounding fails. The
 * figures printed: per block of 32 (now) against per row (before this scheme). */
static const double ROUNDING_MARGIN = 1.1;

/* A Gaussian-ish number: mean 0, variance 1 (sum of 4 uniforms, scaled). */
static float gaussish(uint64_t *rng) {
    float s = 0;
    for (int k = 0; k < 4; k++) s += plume_rng_float(rng) - 0.5f;
    return s * 1.7320508f;
}

/* Weights as a converter would make them from Gaussian floats: Q8 with row absmax, Q4 with
 * d = amax / 7 per group. dense gets the dequantized values. */
static void quantize_weights(qweight *qw, float *dense, uint64_t *rng) {
    const plume_weight *w = &qw->w;
    const int32_t rows = w->rows, cols = w->cols;
    float *v = malloc(sizeof(float) * cols);
    if (!v) return;
    for (int32_t r = 0; r < rows; r++) {
        for (int32_t c = 0; c < cols; c++) v[c] = 0.02f * gaussish(rng);
        if (w->type == PLUME_W_Q8) {
            float amax = 0;
            for (int32_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(v[c]));
            uint16_t s = plume_f32_to_f16(amax);
            float step = plume_f16_to_f32(s) / 127.0f;
            qw->scale_block[1 + r] = s;
            for (int32_t c = 0; c < cols; c++) {
                int q = (int)lrintf(v[c] / step);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                qw->data_block[1 + (int64_t)r * cols + c] = (uint8_t)(int8_t)q;
                dense[(int64_t)r * cols + c] = (float)q * plume_f16_to_f32(s) / 127.0f;
            }
        } else {
            for (int32_t g = 0; g < cols / 32; g++) {
                float amax = 0;
                for (int c = 0; c < 32; c++) amax = fmaxf(amax, fabsf(v[g * 32 + c]));
                uint16_t s = plume_f32_to_f16(amax / 7.0f);
                float d = plume_f16_to_f32(s);
                qw->scale_block[1 + (int64_t)r * (cols / 32) + g] = s;
                for (int c = 0; c < 32; c++) {
                    int32_t col = g * 32 + c;
                    int q = (int)lrintf(v[col] / d);
                    q = q > 7 ? 7 : q < -8 ? -8 : q;
                    uint8_t *b = qw->data_block + 1 + (int64_t)r * (cols / 2) + col / 2;
                    *b = col % 2 ? (uint8_t)((*b & 15) | ((q + 8) << 4)) : (uint8_t)(q + 8);
                    dense[(int64_t)r * cols + col] = (float)q * d;
                }
            }
        }
    }
    free(v);
}

/* X rounded to int8 with one scale per token row (the scheme before blocks), back to float. */
static void round_per_row(float *xr, const float *x, int32_t T, int32_t cols) {
    for (int32_t t = 0; t < T; t++) {
        float amax = 0;
        for (int32_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(x[t * cols + c]));
        float inv = 127.0f / amax, s = amax / 127.0f;
        for (int32_t c = 0; c < cols; c++) xr[t * cols + c] = (float)plume_qact_round(x[t * cols + c] * inv) * s;
    }
}

/* int8 activations vs the float32 scalar kernel at E2B's D = 1536, for activations that are
 * Gaussian, and Gaussian plus a few outlier channels (x30) as in a residual stream. */
static void test_error_vs_float(void) {
    enum { ROWS = 96, COLS = 1536, T = 24, OUTLIERS = 4 };
    uint64_t rng = 77;
    float *x = malloc(sizeof(float) * T * COLS), *dense = malloc(sizeof(float) * ROWS * COLS);
    float *yf = malloc(sizeof(float) * T * ROWS), *yq = malloc(sizeof(float) * T * ROWS);
    float *xr = malloc(sizeof(float) * T * COLS), *yr = malloc(sizeof(float) * T * ROWS);
    qbuf b = {0};
    qweight qw = {0};
    int ok = x && dense && yf && yq && xr && yr && qbuf_new(&b, T, COLS) == 0;
    const int32_t groups = plume_qact_groups(COLS);
    for (int k = 0; ok && k < 4; k++) {
        plume_wtype type = k % 2 ? PLUME_W_Q4 : PLUME_W_Q8;
        float outlier = k < 2 ? 1.0f : 30.0f;
        if (qweight_new(&qw, type, ROWS, COLS, 0, &rng)) {
            ok = 0;
            qweight_free(&qw);
            break;
        }
        quantize_weights(&qw, dense, &rng);
        for (int32_t t = 0; t < T; t++)
            for (int32_t c = 0; c < COLS; c++)
                x[t * COLS + c] = gaussish(&rng) * (c % (COLS / OUTLIERS) == 17 ? outlier : 1.0f);
        plume_kernels_scalar.matmul[type](yf, ROWS, x, COLS, T, &qw.w, 0, ROWS);
        plume_qact_quantize(x, COLS, T, COLS, b.xq, b.xs, b.xcor);
        plume_qact_matmul_ref(yq, ROWS, b.xq, b.xs, b.xcor, T, &qw.w, 0, ROWS);
        round_per_row(xr, x, T, COLS);
        plume_kernels_scalar.matmul[type](yr, ROWS, xr, COLS, T, &qw.w, 0, ROWS);
        double noise = 0, signal = 0;
        for (int32_t t = 0; t < T; t++)
            for (int32_t r = 0; r < ROWS; r++) {
                for (int32_t c = 0; c < COLS; c++) {
                    double w = dense[r * COLS + c], s = b.xs[t * groups + c / 32];
                    noise += s * s / 12.0 * w * w;
                }
                signal += (double)yf[t * ROWS + r] * yf[t * ROWS + r];
            }
        double predicted = sqrt(noise / signal), measured = t_rel_rms(yq, yf, (size_t)T * ROWS);
        double per_row = t_rel_rms(yr, yf, (size_t)T * ROWS);
        const char *name = type == PLUME_W_Q4 ? "q4" : "q8";
        printf("  %s, outliers x%g: int8 activations vs float32, relative RMS error: per block %.4f "
               "(predicted %.4f), per row %.4f\n", name, outlier, measured, predicted, per_row);
        CHECK(measured <= ROUNDING_MARGIN * predicted, "%s: relative RMS error %.4f > %.2f x %.4f",
              name, measured, ROUNDING_MARGIN, predicted);
        CHECK(measured > 0, "%s: no error at all: were the int8 activations used?", name);
        qweight_free(&qw);
    }
    CHECK(ok, "out of memory");
    free(x);
    free(dense);
    free(yf);
    free(yq);
    free(xr);
    free(yr);
    qbuf_free(&b);
}

/* The portable tests everywhere; the SIMD ones for each kernel this CPU runs. */
/* ---- the tiles layout ------------------------------------------------------------------- */

/* A tiled copy of a rows-layout Q8/Q4 weight (plume_tiles_pack per group); its buffers are
 * the caller's to free. 0 or -1. */
static int tiled_copy(const plume_weight *w, plume_weight *t, uint8_t **data, uint16_t **scale) {
    const int q4 = w->type == PLUME_W_Q4;
    const size_t gb = (size_t)PLUME_TILE_ROWS * (size_t)(q4 ? w->cols / 2 : w->cols);
    const size_t gs = q4 ? (size_t)PLUME_TILE_ROWS * (size_t)(w->cols / 32) : 0;
    const int32_t ng = w->rows / PLUME_TILE_ROWS;
    *data = malloc(gb * (size_t)ng);
    *scale = malloc(q4 ? gs * (size_t)ng * 2 : (size_t)w->rows * 2);
    if (!*data || !*scale) return -1;
    for (int32_t g = 0; g < ng; g++)
        plume_tiles_pack(w->type, w->cols, (const uint8_t *)w->data + g * gb, q4 ? w->scale + g * gs : NULL,
                         *data + g * gb, q4 ? *scale + g * gs : NULL);
    if (!q4) memcpy(*scale, w->scale, (size_t)w->rows * 2);
    *t = *w;
    t->data = *data;
    t->scale = *scale;
    t->layout = PLUME_L_TILES;
    return 0;
}

/* Packing a group and unpacking it gives the rows back; every element and Q4 step reads the
 * same through plume_weight_q in both layouts; only whole groups of whole blocks fit. */
static void test_tiles_round_trip(void) {
    static const int32_t shapes[][2] = {{16, 32}, {32, 64}, {48, 160}, {16, 1536}};
    uint64_t rng = 41;
    for (int ty = 0; ty < 2; ty++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
            const int32_t rows = shapes[s][0], cols = shapes[s][1];
            qweight qw = {0};
            plume_weight t;
            uint8_t *td = NULL, *back = NULL;
            uint16_t *ts = NULL, *bs = NULL;
            const size_t gb = (size_t)PLUME_TILE_ROWS * (size_t)(ty ? cols / 2 : cols), gs = (size_t)PLUME_TILE_ROWS * (cols / 32);
            back = malloc(gb);
            bs = malloc(gs * 2);
            if (qweight_new(&qw, type, rows, cols, 0, &rng) || tiled_copy(&qw.w, &t, &td, &ts) || !back || !bs) {
                CHECK(0, "out of memory");
            } else {
                int bad = 0;
                for (int32_t g = 0; g < rows / PLUME_TILE_ROWS; g++) {
                    plume_tiles_unpack(type, cols, td + g * gb, ty ? ts + g * gs : NULL, back, ty ? bs : NULL);
                    bad += memcmp(back, (const uint8_t *)qw.w.data + g * gb, gb) != 0;
                    if (ty) bad += memcmp(bs, qw.w.scale + g * gs, gs * 2) != 0;
                }
                CHECK(!bad, "%s [%d, %d]: unpack(pack(group)) differs in %d groups", ty ? "q4" : "q8", rows, cols, bad);
                for (int32_t r = 0; r < rows; r++)
                    for (int32_t c = 0; c < cols; c++) {
                        int32_t a = plume_weight_q(&qw.w, r, c), b = plume_weight_q(&t, r, c);
                        if (a != b || a < (ty ? -8 : -128) || a > (ty ? 7 : 127)) bad++;
                        if (ty && c % 32 == 0 && plume_weight_q4_step(&qw.w, r, c / 32) != plume_weight_q4_step(&t, r, c / 32)) bad++;
                    }
                CHECK(!bad, "%s [%d, %d]: %d elements read differently in the two layouts", ty ? "q4" : "q8", rows, cols, bad);
                /* the accessor agrees with the documented rows layout itself */
                const uint8_t *d = qw.w.data;
                int32_t q = ty ? (d[cols / 2 + 1] >> 4) - 8 : (int8_t)d[cols + 3];
                CHECK(plume_weight_q(&t, 1, 3) == q, "W[1, 3] reads %d, the rows layout holds %d", plume_weight_q(&t, 1, 3), q);
            }
            qweight_free(&qw);
            free(td);
            free(ts);
            free(back);
            free(bs);
        }
    CHECK(plume_tiles_fit(PLUME_W_Q8, 32, 64) && plume_tiles_fit(PLUME_W_Q4, 16, 32), "whole groups of whole blocks fit");
    CHECK(!plume_tiles_fit(PLUME_W_Q8, 24, 64) && !plume_tiles_fit(PLUME_W_Q8, 32, 48) &&
              !plume_tiles_fit(PLUME_W_F16, 32, 64) && !plume_tiles_fit(PLUME_W_Q4, 0, 32),
          "a partial group or block, or a float type, does not fit");
}

/* A kernel that reads tiles (plume_qact_reads_tiles), and the reference, give on a tiled
 * weight the bits of the reference on the rows layout, for any T, any rows [r0, r1) (whole
 * groups or not), leaving every other output alone. */
static void test_tiles_matmul_exact(void) {
    qkern ks[6];
    int nk = kernels_here(ks);
    ks[nk++] = (qkern){"reference", plume_qact_quantize, plume_qact_matmul_ref};
    int amx = 0;
#if defined(__x86_64__)
    if ((amx = plume_qact_amx_available())) ks[nk++] = (qkern){"amx", plume_qact_quantize, matmul_amx_only};
#endif
    if (!amx) printf("  (no AMX here: the AMX kernel is not under test)\n");
    /* decode tiles take 4 groups a quarter of the range apart: 7 and 17 groups, 1 and 4 tiles
     * and a tail of 3 and 1; 5 to 16 tokens stream in 2-4 token blocks, 17 and up walk panels,
     * and so do 9-16 tokens of 32768 columns (their block corrections outgrow the buffer) */
    static const int32_t shapes[][2] = {{16, 32}, {32, 96}, {48, 1536}, {32, 6144}, {112, 160}, {272, 64}, {16, 32768}};
    static const int32_t tokens[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 40};
    uint64_t seed = 900;
    for (int ki = 0; ki < nk; ki++) {
        if (!plume_qact_reads_tiles(ks[ki].matmul) && strcmp(ks[ki].name, "amx")) continue;
        for (int ty = 0; ty < 2; ty++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
                for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
                    const plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
                    const int32_t rows = shapes[s][0], cols = shapes[s][1], T = tokens[ti];
                    const int32_t ranges[][2] = {{0, rows}, {PLUME_TILE_ROWS, rows}, {3, rows - 5}};
                    uint64_t rng = seed++;
                    const int64_t ldx = cols + 5, ldy = rows + 3;
                    float *x = malloc(sizeof(float) * ldx * T), *y = malloc(sizeof(float) * ldy * T),
                          *yref = malloc(sizeof(float) * ldy * T);
                    qbuf b = {0};
                    qweight qw = {0};
                    plume_weight t;
                    uint8_t *td = NULL;
                    uint16_t *ts = NULL;
                    if (!x || !y || !yref || qbuf_new(&b, T, cols) || qweight_new(&qw, type, rows, cols, 0, &rng) ||
                        tiled_copy(&qw.w, &t, &td, &ts)) {
                        CHECK(0, "out of memory");
                    } else {
                        fill_x(x, ldx, T, cols, 0, &rng);
                        plume_qact_quantize(x, ldx, T, cols, b.xq, b.xs, b.xcor);
                        for (size_t ri = 0; ri < 3; ri++) {
                            const int32_t r0 = ranges[ri][0], r1 = ranges[ri][1];
                            if (r1 <= r0) continue;
                            for (int64_t i = 0; i < ldy * T; i++) y[i] = yref[i] = SENTINEL;
                            plume_qact_matmul_ref(yref, ldy, b.xq, b.xs, b.xcor, T, &qw.w, r0, r1);
                            ks[ki].matmul(y, ldy, b.xq, b.xs, b.xcor, T, &t, r0, r1);
                            int bad = 0;
                            for (int64_t i = 0; i < ldy * T; i++) bad += memcmp(&y[i], &yref[i], sizeof(float)) != 0;
                            CHECK(!bad, "%s %s [%d, %d] T = %d rows [%d, %d): %d outputs differ from the reference on rows",
                                  ks[ki].name, ty ? "q4" : "q8", rows, cols, T, r0, r1, bad);
                        }
                    }
                    free(x);
                    free(y);
                    free(yref);
                    qbuf_free(&b);
                    qweight_free(&qw);
                    free(td);
                    free(ts);
                }
    }
}

int main(void) {
    qkern ks[4];
    int nk = kernels_here(ks);
    for (int i = 0; i < nk; i++) printf("  int8 kernels under test: %s\n", ks[i].name);
    RUN(test_quantize_known_rows);
    RUN(test_quantize_layout);
    RUN(test_supported_and_empty);
    RUN(test_error_vs_float);
    RUN(test_tiles_round_trip);
    RUN(test_tiles_matmul_exact);
    if (nk) {
        RUN(test_quantize_simd_matches);
    RUN(test_quantize_slices);
        RUN(test_matmul_simd_exact);
        RUN(test_matmul_simd_any_scales);
        RUN(test_matmul_same_bits_any_T);
        RUN(test_variants_same_bits);
    } else {
        printf("SKIP test_quantize_simd_matches: no SIMD int8 kernels on this CPU\n");
        printf("SKIP test_matmul_simd_exact: no SIMD int8 kernels on this CPU\n");
        printf("SKIP test_matmul_simd_any_scales: no SIMD int8 kernels on this CPU\n");
        printf("SKIP test_matmul_same_bits_any_T: no SIMD int8 kernels on this CPU\n");
        printf("SKIP test_variants_same_bits: no SIMD int8 kernels on this CPU\n");
    }
    return t_total_failed ? 1 : 0;
}
