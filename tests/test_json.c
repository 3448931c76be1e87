/* test_json.c -- the typed JSON getters (src/json.h): values, defaults, null as absent, every
 * type and range error with the key path and the document in its message; numbers as written
 * (plume_json_keep_numbers of plume.h). */
#include "json.h"
#include "t.h"

/* The document every test reads (root keys, a nested object, an array of objects). */
static const char doc_text[] =
    "{\"i\": 7, \"big\": 4e9, \"half\": 2.5, \"neg\": -3, \"s\": \"text\", \"t\": true, \"f\": false,"
    " \"n\": null, \"arr\": [1, 2], \"inf\": 1e999,"
    " \"rope\": {\"full\": {\"theta\": 1e6, \"kind\": \"proportional\"}, \"bad\": 5},"
    " \"chunks\": [{\"first\": 0}, {\"first\": \"x\"}, 3]}";

/* Parse doc_text (the test fails without it). */
static cJSON *parse_doc(void) {
    cJSON *root = NULL;
    char *err = NULL;
    CHECK(json_parse(&root, doc_text, "doc.json", &err) == 0 && root, "parse: %s", err ? err : "");
    free(err);
    return root;
}

/* Whether rc is PLUME_EFORMAT with a message equal to want; frees the message. */
static int fails_with(int rc, char **err, const char *want) {
    int ok = rc == PLUME_EFORMAT && *err && !strcmp(*err, want);
    if (!ok) printf("  got rc %d \"%s\", want \"%s\"\n", rc, *err ? *err : "(none)", want);
    free(*err);
    *err = NULL;
    return ok;
}

static void test_json_values(void) {
    cJSON *root = parse_doc();
    json_obj o = json_root(root, "doc.json"), rope, full;
    char *err = NULL;
    int32_t i = 0, b = -1;
    int64_t big = 0;
    double d = 0;
    const char *s = NULL;
    CHECK(json_i32(&o, "i", 0, 10, &i, &err) == 0 && i == 7, "i");
    CHECK(json_i32_or(&o, "absent", 0, 10, 4, &i, &err) == 0 && i == 4, "absent int: the default");
    CHECK(json_i32_or(&o, "n", 0, 10, 5, &i, &err) == 0 && i == 5, "null int: the default");
    CHECK(json_i64_or(&o, "big", 0, 1ll << 40, 0, &big, &err) == 0 && big == 4000000000ll, "big");
    CHECK(json_num(&o, "half", -INFINITY, INFINITY, &d, &err) == 0 && d == 2.5, "half");
    CHECK(json_num_or(&o, "absent", 0, 1, 0.25, &d, &err) == 0 && d == 0.25, "absent number");
    CHECK(json_bool_or(&o, "t", 0, &b, &err) == 0 && b == 1, "true");
    CHECK(json_bool_or(&o, "f", 1, &b, &err) == 0 && b == 0, "false");
    CHECK(json_bool_or(&o, "n", 1, &b, &err) == 0 && b == 1, "null bool: the default");
    CHECK(json_str_or(&o, "s", "d", &s, &err) == 0 && s && !strcmp(s, "text"), "string");
    CHECK(json_str_or(&o, "absent", "d", &s, &err) == 0 && s && !strcmp(s, "d"), "absent string");
    static const char *const kinds[] = {"default", "proportional"};
    CHECK(json_child(&o, "rope", &rope, &err) == 0 && json_child(&rope, "full", &full, &err) == 0 &&
              !strcmp(full.path, "rope.full") && json_num(&full, "theta", 0, 1e9, &d, &err) == 0 && d == 1e6 &&
              json_enum(&full, "kind", kinds, 2, &i, &err) == 0 && i == 1,
          "nested: %s", err ? err : "");
    json_obj none;
    CHECK(json_child(&o, "absent", &none, &err) == 0 && !none.obj && json_i32_or(&none, "x", 0, 9, 3, &i, &err) == 0 &&
              i == 3,
          "an absent object has no members");
    CHECK(json_member(&o, "n") == NULL && json_member(&o, "i") != NULL, "json_member: null is absent");
    CHECK(json_array_size(&o, "chunks") == 3 && json_array_size(&o, "i") == -1 && json_array_size(&o, "x") == -1,
          "array sizes");
    json_obj c0 = json_item(&o, "chunks", 0), c2 = json_item(&o, "chunks", 2);
    CHECK(!strcmp(c0.path, "chunks[0]") && json_i32(&c0, "first", 0, 9, &i, &err) == 0 && i == 0, "item 0");
    CHECK(json_i32_or(&c2, "first", 0, 9, 6, &i, &err) == 0 && i == 6, "an item that is no object has no members");
    CHECK(err == NULL, "no message on success: %s", err ? err : "");
    free(err);
    cJSON_Delete(root);
}

static void test_json_errors(void) {
    cJSON *root = parse_doc();
    json_obj o = json_root(root, "doc.json"), rope, bad;
    char *err = NULL;
    int32_t i;
    int64_t big;
    double d;
    const char *s;
    CHECK(fails_with(json_i32(&o, "absent", 0, 9, &i, &err), &err, "doc.json: missing key absent"), "missing");
    CHECK(fails_with(json_i32(&o, "n", 0, 9, &i, &err), &err, "doc.json: missing key n"), "null is missing");
    CHECK(fails_with(json_i32(&o, "half", 0, 9, &i, &err), &err, "doc.json: half must be an integer in [0, 9]"),
          "fraction");
    CHECK(fails_with(json_i32(&o, "i", 8, 9, &i, &err), &err, "doc.json: i must be an integer in [8, 9]"), "range");
    CHECK(fails_with(json_i32(&o, "s", 0, 9, &i, &err), &err, "doc.json: s must be an integer in [0, 9]"), "type");
    CHECK(fails_with(json_i64_or(&o, "neg", 0, 9, 0, &big, &err), &err, "doc.json: neg must be an integer in [0, 9]"),
          "i64 range");
    CHECK(fails_with(json_num(&o, "s", 0, 1, &d, &err), &err, "doc.json: s must be a number"), "number type");
    CHECK(fails_with(json_num(&o, "inf", -INFINITY, INFINITY, &d, &err), &err, "doc.json: inf must be a number"),
          "not finite");
    CHECK(fails_with(json_num(&o, "half", 0, 1, &d, &err), &err, "doc.json: half must be in [0, 1]"), "number range");
    CHECK(fails_with(json_bool_or(&o, "i", 0, &i, &err), &err, "doc.json: i must be true or false"), "bool");
    CHECK(fails_with(json_str_or(&o, "arr", "", &s, &err), &err, "doc.json: arr must be a string"), "string");
    static const char *const w[] = {"f32", "bf16", "q8", "q4"};
    CHECK(fails_with(json_enum(&o, "s", w, 4, &i, &err), &err, "doc.json: key s must be f32, bf16, q8 or q4"), "enum");
    CHECK(fails_with(json_enum(&o, "absent", w, 2, &i, &err), &err, "doc.json: key absent must be f32 or bf16"),
          "enum absent");
    CHECK(json_child(&o, "rope", &rope, &err) == 0, "rope");
    CHECK(fails_with(json_child(&rope, "bad", &bad, &err), &err, "doc.json: rope.bad is not an object"), "child");
    json_obj full;
    CHECK(json_child(&rope, "full", &full, &err) == 0, "full");
    CHECK(fails_with(json_i32(&full, "kind", 0, 1, &i, &err), &err, "doc.json: rope.full.kind must be an integer in [0, 1]"),
          "nested path");
    json_obj c1 = json_item(&o, "chunks", 1);
    CHECK(fails_with(json_i32(&c1, "first", 0, 9, &i, &err), &err, "doc.json: chunks[1].first must be an integer in [0, 9]"),
          "item path");
    json_obj anon = json_root(root, NULL);
    CHECK(fails_with(json_i32(&anon, "absent", 0, 9, &i, &err), &err, "missing key absent"), "no document name");
    cJSON *r2 = NULL;
    CHECK(fails_with(json_parse(&r2, "{\"a\": [1,", "x.json", &err), &err, "x.json: invalid JSON near byte 9") && !r2,
          "syntax error");
    cJSON_Delete(root);
}

/* plume_json_keep_numbers: each number's text as written beside the tree (past strings with
 * escaped quotes and digits, white space), the end of the value; NULL where text and tree part
 * (another text, a tree walked twice). */
static void test_keep_numbers(void) {
    static const char text[] = " { \"a\" : [9007199254740993, 1e400,-0.5E-3 ], \"b\\\"1\": \"x\\\"9\", \"c\": {\"d\": 10}} ";
    const char *end = text + strlen(text);
    cJSON *root = cJSON_Parse(text);
    int32_t oom = 0;
    const char *at = root ? plume_json_keep_numbers(root, text, end, &oom) : NULL;
    CHECK(at && *at == ' ' && at + 1 == end && !oom, "the walk ended at %s", at ? at : "(NULL)");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "a");
    const char *want[] = {"9007199254740993", "1e400", "-0.5E-3"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        CHECK(v && v->valuestring && !strcmp(v->valuestring, want[i]), "number %d: %s", i, v && v->valuestring ? v->valuestring : "(none)");
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "c"), "d");
    CHECK(d && d->valuestring && !strcmp(d->valuestring, "10"), "nested number");
    CHECK(!plume_json_keep_numbers(root, text, end, &oom) && !oom, "a tree walked twice");
    cJSON_Delete(root);
    static const char other[] = "[1, 2]";
    root = cJSON_Parse("[1, \"x\"]");
    CHECK(root && !plume_json_keep_numbers(root, other, other + strlen(other), &oom), "another text");
    cJSON_Delete(root);
}

int main(void) {
    RUN(test_json_values);
    RUN(test_json_errors);
    RUN(test_keep_numbers);
    return t_total_failed ? 1 : 0;
}
