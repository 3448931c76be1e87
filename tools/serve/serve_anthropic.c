/* serve_anthropic.c -- Anthropic's Messages API (docs/SERVER.md): /v1/messages request bodies
 * -> the internal request; answer events -> server-sent events (message_start,
 * content_block_start/_delta/_stop per thinking, text and tool_use block, message_delta with
 * the stop reason and usage, message_stop) or the whole message; errors -> {"type": "error",
 * "error": {"type", "message"}}. /v1/messages/count_tokens counts a request's prompt.
 *
 * A user message's tool_result blocks become tool messages (answering the tool_use of the
 * same id), its text blocks a user message; an assistant message's tool_use blocks its tool
 * calls, its thinking block its reasoning. A last assistant message is continued (Anthropic's
 * prefill). Unknown fields are ignored; blocks and tools plume cannot honour (images,
 * documents, server tools) are a 400 naming them. */
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"


/* ---- requests ----------------------------------------------------------------------------- */

/* The text of a tool_result's content: a string, or the text blocks of a list (malloc'd). */
static int result_text(const cJSON *c, const char *param, char **out, serve_error *e) {
    if (!c || cJSON_IsNull(c)) return (*out = strdup("")) ? 0 : SERVE_OOM(e);
    if (cJSON_IsString(c)) return (*out = strdup(c->valuestring)) ? 0 : SERVE_OOM(e);
    if (!cJSON_IsArray(c)) return serve_json_bad(e, param, "a string or a list of text blocks");
    plume_buf b = {0};
    const cJSON *blk;
    cJSON_ArrayForEach(blk, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            plume_buf_free(&b);
            return serve_json_unsupported(e, param, "holds a block other than text (only text results are supported)");
        }
        if (b.len) plume_buf_puts(&b, "\n");
        plume_buf_puts(&b, text->valuestring);
    }
    return (*out = plume_buf_take(&b)) ? 0 : SERVE_OOM(e);
}

/* A user message: tool_result blocks become tool messages, then the text blocks one user
 * message (a string content is that message). */
static int user_message(const cJSON *content, int32_t i, serve_request *r, serve_error *e) {
    char param[80];
    serve_message *user = NULL;
    if (cJSON_IsString(content)) {
        if (!(user = serve_request_add_message(r, "user", e))) return e->status;
        return (user->content = strdup(content->valuestring)) ? 0 : SERVE_OOM(e);
    }
    const cJSON *blk;
    int32_t k = 0, n_text = 0;
    cJSON_ArrayForEach(blk, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k++);
        if (!cJSON_IsString(type)) return serve_json_bad(e, param, "a block with a 'type'");
        int rc = 0;
        if (!strcmp(type->valuestring, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "tool_use_id");
            if (!cJSON_IsString(id)) return serve_json_bad(e, param, "a tool_result with a 'tool_use_id'");
            serve_message *t = serve_request_add_message(r, "tool", e);
            if (!t) return e->status;
            if (!(t->tool_call_id = strdup(id->valuestring))) return SERVE_OOM(e);
            rc = result_text(cJSON_GetObjectItemCaseSensitive(blk, "content"), param, &t->content, e);
            if (!rc && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "is_error"))) {
                char *err = plume_sprintf("Error: %s", t->content);
                if (!err) return SERVE_OOM(e);
                free(t->content);
                t->content = err;
            }
        } else if (!strcmp(type->valuestring, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
            if (!cJSON_IsString(text)) return serve_json_bad(e, param, "a text block with a 'text' string");
            n_text++;
        } else if (!strcmp(type->valuestring, "image")) { /* serve_media.c reads it below */
            n_text++;
        } else if (!strcmp(type->valuestring, "video")) {
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                                   "content blocks of type 'video' are not part of the Messages API (text, image and "
                                   "tool_result); send a video to /v1/chat/completions as a video_url part");
        } else {
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                                   "content blocks of type '%.64s' are not supported in a user message (text, image "
                                   "and tool_result only)", type->valuestring);
        }
        if (rc) return rc;
    }
    if (!n_text) return 0;
    if (!(user = serve_request_add_message(r, "user", e))) return e->status;
    k = 0;
    cJSON_ArrayForEach(blk, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k++);
        int rc = !strcmp(type->valuestring, "image") ? serve_media_image_block(r, user, blk, param, e)
                 : !strcmp(type->valuestring, "text")
                     ? serve_message_add_part(user, cJSON_GetObjectItemCaseSensitive(blk, "text")->valuestring, e)
                     : 0;
        if (rc) return rc;
    }
    return 0;
}

/* An assistant message: text blocks, thinking (its reasoning), tool_use blocks (its calls). */
static int assistant_message(const cJSON *content, int32_t i, serve_request *r, serve_error *e) {
    char param[80];
    serve_message *m = serve_request_add_message(r, "assistant", e);
    if (!m) return e->status;
    if (cJSON_IsString(content)) return (m->content = strdup(content->valuestring)) ? 0 : SERVE_OOM(e);
    const cJSON *blk;
    int32_t k = 0;
    cJSON_ArrayForEach(blk, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k++);
        if (!cJSON_IsString(type)) return serve_json_bad(e, param, "a block with a 'type'");
        const char *t = type->valuestring;
        int rc = 0;
        if (!strcmp(t, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
            if (!cJSON_IsString(text)) return serve_json_bad(e, param, "a text block with a 'text' string");
            rc = serve_message_add_part(m, text->valuestring, e);
        } else if (!strcmp(t, "thinking")) {
            rc = serve_json_str(blk, "thinking", &m->reasoning_content, e);
        } else if (!strcmp(t, "redacted_thinking")) {
            continue; /* opaque to plume */
        } else if (!strcmp(t, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(blk, "id"), *name = cJSON_GetObjectItemCaseSensitive(blk, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
            if (!cJSON_IsString(name) || (input && !cJSON_IsObject(input)))
                return serve_json_bad(e, param, "a tool_use block with a 'name' and an 'input' object");
            char *args = input ? cJSON_PrintUnformatted(input) : strdup("{}");
            if (!args) return SERVE_OOM(e);
            rc = serve_message_add_call(m, cJSON_IsString(id) ? id->valuestring : NULL, name->valuestring, args, e);
            free(args);
        } else {
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                                   "content blocks of type '%.64s' are not supported in an assistant message",
                                   t);
        }
        if (rc) return rc;
    }
    if (!m->content && !m->parts && !m->n_calls && !(m->content = strdup(""))) return SERVE_OOM(e);
    return 0;
}

/* A system message of v (a string or a list of text blocks) at the end of r's messages: the
 * top-level "system", or a message of role system among the turns (param names it). */
static int system_message(const cJSON *v, const char *param, serve_request *r, serve_error *e) {
    const cJSON *blk;
    if (!cJSON_IsString(v) && !cJSON_IsArray(v)) return serve_json_bad(e, param, "a string or a list of text blocks");
    serve_message *m = serve_request_add_message(r, "system", e);
    if (!m) return e->status;
    if (cJSON_IsString(v)) return (m->content = strdup(v->valuestring)) ? 0 : SERVE_OOM(e);
    cJSON_ArrayForEach(blk, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type"), *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return serve_json_bad(e, param, "a string or a list of text blocks");
        int rc = serve_message_add_part(m, text->valuestring, e);
        if (rc) return rc;
    }
    if (!m->parts && !(m->content = strdup(""))) return SERVE_OOM(e);
    return 0;
}

/* "system": a string or a list of text blocks. */
static int parse_system(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (!v || cJSON_IsNull(v)) return 0;
    return system_message(v, "system", r, e);
}

/* "messages": user and assistant turns, and system messages anywhere among them (Anthropic
 * takes them; Claude Code sends one after the user turn): each stays where it stands, as the
 * template renders a system turn there. A last assistant turn of text is continued. */
static int parse_messages(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    if (!v) return serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "missing_field", "'messages' is required");
    if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) return serve_json_bad(e, "messages", "a non-empty list of messages");
    int32_t i = 0;
    cJSON_ArrayForEach(m, v) {
        char param[64];
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "system")))
            return serve_json_bad(e, param, "an object with a 'role' of user, assistant or system");
        snprintf(param, sizeof param, "messages[%d].content", i);
        if (!cJSON_IsString(content) && !cJSON_IsArray(content)) return serve_json_bad(e, param, "a string or a list of blocks");
        int rc = !strcmp(role->valuestring, "user")        ? user_message(content, i, r, e)
                 : !strcmp(role->valuestring, "assistant") ? assistant_message(content, i, r, e)
                                                           : system_message(content, param, r, e);
        if (rc) return rc;
        i++;
    }
    const serve_message *last = r->n_msgs ? &r->msgs[r->n_msgs - 1] : NULL;
    r->continue_final = last && !strcmp(last->role, "assistant") && !last->n_calls;
    int32_t turns = 0; /* messages other than system ones (Claude Code's last message may be one) */
    for (int32_t k = 0; k < r->n_msgs; k++) turns += strcmp(r->msgs[k].role, "system") != 0;
    if (!turns) return serve_json_bad(e, "messages", "a list holding at least one user or assistant message with content");
    return 0;
}

/* "tools": custom tools {name, description, input_schema}; server tools are refused. */
static int parse_tools(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return serve_json_bad(e, "tools", "a list of tools");
    cJSON_ArrayForEach(t, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "custom"))
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "tools", "unsupported_value",
                                   "tools of type '%.64s' are not supported (custom tools only)", type->valuestring);
        if (!cJSON_IsString(name) || (schema && !cJSON_IsObject(schema)))
            return serve_json_bad(e, "tools", "a list of {\"name\", \"description\", \"input_schema\"}");
        /* defer_loading: the tool stays out of the prompt until a tool search brings its
         * definition in (Claude Code's ToolSearch returns it in a tool result) */
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "defer_loading"))) continue;
        int rc = serve_request_add_tool(r, name->valuestring, cJSON_IsString(desc) ? desc->valuestring : NULL, schema, e);
        if (rc) return rc;
    }
    return 0;
}

/* "tool_choice": {"type": "auto" | "any" | "tool" (with "name") | "none",
 * "disable_parallel_tool_use": at most one call}. */
static int parse_tool_choice(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type"), *name = cJSON_GetObjectItemCaseSensitive(v, "name");
    const char *choice = "auto";
    if (v && !cJSON_IsNull(v) && cJSON_IsObject(v)) {
        int rc = serve_json_bool(v, "disable_parallel_tool_use", &r->one_call, e);
        if (rc) return rc;
    }
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(type)) return serve_json_bad(e, "tool_choice", "an object with a 'type'");
        if (!strcmp(type->valuestring, "any")) choice = "required";
        else if (!strcmp(type->valuestring, "none")) choice = "none";
        else if (!strcmp(type->valuestring, "tool") && cJSON_IsString(name)) choice = name->valuestring;
        else if (strcmp(type->valuestring, "auto"))
            return serve_json_bad(e, "tool_choice", "{\"type\": \"auto\" | \"any\" | \"none\" | \"tool\", \"name\"}");
    }
    return (r->tool_choice = strdup(choice)) ? 0 : SERVE_OOM(e);
}

/* "thinking": {"type": "enabled", "budget_tokens"}, {"type": "adaptive"} (on; output_config's
 * effort may turn it off) or {"type": "disabled"}; "display": "summarized" (the thought as
 * written: plume's summary is the whole thought) or "omitted" (the thinking block comes back
 * empty). The budget is checked as Anthropic checks it; as there, it is a target, not a cut:
 * max_tokens bounds the whole answer. */
static int parse_thinking(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type"), *display = cJSON_GetObjectItemCaseSensitive(v, "display");
    if (!cJSON_IsString(type)) return serve_json_bad(e, "thinking", "{\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}");
    if (display && !cJSON_IsNull(display)) {
        if (!cJSON_IsString(display) || (strcmp(display->valuestring, "summarized") && strcmp(display->valuestring, "omitted")))
            return serve_json_bad(e, "thinking.display", "\"summarized\" or \"omitted\"");
        r->omit_thought = !strcmp(display->valuestring, "omitted");
    }
    if (!strcmp(type->valuestring, "disabled")) {
        r->enable_thinking = 0;
        return 0;
    }
    if (strcmp(type->valuestring, "enabled") && strcmp(type->valuestring, "adaptive"))
        return serve_json_bad(e, "thinking", "{\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}");
    int64_t budget = 1024;
    int rc = serve_json_int(v, "budget_tokens", 1024, 1 << 24, &budget, e);
    if (rc) return rc;
    if (r->max_tokens > 0 && budget >= r->max_tokens && cJSON_GetObjectItemCaseSensitive(v, "budget_tokens"))
        return serve_json_bad(e, "budget_tokens", "less than max_tokens");
    r->enable_thinking = 1;
    return 0;
}

/* "output_config": {"format": {"type": "json_schema", "schema"}} (the answer held to the
 * schema, as response_format is: docs/STRUCTURED.md), {"effort": "low" | "medium" | "high" |
 * "max"} (Gemma's one effort knob is its thought: with adaptive thinking, low turns it off and
 * the others leave it on; with thinking enabled or disabled that setting decides). Any other
 * field is a 400 naming it. */
static int parse_output_config(const cJSON *root, serve_request *r, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "output_config"), *f;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return serve_json_bad(e, "output_config", "an object");
    cJSON_ArrayForEach(f, v) {
        char param[96];
        snprintf(param, sizeof param, "output_config.%.64s", f->string);
        if (!strcmp(f->string, "effort")) {
            static const char *const levels[] = {"low", "medium", "high", "max"};
            int32_t k = -1;
            for (int32_t i = 0; i < 4 && cJSON_IsString(f); i++)
                if (!strcmp(f->valuestring, levels[i])) k = i;
            if (cJSON_IsNull(f)) continue;
            if (k < 0) return serve_json_bad(e, param, "low, medium, high or max");
            const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
            if (cJSON_IsString(type) && !strcmp(type->valuestring, "adaptive")) r->enable_thinking = k > 0;
        } else if (!strcmp(f->string, "format")) {
            if (cJSON_IsNull(f)) continue;
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type"), *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") || !cJSON_IsObject(schema))
                return serve_json_bad(e, param, "{\"type\": \"json_schema\", \"schema\": {...}}");
            int rc = serve_format_schema(r, param, schema, e);
            if (rc) return rc;
        } else {
            return serve_json_unsupported(e, param, "is not supported (output_config takes format and effort)");
        }
    }
    return 0;
}

/* "context_management": {"edits": [...]}: Anthropic's server-side context editing. Clearing
 * old thoughts (clear_thinking_*) is what the template does anyway (a thought is shown only
 * after the last user message); any other edit (clearing tool results, ...) would change what
 * the model reads and is a 400 naming it. */
static int parse_context_management(const cJSON *root, serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "context_management"), *edits, *ed;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return serve_json_bad(e, "context_management", "an object");
    edits = cJSON_GetObjectItemCaseSensitive(v, "edits");
    if (edits && !cJSON_IsArray(edits)) return serve_json_bad(e, "context_management.edits", "a list of edits");
    int32_t i = 0;
    cJSON_ArrayForEach(ed, edits) {
        char param[64];
        snprintf(param, sizeof param, "context_management.edits[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(ed, "type");
        if (!cJSON_IsString(type)) return serve_json_bad(e, param, "an edit with a 'type'");
        if (strncmp(type->valuestring, "clear_thinking_", 15))
            return serve_json_unsupported(e, param, "of this type is not supported (clear_thinking_* only: plume does not edit the context)");
    }
    return 0;
}

/* Fields refused: parts of the API that need Anthropic's servers, given at all (an empty
 * mcp_servers list as a non-empty one: the field is not one plume reads). */
static int refuse_hosted(const cJSON *root, serve_error *e) {
    static const char *const hosted[] = {"container", "mcp_servers"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, hosted[i]);
        if (v && !cJSON_IsNull(v))
            return serve_json_unsupported(e, hosted[i], "is not supported (it needs Anthropic's servers)");
    }
    return 0;
}

/* Parse a /v1/messages body (count: a count_tokens body, without max_tokens). */
static int parse_body(serve_request *r, const char *body, size_t len, int count, serve_error *e) {
    serve_request_init(r, SERVE_CHAT);
    cJSON *root = serve_json_object(body, len, e);
    if (!root) return e->status;
    int64_t max_tokens = -1, k = r->sp.top_k;
    int rc = 0;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    if (!count && (!mt || cJSON_IsNull(mt)))
        rc = serve_error_set(e, 400, SERVE_ERR_REQUEST, "max_tokens", "missing_field", "'max_tokens' is required");
    if (!rc) rc = serve_json_int(root, "max_tokens", 1, 1 << 24, &max_tokens, e);
    r->max_tokens = (int32_t)max_tokens;
    r->include_usage = 1;
    if (!rc && !(rc = serve_json_str(root, "model", &r->model, e)) && !(rc = serve_json_bool(root, "stream", &r->stream, e)) &&
        !(rc = serve_json_num(root, "temperature", 0, 1, &r->sp.temperature, e)) &&
        !(rc = serve_json_num(root, "top_p", 0, 1, &r->sp.top_p, e)) &&
        !(rc = serve_json_int(root, "top_k", 0, 1 << 24, &k, e)) && !(rc = serve_json_stops(root, "stop_sequences", 1, r, e)) &&
        !(rc = parse_system(root, r, e)) && !(rc = parse_messages(root, r, e)) && !(rc = parse_tools(root, r, e)) &&
        !(rc = parse_tool_choice(root, r, e)) && !(rc = parse_thinking(root, r, e)) &&
        !(rc = parse_output_config(root, r, e)) && !(rc = parse_context_management(root, e)))
        rc = refuse_hosted(root, e);
    r->sp.top_k = (int32_t)k;
    if (r->sp.top_p <= 0) r->sp.temperature = 0;
    cJSON_Delete(root);
    return rc;
}

/* Parse a /v1/messages body. */
static int parse_messages_body(serve_request *r, const char *body, size_t len, serve_error *e) {
    return parse_body(r, body, len, 0, e);
}

/* Parse a /v1/messages/count_tokens body. */
static int parse_count_body(serve_request *r, const char *body, size_t len, serve_error *e) {
    return parse_body(r, body, len, 1, e);
}

/* ---- replies ------------------------------------------------------------------------------- */

/* Which content block a stream has open. */
enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT };

/* What a stream keeps: the open block, the blocks so far, how the answer ended. */
typedef struct {
    int32_t open;     /* BLOCK_* */
    int32_t n_blocks; /* blocks started (the next one's index) */
    serve_finish finish;
    const char *stop;
} anthropic_state;

/* Anthropic's stop_reason of a finish reason (and the stop string that ended it, if any). */
static const char *stop_reason(serve_finish finish, const char *stop) {
    if (finish == SERVE_FINISH_LENGTH) return "max_tokens";
    if (finish == SERVE_FINISH_TOOL_CALLS) return "tool_use";
    return stop ? "stop_sequence" : "end_turn";
}

/* The id of a tool_use block: the answer's id and the call's index. */
static void tool_use_id(const serve_job_head *j, int32_t index, char out[96]) {
    const char *dash = strchr(j->id, '-');
    snprintf(out, 96, "toolu_%s_%d", dash ? dash + 1 : j->id, index);
}

/* A tool_use block: {"type", "id", "name", "input": {object}} (input {} while streamed). */
static cJSON *json_tool_use(const serve_job_head *j, const serve_tool_call *t, int32_t index, int with_input) {
    char id[96];
    tool_use_id(j, index, id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", t->name ? t->name : "");
    cJSON *input = with_input && t->arguments ? cJSON_Parse(t->arguments) : NULL;
    if (!cJSON_IsObject(input)) {
        cJSON_Delete(input);
        input = cJSON_CreateObject();
    }
    cJSON_AddItemToObject(b, "input", input);
    return b;
}

/* The usage: input tokens computed, output tokens, and the prompt tokens reused (read from
 * the cache, as Anthropic counts them apart). */
static cJSON *json_usage(const serve_usage *u, int32_t prompt) {
    cJSON *o = cJSON_CreateObject();
    int32_t cached = u ? u->cached : 0;
    cJSON_AddNumberToObject(o, "input_tokens", (u ? u->prompt : prompt) - cached);
    cJSON_AddNumberToObject(o, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(o, "cache_read_input_tokens", cached);
    cJSON_AddNumberToObject(o, "output_tokens", u ? u->completion : 0);
    return o;
}

/* {"id", "type": "message", "role", "model", "content": [], ...} of message_start and the
 * whole reply. */
static cJSON *message_head(const serve_job_head *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", j->req.model ? j->req.model : j->model ? j->model : "");
    return o;
}

/* Append "event: <name>\ndata: <json>\n\n" (o freed). */
static void sse(plume_buf *out, const char *name, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) return;
    plume_buf_puts(out, "event: ");
    plume_buf_puts(out, name);
    plume_buf_puts(out, "\ndata: ");
    plume_buf_puts(out, s);
    plume_buf_puts(out, "\n\n");
    free(s);
}

/* {"type": <type>, "index": i} of the block events. */
static cJSON *block_event(const char *type, int32_t index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "index", index);
    return o;
}

/* Close the open block (content_block_stop). */
static void block_close(plume_buf *out, anthropic_state *st) {
    if (st->open == BLOCK_NONE) return;
    sse(out, "content_block_stop", block_event("content_block_stop", st->n_blocks - 1));
    st->open = BLOCK_NONE;
}

/* Make a block of kind (thinking or text) the open one: content_block_start. */
static void block_open(plume_buf *out, anthropic_state *st, int32_t kind) {
    if (st->open == kind) return;
    block_close(out, st);
    cJSON *o = block_event("content_block_start", st->n_blocks++), *b = cJSON_AddObjectToObject(o, "content_block");
    cJSON_AddStringToObject(b, "type", kind == BLOCK_TEXT ? "text" : "thinking");
    if (kind == BLOCK_TEXT) cJSON_AddStringToObject(b, "text", "");
    else {
        cJSON_AddStringToObject(b, "thinking", "");
        cJSON_AddStringToObject(b, "signature", "");
    }
    sse(out, "content_block_start", o);
    st->open = kind;
}

/* A content_block_delta of the open block. */
static void block_delta(plume_buf *out, anthropic_state *st, const char *type, const char *key, const char *text,
                        size_t len) {
    char *t = strndup(text, len);
    cJSON *o = block_event("content_block_delta", st->n_blocks - 1), *d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddStringToObject(d, key, t ? t : "");
    free(t);
    sse(out, "content_block_delta", o);
}

/* The body of an error: {"type": "error", "error": {"type", "message"}}, typed by status. */
static cJSON *json_error(const serve_error *e) {
    static const struct { int32_t status; const char *type; } map[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
        {413, "request_too_large"}, {429, "rate_limit_error"}, {503, "overloaded_error"},
    };
    const char *type = "api_error";
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (e->status == map[i].status) type = map[i].type;
    if (e->status == 405) type = "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *err;
    cJSON_AddStringToObject(o, "type", "error");
    err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddStringToObject(err, "message", e->message);
    return o;
}

/* The body of an error reply. */
static char *anthropic_error(const serve_error *e) {
    cJSON *o = json_error(e);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* One event of a streamed answer, as Anthropic's events. */
static void anthropic_stream(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    anthropic_state *st = state;
    switch (ev->kind) {
    case SERVE_EV_START: {
        cJSON *o = cJSON_CreateObject(), *m = message_head(j);
        cJSON_AddStringToObject(o, "type", "message_start");
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        serve_usage u = {.prompt = j->n_ids, .cached = j->cached_at_start}; /* the prompt as read */
        cJSON_AddItemToObject(m, "usage", json_usage(&u, j->n_ids));
        cJSON_AddItemToObject(o, "message", m);
        sse(out, "message_start", o);
        return;
    }
    case SERVE_EV_THOUGHT:
        if (!ev->len) return;
        block_open(out, st, BLOCK_THINKING);
        if (!j->req.omit_thought) block_delta(out, st, "thinking_delta", "thinking", ev->text, ev->len);
        return;
    case SERVE_EV_TEXT:
        if (!ev->len) return;
        block_open(out, st, BLOCK_TEXT);
        block_delta(out, st, "text_delta", "text", ev->text, ev->len);
        return;
    case SERVE_EV_TOOL_CALL: {
        block_close(out, st);
        int32_t index = st->n_blocks++;
        cJSON *o = block_event("content_block_start", index);
        cJSON_AddItemToObject(o, "content_block", json_tool_use(j, ev->call, ev->call_index, 0));
        sse(out, "content_block_start", o);
        o = block_event("content_block_delta", index);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", ev->call->arguments ? ev->call->arguments : "{}");
        sse(out, "content_block_delta", o);
        sse(out, "content_block_stop", block_event("content_block_stop", index));
        return;
    }
    case SERVE_EV_END:
        if (!st->n_blocks) block_open(out, st, BLOCK_TEXT); /* an empty answer is one empty text block */
        block_close(out, st);
        st->finish = ev->finish;
        st->stop = ev->stop;
        return;
    case SERVE_EV_DONE: {
        cJSON *o = cJSON_CreateObject(), *d;
        cJSON_AddStringToObject(o, "type", "message_delta");
        if ((d = cJSON_AddObjectToObject(o, "delta"))) {
            cJSON_AddStringToObject(d, "stop_reason", stop_reason(st->finish ? st->finish : SERVE_FINISH_STOP, st->stop));
            if (st->stop) cJSON_AddStringToObject(d, "stop_sequence", st->stop);
            else cJSON_AddNullToObject(d, "stop_sequence");
        }
        cJSON_AddItemToObject(o, "usage", json_usage(ev->usage, j->n_ids));
        sse(out, "message_delta", o);
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "message_stop");
        sse(out, "message_stop", o);
        return;
    }
    case SERVE_EV_ERROR: sse(out, "error", json_error(ev->error)); return;
    default: return;
    }
}

/* The whole message: thinking, text and tool_use blocks, the stop reason, the usage. */
static char *anthropic_reply(const serve_job_head *j, const serve_reply *a, int32_t n, const serve_usage *u) {
    (void)n;
    cJSON *o = message_head(j), *content = cJSON_AddArrayToObject(o, "content"), *b;
    if (a->thought && *a->thought && (b = cJSON_CreateObject())) {
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", j->req.omit_thought ? "" : a->thought);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if ((*a->text || !a->n_calls) && (b = cJSON_CreateObject())) {
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", a->text);
        cJSON_AddItemToArray(content, b);
    }
    for (int32_t i = 0; i < a->n_calls; i++) cJSON_AddItemToArray(content, json_tool_use(j, &a->calls[i], i, 1));
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(a->finish, a->stop));
    if (a->stop) cJSON_AddStringToObject(o, "stop_sequence", a->stop);
    else cJSON_AddNullToObject(o, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", json_usage(u, j->n_ids));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* {"input_tokens": n} of count_tokens. */
static char *anthropic_count(int32_t n_tokens) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", n_tokens);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

const serve_dialect serve_anthropic = {
    .name = "anthropic", .id_prefix = "msg", .stream_type = "text/event-stream",
    .state_size = sizeof(anthropic_state), .parse = parse_messages_body, .stream = anthropic_stream,
    .reply = anthropic_reply, .error = anthropic_error, .count = anthropic_count, .idle = ":\n\n",
};

const serve_dialect serve_anthropic_count = {
    .name = "anthropic-count", .id_prefix = "msg", .stream_type = "text/event-stream",
    .state_size = sizeof(anthropic_state), .parse = parse_count_body, .stream = anthropic_stream,
    .reply = anthropic_reply, .error = anthropic_error, .count = anthropic_count,
};
