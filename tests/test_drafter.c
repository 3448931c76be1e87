/* test_drafter.c -- Gemma 4's MTP drafter (drafter.c, docs/SPECULATIVE.md) against the
 * tiny-mtp-a goldens (tests/data/tiny-mtp-a, the drafters of the tiny-a target): the
 * converter's drafter bundles at every precision and the backbone check; one draft step fed
 * the goldens' own inputs and K/V (exact and _q8emb, the interior anchor); `plume draft`'s
 * step and chain logits and greedy speculative traces against the _q8emb goldens (plume's
 * target reads INT8 embedding sidecars); greedy decoding with the drafter identical to plain
 * decoding with guesses forced right at a chosen rate (accepted, partial and rejected rounds,
 * across the sliding window, after a rewind) on every weight type; the centroid head as HF
 * computes it. */
#include <cjson/cJSON.h>

#include "drafter.h"
#include "safetensors.h"
#include "t_tiny.h"

#define V 512
#define DB 64 /* the target's hidden size */

static char *tmp;
static char targets[4][600];    /* tiny-a bundles: f32, bf16, q8, q4 */
static char drafters[2][4][600]; /* hf/, hf_track/ at f32, bf16, q8, q4 */

/* ---- fixtures ------------------------------------------------------------------------------ */

/* Convert both drafter checkpoints at every precision. */
static void setup(void) {
    tmp = t_tmpdir("drafter");
    t_tiny_bundles("tiny-a", tmp, targets);
    const char *src[2] = {"hf", "hf_track"};
    char log[4096];
    for (int d = 0; d < 2; d++)
        for (int w = 0; w < 4; w++) {
            snprintf(drafters[d][w], 600, "%s/%s-%s", tmp, src[d], t_tiny_wnames[w]);
            if (t_sh(log, sizeof log, "%s/plume convert %s/tiny-mtp-a/%s %s --weights %s --quiet", t_build(), t_data(),
                     src[d], drafters[d][w], t_tiny_wnames[w]))
                printf("  setup: %s\n", log);
        }
}

/* An .npy of tiny-mtp-a as floats, its element count checked. */
static float *mtp_npy(const char *name, int64_t want) {
    char rel[300];
    snprintf(rel, sizeof rel, "tiny-mtp-a/%s", name);
    int64_t n = 0;
    float *f = t_npy_floats(rel, &n, NULL);
    CHECK(f && n == want, "%s: %lld elements, want %lld", name, (long long)n, (long long)want);
    return f && n == want ? f : (free(f), NULL);
}

/* A JSON file as a tree (NULL on error). */
static cJSON *read_json(const char *path) {
    char *text = NULL;
    cJSON *j = NULL;
    if (plume_read_file(path, &text, NULL, NULL) == 0) j = cJSON_Parse(text);
    free(text);
    return j;
}

/* The tiny-a target of weight type w (2 threads) and the tracking drafter at w: 0, or -1 (a
 * CHECK failed, both NULL). */
static int open_pair(int w, plume_model **m, plume_drafter **d) {
    *m = t_tiny_open(targets[w], NULL, 2, 0);
    *d = NULL;
    char *err = NULL;
    if (*m && !plume_drafter_open(d, *m, drafters[1][w], &err)) return 0;
    CHECK(0, "%s: %s", targets[w], err ? err : "");
    free(err);
    plume_model_free(*m);
    *m = NULL;
    return -1;
}

/* ---- the converter and the loader ---------------------------------------------------------- */

/* Every precision opens on the tiny-a target; a drafter for another backbone is refused,
 * naming the key; a target checkpoint is not a drafter. */
static void test_open(void) {
    plume_model *m = t_tiny_open(targets[0], NULL, 1, 1);
    CHECK(m, "target");
    if (!m) return;
    for (int d = 0; d < 2; d++)
        for (int w = 0; w < 4; w++) {
            plume_drafter *dr = NULL;
            char *err = NULL;
            int rc = plume_drafter_open(&dr, m, drafters[d][w], &err);
            CHECK(rc == 0, "open %s: %s", drafters[d][w], err ? err : "");
            free(err);
            plume_drafter_free(dr);
        }
    /* another backbone: the same files, backbone_hidden_size 128 */
    char bad[700], log[4096];
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    t_sh(log, sizeof log, "cp -r %s %s && sed -i 's/\"backbone_hidden_size\": 64/\"backbone_hidden_size\": 128/' %s/config.json",
         drafters[0][0], bad, bad);
    plume_drafter *dr = NULL;
    char *err = NULL;
    int rc = plume_drafter_open(&dr, m, bad, &err);
    CHECK(rc == PLUME_EFORMAT && err && strstr(err, "backbone_hidden_size") && strstr(err, "does not match"),
          "mismatch: rc %d, %s", rc, err ? err : "");
    free(err);
    plume_drafter_free(dr);
    /* the CLI says it too, and fails */
    int st = t_sh(log, sizeof log, "%s/plume draft -m %s --drafter %s --ids-npy %s/tiny-mtp-a/prompt.npy --step-logits %s/x.npy",
                  t_build(), targets[0], bad, t_data(), tmp);
    CHECK(st == 1 && strstr(log, "backbone_hidden_size"), "CLI mismatch: status %d, %s", st, log);
    /* a target bundle is no drafter */
    err = NULL;
    rc = plume_drafter_open(&dr, m, targets[0], &err);
    CHECK(rc != 0 && err, "a target bundle opened as a drafter");
    free(err);
    /* --weights checked for drafters too */
    st = t_sh(log, sizeof log, "%s/plume convert %s/tiny-mtp-a/hf %s/w --weights q3 --quiet", t_build(), t_data(), tmp);
    CHECK(st != 0 && strstr(log, "--weights"), "bad --weights: %d %s", st, log);
    plume_model_free(m);
}

/* ---- one step fed the goldens' inputs -------------------------------------------------------- */

/* Step (position 20, all 20 prompt positions) and anchor (position 6, positions 0..5) of one
 * drafter (prefix "" or "track_") and one variant (suffix "" or "_q8emb"), fed step_in and the
 * golden K/V: logits, proj (and the final norm for the step) within the tiny-a limits. */
static void step_case(plume_drafter *d, const char *pre, const char *suf) {
    char n[128];
#define F(name, count) (snprintf(n, sizeof n, "%s" name "%s.npy", pre, suf), mtp_npy(n, count))
#define G(name, count) (snprintf(n, sizeof n, name "%s.npy", suf), mtp_npy(n, count))
    float *in = F("step_in", 2 * DB), *lg = F("step_logits", V), *pj = F("step_proj", DB), *nm = F("step_normed", 32);
    float *ain = F("anchor_in", 2 * DB), *alg = F("anchor_logits", V), *apj = F("anchor_proj", DB);
    float *ks = G("target_k_swa", 20 * 16), *vs = G("target_v_swa", 20 * 16);
    float *kf = G("target_k_full", 20 * 32), *vf = G("target_v_full", 20 * 32);
#undef F
#undef G
    float logits[V], proj[DB], normed[32];
    if (in && lg && pj && nm && ks && vs && kf && vf) {
        drafter_kv kv[2] = {{NULL, ks, vs, 20, 20 - 9, 20}, {NULL, kf, vf, 20, 0, 20}}; /* sliding: the last W + 1 */
        drafter_step(d, in, 20, kv, logits, proj, normed);
        CHECK(t_rel_rms(logits, lg, V) <= 1e-4 && t_max_abs(logits, lg, V) <= 2e-3, "%sstep%s logits: rel %.3g",
              pre, suf, t_rel_rms(logits, lg, V));
        CHECK(t_rel_rms(proj, pj, DB) <= 1e-4, "%sstep%s proj: rel %.3g", pre, suf, t_rel_rms(proj, pj, DB));
        CHECK(t_rel_rms(normed, nm, 32) <= 1e-4, "%sstep%s normed: rel %.3g", pre, suf, t_rel_rms(normed, nm, 32));
        /* the wrong window fails: the target's own W positions instead of W + 1 */
        kv[0].lo = 20 - 8;
        drafter_step(d, in, 20, kv, logits, NULL, NULL);
        CHECK(t_rel_rms(logits, lg, V) > 1e-4, "%sstep%s: a window of W matches too", pre, suf);
    }
    if (ain && alg && apj && ks) {
        drafter_kv kv[2] = {{NULL, ks, vs, 20, 0, 6}, {NULL, kf, vf, 20, 0, 6}};
        drafter_step(d, ain, 6, kv, logits, proj, NULL);
        CHECK(t_rel_rms(logits, alg, V) <= 1e-4, "%sanchor%s logits: rel %.3g", pre, suf, t_rel_rms(logits, alg, V));
        CHECK(t_rel_rms(proj, apj, DB) <= 1e-4, "%sanchor%s proj: rel %.3g", pre, suf, t_rel_rms(proj, apj, DB));
    }
    free(in), free(lg), free(pj), free(nm), free(ain), free(alg), free(apj), free(ks), free(vs), free(kf), free(vf);
}

/* Both drafters, exact and _q8emb inputs, f32 bundles. */
static void test_step_goldens(void) {
    plume_model *m = t_tiny_open(targets[0], NULL, 2, 1);
    CHECK(m, "target");
    for (int d = 0; m && d < 2; d++) {
        plume_drafter *dr = NULL;
        char *err = NULL;
        if (plume_drafter_open(&dr, m, drafters[d][0], &err)) { CHECK(0, "%s", err); free(err); continue; }
        step_case(dr, d ? "track_" : "", "");
        step_case(dr, d ? "track_" : "", "_q8emb");
        plume_drafter_free(dr);
    }
    plume_model_free(m);
}

/* ---- the check command ---------------------------------------------------------------------- */

/* plume draft --step-logits and --chain 3 on the f32 bundles against the _q8emb goldens
 * (plume's target reads its embeddings from INT8 sidecars), and the chain's argmaxes. */
static void test_cli_step_chain(void) {
    for (int d = 0; d < 2; d++) {
        const char *pre = d ? "track_" : "";
        char log[4096], step[700], chain[700], n[128];
        snprintf(step, sizeof step, "%s/step%d.npy", tmp, d);
        snprintf(chain, sizeof chain, "%s/chain%d.npy", tmp, d);
        int st = t_sh(log, sizeof log, "%s/plume draft -m %s --drafter %s --ids-npy %s/tiny-mtp-a/prompt.npy "
                      "--step-logits %s --chain 3 --chain-logits %s", t_build(), targets[0], drafters[d][0], t_data(),
                      step, chain);
        CHECK(st == 0, "plume draft: %s", log);
        if (st) continue;
        snprintf(n, sizeof n, "tiny-mtp-a/%sstep_logits_q8emb.npy", pre);
        float *gs = t_npy_floats(n, NULL, NULL);
        snprintf(n, sizeof n, "tiny-mtp-a/%schain_logits_q8emb.npy", pre);
        float *gc = t_npy_floats(n, NULL, NULL);
        snprintf(n, sizeof n, "tiny-mtp-a/%schain_tokens_q8emb.npy", pre);
        float *gt = t_npy_floats(n, NULL, NULL);
        plume_map m1, m2;
        npy_view v1, v2;
        char *err = NULL;
        if (gs && gc && gt && !npy_open(step, &m1, &v1, &err) && !npy_open(chain, &m2, &v2, &err)) {
            float a[V], c[3 * V];
            CHECK(v1.count == V && v2.count == 3 * V, "shapes %lld %lld", (long long)v1.count, (long long)v2.count);
            if (v1.count == V && v2.count == 3 * V) {
                npy_to_f32(&v1, a);
                npy_to_f32(&v2, c);
                CHECK(t_rel_rms(a, gs, V) <= 1e-4, "%sstep: rel %.3g", pre, t_rel_rms(a, gs, V));
                CHECK(t_rel_rms(c, gc, 3 * V) <= 1e-4, "%schain: rel %.3g", pre, t_rel_rms(c, gc, 3 * V));
                for (int i = 0; i < 3; i++) {
                    int32_t b = 0;
                    for (int j = 1; j < V; j++)
                        if (c[i * V + j] > c[i * V + b]) b = j;
                    CHECK(b == (int32_t)gt[i], "%schain token %d: %d, golden %d", pre, i, b, (int)gt[i]);
                }
            }
            plume_map_free(&m1);
            plume_map_free(&m2);
        } else CHECK(0, "fixtures: %s", err ? err : "");
        free(err), free(gs), free(gc), free(gt);
    }
}

/* The trace of a greedy speculative run against a golden spec_k*.json: the tokens exactly,
 * per round the drafts where the golden margin is above 1e-3 and the accepted count (the
 * rounds line up as long as every earlier round matched). */
static void compare_trace(const char *mine, const char *golden, const char *what) {
    cJSON *a = read_json(mine), *b = read_json(golden);
    CHECK(a && b, "%s: traces unreadable", what);
    if (a && b) {
        const cJSON *ta = cJSON_GetObjectItem(a, "tokens"), *tb = cJSON_GetObjectItem(b, "tokens");
        char *sa = cJSON_PrintUnformatted(ta), *sb = cJSON_PrintUnformatted(tb);
        CHECK(sa && sb && !strcmp(sa, sb), "%s tokens: %s vs %s", what, sa ? sa : "", sb ? sb : "");
        free(sa), free(sb);
        const cJSON *ra = cJSON_GetObjectItem(a, "rounds"), *rb = cJSON_GetObjectItem(b, "rounds");
        CHECK(cJSON_GetArraySize(ra) == cJSON_GetArraySize(rb), "%s: %d rounds, golden %d", what,
              cJSON_GetArraySize(ra), cJSON_GetArraySize(rb));
        for (int r = 0; r < cJSON_GetArraySize(ra) && r < cJSON_GetArraySize(rb); r++) {
            const cJSON *x = cJSON_GetArrayItem(ra, r), *y = cJSON_GetArrayItem(rb, r);
            const cJSON *dx = cJSON_GetObjectItem(x, "drafts"), *dy = cJSON_GetObjectItem(y, "drafts");
            const cJSON *my = cJSON_GetObjectItem(y, "draft_margins");
            CHECK(cJSON_GetArraySize(dx) == cJSON_GetArraySize(dy), "%s round %d: %d drafts, golden %d", what, r,
                  cJSON_GetArraySize(dx), cJSON_GetArraySize(dy));
            for (int i = 0; i < cJSON_GetArraySize(dx) && i < cJSON_GetArraySize(dy); i++)
                if (cJSON_GetArrayItem(my, i)->valuedouble > 1e-3)
                    CHECK(cJSON_GetArrayItem(dx, i)->valueint == cJSON_GetArrayItem(dy, i)->valueint,
                          "%s round %d draft %d: %d, golden %d", what, r, i, cJSON_GetArrayItem(dx, i)->valueint,
                          cJSON_GetArrayItem(dy, i)->valueint);
            CHECK(cJSON_GetObjectItem(x, "accepted")->valueint == cJSON_GetObjectItem(y, "accepted")->valueint,
                  "%s round %d: accepted %d, golden %d", what, r, cJSON_GetObjectItem(x, "accepted")->valueint,
                  cJSON_GetObjectItem(y, "accepted")->valueint);
        }
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* plume draft -n 24 --draft 3 and 1, both drafters, against the goldens' traces (f32); the
 * other precisions give the target's greedy tokens too (their drafts may differ). */
static void test_cli_traces(void) {
    char log[4096], trace[700], golden[700], what[64];
    for (int d = 0; d < 2; d++)
        for (int k = 3; k >= 1; k -= 2)
            for (int w = 0; w < 4; w++) {
                snprintf(trace, sizeof trace, "%s/trace-%d-%d-%d.json", tmp, d, k, w);
                int st = t_sh(log, sizeof log, "%s/plume draft -m %s --drafter %s --ids-npy %s/tiny-mtp-a/prompt.npy "
                              "-n 24 --draft %d --trace %s", t_build(), targets[0], drafters[d][w], t_data(), k, trace);
                CHECK(st == 0, "plume draft -n: %s", log);
                snprintf(golden, sizeof golden, "%s/tiny-mtp-a/%sspec_k%d_q8emb.json", t_data(), d ? "track_" : "", k);
                snprintf(what, sizeof what, "%s k=%d %s", d ? "track" : "random", k, t_tiny_wnames[w]);
                if (st) continue;
                if (w == 0) compare_trace(trace, golden, what);
                else { /* tokens only */
                    cJSON *a = read_json(trace), *b = read_json(golden);
                    char *sa = a ? cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "tokens")) : NULL;
                    char *sb = b ? cJSON_PrintUnformatted(cJSON_GetObjectItem(b, "tokens")) : NULL;
                    CHECK(sa && sb && !strcmp(sa, sb), "%s tokens: %s vs %s", what, sa ? sa : "", sb ? sb : "");
                    free(sa), free(sb);
                    cJSON_Delete(a), cJSON_Delete(b);
                }
            }
}

/* ---- greedy identity with accepted drafts ---------------------------------------------------- */

/* A guess replacer: the target's own greedy continuation (ref, from position p0) where a
 * fixed hash of the position says so (rate in 1/8ths), else the drafter's guess. */
typedef struct {
    const int32_t *ref;
    int32_t p0, n_ref, rate8;
    int64_t replaced;
} oracle;

/* plume_draft_fn: replace the drafter's guesses (draft[0, max)) after ctx[0, n). */
static int32_t oracle_fn(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max) {
    (void)ctx;
    oracle *o = user;
    for (int32_t i = 0; i < max; i++) {
        int32_t at = n + i - o->p0; /* the index in ref of the token after ctx + draft[0, i) */
        uint64_t h = ((uint64_t)(n + i) * 0x9E3779B97F4A7C15ull) >> 61;
        if (at >= 0 && at < o->n_ref && (int32_t)h < o->rate8) draft[i] = o->ref[at], o->replaced++;
    }
    return max;
}

static int32_t kv_bits; /* the sessions' K/V: 0 (float), or 8 (int8 full-attention caches) */

/* A session of 160 tokens for the greedy runs, its K/V at kv_bits. */
static plume_session *run_session(plume_model *m) {
    plume_session_params p = plume_session_default_params();
    p.n_ctx = 160;
    p.n_batch = 64;
    p.n_rewind = -2;
    p.snapshot_every = 0;
    if (kv_bits) p.kv_bits = kv_bits;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_new(&s, m, &p, &err)) printf("  %s\n", err);
    free(err);
    return s;
}

/* Plain greedy decoding of n tokens after ids [P] on a fresh session. */
static void plain_greedy(plume_model *m, const int32_t *ids, int32_t P, int32_t n, int32_t *out) {
    plume_session *s = run_session(m);
    float logits[V];
    char *err = NULL;
    if (!s || plume_session_feed(s, ids, P, logits, 0, &err)) { CHECK(0, "plain: %s", err ? err : ""); free(err); plume_session_free(s); return; }
    for (int32_t i = 0; i < n; i++) {
        int32_t b = 0;
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[b]) b = j;
        out[i] = b;
        if (i + 1 < n && plume_session_feed(s, &b, 1, logits, 0, &err)) break;
    }
    plume_session_free(s);
}

/* Greedy with the drafter (k drafts, guesses forced right at rate8/8; o NULL: its own), with
 * prompt lookup (plume_spec_params.lookup) or without, from prompt ids [P]: n tokens into out;
 * stats into acc (steps, drafted, accepted, then prompt lookup's drafted and accepted). Rewinds
 * the session by `back` tokens halfway and goes on. */
static void spec_greedy(plume_model *m, plume_drafter *d, oracle *o, int32_t k, int32_t adaptive, int32_t lookup,
                        const int32_t *ids, int32_t P, int32_t n, int32_t back, int32_t *out, int64_t acc[5]) {
    plume_session *s = run_session(m);
    plume_spec_params p = plume_spec_default_params();
    p.draft_max = k;
    p.adaptive = adaptive;
    p.drafter = d;
    p.lookup = lookup;
    p.draft_fn = o ? oracle_fn : NULL;
    p.draft_user = o;
    plume_sampler_params gp = plume_sampler_default_params();
    gp.temperature = 0;
    plume_spec *sp = NULL;
    plume_sampler *smp = NULL;
    char *err = NULL;
    float logits[V];
    int rc = !s || plume_spec_new(&sp, m, &p, &err) || plume_sampler_new(&smp, &gp, V, &err) ||
             plume_session_feed(s, ids, P, logits, 0, &err);
    int32_t have = 0, pending = 0, buf[80];
    if (!rc) {
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[pending]) pending = j;
        out[have++] = pending;
    }
    int rewound = 0;
    while (!rc && have < n) {
        int32_t got = plume_spec_step(sp, s, smp, pending, buf, n - have, &err);
        if (got < 0) { rc = got; break; }
        for (int32_t i = 0; i < got && have < n; i++) out[have++] = buf[i];
        pending = buf[got - 1];
        if (back && !rewound && have >= n / 2) { /* forget the last `back` tokens and redo them */
            rewound = 1;
            int32_t keep = plume_session_n_past(s) - back;
            have = keep - P + 1;
            pending = out[have - 1];
            rc = plume_session_rewind(s, keep, &err) || plume_sampler_rewind(smp, back);
        }
    }
    CHECK(!rc, "spec run: %s", err ? err : "");
    free(err);
    plume_spec_stats(sp, &acc[0], &acc[1], &acc[2]);
    plume_spec_source_stats(sp, PLUME_SPEC_LOOKUP, NULL, &acc[3], &acc[4]);
    plume_spec_free(sp);
    plume_sampler_free(smp);
    plume_session_free(s);
}

/* On every weight type, drafts of 1..4, forced acceptance 0, 3/8, 6/8 and 1, adaptive and
 * constant: the tokens of plain greedy decoding; rounds accept, reject and accept all. */
static void test_greedy_identity(void) {
    int32_t prompt[20];
    float *pf = mtp_npy("prompt.npy", 20);
    if (!pf) return;
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)pf[i];
    free(pf);
    enum { N = 72 }; /* 92 positions: the window of 8 slides many times */
    int64_t total[3] = {0};
    for (int w = 0; w < 4; w++) {
        plume_model *m;
        plume_drafter *d;
        if (open_pair(w, &m, &d)) continue;
        int32_t ref[N], got[N];
        plain_greedy(m, prompt, 20, N, ref);
        static const int rates[4] = {0, 3, 6, 8};
        for (int k = 1; k <= 4; k++)
            for (int ri = 0; ri < 4; ri++) {
                int r8 = rates[ri];
                oracle o = {ref, 20, N, r8, 0};
                int64_t acc[5];
                memset(got, 0xff, sizeof got);
                spec_greedy(m, d, &o, k, k % 2, k >= 3, prompt, 20, N, k == 3 ? 5 : 0, got, acc);
                int at = 0;
                while (at < N && got[at] == ref[at]) at++;
                CHECK(at == N, "%s k=%d rate %d/8: differs from plain greedy at token %d", t_tiny_wnames[w], k, r8, at);
                for (int i = 0; i < 3; i++) total[i] += acc[i];
            }
        int64_t steps, rounds;
        plume_drafter_stats(d, &steps, &rounds);
        CHECK(rounds > 100 && steps >= rounds, "%s: the drafter ran %lld rounds", t_tiny_wnames[w], (long long)rounds);
        plume_drafter_free(d);
        plume_model_free(m);
    }
    printf("  drafted %lld, accepted %lld\n", (long long)total[1], (long long)total[2]);
    /* the runs must have accepted some drafts and rejected others */
    CHECK(total[2] > 100 && total[1] - total[2] > 100, "drafted %lld, accepted %lld", (long long)total[1],
          (long long)total[2]);
}

/* Drafter and prompt lookup together (plume_spec_params.lookup) on a prompt that repeats
 * itself, with the random drafter (almost never right) and its own guesses, drafts of 3,
 * adaptive, a rewind of 5 halfway, f32 and q8: the tokens of plain greedy decoding with lookup
 * on and off; with it on, prompt lookup fed guesses, some were kept, and more were kept in all
 * than by the drafter alone. */
static void test_lookup_combined(void) {
    int32_t prompt[30];
    float *pf = mtp_npy("prompt.npy", 20);
    if (!pf) return;
    for (int i = 0; i < 30; i++) prompt[i] = (int32_t)pf[i % 10]; /* its first 10 tokens, three times */
    free(pf);
    enum { N = 72 };
    int64_t on[5] = {0}, off[5] = {0};
    for (int w = 0; w < 4; w += 2) {
        plume_model *m = t_tiny_open(targets[w], NULL, 2, 0);
        plume_drafter *d = NULL;
        char *err = NULL;
        if (!m || plume_drafter_open(&d, m, drafters[0][w], &err)) {
            CHECK(0, "%s: %s", targets[w], err ? err : "");
            free(err), plume_model_free(m);
            continue;
        }
        int32_t ref[N], got[2][N];
        plain_greedy(m, prompt, 30, N, ref);
        for (int l = 0; l < 2; l++) {
            int64_t acc[5];
            memset(got[l], 0xff, sizeof got[l]);
            spec_greedy(m, d, NULL, 3, 1, l, prompt, 30, N, 5, got[l], acc);
            int at = 0;
            while (at < N && got[l][at] == ref[at]) at++;
            CHECK(at == N, "%s lookup %d: differs from plain greedy at token %d", t_tiny_wnames[w], l, at);
            for (int i = 0; i < 5; i++) (l ? on : off)[i] += acc[i];
        }
        plume_drafter_free(d);
        plume_model_free(m);
    }
    printf("  drafter alone: %lld of %lld kept; with lookup: %lld of %lld kept, lookup's %lld of %lld\n", (long long)off[2],
           (long long)off[1], (long long)on[2], (long long)on[1], (long long)on[4], (long long)on[3]);
    CHECK(off[3] == 0, "lookup fed %lld guesses with lookup off", (long long)off[3]);
    CHECK(on[3] > 0 && on[4] > 0 && on[4] <= on[2], "lookup fed %lld guesses, %lld kept", (long long)on[3], (long long)on[4]);
    CHECK(on[2] > off[2], "with lookup %lld kept, the drafter alone %lld", (long long)on[2], (long long)off[2]);
}

/* Int8 K/V (kv_bits 8: the full-attention caches the drafter reads are int8 with a scale per
 * row and head): on f32 and q8 targets, drafts of 1..4 with the drafter's own guesses and with
 * guesses forced right at 3/8, 6/8 and 1, a rewind in one run: the tokens of plain greedy
 * decoding on int8 K/V. The first draft step's logits read the int8 caches (and the hidden
 * state of a target that read them): within 10% (rel rms) of those over float caches (0.3% at
 * f32, 4.4% at q8 with its int8 activations, avx512). */
static void test_kv8(void) {
    int32_t prompt[20];
    float *pf = mtp_npy("prompt.npy", 20);
    if (!pf) return;
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)pf[i];
    free(pf);
    enum { N = 64 };
    int64_t total[3] = {0};
    const int wt[2] = {0, 2};
    for (int wi = 0; wi < 2; wi++) {
        int w = wt[wi];
        plume_model *m;
        plume_drafter *d;
        if (open_pair(w, &m, &d)) continue;
        char *err = NULL;
        /* the first draft step over int8 and float caches */
        float *lg[2] = {malloc(4 * V * sizeof(float)), malloc(4 * V * sizeof(float))}, logits[V];
        int32_t dr[2][4] = {{0}}, got_n[2] = {0};
        for (int b = 0; b < 2; b++) {
            kv_bits = b ? 8 : 0;
            plume_session *s = run_session(m);
            int32_t first = 0;
            if (s && !plume_session_feed(s, prompt, 20, logits, 0, &err)) {
                for (int j = 1; j < V; j++)
                    if (logits[j] > logits[first]) first = j;
                got_n[b] = plume_drafter_draft(d, s, first, 4, dr[b], lg[b], &err);
            }
            plume_session_free(s);
        }
        double rr = t_rel_rms(lg[1], lg[0], V);
        CHECK(got_n[0] >= 1 && got_n[1] >= 1 && rr < 0.1, "%s: int8 K/V draft step: %d / %d drafts, rel rms %.4f vs float",
              t_tiny_wnames[w], got_n[1], got_n[0], rr);
        printf("  %s: the first draft step on int8 K/V: rel rms %.4f vs float K/V, drafts %d %d %d vs %d %d %d\n",
               t_tiny_wnames[w], rr, dr[1][0], dr[1][1], dr[1][2], dr[0][0], dr[0][1], dr[0][2]);
        free(lg[0]), free(lg[1]);
        kv_bits = 8;
        int32_t ref[N], got[N];
        plain_greedy(m, prompt, 20, N, ref);
        static const int rates[4] = {-1, 3, 6, 8};
        for (int k = 1; k <= 4; k++)
            for (int ri = 0; ri < 4; ri++) {
                oracle o = {ref, 20, N, rates[ri], 0};
                int64_t acc[5];
                memset(got, 0xff, sizeof got);
                spec_greedy(m, d, rates[ri] < 0 ? NULL : &o, k, k % 2, k % 2 == 0, prompt, 20, N, k == 2 ? 4 : 0, got, acc);
                int at = 0;
                while (at < N && got[at] == ref[at]) at++;
                CHECK(at == N, "%s kv8 k=%d rate %d/8: differs from plain greedy at token %d", t_tiny_wnames[w], k, rates[ri], at);
                for (int i = 0; i < 3; i++) total[i] += acc[i];
            }
        kv_bits = 0;
        free(err);
        plume_drafter_free(d);
        plume_model_free(m);
    }
    printf("  int8 K/V: drafted %lld, accepted %lld\n", (long long)total[1], (long long)total[2]);
    CHECK(total[2] > 50 && total[1] - total[2] > 50, "drafted %lld, accepted %lld", (long long)total[1], (long long)total[2]);
}

/* ---- the centroid head ------------------------------------------------------------------------ */

enum { NC = 16, TOPK = 4 }; /* 16 clusters of 32 tokens, 4 of them selected */

/* dir: hf/ with use_ordered_embeddings, NC centroids (random, float32) and a token_ordering
 * (a permutation, int64; corrupt: one id twice) added, as HF's checkpoints of E2B/E4B carry
 * them. 0 or -1. */
static int make_ordered(const char *dir, float *cent, int32_t *order, int corrupt) {
    char src[700], path[800], log[4096];
    snprintf(src, sizeof src, "%s/tiny-mtp-a/hf", t_data());
    if (t_sh(log, sizeof log, "mkdir -p %s && sed -e 's/\"use_ordered_embeddings\": false/\"use_ordered_embeddings\": true/' "
             "-e 's/\"num_centroids\": 2048/\"num_centroids\": %d/' -e 's/\"centroid_intermediate_top_k\": 32/"
             "\"centroid_intermediate_top_k\": %d/' %s/config.json > %s/config.json", dir, NC, TOPK, src, dir))
        return -1;
    uint64_t rng = 42;
    for (int i = 0; i < NC * 32; i++) cent[i] = (float)((int64_t)(plume_rng_next(&rng) % 2001) - 1000) / 1000.0f;
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = V - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(plume_rng_next(&rng) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    if (corrupt) order[0] = order[1];
    st_file f;
    st_writer w;
    char *err = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (st_open(&f, path, &err)) return printf("  %s\n", err), free(err), -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_writer_init(&w, path, 1, &err);
    for (int32_t i = 0; !rc && i < f.n; i++) rc = st_writer_add(&w, f.t[i].name, f.t[i].dtype, f.t[i].ndim, f.t[i].shape, &err);
    int64_t cs[2] = {NC, 32}, os[1] = {V};
    if (!rc) rc = st_writer_add(&w, "masked_embedding.centroids.weight", ST_F32, 2, cs, &err);
    if (!rc) rc = st_writer_add(&w, "masked_embedding.token_ordering", ST_I64, 1, os, &err);
    if (!rc) rc = st_writer_begin(&w, &err);
    for (int32_t i = 0; !rc && i < f.n; i++) {
        void *buf = malloc(f.t[i].nbytes + 1);
        rc = !buf || st_pread(f.path, f.t[i].offset, buf, f.t[i].nbytes, &err) || st_writer_write(&w, buf, f.t[i].nbytes, &err);
        free(buf);
    }
    int64_t o64[V];
    for (int i = 0; i < V; i++) o64[i] = order[i];
    if (!rc) rc = st_writer_write(&w, cent, sizeof(float) * NC * 32, &err) || st_writer_write(&w, o64, sizeof o64, &err);
    if (!rc) rc = st_writer_finish(&w, &err);
    if (rc) printf("  %s\n", err ? err : "writing the ordered checkpoint");
    free(err);
    st_writer_free(&w);
    st_close(&f);
    return rc ? -1 : 0;
}

/* The ordered head as HF computes it (Gemma4AssistantMaskedEmbedder), from the dense head's
 * logits dense [V] of the same final-norm output y [32]: the TOPK clusters of the largest
 * y . centroid, their tokens' logits, min(those) - 1 everywhere else. */
static void ref_ordered(const float *y, const float *dense, const float *cent, const int32_t *order, float *out) {
    double c[NC];
    int top[TOPK];
    for (int i = 0; i < NC; i++) {
        c[i] = 0;
        for (int j = 0; j < 32; j++) c[i] += (double)y[j] * cent[i * 32 + j];
    }
    for (int t = 0; t < TOPK; t++) {
        int b = -1;
        for (int i = 0; i < NC; i++) {
            int used = 0;
            for (int u = 0; u < t; u++) used |= top[u] == i;
            if (!used && (b < 0 || c[i] > c[b])) b = i;
        }
        top[t] = b;
    }
    float lo = INFINITY;
    for (int t = 0; t < TOPK; t++)
        for (int j = 0; j < V / NC; j++) lo = fminf(lo, dense[order[top[t] * (V / NC) + j]]);
    for (int i = 0; i < V; i++) out[i] = lo - 1.0f;
    for (int t = 0; t < TOPK; t++)
        for (int j = 0; j < V / NC; j++) out[order[top[t] * (V / NC) + j]] = dense[order[top[t] * (V / NC) + j]];
}

/* At every precision: the ordered drafter's logits are HF's masked head over the dense
 * drafter's (same weights, same step), and its argmax is one of the selected tokens; a
 * token_ordering that is no permutation is refused at conversion. */
static void test_centroid_head(void) {
    char dir[700], log[4096];
    static float cent[NC * 32];
    static int32_t order[V];
    snprintf(dir, sizeof dir, "%s/ordered-hf", tmp);
    CHECK(make_ordered(dir, cent, order, 0) == 0, "make the ordered checkpoint");
    plume_model *m = t_tiny_open(targets[0], NULL, 2, 1);
    float *in = mtp_npy("step_in_q8emb.npy", 2 * DB), *ks = mtp_npy("target_k_swa_q8emb.npy", 320);
    float *vs = mtp_npy("target_v_swa_q8emb.npy", 320), *kf = mtp_npy("target_k_full_q8emb.npy", 640);
    float *vf = mtp_npy("target_v_full_q8emb.npy", 640);
    for (int w = 0; m && in && ks && vs && kf && vf && w < 4; w++) {
        char ob[700];
        snprintf(ob, sizeof ob, "%s/ordered-%s", tmp, t_tiny_wnames[w]);
        int st = t_sh(log, sizeof log, "%s/plume convert %s %s --weights %s --quiet", t_build(), dir, ob, t_tiny_wnames[w]);
        CHECK(st == 0, "convert the ordered drafter: %s", log);
        plume_drafter *dd = NULL, *od = NULL;
        char *err = NULL;
        if (st || plume_drafter_open(&dd, m, drafters[0][w], &err) || plume_drafter_open(&od, m, ob, &err)) {
            CHECK(0, "open: %s", err ? err : "");
            free(err);
            plume_drafter_free(dd);
            continue;
        }
        drafter_kv kv[2] = {{NULL, ks, vs, 20, 11, 20}, {NULL, kf, vf, 20, 0, 20}};
        float dense[V], y[32], got[V], want[V];
        drafter_step(dd, in, 20, kv, dense, NULL, y);
        int32_t best = drafter_step(od, in, 20, kv, got, NULL, NULL);
        ref_ordered(y, dense, cent, order, want);
        CHECK(t_max_abs(got, want, V) <= 1e-5, "%s: the ordered logits differ from HF's by %.3g", t_tiny_wnames[w],
              t_max_abs(got, want, V));
        int32_t wb = 0;
        for (int i = 1; i < V; i++)
            if (want[i] > want[wb]) wb = i;
        CHECK(best == wb, "%s: argmax %d, HF's %d", t_tiny_wnames[w], best, wb);
        int sel = 0;
        for (int i = 0; i < V; i++) sel += got[i] == dense[i];
        CHECK(sel >= TOPK * (V / NC), "%s: %d logits kept, want %d", t_tiny_wnames[w], sel, TOPK * (V / NC));
        plume_drafter_free(dd);
        plume_drafter_free(od);
    }
    free(in), free(ks), free(vs), free(kf), free(vf);
    plume_model_free(m);
    /* a token_ordering that is no permutation */
    char dup[800];
    snprintf(dup, sizeof dup, "%s/dup", tmp);
    make_ordered(dup, cent, order, 1);
    int st = t_sh(log, sizeof log, "%s/plume convert %s %s/dup-out --quiet", t_build(), dup, tmp);
    CHECK(st != 0 && strstr(log, "not a permutation"), "a bad token_ordering: %d %s", st, log);
}

/* plume synth of a drafter config (the ordered tiny one): --hf then plume convert gives the
 * bundle --bundle writes, byte for byte (token_ordering an int64 permutation in the
 * checkpoint), and the random drafter's greedy run outputs the target's tokens. */
static void test_synth_drafter(void) {
    char log[8192], golden[700];
    int st = t_sh(log, sizeof log, "%s/plume synth --config %s/ordered-hf/config.json --hf %s/synth-hf && "
                  "%s/plume convert %s/synth-hf %s/synth-conv --weights q8 --quiet && "
                  "%s/plume synth --config %s/ordered-hf/config.json --bundle %s/synth-b --weights q8 && "
                  "cmp %s/synth-b/drafter.safetensors %s/synth-conv/drafter.safetensors && echo SAME",
                  t_build(), tmp, tmp, t_build(), tmp, tmp, t_build(), tmp, tmp, tmp, tmp);
    CHECK(st == 0 && strstr(log, "SAME"), "synth --hf + convert vs --bundle: status %d: %s", st, log);
    snprintf(golden, sizeof golden, "%s/tiny-mtp-a/spec_k3_q8emb.json", t_data());
    st = t_sh(log, sizeof log, "%s/plume draft -m %s --drafter %s/synth-b --ids-npy %s/tiny-mtp-a/prompt.npy -n 24 "
              "--draft 3 --trace %s/synth.json", t_build(), targets[0], tmp, t_data(), tmp);
    CHECK(st == 0, "draft with the synth drafter: %s", log);
    cJSON *a = read_json(strcat(strcpy(log, tmp), "/synth.json")), *b = read_json(golden);
    char *sa = a ? cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "tokens")) : NULL;
    char *sb = b ? cJSON_PrintUnformatted(cJSON_GetObjectItem(b, "tokens")) : NULL;
    CHECK(sa && sb && !strcmp(sa, sb), "synth drafter tokens: %s vs %s", sa ? sa : "", sb ? sb : "");
    free(sa), free(sb);
    cJSON_Delete(a), cJSON_Delete(b);
}

/* The steps, accepted and drafted counts of bench --json's line for `mode` ("accept 0.00"):
 * 0, or -1 when the line or a count is missing. */
static int bench_counts(const char *log, const char *mode, long long *steps, long long *acc, long long *drafted) {
    char key[64];
    snprintf(key, sizeof key, "\"mode\": \"%s\"", mode);
    const char *at = strstr(log, key);
    at = at ? strstr(at, "\"steps\"") : NULL;
    return at && sscanf(at, "\"steps\": %lld, \"accepted\": %lld, \"drafted\": %lld", steps, acc, drafted) == 3 ? 0 : -1;
}

/* plume bench --drafter's forced rounds: with --draft-fixed every round drafts K (at
 * acceptance 0 it keeps none: a peer's constant-length round), at acceptance 1 keeps all;
 * without it the adaptive length stops feeding guesses that are never right, and keeps the
 * whole length where each guess is right with a steady chance of 0.7 (0.7^3 >= 0.2; a length
 * of one more than the last step kept drafts 2.1 a step there, this rule 2.7). */
static void test_bench_fixed(void) {
    char log[8192];
    long long c[2][9]; /* fixed, adaptive: rate 0 steps, accepted, drafted; rate 1, rate 0.7 the same */
    for (int f = 0; f < 2; f++) {
        int st = t_sh(log, sizeof log, "%s/plume bench -m %s --drafter %s --accept-rate 0,1,0.7 --draft 3 %s -p 8 -n 200 "
                      "-r 1 -t 2 --json", t_build(), targets[2], drafters[1][2], f ? "" : "--draft-fixed");
        CHECK(st == 0, "bench --drafter: status %d: %s", st, log);
        if (bench_counts(log, "accept 0.00", &c[f][0], &c[f][1], &c[f][2]) ||
            bench_counts(log, "accept 1.00", &c[f][3], &c[f][4], &c[f][5]) ||
            bench_counts(log, "accept 0.70", &c[f][6], &c[f][7], &c[f][8])) {
            CHECK(0, "bench --json lines: %s", log);
            return;
        }
        CHECK(c[f][1] == 0 && c[f][4] == c[f][5] && c[f][5] > 0, "%s: rate 0 accepted %lld; rate 1 accepted %lld of %lld",
              f ? "adaptive" : "fixed", c[f][1], c[f][4], c[f][5]);
    }
    /* fixed: every round at rate 0 fed 3 guesses (the last rounds may have less room) */
    CHECK(c[0][2] >= 3 * (c[0][0] - 3) && c[0][2] <= 3 * c[0][0], "fixed: %lld drafted in %lld steps", c[0][2], c[0][0]);
    CHECK(c[1][2] < c[0][2] / 2, "adaptive at rate 0 drafted %lld, fixed %lld", c[1][2], c[0][2]);
    CHECK(c[0][3] <= 200 / 4 + 2 && c[0][4] >= 3 * (c[0][3] - 3), "fixed at rate 1: %lld steps, %lld accepted", c[0][3],
          c[0][4]);
    printf("  adaptive at 0.7: %lld drafted in %lld steps, %lld kept; fixed: %lld in %lld\n", c[1][8], c[1][6], c[1][7],
           c[0][8], c[0][6]);
    CHECK(c[1][8] * 10 >= 24 * c[1][6], "adaptive at 0.7: %lld drafted in %lld steps (want >= 2.4 a step)", c[1][8], c[1][6]);
}

/* ---- sampling keeps the distribution --------------------------------------------------------- */

enum { DIST_RUNS = 3000, DIST_GEN = 4 };

/* The chi-square quantile of probability 1 - 1e-7 with df degrees of freedom (Wilson-Hilferty). */
static double chi2_limit(int df) {
    double a = 2.0 / (9.0 * df), z = 5.2;
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Chi-square homogeneity of two equal samples over n categories (cells under 10 pooled). */
static double chi2_two(const int32_t *a, const int32_t *b, int32_t n, int *df) {
    double x = 0;
    int64_t pa = 0, pb = 0;
    int bins = 0;
    for (int32_t i = 0; i < n; i++) {
        if (a[i] + b[i] < 10) { pa += a[i], pb += b[i]; continue; }
        x += (double)(a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
        bins++;
    }
    if (pa + pb > 0) x += (double)(pa - pb) * (double)(pa - pb) / (double)(pa + pb), bins++;
    *df = bins - 1;
    return x;
}

/* The first DIST_GEN tokens sampled after the prompt (fed: s at np, its logits lg0), plain
 * (sp NULL) or with the drafter's speculative steps, sampler seed `seed`; ctx_last: the
 * prompt's last token. */
static void sample_first(plume_session *s, plume_spec *sp, const plume_sampler_params *p0, uint64_t seed, int32_t np,
                         int32_t ctx_last, const float *lg0, int32_t *out) {
    plume_sampler_params p = *p0;
    p.seed = seed;
    plume_sampler *smp = NULL;
    plume_sampler_new(&smp, &p, V, NULL);
    float lg[V];
    /* the prompt's last token again, for the drafter's handover (as a reused prompt is fed) */
    plume_session_rewind(s, np - 1, NULL);
    plume_session_feed(s, &ctx_last, 1, lg, 0, NULL);
    int32_t g = 0, buf[DIST_GEN];
    out[g++] = plume_sampler_sample(smp, lg0);
    while (g < DIST_GEN) {
        if (!sp) {
            plume_sampler_accept(smp, out[g - 1]);
            plume_session_feed(s, &out[g - 1], 1, lg, 0, NULL);
            out[g++] = plume_sampler_sample(smp, lg);
            continue;
        }
        int32_t n = plume_spec_step(sp, s, smp, out[g - 1], buf, DIST_GEN - g, NULL);
        if (n < 1) break;
        memcpy(out + g, buf, (size_t)n * sizeof *buf);
        g += n;
    }
    plume_sampler_free(smp);
}

/* A guess replacer for the first round: after the prompt and a first token c, the target's
 * most likely next token (succ[c], -1: keep the drafter's guess): a function of the context,
 * as the acceptance rule wants, right often enough under sampling. */
static int32_t succ_fn(void *user, const int32_t *ctx, int32_t n, int32_t *draft, int32_t max) {
    const int32_t *succ = user;
    if (n == 21 && succ[ctx[20]] >= 0) draft[0] = succ[ctx[20]];
    return max;
}

/* The rank of token c in the target's logits after ids [n] (fed on s from position 0), and
 * the argmax into *top; -1 on error. */
static int logit_rank(plume_session *s, const int32_t *ids, int32_t n, int32_t c, int32_t *top) {
    float lg[V];
    if (plume_session_rewind(s, 0, NULL) || plume_session_feed(s, ids, n, lg, 0, NULL)) return -1;
    int rank = 0;
    *top = 0;
    for (int j = 0; j < V; j++) {
        rank += lg[j] > lg[c];
        if (lg[j] > lg[*top]) *top = j;
    }
    return rank;
}

/* A prompt of period 5, c a b x y c a b x y ... (a b x y: the tokens pf[2..5)), whose last y
 * is often followed by c (among the target's 3 most likely) and c by a (the same): then the
 * sampled first token is often c, the context ends in a repeat, and prompt lookup's guess a
 * is right often enough to be kept. The prompt into ids [20]; 0, or -1 (none found). */
static int periodic_prompt(plume_session *s, const float *pf, int32_t *ids) {
    int32_t p[21], top;
    for (int32_t c = 0; c < V; c++)
        for (int32_t a = (int32_t)pf[1], tries = 0; tries < 2; tries++) {
            for (int i = 0; i < 20; i++) p[i] = i % 5 == 0 ? c : i % 5 == 1 ? a : (int32_t)pf[i % 5];
            p[20] = c;
            int r0 = logit_rank(s, p, 20, c, &top), r1 = logit_rank(s, p, 21, a, &top);
            if (r0 < 0 || r1 < 0) return -1;
            if (r0 < 3 && r1 < 3) {
                memcpy(ids, p, 20 * sizeof *p);
                return 0;
            }
            a = top; /* the target's choice after c, once */
        }
    return -1;
}

/* Sampling (top-k 8, temperature 1.5) with the tracking drafter, drafts of 2: tokens 2, 3 and
 * 4 have plain sampling's distribution (chi-square homogeneity over 3000 runs each, at the
 * 1 - 1e-7 quantile: fixed seeds, so deterministic); guesses are accepted and rejected. The
 * drafter alone (the first round's first guess replaced by the target's most likely token,
 * so that guesses are accepted often enough to matter), or (combined) with prompt lookup,
 * adaptive (the source and the length chosen from past steps), on a prompt that repeats
 * itself, its own guesses: lookup's guesses are fed and kept in some rounds, the drafter's
 * fed in others. (The rule itself is speculative.c's, which
 * test_spec holds to the same test with an always-accept and a wrong-residual rule failing
 * it.) */
static void sampling_distribution(int combined) {
    plume_model *m = t_tiny_open(targets[0], NULL, 1, 1);
    plume_drafter *d = NULL;
    plume_session *s = m ? t_tiny_session(m, 64, 16, -2, 0) : NULL;
    float *pf = mtp_npy("prompt.npy", 20), lg0[V];
    char *err = NULL;
    if (!s || !pf || plume_drafter_open(&d, m, drafters[1][0], &err)) {
        CHECK(0, "setup: %s", err ? err : "");
        free(err), free(pf), plume_session_free(s), plume_model_free(m);
        return;
    }
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)pf[i];
    CHECK(!combined || !periodic_prompt(s, pf, prompt), "no periodic prompt");
    free(pf);
    plume_spec_params pp = plume_spec_default_params();
    pp.draft_max = 2;
    pp.adaptive = combined;
    pp.drafter = d;
    pp.lookup = combined;
    static int32_t succ[V];
    pp.draft_fn = combined ? NULL : succ_fn;
    pp.draft_user = succ;
    for (int i = 0; i < V; i++) succ[i] = -1;
    if (!combined && !plume_session_rewind(s, 0, NULL) && !plume_session_feed(s, prompt, 20, lg0, 0, NULL))
        for (int c = 0; c < V; c++) { /* the first token's 8 most likely values */
            int rank = 0;
            for (int j = 0; j < V; j++) rank += lg0[j] > lg0[c];
            float lg[V];
            if (rank >= 8 || plume_session_rewind(s, 20, NULL) || plume_session_feed(s, &c, 1, lg, 0, NULL)) continue;
            succ[c] = 0;
            for (int j = 1; j < V; j++)
                if (lg[j] > lg[succ[c]]) succ[c] = j;
        }
    plume_spec *sp = NULL;
    plume_sampler_params p = plume_sampler_default_params();
    p.top_k = 8, p.top_p = 1.0f, p.temperature = 1.5f;
    int32_t *cnt[2];
    for (int k = 0; k < 2; k++) cnt[k] = calloc((size_t)DIST_GEN * V, sizeof(int32_t));
    if (cnt[0] && cnt[1] && !plume_spec_new(&sp, m, &pp, NULL) && !plume_session_rewind(s, 0, NULL) &&
        !plume_session_feed(s, prompt, 20, lg0, 0, NULL))
        for (int k = 0; k < 2; k++)
            for (uint64_t r = 0; r < DIST_RUNS; r++) {
                int32_t o[DIST_GEN];
                sample_first(s, k ? sp : NULL, &p, 7919 * (uint64_t)k + r * 2 + 1, 20, prompt[19], lg0, o);
                for (int g = 0; g < DIST_GEN; g++) cnt[k][g * V + o[g]]++;
            }
    printf("  ");
    for (int g = 1; g < DIST_GEN && cnt[0] && cnt[1]; g++) {
        int df;
        double x = chi2_two(cnt[0] + g * V, cnt[1] + g * V, V, &df);
        printf("token %d chi2 %.1f (df %d, limit %.1f); ", g + 1, x, df, chi2_limit(df));
        CHECK(df > 0 && x < chi2_limit(df), "token %d: the distributions differ", g + 1);
    }
    int64_t drafted = 0, accepted = 0, ld = 0, la = 0;
    plume_spec_stats(sp, NULL, &drafted, &accepted);
    plume_spec_source_stats(sp, PLUME_SPEC_LOOKUP, NULL, &ld, &la);
    printf("drafts accepted %lld of %lld, prompt lookup's %lld of %lld\n", (long long)accepted, (long long)drafted,
           (long long)la, (long long)ld);
    CHECK(accepted > 100 && drafted - accepted > 100, "accepted %lld of %lld", (long long)accepted, (long long)drafted);
    CHECK(combined ? la > 50 && ld - la > 50 && drafted > ld : ld == 0, "lookup %d: prompt lookup's %lld of %lld",
          combined, (long long)la, (long long)ld);
    for (int k = 0; k < 2; k++) free(cnt[k]);
    plume_spec_free(sp);
    plume_drafter_free(d);
    plume_session_free(s);
    plume_model_free(m);
}

/* The drafter alone, as above. */
static void test_sampling_distribution(void) { sampling_distribution(0); }

/* The drafter and prompt lookup together, as above. */
static void test_sampling_distribution_lookup(void) { sampling_distribution(1); }

/* ---- run and chat ------------------------------------------------------------------------- */

/* A q8 bundle with the tracking drafter inside (BUNDLE/drafter): plume run and a three-turn
 * plume chat print the same greedy text with the drafter (the default), with --drafter another
 * one, --draft 5, --no-lookup (the drafter alone) and without (--no-drafter, --draft 0); the
 * stats line says which drafted and what prompt lookup drafted beside the drafter;
 * sampling with a drafter runs; contradictory flags and a mismatched drafter are refused. */
static void test_run_chat(void) {
    char b[700], log[4096], cmd[3000], out[5][16384];
    snprintf(b, sizeof b, "%s/withd", tmp);
    t_sh(log, sizeof log, "cp -r %s %s && cp -r %s %s/drafter && printf 'hello hello\\nmore of it\\n/reset\\nagain\\n' > %s/turns",
         targets[2], b, drafters[1][2], b, tmp);
    const char *runs[2] = {"run -p 'la la la' --temp 0 -n 40", "chat --temp 0 -n 16 < %s/turns"};
    const char *flags[5] = {"--no-drafter --draft 0", "", "--draft 5", "--drafter %s", "--no-lookup"};
    for (int r = 0; r < 2; r++) {
        for (int f = 0; f < 5; f++) {
            char fl[700], rn[700];
            snprintf(fl, sizeof fl, flags[f], drafters[0][0]);
            snprintf(rn, sizeof rn, runs[r], tmp);
            snprintf(cmd, sizeof cmd, "{ %s/plume %s -m %s %s 2>/dev/null; }", t_build(), rn, b, fl);
            int st = t_sh(out[f], sizeof out[f], "%s", cmd);
            CHECK(st == 0 && strlen(out[f]) > 4, "%s: %d %s", cmd, st, out[f]);
        }
        CHECK(!strcmp(out[0], out[1]) && !strcmp(out[0], out[2]) && !strcmp(out[0], out[3]) && !strcmp(out[0], out[4]),
              "%s: the text differs with the drafter:\n%s\n%s\n%s\n%s\n%s", runs[r], out[0], out[1], out[2], out[3], out[4]);
    }
    int st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' --temp 0 -n 20", t_build(), b);
    CHECK(st == 0 && strstr(out[0], "| draft 3 (mtp): ") && strstr(out[0], " tokens/step, lookup "),
          "default: the drafter inside the bundle, with prompt lookup: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' --temp 0 -n 20 --no-lookup", t_build(), b);
    CHECK(st == 0 && strstr(out[0], "| draft 3 (mtp): ") && !strstr(out[0], "lookup"), "--no-lookup: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la' --temp 0 --no-lookup --no-drafter", t_build(), b);
    CHECK(st != 0 && strstr(out[0], "contradict"), "--no-lookup with --no-drafter: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la' --temp 0 --no-lookup", t_build(), targets[2]);
    CHECK(st != 0 && strstr(out[0], "no drafter"), "--no-lookup without a drafter: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' --temp 0 -n 20 --no-drafter", t_build(), b);
    CHECK(st == 0 && strstr(out[0], "| draft 3: "), "--no-drafter: prompt lookup: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' --seed 3 -n 20", t_build(), b);
    CHECK(st == 0 && !strstr(out[0], "draft"), "sampling: drafting off by default: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la la' --seed 3 -n 20 --draft 3", t_build(), b);
    CHECK(st == 0 && strstr(out[0], "| draft 3 (mtp): "), "sampling with the drafter: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la' --drafter %s --no-drafter", t_build(), b, drafters[0][0]);
    CHECK(st != 0 && strstr(out[0], "contradict"), "--drafter with --no-drafter: %s", out[0]);
    st = t_sh(out[0], sizeof out[0], "%s/plume run -m %s -p 'la' --temp 0 --drafter %s/bad", t_build(), b, tmp);
    CHECK(st != 0 && strstr(out[0], "does not match"), "a mismatched drafter: %s", out[0]);
}

int main(void) {
    setup();
    RUN(test_open);
    RUN(test_step_goldens);
    RUN(test_cli_step_chain);
    RUN(test_cli_traces);
    RUN(test_greedy_identity);
    RUN(test_lookup_combined);
    RUN(test_kv8);
    RUN(test_run_chat);
    RUN(test_bench_fixed);
    RUN(test_centroid_head);
    RUN(test_synth_drafter);
    RUN(test_sampling_distribution);
    RUN(test_sampling_distribution_lookup);
    char log[256];
    t_sh(log, sizeof log, "rm -rf %s", tmp);
    free(tmp);
    return t_total_failed ? 1 : 0;
}
