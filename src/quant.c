/* quant.c -- exact INT8 and 4-bit quantizers (round half to even, fp16 scales). */
#include "quant.h"

#include <math.h>

void plume_quant_q8_row(const float *w, int32_t n, int8_t *q, uint16_t *scale) {
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(w[i]));
    uint16_t h = plume_f32_to_f16(fmaxf(amax, 1e-8f));
    float s = plume_f16_to_f32(h);
    for (int32_t i = 0; i < n; i++) {
        /* An all-zero row has s == 0 (fp16 flushes 1e-8 to 0): its q is 0. */
        float v = s > 0.0f ? rintf(w[i] * 127.0f / s) : 0.0f; /* rintf: half to even */
        q[i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : v);
    }
    *scale = h;
}

void plume_quant_q4_row(const float *w, int32_t n, uint8_t *packed, uint16_t *scales) {
    for (int32_t g = 0; g < n / 32; g++) {
        const float *x = w + 32 * g;
        float amax = 0.0f;
        for (int32_t i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        uint16_t h = plume_f32_to_f16(fmaxf(amax, 1e-8f) / 7.0f);
        float d = plume_f16_to_f32(h);
        for (int32_t i = 0; i < 16; i++) {
            float a = d > 0.0f ? rintf(x[2 * i] / d) : 0.0f, b = d > 0.0f ? rintf(x[2 * i + 1] / d) : 0.0f;
            int qa = a > 7.0f ? 7 : a < -8.0f ? -8 : (int)a;
            int qb = b > 7.0f ? 7 : b < -8.0f ? -8 : (int)b;
            packed[16 * g + i] = (uint8_t)((qa + 8) | (qb + 8) << 4);
        }
        scales[g] = h;
    }
}
