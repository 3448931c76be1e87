/* schema.c -- JSON Schema -> GBNF (docs/STRUCTURED.md "The JSON Schema subset").
 *
 * Each schema node the output can reach becomes one rule, memoized by node, so $ref cycles
 * are rule cycles (recursion) and a shared definition is one rule. A keyword outside the
 * subset is refused with its name and place; annotations are ignored; keywords that do not
 * apply to the generated type are ignored, as JSON Schema says.
 *
 * What is enforced and how:
 *   type (one or a list; without it, the type the keywords imply, or any value), enum/const
 *   (their values spelled out, filtered by type), anyOf (alternatives; one with nothing valid
 *   dropped), oneOf (alternatives: disjoint branches as they are, overlapping ones narrowed
 *   apart by narrow_branch, or not written), allOf and other combinations (merged, flatten),
 *   not (folded in: negate), $ref (JSON pointers, "#", $defs/definitions, $id and anchors
 *   within the document), objects (properties in order, required ones always,
 *   optional ones skippable; additionalProperties false, true or a schema, extra keys after
 *   the named ones and never equal to one), arrays (items, minItems, maxItems), strings
 *   (schema_str.c), integers and numbers with bounds (schema_num.c).
 * Choices that narrow what JSON Schema allows (every answer stays valid): properties come in
 * the schema's order (Gemma calls: the template's sorted order); an object that names
 * properties gets no others unless additionalProperties says so (an object naming none takes
 * any members); keys the schema does not name are written without escapes; whitespace between
 * tokens is at most
 * one space or one newline with up to 20 spaces or tabs (`ws`), so a model cannot loop on it.
 * Gemma tool-call arguments (CST_GEMMA) are written as the chat template writes them: keys
 * bare, strings between <|"|> tokens, no whitespace. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define CST_MAX_DEPTH 100 /* schema nesting followed while compiling */

/* Common rules a grammar uses, appended once at the end. */
enum { U_WS = 1, U_JCHAR = 2, U_JVALUE = 4, U_GCHAR = 8, U_GVALUE = 16 };

struct cst_schema {
    int dialect;
    plume_buf out;             /* the rules */
    const cJSON *doc;     /* the document $ref resolves in */
    struct { const cJSON *node; int32_t id; } *memo;
    int32_t n_memo;
    size_t cap_memo;
    int32_t n_rules;      /* names: s0, s1, ... */
    int draft;            /* the document's $schema: 4, 6, 7, 2019, 2020; 0 unknown (none said) */
    cJSON *arena;         /* the nodes made by combining schemas (schema_merge.c) */
    struct { const cJSON *a, *b, *r; } *mm; /* [n_mm] merges and flattenings made (b NULL: flatten a) */
    int32_t n_mm;
    size_t cap_mm;
    int32_t *mm_ht;       /* [mm_ht_cap] index + 1 into mm by (a, b) hash (0: empty) */
    int32_t mm_ht_cap;
    char nothing[200];    /* why the last combination made accepts nothing */
    int nest;             /* compilers above this one (schema_accepts compiles a part apart) */
    int unsat;            /* the error set says that nothing is valid there (not a keyword refused) */
    unsigned used;
    int depth;
    char **err;
};

/* The keywords that assert something in some draft (4, 6, 7, 2019-09, 2020-12): handled ones,
 * then those plume refuses by name. Every other keyword (title, draft 4's id, x-*, a
 * misspelling such as "maxmimum") is an annotation and is ignored, as JSON Schema says; so
 * are then/else without if. */
static const char *const handled_kw[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                         "properties", "required", "additionalProperties", "patternProperties",
                                         "propertyNames", "minProperties", "maxProperties", "items", "minItems",
                                         "maxItems", "prefixItems", "additionalItems", "uniqueItems", "contains",
                                         "minContains", "minLength", "maxLength", "pattern", "format", "minimum",
                                         "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
static const char *const refused_kw[] = {"maxContains", "$dynamicRef", "$recursiveRef",
                                         "divisibleBy", "disallow", "extends", NULL};
/* Keywords folded into the schema before it is compiled (flatten()), or read where it is. */
static const char *const folded_kw[] = {"if", "not", "dependentRequired", "dependencies", "dependentSchemas",
                                        "unevaluatedProperties", "unevaluatedItems", NULL};

/* Whether s is one of the NULL-terminated list. */
static int in_list(const char *s, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(s, list[i])) return 1;
    return 0;
}

/* Whether keyword k asserts something (an applicator or an assertion of some draft). */
static int asserts(const char *k) { return in_list(k, handled_kw) || in_list(k, refused_kw) || in_list(k, folded_kw); }


/* The first keyword of s that asserts something and is not one of allowed, or NULL. */
static const char *other_keyword(const cJSON *s, const char *const *allowed) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (asserts(k->string) && !in_list(k->string, allowed)) return k->string;
    return NULL;
}

/* ---- JSON values ------------------------------------------------------------------------- */

/* The JSON types a value has, as a bit set (integers are numbers too). */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };

/* The type bits of a JSON value. */
static unsigned value_types(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJ;
    if (cJSON_IsArray(v)) return T_ARR;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsNumber(v)) return T_NUM | (isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble ? T_INT : 0);
    return 0;
}

/* The bit of a type name, or 0. */
static unsigned type_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"null", T_NULL}, {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
        {"string", T_STR}, {"number", T_NUM | T_INT}, {"integer", T_INT}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name)) return names[i].bit;
    return 0;
}

/* Whether (key, Gemma order) a ranks before b: Python's key.lower() order (ASCII folding),
 * what the chat template's dictsort gives. */
static int gemma_key_cmp(const char *a, const char *b) {
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y || !x) return x < y ? -1 : x > y;
    }
}

/* Whether t is a JSON number's text (cJSON also reads "01", "1." and ".5"). */
static int json_number_text(const char *t) {
    if (*t == '-') t++;
    if (*t == '0') t++;
    else if (*t >= '1' && *t <= '9') while (*t >= '0' && *t <= '9') t++;
    else return 0;
    if (*t == '.') {
        if (*++t < '0' || *t > '9') return 0;
        while (*t >= '0' && *t <= '9') t++;
    }
    if (*t == 'e' || *t == 'E') {
        if (*++t == '+' || *t == '-') t++;
        if (*t < '0' || *t > '9') return 0;
        while (*t >= '0' && *t <= '9') t++;
    }
    return !*t;
}

/* Append a number as its text in the schema (kept by cst_json_parse), else as the shortest
 * text that reads back as the same double (cJSON prints 15 digits, which changes
 * 9007199254740993 into another number). */
static void put_number(plume_buf *b, const cJSON *v) {
    char t[40];
    double x = v->valuedouble;
    if (v->valuestring && json_number_text(v->valuestring)) {
        cst_buf_literal(b, v->valuestring, strlen(v->valuestring));
        plume_buf_puts(b, " ");
        return;
    }
    if (x > -1e17 && x < 1e17 && floor(x) == x) snprintf(t, sizeof t, "%lld", (long long)x);
    else
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, x);
            if (strtod(t, NULL) == x) break;
        }
    cst_buf_literal(b, t, strlen(t));
    plume_buf_puts(b, " ");
}

/* Append a JSON value in the dialect's spelling as GBNF literals. JSON: compact text.
 * Gemma: the template's format_argument (strings between <|"|>, keys bare and sorted).
 * 0, or PLUME_EINVAL (a string Gemma cannot spell). */
static int put_value(cst_schema *c, plume_buf *b, const cJSON *v, const char *path) {
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) /* 1e400: no JSON number says it */
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: a number in enum/const is not finite as a double "
                          "(out of range)", path);
    if (cJSON_IsNumber(v)) {
        put_number(b, v);
        return 0;
    }
    if (c->dialect == CST_JSON && (cJSON_IsObject(v) || cJSON_IsArray(v))) { /* members one by one */
        int arr = cJSON_IsArray(v), rc = 0;
        plume_buf_puts(b, arr ? "\"[\" " : "\"{\" ");
        for (const cJSON *x = v->child; x && !rc; x = x->next) {
            if (x != v->child) plume_buf_puts(b, "\",\" ");
            if (!arr) {
                cJSON k = {0};
                k.type = cJSON_String;
                k.valuestring = x->string;
                put_value(c, b, &k, path);
                plume_buf_puts(b, "\":\" ");
            }
            rc = put_value(c, b, x, path);
        }
        plume_buf_puts(b, arr ? "\"]\" " : "\"}\" ");
        return rc;
    }
    if (c->dialect == CST_JSON || !(cJSON_IsString(v) || cJSON_IsObject(v) || cJSON_IsArray(v))) {
        char *t = cJSON_PrintUnformatted(v);
        if (!t) { b->oom = 1; return 0; }
        cst_buf_literal(b, t, strlen(t));
        plume_buf_puts(b, " ");
        free(t);
        return 0;
    }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        for (const char *q = s; *q; q++)
            if (*q == '<' || ((unsigned char)*q < 0x20 && *q != '\t' && *q != '\n' && *q != '\r'))
                return plume_fail(c->err, PLUME_EINVAL,
                                  "json schema: %s: the value \"%s\" holds '<' or a control character, which a Gemma "
                                  "tool-call string cannot", path, s);
        plume_buf_puts(b, "<|\"|> ");
        if (*s) { cst_buf_literal(b, s, strlen(s)); plume_buf_puts(b, " "); }
        plume_buf_puts(b, "<|\"|> ");
        return 0;
    }
    if (cJSON_IsArray(v)) {
        plume_buf_puts(b, "\"[\" ");
        int first = 1;
        for (const cJSON *x = v->child; x; x = x->next) {
            if (!first) plume_buf_puts(b, "\",\" ");
            first = 0;
            if (put_value(c, b, x, path)) return PLUME_EINVAL;
        }
        plume_buf_puts(b, "\"]\" ");
        return 0;
    }
    int n = cJSON_GetArraySize(v), k = 0; /* an object: keys in dictsort order */
    const cJSON **m = malloc((size_t)(n ? n : 1) * sizeof *m);
    if (!m) { b->oom = 1; return 0; }
    for (const cJSON *x = v->child; x; x = x->next) {
        int i = k++;
        while (i > 0 && gemma_key_cmp(x->string, m[i - 1]->string) < 0) { m[i] = m[i - 1]; i--; }
        m[i] = x;
    }
    plume_buf_puts(b, "\"{\" ");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (i) plume_buf_puts(b, "\",\" ");
        cst_buf_literal(b, m[i]->string, strlen(m[i]->string));
        plume_buf_puts(b, " \":\" ");
        rc = put_value(c, b, m[i], path);
    }
    plume_buf_puts(b, "\"}\" ");
    free(m);
    return rc;
}

/* ---- $ref -------------------------------------------------------------------------------- */

/* ref made absolute against the document's base (its root $id, or draft 4's id): a
 * reference with a scheme is kept, another replaces the base's last segment; into out. */
static void id_absolute(const cJSON *doc, const char *ref, char *out, size_t cap) {
    const cJSON *b = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "$id") : NULL;
    if (!cJSON_IsString(b) && cJSON_IsObject(doc)) b = cJSON_GetObjectItemCaseSensitive(doc, "id");
    const char *slash = cJSON_IsString(b) ? strrchr(b->valuestring, '/') : NULL;
    if (strstr(ref, "://") || !slash) snprintf(out, cap, "%s", ref);
    else snprintf(out, cap, "%.*s%s", (int)(slash - b->valuestring + 1), b->valuestring, ref);
    char *h = strchr(out, '#');
    if (h && !h[1]) *h = 0; /* "x.json#" names x.json */
}

/* The subschema under n whose $id (draft 4: id), made absolute against the document's base,
 * is id (absolute too), or whose $anchor is anchor (draft 6/7: an $id "#anchor"); NULL when
 * none. Values of enum/const/examples/default are data, not schemas. (Bases that nested
 * $ids change are not followed: every $id is taken against the document's.) */
static const cJSON *find_named(const cJSON *doc, const cJSON *n, const char *id, const char *anchor, int depth) {
    if (depth > 200 || !(cJSON_IsObject(n) || cJSON_IsArray(n))) return NULL;
    if (cJSON_IsObject(n)) {
        static const char *const idk[] = {"$id", "id"};
        for (int k = 0; k < 2; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, idk[k]);
            if (!cJSON_IsString(v)) continue;
            if (anchor && v->valuestring[0] == '#' && !strcmp(v->valuestring + 1, anchor)) return n;
            char abs[512];
            id_absolute(doc, v->valuestring, abs, sizeof abs);
            if (id && !strcmp(abs, id)) return n;
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(n, "$anchor");
        if (anchor && cJSON_IsString(a) && !strcmp(a->valuestring, anchor)) return n;
    }
    for (const cJSON *k = n->child; k; k = k->next) {
        if (k->string && (!strcmp(k->string, "enum") || !strcmp(k->string, "const") || !strcmp(k->string, "examples") ||
                          !strcmp(k->string, "default")))
            continue;
        const cJSON *r = find_named(doc, k, id, anchor, depth + 1);
        if (r) return r;
    }
    return NULL;
}

/* The node a reference names, or NULL (error set): a JSON pointer ("#", "#/a/b~1c",
 * percent-escapes decoded) in the document, or in the subschema whose $id the part before
 * '#' names; an anchor ("#name": $anchor, or draft 6/7's $id "#name"). A document that is
 * not here (a remote reference) is refused. */
static const cJSON *resolve(cst_schema *c, const char *ref, const char *path) {
    const cJSON *node = c->doc;
    const char *hash = strchr(ref, '#');
    if (hash != ref) { /* a base: the subschema of that $id in this document */
        char base[512];
        size_t n = hash ? (size_t)(hash - ref) : strlen(ref);
        if (n < sizeof base) {
            char abs[512];
            memcpy(base, ref, n);
            base[n] = 0;
            id_absolute(c->doc, base, abs, sizeof abs);
            node = find_named(c->doc, c->doc, abs, NULL, 0);
        } else node = NULL;
        if (!node) {
            plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\": \"%s\" is not supported (a document that is "
                       "not this one: only references within it, by JSON pointer, $id or anchor)", path, ref);
            return NULL;
        }
        if (!hash) return node;
        ref = hash;
    }
    if (ref[1] && ref[1] != '/') { /* an anchor */
        const cJSON *a = find_named(c->doc, node, NULL, ref + 1, 0);
        if (!a) plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\": the anchor \"%s\" is not in this document", path, ref);
        return a;
    }
    const char *p = ref + 1;
    while (node && *p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/' && n + 1 < sizeof tok; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) { ch = p[1] == '0' ? '~' : '/'; p++; }
            else if (ch == '%' && p[1] && p[2]) {
                char hex[3] = {p[1], p[2], 0};
                char *e;
                long v = strtol(hex, &e, 16);
                if (*e == 0 && v > 0) { ch = (char)v; p += 2; }
            }
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsArray(node)) {
            char *e;
            long i = strtol(tok, &e, 10);
            node = *tok && *e == 0 && i >= 0 && i < cJSON_GetArraySize(node) ? cJSON_GetArrayItem(node, (int)i) : NULL;
        } else node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, tok) : NULL;
    }
    if (!node || *p)
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\": \"%s\" does not resolve in this document", path, ref);
    return *p ? NULL : node;
}

/* The node s refers to when it is a bare $ref (followed through chains), else s; NULL on an
 * error or a cycle of bare references. */
static const cJSON *follow(cst_schema *c, const cJSON *s, const char *path) {
    for (int hops = 0; hops < 64; hops++) {
        const cJSON *r = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$ref") : NULL;
        if (!r) return s;
        if (!cJSON_IsString(r)) {
            plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\" is not a string", path);
            return NULL;
        }
        s = resolve(c, r->valuestring, path);
        if (!s) return NULL;
    }
    plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\" chain without a schema (a cycle of references)", path);
    return NULL;
}

static const cJSON *flatten(cst_schema *c, const cJSON *s, const char *path, int depth);

static int is_false(cst_schema *c, const cJSON *s);

/* ---- oneOf: disjoint branches ------------------------------------------------------------ */

/* The type bits a schema can produce (a superset is fine; T_ALL when unsure). */
static unsigned schema_types(cst_schema *c, const cJSON *s, int depth) {
    if (depth > 16) return T_ALL;
    s = follow(c, s, "oneOf");
    s = s ? flatten(c, s, "oneOf", 1) : NULL;
    if (!s || cJSON_IsBool(s)) return T_ALL;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *co = cJSON_GetObjectItemCaseSensitive(s, "const");
    unsigned t = 0;
    if (co) return value_types(co) | (value_types(co) & T_INT ? T_NUM : 0);
    if (cJSON_IsArray(en)) {
        for (const cJSON *x = en->child; x; x = x->next) t |= value_types(x);
        return t | (t & T_INT ? T_NUM : 0);
    }
    const char *comb[2] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(s, comb[k]);
        if (cJSON_IsArray(a)) {
            for (const cJSON *x = a->child; x; x = x->next) t |= schema_types(c, x, depth + 1);
            return t;
        }
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(ty)) t = type_bit(ty->valuestring);
    else if (cJSON_IsArray(ty))
        for (const cJSON *x = ty->child; x; x = x->next) t |= cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
    else return T_ALL;
    return t & T_INT ? t | T_NUM : t;
}

/* The const/enum values of a required property p of object schema s, or NULL. */
static const cJSON *tag_values(cst_schema *c, const cJSON *s, const char *p, int *is_const) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    int required = 0;
    for (const cJSON *x = cJSON_IsArray(req) ? req->child : NULL; x && !required; x = x->next)
        required = cJSON_IsString(x) && !strcmp(x->valuestring, p);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *ps = required && cJSON_IsObject(props) ? cJSON_GetObjectItemCaseSensitive(props, p) : NULL;
    ps = ps ? follow(c, ps, "oneOf") : NULL;
    ps = ps ? flatten(c, ps, "oneOf", 1) : NULL;
    if (!cJSON_IsObject(ps)) return NULL;
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(ps, "const");
    if (co) { *is_const = 1; return co; }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(ps, "enum");
    *is_const = 0;
    return cJSON_IsArray(en) ? en : NULL;
}

/* Whether a value is among a tag's values. */
static int tag_has(const cJSON *vals, int is_const, const cJSON *v) {
    if (is_const) return cJSON_Compare(vals, v, 1);
    for (const cJSON *x = vals->child; x; x = x->next)
        if (cJSON_Compare(x, v, 1)) return 1;
    return 0;
}

static int schema_accepts(cst_schema *c, const cJSON *schema, const char *text, char **err);

/* Whether every const/enum value of a is refused by b, where the values are strings,
 * booleans or null and b holds only keywords plume enforces exactly on them (type, enum,
 * const, and pattern or lengths, not both: a pattern with lengths is narrowed), so that
 * plume's grammar refusing a value means b refuses it. */
static int values_refused(cst_schema *c, const cJSON *a, const cJSON *b) {
    static const char *const exact[] = {"type", "pattern", "minLength", "maxLength", "enum", "const", NULL};
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b) || other_keyword(b, exact)) return 0;
    if (cJSON_GetObjectItemCaseSensitive(b, "pattern") &&
        (cJSON_GetObjectItemCaseSensitive(b, "minLength") || cJSON_GetObjectItemCaseSensitive(b, "maxLength")))
        return 0;
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(a, "const"), *en = cJSON_GetObjectItemCaseSensitive(a, "enum");
    if (!co && !cJSON_IsArray(en)) return 0;
    for (const cJSON *v = co ? co : en->child; v; v = co ? NULL : v->next) {
        if (!cJSON_IsString(v) && !cJSON_IsBool(v) && !cJSON_IsNull(v)) return 0;
        char *t = cJSON_PrintUnformatted(v);
        int r = t ? schema_accepts(c, b, t, NULL) : -1;
        free(t);
        if (r != 0) return 0;
    }
    return 1;
}

/* Whether no value can match both schemas: no type in common, a property both require
 * with const/enum value sets that do not meet, or one's values all refused by the other. */
static int disjoint(cst_schema *c, const cJSON *a, const cJSON *b) {
    if (!(schema_types(c, a, 0) & schema_types(c, b, 0))) return 1;
    if (is_false(c, a) || is_false(c, b)) return 1;
    a = follow(c, a, "oneOf");
    b = follow(c, b, "oneOf");
    a = a ? flatten(c, a, "oneOf", 1) : NULL;
    b = b ? flatten(c, b, "oneOf", 1) : NULL;
    if (values_refused(c, a, b) || values_refused(c, b, a)) return 1;
    const cJSON *props = a ? cJSON_GetObjectItemCaseSensitive(a, "properties") : NULL;
    for (const cJSON *p = cJSON_IsObject(props) && b ? props->child : NULL; p; p = p->next) {
        int ca, cb;
        const cJSON *va = tag_values(c, a, p->string, &ca), *vb = tag_values(c, b, p->string, &cb);
        if (!va || !vb) continue;
        int meet = 0;
        if (ca) meet = tag_has(vb, cb, va);
        else
            for (const cJSON *x = va->child; x && !meet; x = x->next) meet = tag_has(vb, cb, x);
        if (!meet) return 1;
    }
    return 0;
}

/* ---- combining schemas ------------------------------------------------------------------- */

#define CST_MAX_MERGES (1 << 16) /* merges and flattenings one schema may make */

/* The hash slot of the pair (a, b) in a table of cap (a power of two) slots. */
static uint32_t mm_slot(const cJSON *a, const cJSON *b, int32_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)a * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)b * 0xc2b2ae3d27d4eb4full;
    x ^= x >> 29;
    return (uint32_t)x & (uint32_t)(cap - 1);
}

/* The merge (b not NULL) or flattening (b NULL) of a made before, or NULL. */
static const cJSON *mm_find(const cst_schema *c, const cJSON *a, const cJSON *b) {
    if (!c->mm_ht_cap) return NULL;
    for (uint32_t h = mm_slot(a, b, c->mm_ht_cap); c->mm_ht[h]; h = (h + 1) & (uint32_t)(c->mm_ht_cap - 1)) {
        int32_t i = c->mm_ht[h] - 1;
        if (c->mm[i].a == a && c->mm[i].b == b) return c->mm[i].r;
    }
    return NULL;
}

/* Remember a merge or flattening; 0, PLUME_ENOMEM, or PLUME_EINVAL past CST_MAX_MERGES. */
static int mm_put(cst_schema *c, const cJSON *a, const cJSON *b, const cJSON *r) {
    if (c->n_mm >= CST_MAX_MERGES) return PLUME_EINVAL;
    if (2 * (c->n_mm + 1) > c->mm_ht_cap) { /* rehash at half load */
        int32_t cap = c->mm_ht_cap ? c->mm_ht_cap * 2 : 256;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) return PLUME_ENOMEM;
        for (int32_t i = 0; i < c->n_mm; i++) {
            uint32_t h = mm_slot(c->mm[i].a, c->mm[i].b, cap);
            while (ht[h]) h = (h + 1) & (uint32_t)(cap - 1);
            ht[h] = i + 1;
        }
        free(c->mm_ht);
        c->mm_ht = ht;
        c->mm_ht_cap = cap;
    }
    if (plume_grow(&c->mm, &c->cap_mm, (size_t)c->n_mm + 1, sizeof *c->mm)) return PLUME_ENOMEM;
    c->mm[c->n_mm].a = a;
    c->mm[c->n_mm].b = b;
    c->mm[c->n_mm].r = r;
    uint32_t h = mm_slot(a, b, c->mm_ht_cap);
    while (c->mm_ht[h]) h = (h + 1) & (uint32_t)(c->mm_ht_cap - 1);
    c->mm_ht[h] = ++c->n_mm;
    return 0;
}

/* The error of a failed mm_put (memory, or too many combinations). */
static void mm_fail(cst_schema *c, int rc, const char *path) {
    if (rc == PLUME_EINVAL)
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: more than %d schemas combined (allOf, $ref siblings, ...)", path,
                   CST_MAX_MERGES);
    else plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
}

/* s less the keywords of drop, as an arena node referencing the rest. */
static const cJSON *without(cst_schema *c, const cJSON *s, const char *const *drop) {
    cJSON *n = cJSON_CreateObject();
    if (!n) return NULL;
    cJSON_AddItemToArray(c->arena, n);
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(k->string, drop)) cJSON_AddItemReferenceToObject(n, k->string, (cJSON *)k);
    return n;
}

/* a and b conjoined (schema_merge.c), each flattened first; NULL with the error set. */
static const cJSON *conjoin(cst_schema *c, const cJSON *a, const cJSON *b, const char *path, int depth) {
    if (a && b) a = flatten(c, a, path, depth + 1);
    if (a && b) b = flatten(c, b, path, depth + 1);
    if (!a || !b) return NULL;
    const cJSON *r = mm_find(c, a, b);
    if (r) return r;
    char why[160] = "";
    int rc = cst_schema_merge(c->arena, a, b, &r, why, sizeof why, asserts), put = 0;
    if (rc == PLUME_ENOMEM || (!rc && (put = mm_put(c, a, b, r)))) {
        mm_fail(c, rc ? rc : put, path);
        return NULL;
    }
    if (rc > 0) { /* nothing is valid: the schema false (refused where a value must be written) */
        snprintf(c->nothing, sizeof c->nothing, " (schemas combined here: %s)", why);
        cJSON *f = cJSON_CreateFalse();
        if (!f || (put = mm_put(c, a, b, f))) {
            cJSON_Delete(f);
            mm_fail(c, f ? put : PLUME_ENOMEM, path);
            return NULL;
        }
        cJSON_AddItemToArray(c->arena, f);
        return f;
    }
    if (rc < 0) plume_fail(c->err, PLUME_EINVAL, "json schema: %s: the schemas combined here (allOf, $ref and its siblings, "
                           "if/then, dependencies) cannot be merged: %s", path, why);
    return r;
}

/* Whether s is, once its bare $refs are followed and it is flattened, the schema false
 * (nothing valid). */
static int is_false(cst_schema *c, const cJSON *s) {
    if (!s || cJSON_IsTrue(s)) return 0;
    const cJSON *f = follow(c, s, "#");
    f = f ? flatten(c, f, "#", 1) : NULL;
    return f && cJSON_IsFalse(f);
}

static const cJSON *branch_view(cst_schema *c, const cJSON *x, const char *path);
static int names_have(const cJSON *list, const char *name);
static cJSON *types_value(unsigned t);

/* The schema false made by a combination (why says what made it), as an arena node. */
static const cJSON *false_node(cst_schema *c, const char *why) {
    cJSON *f = cJSON_CreateFalse();
    if (!f) { plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
    cJSON_AddItemToArray(c->arena, f);
    snprintf(c->nothing, sizeof c->nothing, " (%s)", why);
    return f;
}

/* The complement of type bits as a schema {"type": [...]} conjoined with acc ("numbers but
 * integers" has no type name: numbers are dropped then, a narrowing). */
static const cJSON *without_types(cst_schema *c, const cJSON *acc, unsigned t, const char *path, int depth) {
    unsigned comp = T_ALL & ~t;
    if ((comp & T_NUM) && !(comp & T_INT)) comp &= ~(unsigned)T_NUM;
    if (!comp) return false_node(c, "\"not\" refuses every type");
    cJSON *n = cJSON_CreateObject();
    if (!n) { plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
    cJSON_AddItemToArray(c->arena, n);
    cJSON_AddItemToObject(n, "type", types_value(comp));
    return conjoin(c, acc, n, path, depth);
}

/* acc (flattened) with "not": x folded in (docs/STRUCTURED.md "not"). Exact for not of true
 * or {} (nothing valid), false, a type, one required name, a const/enum beside acc's own
 * enum/const, and anyOf of those (each negated); narrowed for several required names (the
 * first acc does not require is never written), integer (numbers dropped) and const/enum
 * without an enum beside (their values' types dropped). Anything else: NULL, the error set. */
static const cJSON *negate(cst_schema *c, const cJSON *acc, const cJSON *x, const char *path, int depth) {
    if (depth > 32) {
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\" nested more than 32 deep", path);
        return NULL;
    }
    const cJSON *v = branch_view(c, x, path);
    if (!v) return NULL;
    static const char *const none[] = {NULL}, *const simple[] = {"type", "required", "enum", "const", "anyOf", NULL};
    if (cJSON_IsFalse(v)) return acc;
    if (cJSON_IsTrue(v) || (cJSON_IsObject(v) && !other_keyword(v, none))) return false_node(c, "\"not\" of a schema that accepts everything");
    int n_kw = 0;
    for (const cJSON *k = cJSON_IsObject(v) ? v->child : NULL; k; k = k->next) n_kw += asserts(k->string);
    if (!cJSON_IsObject(v) || other_keyword(v, simple) || n_kw != 1 || !cJSON_IsObject(acc)) {
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\" of this schema is not supported (plume enforces \"not\" "
                   "of true, false, type, const, enum, required, and anyOf of those)", path);
        return NULL;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type"), *rq = cJSON_GetObjectItemCaseSensitive(v, "required");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(v, "enum"), *co = cJSON_GetObjectItemCaseSensitive(v, "const");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(v, "anyOf");
    if (ty) {
        unsigned t = 0;
        if (cJSON_IsString(ty)) t = type_bit(ty->valuestring);
        for (const cJSON *e = cJSON_IsArray(ty) ? ty->child : NULL; e; e = e->next) t |= cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (!t) { plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\": \"type\" is not a type name", path); return NULL; }
        return without_types(c, acc, t, path, depth);
    }
    if (rq) {
        if (!cJSON_IsArray(rq)) { plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\": \"required\" is not an array", path); return NULL; }
        if (!rq->child) return false_node(c, "\"not\" of an empty \"required\"");
        const cJSON *areq = cJSON_GetObjectItemCaseSensitive(acc, "required");
        for (const cJSON *q = rq->child; q; q = q->next)
            if (cJSON_IsString(q) && !names_have(areq, q->valuestring)) { /* this name never written */
                cJSON *n = cJSON_CreateObject(), *ps = cJSON_CreateObject();
                if (!n || !ps) { cJSON_Delete(n); cJSON_Delete(ps); plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
                cJSON_AddItemToArray(c->arena, n);
                cJSON_AddFalseToObject(ps, q->valuestring);
                cJSON_AddItemToObject(n, "properties", ps);
                return conjoin(c, acc, n, path, depth);
            }
        return without_types(c, acc, T_OBJ, path, depth); /* every object of acc has them all */
    }
    if (an) {
        if (!cJSON_IsArray(an)) { plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\": \"anyOf\" is not an array", path); return NULL; }
        for (const cJSON *m = an->child; m && acc; m = m->next) acc = negate(c, acc, m, path, depth + 1);
        return acc;
    }
    /* const / enum: the values refused */
    if (en && !cJSON_IsArray(en)) { plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"not\": \"enum\" is not an array", path); return NULL; }
    const cJSON *aen = cJSON_GetObjectItemCaseSensitive(acc, "enum"), *aco = cJSON_GetObjectItemCaseSensitive(acc, "const");
    if (aco || cJSON_IsArray(aen)) { /* acc's own values less those */
        static const char *const vals[] = {"enum", "const", NULL};
        cJSON *n = (cJSON *)without(c, acc, vals), *l = cJSON_CreateArray();
        if (!n || !l) { cJSON_Delete(l); plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
        for (const cJSON *e = aco ? aco : aen->child; e; e = aco ? NULL : e->next) {
            int out = co ? cJSON_Compare(co, e, 1) : 0;
            for (const cJSON *f = en ? en->child : NULL; f && !out; f = f->next) out = cJSON_Compare(f, e, 1);
            if (!out) cJSON_AddItemReferenceToArray(l, (cJSON *)e);
        }
        if (!l->child) { cJSON_Delete(l); return false_node(c, "\"not\" refuses every enum/const value"); }
        cJSON_AddItemToObject(n, "enum", l);
        return n;
    }
    unsigned t = 0;
    for (const cJSON *e = co ? co : en->child; e; e = co ? NULL : e->next) {
        unsigned vt = value_types(e);
        t |= vt & (T_NUM | T_INT) ? T_NUM | T_INT : vt;
    }
    return without_types(c, acc, t, path, depth);
}

/* s with its $ref (when something is beside it), allOf, if/then/else and dependencies folded
 * in: a node with none of them, or s itself (a bare $ref stays, so that recursion is a rule
 * cycle). NULL with the error set. Narrowings (docs/STRUCTURED.md): if/then/else is held to
 * if and then (a value valid against both is valid); dependencies always hold (the names a
 * property needs always required; a dependent schema merged and its property required). */
static const cJSON *flatten(cst_schema *c, const cJSON *s, const char *path, int depth) {
    if (depth > 32) {
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: allOf / $ref combined more than 32 deep", path);
        return NULL;
    }
    if (!cJSON_IsObject(s)) return s;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *iff = cJSON_GetObjectItemCaseSensitive(s, "if"), *then = cJSON_GetObjectItemCaseSensitive(s, "then");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(s, "dependentRequired");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(s, "dependentSchemas");
    const cJSON *dep = cJSON_GetObjectItemCaseSensitive(s, "dependencies");
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(s, "not");
    static const char *const only_ref[] = {"$ref", NULL};
    if (ref && !other_keyword(s, only_ref)) return s; /* bare: its rule (siblings are merged in every draft: ajv applies them) */
    if (!ref && !all && !iff && !dr && !ds && !dep && !nt) return s;
    const cJSON *done = mm_find(c, s, NULL);
    if (done) return done;
    static const char *const drop[] = {"$ref", "allOf", "if", "then", "else", "dependentRequired", "dependentSchemas",
                                       "dependencies", "not", NULL};
    const cJSON *acc = without(c, s, drop);
    if (!acc) { plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
    if (ref) acc = conjoin(c, acc, follow(c, s, path), path, depth);
    if (all && !cJSON_IsArray(all)) {
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"allOf\" is not an array", path);
        return NULL;
    }
    for (const cJSON *m = all ? all->child : NULL; m && acc; m = m->next) {
        const cJSON *f = follow(c, m, path);
        acc = f ? conjoin(c, acc, f, path, depth) : NULL;
    }
    if (acc && iff && !then && cJSON_GetObjectItemCaseSensitive(s, "else") &&
        (cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties") || cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems"))) {
        /* validators differ on whether a passing if without then evaluates its properties (ajv: no) */
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"if\" with \"else\" but no \"then\" beside unevaluated* is "
                   "not supported", path);
        return NULL;
    }
    if (acc && iff && (then || cJSON_GetObjectItemCaseSensitive(s, "else"))) acc = conjoin(c, acc, iff, path, depth);
    if (acc && iff && then) acc = conjoin(c, acc, then, path, depth);
    const cJSON *lists[3] = {dr, ds, dep};
    for (int l = 0; l < 3 && acc; l++)
        for (const cJSON *d = cJSON_IsObject(lists[l]) ? lists[l]->child : NULL; d && acc; d = d->next) {
            if (cJSON_IsArray(d)) { /* names required when d->string is present: always, here */
                cJSON *n = cJSON_CreateObject();
                if (!n) { plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
                cJSON_AddItemToArray(c->arena, n);
                cJSON_AddItemReferenceToObject(n, "required", (cJSON *)d);
                acc = conjoin(c, acc, n, path, depth);
            } else { /* the name required too, so that the schema applies indeed (its annotations count) */
                cJSON *n = cJSON_CreateObject(), *names = cJSON_CreateArray();
                if (!n || !names) {
                    cJSON_Delete(n);
                    cJSON_Delete(names);
                    plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
                    return NULL;
                }
                cJSON_AddItemToArray(c->arena, n);
                cJSON_AddItemToArray(names, cJSON_CreateString(d->string));
                cJSON_AddItemToObject(n, "required", names);
                const cJSON *f = follow(c, d, path);
                acc = f ? conjoin(c, acc, f, path, depth) : NULL;
                if (acc) acc = conjoin(c, acc, n, path, depth);
            }
        }
    if (acc && nt && !cJSON_IsFalse(acc)) acc = negate(c, flatten(c, acc, path, depth + 1), nt, path, depth + 1);
    int put = acc ? mm_put(c, s, NULL, acc) : 0;
    if (put) { mm_fail(c, put, path); return NULL; }
    return acc;
}

/* s's anyOf / oneOf (kw, list) with s's other keywords merged into each branch, as a node
 * {kw: [...]}. A branch that contradicts them is dropped (it matches nothing here); so is,
 * under anyOf, one plume cannot merge (a narrowing). NULL with the error set. */
static const cJSON *distribute(cst_schema *c, const cJSON *s, const char *kw, const cJSON *list, const char *path) {
    const char *dk[] = {kw, NULL};
    const cJSON *rest = without(c, s, dk);
    cJSON *n = cJSON_CreateObject(), *l = cJSON_CreateArray();
    if (!rest || !n || !l) {
        cJSON_Delete(n);
        cJSON_Delete(l);
        plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
        return NULL;
    }
    cJSON_AddItemToArray(c->arena, n);
    cJSON_AddItemToObject(n, kw, l);
    rest = flatten(c, rest, path, 1);
    char why[160] = "";
    int i = 0;
    for (const cJSON *b = cJSON_IsArray(list) ? list->child : NULL; b && rest; b = b->next, i++) {
        const cJSON *f = follow(c, b, path);
        f = f ? flatten(c, f, path, 1) : NULL;
        if (!f) return NULL;
        const cJSON *r = mm_find(c, rest, f);
        int found = r != NULL, put = 0;
        int rc = found ? 0 : cst_schema_merge(c->arena, rest, f, &r, why, sizeof why, asserts);
        if (rc == PLUME_ENOMEM || (!rc && !found && (put = mm_put(c, rest, f, r)))) {
            mm_fail(c, rc ? rc : put, path);
            return NULL;
        }
        if (rc < 0 && !strcmp(kw, "oneOf")) {
            plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"oneOf\" branch %d cannot be merged with the keywords "
                       "beside it: %s", path, i, why);
            return NULL;
        }
        if (!rc) cJSON_AddItemReferenceToArray(l, (cJSON *)r);
    }
    if (rest && !l->child) {
        plume_fail(c->err, PLUME_EINVAL, "json schema: %s: no \"%s\" branch is compatible with the keywords beside it%s%s",
                   path, kw, *why ? ": " : "", why);
        return NULL;
    }
    return rest ? n : NULL;
}

/* ---- oneOf: narrowing an overlapping branch ---------------------------------------------- */

/* x with its $refs followed and its combinations flattened: exactly the schema x is, as a
 * node without $ref (or a boolean); NULL with the error set, or on a cycle. */
static const cJSON *branch_view(cst_schema *c, const cJSON *x, const char *path) {
    for (int hops = 0; x && hops < 64; hops++) {
        x = flatten(c, x, path, 1);
        if (!cJSON_IsObject(x) || !cJSON_GetObjectItemCaseSensitive(x, "$ref")) return x;
        x = follow(c, x, path); /* bare, or a draft that ignores its siblings: exact */
    }
    return NULL;
}

/* Whether the string array list holds name. */
static int names_have(const cJSON *list, const char *name) {
    for (const cJSON *x = cJSON_IsArray(list) ? list->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && !strcmp(x->valuestring, name)) return 1;
    return 0;
}

/* A "type" value of type bits (integer alone, or number). */
static cJSON *types_value(unsigned t) {
    static const struct { unsigned bit; const char *name; } names[] = {
        {T_NULL, "null"}, {T_BOOL, "boolean"}, {T_OBJ, "object"}, {T_ARR, "array"}, {T_STR, "string"}};
    cJSON *l = cJSON_CreateArray();
    for (size_t k = 0; l && k < sizeof names / sizeof *names; k++)
        if (t & names[k].bit) cJSON_AddItemToArray(l, cJSON_CreateString(names[k].name));
    if (l && (t & T_INT)) cJSON_AddItemToArray(l, cJSON_CreateString(t & T_NUM ? "number" : "integer"));
    return l;
}

/* oneOf branch i narrowed so that nothing it writes is valid against another branch (a
 * narrowing, docs/STRUCTURED.md "oneOf"), or NULL when plume finds no such narrowing (or on
 * an error, then set). Against each branch j it overlaps, one discriminator: the types of i
 * that j cannot have; else, i held to objects and one of: a property p of i that j gives a
 * disjoint schema, or that j forbids (additionalProperties false, p not named, no
 * patternProperties), made required; else a name j requires and i does not, never written.
 * Every value written is valid against i and against no other branch. */
static const cJSON *narrow_branch(cst_schema *c, const cJSON *list, int i, const char *path) {
    const cJSON *x = cJSON_GetArrayItem(list, i), *a = branch_view(c, x, path);
    if (!cJSON_IsObject(a)) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *areq = cJSON_GetObjectItemCaseSensitive(a, "required");
    unsigned ta = schema_types(c, a, 0), types = ta;
    const char *req[64], *out[64]; /* names made required; names never written */
    int n_req = 0, n_out = 0, j = 0;
    for (const cJSON *y = list->child; y; y = y->next, j++) {
        if (j == i || is_false(c, y) || disjoint(c, x, y)) continue;
        if (c->err && *c->err) return NULL;
        const cJSON *b = branch_view(c, y, path);
        if (!cJSON_IsObject(b)) return NULL; /* true (or an error): nothing excludes it */
        unsigned r = types & ~schema_types(c, b, 0);
        if ((r & T_NUM) && !(r & T_INT)) r &= ~(unsigned)T_NUM; /* "numbers but integers": no type says it */
        if (r) { types = r; continue; }
        if (!(types & T_OBJ)) return NULL;
        const cJSON *bprops = cJSON_GetObjectItemCaseSensitive(b, "properties");
        const cJSON *bap = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
        const cJSON *bpp = cJSON_GetObjectItemCaseSensitive(b, "patternProperties");
        const cJSON *breq = cJSON_GetObjectItemCaseSensitive(b, "required");
        const char *found = NULL;
        for (int pass = 0; pass < 2 && !found; pass++) /* the properties i requires first */
            for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p && !found; p = p->next) {
                if (names_have(areq, p->string) != !pass) continue;
                const cJSON *bp = cJSON_IsObject(bprops) ? cJSON_GetObjectItemCaseSensitive(bprops, p->string) : NULL;
                if (bp ? disjoint(c, p, bp) : cJSON_IsFalse(bap) && !bpp) found = p->string;
                if (c->err && *c->err) return NULL;
            }
        if (found) {
            int have = 0;
            for (int k = 0; k < n_req; k++) have |= !strcmp(req[k], found);
            if (!have) {
                if (n_req == 64) return NULL;
                req[n_req++] = found;
            }
        } else { /* a name b requires and a does not: never written */
            for (const cJSON *q = cJSON_IsArray(breq) ? breq->child : NULL; q && !found; q = q->next)
                if (cJSON_IsString(q) && !names_have(areq, q->valuestring)) found = q->valuestring;
            if (found) {
                int have = 0;
                for (int k = 0; k < n_out; k++) have |= !strcmp(out[k], found);
                if (!have) {
                    if (n_out == 64) return NULL;
                    out[n_out++] = found;
                }
            }
        }
        if (!found) return NULL;
        types &= T_OBJ;
    }
    cJSON *n = cJSON_CreateObject();
    if (!n) { plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory"); return NULL; }
    cJSON_AddItemToArray(c->arena, n);
    if (types != ta) cJSON_AddItemToObject(n, "type", types_value(types));
    if (n_req) {
        cJSON *l = cJSON_CreateArray();
        for (int k = 0; l && k < n_req; k++) cJSON_AddItemToArray(l, cJSON_CreateString(req[k]));
        cJSON_AddItemToObject(n, "required", l);
    }
    if (n_out) {
        cJSON *ps = cJSON_AddObjectToObject(n, "properties");
        for (int k = 0; ps && k < n_out; k++) cJSON_AddFalseToObject(ps, out[k]);
    }
    return n->child ? conjoin(c, a, n, path, 1) : a;
}

/* ---- compiling --------------------------------------------------------------------------- */

static int rule_for(cst_schema *c, const cJSON *s, const char *path, char *name);

/* A child path "path/seg" (truncated to fit). */
static void sub_path(char *out, size_t cap, const char *path, const char *seg) {
    snprintf(out, cap, "%s/%s", path, seg);
}

/* The name of the any-value rule of the dialect (marking it used). */
static const char *any_value(cst_schema *c) {
    c->used |= c->dialect == CST_GEMMA ? U_GVALUE : U_JVALUE;
    return c->dialect == CST_GEMMA ? "gvalue" : "jvalue";
}

/* Separator between members or items: JSON "ws , ws", Gemma ",". */
static const char *sep(cst_schema *c) {
    if (c->dialect == CST_GEMMA) return "\",\" ";
    c->used |= U_WS;
    return "ws \",\" ws ";
}

/* The rule of a subschema (rule_for), or of any value when sub is NULL or true. */
static int value_rule(cst_schema *c, const cJSON *sub, const char *path, char *name) {
    if (!sub || cJSON_IsTrue(sub)) { snprintf(name, 64, "%s", any_value(c)); return 0; }
    return rule_for(c, sub, path, name);
}

/* A key as the dialect writes it, as GBNF: JSON "\"name\"" (escaped), Gemma the bare name or,
 * when bare would not parse back, <|"|>name<|"|>. */
static int put_key(cst_schema *c, plume_buf *b, const char *name, const char *path) {
    if (c->dialect == CST_JSON) {
        cJSON *s = cJSON_CreateString(name);
        char *t = s ? cJSON_PrintUnformatted(s) : NULL;
        cJSON_Delete(s);
        if (!t) { b->oom = 1; return 0; }
        cst_buf_literal(b, t, strlen(t));
        plume_buf_puts(b, " ");
        free(t);
        return 0;
    }
    int bare = *name && name[0] != ' ' && name[strlen(name) - 1] != ' ';
    for (const char *q = name; *q && bare; q++) bare = !strchr(",:{}[]<\t\n\r", *q) && (unsigned char)*q >= 0x20;
    if (bare) { cst_buf_literal(b, name, strlen(name)); plume_buf_puts(b, " "); return 0; }
    cJSON v = {0};
    v.type = cJSON_String;
    v.valuestring = (char *)name;
    return put_value(c, b, &v, path);
}

/* A trie node of the names extra keys must avoid. */
typedef struct {
    uint32_t cp;      /* the character into this node */
    int32_t first;    /* first child, or -1 */
    int32_t next;     /* next sibling, or -1 */
    int end;          /* a name ends here */
} xnode;

/* Rules for a key that is none of names[0, n): one rule per trie node of the names, where a
 * character that leaves the trie leads to a free tail. base: rule name prefix. JSON keys are
 * "..." with plain characters (no escapes, so a key's text is its value); Gemma keys bare. */
static int put_extra_key(cst_schema *c, const char *base, const char *const *names, int32_t n) {
    int32_t cap = 1, used = 1;
    for (int32_t i = 0; i < n; i++) cap += (int32_t)strlen(names[i]);
    xnode *t = malloc((size_t)cap * sizeof *t);
    if (!t) { c->out.oom = 1; return 0; }
    t[0] = (xnode){0, -1, -1, 0};
    for (int32_t i = 0; i < n; i++) {
        int32_t at = 0;
        for (const unsigned char *q = (const unsigned char *)names[i]; *q;) {
            uint32_t cp = *q;
            int k = cp < 0x80 ? 1 : cp >= 0xf0 ? 4 : cp >= 0xe0 ? 3 : 2;
            if (k > 1) cp &= 0x3f >> (k - 1);
            for (int j = 1; j < k && q[j]; j++) cp = (cp << 6) | (q[j] & 0x3f);
            q += k;
            int32_t ch = t[at].first;
            while (ch >= 0 && t[ch].cp != cp) ch = t[ch].next;
            if (ch < 0) {
                ch = used++;
                t[ch] = (xnode){cp, -1, t[at].first, 0};
                t[at].first = ch;
            }
            at = ch;
        }
        t[at].end = 1;
    }
    plume_buf *o = &c->out;
    const char *cls = c->dialect == CST_GEMMA ? "A-Za-z0-9_\\-" : "^\"\\\\\\x00-\\x1F";
    const char *close = c->dialect == CST_GEMMA ? "" : "\"\\\"\" ";
    plume_buf_printf(o, "%s-t ::= [%s]* %s\n", base, cls, *close ? close : "");
    for (int32_t k = 0; k < used; k++) {
        plume_buf_printf(o, "%s-%d ::= ", base, k);
        int alts = 0;
        if (!t[k].end && (c->dialect == CST_JSON || k > 0)) { plume_buf_puts(o, *close ? close : "\"\" "); alts++; }
        plume_buf others = {0}; /* the characters that leave the trie here */
        plume_buf_puts(&others, cls);
        for (int32_t ch = t[k].first; ch >= 0; ch = t[ch].next) {
            int usable = c->dialect == CST_GEMMA
                             ? ((t[ch].cp >= 'a' && t[ch].cp <= 'z') || (t[ch].cp >= 'A' && t[ch].cp <= 'Z') ||
                                (t[ch].cp >= '0' && t[ch].cp <= '9') || t[ch].cp == '_' || t[ch].cp == '-')
                             : t[ch].cp >= 0x20 && t[ch].cp != '"' && t[ch].cp != '\\';
            if (!usable) continue;
            if (alts++) plume_buf_puts(o, "| ");
            plume_buf_puts(o, "[");
            cst_buf_class_cp(o, t[ch].cp);
            plume_buf_printf(o, "] %s-%d ", base, ch);
            if (c->dialect == CST_JSON) cst_buf_class_cp(&others, t[ch].cp);
        }
        if (alts++) plume_buf_puts(o, "| ");
        if (c->dialect == CST_GEMMA) { /* [allowed] minus the children: a negated class of both */
            plume_buf_puts(o, "[^\\x00-\\x2C\\x2E\\x2F\\x3A-\\x40\\x5B-\\x5E\\x60\\x7B-\\U0010FFFF");
            for (int32_t ch = t[k].first; ch >= 0; ch = t[ch].next)
                if (t[ch].cp < 0x80) cst_buf_class_cp(o, t[ch].cp);
            plume_buf_printf(o, "] %s-t\n", base);
        } else {
            plume_buf_printf(o, "[%s] %s-t\n", others.p ? others.p : cls, base);
        }
        free(others.p);
    }
    free(t);
    return 0;
}

/* Order of the names in an object: the schema's (JSON), or dictsort (Gemma). */
typedef struct {
    const char *name;
    const cJSON *schema; /* NULL: any value */
    int required;
} member;

/* An object's members into mem (*m of them): the properties in order, then required names
 * not among them, marked required; sorted in the template's dictsort order for Gemma. */
static int object_members(cst_schema *c, const char *path, const cJSON *props, const cJSON *req, const cJSON *addl,
                          const cJSON *extra_schema, member *mem, int32_t *m_out) {
    int32_t m = 0;
    int rc = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        int dup = 0;
        for (int32_t i = 0; i < m && !dup; i++) dup = !strcmp(mem[i].name, p->string);
        if (!dup) mem[m++] = (member){p->string, p, 0};
    }
    int32_t named = m; /* names a property may not take (false) stay in the list, never written */
    for (const cJSON *r = req ? req->child : NULL; r && !rc; r = r->next) {
        if (!cJSON_IsString(r)) { rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"required\" holds a non-string", path); break; }
        int32_t i = 0;
        while (i < m && strcmp(mem[i].name, r->valuestring)) i++;
        if (i == m) {
            if (addl && is_false(c, addl)) {
                c->unsat = 1;
                rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: required \"%s\" is not in \"properties\" and "
                                "additionalProperties is false: no object is valid", path, r->valuestring);
                break;
            }
            mem[m++] = (member){r->valuestring, extra_schema, 0};
        }
        if (i < named && is_false(c, mem[i].schema)) {
            c->unsat = 1;
            rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: required \"%s\" has the schema false: no object is "
                            "valid", path, r->valuestring);
            break;
        }
        mem[i].required = 1;
    }
    if (!rc && c->dialect == CST_GEMMA) /* the template's dictsort order (stable) */
        for (int32_t i = 1; i < m; i++) {
            member x = mem[i];
            int32_t j = i;
            for (; j > 0 && gemma_key_cmp(x.name, mem[j - 1].name) < 0; j--) mem[j] = mem[j - 1];
            mem[j] = x;
        }
    *m_out = m;
    return rc;
}

/* The member rules NAME-kI ::= key ws ":" ws value, one per member that may be written;
 * names[] gets every member's name. */
static int object_member_rules(cst_schema *c, const char *path, const char *self, const member *mem, int32_t m,
                               const char **names) {
    int rc = 0;
    for (int32_t i = 0; i < m && !rc; i++) {
        char vname[64], sp[512];
        names[i] = mem[i].name;
        if (is_false(c, mem[i].schema)) continue; /* never written (not required: checked) */
        sub_path(sp, sizeof sp, path, mem[i].name);
        rc = value_rule(c, mem[i].schema, sp, vname);
        if (rc) break;
        plume_buf kv = {0};
        plume_buf_printf(&kv, "%s-k%d ::= ", self, i);
        rc = put_key(c, &kv, mem[i].name, sp);
        if (c->dialect == CST_GEMMA) plume_buf_printf(&kv, "\":\" %s\n", vname);
        else { plume_buf_printf(&kv, "ws \":\" ws %s\n", vname); c->used |= U_WS; }
        plume_buf_put(&c->out, kv.p ? kv.p : "", kv.len);
        if (kv.oom) c->out.oom = 1;
        free(kv.p);
    }
    return rc;
}

/* The rule for the other keys, NAME-x ::= key-not-named ws ":" ws value. */
static int object_extra_rule(cst_schema *c, const char *path, const char *self, const cJSON *extra_schema,
                             const char **names, int32_t m) {
    char vname[64], base[64 + 4], sp[512]; /* base: self (under 64 bytes) "-xk" */
    sub_path(sp, sizeof sp, path, "additionalProperties");
    int rc = value_rule(c, extra_schema, sp, vname);
    snprintf(base, sizeof base, "%s-xk", self);
    if (!rc) rc = put_extra_key(c, base, names, m);
    if (c->dialect == CST_JSON) {
        plume_buf_printf(&c->out, "%s-x ::= \"\\\"\" %s-0 ws \":\" ws %s\n", self, base, vname);
        c->used |= U_WS;
    } else plume_buf_printf(&c->out, "%s-x ::= %s-0 \":\" %s\n", self, base, vname);
    return rc;
}

/* The rules P(i, e), NAME-pIe: members i on, e: whether one was written already. */
static void object_presence_rules(cst_schema *c, const char *self, const member *mem, int32_t m, int extras) {
    for (int32_t i = m; i >= 0; i--)
        for (int e = 0; e < 2; e++) {
            plume_buf_printf(&c->out, "%s-p%d%d ::= ", self, i, e);
            const char *s0 = e ? sep(c) : "";
            if (i == m) {
                if (extras) plume_buf_printf(&c->out, "( %s%s-x ( %s%s-x )* )?\n", s0, self, sep(c), self);
                else plume_buf_puts(&c->out, "\"\"\n");
            } else if (is_false(c, mem[i].schema)) plume_buf_printf(&c->out, "%s-p%d%d\n", self, i + 1, e);
            else if (mem[i].required) plume_buf_printf(&c->out, "%s%s-k%d %s-p%d1\n", s0, self, i, self, i + 1);
            else plume_buf_printf(&c->out, "%s%s-k%d %s-p%d1 | %s-p%d%d\n", s0, self, i, self, i + 1, self, i + 1, e);
        }
}

/* Whether schema (a node of c's document) accepts the JSON text: its grammar compiled apart
 * and run over the text. 1 or 0; -1 when it cannot be compiled (*err set). */
static int schema_accepts(cst_schema *c, const cJSON *schema, const char *text, char **err) {
    cst_schema *sub = NULL;
    char name[64], *g = NULL;
    if (c->nest >= 4) return plume_fail(err, PLUME_EINVAL, "json schema: values checked against keywords nested too deep"), -1;
    int rc = cst_schema_new(&sub, CST_JSON, err);
    if (!rc) sub->nest = c->nest + 1;
    if (!rc) rc = cst_schema_rule(sub, c->doc, schema, "#", name);
    if (!rc) {
        plume_buf_printf(&sub->out, "root ::= %s\n", name);
        rc = cst_schema_finish(sub, &g);
    }
    cst_schema_free(sub);
    cst_grammar gr;
    cst_dfa *d = NULL;
    int r = -1;
    if (!rc && !cst_grammar_parse(&gr, g, strlen(g), err)) {
        if (!cst_dfa_new(&d, &gr, err)) r = cst_dfa_matches(d, text, strlen(text));
        cst_dfa_free(d);
        cst_grammar_free(&gr);
    }
    free(g);
    return r;
}

/* Whether a property name is valid against schema (1 or 0; -1: not compiled, *err set). */
static int name_accepted(cst_schema *c, const cJSON *schema, const char *name, char **err) {
    cJSON *v = cJSON_CreateString(name);
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (!t) return plume_fail(err, PLUME_ENOMEM, "json schema: out of memory"), -1;
    int r = schema_accepts(c, schema, t, err);
    free(t);
    return r;
}

/* {"allOf": [a, b]} as an arena node (a NULL: b). */
static const cJSON *both(cst_schema *c, const cJSON *a, const cJSON *b) {
    if (!a) return b;
    cJSON *n = cJSON_CreateObject(), *l = cJSON_CreateArray();
    if (!n || !l) { cJSON_Delete(n); cJSON_Delete(l); return NULL; }
    cJSON_AddItemToArray(c->arena, n);
    cJSON_AddItemReferenceToArray(l, (cJSON *)a);
    cJSON_AddItemReferenceToArray(l, (cJSON *)b);
    cJSON_AddItemToObject(n, "allOf", l);
    return n;
}

/* The object keywords beyond properties: patternProperties (a named member whose name
 * matches takes the pattern's schema too), propertyNames (a name it refuses is not written,
 * or the schema is refused when that name is required), minProperties (optional members made
 * required, in order), maxProperties (the optional members past it not written). Narrowings:
 * with patternProperties or propertyNames no other names are written, nor with maxProperties
 * below what could be written. */
static int object_narrow(cst_schema *c, const cJSON *s, const char *path, member *mem, int32_t m, int *extras) {
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(s, "patternProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(s, "propertyNames");
    char *e2 = NULL;
    if (pp && !cJSON_IsObject(pp))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"patternProperties\" is not an object", path);
    for (const cJSON *p = pp ? pp->child : NULL; p; p = p->next) {
        cJSON *pat = cJSON_CreateObject();
        if (!pat) return plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
        cJSON_AddItemToArray(c->arena, pat);
        cJSON_AddStringToObject(pat, "type", "string");
        cJSON_AddStringToObject(pat, "pattern", p->string);
        for (int32_t i = 0; i < m; i++) {
            int r = name_accepted(c, pat, mem[i].name, &e2);
            if (r < 0) {
                int rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"patternProperties\": %s", path, e2);
                free(e2);
                return rc;
            }
            if (r && !(mem[i].schema = both(c, mem[i].schema, p))) return plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
        }
        *extras = 0;
    }
    for (int32_t i = 0; pn && i < m; i++) {
        int r = name_accepted(c, pn, mem[i].name, &e2);
        if (r < 0) {
            int rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"propertyNames\": %s", path, e2);
            free(e2);
            return rc;
        }
        if (r) continue;
        if (mem[i].required)
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: required \"%s\" is refused by \"propertyNames\"", path,
                              mem[i].name);
        static cJSON no = {.type = cJSON_False};
        mem[i].schema = &no;
    }
    if (pn) *extras = 0;
    const cJSON *lo_kw = cJSON_GetObjectItemCaseSensitive(s, "minProperties"), *hi_kw = cJSON_GetObjectItemCaseSensitive(s, "maxProperties");
    if ((lo_kw && !cJSON_IsNumber(lo_kw)) || (hi_kw && !cJSON_IsNumber(hi_kw)))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"minProperties\" / \"maxProperties\" is not a number", path);
    int32_t req = 0, writable = 0;
    for (int32_t i = 0; i < m; i++) {
        req += mem[i].required;
        writable += !is_false(c, mem[i].schema);
    }
    double lo = lo_kw ? lo_kw->valuedouble : 0, hi = hi_kw ? hi_kw->valuedouble : 1e300;
    for (int32_t i = 0; i < m && req < lo; i++)
        if (!mem[i].required && !is_false(c, mem[i].schema)) mem[i].required = 1, req++;
    if (req < lo)
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"minProperties\" %g is more than the named properties "
                          "plume writes", path, lo);
    if (req > hi)
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: more properties are required than \"maxProperties\" %g",
                          path, hi);
    if (hi_kw && (*extras || writable > hi)) {
        *extras = 0;
        double room = hi - req;
        static cJSON no = {.type = cJSON_False};
        for (int32_t i = 0; i < m; i++)
            if (!mem[i].required && !is_false(c, mem[i].schema)) {
                if (room >= 1) room -= 1;
                else mem[i].schema = &no;
            }
    }
    return 0;
}

/* An object's body: "{" members "}" through the P(i, e) rules of the file's design (member
 * i on, e: whether one was written already, so a separator is due). */
static int object_body(cst_schema *c, const cJSON *s, const char *path, const char *self, plume_buf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (!addl) /* every name plume writes is evaluated by properties: the others are additional */
        addl = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    if (props && !cJSON_IsObject(props))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"properties\" is not an object", path);
    if (req && !cJSON_IsArray(req))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"required\" is not an array", path);
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"additionalProperties\" is not a schema", path);
    int extras = addl ? !is_false(c, addl) : !props; /* may other keys come? */
    const cJSON *extra_schema = addl && cJSON_IsObject(addl) ? addl : NULL;
    int32_t n = cJSON_GetArraySize(props) + cJSON_GetArraySize(req), m = 0;
    member *mem = malloc((size_t)(n ? n : 1) * sizeof *mem);
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!mem || !names) { free(mem); free(names); b->oom = 1; return 0; }
    int rc = object_members(c, path, props, req, addl, extra_schema, mem, &m);
    if (!rc) rc = object_narrow(c, s, path, mem, m, &extras);
    if (!rc) rc = object_member_rules(c, path, self, mem, m, names);
    if (!rc && extras) rc = object_extra_rule(c, path, self, extra_schema, names, m);
    if (!rc) object_presence_rules(c, self, mem, m, extras);
    if (c->dialect == CST_GEMMA) plume_buf_printf(b, "\"{\" %s-p00 \"}\" ", self);
    else {
        plume_buf_printf(b, "\"{\" ws %s-p00 ws \"}\" ", self);
        c->used |= U_WS;
    }
    free(mem);
    free(names);
    return rc;
}

/* A tuple: "[" the prefix's schemas in order, then items after them (rest: NULL any value,
 * false none), lo to hi (-1: no bound) items in all. */
static int tuple_body(cst_schema *c, const cJSON *prefix, const cJSON *rest, double lo, double hi, const char *path,
                      plume_buf *b) {
    const char *ws = c->dialect == CST_GEMMA ? "" : "ws ";
    if (*ws) c->used |= U_WS;
    int k = cJSON_GetArraySize(prefix), rc = 0, n = 0;
    char name[64], sp[512], seg[32];
    plume_buf_printf(b, "\"[\" %s", ws);
    int opened = 0; /* optional groups to close */
    for (const cJSON *x = prefix->child; x && !rc && (hi < 0 || n < hi); x = x->next, n++) {
        if (is_false(c, x)) { /* no item may stand here: the array ends before it */
            if (n < lo) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: item %d has the schema false but minItems is %g", path, n, lo);
            hi = n;
            break;
        }
        snprintf(seg, sizeof seg, "prefixItems/%d", n);
        sub_path(sp, sizeof sp, path, seg);
        rc = value_rule(c, x, sp, name);
        if (rc) break;
        if (n >= lo) { plume_buf_puts(b, "( "); opened++; }
        plume_buf_printf(b, "%s%s ", n ? sep(c) : "", name);
    }
    if (!rc && (hi < 0 || n < hi) && !is_false(c, rest) && n == k) {
        sub_path(sp, sizeof sp, path, "items");
        rc = value_rule(c, rest, sp, name);
        if (!rc) {
            int more_lo = lo > k ? (int)lo - k : 0;
            if (more_lo > 0) plume_buf_printf(b, "( %s%s ){%d,", sep(c), name, more_lo);
            else plume_buf_printf(b, "( %s%s ){0,", sep(c), name);
            if (hi >= 0) plume_buf_printf(b, "%d", (int)hi - k);
            plume_buf_puts(b, "} ");
        }
    } else if (!rc && n < lo)
        rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: minItems %g is more than the tuple allows", path, lo);
    for (int i = 0; i < opened; i++) plume_buf_puts(b, ")? ");
    plume_buf_printf(b, "%s\"]\" ", ws);
    return rc;
}

/* An array's body: "[" items "]" with minItems/maxItems. */
static int array_body(cst_schema *c, const cJSON *s, const char *path, plume_buf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (!items) items = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems");
    const cJSON *lo_kw = cJSON_GetObjectItemCaseSensitive(s, "minItems"), *hi_kw = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    double lo = 0, hi = -1;
    if (lo_kw) {
        if (!cJSON_IsNumber(lo_kw) || lo_kw->valuedouble < 0 || lo_kw->valuedouble > CST_MAX_REPEAT ||
            lo_kw->valuedouble != (double)(int64_t)lo_kw->valuedouble)
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"minItems\" is not an integer in 0..%d", path, CST_MAX_REPEAT);
        lo = lo_kw->valuedouble;
    }
    if (hi_kw) {
        if (!cJSON_IsNumber(hi_kw) || hi_kw->valuedouble < 0 || hi_kw->valuedouble > CST_MAX_REPEAT ||
            hi_kw->valuedouble != (double)(int64_t)hi_kw->valuedouble)
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"maxItems\" is not an integer in 0..%d", path, CST_MAX_REPEAT);
        hi = hi_kw->valuedouble;
    }
    if (hi >= 0 && lo > hi) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: minItems > maxItems", path);
    const cJSON *unique = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (cJSON_IsTrue(unique)) { /* narrowing: at most one item is always unique */
        if (lo > 1)
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"uniqueItems\" with minItems above 1 is not supported "
                              "(plume writes at most one item under uniqueItems)", path);
        if (hi < 0 || hi > 1) hi = 1;
    }
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (!prefix && cJSON_IsArray(items)) { /* drafts 4 to 2019-09: items as a list, additionalItems after it */
        prefix = items;
        items = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    }
    const cJSON *contains = cJSON_GetObjectItemCaseSensitive(s, "contains");
    const cJSON *min_c = cJSON_GetObjectItemCaseSensitive(s, "minContains");
    if (contains && !(min_c && cJSON_IsNumber(min_c) && min_c->valuedouble == 0)) { /* narrowing: the first item */
        if (prefix || cJSON_GetObjectItemCaseSensitive(s, "maxContains"))
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"contains\" beside a tuple or maxContains is not "
                              "supported", path);
        cJSON *l = cJSON_CreateArray();
        if (!l) return plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
        cJSON_AddItemToArray(c->arena, l);
        double need = min_c && cJSON_IsNumber(min_c) ? min_c->valuedouble : 1;
        if (need > 16) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"minContains\" above 16 is not supported", path);
        const cJSON *first = items ? both(c, items, contains) : contains;
        for (int k = 0; k < (int)need; k++) cJSON_AddItemReferenceToArray(l, (cJSON *)first);
        prefix = l;
        if (lo < need) lo = need;
        if (hi >= 0 && hi < lo) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"contains\" needs more items than maxItems", path);
    }
    if (prefix && cJSON_IsArray(prefix) && prefix->child) return tuple_body(c, prefix, items, lo, hi, path, b);
    if (cJSON_IsArray(items))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"items\" as an array (tuples) is not supported here", path);
    if (items && !cJSON_IsBool(items) && !cJSON_IsObject(items))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"items\" is not a schema", path);
    const char *ws = c->dialect == CST_GEMMA ? "" : "ws ";
    if (*ws) c->used |= U_WS;
    if (is_false(c, items)) hi = 0;
    if (hi == 0) {
        if (lo > 0) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"items\": false with minItems > 0", path);
        plume_buf_printf(b, "\"[\" %s\"]\" ", ws);
        return 0;
    }
    char item[64], sp[512];
    sub_path(sp, sizeof sp, path, "items");
    int rc = value_rule(c, items, sp, item);
    if (rc) return rc;
    plume_buf_printf(b, "\"[\" %s", ws);
    if (lo == 0) plume_buf_puts(b, "( ");
    plume_buf_printf(b, "%s ( %s%s ){%d,", item, sep(c), item, lo > 0 ? (int)lo - 1 : 0);
    if (hi > 0) plume_buf_printf(b, "%d", (int)hi - 1);
    plume_buf_printf(b, "} %s", ws);
    if (lo == 0) plume_buf_puts(b, ")? ");
    plume_buf_puts(b, "\"]\" ");
    return 0;
}

/* The body of one type of a typed schema. */
static int type_body(cst_schema *c, unsigned t, const cJSON *s, const char *path, const char *self, plume_buf *b) {
    switch (t) {
    case T_NULL: plume_buf_puts(b, "\"null\" "); return 0;
    case T_BOOL: plume_buf_puts(b, "( \"true\" | \"false\" ) "); return 0;
    case T_INT: return cst_number_expr(b, 1, s, path, c->err);
    case T_NUM: return cst_number_expr(b, 0, s, path, c->err);
    case T_STR:
        c->used |= c->dialect == CST_GEMMA ? U_GCHAR : U_JCHAR;
        return cst_string_expr(b, s, c->dialect, c->dialect == CST_GEMMA ? "gchar" : "jchar", path, c->err);
    case T_OBJ: return object_body(c, s, path, self, b);
    default: return array_body(c, s, path, b);
    }
}

/* Which keyword groups a schema without "type" uses, as type bits. */
static unsigned implied_types(const cJSON *s) {
    static const struct { const char *kw; unsigned t; } groups[] = {
        {"minLength", T_STR}, {"maxLength", T_STR}, {"pattern", T_STR}, {"format", T_STR},
        {"minimum", T_NUM}, {"maximum", T_NUM}, {"exclusiveMinimum", T_NUM}, {"exclusiveMaximum", T_NUM}, {"multipleOf", T_NUM},
        {"properties", T_OBJ}, {"required", T_OBJ}, {"additionalProperties", T_OBJ}, {"patternProperties", T_OBJ},
        {"propertyNames", T_OBJ}, {"minProperties", T_OBJ}, {"maxProperties", T_OBJ},
        {"items", T_ARR}, {"minItems", T_ARR}, {"maxItems", T_ARR}, {"prefixItems", T_ARR}, {"contains", T_ARR},
        {"uniqueItems", T_ARR}, {"additionalItems", T_ARR}, {"minContains", T_ARR}, {"unevaluatedItems", T_ARR},
        {"unevaluatedProperties", T_OBJ}};
    unsigned t = 0;
    for (size_t i = 0; i < sizeof groups / sizeof *groups; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, groups[i].kw)) t |= groups[i].t;
    return t;
}


static int schema_accepts(cst_schema *c, const cJSON *schema, const char *text, char **err);
static const cJSON *without(cst_schema *c, const cJSON *s, const char *const *drop);

/* enum / const: the values spelled out, filtered by "type" and by the other keywords beside
 * them (each value run through their grammar). */
static int enum_body(cst_schema *c, const cJSON *s, const char *path, plume_buf *b) {
    static const char *const with[] = {"enum", "const", "type", NULL};
    static const char *const values_kw[] = {"enum", "const", NULL};
    const cJSON *rest = other_keyword(s, with) ? without(c, s, values_kw) : NULL;
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(s, "const"), *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (co && en) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: both \"enum\" and \"const\"", path);
    if (en && (!cJSON_IsArray(en) || !en->child))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"enum\" is not a non-empty array", path);
    unsigned allow = T_ALL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ty) {
        allow = 0;
        if (cJSON_IsString(ty)) allow = type_bit(ty->valuestring);
        for (const cJSON *x = cJSON_IsArray(ty) ? ty->child : NULL; x; x = x->next)
            allow |= cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
    }
    int n = 0, rc = 0;
    plume_buf_puts(b, "( ");
    for (const cJSON *v = co ? co : en->child; v && !rc; v = co ? NULL : v->next) {
        if (!(value_types(v) & allow)) continue; /* "integer" is T_INT alone: 5.5 is left out */
        if (rest) { /* the other keywords: the value's JSON text through their grammar */
            char *t = cJSON_PrintUnformatted(v), *e2 = NULL;
            int ok = t ? schema_accepts(c, rest, t, &e2) : -1;
            free(t);
            if (ok < 0) {
                rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: the keywords beside enum/const: %s", path,
                                e2 ? e2 : "out of memory");
                free(e2);
                break;
            }
            if (!ok) continue;
        }
        if (n++) plume_buf_puts(b, "| ");
        rc = put_value(c, b, v, path);
    }
    plume_buf_puts(b, ") ");
    if (!rc && n == 0) {
        c->unsat = 1;
        rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: no enum/const value has the schema's type", path);
    }
    return rc;
}

/* anyOf / oneOf / allOf. */
static int combinator_body(cst_schema *c, const cJSON *s, const char *kw, const cJSON *list, const char *path, plume_buf *b) {
    const char *allowed[] = {kw, NULL};
    const char *o = other_keyword(s, allowed);
    if (o) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"%s\" next to \"%s\" is not supported", path, o, kw);
    if (!cJSON_IsArray(list) || !list->child)
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"%s\" is not a non-empty array", path, kw);
    char sp[512];
    if (!strcmp(kw, "allOf")) { /* one member that constrains; the others must be annotations */
        const cJSON *only = NULL;
        int idx = 0, at = 0;
        for (const cJSON *x = list->child; x; x = x->next, at++) {
            static const char *const none[] = {NULL};
            if (cJSON_IsTrue(x) || (cJSON_IsObject(x) && !other_keyword(x, none))) continue;
            if (only) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"allOf\" with more than one constraining "
                                        "subschema is not supported", path);
            only = x;
            idx = at;
        }
        char name[64], seg[32];
        snprintf(seg, sizeof seg, "allOf/%d", idx);
        sub_path(sp, sizeof sp, path, seg);
        int rc = value_rule(c, only, sp, name);
        if (!rc) plume_buf_printf(b, "%s ", name);
        return rc;
    }
    uint8_t keep[64]; /* oneOf: the branches disjoint from every other one */
    const cJSON *alt[64]; /* oneOf: what is written of each branch (itself, narrowed apart, or NULL: not written) */
    int n_list = cJSON_GetArraySize(list), kept = 0, bad_i = 0, bad_j = 0;
    if (!strcmp(kw, "oneOf")) {
        if (n_list > 64) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"oneOf\" with more than 64 branches", path);
        memset(keep, 1, sizeof keep);
        int i = 0;
        for (const cJSON *x = list->child; x; x = x->next, i++) {
            int j = i + 1;
            for (const cJSON *y = x->next; y; y = y->next, j++) {
                if (!disjoint(c, x, y)) {
                    if (c->err && *c->err) return PLUME_EINVAL; /* a bad $ref found on the way */
                    if (keep[i] && keep[j]) bad_i = i, bad_j = j;
                    keep[i] = keep[j] = 0;
                }
            }
        }
        for (i = 0; i < n_list; i++) {
            alt[i] = keep[i] ? cJSON_GetArrayItem(list, i) : NULL;
            if (!keep[i] && !is_false(c, cJSON_GetArrayItem(list, i))) { /* narrowed apart from the others, if it can be */
                alt[i] = narrow_branch(c, list, i, path);
                if (c->err && *c->err) return PLUME_EINVAL;
            }
            kept += alt[i] != NULL;
        }
        if (!kept)
            return plume_fail(c->err, PLUME_EINVAL,
                              "json schema: %s: \"oneOf\" branches %d and %d may both match, and no branch is disjoint from "
                              "all the others; plume enforces oneOf only through branches disjoint from the rest (different "
                              "types, or a property both require with different const/enum values): use anyOf if either "
                              "may match", path, bad_i, bad_j);
    }
    plume_buf_puts(b, "( ");
    int i = 0, n = 0, rc = 0;
    for (const cJSON *x = list->child; x && !rc; x = x->next, i++) {
        if (is_false(c, x)) continue; /* a branch that accepts nothing */
        if (!strcmp(kw, "oneOf") && !alt[i]) continue; /* narrowing: it may overlap another */
        char name[64], seg[32];
        snprintf(seg, sizeof seg, "%s/%d", kw, i);
        sub_path(sp, sizeof sp, path, seg);
        size_t out_len = c->out.len;
        int32_t n_memo = c->n_memo;
        c->unsat = 0;
        rc = value_rule(c, !strcmp(kw, "oneOf") ? alt[i] : x, sp, name);
        if (rc == PLUME_EINVAL && c->unsat) { /* nothing valid in it: the branch is not written */
            c->out.len = out_len; /* its rules, and their memo entries, taken back */
            if (c->out.p) c->out.p[out_len] = 0;
            c->n_memo = n_memo;
            if (c->err) {
                free(*c->err);
                *c->err = NULL;
            }
            c->unsat = 0;
            rc = 0;
            continue;
        }
        if (!rc) plume_buf_printf(b, "%s%s ", n++ ? "| " : "", name);
    }
    plume_buf_puts(b, ") ");
    if (!rc && n == 0) {
        c->unsat = 1;
        rc = plume_fail(c->err, PLUME_EINVAL, "json schema: %s: every \"%s\" branch is false or matches nothing: nothing "
                        "is valid", path, kw);
    }
    return rc;
}

/* The body of schema node s (the right side of its rule, named self). */
static int body_for(cst_schema *c, const cJSON *s, const char *path, const char *self, plume_buf *b) {
    s = flatten(c, s, path, 0);
    if (!s) return PLUME_EINVAL;
    if (cJSON_IsTrue(s)) { plume_buf_printf(b, "%s ", any_value(c)); return 0; }
    if (cJSON_IsFalse(s)) {
        c->unsat = 1;
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: the schema false accepts nothing%s", path, c->nothing);
    }
    if (!cJSON_IsObject(s))
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: a schema must be an object or a boolean", path);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    for (const cJSON *k = s->child; k; k = k->next)
        if (in_list(k->string, refused_kw) && !(ref && c->draft && c->draft <= 7))
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"%s\" is not supported", path, k->string);
    if (ref) {
        static const char *const only_ref[] = {"$ref", NULL};
        const char *o = other_keyword(s, only_ref);
        if (o && !(c->draft && c->draft <= 7)) /* drafts 4 to 7: a $ref's siblings are ignored */
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"%s\" next to \"$ref\" is not supported", path, o);
        if (!cJSON_IsString(ref)) return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"$ref\" is not a string", path);
        const cJSON *target = resolve(c, ref->valuestring, path);
        if (!target) return PLUME_EINVAL;
        char name[64];
        int rc = rule_for(c, target, ref->valuestring, name);
        if (!rc) plume_buf_printf(b, "%s ", name);
        return rc;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const"))
        return enum_body(c, s, path, b);
    static const char *const comb[] = {"anyOf", "oneOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, comb[k]);
        const char *alone[] = {comb[k], NULL};
        if (list && k < 2 && other_keyword(s, alone)) { /* siblings: merged into each branch */
            s = distribute(c, s, comb[k], list, path);
            if (!s) return PLUME_EINVAL;
            list = cJSON_GetObjectItemCaseSensitive(s, comb[k]);
        }
        if (list) return combinator_body(c, s, comb[k], list, path, b);
    }
    unsigned types;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ty) {
        types = 0;
        if (cJSON_IsString(ty) && type_bit(ty->valuestring)) types = type_bit(ty->valuestring);
        else if (cJSON_IsArray(ty) && ty->child)
            for (const cJSON *x = ty->child; x; x = x->next) {
                unsigned t = cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
                if (!t) { types = 0; break; }
                types |= t;
            }
        if (!types)
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: \"type\" is not a type name or a list of them", path);
    } else {
        types = implied_types(s);
        if (!types) { plume_buf_printf(b, "%s ", any_value(c)); return 0; }
        if (types & (types - 1))
            return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: keywords of several types without \"type\" are not "
                              "supported (say which type)", path);
        if (types == T_NUM) types = T_NUM | T_INT;
    }
    if ((types & T_NUM) && (types & T_INT)) types &= ~(unsigned)T_INT; /* number holds integer */
    int n = 0, rc = 0;
    plume_buf_puts(b, "( ");
    for (unsigned t = 1; t <= T_INT && !rc; t <<= 1) {
        if (!(types & t)) continue;
        if (n++) plume_buf_puts(b, "| ");
        rc = type_body(c, t, s, path, self, b);
    }
    plume_buf_puts(b, ") ");
    return rc;
}

/* The rule of schema node s, made on first use (memoized by node, so a $ref cycle is a
 * rule cycle). name gets its name (64 bytes). */
static int rule_for(cst_schema *c, const cJSON *s, const char *path, char *name) {
    for (int32_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == s) { snprintf(name, 64, "s%d", c->memo[i].id); return 0; }
    if (c->depth >= CST_MAX_DEPTH)
        return plume_fail(c->err, PLUME_EINVAL, "json schema: %s: nested deeper than %d levels", path, CST_MAX_DEPTH);
    if (plume_grow(&c->memo, &c->cap_memo, (size_t)c->n_memo + 1, sizeof *c->memo))
        return plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
    int32_t id = c->n_rules++;
    c->memo[c->n_memo].node = s;
    c->memo[c->n_memo++].id = id;
    char self[64];
    snprintf(self, sizeof self, "s%d", id);
    snprintf(name, 64, "%s", self);
    plume_buf body = {0};
    c->depth++;
    int rc = body_for(c, s, path, self, &body);
    c->depth--;
    if (!rc) plume_buf_printf(&c->out, "%s ::= %s\n", self, body.p ? body.p : "\"\"");
    if (body.oom) c->out.oom = 1;
    free(body.p);
    return rc;
}

/* ---- the context ------------------------------------------------------------------------- */

/* The draft a document's "$schema" names: 4, 6, 7, 2019, 2020, or 0 (none or another). */
static int doc_draft(const cJSON *doc) {
    const cJSON *v = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "$schema") : NULL;
    if (!cJSON_IsString(v)) return 0;
    static const struct { const char *tag; int draft; } d[] = {
        {"draft-03", 4}, {"draft-04", 4}, {"draft-06", 6}, {"draft-07", 7}, {"2019-09", 2019}, {"2020-12", 2020}};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++)
        if (strstr(v->valuestring, d[i].tag)) return d[i].draft;
    return 0;
}

/* A compiler for the dialect. */
int cst_schema_new(cst_schema **out, int dialect, char **err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return plume_fail(err, PLUME_ENOMEM, "json schema: out of memory");
    (*out)->dialect = dialect;
    (*out)->err = err;
    (*out)->arena = cJSON_CreateArray();
    if (!(*out)->arena) {
        free(*out);
        *out = NULL;
        return plume_fail(err, PLUME_ENOMEM, "json schema: out of memory");
    }
    return 0;
}

/* Free the compiler; NULL is a no-op. */
void cst_schema_free(cst_schema *c) {
    if (!c) return;
    free(c->out.p);
    free(c->memo);
    free(c->mm);
    free(c->mm_ht);
    cJSON_Delete(c->arena);
    free(c);
}

/* The rule of any object in the dialect (marking it used). */
const char *cst_schema_any_object(cst_schema *c) {
    any_value(c);
    return c->dialect == CST_GEMMA ? "gobject" : "jobject";
}

/* The rules text, for callers that add rules of their own. */
plume_buf *cst_schema_out(cst_schema *c) { return &c->out; }

/* The rule for schema s of document doc ($ref resolves in doc). */
int cst_schema_rule(cst_schema *c, const cJSON *doc, const cJSON *s, const char *path, char *name) {
    c->doc = doc;
    c->draft = doc_draft(doc);
    return rule_for(c, s, path, name);
}

/* Append the common rules used and hand the text over (*gbnf malloc'd). */
int cst_schema_finish(cst_schema *c, char **gbnf) {
    plume_buf *o = &c->out;
    if (c->used & U_JVALUE) c->used |= U_WS | U_JCHAR;
    if (c->used & U_GVALUE) c->used |= U_GCHAR;
    if (c->used & U_WS) plume_buf_puts(o, "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n");
    if (c->used & U_JCHAR)
        plume_buf_puts(o, "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9A-Ca-cE-Fe-f] [0-9A-Fa-f]{3} | "
                   "[Dd] [0-7] [0-9A-Fa-f]{2} ) )\n");
    if (c->used & (U_JVALUE | U_GVALUE))
        plume_buf_puts(o, "jnumber ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?\n");
    if (c->used & U_JVALUE)
        plume_buf_puts(o, "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
                   "jvalue ::= jobject | jarray | jstring | jnumber | \"true\" | \"false\" | \"null\"\n"
                   "jobject ::= \"{\" ws ( jstring ws \":\" ws jvalue ( ws \",\" ws jstring ws \":\" ws jvalue )* ws )? \"}\"\n"
                   "jarray ::= \"[\" ws ( jvalue ( ws \",\" ws jvalue )* ws )? \"]\"\n");
    if (c->used & U_GCHAR) plume_buf_puts(o, "gchar ::= [^<\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F]\n");
    if (c->used & U_GVALUE)
        plume_buf_puts(o, "gstring ::= <|\"|> gchar* <|\"|>\n"
                   "gkey ::= [A-Za-z0-9_] [A-Za-z0-9_\\-]*\n"
                   "gvalue ::= gobject | garray | gstring | jnumber | \"true\" | \"false\" | \"null\"\n"
                   "gobject ::= \"{\" ( gkey \":\" gvalue ( \",\" gkey \":\" gvalue )* )? \"}\"\n"
                   "garray ::= \"[\" ( gvalue ( \",\" gvalue )* )? \"]\"\n");
    if (o->oom) return plume_fail(c->err, PLUME_ENOMEM, "json schema: out of memory");
    *gbnf = o->p;
    o->p = NULL;
    o->len = o->cap = 0;
    return 0;
}

/* Whether s[0, n) is valid UTF-8 (strict). */
int cst_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        int k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((p[i + j] & 0xc0) != 0x80) return 0;
        if (k == 3 && ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f))) return 0;
        if (k == 4 && ((c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* p past JSON white space (not past end). */
static const char *json_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* p past the JSON string that starts at it; NULL if none starts there. */
static const char *json_skip_string(const char *p, const char *end) {
    if (p >= end || *p != '"') return NULL;
    for (p++; p < end; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

/* Walk the text at p (the value node was parsed from) beside node, keeping each number's own
 * text in its valuestring (cJSON keeps only the double: 9007199254740993 reads as ...992);
 * the end of the value, NULL if the text and the tree part (nothing more is kept). *oom is set
 * when a copy cannot be made. Public (plume.h): the server keeps a request's numbers with it. */
const char *plume_json_keep_numbers(cJSON *node, const char *p, const char *end, int32_t *oom) {
    p = json_ws(p, end);
    if (p >= end) return NULL;
    if (cJSON_IsNumber(node)) {
        const char *q = p;
        while (q < end && *q && strchr("+-0123456789.eE", *q)) q++;
        if (q == p || node->valuestring) return NULL;
        if (!(node->valuestring = malloc((size_t)(q - p) + 1))) {
            *oom = 1;
            return NULL;
        }
        memcpy(node->valuestring, p, (size_t)(q - p));
        node->valuestring[q - p] = 0;
        return q;
    }
    if (cJSON_IsString(node)) return json_skip_string(p, end);
    if (cJSON_IsObject(node) || cJSON_IsArray(node)) {
        int obj = cJSON_IsObject(node);
        if (*p != (obj ? '{' : '[')) return NULL;
        p++;
        for (cJSON *c = node->child; c; c = c->next) {
            if (c != node->child) {
                p = json_ws(p, end);
                if (p >= end || *p != ',') return NULL;
                p++;
            }
            if (obj) {
                if (!(p = json_skip_string(json_ws(p, end), end))) return NULL;
                p = json_ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p++;
            }
            if (!(p = plume_json_keep_numbers(c, p, end, oom))) return NULL;
        }
        p = json_ws(p, end);
        return p < end && *p == (obj ? '}' : ']') ? p + 1 : NULL;
    }
    size_t n = cJSON_IsTrue(node) ? 4 : cJSON_IsFalse(node) ? 5 : cJSON_IsNull(node) ? 4 : 0;
    return n && (size_t)(end - p) >= n ? p + n : NULL;
}

/* Parse JSON text whole (valid UTF-8, nothing after the value); NULL with the error set. */
cJSON *cst_json_parse(const char *text, size_t len, const char *what, char **err) {
    if (!text) { plume_fail(err, PLUME_EINVAL, "%s: NULL", what); return NULL; }
    if (!cst_utf8_valid(text, len)) { plume_fail(err, PLUME_EINVAL, "%s: not valid UTF-8", what); return NULL; }
    if (memchr(text, 0, len)) { plume_fail(err, PLUME_EINVAL, "%s: holds a NUL byte", what); return NULL; }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!doc) {
        plume_fail(err, PLUME_EINVAL, "%s: bad JSON at offset %ld", what, end ? (long)(end - text) : 0L);
        return NULL;
    }
    while (end && end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end && end < text + len) {
        plume_fail(err, PLUME_EINVAL, "%s: text after the JSON value at offset %ld", what, (long)(end - text));
        cJSON_Delete(doc);
        return NULL;
    }
    int32_t oom = 0;
    plume_json_keep_numbers(doc, text, text + len, &oom);
    if (oom) {
        plume_fail(err, PLUME_ENOMEM, "%s: out of memory", what);
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

/* A schema's whole grammar: its rules, root ::= the schema's rule, the common rules. */
int cst_schema_to_gbnf(const char *schema, size_t len, int dialect, char **gbnf, char **err) {
    if (!gbnf) return plume_fail(err, PLUME_EINVAL, "json schema: gbnf is NULL");
    *gbnf = NULL;
    cJSON *doc = cst_json_parse(schema, len, "json schema", err);
    if (!doc) return PLUME_EINVAL;
    cst_schema *c = NULL;
    int rc = cst_schema_new(&c, dialect, err);
    char name[64];
    if (!rc) rc = cst_schema_rule(c, doc, doc, "#", name);
    if (!rc) {
        plume_buf_printf(&c->out, "root ::= %s\n", name);
        rc = cst_schema_finish(c, gbnf);
    }
    cst_schema_free(c);
    cJSON_Delete(doc);
    return rc;
}
