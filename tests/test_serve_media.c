/* test_serve_media.c -- images and audio through `plume serve` (tools/serve/serve_media.c),
 * driven with curl on 127.0.0.1, on the tiny-mm-a bundle (tiny-a's text weights, the golden
 * vision and audio towers): an image_url data URL and an input_audio part answer token for
 * token as `plume run --image / --audio` does; a re-sent conversation reports its image as
 * cached, a different image of the same size is not reused; two images and a clip in one
 * request, n choices; every refusal is a 400 naming the part (truncated, not an image,
 * 20000 x 20000, zero bytes, bad base64, 0 samples, 2 hours, junk audio, an unknown format, a
 * media part to a text-only bundle, a system message's image, placeholder text, remote URLs
 * off, private addresses, too big, HTTP errors); remote URLs with --allow-remote-media=private
 * (a redirect followed); POST /v1/audio/transcriptions in its five formats with the text of
 * `plume transcribe`; /v1/models' input_modalities. Then the official OpenAI library
 * (tests/clients/media.mjs) and the web page in headless Chromium (tests/clients/webui_media.mjs)
 * on the same server, skipped with the reason when node, the npm packages or chromium are
 * missing. Every curl has a time limit. */
#include "serve/serve.h"
#include "t_mm.h"
#include "t_serve.h"
#include "t_serve_media.h"

#include <sndfile.h>
#include <webp/encode.h>

static char text_bundle[600]; /* tiny-a, text only (the tiny-mm-a bundle is t_serve.h's bundle) */
static char big_out[1 << 20];

static server M; /* the tiny-mm-a bundle, --allow-remote-media=private */
static server T; /* tiny-a (text only), remote media off */
static server P; /* tiny-mm-a, --allow-remote-media (public addresses only) */

/* An image_url part of a file as a data URL (malloc'd JSON). */
static char *image_part(const char *path, const char *mime) { return url_part("image_url", path, mime); }

/* An input_audio part of a file (malloc'd JSON). */
static char *audio_part(const char *path, const char *format) {
    char *b = b64_file(path);
    char *s = plume_sprintf("{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"%s\",\"format\":\"%s\"}}", b ? b : "", format);
    free(b);
    return s;
}

/* ---- the parsers, alone -------------------------------------------------------------------------- */

/* base64 (standard, URL-safe, padded or not, whitespace), refused junk; multipart forms as curl
 * and the openai library write them, refused truncations; private addresses. */
static void test_parsers(void) {
    static const char *const good[][2] = {{"aGVsbG8=", "hello"}, {"aGVsbG8", "hello"}, {"aGVs\nbG8=", "hello"},
                                          {"", ""}, {"_-8=", "\xff\xef"}, {"/+8=", "\xff\xef"}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        uint8_t *out = NULL;
        size_t n = 0;
        int rc = serve_base64_decode(good[i][0], strlen(good[i][0]), &out, &n);
        CHECK(rc == 0 && n == strlen(good[i][1]) && !memcmp(out, good[i][1], n), "base64 '%s': rc %d, %zu bytes", good[i][0],
              rc, n);
        free(out);
    }
    static const char *const bad[] = {"a", "aGVsbG8=x", "a*bc", "aGVsbG8==="};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint8_t *out = NULL;
        size_t n = 0;
        CHECK(serve_base64_decode(bad[i], strlen(bad[i]), &out, &n) == -1 && !out, "base64 '%s' accepted", bad[i]);
    }
    static const char form[] = "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
                               "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
                               "Content-Type: audio/wav\r\n\r\nRIFF\r\n--X\0z\r\n--XyZ--\r\n";
    serve_form_field f[4];
    int n = serve_multipart_parse(form, sizeof form - 1, f, 4);
    CHECK(n == 2 && !strcmp(f[0].name, "model") && f[0].len == 9 && !memcmp(f[0].data, "whisper-1", 9) &&
              !strcmp(f[1].name, "file") && !strcmp(f[1].filename, "a b.wav") && f[1].len == 11,
          "multipart: %d fields", n);
    for (size_t cut = 0; cut + 4 < sizeof form - 1; cut += 7)
        CHECK(serve_multipart_parse(form, cut, f, 4) == -1, "multipart cut at %zu accepted", cut);
    CHECK(serve_multipart_parse("{\"file\": 1}", 11, f, 4) == -1, "JSON as multipart");
    /* the declared boundary is the one read (the first line was taken whatever the header
     * said), a preamble before it skipped; more fields than kept are refused, not dropped (the
     * file after 100,000 small fields was "'file' is required") */
    static const char pre[] = "a preamble\r\n--Q\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--Q--\r\n";
    size_t off = 99;
    serve_error e = {0};
    CHECK(serve_multipart_start("multipart/form-data; boundary=Q", pre, sizeof pre - 1, &off, &e) == 0 && off == 12 &&
              serve_multipart_parse(pre + off, sizeof pre - 1 - off, f, 4) == 1 && !strcmp(f[0].name, "x"),
          "a preamble: off %zu", off);
    CHECK(serve_multipart_start("multipart/form-data; boundary=\"XyZ\"", form, sizeof form - 1, &off, &e) == 0 && off == 0,
          "a quoted boundary: %s", e.message);
    CHECK(serve_multipart_start("multipart/form-data; boundary=Xy", form, sizeof form - 1, &off, &e) == 400 &&
              strstr(e.message, "--Xy'"),
          "a boundary that is a prefix of the body's first line: %s", e.message);
    CHECK(serve_multipart_start("multipart/form-data; boundary=ABC", form, sizeof form - 1, &off, &e) == 400,
          "a boundary the body does not hold");
    CHECK(serve_multipart_start("multipart/form-data", form, sizeof form - 1, &off, &e) == 400 && strstr(e.message, "no boundary"),
          "no boundary declared");
    CHECK(serve_multipart_start("application/json", form, sizeof form - 1, &off, &e) == 400, "not a form");
    plume_buf many = {0};
    for (int i = 0; i < 100000; i++) plume_buf_puts(&many, "--B\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n");
    plume_buf_puts(&many, "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nRIFF\r\n--B--\r\n");
    serve_form_field g[32];
    CHECK(!many.oom && serve_multipart_parse(many.p, many.len, g, 32) == -2, "100,000 fields not refused");
    plume_buf_free(&many);
    static const char *const priv[] = {"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
                                       "100.64.0.1", "224.0.0.1", "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::"};
    static const char *const pub[] = {"8.8.8.8", "1.1.1.1", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"};
    for (int k = 0; k < 2; k++) {
        const char *const *list = k ? pub : priv;
        size_t cnt = k ? sizeof pub / sizeof *pub : sizeof priv / sizeof *priv;
        for (size_t i = 0; i < cnt; i++) {
            struct sockaddr_in a4 = {.sin_family = AF_INET};
            struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
            const struct sockaddr *sa = inet_pton(AF_INET, list[i], &a4.sin_addr) == 1 ? (const struct sockaddr *)&a4
                                        : inet_pton(AF_INET6, list[i], &a6.sin6_addr) == 1 ? (const struct sockaddr *)&a6
                                                                                            : NULL;
            CHECK(sa && serve_addr_private(sa) == !k, "%s: private %d", list[i], sa ? serve_addr_private(sa) : -1);
        }
    }
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_models_lists_modalities(void) {
    char out[4096];
    CHECK(http(&M, out, sizeof out, "/v1/models", "%s", "") == 200 &&
              strstr(out, "\"input_modalities\":[\"text\",\"image\",\"audio\",\"video\"]"),
          "tiny-mm-a: %s", out);
    CHECK(http(&T, out, sizeof out, "/v1/models", "%s", "") == 200 && strstr(out, "\"input_modalities\":[\"text\"]"),
          "text only: %s", out);
    CHECK(http(&M, out, sizeof out, "/api/show", "-d '{\"model\":\"m\"}'") == 200 &&
              strstr(out, "\"capabilities\":[\"completion\",\"tools\",\"thinking\",\"vision\",\"audio\"]"),
          "ollama show: %.600s", out);
    CHECK(http(&T, out, sizeof out, "/api/show", "-d '{\"model\":\"m\"}'") == 200 &&
              strstr(out, "\"capabilities\":[\"completion\",\"tools\",\"thinking\"]"),
          "ollama show, text only: %.600s", out);
}

/* An image and an audio part answer as plume run does with --image / --audio (the media first,
 * then the text: where the CLI puts them). */
static void test_image_and_audio_answer_as_run(void) {
    char *img = image_part(fx("A.png"), "image/png"), *aud = audio_part(fx("speechlike.wav"), "wav");
    char *parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"What is this?\"}]", img);
    int prompt = 0, st = chat(&M, big_out, sizeof big_out, parts, 8, NULL);
    char *got = st == 200 ? reply_of(big_out, 0, &prompt, NULL) : NULL;
    CHECK(got, "image: HTTP %d %.300s", st, big_out);
    char flags[800];
    snprintf(flags, sizeof flags, "--image %s", fx("A.png"));
    char *want = cli_answer(bundle, flags, "What is this?", 8);
    CHECK(got && want && !strcmp(got, want), "image: serve '%s' vs run '%s'", got ? got : "", want ? want : "");
    CHECK(prompt > 256, "image: %d prompt tokens (the image's run is missing)", prompt);
    free(got), free(want), free(parts);
    parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"What is said?\"}]", aud);
    st = chat(&M, big_out, sizeof big_out, parts, 8, NULL);
    got = st == 200 ? reply_of(big_out, 0, &prompt, NULL) : NULL;
    CHECK(got, "audio: HTTP %d %.300s", st, big_out);
    snprintf(flags, sizeof flags, "--audio %s", fx("speechlike.wav"));
    want = cli_answer(bundle, flags, "What is said?", 8);
    CHECK(got && want && !strcmp(got, want), "audio: serve '%s' vs run '%s'", got ? got : "", want ? want : "");
    free(got), free(want), free(parts), free(img), free(aud);
}

/* Ollama's /api/chat "images", the Responses API's input_image, Anthropic's image block: the
 * same answer as OpenAI's image part before the text; a bad one is a 400 naming it. */
static void test_other_dialects_images(void) {
    char *b = b64_file(fx("A.png")), *img = image_part(fx("A.png"), "image/png");
    char *parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"What is this?\"}]", img);
    chat(&M, big_out, sizeof big_out, parts, 8, NULL);
    char *want = reply_of(big_out, 0, NULL, NULL);
    size_t n = strlen(b ? b : "") + 512;
    char *body = malloc(n);
    snprintf(body, n, "{\"model\":\"m\",\"stream\":false,\"options\":{\"temperature\":0,\"num_predict\":8},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"What is this?\",\"images\":[\"%s\"]}]}", b ? b : "");
    int st = http(&M, big_out, sizeof big_out, "/api/chat", "-H 'Content-Type: application/json' --data-binary @%s",
                  write_tmp("body.json", body));
    cJSON *root = cJSON_Parse(big_out);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "message"), "content");
    CHECK(st == 200 && cJSON_IsString(c) && want && !strcmp(c->valuestring, want), "ollama images: HTTP %d %.300s (want '%s')",
          st, big_out, want ? want : "");
    cJSON_Delete(root);
    snprintf(body, n, "{\"model\":\"m\",\"stream\":false,\"options\":{\"temperature\":0,\"num_predict\":8},"
             "\"prompt\":\"What is this?\",\"images\":[\"%s\"]}", b ? b : "");
    st = http(&M, big_out, sizeof big_out, "/api/generate", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp("body.json", body));
    root = cJSON_Parse(big_out);
    c = cJSON_GetObjectItemCaseSensitive(root, "response");
    CHECK(st == 200 && cJSON_IsString(c) && want && !strcmp(c->valuestring, want), "ollama generate images: HTTP %d %.300s",
          st, big_out);
    cJSON_Delete(root);
    st = http(&M, big_out, sizeof big_out, "/api/chat", "-H 'Content-Type: application/json' -d '%s'",
              "{\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"images\":[\"aGVsbG8=\"]}]}");
    CHECK(st == 400 && strstr(big_out, "messages[0].images[0]") && strstr(big_out, "not a PNG"), "ollama bad image: %d %s", st,
          big_out);
    /* the Responses API's input_image */
    char *url = plume_sprintf("data:image/png;base64,%s", b ? b : "");
    snprintf(body, n, "{\"model\":\"m\",\"temperature\":0,\"max_output_tokens\":8,\"input\":[{\"role\":\"user\",\"content\":["
             "{\"type\":\"input_image\",\"image_url\":\"%s\"},{\"type\":\"input_text\",\"text\":\"What is this?\"}]}]}", url);
    st = http(&M, big_out, sizeof big_out, "/v1/responses", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp("body.json", body));
    root = cJSON_Parse(big_out);
    cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "output"), 0);
    cJSON *ot = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(msg, "content"), 0), "text");
    CHECK(st == 200 && cJSON_IsString(ot) && want && !strcmp(ot->valuestring, want), "responses input_image: HTTP %d %.300s",
          st, big_out);
    cJSON_Delete(root);
    /* Anthropic's image block */
    snprintf(body, n, "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":["
             "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},"
             "{\"type\":\"text\",\"text\":\"What is this?\"}]}]}", b ? b : "");
    st = http(&M, big_out, sizeof big_out, "/v1/messages", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp("body.json", body));
    root = cJSON_Parse(big_out);
    ot = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "content"), 0), "text");
    CHECK(st == 200 && cJSON_IsString(ot) && want && !strcmp(ot->valuestring, want), "anthropic image: HTTP %d %.300s", st,
          big_out);
    cJSON_Delete(root);
    st = http(&M, big_out, sizeof big_out, "/v1/messages", "-H 'Content-Type: application/json' -d '%s'",
              "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":"
              "{\"type\":\"base64\",\"data\":\"aGVsbG8=\"}}]}]}");
    CHECK(st == 400 && strstr(big_out, "messages[0].content[0]") && strstr(big_out, "not a PNG"), "anthropic bad image: %d %s",
          st, big_out);
    free(url);
    free(b), free(img), free(parts), free(want), free(body);
}

/* A conversation re-sent with the same image reuses its rows (cached_tokens: all but the last
 * prompt token); the same conversation with another image of the same size (the same ids) is
 * reused only up to that image, and answers as a fresh request for it does. */
static void test_resent_image_is_cached(void) {
    char a[800], b[800], out[4096];
    snprintf(a, sizeof a, "%s/same_a.png", tmp);
    snprintf(b, sizeof b, "%s/same_b.png", tmp);
    int rc = t_sh(out, sizeof out,
                  "python3 -c 'import struct,zlib,sys\n"
                  "def png(path, v):\n"
                  "    raw = b\"\".join(b\"\\0\" + bytes((x * v + y) %% 256 for x in range(96 * 3)) for y in range(80))\n"
                  "    c = lambda t, d: struct.pack(\">I\", len(d)) + t + d + struct.pack(\">I\", zlib.crc32(t + d))\n"
                  "    open(path, \"wb\").write(b\"\\x89PNG\\r\\n\\x1a\\n\" + c(b\"IHDR\", struct.pack(\">IIBBBBB\", 96, 80, 8, 2, 0, 0, 0)) + c(b\"IDAT\", zlib.compress(raw)) + c(b\"IEND\", b\"\"))\n"
                  "png(sys.argv[1], 3); png(sys.argv[2], 7)' %s %s", a, b);
    CHECK(rc == 0, "python3 could not write the PNGs: %s", out);
    if (rc) return;
    char *pa = image_part(a, "image/png"), *pb = image_part(b, "image/png");
    /* a text of more than a prefill chunk before the image: a slot sharing it is reused */
    char lead[1024] = "";
    for (int i = 0; i < 40; i++) strcat(lead, "Describe this. ");
    char *parts_a = plume_sprintf("[{\"type\":\"text\",\"text\":\"%s\"},%s]", lead, pa);
    char *parts_b = plume_sprintf("[{\"type\":\"text\",\"text\":\"%s\"},%s]", lead, pb);
    int p1, c1, p2, c2, p3, c3, p4, c4;
    double e0 = metric(&M, "plume_media_encodes_total");
    chat(&M, big_out, sizeof big_out, parts_a, 6, ",\"seed\":1");
    char *r1 = reply_of(big_out, 0, &p1, &c1);
    double e1 = metric(&M, "plume_media_encodes_total");
    chat(&M, big_out, sizeof big_out, parts_a, 6, ",\"seed\":1");
    char *r2 = reply_of(big_out, 0, &p2, &c2);
    double e2 = metric(&M, "plume_media_encodes_total");
    CHECK(r1 && r2 && !strcmp(r1, r2), "the re-sent answer differs: '%s' '%s'", r1 ? r1 : "", r2 ? r2 : "");
    CHECK(p1 == p2 && c2 == p2 - 1, "re-sent: cached %d of %d prompt tokens", c2, p2);
    CHECK(e0 >= 0 && e1 == e0 + 1 && e2 == e1, "images encoded: %.0f, then %.0f, then %.0f (the re-sent one from the cache)",
          e0, e1, e2);
    chat(&M, big_out, sizeof big_out, parts_b, 6, ",\"seed\":1");
    char *r3 = reply_of(big_out, 0, &p3, &c3);
    CHECK(metric(&M, "plume_media_encodes_total") == e2 + 1, "another image of the same size is encoded");
    CHECK(p3 == p1 && c3 >= 64 && c3 < p3 - 64, "another image of the same size: cached %d of %d (must stop at the image)",
          c3, p3);
    /* the same request on a fresh server slot state: the answer for image b alone */
    server F;
    if (server_start_on(&F, "fresh", bundle, "-t 1 --parallel 1") == 0) {
        chat(&F, big_out, sizeof big_out, parts_b, 6, ",\"seed\":1");
        char *r4 = reply_of(big_out, 0, &p4, &c4);
        CHECK(r3 && r4 && !strcmp(r3, r4) && c4 == 0, "image b after image a: '%s', fresh: '%s' (cached %d)", r3 ? r3 : "",
              r4 ? r4 : "", c4);
        free(r4);
        CHECK(server_stop(&F, NULL) == 0, "the fresh server did not exit 0");
    } else {
        CHECK(0, "a fresh server did not start");
    }
    free(r1), free(r2), free(r3), free(pa), free(pb), free(parts_a), free(parts_b);
}

/* Two images and a clip in one message, n = 2 choices (one prefill, one encoding each). */
static void test_several_media_and_choices(void) {
    char *a = image_part(fx("A.png"), "image/png"), *c = image_part(fx("C.png"), "image/png");
    char *w = audio_part(fx("short.wav"), "wav");
    char *parts = plume_sprintf("[{\"type\":\"text\",\"text\":\"Compare\"},%s,%s,{\"type\":\"text\",\"text\":\"and hear\"},%s]",
                                a, c, w);
    int prompt = 0;
    int st = chat(&M, big_out, sizeof big_out, parts, 5, ",\"n\":2");
    char *r0 = st == 200 ? reply_of(big_out, 0, &prompt, NULL) : NULL, *r1 = st == 200 ? reply_of(big_out, 1, NULL, NULL) : NULL;
    CHECK(st == 200 && r0 && r1 && !strcmp(r0, r1), "two images and a clip, n=2 greedy: HTTP %d %.300s", st, big_out);
    free(r0), free(r1), free(parts), free(a), free(c), free(w);
}

/* Two requests with different images at once (two slots, one batch step) answer as each does
 * alone: the rows of each image stay with their own slot. */
static void test_concurrent_images(void) {
    const char *names[2] = {"A.png", "C.png"};
    char *want[2], paths[2][800], out[4096];
    for (int k = 0; k < 2; k++) {
        char *img = image_part(fx(names[k]), "image/png");
        char *body = plume_sprintf("{\"max_tokens\":12,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":"
                                   "[%s,{\"type\":\"text\",\"text\":\"Tell me about it, at length.\"}]}]}", img);
        snprintf(paths[k], sizeof paths[k], "%s/conc%d.json", tmp, k);
        FILE *f = fopen(paths[k], "w");
        if (f) {
            fputs(body, f);
            fclose(f);
        }
        http(&M, big_out, sizeof big_out, "/v1/chat/completions", "-H 'Content-Type: application/json' --data-binary @%s",
             paths[k]);
        want[k] = reply_of(big_out, 0, NULL, NULL);
        free(img), free(body);
    }
    /* now both at once, each to its own file */
    t_sh(out, sizeof out,
         "for k in 0 1; do curl -s -m 60 -H 'Content-Type: application/json' --data-binary @%s/conc$k.json "
         "http://127.0.0.1:%d/v1/chat/completions > %s/conc$k.out & done; wait",
         tmp, M.port, tmp);
    for (int k = 0; k < 2; k++) {
        char p[800], *text = NULL;
        snprintf(p, sizeof p, "%s/conc%d.out", tmp, k);
        size_t len = 0;
        char *err = NULL;
        char *got = plume_read_file(p, &text, &len, &err) ? NULL : reply_of(text, 0, NULL, NULL);
        CHECK(got && want[k] && !strcmp(got, want[k]), "%s at once: '%s' alone: '%s'", names[k], got ? got : "",
              want[k] ? want[k] : "");
        free(got), free(text), free(err), free(want[k]);
    }
}

/* A WAV of n samples of silence at rate (malloc'd path in tmp), or a FLAC when flac != 0. */
static const char *silence(const char *name, int64_t n, int rate, int flac) {
    static char path[800];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    SF_INFO info = {.samplerate = rate, .channels = 1,
                    .format = flac ? SF_FORMAT_FLAC | SF_FORMAT_PCM_16 : SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return path;
    static short zero[1 << 16];
    for (int64_t k = 0; k < n;) {
        sf_count_t m = n - k < (int64_t)(sizeof zero / sizeof *zero) ? (sf_count_t)(n - k) : (sf_count_t)(sizeof zero / sizeof *zero);
        sf_write_short(f, zero, m);
        k += m;
    }
    sf_close(f);
    return path;
}

/* ---- encoding off the scheduler's thread ------------------------------------------------------ */

/* The figures names[0..n) of one GET /metrics (one answer: one moment) into v (-1 when absent);
 * 0, or -1 when /metrics did not answer. A raw socket, not curl: polls stay a few ms apart. */
static int metrics_now(const server *sv, const char *const *names, int n, double *v) {
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    char out[16384];
    const char *body;
    for (int k = 0; k < n; k++) v[k] = -1;
    if (raw_request(sv, req, sizeof req - 1, 0, out, sizeof out, 10000) != 200) return -1;
    raw_reply(out, &body);
    for (int k = 0; k < n; k++) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", names[k]);
        const char *p = strstr(body - 1, key);
        if (p) v[k] = atof(p + strlen(key));
    }
    return 0;
}

/* A chat request of one user message (an input_audio part of the WAV at wav, then text) into
 * tmp/name, written by the shell: the clip's base64 is larger than b64_file's buffer. 0 or -1. */
static int audio_body(const char *name, const char *wav, int max_tokens, const char *extra) {
    char out[1024];
    return t_sh(out, sizeof out,
                "{ printf '{\"max_tokens\":%d%s,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\","
                "\"input_audio\":{\"format\":\"wav\",\"data\":\"'; base64 -w0 '%s'; printf '\"}},{\"type\":\"text\","
                "\"text\":\"What is said?\"}]}]}'; } > '%s/%s'",
                max_tokens, extra, wav, tmp, name);
}

/* Post tmp/name to sv's chat endpoint in the background (curl, at most secs), its reply into
 * tmp/name.out; the pid. */
static pid_t post_bg(const server *sv, const char *name, int secs) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec curl -sN -m %d -H 'Content-Type: application/json' --data-binary @%s/%s "
             "http://127.0.0.1:%d/v1/chat/completions > %s/%s.out 2>/dev/null",
             secs, tmp, name, sv->port, tmp, name);
    return spawn_sh(cmd);
}

/* A request's images and audio are encoded beside the batch steps, not in them: while a 150 s
 * clip (3750 soft tokens, the tiny audio tower on a 30 s clip at a time) is encoded for one
 * request, a stream admitted after it is prefilled and decodes. Told by /metrics, without a
 * clock: plume_prompt_tokens_total stays below the clip request's first prefill chunk (64
 * tokens; the stream's prompt is shorter) until its encode is done, and the stream's tokens
 * (plume_generated_tokens_total) must grow inside that window; a scheduler that encodes on its
 * own thread runs no step until the encode ends (0 tokens there). Then: the clip request's
 * answer, the stream's [DONE], the encode counted. A client hanging up during an encode
 * frees its slot; a server stopped during one exits 0. */
static void test_encode_does_not_stall(void) {
    server E;
    char out[8192], *text = NULL, *err = NULL, path[800];
    if (server_start_on(&E, "enc", bundle, "-t 1 --parallel 2 --draft 0 --drain 0")) {
        CHECK(0, "the server did not start (log %s)", E.log);
        return;
    }
    audio_body("clip.json", silence("clip.wav", 150 * 16000, 16000, 0), 1, ",\"temperature\":0");
    t_sh(out, sizeof out,
         "printf '{\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"messages\":"
         "[{\"role\":\"user\",\"content\":\"Count to ten.\"}]}' > %s/stream.json", tmp);
    static const char *const names[] = {"plume_generated_tokens_total", "plume_prompt_tokens_total", "plume_requests_total",
                                        "plume_media_encodes_total", "plume_media_encode_seconds_total",
                                        "plume_media_encoding", "plume_slots_busy"};
    double v[7], base[7];
    metrics_now(&E, names, 7, base);
    pid_t clip = post_bg(&E, "clip.json", 120);
    for (int i = 0; i < 3000 && (metrics_now(&E, names, 7, v) || v[2] < base[2] + 1); i++) nap(10); /* queued */
    pid_t stream = post_bg(&E, "stream.json", 120);
    double grown = 0, last[7] = {0};
    int polls = 0;
    for (int i = 0; i < 24000; i++) { /* until the clip's prefill starts (120 s at most) */
        if (metrics_now(&E, names, 7, v)) break;
        if (v[1] >= base[1] + 64) break;
        memcpy(last, v, sizeof v);
        grown = v[0] - base[0];
        polls++;
        nap(5);
    }
    printf("  a stream generated %.0f tokens while a 150 s clip was encoded beside it (%d polls of /metrics)\n", grown, polls);
    CHECK(grown >= 16, "a stream generated %.0f tokens while another request's 150 s clip was encoded (%d polls; last: "
          "prompt tokens %.0f -> %.0f, encoding %.0f, busy %.0f; want >= 16: the encode must not stall the batch steps)",
          grown, polls, base[1], last[1], last[5], last[6]);
    int st = 0;
    waitpid(clip, &st, 0);
    waitpid(stream, &st, 0);
    snprintf(path, sizeof path, "%s/clip.json.out", tmp);
    char *got = plume_read_file(path, &text, NULL, &err) ? NULL : reply_of(text, 0, NULL, NULL);
    CHECK(got != NULL, "the clip request's answer: %.300s", text ? text : err);
    free(got), free(text), free(err);
    text = err = NULL;
    snprintf(path, sizeof path, "%s/stream.json.out", tmp);
    int ok = !plume_read_file(path, &text, NULL, &err) && strstr(text, "data: [DONE]") && !strstr(text, "\"error\"");
    CHECK(ok, "the stream beside the encode ended whole: %.300s", text ? text : err);
    free(text), free(err);
    text = err = NULL;
    metrics_now(&E, names, 7, v);
    CHECK(v[3] == base[3] + 1 && v[4] > base[4] && v[5] == 0, "/metrics: %.0f media encoded (want %.0f), %.3f s, %.0f in flight",
          v[3], base[3] + 1, v[4], v[5]);

    /* a client that hangs up while its clip is encoded: the encode stops, its slot is freed */
    audio_body("gone.json", silence("gone.wav", 140 * 16000, 16000, 0), 1, ",\"temperature\":0");
    pid_t gone = post_bg(&E, "gone.json", 120);
    for (int i = 0; i < 3000 && (metrics_now(&E, names, 7, v) || v[5] < 1); i++) nap(10);
    kill(gone, SIGKILL);
    waitpid(gone, &st, 0);
    int freed = metric_reaches(&E, "plume_media_encoding", 0, 30000) && metric_reaches(&E, "plume_slots_busy", 0, 30000);
    CHECK(freed, "a client gone during its encode: encoding %.0f, busy %.0f", metric(&E, "plume_media_encoding"),
          metric(&E, "plume_slots_busy"));
    st = chat(&E, out, sizeof out, "[{\"type\":\"text\",\"text\":\"hi\"}]", 2, NULL);
    CHECK(st == 200, "after a client left during its encode: %d %s", st, out);

    /* the server stopped while a clip is encoded: it exits 0 (the encode is cut short) */
    audio_body("cut.json", silence("cut.wav", 130 * 16000, 16000, 0), 1, ",\"temperature\":0");
    pid_t cut = post_bg(&E, "cut.json", 120);
    for (int i = 0; i < 3000 && (metrics_now(&E, names, 7, v) || v[5] < 1); i++) nap(10);
    CHECK(server_stop(&E, NULL) == 0, "a server stopped during an encode did not exit 0 (log %s)", E.log);
    waitpid(cut, &st, 0);
}

/* Every bad medium is a 400 naming the part, and the server keeps serving. */
static void test_refusals_name_the_part(void) {
    char out[8192], path[800];
    /* truncated, not an image, 20000 x 20000 (its header only), zero bytes */
    snprintf(path, sizeof path, "%s/trunc.png", tmp);
    t_sh(out, sizeof out, "head -c 300 %s > %s", fx("A.png"), path);
    char *trunc = image_part(path, "image/png");
    snprintf(path, sizeof path, "%s/huge.png", tmp);
    t_sh(out, sizeof out,
         "python3 -c 'import struct,zlib,sys\n"
         "c = lambda t, d: struct.pack(\">I\", len(d)) + t + d + struct.pack(\">I\", zlib.crc32(t + d))\n"
         "open(sys.argv[1], \"wb\").write(b\"\\x89PNG\\r\\n\\x1a\\n\" + c(b\"IHDR\", struct.pack(\">IIBBBBB\", 20000, 20000, 8, 2, 0, 0, 0)) + c(b\"IDAT\", zlib.compress(b\"\\0\" * 60001)) + c(b\"IEND\", b\"\"))' %s",
         path);
    char *huge = image_part(path, "image/png");
    char *empty = audio_part(silence("empty.wav", 0, 16000, 0), "wav");
    char *longa = audio_part(silence("long.flac", (int64_t)2 * 3600 * 8000, 8000, 1), "flac");
    char *junk = audio_part(fx("A.png"), "wav");
    char *jpg_as_img = image_part(fx("speechlike.wav"), "image/jpeg");
    const char *cases[][3] = {
        {trunc, "messages[0].content[1]", "truncated"},
        {jpg_as_img, "messages[0].content[1]", "not a PNG, JPEG or WebP"},
        {huge, "messages[0].content[1]", "20000 x 20000"},
        {"{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,\"}}", "messages[0].content[1]", "zero bytes"},
        {"{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,@@@@\"}}", "messages[0].content[1]", "base64"},
        {"{\"type\":\"image_url\",\"image_url\":{\"url\":\"file:///etc/passwd\"}}", "messages[0].content[1]", "data: URL"},
        {"{\"type\":\"image_url\",\"image_url\":{}}", "messages[0].content[1]", "image_url"},
        {empty, "messages[0].content[1]", "no audio samples"},
        {longa, "messages[0].content[1]", "600"},
        {junk, "messages[0].content[1]", "not an audio file"},
        {"{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"AAAA\",\"format\":\"aac\"}}", "messages[0].content[1]", "aac"},
        {"{\"type\":\"file\",\"file\":{\"file_data\":\"x\"}}", "messages[0].content[1]", "not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *parts = plume_sprintf("[{\"type\":\"text\",\"text\":\"hi\"},%s]", cases[i][0]);
        int st = chat(&M, out, sizeof out, parts, 2, NULL);
        CHECK(st == 400 && refused(out, cases[i][1], cases[i][2]), "case %zu (%s): HTTP %d %.400s", i, cases[i][2], st, out);
        free(parts);
    }
    /* a text-only bundle; remote URLs off; placeholder text; a system message's image */
    char *img = image_part(fx("A.png"), "image/png"), *parts = plume_sprintf("[%s]", img);
    int st = chat(&T, out, sizeof out, parts, 2, NULL);
    CHECK(st == 400 && refused(out, "messages[0].content[0]", "no vision tower"), "text-only bundle: %d %s", st, out);
    free(parts);
    char *aud = audio_part(fx("short.wav"), "wav");
    parts = plume_sprintf("[%s]", aud);
    st = chat(&T, out, sizeof out, parts, 2, NULL);
    CHECK(st == 400 && refused(out, "messages[0].content[0]", "no audio tower"), "text-only bundle, audio: %d %s", st, out);
    free(parts);
    st = chat(&T, out, sizeof out, "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://127.0.0.1:9/a.png\"}}]", 2, NULL);
    CHECK(st == 400 && refused(out, "messages[0].content[0]", "--allow-remote-media"), "remote off: %d %s", st, out);
    parts = plume_sprintf("[{\"type\":\"text\",\"text\":\"see <|image|> here\"},%s]", img);
    st = chat(&M, out, sizeof out, parts, 2, NULL);
    CHECK(st == 400 && refused(out, "messages", "placeholders"), "placeholder text: %d %s", st, out);
    free(parts);
    size_t n = strlen(img) + 256;
    char *body = malloc(n);
    snprintf(body, n, "{\"max_tokens\":2,\"messages\":[{\"role\":\"system\",\"content\":[%s]},{\"role\":\"user\",\"content\":\"hi\"}]}",
             img);
    st = http(&M, out, sizeof out, "/v1/chat/completions", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp("body.json", body));
    CHECK(st == 400 && refused(out, "messages[0].content[0]", "system message"), "system image: %d %s", st, out);
    free(body), free(img), free(aud), free(trunc), free(huge), free(empty), free(longa), free(junk), free(jpg_as_img);
    /* still serving */
    st = chat(&M, out, sizeof out, "[{\"type\":\"text\",\"text\":\"hi\"}]", 2, NULL);
    CHECK(st == 200, "after the refusals: %d %s", st, out);
}

/* Remote image URLs: fetched from a local HTTP server with --allow-remote-media=private
 * (through a redirect too), the same answer as the data URL; refused for a private address
 * without =private, past the size limit, on an HTTP error, for too many redirects. */
static void test_remote_urls(void) {
    char out[8192], dir[800];
    snprintf(dir, sizeof dir, "%s/www", tmp);
    t_sh(out, sizeof out, "mkdir -p %s && cp %s %s/a.png && head -c 9000000 /dev/zero > %s/big.png", dir, fx("A.png"), dir, dir);
    pid_t www = 0;
    int port = www_start(dir,
                         "    def do_GET(self):\n"
                         "        if self.path.startswith(\"/hop\"):\n"
                         "            k = int(self.path[4:] or 0)\n"
                         "            self.send_response(302); self.send_header(\"Location\", \"/a.png\" if k == 0 else \"/hop%d\" % (k - 1)); self.end_headers(); return\n"
                         "        return super().do_GET()\n",
                         &www);
    CHECK(port > 0, "the local HTTP server did not start");
    if (port > 0) {
        char parts[512], *img = image_part(fx("A.png"), "image/png"), *inline_parts = plume_sprintf("[%s]", img);
        chat(&M, big_out, sizeof big_out, inline_parts, 6, NULL);
        char *want = reply_of(big_out, 0, NULL, NULL);
        const char *paths[] = {"/a.png", "/hop0", "/hop2"};
        for (int i = 0; i < 3; i++) {
            snprintf(parts, sizeof parts, "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://127.0.0.1:%d%s\"}}]", port,
                     paths[i]);
            int st = chat(&M, big_out, sizeof big_out, parts, 6, NULL);
            char *got = st == 200 ? reply_of(big_out, 0, NULL, NULL) : NULL;
            CHECK(got && want && !strcmp(got, want), "%s: HTTP %d %.300s", paths[i], st, big_out);
            free(got);
        }
        const char *bad[][3] = {{"/hop5", "more than 3", "M"}, {"/nothere.png", "HTTP 404", "M"},
                                {"/big.png", "larger than", "M"}, {"/a.png", "private or local address", "P"}};
        for (int i = 0; i < 4; i++) {
            snprintf(parts, sizeof parts, "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://127.0.0.1:%d%s\"}}]", port,
                     bad[i][0]);
            int st = chat(bad[i][2][0] == 'M' ? &M : &P, out, sizeof out, parts, 2, NULL);
            CHECK(st == 400 && refused(out, "messages[0].content[0]", bad[i][1]), "%s: HTTP %d %s", bad[i][0], st, out);
        }
        snprintf(parts, sizeof parts, "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://[::1]:%d/a.png\"}}]", port);
        int st = chat(&P, out, sizeof out, parts, 2, NULL);
        CHECK(st == 400 && refused(out, "messages[0].content[0]", "private"), "[::1]: HTTP %d %s", st, out);
        free(want), free(img), free(inline_parts);
    }
    if (www > 0) {
        kill(www, SIGTERM);
        waitpid(www, NULL, 0);
    }
}

/* POST /v1/audio/transcriptions: the five formats, the text of plume transcribe, and its
 * refusals. */
static void test_transcriptions(void) {
    char out[8192];
    const char *wav = fx("speechlike.wav");
    int st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F model=whisper-1", wav);
    cJSON *root = st == 200 ? cJSON_Parse(out) : NULL;
    cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    CHECK(cJSON_IsString(text), "json: HTTP %d %s", st, out);
    /* plume transcribe's text, trimmed */
    char want[4096] = "";
    if (t_sh(want, sizeof want, "%s/plume transcribe -m %s %s 2>/dev/null | tr -d '\\n'", t_build(), bundle, wav) == 0)
        CHECK(cJSON_IsString(text) && !strcmp(text->valuestring, want), "serve '%s' vs transcribe '%s'",
              cJSON_IsString(text) ? text->valuestring : "", want);
    char json_text[4096];
    snprintf(json_text, sizeof json_text, "%s", cJSON_IsString(text) ? text->valuestring : "");
    cJSON_Delete(root);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F model=w -F response_format=text", wav);
    char line[4200];
    snprintf(line, sizeof line, "%s\n", json_text);
    CHECK(st == 200 && !strcmp(out, line), "text: HTTP %d '%s'", st, out);
    CHECK(st == 200 && header_has("Content-Type: text/plain"), "text: not text/plain");
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F model=w -F response_format=srt", wav);
    CHECK(st == 200 && !strncmp(out, "1\n00:00:00,000 --> 00:00:02,300\n", 32), "srt: HTTP %d '%s'", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F model=w -F response_format=vtt", wav);
    CHECK(st == 200 && !strncmp(out, "WEBVTT\n\n00:00:00.000 --> 00:00:02.300\n", 38), "vtt: HTTP %d '%s'", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions",
              "-F file=@%s -F model=w -F response_format=verbose_json -F language=en -F temperature=0", wav);
    CHECK(st == 200 && strstr(out, "\"duration\":2.3") && strstr(out, "\"language\":\"en\"") && strstr(out, "\"segments\":["),
          "verbose_json: HTTP %d %s", st, out);
    /* refusals */
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F model=w -F response_format=json");
    CHECK(st == 400 && refused(out, "file", "required"), "no file: %d %s", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F model=w", fx("A.png"));
    CHECK(st == 400 && refused(out, "file", "not an audio file"), "an image as audio: %d %s", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F response_format=docx", wav);
    CHECK(st == 400 && refused(out, "response_format", "srt"), "bad format: %d %s", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F temperature=hot", wav);
    CHECK(st == 400 && refused(out, "temperature", "number"), "bad temperature: %d %s", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s -F stream=true", wav);
    CHECK(st == 400 && refused(out, "stream", "not supported"), "stream: %d %s", st, out);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions", "-H 'Content-Type: application/json' -d '{\"file\":1}'");
    CHECK(st == 400 && strstr(out, "multipart/form-data"), "JSON body: %d %s", st, out);
    st = http(&T, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s", wav);
    CHECK(st == 400 && refused(out, "file", "no audio tower"), "text-only bundle: %d %s", st, out);
}

/* A transcription takes what the context leaves after the clip: a 20 s clip (500 tokens) on
 * a 640-token context is answered (256 tokens per 30 s were reserved: 400, "lower max_tokens",
 * a field the endpoint does not have); a 30 s clip that does not fit is a 400 naming 'file'
 * and --context. The body's declared boundary is read (not the first line's), and a form of
 * 100,000 fields is refused, not read to its end as "'file' is required". */
static void test_transcription_budget_and_form(void) {
    char out[8192];
    server C;
    if (server_start_on(&C, "ctx", bundle, "-t 1 --parallel 1 --context 640")) {
        CHECK(0, "a server with --context 640 did not start");
        return;
    }
    int st = http(&C, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s", silence("s20.wav", 20 * 16000, 16000, 0));
    CHECK(st == 200 && strstr(out, "\"text\""), "20 s on a 640-token context: %d %s", st, out);
    st = http(&C, out, sizeof out, "/v1/audio/transcriptions", "-F file=@%s", silence("s30.wav", 30 * 16000, 16000, 0));
    CHECK(st == 400 && refused(out, "file", "--context") && !strstr(out, "max_tokens"), "30 s on a 640-token context: %d %s",
          st, out);
    CHECK(server_stop(&C, NULL) == 0, "the server did not exit 0");
    /* a body whose first line is not the declared boundary */
    char form[800];
    snprintf(form, sizeof form, "%s/form.txt", tmp);
    t_sh(out, sizeof out, "printf -- '--other\\r\\nContent-Disposition: form-data; name=\"model\"\\r\\n\\r\\nw\\r\\n--other--\\r\\n' > %s", form);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions",
              "-H 'Content-Type: multipart/form-data; boundary=mine' --data-binary @%s", form);
    CHECK(st == 400 && strstr(out, "--mine"), "another boundary than declared: %d %s", st, out);
    /* 100,000 small fields, then the file */
    plume_buf many = {0};
    for (int i = 0; i < 100000; i++) plume_buf_puts(&many, "--B\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n");
    plume_buf_puts(&many, "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--B--\r\n");
    snprintf(form, sizeof form, "%s/many.txt", tmp);
    CHECK(plume_write_file(form, many.p, many.len, PLUME_WRITE_REPLACE, NULL) == 0, "write");
    plume_buf_free(&many);
    st = http(&M, out, sizeof out, "/v1/audio/transcriptions",
              "-H 'Content-Type: multipart/form-data; boundary=B' --data-binary @%s", form);
    CHECK(st == 400 && strstr(out, "more than 32 fields"), "100,000 fields: %d %s", st, out);
}

/* An image whose patch grid is wider than the tower's position table (tiny-mm-a: 256 a side;
 * 4800 x 16 pixels resize to a grid of some 800 x 3 patches) is a 400 naming the part when the
 * request is read, not a 500 when the encoder runs; the server keeps serving. */
static void test_grid_past_position_table(void) {
    char out[8192], path[800];
    snprintf(path, sizeof path, "%s/wide.png", tmp);
    t_sh(out, sizeof out,
         "python3 -c 'import struct,zlib,sys\n"
         "c = lambda t, d: struct.pack(\">I\", len(d)) + t + d + struct.pack(\">I\", zlib.crc32(t + d))\n"
         "w, h = 4800, 16\n"
         "open(sys.argv[1], \"wb\").write(b\"\\x89PNG\\r\\n\\x1a\\n\" + c(b\"IHDR\", struct.pack(\">IIBBBBB\", w, h, 8, 2, 0, 0, 0)) + c(b\"IDAT\", zlib.compress((b\"\\0\" + b\"\\x80\" * 3 * w) * h)) + c(b\"IEND\", b\"\"))' %s",
         path);
    char *wide = image_part(path, "image/png");
    char *list = plume_sprintf("[{\"type\":\"text\",\"text\":\"hi\"},%s]", wide);
    int st = chat(&M, out, sizeof out, list, 2, NULL);
    CHECK(st == 400 && refused(out, "messages[0].content[1]", "positions"), "a 4800 x 16 image: %d %s", st, out);
    free(wide);
    free(list);
    st = chat(&M, out, sizeof out, "\"hi\"", 2, NULL);
    CHECK(st == 200, "the server still answers: %d %s", st, out);
}

/* ---- decoded media within --max-request-memory ----------------------------------------------- */

/* Append a little-endian 24-bit value. */
static void put24(plume_buf *b, uint32_t v) {
    uint8_t x[3] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16)};
    plume_buf_put(b, x, 3);
}

/* Append a RIFF chunk (fourcc, the payload, the pad byte). */
static void put_chunk(plume_buf *b, const char *cc, const void *p, size_t n) {
    uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    plume_buf_put(b, cc, 4);
    plume_buf_put(b, len, 4);
    plume_buf_put(b, p, n);
    if (n & 1) plume_buf_put(b, "", 1);
}

/* Write tmp/name: an animated WebP of a few hundred bytes whose canvas is side x side (one
 * 1 x 1 lossless frame): what the decoder allocates in full. The path (static). */
static const char *huge_canvas_webp(const char *name, uint32_t side) {
    static char path[800];
    uint8_t px[4] = {200, 10, 10, 255}, *frame = NULL;
    size_t fn = WebPEncodeLosslessRGBA(px, 1, 1, 4, &frame); /* RIFF WEBP VP8L: the VP8L chunk at 12 */
    plume_buf vp8x = {0}, anim = {0}, anmf = {0}, body = {0};
    uint8_t flags = 0x02; /* animation */
    plume_buf_put(&vp8x, &flags, 1);
    put24(&vp8x, 0);
    put24(&vp8x, side - 1);
    put24(&vp8x, side - 1);
    uint8_t bg_loop[6] = {0};
    plume_buf_put(&anim, bg_loop, 6);
    put24(&anmf, 0);
    put24(&anmf, 0);
    put24(&anmf, 0);
    put24(&anmf, 0);
    put24(&anmf, 100);
    plume_buf_put(&anmf, "", 1);
    if (fn > 12) plume_buf_put(&anmf, frame + 12, fn - 12);
    plume_buf_put(&body, "WEBP", 4);
    put_chunk(&body, "VP8X", vp8x.p, vp8x.len);
    put_chunk(&body, "ANIM", anim.p, anim.len);
    put_chunk(&body, "ANMF", anmf.p, anmf.len);
    plume_buf file = {0};
    uint8_t len[4] = {(uint8_t)body.len, (uint8_t)(body.len >> 8), (uint8_t)(body.len >> 16), (uint8_t)(body.len >> 24)};
    plume_buf_put(&file, "RIFF", 4);
    plume_buf_put(&file, len, 4);
    plume_buf_put(&file, body.p, body.len);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    plume_write_file(path, file.p, file.len, PLUME_WRITE_REPLACE, NULL);
    WebPFree(frame);
    plume_buf_free(&vp8x);
    plume_buf_free(&anim);
    plume_buf_free(&anmf);
    plume_buf_free(&body);
    plume_buf_free(&file);
    return path;
}

/* A process's peak resident memory (VmHWM) in MB, or -1. */
static long peak_rss_mb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb < 0 ? -1 : kb >> 10;
}

/* Images decoded at full size count against --max-request-memory: eight 4096 x 4096 canvases
 * (a few hundred bytes each) on a 300 MB budget are decoded one at a time, each within the
 * budget while it decodes (184 MB) and shrunk to the tower's pixels right after (before the
 * shrink, each stayed held at 48 MB: a 413 at the fourth), the server's peak RSS stays within
 * the budget plus its own size, and the budget is whole again afterwards (a small image still
 * answers); a single 8192 x 8192 canvas (about 700 MB to decode) is refused before it is
 * decoded. The peak is printed (docs/SERVER.md quotes it). */
static void test_decoded_media_within_budget(void) {
    char out[8192];
    server B;
    if (server_start_on(&B, "budget", bundle, "-t 1 --parallel 1 --max-request-memory 300")) {
        CHECK(0, "a server with --max-request-memory 300 did not start");
        return;
    }
    long base = peak_rss_mb(B.pid);
    const char *img = huge_canvas_webp("canvas4k.webp", 4096);
    t_sh(out, sizeof out, "stat -c %%s '%s'", img);
    printf("  a 4096 x 4096 canvas WebP: %ld bytes\n", atol(out));
    char *one = image_part(img, "image/webp");
    plume_buf parts = {0};
    plume_buf_puts(&parts, "[{\"type\":\"text\",\"text\":\"hi\"}");
    for (int i = 0; i < 8; i++) {
        plume_buf_puts(&parts, ",");
        plume_buf_puts(&parts, one);
    }
    plume_buf_puts(&parts, "]");
    free(one);
    int st = chat(&B, out, sizeof out, parts.p, 2, NULL);
    plume_buf_free(&parts);
    CHECK(st == 200, "eight 4096 x 4096 canvases on a 300 MB budget: %d %s", st, out);
    long peak = peak_rss_mb(B.pid);
    printf("  peak RSS: %ld MB before, %ld MB after the request (budget 300 MB)\n", base, peak);
#if defined(__SANITIZE_ADDRESS__)
    /* ASan keeps freed blocks in its quarantine and adds shadow pages: the RSS is not the
     * server's memory there (599 MB measured for the same 283 MB); the plain builds hold it. */
    printf("  (ASan build: the RSS bound is checked by the plain builds)\n");
#else
    CHECK(peak > 0 && peak < 300 + base + 32, "peak RSS %ld MB over the 300 MB budget + the server's %ld MB", peak, base);
#endif
    char *big = image_part(huge_canvas_webp("canvas8k.webp", 8192), "image/webp");
    char *list = plume_sprintf("[%s]", big);
    st = chat(&B, out, sizeof out, list, 2, NULL);
    CHECK(st == 413 && strstr(out, "messages[0].content[0]"), "an 8192 x 8192 canvas: %d %s", st, out);
    free(big);
    free(list);
    CHECK(peak_rss_mb(B.pid) == peak, "the refused 8192 x 8192 canvas was decoded (peak %ld MB)", peak_rss_mb(B.pid));
    char *small = image_part(huge_canvas_webp("canvas64.webp", 64), "image/webp");
    list = plume_sprintf("[%s,%s]", small, small);
    st = chat(&B, out, sizeof out, list, 2, NULL);
    CHECK(st == 200, "two small images after the refusals (the budget given back): %d %s", st, out);
    free(small);
    free(list);
    CHECK(server_stop(&B, NULL) == 0, "the server did not exit 0");
}

/* Write tmp/name: a PNG of w x h pixels, every row the same gray ramp (ramp) or one gray (zlib
 * shrinks it to about 1/100 or 1/1000 of its pixels). The path (static). */
static const char *gray_png(const char *name, int w, int h, int ramp) {
    static char path[800];
    char out[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    t_sh(out, sizeof out,
         "python3 -c 'import struct,zlib,sys\n"
         "c = lambda t, d: struct.pack(\">I\", len(d)) + t + d + struct.pack(\">I\", zlib.crc32(t + d))\n"
         "w, h = %d, %d\n"
         "row = b\"\\0\" + bytes((x * 255 // w if %d else 128) for x in range(w) for _ in range(3))\n"
         "z = zlib.compressobj(9); d = b\"\".join(z.compress(row) for _ in range(h)) + z.flush()\n"
         "open(sys.argv[1], \"wb\").write(b\"\\x89PNG\\r\\n\\x1a\\n\" + c(b\"IHDR\", struct.pack(\">IIBBBBB\", w, h, 8, 2, 0, 0, 0)) + c(b\"IDAT\", d) + c(b\"IEND\", b\"\"))' %s",
         w, h, ramp, path);
    return path;
}

/* n copies of an image part after a text part: a content list (malloc'd). */
static char *parts_of(const char *part, int n) {
    plume_buf b = {0};
    plume_buf_puts(&b, "[{\"type\":\"text\",\"text\":\"hi\"}");
    for (int i = 0; i < n; i++) {
        plume_buf_puts(&b, ",");
        plume_buf_puts(&b, part);
    }
    plume_buf_puts(&b, "]");
    return plume_buf_take(&b);
}

/* Images are shrunk to what the tower reads right after decoding (plume_image_shrink): four
 * 8000 x 8000 PNGs (192 MB each decoded) in one request to a server with
 * --max-request-memory 1024 answer, one decoded at a time (its 11 bytes a pixel reserved while
 * it decodes, 704 MB) and then held at 1.7 MB; before, each stayed held at full size until
 * encoded and the third was a 413. The server's peak RSS is printed (docs/SERVER.md quotes it)
 * and stays within one image's decode (libpng's rows, then the RGB copy: 2 x 192 MB) beside
 * the server's own size. */
static void test_large_images_shrunk(void) {
    char out[8192];
    server B;
    if (server_start_on(&B, "shrink", bundle, "-t 1 --parallel 1 --max-request-memory 1024")) {
        CHECK(0, "a server with --max-request-memory 1024 did not start");
        return;
    }
    long base = peak_rss_mb(B.pid);
    char *one = image_part(gray_png("ramp8k.png", 8000, 8000, 1), "image/png");
    char *list = parts_of(one, 4);
    printf("  four 8000 x 8000 PNGs: a %zu-byte request\n", strlen(list));
    double t0 = plume_now();
    int st = chat(&B, out, sizeof out, list, 2, NULL);
    long peak = peak_rss_mb(B.pid);
    printf("  peak RSS: %ld MB before, %ld MB after the request (%.1f s)\n", base, peak, plume_now() - t0);
    CHECK(st == 200, "four 8000 x 8000 PNGs on a 1024 MB budget: %d %s", st, out);
#if !defined(__SANITIZE_ADDRESS__) /* ASan's quarantine keeps freed blocks resident */
    CHECK(peak > 0 && peak < base + 2 * 192 + 48, "peak RSS %ld MB: more than one image's decode beside the server's %ld MB",
          peak, base);
#endif
    CHECK(metric(&B, "plume_request_memory_bytes") == 0, "the budget is not whole again: %.0f",
          metric(&B, "plume_request_memory_bytes"));
    free(one);
    free(list);
    CHECK(server_stop(&B, NULL) == 0, "the server did not exit 0");
}

/* Audio's decode peak is reserved before it decodes (plume_audio_decode_peak: the growing
 * 16 kHz buffer, the blocks, the resampler): a FLAC of 590 s at 48 kHz (a few hundred KB of
 * silence; about 80 MB at its peak, 38 MB once decoded) on a 64 MB budget is a 413 naming the
 * part before it is decoded (before: decoded, then held within the budget); a 2 s clip
 * answers. */
static void test_audio_decode_reserved(void) {
    char out[8192];
    server B;
    if (server_start_on(&B, "abudget", bundle, "-t 1 --parallel 1 --max-request-memory 64")) {
        CHECK(0, "a server with --max-request-memory 64 did not start");
        return;
    }
    char *longa = audio_part(silence("long48k.flac", (int64_t)590 * 48000, 48000, 1), "flac");
    char *list = plume_sprintf("[%s]", longa);
    int st = chat(&B, out, sizeof out, list, 2, NULL);
    CHECK(st == 413 && strstr(out, "messages[0].content[0]") && strstr(out, "--max-request-memory"),
          "590 s at 48 kHz on a 64 MB budget: %d %s", st, out);
    free(longa);
    free(list);
    char *shorta = audio_part(silence("short48k.flac", (int64_t)2 * 48000, 48000, 1), "flac");
    list = plume_sprintf("[%s]", shorta);
    st = chat(&B, out, sizeof out, list, 2, NULL);
    CHECK(st == 200, "a 2 s clip after the refusal: %d %s", st, out);
    CHECK(metric(&B, "plume_request_memory_bytes") == 0, "the budget is not whole again");
    free(shorta);
    free(list);
    CHECK(server_stop(&B, NULL) == 0, "the server did not exit 0");
}

/* A client that goes away while its images decode stops the work at the next step: six
 * 8000 x 8000 PNGs (seconds each to decode) sent by a client that hangs up after 2 s; the
 * server counts the request in plume_media_abandoned_total{stage="decode"} well before it
 * could have decoded all six, holds no budget, and answers the next request. */
static void test_gone_client_stops_decoding(void) {
    char out[8192];
    server B;
    if (server_start_on(&B, "gone", bundle, "-t 1 --parallel 1 --max-request-memory 1024")) {
        CHECK(0, "a server did not start");
        return;
    }
    const char *name = "plume_media_abandoned_total{stage=\"decode\"}";
    CHECK(metric(&B, name) == 0, "abandoned before any request: %.0f", metric(&B, name));
    char *one = image_part(gray_png("gray8k.png", 8000, 8000, 0), "image/png");
    char *list = parts_of(one, 6);
    char *body = plume_sprintf("{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":%s}]}", list);
    const char *path = write_tmp("gone.json", body);
    double t0 = plume_now();
    int st = http(&B, out, sizeof out, "/v1/chat/completions", "-m 2 -H 'Content-Type: application/json' --data-binary @%s",
                  path);
    CHECK(st == 0 || st == 100, "the client hung up after 2 s, yet got %d %s", st, out); /* 100: the server's probe */
    int seen = metric_reaches(&B, name, 1, 30000);
    printf("  the server stopped decoding %.1f s after the request was sent\n", plume_now() - t0);
    CHECK(seen, "%s is %.0f, not 1", name, metric(&B, name));
    CHECK(metric_reaches(&B, "plume_request_memory_bytes", 0, 5000), "the budget is not whole again: %.0f",
          metric(&B, "plume_request_memory_bytes"));
    st = chat(&B, out, sizeof out, "\"hi\"", 2, NULL);
    CHECK(st == 200, "the server answers after the client left: %d %s", st, out);
    CHECK(metric(&B, name) == 1, "%s: %.0f", name, metric(&B, name));
    free(body);
    free(one);
    free(list);
    CHECK(server_stop(&B, NULL) == 0, "the server did not exit 0");
}

/* ---- real clients ------------------------------------------------------------------------------ */

/* The official OpenAI library: tests/clients/media.mjs. */
static void test_openai_library(void) {
    if (t_sh(big_out, sizeof big_out, "sh scripts/fetch-test-clients.sh")) {
        printf("SKIP test_openai_library: the npm client packages cannot be installed: %s", big_out);
        return;
    }
    char data[700];
    snprintf(data, sizeof data, "%s/tiny-mm-a", t_data());
    int st = t_sh(big_out, sizeof big_out, "timeout 300 node tests/clients/media.mjs http://127.0.0.1:%d %s", M.port, data);
    CHECK(st == 0, "media.mjs (exit %d):\n%s", st, big_out);
}

/* The web page in headless Chromium: an image attached, an audio file attached, a recording
 * from the (fake) microphone; screenshots in build/screenshots. */
static void test_webui_media_in_chromium(void) {
    const char *chromium = getenv("CHROMIUM");
    if (access(chromium && *chromium ? chromium : "/usr/bin/chromium", X_OK)) {
        printf("SKIP test_webui_media_in_chromium: chromium not installed (Debian: apt-get install chromium)\n");
        return;
    }
    if (t_sh(big_out, sizeof big_out, "sh scripts/fetch-test-clients.sh")) {
        printf("SKIP test_webui_media_in_chromium: the npm client packages cannot be installed: %s", big_out);
        return;
    }
    char data[700];
    snprintf(data, sizeof data, "%s/tiny-mm-a", t_data());
    int st = t_sh(big_out, sizeof big_out, "timeout 300 node tests/clients/webui_media.mjs http://127.0.0.1:%d %s %s/screenshots",
                  M.port, data, t_build());
    CHECK(st == 0, "webui_media.mjs (exit %d):\n%s", st, big_out);
    if (!st) printf("%s", big_out);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    tmp = t_tmpdir("serve_media");
    char ck[700], out[4096];
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    snprintf(bundle, sizeof bundle, "%s/bundle", tmp);
    snprintf(text_bundle, sizeof text_bundle, "%s/text", tmp);
    RUN(test_parsers);
    if (t_mm_checkpoint(ck) ||
        t_sh(out, sizeof out, "%s/plume convert %s %s --weights f32 --quiet && %s/plume convert %s/tiny-a/hf %s --weights q8 --quiet",
             t_build(), ck, bundle, t_build(), t_data(), text_bundle)) {
        printf("FAIL test_serve_media: setup: %s\n", out);
        return 1;
    }
    if (server_start_on(&M, "m", bundle, "-t 1 --parallel 2 --snapshot-every 64 --allow-remote-media=private") ||
        server_start_on(&T, "t", text_bundle, "-t 1 --parallel 1") || server_start_on(&P, "p", bundle, "-t 1 --parallel 1 --allow-remote-media")) {
        printf("FAIL test_serve_media: a server did not start (logs in %s)\n", tmp);
        return 1;
    }
    RUN(test_models_lists_modalities);
    RUN(test_image_and_audio_answer_as_run);
    RUN(test_other_dialects_images);
    RUN(test_resent_image_is_cached);
    RUN(test_several_media_and_choices);
    RUN(test_concurrent_images);
    RUN(test_encode_does_not_stall);
    RUN(test_refusals_name_the_part);
    RUN(test_remote_urls);
    RUN(test_transcriptions);
    RUN(test_transcription_budget_and_form);
    RUN(test_decoded_media_within_budget);
    RUN(test_large_images_shrunk);
    RUN(test_audio_decode_reserved);
    RUN(test_gone_client_stops_decoding);
    RUN(test_grid_past_position_table);
    RUN(test_openai_library);
    RUN(test_webui_media_in_chromium);
    int st = server_stop(&M, NULL) | server_stop(&T, NULL) | server_stop(&P, NULL);
    CHECK(st == 0, "a server did not exit 0 on SIGTERM");
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
