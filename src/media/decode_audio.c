/* decode_audio.c -- the bytes of an audio file -> mono float samples at 16 kHz (media.h), and
 * the public plume_audio_* of plume.h that make, read and free decoded audio (as
 * decode_image.c does for images; encoding either is src/encode_*.c's).
 *
 * libsndfile decodes every container and codec plume takes: WAV (PCM 8/16/24/32, float), FLAC,
 * Ogg Vorbis, Ogg Opus and MP3 (Debian 12's libsndfile 1.2.0 reads MP3 through libmpg123 and
 * Opus through libopus, so no other decoder is linked). It reads the bytes from memory through a
 * virtual file over a bounded cursor. Channels are averaged; libsoxr resamples to 16 kHz block
 * by block as the file decodes, so memory holds the 16 kHz output and one block, whatever the
 * file's rate and channels.
 *
 * Resampling is the one step where plume departs from the reference: Hugging Face's feature
 * extractor takes 16 kHz samples and refuses any other rate, leaving the resampling to the
 * caller. 16 kHz files pass through untouched (int16 / 32768, the golden's waveform).
 *
 * Untrusted bytes: libsndfile parses the containers (it is fuzzed upstream); plume bounds what
 * it allocates by MEDIA_AUDIO_MAX_SECONDS, checked against the header's length before decoding
 * and against the samples decoded while decoding, and refuses what libsndfile lets through
 * quietly: a WAV data or AIFF SSND chunk cut short, an MP3 that ends inside a frame, a stream
 * that ends well before its header's length, NaN and infinite samples. */
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdio.h>
#include <stdlib.h>

#include "media.h"

enum { BLOCK_FRAMES = 4096 }; /* frames decoded (and resampled) at a time */

/* ---- a virtual file over bytes in memory ------------------------------------------------ */

/* A read cursor over data[len]; pos may lie past the end (as lseek allows), reads there get 0. */
typedef struct {
    const uint8_t *data;
    sf_count_t len, pos;
} vfile;

/* libsndfile's length callback. */
static sf_count_t vf_len(void *u) { return ((vfile *)u)->len; }

/* libsndfile's seek callback: -1 for a position before 0 or past what an sf_count_t holds. */
static sf_count_t vf_seek(sf_count_t off, int whence, void *u) {
    vfile *v = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? v->pos : v->len;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return -1;
    if (off > 0 ? off > INT64_MAX - base : off < -base) return -1;
    v->pos = base + off;
    return v->pos;
}

/* libsndfile's read callback: at most n bytes from the cursor. */
static sf_count_t vf_read(void *ptr, sf_count_t n, void *u) {
    vfile *v = u;
    if (n <= 0 || v->pos >= v->len) return 0;
    sf_count_t k = v->len - v->pos < n ? v->len - v->pos : n;
    memcpy(ptr, v->data + v->pos, (size_t)k);
    v->pos += k;
    return k;
}

/* libsndfile's write callback: the file is read-only. */
static sf_count_t vf_write(const void *ptr, sf_count_t n, void *u) {
    (void)ptr, (void)n, (void)u;
    return 0;
}

/* libsndfile's tell callback. */
static sf_count_t vf_tell(void *u) { return ((vfile *)u)->pos; }

/* ---- checks libsndfile does not make ---------------------------------------------------- */

/* Whether a RIFF/WAVE file's data chunk claims more bytes than follow it (*want, *have): a
 * file cut short, which libsndfile reads up to its end without an error. Sizes 0 and
 * 0xFFFFFFFF ("not known yet", written by streaming recorders) pass. Bounded walk over the
 * chunk list; anything odd before the data chunk is left to libsndfile. */
static int wav_cut_short(const uint8_t *p, size_t len, uint64_t *want, uint64_t *have) {
    if (len < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WAVE", 4)) return 0;
    size_t off = 12;
    while (len - off >= 8) {
        uint32_t size = (uint32_t)p[off + 4] | (uint32_t)p[off + 5] << 8 | (uint32_t)p[off + 6] << 16 |
                        (uint32_t)p[off + 7] << 24;
        if (!memcmp(p + off, "data", 4)) {
            *want = size;
            *have = len - off - 8;
            return size != 0 && size != 0xFFFFFFFFu && size > len - off - 8;
        }
        uint64_t step = 8 + (uint64_t)size + (size & 1);
        if (step > len - off) return 0;
        off += (size_t)step;
    }
    return 0;
}

/* Whether an AIFF/AIFC file's SSND chunk claims more bytes than follow it (*want, *have): as
 * for WAV, libsndfile reads such a file up to its end without an error. Chunk sizes are
 * big-endian; a bounded walk over the chunk list, anything odd before SSND left to libsndfile. */
static int aiff_cut_short(const uint8_t *p, size_t len, uint64_t *want, uint64_t *have) {
    if (len < 12 || memcmp(p, "FORM", 4) || (memcmp(p + 8, "AIFF", 4) && memcmp(p + 8, "AIFC", 4))) return 0;
    size_t off = 12;
    while (len - off >= 8) {
        uint32_t size = (uint32_t)p[off + 4] << 24 | (uint32_t)p[off + 5] << 16 | (uint32_t)p[off + 6] << 8 | p[off + 7];
        if (!memcmp(p + off, "SSND", 4)) {
            *want = size;
            *have = len - off - 8;
            return size > len - off - 8;
        }
        uint64_t step = 8 + (uint64_t)size + (size & 1);
        if (step > len - off) return 0;
        off += (size_t)step;
    }
    return 0;
}

/* The length in bytes of the MPEG audio frame whose 4-byte header is h (layers I-III, MPEG 1,
 * 2 and 2.5), or 0 when h is not a frame header plume can size (free-format bit rate, reserved
 * values). */
static size_t mpeg_frame_bytes(uint32_t h) {
    static const uint16_t kbps[2][3][15] = {
        {{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448},   /* MPEG 1, layer I */
         {0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384},      /* layer II */
         {0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320}},      /* layer III */
        {{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256},      /* MPEG 2/2.5, layer I */
         {0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},           /* layers II, III */
         {0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160}}};
    static const uint32_t rate1[3] = {44100, 48000, 32000};
    uint32_t ver = (h >> 19) & 3, layer = (h >> 17) & 3, bi = (h >> 12) & 15, si = (h >> 10) & 3, pad = (h >> 9) & 1;
    if ((h & 0xffe00000u) != 0xffe00000u || ver == 1 || layer == 0 || bi == 0 || bi == 15 || si == 3) return 0;
    uint32_t rate = rate1[si] >> (ver == 3 ? 0 : ver == 2 ? 1 : 2);
    uint32_t bps = kbps[ver == 3 ? 0 : 1][3 - layer][bi] * 1000u;
    if (layer == 3) return (size_t)((12u * bps / rate + pad) * 4u); /* layer I: 4-byte slots */
    return (size_t)((ver == 3 || layer == 2 ? 144u : 72u) * bps / rate + pad);
}

/* Whether an MPEG audio stream ends inside a frame (*want bytes its last frame needs, *have
 * there are): libmpg123 drops such a frame quietly, and when the file has no Xing/Info frame
 * its length is estimated from the bytes there are, so a cut file looks whole. The frames are
 * walked from the first (after an ID3v2 tag) while their headers are frames; a walk that meets
 * anything else (an ID3v1 or APE tag, junk) stops there without a verdict. */
static int mpeg_cut_short(const uint8_t *p, size_t len, uint64_t *want, uint64_t *have) {
    size_t off = 0;
    if (len >= 10 && !memcmp(p, "ID3", 3)) {
        off = 10 + ((size_t)(p[6] & 0x7f) << 21 | (size_t)(p[7] & 0x7f) << 14 | (size_t)(p[8] & 0x7f) << 7 | (p[9] & 0x7f));
        if (p[5] & 0x10) off += 10; /* a footer */
    }
    while (off < len && len - off >= 4) {
        uint32_t h = (uint32_t)p[off] << 24 | (uint32_t)p[off + 1] << 16 | (uint32_t)p[off + 2] << 8 | p[off + 3];
        size_t n = mpeg_frame_bytes(h);
        if (!n) return 0;
        if (n > len - off) {
            *want = off + n;
            *have = len;
            return 1;
        }
        off += n;
    }
    return 0;
}

/* "WAV Signed 16 bit PCM", "Ogg Opus", "MP3": a libsndfile format's container and codec, into
 * out[cap]. */
static void format_name(int format, char *out, size_t cap) {
    static const struct { int major; const char *name; } majors[] = {
        {SF_FORMAT_WAV, "WAV"}, {SF_FORMAT_WAVEX, "WAV"}, {SF_FORMAT_RF64, "RF64"}, {SF_FORMAT_FLAC, "FLAC"},
        {SF_FORMAT_OGG, "Ogg"}, {SF_FORMAT_MPEG, "MP3"}, {SF_FORMAT_AIFF, "AIFF"}, {SF_FORMAT_CAF, "CAF"},
        {SF_FORMAT_W64, "W64"}, {SF_FORMAT_AU, "AU"}};
    const char *a = "audio";
    for (size_t i = 0; i < sizeof majors / sizeof *majors; i++)
        if ((format & SF_FORMAT_TYPEMASK) == majors[i].major) a = majors[i].name;
    SF_FORMAT_INFO sub = {.format = format & SF_FORMAT_SUBMASK};
    const char *b = sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub) == 0 && sub.name ? sub.name : "";
    if ((format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG || (format & SF_FORMAT_TYPEMASK) == SF_FORMAT_FLAC) b = "";
    snprintf(out, cap, "%s%s%s", a, *b ? " " : "", b);
}

/* ---- the output buffer ------------------------------------------------------------------ */

/* Samples at 16 kHz, grown by doubling up to the cap. */
typedef struct {
    float *pcm;
    int64_t n, cap;
} pcm_buf;

/* Room for `more` samples past n; PLUME_EFORMAT past the duration cap, PLUME_ENOMEM. */
static int pcm_reserve(pcm_buf *b, int64_t more, const char *name, char **err) {
    const int64_t limit = (int64_t)MEDIA_AUDIO_MAX_SECONDS * MEDIA_AUDIO_RATE + MEDIA_AUDIO_RATE;
    if (b->n + more <= b->cap) return 0;
    if (b->n + more > limit)
        return plume_fail(err, PLUME_EFORMAT, "%s: audio longer than %d s; plume takes at most %d s (split the file)",
                          name, MEDIA_AUDIO_MAX_SECONDS, MEDIA_AUDIO_MAX_SECONDS);
    int64_t cap = b->cap ? b->cap : MEDIA_AUDIO_RATE;
    while (cap < b->n + more) cap *= 2;
    if (cap > limit) cap = limit;
    float *p = realloc(b->pcm, (size_t)cap * sizeof(float));
    if (!p) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory for %lld samples", name, (long long)cap);
    b->pcm = p;
    b->cap = cap;
    return 0;
}

/* Append n samples, through the resampler when there is one (in NULL: flush it). */
static int pcm_push(pcm_buf *b, soxr_t rs, double ratio, const float *in, size_t n, const char *name, char **err) {
    if (!rs) {
        int rc = pcm_reserve(b, (int64_t)n, name, err);
        if (rc) return rc;
        memcpy(b->pcm + b->n, in, n * sizeof(float));
        b->n += (int64_t)n;
        return 0;
    }
    for (;;) {
        /* each pass has room for all the input's output (and the flush's, 1024 at a time) */
        size_t room = (size_t)ceil((double)n * ratio) + 1024, idone = 0, odone = 0;
        int rc = pcm_reserve(b, (int64_t)room, name, err);
        if (rc) return rc;
        soxr_error_t e = soxr_process(rs, in, in ? n : 0, &idone, b->pcm + b->n, room, &odone);
        if (e) return plume_fail(err, PLUME_EFORMAT, "%s: resampling failed (libsoxr: %s)", name, e);
        b->n += (int64_t)odone;
        if (in) {
            in += idone;
            n -= idone;
            if (!n) return 0;
        } else if (!odone) {
            return 0;
        }
    }
}

/* ---- the header ------------------------------------------------------------------------- */

/* Check what the header says before anything is decoded: rate, channels, length. */
static int check_header(const SF_INFO *info, const uint8_t *data, size_t len, const char *name, char **err) {
    if (info->samplerate < MEDIA_AUDIO_MIN_RATE || info->samplerate > MEDIA_AUDIO_MAX_RATE)
        return plume_fail(err, PLUME_EFORMAT, "%s: sample rate %d Hz; plume takes %d to %d Hz", name, info->samplerate,
                          MEDIA_AUDIO_MIN_RATE, MEDIA_AUDIO_MAX_RATE);
    if (info->channels < 1) return plume_fail(err, PLUME_EFORMAT, "%s: %d channels", name, info->channels);
    if (info->frames > 0 && info->frames != SF_COUNT_MAX &&
        (double)info->frames / info->samplerate > MEDIA_AUDIO_MAX_SECONDS)
        return plume_fail(err, PLUME_EFORMAT, "%s: audio is %.1f s long; plume takes at most %d s (split the file)", name,
                          (double)info->frames / info->samplerate, MEDIA_AUDIO_MAX_SECONDS);
    uint64_t want = 0, have = 0;
    if (wav_cut_short(data, len, &want, &have))
        return plume_fail(err, PLUME_EFORMAT, "%s: truncated WAV: its data chunk holds %llu of the %llu bytes it declares", name,
                          (unsigned long long)have, (unsigned long long)want);
    if (aiff_cut_short(data, len, &want, &have))
        return plume_fail(err, PLUME_EFORMAT, "%s: truncated AIFF: its SSND chunk holds %llu of the %llu bytes it declares",
                          name, (unsigned long long)have, (unsigned long long)want);
    if ((info->format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG && mpeg_cut_short(data, len, &want, &have))
        return plume_fail(err, PLUME_EFORMAT, "%s: truncated MP3: the file ends at byte %llu, inside a frame that needs %llu",
                          name, (unsigned long long)have, (unsigned long long)want);
    return 0;
}

/* ---- the decode's peak ------------------------------------------------------------------ */

enum { RESAMPLER_BYTES = 8 << 20, /* libsoxr's HQ filter tables and buffers: a generous bound */
       CODEC_BYTES = 1 << 20 };    /* libsndfile's and its codec's own state (FLAC, Vorbis, mpg123) */

/* Whether the header's length is one the decode holds to: known, and not an estimate (an MP3's
 * is made from its first frames; a stream longer than an exact length is refused). */
static int length_exact(const SF_INFO *info) {
    return info->frames > 0 && info->frames != SF_COUNT_MAX && (info->format & SF_FORMAT_TYPEMASK) != SF_FORMAT_MPEG;
}

/* The most frames decode_frames takes from a file with this header: its exact length, or the
 * duration cap. */
static int64_t frames_bound(const SF_INFO *info) {
    const int64_t cap = (int64_t)MEDIA_AUDIO_MAX_SECONDS * info->samplerate;
    return length_exact(info) && info->frames < cap ? (int64_t)info->frames : cap;
}

/* The most bytes decoding a file with this header (checked) holds at once: the 16 kHz output
 * as it grows by doubling (a realloc holds the old and the new buffer), one block of frames and
 * its mono mix, the resampler when the rate is not 16 kHz, the codec's state. */
static uint64_t decode_peak(const SF_INFO *info) {
    const int64_t limit = (int64_t)MEDIA_AUDIO_MAX_SECONDS * MEDIA_AUDIO_RATE + MEDIA_AUDIO_RATE;
    const int rs = info->samplerate != MEDIA_AUDIO_RATE;
    /* every push reserves room for its block's output and 1024 more (the flush too) */
    int64_t out = (int64_t)ceil((double)frames_bound(info) * MEDIA_AUDIO_RATE / info->samplerate) + 2 * 1024 +
                  (rs ? (int64_t)ceil((double)BLOCK_FRAMES * MEDIA_AUDIO_RATE / info->samplerate) : BLOCK_FRAMES);
    int64_t cap = MEDIA_AUDIO_RATE, prev = 0;
    while (cap < out && cap < limit) {
        prev = cap;
        cap = cap * 2 < limit ? cap * 2 : limit;
    }
    return (uint64_t)(cap + prev) * sizeof(float) + (uint64_t)BLOCK_FRAMES * ((uint64_t)info->channels + 1) * sizeof(float) +
           (rs ? RESAMPLER_BYTES : 0) + CODEC_BYTES;
}

/* ---- decoding --------------------------------------------------------------------------- */

/* Decode every frame of sf into b: blocks mixed down to mono, checked, resampled. */
static int decode_frames(SNDFILE *sf, const SF_INFO *info, pcm_buf *b, int64_t *frames, const char *name, char **err) {
    const int32_t ch = info->channels;
    const double ratio = (double)MEDIA_AUDIO_RATE / info->samplerate;
    const int64_t max_frames = frames_bound(info); /* below the cap: the header's exact length */
    const int64_t cap = (int64_t)MEDIA_AUDIO_MAX_SECONDS * info->samplerate;
    float *block = malloc((size_t)BLOCK_FRAMES * (size_t)ch * sizeof(float));
    float *mono = malloc(BLOCK_FRAMES * sizeof(float));
    soxr_t rs = NULL;
    int rc = 0;
    if (!block || !mono) {
        rc = plume_fail(err, PLUME_ENOMEM, "%s: out of memory", name);
        goto done;
    }
    if (info->samplerate != MEDIA_AUDIO_RATE) {
        /* one thread: libsoxr's OpenMP workers would compete with plume's own */
        soxr_error_t e = NULL;
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        soxr_runtime_spec_t r = soxr_runtime_spec(1);
        rs = soxr_create(info->samplerate, MEDIA_AUDIO_RATE, 1, &e, NULL, &q, &r);
        if (!rs || e) {
            rc = plume_fail(err, PLUME_EFORMAT, "%s: cannot resample %d Hz to %d Hz (libsoxr: %s)", name, info->samplerate,
                            MEDIA_AUDIO_RATE, e ? e : "?");
            goto done;
        }
    }
    *frames = 0;
    for (;;) {
        sf_count_t k = sf_readf_float(sf, block, BLOCK_FRAMES);
        if (k <= 0) break;
        if (*frames + k > max_frames) {
            if (max_frames < cap)
                rc = plume_fail(err, PLUME_EFORMAT, "%s: corrupt: the stream holds more than the %lld frames its header "
                                "declares", name, (long long)info->frames);
            else
                rc = plume_fail(err, PLUME_EFORMAT, "%s: audio longer than %d s; plume takes at most %d s (split the file)",
                                name, MEDIA_AUDIO_MAX_SECONDS, MEDIA_AUDIO_MAX_SECONDS);
            goto done;
        }
        for (sf_count_t i = 0; i < k; i++) {
            float s = 0.0f;
            for (int32_t c = 0; c < ch; c++) s += block[i * ch + c];
            s = ch == 1 ? s : s / (float)ch;
            if (!isfinite(s)) {
                rc = plume_fail(err, PLUME_EFORMAT, "%s: sample %lld is not a finite number", name,
                                (long long)(*frames + i));
                goto done;
            }
            /* a float file's samples are nominally within +-1; one of 1e38 is a corrupt file,
             * and would overflow the resampler's sums to infinities (fuzz_audio) */
            if (fabsf(s) > (float)MEDIA_AUDIO_MAX_AMPLITUDE) {
                rc = plume_fail(err, PLUME_EFORMAT, "%s: sample %lld is %g, beyond the +-%d a sound's samples can be "
                                "(full scale is 1): a corrupt file?", name, (long long)(*frames + i), (double)s,
                                MEDIA_AUDIO_MAX_AMPLITUDE);
                goto done;
            }
            mono[i] = s;
        }
        *frames += k;
        if ((rc = pcm_push(b, rs, ratio, mono, (size_t)k, name, err))) goto done;
    }
    if (sf_error(sf)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: corrupt audio after %lld frames (libsndfile: %s)", name, (long long)*frames,
                        sf_strerror(sf));
        goto done;
    }
    if (rs) rc = pcm_push(b, rs, ratio, NULL, 0, name, err);
done:
    soxr_delete(rs);
    free(block);
    free(mono);
    return rc;
}

/* Open data[len] with libsndfile through v (which must outlive the handle), its header
 * checked; NULL (PLUME_EFORMAT in *err) when it is not audio plume reads. */
static SNDFILE *open_memory(vfile *v, const uint8_t *data, size_t len, SF_INFO *info, const char *name, char **err) {
    if (!data || !len) return plume_fail(err, PLUME_EFORMAT, "%s: empty file, not audio", name), NULL;
    if (len > (size_t)INT64_MAX) return plume_fail(err, PLUME_EFORMAT, "%s: file too large", name), NULL;
    *v = (vfile){data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO io = {vf_len, vf_seek, vf_read, vf_write, vf_tell}; /* libsndfile keeps a copy */
    memset(info, 0, sizeof *info);
    SNDFILE *sf = sf_open_virtual(&io, SFM_READ, info, v);
    if (!sf) {
        plume_fail(err, PLUME_EFORMAT, "%s: not an audio file plume can read (libsndfile: %s)", name, sf_strerror(NULL));
        return NULL;
    }
    if (check_header(info, data, len, name, err)) {
        sf_close(sf);
        return NULL;
    }
    return sf;
}

int media_audio_decode(media_audio *a, const uint8_t *data, size_t len, const char *name, char **err) {
    memset(a, 0, sizeof *a);
    vfile v;
    SF_INFO info;
    SNDFILE *sf = open_memory(&v, data, len, &info, name, err);
    if (!sf) return PLUME_EFORMAT;
    pcm_buf b = {0};
    int64_t frames = 0;
    int rc = decode_frames(sf, &info, &b, &frames, name, err);
    /* a stream that ends well before its header's length was cut short (MP3 lengths are
     * estimates: a percent and two MPEG frames of slack) */
    if (!rc && info.frames > 0 && info.frames != SF_COUNT_MAX && frames < info.frames &&
        info.frames - frames > info.frames / 100 + 2304)
        rc = plume_fail(err, PLUME_EFORMAT, "%s: truncated or corrupt: decoded %lld of the %lld frames its header declares",
                        name, (long long)frames, (long long)info.frames);
    if (!rc && b.n == 0) rc = plume_fail(err, PLUME_EFORMAT, "%s: no audio samples", name);
    sf_close(sf);
    if (rc) {
        free(b.pcm);
        return rc;
    }
    float *fit = b.n < b.cap ? realloc(b.pcm, (size_t)b.n * sizeof(float)) : NULL; /* hold the samples, not the cap */
    a->pcm = fit ? fit : b.pcm;
    a->n = b.n;
    a->src_rate = info.samplerate;
    a->src_channels = info.channels;
    format_name(info.format, a->format, sizeof a->format);
    return 0;
}

int media_audio_peak(const uint8_t *data, size_t len, uint64_t *peak, const char *name, char **err) {
    *peak = 0;
    vfile v;
    SF_INFO info;
    SNDFILE *sf = open_memory(&v, data, len, &info, name, err);
    if (!sf) return PLUME_EFORMAT;
    sf_close(sf);
    *peak = decode_peak(&info);
    return 0;
}

int media_audio_load(media_audio *a, const char *path, char **err) {
    plume_map m;
    memset(a, 0, sizeof *a);
    int rc = plume_map_open(&m, path, err);
    if (rc) return rc;
    rc = media_audio_decode(a, m.data, m.size, path, err);
    plume_map_free(&m);
    return rc;
}

int media_audio_from_pcm(media_audio *a, const float *x, int64_t n, int32_t rate, char **err) {
    memset(a, 0, sizeof *a);
    if (rate < MEDIA_AUDIO_MIN_RATE || rate > MEDIA_AUDIO_MAX_RATE)
        return plume_fail(err, PLUME_EINVAL, "audio: sample rate %d Hz; plume takes %d to %d Hz", rate, MEDIA_AUDIO_MIN_RATE,
                          MEDIA_AUDIO_MAX_RATE);
    if (!x || n < 1) return plume_fail(err, PLUME_EINVAL, "audio: no samples");
    if ((double)n / rate > MEDIA_AUDIO_MAX_SECONDS)
        return plume_fail(err, PLUME_EINVAL, "audio: %.1f s long; plume takes at most %d s", (double)n / rate,
                          MEDIA_AUDIO_MAX_SECONDS);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return plume_fail(err, PLUME_EINVAL, "audio: sample %lld is not a finite number", (long long)i);
    pcm_buf b = {0};
    soxr_t rs = NULL;
    int rc = 0;
    if (rate != MEDIA_AUDIO_RATE) {
        soxr_error_t e = NULL;
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        soxr_runtime_spec_t r = soxr_runtime_spec(1);
        rs = soxr_create(rate, MEDIA_AUDIO_RATE, 1, &e, NULL, &q, &r);
        if (!rs || e) rc = plume_fail(err, PLUME_ENOMEM, "audio: cannot resample %d Hz (libsoxr: %s)", rate, e ? e : "?");
    }
    const double ratio = (double)MEDIA_AUDIO_RATE / rate;
    for (int64_t i = 0; !rc && i < n; i += BLOCK_FRAMES) /* in blocks, as a file decodes */
        rc = pcm_push(&b, rs, ratio, x + i, (size_t)(n - i < BLOCK_FRAMES ? n - i : BLOCK_FRAMES), "audio", err);
    if (!rc && rs) rc = pcm_push(&b, rs, ratio, NULL, 0, "audio", err);
    soxr_delete(rs);
    if (!rc && b.n == 0) rc = plume_fail(err, PLUME_EINVAL, "audio: no samples after resampling");
    if (rc) {
        free(b.pcm);
        return rc;
    }
    float *fit = b.n < b.cap ? realloc(b.pcm, (size_t)b.n * sizeof(float)) : NULL; /* hold the samples, not the cap */
    a->pcm = fit ? fit : b.pcm;
    a->n = b.n;
    a->src_rate = rate;
    a->src_channels = 1;
    snprintf(a->format, sizeof a->format, "float samples");
    return 0;
}

void media_audio_free(media_audio *a) {
    if (!a) return;
    free(a->pcm);
    memset(a, 0, sizeof *a);
}

/* ---- decoded audio ------------------------------------------------------------------------ */

/* A new, empty plume_audio into *a (*out cleared). */
static int audio_new(plume_audio **out, plume_audio **a, char **err) {
    *out = NULL;
    *a = calloc(1, sizeof **a);
    return *a ? 0 : plume_fail(err, PLUME_ENOMEM, "audio: out of memory");
}

/* Hand a over (rc 0) or free it. */
static int audio_done(plume_audio **out, plume_audio *a, int rc) {
    if (rc) free(a);
    else *out = a;
    return rc;
}

int plume_audio_load(plume_audio **out, const char *path, char **err) {
    plume_audio *a;
    int rc = out && path ? audio_new(out, &a, err) : plume_fail(err, PLUME_EINVAL, "audio: no file or output given");
    return rc ? rc : audio_done(out, a, media_audio_load(a, path, err));
}

int plume_audio_decode(plume_audio **out, const void *bytes, size_t len, char **err) {
    plume_audio *a;
    int rc = out ? audio_new(out, &a, err) : plume_fail(err, PLUME_EINVAL, "audio: no output given");
    return rc ? rc : audio_done(out, a, media_audio_decode(a, bytes, len, "audio", err));
}

int plume_audio_decode_peak(const void *bytes, size_t len, uint64_t *peak, char **err) {
    if (!peak) return plume_fail(err, PLUME_EINVAL, "audio: no output given");
    return media_audio_peak(bytes, len, peak, "audio", err);
}

int plume_audio_from_pcm(plume_audio **out, const float *samples, int64_t n, int32_t rate, char **err) {
    plume_audio *a;
    int rc = out ? audio_new(out, &a, err) : plume_fail(err, PLUME_EINVAL, "audio: no output given");
    return rc ? rc : audio_done(out, a, media_audio_from_pcm(a, samples, n, rate, err));
}

void plume_audio_free(plume_audio *a) {
    if (!a) return;
    media_audio_free(a);
    free(a);
}

int64_t plume_audio_n_samples(const plume_audio *a) { return a->n; }
double plume_audio_seconds(const plume_audio *a) { return (double)a->n / MEDIA_AUDIO_RATE; }
const float *plume_audio_samples(const plume_audio *a) { return a->pcm; }

/* ---- clips ----------------------------------------------------------------------------- */

int32_t media_audio_clips(int64_t n) {
    return n <= 0 ? 0 : (int32_t)((n + MEDIA_AUDIO_CLIP - 1) / MEDIA_AUDIO_CLIP);
}
