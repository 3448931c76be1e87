/* fuzz_gguf.c -- gguf_open on arbitrary files (the header, the metadata of every type, the
 * tensor table and its checks against the file), then what the converter does with an open
 * file: every metadata value read, every tensor's rows dequantized, and the GGUF converter
 * source (config.json and tokenizer.json built from the metadata). */
#include "fuzz.h"
#include "gguf.h"
#include "source.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Read every metadata value and tensor of an open file; abort on a broken invariant. */
static void walk(const gguf_file *f) {
    for (int64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        int64_t iv;
        double dv;
        uint64_t len, pos = 0;
        (void)gguf_get_int(f, kv->key, &iv);
        (void)gguf_get_float(f, kv->key, &dv);
        const char *s = gguf_get_str(f, kv->key, &len);
        if (s && (s < (const char *)f->map.data || len > f->map.size || s + len > (const char *)f->map.data + f->map.size)) abort();
        for (uint64_t k = 0; k < kv->n && k < 64; k++) (void)gguf_arr_int(kv, k, &iv), (void)gguf_arr_float(kv, k, &dv);
        while ((s = gguf_arr_next_str(kv, &pos, &len)))
            if (s + len > (const char *)f->map.data + f->map.size) abort();
        if (gguf_find_kv(f, kv->key) != kv) abort();
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->t[i];
        if (t->data < f->map.data || t->nbytes > f->map.size || t->data + t->nbytes > f->map.data + f->map.size) abort();
        if (gguf_find(f, t->name) != t) abort();
        int64_t n = t->rows < 4 ? t->rows : 4;
        if (t->ne[0] > (1 << 16)) continue; /* a row of floats stays small */
        float *y = malloc((size_t)(n * t->ne[0]) * sizeof *y);
        char *err = NULL;
        if (y && gguf_read_rows(t, 0, n, y, &err)) abort();
        free(y);
        free(err);
    }
}

/* Parse the input as a GGUF file; on success walk it, then open it as a converter source. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(0, "x.gguf");
    if (fuzz_write(path, data, size)) return 0;
    gguf_file f;
    char *err = NULL;
    if (gguf_open(&f, path, &err) == 0) {
        walk(&f);
        gguf_close(&f);
        conv_source src;
        if (source_gguf_open(&src, path, &err) == 0) source_gguf_close(&src);
        else if (!err) abort();
    } else if (!err) {
        abort(); /* an error always comes with a message */
    }
    fuzz_note(err);
    free(err);
    return 0;
}
