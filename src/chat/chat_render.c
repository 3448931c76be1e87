/* chat_render.c -- messages -> prompt text (docs/CHAT.md): plume_chat_render_full() is Google's
 * E2B chat template (spec/gemma4-e2b-chat-template.jinja) written out in C, without a Jinja
 * engine: system turn, thinking flag, tool declarations, tool calls and responses,
 * reasoning_content, content parts, and the template's turn continuation rules (the macros
 * are chat_macros.c). Knows nothing of tokens: it makes text, which the tokenizer then encodes
 * with no auto-BOS (the text starts with the literal "<bos>"). */
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

/* Whether a role names a message plume can render. */
static int chat_role_known(const char *r) {
    return !strcmp(r, "system") || !strcmp(r, "developer") || !strcmp(r, "user") ||
           !strcmp(r, "assistant") || !strcmp(r, "model") || !strcmp(r, "tool");
}

/* Whether a role is one of the model's ("assistant" as OpenAI says, "model" as Gemma does). */
static int chat_role_model(const char *r) { return !strcmp(r, "assistant") || !strcmp(r, "model"); }

/* Check every message's fields; 0 or PLUME_EINVAL naming the message. */
static int chat_check(const plume_chat_message_full *msgs, int32_t n, char **err) {
    if (n < 0) return plume_fail(err, PLUME_EINVAL, "chat: negative message count %d", n);
    if (n > 0 && !msgs) return plume_fail(err, PLUME_EINVAL, "chat: messages is NULL");
    for (int32_t i = 0; i < n; i++) {
        const plume_chat_message_full *m = &msgs[i];
        if (!m->role) return plume_fail(err, PLUME_EINVAL, "chat: message %d has no role", i);
        if (!chat_role_known(m->role))
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: unknown role \"%s\" (expected system, "
                              "developer, user, assistant, model or tool)", i, m->role);
        if (m->n_parts < 0 || (m->n_parts > 0 && !m->parts))
            return plume_fail(err, PLUME_EINVAL, "chat: message %d: bad parts (%d)", i, m->n_parts);
        if (m->n_parts > 0 && m->content)
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: both content and parts are set", i);
        for (int32_t p = 0; p < m->n_parts; p++) {
            const int32_t t = m->part_types ? m->part_types[p] : PLUME_CHAT_PART_TEXT;
            if (t < PLUME_CHAT_PART_TEXT || t > PLUME_CHAT_PART_VIDEO)
                return plume_fail(err, PLUME_EINVAL, "chat: message %d: part %d has an unknown type %d", i, p, t);
            if (t == PLUME_CHAT_PART_TEXT && !m->parts[p])
                return plume_fail(err, PLUME_EINVAL, "chat: message %d: part %d is NULL", i, p);
        }
        if (m->n_tool_calls < 0 || (m->n_tool_calls > 0 && !m->tool_calls))
            return plume_fail(err, PLUME_EINVAL, "chat: message %d: bad tool calls (%d)", i,
                              m->n_tool_calls);
        for (int32_t c = 0; c < m->n_tool_calls; c++)
            if (!m->tool_calls[c].name || !m->tool_calls[c].name[0])
                return plume_fail(err, PLUME_EINVAL, "chat: message %d: tool call %d has no name",
                                  i, c);
    }
    return 0;
}

/* The first message when it is a system or developer one: its content trimmed, or its parts
 * each trimmed and followed by a space (the template's system-turn loop; a media part has no
 * text there: just the space). */
static void put_system_content(plume_buf *b, const plume_chat_message_full *m) {
    if (m->n_parts > 0) {
        for (int32_t p = 0; p < m->n_parts; p++) {
            if (chat_part_text(m, p)) chat_put_trimmed(b, m->parts[p], strlen(m->parts[p]));
            plume_buf_put(b, " ", 1);
        }
    } else if (m->content) {
        chat_put_trimmed(b, m->content, strlen(m->content));
    }
}

/* A message's content in the loop (the template's captured_content): model text has its
 * thought spans stripped and is trimmed, other text is trimmed; parts each so, joined, a media
 * part as its placeholder. Returns whether anything but whitespace was written. */
static int put_content(plume_buf *b, const plume_chat_message_full *m, int is_model) {
    size_t at = b->len;
    int32_t n = m->n_parts > 0 ? m->n_parts : m->content ? 1 : 0;
    for (int32_t p = 0; p < n; p++) {
        if (m->n_parts > 0 && !chat_part_text(m, p)) {
            plume_buf_puts(b, chat_part_placeholder(m, p));
            continue;
        }
        const char *c = m->n_parts > 0 ? m->parts[p] : m->content;
        if (is_model) chat_put_model_content(b, c);
        else chat_put_trimmed(b, c, strlen(c));
    }
    if (b->oom) return 0;
    const unsigned char *s = (const unsigned char *)b->p + at;
    size_t len = b->len - at, k;
    while ((k = chat_space_len(s, len)) > 0) { s += k; len -= k; }
    return len > 0;
}

/* What the template's ns.prev_message_type says about the last thing rendered. */
enum { PREV_NONE, PREV_THINK, PREV_TOOL, PREV_TOOL_CALL, PREV_TOOL_RESPONSE };

/* Both NULL, or equal strings: how the template compares tc.id with tool_call_id. */
static int chat_same_id(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* The role tool messages that directly follow message i (which made tool calls), each as a
 * tool response named by the call whose id it answers (else its own name, else "unknown").
 * Returns how many were written. */
static int32_t put_tool_responses(chat_render *r, const plume_chat_message_full *lm, int32_t n, int32_t i) {
    int32_t k = i + 1;
    for (; k < n && !strcmp(lm[k].role, "tool"); k++) {
        const char *name = lm[k].name && lm[k].name[0] ? lm[k].name : "unknown";
        for (int32_t c = 0; c < lm[i].n_tool_calls; c++)
            if (chat_same_id(lm[i].tool_calls[c].id, lm[k].tool_call_id))
                name = lm[i].tool_calls[c].name;
        chat_put_tool_response(r, name, &lm[k]);
    }
    return k - (i + 1);
}

/* One non-tool message of the loop (lm[i] of n, after a leading system message), as the
 * template's loop body renders it; updates *prev (PREV_*) and *prev_role. */
static void put_message(chat_render *r, const plume_chat_message_full *lm, int32_t n, int32_t i,
                        int32_t last_user, const plume_chat_options *o, int *prev,
                        const char **prev_role) {
    const plume_chat_message_full *m = &lm[i];
    plume_buf *b = &r->b;
    int is_model = chat_role_model(m->role);
    *prev = PREV_NONE;
    /* A model turn continues after an "assistant" message (the role as given). */
    if (!(is_model && *prev_role && !strcmp(*prev_role, "assistant"))) {
        plume_buf_puts(b, "<|turn>");
        plume_buf_puts(b, is_model ? "model" : m->role);
        plume_buf_puts(b, "\n");
    }
    /* Thoughts are kept after the last user message only (or, with preserve_thinking, on
     * turns that call tools). */
    int gate = i > last_user || (o->preserve_thinking && m->n_tool_calls > 0);
    if (m->reasoning_content && m->reasoning_content[0] && gate) {
        plume_buf_puts(b, "<|channel>thought\n");
        plume_buf_puts(b, m->reasoning_content);
        plume_buf_puts(b, "\n<channel|>");
    }
    for (int32_t c = 0; c < m->n_tool_calls && !r->rc; c++) chat_put_tool_call(r, &m->tool_calls[c], i, c);
    if (m->n_tool_calls > 0) *prev = PREV_TOOL_CALL;
    int responded = 0;
    if (m->n_tool_calls > 0 && put_tool_responses(r, lm, n, i) > 0) {
        responded = 1;
        *prev = PREV_TOOL_RESPONSE;
    }
    int has_content = put_content(b, m, is_model);

    const char *next = NULL; /* the next non-tool message's role */
    for (int32_t j = i + 1; j < n && !next; j++)
        if (strcmp(lm[j].role, "tool")) next = lm[j].role;
    int continues = is_model && next && !strcmp(next, "assistant") &&
                    (m->n_tool_calls == 0 || responded);
    if (*prev == PREV_TOOL_CALL && !responded) plume_buf_puts(b, "<|tool_response>");
    else if (continues) {}
    else if (!(responded && !has_content && !next)) plume_buf_puts(b, "<turn|>\n");
    *prev_role = m->role;
}

/* Render as the E2B template does with bos_token "<bos>" (see docs/CHAT.md):
 *   <bos>
 *   [<|turn>system\n [<|think|>\n] [first system/developer content] [<|tool>decl<tool|>...]
 *    <turn|>\n]
 *   per non-tool message: [<|turn>{role}\n] [thought] [tool calls] [tool responses] content
 *                         [<turn|>\n | <|tool_response>]
 *   [<|turn>model\n | <|channel>thought\n]     when add_generation_prompt
 * *out is malloc'd and NUL-terminated. 0, PLUME_EINVAL or PLUME_ENOMEM. */
int plume_chat_render_full(const plume_chat_message_full *msgs, int32_t n,
                           const plume_chat_options *opt, char **out, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "chat: out is NULL");
    *out = NULL;
    int rc = chat_check(msgs, n, err);
    if (rc) return rc;
    plume_chat_options o = {0};
    if (opt) o = *opt;

    chat_render r = {{0}, 0, err};
    int prev = PREV_NONE;
    plume_buf_puts(&r.b, "<bos>");
    int32_t first = 0, n_tools = 0;
    int has_system = n > 0 && (!strcmp(msgs[0].role, "system") ||
                               !strcmp(msgs[0].role, "developer"));
    size_t system_at = r.b.len;
    plume_buf_puts(&r.b, "<|turn>system\n");
    if (o.enable_thinking) {
        plume_buf_puts(&r.b, "<|think|>\n");
        prev = PREV_THINK;
    }
    if (has_system) {
        put_system_content(&r.b, &msgs[0]);
        first = 1;
    }
    if (o.tools_json) chat_put_tools(&r, o.tools_json, &n_tools);
    if (n_tools > 0) prev = PREV_TOOL;
    if (o.enable_thinking || has_system || n_tools > 0) plume_buf_puts(&r.b, "<turn|>\n");
    else if (!r.b.oom) r.b.p[r.b.len = system_at] = 0; /* no system turn after all */

    const plume_chat_message_full *lm = msgs + first;
    int32_t ln = n - first, last_user = -1;
    for (int32_t i = 0; i < ln; i++)
        if (!strcmp(lm[i].role, "user")) last_user = i;
    const char *prev_role = NULL; /* the previous non-tool message's role as given */
    for (int32_t i = 0; i < ln && !r.rc; i++)
        if (strcmp(lm[i].role, "tool")) put_message(&r, lm, ln, i, last_user, &o, &prev, &prev_role);
    /* After a tool response the model goes on in the same turn (with thinking, in a thought). */
    if (o.add_generation_prompt && prev != PREV_TOOL_RESPONSE && prev != PREV_TOOL_CALL)
        plume_buf_puts(&r.b, "<|turn>model\n");
    else if (o.add_generation_prompt && prev == PREV_TOOL_RESPONSE && o.enable_thinking)
        plume_buf_puts(&r.b, "<|channel>thought\n");

    if (!r.rc && r.b.oom)
        r.rc = plume_fail(err, PLUME_ENOMEM, "chat: out of memory rendering %d messages", n);
    if (r.rc) {
        free(r.b.p);
        return r.rc;
    }
    *out = r.b.p;
    return 0;
}

/* plume_chat_render_full with plain {role, content} messages and no tools. Role "tool" is
 * PLUME_EINVAL: without tool calls to answer, the template would drop it. */
int plume_chat_render(const plume_chat_message *msgs, int32_t n, int32_t add_generation_prompt,
                      int32_t enable_thinking, char **out, char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "chat: out is NULL");
    *out = NULL;
    if (n < 0) return plume_fail(err, PLUME_EINVAL, "chat: negative message count %d", n);
    if (n > 0 && !msgs) return plume_fail(err, PLUME_EINVAL, "chat: messages is NULL");
    plume_chat_message_full *ex = calloc((size_t)n + 1, sizeof *ex);
    if (!ex) return plume_fail(err, PLUME_ENOMEM, "chat: out of memory for %d messages", n);
    for (int32_t i = 0; i < n; i++) {
        if (msgs[i].role && !strcmp(msgs[i].role, "tool")) {
            free(ex);
            return plume_fail(err, PLUME_EINVAL,
                              "chat: message %d: role \"tool\" answers tool calls, which need "
                              "plume_chat_render_full", i);
        }
        ex[i].role = msgs[i].role;
        ex[i].content = msgs[i].content;
    }
    plume_chat_options o = {0};
    o.add_generation_prompt = add_generation_prompt;
    o.enable_thinking = enable_thinking;
    int rc = plume_chat_render_full(ex, n, &o, out, err);
    free(ex);
    return rc;
}
