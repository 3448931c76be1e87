/* test_perplexity.c -- `plume perplexity` on tiny-a: the perplexity it prints equals the one
 * recomputed here from the library's logits (chunks of --ctx, <bos> first, the second half
 * scored), and --kl-divergence against a --kl-divergence-base run gives the KL divergence
 * and top-1 agreement recomputed here (0 and 100% for the same bundle); bad uses are refused. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "t.h"
#include "t_tiny.h"

#define CTX 64

static char *tmp;
static char f32[600], q4[600], text[600];

/* Per scored token of the text in bundle dir: log-probabilities [scored, V] (malloc'd, double),
 * the scored tokens' ids (tgt), how many. Recomputed with the library, exact activations. */
static double *scored_logprobs(const char *dir, int32_t **tgt, int64_t *n_scored, int32_t *V_out) {
    plume_model *m = t_tiny_open(dir, NULL, 1, 1);
    if (!m) return NULL;
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = fopen(text, "rb");
    if (f) {
        buf = malloc(1 << 20);
        len = fread(buf, 1, 1 << 20, f);
        fclose(f);
    }
    int32_t ids[4096];
    int32_t n = buf ? plume_tokenize(tok, buf, len, ids, 4096) : 0, V = plume_model_n_vocab(m);
    free(buf);
    int32_t chunks = n / CTX;
    *n_scored = (int64_t)chunks * (CTX - CTX / 2);
    double *lp = malloc((size_t)*n_scored * (size_t)V * sizeof *lp);
    *tgt = malloc((size_t)*n_scored * sizeof **tgt);
    float *lg = malloc((size_t)CTX * (size_t)V * sizeof *lg);
    int64_t k = 0;
    for (int32_t c = 0; c < chunks; c++) {
        int32_t ch[CTX];
        memcpy(ch, ids + c * CTX, sizeof ch);
        ch[0] = 2; /* <bos> */
        plume_session *s = t_tiny_session(m, CTX, CTX, 0, 0);
        char *err = NULL;
        if (!s || plume_session_feed(s, ch, CTX, lg, 1, &err)) printf("  feed: %s\n", err ? err : "");
        free(err);
        plume_session_free(s);
        for (int32_t j = CTX / 2; j < CTX; j++, k++) {
            const float *x = lg + (int64_t)(j - 1) * V;
            double mx = x[0], sum = 0;
            for (int32_t v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
            for (int32_t v = 0; v < V; v++) sum += exp(x[v] - mx);
            for (int32_t v = 0; v < V; v++) lp[k * V + v] = x[v] - mx - log(sum);
            (*tgt)[k] = ids[c * CTX + j];
        }
    }
    free(lg);
    plume_model_free(m);
    *V_out = V;
    return lp;
}

/* The number after label in text, or NAN. */
static double after(const char *out, const char *label) {
    const char *p = strstr(out, label);
    return p ? atof(p + strlen(label)) : NAN;
}

/* The perplexity, KL divergence and top-1 agreement printed equal those recomputed here. */
static void test_perplexity_and_kl(void) {
    char out[8192], base[700];
    snprintf(base, sizeof base, "%s/base.bin", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx %d --kl-divergence-base %s 2>/dev/null", t_build(),
               f32, text, CTX, base) == 0, "base run: %s", out);
    double ppl_f = after(out, "perplexity: ");
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx %d --kl-divergence %s 2>/dev/null", t_build(), q4,
               text, CTX, base) == 0, "kl run: %s", out);
    double ppl_q = after(out, "perplexity: "), ppl_ref = after(out, "reference perplexity: "),
           kl = after(out, "KL divergence: "), top = after(out, "same top token: ");
    int32_t *tf = NULL, *tq = NULL, V = 0;
    int64_t nf = 0, nq = 0;
    double *lf = scored_logprobs(f32, &tf, &nf, &V), *lq = scored_logprobs(q4, &tq, &nq, &V);
    CHECK(lf && lq && nf == nq && nf > 0, "recomputation");
    if (lf && lq && nf == nq && nf > 0) {
        double nll_f = 0, nll_q = 0, k = 0;
        int64_t same = 0;
        for (int64_t i = 0; i < nf; i++) {
            nll_f -= lf[i * V + tf[i]];
            nll_q -= lq[i * V + tq[i]];
            int32_t a = 0, b = 0;
            for (int32_t v = 0; v < V; v++) {
                k += exp(lf[i * V + v]) * (lf[i * V + v] - lq[i * V + v]);
                a = lf[i * V + v] > lf[i * V + a] ? v : a;
                b = lq[i * V + v] > lq[i * V + b] ? v : b;
            }
            same += a == b;
        }
        double want_f = exp(nll_f / (double)nf), want_q = exp(nll_q / (double)nf), want_kl = k / (double)nf,
               want_top = 100.0 * (double)same / (double)nf;
        printf("  f32 perplexity %.6g (recomputed %.6g), q4 %.6g (%.6g), KL %.6g (%.6g), top-1 %.2f%% (%.2f%%)\n", ppl_f,
               want_f, ppl_q, want_q, kl, want_kl, top, want_top);
        CHECK(fabs(ppl_f / want_f - 1) < 1e-4 && fabs(ppl_q / want_q - 1) < 1e-4 && fabs(ppl_ref / want_f - 1) < 1e-4,
              "perplexities");
        CHECK(want_kl > 0 && fabs(kl / want_kl - 1) < 1e-3 && fabs(top - want_top) < 1e-3, "KL divergence or top-1");
    }
    free(lf), free(lq), free(tf), free(tq);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx %d --kl-divergence %s 2>/dev/null", t_build(), f32,
               text, CTX, base) == 0 && after(out, "KL divergence: ") == 0 && strstr(out, "same top token: 100.0000%"),
          "the reference against itself: %s", out);
}

/* Bad uses: a reference of another ctx, a file that is no reference, a text shorter than a chunk. */
static void test_perplexity_errors(void) {
    char out[8192], base[700], junk[700];
    snprintf(base, sizeof base, "%s/base.bin", tmp);
    snprintf(junk, sizeof junk, "%s/junk.bin", tmp);
    t_sh(out, sizeof out, "printf 'not a reference' > %s", junk);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx 32 --kl-divergence %s", t_build(), q4, text, base) != 0 &&
              strstr(out, "was saved with vocabulary 512, ctx 64"),
          "another ctx: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx %d --kl-divergence %s", t_build(), q4, text, CTX, junk) != 0 &&
              strstr(out, "is not a --kl-divergence-base file"),
          "junk reference: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s -f %s --ctx 100000", t_build(), q4, text) != 0 &&
              strstr(out, "fewer than one chunk"),
          "short text: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume perplexity -m %s", t_build(), q4) == 2, "no -f: %s", out);
}

int main(void) {
    tmp = t_tmpdir("perplexity");
    char out[4096];
    snprintf(f32, sizeof f32, "%s/f32", tmp);
    snprintf(q4, sizeof q4, "%s/q4", tmp);
    snprintf(text, sizeof text, "%s/text.txt", tmp);
    if (t_sh(out, sizeof out,
             "%s/plume convert %s/tiny-a/hf %s --weights f32 --quiet && %s/plume convert %s/tiny-a/hf %s --weights q4 --quiet && "
             "for i in 1 2 3; do sed -n 's/.*\"text\": *\"\\([^\"]*\\)\".*/\\1 /p' %s/tiny-a/tokenizer_cases.jsonl; done > %s",
             t_build(), t_data(), f32, t_build(), t_data(), q4, t_data(), text))
        printf("  setup: %s\n", out);
    RUN(test_perplexity_and_kl);
    RUN(test_perplexity_errors);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
