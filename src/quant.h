/* quant.h -- the exact quantizers of docs/BUNDLE.md (shared/spec/bundle.md and the golden
 * README): INT8 per row with an fp16 absmax scale, and 4-bit per group of 32 with an fp16
 * step. Used by the converter; the kernels only dequantize. */
#ifndef PLUME_QUANT_H
#define PLUME_QUANT_H

#include "common.h"

/* How a q4 group's step d is chosen (docs/BUNDLE.md, "q4 step"). */
typedef enum {
    PLUME_Q4_BEST = 0,   /* the candidate of the smallest squared error (the default) */
    PLUME_Q4_ABSMAX = 1, /* d = fp16(max(absmax, 1e-8) / 7): the golden logits_w4 rule */
    PLUME_Q4_Q4_0 = 2,   /* d = fp16(signed max / -8): llama.cpp's Q4_0 rule */
} plume_q4_rule;

/* The rule of a name ("best", "absmax", "q4_0"); -1 for another name. */
int plume_q4_rule_parse(const char *name);

/* q8 of one row: s = fp16(max(absmax, 1e-8)); q = clamp(rne(w * 127 / s), -127, 127). */
void plume_quant_q8_row(const float *w, int32_t n, int8_t *q, uint16_t *scale);
/* q4 of one row (n a multiple of 32): per group a step d (fp16, of either sign) by rule,
 * q = clamp(rne(w / d), -8, 7), packed two per byte as q + 8 (even column low nibble).
 * Returns the row's squared error sum((w - q*d)^2). */
double plume_quant_q4_row(const float *w, int32_t n, uint8_t *packed, uint16_t *scales, plume_q4_rule rule);

#endif
