/* cmd_perplexity.c -- `plume perplexity`: a text's perplexity under a bundle, as
 * llama-perplexity measures it (chunks of --ctx tokens, each starting with <bos>, the second
 * half of each scored), and the KL divergence and top-1 agreement against a reference run
 * saved with --kl-divergence-base. Only the public API (include/plume.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char perplexity_usage[] =
    "usage: plume perplexity -m BUNDLE -f TEXT [--ctx N] [--chunks N] [-t THREADS] [--fast]\n"
    "                        [--kl-divergence-base FILE | --kl-divergence FILE]\n"
    "  The text is tokenized and cut into chunks of --ctx tokens (default 512), the first of\n"
    "  each replaced by <bos>; each chunk is fed in a fresh session and its second half is\n"
    "  scored (every scored token sees at least ctx/2 before it), as llama-perplexity does.\n"
    "  Prints the perplexity exp(mean -log p(token)) over the scored tokens.\n"
    "  --chunks N                  at most N chunks (default: all the text gives)\n"
    "  --fast                      q8/q4: int8 activations (default: exact float32 ones)\n"
    "  --kl-divergence-base FILE   save the tokens and every scored position's log-probabilities\n"
    "                              (float32 [scored, vocab]) to FILE, the reference run\n"
    "  --kl-divergence FILE        compare with a reference FILE (same text, ctx and vocabulary):\n"
    "                              mean KL(reference || this) per token, and how often both\n"
    "                              rank the same token first\n";

#define PPL_MAGIC "PLUMEPPL1"

/* The file's text read whole (malloc'd, NUL-terminated); NULL on error (printed). */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { cli_error("perplexity: %s: cannot open", path); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (size_t k; b && (k = fread(b + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) { free(b); b = NULL; break; }
            b = nb, cap *= 2;
        }
    }
    fclose(f);
    if (!b) { cli_error("perplexity: out of memory"); return NULL; }
    b[n] = 0;
    *len = n;
    return b;
}

/* log-softmax of logits [V] into lp (double accumulation). */
static void log_softmax(const float *lg, int32_t V, float *lp) {
    float mx = lg[0];
    for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    double s = 0;
    for (int32_t i = 0; i < V; i++) s += exp((double)lg[i] - mx);
    const double ls = log(s) + mx;
    for (int32_t i = 0; i < V; i++) lp[i] = (float)((double)lg[i] - ls);
}

/* The options of one run. */
typedef struct {
    const char *model, *text, *base_out, *base_in;
    int64_t ctx, chunks, threads;
    int fast;
} ppl_opts;

/* Parse argv into o; 0, 1 (--help printed) or 2 (error printed). */
static int parse(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){.ctx = 512, .chunks = 0, .threads = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(perplexity_usage, stdout); return 1; }
        else if (!strcmp(a, "-m") && more) o->model = argv[++i];
        else if (!strcmp(a, "-f") && more) o->text = argv[++i];
        else if (!strcmp(a, "--kl-divergence-base") && more) o->base_out = argv[++i];
        else if (!strcmp(a, "--kl-divergence") && more) o->base_in = argv[++i];
        else if (!strcmp(a, "--fast")) o->fast = 1;
        else if (!strcmp(a, "--ctx") && more) {
            if (cli_int(argv[++i], 4, 1 << 20, &o->ctx)) { cli_error("perplexity: --ctx wants an integer >= 4"); return 2; }
        } else if (!strcmp(a, "--chunks") && more) {
            if (cli_int(argv[++i], 1, 1 << 30, &o->chunks)) { cli_error("perplexity: --chunks wants a positive integer"); return 2; }
        } else if (!strcmp(a, "-t") && more) {
            if (cli_int(argv[++i], 1, 1024, &o->threads)) { cli_error("perplexity: -t wants a positive integer"); return 2; }
        } else { cli_error("perplexity: unknown option '%s' (see plume perplexity --help)", a); return 2; }
    }
    if (!o->model || !o->text) { fputs(perplexity_usage, stderr); return 2; }
    if (o->base_out && o->base_in) { cli_error("perplexity: --kl-divergence-base and --kl-divergence go in separate runs"); return 2; }
    return 0;
}

/* The reference file: header, then per scored position its log-probs. */
typedef struct {
    FILE *f;
    int32_t V, ctx, n_chunks;
} ppl_base;

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    size_t len;
    char *text = read_text(o.text, &len);
    if (!text) return 1;
    plume_model *m = NULL;
    plume_model_params mp = plume_model_default_params();
    mp.exact = !o.fast;
    mp.n_threads = (int32_t)o.threads;
    char *err = NULL;
    if (plume_model_open(&m, o.model, &mp, &err)) { free(text); return cli_lib_error_free(err); }
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    const int32_t V = plume_model_n_vocab(m), C = (int32_t)o.ctx;
    int32_t bos = 2, nb = tok ? plume_tokenize(tok, "<bos>", 5, &bos, 1) : 0;
    int32_t n = tok ? plume_tokenize(tok, text, len, NULL, 0) : -1;
    int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    int rc = 0;
    if (!tok || nb != 1) rc = cli_error("perplexity: %s has no tokenizer with a <bos> token", o.model);
    else if (n < 0) rc = cli_error("perplexity: %s is not valid UTF-8", o.text);
    else if (!ids || plume_tokenize(tok, text, len, ids, n) != n) rc = cli_error("perplexity: %s: no tokens", o.text);
    free(text);
    int32_t n_chunks = rc ? 0 : n / C;
    if (o.chunks > 0 && n_chunks > o.chunks) n_chunks = (int32_t)o.chunks;
    if (!rc && n_chunks < 1) rc = cli_error("perplexity: %s has %d tokens, fewer than one chunk of --ctx %d", o.text, n, C);
    ppl_base base = {0};
    const char *bpath = o.base_out ? o.base_out : o.base_in;
    if (!rc && bpath) {
        base.f = fopen(bpath, o.base_out ? "wb" : "rb");
        if (!base.f) rc = cli_error("perplexity: %s: cannot open", bpath);
        else if (o.base_out) {
            int32_t h[3] = {V, C, n_chunks};
            if (fwrite(PPL_MAGIC, 1, 9, base.f) != 9 || fwrite(h, 4, 3, base.f) != 3 ||
                fwrite(ids, 4, (size_t)n_chunks * (size_t)C, base.f) != (size_t)n_chunks * (size_t)C)
                rc = cli_error("perplexity: %s: write failed", bpath);
        } else {
            char mg[9];
            int32_t h[3];
            int32_t *bid = malloc((size_t)n_chunks * (size_t)C * 4);
            if (fread(mg, 1, 9, base.f) != 9 || memcmp(mg, PPL_MAGIC, 9) || fread(h, 4, 3, base.f) != 3)
                rc = cli_error("perplexity: %s is not a --kl-divergence-base file", bpath);
            else if (h[0] != V || h[1] != C || h[2] < n_chunks)
                rc = cli_error("perplexity: %s was saved with vocabulary %d, ctx %d, %d chunks (this run: %d, %d, %d)", bpath,
                               h[0], h[1], h[2], V, C, n_chunks);
            else if (!bid || fread(bid, 4, (size_t)h[2] * (size_t)C, base.f) != (size_t)h[2] * (size_t)C ||
                     memcmp(bid, ids, (size_t)n_chunks * (size_t)C * 4))
                rc = cli_error("perplexity: %s was saved from another text (its tokens differ)", bpath);
            free(bid);
        }
    }
    float *lg = rc ? NULL : malloc((size_t)C * (size_t)V * sizeof *lg), *lp = malloc((size_t)V * sizeof *lp),
          *blp = malloc((size_t)V * sizeof *blp);
    int32_t *chunk = malloc((size_t)C * sizeof *chunk);
    if (!rc && (!lg || !lp || !blp || !chunk)) rc = cli_error("perplexity: out of memory");
    double nll = 0, kl = 0, bnll = 0;
    int64_t scored = 0, same = 0;
    const int32_t first = C / 2;
    for (int32_t c = 0; !rc && c < n_chunks; c++) {
        memcpy(chunk, ids + (int64_t)c * C, (size_t)C * sizeof *chunk);
        chunk[0] = bos;
        plume_session_params sp = plume_session_default_params();
        sp.n_ctx = C;
        sp.n_batch = C;
        plume_session *s = NULL;
        if (plume_session_new(&s, m, &sp, &err) || plume_session_feed(s, chunk, C, lg, 1, &err)) {
            rc = cli_lib_error_free(err);
            plume_session_free(s);
            break;
        }
        plume_session_free(s);
        for (int32_t j = first; !rc && j < C; j++) { /* the logits at j - 1 predict token j */
            log_softmax(lg + (int64_t)(j - 1) * V, V, lp);
            const int32_t t = ids[(int64_t)c * C + j];
            nll -= lp[t];
            if (o.base_out && fwrite(lp, 4, (size_t)V, base.f) != (size_t)V) rc = cli_error("perplexity: %s: write failed", bpath);
            if (o.base_in) {
                if (fread(blp, 4, (size_t)V, base.f) != (size_t)V) { rc = cli_error("perplexity: %s is truncated", bpath); break; }
                double k = 0;
                int32_t a1 = 0, b1 = 0;
                for (int32_t v = 0; v < V; v++) {
                    k += exp((double)blp[v]) * ((double)blp[v] - (double)lp[v]);
                    a1 = lp[v] > lp[a1] ? v : a1;
                    b1 = blp[v] > blp[b1] ? v : b1;
                }
                kl += k;
                same += a1 == b1;
                bnll -= blp[t];
            }
            scored++;
        }
        if (isatty(2)) fprintf(stderr, "\rchunk %d/%d", c + 1, n_chunks);
    }
    if (n_chunks > 0 && isatty(2)) fputc('\n', stderr);
    if (!rc) {
        printf("perplexity: %.6f over %lld tokens (%d chunks of %d, the second half of each scored)\n",
               exp(nll / (double)scored), (long long)scored, n_chunks, C);
        if (o.base_in)
            printf("reference perplexity: %.6f\nKL divergence: %.6g mean per token\nsame top token: %.4f%% (%lld of %lld)\n",
                   exp(bnll / (double)scored), kl / (double)scored, 100.0 * (double)same / (double)scored,
                   (long long)same, (long long)scored);
    }
    if (base.f && fclose(base.f) && !rc && o.base_out) rc = cli_error("perplexity: %s: write failed", bpath);
    free(lg);
    free(lp);
    free(blp);
    free(chunk);
    free(ids);
    plume_model_free(m);
    return rc;
}
