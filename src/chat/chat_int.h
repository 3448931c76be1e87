/* chat_int.h -- what the files of the chat room share (src/chat/; chat.h says what each owns).
 * Nothing outside src/chat/ includes it.
 *
 * The renderer writes the E2B template's text into a plume_buf; the template walks Python
 * objects that json.loads() made of the tools and the tool-call arguments, so JSON text
 * becomes jv values that keep what Python keeps, and values print as Python's str() does. */
#ifndef PLUME_CHAT_INT_H
#define PLUME_CHAT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "plume.h"

/* ---- trimming (chat_trim.c) ---------------------------------------------------------------- */

/* Byte length of the whitespace character (Python's str.isspace()) that starts p[0, n), or 0. */
size_t chat_space_len(const unsigned char *p, size_t n);
/* Append s[0, n) without its leading and trailing whitespace (Jinja's trim). */
void chat_put_trimmed(plume_buf *b, const char *s, size_t n);
/* Append the template's strip_thinking(s): thought spans removed, then trimmed. */
void chat_put_model_content(plume_buf *b, const char *s);

/* ---- Python values from JSON text (chat_pyjson.c) ------------------------------------------ */

enum { JV_NULL, JV_FALSE, JV_TRUE, JV_NUM, JV_STR, JV_ARR, JV_OBJ };

/* One JSON value. */
typedef struct jv {
    int32_t type;      /* JV_* */
    char *s;           /* JV_STR: decoded bytes, JV_NUM: the literal; NUL-terminated */
    size_t len;        /* bytes in s (no NUL inside: \u0000 is refused) */
    struct jv *items;  /* JV_ARR, JV_OBJ: [n] values (room for cap_items) */
    struct jv *keys;   /* JV_OBJ: [n] JV_STR keys, parallel to items (room for cap_keys) */
    int32_t n;
    size_t cap_items, cap_keys;
} jv;

/* Parse a whole JSON text (nothing but whitespace after the value) into v as json.loads()
 * would: member order kept (a repeated key keeps its first place, the last value), numbers
 * as their literal text. what names the text in messages ("tools_json"). 0, PLUME_EINVAL
 * with the byte offset, or PLUME_ENOMEM; v is empty on failure. */
int chat_jv_parse(jv *v, const char *text, const char *what, char **err);
/* Free what v owns (v itself is the caller's). */
void chat_jv_free(jv *v);
/* Member key of an object, or NULL (missing, or v is not an object). */
const jv *chat_jv_get(const jv *v, const char *key);
/* Python truthiness (a missing value is false). */
int chat_jv_truthy(const jv *v);
/* Jinja's dictsort: obj's member indices ordered by key, case-insensitively, as a malloc'd
 * [obj->n] array (NULL when out of memory). */
int32_t *chat_jv_dictsort(const jv *obj);
/* Python's `for x in v`: how many items (array items, object keys, string characters), or -1
 * if v is not iterable; item i, a character made in *tmp (pointing into v). */
int32_t chat_jv_iter_count(const jv *v);
const jv *chat_jv_iter_item(const jv *v, int32_t i, jv *tmp);

/* ---- Python's str() of a value (chat_pystr.c) ---------------------------------------------- */

/* Append a JSON number literal as Python prints the int or float json.loads() makes of it. */
void chat_put_pynum(plume_buf *b, const char *lit);
/* Append str(v) (repr = 0) or repr(v) (repr = 1). */
void chat_put_pystr(plume_buf *b, const jv *v, int repr);
/* Append `v | upper` (missing v: nothing). */
void chat_put_pyupper(plume_buf *b, const jv *v);
/* Whether `v | upper` equals word (all upper case ASCII). */
int chat_jv_upper_is(const jv *v, const char *word);

/* ---- the template's macros (chat_macros.c) ------------------------------------------------- */

/* A rendering in progress: the text, and the first error (later ones are ignored). */
typedef struct {
    plume_buf b;
    int rc;
    char **err;
} chat_render;

/* Record an invalid-input error (the first one wins). */
void chat_render_fail(chat_render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse tools_json and append <|tool>declaration<tool|> per tool. *n_tools: how many. */
void chat_put_tools(chat_render *r, const char *tools_json, int32_t *n_tools);
/* Append tool call c of message i: <|tool_call>call:NAME{k:v,...}<tool_call|>. */
void chat_put_tool_call(chat_render *r, const plume_chat_tool_call *tc, int32_t i, int32_t c);
/* Append the tool response of one role "tool" message, named name. */
void chat_put_tool_response(chat_render *r, const char *name, const plume_chat_message_full *m);
/* Whether part p of m is text (no part_types: all are); a media part's placeholder
 * (<|image|>, <|audio|>, <|video|>; "" for text). chat_macros.c. */
int chat_part_text(const plume_chat_message_full *m, int32_t p);
const char *chat_part_placeholder(const plume_chat_message_full *m, int32_t p);

#endif /* PLUME_CHAT_INT_H */
