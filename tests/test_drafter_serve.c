/* test_drafter_serve.c -- `plume serve` with Gemma 4's MTP drafter (docs/SPECULATIVE.md,
 * docs/SERVER.md): the tiny-a target (q8) with the tiny-mtp-a tracking drafter (q8) inside its
 * bundle, through the real server, against a server that does not draft. */
#include "common.h"
#include "t_serve.h"

static char withd[700], track[700], bad[700];
static server D, N; /* D: the drafter inside the bundle (the default); N: --draft 0 */

/* ---- helpers -------------------------------------------------------------------------------- */

/* The answer of a reply as text for comparing: a whole reply's "choices" (printed), or a
 * stream's content deltas in order (malloc'd; NULL when it is neither). */
static char *answer_of(const char *body) {
    if (strncmp(body, "data: ", 6)) {
        cJSON *root = cJSON_Parse(body);
        char *s = root ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "choices")) : NULL;
        cJSON_Delete(root);
        return s;
    }
    plume_buf acc = {0};
    for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
        const char *end = strstr(p, "\n\n");
        char *line = strndup(p + 6, end ? (size_t)(end - p - 6) : strlen(p + 6));
        cJSON *ev = cJSON_Parse(line), *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ev, "choices"), 0);
        cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "delta"), "content");
        if (cJSON_IsString(d)) plume_buf_puts(&acc, d->valuestring);
        cJSON_Delete(ev);
        free(line);
    }
    plume_buf_put(&acc, "", 1);
    return acc.p;
}

/* The text of a /v1/completions reply (malloc'd), or NULL. */
static char *completion_text(const char *body) {
    cJSON *root = cJSON_Parse(body);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0), "text");
    char *s = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(root);
    return s;
}

/* The reply's timings.draft_n and timings.draft_n_accepted (-1 when absent). */
static void draft_counts(const char *body, int *drafted, int *accepted) {
    cJSON *root = cJSON_Parse(body), *t = cJSON_GetObjectItemCaseSensitive(root, "timings");
    cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "draft_n"), *a = cJSON_GetObjectItemCaseSensitive(t, "draft_n_accepted");
    *drafted = cJSON_IsNumber(d) ? d->valueint : -1;
    *accepted = cJSON_IsNumber(a) ? a->valueint : -1;
    cJSON_Delete(root);
}

/* POST the n bodies to their paths on sv all at once (curl in the background), each reply
 * into out[i] (cap bytes); whether every one answered 200. */
static int post_all(const server *sv, const char *const (*reqs)[2], int n, char (*out)[65536], const char *tag) {
    pid_t pid[16];
    char path[800], cmd[16384];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s-%d.out", tmp, tag, i);
        snprintf(cmd, sizeof cmd,
                 "exec curl -s -N -m 120 -o %s -w '%%{http_code}' -H 'Content-Type: application/json' -d '%s' "
                 "http://127.0.0.1:%d%s > %s.code",
                 path, reqs[i][1], sv->port, reqs[i][0], path);
        pid[i] = spawn_sh(cmd);
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (pid[i] > 0) waitpid(pid[i], &st, 0);
        char code[32] = "";
        snprintf(path, sizeof path, "%s/%s-%d.out.code", tmp, tag, i);
        FILE *f = fopen(path, "r");
        if (f && !fgets(code, sizeof code, f)) code[0] = 0;
        if (f) fclose(f);
        out[i][0] = 0;
        snprintf(path, sizeof path, "%s/%s-%d.out", tmp, tag, i);
        f = fopen(path, "r");
        size_t k = f ? fread(out[i], 1, 65535, f) : 0;
        out[i][k] = 0;
        if (f) fclose(f);
        if (strcmp(code, "200")) ok = 0, printf("  %s request %d: status '%s' %s\n", tag, i, code, out[i]);
    }
    return ok;
}

/* ---- tests ---------------------------------------------------------------------------------- */

#define GBNF_LIST "root ::= \\\"(\\\" [0-9]{1,3} (\\\",\\\" [0-9]{1,3}){0,3} \\\")\\\""
#define SCHEMA "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}}, " \
               "\"required\": [\"a\", \"b\"]}"

/* Greedy requests sent all at once (more than the 4 slots: some wait, the rest are batched and
 * draft together) get the same answers, byte for byte, from the drafting server and from one
 * that does not draft: completions and chat, plain and streamed, with logprobs, a frequency
 * penalty, a stop string, and two constrained ones (a response_format schema, a grammar: the
 * drafter's guesses are cut at the first one the constraint refuses). The drafter drafted and
 * some guesses were kept; timings and /metrics say so. */
static void test_greedy_same_concurrent(void) {
    static const char *const reqs[][2] = {
        {"/v1/completions", "{\"prompt\": \"la la la la la la la la la la\", \"max_tokens\": 60, \"temperature\": 0, "
                            "\"ignore_eos\": true}"},
        {"/v1/completions", "{\"prompt\": \"abc abc abc abc\", \"max_tokens\": 50, \"temperature\": 0, "
                            "\"ignore_eos\": true, \"frequency_penalty\": 1.5}"},
        {"/v1/completions", "{\"prompt\": \"The story so far\", \"max_tokens\": 40, \"temperature\": 0, \"stop\": [\"e\"]}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"give me JSON\"}], \"max_tokens\": 60, "
                                 "\"temperature\": 0, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                                 "{\"name\": \"s\", \"schema\": " SCHEMA "}}}"},
        {"/v1/completions", "{\"prompt\": \"numbers\", \"max_tokens\": 40, \"temperature\": 0, \"grammar\": \"" GBNF_LIST "\"}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"echo echo echo echo\"}], "
                                 "\"max_tokens\": 50, \"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 2}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"go on\"}], \"max_tokens\": 40, "
                                 "\"temperature\": 0, \"ignore_eos\": true, \"stream\": true}"},
    };
    enum { NR = sizeof reqs / sizeof *reqs };
    static char a[NR][65536], b[NR][65536];
    int oka = post_all(&D, reqs, NR, a, "d"), okb = post_all(&N, reqs, NR, b, "n");
    CHECK(oka && okb, "the requests did not all answer 200");
    int drafted = 0, accepted = 0;
    for (int r = 0; r < NR; r++) {
        char *x = answer_of(a[r]), *y = answer_of(b[r]);
        CHECK(x && y && strlen(x) > 8 && !strcmp(x, y), "request %d: with the drafter\n%s\nwithout\n%s", r, x ? x : a[r],
              y ? y : b[r]);
        free(x), free(y);
        int dn, da, nn, na;
        draft_counts(a[r], &dn, &da);
        draft_counts(b[r], &nn, &na);
        CHECK(nn == -1 && na == -1, "request %d: the server without drafting reports drafts: %s", r, b[r]);
        if (dn >= 0) drafted += dn, accepted += da;
        CHECK(da <= dn, "request %d: %d of %d drafts accepted", r, da, dn);
    }
    const char *json = strstr(a[3], "\"content\":\"{");
    CHECK(json && strstr(json, "\\\"a\\\"") && strstr(json, "\\\"b\\\""), "the constrained answer: %s", a[3]);
    CHECK(drafted > accepted && accepted > 0, "timings: %d drafts, %d accepted", drafted, accepted);
    double md = metric(&D, "plume_draft_tokens_total"), ma = metric(&D, "plume_draft_accepted_total");
    CHECK(metric(&D, "plume_draft_mtp") == 1 && md >= drafted && ma >= accepted && ma > 0, "metrics: mtp %.0f, %.0f / %.0f",
          metric(&D, "plume_draft_mtp"), ma, md);
    CHECK(metric(&N, "plume_draft_mtp") == 0 && metric(&N, "plume_draft_tokens_total") == 0, "the --draft 0 server drafted");
    /* prompt lookup drafted beside the drafter in the batched steps (the default), and was kept */
    double ld = metric(&D, "plume_draft_lookup_tokens_total"), la = metric(&D, "plume_draft_lookup_accepted_total");
    printf("  guessed %.0f, kept %.0f; by prompt lookup %.0f, kept %.0f\n", md, ma, ld, la);
    CHECK(ld > 0 && la > 0 && ld < md && la <= ma, "metrics: prompt lookup %.0f of %.0f", la, ld);
}

/* A sampled request drafts too (the acceptance rule keeps the sampler's distribution:
 * test_drafter's chi-square test on the same plume_spec path), and its seed gives the same
 * text alone, amid three other streams, and after the slots have served other requests. */
static void test_sampled_drafts_and_keeps_its_seed(void) {
    const char *seeded = "{\"prompt\": \"la la la la la la la la\", \"max_tokens\": 60, \"temperature\": 0.8, \"top_k\": 8, "
                         "\"seed\": 5, \"ignore_eos\": true}";
    static const char *const others[][2] = {
        {"/v1/completions", "{\"prompt\": \"other one\", \"max_tokens\": 120, \"temperature\": 1, \"seed\": 1, \"ignore_eos\": true}"},
        {"/v1/completions", "{\"prompt\": \"la la la la la la la la\", \"max_tokens\": 60, \"temperature\": 0.8, \"top_k\": 8, "
                            "\"seed\": 5, \"ignore_eos\": true}"},
        {"/v1/completions", "{\"prompt\": \"other two\", \"max_tokens\": 120, \"temperature\": 0, \"ignore_eos\": true}"},
        {"/v1/completions", "{\"prompt\": \"other three\", \"max_tokens\": 120, \"temperature\": 1.2, \"seed\": 2, "
                            "\"ignore_eos\": true}"},
    };
    static char alone[65536], amid[4][65536];
    CHECK(post(&D, alone, sizeof alone, "/v1/completions", seeded) == 200, "alone: %s", alone);
    CHECK(post_all(&D, others, 4, amid, "s"), "amid: the requests did not all answer 200");
    char *x = completion_text(alone), *y = completion_text(amid[1]);
    CHECK(x && y && strlen(x) > 8 && !strcmp(x, y), "seed 5 alone '%s' vs amid others '%s'", x ? x : "?", y ? y : "?");
    free(x), free(y);
    int dn, da;
    draft_counts(alone, &dn, &da);
    CHECK(dn > 0 && da >= 0 && da <= dn, "the sampled request drafted %d, kept %d: %s", dn, da, alone);
}

/* A conversation re-sent with each turn (the slot reuses its prefix, rewinding the tokens a
 * speculative step fed past the answer and those the template renders otherwise) gets the
 * same greedy answers with the drafter as without, turn after turn. (The rewind after a
 * speculative step's own is test_session's test_rewind_twice: these turns stay within the
 * slots' free rewind either way.) */
static void test_growing_conversation(void) {
    static char a[65536], b[65536], msgs[16384];
    const char *users[4] = {"la la la la la la", "and again la la la", "something else now", "la la la"};
    snprintf(msgs, sizeof msgs, "{\"role\": \"system\", \"content\": \"You answer in one line.\"}");
    for (int t = 0; t < 4; t++) {
        char body[20000];
        size_t n = strlen(msgs);
        snprintf(msgs + n, sizeof msgs - n, ", {\"role\": \"user\", \"content\": \"%s\"}", users[t]);
        snprintf(body, sizeof body, "{\"messages\": [%s], \"max_tokens\": 24, \"temperature\": 0}", msgs);
        int sa = post(&D, a, sizeof a, "/v1/chat/completions", body), sb = post(&N, b, sizeof b, "/v1/chat/completions", body);
        char *x = answer_of(a), *y = answer_of(b);
        CHECK(sa == 200 && sb == 200 && x && y && !strcmp(x, y), "turn %d: with the drafter\n%s\nwithout\n%s", t, x ? x : a,
              y ? y : b);
        free(x), free(y);
        cJSON *root = cJSON_Parse(a);
        cJSON *c = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0), "message"),
            "content");
        char *esc = cJSON_IsString(c) ? cJSON_PrintUnformatted(c) : NULL; /* the answer as a JSON string */
        n = strlen(msgs);
        if (esc && !strchr(esc, '\'')) snprintf(msgs + n, sizeof msgs - n, ", {\"role\": \"assistant\", \"content\": %s}", esc);
        free(esc);
        cJSON_Delete(root);
    }
}

/* --no-drafter: prompt lookup, the same greedy text; --drafter DIR on a bundle without one;
 * --no-lookup: the drafter alone; a drafter for another backbone, contradictory flags and
 * --no-lookup without a drafter are refused at start with a message. */
static void test_flags(void) {
    const char *req = "{\"prompt\": \"abc abc abc abc abc\", \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}";
    static char want[65536], got[65536];
    CHECK(post(&N, want, sizeof want, "/v1/completions", req) == 200, "N: %s", want);
    server S;
    char flags[1024], log[4096];
    const char *cases[3][3] = {{withd, "--no-drafter --parallel 2", "(prompt lookup)"},
                               {bundle, "--parallel 2 --drafter %s", "(mtp drafter and prompt lookup)"},
                               {withd, "--parallel 2 --no-lookup", "(mtp drafter)"}};
    for (int c = 0; c < 3; c++) {
        snprintf(flags, sizeof flags, cases[c][1], track);
        if (server_start_on(&S, c ? "drafter" : "nodrafter", cases[c][0], flags)) {
            CHECK(0, "%s: the server did not start (log: %s)", flags, S.log);
            continue;
        }
        CHECK(post(&S, got, sizeof got, "/v1/completions", req) == 200, "%s: %s", flags, got);
        char *x = completion_text(want), *y = completion_text(got);
        CHECK(x && y && !strcmp(x, y), "%s: '%s' vs '%s'", flags, y ? y : "?", x ? x : "?");
        free(x), free(y);
        CHECK(metric(&S, "plume_draft_mtp") == (c > 0) && metric(&S, "plume_draft_tokens_total") > 0, "%s: mtp %.0f", flags,
              metric(&S, "plume_draft_mtp"));
        if (c == 2) CHECK(metric(&S, "plume_draft_lookup_tokens_total") == 0, "--no-lookup: prompt lookup drafted");
        double secs;
        CHECK(server_stop(&S, &secs) == 0, "%s: no clean exit", flags);
        t_sh(log, sizeof log, "cat %s", S.log);
        CHECK(strstr(log, cases[c][2]), "%s: the start line: %s", flags, log);
    }
    const char *refused[5][2] = {{"--drafter %s", "does not match"},
                                 {"--drafter %s --no-drafter", "contradict"},
                                 {"--drafter %s --draft 0", "contradict"},
                                 {"--no-lookup --no-drafter", "contradict"},
                                 {"--no-lookup", "no drafter"}};
    for (int c = 0; c < 5; c++) {
        snprintf(flags, sizeof flags, refused[c][0], c ? track : bad);
        int started = server_start_on(&S, "refused", bundle, flags) == 0;
        if (started) server_stop(&S, NULL);
        t_sh(log, sizeof log, "cat %s", S.log);
        CHECK(!started && strstr(log, refused[c][1]), "%s: started %d, log: %s", flags, started, log);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    tmp = t_tmpdir("dserve");
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    snprintf(track, sizeof track, "%s/track", tmp);
    snprintf(withd, sizeof withd, "%s/withd", tmp);
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    char out[4096];
    if (t_sh(out, sizeof out,
             "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet && %s/plume convert %s/tiny-mtp-a/hf_track %s --weights q8 "
             "--quiet && cp -r %s %s && cp -r %s %s/drafter && cp -r %s %s && "
             "sed -i 's/\"backbone_hidden_size\": 64/\"backbone_hidden_size\": 128/' %s/config.json",
             t_build(), t_data(), bundle, t_build(), t_data(), track, bundle, withd, track, withd, track, bad, bad))
        printf("  setup: %s\n", out);
    if (server_start_on(&D, "d", withd, "--parallel 4") || server_start(&N, "n", "--parallel 4 --draft 0")) {
        printf("FAIL test_drafter_serve: the servers did not start (logs: %s %s)\n", D.log, N.log);
        return 1;
    }
    RUN(test_greedy_same_concurrent);
    RUN(test_sampled_drafts_and_keeps_its_seed);
    RUN(test_growing_conversation);
    RUN(test_flags);
    double secs;
    CHECK(server_stop(&D, &secs) == 0 && server_stop(&N, &secs) == 0, "the servers did not exit cleanly");
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed ? 1 : 0;
}
