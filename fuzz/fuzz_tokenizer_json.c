/* fuzz_tokenizer_json.c -- plume_tokenizer_open_json on arbitrary files (the pipeline checks,
 * vocab, added tokens, merges, the binary form built and validated), then a few encodes and
 * decodes with whatever opened. */
#include "fuzz.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Encode and decode a few fixed texts and the first ids with an opened tokenizer. */
static void exercise(const plume_tokenizer *t) {
    static const char *const texts[] = {"Hello world", "<bos><|turn>user\n\xc3\xa9\xe2\x96\x81 a", "abc abc  x",
                                        "\xf0\x9f\x98\x80<x>"};
    int32_t ids[64];
    char out[256];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t n = plume_tokenize(t, texts[i], strlen(texts[i]), ids, 64);
        if (n > 64) n = 64;
        if (n > 0) plume_detokenize(t, ids, n, (int32_t)(i % 2), out, sizeof out);
    }
    int32_t nv = plume_tokenizer_n_vocab(t);
    for (int32_t i = 0; i < 64; i++) ids[i] = i < nv ? i : nv - 1;
    plume_detokenize(t, ids, nv < 64 ? nv : 64, 0, out, sizeof out);
}

/* Open the input as tokenizer.json. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(0, "tokenizer.json");
    if (fuzz_write(path, data, size)) return 0;
    plume_tokenizer *t = NULL;
    char *err = NULL;
    if (plume_tokenizer_open_json(&t, path, &err) == 0) exercise(t);
    else if (!err) abort();
    plume_tokenizer_free(t);
    fuzz_note(err);
    free(err);
    return 0;
}
