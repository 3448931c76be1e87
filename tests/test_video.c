/* test_video.c -- video in against tiny-video-a's goldens (tests/data/tiny-video-a, made by
 * scripts/make-video-fixtures.py): the decoder's frames (the ffmpeg CLI's rgb24, bit for bit,
 * rotated as its autorotate), the sampling and MM:SS rule, torchvision's uint8 bicubic resize
 * (every resized frame's SHA-256), the frames' soft tokens from the files and from decoded
 * frames, the expanded prompt's ids, logits and greedy continuation; a clip of fewer than 32
 * frames, its sound track; every hostile file refused with a message; the encoder's abort.
 *
 * The checkpoint is tiny-mm-a's (test_vision.c's setup: tiny-a's text, tiny-mm-a's tower). */
#include <cjson/cJSON.h>

#include "digest.h"
#include "media/media.h"
#include "model.h"
#include "npy.h"
#include "t.h"
#include "t_mm.h"
#include "t_tiny.h"

/* tiny-mm-a's acceptance (its README): 1e-4 relative RMS, max 1e-3 (embeddings) / 2e-3 (logits) */
#define TOWER_RMS 1e-4
#define TOWER_MAX 1e-3
#define LOGITS_RMS 1e-4
#define LOGITS_MAX 2e-3

static char *tmp;
static char bundle[700];
static plume_model *m;
static cJSON *expect; /* expect.json */

/* The path of a tiny-video-a fixture (rotating buffers, as fx()). */
static const char *vx(const char *name) {
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/tiny-video-a/%s", t_data(), name);
    return p[k];
}

/* An .npy as floats (malloc'd) and its element count. */
static float *npy_floats(const char *path, int64_t *count) {
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
    plume_map_free(&mp);
    return f;
}

/* An .npy of ids (malloc'd) and its length. */
static int32_t *npy_ids(const char *path, int32_t *n) {
    int64_t c = 0;
    float *f = npy_floats(path, &c);
    int32_t *ids = f ? malloc((size_t)c * sizeof *ids) : NULL;
    for (int64_t i = 0; ids && i < c; i++) ids[i] = (int32_t)f[i];
    *n = (int32_t)c;
    free(f);
    return ids;
}

/* The hex SHA-256 of bytes. */
static void sha_hex(const void *p, size_t n, char hex[65]) {
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, p, n);
    sha256_final_hex(&c, hex);
}

/* Compare a[n] with the golden b. */
static void check_close(const char *what, const float *a, const float *b, size_t n, double rms, double mx) {
    double r = t_rel_rms(a, b, n), d = t_max_abs(a, b, n);
    CHECK(r <= rms && d <= mx, "%s: relative RMS %.3g (limit %.0e), max |d| %.3g (limit %.0e)", what, r, rms, d, mx);
}

/* Decode a fixture with the room's entry (full frames kept); 0 or the error code (printed). */
static int decode(const char *name, media_video *v, int audio, char **msg) {
    char *data = NULL, *err = NULL;
    size_t len = 0;
    int rc = plume_read_file(vx(name), &data, &len, &err);
    const media_video_opts o = {.audio = audio, .keep_full = 1, .n_threads = 2};
    if (!rc) rc = media_video_decode(v, (const uint8_t *)data, len, name, &o, &err);
    free(data);
    if (msg) *msg = err;
    else free(err);
    return rc;
}

/* ---- the room: sampling, timestamps, decoding, resize ---------------------------------- */

/* floor(i * N / 32) and MM:SS truncated, the spec's own examples; fewer than 32 frames: all. */
static void test_sampling_and_timestamps(void) {
    int32_t idx[32];
    CHECK(media_video_sample(40, idx) == 32 && idx[0] == 0 && idx[4] == 5 && idx[31] == 38, "N = 40: %d %d", idx[4], idx[31]);
    CHECK(media_video_sample(32, idx) == 32 && idx[31] == 31, "N = 32");
    CHECK(media_video_sample(18000, idx) == 32 && idx[1] == 562 && idx[31] == 17437, "N = 18000: %d %d", idx[1], idx[31]);
    CHECK(media_video_sample(5, idx) == 5 && idx[0] == 0 && idx[4] == 4, "N = 5: all frames");
    CHECK(media_video_sample(0, idx) == 0, "N = 0");
    static const struct { int32_t idx; double fps; const char *want; } cases[] = {
        {24, 25.0, "00:00"},  /* 0.96 s */
        {599, 10.0, "00:59"}, /* 59.9 s */
        {750, 10.0, "01:15"}, {36000, 10.0, "60:00"}, {1, 24.0, "00:00"}, {49, 24.0, "00:02"},
        {2997, 29.97, "01:40"}, {2996, 29.97, "01:39"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char s[16];
        media_video_stamp(cases[k].idx, cases[k].fps, s);
        CHECK(!strcmp(s, cases[k].want), "frame %d at %g fps: %s, want %s", cases[k].idx, cases[k].fps, s, cases[k].want);
    }
}

/* The golden clips (H.264 in MP4, VP9 in WebM): frame count, rate, indices, timestamps, the
 * sampled frames (the CLI's decode, bit for bit) and every resized frame (PyTorch's kernel). */
static void test_decode_golden_clips(void) {
    for (int k = 0; k < 2; k++) {
        const cJSON *e = cJSON_GetObjectItem(expect, k ? "clip1" : "clip0");
        const char *file = cJSON_GetObjectItem(e, "file")->valuestring;
        media_video v;
        char *err = NULL;
        CHECK(decode(file, &v, 0, &err) == 0, "%s: %s", file, err ? err : "");
        free(err);
        if (!v.n) continue;
        CHECK(v.n_decoded == cJSON_GetObjectItem(e, "decoded_frames")->valueint &&
                  v.fps == cJSON_GetObjectItem(e, "fps")->valuedouble && v.n == 32,
              "%s: %d frames at %g fps, %d sampled", file, v.n_decoded, v.fps, v.n);
        const cJSON *ix = cJSON_GetObjectItem(e, "indices"), *ts = cJSON_GetObjectItem(e, "timestamps");
        const cJSON *rs = cJSON_GetObjectItem(e, "resized_sha256"), *hw = cJSON_GetObjectItem(e, "resized_hw");
        int bad_idx = 0, bad_ts = 0, bad_rs = 0;
        const size_t small = (size_t)v.plan.th * (size_t)v.plan.tw * 3;
        for (int i = 0; i < 32; i++) {
            char hex[65];
            bad_idx += v.index[i] != cJSON_GetArrayItem(ix, i)->valueint;
            bad_ts += strcmp(v.stamp[i], cJSON_GetArrayItem(ts, i)->valuestring) != 0;
            sha_hex(v.rgb + (size_t)i * small, small, hex);
            bad_rs += strcmp(hex, cJSON_GetArrayItem(rs, i)->valuestring) != 0;
        }
        CHECK(!bad_idx && !bad_ts, "%s: %d indices, %d timestamps differ", file, bad_idx, bad_ts);
        CHECK(v.plan.th == cJSON_GetArrayItem(hw, 0)->valueint && v.plan.tw == cJSON_GetArrayItem(hw, 1)->valueint &&
                  v.plan.n_tokens == cJSON_GetObjectItem(e, "tokens_per_frame")->valueint,
              "%s: resized to %d x %d, %d tokens", file, v.plan.tw, v.plan.th, v.plan.n_tokens);
        CHECK(!bad_rs, "%s: %d of 32 resized frames differ from torchvision's", file, bad_rs);
        char hex[65];
        sha_hex(v.full, (size_t)v.n * (size_t)v.w * (size_t)v.h * 3, hex);
        CHECK(!strcmp(hex, cJSON_GetObjectItem(e, "frames_sha256")->valuestring), "%s: the decoded frames differ", file);
        CHECK(v.audio == NULL && v.rotation == 0, "%s: no sound track, no rotation", file);
        media_video_free(&v);
    }
}

/* A 90-degree display matrix: the frames as the CLI's autorotate gives them; 12 frames: all
 * kept, the sound track decoded to 16 kHz mono when asked. */
static void test_rotation_short_clip_and_sound(void) {
    const char *names[2] = {"rot90.mp4", "short_av.mp4"};
    for (int k = 0; k < 2; k++) {
        const cJSON *e = cJSON_GetObjectItem(expect, names[k]);
        media_video v;
        char *err = NULL, hex[65];
        CHECK(decode(names[k], &v, k, &err) == 0, "%s: %s", names[k], err ? err : "");
        free(err);
        if (!v.n) continue;
        const cJSON *hw = cJSON_GetObjectItem(e, "size_hw");
        CHECK(v.h == cJSON_GetArrayItem(hw, 0)->valueint && v.w == cJSON_GetArrayItem(hw, 1)->valueint &&
                  v.n_decoded == cJSON_GetObjectItem(e, "decoded_frames")->valueint,
              "%s: %d x %d, %d frames", names[k], v.w, v.h, v.n_decoded);
        sha_hex(v.full, (size_t)v.n * (size_t)v.w * (size_t)v.h * 3, hex);
        CHECK(!strcmp(hex, cJSON_GetObjectItem(e, "frames_sha256")->valuestring), "%s: the decoded frames differ", names[k]);
        if (k == 0) CHECK(v.rotation == 270 && v.w == 108 && v.h == 192, "rot90: rotation %d", v.rotation);
        if (k == 1) {
            CHECK(v.n == 12 && v.index[11] == 11 && !strcmp(v.stamp[10], "00:01"), "short: %d frames kept", v.n);
            /* 1.2 s of a 440 Hz sine at 16 kHz: about 19200 samples, 440 zero crossings up a second */
            int64_t up = 0;
            for (int64_t i = 1; v.audio && i < v.audio->n; i++) up += v.audio->pcm[i - 1] < 0 && v.audio->pcm[i] >= 0;
            CHECK(v.audio && v.audio->n > 18000 && v.audio->n < 21000 && up > 480 && up < 540,
                  "short: the sound track: %lld samples, %lld crossings", v.audio ? (long long)v.audio->n : 0, (long long)up);
        }
        media_video_free(&v);
    }
    media_video v;
    CHECK(decode("short_av.mp4", &v, 0, NULL) == 0 && v.audio == NULL, "no sound track unless asked");
    media_video_free(&v);
}

/* torchvision's resize against hand sums where the arithmetic is plain: a constant image stays
 * constant whatever the sizes, and a kept size is a copy. */
static void test_resize_tv_identities(void) {
    enum { SW = 37, SH = 23 };
    uint8_t src[SH][SW][3], dst[100 * 61 * 3];
    memset(src, 201, sizeof src);
    char *err = NULL;
    static const int32_t sizes[][2] = {{100, 61}, {5, 3}, {37, 61}, {100, 23}, {1, 1}};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        const int32_t dw = sizes[k][0], dh = sizes[k][1];
        CHECK(media_resize_tv(&src[0][0][0], SW, SH, dst, dw, dh, &err) == 0, "resize");
        int bad = 0;
        for (int32_t i = 0; i < dw * dh * 3; i++) bad += dst[i] != 201;
        CHECK(!bad, "%d x %d: %d values not 201", dw, dh, bad);
    }
    for (int i = 0; i < SW * SH * 3; i++) (&src[0][0][0])[i] = (uint8_t)(i * 37);
    CHECK(media_resize_tv(&src[0][0][0], SW, SH, dst, SW, SH, &err) == 0 && !memcmp(dst, src, sizeof src), "a kept size");
    free(err);
}

/* Bytes of a fixture, malloc'd. */
static uint8_t *bytes_of(const char *name, size_t *len) {
    char *data = NULL, *err = NULL;
    if (plume_read_file(vx(name), &data, len, &err)) printf("  %s\n", err);
    free(err);
    return (uint8_t *)data;
}

/* Hostile and wrong files: refused with PLUME_EFORMAT and a message that says why. */
static void test_hostile_files(void) {
    size_t n0 = 0, n1 = 0;
    uint8_t *mp4 = bytes_of("clip0.mp4", &n0), *webm = bytes_of("clip1.webm", &n1);
    if (!mp4 || !webm) {
        CHECK(0, "fixtures");
        free(mp4), free(webm);
        return;
    }
    uint8_t *b = malloc(n0 > n1 ? n0 : n1);
    const struct { const char *what, *want; const uint8_t *p; size_t n; } cases[] = {
        {"empty", "empty file", mp4, 0},
        {"MP4 cut at half", "truncated", mp4, n0 / 2},
        {"MP4 cut at 95%", "truncated", mp4, n0 * 95 / 100},
        {"WebM cut at half", "truncated", webm, n1 / 2},
        {"WebM less 200 bytes", "truncated", webm, n1 - 200},
        {"the header alone", "", mp4, 64}};
    const int nc = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < nc; i++) {
        media_video v;
        char *err = NULL;
        int rc = media_video_decode(&v, cases[i].p, cases[i].n, cases[i].what, NULL, &err);
        CHECK(rc == PLUME_EFORMAT && err && strstr(err, cases[i].want), "%s: rc %d, %s", cases[i].what, rc, err ? err : "");
        free(err);
    }
    /* H.264 bytes flipped in the middle of the stream: the decoder's error, not a concealed frame */
    memcpy(b, mp4, n0);
    for (size_t i = n0 / 2; i < n0 / 2 + 400; i += 7) b[i] ^= 0x5a;
    media_video v;
    char *err = NULL;
    int rc = media_video_decode(&v, b, n0, "corrupt.mp4", NULL, &err);
    CHECK(rc == PLUME_EFORMAT && err && strstr(err, "does not decode"), "corrupt H.264: %d %s", rc, err ? err : "");
    free(err), err = NULL;
    /* a duration of years in the sample table (stts: 40 samples of 2^31 ticks at 10240 a second) */
    memcpy(b, mp4, n0);
    uint8_t *st = t_memmem(b, n0, "stts", 4);
    if (st && st + 20 <= b + n0) {
        st[16] = 0x7f, st[17] = st[18] = st[19] = 0xff; /* the first entry's delta */
        rc = media_video_decode(&v, b, n0, "long.mp4", NULL, &err);
        CHECK(rc == PLUME_EFORMAT && err && strstr(err, "more than plume decodes"), "long: %d %s", rc, err ? err : "");
        free(err), err = NULL;
    }
    /* frames too wide (8200 x 16), too many pixels (4104 x 4104), not a video */
    static const struct { const char *file, *want; } files[] = {{"wide.mp4", "out of bounds"},
                                                              {"big.mkv", "out of bounds"},
                                                              {"../tiny-mm-a/A.png", "not a video"},
                                                              {"../tiny-mm-a/short.wav", "not a video"}};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        rc = decode(files[i].file, &v, 0, &err);
        CHECK(rc == PLUME_EFORMAT && err && strstr(err, files[i].want), "%s: %d %s", files[i].file, rc, err ? err : "");
        free(err), err = NULL;
    }
    /* random bytes after a real header: never a crash, always a refusal or a whole decode */
    uint64_t seed = 7;
    for (int t = 0; t < 8; t++) {
        memcpy(b, webm, n1);
        for (int i = 0; i < 64; i++) b[200 + plume_rng_next(&seed) % (n1 - 200)] = (uint8_t)plume_rng_next(&seed);
        rc = media_video_decode(&v, b, n1, "fuzzed.webm", NULL, &err);
        CHECK(rc == 0 || (rc == PLUME_EFORMAT && err && *err), "fuzzed %d: rc %d", t, rc);
        if (!rc) media_video_free(&v);
        free(err), err = NULL;
    }
    free(b), free(mp4), free(webm);
}

/* ---- through the model ----------------------------------------------------------------- */

/* The frames' soft tokens from each file (first and last frame against the golden), and from
 * the decoded frames given as RGB (plume_video_from_frames): the same rows. */
static void test_embed_golden(void) {
    for (int k = 0; k < 2; k++) {
        const char *file = k ? "clip1.webm" : "clip0.mp4";
        plume_video *v = NULL;
        plume_embd *e = NULL;
        char *err = NULL;
        CHECK(plume_video_load(&v, vx(file), NULL, &err) == 0 && plume_video_encode(&e, m, v, &err) == 0, "%s: %s", file,
              err ? err : "");
        free(err), err = NULL;
        if (!e) {
            plume_video_free(v);
            continue;
        }
        const int32_t n = k ? 63 : 66, D = plume_embd_dim(e);
        CHECK(plume_embd_n_tokens(e) == 32 * n && plume_embd_placeholder(e) == 16, "%s: %d rows for id %d", file,
              plume_embd_n_tokens(e), plume_embd_placeholder(e));
        int32_t nt = 0;
        uint64_t key = 0;
        CHECK(plume_video_tokens(m, v, &nt, &key, &err) == 0 && nt == 32 * n && key == plume_embd_key(e), "tokens %d", nt);
        int64_t c = 0;
        float *g = npy_floats(vx(k ? "clip1_emb_ends.npy" : "clip0_emb_ends.npy"), &c);
        float *mine = malloc((size_t)2 * n * D * 4);
        if (g && mine && c == (int64_t)2 * n * D) {
            memcpy(mine, plume_embd_data(e), (size_t)n * D * 4);
            memcpy(mine + (size_t)n * D, plume_embd_data(e) + (size_t)31 * n * D, (size_t)n * D * 4);
            check_close(file, mine, g, (size_t)c, TOWER_RMS, TOWER_MAX);
        } else {
            CHECK(0, "%s: golden of %lld values", file, (long long)c);
        }
        /* from decoded frames: the 32 sampled ones as a 32-frame clip give the same rows */
        media_video dv;
        plume_video *fv = NULL;
        plume_embd *fe = NULL;
        if (decode(file, &dv, 0, NULL) == 0) {
            CHECK(plume_video_from_frames(&fv, dv.full, 32, dv.w, dv.h, 0, &err) == 0 &&
                      plume_video_encode(&fe, m, fv, &err) == 0,
                  "from frames: %s", err ? err : "");
            CHECK(fe && !memcmp(plume_embd_data(fe), plume_embd_data(e), (size_t)32 * n * D * 4),
                  "%s: the rows from decoded frames differ from the file's", file);
            CHECK(fv && !strcmp(plume_video_timestamp(fv, 31), "00:01") && plume_video_frame_index(fv, 31) == 31,
                  "from frames: 24 fps timestamps (frame 31 at %s)", fv ? plume_video_timestamp(fv, 31) : "");
            media_video_free(&dv);
        }
        free(err);
        plume_embd_free(fe);
        plume_video_free(fv);
        free(g), free(mine);
        plume_embd_free(e);
        plume_video_free(v);
    }
}

/* The golden prompt with its video collapsed to one <|video|>, expanded by plume_prompt_expand:
 * HF's ids exactly; then fed with the video's rows: logits and the greedy continuation. */
static void test_prompt_logits_greedy(void) {
    for (int k = 0; k < 2; k++) {
        const char *file = k ? "clip1.webm" : "clip0.mp4", *tag = k ? "clip1" : "clip0";
        char name[64];
        int32_t n = 0, ng = 0;
        snprintf(name, sizeof name, "%s_ids.npy", tag);
        int32_t *ids = npy_ids(vx(name), &n);
        snprintf(name, sizeof name, "%s_greedy_q8emb.npy", tag);
        int32_t *greedy = npy_ids(vx(name), &ng);
        plume_video *v = NULL;
        plume_embd *e = NULL;
        char *err = NULL;
        if (!ids || !greedy || plume_video_load(&v, vx(file), NULL, &err) || plume_video_encode(&e, m, v, &err)) {
            CHECK(0, "%s: setup: %s", file, err ? err : "");
            free(err), free(ids), free(greedy);
            plume_video_free(v);
            continue;
        }
        /* the collapsed prompt: the ids before the first timestamp, <|video|>, those after the last <image|> */
        int32_t first = 0, last = n - 1, stamp[8];
        while (first < n && ids[first] != 10) first++;
        while (last > 0 && ids[last] != 14) last--;
        const int32_t ns = plume_tokenize(plume_model_tokenizer(m), "00:00 ", 6, stamp, 8);
        int32_t *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out), k_in = 0;
        for (int32_t i = 0; i < first - ns; i++) in[k_in++] = ids[i];
        in[k_in++] = 16;
        for (int32_t i = last + 1; i < n; i++) in[k_in++] = ids[i];
        const plume_embd *media[1] = {e};
        const int32_t got = plume_prompt_expand(m, in, k_in, media, 1, out, n, &err);
        CHECK(got == n && !memcmp(out, ids, (size_t)n * sizeof *ids), "%s: expanded to %d ids, want %d (HF's)", file, got, n);
        /* the logits at the golden rows and the greedy continuation */
        plume_session *s = t_tiny_session(m, 4096, 256, -2, 0);
        const int32_t V = plume_model_n_vocab(m);
        float *lg = malloc((size_t)n * V * 4);
        CHECK(s && plume_session_feed_media(s, out, n, media, 1, lg, 1, &err) == 0, "%s: feed: %s", file, err ? err : "");
        int64_t c = 0, ci = 0;
        snprintf(name, sizeof name, "%s_logits_q8emb_rows.npy", tag);
        float *g = npy_floats(vx(name), &c);
        snprintf(name, sizeof name, "%s_logits_q8emb_rows_idx.npy", tag);
        float *idx = npy_floats(vx(name), &ci);
        float *mine = g && idx ? malloc((size_t)c * 4) : NULL;
        for (int64_t r = 0; mine && r < ci; r++) memcpy(mine + r * V, lg + (int64_t)idx[r] * V, (size_t)V * 4);
        if (mine) check_close(file, mine, g, (size_t)c, LOGITS_RMS, LOGITS_MAX);
        int32_t id = 0;
        for (int32_t i = 0; s && i < ng; i++) {
            const float *row = i == 0 ? lg + (int64_t)(n - 1) * V : lg;
            id = 0;
            for (int32_t t = 1; t < V; t++) id = row[t] > row[id] ? t : id;
            CHECK(id == greedy[i], "%s: greedy step %d: %d, want %d", file, i, id, greedy[i]);
            if (id != greedy[i] || plume_session_feed(s, &id, 1, lg, 0, &err)) break;
        }
        free(err), free(ids), free(greedy), free(in), free(out), free(lg), free(g), free(idx), free(mine);
        plume_session_free(s);
        plume_embd_free(e);
        plume_video_free(v);
    }
}

/* An encoder's abort stops a video between frames: PLUME_ECANCELED, nothing left. */
static int stop_after(void *ctx) { return ++*(int *)ctx > 3; }

static void test_encoder_abort(void) {
    plume_video *v = NULL;
    plume_encoder *enc = NULL;
    plume_embd *e = NULL, *ref = NULL;
    char *err = NULL;
    int calls = 0;
    if (plume_video_load(&v, vx("short_av.mp4"), NULL, &err) || plume_encoder_new(&enc, m, 2, &err)) {
        CHECK(0, "setup: %s", err ? err : "");
    } else {
        CHECK(plume_encoder_video(enc, &e, v, &err) == 0 && plume_video_encode(&ref, m, v, &err) == 0 &&
                  !memcmp(plume_embd_data(e), plume_embd_data(ref), (size_t)plume_embd_n_tokens(e) * plume_embd_dim(e) * 4),
              "the encoder's rows are the model's: %s", err ? err : "");
        plume_embd_free(e);
        e = NULL;
        plume_encoder_set_abort(enc, stop_after, &calls);
        CHECK(plume_encoder_video(enc, &e, v, &err) == PLUME_ECANCELED && e == NULL, "aborted: %s", err ? err : "");
    }
    free(err);
    plume_embd_free(ref);
    plume_encoder_free(enc);
    plume_video_free(v);
}

/* What a server needs before encoding: plume_video_size (the declared size, rotated, without a
 * decoding pass; refusals), plume_video_prompt (the ids plume_prompt_expand writes, the video's
 * soft tokens among them), and a decode stopped by its abort callback (PLUME_ECANCELED, nothing
 * made) or asked and let run. */
static int never_stop(void *ctx) { return ++*(int *)ctx < 0; }

static void test_size_prompt_and_decode_abort(void) {
    static const struct {
        const char *file;
        int32_t w, h;
    } sizes[] = {{"clip0.mp4", 192, 108}, {"clip1.webm", 160, 120}, {"rot90.mp4", 108, 192}};
    char *err = NULL, *bytes = NULL;
    size_t len = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int32_t w = 0, h = 0;
        int rc = plume_read_file(vx(sizes[i].file), &bytes, &len, &err) ? -1 : plume_video_size(bytes, len, &w, &h, &err);
        CHECK(rc == 0 && w == sizes[i].w && h == sizes[i].h, "%s: size %d x %d (rc %d: %s)", sizes[i].file, w, h, rc,
              err ? err : "");
        free(bytes), free(err);
        bytes = err = NULL;
    }
    int32_t w = 1, h = 1;
    CHECK(plume_read_file(fx("A.png"), &bytes, &len, NULL) == 0 && plume_video_size(bytes, len, &w, &h, &err) == PLUME_EFORMAT &&
              w == 0 && err, "a PNG's video size: %s", err ? err : "");
    free(bytes), free(err);
    err = NULL;
    CHECK(plume_video_size("", 0, &w, &h, &err) == PLUME_EFORMAT, "an empty video's size");
    free(err);
    err = NULL;
    plume_video *v = NULL;
    plume_embd *e = NULL;
    if (plume_video_load(&v, vx("clip1.webm"), NULL, &err) || plume_video_encode(&e, m, v, &err)) {
        CHECK(0, "setup: %s", err ? err : "");
    } else {
        const int32_t vid = plume_model_media_token(m, "video");
        int32_t n = plume_video_prompt(m, v, NULL, 0, &err), n_tok = 0, k = 0;
        int32_t *run = n > 0 ? malloc((size_t)n * sizeof *run) : NULL, *want = n > 0 ? malloc((size_t)n * sizeof *want) : NULL;
        const plume_embd *media[1] = {e};
        CHECK(run && plume_video_prompt(m, v, run, n, &err) == n && plume_prompt_expand(m, &vid, 1, media, 1, want, n, &err) == n &&
                  !memcmp(run, want, (size_t)n * sizeof *run), "plume_video_prompt is not plume_prompt_expand's run (%d ids)", n);
        for (int32_t i = 0; run && i < n; i++) k += run[i] == vid;
        CHECK(plume_video_tokens(m, v, &n_tok, NULL, &err) == 0 && k == n_tok && n_tok == plume_embd_n_tokens(e),
              "%d soft tokens in the run, %d counted, %d encoded", k, n_tok, plume_embd_n_tokens(e));
        free(run), free(want);
    }
    plume_embd_free(e);
    plume_video_free(v);
    v = NULL;
    int calls = 0;
    plume_video_params vp = plume_video_default_params();
    vp.abort = stop_after, vp.abort_ctx = &calls;
    CHECK(plume_read_file(vx("clip0.mp4"), &bytes, &len, NULL) == 0 && plume_video_decode(&v, bytes, len, &vp, &err) == PLUME_ECANCELED &&
              v == NULL && calls == 4, "a stopped decode: %d calls (%s)", calls, err ? err : "");
    free(err);
    err = NULL;
    calls = 0;
    vp.abort = never_stop;
    CHECK(plume_video_decode(&v, bytes, len, &vp, &err) == 0 && v && plume_video_n_decoded(v) == 40 && calls >= 40,
          "a decode asked %d times: %s", calls, err ? err : "");
    plume_video_free(v);
    free(bytes), free(err);
}

/* ---- the CLI ----------------------------------------------------------------------------- */

/* A .npy of floats against the golden rows (first and last frame of n tokens, width D). */
static void check_embed_npy(const char *what, const char *path, const char *golden, int32_t n) {
    int64_t c = 0, cg = 0;
    float *e = npy_floats(path, &c), *g = npy_floats(vx(golden), &cg);
    const int64_t D = cg / (2 * n);
    CHECK(e && g && c == 32 * n * D, "%s: %lld values", what, (long long)c);
    if (e && g && c == 32 * n * D) {
        memmove(e + n * D, e + 31 * n * D, (size_t)(n * D) * 4);
        check_close(what, e, g, (size_t)cg, TOWER_RMS, TOWER_MAX);
    }
    free(e), free(g);
}

/* plume embed --video / --video-frames, plume logits --video, plume run --video (the golden's
 * prompt and greedy continuation), --video-audio, and the errors. */
static void test_cli(void) {
    char out[8192], o[700], fr[700];
    const char *b = t_build();
    snprintf(o, sizeof o, "%s/emb.npy", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --video %s -o %s", b, bundle, vx("clip0.mp4"), o) == 0, "embed: %s", out);
    check_embed_npy("plume embed --video clip0.mp4", o, "clip0_emb_ends.npy", 66);
    /* from decoded frames: the 32 sampled frames of clip1 as a .npy */
    media_video v;
    snprintf(fr, sizeof fr, "%s/frames.npy", tmp);
    char *err = NULL;
    if (decode("clip1.webm", &v, 0, NULL) == 0) {
        const int64_t shape[4] = {32, v.h, v.w, 3};
        CHECK(npy_write(fr, "|u1", shape, 4, v.full, &err) == 0, "frames.npy");
        media_video_free(&v);
    }
    free(err);
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --video-frames %s -o %s", b, bundle, fr, o) == 0, "embed: %s", out);
    check_embed_npy("plume embed --video-frames", o, "clip1_emb_ends.npy", 63);
    /* logits of HF's ids with the video's rows */
    snprintf(o, sizeof o, "%s/lg.npy", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume logits -m %s --ids-npy %s --video %s --step 512 -o %s", b, bundle,
               vx("clip1_ids.npy"), vx("clip1.webm"), o) == 0,
          "logits: %s", out);
    int64_t c = 0, cg = 0, ci = 0;
    float *lg = npy_floats(o, &c), *g = npy_floats(vx("clip1_logits_q8emb_rows.npy"), &cg),
          *idx = npy_floats(vx("clip1_logits_q8emb_rows_idx.npy"), &ci);
    const int32_t V = plume_model_n_vocab(m);
    float *mine = lg && g && idx ? malloc((size_t)cg * 4) : NULL;
    for (int64_t r = 0; mine && r < ci; r++) memcpy(mine + r * V, lg + (int64_t)idx[r] * V, (size_t)V * 4);
    if (mine) check_close("plume logits --video", mine, g, (size_t)cg, LOGITS_RMS, LOGITS_MAX);
    else CHECK(0, "logits: no rows");
    free(lg), free(g), free(idx), free(mine);
    /* run: the chat turn [video, "Describe."] is the golden's prompt; greedy gives its tokens */
    int32_t ng = 0;
    int32_t *greedy = npy_ids(vx("clip0_greedy_q8emb.npy"), &ng);
    char want[2048] = "";
    if (greedy) plume_detokenize(plume_model_tokenizer(m), greedy, ng, 1, want, sizeof want);
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s --video %s -p 'Describe.' -n %d --temp 0 2>&1", b, bundle,
               vx("clip0.mp4"), ng) == 0 &&
              strstr(out, "2112 soft tokens (66 a frame)") && strstr(out, "00:00 to 00:03") && strstr(out, "[prompt 2424 tokens") &&
              strstr(out, want),
          "run --video: want the golden's %d tokens \"%s\": %s", ng, want, out);
    free(greedy);
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s --video %s --video-audio -p 'What is heard?' -n 2 --temp 0 2>&1",
               b, bundle, vx("short_av.mp4")) == 0 &&
              strstr(out, "12 sampled") && strstr(out, "its sound track, 1.2 s"),
          "run --video-audio: %s", out);
    CHECK(t_sh(out, sizeof out, "printf '/video %s\\nWhat?\\n' | %s/plume chat -m %s -n 2 --temp 0 2>&1", vx("clip1.webm"),
               b, bundle) == 0 && strstr(out, "2016 soft tokens"),
          "chat /video: %s", out);
    /* errors: a file that is not a video, a truncated one, two placeholders for one video */
    CHECK(t_sh(out, sizeof out, "%s/plume embed -m %s --video %s -o %s 2>&1", b, bundle, fx("A.png"), o) == 1 &&
              strstr(out, "not a video"),
          "an image as a video: %s", out);
    CHECK(t_sh(out, sizeof out, "head -c 20000 %s > %s/cut.mp4 && %s/plume run -m %s --video %s/cut.mp4 -p x -n 1 2>&1",
               vx("clip0.mp4"), tmp, b, bundle, tmp) == 1 && strstr(out, "truncated"),
          "a truncated video: %s", out);
    char ph[64] = ""; /* the video placeholder's text in tiny-a's vocabulary (<unused10>; <|video|> in Gemma's) */
    const int32_t vid = plume_model_media_token(m, "video");
    plume_detokenize(plume_model_tokenizer(m), &vid, 1, 0, ph, sizeof ph);
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s --video %s -p '%s%s' -n 1 2>&1", b, bundle, vx("clip1.webm"), ph, ph) == 1 &&
              strstr(out, "1 videos were given"),
          "two placeholders, one video: %s", out);
}

int main(void) {
    tmp = t_tmpdir("video");
    char *text = NULL, *err = NULL, out[4096], ck[700];
    if (plume_read_file(vx("expect.json"), &text, NULL, &err) == 0) expect = cJSON_Parse(text);
    free(text);
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    snprintf(bundle, sizeof bundle, "%s/f32", tmp);
    if (t_mm_checkpoint(ck) || t_sh(out, sizeof out, "%s/plume convert %s %s --weights f32 --quiet", t_build(), ck, bundle))
        printf("  setup: %s\n", out);
    plume_model_params p = plume_model_default_params();
    p.exact = 1;
    if (plume_model_open(&m, bundle, &p, &err)) printf("  setup: %s\n", err);
    free(err);
    if (!m || !expect) {
        printf("FAIL setup\n");
        return 1;
    }
    RUN(test_sampling_and_timestamps);
    RUN(test_decode_golden_clips);
    RUN(test_rotation_short_clip_and_sound);
    RUN(test_resize_tv_identities);
    RUN(test_hostile_files);
    RUN(test_embed_golden);
    RUN(test_prompt_logits_greedy);
    RUN(test_encoder_abort);
    RUN(test_size_prompt_and_decode_abort);
    RUN(test_cli);
    plume_model_free(m);
    cJSON_Delete(expect);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
