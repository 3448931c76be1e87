/* profile.h -- where each thread's time goes in the steps of a forward pass (`plume bench
 * --threads-profile`): per thread and region (matmuls, attention, norms, ...), the time spent
 * on a parallel loop's items, and for the calling thread the serial time between loops and the
 * time it waits at the end of a loop for the other members; for the other threads how long a
 * loop waited for them to join. The pool records (pool.c), forward.c names the regions; off
 * (the default), recording costs one branch per loop and per chunk. Benchmarks only. */
#ifndef PLUME_PROFILE_H
#define PLUME_PROFILE_H

#include <stdint.h>
#include <stdio.h>

/* What a step is doing; forward.c sets it before each part. */
typedef enum {
    PLUME_REG_EMBED,  /* token and per-layer embeddings, their projection and norms */
    PLUME_REG_ROPE,   /* cos/sin of the step's positions */
    PLUME_REG_NORMS,  /* per-row work of a layer: norms, RoPE, residual adds */
    PLUME_REG_QUANT,  /* int8 activations: the quantizer of a matmul's input */
    PLUME_REG_MATMUL, /* the layers' matmuls (and gelu(gate) * up, in the gate/up loop) */
    PLUME_REG_ATTN,   /* attention over the caches */
    PLUME_REG_KV,     /* the step's K/V: int8 rounding, commit to the caches */
    PLUME_REG_HEAD,   /* final norm, tied head, softcap */
    PLUME_REG_N
} plume_region;

#define PLUME_PROF_THREADS 64 /* threads a profile keeps apart; more share the last slot */

/* One thread's counters, on a cache line (and more) of its own: no false sharing. */
typedef struct {
    uint64_t work_ns[PLUME_REG_N];   /* in a parallel loop's items */
    uint64_t serial_ns[PLUME_REG_N]; /* caller only: outside parallel loops (the others wait) */
    uint64_t wake_ns[PLUME_REG_N];   /* caller only: publishing a loop and waking sleepers */
    uint64_t wait_ns[PLUME_REG_N];   /* caller only: its items done, waiting for the members */
    uint64_t join_ns[PLUME_REG_N];   /* workers only: from a loop's start to their joining it */
    uint64_t loops[PLUME_REG_N];     /* loops run (caller) or joined (workers) */
    uint64_t chunks[PLUME_REG_N];    /* chunks of items taken */
    char pad[64];
} plume_prof_thread;

/* A recording: the pool's threads, the steps it covered and their wall time (plume.h names
 * it for plume_model_profile_start). */
typedef struct plume_prof {
    int32_t threads;
    int64_t steps;
    uint64_t wall_ns;                /* from plume_pool_profile_start to _stop, the caller's clock */
    uint64_t start_ns, last_ns;      /* caller: the recording's start, the last event */
    int32_t region;                  /* the current region */
    plume_prof_thread t[PLUME_PROF_THREADS];
} plume_prof;

/* Monotonic nanoseconds. */
uint64_t plume_prof_now(void);

/* Print a recording as markdown: per region, ms per step of serial work, of each thread's
 * items, of the caller's waits and the workers' joins; then the serial share, each thread's
 * busy share and what Amdahl's law makes of them at 2, 4 and 8 times the threads (`title`
 * heads it). */
void plume_prof_print(FILE *f, const plume_prof *p, const char *title);

#endif
