/* pool.h -- a fixed thread pool for the forward pass. Workers are made once at model open;
 * a parallel region allocates nothing and takes no lock: the caller publishes a task by
 * bumping an atomic generation, workers spin briefly then sleep on a futex. */
#ifndef PLUME_POOL_H
#define PLUME_POOL_H

#include <stdint.h>

typedef struct plume_pool plume_pool;

/* fn(ctx, ith, nth): thread ith of nth does its share. */
typedef void (*plume_pool_fn)(void *ctx, int32_t ith, int32_t nth);

/* A pool of n threads in all (the caller counts as one); NULL on failure. */
plume_pool *plume_pool_new(int32_t n);
void plume_pool_free(plume_pool *p);
int32_t plume_pool_size(const plume_pool *p);
/* Run fn on every thread of the pool (the caller is thread 0) and wait for all. */
void plume_pool_run(plume_pool *p, plume_pool_fn fn, void *ctx);

/* The number of physical cores (falls back to online CPUs). */
int32_t plume_physical_cores(void);

#endif
