/* config.c -- Gemma 4 hyper-parameters from config.json / model_config.json. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "json.h"

/* ---- reading helpers ------------------------------------------------------------------- */

/* Parse one rope_parameters entry (rp: the rope_parameters object): theta and rotated pairs
 * for head size hd. */
static int parse_rope(const json_obj *rp, const char *kind, int32_t hd, float *theta, int32_t *rot, char **err) {
    json_obj r;
    double th = strcmp(kind, "full_attention") ? 10000.0 : 1000000.0, prf = 1.0;
    const char *type = "default", *name = rp->doc, *at = r.path; /* at: rope_parameters.KIND */
    int rc = json_child(rp, kind, &r, err);
    if (!rc) rc = json_num_or(&r, "rope_theta", -INFINITY, INFINITY, th, &th, err);
    if (!rc) rc = json_num_or(&r, "partial_rotary_factor", -INFINITY, INFINITY, 1.0, &prf, err);
    if (!rc) rc = json_str_or(&r, "rope_type", "default", &type, err);
    if (rc) return rc;
    if (th <= 0 || prf <= 0 || prf > 1)
        return plume_fail(err, PLUME_EFORMAT, "%s: %s has a bad theta or partial_rotary_factor", name, at);
    if (!strcmp(type, "proportional")) {
        *rot = (int32_t)floor(prf * hd / 2.0); /* int(rope_proportion * head_dim // 2) */
    } else if (!strcmp(type, "default")) {
        if (prf != 1.0)
            return plume_fail(err, PLUME_EFORMAT, "%s: %s: partial default RoPE is not supported", name, at);
        *rot = hd / 2;
    } else {
        return plume_fail(err, PLUME_EFORMAT, "%s: %s: rope_type '%s' is not supported", name, at, type);
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
    int32_t own = c->first_shared; /* layers [0, own) hold every cache a later layer reads */
    for (int32_t l = c->first_shared - 1; l >= 0; l--)
        if (c->is_full[l]) { own = l + 1; break; }
    int32_t b1 = (own + 1) / 2, b2 = own + (c->L - own) / 2;
    if (b1 < 1) b1 = 1;
    if (b1 > c->L - 2) b1 = c->L - 2;
    if (b2 <= b1) b2 = b1 + 1;
    if (b2 > c->L - 1) b2 = c->L - 1;
    c->chunk[0] = 0;
    c->chunk[1] = b1;
    c->chunk[2] = b2;
    c->chunk[3] = c->L;
}

/* Parse layer_types (strings) into is_full. */
static int parse_layer_types(plume_config *c, const json_obj *o, char **err) {
    const cJSON *lt = json_member(o, "layer_types");
    const char *name = o->doc;
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

/* ---- config.json ----------------------------------------------------------------------- */

/* The text decoder's sizes and scalars from a config.json's text config t. */
static int hf_dims(plume_config *c, const json_obj *t, char **err) {
    double eps, softcap;
    int32_t vple;
    int rc;
    if ((rc = json_i32(t, "hidden_size", 2, 1 << 16, &c->D, err)) ||
        (rc = json_i32(t, "num_hidden_layers", PLUME_N_CHUNKS, PLUME_MAX_LAYERS, &c->L, err)) ||
        (rc = json_i32(t, "num_attention_heads", 1, 256, &c->H, err)) ||
        (rc = json_i32(t, "num_key_value_heads", 1, 256, &c->Hkv, err)) ||
        (rc = json_i32(t, "head_dim", 2, 4096, &c->hd_sliding, err)) ||
        (rc = json_i32_or(t, "global_head_dim", 2, 4096, c->hd_sliding, &c->hd_full, err)) ||
        (rc = json_i32(t, "hidden_size_per_layer_input", 1, 1 << 16, &c->Dp, err)) ||
        (rc = json_i32(t, "vocab_size", 8, 1 << 24, &c->V, err)) ||
        (rc = json_i32(t, "sliding_window", 1, 1 << 24, &c->W, err)) ||
        (rc = json_i32_or(t, "num_kv_shared_layers", 0, PLUME_MAX_LAYERS, 0, &c->n_kv_shared, err)) ||
        (rc = json_i32(t, "intermediate_size", 1, 1 << 20, &c->I_base, err)) ||
        (rc = json_i32_or(t, "max_position_embeddings", 1, 1 << 24, 131072, &c->max_pos, err)) ||
        (rc = json_i32_or(t, "bos_token_id", 0, 1 << 24, 2, &c->bos_id, err)) ||
        (rc = json_num_or(t, "rms_norm_eps", -INFINITY, INFINITY, 1e-6, &eps, err)) ||
        (rc = json_num_or(t, "final_logit_softcapping", -INFINITY, INFINITY, 0.0, &softcap, err)) ||
        (rc = json_i32_or(t, "vocab_size_per_layer_input", 8, 1 << 24, c->V, &vple, err)))
        return rc;
    if (vple != c->V)
        return plume_fail(err, PLUME_EFORMAT, "%s: vocab_size_per_layer_input must equal vocab_size", t->doc);
    c->eps = (float)eps;
    c->softcap = (float)softcap;
    return 0;
}

/* use_double_wide_mlp, and the refusal of what plume does not run: global K/V heads other than
 * the K/V heads, K = V attention, attention biases, MoE blocks. */
static int hf_features(plume_config *c, const json_obj *t, char **err) {
    int32_t ngkv, k_eq_v, moe, bias;
    int rc;
    if ((rc = json_bool_or(t, "use_double_wide_mlp", 0, &c->double_wide, err)) ||
        (rc = json_i32_or(t, "num_global_key_value_heads", 0, 1 << 24, c->Hkv, &ngkv, err)))
        return rc;
    if (ngkv != c->Hkv)
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: num_global_key_value_heads different from num_key_value_heads is not supported", t->doc);
    if ((rc = json_bool_or(t, "attention_k_eq_v", 0, &k_eq_v, err)) ||
        (rc = json_bool_or(t, "enable_moe_block", 0, &moe, err)) ||
        (rc = json_bool_or(t, "attention_bias", 0, &bias, err)))
        return rc;
    if (k_eq_v || moe || bias)
        return plume_fail(err, PLUME_EFORMAT, "%s: attention_k_eq_v, attention_bias and MoE blocks are not supported",
                          t->doc);
    return 0;
}

/* RoPE of both layer types from rope_parameters (absent: the defaults). */
static int hf_rope(plume_config *c, const json_obj *t, char **err) {
    json_obj rp;
    int rc = json_child(t, "rope_parameters", &rp, err);
    if (!rc) rc = parse_rope(&rp, "sliding_attention", c->hd_sliding, &c->theta_sliding, &c->rot_sliding, err);
    if (!rc) rc = parse_rope(&rp, "full_attention", c->hd_full, &c->theta_full, &c->rot_full, err);
    return rc;
}

int plume_config_from_hf_text(plume_config *c, const char *json, const char *name, char **err) {
    memset(c, 0, sizeof *c);
    cJSON *root;
    int rc = json_parse(&root, json, name, err);
    if (rc) return rc;
    json_obj r = json_root(root, name), t;
    const char *model_type = "gemma4_text";
    if ((rc = json_child(&r, "text_config", &t, err))) goto done;
    if (!t.obj) t = r; /* a bare gemma4_text config */
    if (!cJSON_IsObject(t.obj)) { rc = plume_fail(err, PLUME_EFORMAT, "%s: text_config is not an object", name); goto done; }
    if ((rc = json_str_or(&t, "model_type", model_type, &model_type, err))) goto done;
    if (strcmp(model_type, "gemma4_text") && strcmp(model_type, "gemma4")) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: model_type '%s' is not gemma4_text", name, model_type);
        goto done;
    }
    if ((rc = hf_dims(c, &t, err)) || (rc = hf_features(c, &t, err)) || (rc = parse_layer_types(c, &t, err)) ||
        (rc = hf_rope(c, &t, err)))
        goto done;
    const cJSON *eos = json_member(&r, "eos_token_id"); /* the model's, else the text config's */
    if ((rc = parse_eos(c, eos ? eos : json_member(&t, "eos_token_id"), name, err))) goto done;
    snprintf(c->model_name, sizeof c->model_name, "gemma4");
    c->n_ctx = c->max_pos < 4096 ? c->max_pos : 4096;
    snprintf(c->weights, sizeof c->weights, "q8");
    if (!(rc = derive(c, name, err))) plume_config_default_chunks(c);
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
    int rc = plume_write_file_atomic(path, js, strlen(js), err);
    free(js);
    return rc;
}

/* The sizes and scalars of a bundle's model_config.json. */
static int bundle_dims(plume_config *c, const json_obj *o, char **err) {
    double eps, softcap, th_s, th_f;
    int rc;
    if ((rc = json_i32(o, "hidden_size", 2, 1 << 16, &c->D, err)) ||
        (rc = json_i32(o, "num_hidden_layers", 2, PLUME_MAX_LAYERS, &c->L, err)) ||
        (rc = json_i32(o, "context_length", 1, 1 << 24, &c->n_ctx, err)) ||
        (rc = json_i32(o, "sliding_window", 1, 1 << 24, &c->W, err)) ||
        (rc = json_i32(o, "vocab_size", 8, 1 << 24, &c->V, err)) ||
        (rc = json_i32(o, "bos_token_id", 0, 1 << 24, &c->bos_id, err)) ||
        (rc = json_i32(o, "per_layer_dim", 1, 1 << 16, &c->Dp, err)) ||
        (rc = json_i32(o, "num_kv_shared_layers", 0, PLUME_MAX_LAYERS, &c->n_kv_shared, err)) ||
        (rc = json_i32(o, "num_attention_heads", 1, 256, &c->H, err)) ||
        (rc = json_i32(o, "num_key_value_heads", 1, 256, &c->Hkv, err)) ||
        (rc = json_i32(o, "head_dim", 2, 4096, &c->hd_sliding, err)) ||
        (rc = json_i32(o, "global_head_dim", 2, 4096, &c->hd_full, err)) ||
        (rc = json_i32(o, "intermediate_size", 1, 1 << 20, &c->I_base, err)) ||
        (rc = json_i32(o, "max_position_embeddings", 1, 1 << 24, &c->max_pos, err)) ||
        (rc = json_i32(o, "rope_rotated_pairs_sliding", 0, 2048, &c->rot_sliding, err)) ||
        (rc = json_i32(o, "rope_rotated_pairs_full", 0, 2048, &c->rot_full, err)) ||
        (rc = json_num(o, "rope_theta_sliding", -INFINITY, INFINITY, &th_s, err)) ||
        (rc = json_num(o, "rope_theta_full", -INFINITY, INFINITY, &th_f, err)) ||
        (rc = json_num(o, "rms_norm_eps", -INFINITY, INFINITY, &eps, err)) ||
        (rc = json_num(o, "final_logit_softcapping", -INFINITY, INFINITY, &softcap, err)))
        return rc;
    c->theta_sliding = (float)th_s;
    c->theta_full = (float)th_f;
    c->eps = (float)eps;
    c->softcap = (float)softcap;
    if (c->rot_sliding > c->hd_sliding / 2 || c->rot_full > c->hd_full / 2)
        return plume_fail(err, PLUME_EFORMAT, "%s: more rotated RoPE pairs than the head has", o->doc);
    return json_bool_or(o, "use_double_wide_mlp", 0, &c->double_wide, err);
}

/* The bundle's model name, weight type and where its head is. */
static int bundle_kind(plume_config *c, const json_obj *o, char **err) {
    static const char *const weights[] = {"f32", "bf16", "q8", "q4"}, *const heads[] = {"chunk", "embed_tokens_q8"};
    const char *name;
    int32_t w, head;
    int rc = json_str_or(o, "model_name", "gemma4", &name, err);
    if (rc) return rc;
    snprintf(c->model_name, sizeof c->model_name, "%s", name);
    if ((rc = parse_layer_types(c, o, err)) || (rc = parse_eos(c, json_member(o, "eos_token_ids"), o->doc, err)) ||
        (rc = json_enum(o, "weights", weights, 4, &w, err)) || (rc = json_enum(o, "head", heads, 2, &head, err)))
        return rc;
    snprintf(c->weights, sizeof c->weights, "%s", weights[w]);
    c->head_sidecar = head == 1;
    return 0;
}

/* The chunks' layer ranges: contiguous, together every layer. */
static int bundle_chunks(plume_config *c, const json_obj *o, char **err) {
    if (json_array_size(o, "chunks") != PLUME_N_CHUNKS)
        return plume_fail(err, PLUME_EFORMAT, "%s: key chunks must list %d chunks", o->doc, PLUME_N_CHUNKS);
    for (int32_t i = 0; i < PLUME_N_CHUNKS; i++) {
        json_obj e = json_item(o, "chunks", i);
        int32_t first, end;
        int rc;
        if ((rc = json_i32(&e, "first_layer", 0, c->L, &first, err)) || (rc = json_i32(&e, "end_layer", 0, c->L, &end, err)))
            return rc;
        if (first != (i ? c->chunk[i] : 0) || end <= first)
            return plume_fail(err, PLUME_EFORMAT, "%s: chunk %d's layer range is not contiguous", o->doc, i + 1);
        c->chunk[i] = first;
        c->chunk[i + 1] = end;
    }
    if (c->chunk[PLUME_N_CHUNKS] != c->L)
        return plume_fail(err, PLUME_EFORMAT, "%s: the chunks do not cover all %d layers", o->doc, c->L);
    return 0;
}

int plume_config_read_bundle(plume_config *c, const char *path, char **err) {
    memset(c, 0, sizeof *c);
    char *buf;
    int rc = plume_read_file(path, &buf, NULL, err);
    if (rc) return rc;
    cJSON *root = NULL;
    if ((rc = json_parse(&root, buf, path, err))) goto done;
    if (!cJSON_IsObject(root)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON near byte -1", path);
        goto done;
    }
    json_obj o = json_root(root, path);
    int32_t version = 0;
    if (json_i32_or(&o, "plume_format_version", INT32_MIN, INT32_MAX, 0, &version, NULL) || version != 1) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: not a plume bundle of format version 1 (key plume_format_version)", path);
        goto done;
    }
    if ((rc = bundle_dims(c, &o, err)) || (rc = bundle_kind(c, &o, err)) || (rc = bundle_chunks(c, &o, err))) goto done;
    rc = derive(c, path, err);
done:
    cJSON_Delete(root);
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
