/* encode_image.c -- the image half of the glue (encode.h): a decoded image
 * (media/decode_image.c) -> resized pixels and patches (media/resize.c, patches.c) ->
 * encoders/tower_vision.c (patches -> soft tokens -> decoder rows), into a plume_embd (embd.h)
 * whose key is the hash of the resized pixels, so the same image at the same budget has the
 * same key whatever file it came from: plume_image_tokens and plume_image_encode. */
#include <stdlib.h>
#include <string.h>

#include "embd.h"
#include "encode.h"
#include "media/media.h"
#include "model.h"

plume_image_params plume_image_default_params(void) { return (plume_image_params){.max_tokens = 0}; }

/* The plan and resized pixels of img for the model's tower; *rgb malloc'd. */
static int image_prepare(const plume_model *m, const plume_image *img, const plume_image_params *p, media_plan *plan,
                         uint8_t **rgb, char **err) {
    *rgb = NULL;
    if (!m || !img) return plume_fail(err, PLUME_EINVAL, "image: no model or image given");
    if (!m->vision)
        return plume_fail(err, PLUME_EINVAL, "this bundle has no vision tower (converted from a text-only checkpoint)");
    const plume_vision_config *v = &m->c.vis;
    int32_t budget = p && p->max_tokens ? p->max_tokens : v->default_tokens;
    if (img->budget && img->budget != budget)
        return plume_fail(err, PLUME_EINVAL, "image: it was shrunk for a budget of %d tokens, not %d (shrink the decoded "
                          "image for the budget it is encoded at)", img->budget, budget);
    const int32_t w = img->budget ? img->src_w : img->w, h = img->budget ? img->src_h : img->h;
    int rc = media_plan_for(h, w, v->patch, v->pool, budget, plan, err);
    if (!rc && (plan->ph > v->n_pos || plan->pw > v->n_pos)) /* found here, before any encoding: a bad input */
        rc = plume_fail(err, PLUME_EINVAL,
                        "image: %d x %d pixels resize to a grid of %d x %d patches, more than the vision tower's %d "
                        "positions a side (a less elongated image, or a smaller max_tokens, fits)",
                        w, h, plan->pw, plan->ph, v->n_pos);
    if (rc || !img->budget) return rc ? rc : media_plan_pixels(img, plan, rgb, err);
    /* shrunk: its pixels are the resized ones already (plume_image_shrink made them so) */
    const size_t n = (size_t)plan->th * (size_t)plan->tw * 3;
    if (!(*rgb = malloc(n))) return plume_fail(err, PLUME_ENOMEM, "image: out of memory for %d x %d pixels", plan->tw, plan->th);
    memcpy(*rgb, img->rgb, n);
    return 0;
}

/* Shrink img in place to the tower's resized pixels at a budget (plume.h). */
int plume_image_shrink(plume_image *img, const plume_model *m, const plume_image_params *p, char **err) {
    media_plan plan;
    uint8_t *rgb;
    int rc = image_prepare(m, img, p, &plan, &rgb, err); /* checks the budget (a shrunk one's too) and the grid */
    if (rc) return rc;
    if (img->budget || (int64_t)plan.tw * plan.th >= (int64_t)img->w * img->h) { /* shrunk, or no smaller: kept */
        free(rgb);
        return 0;
    }
    free(img->rgb);
    img->rgb = rgb;
    img->src_w = img->w;
    img->src_h = img->h;
    img->w = plan.tw;
    img->h = plan.th;
    img->budget = p && p->max_tokens ? p->max_tokens : m->c.vis.default_tokens;
    return 0;
}

/* The key of resized pixels: SHA-256 of their size and bytes. */
static uint64_t image_key(const media_plan *plan, const uint8_t *rgb) {
    const int32_t size[2] = {plan->th, plan->tw};
    return embd_hash(size, sizeof size, rgb, (size_t)plan->th * (size_t)plan->tw * 3);
}

int plume_image_tokens(const plume_model *m, const plume_image *img, const plume_image_params *p, int32_t *n_tokens,
                       uint64_t *key, char **err) {
    media_plan plan;
    uint8_t *rgb;
    int rc = image_prepare(m, img, p, &plan, &rgb, err);
    if (!rc && n_tokens) *n_tokens = plan.n_tokens;
    if (!rc && key) *key = image_key(&plan, rgb);
    free(rgb);
    return rc;
}

int encode_image_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_image *img,
                     const plume_image_params *p, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "image: no output given");
    *out = NULL;
    media_plan plan;
    uint8_t *rgb;
    int rc = image_prepare(m, img, p, &plan, &rgb, err);
    if (rc) return rc;
    const int32_t per = m->c.vis.patch * m->c.vis.patch * 3;
    float *pix = plume_alloc((size_t)plan.n_patches * (size_t)per * 4);
    int32_t *pos = malloc((size_t)plan.n_patches * 2 * sizeof *pos);
    if (!pix || !pos) rc = plume_fail(err, PLUME_ENOMEM, "image: out of memory for %d patches", plan.n_patches);
    if (!rc) rc = embd_new(out, plan.n_tokens, m->c.D, m->c.media_id[PLUME_MEDIA_IMAGE], image_key(&plan, rgb), err);
    if (!rc) {
        media_patchify(rgb, &plan, m->c.vis.patch, pix, pos);
        rc = enc_vision_encode(m->vision, run, pix, pos, plan.ph, plan.pw, NULL, (*out)->rows, err);
    }
    if (rc) {
        plume_embd_free(*out);
        *out = NULL;
    }
    plume_dealloc(pix);
    free(pos);
    free(rgb);
    return rc;
}

int plume_image_encode(plume_embd **out, plume_model *m, const plume_image *img, const plume_image_params *p,
                       char **err) {
    const enc_run run = {.k = m ? m->k : NULL, .pool = m ? m->pool : NULL};
    return encode_image_run(out, m, &run, img, p, err);
}
