/* test_audio.c -- audio in, end to end through the public API and the CLI: the tiny-mm-a
 * checkpoint (tiny-a's text weights, the golden's audio and vision towers) converted by
 * `plume convert` into a bundle with audio.safetensors; plume_audio_encode's rows against the
 * golden embeddings; the golden mixed prompt (an image and an audio clip) fed with
 * plume_session_feed_media, its logits and greedy continuation; audio over 30 s split into
 * clips; the CLI's embed --audio, logits --image --audio and transcribe. */
#include <cjson/cJSON.h>
#include <unistd.h>

#include "npy.h"
#include "plume.h"
#include "safetensors.h"
#include "t.h"
#include "t_mm.h"
#include "t_tiny.h"

/* Logits against the float64 oracle (golden README: relative RMS 1e-4, max |d| 2e-3; its own
 * float32 run is 3.9e-6 / 2.5e-4 off); embeddings rel-RMS 1e-4 and max |d| 1e-3. */
static const double LOGITS_REL = 1e-4, LOGITS_MAX = 2e-3, EMB_REL = 1e-4, EMB_MAX = 1e-3;

enum { V = 512, D = 64, T_IDS = 362, TAIL = 16, IMAGE_ID = 12, AUDIO_ID = 13 };

static char *tmp, bundle[700], text_bundle[700];
static plume_model *model;

/* ---- fixtures ------------------------------------------------------------------------------- */

/* tests/data/<rel>, malloc'd. */
static char *data_path(const char *rel) { return plume_path_join(t_data(), rel); }

/* Convert the checkpoint and tiny-a's into f32 bundles; open the first. */
static void setup(void) {
    char ck[700], log[4096];
    tmp = t_tmpdir("audio");
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    snprintf(bundle, sizeof bundle, "%s/mm", tmp);
    snprintf(text_bundle, sizeof text_bundle, "%s/text", tmp);
    if (!tmp || t_mm_checkpoint(ck)) {
        printf("  setup: cannot build the checkpoint\n");
        return;
    }
    if (t_sh(log, sizeof log, "%s/plume convert %s %s --weights f32 --quiet", t_build(), ck, bundle) ||
        t_sh(log, sizeof log, "%s/plume convert %s/tiny-a/hf %s --weights f32 --quiet", t_build(), t_data(), text_bundle))
        printf("  setup: %s\n", log);
    model = t_tiny_open(bundle, NULL, 2, 1);
}

/* The golden clip's audio (speechlike.wav: 2.3 s), decoded; NULL (printed) on failure. */
static plume_audio *golden_audio(const char *name) {
    char rel[64], *err = NULL;
    snprintf(rel, sizeof rel, "tiny-mm-a/%s", name);
    char *p = data_path(rel);
    plume_audio *a = NULL;
    if (plume_audio_load(&a, p, &err)) printf("  %s\n", err);
    free(p), free(err);
    return a;
}

/* ---- the bundle and the encoder -------------------------------------------------------------- */

/* The converter wrote the towers it found, and the model opened them. */
static void test_bundle(void) {
    CHECK(model, "the bundle did not open");
    if (!model) return;
    char path[800];
    snprintf(path, sizeof path, "%s/audio.safetensors", bundle);
    st_file f;
    char *err = NULL;
    int rc = st_open(&f, path, &err);
    CHECK(rc == 0, "%s", err ? err : "");
    if (!rc) {
        int32_t n = 0; /* its tensors (the writer's alignment pads aside) */
        for (int32_t i = 0; i < f.n; i++)
            if (strncmp(f.t[i].name, "__pad", 5)) {
                n++;
                CHECK(f.t[i].dtype == ST_F32, "%s is not F32", f.t[i].name);
            }
        CHECK(n == 132 && st_meta(&f, "tower") && !strcmp(st_meta(&f, "tower"), "audio"), "audio.safetensors: %d tensors", n);
        st_close(&f);
    }
    free(err);
    CHECK(plume_model_has_audio(model) && plume_model_has_vision(model), "audio %d, vision %d", plume_model_has_audio(model),
          plume_model_has_vision(model));
    CHECK(plume_model_media_token(model, "audio") == AUDIO_ID && plume_model_media_token(model, "boa") == 11 &&
              plume_model_media_token(model, "eoa") == 15,
          "media ids");
    plume_model *text = t_tiny_open(text_bundle, NULL, 1, 1);
    plume_audio *a = golden_audio("short.wav");
    plume_embd *e = NULL;
    CHECK(text && !plume_model_has_audio(text), "tiny-a (a stand-in tower) converted with an audio tower");
    if (text && a) {
        CHECK(plume_audio_encode(&e, text, a, &err) == PLUME_EINVAL && err && strstr(err, "no audio tower"),
              "a text-only bundle: %s", err ? err : "");
        snprintf(path, sizeof path, "%s/audio.safetensors", text_bundle);
        CHECK(!plume_file_exists(path), "tiny-a's bundle has audio.safetensors");
    }
    plume_audio_free(a);
    plume_model_free(text);
    free(err);
}

/* Each golden clip through plume_audio_encode: its rows against embed_audio's. */
static void test_encode_golden(void) {
    static const char *const wav[2] = {"speechlike.wav", "short.wav"};
    static const int32_t want[2] = {58, 10};
    for (int j = 0; model && j < 2; j++) {
        char rel[64], *err = NULL;
        snprintf(rel, sizeof rel, "tiny-mm-a/audio%d_audio_emb.npy", j);
        int64_t n = 0;
        float *gold = t_npy_floats(rel, &n, NULL);
        plume_audio *a = golden_audio(wav[j]);
        plume_embd *e = NULL;
        int32_t tokens = 0;
        uint64_t key = 0;
        int rc = a && gold ? plume_audio_tokens(model, a, &tokens, &key, &err) : -1;
        if (!rc) rc = plume_audio_encode(&e, model, a, &err);
        CHECK(rc == 0, "%s: %s", wav[j], err ? err : "");
        if (!rc) {
            CHECK(tokens == want[j] && plume_embd_n_tokens(e) == want[j] && plume_embd_dim(e) == D &&
                      plume_embd_placeholder(e) == AUDIO_ID && plume_embd_key(e) == key && n == (int64_t)want[j] * D,
                  "%s: %d tokens, embd %d x %d, placeholder %d", wav[j], tokens, plume_embd_n_tokens(e), plume_embd_dim(e),
                  plume_embd_placeholder(e));
            if (n == (int64_t)plume_embd_n_tokens(e) * D) {
                double rr = t_rel_rms(plume_embd_data(e), gold, (size_t)n), mx = t_max_abs(plume_embd_data(e), gold, (size_t)n);
                printf("  %s: %d rows, rel-RMS %.3g, max |d| %.3g\n", wav[j], want[j], rr, mx);
                CHECK(rr <= EMB_REL && mx <= EMB_MAX, "%s: rel-RMS %.3g max %.3g", wav[j], rr, mx);
            }
        }
        plume_embd_free(e);
        plume_audio_free(a);
        free(gold), free(err);
    }
}

/* ---- the golden mixed prompt --------------------------------------------------------------------- */

/* The image (A.png at the default budget) and the 2.3 s clip, encoded: media[2]; 0 or -1. */
static int golden_media(plume_embd **media) {
    char *ip = data_path("tiny-mm-a/A.png"), *err = NULL;
    plume_image *img = NULL;
    plume_audio *a = golden_audio("speechlike.wav");
    media[0] = media[1] = NULL;
    int rc = a ? plume_image_load(&img, ip, &err) : -1;
    if (!rc) rc = plume_image_encode(&media[0], model, img, NULL, &err);
    if (!rc) rc = plume_audio_encode(&media[1], model, a, &err);
    if (rc && err) printf("  %s\n", err);
    plume_image_free(img);
    plume_audio_free(a);
    free(ip), free(err);
    return rc ? -1 : 0;
}

/* ids.npy (362 ids: text, <|image> 273 x 12 <image|>, text, <|audio> 58 x 13 <audio|>, text) fed
 * with the image's and the clip's rows: the logits of the last 16 positions and the greedy
 * continuation against the golden's with the INT8 embedding sidecars plume reads (logits_q8emb,
 * greedy_q8emb; HF's merge: soft tokens unscaled, PLE pad row). */
static void test_mixed_prompt(void) {
    if (!model) return;
    int64_t n_ids = 0, n_tail = 0, n_greedy = 0;
    float *fids = t_npy_floats("tiny-mm-a/ids.npy", &n_ids, NULL);
    float *tail = t_npy_floats("tiny-mm-a/logits_q8emb_tail.npy", &n_tail, NULL);
    float *fgreedy = t_npy_floats("tiny-mm-a/greedy_q8emb.npy", &n_greedy, NULL);
    plume_embd *media[2];
    plume_session *s = NULL;
    char *err = NULL;
    float *logits = malloc((size_t)T_IDS * V * sizeof(float));
    int32_t ids[T_IDS];
    if (!fids || !tail || !fgreedy || n_ids != T_IDS || n_tail != TAIL * V || golden_media(media)) {
        CHECK(0, "fixtures");
        goto done;
    }
    for (int32_t i = 0; i < T_IDS; i++) ids[i] = (int32_t)fids[i];
    int rc = plume_session_new(&s, model, NULL, &err);
    if (!rc) rc = plume_session_feed_media(s, ids, T_IDS, (const plume_embd *const *)media, 2, logits, 1, &err);
    CHECK(rc == 0, "feed: %s", err ? err : "");
    if (!rc) {
        const float *mine = logits + (size_t)(T_IDS - TAIL) * V;
        double rr = t_rel_rms(mine, tail, (size_t)TAIL * V), mx = t_max_abs(mine, tail, (size_t)TAIL * V);
        printf("  mixed prompt, last %d positions: logits rel-RMS %.3g, max |d| %.3g\n", TAIL, rr, mx);
        CHECK(rr <= LOGITS_REL && mx <= LOGITS_MAX, "logits rel-RMS %.3g max %.3g", rr, mx);
        const float *row = logits + (size_t)(T_IDS - 1) * V;
        int ok = 1;
        for (int64_t g = 0; ok && g < n_greedy; g++) { /* argmax, then feed it */
            int32_t best = 0;
            for (int32_t v = 1; v < V; v++) best = row[v] > row[best] ? v : best;
            ok = best == (int32_t)fgreedy[g];
            CHECK(ok, "greedy token %lld: %d, golden %d", (long long)g, best, (int32_t)fgreedy[g]);
            if (ok && plume_session_feed(s, &best, 1, logits, 0, &err)) ok = 0;
            row = logits;
        }
    }
    plume_embd_free(media[0]);
    plume_embd_free(media[1]);
done:
    plume_session_free(s);
    free(fids), free(tail), free(fgreedy), free(logits), free(err);
}

/* ---- long and short audio ---------------------------------------------------------------------- */

/* n samples of a deterministic tone and noise at 16 kHz. */
static float *test_signal(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = 0.3f * sinf(0.07f * (float)(i % 100000)) + 0.05f * (plume_rng_float(&seed) - 0.5f);
    return x;
}

/* 32 s: a 30 s clip and a 2 s one, whose rows are those of each part encoded alone; a tail
 * under 10 ms gives nothing; 100 samples are too short for a token. */
static void test_long_audio(void) {
    if (!model) return;
    const int64_t n = 32 * 16000, clip = 30 * 16000;
    float *x = test_signal(n, 9);
    plume_audio *whole = NULL, *head = NULL, *rest = NULL, *nearly = NULL, *tiny = NULL;
    plume_embd *ew = NULL, *er = NULL;
    char *err = NULL;
    int32_t tok = 0;
    int rc = plume_audio_from_pcm(&whole, x, n, 16000, &err);
    if (!rc) rc = plume_audio_from_pcm(&rest, x + clip, n - clip, 16000, &err);
    if (!rc) rc = plume_audio_from_pcm(&nearly, x, clip + 100, 16000, &err);
    if (!rc) rc = plume_audio_from_pcm(&tiny, x, 100, 16000, &err);
    if (!rc) rc = plume_audio_encode(&ew, model, whole, &err);
    if (!rc) rc = plume_audio_encode(&er, model, rest, &err);
    CHECK(rc == 0, "%s", err ? err : "");
    if (!rc) {
        CHECK(plume_embd_n_tokens(ew) == 750 + 50 && plume_embd_n_tokens(er) == 50, "32 s: %d tokens, its last 2 s: %d",
              plume_embd_n_tokens(ew), plume_embd_n_tokens(er));
        CHECK(plume_embd_n_tokens(er) == 50 &&
                  !memcmp(plume_embd_data(ew) + (size_t)750 * D, plume_embd_data(er), (size_t)50 * D * sizeof(float)),
              "the second clip's rows differ from the 2 s encoded alone");
        CHECK(plume_audio_tokens(model, nearly, &tok, NULL, NULL) == 0 && tok == 750, "30 s + 100 samples: %d tokens", tok);
        free(err), err = NULL;
        CHECK(plume_audio_tokens(model, tiny, &tok, NULL, &err) == PLUME_EINVAL && err && strstr(err, "too short"),
              "100 samples: %s", err ? err : "");
    }
    (void)head;
    plume_embd_free(ew), plume_embd_free(er);
    plume_audio_free(whole), plume_audio_free(rest), plume_audio_free(nearly), plume_audio_free(tiny);
    free(x), free(err);
}

/* An abort callback: stop at the call counted by *ctx reaching 0 (counted down). */
static int stop_at(void *ctx) {
    int *left = ctx;
    return --*left < 0;
}

/* A plume_encoder (threads of its own, 1 and 3) gives the rows of plume_audio_encode bit for
 * bit, 32 s in two clips; its abort callback stops an encode between layers or clips with
 * PLUME_ECANCELED and no rows (the first call, and a later one). */
static void test_encoder_own_threads(void) {
    if (!model) return;
    float *x = test_signal(32 * 16000, 5);
    plume_audio *a = NULL;
    plume_embd *want = NULL;
    char *err = NULL;
    int rc = plume_audio_from_pcm(&a, x, 32 * 16000, 16000, &err);
    if (!rc) rc = plume_audio_encode(&want, model, a, &err);
    CHECK(rc == 0, "%s", err ? err : "");
    for (int32_t nt = 1; !rc && nt <= 3; nt += 2) {
        plume_encoder *enc = NULL;
        plume_embd *got = NULL;
        rc = plume_encoder_new(&enc, model, nt, &err);
        if (!rc) rc = plume_encoder_audio(enc, &got, a, &err);
        CHECK(rc == 0 && plume_encoder_n_threads(enc) == nt && plume_embd_n_tokens(got) == plume_embd_n_tokens(want) &&
                  !memcmp(plume_embd_data(got), plume_embd_data(want), (size_t)plume_embd_n_tokens(want) * D * sizeof(float)),
              "%d threads: rc %d %s", nt, rc, err ? err : "");
        plume_embd_free(got);
        for (int at = 0; !rc && at <= 3; at += 3) {
            int left = at;
            got = NULL;
            plume_encoder_set_abort(enc, stop_at, &left);
            int st = plume_encoder_audio(enc, &got, a, &err);
            CHECK(st == PLUME_ECANCELED && !got && err && strstr(err, "stopped"), "stopped at call %d: %d %s", at, st,
                  err ? err : "");
            free(err), err = NULL;
        }
        plume_encoder_free(enc);
    }
    CHECK(plume_encoder_new(&(plume_encoder *){NULL}, NULL, 1, &err) == PLUME_EINVAL, "an encoder of no model");
    plume_encoder_free(NULL);
    plume_embd_free(want), plume_audio_free(a), free(x), free(err);
}

/* Samples handed in: 8 kHz resampled (a second stays a second), 16 kHz passed through bit for
 * bit; bad rates, NaN and no samples refused. */
static void test_from_pcm(void) {
    float *x = test_signal(8000, 4);
    plume_audio *a = NULL;
    char *err = NULL;
    CHECK(plume_audio_from_pcm(&a, x, 8000, 8000, &err) == 0 && llabs(plume_audio_n_samples(a) - 16000) <= 2 &&
              fabs(plume_audio_seconds(a) - 1.0) < 1e-3,
          "8 kHz: %s", err ? err : "");
    plume_audio_free(a), a = NULL;
    CHECK(plume_audio_from_pcm(&a, x, 8000, 16000, &err) == 0 && plume_audio_n_samples(a) == 8000 &&
              !memcmp(plume_audio_samples(a), x, 8000 * sizeof(float)),
          "16 kHz is not passed through");
    plume_audio_free(a), a = NULL;
    CHECK(plume_audio_from_pcm(&a, x, 8000, 100, &err) == PLUME_EINVAL && !a, "100 Hz accepted");
    free(err), err = NULL;
    CHECK(plume_audio_from_pcm(&a, x, 0, 16000, &err) == PLUME_EINVAL && !a, "no samples accepted");
    free(err), err = NULL;
    x[77] = NAN;
    CHECK(plume_audio_from_pcm(&a, x, 8000, 16000, &err) == PLUME_EINVAL && err && strstr(err, "sample 77"), "NaN: %s",
          err ? err : "");
    free(err), err = NULL;
    uint8_t junk[64] = "RIFF and nothing else";
    CHECK(plume_audio_decode(&a, junk, sizeof junk, &err) == PLUME_EFORMAT && !a && err, "junk decoded");
    free(err);
    free(x);
    plume_audio_free(NULL);
}

/* ---- the CLI ------------------------------------------------------------------------------------- */

/* plume embed --audio writes embed_audio's rows; plume logits --image --audio feeds the expanded
 * prompt with both (the golden's logits); transcribe prints text from the clip. */
static void test_cli(void) {
    if (!model) return;
    char out[8192], npy[800], rel[64];
    char *wav = data_path("tiny-mm-a/speechlike.wav"), *png = data_path("tiny-mm-a/A.png");
    char *ids = data_path("tiny-mm-a/ids.npy");
    snprintf(npy, sizeof npy, "%s/emb.npy", tmp);
    int rc = t_sh(out, sizeof out, "%s/plume embed -m %s --audio %s -o %s 2>&1", t_build(), bundle, wav, npy);
    CHECK(rc == 0, "embed --audio: %s", out);
    plume_map m;
    npy_view v;
    char *err = NULL;
    int64_t n = 0;
    float *gold = t_npy_floats("tiny-mm-a/audio0_audio_emb.npy", &n, NULL);
    if (!rc && gold && npy_open(npy, &m, &v, &err) == 0) {
        CHECK(v.ndim == 2 && v.shape[0] == 58 && v.shape[1] == D, "embed --audio: [%lld, %lld]", (long long)v.shape[0],
              (long long)v.shape[1]);
        if (v.count == n) CHECK(t_rel_rms((const float *)v.data, gold, (size_t)n) <= EMB_REL, "embed --audio: rows differ");
        plume_map_free(&m);
    }
    free(gold), free(err), err = NULL;
    snprintf(npy, sizeof npy, "%s/logits.npy", tmp);
    rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids-npy %s --image %s --audio %s -o %s 2>&1", t_build(), bundle, ids,
              png, wav, npy);
    CHECK(rc == 0, "logits --image --audio: %s", out);
    float *tail = t_npy_floats("tiny-mm-a/logits_q8emb_tail.npy", &n, NULL);
    if (!rc && tail && npy_open(npy, &m, &v, &err) == 0) {
        CHECK(v.count == (int64_t)T_IDS * V, "logits: %lld values", (long long)v.count);
        if (v.count == (int64_t)T_IDS * V) {
            const float *mine = (const float *)v.data + (size_t)(T_IDS - TAIL) * V;
            CHECK(t_rel_rms(mine, tail, (size_t)n) <= LOGITS_REL && t_max_abs(mine, tail, (size_t)n) <= LOGITS_MAX,
                  "logits --image --audio: rel-RMS %.3g", t_rel_rms(mine, tail, (size_t)n));
        }
        plume_map_free(&m);
    }
    free(tail), free(err), err = NULL;
    /* the audio given twice but the ids hold one run: a clear error, no crash */
    rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids-npy %s --image %s --audio %s --audio %s -o %s 2>&1", t_build(),
              bundle, ids, png, wav, wav, npy);
    CHECK(rc != 0 && strstr(out, "placeholder"), "two clips for one run: %s", out);
    rc = t_sh(out, sizeof out, "(%s/plume transcribe -m %s %s -n 4 --seed 1 2>/dev/null)", t_build(), bundle, wav);
    CHECK(rc == 0 && out[0], "transcribe: rc %d, '%s'", rc, out);
    rc = t_sh(out, sizeof out, "(%s/plume transcribe -m %s %s -n 4 --translate French 2>&1 >/dev/null)", t_build(), bundle,
              wav);
    CHECK(rc == 0 && strstr(out, "1 clip"), "transcribe --translate: %s", out);
    snprintf(rel, sizeof rel, "%s/x.wav", tmp);
    rc = t_sh(out, sizeof out, "printf 'not a wav' > %s && %s/plume transcribe -m %s %s 2>&1", rel, t_build(), bundle, rel);
    CHECK(rc != 0 && strstr(out, "not an audio file"), "transcribe of junk: %s", out);
    rc = t_sh(out, sizeof out, "%s/plume run -m %s --audio %s -p 'What do you hear?' -n 3 --seed 1 2>&1", t_build(), bundle,
              wav);
    CHECK(rc == 0 && strstr(out, "58 soft tokens"), "run --audio: %s", out);
    rc = t_sh(out, sizeof out, "%s/plume run -m %s --audio %s -p 'x' -n 3 2>&1", t_build(), text_bundle, wav);
    CHECK(rc != 0 && strstr(out, "no audio tower"), "run --audio on a text-only bundle: %s", out);
    /* chat: /audio then a message, the run placed where the message says <|audio|> (here the
     * tokenizer's text for the tiny model's audio id 13) */
    rc = t_sh(out, sizeof out, "printf '/audio %s\\nwhat is <unused7> about?\\n/audio /nonexistent.wav\\n' | "
              "%s/plume chat -m %s -n 2 --seed 1", wav, t_build(), bundle);
    CHECK(rc == 0 && strstr(out, "58 soft tokens") && strstr(out, "nonexistent.wav"), "chat /audio: %s", out);
    rc = t_sh(out, sizeof out, "%s/plume run -m %s --audio %s --audio %s -p '<unused7> and' -n 2 --seed 1", t_build(), bundle,
              wav, wav);
    CHECK(rc != 0 && strstr(out, "2 audio clips") && strstr(out, "were given"), "one <|audio|> for two clips: %s", out);
    rc = t_sh(out, sizeof out, "%s/plume bench -m %s --audio 2 -r 1", t_build(), bundle);
    CHECK(rc == 0 && strstr(out, "2.0 s clip (50 tokens)") && strstr(out, "real-time factor"), "bench --audio: %s", out);
    rc = t_sh(out, sizeof out, "%s/plume bench -m %s --audio 0", t_build(), bundle);
    CHECK(rc != 0 && strstr(out, "--audio wants seconds"), "bench --audio 0: %s", out);
    free(wav), free(png), free(ids);
}

int main(void) {
    setup();
    RUN(test_bundle);
    RUN(test_encode_golden);
    RUN(test_mixed_prompt);
    RUN(test_long_audio);
    RUN(test_encoder_own_threads);
    RUN(test_from_pcm);
    RUN(test_cli);
    plume_model_free(model);
    char out[256];
    if (tmp) t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed ? 1 : 0;
}
