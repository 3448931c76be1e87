/* fuzz_chat_parse.c -- the streaming parser of generated text (plume_chat_parser) on
 * arbitrary bytes: fed whole, then in pieces of 1-32 bytes (data[1]), then as a generation's
 * tokens (plume_chat_parser_feed_token: every special token's text one special piece, the rest
 * ordinary pieces of that size); the merged deltas must be the same all three ways, and every
 * tool call's arguments must be a JSON object. */
#include <cjson/cJSON.h>

#include "fuzz.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* A growing string of merged deltas: C[...] content, R[...] reasoning, T[name|args] calls,
 * consecutive texts of one type merged (so it does not depend on the cut). */
typedef struct {
    char *p;
    size_t len, cap;
    int32_t last;
    int end;
} merged;

/* Append n bytes. */
static void put(merged *m, const char *s, size_t n) {
    if (m->len + n + 1 > m->cap) {
        m->cap = (m->len + n + 1) * 2;
        m->p = realloc(m->p, m->cap);
        if (!m->p) abort();
    }
    memcpy(m->p + m->len, s, n);
    m->len += n;
    m->p[m->len] = 0;
}

/* Fold a batch of deltas into m; a call's arguments must parse as a JSON object. */
static void fold(merged *m, const plume_chat_delta *d, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (d[i].type == PLUME_CHAT_TOOL_CALL) {
            cJSON *a = cJSON_Parse(d[i].arguments);
            if (!d[i].name || !cJSON_IsObject(a)) abort();
            cJSON_Delete(a);
            put(m, "T[", 2);
            put(m, d[i].name, strlen(d[i].name));
            put(m, "|", 1);
            put(m, d[i].arguments, strlen(d[i].arguments));
            put(m, "]", 1);
            m->last = -1;
            continue;
        }
        if (d[i].type != PLUME_CHAT_CONTENT && d[i].type != PLUME_CHAT_REASONING) abort();
        if (d[i].len == 0) continue;
        if (m->last != d[i].type) put(m, d[i].type == PLUME_CHAT_CONTENT ? "|C:" : "|R:", 3);
        put(m, d[i].text, d[i].len);
        m->last = d[i].type;
    }
}

/* Parse text[0..n) in pieces of `step` bytes into m. */
static void run(merged *m, int32_t in_thought, const char *text, size_t n, size_t step) {
    plume_chat_parser *p = NULL;
    if (plume_chat_parser_new(&p, in_thought, NULL)) abort();
    const plume_chat_delta *d;
    int32_t nd;
    m->last = -1;
    for (size_t i = 0; i < n && !m->end; i += step) {
        int rc = plume_chat_parser_feed(p, text + i, n - i < step ? n - i : step, &d, &nd);
        if (rc < 0) abort();
        fold(m, d, nd);
        if (rc == 1) m->end = 1;
    }
    if (plume_chat_parser_flush(p, &d, &nd)) abort();
    fold(m, d, nd);
    plume_chat_parser_free(p);
}

/* The special tokens the parser may meet (each one id in Gemma 4's vocabulary). */
static const char *const specials[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<turn|>", "<eos>",
                                       "<|tool_response>", "<tool_response|>", "<|\"|>", "<|turn>", "<bos>", NULL};

/* The length of the special token at s[0, n), or 0. */
static size_t special_at(const char *s, size_t n) {
    for (int k = 0; specials[k]; k++) {
        size_t l = strlen(specials[k]);
        if (l <= n && !memcmp(s, specials[k], l)) return l;
    }
    return 0;
}

/* Parse text[0..n) as tokens into m: special tokens one special piece each, the text between
 * in pieces of at most `step` bytes. */
static void run_tokens(merged *m, int32_t in_thought, const char *text, size_t n, size_t step) {
    plume_chat_parser *p = NULL;
    if (plume_chat_parser_new(&p, in_thought, NULL)) abort();
    const plume_chat_delta *d;
    int32_t nd;
    m->last = -1;
    for (size_t i = 0; i < n && !m->end;) {
        size_t k = special_at(text + i, n - i), special = k > 0;
        while (!special && k < step && i + k < n && !special_at(text + i + k, n - i - k)) k++;
        int rc = plume_chat_parser_feed_token(p, text + i, k, (int32_t)special, &d, &nd);
        if (rc < 0) abort();
        fold(m, d, nd);
        if (rc == 1) m->end = 1;
        i += k;
    }
    if (plume_chat_parser_flush(p, &d, &nd)) abort();
    fold(m, d, nd);
    plume_chat_parser_free(p);
}

/* data[0]: in_thought; data[1]: piece size; the rest: the generated text. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const char *text = (const char *)data + 2;
    size_t n = size - 2, step = 1 + data[1] % 32;
    merged a = {0}, b = {0}, c = {0};
    run(&a, data[0] & 1, text, n, n ? n : 1);
    run(&b, data[0] & 1, text, n, step);
    if (a.len != b.len || (a.len && memcmp(a.p, b.p, a.len)) || a.end != b.end) abort();
    run_tokens(&c, data[0] & 1, text, n, step);
    if (a.len != c.len || (a.len && memcmp(a.p, c.p, a.len)) || a.end != c.end) abort();
    free(a.p);
    free(b.p);
    free(c.p);
    return 0;
}
