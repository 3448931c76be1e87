/* exif.c -- the one metadata fact plume uses: the orientation, found where Pillow finds it
 * (Image.getexif, then ImageOps.exif_transpose):
 *
 *   1. the EXIF block (JPEG APP1 "Exif", PNG eXIf, WebP EXIF), or in a PNG without one, the
 *      hex dump of a "Raw profile type exif" text chunk (ImageMagick's: 3 header lines, then
 *      hex digits and line breaks);
 *   2. only when that block has no orientation tag: the first `tiff:Orientation="N"` or
 *      `tiff:Orientation>N` (one digit) of the XMP packet (JPEG APP1, PNG iTXt
 *      "XML:com.adobe.xmp", WebP XMP).
 *
 * An EXIF block is a TIFF file:
 *
 *   ["Exif\0\0"] "II" 2a 00 | "MM" 00 2a   u32 offset of IFD0 (from the TIFF header)
 *   IFD: u16 count, count x { u16 tag, u16 type, u32 count, u32 value-or-offset }, u32 next
 *
 * Orientation is tag 0x0112. Writers store it as a SHORT (3), as the standard says, or as a
 * LONG (4); Pillow reads any integer type and takes the first value, and so does plume.
 * Untrusted bytes: every read is bounds-checked; the entries of a block cut short are read up
 * to the cut, as Pillow's IFD reader does; anything unreadable means "no orientation". */
#include <stdlib.h>

#include "media/media.h"

/* ---- the TIFF reader ------------------------------------------------------------------ */

/* A u16 / u32 at b in the block's byte order (big-endian when be). */
static uint32_t rd16(const uint8_t *b, int be) { return be ? (uint32_t)b[0] << 8 | b[1] : (uint32_t)b[1] << 8 | b[0]; }
static uint32_t rd32(const uint8_t *b, int be) {
    return be ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
              : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
}

/* The first value of an integer entry e (type BYTE, SHORT, LONG or their signed forms) of the
 * TIFF block b[n], 0 for a negative one; -1 for another type or a value outside the block. */
static int64_t tiff_int(const uint8_t *b, size_t n, const uint8_t *e, int be) {
    uint32_t type = rd16(e + 2, be), count = rd32(e + 4, be);
    size_t size = type == 1 || type == 6 ? 1 : type == 3 || type == 8 ? 2 : type == 4 || type == 9 ? 4 : 0;
    if (!size || count < 1) return -1;
    const uint8_t *v = e + 8;
    if ((uint64_t)count * size > 4) { /* the values live at an offset */
        uint32_t off = rd32(e + 8, be);
        if (off > n || n - off < size) return -1;
        v = b + off;
    }
    int64_t x = size == 1 ? v[0] : size == 2 ? (int64_t)rd16(v, be) : (int64_t)rd32(v, be);
    if (type == 6) x = (int8_t)x;
    if (type == 8) x = (int16_t)x;
    if (type == 9) x = (int32_t)x;
    return x < 0 ? 0 : x; /* a negative orientation is as wrong as 0: present, not applied */
}

int64_t media_exif_tag_orientation(const uint8_t *b, size_t n) {
    if (!b) return -1;
    if (n >= 6 && !memcmp(b, "Exif\0\0", 6)) {
        b += 6;
        n -= 6;
    }
    if (n < 8) return -1;
    int be;
    if (!memcmp(b, "II\x2a\x00", 4)) be = 0;
    else if (!memcmp(b, "MM\x00\x2a", 4)) be = 1;
    else return -1;
    uint32_t ifd = rd32(b + 4, be);
    if (ifd > n || n - ifd < 2) return -1;
    uint32_t count = rd16(b + ifd, be);
    size_t fit = (n - ifd - 2) / 12; /* the entries before a cut */
    for (uint32_t i = 0; i < count && i < fit; i++) {
        const uint8_t *e = b + ifd + 2 + 12 * (size_t)i;
        if (rd16(e, be) == 0x0112) return tiff_int(b, n, e, be);
    }
    return -1;
}

int32_t media_exif_orientation(const uint8_t *b, size_t n) {
    int64_t v = media_exif_tag_orientation(b, n);
    return v >= 1 && v <= 8 ? (int32_t)v : 1;
}

/* ---- XMP ------------------------------------------------------------------------------ */

int32_t media_xmp_orientation(const uint8_t *b, size_t n) {
    static const char key[] = "tiff:Orientation";
    const size_t k = sizeof key - 1;
    if (!b) return -1;
    for (size_t i = 0; n >= k + 2 && i <= n - k - 2; i++) {
        if (b[i] != 't' || memcmp(b + i, key, k)) continue;
        const uint8_t *p = b + i + k;
        if (p[0] == '>' && p[1] >= '0' && p[1] <= '9') return p[1] - '0';
        if (n - i - k >= 3 && p[0] == '=' && p[1] == '"' && p[2] >= '0' && p[2] <= '9') return p[2] - '0';
    }
    return -1;
}

/* ---- ImageMagick's raw profile -------------------------------------------------------- */

/* The value of one hex digit, or -1. */
static int hexval(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int media_exif_from_raw_profile(const uint8_t *t, size_t n, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    size_t i = 0;
    for (int lines = 0; lines < 3; lines++) { /* "", "exif", "    length": skipped as Pillow does */
        while (i < n && t[i] != '\n') i++;
        if (i == n) return -1;
        i++;
    }
    uint8_t *b = malloc((n - i) / 2 + 1);
    if (!b) return -1;
    size_t k = 0;
    while (i < n) {
        uint8_t c = t[i];
        if (c == '\n' || c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') { /* bytes.fromhex's spaces */
            i++;
            continue;
        }
        int hi = hexval(c), lo = i + 1 < n ? hexval(t[i + 1]) : -1;
        if (hi < 0 || lo < 0) { /* bytes.fromhex raises: no EXIF */
            free(b);
            return -1;
        }
        b[k++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    *out = b;
    *len = k;
    return 0;
}

/* ---- the orientation of an image ------------------------------------------------------ */

int32_t media_orientation_of(const uint8_t *exif, size_t exif_n, const uint8_t *xmp, size_t xmp_n) {
    int64_t v = media_exif_tag_orientation(exif, exif_n);
    if (v < 0) v = media_xmp_orientation(xmp, xmp_n);
    return v >= 1 && v <= 8 ? (int32_t)v : 1;
}
