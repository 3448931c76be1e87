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

/* ---- media ids and towers -------------------------------------------------------------- */

const char *const plume_media_id_keys[PLUME_MEDIA_NIDS] = {"image_token_id", "boi_token_id", "eoi_token_id",
                                                           "audio_token_id", "boa_token_id", "eoa_token_id",
                                                           "video_token_id"};

/* Member key of o as an id inside [0, V), or -1 (missing, not an integer, outside). */
static int32_t vocab_id(const plume_config *c, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    int ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < (double)c->V &&
             v->valuedouble == floor(v->valuedouble);
    return ok ? (int32_t)v->valuedouble : -1;
}

/* The pad id and the media token ids of a config object (config.json's top level or
 * model_config.json): an id that is missing, not an integer or outside [0, V) is -1 (a
 * text-only config may name the real ids with a small vocabulary); pad defaults to 0. */
static void parse_media_ids(plume_config *c, const cJSON *o, const cJSON *alt) {
    for (int i = 0; i < PLUME_MEDIA_NIDS; i++) {
        c->media_id[i] = vocab_id(c, o, plume_media_id_keys[i]);
        if (c->media_id[i] < 0 && i == PLUME_MEDIA_EOA && !cJSON_GetObjectItemCaseSensitive(o, plume_media_id_keys[i]))
            c->media_id[i] = vocab_id(c, o, "eoa_token_index");
    }
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(o, "pad_token_id");
    int32_t id = vocab_id(c, cJSON_IsNumber(pad) || !alt ? o : alt, "pad_token_id");
    c->pad_id = id >= 0 ? id : 0;
}

/* Check and fill the vision config from object v (config.json's vision_config or
 * model_config.json's vision); the shape keys are required. */
static int parse_vision(plume_config *c, const json_obj *v, char **err) {
    plume_vision_config *x = &c->vis;
    const char *name = v->doc;
    if (!cJSON_IsObject(v->obj)) return plume_fail(err, PLUME_EFORMAT, "%s: vision_config is not an object", name);
    double theta = 100.0, eps = 1e-6;
    json_obj rp;
    int rc;
    if ((rc = json_i32(v, "hidden_size", 2, 1 << 16, &x->D, err)) ||
        (rc = json_i32(v, "num_hidden_layers", 1, 256, &x->L, err)) ||
        (rc = json_i32(v, "num_attention_heads", 1, 256, &x->H, err)) ||
        (rc = json_i32_or(v, "num_key_value_heads", 1, 256, x->H, &x->Hkv, err)) ||
        (rc = json_i32(v, "head_dim", 4, 4096, &x->hd, err)) ||
        (rc = json_i32(v, "intermediate_size", 1, 1 << 20, &x->I, err)) ||
        (rc = json_i32(v, "patch_size", 1, 256, &x->patch, err)) ||
        (rc = json_i32(v, "pooling_kernel_size", 1, 16, &x->pool, err)) ||
        (rc = json_i32(v, "position_embedding_size", 1, 1 << 20, &x->n_pos, err)) ||
        (rc = json_i32_or(v, "default_output_length", 1, 1 << 20, 280, &x->default_tokens, err)) ||
        (rc = json_num_or(v, "rms_norm_eps", -INFINITY, INFINITY, 1e-6, &eps, err)) ||
        (rc = json_child(v, "rope_parameters", &rp, err)) ||
        (rc = json_num_or(cJSON_IsObject(rp.obj) ? &rp : v, "rope_theta", -INFINITY, INFINITY, 100.0, &theta, err)))
        return rc;
    if (x->H != x->Hkv) return plume_fail(err, PLUME_EFORMAT, "%s: vision num_key_value_heads must equal num_attention_heads", name);
    if (x->hd % 4) return plume_fail(err, PLUME_EFORMAT, "%s: vision head_dim must be a multiple of 4 (2-D RoPE)", name);
    if (cJSON_IsTrue(json_member(v, "standardize")))
        return plume_fail(err, PLUME_EFORMAT, "%s: vision_config.standardize (the 26B/31B tower) is not supported", name);
    if (theta <= 0 || eps <= 0) return plume_fail(err, PLUME_EFORMAT, "%s: vision rope_theta and rms_norm_eps must be > 0", name);
    x->clipped = cJSON_IsTrue(json_member(v, "use_clipped_linears"));
    x->theta = (float)theta;
    x->eps = (float)eps;
    for (int i = PLUME_MEDIA_IMAGE; i <= PLUME_MEDIA_EOI; i++)
        if (c->media_id[i] < 0)
            return plume_fail(err, PLUME_EFORMAT, "%s: a vision model needs %s inside the vocabulary", name, plume_media_id_keys[i]);
    c->has_vision = 1;
    return 0;
}

/* The audio tower's limits: the widest attention window row_attn keeps on its stack. */
enum { AUDIO_MAX_LAYERS = 64, AUDIO_MAX_LEFT = 256, AUDIO_MEL_BINS = 128 };

/* Check and fill the audio config from object a (config.json's audio_config or
 * model_config.json's audio): HF's keys, their defaults (E2B's tower) when missing. */
static int parse_audio(plume_config *c, const json_obj *a, char **err) {
    plume_audio_config *x = &c->aud;
    const char *name = a->doc;
    if (!cJSON_IsObject(a->obj)) return plume_fail(err, PLUME_EFORMAT, "%s: audio_config is not an object", name);
    int32_t right = 0;
    double cap = 50.0, residual = 0.5, eps = 1e-6;
    int rc;
    if ((rc = json_i32_or(a, "hidden_size", 2, 1 << 16, 1024, &x->D, err)) ||
        (rc = json_i32_or(a, "num_hidden_layers", 1, AUDIO_MAX_LAYERS, 12, &x->L, err)) ||
        (rc = json_i32_or(a, "num_attention_heads", 1, 1024, 8, &x->H, err)) ||
        (rc = json_i32_or(a, "conv_kernel_size", 1, 64, 5, &x->K, err)) ||
        (rc = json_i32_or(a, "attention_chunk_size", 1, 4096, 12, &x->chunk, err)) ||
        (rc = json_i32_or(a, "attention_context_left", 2, AUDIO_MAX_LEFT, 13, &x->left, err)) ||
        (rc = json_i32_or(a, "attention_context_right", 0, 4096, 0, &right, err)) ||
        (rc = json_i32_or(a, "output_proj_dims", 1, 1 << 16, 1536, &x->out_dims, err)) ||
        (rc = json_num_or(a, "attention_logit_cap", -INFINITY, INFINITY, 50.0, &cap, err)) ||
        (rc = json_num_or(a, "residual_weight", -INFINITY, INFINITY, 0.5, &residual, err)) ||
        (rc = json_num_or(a, "rms_norm_eps", -INFINITY, INFINITY, 1e-6, &eps, err)))
        return rc;
    if (!(cap > 0 && cap < 1e30) || !(eps >= 0 && eps < 1) || !(fabs(residual) < 1e30))
        return plume_fail(err, PLUME_EFORMAT, "%s: audio attention_logit_cap, residual_weight or rms_norm_eps is out of range",
                          name);
    x->C0 = 128, x->C1 = 32;
    const cJSON *ch = json_member(a, "subsampling_conv_channels");
    if (ch) {
        const cJSON *c0 = cJSON_GetArrayItem(ch, 0), *c1 = cJSON_GetArrayItem(ch, 1);
        if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) != 2 || !cJSON_IsNumber(c0) || !cJSON_IsNumber(c1) ||
            !(c0->valuedouble >= 1 && c0->valuedouble <= 4096) || !(c1->valuedouble >= 1 && c1->valuedouble <= 4096) ||
            c0->valuedouble != floor(c0->valuedouble) || c1->valuedouble != floor(c1->valuedouble))
            return plume_fail(err, PLUME_EFORMAT, "%s: audio subsampling_conv_channels must be two integers in [1, 4096]", name);
        x->C0 = (int32_t)c0->valuedouble, x->C1 = (int32_t)c1->valuedouble;
    }
    const cJSON *act = json_member(a, "hidden_act");
    if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return plume_fail(err, PLUME_EFORMAT, "%s: audio hidden_act must be \"silu\"", name);
    const cJSON *clip = json_member(a, "use_clipped_linears");
    if (clip && !cJSON_IsBool(clip))
        return plume_fail(err, PLUME_EFORMAT, "%s: audio use_clipped_linears must be true or false", name);
    x->clipped = !clip || cJSON_IsTrue(clip);
    if (x->D % x->H || x->D % 2)
        return plume_fail(err, PLUME_EFORMAT, "%s: audio hidden_size must be even and a multiple of the heads", name);
    x->hd = x->D / x->H;
    x->F = AUDIO_MEL_BINS;
    x->n_rel = (x->chunk + x->left - 1) / 2 + 1;
    x->cap = (float)cap, x->residual = (float)residual, x->eps = (float)eps;
    /* HF's rel_shift gives query t and key t - d the table row of position d only when the
     * table reaches back exactly left - 1 (chunk 12, left 13); other shapes, and keys ahead
     * (right context), are not implemented */
    if (right != 0 || x->n_rel - 1 != x->left - 1)
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: audio attention with chunk %d, context left %d, right %d is not supported (chunk = left - 1 "
                          "and right = 0 are)",
                          name, x->chunk, x->left, right);
    for (int i = PLUME_MEDIA_AUDIO; i <= PLUME_MEDIA_EOA; i++)
        if (c->media_id[i] < 0)
            return plume_fail(err, PLUME_EFORMAT, "%s: an audio model needs %s inside the vocabulary", name, plume_media_id_keys[i]);
    c->has_audio = 1;
    return 0;
}

/* Parse config.json text and run parse on its member key (a tower's config); absent or null:
 * the message of missing (NULL: key's object is checked as it is). */
static int tower_from_hf(plume_config *c, const char *json, const char *name, const char *key, const char *missing,
                         int (*parse)(plume_config *, const json_obj *, char **), char **err) {
    cJSON *root = cJSON_Parse(json);
    if (!root) return plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON", name);
    json_obj r = json_root(root, name), t;
    int rc = json_child(&r, key, &t, err);
    if (!rc && missing && !t.obj) rc = plume_fail(err, PLUME_EFORMAT, "%s: %s", name, missing);
    if (!rc) {
        t.doc = name; /* the messages name the file, as before */
        rc = parse(c, &t, err);
    }
    cJSON_Delete(root);
    return rc;
}

int plume_config_audio_from_hf(plume_config *c, const char *json, const char *name, char **err) {
    return tower_from_hf(c, json, name, "audio_config", "no audio_config (a model without an audio tower)", parse_audio,
                         err);
}

int plume_config_vision_from_hf(plume_config *c, const char *json, const char *name, char **err) {
    return tower_from_hf(c, json, name, "vision_config", NULL, parse_vision, err);
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
    parse_media_ids(c, r.obj, t.obj);
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

/* model_config.json's "vision": the tower of vision.safetensors. */
static void write_vision(cJSON *o, const plume_vision_config *x) {
    cJSON *v = cJSON_AddObjectToObject(o, "vision");
    cJSON_AddStringToObject(v, "file", "vision.safetensors");
    cJSON_AddStringToObject(v, "weights", "f32");
    cJSON_AddNumberToObject(v, "hidden_size", x->D);
    cJSON_AddNumberToObject(v, "num_hidden_layers", x->L);
    cJSON_AddNumberToObject(v, "num_attention_heads", x->H);
    cJSON_AddNumberToObject(v, "num_key_value_heads", x->Hkv);
    cJSON_AddNumberToObject(v, "head_dim", x->hd);
    cJSON_AddNumberToObject(v, "intermediate_size", x->I);
    cJSON_AddNumberToObject(v, "patch_size", x->patch);
    cJSON_AddNumberToObject(v, "pooling_kernel_size", x->pool);
    cJSON_AddNumberToObject(v, "position_embedding_size", x->n_pos);
    cJSON_AddNumberToObject(v, "default_output_length", x->default_tokens);
    cJSON_AddBoolToObject(v, "use_clipped_linears", x->clipped);
    cJSON_AddNumberToObject(v, "rope_theta", x->theta);
    cJSON_AddNumberToObject(v, "rms_norm_eps", x->eps);
}

/* model_config.json's "audio": the tower of audio.safetensors, under HF's audio_config keys. */
static void write_audio(cJSON *o, const plume_audio_config *x) {
    cJSON *a = cJSON_AddObjectToObject(o, "audio");
    cJSON_AddStringToObject(a, "file", "audio.safetensors");
    cJSON_AddStringToObject(a, "weights", "f32");
    cJSON_AddNumberToObject(a, "hidden_size", x->D);
    cJSON_AddNumberToObject(a, "num_hidden_layers", x->L);
    cJSON_AddNumberToObject(a, "num_attention_heads", x->H);
    const int ch[2] = {x->C0, x->C1};
    cJSON_AddItemToObject(a, "subsampling_conv_channels", cJSON_CreateIntArray(ch, 2));
    cJSON_AddNumberToObject(a, "conv_kernel_size", x->K);
    cJSON_AddNumberToObject(a, "attention_chunk_size", x->chunk);
    cJSON_AddNumberToObject(a, "attention_context_left", x->left);
    cJSON_AddNumberToObject(a, "attention_context_right", 0);
    cJSON_AddNumberToObject(a, "attention_logit_cap", x->cap);
    cJSON_AddNumberToObject(a, "residual_weight", x->residual);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    cJSON_AddBoolToObject(a, "use_clipped_linears", x->clipped);
    cJSON_AddNumberToObject(a, "rms_norm_eps", x->eps);
    cJSON_AddNumberToObject(a, "output_proj_dims", x->out_dims);
}

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
    cJSON_AddNumberToObject(o, "pad_token_id", c->pad_id);
    for (int i = 0; i < PLUME_MEDIA_NIDS; i++)
        if (c->media_id[i] >= 0) cJSON_AddNumberToObject(o, plume_media_id_keys[i], c->media_id[i]);
    if (c->has_vision) write_vision(o, &c->vis);
    if (c->has_audio) write_audio(o, &c->aud);
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
    parse_media_ids(c, o.obj, NULL);
    json_obj tower;
    if (json_member(&o, "vision") && ((rc = json_child(&o, "vision", &tower, err)) || (rc = parse_vision(c, &tower, err))))
        goto done;
    if (json_member(&o, "audio") && ((rc = json_child(&o, "audio", &tower, err)) || (rc = parse_audio(c, &tower, err))))
        goto done;
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

/* ---- the MTP drafter (gemma4_assistant) ------------------------------------------------ */

int plume_config_is_drafter(const char *json) {
    cJSON *root = cJSON_Parse(json);
    const cJSON *mt = root ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    int is = cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma4_assistant");
    cJSON_Delete(root);
    return is;
}

/* The drafter's text_config dims, and HF's refusals (no PLE, no MoE, no double-wide MLP,
 * every layer KV-shared: a missing or 0 num_kv_shared_layers is num_hidden_layers). */
static int drafter_dims(plume_drafter_config *c, const json_obj *t, char **err) {
    double eps;
    int32_t ple, vple, shared, moe, wide, k_eq_v, bias;
    int rc;
    if ((rc = json_i32(t, "hidden_size", 2, 1 << 16, &c->D, err)) ||
        (rc = json_i32(t, "num_hidden_layers", 1, PLUME_MAX_LAYERS, &c->L, err)) ||
        (rc = json_i32(t, "num_attention_heads", 1, 256, &c->H, err)) ||
        (rc = json_i32(t, "num_key_value_heads", 1, 256, &c->Hkv, err)) ||
        (rc = json_i32(t, "head_dim", 2, 4096, &c->hd_sliding, err)) ||
        (rc = json_i32_or(t, "global_head_dim", 2, 4096, c->hd_sliding, &c->hd_full, err)) ||
        (rc = json_i32(t, "vocab_size", 8, 1 << 24, &c->V, err)) ||
        (rc = json_i32(t, "sliding_window", 1, 1 << 24, &c->W, err)) ||
        (rc = json_i32(t, "intermediate_size", 1, 1 << 20, &c->I, err)) ||
        (rc = json_num_or(t, "rms_norm_eps", -INFINITY, INFINITY, 1e-6, &eps, err)) ||
        (rc = json_i32_or(t, "hidden_size_per_layer_input", 0, 1 << 16, 0, &ple, err)) ||
        (rc = json_i32_or(t, "vocab_size_per_layer_input", 0, 1 << 24, 0, &vple, err)) ||
        (rc = json_i32_or(t, "num_kv_shared_layers", 0, PLUME_MAX_LAYERS, 0, &shared, err)) ||
        (rc = json_bool_or(t, "enable_moe_block", 0, &moe, err)) ||
        (rc = json_bool_or(t, "use_double_wide_mlp", 0, &wide, err)) ||
        (rc = json_bool_or(t, "attention_k_eq_v", 0, &k_eq_v, err)) ||
        (rc = json_bool_or(t, "attention_bias", 0, &bias, err)))
        return rc;
    if (ple || vple)
        return plume_fail(err, PLUME_EFORMAT, "%s: a drafter has no per-layer inputs (hidden_size_per_layer_input and "
                          "vocab_size_per_layer_input must be 0)", t->doc);
    if (moe || wide || k_eq_v || bias)
        return plume_fail(err, PLUME_EFORMAT, "%s: a drafter with MoE, a double-wide MLP, K = V or biases is not "
                          "supported", t->doc);
    if (shared != 0 && shared != c->L)
        return plume_fail(err, PLUME_EFORMAT, "%s: num_kv_shared_layers %d: every drafter layer must be KV-shared (%d)",
                          t->doc, shared, c->L);
    if (c->H % c->Hkv) return plume_fail(err, PLUME_EFORMAT, "%s: num_attention_heads %% num_key_value_heads != 0", t->doc);
    c->eps = (float)eps;
    return 0;
}

int plume_drafter_config_from_hf_text(plume_drafter_config *c, const char *json, const char *name, char **err) {
    memset(c, 0, sizeof *c);
    cJSON *root;
    int rc = json_parse(&root, json, name, err);
    if (rc) return rc;
    json_obj r = json_root(root, name), t;
    const char *mt = "";
    int32_t tied;
    plume_config tmp; /* layer_types and rope_parameters are read as for a target */
    memset(&tmp, 0, sizeof tmp);
    if ((rc = json_str_or(&r, "model_type", "", &mt, err))) goto done;
    if (strcmp(mt, "gemma4_assistant")) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: model_type '%s' is not gemma4_assistant", name, mt);
        goto done;
    }
    if ((rc = json_child(&r, "text_config", &t, err))) goto done;
    if (!cJSON_IsObject(t.obj)) { rc = plume_fail(err, PLUME_EFORMAT, "%s: text_config is missing", name); goto done; }
    if ((rc = json_i32(&r, "backbone_hidden_size", 1, 1 << 16, &c->Db, err)) ||
        (rc = json_bool_or(&r, "use_ordered_embeddings", 0, &c->ordered, err)) ||
        (rc = json_i32_or(&r, "num_centroids", 1, 1 << 24, 2048, &c->n_centroids, err)) ||
        (rc = json_i32_or(&r, "centroid_intermediate_top_k", 1, 1 << 24, 32, &c->top_k, err)) ||
        (rc = json_bool_or(&r, "tie_word_embeddings", 1, &tied, err)) || (rc = drafter_dims(c, &t, err)))
        goto done;
    if (!tied) { rc = plume_fail(err, PLUME_EFORMAT, "%s: tie_word_embeddings must be true", name); goto done; }
    if (c->ordered && (c->V % c->n_centroids || c->top_k > c->n_centroids)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: vocab_size %d is not a multiple of num_centroids %d, or top_k %d > it",
                        name, c->V, c->n_centroids, c->top_k);
        goto done;
    }
    tmp.L = c->L;
    tmp.hd_sliding = c->hd_sliding;
    tmp.hd_full = c->hd_full;
    if ((rc = parse_layer_types(&tmp, &t, err)) || (rc = hf_rope(&tmp, &t, err))) goto done;
    for (int32_t l = 0; l < c->L; l++) {
        c->is_full[l] = tmp.is_full[l];
        c->hd[l] = tmp.is_full[l] ? c->hd_full : c->hd_sliding;
    }
    c->theta_sliding = tmp.theta_sliding;
    c->theta_full = tmp.theta_full;
    c->rot_sliding = tmp.rot_sliding;
    c->rot_full = tmp.rot_full;
done:
    cJSON_Delete(root);
    return rc;
}
