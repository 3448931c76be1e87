/* test_session.c -- stateful sessions: save -> load in a new process -> continue equals the
 * uninterrupted run; rewinds (to 0, inside the window, far before it) and prefix reuse equal
 * fresh prefills; foreign, truncated and corrupt state files are refused; on tiny-a (E2B's
 * structure) and most of it again on tiny-e4b (E4B's). Both have a sliding window of 8, so 48
 * tokens wrap the rings six times. */
#include <pthread.h>
#include <unistd.h>

#include "model.h"
#include "npy.h"
#include "safetensors.h"
#include "t.h"
#include "t_tiny.h"

#define LOGITS_REL_RMS 1e-4 /* shared/golden/README.md */
#define LOGITS_MAX_ABS 2e-3

static char *tmp;
static char f32b[600], bf16b[600], synb[600];
static int32_t ids[64], n_ids;
static float *gold; /* logits_q8emb [48, 512] */

/* Read an .npy into floats (malloc'd). */
static float *load_npy(const char *path, int64_t *n) {
    plume_map m;
    npy_view v;
    char *err = NULL;
    if (npy_open(path, &m, &v, &err)) { printf("  %s\n", err); free(err); return NULL; }
    float *f = malloc((size_t)v.count * 4);
    npy_to_f32(&v, f);
    *n = v.count;
    plume_map_free(&m);
    return f;
}

/* A bundle on two threads with kernels isa (NULL: the best). */
static plume_model *open_isa(const char *dir, const char *isa) { return t_tiny_open(dir, isa, 2, 0); }

static plume_session *new_session(plume_model *m, int32_t n_rewind, int32_t snap_every, int32_t n_batch) {
    plume_session_params p = plume_session_default_params();
    p.n_rewind = n_rewind;
    p.snapshot_every = snap_every;
    p.n_batch = n_batch;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_new(&s, m, &p, &err)) { printf("  %s\n", err); free(err); }
    return s;
}

/* Logits of ids[from..n) fed after a rewind to `from` equal the golden rows. */
static void check_rows(const float *lg, int32_t from, int32_t to, const char *what) {
    size_t cnt = (size_t)(to - from) * 512;
    double rr = t_rel_rms(lg, gold + (size_t)from * 512, cnt), ma = t_max_abs(lg, gold + (size_t)from * 512, cnt);
    CHECK(rr <= LOGITS_REL_RMS && ma <= LOGITS_MAX_ABS, "%s: rel rms %.3g max abs %.3g", what, rr, ma);
}

/* Rewind to n_keep after all 48 tokens, feed the rest again: golden logits, and with the
 * scalar kernels (row results independent of batching) bit-identical to a fresh session. */
static void rewind_case(const char *isa, int32_t n_rewind, int32_t snap, int32_t n_keep) {
    plume_model *m = open_isa(f32b, isa);
    if (!m) { CHECK(0, "open"); return; }
    plume_session *s = new_session(m, n_rewind, snap, 5), *fresh = new_session(m, n_rewind, snap, 5);
    char *err = NULL;
    float *a = malloc(48 * 512 * 4), *b = malloc(48 * 512 * 4);
    CHECK(plume_session_feed(s, ids, n_ids, NULL, 0, &err) == 0, "feed");
    CHECK(plume_session_rewind(s, n_keep, &err) == 0, "rewind to %d: %s", n_keep, err ? err : "");
    CHECK(plume_session_n_past(s) == n_keep, "n_past after rewind");
    CHECK(plume_session_feed(s, ids + n_keep, n_ids - n_keep, a, 1, &err) == 0, "refeed");
    if (n_keep > 0) CHECK(plume_session_feed(fresh, ids, n_keep, NULL, 0, &err) == 0, "fresh prefix");
    CHECK(plume_session_feed(fresh, ids + n_keep, n_ids - n_keep, b, 1, &err) == 0, "fresh rest");
    char what[128];
    snprintf(what, sizeof what, "%s rewind %d->%d (ring +%d, snapshots every %d)", isa ? isa : "best", n_ids, n_keep, n_rewind, snap);
    check_rows(a, n_keep, n_ids, what);
    if (isa && !strcmp(isa, "scalar"))
        CHECK(!memcmp(a, b, (size_t)(n_ids - n_keep) * 512 * 4), "%s: not bit-identical to a fresh prefill", what);
    free(a);
    free(b);
    plume_session_free(s);
    plume_session_free(fresh);
    plume_model_free(m);
}

static void test_rewind_to_zero(void) {
    rewind_case("scalar", 8, 16, 0);
    rewind_case(NULL, 8, 16, 0);
}

static void test_rewind_inside_window(void) {
    rewind_case("scalar", 8, 16, 44);  /* 4 back: the ring holds the window */
    rewind_case("scalar", 0, -1, 47);  /* a ring of exactly W slots rewinds one token */
    rewind_case(NULL, 8, 16, 40);
}

static void test_rewind_far_before_window(void) {
    rewind_case("scalar", 8, 16, 30);  /* from the snapshot at 16 */
    rewind_case("scalar", 8, 16, 17);
    rewind_case("scalar", 0, -1, 21);  /* no snapshots: recomputed from 0 */
    rewind_case("scalar", 8, 7, 3);
    rewind_case(NULL, 0, 4, 9);
}

/* Two rewinds in a row (a speculative step's rejected guesses, then a new prompt's prefix): the
 * second is judged from the highest position fed, 48, not from n_past, 44: its slots were
 * written over. 48 -> 44 -> 38 with a ring of W + 8 is 10 back, past the free 9: the rewind
 * point is a snapshot's (32) or 0, and the refeed gives the golden logits, bit-identical to a
 * fresh prefill (scalar). (Judged from 44 it read three slots of positions 48 - W - 8 .. .) */
static void test_rewind_twice(void) {
    for (int c = 0; c < 2; c++) {
        plume_model *m = open_isa(f32b, "scalar");
        if (!m) { CHECK(0, "open"); return; }
        plume_session *s = new_session(m, 8, c ? 16 : -1, 5), *fresh = new_session(m, 8, c ? 16 : -1, 5);
        char *err = NULL;
        float *a = malloc(48 * 512 * 4), *b = malloc(48 * 512 * 4);
        CHECK(plume_session_feed(s, ids, n_ids, NULL, 0, &err) == 0, "feed");
        CHECK(plume_session_rewind(s, 44, &err) == 0 && plume_session_rewind_point(s, 44) == 44, "the first rewind");
        int32_t p = plume_session_rewind_point(s, 38);
        CHECK(p == (c ? 32 : 0), "case %d: the rewind point of 38 after 48 -> 44 is %d", c, p);
        CHECK(plume_session_rewind(s, 38, &err) == 0 && plume_session_n_past(s) == 38, "rewind to 38");
        CHECK(plume_session_feed(s, ids + 38, n_ids - 38, a, 1, &err) == 0, "refeed");
        CHECK(plume_session_feed(fresh, ids, 38, NULL, 0, &err) == 0 &&
              plume_session_feed(fresh, ids + 38, n_ids - 38, b, 1, &err) == 0, "fresh");
        check_rows(a, 38, n_ids, "48 -> 44 -> 38");
        CHECK(!memcmp(a, b, (size_t)(n_ids - 38) * 512 * 4), "case %d: not bit-identical to a fresh prefill", c);
        /* and a rewind within reach of the highest position is still free */
        CHECK(plume_session_rewind(s, 44, &err) == 0 && plume_session_rewind_point(s, 40) == 40, "free again");
        free(a);
        free(b);
        plume_session_free(s);
        plume_session_free(fresh);
        plume_model_free(m);
    }
}

/* The no-cost rewind point follows the ring and the snapshots, and a rewind there is exact. */
static void test_rewind_point(void) {
    const int32_t keep[] = {44, 40, 30, 17, 16, 3, 0};
    const int32_t want_snap[] = {44, 40, 16, 16, 16, 0, 0};  /* ring +8, snapshots every 16 */
    const int32_t want_none[] = {47, 0, 0, 0, 0, 0, 0};       /* ring of W slots, no snapshots */
    for (int c = 0; c < 2; c++) {
        plume_model *m = open_isa(f32b, "scalar");
        if (!m) { CHECK(0, "open"); return; }
        plume_session *s = c ? new_session(m, 0, -1, 16) : new_session(m, 8, 16, 16);
        char *err = NULL;
        CHECK(plume_session_feed(s, ids, n_ids, NULL, 0, &err) == 0, "feed");
        for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
            int32_t k = c && i == 0 ? 47 : keep[i], want = c ? want_none[i] : want_snap[i];
            int32_t got = plume_session_rewind_point(s, k);
            CHECK(got == want, "case %d: rewind point of %d is %d, want %d", c, k, got, want);
        }
        CHECK(plume_session_rewind_point(s, 99) == n_ids && plume_session_rewind_point(s, -1) == 0, "out of range");
        float *lg = malloc((size_t)n_ids * 512 * 4);
        int32_t p = plume_session_rewind_point(s, 30);
        CHECK(plume_session_rewind(s, p, &err) == 0 && plume_session_n_past(s) == p, "rewind to %d", p);
        CHECK(plume_session_feed(s, ids + p, n_ids - p, lg, 1, &err) == 0, "refeed");
        check_rows(lg, p, n_ids, "after a free rewind");
        free(lg);
        plume_session_free(s);
        plume_model_free(m);
    }
}

/* A new prompt that shares a prefix with the session prefills only the rest. */
static void test_prefix_reuse(void) {
    plume_model *m = open_isa(f32b, "scalar");
    if (!m) { CHECK(0, "open"); return; }
    plume_session *s = new_session(m, 8, 16, 64);
    char *err = NULL;
    int32_t other[44];
    memcpy(other, ids, 40 * 4);
    other[40] = 5; other[41] = 6; other[42] = 7; other[43] = 8;
    float *lg = malloc(512 * 4);
    CHECK(plume_session_feed(s, other, 44, NULL, 0, &err) == 0, "feed");
    int32_t reused = -1;
    CHECK(plume_session_feed_prompt(s, ids, n_ids, lg, &reused, &err) == 0, "feed_prompt");
    CHECK(reused == 40, "reused %d, want 40", reused);
    CHECK(t_max_abs(lg, gold + 47 * 512, 512) <= LOGITS_MAX_ABS, "last logits differ from golden");
    /* the same prompt again: everything but the last token is reused */
    CHECK(plume_session_feed_prompt(s, ids, n_ids, lg, &reused, &err) == 0 && reused == n_ids - 1, "reuse all: %d", reused);
    /* diverging 30 tokens back (far past the window of 8) */
    CHECK(plume_session_feed_prompt(s, ids, 18, lg, &reused, &err) == 0 && reused == 17, "shorter prompt: %d", reused);
    CHECK(t_max_abs(lg, gold + 17 * 512, 512) <= LOGITS_MAX_ABS, "logits after a deep divergence");
    free(lg);
    plume_session_free(s);
    plume_model_free(m);
}

/* save -> load in a new process -> continue, through the CLI, equals the uninterrupted run. */
static void test_save_load_new_process(void) {
    const char *bundles[2] = {f32b, synb};
    for (int bi = 0; bi < 2; bi++) {
        char out[8192], a[2048] = "", b[2048] = "";
        for (int i = 0; i < n_ids; i++) {
            char x[16];
            snprintf(x, sizeof x, "%s%d", i ? "," : "", ids[i]);
            strcat(i < 20 ? a : b, i == 20 ? x + 1 : x);
        }
        char st[700], o1[700], o2[700], full[700];
        snprintf(st, sizeof st, "%s/s%d.state", tmp, bi);
        snprintf(o1, sizeof o1, "%s/o1-%d.npy", tmp, bi);
        snprintf(o2, sizeof o2, "%s/o2-%d.npy", tmp, bi);
        snprintf(full, sizeof full, "%s/full-%d.npy", tmp, bi);
        int rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids %s --step 5 --save-state %s -o %s", t_build(),
                      bundles[bi], a, st, o1);
        CHECK(rc == 0, "save: %s", out);
        rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids %s --step 5 --load-state %s -o %s", t_build(),
                  bundles[bi], b, st, o2);
        CHECK(rc == 0, "load: %s", out);
        rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids %s,%s --step 5 -o %s", t_build(), bundles[bi], a, b, full);
        CHECK(rc == 0, "full: %s", out);
        int64_t n1, n2, nf;
        float *l1 = load_npy(o1, &n1), *l2 = load_npy(o2, &n2), *lf = load_npy(full, &nf);
        CHECK(l1 && l2 && lf && n1 + n2 == nf, "shapes");
        if (l1 && l2 && lf && n1 + n2 == nf) {
            CHECK(!memcmp(lf, l1, (size_t)n1 * 4) && !memcmp(lf + n1, l2, (size_t)n2 * 4),
                  "bundle %d: save/load/continue differs from the uninterrupted run", bi);
            if (bi == 0) check_rows(l2, 20, 48, "continued after load");
        }
        free(l1);
        free(l2);
        free(lf);
    }
}

/* Expect plume_session_load to fail with code and a message containing want. */
static void expect_load_fails(const char *bundle, const char *state, int code, const char *want) {
    plume_model *m = open_isa(bundle, NULL);
    if (!m) { CHECK(0, "open"); return; }
    plume_session *s = NULL;
    char *err = NULL;
    int rc = plume_session_load(&s, m, state, &err);
    CHECK(rc == code && !s, "load %s: rc %d, want %d (%s)", state, rc, code, want);
    CHECK(err && strstr(err, want), "message lacks '%s': %s", want, err ? err : "(none)");
    free(err);
    plume_model_free(m);
}

static void test_foreign_truncated_corrupt_refused(void) {
    char st[700], cp[700], out[2048];
    snprintf(st, sizeof st, "%s/s0.state", tmp);
    expect_load_fails(bf16b, st, PLUME_EMISMATCH, "another bundle");
    expect_load_fails(synb, st, PLUME_EMISMATCH, "another bundle");
    snprintf(cp, sizeof cp, "%s/trunc.state", tmp);
    t_sh(out, sizeof out, "head -c 5000 '%s' > '%s'", st, cp);
    expect_load_fails(f32b, cp, PLUME_EFORMAT, "truncated");
    snprintf(cp, sizeof cp, "%s/flip.state", tmp);
    t_sh(out, sizeof out, "cp '%s' '%s' && printf '\\001' | dd of='%s' bs=1 seek=3000 conv=notrunc 2>/dev/null", st, cp, cp);
    expect_load_fails(f32b, cp, PLUME_EFORMAT, "checksum");
    /* the CLI says it in one line and exits non-zero */
    int rc = t_sh(out, sizeof out, "%s/plume logits -m %s --ids 5 --load-state %s/flip.state -o %s/x.npy", t_build(),
                  f32b, tmp, tmp);
    CHECK(rc > 0 && strstr(out, "checksum"), "cli: %d %s", rc, out);
    t_sh(out, sizeof out, "printf 'hello' > '%s'", cp);
    expect_load_fails(f32b, cp, PLUME_EFORMAT, "not a plume state file");
}

/* Several sessions on one model, stepping at the same time from different threads, each give
 * the logits of a session alone (the model is read-only; its thread pool serves one caller at
 * a time and the others run alone). */
typedef struct {
    plume_model *m;
    float *lg;
    int rc;
} conc_arg;

static void *conc_main(void *p) {
    conc_arg *a = p;
    plume_session *s = new_session(a->m, 8, 16, 3);
    char *err = NULL;
    a->rc = s ? 0 : -1;
    for (int32_t i = 0; s && !a->rc && i < n_ids; i += 3)
        a->rc = plume_session_feed(s, ids + i, n_ids - i < 3 ? n_ids - i : 3, a->lg + (size_t)i * 512, 1, &err);
    free(err);
    plume_session_free(s);
    return NULL;
}

static void test_concurrent_sessions_share_a_model(void) {
    plume_model *m = open_isa(f32b, "scalar");
    if (!m) { CHECK(0, "open"); return; }
    conc_arg a[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (conc_arg){m, malloc(48 * 512 * 4), -1};
        pthread_create(&th[i], NULL, conc_main, &a[i]);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        CHECK(a[i].rc == 0, "session %d failed", i);
        check_rows(a[i].lg, 0, n_ids, "concurrent session");
        if (i) {
            int first = -1;
            for (int k = 0; k < 48 * 512 && first < 0; k++)
                if (a[i].lg[k] != a[0].lg[k]) first = k;
            CHECK(first < 0, "concurrent sessions %d and 0 differ first at row %d col %d (%.9g vs %.9g)", i,
                  first / 512, first % 512, first >= 0 ? a[i].lg[first] : 0.0, first >= 0 ? a[0].lg[first] : 0.0);
        }
    }
    for (int i = 0; i < 3; i++) free(a[i].lg);
    plume_model_free(m);
}

/* 8-bit full-attention caches: the error against the float cache, measured on the golden model
 * (which amplifies perturbations 20-40x): 0.75% relative RMS for q8 weights; a broken
 * quantizer gives O(1). The scale per row and KV head keeps it small. And the int8 caches
 * survive save -> load bit for bit. */
#define KV8_REL_RMS 0.03

static void test_kv8_error_and_state(void) {
    plume_model *m = open_isa(f32b, NULL);
    if (!m) { CHECK(0, "open"); return; }
    plume_session_params p = plume_session_default_params();
    p.kv_bits = 8;
    p.n_batch = 5;
    plume_session *s = NULL, *t = NULL;
    char *err = NULL;
    CHECK(plume_session_new(&s, m, &p, &err) == 0, "kv8 session: %s", err ? err : "");
    if (!s) { plume_model_free(m); return; }
    float *lg = malloc(48 * 512 * 4), *lg2 = malloc(48 * 512 * 4);
    CHECK(plume_session_feed(s, ids, 20, lg, 1, &err) == 0, "feed");
    char st[700];
    snprintf(st, sizeof st, "%s/kv8.state", tmp);
    CHECK(plume_session_save(s, st, &err) == 0, "save: %s", err ? err : "");
    CHECK(plume_session_feed(s, ids + 20, n_ids - 20, lg + 20 * 512, 1, &err) == 0, "feed rest");
    double rr = t_rel_rms(lg, gold, 48 * 512);
    printf("  kv8: logits vs the float-cache golden: rel rms %.3g\n", rr);
    CHECK(rr <= KV8_REL_RMS && rr > 1e-5, "kv8 rel rms %.3g", rr);
    CHECK(plume_session_load(&t, m, st, &err) == 0, "load: %s", err ? err : "");
    if (t) {
        CHECK(plume_session_feed(t, ids + 20, n_ids - 20, lg2 + 20 * 512, 1, &err) == 0, "feed after load");
        CHECK(!memcmp(lg + 20 * 512, lg2 + 20 * 512, (size_t)(n_ids - 20) * 512 * 4), "kv8 save/load/continue differs");
    }
    p.kv_bits = 12;
    plume_session *bad = NULL;
    free(err);
    err = NULL;
    CHECK(plume_session_new(&bad, m, &p, &err) == PLUME_EINVAL && err && strstr(err, "kv_bits"), "kv_bits 12 accepted");
    free(err);
    free(lg);
    free(lg2);
    plume_session_free(s);
    plume_session_free(t);
    plume_model_free(m);
}

/* ---- untrusted state files (issue 11, defect 3) ------------------------------------------ */

/* A copy of state file src at dst with patch(b, size) applied and the checksum recomputed, as
 * anyone can: only validation stands between such a file and the session. */
static void forge_state(const char *src, const char *dst, void (*patch)(uint8_t *b, size_t n, void *arg), void *arg) {
    char *buf = NULL, *err = NULL;
    size_t n = 0;
    if (plume_read_file(src, &buf, &n, &err) || n < 72) { CHECK(0, "read %s: %s", src, err ? err : "short"); free(err); free(buf); return; }
    uint8_t *b = (uint8_t *)buf;
    patch(b, n, arg);
    uint64_t payload = n - 72, h = 1469598103934665603ull;
    for (uint64_t i = 0; i < payload; i++) h = (h ^ b[64 + i]) * 1099511628211ull;
    memcpy(b + 64 + payload, &h, 8);
    FILE *f = fopen(dst, "wb");
    if (f) { fwrite(b, 1, n, f); fclose(f); }
    free(buf);
}

/* Write the float (*(float *)arg) at payload offset arg+8 (a size_t). */
typedef struct { size_t at; float value; } float_patch;
static void patch_float(uint8_t *b, size_t n, void *arg) {
    float_patch *p = arg;
    if (64 + p->at + 4 <= n - 8) memcpy(b + 64 + p->at, &p->value, 4);
}

/* Set header field i (the i32 at 24 + 4 i; i = -1: kv_bits at 12) to *(int32_t *)arg. */
typedef struct { int field; int32_t value; } field_patch;
static void patch_field(uint8_t *b, size_t n, void *arg) {
    field_patch *p = arg;
    (void)n;
    memcpy(b + (p->field < 0 ? 12 : 24 + 4 * p->field), &p->value, 4);
}

/* Payload offset of the K scales of the first full-attention cache of a kv_bits 8 state with
 * n_past tokens (the layout of session.c's comment). */
static size_t kv8_scale_offset(const plume_model *m, int32_t n_past, int32_t n_ctx, int32_t n_rewind) {
    const plume_config *c = &m->c;
    size_t at = (size_t)n_past * 4;
    for (int32_t l = 0; l < c->L; l++) {
        if (c->kv_src[l] != l) continue;
        int ring = !c->is_full[l] && c->W + n_rewind < n_ctx;
        size_t rows = ring ? (size_t)(c->W + n_rewind) : (size_t)n_past, width = (size_t)c->Hkv * (size_t)c->hd[l];
        if (!ring) return at + rows * width;
        at += 2 * rows * width * 4;
    }
    return 0;
}

static void test_state_values_validated(void) {
    char st[700], bad[700], kv8[700];
    snprintf(st, sizeof st, "%s/s0.state", tmp);
    snprintf(bad, sizeof bad, "%s/forged.state", tmp);
    snprintf(kv8, sizeof kv8, "%s/kv8.state", tmp);
    /* a NaN and an inf in a float cache (s0.state holds 20 tokens: the caches start at 80) */
    float_patch nan_k = {80 + 12, NAN}, inf_k = {80 + 4 * 100, INFINITY};
    forge_state(st, bad, patch_float, &nan_k);
    expect_load_fails(f32b, bad, PLUME_EFORMAT, "non-finite");
    forge_state(st, bad, patch_float, &inf_k);
    expect_load_fails(f32b, bad, PLUME_EFORMAT, "non-finite");
    /* a NaN and a negative int8 scale: the next step would have cast NaN to int8 */
    plume_model *m = open_isa(f32b, NULL);
    if (!m) { CHECK(0, "open"); return; }
    float_patch nan_s = {kv8_scale_offset(m, 20, m->c.n_ctx, m->c.W), NAN}, neg_s = nan_s;
    neg_s.value = -1.0f;
    plume_model_free(m);
    forge_state(kv8, bad, patch_float, &nan_s);
    expect_load_fails(f32b, bad, PLUME_EFORMAT, "non-finite");
    forge_state(kv8, bad, patch_float, &neg_s);
    expect_load_fails(f32b, bad, PLUME_EFORMAT, "non-finite");
    /* header fields checked before anything is sized from them */
    struct { field_patch p; const char *want; } hdr[] = {
        {{0, 1 << 30}, "max_position_embeddings"},   /* a huge context */
        {{0, 2048}, "inconsistent"},                 /* a legal context (s0 has 4096), another payload */
        {{0, -5}, "context"},
        {{2, INT32_MAX - 3}, "does not match"},      /* n_rewind */
        {{6, 0}, "inconsistent"},                    /* n_batch */
        {{6, INT32_MAX}, "inconsistent"},
        {{3, 1}, "inconsistent"},                    /* snapshot_every vs n_snap */
        {{5, 1 << 20}, "inconsistent"},              /* snap_valid */
        {{-1, 12}, "kv_bits"},
        {{-1, 8}, "does not match"},
    };
    for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) {
        forge_state(st, bad, patch_field, &hdr[i].p);
        expect_load_fails(f32b, bad, PLUME_EFORMAT, hdr[i].want);
    }
}

/* K/V that are not finite (NaN weights, here a NaN norm) are stored in an int8 cache as 0,
 * not cast (undefined; UBSan's float-cast-overflow reports it). */
static void test_kv8_nonfinite_rows(void) {
    char b[700], out[2048], chunk[800];
    snprintf(b, sizeof b, "%s/nan", tmp);
    t_sh(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", b, f32b, b);
    st_file f;
    char *err = NULL;
    snprintf(chunk, sizeof chunk, "%s/chunk_1.safetensors", b);
    if (st_open(&f, chunk, &err)) { CHECK(0, "%s", err); free(err); return; }
    const st_tensor *t = st_find(&f, "layers.0.input_layernorm.weight");
    CHECK(t != NULL, "no layers.0.input_layernorm.weight");
    FILE *fp = fopen(chunk, "r+b");
    float nan = NAN;
    if (t && fp && fseek(fp, (long)t->offset, SEEK_SET) == 0) fwrite(&nan, 4, 1, fp);
    if (fp) fclose(fp);
    st_close(&f);
    plume_model *m = open_isa(b, NULL);
    if (!m) { CHECK(0, "open"); return; }
    plume_session_params p = plume_session_default_params();
    p.kv_bits = 8;
    plume_session *s = NULL;
    CHECK(plume_session_new(&s, m, &p, &err) == 0, "session");
    float *lg = malloc(512 * 4);
    CHECK(s && plume_session_feed(s, ids, 8, lg, 0, &err) == 0, "feed: %s", err ? err : "");
    plume_session_free(s);
    free(lg);
    free(err);
    plume_model_free(m);
}

/* Long context: KV memory grows only for the full layers; too long a context is refused. */
static void test_long_context(void) {
    plume_model *m = open_isa(f32b, NULL);
    if (!m) { CHECK(0, "open"); return; }
    plume_session_params p = plume_session_default_params();
    p.n_ctx = 4096;
    plume_session *s = NULL;
    char *err = NULL;
    CHECK(plume_session_new(&s, m, &p, &err) == 0, "ctx 4096: %s", err ? err : "");
    if (s) {
        for (int32_t l = 0; l < m->c.L; l++) {
            plume_kv *kv = s->kv_of[l];
            CHECK(kv->slots == (m->c.is_full[l] ? 4096 : m->c.W + m->c.W), "layer %d has %d slots", l, kv->slots);
        }
    }
    plume_session_free(s);
    p.n_ctx = 5000; /* tiny-a's max_position_embeddings is 4096 */
    s = NULL;
    CHECK(plume_session_new(&s, m, &p, &err) == PLUME_EINVAL && err && strstr(err, "max_position_embeddings"), "ctx > max");
    free(err);
    plume_model_free(m);
}

/* A copy forks the conversation: both sessions continue bit-identically, the copy's
 * snapshots work for a deep rewind, an int8-cache session copies too, and sessions made
 * with other parameters are refused. */
static void test_copy_forks(void) {
    plume_model *m = open_isa(f32b, NULL);
    if (!m) { CHECK(0, "open"); return; }
    for (int kv8 = 0; kv8 < 2; kv8++) {
        plume_session_params p = plume_session_default_params();
        p.n_rewind = 8;
        p.snapshot_every = 16;
        p.n_batch = 5;
        p.kv_bits = kv8 ? 8 : 32;
        plume_session *s = NULL, *t = NULL;
        char *err = NULL;
        CHECK(plume_session_new(&s, m, &p, &err) == 0 && plume_session_new(&t, m, &p, &err) == 0, "sessions");
        float *a = malloc(48 * 512 * 4), *b = malloc(48 * 512 * 4);
        CHECK(plume_session_feed(t, ids + 5, 9, NULL, 0, &err) == 0, "the copy's own tokens");
        CHECK(plume_session_feed(s, ids, 35, NULL, 0, &err) == 0, "feed");
        CHECK(plume_session_copy(t, s, &err) == 0, "copy: %s", err ? err : "");
        CHECK(plume_session_n_past(t) == 35 && !memcmp(plume_session_tokens(t), ids, 35 * 4), "the copy's tokens");
        CHECK(plume_session_feed(s, ids + 35, n_ids - 35, a, 1, &err) == 0, "feed the original");
        CHECK(plume_session_feed(t, ids + 35, n_ids - 35, b, 1, &err) == 0, "feed the copy");
        CHECK(!memcmp(a, b, (size_t)(n_ids - 35) * 512 * 4), "kv_bits %d: the copy's logits differ", p.kv_bits);
        if (!kv8) {
            check_rows(b, 35, n_ids, "after a copy");
            /* 48 -> 17: past the ring, from the snapshot at 16 the copy received */
            CHECK(plume_session_rewind(t, 17, &err) == 0, "rewind the copy");
            CHECK(plume_session_feed(t, ids + 17, n_ids - 17, b, 1, &err) == 0, "refeed the copy");
            check_rows(b, 17, n_ids, "a deep rewind of a copy");
        }
        plume_session_free(t);
        t = NULL;
        p.snapshot_every = 8;
        CHECK(plume_session_new(&t, m, &p, &err) == 0, "other session");
        CHECK(plume_session_copy(t, s, &err) == PLUME_EINVAL && err, "a session of other parameters was copied into");
        CHECK(plume_session_n_past(t) == 0, "a refused copy changed the session");
        free(err);
        free(a);
        free(b);
        plume_session_free(s);
        plume_session_free(t);
    }
    plume_model_free(m);
}

/* Convert a tiny model (f32, bf16, and as the q8 bundle synb: tiny-a's is a synthetic one of
 * another seed) and load its golden ids and logits_q8emb. */
static void setup_model(const char *model) {
    char out[4096], path[600];
    snprintf(f32b, sizeof f32b, "%s/%s-f32", tmp, model);
    snprintf(bf16b, sizeof bf16b, "%s/%s-bf16", tmp, model);
    snprintf(synb, sizeof synb, "%s/%s-q8", tmp, model);
    int st = t_sh(out, sizeof out, "%s/plume convert %s/%s/hf %s --weights f32 --quiet && %s/plume convert %s/%s/hf "
                  "%s --weights bf16 --quiet", t_build(), t_data(), model, f32b, t_build(), t_data(), model, bf16b);
    if (!st && !strcmp(model, "tiny-a"))
        st = t_sh(out, sizeof out, "%s/plume synth --config tiny --seed 5 --bundle %s --weights q8", t_build(), synb);
    else if (!st)
        st = t_sh(out, sizeof out, "%s/plume convert %s/%s/hf %s --weights q8 --quiet", t_build(), t_data(), model, synb);
    if (st) printf("  setup: %s\n", out);
    snprintf(path, sizeof path, "%s/%s/ids.npy", t_data(), model);
    int64_t n;
    float *f = load_npy(path, &n);
    for (int64_t i = 0; f && i < n; i++) ids[i] = (int32_t)f[i];
    n_ids = (int32_t)n;
    free(f);
    free(gold);
    snprintf(path, sizeof path, "%s/%s/logits_q8emb.npy", t_data(), model);
    gold = load_npy(path, &n);
}

int main(void) {
    tmp = t_tmpdir("session");
    char out[256];
    setup_model("tiny-a");
    RUN(test_rewind_to_zero);
    RUN(test_rewind_inside_window);
    RUN(test_rewind_far_before_window);
    RUN(test_rewind_point);
    RUN(test_rewind_twice);
    RUN(test_prefix_reuse);
    RUN(test_save_load_new_process);
    RUN(test_foreign_truncated_corrupt_refused);
    RUN(test_concurrent_sessions_share_a_model);
    RUN(test_kv8_error_and_state);
    RUN(test_long_context);
    RUN(test_state_values_validated);
    RUN(test_kv8_nonfinite_rows);
    RUN(test_copy_forks);
    /* E4B's structure: 2 KV heads, 6 caches in chunks 1 and 2, layers 6-11 read those of 4 and 5 */
    setup_model("tiny-e4b");
    RUN_ON("tiny-e4b", test_rewind_to_zero);
    RUN_ON("tiny-e4b", test_rewind_inside_window);
    RUN_ON("tiny-e4b", test_rewind_far_before_window);
    RUN_ON("tiny-e4b", test_rewind_twice);
    RUN_ON("tiny-e4b", test_prefix_reuse);
    RUN_ON("tiny-e4b", test_save_load_new_process);
    RUN_ON("tiny-e4b", test_foreign_truncated_corrupt_refused);
    RUN_ON("tiny-e4b", test_kv8_error_and_state);
    RUN_ON("tiny-e4b", test_long_context);
    RUN_ON("tiny-e4b", test_state_values_validated);
    RUN_ON("tiny-e4b", test_copy_forks);
    free(gold);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
