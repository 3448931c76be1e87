/* chat_parse.c -- generated text -> content, thought and tool-call deltas (docs/CHAT.md).
 *
 * The inverse of what the E2B template writes for a model turn. A server decodes each
 * generated token with its special-token text kept and feeds the piece here; what comes back
 * is typed: answer text, thought text (between "<|channel>thought\n" and "\n<channel|>"), and
 * tool calls, "<|tool_call>call:NAME{key:value,...}<tool_call|>", whose arguments (the
 * template's format_argument with bare keys, strings in <|"|>) are turned back into a JSON
 * object. The text is the model's, so nothing here fails on it: a call that does not parse is
 * handed back as content, markers out of place are dropped, and the end markers ("<turn|>",
 * "<eos>", "<|tool_response>") end the parse.
 *
 * Two ways in. A generation is fed token by token with plume_chat_parser_feed_token, which
 * says whether the token is a special one: the markers are single special tokens, so only a
 * special token's piece is a marker, and text that spells one with ordinary tokens (a model
 * quoting "<turn|>" or "<|tool_call>call:f{}<tool_call|>" from a document, or inside a JSON
 * string a schema allows) stays text. In this typed mode nothing is held back but a thought's
 * last "\n" (the "\n" of "\n<channel|>" is the template's, not the thought's).
 * plume_chat_parser_feed reads markers from text, for text known to be the template's (a
 * rendered transcript): markers may arrive split over pieces there, so, as plume_stop_matcher
 * does, the parser holds back the longest tail that may still grow into a marker and releases
 * the rest; markers are acted on in text order (the earliest start first), so the deltas do
 * not depend on how the text was cut, only how they are grouped into calls does. Knows nothing
 * of tokens or the model: the caller says which pieces are special tokens. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "plume.h"

/* ---- tool call arguments: the template's format -> JSON ------------------------------------ */

#define CALL_MAX_DEPTH 64 /* nesting of objects and arrays in arguments */

static const char QUOTE[] = "<|\"|>"; /* the template's string delimiter */
#define QUOTE_LEN (sizeof QUOTE - 1)

/* A cursor over a call's text; fails (returns -1) on anything not in the template's format. */
typedef struct {
    const char *p, *end;
} ccur;

/* Skip ASCII whitespace (the template writes none, a model might). */
static void cc_ws(ccur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Whether the cursor is at <|"|>. */
static int cc_at_quote(const ccur *c) {
    return (size_t)(c->end - c->p) >= QUOTE_LEN && !memcmp(c->p, QUOTE, QUOTE_LEN);
}

/* Append s[0, n) as the inside of a JSON string: ", \ and control characters escaped. */
static void json_put_escaped(plume_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\') { esc[0] = '\\'; esc[1] = (char)ch; plume_buf_put(b, esc, 2); }
        else if (ch == '\n') plume_buf_puts(b, "\\n");
        else if (ch == '\r') plume_buf_puts(b, "\\r");
        else if (ch == '\t') plume_buf_puts(b, "\\t");
        else if (ch < 0x20) {
            static const char hex[] = "0123456789abcdef";
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            plume_buf_put(b, esc, 6);
        } else plume_buf_put(b, s + i, 1);
    }
}

/* A <|"|>...<|"|> string at the cursor -> a JSON string (the text between is taken as is:
 * the template does not escape it). */
static int cc_string(ccur *c, plume_buf *out) {
    if (!cc_at_quote(c)) return -1;
    c->p += QUOTE_LEN;
    for (const char *q = c->p; (size_t)(c->end - q) >= QUOTE_LEN; q++)
        if (!memcmp(q, QUOTE, QUOTE_LEN)) {
            plume_buf_put(out, "\"", 1);
            json_put_escaped(out, c->p, (size_t)(q - c->p));
            plume_buf_put(out, "\"", 1);
            c->p = q + QUOTE_LEN;
            return 0;
        }
    return -1;
}

/* Whether s[0, n) is a JSON number. */
static int is_json_number(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        if (++i == n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i == n || s[i] < '0' || s[i] > '9') return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

/* A bare scalar at the cursor (up to , } ] or the end): a JSON number, true, false or null,
 * copied as is. */
static int cc_scalar(ccur *c, plume_buf *out) {
    const char *s = c->p;
    while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']') c->p++;
    const char *e = c->p;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    size_t n = (size_t)(e - s);
    if (!(n == 4 && !memcmp(s, "true", 4)) && !(n == 5 && !memcmp(s, "false", 5)) &&
        !(n == 4 && !memcmp(s, "null", 4)) && !is_json_number(s, n))
        return -1;
    plume_buf_put(out, s, n);
    return 0;
}

static int cc_value(ccur *c, plume_buf *out, int depth);

/* A key at the cursor: <|"|>key<|"|> or bare bytes up to ':' (trimmed, not empty, none of
 * , { } [ ]) -> a JSON string; the ':' is consumed. */
static int cc_key(ccur *c, plume_buf *out) {
    cc_ws(c);
    if (cc_at_quote(c)) {
        if (cc_string(c, out)) return -1;
    } else {
        const char *s = c->p;
        while (c->p < c->end && *c->p != ':') {
            if (strchr(",{}[]", *c->p)) return -1;
            c->p++;
        }
        const char *e = c->p;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
        if (e == s) return -1;
        plume_buf_put(out, "\"", 1);
        json_put_escaped(out, s, (size_t)(e - s));
        plume_buf_put(out, "\"", 1);
    }
    cc_ws(c);
    if (c->p == c->end || *c->p != ':') return -1;
    c->p++;
    plume_buf_put(out, ":", 1);
    return 0;
}

/* {key:value,...} at the cursor -> a JSON object. */
static int cc_object(ccur *c, plume_buf *out, int depth) {
    if (depth > CALL_MAX_DEPTH || c->p == c->end || *c->p != '{') return -1;
    c->p++;
    plume_buf_put(out, "{", 1);
    cc_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; plume_buf_put(out, "}", 1); return 0; }
    for (;;) {
        if (cc_key(c, out) || cc_value(c, out, depth + 1)) return -1;
        if (c->p < c->end && *c->p == ',') { c->p++; plume_buf_put(out, ",", 1); continue; }
        if (c->p < c->end && *c->p == '}') { c->p++; plume_buf_put(out, "}", 1); return 0; }
        return -1;
    }
}

/* [value,...] at the cursor -> a JSON array. */
static int cc_array(ccur *c, plume_buf *out, int depth) {
    if (depth > CALL_MAX_DEPTH) return -1;
    c->p++;
    plume_buf_put(out, "[", 1);
    cc_ws(c);
    if (c->p < c->end && *c->p == ']') { c->p++; plume_buf_put(out, "]", 1); return 0; }
    for (;;) {
        if (cc_value(c, out, depth + 1)) return -1;
        if (c->p < c->end && *c->p == ',') { c->p++; plume_buf_put(out, ",", 1); continue; }
        if (c->p < c->end && *c->p == ']') { c->p++; plume_buf_put(out, "]", 1); return 0; }
        return -1;
    }
}

/* Any value at the cursor, with the whitespace around it. */
static int cc_value(ccur *c, plume_buf *out, int depth) {
    cc_ws(c);
    int rc;
    if (cc_at_quote(c)) rc = cc_string(c, out);
    else if (c->p < c->end && *c->p == '{') rc = cc_object(c, out, depth);
    else if (c->p < c->end && *c->p == '[') rc = cc_array(c, out, depth);
    else rc = cc_scalar(c, out);
    cc_ws(c);
    return rc;
}

/* The text between <|tool_call> and <tool_call|>, "call:NAME{args}", -> name and JSON
 * arguments appended to out as two NUL-terminated strings; *args_off is where the second
 * starts. 0, or -1 if the text is not a call (out is then restored). */
static int call_parse(const char *s, size_t n, plume_buf *out, size_t *args_off) {
    size_t at = out->len;
    ccur c = {s, s + n};
    cc_ws(&c);
    if ((size_t)(c.end - c.p) < 5 || memcmp(c.p, "call:", 5)) return -1;
    c.p += 5;
    const char *name = c.p;
    while (c.p < c.end && *c.p != '{') {
        unsigned char ch = (unsigned char)*c.p;
        if (ch <= ' ' || ch == '}' || ch == '"' || ch == '<') return -1;
        c.p++;
    }
    if (c.p == name || c.p == c.end) return -1;
    plume_buf_put(out, name, (size_t)(c.p - name));
    plume_buf_put(out, "", 1);
    *args_off = out->len;
    if (cc_object(&c, out, 0) == 0) {
        cc_ws(&c);
        if (c.p == c.end) {
            plume_buf_put(out, "", 1);
            return 0;
        }
    }
    if (!out->oom) { out->len = at; if (out->p) out->p[at] = 0; }
    return -1;
}

/* The members of a cut "{key:value,..." written in full (each followed by ',' or '}') -> a
 * JSON object, "{}" when none is; what follows the last whole member is dropped. */
static void cc_cut_object(ccur *c, plume_buf *out) {
    plume_buf_put(out, "{", 1);
    if (c->p < c->end && *c->p == '{') {
        c->p++;
        for (int n = 0;; n++) {
            size_t at = out->len;
            if (n) plume_buf_put(out, ",", 1);
            if (cc_key(c, out) || cc_value(c, out, 1) || c->p == c->end || (*c->p != ',' && *c->p != '}')) {
                if (!out->oom) out->len = at;
                break;
            }
            if (*c->p++ == '}') break;
        }
    }
    plume_buf_put(out, "}", 1);
}

/* ---- the parser ----------------------------------------------------------------------------- */

enum { IN_CONTENT, IN_THOUGHT_HEAD, IN_THOUGHT, IN_CALL, IN_DONE };

/* One delta as offsets into the arena (pointers are made at the end of a call). */
typedef struct {
    int32_t type;
    size_t text, len;  /* content, reasoning */
    size_t name, args; /* tool call */
} pdelta;

struct plume_chat_parser {
    int state;             /* IN_*: where the text is */
    int typed;             /* fed by plume_chat_parser_feed_token: markers only from special tokens */
    int cut;               /* flushing a forced call cut short: an open call is a call */
    plume_buf pend;        /* text not yet parsed: a held tail, then the new piece */
    plume_buf call;        /* the body of the tool call being collected */
    plume_buf arena;       /* the texts of this call's deltas, each NUL-terminated */
    pdelta *d;             /* [n_d] this call's deltas (room for cap_d) */
    int32_t n_d;
    size_t cap_d;
    plume_chat_delta *pub; /* [n_d] what the caller sees (room for cap_pub) */
    size_t cap_pub;
};

/* The markers each state acts on. */
static const char *const content_marks[] = {"<|channel>", "<channel|>", "<|tool_call>",
                                            "<tool_call|>", "<turn|>", "<eos>",
                                            "<|tool_response>", NULL};
static const char *const thought_marks[] = {"\n<channel|>", "<channel|>", "<turn|>", "<eos>",
                                            "<|tool_response>", NULL};
static const char *const call_marks[] = {"<tool_call|>", "<|tool_call>", "<turn|>", "<eos>",
                                         "<|tool_response>", NULL};

static const char *const no_marks[] = {NULL}; /* typed mode: text holds no marker */

/* Whether m is one of the end markers. */
static int is_end_mark(const char *m) {
    return !strcmp(m, "<turn|>") || !strcmp(m, "<eos>") || !strcmp(m, "<|tool_response>");
}

/* The earliest complete marker in s[0, n) (the longer at a tie), its start in *at; or NULL. */
static const char *find_mark(const char *s, size_t n, const char *const *marks, size_t *at) {
    for (size_t i = 0; i < n; i++) {
        const char *best = NULL;
        for (int k = 0; marks[k]; k++) {
            size_t ml = strlen(marks[k]);
            if (ml <= n - i && !memcmp(s + i, marks[k], ml) && (!best || ml > strlen(best)))
                best = marks[k];
        }
        if (best) { *at = i; return best; }
    }
    return NULL;
}

/* Length of the longest tail of s[0, n) that is a proper prefix of some marker. */
static size_t held_tail(const char *s, size_t n, const char *const *marks) {
    size_t longest = 0;
    for (int k = 0; marks[k]; k++) {
        size_t ml = strlen(marks[k]);
        for (size_t t = ml - 1 < n ? ml - 1 : n; t > longest; t--)
            if (!memcmp(s + n - t, marks[k], t)) { longest = t; break; }
    }
    return longest;
}

/* Room for one more delta. 0 or -1 (out of memory). */
static int delta_grow(plume_chat_parser *p) {
    size_t need = (size_t)p->n_d + 1;
    return plume_grow(&p->d, &p->cap_d, need, sizeof *p->d) ||
                   plume_grow(&p->pub, &p->cap_pub, need, sizeof *p->pub)
               ? -1
               : 0;
}

/* Add text of a type (content or reasoning), merged into the last delta if it has the same
 * type. */
static void emit_text(plume_chat_parser *p, int32_t type, const char *s, size_t n) {
    if (n == 0) return;
    pdelta *last = p->n_d ? &p->d[p->n_d - 1] : NULL;
    if (last && last->type == type && last->text + last->len + 1 == p->arena.len) {
        p->arena.len--; /* over the NUL */
        plume_buf_put(&p->arena, s, n);
        plume_buf_put(&p->arena, "", 1);
        last->len += n;
        return;
    }
    if (delta_grow(p)) { p->arena.oom = 1; return; }
    pdelta *d = &p->d[p->n_d++];
    d->type = type;
    d->text = p->arena.len;
    d->len = n;
    d->name = d->args = 0;
    plume_buf_put(&p->arena, s, n);
    plume_buf_put(&p->arena, "", 1);
}

/* A collected call body: a tool-call delta if it parses, else the raw text as content. */
static void emit_call(plume_chat_parser *p, int closed) {
    size_t name = p->arena.len, args = 0;
    if (closed && call_parse(p->call.p ? p->call.p : "", p->call.len, &p->arena, &args) == 0) {
        if (delta_grow(p)) { p->arena.oom = 1; return; }
        p->d[p->n_d++] = (pdelta){PLUME_CHAT_TOOL_CALL, 0, 0, name, args};
    } else {
        emit_text(p, PLUME_CHAT_CONTENT, "<|tool_call>", 12);
        emit_text(p, PLUME_CHAT_CONTENT, p->call.p ? p->call.p : "", p->call.len);
        if (closed) emit_text(p, PLUME_CHAT_CONTENT, "<tool_call|>", 12);
    }
    p->call.len = 0;
}

/* An open call body at the end of a cut generation -> a tool-call delta: the name as far as
 * written ("call:" itself may be cut), the arguments' whole members. A body that is not the
 * start of a call is content, as emit_call makes it. */
static void emit_cut_call(plume_chat_parser *p) {
    static const char head[] = "call:";
    ccur c = {p->call.p ? p->call.p : "", (p->call.p ? p->call.p : "") + p->call.len};
    cc_ws(&c);
    size_t k = 0;
    while (k < 5 && c.p + k < c.end && c.p[k] == head[k]) k++;
    int ok = k == 5 || c.p + k == c.end;
    c.p += k;
    const char *name = c.p;
    while (ok && c.p < c.end && *c.p != '{') {
        unsigned char ch = (unsigned char)*c.p++;
        if (ch <= ' ' || ch == '}' || ch == '"' || ch == '<') ok = 0;
    }
    if (!ok) {
        emit_call(p, 0);
        return;
    }
    size_t at = p->arena.len;
    plume_buf_put(&p->arena, name, (size_t)(c.p - name));
    plume_buf_put(&p->arena, "", 1);
    size_t args = p->arena.len;
    cc_cut_object(&c, &p->arena);
    plume_buf_put(&p->arena, "", 1);
    if (delta_grow(p)) { p->arena.oom = 1; return; }
    p->d[p->n_d++] = (pdelta){PLUME_CHAT_TOOL_CALL, 0, 0, at, args};
    p->call.len = 0;
}

/* Text of the current state: content or reasoning out, a call's body into the call buffer. */
static void take_text(plume_chat_parser *p, const char *s, size_t n) {
    if (p->state == IN_CALL) plume_buf_put(&p->call, s, n);
    else emit_text(p, p->state == IN_CONTENT ? PLUME_CHAT_CONTENT : PLUME_CHAT_REASONING, s, n);
}

/* Act on one marker found in the current state. */
static void take_mark(plume_chat_parser *p, const char *m) {
    if (p->state == IN_CALL) {
        if (!strcmp(m, "<tool_call|>")) {
            emit_call(p, 1);
            p->state = IN_CONTENT;
            return;
        }
        emit_call(p, 0); /* cut short by a new call or the end */
        p->state = IN_CONTENT;
    }
    if (is_end_mark(m)) p->state = IN_DONE;
    else if (!strcmp(m, "<|channel>")) p->state = IN_THOUGHT_HEAD;
    else if (!strcmp(m, "<|tool_call>")) p->state = IN_CALL;
    else if (p->state == IN_THOUGHT) p->state = IN_CONTENT; /* "\n<channel|>" or "<channel|>" */
    /* in content, a stray "<channel|>" or "<tool_call|>" is dropped */
}

/* Parse as much of the pending text as can be decided: all of it when drain (held tails are
 * text); when final, also the end of generation (an unfinished call or thought head is text). */
static void run(plume_chat_parser *p, int drain, int final) {
    const char *s = p->pend.p ? p->pend.p : "";
    size_t n = p->pend.len, pos = 0;
    drain |= final;
    while (pos < n && p->state != IN_DONE) {
        if (p->state == IN_THOUGHT_HEAD) {
            static const char head[] = "thought\n";
            size_t k = 0;
            while (k < 8 && pos + k < n && s[pos + k] == head[k]) k++;
            if (k == 8) pos += 8;
            else if (pos + k == n && !drain) break; /* may still become "thought\n" */
            p->state = IN_THOUGHT;
            continue;
        }
        const char *const *marks = p->typed ? no_marks
                                 : p->state == IN_CONTENT ? content_marks
                                 : p->state == IN_THOUGHT ? thought_marks : call_marks;
        size_t at;
        const char *m = find_mark(s + pos, n - pos, marks, &at);
        if (m) {
            take_text(p, s + pos, at);
            take_mark(p, m);
            pos += at + strlen(m);
            continue;
        }
        size_t hold = drain ? 0
                    : p->typed ? (p->state == IN_THOUGHT && s[n - 1] == '\n') /* "\n" + a <channel|> to come? */
                    : held_tail(s + pos, n - pos, marks);
        take_text(p, s + pos, n - pos - hold);
        pos = n - hold;
        break;
    }
    if (p->state == IN_DONE) pos = n;
    if (final && p->state == IN_CALL) {
        if (p->cut) emit_cut_call(p);
        else emit_call(p, 0);
    }
    if (final && p->state == IN_THOUGHT_HEAD) {
        take_text(p, s + pos, n - pos); /* "thoug" with nothing after: it is thought text */
        pos = n;
    }
    if (p->pend.p && pos) memmove(p->pend.p, s + pos, n - pos);
    p->pend.len = n - pos;
}

/* Typed mode: one special token's text m[0, n). A marker of the current state is acted on
 * (the thought's held "\n" dropped before its <channel|>); any other special token is text of
 * the state it comes in (e.g. <|"|> inside a call, <|tool_call> inside a thought). */
static void take_special(plume_chat_parser *p, const char *m, size_t n) {
    if (p->state == IN_THOUGHT_HEAD) { /* a special token after "<|channel>": the head is over */
        run(p, 1, 0);
        if (p->state == IN_THOUGHT_HEAD) p->state = IN_THOUGHT;
    }
    const char *const *marks = p->state == IN_CONTENT ? content_marks
                             : p->state == IN_THOUGHT ? thought_marks : call_marks;
    const char *hit = NULL;
    for (int k = 0; marks[k] && !hit; k++)
        if (strlen(marks[k]) == n && !memcmp(marks[k], m, n)) hit = marks[k];
    if (!hit) {
        plume_buf_put(&p->pend, m, n);
        run(p, 0, 0);
        return;
    }
    if (p->state == IN_THOUGHT && !strcmp(hit, "<channel|>") && p->pend.len && p->pend.p[p->pend.len - 1] == '\n')
        p->pend.len--; /* "\n<channel|>" */
    run(p, 1, 0);
    if (p->state != IN_DONE) take_mark(p, hit);
}

/* Hand out this call's deltas (pointers into the arena) and reset for the next call. */
static int publish(plume_chat_parser *p, const plume_chat_delta **deltas, int32_t *n_deltas) {
    if (p->arena.oom || p->pend.oom || p->call.oom) return PLUME_ENOMEM;
    for (int32_t i = 0; i < p->n_d; i++) {
        const pdelta *d = &p->d[i];
        plume_chat_delta *o = &p->pub[i];
        o->type = d->type;
        if (d->type == PLUME_CHAT_TOOL_CALL) {
            o->text = NULL;
            o->len = 0;
            o->name = p->arena.p + d->name;
            o->arguments = p->arena.p + d->args;
        } else {
            o->text = p->arena.p + d->text;
            o->len = d->len;
            o->name = o->arguments = NULL;
        }
    }
    *deltas = p->pub;
    *n_deltas = p->n_d;
    return 0;
}

/* Allocate a parser in the content state, or in the thought if the prompt opened one. */
int plume_chat_parser_new(plume_chat_parser **p, int32_t in_thought, char **err) {
    if (!p) return plume_fail(err, PLUME_EINVAL, "chat parser: p is NULL");
    *p = calloc(1, sizeof **p);
    if (!*p) return plume_fail(err, PLUME_ENOMEM, "chat parser: out of memory");
    (*p)->state = in_thought ? IN_THOUGHT : IN_CONTENT;
    return 0;
}

/* Free the buffers and the parser. */
void plume_chat_parser_free(plume_chat_parser *p) {
    if (!p) return;
    free(p->pend.p);
    free(p->call.p);
    free(p->arena.p);
    free(p->d);
    free(p->pub);
    free(p);
}

/* Append the piece to the held tail and parse what can be decided. */
int plume_chat_parser_feed(plume_chat_parser *p, const char *piece, size_t len,
                           const plume_chat_delta **deltas, int32_t *n_deltas) {
    *deltas = NULL;
    *n_deltas = 0;
    p->n_d = 0;
    p->arena.len = 0;
    if (p->state != IN_DONE && len) {
        plume_buf_put(&p->pend, piece, len);
        run(p, 0, 0);
    }
    int rc = publish(p, deltas, n_deltas);
    return rc ? rc : p->state == IN_DONE;
}

/* One generated token's piece: a special token's acted on as a marker, text kept as text. */
int plume_chat_parser_feed_token(plume_chat_parser *p, const char *piece, size_t len, int32_t special,
                                 const plume_chat_delta **deltas, int32_t *n_deltas) {
    *deltas = NULL;
    *n_deltas = 0;
    p->n_d = 0;
    p->arena.len = 0;
    if (!p->typed) { /* the first typed piece: what plain text fed before holds is text */
        run(p, 1, 0);
        p->typed = 1;
    }
    if (p->state != IN_DONE && len) {
        if (special) {
            take_special(p, piece, len);
        } else {
            plume_buf_put(&p->pend, piece, len);
            run(p, 0, 0);
        }
    }
    int rc = publish(p, deltas, n_deltas);
    return rc ? rc : p->state == IN_DONE;
}

/* Parse the rest as final: held tails are text, an unclosed call is content. */
int plume_chat_parser_flush(plume_chat_parser *p, const plume_chat_delta **deltas,
                            int32_t *n_deltas) {
    *deltas = NULL;
    *n_deltas = 0;
    p->n_d = 0;
    p->arena.len = 0;
    run(p, 1, 1);
    return publish(p, deltas, n_deltas);
}

/* Parse the rest as final, an open call cut short coming back as a call. */
int plume_chat_parser_flush_cut(plume_chat_parser *p, const plume_chat_delta **deltas,
                                int32_t *n_deltas) {
    p->cut = 1;
    int rc = plume_chat_parser_flush(p, deltas, n_deltas);
    p->cut = 0;
    return rc;
}
