/* fuzz_safetensors.c -- st_open on arbitrary files: the u64 header length, the JSON header
 * (dtypes, shapes, offsets, __metadata__) and the checks against the file size. */
#include "fuzz.h"
#include "safetensors.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Parse the input as a safetensors file; on success every entry must lie inside the file. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(0, "x.safetensors");
    if (fuzz_write(path, data, size)) return 0;
    st_file f;
    char *err = NULL;
    if (st_open(&f, path, &err) == 0) {
        for (int32_t i = 0; i < f.n; i++) {
            const st_tensor *t = &f.t[i];
            if (t->offset < f.data_start || t->nbytes > f.file_size || t->offset > f.file_size - t->nbytes) abort();
            if (st_find(&f, t->name) == NULL) abort();
        }
        (void)st_meta(&f, "format");
        st_close(&f);
    } else if (!err) {
        abort(); /* an error always comes with a message */
    }
    fuzz_note(err);
    free(err);
    return 0;
}
