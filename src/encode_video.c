/* encode_video.c -- the video half of the glue (encode.h), and the public video API over the rooms (plume.h, "Video in"): media/ decodes, samples
 * and resizes (decode_video.c, video.c, resize_tv.c), encoders/vision.c runs each sampled frame
 * through the vision tower as an image of its own, into one plume_embd whose rows are the frames'
 * soft tokens in order and whose expansion run is Hugging Face's prompt text for the video:
 * per frame "MM:SS " <|image> n x <|video|> <image|>, the frames joined by one space
 * (processing_gemma4's replacement; shared/spec/gemma4-multimodal.md §8.1 step 8). Its key is
 * the hash of the resized frames and their timestamps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embd.h"
#include "encode.h"
#include "media/media.h"
#include "model.h"

/* ---- decoding ------------------------------------------------------------------------- */

plume_video_params plume_video_default_params(void) {
    return (plume_video_params){.audio = 0, .n_threads = 0, .abort = NULL, .abort_ctx = NULL};
}

/* A new zeroed plume_video into *out (freed by video_done on failure). */
static int video_new(plume_video **out, plume_video **v, char **err) {
    *out = NULL;
    *v = calloc(1, sizeof **v);
    return *v ? 0 : plume_fail(err, PLUME_ENOMEM, "video: out of memory");
}

/* Hand v to *out when rc is 0, else free it. */
static int video_done(plume_video **out, plume_video *v, int rc) {
    if (rc) plume_video_free(v);
    else *out = v;
    return rc;
}

/* The room's decode options from the public parameters (NULL: the defaults). */
static media_video_opts video_opts(const plume_video_params *p) {
    return (media_video_opts){.audio = p ? p->audio : 0, .keep_full = 0, .n_threads = p ? p->n_threads : 0,
                              .abort = p ? p->abort : NULL, .abort_ctx = p ? p->abort_ctx : NULL};
}

int plume_video_size(const void *bytes, size_t len, int32_t *width, int32_t *height, char **err) {
    int32_t w = 0, h = 0;
    int rc = media_video_size(bytes, len, &w, &h, err);
    if (width) *width = rc ? 0 : w;
    if (height) *height = rc ? 0 : h;
    return rc;
}

int plume_video_decode(plume_video **out, const void *bytes, size_t len, const plume_video_params *p, char **err) {
    plume_video *v;
    int rc = out ? video_new(out, &v, err) : plume_fail(err, PLUME_EINVAL, "video: no output given");
    if (rc) return rc;
    const media_video_opts o = video_opts(p);
    return video_done(out, v, media_video_decode(v, bytes, len, "video", &o, err));
}

int plume_video_load(plume_video **out, const char *path, const plume_video_params *p, char **err) {
    plume_video *v;
    int rc = out && path ? video_new(out, &v, err) : plume_fail(err, PLUME_EINVAL, "video: no file or output given");
    if (rc) return rc;
    plume_map m;
    rc = plume_map_open(&m, path, err);
    if (!rc) {
        const media_video_opts o = video_opts(p);
        rc = media_video_decode(v, m.data, m.size, path, &o, err);
        plume_map_free(&m);
    }
    return video_done(out, v, rc);
}

int plume_video_from_frames(plume_video **out, const uint8_t *rgb, int32_t n_frames, int32_t width, int32_t height,
                            double fps, char **err) {
    plume_video *v;
    int rc = out ? video_new(out, &v, err) : plume_fail(err, PLUME_EINVAL, "video: no output given");
    return rc ? rc : video_done(out, v, media_video_from_frames(v, rgb, n_frames, width, height, fps, 0, err));
}

void plume_video_free(plume_video *v) {
    if (!v) return;
    media_video_free(v);
    free(v);
}

int32_t plume_video_n_frames(const plume_video *v) { return v->n; }
int32_t plume_video_n_decoded(const plume_video *v) { return v->n_decoded; }
double plume_video_fps(const plume_video *v) { return v->fps; }
int32_t plume_video_width(const plume_video *v) { return v->w; }
int32_t plume_video_height(const plume_video *v) { return v->h; }
int32_t plume_video_frame_index(const plume_video *v, int32_t i) { return i >= 0 && i < v->n ? v->index[i] : -1; }
const char *plume_video_timestamp(const plume_video *v, int32_t i) { return i >= 0 && i < v->n ? v->stamp[i] : NULL; }
const uint8_t *plume_video_frame_rgb(const plume_video *v, int32_t i, int32_t *width, int32_t *height) {
    if (i < 0 || i >= v->n) return NULL;
    if (width) *width = v->plan.tw;
    if (height) *height = v->plan.th;
    return v->rgb + (size_t)i * (size_t)v->plan.th * (size_t)v->plan.tw * 3;
}
const plume_audio *plume_video_audio(const plume_video *v) { return v->audio; }
const char *plume_video_format(const plume_video *v) { return v->format; }

/* ---- encoding --------------------------------------------------------------------------- */

/* Whether m can take v: a vision tower with the patch and pooling the video was resized for, and
 * the media ids the prompt needs. */
static int video_check(const plume_model *m, const plume_video *v, char **err) {
    if (!m || !v) return plume_fail(err, PLUME_EINVAL, "video: no model or video given");
    if (!m->vision)
        return plume_fail(err, PLUME_EINVAL, "this bundle has no vision tower (converted from a text-only checkpoint)");
    if (m->c.vis.patch != MEDIA_VIDEO_PATCH || m->c.vis.pool != MEDIA_VIDEO_POOL)
        return plume_fail(err, PLUME_EINVAL, "video: the vision tower's patch %d and pooling %d are not Gemma 4's (16, 3)",
                          m->c.vis.patch, m->c.vis.pool);
    if (m->c.media_id[PLUME_MEDIA_VIDEO] < 0 || m->c.media_id[PLUME_MEDIA_BOI] < 0 || m->c.media_id[PLUME_MEDIA_EOI] < 0)
        return plume_fail(err, PLUME_EINVAL, "video: the model's config names no video_token_id (or no boi/eoi ids)");
    return 0;
}

/* The key of v: SHA-256 of the resized frames' size, timestamps and pixels. */
static uint64_t video_key(const plume_video *v) {
    const size_t frame = (size_t)v->plan.th * (size_t)v->plan.tw * 3;
    int32_t *head = malloc(sizeof(int32_t) * 3 + (size_t)v->n * 16);
    if (!head) return embd_hash(v->rgb, frame * (size_t)v->n, NULL, 0);
    head[0] = v->n, head[1] = v->plan.th, head[2] = v->plan.tw;
    memcpy(head + 3, v->stamp, (size_t)v->n * 16);
    const uint64_t k = embd_hash(head, sizeof(int32_t) * 3 + (size_t)v->n * 16, v->rgb, frame * (size_t)v->n);
    free(head);
    return k;
}

int plume_video_tokens(const plume_model *m, const plume_video *v, int32_t *n_tokens, uint64_t *key, char **err) {
    int rc = video_check(m, v, err);
    if (!rc && n_tokens) *n_tokens = v->n * v->plan.n_tokens;
    if (!rc && key) *key = video_key(v);
    return rc;
}

/* Append the ids of text to run[*n] (cap given by the caller's bound). */
static int video_text(const plume_model *m, const char *text, int32_t *run, int32_t *n, int32_t cap, char **err) {
    if (!m->tok) return plume_fail(err, PLUME_EINVAL, "video: the bundle has no tokenizer (a video's timestamps are text)");
    int32_t k = plume_tokenize(m->tok, text, strlen(text), run + *n, cap - *n);
    if (k < 0 || k > cap - *n) return plume_fail(err, PLUME_EINVAL, "video: cannot tokenize the timestamp \"%s\"", text);
    *n += k;
    return 0;
}

/* The most ids of v's prompt run: per frame its tokens, <|image> and <image|>, and at most
 * VIDEO_TEXT_MAX ids for each of "MM:SS " and " " (digits and punctuation, a few each). */
enum { VIDEO_TEXT_MAX = 32 };
static int32_t video_run_cap(const plume_video *v) { return v->n * (v->plan.n_tokens + 2 + 2 * VIDEO_TEXT_MAX); }

/* run[0..*n): per frame the ids of "MM:SS ", <|image>, n_tokens x <|video|>, <image|>, and of " "
 * between frames (the text pieces tokenized alone: special tokens split the text around them);
 * run holds video_run_cap(v) ids. */
static int video_run(const plume_model *m, const plume_video *v, int32_t *run, int32_t *n_out, char **err) {
    int32_t n = 0;
    int rc = 0;
    for (int32_t f = 0; f < v->n && !rc; f++) {
        char text[24];
        if (f) rc = video_text(m, " ", run, &n, n + VIDEO_TEXT_MAX, err);
        snprintf(text, sizeof text, "%s ", v->stamp[f]);
        if (!rc) rc = video_text(m, text, run, &n, n + VIDEO_TEXT_MAX, err);
        if (rc) break;
        run[n++] = m->c.media_id[PLUME_MEDIA_BOI];
        for (int32_t t = 0; t < v->plan.n_tokens; t++) run[n++] = m->c.media_id[PLUME_MEDIA_VIDEO];
        run[n++] = m->c.media_id[PLUME_MEDIA_EOI];
    }
    *n_out = n;
    return rc;
}

/* e->run: v's prompt run (video_run). */
static int video_embd_run(const plume_model *m, const plume_video *v, plume_embd *e, char **err) {
    e->run = malloc((size_t)video_run_cap(v) * sizeof *e->run);
    if (!e->run) return plume_fail(err, PLUME_ENOMEM, "video: out of memory");
    return video_run(m, v, e->run, &e->n_run, err);
}

int32_t plume_video_prompt(const plume_model *m, const plume_video *v, int32_t *out, int32_t cap, char **err) {
    int rc = video_check(m, v, err);
    if (rc) return rc;
    if (cap < 0 || (cap && !out)) return plume_fail(err, PLUME_EINVAL, "video: a bad output buffer");
    int32_t *run = malloc((size_t)video_run_cap(v) * sizeof *run), n = 0;
    if (!run) return plume_fail(err, PLUME_ENOMEM, "video: out of memory");
    rc = video_run(m, v, run, &n, err);
    if (!rc && cap) memcpy(out, run, (size_t)(n < cap ? n : cap) * sizeof *run);
    free(run);
    return rc ? rc : n;
}

int encode_video_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_video *v, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "video: no output given");
    *out = NULL;
    int rc = video_check(m, v, err);
    if (rc) return rc;
    const media_plan *plan = &v->plan;
    const int32_t per = MEDIA_VIDEO_PATCH * MEDIA_VIDEO_PATCH * 3;
    const size_t frame = (size_t)plan->th * (size_t)plan->tw * 3;
    float *pix = plume_alloc((size_t)plan->n_patches * (size_t)per * 4);
    int32_t *pos = malloc((size_t)plan->n_patches * 2 * sizeof *pos);
    if (!pix || !pos) rc = plume_fail(err, PLUME_ENOMEM, "video: out of memory for %d patches", plan->n_patches);
    if (!rc) rc = embd_new(out, v->n * plan->n_tokens, m->c.D, m->c.media_id[PLUME_MEDIA_VIDEO], video_key(v), err);
    if (!rc) rc = video_embd_run(m, v, *out, err);
    for (int32_t f = 0; f < v->n && !rc; f++) { /* each frame its own image (no temporal mixing) */
        rc = enc_aborted(run, err);
        if (rc) break;
        media_patchify(v->rgb + (size_t)f * frame, plan, MEDIA_VIDEO_PATCH, pix, pos);
        float *rows = (*out)->rows + (size_t)f * (size_t)plan->n_tokens * (size_t)m->c.D;
        rc = enc_vision_encode(m->vision, run, pix, pos, plan->ph, plan->pw, NULL, rows, err);
    }
    if (rc) {
        plume_embd_free(*out);
        *out = NULL;
    }
    plume_dealloc(pix);
    free(pos);
    return rc;
}

int plume_video_encode(plume_embd **out, plume_model *m, const plume_video *v, char **err) {
    const enc_run run = {.k = m ? m->k : NULL, .pool = m ? m->pool : NULL};
    return encode_video_run(out, m, &run, v, err);
}
