/* test_kernels.c -- every kernel table this CPU can run, checked against the scalar reference
 * (kernels/scalar.c) on random inputs at awkward sizes: odd column counts that leave vector
 * tails, row ranges that do not start at 0, strides wider than the data, unaligned pointers.
 * Also checks that Y outside the row range is left alone and that the dispatcher honours names. */
#include "common.h"
#include "kernels/kernels.h"
#include "t.h"

/* A float32 sum reassociated (vector lanes, FMA, Q4 scale folded into the weights) rounds
 * differently from the in-order scalar sum: by about 2^-24 * sqrt(n) of sum |w*x| for random
 * data, at most n * 2^-24 (6e-5 at n = 1568). 2e-5 of sum |w*x| leaves room for the usual
 * case many times over, while one wrong or dropped term (about 1/n of it) still fails. */
static const double REL_TOL = 2e-5;

/* Fill with uniform floats in [-1, 1). */
static void fill(float *v, int64_t n, uint64_t *rng) {
    for (int64_t i = 0; i < n; i++) v[i] = 2.0f * plume_rng_float(rng) - 1.0f;
}

/* A random weight matrix and its float twin. */
typedef struct {
    plume_weight w;
    void *data_block, *scale_block;
    float *dense; /* the same weights as floats, scale applied: for the |w*x| error scale */
} test_weight;

/* A random [rows, cols] matrix of a type, its data and scales starting a few bytes past an
 * aligned block (still aligned to their element size), as in a mapped file whose rows have odd
 * lengths. Returns 0, or -1 on out of memory (then weight_free what was made). */
static int weight_new(test_weight *tw, plume_wtype type, int32_t rows, int32_t cols,
                      uint64_t *rng) {
    memset(tw, 0, sizeof *tw);
    tw->w.type = type;
    tw->w.rows = rows;
    tw->w.cols = cols;
    int64_t n = (int64_t)rows * cols;
    size_t esize = type == PLUME_W_F32 ? 4 : type == PLUME_W_Q8 ? 1 : type == PLUME_W_Q4 ? 0 : 2;
    size_t bytes = type == PLUME_W_Q4 ? (size_t)n / 2 : (size_t)n * esize;
    size_t skew = type == PLUME_W_F32 ? 4 : type == PLUME_W_Q8 ? 1 : 2; /* off 64-alignment */
    tw->data_block = plume_alloc(bytes + 64);
    tw->scale_block = plume_alloc((size_t)n * 2 / 32 + (size_t)rows * 2 + 64);
    tw->dense = malloc((size_t)n * sizeof(float));
    if (!tw->data_block || !tw->scale_block || !tw->dense) return -1;
    uint8_t *data = (uint8_t *)tw->data_block + skew;
    uint16_t *scale = (uint16_t *)((uint8_t *)tw->scale_block + 2);
    tw->w.data = data;
    for (int32_t r = 0; r < rows; r++) {
        float s = 0.0f;
        if (type == PLUME_W_Q8) {
            scale[r] = plume_f32_to_f16(0.01f + plume_rng_float(rng));
            s = plume_f16_to_f32(scale[r]) / 127.0f;
        }
        for (int32_t c = 0; c < cols; c++) {
            int64_t i = (int64_t)r * cols + c;
            float v = 2.0f * plume_rng_float(rng) - 1.0f;
            switch (type) {
            case PLUME_W_F32: memcpy(data + 4 * i, &v, 4); tw->dense[i] = v; break;
            case PLUME_W_F16: {
                /* every 13th weight a binary16 subnormal: the conversion must be exact there too */
                uint16_t h = plume_f32_to_f16(i % 13 == 5 ? v * 3e-5f : v);
                memcpy(data + 2 * i, &h, 2);
                tw->dense[i] = plume_f16_to_f32(h);
                break;
            }
            case PLUME_W_BF16: {
                uint16_t h = plume_f32_to_bf16(v);
                memcpy(data + 2 * i, &h, 2);
                tw->dense[i] = plume_bf16_to_f32(h);
                break;
            }
            case PLUME_W_Q8: {
                int8_t q = (int8_t)(plume_rng_next(rng) % 255) - 127;
                memcpy(data + i, &q, 1);
                tw->dense[i] = (float)q * s;
                break;
            }
            case PLUME_W_Q4: {
                uint8_t q = (uint8_t)(plume_rng_next(rng) & 15);
                uint8_t *b = data + i / 2;
                *b = c % 2 ? (uint8_t)((*b & 15) | (q << 4)) : q;
                if (c % 32 == 0)
                    scale[(int64_t)r * (cols / 32) + c / 32] =
                        plume_f32_to_f16(0.001f + 0.1f * plume_rng_float(rng));
                tw->dense[i] = (float)((int)q - 8) *
                               plume_f16_to_f32(scale[(int64_t)r * (cols / 32) + c / 32]);
                break;
            }
            default: break;
            }
        }
    }
    tw->w.scale = type == PLUME_W_Q8 || type == PLUME_W_Q4 ? scale : NULL;
    return 0;
}

/* Free a test matrix (also one weight_new failed to finish). */
static void weight_free(test_weight *tw) {
    plume_dealloc(tw->data_block);
    plume_dealloc(tw->scale_block);
    free(tw->dense);
}

static const char *const type_names[PLUME_W_NTYPES] = {"f32", "f16", "bf16", "q8", "q4"};

/* The table under test (tests take no arguments): set by main for each SIMD table. */
static const plume_kernels *cur;
/* Set by the tiles tests: a Q8/Q4 weight that fits goes to the table in PLUME_L_TILES. */
static int cur_tiles;

/* w as the table under test takes it: a tiled copy into *buf (plume_dealloc it) when
 * cur_tiles and the weight fits, else w itself. NULL on out of memory. */
static const plume_weight *weight_for_table(const plume_weight *w, plume_weight *tiled, void **buf) {
    *buf = NULL;
    if (!cur_tiles || !plume_tiles_fit(w->type, w->rows, w->cols)) return w;
    const int q4 = w->type == PLUME_W_Q4;
    const size_t gb = (size_t)PLUME_TILE_ROWS * (size_t)(q4 ? w->cols / 2 : w->cols);
    const size_t gs = (size_t)PLUME_TILE_ROWS * (size_t)(w->cols / 32), ng = (size_t)(w->rows / PLUME_TILE_ROWS);
    uint8_t *b = plume_alloc(gb * ng + gs * ng * 2 + 64);
    if (!b) return NULL;
    uint16_t *ts = (uint16_t *)(b + gb * ng);
    for (size_t g = 0; g < ng; g++)
        plume_tiles_pack(w->type, w->cols, (const uint8_t *)w->data + g * gb, q4 ? w->scale + g * gs : NULL, b + g * gb,
                         q4 ? ts + g * gs : NULL);
    *tiled = *w;
    tiled->data = b;
    tiled->scale = q4 ? ts : w->scale;
    tiled->layout = PLUME_L_TILES;
    *buf = b;
    return tiled;
}

/* ---- matmul -------------------------------------------------------------------------- */

/* A sentinel Y value no kernel computes, to spot writes outside [r0, r1). */
static const float SENTINEL = -1234.5f;

/* One case: W [rows, cols] of a type, T tokens, rows r0..r1, strides ldx >= cols and
 * ldy >= rows; compare kt with scalar. Returns the number of failures (reported once). */
static int matmul_case(const plume_kernels *kt, plume_wtype type, int32_t rows, int32_t cols,
                       int32_t T, int32_t r0, int32_t r1, uint64_t seed) {
    uint64_t rng = seed;
    test_weight tw;
    int64_t ldx = cols + 3, ldy = rows + 5;
    /* x and y start one float past an aligned block: unaligned for every vector width */
    float *xb = plume_alloc((size_t)(T * ldx + 1) * sizeof(float));
    float *yb = plume_alloc((size_t)(T * ldy + 1) * sizeof(float));
    float *yref = malloc((size_t)(T * ldy) * sizeof(float));
    if (weight_new(&tw, type, rows, cols, &rng) || !xb || !yb || !yref) {
        CHECK(0, "out of memory");
        weight_free(&tw);
        plume_dealloc(xb);
        plume_dealloc(yb);
        free(yref);
        return 1;
    }
    float *x = xb + 1, *y = yb + 1;
    fill(x, T * ldx, &rng);
    for (int64_t i = 0; i < T * ldy; i++) y[i] = yref[i] = SENTINEL;
    plume_kernels_scalar.matmul[type](yref, ldy, x, ldx, T, &tw.w, r0, r1);
    plume_weight tiled;
    void *tbuf;
    const plume_weight *wk = weight_for_table(&tw.w, &tiled, &tbuf);
    if (wk) kt->matmul[type](y, ldy, x, ldx, T, wk, r0, r1);
    CHECK(wk, "out of memory");
    plume_dealloc(tbuf);

    int bad = 0;
    for (int32_t t = 0; t < T && !bad; t++) {
        for (int64_t r = 0; r < ldy && !bad; r++) {
            float got = y[t * ldy + r], want = yref[t * ldy + r];
            if (r < r0 || r >= r1) {
                if (memcmp(&got, &SENTINEL, sizeof got)) {
                    CHECK(0, "%s %s rows %d cols %d T %d [%d,%d): wrote y[t=%d, r=%lld] outside",
                          kt->name, type_names[type], rows, cols, T, r0, r1, t, (long long)r);
                    bad = 1;
                }
                continue;
            }
            double mag = 0;
            for (int32_t c = 0; c < cols; c++)
                mag += fabs((double)tw.dense[r * cols + c] * x[t * ldx + c]);
            double err = fabs((double)got - (double)want);
            if (!(err <= REL_TOL * mag)) {
                CHECK(0, "%s %s rows %d cols %d T %d [%d,%d): y[t=%d, r=%lld] = %.9g, scalar %.9g "
                      "(err %.3g, sum|w*x| %.3g)", kt->name, type_names[type], rows, cols, T,
                      r0, r1, t, (long long)r, got, want, err, mag);
                bad = 1;
            }
        }
    }
    weight_free(&tw);
    plume_dealloc(xb);
    plume_dealloc(yb);
    free(yref);
    return bad;
}

/* The table under test vs scalar: every type x awkward shapes, token counts and row ranges. */
static void test_matmul_matches_scalar(void) {
    static const int32_t cols_any[] = {1, 7, 31, 32, 64, 96, 100, 160, 1536 + 32, 1536 + 37};
    static const int32_t cols_q4[] = {32, 64, 96, 160, 1536 + 32};
    static const int32_t rows_list[] = {1, 3, 17, 33};
    static const int32_t tokens[] = {1, 2, 5, 7, 13};
    uint64_t seed = 1;
    for (int type = 0; type < PLUME_W_NTYPES; type++) {
            int q4 = type == PLUME_W_Q4;
            int ncols = q4 ? (int)(sizeof cols_q4 / sizeof *cols_q4)
                           : (int)(sizeof cols_any / sizeof *cols_any);
            for (int ci = 0; ci < ncols; ci++)
                for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
                    for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
                        int32_t cols = q4 ? cols_q4[ci] : cols_any[ci], rows = rows_list[ri];
                        /* all rows, then a range that starts past 0 and stops short */
                        int32_t r0 = rows > 2 ? 1 + rows / 5 : 0, r1 = rows > 2 ? rows - 1 : rows;
                        matmul_case(cur, (plume_wtype)type, rows, cols, tokens[ti], 0, rows, seed++);
                        matmul_case(cur, (plume_wtype)type, rows, cols, tokens[ti], r0, r1, seed++);
                    }
    }
}

/* Every token's row of a T-token call is bit-identical to a call with that token alone
 * (plume_batch depends on it): every type, token counts that cross token blocks. */
static void test_matmul_rows_independent_of_T(void) {
    static const int32_t tokens[] = {2, 3, 5, 9, 17};
    uint64_t rng = 77;
    for (int type = 0; type < PLUME_W_NTYPES; type++)
        for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
            int32_t T = tokens[ti], rows = cur_tiles ? 48 : 37, cols = type == PLUME_W_Q4 || cur_tiles ? 1024 + 32 : 1024 + 7;
            test_weight tw;
            float *x = malloc((size_t)T * cols * sizeof(float)), *yT = malloc((size_t)T * rows * sizeof(float));
            float *y1 = malloc((size_t)rows * sizeof(float));
            if (weight_new(&tw, (plume_wtype)type, rows, cols, &rng) || !x || !yT || !y1) {
                CHECK(0, "out of memory");
            } else {
                fill(x, (int64_t)T * cols, &rng);
                plume_weight tiled;
                void *tbuf;
                const plume_weight *wk = weight_for_table(&tw.w, &tiled, &tbuf);
                CHECK(wk, "out of memory");
                if (!wk) wk = &tw.w;
                cur->matmul[type](yT, rows, x, cols, T, wk, 0, rows);
                for (int32_t t = 0; t < T; t++) {
                    cur->matmul[type](y1, rows, x + (int64_t)t * cols, cols, 1, wk, 0, rows);
                    CHECK(!memcmp(y1, yT + (int64_t)t * rows, (size_t)rows * sizeof(float)),
                          "%s %s%s: token %d of %d differs from the same token alone", cur->name, type_names[type],
                          wk->layout == PLUME_L_TILES ? " tiles" : "", t, T);
                }
                plume_dealloc(tbuf);
            }
            weight_free(&tw);
            free(x);
            free(yT);
            free(y1);
        }
}

/* Larger shapes that cross row panels and token blocks: 300 rows, 64 tokens. */
static void test_matmul_large(void) {
    for (int type = 0; type < PLUME_W_NTYPES; type++) {
        int32_t cols = type == PLUME_W_Q4 ? 1024 + 64 : 1024 + 61;
        matmul_case(cur, (plume_wtype)type, 300, cols, 64, 5, 297, 1000 + (uint64_t)type);
        matmul_case(cur, (plume_wtype)type, 300, cols, 1, 13, 300, 2000 + (uint64_t)type);
    }
}

/* A table that reads tiled Q8/Q4 weights (reads_tiles) against scalar on the same weights
 * as rows: shapes of whole groups, row ranges that split groups or not, token counts across
 * token blocks and row panels; then the rows of a T-token call against each token alone. */
static void test_matmul_tiles(void) {
    static const int32_t shapes[][2] = {{16, 32}, {32, 64}, {48, 160}, {32, 1536 + 32}, {304, 1024 + 64}};
    static const int32_t tokens[] = {1, 2, 5, 7, 12, 13, 24, 64};
    uint64_t seed = 3000;
    cur_tiles = 1;
    for (int ty = 0; ty < 2; ty++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
                const plume_wtype type = ty ? PLUME_W_Q4 : PLUME_W_Q8;
                const int32_t rows = shapes[si][0], cols = shapes[si][1], T = tokens[ti];
                if (T == 64 && rows < 300) continue;
                matmul_case(cur, type, rows, cols, T, 0, rows, seed++);
                matmul_case(cur, type, rows, cols, T, 1 + rows / 5, rows - 1, seed++);
                if (rows > 16) matmul_case(cur, type, rows, cols, T, 16, rows, seed++);
            }
    test_matmul_rows_independent_of_T();
    cur_tiles = 0;
}

/* An empty row range or T = 0 writes nothing. */
static void test_matmul_empty(void) {
    uint64_t rng = 7;
    for (int type = 0; type < PLUME_W_NTYPES; type++) {
        test_weight tw;
        float x[64], y[8];
        fill(x, 64, &rng);
        if (weight_new(&tw, (plume_wtype)type, 8, 64, &rng)) {
            CHECK(0, "out of memory");
            weight_free(&tw);
            return;
        }
        for (int i = 0; i < 8; i++) y[i] = SENTINEL;
        cur->matmul[type](y, 8, x, 64, 1, &tw.w, 3, 3);
        cur->matmul[type](y, 8, x, 64, 0, &tw.w, 0, 8);
        for (int i = 0; i < 8; i++)
            CHECK(y[i] == SENTINEL, "%s %s: empty call wrote y[%d]", cur->name, type_names[type], i);
        weight_free(&tw);
    }
}

/* ---- dot, axpy ----------------------------------------------------------------------- */

/* dot and axpy at every length 1..200 and a long one, from unaligned pointers. */
static void test_dot_axpy_match_scalar(void) {
    enum { NMAX = 4099 };
    float *a = malloc((NMAX + 1) * sizeof(float)), *b = malloc((NMAX + 1) * sizeof(float));
    float *y = malloc((NMAX + 2) * sizeof(float)), *yref = malloc((NMAX + 2) * sizeof(float));
    if (!a || !b || !y || !yref) {
        CHECK(0, "out of memory");
        free(a), free(b), free(y), free(yref);
        return;
    }
    uint64_t rng = 42;
    fill(a, NMAX + 1, &rng);
    fill(b, NMAX + 1, &rng);
    for (int32_t n = 1;; n = n < 200 ? n + 1 : NMAX) {
        double mag = 0;
        for (int32_t i = 0; i < n; i++) mag += fabs((double)a[1 + i] * b[i]);
        float got = cur->dot(a + 1, b, n), want = plume_kernels_scalar.dot(a + 1, b, n);
        CHECK(fabs((double)got - want) <= REL_TOL * mag, "%s dot n=%d: %.9g, scalar %.9g",
              cur->name, n, got, want);

        /* y[0] and y[n + 1] guard the ends; x = a + 1, so y[i] moves by alpha * a[i] */
        fill(y, n + 2, &rng);
        memcpy(yref, y, (size_t)(n + 2) * sizeof(float));
        float alpha = 0.75f - plume_rng_float(&rng);
        cur->axpy(y + 1, alpha, a + 1, n);
        plume_kernels_scalar.axpy(yref + 1, alpha, a + 1, n);
        for (int32_t i = 0; i < n + 2; i++) {
            /* one product and one add: only the rounding FMA skips may differ */
            double tol = i == 0 || i == n + 1 ? 0 : REL_TOL * (fabs(yref[i]) + fabs(alpha * a[i]));
            CHECK(fabs((double)y[i] - yref[i]) <= tol, "%s axpy n=%d: y[%d] = %.9g, scalar %.9g",
                  cur->name, n, i - 1, y[i], yref[i]);
        }
        if (n == NMAX) break;
    }
    free(a), free(b), free(y), free(yref);
}

/* ---- attention ----------------------------------------------------------------------- */

/* A block's output against a float64 reference. Scores summed in another order move by about
 * 2^-24 sqrt(hd) of sum |q k|, bounded by REL_TOL of it (mag); the weights p_j then move
 * relatively by twice that, plus 2e-7 for a polynomial exp. So m is checked within
 * REL_TOL * mag, and l and the output acc / l relatively within 2 REL_TOL mag + 1e-5 (of
 * l, and of sum_j p_j |v_j| / l): a dropped or doubled row (1/n of it, n <= 96 here) fails. */
enum { ATTN_NMAX = 96, ATTN_RUNS = 3 };

typedef struct {
    int32_t nh, hd, nrun;
    int32_t len[ATTN_RUNS];
    int i8[ATTN_RUNS];
    float *q;                       /* [nh, hd], scaled so scores are O(1) */
    float *kf[ATTN_RUNS], *vf[ATTN_RUNS]; /* [len, stride] float rows */
    int8_t *kq[ATTN_RUNS], *vq[ATTN_RUNS];
    float *ks[ATTN_RUNS], *vs[ATTN_RUNS]; /* [len, SSTRIDE] */
    plume_kv_run run[ATTN_RUNS];
} attn_case;

enum { SSTRIDE = 3 };

/* Element i of row j of run k, as the kernels see it (int8 times its scale). */
static double attn_elem(const attn_case *a, int k, int v, int32_t j, int32_t i) {
    int64_t at = (int64_t)j * a->run[k].stride + i;
    if (!a->i8[k]) return (v ? a->vf[k] : a->kf[k])[at];
    return (double)(v ? a->vq[k] : a->kq[k])[at] * (v ? a->vs[k] : a->ks[k])[j * SSTRIDE];
}

/* Random rows for the runs (row stride hd + 5), float or int8 as asked. 0, or -1 on OOM. */
static int attn_case_new(attn_case *a, int32_t nh, int32_t hd, int32_t nrun, const int32_t *len, const int *i8,
                         uint64_t *rng) {
    memset(a, 0, sizeof *a);
    a->nh = nh, a->hd = hd, a->nrun = nrun;
    a->q = malloc((size_t)nh * (size_t)hd * sizeof(float));
    if (!a->q) return -1;
    fill(a->q, (int64_t)nh * hd, rng);
    for (int64_t i = 0; i < (int64_t)nh * hd; i++) a->q[i] *= 2.0f / sqrtf((float)hd);
    for (int k = 0; k < nrun; k++) {
        int64_t stride = hd + 5, n = (int64_t)len[k] * stride + 1;
        a->len[k] = len[k], a->i8[k] = i8[k];
        a->kf[k] = malloc((size_t)n * sizeof(float));
        a->vf[k] = malloc((size_t)n * sizeof(float));
        a->kq[k] = malloc((size_t)n);
        a->vq[k] = malloc((size_t)n);
        a->ks[k] = malloc((size_t)(len[k] * SSTRIDE + 1) * sizeof(float));
        a->vs[k] = malloc((size_t)(len[k] * SSTRIDE + 1) * sizeof(float));
        if (!a->kf[k] || !a->vf[k] || !a->kq[k] || !a->vq[k] || !a->ks[k] || !a->vs[k]) return -1;
        fill(a->kf[k], n, rng);
        fill(a->vf[k], n, rng);
        for (int64_t i = 0; i < n; i++) {
            a->kq[k][i] = (int8_t)(plume_rng_next(rng) % 255 - 127);
            a->vq[k][i] = (int8_t)(plume_rng_next(rng) % 255 - 127);
        }
        for (int32_t j = 0; j < len[k] * SSTRIDE + 1; j++) {
            a->ks[k][j] = (0.5f + plume_rng_float(rng)) / 127.0f;
            a->vs[k][j] = (0.5f + plume_rng_float(rng)) / 127.0f;
        }
        a->run[k] = i8[k] ? (plume_kv_run){a->kq[k], a->vq[k], a->ks[k], a->vs[k], stride, SSTRIDE, len[k]}
                          : (plume_kv_run){a->kf[k], a->vf[k], NULL, NULL, stride, 0, len[k]};
    }
    return 0;
}

static void attn_case_free(attn_case *a) {
    free(a->q);
    for (int k = 0; k < ATTN_RUNS; k++) {
        free(a->kf[k]), free(a->vf[k]), free(a->kq[k]), free(a->vq[k]), free(a->ks[k]), free(a->vs[k]);
    }
}

/* Check one head's state (m, l, acc [hd]) of the case's runs [r0, r1) against float64. */
static void attn_check_head(const char *what, const attn_case *a, int32_t h, int r0, int r1, float m, float l,
                            const float *acc) {
    int32_t hd = a->hd;
    double sd[ATTN_NMAX * ATTN_RUNS], md = -INFINITY, mag = 0, ld = 0;
    int32_t n = 0;
    for (int k = r0; k < r1; k++)
        for (int32_t j = 0; j < a->len[k]; j++, n++) {
            double s = 0, sm = 0;
            for (int32_t i = 0; i < hd; i++) {
                double e = attn_elem(a, k, 0, j, i);
                s += a->q[(int64_t)h * hd + i] * e;
                sm += fabs(a->q[(int64_t)h * hd + i] * e);
            }
            sd[n] = s, md = s > md ? s : md, mag = sm > mag ? sm : mag;
        }
    for (int32_t j = 0; j < n; j++) ld += exp(sd[j] - md);
    double rel = 2 * REL_TOL * mag + 1e-5, lg = (double)l * exp((double)m - md);
    CHECK(fabs((double)m - md) <= REL_TOL * mag + 1e-6, "%s nh=%d hd=%d h=%d: m %.9g, float64 %.9g", what, a->nh, hd, h,
          m, md);
    CHECK(fabs(lg - ld) <= rel * ld, "%s nh=%d hd=%d h=%d: l %.9g, float64 %.9g", what, a->nh, hd, h, lg, ld);
    for (int32_t i = 0; i < hd; i++) {
        double o = 0, mo = 0;
        int32_t j = 0;
        for (int k = r0; k < r1; k++)
            for (int32_t jj = 0; jj < a->len[k]; jj++, j++) {
                double p = exp(sd[j] - md), v = attn_elem(a, k, 1, jj, i);
                o += p * v, mo += p * fabs(v);
            }
        double got = (double)acc[i] / l;
        if (!(fabs(got - o / ld) <= rel * mo / ld + 1e-7)) {
            CHECK(0, "%s nh=%d hd=%d h=%d: out[%d] %.9g, float64 %.9g", what, a->nh, hd, h, i, got, o / ld);
            return;
        }
    }
}

/* attn_block of table kt over all runs at once, then over runs [0, 1) and [1, nrun) folded
 * with plume_attn_fold, both against float64. */
static void attn_case_check(const plume_kernels *kt, const attn_case *a) {
    int32_t nh = a->nh, hd = a->hd;
    float *acc = malloc((size_t)nh * (size_t)hd * sizeof(float)), *acc2 = malloc((size_t)nh * (size_t)hd * sizeof(float));
    float *p = malloc((size_t)nh * ATTN_NMAX * ATTN_RUNS * sizeof(float)), m[16], l[16], m2[16], l2[16];
    if (!acc || !acc2 || !p) {
        CHECK(0, "out of memory");
        free(acc), free(acc2), free(p);
        return;
    }
    char what[64];
    snprintf(what, sizeof what, "%s attn_block", kt->name);
    kt->attn_block(acc, m, l, a->q, nh, hd, a->run, a->nrun, p);
    for (int32_t h = 0; h < nh; h++) attn_check_head(what, a, h, 0, a->nrun, m[h], l[h], acc + (int64_t)h * hd);
    if (a->nrun > 1) {
        snprintf(what, sizeof what, "%s attn_block folded", kt->name);
        kt->attn_block(acc, m, l, a->q, nh, hd, a->run, 1, p);
        kt->attn_block(acc2, m2, l2, a->q, nh, hd, a->run + 1, a->nrun - 1, p);
        for (int32_t h = 0; h < nh; h++) {
            plume_attn_fold(acc + (int64_t)h * hd, &m[h], &l[h], acc2 + (int64_t)h * hd, m2[h], l2[h], hd);
            attn_check_head(what, a, h, 0, a->nrun, m[h], l[h], acc + (int64_t)h * hd);
        }
    }
    free(acc), free(acc2), free(p);
}

/* The scalar table and the current one on head counts that leave chunks of 8, 4 and 1 (8 and
 * 4 are E2B's and E4B's query heads per KV head), head sizes with vector tails, runs of float
 * and int8 rows mixed, 1..96 rows each. */
static void test_attn_block(void) {
    static const int32_t nhs[] = {1, 2, 3, 4, 8, 9, 13}, hds[] = {1, 7, 16, 40, 72, 256, 512};
    uint64_t rng = 7;
    for (size_t a = 0; a < sizeof nhs / sizeof *nhs; a++)
        for (size_t b = 0; b < sizeof hds / sizeof *hds; b++) {
            int32_t nrun = 1 + (int32_t)((a + b) % ATTN_RUNS), len[ATTN_RUNS];
            int i8[ATTN_RUNS];
            for (int k = 0; k < nrun; k++) {
                len[k] = 1 + (int32_t)(plume_rng_next(&rng) % ATTN_NMAX);
                i8[k] = (int)((a + b + (size_t)k) % 2);
            }
            attn_case c;
            if (attn_case_new(&c, nhs[a], hds[b], nrun, len, i8, &rng)) {
                CHECK(0, "out of memory");
                attn_case_free(&c);
                return;
            }
            attn_case_check(&plume_kernels_scalar, &c);
            attn_case_check(cur, &c);
            attn_case_free(&c);
        }
}

/* ---- elementwise --------------------------------------------------------------------- */

/* A polynomial exp/tanh against libm: tanh's absolute error is about 1e-7, so allow 2e-6 of
 * the magnitude of each result (gelu: |x| |u|; softcap: the cap). */
#define ELEMENTWISE_TOL 2e-6

/* gelu_mul and softcap at every length 1..80 and a long one, over a wide range of inputs
 * (tanh saturating at both ends, tiny values, zero). */
static void test_elementwise_match_scalar(void) {
    enum { NMAX = 5000 };
    float *g = malloc(NMAX * sizeof(float)), *gref = malloc(NMAX * sizeof(float));
    float *u = malloc(NMAX * sizeof(float));
    uint64_t rng = 7;
    for (int32_t n = 1;; n = n < 80 ? n + 1 : NMAX) {
        for (int32_t i = 0; i < n; i++) {
            g[i] = gref[i] = (plume_rng_float(&rng) - 0.5f) * (i % 3 ? 12.0f : 0.02f);
            u[i] = (plume_rng_float(&rng) - 0.5f) * 4.0f;
        }
        if (n > 3) g[3] = gref[3] = 0.0f;
        cur->gelu_mul(g, u, n);
        plume_kernels_scalar.gelu_mul(gref, u, n);
        for (int32_t i = 0; i < n; i++) {
            double x = fabs((double)gref[i]) + 1e-3;
            CHECK(fabs((double)g[i] - gref[i]) <= ELEMENTWISE_TOL * (x + fabs(u[i])), "%s gelu_mul n=%d i=%d: %.9g vs %.9g",
                  cur->name, n, i, g[i], gref[i]);
        }
        for (int32_t i = 0; i < n; i++) g[i] = gref[i] = (plume_rng_float(&rng) - 0.5f) * 400.0f;
        cur->softcap(g, n, 30.0f);
        plume_kernels_scalar.softcap(gref, n, 30.0f);
        for (int32_t i = 0; i < n; i++)
            CHECK(fabs((double)g[i] - gref[i]) <= ELEMENTWISE_TOL * 30.0, "%s softcap n=%d i=%d: %.9g vs %.9g", cur->name,
                  n, i, g[i], gref[i]);
        if (n == NMAX) break;
    }
    free(g), free(gref), free(u);
}

/* gelu_mul and softcap cut into pieces that start on multiples of 16 (the last ending at n)
 * give the bits of one call (kernels.h): forward.c applies them per matmul chunk. */
static void test_elementwise_cut_on_16(void) {
    enum { NMAX = 4200 };
    float *g = malloc(NMAX * sizeof(float)), *whole = malloc(NMAX * sizeof(float)), *u = malloc(NMAX * sizeof(float));
    uint64_t rng = 11;
    const int32_t lens[] = {1, 15, 16, 17, 40, 71, 200, 1000, 4096, NMAX};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int32_t n = lens[li];
        for (int f = 0; f < 2; f++) {
            for (int32_t i = 0; i < n; i++) {
                g[i] = whole[i] = (plume_rng_float(&rng) - 0.5f) * (f ? 400.0f : 12.0f);
                u[i] = (plume_rng_float(&rng) - 0.5f) * 4.0f;
            }
            if (f) cur->softcap(whole, n, 30.0f);
            else cur->gelu_mul(whole, u, n);
            for (int32_t a = 0; a < n;) { /* pieces of 16, 32, ... 112 floats */
                int32_t len = 16 * (1 + (int32_t)(plume_rng_float(&rng) * 7.0f));
                if (a + len > n) len = n - a;
                if (f) cur->softcap(g + a, len, 30.0f);
                else cur->gelu_mul(g + a, u + a, len);
                a += len;
            }
            CHECK(!memcmp(g, whole, (size_t)n * sizeof *g), "%s %s n=%d: pieces differ from one call in bits", cur->name,
                  f ? "softcap" : "gelu_mul", n);
        }
    }
    free(g), free(whole), free(u);
}

/* sigmoid_mul at every length 1..80 and a long one: gates from saturated (+-90, where exp(-|g|)
 * underflows) to tiny; then as silu in place (y, a and g one array) and as a GLU with y = a.
 * The polynomial exp's relative error (2e-7) moves sigmoid by less than that, relative. */
static void test_sigmoid_mul_match_scalar(void) {
    enum { NMAX = 5000 };
    float *a = malloc(NMAX * sizeof(float)), *g = malloc(NMAX * sizeof(float));
    float *y = malloc(NMAX * sizeof(float)), *yref = malloc(NMAX * sizeof(float));
    uint64_t rng = 29;
    for (int32_t n = 1;; n = n < 80 ? n + 1 : NMAX) {
        for (int32_t i = 0; i < n; i++) {
            g[i] = (plume_rng_float(&rng) - 0.5f) * (i % 5 == 1 ? 180.0f : i % 3 ? 16.0f : 0.01f);
            a[i] = (plume_rng_float(&rng) - 0.5f) * 4.0f;
        }
        if (n > 2) g[2] = 0.0f;
        cur->sigmoid_mul(y, a, g, n);
        plume_sigmoid_mul_ref(yref, a, g, n);
        for (int32_t i = 0; i < n; i++) {
            double want = (double)a[i] / (1.0 + exp(-(double)g[i]));
            CHECK(fabs((double)y[i] - yref[i]) <= ELEMENTWISE_TOL * fabs(a[i]) + 1e-30, "%s sigmoid_mul n=%d i=%d: %.9g vs %.9g",
                  cur->name, n, i, y[i], yref[i]);
            CHECK(fabs(yref[i] - want) <= 1e-6 * fabs(a[i]) + 1e-30, "reference sigmoid_mul i=%d: %.9g vs libm %.9g", i,
                  yref[i], want);
        }
        memcpy(y, g, (size_t)n * sizeof(float)); /* silu in place */
        memcpy(yref, g, (size_t)n * sizeof(float));
        cur->sigmoid_mul(y, y, y, n);
        plume_sigmoid_mul_ref(yref, yref, yref, n);
        for (int32_t i = 0; i < n; i++)
            CHECK(fabs((double)y[i] - yref[i]) <= ELEMENTWISE_TOL * fabs(g[i]) + 1e-30, "%s silu n=%d i=%d: %.9g vs %.9g",
                  cur->name, n, i, y[i], yref[i]);
        memcpy(y, a, (size_t)n * sizeof(float)); /* y = a */
        cur->sigmoid_mul(y, y, g, n);
        plume_sigmoid_mul_ref(yref, a, g, n);
        for (int32_t i = 0; i < n; i++)
            CHECK(fabs((double)y[i] - yref[i]) <= ELEMENTWISE_TOL * fabs(a[i]) + 1e-30, "%s glu n=%d i=%d: %.9g vs %.9g",
                  cur->name, n, i, y[i], yref[i]);
        if (n == NMAX) break;
    }
    free(a), free(g), free(y), free(yref);
}

/* softmax at every length 1..80 and long rows, with a wide spread (weights far below the max
 * underflow to 0 in both) and rows of equal values; each weight within 1e-6 of the scalar one
 * relative to the largest (1), and the rows sum to 1. */
static void test_softmax_match_scalar(void) {
    enum { NMAX = 2600 };
    float *x = malloc(NMAX * sizeof(float)), *xref = malloc(NMAX * sizeof(float));
    uint64_t rng = 23;
    for (int32_t n = 1;; n = n < 80 ? n + 1 : n == 80 ? 2521 : NMAX) {
        for (int32_t i = 0; i < n; i++) x[i] = xref[i] = n % 5 == 0 ? 3.5f : (plume_rng_float(&rng) - 0.5f) * 60.0f;
        cur->softmax(x, n);
        plume_kernels_scalar.softmax(xref, n);
        double sum = 0;
        for (int32_t i = 0; i < n; i++) {
            sum += x[i];
            CHECK(fabs((double)x[i] - xref[i]) <= 1e-6, "%s softmax n=%d i=%d: %.9g vs %.9g", cur->name, n, i, x[i], xref[i]);
        }
        CHECK(fabs(sum - 1.0) < 1e-5, "%s softmax n=%d sums to %.9g", cur->name, n, sum);
        if (n == NMAX) break;
    }
    free(x), free(xref);
}

/* rmsnorm gives the reference's bits at every length 1..80 and the model's (256, 512, 1536,
 * 2048, 8960 and odd ones past them), with a weight and without, in place and not; and the
 * reference itself is x / rms(x) * w within float rounding (one independent double sum). */
static void test_rmsnorm_same_bits(void) {
    static const int32_t longs[] = {256, 512, 1536, 1539, 2048, 8960, 8967};
    enum { NMAX = 8967 };
    float *x = malloc(NMAX * sizeof(float)), *w = malloc(NMAX * sizeof(float));
    float *y = malloc(NMAX * sizeof(float)), *yref = malloc(NMAX * sizeof(float));
    uint64_t rng = 17;
    int bad = 0, far = 0;
    for (int32_t li = 0; li < 80 + (int32_t)(sizeof longs / sizeof *longs); li++) {
        const int32_t n = li < 80 ? li + 1 : longs[li - 80];
        for (int32_t i = 0; i < n; i++) {
            x[i] = (plume_rng_float(&rng) - 0.5f) * (i % 7 ? 3.0f : 300.0f); /* outlier channels */
            w[i] = (plume_rng_float(&rng) - 0.5f) * 2.0f;
        }
        for (int wi = 0; wi < 2; wi++) {
            const float *ww = wi ? w : NULL;
            plume_rmsnorm_ref(yref, x, ww, n, 1e-6f);
            cur->rmsnorm(y, x, ww, n, 1e-6f);
            bad += memcmp(y, yref, (size_t)n * sizeof(float)) != 0;
            memcpy(y, x, (size_t)n * sizeof(float)); /* in place */
            cur->rmsnorm(y, y, ww, n, 1e-6f);
            bad += memcmp(y, yref, (size_t)n * sizeof(float)) != 0;
            double ss = 0;
            for (int32_t i = n - 1; i >= 0; i--) ss += (double)x[i] * x[i];
            const double r = 1.0 / sqrt(ss / n + 1e-6);
            for (int32_t i = 0; i < n; i++) {
                const double want = (double)x[i] * r * (ww ? ww[i] : 1.0);
                far += fabs(yref[i] - want) > 4e-7 * fabs(want) + 1e-30;
            }
        }
    }
    CHECK(!bad, "%s rmsnorm: %d cases differ from plume_rmsnorm_ref's bits", cur->name, bad);
    CHECK(!far, "plume_rmsnorm_ref: %d outputs off x / rms(x) * w by more than float rounding", far);
    free(x), free(w), free(y), free(yref);
}

/* ---- dispatch ------------------------------------------------------------------------ */

/* Names select their table, unknown names give NULL, NULL and "" give the best available. */
static void test_dispatch_names(void) {
    const char *names[8];
    int n = plume_kernels_available(names, 8);
    CHECK(n >= 1 && !strcmp(names[0], "scalar"), "scalar is not the first available table");
    for (int i = 0; i < n; i++) {
        const plume_kernels *kt = plume_kernels_get(names[i]);
        CHECK(kt && !strcmp(kt->name, names[i]), "plume_kernels_get(\"%s\") gave %s", names[i],
              kt ? kt->name : "NULL");
        for (int type = 0; type < PLUME_W_NTYPES; type++)
            CHECK(kt && kt->matmul[type], "%s has no matmul for %s", names[i], type_names[type]);
        CHECK(kt && kt->dot && kt->axpy && kt->gelu_mul && kt->softcap && kt->sigmoid_mul && kt->softmax && kt->rmsnorm &&
                  kt->attn_block,
              "%s lacks a vector kernel", names[i]);
    }
    CHECK(plume_kernels_get("scalar") == &plume_kernels_scalar, "\"scalar\" is not the reference");
    CHECK(plume_kernels_get("sse9") == NULL, "an unknown name gave a table");
    CHECK(plume_kernels_get("AVX2") == NULL, "names are case-sensitive, \"AVX2\" gave a table");
    const char *env = getenv("PLUME_ISA");
    if (!env || !*env) {
        const plume_kernels *best = plume_kernels_get(NULL);
        CHECK(best && !strcmp(best->name, names[n - 1]), "NULL gave %s, best available is %s",
              best ? best->name : "NULL", names[n - 1]);
        CHECK(plume_kernels_get("") == best, "\"\" and NULL disagree");
    }
#if defined(__x86_64__)
    int has512 = 0;
    for (int i = 0; i < n; i++) has512 |= !strcmp(names[i], "avx512");
    CHECK(has512 == (plume_kernels_get("avx512") != NULL), "avx512 availability disagrees");
    CHECK(plume_kernels_get("neon") == NULL, "neon on x86-64");
#endif
#if defined(__aarch64__)
    CHECK(plume_kernels_get("neon") == &plume_kernels_neon, "neon not found on aarch64");
    CHECK(plume_kernels_get("avx2") == NULL, "avx2 on aarch64");
#endif
}

/* Run one test on the current table, named after it ("avx2_matmul_large"). */
static void run_on_table(const char *test, void (*fn)(void)) {
    char name[96];
    snprintf(name, sizeof name, "%s_%s", cur->name, test);
    t_run(name, fn);
}

int main(void) {
    RUN(test_dispatch_names);
    const char *names[8];
    int n = plume_kernels_available(names, 8), tested = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "scalar")) continue; /* the reference itself */
        cur = plume_kernels_get(names[i]);
        if (!cur) continue; /* test_dispatch_names has failed already */
        tested++;
        run_on_table("matmul_matches_scalar", test_matmul_matches_scalar);
        run_on_table("matmul_large", test_matmul_large);
        run_on_table("matmul_rows_independent_of_T", test_matmul_rows_independent_of_T);
        run_on_table("matmul_empty", test_matmul_empty);
        if (cur->reads_tiles) run_on_table("matmul_tiles", test_matmul_tiles);
        run_on_table("dot_axpy_match_scalar", test_dot_axpy_match_scalar);
        run_on_table("elementwise_match_scalar", test_elementwise_match_scalar);
        run_on_table("elementwise_cut_on_16", test_elementwise_cut_on_16);
        run_on_table("sigmoid_mul_match_scalar", test_sigmoid_mul_match_scalar);
        run_on_table("softmax_match_scalar", test_softmax_match_scalar);
        run_on_table("rmsnorm_same_bits", test_rmsnorm_same_bits);
        run_on_table("attn_block", test_attn_block);
    }
    if (!tested) printf("  (no SIMD table on this CPU: only the dispatcher was tested)\n");
    return t_total_failed ? 1 : 0;
}
