/* bench_kernels.c -- how fast each kernel table streams weights, single-threaded, at the
 * Gemma 4 E2B shapes of the FFN: [6144, 1536] (gate/up) and [1536, 6144] (down), for every
 * weight type, decode (T = 1) and prefill (T = 64). Not a test: nothing here can fail.
 *
 * Prints weight GB/s (bytes of W / time) and, for T = 64, GFLOP/s (2 rows cols T / time):
 * the median of several runs. Decode cycles through enough copies of W (>= COLD_BYTES) that
 * the weights come from memory, as they do in a real model; a plain streaming read through
 * the best table's dot is printed first as the bandwidth to compare with. Last, decode
 * attention of E2B's full layers (8 query heads on one KV head of 512) over ATTN_ROWS cached
 * positions, in blocks of 256 as forward.c runs it: GB/s of K and V read, float and int8 rows.
 *
 *   make && cc -O2 -Iinclude -Isrc bench/bench_kernels.c build/libplume.a -lcjson -lm \
 *       -lpthread -o build/bench_kernels && build/bench_kernels [isa ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"

enum {
    COLD_BYTES = 256 << 20, /* weights cycled through for T = 1: well past any cache */
    RUNS = 7,               /* timed runs per figure, median reported */
    RUNS_SLOW = 3           /* for scalar at T = 64, which takes seconds */
};

static const char *const type_names[PLUME_W_NTYPES] = {"f32", "f16", "bf16", "q8", "q4"};

/* Bytes of a [rows, cols] matrix of a type (scales not counted: < 1/16 of Q4). */
static size_t weight_bytes(plume_wtype type, int32_t rows, int32_t cols) {
    size_t n = (size_t)rows * cols;
    switch (type) {
    case PLUME_W_F32: return n * 4;
    case PLUME_W_F16:
    case PLUME_W_BF16: return n * 2;
    case PLUME_W_Q8: return n;
    default: return n / 2;
    }
}

/* n copies of a random matrix of a type; returns 0 or -1 (out of memory, w partly filled). */
static int weights_new(plume_weight *w, int n, plume_wtype type, int32_t rows, int32_t cols) {
    uint64_t rng = 1;
    size_t bytes = weight_bytes(type, rows, cols), nscale = (size_t)rows * (cols / 32 + 1);
    for (int k = 0; k < n; k++) {
        uint8_t *data = plume_alloc(bytes);
        uint16_t *scale = plume_alloc(nscale * 2);
        w[k] = (plume_weight){.type = type, .rows = rows, .cols = cols, .data = data, .scale = scale};
        if (!data || !scale) return -1;
        for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)plume_rng_next(&rng);
        if (type == PLUME_W_F32)      /* random bytes make NaNs and huge floats: use [-1, 1) */
            for (size_t i = 0; i < bytes / 4; i++) ((float *)data)[i] = 2 * plume_rng_float(&rng) - 1;
        if (type == PLUME_W_F16)
            for (size_t i = 0; i < bytes / 2; i++)
                ((uint16_t *)data)[i] = plume_f32_to_f16(2 * plume_rng_float(&rng) - 1);
        if (type == PLUME_W_BF16)
            for (size_t i = 0; i < bytes / 2; i++)
                ((uint16_t *)data)[i] = plume_f32_to_bf16(2 * plume_rng_float(&rng) - 1);
        for (size_t i = 0; i < nscale; i++) scale[i] = plume_f32_to_f16(0.01f);
    }
    return 0;
}

static void weights_free(plume_weight *w, int n) {
    for (int k = 0; k < n; k++) {
        plume_dealloc((void *)w[k].data);
        plume_dealloc((void *)w[k].scale);
    }
}

/* Compare doubles for qsort. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of one matmul over all rows, cycling through the n copies of w. */
static double time_matmul(const plume_kernels *kt, const plume_weight *w, int n, float *y,
                          const float *x, int32_t T, int runs) {
    double t[RUNS];
    kt->matmul[w[0].type](y, w[0].rows, x, w[0].cols, T, &w[0], 0, w[0].rows); /* warm up */
    for (int r = 0; r < runs; r++) {
        double t0 = plume_now();
        for (int k = 0; k < n; k++) kt->matmul[w[k].type](y, w[k].rows, x, w[k].cols, T, &w[k], 0, w[k].rows);
        t[r] = (plume_now() - t0) / n;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    return t[runs / 2];
}

/* GB/s of a plain read of COLD_BYTES through dot(a, a): the memory bandwidth to aim at. */
static double read_bandwidth(const plume_kernels *kt) {
    size_t n = COLD_BYTES / sizeof(float);
    float *a = plume_alloc(n * sizeof(float));
    if (!a) return 0;
    for (size_t i = 0; i < n; i++) a[i] = 1e-3f;
    double t[RUNS];
    volatile float sink = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = plume_now();
        for (size_t i = 0; i < n; i += 1 << 20) sink += kt->dot(a + i, a + i, 1 << 20);
        t[r] = plume_now() - t0;
    }
    (void)sink;
    plume_dealloc(a);
    qsort(t, RUNS, sizeof *t, cmp_double);
    return (double)COLD_BYTES / t[RUNS / 2] / 1e9;
}

/* ---- attention ----------------------------------------------------------------------- */

enum { ATTN_ROWS = 32768, ATTN_HEADS = 8, ATTN_HD = 512, ATTN_BLK = 256 };

/* GB/s of K and V rows one decode step of a full layer reads through kt->attn_block over
 * ATTN_ROWS float (i8 = 0) or int8 rows, single-threaded, median of RUNS. */
static double attn_gbs(const plume_kernels *kt, int i8) {
    size_t n = (size_t)ATTN_ROWS * ATTN_HD, esize = i8 ? 1 : 4;
    uint8_t *k = plume_alloc(n * esize), *v = plume_alloc(n * esize);
    float *ks = plume_alloc(ATTN_ROWS * sizeof(float)), *vs = plume_alloc(ATTN_ROWS * sizeof(float));
    float *q = plume_alloc(ATTN_HEADS * ATTN_HD * sizeof(float)), *acc = plume_alloc(ATTN_HEADS * ATTN_HD * sizeof(float));
    float *p = plume_alloc(ATTN_HEADS * ATTN_BLK * sizeof(float)), m[ATTN_HEADS], l[ATTN_HEADS];
    double t[RUNS], gbs = 0;
    if (k && v && ks && vs && q && acc && p) {
        uint64_t rng = 3;
        for (size_t i = 0; i < n * esize; i++) k[i] = (uint8_t)(plume_rng_next(&rng) >> 56), v[i] = k[i] ^ 0x55;
        if (!i8)
            for (size_t i = 0; i < n; i++) ((float *)k)[i] = 0.01f * (float)(i % 97), ((float *)v)[i] = 0.02f * (float)(i % 89);
        for (size_t i = 0; i < ATTN_ROWS; i++) ks[i] = vs[i] = 0.01f;
        for (size_t i = 0; i < ATTN_HEADS * ATTN_HD; i++) q[i] = 2 * plume_rng_float(&rng) - 1;
        for (int r = 0; r < RUNS; r++) {
            double t0 = plume_now();
            for (int32_t j = 0; j < ATTN_ROWS; j += ATTN_BLK) {
                plume_kv_run run = {k + (size_t)j * ATTN_HD * esize, v + (size_t)j * ATTN_HD * esize, i8 ? ks + j : NULL,
                                    i8 ? vs + j : NULL, ATTN_HD, 1, ATTN_BLK};
                kt->attn_block(acc, m, l, q, ATTN_HEADS, ATTN_HD, &run, 1, p);
            }
            t[r] = plume_now() - t0;
        }
        qsort(t, RUNS, sizeof *t, cmp_double);
        gbs = 2.0 * (double)(n * esize) / t[RUNS / 2] / 1e9;
    }
    plume_dealloc(k), plume_dealloc(v), plume_dealloc(ks), plume_dealloc(vs);
    plume_dealloc(q), plume_dealloc(acc), plume_dealloc(p);
    return gbs;
}

int main(int argc, char **argv) {
    const char *names[8];
    int ntab = argc > 1 ? argc - 1 : plume_kernels_available(names, 8);
    const plume_kernels *kts[8] = {0};
    if (ntab < 1 || ntab > 8) {
        fprintf(stderr, "usage: bench_kernels [isa ...]  (at most 8)\n");
        return 1;
    }
    for (int i = 0; i < ntab; i++) {
        kts[i] = plume_kernels_get(argc > 1 ? argv[1 + i] : names[i]);
        if (!kts[i]) {
            fprintf(stderr, "bench_kernels: no table \"%s\" on this CPU\n", argv[1 + i]);
            return 1;
        }
    }
    printf("memory read (dot over %d MiB, %s): %.1f GB/s\n\n", COLD_BYTES >> 20,
           kts[ntab - 1]->name, read_bandwidth(kts[ntab - 1]));

    static const int32_t shapes[][2] = {{6144, 1536}, {1536, 6144}};
    static const int32_t tokens[] = {1, 64};
    printf("%-5s %-11s %3s", "type", "rows x cols", "T");
    for (int i = 0; i < ntab; i++) printf(" %16s", kts[i]->name);
    printf("   (weight GB/s; GFLOP/s for T = 64)\n");
    for (int type = 0; type < PLUME_W_NTYPES; type++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int32_t rows = shapes[s][0], cols = shapes[s][1];
            size_t bytes = weight_bytes((plume_wtype)type, rows, cols);
            int ncold = (int)((COLD_BYTES + bytes - 1) / bytes);
            plume_weight *w = calloc((size_t)ncold, sizeof *w);
            float *x = plume_alloc((size_t)64 * cols * sizeof(float));
            float *y = plume_alloc((size_t)64 * rows * sizeof(float));
            if (!w || !x || !y || weights_new(w, ncold, (plume_wtype)type, rows, cols)) {
                fprintf(stderr, "bench_kernels: out of memory\n");
                return 1;
            }
            uint64_t rng = 2;
            for (size_t i = 0; i < (size_t)64 * cols; i++) x[i] = 2 * plume_rng_float(&rng) - 1;
            for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
                int32_t T = tokens[ti];
                printf("%-5s %5d x %-5d %2d", type_names[type], rows, cols, T);
                for (int i = 0; i < ntab; i++) {
                    int slow = T > 1 && !strcmp(kts[i]->name, "scalar");
                    double sec = time_matmul(kts[i], w, T == 1 ? ncold : 1, y, x, T,
                                             slow ? RUNS_SLOW : RUNS);
                    if (T == 1)
                        printf(" %16.1f", (double)bytes / sec / 1e9);
                    else
                        printf("  %5.1f (%5.1f GF)", (double)bytes / sec / 1e9,
                               2.0 * rows * cols * T / sec / 1e9);
                    fflush(stdout);
                }
                printf("\n");
            }
            weights_free(w, ncold);
            free(w);
            plume_dealloc(x);
            plume_dealloc(y);
        }
    printf("\nattention, %d heads x %d over %d positions (K+V GB/s)\n", ATTN_HEADS, ATTN_HD, ATTN_ROWS);
    for (int i8 = 0; i8 < 2; i8++) {
        printf("%-21s", i8 ? "int8 K/V" : "float K/V");
        for (int i = 0; i < ntab; i++) {
            printf(" %16.1f", attn_gbs(kts[i], i8));
            fflush(stdout);
        }
        printf("\n");
    }
    return 0;
}
