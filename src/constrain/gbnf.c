/* gbnf.c -- GBNF text -> cst_grammar (docs/STRUCTURED.md "Grammars").
 *
 * The syntax is llama.cpp's GBNF: `name ::= alternatives` rules, "literals", [classes] with
 * ranges and ^, `.`, groups, * + ? {m} {m,} {m,n}, # comments, and the start rule `root`;
 * terminals are Unicode code points. plume adds references to special tokens, which no byte
 * spelling can match: `<[N]>` is token id N, `<TEXT>` the token whose text is TEXT (e.g.
 * `<|tool_call>`).
 *
 * The recognizer (dfa.c) reads bytes, so code points are lowered here: a literal becomes
 * its UTF-8 bytes, a class the UTF-8 byte-range sequences of its code points (surrogates
 * excluded), one CST_BYTES element when every member is ASCII. Repetitions are expanded into
 * rules: x* is R ::= x R | "", x{m,n} is m copies of x and a chain of n - m optional ones.
 *
 * The input is untrusted (a request's grammar): every limit is checked (CST_MAX_ELEMS,
 * CST_MAX_REPEAT), nesting is bounded, invalid UTF-8 is refused, and so are grammars the
 * recognizer could not run: a rule used but never defined, left recursion (a rule reaching
 * itself before any byte), and a root that derives no finite text. Alternatives that can
 * never finish (they use a rule that derives no finite text) are dropped, so every state the
 * recognizer reaches can still be completed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define GP_MAX_DEPTH 200 /* nesting of ( ) */

/* ---- the parser's state ------------------------------------------------------------------ */

/* A rule under construction: its own element run (alternatives separated by CST_ALT). */
typedef struct {
    char *name;
    cst_elem *e;
    int32_t n;
    size_t cap;
    int defined;   /* a `name ::=` line was seen (generated rules are defined at birth) */
    size_t used_at; /* offset of the first use, for "used but not defined" */
} gp_rule;

typedef struct {
    const char *src, *p, *end;
    char **err;
    int rc;              /* the first error */
    gp_rule *r;
    int32_t n_rules;
    size_t cap_rules;
    int32_t *ht;         /* [ht_cap] rule index + 1 by name hash (0: empty) */
    int32_t ht_cap;
    uint64_t (*sets)[4];
    int32_t n_sets;
    size_t cap_sets;
    int32_t byte_set[256]; /* set index of {b} + 1 (0: not made yet) */
    char **tok_text;
    int32_t *tok_id;
    int32_t n_toks;
    size_t cap_toks, cap_tok_id;
    int64_t total;       /* elements so far, against CST_MAX_ELEMS */
    int depth;
} gp;

/* Line and column of offset at, for messages. */
static void gp_where(const gp *g, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = g->src; q < at && q < g->end; q++) {
        if (*q == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

/* Record a syntax error at the cursor (the first one wins). */
static void gp_fail(gp *g, const char *what) {
    if (g->rc) return;
    int line, col;
    gp_where(g, g->p, &line, &col);
    g->rc = plume_fail(g->err, PLUME_EINVAL, "grammar: line %d, column %d: %s", line, col, what);
}

/* Record an out-of-memory error. */
static void gp_oom(gp *g) {
    if (!g->rc) g->rc = plume_fail(g->err, PLUME_ENOMEM, "grammar: out of memory");
}

/* ---- rules, sets and tokens -------------------------------------------------------------- */

/* FNV-1a of a name. */
static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Insert rule i into the name table (grown at half load). 0 or -1 (out of memory). */
static int ht_insert(gp *g, int32_t i) {
    if (2 * (g->n_rules + 1) > g->ht_cap) {
        int32_t cap = g->ht_cap ? g->ht_cap * 2 : 64;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) return -1;
        for (int32_t k = 0; k < g->ht_cap; k++)
            if (g->ht[k]) {
                const char *nm = g->r[g->ht[k] - 1].name;
                uint32_t s = name_hash(nm, strlen(nm)) & (uint32_t)(cap - 1);
                while (ht[s]) s = (s + 1) & (uint32_t)(cap - 1);
                ht[s] = g->ht[k];
            }
        free(g->ht);
        g->ht = ht;
        g->ht_cap = cap;
    }
    const char *nm = g->r[i].name;
    uint32_t s = name_hash(nm, strlen(nm)) & (uint32_t)(g->ht_cap - 1);
    while (g->ht[s]) s = (s + 1) & (uint32_t)(g->ht_cap - 1);
    g->ht[s] = i + 1;
    return 0;
}

/* The rule named s[0, n), or -1. */
static int32_t rule_find(const gp *g, const char *s, size_t n) {
    if (!g->ht_cap) return -1;
    uint32_t h = name_hash(s, n) & (uint32_t)(g->ht_cap - 1);
    while (g->ht[h]) {
        const char *nm = g->r[g->ht[h] - 1].name;
        if (strlen(nm) == n && !memcmp(nm, s, n)) return g->ht[h] - 1;
        h = (h + 1) & (uint32_t)(g->ht_cap - 1);
    }
    return -1;
}

/* A new rule named s[0, n) (a copy); its index, or -1 (error recorded). */
static int32_t rule_new(gp *g, const char *s, size_t n) {
    if (plume_grow(&g->r, &g->cap_rules, (size_t)g->n_rules + 1, sizeof *g->r)) { gp_oom(g); return -1; }
    gp_rule *r = &g->r[g->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(n + 1);
    if (!r->name) { gp_oom(g); return -1; }
    memcpy(r->name, s, n);
    r->name[n] = 0;
    if (ht_insert(g, g->n_rules)) { free(r->name); gp_oom(g); return -1; }
    return g->n_rules++;
}

/* The rule named s[0, n), made (undefined) at its first mention. */
static int32_t rule_get(gp *g, const char *s, size_t n) {
    int32_t i = rule_find(g, s, n);
    if (i >= 0) return i;
    i = rule_new(g, s, n);
    if (i >= 0) g->r[i].used_at = (size_t)(g->p - g->src);
    return i;
}

/* A generated rule, named after its parent: "parent~N". */
static int32_t rule_gen(gp *g, int32_t parent) {
    char name[128];
    snprintf(name, sizeof name, "%.100s~%d", g->r[parent].name, g->n_rules);
    int32_t i = rule_new(g, name, strlen(name));
    if (i >= 0) g->r[i].defined = 1;
    return i;
}

/* Append one element to rule ri. */
static void put(gp *g, int32_t ri, uint8_t type, int32_t v) {
    if (g->rc) return;
    if (++g->total > CST_MAX_ELEMS) {
        gp_fail(g, "the grammar is too large (more than 4194304 elements once repetitions are expanded)");
        return;
    }
    gp_rule *r = &g->r[ri];
    if (plume_grow(&r->e, &r->cap, (size_t)r->n + 1, sizeof *r->e)) { gp_oom(g); return; }
    r->e[r->n++] = (cst_elem){type, v};
}

/* The index of a byte set (equal sets share one). */
static int32_t set_index(gp *g, const uint64_t set[4]) {
    for (int32_t i = 0; i < g->n_sets; i++)
        if (!memcmp(g->sets[i], set, sizeof g->sets[i])) return i;
    if (plume_grow(&g->sets, &g->cap_sets, (size_t)g->n_sets + 1, sizeof *g->sets)) { gp_oom(g); return 0; }
    memcpy(g->sets[g->n_sets], set, sizeof g->sets[0]);
    return g->n_sets++;
}

/* The set {b} (cached: literals are made of them). */
static int32_t set_byte(gp *g, uint8_t b) {
    if (!g->byte_set[b]) {
        uint64_t s[4] = {0, 0, 0, 0};
        s[b >> 6] |= 1ull << (b & 63);
        g->byte_set[b] = set_index(g, s) + 1;
    }
    return g->byte_set[b] - 1;
}

/* Append byte set [lo, hi] to rule ri. */
static void put_range(gp *g, int32_t ri, uint8_t lo, uint8_t hi) {
    if (lo == hi) { put(g, ri, CST_BYTES, set_byte(g, lo)); return; }
    uint64_t s[4] = {0, 0, 0, 0};
    for (int b = lo; b <= hi; b++) s[b >> 6] |= 1ull << (b & 63);
    put(g, ri, CST_BYTES, set_index(g, s));
}

/* A token reference as written (text NULL for <[id]>); its index. */
static int32_t tok_add(gp *g, const char *text, size_t n, int32_t id) {
    for (int32_t i = 0; i < g->n_toks; i++) {
        if (text && g->tok_text[i] && strlen(g->tok_text[i]) == n && !memcmp(g->tok_text[i], text, n)) return i;
        if (!text && !g->tok_text[i] && g->tok_id[i] == id) return i;
    }
    if (plume_grow(&g->tok_text, &g->cap_toks, (size_t)g->n_toks + 1, sizeof *g->tok_text) ||
        plume_grow(&g->tok_id, &g->cap_tok_id, (size_t)g->n_toks + 1, sizeof *g->tok_id)) {
        gp_oom(g);
        return 0;
    }
    g->tok_text[g->n_toks] = NULL;
    if (text) {
        char *c = malloc(n + 1);
        if (!c) { gp_oom(g); return 0; }
        memcpy(c, text, n);
        c[n] = 0;
        g->tok_text[g->n_toks] = c;
    }
    g->tok_id[g->n_toks] = text ? -1 : id;
    return g->n_toks++;
}

/* ---- code points and UTF-8 --------------------------------------------------------------- */

/* Decode one UTF-8 character at p (strict); its code point, or -1 (invalid). *len gets the
 * bytes it takes. */
static int32_t utf8_decode(const char *p, const char *end, int *len) {
    const unsigned char *s = (const unsigned char *)p;
    size_t n = (size_t)(end - p);
    if (n == 0) return -1;
    if (s[0] < 0x80) { *len = 1; return s[0]; }
    int k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (k == 0 || s[0] > 0xf4 || n < (size_t)k) return -1;
    int32_t cp = s[0] & (0x7f >> k);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *len = k;
    return cp;
}

/* UTF-8 bytes of cp (a scalar value) into out; their count. */
static int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xc0 | cp >> 6); out[1] = (uint8_t)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* One UTF-8 byte-range sequence: byte i of the character lies in [lo[i], hi[i]]. */
typedef struct {
    uint8_t lo[4], hi[4];
    int n;
} u8seq;

/* Split [lo, hi] (same encoded length, no surrogates) into byte-range sequences (the
 * standard construction: cut where a continuation byte's range would not be full). */
static void utf8_split(uint32_t lo, uint32_t hi, u8seq *out, int32_t *n_out, int32_t cap) {
    static const uint32_t edges[3] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++) /* different lengths */
        if (lo <= edges[i] && hi > edges[i]) {
            utf8_split(lo, edges[i], out, n_out, cap);
            utf8_split(edges[i] + 1, hi, out, n_out, cap);
            return;
        }
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, b);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(lo, lo | m, out, n_out, cap);
                utf8_split((lo | m) + 1, hi, out, n_out, cap);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, out, n_out, cap);
                utf8_split(hi & ~m, hi, out, n_out, cap);
                return;
            }
        }
    }
    if (*n_out == cap) return; /* cannot happen: at most a few dozen per range */
    u8seq *q = &out[(*n_out)++];
    q->n = n;
    memcpy(q->lo, a, 4);
    memcpy(q->hi, b, 4);
}

/* Append a class (a normalized code point set) to rule ri: one CST_BYTES element when every
 * member is one byte, else a generated rule with one alternative per byte-range sequence
 * (the one-byte members merged into a single set). An empty class is an error. */
static void put_class(gp *g, int32_t ri, const cst_cpset *s) {
    if (s->oom) { gp_oom(g); return; }
    if (s->n == 0) { gp_fail(g, "the character class matches nothing"); return; }
    uint64_t ascii[4] = {0, 0, 0, 0};
    int has_ascii = 0, has_multi = 0;
    for (int32_t i = 0; i < s->n; i++) {
        for (uint32_t c = s->r[i][0]; c <= s->r[i][1] && c < 0x80; c++) {
            ascii[c >> 6] |= 1ull << (c & 63);
            has_ascii = 1;
        }
        if (s->r[i][1] >= 0x80) has_multi = 1;
    }
    if (!has_multi) { put(g, ri, CST_BYTES, set_index(g, ascii)); return; }
    int32_t sub = rule_gen(g, ri);
    if (sub < 0) return;
    int first = 1;
    if (has_ascii) { put(g, sub, CST_BYTES, set_index(g, ascii)); first = 0; }
    for (int32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0] < 0x80 ? 0x80 : s->r[i][0], hi = s->r[i][1];
        if (hi < 0x80) continue;
        u8seq seq[64];
        int32_t n = 0;
        utf8_split(lo, hi, seq, &n, 64);
        for (int32_t k = 0; k < n; k++) {
            if (!first) put(g, sub, CST_ALT, 0);
            first = 0;
            for (int j = 0; j < seq[k].n; j++) put_range(g, sub, seq[k].lo[j], seq[k].hi[j]);
        }
    }
    put(g, ri, CST_RULE, sub);
}

/* ---- lexing ------------------------------------------------------------------------------ */

/* Skip spaces, tabs and # comments; newlines too when newline_ok. */
static void skip_space(gp *g, int newline_ok) {
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || c == '\r') g->p++;
        else if (c == '#') {
            while (g->p < g->end && *g->p != '\n') g->p++;
        } else if (c == '\n' && newline_ok) g->p++;
        else break;
    }
}

/* Whether c may be part of a rule name. */
static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The value of n hex digits at the cursor, or -1. */
static int64_t hex_n(gp *g, int n) {
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        if (g->p >= g->end) return -1;
        char c = *g->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One character of a literal or class at the cursor (escapes decoded); its code point, or
 * -1 (error recorded). */
static int32_t read_char(gp *g) {
    if (g->p >= g->end) { gp_fail(g, "unexpected end of the grammar"); return -1; }
    if (*g->p != '\\') {
        int len;
        int32_t cp = utf8_decode(g->p, g->end, &len);
        if (cp < 0) { gp_fail(g, "invalid UTF-8"); return -1; }
        g->p += len;
        return cp;
    }
    g->p++;
    if (g->p >= g->end) { gp_fail(g, "a backslash at the end"); return -1; }
    char c = *g->p++;
    int64_t v;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': case '.': case '/': case '\'': return c;
    case 'x': v = hex_n(g, 2); break;
    case 'u': v = hex_n(g, 4); break;
    case 'U': v = hex_n(g, 8); break;
    default: g->p--; gp_fail(g, "unknown escape"); return -1;
    }
    if (v < 0 || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) { gp_fail(g, "bad \\x, \\u or \\U escape"); return -1; }
    return (int32_t)v;
}

/* ---- the grammar's syntax ---------------------------------------------------------------- */

static void parse_alternates(gp *g, int32_t ri, int nested);

/* "literal" at the cursor (after the quote) -> its UTF-8 bytes. */
static void parse_literal(gp *g, int32_t ri) {
    while (!g->rc && g->p < g->end && *g->p != '"') {
        int32_t cp = read_char(g);
        if (cp < 0) return;
        uint8_t b[4];
        int n = utf8_encode((uint32_t)cp, b);
        for (int i = 0; i < n; i++) put(g, ri, CST_BYTES, set_byte(g, b[i]));
    }
    if (g->p >= g->end) { gp_fail(g, "unterminated string literal"); return; }
    g->p++;
}

/* [class] at the cursor (after the bracket). */
static void parse_class(gp *g, int32_t ri) {
    cst_cpset s = {0};
    int neg = g->p < g->end && *g->p == '^';
    if (neg) g->p++;
    while (!g->rc && g->p < g->end && *g->p != ']') {
        int32_t lo = read_char(g), hi = lo;
        if (lo < 0) break;
        if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            hi = read_char(g);
            if (hi < 0) break;
            if (hi < lo) { gp_fail(g, "a range whose end is before its start"); break; }
        }
        cst_cpset_add(&s, (uint32_t)lo, (uint32_t)hi);
    }
    if (!g->rc && g->p >= g->end) gp_fail(g, "unterminated character class");
    if (!g->rc) {
        g->p++;
        cst_cpset_norm(&s);
        if (neg) cst_cpset_negate(&s);
        put_class(g, ri, &s);
    }
    cst_cpset_free(&s);
}

/* <[N]> or <TEXT> at the cursor (on the '<'). */
static void parse_token(gp *g, int32_t ri) {
    const char *start = g->p;
    const char *q = g->p + 1;
    while (q < g->end && *q != '>' && *q != '\n' && *q != ' ') q++;
    if (q >= g->end || *q != '>' || q == g->p + 1) { gp_fail(g, "a token reference is <[ID]> or <TEXT>"); return; }
    if (g->p[1] == '[') {
        int64_t id = 0;
        const char *d = g->p + 2;
        if (d >= q - 1 || q[-1] != ']') { gp_fail(g, "a token id reference is <[ID]>"); return; }
        for (; d < q - 1; d++) {
            if (*d < '0' || *d > '9' || id > 100000000) { gp_fail(g, "a token id reference is <[ID]>"); return; }
            id = id * 10 + (*d - '0');
        }
        put(g, ri, CST_TOKEN, tok_add(g, NULL, 0, (int32_t)id));
    } else {
        put(g, ri, CST_TOKEN, tok_add(g, start, (size_t)(q + 1 - start), -1));
    }
    g->p = q + 1;
}

/* A bounded integer at the cursor; -1 when none. */
static int64_t read_count(gp *g) {
    if (g->p >= g->end || *g->p < '0' || *g->p > '9') return -1;
    int64_t v = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        v = v * 10 + (*g->p++ - '0');
        if (v > CST_MAX_REPEAT) return CST_MAX_REPEAT + 1;
    }
    return v;
}

/* Repeat the item in rule ri's elements [start, n) between lo and hi times (hi -1: no
 * bound): the item becomes one element (wrapped in a rule when it is several), copied lo
 * times, then followed by the optional part. */
static void repeat(gp *g, int32_t ri, int32_t start, int64_t lo, int64_t hi) {
    if (g->rc) return;
    if (lo > CST_MAX_REPEAT || hi > CST_MAX_REPEAT) { gp_fail(g, "a repetition count above 100000"); return; }
    if (hi >= 0 && hi < lo) { gp_fail(g, "a repetition {m,n} with n < m"); return; }
    gp_rule *r = &g->r[ri];
    if (r->n - start != 1) { /* wrap the item */
        int32_t sub = rule_gen(g, ri);
        if (sub < 0) return;
        r = &g->r[ri];
        for (int32_t i = start; i < r->n; i++) put(g, sub, r->e[i].type, r->e[i].v);
        r = &g->r[ri];
        g->total -= r->n - start; /* moved, not copied */
        r->n = start;
        put(g, ri, CST_RULE, sub);
        r = &g->r[ri];
    }
    cst_elem item = r->e[start];
    r->n = start;
    g->total--;
    for (int64_t i = 0; i < lo; i++) put(g, ri, item.type, item.v);
    if (hi == lo) return;
    if (hi < 0) { /* R ::= item R | "" */
        int32_t rep = rule_gen(g, ri);
        if (rep < 0) return;
        put(g, rep, item.type, item.v);
        put(g, rep, CST_RULE, rep);
        put(g, rep, CST_ALT, 0);
        put(g, ri, CST_RULE, rep);
        return;
    }
    int32_t prev = -1; /* R_k ::= item R_{k-1} | "", R_1 ::= item | "" */
    for (int64_t k = 1; k <= hi - lo && !g->rc; k++) {
        int32_t rk = rule_gen(g, ri);
        if (rk < 0) return;
        put(g, rk, item.type, item.v);
        if (prev >= 0) put(g, rk, CST_RULE, prev);
        put(g, rk, CST_ALT, 0);
        prev = rk;
    }
    if (prev >= 0) put(g, ri, CST_RULE, prev);
}

/* A quantifier after an item, if any: * + ? {m} {m,} {m,n}. */
static void parse_quantifier(gp *g, int32_t ri, int32_t start, int nested) {
    if (g->p >= g->end) return;
    char c = *g->p;
    if (c == '*') { g->p++; repeat(g, ri, start, 0, -1); }
    else if (c == '+') { g->p++; repeat(g, ri, start, 1, -1); }
    else if (c == '?') { g->p++; repeat(g, ri, start, 0, 1); }
    else if (c == '{') {
        g->p++;
        skip_space(g, nested);
        int64_t lo = read_count(g), hi;
        if (lo < 0) { gp_fail(g, "a repetition wants {m}, {m,} or {m,n}"); return; }
        skip_space(g, nested);
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            skip_space(g, nested);
            hi = g->p < g->end && *g->p == '}' ? -1 : read_count(g);
            if (hi == -1 && (g->p >= g->end || *g->p != '}')) { gp_fail(g, "a repetition wants {m}, {m,} or {m,n}"); return; }
        } else hi = lo;
        skip_space(g, nested);
        if (g->p >= g->end || *g->p != '}') { gp_fail(g, "a repetition wants {m}, {m,} or {m,n}"); return; }
        g->p++;
        repeat(g, ri, start, lo, hi);
    } else return;
    skip_space(g, nested);
}

/* A sequence of items until | ) or the end of the rule. */
static void parse_sequence(gp *g, int32_t ri, int nested) {
    while (!g->rc && g->p < g->end) {
        char c = *g->p;
        int32_t start = g->r[ri].n;
        if (c == '"') { g->p++; parse_literal(g, ri); }
        else if (c == '[') { g->p++; parse_class(g, ri); }
        else if (c == '<') parse_token(g, ri);
        else if (c == '.') {
            g->p++;
            cst_cpset s = {0};
            cst_cpset_add(&s, 0, 0x10ffff);
            cst_cpset_norm(&s);
            put_class(g, ri, &s);
            cst_cpset_free(&s);
        } else if (c == '(') {
            if (++g->depth > GP_MAX_DEPTH) { gp_fail(g, "groups nested too deep"); return; }
            g->p++;
            skip_space(g, 1);
            int32_t sub = rule_gen(g, ri);
            if (sub < 0) return;
            parse_alternates(g, sub, 1);
            if (g->rc) return;
            if (g->p >= g->end || *g->p != ')') { gp_fail(g, "expected ')'"); return; }
            g->p++;
            g->depth--;
            put(g, ri, CST_RULE, sub);
        } else if (is_word(c)) {
            const char *s = g->p;
            while (g->p < g->end && is_word(*g->p)) g->p++;
            int32_t ref = rule_get(g, s, (size_t)(g->p - s));
            if (ref < 0) return;
            put(g, ri, CST_RULE, ref);
        } else return;
        skip_space(g, nested);
        parse_quantifier(g, ri, start, nested);
    }
}

/* Alternatives separated by | (a newline after | continues the rule). */
static void parse_alternates(gp *g, int32_t ri, int nested) {
    parse_sequence(g, ri, nested);
    while (!g->rc && g->p < g->end && *g->p == '|') {
        g->p++;
        put(g, ri, CST_ALT, 0);
        skip_space(g, 1);
        parse_sequence(g, ri, nested);
    }
}

/* One `name ::= alternatives` rule and the newline after it. */
static void parse_rule(gp *g) {
    const char *s = g->p;
    while (g->p < g->end && is_word(*g->p)) g->p++;
    if (g->p == s) { gp_fail(g, "expected a rule name"); return; }
    size_t n = (size_t)(g->p - s);
    skip_space(g, 0);
    if (g->end - g->p < 3 || memcmp(g->p, "::=", 3)) { gp_fail(g, "expected '::='"); return; }
    g->p += 3;
    skip_space(g, 1);
    int32_t ri = rule_get(g, s, n);
    if (ri < 0) return;
    if (g->r[ri].defined) {
        g->p = s;
        gp_fail(g, "a rule defined twice");
        return;
    }
    g->r[ri].defined = 1;
    parse_alternates(g, ri, 0);
    if (g->rc) return;
    if (g->p < g->end && *g->p != '\n') { gp_fail(g, "unexpected character"); return; }
    skip_space(g, 1);
}

/* ---- checks and flattening --------------------------------------------------------------- */

/* Every rule's alternatives side by side, before anything is dropped. */
typedef struct {
    int32_t *alt_rule;  /* [n_alts] the rule an alternative belongs to */
    int32_t *alt_a;     /* [n_alts] its elements: r[alt_rule].e[alt_a .. alt_b) */
    int32_t *alt_b;
    int32_t n_alts;
} gp_alts;

/* List the alternatives of every rule. 0 or -1 (out of memory). */
static int alts_list(const gp *p, gp_alts *A) {
    int64_t n = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        n++;
        for (int32_t i = 0; i < p->r[r].n; i++) n += p->r[r].e[i].type == CST_ALT;
    }
    A->alt_rule = malloc((size_t)n * sizeof *A->alt_rule);
    A->alt_a = malloc((size_t)n * sizeof *A->alt_a);
    A->alt_b = malloc((size_t)n * sizeof *A->alt_b);
    if (!A->alt_rule || !A->alt_a || !A->alt_b) return -1;
    int32_t k = 0;
    for (int32_t r = 0; r < p->n_rules; r++)
        for (int32_t a = 0, i = 0; i <= p->r[r].n; i++)
            if (i == p->r[r].n || p->r[r].e[i].type == CST_ALT) {
                A->alt_rule[k] = r;
                A->alt_a[k] = a;
                A->alt_b[k++] = i;
                a = i + 1;
            }
    A->n_alts = k;
    return 0;
}

/* prop[r] = some alternative of r has every element so, where a rule element is so when its
 * rule is and a terminal is so when term: nullable (term 0) or productive (term 1). A
 * worklist over the rules' occurrences, linear in the grammar's size. 0 or -1 (memory). */
static int solve(const gp *p, const gp_alts *A, int term, uint8_t *prop) {
    int32_t R = p->n_rules, N = A->n_alts;
    int32_t *need = malloc((size_t)N * sizeof *need), *occ_n = calloc((size_t)R + 1, sizeof *occ_n);
    int32_t *queue = malloc((size_t)R * sizeof *queue), *occ = NULL;
    int rc = -1;
    if (!need || !occ_n || !queue) goto done;
    int64_t n_occ = 0;
    for (int32_t k = 0; k < N; k++) {
        const cst_elem *e = p->r[A->alt_rule[k]].e;
        need[k] = 0;
        for (int32_t i = A->alt_a[k]; i < A->alt_b[k]; i++) {
            if (e[i].type == CST_RULE) { need[k]++; occ_n[e[i].v + 1]++; n_occ++; }
            else if (!term) need[k] = INT32_MAX / 2; /* a terminal: never nullable */
        }
    }
    for (int32_t r = 0; r < R; r++) occ_n[r + 1] += occ_n[r]; /* CSR starts */
    occ = malloc((size_t)(n_occ ? n_occ : 1) * sizeof *occ);
    int32_t *fill = calloc((size_t)R, sizeof *fill);
    if (!occ || !fill) { free(fill); goto done; }
    for (int32_t k = 0; k < N; k++) {
        const cst_elem *e = p->r[A->alt_rule[k]].e;
        for (int32_t i = A->alt_a[k]; i < A->alt_b[k]; i++)
            if (e[i].type == CST_RULE) occ[occ_n[e[i].v] + fill[e[i].v]++] = k;
    }
    free(fill);
    memset(prop, 0, (size_t)R);
    int32_t qh = 0, qt = 0;
    for (int32_t k = 0; k < N; k++)
        if (need[k] == 0 && !prop[A->alt_rule[k]]) { prop[A->alt_rule[k]] = 1; queue[qt++] = A->alt_rule[k]; }
    while (qh < qt) {
        int32_t s = queue[qh++];
        for (int32_t j = occ_n[s]; j < occ_n[s + 1]; j++) {
            int32_t k = occ[j];
            if (--need[k] == 0 && !prop[A->alt_rule[k]]) { prop[A->alt_rule[k]] = 1; queue[qt++] = A->alt_rule[k]; }
        }
    }
    rc = 0;
done:
    free(need);
    free(occ_n);
    free(queue);
    free(occ);
    return rc;
}

/* A rule on a left-recursive cycle (edges r -> s where s starts an alternative of r after
 * nullable elements only), found by an iterative depth-first search; -1 when none, -2 when
 * out of memory. */
static int32_t left_recursion(const gp *p, const gp_alts *A, const uint8_t *nullable) {
    int32_t R = p->n_rules, found = -2;
    int32_t *first = calloc((size_t)R + 1, sizeof *first), *edge = NULL, *stack = NULL, *next = NULL;
    uint8_t *color = calloc((size_t)R, 1);
    if (!first || !color) goto done;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill (CSR) */
        int32_t *at = pass ? calloc((size_t)R, sizeof *at) : NULL;
        if (pass && !at) goto done;
        for (int32_t k = 0; k < A->n_alts; k++) {
            int32_t r = A->alt_rule[k];
            const cst_elem *e = p->r[r].e;
            for (int32_t i = A->alt_a[k]; i < A->alt_b[k] && e[i].type == CST_RULE; i++) {
                if (pass) edge[first[r] + at[r]++] = e[i].v;
                else first[r + 1]++;
                if (!nullable[e[i].v]) break;
            }
        }
        if (pass) free(at);
        else {
            for (int32_t r = 0; r < R; r++) first[r + 1] += first[r];
            edge = malloc((size_t)(first[R] ? first[R] : 1) * sizeof *edge);
            if (!edge) goto done;
        }
    }
    stack = malloc((size_t)R * sizeof *stack);
    next = malloc((size_t)R * sizeof *next);
    if (!stack || !next) goto done;
    found = -1;
    for (int32_t r0 = 0; r0 < R && found < 0; r0++) {
        if (color[r0]) continue;
        int32_t top = 0;
        stack[top++] = r0;
        color[r0] = 1;
        next[r0] = first[r0];
        while (top > 0 && found < 0) {
            int32_t cur = stack[top - 1];
            if (next[cur] == first[cur + 1]) { color[cur] = 2; top--; continue; }
            int32_t s = edge[next[cur]++];
            if (color[s] == 1) found = s;
            else if (color[s] == 0) { color[s] = 1; next[s] = first[s]; stack[top++] = s; }
        }
    }
done:
    free(first);
    free(edge);
    free(stack);
    free(next);
    free(color);
    return found;
}

/* The checks of the file comment, then the rules flattened into out. */
static int finish(gp *p, cst_grammar *out) {
    int32_t root = rule_find(p, "root", 4);
    if (root < 0) return plume_fail(p->err, PLUME_EINVAL, "grammar: no rule named \"root\"");
    for (int32_t r = 0; r < p->n_rules; r++)
        if (!p->r[r].defined) {
            int line, col;
            gp_where(p, p->src + p->r[r].used_at, &line, &col);
            return plume_fail(p->err, PLUME_EINVAL, "grammar: rule \"%s\" is used (line %d) but not defined",
                              p->r[r].name, line);
        }
    gp_alts A = {0};
    size_t R = p->n_rules > 0 ? (size_t)p->n_rules : 1;
    uint8_t *nullable = malloc(R), *productive = malloc(R);
    int rc = 0;
    if (!nullable || !productive || alts_list(p, &A) || solve(p, &A, 0, nullable) || solve(p, &A, 1, productive)) {
        rc = plume_fail(p->err, PLUME_ENOMEM, "grammar: out of memory");
        goto done;
    }
    if (!productive[root]) {
        rc = plume_fail(p->err, PLUME_EINVAL, "grammar: \"root\" derives no finite text (every alternative recurses forever)");
        goto done;
    }
    int32_t c = left_recursion(p, &A, nullable);
    if (c == -2) rc = plume_fail(p->err, PLUME_ENOMEM, "grammar: out of memory");
    else if (c >= 0)
        rc = plume_fail(p->err, PLUME_EINVAL, "grammar: rule \"%s\" is left-recursive (it can reach itself before any text)",
                        p->r[c].name);
    if (rc) goto done;
    /* flatten: every rule's run, alternatives that use an unproductive rule left out */
    int64_t n_elems = 0;
    for (int32_t r = 0; r < p->n_rules; r++) n_elems += p->r[r].n + 1;
    out->elems = malloc((size_t)n_elems * sizeof *out->elems);
    out->alts = malloc((size_t)A.n_alts * sizeof *out->alts);
    out->rule_alts = malloc(((size_t)p->n_rules + 1) * sizeof *out->rule_alts);
    out->names = calloc((size_t)p->n_rules, sizeof *out->names);
    if (!out->elems || !out->alts || !out->rule_alts || !out->names) {
        rc = plume_fail(p->err, PLUME_ENOMEM, "grammar: out of memory");
        goto done;
    }
    int32_t ne = 0, na = 0;
    for (int32_t k = 0, r = -1; k < A.n_alts; k++) {
        if (A.alt_rule[k] != r) { r = A.alt_rule[k]; out->rule_alts[r] = na; }
        const cst_elem *e = p->r[r].e;
        int ok = 1;
        for (int32_t i = A.alt_a[k]; i < A.alt_b[k] && ok; i++) ok = e[i].type != CST_RULE || productive[e[i].v];
        if (!ok) continue;
        out->alts[na++] = ne;
        if (A.alt_b[k] > A.alt_a[k]) memcpy(out->elems + ne, e + A.alt_a[k], (size_t)(A.alt_b[k] - A.alt_a[k]) * sizeof *e);
        ne += A.alt_b[k] - A.alt_a[k];
        out->elems[ne++] = (cst_elem){CST_END, 0};
    }
    for (int32_t r = 0; r < p->n_rules; r++) {
        out->names[r] = p->r[r].name;
        p->r[r].name = NULL;
    }
    out->rule_alts[p->n_rules] = na;
    out->n_elems = ne;
    out->n_rules = p->n_rules;
    out->root = root;
    out->sets = p->sets;
    out->n_sets = p->n_sets;
    p->sets = NULL;
    out->tok_text = p->tok_text;
    out->tok_id = p->tok_id;
    out->n_toks = p->n_toks;
    p->tok_text = NULL;
    p->tok_id = NULL;
done:
    free(A.alt_rule);
    free(A.alt_a);
    free(A.alt_b);
    free(nullable);
    free(productive);
    return rc;
}

/* Free the parser's buffers (what finish() did not move into the grammar). */
static void gp_free(gp *g) {
    for (int32_t r = 0; r < g->n_rules; r++) {
        free(g->r[r].name);
        free(g->r[r].e);
    }
    free(g->r);
    free(g->ht);
    free(g->sets);
    for (int32_t i = 0; g->tok_text && i < g->n_toks; i++) free(g->tok_text[i]);
    free(g->tok_text);
    free(g->tok_id);
}

/* ---- public within the room -------------------------------------------------------------- */

/* Parse GBNF text into *out (zeroed first). */
int cst_grammar_parse(cst_grammar *out, const char *text, size_t len, char **err) {
    memset(out, 0, sizeof *out);
    if (!text && len) return plume_fail(err, PLUME_EINVAL, "grammar: text is NULL");
    gp g;
    memset(&g, 0, sizeof g);
    g.src = g.p = text ? text : "";
    g.end = g.src + len;
    g.err = err;
    skip_space(&g, 1);
    while (!g.rc && g.p < g.end) parse_rule(&g);
    int rc = g.rc ? g.rc : finish(&g, out);
    gp_free(&g);
    if (rc) cst_grammar_free(out);
    return rc;
}

/* Make the array *pp, which holds `have` items of `size` bytes and no spare room, hold at
 * least need (plume_grow from a capacity of have); 0 or PLUME_ENOMEM. */
static int grow_exact(void *pp, size_t have, size_t need, size_t size) {
    size_t cap = have;
    return plume_grow(pp, &cap, need, size);
}

/* Grow g's arrays for the wrapper's extra_rules rules and n_end end tokens (worst case). */
static int wrap_grow(cst_grammar *g, int32_t extra_rules, int32_t n_end, char **err) {
    size_t R = (size_t)g->n_rules, T = (size_t)g->n_toks, n_tok_new = (size_t)n_end + 2;
    /* worst-case sizes */
    size_t add_elems = 8 + 2 * (size_t)n_end + 16, add_alts = (size_t)n_end + 8, X = (size_t)extra_rules;
    if (grow_exact(&g->elems, (size_t)g->n_elems, (size_t)g->n_elems + add_elems, sizeof *g->elems) ||
        grow_exact(&g->alts, (size_t)g->rule_alts[R], (size_t)g->rule_alts[R] + add_alts, sizeof *g->alts) ||
        grow_exact(&g->rule_alts, R + 1, R + X + 1, sizeof *g->rule_alts) ||
        grow_exact(&g->names, R, R + X, sizeof *g->names) ||
        grow_exact(&g->tok_text, T, T + n_tok_new, sizeof *g->tok_text) ||
        grow_exact(&g->tok_id, T, T + n_tok_new, sizeof *g->tok_id) ||
        grow_exact(&g->sets, (size_t)g->n_sets, (size_t)g->n_sets + 8, sizeof *g->sets))
        return plume_fail(err, PLUME_ENOMEM, "grammar: out of memory");
    return 0;
}

/* Name the wrapper's extra_rules new rules, from index R ("plume root", "plume end", ...). */
static int wrap_names(cst_grammar *g, int32_t R, int32_t extra_rules, char **err) {
    static const char *const rule_names[4] = {"plume root", "plume end", "plume thought", "plume text"};
    for (int32_t i = 0; i < extra_rules; i++) {
        g->names[R + i] = strdup(rule_names[i]);
        if (!g->names[R + i]) {
            for (int32_t k = 0; k < i; k++) free(g->names[R + k]);
            return plume_fail(err, PLUME_ENOMEM, "grammar: out of memory");
        }
    }
    return 0;
}

/* Add the wrapper's token references: the n_end end tokens from *end_tok0, then (thinking)
 * <|channel> at *open_tok and <channel|> at *close_tok. */
static int wrap_tokens(cst_grammar *g, int32_t thinking, const char *const *end, int32_t n_end, int32_t *end_tok0,
                       int32_t *open_tok, int32_t *close_tok, char **err) {
    *end_tok0 = g->n_toks;
    for (int32_t i = 0; i < n_end; i++) {
        g->tok_text[g->n_toks] = strdup(end[i]);
        g->tok_id[g->n_toks++] = -1;
        if (!g->tok_text[g->n_toks - 1]) return plume_fail(err, PLUME_ENOMEM, "grammar: out of memory");
    }
    if (thinking) {
        *open_tok = g->n_toks;
        g->tok_text[g->n_toks] = strdup("<|channel>");
        g->tok_id[g->n_toks++] = -1;
        *close_tok = g->n_toks;
        g->tok_text[g->n_toks] = strdup("<channel|>");
        g->tok_id[g->n_toks++] = -1;
        if (!g->tok_text[*open_tok] || !g->tok_text[*close_tok]) return plume_fail(err, PLUME_ENOMEM, "grammar: out of memory");
    }
    return 0;
}

/* The thought's rules at R + 2 and R + 3, elements from *ne and alternatives from *na. */
static void wrap_thought_rules(cst_grammar *g, int32_t R, int32_t open_tok, int32_t close_tok, int32_t *ne_io,
                               int32_t *na_io) {
    int32_t ne = *ne_io, na = *na_io;
    /* plume thought ::= <|channel> text <channel|> */
    g->rule_alts[R + 2] = na;
    g->alts[na++] = ne;
    g->elems[ne++] = (cst_elem){CST_TOKEN, open_tok};
    g->elems[ne++] = (cst_elem){CST_RULE, R + 3};
    g->elems[ne++] = (cst_elem){CST_TOKEN, close_tok};
    g->elems[ne++] = (cst_elem){CST_END, 0};
    /* plume text ::= any-byte text | ""  (bytes, not characters: the thought is free; a
     * byte-level loop also keeps the walk cheap) */
    uint64_t all[4] = {~0ull, ~0ull, ~0ull, ~0ull};
    memcpy(g->sets[g->n_sets], all, sizeof all);
    int32_t text_tok = g->n_sets++;
    g->rule_alts[R + 3] = na;
    g->alts[na++] = ne;
    g->elems[ne++] = (cst_elem){CST_BYTES, text_tok};
    g->elems[ne++] = (cst_elem){CST_RULE, R + 3};
    g->elems[ne++] = (cst_elem){CST_END, 0};
    g->alts[na++] = ne;
    g->elems[ne++] = (cst_elem){CST_END, 0};
    *ne_io = ne;
    *na_io = na;
}

/* Append the rules of the generation wrapper (cst_grammar_wrap) by reparsing nothing: they are built
 * as elements directly, under names GBNF text cannot spell (they contain a space). */
int cst_grammar_wrap(cst_grammar *g, int32_t thinking, const char *const *end, int32_t n_end, char **err) {
    /* New rules: 0 "plume root", 1 "plume end", 2 "plume thought" (when thinking), 3 its text
     * loop "plume text". Elements appended after the existing ones. */
    int32_t extra_rules = thinking ? 4 : 2;
    int32_t R = g->n_rules;
    int32_t end_tok0 = 0, open_tok = -1, close_tok = -1;
    int rc = wrap_grow(g, extra_rules, n_end, err);
    if (!rc) rc = wrap_names(g, R, extra_rules, err);
    if (!rc) rc = wrap_tokens(g, thinking, end, n_end, &end_tok0, &open_tok, &close_tok, err);
    if (rc) return rc;
    int32_t ne = g->n_elems, na = g->rule_alts[R];
    /* plume root ::= [thought | text <channel|>] root end   (thinking 1 | 2) */
    g->rule_alts[R] = na;
    if (thinking == 1) { /* two alternatives: with and without the thought */
        g->alts[na++] = ne;
        g->elems[ne++] = (cst_elem){CST_RULE, R + 2};
        g->elems[ne++] = (cst_elem){CST_RULE, g->root};
        g->elems[ne++] = (cst_elem){CST_RULE, R + 1};
        g->elems[ne++] = (cst_elem){CST_END, 0};
    }
    g->alts[na++] = ne;
    if (thinking == 2) {
        g->elems[ne++] = (cst_elem){CST_RULE, R + 3};
        g->elems[ne++] = (cst_elem){CST_TOKEN, close_tok};
    }
    g->elems[ne++] = (cst_elem){CST_RULE, g->root};
    g->elems[ne++] = (cst_elem){CST_RULE, R + 1};
    g->elems[ne++] = (cst_elem){CST_END, 0};
    /* plume end ::= <end 0> | <end 1> | ... */
    g->rule_alts[R + 1] = na;
    for (int32_t i = 0; i < n_end; i++) {
        g->alts[na++] = ne;
        g->elems[ne++] = (cst_elem){CST_TOKEN, end_tok0 + i};
        g->elems[ne++] = (cst_elem){CST_END, 0};
    }
    if (thinking) wrap_thought_rules(g, R, open_tok, close_tok, &ne, &na);
    g->rule_alts[R + extra_rules] = na;
    g->n_elems = ne;
    g->n_rules = R + extra_rules;
    g->root = R;
    return 0;
}

/* Resolve the token references (cst_grammar_bind). */
int cst_grammar_bind(cst_grammar *g, const plume_tokenizer *tok, char **err) {
    int32_t V = plume_tokenizer_n_vocab(tok);
    for (int32_t i = 0; i < g->n_toks; i++) {
        if (!g->tok_text[i]) {
            if (g->tok_id[i] < 0 || g->tok_id[i] >= V)
                return plume_fail(err, PLUME_EINVAL, "grammar: token <[%d]> is outside the vocabulary of %d", g->tok_id[i], V);
            continue;
        }
        const char *t = g->tok_text[i];
        int32_t id[2];
        int32_t n = plume_tokenize(tok, t, strlen(t), id, 2);
        if (n != 1)
            return plume_fail(err, PLUME_EINVAL, "grammar: token reference %s is not one token of this vocabulary", t);
        g->tok_id[i] = id[0];
    }
    return 0;
}

/* Free what cst_grammar_parse made; the struct is zeroed. */
void cst_grammar_free(cst_grammar *g) {
    if (!g) return;
    for (int32_t r = 0; g->names && r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alts);
    free(g->rule_alts);
    free(g->sets);
    for (int32_t i = 0; g->tok_text && i < g->n_toks; i++) free(g->tok_text[i]);
    free(g->tok_text);
    free(g->tok_id);
    memset(g, 0, sizeof *g);
}
