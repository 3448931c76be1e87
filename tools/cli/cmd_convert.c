/* cmd_convert.c -- `plume convert`: a Hugging Face checkpoint -> a bundle, through the
 * library's plume_convert() (src/convert.c). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char convert_usage[] =
    "usage: plume convert HF_DIR|MODEL.gguf BUNDLE_DIR [--weights f32|bf16|q8|q4|auto] [--context N]\n"
    "                     [--layout auto|tiles|rows] [--head q8|q4] [--q4-scale best|absmax|q4_0]\n"
    "  Convert a Hugging Face Gemma 4 checkpoint (config.json + safetensors, bf16/f16/f32,\n"
    "  sharded or not), or a Gemma 4 GGUF file as llama.cpp writes it, into a plume bundle.\n"
    "  BUNDLE_DIR must not exist. A GGUF's Q4_0 blocks stay exact at q4, its F32/F16/BF16\n"
    "  linears stay as they are, K-quants are requantized (their error is printed).\n"
    "  --weights   precision of the layer weights (default q8; a GGUF: auto, its own)\n"
    "  --context   context length of the bundle (default min(max_position_embeddings, 4096))\n"
    "  --layout    q8/q4 weights: tiles (16 rows interleaved, what the AVX-512 kernels stream\n"
    "              fastest), rows (row after row, what the AVX2 and NEON kernels read), or\n"
    "              auto (default): tiles if this CPU's kernels read them, else rows\n"
    "  --head      q4 weights: the head as q8 (default: the INT8 token sidecar, as in q8 bundles)\n"
    "              or q4 (its own q4 copy in the last chunk: 226 MB a decode step reads instead\n"
    "              of 403 MB on E2B, at q4's error; docs/BUNDLE.md)\n"
    "  --q4-scale  q4 weights: how each group of 32's fp16 step is chosen: best (default: the\n"
    "              smallest error among the steps that put the group's largest weight on a\n"
    "              level, so a QAT checkpoint already on a 4-bit grid is kept exactly), absmax\n"
    "              (absmax / 7) or q4_0 (llama.cpp's signed max / -8)\n"
    "  --quiet     no progress\n";

int cmd_convert(int argc, char **argv) {
    const char *pos[2] = {0}, *weights = NULL, *layout = "auto", *head = "q8", *q4_scale = "best";
    int npos = 0, quiet = 0;
    int64_t ctx = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(convert_usage, stdout); return 0; }
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc) layout = argv[++i];
        else if (!strcmp(argv[i], "--head") && i + 1 < argc) head = argv[++i];
        else if (!strcmp(argv[i], "--q4-scale") && i + 1 < argc) q4_scale = argv[++i];
        else if (!strcmp(argv[i], "--context") && i + 1 < argc) {
            if (cli_int(argv[++i], 1, 1 << 24, &ctx)) return cli_error("convert: --context wants a positive integer, not '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-') return cli_error("convert: unknown option '%s' (see plume convert --help)", argv[i]);
        else if (npos < 2) pos[npos++] = argv[i];
        else return cli_error("convert: too many arguments (see plume convert --help)");
    }
    if (npos != 2) { fputs(convert_usage, stderr); return 2; }
    if (weights && strcmp(weights, "f32") && strcmp(weights, "bf16") && strcmp(weights, "q8") && strcmp(weights, "q4") &&
        strcmp(weights, "auto"))
        return cli_error("convert: --weights must be f32, bf16, q8, q4 or auto (not '%s')", weights);
    if (strcmp(layout, "auto") && strcmp(layout, "tiles") && strcmp(layout, "rows"))
        return cli_error("convert: --layout must be auto, tiles or rows (not '%s')", layout);
    plume_convert_params p = plume_convert_default_params();
    p.weights = weights;
    p.layout = layout;
    p.head = head;
    p.q4_scale = q4_scale;
    p.report = !quiet;
    p.n_ctx = (int32_t)ctx;
    p.progress = !quiet && isatty(2);
    char *err = NULL;
    if (cli_mkdir_parent(pos[1])) return 1;
    return plume_convert(pos[0], pos[1], &p, &err) ? cli_lib_error_free(err) : 0;
}
