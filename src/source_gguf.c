/* source_gguf.c -- a converter source over a GGUF file of Gemma 4 (general.architecture
 * "gemma4"), as llama.cpp's convert_hf_to_gguf.py and llama-quantize write it: the tensors
 * under their checkpoint names (blk.N.attn_q.weight -> model.language_model.layers.N.
 * self_attn.q_proj.weight, ...), a config.json rebuilt from the gemma4.* metadata, and a
 * tokenizer.json / tokenizer_config.json (with the chat template) from tokenizer.ggml.*. Rows
 * are dequantized by gguf.c; the converter's q4 step rule then stores Q4_0 blocks exactly. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "gguf.h"
#include "source.h"

#define HF_PREFIX "model.language_model."

/* One tensor under both names. */
typedef struct {
    char *hf;               /* model.language_model.* */
    const gguf_tensor *t;
} gg_name;

typedef struct {
    gguf_file f;
    gg_name *names;  /* [n] */
    int32_t n;
    char *config, *tok_json, *tok_config;
} gg_ctx;

/* ---- names ------------------------------------------------------------------------------ */

/* GGUF suffix -> checkpoint suffix, for blk.N.* and the globals. */
static const char *const layer_map[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"inp_gate.weight", "per_layer_input_gate.weight"},
    {"proj.weight", "per_layer_projection.weight"},
    {"post_norm.weight", "post_per_layer_input_norm.weight"},
    {"layer_output_scale.weight", "layer_scalar"},
};
static const char *const global_map[][2] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
    {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
    {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
    {"output_norm.weight", "norm.weight"},
};

/* The checkpoint name of a GGUF tensor (malloc'd), or NULL for one the text model does not use. */
static char *hf_name(const char *g) {
    char buf[512];
    for (size_t i = 0; i < sizeof global_map / sizeof *global_map; i++)
        if (!strcmp(g, global_map[i][0])) {
            snprintf(buf, sizeof buf, HF_PREFIX "%s", global_map[i][1]);
            return strdup(buf);
        }
    int layer, used = 0;
    if (sscanf(g, "blk.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0) return NULL;
    for (size_t i = 0; i < sizeof layer_map / sizeof *layer_map; i++)
        if (!strcmp(g + used, layer_map[i][0])) {
            snprintf(buf, sizeof buf, HF_PREFIX "layers.%d.%s", layer, layer_map[i][1]);
            return strdup(buf);
        }
    return NULL;
}

/* The entry of a checkpoint name, or NULL. */
static const gg_name *find(const gg_ctx *g, const char *name) {
    for (int32_t i = 0; i < g->n; i++)
        if (!strcmp(g->names[i].hf, name)) return &g->names[i];
    return NULL;
}

/* ---- the source's functions ----------------------------------------------------------------- */

/* conv_source.shape: the checkpoint's order of dimensions (GGUF's reversed). */
static int gg_shape(void *ctx, const char *name, int32_t *ndim, int64_t *shape) {
    const gg_name *e = find(ctx, name);
    if (!e) return 1;
    *ndim = e->t->ndim;
    for (int32_t i = 0; i < e->t->ndim; i++) shape[i] = e->t->ne[e->t->ndim - 1 - i];
    return 0;
}

/* conv_source.read: rows of a tensor as float32 (dequantized). */
static int gg_read(void *ctx, const char *name, int64_t r0, int64_t n, float *out, char **err) {
    const gg_name *e = find(ctx, name);
    if (!e) return plume_fail(err, PLUME_EFORMAT, "GGUF: no tensor for %s", name);
    return gguf_read_rows(e->t, r0, n, out, err);
}

/* conv_source.name_at. */
static const char *gg_name_at(void *ctx, int32_t i) {
    const gg_ctx *g = ctx;
    return i >= 0 && i < g->n ? g->names[i].hf : NULL;
}

/* conv_source.storage: the ggml type's name and whether it converts exactly. */
static const char *gg_storage(void *ctx, const char *name, int *exact) {
    const gg_name *e = find(ctx, name);
    if (!e) return NULL;
    *exact = gguf_type_exact(e->t->type);
    return gguf_type_name(e->t->type);
}

/* ---- config.json ------------------------------------------------------------------------------ */

/* The id of the token whose text is piece, or -1. */
static int64_t gguf_token_id(const gguf_file *f, const char *piece) {
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    uint64_t pos = 0, len, n = strlen(piece);
    const char *s;
    for (int64_t i = 0; (s = gguf_arr_next_str(toks, &pos, &len)); i++)
        if (len == n && !memcmp(s, piece, n)) return i;
    return -1;
}

/* A required integer of the gemma4.* metadata. */
static int need_int(const gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t *v, char **err) {
    char k[128];
    snprintf(k, sizeof k, "gemma4.%s", key);
    if (gguf_get_int(f, k, v) || *v < lo || *v > hi)
        return plume_fail(err, PLUME_EFORMAT, "%s: metadata %s is missing or out of range", f->path, k);
    return 0;
}

/* config.json of the text model from the metadata (what convert_hf_to_gguf.py wrote from it). */
static int build_config(gg_ctx *g, char **err) {
    const gguf_file *f = &g->f;
    uint64_t len;
    const char *arch = gguf_get_str(f, "general.architecture", &len);
    if (!arch || len != 6 || memcmp(arch, "gemma4", 6))
        return plume_fail(err, PLUME_EFORMAT, "%s: not a Gemma 4 GGUF (general.architecture '%.*s'); plume runs Gemma 4 E2B and E4B",
                          f->path, arch ? (int)(len < 64 ? len : 64) : 7, arch ? arch : "missing");
    int64_t L, D, H, KV, hd_full, hd_swa, ctxlen, swin, shared, Dp = 0, eos = 1, bos = 2, pad = 0;
    int rc = need_int(f, "block_count", 1, 1024, &L, err) || need_int(f, "embedding_length", 1, 1 << 20, &D, err) ||
             need_int(f, "attention.head_count", 1, 4096, &H, err) ||
             need_int(f, "attention.key_length", 1, 4096, &hd_full, err) ||
             need_int(f, "attention.key_length_swa", 1, 4096, &hd_swa, err) ||
             need_int(f, "context_length", 1, 1 << 30, &ctxlen, err) ||
             need_int(f, "attention.sliding_window", 1, 1 << 30, &swin, err) ||
             need_int(f, "attention.shared_kv_layers", 0, 1024, &shared, err);
    if (rc) return PLUME_EFORMAT;
    gguf_get_int(f, "gemma4.embedding_length_per_layer_input", &Dp);
    /* head_count_kv and feed_forward_length: a number, or one per layer */
    const gguf_kv *kvk = gguf_find_kv(f, "gemma4.attention.head_count_kv"), *ffk = gguf_find_kv(f, "gemma4.feed_forward_length");
    int64_t ff0 = 0, ffl = 0;
    if (!kvk || (kvk->type == GGUF_ARRAY ? gguf_arr_int(kvk, 0, &KV) : gguf_get_int(f, kvk->key, &KV)) || KV < 1 ||
        !ffk || (ffk->type == GGUF_ARRAY ? gguf_arr_int(ffk, 0, &ff0) || gguf_arr_int(ffk, ffk->n - 1, &ffl)
                                         : gguf_get_int(f, ffk->key, &ff0)) || ff0 < 1)
        return plume_fail(err, PLUME_EFORMAT, "%s: metadata gemma4.attention.head_count_kv or gemma4.feed_forward_length is missing or bad", f->path);
    if (ffk->type == GGUF_ARRAY && ffk->n != (uint64_t)L)
        return plume_fail(err, PLUME_EFORMAT, "%s: gemma4.feed_forward_length has %llu entries for %lld layers", f->path,
                          (unsigned long long)ffk->n, (long long)L);
    const gguf_kv *pat = gguf_find_kv(f, "gemma4.attention.sliding_window_pattern");
    if (!pat || pat->type != GGUF_ARRAY || pat->n != (uint64_t)L)
        return plume_fail(err, PLUME_EFORMAT, "%s: gemma4.attention.sliding_window_pattern is missing or not one per layer", f->path);
    double eps = 1e-6, theta = 1e6, theta_swa = 1e4, cap = 0;
    gguf_get_float(f, "gemma4.attention.layer_norm_rms_epsilon", &eps);
    gguf_get_float(f, "gemma4.rope.freq_base", &theta);
    gguf_get_float(f, "gemma4.rope.freq_base_swa", &theta_swa);
    gguf_get_float(f, "gemma4.final_logit_softcapping", &cap);
    gguf_get_int(f, "tokenizer.ggml.bos_token_id", &bos);
    gguf_get_int(f, "tokenizer.ggml.eos_token_id", &eos);
    gguf_get_int(f, "tokenizer.ggml.padding_token_id", &pad);
    /* proportional RoPE of the full layers: rope_freqs holds 1 for the rotated pairs */
    double prf = 0.25;
    const gguf_tensor *rf = gguf_find(f, "rope_freqs.weight");
    if (rf && rf->type == GGML_F32 && rf->rows == 1 && rf->ne[0] == hd_full / 2) {
        float *v = malloc((size_t)rf->ne[0] * sizeof *v);
        if (!v) return plume_fail(err, PLUME_ENOMEM, "out of memory");
        gguf_read_rows(rf, 0, 1, v, NULL);
        int64_t rot = 0;
        while (rot < rf->ne[0] && v[rot] == 1.0f) rot++;
        prf = (double)(2 * rot) / (double)hd_full;
        free(v);
    }
    const gguf_tensor *emb = gguf_find(f, "token_embd.weight"), *ple = gguf_find(f, "per_layer_token_embd.weight");
    if (!emb) return plume_fail(err, PLUME_EFORMAT, "%s: no token_embd.weight", f->path);
    cJSON *root = cJSON_CreateObject(), *tc = cJSON_CreateObject(), *lt = cJSON_CreateArray(), *eo = cJSON_CreateArray();
    cJSON *rp = cJSON_CreateObject(), *full = cJSON_CreateObject(), *sw = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "architectures"), cJSON_CreateString("Gemma4ForConditionalGeneration"));
    cJSON_AddStringToObject(root, "model_type", "gemma4");
    cJSON_AddBoolToObject(root, "tie_word_embeddings", 1);
    cJSON_AddNumberToObject(root, "bos_token_id", (double)bos);
    int64_t eos_piece = gguf_token_id(f, "<eos>"); /* Gemma's ends: <eos> (1), then the GGUF's (<turn|>) */
    if (eos_piece >= 0 && eos_piece != eos) cJSON_AddItemToArray(eo, cJSON_CreateNumber((double)eos_piece));
    cJSON_AddItemToArray(eo, cJSON_CreateNumber((double)eos));
    int64_t eot;
    if (!gguf_get_int(f, "tokenizer.ggml.eot_token_id", &eot) && eot != eos) cJSON_AddItemToArray(eo, cJSON_CreateNumber((double)eot));
    cJSON_AddItemToObject(root, "eos_token_id", eo);
    cJSON_AddNumberToObject(root, "pad_token_id", (double)pad);
    cJSON_AddStringToObject(tc, "model_type", "gemma4_text");
    cJSON_AddNumberToObject(tc, "hidden_size", (double)D);
    cJSON_AddNumberToObject(tc, "num_hidden_layers", (double)L);
    cJSON_AddNumberToObject(tc, "num_attention_heads", (double)H);
    cJSON_AddNumberToObject(tc, "num_key_value_heads", (double)KV);
    cJSON_AddNumberToObject(tc, "head_dim", (double)hd_swa);
    cJSON_AddNumberToObject(tc, "global_head_dim", (double)hd_full);
    cJSON_AddBoolToObject(tc, "attention_k_eq_v", 0);
    cJSON_AddBoolToObject(tc, "attention_bias", 0);
    cJSON_AddBoolToObject(tc, "enable_moe_block", 0);
    cJSON_AddNumberToObject(tc, "sliding_window", (double)swin);
    cJSON_AddNumberToObject(tc, "vocab_size", (double)emb->ne[1]);
    cJSON_AddNumberToObject(tc, "vocab_size_per_layer_input", (double)(ple ? ple->ne[1] : emb->ne[1]));
    cJSON_AddNumberToObject(tc, "hidden_size_per_layer_input", (double)Dp);
    cJSON_AddNumberToObject(tc, "num_kv_shared_layers", (double)shared);
    cJSON_AddBoolToObject(tc, "use_double_wide_mlp", ffk->type == GGUF_ARRAY && ffl == 2 * ff0 && shared > 0);
    cJSON_AddNumberToObject(tc, "intermediate_size", (double)ff0);
    cJSON_AddNumberToObject(tc, "max_position_embeddings", (double)ctxlen);
    cJSON_AddNumberToObject(tc, "rms_norm_eps", eps);
    if (cap > 0) cJSON_AddNumberToObject(tc, "final_logit_softcapping", cap);
    cJSON_AddStringToObject(tc, "hidden_activation", "gelu_pytorch_tanh");
    for (int64_t l = 0; l < L; l++) {
        int64_t s = 0;
        gguf_arr_int(pat, (uint64_t)l, &s);
        cJSON_AddItemToArray(lt, cJSON_CreateString(s ? "sliding_attention" : "full_attention"));
    }
    cJSON_AddItemToObject(tc, "layer_types", lt);
    cJSON_AddStringToObject(full, "rope_type", "proportional");
    cJSON_AddNumberToObject(full, "partial_rotary_factor", prf);
    cJSON_AddNumberToObject(full, "rope_theta", theta);
    cJSON_AddStringToObject(sw, "rope_type", "default");
    cJSON_AddNumberToObject(sw, "rope_theta", theta_swa);
    cJSON_AddItemToObject(rp, "full_attention", full);
    cJSON_AddItemToObject(rp, "sliding_attention", sw);
    cJSON_AddItemToObject(tc, "rope_parameters", rp);
    cJSON_AddItemToObject(root, "text_config", tc);
    g->config = cJSON_Print(root);
    cJSON_Delete(root);
    return g->config ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
}

/* ---- tokenizer.json ---------------------------------------------------------------------------- */

/* A token's text as a NUL-terminated string (malloc'd; NULL if it holds a NUL). */
static char *token_text(const char *s, uint64_t len) {
    if (memchr(s, 0, (size_t)len)) return NULL;
    char *t = malloc((size_t)len + 1);
    if (t) { memcpy(t, s, (size_t)len); t[len] = 0; }
    return t;
}

/* tokenizer.json (Gemma's pipeline: ' ' -> U+2581, BPE with byte fallback) and
 * tokenizer_config.json (bos/eos, the chat template) from tokenizer.ggml.*. CONTROL tokens
 * become special added tokens and USER_DEFINED ones plain added tokens, as they were in the
 * checkpoint's tokenizer.json. */
static int build_tokenizer(gg_ctx *g, char **err) {
    const gguf_file *f = &g->f;
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens"), *types = gguf_find_kv(f, "tokenizer.ggml.token_type"),
                  *merges = gguf_find_kv(f, "tokenizer.ggml.merges");
    uint64_t len;
    const char *model = gguf_get_str(f, "tokenizer.ggml.model", &len);
    if (!toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING) return 0; /* no tokenizer: none written */
    if (!model || !((len == 6 && !memcmp(model, "gemma4", 6)) || (len == 5 && !memcmp(model, "llama", 5))))
        return plume_fail(err, PLUME_EFORMAT, "%s: tokenizer.ggml.model '%.*s' is not Gemma's", f->path,
                          model ? (int)(len < 64 ? len : 64) : 7, model ? model : "missing");
    if (types && (types->type != GGUF_ARRAY || types->n != toks->n))
        return plume_fail(err, PLUME_EFORMAT, "%s: tokenizer.ggml.token_type does not match the tokens", f->path);
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *m = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    cJSON *ml = cJSON_CreateArray(), *norm = cJSON_CreateObject(), *pre = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    int rc = 0;
    uint64_t pos = 0, sl;
    const char *s;
    char *bos_text = NULL, *eos_text = NULL;
    int64_t bos = -1, eos = -1;
    gguf_get_int(f, "tokenizer.ggml.bos_token_id", &bos);
    gguf_get_int(f, "tokenizer.ggml.eos_token_id", &eos);
    for (uint64_t i = 0; !rc && (s = gguf_arr_next_str(toks, &pos, &sl)); i++) {
        char *t = token_text(s, sl);
        if (!t) { rc = plume_fail(err, PLUME_EFORMAT, "%s: token %llu holds a NUL byte", f->path, (unsigned long long)i); break; }
        int64_t ty = 1;
        if (types) gguf_arr_int(types, i, &ty);
        if (cJSON_GetObjectItemCaseSensitive(vocab, t) == NULL) cJSON_AddNumberToObject(vocab, t, (double)i);
        if (ty == 3 || ty == 4) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", t);
            cJSON_AddBoolToObject(a, "single_word", 0);
            cJSON_AddBoolToObject(a, "lstrip", 0);
            cJSON_AddBoolToObject(a, "rstrip", 0);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddBoolToObject(a, "special", ty == 3);
            cJSON_AddItemToArray(added, a);
        }
        if ((int64_t)i == bos) bos_text = strdup(t);
        if ((int64_t)i == eos) eos_text = strdup(t);
        free(t);
    }
    pos = 0;
    for (uint64_t i = 0; !rc && merges && (s = gguf_arr_next_str(merges, &pos, &sl)); i++) {
        char *t = token_text(s, sl), *sp = t ? strchr(t + (*t ? 1 : 0), ' ') : NULL;
        if (!sp) { free(t); rc = plume_fail(err, PLUME_EFORMAT, "%s: merge %llu is not two pieces", f->path, (unsigned long long)i); break; }
        *sp = 0;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(t));
        cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(ml, pair);
        free(t);
    }
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddStringToObject(norm, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(norm, "pattern"), "String", " ");
    cJSON_AddStringToObject(norm, "content", "\xe2\x96\x81");
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddStringToObject(pre, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(pre, "pattern"), "String", " ");
    cJSON_AddStringToObject(pre, "behavior", "MergedWithPrevious");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "byte_fallback", 1);
    cJSON_AddBoolToObject(m, "ignore_merges", 0);
    cJSON_AddItemToObject(m, "vocab", vocab);
    cJSON_AddItemToObject(m, "merges", ml);
    cJSON_AddItemToObject(root, "model", m);
    if (!rc && !(g->tok_json = cJSON_PrintUnformatted(root))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    cJSON_Delete(root);
    cJSON *tc = cJSON_CreateObject();
    int64_t add_bos = 1;
    gguf_get_int(f, "tokenizer.ggml.add_bos_token", &add_bos);
    cJSON_AddBoolToObject(tc, "add_bos_token", add_bos != 0);
    if (bos_text) cJSON_AddStringToObject(tc, "bos_token", bos_text);
    if (eos_text) cJSON_AddStringToObject(tc, "eos_token", eos_text);
    const char *tmpl = gguf_get_str(f, "tokenizer.chat_template", &len);
    char *tt = tmpl ? token_text(tmpl, len) : NULL;
    if (tt) cJSON_AddStringToObject(tc, "chat_template", tt);
    if (!rc && !(g->tok_config = cJSON_Print(tc))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    cJSON_Delete(tc);
    free(tt);
    free(bos_text);
    free(eos_text);
    return rc;
}

/* ---- open / close -------------------------------------------------------------------------------- */

int source_gguf_open(conv_source *src, const char *path, char **err) {
    memset(src, 0, sizeof *src);
    gg_ctx *g = calloc(1, sizeof *g);
    if (!g) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = gguf_open(&g->f, path, err);
    if (!rc && !(g->names = calloc((size_t)g->f.n_tensors + 1, sizeof *g->names))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < g->f.n_tensors; i++) {
        char *h = hf_name(g->f.t[i].name);
        if (h) g->names[g->n++] = (gg_name){h, &g->f.t[i]};
    }
    if (!rc) rc = build_config(g, err);
    if (!rc) rc = build_tokenizer(g, err);
    src->ctx = g;
    if (rc) { source_gguf_close(src); return rc; }
    src->config_json = g->config;
    src->tokenizer_json = g->tok_json;
    src->tokenizer_config_json = g->tok_config;
    src->shape = gg_shape;
    src->read = gg_read;
    src->name_at = gg_name_at;
    src->storage = gg_storage;
    return 0;
}

void source_gguf_close(conv_source *src) {
    gg_ctx *g = src->ctx;
    if (!g) return;
    for (int32_t i = 0; i < g->n; i++) free(g->names[i].hf);
    free(g->names);
    free(g->config);
    free(g->tok_json);
    free(g->tok_config);
    if (g->f.path) gguf_close(&g->f);
    free(g);
    src->ctx = NULL;
}
