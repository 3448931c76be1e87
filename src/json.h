/* json.h -- typed reads of the members of a JSON document (over cJSON), for whatever reads
 * one: the configs (config.c), the server's requests.
 *
 * A json_obj is an object of the document with its key path from the root. Each getter checks
 * the member's type and range and, on failure, returns PLUME_EFORMAT with a message naming the
 * document and the key path, e.g. "config.json: rope_parameters.full_attention.rope_theta must
 * be a number". An absent member and a JSON null are the same: an error for the required
 * getters, the default for the _or ones. Nothing is allocated: strings point into the cJSON
 * tree. Knows nothing of models or requests.
 *
 *     cJSON *root;
 *     if ((rc = json_parse(&root, text, "config.json", err))) return rc;
 *     json_obj o = json_root(root, "config.json"), rope;
 *     int32_t d;
 *     rc = json_i32(&o, "hidden_size", 2, 65536, &d, err);
 *     if (!rc) rc = json_child(&o, "rope_parameters", &rope, err);   // rope.path "rope_parameters"
 *     cJSON_Delete(root);
 */
#ifndef PLUME_JSON_H
#define PLUME_JSON_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "common.h"

/* An object of a document. Its path names it in messages; a member read from it is path.key. */
typedef struct {
    const cJSON *obj; /* the object; NULL (or a non-object) reads as one with no members */
    const char *doc;  /* the document in messages (a file path, "request"); NULL: no prefix */
    char path[128];   /* its key path from the root: "" for the root, "chunks[1]", "a.b" */
} json_obj;

/* Parse text into *root (cJSON_Delete it); PLUME_EFORMAT "DOC: invalid JSON near byte N". */
int json_parse(cJSON **root, const char *text, const char *doc, char **err);
/* The root object of a document (any value: a non-object has no members). */
json_obj json_root(const cJSON *root, const char *doc);

/* Member key, whatever its type; NULL when absent or null. */
const cJSON *json_member(const json_obj *o, const char *key);
/* Member key as an object in *child (path extended): absent or null gives an object with no
 * members; PLUME_EFORMAT "DOC: PATH is not an object" for another type. */
int json_child(const json_obj *o, const char *key, json_obj *child, char **err);
/* Items of array member key: their count, or -1 when it is absent or not an array. */
int32_t json_array_size(const json_obj *o, const char *key);
/* Item i of array member key as an object (path "key[i]"); no members if it is not one. */
json_obj json_item(const json_obj *o, const char *key, int32_t i);

/* An integer in [lo, hi]: "DOC: missing key PATH", "DOC: PATH must be an integer in [lo, hi]". */
int json_i32(const json_obj *o, const char *key, int64_t lo, int64_t hi, int32_t *out, char **err);
int json_i32_or(const json_obj *o, const char *key, int64_t lo, int64_t hi, int32_t dflt, int32_t *out,
                char **err);
/* The same for 64-bit values (|value| < 2^53, where a double holds every integer). */
int json_i64_or(const json_obj *o, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                char **err);
/* A finite number in [lo, hi] (-INFINITY, INFINITY: any): "DOC: PATH must be a number",
 * "DOC: PATH must be in [lo, hi]". */
int json_num(const json_obj *o, const char *key, double lo, double hi, double *out, char **err);
int json_num_or(const json_obj *o, const char *key, double lo, double hi, double dflt, double *out,
                char **err);
/* true or false: "DOC: PATH must be true or false". */
int json_bool_or(const json_obj *o, const char *key, int32_t dflt, int32_t *out, char **err);
/* A string (pointing into the tree): "DOC: PATH must be a string". */
int json_str_or(const json_obj *o, const char *key, const char *dflt, const char **out, char **err);
/* One of n names, *out its index: "DOC: key PATH must be a, b or c". */
int json_enum(const json_obj *o, const char *key, const char *const *names, int32_t n, int32_t *out,
              char **err);

#endif /* PLUME_JSON_H */
