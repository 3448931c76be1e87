/* cmd_bench.c -- `plume bench`: load time, prefill and decode speed, time to first token,
 * memory, the machine's read bandwidth and decode as a fraction of the bandwidth limit.
 * Several repetitions; the median and the spread (min..max) of each figure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"
#include "common.h"
#include "model.h"
#include "pool.h"

static const char bench_usage[] =
    "usage: plume bench [-m BUNDLE] [-p 512] [-n 128] [-t THREADS] [-r 3] [--isa NAME] [--json]\n"
    "                   [--exact] [--history N] [--batch 1,2,4,8] [--spec] [--depth 0,4096,16384]\n"
    "                   [--kv-bits 8] [--json-schema FILE [--temp T] [--top-k K] [--tokenizer FILE]]\n"
    "  Measure on random token ids: bundle open to ready (load), prefill of -p tokens, time to\n"
    "  first token, decode of -n tokens, peak and anonymous RSS, the read bandwidth of all\n"
    "  threads streaming the weights right before and after each decode, and decode speed over\n"
    "  that limit (bytes of weights a decode step reads / bandwidth; also over a 1 GiB buffer\n"
    "  streamed at the end). -r repetitions; median and min..max are reported.\n"
    "  --exact       float32 activations (q8/q4 bundles take int8 activations by default)\n"
    "  --history N   also: time to first token of a 32-token follow-up turn after a conversation\n"
    "                of N tokens (the session keeps its cache: it must not grow with N)\n"
    "  --spec        also: the time of a step of T = 2, 3, 4, 5, 8 tokens over a 1-token step at a\n"
    "                decode position, and the speed-up speculative decoding drafting T - 1 tokens\n"
    "                would give at 30%, 50% and 70% acceptance (docs/SPECULATIVE.md)\n"
    "  --json-schema FILE  instead: the cost of holding decode to the schema (docs/STRUCTURED.md):\n"
    "                -n steps of a chat answer per repetition, each sampled twice from the same\n"
    "                logits, without and with a fresh constraint (its masks made as the answer\n"
    "                goes); the constraint's cost per step (constrained sample + accept, less the\n"
    "                plain sample, in the thread's CPU time), median and worst, against the median\n"
    "                decode step (wall time). --temp and\n"
    "                --top-k set the sampler (default: the model's, top-k 64; --temp 0 greedy);\n"
    "                --tokenizer: a tokenizer.bin or tokenizer.json for a bundle made without one\n";

/* ---- memory bandwidth ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *buf;
    size_t n;        /* bytes: PLUME_STREAM_SPANS spans of n / PLUME_STREAM_SPANS */
    uint64_t sink[64];
} bw_task;

/* Pieces [a, b) of 1 MiB of each span, the spans side by side (plume_stream_sum). */
static void bw_range(void *ctx, int32_t ith, int64_t a, int64_t b) {
    bw_task *t = ctx;
    const size_t span = t->n / PLUME_STREAM_SPANS, piece = (size_t)1 << 20;
    for (int64_t i = a; i < b; i++) {
        const void *p[PLUME_STREAM_SPANS];
        for (int s = 0; s < PLUME_STREAM_SPANS; s++) p[s] = t->buf + (size_t)s * span + (size_t)i * piece;
        t->sink[ith % 64] ^= plume_stream_sum(p, PLUME_STREAM_SPANS, piece);
    }
}

/* Best of several passes of all threads reading a 1 GiB buffer, in GB/s. */
static double bandwidth(int32_t threads) {
    size_t bytes = (size_t)1 << 30;
    uint8_t *buf = plume_alloc(bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes); /* touch every page */
    plume_pool *pool = plume_pool_new(threads);
    bw_task t = {.buf = buf, .n = bytes};
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = plume_now();
        plume_pool_for(pool, (int64_t)(bytes / PLUME_STREAM_SPANS >> 20), 1, bw_range, &t);
        double gbs = (double)bytes / (plume_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    plume_pool_free(pool);
    plume_dealloc(buf);
    return best;
}

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
 * 16-token prompt each; 0 on error (printed). */
static double batch_decode(plume_model *m, int32_t n, int64_t n_gen, uint64_t *rng) {
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
    double t0 = plume_now();
    for (int64_t g = 0; !rc && g < n_gen; g++) {
        for (int32_t k = 0; !rc && k < n; k++) {
            rc = plume_batch_add(b, s[k], &next[k], 1, k == 0 ? logits : NULL, 0, &err) < 0;
            next[k] = (int32_t)(plume_rng_next(rng) % (uint64_t)V); /* speed does not depend on the ids */
        }
        if (!rc) rc = plume_batch_run(b, &err);
    }
    double tok_s = (double)n * (double)n_gen / (plume_now() - t0);
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
        return cli_lib_error(err);
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
        return err ? cli_lib_error(err) : cli_error("bench: out of memory");
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

/* ---- decode at depth ------------------------------------------------------------------- */

/* Decode tok/s of n_gen tokens after depth positions of history: the caches are filled with
 * pseudo-random K/V rows (plume_session_fill_random) instead of a prefill, which would take
 * minutes at 32K tokens; one untimed step first. 0 on error (printed). */
static double depth_decode(plume_model *m, int64_t depth, int64_t n_gen, int32_t kv_bits, uint64_t *rng) {
    plume_session *s = NULL;
    char *err = NULL;
    int32_t V = plume_model_n_vocab(m), next = 2;
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

/* ---- structured outputs: the constraint's cost per step ------------------------------- */

/* CPU seconds of the calling thread: the sampler and the constraint run there alone, so on a
 * shared machine a preemption does not count against them (wall time would). */
static double thread_cpu(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)) return plume_now();
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The cost of a constraint per decode step on model (see the usage). Steps are a chat answer
 * whose ids the constrained sampler picks; an answer that ends starts over (a new turn in
 * the same session, the constraint reset). 0, or 1 on error (printed). */
static int constraint_costs(const char *model, const char *schema_path, const char *tok_path, const char *isa,
                            int32_t threads, int exact, int64_t n_gen, int64_t reps, float temp, int64_t top_k, int json) {
    char *err = NULL, *schema = NULL;
    size_t schema_len = 0;
    if (plume_read_file(schema_path, &schema, &schema_len, &err)) return cli_lib_error(err);
    plume_model_params mp = bench_model_params(isa, threads, exact);
    plume_model *m = NULL;
    plume_vocab *v = NULL;
    if (plume_model_open(&m, model, &mp, &err)) { free(schema); return cli_lib_error(err); }
    plume_tokenizer *own = NULL;
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    if (tok_path) {
        size_t tl = strlen(tok_path);
        int rc = tl > 5 && !strcmp(tok_path + tl - 5, ".json") ? plume_tokenizer_open_json(&own, tok_path, &err)
                                                                  : plume_tokenizer_open(&own, tok_path, &err);
        if (rc) { free(schema); plume_model_free(m); return cli_lib_error(err); }
        tok = own;
    }
    if (!tok || plume_tokenizer_n_vocab(tok) != plume_model_n_vocab(m)) {
        free(schema);
        plume_tokenizer_free(own);
        plume_model_free(m);
        return cli_error("bench: %s", tok ? "the tokenizer's vocabulary is not the model's" : "the bundle has no tokenizer: give one with --tokenizer");
    }
    double t0 = plume_now();
    if (plume_vocab_new(&v, tok, &err)) { free(schema); plume_tokenizer_free(own); plume_model_free(m); return cli_lib_error(err); }
    double vocab_ms = (plume_now() - t0) * 1e3;
    int32_t V = plume_model_n_vocab(m), ids[512], n_prompt;
    plume_chat_message msg = {"user", "Describe a person as JSON."};
    char *prompt = NULL;
    if (plume_chat_render(&msg, 1, 1, 0, &prompt, &err)) {
        free(schema);
        plume_vocab_free(v);
        plume_tokenizer_free(own);
        plume_model_free(m);
        return cli_lib_error(err);
    }
    n_prompt = plume_tokenize(tok, prompt, strlen(prompt), ids, 512);
    free(prompt);
    int64_t total = n_gen * reps;
    double *step = malloc((size_t)total * sizeof *step), *plain = malloc((size_t)total * sizeof *plain);
    double *cost = malloc((size_t)total * sizeof *cost), *compile = malloc((size_t)reps * sizeof *compile);
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = !step || !plain || !cost || !compile || !logits || n_prompt <= 0 || n_prompt > 512;
    int64_t k = 0, answers = 0;
    for (int64_t r = 0; r < reps && !rc; r++) {
        plume_session *s = NULL;
        plume_sampler *a = NULL, *b = NULL;
        plume_constraint *c = NULL;
        plume_session_params sp = plume_session_default_params();
        sp.n_ctx = (int32_t)(n_prompt + n_gen + 8);
        plume_sampler_params pp = plume_sampler_default_params();
        pp.seed = 1000 + (uint64_t)r;
        pp.temperature = temp;
        if (top_k >= 0) pp.top_k = (int32_t)top_k;
        t0 = plume_now();
        rc = plume_constraint_new_json_schema(&c, v, schema, schema_len, NULL, &err);
        compile[r] = (plume_now() - t0) * 1e3;
        if (!rc) rc = plume_session_new(&s, m, &sp, &err) || plume_sampler_new(&a, &pp, V, &err) ||
                      plume_sampler_new(&b, &pp, V, &err) || plume_session_feed(s, ids, n_prompt, logits, 0, &err);
        for (int32_t i = 0; !rc && i < n_prompt; i++) { plume_sampler_accept(a, ids[i]); plume_sampler_accept(b, ids[i]); }
        if (!rc) plume_sampler_set_constraint(b, c);
        for (int64_t g = 0; !rc && g < n_gen; g++, k++) {
            double t1 = thread_cpu();
            int32_t free_id = plume_sampler_sample(a, logits); /* what decoding costs without */
            double t2 = thread_cpu();
            int32_t id = plume_sampler_sample(b, logits);
            if (id >= 0) plume_sampler_accept(b, id);
            double t3 = thread_cpu();
            plain[k] = (t2 - t1) * 1e3;
            cost[k] = ((t3 - t2) - (t2 - t1)) * 1e3;
            if (id < 0 || free_id < 0) { rc = 1; err = plume_sprintf("sampling failed at step %lld", (long long)g); break; }
            plume_sampler_accept(a, id);
            if (plume_constraint_status(c) == PLUME_CONSTRAINT_DONE) { plume_constraint_reset(c); answers++; }
            t1 = plume_now();
            rc = plume_session_feed(s, &id, 1, logits, 0, &err);
            step[k] = (plume_now() - t1) * 1e3;
        }
        plume_sampler_free(a);
        plume_sampler_free(b);
        plume_constraint_free(c);
        plume_session_free(s);
    }
    if (rc) {
        free(step); free(plain); free(cost); free(compile); free(logits); free(schema);
        plume_vocab_free(v);
        plume_tokenizer_free(own);
        plume_model_free(m);
        return err ? cli_lib_error(err) : cli_error("bench: out of memory");
    }
    double worst_cost = 0;
    for (int64_t i = 0; i < k; i++) worst_cost = cost[i] > worst_cost ? cost[i] : worst_cost;
    stat3 S = summarize(step, (int)k), P = summarize(plain, (int)k), C = summarize(cost, (int)k),
          K = summarize(compile, (int)reps);
    if (json)
        printf("{\"model\": \"%s\", \"schema\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"steps\": %lld, "
               "\"answers_ended\": %lld, \"vocab_ms\": %.1f, \"compile_ms\": %.2f, \"step_ms\": %.2f, \"step_ms_max\": %.2f, "
               "\"sample_ms\": %.3f, \"constraint_ms\": %.3f, \"constraint_ms_max\": %.3f, \"constraint_share\": %.4f, "
               "\"constraint_share_worst\": %.4f}\n",
               model, schema_path, plume_model_isa(m), plume_model_n_threads(m), (long long)k, (long long)answers,
               vocab_ms, K.med, S.med, S.hi, P.med, C.med, worst_cost, C.med / S.med, worst_cost / S.med);
    else {
        printf("| %s, %s, %s kernels, %d threads: %lld steps, %lld answers ended | median | min .. max |\n|---|---|---|\n",
               model, schema_path, plume_model_isa(m), plume_model_n_threads(m), (long long)k, (long long)answers);
        printf("| vocabulary index (once per tokenizer), ms | %.1f | |\n", vocab_ms);
        printf("| schema -> constraint, ms | %.2f | %.2f .. %.2f |\n", K.med, K.lo, K.hi);
        printf("| decode step (forward), ms | %.2f | %.2f .. %.2f |\n", S.med, S.lo, S.hi);
        printf("| sample, no constraint, ms (thread CPU) | %.3f | %.3f .. %.3f |\n", P.med, P.lo, P.hi);
        printf("| constraint per step (sample + accept, less the plain sample), ms (thread CPU) | %.3f | %.3f .. %.3f |\n",
               C.med, C.lo, C.hi);
        printf("| ... over the median decode step | %.2f%% | worst step %.1f%% |\n", 100 * C.med / S.med,
               100 * worst_cost / S.med);
    }
    free(step); free(plain); free(cost); free(compile); free(logits); free(schema);
    plume_vocab_free(v);
    plume_tokenizer_free(own);
    plume_model_free(m);
    return 0;
}

/* ---- plume bench ----------------------------------------------------------------------- */

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *isa = NULL, *schema = NULL, *tok_path = NULL;
    int64_t n_prompt = 512, n_gen = 128, threads = 0, reps = 3, top_k = -1;
    float temp = 1.0f;
    int json = 0, exact = 0, spec = 0;
    int64_t history = 0, batch[8], depth[8], kv_bits = 32;
    int n_batch = 0, n_depth = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(bench_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) model = argv[++i];
        else if (!strcmp(a, "--isa") && more) isa = argv[++i];
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--exact")) exact = 1;
        else if (!strcmp(a, "--spec")) spec = 1;
        else if (!strcmp(a, "--json-schema") && more) schema = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) tok_path = argv[++i];
        else if (!strcmp(a, "--temp") && more) { if (cli_float(argv[++i], &temp) || temp < 0) return cli_error("bench: --temp wants a number >= 0"); }
        else if (!strcmp(a, "--top-k") && more) { if (cli_int(argv[++i], 0, 1 << 24, &top_k)) return cli_error("bench: --top-k wants an integer >= 0"); }
        else if (!strcmp(a, "-p") && more) { if (cli_int(argv[++i], 1, 1 << 20, &n_prompt)) return cli_error("bench: -p wants a positive integer"); }
        else if (!strcmp(a, "-n") && more) { if (cli_int(argv[++i], 1, 1 << 20, &n_gen)) return cli_error("bench: -n wants a positive integer"); }
        else if (!strcmp(a, "-t") && more) { if (cli_int(argv[++i], 1, 1024, &threads)) return cli_error("bench: -t wants 1..1024"); }
        else if (!strcmp(a, "--history") && more) { if (cli_int(argv[++i], 1, 1 << 24, &history)) return cli_error("bench: --history wants a positive integer"); }
        else if (!strcmp(a, "--batch") && more) {
            char list[128], *save = NULL;
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *tk = strtok_r(list, ",", &save); tk; tk = strtok_r(NULL, ",", &save))
                if (n_batch == 8 || cli_int(tk, 1, 64, &batch[n_batch++]))
                    return cli_error("bench: --batch wants up to 8 comma-separated counts in 1..64");
            if (!n_batch) return cli_error("bench: --batch wants up to 8 comma-separated counts in 1..64");
        }
        else if (!strcmp(a, "--depth") && more) {
            char list[128], *save = NULL;
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *tk = strtok_r(list, ",", &save); tk; tk = strtok_r(NULL, ",", &save))
                if (n_depth == 8 || cli_int(tk, 0, 1 << 20, &depth[n_depth++]))
                    return cli_error("bench: --depth wants up to 8 comma-separated token counts in 0..1048576");
            if (!n_depth) return cli_error("bench: --depth wants up to 8 comma-separated token counts in 0..1048576");
        }
        else if (!strcmp(a, "--kv-bits") && more) {
            if (cli_int(argv[++i], 8, 32, &kv_bits) || (kv_bits != 8 && kv_bits != 32))
                return cli_error("bench: --kv-bits wants 8 or 32");
        }
        else if (!strcmp(a, "-r") && more) { if (cli_int(argv[++i], 1, 100, &reps)) return cli_error("bench: -r wants 1..100"); }
        else return cli_error("bench: unknown option '%s' (see plume bench --help)", a);
    }
    model = cli_model_path(model);
    if (!model) return 1;
    if (schema) return constraint_costs(model, schema, tok_path, isa, (int32_t)threads, exact, n_gen, reps, temp, top_k, json);
    double load[100], pre[100], dec[100], ttft[100], stream[100], share[100];
    double anon = 0, huge = 0, decode_bytes = 0, follow_short[100], follow_long[100];
    const char *layout = "rows"; /* of the q8/q4 weights: rows, tiles, tiles-unpacked */
    char isa_name[32] = "", weights[8] = "";
    int32_t nth = 0;
    uint64_t rng = 12345;
    for (int r = 0; r < reps; r++) {
        char *err = NULL;
        plume_model *m;
        plume_session *s;
        plume_model_params mp = bench_model_params(isa, (int32_t)threads, exact);
        plume_session_params sp = plume_session_default_params();
        sp.n_ctx = (int32_t)(n_prompt + n_gen + 1);
        sp.kv_bits = (int32_t)kv_bits;
        double t0 = plume_now();
        if (plume_model_open(&m, model, &mp, &err)) return cli_lib_error(err);
        if (sp.n_ctx < plume_model_n_ctx(m)) sp.n_ctx = plume_model_n_ctx(m);
        if (plume_session_new(&s, m, &sp, &err)) { plume_model_free(m); return cli_lib_error(err); }
        load[r] = (plume_now() - t0) * 1e3;
        int32_t V = plume_model_n_vocab(m);
        int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
        float *logits = malloc((size_t)V * sizeof *logits);
        ids[0] = 2;
        for (int64_t i = 1; i < n_prompt; i++) ids[i] = (int32_t)(plume_rng_next(&rng) % (uint64_t)V);
        t0 = plume_now();
        int rc = plume_session_feed(s, ids, (int32_t)n_prompt, logits, 0, &err);
        double tp = plume_now() - t0;
        int32_t next = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[v] > logits[next]) next = v;
        ttft[r] = (plume_now() - t0) * 1e3;
        pre[r] = (double)n_prompt / tp;
        /* The limit of this decode: the weights it reads, streamed right before and after it
         * (the host's bandwidth moves within seconds; a probe minutes away says little). */
        stream[r] = plume_model_stream_bandwidth(m, 3, 0, NULL);
        t0 = plume_now();
        for (int64_t i = 0; !rc && i < n_gen; i++) {
            rc = plume_session_feed(s, &next, 1, logits, 0, &err);
            next = (int32_t)(plume_rng_next(&rng) % (uint64_t)V); /* random ids: speed does not depend on them */
        }
        dec[r] = (double)n_gen / (plume_now() - t0);
        double after = plume_model_stream_bandwidth(m, 3, 0, NULL);
        if (after > stream[r]) stream[r] = after;
        share[r] = stream[r] > 0 ? dec[r] * (double)plume_model_decode_bytes(m) / (stream[r] * 1e9) : 0;
        if (history > 0 && !rc) { /* follow-up turns after a short and a long history */
            plume_session_free(s);
            sp.n_ctx = (int32_t)(history + 64);
            if (sp.n_ctx < plume_model_n_ctx(m)) sp.n_ctx = plume_model_n_ctx(m);
            rc = plume_session_new(&s, m, &sp, &err);
            int32_t *hist = rc ? NULL : malloc((size_t)(history + 32) * sizeof *hist);
            for (int64_t i = 0; hist && i < history + 32; i++) hist[i] = (int32_t)(plume_rng_next(&rng) % (uint64_t)V);
            double *out[2] = {follow_short, follow_long};
            int64_t lens[2] = {history < 64 ? history : 64, history};
            for (int k = 0; hist && !rc && k < 2; k++) {
                if (!rc) rc = plume_session_rewind(s, 0, &err);
                if (!rc) rc = plume_session_feed(s, hist, (int32_t)lens[k], NULL, 0, &err);
                double t1 = plume_now();
                if (!rc) rc = plume_session_feed(s, hist + history, 32, logits, 0, &err);
                out[k][r] = (plume_now() - t1) * 1e3;
            }
            free(hist);
        }
        double a = status_mb("RssAnon");
        if (a > anon) anon = a;
        snprintf(isa_name, sizeof isa_name, "%s", plume_model_isa(m));
        snprintf(weights, sizeof weights, "%s", plume_model_weights(m));
        nth = plume_model_n_threads(m);
        decode_bytes = (double)plume_model_decode_bytes(m);
        huge = plume_model_huge_share(m);
        if (m->tiles_cols) { /* does this path read the tiles, or unpack them (forward.c)? */
            int native = m->qact_matmul ? plume_qact_reads_tiles(m->qact_matmul) : m->k->reads_tiles;
            layout = native ? "tiles" : "tiles-unpacked";
        }
        free(ids);
        free(logits);
        plume_session_free(s);
        plume_model_free(m);
        if (rc) return cli_lib_error(err);
    }
    double bt[8][100];
    if (n_batch) { /* one model for all counts; the counts interleaved in every repetition */
        char *err = NULL;
        plume_model *m;
        plume_model_params mp = bench_model_params(isa, (int32_t)threads, exact);
        if (plume_model_open(&m, model, &mp, &err)) return cli_lib_error(err);
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < n_batch; k++)
                if ((bt[k][r] = batch_decode(m, (int32_t)batch[k], n_gen, &rng)) <= 0) {
                    plume_model_free(m);
                    return 1;
                }
        plume_model_free(m);
    }
    double dt[8][100];
    if (n_depth) { /* one model for all depths; the depths interleaved in every repetition */
        char *err = NULL;
        plume_model *m;
        plume_model_params mp = bench_model_params(isa, (int32_t)threads, exact);
        if (plume_model_open(&m, model, &mp, &err)) return cli_lib_error(err);
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < n_depth; k++)
                if ((dt[k][r] = depth_decode(m, depth[k], n_gen, (int32_t)kv_bits, &rng)) <= 0) {
                    plume_model_free(m);
                    return 1;
                }
        plume_model_free(m);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double peak = (double)ru.ru_maxrss / 1024.0;
    double bw = bandwidth(nth);
    stat3 L = summarize(load, (int)reps), P = summarize(pre, (int)reps), D = summarize(dec, (int)reps),
          F = summarize(ttft, (int)reps), W = summarize(stream, (int)reps), R = summarize(share, (int)reps);
    stat3 FS = {0, 0, 0}, FL = {0, 0, 0};
    if (history > 0) {
        FS = summarize(follow_short, (int)reps);
        FL = summarize(follow_long, (int)reps);
    }
    double over_probe = bw > 0 ? D.med * decode_bytes / (bw * 1e9) : 0;
    if (json) {
        printf("{\"model\": \"%s\", \"weights\": \"%s\", \"isa\": \"%s\", \"exact\": %d, \"threads\": %d, \"n_prompt\": %lld, "
               "\"n_gen\": %lld, \"reps\": %lld, \"prefill_tok_s\": %.2f, \"prefill_tok_s_min\": %.2f, "
               "\"prefill_tok_s_max\": %.2f, \"decode_tok_s\": %.2f, \"decode_tok_s_min\": %.2f, "
               "\"decode_tok_s_max\": %.2f, \"ttft_ms\": %.1f, \"load_ms\": %.1f, \"peak_rss_mb\": %.1f, "
               "\"anon_rss_mb\": %.1f, \"huge_share\": %.3f, \"layout\": \"%s\", \"bandwidth_gb_s\": %.2f, \"decode_bytes\": %.0f, "
               "\"stream_gb_s\": %.2f, \"decode_roofline\": %.3f, \"decode_roofline_min\": %.3f, "
               "\"decode_roofline_max\": %.3f, \"decode_over_probe\": %.3f, "
               "\"history\": %lld, \"followup_ttft_ms_short\": %.1f, \"followup_ttft_ms_long\": %.1f}\n",
               model, weights, isa_name, exact, nth, (long long)n_prompt, (long long)n_gen, (long long)reps, P.med, P.lo, P.hi,
               D.med, D.lo, D.hi, F.med, L.med, peak, anon, huge, layout, bw, decode_bytes, W.med, R.med, R.lo,
               R.hi, over_probe, (long long)history, FS.med, FL.med);
        for (int k = 0; k < n_batch; k++) {
            stat3 B = summarize(bt[k], (int)reps);
            printf("{\"batch\": %lld, \"aggregate_decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f}\n",
                   (long long)batch[k], B.med, B.lo, B.hi);
        }
        for (int k = 0; k < n_depth; k++) {
            stat3 S = summarize(dt[k], (int)reps);
            printf("{\"depth\": %lld, \"kv_bits\": %lld, \"decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f}\n",
                   (long long)depth[k], (long long)kv_bits, S.med, S.lo, S.hi);
        }
    } else {
        printf("| %s, %s weights, %s kernels%s, %d threads, %lld reps | median | min .. max |\n|---|---|---|\n", model,
               weights, isa_name, exact ? " (exact)" : "", nth, (long long)reps);
        printf("| load (open to ready), ms | %.1f | %.1f .. %.1f |\n", L.med, L.lo, L.hi);
        printf("| prefill %lld tokens, tok/s | %.1f | %.1f .. %.1f |\n", (long long)n_prompt, P.med, P.lo, P.hi);
        printf("| time to first token, ms | %.1f | %.1f .. %.1f |\n", F.med, F.lo, F.hi);
        printf("| decode %lld tokens, tok/s | %.2f | %.2f .. %.2f |\n", (long long)n_gen, D.med, D.lo, D.hi);
        printf("| peak RSS, MB | %.1f | |\n| anonymous RSS, MB | %.1f | |\n", peak, anon);
        printf("| weights mapped by huge pages | %.0f%% | |\n", huge * 100);
        printf("| weights layout | %s | %s |\n", layout,
               strcmp(layout, "tiles-unpacked") ? ""
                                                : "these kernels read rows: each group is unpacked first (slow); "
                                                  "plume convert --layout rows for this CPU");
        printf("| read bandwidth (%d threads, 1 GiB, at the end), GB/s | %.1f | |\n", nth, bw);
        printf("| weights streamed around each decode (%d threads), GB/s | %.1f | %.1f .. %.1f |\n", nth, W.med, W.lo,
               W.hi);
        printf("| weights read per decode step, MB | %.1f | |\n", decode_bytes / 1e6);
        printf("| decode / bandwidth limit (the weights streamed around it) | %.0f%% | %.0f%% .. %.0f%% |\n",
               R.med * 100, R.lo * 100, R.hi * 100);
        printf("| decode / the 1 GiB probe | %.0f%% | (limit %.1f tok/s) |\n", over_probe * 100,
               bw * 1e9 / decode_bytes);
        if (history > 0) {
            printf("| follow-up turn (32 tokens) after %lld tokens, TTFT ms | %.1f | %.1f .. %.1f |\n",
                   (long long)(history < 64 ? history : 64), FS.med, FS.lo, FS.hi);
            printf("| follow-up turn (32 tokens) after %lld tokens, TTFT ms | %.1f | %.1f .. %.1f |\n", (long long)history,
                   FL.med, FL.lo, FL.hi);
        }
        double one = 0;
        for (int k = 0; k < n_batch; k++) {
            double meds[100];
            memcpy(meds, bt[k], sizeof(double) * (size_t)reps);
            stat3 B = summarize(meds, (int)reps);
            if (batch[k] == 1) one = B.med;
            printf("| %lld sessions in one batch, aggregate decode tok/s | %.2f | %.2f .. %.2f |\n",
                   (long long)batch[k], B.med, B.lo, B.hi);
            if (one > 0 && batch[k] > 1) printf("| ... over one session | %.2fx | |\n", B.med / one);
        }
        double shallow = 0;
        for (int k = 0; k < n_depth; k++) {
            stat3 S = summarize(dt[k], (int)reps);
            if (k == 0) shallow = S.med;
            printf("| decode %lld tokens after %lld of history%s, tok/s | %.2f | %.2f .. %.2f |\n", (long long)n_gen,
                   (long long)depth[k], kv_bits == 8 ? " (int8 KV)" : "", S.med, S.lo, S.hi);
            if (k > 0 && shallow > 0) printf("| ... over depth %lld | %.0f%% | |\n", (long long)depth[0], 100 * S.med / shallow);
        }
    }
    return spec ? spec_step_costs(model, isa, nth, exact, reps, json) : 0;
}
