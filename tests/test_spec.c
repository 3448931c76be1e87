/* test_spec.c -- speculative decoding (speculative.c) and the sampler functions it uses.
 * The prompt-lookup drafter on hand-made contexts; the sampler's rewind against a sampler
 * that never saw the rewound ids; prepare/prob/draw against sample. Greedy decoding with
 * drafts is identical token for token to plain greedy decoding, for every weight type and
 * ISA, with and without penalties, and the run accepts some drafts and rejects others.
 * Sampled decoding with drafts has the distribution of plain sampling: a chi-square test of
 * homogeneity on the first generated tokens over many seeds, at a threshold a correct
 * implementation passes except with probability ~1e-7 (the seeds are fixed, so the outcome
 * is deterministic); docs/SPECULATIVE.md shows that an always-accept rule fails it. The
 * step and greedy checks run on tiny-a and again on tiny-e4b (E4B's structure). */
#include "model.h"
#include "t_tiny.h"

#define V 512

static char *tmp;
static char bundles[4][600];
static int32_t golden[64];

static plume_model *open_isa(const char *dir, const char *isa, int32_t threads) {
    return t_tiny_open(dir, isa, threads, 0);
}

static int32_t kv_bits = 32; /* of the sessions new_session() makes */

static plume_session *new_session(plume_model *m) {
    plume_session_params p = plume_session_default_params();
    p.n_ctx = 160;
    p.kv_bits = kv_bits;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_new(&s, m, &p, &err)) { printf("  %s\n", err); free(err); }
    return s;
}

/* ---- the drafter ----------------------------------------------------------------------- */

static void test_lookup(void) {
    int32_t d[8];
    /* 1 2 3 9 1 2 3 7 ... 1 2 3: the latest earlier "1 2 3" is followed by 7 8 */
    const int32_t a[] = {1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
    int32_t n = plume_spec_lookup(a, 13, 1, 3, d, 8);
    CHECK(n == 6 && d[0] == 7 && d[1] == 8 && d[2] == 5 && d[5] == 3, "latest 3-gram: %d %d", n, d[0]);
    CHECK(plume_spec_lookup(a, 13, 1, 3, d, 2) == 2 && d[1] == 8, "max 2");
    /* the longest n-gram wins over a later shorter one: "4 5" occurs at 0 then "5" at 4 */
    const int32_t b[] = {4, 5, 6, 0, 5, 9, 4, 5};
    n = plume_spec_lookup(b, 8, 1, 3, d, 4);
    CHECK(n == 4 && d[0] == 6 && d[1] == 0, "2-gram before 1-gram: %d %d", n, d[0]);
    n = plume_spec_lookup(b, 8, 1, 1, d, 4);
    CHECK(n == 3 && d[0] == 9, "1-gram only: latest 5 is followed by 9: %d %d", n, d[0]);
    const int32_t c[] = {1, 2, 3, 4};
    CHECK(plume_spec_lookup(c, 4, 1, 3, d, 4) == 0, "no repeat, no draft");
    CHECK(plume_spec_lookup(c, 1, 1, 3, d, 4) == 0 && plume_spec_lookup(c, 0, 1, 3, d, 4) == 0, "too short");
    const int32_t r[] = {7, 7, 7};
    n = plume_spec_lookup(r, 3, 1, 3, d, 4);
    CHECK(n == 1 && d[0] == 7, "a run drafts itself: %d", n);
    CHECK(plume_spec_lookup(a, 13, 2, 2, d, 8) == 6, "min = max = 2");
    CHECK(plume_spec_lookup(a, 13, 4, 4, d, 8) == 0, "no earlier \"5 1 2 3\"");
}

static void test_params_refused(void) {
    plume_model *m = open_isa(bundles[0], NULL, 1);
    if (!m) return;
    plume_spec *sp = NULL;
    char *err = NULL;
    plume_spec_params p = plume_spec_default_params();
    p.draft_max = PLUME_SAMPLER_UNDO;
    CHECK(plume_spec_new(&sp, m, &p, &err) == PLUME_EINVAL && err && strstr(err, "draft_max"), "draft_max too big");
    free(err), err = NULL;
    p = plume_spec_default_params();
    p.ngram_min = 3;
    p.ngram_max = 2;
    CHECK(plume_spec_new(&sp, m, &p, &err) == PLUME_EINVAL && err && strstr(err, "n-gram"), "min > max");
    free(err), err = NULL;
    p = plume_spec_default_params();
    CHECK(plume_spec_new(&sp, m, &p, &err) == 0, "defaults: %s", err ? err : "");
    plume_session *s = new_session(m);
    plume_sampler *smp = NULL;
    plume_sampler_new(&smp, NULL, V, NULL);
    int32_t out[8];
    CHECK(plume_spec_step(sp, s, smp, 3, out, 0, &err) == PLUME_EINVAL, "cap 0");
    free(err), err = NULL;
    CHECK(plume_spec_step(sp, s, smp, V, out, 8, &err) == PLUME_EINVAL && plume_session_n_past(s) == 0,
          "bad id refused, session unchanged");
    free(err);
    plume_sampler_free(smp);
    plume_session_free(s);
    plume_spec_free(sp);
    plume_model_free(m);
}

/* ---- the sampler's new functions ------------------------------------------------------- */

/* Logits with some structure: a few large ones, the rest small. */
static void some_logits(float *l, uint64_t seed) {
    for (int32_t i = 0; i < V; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((seed >> 40) & 0xffff) / 65536.0f * 4.0f - 2.0f;
    }
    l[7] = 5.0f, l[100] = 4.5f, l[300] = 4.8f;
}

/* Whether two samplers give the same distribution on logits l (prepare, prob of every id). */
static int same_dist(plume_sampler *a, plume_sampler *b, const float *l) {
    if (plume_sampler_prepare(a, l) != plume_sampler_prepare(b, l)) return 0;
    for (int32_t i = 0; i < V; i++)
        if (plume_sampler_prob(a, i) != plume_sampler_prob(b, i)) return 0;
    return 1;
}

static void test_sampler_rewind(void) {
    float l[V];
    some_logits(l, 1);
    const int32_t wins[] = {4, -1, 64};
    for (int w = 0; w < 3; w++) {
        plume_sampler_params p = plume_sampler_default_params();
        p.repeat_penalty = 1.5f;
        p.presence_penalty = 0.7f;
        p.frequency_penalty = 0.2f;
        p.repeat_last_n = wins[w];
        plume_sampler *a = NULL, *b = NULL;
        plume_sampler_new(&a, &p, V, NULL);
        plume_sampler_new(&b, &p, V, NULL);
        const int32_t hist[] = {7, 300, 7, 100, 5, 6, 7, 300, 8, 9, 100, 7};
        /* a sees all 12 then forgets the last k; b sees only the first 12 - k */
        for (int32_t k = 0; k <= 12; k++) {
            plume_sampler_reset(a);
            plume_sampler_reset(b);
            for (int32_t i = 0; i < 12; i++) plume_sampler_accept(a, hist[i]);
            for (int32_t i = 0; i < 12 - k; i++) plume_sampler_accept(b, hist[i]);
            CHECK(plume_sampler_rewind(a, k) == 0, "win %d: rewind %d", wins[w], k);
            CHECK(same_dist(a, b, l), "win %d: rewind %d differs from never accepting", wins[w], k);
            /* and they stay the same as the history grows again */
            plume_sampler_accept(a, 9);
            plume_sampler_accept(b, 9);
            CHECK(same_dist(a, b, l), "win %d: rewind %d then accept", wins[w], k);
        }
        CHECK(plume_sampler_rewind(a, 14) == PLUME_EINVAL, "more than accepted");
        CHECK(plume_sampler_rewind(a, -1) == PLUME_EINVAL, "negative");
        plume_sampler_free(a);
        plume_sampler_free(b);
    }
    /* past the undo margin the ids that left the window are gone: refused, not wrong */
    plume_sampler_params p = plume_sampler_default_params();
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 4;
    plume_sampler *a = NULL;
    plume_sampler_new(&a, &p, V, NULL);
    for (int32_t i = 0; i < 200; i++) plume_sampler_accept(a, i % 50);
    CHECK(plume_sampler_rewind(a, PLUME_SAMPLER_UNDO) == 0, "undo margin");
    CHECK(plume_sampler_rewind(a, 1) == PLUME_EINVAL, "beyond the margin refused");
    plume_sampler_free(a);
    /* a window too large for the ring plus its margin is refused, not overflowed */
    p.repeat_last_n = INT32_MAX;
    char *err = NULL;
    CHECK(plume_sampler_new(&a, &p, V, &err) == PLUME_ENOMEM && !a, "huge window: %s", err ? err : "accepted");
    free(err);
    /* penalties off: nothing to forget, always fine */
    plume_sampler_new(&a, NULL, V, NULL);
    CHECK(plume_sampler_rewind(a, 5) == 0, "no history");
    plume_sampler_free(a);
}

static void test_sampler_prepare_draw(void) {
    float l[V];
    some_logits(l, 2);
    plume_sampler_params ps[3] = {plume_sampler_default_params(), plume_sampler_default_params(),
                                  plume_sampler_default_params()};
    ps[1].top_k = 0, ps[1].top_p = 0.8f, ps[1].min_p = 0.05f, ps[1].temperature = 0.7f;
    ps[2].temperature = 0.0f;
    for (int c = 0; c < 3; c++) {
        plume_sampler *a = NULL, *b = NULL;
        ps[c].seed = 11;
        plume_sampler_new(&a, &ps[c], V, NULL);
        plume_sampler_new(&b, &ps[c], V, NULL);
        int32_t n = plume_sampler_prepare(a, l);
        double sum = 0.0;
        for (int32_t i = 0; i < V; i++) sum += plume_sampler_prob(a, i);
        CHECK(n >= 1 && fabs(sum - 1.0) < 1e-9, "config %d: %d ids, probabilities sum to %.12f", c, n, sum);
        for (int r = 0; r < 50; r++) { /* the same generator steps give the same ids */
            int32_t x = plume_sampler_draw(a, -1), y = plume_sampler_sample(b, l);
            CHECK(x == y, "config %d: draw %d, sample %d", c, x, y);
            plume_sampler_prepare(a, l);
        }
        /* without the most likely id, it never comes out; the rest keep their ratios */
        int32_t best = 7;
        int32_t cnt[V] = {0};
        for (int r = 0; r < 2000; r++) cnt[plume_sampler_draw(a, best) & (V - 1)]++;
        CHECK(cnt[best] == 0, "config %d: the removed id was drawn", c);
        if (c == 2) CHECK(plume_sampler_draw(a, best) == PLUME_EINVAL, "greedy: nothing left without the argmax");
        if (c == 2) CHECK(plume_sampler_draw(a, 300) == 7, "greedy: the argmax without another id");
        plume_sampler_free(a);
        plume_sampler_free(b);
    }
}

/* ---- greedy: identical to plain decoding ----------------------------------------------- */

/* A prompt that repeats itself: golden ids 0..11 three times, then 0..3. */
static int32_t repeating_prompt(int32_t *p) {
    int32_t n = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 12; i++) p[n++] = golden[i];
    for (int i = 0; i < 4; i++) p[n++] = golden[i];
    return n;
}

/* Plain decoding: ngen tokens after the prompt, one step each; last (may be NULL) gets the
 * logits after the last one. */
static void plain_run(plume_model *m, const plume_sampler_params *sp, const int32_t *prompt, int32_t np,
                      int32_t ngen, int32_t *out, float *last) {
    plume_session *s = new_session(m);
    plume_sampler *smp = NULL;
    float lg[V];
    plume_sampler_new(&smp, sp, V, NULL);
    plume_session_feed(s, prompt, np, lg, 0, NULL);
    for (int32_t i = 0; i < np; i++) plume_sampler_accept(smp, prompt[i]);
    for (int32_t g = 0; g < ngen; g++) {
        out[g] = plume_sampler_sample(smp, lg);
        plume_sampler_accept(smp, out[g]);
        plume_session_feed(s, &out[g], 1, lg, 0, NULL);
    }
    if (last) memcpy(last, lg, sizeof lg);
    plume_sampler_free(smp);
    plume_session_free(s);
}

/* Speculative decoding of the same with drafter params pp: ngen tokens, then the last one fed
 * for its logits (last [V]); *acc and *drafted get the totals. */
static void spec_run(plume_model *m, const plume_sampler_params *sp, const plume_spec_params *pp,
                     const int32_t *prompt, int32_t np, int32_t ngen, int32_t *out, float *last, int64_t *acc,
                     int64_t *drafted) {
    plume_session *s = new_session(m);
    plume_sampler *smp = NULL;
    plume_spec *spec = NULL;
    char *err = NULL;
    float lg[V];
    plume_sampler_new(&smp, sp, V, NULL);
    CHECK(plume_spec_new(&spec, m, pp, &err) == 0, "spec_new: %s", err ? err : "");
    plume_session_feed(s, prompt, np, lg, 0, NULL);
    for (int32_t i = 0; i < np; i++) plume_sampler_accept(smp, prompt[i]);
    int32_t g = 0, buf[64];
    out[g++] = plume_sampler_sample(smp, lg);
    while (g < ngen && spec) {
        int32_t n = plume_spec_step(spec, s, smp, out[g - 1], buf, ngen - g, &err);
        CHECK(n >= 1, "step: %d %s", n, err ? err : "");
        if (n < 1) break;
        memcpy(out + g, buf, (size_t)n * sizeof *buf);
        g += n;
        CHECK(plume_session_n_past(s) == np + g - 1, "the session holds all but the pending token");
        CHECK(!memcmp(plume_session_tokens(s) + np, out, (size_t)(g - 1) * 4), "the session holds the output");
    }
    plume_session_feed(s, &out[ngen - 1], 1, last, 0, NULL);
    plume_spec_stats(spec, NULL, drafted, acc);
    free(err);
    plume_spec_free(spec);
    plume_sampler_free(smp);
    plume_session_free(s);
}

static void check_greedy(plume_model *m, const plume_sampler_params *sp, int32_t draft_max, const char *what,
                         int64_t *acc_total, int64_t *rej_total) {
    int32_t prompt[64], a[96], b[96];
    int32_t np = repeating_prompt(prompt), ngen = 96;
    int64_t acc = 0, drafted = 0;
    float la[V], lb[V];
    plume_spec_params pp = plume_spec_default_params();
    pp.draft_max = draft_max;
    pp.adaptive = 0; /* every step drafts: both paths of the verification run */
    plain_run(m, sp, prompt, np, ngen, a, la);
    spec_run(m, sp, &pp, prompt, np, ngen, b, lb, &acc, &drafted);
    int32_t first = -1;
    for (int32_t i = 0; i < ngen && first < 0; i++)
        if (a[i] != b[i]) first = i;
    CHECK(first < 0, "%s draft %d: token %d differs: plain %d, speculative %d", what, draft_max, first,
          first >= 0 ? a[first] : 0, first >= 0 ? b[first] : 0);
    CHECK(first >= 0 || !memcmp(la, lb, sizeof la), "%s draft %d: the logits after the run differ", what, draft_max);
    *acc_total += acc;
    *rej_total += drafted - acc;
}

static void test_greedy_identical_every_weight_and_isa(void) {
    const char *isas[8];
    int n = plume_kernels_available(isas, 8);
    plume_sampler_params sp = plume_sampler_default_params();
    sp.temperature = 0.0f;
    plume_sampler_params pen = sp;
    pen.repeat_penalty = 1.3f;
    pen.presence_penalty = 0.2f;
    pen.repeat_last_n = 8;
    int64_t acc = 0, rej = 0, acc_pen = 0, rej_pen = 0;
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < n; i++) {
            plume_model *m = open_isa(bundles[w], isas[i], 2);
            CHECK(m, "open %s", bundles[w]);
            if (!m) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %s", t_tiny_wnames[w], isas[i]);
            check_greedy(m, &sp, 4, what, &acc, &rej);
            check_greedy(m, &sp, 7, what, &acc, &rej);
            check_greedy(m, &pen, 5, what, &acc_pen, &rej_pen);
            if (w == 2) { /* int8 K/V: a step's queries see its earlier rows rounded */
                kv_bits = 8;
                strcat(what, " kv8");
                check_greedy(m, &sp, 6, what, &acc, &rej);
                kv_bits = 32;
            }
            plume_model_free(m);
        }
    printf("  greedy: %lld drafts accepted, %lld rejected; with penalties %lld, %lld\n", (long long)acc,
           (long long)rej, (long long)acc_pen, (long long)rej_pen);
    CHECK(acc > 0 && rej > 0, "the runs must accept and reject drafts: %lld, %lld", (long long)acc, (long long)rej);
    CHECK(acc_pen > 0 && rej_pen > 0, "with penalties: %lld, %lld", (long long)acc_pen, (long long)rej_pen);
}

/* ---- adaptive draft length ------------------------------------------------------------ */

/* A drafter that knows the answer: the plain greedy run's context (full [np + ngen]);
 * it guesses wrong (each token + 1) while the context is shorter than wrong_until. */
typedef struct {
    const int32_t *full;
    int32_t n_full, wrong_until;
} oracle_drafter;

static int32_t oracle_draft(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max) {
    const oracle_drafter *o = user;
    (void)ctx;
    int32_t k = 0;
    for (; k < max && n + k < o->n_full; k++) draft[k] = n < o->wrong_until ? (o->full[n + k] + 1) % V : o->full[n + k];
    return k;
}

/* Adaptive drafting changes how many guesses are fed, never the output: on random weights
 * (prompt lookup is rarely right) it soon stops feeding guesses; a drafter that is always
 * right keeps drafting at full length (a token and 3 guesses a step); one that turns right
 * after being wrong for 40 tokens gets fed again (its unfed guesses are compared). */
static void test_adaptive(void) {
    plume_model *m = open_isa(bundles[2], NULL, 2);
    if (!m) return;
    plume_sampler_params sp = plume_sampler_default_params();
    sp.temperature = 0.0f;
    int32_t prompt[64], a[96], b[96], full[160];
    int32_t np = repeating_prompt(prompt), ngen = 96;
    float la[V], lb[V];
    plain_run(m, &sp, prompt, np, ngen, a, la);
    memcpy(full, prompt, (size_t)np * sizeof *full);
    memcpy(full + np, a, (size_t)ngen * sizeof *full);
    oracle_drafter o = {full, np + ngen, 0};
    struct { const char *what; int adaptive; plume_draft_fn fn; int32_t wrong_until; } runs[] = {
        {"lookup, fixed", 0, NULL, 0},      {"lookup, adaptive", 1, NULL, 0},
        {"oracle, fixed", 0, oracle_draft, 0},  {"oracle, adaptive", 1, oracle_draft, 0},
        {"wrong then right, adaptive", 1, oracle_draft, np + 40},
    };
    int64_t acc[5], drafted[5];
    for (int r = 0; r < 5; r++) {
        plume_spec_params pp = plume_spec_default_params();
        pp.adaptive = runs[r].adaptive;
        pp.draft_fn = runs[r].fn;
        pp.draft_user = &o;
        o.wrong_until = runs[r].wrong_until;
        spec_run(m, &sp, &pp, prompt, np, ngen, b, lb, &acc[r], &drafted[r]);
        CHECK(!memcmp(a, b, sizeof a) && !memcmp(la, lb, sizeof la), "%s: the output differs from plain decoding",
              runs[r].what);
        printf("  %s: %lld of %lld guesses kept\n", runs[r].what, (long long)acc[r], (long long)drafted[r]);
    }
    CHECK(drafted[1] * 2 < drafted[0], "adaptive lookup on random weights still feeds %lld guesses (fixed: %lld)",
          (long long)drafted[1], (long long)drafted[0]);
    /* always right: as many guesses fed as without adaptation (the room of each step: cap,
     * snapshots), every one kept */
    CHECK(acc[3] == drafted[3] && drafted[3] == drafted[2] && acc[2] == drafted[2], "oracle: %lld of %lld kept, fixed %lld",
          (long long)acc[3], (long long)drafted[3], (long long)drafted[2]);
    /* wrong for 40 tokens: 7 steps fed (3 guesses, then 1 each) until the rate falls below
     * 1 in 5, then unfed guesses; right again: fed after two right ones, kept from then on */
    CHECK(drafted[4] - acc[4] <= 12 && acc[4] * 2 >= acc[3], "wrong then right: %lld of %lld kept (oracle %lld)",
          (long long)acc[4], (long long)drafted[4], (long long)acc[3]);
    plume_model_free(m);
}

/* ---- the property it rests on --------------------------------------------------------- */

/* Whether k tokens fed in one step (all logits) give the logits of k one-token steps, bit for
 * bit, at a decode position (after a 40-token prompt); prints what differs. */
static int step_equals_single_steps(plume_model *m, int32_t k, const char *what) {
    int32_t prompt[64], np = repeating_prompt(prompt);
    plume_session *a = new_session(m), *b = new_session(m);
    float *la = calloc((size_t)k * V, 4), *lb = calloc((size_t)k * V, 4);
    int ok = a && b && la && lb && !plume_session_feed(a, prompt, np, NULL, 0, NULL) &&
             !plume_session_feed(b, prompt, np, NULL, 0, NULL) &&
             !plume_session_feed(a, golden + 20, k, la, 1, NULL);
    for (int32_t i = 0; ok && i < k; i++) ok = !plume_session_feed(b, golden + 20 + i, 1, lb + (size_t)i * V, 0, NULL);
    size_t diff = 0;
    for (size_t i = 0; ok && i < (size_t)k * V; i++) diff += memcmp(&la[i], &lb[i], 4) != 0;
    if (!ok || diff) printf("  %s, %d tokens: %zu of %zu logits differ\n", what, k, diff, (size_t)k * V);
    free(la);
    free(lb);
    plume_session_free(a);
    plume_session_free(b);
    return ok && diff == 0;
}

static void test_step_logits_equal_single_steps(void) {
    const char *isas[8];
    int n = plume_kernels_available(isas, 8);
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < n; i++) {
            plume_model *m = open_isa(bundles[w], isas[i], 2);
            if (!m) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %s", t_tiny_wnames[w], isas[i]);
            CHECK(step_equals_single_steps(m, 9, what), "%s", what);
            if (w == 2) {
                kv_bits = 8;
                CHECK(step_equals_single_steps(m, 9, "q8 kv8"), "%s kv8", what);
                kv_bits = 32;
            }
            plume_model_free(m);
        }
    /* open_isa takes the defaults: int8 activations on q8/q4; the exact float path too */
    plume_model_params p = plume_model_default_params();
    p.exact = 1;
    for (int w = 2; w < 4; w++) {
        plume_model *m = NULL;
        if (plume_model_open(&m, bundles[w], &p, NULL) == 0)
            CHECK(step_equals_single_steps(m, 9, "exact"), "%s --exact, 9 tokens", t_tiny_wnames[w]);
        plume_model_free(m);
    }
}

/* ---- sampling: the distribution of plain sampling ------------------------------------- */

#define DIST_RUNS 4000 /* seeds per side */
#define DIST_GEN 4     /* tokens per run: the first, then the ones speculation produces */

/* A drafter for the distribution test: after the prompt (np tokens) and a first token x, the
 * guesses the table holds for x (made so that they are accepted often, but not always);
 * nothing elsewhere. A function of the context alone, as the acceptance rule requires. */
typedef struct {
    int32_t np;
    int32_t d[V][2]; /* guesses after x; -1: none */
} table_drafter;

static int32_t table_draft(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max) {
    const table_drafter *t = user;
    if (n != t->np + 1 || t->d[ctx[n - 1]][0] < 0) return 0;
    int32_t k = max < 2 ? max : 2;
    memcpy(draft, t->d[ctx[n - 1]], (size_t)k * sizeof *draft);
    return k;
}

/* The r-th highest logit's id (r = 0 or 1). */
static int32_t rank_id(const float *l, int r) {
    int32_t b = 0, c = -1;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[b]) c = b, b = i;
        else if (c < 0 || l[i] > l[c]) c = i;
    return r ? c : b;
}

/* Fill the table: for every first token x the sampler can draw after the prompt, guess the
 * best (even x) or second best (odd x) next token, then the best after it. */
static void table_fill(table_drafter *t, plume_session *s, plume_sampler *smp, const float *lg0) {
    float lg[2 * V];
    for (int32_t x = 0; x < V; x++) t->d[x][0] = t->d[x][1] = -1;
    plume_sampler_prepare(smp, lg0);
    for (int32_t x = 0; x < V; x++) {
        if (plume_sampler_prob(smp, x) == 0.0) continue;
        plume_session_rewind(s, t->np, NULL);
        plume_session_feed(s, &x, 1, lg, 0, NULL);
        t->d[x][0] = rank_id(lg, x & 1);
        plume_session_feed(s, &t->d[x][0], 1, lg, 0, NULL);
        t->d[x][1] = rank_id(lg, 0);
    }
    plume_session_rewind(s, t->np, NULL);
}

/* The plain side's logits by context: the model is deterministic, so the logits after the
 * prompt and tokens o[0..n-1] are computed once per distinct (n, o) and kept (runs share
 * their first tokens: a few hundred contexts serve DIST_RUNS * (DIST_GEN - 1) lookups). */
#define MEMO_SLOTS 8192 /* a power of two, more than the contexts a test reaches */
typedef struct {
    int32_t n, o[DIST_GEN - 1]; /* the context after the prompt; n = 0: empty slot */
    float *lg;                  /* [V] */
} memo_slot;
static memo_slot memo[MEMO_SLOTS];

/* Forget every context (a new prompt or sampler setting starts a new table). */
static void memo_clear(void) {
    for (int i = 0; i < MEMO_SLOTS; i++) free(memo[i].lg);
    memset(memo, 0, sizeof memo);
}

/* The logits after the prompt (np tokens, already in s) and o[0..n-1], into lg [V]: from the
 * table, or fed to s (rewound to the prompt) one token at a time and remembered (not when
 * the table is full or out of memory: then computed every time, never wrong). */
static void memo_logits(plume_session *s, int32_t np, const int32_t *o, int32_t n, float *lg) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)o[i]) * 16777619u;
    memo_slot *e = NULL;
    for (uint32_t probe = 0, j = h & (MEMO_SLOTS - 1); probe < MEMO_SLOTS && !e; probe++, j = (j + 1) & (MEMO_SLOTS - 1)) {
        if (memo[j].n == n && !memcmp(memo[j].o, o, (size_t)n * sizeof *o)) {
            memcpy(lg, memo[j].lg, V * sizeof *lg);
            return;
        }
        if (!memo[j].n) e = &memo[j];
    }
    plume_session_rewind(s, np, NULL);
    for (int32_t i = 0; i < n; i++) plume_session_feed(s, &o[i], 1, lg, 0, NULL); /* as decoding does */
    if (!e || !(e->lg = malloc(V * sizeof *lg))) return;
    e->n = n;
    memcpy(e->o, o, (size_t)n * sizeof *o);
    memcpy(e->lg, lg, V * sizeof *lg);
}

/* The first DIST_GEN tokens after the prompt (already fed to s, logits lg0 [V]), plain
 * (spec NULL: the model's logits through memo_logits) or with drafts, with sampler seed
 * `seed`. */
static void first_tokens(plume_session *s, plume_spec *spec, const plume_sampler_params *sp0, uint64_t seed,
                         const int32_t *prompt, int32_t np, const float *lg0, int32_t *out) {
    plume_sampler_params sp = *sp0;
    sp.seed = seed;
    plume_sampler *smp = NULL;
    plume_sampler_new(&smp, &sp, V, NULL);
    for (int32_t i = 0; i < np; i++) plume_sampler_accept(smp, prompt[i]);
    plume_session_rewind(s, np, NULL);
    float lg[V];
    int32_t g = 0, buf[DIST_GEN];
    out[g++] = plume_sampler_sample(smp, lg0);
    while (g < DIST_GEN) {
        if (!spec) {
            plume_sampler_accept(smp, out[g - 1]);
            memo_logits(s, np, out, g, lg);
            out[g++] = plume_sampler_sample(smp, lg);
            continue;
        }
        int32_t n = plume_spec_step(spec, s, smp, out[g - 1], buf, DIST_GEN - g, NULL);
        if (n < 1) break;
        memcpy(out + g, buf, (size_t)n * sizeof *buf);
        g += n;
    }
    plume_sampler_free(smp);
}

/* The chi-square quantile of probability 1 - 1e-7 with df degrees of freedom
 * (Wilson-Hilferty; z = 5.2 is the normal quantile of 1 - 1e-7). */
static double chi2_limit(int df) {
    double a = 2.0 / (9.0 * df), z = 5.2;
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Chi-square test of homogeneity of two samples of equal size over categories (counts a, b
 * [n]); categories with fewer than 10 draws in both together are pooled into one. Returns
 * the statistic, *df its degrees of freedom. */
static double chi2_two_sample(const int32_t *a, const int32_t *b, int32_t n, int *df) {
    double x = 0.0;
    int64_t pa = 0, pb = 0;
    int bins = 0;
    for (int32_t i = 0; i < n; i++) {
        if (a[i] + b[i] < 10) {
            pa += a[i], pb += b[i];
            continue;
        }
        x += (double)(a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
        bins++;
    }
    if (pa + pb > 0) {
        x += (double)(pa - pb) * (double)(pa - pb) / (double)(pa + pb);
        bins++;
    }
    *df = bins - 1;
    return x;
}

/* Speculative sampling vs plain sampling with sampler params sp: the joint distribution of
 * the second and third tokens, and each position's marginal. Returns 1 if every test
 * passes; acc and rej add up the drafts. */
static int check_distribution(plume_model *m, const plume_sampler_params *sp, int adaptive, const char *what, int64_t *acc,
                              int64_t *rej) {
    int32_t prompt[64];
    int32_t np = repeating_prompt(prompt);
    plume_session *s = new_session(m);
    plume_spec *spec = NULL;
    plume_sampler *smp = NULL;
    table_drafter *t = calloc(1, sizeof *t);
    plume_spec_params pp = plume_spec_default_params();
    pp.draft_max = 2;
    pp.adaptive = adaptive;
    pp.draft_fn = table_draft;
    pp.draft_user = t;
    float lg0[V];
    if (!s || !t || plume_spec_new(&spec, m, &pp, NULL) || plume_session_feed(s, prompt, np, lg0, 0, NULL)) return 0;
    plume_sampler_new(&smp, sp, V, NULL);
    for (int32_t i = 0; i < np; i++) plume_sampler_accept(smp, prompt[i]);
    t->np = np;
    table_fill(t, s, smp, lg0);
    /* categories: the pair of tokens 2 and 3, then each later token */
    int32_t *cnt[2];
    size_t ncat = (size_t)V * V + (DIST_GEN - 1) * (size_t)V;
    for (int k = 0; k < 2; k++) cnt[k] = calloc(ncat, sizeof(int32_t));
    memo_clear();
    for (int k = 0; k < 2; k++)
        for (uint64_t r = 0; r < DIST_RUNS; r++) {
            int32_t o[DIST_GEN];
            first_tokens(s, k ? spec : NULL, sp, 1000003 * (uint64_t)k + r, prompt, np, lg0, o);
            cnt[k][(size_t)o[1] * V + (size_t)o[2]]++;
            for (int g = 1; g < DIST_GEN; g++) cnt[k][(size_t)V * V + (size_t)(g - 1) * V + (size_t)o[g]]++;
        }
    int ok = 1, df;
    double x = chi2_two_sample(cnt[0], cnt[1], V * V, &df);
    printf("  %s: pairs chi2 %.1f (df %d, limit %.1f)", what, x, df, chi2_limit(df));
    ok &= df > 0 && x < chi2_limit(df);
    for (int g = 1; g < DIST_GEN; g++) {
        int32_t *a = cnt[0] + (size_t)V * V + (size_t)(g - 1) * V, *b = cnt[1] + (size_t)V * V + (size_t)(g - 1) * V;
        x = chi2_two_sample(a, b, V, &df);
        printf(", token %d %.1f (%d, %.1f)", g + 1, x, df, chi2_limit(df));
        ok &= df > 0 && x < chi2_limit(df);
    }
    int64_t drafted, accepted;
    plume_spec_stats(spec, NULL, &drafted, &accepted);
    printf("; drafts accepted %lld of %lld\n", (long long)accepted, (long long)drafted);
    *acc += accepted;
    *rej += drafted - accepted;
    for (int k = 0; k < 2; k++) free(cnt[k]);
    memo_clear();
    free(t);
    plume_sampler_free(smp);
    plume_spec_free(spec);
    plume_session_free(s);
    return ok;
}

static void test_sampling_keeps_the_distribution(void) {
    plume_model *m = open_isa(bundles[0], NULL, 1);
    if (!m) return;
    plume_sampler_params sp = plume_sampler_default_params();
    sp.top_k = 6;
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    plume_sampler_params pen = sp;
    pen.repeat_penalty = 1.5f;
    pen.presence_penalty = 0.5f;
    pen.repeat_last_n = 4;
    plume_sampler_params tp = plume_sampler_default_params();
    tp.top_k = 0, tp.top_p = 0.7f, tp.min_p = 0.02f, tp.temperature = 0.8f;
    int64_t acc = 0, rej = 0;
    CHECK(check_distribution(m, &sp, 0, "top-k 6", &acc, &rej), "top-k 6: the distributions differ");
    CHECK(check_distribution(m, &pen, 0, "with penalties", &acc, &rej), "with penalties: the distributions differ");
    CHECK(check_distribution(m, &tp, 0, "top-p 0.7 min-p 0.02 T 0.8", &acc, &rej), "top-p: the distributions differ");
    /* a draft length chosen from past outcomes is a draft fixed before the step: still exact */
    CHECK(check_distribution(m, &sp, 1, "top-k 6, adaptive", &acc, &rej), "adaptive: the distributions differ");
    CHECK(acc > 500 && rej > 500, "the test needs accepted and rejected drafts: %lld, %lld", (long long)acc,
          (long long)rej);
    plume_model_free(m);
}

int main(void) {
    tmp = t_tmpdir("spec");
    char out[4096];
    t_tiny_bundles("tiny-a", tmp, bundles);
    t_tiny_ids("tiny-a", golden, 64);
    RUN(test_lookup);
    RUN(test_params_refused);
    RUN(test_sampler_rewind);
    RUN(test_sampler_prepare_draw);
    RUN(test_step_logits_equal_single_steps);
    RUN(test_greedy_identical_every_weight_and_isa);
    RUN(test_adaptive);
    RUN(test_sampling_keeps_the_distribution);
    /* E4B's structure: a rewound draft leaves the caches layers 6-11 share from 4 and 5 */
    t_tiny_bundles("tiny-e4b", tmp, bundles);
    t_tiny_ids("tiny-e4b", golden, 64);
    RUN_ON("tiny-e4b", test_step_logits_equal_single_steps);
    RUN_ON("tiny-e4b", test_greedy_identical_every_weight_and_isa);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
