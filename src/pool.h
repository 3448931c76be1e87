/* pool.h -- a fixed thread pool for the forward pass. Workers are made once at model open;
 * a parallel loop allocates nothing and takes no lock: the caller publishes it by bumping an
 * atomic word, workers spin briefly then sleep on a futex. Items are taken dynamically, and
 * the caller never waits for a worker that has not joined: on a shared, noisy machine a
 * descheduled thread slows a loop down by its own share at most, not by a whole time slice. */
#ifndef PLUME_POOL_H
#define PLUME_POOL_H

#include <stdint.h>

#include "profile.h"

typedef struct plume_pool plume_pool;

/* fn(ctx, ith, i0, i1): thread ith (0 = the caller) processes items [i0, i1). */
typedef void (*plume_pool_fn)(void *ctx, int32_t ith, int64_t i0, int64_t i1);

/* A pool of n threads in all (the caller counts as one); NULL on failure. An idle worker
 * spins 500 us before it sleeps, yielding the CPU (sched_yield) after the first 5 us, so that
 * on a shared, loaded host the spin does not take time the caller's thread or others need;
 * PLUME_POOL_SPIN_US=N (0..1000000) sets N microseconds (0: sleep at once) and
 * PLUME_POOL_YIELD=0 spins without yielding, to measure either (bench/bench_pool,
 * plume bench --threads-profile). */
plume_pool *plume_pool_new(int32_t n);
void plume_pool_free(plume_pool *p);
int32_t plume_pool_size(const plume_pool *p);
/* Run fn over items [0, n) in chunks of `grain` items, on the caller and every worker that
 * joins in time; returns when all items are done. */
void plume_pool_for(plume_pool *p, int64_t n, int64_t grain, plume_pool_fn fn, void *ctx);
/* The same with chunks that shrink as the loop drains: each a 1/(2 threads) share of the
 * items left, in whole grains (at least one), so few and long ones first, short ones last. */
void plume_pool_for_guided(plume_pool *p, int64_t n, int64_t grain, plume_pool_fn fn, void *ctx);

/* Benchmarks: record where each thread's time goes into *prof (zeroed here) until
 * plume_pool_profile_stop; call both between loops, from the thread that runs them. */
void plume_pool_profile_start(plume_pool *p, plume_prof *prof);
void plume_pool_profile_stop(plume_pool *p);
/* The region (plume_region) the caller's next work belongs to; a no-op unless recording. */
void plume_pool_region(plume_pool *p, int32_t region);

/* How idle workers sleep in this build: "futex", "os_sync" or "condvar" (the portable one). */
const char *plume_pool_wait_kind(void);

/* The number of physical cores (falls back to online CPUs). */
int32_t plume_physical_cores(void);

#endif
