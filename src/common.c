/* common.c -- errors, growable buffers, half-float conversion, mapped and atomic files, aligned
 * memory. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- errors ---------------------------------------------------------------------------- */

/* Format the message into *err unless a message is already there (the first one wins). */
int plume_fail(char **err, int code, const char *fmt, ...) {
    if (!err || *err) return code;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap); /* vasprintf is a GNU/BSD extension */
    *err = n < 0 ? NULL : malloc((size_t)n + 1);
    if (*err) vsnprintf(*err, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    va_end(ap);
    return code;
}

/* ---- growable buffers ------------------------------------------------------------------ */

/* Double *cap (from 16) until it holds need items of size bytes, then realloc *pp. */
int plume_grow(void *pp, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n = n > SIZE_MAX / 2 ? need : n * 2;
    if (size && n > SIZE_MAX / size) return PLUME_ENOMEM;
    void *p;
    memcpy(&p, pp, sizeof p);
    p = realloc(p, n * size);
    if (!p) return PLUME_ENOMEM;
    memcpy(pp, &p, sizeof p);
    *cap = n;
    return 0;
}

/* Room for n more bytes and the NUL; latches oom on failure. */
static int buf_reserve(plume_buf *b, size_t n) {
    if (b->oom) return -1;
    if (n > SIZE_MAX - b->len - 1 || plume_grow(&b->p, &b->cap, b->len + n + 1, 1)) {
        b->oom = 1;
        return -1;
    }
    return 0;
}

void plume_buf_put(plume_buf *b, const void *s, size_t n) {
    if (buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void plume_buf_puts(plume_buf *b, const char *s) { plume_buf_put(b, s, strlen(s)); }

void plume_buf_printf(plume_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) b->oom = 1;
    else if (!buf_reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    va_end(ap);
}

char *plume_buf_take(plume_buf *b) {
    if (!b->oom && !b->p) plume_buf_put(b, "", 0);
    char *p = b->oom ? NULL : b->p;
    if (!p) free(b->p);
    memset(b, 0, sizeof *b);
    return p;
}

void plume_buf_free(plume_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- half floats ----------------------------------------------------------------------- */

/* Round a float to binary16, nearest even, handling subnormals, overflow and NaN. */
uint16_t plume_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;     /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00;    /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                         /* below 2^-14: subnormal or zero */
        float af;
        memcpy(&af, &a, 4);
        /* Adding 0.5 shifts the mantissa so that float rounding does the work (RNE). */
        float r = af + 0.5f;
        uint32_t ru;
        memcpy(&ru, &r, 4);
        return sign | (uint16_t)(ru - 0x3f000000u);
    }
    uint32_t mant_odd = (a >> 13) & 1;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return sign | (uint16_t)(a >> 13);
}

/* ---- files ----------------------------------------------------------------------------- */

/* ---- huge pages (dense maps and big blocks) ---------------------------------------------- */

#if defined(__linux__) && !defined(PLUME_PORTABLE)
#define PLUME_HUGE 1
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

enum { DENSE_WINDOWS = 16 }; /* huge-page windows sampled per dense map */

static atomic_int huge_seen;    /* some dense map of this process got huge pages */
static atomic_size_t huge_size; /* huge_bytes(), once read */

/* Bytes of a PMD mapping here (2 MiB on x86-64 and 4 KiB-page arm64): sysfs, read once. */
static size_t huge_bytes(void) {
    size_t v = atomic_load(&huge_size);
    if (v) return v;
    v = (size_t)2 << 20;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r");
    if (f) {
        unsigned long long b = 0;
        if (fscanf(f, "%llu", &b) == 1 && b >= 4096 && (b & (b - 1)) == 0) v = (size_t)b;
        fclose(f);
    }
    atomic_store(&huge_size, v);
    return v;
}

/* Rss and FilePmdMapped (bytes) of the VMAs inside [p, p + n), from /proc/self/smaps; -1 if
 * that cannot be read. */
static int smaps_huge(const void *p, size_t n, int64_t *rss, int64_t *pmd) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    unsigned long long kb;
    const uintptr_t lo = (uintptr_t)p, hi = lo + n;
    *rss = *pmd = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) in = a >= lo && b <= ((hi + 4095) & ~(uintptr_t)4095);
        else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) *rss += (int64_t)kb << 10;
        else if (in && sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) *pmd += (int64_t)kb << 10;
    }
    fclose(f);
    return 0;
}

/* A read-only map of fd's n bytes at a multiple of h, asked for huge pages, nothing faulted
 * in; NULL on failure. */
static void *map_aligned(int fd, size_t n, size_t h) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = (n + h + pg - 1) / pg * pg, len = (n + pg - 1) / pg * pg;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)r + h - 1) & ~(uintptr_t)(h - 1));
    if (mmap(a, n, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(r, span);
        return NULL;
    }
    if (a > r) munmap(r, (size_t)(a - r));
    if (r + span > a + len) munmap(a + len, (size_t)(r + span - (a + len)));
    madvise(a, n, MADV_HUGEPAGE);
    return a;
}

/* Fault in DENSE_WINDOWS windows of h bytes spread over m; the share of the resident bytes
 * that huge pages map. */
static double sample_windows(const plume_map *m, size_t h) {
    for (int k = 0; k < DENSE_WINDOWS; k++) {
        size_t off = (size_t)((double)m->size * (2 * k + 1) / (2 * DENSE_WINDOWS)) & ~(h - 1);
        if (off + h <= m->size) madvise((void *)(m->data + off), h, MADV_POPULATE_READ);
    }
    return plume_map_huge_share(m);
}

/* fd's n bytes as a dense map (plume_map_open_dense), or NULL to map them the plain way. */
static void *map_dense(int fd, size_t n) {
    const size_t h = huge_bytes();
    if (n < 2 * h) return NULL;
    plume_map m = {map_aligned(fd, n, h), n};
    if (!m.data) return NULL;
    double share = sample_windows(&m, h);
    if (share > 0) atomic_store(&huge_seen, 1);
    if (share < 0.9 && atomic_load(&huge_seen)) {
        /* cached in small folios: a fresh map (nothing faulted in), the old one gone, then the
         * clean cache dropped (no page of it is mapped by us now): faults read it again in
         * huge folios */
        void *q = map_aligned(fd, n, h);
        if (q) {
            munmap((void *)m.data, n);
            m.data = q;
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            sample_windows(&m, h);
        }
    }
    return (void *)m.data;
}

double plume_map_huge_share(const plume_map *m) {
    int64_t rss, pmd;
    if (!m->data || smaps_huge(m->data, m->size, &rss, &pmd) || rss <= 0) return 0.0;
    return (double)pmd / (double)rss;
}

void plume_file_uncache(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}
#else
#define PLUME_HUGE 0
static void *map_dense(int fd, size_t n) {
    (void)fd;
    (void)n;
    return NULL;
}
double plume_map_huge_share(const plume_map *m) {
    (void)m;
    return 0.0;
}
void plume_file_uncache(const char *path) { (void)path; }
#endif

/* Map path read-only, dense (huge pages, above) or not. */
static int map_file(plume_map *m, const char *path, int dense, char **err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return plume_fail(err, PLUME_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size > 0) {
        void *p = dense ? map_dense(fd, (size_t)sb.st_size) : NULL;
        if (!p) p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return plume_fail(err, PLUME_EIO, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)sb.st_size;
    }
    close(fd);
    return 0;
}

int plume_map_open(plume_map *m, const char *path, char **err) { return map_file(m, path, 0, err); }

int plume_map_open_dense(plume_map *m, const char *path, char **err) { return map_file(m, path, 1, err); }

void plume_map_free(plume_map *m) {
    if (m && m->data) munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

int plume_read_stream(FILE *f, char **buf, size_t *len) {
    char *b = NULL;
    size_t cap = 0, n = 0;
    do {
        if (plume_grow(&b, &cap, n + 4096, 1)) {
            free(b);
            *buf = NULL;
            return PLUME_ENOMEM;
        }
        n += fread(b + n, 1, cap - n - 1, f);
    } while (n + 1 == cap);
    b[n] = 0;
    if (ferror(f)) {
        free(b);
        *buf = NULL;
        return PLUME_EIO;
    }
    *buf = b;
    if (len) *len = n;
    return 0;
}

int plume_read_file(const char *path, char **buf, size_t *len, char **err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = plume_read_stream(f, buf, len);
    fclose(f);
    if (rc == PLUME_ENOMEM) return plume_fail(err, rc, "%s: out of memory", path);
    if (rc) return plume_fail(err, rc, "%s: read error", path);
    return 0;
}

int plume_write_file_atomic(const char *path, const void *buf, size_t len, char **err) {
    char *tmp = plume_sprintf("%s.tmp", path);
    if (!tmp) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = plume_fail(err, PLUME_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    const uint8_t *p = buf;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
    }
    int ok = left == 0 && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int rc = plume_fail(err, PLUME_EIO, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return 0;
}

char *plume_sprintf(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = n < 0 ? NULL : malloc((size_t)n + 1);
    if (s) vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    va_end(ap);
    return s;
}

char *plume_path_join(const char *a, const char *b) { return plume_sprintf("%s/%s", a, b); }

int plume_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

int plume_mkdir_parent(const char *path, char **err) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return plume_fail(err, PLUME_EIO, "%s: path too long", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return 0;
    *slash = 0;
    for (char *s = p + 1;; s++) {
        int end = !*s;
        if (*s && *s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return plume_fail(err, PLUME_EIO, "%s: cannot create: %s", p, strerror(errno));
        if (end) break;
        *s = '/';
    }
    return 0;
}

void *plume_alloc(size_t n) {
    if (n == 0) n = PLUME_ALIGN;
    if (n > SIZE_MAX - PLUME_ALIGN) return NULL;
    size_t r = (n + PLUME_ALIGN - 1) / PLUME_ALIGN * PLUME_ALIGN;
    /* Not zeroed: large blocks come from mmap as untouched zero pages, so a KV cache sized for
     * the whole context costs resident memory only as far as it is written. */
#if PLUME_HUGE
    /* Blocks of two huge pages or more (scratch, full-attention caches) get them: one TLB
     * entry per huge page that attention and the matmuls sweep (as the weights,
     * plume_map_open_dense); a cache then grows its resident memory a huge page at a time. */
    const size_t h = huge_bytes();
    if (r >= 2 * h) {
        const size_t whole = (r + h - 1) / h * h;
        void *p = aligned_alloc(h, whole);
        if (p) madvise(p, whole, MADV_HUGEPAGE);
        return p;
    }
#endif
    return aligned_alloc(PLUME_ALIGN, r);
}

void plume_dealloc(void *p) { free(p); }

/* Sum ns spans of n bytes (n a multiple of 64), 64 bytes of each in turn, into eight
 * accumulators (the compiler vectorizes it). */
static inline __attribute__((always_inline)) uint64_t stream_sum_plain(const uint8_t *const *p, int ns, size_t n) {
    uint64_t a[8] = {0};
    for (size_t i = 0; i < n; i += 64)
        for (int s = 0; s < ns; s++) {
            const uint64_t *w = (const uint64_t *)(p[s] + i);
            for (int k = 0; k < 8; k++) a[k] += w[k];
        }
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

#if defined(__x86_64__)
/* The same loop compiled for AVX2 (wider loads). */
__attribute__((target("avx2"))) static uint64_t stream_sum_avx2(const uint8_t *const *p, int ns, size_t n) {
    return stream_sum_plain(p, ns, n);
}

/* The same sums with 64-byte loads, four lines of each span in turn; NS a constant once
 * inlined, so that the spans' pointers stay in registers. */
static inline __attribute__((always_inline, target("avx512f"))) uint64_t stream_sum_avx512_n(const uint8_t *const *p,
                                                                                             const int NS, size_t n) {
    const uint8_t *q[PLUME_STREAM_SPANS_MAX];
    for (int s = 0; s < NS; s++) q[s] = p[s];
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256)
        for (int s = 0; s < NS; s++) {
            a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(q[s] + i));
            a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(q[s] + i + 64));
            a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(q[s] + i + 128));
            a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(q[s] + i + 192));
        }
    for (; i < n; i += 64)
        for (int s = 0; s < NS; s++) a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(q[s] + i));
    /* Lanes added as unsigned: the sum wraps by design (_mm512_reduce_add_epi64 adds signed). */
    uint64_t lane[8], sum = 0;
    _mm512_storeu_si512(lane, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    for (int k = 0; k < 8; k++) sum += lane[k];
    return sum;
}

/* stream_sum_avx512_n for 1, 2, 4 or 8 spans (others: the plain loop). On an EPYC (Zen 5), 1 GiB
 * read by one thread: 4 spans 43-44 GB/s, 1 span 31-34; by two threads, 4 spans each 81-85,
 * 1 span 70-76. */
__attribute__((target("avx512f"))) static uint64_t stream_sum_avx512(const uint8_t *const *p, int ns, size_t n) {
    switch (ns) {
    case 1: return stream_sum_avx512_n(p, 1, n);
    case 2: return stream_sum_avx512_n(p, 2, n);
    case 4: return stream_sum_avx512_n(p, 4, n);
    case 8: return stream_sum_avx512_n(p, 8, n);
    default: return stream_sum_plain(p, ns, n);
    }
}
#endif

uint64_t plume_stream_sum(const void *const *spans, int ns, size_t n) {
    const uint8_t *p[PLUME_STREAM_SPANS_MAX];
    if (ns > PLUME_STREAM_SPANS_MAX) ns = PLUME_STREAM_SPANS_MAX;
    for (int s = 0; s < ns; s++) p[s] = spans[s];
    const size_t whole = n / 64 * 64;
#if defined(__x86_64__)
    static _Atomic int isa = -1; /* 2 AVX-512, 1 AVX2, 0 neither */
    int v = atomic_load_explicit(&isa, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&isa, v, memory_order_relaxed);
    }
    uint64_t sum = v == 2   ? stream_sum_avx512(p, ns, whole)
                   : v == 1 ? stream_sum_avx2(p, ns, whole)
                            : stream_sum_plain(p, ns, whole);
#else
    uint64_t sum = stream_sum_plain(p, ns, whole);
#endif
    for (int s = 0; s < ns; s++)
        for (size_t i = whole; i < n; i++) sum += p[s][i];
    return sum;
}

double plume_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
