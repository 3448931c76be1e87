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
 * only while guesses are right often enough. The drafter keeps a moving average of how often
 * its first guess was right; below SPEC_RATE_MIN it stops feeding guesses but still makes one
 * each step and compares it with the token the model then gives (free), so drafting resumes
 * when the text starts to repeat itself. While drafting, the length grows by one after a step
 * whose guesses were all kept and falls to one more than those kept otherwise. Nothing the
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

struct plume_spec {
    plume_spec_params p;
    int32_t V;
    const plume_model *m;
    float *logits;   /* [draft_max + 1, V] the logits of a step */
    int32_t *ctx;    /* [ctx_cap] the session's tokens and the pending one */
    size_t ctx_cap;
    int32_t *ids;    /* [draft_max + 1] the pending token and the guesses */
    int64_t n_steps, n_drafted, n_accepted;
    double rate;     /* adaptive: moving average of the first guess being right */
    int32_t len;     /* adaptive: the draft length of the next step, 1..draft_max */
    int32_t shadow;  /* adaptive: the guess made but not fed this step, or -1 */
};

/* ---- parameters and lifetime ----------------------------------------------------------- */

/* Draft 3 tokens (docs/SPECULATIVE.md says why) from n-grams of 3 down to 1. */
plume_spec_params plume_spec_default_params(void) {
    plume_spec_params p = {.draft_max = 3, .ngram_max = 3, .ngram_min = 1, .adaptive = 1};
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
    if (!sp->logits || !sp->ids) {
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
    free(sp);
}

/* The adaptive state as plume_spec_new leaves it; NULL is a no-op. */
void plume_spec_reset(plume_spec *sp) {
    if (!sp) return;
    sp->rate = SPEC_RATE_START;
    sp->len = sp->p.draft_max;
    sp->shadow = -1;
}

/* The totals since creation (zeros for NULL). */
void plume_spec_stats(const plume_spec *sp, int64_t *n_steps, int64_t *n_drafted, int64_t *n_accepted) {
    if (n_steps) *n_steps = sp ? sp->n_steps : 0;
    if (n_drafted) *n_drafted = sp ? sp->n_drafted : 0;
    if (n_accepted) *n_accepted = sp ? sp->n_accepted : 0;
}

/* ---- the drafter ----------------------------------------------------------------------- */

/* Prompt lookup: the latest earlier occurrence of the longest suffix (ngram_max down to
 * ngram_min tokens) and up to max of the tokens after it. Never reads past ctx[n - 1]. */
int32_t plume_spec_lookup(const int32_t *ctx, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t *draft,
                          int32_t max) {
    if (!ctx || !draft || max < 1 || ngram_min < 1) return 0;
    for (int32_t g = ngram_max < n - 1 ? ngram_max : n - 1; g >= ngram_min; g--) {
        const int32_t *suffix = ctx + n - g;
        /* latest start i < n - g whose g tokens equal the suffix (and are followed by one) */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (ctx[i] != suffix[0] || memcmp(ctx + i, suffix, (size_t)g * sizeof *ctx)) continue;
            int32_t from = i + g, k = n - from < max ? n - from : max;
            memcpy(draft, ctx + from, (size_t)k * sizeof *ctx);
            return k;
        }
    }
    return 0;
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

/* Guess up to k tokens after the session's tokens and pending, into draft; returns how many
 * or PLUME_ENOMEM. */
static int32_t spec_guess(plume_spec *sp, const plume_session *s, int32_t pending, int32_t k, int32_t *draft,
                          char **err) {
    if (k == 0) return 0;
    if (sp->p.drafter) { /* the MTP drafter; a draft_fn beside it may replace its guesses */
        k = plume_drafter_draft(sp->p.drafter, s, pending, k, draft, NULL, err);
        if (k <= 0 || !sp->p.draft_fn) return k;
    }
    int32_t n = s->n_past + 1;
    if (plume_grow(&sp->ctx, &sp->ctx_cap, (size_t)s->n_ctx + 1, sizeof *sp->ctx)) /* once: n <= n_ctx + 1 */
        return plume_fail(err, PLUME_ENOMEM, "spec: out of memory for a context of %d tokens", s->n_ctx + 1);
    memcpy(sp->ctx, s->tokens, (size_t)s->n_past * sizeof *sp->ctx);
    sp->ctx[n - 1] = pending;
    if (!sp->p.draft_fn) return plume_spec_lookup(sp->ctx, n, sp->p.ngram_min, sp->p.ngram_max, draft, k);
    int32_t got = sp->p.draft_fn(sp->p.draft_user, sp->ctx, n, draft, k);
    return got < 0 ? 0 : got > k ? k : got; /* its ids are checked by the feed */
}

/* The first half of a step: pending and the guesses, sized by spec_room. */
int32_t plume_spec_draft(plume_spec *sp, const plume_session *s, int32_t pending, int32_t *ids, int32_t cap,
                         char **err) {
    if (!sp || !s || !ids || cap < 1)
        return plume_fail(err, PLUME_EINVAL, "spec: a NULL argument or cap %d < 1", cap);
    if (s->m != sp->m) return plume_fail(err, PLUME_EINVAL, "spec: the session belongs to another model");
    int32_t room = spec_room(sp, s, cap);
    int shadow = sp->p.adaptive && sp->rate < SPEC_RATE_MIN;
    if (sp->p.adaptive && room > sp->len) room = sp->len;
    int32_t k = spec_guess(sp, s, pending, shadow && room > 1 ? 1 : room, ids + 1, err);
    if (k < 0) return k;
    sp->shadow = shadow && k > 0 ? ids[1] : -1;
    ids[0] = pending;
    return shadow ? 1 : k + 1;
}

/* Adaptive length: learn from a step that drafted k guesses and kept j, and whose next
 * token was `next` (a guess not fed is compared with it). */
static void spec_adapt(plume_spec *sp, int32_t k, int32_t j, int32_t next) {
    if (!sp->p.adaptive) return;
    double right;
    if (k > 0) right = j > 0;
    else if (sp->shadow >= 0) right = next == sp->shadow;
    else return;
    sp->shadow = -1;
    sp->rate += SPEC_RATE_WEIGHT * (right - sp->rate);
    if (k > 0 && j < k) sp->len = j + 1;
    else if (k > 0 && sp->len < sp->p.draft_max) sp->len++;
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
    spec_adapt(sp, k, j, next);
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
