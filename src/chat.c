/* chat.c -- messages -> prompt text, and the stop-string matcher (docs/CHAT.md).
 *
 * plume_chat_render_ex() is Google's E2B chat template (spec/gemma4-e2b-chat-template.jinja)
 * written out in C, without a Jinja engine: system turn, thinking flag, tool declarations
 * (format_function_declaration / format_parameters), tool calls and responses in Gemma 4's own
 * syntax (format_argument), reasoning_content, content parts, and the template's turn
 * continuation rules. The template walks the Python objects json.loads() makes of the tools
 * and arguments, so this file carries a small JSON reader that keeps what Python keeps (member
 * order, number literals) and prints values as Python's str() would. Knows nothing of tokens:
 * it makes text, which the tokenizer then encodes with no auto-BOS (the text starts with the
 * literal "<bos>"). The way back, generated text -> content, thought, tool calls, is
 * chat_parse.c.
 *
 * The stop matcher (chat.h) lets generation hold back text that may be the start of a user
 * stop string. */
#include "chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

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
static void buf_put_trimmed(plume_buf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t k;
    while ((k = chat_space_len(p, n)) > 0) { p += k; n -= k; }
    while ((k = chat_space_len_back(p, n)) > 0) n -= k;
    plume_buf_put(b, (const char *)p, n);
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
static void buf_put_model_content(plume_buf *b, const char *s) {
    static const char open[] = "<|channel>", close[] = "<channel|>";
    const size_t olen = sizeof open - 1, clen = sizeof close - 1;
    plume_buf joined = {0};
    size_t n = strlen(s);
    const char *part = s, *end = s + n;
    for (;;) {
        const char *sep = chat_find(part, (size_t)(end - part), close, clen);
        const char *part_end = sep ? sep : end;
        const char *th = chat_find(part, (size_t)(part_end - part), open, olen);
        plume_buf_put(&joined, part, (size_t)((th ? th : part_end) - part));
        if (!sep) break;
        part = sep + clen;
    }
    if (joined.oom) b->oom = 1;
    else buf_put_trimmed(b, joined.p ? joined.p : "", joined.len);
    free(joined.p);
}

/* ---- JSON values: tools_json and tool-call arguments ------------------------------------- */

/* The template walks Python objects that json.loads() made, so this keeps what Python keeps:
 * member order (with a repeated key, the last value at the first key's place), numbers as
 * their literal text (so 18 and 18.0 stay apart), strings decoded. The text is untrusted:
 * depth and object size are bounded, every error names the byte offset. */

enum { JV_NULL, JV_FALSE, JV_TRUE, JV_NUM, JV_STR, JV_ARR, JV_OBJ };

#define JSON_MAX_DEPTH 64      /* nesting, so that recursion stays shallow */
#define JSON_MAX_MEMBERS 4096  /* per object: a repeated key is found by a linear scan */

/* One JSON value. */
typedef struct jv {
    int32_t type;      /* JV_* */
    char *s;           /* JV_STR: decoded bytes, JV_NUM: the literal; NUL-terminated */
    size_t len;        /* bytes in s (no NUL inside: \u0000 is refused) */
    struct jv *items;  /* JV_ARR, JV_OBJ: [n] values (room for cap_items) */
    struct jv *keys;   /* JV_OBJ: [n] JV_STR keys, parallel to items (room for cap_keys) */
    int32_t n;
    size_t cap_items, cap_keys;
} jv;

/* A parse in progress over text[0, end). */
typedef struct {
    const char *text, *p, *end;
    const char *what; /* "tools_json", "message 2: tool call 0 arguments" */
    int rc;           /* first failure, or 0 */
    char **err;
} jparse;

/* Free what v owns (v itself is the caller's). */
static void jv_free(jv *v) {
    if (!v) return;
    for (int32_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) jv_free(&v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->s);
    memset(v, 0, sizeof *v);
}

/* Record a syntax error at the cursor (the first one wins); returns -1. */
static int jp_fail(jparse *j, const char *why) {
    if (!j->rc)
        j->rc = plume_fail(j->err, PLUME_EINVAL, "chat: %s: invalid JSON at offset %zu: %s",
                           j->what, (size_t)(j->p - j->text), why);
    return -1;
}

/* Record an allocation failure; returns -1. */
static int jp_oom(jparse *j) {
    if (!j->rc) j->rc = plume_fail(j->err, PLUME_ENOMEM, "chat: %s: out of memory", j->what);
    return -1;
}

/* Skip JSON whitespace. */
static void jp_ws(jparse *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* Four hex digits at the cursor -> their value, or -1. */
static int32_t jp_hex4(jparse *j) {
    if (j->end - j->p < 4) return -1;
    int32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = j->p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    j->p += 4;
    return v;
}

/* Append code point cp as UTF-8. */
static void buf_put_utf8(plume_buf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xc0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3f)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f)); n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[3] = (char)(0x80 | (cp & 0x3f)); n = 4;
    }
    plume_buf_put(b, u, n);
}

/* A string at the cursor (just past its opening quote) -> v. */
static int jp_string(jparse *j, jv *v) {
    plume_buf b = {0};
    plume_buf_put(&b, "", 0);
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) { free(b.p); return jp_fail(j, "control character in a string"); }
        if (c != '\\') { plume_buf_put(&b, j->p++, 1); continue; }
        if (++j->p == j->end) break;
        char e = *j->p++;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *esc = e ? strchr(from, e) : NULL;
        if (esc) { plume_buf_put(&b, &to[esc - from], 1); continue; }
        if (e != 'u') { j->p--; free(b.p); return jp_fail(j, "bad escape"); }
        int32_t cp = jp_hex4(j);
        if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
            j->p[1] == 'u') {
            j->p += 2;
            int32_t lo = jp_hex4(j);
            if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            else cp = -2;
        }
        if (cp <= 0 || (cp >= 0xd800 && cp < 0xe000)) {
            free(b.p);
            return jp_fail(j, cp == -1 ? "bad \\u escape" : cp == 0 ? "\\u0000 (the prompt is a C string)"
                                                          : "unpaired UTF-16 surrogate");
        }
        buf_put_utf8(&b, (uint32_t)cp);
    }
    if (j->p == j->end) { free(b.p); return jp_fail(j, "unterminated string"); }
    j->p++;
    if (b.oom) { free(b.p); return jp_oom(j); }
    v->type = JV_STR;
    v->s = b.p;
    v->len = b.len;
    return 0;
}

/* A number literal at the cursor -> v (its text kept). */
static int jp_number(jparse *j, jv *v) {
    const char *s = j->p, *q = s;
    if (q < j->end && *q == '-') q++;
    if (q < j->end && *q == '0') q++;
    else if (q < j->end && *q >= '1' && *q <= '9') while (q < j->end && *q >= '0' && *q <= '9') q++;
    else { j->p = q; return jp_fail(j, "expected a value"); }
    if (q < j->end && *q == '.') {
        if (++q == j->end || *q < '0' || *q > '9') { j->p = q; return jp_fail(j, "bad number"); }
        while (q < j->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < j->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < j->end && (*q == '+' || *q == '-')) q++;
        if (q == j->end || *q < '0' || *q > '9') { j->p = q; return jp_fail(j, "bad number"); }
        while (q < j->end && *q >= '0' && *q <= '9') q++;
    }
    v->type = JV_NUM;
    v->len = (size_t)(q - s);
    v->s = malloc(v->len + 1);
    if (!v->s) return jp_oom(j);
    memcpy(v->s, s, v->len);
    v->s[v->len] = 0;
    j->p = q;
    return 0;
}

/* Make room for one more item (and key) in an array or object. */
static int jv_grow(jparse *j, jv *v) {
    size_t need = (size_t)v->n + 1;
    if (plume_grow(&v->items, &v->cap_items, need, sizeof *v->items) ||
        (v->type == JV_OBJ && plume_grow(&v->keys, &v->cap_keys, need, sizeof *v->keys)))
        return jp_oom(j);
    return 0;
}

static int jp_value(jparse *j, jv *v, int depth);

/* The members of an object, the cursor just past '{'. A repeated key replaces the value in
 * place, as a Python dict does. */
static int jp_object(jparse *j, jv *v, int depth) {
    v->type = JV_OBJ;
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') { j->p++; return 0; }
    for (;;) {
        jv key = {0}, val = {0};
        jp_ws(j);
        if (j->p == j->end || *j->p != '"') return jp_fail(j, "expected a string key");
        j->p++;
        if (jp_string(j, &key)) return -1;
        jp_ws(j);
        if (j->p == j->end || *j->p != ':') { jv_free(&key); return jp_fail(j, "expected ':'"); }
        j->p++;
        if (jp_value(j, &val, depth + 1)) { jv_free(&key); jv_free(&val); return -1; }
        int32_t at = -1;
        for (int32_t i = 0; i < v->n && at < 0; i++)
            if (v->keys[i].len == key.len && !memcmp(v->keys[i].s, key.s, key.len)) at = i;
        if (at >= 0) {
            jv_free(&key);
            jv_free(&v->items[at]);
            v->items[at] = val;
        } else if (v->n >= JSON_MAX_MEMBERS || jv_grow(j, v)) {
            jv_free(&key);
            jv_free(&val);
            return v->n >= JSON_MAX_MEMBERS ? jp_fail(j, "more than 4096 members") : -1;
        } else {
            v->keys[v->n] = key;
            v->items[v->n++] = val;
        }
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == '}') { j->p++; return 0; }
        return jp_fail(j, "expected ',' or '}'");
    }
}

/* The items of an array, the cursor just past '['. */
static int jp_array(jparse *j, jv *v, int depth) {
    v->type = JV_ARR;
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') { j->p++; return 0; }
    for (;;) {
        if (jv_grow(j, v)) return -1;
        memset(&v->items[v->n], 0, sizeof v->items[v->n]);
        v->n++;
        if (jp_value(j, &v->items[v->n - 1], depth + 1)) return -1;
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == ']') { j->p++; return 0; }
        return jp_fail(j, "expected ',' or ']'");
    }
}

/* Any value at the cursor -> v. On failure v may hold a partial tree (jv_free it). */
static int jp_value(jparse *j, jv *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > JSON_MAX_DEPTH) return jp_fail(j, "nested too deep");
    jp_ws(j);
    if (j->p == j->end) return jp_fail(j, "expected a value");
    static const struct { const char *word; int32_t type; } words[] = {
        {"null", JV_NULL}, {"false", JV_FALSE}, {"true", JV_TRUE}};
    for (size_t k = 0; k < 3; k++) {
        size_t wl = strlen(words[k].word);
        if ((size_t)(j->end - j->p) >= wl && !memcmp(j->p, words[k].word, wl)) {
            j->p += wl;
            v->type = words[k].type;
            return 0;
        }
    }
    char c = *j->p;
    if (c == '"') { j->p++; return jp_string(j, v); }
    if (c == '{') { j->p++; return jp_object(j, v, depth); }
    if (c == '[') { j->p++; return jp_array(j, v, depth); }
    return jp_number(j, v);
}

/* Parse a whole JSON text (nothing but whitespace after the value). 0, PLUME_EINVAL with the
 * offset, or PLUME_ENOMEM; v is empty on failure. */
static int jv_parse(jv *v, const char *text, const char *what, char **err) {
    jparse j = {text, text, text + strlen(text), what, 0, err};
    if (jp_value(&j, v, 0) == 0) {
        jp_ws(&j);
        if (j.p != j.end) jp_fail(&j, "text after the value");
    }
    if (j.rc) jv_free(v);
    return j.rc;
}

/* Member `key` of an object, or NULL (missing, or v is not an object: what Jinja's v['key']
 * gives for a non-mapping is undefined too). */
static const jv *jv_get(const jv *v, const char *key) {
    if (!v || v->type != JV_OBJ) return NULL;
    size_t kl = strlen(key);
    for (int32_t i = 0; i < v->n; i++)
        if (v->keys[i].len == kl && !memcmp(v->keys[i].s, key, kl)) return &v->items[i];
    return NULL;
}

/* Python truthiness: null, false, 0, "", [] and {} are false (and so is a missing value). */
static int jv_truthy(const jv *v) {
    if (!v) return 0;
    switch (v->type) {
    case JV_NULL: case JV_FALSE: return 0;
    case JV_NUM: return strtod(v->s, NULL) != 0;
    case JV_STR: return v->len > 0;
    case JV_ARR: case JV_OBJ: return v->n > 0;
    default: return 1;
    }
}

/* Jinja's `dictsort`: member indices ordered by key, case-insensitively (ASCII), stable. */
typedef struct { const jv *key; int32_t i; } jv_sort_entry;

/* Compare two keys as Python compares key.lower() (ASCII folding; UTF-8 byte order is code
 * point order), ties by position. */
static int jv_sort_cmp(const void *pa, const void *pb) {
    const jv_sort_entry *a = pa, *b = pb;
    size_t n = a->key->len < b->key->len ? a->key->len : b->key->len;
    for (size_t k = 0; k < n; k++) {
        unsigned char x = (unsigned char)a->key->s[k], y = (unsigned char)b->key->s[k];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y) return x < y ? -1 : 1;
    }
    if (a->key->len != b->key->len) return a->key->len < b->key->len ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* The sorted order of obj's members as a malloc'd [obj->n] index array (NULL if out of
 * memory; an empty object gives a 1-entry allocation). */
static int32_t *jv_dictsort(const jv *obj) {
    jv_sort_entry *e = malloc(((size_t)obj->n + 1) * sizeof *e);
    int32_t *order = malloc(((size_t)obj->n + 1) * sizeof *order);
    if (!e || !order) { free(e); free(order); return NULL; }
    for (int32_t i = 0; i < obj->n; i++) e[i] = (jv_sort_entry){&obj->keys[i], i};
    qsort(e, (size_t)obj->n, sizeof *e, jv_sort_cmp);
    for (int32_t i = 0; i < obj->n; i++) order[i] = e[i].i;
    free(e);
    return order;
}

/* ---- Python's str() of a value, which is what {{ x }} prints ----------------------------- */

/* Append a JSON number as Python prints the int or float json.loads() makes of it: integer
 * literals as written ("-0" is 0), others as repr(float): the shortest digits that round-trip,
 * fixed notation for exponents -4..15, else d.ddde+XX; "inf" beyond the double range. */
static void buf_put_pynum(plume_buf *b, const char *lit) {
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

static void buf_put_pystr(plume_buf *b, const jv *v, int repr);

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
static void buf_put_pystr(plume_buf *b, const jv *v, int repr) {
    switch (v->type) {
    case JV_NULL: plume_buf_puts(b, "None"); break;
    case JV_FALSE: plume_buf_puts(b, "False"); break;
    case JV_TRUE: plume_buf_puts(b, "True"); break;
    case JV_NUM: buf_put_pynum(b, v->s); break;
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
                buf_put_pystr(b, &v->keys[i], 1);
                plume_buf_puts(b, ": ");
            }
            buf_put_pystr(b, &v->items[i], 1);
        }
        plume_buf_put(b, v->type == JV_ARR ? "]" : "}", 1);
        break;
    }
}

/* Append `v | upper`: str(v) with ASCII letters upper-cased (Jinja's upper is Python's
 * str.upper(), which also folds non-ASCII letters: an approximation). Missing v gives "". */
static void buf_put_pyupper(plume_buf *b, const jv *v) {
    if (!v) return;
    size_t at = b->len;
    buf_put_pystr(b, v, 0);
    if (b->oom) return;
    for (size_t i = at; i < b->len; i++)
        if (b->p[i] >= 'a' && b->p[i] <= 'z') b->p[i] = (char)(b->p[i] - 32);
}

/* Whether `v | upper` equals word (all upper case ASCII). */
static int jv_upper_is(const jv *v, const char *word) {
    if (!v || v->type != JV_STR || v->len != strlen(word)) return 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->s[i];
        if (c >= 'a' && c <= 'z') c = (char)(c - 32);
        if (c != word[i]) return 0;
    }
    return 1;
}
/* ---- the template's macros: format_argument, format_parameters, declarations -------------- */

/* A rendering in progress: the text, and the first error (later ones are ignored). */
typedef struct {
    plume_buf b;
    int rc;
    char **err;
} render;

/* Record an invalid-input error (the first one wins). */
static void render_fail(render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void render_fail(render *r, const char *fmt, ...) {
    if (r->rc) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->rc = plume_fail(r->err, PLUME_EINVAL, "chat: %s", msg);
}

/* Append <|"|>s<|"|>, the template's string quote. */
static void buf_put_quoted(plume_buf *b, const char *s, size_t n) {
    plume_buf_puts(b, "<|\"|>");
    plume_buf_put(b, s, n);
    plume_buf_puts(b, "<|\"|>");
}

/* The template's format_argument(v, escape_keys): strings in <|"|>, true/false/null, numbers
 * as Python prints them, objects {k:v} in dictsort order (keys quoted when escape_keys),
 * arrays [a,b]. */
static void put_argument(plume_buf *b, const jv *v, int escape_keys) {
    if (v->type == JV_NULL) plume_buf_puts(b, "null");
    else if (v->type == JV_STR) buf_put_quoted(b, v->s, v->len);
    else if (v->type == JV_TRUE || v->type == JV_FALSE) plume_buf_puts(b, v->type == JV_TRUE ? "true" : "false");
    else if (v->type == JV_NUM) buf_put_pynum(b, v->s);
    else if (v->type == JV_ARR) {
        plume_buf_put(b, "[", 1);
        for (int32_t i = 0; i < v->n; i++) {
            if (i) plume_buf_put(b, ",", 1);
            put_argument(b, &v->items[i], escape_keys);
        }
        plume_buf_put(b, "]", 1);
    } else {
        int32_t *order = jv_dictsort(v);
        if (!order) { b->oom = 1; return; }
        plume_buf_put(b, "{", 1);
        for (int32_t i = 0; i < v->n; i++) {
            const jv *k = &v->keys[order[i]];
            if (i) plume_buf_put(b, ",", 1);
            if (escape_keys) buf_put_quoted(b, k->s, k->len);
            else plume_buf_put(b, k->s, k->len);
            plume_buf_put(b, ":", 1);
            put_argument(b, &v->items[order[i]], escape_keys);
        }
        plume_buf_put(b, "}", 1);
        free(order);
    }
}

/* Python's `for x in v`: an array's items, an object's keys, a string's characters. Returns
 * the count, or -1 if v is not iterable (a number, true, false, null). */
static int32_t jv_iter_count(const jv *v) {
    if (v->type == JV_ARR || v->type == JV_OBJ) return v->n;
    if (v->type != JV_STR) return -1;
    int32_t n = 0;
    for (size_t i = 0; i < v->len; i++) n += ((unsigned char)v->s[i] & 0xc0) != 0x80;
    return n;
}

/* Item i of `for x in v` (i < jv_iter_count(v)); a character is made in *tmp, which then
 * points into v. */
static const jv *jv_iter_item(const jv *v, int32_t i, jv *tmp) {
    if (v->type == JV_ARR) return &v->items[i];
    if (v->type == JV_OBJ) return &v->keys[i];
    size_t at = 0;
    for (int32_t k = 0; k <= i; k++) {
        if (k) at++;
        while (at < v->len && ((unsigned char)v->s[at] & 0xc0) == 0x80) at++;
    }
    size_t end = at + 1;
    while (end < v->len && ((unsigned char)v->s[end] & 0xc0) == 0x80) end++;
    memset(tmp, 0, sizeof *tmp);
    tmp->type = JV_STR;
    tmp->s = v->s + at;
    tmp->len = end - at;
    return tmp;
}

/* The template's list of names, [<|"|>a<|"|>,<|"|>b<|"|>] (str() of each item, upper-cased
 * for a `type` list), over what `for x in v` gives; a value Python cannot iterate is an
 * error, as it is for Jinja. */
static void put_name_list(render *r, const jv *v, int upper, const char *field, const char *where) {
    int32_t n = jv_iter_count(v);
    if (n < 0) {
        render_fail(r, "%s: \"%s\" is not a list", where, field);
        return;
    }
    plume_buf_put(&r->b, "[", 1);
    for (int32_t i = 0; i < n; i++) {
        jv tmp;
        const jv *it = jv_iter_item(v, i, &tmp);
        if (i) plume_buf_put(&r->b, ",", 1);
        plume_buf_puts(&r->b, "<|\"|>");
        if (upper) buf_put_pyupper(&r->b, it);
        else buf_put_pystr(&r->b, it, 0);
        plume_buf_puts(&r->b, "<|\"|>");
    }
    plume_buf_put(&r->b, "]", 1);
}

/* The template's required:[<|"|>a<|"|>,...]. */
static void put_required(render *r, const jv *req, const char *where) {
    plume_buf_puts(&r->b, "required:");
    put_name_list(r, req, 0, "required", where);
}

/* The separator logic the template repeats before each field: a comma from the second field
 * of a property on. */
static void put_field_sep(plume_buf *b, int *add_comma) {
    if (*add_comma) plume_buf_put(b, ",", 1);
    *add_comma = 1;
}

static void put_parameters(render *r, const jv *props, int filter_keys, const char *where);

/* The ARRAY branch of format_parameters: `items:{...}` from a non-empty items object, its
 * members in dictsort order, null members skipped. */
static void put_items(render *r, const jv *items, const char *where) {
    int32_t *order = jv_dictsort(items);
    if (!order) { r->b.oom = 1; return; }
    plume_buf_puts(&r->b, "items:{");
    int first = 1;
    for (int32_t i = 0; i < items->n; i++) {
        const jv *k = &items->keys[order[i]], *v = &items->items[order[i]];
        if (v->type == JV_NULL) continue;
        if (!first) plume_buf_put(&r->b, ",", 1);
        first = 0;
        if (!strcmp(k->s, "properties")) {
            plume_buf_puts(&r->b, "properties:{");
            if (v->type == JV_OBJ) put_parameters(r, v, 0, where);
            plume_buf_put(&r->b, "}", 1);
        } else if (!strcmp(k->s, "required")) {
            put_required(r, v, where);
        } else if (!strcmp(k->s, "type") && v->type == JV_STR) {
            plume_buf_puts(&r->b, "type:<|\"|>");
            buf_put_pyupper(&r->b, v);
            plume_buf_puts(&r->b, "<|\"|>");
        } else if (!strcmp(k->s, "type")) {
            /* type:{{ format_argument(item_value | map('upper') | list) }} */
            plume_buf_puts(&r->b, "type:");
            put_name_list(r, v, 1, "type", where);
        } else {
            plume_buf_put(&r->b, k->s, k->len);
            plume_buf_put(&r->b, ":", 1);
            put_argument(&r->b, v, 1);
        }
    }
    plume_buf_put(&r->b, "}", 1);
    free(order);
}

/* One property of format_parameters: key:{description,enum|items,nullable,properties,
 * required,type}. value may be any JSON value; a non-object acts as an empty one (Jinja's
 * lookups on it are undefined). */
static void put_property(render *r, const jv *key, const jv *value, const char *where) {
    plume_buf *b = &r->b;
    int add_comma = 0;
    plume_buf_put(b, key->s, key->len);
    plume_buf_puts(b, ":{");
    const jv *desc = jv_get(value, "description"), *type = jv_get(value, "type");
    if (jv_truthy(desc)) {
        plume_buf_puts(b, "description:<|\"|>");
        buf_put_pystr(b, desc, 0);
        plume_buf_puts(b, "<|\"|>");
        add_comma = 1;
    }
    if (jv_upper_is(type, "STRING")) {
        const jv *en = jv_get(value, "enum");
        if (jv_truthy(en)) {
            put_field_sep(b, &add_comma);
            plume_buf_puts(b, "enum:");
            put_argument(b, en, 1);
        }
    } else if (jv_upper_is(type, "ARRAY")) {
        const jv *items = jv_get(value, "items");
        if (items && items->type == JV_OBJ && items->n > 0) {
            put_field_sep(b, &add_comma);
            put_items(r, items, where);
        }
    }
    if (jv_truthy(jv_get(value, "nullable"))) {
        put_field_sep(b, &add_comma);
        plume_buf_puts(b, "nullable:true");
    }
    if (jv_upper_is(type, "OBJECT")) {
        const jv *props = jv_get(value, "properties"), *req = jv_get(value, "required");
        put_field_sep(b, &add_comma);
        plume_buf_puts(b, "properties:{");
        /* With no "properties" object, the template lists the object's own non-standard
         * keys as if they were properties. */
        if (props && props->type == JV_OBJ) put_parameters(r, props, 0, where);
        else put_parameters(r, value, 1, where);
        plume_buf_put(b, "}", 1);
        if (jv_truthy(req)) {
            put_field_sep(b, &add_comma);
            put_required(r, req, where);
        }
    }
    put_field_sep(b, &add_comma);
    plume_buf_puts(b, "type:<|\"|>");
    buf_put_pyupper(b, type);
    plume_buf_puts(b, "<|\"|>}");
}

/* The template's format_parameters(properties, required, filter_keys): each property in
 * dictsort order, comma separated; with filter_keys, the JSON-schema keywords are skipped. */
static void put_parameters(render *r, const jv *props, int filter_keys, const char *where) {
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    int32_t *order = jv_dictsort(props);
    if (!order) { r->b.oom = 1; return; }
    int first = 1;
    for (int32_t i = 0; i < props->n && !r->rc; i++) {
        const jv *k = &props->keys[order[i]];
        int skip = 0;
        for (size_t s = 0; filter_keys && s < 5; s++) skip |= !strcmp(k->s, standard[s]);
        if (skip) continue;
        if (!first) plume_buf_put(&r->b, ",", 1);
        first = 0;
        put_property(r, k, &props->items[order[i]], where);
    }
    free(order);
}

/* The template's format_function_declaration(tool): declaration:NAME{description:<|"|>..<|"|>
 * [,parameters:{[properties:{..},][required:[..],][type:<|"|>T<|"|>}]][,response:{..}]}.
 * (The parameters brace is closed only by the type field: a template quirk, kept.) */
static void put_declaration(render *r, const jv *tool, int32_t t) {
    char where[32];
    snprintf(where, sizeof where, "tools[%d]", t);
    const jv *fn = jv_get(tool, "function");
    const jv *name = jv_get(fn, "name"), *desc = jv_get(fn, "description");
    if (!fn || fn->type != JV_OBJ) { render_fail(r, "%s: no \"function\" object", where); return; }
    if (!name || name->type != JV_STR) {
        render_fail(r, "%s: \"function\" has no string \"name\"", where);
        return;
    }
    plume_buf *b = &r->b;
    plume_buf_puts(b, "declaration:");
    plume_buf_put(b, name->s, name->len);
    plume_buf_puts(b, "{description:<|\"|>");
    if (desc) buf_put_pystr(b, desc, 0);
    plume_buf_puts(b, "<|\"|>");
    const jv *params = jv_get(fn, "parameters");
    if (jv_truthy(params)) {
        if (params->type != JV_OBJ) { render_fail(r, "%s: \"parameters\" is not an object", where); return; }
        const jv *props = jv_get(params, "properties"), *req = jv_get(params, "required");
        const jv *type = jv_get(params, "type");
        plume_buf_puts(b, ",parameters:{");
        if (jv_truthy(props)) {
            if (props->type != JV_OBJ) {
                render_fail(r, "%s: \"properties\" is not an object", where);
                return;
            }
            plume_buf_puts(b, "properties:{");
            put_parameters(r, props, 0, where);
            plume_buf_puts(b, "},");
        }
        if (jv_truthy(req)) {
            put_required(r, req, where);
            plume_buf_put(b, ",", 1);
        }
        if (jv_truthy(type)) {
            plume_buf_puts(b, "type:<|\"|>");
            buf_put_pyupper(b, type);
            plume_buf_puts(b, "<|\"|>}");
        }
    }
    const jv *resp = jv_get(fn, "response");
    if (resp) {
        const jv *rdesc = jv_get(resp, "description"), *rtype = jv_get(resp, "type");
        plume_buf_puts(b, ",response:{");
        if (jv_truthy(rdesc)) {
            plume_buf_puts(b, "description:<|\"|>");
            buf_put_pystr(b, rdesc, 0);
            plume_buf_puts(b, "<|\"|>,");
        }
        if (jv_upper_is(rtype, "OBJECT")) plume_buf_puts(b, "type:<|\"|>OBJECT<|\"|>}");
    }
    plume_buf_put(b, "}", 1);
}

/* Parse tools_json and append <|tool>declaration<tool|> per tool. *n_tools: how many. */
static void put_tools(render *r, const char *tools_json, int32_t *n_tools) {
    jv tools = {0};
    *n_tools = 0;
    int rc = jv_parse(&tools, tools_json, "tools_json", r->err);
    if (rc) { r->rc = rc; return; }
    if (tools.type != JV_ARR && tools.type != JV_NULL) {
        render_fail(r, "tools_json: not an array of tools");
    } else {
        for (int32_t t = 0; t < tools.n && !r->rc; t++) {
            if (tools.items[t].type != JV_OBJ) { render_fail(r, "tools[%d]: not an object", t); break; }
            plume_buf_puts(&r->b, "<|tool>");
            put_declaration(r, &tools.items[t], t);
            plume_buf_puts(&r->b, "<tool|>");
        }
        *n_tools = tools.n;
    }
    jv_free(&tools);
}

/* <|tool_call>call:NAME{k:v,...}<tool_call|>: arguments (JSON object text, NULL or "null" for
 * none) in dictsort order, keys bare, values by format_argument(escape_keys=False). */
static void put_tool_call(render *r, const plume_chat_tool_call *tc, int32_t i, int32_t c) {
    jv args = {0};
    if (tc->arguments) {
        char what[64];
        snprintf(what, sizeof what, "message %d: tool call %d arguments", i, c);
        int rc = jv_parse(&args, tc->arguments, what, r->err);
        if (rc) { r->rc = rc; return; }
        if (args.type != JV_OBJ && args.type != JV_NULL) {
            render_fail(r, "message %d: tool call %d: arguments are not a JSON object", i, c);
            jv_free(&args);
            return;
        }
    }
    plume_buf_puts(&r->b, "<|tool_call>call:");
    plume_buf_puts(&r->b, tc->name);
    plume_buf_put(&r->b, "{", 1);
    if (args.type == JV_OBJ) {
        int32_t *order = jv_dictsort(&args);
        if (!order) r->b.oom = 1;
        for (int32_t k = 0; order && k < args.n; k++) {
            if (k) plume_buf_put(&r->b, ",", 1);
            plume_buf_put(&r->b, args.keys[order[k]].s, args.keys[order[k]].len);
            plume_buf_put(&r->b, ":", 1);
            put_argument(&r->b, &args.items[order[k]], 0);
        }
        free(order);
    }
    plume_buf_puts(&r->b, "}<tool_call|>");
    jv_free(&args);
}

/* <|tool_response>response:NAME{value:BODY}<tool_response|> for one role "tool" message: the
 * body is its content or its text parts joined (not trimmed) as a <|"|> string, or null. */
static void put_tool_response(render *r, const char *name, const plume_chat_message_ex *m) {
    plume_buf_puts(&r->b, "<|tool_response>response:");
    plume_buf_puts(&r->b, name);
    plume_buf_puts(&r->b, "{value:");
    if (m->n_parts > 0) {
        plume_buf_puts(&r->b, "<|\"|>");
        for (int32_t p = 0; p < m->n_parts; p++) plume_buf_puts(&r->b, m->parts[p]);
        plume_buf_puts(&r->b, "<|\"|>");
    } else if (m->content) {
        buf_put_quoted(&r->b, m->content, strlen(m->content));
    } else {
        plume_buf_puts(&r->b, "null");
    }
    plume_buf_puts(&r->b, "}<tool_response|>");
}

/* ---- rendering ---------------------------------------------------------------------------- */

/* Whether a role names a message plume can render. */
static int chat_role_known(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "developer") || !strcmp(r, "user") ||
           !strcmp(r, "assistant") || !strcmp(r, "model") || !strcmp(r, "tool");
}

/* Whether a role is one of the model's ("assistant" as OpenAI says, "model" as Gemma does). */
static int chat_role_model(const char *r) { return !strcmp(r, "assistant") || !strcmp(r, "model"); }

/* Check every message's fields; 0 or PLUME_EINVAL naming the message. */
static int chat_check(const plume_chat_message_ex *msgs, int32_t n, char **err) {
    if (n < 0) return plume_fail(err, PLUME_EINVAL, "chat: negative message count %d", n);
    if (n > 0 && !msgs) return plume_fail(err, PLUME_EINVAL, "chat: messages is NULL");
    for (int32_t i = 0; i < n; i++) {
        const plume_chat_message_ex *m = &msgs[i];
        if (!m->role) return plume_fail(err, PLUME_EINVAL, "chat: message %d has no role", i);
        if (!chat_role_known(m->role))
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: unknown role \"%s\" (expected system, "
                              "developer, user, assistant, model or tool)", i, m->role);
        if (m->n_parts < 0 || (m->n_parts > 0 && !m->parts))
            return plume_fail(err, PLUME_EINVAL, "chat: message %d: bad parts (%d)", i, m->n_parts);
        if (m->n_parts > 0 && m->content)
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: both content and parts are set", i);
        for (int32_t p = 0; p < m->n_parts; p++)
            if (!m->parts[p])
                return plume_fail(err, PLUME_EINVAL, "chat: message %d: part %d is NULL", i, p);
        if (m->n_tool_calls < 0 || (m->n_tool_calls > 0 && !m->tool_calls))
            return plume_fail(err, PLUME_EINVAL, "chat: message %d: bad tool calls (%d)", i,
                              m->n_tool_calls);
        for (int32_t c = 0; c < m->n_tool_calls; c++)
            if (!m->tool_calls[c].name || !m->tool_calls[c].name[0])
                return plume_fail(err, PLUME_EINVAL, "chat: message %d: tool call %d has no name",
                                  i, c);
    }
    return 0;
}

/* The first message when it is a system or developer one: its content trimmed, or its parts
 * each trimmed and followed by a space (the template's system-turn loop). */
static void put_system_content(plume_buf *b, const plume_chat_message_ex *m) {
    if (m->n_parts > 0) {
        for (int32_t p = 0; p < m->n_parts; p++) {
            buf_put_trimmed(b, m->parts[p], strlen(m->parts[p]));
            plume_buf_put(b, " ", 1);
        }
    } else if (m->content) {
        buf_put_trimmed(b, m->content, strlen(m->content));
    }
}

/* A message's content in the loop (the template's captured_content): model text has its
 * thought spans stripped and is trimmed, other text is trimmed; parts each so, joined.
 * Returns whether anything but whitespace was written. */
static int put_content(plume_buf *b, const plume_chat_message_ex *m, int is_model) {
    size_t at = b->len;
    int32_t n = m->n_parts > 0 ? m->n_parts : m->content ? 1 : 0;
    for (int32_t p = 0; p < n; p++) {
        const char *c = m->n_parts > 0 ? m->parts[p] : m->content;
        if (is_model) buf_put_model_content(b, c);
        else buf_put_trimmed(b, c, strlen(c));
    }
    if (b->oom) return 0;
    const unsigned char *s = (const unsigned char *)b->p + at;
    size_t len = b->len - at, k;
    while ((k = chat_space_len(s, len)) > 0) { s += k; len -= k; }
    return len > 0;
}

/* What the template's ns.prev_message_type says about the last thing rendered. */
enum { PREV_NONE, PREV_THINK, PREV_TOOL, PREV_TOOL_CALL, PREV_TOOL_RESPONSE };

/* Both NULL, or equal strings: how the template compares tc.id with tool_call_id. */
static int chat_same_id(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* The role tool messages that directly follow message i (which made tool calls), each as a
 * tool response named by the call whose id it answers (else its own name, else "unknown").
 * Returns how many were written. */
static int32_t put_tool_responses(render *r, const plume_chat_message_ex *lm, int32_t n, int32_t i) {
    int32_t k = i + 1;
    for (; k < n && !strcmp(lm[k].role, "tool"); k++) {
        const char *name = lm[k].name && lm[k].name[0] ? lm[k].name : "unknown";
        for (int32_t c = 0; c < lm[i].n_tool_calls; c++)
            if (chat_same_id(lm[i].tool_calls[c].id, lm[k].tool_call_id))
                name = lm[i].tool_calls[c].name;
        put_tool_response(r, name, &lm[k]);
    }
    return k - (i + 1);
}

/* One non-tool message of the loop (lm[i] of n, after a leading system message), as the
 * template's loop body renders it; updates *prev (PREV_*) and *prev_role. */
static void put_message(render *r, const plume_chat_message_ex *lm, int32_t n, int32_t i,
                        int32_t last_user, const plume_chat_options *o, int *prev,
                        const char **prev_role) {
    const plume_chat_message_ex *m = &lm[i];
    plume_buf *b = &r->b;
    int is_model = chat_role_model(m->role);
    *prev = PREV_NONE;
    /* A model turn continues after an "assistant" message (the role as given). */
    if (!(is_model && *prev_role && !strcmp(*prev_role, "assistant"))) {
        plume_buf_puts(b, "<|turn>");
        plume_buf_puts(b, is_model ? "model" : m->role);
        plume_buf_puts(b, "\n");
    }
    /* Thoughts are kept after the last user message only (or, with preserve_thinking, on
     * turns that call tools). */
    int gate = i > last_user || (o->preserve_thinking && m->n_tool_calls > 0);
    if (m->reasoning_content && m->reasoning_content[0] && gate) {
        plume_buf_puts(b, "<|channel>thought\n");
        plume_buf_puts(b, m->reasoning_content);
        plume_buf_puts(b, "\n<channel|>");
    }
    for (int32_t c = 0; c < m->n_tool_calls && !r->rc; c++) put_tool_call(r, &m->tool_calls[c], i, c);
    if (m->n_tool_calls > 0) *prev = PREV_TOOL_CALL;
    int responded = 0;
    if (m->n_tool_calls > 0 && put_tool_responses(r, lm, n, i) > 0) {
        responded = 1;
        *prev = PREV_TOOL_RESPONSE;
    }
    int has_content = put_content(b, m, is_model);

    const char *next = NULL; /* the next non-tool message's role */
    for (int32_t j = i + 1; j < n && !next; j++)
        if (strcmp(lm[j].role, "tool")) next = lm[j].role;
    int continues = is_model && next && !strcmp(next, "assistant") &&
                    (m->n_tool_calls == 0 || responded);
    if (*prev == PREV_TOOL_CALL && !responded) plume_buf_puts(b, "<|tool_response>");
    else if (continues) {}
    else if (!(responded && !has_content && !next)) plume_buf_puts(b, "<turn|>\n");
    *prev_role = m->role;
}

/* Render as the E2B template does with bos_token "<bos>" (see docs/CHAT.md):
 *   <bos>
 *   [<|turn>system\n [<|think|>\n] [first system/developer content] [<|tool>decl<tool|>...]
 *    <turn|>\n]
 *   per non-tool message: [<|turn>{role}\n] [thought] [tool calls] [tool responses] content
 *                         [<turn|>\n | <|tool_response>]
 *   [<|turn>model\n | <|channel>thought\n]     when add_generation_prompt
 * *out is malloc'd and NUL-terminated. 0, PLUME_EINVAL or PLUME_ENOMEM. */
int plume_chat_render_ex(const plume_chat_message_ex *msgs, int32_t n,
                         const plume_chat_options *opt, char **out, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "chat: out is NULL");
    *out = NULL;
    int rc = chat_check(msgs, n, err);
    if (rc) return rc;
    plume_chat_options o = {0};
    if (opt) o = *opt;

    render r = {{0}, 0, err};
    int prev = PREV_NONE;
    plume_buf_puts(&r.b, "<bos>");
    int32_t first = 0, n_tools = 0;
    int has_system = n > 0 && (!strcmp(msgs[0].role, "system") ||
                               !strcmp(msgs[0].role, "developer"));
    size_t system_at = r.b.len;
    plume_buf_puts(&r.b, "<|turn>system\n");
    if (o.enable_thinking) {
        plume_buf_puts(&r.b, "<|think|>\n");
        prev = PREV_THINK;
    }
    if (has_system) {
        put_system_content(&r.b, &msgs[0]);
        first = 1;
    }
    if (o.tools_json) put_tools(&r, o.tools_json, &n_tools);
    if (n_tools > 0) prev = PREV_TOOL;
    if (o.enable_thinking || has_system || n_tools > 0) plume_buf_puts(&r.b, "<turn|>\n");
    else if (!r.b.oom) r.b.p[r.b.len = system_at] = 0; /* no system turn after all */

    const plume_chat_message_ex *lm = msgs + first;
    int32_t ln = n - first, last_user = -1;
    for (int32_t i = 0; i < ln; i++)
        if (!strcmp(lm[i].role, "user")) last_user = i;
    const char *prev_role = NULL; /* the previous non-tool message's role as given */
    for (int32_t i = 0; i < ln && !r.rc; i++)
        if (strcmp(lm[i].role, "tool")) put_message(&r, lm, ln, i, last_user, &o, &prev, &prev_role);
    /* After a tool response the model goes on in the same turn (with thinking, in a thought). */
    if (o.add_generation_prompt && prev != PREV_TOOL_RESPONSE && prev != PREV_TOOL_CALL)
        plume_buf_puts(&r.b, "<|turn>model\n");
    else if (o.add_generation_prompt && prev == PREV_TOOL_RESPONSE && o.enable_thinking)
        plume_buf_puts(&r.b, "<|channel>thought\n");

    if (!r.rc && r.b.oom)
        r.rc = plume_fail(err, PLUME_ENOMEM, "chat: out of memory rendering %d messages", n);
    if (r.rc) {
        free(r.b.p);
        return r.rc;
    }
    *out = r.b.p;
    return 0;
}

/* plume_chat_render_ex with plain {role, content} messages and no tools. Role "tool" is
 * PLUME_EINVAL: without tool calls to answer, the template would drop it. */
int plume_chat_render(const plume_chat_message *msgs, int32_t n, int32_t add_generation_prompt,
                      int32_t enable_thinking, char **out, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "chat: out is NULL");
    *out = NULL;
    if (n < 0) return plume_fail(err, PLUME_EINVAL, "chat: negative message count %d", n);
    if (n > 0 && !msgs) return plume_fail(err, PLUME_EINVAL, "chat: messages is NULL");
    plume_chat_message_ex *ex = calloc((size_t)n + 1, sizeof *ex);
    if (!ex) return plume_fail(err, PLUME_ENOMEM, "chat: out of memory for %d messages", n);
    for (int32_t i = 0; i < n; i++) {
        if (msgs[i].role && !strcmp(msgs[i].role, "tool")) {
            free(ex);
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: role \"tool\" answers tool calls, which need "
                              "plume_chat_render_ex", i);
        }
        ex[i].role = msgs[i].role;
        ex[i].content = msgs[i].content;
    }
    plume_chat_options o = {0};
    o.add_generation_prompt = add_generation_prompt;
    o.enable_thinking = enable_thinking;
    int rc = plume_chat_render_ex(ex, n, &o, out, err);
    free(ex);
    return rc;
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
    if (len > SIZE_MAX - m->len || plume_grow(&m->text, &m->cap, m->len + len, 1))
        return PLUME_ENOMEM;
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
