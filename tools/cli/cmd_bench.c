/* cmd_bench.c -- `plume bench`: load time, prefill and decode speed, time to first token,
 * memory, the machine's read bandwidth and decode as a fraction of the bandwidth limit.
 * Several repetitions; the median and the spread (min..max) of each figure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "common.h"

static const char bench_usage[] =
    "usage: plume bench [-m BUNDLE] [-p 512] [-n 128] [-t THREADS] [-r 3] [--isa NAME] [--json]\n"
    "                   [--exact] [--history N] [--batch 1,2,4,8] [--spec] [--depth 0,4096,16384]\n"
    "                   [--kv-bits 8] [--audio SECONDS] [--image [--image-tokens 280]] [--video FILE]\n"
    "                   [--threads-profile] [--drafter DIR [--accept-rate 0.5,0.7,0.9] [--draft K]\n"
    "                   [--draft-fixed]]\n"
    "                   [--json-schema FILE [--temp T] [--top-k K] [--tokenizer FILE]]\n"
    "  Measure on random token ids: bundle open to ready (load), prefill of -p tokens, time to\n"
    "  first token, decode of -n tokens, peak and anonymous RSS, the read bandwidth of all\n"
    "  threads streaming the weights right before and after each decode, and decode speed over\n"
    "  that limit (bytes of weights a decode step reads / bandwidth; also over a 1 GiB buffer\n"
    "  streamed at the end). -r repetitions; median and min..max are reported.\n"
    "  --exact       float32 activations (q8/q4 bundles take int8 activations by default)\n"
    "  --history N   also: time to first token of a 32-token follow-up turn after a conversation\n"
    "                of N tokens (the session keeps its cache: it must not grow with N)\n"
    "  --threads-profile  also (after the timed runs): per thread and region (matmuls, attention,\n"
    "                norms, ...) the time of a prefill's and the decode's steps (and of each --batch),\n"
    "                the serial share, waits at the loops' ends, and an Amdahl projection\n"
    "  --spec        also: the time of a step of T = 2, 3, 4, 5, 8 tokens over a 1-token step at a\n"
    "                decode position, and the speed-up speculative decoding drafting T - 1 tokens\n"
    "                would give at 30%, 50% and 70% acceptance (docs/SPECULATIVE.md)\n"
    "  --drafter DIR only this: plain decode against speculative decode with the MTP drafter DIR\n"
    "                (docs/SPECULATIVE.md), -r interleaved rounds of -n tokens after -p: the real\n"
    "                drafter drafts and the real target verifies, but each guess is replaced by the\n"
    "                target's own greedy token with probability A (--accept-rate, up to 8, default\n"
    "                0.5,0.7,0.9), else by a wrong one; --draft K drafts at most (default 3, adaptive)\n"
    "  --draft-fixed with --drafter: K drafts every round (adaptive length off), as a peer's\n"
    "                constant draft length does; acceptance 0 then times a round that keeps none\n"
    "  --audio S     only this: the audio tower's encode of a clip of S seconds (0.1 .. 600; over 30 s\n"
    "                in 30 s clips): its first run, then -r runs; time, tokens, real-time factor\n"
    "  --image       only this: the vision tower (the bundle needs one): the encode time of a\n"
    "                640x480 image at --image-tokens (default 280: 266 soft tokens), its resize\n"
    "                alone, and the time to first token of a chat prompt holding it (encode +\n"
    "                prefill of the prompt), -r repetitions\n"
    "  --video FILE  only this: the file's decode (every frame counted, 32 sampled and resized) and\n"
    "                the vision tower on those frames (70 tokens each): a cold round, then -r rounds\n"
    "  --json-schema FILE  only this: the cost of holding decode to the schema (docs/STRUCTURED.md):\n"
    "                -n steps of a chat answer per repetition, each sampled twice from the same\n"
    "                logits, without and with a fresh constraint (its masks made as the answer\n"
    "                goes); the constraint's cost per step (constrained sample + accept, less the\n"
    "                plain sample, in the thread's CPU time), median and worst, against the median\n"
    "                decode step (wall time). --temp and --top-k set the sampler (default: the\n"
    "                model's, top-k 64; --temp 0 greedy); --tokenizer: a tokenizer.bin or\n"
    "                tokenizer.json for a bundle made without one\n";

/* ---- memory ---------------------------------------------------------------------------- */

/* A "Key:   N kB" value of /proc/self/status, in MB. */
static double status_mb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = 0;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') v = atof(line + k + 1) / 1024.0;
    if (f) fclose(f);
    return v;
}

/* ---- statistics ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double med, lo, hi;
} stat3;

/* Median and range of n values (sorts them). */
static stat3 summarize(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    stat3 s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

/* ---- continuous batching --------------------------------------------------------------- */

/* Aggregate decode tok/s of n sessions each decoding n_gen tokens in shared steps, after a
 * 16-token prompt each; 0 on error (printed). report (if not NULL): the threads profile of
 * the decode steps (--threads-profile; NULL there when out of memory). */
static double batch_decode(plume_model *m, int32_t n, int64_t n_gen, uint64_t *rng, char **report) {
    plume_session *s[64] = {0};
    plume_batch *b = NULL;
    char *err = NULL;
    int32_t V = plume_model_n_vocab(m), ids[64][16], next[64];
    float *logits = malloc((size_t)V * 4);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)(n_gen + 32);
    int rc = !logits || plume_batch_new(&b, m, 16 * n, &err);
    for (int32_t k = 0; !rc && k < n; k++) {
        rc = plume_session_new(&s[k], m, &sp, &err);
        for (int i = 0; i < 16; i++) ids[k][i] = (int32_t)(plume_rng_next(rng) % (uint64_t)V);
        if (!rc) rc = plume_batch_add(b, s[k], ids[k], 16, NULL, 0, &err) < 0;
        next[k] = ids[k][15];
    }
    if (!rc) rc = plume_batch_run(b, &err);
    plume_prof *prof = NULL;
    if (!rc && report) rc = plume_model_profile_start(m, &prof, &err);
    double t0 = plume_now();
    for (int64_t g = 0; !rc && g < n_gen; g++) {
        for (int32_t k = 0; !rc && k < n; k++) {
            rc = plume_batch_add(b, s[k], &next[k], 1, k == 0 ? logits : NULL, 0, &err) < 0;
            next[k] = (int32_t)(plume_rng_next(rng) % (uint64_t)V); /* speed does not depend on the ids */
        }
        if (!rc) rc = plume_batch_run(b, &err);
    }
    double tok_s = (double)n * (double)n_gen / (plume_now() - t0);
    if (prof) {
        char title[64];
        snprintf(title, sizeof title, "decode, %d sessions in one batch", n);
        *report = plume_model_profile_stop(m, prof, n_gen, title);
    }
    if (rc) {
        fprintf(stderr, "plume bench: batch of %d: %s\n", n, err ? err : "out of memory");
        tok_s = 0;
    }
    free(err);
    for (int32_t k = 0; k < n; k++) plume_session_free(s[k]);
    plume_batch_free(b);
    free(logits);
    return tok_s;
}

/* The model params every measurement of one `plume bench` uses (--isa, -t, --exact). */
static plume_model_params bench_model_params(const char *isa, int32_t threads, int exact) {
    plume_model_params mp = plume_model_default_params();
    mp.isa = isa;
    mp.n_threads = threads;
    mp.exact = exact;
    return mp;
}

/* ---- speculative decoding: the cost of a step of several tokens ------------------------ */

#define SPEC_T_N 6
static const int32_t spec_steps[SPEC_T_N] = {1, 2, 3, 4, 5, 8}; /* tokens per step */

/* Time steps of T tokens (logits of every row, as a speculative step verifies) at a decode
 * position: after a 64-token prompt and 8 warm-up steps, each T in turn, fed and rewound
 * again (a free rewind), 5 times per repetition. Prints each T's median time over the
 * 1-token step's and the expected speed-up of drafting T - 1 tokens at a few acceptance
 * rates. 0, or 1 on error (printed). */
static int spec_step_costs(const char *model, const char *isa, int32_t threads, int exact, int64_t reps, int json) {
    plume_model_params mp = bench_model_params(isa, threads, exact);
    plume_model *m = NULL;
    plume_session *s = NULL;
    char *err = NULL;
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = 256;
    if (plume_model_open(&m, model, &mp, &err) || plume_session_new(&s, m, &sp, &err)) {
        plume_model_free(m);
        return cli_lib_error_free(err);
    }
    int32_t V = plume_model_n_vocab(m), ids[64];
    uint64_t rng = 777;
    for (int i = 0; i < 64; i++) ids[i] = (int32_t)(plume_rng_next(&rng) % (uint64_t)V);
    float *logits = malloc((size_t)8 * (size_t)V * sizeof *logits);
    int64_t n = reps * 5;
    double *t = malloc((size_t)(SPEC_T_N * n) * sizeof *t);
    int rc = !logits || !t || plume_session_feed(s, ids, 64, NULL, 0, &err);
    for (int i = 0; !rc && i < 8; i++) rc = plume_session_feed(s, ids + i, 1, logits, 0, &err);
    for (int64_t r = 0; !rc && r < n; r++)
        for (int k = 0; !rc && k < SPEC_T_N; k++) {
            int32_t at = plume_session_n_past(s);
            double t0 = plume_now();
            rc = plume_session_feed(s, ids + 8, spec_steps[k], logits, 1, &err);
            t[k * n + r] = plume_now() - t0;
            if (!rc) rc = plume_session_rewind(s, at, &err);
        }
    if (rc) {
        free(logits);
        free(t);
        plume_session_free(s);
        plume_model_free(m);
        return err ? cli_lib_error_free(err) : cli_error("bench: out of memory");
    }
    double med[SPEC_T_N];
    for (int k = 0; k < SPEC_T_N; k++) med[k] = summarize(t + k * n, (int)n).med;
    static const double rates[3] = {0.3, 0.5, 0.7};
    if (!json)
        printf("\n| step of T tokens (decode position, all logits), %lld runs | median ms | x 1-token step | "
               "speed-up drafting T-1 at 30%% / 50%% / 70%% acceptance |\n|---|---|---|---|\n", (long long)n);
    for (int k = 0; k < SPEC_T_N; k++) {
        double rel = med[k] / med[0], up[3];
        for (int j = 0; j < 3; j++) /* expected tokens per step: (1 - a^T) / (1 - a) */
            up[j] = (1.0 - pow(rates[j], spec_steps[k])) / (1.0 - rates[j]) / rel;
        if (json)
            printf("{\"step_tokens\": %d, \"step_ms\": %.2f, \"relative_cost\": %.3f, \"speedup_30\": %.3f, "
                   "\"speedup_50\": %.3f, \"speedup_70\": %.3f}\n", spec_steps[k], med[k] * 1e3, rel, up[0], up[1], up[2]);
        else
            printf("| T = %d | %.1f | %.2f | %.2f / %.2f / %.2f |\n", spec_steps[k], med[k] * 1e3, rel, up[0], up[1],
                   up[2]);
    }
    free(logits);
    free(t);
    plume_session_free(s);
    plume_model_free(m);
    return 0;
}

/* ---- images: the vision tower ---------------------------------------------------------- */

/* A deterministic 640 x 480 test card: gradients, a grid and noise (the tower's cost does not
 * depend on the content, only on the patch count). */
static plume_image *bench_image(char **err) {
    enum { W = 640, H = 480 };
    uint8_t *px = malloc((size_t)W * H * 3);
    uint64_t rng = 7;
    for (int32_t y = 0; px && y < H; y++)
        for (int32_t x = 0; x < W; x++) {
            uint8_t *p = px + ((size_t)y * W + (size_t)x) * 3, noise = (uint8_t)(plume_rng_next(&rng) & 31);
            p[0] = (uint8_t)(x * 255 / W) ^ noise;
            p[1] = (uint8_t)(y * 255 / H);
            p[2] = (uint8_t)((x / 40 + y / 40) % 2 ? 200 : 40) + noise;
        }
    plume_image *img = NULL;
    if (!px) plume_fail(err, PLUME_ENOMEM, "out of memory");
    else plume_image_from_rgb(&img, px, W, H, err);
    free(px);
    return img;
}

/* The id of a token by its text in m's vocabulary ("<bos>", "<|turn>", "\n"), or fallback % the
 * vocabulary's size when it has none (a bundle without a tokenizer: any id feeds the model). */
static int32_t bench_token(const plume_model *m, const char *text, int32_t fallback) {
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    int32_t id = tok ? plume_token_find(tok, text) : -1;
    return id >= 0 ? id : fallback % plume_model_n_vocab(m);
}

/* The tower's encode time, the resize alone (plume_image_tokens), and the TTFT of a prompt
 * "<bos><|turn>user\n" + the image's run + 16 text ids + "<turn|>\n<|turn>model\n" in a
 * fresh session (encode + prefill); medians and ranges over reps. 0, or 1 (printed). */
static int image_costs(const char *model, const char *isa, int32_t threads, int exact, int64_t reps, int32_t budget,
                       int json) {
    char *err = NULL;
    plume_model *m = NULL;
    plume_model_params mp = bench_model_params(isa, threads, exact);
    plume_image *img = NULL;
    if (plume_model_open(&m, model, &mp, &err) || !(img = bench_image(&err))) {
        plume_model_free(m);
        return cli_lib_error_free(err);
    }
    plume_image_params ip = plume_image_default_params();
    ip.max_tokens = budget;
    double enc[16], rsz[16], ttft[16], pre[16];
    int32_t n_tok = 0, n = 0;
    int rc = plume_image_tokens(m, img, &ip, &n_tok, NULL, &err);
    const int32_t V = plume_model_n_vocab(m);
    int32_t *ids = rc ? NULL : malloc((size_t)(n_tok + 32) * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!rc && (!ids || !logits)) rc = plume_fail(&err, PLUME_ENOMEM, "out of memory");
    if (!rc) { /* the prompt: <bos> <|turn> "\n" (2 105 107 in Gemma's vocabulary) */
        uint64_t r = 11;
        const int32_t img_id = plume_model_media_token(m, "image"), turn = bench_token(m, "<|turn>", 105);
        const int32_t nl = bench_token(m, "\n", 107), end = bench_token(m, "<turn|>", 106);
        ids[n++] = bench_token(m, "<bos>", 2), ids[n++] = turn, ids[n++] = nl, ids[n++] = plume_model_media_token(m, "boi");
        for (int32_t i = 0; i < n_tok; i++) ids[n++] = img_id;
        ids[n++] = plume_model_media_token(m, "eoi");
        for (int32_t i = 0; i < 16; i++) ids[n++] = (int32_t)(300 + plume_rng_next(&r) % 1000) % V;
        ids[n++] = end, ids[n++] = nl, ids[n++] = turn;
    }
    for (int64_t k = 0; !rc && k < reps; k++) {
        plume_embd *e = NULL;
        plume_session *s = NULL;
        plume_session_params sp = plume_session_default_params();
        sp.n_ctx = n + 16;
        sp.n_batch = 512;
        double t0 = plume_now();
        rc = plume_image_tokens(m, img, &ip, NULL, NULL, &err);
        rsz[k] = plume_now() - t0;
        t0 = plume_now();
        if (!rc) rc = plume_image_encode(&e, m, img, &ip, &err);
        enc[k] = plume_now() - t0;
        double t1 = plume_now();
        if (!rc) rc = plume_session_new(&s, m, &sp, &err);
        if (!rc) rc = plume_session_feed_media(s, ids, n, (const plume_embd *const *)&e, 1, logits, 0, &err);
        pre[k] = plume_now() - t1;
        ttft[k] = plume_now() - t0;
        plume_session_free(s);
        plume_embd_free(e);
    }
    if (!rc) {
        stat3 E = summarize(enc, (int)reps), Z = summarize(rsz, (int)reps), T = summarize(ttft, (int)reps),
              P = summarize(pre, (int)reps);
        if (json)
            printf("{\"image_tokens\": %d, \"prompt_tokens\": %d, \"encode_ms\": %.1f, \"resize_ms\": %.1f, "
                   "\"prefill_ms\": %.1f, \"ttft_ms\": %.1f}\n",
                   n_tok, n, E.med * 1e3, Z.med * 1e3, P.med * 1e3, T.med * 1e3);
        else {
            printf("| %s, %s kernels, %d threads, %lld reps, 640x480 image, %d soft tokens | median | min .. max |\n"
                   "|---|---|---|\n", model, plume_model_isa(m), plume_model_n_threads(m), (long long)reps, n_tok);
            printf("| image encode (resize + tower + embed_vision), ms | %.1f | %.1f .. %.1f |\n", E.med * 1e3, E.lo * 1e3, E.hi * 1e3);
            printf("| of which resize alone, ms | %.1f | %.1f .. %.1f |\n", Z.med * 1e3, Z.lo * 1e3, Z.hi * 1e3);
            printf("| prefill of the %d-token prompt holding it, ms | %.1f | %.1f .. %.1f |\n", n, P.med * 1e3, P.lo * 1e3, P.hi * 1e3);
            printf("| time to first token (encode + prefill), ms | %.1f | %.1f .. %.1f |\n", T.med * 1e3, T.lo * 1e3, T.hi * 1e3);
        }
    }
    free(ids);
    free(logits);
    plume_image_free(img);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}

/* ---- decode at depth ------------------------------------------------------------------- */

/* Decode tok/s of n_gen tokens after depth positions of history: the caches are filled with
 * pseudo-random K/V rows (plume_session_fill_random) instead of a prefill, which would take
 * minutes at 32K tokens; one untimed step first. 0 on error (printed). */
static double depth_decode(plume_model *m, int64_t depth, int64_t n_gen, int32_t kv_bits, uint64_t *rng) {
    plume_session *s = NULL;
    char *err = NULL;
    int32_t V = plume_model_n_vocab(m), next = bench_token(m, "<bos>", 2);
    float *logits = malloc((size_t)V * 4);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)(depth + n_gen + 2);
    sp.kv_bits = kv_bits;
    int rc = !logits || plume_session_new(&s, m, &sp, &err);
    if (!rc) rc = plume_session_fill_random(s, (int32_t)depth, plume_rng_next(rng), &err);
    if (!rc) rc = plume_session_feed(s, &next, 1, logits, 0, &err);
    double t0 = plume_now();
    for (int64_t g = 0; !rc && g < n_gen; g++) {
        next = (int32_t)(plume_rng_next(rng) % (uint64_t)V); /* speed does not depend on the ids */
        rc = plume_session_feed(s, &next, 1, logits, 0, &err);
    }
    double tok_s = (double)n_gen / (plume_now() - t0);
    if (rc) {
        fprintf(stderr, "plume bench: depth %lld: %s\n", (long long)depth, err ? err : "out of memory");
        tok_s = 0;
    }
    free(err);
    plume_session_free(s);
    free(logits);
    return tok_s;
}

/* ---- plume bench ----------------------------------------------------------------------- */

/* ---- audio encode ---------------------------------------------------------------------- */

/* plume bench --audio: the audio tower (features, conformer, embed_audio) on secs of a tone
 * and noise (the time does not depend on the sound): one cold run (the tower's pages mapped
 * on first use), then reps runs; the median and range, and their real-time factor. */
static int audio_bench(const char *model, const char *isa, int32_t threads, double secs, int64_t reps, int json) {
    char *err = NULL;
    plume_model *m;
    plume_model_params mp = bench_model_params(isa, threads, 1);
    if (plume_model_open(&m, model, &mp, &err)) return cli_lib_error_free(err);
    if (!plume_model_has_audio(m)) {
        plume_model_free(m);
        return cli_error("bench: this bundle has no audio tower (plume synth --config e2b makes one)");
    }
    const int64_t n = (int64_t)(secs * PLUME_AUDIO_RATE);
    float *x = malloc((size_t)n * sizeof *x);
    uint64_t rng = 7;
    for (int64_t i = 0; x && i < n; i++) x[i] = 0.3f * sinf(0.05f * (float)(i % 1000)) + 0.05f * (plume_rng_float(&rng) - 0.5f);
    plume_audio *a = NULL;
    plume_embd *e = NULL;
    double t[101];
    int rc = x ? plume_audio_from_pcm(&a, x, n, PLUME_AUDIO_RATE, &err) : plume_fail(&err, PLUME_ENOMEM, "out of memory");
    int32_t tokens = 0;
    for (int64_t r = 0; !rc && r <= reps; r++) { /* run 0: cold */
        double t0 = plume_now();
        rc = plume_audio_encode(&e, m, a, &err);
        t[r] = plume_now() - t0;
        if (!rc) tokens = plume_embd_n_tokens(e);
        plume_embd_free(e);
        e = NULL;
    }
    if (!rc) {
        stat3 T = summarize(t + 1, (int)reps);
        if (json)
            printf("{\"model\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"audio_seconds\": %.2f, \"tokens\": %d, "
                   "\"encode_s\": %.3f, \"encode_s_min\": %.3f, \"encode_s_max\": %.3f, \"encode_s_cold\": %.3f, "
                   "\"real_time_factor\": %.4f}\n",
                   model, plume_model_isa(m), plume_model_n_threads(m), secs, tokens, T.med, T.lo, T.hi, t[0], T.med / secs);
        else {
            printf("| %s, %s kernels, %d threads, %lld reps | median | min .. max |\n|---|---|---|\n", model, plume_model_isa(m),
                   plume_model_n_threads(m), (long long)reps);
            printf("| audio encode, %.1f s clip (%d tokens), s | %.3f | %.3f .. %.3f |\n", secs, tokens, T.med, T.lo, T.hi);
            printf("| ... the first (cold) encode, s | %.3f | |\n", t[0]);
            printf("| ... real-time factor (encode time / audio time) | %.4f | %.4f .. %.4f |\n", T.med / secs, T.lo / secs,
                   T.hi / secs);
            printf("| ... soft tokens per second | %.0f | |\n", tokens / T.med);
        }
    }
    plume_audio_free(a);
    plume_model_free(m);
    free(x);
    return rc ? cli_lib_error_free(err) : 0;
}

/* ---- video: decode and encode -------------------------------------------------------- */

/* plume bench --video FILE: per round the file's decode (every frame counted, the 32 sampled
 * converted and resized; plume_video_load) and then the vision tower on the sampled frames
 * (plume_video_encode), one cold round first; the medians and ranges. */
static int video_bench(const char *model, const char *isa, int32_t threads, const char *path, int64_t reps, int json) {
    char *err = NULL;
    plume_model *m;
    plume_model_params mp = bench_model_params(isa, threads, 1);
    if (plume_model_open(&m, model, &mp, &err)) return cli_lib_error_free(err);
    if (!plume_model_has_vision(m)) {
        plume_model_free(m);
        return cli_error("bench: this bundle has no vision tower (plume synth --config e2b makes one)");
    }
    double td[101], te[101];
    int rc = 0;
    int32_t tokens = 0, frames = 0, decoded = 0, w = 0, h = 0;
    char format[64] = "";
    plume_video_params vp = plume_video_default_params();
    vp.n_threads = threads;
    for (int64_t r = 0; !rc && r <= reps; r++) { /* round 0: cold */
        plume_video *v = NULL;
        plume_embd *e = NULL;
        double t0 = plume_now();
        rc = plume_video_load(&v, path, &vp, &err);
        double t1 = plume_now();
        if (!rc) rc = plume_video_encode(&e, m, v, &err);
        td[r] = t1 - t0;
        te[r] = plume_now() - t1;
        if (!rc) {
            tokens = plume_embd_n_tokens(e), frames = plume_video_n_frames(v), decoded = plume_video_n_decoded(v);
            w = plume_video_width(v), h = plume_video_height(v);
            snprintf(format, sizeof format, "%s", plume_video_format(v));
        }
        plume_embd_free(e);
        plume_video_free(v);
    }
    if (!rc) {
        stat3 D = summarize(td + 1, (int)reps), E = summarize(te + 1, (int)reps);
        if (json)
            printf("{\"model\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"video\": \"%s\", \"format\": \"%s\", "
                   "\"width\": %d, \"height\": %d, \"frames\": %d, \"sampled\": %d, \"tokens\": %d, \"decode_s\": %.3f, "
                   "\"decode_s_min\": %.3f, \"decode_s_max\": %.3f, \"encode_s\": %.3f, \"encode_s_min\": %.3f, "
                   "\"encode_s_max\": %.3f, \"decode_s_cold\": %.3f, \"encode_s_cold\": %.3f}\n",
                   model, plume_model_isa(m), plume_model_n_threads(m), path, format, w, h, decoded, frames, tokens, D.med, D.lo,
                   D.hi, E.med, E.lo, E.hi, td[0], te[0]);
        else {
            printf("| %s, %s kernels, %d threads, %lld reps | median | min .. max |\n|---|---|---|\n", model,
                   plume_model_isa(m), plume_model_n_threads(m), (long long)reps);
            printf("| video decode (%s, %d x %d, %d frames counted, %d sampled and resized), s | %.3f | %.3f .. %.3f |\n",
                   format, w, h, decoded, frames, D.med, D.lo, D.hi);
            printf("| video encode (%d frames through the vision tower, %d soft tokens), s | %.3f | %.3f .. %.3f |\n", frames,
                   tokens, E.med, E.lo, E.hi);
            printf("| ... the first (cold) decode, encode, s | %.3f, %.3f | |\n", td[0], te[0]);
        }
    }
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}

#define BENCH_MAX_REPS 100 /* -r */
#define BENCH_MAX_LIST 8   /* counts of --batch, depths of --depth */

/* What one run measures: the flags. */
typedef struct {
    const char *model, *isa;
    int64_t n_prompt, n_gen, threads, reps, history, kv_bits;
    int json, exact, spec;
    int threads_profile;     /* --threads-profile */
    float audio_secs;        /* --audio: only the audio tower's encode of a clip this long */
    int image;               /* --image: only the vision tower's costs */
    const char *video;       /* --video FILE: only its decode and encode */
    int64_t image_tokens;    /* --image-tokens: its token budget (0: the model's default) */
    const char *schema;      /* --json-schema: only the constraint's cost per step */
    const char *tokenizer;   /* --tokenizer: for it, when the bundle has none */
    const char *drafter;     /* --drafter: only the MTP drafter's decode against plain */
    double rates[8];         /* --accept-rate */
    int32_t n_rates;
    int64_t draft;           /* --draft */
    int draft_fixed;         /* --draft-fixed: the drafter drafts --draft every round */
    float temp;              /* --temp (its sampler), default 1 */
    int64_t top_k;           /* --top-k (its sampler), -1: the default */
    int32_t *batch, n_batch; /* --batch: sessions per step */
    int32_t *depth, n_depth; /* --depth: history positions before a decode */
} bench_opts;

/* What it measured: a figure per repetition, and the model's facts from the last one. */
typedef struct {
    double load[BENCH_MAX_REPS], pre[BENCH_MAX_REPS], dec[BENCH_MAX_REPS], ttft[BENCH_MAX_REPS];
    double stream[BENCH_MAX_REPS], share[BENCH_MAX_REPS];            /* GB/s, decode / limit */
    double follow_short[BENCH_MAX_REPS], follow_long[BENCH_MAX_REPS]; /* --history TTFT, ms */
    double batch[BENCH_MAX_LIST][BENCH_MAX_REPS], depth[BENCH_MAX_LIST][BENCH_MAX_REPS]; /* tok/s */
    double anon, huge, decode_bytes, peak, bw;
    const char *layout; /* of the q8/q4 weights: rows, tiles, tiles-unpacked */
    char isa[32], weights[8];
    int32_t nth;
} bench_figures;

/* Parse the flags into o. -1: go on; else the exit status (help printed, or an error). */
static int bench_parse(bench_opts *o, int argc, char **argv) {
    *o = (bench_opts){.n_prompt = 512, .n_gen = 128, .reps = 3, .kv_bits = 32, .temp = 1.0f, .top_k = -1, .draft = 3,
                      .rates = {0.5, 0.7, 0.9}, .n_rates = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(bench_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) o->model = argv[++i];
        else if (!strcmp(a, "--isa") && more) o->isa = argv[++i];
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--exact")) o->exact = 1;
        else if (!strcmp(a, "--spec")) o->spec = 1;
        else if (!strcmp(a, "--threads-profile")) o->threads_profile = 1;
        else if (!strcmp(a, "--image")) o->image = 1;
        else if (!strcmp(a, "--video") && more) o->video = argv[++i];
        else if (!strcmp(a, "--json-schema") && more) o->schema = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) o->tokenizer = argv[++i];
        else if (!strcmp(a, "--drafter") && more) o->drafter = argv[++i];
        else if (!strcmp(a, "--draft-fixed")) o->draft_fixed = 1;
        else if (!strcmp(a, "--draft") && more) { if (cli_int(argv[++i], 1, 63, &o->draft)) return cli_error("bench: --draft wants 1..63"); }
        else if (!strcmp(a, "--accept-rate") && more) {
            char *list = argv[++i], *end;
            o->n_rates = 0;
            for (char *p = list; *p;) {
                double v = strtod(p, &end);
                if (end == p || !(v >= 0.0 && v <= 1.0) || o->n_rates == 8 || (*end && *end != ','))
                    return cli_error("bench: --accept-rate wants up to 8 comma-separated rates in [0, 1]");
                o->rates[o->n_rates++] = v;
                p = *end ? end + 1 : end;
            }
            if (!o->n_rates) return cli_error("bench: --accept-rate wants up to 8 comma-separated rates in [0, 1]");
        }
        else if (!strcmp(a, "--temp") && more) { if (cli_float(argv[++i], &o->temp) || o->temp < 0) return cli_error("bench: --temp wants a number >= 0"); }
        else if (!strcmp(a, "--top-k") && more) { if (cli_int(argv[++i], 0, 1 << 24, &o->top_k)) return cli_error("bench: --top-k wants an integer >= 0"); }
        else if (!strcmp(a, "--image-tokens") && more) {
            if (cli_int(argv[++i], 1, 1120, &o->image_tokens)) return cli_error("bench: --image-tokens wants 70..1120");
        }
        else if (!strcmp(a, "-p") && more) { if (cli_int(argv[++i], 1, 1 << 20, &o->n_prompt)) return cli_error("bench: -p wants a positive integer"); }
        else if (!strcmp(a, "-n") && more) { if (cli_int(argv[++i], 1, 1 << 20, &o->n_gen)) return cli_error("bench: -n wants a positive integer"); }
        else if (!strcmp(a, "-t") && more) { if (cli_int(argv[++i], 1, 1024, &o->threads)) return cli_error("bench: -t wants 1..1024"); }
        else if (!strcmp(a, "--history") && more) { if (cli_int(argv[++i], 1, 1 << 24, &o->history)) return cli_error("bench: --history wants a positive integer"); }
        else if (!strcmp(a, "--batch") && more) {
            free(o->batch);
            if (cli_int_list(argv[++i], 1, 64, BENCH_MAX_LIST, &o->batch, &o->n_batch))
                return cli_error("bench: --batch wants up to 8 comma-separated counts in 1..64");
        }
        else if (!strcmp(a, "--depth") && more) {
            free(o->depth);
            if (cli_int_list(argv[++i], 0, 1 << 20, BENCH_MAX_LIST, &o->depth, &o->n_depth))
                return cli_error("bench: --depth wants up to 8 comma-separated token counts in 0..1048576");
        }
        else if (!strcmp(a, "--kv-bits") && more) {
            if (cli_int(argv[++i], 8, 32, &o->kv_bits) || (o->kv_bits != 8 && o->kv_bits != 32))
                return cli_error("bench: --kv-bits wants 8 or 32");
        }
        else if (!strcmp(a, "--audio") && more) {
            if (cli_float(argv[++i], &o->audio_secs) || !(o->audio_secs >= 0.1f && o->audio_secs <= 600.0f))
                return cli_error("bench: --audio wants seconds in 0.1..600");
        }
        else if (!strcmp(a, "-r") && more) { if (cli_int(argv[++i], 1, BENCH_MAX_REPS, &o->reps)) return cli_error("bench: -r wants 1..100"); }
        else return cli_error("bench: unknown option '%s' (see plume bench --help)", a);
    }
    if (o->draft_fixed && !o->drafter) return cli_error("bench: --draft-fixed goes with --drafter DIR");
    return -1;
}

/* Time to first token of a 32-token follow-up turn after a short (up to 64 tokens) and a long
 * (--history) conversation, into f's follow_short[r] and follow_long[r], on a new session of
 * m (which replaces *s). 0 or a PLUME_E* (message in *err). */
static int bench_followups(const bench_opts *o, plume_model *m, plume_session **s, plume_session_params sp,
                           float *logits, int r, bench_figures *f, uint64_t *rng, char **err) {
    int32_t V = plume_model_n_vocab(m);
    plume_session_free(*s);
    sp.n_ctx = (int32_t)(o->history + 64);
    if (sp.n_ctx < plume_model_n_ctx(m)) sp.n_ctx = plume_model_n_ctx(m);
    int rc = plume_session_new(s, m, &sp, err);
    int32_t *hist = rc ? NULL : malloc((size_t)(o->history + 32) * sizeof *hist);
    for (int64_t i = 0; hist && i < o->history + 32; i++) hist[i] = (int32_t)(plume_rng_next(rng) % (uint64_t)V);
    double *out[2] = {f->follow_short, f->follow_long};
    int64_t lens[2] = {o->history < 64 ? o->history : 64, o->history};
    for (int k = 0; hist && !rc && k < 2; k++) {
        if (!rc) rc = plume_session_rewind(*s, 0, err);
        if (!rc) rc = plume_session_feed(*s, hist, (int32_t)lens[k], NULL, 0, err);
        double t1 = plume_now();
        if (!rc) rc = plume_session_feed(*s, hist + o->history, 32, logits, 0, err);
        out[k][r] = (plume_now() - t1) * 1e3;
    }
    free(hist);
    return rc;
}

/* Repetition r: open the model and a session (load), prefill -p random ids (and the time to
 * the first token), decode -n with the weights streamed right before and after it (the
 * limit), the follow-up turns, and the model's facts. 0, or 1 having printed the error. */
static int bench_rep(const bench_opts *o, int r, bench_figures *f, uint64_t *rng) {
    char *err = NULL;
    plume_model *m;
    plume_session *s;
    plume_model_params mp = bench_model_params(o->isa, (int32_t)o->threads, o->exact);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)(o->n_prompt + o->n_gen + 1);
    sp.kv_bits = (int32_t)o->kv_bits;
    double t0 = plume_now();
    if (plume_model_open(&m, o->model, &mp, &err)) return cli_lib_error_free(err);
    if (sp.n_ctx < plume_model_n_ctx(m)) sp.n_ctx = plume_model_n_ctx(m);
    if (plume_session_new(&s, m, &sp, &err)) { plume_model_free(m); return cli_lib_error_free(err); }
    f->load[r] = (plume_now() - t0) * 1e3;
    int32_t V = plume_model_n_vocab(m);
    int32_t *ids = malloc((size_t)o->n_prompt * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    ids[0] = bench_token(m, "<bos>", 2);
    for (int64_t i = 1; i < o->n_prompt; i++) ids[i] = (int32_t)(plume_rng_next(rng) % (uint64_t)V);
    t0 = plume_now();
    int rc = plume_session_feed(s, ids, (int32_t)o->n_prompt, logits, 0, &err);
    double tp = plume_now() - t0;
    int32_t next = 0;
    for (int32_t v = 1; v < V; v++)
        if (logits[v] > logits[next]) next = v;
    f->ttft[r] = (plume_now() - t0) * 1e3;
    f->pre[r] = (double)o->n_prompt / tp;
    /* The limit of this decode: the weights it reads, streamed right before and after it
     * (the host's bandwidth moves within seconds; a probe minutes away says little). */
    f->stream[r] = plume_model_stream_bandwidth(m, 3, 0, NULL);
    t0 = plume_now();
    for (int64_t i = 0; !rc && i < o->n_gen; i++) {
        rc = plume_session_feed(s, &next, 1, logits, 0, &err);
        next = (int32_t)(plume_rng_next(rng) % (uint64_t)V); /* random ids: speed does not depend on them */
    }
    f->dec[r] = (double)o->n_gen / (plume_now() - t0);
    double after = plume_model_stream_bandwidth(m, 3, 0, NULL);
    if (after > f->stream[r]) f->stream[r] = after;
    f->share[r] = f->stream[r] > 0 ? f->dec[r] * (double)plume_model_decode_bytes(m) / (f->stream[r] * 1e9) : 0;
    if (o->history > 0 && !rc) rc = bench_followups(o, m, &s, sp, logits, r, f, rng, &err);
    double a = status_mb("RssAnon");
    if (a > f->anon) f->anon = a;
    snprintf(f->isa, sizeof f->isa, "%s", plume_model_isa(m));
    snprintf(f->weights, sizeof f->weights, "%s", plume_model_weights(m));
    f->nth = plume_model_n_threads(m);
    f->decode_bytes = (double)plume_model_decode_bytes(m);
    f->huge = plume_model_huge_share(m);
    f->layout = plume_model_layout(m); /* static storage: outlives m */
    free(ids);
    free(logits);
    plume_session_free(s);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}

/* The --batch and --depth sweeps: one model for all counts (depths), interleaved in every
 * repetition. 0, or 1 having printed the error. */
static int bench_sweeps(const bench_opts *o, bench_figures *f, uint64_t *rng) {
    for (int sweep = 0; sweep < 2; sweep++) {
        int32_t n = sweep ? o->n_depth : o->n_batch;
        if (!n) continue;
        char *err = NULL;
        plume_model *m;
        plume_model_params mp = bench_model_params(o->isa, (int32_t)o->threads, o->exact);
        if (plume_model_open(&m, o->model, &mp, &err)) return cli_lib_error_free(err);
        for (int r = 0; r < o->reps; r++)
            for (int k = 0; k < n; k++) {
                double *v = sweep ? &f->depth[k][r] : &f->batch[k][r];
                *v = sweep ? depth_decode(m, o->depth[k], o->n_gen, (int32_t)o->kv_bits, rng)
                           : batch_decode(m, o->batch[k], o->n_gen, rng, NULL);
                if (*v <= 0) {
                    plume_model_free(m);
                    return 1;
                }
            }
        plume_model_free(m);
    }
    return 0;
}

/* ---- --threads-profile ----------------------------------------------------------------- */

/* Print a profile's report (NULL: out of memory) and free it. 0, or 1 having said so. */
static int profile_print(char *report) {
    if (!report) return cli_error("bench: out of memory");
    fputs(report, stdout);
    free(report);
    return 0;
}

/* --threads-profile: one prefill of -p tokens, -n decode steps and each --batch, each
 * recorded and printed. 0, or 1 having printed the error. */
static int bench_threads_profile(const bench_opts *o, uint64_t *rng) {
    char *err = NULL, title[64];
    plume_model *m;
    plume_session *s = NULL;
    plume_prof *prof = NULL;
    plume_model_params mp = bench_model_params(o->isa, (int32_t)o->threads, o->exact);
    if (plume_model_open(&m, o->model, &mp, &err)) return cli_lib_error_free(err);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)(o->n_prompt + o->n_gen + 1);
    sp.kv_bits = (int32_t)o->kv_bits;
    if (sp.n_ctx < plume_model_n_ctx(m)) sp.n_ctx = plume_model_n_ctx(m);
    int32_t V = plume_model_n_vocab(m), *ids = malloc((size_t)o->n_prompt * sizeof *ids), next = bench_token(m, "<bos>", 2);
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = !ids || !logits ? cli_error("bench: out of memory") : plume_session_new(&s, m, &sp, &err);
    for (int64_t i = 0; !rc && i < o->n_prompt; i++) ids[i] = (int32_t)(plume_rng_next(rng) % (uint64_t)V);
    if (!rc) rc = plume_session_feed(s, &next, 1, logits, 0, &err); /* the first step's costs out of the way */
    if (!rc) rc = plume_model_profile_start(m, &prof, &err);
    if (!rc) rc = plume_session_feed(s, ids, (int32_t)o->n_prompt, logits, 0, &err);
    snprintf(title, sizeof title, "prefill of %lld tokens", (long long)o->n_prompt);
    if (prof && profile_print(plume_model_profile_stop(m, prof, 1, title))) rc = PLUME_ENOMEM;
    prof = NULL;
    if (!rc) rc = plume_model_profile_start(m, &prof, &err);
    for (int64_t i = 0; !rc && i < o->n_gen; i++) {
        rc = plume_session_feed(s, &next, 1, logits, 0, &err);
        next = (int32_t)(plume_rng_next(rng) % (uint64_t)V);
    }
    if (prof && profile_print(plume_model_profile_stop(m, prof, o->n_gen, "decode, one session"))) rc = PLUME_ENOMEM;
    plume_session_free(s);
    for (int k = 0; !rc && k < o->n_batch; k++) {
        char *report = NULL;
        if (batch_decode(m, o->batch[k], o->n_gen, rng, &report) <= 0) rc = 1;
        else if (profile_print(report)) rc = PLUME_ENOMEM;
    }
    free(ids);
    free(logits);
    plume_model_free(m);
    if (rc && err) return cli_lib_error_free(err);
    return rc ? 1 : 0;
}

/* The figures as JSON lines: the run, then one per batch count and per depth. */
static void bench_print_json(const bench_opts *o, bench_figures *f) {
    int n = (int)o->reps;
    stat3 L = summarize(f->load, n), P = summarize(f->pre, n), D = summarize(f->dec, n), F = summarize(f->ttft, n),
          W = summarize(f->stream, n), R = summarize(f->share, n);
    stat3 FS = {0, 0, 0}, FL = {0, 0, 0};
    if (o->history > 0) {
        FS = summarize(f->follow_short, n);
        FL = summarize(f->follow_long, n);
    }
    double over_probe = f->bw > 0 ? D.med * f->decode_bytes / (f->bw * 1e9) : 0;
    printf("{\"model\": \"%s\", \"weights\": \"%s\", \"isa\": \"%s\", \"exact\": %d, \"threads\": %d, \"n_prompt\": %lld, "
           "\"n_gen\": %lld, \"reps\": %lld, \"prefill_tok_s\": %.2f, \"prefill_tok_s_min\": %.2f, "
           "\"prefill_tok_s_max\": %.2f, \"decode_tok_s\": %.2f, \"decode_tok_s_min\": %.2f, "
           "\"decode_tok_s_max\": %.2f, \"ttft_ms\": %.1f, \"load_ms\": %.1f, \"peak_rss_mb\": %.1f, "
           "\"anon_rss_mb\": %.1f, \"huge_share\": %.3f, \"layout\": \"%s\", \"bandwidth_gb_s\": %.2f, \"decode_bytes\": %.0f, "
           "\"stream_gb_s\": %.2f, \"decode_roofline\": %.3f, \"decode_roofline_min\": %.3f, "
           "\"decode_roofline_max\": %.3f, \"decode_over_probe\": %.3f, "
           "\"history\": %lld, \"followup_ttft_ms_short\": %.1f, \"followup_ttft_ms_long\": %.1f}\n",
           o->model, f->weights, f->isa, o->exact, f->nth, (long long)o->n_prompt, (long long)o->n_gen, (long long)o->reps,
           P.med, P.lo, P.hi, D.med, D.lo, D.hi, F.med, L.med, f->peak, f->anon, f->huge, f->layout, f->bw,
           f->decode_bytes, W.med, R.med, R.lo, R.hi, over_probe, (long long)o->history, FS.med, FL.med);
    for (int k = 0; k < o->n_batch; k++) {
        stat3 B = summarize(f->batch[k], n);
        printf("{\"batch\": %lld, \"aggregate_decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f}\n",
               (long long)o->batch[k], B.med, B.lo, B.hi);
    }
    for (int k = 0; k < o->n_depth; k++) {
        stat3 S = summarize(f->depth[k], n);
        printf("{\"depth\": %lld, \"kv_bits\": %lld, \"decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f}\n",
               (long long)o->depth[k], (long long)o->kv_bits, S.med, S.lo, S.hi);
    }
}

/* The --batch and --depth rows of the table. */
static void bench_print_sweeps(const bench_opts *o, bench_figures *f) {
    int n = (int)o->reps;
    double one = 0;
    for (int k = 0; k < o->n_batch; k++) {
        double meds[BENCH_MAX_REPS];
        memcpy(meds, f->batch[k], sizeof(double) * (size_t)n);
        stat3 B = summarize(meds, n);
        if (o->batch[k] == 1) one = B.med;
        printf("| %lld sessions in one batch, aggregate decode tok/s | %.2f | %.2f .. %.2f |\n",
               (long long)o->batch[k], B.med, B.lo, B.hi);
        if (one > 0 && o->batch[k] > 1) printf("| ... over one session | %.2fx | |\n", B.med / one);
    }
    double shallow = 0;
    for (int k = 0; k < o->n_depth; k++) {
        stat3 S = summarize(f->depth[k], n);
        if (k == 0) shallow = S.med;
        printf("| decode %lld tokens after %lld of history%s, tok/s | %.2f | %.2f .. %.2f |\n", (long long)o->n_gen,
               (long long)o->depth[k], o->kv_bits == 8 ? " (int8 KV)" : "", S.med, S.lo, S.hi);
        if (k > 0 && shallow > 0) printf("| ... over depth %lld | %.0f%% | |\n", (long long)o->depth[0], 100 * S.med / shallow);
    }
}

/* The figures as a Markdown table: median and range of each. */
static void bench_print_table(const bench_opts *o, bench_figures *f) {
    int n = (int)o->reps;
    stat3 L = summarize(f->load, n), P = summarize(f->pre, n), D = summarize(f->dec, n), F = summarize(f->ttft, n),
          W = summarize(f->stream, n), R = summarize(f->share, n);
    double over_probe = f->bw > 0 ? D.med * f->decode_bytes / (f->bw * 1e9) : 0;
    printf("| %s, %s weights, %s kernels%s, %d threads, %lld reps | median | min .. max |\n|---|---|---|\n", o->model,
           f->weights, f->isa, o->exact ? " (exact)" : "", f->nth, (long long)o->reps);
    printf("| load (open to ready), ms | %.1f | %.1f .. %.1f |\n", L.med, L.lo, L.hi);
    printf("| prefill %lld tokens, tok/s | %.1f | %.1f .. %.1f |\n", (long long)o->n_prompt, P.med, P.lo, P.hi);
    printf("| time to first token, ms | %.1f | %.1f .. %.1f |\n", F.med, F.lo, F.hi);
    printf("| decode %lld tokens, tok/s | %.2f | %.2f .. %.2f |\n", (long long)o->n_gen, D.med, D.lo, D.hi);
    printf("| peak RSS, MB | %.1f | |\n| anonymous RSS, MB | %.1f | |\n", f->peak, f->anon);
    printf("| weights mapped by huge pages | %.0f%% | |\n", f->huge * 100);
    printf("| weights layout | %s | %s |\n", f->layout,
           strcmp(f->layout, "tiles-unpacked") ? ""
                                               : "these kernels read rows: each group is unpacked first (slow); "
                                                 "plume convert --layout rows for this CPU");
    printf("| read bandwidth (%d threads, 1 GiB, at the end), GB/s | %.1f | |\n", f->nth, f->bw);
    printf("| weights streamed around each decode (%d threads), GB/s | %.1f | %.1f .. %.1f |\n", f->nth, W.med, W.lo,
           W.hi);
    printf("| weights read per decode step, MB | %.1f | |\n", f->decode_bytes / 1e6);
    printf("| decode / bandwidth limit (the weights streamed around it) | %.0f%% | %.0f%% .. %.0f%% |\n", R.med * 100,
           R.lo * 100, R.hi * 100);
    printf("| decode / the 1 GiB probe | %.0f%% | (limit %.1f tok/s) |\n", over_probe * 100,
           f->bw * 1e9 / f->decode_bytes);
    if (o->history > 0) {
        stat3 FS = summarize(f->follow_short, n), FL = summarize(f->follow_long, n);
        printf("| follow-up turn (32 tokens) after %lld tokens, TTFT ms | %.1f | %.1f .. %.1f |\n",
               (long long)(o->history < 64 ? o->history : 64), FS.med, FS.lo, FS.hi);
        printf("| follow-up turn (32 tokens) after %lld tokens, TTFT ms | %.1f | %.1f .. %.1f |\n",
               (long long)o->history, FL.med, FL.lo, FL.hi);
    }
    bench_print_sweeps(o, f);
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = bench_parse(&o, argc, argv);
    bench_figures *f = rc < 0 ? calloc(1, sizeof *f) : NULL;
    if (rc < 0 && !f) rc = cli_error("bench: out of memory");
    if (rc < 0 && !(o.model = cli_model_path(o.model))) rc = 1;
    if (rc < 0 && o.audio_secs > 0) rc = audio_bench(o.model, o.isa, (int32_t)o.threads, o.audio_secs, o.reps, o.json);
    if (rc < 0 && o.schema) {
        bench_constraint_opts co = {o.model, o.schema, o.tokenizer, o.isa, (int32_t)o.threads, o.exact, o.n_gen,
                                    o.reps, o.temp, o.top_k, o.json};
        rc = bench_constraint_costs(&co);
    }
    if (rc < 0 && o.video) rc = video_bench(o.model, o.isa, (int32_t)o.threads, o.video, o.reps, o.json);
    if (rc < 0 && o.drafter) {
        bench_drafter_opts bo = {o.model, o.drafter, o.isa, (int32_t)o.threads, o.exact, (int32_t)o.draft, o.json,
                                 o.n_prompt, o.n_gen, o.reps, {0}, o.n_rates, o.draft_fixed};
        memcpy(bo.rates, o.rates, sizeof bo.rates);
        rc = bench_drafter_costs(&bo);
    }
    if (rc < 0 && o.image && o.reps > 16) rc = cli_error("bench: --image takes -r up to 16");
    if (rc < 0 && o.image)
        rc = image_costs(o.model, o.isa, (int32_t)o.threads, o.exact, o.reps, (int32_t)o.image_tokens, o.json);
    uint64_t rng = 12345;
    for (int r = 0; rc < 0 && r < o.reps; r++)
        if (bench_rep(&o, r, f, &rng)) rc = 1;
    if (rc < 0 && bench_sweeps(&o, f, &rng)) rc = 1;
    if (rc < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        f->peak = (double)ru.ru_maxrss / 1024.0;
        f->bw = plume_memory_bandwidth(f->nth, (size_t)1 << 30, 5);
        if (o.json) bench_print_json(&o, f);
        else bench_print_table(&o, f);
        rc = o.spec ? spec_step_costs(o.model, o.isa, f->nth, o.exact, o.reps, o.json) : 0;
        if (!rc && o.threads_profile) rc = bench_threads_profile(&o, &rng);
    }
    free(o.batch);
    free(o.depth);
    free(f);
    return rc;
}
