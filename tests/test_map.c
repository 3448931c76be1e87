/* test_map.c -- dense maps (plume_map_open_dense): a map at a huge-page boundary reads every
 * byte of the file unchanged, whether the file is cached or its cache was just dropped
 * (plume_file_uncache); files too small for huge pages, empty ones and missing ones behave as
 * plume_map_open does; the share of huge pages reported is a fraction. Whether the system
 * gives huge pages at all is not asserted: that is the kernel's and the filesystem's choice
 * (docs/BENCHMARKS.md shows it measured by plume bench). Also: the read loop of the bandwidth
 * probes (plume_stream_sum) reads every byte of every span it is given. */
#include "common.h"
#include "t.h"

static char *tmp;

enum { FILE_BYTES = (9 << 20) + 12345 }; /* four and a half 2 MiB pages and a partial page */

/* Write len bytes to tmp/name; the path (static buffer). */
static const char *write_tmp(const char *name, const void *data, size_t len) {
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        if (len) fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

/* Write FILE_BYTES of a known pattern (seeded) to tmp/name; the path. */
static const char *write_pattern(const char *name, uint64_t seed) {
    uint8_t *b = malloc(FILE_BYTES);
    for (size_t i = 0; b && i < FILE_BYTES; i++) b[i] = (uint8_t)plume_rng_next(&seed);
    const char *path = write_tmp(name, b, b ? FILE_BYTES : 0);
    free(b);
    return path;
}

/* Whether m holds exactly the pattern of seed. */
static int holds_pattern(const plume_map *m, uint64_t seed) {
    if (!m->data || m->size != FILE_BYTES) return 0;
    for (size_t i = 0; i < FILE_BYTES; i++)
        if (m->data[i] != (uint8_t)plume_rng_next(&seed)) return 0;
    return 1;
}

/* Cached, then uncached: the dense map reads the same bytes, from a 2 MiB boundary. */
static void test_dense_same_bytes(void) {
    for (int uncache = 0; uncache < 2; uncache++) {
        const char *path = write_pattern("dense.bin", 42);
        if (uncache) plume_file_uncache(path);
        plume_map m;
        char *err = NULL;
        CHECK(plume_map_open_dense(&m, path, &err) == 0, "open: %s", err ? err : "?");
#if defined(__linux__) && !defined(PLUME_PORTABLE)
        CHECK(((uintptr_t)m.data & ((1u << 21) - 1)) == 0, "dense map at %p, not at a 2 MiB boundary", (void *)m.data);
#endif
        CHECK(holds_pattern(&m, 42), "the dense map (uncache %d) does not read the file's bytes", uncache);
        double share = plume_map_huge_share(&m);
        CHECK(share >= 0.0 && share <= 1.0, "huge share %f", share);
        plume_map_free(&m);
        CHECK(m.data == NULL && m.size == 0, "freed map not cleared");
        free(err);
    }
}

/* Below two huge pages, empty, missing: what plume_map_open gives. */
static void test_dense_small_empty_missing(void) {
    plume_map m;
    char *err = NULL;
    CHECK(plume_map_open_dense(&m, write_tmp("small.bin", "hello", 5), &err) == 0, "small: %s", err ? err : "?");
    CHECK(m.size == 5 && m.data && !memcmp(m.data, "hello", 5), "small file: %zu bytes", m.size);
    plume_map_free(&m);
    CHECK(plume_map_open_dense(&m, write_tmp("empty.bin", "", 0), &err) == 0, "empty: %s", err ? err : "?");
    CHECK(m.size == 0 && m.data == NULL, "empty file: %zu bytes", m.size);
    char path[720];
    snprintf(path, sizeof path, "%s/missing.bin", tmp);
    CHECK(plume_map_open_dense(&m, path, &err) == PLUME_EIO && err && strstr(err, "missing.bin"), "missing: %s",
          err ? err : "no error");
    free(err);
}

/* plume_stream_sum over 1-8 spans of lengths with and without a tail: changing any byte of
 * any span changes the checksum (a loop that skipped a line, a tail or a span would not). */
static void test_stream_sum_reads_every_byte(void) {
    enum { SPAN = 1024 };
    uint8_t *buf = plume_alloc(8 * SPAN);
    CHECK(buf, "out of memory");
    if (!buf) return;
    uint64_t rng = 5;
    for (int i = 0; i < 8 * SPAN; i++) buf[i] = (uint8_t)plume_rng_next(&rng);
    const int spans[] = {1, 2, 3, 4, 8};
    const size_t lens[] = {64, 320, 1000, SPAN};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 4; b++) {
            const void *p[8];
            for (int s = 0; s < spans[a]; s++) p[s] = buf + (size_t)s * SPAN;
            const uint64_t base = plume_stream_sum(p, spans[a], lens[b]);
            int missed = -1;
            for (int s = 0; s < spans[a] && missed < 0; s++)
                for (size_t i = 0; i < lens[b] && missed < 0; i++) {
                    buf[s * SPAN + i] ^= 0x10;
                    if (plume_stream_sum(p, spans[a], lens[b]) == base) missed = (int)(s * SPAN + i);
                    buf[s * SPAN + i] ^= 0x10;
                }
            CHECK(missed < 0 && plume_stream_sum(p, spans[a], lens[b]) == base,
                  "%d spans of %zu bytes: byte %d of the buffer not read", spans[a], lens[b], missed);
        }
    plume_dealloc(buf);
}

int main(void) {
    tmp = t_tmpdir("map");
    RUN(test_stream_sum_reads_every_byte);
    RUN(test_dense_same_bytes);
    RUN(test_dense_small_empty_missing);
    char out[1024];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
