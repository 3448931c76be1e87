/* t_mm.h -- the fixtures of tests/data/tiny-mm-a (scripts/make-mm-fixtures.py), shared by
 * test_media_image.c, test_vision.c, test_audio.c and test_serve_media.c: the paths of its
 * files, and its checkpoint with both towers put together for plume convert. */
#ifndef PLUME_T_MM_H
#define PLUME_T_MM_H

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "common.h"
#include "safetensors.h"
#include "t.h"

/* The path of a tiny-mm-a fixture (one of 4 rotating static buffers: up to 4 in one call). */
static const char *fx(const char *name) {
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/tiny-mm-a/%s", t_data(), name);
    return p[k];
}

/* tests/data/<rel>, malloc'd. */
static char *t_mm_data_path(const char *rel) { return plume_path_join(t_data(), rel); }

/* In dir, the golden tiny-mm-a checkpoint put together: config.json of tiny-mm-a, tiny-a's text
 * shards and tokenizer (linked), the tower files, and an index naming each tensor's file (tiny-a's
 * shards carry stand-in tower tensors of the same names, which the index leaves aside). */
static int t_mm_checkpoint(const char *dir) {
    static const char *const links[][2] = {
        {"tiny-a/hf/model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors"},
        {"tiny-a/hf/model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors"},
        {"tiny-a/hf/tokenizer.json", "tokenizer.json"},
        {"tiny-a/hf/tokenizer_config.json", "tokenizer_config.json"},
        {"tiny-mm-a/config.json", "config.json"},
        {"tiny-mm-a/audio_tower.safetensors", "audio_tower.safetensors"},
        {"tiny-mm-a/vision_tower.safetensors", "vision_tower.safetensors"}};
    if (t_link_fixtures(dir, links, sizeof links / sizeof *links)) return -1;
    char *ip = t_mm_data_path("tiny-a/hf/model.safetensors.index.json"), *text = NULL, *err = NULL;
    int rc = plume_read_file(ip, &text, NULL, &err);
    cJSON *index = rc ? NULL : cJSON_Parse(text);
    cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    for (int k = 0; map && k < 2; k++) {
        const char *file = k ? "vision_tower.safetensors" : "audio_tower.safetensors";
        char *tp = plume_path_join(dir, file);
        st_file f;
        if (st_open(&f, tp, &err) == 0) {
            for (int32_t i = 0; i < f.n; i++) {
                cJSON_DeleteItemFromObjectCaseSensitive(map, f.t[i].name);
                cJSON_AddStringToObject(map, f.t[i].name, file);
            }
            st_close(&f);
        } else {
            map = NULL;
        }
        free(tp);
    }
    char *json = map ? cJSON_Print(index) : NULL, *op = plume_path_join(dir, "model.safetensors.index.json");
    rc = json ? plume_write_file(op, json, strlen(json), 0, &err) : -1;
    if (err) printf("  %s\n", err);
    cJSON_Delete(index);
    free(json), free(op), free(ip), free(text), free(err);
    return rc;
}

#endif
