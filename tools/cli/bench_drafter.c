/* bench_drafter.c -- `plume bench --drafter DIR --accept-rate 0.5,0.7,0.9`: what the MTP
 * drafter's speculative decoding gives (docs/SPECULATIVE.md). Random weights never accept a
 * draft, so the run measures the machinery: the real drafter drafts every round and the real
 * target verifies the pending token and the drafts in one step, but each guess is then
 * replaced by the target's own greedy continuation (recorded by a plain run first) with
 * probability a, else by a wrong token, so that each draft is accepted with probability a
 * given the ones before it. Decode tok/s of plain decoding and of each rate, in interleaved
 * rounds of one run (each round: plain, then every rate, in an order that rotates). On the
 * public API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"

/* Order doubles for qsort. */
static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n > 0 values and their range (sorts them). */
static void dsummary(double *v, int n, double *med, double *lo, double *hi) {
    qsort(v, (size_t)n, sizeof *v, dcmp);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *lo = v[0];
    *hi = v[n - 1];
}

/* The guess replacer: ref [n_ref] is the target's greedy continuation from position p0; a
 * guess becomes ref's token with probability rate (a hash of its position and the round),
 * else a token that is not. */
typedef struct {
    const int32_t *ref;
    int32_t p0, n_ref, V;
    double rate;
    uint64_t salt;
} forced;

/* plume_draft_fn over the drafter's guesses draft[0, max) after ctx[0, n). */
static int32_t forced_fn(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max) {
    (void)ctx;
    const forced *f = user;
    for (int32_t i = 0; i < max; i++) {
        int32_t at = n + i - f->p0;
        if (at < 0 || at >= f->n_ref) return i;
        uint64_t h = f->salt ^ ((uint64_t)(n + i) * 0x9E3779B97F4A7C15ull);
        double u = (double)(plume_rng_next(&h) >> 11) * 0x1.0p-53;
        draft[i] = u < f->rate ? f->ref[at] : (f->ref[at] + 1) % f->V;
    }
    return max;
}

/* Decode n tokens greedily after the prompt (s holds it but its last token), plain (sp NULL)
 * or speculative; the tokens into out (may be NULL); returns the decode seconds (from the
 * first token on), or < 0 on error (*err). */
static double decode_run(plume_session *s, plume_spec *sp, plume_sampler *smp, int32_t last, int32_t n, float *logits,
                         int32_t *out, char **err) {
    int32_t buf[64], have = 0;
    if (plume_session_feed(s, &last, 1, logits, 0, err)) return -1;
    plume_sampler_reset(smp);
    int32_t id = plume_sampler_sample(smp, logits);
    double t0 = plume_now();
    while (have < n) {
        if (out) out[have] = id;
        have++;
        if (have == n) break;
        if (!sp) {
            plume_sampler_accept(smp, id);
            if (plume_session_feed(s, &id, 1, logits, 0, err)) return -1;
            id = plume_sampler_sample(smp, logits);
            continue;
        }
        int32_t k = plume_spec_step(sp, s, smp, id, buf, n - have < 64 ? n - have : 64, err);
        if (k < 0) return -1;
        for (int32_t i = 0; i < k - 1 && have < n; i++) {
            if (out) out[have] = buf[i];
            have++;
        }
        id = buf[k - 1];
    }
    return plume_now() - t0;
}

int bench_drafter_costs(const bench_drafter_opts *o) {
    plume_model_params mp = plume_model_default_params();
    mp.isa = o->isa;
    mp.n_threads = o->threads;
    mp.exact = o->exact;
    plume_model *m = NULL;
    plume_drafter *d = NULL;
    plume_session *s = NULL;
    plume_sampler *smp = NULL;
    plume_spec *sp[8] = {0};
    char *err = NULL;
    plume_session_params ssp = plume_session_default_params();
    ssp.n_ctx = (int32_t)(o->n_prompt + o->n_gen + 80);
    plume_sampler_params gp = plume_sampler_default_params();
    gp.temperature = 0;
    int rc = plume_model_open(&m, o->model, &mp, &err);
    if (!rc) rc = plume_drafter_open(&d, m, o->drafter, &err);
    if (!rc) rc = plume_session_new(&s, m, &ssp, &err);
    if (!rc) rc = plume_sampler_new(&smp, &gp, plume_model_n_vocab(m), &err);
    if (rc) {
        plume_session_free(s), plume_drafter_free(d), plume_model_free(m);
        return cli_lib_error_free(err);
    }
    const int32_t V = plume_model_n_vocab(m), P = (int32_t)o->n_prompt, N = (int32_t)o->n_gen, R = (int32_t)o->reps;
    const int32_t nr = o->n_rates;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt), *ref = malloc((size_t)N * sizeof *ref);
    float *logits = malloc((size_t)V * sizeof *logits);
    double *t = malloc((size_t)(nr + 1) * (size_t)R * sizeof *t);
    forced fz[8];
    uint64_t rng = 4242;
    rc = prompt && ref && logits && t ? 0 : plume_fail(&err, PLUME_ENOMEM, "out of memory");
    for (int32_t i = 0; !rc && i < P; i++) prompt[i] = (int32_t)(plume_rng_next(&rng) % (uint64_t)V);
    if (!rc) rc = plume_session_feed(s, prompt, P - 1, NULL, 0, &err);
    if (!rc && decode_run(s, NULL, smp, prompt[P - 1], N, logits, ref, &err) < 0) rc = PLUME_EINVAL; /* warm-up, ref */
    for (int32_t j = 0; !rc && j < nr; j++) {
        plume_spec_params pp = plume_spec_default_params();
        pp.draft_max = o->draft;
        pp.adaptive = !o->fixed;
        pp.drafter = d;
        pp.lookup = 0; /* the drafter every round: its cost is what is measured */
        pp.draft_fn = forced_fn;
        fz[j] = (forced){ref, P, N, V, o->rates[j], 0};
        pp.draft_user = &fz[j];
        rc = plume_spec_new(&sp[j], m, &pp, &err);
    }
    for (int32_t r = 0; !rc && r < R; r++)
        for (int32_t q = 0; !rc && q <= nr; q++) {
            int32_t j = (q + r) % (nr + 1) - 1; /* -1: plain; the order rotates each round */
            if (j >= 0) fz[j].salt = 0x5EEDull * (uint64_t)(r + 1) + (uint64_t)j;
            if ((rc = plume_session_rewind(s, P - 1, &err))) break;
            double dt = decode_run(s, j >= 0 ? sp[j] : NULL, smp, prompt[P - 1], N, logits, NULL, &err);
            if (dt < 0) rc = PLUME_EINVAL;
            else t[(j + 1) * R + r] = (double)(N - 1) / dt;
        }
    /* the drafter alone: a round of o->draft steps at the end of the context, timed */
    double dms = 0;
    if (!rc) {
        int32_t dr[64];
        if ((rc = plume_session_rewind(s, P - 1, &err)) == 0 && (rc = plume_session_feed(s, &prompt[P - 1], 1, logits, 0, &err)) == 0) {
            double t0 = plume_now();
            for (int i = 0; i < 20 && rc >= 0; i++) rc = plume_drafter_draft(d, s, ref[0], o->draft, dr, NULL, &err);
            dms = (plume_now() - t0) * 1e3 / 20.0 / (o->draft > 0 ? o->draft : 1);
            rc = rc < 0 ? rc : 0;
        }
    }
    if (rc) {
        for (int32_t j = 0; j < nr; j++) plume_spec_free(sp[j]);
        free(prompt), free(ref), free(logits), free(t);
        plume_sampler_free(smp), plume_session_free(s), plume_drafter_free(d), plume_model_free(m);
        return err ? cli_lib_error_free(err) : cli_error("bench: the drafter run failed");
    }
    double pm, plo, phi;
    double *pv = t;
    double pcopy[128];
    memcpy(pcopy, pv, (size_t)R * sizeof *pv);
    dsummary(pcopy, R, &pm, &plo, &phi);
    if (o->json)
        printf("{\"mode\": \"plain\", \"decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f, \"drafter_step_ms\": %.3f}\n",
               pm, plo, phi, dms);
    else {
        printf("\n| MTP drafter, %d drafts a round (%s), %d rounds interleaved, -p %d -n %d | decode tok/s, median "
               "(min..max) | x plain, median (min..max) | accepted / drafted | tokens / target step |\n"
               "|---|---|---|---|---|\n| plain | %.2f (%.2f..%.2f) | 1.00 | | 1.00 |\n",
               o->draft, o->fixed ? "fixed" : "adaptive", R, P, N, pm, plo, phi);
    }
    for (int32_t j = 0; j < nr; j++) {
        double v[128], x[128], med, lo, hi, xm, xlo, xhi;
        for (int32_t r = 0; r < R; r++) v[r] = t[(j + 1) * R + r], x[r] = v[r] / t[r];
        dsummary(v, R, &med, &lo, &hi);
        dsummary(x, R, &xm, &xlo, &xhi);
        int64_t steps, drafted, accepted;
        plume_spec_stats(sp[j], &steps, &drafted, &accepted);
        double tps = steps ? (double)(accepted + steps) / (double)steps : 0;
        if (o->json)
            printf("{\"mode\": \"accept %.2f\", \"decode_tok_s\": %.2f, \"min\": %.2f, \"max\": %.2f, \"x_plain\": %.3f, "
                   "\"x_min\": %.3f, \"x_max\": %.3f, \"steps\": %lld, \"accepted\": %lld, \"drafted\": %lld, "
                   "\"tokens_per_step\": %.3f}\n",
                   o->rates[j], med, lo, hi, xm, xlo, xhi, (long long)steps, (long long)accepted, (long long)drafted, tps);
        else
            printf("| accept %.2f | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %lld / %lld (%.0f%%) | %.2f |\n", o->rates[j],
                   med, lo, hi, xm, xlo, xhi, (long long)accepted, (long long)drafted,
                   drafted ? 100.0 * (double)accepted / (double)drafted : 0.0, tps);
    }
    if (!o->json) printf("\ndrafter step: %.3f ms (a round of %d steps at position %d, the mean of 20 rounds)\n", dms, o->draft, P);
    for (int32_t j = 0; j < nr; j++) plume_spec_free(sp[j]);
    free(prompt), free(ref), free(logits), free(t);
    plume_sampler_free(smp), plume_session_free(s), plume_drafter_free(d), plume_model_free(m);
    return 0;
}
