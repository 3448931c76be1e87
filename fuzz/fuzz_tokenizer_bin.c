/* fuzz_tokenizer_bin.c -- plume_tokenizer_open on arbitrary tokenizer.bin files. The file
 * carries a checksum that random bytes never match, so when the first input byte is odd the
 * harness seals the rest as the writer would (size and checksum fields), which is what a
 * hostile file does: the structural checks behind the checksum are what is fuzzed. */
#include "fuzz.h"
#include "tokenizer.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Encode and decode a few texts and ids with an opened tokenizer. */
static void exercise(const plume_tokenizer *t) {
    static const char *const texts[] = {"Hello world", "<bos><|turn>user\n\xc3\xa9\xe2\x96\x81 a", "\xf0\x9f\x98\x80<x>"};
    int32_t ids[64];
    char out[256];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t n = plume_tokenize(t, texts[i], strlen(texts[i]), ids, 64);
        if (n > 64) n = 64;
        if (n > 0) plume_detokenize(t, ids, n, 0, out, sizeof out);
    }
    int32_t nv = plume_tokenizer_n_vocab(t);
    for (int32_t i = 0; i < 64; i++) ids[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)nv);
    plume_detokenize(t, ids, 64, 1, out, sizeof out);
}

/* Open the input (resealed when data[0] is odd) as tokenizer.bin. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t *bin = malloc(size);
    if (!bin) return 0;
    memcpy(bin, data + 1, size - 1);
    size_t n = size - 1;
    if (data[0] % 2 && n >= 32) {
        plume_wr_u64le(bin + 16, n);
        plume_wr_u64le(bin + 24, plume_tok_checksum(bin + 32, n - 32));
    }
    const char *path = fuzz_path(0, "tokenizer.bin");
    int w = fuzz_write(path, bin, n);
    free(bin);
    if (w) return 0;
    plume_tokenizer *t = NULL;
    char *err = NULL;
    if (plume_tokenizer_open(&t, path, &err) == 0) exercise(t);
    else if (!err) abort();
    plume_tokenizer_free(t);
    fuzz_note(err);
    free(err);
    return 0;
}
