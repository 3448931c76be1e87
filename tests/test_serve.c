/* test_serve.c -- `plume serve` over HTTP on 127.0.0.1, driven with curl, on the tiny-a
 * bundle: every error case (bad JSON and fields, 401, 404, 405, 413, 429 + Retry-After,
 * invalid UTF-8, a prompt or max_tokens past the context), well-formed plain and streamed
 * replies with the right usage, logprobs, stop strings, prompt reuse across a growing
 * conversation (only the new turn is prefilled), deterministic output amid concurrent
 * requests, the same greedy text through every dialect (OpenAI chat, Responses, Anthropic,
 * Ollama) alone and under load, drawn and replayed seeds, logit_bias, n choices, echo with
 * the prompt's log-probabilities, continued assistant messages, CORS, Ollama's model
 * endpoints, a client hanging up frees its slot, /metrics and /tokenize, SIGTERM drains (running
 * streams finish, /health 503 "draining", new requests 503) and exits 0, a second SIGTERM or
 * --drain 0 cuts the streams, and --slot-save keeps the slots across a restart. Every curl has
 * a time limit. */
#include "common.h"
#include "t_serve.h"

#include <regex.h>
#include <strings.h>

static server A; /* --parallel 4, the default limits */

/* A string at a path of keys/indices in a JSON text: e.g. get_str(j, "choices", 0, "text"). */
static cJSON *dig(cJSON *root, const char *k1, int i, const char *k2) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k1);
    if (i >= 0) v = cJSON_GetArrayItem(v, i);
    return k2 ? cJSON_GetObjectItemCaseSensitive(v, k2) : v;
}

/* The usage numbers of a reply; 0 when they are there. */
static int usage_of(cJSON *root, int *prompt, int *completion, int *total, int *cached) {
    cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"), *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(u, "total_tokens");
    cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"), "cached_tokens");
    if (!cJSON_IsNumber(p) || !cJSON_IsNumber(c) || !cJSON_IsNumber(t) || !cJSON_IsNumber(k)) return -1;
    *prompt = p->valueint, *completion = c->valueint, *total = t->valueint, *cached = k->valueint;
    return 0;
}

/* The text of a /v1/completions reply (malloc'd), or NULL. */
static char *completion_text(const char *body) {
    cJSON *root = cJSON_Parse(body);
    cJSON *t = dig(root, "choices", 0, "text");
    char *s = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(root);
    return s;
}

/* Number of ids /tokenize gives for text (JSON-escaped already); -1 on error. */
static int count_tokens(const char *json_text) {
    char body[4096], out[65536];
    snprintf(body, sizeof body, "{\"content\": \"%s\"}", json_text);
    if (post(&A, out, sizeof out, "/tokenize", body) != 200) return -1;
    cJSON *root = cJSON_Parse(out);
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "tokens"));
    cJSON_Delete(root);
    return n;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_health_models_page(void) {
    char out[65536];
    CHECK(http(&A, out, sizeof out, "/health", "%s", "") == 200 && strstr(out, "\"ok\""), "health: %s", out);
    CHECK(http(&A, out, sizeof out, "/v1/models", "%s", "") == 200 && strstr(out, "\"object\":\"list\"") &&
              strstr(out, "\"id\":\"tiny\""),
          "models: %s", out);
    CHECK(http(&A, out, sizeof out, "/", "%s", "-H 'Accept: text/html,application/xhtml+xml,*/*;q=0.8'") == 200 &&
              header_has("text/html") && strstr(out, "<"),
          "page for a browser");
    /* Ollama's clients probe GET / and HEAD / (curl's Accept is * / *): the banner */
    CHECK(http(&A, out, sizeof out, "/", "%s", "") == 200 && header_has("text/plain") && !strcmp(out, "Ollama is running"),
          "banner: %s", out);
    CHECK(http(&A, out, sizeof out, "/", "%s", "-I") == 200 && header_has("text/plain"), "HEAD /");
}

static void test_errors(void) {
    char out[65536];
    int st = post(&A, out, sizeof out, "/v1/chat/completions", "{\"messages\": [");
    CHECK(st == 400 && is_error(out, "invalid_json"), "bad JSON: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/chat/completions",
              "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": \"hot\"}");
    CHECK(st == 400 && is_error(out, NULL) && strstr(out, "\"param\":\"temperature\""), "bad type: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}");
    CHECK(st == 400 && strstr(out, "messages[0].role"), "bad role: %d %s", st, out);
    st = http(&A, out, sizeof out, "/v1/nothing", "%s", "");
    CHECK(st == 404 && is_error(out, "not_found"), "404: %d %s", st, out);
    st = http(&A, out, sizeof out, "/v1/chat/completions", "%s", "");
    CHECK(st == 405 && is_error(out, "method_not_allowed") && header_has("Allow:"), "GET on chat: %d %s", st, out);
    st = http(&A, out, sizeof out, "/health", "%s", "-X DELETE");
    CHECK(st == 405 && is_error(out, NULL), "DELETE on health: %d %s", st, out);
    char path[800];
    snprintf(path, sizeof path, "%s/bad-utf8.json", tmp);
    FILE *f = fopen(path, "wb");
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"ab\xff\xfe\"}]}", f);
    fclose(f);
    st = http(&A, out, sizeof out, "/v1/chat/completions", "--data-binary @%s", path);
    CHECK(st == 400 && is_error(out, "invalid_utf8") && strstr(out, "UTF-8"), "invalid UTF-8: %d %s", st, out);
    /* max_tokens past the context (4096): the answer runs until the context is full */
    st = post(&A, out, sizeof out, "/v1/chat/completions",
              "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 5000, \"ignore_eos\": true}");
    const char *pt = strstr(out, "\"prompt_tokens\":"), *ct = strstr(out, "\"completion_tokens\":");
    CHECK(st == 200 && strstr(out, "\"finish_reason\":\"length\"") && pt && ct &&
              atoi(pt + strlen("\"prompt_tokens\":")) + atoi(ct + strlen("\"completion_tokens\":")) == 4097, /* the last token needs no room */
          "max_tokens past the context: %d %.300s", st, out);
    /* a prompt longer than the context (4096): 6000 characters of a character-level vocabulary */
    snprintf(path, sizeof path, "%s/long.json", tmp);
    f = fopen(path, "wb");
    fputs("{\"prompt\": \"", f);
    for (int i = 0; i < 600; i++) fputs("0123456789", f);
    fputs("\"}", f);
    fclose(f);
    st = http(&A, out, sizeof out, "/v1/completions", "--data-binary @%s", path);
    CHECK(st == 400 && is_error(out, "context_length_exceeded") && strstr(out, "the prompt has"), "prompt too long: %d %s",
          st, out);
    st = post(&A, out, sizeof out, "/v1/completions", "{\"prompt\": \"a\", \"n\": 5}");
    CHECK(st == 400 && strstr(out, "\"param\":\"n\"") && strstr(out, "--parallel"), "n = 5 > 4 slots: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"99999999\": 1}}");
    CHECK(st == 400 && strstr(out, "\"param\":\"logit_bias\""), "logit_bias outside the vocabulary: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/completions", "{\"prompt\": [5, 99999999]}");
    CHECK(st == 400 && strstr(out, "\"param\":\"prompt\""), "prompt id outside the vocabulary: %d %s", st, out);
    st = post(&A, out, sizeof out, "/detokenize", "{\"tokens\": [1, 99999999]}");
    CHECK(st == 400 && is_error(out, NULL), "detokenize bad id: %d %s", st, out);
    /* the server is still fine */
    CHECK(http(&A, out, sizeof out, "/health", "%s", "") == 200, "alive after the errors");
}

static void test_chat_reply_and_usage(void) {
    char out[65536];
    int st = post(&A, out, sizeof out, "/v1/chat/completions",
                  "{\"model\": \"whatever\", \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}],"
                  " \"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true}");
    CHECK(st == 200, "chat: %d %s", st, out);
    cJSON *root = cJSON_Parse(out);
    cJSON *msg = dig(root, "choices", 0, "message");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    CHECK(cJSON_IsString(id) && !strncmp(id->valuestring, "chatcmpl-", 9), "id: %s", out);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(root, "object")->valuestring, "chat.completion"), "object: %s", out);
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(msg, "content")) &&
              !strcmp(cJSON_GetObjectItemCaseSensitive(msg, "role")->valuestring, "assistant"),
          "message: %s", out);
    CHECK(!strcmp(dig(root, "choices", 0, "finish_reason")->valuestring, "length"), "finish_reason: %s", out);
    int p = 0, c = 0, t = 0, k = 0;
    int want = count_tokens("<bos><|turn>user\\nhello<turn|>\\n<|turn>model\\n");
    CHECK(usage_of(root, &p, &c, &t, &k) == 0 && p == want && c == 5 && t == p + c, "usage %d %d %d (want prompt %d): %s", p,
          c, t, want, out);
    /* timings: the computed prompt tokens and the 4 decode steps after the first token */
    cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "timings");
    cJSON *pn = cJSON_GetObjectItemCaseSensitive(tm, "prompt_n"), *dn = cJSON_GetObjectItemCaseSensitive(tm, "predicted_n");
    cJSON *pms = cJSON_GetObjectItemCaseSensitive(tm, "prompt_ms"), *dms = cJSON_GetObjectItemCaseSensitive(tm, "predicted_ms");
    cJSON *rate = cJSON_GetObjectItemCaseSensitive(tm, "predicted_per_second");
    CHECK(cJSON_IsNumber(pn) && pn->valueint == p - k && cJSON_IsNumber(dn) && dn->valueint == 4 && cJSON_IsNumber(pms) &&
              pms->valuedouble > 0 && cJSON_IsNumber(dms) && dms->valuedouble > 0 && cJSON_IsNumber(rate) &&
              fabs(rate->valuedouble - 4000.0 / dms->valuedouble) < 1e-6 * rate->valuedouble,
          "timings: %s", out);
    cJSON_Delete(root);
}

/* The SSE events of a stream: content concatenated, finish reason, usage; 0 if well formed. */
static int read_stream(const char *out, char *content, size_t cap, char *finish, int *completion, int *n_events) {
    const char *p = out;
    int done = 0, role = 0;
    content[0] = finish[0] = 0;
    *completion = -1;
    *n_events = 0;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end) return -1;
        if (done) return -2; /* nothing after [DONE] */
        if (!strncmp(p, "[DONE]", 6)) { done = 1; p = end; continue; }
        cJSON *ev = cJSON_ParseWithLength(p, (size_t)(end - p));
        if (!ev) return -3;
        (*n_events)++;
        cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
        if (!cJSON_IsString(obj) || strcmp(obj->valuestring, "chat.completion.chunk")) { cJSON_Delete(ev); return -4; }
        cJSON *delta = dig(ev, "choices", 0, "delta"), *fr = dig(ev, "choices", 0, "finish_reason");
        cJSON *r = cJSON_GetObjectItemCaseSensitive(delta, "role"), *ct = cJSON_GetObjectItemCaseSensitive(delta, "content");
        if (cJSON_IsString(r)) role = 1;
        if (cJSON_IsString(ct)) strncat(content, ct->valuestring, cap - strlen(content) - 1);
        if (cJSON_IsString(fr)) snprintf(finish, 32, "%s", fr->valuestring);
        int pt, tt, kk;
        if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ev, "choices")) == 0) usage_of(ev, &pt, completion, &tt, &kk);
        cJSON_Delete(ev);
        p = end;
    }
    return done && role ? 0 : -5;
}

/* llama-server's "grammar" (docs/STRUCTURED.md) through the real server: sampled answers of
 * the random model on /v1/chat/completions (n = 2, and a stream) and /v1/completions, every
 * one matched whole by a POSIX regex of the same language (an independent check); a parse
 * error is a 400 naming the line and column, so is a token the vocabulary lacks and a grammar
 * with a response format; a grammar too ambiguous for its text ends the request with a 400
 * naming the recognizer's limit. */
#define GBNF_LIST "root ::= \\\"(\\\" [0-9]{1,3} (\\\",\\\" [0-9]{1,3}){0,3} \\\")\\\""
static void test_grammar(void) {
    regex_t re;
    CHECK(regcomp(&re, "^\\([0-9]{1,3}(,[0-9]{1,3}){0,3}\\)$", REG_EXTENDED | REG_NOSUB) == 0, "regcomp");
    char out[65536], body[4096], content[4096], finish[32];
    int answers = 0;
    for (int seed = 1; seed <= 6; seed++) {
        int chat = seed % 2;
        snprintf(body, sizeof body,
                 chat ? "{\"messages\": [{\"role\": \"user\", \"content\": \"numbers\"}], \"max_tokens\": 40, \"seed\": %d, "
                        "\"n\": 2, \"grammar\": \"" GBNF_LIST "\"}"
                      : "{\"prompt\": \"numbers\", \"max_tokens\": 40, \"seed\": %d, \"n\": 2, \"grammar\": \"" GBNF_LIST "\"}",
                 seed);
        int st = post(&A, out, sizeof out, chat ? "/v1/chat/completions" : "/v1/completions", body);
        cJSON *root = cJSON_Parse(out);
        for (int i = 0; i < 2; i++) {
            cJSON *t = chat ? cJSON_GetObjectItemCaseSensitive(dig(root, "choices", i, "message"), "content")
                            : dig(root, "choices", i, "text");
            cJSON *fr = dig(root, "choices", i, "finish_reason");
            int ok = st == 200 && cJSON_IsString(t) && cJSON_IsString(fr) && !strcmp(fr->valuestring, "stop") &&
                     regexec(&re, t->valuestring, 0, NULL, 0) == 0;
            CHECK(ok, "seed %d choice %d (%s): %d %s", seed, i, chat ? "chat" : "completion", st, out);
            answers += ok;
        }
        cJSON_Delete(root);
    }
    int st = post(&A, out, sizeof out, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"numbers\"}], \"max_tokens\": 40, \"seed\": 9, "
                  "\"stream\": true, \"grammar\": \"" GBNF_LIST "\"}");
    int completion, n_events;
    CHECK(st == 200 && read_stream(out, content, sizeof content, finish, &completion, &n_events) == 0 &&
              !strcmp(finish, "stop") && regexec(&re, content, 0, NULL, 0) == 0,
          "stream: %d %s", st, out);
    CHECK(answers == 12, "%d of 12 answers matched", answers);
    regfree(&re);
    st = post(&A, out, sizeof out, "/v1/completions", "{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\"}");
    CHECK(st == 400 && is_error(out, "invalid_value") && strstr(out, "line 1, column"), "a parse error: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/completions", "{\"prompt\": \"x\", \"grammar\": \"root ::= <|nope|>\"}");
    CHECK(st == 400 && is_error(out, "invalid_value") && strstr(out, "<|nope|>"), "an unknown token: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/chat/completions",
              "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"grammar\": \"root ::= \\\"a\\\"\", "
              "\"response_format\": {\"type\": \"json_object\"}}");
    CHECK(st == 400 && is_error(out, "unsupported_value") && strstr(out, "response_format"), "with a format: %d %s", st, out);
    /* every "(" doubles the ways to read the text; "x" may come only after 40 of them */
    st = post(&A, out, sizeof out, "/v1/completions",
              "{\"prompt\": \"x\", \"max_tokens\": 60, \"grammar\": \"root ::= e\\ne ::= \\\"(\\\" e \\\"a\\\" | \\\"(\\\" e "
              "\\\"b\\\" | \\\"((((((((((((((((((((((((((((((((((((((((x\\\"\"}");
    CHECK(st == 400 && is_error(out, NULL) && strstr(out, "too ambiguous or nested too deep"), "past the limit: %d %s", st, out);
}
#undef GBNF_LIST

/* Formats that cannot be enforced are refused when the request is parsed, a 400 naming the
 * field, in every dialect: they were refused only when a slot built the constraint, a 500
 * ({"$ref": "#"}, a $ref cycle, a 100,000-value enum). The pattern case belongs to the regex
 * compiler (it may come to be accepted): never a 500. */
static void test_formats_refused_at_parse(void) {
    static const char *const schemas[] = {"{\"$ref\": \"#\"}",
                                          "{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}, "
                                          "\"$ref\": \"#/$defs/a\"}",
                                          NULL, "{\"type\": \"string\", \"pattern\": \"^((a*)*)*b$\"}"};
    plume_buf big = {0}; /* {"enum": [0, 1, ..., 99999]} */
    plume_buf_puts(&big, "{\"enum\": [0");
    for (int i = 1; i < 100000; i++) {
        char n[16];
        snprintf(n, sizeof n, ",%d", i);
        plume_buf_puts(&big, n);
    }
    plume_buf_puts(&big, "]}");
    plume_buf_put(&big, "", 1);
    static const struct { const char *path, *fmt, *param; } dialects[] = {
        {"/v1/chat/completions",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 2, \"response_format\": "
         "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"s\", \"schema\": %s}}}",
         "response_format"},
        {"/api/chat", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": false, \"format\": %s}",
         "format"},
        {"/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 2, \"text\": {\"format\": {\"type\": \"json_schema\", "
         "\"name\": \"s\", \"schema\": %s}}}", "text.format"},
        {"/v1/messages", "{\"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
         "[{\"name\": \"f\", \"input_schema\": %s}], \"tool_choice\": {\"type\": \"any\"}}", "tools"},
    };
    char path[800], out[16384], want[64];
    snprintf(path, sizeof path, "%s/format-body.json", tmp);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++) {
            const char *schema = schemas[s] ? schemas[s] : big.p;
            char *body = plume_sprintf(dialects[d].fmt, schema);
            CHECK(body && plume_write_file(path, body, strlen(body), PLUME_WRITE_REPLACE, NULL) == 0, "write");
            free(body);
            int st = http(&A, out, sizeof out, dialects[d].path, "-H 'Content-Type: application/json' --data-binary @%s", path);
            snprintf(want, sizeof want, "'%s'", dialects[d].param);
            if (s < 3)
                CHECK(st == 400 && strstr(out, want), "schema %d at %s: %d (want 400 naming %s) %.300s", s, dialects[d].path,
                      st, want, out);
            else
                CHECK(st == 200 || (st == 400 && strstr(out, want)), "pattern at %s: %d %.300s", dialects[d].path, st, out);
        }
    plume_buf_free(&big);
}

static void test_stream_equals_plain(void) {
    char out[65536], plain[65536];
    const char *req = "\"messages\": [{\"role\": \"system\", \"content\": \"stream test\"}, {\"role\": \"user\", \"content\": \"tell\"}],"
                      " \"max_tokens\": 12, \"temperature\": 0.8, \"seed\": 5, \"ignore_eos\": true";
    char body[2048];
    snprintf(body, sizeof body, "{%s}", req);
    CHECK(post(&A, plain, sizeof plain, "/v1/chat/completions", body) == 200, "plain: %s", plain);
    snprintf(body, sizeof body, "{%s, \"stream\": true, \"stream_options\": {\"include_usage\": true}}", req);
    int st = http(&A, out, sizeof out, "/v1/chat/completions", "-N -d '%s'", body);
    CHECK(st == 200 && header_has("text/event-stream"), "stream status %d", st);
    char content[8192], finish[32];
    int completion, n_events;
    int rc = read_stream(out, content, sizeof content, finish, &completion, &n_events);
    CHECK(rc == 0, "malformed stream (%d): %s", rc, out);
    cJSON *root = cJSON_Parse(plain);
    cJSON *c = dig(root, "choices", 0, "message");
    c = cJSON_GetObjectItemCaseSensitive(c, "content");
    CHECK(cJSON_IsString(c) && !strcmp(c->valuestring, content), "streamed '%s' vs plain '%s'", content,
          cJSON_IsString(c) ? c->valuestring : "?");
    cJSON_Delete(root);
    CHECK(!strcmp(finish, "length") && completion == 12 && n_events >= 3, "finish %s, usage %d, %d events", finish,
          completion, n_events);
}

/* Tools, tool calls, tool replies and thinking render (the prompt grows by the tool
 * declarations; tool_choice none drops them); the answer, whatever the random model writes,
 * comes back well formed, with the thought as reasoning_content. */
static void test_tools_and_thinking(void) {
    char out[65536], body[4096];
    const char *msgs =
        "\"messages\": [{\"role\": \"user\", \"content\": \"weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null,"
        " \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
        " \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}]";
    const char *tools = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"the weather\","
                        " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";
    int p[3] = {0}, c, t, k;
    const char *extra[3] = {"", ", \"tool_choice\": \"none\"", ", \"tool_choice\": \"auto\""};
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{%s%s%s%s, \"max_tokens\": 8, \"reasoning_effort\": \"high\"}", msgs, i ? ", " : "",
                 i ? tools : "", extra[i]);
        int st = post(&A, out, sizeof out, "/v1/chat/completions", body);
        cJSON *root = cJSON_Parse(out);
        cJSON *msg = dig(root, "choices", 0, "message"), *fr = dig(root, "choices", 0, "finish_reason");
        CHECK(st == 200 && usage_of(root, &p[i], &c, &t, &k) == 0 && cJSON_IsObject(msg), "tools %d: %d %s", i, st, out);
        CHECK(cJSON_IsString(fr) && (!strcmp(fr->valuestring, "stop") || !strcmp(fr->valuestring, "length") ||
                                     !strcmp(fr->valuestring, "tool_calls")),
              "finish_reason: %s", out);
        /* after a tool reply with thinking on, the prompt opens the thought: text is reasoning */
        cJSON *rc = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
        CHECK(c == 0 || cJSON_IsString(rc) || cJSON_GetObjectItemCaseSensitive(msg, "tool_calls"), "no reasoning_content: %s", out);
        cJSON_Delete(root);
    }
    CHECK(p[0] > 10 && p[1] == p[0] && p[2] > p[0] + 10, "prompt tokens: no tools %d, none %d, auto %d", p[0], p[1], p[2]);
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\","
             " \"function\": {\"name\": \"f\", \"arguments\": \"{not json\"}}]}]}");
    int st = post(&A, out, sizeof out, "/v1/chat/completions", body);
    CHECK(st == 400 && is_error(out, NULL) && strstr(out, "arguments"), "bad arguments: %d %s", st, out);
    /* thinking on without tools: the system turn carries <|think|> */
    int q[2] = {0};
    for (int i = 0; i < 2; i++) {
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"think\"}], \"max_tokens\": 4%s}",
                 i ? ", \"chat_template_kwargs\": {\"enable_thinking\": true}" : "");
        post(&A, out, sizeof out, "/v1/chat/completions", body);
        cJSON *root = cJSON_Parse(out);
        usage_of(root, &q[i], &c, &t, &k);
        cJSON_Delete(root);
    }
    int want = count_tokens("<bos><|turn>system\\n<|think|>\\n<turn|>\\n<|turn>user\\nthink<turn|>\\n<|turn>model\\n");
    CHECK(q[0] > 0 && q[1] == want && q[1] > q[0], "thinking prompt %d tokens, want %d (without: %d)", q[1], want, q[0]);
    /* the parsed path streams well-formed chunks too */
    st = http(&A, out, sizeof out, "/v1/chat/completions", "-N -d '{\"messages\": [{\"role\": \"user\", \"content\": \"s\"}],"
              " \"max_tokens\": 20, \"seed\": 3, \"stream\": true}'");
    char content[8192], finish[32];
    int completion, n_events;
    int rc = read_stream(out, content, sizeof content, finish, &completion, &n_events);
    CHECK(st == 200 && rc == 0 && *finish, "parsed stream (%d): %s", rc, out);
}

static void test_completions_stop(void) {
    char out[65536];
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}";
    int st = post(&A, out, sizeof out, "/v1/completions", body);
    char *full = completion_text(out);
    CHECK(st == 200 && full && strstr(out, "\"object\":\"text_completion\"") && strstr(out, "\"finish_reason\":\"length\""),
          "completion: %d %s", st, out);
    if (!full) return;
    /* a stop string taken from the middle of the greedy text: the answer is cut before its
     * first occurrence */
    char stop[3] = {0};
    for (size_t i = 4; i + 2 <= strlen(full) && !stop[0]; i++)
        if (full[i] >= 'a' && full[i] <= 'z' && full[i + 1] >= 'a' && full[i + 1] <= 'z') memcpy(stop, full + i, 2);
    if (!stop[0]) strcpy(stop, full[0] == 'W' ? "X" : "W");
    char req[512];
    snprintf(req, sizeof req,
             "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true, \"stop\": [\"%s\"]}",
             stop);
    st = post(&A, out, sizeof out, "/v1/completions", req);
    char *cut = completion_text(out);
    char *at = strstr(full, stop);
    size_t want = at ? (size_t)(at - full) : strlen(full);
    CHECK(st == 200 && cut && strlen(cut) == want && !strncmp(cut, full, want), "stop '%s': '%s' from '%s'", stop,
          cut ? cut : "?", full);
    CHECK(!at || strstr(out, "\"finish_reason\":\"stop\""), "finish_reason: %s", out);
    free(cut);
    free(full);
}

static void test_logprobs(void) {
    char out[65536];
    int st = post(&A, out, sizeof out, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"lp\"}], \"max_tokens\": 4, \"temperature\": 0,"
                  " \"ignore_eos\": true, \"logprobs\": true, \"top_logprobs\": 3}");
    CHECK(st == 200, "logprobs: %d %s", st, out);
    cJSON *root = cJSON_Parse(out);
    cJSON *content = cJSON_GetObjectItemCaseSensitive(dig(root, "choices", 0, "logprobs"), "content"), *e;
    CHECK(cJSON_GetArraySize(content) == 4, "4 entries: %s", out);
    cJSON_ArrayForEach(e, content) {
        cJSON *lp = cJSON_GetObjectItemCaseSensitive(e, "logprob"), *top = cJSON_GetObjectItemCaseSensitive(e, "top_logprobs");
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "token")) && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(e, "bytes")),
              "token, bytes: %s", out);
        CHECK(cJSON_IsNumber(lp) && lp->valuedouble <= 0 && cJSON_GetArraySize(top) == 3, "logprob, 3 alternatives: %s", out);
        double t0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 0), "logprob")->valuedouble;
        double t1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 1), "logprob")->valuedouble;
        CHECK(fabs(t0 - lp->valuedouble) < 1e-6 && t1 <= t0, "greedy picks the top alternative: %s", out);
    }
    cJSON_Delete(root);
}

static void test_growing_conversation_reuses_cache(void) {
    char out[65536], body[4096];
    const char *turn1 = "{\"role\": \"system\", \"content\": \"You are test number seven.\"}, {\"role\": \"user\", \"content\": \"hi there\"}";
    snprintf(body, sizeof body, "{\"messages\": [%s], \"max_tokens\": 6, \"temperature\": 0}", turn1);
    CHECK(post(&A, out, sizeof out, "/v1/chat/completions", body) == 200, "turn 1: %s", out);
    cJSON *root = cJSON_Parse(out);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(dig(root, "choices", 0, "message"), "content");
    char *answer = cJSON_IsString(c) ? cJSON_PrintUnformatted(c) : strdup("\"\""); /* as a JSON string */
    int p1 = 0, c1, t1, k1;
    usage_of(root, &p1, &c1, &t1, &k1);
    cJSON_Delete(root);
    for (char *q = answer; *q; q++)
        if (*q == '\'') *q = ' '; /* the body goes inside single quotes */
    double before = metric(&A, "plume_prompt_tokens_total");
    snprintf(body, sizeof body,
             "{\"messages\": [%s, {\"role\": \"assistant\", \"content\": %s}, {\"role\": \"user\", \"content\": \"and then?\"}],"
             " \"max_tokens\": 3, \"temperature\": 0}",
             turn1, answer);
    free(answer);
    int st = post(&A, out, sizeof out, "/v1/chat/completions", body);
    double after = metric(&A, "plume_prompt_tokens_total");
    root = cJSON_Parse(out);
    int p2 = 0, c2, t2, k2 = 0;
    CHECK(st == 200 && usage_of(root, &p2, &c2, &t2, &k2) == 0, "turn 2: %d %s", st, out);
    cJSON_Delete(root);
    CHECK(p1 > 10 && k2 >= p1 && k2 < p2, "turn 2 reused %d of %d prompt tokens; turn 1 had %d", k2, p2, p1);
    CHECK(after - before == p2 - k2, "turn 2 prefilled %.0f tokens, want only the %d new ones", after - before, p2 - k2);
}

/* Another user with the same long system prompt reuses it, even after a long first answer
 * (the slot then holds far more than the shared prefix, and its ring no longer holds the
 * prefix's window): from the last snapshot before the prefix's end (server A keeps one every
 * 64 tokens), never by recomputing inside the scheduler. */
static void test_shared_system_prompt(void) {
    char out[65536], body[4096];
    const char *sys = "You are the shared assistant of this test. Answer every question in one short sentence, please.";
    int p[2] = {0}, c, t, k[2] = {0};
    const char *users[2] = {"first user", "second user"};
    for (int i = 0; i < 2; i++) {
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"system\", \"content\": \"%s\"}, {\"role\": \"user\", \"content\": \"%s\"}],"
                 " \"max_tokens\": %d, \"ignore_eos\": true, \"temperature\": 0}",
                 sys, users[i], i ? 2 : 300);
        CHECK(post(&A, out, sizeof out, "/v1/chat/completions", body) == 200, "request %d: %s", i, out);
        cJSON *root = cJSON_Parse(out);
        usage_of(root, &p[i], &c, &t, &k[i]);
        cJSON_Delete(root);
    }
    int shared = count_tokens("<bos><|turn>system\\nYou are the shared assistant of this test. Answer every question in one "
                              "short sentence, please.<turn|>\\n<|turn>user\\n");
    CHECK(shared >= 64 && k[1] == shared / 64 * 64 && k[1] < p[1], "second user reused %d of %d (shared prefix %d)", k[1],
          p[1], shared);
}

/* Start three long streamed requests on server A and wait until they all run. */
static void others_start(pid_t others[3]) {
    for (int i = 0; i < 3; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "exec curl -s -N -m 60 -o /dev/null http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"other %d\", "
                 "\"max_tokens\": 4000, \"temperature\": 1, \"seed\": %d, \"ignore_eos\": true, \"stream\": true}'",
                 A.port, i, i);
        others[i] = spawn_sh(cmd);
    }
    CHECK(metric_reaches(&A, "plume_slots_busy", 3, 10000), "the 3 other requests never ran together");
}

/* Check that at least one of the others still ran (it spanned the whole compared request: on a
 * loaded host the other two may reach their length first), then hang them up. */
static void others_stop(pid_t others[3]) {
    double still = metric(&A, "plume_slots_busy");
    for (int i = 0; i < 3; i++) {
        kill(others[i], SIGTERM);
        waitpid(others[i], NULL, 0);
    }
    CHECK(still >= 1, "the others finished before the comparison ran (%.0f busy)", still);
}

static void test_deterministic_amid_others(void) {
    char alone[65536], amid[65536], salone[65536], samid[65536];
    const char *greedy = "{\"prompt\": \"The same request\", \"max_tokens\": 48, \"temperature\": 0, \"ignore_eos\": true}";
    const char *seeded = "{\"prompt\": \"A seeded one\", \"max_tokens\": 48, \"temperature\": 0.9, \"seed\": 11, \"ignore_eos\": true}";
    CHECK(post(&A, alone, sizeof alone, "/v1/completions", greedy) == 200, "alone: %s", alone);
    CHECK(post(&A, salone, sizeof salone, "/v1/completions", seeded) == 200, "seeded alone: %s", salone);
    pid_t others[3];
    others_start(others);
    CHECK(post(&A, amid, sizeof amid, "/v1/completions", greedy) == 200, "amid: %s", amid);
    CHECK(post(&A, samid, sizeof samid, "/v1/completions", seeded) == 200, "seeded amid: %s", samid);
    others_stop(others);
    char *a = completion_text(alone), *b = completion_text(amid), *sa = completion_text(salone), *sb = completion_text(samid);
    CHECK(a && b && !strcmp(a, b), "greedy alone '%s' vs amid '%s'", a ? a : "?", b ? b : "?");
    CHECK(sa && sb && !strcmp(sa, sb), "seeded alone '%s' vs amid '%s'", sa ? sa : "?", sb ? sb : "?");
    free(a), free(b), free(sa), free(sb);
    CHECK(metric_reaches(&A, "plume_slots_busy", 0, 3000), "slots not freed after the clients hung up");
}

/* Greedy answers with speculative decoding (server A, --draft 3 by default) are those of a
 * server without it: text, logprobs, finish reason and usage, for completions and chat, with
 * stop strings and max_tokens, plain and streamed; and A did accept and reject guesses. */
static void test_draft_same_answers(void) {
    server N;
    if (server_start(&N, "nodraft", "--parallel 2 --draft 0")) {
        CHECK(0, "the --draft 0 server did not start (log: %s)", N.log);
        return;
    }
    const char *reqs[][2] = {
        {"/v1/completions", "{\"prompt\": \"la la la la la la la la la la\", \"max_tokens\": 80, \"temperature\": 0, "
                            "\"ignore_eos\": true}"},
        {"/v1/completions", "{\"prompt\": \"abc abc abc abc\", \"max_tokens\": 60, \"temperature\": 0, "
                            "\"ignore_eos\": true, \"frequency_penalty\": 1.5}"},
        {"/v1/completions", "{\"prompt\": \"abc abc abc abc\", \"max_tokens\": 40, \"temperature\": 0, \"stop\": [\"a\"]}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"echo echo echo echo\"}], "
                                 "\"max_tokens\": 60, \"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 2}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"go on\"}], \"max_tokens\": 30, "
                                 "\"temperature\": 0, \"ignore_eos\": true, \"stream\": true}"},
    };
    static char a[131072], b[131072];
    for (size_t r = 0; r < sizeof reqs / sizeof *reqs; r++) {
        int sa = post(&A, a, sizeof a, reqs[r][0], reqs[r][1]), sb = post(&N, b, sizeof b, reqs[r][0], reqs[r][1]);
        CHECK(sa == 200 && sb == 200, "request %zu: %d %d %s", r, sa, sb, a);
        if (strstr(reqs[r][1], "\"stream\"")) { /* SSE: compare the content pieces in order */
            char *pa = a, *pb = b;
            int same = 1, n = 0;
            while ((pa = strstr(pa, "\"content\":")) && (pb = strstr(pb, "\"content\":")) && same) {
                char *ea = strchr(pa + 10, '}'), *eb = strchr(pb + 10, '}');
                same = ea && eb && ea - pa == eb - pb && !memcmp(pa, pb, (size_t)(ea - pa));
                pa += 10, pb += 10, n++;
            }
            CHECK(same && n > 3 && !pa == !strstr(pb, "\"content\":"), "request %zu: streams differ", r);
            continue;
        }
        cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
        char *ca = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(ja, "choices"));
        char *cb = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(jb, "choices"));
        int pa, ga, ta, xa, pb, gb, tb, xb;
        CHECK(ca && cb && !strcmp(ca, cb), "request %zu: with drafts\n%s\nwithout\n%s", r, ca ? ca : a, cb ? cb : b);
        CHECK(!usage_of(ja, &pa, &ga, &ta, &xa) && !usage_of(jb, &pb, &gb, &tb, &xb) && pa == pb && ga == gb,
              "request %zu: usage differs", r);
        free(ca), free(cb);
        cJSON_Delete(ja), cJSON_Delete(jb);
    }
    double drafted = metric(&A, "plume_draft_tokens_total"), accepted = metric(&A, "plume_draft_accepted_total");
    CHECK(drafted > accepted && accepted > 0, "drafts: %.0f guessed, %.0f accepted", drafted, accepted);
    CHECK(metric(&N, "plume_draft_tokens_total") == 0, "--draft 0 guessed");
    double secs;
    CHECK(server_stop(&N, &secs) == 0, "the --draft 0 server did not exit cleanly");
}

static void test_metrics_and_tokenize(void) {
    char out[65536];
    CHECK(http(&A, out, sizeof out, "/metrics", "%s", "") == 200 && header_has("text/plain"), "metrics");
    const char *names[] = {"plume_requests_total", "plume_prompt_tokens_total", "plume_generated_tokens_total",
                           "plume_decode_tokens_per_second", "plume_queue_length", "plume_slots_busy", "plume_slots_total",
                           "plume_http_requests_total"};
    for (int i = 0; i < 8; i++) {
        char key[128];
        snprintf(key, sizeof key, "# TYPE %s ", names[i]);
        CHECK(strstr(out, key) && metric(&A, names[i]) >= 0, "metric %s: %s", names[i], out);
    }
    CHECK(metric(&A, "plume_slots_total") == 4 && metric(&A, "plume_generated_tokens_total") > 0, "values: %s", out);
    CHECK(post(&A, out, sizeof out, "/tokenize", "{\"content\": \"hello\"}") == 200, "tokenize: %s", out);
    cJSON *root = cJSON_Parse(out), *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    CHECK(cJSON_GetArraySize(toks) > 0 && cJSON_IsNumber(cJSON_GetArrayItem(toks, 0)), "tokens: %s", out);
    cJSON_DeleteItemFromObject(root, "content");
    char *again = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    CHECK(post(&A, out, sizeof out, "/detokenize", again) == 200 && !strcmp(out, "{\"content\":\"hello\"}"),
          "detokenize: %s", out);
    free(again);
}

/* ---- dialects and the details clients rely on ------------------------------------------------ */

/* Append the answer text one JSON object of a reply holds (a whole reply, a chunk, an event,
 * a line) to acc[cap], by the endpoint's shape: streams count only their deltas. */
static void gather_json(const char *path, cJSON *o, char *acc, size_t cap) {
    const cJSON *t = NULL, *type = cJSON_GetObjectItemCaseSensitive(o, "type"), *x, *c;
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (strstr(path, "/chat/completions")) {
        c = dig(o, "choices", 0, NULL);
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"), "content");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "delta"), "content");
    } else if (strstr(path, "/completions")) {
        t = dig(o, "choices", 0, "text");
    } else if (strstr(path, "/responses")) {
        if (!strcmp(ty, "response.output_text.delta")) t = cJSON_GetObjectItemCaseSensitive(o, "delta");
        const cJSON *output = !*ty ? cJSON_GetObjectItemCaseSensitive(o, "output") : NULL;
        cJSON_ArrayForEach(x, output)
            cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(x, "content")) t = cJSON_GetObjectItemCaseSensitive(c, "text");
    } else if (strstr(path, "/messages")) {
        if (!strcmp(ty, "content_block_delta")) t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "delta"), "text");
        const cJSON *content = !strcmp(ty, "message") ? cJSON_GetObjectItemCaseSensitive(o, "content") : NULL;
        cJSON_ArrayForEach(c, content)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, "text")) t = cJSON_GetObjectItemCaseSensitive(c, "text");
    } else if (strstr(path, "/api/chat")) {
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "message"), "content");
    } else if (strstr(path, "/api/generate")) {
        t = cJSON_GetObjectItemCaseSensitive(o, "response");
    }
    if (cJSON_IsString(t)) strncat(acc, t->valuestring, cap - strlen(acc) - 1);
}

/* The answer text of a reply of the endpoint path, whole or streamed (server-sent events or
 * JSON lines), in acc[cap]; the number of JSON objects read. */
static int answer_text(const char *path, const char *out, char *acc, size_t cap) {
    int n = 0;
    acc[0] = 0;
    for (const char *p = out; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *q = p;
        if (len >= 6 && !strncmp(p, "data: ", 6)) q += 6, len -= 6;
        if (len && *q == '{') {
            cJSON *o = cJSON_ParseWithLength(q, len);
            if (o) gather_json(path, o, acc, cap), n++;
            cJSON_Delete(o);
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* One conversation in each dialect's words, greedy, 24 tokens: [i][0] the path, [i][1] the
 * body (the whole reply), [i][2] the body streamed. */
#define SYS "Be brief."
#define USR "Name a colour."
static const char *const dialect_reqs[][3] = {
    {"/v1/chat/completions",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"" SYS "\"}, {\"role\": \"user\", \"content\": \"" USR "\"}], "
     "\"temperature\": 0, \"max_tokens\": 24",
     ", \"stream\": true"},
    {"/v1/responses", "{\"instructions\": \"" SYS "\", \"input\": \"" USR "\", \"temperature\": 0, \"max_output_tokens\": 24",
     ", \"stream\": true"},
    {"/v1/responses",
     "{\"input\": [{\"role\": \"system\", \"content\": \"" SYS "\"}, {\"type\": \"message\", \"role\": \"user\", "
     "\"content\": [{\"type\": \"input_text\", \"text\": \"" USR "\"}]}], \"temperature\": 0, \"max_output_tokens\": 24",
     ", \"stream\": true"},
    {"/v1/messages", "{\"system\": \"" SYS "\", \"messages\": [{\"role\": \"user\", \"content\": \"" USR "\"}], "
                     "\"temperature\": 0, \"max_tokens\": 24",
     ", \"stream\": true"},
    {"/api/chat",
     "{\"model\": \"tiny\", \"messages\": [{\"role\": \"system\", \"content\": \"" SYS "\"}, {\"role\": \"user\", \"content\": "
     "\"" USR "\"}], \"options\": {\"temperature\": 0, \"num_predict\": 24}, \"stream\": false",
     ", \"stream\": true"},
    {"/api/generate", "{\"model\": \"tiny\", \"system\": \"" SYS "\", \"prompt\": \"" USR "\", \"options\": {\"temperature\": 0, "
                      "\"num_predict\": 24}, \"stream\": false",
     ", \"stream\": true"},
};

/* Dialect request i, whole and streamed, gives want (the OpenAI chat endpoint's greedy text). */
static void dialect_agrees(size_t i, const char *want, const char *when) {
    static char out[262144], body[4096], text[65536];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, "%s%s}", dialect_reqs[i][1], stream ? dialect_reqs[i][2] : "");
        int st = post(&A, out, sizeof out, dialect_reqs[i][0], body);
        int n = answer_text(dialect_reqs[i][0], out, text, sizeof text);
        CHECK(st == 200 && n >= 1 && !strcmp(text, want), "%s: %s %s: %d '%s', want '%s'\n%.600s", when, dialect_reqs[i][0],
              stream ? "streamed" : "whole", st, text, want, out);
    }
}

/* The same greedy text through every dialect, whole and streamed, alone and with three
 * other requests running (started afresh for each dialect, so they still run when its two
 * requests are compared, however slow the machine). */
static void test_dialects_same_greedy(void) {
    static char out[65536], want[65536];
    char body[4096];
    snprintf(body, sizeof body, "%s}", dialect_reqs[0][1]);
    CHECK(post(&A, out, sizeof out, dialect_reqs[0][0], body) == 200, "chat: %s", out);
    answer_text(dialect_reqs[0][0], out, want, sizeof want);
    CHECK(*want, "an empty greedy answer: %s", out);
    size_t n = sizeof dialect_reqs / sizeof *dialect_reqs;
    for (size_t i = 0; i < n; i++) dialect_agrees(i, want, "alone");
    for (size_t i = 0; i < n; i++) {
        pid_t others[3];
        others_start(others);
        dialect_agrees(i, want, "amid 3 others");
        others_stop(others);
        CHECK(metric_reaches(&A, "plume_slots_busy", 0, 3000), "slots not freed after the clients hung up");
    }
}

/* The value of a response header (tmp/headers) in v[cap]; 0 when there is one. */
static int header_value(const char *name, char *v, size_t cap) {
    char path[800], line[512];
    snprintf(path, sizeof path, "%s/headers", tmp);
    FILE *f = fopen(path, "r");
    size_t k = strlen(name);
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        if (!strncasecmp(line, name, k) && line[k] == ':') {
            snprintf(v, cap, "%s", line + k + 1 + (line[k + 1] == ' '));
            v[strcspn(v, "\r\n")] = 0;
            found = 1;
        }
    if (f) fclose(f);
    return found ? 0 : -1;
}

/* Without a seed each sampled request draws one (said in X-Plume-Seed and "seed"): two differ,
 * and the seed given back replays the answer; with a seed, the same answer. Ollama's and the
 * Responses API's seeds too. */
static void test_seeds(void) {
    static char a[65536], b[65536], c[65536], ta[8192], tb[8192], tc[8192];
    char sa[64] = "", sb[64] = "", body[512];
    const char *req = "{\"prompt\": \"Sample me\", \"max_tokens\": 24, \"temperature\": 1, \"ignore_eos\": true";
    snprintf(body, sizeof body, "%s}", req);
    CHECK(post(&A, a, sizeof a, "/v1/completions", body) == 200 && !header_value("X-Plume-Seed", sa, sizeof sa), "first");
    CHECK(post(&A, b, sizeof b, "/v1/completions", body) == 200 && !header_value("X-Plume-Seed", sb, sizeof sb), "second");
    answer_text("/v1/completions", a, ta, sizeof ta);
    answer_text("/v1/completions", b, tb, sizeof tb);
    CHECK(strcmp(sa, sb) && strcmp(ta, tb), "two unseeded requests: seeds %s %s, '%s' vs '%s'", sa, sb, ta, tb);
    cJSON *root = cJSON_Parse(a);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    CHECK(cJSON_IsNumber(seed) && (long long)seed->valuedouble == atoll(sa), "\"seed\" %s vs the header %s", a, sa);
    cJSON_Delete(root);
    snprintf(body, sizeof body, "%s, \"seed\": %s}", req, sa);
    CHECK(post(&A, c, sizeof c, "/v1/completions", body) == 200, "replay");
    answer_text("/v1/completions", c, tc, sizeof tc);
    CHECK(!strcmp(ta, tc), "the seed given back does not replay: '%s' vs '%s'", ta, tc);
    const char *seeded[][2] = {
        {"/api/generate", "{\"prompt\": \"Sample me\", \"raw\": true, \"stream\": false, \"options\": {\"temperature\": 1, "
                          "\"num_predict\": 24, \"seed\": 77}}"},
        {"/v1/responses", "{\"input\": \"Sample me\", \"temperature\": 1, \"max_output_tokens\": 24, \"seed\": 77}"},
    };
    for (int i = 0; i < 2; i++) {
        CHECK(post(&A, a, sizeof a, seeded[i][0], seeded[i][1]) == 200 && post(&A, b, sizeof b, seeded[i][0], seeded[i][1]) == 200,
              "%s: %s", seeded[i][0], a);
        answer_text(seeded[i][0], a, ta, sizeof ta);
        answer_text(seeded[i][0], b, tb, sizeof tb);
        CHECK(*ta && !strcmp(ta, tb) && !header_value("X-Plume-Seed", sa, sizeof sa) && !strcmp(sa, "77"),
              "%s seeded twice: '%s' vs '%s' (seed %s)", seeded[i][0], ta, tb, sa);
    }
}

/* The id /tokenize gives a one-token text, or -1. */
static int token_id(const char *text) {
    char out[4096];
    cJSON *req = cJSON_CreateObject(); /* escaped: a token may be a control character */
    cJSON_AddStringToObject(req, "content", text);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    int st = body ? post(&A, out, sizeof out, "/tokenize", body) : -1;
    free(body);
    if (st != 200) return -1;
    cJSON *root = cJSON_Parse(out), *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    int id = cJSON_GetArraySize(t) == 1 ? cJSON_GetArrayItem(t, 0)->valueint : -1;
    cJSON_Delete(root);
    return id;
}

/* The legacy logprobs of a /v1/completions reply: token_logprobs[i] (NAN for null or absent). */
static double token_logprob(cJSON *root, int i) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(dig(root, "choices", 0, "logprobs"), "token_logprobs"), i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* logit_bias: +100 makes an id every token of a greedy answer, -100 bans the greedy first
 * token; and (the logprobs are those of the raw logits) a token forced by the bias has the
 * log-probability echo gives it as a prompt token, so echo scores a prompt as generation would. */
static void test_logit_bias_and_echo(void) {
    static char out[65536], text[8192];
    int x = token_id("x");
    CHECK(x >= 0, "no id for 'x'");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\": \"abc\", \"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true, "
                                "\"logit_bias\": {\"%d\": 100}}", x);
    CHECK(post(&A, out, sizeof out, "/v1/completions", body) == 200, "boost: %s", out);
    answer_text("/v1/completions", out, text, sizeof text);
    CHECK(!strcmp(text, "xxxxx"), "boosted 'x': '%s'", text);
    const char *plain = "{\"prompt\": \"abc\", \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 1}";
    CHECK(post(&A, out, sizeof out, "/v1/completions", plain) == 200, "plain: %s", out);
    cJSON *root = cJSON_Parse(out);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(dig(root, "choices", 0, "logprobs"), "tokens"), 0);
    char first_tok[256];
    snprintf(first_tok, sizeof first_tok, "%s", cJSON_IsString(first) ? first->valuestring : "");
    int first_id = *first_tok ? token_id(first_tok) : -1;
    cJSON_Delete(root);
    snprintf(body, sizeof body, "{\"prompt\": \"abc\", \"max_tokens\": 1, \"temperature\": 0, \"logit_bias\": {\"%d\": -100}}",
             first_id);
    CHECK(first_id >= 0 && post(&A, out, sizeof out, "/v1/completions", body) == 200, "ban: %s", out);
    answer_text("/v1/completions", out, text, sizeof text);
    CHECK(*text && strcmp(text, first_tok), "banned first token '%s' still first: '%s'", first_tok, text);

    /* echo: the prompt "a b c d" as ids, <bos> added by the server; max_tokens 0 */
    int ids[4] = {token_id("a"), token_id("b"), token_id("c"), token_id("d")};
    snprintf(body, sizeof body, "{\"prompt\": [%d, %d, %d, %d], \"echo\": true, \"logprobs\": 2, \"max_tokens\": 0, "
                                "\"temperature\": 0}", ids[0], ids[1], ids[2], ids[3]);
    CHECK(post(&A, out, sizeof out, "/v1/completions", body) == 200, "echo: %s", out);
    cJSON *echo = cJSON_Parse(out);
    const cJSON *lp = dig(echo, "choices", 0, "logprobs");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(lp, "tokens")) == 4 &&
              cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs")) == 4 &&
              cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), 1)) >= 1 &&
              !strcmp(dig(echo, "choices", 0, "text")->valuestring, "abcd"),
          "echo shape: %s", out);
    for (int i = 0; i < 4; i++) { /* the prefix, with token i forced: its logprob as generated */
        char prefix[256] = "";
        for (int k = 0; k < i; k++) snprintf(prefix + strlen(prefix), sizeof prefix - strlen(prefix), "%s%d", k ? ", " : "", ids[k]);
        snprintf(body, sizeof body, "{\"prompt\": [2%s%s], \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 0, "
                                    "\"logit_bias\": {\"%d\": 100}}", i ? ", " : "", prefix, ids[i]);
        CHECK(post(&A, out, sizeof out, "/v1/completions", body) == 200, "forced %d: %s", i, out);
        cJSON *forced = cJSON_Parse(out);
        double want = token_logprob(forced, 0), got = token_logprob(echo, i);
        CHECK(isfinite(want) && isfinite(got) && fabs(want - got) < 1e-3, "token %d: echo %g, generated %g", i, got, want);
        cJSON_Delete(forced);
    }
    cJSON_Delete(echo);
    /* the prompt given with its <bos>: the first token has no log-probability (null) */
    snprintf(body, sizeof body, "{\"prompt\": [2, %d], \"echo\": true, \"logprobs\": 0, \"max_tokens\": 1, \"temperature\": 0}",
             ids[0]);
    CHECK(post(&A, out, sizeof out, "/v1/completions", body) == 200, "echo with <bos>: %s", out);
    root = cJSON_Parse(out);
    CHECK(isnan(token_logprob(root, 0)) && isfinite(token_logprob(root, 1)) && isfinite(token_logprob(root, 2)) &&
              isnan(token_logprob(root, 3)),
          "null first, then 2 numbers: %s", out);
    cJSON_Delete(root);
    /* vLLM's prompt_logprobs on a chat: one entry per prompt token, the first null */
    CHECK(post(&A, out, sizeof out, "/v1/chat/completions",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 1, \"prompt_logprobs\": 1}") == 200,
          "prompt_logprobs: %s", out);
    root = cJSON_Parse(out);
    int prompt, completion, total, cached;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(root, "prompt_logprobs");
    CHECK(!usage_of(root, &prompt, &completion, &total, &cached) && cJSON_GetArraySize(pl) == prompt &&
              cJSON_IsNull(cJSON_GetArrayItem(pl, 0)) && cJSON_IsObject(cJSON_GetArrayItem(pl, 1)),
          "prompt_logprobs shape: %s", out);
    cJSON_Delete(root);
}

/* n choices share one prefill: n sampled choices, the first as n = 1 gives with the same
 * seed; greedy choices equal; the usage counts the prompt once; streamed, each choice has its
 * index and its finish_reason. */
static void test_n_choices(void) {
    static char out[131072], one[65536];
    const char *req = "{\"prompt\": \"Choose\", \"max_tokens\": 16, \"temperature\": 1, \"seed\": 5, \"ignore_eos\": true";
    char body[512];
    snprintf(body, sizeof body, "%s, \"n\": 3}", req);
    CHECK(post(&A, out, sizeof out, "/v1/completions", body) == 200, "n = 3: %s", out);
    snprintf(body, sizeof body, "%s}", req);
    CHECK(post(&A, one, sizeof one, "/v1/completions", body) == 200, "n = 1: %s", one);
    cJSON *r3 = cJSON_Parse(out), *r1 = cJSON_Parse(one);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r3, "choices");
    const char *t0 = cJSON_GetStringValue(dig(r3, "choices", 0, "text")), *t1 = cJSON_GetStringValue(dig(r3, "choices", 1, "text"));
    const char *t2 = cJSON_GetStringValue(dig(r3, "choices", 2, "text")), *o = cJSON_GetStringValue(dig(r1, "choices", 0, "text"));
    CHECK(cJSON_GetArraySize(c) == 3 && t0 && t1 && t2 && o, "3 choices: %s", out);
    CHECK(t0 && o && !strcmp(t0, o), "choice 0 '%s' is not n = 1's '%s' with the same seed", t0 ? t0 : "?", o ? o : "?");
    CHECK(t0 && t1 && t2 && strcmp(t0, t1) && strcmp(t1, t2), "sampled choices equal: '%s' '%s' '%s'", t0, t1, t2);
    int p3, g3, x3, k3, p1, g1, x1, k1;
    CHECK(!usage_of(r3, &p3, &g3, &x3, &k3) && !usage_of(r1, &p1, &g1, &x1, &k1) && p3 == p1 && g3 == 3 * g1,
          "usage of n = 3: %s", out);
    cJSON_Delete(r3);
    cJSON_Delete(r1);
    CHECK(post(&A, out, sizeof out, "/v1/chat/completions",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 8, \"temperature\": 0, \"n\": 2}") == 200,
          "greedy n = 2: %s", out);
    r3 = cJSON_Parse(out);
    const cJSON *m0 = dig(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r3, "choices"), 0), "message", -1, "content");
    const cJSON *m1 = dig(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r3, "choices"), 1), "message", -1, "content");
    CHECK(cJSON_IsString(m0) && cJSON_IsString(m1) && !strcmp(m0->valuestring, m1->valuestring), "greedy choices differ: %s", out);
    cJSON_Delete(r3);
    CHECK(post(&A, out, sizeof out, "/v1/chat/completions",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 6, \"n\": 2, \"stream\": true, "
               "\"ignore_eos\": true, "
               "\"stream_options\": {\"include_usage\": true}}") == 200,
          "streamed n = 2: %s", out);
    CHECK(strstr(out, "\"index\":0,\"delta\":{\"role\"") && strstr(out, "\"index\":1,\"delta\":{\"role\"") &&
              strstr(out, "\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"") &&
              strstr(out, "\"index\":1,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"") &&
              strstr(out, "\"completion_tokens\":12") && strstr(out, "data: [DONE]\n\n"),
          "streamed choices: %s", out);
}

/* A last assistant message continued: vLLM's continue_final_message, Anthropic's prefill and
 * Ollama's trailing assistant message give the text a raw completion of the rendered prompt
 * without its closing "<turn|>" gives. */
static void test_continue_final(void) {
    static char out[65536], want[8192], text[8192];
    const char *raw = "{\"prompt\": \"<|turn>user\\nhi<turn|>\\n<|turn>model\\nHel\", \"max_tokens\": 8, \"temperature\": 0, "
                      "\"ignore_eos\": true}";
    CHECK(post(&A, out, sizeof out, "/v1/completions", raw) == 200, "raw: %s", out);
    answer_text("/v1/completions", out, want, sizeof want);
    const char *reqs[][2] = {
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                                 "\"Hel\"}], \"continue_final_message\": true, \"add_generation_prompt\": false, "
                                 "\"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                                 "\"Hel\"}], \"add_generation_prompt\": false, \"max_tokens\": 8, \"temperature\": 0, "
                                 "\"ignore_eos\": true}"},
    };
    for (int i = 0; i < 2; i++) {
        CHECK(post(&A, out, sizeof out, reqs[i][0], reqs[i][1]) == 200, "%s: %s", reqs[i][0], out);
        answer_text(reqs[i][0], out, text, sizeof text);
        CHECK(*want && !strcmp(text, want), "continued %d: '%s', raw '%s'", i, text, want);
    }
    /* without ignore_eos the chat parser reads the answer: the same greedy tokens, so the two
     * other dialects agree with the OpenAI chat endpoint */
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"Hel\"}], "
                       "\"continue_final_message\": true, \"add_generation_prompt\": false, \"max_tokens\": 8, \"temperature\": 0}";
    CHECK(post(&A, out, sizeof out, "/v1/chat/completions", chat) == 200, "chat: %s", out);
    answer_text("/v1/chat/completions", out, want, sizeof want);
    const char *others[][2] = {
        {"/v1/messages", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"Hel\"}], "
                         "\"max_tokens\": 8, \"temperature\": 0}"},
        {"/api/chat", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"Hel\"}], "
                      "\"stream\": false, \"options\": {\"num_predict\": 8, \"temperature\": 0}}"},
    };
    for (int i = 0; i < 2; i++) {
        CHECK(post(&A, out, sizeof out, others[i][0], others[i][1]) == 200, "%s: %s", others[i][0], out);
        answer_text(others[i][0], out, text, sizeof text);
        CHECK(!strcmp(text, want), "%s continued: '%s', chat '%s'", others[i][0], text, want);
    }
    int st = post(&A, out, sizeof out, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"continue_final_message\": true, "
                  "\"add_generation_prompt\": false}");
    CHECK(st == 400 && strstr(out, "continue_final_message"), "continuing a user message: %d %s", st, out);
}

/* --cors http://z.example,http://a.example (server A): a preflight from the second is answered, every response to it
 * carries Access-Control-Allow-Origin (streams too); another origin gets nothing. */
static void test_cors(void) {
    char out[65536], v[256];
    int st = http(&A, out, sizeof out, "/v1/chat/completions",
                  "-X OPTIONS -H 'Origin: http://a.example' -H 'Access-Control-Request-Method: POST' "
                  "-H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os'");
    CHECK(st == 204 && !header_value("Access-Control-Allow-Origin", v, sizeof v) && !strcmp(v, "http://a.example") &&
              !header_value("Access-Control-Allow-Headers", v, sizeof v) && strstr(v, "x-stainless-os") &&
              !header_value("Access-Control-Allow-Methods", v, sizeof v) && strstr(v, "POST"),
          "preflight: %d", st);
    st = http(&A, out, sizeof out, "/v1/chat/completions", "-X OPTIONS -H 'Origin: http://b.example'");
    CHECK(st == 403 && header_value("Access-Control-Allow-Origin", v, sizeof v), "preflight from another origin: %d", st);
    st = http(&A, out, sizeof out, "/v1/models", "-H 'Origin: http://a.example'");
    CHECK(st == 200 && !header_value("Access-Control-Allow-Origin", v, sizeof v) && !strcmp(v, "http://a.example") &&
              !header_value("Vary", v, sizeof v),
          "GET from the origin: %d", st);
    st = http(&A, out, sizeof out, "/v1/chat/completions",
              "-H 'Origin: http://a.example' -d '{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2, "
              "\"stream\": true}'");
    CHECK(st == 200 && !header_value("Access-Control-Allow-Origin", v, sizeof v) &&
              !header_value("Access-Control-Expose-Headers", v, sizeof v) && strstr(v, "X-Plume-Seed"),
          "a stream to the origin: %d", st);
    st = http(&A, out, sizeof out, "/v1/models", "-H 'Origin: http://b.example'");
    CHECK(st == 200 && header_value("Access-Control-Allow-Origin", v, sizeof v), "another origin got CORS headers");
    st = http(&A, out, sizeof out, "/v1/models", "%s", "");
    CHECK(st == 200 && header_value("Access-Control-Allow-Origin", v, sizeof v), "no Origin, CORS headers anyway");
}

/* Ollama's endpoints that generate nothing, and a client loading the model; Anthropic's
 * count_tokens agrees with the usage of the same request. */
static void test_model_endpoints(void) {
    static char out[65536];
    CHECK(http(&A, out, sizeof out, "/api/version", "%s", "") == 200 && strstr(out, "\"version\":\""), "version: %s", out);
    CHECK(http(&A, out, sizeof out, "/api/tags", "%s", "") == 200 && strstr(out, "\"name\":\"tiny:latest\"") &&
              strstr(out, "\"quantization_level\":\"Q8_0\"") && strstr(out, "\"digest\":\""),
          "tags: %s", out);
    CHECK(http(&A, out, sizeof out, "/api/ps", "%s", "") == 200 && strstr(out, "\"context_length\":4096"), "ps: %s", out);
    CHECK(post(&A, out, sizeof out, "/api/show", "{\"model\": \"tiny\"}") == 200 && strstr(out, "\"capabilities\":[\"completion\",\"tools\",\"thinking\"]") &&
              strstr(out, "\"gemma4.context_length\":4096"),
          "show: %s", out);
    int st = post(&A, out, sizeof out, "/api/show", "{}");
    CHECK(st == 400 && strstr(out, "{\"error\":\""), "show without a model: %d %s", st, out);
    st = post(&A, out, sizeof out, "/api/embed", "{\"model\": \"tiny\", \"input\": \"a\"}");
    CHECK(st == 400 && strstr(out, "embedding"), "embed: %d %s", st, out);
    st = post(&A, out, sizeof out, "/api/chat", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": false, "
                                                "\"options\": {\"num_ctx\": 8192}}");
    CHECK(st == 400 && strstr(out, "{\"error\":\"'num_ctx' 8192 is more than the server's context of 4096"), "num_ctx: %d %s", st,
          out);
    st = post(&A, out, sizeof out, "/api/generate", "{\"prompt\": \"x\", \"raw\": true, \"stream\": false, \"options\": "
                                                    "{\"num_ctx\": 6, \"num_predict\": -1, \"temperature\": 0}}");
    CHECK(st == 200 && strstr(out, "\"prompt_eval_count\":2,") && strstr(out, "\"eval_count\":4,") &&
              strstr(out, "\"done_reason\":\"length\""),
          "num_ctx 6 leaves 4 tokens after a prompt of 2: %d %s", st, out);
    CHECK(http(&A, out, sizeof out, "/v1/models/tiny", "%s", "") == 200 && strstr(out, "{\"id\":\"tiny\",\"object\":\"model\""),
          "a model: %s", out);
    CHECK(http(&A, out, sizeof out, "/models/gpt-4o", "%s", "") == 200 && strstr(out, "{\"id\":\"gpt-4o\",\"object\":\"model\""),
          "any name: %s", out);
    st = http(&A, out, sizeof out, "/v1/models/a/b", "%s", "");
    CHECK(st == 404, "a path under a model: %d %s", st, out);
    st = post(&A, out, sizeof out, "/api/pull", "{\"model\": \"other\"}"); /* unknown: in Ollama's words */
    CHECK(st == 404 && strstr(out, "{\"error\":\"no such endpoint") && strstr(out, "pull"), "pull: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/messages/batches", "{}");
    CHECK(st == 404 && strstr(out, "\"type\":\"error\"") && strstr(out, "not_found_error"), "batches: %d %s", st, out);
    st = post(&A, out, sizeof out, "/api/generate", "{\"model\": \"tiny\"}");
    CHECK(st == 200 && strstr(out, "\"done\":true") && strstr(out, "\"done_reason\":\"load\""), "load: %d %s", st, out);
    st = post(&A, out, sizeof out, "/api/chat", "{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                                "\"format\": {\"type\": \"array\", \"uniqueItems\": true, \"minItems\": 2}}");
    CHECK(st == 400 && strstr(out, "format") && strstr(out, "uniqueItems"), "format: %d %s", st, out);
    st = post(&A, out, sizeof out, "/v1/messages", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    CHECK(st == 400 && strstr(out, "\"type\":\"error\"") && strstr(out, "invalid_request_error") && strstr(out, "max_tokens"),
          "messages without max_tokens: %d %s", st, out);
    const char *msg = "{\"system\": \"Count.\", \"messages\": [{\"role\": \"user\", \"content\": \"one two three\"}]";
    char body[512];
    snprintf(body, sizeof body, "%s}", msg);
    CHECK(post(&A, out, sizeof out, "/v1/messages/count_tokens", body) == 200, "count: %s", out);
    cJSON *root = cJSON_Parse(out);
    int counted = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "input_tokens"))
                      ? cJSON_GetObjectItemCaseSensitive(root, "input_tokens")->valueint : -1;
    cJSON_Delete(root);
    snprintf(body, sizeof body, "%s, \"max_tokens\": 1}", msg);
    CHECK(post(&A, out, sizeof out, "/v1/messages", body) == 200, "message: %s", out);
    root = cJSON_Parse(out);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    int used = cJSON_GetObjectItemCaseSensitive(u, "input_tokens")->valueint +
               cJSON_GetObjectItemCaseSensitive(u, "cache_read_input_tokens")->valueint;
    CHECK(counted > 3 && counted == used, "count_tokens %d, the message used %d: %s", counted, used, out);
    cJSON_Delete(root);
}

/* A bundle with a vision tower (tiny-a's text weights, tiny-mm-a's tower): Ollama's /api/show
 * lists "vision" (and no "audio"); images sent to /api/chat are still a 400 naming them. */
static void test_show_vision(void) {
    char out[65536], mm[700];
    snprintf(mm, sizeof mm, "%s/mm", tmp);
    CHECK(t_sh(out, sizeof out,
               "mkdir -p %s/hf && for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors tokenizer.json "
               "tokenizer_config.json; do ln -s \"$(cd %s/tiny-a/hf && pwd)/$f\" %s/hf/$f; done && cp %s/tiny-mm-a/hf/* %s/hf/ && "
               "%s/plume convert %s/hf %s/b --weights q8 --quiet",
               mm, t_data(), mm, t_data(), mm, t_build(), mm, mm) == 0,
          "the vision bundle: %s", out);
    server V;
    char flags[800];
    snprintf(flags, sizeof flags, "-m %s/b --parallel 1", mm);
    CHECK(server_start(&V, "v", flags) == 0, "server V did not start");
    if (!V.port) return;
    CHECK(post(&V, out, sizeof out, "/api/show", "{\"model\": \"b\"}") == 200 &&
              strstr(out, "\"capabilities\":[\"completion\",\"tools\",\"thinking\",\"vision\"]"),
          "show: %s", out);
    int st = post(&V, out, sizeof out, "/api/chat", "{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"images\": [\"aGk=\"]}]}");
    CHECK(st == 400 && strstr(out, "messages[0].images"), "images: %d %s", st, out);
    double secs;
    CHECK(server_stop(&V, &secs) == 0, "server V's exit");
}

static void test_auth_and_limits(void) {
    server B;
    CHECK(server_start(&B, "b", "--parallel 1 --queue 0 --api-key sekret --max-body 2000 --isa scalar -t 1 --timeout 1 --cors '*'") == 0, "server B did not start");
    if (!B.port) return;
    char out[65536];
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2}";
    int st = post(&B, out, sizeof out, "/v1/chat/completions", chat);
    CHECK(st == 401 && is_error(out, "invalid_api_key"), "no key: %d %s", st, out);
    st = http(&B, out, sizeof out, "/v1/models", "%s", "-H 'Authorization: Bearer wrong'");
    CHECK(st == 401 && is_error(out, "invalid_api_key"), "wrong key: %d %s", st, out);
    st = http(&B, out, sizeof out, "/v1/chat/completions", "-H 'Authorization: Bearer sekret' -d '%s'", chat);
    CHECK(st == 200, "right key: %d %s", st, out);
    st = http(&B, out, sizeof out, "/v1/messages", "-H 'x-api-key: sekret' -d '{\"messages\": [{\"role\": \"user\", "
              "\"content\": \"hi\"}], \"max_tokens\": 2}'");
    CHECK(st == 200 && strstr(out, "\"type\":\"message\""), "x-api-key: %d %s", st, out);
    st = http(&B, out, sizeof out, "/v1/messages", "-H 'x-api-key: wrong' -d '{\"messages\": [], \"max_tokens\": 2}'");
    CHECK(st == 401 && strstr(out, "authentication_error"), "wrong x-api-key, Anthropic's error: %d %s", st, out);
    /* --cors '*': a preflight from any origin needs no key; a 401 carries the header too, so
     * a page reads the error */
    char v[256];
    st = http(&B, out, sizeof out, "/v1/messages", "-X OPTIONS -H 'Origin: https://any.example' "
              "-H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: x-api-key, anthropic-version'");
    CHECK(st == 204 && !header_value("Access-Control-Allow-Origin", v, sizeof v) && !strcmp(v, "*") &&
              header_value("Vary", v, sizeof v) && !header_value("Access-Control-Allow-Headers", v, sizeof v) &&
              strstr(v, "anthropic-version"),
          "preflight under --cors '*': %d", st);
    st = http(&B, out, sizeof out, "/api/tags", "-H 'Origin: https://other.example'");
    CHECK(st == 401 && !header_value("Access-Control-Allow-Origin", v, sizeof v) && !strcmp(v, "*"), "a 401 to a page: %d", st);
    CHECK(http(&B, out, sizeof out, "/health", "%s", "") == 200, "health needs no key");
    CHECK(http(&B, out, sizeof out, "/", "%s", "") == 200, "the page needs no key");
    /* headers past the connection's memory: refused, the server goes on */
    st = http(&B, out, sizeof out, "/health", "-H \"X-Big: $(head -c 100000 /dev/zero | tr '\\0' a)\"");
    CHECK(st == 431 || st == 413, "huge headers: %d", st);
    /* a connection that sends nothing is closed after --timeout 1 */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = t_sh(out, sizeof out, "timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3'", B.port);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double idle = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK(st == 0 && idle > 0.5 && idle < 5, "idle connection closed after %.1f s (status %d)", idle, st);
    char path[800];
    snprintf(path, sizeof path, "%s/big.json", tmp);
    FILE *f = fopen(path, "wb");
    fputs("{\"prompt\": \"", f);
    for (int i = 0; i < 300; i++) fputs("0123456789", f);
    fputs("\"}", f);
    fclose(f);
    st = http(&B, out, sizeof out, "/v1/completions", "-H 'Authorization: Bearer sekret' --data-binary @%s", path);
    CHECK(st == 413 && is_error(out, "request_too_large"), "body too large: %d %s", st, out);
    st = http(&B, out, sizeof out, "/v1/completions", "-H 'Authorization: Bearer sekret' -H 'Transfer-Encoding: chunked' --data-binary @%s", path);
    CHECK(st == 413 && is_error(out, "request_too_large"), "chunked body too large: %d %s", st, out);

    /* one slot, no queue: while a long stream runs, a second request is turned away */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N -m 0.7 -o /dev/null -H 'Authorization: Bearer sekret' http://127.0.0.1:%d/v1/completions "
             "-d '{\"prompt\": \"long\", \"max_tokens\": 4000, \"ignore_eos\": true, \"stream\": true}'",
             B.port);
    pid_t longer = spawn_sh(cmd);
    int busy = 0;
    for (int i = 0; i < 200 && !busy; i++) {
        char m[8192];
        http(&B, m, sizeof m, "/metrics", "%s", "-H 'Authorization: Bearer sekret'");
        busy = strstr(m, "\nplume_slots_busy 1") != NULL;
        if (!busy) nap(10);
    }
    CHECK(busy, "the long request never took the slot");
    st = http(&B, out, sizeof out, "/v1/completions", "-H 'Authorization: Bearer sekret' -d '{\"prompt\": \"x\"}'");
    CHECK(st == 429 && is_error(out, "queue_full") && header_has("Retry-After: 1"), "queue full: %d %s", st, out);
    /* the client hangs up (curl -m 0.7; the answer takes ~3 s with scalar kernels on one thread): its generation stops and the slot is free at once */
    waitpid(longer, NULL, 0);
    int freed = 0;
    double gen = -1;
    for (int i = 0; i < 50 && !freed; i++) {
        char m[8192];
        http(&B, m, sizeof m, "/metrics", "%s", "-H 'Authorization: Bearer sekret'");
        freed = strstr(m, "\nplume_slots_busy 0") != NULL;
        char *g = strstr(m, "\nplume_generated_tokens_total ");
        if (g) gen = atof(g + strlen("\nplume_generated_tokens_total "));
        if (!freed) nap(20);
    }
    CHECK(freed, "the slot stayed busy after the client hung up");
    CHECK(gen > 0 && gen < 2 + 4000, "generation went on after the hang-up (%.0f tokens)", gen);
    st = http(&B, out, sizeof out, "/v1/completions", "-H 'Authorization: Bearer sekret' -d '{\"prompt\": \"x\", \"max_tokens\": 2}'");
    CHECK(st == 200, "served again: %d %s", st, out);
    double secs = 0;
    CHECK(server_stop(&B, &secs) == 0, "server B exit status");
}

/* Start a stream of max_tokens tokens (ignore_eos, with its usage) on sv into file out; the
 * curl's pid. */
static pid_t stream_start(const server *sv, const char *out, int max_tokens) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "exec curl -s -N -m 120 -o %s http://127.0.0.1:%d/v1/completions "
             "-d '{\"prompt\": \"running\", \"max_tokens\": %d, \"ignore_eos\": true, \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}}'",
             out, sv->port, max_tokens);
    return spawn_sh(cmd);
}

/* Poll /health until it answers 503 {"status":"draining"} (up to ms); whether it did. */
static int health_draining(const server *sv, int ms) {
    char out[4096];
    for (int t = 0; t < ms; t += 20) {
        if (http(sv, out, sizeof out, "/health", "%s", "") == 503 && strstr(out, "\"draining\"")) return 1;
        nap(20);
    }
    return 0;
}

/* Wait up to ms for the server to exit; its exit status (-1: still running, then killed). */
static int server_wait(server *sv, int ms) {
    int st = 0;
    for (int t = 0; t < ms; t += 50) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        nap(50);
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    return -1;
}

static void test_sigterm_and_slot_save(void) {
    server C;
    char flags[800], out[65536], tail[65536], stream[800];
    /* one scalar thread: a stream of 3000 tokens takes over a second, long enough to watch
     * the drain */
    snprintf(flags, sizeof flags, "--parallel 2 --slot-save %s/slots --isa scalar -t 1 --drain 300", tmp);
    CHECK(server_start(&C, "c", flags) == 0, "server C did not start");
    if (!C.port) return;
    const char *req = "{\"prompt\": \"remember this prompt across a restart\", \"max_tokens\": 2, \"temperature\": 0}";
    CHECK(post(&C, out, sizeof out, "/v1/completions", req) == 200, "first: %s", out);
    /* a stream running when SIGTERM comes finishes (the drain): /health says 503 "draining"
     * meanwhile, a new request gets a 503, the stream ends normally, then the server exits 0 */
    snprintf(stream, sizeof stream, "%s/term-stream.txt", tmp);
    pid_t cl = stream_start(&C, stream, 3000);
    CHECK(metric_reaches(&C, "plume_slots_busy", 1, 10000), "the stream never started");
    kill(C.pid, SIGTERM);
    CHECK(health_draining(&C, 5000), "/health never said draining");
    int st = post(&C, out, sizeof out, "/v1/completions", "{\"prompt\": \"late\", \"max_tokens\": 2}");
    CHECK(st == 503 && is_error(out, "shutting_down") && header_has("Retry-After: 1"), "a request while draining: %d %s",
          st, out);
    st = server_wait(&C, 120000);
    CHECK(st == 0, "SIGTERM: status %d", st);
    waitpid(cl, NULL, 0);
    t_sh(tail, sizeof tail, "tail -c 1200 %s", stream);
    CHECK(!strstr(tail, "shutting down") && strstr(tail, "\"finish_reason\":\"length\"") && strstr(tail, "data: [DONE]"),
          "the drained stream's end: %s", tail);
    CHECK(strstr(tail, "\"completion_tokens\":3000,"), "the drained stream's usage: %s", tail);
    CHECK(t_sh(out, sizeof out, "grep -q drained %s", C.log) == 0, "the log says drained");
    CHECK(t_sh(out, sizeof out, "ls %s/slots/slot-0.state %s/slots/slot-1.state", tmp, tmp) == 0, "slot files: %s", out);
    /* restarted, the first request finds its prompt in a slot */
    CHECK(server_start(&C, "c2", flags) == 0, "server C did not restart");
    if (!C.port) return;
    CHECK(post(&C, out, sizeof out, "/v1/completions", req) == 200, "after restart: %s", out);
    cJSON *root = cJSON_Parse(out);
    int p = 0, c, t, k = 0;
    CHECK(usage_of(root, &p, &c, &t, &k) == 0 && k == p - 1, "cached %d of %d after the restart", k, p);
    cJSON_Delete(root);
    /* a second signal during the drain cuts the stream: an error event and [DONE], exit 0 */
    cl = stream_start(&C, stream, 4000);
    CHECK(metric_reaches(&C, "plume_slots_busy", 1, 10000), "the second stream never started");
    kill(C.pid, SIGTERM);
    CHECK(health_draining(&C, 5000), "/health never said draining (second server)");
    double secs = 99;
    st = server_stop(&C, &secs);
    CHECK(st == 0 && secs < 5, "second SIGTERM: status %d after %.1f s", st, secs);
    waitpid(cl, NULL, 0);
    t_sh(tail, sizeof tail, "tail -c 300 %s", stream);
    CHECK(strstr(tail, "shutting down") && strstr(tail, "data: [DONE]"), "the cut stream's end: %s", tail);
    /* --drain 0: the first signal cuts at once */
    snprintf(flags, sizeof flags, "--parallel 1 --isa scalar -t 1 --drain 0");
    CHECK(server_start(&C, "c3", flags) == 0, "server C did not start with --drain 0");
    if (!C.port) return;
    cl = stream_start(&C, stream, 4000);
    CHECK(metric_reaches(&C, "plume_slots_busy", 1, 10000), "the third stream never started");
    st = server_stop(&C, &secs);
    CHECK(st == 0 && secs < 5, "--drain 0: status %d after %.1f s", st, secs);
    waitpid(cl, NULL, 0);
    t_sh(tail, sizeof tail, "tail -c 300 %s", stream);
    CHECK(strstr(tail, "shutting down") && strstr(tail, "data: [DONE]"), "--drain 0: the stream's end: %s", tail);
}

static void test_flags(void) {
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume serve --help", t_build());
    CHECK(st == 0 && strstr(out, "usage: plume serve") && strstr(out, "--parallel"), "--help: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume serve -m %s --parallel 0", t_build(), bundle);
    CHECK(st == 2 && strstr(out, "--parallel"), "bad value: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume serve -m %s --frobnicate 1", t_build(), bundle);
    CHECK(st == 2 && strstr(out, "unknown option '--frobnicate'"), "unknown flag: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume serve -m %s --host localhost", t_build(), bundle);
    CHECK(st == 1 && strstr(out, "numeric"), "host name: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume serve -m %s --drain -1", t_build(), bundle);
    CHECK(st == 2 && strstr(out, "--drain"), "bad --drain: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume serve -m %s/nothing-here", t_build(), tmp);
    CHECK(st == 1 && strstr(out, "plume:"), "no bundle: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "%s/plume --help", t_build()) == 0 && strstr(out, "serve"), "plume --help lists serve");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    tmp = t_tmpdir("serve");
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    char out[4096];
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet", t_build(), t_data(), bundle))
        printf("  setup: %s\n", out);
    if (server_start(&A, "a", "--parallel 4 --snapshot-every 64 --cors http://z.example,http://a.example")) {
        printf("FAIL test_serve: the server did not start (log: %s)\n", A.log);
        return 1;
    }
    RUN(test_flags);
    RUN(test_health_models_page);
    RUN(test_errors);
    RUN(test_chat_reply_and_usage);
    RUN(test_stream_equals_plain);
    RUN(test_grammar);
    RUN(test_formats_refused_at_parse);
    RUN(test_completions_stop);
    RUN(test_tools_and_thinking);
    RUN(test_logprobs);
    RUN(test_growing_conversation_reuses_cache);
    RUN(test_shared_system_prompt);
    RUN(test_deterministic_amid_others);
    RUN(test_draft_same_answers);
    RUN(test_metrics_and_tokenize);
    RUN(test_dialects_same_greedy);
    RUN(test_seeds);
    RUN(test_logit_bias_and_echo);
    RUN(test_n_choices);
    RUN(test_continue_final);
    RUN(test_cors);
    RUN(test_model_endpoints);
    double secs = 0;
    int st = server_stop(&A, &secs);
    if (st != 0) printf("  server A exit status %d\n", st);
    RUN(test_show_vision);
    RUN(test_auth_and_limits);
    RUN(test_sigterm_and_slot_save);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0 || st != 0;
}
