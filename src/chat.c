/* chat.c -- messages -> prompt text, and the stop-string matcher (docs/CHAT.md).
 *
 * plume_chat_render() is Google's E2B chat template (spec/gemma4-e2b-chat-template.jinja)
 * written out in C for the part plume_chat_message can express: a role and a plain string per
 * message. Tools, tool calls, content-part lists and reasoning_content are not expressible and
 * not rendered. Knows nothing of tokens: it makes text, which the tokenizer then encodes with no
 * auto-BOS (the text starts with the literal "<bos>").
 *
 * The stop matcher (chat.h) lets generation hold back text that may be the start of a user
 * stop string. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- a growing string -------------------------------------------------------------------- */

/* Output under construction; oom latches the first allocation failure. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} chat_buf;

/* Append n bytes (no-op after an allocation failure). Keeps p NUL-terminated. */
static void buf_put(chat_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1) { b->oom = 1; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* Append a NUL-terminated string. */
static void buf_puts(chat_buf *b, const char *s) { buf_put(b, s, strlen(s)); }

/* ---- trimming as Jinja's `trim` (Python str.strip()) does ------------------------------- */

/* Byte length of the whitespace character that starts p[0, n), or 0. The set is Python's
 * str.isspace(): U+0009-000D, U+001C-0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000. (JavaScript's trim differs: it lacks U+001C-001F and
 * U+0085 and adds U+FEFF; the goldens contain none of these.) Invalid UTF-8 is not space. */
static size_t chat_space_len(const unsigned char *p, size_t n) {
    if (n >= 1 && ((p[0] >= 0x09 && p[0] <= 0x0d) || (p[0] >= 0x1c && p[0] <= 0x20))) return 1;
    if (n >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0)) return 2;
    if (n >= 3 && (p[0] & 0xf0) == 0xe0 && (p[1] & 0xc0) == 0x80 && (p[2] & 0xc0) == 0x80) {
        uint32_t cp = ((uint32_t)(p[0] & 0x0f) << 12) | ((uint32_t)(p[1] & 0x3f) << 6) |
                      (uint32_t)(p[2] & 0x3f);
        if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
            cp == 0x202f || cp == 0x205f || cp == 0x3000)
            return 3;
    }
    return 0;
}

/* Byte length of the whitespace character that ends p[0, n), or 0. */
static size_t chat_space_len_back(const unsigned char *p, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (chat_space_len(p + n - k, k) == k) return k;
    return 0;
}

/* Append s[0, n) without its leading and trailing whitespace. */
static void buf_put_trimmed(chat_buf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t k;
    while ((k = chat_space_len(p, n)) > 0) { p += k; n -= k; }
    while ((k = chat_space_len_back(p, n)) > 0) n -= k;
    buf_put(b, (const char *)p, n);
}

/* First occurrence of needle (nlen > 0) in s[0, n), or NULL. */
static const char *chat_find(const char *s, size_t n, const char *needle, size_t nlen) {
    for (size_t i = 0; i + nlen <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, nlen) == 0) return s + i;
    return NULL;
}

/* Append the template's strip_thinking(text): split on "<channel|>", keep each part up to its
 * first "<|channel>", join, trim. So "a<|channel>x<channel|>b" gives "ab", an unclosed
 * "<|channel>..." is dropped to the end, and a stray "<channel|>" just disappears. */
static void buf_put_model_content(chat_buf *b, const char *s) {
    static const char open[] = "<|channel>", close[] = "<channel|>";
    const size_t olen = sizeof open - 1, clen = sizeof close - 1;
    chat_buf joined = {0};
    size_t n = strlen(s);
    const char *part = s, *end = s + n;
    for (;;) {
        const char *sep = chat_find(part, (size_t)(end - part), close, clen);
        const char *part_end = sep ? sep : end;
        const char *th = chat_find(part, (size_t)(part_end - part), open, olen);
        buf_put(&joined, part, (size_t)((th ? th : part_end) - part));
        if (!sep) break;
        part = sep + clen;
    }
    if (joined.oom) b->oom = 1;
    else buf_put_trimmed(b, joined.p ? joined.p : "", joined.len);
    free(joined.p);
}

/* ---- rendering ---------------------------------------------------------------------------- */

/* Whether a role names a message plume can render. */
static int chat_role_known(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "developer") || !strcmp(r, "user") ||
           !strcmp(r, "assistant") || !strcmp(r, "model");
}

/* Check every message's role; 0 or PLUME_EINVAL naming the message. */
static int chat_check(const plume_chat_message *msgs, int32_t n, char **err) {
    if (n < 0) return plume_fail(err, PLUME_EINVAL, "chat: negative message count %d", n);
    if (n > 0 && !msgs) return plume_fail(err, PLUME_EINVAL, "chat: messages is NULL");
    for (int32_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r) return plume_fail(err, PLUME_EINVAL, "chat: message %d has no role", i);
        if (!strcmp(r, "tool"))
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: role \"tool\" needs tool calls, which "
                              "plume_chat_message cannot express", i);
        if (!chat_role_known(r))
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: unknown role \"%s\" (expected system, "
                              "developer, user, assistant or model)", i, r);
    }
    return 0;
}

/* Render the conversation as the E2B template does with bos_token "<bos>" and no tools:
 *   <bos>
 *   [<|turn>system\n [<|think|>\n] [first system/developer content, trimmed] <turn|>\n]
 *   per message: <|turn>{role, assistant -> model}\n {content} <turn|>\n
 *   [<|turn>model\n]
 * Model content has <|channel>...<channel|> spans removed, then is trimmed; other content is
 * trimmed. Like the template, consecutive assistant messages share one model turn, and a
 * system or developer message after the first keeps its role name. A NULL content renders as
 * empty. *out is malloc'd and NUL-terminated. 0, PLUME_EINVAL or PLUME_ENOMEM. */
int plume_chat_render(const plume_chat_message *msgs, int32_t n, int32_t add_generation_prompt,
                      int32_t enable_thinking, char **out, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "chat: out is NULL");
    *out = NULL;
    int rc = chat_check(msgs, n, err);
    if (rc) return rc;

    chat_buf b = {0};
    buf_puts(&b, "<bos>");
    int32_t first = 0;
    int has_system = n > 0 && (!strcmp(msgs[0].role, "system") ||
                               !strcmp(msgs[0].role, "developer"));
    if (enable_thinking || has_system) {
        buf_puts(&b, "<|turn>system\n");
        if (enable_thinking) buf_puts(&b, "<|think|>\n");
        if (has_system) {
            const char *c = msgs[0].content ? msgs[0].content : "";
            buf_put_trimmed(&b, c, strlen(c));
            first = 1;
        }
        buf_puts(&b, "<turn|>\n");
    }

    const char *prev = NULL; /* the previous message's role as given */
    for (int32_t i = first; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content ? msgs[i].content : "";
        int is_model = !strcmp(role, "assistant") || !strcmp(role, "model");
        const char *next = i + 1 < n ? msgs[i + 1].role : NULL;
        /* The template continues a model turn after an "assistant" message, and leaves it
         * open before one. */
        if (!(is_model && prev && !strcmp(prev, "assistant"))) {
            buf_puts(&b, "<|turn>");
            buf_puts(&b, is_model ? "model" : role);
            buf_puts(&b, "\n");
        }
        if (is_model) buf_put_model_content(&b, c);
        else buf_put_trimmed(&b, c, strlen(c));
        if (!(is_model && next && !strcmp(next, "assistant"))) buf_puts(&b, "<turn|>\n");
        prev = role;
    }
    if (add_generation_prompt) buf_puts(&b, "<|turn>model\n");

    if (b.oom) {
        free(b.p);
        return plume_fail(err, PLUME_ENOMEM, "chat: out of memory rendering %d messages", n);
    }
    *out = b.p;
    return 0;
}

/* ---- stop strings ------------------------------------------------------------------------- */

/* Copy the stop strings; on failure the matcher is left freed. */
int plume_stop_matcher_init(plume_stop_matcher *m, const char *const *stops, int32_t n_stops,
                            char **err) {
    if (!m) return plume_fail(err, PLUME_EINVAL, "stop: matcher is NULL");
    memset(m, 0, sizeof *m);
    m->matched = -1;
    if (n_stops < 0 || (n_stops > 0 && !stops))
        return plume_fail(err, PLUME_EINVAL, "stop: bad stop list (%d strings)", n_stops);
    for (int32_t i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0])
            return plume_fail(err, PLUME_EINVAL, "stop: stop string %d is empty", i);
    if (n_stops == 0) return 0;
    m->stops = calloc((size_t)n_stops, sizeof *m->stops);
    m->lens = calloc((size_t)n_stops, sizeof *m->lens);
    if (!m->stops || !m->lens) goto oom;
    m->n_stops = n_stops;
    for (int32_t i = 0; i < n_stops; i++) {
        m->lens[i] = strlen(stops[i]);
        m->stops[i] = malloc(m->lens[i] + 1);
        if (!m->stops[i]) goto oom;
        memcpy(m->stops[i], stops[i], m->lens[i] + 1);
        if (m->lens[i] > m->max_len) m->max_len = m->lens[i];
    }
    return 0;
oom:
    plume_stop_matcher_free(m);
    return plume_fail(err, PLUME_ENOMEM, "stop: out of memory");
}

/* Free the copies and the text buffer; the struct is left empty. */
void plume_stop_matcher_free(plume_stop_matcher *m) {
    if (!m) return;
    for (int32_t i = 0; m->stops && i < m->n_stops; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->text);
    memset(m, 0, sizeof *m);
    m->matched = -1;
}

/* Back to the state right after init. */
void plume_stop_matcher_reset(plume_stop_matcher *m) {
    if (!m) return;
    m->len = m->released = m->held = 0;
    m->matched = -1;
}

/* The stop string that ends exactly at text[e] (exclusive), the longest if several do, or -1.
 * The longest starts earliest, so the least text is released. */
static int32_t stop_ending_at(const plume_stop_matcher *m, size_t e) {
    int32_t best = -1;
    for (int32_t k = 0; k < m->n_stops; k++)
        if (m->lens[k] <= e && memcmp(m->text + e - m->lens[k], m->stops[k], m->lens[k]) == 0 &&
            (best < 0 || m->lens[k] > m->lens[best]))
            best = k;
    return best;
}

/* Whether text[i, len) is a proper prefix of some stop string. */
static int stop_prefix_at(const plume_stop_matcher *m, size_t i) {
    size_t rest = m->len - i;
    for (int32_t k = 0; k < m->n_stops; k++)
        if (rest < m->lens[k] && memcmp(m->text + i, m->stops[k], rest) == 0) return 1;
    return 0;
}

/* Append the piece to the held tail, then release up to the first stop string to complete,
 * or up to the longest tail that may still become one. O((held + len) * stops * max_len). */
int plume_stop_matcher_feed(plume_stop_matcher *m, const char *piece, size_t len,
                            const char **emit, size_t *n_emit) {
    *emit = "";
    *n_emit = 0;
    if (m->matched >= 0) return 1;
    /* What the last call released has been printed by now: keep only the held tail. */
    if (m->released) memmove(m->text, m->text + m->released, m->held);
    m->len = m->held;
    m->released = 0;
    if (len > SIZE_MAX - m->len) return PLUME_ENOMEM;
    if (m->len + len > m->cap) {
        size_t cap = m->cap ? m->cap : 64;
        while (cap < m->len + len) cap = cap > SIZE_MAX / 2 ? m->len + len : cap * 2;
        char *np = realloc(m->text, cap);
        if (!np) return PLUME_ENOMEM;
        m->text = np;
        m->cap = cap;
    }
    if (len) memcpy(m->text + m->len, piece, len);
    m->len += len;

    /* The first stop string to complete, as if the text came one byte at a time, so the
     * result does not depend on how the text was cut into pieces. The held tail holds no
     * complete stop string, so the search starts after it. */
    for (size_t e = m->held + 1; e <= m->len; e++) {
        int32_t k = stop_ending_at(m, e);
        if (k >= 0) {
            m->matched = k;
            m->released = e - m->lens[k];
            m->held = 0;
            *emit = m->text;
            *n_emit = m->released;
            return 1;
        }
    }
    /* Only the last max_len - 1 bytes can be the start of a stop string not yet complete. */
    size_t i = m->max_len > 0 && m->len > m->max_len - 1 ? m->len - (m->max_len - 1) : 0;
    if (m->max_len == 0) i = m->len;
    while (i < m->len && !stop_prefix_at(m, i)) i++;
    m->released = i;
    m->held = m->len - i;
    *emit = m->text ? m->text : "";
    *n_emit = i;
    return 0;
}

/* Release the held tail: at the end of generation it cannot become a stop string any more. */
size_t plume_stop_matcher_flush(plume_stop_matcher *m, const char **emit) {
    *emit = "";
    if (m->matched >= 0 || m->held == 0) return 0;
    *emit = m->text + m->released;
    size_t n = m->held;
    m->released += n;
    m->held = 0;
    return n;
}
