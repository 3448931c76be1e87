/* test_encoders.c -- the encoders room (src/encoders/): the audio tower of tiny-mm-a loaded from
 * its checkpoint's tensors (BF16, HF names: tests/data/tiny-mm-a/audio_tower.safetensors) and
 * run on the golden log-mel features; its soft tokens and embed_audio rows against the oracle's,
 * on every kernel table this CPU has and with and without threads; the whole chain from the WAV
 * file; configs and files it must refuse. */
#include "encoders/encoders.h"
#include "media/media.h"
#include "npy.h"
#include "t.h"
#include "t_tiny.h"

/* The golden README's acceptance for a float32 engine against the float64 oracle (whose own
 * float32 run is 7e-7 off): relative RMS and max |d| of the tower outputs and embeddings. */
static const double REL_RMS_TOL = 1e-4, MAX_ABS_TOL = 1e-3;

/* The tiny tower, opened once for the tests that run it. */
static enc_audio tower;
static int tower_ok;

/* tests/data/<rel>, malloc'd. */
static char *data_path(const char *rel) { return plume_path_join(t_data(), rel); }

/* ---- config and loading -------------------------------------------------------------------- */

/* The text config of tiny-mm-a (its media ids) with its audio_config; 0 or the error. */
static int tiny_config(plume_config *c, char **err) {
    char *cp = data_path("tiny-mm-a/config.json"), *json = NULL;
    int rc = plume_read_file(cp, &json, NULL, err);
    if (!rc) rc = plume_config_from_hf_text(c, json, cp, err);
    if (!rc) rc = plume_config_audio_from_hf(c, json, cp, err);
    free(cp), free(json);
    return rc;
}

static void test_config_and_open(void) {
    char *wp = data_path("tiny-mm-a/audio_tower.safetensors"), *err = NULL;
    plume_config cfg;
    int rc = tiny_config(&cfg, &err);
    const plume_audio_config *c = &cfg.aud;
    CHECK(rc == 0 && cfg.has_audio, "config: %s", err ? err : "");
    CHECK(c->D == 32 && c->L == 2 && c->H == 2 && c->hd == 16 && c->C0 == 128 && c->C1 == 8 && c->K == 5 &&
              c->left == 13 && c->n_rel == 13 && c->out_dims == 48 && c->clipped && c->cap == 50.0f && c->residual == 0.5f,
          "tiny audio_config read as D %d L %d H %d C %d/%d out %d", c->D, c->L, c->H, c->C0, c->C1, c->out_dims);
    CHECK(cfg.media_id[PLUME_MEDIA_AUDIO] == 13 && cfg.media_id[PLUME_MEDIA_BOA] == 11 && cfg.media_id[PLUME_MEDIA_EOA] == 15,
          "media ids %d %d %d", cfg.media_id[PLUME_MEDIA_AUDIO], cfg.media_id[PLUME_MEDIA_BOA], cfg.media_id[PLUME_MEDIA_EOA]);
    if (!rc) rc = enc_audio_open(&tower, c, cfg.D, wp, &err);
    CHECK(rc == 0, "open: %s", err ? err : "");
    tower_ok = rc == 0;
    CHECK(!rc && tower.D_text == 64 && tower.F0 == 64 && tower.F1 == 32, "D_text %d, F0 %d, F1 %d", tower.D_text, tower.F0,
          tower.F1);
    /* the checkpoint's bounds came through: layer 0's linear_start clips (stats.json: 16%) */
    CHECK(!rc && isfinite(tower.layer[0].conv_start.in_lo) && isfinite(tower.layer[0].conv_start.out_hi),
          "clip bounds not loaded");
    free(wp), free(err);
}

/* The tensor list names exactly the checkpoint's audio tensors (the golden's 132, HF's names
 * and shapes), and E2B's tower has 752. */
static void test_tensor_list(void) {
    plume_config cfg;
    char *err = NULL, *wp = data_path("tiny-mm-a/audio_tower.safetensors");
    st_file f = {0};
    if (tiny_config(&cfg, &err) || st_open(&f, wp, &err)) {
        CHECK(0, "%s", err);
        free(err), free(wp);
        return;
    }
    int32_t n = enc_audio_tensor_list(&cfg.aud, cfg.D, NULL, 0);
    enc_tensor_spec *list = malloc((size_t)n * sizeof *list);
    CHECK(enc_audio_tensor_list(&cfg.aud, cfg.D, list, n) == n && n == f.n, "list %d, file %d", n, f.n);
    for (int32_t i = 0; i < n; i++) {
        const st_tensor *t = st_find(&f, list[i].name);
        int same = t && (list[i].ndim ? t->ndim == list[i].ndim : t->count == 1);
        for (int32_t k = 0; same && k < list[i].ndim; k++) same = t->shape[k] == list[i].shape[k];
        CHECK(same, "%s: not in the checkpoint with that shape", list[i].name);
    }
    plume_audio_config e2b = cfg.aud;
    e2b.D = 1024, e2b.L = 12, e2b.H = 8, e2b.hd = 128, e2b.C0 = 128, e2b.C1 = 32, e2b.out_dims = 1536;
    CHECK(enc_audio_tensor_list(&e2b, 1536, NULL, 0) == 752, "E2B: %d tensors", enc_audio_tensor_list(&e2b, 1536, NULL, 0));
    free(list), free(err), free(wp);
    st_close(&f);
}

/* enc_audio_tokens is HF's _compute_audio_num_tokens after the frames (stats.json: 229 -> 58,
 * 39 -> 10; 30 s = 2999 frames -> 750, the model card's cap). */
static void test_token_counts(void) {
    CHECK(enc_audio_tokens(229) == 58 && enc_audio_tokens(39) == 10 && enc_audio_tokens(2999) == 750 &&
              enc_audio_tokens(1) == 1 && enc_audio_tokens(0) == 0,
          "tokens(229/39/2999/1/0) = %d/%d/%d/%d/%d", enc_audio_tokens(229), enc_audio_tokens(39), enc_audio_tokens(2999),
          enc_audio_tokens(1), enc_audio_tokens(0));
    for (int32_t n = 1; n < 400; n++) { /* (t + 2 - 3) // 2 + 1 twice, as HF's processor */
        int32_t t = (n - 1) / 2 + 1;
        t = (t - 1) / 2 + 1;
        CHECK(enc_audio_tokens(n) == t, "tokens(%d) = %d, want %d", n, enc_audio_tokens(n), t);
    }
}

/* ---- the tower against the golden ----------------------------------------------------------- */

/* Clip j's log-mel features [shape[0], 128]: the golden's for the short clip (audio1), those
 * plume computes from the WAV for the other (test_media_audio checks the front end bit for bit
 * against the short one's, and here the tower's outputs check these). */
static float *clip_features(int j, int64_t *shape) {
    if (j == 1) return t_npy_floats("tiny-mm-a/audio1_features.npy", NULL, shape);
    char *wp = data_path("tiny-mm-a/speechlike.wav"), *err = NULL;
    media_audio a;
    media_mel m = {0};
    float *f = NULL;
    if (media_audio_load(&a, wp, &err) || media_mel_compute(&m, a.pcm, a.n, &err)) {
        printf("  %s\n", err);
    } else {
        f = m.feat;
        m.feat = NULL;
        shape[0] = m.T, shape[1] = 128;
    }
    media_mel_free(&m);
    media_audio_free(&a);
    free(wp), free(err);
    return f;
}

/* Clip j's golden features through the tower and the embedder on one table and pool; compares
 * with the golden soft tokens and embeddings, returns the embeddings (malloc'd) for the
 * table-against-table checks. */
static float *golden_case(int j, const plume_kernels *k, plume_pool *pool, int quiet) {
    char rel[96];
    int64_t fs[2], ms[2], ss[2], es[2];
    float *feat = clip_features(j, fs);
    snprintf(rel, sizeof rel, "tiny-mm-a/audio%d_mask.npy", j);
    float *mask = t_npy_floats(rel, NULL, ms);
    snprintf(rel, sizeof rel, "tiny-mm-a/audio%d_audio_soft.npy", j);
    float *gsoft = t_npy_floats(rel, NULL, ss);
    snprintf(rel, sizeof rel, "tiny-mm-a/audio%d_audio_emb.npy", j);
    float *gemb = t_npy_floats(rel, NULL, es);
    float *soft = NULL, *emb = NULL;
    char *err = NULL;
    if (!feat || !mask || !gsoft || !gemb) {
        CHECK(0, "clip %d: golden files missing", j);
        goto done;
    }
    int32_t n_valid = 0;
    while (n_valid < ms[0] && mask[n_valid] != 0.0f) n_valid++;
    const int32_t n = enc_audio_tokens(n_valid);
    CHECK(n == ss[0] && ss[1] == 48 && es[0] == n && es[1] == 64, "clip %d: %d tokens, golden [%lld, %lld]", j, n,
          (long long)ss[0], (long long)ss[1]);
    if (n != ss[0] || es[0] != n) goto done;
    soft = malloc((size_t)n * 48 * sizeof(float));
    emb = malloc((size_t)n * 64 * sizeof(float));
    enc_run r = {.k = k, .pool = pool};
    int rc = enc_audio_tower(&tower, &r, feat, n_valid, soft, &err);
    if (!rc) rc = enc_audio_embed(&tower, &r, soft, n, emb, &err);
    CHECK(rc == 0, "clip %d: %s", j, err ? err : "");
    double sr = t_rel_rms(soft, gsoft, (size_t)n * 48), sm = t_max_abs(soft, gsoft, (size_t)n * 48);
    double er = t_rel_rms(emb, gemb, (size_t)n * 64), em = t_max_abs(emb, gemb, (size_t)n * 64);
    if (!quiet)
        printf("  clip %d (%d tokens, %s, %d threads): soft rel-RMS %.3g max %.3g; emb rel-RMS %.3g max %.3g\n", j, n,
               k->name, pool ? plume_pool_size(pool) : 1, sr, sm, er, em);
    CHECK(sr <= REL_RMS_TOL && sm <= MAX_ABS_TOL, "clip %d %s: soft rel-RMS %.3g max %.3g", j, k->name, sr, sm);
    CHECK(er <= REL_RMS_TOL && em <= MAX_ABS_TOL, "clip %d %s: emb rel-RMS %.3g max %.3g", j, k->name, er, em);
done:
    free(feat), free(mask), free(gsoft), free(gemb), free(soft), free(err);
    return emb;
}

/* Every table this CPU runs, alone and on 2 threads: each within the golden's tolerance, and
 * the SIMD tables' embeddings within float rounding of the scalar reference's. */
static void test_tower_golden(void) {
    if (!tower_ok) {
        CHECK(0, "the tower did not open");
        return;
    }
    const char *names[8];
    int nt = plume_kernels_available(names, 8);
    plume_pool *pool = plume_pool_new(2);
    for (int j = 0; j < 2; j++) {
        float *ref = golden_case(j, &plume_kernels_scalar, NULL, 0);
        const int32_t n = j ? 10 : 58;
        for (int i = 0; i < nt; i++) {
            const plume_kernels *k = plume_kernels_get(names[i]);
            float *alone = golden_case(j, k, NULL, 1), *threads = golden_case(j, k, pool, i != nt - 1);
            if (ref && alone && threads) {
                double d = t_rel_rms(alone, ref, (size_t)n * 64);
                CHECK(d <= 1e-5, "clip %d: %s against scalar: rel-RMS %.3g", j, names[i], d);
                CHECK(!memcmp(alone, threads, (size_t)n * 64 * sizeof(float)), "clip %d %s: 2 threads change the bits", j,
                      names[i]);
            }
            free(alone), free(threads);
        }
        free(ref);
    }
    plume_pool_free(pool);
}

/* The whole chain: the WAV file decoded, its features, the tower and the embedder. */
static void test_wav_to_rows(void) {
    if (!tower_ok) return;
    char *wp = data_path("tiny-mm-a/speechlike.wav"), *err = NULL;
    int64_t es[2];
    float *gemb = t_npy_floats("tiny-mm-a/audio0_audio_emb.npy", NULL, es);
    media_audio a;
    media_mel m = {0};
    float *soft = NULL, *emb = NULL;
    int rc = media_audio_load(&a, wp, &err);
    if (!rc) rc = media_mel_compute(&m, a.pcm, a.n, &err);
    CHECK(rc == 0 && gemb, "%s", err ? err : "decode");
    if (!rc && gemb) {
        const int32_t n = enc_audio_tokens(m.n_valid);
        soft = malloc((size_t)n * 48 * sizeof(float));
        emb = malloc((size_t)n * 64 * sizeof(float));
        enc_run r = {.k = plume_kernels_get(NULL)};
        rc = enc_audio_tower(&tower, &r, m.feat, m.n_valid, soft, &err);
        if (!rc) rc = enc_audio_embed(&tower, &r, soft, n, emb, &err);
        CHECK(rc == 0 && n == es[0], "%s (%d tokens)", err ? err : "", n);
        if (!rc && n == es[0])
            CHECK(t_rel_rms(emb, gemb, (size_t)n * 64) <= REL_RMS_TOL, "wav -> rows: rel-RMS %.3g",
                  t_rel_rms(emb, gemb, (size_t)n * 64));
    }
    media_audio_free(&a);
    media_mel_free(&m);
    free(wp), free(err), free(gemb), free(soft), free(emb);
}

/* A clip of 0 frames or over 30 s is refused before anything runs. */
static void test_tower_bad_lengths(void) {
    if (!tower_ok) return;
    float mel[128] = {0}, soft[48];
    char *err = NULL;
    enc_run r = {.k = &plume_kernels_scalar};
    CHECK(enc_audio_tower(&tower, &r, mel, 0, soft, &err) == PLUME_EINVAL && err, "0 frames accepted");
    free(err), err = NULL;
    CHECK(enc_audio_tower(&tower, &r, mel, 3001, soft, &err) == PLUME_EINVAL && err, "3001 frames accepted");
    free(err);
}

/* ---- refusals --------------------------------------------------------------------------------- */

/* plume_config_audio_from_hf of {"audio_config": obj} on tiny-mm-a's config must fail naming
 * `want`. */
static void config_refused(const char *obj, const char *want) {
    plume_config c;
    char json[512], *err = NULL;
    snprintf(json, sizeof json, "{\"audio_config\": %s}", obj);
    int rc = tiny_config(&c, NULL);
    if (!rc) rc = plume_config_audio_from_hf(&c, json, "cfg", &err);
    CHECK(rc == PLUME_EFORMAT && err && strstr(err, want), "%s: rc %d, '%s' lacks '%s'", obj, rc, err ? err : "", want);
    free(err);
}

static void test_config_refused(void) {
    config_refused("[1]", "not an object");
    config_refused("{\"hidden_act\": \"gelu\"}", "hidden_act");
    config_refused("{\"attention_context_right\": 2}", "not supported");
    config_refused("{\"attention_chunk_size\": 16}", "not supported");
    config_refused("{\"subsampling_conv_channels\": [128]}", "subsampling_conv_channels");
    config_refused("{\"subsampling_conv_channels\": [128, -3]}", "subsampling_conv_channels");
    config_refused("{\"hidden_size\": 1000, \"num_attention_heads\": 7}", "multiple of the heads");
    config_refused("{\"num_hidden_layers\": 1e9}", "num_hidden_layers");
    config_refused("{\"rms_norm_eps\": \"small\"}", "rms_norm_eps");
    config_refused("{\"use_clipped_linears\": 1}", "use_clipped_linears");
    config_refused("{\"attention_logit_cap\": -1}", "out of range");
    plume_config c;
    char *err = NULL;
    CHECK(!tiny_config(&c, NULL) && plume_config_audio_from_hf(&c, "{\"audio_config\": {}}", "e2b", &err) == 0 &&
              c.aud.D == 1024 && c.aud.L == 12 && c.aud.H == 8 && c.aud.C1 == 32 && c.aud.out_dims == 1536,
          "{} does not give E2B's tower (HF's defaults): %s", err ? err : "");
    free(err), err = NULL;
    CHECK(plume_config_audio_from_hf(&c, "{\"text_config\": {}}", "text.json", &err) == PLUME_EFORMAT && err &&
              strstr(err, "no audio_config"),
          "a text-only config: %s", err ? err : "");
    free(err), err = NULL;
    c.media_id[PLUME_MEDIA_BOA] = -1; /* a vocabulary without <|audio> */
    CHECK(plume_config_audio_from_hf(&c, "{\"audio_config\": {}}", "novocab", &err) == PLUME_EFORMAT && err &&
              strstr(err, "boa_token_id"),
          "no BOA id: %s", err ? err : "");
    free(err);
}

/* Files without the tower, or with other shapes than the config says. */
static void test_open_refused(void) {
    char *wp = data_path("tiny-mm-a/audio_tower.safetensors");
    char *tp = data_path("tiny-a/hf/model-00001-of-00002.safetensors"), *err = NULL;
    plume_config cfg;
    enc_audio a;
    if (tiny_config(&cfg, &err)) {
        CHECK(0, "%s", err);
    } else {
        CHECK(enc_audio_open(&a, &cfg.aud, 64, tp, &err) == PLUME_EFORMAT && err && strstr(err, "is missing"),
              "a text checkpoint as a tower: %s", err ? err : "");
        free(err), err = NULL;
        CHECK(enc_audio_open(&a, &cfg.aud, 96, wp, &err) == PLUME_EFORMAT && err && strstr(err, "embed_audio"),
              "another decoder width: %s", err ? err : "");
        free(err), err = NULL;
        cfg.aud.D = 64, cfg.aud.hd = 32; /* the file's tower is 32 wide */
        CHECK(enc_audio_open(&a, &cfg.aud, 64, wp, &err) == PLUME_EFORMAT && err && strstr(err, "has shape"),
              "a wider config: %s", err ? err : "");
        free(err), err = NULL;
        CHECK(enc_audio_open(&a, &cfg.aud, 64, "/nonexistent/audio.safetensors", &err) == PLUME_EIO, "a missing file: %s",
              err ? err : "");
    }
    enc_audio_free(NULL);
    free(wp), free(tp), free(err);
}

/* The towers' clamp is torch.clamp's: values within stay, NaN stays NaN (fmaxf would make it
 * lo), infinities are bounded, hi wins when lo > hi; in place and into another buffer alike. */
static void test_clamp_is_torch_clamp(void) {
    float x[] = {-3.0f, -1.0f, 0.5f, 2.0f, 7.0f, NAN, INFINITY, -INFINITY}, y[8], z[8];
    enc_clamp(y, x, 8, -1.0f, 2.0f);
    const float want[] = {-1.0f, -1.0f, 0.5f, 2.0f, 2.0f, NAN, 2.0f, -1.0f};
    for (int i = 0; i < 8; i++)
        CHECK(i == 5 ? isnan(y[i]) : y[i] == want[i], "clamp(%g) = %g, want %g", (double)x[i], (double)y[i], (double)want[i]);
    memcpy(z, x, sizeof z);
    enc_clamp(z, z, 8, -1.0f, 2.0f);
    CHECK(!memcmp(y, z, sizeof y), "in place differs");
    enc_clamp(z, x, 5, 3.0f, 1.0f); /* lo > hi: every value is hi */
    for (int i = 0; i < 5; i++) CHECK(z[i] == 1.0f, "lo > hi: clamp(%g) = %g", (double)x[i], (double)z[i]);
}

int main(void) {
    RUN(test_config_and_open);
    RUN(test_tensor_list);
    RUN(test_token_counts);
    RUN(test_tower_golden);
    RUN(test_wav_to_rows);
    RUN(test_tower_bad_lengths);
    RUN(test_config_refused);
    RUN(test_open_refused);
    RUN(test_clamp_is_torch_clamp);
    enc_audio_free(&tower);
    return t_total_failed ? 1 : 0;
}
