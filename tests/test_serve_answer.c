/* test_serve_answer.c -- the writing of an answer (tools/serve/serve_answer.c) in the OpenAI dialect
 * (serve_openai.c), linked directly: generated
 * text in, the bytes a client receives out. Text a model would write is fed piece by piece
 * (markers split across pieces), so tool calls, thought, stop strings and unparseable output
 * are checked end to end without a model: non-streamed replies and SSE streams. */
#include "t.h"

#include "serve/serve.h"

/* A job from a request body, with a head. NULL (and a failed check) if the body is refused. */
static serve_job *job_of(serve_kind kind, const char *body, int32_t in_thought) {
    serve_request r;
    serve_error e = {0};
    const serve_dialect *d = kind == SERVE_CHAT ? &serve_openai_chat : &serve_openai_completion;
    int st = serve_request_parse(&r, d, body, strlen(body), &e);
    CHECK(st == 0, "request: %s", e.message);
    if (st) return NULL;
    serve_job *j = serve_job_new(&r, d);
    j->head.in_thought = in_thought;
    j->head.model = "tiny";
    j->head.created = 1;
    snprintf(j->head.id, sizeof j->head.id, "%s-abc", d->id_prefix);
    return j;
}

/* Feed pieces (NULL-terminated) until the answer ends; the last serve_answer_put result. */
static int feed(serve_answer *o, const char *const *pieces) {
    int r = 0;
    for (int i = 0; pieces[i] && !r; i++) r = serve_answer_put(o, pieces[i], strlen(pieces[i]), NULL);
    return r;
}

/* Run one answer: job from body, pieces, finish with reason; returns the job's output as a
 * JSON tree (non-streamed) or NULL for a stream (then *sse receives a copy of the bytes). */
static cJSON *answer(serve_kind kind, const char *body, int32_t parse, int32_t in_thought, const char *const *pieces,
                     serve_finish reason, int *put, char **sse) {
    serve_job *j = job_of(kind, body, in_thought);
    if (!j) return NULL;
    serve_answer o;
    char *err = NULL;
    CHECK(serve_answer_init(&o, j, 0, parse, &err) == 0, "init: %s", err);
    *put = feed(&o, pieces);
    serve_usage u = {.prompt = 10, .completion = 5, .cached = 2};
    serve_answer_finish(&o, reason, &u);
    serve_answer_free(&o);
    CHECK(j->done && j->status == 200, "not done");
    cJSON *root = NULL;
    if (sse) *sse = strndup(j->out.p, j->out.len);
    else root = cJSON_ParseWithLength(j->out.p, j->out.len);
    serve_job_unref(j);
    return root;
}

/* choices[0].message.<key> of a reply. */
static cJSON *msg_field(cJSON *root, const char *key) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"), key);
}

/* choices[0].finish_reason of a reply, or "". */
static const char *finish_of(cJSON *root) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
    return cJSON_IsString(f) ? f->valuestring : "";
}

#define CHAT "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"

static void test_content(void) {
    const char *pieces[] = {"Hel", "lo wo", "rld", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT "}", 1, 0, pieces, SERVE_FINISH_LENGTH, &put, NULL);
    cJSON *c = msg_field(root, "content");
    CHECK(put == 0 && cJSON_IsString(c) && !strcmp(c->valuestring, "Hello world"), "content");
    CHECK(!strcmp(finish_of(root), "length") && !msg_field(root, "tool_calls") && !msg_field(root, "reasoning_content"),
          "finish, no calls, no thought");
    cJSON_Delete(root);
}

/* The seed of a whole reply is the integer sent (or drawn), every digit of it: the largest
 * seed a request may give, 2^53 - 1, comes back as written (cJSON's number printer keeps 15
 * digits, so a drawn seed above ~4.5e15 came back rounded and did not replay). */
static void test_seed_every_digit(void) {
    const char *pieces[] = {"ok", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT ", \"seed\": 9007199254740991}", 1, 0, pieces, SERVE_FINISH_STOP, &put, NULL);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    char *txt = root ? cJSON_PrintUnformatted(seed) : NULL;
    CHECK(cJSON_IsNumber(seed) && seed->valuedouble == 9007199254740991.0, "seed %s", txt ? txt : "-");
    cJSON_Delete(root);
    free(txt);
    root = answer(SERVE_COMPLETION, "{\"prompt\": \"a\", \"seed\": -6888072206463179}", 0, 0, pieces, SERVE_FINISH_STOP, &put, NULL);
    seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    CHECK(cJSON_IsNumber(seed) && seed->valuedouble == -6888072206463179.0, "a negative seed");
    cJSON_Delete(root);
}

static void test_thought_is_reasoning(void) {
    const char *pieces[] = {"<|channel>", "thought\n", "let me see", "\n<chan", "nel|>", "It is 4.", "<turn|>", "ignored", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT ", \"reasoning_effort\": \"high\"}", 1, 0, pieces, SERVE_FINISH_STOP, &put, NULL);
    cJSON *r = msg_field(root, "reasoning_content"), *c = msg_field(root, "content");
    CHECK(put == SERVE_ANSWER_END, "the end marker ends the answer (%d)", put);
    CHECK(cJSON_IsString(r) && !strcmp(r->valuestring, "let me see"), "reasoning: %s", cJSON_IsString(r) ? r->valuestring : "-");
    CHECK(cJSON_IsString(c) && !strcmp(c->valuestring, "It is 4."), "content: %s", cJSON_IsString(c) ? c->valuestring : "-");
    cJSON_Delete(root);
    /* a prompt that opened the thought: the first text is thought */
    const char *open[] = {"still thinking", "\n<channel|>", "done", NULL};
    root = answer(SERVE_CHAT, CHAT "}", 1, 1, open, SERVE_FINISH_LENGTH, &put, NULL);
    r = msg_field(root, "reasoning_content");
    c = msg_field(root, "content");
    CHECK(cJSON_IsString(r) && !strcmp(r->valuestring, "still thinking") && cJSON_IsString(c) && !strcmp(c->valuestring, "done"),
          "in_thought");
    cJSON_Delete(root);
}

static const char *const call_pieces[] = {"<|tool_call>", "call:get_weather{ci", "ty:<|\"|>Par", "is<|\"|>}", "<tool_call|>",
                                          "<turn|>", NULL};

static void test_tool_call(void) {
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT "}", 1, 0, call_pieces, SERVE_FINISH_STOP, &put, NULL);
    cJSON *calls = msg_field(root, "tool_calls"), *c0 = cJSON_GetArrayItem(calls, 0);
    cJSON *f = cJSON_GetObjectItemCaseSensitive(c0, "function");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(c0, "id"), *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    CHECK(cJSON_GetArraySize(calls) == 1 && cJSON_IsString(id) && !strncmp(id->valuestring, "call_", 5), "one call");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring, "get_weather"), "name");
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    cJSON *city = cJSON_GetObjectItemCaseSensitive(parsed, "city");
    CHECK(cJSON_IsString(city) && !strcmp(city->valuestring, "Paris"), "arguments: %s", cJSON_IsString(args) ? args->valuestring : "-");
    cJSON_Delete(parsed);
    CHECK(cJSON_IsNull(msg_field(root, "content")), "content null beside the calls");
    CHECK(!strcmp(finish_of(root), "tool_calls"), "finish_reason %s", finish_of(root));
    cJSON_Delete(root);
}

static void test_tool_call_streamed(void) {
    int put;
    char *sse = NULL;
    answer(SERVE_CHAT, CHAT ", \"stream\": true, \"stream_options\": {\"include_usage\": true}}", 1, 0, call_pieces, SERVE_FINISH_STOP,
           &put, &sse);
    if (!sse) sse = strdup("(none)");
    CHECK(!strncmp(sse, "data: ", 6) && strstr(sse, "\"role\":\"assistant\""), "role chunk first: %s", sse);
    CHECK(sse && strstr(sse, "\"tool_calls\":[{\"index\":0,\"id\":\"call_") && strstr(sse, "\"name\":\"get_weather\""),
          "tool_calls delta: %s", sse);
    CHECK(sse && strstr(sse, "\"finish_reason\":\"tool_calls\"") && strstr(sse, "\"choices\":[],") &&
              strstr(sse, "\"completion_tokens\":5"),
          "finish and usage: %s", sse);
    size_t n = sse ? strlen(sse) : 0;
    CHECK(n > 14 && !strcmp(sse + n - 14, "data: [DONE]\n\n"), "ends with [DONE]: %s", sse);
    free(sse);
}

/* Two calls in a row: both come back; with parallel_tool_calls false the answer ends with
 * the first (put says it stopped there), whole and streamed. */
static void test_one_call(void) {
    const char *pieces[] = {"<|tool_call>call:a{x:1}<tool_call|>", "<|tool_call>call:b{y:2}<tool_call|>", " after", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT "}", 1, 0, pieces, SERVE_FINISH_STOP, &put, NULL);
    CHECK(put == 0 && cJSON_GetArraySize(msg_field(root, "tool_calls")) == 2, "two calls");
    cJSON_Delete(root);
    root = answer(SERVE_CHAT, CHAT ", \"parallel_tool_calls\": false}", 1, 0, pieces, SERVE_FINISH_STOP, &put, NULL);
    cJSON *calls = msg_field(root, "tool_calls");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(calls, 0), "function"),
                                                         "name");
    CHECK(put == SERVE_ANSWER_STOP && cJSON_GetArraySize(calls) == 1 && cJSON_IsString(name) && !strcmp(name->valuestring, "a") &&
              !strcmp(finish_of(root), "tool_calls") && cJSON_IsNull(msg_field(root, "content")),
          "one call: put %d, finish %s", put, finish_of(root));
    cJSON_Delete(root);
    char *sse = NULL;
    answer(SERVE_CHAT, CHAT ", \"parallel_tool_calls\": false, \"stream\": true}", 1, 0, pieces, SERVE_FINISH_STOP, &put, &sse);
    CHECK(sse && strstr(sse, "\"name\":\"a\"") && !strstr(sse, "\"name\":\"b\"") && !strstr(sse, "after") &&
              strstr(sse, "\"finish_reason\":\"tool_calls\""),
          "streamed: %s", sse ? sse : "-");
    free(sse);
}

static void test_unparseable_call_is_text(void) {
    const char *pieces[] = {"ok ", "<|tool_call>", "call:f{broken", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT "}", 1, 0, pieces, SERVE_FINISH_LENGTH, &put, NULL);
    cJSON *c = msg_field(root, "content");
    CHECK(root && !msg_field(root, "tool_calls") && cJSON_IsString(c) && strstr(c->valuestring, "ok ") &&
              strstr(c->valuestring, "broken"),
          "as text: %s", cJSON_IsString(c) ? c->valuestring : "-");
    CHECK(!strcmp(finish_of(root), "length"), "finish %s", finish_of(root));
    cJSON_Delete(root);
}

static void test_stop_strings(void) {
    const char *pieces[] = {"abcE", "NDxyz", "more", NULL};
    int put;
    cJSON *root = answer(SERVE_CHAT, CHAT ", \"stop\": [\"END\"]}", 1, 0, pieces, SERVE_FINISH_LENGTH, &put, NULL);
    cJSON *c = msg_field(root, "content");
    CHECK(put == SERVE_ANSWER_STOP && cJSON_IsString(c) && !strcmp(c->valuestring, "abc") && !strcmp(finish_of(root), "stop"),
          "cut at END: %d %s", put, cJSON_IsString(c) ? c->valuestring : "-");
    cJSON_Delete(root);
    const char *held[] = {"abX", "Y", NULL};
    root = answer(SERVE_COMPLETION, "{\"prompt\": \"p\", \"stop\": \"XYZ\"}", 0, 0, held, SERVE_FINISH_LENGTH, &put, NULL);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0), "text");
    CHECK(put == 0 && cJSON_IsString(t) && !strcmp(t->valuestring, "abXY") && !strcmp(finish_of(root), "length"),
          "a held prefix is released at the end: %s", cJSON_IsString(t) ? t->valuestring : "-");
    cJSON_Delete(root);
    /* markers are not special in a completion: the text is content as written */
    const char *raw[] = {"<|channel>", "x", NULL};
    char *sse = NULL;
    answer(SERVE_COMPLETION, "{\"prompt\": \"p\", \"stream\": true}", 0, 0, raw, SERVE_FINISH_LENGTH, &put, &sse);
    if (!sse) sse = strdup("(none)");
    CHECK(strstr(sse, "\"text\":\"<|channel>\"") && strstr(sse, "\"object\":\"text_completion\"") &&
              !strstr(sse, "\"role\""),
          "completion stream: %s", sse);
    free(sse);
}

/* A NUL byte in the generated text (the byte token <0x00>) becomes U+FFFD: it would cut a
 * JSON string, losing the rest of the answer (fuzz_serve_req found it). */
static void test_nul_byte(void) {
    static const char a[] = "ab\0c", b[] = "d\0";
    const char *texts[] = {a, b};
    size_t lens[] = {4, 2};
    for (int stream = 0; stream < 2; stream++) {
        serve_job *j = job_of(SERVE_COMPLETION, stream ? "{\"prompt\": \"p\", \"stream\": true}" : "{\"prompt\": \"p\"}", 0);
        if (!j) return;
        serve_answer o;
        char *err = NULL;
        CHECK(serve_answer_init(&o, j, 0, 0, &err) == 0, "init: %s", err);
        for (int i = 0; i < 2; i++) CHECK(serve_answer_put(&o, texts[i], lens[i], NULL) == 0, "put");
        serve_usage u = {.prompt = 1, .completion = 2};
        serve_answer_finish(&o, SERVE_FINISH_LENGTH, &u);
        serve_answer_free(&o);
        char *out = strndup(j->out.p, j->out.len);
        if (stream) CHECK(strstr(out, "\"text\":\"ab\xef\xbf\xbd" "c\"") && strstr(out, "\"text\":\"d\xef\xbf\xbd\""), "stream: %s", out);
        else CHECK(strstr(out, "\"text\":\"ab\xef\xbf\xbd" "cd\xef\xbf\xbd\""), "reply: %s", out);
        free(out);
        serve_job_unref(j);
    }
}

static void test_logprobs_follow_text(void) {
    serve_job *j = job_of(SERVE_CHAT, CHAT ", \"logprobs\": true, \"top_logprobs\": 1}", 0);
    if (!j) return;
    char path[512], *err = NULL;
    plume_tokenizer *tok = NULL;
    snprintf(path, sizeof path, "%s/tiny-a/hf/tokenizer.json", t_data());
    CHECK(plume_tokenizer_open_json(&tok, path, &err) == 0, "tokenizer: %s", err);
    j->head.tok = tok;
    serve_answer o;
    CHECK(serve_answer_init(&o, j, 0, 1, &err) == 0, "init");
    for (int i = 0; i < 3; i++) {
        serve_logprob lp = {.id = 100 + i, .logprob = -1.0f * (float)i, .n_top = 1, .top_ids = {7}, .top_lps = {-0.5f}};
        serve_answer_put(&o, i == 1 ? "<|chan" : "a", i == 1 ? 6 : 1, &lp); /* the middle one gives no text yet */
    }
    serve_usage u = {.prompt = 3, .completion = 3};
    serve_answer_finish(&o, SERVE_FINISH_LENGTH, &u);
    serve_answer_free(&o);
    cJSON *root = cJSON_ParseWithLength(j->out.p, j->out.len);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    cJSON *lps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "logprobs"), "content");
    cJSON *second = cJSON_GetArrayItem(lps, 1);
    CHECK(cJSON_GetArraySize(lps) == 3, "one entry per token: %.*s", (int)j->out.len, j->out.p);
    CHECK(cJSON_GetObjectItemCaseSensitive(second, "logprob")->valuedouble == -1.0 &&
              cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(second, "top_logprobs")) == 1,
          "the second token's entry: %.*s", (int)j->out.len, j->out.p);
    cJSON_Delete(root);
    serve_job_unref(j);
    plume_tokenizer_free(tok);
}

static void test_fail(void) {
    serve_job *j = job_of(SERVE_CHAT, CHAT ", \"stream\": true}", 0);
    if (!j) return;
    serve_job_fail(j, 503, SERVE_ERR_SERVER, "the server is shutting down");
    CHECK(j->done && j->status == 503 && strstr(j->out.p, "data: {\"error\":{\"message\":\"the server is shutting down\"") &&
              strstr(j->out.p, "data: [DONE]\n\n"),
          "stream error: %.*s", (int)j->out.len, j->out.p);
    serve_job_unref(j);
    j = job_of(SERVE_COMPLETION, "{\"prompt\": \"p\"}", 0);
    if (!j) return;
    serve_job_fail(j, 500, SERVE_ERR_SERVER, "boom");
    cJSON *root = cJSON_ParseWithLength(j->out.p, j->out.len);
    CHECK(j->status == 500 && cJSON_GetObjectItemCaseSensitive(root, "error"), "plain error");
    cJSON_Delete(root);
    serve_job_cancel(j);
    CHECK(serve_job_cancelled(j), "cancelled");
    serve_job_unref(j);
}

int main(void) {
    RUN(test_content);
    RUN(test_seed_every_digit);
    RUN(test_thought_is_reasoning);
    RUN(test_tool_call);
    RUN(test_tool_call_streamed);
    RUN(test_one_call);
    RUN(test_unparseable_call_is_text);
    RUN(test_stop_strings);
    RUN(test_nul_byte);
    RUN(test_logprobs_follow_text);
    RUN(test_fail);
    return t_total_failed != 0;
}
