/* fuzz_config.c -- the config parsers: a Hugging Face config.json (first byte even) or a
 * bundle's model_config.json (odd), then the derived values a model open relies on. */
#include "config.h"
#include "fuzz.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* What every accepted config must satisfy for model.c and session.c to index safely. */
static void check_config(const plume_config *c) {
    if (c->L < 2 || c->L > PLUME_MAX_LAYERS || c->n_eos < 1 || c->n_eos > 8) abort();
    for (int32_t i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->V) abort();
    for (int32_t l = 0; l < c->L; l++)
        if (c->kv_src[l] < 0 || c->kv_src[l] > l || c->hd[l] < 2) abort();
    if (c->chunk[0] != 0 || c->chunk[PLUME_N_CHUNKS] != c->L) abort();
    for (int32_t i = 0; i < PLUME_N_CHUNKS; i++) /* no chunk empty, whatever the config */
        if (c->chunk[i + 1] <= c->chunk[i]) abort();
}

/* Parse the rest of the input as one config or the other. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    plume_config c;
    char *err = NULL;
    int rc;
    if (data[0] % 2 == 0) {
        char *text = malloc(size);
        if (!text) return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        rc = plume_config_from_hf_text(&c, text, "config.json", &err);
        free(text);
    } else {
        const char *path = fuzz_path(0, "model_config.json");
        if (fuzz_write(path, data + 1, size - 1)) return 0;
        rc = plume_config_read_bundle(&c, path, &err);
    }
    if (rc == 0) check_config(&c);
    else if (!err) abort();
    fuzz_note(err);
    free(err);
    return 0;
}
