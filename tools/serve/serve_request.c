/* serve_request.c -- the internal request of `plume serve`, in no dialect's words: its
 * errors, the typed JSON readers every dialect shares, the chat prompt of a request and the
 * context budget.
 *
 * Everything here reads untrusted bytes and nothing here touches a socket or the model, so
 * tests and fuzzers drive it directly. A field of the wrong type or out of range is a 400
 * naming the field. */
#include "serve.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------ */

/* Fill an error: status, type, the field, a code and a formatted message. */
int serve_error_set(serve_error *e, int32_t status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    return status;
}

/* A 400 invalid_request_error about one field. */
int serve_json_bad(serve_error *e, const char *param, const char *what) {
    return serve_error_set(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be %s", param, what);
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* Strict UTF-8 check: no overlongs, surrogates or code points past U+10FFFF. */
int serve_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        unsigned cp, min;
        if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (k > n - i - 1) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

/* ---- typed field readers ---------------------------------------------------------------- */

/* A boolean field. */
int serve_json_bool(const cJSON *o, const char *name, int32_t *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return serve_json_bad(e, name, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A number field in [lo, hi]. */
int serve_json_num(const cJSON *o, const char *name, double lo, double hi, float *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return serve_json_bad(e, name, "a number");
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi))
        return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                               "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = (float)d;
    return 0;
}

/* An integer field in [lo, hi]. */
int serve_json_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e18)
        return serve_json_bad(e, name, "an integer");
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                               "'%s' must be between %lld and %lld, got %.0f", name, (long long)lo,
                               (long long)hi, d);
    *out = (int64_t)d;
    return 0;
}

/* A string field, copied (malloc'd). */
int serve_json_str(const cJSON *o, const char *name, char **out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return serve_json_bad(e, name, "a string");
    free(*out);
    if (!(*out = strdup(v->valuestring)))
        return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

int serve_json_check(const char *body, size_t len, size_t *nodes, serve_error *e) {
    size_t n = 1; /* the root */
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];
        if (!in_str) {
            n += c == ',' || c == '[' || c == '{'; /* each element after the first, and each container's first */
            in_str = c == '"';
            continue;
        }
        if (c < 0x20)
            return serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                                   "the request body is not valid JSON: a raw control character (0x%02x) inside a string "
                                   "at byte %zu (write it escaped, as \\u%04x)", c, i, c);
        if (c == '"') in_str = 0;
        else if (c == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && len - i >= 6 && !memcmp(body + i + 2, "0000", 4))
                return serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_value",
                                       "a string holds \\u0000 (at byte %zu): NUL characters are not supported", i);
            i++; /* the escaped character */
        }
    }
    if (nodes) *nodes = n;
    return 0;
}

/* Parse the body as a JSON object (after checking its UTF-8); NULL and a 400 if it is not. */
cJSON *serve_json_object(const char *body, size_t len, serve_error *e) {
    if (!serve_utf8_valid(body, len)) {
        serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_utf8", "the request body is not valid UTF-8");
        return NULL;
    }
    if (serve_json_check(body, len, NULL, e)) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    size_t tail = root && end >= body && end <= body + len ? (size_t)(end - body) : len;
    while (root && tail < len && body[tail] && strchr(" \t\r\n", body[tail])) tail++;
    if (root && tail < len) { /* one JSON text per body: "{...} x" and "{...}{...}" are not requests */
        cJSON_Delete(root);
        serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "the request body is not valid JSON: bytes follow the object (at byte %zu)", tail);
        return NULL;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "the request body is not valid JSON (near byte %ld)", off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* ---- the request -------------------------------------------------------------------------- */

/* An empty request of a kind: the sampler's defaults, the default seed, no max_tokens. */
void serve_request_init(serve_request *r, serve_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = plume_sampler_default_params();
    r->sp.seed = SERVE_DEFAULT_SEED;
    r->max_tokens = -1;
}

/* Parse a body in a dialect; r is freed again on error. */
int serve_request_parse(serve_request *r, const serve_dialect *d, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    int rc = d->parse(r, body, len, e);
    if (rc) serve_request_free(r);
    return rc;
}

/* Free every string of a request. */
void serve_request_free(serve_request *r) {
    for (int32_t i = 0; i < r->n_msgs; i++) {
        serve_message *m = &r->msgs[i];
        free(m->role);
        free(m->content);
        for (int32_t p = 0; p < m->n_parts; p++) free(m->parts[p]);
        free(m->parts);
        free(m->reasoning_content);
        for (int32_t c = 0; c < m->n_calls; c++) {
            free(m->calls[c].id);
            free(m->calls[c].name);
            free(m->calls[c].arguments);
        }
        free(m->calls);
        free(m->tool_call_id);
        free(m->name);
    }
    free(r->msgs);
    for (int32_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->model);
    free(r->prompt);
    free(r->tools);
    free(r->tool_choice);
    memset(r, 0, sizeof *r);
}

/* Refuse a prompt that fills the context, or max_tokens that would pass it. */
int serve_check_budget(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx, serve_error *e) {
    if (n_prompt >= n_ctx)
        return serve_error_set(e, 400, "invalid_request_error", "messages", "context_length_exceeded",
                               "the prompt has %d tokens, but the context holds %d (and at least one token must "
                               "be left to answer); shorten it or start the server with a larger --context",
                               n_prompt, n_ctx);
    if (max_tokens > 0 && (int64_t)n_prompt + max_tokens > n_ctx)
        return serve_error_set(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                               "the context holds %d tokens, but %d were requested (%d in the prompt, %d to "
                               "generate); lower max_tokens",
                               n_ctx, n_prompt + max_tokens, n_prompt, max_tokens);
    return 0;
}

/* ---- the prompt ------------------------------------------------------------------------------- */

/* The prompt text of a chat request: the chat template with tools, tool calls and replies,
 * content parts and reasoning (plume_chat_render_ex). tool_choice "none" renders no tools;
 * *in_thought says whether the prompt opened the thought channel. 0 or an error in e. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e) {
    plume_chat_message_ex *msgs = calloc((size_t)r->n_msgs, sizeof *msgs);
    plume_chat_tool_call **calls = calloc((size_t)r->n_msgs, sizeof *calls);
    int rc = msgs && calls ? 0 : serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int32_t i = 0; !rc && i < r->n_msgs; i++) {
        const serve_message *m = &r->msgs[i];
        msgs[i] = (plume_chat_message_ex){.role = m->role, .content = m->content, .parts = (const char *const *)m->parts,
                                          .n_parts = m->n_parts, .reasoning_content = m->reasoning_content,
                                          .tool_call_id = m->tool_call_id, .name = m->name};
        if (!m->n_calls) continue;
        if (!(calls[i] = calloc((size_t)m->n_calls, sizeof **calls))) {
            rc = serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            break;
        }
        for (int32_t k = 0; k < m->n_calls; k++)
            calls[i][k] = (plume_chat_tool_call){m->calls[k].id, m->calls[k].name, m->calls[k].arguments};
        msgs[i].tool_calls = calls[i];
        msgs[i].n_tool_calls = m->n_calls;
    }
    char *err = NULL;
    if (!rc) {
        plume_chat_options opt = {.add_generation_prompt = 1, .enable_thinking = r->enable_thinking,
                                  .tools_json = r->tool_choice && !strcmp(r->tool_choice, "none") ? NULL : r->tools};
        int lrc = plume_chat_render_ex(msgs, r->n_msgs, &opt, out, &err);
        if (lrc)
            rc = serve_error_set(e, lrc == PLUME_ENOMEM ? 500 : 400,
                                 lrc == PLUME_ENOMEM ? "server_error" : "invalid_request_error", "messages", NULL, "%s",
                                 err ? err : "cannot render the messages");
    }
    free(err);
    if (!rc) {
        static const char thought[] = "<|channel>thought\n";
        size_t n = strlen(*out), k = sizeof thought - 1;
        *in_thought = n >= k && !memcmp(*out + n - k, thought, k);
    }
    for (int32_t i = 0; calls && i < r->n_msgs; i++) free(calls[i]);
    free(calls);
    free(msgs);
    return rc;
}
