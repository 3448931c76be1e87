/* media.h -- the media room: bytes -> pixels (docs/MEDIA.md).
 *
 * Owns: decoding images (PNG with libpng, JPEG with libjpeg-turbo, WebP with libwebp and its
 * demuxer; the format is sniffed from the bytes, never from a name), EXIF orientation (parsed
 * here: a bounded TIFF reader), the conversion to 8-bit RGB that Hugging Face's processor
 * makes (PIL's convert("RGB"): alpha dropped, palettes and grays expanded), the resampler
 * (Pillow's bicubic on uint8, bit for bit), and Gemma 4's image plan (the size rule of the
 * token budget, rescale by 1/255, patches and their positions).
 * May call: common.h. Must not know: the tower, the model, sessions.
 *
 * Files, in calling order:
 *   decode.c       sniff, the pixel cap, orientation, plume_image_* of plume.h
 *   decode_png.c   decode_jpeg.c   decode_webp.c   one library each, to RGB
 *   exif.c         the orientation tag of an EXIF block
 *   resize.c       Pillow's two-pass bicubic resample with fixed-point coefficients
 *   patches.c      the target size of a budget, patches [N, p*p*3] and positions [N, 2]
 *
 * Every decoder reads untrusted bytes: sizes are checked against MEDIA_MAX_PIXELS before a
 * pixel buffer is allocated, and a library's error comes back as PLUME_EFORMAT with its
 * message, never as a crash. */
#ifndef PLUME_MEDIA_H
#define PLUME_MEDIA_H

#include "common.h"

/* Decoded pixels are refused beyond this many (a 20000 x 20000 image is 400M): 64 MP, more
 * than phone cameras give, 192 MB of RGB. */
#define MEDIA_MAX_PIXELS (64ll << 20)
/* Or beyond this many on a side (a 1 x 60M strip would pass the pixel count). */
#define MEDIA_MAX_SIDE 65535

/* An image: 8-bit RGB, row after row (plume.h's plume_image). */
struct plume_image {
    int32_t w, h;   /* pixels */
    uint8_t *rgb;   /* [h, w, 3] */
};

/* ---- decode.c ------------------------------------------------------------------------- */

/* Check a decoder's header dimensions before it allocates: 0, or PLUME_EFORMAT naming what. */
int media_check_size(const char *what, int64_t w, int64_t h, char **err);
/* A new image of w x h (checked with media_check_size), pixels uninitialized. */
int media_image_new(plume_image **out, int32_t w, int32_t h, const char *what, char **err);

/* ---- decode_*.c: bytes of one format -> RGB, and the EXIF block's orientation (1..8,
 * 1 when none). The bytes are known to start with the format's signature. ---------------- */
int media_decode_png(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);
int media_decode_jpeg(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);
int media_decode_webp(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);

/* ---- exif.c --------------------------------------------------------------------------- */

/* The orientation tag (0x0112) of an EXIF block: a TIFF header and IFD0, optionally after
 * "Exif\0\0". 1..8, or 1 when absent or unreadable (a broken EXIF block never fails a decode,
 * as in Pillow). */
int32_t media_exif_orientation(const uint8_t *b, size_t n);

/* Apply an EXIF orientation (2..8: PIL's ImageOps.exif_transpose) to *img, replacing it. */
int media_orient(plume_image **img, int32_t orientation, char **err);

/* ---- resize.c ------------------------------------------------------------------------- */

/* Resample RGB src [sh, sw, 3] to dst [dh, dw, 3] as Pillow's Image.resize(BICUBIC) does on
 * an 8-bit image: a horizontal then a vertical pass (each skipped when its size is kept),
 * Keys' cubic (a = -0.5) with its support widened by the downscale factor, coefficients
 * normalized in double and rounded to 22-bit fixed point, sums rounded and clipped per pass.
 * 0 or PLUME_ENOMEM. */
int media_resize_bicubic(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw, int32_t dh,
                         char **err);

/* ---- patches.c ------------------------------------------------------------------------ */

/* Gemma 4's image plan for a budget of soft tokens. */
typedef struct {
    int32_t th, tw;     /* resized height, width: multiples of patch * pool */
    int32_t ph, pw;     /* patches down, across */
    int32_t n_patches;  /* ph * pw */
    int32_t n_tokens;   /* soft tokens: n_patches / pool^2 */
} media_plan;

/* The budgets the processor accepts (HF's _SUPPORTED_SOFT_TOKENS). */
int media_budget_ok(int32_t max_tokens);
/* The size an h x w image is resized to for max_tokens (HF get_aspect_ratio_preserving_size,
 * in double as Python computes it): 0, or PLUME_EINVAL for a budget outside 70/140/280/560/1120
 * or a size HF refuses. */
int media_plan_for(int32_t h, int32_t w, int32_t patch, int32_t pool, int32_t max_tokens, media_plan *p,
                   char **err);
/* The resized pixels of img for plan p ([th, tw, 3], malloc'd into *rgb): img's own when the
 * size is kept. 0 or PLUME_ENOMEM. */
int media_plan_pixels(const plume_image *img, const media_plan *p, uint8_t **rgb, char **err);
/* Patches of resized pixels rgb [th, tw, 3]: pix [n_patches, patch*patch*3] as the processor
 * gives them (float32(u8 * (1/255)) in double, patch r*pw + c, inside ((dy*patch)+dx)*3 + ch),
 * pos [n_patches, 2] = (x, y) = (c, r). */
void media_patchify(const uint8_t *rgb, const media_plan *p, int32_t patch, float *pix, int32_t *pos);

#endif
