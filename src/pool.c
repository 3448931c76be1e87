/* pool.c -- the thread pool: generation counter + futex, spin first (ops of one step come
 * back to back), sleep when idle (between steps, the workers must not eat the CPU). */
#include "pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPIN_ITERS 20000 /* about tens of microseconds before a worker sleeps */

struct plume_pool {
    int32_t n;
    pthread_t *threads;
    _Atomic uint32_t gen;     /* bumped once per task; also the futex word */
    _Atomic int32_t pending;  /* workers still running the current task */
    _Atomic int32_t sleepers; /* workers waiting on the futex */
    _Atomic int32_t stop;
    plume_pool_fn fn;
    void *ctx;
};

typedef struct {
    plume_pool *p;
    int32_t ith;
} worker_arg;

/* Sleep while *addr == val. */
static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

/* Wake every sleeper on addr. */
static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* A CPU hint inside spin loops. */
static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* A worker: wait for a new generation, run the task, report done. */
static void *worker(void *argp) {
    worker_arg a = *(worker_arg *)argp;
    free(argp);
    plume_pool *p = a.p;
    uint32_t seen = 0; /* gen at creation: a task published before this thread ran is still seen */
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1);
            futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        p->fn(p->ctx, a.ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

plume_pool *plume_pool_new(int32_t n) {
    if (n < 1) n = 1;
    plume_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->threads = calloc((size_t)n, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int32_t i = 1; i < n; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || (a->p = p, a->ith = i, pthread_create(&p->threads[i], NULL, worker, a) != 0)) {
            free(a);
            p->n = i; /* stop the ones that started */
            plume_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void plume_pool_free(plume_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake_all(&p->gen);
    for (int32_t i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

int32_t plume_pool_size(const plume_pool *p) { return p ? p->n : 1; }

void plume_pool_run(plume_pool *p, plume_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->gen);
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
}

int32_t plume_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs in /proc/cpuinfo. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    int32_t ids[1024], n = 0, phys = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            int32_t key = phys * 4096 + v, k = 0;
            while (k < n && ids[k] != key) k++;
            if (k == n && n < 1024) ids[n++] = key;
        }
    }
    if (f) fclose(f);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (n == 0 || n > online) n = online > 0 ? (int32_t)online : 1;
    return n;
}
