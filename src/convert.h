/* convert.h -- the converter inside libplume: any tensor source (a Hugging Face checkpoint,
 * or the random generator of `plume synth`) -> a bundle directory. It streams rows, so
 * converting the 10 GB E2B checkpoint needs a few hundred MB at most. The public face is
 * plume_convert() (plume.h); the CLI's subcommands use these internals directly. */
#ifndef PLUME_CONVERT_H
#define PLUME_CONVERT_H

#include <stdint.h>

#include "config.h"

/* Where tensors come from. Names are the checkpoint's (model.language_model.*). */
typedef struct {
    void *ctx;
    const char *config_json; /* the text of config.json */
    const char *dir;         /* a checkpoint folder with tokenizer files, or NULL */
    /* The shape of a tensor: 0, or 1 if there is no such tensor. */
    int (*shape)(void *ctx, const char *name, int32_t *ndim, int64_t *shape);
    /* Rows [r0, r0 + n) of a tensor seen as [rows, cols] (1-D: one row) as float32. */
    int (*read)(void *ctx, const char *name, int64_t r0, int64_t n, float *out, char **err);
} conv_source;

typedef struct {
    const char *weights; /* "f32", "bf16", "q8", "q4" */
    int32_t n_ctx;       /* <= 0: min(max_position_embeddings, 4096) */
    int32_t progress;    /* show progress on stderr */
    const char *layout;  /* q8/q4 weights: "auto" (NULL), "tiles" (where they fit) or "rows" */
} conv_options;

/* Convert src into the bundle directory out (which must not exist yet). Files are written
 * into a temporary sibling directory renamed into place at the end. */
int convert_run(const conv_source *src, const conv_options *opt, const char *out, char **err);

/* A source over a Hugging Face checkpoint directory (model.safetensors or an index). */
int source_hf_open(conv_source *src, const char *dir, char **err);
void source_hf_close(conv_source *src);

/* A source of random weights in the real layout for a config (tiny, e2b or a JSON file).
 * Implemented by the CLI (tools/synth.c), not by the library. */
int source_synth_open(conv_source *src, const char *config, uint64_t seed, int32_t vocab, char **err);
void source_synth_close(conv_source *src);

#endif
