/* video.c -- a video as Gemma 4's processor sees it (HF Gemma4VideoProcessor,
 * shared/spec/gemma4-multimodal.md §8.1): which frames are kept (32 by index, floor(i * N / 32)),
 * their MM:SS timestamps, and each kept frame resized to the 70-token size with torchvision's
 * uint8 bicubic (resize_tv.c). The frames come from decode_video.c or from the caller.
 *
 * A clip of fewer than 32 frames, which HF refuses, keeps all its frames, in order: what a user
 * who sends a 1 s GIF-like clip expects (docs/MEDIA.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "media/media.h"

/* ---- sampling and timestamps ---------------------------------------------------------- */

int32_t media_video_sample(int32_t n_decoded, int32_t *index) {
    if (n_decoded <= 0) return 0;
    if (n_decoded < MEDIA_VIDEO_FRAMES) {
        for (int32_t i = 0; i < n_decoded; i++) index[i] = i;
        return n_decoded;
    }
    /* trunc(arange(0, N, N / 32)): N / 32 and i * N / 32 are exact in binary */
    for (int32_t i = 0; i < MEDIA_VIDEO_FRAMES; i++) index[i] = (int32_t)((int64_t)i * n_decoded / MEDIA_VIDEO_FRAMES);
    return MEDIA_VIDEO_FRAMES;
}

/* Python's float a // b for b > 0 (floatobject.c's float_floor_div: from fmod, then the
 * rounding fix). */
static double py_floordiv(double a, double b) {
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod && ((b < 0) != (mod < 0))) div -= 1.0;
    double fl = floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return div ? fl : copysign(0.0, a / b);
}

void media_video_stamp(int32_t idx, double fps, char out[16]) {
    const double t = (double)((float)idx / (float)fps); /* a float32 tensor, read as a Python float */
    double sec = fmod(t, 60.0);
    if (sec < 0) sec += 60.0;
    const long long mm = (long long)py_floordiv(t, 60.0), ss = (long long)sec;
    snprintf(out, 16, "%02lld:%02lld", mm < 0 ? 0 : mm > 99999 ? 99999 : mm, ss);
}

/* ---- frames ----------------------------------------------------------------------------- */

int media_video_init(media_video *v, int32_t w, int32_t h, int32_t n_decoded, double fps, int keep_full, char **err) {
    memset(v, 0, sizeof *v);
    if (w <= 0 || h <= 0 || w > MEDIA_VIDEO_MAX_SIDE || h > MEDIA_VIDEO_MAX_SIDE || (int64_t)w * h > MEDIA_VIDEO_MAX_PIXELS)
        return plume_fail(err, PLUME_EFORMAT, "video: frames of %d x %d pixels are out of bounds (at most %lld pixels, %d a side)",
                          w, h, (long long)MEDIA_VIDEO_MAX_PIXELS, MEDIA_VIDEO_MAX_SIDE);
    if (n_decoded <= 0) return plume_fail(err, PLUME_EFORMAT, "video: no frames");
    if (n_decoded > MEDIA_VIDEO_MAX_FRAMES)
        return plume_fail(err, PLUME_EFORMAT, "video: %d frames is more than plume decodes (%d)", n_decoded, MEDIA_VIDEO_MAX_FRAMES);
    int rc = media_plan_for(h, w, MEDIA_VIDEO_PATCH, MEDIA_VIDEO_POOL, MEDIA_VIDEO_TOKENS, &v->plan, err);
    if (rc) return rc == PLUME_EINVAL ? PLUME_EFORMAT : rc;
    v->w = w;
    v->h = h;
    v->n_decoded = n_decoded;
    v->fps = fps > 0 && isfinite(fps) ? fps : MEDIA_VIDEO_DEFAULT_FPS;
    v->index = malloc(MEDIA_VIDEO_FRAMES * sizeof *v->index);
    v->stamp = malloc(MEDIA_VIDEO_FRAMES * sizeof *v->stamp);
    if (!v->index || !v->stamp) goto oom;
    v->n = media_video_sample(n_decoded, v->index);
    for (int32_t i = 0; i < v->n; i++) media_video_stamp(v->index[i], v->fps, v->stamp[i]);
    v->rgb = malloc((size_t)v->n * (size_t)v->plan.th * (size_t)v->plan.tw * 3);
    if (!v->rgb) goto oom;
    if (keep_full && !(v->full = malloc((size_t)v->n * (size_t)w * (size_t)h * 3))) goto oom;
    return 0;
oom:
    media_video_free(v);
    return plume_fail(err, PLUME_ENOMEM, "video: out of memory for %d frames", MEDIA_VIDEO_FRAMES);
}

int media_video_put(media_video *v, int32_t k, const uint8_t *rgb, char **err) {
    const size_t frame = (size_t)v->w * (size_t)v->h * 3, small = (size_t)v->plan.th * (size_t)v->plan.tw * 3;
    if (v->full) memcpy(v->full + (size_t)k * frame, rgb, frame);
    return media_resize_tv(rgb, v->w, v->h, v->rgb + (size_t)k * small, v->plan.tw, v->plan.th, err);
}

int media_video_from_frames(media_video *v, const uint8_t *rgb, int32_t n, int32_t w, int32_t h, double fps,
                            int keep_full, char **err) {
    memset(v, 0, sizeof *v);
    if (!rgb) return plume_fail(err, PLUME_EINVAL, "video: no frames given");
    int rc = media_video_init(v, w, h, n, fps, keep_full, err);
    if (rc) return rc == PLUME_EFORMAT ? PLUME_EINVAL : rc;
    const size_t frame = (size_t)w * (size_t)h * 3;
    for (int32_t k = 0; k < v->n && !rc; k++) rc = media_video_put(v, k, rgb + (size_t)v->index[k] * frame, err);
    snprintf(v->format, sizeof v->format, "RGB frames");
    if (rc) media_video_free(v);
    return rc;
}

void media_video_free(media_video *v) {
    if (!v) return;
    free(v->index);
    free(v->stamp);
    free(v->rgb);
    free(v->full);
    if (v->audio) {
        media_audio_free(v->audio);
        free(v->audio);
    }
    memset(v, 0, sizeof *v);
}
