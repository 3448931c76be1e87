/* mel.c -- the log-mel features of a 16 kHz clip, as Hugging Face's Gemma4AudioFeatureExtractor
 * computes them for a batch of one (gemma4-multimodal.md §3.2), and the FFT they need.
 *
 *   samples [n] -> zero-padded to a multiple of 128, 160 zeros in front (semicausal)
 *   frame i = padded samples [160 i, 160 i + 320), times a periodic Hann window (float32)
 *   |FFT| over 512 points (the frame zero-padded) -> 257 magnitudes
 *   128 HTK mel triangles over 0..8000 Hz, unnormalized -> ln(mel + 0.001)
 *   frame i is valid iff sample 160 i + 320 of the padded signal is real; invalid frames are 0
 *
 * The FFT, the filters and the log run in double (HF's filters and matmul are float64); the
 * windowed frame is float32 as HF's, the result float32. A 30 s clip is 3000 frames: a few ms.
 * This file knows nothing of files, the tower or the prompt. */
#include <math.h>
#include <stdlib.h>

#include "media.h"

enum {
    FFT_BINS = MEDIA_MEL_FFT / 2 + 1, /* 257 magnitudes */
    SEMICAUSAL = MEDIA_MEL_FRAME / 2  /* zeros in front: 160 */
};
#define MEL_FLOOR 0.001     /* mel_floor, added before the log */
#define MEL_FMAX 8000.0     /* max_frequency; min_frequency is 0 */

/* ---- FFT -------------------------------------------------------------------------------- */

/* Radix-2 decimation in time over n points with twiddles tw[n/2] (cos, then -sin interleaved:
 * tw[2k] = cos(2 pi k / n), tw[2k+1] = -sin(2 pi k / n)). */
static void fft_run(double *re, double *im, int32_t n, const double *tw) {
    for (int32_t i = 1, j = 0; i < n; i++) { /* bit-reversed order */
        int32_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            double t = re[i]; re[i] = re[j]; re[j] = t;
            t = im[i]; im[i] = im[j]; im[j] = t;
        }
    }
    for (int32_t len = 2; len <= n; len <<= 1) {
        const int32_t half = len / 2, stride = n / len;
        for (int32_t s = 0; s < n; s += len)
            for (int32_t k = 0; k < half; k++) {
                const double c = tw[2 * k * stride], d = tw[2 * k * stride + 1];
                const int32_t a = s + k, b = a + half;
                const double xr = re[b] * c - im[b] * d, xi = re[b] * d + im[b] * c;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
    }
}

/* The twiddles of an n-point FFT: tw[n] as fft_run reads them. */
static void fft_twiddles(double *tw, int32_t n) {
    for (int32_t k = 0; k < n / 2; k++) {
        const double a = 2.0 * M_PI * k / n;
        tw[2 * k] = cos(a);
        tw[2 * k + 1] = -sin(a);
    }
}

int media_fft(double *re, double *im, int32_t n) {
    if (n < 2 || n > 65536 || (n & (n - 1))) return PLUME_EINVAL;
    double *tw = malloc((size_t)n * sizeof(double));
    if (!tw) return PLUME_ENOMEM;
    fft_twiddles(tw, n);
    fft_run(re, im, n, tw);
    free(tw);
    return 0;
}

/* ---- mel filters ------------------------------------------------------------------------ */

/* HTK mel scale and its inverse (audio_utils.hertz_to_mel / mel_to_hertz, mel_scale "htk"). */
static double hz_to_mel(double f) { return 2595.0 * log10(1.0 + f / 700.0); }
static double mel_to_hz(double m) { return 700.0 * (pow(10.0, m / 2595.0) - 1.0); }

/* The filter bank fb[FFT_BINS][MEDIA_MEL_BINS] of audio_utils.mel_filter_bank(257, 128, 0,
 * 8000, 16000, norm=None, "htk"): edges e_j at 130 points evenly spaced in mel (numpy linspace:
 * start + j step, the last exactly the stop), bins at f_k = 8000 k / 256, and
 * W[k][j] = max(0, min((f_k - e_j) / (e_j+1 - e_j), (e_j+2 - f_k) / (e_j+2 - e_j+1))).
 * lo[j], hi[j]: the bins [lo, hi) where filter j is not 0. */
static void mel_filters(double *fb, int32_t *lo, int32_t *hi) {
    double e[MEDIA_MEL_BINS + 2];
    const double m0 = hz_to_mel(0.0), m1 = hz_to_mel(MEL_FMAX), step = (m1 - m0) / (MEDIA_MEL_BINS + 1);
    for (int32_t j = 0; j < MEDIA_MEL_BINS + 2; j++) e[j] = mel_to_hz(j == MEDIA_MEL_BINS + 1 ? m1 : m0 + j * step);
    for (int32_t j = 0; j < MEDIA_MEL_BINS; j++) {
        lo[j] = FFT_BINS;
        hi[j] = 0;
        for (int32_t k = 0; k < FFT_BINS; k++) {
            const double f = MEL_FMAX * k / (FFT_BINS - 1);
            const double down = (f - e[j]) / (e[j + 1] - e[j]), up = (e[j + 2] - f) / (e[j + 2] - e[j + 1]);
            const double w = fmax(0.0, fmin(down, up));
            fb[k * MEDIA_MEL_BINS + j] = w;
            if (w > 0.0) {
                if (k < lo[j]) lo[j] = k;
                hi[j] = k + 1;
            }
        }
    }
}

/* ---- features --------------------------------------------------------------------------- */

int32_t media_mel_frames(int64_t n) {
    if (n <= 0) return 0;
    const int64_t padded = (n + MEDIA_MEL_PAD_TO - 1) / MEDIA_MEL_PAD_TO * MEDIA_MEL_PAD_TO + SEMICAUSAL;
    return padded < MEDIA_MEL_FRAME + 1 ? 0 : (int32_t)((padded - MEDIA_MEL_FRAME - 1) / MEDIA_MEL_HOP + 1);
}

int32_t media_mel_frames_valid(int64_t n) {
    return n < MEDIA_MEL_FRAME + 1 - SEMICAUSAL ? 0 : (int32_t)((n + SEMICAUSAL - MEDIA_MEL_FRAME - 1) / MEDIA_MEL_HOP + 1);
}

/* Scratch of one clip's features: window, filters, FFT buffers. */
typedef struct {
    float win[MEDIA_MEL_FRAME];
    double tw[MEDIA_MEL_FFT];
    double fb[FFT_BINS * MEDIA_MEL_BINS];
    int32_t lo[MEDIA_MEL_BINS], hi[MEDIA_MEL_BINS];
    double re[MEDIA_MEL_FFT], im[MEDIA_MEL_FFT], mag[FFT_BINS];
} mel_work;

/* Frame i of pcm[n] (i < n_valid) -> out[MEDIA_MEL_BINS]. */
static void mel_frame(mel_work *w, const float *pcm, int64_t n, int32_t i, float *out) {
    const int64_t first = (int64_t)i * MEDIA_MEL_HOP - SEMICAUSAL; /* sample under window index 0 */
    for (int32_t j = 0; j < MEDIA_MEL_FFT; j++) {
        const int64_t s = first + j;
        const float x = j < MEDIA_MEL_FRAME && s >= 0 && s < n ? pcm[s] : 0.0f;
        w->re[j] = j < MEDIA_MEL_FRAME ? (double)(x * w->win[j]) : 0.0; /* float32 product, as HF */
        w->im[j] = 0.0;
    }
    fft_run(w->re, w->im, MEDIA_MEL_FFT, w->tw);
    for (int32_t k = 0; k < FFT_BINS; k++) w->mag[k] = hypot(w->re[k], w->im[k]);
    for (int32_t j = 0; j < MEDIA_MEL_BINS; j++) {
        double mel = 0.0;
        for (int32_t k = w->lo[j]; k < w->hi[j]; k++) mel += w->mag[k] * w->fb[k * MEDIA_MEL_BINS + j];
        out[j] = (float)log(mel + MEL_FLOOR);
    }
}

int media_mel_compute(media_mel *m, const float *pcm, int64_t n, char **err) {
    memset(m, 0, sizeof *m);
    if (!pcm || n < 1 || n > MEDIA_AUDIO_CLIP)
        return plume_fail(err, PLUME_EINVAL, "log-mel: a clip holds 1 to %d samples, not %lld", MEDIA_AUDIO_CLIP, (long long)n);
    m->T = media_mel_frames(n);
    m->n_valid = media_mel_frames_valid(n);
    mel_work *w = malloc(sizeof *w);
    m->feat = calloc((size_t)(m->T ? m->T : 1) * MEDIA_MEL_BINS, sizeof(float));
    if (!w || !m->feat) {
        free(w);
        media_mel_free(m);
        return plume_fail(err, PLUME_ENOMEM, "log-mel: out of memory for %d frames", m->T);
    }
    for (int32_t j = 0; j < MEDIA_MEL_FRAME; j++) /* np.hanning(321)[:-1], cast to float32 */
        w->win[j] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * j / MEDIA_MEL_FRAME));
    fft_twiddles(w->tw, MEDIA_MEL_FFT);
    mel_filters(w->fb, w->lo, w->hi);
    for (int32_t i = 0; i < m->n_valid; i++) mel_frame(w, pcm, n, i, m->feat + (size_t)i * MEDIA_MEL_BINS);
    free(w);
    return 0;
}

void media_mel_free(media_mel *m) {
    if (!m) return;
    free(m->feat);
    memset(m, 0, sizeof *m);
}
