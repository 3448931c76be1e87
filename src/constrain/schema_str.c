/* schema_str.c -- strings of a JSON Schema as GBNF: the spelling of a character in each
 * dialect, lengths, `format` and `pattern` (docs/STRUCTURED.md "Strings").
 *
 * One grammar character is one code point of the string's value, so minLength/maxLength
 * (which count code points, as ajv does) are repetition counts: in JSON a character is a raw
 * code point other than '"', '\' and controls, or one escape (\" \\ \/ \b \f \n \r \t, or \u
 * with four hex digits that is not a surrogate, so an escape is always a whole character).
 * In a Gemma tool call a character is any code point but '<' and the controls other than tab,
 * newline and return: the call format has no escape, and every marker that ends a call or a
 * string starts with '<'.
 *
 * (The spelling of one character of a set in each dialect, cst_char_expr, is in spell.c: the
 * regular expressions of `pattern` use it too.)
 *
 * format: date, time, date-time (RFC 3339 as ajv-formats checks them: days per month, leap
 * years, 00-23:00-59:00-59 with a time zone), uuid, email (a conservative subset of what
 * ajv-formats accepts), ipv4. Others are refused. A format with minLength/maxLength is
 * accepted where every string plume writes of it has such a length (format_lengths), else
 * refused; a pattern with a length is the pattern narrowed to those lengths (regex.c). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

/* The content of a string of a format (no quotes), as one group; 0 or PLUME_EINVAL. */
static int format_expr(plume_buf *b, const char *fmt, const char *path, char **err) {
    static const char date[] =
        "( [0-9]{4} \"-\" ( ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
        " | ( \"04\" | \"06\" | \"09\" | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )"
        " | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"
        " | ( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\" ) ";
    static const char time[] =
        "( ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
        "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] ) ) ";
    if (!strcmp(fmt, "date")) plume_buf_puts(b, date);
    else if (!strcmp(fmt, "time")) plume_buf_puts(b, time);
    else if (!strcmp(fmt, "date-time")) { plume_buf_puts(b, "( "); plume_buf_puts(b, date); plume_buf_puts(b, "\"T\" "); plume_buf_puts(b, time); plume_buf_puts(b, ") "); }
    else if (!strcmp(fmt, "uuid"))
        plume_buf_puts(b, "( [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [1-5] [0-9a-f]{3} \"-\" [89ab] [0-9a-f]{3} \"-\" [0-9a-f]{12} ) ");
    else if (!strcmp(fmt, "email"))
        plume_buf_puts(b, "( [a-zA-Z0-9_+-]{1,32} ( \".\" [a-zA-Z0-9_+-]{1,32} ){0,3} \"@\" "
                   "( [a-z0-9] ( [a-z0-9-]{0,30} [a-z0-9] )? \".\" ){1,3} [a-z] [a-z0-9]{1,10} ) ");
    else if (!strcmp(fmt, "ipv4"))
        plume_buf_puts(b, "( ( ( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9] ) \".\" ){3} "
                   "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9] ) ) ");
    else if (!strcmp(fmt, "uri") || !strcmp(fmt, "url") || !strcmp(fmt, "uri-reference") || !strcmp(fmt, "iri") ||
             !strcmp(fmt, "iri-reference")) /* narrowed: https URLs of plain labels, a top-level domain of letters
                                               (ajv-formats' url wants one), and path segments */
        plume_buf_puts(b, "( \"https://\" [a-z0-9]{1,20} ( \".\" [a-z0-9]{1,20} ){0,2} \".\" [a-z]{2,10} "
                          "( \"/\" [A-Za-z0-9._~-]{1,20} ){0,6} ) ");
    else if (!strcmp(fmt, "hostname") || !strcmp(fmt, "idn-hostname")) /* narrowed: no "--" (punycode) */
        plume_buf_puts(b, "( [a-z0-9]{1,20} ( \"-\" [a-z0-9]{1,20} ){0,2} ( \".\" [a-z0-9]{1,20} ( \"-\" [a-z0-9]{1,20} ){0,2} ){0,3} ) ");
    else if (!strcmp(fmt, "ipv6")) /* narrowed: the full form, eight groups */
        plume_buf_puts(b, "( [0-9a-f]{1,4} ( \":\" [0-9a-f]{1,4} ){7} ) ");
    else if (!strcmp(fmt, "byte")) /* base64, padded */
        plume_buf_puts(b, "( ( [A-Za-z0-9+/]{4} ){0,64} ( [A-Za-z0-9+/]{2} \"==\" | [A-Za-z0-9+/]{3} \"=\" )? ) ");
    else if (!strcmp(fmt, "duration") || !strcmp(fmt, "regex") || !strcmp(fmt, "json-pointer") ||
             !strcmp(fmt, "relative-json-pointer") || !strcmp(fmt, "uri-template") || !strcmp(fmt, "idn-email") ||
             !strcmp(fmt, "iso-time") || !strcmp(fmt, "iso-date-time") || !strcmp(fmt, "json-pointer-uri-fragment"))
        return plume_fail(err, PLUME_EINVAL,
                          "json schema: %s: \"format\": \"%s\" is not supported (plume enforces date, time, date-time, "
                          "uuid, email, ipv4, ipv6, hostname, uri, byte)", path, fmt);
    else /* a format validators do not know asserts nothing (an annotation): any string */
        return 1;
    return 0;
}

/* The shortest and longest strings plume writes of a format (format_expr), in characters;
 * -1 for a format not written. */
static int format_lengths(const char *fmt, int64_t *lo, int64_t *hi) {
    static const struct { const char *name; int64_t lo, hi; } t[] = {
        {"date", 10, 10}, {"time", 9, 21}, {"date-time", 20, 32}, {"uuid", 36, 36}, {"email", 6, 242},
        {"ipv4", 7, 15}, {"uri", 12, 207}, {"url", 12, 207}, {"uri-reference", 12, 207}, {"iri", 12, 207},
        {"iri-reference", 12, 207}, {"hostname", 1, 251}, {"idn-hostname", 1, 251}, {"ipv6", 15, 39}, {"byte", 0, 260}};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(fmt, t[i].name)) { *lo = t[i].lo; *hi = t[i].hi; return 0; }
    return -1;
}

/* A non-negative integer keyword within [0, 100000], or -1 when absent; -2 on a bad value
 * (error set). */
static int64_t count_kw(const cJSON *s, const char *key, const char *path, char **err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return -1;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || floor(x->valuedouble) != x->valuedouble) {
        plume_fail(err, PLUME_EINVAL, "json schema: %s: \"%s\" is not a non-negative integer", path, key);
        return -2;
    }
    if (x->valuedouble > CST_MAX_REPEAT) {
        plume_fail(err, PLUME_EINVAL, "json schema: %s: \"%s\" above %d is not supported", path, key, CST_MAX_REPEAT);
        return -2;
    }
    return (int64_t)x->valuedouble;
}

/* A whole string valid against the schema's string keywords: the quotes of the dialect (JSON
 * ", Gemma's <|"|> tokens) around the content. char_rule names the rule of one free
 * character. 0 or PLUME_EINVAL. */
int cst_string_expr(plume_buf *b, const cJSON *s, int dialect, const char *char_rule, const char *path, char **err) {
    int64_t lo = count_kw(s, "minLength", path, err), hi = count_kw(s, "maxLength", path, err);
    if (lo == -2 || hi == -2) return PLUME_EINVAL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (fmt && !cJSON_IsString(fmt)) return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"format\" is not a string", path);
    if (pat && !cJSON_IsString(pat)) return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"pattern\" is not a string", path);
    if (fmt) { /* an unknown format asserts nothing: the other keywords alone */
        plume_buf probe = {0};
        if (format_expr(&probe, fmt->valuestring, path, NULL) == 1) fmt = NULL;
        plume_buf_free(&probe);
    }
    if (fmt && (lo >= 0 || hi >= 0)) { /* the lengths hold for every string plume writes of the format, or 400 */
        int64_t flo, fhi;
        if (format_lengths(fmt->valuestring, &flo, &fhi) || flo < lo || (hi >= 0 && fhi > hi))
            return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"format\": \"%s\" together with minLength/maxLength "
                              "is supported only where every string plume writes of the format has such a length", path,
                              fmt->valuestring);
        lo = hi = -1;
    }
    if (fmt && pat)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"format\" together with \"pattern\" is not supported", path);
    if (hi >= 0 && lo > hi)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: minLength %lld > maxLength %lld", path, (long long)lo,
                          (long long)hi);
    const char *quote = dialect == CST_GEMMA ? "<|\"|> " : "\"\\\"\" ";
    plume_buf_puts(b, "( ");
    plume_buf_puts(b, quote);
    int rc = 0;
    if (fmt) rc = format_expr(b, fmt->valuestring, path, err);
    else if (pat) rc = cst_regex_expr(b, pat->valuestring, lo, hi, dialect, path, err);
    else if (lo < 0 && hi < 0) plume_buf_printf(b, "%s* ", char_rule);
    else if (hi < 0) plume_buf_printf(b, "%s{%lld,} ", char_rule, (long long)lo);
    else plume_buf_printf(b, "%s{%lld,%lld} ", char_rule, (long long)(lo < 0 ? 0 : lo), (long long)hi);
    plume_buf_puts(b, quote);
    plume_buf_puts(b, ") ");
    return rc;
}
