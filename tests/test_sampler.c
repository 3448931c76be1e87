/* test_sampler.c -- the sampling chain against hand-computed answers and a naive twin.
 *
 * Knobs with a closed-form answer (greedy, temperature, top-k, top-p, min-p, penalties) are
 * checked against numbers worked out by hand in the comments. Random logits are checked
 * against ref_probs(), a plain twin that sorts everything in double precision. Distributions
 * are checked by drawing DRAWS times and comparing every token's count with its expected
 * count (see DRAW_SIGMAS), plus a chi-square total (see CHI2_SIGMAS). */
#include <float.h>
#include <stdint.h>

#include "plume.h"
#include "t.h"

#define DRAWS 100000 /* draws per distribution test: ~25 such tests stay well under 2 s */
/* A token's count is Binomial(DRAWS, p): its standard deviation is sqrt(DRAWS p (1-p)) <= 158.
 * A correct sampler lands farther than 5 sigma from DRAWS p with probability 5.7e-7 per token
 * (normal tail); the seeds are fixed, so a pass is repeatable. A probability wrong by 0.01
 * shifts a count by 1000 = 6.3 sigma at worst, so such an error fails. */
#define DRAW_SIGMAS 5.0
/* Pearson's X^2 over k tokens has mean k-1 and standard deviation sqrt(2(k-1)); 6 of those
 * above the mean is far in the tail for a correct sampler. */
#define CHI2_SIGMAS 6.0
#define V_BIG 262144 /* Gemma 4's vocabulary */

/* ---- helpers ----------------------------------------------------------------------------- */

static uint64_t t_rng = 88172645463325252ull; /* state of t_uniform */

/* Uniform double in [0, 1) from xorshift64*, independent of the library's generator. */
static double t_uniform(void) {
    t_rng ^= t_rng >> 12;
    t_rng ^= t_rng << 25;
    t_rng ^= t_rng >> 27;
    return (double)((t_rng * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

/* Parameters with every filter off: plain softmax sampling at temperature 1. */
static plume_sampler_params plain(void) {
    plume_sampler_params p = plume_sampler_default_params();
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

/* A sampler or a failed check. */
static plume_sampler *make(const plume_sampler_params *p, int32_t n_vocab) {
    plume_sampler *s = NULL;
    char *err = NULL;
    int rc = plume_sampler_new(&s, p, n_vocab, &err);
    CHECK(rc == 0 && s, "plume_sampler_new: %d %s", rc, err ? err : "");
    free(err);
    return s;
}

/* Draw n ids into counts[V] (zeroed first); ids outside [0, V) fail the test. */
static void draw_counts(plume_sampler *s, const float *logits, int32_t V, int n, int *counts) {
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int32_t id = plume_sampler_sample(s, logits);
        if (id < 0 || id >= V) {
            CHECK(0, "draw %d returned %d", i, id);
            return;
        }
        counts[id]++;
    }
}

/* Counts from n draws agree with probabilities want[V]: tokens with p = 0 never drawn, every
 * other within DRAW_SIGMAS, and the chi-square total within CHI2_SIGMAS. */
static void check_counts(const int *counts, const double *want, int32_t V, int n,
                         const char *what) {
    double chi2 = 0;
    int k = 0;
    for (int32_t i = 0; i < V; i++) {
        double e = n * want[i];
        if (want[i] == 0) {
            CHECK(counts[i] == 0, "%s: id %d has p = 0 but was drawn %d times", what, i, counts[i]);
            continue;
        }
        double sd = sqrt(e * (1 - want[i]));
        CHECK(fabs(counts[i] - e) <= DRAW_SIGMAS * sd + 1,
              "%s: id %d drawn %d times, expected %.1f (p %.5f, sd %.1f)", what, i, counts[i], e,
              want[i], sd);
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        k++;
    }
    if (k > 1) {
        double df = k - 1;
        CHECK(chi2 <= df + CHI2_SIGMAS * sqrt(2 * df), "%s: chi2 %.1f with %d dof", what, chi2,
              k - 1);
    }
}

/* A logit with its id, for the twin's sort. */
typedef struct {
    double l;
    int32_t id;
} ref_item;

/* Rank order: higher logit first, then lower id. */
static int ref_cmp(const void *a, const void *b) {
    const ref_item *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Naive twin of the non-greedy chain on already-penalized logits: sort everything, keep top_k,
 * softmax at T in double, keep the shortest prefix with mass >= top_p, drop p < min_p * p_max,
 * renormalize. want[V] receives the probabilities. */
static void ref_probs(const float *logits, int32_t V, const plume_sampler_params *p,
                      double *want) {
    ref_item *it = malloc((size_t)V * sizeof *it);
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        want[i] = 0;
        if (logits[i] > -INFINITY) it[n++] = (ref_item){logits[i], i};
    }
    qsort(it, (size_t)n, sizeof *it, ref_cmp);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp((it[i].l - it[0].l) / p->temperature);
    int32_t keep = n;
    if (p->top_p < 1) {
        double cum = 0;
        for (keep = 0; keep < n;) {
            cum += exp((it[keep].l - it[0].l) / p->temperature);
            keep++;
            if (cum >= p->top_p * z) break;
        }
    }
    double zk = 0;
    for (int32_t i = 0; i < keep; i++) {
        double w = exp((it[i].l - it[0].l) / p->temperature);
        if (p->min_p > 0 && w < p->min_p) continue;
        want[it[i].id] = w;
        zk += w;
    }
    for (int32_t i = 0; i < V; i++) want[i] /= zk;
    free(it);
}

/* Draw DRAWS times with p and compare with the twin. */
static void check_against_twin(const plume_sampler_params *p, const float *logits, int32_t V,
                               const char *what) {
    double *want = malloc((size_t)V * sizeof *want);
    int *counts = malloc((size_t)V * sizeof *counts);
    ref_probs(logits, V, p, want);
    plume_sampler *s = make(p, V);
    if (s) {
        draw_counts(s, logits, V, DRAWS, counts);
        check_counts(counts, want, V, DRAWS, what);
    }
    plume_sampler_free(s);
    free(want);
    free(counts);
}

/* ---- parameters -------------------------------------------------------------------------- */

/* The defaults are Gemma 4's generation_config with penalties off. */
static void test_default_params(void) {
    plume_sampler_params p = plume_sampler_default_params();
    CHECK(p.temperature == 1.0f && p.top_k == 64 && p.top_p == 0.95f && p.min_p == 0.0f,
          "temperature %g top_k %d top_p %g min_p %g", (double)p.temperature, p.top_k,
          (double)p.top_p, (double)p.min_p);
    CHECK(p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.presence_penalty == 0.0f &&
              p.frequency_penalty == 0.0f && p.seed == 0,
          "penalties");
}

/* Nonsense parameters are refused with a message; NULL parameters mean the defaults. */
static void test_bad_params(void) {
    plume_sampler_params bad[6];
    for (int i = 0; i < 6; i++) bad[i] = plume_sampler_default_params();
    bad[0].temperature = NAN;
    bad[1].top_p = NAN;
    bad[2].repeat_penalty = 0.0f;
    bad[3].repeat_last_n = -2;
    bad[4].presence_penalty = INFINITY;
    bad[5].min_p = NAN;
    for (int i = 0; i < 6; i++) {
        plume_sampler *s = (plume_sampler *)&bad[i];
        char *err = NULL;
        CHECK(plume_sampler_new(&s, &bad[i], 10, &err) == PLUME_EINVAL && !s && err,
              "case %d accepted", i);
        free(err);
    }
    plume_sampler *s = NULL;
    CHECK(plume_sampler_new(&s, NULL, 0, NULL) == PLUME_EINVAL, "n_vocab 0 accepted");
    CHECK(plume_sampler_new(NULL, NULL, 10, NULL) == PLUME_EINVAL, "NULL out accepted");
    CHECK(plume_sampler_new(&s, NULL, 10, NULL) == 0 && s, "NULL params refused");
    CHECK(plume_sampler_sample(s, NULL) == PLUME_EINVAL, "NULL logits");
    CHECK(plume_sampler_sample(NULL, (const float[10]){0}) == PLUME_EINVAL, "NULL sampler");
    plume_sampler_free(s);
    plume_sampler_free(NULL);
}

/* ---- greedy ------------------------------------------------------------------------------ */

/* temperature <= 0 is argmax: lowest id on ties, NaN never chosen, all -inf is an error. */
static void test_greedy(void) {
    plume_sampler_params p = plume_sampler_default_params();
    p.temperature = 0.0f;
    plume_sampler *s = make(&p, 6);
    if (!s) return;
    float a[6] = {0.5f, -2.0f, 3.0f, 2.9f, -10.0f, 1.0f};
    CHECK(plume_sampler_sample(s, a) == 2, "argmax");
    float ties[6] = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f, 0.0f};
    for (int i = 0; i < 5; i++) CHECK(plume_sampler_sample(s, ties) == 1, "tie not lowest id");
    float nan[6] = {NAN, 1.0f, NAN, 2.0f, NAN, -1.0f};
    CHECK(plume_sampler_sample(s, nan) == 3, "NaN chosen");
    float one[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -50.0f};
    CHECK(plume_sampler_sample(s, one) == 5, "the only finite logit");
    float none[6] = {-INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(plume_sampler_sample(s, none) == PLUME_EINVAL, "nothing usable");
    plume_sampler_free(s);

    p.temperature = -1.0f; /* negative is greedy too, and the seed does not matter */
    p.seed = 99;
    s = make(&p, 6);
    if (s) CHECK(plume_sampler_sample(s, a) == 2, "negative temperature");
    plume_sampler_free(s);
}

/* ---- temperature and the filters, hand-computed ----------------------------------------- */

/* Logits 0, ln 2, ln 4: p = 1/7, 2/7, 4/7 at T = 1; (1, 4, 16)/21 at T = 0.5; (1, sqrt 2,
 * 2)/(3 + sqrt 2) at T = 2. */
static void test_temperature(void) {
    float l[3] = {0.0f, logf(2.0f), logf(4.0f)};
    double r2 = sqrt(2.0);
    struct {
        float t;
        double want[3];
    } cases[] = {
        {1.0f, {1 / 7.0, 2 / 7.0, 4 / 7.0}},
        {0.5f, {1 / 21.0, 4 / 21.0, 16 / 21.0}},
        {2.0f, {1 / (3 + r2), r2 / (3 + r2), 2 / (3 + r2)}},
    };
    int counts[3];
    for (int c = 0; c < 3; c++) {
        plume_sampler_params p = plain();
        p.temperature = cases[c].t;
        plume_sampler *s = make(&p, 3);
        if (!s) return;
        char what[32];
        snprintf(what, sizeof what, "T=%g", (double)cases[c].t);
        draw_counts(s, l, 3, DRAWS, counts);
        check_counts(counts, cases[c].want, 3, DRAWS, what);
        plume_sampler_free(s);
    }
}

/* Logits 5..0: top-k 3 keeps ids 0-2 with p proportional to e^5, e^4, e^3; top-k 1 is argmax;
 * equal logits keep the lowest ids. */
static void test_top_k(void) {
    float l[6] = {5, 4, 3, 2, 1, 0};
    double e = exp(1.0), z = 1 + 1 / e + 1 / (e * e);
    double want[6] = {1 / z, 1 / (e * z), 1 / (e * e * z), 0, 0, 0};
    plume_sampler_params p = plain();
    p.top_k = 3;
    plume_sampler *s = make(&p, 6);
    int counts[6];
    if (s) {
        draw_counts(s, l, 6, DRAWS, counts);
        check_counts(counts, want, 6, DRAWS, "top-k 3");
    }
    plume_sampler_free(s);

    p.top_k = 1;
    p.temperature = 5.0f;
    s = make(&p, 6);
    float shuffled[6] = {1, 4, 5, 0, 5, 2};
    for (int i = 0; s && i < 200; i++) CHECK(plume_sampler_sample(s, shuffled) == 2, "top-k 1");
    plume_sampler_free(s);

    /* Forty equal logits, top-k 10: exactly ids 0-9, uniformly. */
    float flat[40];
    double wflat[40];
    for (int i = 0; i < 40; i++) {
        flat[i] = 1.5f;
        wflat[i] = i < 10 ? 0.1 : 0;
    }
    p.top_k = 10;
    p.temperature = 1.0f;
    s = make(&p, 40);
    int cflat[40];
    if (s) {
        draw_counts(s, flat, 40, DRAWS, cflat);
        check_counts(cflat, wflat, 40, DRAWS, "top-k ties");
    }
    plume_sampler_free(s);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 (logits are their logs): top-p 0.9 keeps three
 * (0.8 < 0.9 <= 0.95), top-p 0.75 keeps two, top-p 0.4 and 0 keep one. */
static void test_top_p(void) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        float top_p;
        double want[4];
    } cases[] = {
        {0.9f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0.75f, {0.5 / 0.8, 0.3 / 0.8, 0, 0}},
        {0.4f, {1, 0, 0, 0}},
        {0.0f, {1, 0, 0, 0}},
    };
    int counts[4];
    for (int c = 0; c < 4; c++) {
        plume_sampler_params p = plain();
        p.top_p = cases[c].top_p;
        plume_sampler *s = make(&p, 4);
        if (!s) return;
        char what[32];
        snprintf(what, sizeof what, "top-p %g", (double)cases[c].top_p);
        draw_counts(s, l, 4, DRAWS, counts);
        check_counts(counts, cases[c].want, 4, DRAWS, what);
        plume_sampler_free(s);
    }
}

/* The same four: min-p 0.25 drops p < 0.125 (the 0.05), min-p 0.35 drops p < 0.175; min-p
 * above 1 still keeps the most likely token; min-p 1 keeps every token tied with it. */
static void test_min_p(void) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        float min_p;
        double want[4];
    } cases[] = {
        {0.25f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0.35f, {0.5 / 0.8, 0.3 / 0.8, 0, 0}},
        {1.5f, {1, 0, 0, 0}},
    };
    int counts[4];
    for (int c = 0; c < 3; c++) {
        plume_sampler_params p = plain();
        p.min_p = cases[c].min_p;
        plume_sampler *s = make(&p, 4);
        if (!s) return;
        char what[32];
        snprintf(what, sizeof what, "min-p %g", (double)cases[c].min_p);
        draw_counts(s, l, 4, DRAWS, counts);
        check_counts(counts, cases[c].want, 4, DRAWS, what);
        plume_sampler_free(s);
    }
    float tied[4] = {2.0f, -1.0f, 2.0f, 1.999f};
    double want[4] = {0.5, 0, 0.5, 0};
    plume_sampler_params p = plain();
    p.min_p = 1.0f;
    plume_sampler *s = make(&p, 4);
    if (s) {
        draw_counts(s, tied, 4, DRAWS, counts);
        check_counts(counts, want, 4, DRAWS, "min-p 1, tied maximum");
    }
    plume_sampler_free(s);
}

/* Filters in order: temperature 0.5 squares the probabilities (0.25, 0.09, 0.0225, 0.0025,
 * z = 0.365) before top-p 0.9 sees them, so top-p keeps two (0.25/0.365 = 0.685 < 0.9 <=
 * 0.932). Applying top-p before temperature would keep three. */
static void test_temperature_before_top_p(void) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    double want[4] = {0.25 / 0.34, 0.09 / 0.34, 0, 0};
    plume_sampler_params p = plain();
    p.temperature = 0.5f;
    p.top_p = 0.9f;
    plume_sampler *s = make(&p, 4);
    int counts[4];
    if (s) {
        draw_counts(s, l, 4, DRAWS, counts);
        check_counts(counts, want, 4, DRAWS, "T 0.5 then top-p 0.9");
    }
    plume_sampler_free(s);
}

/* ---- penalties --------------------------------------------------------------------------- */

/* Greedy picks that flip exactly when a penalty applies. */
static void test_repeat_penalty(void) {
    plume_sampler_params p = plume_sampler_default_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 1.1f;
    plume_sampler *s = make(&p, 4);
    if (!s) return;
    float pos[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK(plume_sampler_sample(s, pos) == 0, "no history yet");
    plume_sampler_accept(s, 0); /* 2.0 / 1.1 = 1.818 < 1.9 */
    CHECK(plume_sampler_sample(s, pos) == 1, "positive logit not divided");
    float neg[4] = {-1.0f, -1.05f, -5.0f, -6.0f};
    CHECK(plume_sampler_sample(s, neg) == 1, "negative logit not multiplied"); /* -1.1 */
    float untouched[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK(!memcmp(pos, untouched, sizeof pos), "logits were modified");
    plume_sampler_accept(s, -3); /* out of range: ignored */
    plume_sampler_accept(s, 4);
    plume_sampler_reset(s);
    CHECK(plume_sampler_sample(s, pos) == 0, "reset kept the history");
    plume_sampler_free(s);
}

/* Presence is subtracted once, frequency once per occurrence (logits 1.0 vs 0.6). */
static void test_presence_frequency(void) {
    float l[3] = {1.0f, 0.6f, -3.0f};
    plume_sampler_params p = plume_sampler_default_params();
    p.temperature = 0.0f;
    p.presence_penalty = 0.3f;
    plume_sampler *s = make(&p, 3);
    if (!s) return;
    for (int i = 0; i < 3; i++) plume_sampler_accept(s, 0);
    CHECK(plume_sampler_sample(s, l) == 0, "presence counted per occurrence"); /* 0.7 */
    plume_sampler_free(s);

    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.15f;
    s = make(&p, 3);
    if (!s) return;
    plume_sampler_accept(s, 0);
    plume_sampler_accept(s, 0);
    CHECK(plume_sampler_sample(s, l) == 0, "two occurrences: 0.7 > 0.6");
    plume_sampler_accept(s, 0);
    CHECK(plume_sampler_sample(s, l) == 1, "three occurrences: 0.55 < 0.6");
    plume_sampler_free(s);

    /* Exact effect on probabilities: logits 0, 0 with presence 1 on id 0 gives
     * p0 = e^-1 / (1 + e^-1) = 1 / (1 + e). */
    p = plain();
    p.presence_penalty = 1.0f;
    s = make(&p, 2);
    if (!s) return;
    plume_sampler_accept(s, 0);
    float z[2] = {0, 0};
    double e = exp(1.0), want[2] = {1 / (1 + e), e / (1 + e)};
    int counts[2];
    draw_counts(s, z, 2, DRAWS, counts);
    check_counts(counts, want, 2, DRAWS, "presence 1");
    plume_sampler_free(s);
}

/* The window: repeat_last_n 2 forgets older ids, 0 turns penalties off, -1 sees everything. */
static void test_penalty_window(void) {
    float l[4] = {2.0f, 1.9f, 0.0f, 0.0f};
    plume_sampler_params p = plume_sampler_default_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    plume_sampler *s = make(&p, 4);
    if (!s) return;
    plume_sampler_accept(s, 0);
    plume_sampler_accept(s, 2);
    CHECK(plume_sampler_sample(s, l) == 1, "id 0 still in the window");
    plume_sampler_accept(s, 3); /* 0 leaves */
    CHECK(plume_sampler_sample(s, l) == 0, "id 0 left the window");
    plume_sampler_accept(s, 0);
    plume_sampler_accept(s, 0); /* window {0, 0} */
    CHECK(plume_sampler_sample(s, l) == 1, "id 0 back in the window");
    plume_sampler_free(s);

    p.repeat_last_n = 0;
    s = make(&p, 4);
    if (!s) return;
    plume_sampler_accept(s, 0);
    CHECK(plume_sampler_sample(s, l) == 0, "repeat_last_n 0 penalized");
    plume_sampler_free(s);

    p.repeat_last_n = -1;
    s = make(&p, 4);
    if (!s) return;
    plume_sampler_accept(s, 0);
    for (int i = 0; i < 1000; i++) plume_sampler_accept(s, 2 + i % 2);
    CHECK(plume_sampler_sample(s, l) == 1, "repeat_last_n -1 forgot");
    plume_sampler_free(s);
}

/* ---- the generator ----------------------------------------------------------------------- */

/* Fill out[n] with draws over 100 random logits. */
static void sequence(plume_sampler *s, const float *l, int32_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = plume_sampler_sample(s, l);
}

/* Same seed, same ids (also after reset); different seeds, different ids. */
static void test_seeds(void) {
    float l[100];
    for (int i = 0; i < 100; i++) l[i] = (float)(3 * t_uniform());
    plume_sampler_params p = plume_sampler_default_params();
    p.seed = 42;
    plume_sampler *a = make(&p, 100), *b = make(&p, 100);
    p.seed = 43;
    plume_sampler *c = make(&p, 100);
    if (!a || !b || !c) goto done;
    int32_t sa[500], sb[500], sc[500], sr[500];
    sequence(a, l, sa, 500);
    sequence(b, l, sb, 500);
    sequence(c, l, sc, 500);
    plume_sampler_reset(a);
    sequence(a, l, sr, 500);
    CHECK(!memcmp(sa, sb, sizeof sa), "same seed, different ids");
    CHECK(!memcmp(sa, sr, sizeof sa), "reset did not restart the sequence");
    int differ = 0;
    for (int i = 0; i < 500; i++) differ += sa[i] != sc[i];
    /* 100 near-uniform tokens: two independent draws agree with probability < 0.05. */
    CHECK(differ > 400, "seeds 42 and 43 differ at only %d of 500 draws", differ);
done:
    plume_sampler_free(a);
    plume_sampler_free(b);
    plume_sampler_free(c);
}

/* ---- random logits against the twin ----------------------------------------------------- */

/* 64 random logits through several chains, heap path (top-k <= 1024) and quickselect path
 * (top-k off), with and without penalties. */
static void test_random_chains(void) {
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = (float)(6 * t_uniform() - 3);
    l[17] = l[40]; /* a tie */
    struct {
        float t;
        int32_t k;
        float top_p, min_p;
    } cases[] = {
        {0.8f, 0, 1.0f, 0.0f},   /* plain softmax over all 64 */
        {1.0f, 40, 0.9f, 0.05f}, /* heap top-k, then top-p and min-p */
        {0.7f, 0, 0.9f, 0.0f},   /* top-p by weighted quickselect */
        {1.3f, 0, 0.6f, 0.1f},
        {1.0f, 64, 0.95f, 0.0f}, /* top-k = V is off */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        plume_sampler_params p = plain();
        p.temperature = cases[c].t;
        p.top_k = cases[c].k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.seed = 1000 + c;
        char what[64];
        snprintf(what, sizeof what, "T %g k %d p %g min %g", (double)p.temperature, p.top_k,
                 (double)p.top_p, (double)p.min_p);
        check_against_twin(&p, l, 64, what);
    }

    /* Penalties change the logits the twin sees: ids 3 (x2) and 10 in the history. */
    plume_sampler_params p = plain();
    p.top_p = 0.9f;
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.2f;
    p.frequency_penalty = 0.1f;
    float pen[64];
    memcpy(pen, l, sizeof pen);
    pen[3] = (pen[3] <= 0 ? pen[3] * 1.3f : pen[3] / 1.3f) - (2 * 0.1f + 0.2f);
    pen[10] = (pen[10] <= 0 ? pen[10] * 1.3f : pen[10] / 1.3f) - (0.1f + 0.2f);
    double want[64];
    ref_probs(pen, 64, &p, want);
    int counts[64];
    for (int heap = 0; heap < 2; heap++) {
        /* top-k 50 takes the heap path: the penalized ids are re-scored after the pass */
        p.top_k = heap ? 50 : 0;
        ref_probs(pen, 64, &p, want);
        plume_sampler *s = make(&p, 64);
        if (s) {
            plume_sampler_accept(s, 3);
            plume_sampler_accept(s, 10);
            plume_sampler_accept(s, 3);
            draw_counts(s, l, 64, DRAWS, counts);
            check_counts(counts, want, 64, DRAWS, heap ? "penalties, heap top-k" : "penalties");
        }
        plume_sampler_free(s);
    }
}

/* Penalties that push the raw top k out of the heap path's reach: logits 0..-(V-1) by id,
 * the best 30 penalized far down, top-k 20 must keep ids 30-49; and with more distinct ids in
 * the window than the heap takes (1100 > 1024), greedy falls back to the full path. */
static void test_penalties_reorder(void) {
    enum { V = 2000 };
    float *l = malloc(V * sizeof *l);
    double *want = malloc(V * sizeof *want);
    int *counts = malloc(V * sizeof *counts);
    for (int i = 0; i < V; i++) l[i] = -0.05f * (float)i;
    plume_sampler_params p = plain();
    p.top_k = 20;
    p.presence_penalty = 100.0f;
    plume_sampler *s = make(&p, V);
    if (s) {
        for (int i = 0; i < 30; i++) plume_sampler_accept(s, i);
        float *pen = malloc(V * sizeof *pen);
        memcpy(pen, l, V * sizeof *pen);
        for (int i = 0; i < 30; i++) pen[i] -= 100.0f;
        ref_probs(pen, V, &p, want);
        for (int i = 0; i < V; i++) CHECK((want[i] > 0) == (i >= 30 && i < 50), "twin id %d", i);
        draw_counts(s, l, V, DRAWS, counts);
        check_counts(counts, want, V, DRAWS, "penalized top-k");
        free(pen);
    }
    plume_sampler_free(s);

    p = plume_sampler_default_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 1000.0f;
    p.repeat_last_n = -1;
    s = make(&p, V);
    if (s) {
        for (int i = 0; i < V; i++) l[i] = i < 1500 ? 1.0f + 0.001f * (float)i : 0.0f;
        for (int i = 1499; i > 1499 - 1100; i--) plume_sampler_accept(s, i); /* 400-1499 */
        /* Unpenalized: ids 0-399 (up to 1.399) and 1500-1999 (0); the penalized 400-1499
         * (up to 1.499 raw) drop near 0. */
        CHECK(plume_sampler_sample(s, l) == 399, "greedy over 1100 penalized ids gave %d",
              plume_sampler_sample(s, l));
        l[1999] = l[399]; /* a tie: the lower id wins */
        CHECK(plume_sampler_sample(s, l) == 399, "tie gave %d", plume_sampler_sample(s, l));
    }
    plume_sampler_free(s);
    free(l);
    free(want);
    free(counts);
}

/* Equal logits through quickselect top-p: 64 weights of 1, top-p 0.5 keeps exactly 32, the
 * lowest ids. */
static void test_top_p_ties(void) {
    float l[64];
    double want[64];
    for (int i = 0; i < 64; i++) {
        l[i] = 0.25f;
        want[i] = i < 32 ? 1 / 32.0 : 0;
    }
    plume_sampler_params p = plain();
    p.top_p = 0.5f;
    plume_sampler *s = make(&p, 64);
    int counts[64];
    if (s) {
        draw_counts(s, l, 64, DRAWS, counts);
        check_counts(counts, want, 64, DRAWS, "top-p ties");
    }
    plume_sampler_free(s);
}

/* A heavy token (w 1) and 63 light ones (w 0.02 each, z = 2.26): top-p 0.5 needs the heavy
 * one (0.442 of the mass) plus the 7 lowest-id light ones. The light tail holds more than
 * half of the mass outside the nucleus, so it must survive the pre-select pruning. */
static void test_top_p_light_tail(void) {
    float l[64];
    l[0] = 0.0f;
    for (int i = 1; i < 64; i++) l[i] = logf(0.02f);
    double want[64];
    for (int i = 0; i < 64; i++) want[i] = i == 0 ? 1 / 1.14 : i < 8 ? 0.02 / 1.14 : 0;
    plume_sampler_params p = plain();
    p.top_p = 0.5f;
    plume_sampler *s = make(&p, 64);
    int counts[64];
    if (s) {
        draw_counts(s, l, 64, DRAWS, counts);
        check_counts(counts, want, 64, DRAWS, "top-p light tail");
    }
    plume_sampler_free(s);
}

/* Top-k above the heap limit (quickselect by rank): 3000 distinct logits, top-k 1500 at a huge
 * temperature (near uniform over the kept ones): every draw is in the twin's top 1500, and both
 * halves of the kept set are reached. */
static void test_large_top_k(void) {
    enum { V = 3000, K = 1500, N = 3000 };
    float *l = malloc(V * sizeof *l);
    double *want = malloc(V * sizeof *want);
    for (int i = 0; i < V; i++) l[i] = (float)(10 * t_uniform());
    plume_sampler_params p = plain();
    p.top_k = K;
    p.temperature = 1e6f;
    ref_probs(l, V, &p, want);
    plume_sampler *s = make(&p, V);
    int outside = 0, low = 0, kept = 0;
    for (int i = 0; i < V; i++) kept += want[i] > 0;
    CHECK(kept == K, "twin kept %d", kept);
    double median = 0;
    for (int i = 0; i < V; i++) /* the logit of rank K/2 splits the kept set */
        if (want[i] > 0) {
            int above = 0;
            for (int j = 0; j < V; j++) above += want[j] > 0 && l[j] > l[i];
            if (above == K / 2) median = l[i];
        }
    for (int i = 0; s && i < N; i++) {
        int32_t id = plume_sampler_sample(s, l);
        if (id < 0 || id >= V || want[id] == 0) outside++;
        else low += l[id] < median;
    }
    CHECK(outside == 0, "%d of %d draws outside the top %d", outside, N, K);
    /* Half the kept mass is below the median: Binomial(3000, 0.5) has sd 27. */
    CHECK(abs(low - N / 2) < 200, "%d of %d draws below the median", low, N);
    plume_sampler_free(s);
    free(l);
    free(want);
}

/* Gemma's vocabulary size: the default chain (heap top-k 64, top-p 0.95) and a full-vocabulary
 * top-p only draw ids the twin keeps. The second case hides a 3-token nucleus (p = 0.5, 0.3,
 * 0.15 of the mass, top-p 0.9) at random places among 262141 low logits, which together hold
 * the other 0.05, so top-p must cut inside the vocabulary, not at its end. */
static void test_big_vocab(void) {
    float *l = malloc(V_BIG * sizeof *l);
    double *want = malloc(V_BIG * sizeof *want);
    for (int i = 0; i < V_BIG; i++) l[i] = (float)(30 * tanh((4 * t_uniform() - 2)));
    plume_sampler_params p = plume_sampler_default_params();
    p.seed = 7;
    ref_probs(l, V_BIG, &p, want);
    plume_sampler *s = make(&p, V_BIG);
    int outside = 0, distinct = 0;
    int *seen = calloc(V_BIG, sizeof *seen);
    for (int i = 0; s && i < 300; i++) {
        int32_t id = plume_sampler_sample(s, l);
        if (id < 0 || id >= V_BIG || want[id] == 0) outside++;
        else distinct += !seen[id]++;
    }
    CHECK(outside == 0, "default chain: %d draws outside the twin's set", outside);
    CHECK(distinct > 1, "default chain drew only %d distinct ids", distinct);
    plume_sampler_free(s);

    /* The low logits: 262141 * e^x = 0.05 relative to the nucleus mass 0.95 at T = 1. */
    float low = (float)log(0.05 / 0.95 / (V_BIG - 3));
    for (int i = 0; i < V_BIG; i++) l[i] = low;
    int32_t at[3] = {200003, 17, 131071};
    l[at[0]] = logf(0.5f / 0.95f);
    l[at[1]] = logf(0.3f / 0.95f);
    l[at[2]] = logf(0.15f / 0.95f);
    p = plain();
    p.top_p = 0.9f;
    s = make(&p, V_BIG);
    int hits[3] = {0, 0, 0};
    outside = 0;
    for (int i = 0; s && i < 60; i++) {
        int32_t id = plume_sampler_sample(s, l);
        int k = id == at[0] ? 0 : id == at[1] ? 1 : id == at[2] ? 2 : -1;
        if (k < 0) outside++;
        else hits[k]++;
    }
    CHECK(outside == 0, "full-vocabulary top-p: %d draws outside the nucleus", outside);
    /* Each nucleus token has p >= 0.15 / 0.95: one of them absent from 60 draws has
     * probability < 3 * 0.85^60 = 1e-4 (and the seed is fixed). */
    CHECK(hits[0] && hits[1] && hits[2], "nucleus draws %d %d %d", hits[0], hits[1], hits[2]);
    plume_sampler_free(s);
    free(seen);
    free(l);
    free(want);
}

/* ---- logit bias ------------------------------------------------------------------------- */

/* A biased sampler draws from the twin's distribution of logits + bias, on the heap path
 * (top-k 20) and the full path (top-k off, top-p), with penalties on ids both biased and not;
 * greedy follows a ban and a boost; duplicates sum; bad maps are refused; 0 clears it. */
static void test_logit_bias(void) {
    enum { V = 500 };
    float *l = malloc(V * sizeof *l), *lb = malloc(V * sizeof *lb);
    double *want = malloc(V * sizeof *want);
    int *counts = malloc(V * sizeof *counts);
    for (int i = 0; i < V; i++) l[i] = (float)(4 * t_uniform() - 2);
    int32_t ids[] = {3, 77, 250, 499, 10, 3};
    float bias[] = {2.5f, -1.0f, 4.0f, -INFINITY, 1.5f, 0.5f}; /* id 3 twice: +3 */
    struct { int32_t k; float top_p; float presence; } chains[] = {{20, 1.0f, 0}, {0, 0.9f, 0}, {20, 1.0f, 1.5f}, {0, 1.0f, 1.5f}};
    for (size_t c = 0; c < sizeof chains / sizeof *chains; c++) {
        plume_sampler_params p = plain();
        p.top_k = chains[c].k;
        p.top_p = chains[c].top_p;
        p.presence_penalty = chains[c].presence;
        p.seed = 100 + c;
        plume_sampler *s = make(&p, V);
        char *err = NULL;
        CHECK(s && plume_sampler_set_bias(s, ids, bias, 6, &err) == 0, "set_bias: %s", err ? err : "");
        free(err);
        if (!s) continue;
        memcpy(lb, l, V * sizeof *lb);
        for (int i = 0; i < 6; i++) lb[ids[i]] += bias[i];
        if (chains[c].presence != 0) { /* the twin sees the penalty on the biased logit */
            int32_t seen[] = {3, 10, 11, 12};
            for (int i = 0; i < 4; i++) {
                plume_sampler_accept(s, seen[i]);
                lb[seen[i]] -= chains[c].presence;
            }
        }
        p.presence_penalty = 0;
        ref_probs(lb, V, &p, want);
        CHECK(want[499] == 0 && want[3] > 0, "chain %zu: twin", c);
        draw_counts(s, l, V, DRAWS, counts);
        char what[64];
        snprintf(what, sizeof what, "bias chain %zu", c);
        check_counts(counts, want, V, DRAWS, what);
        plume_sampler_free(s);
    }
    /* Greedy: the argmax banned gives the runner-up; a boost makes an id the argmax. */
    plume_sampler_params g = plume_sampler_default_params();
    g.temperature = 0;
    plume_sampler *s = make(&g, V);
    if (s) {
        int32_t top = plume_sampler_sample(s, l), second = -1;
        for (int i = 0; i < V; i++)
            if (i != top && (second < 0 || l[i] > l[second])) second = i;
        float ban = -INFINITY, boost = 100.0f;
        CHECK(plume_sampler_set_bias(s, &top, &ban, 1, NULL) == 0 && plume_sampler_sample(s, l) == second,
              "banned argmax %d still drawn", top);
        int32_t low = 0;
        for (int i = 0; i < V; i++) low = l[i] < l[low] ? i : low;
        CHECK(plume_sampler_set_bias(s, &low, &boost, 1, NULL) == 0 && plume_sampler_sample(s, l) == low,
              "boosted id %d not drawn", low);
        CHECK(plume_sampler_set_bias(s, NULL, NULL, 0, NULL) == 0 && plume_sampler_sample(s, l) == top, "clear");
        int32_t bad_id = V;
        float nan_b = NAN, inf_b = INFINITY, one = 1;
        char *err = NULL;
        CHECK(plume_sampler_set_bias(s, &bad_id, &one, 1, &err) == PLUME_EINVAL && err, "id outside the vocabulary");
        free(err);
        CHECK(plume_sampler_set_bias(s, &top, &nan_b, 1, NULL) == PLUME_EINVAL, "NaN bias");
        CHECK(plume_sampler_set_bias(s, &top, &inf_b, 1, NULL) == PLUME_EINVAL, "+inf bias");
        CHECK(plume_sampler_sample(s, l) == top, "a refused map changed the sampler");
    }
    plume_sampler_free(s);
    free(l);
    free(lb);
    free(want);
    free(counts);
}

/* Every test, one PASS/FAIL line each. */
int main(void) {
    RUN(test_default_params);
    RUN(test_bad_params);
    RUN(test_greedy);
    RUN(test_temperature);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_min_p);
    RUN(test_temperature_before_top_p);
    RUN(test_repeat_penalty);
    RUN(test_presence_frequency);
    RUN(test_penalty_window);
    RUN(test_seeds);
    RUN(test_random_chains);
    RUN(test_penalties_reorder);
    RUN(test_top_p_ties);
    RUN(test_top_p_light_tail);
    RUN(test_large_top_k);
    RUN(test_big_vocab);
    RUN(test_logit_bias);
    return t_total_failed ? 1 : 0;
}
