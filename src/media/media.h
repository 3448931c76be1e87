/* media.h -- the media room: the bytes of a media file -> what an encoder reads.
 *
 * Owns: decoding audio files (WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3), mixing them down to mono
 * and resampling them to the 16 kHz the audio tower hears; the log-mel front end of the audio
 * tower (Hugging Face's Gemma4AudioFeatureExtractor), its FFT and its 30 s clips.
 * May call: common.h, libsndfile (decoding), libsoxr (resampling).
 * Must not know: the model, the tokenizer, the encoders and their weights, the prompt.
 * Reads untrusted bytes: every failure is an error naming the file, never a crash; durations
 * are capped before anything their length sizes is allocated.
 *
 * Files, in calling order:
 *   audio.c   bytes -> mono float samples at 16 kHz (media_audio)
 *   mel.c     samples -> log-mel frames and their mask (media_mel); the FFT
 */
#ifndef PLUME_MEDIA_H
#define PLUME_MEDIA_H

#include "common.h"

/* ---- audio: decode, mix down, resample (audio.c) --------------------------------------- */

enum {
    MEDIA_AUDIO_RATE = 16000,          /* samples per second the audio tower hears */
    MEDIA_AUDIO_CLIP = 480000,         /* 30 s: the most one clip holds (HF max_length) */
    MEDIA_AUDIO_MAX_SECONDS = 600,     /* the longest audio plume decodes: 20 clips */
    MEDIA_AUDIO_MIN_RATE = 1000,       /* sample rates a file may have */
    MEDIA_AUDIO_MAX_RATE = 768000
};

/* Decoded audio: mono samples at MEDIA_AUDIO_RATE, as libsndfile normalizes them (integer PCM
 * divided by 2^(bits-1): int16 / 32768 exactly; float files as stored). */
typedef struct {
    float *pcm;           /* [n] */
    int64_t n;            /* samples, >= 1 */
    int32_t src_rate;     /* the file's sample rate and channels (for messages and docs) */
    int32_t src_channels;
    char format[48];      /* the container and codec: "WAV Signed 16 bit PCM", "Ogg Opus", "MP3" */
} media_audio;

/* Decode a whole audio file held in data[len] (name is for messages): any container and codec
 * libsndfile reads, channels averaged, any rate from MEDIA_AUDIO_MIN_RATE to
 * MEDIA_AUDIO_MAX_RATE resampled to 16 kHz with libsoxr (16 kHz input is passed through).
 * PLUME_EFORMAT for bytes that are not audio, truncated files, no samples, NaN or infinite
 * samples, an unsupported rate or longer than MEDIA_AUDIO_MAX_SECONDS; PLUME_ENOMEM. */
int media_audio_decode(media_audio *a, const uint8_t *data, size_t len, const char *name, char **err);
/* media_audio_decode of a file (mapped, read once); PLUME_EIO if it cannot be read. */
int media_audio_load(media_audio *a, const char *path, char **err);
void media_audio_free(media_audio *a);

/* The 30 s clips of n samples: clip c covers samples [c * MEDIA_AUDIO_CLIP, min(n, (c + 1) *
 * MEDIA_AUDIO_CLIP)). Audio past 30 s is split, not cut off as HF's extractor does. */
int32_t media_audio_clips(int64_t n);

/* ---- log-mel features (mel.c) ---------------------------------------------------------- */

enum {
    MEDIA_MEL_BINS = 128,    /* feature_size */
    MEDIA_MEL_FRAME = 320,   /* frame_length: 20 ms */
    MEDIA_MEL_HOP = 160,     /* hop_length: 10 ms */
    MEDIA_MEL_FFT = 512,     /* fft_length */
    MEDIA_MEL_PAD_TO = 128   /* samples are zero-padded to a multiple of this (pad_to_multiple_of) */
};

/* The log-mel frames of one clip, in Hugging Face's layout (input_features and
 * input_features_mask of a batch of one). */
typedef struct {
    int32_t T;        /* frames, those on the zero padding included */
    int32_t n_valid;  /* the mask: frames [0, n_valid) see real samples only */
    float *feat;      /* [T, MEDIA_MEL_BINS] ln(mel + 0.001); frames past n_valid are 0 */
} media_mel;

/* Frames of a clip of n samples: all (T) and valid (n_valid, 0 below 161 samples). */
int32_t media_mel_frames(int64_t n);
int32_t media_mel_frames_valid(int64_t n);

/* The log-mel features of one clip of n samples (1 <= n <= MEDIA_AUDIO_CLIP) at 16 kHz:
 * 160 zeros in front (semicausal), frames of 320 samples every 160, periodic Hann window,
 * |rfft| over 512 points, 128 HTK mel triangles from 0 to 8 kHz (unnormalized), ln(mel +
 * 0.001); frames touching the padding are 0. PLUME_EINVAL for a bad n, PLUME_ENOMEM. */
int media_mel_compute(media_mel *m, const float *pcm, int64_t n, char **err);
void media_mel_free(media_mel *m);

/* In-place complex FFT of n points (a power of two, 2..65536): X_k = sum_j x_j e^(-2 pi i jk/n). */
int media_fft(double *re, double *im, int32_t n);

#endif /* PLUME_MEDIA_H */
