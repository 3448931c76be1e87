/* fuzz_serve.h -- what the server's harnesses (fuzz_serve_req, fuzz_serve_form) share: the
 * check that a refusal is one a client can read in its dialect. */
#ifndef PLUME_FUZZ_SERVE_H
#define PLUME_FUZZ_SERVE_H

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "serve/serve.h"

/* A refusal must be a 4xx whose body, in the dialect's words, is a JSON object with a
 * non-empty message: {"error": {"message"}} (OpenAI, Anthropic) or {"error": "message"}
 * (Ollama). */
static void check_error(int rc, const serve_error *e, const serve_dialect *d) {
    if (rc < 400 || rc > 499 || e->status != rc || !*e->message) abort();
    char *body = d->error(e);
    cJSON *root = cJSON_Parse(body);
    free(body);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_IsString(err) ? err : cJSON_GetObjectItemCaseSensitive(err, "message");
    if (!cJSON_IsObject(root) || !cJSON_IsString(msg) || !*msg->valuestring) abort();
    cJSON_Delete(root);
}

#endif
