/* bench_pool.c -- what one parallel loop of the thread pool costs beyond its work: the
 * caller publishing it, the workers joining, the wait for the last one. A decode step runs
 * ~212 such loops (E2B, docs/BENCHMARKS.md "thread scaling"), so at many threads this cost,
 * times the loops, is what stands between a step and the bandwidth limit. Loops of a fixed
 * amount of arithmetic (default 100 us of one core's work, cut in 64 items, as a decode
 * matmul's guided chunks), with a gap of serial work on the caller between them (the norms
 * and attention of a decode step; the workers spin through it or sleep), with the idle spin
 * on (the default) and off (PLUME_POOL_SPIN_US=0: every loop wakes sleepers). Medians of
 * batches of 212 loops. PLUME_POOL_YIELD=0 in the environment: the spin without yielding.
 * Not a test: nothing here can fail.
 *
 *   make benches && build/bench/bench_pool [THREADS [WORK_US [GAP_US]]]   (default 2 100 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"

enum { LOOPS = 212, BATCHES = 21, ITEMS = 64 };

/* Monotonic microseconds. */
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + 1e-3 * (double)t.tv_nsec;
}

/* n steps of a dependent integer chain: work that takes the same time on any thread. */
static unsigned long long spin_work(long n) {
    volatile unsigned long long x = 1;
    for (long i = 0; i < n; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

static long per_item; /* chain steps of one item */

/* The items of a loop: per_item steps each. */
static void work_items(void *ctx, int32_t ith, int64_t i0, int64_t i1) {
    (void)ctx, (void)ith;
    for (int64_t i = i0; i < i1; i++) spin_work(per_item);
}

/* For qsort. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over batches of the wall time of one loop (and its gap), microseconds. */
static double loop_us(plume_pool *p, long gap_steps) {
    double t[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int l = 0; l < LOOPS; l++) {
            plume_pool_for_guided(p, ITEMS, 1, work_items, NULL);
            spin_work(gap_steps);
        }
        t[b] = (now_us() - t0) / LOOPS;
    }
    qsort(t, BATCHES, sizeof *t, cmp_double);
    return t[BATCHES / 2];
}

int main(int argc, char **argv) {
    const int32_t nth = argc > 1 ? atoi(argv[1]) : 2;
    const double work_us = argc > 2 ? atof(argv[2]) : 100.0, gap_us = argc > 3 ? atof(argv[3]) : 5.0;
    if (nth < 1 || work_us < 0 || gap_us < 0) {
        fprintf(stderr, "usage: bench_pool [THREADS [WORK_US [GAP_US]]]\n");
        return 2;
    }
    /* calibrate: chain steps per microsecond on this thread (the best of 5) */
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_us();
        spin_work(2000000);
        double rate = 2000000 / (now_us() - t0);
        best = rate > best ? rate : best;
    }
    per_item = (long)(best * work_us / ITEMS);
    const long gap_steps = (long)(best * gap_us);
    printf("bench_pool: %d threads, loops of %.0f us of work in %d items, %.0f us serial between loops; "
           "median of %d batches of %d loops\n\n", nth, work_us, ITEMS, gap_us, BATCHES, LOOPS);
    printf("| idle workers | loop + gap, us | of which beyond work/threads + gap, us | empty loop + gap, us |\n|---|---|---|---|\n");
    for (int spin = 1; spin >= 0; spin--) {
        if (spin) unsetenv("PLUME_POOL_SPIN_US");
        else setenv("PLUME_POOL_SPIN_US", "0", 1);
        plume_pool *p = plume_pool_new(nth);
        if (!p) {
            fprintf(stderr, "bench_pool: no pool of %d threads\n", nth);
            return 1;
        }
        const long keep = per_item;
        double full = loop_us(p, gap_steps);
        per_item = 0;
        double empty = loop_us(p, gap_steps);
        per_item = keep;
        printf("| %s | %.1f | %.1f | %.1f |\n", spin ? "spin 500 us (see pool.h), then sleep" : "sleep at once", full,
               full - work_us / nth - gap_us, empty);
        plume_pool_free(p);
    }
    return 0;
}
