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
 * The pattern is parsed into a small tree (character sets, sequences, alternatives,
 * repetitions), then written as GBNF: each character set becomes the dialect's spelling of a
 * character of it (cst_char_expr), so a JSON string's '"' is written \" and its controls
 * escaped, and a tool call's string never holds '<'. A repetition of a part that can match
 * the empty string (`(a*)*`, `(a?|b)+`) is written over the part's non-empty strings, the
 * same language without a loop that consumes nothing. With minLength/maxLength the tree is
 * narrowed to strings of those lengths (rx_raise, rx_cap): alternatives that cannot fit are
 * dropped, repetition counts raised or capped, a sequence's slack shared among its parts;
 * every string written still matches (docs/STRUCTURED.md "pattern"). */
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
    struct rx_node **pool; /* [n_pool] every node made (freed at the end) */
    int32_t n_pool;
    size_t cap_pool;
} rx;

#define RX_INF ((int64_t)1 << 40) /* an unbounded length */

/* A node of the pattern's tree. */
enum { RX_SET, RX_SEQ, RX_ALT, RX_REP };
typedef struct rx_node {
    int kind;
    cst_cpset set;          /* RX_SET: one character of it */
    struct rx_node **kid;   /* [n_kid] RX_SEQ parts in order, RX_ALT alternatives; RX_REP [1] */
    int32_t n_kid;
    size_t cap_kid;
    int64_t lo, hi;         /* RX_REP counts (hi -1: unbounded) */
} rx_node;

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

/* ---- the tree ---------------------------------------------------------------------------- */

/* A new node of kind, owned by the pool (freed with the parse); NULL with the error set. */
static rx_node *rx_new(rx *r, int kind) {
    rx_node *n = calloc(1, sizeof *n);
    if (!n || plume_grow(&r->pool, &r->cap_pool, (size_t)r->n_pool + 1, sizeof *r->pool)) {
        free(n);
        rx_fail(r, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->hi = -1;
    r->pool[r->n_pool++] = n;
    return n;
}

/* Append kid to a SEQ or ALT node (or set a REP's one kid). */
static void rx_push(rx *r, rx_node *n, rx_node *kid) {
    if (!n || !kid) return;
    if (plume_grow(&n->kid, &n->cap_kid, (size_t)n->n_kid + 1, sizeof *n->kid)) { rx_fail(r, "out of memory"); return; }
    n->kid[n->n_kid++] = kid;
}

/* Free every node of the pool. */
static void rx_pool_free(rx *r) {
    for (int32_t i = 0; i < r->n_pool; i++) {
        cst_cpset_free(&r->pool[i]->set);
        free(r->pool[i]->kid);
        free(r->pool[i]);
    }
    free(r->pool);
}

/* a * b and a + b saturating at RX_INF. */
static int64_t sat_mul(int64_t a, int64_t b) { return a && b > RX_INF / a ? RX_INF : a * b > RX_INF ? RX_INF : a * b; }
static int64_t sat_add(int64_t a, int64_t b) { return a + b > RX_INF ? RX_INF : a + b; }

/* The fewest characters a string of n has. */
static int64_t rx_min(const rx_node *n) {
    int64_t v = 0;
    switch (n->kind) {
    case RX_SET: return 1;
    case RX_SEQ: for (int32_t i = 0; i < n->n_kid; i++) v = sat_add(v, rx_min(n->kid[i])); return v;
    case RX_ALT:
        v = RX_INF;
        for (int32_t i = 0; i < n->n_kid; i++) { int64_t k = rx_min(n->kid[i]); if (k < v) v = k; }
        return v;
    default: return sat_mul(n->lo, rx_min(n->kid[0]));
    }
}

/* The most characters a string of n has (RX_INF: unbounded). */
static int64_t rx_max(const rx_node *n) {
    int64_t v = 0;
    switch (n->kind) {
    case RX_SET: return 1;
    case RX_SEQ: for (int32_t i = 0; i < n->n_kid; i++) v = sat_add(v, rx_max(n->kid[i])); return v;
    case RX_ALT:
        for (int32_t i = 0; i < n->n_kid; i++) { int64_t k = rx_max(n->kid[i]); if (k > v) v = k; }
        return v;
    default: {
        int64_t k = rx_max(n->kid[0]);
        return n->hi == 0 || k == 0 ? 0 : n->hi < 0 ? RX_INF : sat_mul(n->hi, k);
    }
    }
}

/* ---- lengths: the pattern narrowed to minLength / maxLength -------------------------------- */

/* Narrow n (in place) so that every string of it has at least t characters; the caller
 * checked rx_max(n) >= t, which makes it always possible. Only drops strings (narrowing). */
static void rx_raise(rx_node *n, int64_t t) {
    if (t <= rx_min(n)) return;
    if (n->kind == RX_ALT) { /* keep the alternatives that can reach t, each raised */
        int32_t k = 0;
        for (int32_t i = 0; i < n->n_kid; i++)
            if (rx_max(n->kid[i]) >= t) { rx_raise(n->kid[i], t); n->kid[k++] = n->kid[i]; }
        n->n_kid = k;
    } else if (n->kind == RX_SEQ) { /* the deficit taken by the parts in order */
        for (int32_t i = 0; i < n->n_kid && rx_min(n) < t; i++) {
            rx_node *k = n->kid[i];
            int64_t d = t - rx_min(n), room = rx_max(k) - rx_min(k);
            rx_raise(k, rx_min(k) + (d < room ? d : room));
        }
    } else if (n->kind == RX_REP) {
        rx_node *k = n->kid[0];
        if (rx_min(k) == 0) rx_raise(k, 1);
        int64_t km = rx_min(k), need = (t + km - 1) / km;
        if (n->hi < 0 || need <= n->hi) { if (need > n->lo) n->lo = need; }
        else { n->lo = n->hi; rx_raise(k, (t + n->hi - 1) / n->hi); }
    }
}

/* Narrow n (in place) so that no string of it has more than budget characters; the caller
 * checked rx_min(n) <= budget (kept as it is: the shortest strings stay). */
static void rx_cap(rx_node *n, int64_t budget) {
    if (rx_max(n) <= budget) return;
    if (n->kind == RX_ALT) {
        int32_t k = 0;
        for (int32_t i = 0; i < n->n_kid; i++)
            if (rx_min(n->kid[i]) <= budget) { rx_cap(n->kid[i], budget); n->kid[k++] = n->kid[i]; }
        n->n_kid = k;
    } else if (n->kind == RX_SEQ) { /* the slack shared evenly by the parts that vary, in order */
        int64_t slack = budget - rx_min(n);
        int32_t vary = 0;
        for (int32_t i = 0; i < n->n_kid; i++) vary += rx_max(n->kid[i]) > rx_min(n->kid[i]);
        for (int32_t i = 0; i < n->n_kid; i++) {
            rx_node *k = n->kid[i];
            int64_t km = rx_min(k);
            if (rx_max(k) == km) continue;
            int64_t share = slack / (vary > 0 ? vary : 1);
            vary--;
            rx_cap(k, km + share);
            slack -= rx_max(k) - km;
        }
    } else if (n->kind == RX_REP) {
        rx_node *k = n->kid[0];
        rx_cap(k, n->lo >= 1 ? budget / n->lo : budget);
        int64_t m = rx_max(k);
        if (m > 0 && (n->hi < 0 || n->hi > budget / m)) n->hi = budget / m;
    }
}

/* ---- writing GBNF ------------------------------------------------------------------------ */

/* Write one character of set in the dialect's spelling, as a group. */
static void rx_put_set(rx *r, const cst_cpset *set) {
    if (set->oom) { rx_fail(r, "out of memory"); return; }
    if (cst_char_expr(r->b, set, r->dialect))
        rx_fail(r, r->dialect == CST_GEMMA ? "a class that holds only '<', which a tool-call string cannot"
                                          : "a class that matches nothing");
}

/* A repetition count {lo,hi} (hi -1: unbounded) in GBNF. */
static void rx_put_count(rx *r, int64_t lo, int64_t hi) {
    if (lo == 0 && hi < 0) plume_buf_puts(r->b, "* ");
    else if (lo == 1 && hi < 0) plume_buf_puts(r->b, "+ ");
    else if (lo == 0 && hi == 1) plume_buf_puts(r->b, "? ");
    else if (hi < 0) plume_buf_printf(r->b, "{%lld,} ", (long long)lo);
    else plume_buf_printf(r->b, "{%lld,%lld} ", (long long)lo, (long long)hi);
}

static void rx_emit_ne(rx *r, const rx_node *n, int depth);

/* The GBNF of n, one group. A repetition of a part that can match empty is written over its
 * non-empty strings, X{m,n} as (X less "")-{0,n}: the same language, and no loop that
 * consumes nothing (which the grammar refuses as left recursion). */
static void rx_emit(rx *r, const rx_node *n, int depth) {
    if (r->rc) return;
    if (depth > 4 * RX_MAX_DEPTH) { rx_fail(r, "groups nested too deep"); return; }
    switch (n->kind) {
    case RX_SET: rx_put_set(r, &n->set); return;
    case RX_SEQ:
        plume_buf_puts(r->b, "( ");
        for (int32_t i = 0; i < n->n_kid; i++) rx_emit(r, n->kid[i], depth + 1);
        plume_buf_puts(r->b, ") ");
        return;
    case RX_ALT:
        plume_buf_puts(r->b, "( ");
        for (int32_t i = 0; i < n->n_kid; i++) {
            if (i) plume_buf_puts(r->b, "| ");
            rx_emit(r, n->kid[i], depth + 1);
        }
        plume_buf_puts(r->b, ") ");
        return;
    default: {
        const rx_node *k = n->kid[0];
        if (n->hi == 0 || rx_max(k) == 0) { plume_buf_puts(r->b, "( ) "); return; } /* only "" */
        plume_buf_puts(r->b, "( ");
        if (rx_min(k) == 0) {
            rx_emit_ne(r, k, depth + 1);
            plume_buf_puts(r->b, ") ");
            rx_put_count(r, 0, n->hi);
        } else {
            rx_emit(r, k, depth + 1);
            plume_buf_puts(r->b, ") ");
            rx_put_count(r, n->lo, n->hi);
        }
        return;
    }
    }
}

/* The GBNF of n's strings but "" (n has some non-empty string), one group. */
static void rx_emit_ne(rx *r, const rx_node *n, int depth) {
    if (r->rc) return;
    if (depth > 4 * RX_MAX_DEPTH) { rx_fail(r, "groups nested too deep"); return; }
    if (rx_min(n) > 0) { rx_emit(r, n, depth); return; }
    plume_buf_puts(r->b, "( ");
    int first = 1;
    if (n->kind == RX_ALT) {
        for (int32_t i = 0; i < n->n_kid; i++) {
            if (rx_max(n->kid[i]) == 0) continue;
            if (!first) plume_buf_puts(r->b, "| ");
            first = 0;
            rx_emit_ne(r, n->kid[i], depth + 1);
        }
    } else if (n->kind == RX_SEQ) { /* every part can be empty: AB less "" = (A less "") B | (B less "") */
        for (int32_t i = 0; i < n->n_kid; i++) {
            if (rx_max(n->kid[i]) == 0) continue;
            if (!first) plume_buf_puts(r->b, "| ");
            first = 0;
            rx_emit_ne(r, n->kid[i], depth + 1);
            for (int32_t j = i + 1; j < n->n_kid; j++) rx_emit(r, n->kid[j], depth + 1);
        }
    } else { /* X{m,n} that can be empty: (X less ""){1,n} */
        const rx_node *k = n->kid[0];
        plume_buf_puts(r->b, "( ");
        if (rx_min(k) == 0) rx_emit_ne(r, k, depth + 1);
        else rx_emit(r, k, depth + 1);
        plume_buf_puts(r->b, ") ");
        rx_put_count(r, 1, n->hi);
    }
    plume_buf_puts(r->b, ") ");
}

/* ---- parsing ----------------------------------------------------------------------------- */

static rx_node *rx_alternatives(rx *r, int top);

/* A quantifier after atom, if any: the atom wrapped in a repetition. */
static rx_node *rx_quantifier(rx *r, rx_node *atom) {
    if (r->p >= r->end || !atom) return atom;
    char c = *r->p;
    int64_t lo, hi;
    if (c == '*' || c == '+' || c == '?') {
        r->p++;
        lo = c == '+';
        hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
        const char *q = r->p + 1;
        int digits = 0;
        lo = 0;
        while (q < r->end && *q >= '0' && *q <= '9' && lo <= RX_MAX_COUNT) lo = lo * 10 + (*q++ - '0'), digits++;
        if (!digits) { rx_fail(r, "a '{' that is not a quantifier (escape it)"); return NULL; }
        hi = lo;
        if (q < r->end && *q == ',') {
            q++;
            hi = -1;
            if (q < r->end && *q >= '0' && *q <= '9') {
                hi = 0;
                while (q < r->end && *q >= '0' && *q <= '9' && hi <= RX_MAX_COUNT) hi = hi * 10 + (*q++ - '0');
            }
        }
        if (q >= r->end || *q != '}') { rx_fail(r, "a bad {m,n} quantifier"); return NULL; }
        if (lo > RX_MAX_COUNT || hi > RX_MAX_COUNT) { rx_fail(r, "a count above 1000"); return NULL; }
        if (hi >= 0 && hi < lo) { rx_fail(r, "a quantifier {m,n} with n < m"); return NULL; }
        r->p = q + 1;
    } else return atom;
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same language */
    if (r->p < r->end && strchr("*+?{", *r->p)) { rx_fail(r, "a quantifier after a quantifier"); return NULL; }
    rx_node *n = rx_new(r, RX_REP);
    if (!n) return NULL;
    n->lo = lo;
    n->hi = hi;
    rx_push(r, n, atom);
    return n;
}

/* A sequence of atoms up to | or ) or the end. top: '$' may end it (*end set). */
static rx_node *rx_sequence(rx *r, int top, int *end) {
    rx_node *seq = rx_new(r, RX_SEQ);
    while (seq && !r->rc && r->p < r->end && *r->p != '|' && *r->p != ')') {
        char c = *r->p;
        rx_node *atom = NULL;
        if (c == '$') {
            r->p++;
            if (top && (r->p == r->end || *r->p == '|')) { *end = 1; return seq; }
            rx_fail(r, "'$' is supported only at the end of the pattern or of a top-level alternative");
            return NULL;
        }
        if (c == '^') { rx_fail(r, "'^' is supported only at the start of the pattern or of a top-level alternative"); return NULL; }
        if (c == '*' || c == '+' || c == '?' || c == '{') { rx_fail(r, "a quantifier with nothing before it"); return NULL; }
        if (c == '(') {
            r->p++;
            if (r->p < r->end && *r->p == '?') {
                if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
                else if (r->p + 1 < r->end && r->p[1] == '<' && r->p + 2 < r->end && r->p[2] != '=' && r->p[2] != '!') {
                    while (r->p < r->end && *r->p != '>') r->p++; /* a named group: a plain group here */
                    if (r->p < r->end) r->p++;
                } else { rx_fail(r, "lookaround is not supported"); return NULL; }
            }
            if (++r->depth > RX_MAX_DEPTH) { rx_fail(r, "groups nested too deep"); return NULL; }
            atom = rx_alternatives(r, 0);
            if (r->rc) return NULL;
            if (r->p >= r->end || *r->p != ')') { rx_fail(r, "an unclosed group"); return NULL; }
            r->p++;
            r->depth--;
        } else {
            atom = rx_new(r, RX_SET);
            if (!atom) return NULL;
            cst_cpset *set = &atom->set;
            if (c == '.') {
                r->p++;
                cst_cpset_add(set, '\n', '\n'); cst_cpset_add(set, '\r', '\r'); cst_cpset_add(set, 0x2028, 0x2029);
                cst_cpset_norm(set);
                cst_cpset_negate(set);
            } else if (c == '[') {
                r->p++;
                rx_class(r, set);
            } else if (c == '\\') {
                r->p++;
                int64_t v = rx_escape(r, set, 0);
                if (v >= 0) cst_cpset_add(set, (uint32_t)v, (uint32_t)v);
                cst_cpset_norm(set);
            } else {
                uint32_t cp = rx_utf8(r);
                cst_cpset_add(set, cp, cp);
            }
            if (set->oom) rx_fail(r, "out of memory");
        }
        rx_push(r, seq, rx_quantifier(r, atom));
    }
    return seq;
}

/* Free text: any characters (an end of a top-level alternative without its anchor). */
static rx_node *rx_free_text(rx *r) {
    rx_node *rep = rx_new(r, RX_REP), *all = rx_new(r, RX_SET);
    if (!rep || !all) return NULL;
    cst_cpset_add(&all->set, 0, 0x10ffff);
    cst_cpset_norm(&all->set);
    rep->lo = 0;
    rx_push(r, rep, all);
    return rep;
}

/* Alternatives: at the top, each alternative's ends are free text unless anchored. */
static rx_node *rx_alternatives(rx *r, int top) {
    rx_node *alt = rx_new(r, RX_ALT);
    while (alt && !r->rc) {
        int start = top && r->p < r->end && *r->p == '^', end = 0;
        if (start) r->p++;
        rx_node *seq = rx_sequence(r, top, &end);
        if (r->rc) return NULL;
        if (top) {
            rx_node *whole = rx_new(r, RX_SEQ);
            if (!start) rx_push(r, whole, rx_free_text(r));
            rx_push(r, whole, seq);
            if (!end) rx_push(r, whole, rx_free_text(r));
            seq = whole;
        }
        rx_push(r, alt, seq);
        if (r->p < r->end && *r->p == '|') { r->p++; continue; }
        break;
    }
    return alt;
}

/* GBNF (appended to b, one group) for the characters of a string matching pattern with
 * between lo and hi characters (-1: no bound; the pattern narrowed to them, or an error
 * when no string of it has such a length). */
int cst_regex_expr(plume_buf *b, const char *pattern, int64_t lo, int64_t hi, int dialect, const char *path, char **err) {
    rx r = {pattern, pattern + strlen(pattern), pattern, b, dialect, path, err, 0, 0, NULL, 0, 0};
    rx_node *root = rx_alternatives(&r, 1);
    if (!r.rc && r.p < r.end) rx_fail(&r, "an unmatched ')'");
    if (!r.rc && root) {
        if ((lo > 0 && rx_max(root) < lo) || (hi >= 0 && rx_min(root) > hi))
            r.rc = plume_fail(err, PLUME_EINVAL, "json schema: %s: no string matching \"pattern\" has a length within "
                              "minLength/maxLength", path);
        else {
            if (lo > 0) rx_raise(root, lo);
            if (hi >= 0) rx_cap(root, hi);
            rx_emit(&r, root, 0);
        }
    }
    rx_pool_free(&r);
    return r.rc;
}
