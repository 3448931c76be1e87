/* test_chat_parse.c -- the streaming parser of generated text (plume_chat_parser): content,
 * thought and tool-call deltas, markers split across pieces, malformed calls, and the round
 * trip with what plume_chat_render_full writes for a tool call.
 *
 * Every expectation is checked three ways: the text fed whole, fed byte by byte, and fed in
 * two pieces cut at every byte offset; the merged deltas must be the same each time. */
#include <cjson/cJSON.h>

#include "common.h"
#include "plume.h"
#include "t.h"

#define Q "<|\"|>" /* the template's string quote */

/* ---- running the parser ------------------------------------------------------------------ */

/* The deltas of a whole generation merged into one string: C[text] for content, R[text] for
 * reasoning, T[name|arguments] for a tool call; consecutive texts of one type are merged,
 * so the string does not depend on how the pieces fell. end: the end marker was seen. */
typedef struct {
    char s[2048];
    size_t len;
    int end;
    int bad; /* a delta broke the contract (NUL-termination, bad JSON arguments, ...) */
    char last; /* type letter of the last delta appended, to merge texts */
} parsed;

/* Append bytes to pr->s (truncating silently: the comparison will fail). */
static void pr_put(parsed *pr, const char *s, size_t n) {
    if (pr->len + n >= sizeof pr->s) { pr->bad = 1; return; }
    memcpy(pr->s + pr->len, s, n);
    pr->len += n;
    pr->s[pr->len] = 0;
}

/* Add the deltas of one feed or flush. */
static void pr_add(parsed *pr, const plume_chat_delta *d, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (d[i].type == PLUME_CHAT_TOOL_CALL) {
            cJSON *args = d[i].arguments ? cJSON_Parse(d[i].arguments) : NULL;
            if (!d[i].name || !cJSON_IsObject(args) || d[i].text) pr->bad = 1;
            cJSON_Delete(args);
            if (pr->last) pr_put(pr, "]", 1);
            pr_put(pr, "T[", 2);
            pr_put(pr, d[i].name ? d[i].name : "", d[i].name ? strlen(d[i].name) : 0);
            pr_put(pr, "|", 1);
            pr_put(pr, d[i].arguments ? d[i].arguments : "",
                   d[i].arguments ? strlen(d[i].arguments) : 0);
            pr->last = 'T';
            continue;
        }
        char letter = d[i].type == PLUME_CHAT_CONTENT ? 'C' : 'R';
        if (d[i].type != PLUME_CHAT_CONTENT && d[i].type != PLUME_CHAT_REASONING) pr->bad = 1;
        if (!d[i].text || d[i].text[d[i].len] != 0 || d[i].len == 0 || d[i].name) pr->bad = 1;
        if (letter != pr->last) {
            if (pr->last) pr_put(pr, "]", 1);
            pr_put(pr, letter == 'C' ? "C[" : "R[", 2);
            pr->last = letter;
        }
        if (d[i].text) pr_put(pr, d[i].text, d[i].len);
    }
}

/* Feed text[0, len) cut before each offset in cuts[0, n_cuts) (increasing), then flush. */
static void parse_cuts(parsed *pr, const char *text, size_t len, const size_t *cuts,
                       int n_cuts, int in_thought) {
    memset(pr, 0, sizeof *pr);
    plume_chat_parser *p = NULL;
    if (plume_chat_parser_new(&p, in_thought, NULL)) { pr->bad = 1; return; }
    size_t at = 0;
    for (int c = 0; c <= n_cuts; c++) {
        size_t to = c < n_cuts ? cuts[c] : len;
        const plume_chat_delta *d;
        int32_t n;
        int rc = plume_chat_parser_feed(p, text + at, to - at, &d, &n);
        if (rc < 0) pr->bad = 1;
        if (rc == 1) pr->end = 1;
        else if (pr->end) pr->bad = 1; /* once ended, stays ended */
        pr_add(pr, d, n);
        at = to;
    }
    const plume_chat_delta *d;
    int32_t n;
    if (plume_chat_parser_flush(p, &d, &n)) pr->bad = 1;
    pr_add(pr, d, n);
    if (pr->last) pr_put(pr, "]", 1);
    plume_chat_parser_free(p);
}

/* The special tokens of Gemma 4 the parser may see (each is one id); SPELLED toggles, in a test
 * text, a span where they are written with ordinary tokens instead (text that spells them). */
static const char *const specials[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<turn|>", "<eos>",
                                       "<|tool_response>", "<tool_response|>", Q, "<|turn>", "<bos>", "<|image>", NULL};
#define SPELLED "\x02"

/* Feed text as a generation's tokens through plume_chat_parser_feed_token: each special token
 * outside a SPELLED span one special piece, the rest ordinary pieces (whole runs, or one byte
 * each when bytewise), then flush. */
static void parse_typed(parsed *pr, const char *text, int in_thought, int bytewise) {
    memset(pr, 0, sizeof *pr);
    plume_chat_parser *p = NULL;
    if (plume_chat_parser_new(&p, in_thought, NULL)) { pr->bad = 1; return; }
    size_t len = strlen(text), at = 0;
    int spelled = 0;
    while (at < len) {
        const char *piece = text + at;
        size_t n = 0;
        int special = 0;
        if (text[at] == SPELLED[0]) {
            spelled = !spelled;
            at++;
            continue;
        }
        for (int k = 0; !spelled && specials[k] && !n; k++)
            if (!strncmp(piece, specials[k], strlen(specials[k]))) n = strlen(specials[k]), special = 1;
        if (!n) { /* ordinary text up to the next special token or toggle */
            while (at + n < len && text[at + n] != SPELLED[0] && (!n || !bytewise)) {
                int hit = 0;
                for (int k = 0; !spelled && specials[k] && !hit; k++)
                    hit = !strncmp(text + at + n, specials[k], strlen(specials[k]));
                if (hit) break;
                n++;
            }
        }
        const plume_chat_delta *d;
        int32_t nd;
        int rc = plume_chat_parser_feed_token(p, piece, n, special, &d, &nd);
        if (rc < 0) pr->bad = 1;
        if (rc == 1) pr->end = 1;
        else if (pr->end) pr->bad = 1;
        pr_add(pr, d, nd);
        at += n;
    }
    const plume_chat_delta *d;
    int32_t nd;
    if (plume_chat_parser_flush(p, &d, &nd)) pr->bad = 1;
    pr_add(pr, d, nd);
    if (pr->last) pr_put(pr, "]", 1);
    plume_chat_parser_free(p);
}

/* The text fed as tokens (parse_typed), whole runs and byte by byte, must give want. */
static void expect_typed(const char *text, int in_thought, const char *want, int want_end) {
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        parsed pr;
        parse_typed(&pr, text, in_thought, bytewise);
        CHECK(!pr.bad && pr.end == want_end && !strcmp(pr.s, want), "as tokens%s: %s\n  got  %s (end %d, bad %d)\n  want %s (end %d)",
              bytewise ? " (byte by byte)" : "", text, pr.s, pr.end, pr.bad, want, want_end);
    }
}

/* Parse text whole, byte by byte and in two pieces cut anywhere; all must give want (and the
 * end flag). */
static void expect_parse(const char *text, int in_thought, const char *want, int want_end) {
    size_t len = strlen(text);
    parsed pr;
    parse_cuts(&pr, text, len, NULL, 0, in_thought);
    CHECK(!pr.bad && pr.end == want_end && !strcmp(pr.s, want),
          "whole %s\n  got  %s (end %d, bad %d)\n  want %s (end %d)", text, pr.s, pr.end,
          pr.bad, want, want_end);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    parse_cuts(&pr, text, len, cuts, len ? (int)len - 1 : 0, in_thought);
    CHECK(!pr.bad && pr.end == want_end && !strcmp(pr.s, want),
          "byte by byte %s\n  got  %s", text, pr.s);
    for (size_t i = 0; i <= len; i++) {
        parse_cuts(&pr, text, len, &i, 1, in_thought);
        CHECK(!pr.bad && pr.end == want_end && !strcmp(pr.s, want),
              "cut at %zu of %s\n  got  %s", i, text, pr.s);
    }
    free(cuts);
    expect_typed(text, in_thought, want, want_end); /* every marker a special token: the same */
}

/* ---- cases --------------------------------------------------------------------------------- */

/* Plain text is content; a partial marker held at the end is released by flush. */
static void test_plain(void) {
    expect_parse("Hello, world.", 0, "C[Hello, world.]", 0);
    expect_parse("abc<tur", 0, "C[abc<tur]", 0);
    expect_parse("a < b <| c <turn", 0, "C[a < b <| c <turn]", 0);
    expect_parse("", 0, "", 0);
    expect_parse("caf\xc3\xa9 \xe2\x9c\x93", 0, "C[caf\xc3\xa9 \xe2\x9c\x93]", 0);
}

/* The thought channel: "<|channel>thought\n" opens it, "\n<channel|>" closes it (the newline
 * is the template's, line 242), content follows; the end marker is not content. */
static void test_thought_then_content(void) {
    expect_parse("<|channel>thought\nLet me think.\n<channel|>The answer.<turn|>", 0,
                 "R[Let me think.]C[The answer.]", 1);
    expect_parse("<|channel>thought\nno newline<channel|>x", 0, "R[no newline]C[x]", 0);
    expect_parse("<|channel>thought\na\n\nb\n\n<channel|>x", 0, "R[a\n\nb\n]C[x]", 0);
    expect_parse("<|channel>thought\n<channel|>Hi", 0, "C[Hi]", 0);
    expect_parse("<|channel>other<channel|>x", 0, "R[other]C[x]", 0);
    expect_parse("<|channel>thou", 0, "R[thou]", 0);
    expect_parse("<|channel>thought\nstill thinking\n", 0, "R[still thinking\n]", 0);
    /* In a thought only its end and the end markers count. */
    expect_parse("<|channel>thought\n<|tool_call>x<|channel>y<channel|>z", 0,
                 "R[<|tool_call>x<|channel>y]C[z]", 0);
    /* The prompt may have opened the thought already (after a tool response). */
    expect_parse("hmm\n<channel|>ok", 1, "R[hmm]C[ok]", 0);
}

/* Markers out of place are dropped; end markers end the parse, later text is ignored. */
static void test_stray_and_end(void) {
    expect_parse("a<channel|>b<tool_call|>c", 0, "C[abc]", 0);
    expect_parse("a<turn|>b", 0, "C[a]", 1);
    expect_parse("a<eos>b<|channel>thought\nc", 0, "C[a]", 1);
    expect_parse("<|channel>thought\nx<turn|>y", 0, "R[x]", 1);

    plume_chat_parser *p;
    const plume_chat_delta *d;
    int32_t n;
    CHECK(plume_chat_parser_new(&p, 0, NULL) == 0, "new");
    CHECK(plume_chat_parser_feed(p, "x<turn|>", 8, &d, &n) == 1 && n == 1, "end");
    CHECK(plume_chat_parser_feed(p, "more", 4, &d, &n) == 1 && n == 0, "after the end");
    CHECK(plume_chat_parser_flush(p, &d, &n) == 0 && n == 0, "flush after the end");
    plume_chat_parser_free(p);
    plume_chat_parser_free(NULL);
}

/* Tool calls: the template's format (lines 245-266, 124-155) back to JSON objects; after a
 * call the model ends with <|tool_response> (the template's line 370), an end marker. */
static void test_tool_calls(void) {
    expect_parse("<|channel>thought\nplan\n<channel|>Sure.<|tool_call>call:get_weather{city:" Q
                 "Paris" Q ",unit:" Q "celsius" Q "}<tool_call|><|tool_response>", 0,
                 "R[plan]C[Sure.]T[get_weather|{\"city\":\"Paris\",\"unit\":\"celsius\"}]", 1);
    expect_parse("<|tool_call>call:f{a:{b:[1,2.5,-3e-05,true,false,null],c:" Q "x" Q "},d:[],"
                 "e:{}}<tool_call|>", 0,
                 "T[f|{\"a\":{\"b\":[1,2.5,-3e-05,true,false,null],\"c\":\"x\"},\"d\":[],\"e\":{}}]", 0);
    /* Strings are copied as they are between the quotes: commas, braces, quotes, a literal
     * backslash-u, UTF-8 and control characters come out JSON-escaped. */
    expect_parse("<|tool_call>call:f{s:" Q "a,b}{c\"d\\u00e9 \xc3\xa9\n\t\x01" Q "}<tool_call|>", 0,
                 "T[f|{\"s\":\"a,b}{c\\\"d\\\\u00e9 \xc3\xa9\\n\\t\\u0001\"}]", 0);
    expect_parse("<|tool_call>call:a{}<tool_call|><|tool_call>call:b.c-d{n:1}<tool_call|>", 0,
                 "T[a|{}]T[b.c-d|{\"n\":1}]", 0);
    /* Whitespace a model might add, and keys in the quoted form. */
    expect_parse("<|tool_call> call:f{ " Q "k k" Q " : [ 1 , 2 ] , x : null } <tool_call|>", 0,
                 "T[f|{\"k k\":[1,2],\"x\":null}]", 0);
    expect_parse("Before <|tool_call>call:f{}<tool_call|> after", 0,
                 "C[Before ]T[f|{}]C[ after]", 0);
}

/* Text that is not a well-formed call comes back as content, markers and all. */
static void test_malformed_calls(void) {
    static const char *const bodies[] = {
        "call:f{a:" Q "x}",          /* unterminated string */
        "oops",                        /* no call: */
        "call:{a:1}",                  /* no name */
        "call:f g{a:1}",               /* space in the name */
        "call:f{a:bare}",              /* a bare word is not a value */
        "call:f{a:1}x",                /* text after the arguments */
        "call:f{a:1,}",                /* trailing comma */
        "call:f{:1}",                  /* empty key */
        "call:f{a:01}",                /* not a JSON number */
        "call:f{a:[1,2}",              /* unbalanced */
        "call:f",                      /* no arguments */
        "call:f{a}",                   /* no colon */
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        char text[256], want[300];
        snprintf(text, sizeof text, "x<|tool_call>%s<tool_call|>y", bodies[i]);
        snprintf(want, sizeof want, "C[x<|tool_call>%s<tool_call|>y]", bodies[i]);
        expect_parse(text, 0, want, 0);
    }
    /* Unclosed at the end of generation, cut by the end of the turn, or by another call. */
    expect_parse("<|tool_call>call:f{a:1", 0, "C[<|tool_call>call:f{a:1]", 0);
    expect_parse("<|tool_call>call:f{a:1<turn|>x", 0, "C[<|tool_call>call:f{a:1]", 1);
    expect_parse("<|tool_call>call:f{<|tool_call>call:g{}<tool_call|>", 0,
                 "C[<|tool_call>call:f{]T[g|{}]", 0);
    /* Nesting deeper than the parser follows is content, not a deep recursion. */
    char deep[400], want[420];
    int k = snprintf(deep, sizeof deep, "<|tool_call>call:f{a:");
    for (int i = 0; i < 100; i++) deep[k++] = '[';
    snprintf(deep + k, sizeof deep - (size_t)k, "<tool_call|>");
    snprintf(want, sizeof want, "C[%s]", deep);
    expect_parse(deep, 0, want, 0);
}

/* A forced call cut by the token limit (plume_chat_parser_flush_cut), fed whole or byte by
 * byte: an open call comes back as a call, with the name as far as written and the members
 * written in full; anything else is as plume_chat_parser_flush makes it. */
static void expect_cut(const char *text, const char *want) {
    for (int bytes = 0; bytes < 2; bytes++) {
        parsed pr;
        memset(&pr, 0, sizeof pr);
        plume_chat_parser *p = NULL;
        if (plume_chat_parser_new(&p, 0, NULL)) { CHECK(0, "new"); return; }
        size_t len = strlen(text), step = bytes ? 1 : (len ? len : 1);
        for (size_t at = 0; at < len; at += step) {
            const plume_chat_delta *d;
            int32_t n;
            if (plume_chat_parser_feed(p, text + at, at + step <= len ? step : len - at, &d, &n) < 0) pr.bad = 1;
            pr_add(&pr, d, n);
        }
        const plume_chat_delta *d;
        int32_t n;
        if (plume_chat_parser_flush_cut(p, &d, &n)) pr.bad = 1;
        pr_add(&pr, d, n);
        if (pr.last) pr_put(&pr, "]", 1);
        plume_chat_parser_free(p);
        CHECK(!pr.bad && !strcmp(pr.s, want), "%s %s\n  got  %s (bad %d)\n  want %s", bytes ? "byte by byte" : "whole",
              text, pr.s, pr.bad, want);
    }
}

static void test_cut_calls(void) {
    expect_cut("<|tool_call>", "T[|{}]");
    expect_cut("<|tool_call>c", "T[|{}]");
    expect_cut("<|tool_call>call:get_w", "T[get_w|{}]");
    expect_cut("<|tool_call>call:get_weather{", "T[get_weather|{}]");
    expect_cut("<|tool_call>call:get_weather{city:" Q "Pa", "T[get_weather|{}]");
    expect_cut("<|tool_call>call:f{a:1", "T[f|{}]"); /* 1 may have been 12 */
    expect_cut("<|tool_call>call:f{a:1,b:" Q "x" Q ",c:[1,", "T[f|{\"a\":1,\"b\":\"x\"}]");
    expect_cut("<|tool_call>call:f{a:{b:2}}", "T[f|{\"a\":{\"b\":2}}]"); /* whole, no end mark */
    /* A whole call stays itself; a second one cut after it is a call too. */
    expect_cut("<|tool_call>call:f{a:1}<tool_call|><|tool_call>call:g{b:", "T[f|{\"a\":1}]T[g|{}]");
    /* Not the start of a call: content, as plume_chat_parser_flush gives it. */
    expect_cut("<|tool_call>oops", "C[<|tool_call>oops]");
    expect_cut("<|tool_call>call:f g{", "C[<|tool_call>call:f g{]");
    /* Outside a call nothing changes. */
    expect_cut("plain text", "C[plain text]");
}

/* What plume_chat_render_full writes for a call parses back to the same arguments (given in
 * the template's key order and compact, the JSON text is identical). */
static void test_round_trip(void) {
    static const char *const args[] = {
        "{\"a\":[1,{\"b\":\"x,y\"}],\"c\":\"q\\\"uote {}\",\"n\":null}",
        "{\"deep\":{\"er\":{\"est\":[[],{},[true,false]]}},\"num\":-1.5e-07}",
        "{\"s\":\"line\\nbreak \\\\ back\\tslash \\u0001\"}",
        "{}",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        plume_chat_tool_call call = {.name = "fn_1", .arguments = args[i]};
        plume_chat_message_full m = {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1};
        plume_chat_options o = {0};
        char *out = NULL;
        CHECK(plume_chat_render_full(&m, 1, &o, &out, NULL) == 0 && out, "render %zu", i);
        const char *start = out ? strstr(out, "<|tool_call>") : NULL;
        CHECK(start, "no call in %s", out ? out : "(null)");
        if (start) {
            char want[512];
            snprintf(want, sizeof want, "T[fn_1|%s]", args[i]);
            expect_parse(start, 0, want, 1); /* the rendering ends with <|tool_response> */
        }
        free(out);
    }
}

/* Random texts over a small alphabet of marker pieces, cut at random: the merged deltas never
 * depend on the cuts, and nothing crashes. */
static void test_random_cuts(void) {
    static const char *const atoms[] = {
        "<|channel>", "thought\n", "<channel|>", "\n", "<|tool_call>", "call:f{", "a:", "1",
        Q, "}", "<tool_call|>", "x", ",", "<", "|", "<turn|>", "[", "]", "<|tool_response>"};
    uint64_t rng = 7;
    for (int trial = 0; trial < 2000 && !t_failed_now; trial++) {
        char text[512];
        size_t len = 0;
        int n_atoms = 1 + (int)(plume_rng_next(&rng) % 24);
        for (int a = 0; a < n_atoms; a++) {
            const char *s = atoms[plume_rng_next(&rng) % (sizeof atoms / sizeof atoms[0])];
            memcpy(text + len, s, strlen(s));
            len += strlen(s);
        }
        text[len] = 0;
        int in_thought = (int)(plume_rng_next(&rng) % 2);
        parsed whole, cut;
        parse_cuts(&whole, text, len, NULL, 0, in_thought);
        size_t cuts[8];
        int n_cuts = (int)(plume_rng_next(&rng) % 8);
        for (int c = 0; c < n_cuts; c++) cuts[c] = (size_t)(plume_rng_next(&rng) % (len + 1));
        for (int c = 1; c < n_cuts; c++) /* sort the cut offsets */
            for (int e = c; e > 0 && cuts[e - 1] > cuts[e]; e--) {
                size_t t = cuts[e]; cuts[e] = cuts[e - 1]; cuts[e - 1] = t;
            }
        parse_cuts(&cut, text, len, cuts, n_cuts, in_thought);
        CHECK(!whole.bad && !cut.bad && whole.end == cut.end && !strcmp(whole.s, cut.s),
              "trial %d: %s\n  whole %s\n  cut   %s", trial, text, whole.s, cut.s);
        parse_typed(&cut, text, in_thought, (int)(plume_rng_next(&rng) % 2));
        CHECK(!cut.bad && whole.end == cut.end && !strcmp(whole.s, cut.s), "trial %d as tokens: %s\n  text   %s\n  tokens %s",
              trial, text, whole.s, cut.s);
    }
}

/* Fed as tokens, text that spells a marker with ordinary tokens is text: a quoted tool call is
 * no call (even with no tools in the request), a quoted <turn|> does not end the answer nor cut
 * a JSON string, a quoted "\n<channel|>" does not end a thought. The special tokens around
 * them still act. */
static void test_spelled_markers_are_text(void) {
    expect_typed("Quote: " SPELLED "<|tool_call>call:transfer{to:" Q "x" Q ",amount:5}<tool_call|>" SPELLED " done", 0,
                 "C[Quote: <|tool_call>call:transfer{to:<|\"|>x<|\"|>,amount:5}<tool_call|> done]", 0);
    expect_typed("{\"quote\":\"" SPELLED "<turn|>" SPELLED "\"}<turn|>tail", 0, "C[{\"quote\":\"<turn|>\"}]", 1);
    expect_typed("a" SPELLED "<eos><|tool_response>" SPELLED "b", 0, "C[a<eos><|tool_response>b]", 0);
    expect_typed("<|channel>thought\nx" SPELLED "\n<channel|>" SPELLED "y\n<channel|>z", 0, "R[x\n<channel|>y]C[z]", 0);
    expect_typed(SPELLED "<|channel>thought\n" SPELLED "hi", 0, "C[<|channel>thought\nhi]", 0);
    expect_typed(SPELLED "<|tool_call>" SPELLED "<|tool_call>call:f{a:1}<tool_call|>", 0, "C[<|tool_call>]T[f|{\"a\":1}]", 0);
    /* inside a real call a spelled end is the call's text: the call does not parse, comes back as text */
    expect_typed("<|tool_call>call:f{a:" SPELLED "<tool_call|>" SPELLED "1}<tool_call|>", 0,
                 "C[<|tool_call>call:f{a:<tool_call|>1}<tool_call|>]", 0);
    /* text fed before the first token is parsed as text, then the parser reads tokens */
    plume_chat_parser *p;
    const plume_chat_delta *d;
    int32_t n;
    CHECK(plume_chat_parser_new(&p, 0, NULL) == 0, "new");
    CHECK(plume_chat_parser_feed(p, "ab<tur", 6, &d, &n) == 0 && n == 1 && d[0].len == 2, "text first");
    CHECK(plume_chat_parser_feed_token(p, "n|>", 3, 0, &d, &n) == 0 && n == 1 && !strcmp(d[0].text, "<turn|>"),
          "the held tail is text once tokens come: %d deltas", n);
    CHECK(plume_chat_parser_feed_token(p, "<turn|>", 7, 1, &d, &n) == 1 && n == 0, "a special <turn|> ends");
    plume_chat_parser_free(p);
}

/* NULL p is PLUME_EINVAL. */
static void test_parser_errors(void) {
    char *err = NULL;
    CHECK(plume_chat_parser_new(NULL, 0, &err) == PLUME_EINVAL && err, "NULL p");
    free(err);
}

/* Every parser test; the exit status says whether all passed. */
int main(void) {
    RUN(test_plain);
    RUN(test_thought_then_content);
    RUN(test_stray_and_end);
    RUN(test_tool_calls);
    RUN(test_malformed_calls);
    RUN(test_cut_calls);
    RUN(test_round_trip);
    RUN(test_random_cuts);
    RUN(test_spelled_markers_are_text);
    RUN(test_parser_errors);
    return t_total_failed ? 1 : 0;
}
