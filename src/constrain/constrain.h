/* constrain.h -- the constraint room: output held to a format (docs/STRUCTURED.md).
 *
 * Owns: the grammar language (GBNF as llama.cpp takes it, plus references to special tokens),
 * the compilers of JSON Schema and of tools + tool_choice into it, the recognizer (a pushdown
 * automaton over bytes, run as a DFA built lazily from its sets of stacks), the vocabulary
 * index (every token's bytes, sorted, with common prefixes) and the token masks with their
 * caches. Implements the plume_vocab_* and plume_constraint_* API of plume.h.
 *
 * May call: common.h, plume.h (the tokenizer: token bytes, special tokens), cJSON.
 * Must not know: the model, sessions, the sampler (src/sampler.c calls this room through the
 * cst_* functions below), the CLI or the server.
 *
 * Everything is text first: a JSON Schema, the JSON mode and a tool call each become GBNF
 * text (which `plume run --print-grammar` shows), and one parser turns any GBNF into the
 * grammar the recognizer runs. Files in calling order:
 *   gbnf.c         GBNF text -> cst_grammar: rules over bytes (code points lowered to UTF-8)
 *                  and special tokens; repetitions expanded; left recursion refused
 *   spell.c        the GBNF spelling of literals and classes (into a plume_buf), sets of
 *                  code points, one character of a set in the JSON and Gemma call spellings
 *   schema.c       JSON Schema -> GBNF (types, objects, arrays, enum/const, combinators, $ref)
 *   schema_merge.c the conjunction of two schemas (allOf, siblings of $ref and anyOf/oneOf,
 *                  if/then, dependencies)
 *   schema_str.c   strings: lengths, formats, patterns
 *   schema_num.c   integers and numbers within bounds (digit-string range grammars)
 *   regex.c        `pattern` (an ECMAScript subset) -> GBNF over a string's characters
 *   tools.c        tools JSON + tool_choice -> GBNF in Gemma 4's tool-call format
 *   vocab.c        plume_vocab: the tokens' bytes sorted, for walks that share prefixes
 *   dfa.c          the recognizer: frames and states interned, transitions cached
 *   constraint.c   plume_constraint: the state history, masks and their cache, the API */
#ifndef PLUME_CONSTRAIN_H
#define PLUME_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "plume.h"

/* ---- the grammar ------------------------------------------------------------------------
 *
 * Rules are flat runs of elements: alternative 1, CST_ALT, alternative 2, ..., CST_END. A
 * position (an index into elems) names what comes next; the recognizer's stacks are made of
 * positions. Terminals are a set of bytes (one byte of input) or a token (one special token,
 * never spelled in bytes). */
enum { CST_END = 0, CST_ALT = 1, CST_BYTES = 2, CST_RULE = 3, CST_TOKEN = 4 };

typedef struct {
    uint8_t type; /* CG_* */
    int32_t v;    /* CST_BYTES: index into sets; CST_RULE: rule; CST_TOKEN: index into toks */
} cst_elem;

typedef struct {
    cst_elem *elems;     /* [n_elems] every rule's run, one after another */
    int32_t n_elems;
    int32_t *rule_alts; /* [n_rules + 1] rule r's alternatives: alts[rule_alts[r] .. rule_alts[r+1]) */
    int32_t *alts;      /* positions where each alternative starts */
    char **names;       /* [n_rules] rule names (generated rules: "name~N") */
    int32_t n_rules;
    uint64_t (*sets)[4]; /* [n_sets] 256-bit byte sets */
    int32_t n_sets;
    char **tok_text;    /* [n_toks] a token reference as written: "<|tool_call>", or NULL for <[N]> */
    int32_t *tok_id;    /* [n_toks] its id once bound (cst_grammar_bind), -1 before */
    int32_t n_toks;
    int32_t root;       /* the rule "root" */
} cst_grammar;

/* Limits that keep a grammar (and what a schema makes of it) from exhausting memory. */
#define CST_MAX_ELEMS (1 << 22)  /* elements after repetitions are expanded */
#define CST_MAX_REPEAT 100000    /* m and n of {m,n} */

/* Parse GBNF text (len bytes, not NUL-terminated) into *g; the start rule is `root`.
 * 0, PLUME_EINVAL (a message naming the line and column, or the rule) or PLUME_ENOMEM. */
int cst_grammar_parse(cst_grammar *g, const char *text, size_t len, char **err);
/* Wrap root for generation: new root ::= [thought] old-root end, where the optional thought
 * (thinking 1: "<|channel>" text "<channel|>" may come first; 2: the prompt opened it, text
 * "<channel|>" comes first) is free text, and end is one of the n_end special tokens given
 * as texts ("<turn|>", ...). 0 or PLUME_ENOMEM. */
int cst_grammar_wrap(cst_grammar *g, int32_t thinking, const char *const *end, int32_t n_end, char **err);
/* Resolve every token reference against the tokenizer: "<TEXT>" must be one token, <[N]> an
 * id below n_vocab. 0 or PLUME_EINVAL naming the reference. */
int cst_grammar_bind(cst_grammar *g, const plume_tokenizer *tok, char **err);
void cst_grammar_free(cst_grammar *g);

/* ---- spelling text (spell.c) ------------------------------------------------------------ */

/* Append s[0, n) as a GBNF string literal: "..." with \" \\ \n \r \t and \xHH escapes. */
void cst_buf_literal(plume_buf *b, const char *s, size_t n);
/* Append one code point as it may appear inside a GBNF [...] class. */
void cst_buf_class_cp(plume_buf *b, uint32_t cp);

/* A set of code points: sorted disjoint inclusive ranges once normalized. */
typedef struct {
    uint32_t (*r)[2]; /* [n] {lo, hi} */
    int32_t n;
    size_t cap;
    int oom;          /* an allocation failed: the set is unusable */
} cst_cpset;

/* Add [lo, hi] (any order; cst_cpset_norm sorts and merges). */
void cst_cpset_add(cst_cpset *s, uint32_t lo, uint32_t hi);
/* Sort, merge, and drop the surrogates (they have no UTF-8 spelling). */
void cst_cpset_norm(cst_cpset *s);
/* The complement within [0, 0x10FFFF] of a normalized set, normalized. */
void cst_cpset_negate(cst_cpset *s);
void cst_cpset_free(cst_cpset *s);

/* ---- compilers to GBNF ------------------------------------------------------------------- */

/* How strings and keys are spelled: JSON, or Gemma 4's tool-call arguments (keys bare,
 * strings between <|"|> tokens with nothing escaped, no whitespace). */
enum { CST_JSON = 0, CST_GEMMA = 1 };

/* A JSON Schema (JSON text) -> GBNF text whose `root` is a value valid against it, spelled
 * as dialect says. *gbnf is malloc'd. 0, PLUME_EINVAL naming the keyword and where it is
 * (a feature outside the subset, bad JSON, an unsatisfiable schema) or PLUME_ENOMEM. */
int cst_schema_to_gbnf(const char *schema, size_t len, int dialect, char **gbnf, char **err);

/* The compiler behind it, for callers that compile several schemas into one grammar (tools):
 * cst_schema_rule() makes the rules of a schema (a node of the document doc, which $ref resolves
 * in) and names its rule in name (64 bytes); cst_schema_out() is the rules text, to which the caller
 * may add rules; cst_schema_finish() appends the common rules used (ws, jchar, ...) and hands the
 * text over. Rule names are s0, s1, ... and the common ones; callers use other names. */
struct cJSON;
typedef struct cst_schema cst_schema;
int cst_schema_new(cst_schema **out, int dialect, char **err);
int cst_schema_rule(cst_schema *c, const struct cJSON *doc, const struct cJSON *schema, const char *path, char *name);
plume_buf *cst_schema_out(cst_schema *c);
const char *cst_schema_any_object(cst_schema *c); /* the rule of any object ("jobject" / "gobject") */
int cst_schema_finish(cst_schema *c, char **gbnf);
void cst_schema_free(cst_schema *c);
/* The conjunction of two schemas (objects or booleans, no $ref or allOf at their top) as one
 * schema node owned by arena (a cJSON array): 0 with *out, 1 when no value satisfies both,
 * -1 when plume cannot merge them (why, why_n bytes, says why in both cases), PLUME_ENOMEM
 * (schema_merge.c). asserts tells the keywords that assert from annotations (schema.c's). */
int cst_schema_merge(struct cJSON *arena, const struct cJSON *a, const struct cJSON *b, const struct cJSON **out,
                     char *why, size_t why_n, int (*asserts)(const char *keyword));
/* Parse JSON text whole (valid UTF-8, no NUL, nothing after the value); NULL with *err set
 * ("WHAT: bad JSON at offset N"). */
struct cJSON *cst_json_parse(const char *text, size_t len, const char *what, char **err);
int cst_utf8_valid(const char *s, size_t n);

/* Pieces of the schema compiler (schema_num.c, schema_str.c, regex.c): each appends one
 * parenthesized GBNF expression to b; 0 or PLUME_EINVAL naming path. */
int cst_number_expr(plume_buf *b, int is_int, const struct cJSON *schema, const char *path, char **err);
int cst_string_expr(plume_buf *b, const struct cJSON *schema, int dialect, const char *char_rule, const char *path,
                   char **err);
int cst_regex_expr(plume_buf *b, const char *pattern, int64_t lo, int64_t hi, int dialect, const char *path, char **err);
/* One character whose code point is in the set, in the dialect's spelling; -1 when the
 * dialect cannot spell any member (nothing is appended then). */
int cst_char_expr(plume_buf *b, const cst_cpset *s, int dialect);

/* Tools (OpenAI's "tools" array) + tool_choice ("required", "auto" is refused, a function
 * name, or {"type":"function","function":{"name":...}} as JSON text) -> GBNF text: one call
 * (a named function) or one or more (required) in Gemma 4's format, arguments valid against
 * each function's parameters. 0, PLUME_EINVAL or PLUME_ENOMEM. */
int cst_tools_to_gbnf(const char *tools_json, const char *tool_choice, char **gbnf, char **err);

/* ---- the recognizer (dfa.c) -------------------------------------------------------------- */

typedef struct cst_dfa cst_dfa;

#define CST_DEAD (-1)     /* the state that accepts nothing more */
#define CST_LIMIT (-2)    /* a step that would pass the limits below (an error) */
#define CST_MAX_STATES (1 << 20)
#define CST_MAX_FRAMES (1 << 24)
/* The work one step (one byte, one token, or the start) may do: (position, stack) pairs
 * queued for expansion. A step past it is CST_LIMIT, whatever the recognizer made before:
 * the count depends only on the state and the byte, so the outcome is the same on every
 * walk. Real schemas' grammars stay below 1,000 (docs/STRUCTURED.md "Limits"); an ambiguous
 * grammar nested deep (every "(" doubling the ways to read the text) reaches it in a few
 * milliseconds instead of filling CST_MAX_FRAMES in seconds. */
#define CST_STEP_WORK (1 << 16)

/* A recognizer of g (which must outlive it); 0 or PLUME_ENOMEM. */
int cst_dfa_new(cst_dfa **out, const cst_grammar *g, char **err);
void cst_dfa_free(cst_dfa *d);
/* The start state, or CST_LIMIT (computed once: every call gives the same). */
int32_t cst_dfa_start(cst_dfa *d);
/* The state after byte b from state s (s >= 0): a state, CST_DEAD or CST_LIMIT. Each
 * outcome, CST_LIMIT included, is cached: the same bytes reach the same states again. */
int32_t cst_dfa_step(cst_dfa *d, int32_t s, uint8_t b);
/* The state after token id from state s; CST_DEAD when no top of s is that token (cached
 * as cst_dfa_step's). */
int32_t cst_dfa_step_token(cst_dfa *d, int32_t s, int32_t id);
/* The special tokens s accepts next: *ids (valid until the next call on d) and their count. */
int32_t cst_dfa_tokens(cst_dfa *d, int32_t s, const int32_t **ids);
/* Whether s is the end of the grammar (the whole root matched). */
int cst_dfa_accepting(const cst_dfa *d, int32_t s);
/* Whether the bytes s[0, n) take the start state to an accepting one (tests, fuzzing). */
int cst_dfa_matches(cst_dfa *d, const char *s, size_t n);
/* States made so far (for caches sized by states). */
int32_t cst_dfa_n_states(const cst_dfa *d);

/* ---- the vocabulary index (vocab.c) ------------------------------------------------------ */
/* (the recognizer's walk over it, cst_dfa_walk, is declared after it) */

/* The tokens as bytes, sorted so that a walk shares the work of common prefixes. The walk
 * reads order, lcp, len and sfx front to back (each sorted token's bytes after the prefix it
 * shares with the one before: the token trie's edges, in depth-first order). */
struct plume_vocab {
    const plume_tokenizer *tok;
    int32_t n_vocab;     /* V */
    uint32_t *off;       /* [V + 1] token id's bytes: bytes[off[id] .. off[id + 1]) */
    uint8_t *bytes;
    uint8_t *symbol;     /* [V] 1: a special token, matched only as itself, never as bytes */
    int32_t *order;      /* [n_sorted] the other tokens with at least one byte, by their bytes */
    uint8_t *lcp;        /* [n_sorted] bytes shared with the previous one in order */
    uint8_t *len;        /* [n_sorted] its length in bytes */
    uint8_t *sfx;        /* its bytes from lcp on, one token after another */
    int32_t n_sorted;
    int32_t max_len;     /* the longest token in bytes (at most 255: longer ones are not sorted) */
    int32_t *skip;       /* [n_sorted] the next index whose lcp is smaller (n_sorted: none): the
                            end of the trie subtree a dead prefix of the token at i ends */
    uint32_t *sfx_off;   /* [n_sorted + 1] where each sorted token's suffix starts in sfx */
    int32_t first[257];  /* order[first[b] .. first[b + 1]) start with byte b */
    uint32_t sfx_at[257]; /* where the suffixes of order[first[b]] start in sfx */
};

/* Every token whose bytes lead from state s to a live state, and the special tokens s takes,
 * as bits [(V + 31) / 32]; the count, or PLUME_ENOMEM. st: [v->max_len + 1] scratch. */
int32_t cst_dfa_walk(cst_dfa *d, int32_t s, const plume_vocab *v, uint32_t *bits, int32_t *st);

/* ---- masks for the sampler (constraint.c) ------------------------------------------------ */

/* The allowed ids of the current state: a bitmap when many, a sorted list when few. */
typedef struct {
    const uint32_t *bits; /* [(V + 31) / 32] or NULL */
    const int32_t *ids;   /* [n] ascending, when bits is NULL */
    int32_t n;            /* how many ids are allowed */
} cst_mask;

/* Whether id may come next (0 too when the step passed the recognizer's limits: then the
 * constraint is marked, see cst_limited). */
int cst_allows(plume_constraint *c, int32_t id);
/* Whether a step from a current state passed the recognizer's limits since the last reset
 * (plume_constraint_status LIMIT); cst_set_limited puts the mark back as it was (a
 * speculative probe does not leave it). */
int cst_limited(const plume_constraint *c);
void cst_set_limited(plume_constraint *c, int limited);
/* How many of the 256 first bytes the current state accepts (a dense state accepts most). */
int32_t cst_live_first_bytes(plume_constraint *c);
/* Whether the whole mask of the current state is cached (then reading it is cheap). */
int cst_mask_cached(const plume_constraint *c);
/* The whole mask of the current state (computed once per state and cached). 0, or
 * PLUME_ENOMEM / PLUME_EINVAL (a dead constraint: nothing is allowed). */
int cst_mask_get(plume_constraint *c, cst_mask *m);

#endif /* PLUME_CONSTRAIN_H */
