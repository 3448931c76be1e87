/* convert.h -- the converter inside libplume: any tensor source (a Hugging Face checkpoint,
 * or the random generator of synth.c) -> a bundle directory. It streams rows, so
 * converting the 10 GB E2B checkpoint needs a few hundred MB at most. The public face is
 * plume_convert() and plume_synth_bundle() (plume.h); the tensor sources are in source.h. */
#ifndef PLUME_CONVERT_H
#define PLUME_CONVERT_H

#include <stdint.h>

#include "config.h"
#include "source.h"

typedef struct {
    const char *weights; /* "f32", "bf16", "q8", "q4" */
    int32_t n_ctx;       /* <= 0: min(max_position_embeddings, 4096) */
    int32_t progress;    /* show progress on stderr */
    const char *layout;  /* q8/q4 weights: "auto" (NULL), "tiles" (where they fit) or "rows" */
    const char *head;    /* q4 weights: "q8" (NULL: the token sidecar) or "q4" (in the last chunk) */
    const char *q4_scale; /* q4 weights: the step rule, "best" (NULL), "absmax" or "q4_0" (quant.h) */
    int32_t report;       /* print on stderr what was requantized (a GGUF's K-quants) and its error */
} conv_options;

/* Convert src into the bundle directory out (which must not exist yet). Files are written
 * into a temporary sibling directory renamed into place at the end. */
int convert_run(const conv_source *src, const conv_options *opt, const char *out, char **err);

#endif
