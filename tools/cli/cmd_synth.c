/* cmd_synth.c -- `plume synth`: a deterministic random-weight model, as a Hugging Face
 * checkpoint or a bundle (the library's plume_synth_checkpoint / plume_synth_bundle). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* ---- plume synth ----------------------------------------------------------------------- */

static const char synth_usage[] =
    "usage: plume synth --config tiny|e2b|e4b|FILE.json [--seed S] (--hf OUT_DIR | --bundle OUT_DIR)\n"
    "                   [--weights f32|bf16|q8|q4] [--layout auto|tiles|rows] [--context N] [--shards N]\n"
    "                   [--tokenizer DIR] [--head q8|q4] [--q4-scale best|absmax|q4_0]\n"
    "  Write a deterministic random-weight Gemma 4 model: a Hugging Face checkpoint (--hf,\n"
    "  bf16 safetensors in the real layout) or a plume bundle directly (--bundle).\n"
    "  --head q4         q4 weights: a q4 head in the last chunk (default q8: the token sidecar)\n"
    "  --q4-scale RULE   q4 weights: each group's step, best (default), absmax or q4_0 (plume convert --help)\n"
    "  --tokenizer DIR   copy DIR/tokenizer.json (+ tokenizer_config.json) into the output\n"
    "  --vocab N         override the config's vocabulary size (e.g. 262144 with the real tokenizer)\n";

int cmd_synth(int argc, char **argv) {
    const char *config = NULL, *hf = NULL, *bundle = NULL, *weights = "q8", *tokenizer = NULL, *layout = "auto",
               *head = "q8", *q4_scale = "best";
    int64_t seed = 1, shards = 2, ctx = 0, vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(synth_usage, stdout); return 0; }
        else if (!strcmp(a, "--config") && more) config = argv[++i];
        else if (!strcmp(a, "--hf") && more) hf = argv[++i];
        else if (!strcmp(a, "--bundle") && more) bundle = argv[++i];
        else if (!strcmp(a, "--weights") && more) weights = argv[++i];
        else if (!strcmp(a, "--layout") && more) layout = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) tokenizer = argv[++i];
        else if (!strcmp(a, "--head") && more) head = argv[++i];
        else if (!strcmp(a, "--q4-scale") && more) q4_scale = argv[++i];
        else if (!strcmp(a, "--seed") && more) {
            if (cli_int(argv[++i], 0, INT64_MAX, &seed)) return cli_error("synth: --seed wants a non-negative integer");
        } else if (!strcmp(a, "--shards") && more) {
            if (cli_int(argv[++i], 1, 99, &shards)) return cli_error("synth: --shards wants 1..99");
        } else if (!strcmp(a, "--vocab") && more) {
            if (cli_int(argv[++i], 8, 1 << 24, &vocab)) return cli_error("synth: --vocab wants an integer >= 8");
        } else if (!strcmp(a, "--context") && more) {
            if (cli_int(argv[++i], 1, 1 << 24, &ctx)) return cli_error("synth: --context wants a positive integer");
        } else return cli_error("synth: unknown option '%s' (see plume synth --help)", a);
    }
    if (!config || (!hf == !bundle)) { fputs(synth_usage, stderr); return 2; }
    if (cli_mkdir_parent(hf ? hf : bundle)) return 1;
    plume_synth_params sp = {.config = config, .seed = (uint64_t)seed, .vocab = (int32_t)vocab,
                             .tokenizer = tokenizer, .shards = (int32_t)shards};
    char *err = NULL;
    int rc;
    if (hf) {
        rc = plume_synth_checkpoint(&sp, hf, &err);
    } else {
        plume_convert_params cp = {.weights = weights, .n_ctx = (int32_t)ctx, .progress = isatty(2), .layout = layout,
                                  .head = head, .q4_scale = q4_scale};
        rc = plume_synth_bundle(&sp, &cp, bundle, &err);
    }
    return rc ? cli_lib_error_free(err) : 0;
}
