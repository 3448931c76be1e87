/* bench_qact.c -- matmuls with int8 activations (qact.h) against the float32-activation kernel
 * of the same ISA, single-threaded, at the Gemma 4 E2B shapes: [6144, 1536] (gate/up),
 * [1536, 6144] (down), the same of the double-wide layers 15-34 ([12288, 1536], [1536,
 * 12288]), [2048, 1536] (q of a sliding layer); T = 64 and 512 tokens (prefill)
 * and T = 1 (decode) over 8 copies of the matrix, so that the weights come from memory as in
 * a decode step; Q8 and Q4 weights; the AVX-512 VNNI kernels with the avx512 table and the
 * AVX2 (or AVX-VNNI) ones with the avx2 table. Not a test: nothing here can fail.
 *
 * Per case, the median of RUNS calls over all rows: GFLOP/s (2 rows cols T / time) of the float
 * kernel, of the int8 matmul alone and with its quantizer of X, and the speedup. T = 1 also
 * gives GB/s of weights read (with the quantizer). "tok/s" is what one core would reach if
 * every matmul of an E2B token ran at that rate: GFLOP/s / E2B_GFLOP_PER_TOKEN (attention,
 * norms and threads not counted).
 *
 * vnni-tiles is avx512vnni (and the avx512 float kernel) on the same weights in PLUME_L_TILES.
 *
 *   make benches && build/bench/bench_qact [T [KERNEL [SHAPES]]]   (KERNEL: avx512vnni,
 *       vnni-tiles, avx2, avx-vnni, or all; SHAPES: rows x cols pairs, e.g. E4B's
 *       10240x2560,2560x10240,2048x2560: the gate/up, down and sliding q projections)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"
#include "kernels/qact.h"

enum { RUNS = 5 }; /* timed runs per figure, median reported */

/* Multiply-adds of one E2B token through every matmul of the text model (e2b-config.json):
 *   FFN  3 D I: 15 layers I = 6144, 20 layers I = 12288       1557.1 M
 *   q + o 2 D H hd: 28 sliding hd = 256, 7 full hd = 512       264.2 M
 *   k + v 2 D hd on the 15 layers that own a KV cache            14.2 M
 *   PLE gate + projection 2 D Dp x 35, model projection 8960 D   41.3 M
 * = 1876.8 M multiply-adds = 3.754 GFLOP (the LM head is left out: prefill needs one row). */
static const double E2B_GFLOP_PER_TOKEN = 3.754;

/* A random [rows, cols] Q8 or Q4 matrix, scales 0.01, in the rows or the tiles layout
 * (kernels.h); returns 0 or -1 (out of memory). */
static int weight_new(plume_weight *w, plume_wtype type, int32_t rows, int32_t cols, int tiles) {
    uint64_t rng = 7;
    size_t bytes = type == PLUME_W_Q8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
    size_t nscale = type == PLUME_W_Q8 ? (size_t)rows : (size_t)rows * (cols / 32);
    uint8_t *data = plume_alloc(bytes);
    uint16_t *scale = plume_alloc(nscale * 2);
    *w = (plume_weight){.type = type, .rows = rows, .cols = cols, .data = data, .scale = scale};
    if (!data || !scale) return -1;
    for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)plume_rng_next(&rng);
    for (size_t i = 0; i < nscale; i++) scale[i] = plume_f32_to_f16(0.01f);
    if (tiles && plume_tiles_fit(type, rows, cols)) { /* random bytes either way: pack in place */
        const size_t gb = bytes / (size_t)(rows / PLUME_TILE_ROWS);
        uint8_t *g = malloc(gb);
        if (!g) return -1;
        for (int32_t i = 0; i < rows / PLUME_TILE_ROWS; i++) {
            memcpy(g, data + i * gb, gb);
            plume_tiles_pack(type, cols, g, scale, data + i * gb, scale); /* Q4 scales all 0.01 */
        }
        free(g);
        w->layout = PLUME_L_TILES;
    }
    return 0;
}

/* Free a matrix of weight_new (also a half-made one). */
static void weight_free(plume_weight *w) {
    plume_dealloc((void *)w->data);
    plume_dealloc((void *)w->scale);
}

/* Compare doubles for qsort. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* An int8 kernel pair and the float table it is compared with. */
typedef struct {
    const char *name;
    const plume_kernels *k;
    plume_qact_quantize_fn quantize;
    plume_qact_matmul_fn matmul;
    int tiles; /* the weights in PLUME_L_TILES (for the float kernel too) */
} bench_kern;

/* Everything one case needs: X as floats and quantized, Y; copies of the weight (T = 1). */
typedef struct {
    const bench_kern *kern;
    const plume_weight *w;
    int32_t copies;
    int32_t T;
    float *x, *y, *xs;
    int8_t *xq;
    int32_t *xcor;
} bench_case;

enum { RUN_FLOAT, RUN_INT8, RUN_QUANT_INT8 };

/* One call of the measured work (per copy of the weight). */
static void run_once(const bench_case *b, int what) {
    for (int32_t i = 0; i < b->copies; i++) {
        const plume_weight *w = &b->w[i];
        switch (what) {
        case RUN_FLOAT:
            b->kern->k->matmul[w->type](b->y, w->rows, b->x, w->cols, b->T, w, 0, w->rows);
            break;
        case RUN_QUANT_INT8:
            b->kern->quantize(b->x, w->cols, b->T, w->cols, b->xq, b->xs, b->xcor);
            /* fall through */
        case RUN_INT8:
            b->kern->matmul(b->y, w->rows, b->xq, b->xs, b->xcor, b->T, w, 0, w->rows);
            break;
        default: break;
        }
    }
}

/* Median seconds of RUNS calls (after one to warm caches). */
static double time_median(const bench_case *b, int what) {
    double t[RUNS];
    run_once(b, what);
    for (int k = 0; k < RUNS; k++) {
        double t0 = plume_now();
        run_once(b, what);
        t[k] = plume_now() - t0;
    }
    qsort(t, RUNS, sizeof *t, cmp_double);
    return t[RUNS / 2];
}

/* Time one kernel, shape, weight type and T; print one line. Returns 0 or -1 (out of memory). */
static int bench_shape(const bench_kern *kern, plume_wtype type, int32_t rows, int32_t cols, int32_t T) {
    enum { COPIES = 8 };
    plume_weight w[COPIES];
    bench_case b = {.kern = kern, .w = w, .copies = T == 1 ? COPIES : 1, .T = T};
    int rc = -1, made = 0;
    for (; made < b.copies; made++)
        if (weight_new(&w[made], type, rows, cols, kern->tiles)) {
            made++;
            goto done;
        }
    b.x = plume_alloc((size_t)T * cols * sizeof(float));
    b.y = plume_alloc((size_t)T * rows * sizeof(float));
    b.xs = plume_alloc((size_t)T * plume_qact_groups(cols) * sizeof(float));
    b.xq = plume_alloc((size_t)T * plume_qact_stride(cols));
    b.xcor = plume_alloc((size_t)T * plume_qact_lanes(cols) * sizeof(int32_t));
    if (!b.x || !b.y || !b.xs || !b.xq || !b.xcor) goto done;
    uint64_t rng = 3;
    for (int64_t i = 0; i < (int64_t)T * cols; i++) b.x[i] = 2.0f * plume_rng_float(&rng) - 1.0f;
    kern->quantize(b.x, cols, T, cols, b.xq, b.xs, b.xcor);

    double gflop = 2.0 * rows * cols * T * b.copies / 1e9;
    double gbytes = (double)rows * (type == PLUME_W_Q8 ? cols : cols / 2) * b.copies / 1e9;
    double tf = time_median(&b, RUN_FLOAT), tv = time_median(&b, RUN_INT8);
    double tq = time_median(&b, RUN_QUANT_INT8);
    printf("%-11s %-3s %5d x %-5d %4d  %7.1f  %7.1f  %7.1f  %6.2fx  %6.1f  %6.1f", kern->name,
           type == PLUME_W_Q8 ? "q8" : "q4", rows, cols, T, gflop / tf, gflop / tv, gflop / tq,
           tf / tq, gflop / tf / E2B_GFLOP_PER_TOKEN, gflop / tq / E2B_GFLOP_PER_TOKEN);
    if (T == 1) printf("   GB/s: float %.1f, int8 %.1f", gbytes / tf, gbytes / tq);
    printf("\n");
    fflush(stdout);
    rc = 0;
done:
    for (int i = 0; i < made; i++) weight_free(&w[i]);
    plume_dealloc(b.x);
    plume_dealloc(b.y);
    plume_dealloc(b.xs);
    plume_dealloc(b.xq);
    plume_dealloc(b.xcor);
    return rc;
}

/* Parse "R1xC1,R2xC2,..." into shapes (at most 8); 1 when every pair is valid. */
static int parse_shapes(const char *arg, int32_t shapes[8][2], size_t *n) {
    size_t k = 0;
    for (const char *p = arg; *p;) {
        char *end;
        long r = strtol(p, &end, 10), c;
        if (end == p || *end != 'x' || k == 8) return 0;
        p = end + 1;
        c = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || r < 16 || r > 65536 || r % 16 || c < 128 || c > 65536 || c % 128)
            return 0;
        shapes[k][0] = (int32_t)r;
        shapes[k][1] = (int32_t)c;
        k++;
        p = *end ? end + 1 : end;
    }
    if (!k) return 0;
    *n = k;
    return 1;
}

/* Every kernel x weight type x shape x T, one line each; an argument N: only T = N. */
int main(int argc, char **argv) {
    const int32_t only_T = argc > 1 ? atoi(argv[1]) : 0;
    const char *only_k = argc > 2 && strcmp(argv[2], "all") ? argv[2] : NULL;
    bench_kern ks[4];
    int nk = 0;
#if defined(__x86_64__)
    if (plume_kernels_get("avx512") && plume_qact_vnni_available())
        ks[nk++] = (bench_kern){"avx512vnni", plume_kernels_get("avx512"), plume_qact_quantize_vnni, plume_qact_matmul_vnni, 0};
    if (plume_kernels_get("avx512") && plume_qact_vnni_available())
        ks[nk++] = (bench_kern){"vnni-tiles", plume_kernels_get("avx512"), plume_qact_quantize_vnni, plume_qact_matmul_vnni, 1};
    if (plume_kernels_get("avx2") && plume_qact_avx2_available())
        ks[nk++] = (bench_kern){"avx2", plume_kernels_get("avx2"), plume_qact_quantize_avx2, plume_qact_matmul_avx2, 0};
    if (plume_kernels_get("avx2") && plume_qact_avxvnni_available())
        ks[nk++] = (bench_kern){"avx-vnni", plume_kernels_get("avx2"), plume_qact_quantize_avx2, plume_qact_matmul_avxvnni, 0};
#endif
    if (!nk) {
        printf("this CPU has no SIMD int8 kernels: nothing to compare\n");
        return 0;
    }
    int32_t shapes[8][2] = {{6144, 1536}, {1536, 6144}, {12288, 1536}, {1536, 12288}, {2048, 1536}};
    size_t nshapes = 5;
    if (argc > 3 && !parse_shapes(argv[3], shapes, &nshapes)) {
        fprintf(stderr, "bench_qact: SHAPES is up to 8 ROWSxCOLS pairs, rows a multiple of 16 and cols of 128, "
                        "comma separated, not \"%s\"\n", argv[3]);
        return 1;
    }
    static const int32_t tokens[] = {1, 64, 512};
    static const plume_wtype types[] = {PLUME_W_Q8, PLUME_W_Q4};
    printf("single thread, median of %d; GFLOP/s = 2 rows cols T / time; tok/s = GFLOP/s / %.3f\n",
           RUNS, E2B_GFLOP_PER_TOKEN);
    printf("                                    GFLOP/s                       tok/s-equivalent\n");
    printf("kernel          rows x cols     T    float     int8   q+int8  speedup   float  q+int8\n");
    for (int ki = 0; ki < nk; ki++) {
        if (only_k && strcmp(only_k, ks[ki].name)) continue;
        for (size_t k = 0; k < sizeof types / sizeof *types; k++)
            for (size_t s = 0; s < nshapes; s++)
                for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++)
                    if ((!only_T || tokens[i] == only_T) && bench_shape(&ks[ki], types[k], shapes[s][0], shapes[s][1], tokens[i])) {
                        fprintf(stderr, "out of memory\n");
                        return 1;
                    }
    }
    return 0;
}
