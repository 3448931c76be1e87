/* bench_fma.c -- the float32 multiply-add peak of this CPU on 1 and on N threads: 12
 * independent FMA chains held in registers, in the widest vectors the CPU has (AVX-512, AVX2 or
 * NEON). Exact prefill (float32 activations) multiplies floats, so this is its ceiling: with the
 * multiply-adds of one E2B token (bench_qact.c: 3.754 GFLOP, the LM head left out) it gives the
 * prefill rate at that peak, which docs/BENCHMARKS.md sets against `plume bench --exact`.
 * Not a test: nothing here can fail.
 *
 *   make benches && build/bench/bench_fma [THREADS]    (default 2)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

static const double E2B_GFLOP_PER_TOKEN = 3.754;
enum { CHAINS = 12, RUNS = 5 };
static const long ITERS = 50 * 1000 * 1000; /* per run: 600 M vector FMAs */

/* Monotonic seconds. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The 12 chains of one kernel: a_i = a_i * b + c, ITERS times; returns a sum so that nothing is
 * dead code. V is the vector type, FMA(a, b, c) its a * b + c, LANE0 takes lane 0 out. */
#define CHAIN_LOOP(V, SET1, FMA, ADD, LANE0)                                                           \
    V a0 = SET1(0.1f), a1 = SET1(0.2f), a2 = SET1(0.3f), a3 = SET1(0.4f), a4 = SET1(0.5f), a5 = SET1(0.6f); \
    V a6 = SET1(0.7f), a7 = SET1(0.8f), a8 = SET1(0.9f), a9 = SET1(1.0f), a10 = SET1(1.1f), a11 = SET1(1.2f); \
    const V b = SET1(0.999999f), c = SET1(1e-7f);                                                    \
    for (long i = 0; i < ITERS; i++) {                                                               \
        a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c);              \
        a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c);              \
        a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c);          \
    }                                                                                                \
    V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                          \
    s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                                     \
    return LANE0(s)

#if defined(__x86_64__)
/* AVX-512: 16 floats a vector. */
__attribute__((target("avx512f"))) static float chains_avx512(void) {
    CHAIN_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_cvtss_f32);
}
/* AVX2 with FMA: 8 floats a vector. */
__attribute__((target("avx2,fma"))) static float chains_avx2(void) {
    CHAIN_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_cvtss_f32);
}
#elif defined(__aarch64__)
/* NEON: 4 floats a vector (vfmaq_f32(c, a, b) = c + a b: the argument order differs). */
#define NEON_FMA(a, b, c) vfmaq_f32(c, a, b)
#define NEON_LANE0(v) vgetq_lane_f32(v, 0)
static float chains_neon(void) { CHAIN_LOOP(float32x4_t, vdupq_n_f32, NEON_FMA, vaddq_f32, NEON_LANE0); }
#endif

typedef float (*chains_fn)(void);

/* The widest kernel this CPU runs, its name and its floats per vector. */
static chains_fn pick(const char **name, int *lanes) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return *name = "avx512", *lanes = 16, chains_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return *name = "avx2", *lanes = 8, chains_avx2;
#elif defined(__aarch64__)
    return *name = "neon", *lanes = 4, chains_neon;
#endif
    *name = "none";
    *lanes = 0;
    return NULL;
}

typedef struct {
    chains_fn fn;
    float out;
} run_arg;

/* A thread: one run of the chains. */
static void *run_thread(void *p) {
    run_arg *a = p;
    a->out = a->fn();
    return NULL;
}

/* GFLOP/s of n threads running the chains at once (each 2 lanes CHAINS ITERS FLOPs); 0 if the
 * threads could not be started. */
static double gflops(chains_fn fn, int lanes, int n) {
    pthread_t th[64];
    run_arg arg[64];
    double t0 = now_s();
    int started = 0;
    for (; started < n; started++) {
        arg[started].fn = fn;
        if (pthread_create(&th[started], NULL, run_thread, &arg[started]) != 0) break;
    }
    float sink = 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL), sink += arg[i].out;
    if (started < n) return 0; /* could not start them all: no figure */
    double t = now_s() - t0;
    if (sink != sink) printf("(nan)\n"); /* keeps the results alive */
    return 2.0 * lanes * CHAINS * (double)ITERS * n / t / 1e9;
}

/* Median of RUNS values. */
static double median(double *v) {
    for (int i = 1; i < RUNS; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    return v[RUNS / 2];
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "bench_fma: THREADS must be 1..64\n");
        return 2;
    }
    const char *name;
    int lanes;
    chains_fn fn = pick(&name, &lanes);
    if (!fn) {
        fprintf(stderr, "bench_fma: no FMA vector unit this benchmark knows (AVX-512, AVX2, NEON)\n");
        return 1;
    }
    printf("float32 FMA peak, %s (%d floats a vector), %d chains, median of %d runs\n", name, lanes, CHAINS, RUNS);
    int counts[2] = {1, threads};
    for (int k = 0; k < (threads > 1 ? 2 : 1); k++) {
        double v[RUNS];
        for (int r = 0; r < RUNS; r++) v[r] = gflops(fn, lanes, counts[k]);
        double g = median(v);
        if (g <= 0) {
            fprintf(stderr, "bench_fma: cannot start %d threads\n", counts[k]);
            return 1;
        }
        printf("  %2d thread%s: %7.1f GFLOP/s   E2B exact prefill at this peak: %6.1f tok/s\n", counts[k],
               counts[k] == 1 ? " " : "s", g, g / E2B_GFLOP_PER_TOKEN);
    }
    return 0;
}
