/* decode_image.c -- bytes -> an RGB image: the format is sniffed from the signature (a PNG
 * named .jpg is a PNG, as in PIL), the decoder of that format runs (decode_png.c,
 * decode_jpeg.c, decode_webp.c), then the EXIF orientation is applied as transformers'
 * load_image does (PIL.ImageOps.exif_transpose): plume_image_decode and plume_image_load.
 * (image.c, below the decoders, owns the image itself; encoding it is src/encode_image.c's.) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "media/media.h"

/* ---- orientation ---------------------------------------------------------------------- */

/* Where output pixel (x, y) of an oriented image comes from in the source (w x h), for EXIF
 * orientation o: PIL's transposes 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM,
 * 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90. */
static void orient_source(int32_t o, int32_t w, int32_t h, int32_t x, int32_t y, int32_t *sx, int32_t *sy) {
    switch (o) {
    case 2: *sx = w - 1 - x; *sy = y; break;
    case 3: *sx = w - 1 - x; *sy = h - 1 - y; break;
    case 4: *sx = x; *sy = h - 1 - y; break;
    case 5: *sx = y; *sy = x; break;                     /* transpose */
    case 6: *sx = y; *sy = h - 1 - x; break;             /* 90 degrees clockwise */
    case 7: *sx = w - 1 - y; *sy = h - 1 - x; break;     /* transverse */
    case 8: *sx = w - 1 - y; *sy = x; break;             /* 90 degrees counter-clockwise */
    default: *sx = x; *sy = y; break;
    }
}

int media_orient(plume_image **img, int32_t o, char **err) {
    if (o < 2 || o > 8) return 0;
    const plume_image *in = *img;
    int swap = o >= 5;
    plume_image *out;
    int rc = media_image_new(&out, swap ? in->h : in->w, swap ? in->w : in->h, "image", err);
    if (rc) return rc;
    for (int32_t y = 0; y < out->h; y++)
        for (int32_t x = 0; x < out->w; x++) {
            int32_t sx, sy;
            orient_source(o, in->w, in->h, x, y, &sx, &sy);
            memcpy(out->rgb + ((size_t)y * (size_t)out->w + (size_t)x) * 3,
                   in->rgb + ((size_t)sy * (size_t)in->w + (size_t)sx) * 3, 3);
        }
    plume_image_free(*img);
    *img = out;
    return 0;
}

/* ---- the public API ------------------------------------------------------------------- */

int plume_image_decode(plume_image **out, const void *bytes, size_t len, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "image: no output given");
    *out = NULL;
    const uint8_t *b = bytes;
    if (!b || len == 0) return plume_fail(err, PLUME_EFORMAT, "image: no bytes (an empty file?)");
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int32_t orientation = 1;
    int rc;
    if (len >= 8 && !memcmp(b, png_sig, 8)) rc = media_decode_png(b, len, out, &orientation, err);
    else if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) rc = media_decode_jpeg(b, len, out, &orientation, err);
    else if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) rc = media_decode_webp(b, len, out, &orientation, err);
    else return plume_fail(err, PLUME_EFORMAT, "image: not a PNG, JPEG or WebP file (unknown signature)");
    if (!rc) rc = media_orient(out, orientation, err);
    if (rc) {
        plume_image_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The frame size of a JPEG: the first SOFn marker's (as libjpeg reads it), walking the
 * marker segments from the start. 0 or -1. */
static int jpeg_size(const uint8_t *b, size_t n, int32_t *w, int32_t *h) {
    size_t i = 2;
    while (i + 4 <= n) {
        if (b[i] != 0xff) return -1;
        uint8_t mk = b[i + 1];
        if (mk == 0xff) { /* fill byte */
            i++;
            continue;
        }
        if (mk == 0x01 || (mk >= 0xd0 && mk <= 0xd7)) { /* no length */
            i += 2;
            continue;
        }
        size_t seg = (size_t)b[i + 2] << 8 | b[i + 3];
        if (seg < 2) return -1;
        if (mk >= 0xc0 && mk <= 0xcf && mk != 0xc4 && mk != 0xc8 && mk != 0xcc) {
            if (i + 9 > n) return -1;
            *h = (int32_t)(b[i + 5] << 8 | b[i + 6]);
            *w = (int32_t)(b[i + 7] << 8 | b[i + 8]);
            return 0;
        }
        if (mk == 0xda || mk == 0xd9) return -1; /* scan data before a frame header */
        i += 2 + seg;
    }
    return -1;
}

int plume_image_size(const void *bytes, size_t len, int32_t *width, int32_t *height, char **err) {
    if (!width || !height) return plume_fail(err, PLUME_EINVAL, "image: no output given");
    *width = *height = 0;
    const uint8_t *b = bytes;
    if (!b || len == 0) return plume_fail(err, PLUME_EFORMAT, "image: no bytes (an empty file?)");
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int ok = 0;
    if (len >= 24 && !memcmp(b, png_sig, 8) && !memcmp(b + 12, "IHDR", 4)) {
        uint32_t w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
        uint32_t h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
        ok = w <= INT32_MAX && h <= INT32_MAX;
        *width = ok ? (int32_t)w : 0;
        *height = ok ? (int32_t)h : 0;
    } else if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) {
        ok = !jpeg_size(b, len, width, height);
    } else if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) {
        ok = media_webp_size(b, len, width, height) == 0;
    } else {
        return plume_fail(err, PLUME_EFORMAT, "image: not a PNG, JPEG or WebP file (unknown signature)");
    }
    if (!ok) return plume_fail(err, PLUME_EFORMAT, "image: cannot read the size from the header (corrupt or truncated file)");
    return media_check_size("image", *width, *height, err);
}

int plume_image_load(plume_image **out, const char *path, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "image: no output given");
    *out = NULL;
    if (!path) return plume_fail(err, PLUME_EINVAL, "image: no path given");
    plume_map m;
    int rc = plume_map_open(&m, path, err);
    if (rc) return rc;
    char *why = NULL;
    rc = plume_image_decode(out, m.data, m.size, &why);
    if (rc) plume_fail(err, rc, "%s: %s", path, why ? why : "cannot decode");
    free(why);
    plume_map_free(&m);
    return rc;
}
