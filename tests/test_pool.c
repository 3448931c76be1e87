/* test_pool.c -- the thread pool: every item of every loop done exactly once, with pauses
 * between loops long enough for the workers to fall asleep (so the wait and wake of this
 * build's kind are exercised), fixed and guided chunks; guided chunks are whole grains that
 * shrink from a share of the loop down to one grain; the wait kind is the one the build asked
 * for; the thread profile (profile.h) counts loops, chunks, serial work and time where they
 * happen. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

/* PLUME_POOL_SPIN_US=0: workers sleep as soon as a loop is done, so that every loop wakes them
 * (the futex or condition variable on every loop, back to back); a bad value keeps the default. */
static void test_every_item_once_without_spinning(void) {
    const char *vals[] = {"0", "junk"};
    for (int v = 0; v < 2; v++) {
        setenv("PLUME_POOL_SPIN_US", vals[v], 1);
        plume_pool *p = plume_pool_new(3);
        unsetenv("PLUME_POOL_SPIN_US");
        CHECK(p != NULL, "pool with PLUME_POOL_SPIN_US=%s", vals[v]);
        static count_task t;
        for (int loop = 0; p && loop < 200; loop++) {
            int64_t n = 50 + loop * 13 % 900;
            atomic_store(&t.sum, 0);
            for (int64_t i = 0; i < n; i++) atomic_store(&t.hits[i], 0);
            (loop % 2 ? plume_pool_for_guided : plume_pool_for)(p, n, 4, count_items, &t);
            CHECK(atomic_load(&t.sum) == n * (n - 1) / 2, "spin %s loop %d: sum", vals[v], loop);
            for (int64_t i = 0; i < n; i++) CHECK(atomic_load(&t.hits[i]) == 1, "spin %s loop %d item %lld", vals[v], loop, (long long)i);
        }
        plume_pool_free(p);
    }
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

/* Busy for about us microseconds. */
static void spin_us(int64_t us) {
    const uint64_t end = plume_prof_now() + (uint64_t)us * 1000u;
    while (plume_prof_now() < end) {
    }
}

/* Items of 20 us each. */
static void slow_items(void *ctx, int32_t ith, int64_t a, int64_t b) {
    (void)ctx;
    (void)ith;
    spin_us(20 * (b - a));
}

/* A recording of serial work, loops and a loop too small to share, on 3 threads and on 1. */
static void test_profile_counts(void) {
    for (int32_t n = 3; n >= 1; n -= 2) {
        plume_pool *p = plume_pool_new(n);
        plume_prof *prof = malloc(sizeof *prof);
        CHECK(p && prof, "pool of %d", n);
        if (!p || !prof) {
            plume_pool_free(p);
            free(prof);
            return;
        }
        plume_pool_profile_start(p, prof);
        plume_pool_region(p, PLUME_REG_EMBED);
        spin_us(2000); /* serial work of the embeddings */
        plume_pool_region(p, PLUME_REG_MATMUL);
        for (int k = 0; k < 20; k++) plume_pool_for(p, 30, 2, slow_items, NULL);
        plume_pool_region(p, PLUME_REG_ATTN);
        plume_pool_for(p, 3, 4, slow_items, NULL); /* one chunk: serial work of the region */
        plume_pool_profile_stop(p);
        prof->steps = 2;
        uint64_t chunks = 0, work = 0, joined = 0, timeline = 0;
        for (int32_t i = 0; i < n; i++) {
            chunks += prof->t[i].chunks[PLUME_REG_MATMUL];
            work += prof->t[i].work_ns[PLUME_REG_MATMUL];
            joined += i ? prof->t[i].loops[PLUME_REG_MATMUL] : 0;
        }
        for (int r = 0; r < PLUME_REG_N; r++)
            timeline += prof->t[0].serial_ns[r] + prof->t[0].work_ns[r] + prof->t[0].wake_ns[r] + prof->t[0].wait_ns[r];
        CHECK(prof->threads == n && prof->t[0].loops[PLUME_REG_MATMUL] == 20, "%d threads: %lld loops", n,
              (long long)prof->t[0].loops[PLUME_REG_MATMUL]);
        CHECK(chunks == (n > 1 ? 20 * 15 : 20), "%d threads: %llu chunks", n, (unsigned long long)chunks);
        CHECK(joined <= 20 * (uint64_t)(n - 1), "%d threads: workers joined %llu loops", n, (unsigned long long)joined);
        CHECK(work >= 20 * 30 * 20000u, "%d threads: items took %llu ns", n, (unsigned long long)work);
        CHECK(prof->t[0].serial_ns[PLUME_REG_EMBED] >= 2000000u && prof->t[0].serial_ns[PLUME_REG_ATTN] >= 60000u &&
                  prof->t[0].loops[PLUME_REG_ATTN] == 0,
              "%d threads: serial %llu / %llu ns, %llu loops", n, (unsigned long long)prof->t[0].serial_ns[PLUME_REG_EMBED],
              (unsigned long long)prof->t[0].serial_ns[PLUME_REG_ATTN], (unsigned long long)prof->t[0].loops[PLUME_REG_ATTN]);
        /* the caller's serial work, items and waits never overlap: their sum is within its wall time */
        CHECK(timeline <= prof->wall_ns && timeline >= prof->wall_ns / 2, "%d threads: %llu ns of %llu accounted", n,
              (unsigned long long)timeline, (unsigned long long)prof->wall_ns);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            plume_prof_print(f, prof, "test");
            fclose(f);
        }
        CHECK(text && strstr(text, "| matmuls | ") && strstr(text, "| attention | ") && strstr(text, "| embeddings | ") &&
                  strstr(text, "serial (one thread works)") && strstr(text, "Amdahl") && strstr(text, "| 10.0 |"),
              "%d threads: report %s", n, text ? text : "(none)");
        free(text);
        free(prof);
        plume_pool_free(p);
    }
}

int main(void) {
    RUN(test_every_item_once_across_sleeps);
    RUN(test_every_item_once_without_spinning);
    RUN(test_profile_counts);
    RUN(test_wait_kind_is_the_builds);
    return t_total_failed != 0;
}
