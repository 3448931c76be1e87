/* media.h -- the media room: the bytes of a media file -> what an encoder reads (docs/MEDIA.md).
 *
 * Owns: decoding images (PNG with libpng, JPEG with libjpeg-turbo, WebP with libwebp and its
 * demuxer; the format is sniffed from the bytes, never from a name), EXIF orientation (parsed
 * here: a bounded TIFF reader), the conversion to 8-bit RGB that Hugging Face's processor
 * makes (PIL's convert("RGB"): alpha dropped, palettes and grays expanded), the resampler
 * (Pillow's bicubic on uint8, bit for bit), and Gemma 4's image plan (the size rule of the
 * token budget, rescale by 1/255, patches and their positions).
 * Audio: decoding audio files (WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3 with libsndfile), mixing
 * them down to mono and resampling them to the 16 kHz the audio tower hears (libsoxr); the
 * log-mel front end of Hugging Face's Gemma4AudioFeatureExtractor, its FFT and its 30 s clips.
 * May call: common.h, and those libraries. Must not know: the towers, the model, sessions,
 * the tokenizer, the prompt.
 *
 * Files, in calling order:
 *   decode_image.c sniff, orientation, the public plume_image_decode and plume_image_load
 *   image.c        the decoded image below the decoders: the pixel cap, allocation, the
 *                  public plume_image_* that make one from pixels, read and free it
 *   decode_png.c   decode_jpeg.c   decode_webp.c   one library each, to RGB
 *   exif.c         the orientation tag of an EXIF block
 *   resize.c       Pillow's two-pass bicubic resample with fixed-point coefficients
 *   patches.c      the target size of a budget, patches [N, p*p*3] and positions [N, 2]
 *   decode_audio.c audio bytes -> mono float samples at 16 kHz (media_audio), the public
 *                  plume_audio_* of plume.h that make, read and free it
 *   mel.c          samples -> log-mel frames and their mask (media_mel); the FFT
 *
 * Every decoder reads untrusted bytes: sizes are checked against MEDIA_MAX_PIXELS (images) or
 * MEDIA_AUDIO_MAX_SECONDS (audio) before a buffer they size is allocated, and a library's
 * error comes back as PLUME_EFORMAT with its message, never as a crash. */
#ifndef PLUME_MEDIA_H
#define PLUME_MEDIA_H

#include "common.h"

/* Decoded pixels are refused beyond this many (a 20000 x 20000 image is 400M): 64 MP, more
 * than phone cameras give, 192 MB of RGB. */
#define MEDIA_MAX_PIXELS (64ll << 20)
/* Or beyond this many on a side (a 1 x 60M strip would pass the pixel count). */
#define MEDIA_MAX_SIDE 65535

/* An image: 8-bit RGB, row after row (plume.h's plume_image). */
struct plume_image {
    int32_t w, h;   /* pixels */
    uint8_t *rgb;   /* [h, w, 3] */
};

/* ---- image.c -------------------------------------------------------------------------- */

/* Check a decoder's header dimensions before it allocates: 0, or PLUME_EFORMAT naming what. */
int media_check_size(const char *what, int64_t w, int64_t h, char **err);
/* A new image of w x h (checked with media_check_size), pixels uninitialized. */
int media_image_new(plume_image **out, int32_t w, int32_t h, const char *what, char **err);

/* ---- decode_*.c: bytes of one format -> RGB, and the EXIF block's orientation (1..8,
 * 1 when none). The bytes are known to start with the format's signature. ---------------- */
int media_decode_png(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);
int media_decode_jpeg(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);
int media_decode_webp(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);

/* ---- exif.c --------------------------------------------------------------------------- */

/* The orientation tag (0x0112) of an EXIF block: a TIFF header and IFD0, optionally after
 * "Exif\0\0". 1..8, or 1 when absent or unreadable (a broken EXIF block never fails a decode,
 * as in Pillow). */
int32_t media_exif_orientation(const uint8_t *b, size_t n);

/* Apply an EXIF orientation (2..8: PIL's ImageOps.exif_transpose) to *img, replacing it. */
int media_orient(plume_image **img, int32_t orientation, char **err);

/* ---- resize.c ------------------------------------------------------------------------- */

/* Resample RGB src [sh, sw, 3] to dst [dh, dw, 3] as Pillow's Image.resize(BICUBIC) does on
 * an 8-bit image: a horizontal then a vertical pass (each skipped when its size is kept),
 * Keys' cubic (a = -0.5) with its support widened by the downscale factor, coefficients
 * normalized in double and rounded to 22-bit fixed point, sums rounded and clipped per pass.
 * 0 or PLUME_ENOMEM. */
int media_resize_bicubic(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw, int32_t dh,
                         char **err);

/* ---- patches.c ------------------------------------------------------------------------ */

/* Gemma 4's image plan for a budget of soft tokens. */
typedef struct {
    int32_t th, tw;     /* resized height, width: multiples of patch * pool */
    int32_t ph, pw;     /* patches down, across */
    int32_t n_patches;  /* ph * pw */
    int32_t n_tokens;   /* soft tokens: n_patches / pool^2 */
} media_plan;

/* The budgets the processor accepts (HF's _SUPPORTED_SOFT_TOKENS). */
int media_budget_ok(int32_t max_tokens);
/* The size an h x w image is resized to for max_tokens (HF get_aspect_ratio_preserving_size,
 * in double as Python computes it): 0, or PLUME_EINVAL for a budget outside 70/140/280/560/1120
 * or a size HF refuses. */
int media_plan_for(int32_t h, int32_t w, int32_t patch, int32_t pool, int32_t max_tokens, media_plan *p,
                   char **err);
/* The resized pixels of img for plan p ([th, tw, 3], malloc'd into *rgb): img's own when the
 * size is kept. 0 or PLUME_ENOMEM. */
int media_plan_pixels(const plume_image *img, const media_plan *p, uint8_t **rgb, char **err);
/* Patches of resized pixels rgb [th, tw, 3]: pix [n_patches, patch*patch*3] as the processor
 * gives them (float32(u8 * (1/255)) in double, patch r*pw + c, inside ((dy*patch)+dx)*3 + ch),
 * pos [n_patches, 2] = (x, y) = (c, r). */
void media_patchify(const uint8_t *rgb, const media_plan *p, int32_t patch, float *pix, int32_t *pos);

/* ---- audio: decode, mix down, resample (decode_audio.c) ------------------------------- */

enum {
    MEDIA_AUDIO_RATE = 16000,          /* samples per second the audio tower hears */
    MEDIA_AUDIO_CLIP = 480000,         /* 30 s: the most one clip holds (HF max_length) */
    MEDIA_AUDIO_MAX_SECONDS = 600,     /* the longest audio plume decodes: 20 clips */
    MEDIA_AUDIO_MIN_RATE = 1000,       /* sample rates a file may have */
    MEDIA_AUDIO_MAX_RATE = 768000
};

/* Decoded audio (plume.h's plume_audio): mono samples at MEDIA_AUDIO_RATE, as libsndfile
 * normalizes them (integer PCM divided by 2^(bits-1): int16 / 32768 exactly; float files as
 * stored). */
struct plume_audio {
    float *pcm;           /* [n] */
    int64_t n;            /* samples, >= 1 */
    int32_t src_rate;     /* the file's sample rate and channels (for messages and docs) */
    int32_t src_channels;
    char format[48];      /* the container and codec: "WAV Signed 16 bit PCM", "Ogg Opus", "MP3" */
};
typedef struct plume_audio media_audio;

/* Decode a whole audio file held in data[len] (name is for messages): any container and codec
 * libsndfile reads, channels averaged, any rate from MEDIA_AUDIO_MIN_RATE to
 * MEDIA_AUDIO_MAX_RATE resampled to 16 kHz with libsoxr (16 kHz input is passed through).
 * PLUME_EFORMAT for bytes that are not audio, truncated files, no samples, NaN or infinite
 * samples, an unsupported rate or longer than MEDIA_AUDIO_MAX_SECONDS; PLUME_ENOMEM. */
int media_audio_decode(media_audio *a, const uint8_t *data, size_t len, const char *name, char **err);
/* media_audio_decode of a file (mapped, read once); PLUME_EIO if it cannot be read. */
int media_audio_load(media_audio *a, const char *path, char **err);
/* Audio from n mono float samples at rate Hz (copied; resampled to 16 kHz with libsoxr unless
 * rate is 16000). PLUME_EINVAL for a rate outside MEDIA_AUDIO_MIN_RATE..MAX_RATE, no samples,
 * more than MEDIA_AUDIO_MAX_SECONDS or a sample that is not finite; PLUME_ENOMEM. */
int media_audio_from_pcm(media_audio *a, const float *x, int64_t n, int32_t rate, char **err);
/* Free a's samples (a itself is the caller's). */
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
