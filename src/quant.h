/* quant.h -- the exact quantizers of docs/BUNDLE.md (shared/spec/bundle.md and the golden
 * README): INT8 per row with an fp16 absmax scale, and 4-bit per group of 32 with an fp16
 * step. Used by the converter; the kernels only dequantize. */
#ifndef PLUME_QUANT_H
#define PLUME_QUANT_H

#include "common.h"

/* q8 of one row: s = fp16(max(absmax, 1e-8)); q = clamp(rne(w * 127 / s), -127, 127). */
void plume_quant_q8_row(const float *w, int32_t n, int8_t *q, uint16_t *scale);
/* q4 of one row (n a multiple of 32): per group d = fp16(max(absmax, 1e-8) / 7),
 * q = clamp(rne(w / d), -8, 7), packed two per byte as q + 8 (even column low nibble). */
void plume_quant_q4_row(const float *w, int32_t n, uint8_t *packed, uint16_t *scales);

#endif
