/* serve_openai.c -- OpenAI's dialect (docs/SERVER.md): /v1/chat/completions and
 * /v1/completions request bodies -> the internal request; answer events -> chat.completion
 * chunks (server-sent events ending in "data: [DONE]") or the whole reply, one choice per
 * `n`; errors -> {"error": {"message", "type", "param", "code"}}. /v1/completions speaks the
 * legacy logprobs shape ({tokens, token_logprobs, top_logprobs, text_offset}) with `echo`, as
 * lm-evaluation-harness needs to score a model; vLLM's prompt_logprobs and
 * continue_final_message are understood too. Also GET /v1/models (the one model).
 *
 * Unknown fields are ignored, as OpenAI's SDKs send fields a server may not know; a known
 * field plume cannot honour is a 400 naming it. */
#include "serve.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- chat messages ------------------------------------------------------------------------ */

/* A message's content: a string (m->content), or a list of parts (m->parts): text, and
 * images and audio (serve_media.c keeps their bytes; m->part_types says where they go); null
 * stays NULL. */
static int message_content(const cJSON *v, serve_request *r, serve_message *m, const char *param, serve_error *e) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) return (m->content = strdup(v->valuestring)) ? 0 : SERVE_OOM(e);
    if (!cJSON_IsArray(v)) return serve_json_bad(e, param, "a string or a list of content parts");
    if (!cJSON_GetArraySize(v)) return (m->parts = calloc(1, sizeof *m->parts)) ? 0 : SERVE_OOM(e);
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) return serve_json_bad(e, param, "a list of objects with a 'type'");
        if (!strcmp(type->valuestring, "text") && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(part, "text")))
            return serve_json_bad(e, param, "a list of text parts with a 'text' string");
    }
    int32_t k = 0;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", param, k++);
        int rc = !strcmp(type->valuestring, "text")
                     ? serve_message_add_part(m, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring, e)
                     : serve_media_part(r, m, part, pp, e);
        if (rc) return rc;
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
    if (!(m->calls = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *m->calls))) return SERVE_OOM(e);
    cJSON_ArrayForEach(c, v) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        serve_tool_call *t = &m->calls[m->n_calls++];
        if (cJSON_IsString(id) && !(t->id = strdup(id->valuestring))) return SERVE_OOM(e);
        if (!(t->name = strdup(cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring))) return SERVE_OOM(e);
        if (cJSON_IsString(args) && !(t->arguments = strdup(args->valuestring))) return SERVE_OOM(e);
        if (cJSON_IsObject(args) && !(t->arguments = cJSON_PrintUnformatted(args))) return SERVE_OOM(e);
    }
    return 0;
}

/* One element of "messages", appended to r. */
static int parse_message(const cJSON *m, int32_t i, serve_request *r, serve_error *e) {
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
    serve_message *out = serve_request_add_message(r, role->valuestring, e);
    if (!out) return e->status;
    int rc;
    snprintf(param, sizeof param, "messages[%d].content", i);
    if ((rc = message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), r, out, param, e))) return rc;
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
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "missing_field", "'%s' is required", param);
    }
    return 0;
}

/* "messages": a non-empty list of at most SERVE_MAX_MESSAGES. */
static int parse_messages(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!v) return serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "missing_field", "'messages' is required");
    if (!cJSON_IsArray(v)) return serve_json_bad(e, "messages", "a list of messages");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > SERVE_MAX_MESSAGES)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "invalid_value",
                               "'messages' must hold 1 to %d messages, got %d", SERVE_MAX_MESSAGES, n);
    const cJSON *m;
    int32_t i = 0;
    cJSON_ArrayForEach(m, v) {
        int rc = parse_message(m, i++, r, e);
        if (rc) return rc;
    }
    return 0;
}

/* ---- sampling, stops, tools, thinking ----------------------------------------------------- */

/* temperature, top_p, top_k, min_p, penalties, seed. */
static int parse_sampling(const cJSON *root, serve_request *r, serve_error *e) {
    plume_sampler_params *p = &r->sp;
    int64_t k = p->top_k;
    int rc;
    if ((rc = serve_json_num(root, "temperature", 0, 2, &p->temperature, e)) ||
        (rc = serve_json_num(root, "top_p", 0, 1, &p->top_p, e)) || (rc = serve_json_int(root, "top_k", 0, 1 << 24, &k, e)) ||
        (rc = serve_json_num(root, "min_p", 0, 1, &p->min_p, e)) ||
        (rc = serve_json_num(root, "presence_penalty", -2, 2, &p->presence_penalty, e)) ||
        (rc = serve_json_num(root, "frequency_penalty", -2, 2, &p->frequency_penalty, e)) ||
        (rc = serve_json_num(root, "repeat_penalty", 0.01, 100, &p->repeat_penalty, e)) ||
        (rc = serve_json_seed(root, "seed", r, e)))
        return rc;
    p->top_k = (int32_t)k;
    if (p->top_p <= 0) p->temperature = 0; /* the limit of a vanishing nucleus: the top token */
    return 0;
}

/* "logit_bias": {"token id": bias in [-100, 100], ...}; ids are checked against the
 * vocabulary when the job is made. */
static int parse_logit_bias(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logit_bias"), *b;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return serve_json_bad(e, "logit_bias", "an object of token ids to biases");
    int n = cJSON_GetArraySize(v);
    if (n > SERVE_MAX_BIAS)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "logit_bias", "invalid_value",
                               "'logit_bias' holds at most %d tokens", SERVE_MAX_BIAS);
    if (!n) return 0;
    if (!(r->bias_ids = malloc((size_t)n * sizeof *r->bias_ids)) || !(r->bias_vals = malloc((size_t)n * sizeof *r->bias_vals)))
        return SERVE_OOM(e);
    cJSON_ArrayForEach(b, v) {
        char *end = NULL;
        long id = strspn(b->string, "0123456789") == strlen(b->string) ? strtol(b->string, &end, 10) : -1; /* digits only: not " 5", "+5" */
        if (!*b->string || (end && *end) || id < 0 || id > INT32_MAX || !cJSON_IsNumber(b) || !(b->valuedouble >= -100) ||
            !(b->valuedouble <= 100))
            return serve_json_bad(e, "logit_bias", "an object of token ids (decimal strings) to numbers in [-100, 100]");
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_vals[r->n_bias++] = (float)b->valuedouble;
    }
    return 0;
}

/* "tools" (a list of function declarations: name, description, parameters) and
 * "tool_choice". */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v)) return serve_json_bad(e, "tools", "a list of tools");
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
                return serve_json_bad(e, "tools", "a list of {\"type\": \"function\", \"function\": {\"name\", ...}}");
            int rc = serve_function_tool(r, f, "a list of {\"type\": \"function\", \"function\": {\"name\", ...}}", e);
            if (rc) return rc;
        }
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const char *choice = "auto";
    if (cJSON_IsString(c)) {
        choice = c->valuestring;
        if (!serve_tool_mode(choice)) return serve_json_bad(e, "tool_choice", "\"auto\", \"none\", \"required\" or a function");
    } else if (cJSON_IsObject(c)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
        if (!cJSON_IsString(name)) return serve_json_bad(e, "tool_choice", "{\"type\": \"function\", \"function\": {\"name\"}}");
        choice = name->valuestring;
    } else if (c && !cJSON_IsNull(c)) {
        return serve_json_bad(e, "tool_choice", "a string or an object");
    }
    return (r->tool_choice = strdup(choice)) ? 0 : SERVE_OOM(e);
}

/* Thinking: reasoning_effort (none/minimal off; low/medium/high on), or llama-server's
 * chat_template_kwargs.enable_thinking. */
static int parse_thinking(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    if (v && !cJSON_IsNull(v)) {
        int32_t on = cJSON_IsString(v) ? serve_effort_thinking(v->valuestring) : -1;
        if (on < 0) return serve_json_bad(e, "reasoning_effort", "none, minimal, low, medium or high");
        r->enable_thinking = on;
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) return serve_json_bad(e, "chat_template_kwargs", "an object");
        return serve_json_bool(kw, "enable_thinking", &r->enable_thinking, e);
    }
    return 0;
}

/* "response_format" (docs/STRUCTURED.md): {"type": "text"}, {"type": "json_object"} (any
 * object) or {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (the schema
 * is enforced, strict or not); or llama-server's top-level "json_schema" (a schema). */
static int parse_response_format(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "json_schema");
    if (top && !cJSON_IsNull(top)) {
        if (rf && !cJSON_IsNull(rf)) return serve_json_bad(e, "json_schema", "alone (not with 'response_format')");
        if (!cJSON_IsObject(top)) return serve_json_bad(e, "json_schema", "a JSON Schema object");
        return serve_format_schema(r, "json_schema", top, e);
    }
    if (!rf || cJSON_IsNull(rf)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    const char *what = "{\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}";
    if (!cJSON_IsObject(rf) || !cJSON_IsString(type)) return serve_json_bad(e, "response_format", what);
    if (!strcmp(type->valuestring, "text")) return 0;
    if (!strcmp(type->valuestring, "json_object")) return serve_format_schema(r, "response_format", NULL, e);
    if (strcmp(type->valuestring, "json_schema")) return serve_json_bad(e, "response_format", what);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(js) || !cJSON_IsObject(schema))
        return serve_json_bad(e, "response_format", "{\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\": {...}}}");
    return serve_format_schema(r, "response_format", schema, e);
}

/* llama-server's "grammar": GBNF text the answer is held to (docs/STRUCTURED.md), checked
 * here (a parse error is a 400 naming the line and column; its token references are bound
 * once the tokenizer is at hand); "" or null is none. One format per request: not with a
 * response format or "json_schema". */
static int parse_grammar(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (!g || cJSON_IsNull(g) || (cJSON_IsString(g) && !g->valuestring[0])) return 0;
    if (!cJSON_IsString(g)) return serve_json_bad(e, "grammar", "GBNF text (a string)");
    if (r->grammar)
        return serve_json_unsupported(e, "grammar", "cannot be combined with 'response_format' or 'json_schema' "
                                                    "(one format per request)");
    char *err = NULL;
    int rc = plume_grammar_check(g->valuestring, strlen(g->valuestring), NULL, &err);
    if (rc == PLUME_ENOMEM) rc = SERVE_OOM(e);
    else if (rc) rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "grammar", "invalid_value", "'grammar': %s",
                                      !err ? "not valid GBNF" : strncmp(err, "grammar: ", 9) ? err : err + 9);
    free(err);
    if (rc) return rc;
    if (!(r->grammar = strdup(g->valuestring))) return SERVE_OOM(e);
    r->grammar_given = 1;
    r->grammar_param = "grammar";
    return 0;
}

/* ---- the requests ------------------------------------------------------------------------- */

/* Fields both endpoints take: model, stream, max_tokens (0 allowed with echo), sampling,
 * logit_bias, stop, n, prompt_logprobs. */
static int parse_common(const cJSON *root, serve_request *r, serve_error *e) {
    int rc;
    int64_t n = 1, max_tokens = r->max_tokens, plp = -1;
    if ((rc = serve_json_str(root, "model", &r->model, e)) || (rc = serve_json_bool(root, "stream", &r->stream, e)) ||
        (rc = serve_json_int(root, "n", 1, SERVE_MAX_CHOICES, &n, e)) ||
        (rc = serve_json_bool(root, "ignore_eos", &r->ignore_eos, e)) ||
        (rc = serve_json_int(root, "max_tokens", r->echo ? 0 : 1, 1 << 24, &max_tokens, e)) ||
        (rc = serve_json_int(root, "max_completion_tokens", 1, 1 << 24, &max_tokens, e)) ||
        (rc = serve_json_int(root, "prompt_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &plp, e)) ||
        (rc = parse_sampling(root, r, e)) || (rc = parse_logit_bias(root, r, e)) ||
        (rc = serve_json_stops(root, "stop", 0, r, e)))
        return rc;
    r->max_tokens = (int32_t)max_tokens;
    r->n = (int32_t)n;
    r->prompt_logprobs = (int32_t)plp;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return serve_json_bad(e, "stream_options", "an object");
        if ((rc = serve_json_bool(so, "include_usage", &r->include_usage, e))) return rc;
    }
    if ((rc = parse_response_format(root, r, e))) return rc;
    return parse_grammar(root, r, e);
}

/* vLLM's continue_final_message, or add_generation_prompt: false: the last (assistant)
 * message is continued. */
static int parse_continue(const cJSON *root, serve_request *r, serve_error *e) {
    int32_t cont = 0, add = 1;
    int rc = serve_json_bool(root, "continue_final_message", &cont, e);
    if (!rc) rc = serve_json_bool(root, "add_generation_prompt", &add, e);
    if (rc) return rc;
    if (cont && add && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt")))
        return serve_json_bad(e, "continue_final_message", "used with 'add_generation_prompt': false");
    r->continue_final = cont || !add;
    if (r->continue_final && strcmp(r->msgs[r->n_msgs - 1].role, "assistant"))
        return serve_json_bad(e, r->n_msgs && cont ? "continue_final_message" : "add_generation_prompt",
                              "used with a last message of role assistant (the one continued)");
    return 0;
}

/* "parallel_tool_calls": false asks for at most one call (the answer ends after it). */
static int parse_parallel(const cJSON *root, serve_request *r, serve_error *e) {
    int32_t parallel = 1;
    int rc = serve_json_bool(root, "parallel_tool_calls", &parallel, e);
    r->one_call = !parallel;
    return rc;
}

/* Chat fields plume cannot honour, refused rather than ignored: output modalities other than
 * text, output audio, the legacy function calling (functions, function_call), hosted web
 * search. */
static int refuse_chat_fields(const cJSON *root, serve_error *e) {
    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(root, "modalities"), *x;
    if (mod && !cJSON_IsNull(mod) && !cJSON_IsArray(mod)) return serve_json_bad(e, "modalities", "a list");
    cJSON_ArrayForEach(x, mod) if (!cJSON_IsString(x) || strcmp(x->valuestring, "text"))
        return serve_json_unsupported(e, "modalities", "other than [\"text\"] is not supported (plume answers in text)");
    static const char *const no[][2] = {
        {"audio", "is not supported (plume answers in text)"},
        {"functions", "is not supported: send 'tools' (the legacy function calling is not served)"},
        {"function_call", "is not supported: send 'tool_choice' (the legacy function calling is not served)"},
        {"web_search_options", "is not supported (plume has no hosted tools)"},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, no[i][0]);
        if (v && !cJSON_IsNull(v)) return serve_json_unsupported(e, no[i][0], no[i][1]);
    }
    return 0;
}

/* Parse a /v1/chat/completions body. */
static int parse_chat(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc;
    int64_t top = 0;
    if (!(rc = refuse_chat_fields(root, e)) && !(rc = parse_common(root, r, e)) && !(rc = parse_messages(root, r, e)) &&
        !(rc = parse_tools(root, r, e)) &&
        !(rc = parse_thinking(root, r, e)) && !(rc = parse_continue(root, r, e)) &&
        !(rc = serve_json_bool(root, "logprobs", &r->logprobs, e)) && !(rc = parse_parallel(root, r, e)) &&
        !(rc = serve_json_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e))) {
        r->top_logprobs = (int32_t)top;
        if (top > 0 && !r->logprobs)
            rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "top_logprobs", "invalid_value",
                                 "'top_logprobs' needs 'logprobs': true");
    }
    cJSON_Delete(root);
    return rc;
}

/* The prompt of a completion: a string, a list of token ids, or a list holding one of those
 * (one prompt per request). */
static int parse_prompt(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return serve_error_set(e, 400, SERVE_ERR_REQUEST, "prompt", "missing_field", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    if (cJSON_IsString(p)) return (r->prompt = strdup(p->valuestring)) ? 0 : SERVE_OOM(e);
    int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (n < 1) return serve_json_bad(e, "prompt", "a string or a list of token ids (one prompt per request)");
    if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids))) return SERVE_OOM(e);
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble > INT32_MAX)
            return serve_json_bad(e, "prompt", "a string or a list of token ids (one prompt per request)");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* Parse a /v1/completions body: one prompt, echo, the legacy logprobs (an integer: the
 * alternatives per token). */
static int parse_completion(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_COMPLETION);
    r->max_tokens = 16; /* OpenAI's default */
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int64_t lp = -1, best_of = 1;
    int rc = serve_json_bool(root, "echo", &r->echo, e);
    if (!rc) rc = parse_common(root, r, e);
    if (!rc) rc = parse_prompt(root, r, e);
    if (!rc) rc = serve_json_int(root, "logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &lp, e);
    if (!rc) rc = serve_json_int(root, "best_of", 1, 1, &best_of, e);
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (!rc && suffix && !cJSON_IsNull(suffix) && !(cJSON_IsString(suffix) && !*suffix->valuestring))
        rc = serve_json_unsupported(e, "suffix", "is not supported (Gemma 4 has no fill-in-the-middle format)");
    if (!rc && lp >= 0) {
        r->logprobs = 1;
        r->top_logprobs = (int32_t)lp;
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
    if (u->reasoning && (d = cJSON_AddObjectToObject(o, "completion_tokens_details")))
        cJSON_AddNumberToObject(d, "reasoning_tokens", u->reasoning);
    return o;
}

/* The timings object of a reply, named as llama-server names it: prompt_n (tokens computed,
 * not reused), prompt_ms, predicted_n (tokens of decode steps: all but the first, which the
 * prefill makes), predicted_ms, and the per-second rates; when the answer drafted (speculative
 * decoding), draft_n (tokens guessed) and draft_n_accepted (guesses kept). */
static cJSON *json_timings(const serve_usage *u) {
    cJSON *o = cJSON_CreateObject();
    int32_t pn = u->prompt - u->cached, dn = u->completion > 1 ? u->completion - 1 : 0;
    cJSON_AddNumberToObject(o, "prompt_n", pn);
    cJSON_AddNumberToObject(o, "prompt_ms", u->prompt_ms);
    cJSON_AddNumberToObject(o, "prompt_per_second", u->prompt_ms > 0 ? pn * 1000.0 / u->prompt_ms : 0);
    cJSON_AddNumberToObject(o, "predicted_n", dn);
    cJSON_AddNumberToObject(o, "predicted_ms", u->predicted_ms);
    cJSON_AddNumberToObject(o, "predicted_per_second", u->predicted_ms > 0 ? dn * 1000.0 / u->predicted_ms : 0);
    if (u->drafted > 0) {
        cJSON_AddNumberToObject(o, "draft_n", u->drafted);
        cJSON_AddNumberToObject(o, "draft_n_accepted", u->accepted);
    }
    return o;
}

/* A log-probability as JSON: -inf (a banned token) as -9999, as OpenAI does. */
static double lp_num(float lp) {
    return isfinite(lp) ? lp : -9999.0;
}

/* The legacy logprobs of /v1/completions for entries lps[0..n) (prompt entries with a NaN
 * logprob: null), appended to o's four lists; *offset is the text offset of the next token. */
static void legacy_add(cJSON *o, const plume_tokenizer *tok, const serve_logprob *lps, int32_t n, size_t *offset) {
    cJSON *tokens = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    cJSON *lpl = cJSON_GetObjectItemCaseSensitive(o, "token_logprobs");
    cJSON *top = cJSON_GetObjectItemCaseSensitive(o, "top_logprobs");
    cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "text_offset");
    char text[512];
    for (int32_t i = 0; i < n; i++) {
        const serve_logprob *lp = &lps[i];
        int64_t k = serve_token_text(tok, lp->id, text, sizeof text);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)*offset));
        *offset += (size_t)k;
        if (isnan(lp->logprob)) {
            cJSON_AddItemToArray(lpl, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(lpl, cJSON_CreateNumber(lp_num(lp->logprob)));
        cJSON *d = cJSON_CreateObject();
        for (int32_t t = 0; t < lp->n_top; t++) {
            serve_token_text(tok, lp->top_ids[t], text, sizeof text);
            if (!cJSON_GetObjectItemCaseSensitive(d, text)) cJSON_AddNumberToObject(d, text, lp_num(lp->top_lps[t]));
        }
        cJSON_AddItemToArray(top, d);
    }
}

/* An empty legacy logprobs object. */
static cJSON *legacy_new(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON_AddArrayToObject(o, "text_offset");
    return o;
}

/* vLLM's prompt_logprobs: per prompt token null (the first) or {"<id>": {"logprob", "rank",
 * "decoded_token"}} for the token and its alternatives. */
static cJSON *json_prompt_logprobs(const serve_job_head *j) {
    cJSON *a = cJSON_CreateArray();
    char text[512], key[16];
    for (int32_t i = 0; j->prompt_lps && i < j->n_ids; i++) {
        const serve_logprob *lp = &j->prompt_lps[i];
        if (isnan(lp->logprob)) {
            cJSON_AddItemToArray(a, cJSON_CreateNull());
            continue;
        }
        cJSON *d = cJSON_CreateObject();
        for (int32_t t = -1; t < lp->n_top; t++) {
            int32_t id = t < 0 ? lp->id : lp->top_ids[t];
            snprintf(key, sizeof key, "%d", id);
            if (cJSON_GetObjectItemCaseSensitive(d, key)) continue;
            cJSON *e = cJSON_AddObjectToObject(d, key);
            if (!e) continue;
            cJSON_AddNumberToObject(e, "logprob", lp_num(t < 0 ? lp->logprob : lp->top_lps[t]));
            cJSON_AddNumberToObject(e, "rank", t < 0 ? lp->rank : t + 1);
            serve_token_text(j->tok, id, text, sizeof text);
            cJSON_AddStringToObject(e, "decoded_token", text);
        }
        cJSON_AddItemToArray(a, d);
    }
    return a;
}

/* The text of the prompt a completion echoes: as given, or its ids written out (malloc'd). */
static char *echo_text(const serve_job_head *j) {
    if (j->req.prompt) return strdup(j->req.prompt);
    const int32_t *ids = j->ids + j->echo_from;
    int32_t n = j->n_ids - j->echo_from;
    int64_t need = plume_detokenize(j->tok, ids, n, 0, NULL, 0);
    char *t = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (t) plume_detokenize(j->tok, ids, n, 0, t, (size_t)need + 1);
    return t;
}

/* One tool call: {"id", "type": "function", "function": {"name", "arguments"}}, with "index"
 * when streamed. The id is the answer's, so a client can match the reply to the call. */
static cJSON *json_call(const serve_job_head *j, const serve_tool_call *t, int32_t choice, int32_t index, int stream) {
    cJSON *c = cJSON_CreateObject(), *f;
    const char *dash = strchr(j->id, '-');
    char id[112];
    if (choice) snprintf(id, sizeof id, "call_%s_%d_%d", dash ? dash + 1 : j->id, choice, index);
    else snprintf(id, sizeof id, "call_%s_%d", dash ? dash + 1 : j->id, index);
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
static cJSON *reply_root(const serve_job_head *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model ? j->model : "");
    cJSON_AddStringToObject(o, "system_fingerprint", "plume-" PLUME_VERSION);
    return o;
}

/* Add "logprobs": the object (taken over) or null. */
static void add_logprobs(cJSON *choice, cJSON *lp) {
    if (lp) cJSON_AddItemToObject(choice, "logprobs", lp);
    else cJSON_AddNullToObject(choice, "logprobs");
}

/* {"content": [...]} (taken over). */
static cJSON *content_logprobs(cJSON *content) {
    cJSON *l = cJSON_CreateObject();
    cJSON_AddItemToObject(l, "content", content);
    return l;
}

/* OpenAI's finish_reason of a finish (NULL: not ended). */
const char *serve_openai_finish(serve_finish f) {
    switch (f) {
    case SERVE_FINISH_STOP: return "stop";
    case SERVE_FINISH_LENGTH: return "length";
    case SERVE_FINISH_TOOL_CALLS: return "tool_calls";
    case SERVE_FINISH_LOAD: return "load";
    default: return NULL;
    }
}

/* Add "finish_reason": the reason or null (not ended). */
static void add_finish(cJSON *choice, serve_finish finish) {
    const char *name = serve_openai_finish(finish);
    if (name) cJSON_AddStringToObject(choice, "finish_reason", name);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

/* Print and free root (NULL if out of memory). */
static char *print_free(cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

/* Append "data: <json>\n\n" (json freed; nothing when NULL). */
static void sse_data(plume_buf *out, char *json) {
    if (!json) return;
    plume_buf_puts(out, "data: ");
    plume_buf_puts(out, json);
    plume_buf_puts(out, "\n\n");
    free(json);
}

/* OpenAI's error "type" of a kind of error. */
const char *serve_openai_error_type(serve_error_kind kind) {
    switch (kind) {
    case SERVE_ERR_BUSY: return "rate_limit_error";
    case SERVE_ERR_TIMEOUT: return "timeout_error";
    case SERVE_ERR_SERVER: return "server_error";
    default: return "invalid_request_error";
    }
}

/* The body of an error: {"error": {"message", "type", "param", "code"}}. */
char *serve_openai_error(const serve_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    if (!o) return print_free(root);
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", serve_openai_error_type(e->kind));
    if (*e->param) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (*e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    return print_free(root);
}

/* What a stream keeps: the text offset of each completion choice (legacy logprobs). */
typedef struct {
    size_t offset[SERVE_MAX_CHOICES];
} openai_state;

/* A chunk of one choice: the head, choices: [{"index": choice}] (returned in *c). */
static cJSON *chunk_of(const serve_job_head *j, int32_t choice, cJSON **c) {
    int chat = j->req.kind == SERVE_CHAT;
    cJSON *root = reply_root(j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, *c);
    cJSON_AddNumberToObject(*c, "index", choice);
    return root;
}

/* A completion's echo of its prompt, streamed: the prompt's text (with the legacy logprobs of
 * its tokens when asked) and vLLM's prompt_logprobs. */
static void stream_prompt(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    int chat = j->req.kind == SERVE_CHAT;
    openai_state none = {{0}}, *st = state ? state : &none;
    if (chat && (j->req.prompt_logprobs < 0 || ev->choice)) return;
    if (!chat && !j->req.echo && j->req.prompt_logprobs < 0) return; /* the event means nothing here */
    cJSON *c, *root = chunk_of(j, ev->choice, &c);
    if (chat) {
        cJSON_AddObjectToObject(c, "delta");
        cJSON_AddItemToObject(root, "prompt_logprobs", json_prompt_logprobs(j));
        add_logprobs(c, NULL);
    } else {
        char *t = j->req.echo ? echo_text(j) : NULL;
        cJSON_AddStringToObject(c, "text", t ? t : "");
        free(t);
        cJSON *lp = NULL;
        if (j->req.echo && j->req.logprobs && j->prompt_lps) {
            lp = legacy_new();
            legacy_add(lp, j->tok, j->prompt_lps + j->echo_from, j->n_ids - j->echo_from, &st->offset[ev->choice]);
        }
        add_logprobs(c, lp);
        if (j->req.prompt_logprobs >= 0) cJSON_AddItemToObject(c, "prompt_logprobs", json_prompt_logprobs(j));
    }
    add_finish(c, SERVE_FINISH_NONE);
    sse_data(out, print_free(root));
}

/* One event of a streamed answer: a chat.completion.chunk or text_completion chunk of its
 * choice; after the last choice, the usage chunk (include_usage) and "data: [DONE]"; an error
 * event, then [DONE]. */
static void openai_stream(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    int chat = j->req.kind == SERVE_CHAT;
    openai_state none = {{0}}, *st = state ? state : &none;
    if (ev->kind == SERVE_EV_ERROR) {
        sse_data(out, serve_openai_error(ev->error));
        plume_buf_puts(out, "data: [DONE]\n\n");
        return;
    }
    if (ev->kind == SERVE_EV_DONE) {
        if (j->req.include_usage) {
            cJSON *root = reply_root(j, chat ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(root, "choices");
            cJSON_AddItemToObject(root, "usage", json_usage(ev->usage));
            cJSON_AddItemToObject(root, "timings", json_timings(ev->usage));
            sse_data(out, print_free(root));
        }
        plume_buf_puts(out, "data: [DONE]\n\n");
        return;
    }
    if (ev->kind == SERVE_EV_PROMPT) {
        stream_prompt(out, j, state, ev);
        return;
    }
    if (ev->kind == SERVE_EV_START && !chat) return; /* completions have no role chunk */
    cJSON *c, *root = chunk_of(j, ev->choice, &c);
    cJSON *lp = NULL;
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
            cJSON_AddItemToArray(calls, json_call(j, ev->call, ev->choice, ev->call_index, 1));
        }
        if (ev->lp) {
            cJSON *content = cJSON_CreateArray();
            cJSON_AddItemToArray(content, serve_json_logprob(j->tok, ev->lp));
            lp = content_logprobs(content);
        }
    } else {
        char *t = ev->kind == SERVE_EV_TEXT ? strndup(ev->text, ev->len) : NULL;
        cJSON_AddStringToObject(c, "text", t ? t : "");
        free(t);
        if (ev->lp) {
            lp = legacy_new();
            legacy_add(lp, j->tok, ev->lp, 1, &st->offset[ev->choice]);
        }
    }
    add_logprobs(c, lp);
    add_finish(c, ev->kind == SERVE_EV_END ? ev->finish : SERVE_FINISH_NONE);
    if (chat) cJSON_AddNullToObject(root, "usage");
    sse_data(out, print_free(root));
}

/* One choice of a whole chat reply. */
static cJSON *chat_choice(const serve_job_head *j, const serve_reply *a, int32_t i) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", i);
    cJSON *m = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    if (!a->n_calls || *a->text) cJSON_AddStringToObject(m, "content", a->text);
    else cJSON_AddNullToObject(m, "content");
    if (a->thought) cJSON_AddStringToObject(m, "reasoning_content", a->thought);
    if (a->n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (int32_t k = 0; k < a->n_calls; k++) cJSON_AddItemToArray(calls, json_call(j, &a->calls[k], i, k, 0));
    }
    cJSON *lps = NULL;
    if (j->req.logprobs) {
        cJSON *content = cJSON_CreateArray();
        for (int32_t k = 0; k < a->n_lps; k++) cJSON_AddItemToArray(content, serve_json_logprob(j->tok, &a->lps[k]));
        lps = content_logprobs(content);
    }
    add_logprobs(c, lps);
    add_finish(c, a->finish);
    return c;
}

/* One choice of a whole completion reply: the echo, the text, the legacy logprobs. */
static cJSON *completion_choice(const serve_job_head *j, const serve_reply *a, int32_t i) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", i);
    char *echo = j->req.echo ? echo_text(j) : NULL;
    char *text = echo ? plume_sprintf("%s%s", echo, a->text) : NULL;
    cJSON_AddStringToObject(c, "text", text ? text : a->text);
    free(echo);
    free(text);
    cJSON *lp = NULL;
    if (j->req.logprobs) {
        size_t offset = 0;
        lp = legacy_new();
        if (j->req.echo && j->prompt_lps)
            legacy_add(lp, j->tok, j->prompt_lps + j->echo_from, j->n_ids - j->echo_from, &offset);
        legacy_add(lp, j->tok, a->lps, a->n_lps, &offset);
    }
    add_logprobs(c, lp);
    if (j->req.prompt_logprobs >= 0) cJSON_AddItemToObject(c, "prompt_logprobs", json_prompt_logprobs(j));
    add_finish(c, a->finish);
    return c;
}

/* The whole reply of a non-streamed request: chat.completion or text_completion, one choice
 * per n, the seed it was sampled with. */
static char *openai_reply(const serve_job_head *j, const serve_reply *a, int32_t n, const serve_usage *u) {
    int chat = j->req.kind == SERVE_CHAT;
    cJSON *root = reply_root(j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(choices, chat ? chat_choice(j, &a[i], i) : completion_choice(j, &a[i], i));
    if (chat && j->req.prompt_logprobs >= 0) cJSON_AddItemToObject(root, "prompt_logprobs", json_prompt_logprobs(j));
    if (u) {
        cJSON_AddItemToObject(root, "usage", json_usage(u));
        cJSON_AddItemToObject(root, "timings", json_timings(u));
    }
    char seed[32]; /* written as an integer: cJSON prints 15 significant digits, and a drawn seed has 16 */
    snprintf(seed, sizeof seed, "%" PRId64, (int64_t)j->req.sp.seed);
    cJSON_AddRawToObject(root, "seed", seed);
    return print_free(root);
}

const serve_dialect serve_openai_chat = {
    .name = "openai-chat", .id_prefix = "chatcmpl", .stream_type = "text/event-stream",
    .state_size = sizeof(openai_state), .parse = parse_chat, .stream = openai_stream, .reply = openai_reply,
    .error = serve_openai_error, .idle = ":\n\n",
};

const serve_dialect serve_openai_completion = {
    .name = "openai-completion", .id_prefix = "cmpl", .stream_type = "text/event-stream",
    .state_size = sizeof(openai_state), .parse = parse_completion, .stream = openai_stream, .reply = openai_reply,
    .error = serve_openai_error, .idle = ":\n\n",
};

/* ---- GET /v1/models --------------------------------------------------------------------------- */

/* The model object: id, object, created, owned_by, context_length, input_modalities. */
static cJSON *model_object(const serve_info *m, const char *id) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", 0);
    cJSON_AddStringToObject(o, "owned_by", "plume");
    cJSON_AddNumberToObject(o, "context_length", m->n_ctx);
    cJSON *mods = cJSON_AddArrayToObject(o, "input_modalities");
    if (!mods) return o;
    cJSON_AddItemToArray(mods, cJSON_CreateString("text"));
    if (m->vision) cJSON_AddItemToArray(mods, cJSON_CreateString("image"));
    if (m->audio) cJSON_AddItemToArray(mods, cJSON_CreateString("audio"));
    if (m->video) cJSON_AddItemToArray(mods, cJSON_CreateString("video"));
    return o;
}

/* The list of the one model, or the model asked for by name (one). */
char *serve_openai_models(const serve_info *m, const char *one) {
    if (one) return print_free(model_object(m, one));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddItemToArray(data, model_object(m, m->model));
    return print_free(root);
}
