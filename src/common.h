/* common.h -- small pieces every part of libplume uses: errors, growable buffers, half floats,
 * mapped files, a deterministic random generator. Knows nothing of the model. */
#ifndef PLUME_COMMON_H
#define PLUME_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plume.h"

#define PLUME_ALIGN 64 /* tensor offsets in chunk files and scratch buffers */

/* ---- errors ---------------------------------------------------------------------------- */

/* Set *err (when err is not NULL and *err is NULL) to a malloc'd message; return code. */
int plume_fail(char **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- growable buffers ------------------------------------------------------------------ */

/* Make the array *pp of *cap items of `size` bytes hold at least need items: the capacity
 * doubles (from 16 items) until it does. 0, or PLUME_ENOMEM with *pp and *cap unchanged.
 * pp is the address of the array pointer (T **), so every typed array grows one way. */
int plume_grow(void *pp, size_t *cap, size_t need, size_t size);

/* Bytes under construction, e.g. a prompt or a line of JSON. Zero-initialized is empty; an
 * append grows it (plume_grow) and keeps p NUL-terminated. oom latches the first allocation
 * failure and makes later appends no-ops, so a writer checks once, at the end. */
typedef struct {
    char *p;         /* [len] bytes and a NUL; NULL until the first append */
    size_t len, cap; /* bytes in use (NUL not counted), bytes allocated */
    int oom;         /* an append failed for want of memory */
} plume_buf;

/* Append n bytes of s (s may be NULL when n is 0). */
void plume_buf_put(plume_buf *b, const void *s, size_t n);
/* Append a NUL-terminated string. */
void plume_buf_puts(plume_buf *b, const char *s);
/* Append printf-formatted text. */
void plume_buf_printf(plume_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The bytes, malloc'd and NUL-terminated ("" when nothing was appended), for the caller to
 * free; the buffer is left empty. NULL (the bytes freed) when an append ran out of memory. */
char *plume_buf_take(plume_buf *b);
/* Free the bytes; the buffer is empty again (and may be reused). */
void plume_buf_free(plume_buf *b);

/* ---- half floats ----------------------------------------------------------------------- */

/* IEEE binary16 -> float (exact). */
static inline float plume_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) u = sign;
    else {
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> IEEE binary16, round to nearest even, overflow to inf. */
uint16_t plume_f32_to_f16(float f);

/* bfloat16 -> float (exact). */
static inline float plume_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> bfloat16, round to nearest even (NaN stays NaN). */
static inline uint16_t plume_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- little-endian reads ---------------------------------------------------------------- */

static inline uint64_t plume_rd_u64le(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}
static inline void plume_wr_u64le(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* ---- files ----------------------------------------------------------------------------- */

/* A read-only memory map of a whole file. */
typedef struct {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;         /* bytes */
} plume_map;

/* Map path read-only; errors name the file. */
int plume_map_open(plume_map *m, const char *path, char **err);
void plume_map_free(plume_map *m);

/* plume_map_open for a file read whole by every step (the weights): a 4 KiB page per TLB
 * entry cost half of decode's and a third of prefill's speed on a KVM guest (nested page
 * walks; docs/BENCHMARKS.md). The map starts at a huge-page boundary (2 MiB on x86-64) with
 * MADV_HUGEPAGE, so that the kernel reads the file into huge folios and maps each with one
 * entry. A file already cached in small folios (written or copied moments ago) cannot be
 * mapped so: 16 sampled windows tell, and if this system is seen to make huge folios but this
 * file holds few, its clean cache is dropped once so that it is read again in huge ones.
 * Elsewhere than Linux, with PLUME_PORTABLE, or below two huge pages: plume_map_open. */
int plume_map_open_dense(plume_map *m, const char *path, char **err);
/* The share of m's resident bytes mapped by huge pages, from /proc/self/smaps (0: none or
 * unknown). */
double plume_map_huge_share(const plume_map *m);
/* Write path's dirty pages and drop the file from the page cache (a hint: errors ignored),
 * so that a dense reader later reads it in huge folios (the converter's outputs). */
void plume_file_uncache(const char *path);

/* Read what is left of f into a malloc'd NUL-terminated *buf (*len bytes, len may be NULL):
 * 0, PLUME_ENOMEM or PLUME_EIO (*buf NULL then). */
int plume_read_stream(FILE *f, char **buf, size_t *len);
/* Read a whole (small) regular file into a malloc'd NUL-terminated buffer. Anything else (a
 * FIFO, a device, a directory) is refused without blocking: a FIFO planted where a config
 * belongs must not hang the reader, nor /dev/zero fill its memory. */
int plume_read_file(const char *path, char **buf, size_t *len, char **err);
/* Open path for reading if it is a regular file (links followed), never blocking on a FIFO;
 * the descriptor, or -1 with *err naming the file. */
int plume_open_regular(const char *path, char **err);

/* ---- writing files safely -----------------------------------------------------------------
 * Every file plume writes goes through here. A destination that is absent or a regular file
 * is replaced whole: the bytes go to a temporary file of a fresh random name beside it
 * (PATH.tmp-XXXXXX, created with O_CREAT|O_EXCL|O_NOFOLLOW, so that a link planted there
 * cannot redirect the write), are fsync'd, and the file is renamed over the destination.
 * A destination that exists and is anything else (a link, a device, a FIFO) is written
 * through, never replaced: `-o /dev/stdout` works and `--cache /dev/null` discards, where a
 * rename would have put a regular file in place of the device. A FIFO that no process reads
 * is refused rather than waited on, and a directory is refused.
 *
 * PLUME_WRITE_REPLACE is for the names plume owns (entries of a bundle, of the Hugging Face
 * cache): whatever is at the name is replaced by the new regular file, never followed or
 * written through (a directory is still refused). */
enum { PLUME_WRITE_REPLACE = 1 };

/* A file being written (plume_wfile_open ... plume_wfile_commit or plume_wfile_abort). */
typedef struct {
    int fd;          /* -1 once closed */
    char *path;      /* the destination */
    char *tmp;       /* the temporary file; NULL when writing through */
    uint8_t *buf;    /* [PLUME_WFILE_BUF] bytes not yet written */
    size_t nbuf;
    int failed;      /* errno of the first failed write, 0 if none */
} plume_wfile;

/* Start writing path (flags: PLUME_WRITE_REPLACE or 0). 0 or PLUME_EIO/ENOMEM naming it. */
int plume_wfile_open(plume_wfile *w, const char *path, int flags, char **err);
/* Append n bytes (buffered); 0 or PLUME_EIO naming the file. */
int plume_wfile_write(plume_wfile *w, const void *p, size_t n, char **err);
/* Flush, fsync and rename into place (or close the file written through). 0 or PLUME_EIO;
 * the temporary file is removed on failure. The struct is released either way. */
int plume_wfile_commit(plume_wfile *w, char **err);
/* Give up: close and remove the temporary file; a no-op after commit or abort. */
void plume_wfile_abort(plume_wfile *w);
/* Write buf to path as one plume_wfile (flags as plume_wfile_open). */
int plume_write_file(const char *path, const void *buf, size_t len, int flags, char **err);
/* A fresh directory PATH.tmp-XXXXXX beside path (mkdir never follows or reuses a name),
 * malloc'd; NULL with *err. */
char *plume_mkdtemp_beside(const char *path, char **err);
/* rm -r path without following links (a link is removed, never what it points to); 0 on
 * success. */
int plume_rm_tree(const char *path);

/* A malloc'd formatted string (asprintf is not in POSIX), or NULL when out of memory. */
char *plume_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* a + "/" + b, malloc'd (NULL on out of memory). */
char *plume_path_join(const char *a, const char *b);
/* Whether path exists. */
int plume_file_exists(const char *path);
/* mkdir -p the directory that will hold path (an output file or directory: "out/" names the
 * directory out); 0, or PLUME_EIO naming the directory that could not be made. */
int plume_mkdir_parent(const char *path, char **err);

/* ---- printing untrusted text ------------------------------------------------------------ */

/* Copy src into dst (cap bytes, NUL-terminated, cut if needed) with every byte a terminal
 * could take as a command written as \xNN: C0 controls (ESC, CR, ...; tab kept), DEL, the C1
 * controls U+0080..U+009F and bytes of invalid UTF-8 (a lone 0x9b is CSI to some
 * terminals). For text from the network or from files (error headers, pull.json, names)
 * before it reaches a terminal. Returns dst. */
char *plume_str_printable(char *dst, size_t cap, const char *src);

/* Allocate n bytes aligned to PLUME_ALIGN, contents undefined (never read before written);
 * NULL on failure or overflow. */
void *plume_alloc(size_t n);
void plume_dealloc(void *p);

/* ---- random ---------------------------------------------------------------------------- */

/* splitmix64: a tiny deterministic generator, the same on every platform. */
static inline uint64_t plume_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Uniform float in [0, 1). */
static inline float plume_rng_float(uint64_t *state) {
    return (float)(plume_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* ---- time ------------------------------------------------------------------------------ */

/* Monotonic seconds. */
double plume_now(void);

/* Read ns spans of n bytes each (8-byte aligned), a few lines of each in turn, as fast as one
 * thread can, for bandwidth probes: a core streams more from memory with several far-apart
 * spans in flight than with one (PLUME_STREAM_SPANS), and with the widest loads it has.
 * Returns a checksum, so that the reads cannot be left out. */
enum { PLUME_STREAM_SPANS = 4, PLUME_STREAM_SPANS_MAX = 8 };
uint64_t plume_stream_sum(const void *const *spans, int ns, size_t n);

#endif /* PLUME_COMMON_H */
