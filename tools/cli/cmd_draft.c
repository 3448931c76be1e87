/* cmd_draft.c -- `plume draft`: the MTP drafter's check command (docs/SPECULATIVE.md): the
 * drafter's logits after a prompt, a chain of draft steps, or a greedy speculative run with
 * a constant draft length and its trace, as the goldens record them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"

static const char draft_usage[] =
    "usage: plume draft -m TARGET --drafter DIR --ids-npy PROMPT.npy\n"
    "                   [--step-logits F.npy] [--chain N --chain-logits F.npy]\n"
    "                   [-n N --draft K [--trace F.json] [-o TOKENS.npy]]\n"
    "                   [--isa scalar|avx2|avx512|neon] [-t THREADS] [--context N] [--fast]\n"
    "  Prefill the prompt on the target, take its greedy token, then:\n"
    "  --step-logits F   write the drafter's logits [V] of the first draft step (float32)\n"
    "  --chain N         run N chained draft steps from that state; --chain-logits F gets [N, V]\n"
    "  -n N --draft K    a greedy speculative run of N new tokens with the drafter, K drafts a\n"
    "                    round (constant); --trace F writes {\"tokens\": [...], \"rounds\":\n"
    "                    [{\"drafts\": [...], \"accepted\": n}, ...]} and prints the tokens\n"
    "  --fast            q8/q4: int8 activations (default: exact float32 activations)\n";

/* What one run asks for: the flags. */
typedef struct {
    const char *model, *drafter, *ids_npy, *step_out, *chain_out, *trace, *isa, *tokens_out;
    int64_t chain, n, k, threads, ctx;
    int fast;
} draft_opts;

/* Parse the flags into o. -1: go on; else the exit status. */
static int draft_parse(draft_opts *o, int argc, char **argv) {
    *o = (draft_opts){.k = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(draft_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) o->model = argv[++i];
        else if (!strcmp(a, "--drafter") && more) o->drafter = argv[++i];
        else if (!strcmp(a, "--ids-npy") && more) o->ids_npy = argv[++i];
        else if (!strcmp(a, "--step-logits") && more) o->step_out = argv[++i];
        else if (!strcmp(a, "--chain-logits") && more) o->chain_out = argv[++i];
        else if (!strcmp(a, "--trace") && more) o->trace = argv[++i];
        else if (!strcmp(a, "-o") && more) o->tokens_out = argv[++i];
        else if (!strcmp(a, "--isa") && more) o->isa = argv[++i];
        else if (!strcmp(a, "--fast")) o->fast = 1;
        else if (!strcmp(a, "--chain") && more) {
            if (cli_int(argv[++i], 1, 64, &o->chain)) return cli_error("draft: --chain wants 1..64");
        } else if (!strcmp(a, "-n") && more) {
            if (cli_int(argv[++i], 1, 1 << 20, &o->n)) return cli_error("draft: -n wants a positive integer");
        } else if (!strcmp(a, "--draft") && more) {
            if (cli_int(argv[++i], 0, 63, &o->k)) return cli_error("draft: --draft wants 0..63");
        } else if (!strcmp(a, "-t") && more) {
            if (cli_int(argv[++i], 1, 1024, &o->threads)) return cli_error("draft: -t wants 1..1024");
        } else if (!strcmp(a, "--context") && more) {
            if (cli_int(argv[++i], 1, 1 << 24, &o->ctx)) return cli_error("draft: --context wants a positive integer");
        } else return cli_error("draft: unknown option '%s' (see plume draft --help)", a);
    }
    if (!o->drafter || !o->ids_npy || (!o->step_out && !o->chain && !o->n)) { fputs(draft_usage, stderr); return 2; }
    if (!o->chain != !o->chain_out) return cli_error("draft: --chain and --chain-logits go together");
    if (o->n && o->k < 0) return cli_error("draft: -n wants --draft K");
    if (!o->n && (o->k >= 0 || o->trace || o->tokens_out)) return cli_error("draft: --draft, --trace and -o want -n");
    return -1;
}

/* Read the prompt's ids from an integer (or integral float) .npy. */
static int read_prompt(const char *path, int32_t **ids, int32_t *n) {
    plume_map m;
    npy_view v;
    char *err = NULL;
    if (npy_open(path, &m, &v, &err)) return cli_lib_error_free(err);
    float *f = malloc((size_t)(v.count ? v.count : 1) * sizeof *f);
    *ids = malloc((size_t)(v.count ? v.count : 1) * sizeof **ids);
    int bad = !f || !*ids || v.count < 1 || v.count > INT32_MAX;
    if (!bad) npy_to_f32(&v, f);
    for (int64_t i = 0; !bad && i < v.count; i++) {
        if (!(f[i] >= 0.0f && f[i] <= 16777216.0f) || f[i] != floorf(f[i])) bad = 1;
        else (*ids)[i] = (int32_t)f[i];
    }
    free(f);
    plume_map_free(&m);
    if (bad) {
        free(*ids);
        *ids = NULL;
        return cli_error("draft: %s: not a non-empty list of token ids", path);
    }
    *n = (int32_t)v.count;
    return 0;
}

/* The first index of the largest of x[0, n). */
static int32_t argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

/* Append the ids to a JSON array in f. */
static void put_ids(FILE *f, const int32_t *ids, int32_t n) {
    fputc('[', f);
    for (int32_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

/* The greedy speculative run: n new tokens (the first is first), K drafts a round (fewer near
 * the end, as HF's loop), its trace to o->trace. */
static int spec_run(const draft_opts *o, plume_model *m, plume_session *s, plume_drafter *d, int32_t first,
                    char **err) {
    plume_spec_params p = plume_spec_default_params();
    p.draft_max = (int32_t)o->k;
    p.adaptive = 0;
    p.drafter = d;
    p.lookup = 0; /* HF's loop: the drafter alone */
    plume_sampler_params gp = plume_sampler_default_params();
    gp.temperature = 0;
    plume_spec *sp = NULL;
    plume_sampler *smp = NULL;
    const int32_t N = (int32_t)o->n, V = plume_model_n_vocab(m);
    int32_t *toks = malloc((size_t)N * sizeof *toks), *ids = malloc(64 * sizeof *ids), *out = malloc(64 * sizeof *out);
    int32_t *rd = malloc((size_t)N * 64 * sizeof *rd), *rn = malloc((size_t)N * 2 * sizeof *rn); /* rounds */
    float *logits = malloc((size_t)64 * (size_t)V * sizeof *logits);
    int rc = toks && ids && out && rd && rn && logits ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = plume_spec_new(&sp, m, &p, err);
    if (!rc) rc = plume_sampler_new(&smp, &gp, V, err);
    int32_t have = 0, rounds = 0, pending = first;
    if (!rc) toks[have++] = first;
    while (!rc && have < N) {
        int32_t n = plume_spec_draft(sp, s, pending, ids, N - have, err); /* HF: k <= max_length - L - 1 */
        if (n < 0) { rc = n; break; }
        if ((rc = plume_session_feed(s, ids, n, logits, 1, err))) break;
        int32_t got = plume_spec_accept(sp, s, smp, ids, n, logits, out, err);
        if (got < 0) { rc = got; break; }
        memcpy(rd + (int64_t)rounds * 64, ids + 1, (size_t)(n - 1) * sizeof *ids);
        rn[2 * rounds] = n - 1;
        rn[2 * rounds + 1] = got - 1;
        rounds++;
        for (int32_t i = 0; i < got && have < N; i++) toks[have++] = out[i];
        pending = out[got - 1];
    }
    if (!rc && o->trace) {
        FILE *f = fopen(o->trace, "w");
        if (!f) rc = plume_fail(err, PLUME_EIO, "%s: cannot write", o->trace);
        else {
            fputs("{\"tokens\": ", f);
            put_ids(f, toks, have);
            fputs(", \"rounds\": [", f);
            for (int32_t r = 0; r < rounds; r++) {
                fprintf(f, "%s{\"drafts\": ", r ? ", " : "");
                put_ids(f, rd + (int64_t)r * 64, rn[2 * r]);
                fprintf(f, ", \"accepted\": %d}", rn[2 * r + 1]);
            }
            fputs("]}\n", f);
            if (fclose(f)) rc = plume_fail(err, PLUME_EIO, "%s: cannot write", o->trace);
        }
    }
    if (!rc && o->tokens_out) {
        int64_t shape[1] = {have};
        rc = npy_write(o->tokens_out, "<i4", shape, 1, toks, err);
    }
    if (!rc) {
        for (int32_t i = 0; i < have; i++) printf("%s%d", i ? " " : "", toks[i]);
        int64_t steps, drafted, accepted;
        plume_spec_stats(sp, &steps, &drafted, &accepted);
        printf("\n");
        fprintf(stderr, "draft: %d rounds, %lld drafted, %lld accepted\n", rounds, (long long)drafted,
                (long long)accepted);
    }
    plume_spec_free(sp);
    plume_sampler_free(smp);
    free(toks), free(ids), free(out), free(rd), free(rn), free(logits);
    return rc;
}

int cmd_draft(int argc, char **argv) {
    draft_opts o;
    int rc = draft_parse(&o, argc, argv);
    if (rc >= 0) return rc;
    if ((o.step_out && cli_mkdir_parent(o.step_out)) || (o.chain_out && cli_mkdir_parent(o.chain_out)) ||
        (o.trace && cli_mkdir_parent(o.trace)) || (o.tokens_out && cli_mkdir_parent(o.tokens_out)))
        return 1;
    const char *model = cli_model_path(o.model);
    if (!model) return 1;
    int32_t *ids = NULL, n = 0;
    if (read_prompt(o.ids_npy, &ids, &n)) return 1;
    char *err = NULL;
    plume_model *m = NULL;
    plume_drafter *d = NULL;
    plume_session *s = NULL;
    plume_model_params mp = plume_model_default_params();
    mp.isa = o.isa;
    mp.n_threads = (int32_t)o.threads;
    mp.exact = !o.fast;
    rc = plume_model_open(&m, model, &mp, &err);
    if (!rc) rc = plume_drafter_open(&d, m, o.drafter, &err);
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)o.ctx;
    if (!rc) rc = plume_session_new(&s, m, &sp, &err);
    const int64_t V = rc ? 0 : plume_model_n_vocab(m);
    const int32_t steps = o.chain > (o.step_out ? 1 : 0) ? (int32_t)o.chain : 1;
    float *logits = rc ? NULL : malloc((size_t)(steps * V) * sizeof *logits);
    if (!rc && !logits) rc = plume_fail(&err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = plume_session_feed(s, ids, n, logits, 0, &err);
    const int32_t first = rc ? 0 : argmax(logits, V);
    if (!rc && (o.step_out || o.chain)) { /* the drafter's steps after the prefill */
        int32_t draft[64];
        int32_t got = plume_drafter_draft(d, s, first, steps, draft, logits, &err);
        if (got < 0) rc = got;
        else if (got < 1) rc = plume_fail(&err, PLUME_EINVAL, "draft: the drafter drafted nothing");
        int64_t shape[2] = {got, V};
        if (!rc && o.step_out) rc = npy_write(o.step_out, "<f4", shape + 1, 1, logits, &err);
        if (!rc && o.chain) {
            if (got < steps) fprintf(stderr, "draft: the chain stopped at an end-of-turn id after %d steps\n", got);
            rc = npy_write(o.chain_out, "<f4", shape, 2, logits, &err);
        }
    }
    if (!rc && o.n) rc = spec_run(&o, m, s, d, first, &err);
    free(logits);
    free(ids);
    plume_session_free(s);
    plume_drafter_free(d);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}
