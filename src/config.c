/* config.c -- Gemma 4 hyper-parameters from config.json / model_config.json. */
#include "config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- reading helpers ------------------------------------------------------------------- */

/* An integer member in [lo, hi]; missing -> dflt if dflt_ok, else an error naming key. */
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int dflt_ok, int32_t dflt,
                   int32_t *out, const char *name, char **err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (dflt_ok) { *out = dflt; return 0; }
        return plume_fail(err, PLUME_EFORMAT, "%s: missing key %s", name, key);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return plume_fail(err, PLUME_EFORMAT, "%s: %s must be an integer in [%lld, %lld]", name, key,
                          (long long)lo, (long long)hi);
    *out = (int32_t)v->valuedouble;
    return 0;
}

/* A number member; missing -> dflt if dflt_ok. */
static int get_num(const cJSON *o, const char *key, int dflt_ok, double dflt, double *out, const char *name,
                   char **err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (dflt_ok) { *out = dflt; return 0; }
        return plume_fail(err, PLUME_EFORMAT, "%s: missing key %s", name, key);
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return plume_fail(err, PLUME_EFORMAT, "%s: %s must be a number", name, key);
    *out = v->valuedouble;
    return 0;
}

/* Parse one rope_parameters entry: theta and rotated pairs for head size hd. */
static int parse_rope(const cJSON *rp, const char *kind, int32_t hd, float *theta, int32_t *rot,
                      const char *name, char **err) {
    const cJSON *r = rp ? cJSON_GetObjectItemCaseSensitive(rp, kind) : NULL;
    double th = strcmp(kind, "full_attention") ? 10000.0 : 1000000.0, prf = 1.0;
    const char *type = "default";
    if (r) {
        if (!cJSON_IsObject(r)) return plume_fail(err, PLUME_EFORMAT, "%s: rope_parameters.%s is not an object", name, kind);
        int rc = get_num(r, "rope_theta", 1, th, &th, name, err);
        if (!rc) rc = get_num(r, "partial_rotary_factor", 1, 1.0, &prf, name, err);
        if (rc) return rc;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
        if (cJSON_IsString(t)) type = t->valuestring;
    }
    if (th <= 0 || prf <= 0 || prf > 1)
        return plume_fail(err, PLUME_EFORMAT, "%s: rope_parameters.%s has a bad theta or partial_rotary_factor", name, kind);
    if (!strcmp(type, "proportional")) {
        *rot = (int32_t)floor(prf * hd / 2.0); /* int(rope_proportion * head_dim // 2) */
    } else if (!strcmp(type, "default")) {
        if (prf != 1.0)
            return plume_fail(err, PLUME_EFORMAT, "%s: rope_parameters.%s: partial default RoPE is not supported", name, kind);
        *rot = hd / 2;
    } else {
        return plume_fail(err, PLUME_EFORMAT, "%s: rope_parameters.%s: rope_type '%s' is not supported", name, kind, type);
    }
    *theta = (float)th;
    return 0;
}

/* Fill the derived per-layer values (I, hd, kv_src) and check the config is runnable. */
static int derive(plume_config *c, const char *name, char **err) {
    c->first_shared = c->L - c->n_kv_shared;
    if (c->first_shared < 1)
        return plume_fail(err, PLUME_EFORMAT, "%s: num_kv_shared_layers leaves no layer with its own K/V", name);
    if (c->H % c->Hkv)
        return plume_fail(err, PLUME_EFORMAT, "%s: num_attention_heads must be a multiple of num_key_value_heads", name);
    if (c->hd_sliding % 2 || c->hd_full % 2) return plume_fail(err, PLUME_EFORMAT, "%s: head dims must be even", name);
    for (int32_t l = 0; l < c->L; l++) {
        c->hd[l] = c->is_full[l] ? c->hd_full : c->hd_sliding;
        c->I[l] = c->I_base * (c->double_wide && l >= c->first_shared ? 2 : 1);
        c->kv_src[l] = l;
        if (l >= c->first_shared) {
            c->kv_src[l] = -1;
            for (int32_t j = c->first_shared - 1; j >= 0; j--)
                if (c->is_full[j] == c->is_full[l]) { c->kv_src[l] = j; break; }
            if (c->kv_src[l] < 0)
                return plume_fail(err, PLUME_EFORMAT, "%s: layer %d shares K/V but no earlier layer has its type", name, l);
        }
    }
    c->embed_scale = sqrt((double)c->D);
    c->ple_embed_scale = sqrt((double)c->Dp);
    c->proj_scale = 1.0 / sqrt((double)c->D);
    c->input_scale = 1.0 / sqrt(2.0);
    return 0;
}

void plume_config_default_chunks(plume_config *c) {
    int32_t b1 = (int32_t)lround(c->L * 8.0 / 35.0), b2 = (int32_t)lround(c->L * 25.0 / 35.0);
    if (b1 < 1) b1 = 1;
    if (b2 <= b1) b2 = b1 + 1;
    if (b2 >= c->L) b2 = c->L - 1;
    c->chunk[0] = 0;
    c->chunk[1] = b1;
    c->chunk[2] = b2;
    c->chunk[3] = c->L;
}

/* Parse layer_types (strings) into is_full. */
static int parse_layer_types(plume_config *c, const cJSON *lt, const char *name, char **err) {
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->L)
        return plume_fail(err, PLUME_EFORMAT, "%s: layer_types must list %d layers", name, c->L);
    int32_t l = 0;
    for (const cJSON *e = lt->child; e; e = e->next, l++) {
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) c->is_full[l] = 1;
        else if (cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention")) c->is_full[l] = 0;
        else return plume_fail(err, PLUME_EFORMAT, "%s: layer_types[%d] is not sliding_attention or full_attention", name, l);
    }
    return 0;
}

/* Parse eos ids: a number or an array of numbers (at most 8 are kept), each an integer id
 * in [0, V); a value out of range is an error, not a cast. Missing: the id 1. */
static int parse_eos(plume_config *c, const cJSON *e, const char *name, char **err) {
    c->n_eos = 0;
    const cJSON *one = cJSON_IsNumber(e) ? e : NULL, *x = one ? one : cJSON_IsArray(e) ? e->child : NULL;
    for (; x && c->n_eos < 8; x = one ? NULL : x->next) {
        if (!cJSON_IsNumber(x)) continue;
        if (!(x->valuedouble >= 0 && x->valuedouble < (double)c->V) || x->valuedouble != floor(x->valuedouble))
            return plume_fail(err, PLUME_EFORMAT, "%s: eos token id %g is not an integer in [0, %d)", name,
                              x->valuedouble, c->V);
        c->eos_ids[c->n_eos++] = (int32_t)x->valuedouble;
    }
    if (c->n_eos == 0) c->eos_ids[c->n_eos++] = 1;
    return 0;
}

int plume_config_from_hf_text(plume_config *c, const char *json, const char *name, char **err) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        return plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON near byte %ld", name,
                          at ? (long)(at - json) : -1L);
    }
    int rc = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!t) t = root;
    if (!cJSON_IsObject(t)) { rc = plume_fail(err, PLUME_EFORMAT, "%s: text_config is not an object", name); goto done; }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(t, "model_type");
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "gemma4_text") && strcmp(mt->valuestring, "gemma4")) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: model_type '%s' is not gemma4_text", name, mt->valuestring);
        goto done;
    }
    double eps, softcap;
    if ((rc = get_int(t, "hidden_size", 2, 1 << 16, 0, 0, &c->D, name, err)) ||
        (rc = get_int(t, "num_hidden_layers", 2, PLUME_MAX_LAYERS, 0, 0, &c->L, name, err)) ||
        (rc = get_int(t, "num_attention_heads", 1, 256, 0, 0, &c->H, name, err)) ||
        (rc = get_int(t, "num_key_value_heads", 1, 256, 0, 0, &c->Hkv, name, err)) ||
        (rc = get_int(t, "head_dim", 2, 4096, 0, 0, &c->hd_sliding, name, err)) ||
        (rc = get_int(t, "global_head_dim", 2, 4096, 1, c->hd_sliding, &c->hd_full, name, err)) ||
        (rc = get_int(t, "hidden_size_per_layer_input", 1, 1 << 16, 0, 0, &c->Dp, name, err)) ||
        (rc = get_int(t, "vocab_size", 8, 1 << 24, 0, 0, &c->V, name, err)) ||
        (rc = get_int(t, "sliding_window", 1, 1 << 24, 0, 0, &c->W, name, err)) ||
        (rc = get_int(t, "num_kv_shared_layers", 0, PLUME_MAX_LAYERS, 1, 0, &c->n_kv_shared, name, err)) ||
        (rc = get_int(t, "intermediate_size", 1, 1 << 20, 0, 0, &c->I_base, name, err)) ||
        (rc = get_int(t, "max_position_embeddings", 1, 1 << 24, 1, 131072, &c->max_pos, name, err)) ||
        (rc = get_int(t, "bos_token_id", 0, 1 << 24, 1, 2, &c->bos_id, name, err)) ||
        (rc = get_num(t, "rms_norm_eps", 1, 1e-6, &eps, name, err)) ||
        (rc = get_num(t, "final_logit_softcapping", 1, 0.0, &softcap, name, err)))
        goto done;
    int32_t vple;
    if ((rc = get_int(t, "vocab_size_per_layer_input", 8, 1 << 24, 1, c->V, &vple, name, err))) goto done;
    if (vple != c->V) { rc = plume_fail(err, PLUME_EFORMAT, "%s: vocab_size_per_layer_input must equal vocab_size", name); goto done; }
    c->eps = (float)eps;
    c->softcap = (float)softcap;
    const cJSON *dw = cJSON_GetObjectItemCaseSensitive(t, "use_double_wide_mlp");
    c->double_wide = cJSON_IsTrue(dw);
    const cJSON *ngkv = cJSON_GetObjectItemCaseSensitive(t, "num_global_key_value_heads");
    if (ngkv && !cJSON_IsNull(ngkv) && (!cJSON_IsNumber(ngkv) || ngkv->valuedouble != (double)c->Hkv)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: num_global_key_value_heads different from num_key_value_heads is not supported", name);
        goto done;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "attention_k_eq_v")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "enable_moe_block")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "attention_bias"))) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: attention_k_eq_v, attention_bias and MoE blocks are not supported", name);
        goto done;
    }
    if ((rc = parse_layer_types(c, cJSON_GetObjectItemCaseSensitive(t, "layer_types"), name, err))) goto done;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    if ((rc = parse_rope(rp, "sliding_attention", c->hd_sliding, &c->theta_sliding, &c->rot_sliding, name, err)) ||
        (rc = parse_rope(rp, "full_attention", c->hd_full, &c->theta_full, &c->rot_full, name, err)))
        goto done;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if ((rc = parse_eos(c, eos ? eos : cJSON_GetObjectItemCaseSensitive(t, "eos_token_id"), name, err))) goto done;
    snprintf(c->model_name, sizeof c->model_name, "gemma4");
    c->n_ctx = c->max_pos < 4096 ? c->max_pos : 4096;
    plume_config_default_chunks(c);
    snprintf(c->weights, sizeof c->weights, "q8");
    rc = derive(c, name, err);
done:
    cJSON_Delete(root);
    return rc;
}

int plume_config_from_hf(plume_config *c, const char *path, char **err) {
    char *buf;
    int rc = plume_read_file(path, &buf, NULL, err);
    if (rc) return rc;
    rc = plume_config_from_hf_text(c, buf, path, err);
    free(buf);
    return rc;
}

/* ---- model_config.json ----------------------------------------------------------------- */

int plume_config_write_bundle(const plume_config *c, const char *path, char **err) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    /* The Core ML bundle's keys. */
    cJSON_AddStringToObject(o, "model_name", c->model_name);
    cJSON_AddStringToObject(o, "architecture", "gemma4");
    cJSON_AddNumberToObject(o, "hidden_size", c->D);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->L);
    cJSON_AddNumberToObject(o, "context_length", c->n_ctx);
    cJSON_AddNumberToObject(o, "sliding_window", c->W);
    cJSON_AddNumberToObject(o, "vocab_size", c->V);
    cJSON_AddNumberToObject(o, "bos_token_id", c->bos_id);
    cJSON_AddNumberToObject(o, "eos_token_id", c->eos_ids[0]);
    cJSON_AddNumberToObject(o, "per_layer_dim", c->Dp);
    cJSON_AddNumberToObject(o, "max_head_dim", c->hd_full > c->hd_sliding ? c->hd_full : c->hd_sliding);
    cJSON_AddNumberToObject(o, "embed_scale", c->embed_scale);
    cJSON_AddNumberToObject(o, "per_layer_model_projection_scale", c->proj_scale);
    cJSON_AddNumberToObject(o, "per_layer_input_scale", c->input_scale);
    cJSON_AddNumberToObject(o, "per_layer_embed_scale", c->ple_embed_scale);
    cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
    for (int32_t l = 0; l < c->L; l++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(c->is_full[l] ? "full_attention" : "sliding_attention"));
    cJSON_AddNumberToObject(o, "num_kv_shared_layers", c->n_kv_shared);
    /* plume's. */
    cJSON_AddStringToObject(o, "plume_format", "plume-bundle");
    cJSON_AddNumberToObject(o, "plume_format_version", 1);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->H);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->Hkv);
    cJSON_AddNumberToObject(o, "head_dim", c->hd_sliding);
    cJSON_AddNumberToObject(o, "global_head_dim", c->hd_full);
    cJSON_AddNumberToObject(o, "intermediate_size", c->I_base);
    cJSON_AddBoolToObject(o, "use_double_wide_mlp", c->double_wide);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_pos);
    cJSON_AddNumberToObject(o, "rope_theta_sliding", c->theta_sliding);
    cJSON_AddNumberToObject(o, "rope_theta_full", c->theta_full);
    cJSON_AddNumberToObject(o, "rope_rotated_pairs_sliding", c->rot_sliding);
    cJSON_AddNumberToObject(o, "rope_rotated_pairs_full", c->rot_full);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->eps);
    cJSON_AddNumberToObject(o, "final_logit_softcapping", c->softcap);
    cJSON *eos = cJSON_AddArrayToObject(o, "eos_token_ids");
    for (int32_t i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(eos, cJSON_CreateNumber(c->eos_ids[i]));
    cJSON_AddStringToObject(o, "weights", c->weights);
    cJSON_AddStringToObject(o, "head", c->head_sidecar ? "embed_tokens_q8" : "chunk");
    cJSON *ch = cJSON_AddArrayToObject(o, "chunks");
    for (int32_t i = 0; i < PLUME_N_CHUNKS; i++) {
        cJSON *e = cJSON_CreateObject();
        char file[32];
        snprintf(file, sizeof file, "chunk_%d.safetensors", i + 1);
        cJSON_AddStringToObject(e, "file", file);
        cJSON_AddNumberToObject(e, "first_layer", c->chunk[i]);
        cJSON_AddNumberToObject(e, "end_layer", c->chunk[i + 1]);
        cJSON_AddItemToArray(ch, e);
    }
    char *js = cJSON_Print(o);
    cJSON_Delete(o);
    if (!js) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = plume_write_file(path, js, strlen(js), PLUME_WRITE_REPLACE, err);
    free(js);
    return rc;
}

int plume_config_read_bundle(plume_config *c, const char *path, char **err) {
    memset(c, 0, sizeof *c);
    char *buf;
    int rc = plume_read_file(path, &buf, NULL, err);
    if (rc) return rc;
    cJSON *o = cJSON_Parse(buf);
    if (!cJSON_IsObject(o)) {
        const char *at = cJSON_GetErrorPtr();
        rc = plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON near byte %ld", path, at && o == NULL ? (long)(at - buf) : -1L);
        goto done;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "plume_format_version");
    if (!cJSON_IsNumber(fmt) || fmt->valueint != 1) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: not a plume bundle of format version 1 (key plume_format_version)", path);
        goto done;
    }
    double eps, softcap, th_s, th_f;
    if ((rc = get_int(o, "hidden_size", 2, 1 << 16, 0, 0, &c->D, path, err)) ||
        (rc = get_int(o, "num_hidden_layers", 2, PLUME_MAX_LAYERS, 0, 0, &c->L, path, err)) ||
        (rc = get_int(o, "context_length", 1, 1 << 24, 0, 0, &c->n_ctx, path, err)) ||
        (rc = get_int(o, "sliding_window", 1, 1 << 24, 0, 0, &c->W, path, err)) ||
        (rc = get_int(o, "vocab_size", 8, 1 << 24, 0, 0, &c->V, path, err)) ||
        (rc = get_int(o, "bos_token_id", 0, 1 << 24, 0, 0, &c->bos_id, path, err)) ||
        (rc = get_int(o, "per_layer_dim", 1, 1 << 16, 0, 0, &c->Dp, path, err)) ||
        (rc = get_int(o, "num_kv_shared_layers", 0, PLUME_MAX_LAYERS, 0, 0, &c->n_kv_shared, path, err)) ||
        (rc = get_int(o, "num_attention_heads", 1, 256, 0, 0, &c->H, path, err)) ||
        (rc = get_int(o, "num_key_value_heads", 1, 256, 0, 0, &c->Hkv, path, err)) ||
        (rc = get_int(o, "head_dim", 2, 4096, 0, 0, &c->hd_sliding, path, err)) ||
        (rc = get_int(o, "global_head_dim", 2, 4096, 0, 0, &c->hd_full, path, err)) ||
        (rc = get_int(o, "intermediate_size", 1, 1 << 20, 0, 0, &c->I_base, path, err)) ||
        (rc = get_int(o, "max_position_embeddings", 1, 1 << 24, 0, 0, &c->max_pos, path, err)) ||
        (rc = get_int(o, "rope_rotated_pairs_sliding", 0, 2048, 0, 0, &c->rot_sliding, path, err)) ||
        (rc = get_int(o, "rope_rotated_pairs_full", 0, 2048, 0, 0, &c->rot_full, path, err)) ||
        (rc = get_num(o, "rope_theta_sliding", 0, 0, &th_s, path, err)) ||
        (rc = get_num(o, "rope_theta_full", 0, 0, &th_f, path, err)) ||
        (rc = get_num(o, "rms_norm_eps", 0, 0, &eps, path, err)) ||
        (rc = get_num(o, "final_logit_softcapping", 0, 0, &softcap, path, err)))
        goto done;
    c->theta_sliding = (float)th_s;
    c->theta_full = (float)th_f;
    c->eps = (float)eps;
    c->softcap = (float)softcap;
    if (c->rot_sliding > c->hd_sliding / 2 || c->rot_full > c->hd_full / 2) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: more rotated RoPE pairs than the head has", path);
        goto done;
    }
    c->double_wide = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "use_double_wide_mlp"));
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(o, "model_name");
    snprintf(c->model_name, sizeof c->model_name, "%s", cJSON_IsString(mn) ? mn->valuestring : "gemma4");
    if ((rc = parse_layer_types(c, cJSON_GetObjectItemCaseSensitive(o, "layer_types"), path, err))) goto done;
    if ((rc = parse_eos(c, cJSON_GetObjectItemCaseSensitive(o, "eos_token_ids"), path, err))) goto done;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weights");
    if (!cJSON_IsString(w) || (strcmp(w->valuestring, "f32") && strcmp(w->valuestring, "bf16") &&
                               strcmp(w->valuestring, "q8") && strcmp(w->valuestring, "q4"))) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: key weights must be f32, bf16, q8 or q4", path);
        goto done;
    }
    snprintf(c->weights, sizeof c->weights, "%s", w->valuestring);
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(o, "head");
    if (!cJSON_IsString(hd) || (strcmp(hd->valuestring, "chunk") && strcmp(hd->valuestring, "embed_tokens_q8"))) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: key head must be chunk or embed_tokens_q8", path);
        goto done;
    }
    c->head_sidecar = !strcmp(hd->valuestring, "embed_tokens_q8");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "chunks");
    if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) != PLUME_N_CHUNKS) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: key chunks must list %d chunks", path, PLUME_N_CHUNKS);
        goto done;
    }
    for (int32_t i = 0; i < PLUME_N_CHUNKS; i++) {
        const cJSON *e = cJSON_GetArrayItem(ch, i);
        int32_t first, end;
        if ((rc = get_int(e, "first_layer", 0, c->L, 0, 0, &first, path, err)) ||
            (rc = get_int(e, "end_layer", 0, c->L, 0, 0, &end, path, err)))
            goto done;
        if (first != (i ? c->chunk[i] : 0) || end <= first) {
            rc = plume_fail(err, PLUME_EFORMAT, "%s: chunk %d's layer range is not contiguous", path, i + 1);
            goto done;
        }
        c->chunk[i] = first;
        c->chunk[i + 1] = end;
    }
    if (c->chunk[PLUME_N_CHUNKS] != c->L) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: the chunks do not cover all %d layers", path, c->L);
        goto done;
    }
    rc = derive(c, path, err);
done:
    cJSON_Delete(o);
    free(buf);
    return rc;
}

/* ---- RoPE ------------------------------------------------------------------------------ */

void plume_rope_inv_freq(const plume_config *c, int32_t full, float *inv) {
    int32_t hd = full ? c->hd_full : c->hd_sliding, rot = full ? c->rot_full : c->rot_sliding;
    float base = full ? c->theta_full : c->theta_sliding;
    for (int32_t i = 0; i < hd / 2; i++)
        inv[i] = i < rot ? 1.0f / powf(base, (float)(2 * i) / (float)hd) : 0.0f;
}

void plume_rope_row(const float *inv, int32_t hd, int32_t pos, float *cos_row, float *sin_row) {
    for (int32_t i = 0; i < hd / 2; i++) {
        float a = (float)pos * inv[i];
        cos_row[i] = cos_row[i + hd / 2] = cosf(a);
        sin_row[i] = sin_row[i + hd / 2] = sinf(a);
    }
}
