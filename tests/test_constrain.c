/* test_constrain.c -- the constraint room (src/constrain/, docs/STRUCTURED.md): the GBNF
 * parser and its refusals, the JSON Schema compiler on accept/reject strings (and against
 * the JSON Schema Test Suite: every invalid instance of every schema it compiles must be
 * refused), number bounds against a naive twin, patterns; then, over the real vocabulary,
 * token masks against a twin that re-runs the whole text, the sampler's distribution under a
 * constraint against the unconstrained chain on masked logits, rewinds, thinking mode and
 * forced tool calls read back by the chat parser.
 *
 * The real vocabulary (tests/vocab, `make vocab`) is needed by the second half: without it
 * those tests FAIL, or print SKIP lines when PLUME_OFFLINE=1. */
#include <cjson/cJSON.h>
#include <regex.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "constrain/constrain.h"
#include "t.h"

/* ---- helpers ----------------------------------------------------------------------------- */

/* Whether a GBNF grammar matches text whole: 1, 0, or -1 when it does not compile (the
 * message in *err when err is not NULL). */
static int gbnf_match(const char *gbnf, const char *text, char **err) {
    cst_grammar g;
    if (cst_grammar_parse(&g, gbnf, strlen(gbnf), err)) return -1;
    cst_dfa *d = NULL;
    int r = cst_dfa_new(&d, &g, NULL) ? -1 : cst_dfa_matches(d, text, strlen(text));
    cst_dfa_free(d);
    cst_grammar_free(&g);
    return r;
}

/* Whether a schema's grammar matches text whole (-1: refused, message in *err). */
static int schema_match(const char *schema, const char *text, char **err) {
    char *g = NULL;
    if (cst_schema_to_gbnf(schema, strlen(schema), CST_JSON, &g, err)) return -1;
    int r = gbnf_match(g, text, err);
    free(g);
    return r;
}

/* ---- GBNF -------------------------------------------------------------------------------- */

static void test_gbnf_accepts(void) {
    static const struct { const char *g, *text; int want; } cases[] = {
        {"root ::= \"ab\" [c-e]*\n", "abcde", 1},
        {"root ::= \"ab\" [c-e]*\n", "abf", 0},
        {"root ::= \"ab\" [c-e]*\n", "a", 0},
        {"root ::= x+\nx ::= [^a]\n", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 1}, /* é € 😀: any code point but a */
        {"root ::= x+\nx ::= [^a]\n", "ba", 0},
        {"root ::= [a-\\u00ff]+\n", "a\xc3\xbf", 1},
        {"root ::= [a-\\u00ff]+\n", "\xc4\x80", 0}, /* U+0100 is past the range */
        {"root ::= .\n", "\xed\x9f\xbf", 1},          /* U+D7FF */
        {"root ::= .\n", "\xed\xa0\x80", 0},          /* a surrogate's bytes are not UTF-8 */
        {"root ::= .\n", "\xf4\x8f\xbf\xbf", 1},      /* U+10FFFF */
        {"root ::= \"a\"{2,3}\n", "aa", 1},
        {"root ::= \"a\"{2,3}\n", "aaa", 1},
        {"root ::= \"a\"{2,3}\n", "aaaa", 0},
        {"root ::= \"a\"{2,}\n", "aaaaaaaa", 1},
        {"root ::= (\"ab\" | \"c\")? \"d\"\n", "d", 1},
        {"root ::= (\"ab\" | \"c\")? \"d\"\n", "abd", 1},
        {"root ::= (\"ab\" | \"c\")? \"d\"\n", "acd", 0},
        {"# comment\nroot ::= a |\n  b # more\na ::= \"x\"\nb ::= \"y\" a\n", "yx", 1},
        {"root ::= (\n  \"a\"\n  \"b\"\n)\n", "ab", 1},
        {"root ::= \"\\x41\\u00e9\\U0001F600\\n\\t\\\"\"\n", "A\xc3\xa9\xf0\x9f\x98\x80\n\t\"", 1},
        {"root ::= item (\",\" item)*\nitem ::= [0-9]+\n", "1,22,333", 1},
        {"root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9] | \"(\" expr \")\"\n", "(1+(2+3))+4", 1},
        {"root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9] | \"(\" expr \")\"\n", "(1+2", 0},
        {"root ::= \"a\" | \"a\" \"b\"\n", "a", 1}, /* ambiguous prefixes keep every reading */
        {"root ::= \"a\" | \"a\" \"b\"\n", "ab", 1},
        {"root ::= x\nx ::= \"\" | \"a\" x\n", "", 1},
        {"root ::= x\nx ::= \"\" | \"a\" x\n", "aaaa", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL;
        int r = gbnf_match(cases[i].g, cases[i].text, &err);
        CHECK(r == cases[i].want, "case %zu: %s on \"%s\": %d, want %d (%s)", i, cases[i].g, cases[i].text, r,
              cases[i].want, err ? err : "");
        free(err);
    }
}

static void test_gbnf_refusals(void) {
    static const struct { const char *g, *says; } cases[] = {
        {"", "no rule named \"root\""},
        {"root ::= a\n", "rule \"a\" is used (line 1) but not defined"},
        {"root ::= root \"a\" | \"b\"\n", "left-recursive"},
        {"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"\n", "left-recursive"},
        {"root ::= \"a\" root\n", "derives no finite text"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        {"root ::= \"abc\n", "unterminated string literal"},
        {"root ::= [abc\n", "unterminated character class"},
        {"root ::= [z-a]\n", "end is before its start"},
        {"root ::= \"a\"{3,2}\n", "n < m"},
        {"root ::= \"a\"{100001}\n", "above 100000"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= \"\xff\"\n", "invalid UTF-8"},
        {"root ::= (\"a\"\n", "expected ')'"},
        {"root ::= \"a\" )\n", "line 1, column 14: unexpected character"},
        {"\n\nroot = \"a\"\n", "line 3, column 6: expected '::='"},
        {NULL, "too large"}, /* 42 x "a"{100000}: 4.2 M elements */
    };
    char big[1024] = "root ::=";
    for (int i = 0; i < 42; i++) strcat(big, " \"a\"{100000}");
    strcat(big, "\n");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL;
        const char *g = cases[i].g ? cases[i].g : big;
        int r = gbnf_match(g, "", &err);
        CHECK(r == -1 && err && strstr(err, cases[i].says), "case %zu: %.60s: got %d \"%s\", want \"%s\"", i, g, r,
              err ? err : "", cases[i].says);
        free(err);
    }
}

/* Unproductive alternatives are dropped, so a grammar cannot trap the generation in a loop
 * it can never leave: after "a", only "b" may come. */
static void test_gbnf_no_traps(void) {
    cst_grammar g;
    const char *text = "root ::= \"a\" (loop | \"b\")\nloop ::= \"c\" loop\n";
    CHECK(cst_grammar_parse(&g, text, strlen(text), NULL) == 0, "parse");
    cst_dfa *d = NULL;
    cst_dfa_new(&d, &g, NULL);
    int32_t s = cst_dfa_step(d, cst_dfa_start(d), 'a');
    CHECK(s >= 0 && cst_dfa_step(d, s, 'c') == CST_DEAD && cst_dfa_step(d, s, 'b') >= 0, "the loop was not dropped");
    cst_dfa_free(d);
    cst_grammar_free(&g);
}

/* Seconds of CPU time of the process. */
static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

/* Where a walk over "(((..." (n bytes) from a fresh recognizer of gbnf ends: the index of
 * the byte whose step failed (n if none did); its states into st[0 .. n]. */
static int32_t paren_walk(cst_dfa *d, int32_t n, int32_t *st) {
    st[0] = cst_dfa_start(d);
    int32_t k = 0;
    for (; k < n && st[k] >= 0; k++) st[k + 1] = cst_dfa_step(d, st[k], '(');
    return st[k] < 0 ? k - 1 : n;
}

/* A grammar as ambiguous as fuzz_gbnf found (fuzz/regressions/fuzz_gbnf/deep-ambiguous-
 * nesting): "(" is a character of a term, an operator, or opens a group, so the ways to read
 * "((((" double with each byte. A step past CST_STEP_WORK fails in milliseconds (the finding
 * filled CST_MAX_FRAMES in 14 s), at the same byte on every walk and in every recognizer,
 * whatever it stepped before; the states before it are the same on a second walk. A deep
 * but unambiguous nesting is not limited. */
static const char amb[] = "root ::= expr\nexpr ::= term ([-+(] term)*\nterm ::= [0-9(]* | \"(\" expr \")\"\n";

static void test_deep_nesting_bounded(void) {
    static const char deep[] = "root ::= e\ne ::= \"(\" e \")\" | \"x\"\n";
    enum { N = 300 };
    int32_t a[N + 1], b[N + 1], c[N + 1];
    cst_grammar g;
    CHECK(cst_grammar_parse(&g, amb, strlen(amb), NULL) == 0, "parse");
    cst_dfa *d = NULL, *e = NULL;
    CHECK(cst_dfa_new(&d, &g, NULL) == 0 && cst_dfa_new(&e, &g, NULL) == 0, "new");
    if (!d || !e) goto done;
    double t0 = cpu_s();
    int32_t ka = paren_walk(d, N, a);
    double t1 = cpu_s();
    CHECK(ka >= 8 && ka < 40 && a[ka + 1] == CST_LIMIT, "the walk should fail at the budget: byte %d, state %d", ka,
          a[ka + 1]);
    CHECK(t1 - t0 < 1.0, "the walk to the limit took %.2f s", t1 - t0);
    int32_t kb = paren_walk(d, N, b); /* again, from the caches */
    CHECK(kb == ka && !memcmp(a, b, (size_t)(ka + 2) * sizeof *a), "the second walk differs: byte %d vs %d", kb, ka);
    /* another recognizer, which steps other text first (its own frames, states and ids) */
    CHECK(cst_dfa_matches(e, "1+(2)-((3))", 11) == 1 && cst_dfa_matches(e, "((0(", 4) == 1, "e matches");
    int32_t kc = paren_walk(e, N, c);
    CHECK(kc == ka && c[kc + 1] == CST_LIMIT, "another recognizer stops at byte %d, not %d", kc, ka);
    CHECK(cst_dfa_matches(d, "(1+2)-3", 7) == 1, "a shallow text still runs after the limit");
done:
    cst_dfa_free(d);
    cst_dfa_free(e);
    cst_grammar_free(&g);
    /* unambiguous: 5000 groups deep and back */
    enum { DEEP = 5000 };
    char *text = malloc(2 * DEEP + 2);
    memset(text, '(', DEEP);
    text[DEEP] = 'x';
    memset(text + DEEP + 1, ')', DEEP);
    text[2 * DEEP + 1] = 0;
    CHECK(gbnf_match(deep, text, NULL) == 1, "5000 unambiguous groups");
    free(text);
}

/* ---- JSON Schema -------------------------------------------------------------------------- */

static void test_schema_accepts(void) {
    static const struct { const char *schema, *text; int want; } cases[] = {
        /* types */
        {"{\"type\":\"integer\"}", "-12", 1},
        {"{\"type\":\"integer\"}", "1.5", 0},
        {"{\"type\":\"integer\"}", "012", 0},
        {"{\"type\":\"number\"}", "-0.5e-3", 1},
        {"{\"type\":\"number\"}", "1.", 0},
        {"{\"type\":\"boolean\"}", "false", 1},
        {"{\"type\":\"null\"}", "null", 1},
        {"{\"type\":[\"string\",\"null\"]}", "null", 1},
        {"{\"type\":[\"string\",\"null\"]}", "\"x\"", 1},
        {"{\"type\":[\"string\",\"null\"]}", "1", 0},
        {"{}", "[1, {\"a\": [true, null]}, \"x\"]", 1},
        {"true", "{\"a\":\"\\u00e9\\n\"}", 1},
        /* strings */
        {"{\"type\":\"string\"}", "\"a\\\"b\\\\c\\u0041\"", 1},
        {"{\"type\":\"string\"}", "\"\\ud800\"", 0},         /* a lone surrogate escape */
        {"{\"type\":\"string\"}", "\"a\nb\"", 0},            /* a raw control character */
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\\n\"", 1}, /* 2 code points */
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2023-02-29\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2000-02-29\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"1900-02-29\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2023-04-31\"", 0},
        {"{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59.123+05:30\"", 1},
        {"{\"type\":\"string\",\"format\":\"time\"}", "\"24:00:00Z\"", 0},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-31T08:00:00Z\"", 1},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-42d3-a456-426614174000\"", 1},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567e89b42d3a456426614174000\"", 0},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"ada.lovelace@example.org\"", 1},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"ada@localhost\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.255\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.256\"", 0},
        /* patterns: ECMAScript search semantics, anchors, JSON spelling of the characters */
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", "\"AB-123\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", "\"AB-1234\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xxaby\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"ab\"}", "\"xxa\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "\"ax\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "\"xb\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "\"xa\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^\\\"[^x]+$\"}", "\"\\\"ab\\n\"", 1}, /* " and a newline, escaped */
        {"{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\\n\"", 0},           /* . is no line terminator */
        {"{\"type\":\"string\",\"pattern\":\"^(?:ab|c)+?\\\\s*$\"}", "\"abcab \"", 1},
        /* numbers within bounds */
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "-5", 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "123", 1},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "124", 0},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "-6", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0}", "0", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0}", "1", 1},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2}", "0.5", 1},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2}", "0.49", 0},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2}", "2.000", 1},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2}", "2.001", 0},
        {"{\"type\":\"number\",\"exclusiveMaximum\":0.3}", "0.3", 0},
        {"{\"type\":\"number\",\"exclusiveMaximum\":0.3}", "0.299999", 1},
        {"{\"type\":\"number\",\"exclusiveMaximum\":0.3}", "-12.5", 1},
        /* enum, const */
        {"{\"enum\":[\"a\",1,null,{\"b\":[2]}]}", "{\"b\":[2]}", 1},
        {"{\"enum\":[\"a\",1,null,{\"b\":[2]}]}", "2", 0},
        {"{\"type\":\"integer\",\"enum\":[1,1.5,\"x\"]}", "1.5", 0},
        /* numbers as the schema writes them (issue 44): not the double cJSON reads */
        {"{\"const\":9007199254740993}", "9007199254740993", 1},
        {"{\"const\":9007199254740993}", "9007199254740992", 0},
        {"{\"enum\":[0.30000000000000004]}", "0.30000000000000004", 1},
        {"{\"enum\":[0.30000000000000004]}", "0.3", 0},
        {"{\"const\":1.5e3}", "1.5e3", 1},
        {"{\"type\":\"integer\",\"minimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740993", 1},
        {"{\"type\":\"integer\",\"minimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740995", 1},
        {"{\"type\":\"integer\",\"minimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740992", 0},
        {"{\"type\":\"integer\",\"minimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740996", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740993", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":9007199254740993,\"maximum\":9007199254740995}", "9007199254740994", 1},
        {"{\"type\":\"number\",\"minimum\":0.30000000000000004,\"maximum\":1}", "0.3", 0},
        {"{\"type\":\"number\",\"minimum\":0.30000000000000004,\"maximum\":1}", "0.30000000000000004", 1},
        {"{\"type\":\"number\",\"minimum\":0.30000000000000004,\"maximum\":1}", "0.30000000000000005", 1},
        {"{\"type\":\"integer\",\"minimum\":-12345678901234567890123,\"maximum\":-12345678901234567890121}",
         "-12345678901234567890122", 1},
        {"{\"type\":\"integer\",\"minimum\":-12345678901234567890123,\"maximum\":-12345678901234567890121}",
         "-12345678901234567890124", 0},
        {"{\"type\":\"integer\",\"minimum\":2.5e1,\"maximum\":260E-1}", "25", 1},
        {"{\"type\":\"integer\",\"minimum\":2.5e1,\"maximum\":260E-1}", "26", 1},
        {"{\"type\":\"integer\",\"minimum\":2.5e1,\"maximum\":260E-1}", "27", 0},
        {"{\"type\":\"integer\",\"minimum\":0.000,\"maximum\":0.5}", "0", 1},
        {"{\"type\":\"integer\",\"minimum\":0.000,\"maximum\":0.5}", "1", 0},
        /* objects */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         "{\"a\": \"x\",\n  \"b\": true}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         "{\"a\":\"x\"}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         "{\"b\":true,\"a\":\"x\"}", 0}, /* the schema's order */
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":1,\"b\":2,\"ab\":3}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":1,\"a\":2}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"integer\"}}", "{\"b\":\"x\"}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}}}", "{\"b\":1}", 0}, /* named properties only */
        {"{\"type\":\"object\"}", "{\"b\": [1, 2], \"c\": {}}", 1},
        {"{\"type\":\"object\"}", "{ }", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{}}}", "{\"a\":1}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{}}}", "{\"b\":1}", 1},
        /* whitespace is bounded: at most one space, or a newline and up to 20 spaces or tabs */
        {"{\"type\":\"array\"}", "[  1]", 0},
        {"{\"type\":\"array\"}", "[\n                    1]", 1},
        {"{\"type\":\"array\"}", "[\n                     1]", 0},
        /* arrays */
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1, 2, 3]", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1]", 0},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1,2,3,4]", 0},
        {"{\"type\":\"array\",\"items\":false}", "[]", 1},
        /* combinators and references */
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"a\"", 1},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"ab\"", 0},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"k\",\"x\"]},"
         "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"k\",\"y\"]}]}",
         "{\"k\":\"b\",\"y\":\"z\"}", 1},
        {"{\"allOf\":[{\"description\":\"d\"},{\"type\":\"integer\"}]}", "7", 1},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
         "\"required\":[\"c\"]}},\"$ref\":\"#/$defs/n\"}", "{\"c\":[{\"c\":[]},{\"c\":[{\"c\":[]}]}]}", 1},
        {"{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},"
         "\"required\":[\"v\",\"next\"]}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", 1},
        {"{\"definitions\":{\"a~b/c\":{\"type\":\"null\"}},\"$ref\":\"#/definitions/a~0b~1c\"}", "null", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL;
        int r = schema_match(cases[i].schema, cases[i].text, &err);
        CHECK(r == cases[i].want, "case %zu: %s on %s: %d, want %d (%s)", i, cases[i].schema, cases[i].text, r,
              cases[i].want, err ? err : "");
        free(err);
    }
}

/* Round 2 (issue 44): keywords that assert nothing are ignored, drafts read by $schema, and
 * combined schemas merged; each case a schema, then instances it must take and refuse. */
static void test_schema_round2(void) {
    static const struct { const char *schema, *text; int want; } cases[] = {
        /* annotations and unknown keywords (draft 4's id, x-*, a misspelling) assert nothing */
        {"{\"id\":\"x\",\"self\":{},\"x-kubernetes-group\":1,\"type\":\"integer\",\"maxmimum\":3}", "7", 1},
        {"{\"id\":\"x\",\"type\":\"integer\"}", "\"7\"", 0},
        {"{\"enum\":[\"a\",\"b\"],\"title\":\"t\",\"x-order\":2}", "\"a\"", 1},
        /* draft 4: boolean exclusiveMaximum makes maximum exclusive */
        {"{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"type\":\"integer\",\"maximum\":5,"
         "\"exclusiveMaximum\":true}", "5", 0},
        {"{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"type\":\"integer\",\"maximum\":5,"
         "\"exclusiveMaximum\":true}", "4", 1},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":false}", "5", 1},
        /* a $ref's siblings apply in every draft (drafts 4 to 7 ignore them, ajv applies them: merged, a narrowing) */
        {"{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"definitions\":{\"a\":{\"type\":\"integer\"}},"
         "\"$ref\":\"#/definitions/a\",\"maximum\":2}", "9", 0},
        {"{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$defs\":{\"a\":{\"type\":\"integer\"}},"
         "\"$ref\":\"#/$defs/a\",\"maximum\":2}", "9", 0},
        {"{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$defs\":{\"a\":{\"type\":\"integer\"}},"
         "\"$ref\":\"#/$defs/a\",\"maximum\":2}", "2", 1},
        /* allOf with several members: merged */
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":1},{\"maximum\":3}]}", "3", 1},
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":1},{\"maximum\":3}]}", "4", 0},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
         "{\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}]}", "{\"a\":\"x\",\"b\":1}", 1},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
         "{\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}]}", "{\"a\":\"x\"}", 0},
        /* a member's additionalProperties: false forbids the other member's names */
        {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
         "{\"properties\":{\"b\":{}}}]}", "{\"b\":1}", 0},
        /* anyOf / oneOf beside other keywords: merged into each branch */
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},\"required\":[\"k\"],"
         "\"oneOf\":[{\"properties\":{\"k\":{\"const\":\"a\"}}},{\"properties\":{\"k\":{\"const\":\"b\"}}}]}",
         "{\"k\":\"b\"}", 1},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},\"required\":[\"k\"],"
         "\"oneOf\":[{\"properties\":{\"k\":{\"const\":\"a\"}}},{\"properties\":{\"k\":{\"const\":\"b\"}}}]}",
         "{\"k\":\"c\"}", 0},
        {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"type\":\"integer\"}]}", "\"ab\"", 0},
        {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"type\":\"integer\"}]}", "\"a\"", 1},
        /* overlapping oneOf: only the branches disjoint from all others are written (a narrowing) */
        {"{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"},{\"type\":\"string\"}]}", "\"x\"", 1},
        {"{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"},{\"type\":\"string\"}]}", "1.5", 0},
        /* annotations that differ between merged members are no conflict */
        {"{\"description\":\"a\",\"allOf\":[{\"description\":\"b\",\"type\":\"integer\"}]}", "1", 1},
        /* if/then: held to if and then (a narrowing) */
        {"{\"type\":\"integer\",\"if\":{\"minimum\":0},\"then\":{\"maximum\":5}}", "5", 1},
        {"{\"type\":\"integer\",\"if\":{\"minimum\":0},\"then\":{\"maximum\":5}}", "6", 0},
        /* dependencies / dependentRequired: the names always required (a narrowing) */
        {"{\"properties\":{\"a\":{},\"b\":{}},\"dependentRequired\":{\"a\":[\"b\"]}}", "{\"a\":1}", 0},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"dependencies\":{\"a\":[\"b\"]}}", "{\"a\":1,\"b\":2}", 1},
        /* unevaluatedProperties: false where additionalProperties is absent */
        {"{\"properties\":{\"a\":{}},\"unevaluatedProperties\":false}", "{\"a\":1}", 1},
        /* enum beside other keywords: the values they refuse are left out */
        {"{\"enum\":[\"a\",\"bb\",3],\"maxLength\":1}", "\"bb\"", 0},
        {"{\"enum\":[\"a\",\"bb\",3],\"type\":[\"string\",\"integer\"],\"maxLength\":1}", "3", 1},
        {"{\"type\":\"object\",\"enum\":[{\"a\":1},{\"b\":1}],\"required\":[\"a\"]}", "{\"b\":1}", 0},
        /* formats: uri, hostname, ipv6 narrowed; a format validators do not know is an annotation */
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"https://example.com/a\"", 1},
        {"{\"type\":\"string\",\"format\":\"url\"}", "\"https://lamydia\"", 0}, /* ajv-formats' url wants a top-level domain */
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"not a uri\"", 0},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "\"a-b.example\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"::1\"", 0},
        {"{\"type\":\"string\",\"format\":\"x-custom\",\"maxLength\":2}", "\"abc\"", 0},
        {"{\"type\":\"string\",\"format\":\"x-custom\",\"maxLength\":2}", "\"ab\"", 1},
        /* tuples: prefixItems (2020-12), items as a list and additionalItems (drafts 4 to 2019-09) */
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1,\"a\"]", 1},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1,\"a\",2]", 0},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", "[1]", 1},
        {"{\"prefixItems\":[{\"type\":\"integer\"}],\"minItems\":2,\"items\":{\"type\":\"null\"}}", "[1]", 0},
        {"{\"prefixItems\":[{\"type\":\"integer\"}],\"minItems\":2,\"items\":{\"type\":\"null\"}}", "[1,null,null]", 1},
        {"{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":false}", "[1,2]", 0},
        {"{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":false}", "[\"a\"]", 0},
        /* uniqueItems: at most one item (a narrowing); contains: the first item (a narrowing) */
        {"{\"type\":\"array\",\"uniqueItems\":true}", "[1,2]", 0},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "[1]", 1},
        {"{\"type\":\"array\",\"contains\":{\"const\":7}}", "[]", 0},
        {"{\"type\":\"array\",\"contains\":{\"const\":7}}", "[7,1]", 1},
        /* patternProperties: a named member whose name matches takes the pattern's schema too */
        {"{\"properties\":{\"ab\":{},\"c\":{}},\"patternProperties\":{\"^a\":{\"type\":\"integer\"}}}", "{\"ab\":\"x\"}", 0},
        {"{\"properties\":{\"ab\":{},\"c\":{}},\"patternProperties\":{\"^a\":{\"type\":\"integer\"}}}", "{\"ab\":1,\"c\":\"x\"}", 1},
        /* propertyNames: a name it refuses is not written */
        {"{\"properties\":{\"ab\":{},\"c\":{}},\"propertyNames\":{\"maxLength\":1}}", "{\"ab\":1}", 0},
        {"{\"properties\":{\"ab\":{},\"c\":{}},\"propertyNames\":{\"maxLength\":1}}", "{\"c\":1}", 1},
        /* not: of {} (nothing), a type, one required name, enum values beside an enum, anyOf of those */
        {"{\"properties\":{\"a\":{\"not\":{}},\"b\":{}}}", "{\"a\":1}", 0},
        {"{\"properties\":{\"a\":{\"not\":{}},\"b\":{}}}", "{\"b\":1}", 1},
        {"{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"null\"}}", "null", 0},
        {"{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"null\"}}", "\"x\"", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"a\"]}}", "{\"a\":1}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"a\"]}}", "{\"b\":1}", 1},
        {"{\"enum\":[1,2,3],\"not\":{\"enum\":[2]}}", "2", 0},
        {"{\"enum\":[1,2,3],\"not\":{\"enum\":[2]}}", "3", 1},
        {"{\"not\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}", "null", 0},
        {"{\"not\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}", "\"x\"", 0},
        {"{\"not\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}", "[1]", 1},
        /* oneOf with overlapping branches: each narrowed apart from the others where it can be */
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}},{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}]}", "{}", 0},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}},{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}]}", "{\"a\":\"x\"}", 1},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}},{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}]}", "{\"a\":1}", 1},
        {"{\"oneOf\":[{\"type\":[\"string\",\"null\"]},{\"type\":\"null\"}]}", "null", 0},
        {"{\"oneOf\":[{\"type\":[\"string\",\"null\"]},{\"type\":\"null\"}]}", "\"x\"", 1},
        {"{\"oneOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "{\"a\":1}", 1},
        {"{\"oneOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "{\"b\":1}", 1},
        {"{\"oneOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "{\"a\":1,\"b\":2}", 0},
        {"{\"oneOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "1", 0},
        /* $ref by anchor, by a subschema's $id, by the document's $id with a pointer */
        {"{\"$defs\":{\"a\":{\"$anchor\":\"foo\",\"type\":\"integer\"}},\"$ref\":\"#foo\"}", "1", 1},
        {"{\"$defs\":{\"a\":{\"$anchor\":\"foo\",\"type\":\"integer\"}},\"$ref\":\"#foo\"}", "\"x\"", 0},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"$id\":\"item.json\",\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"item.json\"}}}", "{\"p\":\"x\"}", 1},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"$id\":\"item.json\",\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"item.json\"}}}", "{\"p\":1}", 0},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"http://x.org/root.json#/$defs/a\"}}}", "{\"p\":1}", 0},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"$id\":\"http://x.org/b/item.json\",\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"http://x.org/b/item.json\"}}}", "{\"p\":1}", 0},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"http://x.org/root.json#/$defs/a\"}}}", "{\"p\":\"x\"}", 1},
        /* format with lengths every string of the format has */
        {"{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":1,\"maxLength\":36}", "\"123e4567-e89b-42d3-a456-426614174000\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\",\"minLength\":1}", "\"2024-02-29\"", 1},
        /* multipleOf: integers spelled out between bounds; 1, 0.01, powers of two: integers (narrowing) */
        {"{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":0,\"exclusiveMaximum\":64}", "32", 1},
        {"{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":0,\"exclusiveMaximum\":64}", "64", 0},
        {"{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":0,\"exclusiveMaximum\":64}", "33", 0},
        {"{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":-20,\"maximum\":64}", "-16", 1},
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", "1234", 1},
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", "12.5", 0},
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", "-1", 0},
        {"{\"type\":\"number\",\"multipleOf\":0.25}", "-7", 1},
        /* oneOf: enum values that the other branch's pattern refuses make the branches disjoint */
        {"{\"oneOf\":[{\"enum\":[\"none\",\"header\"]},{\"type\":\"string\",\"pattern\":\"^cookie:[a-z]+$\"}]}", "\"header\"", 1},
        {"{\"oneOf\":[{\"enum\":[\"none\",\"header\"]},{\"type\":\"string\",\"pattern\":\"^cookie:[a-z]+$\"}]}", "\"cookie:x\"", 1},
        {"{\"oneOf\":[{\"enum\":[\"none\",\"cookie:a\"]},{\"type\":\"string\",\"pattern\":\"^cookie:[a-z]+$\"}]}", "\"none\"", -1},
        /* pattern with minLength/maxLength: the pattern narrowed to those lengths */
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}", "\"abc\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 0},
        /* minProperties: optional members made required in order; maxProperties: the rest dropped */
        {"{\"properties\":{\"a\":{},\"b\":{}},\"minProperties\":1}", "{}", 0},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"minProperties\":1}", "{\"a\":1}", 1},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"maxProperties\":1}", "{\"a\":1,\"b\":2}", 0},
        {"{\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":1}", "{\"a\":1}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL;
        int r = schema_match(cases[i].schema, cases[i].text, &err);
        CHECK(r == cases[i].want, "case %zu: %s on %s: got %d (%s), want %d", i, cases[i].schema, cases[i].text, r,
              err ? err : "", cases[i].want);
        free(err);
    }
}

/* Patterns against POSIX regexec on every string over {a, b, c} up to 6 characters: without
 * a length the grammar accepts exactly what the pattern matches (repetitions of parts that
 * match the empty string included: `(a*)*`); with minLength/maxLength it accepts only
 * matching strings of those lengths (a narrowing), at least one, and all of them where the
 * narrowing is exact. */
static void test_pattern_brute(void) {
    static const struct { const char *pat; int lo, hi, exact; } cases[] = {
        {"^(a*)*$", -1, -1, 1}, {"^(a?)*$", -1, -1, 1}, {"^(a*|b)*$", -1, -1, 1}, {"^(a|b?)+c$", -1, -1, 1},
        {"(a*b?)*c", -1, -1, 1}, {"^((a?b?)*|c)+$", -1, -1, 1}, {"^(a?){2,3}b$", -1, -1, 1}, {"^(a*)+$", -1, -1, 1},
        {"^((a|)(b|))*c$", -1, -1, 1}, {"^(ab|c)*$", -1, -1, 1}, {"b(a|c)", -1, -1, 1},
        {"^[ab]+$", 2, 4, 1}, {"^a*b*$", 3, 5, 0}, {"a", -1, 3, 0}, {"a", 2, -1, 0}, {"^(ab|c)*$", 3, 6, 0},
        {"^(a*b)+c?$", 2, 5, 0}, {"^(a|bc|cab)$", 2, 2, 1}, {"^((a*)*b)+$", 4, -1, 0}, {"c(a?b?)*", 1, 4, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char schema[256], *g = NULL, *err = NULL;
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"", cases[i].pat);
        if (cases[i].lo >= 0) snprintf(schema + strlen(schema), sizeof schema - strlen(schema), ",\"minLength\":%d", cases[i].lo);
        if (cases[i].hi >= 0) snprintf(schema + strlen(schema), sizeof schema - strlen(schema), ",\"maxLength\":%d", cases[i].hi);
        strcat(schema, "}");
        regex_t re;
        CHECK(!regcomp(&re, cases[i].pat, REG_EXTENDED | REG_NOSUB), "regcomp %s", cases[i].pat);
        int rc = cst_schema_to_gbnf(schema, strlen(schema), CST_JSON, &g, &err);
        CHECK(!rc, "%s: %s", schema, err ? err : "");
        cst_grammar gr;
        cst_dfa *d = NULL;
        if (!rc && !cst_grammar_parse(&gr, g, strlen(g), &err)) {
            CHECK(!cst_dfa_new(&d, &gr, NULL), "%s: dfa", schema);
            int accepted = 0, wrong = 0, missed = 0;
            char s[10];
            for (int len = 0; d && len <= 6; len++) {
                int total = 1;
                for (int k = 0; k < len; k++) total *= 3;
                for (int v = 0; v < total; v++) {
                    int x = v;
                    s[0] = '"';
                    for (int k = 0; k < len; k++, x /= 3) s[1 + k] = (char)('a' + x % 3);
                    s[1 + len] = '"';
                    s[2 + len] = 0;
                    int in_len = (cases[i].lo < 0 || len >= cases[i].lo) && (cases[i].hi < 0 || len <= cases[i].hi);
                    s[1 + len] = 0;
                    int want = in_len && !regexec(&re, s + 1, 0, NULL, 0);
                    s[1 + len] = '"';
                    int got = cst_dfa_matches(d, s, strlen(s));
                    accepted += got == 1;
                    wrong += got == 1 && !want;
                    missed += got != 1 && want;
                }
            }
            CHECK(!wrong, "%s: %d strings accepted that the pattern or the lengths refuse", schema, wrong);
            CHECK(accepted > 0, "%s: nothing accepted", schema);
            CHECK(!cases[i].exact || !missed, "%s: %d matching strings refused", schema, missed);
            cst_dfa_free(d);
            cst_grammar_free(&gr);
        } else CHECK(0, "%s: grammar: %s", schema, err ? err : "");
        regfree(&re);
        free(g);
        free(err);
    }
}

/* A schema outside the subset is refused, and the message names the keyword and where. */
static void test_schema_refusals(void) {
    static const struct { const char *schema, *says; } cases[] = {
        {"{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":2}", "#: \"uniqueItems\" with minItems above 1"},
        {"{\"properties\":{\"a\":{\"not\":{\"type\":\"string\",\"minLength\":2}}}}", "\"not\" of this schema is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"ab\":{}},\"required\":[\"ab\"],\"propertyNames\":{\"maxLength\":1}}",
         "required \"ab\" is refused by \"propertyNames\""},
        {"{\"type\":\"object\",\"minProperties\":1}", "\"minProperties\" 1 is more than the named properties"},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "\"multipleOf\" 3 is supported only between a minimum and a maximum"},
        {"{\"type\":\"number\",\"multipleOf\":0.3}", "\"multipleOf\" 0.3 is not supported"},
        {"{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":1,\"maximum\":4}", "no multiple of 5 lies within the bounds"},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"format\": \"duration\" is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "back-references are not supported"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "lookaround is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "word boundary"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "'^' is supported only at the start"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", "\\p{...} is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"a{2000}\"}", "a count above 1000"},
        {"{\"type\":\"string\",\"maxLength\":100,\"format\":\"email\"}", "\"email\" together with minLength/maxLength is supported only where"},
        {"{\"type\":\"string\",\"maxLength\":3,\"pattern\":\"^a{5}$\"}", "no string matching \"pattern\" has a length"},
        {"{\"type\":\"string\",\"minLength\":6,\"pattern\":\"^a{5}$\"}", "no string matching \"pattern\" has a length"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "a document that is not this one"},
        {"{\"$ref\":\"#nowhere\"}", "the anchor \"#nowhere\" is not in this document"},
        {"{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"$id\":\"http://x.org/b/item.json\"}},\"$ref\":\"item.json\"}", "a document that is not this one"},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not resolve"},
        {"{\"$ref\":\"#/$defs/a\",\"type\":\"object\",\"$defs\":{\"a\":{\"type\":\"string\"}}}", "no \"type\" in common"},
        {"{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "\"oneOf\" branches 0 and 1 may both match"},
        {"{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "\"pattern\" in both with different values"},
        {"{\"allOf\":[{\"enum\":[1,2]},{\"enum\":[3]}]}", "no enum/const value in common"},
        {"{\"allOf\":[{\"$ref\":\"#\"}]}", "32 deep"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"],\"additionalProperties\":false}", "no object is valid"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies within the bounds"},
        {"{\"enum\":[]}", "\"enum\" is not a non-empty array"},
        {"{\"const\":1e400}", "not finite"},
        {"{\"$defs\":{\"x\":{\"enum\":[1],\"anyOf\":[{\"$ref\":\"#/$defs/x\"}]}},\"$ref\":\"#/$defs/x\"}", "nested too deep"},
        {"{\"enum\":[1,[-1e400]]}", "not finite"},
        {"{\"type\":\"strin\"}", "\"type\" is not a type name"},
        {"{\"minLength\":1,\"minimum\":1}", "keywords of several types"},
        {"{\"type\":\"array\",\"contains\":{},\"maxContains\":1}", "\"maxContains\" is not supported"},
        {"false", "accepts nothing"},
        {"{\"type\":", "json schema: bad JSON"},
        {"{} x", "text after the JSON value"},
        {"\"\xff\"", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL, *g = NULL;
        int rc = cst_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), CST_JSON, &g, &err);
        CHECK(rc == PLUME_EINVAL && err && strstr(err, cases[i].says), "case %zu: %s: got %d \"%s\", want \"%s\"", i,
              cases[i].schema, rc, err ? err : "", cases[i].says);
        free(err);
        free(g);
    }
}

/* Integer and decimal bounds against exact arithmetic on integers scaled by 10^6: bounds with
 * up to 3 decimals, candidates with up to 6. */
static void test_number_bounds_twin(void) {
    uint64_t rng = 7;
    int checked = 0;
    for (int round = 0; round < 12; round++) {
        int is_int = round % 3 == 0;
        int64_t lo = (int64_t)(plume_rng_next(&rng) % 2000001) - 1000000, span = (int64_t)(plume_rng_next(&rng) % 1500000);
        int64_t unit_b = is_int ? 1000000 : 1000; /* integers: whole; numbers: 3 decimals */
        lo = lo / unit_b * unit_b;
        int64_t hi = lo + (is_int ? 2000000 : 0) + span / unit_b * unit_b + (is_int ? 0 : 250);
        int excl_lo = round % 2, excl_hi = round % 4 == 1;
        char schema[256];
        snprintf(schema, sizeof schema, "{\"type\":\"%s\",\"%s\":%.6f,\"%s\":%.6f}", is_int ? "integer" : "number",
                 excl_lo ? "exclusiveMinimum" : "minimum", (double)lo / 1e6, excl_hi ? "exclusiveMaximum" : "maximum",
                 (double)hi / 1e6);
        char *g = NULL, *err = NULL;
        cst_grammar gr;
        cst_dfa *d = NULL;
        int rc = cst_schema_to_gbnf(schema, strlen(schema), CST_JSON, &g, &err);
        if (!rc) rc = cst_grammar_parse(&gr, g, strlen(g), &err);
        CHECK(!rc, "%s: %s", schema, err ? err : "");
        if (rc) { free(err); free(g); continue; }
        cst_dfa_new(&d, &gr, NULL);
        for (int k = 0; k < 400; k++) {
            /* a candidate near the bounds or anywhere, with 0-6 decimals */
            int64_t base = k % 3 == 0 ? lo : k % 3 == 1 ? hi : 0;
            int64_t x = base + (int64_t)(plume_rng_next(&rng) % 4000001) - 2000000;
            int dec = (int)(plume_rng_next(&rng) % 7);
            int64_t unit = 1;
            for (int u = 0; u < 6 - dec; u++) unit *= 10;
            x = x / unit * unit;
            if (k % 10 == 0) x = k % 20 ? lo : hi, dec = 6; /* exactly on a bound */
            char text[64];
            int64_t ax = x < 0 ? -x : x;
            if (dec == 0 && x % 1000000 == 0) snprintf(text, sizeof text, "%s%lld", x < 0 ? "-" : "", (long long)(ax / 1000000));
            else {
                if (dec == 0) dec = 6;
                char frac[8];
                snprintf(frac, sizeof frac, "%06lld", (long long)(ax % 1000000));
                frac[dec] = 0;
                snprintf(text, sizeof text, "%s%lld.%s", x < 0 ? "-" : "", (long long)(ax / 1000000), frac);
            }
            int64_t v = x; /* the text's value in millionths (the digits cut off above are zeros) */
            int ok = (excl_lo ? v > lo : v >= lo) && (excl_hi ? v < hi : v <= hi) && (!is_int || v % 1000000 == 0);
            if (is_int && strchr(text, '.')) ok = 0; /* integers are written without a fraction */
            if (!strcmp(text, "-0") || !strncmp(text, "-0.000000", 9)) continue; /* not generated, either way */
            int m = cst_dfa_matches(d, text, strlen(text));
            CHECK(m == ok, "%s on %s: %d, want %d", schema, text, m, ok);
            checked++;
        }
        cst_dfa_free(d);
        cst_grammar_free(&gr);
        free(g);
    }
    CHECK(checked > 4000, "only %d candidates checked", checked);
}

/* Write v compactly, numbers as the shortest text that reads back the same (cJSON prints 15
 * digits, which turns 9007199254740993 into another number). */
static void json_put(char **buf, size_t *len, size_t *cap, const cJSON *v);

/* Append text. */
static void jp(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static void json_put(char **buf, size_t *len, size_t *cap, const cJSON *v) {
    if (cJSON_IsNumber(v)) {
        char t[40];
        double x = v->valuedouble;
        if (x > -1e17 && x < 1e17 && floor(x) == x) snprintf(t, sizeof t, "%lld", (long long)x);
        else
            for (int p = 1; p <= 17; p++) {
                snprintf(t, sizeof t, "%.*g", p, x);
                if (strtod(t, NULL) == x) break;
            }
        jp(buf, len, cap, t, strlen(t));
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int arr = cJSON_IsArray(v);
        jp(buf, len, cap, arr ? "[" : "{", 1);
        for (const cJSON *x = v->child; x; x = x->next) {
            if (x != v->child) jp(buf, len, cap, ",", 1);
            if (!arr) {
                cJSON k = {0};
                k.type = cJSON_String;
                k.valuestring = x->string;
                char *t = cJSON_PrintUnformatted(&k);
                jp(buf, len, cap, t, strlen(t));
                free(t);
                jp(buf, len, cap, ":", 1);
            }
            json_put(buf, len, cap, x);
        }
        jp(buf, len, cap, arr ? "]" : "}", 1);
    } else {
        char *t = cJSON_PrintUnformatted(v);
        jp(buf, len, cap, t, strlen(t));
        free(t);
    }
}

/* The JSON Schema Test Suite (tests/data/schemas/suite, draft 2020-12): every schema either
 * compiles or is refused with a message; for those that compile, every instance the suite
 * calls invalid must be rejected (the grammar may narrow: some valid instances are written
 * differently than plume would, those are only counted). */
static void test_suite_soundness(void) {
    static const char *const files[] = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "anyOf", "oneOf", "allOf",
        "items", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "pattern", "ref", "defs", "boolean_schema", "format-date", "format-time",
        "format-date-time", "format-uuid", "format-email", "format-ipv4",
        /* round 2 (issue 44) */
        "contains", "minContains", "dependentRequired", "dependentSchemas", "if-then-else", "maxProperties",
        "minProperties", "patternProperties", "prefixItems", "propertyNames", "unevaluatedItems",
        "unevaluatedProperties", "uniqueItems", "default", "infinite-loop-detection", "not", "format-uri",
        "format-hostname", "format-ipv6", "multipleOf"};
    int compiled = 0, refused = 0, rejected = 0, narrowed = 0, accepted = 0;
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[512], *text = NULL, *err = NULL;
        size_t len;
        snprintf(path, sizeof path, "%s/schemas/suite/%s.json", t_data(), files[f]);
        if (plume_read_file(path, &text, &len, &err)) { CHECK(0, "%s", err); free(err); continue; }
        cJSON *doc = cJSON_Parse(text), *grp;
        CHECK(cJSON_IsArray(doc), "%s: not a suite file", path);
        cJSON_ArrayForEach(grp, doc) {
            const char *desc = cJSON_GetStringValue(cJSON_GetObjectItem(grp, "description"));
            char *st = cJSON_PrintUnformatted(cJSON_GetObjectItem(grp, "schema")), *g = NULL;
            cst_grammar gr;
            if (cst_schema_to_gbnf(st, strlen(st), CST_JSON, &g, &err)) {
                CHECK(err && !strncmp(err, "json schema: ", 13), "%s: %s: a refusal without a message", files[f], desc);
                refused++;
            } else if (cst_grammar_parse(&gr, g, strlen(g), &err)) {
                CHECK(0, "%s: %s: the grammar does not parse: %s", files[f], desc, err);
            } else {
                compiled++;
                cst_dfa *d = NULL;
                cst_dfa_new(&d, &gr, NULL);
                cJSON *t;
                cJSON_ArrayForEach(t, cJSON_GetObjectItem(grp, "tests")) {
                    const char *td = cJSON_GetStringValue(cJSON_GetObjectItem(t, "description"));
                    if (td && strstr(td, "NUL")) continue; /* cJSON strings end at NUL: not the instance */
                    char *inst = NULL;
                    size_t il = 0, ic = 0;
                    json_put(&inst, &il, &ic, cJSON_GetObjectItem(t, "data"));
                    int valid = cJSON_IsTrue(cJSON_GetObjectItem(t, "valid")), m = cst_dfa_matches(d, inst, il);
                    CHECK(valid || !m, "%s: %s: %s: the invalid %s is accepted", files[f], desc, td, inst);
                    rejected += !valid && !m;
                    narrowed += valid && !m;
                    accepted += valid && m;
                    free(inst);
                }
                cst_dfa_free(d);
                cst_grammar_free(&gr);
            }
            free(err);
            err = NULL;
            free(g);
            free(st);
        }
        cJSON_Delete(doc);
        free(text);
    }
    /* floors under today's counts (113 compiled, 192 accepted, 336 rejected): a regression
     * that refuses or narrows much more fails */
    CHECK(compiled >= 100 && accepted >= 170 && rejected >= 300, "compiled %d, refused %d, accepted %d, narrowed %d, "
          "rejected %d", compiled, refused, accepted, narrowed, rejected);
    printf("  suite: %d schemas compiled, %d refused; %d valid instances accepted, %d written otherwise, %d invalid "
           "rejected\n", compiled, refused, accepted, narrowed, rejected);
}

/* ---- the real vocabulary ----------------------------------------------------------------- */

static plume_tokenizer *g_tok;
static plume_vocab *g_vocab;
static int g_real; /* 0 not tried, 1 loaded, -1 missing */

/* Load the real vocabulary once. */
static int real_load(void) {
    if (g_real) return g_real;
    const char *p = getenv("PLUME_VOCAB");
    char path[600];
    snprintf(path, sizeof path, "%s", p && *p ? p : "tests/vocab/tokenizer.bin");
    if (access(path, R_OK)) return g_real = -1;
    char *err = NULL;
    if (plume_tokenizer_open(&g_tok, path, &err) || plume_vocab_new(&g_vocab, g_tok, &err)) {
        printf("  %s: %s\n", path, err);
        free(err);
        return g_real = -1;
    }
    return g_real = 1;
}

/* Whether a real-vocabulary test can go on (a CHECK fails when the vocabulary is missing). */
static int real_ok(void) {
    CHECK(real_load() == 1, "the real vocabulary is missing: run `make vocab` (or set PLUME_OFFLINE=1 to skip)");
    return g_real == 1;
}

#define RUN_REAL(fn)                                                                          \
    do {                                                                                      \
        const char *off = getenv("PLUME_OFFLINE");                                            \
        if (real_load() != 1 && off && !strcmp(off, "1")) printf("SKIP %s\n", #fn);           \
        else RUN(fn);                                                                         \
    } while (0)

/* The ids of text (special tokens included). */
static int32_t ids_of(const char *text, int32_t *ids, int32_t cap) {
    return plume_tokenize(g_tok, text, strlen(text), ids, cap);
}

/* A constraint from a schema (NULL on failure, checked). */
static plume_constraint *con_schema(const char *schema, int32_t thinking) {
    plume_constraint_params p = plume_constraint_default_params();
    p.thinking = thinking;
    plume_constraint *c = NULL;
    char *err = NULL;
    CHECK(plume_constraint_new_json_schema(&c, g_vocab, schema, strlen(schema), &p, &err) == 0, "%s: %s", schema,
          err ? err : "");
    free(err);
    return c;
}

/* Accept text's ids; how many were accepted before one was refused. */
static int32_t accept_text(plume_constraint *c, const char *text) {
    int32_t ids[512], n = ids_of(text, ids, 512), k = 0;
    while (k < n && plume_constraint_accept(c, ids[k]) == 0) k++;
    return k == n ? n : k;
}

static const char person[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},\"age\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]}}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

/* The mask against a twin: a second recognizer of the same grammar runs the whole text
 * (accepted prefix + the token's bytes) from the start for every one of the 262144 tokens;
 * the token is allowed exactly when the text is still a live prefix. Several states: before
 * anything, inside a key, inside a string (nearly every token), after a number, at the end,
 * near a string's maxLength. */
static void test_mask_matches_twin(void) {
    if (!real_ok()) return;
    static const char *const prefixes[] = {"", "{\"na", "{\"name\": \"Ada ", "{\"name\":\"x\",\"age\":1",
                                           "{\"name\":\"x\",\"age\":12}", "{\"name\":\"\\u00",
                                           /* two characters left: most tokens die on a later byte
                                              (the walk's skip jumps) */
                                           "{\"name\": \"abcdefghijklmnopqr", "{\"name\": \"abcdefghijklmnopqrs"};
    char *g = NULL;
    CHECK(cst_schema_to_gbnf(person, strlen(person), CST_JSON, &g, NULL) == 0, "compile");
    if (!g) return;
    static const char *const ends[] = {"<turn|>", "<eos>"};
    cst_grammar twin;
    CHECK(cst_grammar_parse(&twin, g, strlen(g), NULL) == 0 && cst_grammar_wrap(&twin, 0, ends, 2, NULL) == 0 &&
              cst_grammar_bind(&twin, g_tok, NULL) == 0, "twin grammar");
    cst_dfa *d = NULL;
    cst_dfa_new(&d, &twin, NULL);
    int32_t V = g_vocab->n_vocab;
    uint32_t *bits = malloc((size_t)(V + 31) / 32 * 4);
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
        plume_constraint *c = con_schema(person, 0);
        if (!c) break;
        CHECK(accept_text(c, prefixes[k]) == ids_of(prefixes[k], NULL, 0), "prefix \"%s\" refused", prefixes[k]);
        int32_t n = plume_constraint_mask(c, bits), twin_n = 0, bad = 0;
        int32_t s0 = cst_dfa_start(d);
        for (const char *q = prefixes[k]; *q; q++) s0 = cst_dfa_step(d, s0, (uint8_t)*q);
        for (int32_t id = 0; id < V && bad < 3; id++) {
            int32_t s = s0;
            if (g_vocab->symbol[id]) s = cst_dfa_step_token(d, s, id);
            else if (g_vocab->off[id + 1] == g_vocab->off[id]) s = CST_DEAD;
            else
                for (uint32_t b = g_vocab->off[id]; b < g_vocab->off[id + 1] && s >= 0; b++) s = cst_dfa_step(d, s, g_vocab->bytes[b]);
            int want = s >= 0, got = bits[id >> 5] >> (id & 31) & 1;
            twin_n += want;
            if (want != got || got != plume_constraint_allows(c, id)) {
                CHECK(0, "prefix \"%s\": token %d: mask %d, allows %d, twin %d", prefixes[k], id, got,
                      plume_constraint_allows(c, id), want);
                bad++;
            }
        }
        CHECK(n == twin_n, "prefix \"%s\": %d allowed, twin %d", prefixes[k], n, twin_n);
        plume_constraint_free(c);
    }
    free(bits);
    cst_dfa_free(d);
    cst_grammar_free(&twin);
    free(g);
}

/* Sampler params by name, for the distribution test. */
static plume_sampler_params params_of(int kind) {
    plume_sampler_params p = plume_sampler_default_params();
    p.seed = 11;
    switch (kind) {
    case 0: p.temperature = 0; break;                        /* greedy */
    case 1: break;                                           /* top-k 64, top-p 0.95 */
    case 2: p.top_k = 0; p.top_p = 0.9f; break;              /* the whole distribution */
    case 3: p.top_k = 0; p.top_p = 1; p.min_p = 0.05f; break;
    case 4: p.top_k = 40; p.repeat_penalty = 1.3f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.2f; break;
    default: p.top_k = 5; p.temperature = 0.7f; break;
    }
    return p;
}

/* An id and its logit, for ranking. */
typedef struct {
    float l;
    int32_t id;
} ranked;

/* Higher logit first, then lower id. */
static int ranked_cmp(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

#define DIST_CHECKED 2000 /* ids compared per case: the best allowed ones and the penalized */

/* The distribution a sampler with the constraint draws from equals that of the same chain
 * without it over logits whose disallowed ids are -inf: same support, same probabilities
 * (up to the order of the float sums), for greedy, top-k (best-first and from a cached
 * mask), top-p and min-p over the whole vocabulary, and penalties. Random logits peaked
 * enough that every support lies within the DIST_CHECKED best allowed ids (the checked
 * masses must sum to 1, which proves it), and once rounded to steps of 8 so that thousands
 * tie (as logits saturated at the softcap do: ties rank by id); several states of a schema
 * (few allowed tokens, nearly all). */
static void test_same_distribution(void) {
    if (!real_ok()) return;
    int32_t V = g_vocab->n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits), *masked = malloc((size_t)V * sizeof *masked);
    uint32_t *bits = malloc((size_t)(V + 31) / 32 * 4);
    ranked *rk = malloc((size_t)V * sizeof *rk);
    static const char *const prefixes[] = {"", "{\"name\": \"Ada", "{\"name\":\"x\",\"age\":1", "{\"name\":\"x\",\"age\":15",
                                           /* one character left: most of the best ids are refused
                                              although most first bytes live (the wide gather) */
                                           "{\"name\": \"abcdefghijklmnopqrs"};
    uint64_t rng = 3;
    int32_t history[6] = {236743, 623, 827, 1201, 14937, 236800}; /* ids the penalties see */
    for (int kind = 0; kind < 6; kind++)
        for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
            for (int trial = 0; trial < 3; trial++) {
                for (int32_t i = 0; i < V; i++) {
                    logits[i] = 30.0f * (plume_rng_float(&rng) + plume_rng_float(&rng) + plume_rng_float(&rng) - 1.5f);
                    if (trial == 2) logits[i] = 8.0f * floorf(logits[i] / 8.0f + 0.5f);
                }
                plume_constraint *c = con_schema(person, 0);
                if (!c) goto done;
                accept_text(c, prefixes[k]);
                if (trial == 1) plume_constraint_mask(c, bits); /* the path from a cached mask */
                plume_sampler_params sp = params_of(kind);
                plume_sampler *a = NULL, *b = NULL;
                plume_sampler_new(&a, &sp, V, NULL);
                plume_sampler_new(&b, &sp, V, NULL);
                for (int h = 0; h < 6; h++) {
                    plume_sampler_accept(a, history[h]);
                    plume_sampler_accept(b, history[h]);
                }
                plume_sampler_set_constraint(a, c);
                int32_t na = plume_sampler_prepare(a, logits);
                plume_constraint_mask(c, bits);
                int32_t n_allowed = 0;
                for (int32_t i = 0; i < V; i++) {
                    int ok = bits[i >> 5] >> (i & 31) & 1;
                    masked[i] = ok ? logits[i] : -INFINITY;
                    if (ok) rk[n_allowed++] = (ranked){logits[i], i};
                }
                int32_t nb = plume_sampler_prepare(b, masked);
                CHECK(na == nb && na > 0, "kind %d prefix \"%s\": %d candidates, masked %d", kind, prefixes[k], na, nb);
                qsort(rk, (size_t)n_allowed, sizeof *rk, ranked_cmp);
                int32_t n_check = n_allowed < DIST_CHECKED ? n_allowed : DIST_CHECKED;
                for (int h = 0; h < 6; h++) rk[n_check++] = (ranked){0, history[h]};
                double sa = 0, sb = 0;
                int bad = 0;
                for (int32_t j = 0; j < n_check && bad < 3; j++) {
                    int32_t i = rk[j].id, dup = 0;
                    for (int32_t q = 0; q < j && j >= n_check - 6 && !dup; q++) dup = rk[q].id == i;
                    if (dup) continue;
                    double pa = plume_sampler_prob(a, i), pb = plume_sampler_prob(b, i);
                    sa += pa;
                    sb += pb;
                    if ((pa > 0) != (pb > 0) || fabs(pa - pb) > 1e-12 + 1e-9 * pb) {
                        CHECK(0, "kind %d prefix \"%s\" trial %d: id %d: %.17g, masked %.17g", kind, prefixes[k], trial, i, pa, pb);
                        bad++;
                    }
                }
                CHECK(fabs(sa - 1) < 1e-9 && fabs(sb - 1) < 1e-9, "kind %d prefix \"%s\": the checked ids hold %.12f / %.12f",
                      kind, prefixes[k], sa, sb);
                if (kind == 0) { /* greedy: the same id, drawn */
                    int32_t ia = plume_sampler_sample(a, logits), ib = plume_sampler_sample(b, masked);
                    CHECK(ia == ib && plume_constraint_allows(c, ia), "greedy: %d, masked %d", ia, ib);
                }
                plume_sampler_free(a);
                plume_sampler_free(b);
                plume_constraint_free(c);
            }
done:
    free(logits);
    free(masked);
    free(bits);
    free(rk);
}

/* accept/rewind through the sampler move the constraint; a refused id makes it DEAD until it
 * is rewound; allowed_prefix tries without moving. */
static void test_rewind_and_prefix(void) {
    if (!real_ok()) return;
    plume_constraint *c = con_schema(person, 0);
    if (!c) return;
    plume_sampler_params sp = plume_sampler_default_params();
    plume_sampler *s = NULL;
    plume_sampler_new(&s, &sp, g_vocab->n_vocab, NULL);
    plume_sampler_accept(s, 2); /* a prompt id, before the constraint is attached */
    plume_sampler_set_constraint(s, c);
    int32_t ids[64], n = ids_of("{\"name\":\"Ada\",\"age\":36}", ids, 64);
    CHECK(plume_sampler_allowed_prefix(s, ids, n) == n && plume_constraint_n_accepted(c) == 0, "prefix of a valid text");
    int32_t bad[3] = {ids[0], ids[1], ids_of("}", ids + 60, 1) == 1 ? ids[60] : 0};
    CHECK(plume_sampler_allowed_prefix(s, bad, 3) == 2 && plume_constraint_n_accepted(c) == 0, "prefix cut at a refusal");
    for (int32_t i = 0; i < n; i++) plume_sampler_accept(s, ids[i]);
    CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE, "complete after the object: %d", plume_constraint_status(c));
    CHECK(plume_sampler_rewind(s, n) == 0 && plume_constraint_n_accepted(c) == 0 &&
              plume_constraint_status(c) == PLUME_CONSTRAINT_OPEN, "rewound to the start");
    CHECK(plume_sampler_rewind(s, 1) == PLUME_EINVAL, "rewind past the attachment");
    plume_sampler_accept(s, bad[2]); /* '}' first: refused */
    CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_DEAD, "dead after a refused id");
    float *l = calloc((size_t)g_vocab->n_vocab, sizeof *l);
    CHECK(plume_sampler_sample(s, l) == PLUME_EINVAL, "a dead constraint allows nothing");
    CHECK(plume_sampler_rewind(s, 1) == 0 && plume_constraint_status(c) == PLUME_CONSTRAINT_OPEN, "alive after rewind");
    int32_t end[1];
    ids_of("<turn|>", end, 1);
    CHECK(!plume_constraint_allows(c, end[0]), "the end of turn before the value");
    free(l);
    plume_sampler_free(s);
    plume_constraint_free(c);
}

/* Thinking: the thought is free text (the end of turn is not allowed in it), the value
 * follows it; thinking 2 starts inside the thought. */
static void test_thinking(void) {
    if (!real_ok()) return;
    const char *schema = "{\"type\":\"integer\"}";
    int32_t end[1];
    ids_of("<turn|>", end, 1);
    plume_constraint *c = con_schema(schema, 1);
    if (!c) return;
    const char *t = "<|channel>thought\nLet me think { \"not json\" <turn>...<channel|>42";
    CHECK(accept_text(c, t) == ids_of(t, NULL, 0), "thought then value");
    CHECK(plume_constraint_allows(c, end[0]), "end after the value");
    plume_constraint_reset(c);
    CHECK(accept_text(c, "42") == ids_of("42", NULL, 0), "the thought may be left out");
    plume_constraint_reset(c);
    accept_text(c, "<|channel>thought\nhm");
    CHECK(!plume_constraint_allows(c, end[0]) && plume_constraint_status(c) == PLUME_CONSTRAINT_OPEN, "no end in the thought");
    plume_constraint_free(c);
    c = con_schema(schema, 2);
    if (!c) return;
    t = "more thought<channel|>-7";
    CHECK(accept_text(c, t) == ids_of(t, NULL, 0), "thinking 2");
    plume_constraint_free(c);
}

static const char tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":24},\"Unit\":{\"enum\":[\"c\",\"f\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":7},\"at\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"}},\"required\":[\"lat\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"maxItems\":2}},"
    "\"required\":[\"city\",\"Unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

/* A tool call as the chat template renders it is accepted whole (then <|tool_response>);
 * a wrong argument is refused; "required" takes several calls, a name only that one. */
static void test_tool_call_format(void) {
    if (!real_ok()) return;
    plume_chat_tool_call call = {NULL, "get_weather", "{\"city\":\"Paris\",\"Unit\":\"c\",\"days\":3,\"at\":{\"lat\":48.85},\"tags\":[\"x\"]}"};
    plume_chat_message_full m[2] = {{.role = "user", .content = "?"}, {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1}};
    char *text = NULL, *err = NULL;
    CHECK(plume_chat_render_full(m, 2, NULL, &text, &err) == 0, "render: %s", err ? err : "");
    const char *at = text ? strstr(text, "<|tool_call>") : NULL, *end = at ? strstr(at, "<tool_call|>") : NULL;
    CHECK(at && end, "no call in %s", text ? text : "");
    if (!at || !end) { free(text); free(err); return; }
    char rendered[512];
    snprintf(rendered, sizeof rendered, "%.*s", (int)(end + 12 - at), at);
    plume_constraint *c = NULL;
    CHECK(plume_constraint_new_tool_call(&c, g_vocab, tools, "required", NULL, &err) == 0, "%s", err ? err : "");
    if (!c) { free(text); free(err); return; }
    CHECK(accept_text(c, rendered) == ids_of(rendered, NULL, 0), "the rendered call %s is refused", rendered);
    CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE, "complete after one call");
    CHECK(accept_text(c, "<|tool_call>call:ping{}<tool_call|>") > 0 && plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE,
          "a second call");
    CHECK(accept_text(c, "<|tool_response>") == 1 && plume_constraint_status(c) == PLUME_CONSTRAINT_DONE, "ended");
    plume_constraint_reset(c);
    const char *wrong = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,Unit:<|\"|>k<|\"|>}<tool_call|>";
    CHECK(accept_text(c, wrong) < ids_of(wrong, NULL, 0), "a value outside the enum");
    plume_constraint_reset(c);
    const char *order = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,Unit:<|\"|>c<|\"|>}<tool_call|>";
    CHECK(accept_text(c, order) == ids_of(order, NULL, 0), "keys in the template's (case-folded) order");
    plume_constraint_reset(c);
    order = "<|tool_call>call:get_weather{Unit:<|\"|>c<|\"|>,city:<|\"|>Paris<|\"|>}<tool_call|>";
    CHECK(accept_text(c, order) < ids_of(order, NULL, 0), "keys out of the template's order");
    plume_constraint_free(c);
    CHECK(plume_constraint_new_tool_call(&c, g_vocab, tools, "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}", NULL, &err) == 0,
          "named: %s", err ? err : "");
    if (c) {
        CHECK(accept_text(c, "<|tool_call>call:get_weather") < ids_of("<|tool_call>call:get_weather", NULL, 0), "another function");
        plume_constraint_reset(c);
        int32_t open[1];
        ids_of("<|tool_call>", open, 1);
        CHECK(accept_text(c, "<|tool_call>call:ping{}<tool_call|>") > 0 && !plume_constraint_allows(c, open[0]), "one call only");
        plume_constraint_free(c);
    }
    static const struct { const char *choice, *says; } bad[] = {
        {"auto", "is not a constraint"}, {"nope", "not one of the tools"}, {"{\"type\":\"x\"}", "expected {\"type\": \"function\""}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        free(err);
        err = NULL;
        CHECK(plume_constraint_new_tool_call(&c, g_vocab, tools, bad[i].choice, NULL, &err) == PLUME_EINVAL && err &&
                  strstr(err, bad[i].says), "tool_choice %s: %s", bad[i].choice, err ? err : "");
    }
    free(err);
    free(text);
}

/* The budget through a constraint and the sampler (test_deep_nesting_bounded has the
 * recognizer alone): "(" accepted one at a time until a step passes the limit. A speculative
 * probe is cut there and leaves no mark; accept says PLUME_ENOMEM and the status is LIMIT;
 * the sampler then returns PLUME_ENOMEM (greedy, best-first, and the whole distribution);
 * a second constraint stops at the same token; reset clears the mark. */
static void test_deep_nesting_constraint(void) {
    if (!real_ok()) return;
    int32_t open, at[2] = {-1, -2};
    CHECK(ids_of("(", &open, 1) == 1, "one token for (");
    int32_t V = g_vocab->n_vocab;
    float *l = calloc((size_t)V, sizeof *l);
    l[open] = 10.0f; /* the best candidate: greedy asks about it first */
    for (int r = 0; r < 2; r++) {
        plume_constraint *c = NULL;
        char *err = NULL;
        CHECK(plume_constraint_new_grammar(&c, g_vocab, amb, strlen(amb), NULL, &err) == 0, "%s", err ? err : "");
        free(err);
        plume_sampler_params sp = plume_sampler_default_params();
        if (r == 0) sp.temperature = 0;
        else sp.top_k = 0; /* the whole distribution: the mask's walk */
        plume_sampler *s = NULL;
        plume_sampler_new(&s, &sp, V, NULL);
        if (!c || !s) {
            plume_constraint_free(c);
            plume_sampler_free(s);
            break;
        }
        plume_sampler_set_constraint(s, c);
        int32_t probe[60], k = 0, rc = 0;
        for (int i = 0; i < 60; i++) probe[i] = open;
        int32_t cut = plume_sampler_allowed_prefix(s, probe, 60);
        CHECK(cut >= 8 && cut < 40 && plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE &&
                  plume_constraint_n_accepted(c) == 0, "probe cut at %d, status %d", cut, plume_constraint_status(c));
        while (k < 60 && (rc = plume_constraint_accept(c, open)) == 0) k++;
        at[r] = k;
        CHECK(rc == PLUME_ENOMEM && k == cut && plume_constraint_status(c) == PLUME_CONSTRAINT_LIMIT,
              "accept: rc %d after %d, probe %d, status %d", rc, k, cut, plume_constraint_status(c));
        plume_constraint_rewind(c, 1); /* the refused one */
        plume_constraint_reset(c);
        CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE, "reset clears the mark"); /* "" is a term */
        for (int32_t i = 0; i < k; i++) plume_constraint_accept(c, open);
        CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE, "the last state before the limit");
        CHECK(plume_sampler_sample(s, l) == PLUME_ENOMEM && plume_constraint_status(c) == PLUME_CONSTRAINT_LIMIT,
              "sampling where ( passes the limit (%s)", r ? "whole distribution" : "greedy");
        plume_sampler_free(s);
        plume_constraint_free(c);
    }
    CHECK(at[0] == at[1], "the second constraint stopped at %d, the first at %d", at[1], at[0]);
    free(l);
}

/* Random walks: uniform draws among the allowed tokens until the end of turn (taken half the
 * time it is allowed). Every text is complete JSON (cJSON parses it), and every forced call
 * reads back through the chat parser as a call with a JSON object of arguments. The schemas
 * bound their strings: a uniform draw closes a free string once in ~10^5 tokens. (Model
 * answers are validated against their schemas with ajv in test_structured.c.) */
static void test_random_walks(void) {
    if (!real_ok()) return;
    int32_t V = g_vocab->n_vocab;
    uint32_t *bits = malloc((size_t)(V + 31) / 32 * 4);
    uint64_t rng = 5;
    for (int w = 0; w < 12; w++) {
        int call = w >= 8;
        plume_constraint *c = NULL;
        char *err = NULL;
        if (call) CHECK(plume_constraint_new_tool_call(&c, g_vocab, tools, "get_weather", NULL, &err) == 0, "%s", err ? err : "");
        else c = con_schema(person, 0);
        free(err);
        if (!c) break;
        int32_t ids[600], n = 0;
        while (n < 600 && plume_constraint_status(c) != PLUME_CONSTRAINT_DONE) {
            int32_t k = plume_constraint_mask(c, bits);
            if (k <= 0) break;
            int32_t pick = (int32_t)(plume_rng_next(&rng) % (uint64_t)k), id = -1;
            if (plume_constraint_status(c) == PLUME_CONSTRAINT_COMPLETE && plume_rng_next(&rng) % 2 == 0) pick = -1;
            for (int32_t i = 0; i < V && pick >= 0; i++) /* the pick-th allowed id */
                if (bits[i >> 5] >> (i & 31) & 1 && pick-- == 0) id = i;
            if (id < 0) id = 106; /* <turn|> when the value is complete */
            if (id == 106 && !plume_constraint_allows(c, id)) id = 50; /* a call ends with <|tool_response> */
            CHECK(plume_constraint_accept(c, id) == 0, "walk %d: accept %d", w, id);
            ids[n++] = id;
        }
        CHECK(plume_constraint_status(c) == PLUME_CONSTRAINT_DONE, "walk %d did not end in 600 tokens", w);
        char text[16384];
        plume_detokenize(g_tok, ids, n - 1, 0, text, sizeof text);
        if (!call) {
            cJSON *j = cJSON_Parse(text);
            CHECK(j && cJSON_IsObject(j), "walk %d: not a JSON object: %s", w, text);
            cJSON_Delete(j);
        } else {
            plume_chat_parser *p = NULL;
            plume_chat_parser_new(&p, 0, NULL);
            const plume_chat_delta *d;
            int32_t nd, calls = 0;
            plume_chat_parser_feed(p, text, strlen(text), &d, &nd);
            for (int32_t i = 0; i < nd; i++) {
                CHECK(d[i].type == PLUME_CHAT_TOOL_CALL, "walk %d: content around the call: %s", w, text);
                if (d[i].type != PLUME_CHAT_TOOL_CALL) continue;
                calls++;
                cJSON *a = cJSON_Parse(d[i].arguments);
                CHECK(cJSON_IsObject(a), "walk %d: arguments %s", w, d[i].arguments);
                cJSON_Delete(a);
            }
            plume_chat_parser_flush(p, &d, &nd);
            CHECK(calls >= 1 && nd == 0, "walk %d: %d calls in %s", w, calls, text);
            plume_chat_parser_free(p);
        }
        plume_constraint_free(c);
    }
    free(bits);
}

int main(void) {
    RUN(test_gbnf_accepts);
    RUN(test_gbnf_refusals);
    RUN(test_gbnf_no_traps);
    RUN(test_deep_nesting_bounded);
    RUN(test_schema_accepts);
    RUN(test_schema_refusals);
    RUN(test_pattern_brute);
    RUN(test_schema_round2);
    RUN(test_number_bounds_twin);
    RUN(test_suite_soundness);
    RUN_REAL(test_mask_matches_twin);
    RUN_REAL(test_same_distribution);
    RUN_REAL(test_rewind_and_prefix);
    RUN_REAL(test_thinking);
    RUN_REAL(test_tool_call_format);
    RUN_REAL(test_random_walks);
    RUN_REAL(test_deep_nesting_constraint);
    plume_vocab_free(g_vocab);
    plume_tokenizer_free(g_tok);
    return t_total_failed != 0;
}
