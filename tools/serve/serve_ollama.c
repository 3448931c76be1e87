/* serve_ollama.c -- Ollama's dialect (docs/SERVER.md): /api/chat and /api/generate request
 * bodies -> the internal request; answer events -> NDJSON lines ({"message"|"response", ...,
 * "done": false} pieces, then one "done": true line with done_reason and durations in
 * nanoseconds) or the whole reply; errors -> {"error": "message"}. Also the endpoints that
 * generate nothing (/api/version, /api/tags, /api/ps, /api/show) and the banner of GET /.
 *
 * Ollama streams unless "stream": false. Sampling comes in "options"; the options that only
 * tune loading (num_gpu, num_thread, use_mmap, ...) change no answer and are accepted, those
 * plume cannot honour (mirostat, typical_p, tfs_z, a num_ctx past the slots') are a 400. A
 * trailing assistant message is continued, as Ollama does. Unknown fields are ignored. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define OLLAMA_VERSION "0.13.4" /* the API level plume speaks: tools, thinking, logprobs, and /v1/responses
                                  (Ollama 0.13.4's; Codex's --oss mode asks for it) */

const char serve_ollama_banner[] = "Ollama is running";

/* ---- requests ----------------------------------------------------------------------------- */

/* "options": sampling, the length, the context, stops; loading hints accepted. */
static int parse_options(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "options");
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return serve_json_bad(e, "options", "an object");
    plume_sampler_params *p = &r->sp;
    int64_t k = p->top_k, n_predict = -1, n_ctx = 0, last_n = p->repeat_last_n;
    int rc;
    if ((rc = serve_json_num(o, "temperature", 0, 2, &p->temperature, e)) ||
        (rc = serve_json_num(o, "top_p", 0, 1, &p->top_p, e)) || (rc = serve_json_int(o, "top_k", 0, 1 << 24, &k, e)) ||
        (rc = serve_json_num(o, "min_p", 0, 1, &p->min_p, e)) ||
        (rc = serve_json_num(o, "repeat_penalty", 0.01, 100, &p->repeat_penalty, e)) ||
        (rc = serve_json_int(o, "repeat_last_n", -1, 1 << 24, &last_n, e)) ||
        (rc = serve_json_num(o, "presence_penalty", -2, 2, &p->presence_penalty, e)) ||
        (rc = serve_json_num(o, "frequency_penalty", -2, 2, &p->frequency_penalty, e)) ||
        (rc = serve_json_seed(o, "seed", r, e)) || (rc = serve_json_int(o, "num_predict", -2, 1 << 24, &n_predict, e)) ||
        (rc = serve_json_int(o, "num_ctx", 1, 1 << 24, &n_ctx, e)) || (rc = serve_json_stops(o, "stop", 1, r, e)))
        return rc;
    p->top_k = (int32_t)k;
    p->repeat_last_n = (int32_t)last_n;
    if (p->top_p <= 0) p->temperature = 0;
    r->max_tokens = n_predict > 0 ? (int32_t)n_predict : -1; /* -1, -2: until the context is full */
    r->length_name = "num_predict";
    r->ctx_limit = (int32_t)n_ctx;
    /* Sampling plume does not do: refused unless they ask for nothing. */
    static const struct { const char *name; double off; const char *why; } no[] = {
        {"mirostat", 0, "is not supported (plume samples with top-k, top-p, min-p)"},
        {"typical_p", 1, "other than 1 is not supported"},
        {"tfs_z", 1, "other than 1 is not supported"},
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, no[i].name);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == no[i].off))
            return serve_json_unsupported(e, no[i].name, no[i].why);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "penalize_newline")))
        return serve_json_unsupported(e, "penalize_newline", "is not supported");
    return 0;
}

/* The fields ollama-ai-provider-v2 (the Vercel AI SDK's Ollama provider) sends at the top
 * level, where Ollama's API has none and Ollama drops them: "temperature", "top_p" and
 * "max_output_tokens" (for options' temperature, top_p and num_predict; options win when both
 * are given) and "tool_choice" (OpenAI's or the Responses API's shape: "auto", "none",
 * "required", {"type": "function", "name"} or {"type": "function", "function": {"name"}}).
 * plume honours them: a user who set them meant them. */
static int parse_top_level(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "options");
    plume_sampler_params top = r->sp;
    int64_t n = -1;
    int rc;
    if ((rc = serve_json_num(root, "temperature", 0, 2, &top.temperature, e)) || (rc = serve_json_num(root, "top_p", 0, 1, &top.top_p, e)) ||
        (rc = serve_json_int(root, "max_output_tokens", 1, 1 << 24, &n, e)))
        return rc;
    if (!cJSON_GetObjectItemCaseSensitive(o, "temperature")) r->sp.temperature = top.temperature;
    if (!cJSON_GetObjectItemCaseSensitive(o, "top_p")) r->sp.top_p = top.top_p;
    if (r->sp.top_p <= 0) r->sp.temperature = 0;
    if (n > 0 && !cJSON_GetObjectItemCaseSensitive(o, "num_predict")) {
        r->max_tokens = (int32_t)n;
        r->length_name = "max_output_tokens";
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!c || cJSON_IsNull(c)) return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (!name) name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    const char *choice = cJSON_IsString(c) && serve_tool_mode(c->valuestring) ? c->valuestring
                         : cJSON_IsString(type) && !strcmp(type->valuestring, "function") && cJSON_IsString(name) ? name->valuestring
                                                                                                                   : NULL;
    if (!choice) return serve_json_bad(e, "tool_choice", "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}");
    free(r->tool_choice);
    return (r->tool_choice = strdup(choice)) ? 0 : SERVE_OOM(e);
}

/* "think": a boolean or an effort ("low", "medium", "high": on). */
static int parse_think(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "think");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsBool(v)) {
        r->enable_thinking = cJSON_IsTrue(v);
        return 0;
    }
    if (cJSON_IsString(v) && serve_effort_thinking(v->valuestring) == 1) {
        r->enable_thinking = 1;
        return 0;
    }
    return serve_json_bad(e, "think", "a boolean or one of low, medium, high");
}

/* Fields both endpoints take: model, stream (default true), options, think, format,
 * keep_alive, logprobs. */
static int parse_common(const cJSON *root, serve_request *r, serve_error *e) {
    int64_t top = 0;
    r->stream = 1;
    int rc;
    if ((rc = serve_json_str(root, "model", &r->model, e)) || (rc = serve_json_bool(root, "stream", &r->stream, e)) ||
        (rc = parse_options(root, r, e)) || (rc = parse_think(root, r, e)) ||
        (rc = serve_json_bool(root, "logprobs", &r->logprobs, e)) ||
        (rc = serve_json_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e)))
        return rc;
    if (top && !r->logprobs) /* as Ollama and OpenAI: the alternatives come with the token's own */
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "top_logprobs", "invalid_value",
                               "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = (int32_t)top;
    r->include_usage = 1;
    /* "format": "json" (any JSON object) or a JSON Schema (docs/STRUCTURED.md); "" is none */
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "json")) rc = serve_format_schema(r, "format", NULL, e);
    else if (cJSON_IsObject(f)) rc = serve_format_schema(r, "format", f, e);
    else if (f && !cJSON_IsNull(f) && !(cJSON_IsString(f) && !*f->valuestring))
        rc = serve_json_bad(e, "format", "\"json\" or a JSON Schema object");
    if (rc) return rc;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "keep_alive"); /* the model is always loaded */
    if (k && !cJSON_IsNull(k) && !cJSON_IsString(k) && !cJSON_IsNumber(k))
        return serve_json_bad(e, "keep_alive", "a duration (\"5m\") or a number of seconds");
    char *end = NULL; /* 0, "0", "0s", "0m": the client unloads the model (told "unload"; it stays) */
    r->unload = cJSON_IsNumber(k) ? k->valuedouble == 0
                                  : cJSON_IsString(k) && *k->valuestring && strtod(k->valuestring, &end) == 0 &&
                                        end != k->valuestring && strspn(end, "smhun") == strlen(end);
    return 0;
}

/* Why a "videos" list is refused (Ollama's API has no video field). */
#define VIDEOS_WHY "are not part of Ollama's API (its messages carry images only); send a video to /v1/chat/completions as a " \
                   "video_url part"

/* A list that must be empty when present (param: its name in the error): raw generate's
 * images, generate's context. */
static int refuse_list(const cJSON *o, const char *name, const char *param, const char *why, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v) || (cJSON_IsArray(v) && !cJSON_GetArraySize(v))) return 0;
    return serve_json_unsupported(e, param, why);
}

/* A message's tool_calls: [{"function": {"name", "arguments": {object}}}]. */
static int message_calls(const cJSON *m, serve_message *out, const char *param, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return serve_json_bad(e, param, "a list of tool calls");
    cJSON_ArrayForEach(c, v) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsString(name) || (args && !cJSON_IsObject(args) && !cJSON_IsString(args) && !cJSON_IsNull(args)))
            return serve_json_bad(e, param, "a list of {\"function\": {\"name\", \"arguments\": {...}}}");
        char *text = cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
        if (cJSON_IsObject(args) && !text) return SERVE_OOM(e);
        int rc = serve_message_add_call(out, cJSON_IsString(id) ? id->valuestring : NULL, name->valuestring,
                                        cJSON_IsString(args) ? args->valuestring : text, e);
        free(text);
        if (rc) return rc;
    }
    return 0;
}

/* One element of /api/chat's "messages", appended to r. */
static int parse_message(const cJSON *m, int32_t i, serve_request *r, serve_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return serve_json_bad(e, param, "an object");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    int known = 0;
    for (size_t k = 0; cJSON_IsString(role) && k < 4; k++) known |= !strcmp(role->valuestring, roles[k]);
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!known) return serve_json_bad(e, param, "one of system, user, assistant, tool");
    serve_message *out = serve_request_add_message(r, role->valuestring, e);
    if (!out) return e->status;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) return serve_json_bad(e, param, "a string");
    if (!(out->content = strdup(cJSON_IsString(content) ? content->valuestring : ""))) return SERVE_OOM(e);
    snprintf(param, sizeof param, "messages[%d].videos", i);
    int rc = refuse_list(m, "videos", param, VIDEOS_WHY, e);
    snprintf(param, sizeof param, "messages[%d].images", i);
    if (!rc) rc = serve_media_images(r, out, cJSON_GetObjectItemCaseSensitive(m, "images"), param, e);
    if (rc) return rc;
    if (!strcmp(out->role, "assistant")) {
        snprintf(param, sizeof param, "messages[%d].tool_calls", i);
        if ((rc = message_calls(m, out, param, e)) || (rc = serve_json_str(m, "thinking", &out->reasoning_content, e)))
            return rc;
    }
    if (!strcmp(out->role, "tool") &&
        ((rc = serve_json_str(m, "tool_name", &out->name, e)) || (rc = serve_json_str(m, "tool_call_id", &out->tool_call_id, e))))
        return rc;
    return 0;
}

/* "tools": OpenAI's list of {"type": "function", "function": {"name", ...}}. */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    if (!(r->tool_choice = strdup("auto"))) return SERVE_OOM(e);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return serve_json_bad(e, "tools", "a list of tools");
    cJSON_ArrayForEach(t, v) {
        int rc = serve_function_tool(r, cJSON_GetObjectItemCaseSensitive(t, "function"),
                                     "a list of {\"type\": \"function\", \"function\": {\"name\", ...}}", e);
        if (rc) return rc;
    }
    return 0;
}

/* Parse an /api/chat body. No messages: the client loads the model (answered at once). */
static int parse_chat(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int rc = parse_common(root, r, e);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    if (!rc && v && !cJSON_IsNull(v) && !cJSON_IsArray(v)) rc = serve_json_bad(e, "messages", "a list of messages");
    int32_t i = 0;
    if (!rc && cJSON_IsArray(v)) cJSON_ArrayForEach(m, v) if (!rc) rc = parse_message(m, i++, r, e);
    if (!rc) rc = parse_tools(root, r, e);
    if (!rc) rc = parse_top_level(root, r, e);
    if (!rc && !r->n_msgs) r->kind = SERVE_LOAD;
    else if (!rc) r->continue_final = !strcmp(r->msgs[r->n_msgs - 1].role, "assistant") && !r->msgs[r->n_msgs - 1].n_calls;
    cJSON_Delete(root);
    return rc;
}

/* Parse an /api/generate body: the prompt as a user turn (with "system"), or "raw" as it is.
 * No prompt: the client loads the model. */
static int parse_generate(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    char *prompt = NULL, *system = NULL;
    int32_t raw = 0;
    int rc = parse_common(root, r, e);
    if (!rc) rc = serve_json_str(root, "prompt", &prompt, e);
    if (!rc) rc = serve_json_str(root, "system", &system, e);
    if (!rc) rc = serve_json_bool(root, "raw", &raw, e);
    if (!rc && raw) rc = refuse_list(root, "images", "images", "are not supported with raw (no template to place them)", e);
    if (!rc) rc = refuse_list(root, "videos", "videos", VIDEOS_WHY, e);
    if (!rc) rc = refuse_list(root, "context", "context", "is not supported (send the conversation to /api/chat)", e);
    static const char *const empty_only[] = {"suffix", "template"};
    for (int k = 0; !rc && k < 2; k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, empty_only[k]);
        if (s && !cJSON_IsNull(s) && !(cJSON_IsString(s) && !*s->valuestring))
            rc = serve_json_unsupported(e, empty_only[k], "is not supported (plume renders Gemma 4's own template)");
    }
    if (!rc && (!prompt || !*prompt)) {
        r->kind = SERVE_LOAD;
    } else if (!rc && raw) {
        r->kind = SERVE_COMPLETION;
        r->prompt_name = "prompt";
        r->prompt = prompt;
        prompt = NULL;
    } else if (!rc) {
        r->prompt_name = "prompt";
        serve_message *m = system ? serve_request_add_message(r, "system", e) : NULL;
        if (system && !m) rc = e->status;
        else if (m) m->content = system, system = NULL;
        if (!rc && !(m = serve_request_add_message(r, "user", e))) rc = e->status;
        if (!rc) m->content = prompt, prompt = NULL;
        if (!rc) rc = serve_media_images(r, m, cJSON_GetObjectItemCaseSensitive(root, "images"), "images", e);
        if (!rc && !(r->tool_choice = strdup("auto"))) rc = SERVE_OOM(e);
    }
    free(prompt);
    free(system);
    cJSON_Delete(root);
    return rc;
}

/* ---- replies ------------------------------------------------------------------------------- */

/* What a stream keeps between events: how its choice ended. */
typedef struct {
    serve_finish finish;
} ollama_state;

/* The time now as Ollama writes it: RFC 3339, UTC, nanoseconds. */
static void now_rfc3339(char out[40]) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, 40 - k, ".%09ldZ", ts.tv_nsec);
}

/* A Unix time as RFC 3339 (seconds). */
static void time_rfc3339(int64_t t, char out[40]) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 40, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* {"model", "created_at"} every line starts with (the model as the client named it). */
static cJSON *line_head(const serve_job_head *j) {
    char now[40];
    now_rfc3339(now);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", j->req.model ? j->req.model : j->model ? j->model : "");
    cJSON_AddStringToObject(o, "created_at", now);
    return o;
}

/* Whether the job is an /api/generate one (its lines carry "response", not "message"). */
static int is_generate(const serve_job_head *j) {
    return j->dialect == &serve_ollama_generate;
}

/* One tool call: {"function": {"index", "name", "arguments": {object}}}. */
static cJSON *json_call(const serve_tool_call *t, int32_t index) {
    cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
    cJSON *args = t->arguments ? cJSON_Parse(t->arguments) : NULL;
    if (!cJSON_IsObject(args)) { /* the chat parser gives objects; anything else is kept as text */
        cJSON_Delete(args);
        args = cJSON_CreateObject();
        if (t->arguments && strcmp(t->arguments, "{}")) cJSON_AddStringToObject(args, "arguments", t->arguments);
    }
    cJSON_AddNumberToObject(f, "index", index);
    cJSON_AddStringToObject(f, "name", t->name ? t->name : "");
    cJSON_AddItemToObject(f, "arguments", args);
    return c;
}

/* Add "logprobs": [entries of lps[0..n)] to o. */
static void add_logprobs(cJSON *o, const serve_job_head *j, const serve_logprob *lps, int32_t n) {
    cJSON *a = cJSON_AddArrayToObject(o, "logprobs");
    for (int32_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, serve_json_logprob(j->tok, &lps[i]));
}

/* Ollama's done_reason of a finish: "stop" (tool calls too), "length", "load" ("unload" for a
 * request that asked to unload). */
static const char *done_reason(serve_finish finish, int32_t unload) {
    switch (finish) {
    case SERVE_FINISH_LENGTH: return "length";
    case SERVE_FINISH_LOAD: return unload ? "unload" : "load";
    default: return "stop";
    }
}

/* The end of an answer: done, done_reason and the counts and durations (nanoseconds) of the
 * usage. */
static void add_done(cJSON *o, const char *finish, const serve_usage *u) {
    cJSON_AddBoolToObject(o, "done", 1);
    cJSON_AddStringToObject(o, "done_reason", finish);
    if (!u) return;
    double pe = u->prompt_ms * 1e6, ev = u->predicted_ms * 1e6;
    cJSON_AddNumberToObject(o, "total_duration", floor(pe + ev));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", u->prompt);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", floor(pe));
    cJSON_AddNumberToObject(o, "eval_count", u->completion);
    cJSON_AddNumberToObject(o, "eval_duration", floor(ev));
}

/* Print and free root with a newline (NULL if out of memory). */
static char *print_line(cJSON *root) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    char *line = s ? plume_sprintf("%s\n", s) : NULL;
    free(s);
    return line;
}

/* Append a line (freed; nothing when NULL). */
static void put_line(plume_buf *out, char *line) {
    if (!line) return;
    plume_buf_puts(out, line);
    free(line);
}

/* The body of an error: {"error": "message"}. */
static char *ollama_error(const serve_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", e->message);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* One event of a streamed answer: a line per piece, the done line after the last. */
static void ollama_stream(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    ollama_state *st = state;
    int gen = is_generate(j);
    if (ev->kind == SERVE_EV_ERROR) {
        char *e = ollama_error(ev->error);
        put_line(out, e ? plume_sprintf("%s\n", e) : NULL);
        free(e);
        return;
    }
    if (ev->kind == SERVE_EV_END) {
        st->finish = ev->finish;
        return;
    }
    if (ev->kind == SERVE_EV_START || ev->kind == SERVE_EV_PROMPT) return;
    cJSON *o = line_head(j);
    char *t = ev->text ? strndup(ev->text, ev->len) : NULL;
    const char *piece = t ? t : "";
    if (gen) {
        cJSON_AddStringToObject(o, "response", ev->kind == SERVE_EV_TEXT ? piece : "");
        if (ev->kind == SERVE_EV_THOUGHT) cJSON_AddStringToObject(o, "thinking", piece);
    } else {
        cJSON *m = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", ev->kind == SERVE_EV_TEXT ? piece : "");
        if (ev->kind == SERVE_EV_THOUGHT) cJSON_AddStringToObject(m, "thinking", piece);
        if (ev->kind == SERVE_EV_TOOL_CALL) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            cJSON_AddItemToArray(calls, json_call(ev->call, ev->call_index));
        }
    }
    free(t);
    if (ev->kind == SERVE_EV_DONE) add_done(o, done_reason(st->finish, 0), ev->usage);
    else cJSON_AddBoolToObject(o, "done", 0);
    if (ev->lp && j->req.logprobs) add_logprobs(o, j, ev->lp, 1);
    put_line(out, print_line(o));
}

/* The whole reply (one choice), or the answer to a client loading the model. */
static char *ollama_reply(const serve_job_head *j, const serve_reply *a, int32_t n, const serve_usage *u) {
    (void)n;
    cJSON *o = line_head(j);
    if (is_generate(j)) {
        cJSON_AddStringToObject(o, "response", a->text);
        if (a->thought) cJSON_AddStringToObject(o, "thinking", a->thought);
    } else {
        cJSON *m = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", a->text);
        if (a->thought) cJSON_AddStringToObject(m, "thinking", a->thought);
        if (a->n_calls) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int32_t i = 0; i < a->n_calls; i++) cJSON_AddItemToArray(calls, json_call(&a->calls[i], i));
        }
    }
    add_done(o, done_reason(a->finish, j->req.unload), u);
    if (j->req.logprobs) add_logprobs(o, j, a->lps, a->n_lps);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

const serve_dialect serve_ollama_chat = {
    .name = "ollama-chat", .id_prefix = "ollama", .stream_type = "application/x-ndjson",
    .state_size = sizeof(ollama_state), .parse = parse_chat, .stream = ollama_stream, .reply = ollama_reply,
    .error = ollama_error, .idle = " ", /* JSON lines have no comment: a space before the next line */
};

const serve_dialect serve_ollama_generate = {
    .name = "ollama-generate", .id_prefix = "ollama", .stream_type = "application/x-ndjson",
    .state_size = sizeof(ollama_state), .parse = parse_generate, .stream = ollama_stream, .reply = ollama_reply,
    .error = ollama_error, .idle = " ", /* JSON lines have no comment: a space before the next line */
};

/* ---- the model endpoints --------------------------------------------------------------------- */

/* The model's name as Ollama lists it: "NAME:latest" unless it has a tag. */
static void tag_name(const serve_info *m, char out[300]) {
    snprintf(out, 300, "%s%s", m->model, strchr(m->model, ':') ? "" : ":latest");
}

/* The quantization as Ollama names it. */
static const char *quant_name(const char *weights) {
    static const char *const map[][2] = {{"q8", "Q8_0"}, {"q4", "Q4_0"}, {"bf16", "BF16"}, {"f32", "F32"}};
    for (size_t i = 0; weights && i < sizeof map / sizeof *map; i++)
        if (!strcmp(weights, map[i][0])) return map[i][1];
    return weights ? weights : "";
}

/* {"format", "family", "families", "parameter_size", "quantization_level", ...}. */
static cJSON *json_details(const serve_info *m) {
    cJSON *d = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "plume");
    cJSON_AddStringToObject(d, "family", "gemma4");
    if ((f = cJSON_AddArrayToObject(d, "families"))) cJSON_AddItemToArray(f, cJSON_CreateString("gemma4"));
    cJSON_AddStringToObject(d, "parameter_size", "");
    cJSON_AddStringToObject(d, "quantization_level", quant_name(m->weights));
    return d;
}

/* One entry of /api/tags and /api/ps. */
static cJSON *json_model(const serve_info *m) {
    char name[300], date[40];
    tag_name(m, name);
    time_rfc3339(m->modified, date);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "model", name);
    cJSON_AddStringToObject(o, "modified_at", date);
    cJSON_AddNumberToObject(o, "size", (double)m->bytes);
    cJSON_AddStringToObject(o, "digest", m->digest);
    cJSON_AddItemToObject(o, "details", json_details(m));
    return o;
}

/* Print and free o; NULL with a 500 in e if out of memory. */
static char *print_info(cJSON *o, serve_error *e) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) SERVE_OOM(e);
    return s;
}

/* GET /api/version. */
char *serve_ollama_version(const serve_info *m, const char *body, size_t len, serve_error *e) {
    (void)m, (void)body, (void)len;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", OLLAMA_VERSION);
    return print_info(o, e);
}

/* GET /api/tags: the one model. */
char *serve_ollama_tags(const serve_info *m, const char *body, size_t len, serve_error *e) {
    (void)body, (void)len;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models");
    cJSON_AddItemToArray(a, json_model(m));
    return print_info(o, e);
}

/* GET /api/ps: the one model, always loaded (never expires), in memory rather than VRAM. */
char *serve_ollama_ps(const serve_info *m, const char *body, size_t len, serve_error *e) {
    (void)body, (void)len;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models"), *x = json_model(m);
    cJSON_DeleteItemFromObject(x, "modified_at");
    cJSON_AddStringToObject(x, "expires_at", "2999-12-31T23:59:59Z");
    cJSON_AddNumberToObject(x, "size_vram", 0);
    cJSON_AddNumberToObject(x, "context_length", m->n_ctx);
    cJSON_AddItemToArray(a, x);
    return print_info(o, e);
}

/* POST /api/show {"model"} (any name: the one model): details, model_info with the context
 * length, the capabilities, the default sampling parameters. */
char *serve_ollama_show(const serve_info *m, const char *body, size_t len, serve_error *e) {
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!name || cJSON_IsNull(name)) name = cJSON_GetObjectItemCaseSensitive(root, "name");
    int ok = cJSON_IsString(name);
    cJSON_Delete(root);
    if (!ok) {
        serve_error_set(e, 400, SERVE_ERR_REQUEST, "model", "missing_field", "'model' is required");
        return NULL;
    }
    char date[40], tag[300];
    time_rfc3339(m->modified, date);
    tag_name(m, tag);
    cJSON *o = cJSON_CreateObject(), *info, *caps;
    cJSON_AddStringToObject(o, "license", "");
    char *modelfile = plume_sprintf("# served by plume %s\nFROM %s\n", PLUME_VERSION, tag);
    cJSON_AddStringToObject(o, "modelfile", modelfile ? modelfile : "");
    free(modelfile);
    cJSON_AddStringToObject(o, "parameters", "temperature 1\ntop_k 64\ntop_p 0.95");
    cJSON_AddStringToObject(o, "template", "");
    cJSON_AddItemToObject(o, "details", json_details(m));
    if ((info = cJSON_AddObjectToObject(o, "model_info"))) {
        cJSON_AddStringToObject(info, "general.architecture", "gemma4");
        cJSON_AddStringToObject(info, "general.basename", m->model);
        cJSON_AddNumberToObject(info, "gemma4.context_length", m->n_ctx);
        cJSON_AddNumberToObject(info, "gemma4.block_count", m->n_layers);
        cJSON_AddNumberToObject(info, "gemma4.vocab_size", m->n_vocab);
    }
    if ((caps = cJSON_AddArrayToObject(o, "capabilities"))) {
        static const char *const can[] = {"completion", "tools", "thinking"};
        for (int i = 0; i < 3; i++) cJSON_AddItemToArray(caps, cJSON_CreateString(can[i]));
        if (m->vision) cJSON_AddItemToArray(caps, cJSON_CreateString("vision"));
        if (m->audio) cJSON_AddItemToArray(caps, cJSON_CreateString("audio"));
    }
    cJSON_AddStringToObject(o, "modified_at", date);
    return print_info(o, e);
}

/* POST /api/embed, /api/embeddings: refused. Gemma 4 E2B is a generative model, not an
 * embedding one: a pooled hidden state of it is no embedding a search index should trust. */
char *serve_ollama_embed(const serve_info *m, const char *body, size_t len, serve_error *e) {
    (void)m, (void)body, (void)len;
    serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "unsupported_endpoint",
                    "embeddings are not served: Gemma 4 E2B is a generative model, not an embedding model "
                    "(serve an embedding model for /api/embed)");
    return NULL;
}
