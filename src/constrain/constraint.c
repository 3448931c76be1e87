/* constraint.c -- plume_constraint: a grammar's recognizer, the states of a generation and
 * the token masks (docs/STRUCTURED.md "Costs").
 *
 * A constraint is a recognizer (dfa.c) plus the history of its states, one per accepted id,
 * so that a rewind of any depth (a rejected speculative draft) is an index move. The grammar
 * is wrapped (cst_grammar_wrap) so that the end-of-turn tokens come only after the whole root: a
 * constraint needs no separate notion of "complete".
 *
 * Masks. A whole mask walks the sorted vocabulary from the current state (vocab.c), skipping
 * every token that starts with a byte the state refuses and every token sharing a prefix that
 * died. Its result is cached per state: a sorted id list when few tokens are allowed (after
 * "{" only those starting with '"', '}' or whitespace), a bitmap when many (inside a string);
 * states repeat (the same string rule at the same depth, the same separator), so most steps
 * of a generation find their mask made. The cache is bounded (CACHE_BYTES) and cleared whole
 * when full. The sampler mostly does not need a whole mask: greedy and top-k ask
 * cst_allows() of their best candidates, which steps each candidate's few bytes. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define CACHE_BYTES ((size_t)32 << 20) /* masks kept per constraint before the cache is cleared */
#define MAX_END 3

/* A cached mask: ids (sparse) or bits (dense). */
typedef struct {
    uint32_t *bits; /* [W] or NULL */
    int32_t *ids;   /* [n] ascending, when bits is NULL */
    int32_t n;
} mask_slot;

struct plume_constraint {
    const plume_vocab *v;
    cst_grammar g;
    cst_dfa *d;
    int32_t *hist;          /* [n_hist] the state after each accepted id; hist[0] the start */
    int32_t n_hist;
    size_t cap_hist;
    int32_t end[MAX_END];   /* the end-of-turn token ids */
    int32_t n_end;
    int32_t *slot_of;       /* [cap_slot_of] a state's mask slot + 1, 0: none */
    size_t cap_slot_of;
    mask_slot *slots;
    int32_t n_slots;
    size_t cap_slots;
    size_t cache_bytes;
    int limited;            /* a step passed the recognizer's limits (status LIMIT until reset) */
    uint32_t *wbits;        /* [W] a walk's bitmap */
    int32_t *depth;         /* [max_len + 1] states along the current token's bytes */
};

/* ---- the mask cache ---------------------------------------------------------------------- */

/* Forget every cached mask. */
static void cache_clear(plume_constraint *c) {
    for (int32_t i = 0; i < c->n_slots; i++) {
        free(c->slots[i].bits);
        free(c->slots[i].ids);
    }
    c->n_slots = 0;
    c->cache_bytes = 0;
    if (c->slot_of) memset(c->slot_of, 0, (size_t)c->cap_slot_of * sizeof *c->slot_of);
}

/* The cached mask of state s, or NULL. */
static const mask_slot *cache_get(const plume_constraint *c, int32_t s) {
    if (s < 0 || (size_t)s >= c->cap_slot_of || !c->slot_of[s]) return NULL;
    return &c->slots[c->slot_of[s] - 1];
}

/* Keep the walk's bitmap (count n) as state s's mask; the stored slot, or NULL (memory). */
static const mask_slot *cache_put(plume_constraint *c, int32_t s, int32_t n) {
    int32_t V = c->v->n_vocab, W = (V + 31) / 32;
    int sparse = (int64_t)n * 32 < V;
    size_t bytes = sparse ? (size_t)n * sizeof(int32_t) : (size_t)W * sizeof(uint32_t);
    if (c->cache_bytes + bytes > CACHE_BYTES) cache_clear(c);
    size_t had = c->cap_slot_of;
    if (plume_grow(&c->slot_of, &c->cap_slot_of, (size_t)s + 1, sizeof *c->slot_of)) return NULL;
    memset(c->slot_of + had, 0, (c->cap_slot_of - had) * sizeof *c->slot_of);
    if (plume_grow(&c->slots, &c->cap_slots, (size_t)c->n_slots + 1, sizeof *c->slots)) return NULL;
    mask_slot m = {NULL, NULL, n};
    if (sparse) {
        m.ids = malloc(bytes ? bytes : 1);
        if (!m.ids) return NULL;
        int32_t k = 0;
        for (int32_t w = 0; w < W && k < n; w++)
            for (uint32_t x = c->wbits[w]; x; x &= x - 1) m.ids[k++] = w * 32 + __builtin_ctz(x);
    } else {
        m.bits = malloc(bytes);
        if (!m.bits) return NULL;
        memcpy(m.bits, c->wbits, bytes);
    }
    c->slots[c->n_slots] = m;
    c->slot_of[s] = ++c->n_slots;
    c->cache_bytes += bytes;
    return &c->slots[c->n_slots - 1];
}

/* ---- the walk ---------------------------------------------------------------------------- */

/* The whole mask of state s into c->wbits: the vocabulary walked by the recognizer (a walk
 * fails only where a step passed its limits: the constraint is marked). */
static int32_t walk(plume_constraint *c, int32_t s) {
    int32_t n = cst_dfa_walk(c->d, s, c->v, c->wbits, c->depth);
    if (n < 0) c->limited = 1;
    return n;
}

/* ---- stepping ---------------------------------------------------------------------------- */

/* The state after id from state s: a special token the state names, else the id's bytes.
 * CST_LIMIT marks the constraint. */
static int32_t step_id(plume_constraint *c, int32_t s, int32_t id) {
    if (s < 0) return CST_DEAD;
    const int32_t *toks;
    int32_t nt = cst_dfa_tokens(c->d, s, &toks);
    for (int32_t i = 0; i < nt; i++)
        if (toks[i] == id) {
            s = cst_dfa_step_token(c->d, s, id);
            if (s == CST_LIMIT) c->limited = 1;
            return s;
        }
    if (c->v->symbol[id]) return CST_DEAD;
    const uint8_t *p = c->v->bytes + c->v->off[id];
    int32_t len = (int32_t)(c->v->off[id + 1] - c->v->off[id]);
    if (len == 0) return CST_DEAD;
    for (int32_t k = 0; k < len && s >= 0; k++) s = cst_dfa_step(c->d, s, p[k]);
    if (s == CST_LIMIT) c->limited = 1;
    return s;
}

/* The current state. */
static int32_t current(const plume_constraint *c) { return c->hist[c->n_hist - 1]; }

/* ---- construction ------------------------------------------------------------------------ */

/* Defaults: no thought. */
plume_constraint_params plume_constraint_default_params(void) {
    plume_constraint_params p = {0};
    return p;
}

/* Whether text is one special token of v; its id in *id. */
static int special_id(const plume_vocab *v, const char *text, int32_t *id) {
    int32_t ids[2];
    if (plume_tokenize(v->tok, text, strlen(text), ids, 2) != 1 || !v->symbol[ids[0]]) return 0;
    *id = ids[0];
    return 1;
}

/* A constraint from GBNF text, ended by those of the end texts the vocabulary has. */
static int constraint_from_gbnf(plume_constraint **out, const plume_vocab *v, const char *gbnf, size_t len,
                                const char *const *ends, int32_t n_ends, const plume_constraint_params *pp,
                                char **err) {
    if (!out || !v) return plume_fail(err, PLUME_EINVAL, "constraint: out or vocab is NULL");
    *out = NULL;
    plume_constraint_params p = pp ? *pp : plume_constraint_default_params();
    if (p.thinking < 0 || p.thinking > 2)
        return plume_fail(err, PLUME_EINVAL, "constraint: thinking %d is not 0, 1 or 2", p.thinking);
    int32_t tmp;
    if (p.thinking && (!special_id(v, "<|channel>", &tmp) || !special_id(v, "<channel|>", &tmp)))
        return plume_fail(err, PLUME_EINVAL, "constraint: thinking needs the <|channel> and <channel|> tokens");
    plume_constraint *c = calloc(1, sizeof *c);
    if (!c) return plume_fail(err, PLUME_ENOMEM, "constraint: out of memory");
    c->v = v;
    const char *have[MAX_END];
    for (int32_t i = 0; i < n_ends && c->n_end < MAX_END; i++)
        if (special_id(v, ends[i], &c->end[c->n_end])) have[c->n_end++] = ends[i];
    int rc = 0;
    if (c->n_end == 0) {
        rc = plume_fail(err, PLUME_EINVAL, "constraint: the vocabulary has no end-of-turn token (%s)", ends[0]);
        goto fail;
    }
    if ((rc = cst_grammar_parse(&c->g, gbnf, len, err)) || (rc = cst_grammar_wrap(&c->g, p.thinking, have, c->n_end, err)) ||
        (rc = cst_grammar_bind(&c->g, v->tok, err)) || (rc = cst_dfa_new(&c->d, &c->g, err)))
        goto fail;
    c->cap_hist = 64;
    c->hist = malloc((size_t)c->cap_hist * sizeof *c->hist);
    c->wbits = malloc((size_t)((v->n_vocab + 31) / 32) * sizeof *c->wbits);
    c->depth = malloc(((size_t)v->max_len + 2) * sizeof *c->depth);
    if (!c->hist || !c->wbits || !c->depth) {
        rc = plume_fail(err, PLUME_ENOMEM, "constraint: out of memory");
        goto fail;
    }
    c->hist[0] = cst_dfa_start(c->d);
    c->n_hist = 1;
    if (c->hist[0] < 0) {
        rc = plume_fail(err, PLUME_EINVAL,
                        "constraint: the grammar's start state passes the recognizer's limit (more than %d stacks "
                        "to expand: too ambiguous)", CST_STEP_WORK);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    plume_constraint_free(c);
    return rc;
}

static const char *const turn_ends[] = {"<turn|>", "<eos>"};
static const char *const call_ends[] = {"<|tool_response>", "<turn|>", "<eos>"};

/* Text matching a GBNF grammar. */
int plume_constraint_new_grammar(plume_constraint **out, const plume_vocab *v, const char *gbnf, size_t len,
                                 const plume_constraint_params *p, char **err) {
    return constraint_from_gbnf(out, v, gbnf, len, turn_ends, 2, p, err);
}

/* A value valid against a JSON Schema. */
int plume_constraint_new_json_schema(plume_constraint **out, const plume_vocab *v, const char *schema, size_t len,
                                     const plume_constraint_params *p, char **err) {
    if (out) *out = NULL;
    char *gbnf = NULL;
    int rc = cst_schema_to_gbnf(schema, len, CST_JSON, &gbnf, err);
    if (!rc) rc = constraint_from_gbnf(out, v, gbnf, strlen(gbnf), turn_ends, 2, p, err);
    free(gbnf);
    return rc;
}

/* Any JSON object: the schema {"type": "object"} (an object without named properties takes
 * any members). */
int plume_constraint_new_json(plume_constraint **out, const plume_vocab *v, const plume_constraint_params *p,
                              char **err) {
    static const char any_object[] = "{\"type\": \"object\"}";
    return plume_constraint_new_json_schema(out, v, any_object, sizeof any_object - 1, p, err);
}

/* A tool call in Gemma 4's format. */
int plume_constraint_new_tool_call(plume_constraint **out, const plume_vocab *v, const char *tools_json,
                                   const char *tool_choice, const plume_constraint_params *p, char **err) {
    if (out) *out = NULL;
    char *gbnf = NULL;
    int rc = cst_tools_to_gbnf(tools_json, tool_choice, &gbnf, err);
    if (!rc) rc = constraint_from_gbnf(out, v, gbnf, strlen(gbnf), call_ends, 3, p, err);
    free(gbnf);
    return rc;
}

/* Parse GBNF text; with a tokenizer, bind it and make its start state (the plume.h contract). */
int plume_grammar_check(const char *gbnf, size_t len, const plume_tokenizer *tok, char **err) {
    if (!gbnf) return plume_fail(err, PLUME_EINVAL, "grammar: NULL text");
    cst_grammar g;
    int rc = cst_grammar_parse(&g, gbnf, len, err);
    if (rc) return rc;
    cst_dfa *d = NULL;
    if (tok && !(rc = cst_grammar_bind(&g, tok, err)) && !(rc = cst_dfa_new(&d, &g, err)) && cst_dfa_start(d) == CST_LIMIT)
        rc = plume_fail(err, PLUME_EINVAL,
                        "grammar: the start state passes the recognizer's limit (more than %d stacks to expand: too "
                        "ambiguous)", CST_STEP_WORK);
    cst_dfa_free(d);
    cst_grammar_free(&g);
    return rc;
}

/* The GBNF of a schema, spelled as JSON. */
int plume_json_schema_to_grammar(const char *schema, size_t len, char **gbnf, char **err) {
    return cst_schema_to_gbnf(schema, len, CST_JSON, gbnf, err);
}

/* The GBNF of a forced tool call. */
int plume_tool_call_grammar(const char *tools_json, const char *tool_choice, char **gbnf, char **err) {
    return cst_tools_to_gbnf(tools_json, tool_choice, gbnf, err);
}

/* Free everything; NULL is a no-op. */
void plume_constraint_free(plume_constraint *c) {
    if (!c) return;
    cache_clear(c);
    free(c->slots);
    free(c->slot_of);
    cst_dfa_free(c->d);
    cst_grammar_free(&c->g);
    free(c->hist);
    free(c->wbits);
    free(c->depth);
    free(c);
}

/* ---- the API ----------------------------------------------------------------------------- */

/* Where the generation stands (see the enum in plume.h). */
int32_t plume_constraint_status(plume_constraint *c) {
    if (c->limited) return PLUME_CONSTRAINT_LIMIT;
    int32_t s = current(c);
    if (s < 0) return PLUME_CONSTRAINT_DEAD;
    if (cst_dfa_accepting(c->d, s)) return PLUME_CONSTRAINT_DONE;
    const int32_t *toks;
    int32_t nt = cst_dfa_tokens(c->d, s, &toks);
    for (int32_t i = 0; i < nt; i++)
        for (int32_t k = 0; k < c->n_end; k++)
            if (toks[i] == c->end[k]) return PLUME_CONSTRAINT_COMPLETE;
    return PLUME_CONSTRAINT_OPEN;
}

/* Whether id may come next: the cached mask when there is one, else a step over its bytes. */
int cst_allows(plume_constraint *c, int32_t id) {
    int32_t s = current(c);
    if (s < 0 || id < 0 || id >= c->v->n_vocab) return 0;
    const mask_slot *m = cache_get(c, s);
    if (m) {
        if (m->bits) return m->bits[id >> 5] >> (id & 31) & 1;
        int32_t lo = 0, hi = m->n;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (m->ids[mid] < id) lo = mid + 1;
            else hi = mid;
        }
        return lo < m->n && m->ids[lo] == id;
    }
    return step_id(c, s, id) >= 0;
}

int32_t plume_constraint_allows(plume_constraint *c, int32_t id) { return c ? cst_allows(c, id) : 0; }

/* How many first bytes lead from the current state to a live one (256 steps, cached by the
 * recognizer, which the mask's walk takes first anyway): a state that accepts many refuses
 * few tokens. */
int32_t cst_live_first_bytes(plume_constraint *c) {
    int32_t s = current(c), n = 0;
    for (int b = 0; s >= 0 && b < 256; b++) {
        int32_t t = cst_dfa_step(c->d, s, (uint8_t)b);
        if (t == CST_LIMIT) c->limited = 1;
        n += t >= 0;
    }
    return n;
}

/* The mark of a step past the limits. */
int cst_limited(const plume_constraint *c) { return c->limited; }

/* Put the mark as it was. */
void cst_set_limited(plume_constraint *c, int limited) { c->limited = limited; }

/* Whether the current state's whole mask is made already. */
int cst_mask_cached(const plume_constraint *c) { return cache_get(c, current(c)) != NULL; }

/* The current state's whole mask. */
int cst_mask_get(plume_constraint *c, cst_mask *out) {
    int32_t s = current(c);
    if (s < 0) return PLUME_EINVAL;
    const mask_slot *m = cache_get(c, s);
    if (!m) {
        int32_t n = walk(c, s);
        if (n < 0) return n;
        m = cache_put(c, s, n);
        if (!m) return PLUME_ENOMEM;
    }
    out->bits = m->bits;
    out->ids = m->ids;
    out->n = m->n;
    return 0;
}

/* The mask as a caller's bitmap. */
int32_t plume_constraint_mask(plume_constraint *c, uint32_t *bits) {
    if (!c || !bits) return PLUME_EINVAL;
    int32_t W = (c->v->n_vocab + 31) / 32;
    memset(bits, 0, (size_t)W * sizeof *bits);
    if (current(c) < 0) return 0;
    cst_mask m;
    int rc = cst_mask_get(c, &m);
    if (rc) return rc;
    if (m.bits) memcpy(bits, m.bits, (size_t)W * sizeof *bits);
    else
        for (int32_t i = 0; i < m.n; i++) bits[m.ids[i] >> 5] |= 1u << (m.ids[i] & 31);
    return m.n;
}

/* Advance by id (a DEAD state is pushed too, so that a rewind restores the live one). */
int plume_constraint_accept(plume_constraint *c, int32_t id) {
    if (!c) return PLUME_EINVAL;
    int32_t s = current(c);
    int32_t t = id >= 0 && id < c->v->n_vocab ? step_id(c, s, id) : CST_DEAD;
    if (plume_grow(&c->hist, &c->cap_hist, (size_t)c->n_hist + 1, sizeof *c->hist)) return PLUME_ENOMEM;
    c->hist[c->n_hist++] = t < 0 ? CST_DEAD : t;
    return t == CST_LIMIT ? PLUME_ENOMEM : t < 0 ? PLUME_EINVAL : 0;
}

/* Take back n accepted ids. */
int plume_constraint_rewind(plume_constraint *c, int32_t n) {
    if (!c || n < 0 || n > c->n_hist - 1) return PLUME_EINVAL;
    c->n_hist -= n;
    return 0;
}

/* Back to the start state (the caches stay). */
void plume_constraint_reset(plume_constraint *c) {
    if (!c) return;
    c->n_hist = 1;
    c->limited = 0;
}

/* Ids accepted since the start. */
int32_t plume_constraint_n_accepted(const plume_constraint *c) { return c ? c->n_hist - 1 : 0; }
