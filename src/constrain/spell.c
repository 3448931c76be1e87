/* spell.c -- what the grammar's parser and its compilers share: the GBNF spelling of literals
 * and class members (appended to a plume_buf), sets of code points, and one character of a
 * set in a dialect's spelling (JSON strings, Gemma call strings: schema_str.c, regex.c).
 * Knows no grammar semantics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain.h"

/* A GBNF string literal: code points as they are, except " \ and ASCII controls, escaped.
 * (In GBNF \xHH is the code point U+00HH, so bytes >= 0x80 stay raw UTF-8.) */
void cst_buf_literal(plume_buf *b, const char *s, size_t n) {
    plume_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; plume_buf_put(b, e, 2); }
        else if (c == '\n') plume_buf_puts(b, "\\n");
        else if (c == '\r') plume_buf_puts(b, "\\r");
        else if (c == '\t') plume_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) plume_buf_printf(b, "\\x%02X", c);
        else plume_buf_put(b, (const char *)&c, 1);
    }
    plume_buf_put(b, "\"", 1);
}

/* One code point inside [...]: ASCII letters and digits as they are, everything else as
 * \xHH, \uHHHH or \UHHHHHHHH (so ] ^ - \ never need thought). */
void cst_buf_class_cp(plume_buf *b, uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        plume_buf_printf(b, "%c", (char)cp);
    else if (cp < 0x100) plume_buf_printf(b, "\\x%02X", cp);
    else if (cp < 0x10000) plume_buf_printf(b, "\\u%04X", cp);
    else plume_buf_printf(b, "\\U%08X", cp);
}

/* ---- sets of code points ----------------------------------------------------------------- */

/* Add [lo, hi] (unsorted; cp_norm sorts and merges). */
void cst_cpset_add(cst_cpset *s, uint32_t lo, uint32_t hi) {
    if (s->oom) return;
    if (plume_grow(&s->r, &s->cap, (size_t)s->n + 1, sizeof *s->r)) { s->oom = 1; return; }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
}

/* Order ranges by their start. */
static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sort, merge, and drop the surrogates (they have no UTF-8 spelling). */
void cst_cpset_norm(cst_cpset *s) {
    if (s->oom || s->n == 0) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int32_t m = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (m && s->r[i][0] <= s->r[m - 1][1] + 1) {
            if (s->r[i][1] > s->r[m - 1][1]) s->r[m - 1][1] = s->r[i][1];
        } else {
            s->r[m][0] = s->r[i][0];
            s->r[m][1] = s->r[i][1];
            m++;
        }
    }
    s->n = m;
    for (int32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        if (hi < 0xd800 || lo > 0xdfff) continue;
        if (lo < 0xd800 && hi > 0xdfff) { /* split in two: the tail goes at the end, then re-sort */
            s->r[i][1] = 0xd7ff;
            cst_cpset_add(s, 0xe000, hi);
            if (!s->oom) qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
            return;
        }
        if (lo < 0xd800) s->r[i][1] = 0xd7ff;
        else if (hi > 0xdfff) s->r[i][0] = 0xe000;
        else { /* wholly inside: remove it */
            memmove(s->r + i, s->r + i + 1, (size_t)(s->n - i - 1) * sizeof *s->r);
            s->n--;
            i--;
        }
    }
}

/* The complement within [0, 0x10FFFF] of a normalized set, normalized. */
void cst_cpset_negate(cst_cpset *s) {
    cst_cpset t = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) cst_cpset_add(&t, next, s->r[i][0] - 1);
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10ffff) cst_cpset_add(&t, next, 0x10ffff);
    cst_cpset_free(s);
    *s = t;
    cst_cpset_norm(s);
}

/* Free the ranges; the set is empty again. */
void cst_cpset_free(cst_cpset *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

/* ---- one character of a set, spelled in a dialect ----------------------------------------- */

/* Whether a normalized set holds cp. */
static int cpset_has(const cst_cpset *s, uint32_t cp) {
    for (int32_t i = 0; i < s->n; i++)
        if (cp >= s->r[i][0] && cp <= s->r[i][1]) return 1;
    return 0;
}

/* Append one range to a class body under construction. */
static void class_range(plume_buf *t, uint32_t a, uint32_t z) {
    cst_buf_class_cp(t, a);
    if (z > a) { plume_buf_puts(t, "-"); cst_buf_class_cp(t, z); }
}

/* Append a class [..] of the set's members within [lo, hi], minus the ASCII characters of
 * `except`; returns whether it had any member. */
static int put_class_within(plume_buf *b, const cst_cpset *s, uint32_t lo, uint32_t hi, const char *except) {
    plume_buf t = {0};
    int any = 0;
    for (int32_t i = 0; i < s->n; i++) {
        uint32_t a = s->r[i][0] > lo ? s->r[i][0] : lo, z = s->r[i][1] < hi ? s->r[i][1] : hi;
        while (a <= z) { /* up to the next excepted character in [a, z] */
            uint32_t cut = z + 1;
            for (const char *e = except; *e; e++)
                if ((uint32_t)(unsigned char)*e >= a && (uint32_t)(unsigned char)*e < cut) cut = (unsigned char)*e;
            if (cut > a) { class_range(&t, a, cut - 1); any = 1; }
            a = cut + 1;
        }
    }
    if (any) { plume_buf_puts(b, "["); plume_buf_put(b, t.p, t.len); plume_buf_puts(b, "] "); }
    if (t.oom) b->oom = 1;
    free(t.p);
    return any;
}

/* One character of the set in the dialect's spelling, as one group; 0, or -1 when the
 * dialect cannot spell any member. */
int cst_char_expr(plume_buf *b, const cst_cpset *s, int dialect) {
    plume_buf t = {0};
    int alts = 0;
    if (dialect == CST_GEMMA) { /* raw, no '<'; of the controls only tab, newline, return */
        alts += put_class_within(&t, s, 0x20, 0x10ffff, "<");
        static const char ws[3] = {'\t', '\n', '\r'};
        for (int i = 0; i < 3; i++)
            if (cpset_has(s, (uint32_t)ws[i])) {
                if (alts++) plume_buf_puts(&t, "| ");
                cst_buf_literal(&t, &ws[i], 1);
                plume_buf_puts(&t, " ");
            }
    } else {
        alts += put_class_within(&t, s, 0x20, 0x10ffff, "\"\\");
        static const struct { uint32_t cp; const char *esc; } short_esc[] = {
            {'"', "\\\""}, {'\\', "\\\\"}, {8, "\\b"}, {9, "\\t"}, {10, "\\n"}, {12, "\\f"}, {13, "\\r"}};
        for (size_t i = 0; i < sizeof short_esc / sizeof *short_esc; i++)
            if (cpset_has(s, short_esc[i].cp)) {
                if (alts++) plume_buf_puts(&t, "| ");
                cst_buf_literal(&t, short_esc[i].esc, 2);
                plume_buf_puts(&t, " ");
            }
        for (uint32_t c = 0; c < 0x20; c++)
            if (cpset_has(s, c) && c != 8 && c != 9 && c != 10 && c != 12 && c != 13) {
                char e[8];
                snprintf(e, sizeof e, "\\u%04x", c);
                if (alts++) plume_buf_puts(&t, "| ");
                cst_buf_literal(&t, e, 6);
                plume_buf_puts(&t, " ");
            }
    }
    if (alts) { plume_buf_puts(b, "( "); plume_buf_put(b, t.p, t.len); plume_buf_puts(b, ") "); }
    if (t.oom) b->oom = 1;
    free(t.p);
    return alts ? 0 : -1;
}
