/* regex.c -- a JSON Schema `pattern` (ECMAScript, with the u flag as ajv compiles it) -> GBNF
 * over the characters of a string (docs/STRUCTURED.md "pattern").
 *
 * The subset: literals, escapes (\d \w \s \D \W \S \t \n \r \f \v \0 \xHH \uHHHH \u{H..}
 * and escaped syntax characters), classes [...] with ranges, negation and those escapes, `.`
 * (any character but line terminators), groups ( ), (?: ) and (?<name> ), alternation |,
 * quantifiers * + ? {m} {m,} {m,n} (lazy forms too: same language), and anchors ^ and $ at
 * the two ends of the pattern or of its top-level alternatives. A pattern matches anywhere in
 * the string (ECMAScript search semantics): an end without an anchor is free text there.
 * Refused with an error naming it: back-references, lookaround, \b \B, \p{..}, anchors
 * elsewhere, counts above RX_MAX_COUNT.
 *
 * The output is GBNF text written as it is parsed (no tree): each character class becomes
 * the dialect's spelling of a character of that class (cst_char_expr), so a JSON string's
 * '"' is written \" and its controls escaped, and a tool call's string never holds '<'. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define RX_MAX_COUNT 1000 /* {m,n} bounds */
#define RX_MAX_DEPTH 100  /* group nesting */

typedef struct {
    const char *p, *end, *src;
    plume_buf *b;
    int dialect;
    const char *path;
    char **err;
    int rc;
    int depth;
} rx;

/* Record an error naming the pattern's offset (the first one wins). */
static void rx_fail(rx *r, const char *what) {
    if (r->rc) return;
    r->rc = plume_fail(r->err, PLUME_EINVAL, "json schema: %s: \"pattern\" at offset %d: %s", r->path,
                       (int)(r->p - r->src), what);
}

/* Decode one UTF-8 character at the cursor (the schema was checked to be UTF-8). */
static uint32_t rx_utf8(rx *r) {
    const unsigned char *s = (const unsigned char *)r->p;
    uint32_t cp = s[0];
    int k = cp < 0x80 ? 1 : cp >= 0xf0 ? 4 : cp >= 0xe0 ? 3 : 2;
    if (k > r->end - r->p) k = (int)(r->end - r->p);
    if (k > 1) cp &= 0x3f >> (k - 1);
    for (int i = 1; i < k; i++) cp = (cp << 6) | (s[i] & 0x3f);
    r->p += k;
    return cp;
}

/* Add the class named by an escape letter (d w s, or their negations D W S) to set. */
static void add_class_escape(cst_cpset *set, char c) {
    cst_cpset t = {0};
    char lc = (char)(c | 0x20);
    if (lc == 'd') cst_cpset_add(&t, '0', '9');
    else if (lc == 'w') { cst_cpset_add(&t, '0', '9'); cst_cpset_add(&t, 'A', 'Z'); cst_cpset_add(&t, 'a', 'z'); cst_cpset_add(&t, '_', '_'); }
    else { /* ECMAScript WhiteSpace and LineTerminator */
        cst_cpset_add(&t, 9, 13); cst_cpset_add(&t, ' ', ' '); cst_cpset_add(&t, 0xa0, 0xa0); cst_cpset_add(&t, 0x1680, 0x1680);
        cst_cpset_add(&t, 0x2000, 0x200a); cst_cpset_add(&t, 0x2028, 0x2029); cst_cpset_add(&t, 0x202f, 0x202f);
        cst_cpset_add(&t, 0x205f, 0x205f); cst_cpset_add(&t, 0x3000, 0x3000); cst_cpset_add(&t, 0xfeff, 0xfeff);
    }
    cst_cpset_norm(&t);
    if (c != lc) cst_cpset_negate(&t);
    for (int32_t i = 0; i < t.n; i++) cst_cpset_add(set, t.r[i][0], t.r[i][1]);
    if (t.oom) set->oom = 1;
    cst_cpset_free(&t);
}

/* n hex digits at the cursor, or -1. */
static int64_t rx_hex(rx *r, int n) {
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        if (r->p >= r->end) return -1;
        char c = *r->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* An escape after '\' (cursor on the letter): a class escape is added to set and returns
 * -2; a character escape returns its code point; -1 is an error (recorded). in_class: \b is
 * a backspace there. */
static int64_t rx_escape(rx *r, cst_cpset *set, int in_class) {
    if (r->p >= r->end) { rx_fail(r, "a backslash at the end"); return -1; }
    char c = *r->p++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': add_class_escape(set, c); return -2;
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'b':
        if (in_class) return 8;
        rx_fail(r, "\\b (a word boundary) is not supported");
        return -1;
    case 'x': {
        int64_t v = rx_hex(r, 2);
        if (v < 0) rx_fail(r, "bad \\x escape");
        return v;
    }
    case 'u': {
        int64_t v;
        if (r->p < r->end && *r->p == '{') {
            r->p++;
            const char *q = r->p;
            while (q < r->end && *q != '}') q++;
            if (q >= r->end || q == r->p || q - r->p > 6) { rx_fail(r, "bad \\u{...} escape"); return -1; }
            v = rx_hex(r, (int)(q - r->p));
            r->p = q + 1;
        } else v = rx_hex(r, 4);
        if (v < 0 || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) { rx_fail(r, "bad \\u escape (surrogates are not supported)"); return -1; }
        return v;
    }
    default:
        if (strchr("^$\\.*+?()[]{}|/-", c)) return (unsigned char)c;
        r->p--;
        rx_fail(r, c >= '1' && c <= '9' ? "back-references are not supported"
                   : c == 'B' ? "\\B is not supported"
                   : c == 'p' || c == 'P' ? "\\p{...} is not supported"
                   : "an unknown escape");
        return -1;
    }
}

/* [...] at the cursor (after '['): the class as a normalized set. */
static void rx_class(rx *r, cst_cpset *set) {
    int neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    while (!r->rc && r->p < r->end && *r->p != ']') {
        int64_t lo;
        if (*r->p == '\\') { r->p++; lo = rx_escape(r, set, 1); }
        else lo = rx_utf8(r);
        if (lo == -1) return;
        if (lo == -2) continue; /* a class escape: no range from it */
        int64_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') { r->p++; hi = rx_escape(r, set, 1); }
            else hi = rx_utf8(r);
            if (hi == -1) return;
            if (hi == -2 || hi < lo) { rx_fail(r, "a bad range in a class"); return; }
        }
        cst_cpset_add(set, (uint32_t)lo, (uint32_t)hi);
    }
    if (r->p >= r->end) { rx_fail(r, "an unterminated class"); return; }
    r->p++;
    cst_cpset_norm(set);
    if (neg) cst_cpset_negate(set);
}

/* Write one character of set in the dialect's spelling, as a group. */
static void rx_put_set(rx *r, const cst_cpset *set) {
    if (set->oom) { rx_fail(r, "out of memory"); return; }
    if (cst_char_expr(r->b, set, r->dialect))
        rx_fail(r, r->dialect == CST_GEMMA ? "a class that holds only '<', which a tool-call string cannot"
                                          : "a class that matches nothing");
}

static void rx_alternatives(rx *r, int top);

/* A quantifier after an atom, if any, written as GBNF. */
static void rx_quantifier(rx *r) {
    if (r->p >= r->end) return;
    char c = *r->p;
    if (c == '*' || c == '+' || c == '?') {
        r->p++;
        plume_buf_put(r->b, &c, 1);
        plume_buf_puts(r->b, " ");
    } else if (c == '{') {
        const char *q = r->p + 1;
        int64_t lo = 0, hi;
        int digits = 0;
        while (q < r->end && *q >= '0' && *q <= '9' && lo <= RX_MAX_COUNT) lo = lo * 10 + (*q++ - '0'), digits++;
        if (!digits) { rx_fail(r, "a '{' that is not a quantifier (escape it)"); return; }
        hi = lo;
        if (q < r->end && *q == ',') {
            q++;
            hi = -1;
            if (q < r->end && *q >= '0' && *q <= '9') {
                hi = 0;
                while (q < r->end && *q >= '0' && *q <= '9' && hi <= RX_MAX_COUNT) hi = hi * 10 + (*q++ - '0');
            }
        }
        if (q >= r->end || *q != '}') { rx_fail(r, "a bad {m,n} quantifier"); return; }
        if (lo > RX_MAX_COUNT || hi > RX_MAX_COUNT) { rx_fail(r, "a count above 1000"); return; }
        if (hi >= 0 && hi < lo) { rx_fail(r, "a quantifier {m,n} with n < m"); return; }
        r->p = q + 1;
        if (hi < 0) plume_buf_printf(r->b, "{%d,} ", (int)lo);
        else plume_buf_printf(r->b, "{%d,%d} ", (int)lo, (int)hi);
    } else return;
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same language */
    if (r->p < r->end && strchr("*+?{", *r->p)) rx_fail(r, "a quantifier after a quantifier");
}

/* A sequence of atoms up to | or ) or the end. top: '$' may end it. Returns 1 when it ended
 * with an anchor '$'. */
static int rx_sequence(rx *r, int top) {
    while (!r->rc && r->p < r->end && *r->p != '|' && *r->p != ')') {
        char c = *r->p;
        cst_cpset set = {0};
        if (c == '$') {
            r->p++;
            if (top && (r->p == r->end || *r->p == '|')) return 1;
            rx_fail(r, "'$' is supported only at the end of the pattern or of a top-level alternative");
            return 0;
        }
        if (c == '^') { rx_fail(r, "'^' is supported only at the start of the pattern or of a top-level alternative"); return 0; }
        if (c == '*' || c == '+' || c == '?' || c == '{') { rx_fail(r, "a quantifier with nothing before it"); return 0; }
        if (c == '(') {
            r->p++;
            if (r->p < r->end && *r->p == '?') {
                if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
                else if (r->p + 1 < r->end && r->p[1] == '<' && r->p + 2 < r->end && r->p[2] != '=' && r->p[2] != '!') {
                    while (r->p < r->end && *r->p != '>') r->p++; /* a named group: a plain group here */
                    if (r->p < r->end) r->p++;
                } else { rx_fail(r, "lookaround is not supported"); return 0; }
            }
            if (++r->depth > RX_MAX_DEPTH) { rx_fail(r, "groups nested too deep"); return 0; }
            plume_buf_puts(r->b, "( ");
            rx_alternatives(r, 0);
            if (r->rc) return 0;
            if (r->p >= r->end || *r->p != ')') { rx_fail(r, "an unclosed group"); return 0; }
            r->p++;
            r->depth--;
            plume_buf_puts(r->b, ") ");
        } else {
            if (c == '.') {
                r->p++;
                cst_cpset_add(&set, '\n', '\n'); cst_cpset_add(&set, '\r', '\r'); cst_cpset_add(&set, 0x2028, 0x2029);
                cst_cpset_norm(&set);
                cst_cpset_negate(&set);
            } else if (c == '[') {
                r->p++;
                rx_class(r, &set);
            } else if (c == '\\') {
                r->p++;
                int64_t v = rx_escape(r, &set, 0);
                if (v >= 0) cst_cpset_add(&set, (uint32_t)v, (uint32_t)v);
                cst_cpset_norm(&set);
            } else {
                uint32_t cp = rx_utf8(r);
                cst_cpset_add(&set, cp, cp);
            }
            if (!r->rc) rx_put_set(r, &set);
            cst_cpset_free(&set);
        }
        rx_quantifier(r);
    }
    return 0;
}

/* Alternatives: at the top, each alternative's ends are free text unless anchored. */
static void rx_alternatives(rx *r, int top) {
    cst_cpset all = {0};
    cst_cpset_add(&all, 0, 0x10ffff);
    cst_cpset_norm(&all);
    for (int first = 1; !r->rc; first = 0) {
        if (!first) plume_buf_puts(r->b, "| ");
        int start = top && r->p < r->end && *r->p == '^';
        if (start) r->p++;
        if (top) plume_buf_puts(r->b, "( ");
        if (top && !start) { plume_buf_puts(r->b, "( "); rx_put_set(r, &all); plume_buf_puts(r->b, ")* "); }
        int end = rx_sequence(r, top);
        if (top && !end && !r->rc) { plume_buf_puts(r->b, "( "); rx_put_set(r, &all); plume_buf_puts(r->b, ")* "); }
        if (top) plume_buf_puts(r->b, ") ");
        if (r->p < r->end && *r->p == '|') { r->p++; continue; }
        break;
    }
    cst_cpset_free(&all);
}

/* GBNF (appended to b, one group) for the characters of a string matching pattern. */
int cst_regex_expr(plume_buf *b, const char *pattern, int dialect, const char *path, char **err) {
    rx r = {pattern, pattern + strlen(pattern), pattern, b, dialect, path, err, 0, 0};
    plume_buf_puts(b, "( ");
    rx_alternatives(&r, 1);
    if (!r.rc && r.p < r.end) rx_fail(&r, "an unmatched ')'");
    plume_buf_puts(b, ") ");
    return r.rc;
}
