/* tools.c -- tools + tool_choice -> GBNF that forces a tool call in Gemma 4's own format
 * (docs/STRUCTURED.md "Tool calls").
 *
 * Gemma 4 writes a call as <|tool_call>call:NAME{key:value,...}<tool_call|> (src/chat.c
 * renders it so, src/chat_parse.c reads it back): keys bare and sorted as the template's
 * dictsort sorts them, strings between <|"|> tokens with nothing escaped, numbers, true,
 * false, null, nested {..} and [..]. After its calls the model ends the turn with
 * <|tool_response> (the wrapper in constraint.c allows that, <turn|> or <eos>).
 *
 * tool_choice "required": one or more calls, each of any of the tools; a function's name (or
 * OpenAI's {"type":"function","function":{"name":...}}): one call of that function. The
 * arguments follow each function's `parameters` schema, compiled in the Gemma dialect. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

/* The function object of tools[i] and its name, or an error. */
static int tool_function(const cJSON *tool, int i, const cJSON **fn, const char **name, char **err) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
    if (!cJSON_IsObject(tool)) return plume_fail(err, PLUME_EINVAL, "tools[%d]: not an object", i);
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
        return plume_fail(err, PLUME_EINVAL, "tools[%d]: only tools of type \"function\" are supported", i);
    *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *n = cJSON_IsObject(*fn) ? cJSON_GetObjectItemCaseSensitive(*fn, "name") : NULL;
    if (!cJSON_IsString(n) || !n->valuestring[0])
        return plume_fail(err, PLUME_EINVAL, "tools[%d]: no \"function\" object with a string \"name\"", i);
    for (const unsigned char *q = (const unsigned char *)n->valuestring; *q; q++)
        if (*q <= ' ' || strchr("{}\"<:", *q))
            return plume_fail(err, PLUME_EINVAL, "tools[%d]: the name \"%s\" holds a character a Gemma call cannot "
                              "carry (space, control, { } \" < :)", i, n->valuestring);
    *name = n->valuestring;
    return 0;
}

/* The function tool_choice names: "required" gives NULL (any tool); a name or the JSON form
 * gives the name. Errors for "auto", "none" and the rest. */
static int choice_name(const char *choice, char *name, size_t cap, int *required, char **err) {
    *required = 0;
    if (!choice) return plume_fail(err, PLUME_EINVAL, "tool_choice: NULL");
    if (!strcmp(choice, "required")) { *required = 1; return 0; }
    if (!strcmp(choice, "auto") || !strcmp(choice, "none"))
        return plume_fail(err, PLUME_EINVAL, "tool_choice \"%s\" is not a constraint (only \"required\" or a function is "
                          "enforced)", choice);
    if (choice[0] != '{') {
        if (strlen(choice) >= cap) return plume_fail(err, PLUME_EINVAL, "tool_choice: the name is too long");
        strcpy(name, choice);
        return 0;
    }
    cJSON *j = cst_json_parse(choice, strlen(choice), "tool_choice", err);
    if (!j) return PLUME_EINVAL;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(j, "function");
    const cJSON *n = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    int rc = 0;
    if (!cJSON_IsString(n) || (t && (!cJSON_IsString(t) || strcmp(t->valuestring, "function"))))
        rc = plume_fail(err, PLUME_EINVAL, "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    else if (strlen(n->valuestring) >= cap) rc = plume_fail(err, PLUME_EINVAL, "tool_choice: the name is too long");
    else strcpy(name, n->valuestring);
    cJSON_Delete(j);
    return rc;
}

/* Whether a parameters schema leaves the arguments free (absent, null, {} or annotations
 * only): then they are any object. */
static int params_free(const cJSON *p) {
    if (!p || cJSON_IsNull(p) || cJSON_IsTrue(p)) return 1;
    if (!cJSON_IsObject(p)) return 0;
    static const char *const notes[] = {"title", "description", "$schema", "$id", "$comment", "$defs", "definitions", NULL};
    for (const cJSON *k = p->child; k; k = k->next) {
        int note = 0;
        for (int i = 0; notes[i] && !note; i++) note = !strcmp(k->string, notes[i]);
        if (!note && !(!strcmp(k->string, "type") && cJSON_IsString(k) && !strcmp(k->valuestring, "object"))) return 0;
    }
    return 1;
}

/* The rule of one function's call: call-K ::= <|tool_call> "call:NAME" args <tool_call|>. */
static int call_rule(cst_schema *c, const cJSON *fn, const char *name, int k, char **err) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    char args[64], path[64];
    snprintf(path, sizeof path, "tools[%d].parameters", k);
    if (params_free(params)) {
        snprintf(args, sizeof args, "%s", cst_schema_any_object(c));
    } else {
        const cJSON *ty = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "type") : NULL;
        if (!cJSON_IsObject(params) || (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "object"))))
            return plume_fail(err, PLUME_EINVAL, "%s: the arguments of a call are an object: \"type\" must be \"object\"", path);
        int rc = cst_schema_rule(c, params, params, path, args);
        if (rc) return rc;
    }
    plume_buf *o = cst_schema_out(c);
    plume_buf_printf(o, "call-%d ::= <|tool_call> ", k);
    char head[600];
    snprintf(head, sizeof head, "call:%s", name);
    cst_buf_literal(o, head, strlen(head));
    plume_buf_printf(o, " %s <tool_call|>\n", args);
    return 0;
}

/* tools + tool_choice -> GBNF (the file comment says what it accepts). */
int cst_tools_to_gbnf(const char *tools_json, const char *tool_choice, char **gbnf, char **err) {
    if (!gbnf) return plume_fail(err, PLUME_EINVAL, "tools: gbnf is NULL");
    *gbnf = NULL;
    char want[512];
    int required;
    int rc = choice_name(tool_choice, want, sizeof want, &required, err);
    if (rc) return rc;
    cJSON *tools = cst_json_parse(tools_json, tools_json ? strlen(tools_json) : 0, "tools", err);
    if (!tools) return PLUME_EINVAL;
    cst_schema *c = NULL;
    if (!cJSON_IsArray(tools) || !tools->child) rc = plume_fail(err, PLUME_EINVAL, "tools: not a non-empty array of tools");
    if (!rc) rc = cst_schema_new(&c, CST_GEMMA, err);
    int k = 0, n_calls = 0;
    plume_buf root = {0};
    for (const cJSON *t = rc ? NULL : tools->child; t && !rc; t = t->next, k++) {
        const cJSON *fn = NULL;
        const char *name = "";
        rc = tool_function(t, k, &fn, &name, err);
        if (rc || (!required && strcmp(name, want))) continue;
        rc = call_rule(c, fn, name, k, err);
        plume_buf_printf(&root, "%scall-%d ", n_calls++ ? "| " : "", k);
    }
    if (!rc && n_calls == 0) rc = plume_fail(err, PLUME_EINVAL, "tool_choice names \"%s\", which is not one of the tools", want);
    if (!rc) {
        if (required) plume_buf_printf(cst_schema_out(c), "root ::= ( %s)+\n", root.p);
        else plume_buf_printf(cst_schema_out(c), "root ::= %s\n", root.p);
        rc = cst_schema_finish(c, gbnf);
    }
    free(root.p);
    cst_schema_free(c);
    cJSON_Delete(tools);
    return rc;
}
