/* test_vision.c -- images through the model against tiny-mm-a's goldens: the tower's pooled
 * output and embeddings, the one- and two-image logits and greedy continuation through the
 * library and `plume logits`, sessions (prefix reuse that tells images apart, rewinds into an
 * image, save and load), the tower on every kernel table against the scalar one, the bundle
 * (vision.safetensors; synth's towers; text-only checkpoints), and the CLI's image errors.
 *
 * The checkpoint is tiny-a's text shards (tests/data/tiny-a/hf: the golden's text part is
 * tiny-a exactly) with tests/data/tiny-mm-a/hf's config, index and tower tensors. */
#include "encoders/encoders.h"
#include "media/media.h"
#include "model.h"
#include "npy.h"
#include "t.h"
#include "t_mm.h"
#include "t_tiny.h"

/* tiny-mm-a's f32-vs-f64 floor is 5.6e-7 (embeddings) and 3.9e-6 (logits); the README's
 * acceptance is 1e-4 relative RMS (max 1e-3 / 2e-3), 25x above it. */
#define TOWER_RMS 1e-4
#define TOWER_MAX 1e-3
#define LOGITS_RMS 1e-4
#define LOGITS_MAX 2e-3
/* The same tower on another kernel table: float sums in another order. */
#define ISA_RMS 1e-5

static char *tmp;
static char bundle[700];          /* the f32 bundle of tiny-mm-a */
static plume_model *m;
static plume_embd *emb_a, *emb_c; /* A.png (image0) and C.png (image2) at the default budget */

/* An .npy as floats (malloc'd), its element count and first dimension. */
static float *npy_floats(const char *path, int64_t *count, int64_t *rows) {
    plume_map mp;
    npy_view v;
    char *err = NULL;
    if (npy_open(path, &mp, &v, &err)) {
        printf("  %s\n", err);
        free(err);
        return NULL;
    }
    float *f = malloc((size_t)(v.count ? v.count : 1) * sizeof *f);
    npy_to_f32(&v, f);
    *count = v.count;
    if (rows) *rows = v.ndim ? v.shape[0] : 1;
    plume_map_free(&mp);
    return f;
}

/* An .npy of ids (malloc'd) and its length. */
static int32_t *npy_ids(const char *path, int32_t *n) {
    int64_t c;
    float *f = npy_floats(path, &c, NULL);
    int32_t *ids = f ? malloc((size_t)c * sizeof *ids) : NULL;
    for (int64_t i = 0; ids && i < c; i++) ids[i] = (int32_t)f[i];
    *n = (int32_t)c;
    free(f);
    return ids;
}

/* Compare a[n] with the golden b: relative RMS and max |d| within the limits. */
static void check_close(const char *what, const float *a, const float *b, size_t n, double rms, double mx) {
    double r = t_rel_rms(a, b, n), d = t_max_abs(a, b, n);
    CHECK(r <= rms && d <= mx, "%s: relative RMS %.3g (limit %.0e), max |d| %.3g (limit %.0e)", what, r, rms, d, mx);
}

/* A session of context n_ctx; NULL on error (printed). */
static plume_session *session(int32_t n_ctx, int32_t n_batch, int32_t n_rewind, int32_t snap) {
    return t_tiny_session(m, n_ctx, n_batch, n_rewind, snap);
}

/* The golden rows (logits_q8emb_*_rows.npy at the positions of its _idx file) against
 * logits [T, V] computed for the whole prompt. */
static void check_rows(const char *what, const float *logits, const char *rows_file, const char *idx_file) {
    int64_t c, nr, ci;
    float *g = npy_floats(fx(rows_file), &c, &nr), *idx = npy_floats(fx(idx_file), &ci, NULL);
    const int32_t V = plume_model_n_vocab(m);
    float *mine = g ? malloc((size_t)c * sizeof *mine) : NULL;
    for (int64_t r = 0; mine && r < nr; r++) memcpy(mine + r * V, logits + (int64_t)idx[r] * V, (size_t)V * 4);
    if (mine) check_close(what, mine, g, (size_t)c, LOGITS_RMS, LOGITS_MAX);
    free(mine);
    free(g);
    free(idx);
}

/* ---- the tower ------------------------------------------------------------------------- */

/* A.png: the pooled tower output (soft) and the embeddings against the golden. */
static void test_tower_matches_golden(void) {
    int64_t cs, ce;
    float *gs = npy_floats(fx("image0_vision_soft.npy"), &cs, NULL), *ge = npy_floats(fx("image0_vision_emb.npy"), &ce, NULL);
    CHECK(emb_a && gs && ge, "setup");
    if (!emb_a || !gs || !ge) return;
    CHECK(plume_embd_n_tokens(emb_a) == 273 && plume_embd_dim(emb_a) == 64 && plume_embd_placeholder(emb_a) == 12,
          "A.png: %d tokens of %d for id %d", plume_embd_n_tokens(emb_a), plume_embd_dim(emb_a), plume_embd_placeholder(emb_a));
    check_close("image0 emb", plume_embd_data(emb_a), ge, (size_t)ce, TOWER_RMS, TOWER_MAX);
    /* the pooled output itself, through the room's entry */
    plume_image *img = NULL;
    char *err = NULL;
    media_plan p;
    uint8_t *rgb = NULL;
    if (plume_image_load(&img, fx("A.png"), &err) == 0 && media_plan_for(img->h, img->w, 16, 3, 280, &p, &err) == 0 &&
        media_plan_pixels(img, &p, &rgb, &err) == 0) {
        float *pix = malloc((size_t)p.n_patches * 768 * 4), *soft = malloc((size_t)cs * 4), *e = malloc((size_t)ce * 4);
        int32_t *pos = malloc((size_t)p.n_patches * 8);
        media_patchify(rgb, &p, 16, pix, pos);
        const enc_run run = {.k = m->k, .pool = m->pool};
        CHECK(enc_vision_encode(m->vision, &run, pix, pos, p.ph, p.pw, soft, e, &err) == 0, "%s", err ? err : "");
        check_close("image0 soft", soft, gs, (size_t)cs, TOWER_RMS, TOWER_MAX);
        free(pix), free(soft), free(e), free(pos);
    }
    uint64_t key = 0;
    int32_t n = 0;
    CHECK(plume_image_tokens(m, img, NULL, &n, &key, &err) == 0 && n == 273 && key == plume_embd_key(emb_a),
          "plume_image_tokens: %d tokens, key %llx vs %llx", n, (unsigned long long)key, (unsigned long long)plume_embd_key(emb_a));
    free(err);
    free(rgb);
    plume_image_free(img);
    free(gs);
    free(ge);
}

/* The rows, count and key of an encoding equal, bit for bit. */
static int same_embd(const plume_embd *a, const plume_embd *b) {
    return a && b && plume_embd_n_tokens(a) == plume_embd_n_tokens(b) && plume_embd_dim(a) == plume_embd_dim(b) &&
           plume_embd_key(a) == plume_embd_key(b) &&
           !memcmp(plume_embd_data(a), plume_embd_data(b),
                   (size_t)plume_embd_n_tokens(a) * (size_t)plume_embd_dim(a) * sizeof(float));
}

/* plume_image_shrink (what plume serve does right after decoding): a 1500 x 1000 image of
 * random pixels shrunk at the default budget and at 560 holds the tower's resized pixels only,
 * and its tokens, key and rows are the decoded image's bit for bit; a shrunk image at another
 * budget is refused; an image the tower upscales (A.png) is kept as decoded, its encoding the
 * golden's (emb_a). */
static void test_shrink_is_exact(void) {
    enum { W = 1500, H = 1000 };
    uint8_t *rgb = malloc((size_t)W * H * 3);
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)W * H * 3; i++) rgb[i] = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
    char *err = NULL;
    for (int32_t budget = 0; budget <= 560; budget += 560) {
        plume_image_params p = {.max_tokens = budget};
        plume_image *full = NULL, *small = NULL;
        plume_embd *want = NULL, *got = NULL;
        uint64_t k1 = 0, k2 = 0;
        int32_t n1 = 0, n2 = 0;
        int rc = plume_image_from_rgb(&full, rgb, W, H, &err) || plume_image_from_rgb(&small, rgb, W, H, &err) ||
                 plume_image_encode(&want, m, full, &p, &err) || plume_image_tokens(m, full, &p, &n1, &k1, &err) ||
                 plume_image_shrink(small, m, &p, &err) || plume_image_tokens(m, small, &p, &n2, &k2, &err) ||
                 plume_image_encode(&got, m, small, &p, &err);
        CHECK(rc == 0, "budget %d: %s", budget, err ? err : "");
        int32_t sw = plume_image_width(small), sh = plume_image_height(small);
        printf("  budget %d: %d x %d shrunk to %d x %d, %d tokens\n", budget, W, H, sw, sh, n2);
        CHECK(!rc && (int64_t)sw * sh < (int64_t)W * H, "budget %d: shrunk to %d x %d", budget, sw, sh);
        CHECK(!rc && n1 == n2 && k1 == k2 && k1 == plume_embd_key(want), "budget %d: %d/%d tokens, keys %llx %llx", budget,
              n1, n2, (unsigned long long)k1, (unsigned long long)k2);
        CHECK(!rc && same_embd(want, got), "budget %d: the shrunk image's rows differ", budget);
        CHECK(plume_image_shrink(small, m, &p, &err) == 0 && plume_image_width(small) == sw, "shrunk twice: %s",
              err ? err : "");
        plume_image_params other = {.max_tokens = budget ? 70 : 1120};
        plume_embd *bad = NULL;
        free(err), err = NULL;
        CHECK(plume_image_encode(&bad, m, small, &other, &err) == PLUME_EINVAL && !bad && err && strstr(err, "shrunk"),
              "budget %d, encoded at %d: %s", budget, other.max_tokens, err ? err : "(no error)");
        free(err), err = NULL;
        plume_embd_free(want), plume_embd_free(got), plume_image_free(full), plume_image_free(small);
    }
    free(rgb);
    plume_image *a = NULL;
    plume_embd *e = NULL;
    int rc = plume_image_load(&a, fx("A.png"), &err);
    int32_t w0 = rc ? 0 : plume_image_width(a);
    if (!rc) rc = plume_image_shrink(a, m, NULL, &err);
    if (!rc) rc = plume_image_encode(&e, m, a, NULL, &err);
    CHECK(rc == 0 && plume_image_width(a) == w0 && same_embd(e, emb_a), "A.png shrunk: %s", err ? err : "");
    plume_embd_free(e), plume_image_free(a), free(err);
}

/* An abort callback: stop at the call counted by *ctx reaching 0 (counted down). */
static int stop_at(void *ctx) {
    int *left = ctx;
    return --*left < 0;
}

/* A plume_encoder (threads of its own, 1 and 3) gives plume_image_encode's rows and key bit
 * for bit; its abort callback stops an encode between layers with PLUME_ECANCELED and no rows
 * (at the first layer, and at the second). */
static void test_encoder_own_threads(void) {
    plume_image *img = NULL;
    plume_embd *want = NULL;
    char *err = NULL;
    int rc = plume_image_load(&img, fx("A.png"), &err);
    if (!rc) rc = plume_image_encode(&want, m, img, NULL, &err);
    CHECK(rc == 0, "%s", err ? err : "");
    for (int32_t nt = 1; !rc && nt <= 3; nt += 2) {
        plume_encoder *enc = NULL;
        plume_embd *got = NULL;
        rc = plume_encoder_new(&enc, m, nt, &err);
        if (!rc) rc = plume_encoder_image(enc, &got, img, NULL, &err);
        size_t bytes = (size_t)plume_embd_n_tokens(want) * (size_t)plume_embd_dim(want) * sizeof(float);
        CHECK(rc == 0 && plume_embd_n_tokens(got) == 273 && plume_embd_key(got) == plume_embd_key(want) &&
                  !memcmp(plume_embd_data(got), plume_embd_data(want), bytes),
              "%d threads: rc %d %s", nt, rc, err ? err : "");
        plume_embd_free(got);
        for (int at = 0; !rc && at <= 1; at++) {
            int left = at;
            got = NULL;
            plume_encoder_set_abort(enc, stop_at, &left);
            int st = plume_encoder_image(enc, &got, img, NULL, &err);
            CHECK(st == PLUME_ECANCELED && !got && err && strstr(err, "stopped"), "stopped at layer %d: %d %s", at, st,
                  err ? err : "");
            free(err), err = NULL;
        }
        plume_encoder_free(enc);
    }
    plume_embd_free(want), plume_image_free(img), free(err);
}

/* The tower on every kernel table against the scalar one, on a small odd grid (6 x 9 patches
 * of random pixels, with out-of-range positions refused). */
static void test_tower_every_isa_vs_scalar(void) {
    enum { PH = 6, PW = 9, N = PH * PW };
    float *pix = malloc((size_t)N * 768 * 4);
    int32_t pos[2 * N];
    uint64_t rng = 99;
    for (int32_t i = 0; i < N * 768; i++) pix[i] = plume_rng_float(&rng);
    for (int32_t i = 0; i < N; i++) pos[2 * i] = i % PW, pos[2 * i + 1] = i / PW;
    const int32_t n = N / 9;
    float ref[n * 64], got[n * 64], rs[n * 32], gs[n * 32];
    char *err = NULL;
    const enc_run sc = {.k = plume_kernels_get("scalar"), .pool = m->pool};
    CHECK(enc_vision_encode(m->vision, &sc, pix, pos, PH, PW, rs, ref, &err) == 0, "scalar: %s", err ? err : "");
    const char *names[8];
    int na = plume_kernels_available(names, 8);
    for (int i = 0; i < na; i++) {
        const enc_run k = {.k = plume_kernels_get(names[i]), .pool = m->pool};
        CHECK(enc_vision_encode(m->vision, &k, pix, pos, PH, PW, gs, got, &err) == 0, "%s: %s", names[i],
              err ? err : "");
        double r = t_rel_rms(got, ref, (size_t)n * 64), r2 = t_rel_rms(gs, rs, (size_t)n * 32);
        CHECK(r <= ISA_RMS && r2 <= ISA_RMS, "%s vs scalar: emb %.3g, soft %.3g", names[i], r, r2);
    }
    CHECK(enc_vision_encode(m->vision, &sc, pix, pos, PH, 7, gs, got, &err) == PLUME_EINVAL,
          "a width that is not a multiple of the pool was accepted");
    free(err);
    err = NULL;
    pos[0] = PW;
    CHECK(enc_vision_encode(m->vision, &sc, pix, pos, PH, PW, gs, got, &err) == PLUME_EINVAL, "a patch outside the grid");
    free(err);
    free(pix);
}

/* ---- into the decoder ------------------------------------------------------------------ */

/* Two images (A, then C): the logits of every position (a subset kept) against the golden,
 * then 16 greedy tokens against greedy_q8emb_2img (the bundle reads the INT8 sidecars). */
static void test_two_images_logits_and_greedy(void) {
    int32_t n, ng;
    int32_t *ids = npy_ids(fx("ids_2img.npy"), &n), *greedy = npy_ids(fx("greedy_q8emb_2img.npy"), &ng);
    plume_session *s = session(1024, 128, -2, 0);
    const int32_t V = plume_model_n_vocab(m);
    float *lg = malloc((size_t)n * V * 4);
    const plume_embd *media[2] = {emb_a, emb_c};
    char *err = NULL;
    CHECK(s && ids && plume_session_feed_media(s, ids, n, media, 2, lg, 1, &err) == 0, "feed: %s", err ? err : "");
    check_rows("two images", lg, "logits_q8emb_2img_rows.npy", "logits_q8emb_2img_rows_idx.npy");
    int32_t id = 0;
    for (int32_t i = 0; s && i < ng; i++) {
        const float *row = i == 0 ? lg + (int64_t)(n - 1) * V : lg;
        id = 0;
        for (int32_t v = 1; v < V; v++) id = row[v] > row[id] ? v : id;
        CHECK(id == greedy[i], "greedy step %d: %d, want %d", i, id, greedy[i]);
        if (id != greedy[i] || plume_session_feed(s, &id, 1, lg, 0, &err)) break;
    }
    free(err);
    free(lg);
    free(ids);
    free(greedy);
    plume_session_free(s);
}

/* One image: the mixed prompt up to its first audio placeholder (its logits there depend on
 * nothing after, causal attention); fed 7 rows a step, so image runs cross steps. */
static void test_one_image_logits(void) {
    int32_t n;
    int32_t *ids = npy_ids(fx("ids_1img.npy"), &n);
    plume_session *s = session(512, 7, -2, 0);
    float *lg = malloc((size_t)n * plume_model_n_vocab(m) * 4);
    const plume_embd *media[1] = {emb_a};
    char *err = NULL;
    CHECK(s && ids && plume_session_feed_media(s, ids, n, media, 1, lg, 1, &err) == 0, "feed: %s", err ? err : "");
    check_rows("one image", lg, "logits_q8emb_1img_rows.npy", "logits_q8emb_1img_rows_idx.npy");
    /* placeholders and images must pair up */
    plume_session_rewind(s, 0, &err);
    CHECK(plume_session_feed_media(s, ids, n, NULL, 0, lg, 0, &err) == PLUME_EINVAL && plume_session_n_past(s) == 0,
          "placeholders without an image were fed");
    free(err);
    err = NULL;
    const plume_embd *two[2] = {emb_a, emb_a};
    CHECK(plume_session_feed_media(s, ids, n, two, 2, lg, 0, &err) == PLUME_EINVAL && err && strstr(err, "media 1"),
          "two images for one run: %s", err ? err : "");
    free(err);
    free(lg);
    free(ids);
    plume_session_free(s);
}

/* plume_prompt_expand: one placeholder per image -> its run; mismatches refused. */
static void test_prompt_expand(void) {
    const int32_t img = plume_model_media_token(m, "image");
    const int32_t in[5] = {2, 105, img, 300, img};
    int32_t out[600];
    const plume_embd *media[2] = {emb_a, emb_c};
    char *err = NULL;
    int32_t k = plume_prompt_expand(m, in, 5, media, 2, out, 600, &err);
    CHECK(k == 3 + 275 + 252, "expanded to %d", k);
    CHECK(out[2] == plume_model_media_token(m, "boi") && out[3] == img && out[275] == img &&
              out[276] == plume_model_media_token(m, "eoi") && out[277] == 300,
          "layout");
    CHECK(plume_prompt_expand(m, in, 5, media, 1, out, 600, &err) == PLUME_EINVAL, "two placeholders, one image");
    free(err);
    err = NULL;
    CHECK(plume_prompt_expand(m, in, 3, media, 2, out, 600, &err) == PLUME_EINVAL, "one placeholder, two images");
    free(err);
    CHECK(plume_model_media_token(m, "audio") == 13 && plume_model_media_token(m, "eoa") == 15 &&
              plume_model_media_token(m, "video") == 16 && plume_model_media_token(m, "nope") == -1,
          "media ids from config.json");
}

/* The two-image prompt through plume_batch_add_media in steps of at most 39 rows, beside a
 * text-only session in the same steps: its logits equal the session's own feed, bit for bit,
 * and the batch's session rewinds through its images afterwards (the batch kept its rows). */
static void test_batch_with_images(void) {
    int32_t n;
    int32_t *ids = npy_ids(fx("ids_2img.npy"), &n);
    plume_session *s = session(1024, 64, 0, 64), *t = session(1024, 64, -2, 0), *f = session(1024, 64, -2, 0);
    plume_batch *b = NULL;
    const int32_t V = plume_model_n_vocab(m), img = plume_model_media_token(m, "image");
    float *a = malloc((size_t)V * 4), *want = malloc((size_t)V * 4), *tl = malloc((size_t)V * 4);
    const plume_embd *ac[2] = {emb_a, emb_c};
    char *err = NULL;
    CHECK(plume_batch_new(&b, m, 40, &err) == 0 && plume_session_feed_media(f, ids, n, ac, 2, want, 0, &err) == 0,
          "setup: %s", err ? err : "");
    int32_t fed = 0, skip = 0, txt = 7;
    while (b && fed < n) {
        CHECK(plume_batch_add(b, t, &txt, 1, tl, 0, &err) == 1, "text beside it");
        int32_t k = plume_batch_add_media(b, s, ids + fed, n - fed, ac, 2, skip, a, 0, &err);
        CHECK(k > 0, "add_media at %d: %s", fed, err ? err : "");
        if (k <= 0) break;
        CHECK(plume_batch_run(b, &err) == 0, "run: %s", err ? err : "");
        for (int32_t i = fed; i < fed + k; i++) skip += ids[i] == img;
        fed += k;
    }
    CHECK(fed == n && !memcmp(a, want, (size_t)V * 4), "the batched prompt's logits differ from the session's own");
    int32_t reused = -1;
    CHECK(plume_session_rewind(s, 250, &err) == 0 && plume_session_feed_prompt_media(s, ids, n, ac, 2, a, &reused, &err) == 0 &&
              reused == 250 && !memcmp(a, want, (size_t)V * 4),
          "rewind after the batch: %s", err ? err : "");
    /* from inside A's run (its rows 269.. left) into C's run with A alone given: refused, nothing queued */
    CHECK(b && plume_batch_add_media(b, s, ids + 275, n - 275, ac, 1, 269, a, 0, &err) == PLUME_EINVAL &&
              plume_batch_n_tokens(b) == 0,
          "rows past the media given were queued");
    free(err), free(a), free(want), free(tl), free(ids);
    plume_batch_free(b);
    plume_session_free(s);
    plume_session_free(t);
    plume_session_free(f);
}

/* ---- sessions -------------------------------------------------------------------------- */

/* Prefix reuse: the same two-image prompt again reuses all but its last row; the prompt with
 * C in the first image's place (another image, another run length) reuses only the text
 * before it, and both give the logits of a fresh prefill. */
static void test_prefix_reuse_tells_images_apart(void) {
    int32_t n;
    int32_t *ids = npy_ids(fx("ids_2img.npy"), &n);
    plume_session *s = session(1024, 64, -2, 0), *f = session(1024, 64, -2, 0);
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    const plume_embd *ac[2] = {emb_a, emb_c}, *cc[2] = {emb_c, emb_c};
    char *err = NULL;
    int32_t reused = -1;
    CHECK(plume_session_feed_prompt_media(s, ids, n, ac, 2, a, &reused, &err) == 0 && reused == 0, "first: %s", err ? err : "");
    CHECK(plume_session_feed_prompt_media(s, ids, n, ac, 2, b, &reused, &err) == 0 && reused == n - 1, "again: reused %d", reused);
    CHECK(!memcmp(a, b, (size_t)V * 4), "the reused prompt's logits differ");
    /* image C where A was: 250 rows instead of 273 */
    int32_t *ids2 = malloc((size_t)n * sizeof *ids2), k = 0;
    for (int32_t i = 0; i < n; i++)
        if (!(i >= 6 + 250 && i < 6 + 273)) ids2[k++] = ids[i];
    CHECK(plume_session_feed_prompt_media(s, ids2, k, cc, 2, a, &reused, &err) == 0 && reused == 6,
          "another image: reused %d (want the 6 rows before it): %s", reused, err ? err : "");
    CHECK(plume_session_feed_media(f, ids2, k, cc, 2, b, 0, &err) == 0 && !memcmp(a, b, (size_t)V * 4),
          "after a partial reuse the logits differ from a fresh prefill");
    /* a plain prompt with placeholder ids is not the image's history */
    CHECK(plume_session_feed_prompt(f, ids2, 100, a, &reused, &err) == 0 && reused == 6, "plain over an image: reused %d", reused);
    free(err);
    free(ids2);
    free(a);
    free(b);
    free(ids);
    plume_session_free(s);
    plume_session_free(f);
}

/* A rewind into an image that must recompute (no spare ring slots, snapshots every 64): from
 * 541 back to 300 (inside image A's run is 6..278; 256..300 are recomputed from the snapshot
 * at 256, through A's last rows), then the rest of the prompt again: the golden logits. */
static void test_rewind_recomputes_through_images(void) {
    int32_t n;
    int32_t *ids = npy_ids(fx("ids_2img.npy"), &n);
    plume_session *s = session(1024, 32, 0, 64);
    const int32_t V = plume_model_n_vocab(m);
    float *lg = malloc((size_t)n * V * 4);
    const plume_embd *ac[2] = {emb_a, emb_c};
    char *err = NULL;
    int32_t reused = -1;
    CHECK(s && plume_session_feed_media(s, ids, n, ac, 2, NULL, 0, &err) == 0, "feed: %s", err ? err : "");
    CHECK(plume_session_rewind(s, 270, &err) == 0 && plume_session_n_past(s) == 270, "rewind: %s", err ? err : "");
    CHECK(plume_session_rewind_point(s, 270) == 270, "rewind_point");
    CHECK(plume_session_feed_prompt_media(s, ids, n, ac, 2, lg + (int64_t)(n - 1) * V, &reused, &err) == 0 && reused == 270,
          "refeed: reused %d: %s", reused, err ? err : "");
    /* the last row against the golden's last row (row n - 1 is in the kept subset) */
    int64_t c, nr, ci;
    float *g = npy_floats(fx("logits_q8emb_2img_rows.npy"), &c, &nr), *idx = npy_floats(fx("logits_q8emb_2img_rows_idx.npy"), &ci, NULL);
    CHECK(g && idx && (int32_t)idx[ci - 1] == n - 1, "fixture");
    if (g && idx) check_close("after a rewind into an image", lg + (int64_t)(n - 1) * V, g + (nr - 1) * V, (size_t)V, LOGITS_RMS, LOGITS_MAX);
    free(g), free(idx), free(err), free(lg), free(ids);
    plume_session_free(s);
}

/* Save a session in the middle of image A, load it, feed the rest of the prompt (the reuse
 * keeps the loaded rows): the golden last row; the loaded session also rewinds into A
 * (recomputing from its saved rows). A saved text-only session stays version 1. */
static void test_save_load_with_an_image(void) {
    int32_t n;
    int32_t *ids = npy_ids(fx("ids_1img.npy"), &n);
    plume_session *s = session(512, 64, 0, 64), *l = NULL;
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    const plume_embd *one[1] = {emb_a};
    char *err = NULL, path[700], out[256];
    int32_t reused = -1;
    snprintf(path, sizeof path, "%s/img.state", tmp);
    CHECK(plume_session_feed_media(s, ids, n, one, 1, a, 0, &err) == 0, "feed: %s", err ? err : "");
    CHECK(plume_session_rewind(s, 200, &err) == 0 && plume_session_save(s, path, &err) == 0, "save: %s", err ? err : "");
    CHECK(plume_session_load(&l, m, path, &err) == 0 && plume_session_n_past(l) == 200, "load: %s", err ? err : "");
    CHECK(l && plume_session_feed_prompt_media(l, ids, n, one, 1, b, &reused, &err) == 0 && reused == 200,
          "continue: reused %d: %s", reused, err ? err : "");
    CHECK(!memcmp(a, b, (size_t)V * 4), "the loaded session's logits differ");
    CHECK(l && plume_session_rewind(l, 100, &err) == 0 && plume_session_feed_prompt_media(l, ids, n, one, 1, b, &reused, &err) == 0 &&
              reused == 100 && !memcmp(a, b, (size_t)V * 4),
          "rewind into the loaded image: %s", err ? err : "");
    /* a corrupt media section is refused: flip a byte of the saved rows and fix nothing else */
    t_sh(out, sizeof out, "printf '\\377' | dd of='%s' bs=1 seek=$(( $(stat -c %%s '%s') - 100 )) conv=notrunc 2>/dev/null", path, path);
    plume_session *bad = NULL;
    CHECK(plume_session_load(&bad, m, path, &err) == PLUME_EFORMAT && !bad, "a corrupt state loaded");
    plume_session_free(bad);
    /* the version: 2 with media, 1 without */
    plume_session *t = session(64, 16, -2, 0);
    int32_t txt[3] = {2, 105, 300};
    char p1[700];
    snprintf(p1, sizeof p1, "%s/txt.state", tmp);
    CHECK(t && plume_session_feed(t, txt, 3, NULL, 0, &err) == 0 && plume_session_save(t, p1, &err) == 0, "text save");
    char *buf = NULL;
    size_t len = 0;
    if (plume_read_file(p1, &buf, &len, &err) == 0) CHECK(len > 12 && buf[8] == 1, "a text-only state is version %d", buf[8]);
    free(buf);
    plume_session_free(t);
    free(err), free(a), free(b), free(ids);
    plume_session_free(s);
    plume_session_free(l);
}

/* ---- the bundle and the CLI ------------------------------------------------------------ */

/* model_config.json has the tower and the ids; a text-only checkpoint (tiny-a) converts
 * without a tower and refuses images; a bundle whose tower file is gone is refused at open. */
static void test_bundle(void) {
    char out[4096], d[700];
    CHECK(plume_model_has_vision(m), "no tower");
    CHECK(t_sh(out, sizeof out, "grep -q '\"vision\"' %s/model_config.json && grep -q '\"image_token_id\":\\s*12' %s/model_config.json",
               bundle, bundle) == 0, "model_config.json lacks the vision section or the image id");
    snprintf(d, sizeof d, "%s/text", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights f32 --quiet", t_build(), t_data(), d) == 0,
          "tiny-a: %s", out);
    CHECK(t_sh(out, sizeof out, "test ! -e %s/vision.safetensors", d) == 0, "a text-only bundle has a tower file");
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s -o %s/x.npy", t_build(), d, fx("A.png"), tmp) == 1 &&
              strstr(out, "no vision tower"),
          "embed on a text-only bundle: %s", out);
    snprintf(d, sizeof d, "%s/notower", tmp);
    t_sh(out, sizeof out, "cp -r %s %s && rm %s/vision.safetensors", bundle, d, d);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s -o %s/x.npy", t_build(), d, fx("A.png"), tmp) == 1 &&
              strstr(out, "vision.safetensors"),
          "a bundle without its tower file: %s", out);
}

/* synth with a config that has a whole vision_config writes a real tower, and its checkpoint
 * converts to the same bundle bytes as the bundle written directly (towers included). */
static void test_synth_tower(void) {
    char out[4096];
    const char *b = t_build();
    CHECK(t_sh(out, sizeof out,
               "%s/plume synth --config %s --seed 3 --bundle %s/sb --weights q8 --layout rows && "
               "%s/plume synth --config %s --seed 3 --hf %s/sh && %s/plume convert %s/sh %s/sc --weights q8 --layout rows --quiet && "
               "cmp %s/sb/vision.safetensors %s/sc/vision.safetensors && cmp %s/sb/model_config.json %s/sc/model_config.json",
               b, fx("hf/config.json"), tmp, b, fx("hf/config.json"), tmp, b, tmp, tmp, tmp, tmp, tmp, tmp) == 0,
          "synth tower: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s/sb --image %s --image-tokens 70 -o %s/e.npy", b, tmp, fx("C.png"), tmp) == 0,
          "the synth tower does not encode: %s", out);
}

/* plume embed and plume logits --image against the goldens; their errors. */
static void test_cli(void) {
    char out[4096], o[700];
    const char *b = t_build();
    snprintf(o, sizeof o, "%s/emb.npy", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s -o %s", b, bundle, fx("A.png"), o) == 0, "embed: %s", out);
    int64_t c, cg;
    float *e = npy_floats(o, &c, NULL), *g = npy_floats(fx("image0_vision_emb.npy"), &cg, NULL);
    CHECK(e && g && c == cg, "embed wrote %lld values", (long long)c);
    if (e && g && c == cg) check_close("plume embed", e, g, (size_t)c, TOWER_RMS, TOWER_MAX);
    free(e), free(g);
    snprintf(o, sizeof o, "%s/l2.npy", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume logits -m %s --ids-npy %s --image %s --image %s --step 100 -o %s", b, bundle,
               fx("ids_2img.npy"), fx("A.png"), fx("C.png"), o) == 0,
          "logits: %s", out);
    float *lg = npy_floats(o, &c, NULL);
    if (lg) check_rows("plume logits --image", lg, "logits_q8emb_2img_rows.npy", "logits_q8emb_2img_rows_idx.npy");
    free(lg);
    CHECK(t_sh(out, sizeof out, "%s/plume logits -m %s --ids-npy %s --image %s -o %s", b, bundle, fx("ids_2img.npy"),
               fx("A.png"), o) == 1 && strstr(out, "placeholders"),
          "two runs, one image: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s -o %s", b, bundle, fx("hf/config.json"), o) == 1 &&
              strstr(out, "not a PNG, JPEG or WebP"),
          "a JSON file as an image: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s/none.png -o %s", b, bundle, tmp, o) == 1 &&
              strstr(out, "none.png"),
          "a missing image: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --image %s --image-tokens 300 -o %s", b, bundle, fx("A.png"), o) == 1 &&
              strstr(out, "70, 140, 280"),
          "a bad budget: %s", out);
}

/* plume run --image: the image where the prompt says so, else first; a count mismatch and a
 * bad image are errors. The text is random (random weights); the stats line tells the prompt
 * length, which holds the image's run. */
static void test_cli_run(void) {
    char out[8192];
    const char *b = t_build();
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s --image %s -p 'Describe.' -n 4 --temp 0 --image-tokens 70", b, bundle,
               fx("C.png")) == 0 && strstr(out, "50 soft tokens"),
          "run --image: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s --image %s --image %s -p 'x' -n 1", b, bundle, fx("C.png"),
               fx("decode/nothere.png")) == 1 && strstr(out, "nothere.png"),
          "a missing second image: %s", out);
    CHECK(t_sh(out, sizeof out, "printf '/image %s\\nWhat?\\n' | %s/plume chat -m %s -n 2 --temp 0 --image-tokens 70", fx("C.png"),
               b, bundle) == 0 && strstr(out, "50 soft tokens") && strstr(out, "prompt"),
          "chat /image: %s", out);
}

int main(void) {
    tmp = t_tmpdir("vision");
    char out[4096], ck[700];
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    snprintf(bundle, sizeof bundle, "%s/f32", tmp);
    /* the checkpoint: tiny-a's text shards and tokenizer, tiny-mm-a's config, index and tower */
    if (t_sh(out, sizeof out,
             "mkdir -p %s && for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors tokenizer.json "
             "tokenizer_config.json; do ln -s \"$(cd %s/tiny-a/hf && pwd)/$f\" %s/$f; done && cp %s %s %s %s && "
             "%s/plume convert %s %s --weights f32 --quiet",
             ck, t_data(), ck, fx("hf/config.json"), fx("hf/model.safetensors.index.json"), fx("hf/vision.safetensors"), ck,
             t_build(), ck, bundle))
        printf("  setup: %s\n", out);
    plume_model_params p = plume_model_default_params();
    p.exact = 1;
    char *err = NULL;
    if (plume_model_open(&m, bundle, &p, &err)) printf("  setup: %s\n", err);
    plume_image *a = NULL, *c = NULL;
    if (m && (plume_image_load(&a, fx("A.png"), &err) || plume_image_load(&c, fx("C.png"), &err) ||
              plume_image_encode(&emb_a, m, a, NULL, &err) || plume_image_encode(&emb_c, m, c, NULL, &err)))
        printf("  setup: %s\n", err);
    plume_image_free(a);
    plume_image_free(c);
    free(err);
    if (!m || !emb_a || !emb_c) {
        printf("FAIL setup\n");
        return 1;
    }
    RUN(test_tower_matches_golden);
    RUN(test_shrink_is_exact);
    RUN(test_tower_every_isa_vs_scalar);
    RUN(test_encoder_own_threads);
    RUN(test_two_images_logits_and_greedy);
    RUN(test_one_image_logits);
    RUN(test_prompt_expand);
    RUN(test_batch_with_images);
    RUN(test_prefix_reuse_tells_images_apart);
    RUN(test_rewind_recomputes_through_images);
    RUN(test_save_load_with_an_image);
    RUN(test_bundle);
    RUN(test_synth_tower);
    RUN(test_cli);
    RUN(test_cli_run);
    plume_embd_free(emb_a);
    plume_embd_free(emb_c);
    plume_model_free(m);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
