/* serve_responses.c -- OpenAI's Responses API (docs/SERVER.md): /v1/responses request bodies
 * -> the internal request; answer events -> the typed server-sent events (response.created,
 * response.output_item.added, response.output_text.delta, ..., response.completed) or the whole
 * Response object; errors -> {"error": {"message", "type", "param", "code"}}.
 *
 * Stateless: nothing is stored ("store" is answered false whatever was asked), so
 * previous_response_id and conversation are a 400: a client sends the whole conversation, as
 * Codex CLI does with store false. Input items map onto chat messages: messages, function_call
 * (the assistant's tool calls), function_call_output (tool messages), reasoning (the next
 * assistant turn's thought; its encrypted_content is plume's plain thought, so a client that
 * asks for it round-trips the thought). Output: a reasoning item, a message item, function_call
 * items, in the order the model wrote them. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"


/* ---- requests ----------------------------------------------------------------------------- */

/* The text of a message item's content: a string, or its input_text/output_text parts, each
 * appended to m, and its input_image parts (serve_media.c). */
static int item_content(const cJSON *c, serve_request *r, serve_message *m, const char *param, serve_error *e) {
    if (cJSON_IsString(c)) return (m->content = strdup(c->valuestring)) ? 0 : SERVE_OOM(e);
    if (!cJSON_IsArray(c)) return serve_json_bad(e, param, "a string or a list of content parts");
    const cJSON *part;
    int32_t k = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const char *key = "text";
        k++;
        if (!cJSON_IsString(type)) return serve_json_bad(e, param, "a list of parts with a 'type'");
        const char *t = type->valuestring;
        if (!strcmp(t, "input_image")) {
            char pp[96];
            snprintf(pp, sizeof pp, "%s[%d]", param, k - 1);
            int rc = serve_media_part(r, m, part, pp, e);
            if (rc) return rc;
            continue;
        }
        if (!strcmp(t, "input_video") || !strcmp(t, "video_url"))
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                                   "content parts of type '%s' are not part of the Responses API (input_text and "
                                   "input_image); send a video to /v1/chat/completions as a video_url part", t);
        if (!strcmp(t, "refusal")) key = "refusal";
        else if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text"))
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                                   "content parts of type '%.64s' are not supported (text only)", t);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, key);
        if (!cJSON_IsString(text)) return serve_json_bad(e, param, "a list of text parts");
        int rc = serve_message_add_part(m, text->valuestring, e);
        if (rc) return rc;
    }
    if (!m->parts && !(m->content = strdup(""))) return SERVE_OOM(e);
    return 0;
}

/* The thought of a reasoning item: its encrypted_content (plume's plain thought), else its
 * reasoning_text content, else its summary (malloc'd, "" when none). */
static char *reasoning_of(const cJSON *item) {
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(item, "encrypted_content");
    if (cJSON_IsString(enc) && *enc->valuestring) return strdup(enc->valuestring);
    plume_buf b = {0};
    static const char *const lists[] = {"content", "summary"};
    for (int l = 0; l < 2 && !b.len; l++) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(item, lists[l])) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (cJSON_IsString(text)) plume_buf_puts(&b, text->valuestring);
        }
    }
    return plume_buf_take(&b);
}

/* The assistant message the next output item joins: the last message when it is the
 * assistant's (and no tool answer came after it), else a new one. NULL with e filled. */
static serve_message *assistant_turn(serve_request *r, char **thought, serve_error *e) {
    serve_message *m = r->n_msgs ? &r->msgs[r->n_msgs - 1] : NULL;
    if (!m || strcmp(m->role, "assistant") || *thought) m = serve_request_add_message(r, "assistant", e);
    if (m && *thought) {
        free(m->reasoning_content);
        m->reasoning_content = *thought;
        *thought = NULL;
    }
    return m;
}

/* One input item, appended to r; *thought carries a reasoning item to the next assistant
 * turn. */
static int parse_item(const cJSON *it, int32_t i, serve_request *r, char **thought, serve_error *e) {
    char param[64];
    snprintf(param, sizeof param, "input[%d]", i);
    if (!cJSON_IsObject(it)) return serve_json_bad(e, param, "an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type"), *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : "message";
    if (!strcmp(t, "message")) {
        static const char *const roles[] = {"system", "developer", "user", "assistant"};
        int known = 0;
        for (int k = 0; cJSON_IsString(role) && k < 4; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known) return serve_json_bad(e, param, "a message with a role of system, developer, user or assistant");
        serve_message *m = !strcmp(role->valuestring, "assistant") ? assistant_turn(r, thought, e)
                                                                     : serve_request_add_message(r, role->valuestring, e);
        if (!m) return e->status;
        if (m->content || m->parts) { /* the assistant already spoke in this turn: a new message */
            if (!(m = serve_request_add_message(r, "assistant", e))) return e->status;
        }
        snprintf(param, sizeof param, "input[%d].content", i);
        return item_content(cJSON_GetObjectItemCaseSensitive(it, "content"), r, m, param, e);
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id"), *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || (args && !cJSON_IsString(args)))
            return serve_json_bad(e, param, "a function_call with 'call_id', 'name' and 'arguments'");
        serve_message *m = assistant_turn(r, thought, e);
        if (!m) return e->status;
        return serve_message_add_call(m, id->valuestring, name->valuestring, args ? args->valuestring : "{}", e);
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id"), *out = cJSON_GetObjectItemCaseSensitive(it, "output");
        if (!cJSON_IsString(id)) return serve_json_bad(e, param, "a function_call_output with a 'call_id'");
        serve_message *m = serve_request_add_message(r, "tool", e);
        if (!m) return e->status;
        if (!(m->tool_call_id = strdup(id->valuestring))) return SERVE_OOM(e);
        snprintf(param, sizeof param, "input[%d].output", i);
        return item_content(out, r, m, param, e);
    }
    if (!strcmp(t, "reasoning")) {
        free(*thought);
        return (*thought = reasoning_of(it)) ? 0 : SERVE_OOM(e);
    }
    if (!strcmp(t, "item_reference"))
        return serve_json_unsupported(e, param, "is not supported: plume stores no items (send them whole)");
    return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_value",
                           "input items of type '%.64s' are not supported", t);
}

/* "instructions" (a system message first) and "input" (a string or a list of items). */
static int parse_input(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    if (ins && !cJSON_IsNull(ins)) {
        if (!cJSON_IsString(ins)) return serve_json_bad(e, "instructions", "a string");
        serve_message *m = serve_request_add_message(r, "system", e);
        if (!m) return e->status;
        if (!(m->content = strdup(ins->valuestring))) return SERVE_OOM(e);
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input"), *it;
    if (!in || cJSON_IsNull(in)) return serve_error_set(e, 400, SERVE_ERR_REQUEST, "input", "missing_field", "'input' is required");
    if (cJSON_IsString(in)) {
        serve_message *m = serve_request_add_message(r, "user", e);
        if (!m) return e->status;
        return (m->content = strdup(in->valuestring)) ? 0 : SERVE_OOM(e);
    }
    if (!cJSON_IsArray(in)) return serve_json_bad(e, "input", "a string or a list of items");
    char *thought = NULL;
    int32_t i = 0;
    int rc = 0;
    cJSON_ArrayForEach(it, in) if (!rc) rc = parse_item(it, i++, r, &thought, e);
    free(thought);
    if (!rc && (!r->n_msgs || !strcmp(r->msgs[r->n_msgs - 1].role, "system")))
        rc = serve_json_bad(e, "input", "a list holding at least one message or item");
    return rc;
}

/* Hosted tools: run by OpenAI's servers (a search index, a sandbox, a remote MCP server, ...),
 * which a local server does not have. */
static int is_hosted(const char *type) {
    static const char *const hosted[] = {"web_search", "file_search", "code_interpreter", "image_generation",
                                         "computer_use", "mcp"};
    for (size_t i = 0; i < sizeof hosted / sizeof *hosted; i++)
        if (!strncmp(type, hosted[i], strlen(hosted[i]))) return 1;
    return 0;
}

/* A function tool of tools[i] or of a namespace's list (param names it), appended to r's
 * tools; space: the namespace that declared it, or NULL. */
static int function_tool(const cJSON *t, const char *param, const char *space, serve_request *r, serve_error *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_value",
                               "tools of type '%.64s' are not supported (function and namespace tools; hosted tools "
                               "are left out)", cJSON_IsString(type) ? type->valuestring : "?");
    int rc = serve_function_tool(r, t, "a list of {\"type\": \"function\", \"name\", \"parameters\"}", e);
    if (rc) return rc;
    serve_tool *added = &r->tools[r->n_tools - 1];
    for (int32_t k = 0; k < r->n_tools - 1; k++) /* a call names only the function */
        if (!strcmp(r->tools[k].name, added->name))
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "tools", "invalid_value",
                                   "two functions are named '%.64s' (namespaces included): a call could not say which",
                                   added->name);
    return space && !(added->space = strdup(space)) ? SERVE_OOM(e) : 0;
}

/* "tools": function tools {type: "function", name, description, parameters}, and the
 * functions of namespace tools {type: "namespace", name, description, tools} (Codex's groups),
 * each remembered with its namespace for its calls; hosted tools are left out, named in
 * r->warning (docs/SERVER.md: what Codex's stock configuration needs); anything else is a 400.
 * Then "tool_choice". */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    int rc = 0;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v)) return serve_json_bad(e, "tools", "a list of tools");
        plume_buf left = {0}; /* the hosted tools left out, for the warning */
        int32_t i = 0;
        cJSON_ArrayForEach(t, v) {
            char param[32];
            snprintf(param, sizeof param, "tools[%d]", i++);
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            const char *ty = cJSON_IsString(type) ? type->valuestring : "";
            if (is_hosted(ty)) {
                plume_buf_printf(&left, "%s%s (%s)", left.len ? ", " : "", param, ty);
            } else if (!strcmp(ty, "namespace")) {
                const cJSON *ns = cJSON_GetObjectItemCaseSensitive(t, "name"), *fns = cJSON_GetObjectItemCaseSensitive(t, "tools"), *f;
                if (!cJSON_IsString(ns) || !cJSON_IsArray(fns)) {
                    rc = serve_json_bad(e, param, "a namespace {\"name\", \"tools\": [function tools]}");
                    break;
                }
                int32_t k = 0;
                cJSON_ArrayForEach(f, fns) {
                    char inner[64];
                    snprintf(inner, sizeof inner, "%s.tools[%d]", param, k++);
                    if ((rc = function_tool(f, inner, ns->valuestring, r, e))) break;
                }
            } else {
                rc = function_tool(t, param, NULL, r, e);
            }
            if (rc) break;
        }
        if (!rc && left.len && !(r->warning = plume_sprintf("hosted tools left out (a local server cannot run them): %s", left.p)))
            rc = SERVE_OOM(e);
        if (!rc && left.oom) rc = SERVE_OOM(e);
        plume_buf_free(&left);
        if (rc) return rc;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *ctype = cJSON_GetObjectItemCaseSensitive(c, "type"), *cname = cJSON_GetObjectItemCaseSensitive(c, "name");
    const char *choice = "auto";
    if (cJSON_IsString(c)) {
        choice = c->valuestring;
        if (!serve_tool_mode(choice)) return serve_json_bad(e, "tool_choice", "\"auto\", \"none\", \"required\" or a function");
    } else if (cJSON_IsObject(c)) {
        if (!cJSON_IsString(ctype) || strcmp(ctype->valuestring, "function") || !cJSON_IsString(cname))
            return serve_json_unsupported(e, "tool_choice", "other than a mode or {\"type\": \"function\", \"name\"} is not "
                                                            "supported");
        choice = cname->valuestring;
    } else if (c && !cJSON_IsNull(c)) {
        return serve_json_bad(e, "tool_choice", "a string or an object");
    }
    return (r->tool_choice = strdup(choice)) ? 0 : SERVE_OOM(e);
}

/* "reasoning": {"effort": none/minimal (thinking off), low/medium/high (on), "summary"}. */
static int parse_reasoning(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return serve_json_bad(e, "reasoning", "an object");
    const cJSON *eff = cJSON_GetObjectItemCaseSensitive(v, "effort");
    if (!eff || cJSON_IsNull(eff)) return 0;
    int32_t on = cJSON_IsString(eff) ? serve_effort_thinking(eff->valuestring) : -1;
    if (on < 0) return serve_json_bad(e, "effort", "none, minimal, low, medium or high");
    r->enable_thinking = on;
    return 0;
}

/* "text": {"format": {"type": "text" | "json_object"} or {"type": "json_schema", "name",
 * "schema", "strict"} (docs/STRUCTURED.md), "verbosity": "medium"}. */
static int parse_text(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "format"), *ft = cJSON_GetObjectItemCaseSensitive(f, "type");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    int rc = 0;
    if (!f || cJSON_IsNull(f) || (cJSON_IsString(ft) && !strcmp(ft->valuestring, "text"))) rc = 0;
    else if (cJSON_IsString(ft) && !strcmp(ft->valuestring, "json_object")) rc = serve_format_schema(r, "text.format", NULL, e);
    else if (cJSON_IsString(ft) && !strcmp(ft->valuestring, "json_schema") && cJSON_IsObject(schema))
        rc = serve_format_schema(r, "text.format", schema, e);
    else
        rc = serve_json_bad(e, "text.format", "{\"type\": \"text\" | \"json_object\"} or {\"type\": \"json_schema\", "
                                              "\"name\", \"schema\": {...}}");
    if (rc) return rc;
    const cJSON *verb = cJSON_GetObjectItemCaseSensitive(v, "verbosity");
    if (verb && !cJSON_IsNull(verb) && !(cJSON_IsString(verb) && !strcmp(verb->valuestring, "medium")))
        return serve_json_unsupported(e, "verbosity", "other than medium is not supported");
    return 0;
}

/* What a stateless, local server cannot do: stored state, background runs, truncation,
 * prompt templates; "include" beyond the thought and the log-probabilities. */
static int refuse_state(const cJSON *root, serve_request *r, serve_error *e) {
    static const char *const stored[] = {"previous_response_id", "conversation", "prompt"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, stored[i]);
        if (v && !cJSON_IsNull(v))
            return serve_json_unsupported(e, stored[i], "is not supported: plume stores no responses (send the whole "
                                                        "conversation as input)");
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "background")))
        return serve_json_unsupported(e, "background", "is not supported (stream instead)");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (tr && !cJSON_IsNull(tr) && !(cJSON_IsString(tr) && !strcmp(tr->valuestring, "disabled")))
        return serve_json_unsupported(e, "truncation", "other than disabled is not supported");
    const cJSON *mtc = cJSON_GetObjectItemCaseSensitive(root, "max_tool_calls");
    if (mtc && !cJSON_IsNull(mtc)) return serve_json_unsupported(e, "max_tool_calls", "is not supported");
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(root, "include"), *x;
    if (inc && !cJSON_IsNull(inc) && !cJSON_IsArray(inc)) return serve_json_bad(e, "include", "a list of strings");
    cJSON_ArrayForEach(x, inc) {
        if (cJSON_IsString(x) && !strcmp(x->valuestring, "message.output_text.logprobs")) r->logprobs = 1;
        else if (!cJSON_IsString(x) || strcmp(x->valuestring, "reasoning.encrypted_content"))
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "include", "unsupported_value",
                                   "include '%.64s' is not supported", cJSON_IsString(x) ? x->valuestring : "?");
    }
    return 0;
}

/* Parse a /v1/responses body. */
static int parse_responses(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int64_t max_tokens = -1, top = 0, k = r->sp.top_k;
    int32_t store = 0, parallel = 1; /* parallel_tool_calls false: at most one call */
    int rc;
    r->include_usage = 1;
    if (!(rc = serve_json_str(root, "model", &r->model, e)) && !(rc = serve_json_bool(root, "stream", &r->stream, e)) &&
        !(rc = serve_json_bool(root, "store", &store, e)) &&
        !(rc = serve_json_bool(root, "parallel_tool_calls", &parallel, e)) &&
        !(rc = serve_json_int(root, "max_output_tokens", 1, 1 << 24, &max_tokens, e)) &&
        !(rc = serve_json_num(root, "temperature", 0, 2, &r->sp.temperature, e)) &&
        !(rc = serve_json_num(root, "top_p", 0, 1, &r->sp.top_p, e)) &&
        !(rc = serve_json_int(root, "top_k", 0, 1 << 24, &k, e)) && !(rc = serve_json_seed(root, "seed", r, e)) &&
        !(rc = serve_json_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e)) &&
        !(rc = refuse_state(root, r, e)) && !(rc = parse_text(root, r, e)) && !(rc = parse_reasoning(root, r, e)) &&
        !(rc = parse_input(root, r, e)))
        rc = parse_tools(root, r, e);
    r->max_tokens = (int32_t)max_tokens;
    r->one_call = !parallel;
    r->prompt_name = "input";
    r->length_name = "max_output_tokens";
    r->top_logprobs = r->logprobs ? (int32_t)top : 0;
    r->sp.top_k = (int32_t)k;
    if (r->sp.top_p <= 0) r->sp.temperature = 0;
    cJSON_Delete(root);
    return rc;
}

/* A float sampling parameter as the request wrote it: 0.95f is 0.949999988079071 as a double,
 * so it goes through its shortest decimal form (7 significant digits). */
static double float_value(float f) {
    char s[32];
    snprintf(s, sizeof s, "%.7g", (double)f);
    return strtod(s, NULL);
}

/* ---- the Response object -------------------------------------------------------------------- */

/* An answer as the Response object lists it (what a stream has gathered, or the whole one). */
typedef struct {
    const char *text, *thought;
    const serve_tool_call *calls;
    int32_t n_calls;
    const serve_logprob *lps;
    int32_t n_lps;
    serve_finish finish; /* NONE: in progress */
} resp_answer;

/* An item id: <kind>_<the answer's id>[_<index>]. */
static void item_id(const serve_job_head *j, const char *kind, int32_t index, char out[112]) {
    const char *dash = strchr(j->id, '-');
    if (index < 0) snprintf(out, 112, "%s_%s", kind, dash ? dash + 1 : j->id);
    else snprintf(out, 112, "%s_%s_%d", kind, dash ? dash + 1 : j->id, index);
}

/* The logprobs of an output_text: [{"token", "logprob", "bytes", "top_logprobs"}]. */
static cJSON *json_logprobs(const serve_job_head *j, const serve_logprob *lps, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, serve_json_logprob(j->tok, &lps[i]));
    return a;
}

/* {"type": "output_text", "text", "annotations": [], "logprobs": [...]}. */
static cJSON *json_output_text(const serve_job_head *j, const char *text, const serve_logprob *lps, int32_t n_lps) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddItemToObject(p, "logprobs", json_logprobs(j, lps, j->req.logprobs ? n_lps : 0));
    return p;
}

/* The message item (content: its output_text, or none while it is being added). */
static cJSON *json_message(const serve_job_head *j, const char *text, const serve_logprob *lps, int32_t n_lps, int done) {
    char id[112];
    item_id(j, "msg", -1, id);
    cJSON *m = cJSON_CreateObject(), *content;
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(m, "role", "assistant");
    content = cJSON_AddArrayToObject(m, "content");
    if (done) cJSON_AddItemToArray(content, json_output_text(j, text, lps, n_lps));
    return m;
}

/* {"type": "reasoning_text", "text"}. */
static cJSON *json_reasoning_text(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "reasoning_text");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

/* The reasoning item (with its text as encrypted_content: plume's thought, round-tripped). */
static cJSON *json_reasoning(const serve_job_head *j, const char *thought, int done) {
    char id[112];
    item_id(j, "rs", -1, id);
    cJSON *m = cJSON_CreateObject(), *content;
    cJSON_AddStringToObject(m, "type", "reasoning");
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddArrayToObject(m, "summary");
    content = cJSON_AddArrayToObject(m, "content");
    if (done) {
        cJSON_AddItemToArray(content, json_reasoning_text(thought));
        cJSON_AddStringToObject(m, "encrypted_content", thought);
    }
    return m;
}

/* A function_call item. */
static cJSON *json_call(const serve_job_head *j, const serve_tool_call *t, int32_t index, int done) {
    char id[112], call_id[112];
    item_id(j, "fc", index, id);
    item_id(j, "call", index, call_id);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "function_call");
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "call_id", call_id);
    cJSON_AddStringToObject(m, "name", t->name ? t->name : "");
    for (int32_t k = 0; t->name && k < j->req.n_tools; k++) /* a namespace's function says it */
        if (j->req.tools[k].space && !strcmp(j->req.tools[k].name, t->name))
            cJSON_AddStringToObject(m, "namespace", j->req.tools[k].space);
    cJSON_AddStringToObject(m, "arguments", done && t->arguments ? t->arguments : done ? "{}" : "");
    cJSON_AddStringToObject(m, "status", done ? "completed" : "in_progress");
    return m;
}

/* The usage: input, cached, output and reasoning tokens. */
static cJSON *json_usage(const serve_usage *u) {
    cJSON *o = cJSON_CreateObject(), *d;
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt);
    if ((d = cJSON_AddObjectToObject(o, "input_tokens_details"))) cJSON_AddNumberToObject(d, "cached_tokens", u->cached);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion);
    if ((d = cJSON_AddObjectToObject(o, "output_tokens_details"))) cJSON_AddNumberToObject(d, "reasoning_tokens", u->reasoning);
    cJSON_AddNumberToObject(o, "total_tokens", (double)u->prompt + u->completion);
    return o;
}

/* The Response object: status (in_progress, completed, incomplete), the output items in the
 * order the model wrote them (thought, text, calls), the usage. */
static cJSON *json_response(const serve_job_head *j, const resp_answer *a, const serve_usage *u) {
    cJSON *o = cJSON_CreateObject(), *out;
    const char *status = !a->finish ? "in_progress" : a->finish == SERVE_FINISH_LENGTH ? "incomplete" : "completed";
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)j->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNullToObject(o, "error");
    if (a->finish == SERVE_FINISH_LENGTH) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(o, "incomplete_details");
    }
    cJSON_AddStringToObject(o, "model", j->req.model ? j->req.model : j->model ? j->model : "");
    out = cJSON_AddArrayToObject(o, "output");
    if (a->finish) {
        if (a->thought && *a->thought) cJSON_AddItemToArray(out, json_reasoning(j, a->thought, 1));
        if (*a->text || !a->n_calls) cJSON_AddItemToArray(out, json_message(j, a->text, a->lps, a->n_lps, 1));
        for (int32_t i = 0; i < a->n_calls; i++) cJSON_AddItemToArray(out, json_call(j, &a->calls[i], i, 1));
    }
    cJSON_AddBoolToObject(o, "parallel_tool_calls", !j->req.one_call);
    const char *tc = j->req.tool_choice ? j->req.tool_choice : "auto";
    if (serve_tool_mode(tc)) {
        cJSON_AddStringToObject(o, "tool_choice", tc);
    } else {
        cJSON *c = cJSON_AddObjectToObject(o, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(c, "name", tc);
    }
    cJSON_AddArrayToObject(o, "tools");
    cJSON_AddNumberToObject(o, "temperature", float_value(j->req.sp.temperature));
    cJSON_AddNumberToObject(o, "top_p", float_value(j->req.sp.top_p));
    if (j->req.max_tokens > 0) cJSON_AddNumberToObject(o, "max_output_tokens", j->req.max_tokens);
    else cJSON_AddNullToObject(o, "max_output_tokens");
    cJSON_AddBoolToObject(o, "store", 0);
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON_AddStringToObject(o, "truncation", "disabled");
    cJSON_AddObjectToObject(o, "metadata");
    if (u) cJSON_AddItemToObject(o, "usage", json_usage(u));
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

/* The whole Response of a non-streamed request. */
static char *responses_reply(const serve_job_head *j, const serve_reply *a, int32_t n, const serve_usage *u) {
    (void)n;
    resp_answer ra = {a->text, a->thought, a->calls, a->n_calls, a->lps, a->n_lps, a->finish};
    cJSON *o = json_response(j, &ra, u);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- streams ------------------------------------------------------------------------------- */

/* Which output item a stream has open. */
enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE };

/* What a stream keeps: the events' sequence, the open item, and the answer so far (for the
 * .done events and response.completed). */
typedef struct {
    int32_t seq;          /* sequence_number of the next event */
    int32_t open;         /* ITEM_* */
    int32_t n_items;      /* output items added (the next one's output_index) */
    int32_t msg_index, rs_index; /* output_index of the message and reasoning items, or -1 */
    plume_buf text, thought;
    serve_tool_call *calls;
    int32_t n_calls;
    serve_logprob *lps;
    int32_t n_lps;
    size_t cap_lps;
    serve_finish finish;
} resp_state;

/* Free what a stream's state holds. */
static void resp_state_free(void *p) {
    resp_state *st = p;
    free(st->text.p);
    free(st->thought.p);
    for (int32_t i = 0; i < st->n_calls; i++) {
        free(st->calls[i].name);
        free(st->calls[i].arguments);
    }
    free(st->calls);
    free(st->lps);
}

/* Append "event: <type>\ndata: <o with type and sequence_number>\n\n" (o freed). */
static void emit(plume_buf *out, resp_state *st, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", st->seq++);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    plume_buf_puts(out, "event: ");
    plume_buf_puts(out, type);
    plume_buf_puts(out, "\ndata: ");
    plume_buf_puts(out, s);
    plume_buf_puts(out, "\n\n");
    free(s);
}

/* {"item_id", "output_index", "content_index": 0} of the part events. */
static cJSON *part_event(const serve_job_head *j, const char *kind, int32_t index) {
    char id[112];
    item_id(j, kind, -1, id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

/* {"output_index", "item"} (item taken over). */
static cJSON *item_event(int32_t index, cJSON *item) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddItemToObject(o, "item", item);
    return o;
}

/* Close the open item: its text's .done, content_part.done, output_item.done. */
static void item_close(plume_buf *out, const serve_job_head *j, resp_state *st) {
    if (st->open == ITEM_REASONING) {
        const char *t = st->thought.p ? st->thought.p : "";
        cJSON *o = part_event(j, "rs", st->rs_index);
        cJSON_AddStringToObject(o, "text", t);
        emit(out, st, "response.reasoning_text.done", o);
        o = part_event(j, "rs", st->rs_index);
        cJSON_AddItemToObject(o, "part", json_reasoning_text(t));
        emit(out, st, "response.content_part.done", o);
        emit(out, st, "response.output_item.done", item_event(st->rs_index, json_reasoning(j, t, 1)));
    } else if (st->open == ITEM_MESSAGE) {
        const char *t = st->text.p ? st->text.p : "";
        cJSON *o = part_event(j, "msg", st->msg_index);
        cJSON_AddStringToObject(o, "text", t);
        cJSON_AddItemToObject(o, "logprobs", json_logprobs(j, st->lps, j->req.logprobs ? st->n_lps : 0));
        emit(out, st, "response.output_text.done", o);
        o = part_event(j, "msg", st->msg_index);
        cJSON_AddItemToObject(o, "part", json_output_text(j, t, st->lps, st->n_lps));
        emit(out, st, "response.content_part.done", o);
        emit(out, st, "response.output_item.done", item_event(st->msg_index, json_message(j, t, st->lps, st->n_lps, 1)));
    }
    st->open = ITEM_NONE;
}

/* Open an item of a kind (reasoning or message): output_item.added, content_part.added. */
static void item_open(plume_buf *out, const serve_job_head *j, resp_state *st, int32_t kind) {
    if (st->open == kind) return;
    item_close(out, j, st);
    int32_t index = st->n_items++;
    int rs = kind == ITEM_REASONING;
    if (rs) st->rs_index = index;
    else st->msg_index = index;
    emit(out, st, "response.output_item.added",
         item_event(index, rs ? json_reasoning(j, "", 0) : json_message(j, "", NULL, 0, 0)));
    cJSON *o = part_event(j, rs ? "rs" : "msg", index);
    cJSON_AddItemToObject(o, "part", rs ? json_reasoning_text("") : json_output_text(j, "", NULL, 0));
    emit(out, st, "response.content_part.added", o);
    st->open = kind;
}

/* A delta of the open item's text (and the token's log-probabilities, kept for the end). */
static void item_delta(plume_buf *out, const serve_job_head *j, resp_state *st, const serve_event *ev) {
    int rs = ev->kind == SERVE_EV_THOUGHT;
    plume_buf_put(rs ? &st->thought : &st->text, ev->text, ev->len);
    if (!rs && ev->lp && j->req.logprobs && !plume_grow(&st->lps, &st->cap_lps, (size_t)st->n_lps + 1, sizeof *st->lps))
        st->lps[st->n_lps++] = *ev->lp; /* out of memory: the entry is dropped */
    char *t = strndup(ev->text, ev->len);
    cJSON *o = part_event(j, rs ? "rs" : "msg", rs ? st->rs_index : st->msg_index);
    cJSON_AddStringToObject(o, "delta", t ? t : "");
    free(t);
    if (!rs) cJSON_AddItemToObject(o, "logprobs", json_logprobs(j, ev->lp, ev->lp && j->req.logprobs ? 1 : 0));
    emit(out, st, rs ? "response.reasoning_text.delta" : "response.output_text.delta", o);
}

/* A tool call: its function_call item added, its arguments, done. */
static void stream_call(plume_buf *out, const serve_job_head *j, resp_state *st, const serve_event *ev) {
    item_close(out, j, st);
    serve_tool_call *nc = realloc(st->calls, (size_t)(st->n_calls + 1) * sizeof *nc);
    if (nc) {
        st->calls = nc;
        st->calls[st->n_calls++] = (serve_tool_call){NULL, strdup(ev->call->name ? ev->call->name : ""),
                                                     strdup(ev->call->arguments ? ev->call->arguments : "{}")};
    }
    int32_t index = st->n_items++;
    char id[112];
    item_id(j, "fc", ev->call_index, id);
    emit(out, st, "response.output_item.added", item_event(index, json_call(j, ev->call, ev->call_index, 0)));
    const char *args = ev->call->arguments ? ev->call->arguments : "{}";
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddStringToObject(o, "delta", args);
    emit(out, st, "response.function_call_arguments.delta", o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", index);
    cJSON_AddStringToObject(o, "name", ev->call->name ? ev->call->name : "");
    cJSON_AddStringToObject(o, "arguments", args);
    emit(out, st, "response.function_call_arguments.done", o);
    emit(out, st, "response.output_item.done", item_event(index, json_call(j, ev->call, ev->call_index, 1)));
}

/* {"response": the Response as it stands} (finish NONE: in progress). */
static cJSON *response_event(const serve_job_head *j, const resp_state *st, serve_finish finish, const serve_usage *u) {
    resp_answer a = {st->text.p ? st->text.p : "", st->thought.p, st->calls, st->n_calls, st->lps, st->n_lps, finish};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", json_response(j, &a, u));
    return o;
}

/* One event of a streamed answer, as the Responses API's typed events. */
static void responses_stream(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    resp_state *st = state;
    switch (ev->kind) {
    case SERVE_EV_START:
        st->msg_index = st->rs_index = -1;
        emit(out, st, "response.created", response_event(j, st, SERVE_FINISH_NONE, NULL));
        emit(out, st, "response.in_progress", response_event(j, st, SERVE_FINISH_NONE, NULL));
        return;
    case SERVE_EV_THOUGHT:
    case SERVE_EV_TEXT:
        if (!ev->len) return;
        item_open(out, j, st, ev->kind == SERVE_EV_THOUGHT ? ITEM_REASONING : ITEM_MESSAGE);
        item_delta(out, j, st, ev);
        return;
    case SERVE_EV_TOOL_CALL: stream_call(out, j, st, ev); return;
    case SERVE_EV_END:
        if (!st->n_items) item_open(out, j, st, ITEM_MESSAGE); /* an empty answer is one empty message */
        item_close(out, j, st);
        st->finish = ev->finish;
        return;
    case SERVE_EV_DONE: {
        serve_finish finish = st->finish ? st->finish : SERVE_FINISH_STOP;
        emit(out, st, finish == SERVE_FINISH_LENGTH ? "response.incomplete" : "response.completed",
             response_event(j, st, finish, ev->usage));
        return;
    }
    case SERVE_EV_ERROR: {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", *ev->error->code ? ev->error->code : serve_openai_error_type(ev->error->kind));
        cJSON_AddStringToObject(o, "message", ev->error->message);
        cJSON_AddNullToObject(o, "param");
        emit(out, st, "error", o);
        return;
    }
    default: return;
    }
}

const serve_dialect serve_responses = {
    .name = "openai-responses", .id_prefix = "resp", .stream_type = "text/event-stream",
    .state_size = sizeof(resp_state), .parse = parse_responses, .stream = responses_stream, .reply = responses_reply,
    .error = serve_openai_error, .state_free = resp_state_free, .idle = ":\n\n",
};
