/* fuzz_npy.c -- npy_parse on arbitrary bytes (the buffer is exactly the input, so a read past
 * the header is seen), then every element converted. */
#include "fuzz.h"
#include "npy.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Parse; on success the data must lie inside the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    npy_view v;
    char *err = NULL;
    if (npy_parse(buf, size, "x.npy", &v, &err) == 0) {
        if (v.data < buf || (size_t)(v.data - buf) > size ||
            (uint64_t)v.count * (uint64_t)v.itemsize > size - (size_t)(v.data - buf))
            abort();
        if (v.count <= (1 << 20)) {
            float *f = malloc((size_t)(v.count ? v.count : 1) * sizeof *f);
            if (f) npy_to_f32(&v, f);
            free(f);
        }
    } else if (!err) {
        abort();
    }
    free(err);
    free(buf);
    return 0;
}
