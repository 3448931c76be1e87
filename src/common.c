/* common.c -- errors, growable buffers, half-float conversion, mapped files, safe writes,
 * aligned memory, printable text. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
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
    int fd = plume_open_regular(path, err); /* a FIFO would block the open */
    if (fd < 0) return PLUME_EIO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return plume_fail(err, PLUME_EIO, "%s: cannot stat: %s", path, strerror(errno));
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

int plume_open_regular(const char *path, char **err) {
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int dir = S_ISDIR(sb.st_mode);
        close(fd);
        plume_fail(err, PLUME_EIO, "%s: %s", path, dir ? "is a directory" : "not a regular file (a FIFO, device or socket)");
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int plume_read_file(const char *path, char **buf, size_t *len, char **err) {
    *buf = NULL;
    int fd = plume_open_regular(path, err); /* a FIFO would block a plain open */
    if (fd < 0) return PLUME_EIO;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    }
    int rc = plume_read_stream(f, buf, len);
    fclose(f);
    if (rc == PLUME_ENOMEM) return plume_fail(err, rc, "%s: out of memory", path);
    if (rc) return plume_fail(err, rc, "%s: read error", path);
    return 0;
}

/* ---- writing files safely ------------------------------------------------------------------ */

#define PLUME_WFILE_BUF ((size_t)1 << 16) /* bytes gathered before a write(2) */

/* path + ".tmp-" + six random letters and digits, malloc'd: a name no one can have planted
 * ahead (O_EXCL refuses it anyway if someone did). */
static char *tmp_name(const char *path) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t rng = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                   (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
    uint64_t r = plume_rng_next(&rng);
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    char sfx[7];
    for (int i = 0; i < 6; i++, r /= 36) sfx[i] = al[r % 36];
    sfx[6] = 0;
    return plume_sprintf("%s.tmp-%s", path, sfx);
}

/* Open an existing destination that is not a regular file for writing through it: without
 * O_CREAT (nothing is made in its place), O_NONBLOCK while opening (a FIFO without a reader
 * fails with ENXIO instead of blocking). A link to a regular file is truncated. */
static int open_through(plume_wfile *w, const char *path, char **err) {
    int fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return plume_fail(err, PLUME_EIO, "%s: cannot write: %s", path,
                          errno == ENXIO ? "a FIFO (or socket) that no process reads" : strerror(errno));
    struct stat sb;
    int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &sb) != 0 || (S_ISREG(sb.st_mode) && ftruncate(fd, 0) != 0) ||
        (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) {
        int rc = plume_fail(err, PLUME_EIO, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    w->fd = fd;
    return 0;
}

int plume_wfile_open(plume_wfile *w, const char *path, int flags, char **err) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    struct stat sb;
    int there = lstat(path, &sb) == 0;
    if (there && S_ISDIR(sb.st_mode)) return plume_fail(err, PLUME_EIO, "%s: is a directory", path);
    if (!(w->path = strdup(path)) || !(w->buf = malloc(PLUME_WFILE_BUF))) {
        plume_wfile_abort(w);
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    if (there && !S_ISREG(sb.st_mode) && !(flags & PLUME_WRITE_REPLACE)) {
        int rc = open_through(w, path, err);
        if (rc) plume_wfile_abort(w);
        return rc;
    }
    for (int tries = 0; tries < 64 && w->fd < 0; tries++) {
        free(w->tmp);
        if (!(w->tmp = tmp_name(path))) break;
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        int rc = !w->tmp ? plume_fail(err, PLUME_ENOMEM, "out of memory")
                         : plume_fail(err, PLUME_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
        free(w->tmp);
        w->tmp = NULL; /* nothing of ours to remove */
        plume_wfile_abort(w);
        return rc;
    }
    return 0;
}

/* write(2) all of p, retrying short writes; 0 or errno. */
static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int plume_wfile_write(plume_wfile *w, const void *p, size_t n, char **err) {
    const uint8_t *b = p;
    if (!w->failed && w->nbuf + n > PLUME_WFILE_BUF) { /* flush, then large writes go straight */
        w->failed = write_all(w->fd, w->buf, w->nbuf);
        w->nbuf = 0;
        if (!w->failed && n >= PLUME_WFILE_BUF) {
            w->failed = write_all(w->fd, b, n);
            n = 0;
        }
    }
    if (w->failed) return plume_fail(err, PLUME_EIO, "%s: write failed: %s", w->path, strerror(w->failed));
    memcpy(w->buf + w->nbuf, b, n);
    w->nbuf += n;
    return 0;
}

int plume_wfile_commit(plume_wfile *w, char **err) {
    if (!w->failed && w->nbuf) w->failed = write_all(w->fd, w->buf, w->nbuf);
    w->nbuf = 0;
    int e = w->failed;
    /* fsync of a pipe or a character device fails with EINVAL: nothing to make durable */
    if (!e && fsync(w->fd) != 0 && (w->tmp || (errno != EINVAL && errno != EROFS && errno != ENOTSUP))) e = errno;
    if (close(w->fd) != 0 && !e && errno != EINTR) e = errno;
    w->fd = -1;
    if (!e && w->tmp && rename(w->tmp, w->path) != 0) e = errno;
    int rc = e ? plume_fail(err, PLUME_EIO, "%s: write failed: %s", w->path, strerror(e)) : 0;
    if (!e) {
        free(w->tmp);
        w->tmp = NULL;
    }
    plume_wfile_abort(w);
    return rc;
}

void plume_wfile_abort(plume_wfile *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    free(w->buf);
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

int plume_write_file(const char *path, const void *buf, size_t len, int flags, char **err) {
    plume_wfile w;
    int rc = plume_wfile_open(&w, path, flags, err);
    if (!rc) rc = plume_wfile_write(&w, buf, len, err);
    if (!rc) return plume_wfile_commit(&w, err);
    plume_wfile_abort(&w);
    return rc;
}

char *plume_mkdtemp_beside(const char *path, char **err) {
    for (int tries = 0; tries < 64; tries++) {
        char *d = tmp_name(path);
        if (!d) break;
        if (mkdir(d, 0755) == 0) return d;
        int e = errno;
        if (e != EEXIST) {
            plume_fail(err, PLUME_EIO, "%s: cannot create: %s", d, strerror(e));
            free(d);
            return NULL;
        }
        free(d);
    }
    plume_fail(err, PLUME_EIO, "%s: cannot make a temporary directory beside it", path);
    return NULL;
}

/* nftw callback of plume_rm_tree: remove one entry (a link itself, never what it points to). */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int plume_rm_tree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

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

/* ---- printing untrusted text ------------------------------------------------------------ */

/* The length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    size_t k;
    unsigned cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07, min = 0x10000;
    else return 0;
    for (size_t j = 1; j <= k; j++) {
        if ((s[j] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
        cp = cp << 6 | (s[j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return k + 1;
}

char *plume_str_printable(char *dst, size_t cap, const char *src) {
    if (!cap) return dst;
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)(src ? src : "");
    while (*s) {
        size_t k = utf8_len(s);
        /* C1 controls are U+0080..U+009F: 0xc2 0x80..0x9f in UTF-8 */
        int bad = k == 0 || (k == 1 && ((*s < 0x20 && *s != '\t') || *s == 0x7f)) || (k == 2 && s[0] == 0xc2 && s[1] < 0xa0);
        size_t need = bad ? 4 : k;
        if (o + need >= cap) break;
        if (bad) {
            snprintf(dst + o, 5, "\\x%02x", *s);
            k = 1;
        } else {
            memcpy(dst + o, s, k);
        }
        o += need;
        s += k;
    }
    dst[o] = 0;
    return dst;
}

double plume_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
