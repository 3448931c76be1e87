/* decode_jpeg.c -- JPEG -> RGB with libjpeg-turbo, with the library's defaults (islow IDCT,
 * fancy upsampling), which are PIL's: the same decoder gives the same pixels. Gray JPEGs are
 * replicated; CMYK (and YCCK) ones go through PIL's CMYK -> RGB (r = 255 - k - c(255 - k)/255,
 * rounded as Pillow's MULDIV255) on samples taken as inverted: Pillow decodes every CMYK JPEG
 * with raw mode "CMYK;I" ("assume adobe conventions"), an Adobe APP14 marker or not.
 *
 * A truncated file is an error (PIL: "image file is truncated"), not the gray fill libjpeg
 * would give; a progressive file of more than 1000 scans is refused (a decoding-time bomb).
 * Errors longjmp out of libjpeg into this file; the APP1 markers ("Exif", else XMP) give the
 * orientation. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>
#include <jerror.h>

#include "media/media.h"

enum { JPEG_MAX_SCANS = 1000 };

/* libjpeg's error manager, with the jump back and the first message. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX + 32];
} jpeg_err;

/* A fatal error: keep the message, jump back. */
static void jpeg_on_error(j_common_ptr ci) {
    jpeg_err *e = (jpeg_err *)ci->err;
    if (!e->msg[0]) ci->err->format_message(ci, e->msg);
    longjmp(e->jump, 1);
}

/* A warning: the end of the data before the image's end is fatal (truncated); other
 * warnings (extraneous bytes, ...) are ignored as PIL ignores them. */
static void jpeg_on_message(j_common_ptr ci, int level) {
    if (level == -1 && ci->err->msg_code == JWRN_JPEG_EOF) {
        jpeg_err *e = (jpeg_err *)ci->err;
        snprintf(e->msg, sizeof e->msg, "the file is truncated");
        longjmp(e->jump, 1);
    }
}

/* Stop a progressive file with too many scans. */
static void jpeg_on_progress(j_common_ptr ci) {
    if (ci->is_decompressor && ((j_decompress_ptr)ci)->input_scan_number > JPEG_MAX_SCANS) {
        jpeg_err *e = (jpeg_err *)ci->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", JPEG_MAX_SCANS);
        longjmp(e->jump, 1);
    }
}

/* Pillow's MULDIV255: a * b / 255, rounded as its integer trick does. */
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* One decoded row (gray, RGB or CMYK samples, the latter inverted as "CMYK;I") -> RGB. */
static void jpeg_row_rgb(const uint8_t *in, uint8_t *out, int32_t w, int comps) {
    for (int32_t x = 0; x < w; x++, out += 3) {
        if (comps == 1) out[0] = out[1] = out[2] = in[x];
        else if (comps == 3) memcpy(out, in + 3 * (size_t)x, 3);
        else {
            int c[4];
            for (int k = 0; k < 4; k++) c[k] = 255 - in[4 * (size_t)x + k];
            int nk = 255 - c[3];
            for (int k = 0; k < 3; k++) {
                int v = nk - muldiv255(c[k], nk);
                out[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

/* The orientation of the APP1 markers saved: the first "Exif" block's tag, else the last XMP
 * packet's (Pillow keeps the last "http://ns.adobe.com/xap/1.0/" segment as info["xmp"]). */
static int32_t jpeg_orientation(j_decompress_ptr ci) {
    static const char xmp_id[] = "http://ns.adobe.com/xap/1.0/";
    const uint8_t *exif = NULL, *xmp = NULL;
    size_t exif_n = 0, xmp_n = 0;
    for (jpeg_saved_marker_ptr m = ci->marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1) continue;
        if (!exif && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6)) {
            exif = m->data;
            exif_n = m->data_length;
        } else if (m->data_length >= sizeof xmp_id && !memcmp(m->data, xmp_id, sizeof xmp_id)) { /* with its NUL */
            xmp = m->data + sizeof xmp_id;
            xmp_n = m->data_length - sizeof xmp_id;
        }
    }
    return media_orientation_of(exif, exif_n, xmp, xmp_n);
}

/* The decode itself; row is the one allocation libjpeg's longjmp may leave (freed by caller). */
static int jpeg_run(struct jpeg_decompress_struct *ci, jpeg_err *je, struct jpeg_progress_mgr *prog, const uint8_t *b,
                    size_t n, uint8_t **row, plume_image **out, int32_t *o, char **err) {
    if (setjmp(je->jump)) return plume_fail(err, PLUME_EFORMAT, "JPEG: %s", je->msg[0] ? je->msg : "corrupt file");
    jpeg_create_decompress(ci); /* zeroes all but err */
    ci->progress = prog;
    jpeg_mem_src(ci, b, (unsigned long)n);
    jpeg_save_markers(ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(ci, TRUE);
    int rc = media_check_size("JPEG", ci->image_width, ci->image_height, err);
    if (rc) return rc;
    *o = jpeg_orientation(ci);
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
        ci->out_color_space = JCS_CMYK; /* read as Pillow's "CMYK;I", Adobe marker or not */
    } else if (ci->jpeg_color_space == JCS_GRAYSCALE) {
        ci->out_color_space = JCS_GRAYSCALE;
    } else {
        ci->out_color_space = JCS_RGB;
    }
    jpeg_start_decompress(ci);
    int comps = ci->output_components;
    if ((comps != 1 && comps != 3 && comps != 4) || (int64_t)ci->output_width != ci->image_width)
        return plume_fail(err, PLUME_EFORMAT, "JPEG: unexpected output layout (%d components)", comps);
    *row = malloc((size_t)ci->output_width * (size_t)comps);
    if (!*row) return plume_fail(err, PLUME_ENOMEM, "JPEG: out of memory");
    if ((rc = media_image_new(out, (int32_t)ci->output_width, (int32_t)ci->output_height, "JPEG", err))) return rc;
    while (ci->output_scanline < ci->output_height) {
        JDIMENSION y = ci->output_scanline;
        JSAMPROW r = *row;
        if (jpeg_read_scanlines(ci, &r, 1) != 1) return plume_fail(err, PLUME_EFORMAT, "JPEG: a row could not be read");
        jpeg_row_rgb(*row, (*out)->rgb + (size_t)y * (*out)->w * 3, (*out)->w, comps);
    }
    jpeg_finish_decompress(ci);
    return 0;
}

int media_decode_jpeg(const uint8_t *b, size_t n, plume_image **out, int32_t *orientation, char **err) {
    *out = NULL;
    struct jpeg_decompress_struct ci;
    jpeg_err je;
    struct jpeg_progress_mgr prog = {.progress_monitor = jpeg_on_progress};
    memset(&ci, 0, sizeof ci);
    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.emit_message = jpeg_on_message;
    uint8_t *row = NULL;
    int rc = jpeg_run(&ci, &je, &prog, b, n, &row, out, orientation, err);
    jpeg_destroy_decompress(&ci);
    free(row);
    if (rc) {
        plume_image_free(*out);
        *out = NULL;
    }
    return rc;
}
