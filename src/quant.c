/* quant.c -- exact INT8 and 4-bit quantizers (round half to even, fp16 scales). */
#include "quant.h"

#include <math.h>

/* ---- q8 ------------------------------------------------------------------------------- */

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

/* ---- q4 ------------------------------------------------------------------------------- */

int plume_q4_rule_parse(const char *name) {
    if (!name || !strcmp(name, "best")) return PLUME_Q4_BEST;
    if (!strcmp(name, "absmax")) return PLUME_Q4_ABSMAX;
    if (!strcmp(name, "q4_0")) return PLUME_Q4_Q4_0;
    return -1;
}

/* The level of x on the step d: clamp(rne(x / d), -8, 7) (0 when d is 0 or not finite). */
static inline int q4_level(float x, float d) {
    if (!(d != 0.0f) || !isfinite(d)) return 0;
    float v = rintf(x / d); /* rintf: half to even */
    return v > 7.0f ? 7 : v < -8.0f ? -8 : (int)v;
}

/* The squared error of a group of 32 on the step of fp16 bits h, or +inf past limit (early out). */
static double q4_error(const float *x, uint16_t h, double limit) {
    float d = plume_f16_to_f32(h);
    if (!isfinite(d)) return INFINITY;
    double e = 0.0;
    for (int32_t i = 0; i < 32 && e <= limit; i++) {
        double r = (double)x[i] - (double)q4_level(x[i], d) * (double)d;
        e += r * r;
    }
    return e <= limit ? e : INFINITY;
}

/* The step of one group by rule. BEST tries every step that puts the group's largest
 * magnitude m (signed) on a level, d = fp16(m / k) for k in -8..-1 and 1..7 (absmax/7 and
 * Q4_0's m/-8 among them), then the two fp16 neighbours of the best (fp16 rounding of m/k can
 * miss a grid's own step by one unit), and keeps the smallest squared error; ties keep the
 * earlier candidate, absmax/7 first. A group that lies on a 4-bit grid of an fp16 step is
 * reproduced exactly: its largest magnitude sits on a level k of that grid. */
static uint16_t q4_step(const float *x, plume_q4_rule rule, double *err) {
    float amax = 0.0f, m = 0.0f;
    for (int32_t i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); m = x[i]; }
    uint16_t best = plume_f32_to_f16(fmaxf(amax, 1e-8f) / 7.0f);
    if (rule == PLUME_Q4_Q4_0 && amax > 0.0f) best = plume_f32_to_f16(m / -8.0f);
    double be = q4_error(x, best, INFINITY);
    if (rule == PLUME_Q4_BEST && amax > 0.0f) {
        static const int ks[15] = {-8, 7, -7, 6, -6, 5, -5, 4, -4, 3, -3, 2, -2, 1, -1};
        for (int32_t j = 0; j < 15 && be > 0.0; j++) {
            uint16_t h = plume_f32_to_f16(m / (float)ks[j]);
            double e = q4_error(x, h, be);
            if (e < be) { be = e; best = h; }
        }
        const uint16_t mid = best;
        for (int32_t s = -1; s <= 1 && be > 0.0; s += 2) {
            uint16_t h = (uint16_t)(mid + s);
            if ((h & 0x7fffu) == 0 || ((mid ^ h) & 0x8000u)) continue; /* stays a nonzero step of the same sign */
            double e = q4_error(x, h, be);
            if (e < be) { be = e; best = h; }
        }
    }
    *err = be;
    return best;
}

double plume_quant_q4_row(const float *w, int32_t n, uint8_t *packed, uint16_t *scales, plume_q4_rule rule) {
    double total = 0.0;
    for (int32_t g = 0; g < n / 32; g++) {
        const float *x = w + 32 * g;
        double e;
        uint16_t h = q4_step(x, rule, &e);
        float d = plume_f16_to_f32(h);
        for (int32_t i = 0; i < 16; i++) {
            int qa = q4_level(x[2 * i], d), qb = q4_level(x[2 * i + 1], d);
            packed[16 * g + i] = (uint8_t)((qa + 8) | (qb + 8) << 4);
        }
        scales[g] = h;
        total += e;
    }
    return total;
}
