/* speculative.c -- speculative decoding with a prompt-lookup drafter (docs/SPECULATIVE.md).
 *
 * Decoding reads every weight once per token; a step of k + 1 tokens reads them once too and
 * costs little more on a memory-bound CPU. So guess k tokens, run the pending token and the
 * guesses as one step, and keep the guesses the model would have produced itself: the logits
 * of row i of the step are those of the context up to guess i, bit for bit what one-token
 * steps give (forward.c reduces every output element in the same order whatever the step),
 * so nothing the model outputs changes, only how many passes over the weights it takes.
 *
 * The drafter is prompt lookup: the tokens that followed the latest earlier occurrence of the
 * context's last 3 (then 2, then 1) tokens. It costs a scan of the context, no model. A
 * caller may plug in its own (plume_spec_params.draft_fn), or Gemma 4's MTP drafter
 * (plume_spec_params.drafter, drafter.c), which reads the session's hidden state and K/V; a
 * draft_fn beside it may replace its guesses (benchmarks, tests).
 *
 * Drafter and prompt lookup together (plume_spec_params.lookup, the default with a drafter):
 * each round looks the context up first (free); a match of SPEC_LOOKUP_STRONG tokens or more
 * feeds lookup's guesses instead of the drafter's, while lookup's first-guess rate is not below
 * the drafter's; else the drafter drafts, and lookup's first guess, when it had one, is
 * compared with the token the step gives (free). Each source keeps its own rate and length.
 *
 * Acceptance. Greedy: a guess is kept while it equals the argmax. Sampling: the drafter is
 * deterministic (its distribution q is one-hot on the guess d), so the speculative-sampling
 * rule (accept d with probability min(1, p(d) / q(d)), else draw from norm(max(0, p - q)))
 * becomes: accept d with probability p(d); on rejection draw from p with d removed and
 * renormalized. Either way the token has distribution p exactly, where p is the sampler's
 * own distribution at that position (penalties over the history including the earlier
 * guesses, top-k, temperature, top-p, min-p). After k acceptances the step's last logits give
 * one more token for free.
 *
 * Adaptive length (plume_spec_params.adaptive, the default): a wrong guess costs a row of
 * arithmetic, and a step of 4 rows costs ~1.3x one row (docs/BENCHMARKS.md), so drafting pays
 * only while guesses are right often enough. Each source of guesses keeps a moving average of
 * how often its first guess was right; below SPEC_RATE_MIN it stops feeding guesses but still
 * makes one each step and compares it with the token the model then gives (free), so drafting
 * resumes when the text starts to repeat itself. While drafting, lookup's length grows by one
 * after a step whose guesses were all kept and falls to one more than those kept otherwise (a
 * quote ends); the MTP drafter's follows the share of its reached guesses kept (a model's
 * guesses are right with a steady chance): the longest whose last guess is kept with a chance
 * of SPEC_KEEP_WORTH or more (spec_keep_len). Nothing the
 * model outputs depends on it (greedy: the same tokens; sampling: the same distribution,
 * since a length chosen from the past is a draft distribution fixed before the step).
 *
 * With a constraint on the sampler (docs/STRUCTURED.md), the guesses are cut at the first one
 * it refuses before they are fed (plume_spec_step; callers of the two halves ask
 * plume_sampler_allowed_prefix() themselves), and a refused guess could never be accepted
 * anyway: the sampler gives it probability 0. The constraint moves with the sampler's
 * accept and rewind, so rejected guesses leave it where plain decoding would.
 *
 * Knows the session's internals only to size a step so that its rewind is free (the sliding
 * rings keep n_rewind extra slots) and does not straddle a ring snapshot. */
#include <stdlib.h>

#include "forward.h"

#define SPEC_NGRAM_LIMIT 64 /* longest n-gram a drafter may look up */
#define SPEC_RATE_MIN 0.2    /* adaptive: below this first-guess rate, guess without feeding */
#define SPEC_RATE_START 0.5  /* the rate a new drafter assumes */
#define SPEC_RATE_WEIGHT 0.125 /* weight of the newest outcome in the moving average */
#define SPEC_LOOKUP_STRONG 3 /* with a drafter: the shortest repeat lookup drafts from (or ngram_max) */
#define SPEC_KEEP_START 0.7  /* the MTP drafter: the share of its guesses kept a new one assumes */
#define SPEC_KEEP_WORTH 0.2  /* the MTP drafter: the least chance of being reached and kept a guess fed needs */

/* A source of guesses (PLUME_SPEC_LOOKUP, PLUME_SPEC_DRAFTER): its adaptive state, its totals. */
typedef struct {
    double rate;    /* adaptive: moving average of its first guess being right */
    int32_t len;    /* adaptive: the draft length of its next fed step, 1..draft_max */
    double keep;    /* adaptive, the MTP drafter: moving average of a guess it reached being kept */
    int32_t shadow; /* its first guess this step when not fed (compared after it), or -1 */
    int64_t n_steps, n_drafted, n_accepted; /* the steps that fed its guesses */
} spec_source;

struct plume_spec {
    plume_spec_params p;
    int32_t V;
    const plume_model *m;
    float *logits;   /* [draft_max + 1, V] the logits of a step */
    int32_t *ctx;    /* [ctx_cap] the session's tokens and the pending one */
    size_t ctx_cap;
    int32_t *ids;    /* [draft_max + 1] the pending token and the guesses */
    int32_t *look;   /* [draft_max] lookup's guesses in a round the drafter may draft */
    int64_t n_steps, n_drafted, n_accepted;
    spec_source src[2]; /* lookup (or draft_fn alone), the MTP drafter */
    int32_t fed;     /* the source whose guesses this step fed, or -1 */
};

/* ---- parameters and lifetime ----------------------------------------------------------- */

/* Draft 3 tokens (docs/SPECULATIVE.md says why) from n-grams of 3 down to 1. */
plume_spec_params plume_spec_default_params(void) {
    plume_spec_params p = {.draft_max = 3, .ngram_max = 3, .ngram_min = 1, .adaptive = 1, .lookup = 1};
    return p;
}

/* Check the parameters and allocate the rows of logits a step needs. */
int plume_spec_new(plume_spec **out, const plume_model *m, const plume_spec_params *pp, char **err) {
    if (!out || !m) return plume_fail(err, PLUME_EINVAL, "spec: out or model is NULL");
    *out = NULL;
    plume_spec_params p = pp ? *pp : plume_spec_default_params();
    if (p.draft_max < 0 || p.draft_max > PLUME_SAMPLER_UNDO - 1)
        return plume_fail(err, PLUME_EINVAL, "spec: draft_max %d is outside [0, %d]", p.draft_max,
                          PLUME_SAMPLER_UNDO - 1);
    if (p.ngram_min < 1 || p.ngram_min > p.ngram_max || p.ngram_max > SPEC_NGRAM_LIMIT)
        return plume_fail(err, PLUME_EINVAL, "spec: n-gram lengths %d..%d are not within 1..%d", p.ngram_min,
                          p.ngram_max, SPEC_NGRAM_LIMIT);
    plume_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return plume_fail(err, PLUME_ENOMEM, "spec: out of memory");
    sp->p = p;
    sp->m = m;
    sp->V = m->c.V;
    plume_spec_reset(sp);
    sp->logits = plume_alloc((size_t)(p.draft_max + 1) * (size_t)sp->V * sizeof(float));
    sp->ids = calloc((size_t)p.draft_max + 1, sizeof *sp->ids);
    sp->look = calloc((size_t)p.draft_max + 1, sizeof *sp->look);
    if (!sp->logits || !sp->ids || !sp->look) {
        plume_spec_free(sp);
        return plume_fail(err, PLUME_ENOMEM, "spec: out of memory for %d rows of logits", p.draft_max + 1);
    }
    *out = sp;
    return 0;
}

/* Free the drafter; NULL is a no-op. */
void plume_spec_free(plume_spec *sp) {
    if (!sp) return;
    plume_dealloc(sp->logits);
    free(sp->ctx);
    free(sp->ids);
    free(sp->look);
    free(sp);
}

/* The MTP drafter's draft length for a share `keep` of reached guesses kept: the longest k
 * (1..max) whose last guess is reached and kept with a chance keep^k of SPEC_KEEP_WORTH or
 * more. A guess costs a row of the step and a drafter step (together about a tenth of a
 * one-token step, docs/BENCHMARKS.md) and is worth keep^k tokens. */
static int32_t spec_keep_len(double keep, int32_t max) {
    int32_t k = 1;
    for (double p = keep * keep; k < max && p >= SPEC_KEEP_WORTH; p *= keep) k++;
    return k;
}

/* The adaptive state as plume_spec_new leaves it; NULL is a no-op. */
void plume_spec_reset(plume_spec *sp) {
    if (!sp) return;
    for (int c = 0; c < 2; c++) {
        sp->src[c].rate = SPEC_RATE_START;
        sp->src[c].keep = SPEC_KEEP_START;
        sp->src[c].len = c == PLUME_SPEC_DRAFTER ? spec_keep_len(SPEC_KEEP_START, sp->p.draft_max) : sp->p.draft_max;
        sp->src[c].shadow = -1;
    }
    sp->fed = -1;
}

/* The totals since creation (zeros for NULL). */
void plume_spec_stats(const plume_spec *sp, int64_t *n_steps, int64_t *n_drafted, int64_t *n_accepted) {
    if (n_steps) *n_steps = sp ? sp->n_steps : 0;
    if (n_drafted) *n_drafted = sp ? sp->n_drafted : 0;
    if (n_accepted) *n_accepted = sp ? sp->n_accepted : 0;
}

/* The totals of the steps that fed one source's guesses (zeros for NULL or another source). */
void plume_spec_source_stats(const plume_spec *sp, int32_t source, int64_t *n_steps, int64_t *n_drafted,
                             int64_t *n_accepted) {
    const spec_source *c = sp && (source == PLUME_SPEC_LOOKUP || source == PLUME_SPEC_DRAFTER) ? &sp->src[source] : NULL;
    if (n_steps) *n_steps = c ? c->n_steps : 0;
    if (n_drafted) *n_drafted = c ? c->n_drafted : 0;
    if (n_accepted) *n_accepted = c ? c->n_accepted : 0;
}

/* ---- the drafter ----------------------------------------------------------------------- */

/* Prompt lookup, *g_out getting the length of the suffix that matched (0: none). */
static int32_t spec_lookup(const int32_t *ctx, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t *draft,
                           int32_t max, int32_t *g_out) {
    *g_out = 0;
    if (!ctx || !draft || max < 1 || ngram_min < 1) return 0;
    for (int32_t g = ngram_max < n - 1 ? ngram_max : n - 1; g >= ngram_min; g--) {
        const int32_t *suffix = ctx + n - g;
        /* latest start i < n - g whose g tokens equal the suffix (and are followed by one) */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (ctx[i] != suffix[0] || memcmp(ctx + i, suffix, (size_t)g * sizeof *ctx)) continue;
            int32_t from = i + g, k = n - from < max ? n - from : max;
            memcpy(draft, ctx + from, (size_t)k * sizeof *ctx);
            *g_out = g;
            return k;
        }
    }
    return 0;
}

/* Prompt lookup: the latest earlier occurrence of the longest suffix (ngram_max down to
 * ngram_min tokens) and up to max of the tokens after it. Never reads past ctx[n - 1]. */
int32_t plume_spec_lookup(const int32_t *ctx, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t *draft,
                          int32_t max) {
    int32_t g;
    return spec_lookup(ctx, n, ngram_min, ngram_max, draft, max, &g);
}

/* ---- a step ---------------------------------------------------------------------------- */

/* How many tokens a step at the session's position may guess: within draft_max, cap - 1,
 * the context, the session's batch, a free rewind (n_rewind + 1 positions), and before the
 * next ring snapshot. (Int8 activations give a row the same bits at any step size, so
 * they need no limit here.) */
static int32_t spec_room(const plume_spec *sp, const plume_session *s, int32_t cap) {
    int32_t k = sp->p.draft_max;
    if (k > cap - 1) k = cap - 1;
    if (k > s->n_ctx - s->n_past - 1) k = s->n_ctx - s->n_past - 1;
    if (k > s->n_batch - 1) k = s->n_batch - 1;
    if (s->ring_slots > 0 && k > s->n_rewind + 1) k = s->n_rewind + 1;
    /* the MTP drafter's next round reads the last W + 1 positions of the rings (drafter.c) */
    if (sp->p.drafter && s->ring_slots > 0 && k > s->n_rewind) k = s->n_rewind;
    if (s->snap) {
        int32_t to_snap = s->snap_every - s->n_past % s->snap_every;
        if (k > to_snap - 1) k = to_snap - 1;
    }
    return k > 0 ? k : 0;
}

/* The session's tokens and pending into sp->ctx; returns their count, or PLUME_ENOMEM. */
static int32_t spec_context(plume_spec *sp, const plume_session *s, int32_t pending, char **err) {
    if (plume_grow(&sp->ctx, &sp->ctx_cap, (size_t)s->n_ctx + 1, sizeof *sp->ctx)) /* once: n <= n_ctx + 1 */
        return plume_fail(err, PLUME_ENOMEM, "spec: out of memory for a context of %d tokens", s->n_ctx + 1);
    memcpy(sp->ctx, s->tokens, (size_t)s->n_past * sizeof *sp->ctx);
    sp->ctx[s->n_past] = pending;
    return s->n_past + 1;
}

/* Which source guesses this round (room > 0): without a drafter lookup (or the draft_fn);
 * with one and lookup on, lookup when the context ends in a repeat of SPEC_LOOKUP_STRONG
 * tokens (or ngram_max) and its rate is not below the drafter's (its guesses then in
 * sp->look, *n_look of them), else the drafter. Depends on the context and past steps only. */
static int spec_choose(plume_spec *sp, int32_t n, int32_t room, int32_t *n_look) {
    *n_look = 0;
    if (!sp->p.drafter) return PLUME_SPEC_LOOKUP;
    if (!sp->p.lookup) return PLUME_SPEC_DRAFTER;
    int32_t g, strong = sp->p.ngram_max < SPEC_LOOKUP_STRONG ? sp->p.ngram_max : SPEC_LOOKUP_STRONG;
    int32_t k = spec_lookup(sp->ctx, n, sp->p.ngram_min, sp->p.ngram_max, sp->look, room, &g);
    if (g < strong) return PLUME_SPEC_DRAFTER;
    *n_look = k;
    return sp->src[PLUME_SPEC_LOOKUP].rate >= sp->src[PLUME_SPEC_DRAFTER].rate ? PLUME_SPEC_LOOKUP : PLUME_SPEC_DRAFTER;
}

/* Up to want guesses of source c after the session's tokens and pending into draft, a
 * draft_fn beside the drafter replacing them; sp->ctx holds those n tokens unless the drafter
 * drafts alone. Returns how many or a negative PLUME_E*. */
static int32_t spec_guess(plume_spec *sp, const plume_session *s, int32_t pending, int c, int32_t n, int32_t n_look,
                          int32_t want, int32_t *draft, char **err) {
    int32_t k;
    if (c == PLUME_SPEC_DRAFTER) {
        k = plume_drafter_draft(sp->p.drafter, s, pending, want, draft, NULL, err);
    } else if (sp->p.drafter) { /* lookup beside the drafter: spec_choose looked it up */
        k = n_look < want ? n_look : want;
        memcpy(draft, sp->look, (size_t)k * sizeof *draft);
    } else {
        if (!sp->p.draft_fn) return plume_spec_lookup(sp->ctx, n, sp->p.ngram_min, sp->p.ngram_max, draft, want);
        k = want;
    }
    if (k < 0 || (sp->p.drafter && (k == 0 || !sp->p.draft_fn))) return k;
    int32_t got = sp->p.draft_fn(sp->p.draft_user, sp->ctx, n, draft, k);
    return got < 0 ? 0 : got > k ? k : got; /* its ids are checked by the feed */
}

/* The first half of a step: pending and the guesses, sized by spec_room. */
int32_t plume_spec_draft(plume_spec *sp, const plume_session *s, int32_t pending, int32_t *ids, int32_t cap,
                         char **err) {
    if (!sp || !s || !ids || cap < 1)
        return plume_fail(err, PLUME_EINVAL, "spec: a NULL argument or cap %d < 1", cap);
    if (s->m != sp->m) return plume_fail(err, PLUME_EINVAL, "spec: the session belongs to another model");
    sp->fed = sp->src[0].shadow = sp->src[1].shadow = -1;
    ids[0] = pending;
    int32_t room = spec_room(sp, s, cap), n_look = 0;
    if (room == 0) return 1;
    int32_t n = 0; /* the context, for lookup or a draft_fn (the drafter alone reads the session) */
    if (!sp->p.drafter || sp->p.lookup || sp->p.draft_fn) n = spec_context(sp, s, pending, err);
    if (n < 0) return n;
    int c = spec_choose(sp, n, room, &n_look);
    spec_source *src = &sp->src[c];
    int shadow = sp->p.adaptive && src->rate < SPEC_RATE_MIN;
    int32_t want = shadow ? 1 : sp->p.adaptive && room > src->len ? src->len : room;
    int32_t k = spec_guess(sp, s, pending, c, n, n_look, want, ids + 1, err);
    if (k < 0) return k;
    if (c == PLUME_SPEC_DRAFTER && n_look > 0) sp->src[PLUME_SPEC_LOOKUP].shadow = sp->look[0]; /* compared, free */
    if (shadow) {
        src->shadow = k > 0 ? ids[1] : -1;
        return 1;
    }
    sp->fed = k > 0 ? c : -1;
    return k + 1;
}

/* After a step that fed k guesses and kept j, the first token of its output being `first`
 * (the first guess kept, else the next token): count, and (adaptive) learn per source: the
 * fed source from whether its first guess was kept, and from how many (its length), a source
 * that guessed without feeding from its guess against `first`. */
static void spec_adapt(plume_spec *sp, int32_t k, int32_t j, int32_t first) {
    int fed = k > 0 ? sp->fed : -1;
    if (fed >= 0) {
        sp->src[fed].n_steps++;
        sp->src[fed].n_drafted += k;
        sp->src[fed].n_accepted += j;
    }
    for (int c = 0; c < 2 && sp->p.adaptive; c++) {
        spec_source *x = &sp->src[c];
        double right;
        if (c == fed) right = j > 0;
        else if (x->shadow >= 0) right = first == x->shadow;
        else continue;
        x->rate += SPEC_RATE_WEIGHT * (right - x->rate);
        if (c == fed && c == PLUME_SPEC_DRAFTER) { /* a model's guesses: a steady chance each */
            for (int32_t i = 0; i < j; i++) x->keep += SPEC_RATE_WEIGHT * (1.0 - x->keep);
            if (j < k) x->keep -= SPEC_RATE_WEIGHT * x->keep;
            x->len = spec_keep_len(x->keep, sp->p.draft_max);
        } else if (c == fed && j < k) x->len = j + 1; /* lookup's come in runs: a quote ends */
        else if (c == fed && x->len < sp->p.draft_max) x->len++;
    }
    sp->fed = sp->src[0].shadow = sp->src[1].shadow = -1;
}

/* Verify the k guesses ids[1..k] against logits [k + 1, V]: accept each by the rule of the
 * file comment (into the sampler's history, and out), stop at the first rejection, then draw
 * the next token. *n_acc gets the number accepted; returns the next token, or PLUME_EINVAL
 * (no usable logit). */
static int32_t spec_verify(plume_sampler *smp, const int32_t *ids, int32_t k, const float *logits, size_t V,
                           int32_t *out, int32_t *n_acc) {
    *n_acc = 0;
    for (int32_t i = 0; i < k; i++) {
        int32_t d = ids[1 + i];
        if (plume_sampler_prepare(smp, logits + i * V) < 0) return PLUME_EINVAL;
        double p = plume_sampler_prob(smp, d);
        int keep = p >= 1.0 || (p > 0.0 && plume_sampler_uniform(smp) < p);
        if (!keep) return plume_sampler_draw(smp, d); /* p(d) < 1: something else has mass */
        plume_sampler_accept(smp, d);
        out[(*n_acc)++] = d;
    }
    return plume_sampler_sample(smp, logits + (size_t)k * V);
}

/* The second half: verify the fed guesses, rewind past the rejected, count. */
int32_t plume_spec_accept(plume_spec *sp, plume_session *s, plume_sampler *smp, const int32_t *ids, int32_t n,
                          const float *logits, int32_t *out, char **err) {
    if (!sp || !s || !smp || !ids || !logits || !out || n < 1 || n > s->n_past ||
        memcmp(s->tokens + s->n_past - n, ids, (size_t)n * sizeof *ids))
        return plume_fail(err, PLUME_EINVAL, "spec: accept wants the %d ids the session was just fed", n);
    int32_t P = s->n_past - n, k = n - 1, j;
    plume_sampler_accept(smp, ids[0]);
    int32_t next = spec_verify(smp, ids, k, logits, (size_t)sp->V, out, &j);
    if (next < 0) { /* leave the session and the sampler as they were */
        plume_sampler_rewind(smp, 1 + j);
        plume_session_rewind(s, P, NULL);
        return plume_fail(err, PLUME_EINVAL, "spec: no usable logit at position %d", P + j);
    }
    int rc = j < k ? plume_session_rewind(s, P + 1 + j, err) : 0;
    if (rc) return rc;
    out[j] = next;
    spec_adapt(sp, k, j, out[0]);
    sp->n_steps++;
    sp->n_drafted += k;
    sp->n_accepted += j;
    return j + 1;
}

/* Both halves around one plume_session_feed of every row's logits. */
int32_t plume_spec_step(plume_spec *sp, plume_session *s, plume_sampler *smp, int32_t pending, int32_t *out,
                        int32_t cap, char **err) {
    if (!smp || !out) return plume_fail(err, PLUME_EINVAL, "spec: a NULL argument");
    int32_t n = plume_spec_draft(sp, s, pending, sp ? sp->ids : NULL, cap, err);
    if (n < 0) return n;
    int32_t ok = plume_sampler_allowed_prefix(smp, sp->ids, n); /* a constraint refuses the rest */
    if (ok < n) n = ok > 1 ? ok : 1;
    int rc = plume_session_feed(s, sp->ids, n, sp->logits, 1, err);
    return rc ? rc : plume_spec_accept(sp, s, smp, sp->ids, n, sp->logits, out, err);
}
