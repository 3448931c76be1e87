/* resize.c -- Pillow's bicubic resample of an 8-bit image, bit for bit (Hugging Face's image
 * processor resizes with PIL: Image.resize(size, BICUBIC), reducing_gap None). Written from
 * the algorithm of Pillow's libImaging/Resample.c:
 *
 *   per axis: scale = in / out (the box is (0, 0, w, h), in float), filterscale = max(scale, 1),
 *   support = 2 * filterscale; output i is centred at (i + 0.5) * scale and reads inputs
 *   [xmin, xmin + n) with xmin = (int)(centre - support + 0.5) clipped to 0, the end likewise
 *   clipped to the size; weight of input x: keys((x + xmin - centre + 0.5) / filterscale),
 *   Keys' cubic with a = -0.5, normalized to sum 1 in double, then rounded half away from zero
 *   to fixed point with 22 fraction bits;
 *   a pass sums int(sample) * weight from 2^21 (the rounding half) and keeps the top bits,
 *   clipped to 0..255.
 *
 * The horizontal pass runs first, on the rows the vertical pass reads, and a pass whose size
 * does not change is skipped (Pillow's ImagingResampleInner). Channels are independent. */
#include <math.h>
#include <stdlib.h>

#include "media/media.h"

enum { RS_BITS = 22 }; /* 32 - 8 - 2: 8 bits of result, 2 for overshoot and sign */

/* The weights of one axis: output i reads bounds[2i + 1] inputs from bounds[2i], with
 * fixed-point weights k[i * ksize ...]. */
typedef struct {
    int32_t ksize;
    int32_t *bounds; /* [out, 2] */
    int32_t *k;      /* [out, ksize] */
} rs_axis;

/* Keys' cubic convolution kernel, a = -0.5 (Pillow's bicubic_filter). */
static double rs_keys(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* The weights for resampling in_size samples to out_size (Pillow's precompute_coeffs then
 * normalize_coeffs_8bpc). 0 or -1 (out of memory). */
static int rs_axis_init(rs_axis *ax, int32_t in_size, int32_t out_size) {
    const float in0 = 0.0f, in1 = (float)in_size;
    double scale = (double)(in1 - in0) / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale, inv = 1.0 / filterscale;
    ax->ksize = (int32_t)ceil(support) * 2 + 1;
    ax->bounds = malloc(sizeof *ax->bounds * 2 * (size_t)out_size);
    ax->k = malloc(sizeof *ax->k * (size_t)ax->ksize * (size_t)out_size);
    double *w = malloc(sizeof *w * (size_t)ax->ksize);
    if (!ax->bounds || !ax->k || !w) {
        free(w);
        return -1;
    }
    for (int32_t xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale, ww = 0.0;
        int32_t xmin = (int32_t)(center - support + 0.5), xmax = (int32_t)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int32_t x = 0; x < xmax; x++) {
            w[x] = rs_keys((x + xmin - center + 0.5) * inv);
            ww += w[x];
        }
        int32_t *k = ax->k + (size_t)xx * (size_t)ax->ksize;
        for (int32_t x = 0; x < ax->ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RS_BITS)) : (int32_t)(0.5 + v * (1 << RS_BITS));
        }
        ax->bounds[2 * xx] = xmin;
        ax->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return 0;
}

static void rs_axis_free(rs_axis *ax) {
    free(ax->bounds);
    free(ax->k);
}

/* A fixed-point sum -> a sample: the top bits, clipped to 0..255. */
static inline uint8_t rs_clip8(int64_t ss) {
    if (ss < 0) return 0;
    ss >>= RS_BITS;
    return (uint8_t)(ss > 255 ? 255 : ss);
}

/* Horizontal pass: rows [y0, y0 + rows) of src [*, sw, 3] -> tmp [rows, dw, 3]. */
static void rs_horizontal(const uint8_t *src, int32_t sw, int32_t y0, int32_t rows, const rs_axis *ax, uint8_t *tmp,
                          int32_t dw) {
    for (int32_t y = 0; y < rows; y++) {
        const uint8_t *in = src + ((size_t)(y0 + y) * (size_t)sw) * 3;
        uint8_t *out = tmp + (size_t)y * (size_t)dw * 3;
        for (int32_t xx = 0; xx < dw; xx++) {
            const int32_t xmin = ax->bounds[2 * xx], n = ax->bounds[2 * xx + 1];
            const int32_t *k = ax->k + (size_t)xx * (size_t)ax->ksize;
            int64_t s0 = 1 << (RS_BITS - 1), s1 = s0, s2 = s0;
            for (int32_t x = 0; x < n; x++) {
                const uint8_t *p = in + (size_t)(x + xmin) * 3;
                s0 += (int64_t)p[0] * k[x];
                s1 += (int64_t)p[1] * k[x];
                s2 += (int64_t)p[2] * k[x];
            }
            out[3 * xx] = rs_clip8(s0);
            out[3 * xx + 1] = rs_clip8(s1);
            out[3 * xx + 2] = rs_clip8(s2);
        }
    }
}

/* Vertical pass: src [*, w, 3] whose row 0 is input row y0 -> dst [dh, w, 3]. */
static void rs_vertical(const uint8_t *src, int32_t w, int32_t y0, const rs_axis *ax, uint8_t *dst, int32_t dh) {
    const size_t row = (size_t)w * 3;
    for (int32_t yy = 0; yy < dh; yy++) {
        const int32_t ymin = ax->bounds[2 * yy] - y0, n = ax->bounds[2 * yy + 1];
        const int32_t *k = ax->k + (size_t)yy * (size_t)ax->ksize;
        uint8_t *out = dst + (size_t)yy * row;
        for (size_t c = 0; c < row; c++) {
            int64_t ss = 1 << (RS_BITS - 1);
            for (int32_t y = 0; y < n; y++) ss += (int64_t)src[(size_t)(ymin + y) * row + c] * k[y];
            out[c] = rs_clip8(ss);
        }
    }
}

int media_resize_bicubic(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw, int32_t dh,
                         char **err) {
    const int need_h = dw != sw, need_v = dh != sh;
    if (!need_h && !need_v) {
        memcpy(dst, src, (size_t)sw * (size_t)sh * 3);
        return 0;
    }
    rs_axis hz = {0}, vt = {0};
    uint8_t *tmp = NULL;
    int rc = rs_axis_init(&vt, sh, dh);
    /* the input rows the vertical pass reads: [first, last) */
    int32_t first = rc ? 0 : vt.bounds[0], last = rc ? 0 : vt.bounds[2 * dh - 2] + vt.bounds[2 * dh - 1];
    if (!rc && need_h) {
        rc = rs_axis_init(&hz, sw, dw);
        tmp = rc ? NULL : malloc((size_t)(last - first) * (size_t)dw * 3);
        if (!tmp) rc = -1;
        else rs_horizontal(src, sw, first, last - first, &hz, need_v ? tmp : dst, dw);
    }
    if (!rc && need_v) {
        if (need_h) rs_vertical(tmp, dw, first, &vt, dst, dh);
        else rs_vertical(src, sw, 0, &vt, dst, dh);
    }
    rs_axis_free(&hz);
    rs_axis_free(&vt);
    free(tmp);
    return rc ? plume_fail(err, PLUME_ENOMEM, "resize: out of memory (%d x %d -> %d x %d)", sw, sh, dw, dh) : 0;
}
