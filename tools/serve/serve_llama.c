/* serve_llama.c -- llama-server's dialect (docs/SERVER.md): the bodies of POST /tokenize
 * ({"content", "add_special"} -> {"tokens"}) and POST /detokenize ({"tokens"} -> {"content"}).
 * Their errors are written in OpenAI's shape (serve_openai_error), as llama-server does. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests ---------------------------------------------------------------------------------- */

/* Parse a /tokenize body. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e) {
    *content = NULL;
    *add_special = 0;
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc = serve_json_bool(root, "add_special", add_special, e);
    if (!rc && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "content")))
        rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "content", "invalid_value", "'content' must be a string");
    if (!rc) rc = serve_json_str(root, "content", content, e);
    cJSON_Delete(root);
    return rc;
}

/* Parse a /detokenize body, checking every id against the vocabulary. */
int serve_detokenize_parse(const char *body, size_t len, int32_t n_vocab, int32_t **ids, int32_t *n,
                           serve_error *e) {
    *ids = NULL;
    *n = 0;
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *v;
    int rc = 0;
    if (!cJSON_IsArray(t)) {
        rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "tokens", "invalid_value", "'tokens' must be a list of token ids");
    } else if (!(*ids = malloc(((size_t)cJSON_GetArraySize(t) + 1) * sizeof **ids))) {
        rc = SERVE_OOM(e);
    } else {
        cJSON_ArrayForEach(v, t) {
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
                v->valuedouble >= n_vocab) {
                rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "tokens", "invalid_value",
                                     "'tokens' must hold integer ids in [0, %d)", n_vocab);
                break;
            }
            (*ids)[(*n)++] = (int32_t)v->valuedouble;
        }
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- replies ----------------------------------------------------------------------------------- */

/* {"tokens": [bos?, ids...]}, printed as it goes (at most 12 bytes an id). */
char *serve_tokenize_reply(const int32_t *ids, int32_t n, int32_t bos) {
    char *out = malloc((size_t)n * 12 + 32), *o = out;
    if (!out) return NULL;
    o += bos >= 0 ? sprintf(o, "{\"tokens\":[%d", bos) : sprintf(o, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) o += sprintf(o, "%s%d", i || bos >= 0 ? "," : "", ids[i]);
    strcpy(o, "]}");
    return out;
}

/* {"content": text}. */
char *serve_detokenize_reply(const char *text) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "content", text);
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}
