/* bandwidth.c -- bandwidth probes for benchmarks (plume bench): all threads of a pool stream
 * the weights a step reads, or a fresh buffer, as the decode tiles read them (several
 * far-apart spans side by side, PLUME_STREAM_SPANS; common.c's plume_stream_sum). Nothing here
 * runs in inference. */
#include <stdatomic.h>

#include "model.h"

/* A streaming probe's work: maps cut into pieces. */
typedef struct {
    const plume_map *maps[PLUME_DENSE_MAPS];
    int64_t first[PLUME_DENSE_MAPS + 1]; /* index of each map's first piece; first[n] = all pieces */
    int n;
    size_t piece;          /* bytes per item (a multiple of 64) */
    _Atomic uint64_t sink;
    _Atomic uint64_t read; /* bytes read by all passes */
} stream_task;

/* Piece i of the maps: its bytes at *p; returns its length. */
static size_t stream_piece(const stream_task *t, int64_t i, const void **p) {
    int k = 0;
    while (i >= t->first[k + 1]) k++;
    const size_t off = (size_t)(i - t->first[k]) * t->piece, left = t->maps[k]->size - off;
    *p = (const uint8_t *)t->maps[k]->data + off;
    return left < t->piece ? left : t->piece;
}

/* Items [a, b): item i < Q = pieces / 4 reads pieces i, i + Q, i + 2Q and i + 3Q side by side
 * (far-apart spans, as the decode tiles read them); the rest read the last pieces alone. */
static void stream_range(void *ctx, int32_t ith, int64_t a, int64_t b) {
    (void)ith;
    stream_task *t = ctx;
    const int64_t q = t->first[t->n] / PLUME_STREAM_SPANS;
    uint64_t s = 0, read = 0;
    for (int64_t i = a; i < b; i++) {
        const void *p[PLUME_STREAM_SPANS];
        size_t n[PLUME_STREAM_SPANS], common = SIZE_MAX;
        const int ns = i < q ? PLUME_STREAM_SPANS : 1;
        for (int j = 0; j < ns; j++) {
            n[j] = stream_piece(t, i < q ? i + j * q : PLUME_STREAM_SPANS * q + (i - q), &p[j]);
            if (n[j] < common) common = n[j];
        }
        s += plume_stream_sum(p, ns, common);
        for (int j = 0; j < ns; j++) { /* a map's last piece is short */
            const void *rest = (const uint8_t *)p[j] + common;
            if (n[j] > common) s += plume_stream_sum(&rest, 1, n[j] - common);
            read += n[j];
        }
    }
    atomic_fetch_xor_explicit(&t->sink, s, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->read, read, memory_order_relaxed);
}

/* The best of `passes` passes of the pool's threads streaming maps[0, n) in items of piece
 * bytes (a multiple of 64), in GB/s; 0 if there is nothing to read. *read (if not NULL): bytes
 * a pass read. */
static double stream_maps(plume_pool *pool, const plume_map *const *maps, int n, int32_t passes, size_t piece,
                          uint64_t *read) {
    stream_task t = {.n = n, .piece = piece};
    uint64_t bytes = 0;
    for (int k = 0; k < n; k++) {
        t.maps[k] = maps[k];
        t.first[k + 1] = t.first[k] + (int64_t)((maps[k]->size + piece - 1) / piece);
        bytes += maps[k]->size;
    }
    double best = 0;
    for (int32_t p = 0; bytes && p < passes; p++) {
        double t0 = plume_now();
        const int64_t pieces = t.first[t.n], q = pieces / PLUME_STREAM_SPANS;
        plume_pool_for(pool, q + (pieces - PLUME_STREAM_SPANS * q), 1, stream_range, &t);
        double gbs = (double)bytes / (plume_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    if (read) *read = passes > 0 ? atomic_load(&t.read) / (uint64_t)passes : 0;
    return best;
}

double plume_model_stream_bandwidth(plume_model *m, int32_t passes, size_t piece, uint64_t *read) {
    const plume_map *maps[PLUME_DENSE_MAPS];
    int n = plume_model_dense_maps(m, maps);
    return stream_maps(m->pool, maps, n, passes, piece ? (piece + 63) / 64 * 64 : (size_t)1 << 20, read);
}

double plume_memory_bandwidth(int32_t n_threads, size_t bytes, int32_t passes) {
    bytes = bytes / ((size_t)PLUME_STREAM_SPANS << 20) * ((size_t)PLUME_STREAM_SPANS << 20); /* whole 1 MiB pieces */
    uint8_t *buf = bytes ? plume_alloc(bytes) : NULL;
    plume_pool *pool = buf ? plume_pool_new(n_threads > 0 ? n_threads : plume_physical_cores()) : NULL;
    double best = 0;
    if (pool) {
        memset(buf, 1, bytes); /* touch every page */
        plume_map map = {buf, bytes};
        const plume_map *maps[1] = {&map};
        best = stream_maps(pool, maps, 1, passes, (size_t)1 << 20, NULL);
    }
    plume_pool_free(pool);
    plume_dealloc(buf);
    return best;
}
