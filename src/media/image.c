/* image.c -- the decoded image: its size limits, allocation and the plume_image_* accessors
 * of plume.h. Below the decoders (decode_*.c and decode_image.c allocate through it). */
#include <stdlib.h>
#include <string.h>

#include "media/media.h"

/* ---- sizes ---------------------------------------------------------------------------- */

int media_check_size(const char *what, int64_t w, int64_t h, char **err) {
    if (w <= 0 || h <= 0) return plume_fail(err, PLUME_EFORMAT, "%s: the image has no pixels (%lld x %lld)", what, (long long)w, (long long)h);
    if (w > MEDIA_MAX_SIDE || h > MEDIA_MAX_SIDE || w * h > MEDIA_MAX_PIXELS)
        return plume_fail(err, PLUME_EFORMAT, "%s: %lld x %lld pixels is more than plume decodes (%lld pixels, %d a side)",
                          what, (long long)w, (long long)h, (long long)MEDIA_MAX_PIXELS, MEDIA_MAX_SIDE);
    return 0;
}

int media_image_new(plume_image **out, int32_t w, int32_t h, const char *what, char **err) {
    *out = NULL;
    int rc = media_check_size(what, w, h, err);
    if (rc) return rc;
    plume_image *im = calloc(1, sizeof *im);
    if (im) im->rgb = malloc((size_t)w * (size_t)h * 3);
    if (!im || !im->rgb) {
        free(im);
        return plume_fail(err, PLUME_ENOMEM, "%s: out of memory for %d x %d pixels", what, w, h);
    }
    im->w = w;
    im->h = h;
    *out = im;
    return 0;
}

/* ---- the public API ------------------------------------------------------------------- */

int plume_image_from_rgb(plume_image **out, const uint8_t *rgb, int32_t width, int32_t height, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "image: no output given");
    *out = NULL;
    if (!rgb) return plume_fail(err, PLUME_EINVAL, "image: no pixels given");
    int rc = media_image_new(out, width, height, "image", err);
    if (!rc) memcpy((*out)->rgb, rgb, (size_t)width * (size_t)height * 3);
    return rc;
}

void plume_image_free(plume_image *img) {
    if (!img) return;
    free(img->rgb);
    free(img);
}

int32_t plume_image_width(const plume_image *img) { return img->w; }
int32_t plume_image_height(const plume_image *img) { return img->h; }
const uint8_t *plume_image_rgb(const plume_image *img) { return img->rgb; }
