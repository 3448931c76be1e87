/* gbuf.c -- what the grammar's parser and its compilers share: a growing text buffer, the GBNF
 * spelling of literals and class members, and sets of code points. Knows no grammar semantics. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain.h"

/* Append n bytes (nothing after an allocation failure); keeps b->p NUL-terminated. */
void gb_put(gbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > ((size_t)-1) / 2) { b->oom = 1; return; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* Append a NUL-terminated string. */
void gb_puts(gbuf *b, const char *s) { gb_put(b, s, strlen(s)); }

/* Append formatted text. */
void gb_printf(gbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof small) { gb_put(b, small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gb_put(b, big, (size_t)n);
    free(big);
}

/* A GBNF string literal: code points as they are, except " \ and ASCII controls, escaped.
 * (In GBNF \xHH is the code point U+00HH, so bytes >= 0x80 stay raw UTF-8.) */
void gb_literal(gbuf *b, const char *s, size_t n) {
    gb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; gb_put(b, e, 2); }
        else if (c == '\n') gb_puts(b, "\\n");
        else if (c == '\r') gb_puts(b, "\\r");
        else if (c == '\t') gb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) gb_printf(b, "\\x%02X", c);
        else gb_put(b, (const char *)&c, 1);
    }
    gb_put(b, "\"", 1);
}

/* One code point inside [...]: ASCII letters and digits as they are, everything else as
 * \xHH, \uHHHH or \UHHHHHHHH (so ] ^ - \ never need thought). */
void gb_class_cp(gbuf *b, uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        gb_printf(b, "%c", (char)cp);
    else if (cp < 0x100) gb_printf(b, "\\x%02X", cp);
    else if (cp < 0x10000) gb_printf(b, "\\u%04X", cp);
    else gb_printf(b, "\\U%08X", cp);
}

/* ---- sets of code points ----------------------------------------------------------------- */

/* Add [lo, hi] (unsorted; cp_norm sorts and merges). */
void cps_add(cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->oom) return;
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 16;
        uint32_t(*r)[2] = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) { s->oom = 1; return; }
        s->r = r;
        s->cap = cap;
    }
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
void cps_norm(cp_set *s) {
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
            cps_add(s, 0xe000, hi);
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
void cps_negate(cp_set *s) {
    cp_set t = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) cps_add(&t, next, s->r[i][0] - 1);
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10ffff) cps_add(&t, next, 0x10ffff);
    cps_free(s);
    *s = t;
    cps_norm(s);
}

/* Free the ranges; the set is empty again. */
void cps_free(cp_set *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}
