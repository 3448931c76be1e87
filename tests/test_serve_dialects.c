/* test_serve_dialects.c -- the server's other dialects (tools/serve/serve_responses.c,
 * serve_anthropic.c, serve_ollama.c) and the choices of one request (serve_answer.c), linked
 * directly: request bytes in, the internal request or the dialect's error out; answer events
 * in, the bytes each dialect's clients read out (Ollama's JSON lines, the Responses API's and
 * Anthropic's typed events); no socket, no model. Every field a dialect cannot honour is a 400
 * naming it; truncated and corrupted bodies never crash. */
#include "t.h"

#include "serve/serve.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* Parse body in dialect d; the status (0 on success). */
static int parse(serve_request *r, const serve_dialect *d, const char *body, serve_error *e) {
    memset(e, 0, sizeof *e);
    return serve_request_parse(r, d, body, strlen(body), e);
}

/* Expect body refused by d with a 400 about param (NULL: any), whose error body in d's words
 * carries a non-empty message. */
static void expect_400(const serve_dialect *d, const char *body, const char *param) {
    serve_request r;
    serve_error e;
    int st = parse(&r, d, body, &e);
    char *eb = st ? d->error(&e) : NULL;
    cJSON *root = eb ? cJSON_Parse(eb) : NULL;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_IsString(err) ? err : cJSON_GetObjectItemCaseSensitive(err, "message");
    CHECK(st == 400 && (!param || !strcmp(e.param, param)) && cJSON_IsString(msg) && *msg->valuestring,
          "%s %s: status %d, param '%s' (want '%s'), body %s", d->name, body, st, e.param, param ? param : "*",
          eb ? eb : "-");
    cJSON_Delete(root);
    free(eb);
    if (!st) serve_request_free(&r);
}

/* A job of a dialect from a body (parsed, so the request is real), with a fixed head. */
static serve_job *job_of(const serve_dialect *d, const char *body) {
    serve_request r;
    serve_error e;
    int st = parse(&r, d, body, &e);
    CHECK(st == 0, "%s: %s", body, e.message);
    if (st) return NULL;
    serve_job *j = serve_job_new(&r, d);
    snprintf(j->head.id, sizeof j->head.id, "%s-abc", d->id_prefix);
    j->head.model = "tiny";
    j->head.created = 1700000000;
    j->head.n_ids = 7;
    return j;
}

/* Feed one choice: pieces (NULL-terminated), then the end with reason. */
static void run_choice(serve_job *j, int32_t choice, const char *const *pieces, serve_finish reason) {
    serve_answer a;
    char *err = NULL;
    CHECK(serve_answer_init(&a, j, choice, j->head.req.kind == SERVE_CHAT, &err) == 0, "init: %s", err ? err : "");
    int r = 0;
    for (int i = 0; pieces[i] && !r; i++) r = serve_answer_put(&a, pieces[i], strlen(pieces[i]), NULL);
    serve_usage u = {.prompt = 7, .completion = 5, .cached = 3, .prompt_ms = 2, .predicted_ms = 4};
    serve_answer_finish(&a, r ? SERVE_FINISH_STOP : reason, &u); /* as the scheduler ends an answer */
    serve_answer_free(&a);
}

/* The job's bytes as a C string (malloc'd). */
static char *bytes_of(const serve_job *j) {
    return strndup(j->out.p ? j->out.p : "", j->out.len);
}

/* The JSON objects of a stream: each "data: " line or each JSON line, in order, into o[max];
 * their count. */
static int events(const char *out, cJSON **o, int max) {
    int n = 0;
    for (const char *p = out; p && *p && n < max;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *q = p;
        if (len >= 6 && !strncmp(p, "data: ", 6)) q += 6, len -= 6;
        if (len && *q == '{') o[n++] = cJSON_ParseWithLength(q, len);
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* Free n parsed events. */
static void events_free(cJSON **o, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(o[i]);
}

/* o.k1[.k2] as a string, or "". */
static const char *str_at(const cJSON *o, const char *k1, const char *k2) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k1);
    if (k2) v = cJSON_GetObjectItemCaseSensitive(v, k2);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* o.k1[.k2] as a number, or -1. */
static double num_at(const cJSON *o, const char *k1, const char *k2) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k1);
    if (k2) v = cJSON_GetObjectItemCaseSensitive(v, k2);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *const CALL[] = {"<|channel>thought\nhm", "m<channel|>Sunny", " now.",
                                   "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "<turn|>", NULL};

/* ---- Ollama ---------------------------------------------------------------------------------- */

static void test_ollama_requests(void) {
    serve_request r;
    serve_error e;
    const char *chat =
        "{\"model\": \"m:latest\", \"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"q\"},"
        " {\"role\": \"assistant\", \"content\": \"\", \"thinking\": \"t\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
        " \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"content\": \"42\", \"tool_name\": \"f\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"think\": \"high\", \"keep_alive\": \"5m\","
        " \"options\": {\"temperature\": 0.5, \"top_k\": 7, \"top_p\": 0.8, \"min_p\": 0.05, \"seed\": 9, \"num_predict\": 12,"
        " \"num_ctx\": 2048, \"stop\": [\"x\"], \"repeat_penalty\": 1.1, \"repeat_last_n\": 32, \"num_gpu\": 99, \"num_thread\": 4}}";
    int st = parse(&r, &serve_ollama_chat, chat, &e);
    CHECK(st == 0, "chat: %s", e.message);
    if (!st) {
        CHECK(r.kind == SERVE_CHAT && r.stream && r.n_msgs == 4 && !strcmp(r.model, "m:latest"), "stream by default");
        CHECK(r.sp.temperature == 0.5f && r.sp.top_k == 7 && r.sp.top_p == 0.8f && r.sp.min_p == 0.05f &&
                  r.sp.repeat_penalty == 1.1f && r.sp.repeat_last_n == 32, "options");
        CHECK(r.seed_given && r.sp.seed == 9 && r.max_tokens == 12 && r.ctx_limit == 2048 && r.n_stops == 1, "seed, lengths");
        CHECK(r.enable_thinking && r.n_tools == 1 && !r.continue_final, "think, tools");
        const serve_message *a = &r.msgs[2];
        CHECK(a->n_calls == 1 && !strcmp(a->calls[0].name, "f") && !strcmp(a->calls[0].arguments, "{\"a\":1}") &&
                  !strcmp(a->reasoning_content, "t"), "tool call arguments as an object -> JSON text");
        CHECK(!strcmp(r.msgs[3].name, "f"), "tool_name");
        serve_request_free(&r);
    }
    st = parse(&r, &serve_ollama_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                       "\"content\": \"Sure,\"}], \"stream\": false, \"options\": {\"num_predict\": -1}}", &e);
    CHECK(st == 0 && r.continue_final && !r.stream && r.max_tokens < 0, "a trailing assistant message is continued");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_ollama_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                       "\"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]}", &e);
    CHECK(st == 0 && !r.continue_final && r.msgs[1].n_calls == 1, "a trailing assistant message of tool calls is not continued");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_ollama_chat, "{\"model\": \"m\"}", &e);
    CHECK(st == 0 && r.kind == SERVE_LOAD, "no messages: a load");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_ollama_generate, "{\"prompt\": \"why\", \"system\": \"be brief\"}", &e);
    CHECK(st == 0 && r.kind == SERVE_CHAT && r.n_msgs == 2 && !strcmp(r.msgs[0].role, "system") &&
              !strcmp(r.msgs[1].content, "why"), "generate: system and prompt");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_ollama_generate, "{\"prompt\": \"<raw>\", \"raw\": true, \"suffix\": \"\", \"images\": []}", &e);
    CHECK(st == 0 && r.kind == SERVE_COMPLETION && !strcmp(r.prompt, "<raw>"), "generate raw");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_ollama_generate, "{\"model\": \"m\", \"prompt\": \"\"}", &e);
    CHECK(st == 0 && r.kind == SERVE_LOAD, "an empty prompt: a load");
    if (!st) serve_request_free(&r);
#define OM "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]"
    expect_400(&serve_ollama_chat, "{" OM ", \"format\": \"xml\"}", "format");
    expect_400(&serve_ollama_chat, "{" OM ", \"format\": 7}", "format");
    expect_400(&serve_ollama_chat, "{" OM ", \"format\": {\"type\": \"object\", \"minProperties\": 1}}", "format");
    expect_400(&serve_ollama_chat, "{" OM ", \"options\": {\"mirostat\": 2}}", "mirostat");
    expect_400(&serve_ollama_chat, "{" OM ", \"options\": {\"typical_p\": 0.5}}", "typical_p");
    expect_400(&serve_ollama_chat, "{" OM ", \"options\": {\"temperature\": \"hot\"}}", "temperature");
    expect_400(&serve_ollama_chat, "{" OM ", \"options\": {\"stop\": \"x\"}}", "stop");
    expect_400(&serve_ollama_chat, "{" OM ", \"options\": 5}", "options");
    expect_400(&serve_ollama_chat, "{" OM ", \"think\": \"extreme\"}", "think");
    expect_400(&serve_ollama_chat, "{" OM ", \"keep_alive\": []}", "keep_alive");
    /* images are read (serve_media.c: decoded when the prompt is made); not base64: refused here */
    expect_400(&serve_ollama_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"images\": [\"@@\"]}]}",
               "messages[0].images[0]");
    expect_400(&serve_ollama_chat, "{\"messages\": [{\"role\": \"robot\", \"content\": \"q\"}]}", "messages[0].role");
    expect_400(&serve_ollama_chat, "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {}}]}]}",
               "messages[0].tool_calls");
    expect_400(&serve_ollama_generate, "{\"prompt\": \"q\", \"template\": \"{{ .Prompt }}\"}", "template");
    expect_400(&serve_ollama_generate, "{\"prompt\": \"q\", \"context\": [1, 2]}", "context");
    expect_400(&serve_ollama_generate, "{\"prompt\": \"q\", \"suffix\": \"end\"}", "suffix");
#undef OM
}

/* The capabilities /api/show lists of a bundle, as one comma-joined string in out[cap]. */
static void show_caps(const serve_info *m, char *out, size_t cap) {
    serve_error e;
    memset(&e, 0, sizeof e);
    char *s = serve_ollama_show(m, "{\"model\": \"m\"}", strlen("{\"model\": \"m\"}"), &e);
    cJSON *root = s ? cJSON_Parse(s) : NULL, *c;
    out[0] = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "capabilities"))
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", *out ? "," : "", cJSON_IsString(c) ? c->valuestring : "?");
    cJSON_Delete(root);
    free(s);
}

/* /api/show: vision and audio among the capabilities exactly when the bundle has the tower;
 * the model's name and context length in model_info; a body without a model is a 400. */
static void test_ollama_show(void) {
    serve_info m = {.model = "gemma", .weights = "q4", .n_ctx = 4096, .n_vocab = 262144, .n_layers = 35, .modified = 1700000000};
    char caps[256];
    show_caps(&m, caps, sizeof caps);
    CHECK(!strcmp(caps, "completion,tools,thinking"), "text only: %s", caps);
    m.vision = 1;
    show_caps(&m, caps, sizeof caps);
    CHECK(!strcmp(caps, "completion,tools,thinking,vision"), "vision tower: %s", caps);
    m.audio = 1;
    show_caps(&m, caps, sizeof caps);
    CHECK(!strcmp(caps, "completion,tools,thinking,vision,audio"), "both towers: %s", caps);
    m.vision = 0;
    show_caps(&m, caps, sizeof caps);
    CHECK(!strcmp(caps, "completion,tools,thinking,audio"), "audio tower: %s", caps);
    serve_error e;
    memset(&e, 0, sizeof e);
    char *s = serve_ollama_show(&m, "{\"model\": \"gemma\"}", strlen("{\"model\": \"gemma\"}"), &e);
    cJSON *root = s ? cJSON_Parse(s) : NULL;
    const cJSON *info = cJSON_GetObjectItemCaseSensitive(root, "model_info");
    CHECK(num_at(info, "gemma4.context_length", NULL) == 4096 && num_at(info, "gemma4.block_count", NULL) == 35 &&
              !strcmp(str_at(root, "details", "quantization_level"), "Q4_0"),
          "show: %s", s ? s : e.message);
    cJSON_Delete(root);
    free(s);
    memset(&e, 0, sizeof e);
    s = serve_ollama_show(&m, "{}", 2, &e);
    CHECK(!s && e.status == 400 && !strcmp(e.param, "model"), "show without a model: %d %s", e.status, e.message);
    free(s);
}

/* A client loading the model (no messages, no prompt) is told "load"; one unloading it
 * (keep_alive 0, "0", "0s") "unload" (the one model stays loaded). */
static void test_ollama_load_unload(void) {
    static const char *const cases[][2] = {
        {"{\"model\": \"m\"}", "load"},
        {"{\"model\": \"m\", \"keep_alive\": \"5m\"}", "load"},
        {"{\"model\": \"m\", \"keep_alive\": -1}", "load"},
        {"{\"model\": \"m\", \"keep_alive\": 0}", "unload"},
        {"{\"model\": \"m\", \"keep_alive\": \"0\"}", "unload"},
        {"{\"model\": \"m\", \"keep_alive\": \"0s\", \"messages\": []}", "unload"},
        {"{\"model\": \"m\", \"keep_alive\": \"0m\", \"prompt\": \"\"}", "unload"},
    };
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            serve_job *j = job_of(k ? &serve_ollama_generate : &serve_ollama_chat, cases[i][0]);
            if (!j) continue;
            serve_job_load(j);
            char *out = bytes_of(j);
            cJSON *root = cJSON_Parse(out);
            CHECK(j->status == 200 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "done")) &&
                      !strcmp(str_at(root, "done_reason", NULL), cases[i][1]),
                  "%s: %s", cases[i][0], out);
            cJSON_Delete(root);
            free(out);
            serve_job_unref(j);
        }
}

static void test_ollama_replies(void) {
    serve_job *j = job_of(&serve_ollama_chat, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}");
    if (!j) return;
    run_choice(j, 0, CALL, SERVE_FINISH_STOP);
    char *out = bytes_of(j);
    cJSON *ev[32];
    int n = events(out, ev, 32), lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    CHECK(n >= 4 && n == lines && out[strlen(out) - 1] == '\n', "one JSON object per line: %s", out);
    char thinking[256] = "", content[256] = "";
    const cJSON *call = NULL;
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(ev[i], "message");
        strncat(thinking, str_at(m, "thinking", NULL), sizeof thinking - strlen(thinking) - 1);
        strncat(content, str_at(m, "content", NULL), sizeof content - strlen(content) - 1);
        if (cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) call = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), 0);
        CHECK(!strcmp(str_at(ev[i], "model", NULL), "m") && strlen(str_at(ev[i], "created_at", NULL)) == 30 &&
                  cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(ev[i], "done")), "line %d: %s", i, out);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev[i], "done")) == (i == n - 1), "done on the last line only");
    }
    CHECK(!strcmp(thinking, "hmm") && !strcmp(content, "Sunny now."), "thinking '%s', content '%s'", thinking, content);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call, "function"), "arguments");
    CHECK(cJSON_IsObject(args) && !strcmp(str_at(args, "city", NULL), "Paris"), "tool call arguments as an object: %s", out);
    CHECK(!strcmp(str_at(ev[n - 1], "done_reason", NULL), "stop") && num_at(ev[n - 1], "eval_count", NULL) == 5 &&
              num_at(ev[n - 1], "prompt_eval_count", NULL) == 7 && num_at(ev[n - 1], "eval_duration", NULL) == 4e6 &&
              num_at(ev[n - 1], "total_duration", NULL) == 6e6,
          "the done line: counts and durations in nanoseconds: %s", out);
    events_free(ev, n);
    free(out);
    serve_job_unref(j);
    j = job_of(&serve_ollama_generate, "{\"prompt\": \"q\", \"stream\": false}");
    if (!j) return;
    const char *text[] = {"Because", ".", NULL};
    run_choice(j, 0, text, SERVE_FINISH_LENGTH);
    out = bytes_of(j);
    cJSON *root = cJSON_Parse(out);
    CHECK(!strcmp(str_at(root, "response", NULL), "Because.") && !strcmp(str_at(root, "done_reason", NULL), "length") &&
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "done")),
          "generate's reply: %s", out);
    cJSON_Delete(root);
    free(out);
    serve_job_unref(j);
    serve_error e;
    serve_error_set(&e, 400, SERVE_ERR_REQUEST, "x", NULL, "bad x");
    out = serve_ollama_chat.error(&e);
    CHECK(out && !strcmp(out, "{\"error\":\"bad x\"}"), "Ollama's error: %s", out);
    free(out);
}

/* ---- OpenAI Responses ------------------------------------------------------------------------ */

static void test_responses_requests(void) {
    serve_request r;
    serve_error e;
    const char *body =
        "{\"model\": \"m\", \"instructions\": \"be brief\", \"input\": [{\"role\": \"user\", \"content\": \"weather?\"},"
        " {\"type\": \"reasoning\", \"summary\": [], \"encrypted_content\": \"look it up\"},"
        " {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"},"
        " {\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"21\"},"
        " {\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"It is 21.\"}]},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"and \"}, {\"type\": \"input_text\", \"text\": \"Rome?\"}]}],"
        " \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"description\": \"d\", \"parameters\": {\"type\": \"object\"},"
        " \"strict\": true}], \"tool_choice\": {\"type\": \"function\", \"name\": \"get_weather\"}, \"reasoning\": {\"effort\": \"low\"},"
        " \"max_output_tokens\": 99, \"temperature\": 0.3, \"top_p\": 0.5, \"store\": true, \"stream\": true,"
        " \"include\": [\"reasoning.encrypted_content\", \"message.output_text.logprobs\"], \"top_logprobs\": 3,"
        " \"text\": {\"format\": {\"type\": \"text\"}, \"verbosity\": \"medium\"}, \"parallel_tool_calls\": true, \"metadata\": {}}";
    int st = parse(&r, &serve_responses, body, &e);
    CHECK(st == 0, "responses: %s", e.message);
    if (!st) {
        CHECK(r.n_msgs == 6, "messages: %d", r.n_msgs);
        CHECK(!strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[0].content, "be brief"), "instructions first");
        const serve_message *a = &r.msgs[2];
        CHECK(!strcmp(a->role, "assistant") && a->n_calls == 1 && !strcmp(a->calls[0].id, "c1") &&
                  !strcmp(a->calls[0].arguments, "{\"city\":\"Paris\"}") && !strcmp(a->reasoning_content, "look it up"),
              "function_call and reasoning -> the assistant turn");
        CHECK(!strcmp(r.msgs[3].role, "tool") && !strcmp(r.msgs[3].tool_call_id, "c1") && !strcmp(r.msgs[3].content, "21"),
              "function_call_output -> a tool message");
        CHECK(!strcmp(r.msgs[4].role, "assistant") && r.msgs[4].n_parts == 1, "the assistant's answer after the tool");
        CHECK(r.msgs[5].n_parts == 2 && !strcmp(r.msgs[5].parts[1], "Rome?"), "input_text parts");
        CHECK(r.n_tools == 1 && !strcmp(r.tools[0].name, "get_weather") && r.tools[0].parameters &&
                  !strcmp(r.tool_choice, "get_weather"), "tools: %d", r.n_tools);
        CHECK(r.enable_thinking && r.max_tokens == 99 && r.sp.temperature == 0.3f && r.stream && r.logprobs &&
                  r.top_logprobs == 3, "fields");
        serve_request_free(&r);
    }
    st = parse(&r, &serve_responses, "{\"input\": \"hi\"}", &e);
    CHECK(st == 0 && r.n_msgs == 1 && !strcmp(r.msgs[0].role, "user") && !r.stream && r.max_tokens < 0 && !r.enable_thinking,
          "a string input");
    if (!st) serve_request_free(&r);
    expect_400(&serve_responses, "{}", "input");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"previous_response_id\": \"resp_1\"}", "previous_response_id");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"conversation\": \"c\"}", "conversation");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"background\": true}", "background");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"truncation\": \"auto\"}", "truncation");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"json_schema\"}}}", "text.format");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\", "
               "\"schema\": {\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}}}}", "text.format");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"include\": [\"file_search_call.results\"]}", "include");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"tools\": [{\"type\": \"web_search\"}]}", "tools");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"reasoning\": {\"effort\": \"max\"}}", "effort");
    expect_400(&serve_responses, "{\"input\": \"hi\", \"max_output_tokens\": 0}", "max_output_tokens");
    expect_400(&serve_responses, "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"x\"}]}]}",
               "input[0].content[0]"); /* not a data: or http(s) URL */
    expect_400(&serve_responses, "{\"input\": [{\"type\": \"item_reference\", \"id\": \"msg_1\"}]}", "input[0]");
    expect_400(&serve_responses, "{\"input\": [{\"type\": \"web_search_call\"}]}", "input[0]");
    expect_400(&serve_responses, "{\"input\": [{\"type\": \"function_call\", \"name\": \"f\"}]}", "input[0]");
}

static void test_responses_stream(void) {
    serve_job *j = job_of(&serve_responses, "{\"input\": \"q\", \"stream\": true}");
    if (!j) return;
    run_choice(j, 0, CALL, SERVE_FINISH_STOP);
    char *out = bytes_of(j);
    cJSON *ev[64];
    int n = events(out, ev, 64);
    static const char *const want[] = {
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"};
    int nw = (int)(sizeof want / sizeof *want);
    CHECK(n == nw, "%d events, want %d: %s", n, nw, out);
    for (int i = 0; i < n && i < nw; i++) {
        CHECK(!strcmp(str_at(ev[i], "type", NULL), want[i]) && num_at(ev[i], "sequence_number", NULL) == i,
              "event %d: %s (want %s)", i, str_at(ev[i], "type", NULL), want[i]);
        char head[128];
        snprintf(head, sizeof head, "event: %s\ndata: ", want[i]);
        CHECK(strstr(out, head), "the event line of %s", want[i]);
    }
    if (n == nw) {
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(ev[n - 1], "response");
        const cJSON *output = cJSON_GetObjectItemCaseSensitive(resp, "output");
        CHECK(!strcmp(str_at(resp, "status", NULL), "completed") && cJSON_GetArraySize(output) == 3, "completed: %s", out);
        CHECK(!strcmp(str_at(cJSON_GetArrayItem(output, 0), "type", NULL), "reasoning") &&
                  !strcmp(str_at(cJSON_GetArrayItem(output, 0), "encrypted_content", NULL), "hmm") &&
                  !strcmp(str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(output, 1), "content"), 0),
                                 "text", NULL), "Sunny now.") &&
                  !strcmp(str_at(cJSON_GetArrayItem(output, 2), "name", NULL), "get_weather") &&
                  !strcmp(str_at(cJSON_GetArrayItem(output, 2), "arguments", NULL), "{\"city\":\"Paris\"}"),
              "output items: %s", out);
        CHECK(num_at(resp, "usage", "output_tokens") == 5 && num_at(cJSON_GetObjectItemCaseSensitive(resp, "usage"),
                                                                    "input_tokens_details", "cached_tokens") == 3,
              "usage");
        CHECK(!strcmp(str_at(ev[11], "delta", NULL), "Sunny") && !strcmp(str_at(ev[13], "text", NULL), "Sunny now."),
              "text deltas and done");
    }
    events_free(ev, n);
    free(out);
    serve_job_unref(j);
    /* max_output_tokens reached: response.incomplete, and the whole reply says so */
    for (int stream = 0; stream < 2; stream++) {
        j = job_of(&serve_responses, stream ? "{\"input\": \"q\", \"stream\": true}" : "{\"input\": \"q\"}");
        if (!j) return;
        const char *text[] = {"a", "b", NULL};
        run_choice(j, 0, text, SERVE_FINISH_LENGTH);
        out = bytes_of(j);
        CHECK(stream ? strstr(out, "event: response.incomplete\n") != NULL
                     : strstr(out, "\"status\":\"incomplete\"") && strstr(out, "\"reason\":\"max_output_tokens\""),
              "incomplete: %s", out);
        free(out);
        serve_job_unref(j);
    }
}

/* ---- Anthropic Messages ---------------------------------------------------------------------- */

static void test_anthropic_requests(void) {
    serve_request r;
    serve_error e;
    const char *body =
        "{\"model\": \"claude\", \"max_tokens\": 2048, \"system\": [{\"type\": \"text\", \"text\": \"be brief\", \"cache_control\": {}}],"
        " \"messages\": [{\"role\": \"user\", \"content\": \"weather?\"},"
        " {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"hmm\", \"signature\": \"s\"},"
        "  {\"type\": \"text\", \"text\": \"Let me look.\"}, {\"type\": \"tool_use\", \"id\": \"t1\", \"name\": \"get_weather\","
        "  \"input\": {\"city\": \"Paris\"}}]},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t1\", \"content\": [{\"type\": \"text\","
        "  \"text\": \"21\"}]}, {\"type\": \"tool_result\", \"tool_use_id\": \"t2\", \"content\": \"no\", \"is_error\": true},"
        "  {\"type\": \"text\", \"text\": \"and Rome?\"}]}],"
        " \"tools\": [{\"name\": \"get_weather\", \"description\": \"d\", \"input_schema\": {\"type\": \"object\"}}],"
        " \"tool_choice\": {\"type\": \"any\"}, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024},"
        " \"stop_sequences\": [\"END\"], \"temperature\": 0.5, \"top_k\": 9, \"stream\": true, \"metadata\": {\"user_id\": \"u\"}}";
    int st = parse(&r, &serve_anthropic, body, &e);
    CHECK(st == 0, "messages: %s", e.message);
    if (!st) {
        CHECK(r.n_msgs == 6, "messages: %d", r.n_msgs);
        CHECK(!strcmp(r.msgs[0].role, "system") && r.msgs[0].n_parts == 1, "system blocks");
        const serve_message *a = &r.msgs[2];
        CHECK(!strcmp(a->role, "assistant") && a->n_calls == 1 && !strcmp(a->calls[0].id, "t1") &&
                  !strcmp(a->calls[0].arguments, "{\"city\":\"Paris\"}") && !strcmp(a->reasoning_content, "hmm") &&
                  a->n_parts == 1, "thinking, text and tool_use -> the assistant turn");
        CHECK(!strcmp(r.msgs[3].role, "tool") && !strcmp(r.msgs[3].tool_call_id, "t1") && !strcmp(r.msgs[3].content, "21") &&
                  !strcmp(r.msgs[4].content, "Error: no"), "tool_result blocks -> tool messages, is_error marked");
        CHECK(!strcmp(r.msgs[5].role, "user") && r.msgs[5].n_parts == 1, "the text after the results -> a user message");
        CHECK(r.n_tools == 1 && !strcmp(r.tools[0].parameters, "{\"type\":\"object\"}") && !strcmp(r.tool_choice, "required"),
              "tools, tool_choice any -> required");
        CHECK(r.enable_thinking && r.n_stops == 1 && r.max_tokens == 2048 && r.sp.top_k == 9 && r.include_usage &&
                  !r.continue_final, "fields");
        serve_request_free(&r);
    }
    st = parse(&r, &serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"q\"},"
                                     " {\"role\": \"assistant\", \"content\": \"The answer is\"}]}", &e);
    CHECK(st == 0 && r.continue_final, "a last assistant message is a prefill");
    if (!st) serve_request_free(&r);
    st = parse(&r, &serve_anthropic_count, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", &e);
    CHECK(st == 0, "count_tokens needs no max_tokens: %s", e.message);
    if (!st) serve_request_free(&r);
    char *c = serve_anthropic.count(42);
    CHECK(c && !strcmp(c, "{\"input_tokens\":42}"), "count: %s", c);
    free(c);
#define AM "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]"
    expect_400(&serve_anthropic, "{" AM "}", "max_tokens");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5}", "messages");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, \"messages\": []}", "messages");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"q\"}]}", "messages[0]");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]}",
               "messages[0].content[0]");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"temperature\": 1.5}", "temperature");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"w\"}]}",
               "tools");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"tool_choice\": {\"type\": \"sometimes\"}}", "tool_choice");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}}",
               "budget_tokens");
    expect_400(&serve_anthropic, "{\"max_tokens\": 1500, " AM ", \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 2000}}",
               "budget_tokens");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"stop_sequences\": \"END\"}", "stop_sequences");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, " AM ", \"mcp_servers\": [{\"url\": \"x\"}]}", "mcp_servers");
#undef AM
}

static void test_anthropic_stream(void) {
    serve_job *j = job_of(&serve_anthropic, "{\"max_tokens\": 9, \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}");
    if (!j) return;
    run_choice(j, 0, CALL, SERVE_FINISH_STOP);
    char *out = bytes_of(j);
    cJSON *ev[64];
    int n = events(out, ev, 64);
    static const char *const want[] = {
        "message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
    int nw = (int)(sizeof want / sizeof *want);
    CHECK(n == nw, "%d events, want %d: %s", n, nw, out);
    for (int i = 0; i < n && i < nw; i++) {
        char head[128];
        snprintf(head, sizeof head, "event: %s\ndata: ", want[i]);
        CHECK(!strcmp(str_at(ev[i], "type", NULL), want[i]) && strstr(out, head), "event %d: %s (want %s)", i,
              str_at(ev[i], "type", NULL), want[i]);
    }
    if (n == nw) {
        CHECK(!strcmp(str_at(ev[1], "content_block", "type"), "thinking") && num_at(ev[1], "index", NULL) == 0 &&
                  !strcmp(str_at(ev[2], "delta", "type"), "thinking_delta"), "a thinking block first");
        CHECK(!strcmp(str_at(ev[5], "content_block", "type"), "text") && num_at(ev[6], "index", NULL) == 1 &&
                  !strcmp(str_at(ev[6], "delta", "text"), "Sunny"), "then text");
        CHECK(!strcmp(str_at(ev[9], "content_block", "type"), "tool_use") && !strcmp(str_at(ev[9], "content_block", "name"), "get_weather") &&
                  !strcmp(str_at(ev[10], "delta", "type"), "input_json_delta") &&
                  !strcmp(str_at(ev[10], "delta", "partial_json"), "{\"city\":\"Paris\"}"), "then the tool_use");
        CHECK(!strcmp(str_at(ev[12], "delta", "stop_reason"), "tool_use") && num_at(ev[12], "usage", "output_tokens") == 5,
              "message_delta: %s", out);
    }
    events_free(ev, n);
    free(out);
    serve_job_unref(j);
    /* a stop sequence, whole: stop_reason stop_sequence, the string named */
    j = job_of(&serve_anthropic, "{\"max_tokens\": 9, \"stop_sequences\": [\"EN\"], \"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}");
    if (!j) return;
    const char *text[] = {"a", "bc E", "ND", NULL};
    run_choice(j, 0, text, SERVE_FINISH_LENGTH);
    out = bytes_of(j);
    cJSON *root = cJSON_Parse(out);
    CHECK(!strcmp(str_at(root, "stop_reason", NULL), "stop_sequence") && !strcmp(str_at(root, "stop_sequence", NULL), "EN") &&
              !strcmp(str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "content"), 0), "text", NULL), "abc ") &&
              num_at(root, "usage", "input_tokens") == 4 && num_at(root, "usage", "cache_read_input_tokens") == 3,
          "stop_sequence: %s", out);
    cJSON_Delete(root);
    free(out);
    serve_job_unref(j);
    int statuses[] = {400, 401, 404, 413, 429, 500, 503};
    const char *types[] = {"invalid_request_error", "authentication_error", "not_found_error", "request_too_large",
                           "rate_limit_error", "api_error", "overloaded_error"};
    for (int i = 0; i < 7; i++) {
        serve_error e;
        serve_error_set(&e, statuses[i], SERVE_ERR_REQUEST, NULL, NULL, "m");
        char *b = serve_anthropic.error(&e);
        char want_b[160];
        snprintf(want_b, sizeof want_b, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"m\"}}", types[i]);
        CHECK(b && !strcmp(b, want_b), "error %d: %s", statuses[i], b);
        free(b);
    }
}

/* ---- choices ------------------------------------------------------------------------------------ */

/* n choices: the job is done, and DONE or the whole reply written, only when the last ends;
 * the reply lists every choice with its own text and finish; the usage sums them. */
static void test_choices(void) {
    for (int stream = 0; stream < 2; stream++) {
        serve_job *j = job_of(&serve_openai_chat, stream ? "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"n\": 3, "
                                                           "\"stream\": true, \"stream_options\": {\"include_usage\": true}}"
                                                         : "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"n\": 3}");
        if (!j) return;
        const char *t0[] = {"zero", NULL}, *t1[] = {"one", NULL}, *t2[] = {"two", "<turn|>", NULL};
        run_choice(j, 1, t1, SERVE_FINISH_LENGTH);
        CHECK(!j->done, "done after one choice of three");
        run_choice(j, 0, t0, SERVE_FINISH_LENGTH);
        run_choice(j, 2, t2, SERVE_FINISH_LENGTH);
        CHECK(j->done && j->status == 200, "not done after the last choice");
        char *out = bytes_of(j);
        if (stream) {
            CHECK(strstr(out, "\"index\":1,\"delta\":{\"content\":\"one\"}") && strstr(out, "\"index\":2,\"delta\":{\"content\":\"two\"}") &&
                      strstr(out, "\"completion_tokens\":15") && strstr(out, "data: [DONE]\n\n") &&
                      !strstr(strstr(out, "data: [DONE]"), "index"), "stream of 3 choices: %s", out);
        } else {
            cJSON *root = cJSON_Parse(out), *c = cJSON_GetObjectItemCaseSensitive(root, "choices");
            CHECK(cJSON_GetArraySize(c) == 3 && !strcmp(str_at(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, 1), "message"), "content", NULL), "one") &&
                      !strcmp(str_at(cJSON_GetArrayItem(c, 2), "finish_reason", NULL), "stop") &&
                      !strcmp(str_at(cJSON_GetArrayItem(c, 0), "finish_reason", NULL), "length") &&
                      num_at(root, "usage", "completion_tokens") == 15 && num_at(root, "usage", "prompt_tokens") == 7,
                  "reply of 3 choices: %s", out);
            cJSON_Delete(root);
        }
        free(out);
        serve_job_unref(j);
    }
}

/* ---- robustness --------------------------------------------------------------------------------- */

/* Every prefix of a valid body of each dialect, and bodies with one byte changed, give 0 or a
 * 400 (under ASan: no overread, no leak). */
/* At most one tool call, in each dialect's words: parallel_tool_calls false (Responses, which
 * echoes it), Anthropic's tool_choice.disable_parallel_tool_use; a non-boolean is a 400. */
static void test_one_call_fields(void) {
    static const struct { const serve_dialect *d; const char *body; int32_t one; } cases[] = {
        {&serve_responses, "{\"input\": \"q\"}", 0},
        {&serve_responses, "{\"input\": \"q\", \"parallel_tool_calls\": true}", 0},
        {&serve_responses, "{\"input\": \"q\", \"parallel_tool_calls\": false}", 1},
        {&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", 0},
        {&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}], "
                           "\"tool_choice\": {\"type\": \"auto\", \"disable_parallel_tool_use\": true}}", 1},
        {&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}], "
                           "\"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], "
                           "\"tool_choice\": {\"type\": \"any\", \"disable_parallel_tool_use\": false}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        serve_request r;
        serve_error e;
        int st = parse(&r, cases[i].d, cases[i].body, &e);
        CHECK(st == 0 && r.one_call == cases[i].one, "%s: status %d, one_call %d (%s)", cases[i].body, st, st ? -1 : r.one_call,
              e.message);
        if (!st) serve_request_free(&r);
    }
    serve_job *j = job_of(&serve_responses, "{\"input\": \"q\", \"parallel_tool_calls\": false}");
    if (j) {
        const char *pieces[] = {"ok", NULL};
        run_choice(j, 0, pieces, SERVE_FINISH_STOP);
        char *out = bytes_of(j);
        CHECK(strstr(out, "\"parallel_tool_calls\":false"), "echoed: %s", out);
        free(out);
        serve_job_unref(j);
    }
    expect_400(&serve_responses, "{\"input\": \"q\", \"parallel_tool_calls\": \"no\"}", "parallel_tool_calls");
    expect_400(&serve_anthropic, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"q\"}], "
                                 "\"tool_choice\": {\"type\": \"auto\", \"disable_parallel_tool_use\": 1}}",
               "disable_parallel_tool_use");
}

/* The official npm libraries (tests/clients/canned.mjs) read what the writers write for an
 * answer of thought, text and a tool call, whole and streamed, in each dialect: the bytes go
 * to files the script serves through each library's own fetch hook, and the libraries' parsed
 * and accumulated results must hold the call with its arguments (a random model rarely writes
 * a call, so test_clients cannot show this). Skipped, saying why, without node or the
 * packages. */
static void test_libraries_read_calls(void) {
    char out[16384];
    if (t_sh(out, sizeof out, "sh scripts/fetch-test-clients.sh")) {
        printf("SKIP test_libraries_read_calls: the npm client packages cannot be installed: %s", out);
        return;
    }
#define TOOLS_OPENAI "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}]"
#define USER_Q "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]"
    static const struct { const serve_dialect *d; const char *name, *body; } reqs[] = {
        {&serve_openai_chat, "openai", "{" USER_Q ", " TOOLS_OPENAI ", \"stream_options\": {\"include_usage\": true}"},
        {&serve_responses, "responses", "{\"input\": \"q\", \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\"}]"},
        {&serve_anthropic, "anthropic", "{\"max_tokens\": 9, " USER_Q ", \"tools\": [{\"name\": \"get_weather\", \"input_schema\": {}}]"},
        {&serve_ollama_chat, "ollama", "{\"model\": \"m\", " USER_Q ", " TOOLS_OPENAI},
    };
#undef TOOLS_OPENAI
#undef USER_Q
    char *dir = t_tmpdir("canned");
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++)
        for (int stream = 0; stream < 2; stream++) {
            char body[1024], path[900];
            snprintf(body, sizeof body, "%s, \"stream\": %s}", reqs[i].body, stream ? "true" : "false");
            serve_job *j = job_of(reqs[i].d, body);
            if (!j) continue;
            run_choice(j, 0, CALL, SERVE_FINISH_STOP);
            snprintf(path, sizeof path, "%s/%s-%s", dir, reqs[i].name, stream ? "stream" : "whole");
            FILE *f = fopen(path, "wb");
            CHECK(f && fwrite(j->out.p, 1, j->out.len, f) == j->out.len && fclose(f) == 0, "write %s", path);
            serve_job_unref(j);
        }
    int st = t_sh(out, sizeof out, "PLUME_CANNED='%s' timeout 120 node tests/clients/canned.mjs http://127.0.0.1:1", dir);
    CHECK(st == 0, "canned.mjs (exit %d):\n%s", st, out);
    t_sh(out, sizeof out, "rm -rf '%s'", dir);
    free(dir);
}

static void test_truncated_and_corrupt(void) {
    const struct { const serve_dialect *d; const char *body; } cases[] = {
        {&serve_ollama_chat, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\","
                             " \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1]}}}]}],"
                             " \"options\": {\"seed\": 1, \"stop\": [\"x\"], \"num_ctx\": 99}, \"think\": true}"},
        {&serve_ollama_generate, "{\"prompt\": \"p\", \"system\": \"s\", \"raw\": false, \"options\": {\"num_predict\": 4}}"},
        {&serve_responses, "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"a\"}]},"
                           " {\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"f\", \"arguments\": \"{}\"},"
                           " {\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": \"o\"}], \"instructions\": \"i\","
                           " \"tools\": [{\"type\": \"function\", \"name\": \"f\"}]}"},
        {&serve_anthropic, "{\"max_tokens\": 5, \"system\": \"s\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\","
                           " \"text\": \"a\"}]}, {\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"t\","
                           " \"name\": \"f\", \"input\": {}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\","
                           " \"tool_use_id\": \"t\", \"content\": \"r\"}]}], \"stop_sequences\": [\"x\"]}"},
    };
    int bad = 0;
    uint64_t rng = 11;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n = strlen(cases[c].body);
        char *buf = malloc(n);
        for (size_t len = 0; len <= n; len++) {
            memcpy(buf, cases[c].body, len); /* exactly len bytes, no NUL */
            serve_request r;
            serve_error e = {0};
            int st = serve_request_parse(&r, cases[c].d, buf, len, &e);
            if (st == 0) serve_request_free(&r);
            else if (st != 400 || !*e.message) bad++;
            if (len == n && st) {
                CHECK(0, "%s: the whole body refused: %s", cases[c].d->name, e.message);
            }
        }
        for (int i = 0; i < 1500; i++) {
            memcpy(buf, cases[c].body, n);
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            buf[(rng >> 33) % n] = (char)(rng >> 13);
            serve_request r;
            serve_error e = {0};
            int st = serve_request_parse(&r, cases[c].d, buf, n, &e);
            if (st == 0) serve_request_free(&r);
            else if (st != 400 || !*e.message) bad++;
        }
        free(buf);
    }
    CHECK(bad == 0, "%d bodies gave neither a request nor a 400", bad);
}

int main(void) {
    RUN(test_ollama_requests);
    RUN(test_ollama_show);
    RUN(test_ollama_load_unload);
    RUN(test_ollama_replies);
    RUN(test_responses_requests);
    RUN(test_responses_stream);
    RUN(test_anthropic_requests);
    RUN(test_anthropic_stream);
    RUN(test_choices);
    RUN(test_one_call_fields);
    RUN(test_libraries_read_calls);
    RUN(test_truncated_and_corrupt);
    return t_total_failed != 0;
}
