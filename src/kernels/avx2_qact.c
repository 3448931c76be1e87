/* avx2_qact.c -- int8 activations (qact.h) with AVX2: the quantizer, and the matmul of
 * avx2_qact.h with vpmaddubsw + vpmaddwd for CPUs without AVX-VNNI (avxvnni.c has the
 * other). Compiled with -mavx2 -mfma -mf16c, as avx2.c. */
#include <cpuid.h>
#include <math.h>

#define QA2_VNNI 0
#define QA2_FN(name) qa2_##name
#include "avx2_qact.h"

/* See qact.h: vpmaddubsw + vpmaddwd, the same results as plume_qact_matmul_avxvnni. */
void plume_qact_matmul_avx2(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                            const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                            int32_t r1) {
    qa2_matmul(y, ldy, xq, xs, xcor, T, w, r0, r1);
}

/* ---- quantize --------------------------------------------------------------------------- */

/* 8 floats times inv, rounded to nearest-even (the MXCSR default), clamped to [-127, 127]
 * (NaN: the conversion's 0x80000000, clamped to -127, as qact.h says). */
static inline __m256i qa2_round8(const float *x, __m256 inv) {
    __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
    return _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
}

/* 16 int32 (a: columns 0-7, b: 8-15) -> 16 int16 in column order. */
static inline __m256i qa2_pack16(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
}

/* qact.c's quantizer a whole block of 32 at a time (a partial one in scalar code): the same
 * products and rounding, so the same bytes; xcor by vpmaddubsw of the bytes by 1. */
void plume_qact_quantize_avx2(const float *x, int64_t ldx, int32_t T, int32_t cols, int8_t *xq,
                              float *xs, int32_t *xcor) {
    const int64_t stride = plume_qact_stride(cols);
    const int32_t groups = plume_qact_groups(cols), lanes = plume_qact_lanes(cols);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
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
            __m256 m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + c), absmask),
                                     _mm256_and_ps(_mm256_loadu_ps(xr + c + 8), absmask));
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xr + c + 16), absmask));
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xr + c + 24), absmask));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float amax = _mm_cvtss_f32(m4);
            if (!(amax >= PLUME_QACT_TINY)) continue;
            const __m256 inv = _mm256_set1_ps(127.0f / amax);
            s[b] = amax / 127.0f;
            __m256i lo = qa2_pack16(qa2_round8(xr + c, inv), qa2_round8(xr + c + 8, inv));
            __m256i hi = qa2_pack16(qa2_round8(xr + c + 16, inv), qa2_round8(xr + c + 24, inv));
            __m256i v = _mm256_permute4x64_epi64(_mm256_packs_epi16(lo, hi), 0xD8); /* columns 0..31 */
            _mm_storeu_si128((__m128i *)qb, _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i *)(qb + 64), _mm256_extracti128_si256(v, 1));
        }
        int32_t *cor = xcor + (int64_t)t * lanes;
        const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
        for (int64_t k = 0; k < stride / PLUME_QACT_CHUNK; k++)
            for (int h = 0; h < 2; h++) {
                const int8_t *qc = q + k * PLUME_QACT_CHUNK + 32 * h;
                __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)qc)), one16);
                __m256i b = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, _mm256_loadu_si256((const __m256i *)(qc + 64))), one16);
                __m256i sum = _mm256_add_epi32(a, b);
                _mm256_storeu_si256((__m256i *)(cor + k * PLUME_QACT_LANES + 8 * h),
                                    _mm256_sub_epi32(_mm256_set1_epi32(PLUME_QACT_MAGIC), _mm256_slli_epi32(sum, 7)));
            }
    }
}

/* ---- cpu check -------------------------------------------------------------------------- */

/* F16C from CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c"). */
static int qa2_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* What this file's flags assume. */
int plume_qact_avx2_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && qa2_has_f16c();
}

/* AVX-VNNI: CPUID leaf 7 subleaf 1, EAX bit 4 (older compilers' __builtin_cpu_supports lack
 * "avxvnni"); the OS saves ymm state if AVX2 is usable, which the builtin checks. */
int plume_qact_avxvnni_available(void) {
    unsigned a, b, c, d;
    if (!plume_qact_avx2_available() || __get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return a >> 4 & 1;
}
