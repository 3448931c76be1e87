/* test_media_audio.c -- the media room's audio half (src/media/): decoding every format plume takes
 * (test files written here with libsndfile, so no tool is needed at run time), mixing down,
 * resampling to 16 kHz, bad audio refused with a message, the FFT against a plain DFT, and the
 * log-mel features and mask against the golden ones of tiny-mm-a (HF's feature extractor). */
#include <math.h>
#include <sndfile.h>
#include <unistd.h>

#include "media/media.h"
#include "npy.h"
#include "t.h"

/* LeakSanitizer (make test SAN=1): libsndfile 1.2.0 (Debian 12) leaves libvorbis's vorbis_info
 * (about 6 KB) behind when an Ogg Vorbis file fails to open, as test_refuse_truncated's cut
 * Ogg does; the allocation is libsndfile's, out of plume's reach. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:vorbis_info_init\n"; }

/* Features against the float64 oracle: the float32 window product and float32 output leave
 * ~1e-7; the acceptance bound of the golden README is 1e-4. */
static const double FEAT_REL_RMS = 1e-4;

/* ---- helpers ---------------------------------------------------------------------------- */

/* A test file under a fresh directory: dir/name, malloc'd. */
static char *tmp_path(const char *dir, const char *name) { return plume_path_join(dir, name); }

/* Write frames [n, ch] of a signal to path in a libsndfile format; 0 or -1. */
static int write_audio(const char *path, int format, int rate, int ch, const float *x, int64_t n) {
    SF_INFO in = {0};
    in.samplerate = rate;
    in.channels = ch;
    in.format = format;
    SNDFILE *f = sf_open(path, SFM_WRITE, &in);
    if (!f) {
        printf("  cannot write %s: %s\n", path, sf_strerror(NULL));
        return -1;
    }
    sf_count_t k = n ? sf_writef_float(f, x, n) : 0;
    sf_close(f);
    return k == n ? 0 : -1;
}

/* A sine of frequency f (Hz) at rate, amplitude amp, [n, ch] with channel c scaled by (c + 1). */
static float *sine(double f, int rate, int ch, int64_t n, float amp) {
    float *x = malloc((size_t)(n * ch + 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < ch; c++) x[i * ch + c] = amp * (float)(c + 1) * (float)sin(2.0 * M_PI * f * i / rate);
    return x;
}

/* The share of x's energy at frequency f (16 kHz samples), by projection on sin and cos over
 * the middle of the clip (edges hold codec delay and filter ramps). */
static double tone_share(const float *x, int64_t n, double f) {
    int64_t a = n / 8, b = n - n / 8;
    double s = 0, c = 0, e = 0;
    for (int64_t i = a; i < b; i++) {
        double w = 2.0 * M_PI * f * i / MEDIA_AUDIO_RATE;
        s += x[i] * sin(w);
        c += x[i] * cos(w);
        e += (double)x[i] * x[i];
    }
    return e > 0 ? 2.0 * (s * s + c * c) / ((double)(b - a) * e) : 0.0;
}

/* Decode path; on failure print the message and return -1. */
static int load(media_audio *a, const char *path) {
    char *err = NULL;
    int rc = media_audio_load(a, path, &err);
    if (rc) printf("  %s\n", err ? err : "(no message)");
    free(err);
    return rc;
}

/* media_audio_decode of bytes must fail with PLUME_EFORMAT and a message holding `want`. */
static void expect_refused(const uint8_t *b, size_t n, const char *name, const char *want) {
    media_audio a;
    char *err = NULL;
    int rc = media_audio_decode(&a, b, n, name, &err);
    CHECK(rc == PLUME_EFORMAT, "%s: rc %d, want PLUME_EFORMAT", name, rc);
    CHECK(err && strstr(err, name) && strstr(err, want), "%s: message '%s' lacks '%s'", name, err ? err : "", want);
    CHECK(!a.pcm && a.n == 0, "%s: failed decode left samples", name);
    free(err);
}

/* The bytes of a file, malloc'd; *n its length. */
static uint8_t *slurp(const char *path, size_t *n) {
    char *buf = NULL, *err = NULL;
    if (plume_read_file(path, &buf, n, &err)) {
        printf("  %s\n", err);
        free(err);
        return NULL;
    }
    return (uint8_t *)buf;
}

/* ---- FFT -------------------------------------------------------------------------------- */

/* Random complex input at sizes 2..1024 against the O(n^2) DFT in long double. */
static void test_fft_matches_dft(void) {
    static const int32_t sizes[] = {2, 4, 8, 64, 512, 1024};
    uint64_t rng = 5;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int32_t n = sizes[si];
        double *re = malloc(n * sizeof(double)), *im = malloc(n * sizeof(double));
        double *r0 = malloc(n * sizeof(double)), *i0 = malloc(n * sizeof(double));
        for (int32_t j = 0; j < n; j++) {
            r0[j] = re[j] = plume_rng_float(&rng) - 0.5;
            i0[j] = im[j] = j % 3 ? plume_rng_float(&rng) - 0.5 : 0.0;
        }
        CHECK(media_fft(re, im, n) == 0, "media_fft(%d) failed", n);
        double worst = 0;
        for (int32_t k = 0; k < n; k++) {
            long double sr = 0, sii = 0;
            for (int32_t j = 0; j < n; j++) {
                long double a = -2.0L * (long double)M_PI * (long double)((int64_t)j * k % n) / n;
                sr += r0[j] * cosl(a) - i0[j] * sinl(a);
                sii += r0[j] * sinl(a) + i0[j] * cosl(a);
            }
            worst = fmax(worst, fmax(fabs(re[k] - (double)sr), fabs(im[k] - (double)sii)));
        }
        CHECK(worst < 1e-12 * n, "fft n=%d: max error %.3g", n, worst);
        free(re), free(im), free(r0), free(i0);
    }
    double re[4] = {0}, im[4] = {0};
    CHECK(media_fft(re, im, 3) == PLUME_EINVAL && media_fft(re, im, 0) == PLUME_EINVAL &&
              media_fft(re, im, 1 << 17) == PLUME_EINVAL,
          "media_fft took a size that is not a power of two in 2..65536");
}

/* ---- features against the golden -------------------------------------------------------- */

/* Frame counts: HF's arithmetic (stats.json of tiny-mm-a: 36800 -> 230/229, 6400 -> 39/39). */
static void test_frame_counts(void) {
    CHECK(media_mel_frames(36800) == 230 && media_mel_frames_valid(36800) == 229, "36800 samples: %d/%d frames",
          media_mel_frames(36800), media_mel_frames_valid(36800));
    CHECK(media_mel_frames(6400) == 39 && media_mel_frames_valid(6400) == 39, "6400 samples: %d/%d frames",
          media_mel_frames(6400), media_mel_frames_valid(6400));
    /* a frame needs 161 real samples; 30 s is 2999 frames, all valid (750 tokens after two
     * stride-2 convolutions) */
    CHECK(media_mel_frames_valid(160) == 0 && media_mel_frames_valid(161) == 1 && media_mel_frames_valid(321) == 2,
          "frames_valid(160/161/321) = %d/%d/%d", media_mel_frames_valid(160), media_mel_frames_valid(161),
          media_mel_frames_valid(321));
    CHECK(media_mel_frames(MEDIA_AUDIO_CLIP) == 2999 && media_mel_frames_valid(MEDIA_AUDIO_CLIP) == 2999, "30 s: %d/%d",
          media_mel_frames(MEDIA_AUDIO_CLIP), media_mel_frames_valid(MEDIA_AUDIO_CLIP));
    for (int64_t n = 1; n < 2000; n++) /* the valid frames are those whose last sample is real */
        CHECK(media_mel_frames_valid(n) <= media_mel_frames(n) &&
                  (media_mel_frames_valid(n) == 0 || (int64_t)(media_mel_frames_valid(n) - 1) * 160 + 160 < n),
              "n=%lld: %d valid of %d", (long long)n, media_mel_frames_valid(n), media_mel_frames(n));
    CHECK(media_audio_clips(0) == 0 && media_audio_clips(1) == 1 && media_audio_clips(MEDIA_AUDIO_CLIP) == 1 &&
              media_audio_clips(MEDIA_AUDIO_CLIP + 1) == 2,
          "clip counts");
}

/* One golden clip: decode the WAV, its mask and (feat_npy not NULL) its features against HF's. */
static void features_case(const char *wav, const char *feat_npy, const char *mask_npy, int64_t want_n) {
    char *wp = plume_path_join(t_data(), wav), *mp = plume_path_join(t_data(), mask_npy), *err = NULL;
    char *fp = feat_npy ? plume_path_join(t_data(), feat_npy) : NULL;
    media_audio a;
    media_mel m = {0};
    plume_map fm = {0}, mm = {0};
    npy_view fv, mv;
    if (load(&a, wp)) {
        CHECK(0, "%s did not decode", wav);
        goto done;
    }
    CHECK(a.n == want_n && a.src_rate == 16000 && a.src_channels == 1, "%s: %lld samples at %d Hz x %d", wav,
          (long long)a.n, a.src_rate, a.src_channels);
    CHECK(media_mel_compute(&m, a.pcm, a.n, &err) == 0, "mel: %s", err ? err : "");
    if (npy_open(mp, &mm, &mv, &err) || (fp && npy_open(fp, &fm, &fv, &err))) {
        CHECK(0, "%s", err);
        goto done;
    }
    CHECK(mv.count == m.T && mv.kind == 'b', "%s: %lld mask entries, plume %d frames", mask_npy, (long long)mv.count, m.T);
    if (mv.count != m.T) goto done;
    int32_t golden_valid = 0, prefix = 1;
    for (int32_t i = 0; i < m.T; i++) {
        golden_valid += mv.data[i] != 0;
        prefix &= (mv.data[i] != 0) == (i < golden_valid);
    }
    CHECK(prefix && golden_valid == m.n_valid, "%s: plume %d valid frames, golden %d (prefix %d)", wav, m.n_valid,
          golden_valid, prefix);
    int zero = 1;
    for (int64_t i = (int64_t)m.n_valid * MEDIA_MEL_BINS; i < (int64_t)m.T * MEDIA_MEL_BINS; i++) zero &= m.feat[i] == 0.0f;
    CHECK(zero, "%s: frames past the mask are not 0", wav);
    if (!fp) goto done;
    CHECK(fv.ndim == 2 && fv.shape[0] == m.T && fv.shape[1] == MEDIA_MEL_BINS, "%s: golden [%lld, %lld], plume [%d, 128]",
          feat_npy, (long long)fv.shape[0], (long long)fv.shape[1], m.T);
    if (fv.count != (int64_t)m.T * MEDIA_MEL_BINS) goto done;
    float *g = malloc((size_t)fv.count * sizeof(float));
    npy_to_f32(&fv, g);
    double rr = t_rel_rms(m.feat, g, (size_t)fv.count), mx = t_max_abs(m.feat, g, (size_t)fv.count);
    printf("  %s: features rel-RMS %.3g, max |d| %.3g over %d frames\n", wav, rr, mx, m.T);
    CHECK(rr <= FEAT_REL_RMS, "%s: features rel-RMS %.3g > %.0e", wav, rr, FEAT_REL_RMS);
    free(g);
done:
    media_mel_free(&m);
    media_audio_free(&a);
    plume_map_free(&fm);
    plume_map_free(&mm);
    free(wp), free(fp), free(mp), free(err);
}

/* The 0.4 s clip's features against HF's; the 2.3 s clip's mask (229 valid of 230 frames: the
 * last one runs into the padding). Its features are checked through the tower (test_encoders,
 * whose golden outputs they produce). */
static void test_features_golden(void) {
    features_case("tiny-mm-a/speechlike.wav", NULL, "tiny-mm-a/audio0_mask.npy", 36800);
    features_case("tiny-mm-a/short.wav", "tiny-mm-a/audio1_features.npy", "tiny-mm-a/audio1_mask.npy", 6400);
}

/* Bad clip lengths are refused, not computed. */
static void test_mel_bad_lengths(void) {
    float x[4] = {0};
    media_mel m;
    char *err = NULL;
    CHECK(media_mel_compute(&m, x, 0, &err) == PLUME_EINVAL && err, "0 samples accepted");
    free(err), err = NULL;
    CHECK(media_mel_compute(&m, x, MEDIA_AUDIO_CLIP + 1, &err) == PLUME_EINVAL && err, "a clip over 30 s accepted");
    free(err), err = NULL;
    CHECK(media_mel_compute(&m, x, 4, &err) == 0 && m.T == 0 && m.n_valid == 0, "4 samples: %d frames", m.T);
    media_mel_free(&m);
    media_mel_free(NULL);
    free(err);
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* Write [n, ch] int32 samples (each an int16 << 16, so that every width holds them exactly)
 * to path as a 16 kHz WAV of a subtype; 0 or -1. */
static int write_ints(const char *path, int sub, int ch, const int32_t *x, int64_t n) {
    SF_INFO in = {0};
    in.samplerate = 16000;
    in.channels = ch;
    in.format = SF_FORMAT_WAV | sub;
    SNDFILE *f = sf_open(path, SFM_WRITE, &in);
    if (!f) return -1;
    sf_count_t k = sf_writef_int(f, x, n);
    sf_close(f);
    return k == n ? 0 : -1;
}

/* 16 kHz WAV of every PCM width and float, mono and stereo: bit-exact samples (int16 / 32768,
 * channels averaged in float) with no resampling. */
static void test_decode_wav_exact(void) {
    static const struct { int sub; const char *name; } subs[] = {
        {SF_FORMAT_PCM_16, "pcm16"}, {SF_FORMAT_PCM_24, "pcm24"}, {SF_FORMAT_PCM_32, "pcm32"}, {SF_FORMAT_FLOAT, "float"}};
    char *dir = t_tmpdir("media");
    const int64_t n = 1000;
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
        for (int ch = 1; ch <= 2; ch++) {
            int32_t *xi = malloc((size_t)n * ch * sizeof(int32_t));
            float *x = malloc((size_t)n * ch * sizeof(float));
            for (int64_t j = 0; j < n * ch; j++) {
                int32_t v = (int32_t)((j * 7919) % 65536) - 32768; /* every int16 value class, -32768 included */
                xi[j] = (int32_t)((uint32_t)v << 16);
                x[j] = (float)v / 32768.0f;
            }
            char name[64];
            snprintf(name, sizeof name, "%s-%d.wav", subs[i].name, ch);
            char *p = tmp_path(dir, name);
            media_audio a;
            int w = subs[i].sub == SF_FORMAT_FLOAT ? write_audio(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, ch, x, n)
                                                   : write_ints(p, subs[i].sub, ch, xi, n);
            if (w || load(&a, p)) {
                CHECK(0, "%s: write or decode failed", name);
                free(p), free(x), free(xi);
                continue;
            }
            int exact = a.n == n;
            for (int64_t j = 0; exact && j < n; j++) exact = a.pcm[j] == (ch == 1 ? x[j] : (x[2 * j] + x[2 * j + 1]) / 2.0f);
            CHECK(exact, "%s: samples differ from the written ones (%lld of %lld)", name, (long long)a.n, (long long)n);
            CHECK(a.src_rate == 16000 && a.src_channels == ch && !strncmp(a.format, "WAV ", 4), "%s: %d Hz x %d, '%s'", name,
                  a.src_rate, a.src_channels, a.format);
            media_audio_free(&a);
            unlink(p);
            free(p), free(x), free(xi);
        }
    rmdir(dir);
    free(dir);
}

/* Every compressed format at other rates and channel counts: the decoded tone lands at 16 kHz
 * with the right length and pitch (lossy codecs: most of the energy at the tone). */
static void test_decode_formats(void) {
    static const struct { int format, rate, ch; const char *name; double min_share; } cases[] = {
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 2, "a.flac", 0.99},
        {SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100, 2, "a.ogg", 0.95},
        {SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, 1, "a.opus", 0.95},
        {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 44100, 1, "a.mp3", 0.95},
        {SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 8000, 1, "u8.wav", 0.99},
    };
    char *dir = t_tmpdir("media");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int64_t n = cases[i].rate; /* one second */
        float *x = sine(440.0, cases[i].rate, cases[i].ch, n, 0.3f);
        char *p = tmp_path(dir, cases[i].name);
        media_audio a;
        if (write_audio(p, cases[i].format, cases[i].rate, cases[i].ch, x, n) || load(&a, p)) {
            CHECK(0, "%s: write or decode failed", cases[i].name);
            free(p), free(x);
            continue;
        }
        double share = tone_share(a.pcm, a.n, 440.0);
        printf("  %s (%s, %d Hz x %d): %lld samples at 16 kHz, 440 Hz holds %.4f of the energy\n", cases[i].name, a.format,
               a.src_rate, a.src_channels, (long long)a.n, share);
        CHECK(a.src_rate == cases[i].rate && a.src_channels == cases[i].ch, "%s: %d Hz x %d", cases[i].name, a.src_rate,
              a.src_channels);
        CHECK(llabs(a.n - 16000) <= 16000 / 50, "%s: %lld samples for one second", cases[i].name, (long long)a.n);
        CHECK(share >= cases[i].min_share, "%s: the tone holds %.3f of the energy", cases[i].name, share);
        media_audio_free(&a);
        unlink(p);
        free(p), free(x);
    }
    rmdir(dir);
    free(dir);
}

/* The files of tests/data/audio (one of each format, written elsewhere): each decodes to a
 * quarter second at 16 kHz holding the tone. */
static void test_decode_shipped(void) {
    static const char *const files[] = {"tone.flac", "tone.ogg", "tone.opus", "tone.mp3", "tone-f32.wav", "tone-s24.wav"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "audio/%s", files[i]);
        char *p = plume_path_join(t_data(), rel);
        media_audio a;
        if (load(&a, p)) {
            CHECK(0, "%s did not decode", files[i]);
        } else {
            double share = tone_share(a.pcm, a.n, 440.0);
            CHECK(llabs(a.n - 4000) <= 80 && share >= 0.95, "%s (%s): %lld samples, tone share %.3f", files[i], a.format,
                  (long long)a.n, share);
        }
        media_audio_free(&a);
        free(p);
    }
}

/* libsoxr against the ideal: a 1 kHz float tone at 48 kHz lands on the 16 kHz sine within 1e-3
 * (away from the edges), and a 10 kHz tone, above the new Nyquist, is filtered out. */
static void test_resample(void) {
    char *dir = t_tmpdir("media");
    const int64_t n = 48000;
    for (int k = 0; k < 2; k++) {
        const double f = k ? 10000.0 : 1000.0;
        float *x = sine(f, 48000, 1, n, 0.5f);
        char *p = tmp_path(dir, "tone.wav");
        media_audio a;
        if (write_audio(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 48000, 1, x, n) || load(&a, p)) {
            CHECK(0, "write or decode failed");
            free(p), free(x);
            continue;
        }
        CHECK(a.n == 16000, "48000 samples at 48 kHz became %lld at 16 kHz", (long long)a.n);
        double worst = 0, rms = 0;
        for (int64_t i = 800; i < a.n - 800; i++) {
            double want = k ? 0.0 : 0.5 * sin(2.0 * M_PI * f * i / 16000.0);
            worst = fmax(worst, fabs(a.pcm[i] - want));
            rms += (double)a.pcm[i] * a.pcm[i];
        }
        rms = sqrt(rms / (double)(a.n - 1600));
        printf("  %.0f Hz at 48 kHz -> 16 kHz: max |error| %.3g, rms %.3g\n", f, worst, rms);
        CHECK(worst < 1e-3, "%.0f Hz: max error %.3g against the ideal", f, worst);
        media_audio_free(&a);
        unlink(p);
        free(p), free(x);
    }
    rmdir(dir);
    free(dir);
}

/* ---- bad audio ---------------------------------------------------------------------------- */

/* Bytes that are not audio, or claim a format they do not hold. */
static void test_refuse_not_audio(void) {
    static const uint8_t text[] = "Why is the sky blue?\n";
    expect_refused(text, sizeof text - 1, "prompt.wav", "not an audio file");
    expect_refused(text, 0, "empty.wav", "empty");
    uint8_t riff[64] = "RIFF\x38\0\0\0WAVEfmt \x10\0\0\0";
    for (int i = 20; i < 64; i++) riff[i] = (uint8_t)(i * 37); /* a RIFF/WAVE header over garbage */
    expect_refused(riff, sizeof riff, "fake.wav", "not an audio file");
    uint8_t png[64] = "\x89PNG\r\n\x1a\n";
    expect_refused(png, sizeof png, "picture.mp3", "not an audio file");
    uint8_t noise[4096];
    uint64_t rng = 3;
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)plume_rng_next(&rng);
    expect_refused(noise, sizeof noise, "noise.ogg", "not an audio file");
}

/* Files cut in half: WAV (whose data chunk then claims more than there is), FLAC, Ogg, MP3. */
static void test_refuse_truncated(void) {
    static const struct { int format, rate; const char *name, *want; } cases[] = {
        {SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, "cut.wav", "truncated"},
        {SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, "cut.flac", "corrupt"},
        {SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100, "cut.ogg", "not an audio file"},
        {SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, "cut.opus", "not an audio file"},
        {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 44100, "cut.mp3", "truncated"},
    };
    char *dir = t_tmpdir("media");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int64_t n = cases[i].rate / 2;
        float *x = sine(300.0, cases[i].rate, 1, n, 0.3f);
        char *p = tmp_path(dir, cases[i].name);
        size_t len = 0;
        uint8_t *b = NULL;
        if (write_audio(p, cases[i].format, cases[i].rate, 1, x, n) || !(b = slurp(p, &len))) {
            CHECK(0, "%s: could not be written", cases[i].name);
        } else {
            media_audio whole;
            CHECK(media_audio_decode(&whole, b, len, cases[i].name, NULL) == 0, "%s: the whole file was refused",
                  cases[i].name);
            media_audio_free(&whole);
            expect_refused(b, len / 2, cases[i].name, cases[i].want);
        }
        unlink(p);
        free(p), free(x), free(b);
    }
    rmdir(dir);
    free(dir);
}

/* The length of the MPEG audio frame whose header is at p (4 bytes), or 0 when it is not one
 * (the test's own reading of the header, to find the frames it cuts). */
static size_t mpeg_frame_len(const uint8_t *p) {
    uint32_t h = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    if ((h & 0xffe00000u) != 0xffe00000u || ((h >> 17) & 3) != 1) return 0; /* layer III only */
    static const int br1[16] = {0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0};
    static const int br2[16] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0};
    static const int sr1[3] = {44100, 48000, 32000};
    int v = (h >> 19) & 3, bi = (h >> 12) & 15, si = (h >> 10) & 3;
    if (v == 1 || si == 3 || !bi || bi == 15) return 0;
    int sr = sr1[si] >> (v == 3 ? 0 : v == 2 ? 1 : 2), br = (v == 3 ? br1 : br2)[bi] * 1000;
    return (size_t)((v == 3 ? 144 : 72) * br / sr + ((h >> 9) & 1));
}

/* A truncated AIFF (its SSND chunk declares more than the file holds: libsndfile reads up to
 * the end without a word, as for WAV) and truncated MP3s that the header's length cannot tell:
 * one without its Xing/Info frame (libmpg123 then estimates the length from the bytes there
 * are) cut in half, and one cut inside its last frame (within the slack of the length check).
 * docs/MEDIA.md: a truncated file is refused. */
static void test_refuse_truncated_aiff_mp3(void) {
    char *dir = t_tmpdir("media");
    const int64_t n = 22050;
    float *x = sine(300.0, 44100, 1, n, 0.3f);
    char *p = tmp_path(dir, "cut.aiff");
    size_t len = 0;
    uint8_t *b = NULL;
    if (write_audio(p, SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 44100, 1, x, n) || !(b = slurp(p, &len))) {
        CHECK(0, "cut.aiff: could not be written");
    } else {
        media_audio whole;
        CHECK(media_audio_decode(&whole, b, len, "cut.aiff", NULL) == 0, "cut.aiff: the whole file was refused");
        media_audio_free(&whole);
        expect_refused(b, len / 2, "cut.aiff", "truncated");
        expect_refused(b, len - 1, "cut.aiff", "truncated");
    }
    unlink(p);
    free(p), free(b);
    p = tmp_path(dir, "cut.mp3");
    b = NULL;
    if (write_audio(p, SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 44100, 1, x, n) || !(b = slurp(p, &len))) {
        CHECK(0, "cut.mp3: could not be written");
    } else {
        size_t off = 0; /* past an ID3v2 tag */
        if (len > 10 && !memcmp(b, "ID3", 3)) off = 10 + ((size_t)b[6] << 21 | (size_t)b[7] << 14 | (size_t)b[8] << 7 | b[9]);
        size_t f0 = off + 4 <= len ? mpeg_frame_len(b + off) : 0;
        int xing = 0;
        for (size_t k = off; f0 && off + f0 <= len && k + 4 <= off + f0; k++)
            xing |= !memcmp(b + k, "Xing", 4) || !memcmp(b + k, "Info", 4);
        CHECK(xing, "cut.mp3: no Xing/Info frame first (the test's premise)");
        if (xing) {
            size_t m = len - f0; /* the file without its Xing frame */
            uint8_t *c = malloc(m);
            memcpy(c, b, off);
            memcpy(c + off, b + off + f0, len - off - f0);
            media_audio whole;
            CHECK(media_audio_decode(&whole, c, m, "cut.mp3", NULL) == 0, "cut.mp3 without Xing: the whole file was refused");
            media_audio_free(&whole);
            expect_refused(c, m / 2, "cut.mp3 without Xing, halved", "truncated");
            free(c);
            /* the last frame cut short: walk to it */
            size_t at = off, last = off;
            while (at + 4 <= len && mpeg_frame_len(b + at) && at + mpeg_frame_len(b + at) <= len) last = at, at += mpeg_frame_len(b + at);
            expect_refused(b, last + mpeg_frame_len(b + last) - 10, "cut.mp3 inside its last frame", "truncated");
        }
    }
    unlink(p);
    free(p), free(b), free(x);
    rmdir(dir);
    free(dir);
}

/* No samples, samples that are not numbers or absurdly large, a rate out of range, and a
 * 2-hour file (its header says so: refused before anything its length sizes is allocated). */
static void test_refuse_bad_content(void) {
    char *dir = t_tmpdir("media");
    char *p = tmp_path(dir, "x.wav");
    size_t len = 0;
    uint8_t *b = NULL;
    float x[256] = {0};
    if (!write_audio(p, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, x, 0) && (b = slurp(p, &len)))
        expect_refused(b, len, "silent.wav", "no audio samples");
    free(b), b = NULL;
    x[100] = NAN;
    if (!write_audio(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, 256) && (b = slurp(p, &len)))
        expect_refused(b, len, "nan.wav", "not a finite number");
    free(b), b = NULL;
    x[100] = INFINITY;
    if (!write_audio(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 2, x, 128) && (b = slurp(p, &len)))
        expect_refused(b, len, "inf.wav", "not a finite number");
    free(b), b = NULL;
    /* finite but absurd (fuzz_audio found one at 8 kHz: the resampler's sums overflowed to
     * infinities and NaNs that were then accepted) */
    x[100] = 3e38f;
    if (!write_audio(p, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 8000, 1, x, 256) && (b = slurp(p, &len)))
        expect_refused(b, len, "huge.wav", "beyond the +-1000000");
    free(b), b = NULL;
    x[100] = 0;
    if (!write_audio(p, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 500, 1, x, 256) && (b = slurp(p, &len)))
        expect_refused(b, len, "slow.wav", "sample rate 500 Hz");
    free(b), b = NULL;
    /* a one-second FLAC whose STREAMINFO then claims 2 hours (57,600,000 samples at 8 kHz): the
     * 36-bit total sits in the low bits of the 8 bytes at offset 18 */
    char *fp = tmp_path(dir, "long.flac");
    float *s = sine(200.0, 8000, 1, 8000, 0.2f);
    if (!write_audio(fp, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 8000, 1, s, 8000) && (b = slurp(fp, &len)) && len > 26 &&
        !memcmp(b, "fLaC", 4)) {
        uint64_t total = 57600000;
        b[21] = (uint8_t)((b[21] & 0xf0) | (total >> 32 & 0x0f));
        for (int i = 0; i < 4; i++) b[22 + i] = (uint8_t)(total >> (24 - 8 * i));
        expect_refused(b, len, "two-hours.flac", "7200.0 s long");
    } else {
        CHECK(0, "long.flac could not be written");
    }
    free(b);
    unlink(p), unlink(fp);
    rmdir(dir);
    free(p), free(fp), free(dir), free(s);
}

/* A missing file is an I/O error naming it. */
static void test_load_missing(void) {
    media_audio a;
    char *err = NULL;
    CHECK(media_audio_load(&a, "/nonexistent/speech.wav", &err) == PLUME_EIO && err && strstr(err, "speech.wav"),
          "missing file: %s", err ? err : "(no message)");
    free(err);
    media_audio_free(NULL);
}

int main(void) {
    RUN(test_fft_matches_dft);
    RUN(test_frame_counts);
    RUN(test_features_golden);
    RUN(test_mel_bad_lengths);
    RUN(test_decode_wav_exact);
    RUN(test_decode_formats);
    RUN(test_decode_shipped);
    RUN(test_resample);
    RUN(test_refuse_not_audio);
    RUN(test_refuse_truncated);
    RUN(test_refuse_truncated_aiff_mp3);
    RUN(test_refuse_bad_content);
    RUN(test_load_missing);
    return t_total_failed ? 1 : 0;
}
