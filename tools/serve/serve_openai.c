/* serve_openai.c -- OpenAI's dialect (docs/SERVER.md): /v1/chat/completions and
 * /v1/completions request bodies -> the internal request; answer events -> chat.completion
 * chunks (server-sent events ending in "data: [DONE]") or the whole reply; errors ->
 * {"error": {"message", "type", "param", "code"}}. Also llama-server's /tokenize and
 * /detokenize bodies, which answer in the same error shape.
 *
 * Unknown fields are ignored, as OpenAI's SDKs send fields a server may not know; a known
 * field plume cannot honour is a 400 naming it. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OOM(e) serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory")

/* ---- chat messages ------------------------------------------------------------------------ */

/* A message's content: a string (m->content), or a list of text parts (m->parts); null stays
 * NULL. */
static int message_content(const cJSON *v, serve_message *m, const char *param, serve_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) return (m->content = strdup(v->valuestring)) ? 0 : OOM(e);
    if (!cJSON_IsArray(v)) return serve_json_bad(e, param, "a string or a list of content parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) return serve_json_bad(e, param, "a list of objects with a 'type'");
        if (strcmp(type->valuestring, "text"))
            return serve_error_set(e, 400, "invalid_request_error", param, "unsupported_content",
                                   "content parts of type '%.64s' are not supported (text only)", type->valuestring);
        if (!cJSON_IsString(text)) return serve_json_bad(e, param, "a list of text parts with a 'text' string");
    }
    if (!(m->parts = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *m->parts))) return OOM(e);
    cJSON_ArrayForEach(part, v) {
        if (!(m->parts[m->n_parts] = strdup(cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring))) return OOM(e);
        m->n_parts++;
    }
    return 0;
}

/* An assistant message's tool_calls: a list of {id, type: function, function: {name,
 * arguments}}; arguments as JSON text (some clients send an object: its text is taken). */
static int message_tool_calls(const cJSON *v, serve_message *m, const char *param, serve_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return serve_json_bad(e, param, "a list of tool calls");
    const cJSON *c;
    cJSON_ArrayForEach(c, v) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(f) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")) ||
            (args && !cJSON_IsString(args) && !cJSON_IsObject(args)))
            return serve_json_bad(e, param, "a list of {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    }
    if (!(m->calls = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *m->calls))) return OOM(e);
    cJSON_ArrayForEach(c, v) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        serve_tool_call *t = &m->calls[m->n_calls++];
        if (cJSON_IsString(id) && !(t->id = strdup(id->valuestring))) return OOM(e);
        if (!(t->name = strdup(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring))) return OOM(e);
        if (cJSON_IsString(args) && !(t->arguments = strdup(args->valuestring))) return OOM(e);
        if (cJSON_IsObject(args) && !(t->arguments = cJSON_PrintUnformatted(args))) return OOM(e);
    }
    return 0;
}

/* One element of "messages". */
static int parse_message(const cJSON *m, int32_t i, serve_message *out, serve_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return serve_json_bad(e, param, "an object");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    int known = 0;
    for (size_t k = 0; cJSON_IsString(role) && k < sizeof roles / sizeof *roles; k++)
        known |= !strcmp(role->valuestring, roles[k]);
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!known) return serve_json_bad(e, param, "one of system, developer, user, assistant, tool");
    if (!(out->role = strdup(role->valuestring))) return OOM(e);
    int rc;
    snprintf(param, sizeof param, "messages[%d].content", i);
    if ((rc = message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), out, param, e))) return rc;
    int assistant = !strcmp(out->role, "assistant");
    if (assistant) {
        snprintf(param, sizeof param, "messages[%d].tool_calls", i);
        if ((rc = message_tool_calls(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), out, param, e))) return rc;
        if (cJSON_GetObjectItemCaseSensitive(m, "reasoning_content")) {
            if ((rc = serve_json_str(m, "reasoning_content", &out->reasoning_content, e))) return rc;
        } else if ((rc = serve_json_str(m, "reasoning", &out->reasoning_content, e))) {
            return rc;
        }
    }
    if ((rc = serve_json_str(m, "tool_call_id", &out->tool_call_id, e)) || (rc = serve_json_str(m, "name", &out->name, e)))
        return rc;
    if (!out->content && !out->parts && !(assistant && out->calls)) {
        snprintf(param, sizeof param, "messages[%d].content", i);
        return serve_error_set(e, 400, "invalid_request_error", param, "missing_field", "'%s' is required", param);
    }
    return 0;
}

/* "messages": a non-empty list of at most SERVE_MAX_MESSAGES. */
static int parse_messages(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!v) return serve_error_set(e, 400, "invalid_request_error", "messages", "missing_field", "'messages' is required");
    if (!cJSON_IsArray(v)) return serve_json_bad(e, "messages", "a list of messages");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > SERVE_MAX_MESSAGES)
        return serve_error_set(e, 400, "invalid_request_error", "messages", "invalid_value",
                               "'messages' must hold 1 to %d messages, got %d", SERVE_MAX_MESSAGES, n);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return OOM(e);
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
    if ((rc = serve_json_num(root, "temperature", 0, 2, &p->temperature, e)) ||
        (rc = serve_json_num(root, "top_p", 0, 1, &p->top_p, e)) || (rc = serve_json_int(root, "top_k", 0, 1 << 24, &k, e)) ||
        (rc = serve_json_num(root, "min_p", 0, 1, &p->min_p, e)) ||
        (rc = serve_json_num(root, "presence_penalty", -2, 2, &p->presence_penalty, e)) ||
        (rc = serve_json_num(root, "frequency_penalty", -2, 2, &p->frequency_penalty, e)) ||
        (rc = serve_json_num(root, "repeat_penalty", 0.01, 100, &p->repeat_penalty, e)) ||
        (rc = serve_json_int(root, "seed", INT64_MIN / 2, INT64_MAX / 2, &seed, e)))
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
    if (!cJSON_IsString(v) && !cJSON_IsArray(v)) return serve_json_bad(e, "stop", "a string or a list of strings");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
        return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value", "'stop' holds at most %d strings",
                               SERVE_MAX_STOPS);
    int one = cJSON_IsString(v);
    for (const cJSON *s = one ? v : v->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s) || !*s->valuestring || strlen(s->valuestring) > SERVE_MAX_STOP_LEN)
            return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value",
                                   "'stop' strings must be non-empty and at most %d bytes", SERVE_MAX_STOP_LEN);
        if (!(r->stops[r->n_stops] = strdup(s->valuestring))) return OOM(e);
        r->n_stops++;
    }
    return 0;
}

/* "tools" (a list of function declarations, kept as JSON) and "tool_choice". */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v)) return serve_json_bad(e, "tools", "a list of tools");
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(f) ||
                !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "name")))
                return serve_json_bad(e, "tools", "a list of {\"type\": \"function\", \"function\": {\"name\", ...}}");
        }
        if (cJSON_GetArraySize(v) > 0 && !(r->tools = cJSON_PrintUnformatted(v))) return OOM(e);
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const char *choice = "auto";
    if (cJSON_IsString(c)) {
        choice = c->valuestring;
        if (strcmp(choice, "auto") && strcmp(choice, "none") && strcmp(choice, "required"))
            return serve_json_bad(e, "tool_choice", "\"auto\", \"none\", \"required\" or a function");
    } else if (cJSON_IsObject(c)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
        if (!cJSON_IsString(name)) return serve_json_bad(e, "tool_choice", "{\"type\": \"function\", \"function\": {\"name\"}}");
        choice = name->valuestring;
    } else if (c && !cJSON_IsNull(c)) {
        return serve_json_bad(e, "tool_choice", "a string or an object");
    }
    return (r->tool_choice = strdup(choice)) ? 0 : OOM(e);
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
        if (!found) return serve_json_bad(e, "reasoning_effort", "none, minimal, low, medium or high");
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) return serve_json_bad(e, "chat_template_kwargs", "an object");
        return serve_json_bool(kw, "enable_thinking", &r->enable_thinking, e);
    }
    return 0;
}

/* ---- the requests ------------------------------------------------------------------------- */

/* Fields both endpoints take: model, stream, max_tokens, sampling, stop, n. */
static int parse_common(const cJSON *root, serve_request *r, serve_error *e) {
    int rc;
    int64_t n = 1, max_tokens = r->max_tokens;
    if ((rc = serve_json_str(root, "model", &r->model, e)) || (rc = serve_json_bool(root, "stream", &r->stream, e)) ||
        (rc = serve_json_int(root, "n", 1, 1, &n, e)) || (rc = serve_json_bool(root, "ignore_eos", &r->ignore_eos, e)) ||
        (rc = serve_json_int(root, "max_tokens", 1, 1 << 24, &max_tokens, e)) ||
        (rc = serve_json_int(root, "max_completion_tokens", 1, 1 << 24, &max_tokens, e)) ||
        (rc = parse_sampling(root, r, e)) || (rc = parse_stop(root, r, e)))
        return rc;
    r->max_tokens = (int32_t)max_tokens;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return serve_json_bad(e, "stream_options", "an object");
        if ((rc = serve_json_bool(so, "include_usage", &r->include_usage, e))) return rc;
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *rft = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (rf && !cJSON_IsNull(rf) && (!cJSON_IsString(rft) || strcmp(rft->valuestring, "text")))
        return serve_error_set(e, 400, "invalid_request_error", "response_format", "unsupported_value",
                               "'response_format' other than {\"type\": \"text\"} is not supported");
    return 0;
}

/* Parse a /v1/chat/completions body. */
static int parse_chat(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc;
    int64_t top = 0;
    if (!(rc = parse_common(root, r, e)) && !(rc = parse_messages(root, r, e)) && !(rc = parse_tools(root, r, e)) &&
        !(rc = parse_thinking(root, r, e)) && !(rc = serve_json_bool(root, "logprobs", &r->logprobs, e)) &&
        !(rc = serve_json_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e))) {
        r->top_logprobs = (int32_t)top;
        if (top > 0 && !r->logprobs)
            rc = serve_error_set(e, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                                 "'top_logprobs' needs 'logprobs': true");
    }
    cJSON_Delete(root);
    return rc;
}

/* Parse a /v1/completions body: one prompt (a string, or a list holding one string). */
static int parse_completion(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_COMPLETION);
    r->max_tokens = 16; /* OpenAI's default */
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc = parse_common(root, r, e);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = p->child;
    if (rc) {
    } else if (!p) {
        rc = serve_error_set(e, 400, "invalid_request_error", "prompt", "missing_field", "'prompt' is required");
    } else if (!cJSON_IsString(p)) {
        rc = serve_json_bad(e, "prompt", "a string (one prompt per request)");
    } else if (!(r->prompt = strdup(p->valuestring))) {
        rc = OOM(e);
    }
    static const char *const unsupported[] = {"echo", "suffix", "logprobs", "best_of"};
    for (int i = 0; !rc && i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, unsupported[i]);
        int harmless = !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == (i == 3 ? 1 : 0));
        if (!harmless)
            rc = serve_error_set(e, 400, "invalid_request_error", unsupported[i], "unsupported_value",
                                 "'%s' is not supported by /v1/completions here", unsupported[i]);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- replies ------------------------------------------------------------------------------ */

/* The usage object of a reply. */
static cJSON *json_usage(const serve_usage *u) {
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
static cJSON *json_logprob(const plume_tokenizer *tok, const serve_logprob *lp) {
    cJSON *o = logprob_item(tok, lp->id, lp->logprob);
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int32_t i = 0; top && i < lp->n_top; i++) cJSON_AddItemToArray(top, logprob_item(tok, lp->top_ids[i], lp->top_lps[i]));
    return o;
}

/* One tool call: {"id", "type": "function", "function": {"name", "arguments"}}, with "index"
 * when streamed. The id is the answer's, so a client can match the reply to the call. */
static cJSON *json_call(const serve_job *j, const serve_tool_call *t, int32_t index, int stream) {
    cJSON *c = cJSON_CreateObject(), *f;
    const char *dash = strchr(j->id, '-');
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", dash ? dash + 1 : j->id, index);
    if (stream) cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    if ((f = cJSON_AddObjectToObject(c, "function"))) {
        cJSON_AddStringToObject(f, "name", t->name ? t->name : "");
        cJSON_AddStringToObject(f, "arguments", t->arguments ? t->arguments : "{}");
    }
    return c;
}

/* The head every chunk and reply starts with. */
static cJSON *reply_root(const serve_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model ? j->model : "");
    cJSON_AddStringToObject(o, "system_fingerprint", "plume-" PLUME_VERSION);
    return o;
}

/* Add "logprobs": {"content": [...]} (taken over) or null. */
static void add_logprobs(cJSON *choice, cJSON *content) {
    cJSON *l = content ? cJSON_AddObjectToObject(choice, "logprobs") : NULL;
    if (l) cJSON_AddItemToObject(l, "content", content);
    else cJSON_AddNullToObject(choice, "logprobs");
}

/* Add "finish_reason": the reason or null. */
static void add_finish(cJSON *choice, const char *finish) {
    if (finish) cJSON_AddStringToObject(choice, "finish_reason", finish);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

/* Print and free root (NULL if out of memory). */
static char *print_free(cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* Append "data: <json>\n\n" (json freed; nothing when NULL). */
static void sse_data(chat_buf *out, char *json) {
    if (!json) return;
    chat_buf_puts(out, "data: ");
    chat_buf_puts(out, json);
    chat_buf_puts(out, "\n\n");
    free(json);
}

/* The body of an error: {"error": {"message", "type", "param", "code"}}. */
static char *openai_error(const serve_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    if (!o) return print_free(root);
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type);
    if (*e->param) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (*e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    return print_free(root);
}

/* One event of a streamed answer: a chat.completion.chunk or text_completion chunk; after the
 * end, the usage chunk (include_usage) and "data: [DONE]"; an error event, then [DONE]. */
static void openai_stream(chat_buf *out, const serve_job *j, const serve_event *ev) {
    int chat = j->req.kind == SERVE_CHAT;
    if (ev->kind == SERVE_EV_ERROR) {
        sse_data(out, openai_error(ev->error));
        chat_buf_puts(out, "data: [DONE]\n\n");
        return;
    }
    if (ev->kind == SERVE_EV_START && !chat) return; /* completions have no role chunk */
    cJSON *root = reply_root(j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    if (ev->kind == SERVE_EV_USAGE) { /* the include_usage chunk */
        cJSON_AddItemToObject(root, "usage", json_usage(ev->usage));
        cJSON_AddItemToObject(root, "timings", json_timings(ev->usage));
        sse_data(out, print_free(root));
        chat_buf_puts(out, "data: [DONE]\n\n");
        return;
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (ev->kind == SERVE_EV_START) cJSON_AddStringToObject(delta, "role", "assistant");
        if (ev->kind == SERVE_EV_START || ev->kind == SERVE_EV_TEXT) {
            char *t = ev->text ? strndup(ev->text, ev->len) : NULL;
            cJSON_AddStringToObject(delta, "content", t ? t : "");
            free(t);
        }
        if (ev->kind == SERVE_EV_THOUGHT) {
            char *t = strndup(ev->text, ev->len);
            cJSON_AddStringToObject(delta, "reasoning_content", t ? t : "");
            free(t);
        }
        if (ev->kind == SERVE_EV_TOOL_CALL) {
            cJSON *calls = cJSON_AddArrayToObject(delta, "tool_calls");
            cJSON_AddItemToArray(calls, json_call(j, ev->call, ev->call_index, 1));
        }
    } else {
        char *t = ev->kind == SERVE_EV_TEXT ? strndup(ev->text, ev->len) : NULL;
        cJSON_AddStringToObject(c, "text", t ? t : "");
        free(t);
    }
    cJSON *lp = NULL;
    if (ev->lp) cJSON_AddItemToArray(lp = cJSON_CreateArray(), json_logprob(j->tok, ev->lp));
    add_logprobs(c, lp);
    add_finish(c, ev->kind == SERVE_EV_END ? ev->finish : NULL);
    if (chat) cJSON_AddNullToObject(root, "usage");
    sse_data(out, print_free(root));
    if (ev->kind == SERVE_EV_END && !j->req.include_usage) chat_buf_puts(out, "data: [DONE]\n\n");
}

/* The whole reply of a non-streamed request: chat.completion or text_completion. */
static char *openai_reply(const serve_job *j, const serve_reply *a) {
    int chat = j->req.kind == SERVE_CHAT;
    cJSON *root = reply_root(j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (!a->n_calls || *a->text) cJSON_AddStringToObject(m, "content", a->text);
        else cJSON_AddNullToObject(m, "content");
        if (a->thought) cJSON_AddStringToObject(m, "reasoning_content", a->thought);
        if (a->n_calls) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int32_t i = 0; i < a->n_calls; i++) cJSON_AddItemToArray(calls, json_call(j, &a->calls[i], i, 0));
        }
    } else {
        cJSON_AddStringToObject(c, "text", a->text);
    }
    cJSON *lps = NULL;
    if (j->req.logprobs && chat) {
        lps = cJSON_CreateArray();
        for (int32_t i = 0; i < a->n_lps; i++) cJSON_AddItemToArray(lps, json_logprob(j->tok, &a->lps[i]));
    }
    add_logprobs(c, lps);
    add_finish(c, a->finish);
    if (a->usage) {
        cJSON_AddItemToObject(root, "usage", json_usage(a->usage));
        cJSON_AddItemToObject(root, "timings", json_timings(a->usage));
    }
    return print_free(root);
}

const serve_dialect serve_openai_chat = {
    .name = "openai-chat", .id_prefix = "chatcmpl", .stream_type = "text/event-stream",
    .parse = parse_chat, .stream = openai_stream, .reply = openai_reply, .error = openai_error, .idle = ":\n\n",
};

const serve_dialect serve_openai_completion = {
    .name = "openai-completion", .id_prefix = "cmpl", .stream_type = "text/event-stream",
    .parse = parse_completion, .stream = openai_stream, .reply = openai_reply, .error = openai_error, .idle = ":\n\n",
};

/* ---- llama-server's /tokenize and /detokenize ------------------------------------------------ */

/* Parse a /tokenize body. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e) {
    *content = NULL;
    *add_special = 0;
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc = serve_json_bool(root, "add_special", add_special, e);
    if (!rc && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "content")))
        rc = serve_error_set(e, 400, "invalid_request_error", "content", "invalid_value", "'content' must be a string");
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
        rc = serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value", "'tokens' must be a list of token ids");
    } else if (!(*ids = malloc(((size_t)cJSON_GetArraySize(t) + 1) * sizeof **ids))) {
        rc = OOM(e);
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
