/* test_cli.c -- the text path through the CLI on tiny-a (its small tokenizer has the real
 * structural tokens): plume run, plume chat with the cache kept between turns, --cache,
 * --help everywhere, bad input (unknown flags, invalid UTF-8, a prompt longer than the
 * context, no model), and the formats of plume run (--json-schema, --json, --grammar). */
#include <cjson/cJSON.h>

#include "t.h"

static char *tmp;
static char bundle[600];

/* The value after "prompt " in the n-th stats line of out (0-based), or -1. */
static int stats_prompt(const char *out, int n) {
    const char *p = out;
    for (int i = 0; (p = strstr(p, "[prompt ")); i++, p++)
        if (i == n) return atoi(p + 8);
    return -1;
}

static void test_run_streams_and_reports(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s/plume run -m %s -p 'hello' -n 12 --seed 3 --temp 0.8", t_build(), bundle);
    CHECK(st == 0, "run: %s", out);
    /* "<bos><|turn>user\nhello<turn|>\n<|turn>model\n" = 2 105 user \n h e l l o 106 107 105 model \n */
    CHECK(stats_prompt(out, 0) > 8, "stats line: %s", out);
    CHECK(strstr(out, "generated 12 tokens") || strstr(out, "end of turn"), "generated count: %s", out);
    char out2[16384];
    t_sh(out2, sizeof out2, "%s/plume run -m %s -p 'hello' -n 12 --seed 3 --temp 0.8", t_build(), bundle);
    char *a = strstr(out, "\n[prompt"), *b = strstr(out2, "\n[prompt");
    CHECK(a && b && a - out == b - out2 && !memcmp(out, out2, (size_t)(a - out)), "same seed, different text");
    st = t_sh(out, sizeof out, "%s/plume run -m %s --raw -p 'hello' -n 4 --temp 0", t_build(), bundle);
    CHECK(st == 0 && stats_prompt(out, 0) == 6, "raw prompt is <bos> + 5 characters: %s", out);
}

static void test_chat_second_turn_prefills_only_its_tokens(void) {
    char out[32768];
    int st = t_sh(out, sizeof out, "printf 'hello\\nhow are you\\n/quit\\n' | %s/plume chat -m %s -n 6 --seed 1", t_build(),
                  bundle);
    CHECK(st == 0, "chat: %s", out);
    int first = stats_prompt(out, 0), second = stats_prompt(out, 1);
    /* What each turn should feed, counted by the tokenizer: the whole first prompt, then only
     * the second turn's text (closing the answer, the user turn, the generation prompt). */
    char tk[4096];
    t_sh(tk, sizeof tk, "printf '%%s\\n%%s\\n' '{\"text\": \"<bos><|turn>user\\nhello<turn|>\\n<|turn>model\\n\"}' "
         "'{\"text\": \"<turn|>\\n<|turn>user\\nhow are you<turn|>\\n<|turn>model\\n\"}' | %s/plume tokenize -m %s",
         t_build(), bundle);
    int want1 = 1, want2 = 1;
    char *nl = strchr(tk, '\n');
    for (char *p = tk; *p && p < nl; p++) want1 += *p == ',';
    for (char *p = nl ? nl + 1 : tk; *p; p++) want2 += *p == ',';
    CHECK(want1 > 10 && want2 > 10, "tokenize: %s", tk);
    CHECK(first == want1, "first turn prefilled %d tokens, want %d: %s", first, want1, out);
    CHECK(second == want2, "second turn prefilled %d tokens, want only its own %d: %s", second, want2, out);
}

static void test_chat_commands(void) {
    char out[32768], state[700];
    snprintf(state, sizeof state, "%s/chat.state", tmp);
    int st = t_sh(out, sizeof out, "printf 'hi\\n/save %s\\n/reset\\n/load %s\\n/help\\n/bogus\\n/quit\\n' | %s/plume chat -m %s -n 3",
                  state, state, t_build(), bundle);
    CHECK(st == 0, "chat: %s", out);
    CHECK(strstr(out, "[saved ") && strstr(out, "[conversation reset]") && strstr(out, "[loaded "), "commands: %s", out);
    CHECK(strstr(out, "/system TEXT") && strstr(out, "unknown command '/bogus'"), "help / unknown: %s", out);
    /* every other path of the loop, ending at EOF (Ctrl-D) rather than /quit: under SAN=1 the
     * exit status 0 also says LeakSanitizer found no leak on any of them */
    st = t_sh(out, sizeof out,
              "printf '/system be brief\nhi\n/load %s/none.state\n/load %s/model_config.json\n/save %s/model_config.json/x\n"
              "/load %s\nagain\n/reset\nhello\n' | %s/plume chat -m %s -n 2",
              tmp, bundle, bundle, state, t_build(), bundle);
    CHECK(st == 0, "chat: %d %s", st, out);
    CHECK(strstr(out, "[conversation reset]") && strstr(out, "[loaded ") && strstr(out, "none.state") &&
              strstr(out, "model_config.json"),
          "system, failed loads, a failed save: %s", out);
    CHECK(!strstr(out, "LeakSanitizer") && !strstr(out, "AddressSanitizer"), "sanitizer report: %s", out);
}

static void test_run_cache_reuses_prefix(void) {
    char out[16384], cache[700];
    snprintf(cache, sizeof cache, "%s/run.cache", tmp);
    int st = t_sh(out, sizeof out, "%s/plume run -m %s --system 'be brief' -p 'aaa' -n 2 --cache %s", t_build(), bundle, cache);
    CHECK(st == 0 && strstr(out, "0 of "), "first: %s", out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s --system 'be brief' -p 'bbb' -n 2 --cache %s", t_build(), bundle, cache);
    /* shared: <bos><|turn>system\nbe brief<turn|>\n<|turn>user\n = 2 105 s y s t e m 107 ... */
    CHECK(st == 0 && strstr(out, "reused") && !strstr(out, "0 of "), "second: %s", out);
}

/* Greedy text with speculative decoding (on by default when greedy) is the text without it:
 * plume run, and plume chat over three turns (the session after a turn must hold what plain
 * decoding leaves: stopped by the limit, a stop string, or the end of the turn). */
static void test_draft_keeps_greedy_output(void) {
    const char *runs[] = {"run -p 'la la la la la la' --temp 0 -n 60", ("run --raw -p 'abcabcabcabc' --temp 0 -n 50 "
                           "--repeat-penalty 1.2 --repeat-last-n 8"),
                          "chat --temp 0 -n 2 < %s/turns", "chat --temp 0 -n 24 < %s/turns", "chat --temp 0 -n 24 --stop 'a' < %s/turns"};
    char out[3][16384], cmd[600], setup[1024];
    t_sh(setup, sizeof setup, "printf 'hello hello hello\\nhello again hello\\n/reset\\nsay it: la la la\\n' > %s/turns",
         tmp);
    for (int r = 0; r < 5; r++) {
        const char *drafts[3] = {"--draft 0", "", "--draft 7"};
        for (int d = 0; d < 3; d++) {
            snprintf(cmd, sizeof cmd, runs[r], tmp);
            int st = t_sh(out[d], sizeof out[d], "{ %s/plume %s -m %s %s 2>/dev/null; }", t_build(), cmd, bundle, drafts[d]);
            CHECK(st == 0 && strlen(out[d]) > 10, "%s %s: %s", cmd, drafts[d], out[d]);
        }
        CHECK(!strcmp(out[0], out[1]) && !strcmp(out[0], out[2]), "%s: with drafts the text differs:\n%s\n%s\n%s", cmd,
              out[0], out[1], out[2]);
    }
    int st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la la la la la' --temp 0 -n 30", t_build(), bundle);
    CHECK(st == 0 && strstr(out[0], "| draft 3: ") && strstr(out[0], "tokens/step"), "greedy: drafting on: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' -n 8 --seed 1", t_build(), bundle);
    CHECK(st == 0 && !strstr(out[0], "draft"), "sampling: drafting off by default: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' -n 8 --seed 1 --draft 3", t_build(), bundle);
    CHECK(st == 0 && strstr(out[0], "| draft 3: "), "sampling: --draft 3: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume bench -m %s -p 8 -n 4 -r 1 --spec", t_build(), bundle);
    CHECK(st == 0 && strstr(out[0], "| T = 8 |") && strstr(out[0], "x 1-token step"), "bench --spec: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume bench -m %s -p 8 -n 4 -r 1 --spec --json", t_build(), bundle);
    CHECK(st == 0 && strstr(out[0], "\"step_tokens\": 5") && strstr(out[0], "\"relative_cost\""), "bench --spec --json: %s",
          out[0]);
    CHECK(st == 0 && strstr(out[0], "\"stream_gb_s\": ") && strstr(out[0], "\"decode_roofline\": ") &&
              !strstr(out[0], "\"stream_gb_s\": 0.00"),
          "bench --json: the weights streamed around decode: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume bench -m %s -p 8 -n 4 -r 1 -t 2 --batch 2 --threads-profile", t_build(), bundle);
    CHECK(st == 0 && strstr(out[0], "prefill of 8 tokens: ms per step (1 steps, 2 threads)") &&
              strstr(out[0], "decode, one session: ms per step (4 steps") &&
              strstr(out[0], "decode, 2 sessions in one batch") && strstr(out[0], "| matmuls | ") &&
              strstr(out[0], "busy share per thread: 0: "),
          "bench --threads-profile: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p hi --draft 64", t_build(), bundle);
    CHECK(st == 2 && strstr(out[0], "--draft wants 0..63"), "--draft 64 refused: %s", out[0]);
}

static void test_help_everywhere(void) {
    const char *cmds[] = {"run", "chat", "convert", "synth", "logits", "tokenize", "detokenize"};
    for (int i = 0; i < 7; i++) {
        char out[8192];
        int st = t_sh(out, sizeof out, "%s/plume %s --help", t_build(), cmds[i]);
        CHECK(st == 0 && strstr(out, "usage: plume"), "%s --help: %d %s", cmds[i], st, out);
    }
    char out[8192];
    CHECK(t_sh(out, sizeof out, "%s/plume --help", t_build()) == 0 && strstr(out, "chat"), "plume --help");
}

static void test_bad_input(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s/plume run -m %s -p \"$(printf 'ab\\377')\" -n 2", t_build(), bundle);
    CHECK(st > 0 && strstr(out, "not valid UTF-8"), "invalid UTF-8: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p 'hello there, this is long' --context 12 -n 2", t_build(), bundle);
    CHECK(st > 0 && strstr(out, "only 12 of the context's 12 are free"), "too long: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p hi --frobnicate", t_build(), bundle);
    CHECK(st > 0 && strstr(out, "unknown option '--frobnicate'"), "unknown flag: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p hi --top-p 7", t_build(), bundle);
    CHECK(st > 0 && strstr(out, "--top-p"), "bad value: %d %s", st, out);
    st = t_sh(out, sizeof out, "HOME=%s PLUME_MODEL= %s/plume run -p hi", tmp, t_build());
    CHECK(st > 0 && strstr(out, "plume convert"), "no model: %d %s", st, out);
}

/* Every command that writes an output path creates its missing parent directories. */
static void test_output_parents_created(void) {
    char out[16384];
    int st = t_sh(out, sizeof out,
                  "(%s/plume convert %s/tiny-a/hf %s/new/a/bundle --quiet && "
                  "%s/plume synth --config tiny --hf %s/new/b/hf && "
                  "%s/plume synth --config tiny --bundle %s/new/c/bundle && "
                  "%s/plume logits -m %s --ids 2,3 -o %s/new/d/l.npy --save-state %s/new/e/s.state && "
                  "%s/plume run -m %s -p hi -n 1 --cache %s/new/f/run.cache && "
                  "printf 'hi\\n/save %s/new/g/chat.state\\n/quit\\n' | %s/plume chat -m %s -n 1)",
                  t_build(), t_data(), tmp, t_build(), tmp, t_build(), tmp, t_build(), bundle, tmp, tmp, t_build(),
                  bundle, tmp, tmp, t_build(), bundle);
    CHECK(st == 0, "commands: %d %s", st, out);
    const char *made[] = {"a/bundle/model_config.json", "b/hf/config.json", "c/bundle/model_config.json", "d/l.npy",
                          "e/s.state", "f/run.cache", "g/chat.state"};
    for (int i = 0; i < 7; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/new/%s", tmp, made[i]);
        FILE *f = fopen(p, "rb");
        CHECK(f != NULL, "%s was not written", p);
        if (f) fclose(f);
    }
}

/* The answer of a `plume run` output (stdout and stderr): the text before the stats line,
 * cut in place. */
static char *run_answer(char *out) {
    char *end = strstr(out, "\n[prompt");
    if (end) *end = 0;
    return out;
}

/* --json-schema, --json, --grammar: a random model's answers held to the format (a schema's
 * fields checked), greedy the same with drafts, -n too small says the value is incomplete,
 * what cannot be enforced refused naming it, --print-grammar. */
static void test_run_formats(void) {
    char out[16384], schema[700], bad[700], gram[700], deep[700];
    snprintf(schema, sizeof schema, "%s/schema.json", tmp);
    snprintf(deep, sizeof deep, "%s/deep.gbnf", tmp);
    snprintf(bad, sizeof bad, "%s/bad.json", tmp);
    snprintf(gram, sizeof gram, "%s/yn.gbnf", tmp);
    t_sh(out, sizeof out,
         "printf '%%s' '{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3,\"maximum\":9},"
         "\"s\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"n\",\"s\"],\"additionalProperties\":false}' > %s && "
         "printf '%%s' '{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":2}' > %s && printf '%%s' 'root ::= \"yes\" | \"no\"' > %s",
         schema, bad, gram);
    /* ambiguous from the first "(": the ways to read them double with each, and "x" comes only
       after 40 (the recognizer's budget ends it first) */
    t_sh(out, sizeof out, "printf '%%s' 'root ::= e\ne ::= \"(\" e \"a\" | \"(\" e \"b\" | \"%.40s%s\"' > %s",
         "((((((((((((((((((((((((((((((((((((((((", "x", deep);
    for (int seed = 1; seed <= 3; seed++) {
        int st = t_sh(out, sizeof out, "%s/plume run -m %s -p json -n 300 --seed %d --json-schema %s", t_build(), bundle,
                      seed, schema);
        cJSON *v = st == 0 ? cJSON_Parse(run_answer(out)) : NULL;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "n"), *s = cJSON_GetObjectItemCaseSensitive(v, "s");
        CHECK(cJSON_IsObject(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsNumber(n) && n->valuedouble >= 3 &&
                  n->valuedouble <= 9 && n->valuedouble == (int)n->valuedouble && cJSON_IsString(s) &&
                  (!strcmp(s->valuestring, "a") || !strcmp(s->valuestring, "b")),
              "seed %d: %s", seed, out);
        cJSON_Delete(v);
    }
    char a[16384], b[16384];
    t_sh(a, sizeof a, "%s/plume run -m %s -p json -n 300 --temp 0 --draft 0 --json-schema %s", t_build(), bundle, schema);
    t_sh(b, sizeof b, "%s/plume run -m %s -p json -n 300 --temp 0 --draft 3 --json-schema %s", t_build(), bundle, schema);
    CHECK(!strcmp(run_answer(a), run_answer(b)) && a[0] == '{', "greedy with drafts differs:\n%s\n%s", a, b);
    int st = t_sh(out, sizeof out, "%s/plume run -m %s -p json -n 300 --seed 4 --json", t_build(), bundle);
    cJSON *v = st == 0 ? cJSON_Parse(run_answer(out)) : NULL;
    CHECK(cJSON_IsObject(v), "--json: %s", out);
    cJSON_Delete(v);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p yn -n 20 --seed 5 --grammar %s", t_build(), bundle, gram);
    CHECK(st == 0 && (!strcmp(run_answer(out), "yes") || !strcmp(out, "no")), "--grammar: %s", out);
    for (int draft = 0; draft <= 3; draft += 3) {
        st = t_sh(out, sizeof out, "%s/plume run -m %s -p deep -n 60 --seed 1 --draft %d --grammar %s", t_build(), bundle,
                  draft, deep);
        CHECK(st != 0 && strstr(out, "too ambiguous or nested too deep") && !strstr(out, "spec:"),
              "--draft %d: a grammar past the recognizer's budget: %s", draft, out);
    }
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p json -n 2 --seed 1 --json-schema %s", t_build(), bundle, schema);
    CHECK(st == 0 && strstr(out, "the value is incomplete"), "-n 2: %s", out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p json --json-schema %s", t_build(), bundle, bad);
    CHECK(st != 0 && strstr(out, "uniqueItems"), "refused keyword: %s", out);
    st = t_sh(out, sizeof out, "%s/plume run -m %s -p json --json --grammar %s", t_build(), bundle, gram);
    CHECK(st != 0 && strstr(out, "exclude"), "two formats: %s", out);
    st = t_sh(out, sizeof out, "%s/plume run --json-schema %s --print-grammar", t_build(), schema);
    CHECK(st == 0 && strstr(out, "root ::="), "--print-grammar: %s", out);
}

int main(void) {
    tmp = t_tmpdir("cli");
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    char out[4096];
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet", t_build(), t_data(), bundle))
        printf("  setup: %s\n", out);
    RUN(test_run_streams_and_reports);
    RUN(test_chat_second_turn_prefills_only_its_tokens);
    RUN(test_chat_commands);
    RUN(test_run_cache_reuses_prefix);
    RUN(test_draft_keeps_greedy_output);
    RUN(test_help_everywhere);
    RUN(test_bad_input);
    RUN(test_run_formats);
    RUN(test_output_parents_created);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
