/* test_pool.c -- the thread pool: every item of every loop done exactly once, with pauses
 * between loops long enough for the workers to fall asleep (so the wait and wake of this
 * build's kind are exercised), fixed and guided chunks; guided chunks are whole grains that
 * shrink from a share of the loop down to one grain; the wait kind is the one the build asked
 * for. */
#include <stdatomic.h>
#include <time.h>

#include "pool.h"
#include "t.h"

typedef struct {
    _Atomic int64_t sum;
    _Atomic int32_t hits[1000];
    _Atomic int32_t chunk_len[1000]; /* by first item: the chunk's length */
} count_task;

/* Add every item of [a, b) to the sum and count its visits; note the chunk. */
static void count_items(void *ctx, int32_t ith, int64_t a, int64_t b) {
    (void)ith;
    count_task *t = ctx;
    atomic_store(&t->chunk_len[a], (int32_t)(b - a));
    for (int64_t i = a; i < b; i++) {
        atomic_fetch_add(&t->sum, i);
        atomic_fetch_add(&t->hits[i], 1);
    }
}

static void test_every_item_once_across_sleeps(void) {
    plume_pool *p = plume_pool_new(3);
    CHECK(p && plume_pool_size(p) == 3, "pool of 3");
    static count_task t;
    for (int loop = 0; p && loop < 300; loop++) {
        int64_t n = 1 + loop * 7 % 1000;
        atomic_store(&t.sum, 0);
        for (int i = 0; i < 1000; i++) atomic_store(&t.hits[i], 0), atomic_store(&t.chunk_len[i], 0);
        const int64_t grain = 1 + loop % 5;
        const int guided = loop % 2;
        (guided ? plume_pool_for_guided : plume_pool_for)(p, n, grain, count_items, &t);
        CHECK(atomic_load(&t.sum) == n * (n - 1) / 2, "loop %d: sum %lld", loop, (long long)atomic_load(&t.sum));
        for (int64_t i = 0; i < n; i++) CHECK(atomic_load(&t.hits[i]) == 1, "loop %d item %lld", loop, (long long)i);
        /* chunks in item order: whole grains (the last may be cut at n); guided: no longer than
         * the one before, the first a 1/6 share (3 threads) of the loop */
        int64_t prev = n;
        for (int64_t a = 0; a < n;) {
            int64_t len = atomic_load(&t.chunk_len[a]);
            CHECK(len > 0 && (len % grain == 0 || a + len == n), "loop %d: chunk at %lld of %lld", loop,
                  (long long)a, (long long)len);
            if (len <= 0) break;
            if (guided && a + len < n) {
                CHECK(len <= prev, "loop %d: guided chunk at %lld grew to %lld", loop, (long long)a, (long long)len);
                if (a == 0) CHECK(len == (n / 6 > grain ? (n / 6 + grain - 1) / grain * grain : grain),
                                  "loop %d: first guided chunk %lld of %lld", loop, (long long)len, (long long)n);
            }
            if (!guided) CHECK(len == grain || a + len == n, "loop %d: fixed chunk %lld", loop, (long long)len);
            prev = len;
            a += len;
        }
        if (loop % 10 == 0) { /* long enough for the workers to stop spinning and sleep */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    plume_pool_free(p);
}

static void test_wait_kind_is_the_builds(void) {
    const char *k = plume_pool_wait_kind();
#if defined(PLUME_PORTABLE)
    CHECK(!strcmp(k, "condvar"), "portable build waits with %s", k);
#elif defined(__linux__)
    CHECK(!strcmp(k, "futex"), "Linux build waits with %s", k);
#else
    CHECK(k && *k, "no wait kind");
#endif
    printf("  pool wait: %s\n", k);
}

int main(void) {
    RUN(test_every_item_once_across_sleeps);
    RUN(test_wait_kind_is_the_builds);
    return t_total_failed != 0;
}
