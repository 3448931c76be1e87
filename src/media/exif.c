/* exif.c -- the one EXIF fact plume uses: the orientation tag. An EXIF block is a TIFF file:
 *
 *   ["Exif\0\0"] "II" 2a 00 | "MM" 00 2a   u32 offset of IFD0 (from the TIFF header)
 *   IFD: u16 count, count x { u16 tag, u16 type, u32 count, u32 value-or-offset }, u32 next
 *
 * Orientation is tag 0x0112, type SHORT (3), count 1, its value in the first two bytes of the
 * value field. Untrusted bytes: every read is bounds-checked; anything unreadable means
 * "no orientation" (1), as Pillow ignores a broken EXIF block. */
#include "media/media.h"

/* A u16 / u32 at b in the block's byte order (big-endian when be). */
static uint32_t rd16(const uint8_t *b, int be) { return be ? (uint32_t)b[0] << 8 | b[1] : (uint32_t)b[1] << 8 | b[0]; }
static uint32_t rd32(const uint8_t *b, int be) {
    return be ? (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]
              : (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
}

int32_t media_exif_orientation(const uint8_t *b, size_t n) {
    if (!b) return 1;
    if (n >= 6 && !memcmp(b, "Exif\0\0", 6)) {
        b += 6;
        n -= 6;
    }
    if (n < 8) return 1;
    int be;
    if (!memcmp(b, "II\x2a\x00", 4)) be = 0;
    else if (!memcmp(b, "MM\x00\x2a", 4)) be = 1;
    else return 1;
    uint32_t ifd = rd32(b + 4, be);
    if (ifd > n || n - ifd < 2) return 1;
    uint32_t count = rd16(b + ifd, be);
    if (count > (n - ifd - 2) / 12) return 1;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = b + ifd + 2 + 12 * (size_t)i;
        if (rd16(e, be) != 0x0112) continue;
        if (rd16(e + 2, be) != 3 || rd32(e + 4, be) < 1) return 1;
        uint32_t v = rd16(e + 8, be);
        return v >= 1 && v <= 8 ? (int32_t)v : 1;
    }
    return 1;
}
