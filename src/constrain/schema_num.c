/* schema_num.c -- integers and numbers within bounds, as GBNF (docs/STRUCTURED.md).
 *
 * A bound is a decimal: its text in the schema, exactly (cst_json_parse keeps it; 9007199254740993
 * is not a double), else the shortest digits that give the schema's double back. A number
 * with j fraction digits is N / 10^j for an integer N, so "lo <= x <= hi" with j digits is
 * "ceil(lo 10^j) <= N <= floor(hi 10^j)": exact, in integers, on digit strings (no floating
 * point anywhere). The grammar is the union over j = 0 (no fraction) .. NUM_FRAC of N's range
 * written with a '.' before its last j digits; each range is the classic one over digit
 * strings: per length, the common prefix, then "above a's rest", "strictly between", "below
 * b's rest". Exponents are not generated where bounds apply.
 *
 * Unbounded sides stop at NUM_INT_DIGITS integer digits (a model cannot run on in digits,
 * and 15 digits stay exact in the double a JSON reader makes). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define NUM_INT_DIGITS 15 /* integer digits where no bound limits them */
#define NUM_FRAC 6        /* fraction digits of a bounded number, at most (more if a bound needs) */
#define NUM_DIGITS 80     /* longest digit string handled (bounds up to ~1e60) */

/* A signed integer as decimal digits, or an unbounded side. */
typedef struct {
    int inf;               /* 1: no bound on this side */
    int neg;
    char d[NUM_DIGITS + 1]; /* digits, no leading zeros ("0" for zero) */
} bigint;

/* Strip leading zeros (keeping one). */
static void big_trim(char *d) {
    size_t z = 0, n = strlen(d);
    while (z + 1 < n && d[z] == '0') z++;
    memmove(d, d + z, n - z + 1);
}

/* Compare two non-negative digit strings. */
static int dig_cmp(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b) < 0 ? -1 : strcmp(a, b) > 0;
}

/* a + 1 on a digit string (room for one more digit). */
static void dig_inc(char *a) {
    size_t n = strlen(a);
    for (size_t i = n; i-- > 0;) {
        if (a[i] < '9') { a[i]++; return; }
        a[i] = '0';
    }
    memmove(a + 1, a, n + 1);
    a[0] = '1';
}

/* a - 1 on a digit string > 0. */
static void dig_dec(char *a) {
    for (size_t i = strlen(a); i-- > 0;) {
        if (a[i] > '0') { a[i]--; break; }
        a[i] = '9';
    }
    big_trim(a);
}

/* Compare two signed bigints (neither infinite). */
static int big_cmp(const bigint *a, const bigint *b) {
    int za = !strcmp(a->d, "0"), zb = !strcmp(b->d, "0");
    int sa = za ? 0 : a->neg ? -1 : 1, sb = zb ? 0 : b->neg ? -1 : 1;
    if (sa != sb) return sa < sb ? -1 : 1;
    if (sa == 0) return 0;
    int c = dig_cmp(a->d, b->d);
    return sa > 0 ? c : -c;
}

/* x + 1 (signed). */
static void big_inc(bigint *x) {
    if (!x->neg) dig_inc(x->d);
    else {
        dig_dec(x->d);
        if (!strcmp(x->d, "0")) x->neg = 0;
    }
}

/* x - 1 (signed). */
static void big_dec(bigint *x) {
    if (!strcmp(x->d, "0")) { strcpy(x->d, "1"); x->neg = 1; }
    else if (x->neg) dig_inc(x->d);
    else dig_dec(x->d);
}

/* A bound as an exact decimal: value = (neg ? -1 : 1) x digits x 10^exp. */
typedef struct {
    int neg;
    char d[NUM_DIGITS + 1]; /* digits, no leading or trailing zeros ("0" for zero, then exp 0) */
    int exp;
} decimal;

/* A double as a decimal: the shortest digits that round-trip. */
static void dec_of(double v, decimal *x) {
    char s[64];
    x->neg = v < 0;
    double a = fabs(v);
    for (int p = 1; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, a);
        if (strtod(s, NULL) == a) break;
    }
    /* s is d[.ddd]e[+-]XX */
    int k = 0;
    const char *q = s;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') x->d[k++] = *q;
    x->d[k] = 0;
    int e = atoi(q + 1);
    x->exp = e - (k - 1);
    while (k > 1 && x->d[k - 1] == '0') { x->d[--k] = 0; x->exp++; } /* 1.50e0 -> 15e-1 -> 15 * 10^-1 */
    if (!strcmp(x->d, "0")) x->exp = 0;
}

/* A JSON number's text as a decimal, exactly (9007199254740993 stays itself, where the double
 * cJSON reads is ...992); 0, or -1 when t is not a JSON number or its digits or exponent do
 * not fit (the caller then reads the double). */
static int dec_of_text(const char *t, decimal *x) {
    const char *q = t;
    int k = 0, frac = 0;
    x->neg = *q == '-';
    if (*q == '-') q++;
    if (*q < '0' || *q > '9' || (q[0] == '0' && q[1] >= '0' && q[1] <= '9')) return -1;
    for (int dot = 0; (*q >= '0' && *q <= '9') || (*q == '.' && !dot); q++) {
        if (*q == '.') {
            if (q[1] < '0' || q[1] > '9') return -1;
            dot = 1;
            continue;
        }
        if (k == 0 && *q == '0') { frac += dot; continue; } /* leading zeros: 0.05 -> 5e-2 */
        if (k >= NUM_DIGITS) return -1;
        x->d[k++] = *q;
        frac += dot;
    }
    long e = 0;
    if (*q == 'e' || *q == 'E') {
        int sign = 1;
        q++;
        if (*q == '+' || *q == '-') sign = *q++ == '-' ? -1 : 1;
        if (*q < '0' || *q > '9') return -1;
        for (; *q >= '0' && *q <= '9'; q++)
            if ((e = e * 10 + (*q - '0')) > 1000) return -1;
        e *= sign;
    }
    if (*q) return -1;
    if (k == 0) { strcpy(x->d, "0"); x->exp = 0; x->neg = 0; return 0; }
    x->d[k] = 0;
    x->exp = (int)e - frac;
    while (k > 1 && x->d[k - 1] == '0') { x->d[--k] = 0; x->exp++; }
    return 0;
}

/* The bound x x 10^j rounded up (ceil) or down, and whether it was exact. 0, or -1 when the
 * digits would not fit NUM_DIGITS. */
static int scaled(const decimal *x, int j, int up, bigint *out, int *exact) {
    int neg = x->neg, e = x->exp;
    const char *d = x->d;
    e += j;
    memset(out, 0, sizeof *out);
    size_t n = strlen(d);
    if (e >= 0) {
        if (n + (size_t)e > NUM_DIGITS || e > NUM_DIGITS) return -1;
        memcpy(out->d, d, n);
        memset(out->d + n, '0', (size_t)e);
        out->d[n + (size_t)e] = 0;
        *exact = 1;
    } else {
        size_t cut = (size_t)-e; /* digits after the point */
        *exact = 1;
        for (size_t i = (cut > n ? 0 : n - cut); i < n; i++) *exact &= d[i] == '0';
        if (cut >= n) strcpy(out->d, "0");
        else {
            memcpy(out->d, d, n - cut);
            out->d[n - cut] = 0;
        }
    }
    big_trim(out->d);
    out->neg = neg && strcmp(out->d, "0") != 0;
    if (!*exact) { /* truncation went toward zero */
        int away = neg ? !up : up; /* rounding away from zero is +1 on the magnitude */
        if (away) dig_inc(out->d);
        out->neg = neg && strcmp(out->d, "0") != 0;
    }
    return 0;
}

/* ---- digit-string ranges as GBNF --------------------------------------------------------- */

/* The layout of one length: L digits, a '.' before digit index dot (dot = L: none). */
typedef struct {
    plume_buf *b;
    int L, dot;
} lay;

/* Append the '.' if digit index i is where it goes. */
static void at_dot(const lay *y, int i) {
    if (i == y->dot) plume_buf_puts(y->b, "\".\" ");
}

/* Digits i .. L-1, any. */
static void any_from(const lay *y, int i) {
    if (i >= y->L) return;
    if (y->dot > i && y->dot < y->L) {
        plume_buf_printf(y->b, "[0-9]{%d} \".\" [0-9]{%d} ", y->dot - i, y->L - y->dot);
    } else {
        at_dot(y, i);
        plume_buf_printf(y->b, "[0-9]{%d} ", y->L - i);
    }
}

/* One digit c at index i. */
static void digit(const lay *y, int i, char c) {
    at_dot(y, i);
    plume_buf_printf(y->b, "\"%c\" ", c);
}

/* A digit class [lo-hi] at index i. */
static void digits(const lay *y, int i, char lo, char hi) {
    at_dot(y, i);
    if (lo == hi) plume_buf_printf(y->b, "\"%c\" ", lo);
    else plume_buf_printf(y->b, "[%c-%c] ", lo, hi);
}

/* Digits i.. that are >= a[i..] (as strings of equal length). */
static void ge_from(const lay *y, const char *a, int i) {
    if (i >= y->L) return;
    int zeros = 1;
    for (int k = i; k < y->L; k++) zeros &= a[k] == '0';
    if (zeros) { any_from(y, i); return; }
    plume_buf_puts(y->b, "( ");
    digit(y, i, a[i]);
    ge_from(y, a, i + 1);
    if (a[i] < '9') {
        plume_buf_puts(y->b, "| ");
        digits(y, i, (char)(a[i] + 1), '9');
        any_from(y, i + 1);
    }
    plume_buf_puts(y->b, ") ");
}

/* Digits i.. that are <= b[i..]. */
static void le_from(const lay *y, const char *b, int i) {
    if (i >= y->L) return;
    int nines = 1;
    for (int k = i; k < y->L; k++) nines &= b[k] == '9';
    if (nines) { any_from(y, i); return; }
    plume_buf_puts(y->b, "( ");
    digit(y, i, b[i]);
    le_from(y, b, i + 1);
    if (b[i] > '0') {
        plume_buf_puts(y->b, "| ");
        digits(y, i, '0', (char)(b[i] - 1));
        any_from(y, i + 1);
    }
    plume_buf_puts(y->b, ") ");
}

/* Digits i.. between a[i..] and b[i..] (a <= b, same length). */
static void between(const lay *y, const char *a, const char *b, int i) {
    while (i < y->L && a[i] == b[i]) { digit(y, i, a[i]); i++; }
    if (i >= y->L) return;
    plume_buf_puts(y->b, "( ");
    digit(y, i, a[i]);
    ge_from(y, a, i + 1);
    if (b[i] - a[i] > 1) {
        plume_buf_puts(y->b, "| ");
        digits(y, i, (char)(a[i] + 1), (char)(b[i] - 1));
        any_from(y, i + 1);
    }
    plume_buf_puts(y->b, "| ");
    digit(y, i, b[i]);
    le_from(y, b, i + 1);
    plume_buf_puts(y->b, ") ");
}

/* s (la digits) with zeros in front up to L digits, into out. */
static void pad(char *out, const char *s, int L) {
    int la = (int)strlen(s);
    memset(out, '0', (size_t)(L - la));
    memcpy(out + (L - la), s, (size_t)la + 1);
}

/* Naturals in [A, B] (digit strings, A <= B) written with at least j + 1 digits (zeros in
 * front up to that, none beyond) and a '.' before the last j: alternatives appended to b,
 * each but the first preceded by "| " (*first tracks it). */
static void nat_range(plume_buf *b, const char *A, const char *B, int j, int *first) {
    int la = (int)strlen(A), lb = (int)strlen(B);
    int L0 = la > j + 1 ? la : j + 1, L1 = lb > j + 1 ? lb : j + 1;
    for (int L = L0; L <= L1; L++) {
        char lo[NUM_DIGITS + 2], hi[NUM_DIGITS + 2], a[NUM_DIGITS + 2], bb[NUM_DIGITS + 2];
        memset(lo, '0', (size_t)L); /* the smallest L-digit form: 0..0 at j + 1 digits, else 10..0 */
        lo[L] = 0;
        if (L > j + 1) lo[0] = '1';
        memset(hi, '9', (size_t)L);
        hi[L] = 0;
        pad(a, A, L);
        if (strcmp(a, lo) < 0) strcpy(a, lo);
        if (lb > L) strcpy(bb, hi);
        else pad(bb, B, L);
        if (strcmp(a, bb) > 0) continue;
        if (!*first) plume_buf_puts(b, "| ");
        *first = 0;
        lay y = {b, L, j > 0 ? L - j : L};
        plume_buf_puts(b, "( ");
        between(&y, a, bb, 0);
        plume_buf_puts(b, ") ");
    }
}

/* The signed integers N in [lo, hi] with j implied fraction digits, as alternatives. */
static void signed_range(plume_buf *b, const bigint *lo, const bigint *hi, int j, int *first) {
    char cap[NUM_DIGITS + 2];
    int capd = NUM_INT_DIGITS + j;
    if (!lo->inf && (int)strlen(lo->d) > capd) capd = (int)strlen(lo->d);
    if (!hi->inf && (int)strlen(hi->d) > capd) capd = (int)strlen(hi->d);
    if (capd > NUM_DIGITS) capd = NUM_DIGITS;
    memset(cap, '9', (size_t)capd);
    cap[capd] = 0;
    /* non-negative part: [max(lo, 0), hi] */
    int hi_nonneg = hi->inf || !hi->neg || !strcmp(hi->d, "0");
    if (hi_nonneg) {
        const char *A = lo->inf || lo->neg ? "0" : lo->d, *B = hi->inf ? cap : hi->d;
        if (dig_cmp(A, B) <= 0) nat_range(b, A, B, j, first);
    }
    /* negative part: N = -M, M in [max(1, -hi), -lo] */
    int lo_neg = lo->inf || (lo->neg && strcmp(lo->d, "0"));
    if (lo_neg) {
        const char *A = (!hi->inf && hi->neg) ? hi->d : "1", *B = lo->inf ? cap : lo->d;
        if (dig_cmp(A, B) <= 0) {
            if (!*first) plume_buf_puts(b, "| ");
            *first = 0;
            plume_buf_puts(b, "\"-\" ( ");
            int f2 = 1;
            nat_range(b, A, B, j, &f2);
            plume_buf_puts(b, ") ");
        }
    }
}

/* Digits after the point that x needs (0 for integers). */
static int frac_digits(const decimal *x) {
    return x->exp < 0 ? -x->exp : 0;
}

/* Read one bound keyword: 0 (absent), 1 (present, its value in *v and exactly in *dec, from the
 * number's text where the parse kept it), or -1 (not a finite number: the error is set). */
static int bound(const cJSON *s, const char *key, double *v, decimal *dec, const char *path, char **err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return 0;
    if (cJSON_IsBool(x) && (!strcmp(key, "exclusiveMinimum") || !strcmp(key, "exclusiveMaximum")))
        return 0; /* draft 4's form: a flag on minimum / maximum (read by the caller) */
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 1e50) {
        plume_fail(err, PLUME_EINVAL, "json schema: %s: \"%s\" is not a number (within 1e50)", path, key);
        return -1;
    }
    *v = x->valuedouble;
    if (!x->valuestring || dec_of_text(x->valuestring, dec)) dec_of(*v, dec);
    return 1;
}

#define MULT_MAX_VALUES 4096 /* multiples of an integer spelled out between two bounds */

/* multipleOf k, as ajv checks it (x / k an integer in doubles): k = 1, a power of two below 1,
 * 0.01 or 0.001 make the value an integer (*is_int set, 1 returned: the caller writes it;
 * for a fraction a narrowing: x / k is then exact in doubles), an integer k above 1 between
 * two bounds spells the multiples out (0: written; at most MULT_MAX_VALUES). Anything else is
 * refused (PLUME_EINVAL). has/v: the bounds minimum, exclusiveMinimum, maximum,
 * exclusiveMaximum as cst_number_expr read them. */
static int multiple_of(plume_buf *b, const cJSON *mo, const int *has, const double *v, int *is_int, const char *path,
                       char **err) {
    if (!cJSON_IsNumber(mo) || !isfinite(mo->valuedouble) || !(mo->valuedouble > 0))
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"multipleOf\" is not a positive number", path);
    double k = mo->valuedouble;
    int e;
    if (k == 1 || k == 0.01 || k == 0.001 || (k < 1 && frexp(k, &e) == 0.5)) { *is_int = 1; return 1; }
    if (k != floor(k) || k > 1e15)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"multipleOf\" %s is not supported (plume enforces integers, "
                          "0.01, 0.001, powers of two, and integer multiples between a minimum and a maximum)", path,
                          mo->valuestring ? mo->valuestring : "");
    double lo = has[0] ? v[0] : has[1] ? v[1] : -INFINITY, hi = has[2] ? v[2] : has[3] ? v[3] : INFINITY;
    if (!isfinite(lo) || !isfinite(hi) || fabs(lo) > 9e15 || fabs(hi) > 9e15)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"multipleOf\" %.0f is supported only between a minimum and "
                          "a maximum (within 9e15)", path, k);
    if (has[0] && has[1]) lo = fmax(v[0], v[1]);
    if (has[2] && has[3]) hi = fmin(v[2], v[3]);
    double first = ceil(lo / k), last = floor(hi / k);
    if (has[1] && first * k <= v[1]) first++;
    if (has[3] && last * k >= v[3]) last--;
    if (last - first + 1 > MULT_MAX_VALUES)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"multipleOf\" %.0f allows more than %d values between the "
                          "bounds", path, k, MULT_MAX_VALUES);
    if (last < first)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: no multiple of %.0f lies within the bounds", path, k);
    plume_buf_puts(b, "( ");
    for (double i = first; i <= last; i++) plume_buf_printf(b, "%s\"%.0f\" ", i > first ? "| " : "", i * k == 0 ? 0.0 : i * k);
    plume_buf_puts(b, ") ");
    return 0;
}

/* GBNF for an integer (is_int) or a number valid against the schema's minimum, maximum,
 * exclusiveMinimum and exclusiveMaximum (and multipleOf, multiple_of); appended to b as one
 * parenthesized expression. */
int cst_number_expr(plume_buf *b, int is_int, const cJSON *s, const char *path, char **err) {
    double v[4];
    decimal dv[4];
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int has[4], any = 0;
    for (int k = 0; k < 4; k++) {
        has[k] = bound(s, keys[k], &v[k], &dv[k], path, err);
        if (has[k] < 0) return PLUME_EINVAL;
    }
    for (int k = 0; k < 4; k += 2) { /* draft 4: "exclusiveMinimum": true makes minimum exclusive */
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, keys[k + 1])) || !has[k]) continue;
        if (!has[k + 1] || (k == 0 ? v[k] >= v[k + 1] : v[k] <= v[k + 1])) v[k + 1] = v[k], dv[k + 1] = dv[k], has[k + 1] = 1;
        has[k] = 0;
    }
    for (int k = 0; k < 4; k++) any |= has[k];
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (mo) {
        int rc = multiple_of(b, mo, has, v, &is_int, path, err);
        if (rc <= 0) return rc; /* written (0) or refused */
    }
    if (!any) { /* the plain forms */
        if (is_int) plume_buf_puts(b, "( \"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ) ");
        else plume_buf_puts(b, "( \"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )? ) ");
        return 0;
    }
    int jmax = 0;
    if (!is_int) {
        jmax = NUM_FRAC;
        for (int k = 0; k < 4; k++)
            if (has[k] && frac_digits(&dv[k]) > jmax) jmax = frac_digits(&dv[k]);
        if (jmax > 20) jmax = 20;
    }
    int first = 1;
    plume_buf_puts(b, "( ");
    for (int j = 0; j <= jmax; j++) {
        bigint lo = {.inf = 1}, hi = {.inf = 1};
        for (int k = 0; k < 4; k++) { /* the tightest of the bounds at this scale */
            if (!has[k]) continue;
            bigint x;
            int exact, lower = k < 2;
            if (scaled(&dv[k], j, lower, &x, &exact)) {
                return plume_fail(err, PLUME_EINVAL, "json schema: %s: \"%s\" needs more than %d digits", path, keys[k],
                                  NUM_DIGITS);
            }
            if (k == 1 && exact) big_inc(&x); /* exclusive: the next integer */
            if (k == 3 && exact) big_dec(&x);
            bigint *t = lower ? &lo : &hi;
            if (t->inf || (lower ? big_cmp(&x, t) > 0 : big_cmp(&x, t) < 0)) *t = x, t->inf = 0;
        }
        if (!lo.inf && !hi.inf && big_cmp(&lo, &hi) > 0) continue;
        signed_range(b, &lo, &hi, j, &first);
    }
    plume_buf_puts(b, ") ");
    if (first)
        return plume_fail(err, PLUME_EINVAL, "json schema: %s: no %s lies within the bounds", path,
                          is_int ? "integer" : "number");
    return 0;
}
