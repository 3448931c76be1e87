/* test_serve_video.c -- video through `plume serve` (tools/serve/serve_media.c), driven with curl
 * on 127.0.0.1, on the tiny-mm-a bundle (tiny-a's text weights, the golden vision tower) and the
 * tiny-video-a clips: a video_url data URL (MP4 and WebM) answers token for token as
 * `plume run --video` does, with the video's 32 frames' blocks in the prompt; the same video
 * re-sent is cached through its frames (the rows' keys sit between the timestamps); a video
 * beside an image; a remote video URL with --allow-remote-media=private answers the same, and is
 * refused on a server without it; every refusal is a 400 naming the part (a truncated file, a
 * corrupt one, a PNG sent as video/mp4, a non-video data URL, a text-only bundle, the dialects
 * with no video form: Responses, Anthropic, Ollama) and a video over --max-request-memory a 413;
 * a client that hangs up stops its video's decode.
 * Every curl has a time limit. */
#include "serve/serve.h"
#include "t_mm.h"
#include "t_serve.h"
#include "t_serve_media.h"

#include <sys/resource.h>

static char text_bundle[600]; /* tiny-a, text only (the tiny-mm-a bundle is t_serve.h's bundle) */
static char big_out[1 << 20];

static server M; /* the tiny-mm-a bundle, --allow-remote-media=private */
static server B; /* tiny-mm-a, remote media off, --max-request-memory 8 */
static server T; /* tiny-a (text only) */

/* The path of a tiny-video-a fixture (static, one at a time). */
static const char *vx(const char *name) {
    static char p[700];
    snprintf(p, sizeof p, "%s/tiny-video-a/%s", t_data(), name);
    return p;
}

/* How many prompt tokens `plume run --verbose` reports for a prompt with media flags (-1: none). */
static int cli_prompt_tokens(const char *media_flags, const char *prompt) {
    if (t_sh(big_out, sizeof big_out, "( %s/plume run -m %s %s -p '%s' -n 1 --temp 0 --verbose 2>&1 >/dev/null )", t_build(),
             bundle, media_flags, prompt))
        return -1;
    const char *p = strstr(big_out, "[prompt ");
    return p ? atoi(p + 8) : -1;
}

/* ---- answers ------------------------------------------------------------------------------ */

/* A video_url part before the text answers as `plume run --video` (MP4 and WebM); the prompt
 * holds the 32 frames' blocks; the same request again reuses the cache past the video's last
 * frame (its rows' keys are at their positions between the timestamps). */
static void test_video_answers_as_run(void) {
    static const char *const clips[][2] = {{"clip0.mp4", "video/mp4"}, {"clip1.webm", "video/webm"}};
    for (int c = 0; c < 2; c++) {
        char *vid = url_part("video_url", vx(clips[c][0]), clips[c][1]);
        char *parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"Describe.\"}]", vid);
        int prompt = 0, cached = 0, st = chat(&M, big_out, sizeof big_out, parts, 8, NULL);
        char *got = st == 200 ? reply_of(big_out, 0, &prompt, NULL) : NULL;
        CHECK(got, "%s: HTTP %d %.300s", clips[c][0], st, big_out);
        char flags[800];
        snprintf(flags, sizeof flags, "--video %s", vx(clips[c][0]));
        char *want = cli_answer(bundle, flags, "Describe.", 8);
        CHECK(got && want && !strcmp(got, want), "%s: serve '%s' vs run '%s'", clips[c][0], got ? got : "", want ? want : "");
        CHECK(prompt > 32 * 60, "%s: %d prompt tokens (32 frames of 60+ soft tokens each expected)", clips[c][0], prompt);
        int run_prompt = cli_prompt_tokens(flags, "Describe.");
        CHECK(prompt == run_prompt, "%s: %d prompt tokens, plume run %d", clips[c][0], prompt, run_prompt);
        printf("  %s: %d prompt tokens, answer '%s'\n", clips[c][0], prompt, got ? got : "");
        st = chat(&M, big_out, sizeof big_out, parts, 8, NULL);
        char *again = st == 200 ? reply_of(big_out, 0, NULL, &cached) : NULL;
        CHECK(again && got && !strcmp(again, got), "%s again: HTTP %d '%s'", clips[c][0], st, again ? again : "");
        CHECK(cached > prompt - 16, "%s again: %d of %d prompt tokens cached", clips[c][0], cached, prompt);
        free(again), free(got), free(want), free(parts), free(vid);
    }
}

/* An image and a video in one message, as `plume run --image --video` (which puts the images
 * first, then the videos, before the text): the runs of both kinds laid out and filled in
 * order. */
static void test_video_beside_image(void) {
    char *vid = url_part("video_url", vx("clip0.mp4"), "video/mp4"), *img = url_part("image_url", fx("A.png"), "image/png");
    char *parts = plume_sprintf("[%s,%s,{\"type\":\"text\",\"text\":\"Compare.\"}]", img, vid);
    int prompt = 0, st = chat(&M, big_out, sizeof big_out, parts, 8, NULL);
    char *got = st == 200 ? reply_of(big_out, 0, &prompt, NULL) : NULL;
    CHECK(got, "image and video: HTTP %d %.300s", st, big_out);
    char flags[1600];
    snprintf(flags, sizeof flags, "--video %s --image %s", vx("clip0.mp4"), fx("A.png"));
    char *want = cli_answer(bundle, flags, "Compare.", 8);
    CHECK(got && want && !strcmp(got, want), "image and video: serve '%s' vs run '%s'", got ? got : "", want ? want : "");
    int run_prompt = cli_prompt_tokens(flags, "Compare.");
    CHECK(prompt == run_prompt, "image and video: %d prompt tokens, plume run %d", prompt, run_prompt);
    free(got), free(want), free(parts), free(vid), free(img);
}

/* ---- refusals ----------------------------------------------------------------------------- */

/* Bad videos are a 400 naming the part: truncated, corrupt in the middle, a PNG declared as
 * video/mp4, a non-video data URL, an empty URL object, a text-only bundle. */
static void test_bad_videos_refused(void) {
    char *bytes = NULL, *err = NULL;
    size_t len = 0;
    CHECK(plume_read_file(vx("clip0.mp4"), &bytes, &len, &err) == 0, "read clip0.mp4: %s", err ? err : "");
    if (!bytes) return;
    char path[800];
    snprintf(path, sizeof path, "%s", write_tmp_bytes("cut.mp4", bytes, len / 2));
    char *cut = url_part("video_url", path, "video/mp4");
    for (size_t i = len / 3; i < len / 3 + 4096 && i < len; i++) bytes[i] = (char)(bytes[i] ^ 0x5a);
    snprintf(path, sizeof path, "%s", write_tmp_bytes("corrupt.mp4", bytes, len));
    char *corrupt = url_part("video_url", path, "video/mp4");
    char *png = url_part("video_url", fx("A.png"), "video/mp4"), *as_image = url_part("video_url", vx("clip0.mp4"), "image/png");
    const struct {
        const server *sv;
        char *part;
        const char *what;
    } bad[] = {{&M, cut, "clip"}, {&M, corrupt, "clip"}, {&M, png, "not a video"}, {&M, as_image, "not 'image/png'"},
               {&M, strdup("{\"type\":\"video_url\",\"video_url\":{}}"), "video_url part"},
               {&M, strdup("{\"type\":\"video_url\",\"video_url\":{\"url\":\"ftp://x/a.mp4\"}}"), "http(s) URL"},
               {&T, url_part("video_url", vx("clip0.mp4"), "video/mp4"), "takes no video"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *parts = plume_sprintf("[{\"type\":\"text\",\"text\":\"hi\"},%s]", bad[i].part);
        int st = chat(bad[i].sv, big_out, sizeof big_out, parts, 2, NULL);
        /* a truncated or corrupt file: the decoder's own words; any message naming the part */
        const char *what = !strcmp(bad[i].what, "clip") ? "messages[0].content[1]" : bad[i].what;
        CHECK(st == 400 && refused(big_out, "messages[0].content[1]", what), "bad video %zu: HTTP %d %.400s", i, st, big_out);
        if (i < 2) printf("  %s: %.200s\n", i ? "corrupt" : "truncated", big_out);
        free(parts);
        free(bad[i].part);
    }
    free(bytes);
    free(err);
}

/* The dialects with no video form refuse one with a 400 naming it: the Responses API's
 * input_video, Anthropic's video block, Ollama's "videos" (a message's and generate's). */
static void test_dialects_without_video(void) {
    char *b = b64_file(vx("clip0.mp4"));
    char *body = plume_sprintf("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_video\","
                               "\"video_url\":\"data:video/mp4;base64,%s\"}]}]}", b);
    int st = http(&M, big_out, sizeof big_out, "/v1/responses", "-H 'Content-Type: application/json' --data-binary @%s",
                  write_tmp_bytes("body.json", body, strlen(body)));
    CHECK(st == 400 && refused(big_out, "input[0].content", "Responses API"), "responses input_video: %d %.300s", st, big_out);
    free(body);
    body = plume_sprintf("{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\","
                         "\"source\":{\"type\":\"base64\",\"media_type\":\"video/mp4\",\"data\":\"%s\"}}]}]}", b);
    st = http(&M, big_out, sizeof big_out, "/v1/messages", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp_bytes("body.json", body, strlen(body)));
    CHECK(st == 400 && strstr(big_out, "Messages API") && strstr(big_out, "video_url"), "anthropic video: %d %.300s", st,
          big_out);
    free(body);
    body = plume_sprintf("{\"model\":\"m\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"videos\":[\"%s\"]}]}", b);
    st = http(&M, big_out, sizeof big_out, "/api/chat", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp_bytes("body.json", body, strlen(body)));
    CHECK(st == 400 && strstr(big_out, "messages[0].videos") && strstr(big_out, "video_url"), "ollama chat videos: %d %.300s", st,
          big_out);
    free(body);
    body = plume_sprintf("{\"model\":\"m\",\"stream\":false,\"prompt\":\"hi\",\"videos\":[\"%s\"]}", b);
    st = http(&M, big_out, sizeof big_out, "/api/generate", "-H 'Content-Type: application/json' --data-binary @%s",
              write_tmp_bytes("body.json", body, strlen(body)));
    CHECK(st == 400 && strstr(big_out, "'videos'"), "ollama generate videos: %d %.300s", st, big_out);
    free(body);
    free(b);
}

/* A video whose decode would take more than --max-request-memory is a 413 naming the part,
 * refused before it is decoded; the budget is whole again after it (an image answers). */
static void test_video_over_budget(void) {
    char *vid = url_part("video_url", vx("clip0.mp4"), "video/mp4");
    char *parts = plume_sprintf("[{\"type\":\"text\",\"text\":\"hi\"},%s]", vid);
    int st = chat(&B, big_out, sizeof big_out, parts, 2, NULL);
    CHECK(st == 413 && strstr(big_out, "messages[0].content[1]") && strstr(big_out, "--max-request-memory"),
          "a video on an 8 MB budget: %d %.300s", st, big_out);
    free(parts);
    char *img = url_part("image_url", fx("A.png"), "image/png");
    parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"hi\"}]", img);
    st = chat(&B, big_out, sizeof big_out, parts, 2, NULL);
    CHECK(st == 200, "an image after the refused video (the budget given back): %d %.300s", st, big_out);
    free(parts), free(img), free(vid);
}

/* The CPU seconds a process has used (utime + stime of /proc/PID/stat), or -1. */
static double proc_cpu(pid_t pid) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const char *p = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
    fclose(f);
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A client that hangs up while its video decodes stops the decode (asked between packets): a
 * 25 s 2048 x 2048 clip of 1500 black frames (long.mp4, 38 KB) takes this process some CPU seconds to
 * decode; the server, whose client gives up after 1 s, gives its budget back well before it
 * would have decoded it all, and takes less than half that CPU. */
static void test_client_gone_stops_decode(void) {
    char *bytes = NULL, *err = NULL;
    size_t len = 0;
    plume_video *v = NULL;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    int rc = plume_read_file(vx("long.mp4"), &bytes, &len, &err) ? -1 : plume_video_decode(&v, bytes, len, NULL, &err);
    getrusage(RUSAGE_SELF, &r1);
    const double full = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                        (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e-6;
    CHECK(rc == 0 && plume_video_n_decoded(v) == 1500, "long.mp4: %s", err ? err : "");
    plume_video_free(v);
    free(bytes), free(err);
    char *vid = url_part("video_url", vx("long.mp4"), "video/mp4");
    char *body = plume_sprintf("{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[%s]}]}", vid);
    const char *path = write_tmp_bytes("long.json", body, strlen(body));
    free(body), free(vid);
    const double cpu0 = proc_cpu(M.pid);
    char out[4096];
    t_sh(out, sizeof out, "curl -s -m 1 -H 'Content-Type: application/json' --data-binary @%s http://127.0.0.1:%d/v1/chat/completions; true",
         path, M.port);
    int back = metric_reaches(&M, "plume_request_memory_bytes", 0, 60000);
    const double used = proc_cpu(M.pid) - cpu0;
    printf("  a full decode of long.mp4: %.2f s of CPU here; the server, its client gone after 1 s: %.2f s\n", full, used);
    CHECK(back, "the server did not give the budget back within 60 s");
    CHECK(used < 0.5 * full, "the server used %.2f s of CPU on a decode whose client left (a full decode: %.2f s)", used, full);
}

/* ---- remote videos ------------------------------------------------------------------------ */

/* With --allow-remote-media=private a video_url http URL is fetched (the image fetcher and its
 * limits) and answers as the data URL; a 404 is a 400; a server without the flag refuses it. */
static void test_remote_video(void) {
    char out[4096], dir[800];
    snprintf(dir, sizeof dir, "%s/www", tmp);
    t_sh(out, sizeof out, "mkdir -p %s && cp %s %s/v.mp4", dir, vx("clip0.mp4"), dir);
    pid_t www = 0;
    int port = www_start(dir, "", &www);
    CHECK(port > 0, "the local HTTP server did not start");
    if (port > 0) {
        char *vid = url_part("video_url", vx("clip0.mp4"), "video/mp4");
        char *parts = plume_sprintf("[%s,{\"type\":\"text\",\"text\":\"Describe.\"}]", vid);
        chat(&M, big_out, sizeof big_out, parts, 6, NULL);
        char *want = reply_of(big_out, 0, NULL, NULL);
        free(parts);
        parts = plume_sprintf("[{\"type\":\"video_url\",\"video_url\":{\"url\":\"http://127.0.0.1:%d/v.mp4\"}},"
                              "{\"type\":\"text\",\"text\":\"Describe.\"}]", port);
        int st = chat(&M, big_out, sizeof big_out, parts, 6, NULL);
        char *got = st == 200 ? reply_of(big_out, 0, NULL, NULL) : NULL;
        CHECK(got && want && !strcmp(got, want), "remote video: HTTP %d %.300s (want '%s')", st, big_out, want ? want : "");
        st = chat(&B, big_out, sizeof big_out, parts, 6, NULL);
        CHECK(st == 400 && refused(big_out, "messages[0].content[0]", "remote video URLs are off"),
              "remote video without --allow-remote-media: %d %.300s", st, big_out);
        free(parts);
        parts = plume_sprintf("[{\"type\":\"video_url\",\"video_url\":{\"url\":\"http://127.0.0.1:%d/none.mp4\"}}]", port);
        st = chat(&M, big_out, sizeof big_out, parts, 6, NULL);
        CHECK(st == 400 && refused(big_out, "messages[0].content[0]", "HTTP 404"), "a missing remote video: %d %.300s", st,
              big_out);
        free(parts), free(got), free(want), free(vid);
    }
    if (www > 0) {
        kill(www, SIGTERM);
        waitpid(www, NULL, 0);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    tmp = t_tmpdir("serve_video");
    char ck[700], out[4096];
    snprintf(ck, sizeof ck, "%s/hf", tmp);
    snprintf(bundle, sizeof bundle, "%s/bundle", tmp);
    snprintf(text_bundle, sizeof text_bundle, "%s/text", tmp);
    if (t_mm_checkpoint(ck) ||
        t_sh(out, sizeof out, "%s/plume convert %s %s --weights f32 --quiet && %s/plume convert %s/tiny-a/hf %s --weights q8 --quiet",
             t_build(), ck, bundle, t_build(), t_data(), text_bundle)) {
        printf("FAIL test_serve_video: setup: %s\n", out);
        return 1;
    }
    if (server_start_on(&M, "m", bundle, "-t 1 --parallel 2 --allow-remote-media=private") ||
        server_start_on(&B, "b", bundle, "-t 1 --parallel 1 --max-request-memory 8") ||
        server_start_on(&T, "t", text_bundle, "-t 1 --parallel 1")) {
        printf("FAIL test_serve_video: a server did not start (logs in %s)\n", tmp);
        return 1;
    }
    RUN(test_video_answers_as_run);
    RUN(test_video_beside_image);
    RUN(test_bad_videos_refused);
    RUN(test_dialects_without_video);
    RUN(test_video_over_budget);
    RUN(test_remote_video);
    RUN(test_client_gone_stops_decode);
    int st = server_stop(&M, NULL) | server_stop(&B, NULL) | server_stop(&T, NULL);
    CHECK(st == 0, "a server did not exit 0 on SIGTERM");
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
