/* neon_qact.c -- int8 activations (qact.h) with NEON: the quantizer, and the matmul of
 * neon_qact.h with widening multiplies (vmull_s8 + pairwise adds), for any AArch64 CPU;
 * neon_qact_dot.c has the sdot one for CPUs with dotprod. */
#include <math.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#define QN_SDOT 0
#define QN_FN(name) qn_##name
#include "neon_qact.h"

/* The widening-multiply matmul: any AArch64 CPU. */
void plume_qact_matmul_neon(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor, int32_t T,
                            const plume_weight *w, int32_t r0, int32_t r1) {
    (void)xcor; /* signed x signed: no correction */
    qn_matmul(y, ldy, xq, xs, T, w, r0, r1);
}

/* Whether the CPU has the dotprod extension (sdot): HWCAP_ASIMDDP (bit 20) on Linux;
 * elsewhere only if the compiler was told so. */
int plume_qact_neon_dot_available(void) {
#if defined(__linux__) && defined(AT_HWCAP)
    return (getauxval(AT_HWCAP) >> 20) & 1;
#elif defined(__ARM_FEATURE_DOTPROD)
    return 1;
#else
    return 0;
#endif
}

/* ---- quantize ---------------------------------------------------------------------------- */

/* 4 floats times inv, rounded to nearest-even, clamped to [-127, 127]. */
static inline int32x4_t qn_round4(const float *x, float32x4_t inv) {
    int32x4_t v = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x), inv));
    return vmaxq_s32(vminq_s32(v, vdupq_n_s32(127)), vdupq_n_s32(-127));
}

/* 16 floats times inv as int8 in column order. */
static inline int8x16_t qn_round16(const float *x, float32x4_t inv) {
    int16x8_t a = vcombine_s16(vqmovn_s32(qn_round4(x, inv)), vqmovn_s32(qn_round4(x + 4, inv)));
    int16x8_t b = vcombine_s16(vqmovn_s32(qn_round4(x + 8, inv)), vqmovn_s32(qn_round4(x + 12, inv)));
    return vcombine_s8(vqmovn_s16(a), vqmovn_s16(b));
}

/* qact.c's quantizer a whole block of 32 at a time (a partial one in scalar code): the same
 * products and rounding (vcvtnq: nearest, ties to even), so the same bytes for finite X. */
void plume_qact_quantize_neon(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq, float *xs,
                              int32_t *xcor) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols), lanes = plume_qact_lanes(cols);
    for (int32_t t = 0; t < T; t++) {
        const float *xr = x + t * ldx;
        int8_t *q = xq + t * stride;
        float *s = xs + (int64_t)t * groups;
        for (int32_t b = 0; b < groups; b++) {
            const int32_t c = b * PLUME_QACT_GROUP, n = cols - c;
            int8_t *qb = q + (c - c % PLUME_QACT_CHUNK) + 16 * (b % 4);
            memset(qb, 0, 16);
            memset(qb + 64, 0, 16);
            s[b] = 0.0f;
            if (n <= 0) continue; /* padding block */
            if (n < PLUME_QACT_GROUP) { /* the last, partial block: as qact.c */
                s[b] = plume_qact_block_scalar(xr, c, n, q);
                continue;
            }
            float32x4_t m = vabsq_f32(vld1q_f32(xr + c));
            for (int i = 4; i < PLUME_QACT_GROUP; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xr + c + i)));
            const float amax = vmaxvq_f32(m);
            if (!(amax >= PLUME_QACT_TINY)) continue;
            const float32x4_t inv = vdupq_n_f32(127.0f / amax);
            s[b] = amax / 127.0f;
            vst1q_s8(qb, qn_round16(xr + c, inv));
            vst1q_s8(qb + 64, qn_round16(xr + c + 16, inv));
        }
        int32_t *cor = xcor + (int64_t)t * lanes;
        for (int64_t k = 0; k < stride / PLUME_QACT_CHUNK; k++)
            for (int g = 0; g < 4; g++) {
                const int8_t *qc = q + k * PLUME_QACT_CHUNK + 16 * g;
                int32x4_t sum = vaddq_s32(vpaddlq_s16(vpaddlq_s8(vld1q_s8(qc))), vpaddlq_s16(vpaddlq_s8(vld1q_s8(qc + 64))));
                vst1q_s32(cor + k * PLUME_QACT_LANES + 4 * g, vsubq_s32(vdupq_n_s32(PLUME_QACT_MAGIC), vshlq_n_s32(sum, 7)));
            }
    }
}
