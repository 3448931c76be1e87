/* fuzz_image.c -- the image decoders (PNG, JPEG, WebP, sniffed from the bytes; EXIF) on
 * arbitrary bytes; a decoded image must have a size inside the limits and, when small, goes
 * through the size rule and Pillow's bicubic resample too. */
#include "fuzz.h"
#include "media/media.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Decode; on success check the size, then plan and resize a small image at the least budget. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1); /* exactly the input: a read past it is seen */
    if (!buf) return 0;
    memcpy(buf, data, size);
    plume_image *im = NULL;
    char *err = NULL;
    if (plume_image_decode(&im, buf, size, &err) == 0) {
        if (!im || im->w < 1 || im->h < 1 || (int64_t)im->w * im->h > MEDIA_MAX_PIXELS) abort();
        media_plan p;
        uint8_t *rgb = NULL;
        if ((int64_t)im->w * im->h <= 4096 && media_plan_for(im->h, im->w, 16, 3, 70, &p, &err) == 0) {
            if (p.n_tokens < 1 || p.n_tokens > 70 || p.th % 48 || p.tw % 48) abort();
            if (media_plan_pixels(im, &p, &rgb, &err) == 0) free(rgb);
        }
        free(err);
        err = NULL;
        /* the EXIF parser alone, on the same bytes */
        int32_t o = media_exif_orientation(buf, size);
        if (o < 1 || o > 8) abort();
    } else if (!err || im) {
        abort();
    }
    free(err);
    plume_image_free(im);
    free(buf);
    return 0;
}
