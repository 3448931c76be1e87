/* test_batch.c -- plume_batch: several sessions in one step give each session exactly the
 * logits it gets alone (memcmp, every ISA and weight type, q8/q4 with int8 activations and
 * exact, prefill chunks mixed with other sessions' decode tokens, float and int8 K/V), and the
 * limits of a batch are refused with clear errors; on tiny-a (E2B's structure) and tiny-e4b
 * (E4B's: 2 KV heads, caches shared from layers 4 and 5). Both have a sliding window of 8, so
 * the conversations wrap their rings; a 640-token conversation spans three attention blocks,
 * split across threads when alone. */
#include "model.h"
#include "t_tiny.h"

#define NS 4        /* sessions */
#define NGEN 6      /* greedy tokens after each prompt */
#define CHUNK 4     /* prefill tokens a session gives per batched step */
#define V 512

static char *tmp;
static char bundles[4][600];
static int32_t ids[64];

static plume_model *open_isa_as(const char *dir, const char *isa, int32_t exact) {
    return t_tiny_open(dir, isa, 2, exact);
}

/* The default: int8 activations for q8/q4 bundles. */
static plume_model *open_isa(const char *dir, const char *isa) { return open_isa_as(dir, isa, 0); }

static plume_session *new_session(plume_model *m, int32_t kv_bits, int32_t n_batch) {
    plume_session_params p = plume_session_default_params();
    p.kv_bits = kv_bits;
    p.n_batch = n_batch;
    p.n_ctx = 64;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_new(&s, m, &p, &err)) { printf("  %s\n", err); free(err); }
    return s;
}

static int32_t argmax(const float *x) {
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Session k's prompt: 5 + 3k tokens of the golden ids, shifted so the sessions differ. */
static int32_t prompt_len(int k) { return 5 + 3 * k; }
static const int32_t *prompt(int k) { return ids + k; }

/* Session k alone: the prompt (in steps of n_batch), then NGEN greedy tokens; logits after
 * the prompt and after every token, [NGEN + 1, V]. */
static void run_alone(plume_model *m, int k, int32_t kv_bits, int32_t n_batch, float *lg) {
    plume_session *s = new_session(m, kv_bits, n_batch);
    char *err = NULL;
    if (!s) return;
    int rc = plume_session_feed(s, prompt(k), prompt_len(k), lg, 0, &err);
    for (int g = 0; g < NGEN && !rc; g++) {
        int32_t id = argmax(lg + (size_t)g * V);
        rc = plume_session_feed(s, &id, 1, lg + (size_t)(g + 1) * V, 0, &err);
    }
    CHECK(!rc, "alone: %s", err ? err : "");
    free(err);
    plume_session_free(s);
}

/* The NS sessions together: every step holds a chunk of each prefilling session's prompt
 * (session k starts k steps late, so prefill and decode mix) and a token of each decoding
 * one. lg [NS, NGEN + 1, V] as run_alone. */
static void run_batched(plume_model *m, int32_t kv_bits, float *lg) {
    plume_session *s[NS];
    int32_t fed[NS] = {0}, gen[NS] = {0}, next[NS];
    plume_batch *b = NULL;
    char *err = NULL;
    CHECK(plume_batch_new(&b, m, 32, &err) == 0, "batch_new: %s", err ? err : "");
    for (int k = 0; k < NS; k++) s[k] = new_session(m, kv_bits, 64);
    for (int step = 0, busy = 1; busy && b && step < 200; step++) {
        busy = 0;
        for (int k = 0; k < NS; k++) {
            if (step < k || gen[k] == NGEN) continue;
            busy = 1;
            float *out = lg + ((size_t)k * (NGEN + 1) + gen[k]) * V;
            if (fed[k] < prompt_len(k)) {
                int32_t n = prompt_len(k) - fed[k] < CHUNK ? prompt_len(k) - fed[k] : CHUNK;
                int32_t got = plume_batch_add(b, s[k], prompt(k) + fed[k], n, fed[k] + n == prompt_len(k) ? out : NULL, 0, &err);
                CHECK(got == n, "add prefill: %d %s", got, err ? err : "");
                fed[k] += n;
            } else {
                int32_t got = plume_batch_add(b, s[k], &next[k], 1, out + V, 0, &err);
                CHECK(got == 1, "add decode: %d %s", got, err ? err : "");
                gen[k]++;
            }
        }
        CHECK(plume_batch_run(b, &err) == 0, "run: %s", err ? err : "");
        for (int k = 0; k < NS; k++)
            if (fed[k] == prompt_len(k) && gen[k] < NGEN) next[k] = argmax(lg + ((size_t)k * (NGEN + 1) + gen[k]) * V);
    }
    for (int k = 0; k < NS; k++) {
        CHECK(s[k] && plume_session_n_past(s[k]) == prompt_len(k) + NGEN, "session %d at %d", k,
              s[k] ? plume_session_n_past(s[k]) : -1);
        plume_session_free(s[k]);
    }
    free(err);
    plume_batch_free(b);
}

/* Compare every session's batched logits with its alone run, bit for bit. */
static void check_same(plume_model *m, int32_t kv_bits, int32_t alone_batch, const char *what) {
    size_t per = (size_t)(NGEN + 1) * V;
    float *alone = calloc(NS * per, 4), *batched = calloc(NS * per, 4);
    for (int k = 0; k < NS; k++) run_alone(m, k, kv_bits, alone_batch, alone + k * per);
    run_batched(m, kv_bits, batched);
    for (int k = 0; k < NS; k++) {
        size_t diff = 0;
        for (size_t i = 0; i < per; i++) diff += memcmp(&alone[k * per + i], &batched[k * per + i], 4) != 0;
        CHECK(diff == 0, "%s: session %d: %zu of %zu logits differ from the session alone", what, k, diff, per);
    }
    free(alone);
    free(batched);
}

static void test_batched_equals_alone_every_isa_and_weight(void) {
    const char *isas[8];
    int n = plume_kernels_available(isas, 8);
    for (int w = 0; w < 6; w++) /* q8 and q4 twice: int8 activations (default), then exact */
        for (int i = 0; i < n; i++) {
            const int b = w < 4 ? w : w - 2;
            plume_model *m = open_isa_as(bundles[b], isas[i], w >= 4);
            CHECK(m, "open %s", bundles[b]);
            if (!m) continue;
            char what[64];
            snprintf(what, sizeof what, "%s %s%s", t_tiny_wnames[b], isas[i], w >= 4 ? " exact" : "");
            check_same(m, 32, 64, what); /* alone: whole prompt in one step */
            plume_model_free(m);
        }
}

static void test_batched_kv8_equals_alone(void) {
    /* int8 K/V: a query sees the earlier rows of its own step rounded as the cache holds
     * them, so the chunking does not matter either: alone in the batch's chunks, and alone
     * with the whole prompt in one step */
    plume_model *m = open_isa(bundles[2], NULL);
    if (m) check_same(m, 8, CHUNK, "q8 kv8, same chunks");
    if (m) check_same(m, 8, 64, "q8 kv8, whole prompt");
    plume_model_free(m);
}

/* Long conversations: the full layers' keys span several attention blocks. A session
 * decoding alone (one row: its blocks split across the two threads) must give the bits it
 * gets in a batch of two (whole rows per thread), float and int8 caches, every ISA. */
#define LONG_PROMPT 640 /* a multiple of LONG_CHUNK */
#define LONG_CHUNK 32

/* A long prompt (all ids < V) and LONG_GEN greedy tokens: alone, or beside a twin in a batch;
 * logits after the prompt and every token into lg [LONG_GEN + 1, V]. */
#define LONG_GEN 3
static void run_long(plume_model *m, int32_t kv_bits, int batched, float *lg) {
    static int32_t prompt_ids[LONG_PROMPT];
    for (int32_t i = 0; i < LONG_PROMPT; i++) prompt_ids[i] = (ids[i % 48] + 7 * (i / 48)) % V;
    plume_session_params p = plume_session_default_params();
    p.kv_bits = kv_bits;
    p.n_batch = LONG_CHUNK;
    p.n_ctx = LONG_PROMPT + 16;
    plume_session *s[2] = {NULL, NULL};
    plume_batch *b = NULL;
    char *err = NULL;
    int rc = plume_session_new(&s[0], m, &p, &err) || plume_session_new(&s[1], m, &p, &err) ||
             plume_batch_new(&b, m, 2 * LONG_CHUNK, &err);
    for (int32_t at = 0; !rc && at < LONG_PROMPT; at += LONG_CHUNK) { /* the same chunks either way */
        float *out = at + LONG_CHUNK >= LONG_PROMPT ? lg : NULL;
        for (int k = 0; !rc && k < 1 + batched; k++)
            rc = plume_batch_add(b, s[k], prompt_ids + at, LONG_CHUNK, k == 0 ? out : NULL, 0, &err) != LONG_CHUNK;
        if (!rc) rc = plume_batch_run(b, &err);
    }
    for (int g = 0; !rc && g < LONG_GEN; g++) {
        int32_t id = argmax(lg + (size_t)g * V);
        if (!batched) rc = plume_session_feed(s[0], &id, 1, lg + (size_t)(g + 1) * V, 0, &err);
        for (int k = 0; batched && !rc && k < 2; k++)
            rc = plume_batch_add(b, s[k], &id, 1, k == 0 ? lg + (size_t)(g + 1) * V : NULL, 0, &err) != 1;
        if (batched && !rc) rc = plume_batch_run(b, &err);
    }
    CHECK(!rc, "long %s: %s", batched ? "batched" : "alone", err ? err : "");
    free(err);
    plume_batch_free(b);
    plume_session_free(s[0]);
    plume_session_free(s[1]);
}

static void test_long_split_attention_equals_whole_rows(void) {
    const char *isas[8];
    int n = plume_kernels_available(isas, 8);
    size_t per = (size_t)(LONG_GEN + 1) * V;
    float *alone = calloc(per, 4), *batched = calloc(per, 4);
    for (int i = 0; alone && batched && i < n; i++)
        for (int32_t kv_bits = 8; kv_bits <= 32; kv_bits += 24) {
            plume_model *m = open_isa(bundles[2], isas[i]);
            CHECK(m, "open %s", bundles[2]);
            if (!m) continue;
            run_long(m, kv_bits, 0, alone);
            run_long(m, kv_bits, 1, batched);
            size_t diff = 0;
            for (size_t j = 0; j < per; j++) diff += memcmp(&alone[j], &batched[j], 4) != 0;
            CHECK(diff == 0, "%s kv_bits %d: %zu of %zu logits differ alone and batched", isas[i], kv_bits, diff, per);
            plume_model_free(m);
        }
    free(alone);
    free(batched);
}

static void test_limits_refused(void) {
    plume_model *m = open_isa(bundles[0], NULL), *m2 = open_isa(bundles[1], NULL);
    plume_batch *b = NULL;
    char *err = NULL;
    CHECK(m && m2 && plume_batch_new(&b, m, 8, &err) == 0, "setup");
    if (!b) return;
    plume_session *s = new_session(m, 32, 64), *s2 = new_session(m, 32, 64), *o = new_session(m2, 32, 64);
    int32_t bad = V, got;
    got = plume_batch_add(b, o, ids, 2, NULL, 0, &err);
    CHECK(got == PLUME_EINVAL && err && strstr(err, "another model"), "other model: %d %s", got, err ? err : "");
    free(err), err = NULL;
    got = plume_batch_add(b, s, &bad, 1, NULL, 0, &err);
    CHECK(got == PLUME_EINVAL && err && strstr(err, "vocabulary"), "bad id: %d %s", got, err ? err : "");
    free(err), err = NULL;
    CHECK(plume_batch_add(b, s, ids, 10, NULL, 0, &err) == 8, "takes what fits: %s", err ? err : "");
    got = plume_batch_add(b, s2, ids, 1, NULL, 0, &err);
    CHECK(got == PLUME_EINVAL && err && strstr(err, "full"), "full batch: %d %s", got, err ? err : "");
    free(err), err = NULL;
    plume_batch_clear(b);
    CHECK(plume_batch_n_tokens(b) == 0 && plume_session_n_past(s) == 0, "clear leaves the session unchanged");
    CHECK(plume_batch_add(b, s, ids, 2, NULL, 0, &err) == 2, "add");
    got = plume_batch_add(b, s, ids, 2, NULL, 0, &err);
    CHECK(got == PLUME_EINVAL && err && strstr(err, "already"), "twice: %d %s", got, err ? err : "");
    free(err), err = NULL;
    CHECK(plume_batch_run(b, &err) == 0 && plume_session_n_past(s) == 2, "run");
    CHECK(plume_batch_run(b, &err) == 0, "empty run is a no-op");
    /* a full context */
    plume_session_params p = plume_session_default_params();
    p.n_ctx = 4;
    plume_session *small = NULL;
    CHECK(plume_session_new(&small, m, &p, &err) == 0, "small");
    CHECK(plume_batch_add(b, small, ids, 6, NULL, 0, &err) == 4, "context room");
    CHECK(plume_batch_run(b, &err) == 0, "run small");
    got = plume_batch_add(b, small, ids, 1, NULL, 0, &err);
    CHECK(got == PLUME_ERANGE, "full context: %d", got);
    free(err), err = NULL;
    /* a step ends at the session's next snapshot, so rewinds stay exact */
    p.n_ctx = 64;
    p.snapshot_every = 16;
    p.n_rewind = 0;
    plume_session *sn = NULL, *ref = NULL;
    CHECK(plume_session_new(&sn, m, &p, &err) == 0 && plume_session_new(&ref, m, &p, &err) == 0, "snap sessions");
    CHECK(plume_batch_add(b, sn, ids, 10, NULL, 0, &err) == 8, "batch room first");
    plume_batch_clear(b);
    CHECK(plume_batch_add(b, sn, ids, 6, NULL, 0, &err) == 6 && plume_batch_run(b, &err) == 0, "6");
    CHECK(plume_batch_add(b, sn, ids + 6, 8, NULL, 0, &err) == 8 && plume_batch_run(b, &err) == 0, "8");
    CHECK(plume_batch_add(b, sn, ids + 14, 8, NULL, 0, &err) == 2, "cut at the snapshot at 16");
    CHECK(plume_batch_run(b, &err) == 0, "run");
    for (int32_t at = 16; at < 40; ) {
        int32_t g = plume_batch_add(b, sn, ids + at, 40 - at, NULL, 0, &err);
        CHECK(g > 0 && plume_batch_run(b, &err) == 0, "feed %d", at);
        if (g <= 0) break;
        at += g;
    }
    /* rewind far back (needs the snapshot the batch took) equals a fresh prefill */
    float a[V], f[V];
    CHECK(plume_session_rewind(sn, 20, &err) == 0 && plume_session_feed(sn, ids + 20, 3, a, 0, &err) == 0, "rewind");
    CHECK(plume_session_feed(ref, ids, 23, f, 0, &err) == 0, "fresh");
    CHECK(t_max_abs(a, f, V) <= 2e-3, "rewind after batched steps: max abs %g", t_max_abs(a, f, V));
    free(err);
    plume_session_free(sn);
    plume_session_free(ref);
    plume_session_free(small);
    plume_session_free(s);
    plume_session_free(s2);
    plume_session_free(o);
    plume_batch_free(b);
    plume_model_free(m);
    plume_model_free(m2);
}

int main(void) {
    tmp = t_tmpdir("batch");
    char out[4096];
    t_tiny_bundles("tiny-a", tmp, bundles);
    t_tiny_ids("tiny-a", ids, 64);
    RUN(test_batched_equals_alone_every_isa_and_weight);
    RUN(test_batched_kv8_equals_alone);
    RUN(test_long_split_attention_equals_whole_rows);
    RUN(test_limits_refused);
    /* E4B's structure: 2 KV heads (4 query heads each) and caches shared from layers 4 and 5 */
    t_tiny_bundles("tiny-e4b", tmp, bundles);
    t_tiny_ids("tiny-e4b", ids, 64);
    RUN_ON("tiny-e4b", test_batched_equals_alone_every_isa_and_weight);
    RUN_ON("tiny-e4b", test_batched_kv8_equals_alone);
    RUN_ON("tiny-e4b", test_long_split_attention_equals_whole_rows);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
