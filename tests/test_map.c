/* test_map.c -- dense maps (plume_map_dense): the remap at a huge-page boundary keeps every
 * byte of the file readable and unchanged, in the cases where the file is cached, where its
 * cache was just dropped (plume_file_uncache) and where it changed under the map (then the
 * map stays as it was); the share of huge pages it reports is a fraction. Whether the system
 * gives huge pages at all is not asserted: that is the kernel's and the filesystem's choice
 * (docs/BENCHMARKS.md shows it measured by plume bench). */
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "t.h"

static char *tmp;

enum { FILE_BYTES = (9 << 20) + 12345 }; /* four and a half 2 MiB pages and a partial page */

/* Write FILE_BYTES of a known pattern (seeded) to tmp/name; the path (static buffer). */
static const char *write_pattern(const char *name, uint64_t seed) {
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    uint8_t *b = malloc(FILE_BYTES);
    for (size_t i = 0; b && i < FILE_BYTES; i++) b[i] = (uint8_t)plume_rng_next(&seed);
    FILE *f = fopen(path, "wb");
    if (f && b) fwrite(b, 1, FILE_BYTES, f);
    if (f) fclose(f);
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
        CHECK(plume_map_open(&m, path, &err) == 0, "open: %s", err ? err : "?");
        double share = plume_map_dense(&m, path);
        CHECK(share >= 0.0 && share <= 1.0, "share %f", share);
#if defined(__linux__) && !defined(PLUME_PORTABLE)
        CHECK(((uintptr_t)m.data & ((1u << 21) - 1)) == 0, "dense map at %p, not at a 2 MiB boundary", (void *)m.data);
#endif
        CHECK(holds_pattern(&m, 42), "the dense map (uncache %d) does not read the file's bytes", uncache);
        double now = plume_map_huge_share(&m);
        CHECK(now >= 0.0 && now <= 1.0, "huge share %f", now);
        plume_map_free(&m);
        CHECK(m.data == NULL && m.size == 0, "freed map not cleared");
        free(err);
    }
}

/* A file replaced by one of another size after the map was made: the map keeps the old one. */
static void test_dense_changed_file(void) {
    const char *path = write_pattern("changed.bin", 7);
    plume_map m;
    char *err = NULL;
    CHECK(plume_map_open(&m, path, &err) == 0, "open: %s", err ? err : "?");
    const uint8_t *before = m.data;
    char other[720];
    snprintf(other, sizeof other, "%s.new", path);
    FILE *f = fopen(other, "wb");
    if (f) {
        fputs("short", f);
        fclose(f);
    }
    CHECK(rename(other, path) == 0, "rename");
    CHECK(plume_map_dense(&m, path) == 0.0, "a changed file was remapped");
    CHECK(m.data == before && holds_pattern(&m, 7), "the map of the old file was lost");
    plume_map_free(&m);
    free(err);
}

/* Small files (below two huge pages) and empty ones are left alone. */
static void test_dense_small(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/small.bin", tmp);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("hello", f);
        fclose(f);
    }
    plume_map m;
    char *err = NULL;
    CHECK(plume_map_open(&m, path, &err) == 0, "open: %s", err ? err : "?");
    const uint8_t *before = m.data;
    CHECK(plume_map_dense(&m, path) == 0.0 && m.data == before && !memcmp(m.data, "hello", 5), "small file");
    plume_map_free(&m);
    free(err);
}

int main(void) {
    tmp = t_tmpdir("map");
    RUN(test_dense_same_bytes);
    RUN(test_dense_changed_file);
    RUN(test_dense_small);
    char out[1024];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
