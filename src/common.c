/* common.c -- errors, half-float conversion, mapped and atomic files, aligned memory. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

int plume_map_open(plume_map *m, const char *path, char **err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return plume_fail(err, PLUME_EIO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return plume_fail(err, PLUME_EIO, "%s: mmap failed: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

void plume_map_free(plume_map *m) {
    if (m && m->data) munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

int plume_read_file(const char *path, char **buf, size_t *len, char **err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n - 1, f);
        n += r;
        if (n + 1 < cap) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    if (bad) { free(b); return plume_fail(err, PLUME_EIO, "%s: read error", path); }
    b[n] = 0;
    *buf = b;
    if (len) *len = n;
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
    struct stat st;
    return stat(path, &st) == 0;
}

void *plume_alloc(size_t n) {
    if (n == 0) n = PLUME_ALIGN;
    if (n > SIZE_MAX - PLUME_ALIGN) return NULL;
    size_t r = (n + PLUME_ALIGN - 1) / PLUME_ALIGN * PLUME_ALIGN;
    /* Not zeroed: large blocks come from mmap as untouched zero pages, so a KV cache sized for
     * the whole context costs resident memory only as far as it is written. */
    return aligned_alloc(PLUME_ALIGN, r);
}

void plume_dealloc(void *p) { free(p); }

double plume_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
