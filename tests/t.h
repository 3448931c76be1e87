/* t.h -- the test harness: each test is a function; a run prints one line per test,
 * "PASS name" or "FAIL name: why", which tests/run.sh counts. */
#ifndef PLUME_T_H
#define PLUME_T_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed_now; /* failures inside the running test */
static int t_total_failed;

/* Record a failed check with its location (the first one per test is printed). */
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            if (!t_failed_now) {                                                             \
                printf("  %s:%d: ", __FILE__, __LINE__);                                     \
                printf(__VA_ARGS__);                                                         \
                printf("\n");                                                                \
            }                                                                                \
            t_failed_now++;                                                                  \
        }                                                                                    \
    } while (0)

/* Run one test function and print its verdict. */
static void t_run(const char *name, void (*fn)(void)) {
    t_failed_now = 0;
    fn();
    if (t_failed_now) {
        printf("FAIL %s\n", name);
        t_total_failed++;
    } else {
        printf("PASS %s\n", name);
    }
    fflush(stdout);
}
#define RUN(fn) t_run(#fn, fn)

/* Run one test function as "name [tag]": the same test again on another model. */
static void t_run_tagged(const char *name, const char *tag, void (*fn)(void)) {
    char full[256];
    snprintf(full, sizeof full, "%s [%s]", name, tag);
    t_run(full, fn);
}
#define RUN_ON(tag, fn) t_run_tagged(#fn, tag, fn)

/* The first place needle stands in hay, or NULL (memmem is GNU; the portable build is POSIX). */
static uint8_t *t_memmem(const void *hay, size_t n, const void *needle, size_t k) {
    const uint8_t *h = hay;
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (!memcmp(h + i, needle, k)) return (uint8_t *)(uintptr_t)(h + i);
    return NULL;
}

/* Where the test fixtures live: $PLUME_TEST_DATA or tests/data. */
static const char *t_data(void) {
    const char *d = getenv("PLUME_TEST_DATA");
    return d && *d ? d : "tests/data";
}

/* Where the build lives: $BUILD or build. */
static const char *t_build(void) {
    const char *d = getenv("BUILD");
    return d && *d ? d : "build";
}

/* A fresh scratch directory under $TMPDIR, malloc'd path. */
static char *t_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char *p = NULL;
    size_t n = strlen(base && *base ? base : "/tmp") + strlen(tag) + 32;
    if (!(p = malloc(n))) return NULL;
    snprintf(p, n, "%s/plume-test-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(p)) { free(p); return NULL; }
    return p;
}

/* Relative RMS of a against reference b: sqrt(mean((a-b)^2) / mean(b^2)). */
static double t_rel_rms(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double t_max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

/* Run a shell command; capture its stdout+stderr into out (NUL-terminated; a NUL byte of the
 * output, as a sampled byte token <0x00> prints, comes as T_SH_NUL so that the text after it
 * is searched too); return the exit status (or -1 if it did not exit normally, e.g. a crash). */
#include <sys/wait.h>
#define T_SH_NUL '\x1a' /* what t_sh puts for a NUL byte of the output (ASCII SUB) */
static int t_sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static int t_sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) out[0] = 0;
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, p)) > 0)
        if (out && n + 1 < cap) {
            size_t k = r < cap - n - 1 ? r : cap - n - 1;
            for (size_t i = 0; i < k; i++) /* a NUL (a sampled byte token <0x00>) would end the text early */
                out[n + i] = buf[i] ? buf[i] : T_SH_NUL;
            n += k;
            out[n] = 0;
        }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Make dir and link links[i][1] in it to tests/data/links[i][0] (absolute targets), for
 * checkpoints assembled from fixtures; 0 or -1. */
static inline int t_link_fixtures(const char *dir, const char *const (*links)[2], size_t n) {
    char out[1024];
    if (t_sh(out, sizeof out, "mkdir -p '%s'", dir)) return -1;
    for (size_t i = 0; i < n; i++) {
        char from[4096];
        snprintf(from, sizeof from, "%s/%s", t_data(), links[i][0]);
        char *abs = realpath(from, NULL);
        int rc = abs ? t_sh(out, sizeof out, "ln -s '%s' '%s/%s'", abs, dir, links[i][1]) : -1;
        free(abs);
        if (rc) return -1;
    }
    return 0;
}

#endif
