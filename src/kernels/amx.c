/* amx.c -- the int8-activation matmul of qact.h with AMX-INT8 tiles, for prefill over
 * PLUME_L_TILES weights (Intel Sapphire Rapids and later). One tdpbssd multiplies a tile of
 * 16 tokens x 32 int8 activations by 32 x 16 int8 weights into 16 x 16 exact int32 sums:
 * 8192 multiply-adds, what 128 vpdpbusd do. The weights' tiles layout is already the B
 * operand's: a block of 32 columns of a group of 16 rows is 8 lines of 64 bytes, line j =
 * columns 4j..4j+3 of the 16 rows (kernels.h), so a B tile is one load of 512 consecutive
 * bytes. Both operands are signed (tdpbssd), so no +128 offset and no xcor correction.
 *
 * Per block of 32 columns b, token t and row r (one zmm lane per row, one zmm per token):
 *
 *   C = xq[16 tokens, block b] x W[block b, 16 rows]             (tdpbssd, exact int32)
 *   acc[t] = acc[t] + f * (float)C[t]      f = xs[t, b] (Q8), d[r, b] * xs[t, b] (Q4)
 *
 * the reference's float order (mul and add apart, block after block), so the output has the
 * bits of plume_qact_matmul_ref and of the VNNI tiles kernel: a prompt gives the same logits
 * whether its tokens go through here (T >= PLUME_AMX_MIN_T) or through VNNI (decode).
 *
 * xq's chunk layout (qact.h) is not the A operand's (a token's 32 columns of a block in
 * order), so each call first copies the tokens' rows into plain column order, and Q4's nibbles
 * are unpacked to int8 (q, not q + 8) a panel of groups at a time; both go to a per-thread
 * buffer that grows as needed. Groups are walked in panels of about PANEL_BYTES, which stay
 * in L2 while every tile of 16 tokens passes over them.
 *
 * AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM), asked once; a CPU or
 * kernel without it (or PLUME_AMX=0 in the environment) keeps the VNNI kernel. Each call
 * loads its tile configuration and releases the tiles before it returns.
 */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common.h"
#include "kernels.h"
#include "qact.h"

/* Unroll the next loop fully (its count is a constant), so the accumulators stay in registers. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

enum {
    TOK = 16,                /* tokens per tile: the A and C tiles' rows */
    PANEL_BYTES = 256 << 10, /* int8 weights of a panel of groups, re-read from L2 */
    ARCH_REQ_XCOMP_PERM = 0x1023,
    XFEATURE_XTILEDATA = 18
};

/* The palette 1 tile configuration (64 bytes, as ldtilecfg reads it). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Tile registers: C (16 tokens x 16 rows int32), A (16 tokens x 32 int8), B (8 x 64 int8),
 * two of each so that the next block's product overlaps this block's float step. Numbers,
 * not an enum: the intrinsics paste them into the instruction's register name. */
#define C0 0
#define C1 1
#define A0 2
#define A1 3
#define B0 4
#define B1 5

/* ---- availability ----------------------------------------------------------------------- */

static int amx_ok = -1;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* CPUID leaf 7: AMX-TILE (EDX 24) and AMX-INT8 (EDX 25); then the kernel's permission. */
static void amx_probe(void) {
    unsigned a, b, c, d;
    const char *env = getenv("PLUME_AMX");
    amx_ok = 0;
    if (env && !strcmp(env, "0")) return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) return;
#if defined(PLUME_PORTABLE) || !defined(SYS_arch_prctl)
    return; /* the permission is a Linux system call: a POSIX-only build does without AMX */
#else
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    amx_ok = 1;
#endif
}

int plume_qact_amx_available(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

/* ---- the per-thread buffer -------------------------------------------------------------- */

static pthread_key_t amx_key;
static pthread_once_t amx_key_once = PTHREAD_ONCE_INIT;

typedef struct {
    int8_t *p;
    size_t cap;
} amx_buf;

/* Free a thread's buffer when the thread ends. */
static void amx_buf_free(void *v) {
    amx_buf *b = v;
    if (b) free(b->p);
    free(b);
}

static void amx_key_make(void) { (void)pthread_key_create(&amx_key, amx_buf_free); }

/* This thread's buffer of at least n bytes, 64-byte aligned; NULL when out of memory. */
static int8_t *amx_scratch(size_t n) {
    pthread_once(&amx_key_once, amx_key_make);
    amx_buf *b = pthread_getspecific(amx_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return NULL;
        if (pthread_setspecific(amx_key, b)) {
            free(b);
            return NULL;
        }
    }
    if (b->cap < n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, n)) return NULL;
        free(b->p);
        b->p = p;
        b->cap = n;
    }
    return b->p;
}

/* ---- the tiles -------------------------------------------------------------------------- */

/* What every tile of one call shares. */
typedef struct {
    float *y;
    int64_t ldy;
    const plume_weight *w;
    int32_t cols, nb;    /* columns, blocks of 32 */
    const int8_t *a;     /* [T rounded up to 16, cols] the tokens' int8 rows in column order */
    const float *xst;    /* [Tp / 16, nb, 16] xs by token tile and block (0 past T) */
    int32_t r0, r1;      /* rows to store */
} amx_args;

/* Block b's float step for the 16 tokens of the C tile in cbuf: acc[t] += f * C[t]. xst: the
 * token tile's xs by block, [nb, 16] (0 past T). Unrolled: acc[] lives in registers. */
static inline __attribute__((always_inline)) void amx_step(const float *xst, const int32_t *cbuf, int32_t b,
                                                           int q8, __m512 d, __m512 acc[TOK]) {
    UNROLL
    for (int t = 0; t < TOK; t++) {
        const __m512 xs = _mm512_set1_ps(xst[16 * b + t]);
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + 16 * t));
        const __m512 f = q8 ? xs : _mm512_mul_ps(d, xs);
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(f, dot));
    }
}

/* Q4's d of group g, block b, its 16 rows' steps as floats. */
static inline __m512 amx_d(const amx_args *a, int32_t g, int32_t b) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256((const __m256i *)(a->w->scale + ((size_t)g * a->nb + b) * PLUME_TILE_ROWS)));
}

/* Block b's product into tile C (C0 or C1), stored to cbuf; A and B: that set's tiles. */
#define AMX_BLOCK(C, A, B, cbuf, b)                                                               \
    do {                                                                                          \
        _tile_zero(C);                                                                            \
        _tile_loadd(A, x + 32 * (b), a->cols);                                                    \
        _tile_loadd(B, wg + 512 * (size_t)(b), 64);                                               \
        _tile_dpbssd(C, A, B);                                                                    \
        _tile_stored(C, cbuf, 64);                                                                \
    } while (0)

/* Y for the 16 rows of group g x tokens t0..t0+tt-1; wg: the group's weights as int8 B
 * tiles, 512 bytes a block. Pipelined by one block: block b's float step runs after block
 * b + 1's product is issued, so it reads a C store that has long landed. */
static inline __attribute__((always_inline)) void amx_tile_body(const amx_args *a, const int8_t *wg, int32_t g,
                                                                int32_t t0, int tt, const int q8) {
    _Alignas(64) int32_t cb[2][TOK * 16];
    __m512 acc[TOK];
    UNROLL
    for (int t = 0; t < TOK; t++) acc[t] = _mm512_setzero_ps();
    const int8_t *x = a->a + (int64_t)t0 * a->cols;
    const float *xst = a->xst + (int64_t)t0 * a->nb;
    const __m512 one = _mm512_set1_ps(1.0f);
    AMX_BLOCK(C0, A0, B0, cb[0], 0);
    int32_t b = 1;
    for (; b + 2 <= a->nb; b += 2) {
        AMX_BLOCK(C1, A1, B1, cb[1], b);
        amx_step(xst, cb[0], b - 1, q8, q8 ? one : amx_d(a, g, b - 1), acc);
        AMX_BLOCK(C0, A0, B0, cb[0], b + 1);
        amx_step(xst, cb[1], b, q8, q8 ? one : amx_d(a, g, b), acc);
    }
    if (b < a->nb) { /* an even count of blocks: one left */
        AMX_BLOCK(C1, A1, B1, cb[1], b);
        amx_step(xst, cb[0], b - 1, q8, q8 ? one : amx_d(a, g, b - 1), acc);
        amx_step(xst, cb[1], b, q8, q8 ? one : amx_d(a, g, b), acc);
    } else {
        amx_step(xst, cb[0], b - 1, q8, q8 ? one : amx_d(a, g, b - 1), acc);
    }
    /* rows outside [r0, r1) and tokens past tt are computed but not stored */
    const int32_t r = g * PLUME_TILE_ROWS;
    __mmask16 keep = 0xffff;
    if (r < a->r0) keep &= (__mmask16)(0xffffu << (a->r0 - r));
    if (r + PLUME_TILE_ROWS > a->r1) keep &= (__mmask16)(0xffffu >> (r + PLUME_TILE_ROWS - a->r1));
    __m512 f = one;
    if (q8) f = _mm512_div_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a->w->scale + r))),
                              _mm512_set1_ps(127.0f));
    UNROLL
    for (int t = 0; t < TOK; t++)
        if (t < tt) _mm512_mask_storeu_ps(a->y + (int64_t)(t0 + t) * a->ldy + r, keep, q8 ? _mm512_mul_ps(acc[t], f) : acc[t]);
}

static void amx_tile_q8(const amx_args *a, const int8_t *wg, int32_t g, int32_t t0, int tt) {
    amx_tile_body(a, wg, g, t0, tt, 1);
}
static void amx_tile_q4(const amx_args *a, const int8_t *wg, int32_t g, int32_t t0, int tt) {
    amx_tile_body(a, wg, g, t0, tt, 0);
}

/* xs by tile of 16 tokens and block: xst[(t / 16) * nb * 16 + 16 b + t % 16], 0 past T. */
static void amx_xs_by_block(const float *xs, int32_t groups, int32_t nb, int32_t T, int32_t Tp, float *xst) {
    for (int32_t t = 0; t < Tp; t++)
        for (int32_t b = 0; b < nb; b++)
            xst[(int64_t)(t / TOK) * nb * TOK + TOK * b + t % TOK] = t < T ? xs[(int64_t)t * groups + b] : 0.0f;
}

/* Tokens' rows of xq (chunk layout) into plain column order, rows T..Tp-1 zero. */
static void amx_relayout(const int8_t *xq, int64_t stride, int32_t T, int32_t Tp, int32_t cols, int8_t *out) {
    for (int32_t t = 0; t < Tp; t++) {
        int8_t *o = out + (int64_t)t * cols;
        if (t >= T) {
            memset(o, 0, (size_t)cols);
            continue;
        }
        const int8_t *q = xq + (int64_t)t * stride;
        for (int32_t b = 0; b < cols / PLUME_QACT_GROUP; b++) { /* block b: two runs of 16 */
            memcpy(o + 32 * b, q + plume_qact_pos(32 * b), 16);
            memcpy(o + 32 * b + 16, q + plume_qact_pos(32 * b + 16), 16);
        }
    }
}

/* Q4 groups g0..g1-1 of tiled nibbles into int8 B tiles (q = nibble - 8): line j of a block's
 * 256 bytes holds columns 4j.. in its low nibbles (B row j) and 16 + 4j.. in its high (row j + 4). */
static void amx_unpack_q4(const plume_weight *w, int32_t g0, int32_t g1, int8_t *out) {
    const size_t gbytes = (size_t)PLUME_TILE_ROWS * (size_t)w->cols / 2;
    const __m512i low = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    for (int32_t g = g0; g < g1; g++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)g * gbytes;
        int8_t *dst = out + (size_t)(g - g0) * 2 * gbytes;
        for (size_t blk = 0; blk < (size_t)w->cols / PLUME_QACT_GROUP; blk++)
            for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_loadu_si512(src + 256 * blk + 64 * j);
                const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, low), eight);
                const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), eight);
                _mm512_storeu_si512(dst + 512 * blk + 64 * j, lo);
                _mm512_storeu_si512(dst + 512 * blk + 64 * (j + 4), hi);
            }
    }
}

/* Check the weight, lay out the tokens, walk panels of groups x tiles of 16 tokens. Returns 0
 * when it did the work, -1 when it could not (no buffer) and the caller must. */
int plume_qact_matmul_amx(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor,
                          int32_t T, const plume_weight *w, int32_t r0, int32_t r1) {
    (void)xcor; /* signed x signed: no offset to correct */
    if (T <= 0 || r1 <= r0) return 0;
    if (!plume_qact_supported(w) || w->layout != PLUME_L_TILES || !plume_qact_amx_available()) return -1;
    const int q8 = w->type == PLUME_W_Q8;
    const int32_t cols = w->cols, Tp = (T + TOK - 1) / TOK * TOK;
    const int32_t g0 = r0 / PLUME_TILE_ROWS, g1 = (r1 + PLUME_TILE_ROWS - 1) / PLUME_TILE_ROWS;
    const size_t gbytes = (size_t)PLUME_TILE_ROWS * (size_t)cols; /* as int8 B tiles */
    int32_t panel = (int32_t)(PANEL_BYTES / gbytes);
    if (panel < 1) panel = 1;
    if (panel > g1 - g0) panel = g1 - g0;
    const size_t abytes = (size_t)Tp * (size_t)cols, xbytes = (size_t)Tp * (size_t)(cols / PLUME_QACT_GROUP) * sizeof(float);
    int8_t *buf = amx_scratch(abytes + xbytes + (q8 ? 0 : (size_t)panel * gbytes));
    if (!buf) return -1;
    amx_relayout(xq, plume_qact_stride(cols), T, Tp, cols, buf);
    amx_xs_by_block(xs, plume_qact_groups(cols), cols / PLUME_QACT_GROUP, T, Tp, (float *)(buf + abytes));
    amx_args a = {.y = y, .ldy = ldy, .w = w, .cols = cols,
                  .nb = cols / PLUME_QACT_GROUP, .a = buf, .xst = (float *)(buf + abytes),
                  .r0 = r0, .r1 = r1};

    amx_config cfg = {.palette = 1};
    for (int i = C0; i <= C1; i++) cfg.rows[i] = TOK, cfg.colsb[i] = 64;
    for (int i = A0; i <= A1; i++) cfg.rows[i] = TOK, cfg.colsb[i] = 32;
    for (int i = B0; i <= B1; i++) cfg.rows[i] = 8, cfg.colsb[i] = 64;
    _tile_loadconfig(&cfg);
    for (int32_t p0 = g0; p0 < g1; p0 += panel) {
        const int32_t p1 = g1 - p0 < panel ? g1 : p0 + panel;
        const int8_t *wp = (const int8_t *)w->data + (size_t)p0 * gbytes;
        if (!q8) {
            amx_unpack_q4(w, p0, p1, buf + abytes + xbytes);
            wp = buf + abytes + xbytes;
        }
        for (int32_t t0 = 0; t0 < T; t0 += TOK)
            for (int32_t g = p0; g < p1; g++)
                (q8 ? amx_tile_q8 : amx_tile_q4)(&a, wp + (size_t)(g - p0) * gbytes, g, t0, T - t0 < TOK ? T - t0 : TOK);
    }
    _tile_release();
    return 0;
}
