/* dfa.c -- the recognizer: a pushdown automaton over bytes run as a DFA built lazily.
 *
 * A configuration of the grammar is a set of stacks (the grammar may be ambiguous, so every
 * way of reading the text so far is kept, as llama.cpp does). A stack is a chain of frames:
 * a position in a rule's run (what comes next) and the frame to return to when that run
 * ends. Frames are interned (equal (position, parent) pairs are one frame), so a stack is
 * one frame id and a set of stacks a sorted list of ids; that list is interned too and is a
 * state of the DFA. Only stacks whose top is a terminal (a byte set or a special token) are
 * kept: a step follows rule references and returns eagerly ("expands"), with tail calls
 * pushing nothing, so `x ::= y x | ""` runs in constant stack.
 *
 * The workload: a token mask walks every token's bytes from one state (the vocabulary
 * sorted, so prefixes are shared: ~2 M bytes for Gemma's 262144 tokens when nearly all are
 * allowed), and sampling steps the state by one token's bytes. So transitions are cached in
 * a 256-entry table per state, allocated at the state's first step, and a step that was seen
 * before costs one load. A new transition costs one expansion over the state's stacks.
 * States and frames only grow (a generation reaches few thousand; the limits below turn a
 * runaway grammar into an error, never into unbounded memory).
 *
 * Determinism. An ambiguous grammar can double its stacks at every byte (`term ::= [(]* |
 * "(" expr ")"` read over "((((": each "(" is a character or opens a group), so one step
 * may cost without bound. An expansion stops after CST_STEP_WORK queued pairs: that count is
 * a function of the state's stacks and the byte alone (frames are interned, so a frame id
 * is a stack), so the same step fails the same way on every walk, in milliseconds. The
 * memory limits (CST_MAX_FRAMES, CST_MAX_STATES) depend on what was made before; every
 * outcome, a failure too, is cached (the start state included), so a walk over bytes seen
 * before finds the same states. Not thread-safe: one recognizer per constraint. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

#define UNKNOWN (-3) /* a transition not computed yet */

typedef struct {
    int32_t pos;    /* an element of g->elems: what comes next */
    int32_t parent; /* the frame to continue with when this run ends, or -1: the end of root */
} dfa_frame;

typedef struct {
    int64_t off;     /* frame ids in pool[off .. off + n), ascending: the stacks' tops */
    int32_t n;
    int32_t accept;  /* 1: an empty stack too (root matched whole) */
    int32_t *next;   /* [256] state after each byte, UNKNOWN, CST_DEAD; NULL until stepped */
    int64_t toff;    /* special tokens at the tops: tpool[toff .. toff + n_tok) */
    int32_t n_tok;   /*   with tnext[...] the state after each (UNKNOWN until taken) */
} dfa_state;

struct cst_dfa {
    const cst_grammar *g;
    dfa_frame *frames;
    int32_t n_frames;
    size_t cap_frames;
    int32_t *fht;            /* [fht_cap] frame id + 1 by (pos, parent) hash */
    int32_t fht_cap;
    dfa_state *st;
    int32_t n_st;
    size_t cap_st;
    int32_t *sht;            /* [sht_cap] state id + 1 by content hash */
    int32_t **next;          /* [cap_next] each state's transition table (dfa_state.next), packed for the walk */
    size_t cap_next;
    int32_t sht_cap;
    int32_t *pool;           /* frame id lists of the states */
    int64_t n_pool;
    size_t cap_pool;
    int32_t *tpool, *tnext;  /* special tokens of the states, and where each leads */
    int64_t n_tpool;
    size_t cap_tpool, cap_tnext;
    int32_t start;           /* the start state once computed (UNKNOWN before) */
    /* scratch of one expansion */
    dfa_frame *work;         /* (pos, parent) pairs to expand */
    int32_t n_work;
    size_t cap_work;
    int32_t n_queued;        /* pairs queued by this expansion, against CST_STEP_WORK */
    int32_t *out;            /* terminal frames found */
    int32_t n_out;
    size_t cap_out;
    int32_t out_accept;
    uint64_t *vis_key;       /* [vis_cap] (pos, parent) seen in this expansion ... */
    uint32_t *vis_gen;       /* ... valid when vis_gen == gen */
    int32_t vis_cap, n_vis;
    uint32_t gen;
    int oom;
};

/* A 64-bit mix of two ints (splitmix64's finalizer). */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- frames ------------------------------------------------------------------------------ */

/* The id of frame (pos, parent) if it exists, else -1. */
static int32_t frame_find(const cst_dfa *d, int32_t pos, int32_t parent) {
    if (!d->fht_cap) return -1;
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    for (uint32_t h = (uint32_t)mix(key) & (uint32_t)(d->fht_cap - 1); d->fht[h]; h = (h + 1) & (uint32_t)(d->fht_cap - 1)) {
        const dfa_frame *f = &d->frames[d->fht[h] - 1];
        if (f->pos == pos && f->parent == parent) return d->fht[h] - 1;
    }
    return -1;
}

/* The id of frame (pos, parent), made if new; -1 past the limit or out of memory (a frame
 * that exists is found at the limit too). */
static int32_t frame_intern(cst_dfa *d, int32_t pos, int32_t parent) {
    int32_t id = frame_find(d, pos, parent);
    if (id >= 0) return id;
    if (d->n_frames >= CST_MAX_FRAMES) return -1;
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    if (2 * (d->n_frames + 1) > d->fht_cap) { /* rehash at half load */
        int32_t cap = d->fht_cap ? d->fht_cap * 2 : 1024;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) { d->oom = 1; return -1; }
        for (int32_t i = 0; i < d->n_frames; i++) {
            uint64_t k = (uint64_t)(uint32_t)d->frames[i].pos << 32 | (uint32_t)d->frames[i].parent;
            uint32_t h = (uint32_t)mix(k) & (uint32_t)(cap - 1);
            while (ht[h]) h = (h + 1) & (uint32_t)(cap - 1);
            ht[h] = i + 1;
        }
        free(d->fht);
        d->fht = ht;
        d->fht_cap = cap;
    }
    uint32_t h = (uint32_t)mix(key) & (uint32_t)(d->fht_cap - 1);
    while (d->fht[h]) h = (h + 1) & (uint32_t)(d->fht_cap - 1);
    if (plume_grow(&d->frames, &d->cap_frames, (size_t)d->n_frames + 1, sizeof *d->frames)) { d->oom = 1; return -1; }
    d->frames[d->n_frames] = (dfa_frame){pos, parent};
    d->fht[h] = d->n_frames + 1;
    return d->n_frames++;
}

/* ---- expansion --------------------------------------------------------------------------- */

/* Whether (pos, parent) was expanded already in this expansion; marks it. */
static int visited(cst_dfa *d, int32_t pos, int32_t parent) {
    if (2 * (d->n_vis + 1) > d->vis_cap) { /* grow, keeping this generation's marks */
        int32_t cap = d->vis_cap ? d->vis_cap * 2 : 256;
        uint64_t *k = calloc((size_t)cap, sizeof *k);
        uint32_t *g = calloc((size_t)cap, sizeof *g);
        if (!k || !g) { free(k); free(g); d->oom = 1; return 1; }
        for (int32_t i = 0; i < d->vis_cap; i++)
            if (d->vis_gen[i] == d->gen) {
                uint32_t h = (uint32_t)mix(d->vis_key[i]) & (uint32_t)(cap - 1);
                while (g[h] == d->gen) h = (h + 1) & (uint32_t)(cap - 1);
                k[h] = d->vis_key[i];
                g[h] = d->gen;
            }
        free(d->vis_key);
        free(d->vis_gen);
        d->vis_key = k;
        d->vis_gen = g;
        d->vis_cap = cap;
    }
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    uint32_t h = (uint32_t)mix(key) & (uint32_t)(d->vis_cap - 1);
    for (; d->vis_gen[h] == d->gen; h = (h + 1) & (uint32_t)(d->vis_cap - 1))
        if (d->vis_key[h] == key) return 1;
    d->vis_key[h] = key;
    d->vis_gen[h] = d->gen;
    d->n_vis++;
    return 0;
}

/* Start an expansion: empty scratch, a new generation of marks. */
static void expand_begin(cst_dfa *d) {
    d->n_work = 0;
    d->n_queued = 0;
    d->n_out = 0;
    d->out_accept = 0;
    d->n_vis = 0;
    if (++d->gen == 0) { /* wrapped: clear the marks once every 4 G expansions */
        if (d->vis_gen) memset(d->vis_gen, 0, (size_t)d->vis_cap * sizeof *d->vis_gen);
        d->gen = 1;
    }
}

/* Queue (pos, parent) for expansion; 0, or -1 past CST_STEP_WORK or out of memory. */
static int work_push(cst_dfa *d, int32_t pos, int32_t parent) {
    if (++d->n_queued > CST_STEP_WORK) return -1;
    if (plume_grow(&d->work, &d->cap_work, (size_t)d->n_work + 1, sizeof *d->work)) { d->oom = 1; return -1; }
    d->work[d->n_work++] = (dfa_frame){pos, parent};
    return 0;
}

/* Expand everything queued: follow rule references and returns until each stack's top is a
 * terminal (into out) or the stack is empty (out_accept). 0, or -1 (limit or memory). */
static int expand_run(cst_dfa *d) {
    const cst_grammar *g = d->g;
    while (d->n_work > 0 && !d->oom) {
        dfa_frame w = d->work[--d->n_work];
        if (visited(d, w.pos, w.parent)) continue;
        const cst_elem *e = &g->elems[w.pos];
        if (e->type == CST_BYTES || e->type == CST_TOKEN) {
            int32_t f = frame_intern(d, w.pos, w.parent);
            if (f < 0) return -1;
            if (plume_grow(&d->out, &d->cap_out, (size_t)d->n_out + 1, sizeof *d->out)) { d->oom = 1; break; }
            d->out[d->n_out++] = f;
        } else if (e->type == CST_RULE) {
            int32_t cont = w.parent;
            if (g->elems[w.pos + 1].type != CST_END) { /* something follows: push a return frame */
                cont = frame_intern(d, w.pos + 1, w.parent);
                if (cont < 0) return -1;
            }
            for (int32_t a = g->rule_alts[e->v]; a < g->rule_alts[e->v + 1]; a++)
                if (work_push(d, g->alts[a], cont)) return -1;
        } else if (w.parent < 0) { /* CST_END of root */
            d->out_accept = 1;
        } else { /* CST_END: return */
            dfa_frame p = d->frames[w.parent];
            if (work_push(d, p.pos, p.parent)) return -1;
        }
    }
    return d->oom ? -1 : 0;
}

/* ---- states ------------------------------------------------------------------------------ */

/* Order ids ascending. */
static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Hash of a state's content. */
static uint64_t state_hash(const int32_t *f, int32_t n, int32_t accept) {
    uint64_t h = mix((uint64_t)n * 2 + (uint64_t)accept);
    for (int32_t i = 0; i < n; i++) h = mix(h ^ (uint64_t)(uint32_t)f[i]);
    return h;
}

/* Insert state i into the state table (grown at half load). 0 or -1. */
static int sht_insert(cst_dfa *d, int32_t i, uint64_t h) {
    if (2 * (d->n_st + 1) > d->sht_cap) {
        int32_t cap = d->sht_cap ? d->sht_cap * 2 : 256;
        int32_t *ht = calloc((size_t)cap, sizeof *ht);
        if (!ht) return -1;
        for (int32_t k = 0; k < d->n_st; k++) {
            const dfa_state *s = &d->st[k];
            uint32_t x = (uint32_t)state_hash(d->pool + s->off, s->n, s->accept) & (uint32_t)(cap - 1);
            while (ht[x]) x = (x + 1) & (uint32_t)(cap - 1);
            ht[x] = k + 1;
        }
        free(d->sht);
        d->sht = ht;
        d->sht_cap = cap;
    }
    uint32_t x = (uint32_t)h & (uint32_t)(d->sht_cap - 1);
    while (d->sht[x]) x = (x + 1) & (uint32_t)(d->sht_cap - 1);
    d->sht[x] = i + 1;
    return 0;
}

/* The state of the expansion's result (sorted, deduplicated), made if new: a state id,
 * CST_DEAD when nothing is left, or CST_LIMIT. */
static int32_t state_of_out(cst_dfa *d) {
    if (d->oom) return CST_LIMIT;
    if (d->n_out == 0 && !d->out_accept) return CST_DEAD;
    if (d->n_out > 1) qsort(d->out, (size_t)d->n_out, sizeof *d->out, cmp_i32);
    int32_t n = 0;
    for (int32_t i = 0; i < d->n_out; i++)
        if (n == 0 || d->out[i] != d->out[n - 1]) d->out[n++] = d->out[i];
    uint64_t h = state_hash(d->out, n, d->out_accept);
    if (d->sht_cap) {
        for (uint32_t x = (uint32_t)h & (uint32_t)(d->sht_cap - 1); d->sht[x]; x = (x + 1) & (uint32_t)(d->sht_cap - 1)) {
            const dfa_state *s = &d->st[d->sht[x] - 1];
            if (s->n == n && s->accept == d->out_accept && (n == 0 || !memcmp(d->pool + s->off, d->out, (size_t)n * sizeof *d->out)))
                return d->sht[x] - 1;
        }
    }
    if (d->n_st >= CST_MAX_STATES) return CST_LIMIT;
    if (plume_grow(&d->pool, &d->cap_pool, (size_t)(d->n_pool + n), sizeof *d->pool) ||
        plume_grow(&d->st, &d->cap_st, (size_t)d->n_st + 1, sizeof *d->st) ||
        plume_grow(&d->next, &d->cap_next, (size_t)d->n_st + 1, sizeof *d->next))
        return CST_LIMIT;
    d->next[d->n_st] = NULL;
    dfa_state *s = &d->st[d->n_st];
    memset(s, 0, sizeof *s);
    s->off = d->n_pool;
    s->n = n;
    s->accept = d->out_accept;
    if (n) memcpy(d->pool + d->n_pool, d->out, (size_t)n * sizeof *d->out);
    d->n_pool += n;
    /* the special tokens at the tops, each once */
    s->toff = d->n_tpool;
    for (int32_t i = 0; i < n; i++) {
        const cst_elem *e = &d->g->elems[d->frames[d->out[i]].pos];
        if (e->type != CST_TOKEN) continue;
        int32_t id = d->g->tok_id[e->v], seen = 0;
        for (int32_t k = 0; k < s->n_tok && !seen; k++) seen = d->tpool[s->toff + k] == id;
        if (seen || id < 0) continue;
        if (plume_grow(&d->tpool, &d->cap_tpool, (size_t)d->n_tpool + 1, sizeof *d->tpool) ||
            plume_grow(&d->tnext, &d->cap_tnext, (size_t)d->n_tpool + 1, sizeof *d->tnext))
            return CST_LIMIT;
        d->tpool[d->n_tpool] = id;
        d->tnext[d->n_tpool++] = UNKNOWN;
        s->n_tok++;
    }
    if (sht_insert(d, d->n_st, h)) return CST_LIMIT;
    return d->n_st++;
}

/* ---- the API of the room ----------------------------------------------------------------- */

/* A recognizer of g. */
int cst_dfa_new(cst_dfa **out, const cst_grammar *g, char **err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return plume_fail(err, PLUME_ENOMEM, "constraint: out of memory");
    (*out)->g = g;
    (*out)->start = UNKNOWN;
    (*out)->cap_pool = 64; /* never NULL, so that pool + off is always defined */
    (*out)->pool = malloc(64 * sizeof *(*out)->pool);
    if (!(*out)->pool) {
        free(*out);
        *out = NULL;
        return plume_fail(err, PLUME_ENOMEM, "constraint: out of memory");
    }
    return 0;
}

/* Free everything the recognizer made; NULL is a no-op. */
void cst_dfa_free(cst_dfa *d) {
    if (!d) return;
    for (int32_t i = 0; i < d->n_st; i++) free(d->st[i].next);
    free(d->frames);
    free(d->fht);
    free(d->st);
    free(d->next);
    free(d->sht);
    free(d->pool);
    free(d->tpool);
    free(d->tnext);
    free(d->work);
    free(d->out);
    free(d->vis_key);
    free(d->vis_gen);
    free(d);
}

/* The start state: root's alternatives expanded with nothing to return to (once). */
int32_t cst_dfa_start(cst_dfa *d) {
    if (d->start != UNKNOWN) return d->start;
    const cst_grammar *g = d->g;
    expand_begin(d);
    int rc = 0;
    for (int32_t a = g->rule_alts[g->root]; a < g->rule_alts[g->root + 1] && !rc; a++) rc = work_push(d, g->alts[a], -1);
    d->start = rc || expand_run(d) ? CST_LIMIT : state_of_out(d);
    return d->start;
}

/* One byte from state s (the file comment says what is cached). */
int32_t cst_dfa_step(cst_dfa *d, int32_t s, uint8_t b) {
    if (s < 0) return CST_DEAD;
    if (d->st[s].next && d->st[s].next[b] != UNKNOWN) return d->st[s].next[b];
    if (!d->st[s].next) {
        int32_t *nx = malloc(256 * sizeof *nx);
        if (!nx) return CST_LIMIT;
        for (int i = 0; i < 256; i++) nx[i] = UNKNOWN;
        d->st[s].next = nx;
        d->next[s] = nx;
    }
    expand_begin(d);
    const cst_grammar *g = d->g;
    int rc = 0;
    for (int32_t i = 0; i < d->st[s].n && !rc; i++) {
        dfa_frame f = d->frames[d->pool[d->st[s].off + i]];
        const cst_elem *e = &g->elems[f.pos];
        if (e->type == CST_BYTES && (g->sets[e->v][b >> 6] >> (b & 63) & 1)) rc = work_push(d, f.pos + 1, f.parent);
    }
    int32_t t = rc || expand_run(d) ? CST_LIMIT : state_of_out(d);
    d->st[s].next[b] = t; /* d->st may have moved: index again */
    return t;
}

/* One special token from state s. */
int32_t cst_dfa_step_token(cst_dfa *d, int32_t s, int32_t id) {
    if (s < 0) return CST_DEAD;
    int64_t k = -1;
    for (int32_t i = 0; i < d->st[s].n_tok && k < 0; i++)
        if (d->tpool[d->st[s].toff + i] == id) k = d->st[s].toff + i;
    if (k < 0) return CST_DEAD;
    if (d->tnext[k] != UNKNOWN) return d->tnext[k];
    expand_begin(d);
    const cst_grammar *g = d->g;
    int rc = 0;
    for (int32_t i = 0; i < d->st[s].n && !rc; i++) {
        dfa_frame f = d->frames[d->pool[d->st[s].off + i]];
        const cst_elem *e = &g->elems[f.pos];
        if (e->type == CST_TOKEN && g->tok_id[e->v] == id) rc = work_push(d, f.pos + 1, f.parent);
    }
    int32_t t = rc || expand_run(d) ? CST_LIMIT : state_of_out(d);
    d->tnext[k] = t; /* tnext may have moved: index again */
    return t;
}

/* The special tokens state s accepts next. */
int32_t cst_dfa_tokens(cst_dfa *d, int32_t s, const int32_t **ids) {
    if (s < 0) { *ids = NULL; return 0; }
    *ids = d->tpool ? d->tpool + d->st[s].toff : NULL;
    return d->st[s].n_tok;
}

/* Whether state s has matched root whole. */
int cst_dfa_accepting(const cst_dfa *d, int32_t s) { return s >= 0 && d->st[s].accept; }

/* Run the bytes from the start state. */
int cst_dfa_matches(cst_dfa *d, const char *s, size_t n) {
    int32_t st = cst_dfa_start(d);
    for (size_t i = 0; i < n && st >= 0; i++) st = cst_dfa_step(d, st, (uint8_t)s[i]);
    return cst_dfa_accepting(d, st);
}

/* States made so far. */
int32_t cst_dfa_n_states(const cst_dfa *d) { return d->n_st; }

/* ---- the mask walk ----------------------------------------------------------------------- */

/* One byte from live state s: the cached transition when there is one (the walk's common
 * case: a load), else cst_dfa_step. */
static inline int32_t step_fast(cst_dfa *d, int32_t s, uint8_t b) {
    const int32_t *nx = d->next[s];
    int32_t u;
    if (nx && (u = nx[b]) != UNKNOWN) return u;
    return cst_dfa_step(d, s, b);
}

/* Every token whose bytes lead from state s to a live state, and every special token s
 * accepts, as bits of bits [(V + 31) / 32] (cleared first); the count, or PLUME_ENOMEM when
 * the recognizer hit its limits. st: [v->max_len + 1] scratch.
 *
 * Per first byte the state accepts, that bucket's tokens in sorted order: st[k] is the state
 * after the current token's first k bytes; a token steps only from the prefix it shares with
 * the one before on, and one sharing a prefix that died is skipped without a step. */
int32_t cst_dfa_walk(cst_dfa *d, int32_t s, const plume_vocab *v, uint32_t *bits, int32_t *st) {
    int32_t n = 0;
    memset(bits, 0, (size_t)((v->n_vocab + 31) / 32) * sizeof *bits);
    st[0] = s;
    for (int b = 0; b < 256; b++) {
        if (v->first[b] == v->first[b + 1]) continue;
        int32_t t = cst_dfa_step(d, s, (uint8_t)b);
        if (t == CST_LIMIT) return PLUME_ENOMEM;
        if (t < 0) continue; /* no token starting with b */
        st[1] = t;
        int32_t alive = 1, end = v->first[b + 1]; /* st[0 .. alive] hold along the previous token */
        const uint8_t *p = v->sfx + v->sfx_at[b];
        for (int32_t i = v->first[b]; i < end;) {
            int32_t lcp = v->lcp[i], len = v->len[i], k = lcp > 1 ? lcp : 1;
            for (; k < len; k++) { /* byte k of the token is p[k - lcp] */
                int32_t u = step_fast(d, st[k], p[k - lcp]);
                if (u < 0) {
                    if (u == CST_LIMIT) return PLUME_ENOMEM;
                    break;
                }
                st[k + 1] = u;
            }
            alive = k;
            if (k == len) {
                int32_t id = v->order[i];
                bits[id >> 5] |= 1u << (id & 31);
                n++;
                p += len - lcp;
                i++;
                continue;
            }
            /* byte k died: every next token sharing more than k bytes shares the dead prefix */
            int32_t j = i + 1;
            while (j < end && v->lcp[j] > alive) j = v->skip[j];
            p = j == i + 1 ? p + (len - lcp) : v->sfx + v->sfx_off[j];
            i = j;
        }
    }
    const int32_t *toks;
    int32_t nt = cst_dfa_tokens(d, s, &toks);
    for (int32_t i = 0; i < nt; i++)
        if (!(bits[toks[i] >> 5] >> (toks[i] & 31) & 1)) {
            bits[toks[i] >> 5] |= 1u << (toks[i] & 31);
            n++;
        }
    return n;
}
