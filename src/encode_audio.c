/* encode_audio.c -- the audio half of the glue (encode.h): decoded audio (media/decode_audio.c)
 * -> log-mel frames of each 30 s clip (media/mel.c) -> encoders/tower_audio.c (frames -> soft
 * tokens -> decoder rows), into a plume_embd (embd.h) whose key is the hash of the 16 kHz
 * samples, so the same sound has the same key whatever file it came from: plume_audio_tokens
 * and plume_audio_encode.
 *
 * Clips: the model hears at most 30 s at a time (HF's extractor truncates there). Longer audio
 * is cut into consecutive 30 s clips, each through the whole front end and tower alone (its
 * own padding, mask and attention), and their rows follow each other in the one run; a last
 * clip under 10 ms (no whole mel frame) gives no token and is dropped. */
#include <stdlib.h>

#include "embd.h"
#include "encode.h"
#include "media/media.h"
#include "model.h"

/* ---- tokens and encoding ------------------------------------------------------------------- */

/* Clip c of a: its first sample and length. */
static void clip_span(const plume_audio *a, int32_t c, int64_t *at, int64_t *len) {
    *at = (int64_t)c * MEDIA_AUDIO_CLIP;
    *len = a->n - *at < MEDIA_AUDIO_CLIP ? a->n - *at : MEDIA_AUDIO_CLIP;
}

/* The soft tokens of a, summed over its clips; PLUME_EINVAL when m has no tower or a gives none. */
static int audio_count(const plume_model *m, const plume_audio *a, int32_t *n, char **err) {
    *n = 0;
    if (!m || !a) return plume_fail(err, PLUME_EINVAL, "audio: no model or audio given");
    if (!m->audio)
        return plume_fail(err, PLUME_EINVAL, "this bundle has no audio tower (converted from a checkpoint without one)");
    for (int32_t c = 0; c < media_audio_clips(a->n); c++) {
        int64_t at, len;
        clip_span(a, c, &at, &len);
        *n += enc_audio_tokens(media_mel_frames_valid(len));
    }
    if (!*n)
        return plume_fail(err, PLUME_EINVAL, "audio: %lld samples (%.1f ms) is too short for one token (10 ms)", (long long)a->n,
                          1000.0 * (double)a->n / MEDIA_AUDIO_RATE);
    return 0;
}

/* The key of audio: SHA-256 of its length and samples. */
static uint64_t audio_key(const plume_audio *a) {
    const int64_t n = a->n;
    return embd_hash(&n, sizeof n, a->pcm, (size_t)a->n * sizeof(float));
}

int plume_audio_tokens(const plume_model *m, const plume_audio *a, int32_t *n_tokens, uint64_t *key, char **err) {
    int32_t n;
    int rc = audio_count(m, a, &n, err);
    if (!rc && n_tokens) *n_tokens = n;
    if (!rc && key) *key = audio_key(a);
    return rc;
}

int encode_audio_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_audio *a, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "audio: no output given");
    *out = NULL;
    int32_t n;
    int rc = audio_count(m, a, &n, err);
    if (rc) return rc;
    const enc_audio *t = m->audio;
    float *soft = plume_alloc((size_t)enc_audio_tokens(media_mel_frames_valid(MEDIA_AUDIO_CLIP)) * t->c.out_dims * sizeof(float));
    if (!soft) return plume_fail(err, PLUME_ENOMEM, "audio: out of memory");
    rc = embd_new(out, n, m->c.D, m->c.media_id[PLUME_MEDIA_AUDIO], audio_key(a), err);
    for (int32_t c = 0, row = 0; !rc && c < media_audio_clips(a->n); c++) {
        int64_t at, len;
        clip_span(a, c, &at, &len);
        const int32_t k = enc_audio_tokens(media_mel_frames_valid(len));
        if (!k) continue; /* a tail under 10 ms */
        if ((rc = enc_aborted(run, err))) break;
        media_mel mel;
        rc = media_mel_compute(&mel, a->pcm + at, len, err);
        if (!rc) rc = enc_audio_tower(t, run, mel.feat, mel.n_valid, soft, err);
        if (!rc) rc = enc_audio_embed(t, run, soft, k, (*out)->rows + (size_t)row * m->c.D, err);
        media_mel_free(&mel);
        row += k;
    }
    plume_dealloc(soft);
    if (rc) {
        plume_embd_free(*out);
        *out = NULL;
    }
    return rc;
}

int plume_audio_encode(plume_embd **out, plume_model *m, const plume_audio *a, char **err) {
    const enc_run run = {.k = m ? m->k : NULL, .pool = m ? m->pool : NULL};
    return encode_audio_run(out, m, &run, a, err);
}
