/* tiles.c -- the PLUME_L_TILES layout of Q8 and Q4 weights (kernels.h): packing a group of
 * 16 rows into it (the converter), unpacking it (forward.c, for kernels that read rows), and
 * the element accessors of the reference kernels. */
#include <string.h>

#include "kernels.h"

/* Q8 or Q4, whole groups of 16 rows, whole blocks of 32 columns. */
int plume_tiles_fit(plume_wtype type, int64_t rows, int64_t cols) {
    return (type == PLUME_W_Q8 || type == PLUME_W_Q4) && rows > 0 && cols > 0 && rows % PLUME_TILE_ROWS == 0 &&
           cols % 32 == 0;
}

/* Byte of column c of row i (< 16) in a tiled Q8 group, and in a tiled Q4 group (the nibble
 * is the high one when c % 32 >= 16). */
static size_t q8_pos(int32_t i, int32_t c) { return (size_t)(c / 4) * 64 + (size_t)i * 4 + (size_t)(c % 4); }
static size_t q4_pos(int32_t i, int32_t c) {
    return (size_t)(c / 32) * 256 + (size_t)(c % 16 / 4) * 64 + (size_t)i * 4 + (size_t)(c % 4);
}

/* Rows layout -> tiles layout, one group. */
void plume_tiles_pack(plume_wtype type, int32_t cols, const void *rows, const uint16_t *rscale, void *tiles,
                      uint16_t *tscale) {
    const uint8_t *src = rows;
    uint8_t *dst = tiles;
    if (type == PLUME_W_Q8) {
        for (int32_t i = 0; i < PLUME_TILE_ROWS; i++)
            for (int32_t c = 0; c < cols; c++) dst[q8_pos(i, c)] = src[(size_t)i * cols + c];
        return;
    }
    const int32_t groups = cols / 32;
    memset(dst, 0, (size_t)PLUME_TILE_ROWS * cols / 2);
    for (int32_t i = 0; i < PLUME_TILE_ROWS; i++) {
        for (int32_t c = 0; c < cols; c++) {
            uint8_t b = src[(size_t)i * (cols / 2) + c / 2];
            uint8_t nib = c % 2 ? b >> 4 : b & 15;
            dst[q4_pos(i, c)] |= (uint8_t)(c % 32 < 16 ? nib : nib << 4);
        }
        for (int32_t g = 0; g < groups; g++) tscale[g * PLUME_TILE_ROWS + i] = rscale[(size_t)i * groups + g];
    }
}

/* Tiles layout -> rows layout, one group: the hot loop of forward.c's fallback, so it moves
 * a row's 4 bytes of a line as one word (Q8), or splits them into the row's two bytes of the
 * low columns and two of the high ones (Q4), with no per-column index arithmetic. */
void plume_tiles_unpack(plume_wtype type, int32_t cols, const void *tiles, const uint16_t *tscale, void *rows,
                        uint16_t *rscale) {
    const uint8_t *src = tiles;
    uint8_t *dst = rows;
    if (type == PLUME_W_Q8) {
        const int32_t nq = cols / 4;
        for (int32_t i = 0; i < PLUME_TILE_ROWS; i++) /* the group (<= 16 cols bytes) stays in L1 meanwhile */
            for (int32_t q = 0; q < nq; q++) memcpy(dst + ((size_t)i * nq + q) * 4, src + ((size_t)q * 16 + i) * 4, 4);
        return;
    }
    const int32_t groups = cols / 32;
    for (int32_t b = 0; b < groups; b++)
        for (int32_t p = 0; p < 4; p++)
            for (int32_t i = 0; i < PLUME_TILE_ROWS; i++) {
                const uint8_t *t = src + (size_t)b * 256 + (size_t)p * 64 + (size_t)i * 4; /* columns 4p + k, 16 + 4p + k */
                uint8_t *d = dst + (size_t)i * (cols / 2) + (size_t)b * 16 + 2 * (size_t)p;
                d[0] = (uint8_t)((t[0] & 15) | (t[1] << 4));
                d[1] = (uint8_t)((t[2] & 15) | (t[3] << 4));
                d[8] = (uint8_t)((t[0] >> 4) | (t[1] & 0xf0));
                d[9] = (uint8_t)((t[2] >> 4) | (t[3] & 0xf0));
            }
    for (int32_t i = 0; i < PLUME_TILE_ROWS; i++)
        for (int32_t g = 0; g < groups; g++) rscale[(size_t)i * groups + g] = tscale[g * PLUME_TILE_ROWS + i];
}

/* q of W[r, c]: Q8 the byte, Q4 the nibble - 8. */
int32_t plume_weight_q(const plume_weight *w, int32_t r, int32_t c) {
    const uint8_t *d = w->data;
    if (w->type == PLUME_W_Q8) {
        size_t at = w->layout == PLUME_L_TILES
                        ? (size_t)(r / PLUME_TILE_ROWS) * PLUME_TILE_ROWS * w->cols + q8_pos(r % PLUME_TILE_ROWS, c)
                        : (size_t)r * w->cols + c;
        return (int8_t)d[at];
    }
    if (w->layout == PLUME_L_TILES) {
        uint8_t b = d[(size_t)(r / PLUME_TILE_ROWS) * PLUME_TILE_ROWS * (w->cols / 2) + q4_pos(r % PLUME_TILE_ROWS, c)];
        return (c % 32 < 16 ? b & 15 : b >> 4) - 8;
    }
    uint8_t b = d[(size_t)r * (w->cols / 2) + c / 2];
    return (c % 2 ? b >> 4 : b & 15) - 8;
}

/* d of (r, group g) of a Q4 weight, fp16 bits. */
uint16_t plume_weight_q4_step(const plume_weight *w, int32_t r, int32_t g) {
    const int32_t groups = w->cols / 32;
    if (w->layout == PLUME_L_TILES)
        return w->scale[((size_t)(r / PLUME_TILE_ROWS) * groups + g) * PLUME_TILE_ROWS + r % PLUME_TILE_ROWS];
    return w->scale[(size_t)r * groups + g];
}
