/* decode_webp.c -- WebP -> RGB with libwebp's animation decoder, as Pillow decodes every WebP
 * (a still image is a one-frame animation): the first frame on the canvas in RGBA, then the
 * alpha dropped (convert("RGB")). The demuxer gives the canvas size, checked before the
 * decoder allocates it, and the orientation of the EXIF chunk, else of the XMP chunk. */
#include <stdlib.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "media/media.h"

int media_webp_size(const uint8_t *b, size_t n, int32_t *w, int32_t *h) {
    WebPData data = {b, n};
    WebPDemuxer *dmx = WebPDemux(&data);
    if (!dmx) return -1;
    uint32_t cw = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_WIDTH), ch = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_HEIGHT);
    WebPDemuxDelete(dmx);
    if (cw > INT32_MAX || ch > INT32_MAX) return -1;
    *w = (int32_t)cw;
    *h = (int32_t)ch;
    return 0;
}

int media_decode_webp(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err) {
    *out = NULL;
    WebPData data = {b, n};
    WebPDemuxer *dmx = WebPDemux(&data);
    if (!dmx) return plume_fail(err, PLUME_EFORMAT, "WebP: not a valid WebP file (or truncated)");
    uint32_t w = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_WIDTH), h = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_HEIGHT);
    int rc = media_check_size("WebP", w, h, err);
    WebPChunkIterator ex, xm;
    int has_ex = !rc && WebPDemuxGetChunk(dmx, "EXIF", 1, &ex), has_xm = !rc && WebPDemuxGetChunk(dmx, "XMP ", 1, &xm);
    if (has_ex || has_xm)
        *orientation = media_orientation_of(has_ex ? ex.chunk.bytes : NULL, has_ex ? ex.chunk.size : 0,
                                            has_xm ? xm.chunk.bytes : NULL, has_xm ? xm.chunk.size : 0);
    if (has_ex) WebPDemuxReleaseChunkIterator(&ex);
    if (has_xm) WebPDemuxReleaseChunkIterator(&xm);
    WebPDemuxDelete(dmx);
    if (rc) return rc;
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return plume_fail(err, PLUME_EFORMAT, "WebP: libwebp version mismatch");
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    if (!dec) return plume_fail(err, PLUME_EFORMAT, "WebP: cannot decode (corrupt or truncated file)");
    WebPAnimInfo info;
    uint8_t *rgba = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || info.canvas_width != w || info.canvas_height != h)
        rc = plume_fail(err, PLUME_EFORMAT, "WebP: inconsistent canvas size");
    else if (!WebPAnimDecoderGetNext(dec, &rgba, &ts) || !rgba)
        rc = plume_fail(err, PLUME_EFORMAT, "WebP: the first frame cannot be decoded (corrupt or truncated file)");
    else rc = media_image_new(out, (int32_t)w, (int32_t)h, "WebP", err);
    if (!rc)
        for (size_t i = 0; i < (size_t)w * h; i++) memcpy((*out)->rgb + 3 * i, rgba + 4 * i, 3);
    WebPAnimDecoderDelete(dec);
    return rc;
}
