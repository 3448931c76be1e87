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
 * Video: decoding video files (MP4/MOV, MKV/WebM; H.264, HEVC, VP8, VP9, AV1, MPEG-4 with
 * FFmpeg's libavformat, libavcodec and libswscale, from memory), frames counted by decoding,
 * Hugging Face's 32-frame sampling and MM:SS timestamps, torchvision's uint8 bicubic resize
 * (PyTorch's CPU kernel) to the 70-token size, the sound track as audio on request.
 *
 * Files, in calling order:
 *   decode_image.c sniff, orientation, the public plume_image_decode and plume_image_load
 *   image.c        the decoded image below the decoders: the pixel cap, allocation, the
 *                  public plume_image_* that make one from pixels, read and free it
 *   decode_png.c   decode_jpeg.c   decode_webp.c   one library each, to RGB
 *   exif.c         the orientation: the EXIF tag (also from a PNG raw profile), else the XMP
 *   resize.c       Pillow's two-pass bicubic resample with fixed-point coefficients
 *   patches.c      the target size of a budget, patches [N, p*p*3] and positions [N, 2]
 *   decode_audio.c audio bytes -> mono float samples at 16 kHz (media_audio), the public
 *                  plume_audio_* of plume.h that make, read and free it
 *   mel.c          samples -> log-mel frames and their mask (media_mel); the FFT
 *   video.c        the sampling rule, timestamps, the resized frames (media_video)
 *   decode_video.c video bytes -> sampled frames (+ the sound track) with FFmpeg's libraries
 *   resize_tv.c    torchvision's uint8 bicubic antialiased resize (PyTorch's CPU kernel)
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
    int32_t w, h;         /* pixels */
    uint8_t *rgb;         /* [h, w, 3] */
    int32_t budget;       /* 0, or the token budget it was shrunk for (plume_image_shrink): rgb is
                             then the tower's resized pixels of a src_w x src_h image */
    int32_t src_w, src_h; /* the decoded size before the shrink */
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
/* The canvas size of a WebP (the demuxer's, no pixels decoded). 0 or -1 (not a valid WebP). */
int media_webp_size(const uint8_t *b, size_t n, int32_t *w, int32_t *h);
int media_decode_webp(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err);

/* ---- exif.c: the orientation, where Pillow's getexif() finds it --------------------- */

/* The first value of the orientation tag (0x0112, any integer type: SHORT as the standard
 * says, LONG as some writers store it) of an EXIF block: a TIFF header and IFD0, optionally
 * after "Exif\0\0" (0 for a negative signed value); -1 when the block has no such tag or
 * cannot be read. */
int64_t media_exif_tag_orientation(const uint8_t *b, size_t n);
/* That tag as an orientation: 1..8, or 1 when absent, unreadable or out of range (a broken
 * EXIF block never fails a decode, as in Pillow). */
int32_t media_exif_orientation(const uint8_t *b, size_t n);
/* The digit of the first `tiff:Orientation="N"` or `tiff:Orientation>N` of an XMP packet
 * (Pillow's regular expression), or -1. */
int32_t media_xmp_orientation(const uint8_t *b, size_t n);
/* The EXIF block of a PNG "Raw profile type exif" text (ImageMagick's hex dump: 3 lines, then
 * hex digits, as Pillow's bytes.fromhex reads them) into *out (malloc'd, *len bytes): 0, or -1
 * for text that is not such a dump. */
int media_exif_from_raw_profile(const uint8_t *t, size_t n, uint8_t **out, size_t *len);
/* An image's orientation (1..8) from its EXIF block and XMP packet (either may be NULL): the
 * EXIF tag, or when the block has none, the XMP's; 1 when neither gives 1..8. */
int32_t media_orientation_of(const uint8_t *exif, size_t exif_n, const uint8_t *xmp, size_t xmp_n);

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
    MEDIA_AUDIO_MAX_RATE = 768000,
    MEDIA_AUDIO_MAX_AMPLITUDE = 1000000 /* |sample| a decoded file may hold: 120 dB over full scale */
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
/* The most bytes media_audio_decode of these bytes holds at once, from the header (no sample
 * decoded): 0, or PLUME_EFORMAT for a header it would refuse. */
int media_audio_peak(const uint8_t *data, size_t len, uint64_t *peak, const char *name, char **err);
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

/* ---- video: sampling, timestamps, frames (video.c, decode_video.c, resize_tv.c) ---------- */

enum {
    MEDIA_VIDEO_FRAMES = 32,          /* frames a video is sampled to (HF num_frames) */
    MEDIA_VIDEO_TOKENS = 70,          /* the token budget of each frame (HF max_soft_tokens) */
    MEDIA_VIDEO_PATCH = 16,           /* Gemma 4's vision patch and pooling: the resize plan */
    MEDIA_VIDEO_POOL = 3,
    MEDIA_VIDEO_MAX_SIDE = 8192,      /* a frame's side, and its pixels below */
    MEDIA_VIDEO_MAX_SECONDS = 3600,   /* the longest video decoded (by its header and its frames) */
    MEDIA_VIDEO_MAX_FRAMES = 216000,  /* the most frames counted: an hour at 60 a second */
    MEDIA_VIDEO_MAX_BYTES = 1 << 30   /* the largest file */
};
#define MEDIA_VIDEO_MAX_PIXELS (4096ll * 4096)
#define MEDIA_VIDEO_DEFAULT_FPS 24.0 /* HF's rate for timestamps when the rate is unknown */

/* A video as the model sees it (plume.h's plume_video): the sampled frames resized to the
 * 70-token size of Gemma 4's vision tower, their indices and timestamps. */
struct plume_video {
    int32_t w, h;          /* the decoded frames' size (after rotation) */
    int32_t n_decoded;     /* frames counted by decoding (HF's total_num_frames) */
    double fps;            /* frames a second (the stream's average rate; 24 when unknown) */
    int32_t rotation;      /* degrees clockwise applied from the container's display matrix */
    int32_t n;             /* sampled frames: 32, or n_decoded when fewer */
    int32_t *index;        /* [n] indices of the sampled frames, floor(i * n_decoded / 32) */
    char (*stamp)[16];     /* [n] "MM:SS" of each, truncated */
    media_plan plan;       /* the resize: th x tw, patches, tokens per frame */
    uint8_t *rgb;          /* [n, th, tw, 3] the resized frames */
    uint8_t *full;         /* [n, h, w, 3] the decoded frames before the resize, when asked */
    media_audio *audio;    /* the sound track (mono, 16 kHz) when asked and present, or NULL */
    char format[64];       /* the container and codec, "mov,mp4,m4a,3gp,3g2,mj2 h264" */
};
typedef struct plume_video media_video;

/* What media_video_decode keeps besides the resized frames. */
typedef struct {
    int32_t audio;      /* decode the first audio stream into v->audio (none: v->audio NULL) */
    int32_t keep_full;  /* keep the decoded sampled frames in v->full (tests, plume embed) */
    int32_t n_threads;  /* decoder threads; <= 0: up to 4 */
    int (*abort)(void *ctx); /* asked between packets: nonzero stops the decode (PLUME_ECANCELED); or NULL */
    void *abort_ctx;
} media_video_opts;

/* The frames HF keeps of n_decoded: n = min(32, n_decoded) indices floor(i * n_decoded / n')
 * with n' = 32 (all frames, in order, for a clip shorter than 32). Returns n. */
int32_t media_video_sample(int32_t n_decoded, int32_t *index);
/* The timestamp text of frame idx at fps: t = float32(idx) / float32(fps), "MM:SS" with both
 * truncated as Python's // and % give them (minutes not wrapped). */
void media_video_stamp(int32_t idx, double fps, char out[16]);
/* Start v for frames of w x h at fps with n_decoded frames: the plan, indices, stamps and the
 * frame buffers (full ones when keep_full). PLUME_EFORMAT for a size out of bounds. */
int media_video_init(media_video *v, int32_t w, int32_t h, int32_t n_decoded, double fps, int keep_full, char **err);
/* Store decoded frame k (0..n-1 of the sampled) rgb [h, w, 3]: resized into v->rgb (and copied
 * into v->full when kept). */
int media_video_put(media_video *v, int32_t k, const uint8_t *rgb, char **err);
/* A video from n decoded frames rgb [n, h, w, 3] at fps (<= 0: unknown, 24 for timestamps),
 * sampled and resized as a decoded file. */
int media_video_from_frames(media_video *v, const uint8_t *rgb, int32_t n, int32_t w, int32_t h, double fps,
                            int keep_full, char **err);
/* Decode a whole video file in data[len] (name is for messages): the container sniffed from the
 * bytes (MP4/MOV or Matroska/WebM only), the first video stream decoded to the end (frames
 * counted), the sampled frames converted to RGB as the ffmpeg CLI's rgb24 output, rotated as
 * the display matrix says, resized. PLUME_EFORMAT for anything else, a truncated or corrupt
 * stream, a size, duration or frame count over the limits; PLUME_ENOMEM. */
int media_video_decode(media_video *v, const uint8_t *data, size_t len, const char *name, const media_video_opts *o,
                       char **err);
/* The frame size data's container declares for its first video stream, rotated as the decode
 * would (header and probe only, no decoding pass). PLUME_EFORMAT as media_video_decode on its
 * header. */
int media_video_size(const uint8_t *data, size_t len, int32_t *w, int32_t *h, char **err);
/* Free what v holds (v itself is the caller's). */
void media_video_free(media_video *v);

/* torchvision's F.resize(uint8, BICUBIC, antialias=True) on a CPU: src [sh, sw, 3] -> dst
 * [dh, dw, 3] with PyTorch's int16 fixed point (resize_tv.c). 0 or PLUME_ENOMEM. */
int media_resize_tv(const uint8_t *src, int32_t sw, int32_t sh, uint8_t *dst, int32_t dw, int32_t dh, char **err);

#endif /* PLUME_MEDIA_H */
