/* chat_macros.c -- the E2B template's macros: format_argument, format_parameters,
 * format_function_declaration, and the tool call and tool response syntax. Each appends to a
 * rendering in progress and records the first invalid input. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

/* ---- format_argument ----------------------------------------------------------------------- */

/* Record an invalid-input error (the first one wins). */
void chat_render_fail(chat_render *r, const char *fmt, ...) {
    if (r->rc) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->rc = plume_fail(r->err, PLUME_EINVAL, "chat: %s", msg);
}

/* Append <|"|>s<|"|>, the template's string quote. */
static void buf_put_quoted(plume_buf *b, const char *s, size_t n) {
    plume_buf_puts(b, "<|\"|>");
    plume_buf_put(b, s, n);
    plume_buf_puts(b, "<|\"|>");
}

/* The template's format_argument(v, escape_keys): strings in <|"|>, true/false/null, numbers
 * as Python prints them, objects {k:v} in dictsort order (keys quoted when escape_keys),
 * arrays [a,b]. */
static void put_argument(plume_buf *b, const jv *v, int escape_keys) {
    if (v->type == JV_NULL) plume_buf_puts(b, "null");
    else if (v->type == JV_STR) buf_put_quoted(b, v->s, v->len);
    else if (v->type == JV_TRUE || v->type == JV_FALSE) plume_buf_puts(b, v->type == JV_TRUE ? "true" : "false");
    else if (v->type == JV_NUM) chat_put_pynum(b, v->s);
    else if (v->type == JV_ARR) {
        plume_buf_put(b, "[", 1);
        for (int32_t i = 0; i < v->n; i++) {
            if (i) plume_buf_put(b, ",", 1);
            put_argument(b, &v->items[i], escape_keys);
        }
        plume_buf_put(b, "]", 1);
    } else {
        int32_t *order = chat_jv_dictsort(v);
        if (!order) { b->oom = 1; return; }
        plume_buf_put(b, "{", 1);
        for (int32_t i = 0; i < v->n; i++) {
            const jv *k = &v->keys[order[i]];
            if (i) plume_buf_put(b, ",", 1);
            if (escape_keys) buf_put_quoted(b, k->s, k->len);
            else plume_buf_put(b, k->s, k->len);
            plume_buf_put(b, ":", 1);
            put_argument(b, &v->items[order[i]], escape_keys);
        }
        plume_buf_put(b, "}", 1);
        free(order);
    }
}

/* ---- format_parameters and format_function_declaration ------------------------------------- */

/* The template's list of names, [<|"|>a<|"|>,<|"|>b<|"|>] (str() of each item, upper-cased
 * for a `type` list), over what `for x in v` gives; a value Python cannot iterate is an
 * error, as it is for Jinja. */
static void put_name_list(chat_render *r, const jv *v, int upper, const char *field, const char *where) {
    int32_t n = chat_jv_iter_count(v);
    if (n < 0) {
        chat_render_fail(r, "%s: \"%s\" is not a list", where, field);
        return;
    }
    plume_buf_put(&r->b, "[", 1);
    for (int32_t i = 0; i < n; i++) {
        jv tmp;
        const jv *it = chat_jv_iter_item(v, i, &tmp);
        if (i) plume_buf_put(&r->b, ",", 1);
        plume_buf_puts(&r->b, "<|\"|>");
        if (upper) chat_put_pyupper(&r->b, it);
        else chat_put_pystr(&r->b, it, 0);
        plume_buf_puts(&r->b, "<|\"|>");
    }
    plume_buf_put(&r->b, "]", 1);
}

/* The template's required:[<|"|>a<|"|>,...]. */
static void put_required(chat_render *r, const jv *req, const char *where) {
    plume_buf_puts(&r->b, "required:");
    put_name_list(r, req, 0, "required", where);
}

/* The separator logic the template repeats before each field: a comma from the second field
 * of a property on. */
static void put_field_sep(plume_buf *b, int *add_comma) {
    if (*add_comma) plume_buf_put(b, ",", 1);
    *add_comma = 1;
}

static void put_parameters(chat_render *r, const jv *props, int filter_keys, const char *where);

/* The ARRAY branch of format_parameters: `items:{...}` from a non-empty items object, its
 * members in dictsort order, null members skipped. */
static void put_items(chat_render *r, const jv *items, const char *where) {
    int32_t *order = chat_jv_dictsort(items);
    if (!order) { r->b.oom = 1; return; }
    plume_buf_puts(&r->b, "items:{");
    int first = 1;
    for (int32_t i = 0; i < items->n; i++) {
        const jv *k = &items->keys[order[i]], *v = &items->items[order[i]];
        if (v->type == JV_NULL) continue;
        if (!first) plume_buf_put(&r->b, ",", 1);
        first = 0;
        if (!strcmp(k->s, "properties")) {
            plume_buf_puts(&r->b, "properties:{");
            if (v->type == JV_OBJ) put_parameters(r, v, 0, where);
            plume_buf_put(&r->b, "}", 1);
        } else if (!strcmp(k->s, "required")) {
            put_required(r, v, where);
        } else if (!strcmp(k->s, "type") && v->type == JV_STR) {
            plume_buf_puts(&r->b, "type:<|\"|>");
            chat_put_pyupper(&r->b, v);
            plume_buf_puts(&r->b, "<|\"|>");
        } else if (!strcmp(k->s, "type")) {
            /* type:{{ format_argument(item_value | map('upper') | list) }} */
            plume_buf_puts(&r->b, "type:");
            put_name_list(r, v, 1, "type", where);
        } else {
            plume_buf_put(&r->b, k->s, k->len);
            plume_buf_put(&r->b, ":", 1);
            put_argument(&r->b, v, 1);
        }
    }
    plume_buf_put(&r->b, "}", 1);
    free(order);
}

/* One property of format_parameters: key:{description,enum|items,nullable,properties,
 * required,type}. value may be any JSON value; a non-object acts as an empty one (Jinja's
 * lookups on it are undefined). */
static void put_property(chat_render *r, const jv *key, const jv *value, const char *where) {
    plume_buf *b = &r->b;
    int add_comma = 0;
    plume_buf_put(b, key->s, key->len);
    plume_buf_puts(b, ":{");
    const jv *desc = chat_jv_get(value, "description"), *type = chat_jv_get(value, "type");
    if (chat_jv_truthy(desc)) {
        plume_buf_puts(b, "description:<|\"|>");
        chat_put_pystr(b, desc, 0);
        plume_buf_puts(b, "<|\"|>");
        add_comma = 1;
    }
    if (chat_jv_upper_is(type, "STRING")) {
        const jv *en = chat_jv_get(value, "enum");
        if (chat_jv_truthy(en)) {
            put_field_sep(b, &add_comma);
            plume_buf_puts(b, "enum:");
            put_argument(b, en, 1);
        }
    } else if (chat_jv_upper_is(type, "ARRAY")) {
        const jv *items = chat_jv_get(value, "items");
        if (items && items->type == JV_OBJ && items->n > 0) {
            put_field_sep(b, &add_comma);
            put_items(r, items, where);
        }
    }
    if (chat_jv_truthy(chat_jv_get(value, "nullable"))) {
        put_field_sep(b, &add_comma);
        plume_buf_puts(b, "nullable:true");
    }
    if (chat_jv_upper_is(type, "OBJECT")) {
        const jv *props = chat_jv_get(value, "properties"), *req = chat_jv_get(value, "required");
        put_field_sep(b, &add_comma);
        plume_buf_puts(b, "properties:{");
        /* With no "properties" object, the template lists the object's own non-standard
         * keys as if they were properties. */
        if (props && props->type == JV_OBJ) put_parameters(r, props, 0, where);
        else put_parameters(r, value, 1, where);
        plume_buf_put(b, "}", 1);
        if (chat_jv_truthy(req)) {
            put_field_sep(b, &add_comma);
            put_required(r, req, where);
        }
    }
    put_field_sep(b, &add_comma);
    plume_buf_puts(b, "type:<|\"|>");
    chat_put_pyupper(b, type);
    plume_buf_puts(b, "<|\"|>}");
}

/* The template's format_parameters(properties, required, filter_keys): each property in
 * dictsort order, comma separated; with filter_keys, the JSON-schema keywords are skipped. */
static void put_parameters(chat_render *r, const jv *props, int filter_keys, const char *where) {
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    int32_t *order = chat_jv_dictsort(props);
    if (!order) { r->b.oom = 1; return; }
    int first = 1;
    for (int32_t i = 0; i < props->n && !r->rc; i++) {
        const jv *k = &props->keys[order[i]];
        int skip = 0;
        for (size_t s = 0; filter_keys && s < 5; s++) skip |= !strcmp(k->s, standard[s]);
        if (skip) continue;
        if (!first) plume_buf_put(&r->b, ",", 1);
        first = 0;
        put_property(r, k, &props->items[order[i]], where);
    }
    free(order);
}

/* The template's format_function_declaration(tool): declaration:NAME{description:<|"|>..<|"|>
 * [,parameters:{[properties:{..},][required:[..],][type:<|"|>T<|"|>}]][,response:{..}]}.
 * (The parameters brace is closed only by the type field: a template quirk, kept.) */
static void put_declaration(chat_render *r, const jv *tool, int32_t t) {
    char where[32];
    snprintf(where, sizeof where, "tools[%d]", t);
    const jv *fn = chat_jv_get(tool, "function");
    const jv *name = chat_jv_get(fn, "name"), *desc = chat_jv_get(fn, "description");
    if (!fn || fn->type != JV_OBJ) { chat_render_fail(r, "%s: no \"function\" object", where); return; }
    if (!name || name->type != JV_STR) {
        chat_render_fail(r, "%s: \"function\" has no string \"name\"", where);
        return;
    }
    plume_buf *b = &r->b;
    plume_buf_puts(b, "declaration:");
    plume_buf_put(b, name->s, name->len);
    plume_buf_puts(b, "{description:<|\"|>");
    if (desc) chat_put_pystr(b, desc, 0);
    plume_buf_puts(b, "<|\"|>");
    const jv *params = chat_jv_get(fn, "parameters");
    if (chat_jv_truthy(params)) {
        if (params->type != JV_OBJ) { chat_render_fail(r, "%s: \"parameters\" is not an object", where); return; }
        const jv *props = chat_jv_get(params, "properties"), *req = chat_jv_get(params, "required");
        const jv *type = chat_jv_get(params, "type");
        plume_buf_puts(b, ",parameters:{");
        if (chat_jv_truthy(props)) {
            if (props->type != JV_OBJ) {
                chat_render_fail(r, "%s: \"properties\" is not an object", where);
                return;
            }
            plume_buf_puts(b, "properties:{");
            put_parameters(r, props, 0, where);
            plume_buf_puts(b, "},");
        }
        if (chat_jv_truthy(req)) {
            put_required(r, req, where);
            plume_buf_put(b, ",", 1);
        }
        if (chat_jv_truthy(type)) {
            plume_buf_puts(b, "type:<|\"|>");
            chat_put_pyupper(b, type);
            plume_buf_puts(b, "<|\"|>}");
        }
    }
    const jv *resp = chat_jv_get(fn, "response");
    if (resp) {
        const jv *rdesc = chat_jv_get(resp, "description"), *rtype = chat_jv_get(resp, "type");
        plume_buf_puts(b, ",response:{");
        if (chat_jv_truthy(rdesc)) {
            plume_buf_puts(b, "description:<|\"|>");
            chat_put_pystr(b, rdesc, 0);
            plume_buf_puts(b, "<|\"|>,");
        }
        if (chat_jv_upper_is(rtype, "OBJECT")) plume_buf_puts(b, "type:<|\"|>OBJECT<|\"|>}");
    }
    plume_buf_put(b, "}", 1);
}

/* Parse tools_json and append <|tool>declaration<tool|> per tool. *n_tools: how many. */
void chat_put_tools(chat_render *r, const char *tools_json, int32_t *n_tools) {
    jv tools = {0};
    *n_tools = 0;
    int rc = chat_jv_parse(&tools, tools_json, "tools_json", r->err);
    if (rc) { r->rc = rc; return; }
    if (tools.type != JV_ARR && tools.type != JV_NULL) {
        chat_render_fail(r, "tools_json: not an array of tools");
    } else {
        for (int32_t t = 0; t < tools.n && !r->rc; t++) {
            if (tools.items[t].type != JV_OBJ) { chat_render_fail(r, "tools[%d]: not an object", t); break; }
            plume_buf_puts(&r->b, "<|tool>");
            put_declaration(r, &tools.items[t], t);
            plume_buf_puts(&r->b, "<tool|>");
        }
        *n_tools = tools.n;
    }
    chat_jv_free(&tools);
}

/* ---- tool calls and responses -------------------------------------------------------------- */

/* <|tool_call>call:NAME{k:v,...}<tool_call|>: arguments (JSON object text, NULL or "null" for
 * none) in dictsort order, keys bare, values by format_argument(escape_keys=False). */
void chat_put_tool_call(chat_render *r, const plume_chat_tool_call *tc, int32_t i, int32_t c) {
    jv args = {0};
    if (tc->arguments) {
        char what[64];
        snprintf(what, sizeof what, "message %d: tool call %d arguments", i, c);
        int rc = chat_jv_parse(&args, tc->arguments, what, r->err);
        if (rc) { r->rc = rc; return; }
        if (args.type != JV_OBJ && args.type != JV_NULL) {
            chat_render_fail(r, "message %d: tool call %d: arguments are not a JSON object", i, c);
            chat_jv_free(&args);
            return;
        }
    }
    plume_buf_puts(&r->b, "<|tool_call>call:");
    plume_buf_puts(&r->b, tc->name);
    plume_buf_put(&r->b, "{", 1);
    if (args.type == JV_OBJ) {
        int32_t *order = chat_jv_dictsort(&args);
        if (!order) r->b.oom = 1;
        for (int32_t k = 0; order && k < args.n; k++) {
            if (k) plume_buf_put(&r->b, ",", 1);
            plume_buf_put(&r->b, args.keys[order[k]].s, args.keys[order[k]].len);
            plume_buf_put(&r->b, ":", 1);
            put_argument(&r->b, &args.items[order[k]], 0);
        }
        free(order);
    }
    plume_buf_puts(&r->b, "}<tool_call|>");
    chat_jv_free(&args);
}

int chat_part_text(const plume_chat_message_full *m, int32_t p) {
    return !m->part_types || m->part_types[p] == PLUME_CHAT_PART_TEXT;
}

const char *chat_part_placeholder(const plume_chat_message_full *m, int32_t p) {
    switch (m->part_types ? m->part_types[p] : PLUME_CHAT_PART_TEXT) {
    case PLUME_CHAT_PART_IMAGE: return "<|image|>";
    case PLUME_CHAT_PART_AUDIO: return "<|audio|>";
    case PLUME_CHAT_PART_VIDEO: return "<|video|>";
    default: return "";
    }
}

/* <|tool_response>response:NAME{value:BODY}<tool_response|> for one role "tool" message: the
 * body is its content or its text parts joined (not trimmed) as a <|"|> string, or null; its
 * media parts' placeholders follow the block (template lines 296-311). */
void chat_put_tool_response(chat_render *r, const char *name, const plume_chat_message_full *m) {
    plume_buf_puts(&r->b, "<|tool_response>response:");
    plume_buf_puts(&r->b, name);
    plume_buf_puts(&r->b, "{value:");
    if (m->n_parts > 0) {
        plume_buf_puts(&r->b, "<|\"|>");
        for (int32_t p = 0; p < m->n_parts; p++)
            if (chat_part_text(m, p)) plume_buf_puts(&r->b, m->parts[p]);
        plume_buf_puts(&r->b, "<|\"|>");
    } else if (m->content) {
        buf_put_quoted(&r->b, m->content, strlen(m->content));
    } else {
        plume_buf_puts(&r->b, "null");
    }
    plume_buf_puts(&r->b, "}<tool_response|>");
    for (int32_t p = 0; p < m->n_parts; p++) plume_buf_puts(&r->b, chat_part_placeholder(m, p));
}
