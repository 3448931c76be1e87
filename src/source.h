/* source.h -- where the converter's tensors come from: a Hugging Face checkpoint
 * (source_hf.c), a GGUF file (source_gguf.c) or the random generator of `plume synth` (synth.c). A source answers two
 * questions, a tensor's shape and a block of its rows as float32, so convert.c can stream any
 * of them into a bundle. Sources know nothing of bundles or the converter. */
#ifndef PLUME_SOURCE_H
#define PLUME_SOURCE_H

#include <stdint.h>

/* Where tensors come from. Names are the checkpoint's (model.language_model.*). */
typedef struct {
    void *ctx;
    const char *config_json; /* the text of config.json */
    const char *dir;         /* a checkpoint folder with tokenizer files, or NULL */
    /* The shape of a tensor: 0, or 1 if there is no such tensor. */
    int (*shape)(void *ctx, const char *name, int32_t *ndim, int64_t *shape);
    /* Rows [r0, r0 + n) of a tensor seen as [rows, cols] (cols: the last dimension; 1-D and
     * scalars: one row) as float32. */
    int (*read)(void *ctx, const char *name, int64_t r0, int64_t n, float *out, char **err);
    /* The name of tensor i (0, 1, ...), or NULL past the last: what convert_copy_tower lists. */
    const char *(*name_at)(void *ctx, int32_t i);
    /* Optional (NULL in sources that do not have them): */
    const char *tokenizer_json;        /* the text of a tokenizer.json (GGUF: built from its metadata) */
    const char *tokenizer_config_json; /* the text of a tokenizer_config.json */
    /* How a tensor is stored in the source when that matters to the converter: "F32", "F16"
     * and "BF16" linears are kept at that precision in q8/q4 bundles (GGUF's mixed
     * precision), other non-NULL names ("Q6_K", ...) are requantized with their error
     * reported; NULL: an ordinary float tensor. */
    const char *(*storage)(void *ctx, const char *name, int *exact);
} conv_source;

/* A source over a Hugging Face checkpoint directory (model.safetensors or an index). */
int source_hf_open(conv_source *src, const char *dir, char **err);
void source_hf_close(conv_source *src);

/* A source over a GGUF file of Gemma 4 E2B/E4B as llama.cpp's converter and llama-quantize
 * write it: tensors renamed to the checkpoint's, config.json and tokenizer.json built from the
 * metadata. */
int source_gguf_open(conv_source *src, const char *path, char **err);
void source_gguf_close(conv_source *src);

/* A source of random weights in the real layout for a config ("tiny", "e2b", "e4b" or a config.json
 * path), every element a pure function of (seed, tensor name, index); vocab > 0 overrides
 * the config's vocabulary size (synth.c). */
int source_synth_open(conv_source *src, const char *config, uint64_t seed, int32_t vocab, char **err);
void source_synth_close(conv_source *src);

#endif
