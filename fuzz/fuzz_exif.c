/* fuzz_exif.c -- the orientation readers of src/media/exif.c on arbitrary bytes: the EXIF
 * block's TIFF reader, the XMP search, the hex dump of a PNG "Raw profile type exif" text, and
 * their combination. The first byte picks where the input is cut in two (EXIF | XMP); the
 * rest is read in every way, each on a buffer exactly its size (a read past it is seen).
 * fuzz_image reaches these only through whole images; this harness reaches them directly. */
#include "fuzz.h"
#include "media/media.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* A malloc'd copy of b[n] (one byte when n is 0), so that a read past n is a sanitizer error. */
static uint8_t *dup_exact(const uint8_t *b, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    if (p && n) memcpy(p, b, n);
    return p;
}

/* Every reader on the input; abort on a broken invariant. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t body = size - 1, cut = body ? (size_t)data[0] * body / 255 : 0;
    uint8_t *all = dup_exact(data + 1, body), *exif = dup_exact(data + 1, cut), *xmp = dup_exact(data + 1 + cut, body - cut);
    if (!all || !exif || !xmp) abort();
    /* the TIFF reader: a tag value or -1; the orientation 1..8 */
    int64_t tag = media_exif_tag_orientation(all, body);
    int32_t o = media_exif_orientation(all, body);
    if (tag < -1 || tag > 0xffffffffll || o < 1 || o > 8 || ((tag >= 1 && tag <= 8) ? o != tag : o != 1)) abort();
    /* the XMP search: -1 or one digit */
    int32_t x = media_xmp_orientation(all, body);
    if (x < -1 || x > 9) abort();
    /* the raw profile: at most half the text's bytes, then read as EXIF */
    uint8_t *raw = NULL;
    size_t n = 0;
    if (media_exif_from_raw_profile(all, body, &raw, &n) == 0) {
        if (!raw || n > body / 2) abort();
        uint8_t *exact = dup_exact(raw, n);
        int32_t r = media_exif_orientation(exact, n);
        if (r < 1 || r > 8) abort();
        free(exact);
    } else if (raw || n) {
        abort();
    }
    free(raw);
    /* the two together: the EXIF tag when it has one, else the XMP's */
    int32_t both = media_orientation_of(exif, cut, xmp, body - cut);
    int64_t et = media_exif_tag_orientation(exif, cut);
    int32_t xt = media_xmp_orientation(xmp, body - cut);
    int64_t want = et >= 0 ? et : xt;
    if (both < 1 || both > 8 || both != (want >= 1 && want <= 8 ? want : 1)) abort();
    free(all);
    free(exif);
    free(xmp);
    return 0;
}
