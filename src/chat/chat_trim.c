/* chat_trim.c -- trimming as Jinja's `trim` (Python str.strip()) does it, and the template's
 * strip_thinking. Knows nothing of messages. */
#include <string.h>

#include "chat_int.h"

/* Byte length of the whitespace character that starts p[0, n), or 0. The set is Python's
 * str.isspace(): U+0009-000D, U+001C-0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000. (JavaScript's trim differs: it lacks U+001C-001F and
 * U+0085 and adds U+FEFF; the goldens contain none of these.) Invalid UTF-8 is not space. */
size_t chat_space_len(const unsigned char *p, size_t n) {
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
void chat_put_trimmed(plume_buf *b, const char *s, size_t n) {
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
void chat_put_model_content(plume_buf *b, const char *s) {
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
    else chat_put_trimmed(b, joined.p ? joined.p : "", joined.len);
    plume_buf_free(&joined);
}
