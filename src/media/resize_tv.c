/* resize_tv.c -- torchvision's uint8 bicubic antialiased resize as PyTorch's CPU kernel
 * computes it (F.resize(uint8 tensor, BICUBIC, antialias=True): the native uint8 path of
 * aten/src/ATen/native/cpu/UpSampleKernel.cpp, what Hugging Face's video processor runs on a
 * CPU; shared/spec/gemma4-multimodal.md §8.1 step 4). Not Pillow's (resize.c): the window is
 * the same, the fixed point is not.
 *
 *   per axis: scale = in / out (double), support = 2 * scale when shrinking, else 2; output i
 *   is centred at scale * (i + 0.5) and reads inputs [xmin, xmin + n), xmin = (int64)(centre -
 *   support + 0.5) clipped to 0, the end (int64)(centre + support + 0.5) clipped to the size;
 *   weight of input x: keys((x + xmin - centre + 0.5) * invscale), invscale = 1 / scale when
 *   shrinking, else 1; Keys' cubic with a = -0.5 written as PyTorch writes it; normalised to
 *   sum 1 in double;
 *   then int16: the precision p is the largest below 22 with round(w_max * 2^(p + 1)) < 2^15
 *   (w_max the largest weight of the axis), each weight rounded half away from zero at 2^p;
 *   a pass sums int(sample) * weight from 2^(p - 1) in integers, shifts right by p and clamps
 *   to 0..255.
 *
 * The horizontal pass runs first into a uint8 buffer, then the vertical one; a pass whose size
 * is kept is skipped (PyTorch's need_horizontal / need_vertical). Channels are independent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "media/media.h"

/* ---- weights of one axis -------------------------------------------------------------- */

/* The int16 weights of one axis: output i reads bounds[2i + 1] inputs from bounds[2i]. */
typedef struct {
    int32_t ksize;     /* weights per output (PyTorch's max_interp_size) */
    int32_t prec;      /* fraction bits of the weights */
    int32_t *bounds;   /* [out, 2] first input, count */
    int16_t *k;        /* [out, ksize] */
} tv_axis;

/* Keys' cubic, a = -0.5, as PyTorch's aa_filter for bicubic (cubic_convolution1 / 2). */
static double tv_keys(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

/* The weights for in_size -> out_size (PyTorch's _compute_indices_min_size_weights_aa, then
 * the int16 rescale). 0 or -1 (out of memory). */
static int tv_axis_init(tv_axis *ax, int32_t in_size, int32_t out_size) {
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    ax->ksize = (int32_t)ceil(support) * 2 + 1;
    ax->bounds = malloc(sizeof *ax->bounds * 2 * (size_t)out_size);
    ax->k = malloc(sizeof *ax->k * (size_t)ax->ksize * (size_t)out_size);
    double *w = calloc((size_t)ax->ksize * (size_t)out_size, sizeof *w);
    if (!ax->bounds || !ax->k || !w) {
        free(w);
        return -1;
    }
    double w_max = 0.0;
    for (int32_t i = 0; i < out_size; i++) {
        const double center = scale * (i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5), xend = (int64_t)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xend > in_size) xend = in_size;
        int64_t n = xend - xmin;
        if (n < 0) n = 0;
        if (n > ax->ksize) n = ax->ksize;
        double *wi = w + (size_t)i * (size_t)ax->ksize, total = 0.0;
        for (int64_t j = 0; j < n; j++) {
            wi[j] = tv_keys(((double)j + (double)xmin - center + 0.5) * invscale);
            total += wi[j];
        }
        if (total != 0.0)
            for (int64_t j = 0; j < n; j++) wi[j] /= total;
        ax->bounds[2 * i] = (int32_t)xmin;
        ax->bounds[2 * i + 1] = (int32_t)n;
    }
    /* PyTorch takes the largest of all the axis' weights, the zero tails included */
    w_max = w[0];
    for (size_t j = 0; j < (size_t)ax->ksize * (size_t)out_size; j++)
        if (w_max < w[j]) w_max = w[j];
    int32_t p = 0;
    for (p = 0; p < 22; p++)
        if ((int)(0.5 + w_max * (double)(1 << (p + 1))) >= (1 << 15)) break;
    ax->prec = p;
    for (size_t j = 0; j < (size_t)ax->ksize * (size_t)out_size; j++) {
        const double v = w[j] * (double)(1 << p);
        ax->k[j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(w);
    return 0;
}

static void tv_axis_free(tv_axis *ax) {
    free(ax->bounds);
    free(ax->k);
}

/* A sum at precision p -> a sample: floor(s / 2^p) (an arithmetic shift), clamped to 0..255. */
static inline uint8_t tv_clip8(int64_t s, int32_t p) {
    const int64_t v = s >= 0 ? s >> p : -((-s + ((int64_t)1 << p) - 1) >> p);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* ---- the two passes ------------------------------------------------------------------- */

/* Horizontal pass: src [h, sw, 3] -> dst [h, dw, 3]. */
static void tv_horizontal(const uint8_t *src, int32_t sw, int32_t h, const tv_axis *ax, uint8_t *dst, int32_t dw) {
    const int64_t half = (int64_t)1 << (ax->prec > 0 ? ax->prec - 1 : 0);
    for (int32_t y = 0; y < h; y++) {
        const uint8_t *in = src + (size_t)y * (size_t)sw * 3;
        uint8_t *out = dst + (size_t)y * (size_t)dw * 3;
        for (int32_t xx = 0; xx < dw; xx++) {
            const int32_t xmin = ax->bounds[2 * xx], n = ax->bounds[2 * xx + 1];
            const int16_t *k = ax->k + (size_t)xx * (size_t)ax->ksize;
            int64_t s0 = half, s1 = half, s2 = half;
            for (int32_t x = 0; x < n; x++) {
                const uint8_t *q = in + (size_t)(x + xmin) * 3;
                s0 += (int64_t)q[0] * k[x];
                s1 += (int64_t)q[1] * k[x];
                s2 += (int64_t)q[2] * k[x];
            }
            out[3 * xx] = tv_clip8(s0, ax->prec);
            out[3 * xx + 1] = tv_clip8(s1, ax->prec);
            out[3 * xx + 2] = tv_clip8(s2, ax->prec);
        }
    }
}

/* Vertical pass: src [sh, w, 3] -> dst [dh, w, 3]. */
static void tv_vertical(const uint8_t *src, int32_t w, const tv_axis *ax, uint8_t *dst, int32_t dh) {
    const size_t row = (size_t)w * 3;
    const int64_t half = (int64_t)1 << (ax->prec > 0 ? ax->prec - 1 : 0);
    for (int32_t yy = 0; yy < dh; yy++) {
        const int32_t ymin = ax->bounds[2 * yy], n = ax->bounds[2 * yy + 1];
        const int16_t *k = ax->k + (size_t)yy * (size_t)ax->ksize;
        uint8_t *out = dst + (size_t)yy * row;
        for (size_t c = 0; c < row; c++) {
            int64_t s = half;
            for (int32_t y = 0; y < n; y++) s += (int64_t)src[(size_t)(ymin + y) * row + c] * k[y];
            out[c] = tv_clip8(s, ax->prec);
        }
    }
}

int media_resize_tv(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw, int32_t dh, char **err) {
    const int need_h = dw != sw, need_v = dh != sh;
    if (!need_h && !need_v) {
        memcpy(dst, src, (size_t)sw * (size_t)sh * 3);
        return 0;
    }
    tv_axis hz = {0}, vt = {0};
    uint8_t *tmp = NULL;
    int rc = 0;
    if (need_h) {
        rc = tv_axis_init(&hz, sw, dw);
        tmp = rc || !need_v ? NULL : malloc((size_t)sh * (size_t)dw * 3);
        if (!rc && need_v && !tmp) rc = -1;
        if (!rc) tv_horizontal(src, sw, sh, &hz, need_v ? tmp : dst, dw);
    }
    if (!rc && need_v) {
        rc = tv_axis_init(&vt, sh, dh);
        if (!rc) tv_vertical(need_h ? tmp : src, dw, &vt, dst, dh);
    }
    tv_axis_free(&hz);
    tv_axis_free(&vt);
    free(tmp);
    return rc ? plume_fail(err, PLUME_ENOMEM, "resize: out of memory (%d x %d -> %d x %d)", sw, sh, dw, dh) : 0;
}
