/* fuzz_tokenize.c -- encoding and decoding with a real tokenizer ($PLUME_FUZZ_TOKENIZER, a
 * tokenizer.bin or tokenizer.json): arbitrary bytes as text, arbitrary ids (in range or
 * not) through plume_detokenize and the streaming decoder with small buffers.
 * Invariants: valid UTF-8 without U+2581 comes back from decode(encode(text)) unchanged;
 * the stream's pieces joined equal the whole decode. */
#include "fuzz.h"

static plume_tokenizer *tok;

/* Open the tokenizer once. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = fuzz_fixture("PLUME_FUZZ_TOKENIZER");
    char *err = NULL;
    size_t n = strlen(path);
    int rc = n > 5 && !strcmp(path + n - 5, ".json") ? plume_tokenizer_open_json(&tok, path, &err)
                                                       : plume_tokenizer_open(&tok, path, &err);
    if (rc) {
        fprintf(stderr, "fuzz: %s\n", err ? err : path);
        exit(2);
    }
    return 0;
}

/* Decode ids whole and through the stream (output buffers of cap bytes, grown on demand as
 * the API allows); the two must agree. */
static void decode_both(const int32_t *ids, int32_t n, int32_t skip, size_t cap) {
    int64_t whole = plume_detokenize(tok, ids, n, skip, NULL, 0);
    if (whole < 0) return; /* an id out of range: refused whole, checked per id below */
    char *w = malloc((size_t)whole + 1), *s = malloc((size_t)whole + 64 * (size_t)n + 64);
    if (!w || !s) abort();
    if (plume_detokenize(tok, ids, n, skip, w, (size_t)whole + 1) != whole) abort();
    plume_detok_stream st;
    plume_detok_stream_init(&st, tok, skip);
    size_t at = 0;
    char piece[64];
    for (int32_t i = 0; i <= n; i++) {
        int32_t r = i < n ? plume_detok_stream_put(&st, ids[i], piece, cap) : plume_detok_stream_flush(&st, piece, cap);
        if (r < 0) abort();
        if ((size_t)r >= cap) /* did not fit: the state was kept, retry with room */
            r = i < n ? plume_detok_stream_put(&st, ids[i], piece, sizeof piece)
                      : plume_detok_stream_flush(&st, piece, sizeof piece);
        if (r < 0 || (size_t)r >= sizeof piece) abort();
        memcpy(s + at, piece, (size_t)r);
        at += (size_t)r;
    }
    if (at != (size_t)whole || memcmp(s, w, at)) abort();
    free(w);
    free(s);
}

/* data[0] picks: even, the rest is text; odd, the rest is 16-bit ids around the vocabulary. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16) return 0;
    const int32_t V = plume_tokenizer_n_vocab(tok);
    if (data[0] % 2 == 0) {
        const char *text = (const char *)data + 1;
        size_t len = size - 1;
        int32_t n = plume_tokenize(tok, text, len, NULL, 0);
        if (n < 0) return 0; /* invalid UTF-8 */
        int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
        if (!ids || plume_tokenize(tok, text, len, ids, n) != n) abort();
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= V) abort();
        int has_u2581 = 0;
        for (size_t i = 0; i + 3 <= len; i++) has_u2581 |= !memcmp(text + i, "\xe2\x96\x81", 3);
        int64_t dn = plume_detokenize(tok, ids, n, 0, NULL, 0);
        char *back = malloc((size_t)(dn > 0 ? dn : 0) + 1);
        if (!back || dn < 0 || plume_detokenize(tok, ids, n, 0, back, (size_t)dn + 1) != dn) abort();
        if (!has_u2581 && ((size_t)dn != len || memcmp(back, text, len))) abort();
        decode_both(ids, n, data[0] & 2 ? 1 : 0, 1 + data[0] % 16);
        free(back);
        free(ids);
    } else {
        int32_t n = (int32_t)((size - 1) / 2), *ids = malloc(((size_t)n + 1) * sizeof *ids);
        if (!ids) abort();
        for (int32_t i = 0; i < n; i++) {
            uint32_t r = (uint32_t)data[1 + 2 * i] | (uint32_t)data[2 + 2 * i] << 8;
            ids[i] = (int32_t)(r % ((uint32_t)V + 4)) - 2; /* -2 .. V+1 */
        }
        decode_both(ids, n, data[0] & 2 ? 1 : 0, 1 + (data[0] >> 2) % 16);
        for (int32_t i = 0; i < n; i++) /* out-of-range ids: EINVAL from both paths */
            if (ids[i] < 0 || ids[i] >= V) {
                plume_detok_stream st;
                char piece[64];
                plume_detok_stream_init(&st, tok, 0);
                if (plume_detok_stream_put(&st, ids[i], piece, sizeof piece) != PLUME_EINVAL) abort();
                break;
            }
        free(ids);
    }
    return 0;
}
