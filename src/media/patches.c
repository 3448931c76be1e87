/* patches.c -- Gemma 4's image plan (HF Gemma4ImageProcessor, shared/spec/gemma4-multimodal.md
 * §2.2): the size an image is resized to for a budget of soft tokens, then the patches the
 * tower reads and their (x, y) positions. Only real patches are made: HF pads to 9 x budget
 * with zero patches at (-1, -1), which the tower masks and the pooler drops. */
#include <math.h>
#include <stdlib.h>

#include "media/media.h"

int media_budget_ok(int32_t t) { return t == 70 || t == 140 || t == 280 || t == 560 || t == 1120; }

int media_plan_for(int32_t h, int32_t w, int32_t patch, int32_t pool, int32_t max_tokens, media_plan *p, char **err) {
    if (!media_budget_ok(max_tokens))
        return plume_fail(err, PLUME_EINVAL, "image: the token budget must be 70, 140, 280, 560 or 1120 (not %d)", max_tokens);
    if (h < 1 || w < 1 || patch < 1 || pool < 1) return plume_fail(err, PLUME_EINVAL, "image: no pixels");
    /* get_aspect_ratio_preserving_size, in double as Python's floats */
    const int64_t max_patches = (int64_t)max_tokens * pool * pool, side = (int64_t)pool * patch;
    const double target_px = (double)(max_patches * patch * patch);
    const double f = sqrt(target_px / ((double)h * (double)w));
    int64_t th = (int64_t)floor(f * h / (double)side) * side, tw = (int64_t)floor(f * w / (double)side) * side;
    if (th == 0 && tw == 0) return plume_fail(err, PLUME_EINVAL, "image: %d x %d resizes to 0 x 0", w, h);
    const int64_t max_side = (max_patches / (pool * pool)) * side;
    if (th == 0) {
        th = side;
        tw = (int64_t)floor((double)w / (double)h) * side;
        if (tw > max_side) tw = max_side;
    } else if (tw == 0) {
        tw = side;
        th = (int64_t)floor((double)h / (double)w) * side;
        if (th > max_side) th = max_side;
    }
    if ((double)(th * tw) > target_px)
        return plume_fail(err, PLUME_EINVAL, "image: %d x %d would resize to %lld x %lld, over the budget of %d tokens", w,
                          h, (long long)tw, (long long)th, max_tokens);
    p->th = (int32_t)th;
    p->tw = (int32_t)tw;
    p->ph = (int32_t)(th / patch);
    p->pw = (int32_t)(tw / patch);
    p->n_patches = p->ph * p->pw;
    p->n_tokens = p->n_patches / (pool * pool);
    return 0;
}

int media_plan_pixels(const plume_image *img, const media_plan *p, uint8_t **rgb, char **err) {
    *rgb = malloc((size_t)p->th * (size_t)p->tw * 3);
    if (!*rgb) return plume_fail(err, PLUME_ENOMEM, "image: out of memory for %d x %d pixels", p->tw, p->th);
    int rc = media_resize_bicubic(img->rgb, img->w, img->h, *rgb, p->tw, p->th, err);
    if (rc) {
        free(*rgb);
        *rgb = NULL;
    }
    return rc;
}

void media_patchify(const uint8_t *rgb, const media_plan *p, int32_t patch, float *pix, int32_t *pos) {
    const size_t row = (size_t)p->tw * 3, per = (size_t)patch * (size_t)patch * 3;
    const double rescale = 0.00392156862745098; /* 1 / 255 as Python writes it */
    for (int32_t r = 0; r < p->ph; r++)
        for (int32_t c = 0; c < p->pw; c++) {
            const int64_t i = (int64_t)r * p->pw + c;
            float *out = pix + (size_t)i * per;
            for (int32_t dy = 0; dy < patch; dy++) {
                const uint8_t *in = rgb + ((size_t)r * (size_t)patch + (size_t)dy) * row + (size_t)c * (size_t)patch * 3;
                for (int32_t k = 0; k < patch * 3; k++) out[(size_t)dy * (size_t)patch * 3 + (size_t)k] = (float)(in[k] * rescale);
            }
            pos[2 * i] = c;
            pos[2 * i + 1] = r;
        }
}
