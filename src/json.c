/* json.c -- typed reads of JSON members with messages that name the key path (json.h). */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* ---- paths and messages -------------------------------------------------------------------- */

/* The key path of member key of o: "key" at the root, else "path.key" (cut to fit n bytes). */
static void key_path(const json_obj *o, const char *key, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s%s%s", o->path, o->path[0] ? "." : "", key);
    if (k < 0 || (size_t)k >= n) buf[n - 1] = 0; /* cut: it still names the place */
}

/* PLUME_EFORMAT with "DOC: " and the formatted message (the first message wins). */
static int json_fail(const json_obj *o, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int json_fail(const json_obj *o, char **err, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return plume_fail(err, PLUME_EFORMAT, "%s%s%s", o->doc ? o->doc : "", o->doc ? ": " : "", msg);
}

/* PLUME_EFORMAT "DOC: PATH must be <what>" about member key of o. */
static int must_be(const json_obj *o, const char *key, const char *what, char **err) {
    char path[160];
    key_path(o, key, path, sizeof path);
    return json_fail(o, err, "%s must be %s", path, what);
}

/* ---- documents and objects ---------------------------------------------------------------- */

int json_parse(cJSON **root, const char *text, const char *doc, char **err) {
    *root = cJSON_Parse(text);
    if (*root) return 0;
    const char *at = cJSON_GetErrorPtr();
    return plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON near byte %ld", doc, at ? (long)(at - text) : -1L);
}

json_obj json_root(const cJSON *root, const char *doc) {
    json_obj o = {root, doc, ""};
    return o;
}

const cJSON *json_member(const json_obj *o, const char *key) {
    const cJSON *v = cJSON_IsObject(o->obj) ? cJSON_GetObjectItemCaseSensitive(o->obj, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

int json_child(const json_obj *o, const char *key, json_obj *child, char **err) {
    const cJSON *v = json_member(o, key);
    child->obj = v;
    child->doc = o->doc;
    key_path(o, key, child->path, sizeof child->path);
    if (v && !cJSON_IsObject(v)) return json_fail(o, err, "%s is not an object", child->path);
    return 0;
}

int32_t json_array_size(const json_obj *o, const char *key) {
    const cJSON *v = json_member(o, key);
    return cJSON_IsArray(v) ? (int32_t)cJSON_GetArraySize(v) : -1;
}

json_obj json_item(const json_obj *o, const char *key, int32_t i) {
    const cJSON *v = json_member(o, key);
    json_obj item = {cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : NULL, o->doc, ""};
    char at[sizeof item.path];
    key_path(o, key, at, sizeof at);
    int k = snprintf(item.path, sizeof item.path, "%.100s[%d]", at, i);
    (void)k; /* fits: 100 + "[" + 11 digits + "]" */
    return item;
}

/* ---- typed members ------------------------------------------------------------------------- */

/* Member key, or "missing key PATH" when it is required and absent (or null). *v NULL: use
 * the default. */
static int member_or_missing(const json_obj *o, const char *key, int required, const cJSON **v, char **err) {
    *v = json_member(o, key);
    if (*v || !required) return 0;
    char path[160];
    key_path(o, key, path, sizeof path);
    return json_fail(o, err, "missing key %s", path);
}

/* An integer member in [lo, hi] (required, or dflt when absent). */
static int get_int(const json_obj *o, const char *key, int64_t lo, int64_t hi, int required, int64_t dflt,
                   int64_t *out, char **err) {
    const cJSON *v;
    int rc = member_or_missing(o, key, required, &v, err);
    if (rc) return rc;
    if (!v) { *out = dflt; return 0; }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        char range[80];
        snprintf(range, sizeof range, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        return must_be(o, key, range, err);
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

int json_i32(const json_obj *o, const char *key, int64_t lo, int64_t hi, int32_t *out, char **err) {
    int64_t v;
    int rc = get_int(o, key, lo, hi, 1, 0, &v, err);
    if (!rc) *out = (int32_t)v;
    return rc;
}

int json_i32_or(const json_obj *o, const char *key, int64_t lo, int64_t hi, int32_t dflt, int32_t *out,
                char **err) {
    int64_t v;
    int rc = get_int(o, key, lo, hi, 0, dflt, &v, err);
    if (!rc) *out = (int32_t)v;
    return rc;
}

int json_i64_or(const json_obj *o, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                char **err) {
    return get_int(o, key, lo, hi, 0, dflt, out, err);
}

/* A finite number member in [lo, hi] (required, or dflt when absent). */
static int get_num(const json_obj *o, const char *key, double lo, double hi, int required, double dflt,
                   double *out, char **err) {
    const cJSON *v;
    int rc = member_or_missing(o, key, required, &v, err);
    if (rc) return rc;
    if (!v) { *out = dflt; return 0; }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return must_be(o, key, "a number", err);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char range[64];
        snprintf(range, sizeof range, "in [%g, %g]", lo, hi);
        return must_be(o, key, range, err);
    }
    *out = v->valuedouble;
    return 0;
}

int json_num(const json_obj *o, const char *key, double lo, double hi, double *out, char **err) {
    return get_num(o, key, lo, hi, 1, 0, out, err);
}

int json_num_or(const json_obj *o, const char *key, double lo, double hi, double dflt, double *out,
                char **err) {
    return get_num(o, key, lo, hi, 0, dflt, out, err);
}

int json_bool_or(const json_obj *o, const char *key, int32_t dflt, int32_t *out, char **err) {
    const cJSON *v = json_member(o, key);
    if (!v) { *out = dflt; return 0; }
    if (!cJSON_IsBool(v)) return must_be(o, key, "true or false", err);
    *out = cJSON_IsTrue(v);
    return 0;
}

int json_str_or(const json_obj *o, const char *key, const char *dflt, const char **out, char **err) {
    const cJSON *v = json_member(o, key);
    if (!v) { *out = dflt; return 0; }
    if (!cJSON_IsString(v)) return must_be(o, key, "a string", err);
    *out = v->valuestring;
    return 0;
}

int json_enum(const json_obj *o, const char *key, const char *const *names, int32_t n, int32_t *out,
              char **err) {
    const cJSON *v = json_member(o, key);
    for (int32_t i = 0; cJSON_IsString(v) && i < n; i++)
        if (!strcmp(v->valuestring, names[i])) { *out = i; return 0; }
    char path[160], list[256] = "";
    key_path(o, key, path, sizeof path);
    for (int32_t i = 0; i < n; i++) {
        size_t at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    }
    return json_fail(o, err, "key %s must be %s", path, list);
}
