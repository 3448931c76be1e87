/* serve_request.c -- the internal request of `plume serve`, in no dialect's words: its
 * errors, the typed JSON readers every dialect shares, the chat prompt of a request and the
 * context budget.
 *
 * Everything here reads untrusted bytes and nothing here touches a socket or the model, so
 * tests and fuzzers drive it directly. A field of the wrong type or out of range is a 400
 * naming the field. */
#include "serve.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* ---- errors ------------------------------------------------------------------------------ */

/* Fill an error: status, kind, the field, a code and a formatted message. */
int serve_error_set(serve_error *e, int32_t status, serve_error_kind kind, const char *param, const char *code,
                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->kind = kind;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    return status;
}

/* A 400 invalid_value about one field. */
int serve_json_bad(serve_error *e, const char *param, const char *what) {
    return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "invalid_value", "'%s' must be %s", param, what);
}

/* A 400 about a field plume cannot honour. */
int serve_json_unsupported(serve_error *e, const char *param, const char *why) {
    return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_value", "'%s' %s", param, why);
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
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, name, "invalid_value",
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
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, name, "invalid_value",
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
        return SERVE_OOM(e);
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
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_json",
                                   "the request body is not valid JSON: a raw control character (0x%02x) inside a string "
                                   "at byte %zu (write it escaped, as \\u%04x)", c, i, c);
        if (c == '"') in_str = 0;
        else if (c == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && len - i >= 6 && !memcmp(body + i + 2, "0000", 4))
                return serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_value",
                                       "a string holds \\u0000 (at byte %zu): NUL characters are not supported", i);
            i++; /* the escaped character */
        }
    }
    if (nodes) *nodes = n;
    return 0;
}

/* Whether s is a tool_choice mode. */
int serve_tool_mode(const char *s) {
    return !strcmp(s, "auto") || !strcmp(s, "none") || !strcmp(s, "required");
}

/* ---- structured outputs ------------------------------------------------------------------ */

/* Compile a JSON Schema (NULL: any object) into r->grammar; a refusal is a 400 about param. */
int serve_format_schema(serve_request *r, const char *param, const cJSON *schema, serve_error *e) {
    char *text = schema ? serve_json_exact(schema) : NULL, *gbnf = NULL, *err = NULL;
    if (schema && !text) return SERVE_OOM(e);
    const char *src = text ? text : "{\"type\": \"object\"}";
    int rc = plume_json_schema_to_grammar(src, strlen(src), &gbnf, &err);
    free(text);
    if (rc == PLUME_ENOMEM) rc = SERVE_OOM(e);
    else if (rc) rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_value", "'%s': %s", param,
                                      err ? err : "the schema cannot be enforced");
    free(err);
    if (rc) return rc;
    free(r->grammar);
    r->grammar = gbnf;
    r->grammar_param = param;
    return 0;
}

/* After a dialect's parse: tool_choice "required" or a function's name holds the answer to a
 * call in Gemma 4's format, arguments valid against the function's parameters (it replaces a
 * response format or a grammar: the answer is the call); a format cannot go with ignore_eos (the value's
 * end is the answer's end). */
static int request_formats(serve_request *r, serve_error *e) {
    const char *tc = r->tool_choice;
    if (tc && strcmp(tc, "auto") && strcmp(tc, "none")) {
        if (!r->n_tools)
            return serve_json_bad(e, "tool_choice", "\"auto\" or \"none\" when no tools are given");
        char *gbnf = NULL, *err = NULL, *tools = serve_tools_json(r);
        int rc = tools ? plume_tool_call_grammar(tools, tc, &gbnf, &err) : PLUME_ENOMEM;
        free(tools);
        if (rc == PLUME_ENOMEM) rc = SERVE_OOM(e);
        else if (rc) /* the message names what is at fault: the choice, or a tool's parameters */
            rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, err && !strncmp(err, "tool_choice", 11) ? "tool_choice" : "tools",
                                 "unsupported_value", "%s", err ? err : "the tool call cannot be enforced");
        free(err);
        if (rc) return rc;
        free(r->grammar);
        r->grammar = gbnf;
        r->grammar_given = 0;
        r->grammar_param = "tools";
    }
    if (r->grammar && r->ignore_eos)
        return serve_json_unsupported(e, "ignore_eos", "cannot be combined with a response format or a forced tool call");
    return 0;
}

/* Thinking of a reasoning effort: on, off, or -1 for a word that is none. */
int32_t serve_effort_thinking(const char *effort) {
    static const char *const on[] = {"low", "medium", "high"}, *const off[] = {"none", "minimal"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(effort, on[i])) return 1;
    for (int i = 0; i < 2; i++)
        if (!strcmp(effort, off[i])) return 0;
    return -1;
}

/* A seed: an integer a JSON number holds exactly. */
int serve_json_seed(const cJSON *o, const char *name, serve_request *r, serve_error *e) {
    int64_t seed = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    int rc = serve_json_int(o, name, -SERVE_SEED_MAX, SERVE_SEED_MAX, &seed, e);
    if (rc) return rc;
    r->sp.seed = (uint64_t)seed;
    r->seed_given = 1;
    return 0;
}

/* Stop strings: a string or a list of strings, each non-empty and at most SERVE_MAX_STOP_LEN
 * bytes, SERVE_MAX_STOPS in all. */
int serve_json_stops(const cJSON *o, const char *name, int32_t list_only, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if ((list_only || !cJSON_IsString(v)) && !cJSON_IsArray(v))
        return serve_json_bad(e, name, list_only ? "a list of strings" : "a string or a list of strings");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > SERVE_MAX_STOPS - r->n_stops)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, name, "invalid_value", "'%s' holds at most %d strings",
                               name, SERVE_MAX_STOPS);
    int one = cJSON_IsString(v);
    for (const cJSON *s = one ? v : v->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s) || !*s->valuestring || strlen(s->valuestring) > SERVE_MAX_STOP_LEN)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, name, "invalid_value",
                                   "'%s' strings must be non-empty and at most %d bytes", name, SERVE_MAX_STOP_LEN);
        if (r->n_stops == SERVE_MAX_STOPS)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, name, "invalid_value",
                                   "at most %d stop strings", SERVE_MAX_STOPS);
        if (!(r->stops[r->n_stops] = strdup(s->valuestring))) return SERVE_OOM(e);
        r->n_stops++;
    }
    return 0;
}

/* A member of an object and its place in it. */
typedef struct {
    cJSON *item;
    size_t at;
} json_member;

/* qsort order of an object's members: by name, then by place. */
static int member_order(const void *a, const void *b) {
    const json_member *x = a, *y = b;
    int c = strcmp(x->item->string ? x->item->string : "", y->item->string ? y->item->string : "");
    return c ? c : x->at < y->at ? -1 : x->at > y->at;
}

/* Keep the last of the members of every object that share a name, as the JSON parsers of
 * Python and JavaScript do (cJSON's lookups find the first: a validating proxy before plume
 * would have read another request than plume). O(n log n) per object; objects inside arrays
 * too. 0, or -1 out of memory. */
static int json_keep_last(cJSON *o) {
    for (cJSON *c = o ? o->child : NULL; c; c = c->next)
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && json_keep_last(c)) return -1;
    if (!cJSON_IsObject(o) || !o->child || !o->child->next) return 0;
    size_t n = 0;
    for (cJSON *c = o->child; c; c = c->next) n++;
    json_member *m = malloc(n * sizeof *m);
    if (!m) return -1;
    size_t i = 0;
    for (cJSON *c = o->child; c; c = c->next, i++) m[i] = (json_member){c, i};
    qsort(m, n, sizeof *m, member_order);
    for (size_t k = 0; k + 1 < n; k++) /* all but the last of a run of one name go */
        if (!strcmp(m[k].item->string ? m[k].item->string : "", m[k + 1].item->string ? m[k + 1].item->string : ""))
            cJSON_Delete(cJSON_DetachItemViaPointer(o, m[k].item));
    free(m);
    return 0;
}

/* ---- numbers as the client wrote them (kept by plume_json_keep_numbers) -------------------- */

/* node, the siblings after it and all their descendants: each kept number becomes raw text. */
static void json_numbers_raw(cJSON *node) {
    for (; node; node = node->next) {
        if (cJSON_IsNumber(node) && node->valuestring) node->type = cJSON_Raw | (node->type & cJSON_StringIsConst);
        json_numbers_raw(node->child);
    }
}

/* node as JSON text, numbers as the client wrote them; malloc'd, NULL if out of memory. */
char *serve_json_exact(const cJSON *node) {
    cJSON *copy = cJSON_Duplicate(node, 1);
    if (!copy) return NULL;
    if (cJSON_IsNumber(copy) && copy->valuestring) copy->type = cJSON_Raw;
    json_numbers_raw(copy->child);
    char *s = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return s;
}

/* Parse the body as a JSON object (after checking its UTF-8); NULL and a 400 if it is not. */
cJSON *serve_json_object(const char *body, size_t len, serve_error *e) {
    if (!serve_utf8_valid(body, len)) {
        serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_utf8", "the request body is not valid UTF-8");
        return NULL;
    }
    if (serve_json_check(body, len, NULL, e)) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    size_t tail = root && end >= body && end <= body + len ? (size_t)(end - body) : len;
    while (root && tail < len && body[tail] && strchr(" \t\r\n", body[tail])) tail++;
    if (root && tail < len) { /* one JSON text per body: "{...} x" and "{...}{...}" are not requests */
        cJSON_Delete(root);
        serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_json",
                        "the request body is not valid JSON: bytes follow the object (at byte %zu)", tail);
        return NULL;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_json",
                        "the request body is not valid JSON (near byte %ld)", off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    int32_t oom = 0;
    plume_json_keep_numbers(root, body, body + len, &oom);
    if (oom || json_keep_last(root)) {
        cJSON_Delete(root);
        SERVE_OOM(e);
        return NULL;
    }
    return root;
}

/* ---- JSON writers ------------------------------------------------------------------------ */

/* The text of one token id, NUL-terminated and cut to cap - 1 bytes; its length. */
int64_t serve_token_text(const plume_tokenizer *tok, int32_t id, char *text, size_t cap) {
    int64_t k = plume_detokenize(tok, &id, 1, 0, text, cap);
    if (k < 0) k = 0;
    if (k >= (int64_t)cap) k = (int64_t)cap - 1;
    text[k] = 0;
    return k;
}

/* {"token", "logprob", "bytes"} of one id. */
cJSON *serve_json_token_logprob(const plume_tokenizer *tok, int32_t id, float logprob) {
    char text[512];
    int64_t k = serve_token_text(tok, id, text, sizeof text);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", text);
    cJSON_AddNumberToObject(o, "logprob", isfinite(logprob) ? logprob : -9999.0);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int64_t i = 0; b && i < k; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)text[i]));
    return o;
}

/* A generated token's entry with its alternatives. */
cJSON *serve_json_logprob(const plume_tokenizer *tok, const serve_logprob *lp) {
    cJSON *o = serve_json_token_logprob(tok, lp->id, lp->logprob);
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int32_t i = 0; top && i < lp->n_top; i++)
        cJSON_AddItemToArray(top, serve_json_token_logprob(tok, lp->top_ids[i], lp->top_lps[i]));
    return o;
}

/* ---- the request -------------------------------------------------------------------------- */

/* An empty request of a kind: the sampler's defaults, no seed yet, one choice, no
 * max_tokens, no prompt log-probabilities. */
void serve_request_init(serve_request *r, serve_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = plume_sampler_default_params();
    r->max_tokens = -1;
    r->n = 1;
    r->prompt_logprobs = -1;
    r->prompt_name = kind == SERVE_COMPLETION ? "prompt" : "messages";
    r->length_name = "max_tokens";
}

/* Append an empty message with a copy of role. */
serve_message *serve_request_add_message(serve_request *r, const char *role, serve_error *e) {
    if (r->n_msgs == SERVE_MAX_MESSAGES) {
        serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "invalid_value", "at most %d messages",
                        SERVE_MAX_MESSAGES);
        return NULL;
    }
    if (plume_grow(&r->msgs, &r->cap_msgs, (size_t)r->n_msgs + 1, sizeof *r->msgs)) {
        SERVE_OOM(e);
        return NULL;
    }
    serve_message *m = &r->msgs[r->n_msgs];
    memset(m, 0, sizeof *m);
    if (!(m->role = strdup(role))) {
        SERVE_OOM(e);
        return NULL;
    }
    r->n_msgs++;
    return m;
}

/* Append a tool call (strings copied). */
int serve_message_add_call(serve_message *m, const char *id, const char *name, const char *arguments, serve_error *e) {
    serve_tool_call *nc = realloc(m->calls, (size_t)(m->n_calls + 1) * sizeof *nc);
    if (!nc) return SERVE_OOM(e);
    m->calls = nc;
    serve_tool_call *t = &m->calls[m->n_calls++];
    memset(t, 0, sizeof *t);
    if ((id && !(t->id = strdup(id))) || !(t->name = strdup(name ? name : "")) ||
        (arguments && !(t->arguments = strdup(arguments))))
        return SERVE_OOM(e);
    return 0;
}

/* Append a part of a kind (text: a copy of text; media: "" where its placeholder goes); a
 * content string already there becomes the first part. part_types is kept once a media part
 * has come. */
static int add_part(serve_message *m, int32_t kind, const char *text, serve_error *e) {
    char **np = realloc(m->parts, (size_t)(m->n_parts + 2) * sizeof *np);
    if (!np) return SERVE_OOM(e);
    m->parts = np;
    if (kind != PLUME_CHAT_PART_TEXT || m->part_types) {
        int32_t *nt = realloc(m->part_types, (size_t)(m->n_parts + 2) * sizeof *nt);
        if (!nt) return SERVE_OOM(e);
        if (!m->part_types)
            for (int32_t i = 0; i < m->n_parts + 2; i++) nt[i] = PLUME_CHAT_PART_TEXT;
        m->part_types = nt;
    }
    if (m->content) {
        if (m->part_types) m->part_types[m->n_parts] = PLUME_CHAT_PART_TEXT;
        m->parts[m->n_parts++] = m->content;
        m->content = NULL;
    }
    if (!(m->parts[m->n_parts] = strdup(text))) return SERVE_OOM(e);
    if (m->part_types) m->part_types[m->n_parts] = kind;
    m->n_parts++;
    return 0;
}

/* Append a text part. */
int serve_message_add_part(serve_message *m, const char *text, serve_error *e) {
    return add_part(m, PLUME_CHAT_PART_TEXT, text, e);
}

/* Append a media part: the template writes its placeholder there. */
int serve_message_add_media_part(serve_message *m, int32_t kind, serve_error *e) { return add_part(m, kind, "", e); }

void serve_media_release(serve_media *md) {
    if (!md || !md->held) return;
    if (md->pool) atomic_fetch_sub(md->pool, md->held);
    md->held = 0;
}

/* Free a request's media (serve_media.c fills them). */
void serve_media_free(serve_media *md) {
    if (!md) return;
    serve_media_release(md);
    for (int32_t i = 0; i < md->n; i++) {
        serve_medium *it = &md->items[i];
        free(it->bytes);
        free(it->url);
        plume_image_free(it->img);
        plume_audio_free(it->aud);
        plume_embd_free(it->emb);
    }
    free(md->items);
    free(md->keys);
    free(md->list);
    free(md->language);
    free(md);
}

/* ---- tools -------------------------------------------------------------------------------- */

/* Append a tool: its strings copied, its parameters printed as JSON text. */
/* Whether a tool's parameters schema may describe an object (a call's arguments are one): a
 * "type" that is or lists "object", an "enum" holding an object, a "const" that is one; a
 * schema that says none of these leaves the type open. */
static int params_may_be_object(const cJSON *p) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"), *en = cJSON_GetObjectItemCaseSensitive(p, "enum"),
                *co = cJSON_GetObjectItemCaseSensitive(p, "const"), *x;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "object")) return 0;
    if (cJSON_IsArray(type)) {
        int obj = 0;
        cJSON_ArrayForEach(x, type) obj |= cJSON_IsString(x) && !strcmp(x->valuestring, "object");
        if (!obj) return 0;
    }
    if (cJSON_IsArray(en)) {
        int obj = 0;
        cJSON_ArrayForEach(x, en) obj |= cJSON_IsObject(x);
        if (!obj) return 0;
    }
    return !co || cJSON_IsObject(co);
}

/* How deep a JSON value nests (a scalar: 0), counted up to stop + 1. */
static int json_depth(const cJSON *v, int stop) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return 0;
    int d = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        int k = d <= stop ? json_depth(x, stop - 1) : 0;
        if (k > d) d = k;
        if (d > stop) break;
    }
    return d + 1;
}

int serve_request_add_tool(serve_request *r, const char *name, const char *description, const cJSON *parameters,
                           serve_error *e) {
    if (parameters && json_depth(parameters, SERVE_SCHEMA_MAX_JSON_DEPTH) > SERVE_SCHEMA_MAX_JSON_DEPTH)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "tools", "invalid_value",
                               "'tools': tool '%.100s': its parameters nest deeper than %d JSON levels (a schema of "
                               "more than %d levels)", name, SERVE_SCHEMA_MAX_JSON_DEPTH, SERVE_SCHEMA_MAX_JSON_DEPTH / 2);
    if (parameters && cJSON_IsObject(parameters) && !params_may_be_object(parameters))
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "tools", "invalid_value",
                               "'tools': tool '%.100s': its parameters must describe an object (a call's arguments are a JSON "
                               "object): a \"type\", \"enum\" or \"const\" allows none", name);
    serve_tool *t = realloc(r->tools, ((size_t)r->n_tools + 1) * sizeof *t);
    if (!t) return SERVE_OOM(e);
    r->tools = t;
    t += r->n_tools++;
    int has_params = parameters && !cJSON_IsNull(parameters);
    *t = (serve_tool){strdup(name), description ? strdup(description) : NULL,
                      has_params ? serve_json_exact(parameters) : NULL, NULL};
    return t->name && (!description || t->description) && (!has_params || t->parameters) ? 0 : SERVE_OOM(e);
}

/* A function declaration {name, description, parameters} (OpenAI's tools[i].function, a
 * Responses function tool) appended to r's tools; a 400 'tools' must be <what> when it is not
 * an object with a string name (and a string description, if any). */
int serve_function_tool(serve_request *r, const cJSON *fn, const char *what, serve_error *e) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
    if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc)))
        return serve_json_bad(e, "tools", what);
    return serve_request_add_tool(r, name->valuestring, cJSON_IsString(desc) ? desc->valuestring : NULL,
                                  cJSON_GetObjectItemCaseSensitive(fn, "parameters"), e);
}

/* The tools in the shape libplume takes them (plume_chat_options.tools_json,
 * plume_tool_call_grammar): [{"type": "function", "function": {"name", "description",
 * "parameters"}}], the parameters' text as it is. JSON text, malloc'd; NULL if out of memory. */
char *serve_tools_json(const serve_request *r) {
    cJSON *list = cJSON_CreateArray();
    int ok = list != NULL;
    for (int32_t i = 0; ok && i < r->n_tools; i++) {
        const serve_tool *t = &r->tools[i];
        cJSON *tool = cJSON_CreateObject(), *f;
        ok = tool && cJSON_AddItemToArray(list, tool) && cJSON_AddStringToObject(tool, "type", "function") &&
             (f = cJSON_AddObjectToObject(tool, "function")) && cJSON_AddStringToObject(f, "name", t->name) &&
             (!t->description || cJSON_AddStringToObject(f, "description", t->description)) &&
             (!t->parameters || cJSON_AddRawToObject(f, "parameters", t->parameters));
    }
    char *s = ok ? cJSON_PrintUnformatted(list) : NULL;
    cJSON_Delete(list);
    return s;
}

/* ---- seeds ------------------------------------------------------------------------------- */

static pthread_mutex_t seed_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t seed_state; /* splitmix64, started from the clock and the process at first use */
static int seed_started;

/* A fresh seed in [0, SERVE_SEED_MAX). */
int64_t serve_seed_draw(void) {
    pthread_mutex_lock(&seed_mu);
    if (!seed_started) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed_state = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
        seed_started = 1;
    }
    uint64_t x = plume_rng_next(&seed_state);
    pthread_mutex_unlock(&seed_mu);
    return (int64_t)(x % (uint64_t)SERVE_SEED_MAX);
}

/* Parse a body in a dialect; r is freed again on error. */
int serve_request_parse(serve_request *r, const serve_dialect *d, const char *body, size_t len, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    int rc = d->parse(r, body, len, e);
    if (!rc) rc = request_formats(r, e);
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
        free(m->part_types);
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
    free(r->prompt_ids);
    free(r->bias_ids);
    free(r->bias_vals);
    for (int32_t i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].description);
        free(r->tools[i].parameters);
        free(r->tools[i].space);
    }
    free(r->tools);
    free(r->tool_choice);
    free(r->warning);
    serve_media_free(r->media);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}

/* Refuse a prompt that fills the context (named as the dialect names it). max_tokens beyond
 * the room the prompt leaves is no error, as with llama-server and Ollama: the answer runs
 * until the context is full and ends with "length" (agents ask for more than any context:
 * Claude Code 32000 to 128000). */
static int check_budget(int32_t n_prompt, int32_t n_ctx, const char *prompt_name, serve_error *e) {
    if (n_prompt >= n_ctx)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, prompt_name, "context_length_exceeded",
                               "the prompt has %d tokens, but the context holds %d (and at least one token must "
                               "be left to answer); shorten it or start the server with a larger --context",
                               n_prompt, n_ctx);
    return 0;
}

/* Whether a request's prompt leaves room to answer (the prompt named as its dialect does). */
int serve_check_request_budget(const serve_request *r, int32_t n_prompt, int32_t n_ctx, serve_error *e) {
    return check_budget(n_prompt, n_ctx, r->prompt_name ? r->prompt_name : "messages", e);
}

/* ---- the prompt ------------------------------------------------------------------------------- */

/* A continued last message: the template closed it with "<turn|>\n"; cut that, so the model
 * goes on writing it (vLLM's continue_final_message, Anthropic's and Ollama's prefill). 0 or
 * 400 when the last message is not an assistant's text. */
static int continue_final(const serve_request *r, char *out, serve_error *e) {
    static const char close[] = "<turn|>\n";
    size_t n = strlen(out), k = sizeof close - 1;
    const serve_message *last = &r->msgs[r->n_msgs - 1];
    if (strcmp(last->role, "assistant") || last->n_calls || n < k || memcmp(out + n - k, close, k))
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "invalid_value",
                               "only a last assistant message of text can be continued");
    out[n - k] = 0;
    return 0;
}

/* The prompt text of a chat request: the chat template with tools, tool calls and replies,
 * content parts and reasoning (plume_chat_render_full). tool_choice "none" renders no tools;
 * a continued last message stays open; *in_thought says whether the prompt opened the thought
 * channel. 0 or an error in e. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e) {
    plume_chat_message_full *msgs = calloc((size_t)r->n_msgs, sizeof *msgs);
    plume_chat_tool_call **calls = calloc((size_t)r->n_msgs, sizeof *calls);
    int rc = msgs && calls ? 0 : SERVE_OOM(e);
    for (int32_t i = 0; !rc && i < r->n_msgs; i++) {
        const serve_message *m = &r->msgs[i];
        msgs[i] = (plume_chat_message_full){.role = m->role, .content = m->content, .parts = (const char *const *)m->parts,
                                          .n_parts = m->n_parts, .reasoning_content = m->reasoning_content,
                                          .tool_call_id = m->tool_call_id, .name = m->name, .part_types = m->part_types};
        if (!m->n_calls) continue;
        if (!(calls[i] = calloc((size_t)m->n_calls, sizeof **calls))) {
            rc = SERVE_OOM(e);
            break;
        }
        for (int32_t k = 0; k < m->n_calls; k++)
            calls[i][k] = (plume_chat_tool_call){m->calls[k].id, m->calls[k].name, m->calls[k].arguments};
        msgs[i].tool_calls = calls[i];
        msgs[i].n_tool_calls = m->n_calls;
    }
    char *err = NULL, *tools = NULL;
    if (!rc && r->n_tools && !(r->tool_choice && !strcmp(r->tool_choice, "none")) && !(tools = serve_tools_json(r)))
        rc = SERVE_OOM(e);
    if (!rc) {
        plume_chat_options opt = {.add_generation_prompt = !r->continue_final, .enable_thinking = r->enable_thinking,
                                  .tools_json = tools};
        int lrc = plume_chat_render_full(msgs, r->n_msgs, &opt, out, &err);
        if (lrc)
            rc = serve_error_set(e, lrc == PLUME_ENOMEM ? 500 : 400,
                                 lrc == PLUME_ENOMEM ? SERVE_ERR_SERVER : SERVE_ERR_REQUEST,
                                 err && strstr(err, "tools_json") ? "tools" : "messages",
                                 lrc != PLUME_ENOMEM && err && strstr(err, "tools_json") ? "invalid_value" : NULL, "%s",
                                 err ? err : "cannot render the messages");
    }
    free(err);
    free(tools);
    if (!rc && r->continue_final && (rc = continue_final(r, *out, e))) {
        free(*out);
        *out = NULL;
    }
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
