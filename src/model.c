/* model.c -- open a bundle: map every file, check every size and tensor against the config,
 * and build typed views per layer. Nothing is read whole; tensor bytes stay in the maps. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "safetensors.h"

/* ---- chunk tensors --------------------------------------------------------------------- */

/* A tensor of a chunk with the expected dtype and shape (ndim dims), as a pointer into the map. */
static int chunk_tensor(const st_file *f, const plume_map *m, const char *name, st_dtype dt, int32_t ndim,
                        const int64_t *shape, const void **out, char **err) {
    const st_tensor *t = st_find(f, name);
    if (!t) return plume_fail(err, PLUME_EFORMAT, "%s: missing tensor %s", f->path, name);
    int same = t->dtype == dt && t->ndim == ndim;
    for (int32_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has the wrong dtype or shape", f->path, name);
    if (t->offset % PLUME_ALIGN && t->nbytes > 0)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s is not %d-byte aligned", f->path, name, PLUME_ALIGN);
    if (t->offset + t->nbytes > m->size)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s runs past the end of the file", f->path, name);
    *out = m->data + t->offset;
    return 0;
}

/* A linear weight [rows, cols] at the bundle's precision (q4 falls back to q8 when cols is
 * not a multiple of 32, as the converter does). A q8 or q4 weight is in either layout of
 * kernels.h: rows ([rows, cols] I8, [rows, cols/2] U8 with scales [rows, cols/32]) or tiles,
 * the layout the converter writes where it fits ([rows/16, cols/4, 16, 4] I8, [rows/16,
 * cols/8, 16, 4] U8 with scales [rows/16, cols/32, 16]); the tensor's rank tells which. */
static int chunk_linear(plume_model *m, const st_file *f, const plume_map *map, const char *name,
                        int64_t rows, int64_t cols, plume_weight *w, char **err) {
    const char *p = m->c.weights;
    *w = (plume_weight){.rows = (int32_t)rows, .cols = (int32_t)cols, .layout = PLUME_L_ROWS};
    char sname[300];
    snprintf(sname, sizeof sname, "%s.scale", name);
    const int64_t full[2] = {rows, cols};
    if (!strcmp(p, "f32")) { w->type = PLUME_W_F32; return chunk_tensor(f, map, name, ST_F32, 2, full, &w->data, err); }
    if (!strcmp(p, "bf16")) { w->type = PLUME_W_BF16; return chunk_tensor(f, map, name, ST_BF16, 2, full, &w->data, err); }
    /* mixed precision (docs/BUNDLE.md): a q8/q4 bundle converted from a GGUF keeps its F32,
     * F16 and BF16 linears as they are; the tensor's dtype says which */
    const st_tensor *ft = st_find(f, name);
    if (ft && (ft->dtype == ST_F32 || ft->dtype == ST_F16 || ft->dtype == ST_BF16)) {
        w->type = ft->dtype == ST_F32 ? PLUME_W_F32 : ft->dtype == ST_F16 ? PLUME_W_F16 : PLUME_W_BF16;
        return chunk_tensor(f, map, name, ft->dtype, 2, full, &w->data, err);
    }
    const int q4 = !strcmp(p, "q4") && cols % 32 == 0;
    w->type = q4 ? PLUME_W_Q4 : PLUME_W_Q8;
    const st_tensor *t = st_find(f, name);
    const int tiles = t && t->ndim == 4 && plume_tiles_fit(w->type, rows, cols);
    const int64_t G = rows / PLUME_TILE_ROWS, data_shape[2][4] = {{rows, q4 ? cols / 2 : cols},
                                                                  {G, q4 ? cols / 8 : cols / 4, PLUME_TILE_ROWS, 4}};
    const int64_t q4_scale_shape[2][3] = {{rows, cols / 32}, {G, cols / 32, PLUME_TILE_ROWS}};
    const void *s = NULL;
    int rc = chunk_tensor(f, map, name, q4 ? ST_U8 : ST_I8, tiles ? 4 : 2, data_shape[tiles], &w->data, err);
    if (!rc && q4) rc = chunk_tensor(f, map, sname, ST_F16, tiles ? 3 : 2, q4_scale_shape[tiles], &s, err);
    else if (!rc) rc = chunk_tensor(f, map, sname, ST_F16, 1, &rows, &s, err); /* q8: [rows] in both */
    w->scale = s;
    if (tiles) {
        w->layout = PLUME_L_TILES;
        if (cols > m->tiles_cols) m->tiles_cols = (int32_t)cols;
    }
    return rc;
}

/* A float32 vector of a chunk. */
static int chunk_vector(const st_file *f, const plume_map *map, const char *name, int64_t n, const float **out,
                        char **err) {
    return chunk_tensor(f, map, name, ST_F32, 1, &n, (const void **)out, err);
}

/* Bytes one matvec over w reads. */
static uint64_t weight_bytes(const plume_weight *w) {
    uint64_t n = (uint64_t)w->rows * (uint64_t)w->cols;
    switch (w->type) {
    case PLUME_W_F32: return 4 * n;
    case PLUME_W_F16:
    case PLUME_W_BF16: return 2 * n;
    case PLUME_W_Q8: return n + 2 * (uint64_t)w->rows;
    default: return n / 2 + n / 16;
    }
}

/* Views of one layer's tensors. */
static int load_layer(plume_model *m, const st_file *f, const plume_map *map, int32_t l, char **err) {
    const plume_config *c = &m->c;
    plume_layer *L = &m->layer[l];
    int64_t D = c->D, hd = c->hd[l], I = c->I[l];
    char n[200];
    int rc = 0;
#define LN(suffix) (snprintf(n, sizeof n, "layers.%d.%s", l, suffix), n)
    if (!rc) rc = chunk_linear(m, f, map, LN("self_attn.q_proj.weight"), c->H * hd, D, &L->q_proj, err);
    if (!rc && c->kv_src[l] == l) rc = chunk_linear(m, f, map, LN("self_attn.k_proj.weight"), c->Hkv * hd, D, &L->k_proj, err);
    if (!rc && c->kv_src[l] == l) rc = chunk_linear(m, f, map, LN("self_attn.v_proj.weight"), c->Hkv * hd, D, &L->v_proj, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("self_attn.o_proj.weight"), D, c->H * hd, &L->o_proj, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("mlp.gate_proj.weight"), I, D, &L->gate_proj, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("mlp.up_proj.weight"), I, D, &L->up_proj, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("mlp.down_proj.weight"), D, I, &L->down_proj, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("per_layer_input_gate.weight"), c->Dp, D, &L->pl_gate, err);
    if (!rc) rc = chunk_linear(m, f, map, LN("per_layer_projection.weight"), D, c->Dp, &L->pl_proj, err);
    if (!rc) rc = chunk_vector(f, map, LN("input_layernorm.weight"), D, &L->attn_norm, err);
    if (!rc) rc = chunk_vector(f, map, LN("post_attention_layernorm.weight"), D, &L->post_attn_norm, err);
    if (!rc) rc = chunk_vector(f, map, LN("pre_feedforward_layernorm.weight"), D, &L->pre_ff_norm, err);
    if (!rc) rc = chunk_vector(f, map, LN("post_feedforward_layernorm.weight"), D, &L->post_ff_norm, err);
    if (!rc) rc = chunk_vector(f, map, LN("post_per_layer_input_norm.weight"), D, &L->post_pl_norm, err);
    if (!rc) rc = chunk_vector(f, map, LN("self_attn.q_norm.weight"), hd, &L->q_norm, err);
    if (!rc && c->kv_src[l] == l) rc = chunk_vector(f, map, LN("self_attn.k_norm.weight"), hd, &L->k_norm, err);
    const float *ls = NULL;
    if (!rc) rc = chunk_vector(f, map, LN("layer_scalar"), 1, &ls, err);
#undef LN
    if (rc) return rc;
    L->layer_scalar = ls[0];
    m->decode_bytes += weight_bytes(&L->q_proj) + weight_bytes(&L->o_proj) + weight_bytes(&L->gate_proj) +
                       weight_bytes(&L->up_proj) + weight_bytes(&L->down_proj) + weight_bytes(&L->pl_gate) +
                       weight_bytes(&L->pl_proj);
    if (c->kv_src[l] == l) m->decode_bytes += weight_bytes(&L->k_proj) + weight_bytes(&L->v_proj);
    return 0;
}

/* Map chunk ci, check its metadata, and load its layers (and the head's parts). */
static int load_chunk(plume_model *m, int32_t ci, char **err) {
    char name[64];
    snprintf(name, sizeof name, "chunk_%d.safetensors", ci + 1);
    char *path = plume_path_join(m->dir, name);
    if (!path) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    st_file f;
    int rc = st_open(&f, path, err);
    if (!rc) {
        rc = plume_map_open_dense(&m->chunk_map[ci], path, err); /* every step reads it all */
        const char *fmt = st_meta(&f, "format"), *ver = st_meta(&f, "version"), *w = st_meta(&f, "weights");
        const char *a = st_meta(&f, "first_layer"), *b = st_meta(&f, "end_layer");
        if (!rc && (!fmt || strcmp(fmt, "plume-chunk") || !ver || (strcmp(ver, "1") && strcmp(ver, "2"))))
            rc = plume_fail(err, PLUME_EFORMAT, "%s: not a plume chunk of version 1 or 2", path);
        if (!rc && (!w || strcmp(w, m->c.weights) || !a || atoi(a) != m->c.chunk[ci] || !b ||
                    atoi(b) != m->c.chunk[ci + 1]))
            rc = plume_fail(err, PLUME_EFORMAT, "%s: its layers or weights disagree with model_config.json", path);
        for (int32_t l = m->c.chunk[ci]; !rc && l < m->c.chunk[ci + 1]; l++)
            rc = load_layer(m, &f, &m->chunk_map[ci], l, err);
        if (!rc && ci == PLUME_N_CHUNKS - 1) {
            rc = chunk_vector(&f, &m->chunk_map[ci], "norm.weight", m->c.D, &m->final_norm, err);
            if (!rc && !m->c.head_sidecar)
                rc = chunk_linear(m, &f, &m->chunk_map[ci], "lm_head.weight", m->c.V, m->c.D, &m->head, err);
        }
        st_close(&f);
    }
    free(path);
    return rc;
}

/* ---- sidecars -------------------------------------------------------------------------- */

/* Map a sidecar and check its size; dense: every step reads all of it (huge pages). */
static int map_sized(plume_model *m, const char *name, uint64_t want, int dense, plume_map *map, char **err) {
    char *path = plume_path_join(m->dir, name);
    if (!path) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = dense ? plume_map_open_dense(map, path, err) : plume_map_open(map, path, err);
    if (!rc && map->size != want)
        rc = plume_fail(err, PLUME_EFORMAT, "%s: %llu bytes, expected %llu (truncated or wrong model?)", path,
                        (unsigned long long)map->size, (unsigned long long)want);
    free(path);
    return rc;
}

/* Map and check the INT8 sidecars, the PLE projection and its norm. */
static int load_sidecars(plume_model *m, char **err) {
    const plume_config *c = &m->c;
    uint64_t V = (uint64_t)c->V, D = (uint64_t)c->D, LDp = (uint64_t)c->L * (uint64_t)c->Dp;
    int rc = map_sized(m, "embed_tokens_q8.bin", V * D, c->head_sidecar, &m->embed_q8, err);
    if (!rc) rc = map_sized(m, "embed_tokens_scales.bin", V * 2, 0, &m->embed_scales, err);
    if (!rc) rc = map_sized(m, "embed_tokens_per_layer_q8.bin", V * LDp, 0, &m->ple_q8, err);
    if (!rc) rc = map_sized(m, "embed_tokens_per_layer_scales.bin", V * 2, 0, &m->ple_scales, err);
    if (!rc) rc = map_sized(m, "per_layer_projection.bin", LDp * D * 2, 1, &m->proj_map, err);
    if (!rc) rc = map_sized(m, "per_layer_norm_weight.bin", (uint64_t)c->Dp * 4, 0, &m->pnorm_map, err);
    if (rc) return rc;
    m->ple_proj = (plume_weight){PLUME_W_F16, (int32_t)LDp, c->D, m->proj_map.data, NULL, PLUME_L_ROWS};
    m->ple_norm = malloc((size_t)c->Dp * 4);
    if (!m->ple_norm) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    memcpy(m->ple_norm, m->pnorm_map.data, (size_t)c->Dp * 4);
    if (c->head_sidecar)
        m->head = (plume_weight){PLUME_W_Q8, c->V, c->D, m->embed_q8.data, (const uint16_t *)m->embed_scales.data,
                                 PLUME_L_ROWS};
    /* The RoPE .npy tables must be there (the Core ML layout has them), but plume computes
     * the reference's values itself (docs/BUNDLE.md). */
    static const char *const tables[] = {"cos_sliding.npy", "sin_sliding.npy", "cos_full.npy", "sin_full.npy"};
    for (int i = 0; i < 4; i++) {
        char *p = plume_path_join(m->dir, tables[i]);
        int ok = p && plume_file_exists(p);
        if (!ok) rc = plume_fail(err, PLUME_EFORMAT, "%s: missing file %s", m->dir, tables[i]);
        free(p);
        if (rc) return rc;
    }
    return 0;
}

/* ---- identity -------------------------------------------------------------------------- */

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A hash that names the bundle: model_config.json, every mapped file's size, and the chunk
 * headers (tensor names, shapes, offsets). A state file records it. */
static int identity(plume_model *m, char **err) {
    char *path = plume_path_join(m->dir, "model_config.json"), *text = NULL;
    size_t len = 0;
    int rc = path ? plume_read_file(path, &text, &len, err) : PLUME_ENOMEM;
    free(path);
    if (rc) return rc;
    uint64_t h = fnv(1469598103934665603ull, text, len);
    free(text);
    const plume_map *maps[] = {&m->embed_q8, &m->embed_scales, &m->ple_q8, &m->ple_scales, &m->proj_map,
                               &m->pnorm_map, &m->chunk_map[0], &m->chunk_map[1], &m->chunk_map[2]};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) {
        uint64_t sz = maps[i]->size;
        h = fnv(h, &sz, sizeof sz);
        if (i >= 6 && maps[i]->size >= 8) { /* a chunk: its header (validated at load) */
            uint64_t hl = plume_rd_u64le(maps[i]->data);
            h = fnv(h, maps[i]->data, (size_t)(8 + (hl < maps[i]->size - 8 ? hl : 0)));
        }
    }
    const plume_map *towers[2] = {m->vision ? &m->vision->map : NULL, m->audio ? &m->audio->ts.map : NULL};
    for (int i = 0; i < 2; i++) { /* a tower file's header (text-only bundles keep their identity) */
        const plume_map *v = towers[i];
        if (!v) continue;
        uint64_t hl = plume_rd_u64le(v->data);
        h = fnv(h, &v->size, sizeof v->size);
        h = fnv(h, v->data, (size_t)(8 + (hl < v->size - 8 ? hl : 0)));
    }
    m->identity = h;
    return 0;
}

/* ---- prefault ------------------------------------------------------------------------- */

int plume_model_dense_maps(const plume_model *m, const plume_map *maps[PLUME_DENSE_MAPS]) {
    const plume_map *all[PLUME_DENSE_MAPS] = {&m->chunk_map[0], &m->chunk_map[1], &m->chunk_map[2], &m->proj_map,
                                        m->c.head_sidecar ? &m->embed_q8 : NULL};
    int n = 0;
    for (int i = 0; i < PLUME_DENSE_MAPS; i++)
        if (all[i] && all[i]->data) maps[n++] = all[i];
    return n;
}

/* Linux fills the page tables on request (MADV_POPULATE_READ, 5.14+; older kernels refuse
 * the flag, which is harmless); elsewhere the portable hint that the pages will be read. */
#if defined(__linux__) && !defined(PLUME_PORTABLE)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#endif

/* Ask the system to map n bytes at p for reading (a hint: errors are ignored). */
static void prefault_range(void *p, size_t n) {
#if defined(__linux__) && !defined(PLUME_PORTABLE)
    madvise(p, n, MADV_POPULATE_READ);
#else
    posix_madvise(p, n, POSIX_MADV_WILLNEED);
#endif
}

/* Map the page tables of the weights every step reads (chunks, token rows used as the head,
 * the PLE projection), so that the first steps do not pay ~300k page faults. It runs beside
 * the first step instead of delaying open (about 30 ms per GB here); the PLE table is left
 * alone (only the rows of the tokens are read). Errors are ignored: it is only a hint. */
static void *prefault_main(void *arg) {
    const plume_map *maps[PLUME_DENSE_MAPS];
    for (int i = 0, n = plume_model_dense_maps(arg, maps); i < n; i++) prefault_range((void *)maps[i]->data, maps[i]->size);
    return NULL;
}

double plume_model_huge_share(const plume_model *m) {
    const plume_map *maps[PLUME_DENSE_MAPS];
    double huge = 0, all = 0;
    for (int i = 0, n = plume_model_dense_maps(m, maps); i < n; i++) {
        huge += plume_map_huge_share(maps[i]) * (double)maps[i]->size;
        all += (double)maps[i]->size;
    }
    return all > 0 ? huge / all : 0.0;
}

void plume_model_prefault(plume_model *m) {
    if (atomic_flag_test_and_set(&m->prefault_claimed)) return;
    m->prefault_started = pthread_create(&m->prefault, NULL, prefault_main, m) == 0;
}

/* ---- the end of a turn ----------------------------------------------------------------- */

/* The ids that end a model turn: the config's eos ids, then the tokenizer's <eos>, <turn|>
 * and <|tool_response> (after a tool call the model waits for the answer), each where the
 * tokenizer has it as one special token. */
static void find_end_ids(plume_model *m) {
    static const char *const ends[] = {"<eos>", "<turn|>", "<|tool_response>"};
    int32_t cand[8 + 3], n = 0;
    for (int32_t i = 0; i < m->c.n_eos; i++) cand[n++] = m->c.eos_ids[i];
    for (int k = 0; m->tok && k < 3; k++) {
        int32_t id[2];
        if (plume_tokenize(m->tok, ends[k], strlen(ends[k]), id, 2) == 1 && plume_token_is_special(m->tok, id[0]))
            cand[n++] = id[0];
    }
    m->n_end = 0;
    for (int32_t i = 0; i < n; i++)
        if (!plume_model_ends_turn(m, cand[i])) m->end_ids[m->n_end++] = cand[i];
}

int32_t plume_model_ends_turn(const plume_model *m, int32_t id) {
    for (int32_t i = 0; i < m->n_end; i++)
        if (m->end_ids[i] == id) return 1;
    return 0;
}

/* ---- open / free ----------------------------------------------------------------------- */

plume_model_params plume_model_default_params(void) {
    plume_model_params p = {.isa = NULL, .n_threads = 0, .exact = 0};
    return p;
}

int plume_model_open(plume_model **out, const char *dir, const plume_model_params *pp, char **err) {
    *out = NULL;
    plume_model_params p = pp ? *pp : plume_model_default_params();
    plume_model *m = calloc(1, sizeof *m);
    if (m) atomic_flag_clear(&m->prefault_claimed);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    char *mc = plume_path_join(dir, "model_config.json");
    int rc = mc ? plume_config_read_bundle(&m->c, mc, err) : PLUME_ENOMEM;
    free(mc);
    if (!rc) rc = load_sidecars(m, err);
    for (int32_t ci = 0; !rc && ci < PLUME_N_CHUNKS; ci++) rc = load_chunk(m, ci, err);
    if (!rc && m->c.has_vision) { /* encoders/tower_vision.c maps and checks the tower */
        char *vp = plume_path_join(dir, "vision.safetensors");
        rc = vp ? enc_vision_open(&m->vision, vp, &m->c.vis, m->c.D, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
        free(vp);
    }
    if (!rc && m->c.has_audio) { /* encoders/tower_audio.c maps and checks the tower */
        char *ap = plume_path_join(dir, "audio.safetensors");
        if (!ap || !(m->audio = malloc(sizeof *m->audio))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        else if ((rc = enc_audio_open(m->audio, &m->c.aud, m->c.D, ap, err))) free(m->audio), m->audio = NULL;
        free(ap);
    }
    if (!rc) rc = identity(m, err);
    if (!rc) {
        m->decode_bytes += weight_bytes(&m->ple_proj) + weight_bytes(&m->head);
        m->k = plume_kernels_get(p.isa);
        if (!m->k) rc = plume_fail(err, PLUME_EINVAL, "ISA '%s' is unknown or this CPU lacks it",
                                   p.isa ? p.isa : getenv("PLUME_ISA") ? getenv("PLUME_ISA") : "?");
        else if (!p.exact && (!strcmp(m->c.weights, "q8") || !strcmp(m->c.weights, "q4")))
            plume_qact_kernels(m->k, &m->qact_quantize, &m->qact_matmul); /* none: float path */
    }
    for (int t = 0; !rc && t < 2; t++) {
        m->inv_freq[t] = malloc((size_t)(t ? m->c.hd_full : m->c.hd_sliding) / 2 * sizeof(float));
        if (!m->inv_freq[t]) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        else plume_rope_inv_freq(&m->c, t, m->inv_freq[t]);
    }
    if (!rc) {
        m->pool = plume_pool_new(p.n_threads > 0 ? p.n_threads : plume_physical_cores());
        if (!m->pool) rc = plume_fail(err, PLUME_ENOMEM, "cannot start threads");
    }
    if (!rc && m->tiles_cols) { /* a group of 16 rows as rows, per thread (forward.c): q8 16 x
                                  cols bytes; q4 8 x cols and its scales, cols bytes more */
        m->untile_bytes = ((size_t)PLUME_TILE_ROWS * (size_t)m->tiles_cols + 63) & ~(size_t)63;
        m->untile = plume_alloc((size_t)plume_pool_size(m->pool) * m->untile_bytes);
        if (!m->untile) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    if (!rc) { /* the tokenizer: the binary form if present, else the JSON */
        char *bin = plume_path_join(dir, "tokenizer.bin"), *js = plume_path_join(dir, "hf_model/tokenizer.json");
        if (bin && plume_file_exists(bin)) rc = plume_tokenizer_open(&m->tok, bin, err);
        else if (js && plume_file_exists(js)) rc = plume_tokenizer_open_json(&m->tok, js, err);
        free(bin);
        free(js);
    }
    if (rc) {
        plume_model_free(m);
        return rc;
    }
    find_end_ids(m);
    *out = m;
    return 0;
}

void plume_model_free(plume_model *m) {
    if (!m) return;
    if (m->prefault_started) pthread_join(m->prefault, NULL);
    plume_pool_free(m->pool);
    plume_dealloc(m->untile);
    plume_tokenizer_free(m->tok);
    enc_vision_free(m->vision);
    enc_audio_free(m->audio);
    free(m->audio);
    plume_map_free(&m->embed_q8);
    plume_map_free(&m->embed_scales);
    plume_map_free(&m->ple_q8);
    plume_map_free(&m->ple_scales);
    plume_map_free(&m->proj_map);
    plume_map_free(&m->pnorm_map);
    for (int i = 0; i < PLUME_N_CHUNKS; i++) plume_map_free(&m->chunk_map[i]);
    free(m->ple_norm);
    free(m->inv_freq[0]);
    free(m->inv_freq[1]);
    free(m->dir);
    free(m);
}

/* The first id outside [0, V), named with its index; 0 if none. */
int plume_model_check_ids(const plume_model *m, const int32_t *ids, int32_t n, char **err) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->c.V)
            return plume_fail(err, PLUME_EINVAL, "token id %d (at %d) is outside the vocabulary [0, %d)", ids[i], i,
                              m->c.V);
    return 0;
}

int32_t plume_model_n_vocab(const plume_model *m) { return m->c.V; }
int32_t plume_model_n_ctx(const plume_model *m) { return m->c.n_ctx; }
int32_t plume_model_n_layers(const plume_model *m) { return m->c.L; }
int32_t plume_model_dim(const plume_model *m) { return m->c.D; }
const char *plume_model_isa(const plume_model *m) { return m->k->name; }
int32_t plume_model_n_threads(const plume_model *m) { return plume_pool_size(m->pool); }
const char *plume_model_weights(const plume_model *m) { return m->c.weights; }
/* Whether this model's q8/q4 matmuls read tiled weights as they are (forward.c unpacks them a
 * group at a time for the kernels that read rows). */
const char *plume_model_layout(const plume_model *m) {
    if (!m->tiles_cols) return "rows";
    int native = m->qact_matmul ? plume_qact_reads_tiles(m->qact_matmul) : m->k->reads_tiles;
    return native ? "tiles" : "tiles-unpacked";
}
uint64_t plume_model_decode_bytes(const plume_model *m) { return m->decode_bytes; }
const plume_tokenizer *plume_model_tokenizer(const plume_model *m) { return m->tok; }
int32_t plume_model_has_vision(const plume_model *m) { return m->vision != NULL; }
int32_t plume_model_has_audio(const plume_model *m) { return m->audio != NULL; }

int32_t plume_model_media_token(const plume_model *m, const char *name) {
    static const char *const names[PLUME_MEDIA_NIDS] = {"image", "boi", "eoi", "audio", "boa", "eoa", "video"};
    for (int i = 0; name && i < PLUME_MEDIA_NIDS; i++)
        if (!strcmp(name, names[i])) return m->c.media_id[i];
    return -1;
}
