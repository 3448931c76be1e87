/* test_media_image.c -- src/media/: decoding (PNG, JPEG, WebP, their modes and EXIF orientations)
 * against Pillow's, the size rule, the bicubic resample and the patches against the golden
 * pixels of tiny-mm-a (tests/data/tiny-mm-a, made by scripts/make-mm-fixtures.py), and every
 * kind of bad image refused with a message. No model. */
#include <stdio.h>

#include <jpeglib.h>

#include "digest.h"
#include "media/media.h"
#include "npy.h"
#include "t.h"
#include "t_mm.h"

/* Decoders that are the same libraries as Pillow's give its bits; lossy formats may differ by
 * a rounding where a decoder version does (JPEG's IDCT and upsampling, WebP's filters). */
#define LOSSY_TOL 2

static char *tdir;

/* Decode a file; NULL (printed) on error. */
static plume_image *load(const char *path) {
    plume_image *im = NULL;
    char *err = NULL;
    if (plume_image_load(&im, path, &err)) printf("  %s\n", err);
    free(err);
    return im;
}

/* The hex SHA-256 of bytes. */
static void sha_hex(const void *p, size_t n, char hex[65]) {
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, p, n);
    sha256_final_hex(&c, hex);
}

/* The first 64 characters of a text file. */
static void read_hash(const char *path, char hex[65]) {
    char *t = NULL, *err = NULL;
    hex[0] = 0;
    if (plume_read_file(path, &t, NULL, &err) == 0 && strlen(t) >= 64) snprintf(hex, 65, "%.64s", t);
    free(t);
    free(err);
}

/* The resized u8 patches of an image file at a budget (as the golden stores them: pixel values
 * * 255, [P, 768]), malloc'd; the plan in *p. */
static uint8_t *patches_u8(const char *path, int32_t budget, media_plan *p) {
    plume_image *im = load(path);
    char *err = NULL;
    uint8_t *rgb = NULL, *u8 = NULL;
    if (im && media_plan_for(im->h, im->w, 16, 3, budget, p, &err) == 0 && media_plan_pixels(im, p, &rgb, &err) == 0) {
        float *pix = malloc((size_t)p->n_patches * 768 * 4);
        int32_t *pos = malloc((size_t)p->n_patches * 8);
        u8 = malloc((size_t)p->n_patches * 768);
        media_patchify(rgb, p, 16, pix, pos);
        for (size_t i = 0; i < (size_t)p->n_patches * 768; i++) u8[i] = (uint8_t)lrintf(pix[i] * 255.0f);
        for (int32_t i = 0; i < p->n_patches; i++)
            CHECK(pos[2 * i] == i % p->pw && pos[2 * i + 1] == i / p->pw, "patch %d at (%d, %d)", i, pos[2 * i], pos[2 * i + 1]);
        free(pix);
        free(pos);
    }
    if (err) printf("  %s\n", err);
    free(err);
    free(rgb);
    plume_image_free(im);
    return u8;
}

/* ---- the golden pixels ----------------------------------------------------------------- */

/* A.png (97 x 61, upscaled to 1008 x 624) and C.png (33 x 300 -> 240 x 2400): the patches are
 * the golden's bytes (SHA-256 of image0/2_pixels_u8), the first 8 patches compared too. */
static void test_png_pixels_exact(void) {
    static const struct { const char *img, *hash; int32_t th, tw, tokens; } cases[] = {
        {"A.png", "image0_pixels.sha256", 624, 1008, 273}, {"C.png", "image2_pixels.sha256", 2400, 240, 250}};
    for (int k = 0; k < 2; k++) {
        media_plan p;
        uint8_t *u8 = patches_u8(fx(cases[k].img), 280, &p);
        CHECK(u8 != NULL, "%s: no pixels", cases[k].img);
        if (!u8) continue;
        CHECK(p.th == cases[k].th && p.tw == cases[k].tw && p.n_tokens == cases[k].tokens, "%s: plan %dx%d, %d tokens",
              cases[k].img, p.tw, p.th, p.n_tokens);
        char got[65], want[65];
        sha_hex(u8, (size_t)p.n_patches * 768, got);
        read_hash(fx(cases[k].hash), want);
        CHECK(!strcmp(got, want), "%s: pixels differ from the golden's (sha256 %s, want %s)", cases[k].img, got, want);
        if (k == 0) {
            plume_map m;
            npy_view v;
            char *err = NULL;
            if (npy_open(fx("image0_pixels_head.npy"), &m, &v, &err) == 0) {
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < v.count; i++)
                    if (v.data[i] != u8[i]) bad++, first = first < 0 ? i : first;
                CHECK(bad == 0, "A.png: %lld of the first 8 patches' bytes differ (first at %lld)", (long long)bad, (long long)first);
                plume_map_free(&m);
            }
            free(err);
        }
        free(u8);
    }
}

/* A downscale (the goldens all upscale): 900 x 500 -> 528 x 288 at 70 tokens, Pillow's bytes. */
static void test_downscale_matches_pillow(void) {
    plume_image *im = load(fx("down.png"));
    media_plan p;
    char *err = NULL, got[65], want[65];
    uint8_t *rgb = NULL;
    CHECK(im && media_plan_for(im->h, im->w, 16, 3, 70, &p, &err) == 0 && media_plan_pixels(im, &p, &rgb, &err) == 0,
          "down.png: %s", err ? err : "no image");
    if (rgb) {
        CHECK(p.tw == 528 && p.th == 288, "plan %d x %d, want 528 x 288", p.tw, p.th);
        sha_hex(rgb, (size_t)p.th * p.tw * 3, got);
        read_hash(fx("down_70.sha256"), want);
        CHECK(!strcmp(got, want), "the 900x500 -> 528x288 resize differs from Pillow's");
    }
    /* a size kept on one axis runs one pass; a size kept on both is a copy */
    if (im) {
        uint8_t *o = malloc((size_t)im->w * 100 * 3);
        CHECK(media_resize_bicubic(im->rgb, im->w, im->h, o, im->w, 100, &err) == 0, "one-axis resize failed");
        CHECK(media_resize_bicubic(im->rgb, 10, 10, o, 10, 10, &err) == 0 && !memcmp(o, im->rgb, 30), "a same-size resize is not a copy");
        free(o);
    }
    free(err);
    free(rgb);
    plume_image_free(im);
}

/* The size rule against the spec's worked examples (§2.2) and HF's refusals. */
static void test_plan_sizes(void) {
    static const struct { int32_t h, w, budget, th, tw, tokens; } cases[] = {
        {500, 500, 280, 768, 768, 256},   {480, 640, 280, 672, 912, 266},   {720, 1280, 280, 576, 1056, 264},
        {1080, 1920, 280, 576, 1056, 264}, {3000, 4000, 280, 672, 912, 266}, {100, 2000, 280, 144, 3552, 222},
        {64, 64, 70, 384, 384, 64},       {64, 64, 140, 528, 528, 121},     {64, 64, 560, 1104, 1104, 529},
        {64, 64, 1120, 1584, 1584, 1089}, {1, 1000, 280, 48, 13440, 280},   {1000, 1, 70, 3360, 48, 70},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        media_plan p;
        char *err = NULL;
        int rc = media_plan_for(cases[i].h, cases[i].w, 16, 3, cases[i].budget, &p, &err);
        CHECK(rc == 0 && p.th == cases[i].th && p.tw == cases[i].tw && p.n_tokens == cases[i].tokens,
              "%dx%d at %d: got %dx%d (%d tokens), want %dx%d (%d): %s", cases[i].w, cases[i].h, cases[i].budget, p.tw, p.th,
              p.n_tokens, cases[i].tw, cases[i].th, cases[i].tokens, err ? err : "");
        CHECK(rc || p.n_tokens <= cases[i].budget, "over budget");
        free(err);
    }
    media_plan p;
    char *err = NULL;
    CHECK(media_plan_for(100, 100, 16, 3, 300, &p, &err) == PLUME_EINVAL && err && strstr(err, "70, 140, 280"),
          "a budget of 300 was accepted: %s", err ? err : "");
    free(err);
}

/* ---- decoding -------------------------------------------------------------------------- */

/* The JPEG decoder gives PIL's pixels: a lossless crop of B.jpg against the same region of
 * the golden PIL decode (image1_decoded_u8). */
static void test_jpeg_matches_pil(void) {
    plume_image *im = load(fx("B_crop.jpg"));
    plume_map m;
    npy_view v;
    char *err = NULL;
    if (im && npy_open(fx("B_crop_decoded.npy"), &m, &v, &err) == 0) {
        CHECK(v.count == (int64_t)im->w * im->h * 3, "size %dx%d", im->w, im->h);
        int64_t diff = 0, worst = 0;
        for (int64_t i = 0; i < v.count && v.count == (int64_t)im->w * im->h * 3; i++) {
            int d = abs((int)im->rgb[i] - (int)v.data[i]);
            diff += d != 0;
            worst = d > worst ? d : worst;
        }
        CHECK(worst <= LOSSY_TOL, "JPEG decode: %lld bytes differ from PIL's, by up to %lld", (long long)diff, (long long)worst);
        if (diff) printf("  note: %lld of %lld bytes differ from PIL's by <= %lld\n", (long long)diff, (long long)v.count, (long long)worst);
        plume_map_free(&m);
    }
    free(err);
    plume_image_free(im);
}

/* Every variant (PNG palette, tRNS, gray 2/16 bits, gray+alpha, RGBA 8/16, Adam7; JPEG gray,
 * CMYK, EXIF 3 and 6; PNG eXIf 8; WebP lossless, lossy, alpha, EXIF 5) decodes to Pillow's
 * exif_transpose(...).convert("RGB"), kept as a plain RGB PNG beside it. */
static void test_decode_variants_match_pillow(void) {
    static const char *const names[] = {"rgb.png", "interlaced.png", "palette.png", "palette_trns.png", "gray16.png",
                                        "gray2.png", "gray_alpha.png", "rgba.png", "rgba16.png", "exif6.jpg",
                                        "exif3.jpg", "exif8.png", "exif5.webp", "gray.jpg", "cmyk.jpg",
                                        "lossless.webp", "lossy.webp", "alpha.webp"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char a[300], b[300];
        snprintf(a, sizeof a, "decode/%s", names[i]);
        snprintf(b, sizeof b, "decode/%s.rgb.png", names[i]);
        plume_image *x = load(fx(a)), *y = load(fx(b));
        CHECK(x && y, "%s: not decoded", names[i]);
        if (x && y) {
            CHECK(x->w == y->w && x->h == y->h, "%s: %dx%d, Pillow %dx%d", names[i], x->w, x->h, y->w, y->h);
            const int lossy = strstr(names[i], ".jpg") || strstr(names[i], "lossy") || strstr(names[i], "alpha.webp");
            int worst = 0;
            for (size_t k = 0; x->w == y->w && x->h == y->h && k < (size_t)x->w * x->h * 3; k++) {
                int d = abs((int)x->rgb[k] - (int)y->rgb[k]);
                worst = d > worst ? d : worst;
            }
            CHECK(worst <= (lossy ? LOSSY_TOL : 0), "%s: differs from Pillow's by %d", names[i], worst);
        }
        plume_image_free(x);
        plume_image_free(y);
    }
}

/* The orientation tag of hand-made EXIF blocks: both byte orders, with and without the
 * "Exif" prefix; a truncated or absurd block is orientation 1. */
static void test_exif_orientation(void) {
    static const uint8_t le[] = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t be[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 0x2a, 0, 0, 0, 8, 0, 2, 0x01, 0x0f, 0, 2, 0, 0,
                                 0, 1, 0, 0, 0, 0, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
    CHECK(media_exif_orientation(le, sizeof le) == 6, "little-endian: %d", media_exif_orientation(le, sizeof le));
    CHECK(media_exif_orientation(be, sizeof be) == 8, "big-endian: %d", media_exif_orientation(be, sizeof be));
    for (size_t n = 0; n < sizeof le - 8; n++) CHECK(media_exif_orientation(le, n) == 1, "truncated to %zu", n);
    uint8_t bad[sizeof le];
    memcpy(bad, le, sizeof le);
    bad[4] = 0xff; /* IFD far away */
    CHECK(media_exif_orientation(bad, sizeof bad) == 1, "IFD past the end");
    memcpy(bad, le, sizeof le);
    bad[18] = 9; /* not an orientation */
    CHECK(media_exif_orientation(bad, sizeof bad) == 1, "orientation 9");
}

/* The tag as writers store it besides SHORT: LONG (as Pillow reads it: any integer type, the
 * first value), SSHORT, a SHORT pair; an IFD whose count runs past the block is read up to the
 * cut (Pillow's reader keeps the entries before it). A tag present but not 1..8 is "no
 * orientation" and hides the XMP's (Pillow's getexif: the XMP counts only without the tag). */
static void test_exif_orientation_types(void) {
    uint8_t le[] = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 4, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(media_exif_orientation(le, sizeof le) == 6, "LONG 6: %d", media_exif_orientation(le, sizeof le));
    le[12] = 8; /* SSHORT */
    CHECK(media_exif_orientation(le, sizeof le) == 6, "SSHORT 6: %d", media_exif_orientation(le, sizeof le));
    le[12] = 3, le[14] = 2, le[20] = 3; /* SHORT x 2: 6, 3 */
    CHECK(media_exif_orientation(le, sizeof le) == 6, "SHORT pair: %d", media_exif_orientation(le, sizeof le));
    le[12] = 4, le[14] = 1, le[20] = 0, le[8] = 40; /* 40 entries claimed, one there */
    CHECK(media_exif_orientation(le, sizeof le) == 6, "IFD cut short: %d", media_exif_orientation(le, sizeof le));
    le[12] = 2; /* ASCII: not an integer */
    CHECK(media_exif_tag_orientation(le, sizeof le) == -1, "an ASCII tag was read");
    static const uint8_t be_long[] = {'M', 'M', 0, 0x2a, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 4, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0};
    CHECK(media_exif_orientation(be_long, sizeof be_long) == 8, "big-endian LONG 8: %d", media_exif_orientation(be_long, sizeof be_long));
    /* XMP: both of Pillow's forms, the first match, one digit */
    static const char x1[] = "<rdf:Description tiff:Orientation=\"6\" tiff:Orientation=\"3\"/>";
    static const char x2[] = "<tiff:Orientation>8</tiff:Orientation>";
    static const char x3[] = "<tiff:Orientation> 8</tiff:Orientation> tiff:Orientation='5'";
    CHECK(media_xmp_orientation((const uint8_t *)x1, strlen(x1)) == 6, "XMP attribute");
    CHECK(media_xmp_orientation((const uint8_t *)x2, strlen(x2)) == 8, "XMP element");
    CHECK(media_xmp_orientation((const uint8_t *)x3, strlen(x3)) == -1, "XMP forms Pillow's pattern does not match");
    for (size_t n = 0; n <= (size_t)(strchr(x1, '6') - x1); n++) /* before its digit */
        CHECK(media_xmp_orientation((const uint8_t *)x1, n) == -1, "XMP cut to %zu", n);
    static const uint8_t no_tag[] = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x0f, 0x01, 2, 0, 1, 0, 0, 0, 'x', 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t nine[] = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0};
    CHECK(media_orientation_of(no_tag, sizeof no_tag, (const uint8_t *)x2, strlen(x2)) == 8, "XMP behind an EXIF without the tag");
    CHECK(media_orientation_of(nine, sizeof nine, (const uint8_t *)x2, strlen(x2)) == 1, "XMP behind an EXIF orientation 9");
    CHECK(media_orientation_of(NULL, 0, (const uint8_t *)x1, strlen(x1)) == 6, "XMP alone");
    /* ImageMagick's raw profile: 3 lines, then hex (with the "Exif\0\0" prefix) */
    static const char raw[] = "\nexif\n      34\n457869660000\n49492a000800000001001201030001000000030000000000\n0000\n";
    uint8_t *b = NULL;
    size_t n = 0;
    CHECK(media_exif_from_raw_profile((const uint8_t *)raw, strlen(raw), &b, &n) == 0 && n == 32 && b &&
              media_exif_orientation(b, n) == 3,
          "raw profile: %zu bytes", n);
    free(b);
    static const char bad[] = "\nexif\n      2\n45x8\n";
    CHECK(media_exif_from_raw_profile((const uint8_t *)bad, strlen(bad), &b, &n) == -1 && !b, "bad hex read");
    CHECK(media_exif_from_raw_profile((const uint8_t *)"\nexif\n", 6, &b, &n) == -1 && !b, "two lines read");
}

/* CRC-32 of a PNG chunk's type and data. */
static uint32_t png_crc(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return crc ^ 0xffffffffu;
}

/* A copy of the PNG png[n] with a chunk (type, data[len]) right after IHDR; *out_n its size. */
static uint8_t *png_insert(const uint8_t *png, size_t n, const char *type, const void *data, size_t len, size_t *out_n) {
    uint8_t *o = malloc(n + len + 12);
    memcpy(o, png, 33); /* signature, IHDR */
    uint8_t *c = o + 33;
    for (int i = 0; i < 4; i++) c[i] = (uint8_t)(len >> (24 - 8 * i));
    memcpy(c + 4, type, 4);
    memcpy(c + 8, data, len);
    uint32_t crc = png_crc(c + 4, len + 4);
    for (int i = 0; i < 4; i++) c[8 + len + i] = (uint8_t)(crc >> (24 - 8 * i));
    memcpy(c + len + 12, png + 33, n - 33);
    *out_n = n + len + 12;
    return o;
}

/* A copy of the JPEG jpg[n] with an APP1 segment (payload[len]) right after SOI. */
static uint8_t *jpeg_insert_app1(const uint8_t *jpg, size_t n, const void *payload, size_t len, size_t *out_n) {
    uint8_t *o = malloc(n + len + 4);
    o[0] = 0xff, o[1] = 0xd8, o[2] = 0xff, o[3] = 0xe1, o[4] = (uint8_t)((len + 2) >> 8), o[5] = (uint8_t)(len + 2);
    memcpy(o + 6, payload, len);
    memcpy(o + 6 + len, jpg + 2, n - 2);
    *out_n = n + len + 4;
    return o;
}

/* Whether bytes b[n] decode to plain turned by orientation o (plain is kept). */
static int decodes_oriented(const uint8_t *b, size_t n, const plume_image *plain, int32_t o) {
    plume_image *got = NULL, *want = NULL;
    char *err = NULL;
    int ok = plume_image_decode(&got, b, n, &err) == 0 && plume_image_from_rgb(&want, plain->rgb, plain->w, plain->h, &err) == 0 &&
             media_orient(&want, o, &err) == 0 && got->w == want->w && got->h == want->h &&
             !memcmp(got->rgb, want->rgb, (size_t)got->w * got->h * 3);
    if (err) printf("  %s\n", err);
    free(err);
    plume_image_free(got);
    plume_image_free(want);
    return ok;
}

/* Orientations found only where Pillow also looks (docs/MEDIA.md): a PNG's XMP iTXt, its
 * "Raw profile type exif" tEXt, an eXIf storing the tag as a LONG, an eXIf without the tag
 * beside an XMP; a JPEG's XMP APP1 and an Exif APP1 with a LONG tag. Each must decode to the
 * plain image turned as ImageOps.exif_transpose turns it. */
static void test_orientation_sources(void) {
    plume_map pm, jm;
    char *err = NULL;
    if (plume_map_open(&pm, fx("A.png"), &err) || plume_map_open(&jm, fx("B_crop.jpg"), &err)) {
        CHECK(0, "%s", err);
        free(err);
        return;
    }
    plume_image *pp = load(fx("A.png")), *jp = load(fx("B_crop.jpg"));
    static const uint8_t long6[] = {'M', 'M', 0, 0x2a, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 4, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0};
    static const uint8_t no_tag[] = {'I', 'I', 0x2a, 0, 8, 0, 0, 0, 1, 0, 0x0f, 0x01, 2, 0, 1, 0, 0, 0, 'x', 0, 0, 0, 0, 0, 0, 0};
    static const char xmp8[] = "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF><rdf:Description tiff:Orientation=\"8\"/>"
                               "</rdf:RDF></x:xmpmeta>";
    static const char raw5[] = "\nexif\n      32\n457869660000\n49492a000800000001001201030001000000050000000000\n0000\n";
    uint8_t itxt[256];
    size_t ni = 0;
    memcpy(itxt, "XML:com.adobe.xmp\0\0\0\0\0", 22); /* keyword, flag, method, language, translated */
    ni = 22;
    memcpy(itxt + ni, xmp8, strlen(xmp8));
    ni += strlen(xmp8);
    uint8_t text[128];
    memcpy(text, "Raw profile type exif\0", 22);
    memcpy(text + 22, raw5, strlen(raw5));
    size_t n;
    uint8_t *b;
    b = png_insert(pm.data, pm.size, "iTXt", itxt, ni, &n);
    CHECK(pp && decodes_oriented(b, n, pp, 8), "PNG: XMP tiff:Orientation 8 not applied");
    free(b);
    b = png_insert(pm.data, pm.size, "tEXt", text, 22 + strlen(raw5), &n);
    CHECK(pp && decodes_oriented(b, n, pp, 5), "PNG: raw profile orientation 5 not applied");
    free(b);
    b = png_insert(pm.data, pm.size, "eXIf", long6, sizeof long6, &n);
    CHECK(pp && decodes_oriented(b, n, pp, 6), "PNG: eXIf LONG orientation 6 not applied");
    free(b);
    uint8_t *b2;
    size_t n2;
    b = png_insert(pm.data, pm.size, "eXIf", no_tag, sizeof no_tag, &n);
    b2 = png_insert(b, n, "iTXt", itxt, ni, &n2);
    CHECK(pp && decodes_oriented(b2, n2, pp, 8), "PNG: XMP beside an eXIf without the tag not applied");
    free(b);
    free(b2);
    b = png_insert(pm.data, pm.size, "eXIf", long6, sizeof long6, &n);
    b2 = png_insert(b, n, "iTXt", itxt, ni, &n2);
    CHECK(pp && decodes_oriented(b2, n2, pp, 6), "PNG: the eXIf's tag must win over the XMP");
    free(b);
    free(b2);
    uint8_t app1[256];
    memcpy(app1, "http://ns.adobe.com/xap/1.0/", 29); /* with its NUL */
    memcpy(app1 + 29, xmp8, strlen(xmp8));
    b = jpeg_insert_app1(jm.data, jm.size, app1, 29 + strlen(xmp8), &n);
    CHECK(jp && decodes_oriented(b, n, jp, 8), "JPEG: XMP tiff:Orientation 8 not applied");
    free(b);
    memcpy(app1, "Exif\0\0", 6);
    memcpy(app1 + 6, long6, sizeof long6);
    b = jpeg_insert_app1(jm.data, jm.size, app1, 6 + sizeof long6, &n);
    CHECK(jp && decodes_oriented(b, n, jp, 6), "JPEG: Exif LONG orientation 6 not applied");
    free(b);
    plume_image_free(pp);
    plume_image_free(jp);
    plume_map_free(&pm);
    plume_map_free(&jm);
}

/* A 16 x 16 CMYK JPEG of one colour (c, m, y, k as stored), with or without libjpeg's Adobe
 * APP14 marker; malloc'd into *out, its size returned. */
static size_t cmyk_jpeg(const uint8_t cmyk[4], int adobe, uint8_t **out) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned long n = 0;
    *out = NULL;
    jpeg_mem_dest(&ci, out, &n);
    ci.image_width = ci.image_height = 16;
    ci.input_components = 4;
    ci.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    ci.write_Adobe_marker = adobe ? TRUE : FALSE;
    jpeg_start_compress(&ci, TRUE);
    uint8_t row[16 * 4];
    for (int x = 0; x < 16; x++) memcpy(row + 4 * x, cmyk, 4);
    while (ci.next_scanline < 16) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return n;
}

/* Pillow reads every CMYK JPEG as "CMYK;I" (inverted), Adobe marker or not: a file without the
 * marker is not the colour negative of the same file with it. Expected: PIL's CMYK -> RGB of
 * the inverted samples (r = nk - c * nk / 255 rounded as MULDIV255, nk = 255 - k). */
static void test_cmyk_without_adobe(void) {
    static const uint8_t stored[4] = {30, 90, 160, 40};
    int want[3];
    int nk = 255 - (255 - stored[3]);
    for (int k = 0; k < 3; k++) {
        int t = (255 - stored[k]) * nk + 128;
        want[k] = nk - (((t >> 8) + t) >> 8);
    }
    for (int adobe = 0; adobe < 2; adobe++) {
        uint8_t *jpg = NULL;
        size_t n = cmyk_jpeg(stored, adobe, &jpg);
        plume_image *im = NULL;
        char *err = NULL;
        CHECK(plume_image_decode(&im, jpg, n, &err) == 0 && im, "CMYK (Adobe %d): %s", adobe, err ? err : "");
        int worst = 0;
        for (int i = 0; im && i < im->w * im->h; i++)
            for (int k = 0; k < 3; k++) {
                int d = abs((int)im->rgb[3 * i + k] - want[k]);
                worst = d > worst ? d : worst;
            }
        CHECK(im && worst <= LOSSY_TOL, "CMYK (Adobe marker %d): differs from Pillow's by %d (pixel 0: %d %d %d, want %d %d %d)",
              adobe, worst, im ? im->rgb[0] : -1, im ? im->rgb[1] : -1, im ? im->rgb[2] : -1, want[0], want[1], want[2]);
        plume_image_free(im);
        free(err);
        free(jpg);
    }
}

/* ---- bad images ------------------------------------------------------------------------ */

/* Decode bytes that must be refused; the message must contain want. */
static void expect_refused(const char *what, const void *b, size_t n, const char *want) {
    plume_image *im = NULL;
    char *err = NULL;
    int rc = plume_image_decode(&im, b, n, &err);
    CHECK(rc == PLUME_EFORMAT && !im && err && strstr(err, want), "%s: rc %d, message '%s' (want '%s')", what, rc,
          err ? err : "", want);
    plume_image_free(im);
    free(err);
}

/* A PNG header claiming w x h RGB pixels, 8 bits, then an empty IDAT: written by hand so
 * that the header can claim any size. */
static size_t png_claiming(uint8_t *out, uint32_t w, uint32_t h) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(out, sig, 8);
    n = 8;
    uint8_t ihdr[25] = {0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    for (int i = 0; i < 4; i++) ihdr[8 + i] = (uint8_t)(w >> (24 - 8 * i)), ihdr[12 + i] = (uint8_t)(h >> (24 - 8 * i));
    ihdr[16] = 8;
    ihdr[17] = 2;
    /* CRC-32 of type + data, as libpng checks it */
    uint32_t crc = 0xffffffffu;
    for (int i = 4; i < 21; i++) {
        crc ^= ihdr[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    crc ^= 0xffffffffu;
    for (int i = 0; i < 4; i++) ihdr[21 + i] = (uint8_t)(crc >> (24 - 8 * i));
    memcpy(out + n, ihdr, 25);
    n += 25;
    static const uint8_t idat_iend[24] = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0x35, 0xaf, 0x06, 0x1e,
                                          0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    memcpy(out + n, idat_iend, 24); /* an empty IDAT: the pixels are never reached */
    return n + 24;
}

/* Truncated files of each format, not an image, an empty file, a zero-sized and a 20000 x
 * 20000 PNG (refused before any pixel is allocated: the sanitizers would see a 1.2 GB
 * allocation otherwise), bytes after a JPEG signature that are a PNG, a corrupt CRC; a PNG
 * named .jpg is a PNG (the bytes decide, as in PIL). */
static void test_bad_images(void) {
    static const char *const files[] = {"A.png", "B_crop.jpg", "decode/lossy.webp", "decode/interlaced.png"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        plume_map m;
        char *err = NULL;
        if (plume_map_open(&m, fx(files[i]), &err)) { CHECK(0, "%s", err); free(err); continue; }
        for (size_t cut = 1; cut < m.size; cut += cut < 64 ? 7 : m.size / 5) {
            plume_image *im = NULL;
            int rc = plume_image_decode(&im, m.data, cut, &err);
            CHECK(rc != 0 && !im && err, "%s cut to %zu bytes decoded", files[i], cut);
            free(err);
            err = NULL;
            plume_image_free(im);
        }
        if (strstr(files[i], ".png")) { /* a PNG behind a JPEG signature */
            uint8_t *b = malloc(m.size + 3);
            b[0] = 0xff, b[1] = 0xd8, b[2] = 0xff;
            memcpy(b + 3, m.data, m.size);
            expect_refused("a PNG after a JPEG signature", b, m.size + 3, "JPEG");
            memcpy(b, m.data, m.size);
            b[40] ^= 0x55; /* inside IDAT: the CRC no longer matches */
            plume_image *im = NULL;
            CHECK(plume_image_decode(&im, b, m.size, &err) == PLUME_EFORMAT && err, "a corrupt CRC decoded");
            free(err);
            err = NULL;
            plume_image_free(im);
            free(b);
        }
        plume_map_free(&m);
    }
    expect_refused("text", "hello, world", 12, "not a PNG, JPEG or WebP");
    expect_refused("empty", "", 0, "no bytes");
    uint8_t png[64];
    expect_refused("20000x20000 PNG", png, png_claiming(png, 20000, 20000), "more than plume decodes");
    expect_refused("0x5 PNG", png, png_claiming(png, 0, 5), "PNG");
    /* a PNG in a file named .jpg */
    char path[700], *err = NULL;
    snprintf(path, sizeof path, "%s/really-a-png.jpg", tdir);
    char *buf = NULL;
    size_t len;
    plume_image *a = NULL, *b = NULL;
    if (plume_read_file(fx("A.png"), &buf, &len, &err) == 0 && plume_write_file(path, buf, len, 0, &err) == 0) {
        a = load(path);
        b = load(fx("A.png"));
        CHECK(a && b && a->w == b->w && !memcmp(a->rgb, b->rgb, (size_t)a->w * a->h * 3), "a PNG named .jpg is not A.png");
    }
    plume_image *missing = NULL;
    snprintf(path, sizeof path, "%s/none.png", tdir);
    CHECK(plume_image_load(&missing, path, &err) == PLUME_EIO && err && strstr(err, "none.png"), "a missing file: %s",
          err ? err : "");
    free(err);
    free(buf);
    plume_image_free(a);
    plume_image_free(b);
}

/* plume_image_from_rgb copies; its size limits are the decoders'. */
static void test_image_from_rgb(void) {
    uint8_t px[2 * 3 * 3];
    for (int i = 0; i < 18; i++) px[i] = (uint8_t)(i * 13);
    plume_image *im = NULL;
    char *err = NULL;
    CHECK(plume_image_from_rgb(&im, px, 3, 2, &err) == 0 && plume_image_width(im) == 3 && plume_image_height(im) == 2 &&
              !memcmp(plume_image_rgb(im), px, 18),
          "from_rgb");
    plume_image_free(im);
    im = NULL;
    CHECK(plume_image_from_rgb(&im, px, 0, 2, &err) == PLUME_EFORMAT && !im, "a 0-wide image was made");
    free(err);
}

int main(void) {
    tdir = t_tmpdir("media");
    RUN(test_png_pixels_exact);
    RUN(test_downscale_matches_pillow);
    RUN(test_plan_sizes);
    RUN(test_jpeg_matches_pil);
    RUN(test_decode_variants_match_pillow);
    RUN(test_exif_orientation);
    RUN(test_exif_orientation_types);
    RUN(test_orientation_sources);
    RUN(test_cmyk_without_adobe);
    RUN(test_bad_images);
    RUN(test_image_from_rgb);
    char out[256];
    t_sh(out, sizeof out, "rm -rf '%s'", tdir);
    free(tdir);
    return t_total_failed != 0;
}
