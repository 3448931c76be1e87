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

/* The cost of a constraint per decode step on model (see the usage). Steps are a chat answer
 * whose ids the constrained sampler picks; an answer that ends starts over (a new turn in
 * the same session, the constraint reset). 0, or 1 on error (printed). */
int bench_constraint_costs(const bench_constraint_opts *o) {
    const char *model = o->model, *schema_path = o->schema, *tok_path = o->tokenizer;
    int64_t n_gen = o->n_gen, reps = o->reps, top_k = o->top_k;
    float temp = o->temp;
    char *err = NULL, *schema = NULL;
    size_t schema_len = 0;
    if (plume_read_file(schema_path, &schema, &schema_len, &err)) return cli_lib_error_free(err);
    plume_model_params mp = plume_model_default_params();
    mp.isa = o->isa;
    mp.n_threads = o->threads;
    mp.exact = o->exact;
    plume_model *m = NULL;
    plume_vocab *v = NULL;
    if (plume_model_open(&m, model, &mp, &err)) { free(schema); return cli_lib_error_free(err); }
    plume_tokenizer *own = NULL;
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    if (tok_path) {
        size_t tl = strlen(tok_path);
        int rc = tl > 5 && !strcmp(tok_path + tl - 5, ".json") ? plume_tokenizer_open_json(&own, tok_path, &err)
                                                                  : plume_tokenizer_open(&own, tok_path, &err);
        if (rc) { free(schema); plume_model_free(m); return cli_lib_error_free(err); }
        tok = own;
    }
    if (!tok || plume_tokenizer_n_vocab(tok) != plume_model_n_vocab(m)) {
        free(schema);
        plume_tokenizer_free(own);
        plume_model_free(m);
        return cli_error("bench: %s", tok ? "the tokenizer's vocabulary is not the model's" : "the bundle has no tokenizer: give one with --tokenizer");
    }
    double t0 = plume_now();
    if (plume_vocab_new(&v, tok, &err)) { free(schema); plume_tokenizer_free(own); plume_model_free(m); return cli_lib_error_free(err); }
    double vocab_ms = (plume_now() - t0) * 1e3;
    int32_t V = plume_model_n_vocab(m), ids[512], n_prompt;
    plume_chat_message msg = {"user", "Describe a person as JSON."};
    char *prompt = NULL;
    if (plume_chat_render(&msg, 1, 1, 0, &prompt, &err)) {
        free(schema);
        plume_vocab_free(v);
        plume_tokenizer_free(own);
        plume_model_free(m);
        return cli_lib_error_free(err);
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
        return err ? cli_lib_error_free(err) : cli_error("bench: out of memory");
    }
    double worst_cost = 0;
    for (int64_t i = 0; i < k; i++) worst_cost = cost[i] > worst_cost ? cost[i] : worst_cost;
    cost3 S = cost_summary(step, (int)k), P = cost_summary(plain, (int)k), C = cost_summary(cost, (int)k),
          K = cost_summary(compile, (int)reps);
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
    free(step); free(plain); free(cost); free(compile); free(logits); free(schema);
    plume_vocab_free(v);
    plume_tokenizer_free(own);
    plume_model_free(m);
    return 0;
}
