/* decode_video.c -- video bytes -> the sampled frames of media_video (video.c), with FFmpeg's
 * libraries: libavformat demuxes (from memory, MP4/MOV and Matroska/WebM only: the format is
 * sniffed among those two and nothing else is opened), libavcodec decodes (H.264, HEVC, VP8,
 * VP9, AV1, MPEG-4 Part 2: whatever of these the system's libavcodec has), libswscale converts
 * the kept frames to RGB as the ffmpeg CLI's `-pix_fmt rgb24` does (bicubic flags, the frame's
 * own matrix and range, BT.601 limited when unset), after the rotation of the container's
 * display matrix (ffmpeg's autorotate: a transpose of the YUV planes, as the CLI's filter).
 *
 * Frames are counted by decoding (WebM has no count): a first pass reads the packets only, a
 * second decodes every frame and converts the sampled ones; if the decoder gave another count
 * than the packets, a third pass takes the right frames. The file is untrusted: its header's
 * size, duration and frame count are checked before decoding, the decoder is told the pixel
 * cap, every frame must keep the first one's size, and any demuxer or decoder error, a packet
 * cut short, a frame decoded with errors or fewer frames than the container lists refuses the
 * file with the library's message.
 *
 * FFmpeg's own log is routed to a per-thread buffer (its last error makes our message), not to
 * stderr: av_log_set_callback is process-wide, set once on the first decode. */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "media/media.h"

/* ---- FFmpeg's log ------------------------------------------------------------------------ */

static _Thread_local char vd_last[200]; /* the last error FFmpeg logged on this thread */
static pthread_once_t vd_once = PTHREAD_ONCE_INIT;

/* av_log callback: keep errors for our message, print nothing. */
static void vd_log(void *avcl, int level, const char *fmt, va_list vl) {
    (void)avcl;
    if (level > AV_LOG_ERROR) return;
    vsnprintf(vd_last, sizeof vd_last, fmt, vl);
    size_t n = strlen(vd_last);
    while (n && (vd_last[n - 1] == '\n' || vd_last[n - 1] == ' ')) vd_last[--n] = 0;
}

static void vd_log_init(void) { av_log_set_callback(vd_log); }

/* PLUME_EFORMAT naming the file, what failed, FFmpeg's code and its last logged error. */
static int vd_fail(char **err, const char *name, const char *what, int averr) {
    char msg[AV_ERROR_MAX_STRING_SIZE] = "";
    if (averr) av_strerror(averr, msg, sizeof msg);
    const int say = averr && vd_last[0]; /* FFmpeg's log only with its own error */
    return plume_fail(err, PLUME_EFORMAT, "%s: %s%s%s%s%s", name, what, averr ? ": " : "", msg, say ? "; " : "",
                      say ? vd_last : "");
}

/* ---- reading from memory ------------------------------------------------------------------- */

typedef struct {
    const uint8_t *b;
    size_t n, pos;
} vd_mem;

/* AVIOContext read: up to size bytes from the cursor. */
static int vd_read(void *opaque, uint8_t *buf, int size) {
    vd_mem *m = opaque;
    size_t left = m->n - m->pos, k = size < 0 ? 0 : (size_t)size;
    if (k > left) k = left;
    if (!k) return AVERROR_EOF;
    memcpy(buf, m->b + m->pos, k);
    m->pos += k;
    return (int)k;
}

/* AVIOContext seek (AVSEEK_SIZE: the size). */
static int64_t vd_seek(void *opaque, int64_t off, int whence) {
    vd_mem *m = opaque;
    whence &= ~AVSEEK_FORCE;
    int64_t base = whence == SEEK_CUR ? (int64_t)m->pos : whence == SEEK_END ? (int64_t)m->n : 0;
    if (whence == AVSEEK_SIZE) return (int64_t)m->n;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return AVERROR(EINVAL);
    if (off > (int64_t)m->n - base || base + off < 0) return AVERROR(EINVAL);
    m->pos = (size_t)(base + off);
    return (int64_t)m->pos;
}

/* ---- one open file ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    vd_mem mem;
    AVIOContext *io;
    AVFormatContext *fmt;
    int vs, as;                 /* the video stream, the audio stream (-1: none/unwanted) */
    AVCodecContext *vdec, *adec;
    AVPacket *pkt;
    AVFrame *frame, *rot;       /* a decoded frame; its rotated copy (planar formats) */
    struct SwsContext *sws;
    int32_t rotation;           /* degrees clockwise: 0, 90, 180, 270 */
    uint8_t *rgb;               /* [h, w, 3] one converted frame (w, h after rotation) */
    uint8_t *rgb2;              /* [h, w, 3] the conversion before a rotation done on RGB */
    uint8_t *pad;               /* [h, stride] what libswscale writes: its SIMD rows run past
                                   w * 3 bytes, so rows are padded and the buffer has a tail */
    int stride;
    int32_t fw, fh;             /* the first decoded frame's size (before rotation) */
    float *pcm;                 /* the sound track, mono: [n_pcm] of cap_pcm */
    int64_t n_pcm, cap_pcm;
    int32_t rate;
    int (*abort)(void *ctx);    /* the caller's stop, asked between packets; or NULL */
    void *abort_ctx;
} vd_file;

/* Close what vd_open and the passes made. */
static void vd_close(vd_file *f) {
    avcodec_free_context(&f->vdec);
    avcodec_free_context(&f->adec);
    av_packet_free(&f->pkt);
    av_frame_free(&f->frame);
    av_frame_free(&f->rot);
    sws_freeContext(f->sws);
    f->sws = NULL;
    avformat_close_input(&f->fmt);
    if (f->io) av_freep(&f->io->buffer);
    avio_context_free(&f->io);
    free(f->rgb);
    free(f->rgb2);
    av_freep(&f->pad);
    f->rgb = f->rgb2 = NULL;
}

/* The clockwise rotation ffmpeg's autorotate applies for a display matrix (0, 90, 180, 270). */
static int32_t vd_rotation(const AVStream *st) {
    size_t size = 0;
    const int32_t *dm = (const int32_t *)av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!dm || size < 9 * sizeof(int32_t)) return 0;
    double theta = -round(av_display_rotation_get(dm));
    if (isnan(theta)) return 0;
    theta -= 360 * floor(theta / 360 + 0.9 / 360);
    if (fabs(theta - 90) < 1.0) return 90;
    if (fabs(theta - 180) < 1.0) return 180;
    if (fabs(theta - 270) < 1.0) return 270;
    return 0;
}

/* A decoder for a stream's codec: libdav1d first for AV1 (FFmpeg's own av1 decodes through
 * hardware only). */
static const AVCodec *vd_decoder(enum AVCodecID id) {
    if (id == AV_CODEC_ID_AV1) {
        const AVCodec *d = avcodec_find_decoder_by_name("libdav1d");
        if (d) return d;
    }
    return avcodec_find_decoder(id);
}

/* Open a codec context for stream st. */
static int vd_open_codec(vd_file *f, AVStream *st, AVCodecContext **out, int32_t n_threads, char **err) {
    const AVCodec *dec = vd_decoder(st->codecpar->codec_id);
    if (!dec)
        return plume_fail(err, PLUME_EFORMAT, "%s: this system's libavcodec has no decoder for %s", f->name,
                          avcodec_get_name(st->codecpar->codec_id));
    AVCodecContext *c = avcodec_alloc_context3(dec);
    if (!c) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    *out = c;
    int r = avcodec_parameters_to_context(c, st->codecpar);
    if (r < 0) return vd_fail(err, f->name, "bad codec parameters", r);
    c->pkt_timebase = st->time_base;
    c->thread_count = n_threads;
    c->max_pixels = MEDIA_VIDEO_MAX_PIXELS;
    /* a bitstream error is an error, not a concealed frame (a silent wrong answer) */
    c->err_recognition |= AV_EF_EXPLODE | AV_EF_BITSTREAM | AV_EF_BUFFER;
    if ((r = avcodec_open2(c, dec, NULL)) < 0) return vd_fail(err, f->name, "cannot open the decoder", r);
    return 0;
}

/* An EBML variable-size integer at b[*i] (the ID keeps its marker bit, a size drops it; a size
 * with every value bit set is "unknown": *unknown = 1). -1 when the bytes end. */
static int64_t vd_ebml(const uint8_t *b, size_t n, size_t *i, int keep_marker, int *unknown) {
    if (*i >= n || !b[*i]) return -1;
    int len = 1;
    while (!(b[*i] & (0x80 >> (len - 1)))) len++;
    if (*i + (size_t)len > n) return -1;
    uint64_t v = keep_marker ? b[*i] : (uint64_t)(b[*i] & (0xff >> len));
    int ones = (b[*i] & (0xff >> len)) == (0xff >> len);
    for (int k = 1; k < len; k++) {
        v = v << 8 | b[*i + (size_t)k];
        ones &= b[*i + (size_t)k] == 0xff;
    }
    *i += (size_t)len;
    if (unknown) *unknown = ones;
    return (int64_t)(v & 0x7fffffffffffffffull);
}

/* Whether a Matroska/WebM file is shorter than its Segment element says (a truncated file: the
 * demuxer stops at the end of the bytes without an error). A segment of unknown size (a live
 * recording) cannot tell. */
static int vd_mkv_short(const uint8_t *b, size_t n) {
    size_t i = 0;
    int unknown = 0;
    if (vd_ebml(b, n, &i, 1, NULL) != 0x1A45DFA3) return 0;
    int64_t size = vd_ebml(b, n, &i, 0, &unknown);
    if (size < 0 || unknown || (uint64_t)size > n - i) return 0;
    i += (size_t)size;
    if (vd_ebml(b, n, &i, 1, NULL) != 0x18538067) return 0;
    size = vd_ebml(b, n, &i, 0, &unknown);
    return size >= 0 && !unknown && (uint64_t)size > n - i;
}

/* Open data as a container, pick its first video stream (and audio stream when want_audio),
 * check the header's size, duration and frame count. */
static int vd_open(vd_file *f, const uint8_t *data, size_t len, int want_audio, int32_t n_threads, int decode,
                   char **err) {
    f->mem = (vd_mem){data, len, 0};
    f->vs = f->as = -1;
    enum { IO_BUF = 1 << 16 };
    uint8_t *buf = av_malloc(IO_BUF);
    f->io = buf ? avio_alloc_context(buf, IO_BUF, 0, &f->mem, vd_read, NULL, vd_seek) : NULL;
    if (!f->io) {
        av_free(buf);
        return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    }
    f->fmt = avformat_alloc_context();
    if (!f->fmt) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    f->fmt->pb = f->io;
    f->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    f->fmt->format_whitelist = av_strdup("mov,matroska");
    AVDictionary *opt = NULL;
    av_dict_set(&opt, "enable_drefs", "0", 0); /* an MP4 never opens another file */
    int r = avformat_open_input(&f->fmt, NULL, NULL, &opt);
    av_dict_free(&opt);
    if (r < 0) {
        f->fmt = NULL; /* freed by avformat_open_input */
        return plume_fail(err, PLUME_EFORMAT, "%s: not a video plume reads (MP4, MOV, MKV or WebM)%s%s", f->name,
                          vd_last[0] ? ": " : "", vd_last);
    }
    /* the probe decodes a few frames: under the same pixel cap */
    AVDictionary **sopt = av_calloc(f->fmt->nb_streams ? f->fmt->nb_streams : 1, sizeof *sopt);
    if (!sopt) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    char cap[32];
    snprintf(cap, sizeof cap, "%lld", (long long)MEDIA_VIDEO_MAX_PIXELS);
    for (unsigned i = 0; i < f->fmt->nb_streams; i++) av_dict_set(&sopt[i], "max_pixels", cap, 0);
    const unsigned n_streams = f->fmt->nb_streams;
    r = avformat_find_stream_info(f->fmt, sopt);
    for (unsigned i = 0; i < n_streams; i++) av_dict_free(&sopt[i]);
    av_free(sopt);
    if (r < 0) return vd_fail(err, f->name, "unreadable streams", r);
    if (!strcmp(f->fmt->iformat->name, "matroska,webm") && vd_mkv_short(data, len))
        return plume_fail(err, PLUME_EFORMAT, "%s: the file ends before its Matroska segment does (truncated)", f->name);
    f->vs = av_find_best_stream(f->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (f->vs < 0) return plume_fail(err, PLUME_EFORMAT, "%s: the file has no video stream", f->name);
    AVStream *st = f->fmt->streams[f->vs];
    const AVCodecParameters *cp = st->codecpar;
    static const enum AVCodecID ok[] = {AV_CODEC_ID_H264, AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8,
                                        AV_CODEC_ID_VP9,  AV_CODEC_ID_AV1,  AV_CODEC_ID_MPEG4};
    int known = 0;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) known |= cp->codec_id == ok[i];
    if (!known)
        return plume_fail(err, PLUME_EFORMAT, "%s: video codec %s is not one plume decodes (H.264, HEVC, VP8, VP9, AV1, MPEG-4)",
                          f->name, avcodec_get_name(cp->codec_id));
    if (cp->width <= 0 || cp->height <= 0 || cp->width > MEDIA_VIDEO_MAX_SIDE || cp->height > MEDIA_VIDEO_MAX_SIDE ||
        (int64_t)cp->width * cp->height > MEDIA_VIDEO_MAX_PIXELS)
        return plume_fail(err, PLUME_EFORMAT, "%s: frames of %d x %d pixels are out of bounds (at most %lld pixels, %d a side)",
                          f->name, cp->width, cp->height, (long long)MEDIA_VIDEO_MAX_PIXELS, MEDIA_VIDEO_MAX_SIDE);
    double secs = -1;
    if (st->duration > 0 && st->time_base.num > 0 && st->time_base.den > 0) secs = (double)st->duration * av_q2d(st->time_base);
    else if (f->fmt->duration > 0) secs = (double)f->fmt->duration / AV_TIME_BASE;
    if (secs > MEDIA_VIDEO_MAX_SECONDS)
        return plume_fail(err, PLUME_EFORMAT, "%s: %.0f s of video is more than plume decodes (%d s)", f->name, secs,
                          MEDIA_VIDEO_MAX_SECONDS);
    if (st->nb_frames > MEDIA_VIDEO_MAX_FRAMES)
        return plume_fail(err, PLUME_EFORMAT, "%s: %lld frames is more than plume decodes (%d)", f->name,
                          (long long)st->nb_frames, MEDIA_VIDEO_MAX_FRAMES);
    f->rotation = vd_rotation(st);
    if (want_audio) f->as = av_find_best_stream(f->fmt, AVMEDIA_TYPE_AUDIO, -1, f->vs, NULL, 0);
    if (f->as < 0) f->as = -1;
    if (!(f->pkt = av_packet_alloc()) || !(f->frame = av_frame_alloc()))
        return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    if (!decode) return 0;
    r = vd_open_codec(f, st, &f->vdec, n_threads, err);
    if (!r && f->as >= 0) r = vd_open_codec(f, f->fmt->streams[f->as], &f->adec, 1, err);
    return r;
}

/* The stream's frames a second as PyAV's average_rate gives it (r_frame_rate when absent). */
static double vd_fps(const vd_file *f) {
    const AVStream *st = f->fmt->streams[f->vs];
    if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) return av_q2d(st->avg_frame_rate);
    if (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0) return av_q2d(st->r_frame_rate);
    return 0;
}

/* ---- frames: rotation and RGB ---------------------------------------------------------- */

/* Rotate plane src [h, w] of bpp-byte samples clockwise by rot into dst (its size swapped for
 * 90 and 270): ffmpeg's transpose=clock, hflip+vflip, transpose=cclock. */
static void vd_rotate_plane(const uint8_t *src, int ls, int32_t w, int32_t h, uint8_t *dst, int ld, int32_t bpp,
                            int32_t rot) {
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            int32_t ox = x, oy = y;
            if (rot == 90) ox = h - 1 - y, oy = x;
            else if (rot == 180) ox = w - 1 - x, oy = h - 1 - y;
            else if (rot == 270) ox = y, oy = w - 1 - x;
            memcpy(dst + (size_t)oy * (size_t)ld + (size_t)ox * (size_t)bpp, src + (size_t)y * (size_t)ls + (size_t)x * (size_t)bpp,
                   (size_t)bpp);
        }
}

/* Whether fr's pixel format is planar with whole-byte samples (what vd_rotate_frame turns). */
static int vd_planar(enum AVPixelFormat pf) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(pf);
    if (!d || !(d->flags & AV_PIX_FMT_FLAG_PLANAR) || (d->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_PAL)))
        return 0;
    for (int i = 0; i < d->nb_components; i++)
        if (d->comp[i].step != (d->comp[i].depth + 7) / 8 || d->comp[i].offset) return 0;
    return 1;
}

/* f->rot = f->frame rotated by f->rotation, plane by plane. */
static int vd_rotate_frame(vd_file *f, char **err) {
    const AVFrame *in = f->frame;
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(in->format);
    const int swap = f->rotation != 180;
    AVFrame *o = f->rot;
    if (!o || o->format != in->format || o->width != (swap ? in->height : in->width) ||
        o->height != (swap ? in->width : in->height)) {
        av_frame_free(&f->rot);
        o = f->rot = av_frame_alloc();
        if (!o) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
        o->format = in->format;
        o->width = swap ? in->height : in->width;
        o->height = swap ? in->width : in->height;
        if (av_frame_get_buffer(o, 0) < 0) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    }
    o->colorspace = in->colorspace;
    o->color_range = in->color_range;
    for (int p = 0; p < av_pix_fmt_count_planes(in->format); p++) {
        int32_t bpp = (d->comp[0].depth + 7) / 8;
        for (int i = 0; i < d->nb_components; i++)
            if (d->comp[i].plane == p) bpp = d->comp[i].step;
        const int chroma = p == 1 || p == 2;
        const int32_t w = chroma ? AV_CEIL_RSHIFT(in->width, d->log2_chroma_w) : in->width;
        const int32_t h = chroma ? AV_CEIL_RSHIFT(in->height, d->log2_chroma_h) : in->height;
        vd_rotate_plane(in->data[p], in->linesize[p], w, h, o->data[p], o->linesize[p], bpp, f->rotation);
    }
    return 0;
}

/* The current frame (rotated) as RGB into f->rgb, as the ffmpeg CLI's scale to rgb24: bicubic
 * flags, the frame's matrix ("auto": BT.601 when unset) and range. Returns the RGB buffer. */
static int vd_to_rgb(vd_file *f, const uint8_t **rgb, char **err) {
    const AVFrame *fr = f->frame;
    int32_t rot_rgb = 0;
    if (f->rotation) {
        if (vd_planar(fr->format)) {
            int rc = vd_rotate_frame(f, err);
            if (rc) return rc;
            fr = f->rot;
        } else {
            rot_rgb = f->rotation;
        }
    }
    f->sws = sws_getCachedContext(f->sws, fr->width, fr->height, fr->format, fr->width, fr->height, AV_PIX_FMT_RGB24,
                                  SWS_BICUBIC, NULL, NULL, NULL);
    if (!f->sws)
        return plume_fail(err, PLUME_EFORMAT, "%s: cannot convert pixel format %s to RGB", f->name,
                          av_get_pix_fmt_name(fr->format));
    int cs = fr->colorspace;
    if (cs < 1 || cs > 10 || cs == 8) cs = AVCOL_SPC_BT470BG;
    int *inv, *tab, in_full, out_full, bri, con, sat;
    if (sws_getColorspaceDetails(f->sws, &inv, &in_full, &tab, &out_full, &bri, &con, &sat) >= 0) {
        if (fr->color_range != AVCOL_RANGE_UNSPECIFIED) in_full = fr->color_range == AVCOL_RANGE_JPEG;
        sws_setColorspaceDetails(f->sws, sws_getCoefficients(cs), in_full, tab, out_full, bri, con, sat);
    }
    uint8_t *dst[4] = {f->pad, NULL, NULL, NULL};
    int dls[4] = {f->stride, 0, 0, 0};
    if (sws_scale(f->sws, (const uint8_t *const *)fr->data, fr->linesize, 0, fr->height, dst, dls) != fr->height)
        return vd_fail(err, f->name, "the RGB conversion failed", 0);
    uint8_t *rgb_out = rot_rgb ? f->rgb2 : f->rgb;
    for (int32_t y = 0; y < fr->height; y++)
        memcpy(rgb_out + (size_t)y * (size_t)fr->width * 3, f->pad + (size_t)y * (size_t)f->stride, (size_t)fr->width * 3);
    if (rot_rgb) vd_rotate_plane(f->rgb2, fr->width * 3, fr->width, fr->height, f->rgb, fr->height * 3, 3, rot_rgb);
    *rgb = f->rgb;
    return 0;
}

/* ---- the sound track -------------------------------------------------------------------- */

/* Sample i of channel c of an audio frame as a float (PCM as libsndfile normalizes it). */
static float vd_sample(const AVFrame *a, int c, int i, int nch) {
    const enum AVSampleFormat sf = a->format;
    const int planar = av_sample_fmt_is_planar(sf);
    const uint8_t *p = planar ? a->extended_data[c] : a->extended_data[0];
    const int k = planar ? i : i * nch + c;
    switch (av_get_packed_sample_fmt(sf)) {
    case AV_SAMPLE_FMT_U8: return ((float)p[k] - 128.0f) / 128.0f;
    case AV_SAMPLE_FMT_S16: return (float)((const int16_t *)p)[k] / 32768.0f;
    case AV_SAMPLE_FMT_S32: return (float)((double)((const int32_t *)p)[k] / 2147483648.0);
    case AV_SAMPLE_FMT_FLT: return ((const float *)p)[k];
    case AV_SAMPLE_FMT_DBL: return (float)((const double *)p)[k];
    default: return 0.0f;
    }
}

/* Append the decoded audio frame, channels averaged. */
static int vd_take_audio(vd_file *f, const AVFrame *a, char **err) {
    const int nch = a->ch_layout.nb_channels;
    if (nch < 1 || a->sample_rate < MEDIA_AUDIO_MIN_RATE || a->sample_rate > MEDIA_AUDIO_MAX_RATE)
        return plume_fail(err, PLUME_EFORMAT, "%s: the sound track has %d channels at %d Hz", f->name, nch, a->sample_rate);
    const enum AVSampleFormat pk = av_get_packed_sample_fmt(a->format);
    if (pk != AV_SAMPLE_FMT_U8 && pk != AV_SAMPLE_FMT_S16 && pk != AV_SAMPLE_FMT_S32 && pk != AV_SAMPLE_FMT_FLT &&
        pk != AV_SAMPLE_FMT_DBL)
        return plume_fail(err, PLUME_EFORMAT, "%s: the sound track's sample format %s", f->name, av_get_sample_fmt_name(a->format));
    if (f->rate && f->rate != a->sample_rate)
        return plume_fail(err, PLUME_EFORMAT, "%s: the sound track changes rate (%d then %d Hz)", f->name, f->rate, a->sample_rate);
    f->rate = a->sample_rate;
    if (f->n_pcm + a->nb_samples > (int64_t)MEDIA_AUDIO_MAX_SECONDS * f->rate)
        return plume_fail(err, PLUME_EFORMAT, "%s: the sound track is longer than plume decodes (%d s)", f->name,
                          MEDIA_AUDIO_MAX_SECONDS);
    if (f->n_pcm + a->nb_samples > f->cap_pcm) {
        int64_t cap = f->cap_pcm ? f->cap_pcm * 2 : 1 << 16;
        while (cap < f->n_pcm + a->nb_samples) cap *= 2;
        float *p = realloc(f->pcm, (size_t)cap * sizeof *p);
        if (!p) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory for the sound track", f->name);
        f->pcm = p;
        f->cap_pcm = cap;
    }
    for (int i = 0; i < a->nb_samples; i++) {
        double s = 0;
        for (int c = 0; c < nch; c++) s += vd_sample(a, c, i, nch);
        f->pcm[f->n_pcm++] = (float)(s / nch);
    }
    return 0;
}

/* Send pkt (NULL: flush) to the audio decoder and take its frames. */
static int vd_audio_packet(vd_file *f, const AVPacket *pkt, char **err) {
    int r = avcodec_send_packet(f->adec, pkt);
    if (r < 0 && r != AVERROR_EOF) return vd_fail(err, f->name, "the sound track does not decode", r);
    while ((r = avcodec_receive_frame(f->adec, f->frame)) >= 0) {
        int rc = vd_take_audio(f, f->frame, err);
        av_frame_unref(f->frame);
        if (rc) return rc;
    }
    return r == AVERROR(EAGAIN) || r == AVERROR_EOF ? 0 : vd_fail(err, f->name, "the sound track does not decode", r);
}

/* ---- the passes ------------------------------------------------------------------------- */

/* PLUME_ECANCELED when the caller's abort callback says stop, else 0. */
static int vd_aborted(const vd_file *f, char **err) {
    if (!f->abort || !f->abort(f->abort_ctx)) return 0;
    return plume_fail(err, PLUME_ECANCELED, "%s: the decode was stopped", f->name);
}

/* Count the video packets without decoding (the frame count to sample by, checked later). */
static int vd_count_packets(vd_file *f, int64_t *count, char **err) {
    int r;
    *count = 0;
    while ((r = av_read_frame(f->fmt, f->pkt)) >= 0) {
        if ((*count & 255) == 255 && vd_aborted(f, err)) { /* a cheap pass: asked every 256 packets */
            av_packet_unref(f->pkt);
            return PLUME_ECANCELED;
        }
        const int corrupt = (f->pkt->flags & AV_PKT_FLAG_CORRUPT) != 0, video = f->pkt->stream_index == f->vs;
        const int64_t ts = f->pkt->pts != AV_NOPTS_VALUE ? f->pkt->pts : f->pkt->dts;
        const double at = video && ts != AV_NOPTS_VALUE ? (double)ts * av_q2d(f->fmt->streams[f->vs]->time_base) : 0;
        av_packet_unref(f->pkt);
        if (at > MEDIA_VIDEO_MAX_SECONDS) /* the timestamps, whatever the header said */
            return plume_fail(err, PLUME_EFORMAT, "%s: a frame at %.0f s: more than plume decodes (%d s)", f->name, at,
                              MEDIA_VIDEO_MAX_SECONDS);
        if (corrupt) return vd_fail(err, f->name, "a packet is cut short or corrupt (the file is truncated?)", 0);
        if (video && ++*count > MEDIA_VIDEO_MAX_FRAMES)
            return plume_fail(err, PLUME_EFORMAT, "%s: more than %d frames", f->name, MEDIA_VIDEO_MAX_FRAMES);
    }
    if (r != AVERROR_EOF) return vd_fail(err, f->name, "the container is corrupt or truncated", r);
    const int64_t listed = f->fmt->streams[f->vs]->nb_frames;
    if (listed > 0 && *count < listed)
        return plume_fail(err, PLUME_EFORMAT, "%s: the file ends after %lld of its %lld frames (truncated)", f->name,
                          (long long)*count, (long long)listed);
    if (*count == 0) return plume_fail(err, PLUME_EFORMAT, "%s: the video stream has no frames", f->name);
    return 0;
}

/* What one decoding pass is after: the frame count it samples by and where it stands. */
typedef struct {
    int32_t n_expect;   /* the frame count the sampling assumes (the packets, or a pass's count) */
    double fps;
    int keep_full;
    int64_t k;          /* frames decoded so far */
    int32_t next;       /* the next sampled frame to fill (v->n when all are) */
} vd_pass;

/* Take decoded frame p->k: check its size and errors; on the first, size v (media_video_init);
 * convert it when it is sampled. */
static int vd_take_frame(vd_file *f, media_video *v, vd_pass *p, char **err) {
    const AVFrame *fr = f->frame;
    if (fr->decode_error_flags || (fr->flags & AV_FRAME_FLAG_CORRUPT))
        return plume_fail(err, PLUME_EFORMAT, "%s: frame %lld decodes with errors (a corrupt stream)", f->name,
                          (long long)p->k);
    if (!f->fw) {
        const int swap = f->rotation == 90 || f->rotation == 270;
        const int32_t w = swap ? fr->height : fr->width, h = swap ? fr->width : fr->height;
        int rc = media_video_init(v, w, h, p->n_expect, p->fps, p->keep_full, err);
        if (rc) return rc;
        f->fw = fr->width;
        f->fh = fr->height;
        f->rgb = malloc((size_t)w * (size_t)h * 3);
        f->rgb2 = f->rotation ? malloc((size_t)w * (size_t)h * 3) : NULL;
        const int32_t side = w > h ? w : h; /* the converted frame is w x h or h x w */
        f->stride = (side * 3 + 63) / 64 * 64 + 64;
        f->pad = av_malloc((size_t)f->stride * (size_t)side + 256);
        if (!f->rgb || (f->rotation && !f->rgb2) || !f->pad)
            return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", f->name);
    } else if (fr->width != f->fw || fr->height != f->fh) {
        return plume_fail(err, PLUME_EFORMAT, "%s: the frame size changes from %d x %d to %d x %d at frame %lld", f->name,
                          f->fw, f->fh, fr->width, fr->height, (long long)p->k);
    }
    if (p->next < v->n && v->index[p->next] == p->k) {
        const uint8_t *rgb = NULL;
        int rc = vd_to_rgb(f, &rgb, err);
        if (!rc) rc = media_video_put(v, p->next, rgb, err);
        if (rc) return rc;
        p->next++;
    }
    if (++p->k > MEDIA_VIDEO_MAX_FRAMES)
        return plume_fail(err, PLUME_EFORMAT, "%s: more than %d frames", f->name, MEDIA_VIDEO_MAX_FRAMES);
    return 0;
}

/* Send pkt (NULL: flush) to the video decoder and take its frames. */
static int vd_video_packet(vd_file *f, media_video *v, vd_pass *p, const AVPacket *pkt, char **err) {
    int r = avcodec_send_packet(f->vdec, pkt);
    if (r < 0 && r != AVERROR_EOF) return vd_fail(err, f->name, "the video stream does not decode", r);
    while ((r = avcodec_receive_frame(f->vdec, f->frame)) >= 0) {
        int rc = vd_take_frame(f, v, p, err);
        av_frame_unref(f->frame);
        if (rc) return rc;
    }
    return r == AVERROR(EAGAIN) || r == AVERROR_EOF ? 0 : vd_fail(err, f->name, "the video stream does not decode", r);
}

/* Decode every frame of the open file (and the sound track when open), filling v's sampled
 * frames as if it had p->n_expect frames; p->k is then the count. */
static int vd_decode_all(vd_file *f, media_video *v, vd_pass *p, char **err) {
    int r = 0, rc = 0;
    while (!rc && !(rc = vd_aborted(f, err)) && (r = av_read_frame(f->fmt, f->pkt)) >= 0) {
        if (f->pkt->flags & AV_PKT_FLAG_CORRUPT) rc = vd_fail(err, f->name, "a packet is cut short or corrupt", 0);
        else if (f->pkt->stream_index == f->vs) rc = vd_video_packet(f, v, p, f->pkt, err);
        else if (f->pkt->stream_index == f->as) rc = vd_audio_packet(f, f->pkt, err);
        av_packet_unref(f->pkt);
    }
    if (rc) return rc;
    if (r != AVERROR_EOF) return vd_fail(err, f->name, "the container is corrupt or truncated", r);
    rc = vd_video_packet(f, v, p, NULL, err);
    if (!rc && f->adec) rc = vd_audio_packet(f, NULL, err);
    if (!rc && p->k == 0) rc = plume_fail(err, PLUME_EFORMAT, "%s: no frame decodes", f->name);
    return rc;
}

/* ---- the whole file ----------------------------------------------------------------------- */

int media_video_decode(media_video *v, const uint8_t *data, size_t len, const char *name, const media_video_opts *o,
                       char **err) {
    memset(v, 0, sizeof *v);
    pthread_once(&vd_once, vd_log_init);
    vd_last[0] = 0;
    if (!data || !len) return plume_fail(err, PLUME_EFORMAT, "%s: an empty file is not a video", name);
    if (len > MEDIA_VIDEO_MAX_BYTES)
        return plume_fail(err, PLUME_EFORMAT, "%s: %zu bytes is more than plume reads of a video (%d)", name, len,
                          MEDIA_VIDEO_MAX_BYTES);
    const media_video_opts dflt = {0};
    if (!o) o = &dflt;
    const int32_t threads = o->n_threads > 0 ? o->n_threads : 4;
    /* pass 1: the packets, to sample by */
    vd_file f = {.name = name, .abort = o->abort, .abort_ctx = o->abort_ctx};
    int64_t n_pkt = 0;
    int rc = vd_open(&f, data, len, 0, threads, 0, err);
    if (!rc) rc = vd_count_packets(&f, &n_pkt, err);
    vd_pass p = {.n_expect = (int32_t)n_pkt, .fps = rc ? 0 : vd_fps(&f), .keep_full = o->keep_full};
    vd_close(&f);
    /* pass 2 (and 3 when the decoder's count is not the packets'): decode, keep the sampled */
    for (int pass = 0; !rc; pass++) {
        vd_file g = {.name = name, .abort = o->abort, .abort_ctx = o->abort_ctx};
        media_video_free(v);
        rc = vd_open(&g, data, len, o->audio, threads, 1, err);
        if (!rc) rc = vd_decode_all(&g, v, &p, err);
        if (!rc && g.pcm) {
            v->audio = calloc(1, sizeof *v->audio);
            rc = v->audio ? media_audio_from_pcm(v->audio, g.pcm, g.n_pcm, g.rate, err)
                          : plume_fail(err, PLUME_ENOMEM, "%s: out of memory", name);
        }
        if (!rc) {
            const AVStream *st = g.fmt->streams[g.vs];
            snprintf(v->format, sizeof v->format, "%s %s", g.fmt->iformat->name, avcodec_get_name(st->codecpar->codec_id));
            v->rotation = g.rotation;
        }
        free(g.pcm);
        vd_close(&g);
        if (rc || p.k == p.n_expect) break;
        if (pass == 1)
            rc = plume_fail(err, PLUME_EFORMAT, "%s: the decoder gives %d frames, then %lld", name, p.n_expect, (long long)p.k);
        p = (vd_pass){.n_expect = (int32_t)p.k, .fps = p.fps, .keep_full = p.keep_full};
    }
    if (rc) media_video_free(v);
    return rc;
}

int media_video_size(const uint8_t *data, size_t len, int32_t *w, int32_t *h, char **err) {
    pthread_once(&vd_once, vd_log_init);
    vd_last[0] = 0;
    if (!data || !len) return plume_fail(err, PLUME_EFORMAT, "video: an empty file is not a video");
    if (len > MEDIA_VIDEO_MAX_BYTES)
        return plume_fail(err, PLUME_EFORMAT, "video: %zu bytes is more than plume reads of a video (%d)", len,
                          MEDIA_VIDEO_MAX_BYTES);
    vd_file f = {.name = "video"};
    int rc = vd_open(&f, data, len, 0, 1, 0, err);
    if (!rc) {
        const AVCodecParameters *cp = f.fmt->streams[f.vs]->codecpar;
        const int swap = f.rotation == 90 || f.rotation == 270;
        *w = swap ? cp->height : cp->width;
        *h = swap ? cp->width : cp->height;
    }
    vd_close(&f);
    return rc;
}
