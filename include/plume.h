/* plume.h -- a featherweight C runtime for Gemma 4 E2B/E4B.
 *
 * Overview
 * --------
 * A model is a *bundle* directory (see docs/BUNDLE.md) written by `plume convert` from a
 * Hugging Face checkpoint. plume_model_open() memory-maps it; nothing is read whole. A
 * session holds the state of one conversation: the KV caches of the three chunks of the
 * model, and the tokens fed so far. Many sessions may share one model.
 *
 *     plume_model *m; plume_session *s; char *err = NULL;
 *     if (plume_model_open(&m, "gemma-4-e2b", NULL, &err)) { puts(err); free(err); ... }
 *     plume_session_new(&s, m, NULL, &err);
 *     int32_t ids[64]; int32_t n = plume_tokenize(plume_model_tokenizer(m), text, len, ids, 64);
 *     float *logits = malloc(plume_model_n_vocab(m) * sizeof(float));
 *     plume_session_feed(s, ids, n, logits, 0, &err);   // prefill; logits of the last token
 *     ... sample an id, feed it (n = 1), repeat ...
 *     plume_session_free(s); plume_model_free(m);
 *
 * Conventions
 * -----------
 * - Functions that can fail return 0 on success or a negative PLUME_E* code. When `err` is
 *   not NULL, *err receives a malloc'd one-line message (free() it) naming the file, key or
 *   tensor at fault.
 * - Token ids and counts are int32_t, byte sizes size_t. Every _new/_open has a _free;
 *   _free(NULL) is a no-op.
 * - The library has no global mutable state. A model is read-only after open and may be
 *   used by several threads through distinct sessions.
 * - Every function declared here is marked PLUME_API: the library is built with
 *   -fvisibility=hidden, so these are the only names libplume.so exports (tests/test_exports.py).
 */
#ifndef PLUME_H
#define PLUME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLUME_VERSION "0.1.0"

/* What libplume exports: every declaration below carries it; the rest of the library is
 * hidden (built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define PLUME_API __attribute__((visibility("default")))
#else
#define PLUME_API
#endif

enum {
    PLUME_OK = 0,
    PLUME_EIO = -1,       /* a file could not be opened, read or written */
    PLUME_EFORMAT = -2,   /* a file's bytes are not what they should be */
    PLUME_ENOMEM = -3,    /* out of memory */
    PLUME_EINVAL = -4,    /* a bad argument: id out of vocabulary, bad flag value, ... */
    PLUME_ERANGE = -5,    /* more tokens than the context holds */
    PLUME_EMISMATCH = -6, /* a state file from another bundle, or a shape that disagrees */
    PLUME_ECANCELED = -7, /* an encode stopped by its abort callback (plume_encoder_set_abort) */
};

/* ---------------------------------------------------------------------------------------
 * Tokenizer: Gemma 4 BPE (docs/TOKENIZER.md)
 * ------------------------------------------------------------------------------------- */
typedef struct plume_tokenizer plume_tokenizer;

/* Build a tokenizer from a Hugging Face tokenizer.json (slow: parses the JSON). */
PLUME_API int plume_tokenizer_open_json(plume_tokenizer **out, const char *path, char **err);
/* Open the compact binary form written by plume_tokenizer_save() (memory-mapped, fast). */
PLUME_API int plume_tokenizer_open(plume_tokenizer **out, const char *path, char **err);
/* Write the compact binary form (crash-safe: temporary file + rename). */
PLUME_API int plume_tokenizer_save(const plume_tokenizer *tok, const char *path, char **err);
PLUME_API void plume_tokenizer_free(plume_tokenizer *tok);
PLUME_API int32_t plume_tokenizer_n_vocab(const plume_tokenizer *tok);

/* Encode UTF-8 text (no BOS added). Writes at most `cap` ids; returns the number of ids the
 * text needs (call again with a larger buffer if it is > cap), or PLUME_EINVAL if the text
 * is not valid UTF-8. */
PLUME_API int32_t plume_tokenize(const plume_tokenizer *tok, const char *text, size_t len, int32_t *ids,
                                 int32_t cap);

/* Decode ids to UTF-8 (Replace '▁'->' ', byte fallback, fuse; invalid byte runs become
 * U+FFFD per maximal invalid subpart). Special tokens are dropped when skip_special != 0.
 * Writes at most cap bytes plus a NUL when cap > 0; returns the length the text needs, or
 * PLUME_EINVAL for an id outside the vocabulary. */
PLUME_API int64_t plume_detokenize(const plume_tokenizer *tok, const int32_t *ids, int32_t n,
                                   int32_t skip_special, char *out, size_t cap);

/* A streaming decoder: feeds one id at a time and releases only complete UTF-8 characters,
 * holding an incomplete trailing sequence until the next id. */
typedef struct {
    const plume_tokenizer *tok;
    int32_t skip_special;
    uint8_t pending[8]; /* bytes of an unfinished character */
    int32_t n_pending;
} plume_detok_stream;

PLUME_API void plume_detok_stream_init(plume_detok_stream *ds, const plume_tokenizer *tok,
                                       int32_t skip_special);
/* Append the text that id completes to out (NUL-terminated, at most cap-1 bytes; cap >= 64
 * is always enough for one id); returns its length, or PLUME_EINVAL for a bad id. */
PLUME_API int32_t plume_detok_stream_put(plume_detok_stream *ds, int32_t id, char *out, size_t cap);
/* Flush what is still pending (an incomplete character becomes U+FFFD). */
PLUME_API int32_t plume_detok_stream_flush(plume_detok_stream *ds, char *out, size_t cap);

/* Whether id is one of the special tokens (<bos>, <|turn>, ...). */
PLUME_API int32_t plume_token_is_special(const plume_tokenizer *tok, int32_t id);
/* The id of the token whose text is exactly text: a special token by its name ("<bos>",
 * "<|turn>", "<turn|>"), another by its piece (U+2581 for a space: "\xe2\x96\x81the"); -1
 * when the vocabulary has none. */
PLUME_API int32_t plume_token_find(const plume_tokenizer *tok, const char *text);
/* The bytes id adds to the text decoded with special tokens kept, before byte tokens are
 * fused into characters: a byte token's one byte, any other piece's UTF-8 with U+2581 as a
 * space, a special token's text. Writes at most cap bytes; returns the length, or
 * PLUME_EINVAL for an id outside the vocabulary. */
PLUME_API int32_t plume_token_bytes(const plume_tokenizer *tok, int32_t id, uint8_t *out, int32_t cap);

/* ---------------------------------------------------------------------------------------
 * Chat format: the E2B chat template, rendered in C (docs/CHAT.md)
 * ------------------------------------------------------------------------------------- */
/* One tool call made by an assistant turn (OpenAI's tool_calls[i]). */
typedef struct {
    const char *id;        /* the call's id, matched by a tool message's tool_call_id; or NULL */
    const char *name;      /* function name, required */
    const char *arguments; /* JSON object text (OpenAI's arguments string); NULL or "null": none */
} plume_chat_tool_call;

/* One message: a role and a plain string, all that plume_chat_render() needs. */
typedef struct {
    const char *role;    /* "system", "developer", "user", "assistant" (or "model") */
    const char *content; /* UTF-8, or NULL */
} plume_chat_message;

/* One message with everything the template renders (plume_chat_render_full, the full
 * renderer; plume_chat_message is the plain subset). role and content come first, as in
 * plume_chat_message; the other fields are optional (zero: unused), so designated
 * initializers need name only what they use. (A separate type, so that {role, content}
 * initializers of plume_chat_message stay complete under -Wmissing-field-initializers.) */
typedef struct {
    const char *role;    /* "system", "developer", "user", "assistant" (or "model"), "tool" */
    const char *content; /* UTF-8, or NULL */
    const char *const *parts; /* [n_parts] content as a list of text parts (then content is */
    int32_t n_parts;          /*  NULL), as OpenAI's [{type: "text", text}, ...] */
    const char *reasoning_content;          /* the turn's thought (OpenAI reasoning_content) */
    const plume_chat_tool_call *tool_calls; /* [n_tool_calls] calls made by this turn */
    int32_t n_tool_calls;
    const char *tool_call_id; /* role "tool": the id of the call answered, or NULL */
    const char *name;         /* role "tool": the function's name, used when no call matches */
    const int32_t *part_types;/* [n_parts] PLUME_CHAT_PART_*, or NULL: all text. A media part
                                 renders the template's placeholder where it is (<|image|>,
                                 <|audio|>, <|video|>; its parts[] entry is ignored, may be NULL),
                                 which plume_prompt_expand() then turns into the medium's run */
} plume_chat_message_full;

/* The kinds of content parts (OpenAI's {type: "text" | "image_url" | "input_audio", ...}). */
enum { PLUME_CHAT_PART_TEXT = 0, PLUME_CHAT_PART_IMAGE = 1, PLUME_CHAT_PART_AUDIO = 2, PLUME_CHAT_PART_VIDEO = 3 };

/* Rendering options; zero-initialized is the template's defaults. */
typedef struct {
    int32_t add_generation_prompt; /* end with "<|turn>model\n" (as the template decides) */
    int32_t enable_thinking;       /* "<|think|>" in the system turn */
    int32_t preserve_thinking;     /* keep reasoning_content of earlier turns with tool calls */
    const char *tools_json;        /* OpenAI "tools" array as JSON text, or NULL */
} plume_chat_options;

/* Render a conversation as the template does (starts with "<bos>"). *out is malloc'd. */
PLUME_API int plume_chat_render(const plume_chat_message *msgs, int32_t n, int32_t add_generation_prompt,
                                int32_t enable_thinking, char **out, char **err);
/* The same with tools, tool calls and responses, content parts and reasoning (opt may be
 * NULL: the defaults). 0, PLUME_EINVAL (a bad role, bad tools_json or arguments JSON, ...: the
 * message names the message or tool and the JSON offset) or PLUME_ENOMEM. */
PLUME_API int plume_chat_render_full(const plume_chat_message_full *msgs, int32_t n,
                                     const plume_chat_options *opt, char **out, char **err);

/* Streaming parse of generated text (decoded with special tokens kept) into typed deltas:
 * answer text, thought text, complete tool calls with JSON arguments. Never fails on what
 * the model wrote: anything that is not a well-formed tool call is content. */
typedef struct plume_chat_parser plume_chat_parser;

enum {
    PLUME_CHAT_CONTENT = 0,   /* answer text */
    PLUME_CHAT_REASONING = 1, /* thought text (the "<|channel>thought\n...<channel|>" span) */
    PLUME_CHAT_TOOL_CALL = 2, /* one complete tool call */
};

/* One piece of parsed output; pointers are valid until the next call on the parser. */
typedef struct {
    int32_t type;          /* PLUME_CHAT_CONTENT, _REASONING or _TOOL_CALL */
    const char *text;      /* content, reasoning: [len] bytes, NUL-terminated; call: NULL */
    size_t len;
    const char *name;      /* tool call: the function name; otherwise NULL */
    const char *arguments; /* tool call: a JSON object, e.g. {"city":"Paris"}; otherwise NULL */
} plume_chat_delta;

/* A parser for one generation. in_thought: the prompt already opened the thought channel
 * (the template ends with "<|channel>thought\n" after a tool response when thinking is on).
 * 0, PLUME_EINVAL (p is NULL) or PLUME_ENOMEM. */
PLUME_API int plume_chat_parser_new(plume_chat_parser **p, int32_t in_thought, char **err);
/* Free the parser. NULL is a no-op. */
PLUME_API void plume_chat_parser_free(plume_chat_parser *p);
/* Feed decoded text, markers read out of it; *deltas receives *n_deltas deltas (possibly 0:
 * text that may be the start of a marker is held back). Returns 0, 1 once an end marker
 * ("<turn|>", "<eos>", "<|tool_response>") was seen (later text is ignored), or PLUME_ENOMEM. */
PLUME_API int plume_chat_parser_feed(plume_chat_parser *p, const char *piece, size_t len,
                                     const plume_chat_delta **deltas, int32_t *n_deltas);
/* Feed one generated token's piece (its text, special tokens kept) and whether the token is a
 * special one (plume_token_is_special). The markers are single special tokens: a special
 * token whose text is a marker is acted on, and text is never read as a marker, however it is
 * spelled (a model quoting "<turn|>" or "<|tool_call>call:f{}<tool_call|>" with ordinary
 * tokens writes content). This is how a generation must be fed; plume_chat_parser_feed reads
 * markers out of text, for text known to be the template's. Once this is called the parser
 * stays in this mode. Returns as plume_chat_parser_feed. */
PLUME_API int plume_chat_parser_feed_token(plume_chat_parser *p, const char *piece, size_t len, int32_t special,
                                           const plume_chat_delta **deltas, int32_t *n_deltas);
/* End of generation: release what is held (an unfinished tool call comes back as content).
 * 0 or PLUME_ENOMEM. */
PLUME_API int plume_chat_parser_flush(plume_chat_parser *p, const plume_chat_delta **deltas,
                                      int32_t *n_deltas);
/* End of a generation held to a tool call (a forced tool choice) that the token limit cut
 * short: as plume_chat_parser_flush, but an unfinished call comes back as a tool-call delta:
 * its name as far as the model wrote it (a prefix of a declared name, possibly ""; the caller
 * knows the tools it offered) and its arguments the JSON object of the members written in
 * full ("{}" when none is). 0 or PLUME_ENOMEM. */
PLUME_API int plume_chat_parser_flush_cut(plume_chat_parser *p, const plume_chat_delta **deltas,
                                          int32_t *n_deltas);

/* ---------------------------------------------------------------------------------------
 * Sampling (docs/SAMPLING.md)
 * ------------------------------------------------------------------------------------- */
typedef struct {
    float temperature;       /* <= 0: greedy (argmax) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; divides positive / multiplies negative logits */
    int32_t repeat_last_n;   /* how many recent tokens the penalties look at (-1: all) */
    float presence_penalty;  /* 0: off; subtracted once per distinct recent token */
    float frequency_penalty; /* 0: off; subtracted per occurrence */
    uint64_t seed;
} plume_sampler_params;

typedef struct plume_sampler plume_sampler;

/* The model's generation config: temperature 1.0, top-k 64, top-p 0.95, no penalties. */
PLUME_API plume_sampler_params plume_sampler_default_params(void);
PLUME_API int plume_sampler_new(plume_sampler **out, const plume_sampler_params *p, int32_t n_vocab,
                                char **err);
PLUME_API void plume_sampler_free(plume_sampler *s);
/* Record an id as part of the history the penalties see (prompt and generated tokens). */
PLUME_API void plume_sampler_accept(plume_sampler *s, int32_t id);
/* Forget the history and reseed. */
PLUME_API void plume_sampler_reset(plume_sampler *s);
/* Draw the next id from logits [n_vocab] (not modified). */
PLUME_API int32_t plume_sampler_sample(plume_sampler *s, const float *logits);
/* A logit bias (OpenAI's logit_bias): bias[i] is added to the logit of ids[i] before the
 * chain (then penalties, top-k, temperature, ...), for every later draw; an id given twice
 * gets the sum; -INFINITY bans an id; n = 0 clears the map. Costs a binary search per biased
 * id per draw, nothing else. 0, or PLUME_EINVAL (an id outside [0, n_vocab), a NaN or +inf
 * bias: nothing changed) or PLUME_ENOMEM. */
PLUME_API int plume_sampler_set_bias(plume_sampler *s, const int32_t *ids, const float *bias, int32_t n,
                                     char **err);

/* Ids plume_sampler_rewind() can take back beyond the penalties' window. */
#define PLUME_SAMPLER_UNDO 64
/* Forget the last n accepted ids (a rejected speculative draft): the penalties see the history
 * they saw before those were accepted. 0, or PLUME_EINVAL (nothing changed) for a negative n
 * or more than the history holds (at most PLUME_SAMPLER_UNDO ids can come back into the
 * window). */
PLUME_API int plume_sampler_rewind(plume_sampler *s, int32_t n);

/* The distribution plume_sampler_sample() draws from, for speculative sampling: prepare runs
 * the same chain (penalties, top-k, temperature, top-p, min-p) on logits without drawing and
 * keeps the result; it returns the number of ids with a probability > 0, or PLUME_EINVAL.
 * plume_sampler_prob() gives the probability of an id in it (0 if none is prepared), and
 * plume_sampler_draw() draws from it with id `without` removed and the rest renormalized
 * (-1: nothing removed), or returns PLUME_EINVAL if nothing would be left. Greedy (temperature
 * <= 0) distributions are one id with probability 1. A sample() forgets the prepared one. */
PLUME_API int32_t plume_sampler_prepare(plume_sampler *s, const float *logits);
PLUME_API double plume_sampler_prob(const plume_sampler *s, int32_t id);
PLUME_API int32_t plume_sampler_draw(plume_sampler *s, int32_t without);
/* A uniform number in [0, 1) from the sampler's generator. */
PLUME_API double plume_sampler_uniform(plume_sampler *s);
/* A format the output is held to (the structured-output API below). */
typedef struct plume_constraint plume_constraint;
/* Hold the sampler's draws to a constraint (NULL: none), which must outlive the attachment.
 * From now on
 * plume_sampler_accept() also advances c and plume_sampler_rewind() takes it back, so attach
 * it after the prompt's ids were accepted. sample/prepare/draw see only the ids c allows;
 * with no id allowed (a DEAD constraint) they return PLUME_EINVAL, and PLUME_ENOMEM when
 * deciding which ids are allowed passed the recognizer's limits (status LIMIT). */
PLUME_API void plume_sampler_set_constraint(plume_sampler *s, plume_constraint *c);
/* How many of ids[0, n), taken in order from the sampler's position, its constraint allows
 * (n without one): speculative drafts are cut there. The constraint is left as it was. */
PLUME_API int32_t plume_sampler_allowed_prefix(plume_sampler *s, const int32_t *ids, int32_t n);

/* ---------------------------------------------------------------------------------------
 * Structured output: JSON Schema, JSON mode, GBNF grammars, forced tool calls
 * (docs/STRUCTURED.md)
 *
 * A constraint holds generation to a format: at each step only the tokens that keep the text
 * a prefix of something the format accepts are allowed, and the end of the turn (<turn|>,
 * <eos>; after a tool call also <|tool_response>) only where the value is complete. Formats
 * compile to GBNF grammars (what plume_json_schema_to_grammar() returns), run as a pushdown
 * automaton over bytes; the vocabulary's bytes are indexed once per tokenizer (plume_vocab).
 *
 *     plume_vocab *v;                    // once per tokenizer (~0.1 s, ~5 MB), shareable
 *     plume_vocab_new(&v, plume_model_tokenizer(m), &err);
 *     plume_constraint *c;               // a schema outside the subset is refused, named
 *     if (plume_constraint_new_json_schema(&c, v, schema, strlen(schema), NULL, &err)) ...
 *     ... feed the prompt and plume_sampler_accept() its ids ...
 *     plume_sampler_set_constraint(smp, c);   // from now on accept/rewind move c too
 *     ... sample, accept, feed as usual (speculative decoding included) ...
 *
 * A sampler with a constraint draws from exactly the distribution of the unconstrained chain
 * over the logits with every disallowed id set to -inf; greedy and top-k find the allowed
 * candidates best-first and read the whole mask only when the best ones are refused.
 * ------------------------------------------------------------------------------------- */
typedef struct plume_vocab plume_vocab;

/* The tokens of tok as bytes, sorted for mask walks (tok must outlive it). Read-only once
 * made: constraints on many threads may share one. 0 or PLUME_ENOMEM / PLUME_EINVAL. */
PLUME_API int plume_vocab_new(plume_vocab **out, const plume_tokenizer *tok, char **err);
PLUME_API void plume_vocab_free(plume_vocab *v);

typedef struct {
    int32_t thinking; /* 0: the format starts at the first token; 1: a thought
                         ("<|channel>...<channel|>", free text) may come first; 2: the prompt
                         opened the thought (it ends with "<|channel>thought\n"): free text up
                         to "<channel|>" first */
} plume_constraint_params;

PLUME_API plume_constraint_params plume_constraint_default_params(void);
/* A value valid against a JSON Schema (the subset of docs/STRUCTURED.md). PLUME_EINVAL names
 * what is refused and where ("json schema: #/properties/a: \"uniqueItems\" is not supported"). */
PLUME_API int plume_constraint_new_json_schema(plume_constraint **out, const plume_vocab *v, const char *schema,
                                               size_t len, const plume_constraint_params *p, char **err);
/* Any JSON object (OpenAI's json_object, Ollama's format "json"). */
PLUME_API int plume_constraint_new_json(plume_constraint **out, const plume_vocab *v, const plume_constraint_params *p,
                                        char **err);
/* Text matching a GBNF grammar (start rule root; <[ID]> and <TEXT> name special tokens). */
PLUME_API int plume_constraint_new_grammar(plume_constraint **out, const plume_vocab *v, const char *gbnf, size_t len,
                                           const plume_constraint_params *p, char **err);
/* A tool call in Gemma 4's format, arguments valid against the function's parameters:
 * tools_json is OpenAI's "tools" array; tool_choice "required" (one or more calls of any of
 * the tools) or a function's name, or its JSON form {"type":"function","function":{"name":..}}
 * (one call of that function). */
PLUME_API int plume_constraint_new_tool_call(plume_constraint **out, const plume_vocab *v, const char *tools_json,
                                             const char *tool_choice, const plume_constraint_params *p, char **err);
PLUME_API void plume_constraint_free(plume_constraint *c);

/* Whether GBNF text would make a constraint, without a vocabulary index (a server checks a
 * request's grammar before queueing it): parsed (errors name the line and column, or the
 * rule), and when tok is not NULL its special-token references resolved against tok and its
 * start state made within the recognizer's per-step budget (docs/STRUCTURED.md "Limits").
 * 0, PLUME_EINVAL with the message, or PLUME_ENOMEM. */
PLUME_API int plume_grammar_check(const char *gbnf, size_t len, const plume_tokenizer *tok, char **err);

/* JSON numbers as written. cJSON (the library plume and its tools read JSON with) keeps a
 * number as a double, which rounds 9007199254740993 and 1e400; a schema's bounds and a
 * request's arguments must pass on exactly what was written. Walk the JSON text [text, end)
 * beside the cJSON tree node was parsed from, setting each number node's valuestring to its
 * own text (malloc'd; cJSON_Delete frees it). Returns the end of the value's text, or NULL
 * where text and tree part (nothing more is kept: a number that already has a valuestring
 * parts them); *oom is set to 1 when a copy cannot be made. */
struct cJSON;
PLUME_API const char *plume_json_keep_numbers(struct cJSON *node, const char *text, const char *end, int32_t *oom);

/* The GBNF grammars the constructors above compile (malloc'd), for inspection. */
PLUME_API int plume_json_schema_to_grammar(const char *schema, size_t len, char **gbnf, char **err);
PLUME_API int plume_tool_call_grammar(const char *tools_json, const char *tool_choice, char **gbnf, char **err);

enum {
    PLUME_CONSTRAINT_OPEN = 0,     /* more text is needed */
    PLUME_CONSTRAINT_COMPLETE = 1, /* the value is complete: the end of turn is allowed */
    PLUME_CONSTRAINT_DONE = 2,     /* the end of turn was accepted: nothing more */
    PLUME_CONSTRAINT_DEAD = 3,     /* a disallowed id was accepted (rewind it) */
    PLUME_CONSTRAINT_LIMIT = 4,    /* a step passed the recognizer's limits: the grammar is too
                                      ambiguous or nested too deep for the text (an error; the
                                      sampler returns PLUME_ENOMEM until reset) */
};
PLUME_API int32_t plume_constraint_status(plume_constraint *c);
/* Whether id may come next (1 or 0). */
PLUME_API int32_t plume_constraint_allows(plume_constraint *c, int32_t id);
/* Advance by id: 0, or PLUME_EINVAL when it was not allowed (the constraint is then DEAD
 * until rewound), or PLUME_ENOMEM. */
PLUME_API int plume_constraint_accept(plume_constraint *c, int32_t id);
/* Take back the last n accepted ids (any n up to what was accepted): 0 or PLUME_EINVAL. */
PLUME_API int plume_constraint_rewind(plume_constraint *c, int32_t n);
/* Back to the start (a LIMIT status is cleared too). */
PLUME_API void plume_constraint_reset(plume_constraint *c);
/* Ids accepted since the start (less those rewound). */
PLUME_API int32_t plume_constraint_n_accepted(const plume_constraint *c);
/* The allowed ids as a bitmap: bit (id & 31) of bits[id >> 5], (n_vocab + 31) / 32 words.
 * Returns how many are allowed, or a negative PLUME_E*. */
PLUME_API int32_t plume_constraint_mask(plume_constraint *c, uint32_t *bits);

/* ---------------------------------------------------------------------------------------
 * Model
 * ------------------------------------------------------------------------------------- */
typedef struct plume_model plume_model;

typedef struct {
    const char *isa;   /* NULL: best the CPU has ($PLUME_ISA overrides); "scalar", "avx2",
                          "avx512", "neon" */
    int32_t n_threads; /* <= 0: physical cores */
    int32_t exact;     /* 0 (default): q8/q4 bundles quantize activations to int8, one
                          scale per block of 32, and multiply int8 by int8 (VNNI, AVX2, NEON
                          dot products) in every step: decode and prefill faster, ~1% relative
                          error per matmul (docs/BENCHMARKS.md "Int8 activations accuracy").
                          1: float32 activations everywhere, the reference. No effect on
                          f32/bf16 bundles, nor where the CPU has no int8 kernels (scalar). */
} plume_model_params;

PLUME_API plume_model_params plume_model_default_params(void);
/* Map a bundle directory and validate every file in it. */
PLUME_API int plume_model_open(plume_model **out, const char *bundle_dir, const plume_model_params *p,
                               char **err);
PLUME_API void plume_model_free(plume_model *m);
PLUME_API int32_t plume_model_n_vocab(const plume_model *m);
PLUME_API int32_t plume_model_n_ctx(const plume_model *m);    /* context_length of the bundle */
PLUME_API int32_t plume_model_n_layers(const plume_model *m);
PLUME_API int32_t plume_model_dim(const plume_model *m);       /* the decoder's width: floats of a soft token */
PLUME_API const char *plume_model_isa(const plume_model *m);  /* the kernels in use */
PLUME_API int32_t plume_model_n_threads(const plume_model *m);
PLUME_API const char *plume_model_weights(const plume_model *m); /* "f32", "bf16", "q8", "q4" */
/* Bytes of weights one decode step reads (layers, PLE projection, head). */
PLUME_API uint64_t plume_model_decode_bytes(const plume_model *m);
/* The tokenizer of the bundle, or NULL if it has none. */
PLUME_API const plume_tokenizer *plume_model_tokenizer(const plume_model *m);
/* Whether id ends a model turn, so that generation stops there: one of the config's eos ids
 * (config.json's eos_token_id, the bundle's eos_token_ids) or the tokenizer's <eos>, <turn|>
 * or <|tool_response> (a model that made a tool call waits for its answer). */
PLUME_API int32_t plume_model_ends_turn(const plume_model *m, int32_t id);

/* ---- benchmarks (plume bench): how a model is read, and how fast this machine reads -------
 * Figures for measuring, not for inference. */
/* How the q8/q4 layer weights are read: "rows", "tiles" (the kernels in use read the tiles as
 * they are) or "tiles-unpacked" (they read rows: each group of 16 is unpacked first, slowly;
 * convert with --layout rows for this CPU). "rows" for f32/bf16 bundles. */
PLUME_API const char *plume_model_layout(const plume_model *m);
/* The share of the resident bytes of the weights every step reads (chunks, PLE projection,
 * tied head) that huge pages map; 0 when none or unknown. */
PLUME_API double plume_model_huge_share(const plume_model *m);
/* The model's threads stream the weights a step reads (as mapped) `passes` times, in items of
 * `piece` bytes (rounded up to 64; 0: 1 MiB); the best pass in GB/s, 0 if none. *read (if not
 * NULL): bytes a pass read. */
PLUME_API double plume_model_stream_bandwidth(plume_model *m, int32_t passes, size_t piece, uint64_t *read);
/* n_threads threads (<= 0: physical cores) stream a fresh buffer of `bytes` (rounded down to
 * 4 MiB; every page written first) `passes` times the same way; the best pass in GB/s, 0 when
 * the buffer or the threads cannot be had. */
PLUME_API double plume_memory_bandwidth(int32_t n_threads, size_t bytes, int32_t passes);
/* Threads profile (plume bench --threads-profile): from plume_model_profile_start until
 * plume_model_profile_stop, m's threads record per region (matmuls, attention, norms, ...) the
 * time on a parallel loop's items, the caller's serial work between loops, its waits at the
 * loops' ends and the workers' join latency. Call both between steps, from the thread that
 * runs them; one recording at a time per model. 0 or PLUME_ENOMEM. */
typedef struct plume_prof plume_prof;
PLUME_API int plume_model_profile_start(plume_model *m, plume_prof **out, char **err);
/* Stop m's recording p, which covered `steps` steps, and free it: its report as Markdown
 * (ms per step per region and thread, the serial share, each thread's busy share, an Amdahl
 * projection) under `title`, malloc'd (free() it); NULL when out of memory. */
PLUME_API char *plume_model_profile_stop(plume_model *m, plume_prof *p, int64_t steps, const char *title);

/* ---------------------------------------------------------------------------------------
 * Images in (docs/MEDIA.md)
 *
 * An image is decoded once (PNG, JPEG or WebP, sniffed from the bytes; EXIF orientation
 * applied; 8-bit RGB as Hugging Face's processor sees it: alpha dropped), then encoded by the
 * bundle's vision tower into soft tokens: a plume_embd of N rows of the decoder's width. A
 * prompt carries, where the image goes, <|image> then N image placeholders (the model's
 * image_token_id) then <image|>; plume_prompt_expand() writes those runs from one
 * placeholder per image, and plume_session_feed_media() feeds the prompt with the runs filled
 * by the images' rows, in order.
 *
 *     plume_image *img; plume_embd *e;
 *     plume_image_load(&img, "cat.jpg", &err);
 *     plume_image_encode(&e, m, img, NULL, &err);           // the tower: N = 256 for a square
 *     ... render the chat with one placeholder where the image goes, tokenize it ...
 *     n = plume_prompt_expand(m, ids, n, &e, 1, big, cap, &err);
 *     plume_session_feed_media(s, big, n, &e, 1, logits, 0, &err);
 *
 * A session remembers which image filled which positions (a 64-bit key of its resized
 * pixels), so plume_session_feed_prompt_media() reuses the cache of a conversation re-sent
 * with the same images, a rewind into an image recomputes it, and a saved session keeps them.
 * ------------------------------------------------------------------------------------- */
typedef struct plume_image plume_image; /* decoded pixels */
typedef struct plume_embd plume_embd;   /* soft tokens of one image or one audio */

/* Decode an image file / bytes. PLUME_EFORMAT for anything that is not a whole PNG, JPEG or
 * WebP (truncated, corrupt, zero-sized, more than 64 M pixels or 65535 a side: checked before
 * the pixels are allocated); PLUME_EIO when the file cannot be read. */
PLUME_API int plume_image_load(plume_image **out, const char *path, char **err);
PLUME_API int plume_image_decode(plume_image **out, const void *bytes, size_t len, char **err);
/* The size an image's bytes declare (PNG IHDR, JPEG frame header, WebP canvas; as stored,
 * before EXIF orientation), read from the header without decoding or allocating pixels: what a
 * server checks against its memory budget before plume_image_decode. PLUME_EFORMAT when the
 * header cannot be read or declares a size the decoder refuses (zero, more than 64 M pixels or
 * 65535 a side), as plume_image_decode would. */
PLUME_API int plume_image_size(const void *bytes, size_t len, int32_t *width, int32_t *height, char **err);
/* An image from RGB pixels [height, width, 3] (copied). */
PLUME_API int plume_image_from_rgb(plume_image **out, const uint8_t *rgb, int32_t width, int32_t height, char **err);
PLUME_API void plume_image_free(plume_image *img);
PLUME_API int32_t plume_image_width(const plume_image *img);
PLUME_API int32_t plume_image_height(const plume_image *img);
PLUME_API const uint8_t *plume_image_rgb(const plume_image *img); /* [height, width, 3] */

typedef struct {
    int32_t max_tokens; /* the budget of soft tokens: 70, 140, 280, 560 or 1120; 0: 280 (the
                           model's default_output_length) */
} plume_image_params;

PLUME_API plume_image_params plume_image_default_params(void);
/* Whether the bundle carries a vision tower (plume convert of a checkpoint that has one). */
PLUME_API int32_t plume_model_has_vision(const plume_model *m);
/* The model's media token ids: "image" (the placeholder), "boi", "eoi", "audio", "boa",
 * "eoa", "video"; -1 for an unknown name or an id the checkpoint did not give. */
PLUME_API int32_t plume_model_media_token(const plume_model *m, const char *name);
/* How many soft tokens img gives at a budget (p may be NULL), and its key (the hash of its
 * resized pixels, what plume_embd_key() of its encoding will be; key may be NULL): the
 * resize without the tower, for a caller that wants to lay out a prompt or look up a cache
 * first. 0, PLUME_EINVAL (a budget outside the list, no vision tower). */
PLUME_API int plume_image_tokens(const plume_model *m, const plume_image *img, const plume_image_params *p,
                                 int32_t *n_tokens, uint64_t *key, char **err);
/* Shrink a decoded img in place to the pixels the vision tower reads at a budget (p may be
 * NULL): the resize plume_image_encode does, done once right after decoding, so a large image
 * is held at a few MB (an 8000 x 8000 photo: 192 MB decoded, 1.7 MB at 280 tokens) until it is
 * encoded. plume_image_tokens / plume_image_encode of the shrunk image at the same budget give
 * exactly what they give for the decoded one (key included); at another budget PLUME_EINVAL.
 * plume_image_width/height/rgb then report the shrunk pixels. An image no larger than what the
 * tower reads is kept as it is. 0, PLUME_EINVAL (no vision tower, a bad budget, a grid past
 * the tower's positions), PLUME_ENOMEM. */
PLUME_API int plume_image_shrink(plume_image *img, const plume_model *m, const plume_image_params *p, char **err);
/* Encode img with the vision tower (resize, patches, tower, 3x3 pooling, embed_vision): N rows
 * of the decoder's width, exactly as Hugging Face's model computes them (float32). Runs on
 * the model's threads. PLUME_EINVAL when the bundle has no vision tower or p is bad. */
PLUME_API int plume_image_encode(plume_embd **out, plume_model *m, const plume_image *img, const plume_image_params *p,
                                 char **err);
/* Soft tokens given by the caller ([n, dim] copied): a tower plume does not run, a test.
 * placeholder: the token id whose positions they fill; key: their identity in a session's
 * history (0: a hash of the rows). */
PLUME_API int plume_embd_from_data(plume_embd **out, const float *rows, int32_t n, int32_t dim, int32_t placeholder,
                                   uint64_t key, char **err);
PLUME_API void plume_embd_free(plume_embd *e);
PLUME_API int32_t plume_embd_n_tokens(const plume_embd *e);
PLUME_API int32_t plume_embd_dim(const plume_embd *e);
PLUME_API const float *plume_embd_data(const plume_embd *e);     /* [n_tokens, dim] */
PLUME_API int32_t plume_embd_placeholder(const plume_embd *e);   /* the token id it fills */
PLUME_API uint64_t plume_embd_key(const plume_embd *e);          /* its identity (never 0) */
/* The key a session holds at the position that row `row` of a medium of key `key` filled
 * (never 0; a text position holds 0): what plume_session_keys() reports, so a caller that
 * schedules prompts itself (a server picking the slot that shares the longest prefix) can
 * compare a prompt with media against a session's history before encoding anything. */
PLUME_API uint64_t plume_embd_row_key(uint64_t key, int32_t row);

/* Expand a prompt: each single placeholder of media[i] (their placeholder ids, in order) is
 * replaced by its run: for an image <|image> + N x <|image|> + <image|>, for audio <|audio> +
 * N x <|audio|> + <audio|>, for a video its frames' blocks ("Video in" below). Writes at most
 * cap ids to out and returns how many the expansion needs (call again with more room if > cap),
 * or PLUME_EINVAL when the prompt's placeholders and the media do not pair up. */
PLUME_API int32_t plume_prompt_expand(const plume_model *m, const int32_t *ids, int32_t n,
                                      const plume_embd *const *media, int32_t n_media, int32_t *out, int32_t cap,
                                      char **err);

/* ---------------------------------------------------------------------------------------
 * Audio in (docs/MEDIA.md)
 *
 * An audio file is decoded once (WAV, FLAC, Ogg Vorbis, Ogg Opus or MP3; channels averaged;
 * resampled to the 16 kHz the model hears), then encoded by the bundle's audio tower (log-mel
 * features, conformer, embed_audio) into soft tokens: a plume_embd of N rows, about 25 a
 * second (750 for 30 s). A prompt carries <|audio> + N audio placeholders + <audio|> where
 * the audio goes; plume_prompt_expand() writes that run from one placeholder (the model's
 * audio_token_id), and the session functions above feed it as they feed images: images fill
 * the image runs in order, audio the audio runs in order.
 *
 *     plume_audio *a; plume_embd *e;
 *     plume_audio_load(&a, "question.mp3", &err);
 *     plume_audio_encode(&e, m, a, &err);                    // N = 250 for 10 s
 *     ... a prompt with one <|audio|> where it goes, tokenized, then plume_prompt_expand ...
 *
 * The model hears clips of at most 30 s (Hugging Face's processor cuts the rest off). plume
 * keeps all of it: longer audio is cut into consecutive 30 s clips, each encoded alone, their
 * tokens one after the other in the one run (as llama.cpp does); up to 10 minutes.
 * ------------------------------------------------------------------------------------- */
typedef struct plume_audio plume_audio; /* decoded samples: mono, 16 kHz */
#define PLUME_AUDIO_RATE 16000           /* samples per second the audio tower hears */
#define PLUME_AUDIO_CLIP_SAMPLES 480000  /* the most one clip holds: 30 s */

/* Decode an audio file / bytes. PLUME_EFORMAT for anything that is not whole audio
 * libsndfile reads (not audio, truncated, no samples, NaN samples, a rate outside
 * 1-768 kHz, longer than 600 s: checked on the header before decoding); PLUME_EIO when the
 * file cannot be read. */
PLUME_API int plume_audio_load(plume_audio **out, const char *path, char **err);
PLUME_API int plume_audio_decode(plume_audio **out, const void *bytes, size_t len, char **err);
/* The most bytes plume_audio_decode of these bytes holds at once (the 16 kHz samples as they
 * grow, the block buffers, the resampler), from the header alone (no sample decoded): what a
 * server reserves before decoding. A length the header gives exactly is held to (a stream
 * longer is refused as corrupt); an MP3's (an estimate) or none: the 600 s cap. 0, or
 * PLUME_EFORMAT for a header plume_audio_decode refuses. */
PLUME_API int plume_audio_decode_peak(const void *bytes, size_t len, uint64_t *peak, char **err);
/* Audio from mono float samples at rate Hz (copied; resampled to 16 kHz unless rate is
 * 16000): for a caller that records or decodes itself. PLUME_EINVAL for a bad rate, length or
 * a sample that is not finite. */
PLUME_API int plume_audio_from_pcm(plume_audio **out, const float *samples, int64_t n, int32_t rate, char **err);
PLUME_API void plume_audio_free(plume_audio *a);
PLUME_API int64_t plume_audio_n_samples(const plume_audio *a);  /* at 16 kHz */
PLUME_API double plume_audio_seconds(const plume_audio *a);
PLUME_API const float *plume_audio_samples(const plume_audio *a); /* [n_samples], mono, 16 kHz */

/* Whether the bundle carries an audio tower (plume convert of a checkpoint that has one). */
PLUME_API int32_t plume_model_has_audio(const plume_model *m);
/* How many soft tokens a gives (the sum over its 30 s clips) and its key (a hash of its
 * samples; key may be NULL), without running the tower. PLUME_EINVAL without an audio tower
 * or for audio too short to give a token (under 10 ms). */
PLUME_API int plume_audio_tokens(const plume_model *m, const plume_audio *a, int32_t *n_tokens, uint64_t *key,
                                 char **err);
/* Encode a with the audio tower: log-mel features, the conformer and embed_audio of each 30 s
 * clip, exactly as Hugging Face's model computes them (float32), on the model's threads; N rows
 * of the decoder's width whose placeholder is the model's audio id. PLUME_EINVAL when the bundle
 * has no audio tower or a is too short. */
PLUME_API int plume_audio_encode(plume_embd **out, plume_model *m, const plume_audio *a, char **err);

/* ---------------------------------------------------------------------------------------
 * Video in (docs/MEDIA.md)
 *
 * A video file is decoded once (MP4/MOV, MKV/WebM; H.264, HEVC, VP8, VP9, AV1 as the system's
 * FFmpeg libraries have them; the container's rotation applied) and sampled as Hugging Face's
 * Gemma4VideoProcessor does: 32 frames by index, floor(i * N / 32) of the N frames counted by
 * decoding, each with its timestamp idx / fps as "MM:SS" (truncated), each resized with
 * torchvision's bicubic (PyTorch's CPU uint8 kernel) to the 70-token size. A clip of fewer than
 * 32 frames keeps all of them (HF refuses it). Encoding runs each frame through the vision tower
 * as an image: a plume_embd of frames x tokens rows whose placeholder is the model's video id.
 * A prompt carries one <|video|> where the video goes (the chat template's video part);
 * plume_prompt_expand() writes HF's text for it: per frame "MM:SS " <|image> + n x <|video|> +
 * <image|>, frames joined by one space.
 *
 *     plume_video *v; plume_embd *e;
 *     plume_video_load(&v, "clip.mp4", NULL, &err);
 *     plume_video_encode(&e, m, v, &err);                 // 32 x 66 rows for 16:9
 *     ... a prompt with one <|video|>, tokenized, then plume_prompt_expand ...
 *
 * HF ignores a video's sound; with params.audio the first audio stream is decoded too
 * (plume_video_audio), for the caller to add as an audio part after the video, as the seed
 * project does.
 * ------------------------------------------------------------------------------------- */
typedef struct plume_video plume_video; /* the sampled frames, resized, and their timestamps */

typedef struct {
    int32_t audio;     /* also decode the first audio stream (mono, 16 kHz: plume_video_audio) */
    int32_t n_threads; /* decoder threads; <= 0: up to 4 */
    /* asked between packets and frames: nonzero stops the decode, which frees what it made and
     * returns PLUME_ECANCELED (a server's client gone); NULL: never stopped */
    int (*abort)(void *ctx);
    void *abort_ctx;
} plume_video_params;

PLUME_API plume_video_params plume_video_default_params(void);
/* Decode a video file / bytes (p may be NULL: the defaults). PLUME_EFORMAT for anything that
 * is not a whole MP4/MOV/MKV/WebM video plume decodes: truncated or corrupt streams, frames over
 * 4096 x 4096 pixels (8192 a side), over an hour or 216000 frames, a frame size that changes,
 * files over 1 GiB (checked on the header before decoding where it says); PLUME_EIO when the
 * file cannot be read. */
PLUME_API int plume_video_load(plume_video **out, const char *path, const plume_video_params *p, char **err);
PLUME_API int plume_video_decode(plume_video **out, const void *bytes, size_t len, const plume_video_params *p,
                                 char **err);
/* The frame size a video's container declares for its first video stream (after the rotation
 * of its display matrix: what plume_video_width/height will be), read from the header and the
 * first packets without decoding the stream: what a server checks against its memory budget
 * before plume_video_decode. PLUME_EFORMAT for what plume_video_decode would refuse on its
 * header (not MP4/MOV/MKV/WebM, no video stream, a codec or a size out of bounds). */
PLUME_API int plume_video_size(const void *bytes, size_t len, int32_t *width, int32_t *height, char **err);
/* A video from n_frames decoded RGB frames [n_frames, height, width, 3] at fps (<= 0: unknown,
 * timestamps at 24 as HF), sampled and resized as a decoded file. */
PLUME_API int plume_video_from_frames(plume_video **out, const uint8_t *rgb, int32_t n_frames, int32_t width,
                                      int32_t height, double fps, char **err);
PLUME_API void plume_video_free(plume_video *v);
PLUME_API int32_t plume_video_n_frames(const plume_video *v);   /* sampled frames: 32, fewer for a short clip */
PLUME_API int32_t plume_video_n_decoded(const plume_video *v);  /* frames the file holds (counted by decoding) */
PLUME_API double plume_video_fps(const plume_video *v);
PLUME_API int32_t plume_video_width(const plume_video *v);      /* the decoded frames' size, rotated */
PLUME_API int32_t plume_video_height(const plume_video *v);
PLUME_API int32_t plume_video_frame_index(const plume_video *v, int32_t i); /* sampled frame i's index in the file */
PLUME_API const char *plume_video_timestamp(const plume_video *v, int32_t i); /* "MM:SS", NULL out of range */
/* Sampled frame i resized: [height, width, 3] of the 70-token size; NULL out of range. */
PLUME_API const uint8_t *plume_video_frame_rgb(const plume_video *v, int32_t i, int32_t *width, int32_t *height);
PLUME_API const plume_audio *plume_video_audio(const plume_video *v); /* the sound track, or NULL */
PLUME_API const char *plume_video_format(const plume_video *v);      /* "matroska,webm vp9", ... */
/* Soft tokens v gives (frames x tokens per frame) and its key, without the tower. PLUME_EINVAL
 * without a vision tower or a video token id. */
PLUME_API int plume_video_tokens(const plume_model *m, const plume_video *v, int32_t *n_tokens, uint64_t *key,
                                 char **err);
/* The ids plume_prompt_expand() writes for v's <|video|> (per frame "MM:SS " <|image> +
 * n x <|video|> + <image|>, frames joined by one space), without the tower: for a caller that
 * lays out a prompt (and where each soft token sits) before encoding. Writes at most cap ids to
 * out and returns how many there are (call again with more room if > cap), or PLUME_EINVAL as
 * plume_video_tokens. */
PLUME_API int32_t plume_video_prompt(const plume_model *m, const plume_video *v, int32_t *out, int32_t cap, char **err);
/* Encode v's frames with the vision tower, each as an image at the 70-token budget, exactly as
 * HF's get_video_features (float32), on the model's threads. */
PLUME_API int plume_video_encode(plume_embd **out, plume_model *m, const plume_video *v, char **err);

/* ---------------------------------------------------------------------------------------
 * Encoders on threads of their own
 *
 * plume_image_encode() and plume_audio_encode() run the towers on the model's threads, the
 * ones a decode step uses. A plume_encoder runs them on threads of its own, so that one thread
 * can encode a request's media while another keeps decoding other sessions on the model's
 * threads (plume serve does). Its rows are the same bits as the model's encode gives (the
 * towers' sums do not depend on the thread count). One encode at a time per encoder; several
 * encoders may share a model. n_threads counts the calling thread: 1 runs the towers on the
 * caller alone, <= 0 takes as many as the model has (plume_model_n_threads).
 *
 *     plume_encoder *enc;
 *     plume_encoder_new(&enc, m, 1, &err);
 *     plume_encoder_image(enc, &e, img, NULL, &err);      // on another thread than the decode
 * ------------------------------------------------------------------------------------- */
typedef struct plume_encoder plume_encoder;

/* A new encoder of m (which must outlive it) with n_threads threads. 0 or PLUME_ENOMEM
 * (the threads cannot be started). */
PLUME_API int plume_encoder_new(plume_encoder **out, plume_model *m, int32_t n_threads, char **err);
PLUME_API void plume_encoder_free(plume_encoder *e);
PLUME_API int32_t plume_encoder_n_threads(const plume_encoder *e);
/* Ask fn(ctx) between the towers' layers (and between 30 s clips): when it returns nonzero
 * the encode stops, frees what it made and returns PLUME_ECANCELED (a client gone, a server
 * stopping). fn runs on the encoding thread; NULL: never stopped. */
PLUME_API void plume_encoder_set_abort(plume_encoder *e, int (*fn)(void *ctx), void *ctx);
/* plume_image_encode(), plume_audio_encode() and plume_video_encode() on e's threads;
 * PLUME_ECANCELED as above (a video: between frames too). */
PLUME_API int plume_encoder_image(plume_encoder *e, plume_embd **out, const plume_image *img,
                                  const plume_image_params *p, char **err);
PLUME_API int plume_encoder_audio(plume_encoder *e, plume_embd **out, const plume_audio *a, char **err);
PLUME_API int plume_encoder_video(plume_encoder *e, plume_embd **out, const plume_video *v, char **err);

/* ---------------------------------------------------------------------------------------
 * Session: the three chunk states and the tokens so far
 * ------------------------------------------------------------------------------------- */
typedef struct plume_session plume_session;

typedef struct {
    int32_t n_ctx;   /* <= 0: the bundle's context_length (up to max_position_embeddings) */
    int32_t n_batch; /* tokens per forward step during prefill; <= 0: 128 */
    int32_t n_rewind;/* sliding rings keep W + n_rewind slots, so a rewind of up to
                        n_rewind + 1 tokens costs nothing; < 0: 0; default: W */
    int32_t snapshot_every; /* keep a copy of the sliding rings every N tokens, so a deeper
                        rewind recomputes at most N tokens; 0: default max(1024, n_ctx / 8);
                        < 0: none (a deep rewind recomputes from position 0) */
    int32_t kv_bits; /* 32 (default): float K/V; 8: the full-attention caches (the ones that
                        grow with the context) hold int8 rows with a float scale per row and
                        KV head, a quarter of the memory (error: docs/SESSIONS.md) */
} plume_session_params;

PLUME_API plume_session_params plume_session_default_params(void);
PLUME_API int plume_session_new(plume_session **out, plume_model *m, const plume_session_params *p,
                                char **err);
PLUME_API void plume_session_free(plume_session *s);

/* Feed n >= 1 tokens at the session's current position. logits: NULL; or, with all == 0,
 * [n_vocab] for the last token; or, with all != 0, [n, n_vocab] for every token. Logits are
 * after the final softcap. On error the session is unchanged. */
PLUME_API int plume_session_feed(plume_session *s, const int32_t *ids, int32_t n, float *logits,
                                 int32_t all, char **err);
/* Feed a whole prompt: the longest prefix it shares with the session's tokens is kept and
 * only the rest is computed (at least the last token, for its logits). *n_reused (may be
 * NULL) receives the number of tokens kept. The logits equal those of a fresh prefill. */
PLUME_API int plume_session_feed_prompt(plume_session *s, const int32_t *ids, int32_t n, float *logits,
                                        int32_t *n_reused, char **err);
/* Feed n rows at the session's position: ids, whose placeholder positions (the model's image
 * id, its audio id, or a media's own placeholder) are filled, in order, by the rows of the
 * media with that placeholder, in order (Hugging Face's masked_scatter): an image row enters
 * unscaled and its per-layer input uses the pad row, as in HF. Every placeholder must get a
 * row and every row a placeholder (PLUME_EINVAL otherwise, nothing fed). The session keeps a
 * copy of the rows and each position's key, for rewinds and plume_session_save(). logits as
 * plume_session_feed(). With n_media 0 a prompt without placeholders feeds as with
 * plume_session_feed(); one with placeholders is refused. */
PLUME_API int plume_session_feed_media(plume_session *s, const int32_t *ids, int32_t n, const plume_embd *const *media,
                                       int32_t n_media, float *logits, int32_t all, char **err);
/* plume_session_feed_prompt() of a prompt with media: the prefix kept is the one whose ids
 * and media keys (which image filled a position, and which of its rows) both agree, so a
 * conversation re-sent with the same images reuses their cache and a different image does
 * not. */
PLUME_API int plume_session_feed_prompt_media(plume_session *s, const int32_t *ids, int32_t n,
                                              const plume_embd *const *media, int32_t n_media, float *logits,
                                              int32_t *n_reused, char **err);
/* Forget every token from position n_keep on (0 <= n_keep <= n_past). Exact for any n_keep:
 * the sliding rings are restored from the nearest snapshot and at most snapshot_every tokens
 * are recomputed when the ring alone no longer holds the window. */
PLUME_API int plume_session_rewind(plume_session *s, int32_t n_keep, char **err);
/* Where a rewind toward n_keep can stop at no cost: the last position <= n_keep that
 * plume_session_rewind() reaches without recomputing any token (it changes and frees nothing):
 * n_keep itself while the ring still holds its window, else the snapshot at or before it,
 * else 0. A caller that must not stall (the server between decode steps) rewinds there and
 * feeds the tokens up to n_keep again in chunks of its own. */
PLUME_API int32_t plume_session_rewind_point(const plume_session *s, int32_t n_keep);
/* Write the session (tokens, caches, snapshots) to path: temporary file, fsync, rename.
 * The file names the bundle (a hash of its identity) and carries a checksum. */
PLUME_API int plume_session_save(const plume_session *s, const char *path, char **err);
/* A new session on m from a file written by plume_session_save(). Refused (PLUME_EMISMATCH)
 * for another bundle; truncated or corrupt files are refused (PLUME_EFORMAT). */
PLUME_API int plume_session_load(plume_session **out, plume_model *m, const char *path, char **err);
/* Benchmarks only: give the session n_past (< n_ctx) positions of history at once, its caches
 * filled with pseudo-random K/V rows from seed and its tokens with random ids, instead of a
 * prefill (minutes at 32K tokens). Decode speed does not depend on the values; the logits
 * mean nothing, and a rewind into this history does not reproduce it. */
PLUME_API int plume_session_fill_random(plume_session *s, int32_t n_past, uint64_t seed, char **err);
/* Fork a conversation: make dst hold exactly what src holds (tokens, caches, ring
 * snapshots), so both give bit-identical logits from here on (the server's n choices of one
 * prompt prefill once). Both of one model and made with the same n_ctx, n_rewind, kv_bits and
 * snapshot_every (dst's own tokens are dropped). Costs a copy of src's caches. 0, or
 * PLUME_EINVAL (nothing changed). */
PLUME_API int plume_session_copy(plume_session *dst, const plume_session *src, char **err);
PLUME_API int32_t plume_session_n_past(const plume_session *s);
PLUME_API int32_t plume_session_n_ctx(const plume_session *s);
PLUME_API const int32_t *plume_session_tokens(const plume_session *s);
/* The media key of each of the session's n_past positions (0: a token; else
 * plume_embd_row_key() of the medium and row that filled it), or NULL while the session has
 * never been fed media (every key 0). Valid until the session is next changed. */
PLUME_API const uint64_t *plume_session_keys(const plume_session *s);

/* ---------------------------------------------------------------------------------------
 * MTP drafter: Gemma 4's official drafter (gemma4_assistant, docs/SPECULATIVE.md)
 *
 * A small model that reads the target's last final-norm hidden state and its shared K/V
 * (the last cache-owning layer of each attention type) and proposes the next tokens; a
 * plume_spec with params.drafter set verifies them as it does prompt lookup. Convert the
 * checkpoint with plume_convert() (it recognizes model_type gemma4_assistant) into a
 * directory; plume_drafter_find() looks for it inside the target's bundle (BUNDLE/drafter).
 * A drafter holds the scratch of one draft step: use it from one thread at a time.
 * ------------------------------------------------------------------------------------- */
typedef struct plume_drafter plume_drafter;

/* Open the drafter bundle dir for target m. PLUME_EFORMAT naming the mismatch when its
 * backbone (hidden size, heads, head sizes, window, vocabulary, RoPE) is not m's. */
PLUME_API int plume_drafter_open(plume_drafter **out, plume_model *m, const char *dir, char **err);
PLUME_API void plume_drafter_free(plume_drafter *d);
/* The drafter bundle that goes with m's bundle (BUNDLE/drafter), malloc'd, or NULL if none. */
PLUME_API char *plume_drafter_find(const plume_model *m);
/* Draft up to k (<= 64) tokens after session s's tokens and pending (the last accepted token,
 * not fed yet), by HF's MTP loop: every step at position n_past, over the K/V of s's latest
 * step, each draft the argmax of its logits; stops after an end-of-turn id. Wants the final-
 * norm hidden of position n_past - 1 from s's latest step (a feed asking for logits there);
 * without it, returns 0. logits: NULL or [k, V], each step's logits. Returns how many, or a
 * negative PLUME_E*. */
PLUME_API int32_t plume_drafter_draft(plume_drafter *d, const plume_session *s, int32_t pending, int32_t k,
                                      int32_t *draft, float *logits, char **err);
/* Totals since open: draft steps run, rounds drafted. */
PLUME_API void plume_drafter_stats(const plume_drafter *d, int64_t *n_steps, int64_t *n_rounds);

/* ---------------------------------------------------------------------------------------
 * Speculative decoding with a prompt-lookup drafter (docs/SPECULATIVE.md)
 *
 * A step feeds the pending token (sampled, not yet fed) and up to draft_max tokens guessed
 * from the context in ONE forward step, which reads the weights once, and keeps the drafted
 * tokens the model agrees with: greedy, those equal to the argmax; sampling, by the
 * speculative-sampling rule, so the output has exactly the sampler's distribution. The
 * guesses come from the context itself: the tokens that followed the latest earlier
 * occurrence of its last few tokens (answers that quote their input draft well).
 *
 *     int32_t id = plume_sampler_sample(smp, logits), out[9], n;   // after the prompt
 *     for (;;) {
 *         ... emit id ...
 *         n = plume_spec_step(sp, s, smp, id, out, 9, &err);   // 1..draft_max + 1 ids
 *         ... emit out[0 .. n-2]; id = out[n-1] (the next pending one) ...
 *     }
 * ------------------------------------------------------------------------------------- */
/* A drafter: write up to max guesses of the tokens after ctx[0, n) to draft and return how
 * many. It must be a function of ctx alone (no randomness shared with the sampler): the
 * acceptance rule assumes a deterministic drafter. */
typedef int32_t (*plume_draft_fn)(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max);

typedef struct {
    int32_t draft_max; /* tokens guessed per step at most; 0: none (one token per step) */
    int32_t ngram_max; /* longest context suffix looked up (default 3) */
    int32_t ngram_min; /* shortest (default 1) */
    int32_t adaptive;  /* 1 (default): draft only while the guesses are right often enough
                          (one in 5 or more of the first guesses, a moving average), and as
                          many as recent steps kept; below that, guess without feeding and
                          compare. The output does not change either way. 0: always as many
                          as draft_max and the context allow */
    plume_draft_fn draft_fn; /* NULL (default): prompt lookup (plume_spec_lookup) */
    void *draft_user;        /* passed to draft_fn */
    plume_drafter *drafter;  /* NULL (default), or the MTP drafter (plume_drafter_open), which
                                then drafts (with prompt lookup, see lookup); a draft_fn beside
                                it gets the round's k guesses in draft (max = k) and may replace
                                them (plume bench's forced acceptance rates, tests) */
    int32_t lookup;          /* with a drafter: 1 (default) prompt lookup drafts instead of it in
                                a round whose context ends in a repeat of 3 or more tokens while
                                lookup's first guesses are right at least as often as the
                                drafter's (docs/SPECULATIVE.md); 0: the drafter alone. Without a
                                drafter: ignored */
} plume_spec_params;

typedef struct plume_spec plume_spec;

/* Draft length 3 (docs/SPECULATIVE.md says why), n-grams 3 down to 1, adaptive, lookup 1. */
PLUME_API plume_spec_params plume_spec_default_params(void);
/* A drafter for sessions of model m; p NULL: the defaults. PLUME_EINVAL for a draft_max
 * outside [0, PLUME_SAMPLER_UNDO - 1] or n-gram lengths outside 1 <= min <= max <= 64. */
PLUME_API int plume_spec_new(plume_spec **out, const plume_model *m, const plume_spec_params *p, char **err);
PLUME_API void plume_spec_free(plume_spec *sp);
/* Prompt lookup: find the latest earlier occurrence in ctx[0, n) of its last g tokens, for g
 * from ngram_max down to ngram_min, and copy up to max of the tokens that followed it to
 * draft. Returns how many (0: no suffix occurs earlier). */
PLUME_API int32_t plume_spec_lookup(const int32_t *ctx, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t *draft,
                                    int32_t max);
/* One step on session s: feed `pending` and the drafted tokens, keep those accepted, sample
 * the token after them with smp. Writes to out the accepted drafted tokens (now fed to s and
 * accepted by smp, after pending) and then the next pending token (neither); returns how many
 * (1 .. min(draft_max + 1, cap)), or a negative PLUME_E* (then s and smp are as before).
 * Fewer tokens are drafted near the end of the context and when cap is small. Greedy output
 * is identical to plain decoding token for token. */
PLUME_API int32_t plume_spec_step(plume_spec *sp, plume_session *s, plume_sampler *smp, int32_t pending, int32_t *out,
                                  int32_t cap, char **err);
/* The same step in two halves, for callers that run the forward step themselves (a
 * plume_batch with other sessions): plume_spec_draft() writes the tokens to feed at the
 * session's position (pending, then the guesses) to ids [draft_max + 1] and returns how many
 * (or a negative PLUME_E*); feed them all with the logits of every row ([n, V]), then
 * plume_spec_accept() verifies, rewinds s past the rejected tokens and writes out as
 * plume_spec_step() does (on error s is rewound to before the feed). */
PLUME_API int32_t plume_spec_draft(plume_spec *sp, const plume_session *s, int32_t pending, int32_t *ids, int32_t cap,
                                   char **err);
PLUME_API int32_t plume_spec_accept(plume_spec *sp, plume_session *s, plume_sampler *smp, const int32_t *ids, int32_t n,
                                    const float *logits, int32_t *out, char **err);
/* Forget what the adaptive draft length learned (it starts again as a new plume_spec's does),
 * so that a new conversation's drafting does not depend on the ones before it (a server's
 * slot: a seed's sampled text then depends on its request alone). The totals stay. */
PLUME_API void plume_spec_reset(plume_spec *sp);
/* Totals since plume_spec_new: steps, tokens drafted, drafted tokens accepted. */
PLUME_API void plume_spec_stats(const plume_spec *sp, int64_t *n_steps, int64_t *n_drafted, int64_t *n_accepted);
/* The sources of guesses: prompt lookup (or a draft_fn without a drafter), the MTP drafter. */
#define PLUME_SPEC_LOOKUP 0
#define PLUME_SPEC_DRAFTER 1
/* Of plume_spec_stats' totals, those of the steps that fed source's guesses (PLUME_SPEC_*):
 * steps, tokens drafted, accepted (zeros for NULL or another source). */
PLUME_API void plume_spec_source_stats(const plume_spec *sp, int32_t source, int64_t *n_steps, int64_t *n_drafted,
                                       int64_t *n_accepted);

/* ---------------------------------------------------------------------------------------
 * Batch: one forward step of several sessions on one model (continuous batching)
 *
 * The tokens of every entry go through the layers as one matrix, so each weight is read
 * once per step for all sessions; attention runs per session on its own caches. A
 * session's logits are bit-identical whether its tokens run alone (plume_session_feed) or
 * in any batch: every output element is reduced in the same order whatever the batch.
 *
 *     plume_batch *b; plume_batch_new(&b, m, 256, &err);
 *     for (each active session) n_taken = plume_batch_add(b, s, ids, n, logits, 0, &err);
 *     plume_batch_run(b, &err);      // every session advanced by the tokens it gave
 * ------------------------------------------------------------------------------------- */
typedef struct plume_batch plume_batch;

/* A batch of up to n_tokens_max tokens a step (<= 0: 256), on sessions of model m. */
PLUME_API int plume_batch_new(plume_batch **out, plume_model *m, int32_t n_tokens_max, char **err);
PLUME_API void plume_batch_free(plume_batch *b);
/* Queue n >= 1 tokens of session s (of the batch's model, not already in this step) at its
 * current position. Takes as many as fit: the batch's room, the session's context, and the
 * session's next ring snapshot (a step ends there). Returns the number taken (1..n), or a
 * negative PLUME_E* (bad id, full context, full batch, session already queued; then
 * nothing is queued). logits: NULL, or [V] for the last token taken (all == 0), or
 * [taken, V] (all != 0); written by plume_batch_run. */
PLUME_API int32_t plume_batch_add(plume_batch *b, plume_session *s, const int32_t *ids, int32_t n,
                                  float *logits, int32_t all, char **err);
/* plume_batch_add() of rows of a prompt with media (plume_session_feed_media's pairing): ids
 * are the prompt's rows from the session's position on; the placeholder rows among them are
 * filled by media[0..n_media) (in the order they appear in the prompt), of which `skip`
 * placeholder rows were already fed by earlier steps (0 at the prompt's start; then the number
 * of placeholder rows the earlier steps took). As many rows are taken as fit, as
 * plume_batch_add(); the rows of a medium may span steps. The media must stay alive until
 * plume_batch_run() (the session copies the rows it is fed). PLUME_EINVAL when the rows'
 * placeholders outnumber the media's rows left. */
PLUME_API int32_t plume_batch_add_media(plume_batch *b, plume_session *s, const int32_t *ids, int32_t n,
                                        const plume_embd *const *media, int32_t n_media, int32_t skip, float *logits,
                                        int32_t all, char **err);
/* Tokens queued for the next step. */
PLUME_API int32_t plume_batch_n_tokens(const plume_batch *b);
/* Run the queued step: every session advances by the tokens it gave and its logits are
 * written. The batch is empty afterwards. An empty batch is a no-op. */
PLUME_API int plume_batch_run(plume_batch *b, char **err);
/* Drop the queued entries without running them (the sessions are unchanged). */
PLUME_API void plume_batch_clear(plume_batch *b);

/* ---------------------------------------------------------------------------------------
 * Converter: a Hugging Face checkpoint -> a bundle (docs/BUNDLE.md)
 *
 * The one converter every caller shares (the CLI's `plume convert`, the Python binding).
 * It reads config.json and the safetensors (bf16, f16 or f32; model.safetensors or the
 * shards of model.safetensors.index.json) a block of rows at a time, so memory stays flat
 * (about 50 MB for the full E2B), and copies the tokenizer files. Every tensor is checked
 * before a byte is written; the bundle is written into a temporary sibling directory that
 * is renamed into place at the end, so a failed conversion leaves nothing behind.
 * ------------------------------------------------------------------------------------- */
typedef struct {
    const char *weights; /* layer weights: "f32", "bf16", "q8" (default), "q4"; "auto": a GGUF's own */
    int32_t n_ctx;       /* context length of the bundle; 0: min(max_position_embeddings, 4096) */
    int32_t progress;    /* != 0: a progress line on stderr */
    const char *layout;  /* q8/q4 weights: "tiles" (groups of 16 rows interleaved, what the
                            AVX-512 kernels stream fastest), "rows" (row after row, what the
                            other kernels read), or "auto" (default: tiles if this CPU's
                            kernels read them, else rows); docs/BUNDLE.md */
    const char *head;    /* q4 weights: the head (the tied token embeddings) as "q8" (NULL,
                            default: the INT8 token sidecar is the head, as in q8 bundles) or
                            "q4" (lm_head.weight in the last chunk at q4: a decode step reads
                            226 MB there instead of 403 MB on E2B; docs/BUNDLE.md) */
    const char *q4_scale; /* q4 weights: how each group of 32's step is chosen: "best" (NULL,
                            default: the smallest error among the steps that put the group's
                            largest weight on a level, so a block already on a 4-bit grid, a
                            QAT checkpoint's, is kept exactly), "absmax" (absmax / 7) or "q4_0"
                            (llama.cpp's signed max / -8); docs/BUNDLE.md */
    int32_t report;       /* != 0: a line on stderr per type of tensors that were dequantized
                            and requantized (a GGUF's K-quants) with their relative RMS error */
} plume_convert_params;

PLUME_API plume_convert_params plume_convert_default_params(void);
/* Convert the checkpoint in hf_dir (or a GGUF file of Gemma 4: docs/BUNDLE.md, "GGUF import";
 * weights NULL or "auto": the GGUF's own precision) into the bundle directory out_dir, which must not exist
 * (PLUME_EIO if it does). p may be NULL (the defaults). PLUME_EFORMAT for a missing tensor,
 * a wrong shape or dtype, a corrupt file; PLUME_EINVAL for a bad parameter. */
PLUME_API int plume_convert(const char *hf_dir, const char *out_dir, const plume_convert_params *p,
                            char **err);
/* Whether the checkpoint whose config.json is at path is one plume converts (a Gemma 4 text
 * model of a shape it runs): 0, or PLUME_EFORMAT with the reason (before any shard is read). */
PLUME_API int plume_convert_check_config(const char *path, char **err);
/* Progress of plume_bundle_verify: bytes hashed so far, of total. */
typedef void (*plume_verify_progress)(uint64_t done, uint64_t total, void *arg);
/* Check every file of bundle dir against the manifest.sha256 the converter wrote (the format
 * of sha256sum). 0 when all match; PLUME_EFORMAT when some do not (each corrupt, missing or
 * unlisted file is reported through report, one line each, when it is given, and *err names
 * the first); PLUME_EIO when there is no readable manifest. progress and report may be NULL. */
PLUME_API int plume_bundle_verify(const char *dir, plume_verify_progress progress, void *arg,
                                  void (*report)(const char *line, void *arg), char **err);

/* ---- random-weight models ------------------------------------------------------------
 * The project's stand-in for real weights (none can be downloaded in its tests): a model in
 * the real Hugging Face layout whose every element is a pure function of (seed, tensor name,
 * index), so the checkpoint and the bundle written directly hold the same numbers.
 * ------------------------------------------------------------------------------------- */
typedef struct {
    const char *config;    /* "tiny" (the golden tiny-a structure), "e2b", "e4b", or a
                              config.json path */
    uint64_t seed;
    int32_t vocab;         /* > 0: the vocabulary size instead of the config's (>= 8) */
    const char *tokenizer; /* a directory whose tokenizer.json (+ tokenizer_config.json) is
                              copied into the output, or NULL */
    int32_t shards;        /* checkpoint: safetensors files, 1..99 */
} plume_synth_params;

PLUME_API plume_synth_params plume_synth_default_params(void);
/* Write a bf16 checkpoint (config.json, shards, their index) into hf_dir (created if missing). */
PLUME_API int plume_synth_checkpoint(const plume_synth_params *p, const char *hf_dir, char **err);
/* Write a bundle directly (as plume_convert of the checkpoint would); cp may be NULL. */
PLUME_API int plume_synth_bundle(const plume_synth_params *p, const plume_convert_params *cp, const char *bundle_dir,
                                 char **err);

#ifdef __cplusplus
}
#endif
#endif /* PLUME_H */
