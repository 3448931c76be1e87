/* serve_req.c -- the bytes side of `plume serve`: request bodies in, parsed requests or
 * OpenAI-shaped errors out; and the JSON of every reply (chunks, final answers, usage).
 *
 * Everything here reads untrusted bytes and nothing here touches a socket or the model (the
 * tokenizer is used only to spell logprob tokens), so tests and fuzzers drive it directly.
 * A field of the wrong type or out of range is a 400 naming the field in "param"; unknown
 * fields are ignored, as OpenAI's SDKs send fields a server may not know. */
#include "serve.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------ */

/* {"error": {"message": msg, "type": type, "param": param, "code": code}}, malloc'd. */
static char *error_json(const char *msg, const char *type, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    if (!e) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* Fill an error: status and the OpenAI error JSON of a formatted message. */
int serve_error_set(serve_error *e, int32_t status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(e->body);
    e->status = status;
    e->body = error_json(msg, type, param, code);
    return status;
}

/* Free an error's body (the struct may be reused). */
void serve_error_free(serve_error *e) {
    free(e->body);
    e->body = NULL;
    e->status = 0;
}

/* A 400 invalid_request_error about one field. */
static int bad_field(serve_error *e, const char *param, const char *fmt, const char *what) {
    return serve_error_set(e, 400, "invalid_request_error", param, "invalid_value", fmt, param, what);
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

/* ---- typed field readers ----------------------------------------------------------------
 * Each leaves *out untouched when the field is absent or null, returns 0, or a 400. */

/* A boolean field. */
static int get_bool(const cJSON *o, const char *name, int32_t *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return bad_field(e, name, "'%s' must be %s", "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A number field in [lo, hi]. */
static int get_num(const cJSON *o, const char *name, double lo, double hi, float *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return bad_field(e, name, "'%s' must be %s", "a number");
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi))
        return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                               "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = (float)d;
    return 0;
}

/* An integer field in [lo, hi]. */
static int get_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e18)
        return bad_field(e, name, "'%s' must be %s", "an integer");
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                               "'%s' must be between %lld and %lld, got %.0f", name, (long long)lo,
                               (long long)hi, d);
    *out = (int64_t)d;
    return 0;
}

/* A string field, copied (malloc'd). */
static int get_str(const cJSON *o, const char *name, char **out, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return bad_field(e, name, "'%s' must be %s", "a string");
    free(*out);
    if (!(*out = strdup(v->valuestring)))
        return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* Parse the body as a JSON object (after checking its UTF-8); NULL and a 400 if it is not. */
static cJSON *parse_object(const char *body, size_t len, serve_error *e) {
    if (!serve_utf8_valid(body, len)) {
        serve_error_set(e, 400, "invalid_request_error", NULL, "invalid_utf8", "the request body is not valid UTF-8");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
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

/* ---- chat messages ------------------------------------------------------------------------ */

/* A message's content: a string (*out), or a list of text parts (*parts); null stays NULL. */
static int message_content(const cJSON *v, serve_message *m, const char *param, serve_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!(m->content = strdup(v->valuestring))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad_field(e, param, "'%s' must be %s", "a string or a list of content parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return bad_field(e, param, "'%s' must be %s", "a list of objects with a 'type'");
        if (strcmp(type->valuestring, "text"))
            return serve_error_set(e, 400, "invalid_request_error", param, "unsupported_content",
                                   "content parts of type '%.64s' are not supported (text only)", type->valuestring);
        if (!cJSON_IsString(text)) return bad_field(e, param, "'%s' must be %s", "a list of text parts with a 'text' string");
    }
    if (!(m->parts = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *m->parts)))
        return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    cJSON_ArrayForEach(part, v) {
        if (!(m->parts[m->n_parts] = strdup(cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring)))
            return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        m->n_parts++;
    }
    return 0;
}

/* An assistant message's tool_calls: a list of {id, type: function, function: {name,
 * arguments}}, kept as JSON text. */
static int message_tool_calls(const cJSON *v, char **out, const char *param, serve_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return bad_field(e, param, "'%s' must be %s", "a list of tool calls");
    const cJSON *c;
    cJSON_ArrayForEach(c, v) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(f) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")) ||
            (args && !cJSON_IsString(args) && !cJSON_IsObject(args)))
            return bad_field(e, param, "'%s' must be %s",
                             "a list of {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    }
    if (!(*out = cJSON_PrintUnformatted(v))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* One element of "messages". */
static int parse_message(const cJSON *m, int32_t i, serve_message *out, serve_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return bad_field(e, param, "'%s' must be %s", "an object");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    int known = 0;
    for (size_t k = 0; cJSON_IsString(role) && k < sizeof roles / sizeof *roles; k++)
        known |= !strcmp(role->valuestring, roles[k]);
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!known) return bad_field(e, param, "'%s' must be %s", "one of system, developer, user, assistant, tool");
    if (!(out->role = strdup(role->valuestring))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    int rc;
    snprintf(param, sizeof param, "messages[%d].content", i);
    if ((rc = message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), out, param, e))) return rc;
    int assistant = !strcmp(out->role, "assistant");
    if (assistant) {
        snprintf(param, sizeof param, "messages[%d].tool_calls", i);
        if ((rc = message_tool_calls(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), &out->tool_calls, param, e)))
            return rc;
        snprintf(param, sizeof param, "messages[%d].reasoning_content", i);
        if (cJSON_GetObjectItemCaseSensitive(m, "reasoning_content")) {
            if ((rc = get_str(m, "reasoning_content", &out->reasoning_content, e))) return rc;
        } else if ((rc = get_str(m, "reasoning", &out->reasoning_content, e))) {
            return rc;
        }
    }
    if ((rc = get_str(m, "tool_call_id", &out->tool_call_id, e)) || (rc = get_str(m, "name", &out->name, e))) return rc;
    if (!out->content && !out->parts && !(assistant && out->tool_calls)) {
        snprintf(param, sizeof param, "messages[%d].content", i);
        return serve_error_set(e, 400, "invalid_request_error", param, "missing_field", "'%s' is required", param);
    }
    return 0;
}

/* "messages": a non-empty list of at most SERVE_MAX_MESSAGES. */
static int parse_messages(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!v) return serve_error_set(e, 400, "invalid_request_error", "messages", "missing_field", "'messages' is required");
    if (!cJSON_IsArray(v)) return bad_field(e, "messages", "'%s' must be %s", "a list of messages");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > SERVE_MAX_MESSAGES)
        return serve_error_set(e, 400, "invalid_request_error", "messages", "invalid_value",
                               "'messages' must hold 1 to %d messages, got %d", SERVE_MAX_MESSAGES, n);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        int rc = parse_message(m, r->n_msgs, &r->msgs[r->n_msgs], e);
        r->n_msgs++;
        if (rc) return rc;
    }
    return 0;
}

/* ---- sampling, stops, tools, thinking ----------------------------------------------------- */

/* temperature, top_p, top_k, min_p, penalties, seed. */
static int parse_sampling(const cJSON *root, serve_request *r, serve_error *e) {
    plume_sampler_params *p = &r->sp;
    int64_t k = p->top_k, seed = SERVE_DEFAULT_SEED;
    int rc;
    if ((rc = get_num(root, "temperature", 0, 2, &p->temperature, e)) || (rc = get_num(root, "top_p", 0, 1, &p->top_p, e)) ||
        (rc = get_int(root, "top_k", 0, 1 << 24, &k, e)) || (rc = get_num(root, "min_p", 0, 1, &p->min_p, e)) ||
        (rc = get_num(root, "presence_penalty", -2, 2, &p->presence_penalty, e)) ||
        (rc = get_num(root, "frequency_penalty", -2, 2, &p->frequency_penalty, e)) ||
        (rc = get_num(root, "repeat_penalty", 0.01, 100, &p->repeat_penalty, e)) ||
        (rc = get_int(root, "seed", INT64_MIN / 2, INT64_MAX / 2, &seed, e)))
        return rc;
    p->top_k = (int32_t)k;
    p->seed = (uint64_t)seed;
    if (p->top_p <= 0) p->temperature = 0; /* the limit of a vanishing nucleus: the top token */
    return 0;
}

/* "stop": a string or a list of strings. */
static int parse_stop(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v) && !cJSON_IsArray(v)) return bad_field(e, "stop", "'%s' must be %s", "a string or a list of strings");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
        return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value", "'stop' holds at most %d strings",
                               SERVE_MAX_STOPS);
    const cJSON *s = v;
    int one = cJSON_IsString(v);
    for (s = one ? v : v->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s) || !*s->valuestring || strlen(s->valuestring) > SERVE_MAX_STOP_LEN)
            return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value",
                                   "'stop' strings must be non-empty and at most %d bytes", SERVE_MAX_STOP_LEN);
        if (!(r->stops[r->n_stops] = strdup(s->valuestring))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_stops++;
    }
    return 0;
}

/* "tools" (a list of function declarations, kept as JSON) and "tool_choice". */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v)) return bad_field(e, "tools", "'%s' must be %s", "a list of tools");
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(f) ||
                !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")))
                return bad_field(e, "tools", "'%s' must be %s",
                                 "a list of {\"type\": \"function\", \"function\": {\"name\", ...}}");
        }
        if (cJSON_GetArraySize(v) > 0 && !(r->tools = cJSON_PrintUnformatted(v)))
            return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const char *choice = "auto";
    if (cJSON_IsString(c)) {
        choice = c->valuestring;
        if (strcmp(choice, "auto") && strcmp(choice, "none") && strcmp(choice, "required"))
            return bad_field(e, "tool_choice", "'%s' must be %s", "\"auto\", \"none\", \"required\" or a function");
    } else if (cJSON_IsObject(c)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
        if (!cJSON_IsString(name)) return bad_field(e, "tool_choice", "'%s' must be %s", "{\"type\": \"function\", \"function\": {\"name\"}}");
        choice = name->valuestring;
    } else if (c && !cJSON_IsNull(c)) {
        return bad_field(e, "tool_choice", "'%s' must be %s", "a string or an object");
    }
    if (!(r->tool_choice = strdup(choice))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* Thinking: reasoning_effort (none/minimal off; low/medium/high on), or llama-server's
 * chat_template_kwargs.enable_thinking. */
static int parse_thinking(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    if (v && !cJSON_IsNull(v)) {
        static const char *const on[] = {"low", "medium", "high"}, *const off[] = {"none", "minimal"};
        int found = 0;
        for (int i = 0; cJSON_IsString(v) && i < 3; i++)
            if (!strcmp(v->valuestring, on[i])) r->enable_thinking = 1, found = 1;
        for (int i = 0; cJSON_IsString(v) && i < 2; i++)
            if (!strcmp(v->valuestring, off[i])) r->enable_thinking = 0, found = 1;
        if (!found) return bad_field(e, "reasoning_effort", "'%s' must be %s", "none, minimal, low, medium or high");
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) return bad_field(e, "chat_template_kwargs", "'%s' must be %s", "an object");
        return get_bool(kw, "enable_thinking", &r->enable_thinking, e);
    }
    return 0;
}

/* ---- the request -------------------------------------------------------------------------- */

/* Fields both endpoints take: model, stream, max_tokens, sampling, stop, n. */
static int parse_common(const cJSON *root, serve_request *r, serve_error *e) {
    int rc;
    int64_t n = 1, max_tokens = r->max_tokens;
    if ((rc = get_str(root, "model", &r->model, e)) || (rc = get_bool(root, "stream", &r->stream, e)) ||
        (rc = get_int(root, "n", 1, 1, &n, e)) || (rc = get_bool(root, "ignore_eos", &r->ignore_eos, e)) || (rc = get_int(root, "max_tokens", 1, 1 << 24, &max_tokens, e)) ||
        (rc = get_int(root, "max_completion_tokens", 1, 1 << 24, &max_tokens, e)) || (rc = parse_sampling(root, r, e)) ||
        (rc = parse_stop(root, r, e)))
        return rc;
    r->max_tokens = (int32_t)max_tokens;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad_field(e, "stream_options", "'%s' must be %s", "an object");
        if ((rc = get_bool(so, "include_usage", &r->include_usage, e))) return rc;
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *rft = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (rf && !cJSON_IsNull(rf) && (!cJSON_IsString(rft) || strcmp(rft->valuestring, "text")))
        return serve_error_set(e, 400, "invalid_request_error", "response_format", "unsupported_value",
                               "'response_format' other than {\"type\": \"text\"} is not supported");
    return 0;
}

/* /v1/chat/completions fields. */
static int parse_chat(const cJSON *root, serve_request *r, serve_error *e) {
    int rc;
    int64_t top = 0;
    if ((rc = parse_messages(root, r, e)) || (rc = parse_tools(root, r, e)) || (rc = parse_thinking(root, r, e)) ||
        (rc = get_bool(root, "logprobs", &r->logprobs, e)) ||
        (rc = get_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e)))
        return rc;
    r->top_logprobs = (int32_t)top;
    if (top > 0 && !r->logprobs)
        return serve_error_set(e, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                               "'top_logprobs' needs 'logprobs': true");
    return 0;
}

/* /v1/completions fields: one prompt (a string, or a list holding one string). */
static int parse_completion(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = p->child;
    if (!p) return serve_error_set(e, 400, "invalid_request_error", "prompt", "missing_field", "'prompt' is required");
    if (!cJSON_IsString(p)) return bad_field(e, "prompt", "'%s' must be %s", "a string (one prompt per request)");
    if (!(r->prompt = strdup(p->valuestring))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    static const char *const unsupported[] = {"echo", "suffix", "logprobs", "best_of"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, unsupported[i]);
        int harmless = !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == (i == 3 ? 1 : 0));
        if (!harmless)
            return serve_error_set(e, 400, "invalid_request_error", unsupported[i], "unsupported_value",
                                   "'%s' is not supported by /v1/completions here", unsupported[i]);
    }
    return 0;
}

/* Parse a /v1/chat/completions or /v1/completions body into r (freed again on error). */
int serve_request_parse(serve_request *r, serve_kind kind, const char *body, size_t len, serve_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = plume_sampler_default_params();
    r->sp.seed = SERVE_DEFAULT_SEED;
    r->max_tokens = kind == SERVE_COMPLETION ? 16 : -1; /* OpenAI's defaults */
    cJSON *root = parse_object(body, len, e);
    if (!root) return e->status;
    int rc = parse_common(root, r, e);
    if (!rc) rc = kind == SERVE_CHAT ? parse_chat(root, r, e) : parse_completion(root, r, e);
    cJSON_Delete(root);
    if (rc) serve_request_free(r);
    return rc;
}

/* Free every string of a parsed request. */
void serve_request_free(serve_request *r) {
    for (int32_t i = 0; i < r->n_msgs; i++) {
        serve_message *m = &r->msgs[i];
        free(m->role);
        free(m->content);
        for (int32_t p = 0; p < m->n_parts; p++) free(m->parts[p]);
        free(m->parts);
        free(m->reasoning_content);
        free(m->tool_calls);
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

/* The tool calls of an assistant message (its tool_calls JSON) as the renderer takes them;
 * the strings point into *root (freed by the caller). 0 or a 400 in e. */
static int tool_calls_of(const serve_message *m, cJSON **root, plume_chat_tool_call **calls, int32_t *n,
                         serve_error *e) {
    *root = cJSON_Parse(m->tool_calls);
    int32_t k = cJSON_GetArraySize(*root);
    if (!(*calls = calloc((size_t)k + 1, sizeof **calls))) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    cJSON *c;
    cJSON_ArrayForEach(c, *root) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (cJSON_IsObject(args)) { /* some clients send an object, not its text */
            char *text = cJSON_PrintUnformatted(args);
            if (!text) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", cJSON_CreateString(text));
            free(text);
            args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        }
        (*calls)[*n] = (plume_chat_tool_call){cJSON_IsString(id) ? id->valuestring : NULL,
                                              cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring,
                                              cJSON_IsString(args) ? args->valuestring : NULL};
        ++*n;
    }
    return 0;
}

/* The prompt text of a chat request: the chat template with tools, tool calls and replies,
 * content parts and reasoning (plume_chat_render_ex). tool_choice "none" renders no tools;
 * *in_thought says whether the prompt opened the thought channel. 0 or an error in e. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e) {
    plume_chat_message_ex *msgs = calloc((size_t)r->n_msgs, sizeof *msgs);
    cJSON **roots = calloc((size_t)r->n_msgs, sizeof *roots);
    int rc = msgs && roots ? 0 : serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int32_t i = 0; !rc && i < r->n_msgs; i++) {
        const serve_message *m = &r->msgs[i];
        msgs[i] = (plume_chat_message_ex){.role = m->role, .content = m->content, .parts = (const char *const *)m->parts,
                                          .n_parts = m->n_parts, .reasoning_content = m->reasoning_content,
                                          .tool_call_id = m->tool_call_id, .name = m->name};
        if (m->tool_calls) {
            plume_chat_tool_call *calls = NULL;
            int32_t n = 0;
            rc = tool_calls_of(m, &roots[i], &calls, &n, e);
            msgs[i].tool_calls = calls;
            msgs[i].n_tool_calls = n;
        }
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
    for (int32_t i = 0; msgs && roots && i < r->n_msgs; i++) {
        free((void *)msgs[i].tool_calls);
        cJSON_Delete(roots[i]);
    }
    free(msgs);
    free(roots);
    return rc;
}

/* ---- tokenize / detokenize ------------------------------------------------------------------ */

/* Parse a /tokenize body. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e) {
    *content = NULL;
    *add_special = 0;
    cJSON *root = parse_object(body, len, e);
    if (!root) return e->status;
    int rc = get_bool(root, "add_special", add_special, e);
    if (!rc && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "content")))
        rc = serve_error_set(e, 400, "invalid_request_error", "content", "invalid_value", "'content' must be a string");
    if (!rc) rc = get_str(root, "content", content, e);
    cJSON_Delete(root);
    return rc;
}

/* Parse a /detokenize body, checking every id against the vocabulary. */
int serve_detokenize_parse(const char *body, size_t len, int32_t n_vocab, int32_t **ids, int32_t *n,
                           serve_error *e) {
    *ids = NULL;
    *n = 0;
    cJSON *root = parse_object(body, len, e);
    if (!root) return e->status;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *v;
    int rc = 0;
    if (!cJSON_IsArray(t)) {
        rc = serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value", "'tokens' must be a list of token ids");
    } else if (!(*ids = malloc(((size_t)cJSON_GetArraySize(t) + 1) * sizeof **ids))) {
        rc = serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        cJSON_ArrayForEach(v, t) {
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
                v->valuedouble >= n_vocab) {
                rc = serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value",
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

/* ---- replies ------------------------------------------------------------------------------ */

/* The usage object of a reply. */
cJSON *serve_json_usage(const serve_usage *u) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt);
    cJSON_AddNumberToObject(o, "completion_tokens", u->completion);
    cJSON_AddNumberToObject(o, "total_tokens", (double)u->prompt + u->completion);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", u->cached);
    return o;
}

/* The timings object of a reply, named as llama-server names it: prompt_n (tokens computed,
 * not reused), prompt_ms, predicted_n (tokens of decode steps: all but the first, which the
 * prefill makes), predicted_ms, and the per-second rates. */
static cJSON *json_timings(const serve_usage *u) {
    cJSON *o = cJSON_CreateObject();
    int32_t pn = u->prompt - u->cached, dn = u->completion > 1 ? u->completion - 1 : 0;
    cJSON_AddNumberToObject(o, "prompt_n", pn);
    cJSON_AddNumberToObject(o, "prompt_ms", u->prompt_ms);
    cJSON_AddNumberToObject(o, "prompt_per_second", u->prompt_ms > 0 ? pn * 1000.0 / u->prompt_ms : 0);
    cJSON_AddNumberToObject(o, "predicted_n", dn);
    cJSON_AddNumberToObject(o, "predicted_ms", u->predicted_ms);
    cJSON_AddNumberToObject(o, "predicted_per_second", u->predicted_ms > 0 ? dn * 1000.0 / u->predicted_ms : 0);
    return o;
}

/* {"token", "logprob", "bytes"} of one id (no top_logprobs). */
static cJSON *logprob_item(const plume_tokenizer *tok, int32_t id, float lp) {
    char text[512];
    int64_t k = plume_detokenize(tok, &id, 1, 0, text, sizeof text);
    if (k < 0) k = 0;
    if (k >= (int64_t)sizeof text) k = sizeof text - 1;
    text[k] = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", text);
    cJSON_AddNumberToObject(o, "logprob", isfinite(lp) ? lp : -9999.0);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int64_t i = 0; b && i < k; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)text[i]));
    return o;
}

/* One logprobs.content entry with its alternatives. */
cJSON *serve_json_logprob(const plume_tokenizer *tok, int32_t id, float logprob, const int32_t *top_ids,
                          const float *top_lps, int32_t n_top) {
    cJSON *o = logprob_item(tok, id, logprob);
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int32_t i = 0; top && i < n_top; i++) cJSON_AddItemToArray(top, logprob_item(tok, top_ids[i], top_lps[i]));
    return o;
}

/* The head every chunk and reply starts with. */
static cJSON *reply_root(const serve_reply_head *h, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", h->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)h->created);
    cJSON_AddStringToObject(o, "model", h->model ? h->model : "");
    cJSON_AddStringToObject(o, "system_fingerprint", "plume-" PLUME_VERSION);
    return o;
}

/* Add "logprobs": {"content": [...]} (chat) or null, consuming d->logprobs. */
static void add_logprobs(cJSON *choice, serve_delta *d) {
    if (d->logprobs) {
        cJSON *l = cJSON_AddObjectToObject(choice, "logprobs");
        if (l) cJSON_AddItemToObject(l, "content", d->logprobs);
        else cJSON_Delete(d->logprobs);
        d->logprobs = NULL;
    } else {
        cJSON_AddNullToObject(choice, "logprobs");
    }
}

/* Add "finish_reason": the reason or null. */
static void add_finish(cJSON *choice, const serve_delta *d) {
    if (d->finish_reason) cJSON_AddStringToObject(choice, "finish_reason", d->finish_reason);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

/* Print and free root. */
static char *print_free(cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* One streamed chunk: a delta, the finish reason, or the usage alone. */
char *serve_json_chunk(const serve_reply_head *h, serve_delta *d) {
    int chat = h->kind == SERVE_CHAT;
    cJSON *root = reply_root(h, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    if (d->usage && !d->content && !d->reasoning && !d->tool_calls && !d->finish_reason && !d->role) {
        cJSON_AddItemToObject(root, "usage", serve_json_usage(d->usage)); /* the include_usage chunk */
        cJSON_AddItemToObject(root, "timings", json_timings(d->usage));
        cJSON_Delete(d->logprobs);
        d->logprobs = NULL;
        return print_free(root);
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (d->role) cJSON_AddStringToObject(delta, "role", "assistant");
        if (d->content) cJSON_AddStringToObject(delta, "content", d->content);
        if (d->reasoning) cJSON_AddStringToObject(delta, "reasoning_content", d->reasoning);
        if (d->tool_calls) cJSON_AddItemToObject(delta, "tool_calls", d->tool_calls);
    } else {
        cJSON_AddStringToObject(c, "text", d->content ? d->content : "");
        cJSON_Delete(d->tool_calls);
    }
    d->tool_calls = NULL;
    add_logprobs(c, d);
    add_finish(c, d);
    if (chat) cJSON_AddNullToObject(root, "usage");
    return print_free(root);
}

/* The whole reply of a non-streamed request. */
char *serve_json_final(const serve_reply_head *h, serve_delta *d) {
    int chat = h->kind == SERVE_CHAT;
    cJSON *root = reply_root(h, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (d->content || !d->tool_calls) cJSON_AddStringToObject(m, "content", d->content ? d->content : "");
        else cJSON_AddNullToObject(m, "content");
        if (d->reasoning) cJSON_AddStringToObject(m, "reasoning_content", d->reasoning);
        if (d->tool_calls) cJSON_AddItemToObject(m, "tool_calls", d->tool_calls);
    } else {
        cJSON_AddStringToObject(c, "text", d->content ? d->content : "");
        cJSON_Delete(d->tool_calls);
    }
    d->tool_calls = NULL;
    add_logprobs(c, d);
    add_finish(c, d);
    if (d->usage) {
        cJSON_AddItemToObject(root, "usage", serve_json_usage(d->usage));
        cJSON_AddItemToObject(root, "timings", json_timings(d->usage));
    }
    return print_free(root);
}
