/* test_serve_req.c -- the server's request parser (tools/serve/serve_request.c) and OpenAI
 * dialect (serve_openai.c), linked directly: bytes in, a request or an OpenAI-shaped error out;
 * answer events in, reply bytes out; no socket, no model.
 * Every bad field gives a 400 naming it; truncated and corrupted bodies never crash. */
#include "t.h"

#include "serve/serve.h"

/* The OpenAI dialect of a kind. */
static const serve_dialect *dialect_of(serve_kind kind) {
    return kind == SERVE_CHAT ? &serve_openai_chat : &serve_openai_completion;
}

/* Parse body as kind; the status (0 on success). */
static int parse(serve_request *r, serve_kind kind, const char *body, serve_error *e) {
    return serve_request_parse(r, dialect_of(kind), body, strlen(body), e);
}

/* The OpenAI body of an error (static buffer, for messages and checks). */
static const char *body_of(const serve_error *e) {
    static char buf[4096];
    char *s = serve_openai_chat.error(e);
    snprintf(buf, sizeof buf, "%s", s ? s : "(out of memory)");
    free(s);
    return buf;
}

/* Whether e is a 400 whose JSON is {"error": {"message": ..., "type": ..., "param": param}}. */
static int is_400(const serve_error *e, const char *param) {
    if (e->status != 400) return 0;
    cJSON *root = cJSON_Parse(body_of(e));
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(err, "type");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(err, "param");
    int ok = cJSON_IsString(msg) && *msg->valuestring && cJSON_IsString(type) &&
             cJSON_GetObjectItemCaseSensitive(err, "code") &&
             (param ? cJSON_IsString(p) && !strcmp(p->valuestring, param) : cJSON_IsNull(p));
    cJSON_Delete(root);
    return ok;
}

/* Expect body (chat) to be refused with a 400 about param. */
static void expect_400(const char *body, const char *param) {
    serve_request r;
    serve_error e = {0};
    int st = parse(&r, SERVE_CHAT, body, &e);
    CHECK(st == 400 && is_400(&e, param), "%s: status %d, %s", body, st, body_of(&e));
}

static void test_chat_fields(void) {
    serve_request r;
    serve_error e = {0};
    const char *body =
        "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
        "   \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}], \"reasoning_content\": \"hmm\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}],"
        " \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"max_completion_tokens\": 7,"
        " \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 5, \"min_p\": 0.1, \"presence_penalty\": 0.5,"
        " \"frequency_penalty\": -0.5, \"seed\": 42, \"stop\": [\"x\", \"yz\"], \"logprobs\": true, \"top_logprobs\": 3,"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
        " \"tool_choice\": \"required\", \"reasoning_effort\": \"high\", \"user\": \"ignored\", \"modalities\": [\"text\"],"
        " \"audio\": null, \"functions\": null}";
    int st = parse(&r, SERVE_CHAT, body, &e);
    CHECK(st == 0, "parse: %s", body_of(&e));
    if (st) return;
    CHECK(r.n_msgs == 4 && !r.msgs[1].content && r.msgs[1].n_parts == 2 && !strcmp(r.msgs[1].parts[1], "b"),
          "content parts kept");
    CHECK(!r.msgs[2].content && r.msgs[2].n_calls == 1 && !strcmp(r.msgs[2].calls[0].name, "f") &&
              !strcmp(r.msgs[2].calls[0].id, "c1") && !strcmp(r.msgs[2].calls[0].arguments, "{}"),
          "tool calls kept");
    CHECK(r.msgs[2].reasoning_content && !strcmp(r.msgs[2].reasoning_content, "hmm"), "reasoning kept");
    CHECK(!strcmp(r.msgs[3].role, "tool") && !strcmp(r.msgs[3].tool_call_id, "c1"), "tool message");
    CHECK(r.stream && r.include_usage && r.max_tokens == 7, "stream, usage, max tokens");
    CHECK(r.sp.temperature == 0.5f && r.sp.top_p == 0.9f && r.sp.top_k == 5 && r.sp.min_p == 0.1f, "sampling");
    CHECK(r.sp.presence_penalty == 0.5f && r.sp.frequency_penalty == -0.5f && r.sp.seed == 42, "penalties, seed");
    CHECK(r.n_stops == 2 && !strcmp(r.stops[1], "yz"), "stops");
    CHECK(r.logprobs == 1 && r.top_logprobs == 3, "logprobs");
    CHECK(r.n_tools == 1 && !strcmp(r.tools[0].name, "f") && !strcmp(r.tool_choice, "required"), "tools");
    CHECK(r.enable_thinking == 1 && !strcmp(r.model, "m"), "thinking, model");
    serve_request_free(&r);

    st = parse(&r, SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stop\": \"\\n\","
               " \"chat_template_kwargs\": {\"enable_thinking\": true}}", &e);
    CHECK(st == 0 && r.n_stops == 1 && !strcmp(r.stops[0], "\n") && r.enable_thinking, "stop string, kwargs");
    CHECK(st == 0 && r.max_tokens < 0 && !r.seed_given && r.n == 1 && r.prompt_logprobs < 0 && !r.continue_final && !r.stream, "defaults");
    CHECK(st == 0 && r.sp.temperature == 1.0f && r.sp.top_k == 64, "the model's sampling defaults");
    serve_request_free(&r);
}

/* Formats (docs/STRUCTURED.md): each surface compiles to req.grammar; text and auto leave
 * none; a forced tool_choice replaces a response format or a grammar; llama-server's
 * "grammar" is taken as given ("" and null: none). */
#define FMSG "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"
static void test_formats(void) {
    static const struct { const char *body, *in_grammar; } ok[] = {
        {"{" FMSG ", \"response_format\": {\"type\": \"text\"}}", NULL},
        {"{" FMSG ", \"response_format\": {\"type\": \"json_object\"}}", "root"},
        {"{" FMSG ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", \"strict\": true, "
         "\"schema\": {\"type\": \"object\", \"properties\": {\"zq\": {\"type\": \"integer\"}}}}}}", "zq"},
        {"{" FMSG ", \"json_schema\": {\"enum\": [\"xyzzy\"]}}", "xyzzy"},
        {"{" FMSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"auto\"}", NULL},
        {"{" FMSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"fn_q\"}}], \"tool_choice\": \"required\", "
         "\"response_format\": {\"type\": \"json_object\"}}", "fn_q"},
        {"{" FMSG ", \"grammar\": \"root ::= [a-c]+ \\\"!\\\"\"}", "root ::= [a-c]+"},
        {"{" FMSG ", \"grammar\": \"\"}", NULL},
        {"{" FMSG ", \"grammar\": null, \"response_format\": {\"type\": \"text\"}}", NULL},
        {"{" FMSG ", \"grammar\": \"root ::= \\\"x\\\"\", \"response_format\": {\"type\": \"text\"}}", "root ::= \"x\""},
        {"{" FMSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"fn_g\"}}], \"tool_choice\": \"required\", "
         "\"grammar\": \"root ::= \\\"x\\\"\"}", "fn_g"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        serve_request r;
        serve_error e = {0};
        int st = parse(&r, SERVE_CHAT, ok[i].body, &e);
        CHECK(st == 0 && (ok[i].in_grammar ? r.grammar && strstr(r.grammar, ok[i].in_grammar) : !r.grammar), "%s: %d %s %s",
              ok[i].body, st, body_of(&e), st == 0 && r.grammar ? r.grammar : "(no grammar)");
        CHECK(st || r.grammar_given == (strstr(ok[i].body, "\"grammar\": \"root") && !strstr(ok[i].body, "tool_choice")),
              "%s: grammar_given %d", ok[i].body, r.grammar_given);
        if (!st) serve_request_free(&r);
    }
}
#undef FMSG

/* Issue 44: a schema's numbers reach the constraint compiler as the client wrote them, on
 * every surface that takes one (cJSON's doubles round 9007199254740993 to ...992 and print
 * 0.30000000000000004 as 0.3); a tool's parameters keep them too. */
#define NUMS "{\"enum\": [9007199254740993, 0.30000000000000004, 1.5e3]}"
static void test_exact_numbers(void) {
    static const struct { const serve_dialect *d; const char *body; } ok[] = {
        {&serve_openai_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": "
                             "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"schema\": " NUMS "}}}"},
        {&serve_openai_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"json_schema\": " NUMS "}"},
        {&serve_anthropic, "{\"model\": \"m\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                           "\"output_config\": {\"format\": {\"type\": \"json_schema\", \"schema\": " NUMS "}}}"},
        {&serve_responses, "{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"n\", "
                           "\"schema\": " NUMS "}}}"},
        {&serve_ollama_chat, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"format\": " NUMS "}"},
        {&serve_openai_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": \"function\", "
                             "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": "
                             NUMS "}, \"required\": [\"a\"]}}}], \"tool_choice\": \"required\"}"},
    };
    static const char *const want[] = {"9007199254740993", "0.30000000000000004", "1.5e3"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        serve_request r;
        serve_error e = {0};
        int st = serve_request_parse(&r, ok[i].d, ok[i].body, strlen(ok[i].body), &e);
        CHECK(st == 0 && r.grammar, "%s: %d %s", ok[i].body, st, body_of(&e));
        if (st) continue;
        for (size_t k = 0; k < 3; k++)
            CHECK(r.grammar && strstr(r.grammar, want[k]), "%s: the grammar lacks %s: %s", ok[i].body, want[k],
                  r.grammar ? r.grammar : "(none)");
        if (r.n_tools) CHECK(strstr(r.tools[0].parameters, "9007199254740993"), "parameters %s", r.tools[0].parameters);
        serve_request_free(&r);
    }
    char *s = NULL; /* the kept text through duplicates, nesting, escapes and white space */
    const char *body = "{\"a\": 1, \"a\" : [ {\"k\\\"]\": 12345678901234567890} , -0.0, 1E+400 ], \"b\": true}";
    serve_error e = {0};
    cJSON *root = serve_json_object(body, strlen(body), &e);
    CHECK(root && (s = serve_json_exact(root)) && !strcmp(s, "{\"a\":[{\"k\\\"]\":12345678901234567890},-0.0,1E+400],\"b\":true}"),
          "exact text %s", s ? s : "(none)");
    free(s);
    cJSON_Delete(root);
}
#undef NUMS

static void test_chat_errors(void) {
    expect_400("{\"messages\": ", NULL);
    expect_400("[1, 2]", NULL);
    expect_400("", NULL);
    expect_400("{}", "messages");
    expect_400("{\"messages\": []}", "messages");
    expect_400("{\"messages\": \"hi\"}", "messages");
    expect_400("{\"messages\": [5]}", "messages[0]");
    expect_400("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "messages[0].role");
    expect_400("{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role");
    expect_400("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\"}]}", "messages[1].content");
    expect_400("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages[0].content");
    expect_400("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
               "messages[0].content[0]");
    expect_400("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": 1}]}]}", "messages[0].tool_calls");
#define MSG "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"
    expect_400("{" MSG ", \"temperature\": \"hot\"}", "temperature");
    expect_400("{" MSG ", \"temperature\": 3}", "temperature");
    expect_400("{" MSG ", \"top_p\": 1.5}", "top_p");
    expect_400("{" MSG ", \"top_k\": 2.5}", "top_k");
    expect_400("{" MSG ", \"max_tokens\": 0}", "max_tokens");
    expect_400("{" MSG ", \"max_tokens\": \"10\"}", "max_tokens");
    expect_400("{" MSG ", \"max_completion_tokens\": -3}", "max_completion_tokens");
    expect_400("{" MSG ", \"stream\": \"yes\"}", "stream");
    expect_400("{" MSG ", \"stream_options\": {\"include_usage\": 1}}", "include_usage");
    expect_400("{" MSG ", \"n\": 9}", "n");
    expect_400("{" MSG ", \"n\": 0}", "n");
    expect_400("{" MSG ", \"seed\": 1.5}", "seed");
    expect_400("{" MSG ", \"stop\": 5}", "stop");
    expect_400("{" MSG ", \"stop\": [\"\"]}", "stop");
    expect_400("{" MSG ", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}",
               "stop");
    expect_400("{" MSG ", \"top_logprobs\": 2}", "top_logprobs");
    expect_400("{" MSG ", \"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs");
    expect_400("{" MSG ", \"tools\": {}}", "tools");
    expect_400("{" MSG ", \"tools\": [{\"type\": \"retrieval\"}]}", "tools");
    expect_400("{" MSG ", \"tool_choice\": \"sometimes\"}", "tool_choice");
    expect_400("{" MSG ", \"reasoning_effort\": \"extreme\"}", "reasoning_effort");
    expect_400("{" MSG ", \"chat_template_kwargs\": {\"enable_thinking\": \"yes\"}}", "enable_thinking");
    expect_400("{" MSG ", \"response_format\": {\"type\": \"xml\"}}", "response_format");
    expect_400("{" MSG ", \"response_format\": {\"type\": \"json_schema\"}}", "response_format");
    expect_400("{" MSG ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"u\", "
               "\"schema\": {\"type\": \"array\", \"uniqueItems\": true, \"minItems\": 2}}}}", "response_format");
    expect_400("{" MSG ", \"json_schema\": {\"not\": {}}}", "json_schema");
    expect_400("{" MSG ", \"grammar\": 5}", "grammar");
    expect_400("{" MSG ", \"grammar\": \"root ::= \\\"a\"}", "grammar");          /* unterminated */
    expect_400("{" MSG ", \"grammar\": \"start ::= \\\"a\\\"\"}", "grammar");   /* no root */
    expect_400("{" MSG ", \"grammar\": \"root ::= x\"}", "grammar");                /* x undefined */
    expect_400("{" MSG ", \"grammar\": \"root ::= \\\"a\\\"\", \"response_format\": {\"type\": \"json_object\"}}", "grammar");
    expect_400("{" MSG ", \"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {\"type\": \"string\"}}", "grammar");
    expect_400("{" MSG ", \"grammar\": \"root ::= \\\"a\\\"\", \"ignore_eos\": true}", "ignore_eos");
    expect_400("{" MSG ", \"tool_choice\": \"required\"}", "tool_choice");
    expect_400("{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
               "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}", "tool_choice");
    expect_400("{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
               "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"uniqueItems\": true, \"minItems\": 2}}}}}], "
               "\"tool_choice\": \"required\"}", "tools");
    expect_400("{" MSG ", \"ignore_eos\": true, \"response_format\": {\"type\": \"json_object\"}}", "ignore_eos");
    expect_400("{" MSG ", \"model\": 7}", "model");
    expect_400("{" MSG ", \"modalities\": [\"text\", \"audio\"]}", "modalities");
    expect_400("{" MSG ", \"modalities\": \"text\"}", "modalities");
    expect_400("{" MSG ", \"audio\": {\"voice\": \"alloy\", \"format\": \"wav\"}}", "audio");
    expect_400("{" MSG ", \"functions\": [{\"name\": \"f\"}]}", "functions");
    expect_400("{" MSG ", \"function_call\": \"auto\"}", "function_call");
    expect_400("{" MSG ", \"web_search_options\": {}}", "web_search_options");
    expect_400("{" MSG ", \"parallel_tool_calls\": 0}", "parallel_tool_calls");
    serve_request r;
    serve_error e = {0};
    const char bad[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}";
    CHECK(parse(&r, SERVE_CHAT, bad, &e) == 400 && strstr(body_of(&e), "UTF-8"), "invalid UTF-8: %s", body_of(&e));
#undef MSG
}

/* Issue 40's request fields: duplicate keys take the last (as Python's and JavaScript's JSON
 * parsers do, so a validating proxy in front sees the request plume runs), in nested objects
 * and inside arrays too; a logit_bias key that is not plain digits (" 5", "+5"); a schema of
 * null; a tool whose parameters cannot describe an object (an enum of non-objects: the call's
 * markup came back as text). */
static void test_issue40_fields(void) {
#define MSG "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"
    serve_request r;
    serve_error e = {0};
    int st = parse(&r, SERVE_CHAT,
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"first\", \"content\": \"last\"}], "
                   "\"max_tokens\": 1, \"temperature\": 0.2, \"max_tokens\": 7, \"max_tokens\": 9, \"stop\": [\"x\"], "
                   "\"response_format\": {\"type\": \"text\", \"type\": \"json_object\"}}",
                   &e);
    CHECK(st == 0 && r.max_tokens == 9 && r.n_msgs == 1 && r.msgs[0].content && !strcmp(r.msgs[0].content, "last") &&
              r.grammar && r.sp.temperature == 0.2f,
          "duplicates: status %d, max_tokens %d, content '%s', grammar %s: %s", st, r.max_tokens,
          st == 0 && r.msgs[0].content ? r.msgs[0].content : "-", st == 0 && r.grammar ? "set" : "none", body_of(&e));
    if (!st) serve_request_free(&r);
    st = parse(&r, SERVE_CHAT, "{" MSG ", \"max_tokens\": 3, \"max_tokens\": 0}", &e);
    CHECK(st == 400 && is_400(&e, "max_tokens"), "the last max_tokens (0) is the one checked: %d", st);
    if (!st) serve_request_free(&r);
    expect_400("{" MSG ", \"logit_bias\": {\" 5\": 1}}", "logit_bias");
    expect_400("{" MSG ", \"logit_bias\": {\"+5\": 1}}", "logit_bias");
    expect_400("{" MSG ", \"logit_bias\": {\"5 \": 1}}", "logit_bias");
    st = parse(&r, SERVE_CHAT, "{" MSG ", \"logit_bias\": {\"5\": 1, \"0\": -2}}", &e);
    CHECK(st == 0 && r.n_bias == 2, "plain ids: %d %s", st, body_of(&e));
    if (!st) serve_request_free(&r);
    expect_400("{" MSG ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", "
               "\"schema\": null}}}", "response_format");
    static const char *const not_objects[] = {"{\"enum\": [1, 2]}", "{\"enum\": [\"a\", null]}", "{\"const\": 5}",
                                              "{\"type\": \"string\"}", "{\"type\": [\"string\", \"null\"]}"};
    for (int i = 0; i < 5; i++) {
        char body[512];
        for (int forced = 0; forced < 2; forced++) {
            snprintf(body, sizeof body,
                     "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": %s}}]%s}",
                     not_objects[i], forced ? ", \"tool_choice\": \"required\"" : "");
            expect_400(body, "tools");
        }
    }
    st = parse(&r, SERVE_CHAT,
               "{" MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
               "{\"enum\": [{\"a\": 1}, 2]}}}], \"tool_choice\": \"required\"}",
               &e);
    CHECK(st == 0, "an enum holding an object: %s", body_of(&e));
    if (!st) serve_request_free(&r);
#undef MSG
}

/* A schema `levels` deep ({"type": "object", "properties": {"a": ...}} around a string), malloc'd. */
static char *deep_schema(int levels) {
    plume_buf b = {0};
    for (int i = 0; i < levels; i++) plume_buf_puts(&b, "{\"type\": \"object\", \"required\": [\"a\"], \"properties\": {\"a\": ");
    plume_buf_puts(&b, "{\"type\": \"string\"}");
    for (int i = 0; i < levels; i++) plume_buf_puts(&b, "}}");
    plume_buf_put(&b, "", 1);
    return plume_buf_take(&b);
}

/* A tools schema as deep as a response format's may be (50 levels) is read and rendered like
 * it; one deeper than the schema compiler follows is a 400 naming 'tools' with a code, as a
 * response format's is refused. */
static void test_deep_tools_schema(void) {
    serve_request r;
    serve_error e = {0};
    char *s50 = deep_schema(50), *s150 = deep_schema(150);
    char *tools = plume_sprintf("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": "
                                "\"function\", \"function\": {\"name\": \"f\", \"parameters\": %s}}]}", s50);
    char *rf = plume_sprintf("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": {\"type\": "
                             "\"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": %s}}}", s50);
    int st = parse(&r, SERVE_CHAT, rf, &e);
    CHECK(st == 0, "a 50-level response format: %s", body_of(&e));
    if (!st) serve_request_free(&r);
    st = parse(&r, SERVE_CHAT, tools, &e);
    CHECK(st == 0, "a 50-level tools schema: %s", body_of(&e));
    if (!st) {
        char *text = NULL;
        int32_t in_thought = 0;
        int rc = serve_chat_render(&r, &text, &in_thought, &e);
        CHECK(rc == 0 && text && strstr(text, "declaration:f"), "a 50-level tools schema renders: %s", body_of(&e));
        free(text);
        serve_request_free(&r);
    }
    free(tools);
    tools = plume_sprintf("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": "
                          "\"function\", \"function\": {\"name\": \"f\", \"parameters\": %s}}]}", s150);
    st = parse(&r, SERVE_CHAT, tools, &e);
    CHECK(st == 400 && is_400(&e, "tools") && strstr(body_of(&e), "\"code\":\"invalid_value\""),
          "a 150-level tools schema: %d %s", st, body_of(&e));
    if (!st) serve_request_free(&r);
    free(tools);
    free(rf);
    free(s50);
    free(s150);
}

static void test_completion_fields(void) {
    serve_request r;
    serve_error e = {0};
    int st = parse(&r, SERVE_COMPLETION, "{\"prompt\": \"Once upon\", \"temperature\": 0}", &e);
    CHECK(st == 0 && !strcmp(r.prompt, "Once upon") && r.max_tokens == 16 && r.sp.temperature == 0, "prompt: %s", body_of(&e));
    if (!st) serve_request_free(&r);
    st = parse(&r, SERVE_COMPLETION, "{\"prompt\": [\"one\"], \"max_tokens\": 3, \"echo\": false, \"best_of\": 1}", &e);
    CHECK(st == 0 && !strcmp(r.prompt, "one") && r.max_tokens == 3, "a list of one prompt: %s", body_of(&e));
    if (!st) serve_request_free(&r);
    const char *bad[][2] = {{"{}", "prompt"}, {"{\"prompt\": [\"a\", \"b\"]}", "prompt"}, {"{\"prompt\": 5}", "prompt"},
                            {"{\"prompt\": \"a\", \"echo\": 1}", "echo"}, {"{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs"},
                            {"{\"prompt\": \"a\", \"suffix\": \"z\"}", "suffix"}, {"{\"prompt\": \"a\", \"best_of\": 2}", "best_of"},
                            {"{\"prompt\": \"a\", \"max_tokens\": 0}", "max_tokens"}, {"{\"prompt\": [[1, 2], [3]]}", "prompt"},
                            {"{\"prompt\": [1, -2]}", "prompt"}, {"{\"prompt\": []}", "prompt"},
                            {"{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", "logit_bias"},
                            {"{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", "logit_bias"},
                            {"{\"prompt\": \"a\", \"prompt_logprobs\": 21}", "prompt_logprobs"}};
    for (int i = 0; i < (int)(sizeof bad / sizeof *bad); i++) {
        st = parse(&r, SERVE_COMPLETION, bad[i][0], &e);
        CHECK(st == 400 && is_400(&e, bad[i][1]), "%s: %d %s", bad[i][0], st, body_of(&e));
    }
}

static void test_budget(void) {
    serve_error e = {0};
    serve_request q;
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}";
    CHECK(serve_request_parse(&q, &serve_openai_chat, chat, strlen(chat), &e) == 0, "%s", e.message);
    CHECK(serve_check_request_budget(&q, 10, 16, &e) == 0, "fits, no max_tokens");
    CHECK(serve_check_request_budget(&q, 16, 16, &e) == 400 && is_400(&e, "messages") && strstr(e.message, "16 tokens"),
          "prompt fills the context: %s", e.message);
    serve_request_free(&q);
    /* a request's check names its dialect's fields */
    static const struct { const serve_dialect *d; const char *body, *prompt, *length; } named[] = { /* max 7 past 16 - 10 */
        {&serve_openai_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"max_tokens\": 7}", "messages",
         "max_tokens"},
        {&serve_openai_completion, "{\"prompt\": \"q\", \"max_tokens\": 7}", "prompt", "max_tokens"},
        {&serve_responses, "{\"input\": \"q\", \"max_output_tokens\": 7}", "input", "max_output_tokens"},
        {&serve_anthropic, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"max_tokens\": 7}", "messages",
         "max_tokens"},
        {&serve_ollama_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"options\": {\"num_predict\": 7}}",
         "messages", "num_predict"},
        {&serve_ollama_generate, "{\"prompt\": \"q\", \"options\": {\"num_predict\": 7}}", "prompt", "num_predict"},
        {&serve_ollama_generate, "{\"prompt\": \"q\", \"raw\": true, \"options\": {\"num_predict\": 7}}", "prompt",
         "num_predict"},
    };
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        serve_request r;
        int st = serve_request_parse(&r, named[i].d, named[i].body, strlen(named[i].body), &e);
        CHECK(st == 0, "%s: %s", named[i].body, e.message);
        if (st) continue;
        CHECK(serve_check_request_budget(&r, 10, 16, &e) == 0, "%s: %s past the context: %s", named[i].d->name,
              named[i].length, e.message);
        CHECK(serve_check_request_budget(&r, 16, 16, &e) == 400 && is_400(&e, named[i].prompt), "%s: %s", named[i].d->name,
              e.param);
        serve_request_free(&r);
    }
}

static void test_tokenize_bodies(void) {
    serve_error e = {0};
    char *content;
    int32_t special, *ids, n;
    const char *b = "{\"content\": \"hi there\", \"add_special\": true}";
    CHECK(serve_tokenize_parse(b, strlen(b), &content, &special, &e) == 0 && !strcmp(content, "hi there") && special,
          "tokenize");
    free(content);
    b = "{\"content\": 5}";
    CHECK(serve_tokenize_parse(b, strlen(b), &content, &special, &e) == 400 && is_400(&e, "content"), "tokenize 5");
    b = "{\"tokens\": [2, 105, 7]}";
    CHECK(serve_detokenize_parse(b, strlen(b), 262144, &ids, &n, &e) == 0 && n == 3 && ids[1] == 105, "detokenize");
    free(ids);
    const char *bad[] = {"{\"tokens\": [1, -1]}", "{\"tokens\": [300000]}", "{\"tokens\": [1.5]}", "{\"tokens\": \"1\"}", "{}"};
    for (int i = 0; i < 5; i++) {
        CHECK(serve_detokenize_parse(bad[i], strlen(bad[i]), 262144, &ids, &n, &e) == 400 && is_400(&e, "tokens"),
              "%s", bad[i]);
    }
}

static void test_utf8(void) {
    CHECK(serve_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15), "valid");
    const char *bad[] = {"\xc3", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe2\x82"};
    for (int i = 0; i < 6; i++) CHECK(!serve_utf8_valid(bad[i], strlen(bad[i])), "invalid %d accepted", i);
}

/* A job of a dialect with a fixed head, owning no request. */
static serve_job *job_head(const serve_dialect *d, serve_kind kind) {
    serve_request r;
    serve_request_init(&r, kind);
    serve_job *j = serve_job_new(&r, d);
    snprintf(j->head.id, sizeof j->head.id, "%s-1", d->id_prefix);
    j->head.model = "tiny";
    j->head.created = 1700000000;
    return j;
}

/* The JSON of the one "data: " event in bytes (NULL if none). */
static cJSON *sse_json(const plume_buf *b) {
    const char *p = b->p ? strstr(b->p, "data: ") : NULL;
    return p ? cJSON_Parse(p + 6) : NULL;
}

static void test_reply_json(void) {
    serve_job *j = job_head(&serve_openai_chat, SERVE_CHAT);
    plume_buf b = {0};
    serve_event ev = {.kind = SERVE_EV_START};
    serve_openai_chat.stream(&b, &j->head, j->state, &ev);
    ev = (serve_event){.kind = SERVE_EV_TEXT, .text = "hé", .len = 3};
    plume_buf tb = {0};
    serve_openai_chat.stream(&tb, &j->head, j->state, &ev);
    cJSON *root = sse_json(&b), *rt = sse_json(&tb);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
    const cJSON *delta = cJSON_GetObjectItem(c0, "delta");
    const cJSON *tdelta = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(rt, "choices"), 0), "delta");
    CHECK(!strcmp(cJSON_GetObjectItem(root, "object")->valuestring, "chat.completion.chunk"), "object: %s", b.p);
    CHECK(!strcmp(cJSON_GetObjectItem(delta, "content")->valuestring, "") &&
              !strcmp(cJSON_GetObjectItem(delta, "role")->valuestring, "assistant") &&
              cJSON_IsNull(cJSON_GetObjectItem(c0, "finish_reason")),
          "start: %s", b.p);
    CHECK(!strcmp(cJSON_GetObjectItem(tdelta, "content")->valuestring, "hé"), "text: %s", tb.p);
    cJSON_Delete(root);
    cJSON_Delete(rt);
    free(b.p);
    free(tb.p);
    serve_usage u = {.prompt = 9, .completion = 4, .cached = 3};
    b = (plume_buf){0};
    j->head.req.include_usage = 1;
    ev = (serve_event){.kind = SERVE_EV_DONE, .usage = &u};
    serve_openai_chat.stream(&b, &j->head, j->state, &ev);
    root = sse_json(&b);
    const cJSON *usage = cJSON_GetObjectItem(root, "usage");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(root, "choices")) == 0 &&
              cJSON_GetObjectItem(usage, "total_tokens")->valueint == 13 &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens")->valueint == 3,
          "usage chunk: %s", b.p);
    CHECK(strstr(b.p, "data: [DONE]\n\n"), "[DONE] after the usage: %s", b.p);
    cJSON_Delete(root);
    free(b.p);
    j->head.req.logprobs = 1;
    serve_reply a = {.text = "ok", .thought = "think", .finish = SERVE_FINISH_LENGTH};
    char *s = serve_openai_chat.reply(&j->head, &a, 1, &u);
    root = cJSON_Parse(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItem(c0, "message");
    CHECK(!strcmp(cJSON_GetObjectItem(root, "object")->valuestring, "chat.completion") &&
              !strcmp(cJSON_GetObjectItem(msg, "content")->valuestring, "ok") &&
              !strcmp(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "think") &&
              !strcmp(cJSON_GetObjectItem(c0, "finish_reason")->valuestring, "length") &&
              cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content")),
          "final: %s", s);
    cJSON_Delete(root);
    free(s);
    serve_job_unref(j);
    j = job_head(&serve_openai_completion, SERVE_COMPLETION);
    serve_reply t = {.text = "abc", .finish = SERVE_FINISH_STOP};
    s = serve_openai_completion.reply(&j->head, &t, 1, &u);
    CHECK(s && strstr(s, "\"object\":\"text_completion\"") && strstr(s, "\"text\":\"abc\""), "completion: %s", s);
    free(s);
    serve_job_unref(j);
}

/* Every prefix of a valid body, and bodies with one byte changed, give 0 or a 400 with an
 * error JSON (under ASan: no overread, no leak). */
static void test_truncated_and_corrupt(void) {
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}]},"
        " {\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}],"
        " \"stop\": [\"x\"], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"top_k\": 3, \"seed\": 1}";
    size_t n = strlen(body);
    char *buf = malloc(n);
    int bad = 0;
    for (size_t len = 0; len <= n; len++) {
        memcpy(buf, body, len); /* exactly len bytes, no NUL: the parser must not read past */
        serve_request r;
        serve_error e = {0};
        int st = serve_request_parse(&r, &serve_openai_chat, buf, len, &e);
        if (st == 0) serve_request_free(&r);
        else if (st != 400 || !*e.message) bad++;
    }
    uint64_t rng = 7;
    for (int i = 0; i < 3000; i++) {
        memcpy(buf, body, n);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        buf[(rng >> 33) % n] = (char)(rng >> 13);
        serve_request r;
        serve_error e = {0};
        int st = serve_request_parse(&r, dialect_of(i & 1 ? SERVE_CHAT : SERVE_COMPLETION), buf, n, &e);
        if (st == 0) serve_request_free(&r);
        else if (st != 400 || !*e.message) bad++;
    }
    free(buf);
    CHECK(bad == 0, "%d bodies gave neither a request nor a 400", bad);
}

/* The door's head parser (serve_door.c): whole heads, heads still coming, and each refusal
 * with its status; every prefix of a good head asks for more. */
static void test_head_parse(void) {
    static const struct {
        const char *head;
        int want;
        const char *path;
    } cases[] = {
        {"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 0, "/health"},
        {"\r\nPOST /v1/chat/completions?x=1 HTTP/1.0\r\nContent-Length: 12\r\n\r\n{", 0, "/v1/chat/completions"},
        {"GET http://h:1/metrics HTTP/1.1\nHost: h\n\n", 0, "/metrics"},
        {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 0, ""},
        {"GET /health HTTP/1.1\r\nHost: x\r\n", 1, NULL},
        {"GE", 1, NULL},
        {"GET /health HTTP/2.0\r\n\r\n", 505, NULL},
        {"GET /health HTTP/1.1\r\n\r\n", 400, NULL},
        {"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, NULL},
        {"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400, NULL},
        {"G(T / HTTP/1.1\r\n\r\n", 400, NULL},
        {"\x16\x03\x01", 400, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 400, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400, NULL},
        {"GETTINGTOOLONGMETHODNAME / HTTP/1.1\r\n\r\n", 501, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        serve_head h;
        serve_error e = {0};
        int rc = serve_head_parse(cases[i].head, strlen(cases[i].head), &h, &e);
        CHECK(rc == cases[i].want, "case %zu: %d, want %d (%s)", i, rc, cases[i].want, e.message);
        if (rc >= 400) CHECK(e.status == rc && *e.message, "case %zu: the error", i);
        if (rc == 0 && cases[i].path) CHECK(!strcmp(h.path, cases[i].path), "case %zu: path '%s'", i, h.path);
    }
    const char *ok = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n";
    int more = 0;
    for (size_t n = 0; n < strlen(ok); n++) {
        serve_head h;
        serve_error e = {0};
        more += serve_head_parse(ok, n, &h, &e) == 1;
    }
    serve_head h;
    serve_error e = {0};
    CHECK(more == (int)strlen(ok) && serve_head_parse(ok, strlen(ok), &h, &e) == 0 && h.content_length == 5 &&
              h.head_len == strlen(ok) && h.http11,
          "prefixes of a good head: %d of %zu want more", more, strlen(ok));
    char *big = malloc(SERVE_HEAD_MAX + 100);
    int k = snprintf(big, 64, "GET / HTTP/1.1\r\nHost: x\r\nX: ");
    memset(big + k, 'a', SERVE_HEAD_MAX + 100 - (size_t)k);
    CHECK(serve_head_parse(big, SERVE_HEAD_MAX + 100, &h, &e) == 431, "a head past SERVE_HEAD_MAX");
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', SERVE_HEAD_MAX + 95);
    CHECK(serve_head_parse(big, SERVE_HEAD_MAX + 100, &h, &e) == 414, "a request line past SERVE_HEAD_MAX");
    free(big);
}

int main(void) {
    RUN(test_chat_fields);
    RUN(test_chat_errors);
    RUN(test_formats);
    RUN(test_exact_numbers);
    RUN(test_issue40_fields);
    RUN(test_deep_tools_schema);
    RUN(test_completion_fields);
    RUN(test_budget);
    RUN(test_tokenize_bodies);
    RUN(test_utf8);
    RUN(test_reply_json);
    RUN(test_truncated_and_corrupt);
    RUN(test_head_parse);
    return t_total_failed != 0;
}
