/* chat_pyjson.c -- JSON text -> the Python objects json.loads() makes (jv), for the template
 * to walk: tools_json and tool-call arguments.
 *
 * The template walks Python objects that json.loads() made, so this keeps what Python keeps:
 * member order (with a repeated key, the last value at the first key's place), numbers as
 * their literal text (so 18 and 18.0 stay apart), strings decoded. The text is untrusted:
 * depth and object size are bounded, every error names the byte offset. */
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

/* ---- parsing ------------------------------------------------------------------------------- */

#define JSON_MAX_DEPTH 256     /* nesting, so that recursion stays shallow: a tool's parameters may nest
                                  as deep as a response format's schema (SERVE_SCHEMA_MAX_JSON_DEPTH) */
#define JSON_MAX_MEMBERS 4096  /* per object: a repeated key is found by a linear scan */

/* A parse in progress over text[0, end). */
typedef struct {
    const char *text, *p, *end;
    const char *what; /* "tools_json", "message 2: tool call 0 arguments" */
    int rc;           /* first failure, or 0 */
    char **err;
} jparse;

/* Free what v owns (v itself is the caller's). */
void chat_jv_free(jv *v) {
    if (!v) return;
    for (int32_t i = 0; i < v->n; i++) {
        chat_jv_free(&v->items[i]);
        if (v->keys) chat_jv_free(&v->keys[i]);
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
        if (j->p == j->end || *j->p != ':') { chat_jv_free(&key); return jp_fail(j, "expected ':'"); }
        j->p++;
        if (jp_value(j, &val, depth + 1)) { chat_jv_free(&key); chat_jv_free(&val); return -1; }
        int32_t at = -1;
        for (int32_t i = 0; i < v->n && at < 0; i++)
            if (v->keys[i].len == key.len && !memcmp(v->keys[i].s, key.s, key.len)) at = i;
        if (at >= 0) {
            chat_jv_free(&key);
            chat_jv_free(&v->items[at]);
            v->items[at] = val;
        } else if (v->n >= JSON_MAX_MEMBERS || jv_grow(j, v)) {
            chat_jv_free(&key);
            chat_jv_free(&val);
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

/* Any value at the cursor -> v. On failure v may hold a partial tree (chat_jv_free it). */
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
int chat_jv_parse(jv *v, const char *text, const char *what, char **err) {
    jparse j = {text, text, text + strlen(text), what, 0, err};
    if (jp_value(&j, v, 0) == 0) {
        jp_ws(&j);
        if (j.p != j.end) jp_fail(&j, "text after the value");
    }
    if (j.rc) chat_jv_free(v);
    return j.rc;
}

/* ---- reading values as Jinja does ---------------------------------------------------------- */

/* Member `key` of an object, or NULL (missing, or v is not an object: what Jinja's v['key']
 * gives for a non-mapping is undefined too). */
const jv *chat_jv_get(const jv *v, const char *key) {
    if (!v || v->type != JV_OBJ) return NULL;
    size_t kl = strlen(key);
    for (int32_t i = 0; i < v->n; i++)
        if (v->keys[i].len == kl && !memcmp(v->keys[i].s, key, kl)) return &v->items[i];
    return NULL;
}

/* Python truthiness: null, false, 0, "", [] and {} are false (and so is a missing value). */
int chat_jv_truthy(const jv *v) {
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
int32_t *chat_jv_dictsort(const jv *obj) {
    jv_sort_entry *e = malloc(((size_t)obj->n + 1) * sizeof *e);
    int32_t *order = malloc(((size_t)obj->n + 1) * sizeof *order);
    if (!e || !order) { free(e); free(order); return NULL; }
    for (int32_t i = 0; i < obj->n; i++) e[i] = (jv_sort_entry){&obj->keys[i], i};
    qsort(e, (size_t)obj->n, sizeof *e, jv_sort_cmp);
    for (int32_t i = 0; i < obj->n; i++) order[i] = e[i].i;
    free(e);
    return order;
}

/* ---- Python's `for x in v` ----------------------------------------------------------------- */

/* Python's `for x in v`: an array's items, an object's keys, a string's characters. Returns
 * the count, or -1 if v is not iterable (a number, true, false, null). */
int32_t chat_jv_iter_count(const jv *v) {
    if (v->type == JV_ARR || v->type == JV_OBJ) return v->n;
    if (v->type != JV_STR) return -1;
    int32_t n = 0;
    for (size_t i = 0; i < v->len; i++) n += ((unsigned char)v->s[i] & 0xc0) != 0x80;
    return n;
}

/* Item i of `for x in v` (i < chat_jv_iter_count(v)); a character is made in *tmp, which then
 * points into v. */
const jv *chat_jv_iter_item(const jv *v, int32_t i, jv *tmp) {
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
