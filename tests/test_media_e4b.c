/* test_media_e4b.c -- images and audio on E4B's structure (issue 33): tiny-e4b's text weights
 * (12 layers, 2 KV heads, full attention every 6th layer, KV shared from layers 4 and 5, no
 * double-wide MLP) with tiny-mm-a's real tiny towers, put together here into one checkpoint and
 * converted to an f32 bundle (float activations) and a q8 one (int8 activations). There is no
 * golden of an E4B model with towers, so the checks are the goldens that hold across the text
 * model (the towers' rows), equivalences that a wrong merge breaks, and the session paths:
 * - the towers' rows, projected to the decoder's width, against tiny-mm-a's goldens;
 * - placeholder runs filled with the pad token's own embedding rows give, bit for bit, the
 *   logits of the prompt with the pad id there (HF's merge: the rows as given, unscaled, and the
 *   pad row's per-layer input), and an image's rows change what follows and nothing before;
 * - a prompt with an image and a clip through plume_batch_add_media in steps beside a text
 *   session: the session's own feed_media logits;
 * - prefix reuse that tells images apart, a rewind into an image, state save and load;
 * - plume embed and plume run on the bundle. */
#include <cjson/cJSON.h>

#include "model.h"
#include "npy.h"
#include "plume.h"
#include "safetensors.h"
#include "t.h"
#include "t_tiny.h"

/* tiny-mm-a's tower goldens: relative RMS 1e-4, max |d| 1e-3 (golden README). */
static const double EMB_REL = 1e-4, EMB_MAX = 1e-3;

enum { D = 64, IMAGE_ID = 12, AUDIO_ID = 13, LAYERS = 12 };

static char *tmp, ck[700], bundles[2][700];
static plume_model *models[2], *m;     /* f32 exact, q8 int8 activations; m: the one under test */
static plume_embd *emb_a, *emb_c, *emb_s; /* A.png, C.png, speechlike.wav (encoded by models[0]) */

/* ---- fixtures ------------------------------------------------------------------------------- */

/* tests/data/<rel>, malloc'd. */
static char *data_path(const char *rel) { return plume_path_join(t_data(), rel); }

/* config.json: tiny-e4b's, with tiny-mm-a's vision_config, audio_config and media token ids
 * (tiny-e4b's own towers are stand-ins and its ids those of the real vocabulary). */
static int make_config(const char *dir) {
    char *pe = data_path("tiny-e4b/hf/config.json"), *pm = data_path("tiny-mm-a/config.json");
    char *te = NULL, *tm = NULL, *err = NULL;
    int rc = plume_read_file(pe, &te, NULL, &err) || plume_read_file(pm, &tm, NULL, &err) ? -1 : 0;
    cJSON *e = rc ? NULL : cJSON_Parse(te), *mm = rc ? NULL : cJSON_Parse(tm);
    static const char *const keys[] = {"vision_config", "audio_config",  "image_token_id", "audio_token_id", "video_token_id",
                                       "boi_token_id",  "eoi_token_id", "boa_token_id",   "eoa_token_id"};
    for (size_t i = 0; e && mm && i < sizeof keys / sizeof *keys; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(mm, keys[i]);
        if (!v) rc = -1;
        else cJSON_ReplaceItemInObjectCaseSensitive(e, keys[i], cJSON_Duplicate(v, 1));
    }
    char *json = e && mm && !rc ? cJSON_Print(e) : NULL, *op = plume_path_join(dir, "config.json");
    rc = json ? plume_write_file(op, json, strlen(json), 0, &err) : -1;
    if (err) printf("  %s\n", err);
    cJSON_Delete(e), cJSON_Delete(mm);
    free(json), free(op), free(pe), free(pm), free(te), free(tm), free(err);
    return rc;
}

/* In dir: tiny-e4b's weights and tokenizer and tiny-mm-a's tower files (linked), the config, and
 * an index naming each tensor's file (the tower files' names override tiny-e4b's stand-ins). */
static int make_checkpoint(const char *dir) {
    static const char *const links[][2] = {{"tiny-e4b/hf/model.safetensors", "model.safetensors"},
                                           {"tiny-e4b/hf/tokenizer.json", "tokenizer.json"},
                                           {"tiny-e4b/hf/tokenizer_config.json", "tokenizer_config.json"},
                                           {"tiny-mm-a/audio_tower.safetensors", "audio_tower.safetensors"},
                                           {"tiny-mm-a/vision_tower.safetensors", "vision_tower.safetensors"}};
    static const char *const files[3] = {"model.safetensors", "audio_tower.safetensors", "vision_tower.safetensors"};
    char *err = NULL;
    if (t_link_fixtures(dir, links, sizeof links / sizeof *links)) return -1;
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    int rc = make_config(dir);
    for (int k = 0; !rc && k < 3; k++) {
        char *tp = plume_path_join(dir, files[k]);
        st_file f;
        if (st_open(&f, tp, &err) == 0) {
            for (int32_t i = 0; i < f.n; i++) {
                cJSON_DeleteItemFromObjectCaseSensitive(map, f.t[i].name);
                cJSON_AddStringToObject(map, f.t[i].name, files[k]);
            }
            st_close(&f);
        } else {
            rc = -1;
        }
        free(tp);
    }
    char *json = rc ? NULL : cJSON_Print(index), *op = plume_path_join(dir, "model.safetensors.index.json");
    rc = json ? plume_write_file(op, json, strlen(json), 0, &err) : -1;
    if (err) printf("  %s\n", err);
    cJSON_Delete(index);
    free(json), free(op), free(err);
    return rc;
}

/* A session of context n_ctx on m; NULL on error (printed). */
static plume_session *session(int32_t n_ctx, int32_t n_batch, int32_t n_rewind, int32_t snap) {
    return t_tiny_session(m, n_ctx, n_batch, n_rewind, snap);
}

/* The mixed prompt: text, the image (A or C) run, text, the clip's run, text; malloc'd, length in
 * *n; media[2] set to the image and the clip. */
static int32_t *mixed_prompt(const plume_embd *img, const plume_embd **media, int32_t *n) {
    const int32_t in[9] = {2, 105, 300, IMAGE_ID, 301, 302, AUDIO_ID, 303, 304};
    media[0] = img, media[1] = emb_s;
    int32_t cap = 16 + plume_embd_n_tokens(img) + plume_embd_n_tokens(emb_s) + 8, *out = malloc((size_t)cap * sizeof *out);
    char *err = NULL;
    *n = plume_prompt_expand(m, in, 9, media, 2, out, cap, &err);
    if (*n <= 0) printf("  expand: %s\n", err ? err : "");
    free(err);
    return out;
}

/* ---- the towers ------------------------------------------------------------------------------ */

/* The model is E4B-shaped with both towers; A.png's and the clip's rows, of the decoder's width,
 * against tiny-mm-a's goldens (the towers do not depend on the text model). */
static void test_towers_on_e4b(void) {
    CHECK(plume_model_n_layers(m) == LAYERS && m->c.Hkv == 2 && plume_model_has_vision(m) && plume_model_has_audio(m),
          "%d layers, %d KV heads, vision %d, audio %d", plume_model_n_layers(m), m->c.Hkv, plume_model_has_vision(m),
          plume_model_has_audio(m));
    static const struct { const char *golden; plume_embd **e; int32_t n, id; } cases[] = {
        {"tiny-mm-a/image0_vision_emb.npy", &emb_a, 273, IMAGE_ID}, {"tiny-mm-a/audio0_audio_emb.npy", &emb_s, 58, AUDIO_ID}};
    for (int k = 0; k < 2; k++) {
        const plume_embd *e = *cases[k].e;
        int64_t c = 0;
        float *g = t_npy_floats(cases[k].golden, &c, NULL);
        CHECK(plume_embd_n_tokens(e) == cases[k].n && plume_embd_dim(e) == m->c.D && m->c.D == D &&
                  plume_embd_placeholder(e) == cases[k].id && c == (int64_t)cases[k].n * D,
              "%s: %d x %d for id %d (decoder width %d)", cases[k].golden, plume_embd_n_tokens(e), plume_embd_dim(e),
              plume_embd_placeholder(e), (int)m->c.D);
        if (g && c == (int64_t)plume_embd_n_tokens(e) * plume_embd_dim(e)) {
            double r = t_rel_rms(plume_embd_data(e), g, (size_t)c), d = t_max_abs(plume_embd_data(e), g, (size_t)c);
            printf("  %s: rel-RMS %.3g, max |d| %.3g\n", cases[k].golden, r, d);
            CHECK(r <= EMB_REL && d <= EMB_MAX, "%s: rel-RMS %.3g, max |d| %.3g", cases[k].golden, r, d);
        }
        free(g);
    }
}

/* The q8 bundle (m) keeps the towers in float32 as every bundle does: its rows are the f32
 * bundle's, bit for bit (its text weights are int8; the towers run before them). */
static void test_q8_towers(void) {
    char *p = data_path("tiny-mm-a/A.png"), *err = NULL;
    plume_image *img = NULL;
    plume_embd *e = NULL;
    CHECK(plume_image_load(&img, p, &err) == 0 && plume_image_encode(&e, m, img, NULL, &err) == 0, "%s", err ? err : "");
    if (e) {
        CHECK(plume_embd_n_tokens(e) == 273 && plume_embd_dim(e) == D, "%d x %d", plume_embd_n_tokens(e), plume_embd_dim(e));
        CHECK(plume_embd_n_tokens(e) == 273 && !memcmp(plume_embd_data(e), plume_embd_data(emb_a), (size_t)273 * D * 4),
              "the q8 bundle's tower rows differ from the f32 bundle's (rel-RMS %.3g)",
              t_rel_rms(plume_embd_data(e), plume_embd_data(emb_a), (size_t)273 * D));
    }
    plume_embd_free(e);
    plume_image_free(img);
    free(p), free(err);
}

/* ---- the merge ------------------------------------------------------------------------------- */

/* tiny-e4b's golden ids with positions 10..19 made image placeholders, filled with the pad
 * token's embedding rows as the model computes them (E[0] * sqrt(D) from the INT8 sidecar): the
 * logits of every position equal, bit for bit, those of the ids with the pad id there. A.png's
 * first 10 rows instead: the positions before the run are unchanged, those from it on differ. */
static void test_placeholders_filled(void) {
    enum { T = 48, R0 = 10, NR = 10 };
    int32_t ids[T], pad[T];
    CHECK(t_tiny_ids("tiny-e4b", ids, T) == T, "ids");
    memcpy(pad, ids, sizeof ids);
    const int32_t V = plume_model_n_vocab(m), pid = m->c.pad_id;
    float rows[NR * D];
    const float f = plume_f16_to_f32(((const uint16_t *)m->embed_scales.data)[pid]) / 127.0f;
    const int8_t *q = (const int8_t *)m->embed_q8.data + (int64_t)pid * D;
    for (int32_t r = 0; r < NR; r++)
        for (int32_t i = 0; i < D; i++) rows[r * D + i] = (float)q[i] * f * (float)m->c.embed_scale;
    for (int32_t t = R0; t < R0 + NR; t++) ids[t] = IMAGE_ID, pad[t] = pid;
    plume_embd *e = NULL, *a10 = NULL;
    char *err = NULL;
    float *want = malloc((size_t)T * V * 4), *got = malloc((size_t)T * V * 4), *img = malloc((size_t)T * V * 4);
    plume_session *s = session(256, 7, -2, 0);
    int rc = plume_embd_from_data(&e, rows, NR, D, IMAGE_ID, 1, &err);
    if (!rc) rc = plume_embd_from_data(&a10, plume_embd_data(emb_a), NR, D, IMAGE_ID, 2, &err);
    if (!rc) rc = plume_session_feed(s, pad, T, want, 1, &err);
    if (!rc) rc = plume_session_rewind(s, 0, &err);
    if (!rc) rc = plume_session_feed_media(s, ids, T, (const plume_embd *const *)&e, 1, got, 1, &err);
    if (!rc) rc = plume_session_rewind(s, 0, &err);
    if (!rc) rc = plume_session_feed_media(s, ids, T, (const plume_embd *const *)&a10, 1, img, 1, &err);
    CHECK(s && rc == 0, "feed: %s", err ? err : "");
    if (s && !rc) {
        CHECK(!memcmp(want, got, (size_t)T * V * 4), "pad rows as media: logits differ from the pad ids' (max |d| %.3g)",
              t_max_abs(want, got, (size_t)T * V));
        CHECK(!memcmp(want, img, (size_t)R0 * V * 4), "the rows before the image changed");
        int32_t same = 0;
        for (int32_t t = R0; t < T; t++) same += !memcmp(want + (int64_t)t * V, img + (int64_t)t * V, (size_t)V * 4);
        CHECK(same == 0, "%d positions from the image on did not change with its rows", same);
    }
    plume_embd_free(e), plume_embd_free(a10);
    plume_session_free(s);
    free(want), free(got), free(img), free(err);
}

/* The mixed prompt (an image and a clip) through plume_batch_add_media, at most 37 rows a step,
 * beside a text-only session: the last logits equal the session's own feed_media's, and the
 * batch's session continues (one more token) as a session fed alone does. */
static void test_batch_equals_feed(void) {
    const plume_embd *media[2];
    int32_t n;
    int32_t *ids = mixed_prompt(emb_a, media, &n);
    plume_session *s = session(1024, 64, -2, 0), *t = session(1024, 64, -2, 0), *f = session(1024, 64, -2, 0);
    plume_batch *b = NULL;
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *want = malloc((size_t)V * 4), *tl = malloc((size_t)V * 4);
    char *err = NULL;
    CHECK(n > 331 && plume_batch_new(&b, m, 40, &err) == 0 && plume_session_feed_media(f, ids, n, media, 2, want, 0, &err) == 0,
          "setup: %s", err ? err : "");
    int32_t fed = 0, skip = 0, txt = 7;
    while (b && fed < n) {
        CHECK(plume_batch_add(b, t, &txt, 1, tl, 0, &err) == 1, "text beside it");
        int32_t k = plume_batch_add_media(b, s, ids + fed, n - fed, media, 2, skip, a, 0, &err);
        CHECK(k > 0 && k <= 39, "add_media at %d: %d: %s", fed, k, err ? err : "");
        if (k <= 0) break;
        CHECK(plume_batch_run(b, &err) == 0, "run: %s", err ? err : "");
        for (int32_t i = fed; i < fed + k; i++) skip += ids[i] == IMAGE_ID || ids[i] == AUDIO_ID;
        fed += k;
    }
    CHECK(fed == n && !memcmp(a, want, (size_t)V * 4), "the batched prompt's logits differ from the session's own");
    int32_t next = 42;
    CHECK(plume_session_feed(s, &next, 1, a, 0, &err) == 0 && plume_session_feed(f, &next, 1, want, 0, &err) == 0 &&
              !memcmp(a, want, (size_t)V * 4),
          "the next token after the batch differs");
    free(err), free(a), free(want), free(tl), free(ids);
    plume_batch_free(b);
    plume_session_free(s), plume_session_free(t), plume_session_free(f);
}

/* ---- sessions -------------------------------------------------------------------------------- */

/* The mixed prompt again reuses all but its last row; with C in A's place (another image, another
 * run length) it reuses the 3 rows before the image, and the logits are a fresh prefill's. */
static void test_prefix_reuse(void) {
    const plume_embd *ma[2], *mc[2];
    int32_t n, nc, reused = -1;
    int32_t *ids = mixed_prompt(emb_a, ma, &n), *idc = mixed_prompt(emb_c, mc, &nc);
    plume_session *s = session(1024, 64, -2, 0), *f = session(1024, 64, -2, 0);
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    char *err = NULL;
    CHECK(plume_session_feed_prompt_media(s, ids, n, ma, 2, a, &reused, &err) == 0 && reused == 0, "first: %s", err ? err : "");
    CHECK(plume_session_feed_prompt_media(s, ids, n, ma, 2, b, &reused, &err) == 0 && reused == n - 1, "again: reused %d", reused);
    CHECK(!memcmp(a, b, (size_t)V * 4), "the reused prompt's logits differ");
    CHECK(plume_session_feed_prompt_media(s, idc, nc, mc, 2, a, &reused, &err) == 0 && reused == 4,
          "C for A: reused %d (want the 4 rows before its run): %s", reused, err ? err : "");
    CHECK(plume_session_feed_media(f, idc, nc, mc, 2, b, 0, &err) == 0 && !memcmp(a, b, (size_t)V * 4),
          "after a partial reuse the logits differ from a fresh prefill");
    free(err), free(a), free(b), free(ids), free(idc);
    plume_session_free(s), plume_session_free(f);
}

/* A rewind into the image run that must recompute (no spare ring slots, snapshots every 64),
 * then the prompt again: the last logits of a fresh prefill. */
static void test_rewind_into_image(void) {
    const plume_embd *media[2];
    int32_t n, reused = -1;
    int32_t *ids = mixed_prompt(emb_a, media, &n);
    plume_session *s = session(1024, 32, 0, 64), *f = session(1024, 64, -2, 0);
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *want = malloc((size_t)V * 4);
    char *err = NULL;
    CHECK(s && f && plume_session_feed_media(f, ids, n, media, 2, want, 0, &err) == 0 &&
              plume_session_feed_media(s, ids, n, media, 2, NULL, 0, &err) == 0,
          "feed: %s", err ? err : "");
    CHECK(plume_session_rewind(s, 150, &err) == 0 && plume_session_n_past(s) == 150, "rewind: %s", err ? err : "");
    CHECK(plume_session_feed_prompt_media(s, ids, n, media, 2, a, &reused, &err) == 0 && reused == 150,
          "refeed: reused %d: %s", reused, err ? err : "");
    CHECK(!memcmp(a, want, (size_t)V * 4), "after a rewind into the image the logits differ (max |d| %.3g)",
          t_max_abs(a, want, (size_t)V));
    free(err), free(a), free(want), free(ids);
    plume_session_free(s), plume_session_free(f);
}

/* Save in the middle of the image, load, feed the rest: the logits of the whole prompt; the loaded
 * session rewinds further into the image and continues the same way. */
static void test_save_load(void) {
    const plume_embd *media[2];
    int32_t n, reused = -1;
    int32_t *ids = mixed_prompt(emb_a, media, &n);
    plume_session *s = session(1024, 64, 0, 64), *l = NULL;
    const int32_t V = plume_model_n_vocab(m);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    char *err = NULL, path[800];
    snprintf(path, sizeof path, "%s/e4b-%s.state", tmp, m == models[0] ? "f32" : "q8");
    CHECK(plume_session_feed_media(s, ids, n, media, 2, a, 0, &err) == 0, "feed: %s", err ? err : "");
    CHECK(plume_session_rewind(s, 200, &err) == 0 && plume_session_save(s, path, &err) == 0, "save: %s", err ? err : "");
    CHECK(plume_session_load(&l, m, path, &err) == 0 && plume_session_n_past(l) == 200, "load: %s", err ? err : "");
    CHECK(l && plume_session_feed_prompt_media(l, ids, n, media, 2, b, &reused, &err) == 0 && reused == 200,
          "continue: reused %d: %s", reused, err ? err : "");
    CHECK(!memcmp(a, b, (size_t)V * 4), "the loaded session's logits differ");
    CHECK(l && plume_session_rewind(l, 100, &err) == 0 && plume_session_feed_prompt_media(l, ids, n, media, 2, b, &reused, &err) == 0 &&
              reused == 100 && !memcmp(a, b, (size_t)V * 4),
          "rewind into the loaded image: %s", err ? err : "");
    free(err), free(a), free(b), free(ids);
    plume_session_free(s), plume_session_free(l);
}

/* ---- the CLI --------------------------------------------------------------------------------- */

/* plume embed --image writes the library's rows; plume run with an image and a clip. */
static void test_cli(void) {
    char out[8192], npy[800];
    char *png = data_path("tiny-mm-a/A.png"), *wav = data_path("tiny-mm-a/speechlike.wav"), *err = NULL;
    snprintf(npy, sizeof npy, "%s/emb.npy", tmp);
    int rc = t_sh(out, sizeof out, "%s/plume embed -m %s --image %s -o %s 2>&1", t_build(), bundles[0], png, npy);
    CHECK(rc == 0, "embed --image: %s", out);
    plume_map mp;
    npy_view v;
    if (!rc && npy_open(npy, &mp, &v, &err) == 0) {
        CHECK(v.ndim == 2 && v.shape[0] == 273 && v.shape[1] == D && !memcmp(v.data, plume_embd_data(emb_a), (size_t)273 * D * 4),
              "embed --image: [%lld, %lld] or other rows", (long long)v.shape[0], (long long)v.shape[1]);
        plume_map_free(&mp);
    }
    for (int k = 0; k < 2; k++) {
        rc = t_sh(out, sizeof out, "%s/plume run -m %s --image %s --audio %s -p 'What is this?' -n 3 --temp 0 2>&1", t_build(),
                  bundles[k], png, wav);
        CHECK(rc == 0 && strstr(out, "273 soft tokens") && strstr(out, "58 soft tokens"), "run --image --audio: %s", out);
    }
    free(png), free(wav), free(err);
}

/* ---- main ------------------------------------------------------------------------------------ */

/* The checkpoint, its f32 and q8 bundles, the models, and the media encoded by the f32 one. */
static int setup(void) {
    char log[4096];
    tmp = t_tmpdir("e4bmm");
    if (!tmp) return -1;
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    if (make_checkpoint(ck)) {
        printf("  setup: cannot build the checkpoint\n");
        return -1;
    }
    static const char *const w[2] = {"f32", "q8"};
    for (int k = 0; k < 2; k++) {
        snprintf(bundles[k], sizeof bundles[k], "%s/%s", tmp, w[k]);
        if (t_sh(log, sizeof log, "%s/plume convert %s %s --weights %s --quiet", t_build(), ck, bundles[k], w[k])) {
            printf("  setup: %s\n", log);
            return -1;
        }
        models[k] = t_tiny_open(bundles[k], NULL, 2, k == 0);
        if (!models[k]) return -1;
    }
    m = models[0];
    char *pa = data_path("tiny-mm-a/A.png"), *pc = data_path("tiny-mm-a/C.png"), *ps = data_path("tiny-mm-a/speechlike.wav");
    char *err = NULL;
    plume_image *a = NULL, *c = NULL;
    plume_audio *s = NULL;
    int rc = plume_image_load(&a, pa, &err) || plume_image_load(&c, pc, &err) || plume_audio_load(&s, ps, &err) ||
             plume_image_encode(&emb_a, m, a, NULL, &err) || plume_image_encode(&emb_c, m, c, NULL, &err) ||
             plume_audio_encode(&emb_s, m, s, &err);
    if (rc) printf("  setup: %s\n", err ? err : "");
    plume_image_free(a), plume_image_free(c), plume_audio_free(s);
    free(pa), free(pc), free(ps), free(err);
    return rc ? -1 : 0;
}

int main(void) {
    if (setup()) {
        printf("FAIL setup\n");
        return 1;
    }
    static const char *const tags[2] = {"f32", "q8"};
    RUN(test_towers_on_e4b);
    for (int k = 0; k < 2; k++) {
        m = models[k];
        if (k) RUN_ON(tags[k], test_q8_towers);
        RUN_ON(tags[k], test_placeholders_filled);
        RUN_ON(tags[k], test_batch_equals_feed);
        RUN_ON(tags[k], test_prefix_reuse);
        RUN_ON(tags[k], test_rewind_into_image);
        RUN_ON(tags[k], test_save_load);
    }
    m = models[0];
    RUN(test_cli);
    plume_embd_free(emb_a), plume_embd_free(emb_c), plume_embd_free(emb_s);
    plume_model_free(models[0]), plume_model_free(models[1]);
    char out[256];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
