/* profile.c -- the clock of the thread profile and its report (profile.h); the pool records,
 * forward.c names the regions. */
#include "profile.h"

#include <time.h>

static const char *const region_names[PLUME_REG_N] = {
    "embeddings", "rope tables", "norms, RoPE, residuals", "int8 quantizer", "matmuls",
    "attention",  "K/V round and commit", "head",
};

uint64_t plume_prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds per step of a nanosecond total. */
static double per_step(const plume_prof *p, uint64_t ns) {
    return (double)ns / 1e6 / (double)(p->steps > 0 ? p->steps : 1);
}

void plume_prof_print(FILE *f, const plume_prof *p, const char *title) {
    const int32_t n = p->threads < PLUME_PROF_THREADS ? p->threads : PLUME_PROF_THREADS;
    const int each = n <= 8; /* a column per thread, else min / mean / max over threads */
    fprintf(f, "\n%s: ms per step (%lld steps, %d threads)\n\n| region | serial |", title, (long long)p->steps,
            p->threads);
    if (each)
        for (int32_t i = 0; i < n; i++) fprintf(f, " items, thread %d |", i);
    else
        fprintf(f, " items, least thread | mean | most |");
    fprintf(f, " caller's publish and wake | caller waits at loop end | workers' join, mean | loops | chunks |\n|---|---|");
    for (int32_t i = 0; i < (each ? n : 3); i++) fprintf(f, "---|");
    fprintf(f, "---|---|---|---|---|\n");
    uint64_t serial = 0, wait = 0, wake = 0, work_all = 0, loops_all = 0;
    for (int r = 0; r < PLUME_REG_N; r++) {
        uint64_t work = 0, lo = UINT64_MAX, hi = 0, join = 0, loops = p->t[0].loops[r], chunks = 0;
        for (int32_t i = 0; i < n; i++) {
            const uint64_t w = p->t[i].work_ns[r];
            work += w;
            lo = w < lo ? w : lo;
            hi = w > hi ? w : hi;
            join += i > 0 ? p->t[i].join_ns[r] : 0;
            chunks += p->t[i].chunks[r];
        }
        if (!work && !p->t[0].serial_ns[r] && !loops) continue;
        serial += p->t[0].serial_ns[r];
        wait += p->t[0].wait_ns[r];
        wake += p->t[0].wake_ns[r];
        work_all += work;
        loops_all += loops;
        fprintf(f, "| %s | %.3f |", region_names[r], per_step(p, p->t[0].serial_ns[r]));
        if (each)
            for (int32_t i = 0; i < n; i++) fprintf(f, " %.3f |", per_step(p, p->t[i].work_ns[r]));
        else
            fprintf(f, " %.3f | %.3f | %.3f |", per_step(p, lo), per_step(p, work) / n, per_step(p, hi));
        fprintf(f, " %.3f | %.3f | %.3f | %.1f | %.1f |\n", per_step(p, p->t[0].wake_ns[r]), per_step(p, p->t[0].wait_ns[r]),
                n > 1 ? per_step(p, join) / (n - 1) : 0.0, (double)loops / (double)(p->steps > 0 ? p->steps : 1),
                (double)chunks / (double)(p->steps > 0 ? p->steps : 1));
    }
    const double wall = per_step(p, p->wall_ns), s = per_step(p, serial), in_loops = wall - s;
    const double items = per_step(p, work_all), over = in_loops - items / n; /* sync and imbalance */
    fprintf(f, "\nwall %.3f ms per step: serial (one thread works) %.3f ms = %.1f%%; in %.1f parallel loops %.3f ms, "
               "of which the caller spent %.3f ms publishing them and waking sleepers and waited %.3f ms at their ends; "
               "items of all threads %.3f ms (%.3f per thread), so %.3f ms per step (%.1f us per loop) is "
               "synchronization and imbalance\n",
            wall, s, wall > 0 ? 100 * s / wall : 0, (double)loops_all / (double)(p->steps > 0 ? p->steps : 1), in_loops,
            per_step(p, wake), per_step(p, wait), items, items / n, over,
            loops_all ? 1e3 * over * (double)(p->steps > 0 ? p->steps : 1) / (double)loops_all : 0.0);
    fprintf(f, "busy share per thread:");
    for (int32_t i = 0; i < n; i++) {
        uint64_t b = 0;
        for (int r = 0; r < PLUME_REG_N; r++) b += p->t[i].work_ns[r] + (i == 0 ? p->t[0].serial_ns[r] : 0);
        fprintf(f, " %d: %.0f%%", i, wall > 0 ? 100 * per_step(p, b) / wall : 0);
    }
    /* Amdahl: the serial part stays, the items shrink with the threads (bound by compute, not
     * by memory), the synchronization and imbalance per loop stay as measured. */
    fprintf(f, "\nAmdahl, if the items shrank with the threads and serial work and per-loop overhead stayed:");
    for (int k = 2; k <= 8; k *= 2) {
        const double t = s + items / (n * k) + (over > 0 ? over : 0);
        fprintf(f, " %dx threads %.2fx faster;", k, t > 0 ? wall / t : 0);
    }
    fprintf(f, " bound %.2fx (serial + overhead alone)\n", s + over > 0 ? wall / (s + (over > 0 ? over : 0)) : 0);
}
