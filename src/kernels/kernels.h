/* kernels.h -- the compute kernels, one table per instruction set.
 *
 * scalar.c is the reference: plain loops that define right. avx2.c, avx512.c and neon.c fill
 * the same table; plume_kernels_get() picks one once, at model open. forward.c calls through
 * the table and has no #ifdef. All kernels take float32 activations and accumulate in float32.
 * The tables' matmuls read PLUME_L_ROWS weights, and avx512's also PLUME_L_TILES (reads_tiles);
 * forward.c hands the others a tiled weight a group of 16 rows at a time, unpacked
 * (plume_tiles_unpack).
 *
 * May call: common.h (types, fp16/bf16, aligned memory). Must not know: layers (forward.c),
 * the model, files, the pool (the caller splits the work; a kernel runs on the thread it is
 * given). Files:
 *   scalar.c        the reference table: plain loops that define right
 *   dispatch.c      the table for this CPU (cpuid, PLUME_ISA)
 *   tiles.c         the tiles layout: packing and unpacking a group of 16 rows
 *   avx2.c  avx512.c  neon.c   the float tables of each instruction set; tile.h what they share
 *   qact.[ch]       int8 activations: the layout and the reference matmul
 *   avx512_vnni.c   amx.c      int8 activations with AVX-512 VNNI, AMX-INT8 (prefill, tiles)
 *   avx2_qact.[ch]  avxvnni.c  the same on 256-bit vectors: AVX2, AVX-VNNI
 *   neon_qact.[ch]  neon_qact_dot.c   the same with NEON, with sdot
 */
#ifndef PLUME_KERNELS_H
#define PLUME_KERNELS_H

#include <math.h>
#include <stdint.h>

/* How a weight matrix W [rows, cols] (PyTorch [out, in]) is stored. */
typedef enum {
    PLUME_W_F32 = 0, /* float [rows, cols] */
    PLUME_W_F16,     /* binary16 [rows, cols] */
    PLUME_W_BF16,    /* bfloat16 [rows, cols] */
    PLUME_W_Q8,      /* int8 [rows, cols]; scale: fp16 [rows] = row absmax; W = q * s / 127 */
    PLUME_W_Q4,      /* uint8 [rows, cols/2]: byte c/2 holds col c (even) in the low nibble and
                        col c+1 in the high nibble, each as q + 8 (q in -8..7);
                        scale: fp16 [rows, cols/32] = d per group of 32 cols; W = q * d */
    PLUME_W_NTYPES
} plume_wtype;

/* How the rows of a weight are laid out in memory.
 *
 * PLUME_L_TILES (Q8 and Q4 with rows % 16 == 0 and cols % 32 == 0, docs/BUNDLE.md): groups
 * of 16 rows, each group one run of bytes in which the 16 rows' columns c..c+3 sit side by
 * side, 4 bytes per row: one 64-byte line = 16 rows x 4 columns = the 16 int32 lanes of one
 * vpdpbusd, so a kernel reads a group's rows as one sequential stream and needs no
 * horizontal sum (one lane per row).
 *   Q8: W[r, c] at (r/16)*16*cols + (c/4)*64 + (r%16)*4 + c%4           [rows/16, cols/4, 16, 4]
 *       scale as in PLUME_L_ROWS: fp16 [rows]
 *   Q4: W[r, c] at (r/16)*8*cols + (c/32)*256 + (c%16/4)*64 + (r%16)*4 + c%4, the low nibble
 *       for c%32 < 16, the high one for the rest (each q + 8)          [rows/16, cols/8, 16, 4]
 *       scale d of (r, group c/32) at ((r/16)*(cols/32) + c/32)*16 + r%16  [rows/16, cols/32, 16]
 */
typedef enum {
    PLUME_L_ROWS = 0, /* row after row, as plume_wtype says */
    PLUME_L_TILES     /* groups of 16 rows, 4 columns of each row side by side (above) */
} plume_layout;

/* A weight matrix: a view into a mapped file. */
typedef struct {
    plume_wtype type;
    int32_t rows, cols;    /* [out, in] */
    const void *data;      /* see plume_wtype and layout */
    const uint16_t *scale; /* Q8: [rows]; Q4: [rows, cols/32] (tiles: see plume_layout); else NULL */
    plume_layout layout;
} plume_weight;

enum { PLUME_TILE_ROWS = 16 }; /* rows of a group of PLUME_L_TILES */

/* Whether a weight of this type and shape can be stored as PLUME_L_TILES. */
int plume_tiles_fit(plume_wtype type, int64_t rows, int64_t cols);
/* One group of 16 rows from the rows layout (data [16, row bytes], Q4 scales [16, cols/32])
 * into the tiles layout (the group's bytes, Q4: its scales [cols/32, 16]); Q8 scales are the
 * same in both and are not touched. plume_tiles_unpack is the inverse. tiles.c. */
void plume_tiles_pack(plume_wtype type, int32_t cols, const void *rows, const uint16_t *rscale, void *tiles,
                      uint16_t *tscale);
void plume_tiles_unpack(plume_wtype type, int32_t cols, const void *tiles, const uint16_t *tscale, void *rows,
                        uint16_t *rscale);
/* The signed value q of W[r, c] of a Q8 or Q4 weight in either layout, and Q4's step d of
 * (r, group g) as fp16: what the reference kernels read. */
int32_t plume_weight_q(const plume_weight *w, int32_t r, int32_t c);
uint16_t plume_weight_q4_step(const plume_weight *w, int32_t r, int32_t g);

/* Y[t*ldy + r] = sum_c W[r, c] * X[t*ldx + c]   for t < T, r0 <= r < r1.
 * Rows are split across threads by r0/r1; Y columns outside [r0, r1) are not touched. */
typedef void (*plume_matmul_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, int32_t T,
                                const plume_weight *w, int32_t r0, int32_t r1);

/* A run of n consecutive cached K and V rows of one KV head (hd values each): float rows
 * (ks == NULL) or int8 rows with one scale each (row = q * scale). Row j starts stride
 * elements after row j - 1; its scales are ks[j * sstride] and vs[j * sstride]. */
typedef struct {
    const void *k, *v;    /* float or int8 */
    const float *ks, *vs; /* int8 rows: scales; float rows: NULL */
    int64_t stride, sstride;
    int32_t n;
} plume_kv_run;

/* Attention of nh query heads q [nh, hd] (heads sharing one KV head) over a block of n rows
 * given as nrun runs, the partial softmax state of the block, per head h (s_j = q_h . k_j):
 *   m[h] = max_j s_j,  l[h] = sum_j E(s_j - m[h]),  acc[h, hd] = sum_j E(s_j - m[h]) v_j,
 * E = plume_attn_exp. Each K and V row is read once for all nh heads. p: scratch [nh, n]. */
/* Weights below e^PLUME_ATTN_MIN_EXP (1.6e-28 of the largest, which is 1) count as 0: they
 * are far below float rounding of the sum, and their products with V would be subnormal
 * (slow on x86) near the bottom of exp's range. */
#define PLUME_ATTN_MIN_EXP (-64.0f)
static inline float plume_attn_exp(float d) { return d >= PLUME_ATTN_MIN_EXP ? expf(d) : 0.0f; }

typedef void (*plume_attn_block_fn)(float *acc, float *m, float *l, const float *q, int32_t nh, int32_t hd,
                                    const plume_kv_run *run, int32_t nrun, float *p);

typedef struct {
    const char *name;                         /* "scalar", "avx2", "avx512", "neon" */
    plume_matmul_fn matmul[PLUME_W_NTYPES];   /* indexed by plume_wtype */
    int reads_tiles;                          /* the Q8/Q4 matmuls take PLUME_L_TILES weights */
    float (*dot)(const float *a, const float *b, int32_t n);      /* sum a[i]*b[i] */
    void (*axpy)(float *y, float a, const float *x, int32_t n);   /* y[i] += a*x[i] */
    /* The elementwise kernels: an element's bits depend on its inputs and on whether it lies
     * in the last n % 16 of the call only (vector bodies of 16 floats or a divisor of 16, the
     * rest in the scalar reference), so a row cut on multiples of 16 gives the bits of one
     * call (forward.c applies them per matmul chunk; test_kernels holds every table to it). */
    void (*gelu_mul)(float *g, const float *u, int64_t n); /* g[i] = gelu_tanh(g[i]) * u[i] */
    void (*softcap)(float *x, int64_t n, float cap);        /* x[i] = cap * tanh(x[i] / cap) */
    /* y[i] = a[i] * sigmoid(g[i]); y may alias a or g. silu(x) is (x, x, x), a GLU (u, gate). */
    void (*sigmoid_mul)(float *y, const float *a, const float *g, int64_t n);
    void (*softmax)(float *x, int64_t n);  /* x = exp(x - max x) / sum, in place (plume_softmax_ref) */
    void (*rmsnorm)(float *y, const float *x, const float *w, int32_t n, float eps); /* plume_rmsnorm_ref */
    plume_attn_block_fn attn_block;           /* decode and prefill attention, one block */
} plume_kernels;

/* The scalar (libm) elementwise kernels, for tables without their own. */
void plume_gelu_mul_ref(float *g, const float *u, int64_t n);
void plume_softcap_ref(float *x, int64_t n, float cap);
/* y = a * sigmoid(g) as s = 1 / (1 + t) for g >= 0, t / (1 + t) below, t = exp(-|g|): the
 * form every table computes (no overflow of exp at either end). */
void plume_sigmoid_mul_ref(float *y, const float *a, const float *g, int64_t n);
/* A row's softmax in float32 as PyTorch computes it (the vision tower's attention weights):
 * the max, e = exp(x - max), their sum, then e * (1 / sum). */
void plume_softmax_ref(float *x, int64_t n);

/* y = x * rsqrt(mean(x^2) + eps) * w (w NULL: no scale); y may alias x. §3.0: x*w, not
 * x*(1+w). The sum of squares in double over 8 partial sums, s[k] over i = k mod 8, joined
 * ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)), then the tail past the last 8: every
 * table's rmsnorm gives exactly these bits (a float's square is exact in double). */
void plume_rmsnorm_ref(float *y, const float *x, const float *w, int32_t n, float eps);

/* rmsnorm's factor rsqrt(mean(x^2) + eps) from the 8 partial sums of x[0, i) (i a multiple
 * of 8), joined in plume_rmsnorm_ref's order, and the tail x[i, n): what every table shares. */
float plume_rmsnorm_factor(const double s[8], const float *x, int32_t i, int32_t n, float eps);

/* Attention block states, shared by all tables (forward.c folds a row's blocks with these,
 * in block order): fold one head's block state (a2 [hd], m2, l2) into its running state
 * (a [hd], m, l): m = max(m, m2), a = a e^(m_old - m) + a2 e^(m2 - m), l likewise. */
void plume_attn_fold(float *a, float *m, float *l, const float *a2, float m2, float l2, int32_t hd);
/* out = a / l for one head (out may alias a). */
void plume_attn_finish(float *out, const float *a, float l, int32_t hd);

extern const plume_kernels plume_kernels_scalar;
#if defined(__x86_64__)
/* The locality hint of decode's streaming prefetches of weights in the x86 kernels (rows and
 * tiles layouts, float and int8 activations): T0. The row kernels used NTA until 2026-12-03,
 * which left one core of the Intel Xeon host at 4-5 GB/s through the int8 rows kernel at
 * T = 1 where T0 reads 9-12 (bench_qact 1); on AMD Zen 5 no hint made a difference. */
#define PLUME_PREFETCH_STREAM _MM_HINT_T0
extern const plume_kernels plume_kernels_avx2;   /* AVX2 + FMA + F16C */
extern const plume_kernels plume_kernels_avx512; /* AVX-512 F/BW/VL (+VNNI, BF16 where used) */
#endif
#if defined(__aarch64__)
extern const plume_kernels plume_kernels_neon;
#endif

/* The table named isa ("scalar", "avx2", "avx512", "neon"), or the best the CPU supports
 * when isa is NULL or "" ($PLUME_ISA overrides then). NULL if the name is unknown or the
 * CPU lacks it. */
const plume_kernels *plume_kernels_get(const char *isa);
/* Names of the tables this CPU can run, best last, for tests: fills names, returns count. */
int plume_kernels_available(const char **names, int cap);

#endif /* PLUME_KERNELS_H */
