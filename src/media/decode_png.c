/* decode_png.c -- PNG -> RGB with libpng, as PIL opens a PNG and converts it to "RGB":
 *
 *   gray 1/2/4/8 bits   expanded to 0..255 (x255, x85, x17, x1), then replicated
 *   gray 16 bits        PIL's "I" -> "RGB": the value clipped to 255 (not its high byte)
 *   RGB, RGBA 16 bits   the high byte of each sample (PIL's "RGB;16B" raw mode)
 *   palette             the palette's colours
 *   alpha, tRNS         dropped (convert("RGB") keeps the stored colours: no compositing)
 *
 * libpng reports errors through a longjmp; the buffers it may leave behind live in one struct
 * freed on every path. The eXIf chunk, a "Raw profile type exif" text or the XMP text (before
 * or after the pixels) give the orientation (exif.c). */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>

#include "media/media.h"

/* The reader's state: the bytes, where it is, and the first error message. */
typedef struct {
    const uint8_t *b;
    size_t n, at;
    char msg[200];
    uint8_t *buf;      /* [h, rowbytes] decoded rows */
    png_bytep *rows;   /* [h] */
} png_src;

/* libpng's read callback over the bytes: a short read is a truncated file. */
static void png_read_mem(png_structp png, png_bytep out, png_size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "the file is truncated");
    memcpy(out, s->b + s->at, len);
    s->at += len;
}

/* libpng's error callback: keep the message, jump back. */
static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    if (!s->msg[0]) snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk, say) do not stop a decode, as in PIL. */
static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

/* The text of a libpng text entry and its length (tEXt, zTXt decompressed, iTXt in UTF-8). */
static size_t png_text_len(const png_text *t) {
#ifdef PNG_iTXt_SUPPORTED
    if (t->compression >= PNG_ITXT_COMPRESSION_NONE) return t->itxt_length;
#endif
    return t->text_length;
}

/* The orientation of a whole PNG, where Pillow finds it: its eXIf chunk, else the hex dump of
 * a "Raw profile type exif" text chunk, else (no tag in either) an "XML:com.adobe.xmp" text's
 * XMP. Chunks before and after the pixels count; of two texts with one keyword the last wins,
 * as in Pillow's info dict. */
static int32_t png_orientation(png_structp png, png_infop info, png_infop end) {
    const uint8_t *exif = NULL, *raw = NULL, *xmp = NULL;
    size_t exif_n = 0, raw_n = 0, xmp_n = 0;
    png_infop infos[2] = {info, end};
    for (int k = 0; k < 2; k++) {
#ifdef PNG_eXIf_SUPPORTED
        png_uint_32 n = 0;
        png_bytep e = NULL;
        if (png_get_eXIf_1(png, infos[k], &n, &e) && e && n) exif = e, exif_n = n;
#endif
        png_textp text = NULL;
        int nt = 0;
        png_get_text(png, infos[k], &text, &nt);
        for (int i = 0; text && i < nt; i++) {
            if (!text[i].key || !text[i].text) continue;
            if (!strcmp(text[i].key, "Raw profile type exif")) raw = (const uint8_t *)text[i].text, raw_n = png_text_len(&text[i]);
            if (!strcmp(text[i].key, "XML:com.adobe.xmp")) xmp = (const uint8_t *)text[i].text, xmp_n = png_text_len(&text[i]);
        }
    }
    uint8_t *dump = NULL;
    if (!exif && raw && media_exif_from_raw_profile(raw, raw_n, &dump, &exif_n) == 0) exif = dump;
    int32_t o = media_orientation_of(exif, exif_n, xmp, xmp_n);
    free(dump);
    return o;
}

/* Convert one decoded row (after the transforms set in decode) to RGB. */
static void png_row_rgb(const uint8_t *in, uint8_t *out, int32_t w, int channels, int depth16) {
    for (int32_t x = 0; x < w; x++, out += 3) {
        if (channels == 3) {
            memcpy(out, in + 3 * (size_t)x, 3);
        } else if (depth16) { /* gray 16: big-endian, clipped */
            uint32_t v = (uint32_t)in[2 * (size_t)x] << 8 | in[2 * (size_t)x + 1];
            out[0] = out[1] = out[2] = (uint8_t)(v > 255 ? 255 : v);
        } else {
            out[0] = out[1] = out[2] = in[x];
        }
    }
}

/* Decode with libpng; the caller's setjmp frame is this function's. */
static int png_run(png_src *s, png_structp png, png_infop info, png_infop end, plume_image **out, int32_t *o,
                   char **err) {
    if (setjmp(png_jmpbuf(png))) return plume_fail(err, PLUME_EFORMAT, "PNG: %s", s->msg[0] ? s->msg : "corrupt file");
    png_set_read_fn(png, s, png_read_mem);
    png_set_user_limits(png, MEDIA_MAX_SIDE, MEDIA_MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, color, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    int rc = media_check_size("PNG", (int64_t)w, (int64_t)h, err);
    if (rc) return rc;
    int gray16 = (color == PNG_COLOR_TYPE_GRAY) && depth == 16;
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !gray16) png_set_strip_16(png);
    if (color & PNG_COLOR_MASK_ALPHA || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if ((channels != 1 && channels != 3) || rowbytes < (size_t)w * (size_t)channels * (gray16 ? 2 : 1))
        return plume_fail(err, PLUME_EFORMAT, "PNG: unexpected layout (%d channels)", channels);
    if (rowbytes > (size_t)(MEDIA_MAX_PIXELS * 8) / h) return plume_fail(err, PLUME_EFORMAT, "PNG: rows too long");
    s->buf = malloc(rowbytes * h);
    s->rows = malloc(sizeof *s->rows * h);
    if (!s->buf || !s->rows) return plume_fail(err, PLUME_ENOMEM, "PNG: out of memory for %u x %u pixels", w, h);
    for (png_uint_32 y = 0; y < h; y++) s->rows[y] = s->buf + rowbytes * y;
    png_read_image(png, s->rows);
    png_read_end(png, end);
    *o = png_orientation(png, info, end);
    if ((rc = media_image_new(out, (int32_t)w, (int32_t)h, "PNG", err))) return rc;
    for (png_uint_32 y = 0; y < h; y++) png_row_rgb(s->rows[y], (*out)->rgb + (size_t)y * w * 3, (int32_t)w, channels, gray16);
    return 0;
}

int media_decode_png(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err) {
    *out = NULL;
    png_src s = {.b = b, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL, end = info ? png_create_info_struct(png) : NULL;
    int rc = end ? png_run(&s, png, info, end, out, orientation, err) : plume_fail(err, PLUME_ENOMEM, "PNG: out of memory");
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, end ? &end : NULL);
    free(s.buf);
    free(s.rows);
    if (rc) {
        plume_image_free(*out);
        *out = NULL;
    }
    return rc;
}
