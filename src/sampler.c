/* sampler.c -- logits -> one token id (docs/SAMPLING.md).
 *
 * Owns the sampling chain: penalties over the recent history, then greedy argmax, or top-k,
 * softmax with temperature, top-p, min-p and a draw from splitmix64. Knows nothing of the
 * model or the tokenizer: it sees n_vocab floats and ids.
 *
 * The workload that shaped it: one call per generated token over V = 262144 logits, where the
 * forward pass has just streamed gigabytes, so the sampler must cost about one pass over the
 * logits on the default chain (top-k 64) and allocate nothing. Hence:
 *   - top-k up to SAMPLER_HEAP_MAX_K is one read-only pass over the logits with a min-heap
 *     (the heap changes ~k ln(V/k) times on shuffled logits, so blocks of 16 logits none of
 *     which beats its root are skipped with a few vector compares). Greedy is the same pass
 *     with k = 1;
 *   - penalties and a logit bias touch only their ids (those in the window, those biased):
 *     the heap is made that many larger and those ids are re-scored after the pass, so the
 *     logits are never copied;
 *   - larger k, or top-k off, gather every usable id and use quickselect: by rank for top-k,
 *     and by probability mass for top-p (after dropping ids too light to matter). Nothing
 *     sorts V floats; only ranges of at most SAMPLER_SORT_MAX candidates are sorted;
 *   - every buffer is sized V and allocated once in plume_sampler_new().
 * Candidates are ordered by (logit descending, id ascending), so ties always favour the
 * lower id and every result is deterministic.
 *
 * With a constraint attached (docs/STRUCTURED.md), the chain runs over the allowed ids only,
 * exactly as over logits whose other ids are -inf. Greedy and top-k need only the best
 * allowed ids: a heap of the best candidates is walked in rank order and each is asked of the
 * constraint (a few table loads per candidate), as long as no id left out of the heap could
 * rank before it. When that does not settle it in a dense state (a string near its length:
 * most first bytes live, most tokens too long), 4096 more are tried, gathered by a threshold
 * that a sample of the logits sets (a heap that wide costs 1.5 ms, the first visit of such a
 * state was the worst step of a constrained decode); if the candidates run out first (a state
 * that refuses most tokens, whose mask is cheap to make), or the state's whole mask is cached
 * anyway, the candidates are gathered from the mask with one heap pass over the allowed ids. */
#include "common.h"
#include "constrain/constrain.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#define SAMPLER_HEAP_MAX_K 1024 /* top-k above this uses quickselect instead of a heap */
#define SAMPLER_SORT_MAX 32     /* quickselect ranges this small are insertion-sorted */
#define SAMPLER_BEST_FIRST 64   /* constrained top-k: candidates heaped beyond k, best-first */
#define SAMPLER_BEST_WIDE 4096  /* ... and in a dense state, a second try this wide */
#define SAMPLER_DENSE 128       /* a state is dense when it accepts this many first bytes */
#define SAMPLER_WIDE_MIN 1024   /* best-first heaps this wide gather by threshold instead */
#define SAMPLER_WIDE_SAMPLE 8192 /* logits sampled to set that threshold */
#define SAMPLER_RANK_CHUNK 256  /* best-first orders its candidates this many at a time */
#define SAMPLER_BLOCK 16        /* logits a heap pass skips at once when none can enter */
#define SAMPLER_WIDE_BLOCK 8    /* ... and a wide gather when none reaches its threshold */

/* One token still in the running. */
typedef struct {
    float logit; /* after penalties; +inf clamped to FLT_MAX */
    float w;     /* exp((logit - max) / temperature): probability up to 1/Z */
    int32_t id;
} sampler_cand;

struct plume_sampler {
    plume_sampler_params p;
    int32_t n_vocab;       /* V */
    uint64_t rng;          /* splitmix64 state; starts at p.seed */
    sampler_cand *cand;    /* [V] candidates of the current call */
    float *sample;         /* [SAMPLER_WIDE_SAMPLE] logits sampled by a wide gather */
    int32_t n;             /* candidates of the last plume_sampler_prepare(), 0: none */
    double z;              /* their sum of w */
    /* History the penalties see: the window of the last repeat_last_n accepted ids (all when
     * -1). The ring holds the window plus PLUME_SAMPLER_UNDO more, so that a rewind of up to
     * that many ids can bring back the ids that had left the window. */
    int32_t *ring;         /* [ring_cap] recent ids, newest at ring_pos - 1; NULL when off */
    int32_t ring_cap, ring_len, ring_pos; /* ring_pos: where the next id goes */
    int64_t n_seen;        /* ids accepted since the reset (less those rewound) */
    int32_t *count;        /* [V] occurrences of each id in the window; NULL when off */
    int32_t *distinct;     /* [V] ids with count > 0, unordered */
    int32_t *slot;         /* [V] index of an id in distinct (valid while its count > 0) */
    int32_t n_distinct;
    /* A per-request logit bias (plume_sampler_set_bias): added to the raw logits of its ids
     * before the chain. Sorted by id, no id twice; NULL when none. */
    int32_t *bias_id;      /* [n_bias] */
    float *bias;           /* [n_bias] finite, or -inf (the id is never drawn) */
    int32_t n_bias;
    plume_constraint *con; /* the attached constraint, or NULL */
};

/* ---- parameters and lifetime ------------------------------------------------------------ */

/* Gemma 4's generation_config: temperature 1.0, top-k 64, top-p 0.95; no penalties. */
plume_sampler_params plume_sampler_default_params(void) {
    plume_sampler_params p = {
        .temperature = 1.0f,
        .top_k = 64,
        .top_p = 0.95f,
        .min_p = 0.0f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = 0,
    };
    return p;
}

/* Whether the parameters ask for any penalty at all (then the history is tracked). */
static int sampler_penalties_on(const plume_sampler_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

/* Reject parameters that would make the arithmetic meaningless; 0 or PLUME_EINVAL. */
static int sampler_check_params(const plume_sampler_params *p, int32_t n_vocab, char **err) {
    if (n_vocab < 1) return plume_fail(err, PLUME_EINVAL, "sampler: n_vocab %d < 1", n_vocab);
    if (isnan(p->temperature))
        return plume_fail(err, PLUME_EINVAL, "sampler: temperature is NaN");
    if (isnan(p->top_p)) return plume_fail(err, PLUME_EINVAL, "sampler: top_p is NaN");
    if (isnan(p->min_p)) return plume_fail(err, PLUME_EINVAL, "sampler: min_p is NaN");
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return plume_fail(err, PLUME_EINVAL, "sampler: repeat_penalty %g must be finite and > 0",
                          (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return plume_fail(err, PLUME_EINVAL, "sampler: presence/frequency penalty not finite");
    if (p->repeat_last_n < -1)
        return plume_fail(err, PLUME_EINVAL, "sampler: repeat_last_n %d < -1", p->repeat_last_n);
    return 0;
}

/* Make a sampler for a vocabulary of n_vocab ids; p NULL means the defaults. Allocates every
 * buffer sample() needs (12 bytes per id, 12 more with penalties on). */
int plume_sampler_new(plume_sampler **out, const plume_sampler_params *p, int32_t n_vocab,
                      char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "sampler: out is NULL");
    *out = NULL;
    plume_sampler_params prm = p ? *p : plume_sampler_default_params();
    int rc = sampler_check_params(&prm, n_vocab, err);
    if (rc) return rc;

    plume_sampler *s = calloc(1, sizeof *s);
    if (!s) return plume_fail(err, PLUME_ENOMEM, "sampler: out of memory");
    s->p = prm;
    s->n_vocab = n_vocab;
    s->rng = prm.seed;
    size_t V = (size_t)n_vocab;
    s->cand = calloc(V, sizeof *s->cand);
    s->sample = malloc(SAMPLER_WIDE_SAMPLE * sizeof *s->sample);
    if (!s->cand || !s->sample) goto fail;
    if (sampler_penalties_on(&prm)) {
        s->count = calloc(V, sizeof *s->count);
        s->distinct = calloc(V, sizeof *s->distinct);
        s->slot = calloc(V, sizeof *s->slot);
        if (!s->count || !s->distinct || !s->slot) goto fail;
        int64_t cap = (int64_t)(prm.repeat_last_n > 0 ? prm.repeat_last_n : 0) + PLUME_SAMPLER_UNDO;
        if (cap > INT32_MAX) goto fail;
        s->ring_cap = (int32_t)cap;
        s->ring = calloc((size_t)s->ring_cap, sizeof *s->ring);
        if (!s->ring) goto fail;
    }
    *out = s;
    return 0;
fail:
    plume_sampler_free(s);
    return plume_fail(err, PLUME_ENOMEM, "sampler: out of memory for a vocabulary of %d",
                      n_vocab);
}

/* Free the sampler and its buffers; NULL is a no-op. */
void plume_sampler_free(plume_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->sample);
    free(s->ring);
    free(s->count);
    free(s->distinct);
    free(s->slot);
    free(s->bias_id);
    free(s->bias);
    free(s);
}

/* ---- logit bias ------------------------------------------------------------------------- */

/* Order (id, index) pairs by id, then index (so duplicates sum in the order given). */
static int bias_cmp(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Set the bias map: sorted by id, biases of an id given twice summed. */
int plume_sampler_set_bias(plume_sampler *s, const int32_t *ids, const float *bias, int32_t n, char **err) {
    if (!s || n < 0 || (n > 0 && (!ids || !bias))) return plume_fail(err, PLUME_EINVAL, "sampler: bad bias arguments");
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return plume_fail(err, PLUME_EINVAL, "sampler: bias of id %d outside the vocabulary of %d", ids[i],
                              s->n_vocab);
        if (isnan(bias[i]) || bias[i] == INFINITY)
            return plume_fail(err, PLUME_EINVAL, "sampler: the bias of id %d is %g (finite or -inf only)", ids[i],
                              (double)bias[i]);
    }
    int32_t (*pairs)[2] = n ? malloc((size_t)n * sizeof *pairs) : NULL; /* id, index into bias */
    int32_t *nid = n ? malloc((size_t)n * sizeof *nid) : NULL;
    float *nb = n ? malloc((size_t)n * sizeof *nb) : NULL;
    if (n && (!pairs || !nid || !nb)) {
        free(pairs);
        free(nid);
        free(nb);
        return plume_fail(err, PLUME_ENOMEM, "sampler: out of memory for %d biases", n);
    }
    for (int32_t i = 0; i < n; i++) pairs[i][0] = ids[i], pairs[i][1] = i;
    if (n) qsort(pairs, (size_t)n, sizeof *pairs, bias_cmp);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        float b = bias[pairs[i][1]];
        if (m > 0 && nid[m - 1] == pairs[i][0]) nb[m - 1] += b;
        else nid[m] = pairs[i][0], nb[m++] = b;
    }
    free(pairs);
    free(s->bias_id);
    free(s->bias);
    s->bias_id = nid;
    s->bias = nb;
    s->n_bias = m;
    s->n = 0; /* a prepared distribution no longer matches */
    return 0;
}

/* The index of id in the bias map, or -1. */
static int32_t bias_find(const plume_sampler *s, int32_t id) {
    int32_t lo = 0, hi = s->n_bias;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->bias_id[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n_bias && s->bias_id[lo] == id ? lo : -1;
}

/* ---- history ---------------------------------------------------------------------------- */

/* One more occurrence of id in the window. */
static void history_add(plume_sampler *s, int32_t id) {
    if (s->count[id]++ == 0) {
        s->slot[id] = s->n_distinct;
        s->distinct[s->n_distinct++] = id;
    }
}

/* One occurrence of id leaves the window (swap-remove from distinct when it was the last). */
static void history_drop(plume_sampler *s, int32_t id) {
    if (--s->count[id] == 0) {
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[s->slot[id]] = last;
        s->slot[last] = s->slot[id];
    }
}

/* The k-th newest id of the ring (k = 0: the newest; k < ring_len). */
static int32_t ring_at(const plume_sampler *s, int32_t k) {
    return s->ring[(s->ring_pos - 1 - k + 2 * s->ring_cap) % s->ring_cap];
}

/* Record id (prompt or generated) for the penalties. Ids outside [0, n_vocab) are ignored;
 * with penalties off this does nothing. Invariant: ring_len >= min(n_seen, window). */
void plume_sampler_accept(plume_sampler *s, int32_t id) {
    if (s && s->con) plume_constraint_accept(s->con, id); /* a refused id leaves it DEAD */
    if (!s || !s->count || id < 0 || id >= s->n_vocab) return;
    if (s->ring_len < s->ring_cap) s->ring_len++;
    s->ring[s->ring_pos] = id;
    s->ring_pos = (s->ring_pos + 1) % s->ring_cap;
    history_add(s, id);
    int32_t win = s->p.repeat_last_n;
    if (win > 0 && ++s->n_seen > win) history_drop(s, ring_at(s, win)); /* it left the window */
    else if (win <= 0) s->n_seen++;
}

/* Forget the last n accepted ids, as if they had never been accepted. 0, or PLUME_EINVAL
 * (nothing changed) when n is negative or more than the history can give back: more ids
 * than were accepted, or more than PLUME_SAMPLER_UNDO beyond what the window had already
 * forgotten. With penalties off there is no history and this always succeeds. */
int plume_sampler_rewind(plume_sampler *s, int32_t n) {
    if (!s || n < 0) return PLUME_EINVAL;
    if (s->con && n > plume_constraint_n_accepted(s->con)) return PLUME_EINVAL;
    if (!s->count) return s->con ? plume_constraint_rewind(s->con, n) : 0;
    int32_t win = s->p.repeat_last_n;
    /* Each undo needs the id it removes and, while the history is longer than the window, the
     * one coming back into it: the last of those (undo number back) is the (win + back)-th
     * newest id now. */
    if (n > s->ring_len) return PLUME_EINVAL;
    int64_t back = win > 0 ? (s->n_seen - win < n ? s->n_seen - win : n) : 0;
    if (back > 0 && s->ring_len < win + back) return PLUME_EINVAL;
    if (s->con) plume_constraint_rewind(s->con, n); /* checked above: it holds n */
    for (int32_t i = 0; i < n; i++) {
        history_drop(s, ring_at(s, 0));
        s->ring_pos = (s->ring_pos - 1 + s->ring_cap) % s->ring_cap;
        s->ring_len--;
        s->n_seen--;
        if (win > 0 && s->n_seen >= win) history_add(s, ring_at(s, win - 1));
    }
    return 0;
}

/* Forget the history (O(distinct ids), not O(V)), take an attached constraint back to its
 * start and restart the generator at the seed. */
void plume_sampler_reset(plume_sampler *s) {
    if (!s) return;
    if (s->con) plume_constraint_reset(s->con);
    for (int32_t i = 0; i < s->n_distinct; i++) s->count[s->distinct[i]] = 0;
    s->n_distinct = 0;
    s->ring_len = 0;
    s->ring_pos = 0;
    s->n_seen = 0;
    s->n = 0;
    s->rng = s->p.seed;
}

/* The logit of an id in the window after the penalties (llama.cpp's rule: a logit <= 0 is
 * multiplied by repeat_penalty, a positive one divided; then count * frequency + presence is
 * subtracted). */
static float sampler_penalized(const plume_sampler *s, int32_t id, float v) {
    const plume_sampler_params *p = &s->p;
    if (p->repeat_penalty != 1.0f) v = v <= 0.0f ? v * p->repeat_penalty : v / p->repeat_penalty;
    return v - ((float)s->count[id] * p->frequency_penalty + p->presence_penalty);
}

/* ---- candidate order -------------------------------------------------------------------- */

/* Whether a ranks before b: higher logit, then lower id. A total order (ids are distinct). */
static inline int cand_before(const sampler_cand *a, const sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Swap two candidates. */
static inline void cand_swap(sampler_cand *a, sampler_cand *b) {
    sampler_cand t = *a;
    *a = *b;
    *b = t;
}

/* A logit as a candidate value, or 0 for one that can never be drawn (NaN, -inf). */
static inline int cand_usable(float v, float *out) {
    if (!(v > -INFINITY)) return 0;
    *out = v > FLT_MAX ? FLT_MAX : v;
    return 1;
}

/* ---- top-k with a heap (small k) -------------------------------------------------------- */

/* Restore the heap (root = the candidate that ranks last) upward from i. */
static void heap_up(sampler_cand *h, int32_t i) {
    while (i > 0) {
        int32_t up = (i - 1) / 2;
        if (!cand_before(&h[up], &h[i])) break;
        cand_swap(&h[up], &h[i]);
        i = up;
    }
}

/* Restore the heap of n entries downward from i. */
static void heap_down(sampler_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && cand_before(&h[worst], &h[l])) worst = l;
        if (r < n && cand_before(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        cand_swap(&h[i], &h[worst]);
        i = worst;
    }
}

/* Offer id (logit v) to a heap of at most k: in while it is not full, then in place of the
 * root when strictly better (ids come in increasing order, so ties keep the lower id). */
static inline void heap_offer(sampler_cand *c, int32_t *n, int32_t k, float raw, int32_t id) {
    float v;
    if (!cand_usable(raw, &v)) return;
    if (*n < k) {
        c[*n] = (sampler_cand){v, 0.0f, id};
        heap_up(c, (*n)++);
    } else if (v > c[0].logit) {
        c[0] = (sampler_cand){v, 0.0f, id};
        heap_down(c, *n, 0);
    }
}

/* Whether any of the SAMPLER_BLOCK logits at l is above r (NaN is not; the compiler makes
 * it a few vector compares). */
static inline int block_above(const float *l, float r) {
    int any = 0;
    for (int j = 0; j < SAMPLER_BLOCK; j++) any |= l[j] > r;
    return any;
}

/* The k best usable logits into c (heap order); returns how many (< k if fewer usable). Ids
 * arrive in increasing order, so a newcomer beats the root only with a strictly larger logit.
 * Once the heap is full, a block none of whose logits beats the root is skipped whole (most
 * are: the heap changes ~k ln(V/k) times). */
static int32_t gather_top_k(sampler_cand *c, const float *l, int32_t n_vocab, int32_t k) {
    int32_t n = 0, i = 0;
    for (; i < n_vocab && n < k; i++) heap_offer(c, &n, k, l[i], i);
    for (; i + SAMPLER_BLOCK <= n_vocab; i += SAMPLER_BLOCK)
        if (block_above(l + i, c[0].logit))
            for (int32_t j = i; j < i + SAMPLER_BLOCK; j++) heap_offer(c, &n, k, l[j], j);
    for (; i < n_vocab; i++) heap_offer(c, &n, k, l[i], i);
    return n;
}

/* Every usable logit into c, in id order; returns how many. */
static int32_t gather_all(sampler_cand *c, const float *l, int32_t n_vocab) {
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float v;
        if (cand_usable(l[i], &v)) c[n++] = (sampler_cand){v, 0.0f, i};
    }
    return n;
}

/* Whether an id's logit is adjusted before the chain: biased, or in the penalties' window. */
static int sampler_adjusts(const plume_sampler *s, int32_t id) {
    return (s->count && s->count[id] > 0) || (s->n_bias && bias_find(s, id) >= 0);
}

/* The logit of an adjusted id: raw + its bias, then the penalties when it is in the window. */
static float sampler_adjusted(const plume_sampler *s, int32_t id, float raw) {
    int32_t b = s->n_bias ? bias_find(s, id) : -1;
    float v = b >= 0 ? raw + s->bias[b] : raw;
    return s->count && s->count[id] > 0 ? sampler_penalized(s, id, v) : v;
}

/* Bias and penalties on a heap gathered from the raw logits: drop the adjusted ids (biased or
 * in the window), then add each with its adjusted logit. Returns the new count. The heap held
 * k + n_adjust entries (n_adjust >= the number of adjusted ids), so it holds every unadjusted
 * id of the true top k: at most k - 1 unadjusted and n_adjust adjusted ids can rank above
 * such an id in the raw logits. */
static int32_t adjust_heap(const plume_sampler *s, sampler_cand *c, int32_t n, const float *logits) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (!sampler_adjusts(s, c[i].id)) c[m++] = c[i];
    for (int32_t i = 0; s->count && i < s->n_distinct; i++) {
        int32_t id = s->distinct[i];
        float v;
        if (s->con && !cst_allows(s->con, id)) continue; /* under a constraint: allowed ones only */
        if (cand_usable(sampler_adjusted(s, id, logits[id]), &v)) c[m++] = (sampler_cand){v, 0.0f, id};
    }
    for (int32_t i = 0; i < s->n_bias; i++) {
        int32_t id = s->bias_id[i];
        float v;
        if (s->con && !cst_allows(s->con, id)) continue;
        if ((!s->count || s->count[id] == 0) && cand_usable(sampler_adjusted(s, id, logits[id]), &v))
            c[m++] = (sampler_cand){v, 0.0f, id};
    }
    return m;
}

/* Set the adjusted logit of id among candidates from gather_all (in id order), found by
 * binary search. An id whose raw logit was unusable stays out. */
static void adjust_one_sorted(const plume_sampler *s, sampler_cand *c, int32_t n, const float *logits, int32_t id) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (c[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    if (lo < n && c[lo].id == id) {
        float v = sampler_adjusted(s, id, logits[id]);
        c[lo].logit = v > FLT_MAX ? FLT_MAX : v; /* finite or -inf: never NaN */
    }
}

/* Bias and penalties on candidates from gather_all: each adjusted id once. */
static void adjust_sorted(const plume_sampler *s, sampler_cand *c, int32_t n, const float *logits) {
    for (int32_t i = 0; s->count && i < s->n_distinct; i++) adjust_one_sorted(s, c, n, logits, s->distinct[i]);
    for (int32_t i = 0; i < s->n_bias; i++)
        if (!s->count || s->count[s->bias_id[i]] == 0) adjust_one_sorted(s, c, n, logits, s->bias_id[i]);
}

/* ---- quickselect ------------------------------------------------------------------------ */

/* Sort c[lo, hi) into rank order (only for short ranges). */
static void cand_sort_small(sampler_cand *c, int32_t lo, int32_t hi) {
    for (int32_t i = lo + 1; i < hi; i++) {
        sampler_cand x = c[i];
        int32_t j = i;
        for (; j > lo && cand_before(&x, &c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = x;
    }
}

/* Partition c[lo, hi) (hi - lo >= 3) around a median-of-three pivot: candidates ranking
 * before it go to [lo, a), the pivot to a, the rest after. Returns a; *mass gets the sum of w
 * over [lo, a). */
static int32_t cand_partition(sampler_cand *c, int32_t lo, int32_t hi, double *mass) {
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
    if (cand_before(&c[last], &c[lo])) cand_swap(&c[last], &c[lo]);
    if (cand_before(&c[last], &c[mid])) cand_swap(&c[last], &c[mid]);
    cand_swap(&c[mid], &c[last]); /* the median becomes the pivot at the end */
    const sampler_cand pivot = c[last];
    int32_t a = lo;
    double m = 0.0;
    for (int32_t j = lo; j < last; j++) {
        if (cand_before(&c[j], &pivot)) {
            m += c[j].w;
            cand_swap(&c[j], &c[a++]);
        }
    }
    cand_swap(&c[a], &c[last]);
    *mass = m;
    return a;
}

/* Move the k best of c[0, n) to c[0, k), in no particular order (0 < k < n). */
static void select_rank(sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n;
    while (hi - lo > SAMPLER_SORT_MAX) {
        double unused;
        int32_t a = cand_partition(c, lo, hi, &unused);
        if (a == k || a + 1 == k) return;
        if (a > k) hi = a;
        else lo = a + 1;
    }
    cand_sort_small(c, lo, hi);
}

/* Top-p by mass: move to the front the shortest rank-order prefix whose w sum reaches target,
 * and return its length (>= 1). Invariant: c[0, lo) all rank before c[lo, n), hold mass
 * acc < target, and the prefix ends inside [lo, hi). */
static int32_t select_mass(sampler_cand *c, int32_t n, double target) {
    int32_t lo = 0, hi = n;
    double acc = 0.0;
    while (hi - lo > SAMPLER_SORT_MAX) {
        double upper;
        int32_t a = cand_partition(c, lo, hi, &upper);
        if (a > lo && acc + upper >= target) {
            hi = a; /* the prefix ends among the candidates before the pivot */
            continue;
        }
        acc += upper + c[a].w;
        if (acc >= target) return a + 1;
        lo = a + 1;
    }
    cand_sort_small(c, lo, hi);
    for (int32_t i = lo; i < hi; i++) {
        acc += c[i].w;
        if (acc >= target) return i + 1;
    }
    return hi > 0 ? hi : 1; /* rounding left the target just out of reach: keep the range */
}

/* ---- the chain's steps ------------------------------------------------------------------ */

/* Set w = exp((logit - max) / temperature) and drop candidates whose w underflows to 0
 * (they can never be drawn). Returns the new count (>= 1 unless every logit is -inf: the max
 * has w = 1); *z = sum of w. */
static int32_t cand_softmax(sampler_cand *c, int32_t n, float temperature, double *z) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    *z = 0.0;
    if (mx == -INFINITY) return 0; /* penalties pushed everything to -inf */
    double sum = 0.0;
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++) {
        float w = expf((c[i].logit - mx) / temperature);
        if (w > 0.0f) {
            c[kept] = c[i];
            c[kept++].w = w;
            sum += w;
        }
    }
    *z = sum;
    return kept;
}

/* Min-p: keep candidates with w >= min_p (w of the most likely is 1), in place; returns the
 * count (>= 1, since a min_p above 1 is treated as 1). */
static int32_t cand_min_p(sampler_cand *c, int32_t n, float min_p) {
    float t = min_p < 1.0f ? min_p : 1.0f;
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].w >= t) c[kept++] = c[i];
    return kept;
}

/* Draw one candidate with probability w / sum(w), candidate `skip` left out (-1: none), from
 * one 64-bit step of the generator. The sum without skip must be > 0. */
static int32_t cand_draw(const sampler_cand *c, int32_t n, int32_t skip, uint64_t *rng) {
    double u = (double)(plume_rng_next(rng) >> 11) * 0x1.0p-53; /* [0, 1), 53 bits */
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += i == skip ? 0.0 : c[i].w;
    double target = u * z, acc = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i == skip) continue;
        acc += c[i].w;
        last = i;
        if (target < acc) return c[i].id;
    }
    return c[last].id; /* u * z rounded up to the total */
}

/* Top-p: before the weighted select, drop candidates with w < (1 - top_p) z / (2 n). They can
 * never be in the nucleus: together they hold less than half of the (1 - top_p) z outside it,
 * so the rest already reaches top_p z. On a peaked distribution over 262144 ids this leaves
 * a few hundred candidates for the select. Returns the count. */
static int32_t cand_top_p(sampler_cand *c, int32_t n, float top_p, double z) {
    if (top_p > 0.0f) {
        double floor_w = 0.5 * (1.0 - (double)top_p) * z / n;
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].w >= floor_w) c[m++] = c[i];
        n = m;
    }
    return select_mass(c, n, (double)top_p * z);
}

/* ---- under a constraint ----------------------------------------------------------------- */

/* Order two candidates for qsort: rank order. */
static int cand_cmp(const void *a, const void *b) {
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* The usable logits of the ids the mask allows: every one in id order (k = 0), or the best k
 * in heap order (k > 0). Returns how many. */
static int32_t gather_mask(const cst_mask *m, sampler_cand *c, const float *l, int32_t n_vocab, int32_t k) {
    int32_t n = 0;
    float v;
    if (m->ids) {
        for (int32_t i = 0; i < m->n; i++) {
            if (k > 0) heap_offer(c, &n, k, l[m->ids[i]], m->ids[i]);
            else if (cand_usable(l[m->ids[i]], &v)) c[n++] = (sampler_cand){v, 0.0f, m->ids[i]};
        }
        return n;
    }
    for (int32_t w = 0; w < (n_vocab + 31) / 32; w++)
        for (uint32_t x = m->bits[w]; x; x &= x - 1) {
            int32_t id = w * 32 + __builtin_ctz(x);
            if (k > 0) heap_offer(c, &n, k, l[id], id);
            else if (cand_usable(l[id], &v)) c[n++] = (sampler_cand){v, 0.0f, id};
        }
    return n;
}

/* The r-th largest (from 0) of a[0, n), 0 <= r < n, by quickselect (a is reordered). */
static float float_rank_desc(float *a, int32_t n, int32_t r) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float p = a[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) { /* Hoare: a[lo, i) >= p >= a(j, hi] */
            while (a[i] > p) i++;
            while (a[j] < p) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (r <= j) hi = j;
        else if (r >= i) lo = i;
        else return p; /* between j and i: equal to the pivot */
    }
    return a[r];
}

/* The k best usable logits into c, in no particular order: the same set as gather_top_k
 * (the first k in rank order), for a wide k, where the heap's ~k ln(V/k) updates cost more
 * than the pass (4096 of 262144: ~1.5 ms; this: ~0.1 ms). Every (V / 8192)th logit, into
 * smp [SAMPLER_WIDE_SAMPLE], sets a threshold: the sample's rank e + 4 sqrt(e) + 8, where e
 * = k * 8192 / V is where the k-th best should fall (~1.6 k ids reach it on shuffled
 * logits); one pass keeps those at or above it (blocks of 8 below it skipped, the rest
 * stored without a branch), a quickselect keeps the k best. Every id left out is below the
 * threshold, so below all of them: the result is exact whatever the logits, and when the
 * threshold lets fewer than k through (logits the sample misjudged) the heap does it.
 * Returns how many (< k when fewer are usable). */
static int32_t gather_top_wide(sampler_cand *c, float *smp, const float *l, int32_t n_vocab, int32_t k) {
    int32_t stride = n_vocab / SAMPLER_WIDE_SAMPLE;
    if (stride < 8) return gather_top_k(c, l, n_vocab, k);
    int32_t ns = 0;
    for (int32_t i = 0; i < n_vocab && ns < SAMPLER_WIDE_SAMPLE; i += stride)
        if (cand_usable(l[i], &smp[ns])) ns++;
    double e = (double)k * ns / n_vocab;
    int64_t r = (int64_t)(e + 4.0 * sqrt(e) + 8.0);
    if (r >= ns) return gather_top_k(c, l, n_vocab, k);
    float t = float_rank_desc(smp, ns, (int32_t)r), below = nextafterf(t, -INFINITY);
    int32_t n = 0, i = 0;
    for (; i + SAMPLER_WIDE_BLOCK <= n_vocab; i += SAMPLER_WIDE_BLOCK) {
        int any = 0;
        for (int32_t j = 0; j < SAMPLER_WIDE_BLOCK; j++) any |= l[i + j] > below;
        if (!any) continue; /* none reaches t */
        for (int32_t j = i; j < i + SAMPLER_WIDE_BLOCK; j++) { /* n <= j: c[n] is free */
            float x = l[j];
            c[n] = (sampler_cand){x > FLT_MAX ? FLT_MAX : x, 0.0f, j};
            n += x >= t; /* false for NaN; t is finite, so -inf is below it */
        }
    }
    for (float v; i < n_vocab; i++)
        if (l[i] >= t && cand_usable(l[i], &v)) c[n++] = (sampler_cand){v, 0.0f, i};
    if (n < k) return gather_top_k(c, l, n_vocab, k);
    if (n > k) select_rank(c, n, k);
    return k;
}

/* Order the best SAMPLER_RANK_CHUNK of c[from, n) into rank order at c[from, ...) (the rest
 * after them, unordered); returns where the ordered run ends. */
static int32_t rank_next(sampler_cand *c, int32_t from, int32_t n) {
    int32_t len = n - from;
    if (len > SAMPLER_RANK_CHUNK) {
        select_rank(c + from, len, SAMPLER_RANK_CHUNK);
        len = SAMPLER_RANK_CHUNK;
    }
    qsort(c + from, (size_t)len, sizeof *c, cand_cmp);
    return from + len;
}

/* The k best allowed candidates, best-first: gather the best `want` by raw logit, apply the
 * bias and penalties, and walk them in rank order (ordered a chunk at a time: the walk mostly
 * stops early), keeping allowed ones while they are sure to rank before every id left out
 * (the worst raw logit gathered bounds every unadjusted id left out; every adjusted one is
 * in). Returns how many were found (<= k) when that settles it, else -1 (try a larger heap). */
static int32_t best_first(plume_sampler *s, const float *logits, int32_t k, int32_t n_adj, int32_t want) {
    sampler_cand *c = s->cand;
    int32_t n = want >= SAMPLER_WIDE_MIN ? gather_top_wide(c, s->sample, logits, s->n_vocab, want)
                                         : gather_top_k(c, logits, s->n_vocab, want);
    int full = n == want; /* some usable ids were left out */
    float bound = full ? c[0].logit : -INFINITY;
    for (int32_t i = 1; full && i < n; i++) bound = c[i].logit < bound ? c[i].logit : bound;
    if (n_adj) n = adjust_heap(s, c, n, logits);
    int32_t kept = 0, ranked = 0;
    for (int32_t i = 0; i < n && kept < k; i++) {
        if (i == ranked) ranked = rank_next(c, i, n);
        /* Sure to rank before every id left out: a logit above the bound; or on it, unless
         * adjusted (biased or penalized): the gather keeps the lowest ids among equal raw logits
         * (as the heap, whose newcomer must be strictly better), so an id left out with the bound's logit has a
         * higher id. (Ties are common: logits saturate at the softcap.) */
        int sure = c[i].logit > bound || (c[i].logit == bound && !sampler_adjusts(s, c[i].id));
        if (full && !sure) return -1; /* an id left out might rank here */
        if (cst_allows(s->con, c[i].id)) c[kept++] = c[i];
    }
    return kept == k || !full ? kept : -1;
}

/* The candidates under a constraint, bias and penalties applied: at least the k best allowed
 * (k > 0; the chain selects k of them), or every allowed one (k = 0: the chain needs the
 * whole distribution). PLUME_EINVAL when the mask cannot be made, PLUME_ENOMEM when making
 * it passed the recognizer's limits. */
static int32_t gather_constrained(plume_sampler *s, const float *logits, int32_t k, int32_t n_adj) {
    if (k > 0 && !cst_mask_cached(s->con)) {
        /* When the best k + 64 do not settle it, the state refuses many tokens. Mostly it
         * refuses nearly all (after '{' only tokens starting with '"', '}' or whitespace are
         * allowed), and there the mask's walk is cheap: it skips whole first bytes. In a
         * dense state (inside a string: most first bytes live) a walk visits every token
         * (~2.5 ms on Gemma's), a wider heap less than a fifth of that. */
        int32_t want = k + n_adj + SAMPLER_BEST_FIRST;
        int32_t n = best_first(s, logits, k, n_adj, want < s->n_vocab ? want : s->n_vocab);
        if (n >= 0) return n;
        want = k + n_adj + SAMPLER_BEST_WIDE;
        if (cst_live_first_bytes(s->con) >= SAMPLER_DENSE &&
            (n = best_first(s, logits, k, n_adj, want < s->n_vocab ? want : s->n_vocab)) >= 0)
            return n;
    }
    cst_mask m;
    int rc = cst_mask_get(s->con, &m);
    if (rc) return rc == PLUME_ENOMEM ? rc : PLUME_EINVAL;
    int32_t n = gather_mask(&m, s->cand, logits, s->n_vocab, k > 0 ? k + n_adj : 0);
    if (n > 0 && n_adj) n = k > 0 ? adjust_heap(s, s->cand, n, logits) : (adjust_sorted(s, s->cand, n, logits), n);
    return n;
}

/* Attach (or detach, c NULL) a constraint. */
void plume_sampler_set_constraint(plume_sampler *s, plume_constraint *c) {
    if (s) s->con = c;
}

/* How many leading ids the constraint allows in sequence (tried, then taken back). */
int32_t plume_sampler_allowed_prefix(plume_sampler *s, const int32_t *ids, int32_t n) {
    if (!s || !ids || n <= 0) return 0;
    if (!s->con) return n;
    int32_t k = 0, limited = cst_limited(s->con);
    while (k < n && plume_constraint_accept(s->con, ids[k]) == 0) k++;
    plume_constraint_rewind(s->con, k < n ? k + 1 : k); /* a refused id was pushed too */
    cst_set_limited(s->con, limited); /* a guess past the limits is cut, not an error: the sampler decides there */
    return k;
}

/* ---- the chain -------------------------------------------------------------------------- */

/* Bias and penalties, then greedy or top-k -> softmax(T) -> top-p -> min-p: the candidates the draw
 * chooses from, in s->cand[0, n) with weights w (greedy: the argmax alone, w = 1). Returns
 * n >= 1, or PLUME_EINVAL when no logit is usable (all NaN or -inf).
 *
 * Two ways to the candidates: a heap of k + (ids in the window or biased) over the raw logits
 * when that is at most SAMPLER_HEAP_MAX_K (greedy is k = 1), else every usable id and a rank
 * select. Bias and penalties touch only their ids, so the logits are never copied. */
static int32_t sampler_chain(plume_sampler *s, const float *logits, double *z) {
    const plume_sampler_params *p = &s->p;
    sampler_cand *c = s->cand;
    int greedy = p->temperature <= 0.0f;
    int32_t n_adjust = (s->count ? s->n_distinct : 0) + s->n_bias; /* may count an id twice */
    int32_t k = greedy ? 1 : p->top_k > 0 && p->top_k < s->n_vocab ? p->top_k : 0;
    int32_t n;
    if (s->con) {
        n = gather_constrained(s, logits, k > 0 && k <= SAMPLER_HEAP_MAX_K - n_adjust ? k : 0, n_adjust);
        if (n < 0) return n;
        if (cst_limited(s->con)) return PLUME_ENOMEM; /* an id's step passed the limits: undecided */
    } else if (k > 0 && k <= SAMPLER_HEAP_MAX_K - n_adjust) {
        n = gather_top_k(c, logits, s->n_vocab, k + n_adjust);
        if (n_adjust) n = adjust_heap(s, c, n, logits);
    } else {
        n = gather_all(c, logits, s->n_vocab);
        if (n_adjust) adjust_sorted(s, c, n, logits);
    }
    if (n == 0) return PLUME_EINVAL;
    if (k > 0 && k < n) {
        select_rank(c, n, k);
        n = k;
    }
    if (greedy) { /* k = 1 */
        c[0].w = 1.0f;
        *z = 1.0;
        return 1;
    }
    n = cand_softmax(c, n, p->temperature, z);
    if (n == 0) return PLUME_EINVAL;
    if (p->top_p < 1.0f) n = cand_top_p(c, n, p->top_p, *z);
    if (p->min_p > 0.0f) n = cand_min_p(c, n, p->min_p);
    if (n != 0 && (p->top_p < 1.0f || p->min_p > 0.0f)) {
        *z = 0.0;
        for (int32_t i = 0; i < n; i++) *z += c[i].w;
    }
    return n;
}

/* The chain, then a draw. Returns an id in [0, n_vocab), or PLUME_EINVAL when s or logits is
 * NULL or no logit is usable, PLUME_ENOMEM when the constraint passed its limits. A
 * non-greedy call advances the generator by exactly one step. */
int32_t plume_sampler_sample(plume_sampler *s, const float *logits) {
    if (!s || !logits) return PLUME_EINVAL;
    double z;
    int32_t n = sampler_chain(s, logits, &z);
    s->n = 0; /* the candidates no longer match a prepare() */
    if (n < 0) return n;
    if (s->p.temperature <= 0.0f) return s->cand[0].id;
    return cand_draw(s->cand, n, -1, &s->rng);
}

/* ---- the distribution, for speculative decoding ----------------------------------------- */

/* Run the chain without drawing and keep its candidates for plume_sampler_prob() and
 * plume_sampler_draw(). Returns their count (>= 1), or PLUME_EINVAL. */
int32_t plume_sampler_prepare(plume_sampler *s, const float *logits) {
    if (!s || !logits) return PLUME_EINVAL;
    double z;
    int32_t n = sampler_chain(s, logits, &z);
    s->n = n > 0 ? n : 0;
    s->z = z;
    return n;
}

/* The probability that a draw from the prepared distribution returns id: w / z of its
 * candidate, 0 for an id that is not one (or when nothing is prepared). */
double plume_sampler_prob(const plume_sampler *s, int32_t id) {
    if (!s || s->n == 0 || !(s->z > 0.0)) return 0.0;
    for (int32_t i = 0; i < s->n; i++)
        if (s->cand[i].id == id) return s->cand[i].w / s->z;
    return 0.0;
}

/* Draw from the prepared distribution, with id `without` removed and the rest renormalized
 * (-1: nothing removed); greedy draws are the argmax and use no randomness. Returns an id, or
 * PLUME_EINVAL when nothing is prepared or nothing is left once `without` is removed. The
 * distribution stays prepared. */
int32_t plume_sampler_draw(plume_sampler *s, int32_t without) {
    if (!s || s->n == 0) return PLUME_EINVAL;
    int32_t skip = -1;
    double left = s->z;
    for (int32_t i = 0; i < s->n; i++)
        if (s->cand[i].id == without) {
            skip = i;
            left -= s->cand[i].w;
        }
    if (s->n == (skip >= 0) || !(left > 0.0)) return PLUME_EINVAL;
    if (s->p.temperature <= 0.0f) return s->cand[0].id; /* one candidate, not `without` */
    return cand_draw(s->cand, s->n, skip, &s->rng);
}

/* A uniform double in [0, 1) from the sampler's generator (one step of it). */
double plume_sampler_uniform(plume_sampler *s) {
    if (!s) return 0.0;
    return (double)(plume_rng_next(&s->rng) >> 11) * 0x1.0p-53;
}
