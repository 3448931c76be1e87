/* chat.h -- the chat room (src/chat/, docs/CHAT.md): messages -> the prompt text Gemma 4 E2B
 * was trained on, and generated text -> typed deltas, both without a Jinja engine or the
 * model. Owns the E2B chat template written out in C and what generation needs around text:
 * the stop-string matcher. May call common.h (plume_buf, plume_fail) and nothing else of
 * plume (no cJSON either: the template needs Python's view of JSON, chat_pyjson.c); knows
 * nothing of tokens, sessions or the model. Its files, in calling order:
 *
 *   chat_render.c  the public plume_chat_render*: checks the messages, walks them as the
 *                  template's loop does (system turn, turns, thoughts, continuation rules)
 *   chat_macros.c  the template's macros: tool declarations (format_function_declaration,
 *                  format_parameters), format_argument, tool calls and tool responses
 *   chat_pystr.c   Python's str() and repr() of values, which is what {{ x }} prints
 *   chat_pyjson.c  JSON text (tools, arguments) -> the Python objects json.loads() makes
 *   chat_trim.c    Jinja's trim (Python str.strip()) and the template's strip_thinking
 *   chat_parse.c   the way back: the public plume_chat_parser* (generated text -> content,
 *                  thought and tool-call deltas, streaming)
 *   chat_stop.c    the stop-string matcher below
 *
 * chat_int.h is what those files share; this header is what the rest of plume may use.
 *
 * The stop matcher. Generation feeds every decoded piece of text to the matcher and prints
 * only what the matcher releases, so that a user stop string is never printed, not even in
 * part. The matcher holds back the longest tail that could still grow into a stop string,
 * and reports a complete stop string as soon as one appears (the text before it is released,
 * the stop string and anything after it are dropped). "First" means first to complete, as if
 * the text arrived one byte at a time (among stop strings completing at the same byte, the
 * longest), so the outcome does not depend on how the text is cut into pieces.
 *
 *     plume_stop_matcher sm;
 *     const char *stops[] = {"\nUser:"};
 *     if (plume_stop_matcher_init(&sm, stops, 1, &err)) ...
 *     for (each generated id) {
 *         n = plume_detok_stream_put(&ds, id, piece, sizeof piece);
 *         int hit = plume_stop_matcher_feed(&sm, piece, n, &emit, &n_emit);
 *         if (hit < 0) ...;                    // out of memory
 *         fwrite(emit, 1, n_emit, stdout);
 *         if (hit) break;                      // sm.matched says which stop string
 *     }
 *     n_emit = plume_stop_matcher_flush(&sm, &emit);  // generation ended without a stop
 *     fwrite(emit, 1, n_emit, stdout);
 *     plume_stop_matcher_free(&sm);
 *
 * Bytes, not characters: stop strings are compared byte for byte. When the pieces are whole
 * UTF-8 characters (as plume_detok_stream gives them) and the stop strings are valid UTF-8,
 * the released text always ends on a character boundary, because a held tail starts with the
 * first byte of a stop string, which is a lead byte. */
#ifndef PLUME_CHAT_H
#define PLUME_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "plume.h"

/* Matches user stop strings across pieces of streamed text. */
typedef struct {
    char **stops;     /* [n_stops] private NUL-terminated copies, none empty */
    size_t *lens;     /* [n_stops] byte lengths */
    int32_t n_stops;
    size_t max_len;   /* longest stop string */
    char *text;       /* [len] released-by-the-last-call bytes, then the held tail */
    size_t len, cap;
    size_t released;  /* bytes at the front of text handed out by the last call */
    size_t held;      /* trailing bytes held back as a possible start of a stop string */
    int32_t matched;  /* index of the stop string found, or -1 */
} plume_stop_matcher;

/* Copy n_stops stop strings (none NULL or empty; n_stops may be 0, then the matcher only
 * passes text through). 0, PLUME_EINVAL or PLUME_ENOMEM. */
int plume_stop_matcher_init(plume_stop_matcher *m, const char *const *stops, int32_t n_stops,
                            char **err);
/* Free the matcher's memory (it may be init'ed again). NULL is a no-op. */
void plume_stop_matcher_free(plume_stop_matcher *m);
/* Forget the held tail and any match, for a new generation with the same stop strings. */
void plume_stop_matcher_reset(plume_stop_matcher *m);

/* Feed len bytes of text. On return *emit (valid until the next call on m) holds the *n_emit
 * bytes that are now safe to print, m->held counts the bytes kept back. Returns 1 when a stop
 * string completed (then *emit is the text before it, m->matched its index, and every later
 * feed releases nothing and returns 1 until reset), 0 when not, PLUME_ENOMEM. */
int plume_stop_matcher_feed(plume_stop_matcher *m, const char *piece, size_t len,
                            const char **emit, size_t *n_emit);
/* End of generation without a stop string: release the held tail (its length is returned,
 * *emit points at it). Returns 0 after a match. */
size_t plume_stop_matcher_flush(plume_stop_matcher *m, const char **emit);

#endif /* PLUME_CHAT_H */
