/* bench_constrain.c -- `plume bench --json-schema FILE`: what holding decode to a schema
 * costs per step (docs/STRUCTURED.md). The same logits are sampled twice per step, without
 * and with a constraint, and the difference is timed in the thread's CPU time; the forward
 * step beside it in wall time. On the public API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common.h"

/* ---- statistics ------------------------------------------------------------------------ */

typedef struct {
    double med, lo, hi;
} cost3;

/* Order doubles for qsort. */
static int cost_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median and range of n > 0 values (sorts them). */
static cost3 cost_summary(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cost_cmp);
    cost3 s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

/* ---- the constraint's cost per step ---------------------------------------------------- */

/* CPU seconds of the calling thread: the sampler and the constraint run there alone, so on a
 * shared machine a preemption does not count against them (wall time would). */
static double thread_cpu(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)) return plume_now();
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What a measurement holds: the model, its tokenizer and vocabulary index, the schema, the
 * prompt, and the figures per step (step, plain, cost: k of them) and per repetition. */
typedef struct {
    char *schema;
    size_t schema_len;
    plume_model *m;
    plume_tokenizer *own; /* --tokenizer's, or NULL: the bundle's */
    const plume_tokenizer *tok;
    plume_vocab *v;
    double vocab_ms;
    int32_t V, ids[512], n_prompt;
    double *step, *plain, *cost, *compile;
    float *logits;
    int64_t k, answers;
} bench_state;

/* Free what st holds (any of it may be missing). */
static void bench_state_free(bench_state *st) {
    free(st->step); free(st->plain); free(st->cost); free(st->compile); free(st->logits); free(st->schema);
    plume_vocab_free(st->v);
    plume_tokenizer_free(st->own);
    plume_model_free(st->m);
}

/* Read the schema, open the model and its tokenizer (the bundle's or --tokenizer's), build
 * the vocabulary index (timed). 0, or 1 on error (printed, what was made freed). */
static int bench_open(const bench_constraint_opts *o, bench_state *st) {
    const char *tok_path = o->tokenizer;
    char *err = NULL;
    if (plume_read_file(o->schema, &st->schema, &st->schema_len, &err)) return cli_lib_error_free(err);
    plume_model_params mp = plume_model_default_params();
    mp.isa = o->isa;
    mp.n_threads = o->threads;
    mp.exact = o->exact;
    if (plume_model_open(&st->m, o->model, &mp, &err)) { bench_state_free(st); return cli_lib_error_free(err); }
    st->tok = plume_model_tokenizer(st->m);
    if (tok_path) {
        size_t tl = strlen(tok_path);
        int rc = tl > 5 && !strcmp(tok_path + tl - 5, ".json") ? plume_tokenizer_open_json(&st->own, tok_path, &err)
                                                                  : plume_tokenizer_open(&st->own, tok_path, &err);
        if (rc) { bench_state_free(st); return cli_lib_error_free(err); }
        st->tok = st->own;
    }
    if (!st->tok || plume_tokenizer_n_vocab(st->tok) != plume_model_n_vocab(st->m)) {
        int bundle = !st->tok;
        bench_state_free(st);
        return cli_error("bench: %s", !bundle ? "the tokenizer's vocabulary is not the model's" : "the bundle has no tokenizer: give one with --tokenizer");
    }
    double t0 = plume_now();
    if (plume_vocab_new(&st->v, st->tok, &err)) { bench_state_free(st); return cli_lib_error_free(err); }
    st->vocab_ms = (plume_now() - t0) * 1e3;
    return 0;
}

/* Render and tokenize the prompt into st->ids. 0, or 1 on error (printed, st freed). */
static int bench_prompt(bench_state *st) {
    plume_chat_message msg = {"user", "Describe a person as JSON."};
    char *prompt = NULL, *err = NULL;
    if (plume_chat_render(&msg, 1, 1, 0, &prompt, &err)) { bench_state_free(st); return cli_lib_error_free(err); }
    st->n_prompt = plume_tokenize(st->tok, prompt, strlen(prompt), st->ids, 512);
    free(prompt);
    return 0;
}

/* Repetition r: a fresh session and constraint (compile timed), then n_gen steps, each
 * sampled plain and constrained (thread CPU) and fed (wall). 0, or nonzero with *err. */
static int bench_rep(const bench_constraint_opts *o, bench_state *st, int64_t r, char **err) {
    plume_session *s = NULL;
    plume_sampler *a = NULL, *b = NULL;
    plume_constraint *c = NULL;
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)(st->n_prompt + o->n_gen + 8);
    plume_sampler_params pp = plume_sampler_default_params();
    pp.seed = 1000 + (uint64_t)r;
    pp.temperature = o->temp;
    if (o->top_k >= 0) pp.top_k = (int32_t)o->top_k;
    double t0 = plume_now();
    int rc = plume_constraint_new_json_schema(&c, st->v, st->schema, st->schema_len, NULL, err);
    st->compile[r] = (plume_now() - t0) * 1e3;
    if (!rc) rc = plume_session_new(&s, st->m, &sp, err) || plume_sampler_new(&a, &pp, st->V, err) ||
                  plume_sampler_new(&b, &pp, st->V, err) || plume_session_feed(s, st->ids, st->n_prompt, st->logits, 0, err);
    for (int32_t i = 0; !rc && i < st->n_prompt; i++) { plume_sampler_accept(a, st->ids[i]); plume_sampler_accept(b, st->ids[i]); }
    if (!rc) plume_sampler_set_constraint(b, c);
    for (int64_t g = 0; !rc && g < o->n_gen; g++, st->k++) {
        int64_t k = st->k;
        double t1 = thread_cpu();
        int32_t free_id = plume_sampler_sample(a, st->logits); /* what decoding costs without */
        double t2 = thread_cpu();
        int32_t id = plume_sampler_sample(b, st->logits);
        if (id >= 0) plume_sampler_accept(b, id);
        double t3 = thread_cpu();
        st->plain[k] = (t2 - t1) * 1e3;
        st->cost[k] = ((t3 - t2) - (t2 - t1)) * 1e3;
        if (id < 0 || free_id < 0) { rc = 1; *err = plume_sprintf("sampling failed at step %lld", (long long)g); break; }
        plume_sampler_accept(a, id);
        if (plume_constraint_status(c) == PLUME_CONSTRAINT_DONE) { plume_constraint_reset(c); st->answers++; }
        t1 = plume_now();
        rc = plume_session_feed(s, &id, 1, st->logits, 0, err);
        st->step[k] = (plume_now() - t1) * 1e3;
    }
    plume_sampler_free(a);
    plume_sampler_free(b);
    plume_constraint_free(c);
    plume_session_free(s);
    return rc;
}

/* Print the figures: one JSON object (--json) or a markdown table. */
static void bench_report(const bench_constraint_opts *o, bench_state *st) {
    const char *model = o->model, *schema_path = o->schema;
    int64_t k = st->k, answers = st->answers;
    plume_model *m = st->m;
    double vocab_ms = st->vocab_ms, worst_cost = 0;
    for (int64_t i = 0; i < k; i++) worst_cost = st->cost[i] > worst_cost ? st->cost[i] : worst_cost;
    cost3 S = cost_summary(st->step, (int)k), P = cost_summary(st->plain, (int)k), C = cost_summary(st->cost, (int)k),
          K = cost_summary(st->compile, (int)o->reps);
    if (o->json)
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
}

/* The cost of a constraint per decode step on model (see the usage). Steps are a chat answer
 * whose ids the constrained sampler picks; an answer that ends starts over (a new turn in
 * the same session, the constraint reset). 0, or 1 on error (printed). */
int bench_constraint_costs(const bench_constraint_opts *o) {
    bench_state st;
    memset(&st, 0, sizeof st);
    if (bench_open(o, &st) || bench_prompt(&st)) return 1;
    int64_t total = o->n_gen * o->reps;
    st.V = plume_model_n_vocab(st.m);
    st.step = malloc((size_t)total * sizeof *st.step);
    st.plain = malloc((size_t)total * sizeof *st.plain);
    st.cost = malloc((size_t)total * sizeof *st.cost);
    st.compile = malloc((size_t)o->reps * sizeof *st.compile);
    st.logits = malloc((size_t)st.V * sizeof *st.logits);
    char *err = NULL;
    int rc = !st.step || !st.plain || !st.cost || !st.compile || !st.logits || st.n_prompt <= 0 || st.n_prompt > 512;
    for (int64_t r = 0; r < o->reps && !rc; r++) rc = bench_rep(o, &st, r, &err);
    if (rc) {
        bench_state_free(&st);
        return err ? cli_lib_error_free(err) : cli_error("bench: out of memory");
    }
    bench_report(o, &st);
    bench_state_free(&st);
    return 0;
}
