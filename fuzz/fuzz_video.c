/* fuzz_video.c -- media_video_decode on arbitrary bytes (the buffer is exactly the input, so a
 * read past it is seen): FFmpeg's MP4/Matroska demuxers and video decoders behind plume's
 * memory reader, the pixel, duration and frame caps, the truncation checks, the RGB conversion,
 * the rotation, the sampling and the resize. An accepted video must hold 1..32 sampled frames
 * in increasing order, a 70-token plan and a timestamp per frame; a refusal is PLUME_EFORMAT
 * with a message. */
#include "fuzz.h"
#include "media/media.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Decode (the sound track too, one decoder thread); check what came out. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    media_video v;
    char *err = NULL;
    const media_video_opts o = {.audio = 1, .keep_full = 0, .n_threads = 1};
    int rc = media_video_decode(&v, buf, size, "x.video", &o, &err);
    fuzz_note(err);
    if (rc == 0) {
        if (v.n < 1 || v.n > MEDIA_VIDEO_FRAMES || v.n > v.n_decoded || !v.rgb || v.plan.n_tokens < 1 ||
            v.plan.n_tokens > MEDIA_VIDEO_TOKENS || v.w < 1 || v.h < 1)
            abort();
        for (int32_t i = 0; i < v.n; i++)
            if (v.index[i] < 0 || v.index[i] >= v.n_decoded || (i && v.index[i] <= v.index[i - 1]) || v.stamp[i][2] != ':')
                abort();
        if (v.audio && (v.audio->n < 1 || !v.audio->pcm)) abort();
        media_video_free(&v);
    } else if (!err || (rc != PLUME_EFORMAT && rc != PLUME_ENOMEM)) {
        abort();
    }
    free(err);
    free(buf);
    return 0;
}
