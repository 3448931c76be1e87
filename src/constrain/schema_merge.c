/* schema_merge.c -- the conjunction of two JSON Schemas as one schema (docs/STRUCTURED.md
 * "Combining schemas"): what allOf, a combinator's or a $ref's siblings, if/then and
 * dependencies are compiled through (schema.c).
 *
 * Both schemas hold no $ref and no allOf at their top (schema.c flattens them first). The
 * result is a new node owned by an arena (a cJSON array freed with the compiler); the parts
 * taken whole from either side are references to them, so nothing is copied deep. A keyword
 * in one side only is kept as it is; in both sides:
 *   type: the types in common; enum/const: the values in common; properties: the union, a
 *   name in both gets {"allOf": [a, b]} (merged when compiled); required: the union;
 *   additionalProperties, items, unevaluated*: {"allOf": [a, b]}; lower bounds (minimum,
 *   exclusiveMinimum, minLength, minItems, minProperties): the larger; upper bounds: the
 *   smaller; uniqueItems: either; anything else (pattern, format, multipleOf, anyOf, ...):
 *   kept when both are equal, else the merge is refused naming the keyword.
 * And across: a side's additionalProperties applies to the names only the other side lists
 * (false there: the name may not be written). b is the member (of allOf, the branch of a
 * combinator, the $ref's target): its unevaluated* keywords see only what it evaluates, so
 * they act as its additionalProperties / items; a's are kept for the merged whole.
 * Exact, except where draft 4's boolean exclusiveMinimum/Maximum meets a bound of the other
 * side: the flag then also applies to the tighter bound (a narrowing). Knows no grammar. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

/* Keywords that are a lower bound (the larger wins) or an upper bound (the smaller wins). */
static const char *const lower_kw[] = {"minimum", "minLength", "minItems", "minProperties", "minContains", NULL};
static const char *const upper_kw[] = {"maximum", "maxLength", "maxItems", "maxProperties", "maxContains", NULL};
/* Keywords whose values in both sides are conjoined as {"allOf": [a, b]}. */
static const char *const sub_kw[] = {"additionalProperties", "items", "additionalItems", "unevaluatedProperties",
                                     "unevaluatedItems", "propertyNames", "contains", NULL};

/* Whether properties p name something that mine do not, with a schema other than false
 * (where a side's additionalProperties would meet a name its patternProperties may match). */
static int lists_other(const cJSON *p, const cJSON *mine) {
    for (const cJSON *k = cJSON_IsObject(p) ? p->child : NULL; k; k = k->next)
        if (!cJSON_IsFalse(k) && !(cJSON_IsObject(mine) && cJSON_GetObjectItemCaseSensitive(mine, k->string))) return 1;
    return 0;
}

/* Whether s is in the NULL-terminated list. */
static int listed(const char *s, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(s, list[i])) return 1;
    return 0;
}

/* A new node kept alive by the arena. */
static cJSON *arena_add(cJSON *arena, cJSON *node) {
    if (node) cJSON_AddItemToArray(arena, node);
    return node;
}

/* {"allOf": [a, b]} as an arena node (a and b referenced). */
static cJSON *all_of(cJSON *arena, const cJSON *a, const cJSON *b) {
    cJSON *n = arena_add(arena, cJSON_CreateObject()), *l = cJSON_CreateArray();
    if (!n || !l) { cJSON_Delete(l); return NULL; }
    cJSON_AddItemReferenceToArray(l, (cJSON *)a);
    cJSON_AddItemReferenceToArray(l, (cJSON *)b);
    cJSON_AddItemToObject(n, "allOf", l);
    return n;
}

/* The type bits of a "type" value: null 1, boolean 2, object 4, array 8, string 16, number
 * 32 (+ integer 64), integer 64; 0 when not a type name or list of them. */
static unsigned type_bits(const cJSON *t) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    unsigned bits = 0;
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : t; x; x = cJSON_IsArray(t) ? x->next : NULL) {
        if (!cJSON_IsString(x)) return 0;
        unsigned b = 0;
        for (int i = 0; i < 7; i++)
            if (!strcmp(x->valuestring, names[i])) b = i == 5 ? 32 | 64 : 1u << i;
        if (!b) return 0;
        bits |= b;
    }
    return bits;
}

/* The "type" value of bits (a name or a list of names). */
static cJSON *type_value(unsigned bits) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    cJSON *l = cJSON_CreateArray();
    for (int i = 0; i < 7 && l; i++) {
        if (!(bits & (1u << i))) continue;
        if (i == 6 && (bits & 32)) continue; /* number holds integer */
        cJSON_AddItemToArray(l, cJSON_CreateString(names[i]));
    }
    return l;
}

/* Whether v is among the values of an enum (array) or equal to a const. */
static int has_value(const cJSON *vals, int is_enum, const cJSON *v) {
    if (!is_enum) return cJSON_Compare(vals, v, 1);
    for (const cJSON *x = vals->child; x; x = x->next)
        if (cJSON_Compare(x, v, 1)) return 1;
    return 0;
}

/* The values in both enum/const keywords, as an "enum" array (empty: none in common). */
static cJSON *common_values(const cJSON *a, int a_enum, const cJSON *b, int b_enum) {
    cJSON *l = cJSON_CreateArray();
    for (const cJSON *x = a_enum ? a->child : a; x && l; x = a_enum ? x->next : NULL)
        if (has_value(b, b_enum, x)) cJSON_AddItemToArray(l, cJSON_Duplicate(x, 1));
    return l;
}

/* The union of two "required" arrays (order kept, duplicates dropped). */
static cJSON *union_required(const cJSON *a, const cJSON *b) {
    cJSON *l = cJSON_CreateArray();
    for (int side = 0; side < 2 && l; side++)
        for (const cJSON *x = (side ? b : a)->child; x; x = x->next) {
            int dup = 0;
            for (const cJSON *y = l->child; y && !dup; y = y->next) dup = cJSON_Compare(x, y, 1);
            if (!dup) cJSON_AddItemToArray(l, cJSON_Duplicate(x, 1));
        }
    return l;
}

/* The union of two "properties" objects; a side's additionalProperties (xa, xb: NULL when
 * absent) joins the names only the other side lists. */
static cJSON *union_properties(cJSON *arena, const cJSON *pa, const cJSON *xa, const cJSON *pb, const cJSON *xb) {
    cJSON *o = cJSON_CreateObject();
    for (int side = 0; side < 2 && o; side++) {
        const cJSON *mine = side ? pb : pa, *other = side ? pa : pb, *other_x = side ? xa : xb;
        for (const cJSON *p = mine ? mine->child : NULL; p; p = p->next) {
            if (cJSON_GetObjectItemCaseSensitive(o, p->string)) continue; /* taken from side a */
            const cJSON *q = other ? cJSON_GetObjectItemCaseSensitive(other, p->string) : NULL;
            const cJSON *v = p;
            if (q) v = all_of(arena, p, q);
            else if (other_x) v = all_of(arena, p, other_x);
            if (!v) { cJSON_Delete(o); return NULL; }
            cJSON_AddItemReferenceToObject(o, p->string, (cJSON *)v);
        }
    }
    return o;
}

/* b as a member seen from outside: its unevaluatedProperties / unevaluatedItems see only what
 * b itself evaluates, so they are its additionalProperties / items (when it has none). */
static const cJSON *member_view(cJSON *arena, const cJSON *b) {
    static const char *const from[2] = {"unevaluatedProperties", "unevaluatedItems"};
    static const char *const to[2] = {"additionalProperties", "items"};
    int any = 0;
    for (int i = 0; i < 2; i++)
        any |= cJSON_GetObjectItemCaseSensitive(b, from[i]) && !cJSON_GetObjectItemCaseSensitive(b, to[i]) &&
               (i == 0 || !cJSON_GetObjectItemCaseSensitive(b, "prefixItems"));
    if (!any) return b;
    cJSON *n = arena_add(arena, cJSON_CreateObject());
    if (!n) return NULL;
    for (const cJSON *k = b->child; k; k = k->next) {
        const char *name = k->string;
        for (int i = 0; i < 2; i++)
            if (!strcmp(name, from[i]) && !cJSON_GetObjectItemCaseSensitive(b, to[i])) name = to[i];
        cJSON_AddItemReferenceToObject(n, name, (cJSON *)k);
    }
    return n;
}

/* Whether a number keyword pair may be compared (both numbers). */
static int both_numbers(const cJSON *a, const cJSON *b) { return cJSON_IsNumber(a) && cJSON_IsNumber(b); }

/* The conjunction of schemas a and b (objects or booleans, no $ref or allOf at the top):
 * 0 with *out, 1 when no value can satisfy both (why says where), -1 when plume cannot
 * merge them (why names the keyword), PLUME_ENOMEM. */
int cst_schema_merge(cJSON *arena, const cJSON *a, const cJSON *b, const cJSON **out, char *why, size_t why_n,
                     int (*asserts)(const char *keyword)) {
    *out = NULL;
    if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) { snprintf(why, why_n, "the schema false"); return 1; }
    if (cJSON_IsTrue(a) || a == b) { *out = b; return 0; }
    if (cJSON_IsTrue(b)) { *out = a; return 0; }
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) { snprintf(why, why_n, "a schema that is not an object"); return -1; }
    b = member_view(arena, b);
    cJSON *r = arena_add(arena, cJSON_CreateObject());
    if (!r || !b) return PLUME_ENOMEM;
    const cJSON *xa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties"), *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    if ((xa && cJSON_GetObjectItemCaseSensitive(a, "patternProperties") && lists_other(pb, pa)) ||
        (xb && cJSON_GetObjectItemCaseSensitive(b, "patternProperties") && lists_other(pa, pb))) {
        snprintf(why, why_n, "\"additionalProperties\" beside \"patternProperties\"");
        return -1;
    }
    static const char *const item_kw[] = {"items", "prefixItems", "additionalItems", "contains", "unevaluatedItems", NULL};
    int tuple = 0, items_a = 0, items_b = 0; /* a tuple's positions meet the other side's items: not merged */
    for (int side = 0; side < 2; side++)
        for (const cJSON *k = (side ? b : a)->child; k; k = k->next) {
            if (!listed(k->string, item_kw)) continue;
            *(side ? &items_b : &items_a) = 1;
            tuple |= !strcmp(k->string, "prefixItems") || (!strcmp(k->string, "items") && cJSON_IsArray(k));
        }
    if (tuple && items_a && items_b) {
        snprintf(why, why_n, "a tuple (prefixItems, items as a list) in one and item keywords in the other");
        return -1;
    }
    for (int side = 0; side < 2; side++) {
        const cJSON *me = side ? b : a, *other = side ? a : b;
        for (const cJSON *k = me->child; k; k = k->next) {
            const char *kw = k->string;
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(other, kw);
            if (!asserts(kw)) { /* an annotation: a's, or b's when a has none */
                if (!side || !o) cJSON_AddItemReferenceToObject(r, kw, (cJSON *)k);
                continue;
            }
            int is_enum = !strcmp(kw, "enum");
            if (!strcmp(kw, "properties") && !side) {
                /* both sides' names, each joined with the other side's extras */
                cJSON *u = union_properties(arena, pa, xa, pb, xb);
                if (!u) return PLUME_ENOMEM;
                cJSON_AddItemToObject(r, "properties", u);
                continue;
            }
            if (!strcmp(kw, "properties")) {
                if (!pa) { /* b's names alone: a's extras join them */
                    cJSON *u = union_properties(arena, NULL, xa, pb, NULL);
                    if (!u) return PLUME_ENOMEM;
                    cJSON_AddItemToObject(r, "properties", u);
                }
                continue;
            }
            if (is_enum || !strcmp(kw, "const")) {
                const cJSON *oe = cJSON_GetObjectItemCaseSensitive(other, "enum"), *oc = cJSON_GetObjectItemCaseSensitive(other, "const");
                if (side && (oe || oc)) continue; /* done from side a */
                if (oe || oc) {
                    if ((is_enum && !cJSON_IsArray(k)) || (oe && !cJSON_IsArray(oe))) {
                        snprintf(why, why_n, "\"enum\" that is not an array");
                        return -1;
                    }
                    cJSON *l = common_values(k, is_enum, oe ? oe : oc, oe != NULL);
                    if (!l) return PLUME_ENOMEM;
                    cJSON_AddItemToObject(r, "enum", l);
                    if (!l->child) { snprintf(why, why_n, "no enum/const value in common"); return 1; }
                    continue;
                }
            } else if (!o) {
                /* one side only */
            } else if (side) {
                continue; /* both: done from side a */
            } else if (!strcmp(kw, "type")) {
                unsigned ta = type_bits(k), tb = type_bits(o);
                if (!ta || !tb) { snprintf(why, why_n, "\"type\" that is not a type name"); return -1; }
                if (!(ta & tb)) { snprintf(why, why_n, "no \"type\" in common"); return 1; }
                cJSON *t = type_value(ta & tb);
                if (!t) return PLUME_ENOMEM;
                cJSON_AddItemToObject(r, "type", t);
                continue;
            } else if (!strcmp(kw, "required") && cJSON_IsArray(k) && cJSON_IsArray(o)) {
                cJSON *l = union_required(k, o);
                if (!l) return PLUME_ENOMEM;
                cJSON_AddItemToObject(r, "required", l);
                continue;
            } else if (listed(kw, sub_kw) && !cJSON_IsArray(k) && !cJSON_IsArray(o)) {
                cJSON *n = all_of(arena, k, o);
                if (!n) return PLUME_ENOMEM;
                cJSON_AddItemReferenceToObject(r, kw, n);
                continue;
            } else if ((listed(kw, lower_kw) || listed(kw, upper_kw) || !strcmp(kw, "exclusiveMinimum") ||
                        !strcmp(kw, "exclusiveMaximum")) && both_numbers(k, o)) {
                int lower = listed(kw, lower_kw) || !strcmp(kw, "exclusiveMinimum");
                const cJSON *w = (lower ? k->valuedouble >= o->valuedouble : k->valuedouble <= o->valuedouble) ? k : o;
                cJSON_AddItemReferenceToObject(r, kw, (cJSON *)w);
                continue;
            } else if (!strcmp(kw, "uniqueItems") && cJSON_IsBool(k) && cJSON_IsBool(o)) {
                cJSON_AddItemReferenceToObject(r, kw, (cJSON *)(cJSON_IsTrue(k) ? k : o));
                continue;
            } else if (!cJSON_Compare(k, o, 1)) {
                snprintf(why, why_n, "\"%s\" in both with different values", kw);
                return -1;
            }
            cJSON_AddItemReferenceToObject(r, kw, (cJSON *)k);
        }
    }
    *out = r;
    return 0;
}
