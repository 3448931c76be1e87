/* chat_pystr.c -- Python's str() and repr() of the values json.loads() makes, which is what
 * the template's {{ x }} prints; and `| upper`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

/* Append a JSON number as Python prints the int or float json.loads() makes of it: integer
 * literals as written ("-0" is 0), others as repr(float): the shortest digits that round-trip,
 * fixed notation for exponents -4..15, else d.ddde+XX; "inf" beyond the double range. */
void chat_put_pynum(plume_buf *b, const char *lit) {
    if (!strpbrk(lit, ".eE")) {
        plume_buf_puts(b, strcmp(lit, "-0") ? lit : "0");
        return;
    }
    double x = strtod(lit, NULL);
    if (x != x || x - x != 0) { plume_buf_puts(b, x < 0 ? "-inf" : "inf"); return; }
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]d[.ddd]e(+|-)XX: digits and the decimal exponent */
    const char *p = e;
    if (*p == '-') { plume_buf_put(b, "-", 1); p++; }
    char digits[24];
    size_t nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp10 = atoi(p + 1), decpt = exp10 + 1;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            plume_buf_puts(b, "0.");
            for (int k = 0; k < -decpt; k++) plume_buf_put(b, "0", 1);
            plume_buf_put(b, digits, nd);
        } else if ((size_t)decpt >= nd) {
            plume_buf_put(b, digits, nd);
            for (size_t k = nd; k < (size_t)decpt; k++) plume_buf_put(b, "0", 1);
            plume_buf_puts(b, ".0");
        } else {
            plume_buf_put(b, digits, (size_t)decpt);
            plume_buf_put(b, ".", 1);
            plume_buf_put(b, digits + decpt, nd - (size_t)decpt);
        }
    } else {
        char ex[16];
        plume_buf_put(b, digits, 1);
        if (nd > 1) { plume_buf_put(b, ".", 1); plume_buf_put(b, digits + 1, nd - 1); }
        snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        plume_buf_puts(b, ex);
    }
}

/* Append repr(s) for a Python str: single quotes unless s holds ' and no ", backslash escapes
 * for the quote, \\, \t, \n, \r, other C0 and C1 controls, DEL, U+00A0 and U+00AD. (Other
 * non-printable characters that Python escapes are copied: an approximation.) */
static void buf_put_pyrepr_str(plume_buf *b, const char *s, size_t n) {
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    plume_buf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == (unsigned char)q || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; plume_buf_put(b, esc, 2); }
        else if (c == '\t') plume_buf_puts(b, "\\t");
        else if (c == '\n') plume_buf_puts(b, "\\n");
        else if (c == '\r') plume_buf_puts(b, "\\r");
        else if (c < 0x20 || c == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", c); plume_buf_puts(b, esc); }
        else if (c == 0xc2 && i + 1 < n && (((unsigned char)s[i + 1] >= 0x80 &&
                 (unsigned char)s[i + 1] <= 0xa0) || (unsigned char)s[i + 1] == 0xad)) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)s[++i]);
            plume_buf_puts(b, esc);
        } else plume_buf_put(b, (const char *)&c, 1);
    }
    plume_buf_put(b, &q, 1);
}

/* Append str(v) (repr = 0) or repr(v) (repr = 1) of the Python object json.loads() makes:
 * None, True, False, numbers, strings, [a, b], {'k': v}. */
void chat_put_pystr(plume_buf *b, const jv *v, int repr) {
    switch (v->type) {
    case JV_NULL: plume_buf_puts(b, "None"); break;
    case JV_FALSE: plume_buf_puts(b, "False"); break;
    case JV_TRUE: plume_buf_puts(b, "True"); break;
    case JV_NUM: chat_put_pynum(b, v->s); break;
    case JV_STR:
        if (repr) buf_put_pyrepr_str(b, v->s, v->len);
        else plume_buf_put(b, v->s, v->len);
        break;
    case JV_ARR:
    case JV_OBJ:
        plume_buf_put(b, v->type == JV_ARR ? "[" : "{", 1);
        for (int32_t i = 0; i < v->n; i++) {
            if (i) plume_buf_puts(b, ", ");
            if (v->type == JV_OBJ) {
                chat_put_pystr(b, &v->keys[i], 1);
                plume_buf_puts(b, ": ");
            }
            chat_put_pystr(b, &v->items[i], 1);
        }
        plume_buf_put(b, v->type == JV_ARR ? "]" : "}", 1);
        break;
    }
}

/* Append `v | upper`: str(v) with ASCII letters upper-cased (Jinja's upper is Python's
 * str.upper(), which also folds non-ASCII letters: an approximation). Missing v gives "". */
void chat_put_pyupper(plume_buf *b, const jv *v) {
    if (!v) return;
    size_t at = b->len;
    chat_put_pystr(b, v, 0);
    if (b->oom) return;
    for (size_t i = at; i < b->len; i++)
        if (b->p[i] >= 'a' && b->p[i] <= 'z') b->p[i] = (char)(b->p[i] - 32);
}

/* Whether `v | upper` equals word (all upper case ASCII). */
int chat_jv_upper_is(const jv *v, const char *word) {
    if (!v || v->type != JV_STR || v->len != strlen(word)) return 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->s[i];
        if (c >= 'a' && c <= 'z') c = (char)(c - 32);
        if (c != word[i]) return 0;
    }
    return 1;
}
