/* fuzz_audio.c -- media_audio_decode on arbitrary bytes (the buffer is exactly the input, so
 * a read past it is seen): libsndfile's containers and codecs behind plume's virtual file,
 * mixdown, resampling and plume's own checks. Accepted audio must hold 1 to the cap's samples,
 * all finite; the log-mel features of its first clip (at most 2 s of it, to keep executions
 * fast) are computed and must be finite. */
#include <math.h>

#include "fuzz.h"
#include "media/media.h"

/* LeakSanitizer: libsndfile 1.2.0 leaves libvorbis's vorbis_info behind when an Ogg Vorbis file
 * fails to open (tests/test_media.c says more); not plume's allocation. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:vorbis_info_init\n"; }

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Decode; check what came out; features of the start. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    media_audio a;
    char *err = NULL;
    int rc = media_audio_decode(&a, buf, size, "x.audio", &err);
    fuzz_note(err);
    if (rc == 0) {
        if (a.n < 1 || a.n > (int64_t)(MEDIA_AUDIO_MAX_SECONDS + 1) * MEDIA_AUDIO_RATE || !a.pcm || !a.format[0]) abort();
        for (int64_t i = 0; i < a.n; i++)
            if (!isfinite(a.pcm[i])) abort();
        media_mel m;
        int64_t n = a.n < 2 * MEDIA_AUDIO_RATE ? a.n : 2 * MEDIA_AUDIO_RATE;
        if (media_mel_compute(&m, a.pcm, n, NULL) != 0 || m.n_valid > m.T) abort();
        for (int64_t i = 0; i < (int64_t)m.T * MEDIA_MEL_BINS; i++)
            if (!isfinite(m.feat[i])) abort();
        media_mel_free(&m);
    } else if (!err || rc != PLUME_EFORMAT) {
        abort();
    }
    media_audio_free(&a);
    free(err);
    free(buf);
    return 0;
}
