/* test_qact.c -- int8 activations (kernels/qact.h): the quantizer on hand-made rows with
 * known answers and its chunk layout; the AVX-512 VNNI quantizer and matmul against the
 * reference (qact.c) at awkward sizes, exact up to the final float rounding; and the error
 * int8 activations add to the float32 scalar kernel on realistic data, against a bound derived
 * from the rounding. VNNI tests print SKIP on CPUs without AVX-512 VNNI. */
#include "common.h"
#include "kernels/kernels.h"
#include "kernels/qact.h"
#include "t.h"

/* Integer sums are exact in both kernels, so what is left is float rounding: for Q8 none at all
 * (both compute ((float)dot * (s / 127)) * xs in that order), for Q4 the order of the sum over
 * groups. The exactness cases give Q4 scales that are powers of two and sums far below 2^24
 * units of the smallest, so every partial sum is exact too and any order gives the same float.
 * 1e-6 leaves a few ulps, while one integer unit wrong (1/127^2 of a typical product of a
 * few hundred) is far above it. */
static const double EXACT_REL = 1e-6;

/* With fp16 scales of any value the Q4 float sums round differently: the kernel adds
 * d (q + 8) xq per lane and -8 d xsum per group, the reference d q xq per group. Each of at
 * most n = cols / 32 rounding steps on a path errs by at most 2^-24 of a partial sum no larger
 * than sum_c (|q| + 16) |xq| d (the kernel's terms bound that of both), so the outputs differ
 * by less than 2 n 2^-24 times that sum (ORDER_ULP_SUMS = 2 n: both paths). */
static const double ORDER_ULP_SUMS = 2.0;

/* A value no kernel computes, to spot writes outside [r0, r1) and in ldy padding. */
static const float SENTINEL = -1234.5f;

/* Whether this CPU runs the VNNI kernels (main prints SKIP for their tests otherwise). */
static int have_vnni(void) {
#if defined(__x86_64__)
    return plume_qact_vnni_available();
#else
    return 0;
#endif
}

/* Quantized activations: the caller's buffers of qact.h, sized for T rows of cols. */
typedef struct {
    int8_t *xq;
    float *xs;
    int32_t *xsum;
} qbuf;

/* Allocate a qbuf (filled with garbage so that missed padding shows); 0 or -1. */
static int qbuf_new(qbuf *b, int32_t T, int32_t cols) {
    size_t nq = (size_t)T * plume_qact_stride(cols), ns = (size_t)T * plume_qact_groups(cols);
    b->xq = malloc(nq);
    b->xs = malloc((size_t)T * sizeof(float));
    b->xsum = malloc(ns * sizeof(int32_t));
    if (!b->xq || !b->xs || !b->xsum) return -1;
    memset(b->xq, 0x5a, nq);
    memset(b->xsum, 0x5a, ns * sizeof(int32_t));
    return 0;
}

/* Free a qbuf (also a half-made one). */
static void qbuf_free(qbuf *b) {
    free(b->xq);
    free(b->xs);
    free(b->xsum);
}

/* ---- quantizer -------------------------------------------------------------------------- */

/* Hand-made rows: rounding ties to even, scale, clamping of -amax, zero and tiny rows. */
static void test_quantize_known_rows(void) {
    enum { T = 4, COLS = 8 };
    const float x[T][COLS] = {
        {127.0f, -63.5f, 2.5f, -2.5f, 0.5f, 1.5f, 0.0f, -127.0f}, /* inv = 1: ties visible */
        {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f / 254}, /* amax 1: inv = 127 */
        {0},                                                       /* all zero */
        {1e-35f, -2e-35f, 0, 0, 0, 0, 0, 0},                       /* below PLUME_QACT_TINY */
    };
    const int8_t want[T][COLS] = {
        {127, -64, 2, -2, 0, 2, 0, -127},
        {64, -127, 32, 0, 0, 0, 0, 0}, /* 63.5 -> 64, 31.75 -> 32, 0.5 -> 0 (even) */
        {0},
        {0},
    };
    const float want_xs[T] = {1.0f, 1.0f / 127.0f, 0.0f, 0.0f};
    const int32_t want_sum[T] = {-62, -31, 0, 0};
    qbuf b = {0};
    CHECK(qbuf_new(&b, T, COLS) == 0, "out of memory");
    if (t_failed_now) goto done;
    plume_qact_quantize(&x[0][0], COLS, T, COLS, b.xq, b.xs, b.xsum);
    CHECK(plume_qact_stride(COLS) == 128 && plume_qact_groups(COLS) == 4, "stride %lld groups %d",
          (long long)plume_qact_stride(COLS), plume_qact_groups(COLS));
    for (int t = 0; t < T; t++) {
        const int8_t *q = b.xq + t * 128;
        CHECK(b.xs[t] == want_xs[t], "row %d: xs %g, want %g", t, b.xs[t], want_xs[t]);
        for (int c = 0; c < COLS; c++)
            CHECK(q[c] == want[t][c], "row %d col %d: %d, want %d", t, c, q[c], want[t][c]);
        for (int c = COLS; c < 128; c++) CHECK(q[c] == 0, "row %d: padding byte %d is %d", t, c, q[c]);
        CHECK(b.xsum[t * 4] == want_sum[t], "row %d: xsum %d, want %d", t, b.xsum[t * 4], want_sum[t]);
        for (int g = 1; g < 4; g++) CHECK(b.xsum[t * 4 + g] == 0, "row %d: padding group %d", t, g);
    }
done:
    qbuf_free(&b);
}

/* The chunk layout: column c at plume_qact_pos(c), by hand for a few, and a 300-column row
 * (two chunks and part of a third) whose integer values quantize to themselves (amax 127). */
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
        for (int c = 0; c < LDX; c++) x[t * LDX + c] = c < COLS ? (float)((c + 7 * t) % 255 - 127) : 1e9f;
    plume_qact_quantize(x, LDX, T, COLS, b.xq, b.xs, b.xsum);
    const int64_t stride = plume_qact_stride(COLS);
    const int32_t groups = plume_qact_groups(COLS);
    CHECK(stride == 384 && groups == 12, "stride %lld groups %d", (long long)stride, groups);
    for (int t = 0; t < T; t++) {
        const int8_t *q = b.xq + t * stride;
        int seen[384] = {0};
        int32_t gsum[12] = {0};
        CHECK(b.xs[t] == 1.0f, "row %d: xs %g", t, b.xs[t]);
        for (int c = 0; c < COLS; c++) {
            int64_t p = plume_qact_pos(c);
            int v = (c + 7 * t) % 255 - 127;
            CHECK(p >= 0 && p < stride && !seen[p], "col %d: position %lld reused", c, (long long)p);
            if (t_failed_now) goto done;
            seen[p] = 1;
            CHECK(q[p] == v, "row %d col %d: %d at byte %lld, want %d", t, c, q[p], (long long)p, v);
            gsum[c / 32] += v;
        }
        for (int p = 0; p < stride; p++) CHECK(seen[p] || q[p] == 0, "row %d: padding byte %d", t, p);
        for (int g = 0; g < groups; g++)
            CHECK(b.xsum[t * groups + g] == gsum[g], "row %d group %d: %d, want %d", t, g,
                  b.xsum[t * groups + g], gsum[g]);
    }
done:
    free(x);
    qbuf_free(&b);
}

/* plume_qact_quantize_vnni writes the same bytes as the reference at sizes with vector tails,
 * on values with many exact ties (halves, after scaling by 1). */
static void test_quantize_vnni_matches(void) {
#if defined(__x86_64__)
    static const int32_t sizes[] = {1, 15, 16, 17, 100, 128, 129, 1536, 1537};
    uint64_t rng = 11;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const int32_t cols = sizes[k], T = 5, ldx = cols + 3;
        float *x = malloc(sizeof(float) * ldx * T);
        qbuf a = {0}, b = {0};
        int ok = x && qbuf_new(&a, T, cols) == 0 && qbuf_new(&b, T, cols) == 0;
        CHECK(ok, "out of memory");
        if (!ok) return;
        for (int t = 0; t < T; t++)
            for (int c = 0; c < ldx; c++) {
                float u = 2.0f * plume_rng_float(&rng) - 1.0f;
                /* row 0: halves up to 127 (ties); row 1: zeros; others: spread values */
                x[t * ldx + c] = t == 0 ? (float)((int)(u * 254.0f)) * 0.5f : t == 1 ? 0.0f : u * (float)(t * t);
            }
        if (cols > 2) x[0 * ldx + 1] = 127.0f; /* amax 127 on the tie row */
        plume_qact_quantize(x, ldx, T, cols, a.xq, a.xs, a.xsum);
        plume_qact_quantize_vnni(x, ldx, T, cols, b.xq, b.xs, b.xsum);
        int64_t nq = (int64_t)T * plume_qact_stride(cols), ns = (int64_t)T * plume_qact_groups(cols);
        CHECK(!memcmp(a.xq, b.xq, (size_t)nq), "cols %d: xq differs", cols);
        CHECK(!memcmp(a.xs, b.xs, sizeof(float) * T), "cols %d: xs differs", cols);
        CHECK(!memcmp(a.xsum, b.xsum, sizeof(int32_t) * ns), "cols %d: xsum differs", cols);
        free(x);
        qbuf_free(&a);
        qbuf_free(&b);
    }
#endif
}

/* ---- matmul against the reference ------------------------------------------------------- */

/* A random Q8 or Q4 [rows, cols] matrix, data and scales a few bytes off alignment as in a
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

/* sum_c (|q| + bias) |xq[t, c]| * scale * xs[t]: the scale of a row's float rounding. */
static double abs_dot(const plume_weight *w, int32_t r, const int8_t *q, float xs, int bias) {
    double s = 0;
    for (int32_t c = 0; c < w->cols; c++) {
        double wc;
        if (w->type == PLUME_W_Q8) {
            wc = (abs(((const int8_t *)w->data)[(int64_t)r * w->cols + c]) + bias) *
                 (double)plume_f16_to_f32(w->scale[r]) / 127.0;
        } else {
            uint8_t b = ((const uint8_t *)w->data)[(int64_t)r * (w->cols / 2) + c / 2];
            wc = (abs((c % 2 ? b >> 4 : b & 15) - 8) + bias) *
                 (double)plume_f16_to_f32(w->scale[(int64_t)r * (w->cols / 32) + c / 32]);
        }
        s += fabs(wc * q[plume_qact_pos(c)]);
    }
    return s * xs;
}

/* One case: VNNI vs reference for rows [r0, r1) of a [rows, cols] matrix and T tokens, with
 * ldy > rows and a sentinel everywhere else. Returns the number of bad outputs. */
static int matmul_case(plume_wtype type, int32_t rows, int32_t cols, int32_t T, int32_t r0,
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
    for (int64_t i = 0; i < ldx * T; i++) x[i] = 2.0f * plume_rng_float(&rng) - 1.0f;
    if (T > 2) memset(x + 2 * ldx, 0, sizeof(float) * cols); /* an all-zero token */
    for (int64_t i = 0; i < ldy * T; i++) y[i] = yref[i] = SENTINEL;
    plume_qact_quantize(x, ldx, T, cols, b.xq, b.xs, b.xsum);
    plume_qact_matmul_ref(yref, ldy, b.xq, b.xs, b.xsum, T, &qw.w, r0, r1);
#if defined(__x86_64__)
    plume_qact_matmul_vnni(y, ldy, b.xq, b.xs, b.xsum, T, &qw.w, r0, r1);
#endif
    for (int32_t t = 0; t < T; t++)
        for (int64_t r = 0; r < ldy; r++) {
            float got = y[t * ldy + r], want = yref[t * ldy + r];
            if (r < r0 || r >= r1) {
                if (got != SENTINEL || want != SENTINEL) bad++;
                continue;
            }
            double tol = EXACT_REL * fabs(want);
            if (!pow2 && type == PLUME_W_Q4)
                tol = ORDER_ULP_SUMS * (cols / 32) * 0x1p-24 *
                      abs_dot(&qw.w, (int32_t)r, b.xq + t * plume_qact_stride(cols), b.xs[t], 16);
            if (!(fabs((double)got - want) <= tol)) bad++;
            if (bad == 1 && !(fabs((double)got - want) <= tol))
                printf("  %s rows %d cols %d T %d [%d, %d): t %d r %lld: %.9g, want %.9g\n",
                       type == PLUME_W_Q8 ? "q8" : "q4", rows, cols, T, r0, r1, t, (long long)r,
                       got, want);
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
    float xs = 1.0f, y[2] = {SENTINEL, SENTINEL};
    int32_t xsum[4] = {5};
    plume_qact_matmul_ref(y, 1, xq, &xs, xsum, 1, &w, 0, 1); /* f32: not ours */
    w.type = PLUME_W_Q8;
    plume_qact_matmul_ref(y, 1, xq, &xs, xsum, 1, &w, 0, 0); /* empty range */
    plume_qact_matmul_ref(y, 1, xq, &xs, xsum, 0, &w, 0, 1); /* no tokens */
#if defined(__x86_64__)
    if (have_vnni()) {
        w.type = PLUME_W_F32;
        plume_qact_matmul_vnni(y, 1, xq, &xs, xsum, 1, &w, 0, 1);
        w.type = PLUME_W_Q8;
        plume_qact_matmul_vnni(y, 1, xq, &xs, xsum, 1, &w, 0, 0);
        plume_qact_matmul_vnni(y, 1, xq, &xs, xsum, 0, &w, 0, 1);
    }
#endif
    CHECK(y[0] == SENTINEL && y[1] == SENTINEL, "Y written: %g %g", y[0], y[1]);
    w.cols = 16;
    plume_qact_matmul_ref(y, 1, xq, &xs, xsum, 1, &w, 0, 1);
    CHECK(y[0] == 5.0f * (1.0f / 127.0f) && y[1] == SENTINEL, "q8 1 x 1: %g, want 5/127", y[0]);
}

/* Every awkward size, both weight types, whole and partial row ranges, exact scales. */
static void test_matmul_vnni_exact(void) {
    static const int32_t Ts[] = {1, 3, 8, 17, 64};
    static const int32_t rowss[] = {1, 5, 16, 33, 100};
    static const int32_t colss[] = {32, 64, 96, 160, 1536};
    static const int32_t q8_only[] = {1, 100, 200}; /* Q8 takes any cols */
    uint64_t seed = 1;
    for (int ty = 0; ty < 2; ty++) {
        plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
            for (size_t j = 0; j < sizeof rowss / sizeof *rowss; j++)
                for (size_t k = 0; k < sizeof colss / sizeof *colss + (ty ? 0 : 3); k++) {
                    int32_t T = Ts[i], rows = rowss[j];
                    int32_t cols = k < sizeof colss / sizeof *colss ? colss[k] : q8_only[k - 5];
                    int32_t r0 = rows / 3, r1 = rows - rows / 4;
                    int bad = matmul_case(type, rows, cols, T, 0, rows, 1, seed++);
                    bad += matmul_case(type, rows, cols, T, r0, r1, 1, seed++);
                    CHECK(bad == 0, "%s rows %d cols %d T %d: %d outputs differ",
                          ty ? "q4" : "q8", rows, cols, T, bad);
                }
    }
}

/* Realistic fp16 scales; the long rows of E2B's FFN, which the kernel cuts into column blocks
 * (with single-row tiles, several panels, a tail of columns); fewer tokens to stay quick. */
static void test_matmul_vnni_any_scales(void) {
    uint64_t seed = 1000;
    for (int ty = 0; ty < 2; ty++) {
        plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
        int bad = matmul_case(type, 37, 1536, 13, 2, 35, 0, seed++);
        bad += matmul_case(type, 9, 6144, 7, 0, 9, 0, seed++);
        bad += matmul_case(type, 6, 12288, 5, 1, 6, 0, seed++);
        bad += matmul_case(type, 133, 4096, 7, 0, 133, 0, seed++);
        bad += matmul_case(type, 7, 3584, 9, 0, 7, 0, seed++);
        if (type == PLUME_W_Q8) bad += matmul_case(type, 7, 5000, 9, 0, 7, 0, seed++);
        CHECK(bad == 0, "%s: %d outputs differ", ty ? "q4" : "q8", bad);
    }
}

/* ---- error against float activations ---------------------------------------------------- */

/* Rounding x to the grid of step xs = amax / 127 leaves an error e uniform in [-xs/2, xs/2]:
 * variance xs^2 / 12, independent across columns. An output then errs by sum_c W_rc e_c, of
 * variance (xs^2 / 12) sum_c W_rc^2; summed over outputs that is the predicted noise energy,
 * measured against the energy of the float32 outputs (the weights are the same on both paths,
 * so nothing else differs but float rounding, ~1e-7). Over seeds the measured relative RMS
 * error stays within 4% of the prediction (about 0.007 for Gaussian activations, 0.06 with x30
 * outlier channels, whose amax sets the step for every column); the bound is the prediction
 * times ROUNDING_MARGIN. A scale off by 1/127, a dropped column or a second rounding fails. */
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

/* int8 activations vs the float32 scalar kernel at E2B's D = 1536, for activations that are
 * Gaussian, and Gaussian plus a few outlier channels (x30) as in a residual stream. */
static void test_error_vs_float(void) {
    enum { ROWS = 96, COLS = 1536, T = 24, OUTLIERS = 4 };
    uint64_t rng = 77;
    float *x = malloc(sizeof(float) * T * COLS), *dense = malloc(sizeof(float) * ROWS * COLS);
    float *yf = malloc(sizeof(float) * T * ROWS), *yq = malloc(sizeof(float) * T * ROWS);
    qbuf b = {0};
    qweight qw = {0};
    int ok = x && dense && yf && yq && qbuf_new(&b, T, COLS) == 0;
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
        plume_qact_quantize(x, COLS, T, COLS, b.xq, b.xs, b.xsum);
        plume_qact_matmul_ref(yq, ROWS, b.xq, b.xs, b.xsum, T, &qw.w, 0, ROWS);
        double noise = 0, signal = 0;
        for (int32_t t = 0; t < T; t++)
            for (int32_t r = 0; r < ROWS; r++) {
                double w2 = 0;
                for (int32_t c = 0; c < COLS; c++) w2 += (double)dense[r * COLS + c] * dense[r * COLS + c];
                noise += (double)b.xs[t] * b.xs[t] / 12.0 * w2;
                signal += (double)yf[t * ROWS + r] * yf[t * ROWS + r];
            }
        double predicted = sqrt(noise / signal), measured = t_rel_rms(yq, yf, (size_t)T * ROWS);
        const char *name = type == PLUME_W_Q4 ? "q4" : "q8";
        printf("  %s, outliers x%g: int8 activations vs float32: relative RMS error %.4f "
               "(predicted %.4f)\n", name, outlier, measured, predicted);
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
    qbuf_free(&b);
}

/* The portable tests everywhere; the VNNI ones where the CPU has it, else SKIP lines. */
int main(void) {
    RUN(test_quantize_known_rows);
    RUN(test_quantize_layout);
    RUN(test_supported_and_empty);
    RUN(test_error_vs_float);
    if (have_vnni()) {
        RUN(test_quantize_vnni_matches);
        RUN(test_matmul_vnni_exact);
        RUN(test_matmul_vnni_any_scales);
    } else {
        printf("SKIP test_quantize_vnni_matches: this CPU lacks AVX-512 VNNI\n");
        printf("SKIP test_matmul_vnni_exact: this CPU lacks AVX-512 VNNI\n");
        printf("SKIP test_matmul_vnni_any_scales: this CPU lacks AVX-512 VNNI\n");
    }
    return t_total_failed ? 1 : 0;
}
