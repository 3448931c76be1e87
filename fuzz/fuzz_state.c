/* fuzz_state.c -- plume_session_load on arbitrary state files for the tiny bundle
 * ($PLUME_FUZZ_BUNDLE). Its checksum and model identity are public, so data[0] picks what the
 * harness makes consistent before loading, as a hostile file would: bit 0, the payload size
 * and the checksum; bit 1, the model identity. A loaded session is stepped once. */
#include "fuzz.h"
#include "model.h"

static plume_model *model;

/* Open the tiny bundle once. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    plume_model_params mp = plume_model_default_params();
    mp.n_threads = 1;
    mp.isa = "scalar";
    char *err = NULL;
    if (plume_model_open(&model, fuzz_fixture("PLUME_FUZZ_BUNDLE"), &mp, &err)) {
        fprintf(stderr, "fuzz: %s\n", err ? err : "?");
        exit(2);
    }
    return 0;
}

/* Load the input (made consistent as data[0] says) as a state file. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t n = size - 1;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return 0;
    memcpy(b, data + 1, n);
    if ((data[0] & 2) && n >= 24) memcpy(b + 16, &model->identity, 8);
    if ((data[0] & 1) && n >= 72) {
        uint64_t payload = n - 72, h = 1469598103934665603ull;
        memcpy(b + 56, &payload, 8);
        for (uint64_t i = 0; i < payload; i++) h = (h ^ b[64 + i]) * 1099511628211ull;
        memcpy(b + 64 + payload, &h, 8);
    }
    const char *path = fuzz_path(0, "x.state");
    int w = fuzz_write(path, b, n);
    free(b);
    if (w) return 0;
    plume_session *s = NULL;
    char *err = NULL;
    if (plume_session_load(&s, model, path, &err) == 0) {
        int32_t id = 5;
        float *lg = malloc((size_t)plume_model_n_vocab(model) * sizeof *lg);
        if (plume_session_n_past(s) < plume_session_n_ctx(s) && lg && plume_session_feed(s, &id, 1, lg, 0, &err))
            abort();
        free(lg);
        plume_session_free(s);
    } else if (!err) {
        abort();
    }
    fuzz_note(err);
    free(err);
    return 0;
}
