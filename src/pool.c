/* pool.c -- the thread pool: one atomic word per loop (generation, open flag, members),
 * dynamic chunks, spin first (the loops of one step come back to back), sleep when idle
 * (between steps the workers must not eat the CPU): on a futex on Linux, elsewhere on what the
 * system has (see gen_wait). */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How a sleeping worker waits for the next loop, chosen at compile time: the futex on Linux;
 * os_sync_wait_on_address on macOS 14.4+; a mutex and condition variable elsewhere (and on
 * Linux with PLUME_PORTABLE, so that the fallback is tested). */
#if defined(__linux__) && !defined(PLUME_PORTABLE)
#define POOL_WAIT_FUTEX 1
#include <linux/futex.h>
#include <sys/syscall.h>
#elif defined(__APPLE__) && !defined(PLUME_PORTABLE) && defined(__has_include)
#if __has_include(<os/os_sync_wait_on_address.h>)
#define POOL_WAIT_OS_SYNC 1
#include <os/os_sync_wait_on_address.h>
#endif
#endif

/* How long an idle worker spins on the generation word before it sleeps, unless
 * PLUME_POOL_SPIN_US says otherwise (0: sleep at once). It covers the serial gaps between the
 * loops of one step (a few to a few hundred microseconds), so that a step's ~200 loops do not
 * each pay a sleep and a wake-up, and is short beside the gaps between steps. Timed, not
 * counted: a pause is 24 ns on Zen 5 and ~40-70 ns on recent Xeons (20000 pauses, the count
 * this replaced, were 480 us on the first). */
#define SPIN_NS_DEFAULT 500000
#define SPIN_CHECK 64 /* pauses between two reads of the clock */
#define SPIN_PAUSE_NS 5000 /* the first part of the spin: pauses only; then a sched_yield a check */

/* state: bits 63..32 the loop's generation, bit 31 "closed", bits 30..0 members inside. */
#define CLOSED (1ull << 31)
#define MEMBERS (CLOSED - 1)

struct plume_pool {
    int32_t n;
    pthread_t *threads;
    _Atomic uint64_t state;
    _Atomic uint32_t gen;      /* the word sleepers wait on: the generation of the newest loop */
    _Atomic int32_t sleepers;
    _Atomic int32_t stop;
    atomic_flag busy;          /* a caller owns the pool (sessions on other threads run alone) */
    pthread_mutex_t mu;        /* the portable wait: sleepers wait on cv while gen is unchanged */
    pthread_cond_t cv;
    /* the current loop */
    plume_pool_fn fn;
    void *ctx;
    int64_t n_items, grain;
    int guided;                /* chunks of a share of what is left (plume_pool_for_guided) */
    _Atomic int64_t next;
    /* --threads-profile: the recording (NULL: off), the current loop's start and region */
    plume_prof *prof;
    uint64_t t_start;
    int32_t region;
    uint64_t spin_ns;          /* how long an idle worker spins before it sleeps */
    int yield;                 /* after SPIN_PAUSE_NS of it, yield the CPU at each check */
};

/* ---- sleep and wake -------------------------------------------------------------------- */

/* The portable wait: under the mutex, sleep while p->gen == val. A waker changes gen before
 * it takes the mutex to broadcast, so a sleeper either sees the new gen or is woken. */
static void cond_wait_gen(plume_pool *p, uint32_t val) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == val && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Wake every sleeper of the portable wait. */
static void cond_wake_all(plume_pool *p) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Sleep while p->gen == val (or until a wake). */
static void gen_wait(plume_pool *p, uint32_t val) {
#if defined(POOL_WAIT_FUTEX)
    syscall(SYS_futex, (uint32_t *)&p->gen, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#elif defined(POOL_WAIT_OS_SYNC)
    if (__builtin_available(macOS 14.4, *))
        os_sync_wait_on_address((void *)&p->gen, val, 4, OS_SYNC_WAIT_ON_ADDRESS_NONE);
    else
        cond_wait_gen(p, val);
#else
    cond_wait_gen(p, val);
#endif
}

/* Wake every sleeper on p->gen. */
static void gen_wake_all(plume_pool *p) {
#if defined(POOL_WAIT_FUTEX)
    syscall(SYS_futex, (uint32_t *)&p->gen, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#elif defined(POOL_WAIT_OS_SYNC)
    if (__builtin_available(macOS 14.4, *))
        os_sync_wake_by_address_all((void *)&p->gen, 4, OS_SYNC_WAKE_BY_ADDRESS_NONE);
    else
        cond_wake_all(p);
#else
    cond_wake_all(p);
#endif
}

const char *plume_pool_wait_kind(void) {
#if defined(POOL_WAIT_FUTEX)
    return "futex";
#elif defined(POOL_WAIT_OS_SYNC)
    return "os_sync";
#else
    return "condvar";
#endif
}

/* A CPU hint inside spin loops. */
static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* The next chunk of the current loop, [*i0, *i1); 0 once none is left. Fixed: `grain` items.
 * Guided: a 1/(2n) share of the items left, in whole grains, at least one. */
static int next_chunk(plume_pool *p, int64_t *i0, int64_t *i1) {
    int64_t a, size = p->grain;
    if (!p->guided) {
        a = atomic_fetch_add_explicit(&p->next, size, memory_order_relaxed);
    } else {
        a = atomic_load_explicit(&p->next, memory_order_relaxed);
        do {
            if (a >= p->n_items) return 0;
            int64_t share = (p->n_items - a) / (2 * p->n);
            size = share > p->grain ? (share + p->grain - 1) / p->grain * p->grain : p->grain;
        } while (!atomic_compare_exchange_weak_explicit(&p->next, &a, a + size, memory_order_relaxed,
                                                        memory_order_relaxed));
    }
    if (a >= p->n_items) return 0;
    *i0 = a;
    *i1 = a + size < p->n_items ? a + size : p->n_items;
    return 1;
}

/* Thread ith's counters of a recording. */
static plume_prof_thread *prof_thread(plume_prof *prof, int32_t ith) {
    return &prof->t[ith < PLUME_PROF_THREADS ? ith : PLUME_PROF_THREADS - 1];
}

/* Take chunks of the current loop until none is left (timing each when recording). */
static void take_chunks(plume_pool *p, int32_t ith) {
    int64_t i0, i1;
    if (!p->prof) {
        while (next_chunk(p, &i0, &i1)) p->fn(p->ctx, ith, i0, i1);
        return;
    }
    plume_prof_thread *pt = prof_thread(p->prof, ith);
    while (next_chunk(p, &i0, &i1)) {
        uint64_t t0 = plume_prof_now();
        p->fn(p->ctx, ith, i0, i1);
        pt->work_ns[p->region] += plume_prof_now() - t0;
        pt->chunks[p->region]++;
    }
}

/* Join loop `gen` if it is still open: 1 if joined (then the caller must leave). */
static int join(plume_pool *p, uint32_t gen) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    while ((uint32_t)(s >> 32) == gen && !(s & CLOSED))
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acquire, memory_order_acquire))
            return 1;
    return 0;
}

/* A worker: wait for a new loop, join it while it is open, take chunks, leave. */
typedef struct {
    plume_pool *p;
    int32_t ith;
} worker_arg;

static void *worker(void *argp) {
    worker_arg a = *(worker_arg *)argp;
    free(argp);
    plume_pool *p = a.p;
    uint32_t seen = 0; /* the generation at creation: a loop published before we ran is seen */
    for (;;) {
        uint32_t g;
        uint32_t spins = 0;
        uint64_t spin_end = 0, yield_from = 0; /* read from the clock at the first check */
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (p->spin_ns && ++spins % SPIN_CHECK) {
                cpu_relax();
                continue;
            }
            if (p->spin_ns) {
                uint64_t now = plume_prof_now();
                if (!spin_end) spin_end = now + p->spin_ns, yield_from = now + SPIN_PAUSE_NS;
                if (now < spin_end) {
                    if (now >= yield_from && p->yield) sched_yield(); /* others may want this CPU */
                    continue;
                }
            }
            atomic_fetch_add(&p->sleepers, 1);
            gen_wait(p, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
            spin_end = 0;
        }
        seen = g;
        if (atomic_load(&p->stop)) return NULL;
        if (join(p, g)) {
            if (p->prof) { /* the loop's fields are ours to read until we leave */
                plume_prof_thread *pt = prof_thread(p->prof, a.ith);
                pt->join_ns[p->region] += plume_prof_now() - p->t_start;
                pt->loops[p->region]++;
            }
            take_chunks(p, a.ith);
            atomic_fetch_sub_explicit(&p->state, 1, memory_order_release);
        }
    }
}

plume_pool *plume_pool_new(int32_t n) {
    if (n < 1) n = 1;
    plume_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    atomic_flag_clear(&p->busy);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->n = n;
    p->spin_ns = SPIN_NS_DEFAULT;
    const char *env = getenv("PLUME_POOL_SPIN_US");
    if (env && *env) {
        char *end;
        long long us = strtoll(env, &end, 10);
        if (*end || us < 0 || us > 1000000)
            fprintf(stderr, "plume: PLUME_POOL_SPIN_US=%s is not 0..1000000 (microseconds); using %d\n", env,
                    SPIN_NS_DEFAULT / 1000);
        else p->spin_ns = (uint64_t)us * 1000;
    }
    const char *y = getenv("PLUME_POOL_YIELD");
    p->yield = !(y && !strcmp(y, "0"));
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
    gen_wake_all(p);
    for (int32_t i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int32_t plume_pool_size(const plume_pool *p) { return p ? p->n : 1; }

/* ---- profile ----------------------------------------------------------------------------- */

/* The caller's time since its last event, outside any loop: serial work of the region. */
static void prof_serial(plume_pool *p) {
    uint64_t now = plume_prof_now();
    p->prof->t[0].serial_ns[p->prof->region] += now - p->prof->last_ns;
    p->prof->last_ns = now;
}

void plume_pool_profile_start(plume_pool *p, plume_prof *prof) {
    if (!p) return;
    memset(prof, 0, sizeof *prof);
    prof->threads = p->n;
    prof->start_ns = prof->last_ns = plume_prof_now();
    p->prof = prof;
}

void plume_pool_profile_stop(plume_pool *p) {
    if (!p || !p->prof) return;
    prof_serial(p);
    p->prof->wall_ns = p->prof->last_ns - p->prof->start_ns;
    p->prof = NULL;
}

void plume_pool_region(plume_pool *p, int32_t region) {
    if (!p || !p->prof || p->prof->region == region) return;
    prof_serial(p);
    p->prof->region = region;
}

/* ---- loops ------------------------------------------------------------------------------- */

/* plume_pool_for and plume_pool_for_guided. */
static void pool_run(plume_pool *p, int64_t n, int64_t grain, int guided, plume_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    /* One caller at a time: a session stepping on another thread while the pool is taken
     * runs its loop alone (its scratch is its own, thread index 0 included). */
    if (!p || p->n == 1 || n <= grain || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
        if (p && p->prof && p->n == 1 && n > grain) { /* a loop, on one thread (n <= grain: serial work) */
            prof_serial(p);
            uint64_t t0 = p->prof->last_ns;
            fn(ctx, 0, 0, n);
            p->prof->last_ns = plume_prof_now();
            p->prof->t[0].work_ns[p->prof->region] += p->prof->last_ns - t0;
            p->prof->t[0].loops[p->prof->region]++;
            p->prof->t[0].chunks[p->prof->region]++;
            return;
        }
        fn(ctx, 0, 0, n);
        return;
    }
    /* No member is inside (the last loop was closed and drained), so the fields are ours. */
    if (p->prof) {
        prof_serial(p);
        p->t_start = p->prof->last_ns;
        p->region = p->prof->region;
        p->prof->t[0].loops[p->region]++;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    p->guided = guided;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    uint32_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->state, (uint64_t)gen << 32, memory_order_release);
    atomic_store_explicit(&p->gen, gen, memory_order_release);
    if (atomic_load(&p->sleepers) > 0) gen_wake_all(p);
    if (p->prof) p->prof->t[0].wake_ns[p->region] += plume_prof_now() - p->t_start;
    take_chunks(p, 0);
    const uint64_t own_end = p->prof ? plume_prof_now() : 0;
    /* Close: late workers no longer join; wait for the members still inside. */
    atomic_fetch_or_explicit(&p->state, CLOSED, memory_order_acq_rel);
    while (atomic_load_explicit(&p->state, memory_order_acquire) & MEMBERS) cpu_relax();
    if (p->prof) {
        p->prof->last_ns = plume_prof_now();
        p->prof->t[0].wait_ns[p->region] += p->prof->last_ns - own_end;
    }
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

void plume_pool_for(plume_pool *p, int64_t n, int64_t grain, plume_pool_fn fn, void *ctx) {
    pool_run(p, n, grain, 0, fn, ctx);
}

void plume_pool_for_guided(plume_pool *p, int64_t n, int64_t grain, plume_pool_fn fn, void *ctx) {
    pool_run(p, n, grain, 1, fn, ctx);
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
