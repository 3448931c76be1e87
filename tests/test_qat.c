/* test_qat.c -- lossless conversion of a quantization-aware-trained checkpoint: a tiny-a
 * checkpoint whose layer weights lie on 4-bit grids (t_qat.h), converted to q4 with the
 * default step rule ("best"), gives the logits of its own float model (the f32 bundle, with
 * the INT8 embedding sidecars both bundles share) within the golden tolerance; the single
 * rules (absmax / 7, Q4_0's signed max / -8) each miss half of its blocks. */
#include <stdint.h>
#include <unistd.h>

#include "npy.h"
#include "kernels/kernels.h"
#include "quant.h"
#include "t.h"
#include "t_qat.h"
#include "t_tiny.h"

#define LOGITS_REL_RMS 1e-4 /* shared/golden/README.md's acceptance limit */

static char *tmp;
static char hf[600];

/* Convert the snapped checkpoint into tmp/NAME with extra options; 0 on success. */
static int convert(const char *name, const char *opts, char *out, size_t cap) {
    char log[4096];
    snprintf(out, cap, "%s/%s", tmp, name);
    int rc = t_sh(log, sizeof log, "%s/plume convert %s %s %s --quiet", t_build(), hf, out, opts);
    if (rc) printf("  convert %s: %s\n", opts, log);
    return rc;
}

/* The q4 quantizer alone: a block on a grid of either sign comes back exactly with "best";
 * an ordinary block's error with "best" is never above either single rule's. */
static void test_quant_rules(void) {
    float x[64], y[64];
    uint8_t p[32];
    uint16_t s[2];
    uint64_t r = 12345;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 64; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = ((float)(r >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
            y[i] = x[i];
        }
        t_qat_snap_q4(y, trial % 2);
        t_qat_snap_q4(y + 32, 1);
        double e = plume_quant_q4_row(y, 64, p, s, PLUME_Q4_BEST);
        int same = 1;
        for (int i = 0; i < 64; i++) {
            int q = ((p[i / 2] >> (4 * (i % 2))) & 15) - 8;
            same &= (float)q * plume_f16_to_f32(s[i / 32]) == y[i];
        }
        CHECK(same && e == 0.0, "trial %d: a grid block not kept exactly (error %g)", trial, e);
        double eb = plume_quant_q4_row(x, 64, p, s, PLUME_Q4_BEST), ea = plume_quant_q4_row(x, 64, p, s, PLUME_Q4_ABSMAX),
               eq = plume_quant_q4_row(x, 64, p, s, PLUME_Q4_Q4_0);
        CHECK(eb <= ea && eb <= eq && eb > 0, "trial %d: best %g, absmax %g, q4_0 %g", trial, eb, ea, eq);
    }
    CHECK(plume_q4_rule_parse("best") == PLUME_Q4_BEST && plume_q4_rule_parse("q4_0") == PLUME_Q4_Q4_0 &&
              plume_q4_rule_parse("absmax") == PLUME_Q4_ABSMAX && plume_q4_rule_parse("q4_k") == -1,
          "rule names");
}

/* The snapped checkpoint at q4 ("best") gives its float model's logits for every kernel
 * set; absmax / 7 and Q4_0's rule alone do not (each requantizes half of the blocks). */
static void test_qat_lossless(void) {
    char f32[700], best[700], absmax[700], q40[700], out[4096];
    int rc = convert("f32", "--weights f32", f32, sizeof f32) || convert("best", "--weights q4", best, sizeof best) ||
             convert("absmax", "--weights q4 --q4-scale absmax", absmax, sizeof absmax) ||
             convert("q40", "--weights q4 --q4-scale q4_0 --layout rows", q40, sizeof q40);
    CHECK(!rc, "conversions");
    CHECK(t_sh(out, sizeof out, "%s/plume convert %s %s/bad --weights q4 --q4-scale q5", t_build(), hf, tmp) != 0 &&
              strstr(out, "--q4-scale must be best, absmax or q4_0"),
          "--q4-scale q5: %s", out);
    int32_t ids[64];
    int32_t n = (int32_t)t_tiny_ids("tiny-a", ids, 64);
    int64_t cn = 0;
    float *ref = rc ? NULL : t_tiny_logits(f32, "scalar", ids, n, &cn);
    CHECK(ref && n > 0, "reference logits");
    if (!ref) return;
    const char *isas[8];
    int nisa = plume_kernels_available(isas, 8);
    for (int ii = 0; ii < nisa; ii++) {
        int64_t c;
        float *lg = t_tiny_logits(best, isas[ii], ids, n, &c);
        double rr = lg ? t_rel_rms(lg, ref, (size_t)cn) : 1;
        printf("  %s: q4 (best) vs the float model: relative RMS %.3g\n", isas[ii], rr);
        CHECK(lg && c == cn && rr <= LOGITS_REL_RMS, "%s: relative RMS %.3g", isas[ii], rr);
        free(lg);
    }
    const char *const dirs[2] = {absmax, q40}, *const names[2] = {"absmax", "q4_0"};
    for (int k = 0; k < 2; k++) {
        int64_t c;
        float *lg = t_tiny_logits(dirs[k], NULL, ids, n, &c);
        double rr = lg ? t_rel_rms(lg, ref, (size_t)cn) : 0;
        printf("  q4 (%s) vs the float model: relative RMS %.3g\n", names[k], rr);
        CHECK(lg && rr > 100 * LOGITS_REL_RMS, "%s requantizes the grid: relative RMS only %.3g", names[k], rr);
        free(lg);
    }
    free(ref);
}

int main(void) {
    tmp = t_tmpdir("qat");
    snprintf(hf, sizeof hf, "%s/hf", tmp);
    if (t_qat_checkpoint("tiny-a", hf)) printf("  setup failed\n");
    RUN(test_quant_rules);
    RUN(test_qat_lossless);
    char out[256];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
