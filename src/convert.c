/* convert.c -- the converter: a tensor source -> a bundle (docs/BUNDLE.md); plume_convert()
 * is its public face over a Hugging Face checkpoint (the CLI's `plume convert`, the Python
 * binding and any other caller share it).
 *
 * Order of work: parse and check the config, check every tensor the text decoder needs
 * (present, right shape) before writing a byte, then write into a fresh BUNDLE.tmp-XXXXXX: sidecars,
 * RoPE tables, hf_model/, the three chunk files, model_config.json; rename at the end.
 * Rows are streamed in blocks of at most BLOCK_BYTES of float32. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "encoders/encoders.h"
#include "gguf.h"
#include "kernels/qact.h"
#include "manifest.h"
#include "npy.h"
#include "quant.h"
#include "safetensors.h"

#define BLOCK_BYTES (16u << 20)
#define ROPE_ROWS_MAX 8192 /* rows written to the .npy tables; positions past them are computed */

typedef struct {
    const conv_source *src;
    const conv_options *opt;
    plume_config cfg;
    const char *prefix; /* "model.language_model." */
    char *dir;          /* the temporary output directory */
    float *rows;        /* [BLOCK_BYTES / 4] */
    int tiles;          /* q8/q4 weights in PLUME_L_TILES where they fit (kernels.h) */
    plume_q4_rule q4_rule; /* how a q4 group's step is chosen (quant.h) */
    int mixed;          /* q8/q4 bundle of a source whose float linears are kept as they are (GGUF) */
    struct {            /* requantized source tensors, per source type: squared error and norm */
        const char *type;
        int32_t tensors;
        double err, norm;
    } rq[8];
    uint64_t done, total; /* progress, in source elements */
    double t0, last;      /* start, last progress line (plume_now seconds) */
} conv;

/* ---- progress -------------------------------------------------------------------------- */

/* Show how far the conversion is on stderr (when asked, at most a few times a second). */
static void progress(conv *cv, int64_t elems, const char *what) {
    cv->done += (uint64_t)elems;
    if (!cv->opt->progress) return;
    double now = plume_now();
    if (now - cv->last < 0.2 && cv->done < cv->total) return;
    cv->last = now;
    fprintf(stderr, "\rconverting: %5.1f%%  %-48.48s", cv->total ? 100.0 * (double)cv->done / (double)cv->total : 100.0,
            what);
    if (cv->done >= cv->total) fprintf(stderr, "\n");
}

/* ---- tensor names and checks ----------------------------------------------------------- */

/* The checkpoint name of a decoder tensor: prefix + rest. */
static void tname(const conv *cv, char *out, size_t cap, const char *rest) {
    snprintf(out, cap, "%s%s", cv->prefix, rest);
}

/* Check a tensor exists with the expected 2-D (cols > 0) or 1-D (cols == 0) shape. */
static int expect(conv *cv, const char *rest, int64_t rows, int64_t cols, char **err) {
    char name[256];
    tname(cv, name, sizeof name, rest);
    int32_t nd;
    int64_t sh[8];
    if (cv->src->shape(cv->src->ctx, name, &nd, sh))
        return plume_fail(err, PLUME_EFORMAT, "checkpoint: missing tensor %s", name);
    int ok = cols ? (nd == 2 && sh[0] == rows && sh[1] == cols) : (nd == 1 && sh[0] == rows);
    if (!ok) {
        char got[96] = "";
        for (int32_t i = 0; i < nd && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)sh[i]);
        if (cols) return plume_fail(err, PLUME_EFORMAT, "checkpoint: tensor %s has shape [%s], config says [%lld, %lld]", name, got, (long long)rows, (long long)cols);
        return plume_fail(err, PLUME_EFORMAT, "checkpoint: tensor %s has shape [%s], config says [%lld]", name, got, (long long)rows);
    }
    cv->total += (uint64_t)(rows * (cols ? cols : 1));
    return 0;
}

/* The linear weights of a layer: suffix, rows, cols. */
typedef struct {
    const char *suffix;
    int64_t rows, cols;
} lin;

/* Fill the list of linear weights layer l owns; returns the count. */
static int layer_linears(const plume_config *c, int32_t l, lin *out) {
    int64_t D = c->D, hd = c->hd[l], I = c->I[l];
    int n = 0;
    out[n++] = (lin){"self_attn.q_proj.weight", c->H * hd, D};
    if (c->kv_src[l] == l) {
        out[n++] = (lin){"self_attn.k_proj.weight", c->Hkv * hd, D};
        out[n++] = (lin){"self_attn.v_proj.weight", c->Hkv * hd, D};
    }
    out[n++] = (lin){"self_attn.o_proj.weight", D, c->H * hd};
    out[n++] = (lin){"mlp.gate_proj.weight", I, D};
    out[n++] = (lin){"mlp.up_proj.weight", I, D};
    out[n++] = (lin){"mlp.down_proj.weight", D, I};
    out[n++] = (lin){"per_layer_input_gate.weight", c->Dp, D};
    out[n++] = (lin){"per_layer_projection.weight", D, c->Dp};
    return n;
}

/* The vectors of a layer (norms, layer_scalar): suffix and length. */
static int layer_vectors(const plume_config *c, int32_t l, lin *out) {
    int n = 0;
    static const char *const norms[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                        "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
                                        "post_per_layer_input_norm.weight"};
    for (int i = 0; i < 5; i++) out[n++] = (lin){norms[i], c->D, 0};
    out[n++] = (lin){"self_attn.q_norm.weight", c->hd[l], 0};
    if (c->kv_src[l] == l) out[n++] = (lin){"self_attn.k_norm.weight", c->hd[l], 0};
    out[n++] = (lin){"layer_scalar", 1, 0};
    return n;
}

/* Check every tensor the text decoder reads, before any output is written. */
static int check_tensors(conv *cv, char **err) {
    const plume_config *c = &cv->cfg;
    int rc;
    if ((rc = expect(cv, "embed_tokens.weight", c->V, c->D, err)) ||
        (rc = expect(cv, "embed_tokens_per_layer.weight", c->V, (int64_t)c->L * c->Dp, err)) ||
        (rc = expect(cv, "per_layer_model_projection.weight", (int64_t)c->L * c->Dp, c->D, err)) ||
        (rc = expect(cv, "per_layer_projection_norm.weight", c->Dp, 0, err)) ||
        (rc = expect(cv, "norm.weight", c->D, 0, err)))
        return rc;
    for (int32_t l = 0; l < c->L; l++) {
        lin ls[24]; /* at most 9 linears + 8 vectors */
        int n = layer_linears(c, l, ls);
        n += layer_vectors(c, l, ls + n);
        for (int i = 0; i < n; i++) {
            char rest[160];
            snprintf(rest, sizeof rest, "layers.%d.%s", l, ls[i].suffix);
            if ((rc = expect(cv, rest, ls[i].rows, ls[i].cols, err))) return rc;
        }
    }
    if (!c->head_sidecar) cv->total += (uint64_t)c->V * (uint64_t)c->D; /* the head is read again */
    return 0;
}

/* ---- writing helpers ------------------------------------------------------------------- */

/* Open a file of the output directory for writing (common.h's safe writer). */
static int out_open(conv *cv, plume_wfile *f, const char *name, char **err) {
    char *p = plume_path_join(cv->dir, name);
    int rc = p ? plume_wfile_open(f, p, PLUME_WRITE_REPLACE, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    free(p);
    return rc;
}

/* Finish a written file (ok: every write succeeded), or abandon it. */
static int out_close(plume_wfile *f, int ok, char **err) {
    if (ok) return plume_wfile_commit(f, err);
    plume_wfile_abort(f);
    return PLUME_EIO;
}

/* Rows per block for a row length. */
static int64_t block_rows(int64_t cols) {
    int64_t r = (int64_t)(BLOCK_BYTES / 4) / (cols ? cols : 1);
    return r < 1 ? 1 : r;
}

/* The requantization account of a source tensor: NULL when the source stores it exactly
 * (or says nothing), else its slot (per source type: Q6_K, Q4_K...), the tensor counted. */
static void *rq_slot(conv *cv, const char *src_name) {
    int exact = 1;
    const char *type = cv->src->storage ? cv->src->storage(cv->src->ctx, src_name, &exact) : NULL;
    if (!type || exact) return NULL;
    for (int i = 0; i < 8; i++) {
        if (!cv->rq[i].type) cv->rq[i].type = type;
        if (!strcmp(cv->rq[i].type, type)) {
            cv->rq[i].tensors++;
            return &cv->rq[i];
        }
    }
    return NULL;
}

/* Add a row's error to an account (a rq slot): x the source, y what the bundle holds. */
static void rq_add(void *slot, const float *x, const float *y, int64_t n) {
    if (!slot) return;
    struct { const char *type; int32_t tensors; double err, norm; } *a = slot;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)y[i];
        a->err += d * d;
        a->norm += (double)x[i] * (double)x[i];
    }
}

/* A q8 row dequantized (q * s / 127) into y. */
static void q8_row_f32(const int8_t *q, uint16_t s, int64_t n, float *y) {
    const float f = plume_f16_to_f32(s) / 127.0f;
    for (int64_t i = 0; i < n; i++) y[i] = (float)q[i] * f;
}

/* A q4 row (rows layout) dequantized (q * d) into y. */
static void q4_row_f32(const uint8_t *p, const uint16_t *d, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)(((p[i / 2] >> (4 * (i % 2))) & 15) - 8) * plume_f16_to_f32(d[i / 32]);
}

/* An INT8 sidecar pair (name_q8.bin, name_scales.bin) of a [rows, cols] tensor. */
static int write_q8_sidecar(conv *cv, const char *rest, int64_t rows, int64_t cols, const char *qname,
                            const char *sname, char **err) {
    char name[256];
    tname(cv, name, sizeof name, rest);
    uint16_t *scales = malloc((size_t)rows * 2);
    int8_t *q = malloc((size_t)(block_rows(cols) * cols));
    void *slot = rq_slot(cv, name);
    float *y = slot ? malloc((size_t)cols * sizeof *y) : NULL;
    plume_wfile fq, fs;
    int rc = scales && q && (y || !slot) ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
    int opened = !rc && !(rc = out_open(cv, &fq, qname, err));
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += block_rows(cols)) {
        int64_t n = rows - r0 < block_rows(cols) ? rows - r0 : block_rows(cols);
        if ((rc = cv->src->read(cv->src->ctx, name, r0, n, cv->rows, err))) break;
        for (int64_t r = 0; r < n; r++) {
            plume_quant_q8_row(cv->rows + r * cols, (int32_t)cols, q + r * cols, &scales[r0 + r]);
            if (slot) {
                q8_row_f32(q + r * cols, scales[r0 + r], cols, y);
                rq_add(slot, cv->rows + r * cols, y, cols);
            }
        }
        rc = plume_wfile_write(&fq, q, (size_t)(n * cols), err);
        progress(cv, n * cols, name);
    }
    if (opened && out_close(&fq, !rc, err) && !rc) rc = PLUME_EIO;
    if (!rc && !(rc = out_open(cv, &fs, sname, err))) {
        rc = plume_wfile_write(&fs, scales, (size_t)rows * 2, err);
        if (out_close(&fs, !rc, err) && !rc) rc = PLUME_EIO;
    }
    free(scales);
    free(q);
    free(y);
    return rc;
}

/* A raw little-endian file of a tensor: fp16 (half != 0) or fp32. */
static int write_raw(conv *cv, const char *rest, int64_t rows, int64_t cols, int half, const char *fname, char **err) {
    char name[256];
    tname(cv, name, sizeof name, rest);
    int64_t br = block_rows(cols ? cols : rows), width = cols ? cols : rows;
    if (!cols) rows = 1;
    plume_wfile f;
    int rc = out_open(cv, &f, fname, err);
    if (rc) return rc;
    uint16_t *h = malloc((size_t)(br * width) * 2);
    if (!h) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += br) {
        int64_t n = rows - r0 < br ? rows - r0 : br;
        if ((rc = cv->src->read(cv->src->ctx, name, r0, n, cv->rows, err))) break;
        size_t cnt = (size_t)(n * width);
        if (half) {
            for (size_t i = 0; i < cnt; i++) h[i] = plume_f32_to_f16(cv->rows[i]);
            rc = plume_wfile_write(&f, h, cnt * 2, err);
        } else {
            rc = plume_wfile_write(&f, cv->rows, cnt * 4, err);
        }
        progress(cv, n * width, name);
    }
    free(h);
    if (out_close(&f, !rc, err) && !rc) rc = PLUME_EIO;
    return rc;
}

/* The four RoPE tables, float32, min(n_ctx, ROPE_ROWS_MAX) rows. */
static int write_rope(conv *cv, char **err) {
    const plume_config *c = &cv->cfg;
    int64_t n = c->n_ctx < ROPE_ROWS_MAX ? c->n_ctx : ROPE_ROWS_MAX;
    int rc = 0;
    for (int full = 0; full < 2 && !rc; full++) {
        int32_t hd = full ? c->hd_full : c->hd_sliding;
        float *inv = malloc((size_t)hd / 2 * 4), *cs = malloc((size_t)(n * hd) * 4), *sn = malloc((size_t)(n * hd) * 4);
        if (!inv || !cs || !sn) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        else {
            plume_rope_inv_freq(c, full, inv);
            for (int64_t p = 0; p < n; p++) plume_rope_row(inv, hd, (int32_t)p, cs + p * hd, sn + p * hd);
            int64_t shape[2] = {n, hd};
            char *pc = plume_path_join(cv->dir, full ? "cos_full.npy" : "cos_sliding.npy");
            char *ps = plume_path_join(cv->dir, full ? "sin_full.npy" : "sin_sliding.npy");
            rc = npy_write(pc, "<f4", shape, 2, cs, err);
            if (!rc) rc = npy_write(ps, "<f4", shape, 2, sn, err);
            free(pc);
            free(ps);
        }
        free(inv);
        free(cs);
        free(sn);
    }
    return rc;
}

/* ---- towers ---------------------------------------------------------------------------- */
/*
 * A tower (vision now, audio next) goes into a safetensors file of its own, copied as it is:
 * every tensor of the checkpoint under the tower's prefixes, under its checkpoint name and
 * shape (the clip bounds stay the scalars they are), as F32, sorted by name, 64-byte aligned,
 * __metadata__ format = plume-tower, tower = its kind. What the towers are, and how a
 * checkpoint is checked before anything is written, is the table below and its check.
 */

/* One tower the converter carries. */
typedef struct {
    const char *kind;           /* "vision" */
    const char *file;           /* in the bundle */
    const char *prefixes[3];    /* tensor name prefixes, NULL-terminated */
} conv_tower;

static const conv_tower conv_towers[] = {
    {"vision", "vision.safetensors", {"model.vision_tower.", "model.embed_vision.", NULL}},
    {"audio", "audio.safetensors", {"model.audio_tower.", "model.embed_audio.", NULL}},
};

/* Whether a tensor name falls under one of the tower's prefixes. */
static int tower_has(const conv_tower *t, const char *name) {
    for (int i = 0; t->prefixes[i]; i++)
        if (!strncmp(name, t->prefixes[i], strlen(t->prefixes[i]))) return 1;
    return 0;
}

/* Sort names alphabetically. */
static int cmp_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The source's tensors under tower t, sorted (a malloc'd array of borrowed names). */
static int tower_names(const conv *cv, const conv_tower *t, const char ***names, int32_t *n, char **err) {
    int32_t cap = 0;
    *names = NULL;
    *n = 0;
    for (int32_t i = 0;; i++) {
        const char *nm = cv->src->name_at(cv->src->ctx, i);
        if (!nm) break;
        if (!tower_has(t, nm)) continue;
        if (*n == cap) {
            const char **more = realloc(*names, sizeof *more * (size_t)(cap = cap ? 2 * cap : 256));
            if (!more) { free(*names); *names = NULL; return plume_fail(err, PLUME_ENOMEM, "out of memory"); }
            *names = more;
        }
        (*names)[(*n)++] = nm;
    }
    if (*n) qsort(*names, (size_t)*n, sizeof **names, cmp_names);
    return 0;
}

/* Copy tower t into its file: plan every tensor, then stream each a block of rows at a time
 * (a row is the last dimension; the position table's rows of 768 floats, say). */
static int write_tower(conv *cv, const conv_tower *t, char **err) {
    const char **names;
    int32_t n;
    int rc = tower_names(cv, t, &names, &n, err);
    if (rc) return rc;
    char *path = plume_path_join(cv->dir, t->file);
    st_writer w;
    rc = path ? st_writer_init(&w, path, PLUME_ALIGN, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    free(path);
    if (rc) { free(names); return rc; }
    st_writer_meta(&w, "format", "plume-tower", err);
    st_writer_meta(&w, "version", "1", err);
    st_writer_meta(&w, "tower", t->kind, err);
    for (int32_t i = 0; !rc && i < n; i++) {
        int32_t nd;
        int64_t sh[8];
        cv->src->shape(cv->src->ctx, names[i], &nd, sh);
        if (nd > 4) rc = plume_fail(err, PLUME_EFORMAT, "checkpoint: tensor %s has %d dimensions", names[i], nd);
        else rc = st_writer_add(&w, names[i], ST_F32, nd, sh, err);
    }
    if (!rc) rc = st_writer_begin(&w, err);
    for (int32_t i = 0; !rc && i < n; i++) {
        int32_t nd;
        int64_t sh[8], count = 1;
        cv->src->shape(cv->src->ctx, names[i], &nd, sh);
        for (int32_t d = 0; d < nd; d++) count *= sh[d];
        const int64_t cols = nd >= 2 ? sh[nd - 1] : count, rows = cols ? count / cols : 0, br = block_rows(cols);
        for (int64_t r0 = 0; !rc && r0 < rows; r0 += br) {
            const int64_t k = rows - r0 < br ? rows - r0 : br;
            rc = cv->src->read(cv->src->ctx, names[i], r0, k, cv->rows, err);
            if (!rc) rc = st_writer_write(&w, cv->rows, (size_t)(k * cols) * 4, err);
            progress(cv, k * cols, names[i]);
        }
    }
    if (!rc) rc = st_writer_finish(&w, err);
    st_writer_free(&w);
    free(names);
    return rc;
}

/* A tower's tensor list against the checkpoint: each tensor there with its shape (a scalar may
 * be [] or [1]; an optional one may be missing), counted into the progress total; kind names
 * the config in messages. Frees list. */
static int check_tower_list(conv *cv, enc_tensor_spec *list, int32_t n, const char *kind, char **err) {
    int rc = list ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int32_t i = 0; !rc && i < n; i++) {
        const enc_tensor_spec *t = &list[i];
        int32_t nd;
        int64_t sh[8], count = 1;
        if (cv->src->shape(cv->src->ctx, t->name, &nd, sh)) {
            if (!t->optional) rc = plume_fail(err, PLUME_EFORMAT, "checkpoint: missing tensor %s", t->name);
            continue;
        }
        int same = nd == t->ndim || (t->ndim == 0 && nd == 1 && sh[0] == 1);
        for (int32_t d = 0; same && d < t->ndim; d++) same = sh[d] == t->shape[d], count *= sh[d];
        if (!same) rc = plume_fail(err, PLUME_EFORMAT, "checkpoint: tensor %s has a shape other than %s's", t->name, kind);
        cv->total += (uint64_t)count;
    }
    free(list);
    return rc;
}

/* Whether the checkpoint carries a vision tower, and if so that it is whole: its config
 * parses and every tensor the tower reads is there with its shape (the clip bounds may be
 * missing: +-inf). A text-only checkpoint (no position table; tiny-a's dummy tower tensors)
 * converts without one. Counts the tower's elements into the progress total. */
static int check_vision(conv *cv, char **err) {
    plume_config *c = &cv->cfg;
    int32_t nd;
    int64_t sh[8];
    if (cv->src->shape(cv->src->ctx, "model.vision_tower.patch_embedder.position_embedding_table", &nd, sh)) return 0;
    int rc = plume_config_vision_from_hf(c, cv->src->config_json, "config.json", err);
    if (rc) return rc;
    const int32_t n = enc_vision_tensor_list(&c->vis, c->D, NULL, 0);
    enc_tensor_spec *list = malloc(sizeof *list * (size_t)n);
    if (list) enc_vision_tensor_list(&c->vis, c->D, list, n);
    return check_tower_list(cv, list, n, "vision_config", err);
}

/* The same for the audio tower, which the first subsampling convolution tells: a checkpoint
 * without it (text-only, or tiny-a's one stand-in tensor) converts without one. */
static int check_audio(conv *cv, char **err) {
    plume_config *c = &cv->cfg;
    int32_t nd;
    int64_t sh[8];
    if (cv->src->shape(cv->src->ctx, "model.audio_tower.subsample_conv_projection.layer0.conv.weight", &nd, sh)) return 0;
    int rc = plume_config_audio_from_hf(c, cv->src->config_json, "config.json", err);
    if (rc) return rc;
    const int32_t n = enc_audio_tensor_list(&c->aud, c->D, NULL, 0);
    enc_tensor_spec *list = malloc(sizeof *list * (size_t)n);
    if (list) enc_audio_tensor_list(&c->aud, c->D, list, n);
    return check_tower_list(cv, list, n, "audio_config", err);
}

/* ---- chunks ---------------------------------------------------------------------------- */

/* How a linear weight (src_name in the source) is stored at the bundle's precision: a q8/q4
 * bundle of a mixed source keeps the source's F32, F16 and BF16 linears as they are. */
static st_dtype lin_dtype(const conv *cv, const char *src_name, int64_t cols, int *q4) {
    const char *w = cv->cfg.weights;
    *q4 = 0;
    if (cv->mixed) {
        int exact = 0;
        const char *t = cv->src->storage(cv->src->ctx, src_name, &exact);
        if (t && !strcmp(t, "F16")) return ST_F16;
        if (t && !strcmp(t, "BF16")) return ST_BF16;
        if (t && !strcmp(t, "F32")) return ST_F32;
    }
    *q4 = !strcmp(w, "q4") && cols % 32 == 0;
    if (*q4) return ST_U8;
    if (!strcmp(w, "q8") || !strcmp(w, "q4")) return ST_I8;
    return !strcmp(w, "bf16") ? ST_BF16 : ST_F32;
}

/* Whether a linear weight of this dtype and shape is written as tiles. */
static int lin_tiled(const conv *cv, st_dtype dt, int64_t rows, int64_t cols) {
    return cv->tiles && (dt == ST_I8 || dt == ST_U8) && block_rows(cols) >= PLUME_TILE_ROWS &&
           plume_tiles_fit(dt == ST_U8 ? PLUME_W_Q4 : PLUME_W_Q8, rows, cols);
}

/* Plan a linear weight (and its scale) in a chunk writer: rows layout [rows, cols] (q4 [rows,
 * cols/2], scales [rows, cols/32]), or tiles [rows/16, cols/4 (q4: cols/8), 16, 4] (q4
 * scales [rows/16, cols/32, 16]); q8 scales are [rows] in both. */
static int plan_linear(const conv *cv, st_writer *w, const char *name, int64_t rows, int64_t cols, char **err) {
    int q4;
    char src_name[300];
    tname(cv, src_name, sizeof src_name, strcmp(name, "lm_head.weight") ? name : "embed_tokens.weight");
    st_dtype dt = lin_dtype(cv, src_name, cols, &q4);
    int rc;
    const int tiled = lin_tiled(cv, dt, rows, cols);
    if (tiled) {
        int64_t shape[4] = {rows / PLUME_TILE_ROWS, q4 ? cols / 8 : cols / 4, PLUME_TILE_ROWS, 4};
        rc = st_writer_add(w, name, dt, 4, shape, err);
    } else {
        int64_t shape[2] = {rows, q4 ? cols / 2 : cols};
        rc = st_writer_add(w, name, dt, 2, shape, err);
    }
    if (rc || dt == ST_F32 || dt == ST_BF16 || dt == ST_F16) return rc;
    char sname[300];
    snprintf(sname, sizeof sname, "%s.scale", name);
    if (!q4) return st_writer_add(w, sname, ST_F16, 1, &rows, err);
    int64_t sshape[3] = {rows / PLUME_TILE_ROWS, cols / 32, PLUME_TILE_ROWS};
    if (tiled) return st_writer_add(w, sname, ST_F16, 3, sshape, err);
    int64_t rshape[2] = {rows, cols / 32};
    return st_writer_add(w, sname, ST_F16, 2, rshape, err);
}

/* Stream a linear weight (then its scales) into a chunk writer, a block of rows at a time
 * (whole groups of 16 when tiled: each packed after quantizing). */
static int write_linear(conv *cv, st_writer *w, const char *src_name, int64_t rows, int64_t cols, char **err) {
    int q4;
    st_dtype dt = lin_dtype(cv, src_name, cols, &q4);
    const int tiled = lin_tiled(cv, dt, rows, cols);
    const plume_wtype wt = q4 ? PLUME_W_Q4 : PLUME_W_Q8;
    int64_t br = block_rows(cols);
    if (tiled) br -= br % PLUME_TILE_ROWS; /* whole groups (lin_tiled: at least one) */
    size_t nscale = dt == ST_I8 ? (size_t)rows : q4 ? (size_t)(rows * (cols / 32)) : 0;
    uint16_t *scales = nscale ? malloc(nscale * 2) : NULL;
    void *out = malloc((size_t)(br * cols) * (dt == ST_F32 ? 4 : 2));
    void *packed = tiled ? malloc((size_t)(br * cols)) : NULL;
    uint16_t *gtmp = tiled && q4 ? malloc((size_t)PLUME_TILE_ROWS * (size_t)(cols / 32) * 2) : NULL;
    void *slot = rq_slot(cv, src_name);
    float *y = slot ? malloc((size_t)cols * sizeof *y) : NULL;
    int rc = out && (scales || !nscale) && (packed || !tiled) && (gtmp || !(tiled && q4)) && (y || !slot)
                 ? 0 : plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += br) {
        int64_t n = rows - r0 < br ? rows - r0 : br;
        if ((rc = cv->src->read(cv->src->ctx, src_name, r0, n, cv->rows, err))) break;
        size_t bytes;
        if (dt == ST_F32) {
            memcpy(out, cv->rows, (size_t)(n * cols) * 4);
            bytes = (size_t)(n * cols) * 4;
        } else if (dt == ST_BF16 || dt == ST_F16) {
            for (int64_t i = 0; i < n * cols; i++)
                ((uint16_t *)out)[i] = dt == ST_BF16 ? plume_f32_to_bf16(cv->rows[i]) : plume_f32_to_f16(cv->rows[i]);
            bytes = (size_t)(n * cols) * 2;
        } else if (q4) {
            for (int64_t r = 0; r < n; r++) {
                plume_quant_q4_row(cv->rows + r * cols, (int32_t)cols, (uint8_t *)out + r * (cols / 2),
                                   scales + (r0 + r) * (cols / 32), cv->q4_rule);
                if (slot) {
                    q4_row_f32((uint8_t *)out + r * (cols / 2), scales + (r0 + r) * (cols / 32), cols, y);
                    rq_add(slot, cv->rows + r * cols, y, cols);
                }
            }
            bytes = (size_t)(n * cols / 2);
        } else {
            for (int64_t r = 0; r < n; r++) {
                plume_quant_q8_row(cv->rows + r * cols, (int32_t)cols, (int8_t *)out + r * cols, &scales[r0 + r]);
                if (slot) {
                    q8_row_f32((int8_t *)out + r * cols, scales[r0 + r], cols, y);
                    rq_add(slot, cv->rows + r * cols, y, cols);
                }
            }
            bytes = (size_t)(n * cols);
        }
        const void *data = out;
        if (tiled) { /* each group's bytes, and its Q4 scales in place (the same range of them) */
            const size_t gb = bytes / (size_t)(n / PLUME_TILE_ROWS), gs = (size_t)PLUME_TILE_ROWS * (size_t)(cols / 32);
            for (int64_t g = 0; g < n / PLUME_TILE_ROWS; g++) {
                uint16_t *sg = q4 ? scales + (size_t)(r0 / PLUME_TILE_ROWS + g) * gs : NULL;
                plume_tiles_pack(wt, (int32_t)cols, (const uint8_t *)out + g * gb, sg, (uint8_t *)packed + g * gb, gtmp);
                if (q4) memcpy(sg, gtmp, gs * 2);
            }
            data = packed;
        }
        rc = st_writer_write(w, data, bytes, err);
        progress(cv, n * cols, src_name);
    }
    if (!rc && nscale) rc = st_writer_write(w, scales, nscale * 2, err);
    free(gtmp);
    free(packed);
    free(scales);
    free(out);
    free(y);
    return rc;
}

/* Copy a vector as float32 into a chunk writer. */
static int write_vector(conv *cv, st_writer *w, const char *src_name, int64_t n, char **err) {
    int rc = cv->src->read(cv->src->ctx, src_name, 0, 1, cv->rows, err);
    if (!rc) rc = st_writer_write(w, cv->rows, (size_t)n * 4, err);
    progress(cv, n, src_name);
    return rc;
}

/* One chunk file: its layers (and, for the last, the final norm and maybe the head). */
static int write_chunk(conv *cv, int32_t ci, char **err) {
    const plume_config *c = &cv->cfg;
    char fname[64], meta[32];
    snprintf(fname, sizeof fname, "chunk_%d.safetensors", ci + 1);
    char *path = plume_path_join(cv->dir, fname);
    st_writer w;
    int rc = st_writer_init(&w, path, PLUME_ALIGN, err);
    free(path);
    if (rc) return rc;
    st_writer_meta(&w, "format", "plume-chunk", err);
    st_writer_meta(&w, "version", "2", err); /* 2: q8/q4 weights may be tiles (their rank says) */
    st_writer_meta(&w, "weights", c->weights, err);
    snprintf(meta, sizeof meta, "%d", c->chunk[ci]);
    st_writer_meta(&w, "first_layer", meta, err);
    snprintf(meta, sizeof meta, "%d", c->chunk[ci + 1]);
    st_writer_meta(&w, "end_layer", meta, err);
    int last = ci == PLUME_N_CHUNKS - 1;
    /* plan */
    for (int32_t l = c->chunk[ci]; !rc && l < c->chunk[ci + 1]; l++) {
        lin ls[24]; /* at most 9 linears + 8 vectors */
        int n = layer_linears(c, l, ls);
        for (int i = 0; !rc && i < n; i++) {
            char name[200];
            snprintf(name, sizeof name, "layers.%d.%s", l, ls[i].suffix);
            rc = plan_linear(cv, &w, name, ls[i].rows, ls[i].cols, err);
        }
        n = layer_vectors(c, l, ls);
        for (int i = 0; !rc && i < n; i++) {
            char name[200];
            snprintf(name, sizeof name, "layers.%d.%s", l, ls[i].suffix);
            rc = st_writer_add(&w, name, ST_F32, 1, &ls[i].rows, err);
        }
    }
    if (!rc && last) {
        int64_t d = c->D;
        rc = st_writer_add(&w, "norm.weight", ST_F32, 1, &d, err);
        if (!rc && !c->head_sidecar) rc = plan_linear(cv, &w, "lm_head.weight", c->V, c->D, err);
    }
    if (!rc) rc = st_writer_begin(&w, err);
    /* write, in plan order */
    for (int32_t l = c->chunk[ci]; !rc && l < c->chunk[ci + 1]; l++) {
        lin ls[24]; /* at most 9 linears + 8 vectors */
        int n = layer_linears(c, l, ls);
        for (int i = 0; !rc && i < n; i++) {
            char rest[200], name[256];
            snprintf(rest, sizeof rest, "layers.%d.%s", l, ls[i].suffix);
            tname(cv, name, sizeof name, rest);
            rc = write_linear(cv, &w, name, ls[i].rows, ls[i].cols, err);
        }
        n = layer_vectors(c, l, ls);
        for (int i = 0; !rc && i < n; i++) {
            char rest[200], name[256];
            snprintf(rest, sizeof rest, "layers.%d.%s", l, ls[i].suffix);
            tname(cv, name, sizeof name, rest);
            rc = write_vector(cv, &w, name, ls[i].rows, err);
        }
    }
    if (!rc && last) {
        char name[256];
        tname(cv, name, sizeof name, "norm.weight");
        rc = write_vector(cv, &w, name, c->D, err);
        tname(cv, name, sizeof name, "embed_tokens.weight");
        if (!rc && !c->head_sidecar) rc = write_linear(cv, &w, name, c->V, c->D, err);
    }
    if (!rc) rc = st_writer_finish(&w, err);
    st_writer_free(&w);
    return rc;
}

/* ---- hf_model/ ------------------------------------------------------------------------- */

/* Copy a small file from the checkpoint into hf_model/ (absent files are skipped). */
static int copy_small(conv *cv, const char *name, char **err) {
    if (!cv->src->dir) return 0;
    char *from = plume_path_join(cv->src->dir, name), *buf = NULL, to[4096];
    size_t len;
    int rc = 0;
    if (from && plume_file_exists(from)) {
        rc = plume_read_file(from, &buf, &len, err);
        snprintf(to, sizeof to, "%s/hf_model/%s", cv->dir, name);
        if (!rc) rc = plume_write_file(to, buf, len, PLUME_WRITE_REPLACE, err);
    }
    free(from);
    free(buf);
    return rc;
}

/* hf_model/{config,tokenizer,tokenizer_config}.json and tokenizer.bin (fast to open). */
static int write_hf_model(conv *cv, char **err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/hf_model", cv->dir);
    if (mkdir(path, 0755) != 0) return plume_fail(err, PLUME_EIO, "%s: cannot create: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/hf_model/config.json", cv->dir);
    int rc = plume_write_file(path, cv->src->config_json, strlen(cv->src->config_json), PLUME_WRITE_REPLACE, err);
    const char *const own[2][2] = {{"tokenizer.json", cv->src->tokenizer_json},
                                   {"tokenizer_config.json", cv->src->tokenizer_config_json}};
    for (int i = 0; i < 2 && !rc; i++) {
        if (!own[i][1]) { rc = copy_small(cv, own[i][0], err); continue; }
        snprintf(path, sizeof path, "%s/hf_model/%s", cv->dir, own[i][0]); /* the source's own text (GGUF) */
        rc = plume_write_file(path, own[i][1], strlen(own[i][1]), PLUME_WRITE_REPLACE, err);
    }
    snprintf(path, sizeof path, "%s/hf_model/tokenizer.json", cv->dir);
    if (!rc && plume_file_exists(path)) {
        plume_tokenizer *tok;
        rc = plume_tokenizer_open_json(&tok, path, err);
        if (!rc) {
            char bin[4096];
            snprintf(bin, sizeof bin, "%s/tokenizer.bin", cv->dir);
            rc = plume_tokenizer_save(tok, bin, err);
            plume_tokenizer_free(tok);
        }
    }
    return rc;
}

/* ---- the MTP drafter (gemma4_assistant) ------------------------------------------------ */
/*
 * A drafter bundle (docs/SPECULATIVE.md) is a directory: config.json (the checkpoint's, read
 * again at open), drafter.safetensors and the manifest. Its linear weights take the bundle's
 * precision in the rows layout (the centroid head reads rows by token id); the head is the
 * tied model.embed_tokens (q4 bundles: q8 unless --head q4); centroids stay float32 and
 * token_ordering is int32.
 */

/* A drafter tensor: the checkpoint's name, the bundle's, its shape (cols 0: a vector). */
typedef struct {
    char src[160], dst[160];
    int64_t rows, cols;
    int linear; /* at the bundle's precision; else float32 */
} dtensor;

/* Every tensor a drafter bundle holds, in file order; returns the count. */
static int32_t drafter_tensors(const plume_drafter_config *d, dtensor *out) {
    int32_t n = 0;
    for (int32_t l = 0; l < d->L; l++) {
        int64_t D = d->D, qd = (int64_t)d->H * d->hd[l];
        const struct { const char *s; int64_t r, c; int lin; } t[] = {
            {"self_attn.q_proj.weight", qd, D, 1}, {"self_attn.o_proj.weight", D, qd, 1},
            {"mlp.gate_proj.weight", d->I, D, 1},  {"mlp.up_proj.weight", d->I, D, 1},
            {"mlp.down_proj.weight", D, d->I, 1},  {"input_layernorm.weight", D, 0, 0},
            {"post_attention_layernorm.weight", D, 0, 0}, {"pre_feedforward_layernorm.weight", D, 0, 0},
            {"post_feedforward_layernorm.weight", D, 0, 0}, {"self_attn.q_norm.weight", d->hd[l], 0, 0},
            {"layer_scalar", 1, 0, 0}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++, n++) {
            snprintf(out[n].dst, sizeof out[n].dst, "layers.%d.%s", l, t[i].s);
            snprintf(out[n].src, sizeof out[n].src, "model.layers.%d.%s", l, t[i].s);
            out[n].rows = t[i].r, out[n].cols = t[i].c, out[n].linear = t[i].lin;
        }
    }
    out[n++] = (dtensor){"model.norm.weight", "norm.weight", d->D, 0, 0};
    out[n++] = (dtensor){"pre_projection.weight", "pre_projection.weight", d->D, 2 * (int64_t)d->Db, 1};
    out[n++] = (dtensor){"post_projection.weight", "post_projection.weight", d->Db, d->D, 1};
    out[n++] = (dtensor){"model.embed_tokens.weight", "embed_tokens.weight", d->V, d->D, 1};
    if (d->ordered) {
        out[n++] = (dtensor){"masked_embedding.centroids.weight", "centroids.weight", d->n_centroids, d->D, 0};
        out[n++] = (dtensor){"masked_embedding.token_ordering", "token_ordering", d->V, 0, 0};
    }
    return n;
}

/* Check a drafter tensor's shape in the source (any rank whose dims multiply to the shape:
 * layer_scalar may be [1] or []). */
static int drafter_expect(conv *cv, const dtensor *t, char **err) {
    int32_t nd;
    int64_t sh[8], count = 1;
    if (cv->src->shape(cv->src->ctx, t->src, &nd, sh))
        return plume_fail(err, PLUME_EFORMAT, "drafter checkpoint: missing tensor %s", t->src);
    for (int32_t i = 0; i < nd; i++) count *= sh[i];
    int ok = t->cols ? nd == 2 && sh[0] == t->rows && sh[1] == t->cols : count == t->rows && nd <= 1;
    if (!ok)
        return plume_fail(err, PLUME_EFORMAT, "drafter checkpoint: tensor %s does not have the shape [%lld%s%lld] the "
                          "config gives", t->src, (long long)t->rows, t->cols ? ", " : "", (long long)t->cols);
    cv->total += (uint64_t)(t->rows * (t->cols ? t->cols : 1));
    return 0;
}

/* token_ordering as int32, checked to be a permutation of the vocabulary. */
static int write_ordering(conv *cv, st_writer *w, const dtensor *t, char **err) {
    int32_t *ids = malloc((size_t)t->rows * 4);
    uint8_t *seen = calloc((size_t)t->rows, 1);
    int rc = ids && seen ? cv->src->read(cv->src->ctx, t->src, 0, 1, cv->rows, err)
                         : plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < t->rows; i++) {
        float v = cv->rows[i];
        if (!(v >= 0 && v < (float)t->rows) || v != floorf(v) || seen[(int64_t)v]++)
            rc = plume_fail(err, PLUME_EFORMAT, "drafter checkpoint: %s is not a permutation of the vocabulary "
                            "(entry %lld)", t->src, (long long)i);
        else ids[i] = (int32_t)v;
    }
    if (!rc) rc = st_writer_write(w, ids, (size_t)t->rows * 4, err);
    progress(cv, t->rows, t->src);
    free(ids);
    free(seen);
    return rc;
}

/* A float32 matrix or vector, a block of rows at a time. */
static int write_f32(conv *cv, st_writer *w, const dtensor *t, char **err) {
    int64_t cols = t->cols ? t->cols : t->rows, rows = t->cols ? t->rows : 1, br = block_rows(cols);
    int rc = 0;
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += br) {
        int64_t n = rows - r0 < br ? rows - r0 : br;
        if (!(rc = cv->src->read(cv->src->ctx, t->src, r0, n, cv->rows, err)))
            rc = st_writer_write(w, cv->rows, (size_t)(n * cols) * 4, err);
        progress(cv, n * cols, t->src);
    }
    return rc;
}

/* drafter.safetensors: plan every tensor, then stream them in plan order. The head's
 * precision is head_w; the other linears take the bundle's. */
static int write_drafter_file(conv *cv, const plume_drafter_config *d, const dtensor *ts, int32_t n,
                              const char *head_w, char **err) {
    char *path = plume_path_join(cv->dir, "drafter.safetensors");
    st_writer w;
    int rc = path ? st_writer_init(&w, path, PLUME_ALIGN, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    free(path);
    if (rc) return rc;
    char body[8];
    snprintf(body, sizeof body, "%s", cv->cfg.weights);
    st_writer_meta(&w, "format", "plume-drafter", err);
    st_writer_meta(&w, "version", "1", err);
    st_writer_meta(&w, "weights", body, err);
    st_writer_meta(&w, "head", head_w, err);
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1) rc = st_writer_begin(&w, err);
        for (int32_t i = 0; !rc && i < n; i++) {
            const dtensor *t = &ts[i];
            int head = !strcmp(t->dst, "embed_tokens.weight");
            snprintf(cv->cfg.weights, sizeof cv->cfg.weights, "%s", head ? head_w : body);
            if (pass == 0 && t->linear) rc = plan_linear(cv, &w, t->dst, t->rows, t->cols, err);
            else if (pass == 0) {
                int64_t sh[2] = {t->rows, t->cols};
                int ord = !strcmp(t->dst, "token_ordering");
                rc = st_writer_add(&w, t->dst, ord ? ST_I32 : ST_F32, t->cols ? 2 : 1, sh, err);
            } else if (t->linear) rc = write_linear(cv, &w, t->src, t->rows, t->cols, err);
            else if (!strcmp(t->dst, "token_ordering")) rc = write_ordering(cv, &w, t, err);
            else rc = write_f32(cv, &w, t, err);
        }
    }
    snprintf(cv->cfg.weights, sizeof cv->cfg.weights, "%s", body);
    if (!rc) rc = st_writer_finish(&w, err);
    st_writer_free(&w);
    (void)d;
    return rc;
}

/* Convert a gemma4_assistant checkpoint into a drafter bundle at out. */
static int convert_drafter(const conv_source *src, const conv_options *opt, const char *w, const char *head,
                           const char *out, char **err) {
    conv cv = {.src = src, .opt = opt, .t0 = plume_now()};
    plume_drafter_config d;
    int rc = plume_drafter_config_from_hf_text(&d, src->config_json, "config.json", err);
    if (rc) return rc;
    snprintf(cv.cfg.weights, sizeof cv.cfg.weights, "%s", w);
    cv.tiles = 0; /* rows: the centroid head reads rows by id, and a draft step is one token */
    const char *head_w = !strcmp(w, "q4") && strcmp(head, "q4") ? "q8" : w;
    dtensor *ts = malloc(sizeof *ts * ((size_t)d.L * 11 + 6));
    if (!ts) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int32_t n = drafter_tensors(&d, ts);
    for (int32_t i = 0; !rc && i < n; i++) rc = drafter_expect(&cv, &ts[i], err);
    struct stat sb;
    if (!rc && lstat(out, &sb) == 0) rc = plume_fail(err, PLUME_EIO, "%s: already exists (remove it first)", out);
    if (!rc && !(cv.dir = plume_mkdtemp_beside(out, err))) rc = PLUME_EIO;
    if (!rc && !(cv.rows = malloc(BLOCK_BYTES))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) {
        char *cfg = plume_path_join(cv.dir, "config.json");
        rc = cfg ? plume_write_file(cfg, src->config_json, strlen(src->config_json), PLUME_WRITE_REPLACE, err)
                 : plume_fail(err, PLUME_ENOMEM, "out of memory");
        free(cfg);
    }
    if (!rc) rc = write_drafter_file(&cv, &d, ts, n, head_w, err);
    if (!rc) rc = plume_manifest_write(cv.dir, err);
    if (!rc && rename(cv.dir, out) != 0) rc = plume_fail(err, PLUME_EIO, "%s: cannot rename into place: %s", out, strerror(errno));
    if (rc && cv.dir) plume_rm_tree(cv.dir);
    else if (!rc && opt->progress) fprintf(stderr, "converting: drafter done in %.1f s -> %s\n", plume_now() - cv.t0, out);
    free(cv.dir);
    free(cv.rows);
    free(ts);
    return rc;
}

/* ---- the whole conversion -------------------------------------------------------------- */

/* Whether the source stores some layer linear quantized (a GGUF of Q4_0/Q8_0/K-quant layers):
 * then its float linears (F16 projections beside Q4_0 layers) are kept as they are. */
static int source_quantized(conv *cv) {
    if (!cv->src->storage) return 0;
    for (int32_t l = 0; l < cv->cfg.L; l++) {
        lin ls[24];
        int n = layer_linears(&cv->cfg, l, ls);
        for (int i = 0; i < n; i++) {
            char rest[200], name[256];
            int exact = 0;
            snprintf(rest, sizeof rest, "layers.%d.%s", l, ls[i].suffix);
            tname(cv, name, sizeof name, rest);
            const char *t = cv->src->storage(cv->src->ctx, name, &exact);
            if (t && strcmp(t, "F32") && strcmp(t, "F16") && strcmp(t, "BF16")) return 1;
        }
    }
    return 0;
}

int convert_run(const conv_source *src, const conv_options *opt, const char *out, char **err) {
    conv cv = {.src = src, .opt = opt, .t0 = plume_now()};
    if (plume_config_is_drafter(src->config_json)) { /* a gemma4_assistant: a drafter bundle */
        const char *w = opt->weights ? opt->weights : "q8", *head = opt->head ? opt->head : "q8";
        if (strcmp(w, "f32") && strcmp(w, "bf16") && strcmp(w, "q8") && strcmp(w, "q4"))
            return plume_fail(err, PLUME_EINVAL, "--weights must be f32, bf16, q8 or q4 (not '%s')", w);
        if (strcmp(head, "q8") && strcmp(head, "q4"))
            return plume_fail(err, PLUME_EINVAL, "--head must be q8 or q4 (not '%s')", head);
        return convert_drafter(src, opt, w, head, out, err);
    }
    int rc = plume_config_from_hf_text(&cv.cfg, src->config_json, "config.json", err);
    if (rc) return rc;
    plume_config *c = &cv.cfg;
    if (opt->n_ctx > 0) {
        if (opt->n_ctx > c->max_pos)
            return plume_fail(err, PLUME_EINVAL, "--context %d exceeds max_position_embeddings %d", opt->n_ctx, c->max_pos);
        c->n_ctx = opt->n_ctx;
    }
    const char *w = opt->weights ? opt->weights : "q8";
    if (strcmp(w, "f32") && strcmp(w, "bf16") && strcmp(w, "q8") && strcmp(w, "q4"))
        return plume_fail(err, PLUME_EINVAL, "--weights must be f32, bf16, q8 or q4 (not '%s')", w);
    snprintf(c->weights, sizeof c->weights, "%s", w);
    const char *lay = opt->layout ? opt->layout : "auto";
    if (strcmp(lay, "auto") && strcmp(lay, "tiles") && strcmp(lay, "rows"))
        return plume_fail(err, PLUME_EINVAL, "--layout must be auto, tiles or rows (not '%s')", lay);
    cv.tiles = !strcmp(lay, "tiles") || (!strcmp(lay, "auto") && plume_tiles_native());
    const char *head = opt->head ? opt->head : "q8";
    if (strcmp(head, "q8") && strcmp(head, "q4"))
        return plume_fail(err, PLUME_EINVAL, "--head must be q8 or q4 (not '%s')", head);
    if (!strcmp(head, "q4") && strcmp(w, "q4"))
        return plume_fail(err, PLUME_EINVAL, "--head q4 wants --weights q4 (the head of %s weights is fixed)", w);
    const int rule = plume_q4_rule_parse(opt->q4_scale);
    if (rule < 0)
        return plume_fail(err, PLUME_EINVAL, "--q4-scale must be best, absmax or q4_0 (not '%s')", opt->q4_scale);
    cv.q4_rule = (plume_q4_rule)rule;
    /* q8 and q4: the INT8 token sidecar is the head, unless q4 asks for a q4 head of its own */
    c->head_sidecar = !strcmp(w, "q8") || (!strcmp(w, "q4") && strcmp(head, "q4"));
    int32_t nd;
    int64_t sh[8];
    cv.prefix = src->shape(src->ctx, "model.language_model.embed_tokens.weight", &nd, sh) == 0 ? "model.language_model."
                                                                                             : "model.";
    if ((rc = check_tensors(&cv, err)) || (rc = check_vision(&cv, err)) || (rc = check_audio(&cv, err))) return rc;
    cv.mixed = (!strcmp(w, "q8") || !strcmp(w, "q4")) && source_quantized(&cv);
    struct stat sb;
    if (lstat(out, &sb) == 0) return plume_fail(err, PLUME_EIO, "%s: already exists (remove it first)", out);
    /* a fresh directory of a random name (common.h), ours alone: nothing in it can be a link
     * someone planted, and removing it on failure removes only what we wrote */
    if (!(cv.dir = plume_mkdtemp_beside(out, err))) return PLUME_EIO;
    cv.rows = malloc(BLOCK_BYTES);
    if (!cv.rows) {
        rmdir(cv.dir);
        free(cv.dir);
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    int64_t LDp = (int64_t)c->L * c->Dp;
    rc = write_hf_model(&cv, err);
    if (!rc) rc = write_q8_sidecar(&cv, "embed_tokens.weight", c->V, c->D, "embed_tokens_q8.bin", "embed_tokens_scales.bin", err);
    if (!rc) rc = write_q8_sidecar(&cv, "embed_tokens_per_layer.weight", c->V, LDp, "embed_tokens_per_layer_q8.bin",
                                   "embed_tokens_per_layer_scales.bin", err);
    if (!rc) rc = write_raw(&cv, "per_layer_model_projection.weight", LDp, c->D, 1, "per_layer_projection.bin", err);
    if (!rc) rc = write_raw(&cv, "per_layer_projection_norm.weight", c->Dp, 0, 0, "per_layer_norm_weight.bin", err);
    if (!rc) rc = write_rope(&cv, err);
    for (int32_t ci = 0; !rc && ci < PLUME_N_CHUNKS; ci++) rc = write_chunk(&cv, ci, err);
    if (!rc && c->has_vision) rc = write_tower(&cv, &conv_towers[0], err);
    if (!rc && c->has_audio) rc = write_tower(&cv, &conv_towers[1], err);
    char mc[4096];
    snprintf(mc, sizeof mc, "%s/model_config.json", cv.dir);
    if (!rc) rc = plume_config_write_bundle(c, mc, err);
    if (!rc) rc = plume_manifest_write(cv.dir, err); /* manifest.c: the last file written */
    if (!rc && rename(cv.dir, out) != 0) rc = plume_fail(err, PLUME_EIO, "%s: cannot rename into place: %s", out, strerror(errno));
    if (rc) plume_rm_tree(cv.dir);
    for (int i = 0; !rc && opt->report && i < 8 && cv.rq[i].type; i++)
        fprintf(stderr, "converting: %d %s tensors dequantized and requantized, relative RMS error %.4g\n",
                cv.rq[i].tensors, cv.rq[i].type, cv.rq[i].norm > 0 ? sqrt(cv.rq[i].err / cv.rq[i].norm) : 0.0);
    if (rc) {}
    else if (opt->progress) fprintf(stderr, "converting: done in %.1f s -> %s\n", plume_now() - cv.t0, out);
    free(cv.dir);
    free(cv.rows);
    return rc;
}

/* ---- the public API ------------------------------------------------------------------- */

plume_convert_params plume_convert_default_params(void) {
    return (plume_convert_params){.weights = "q8", .n_ctx = 0, .progress = 0, .layout = "auto", .head = "q8",
                                  .q4_scale = "best"};
}

int plume_convert_check_config(const char *path, char **err) {
    char *text = NULL;
    int rc = plume_read_file(path, &text, NULL, err);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(text);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(tc) ? tc : root, "model_type");
    if (!root) rc = plume_fail(err, PLUME_EFORMAT, "%s: not valid JSON", path);
    else if (plume_config_is_drafter(text)) {
        plume_drafter_config d;
        rc = plume_drafter_config_from_hf_text(&d, text, "config.json", err);
    } else if (!cJSON_IsString(mt) || (strcmp(mt->valuestring, "gemma4_text") && strcmp(mt->valuestring, "gemma4")))
        rc = plume_fail(err, PLUME_EFORMAT, "not a Gemma 4 text model (model_type '%s'); plume runs Gemma 4 E2B and E4B",
                        cJSON_IsString(mt) ? mt->valuestring : "missing");
    else {
        plume_config c;
        char *why = NULL;
        if (plume_config_from_hf_text(&c, text, "config.json", &why)) {
            rc = plume_fail(err, PLUME_EFORMAT, "not a Gemma 4 (E2B or E4B) model plume can run: %s", why);
            free(why);
        }
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* The bundle precision of a GGUF's layers (--weights auto): that of its first query
 * projection: q4 for Q4_0, Q4_1 and Q4_K, q8 for Q8_0, Q5_0, Q5_1, Q5_K and Q6_K (Q5_0 is what
 * llama-quantize writes for a Q4_K tensor whose rows are not a multiple of 256), bf16 for F16
 * and BF16, f32 for F32. */
static const char *gguf_weights(const conv_source *src) {
    int exact = 0;
    const char *t = src->storage(src->ctx, "model.language_model.layers.0.self_attn.q_proj.weight", &exact);
    if (!t) return "q8";
    if (!strcmp(t, "Q4_0") || !strcmp(t, "Q4_1") || !strcmp(t, "Q4_K")) return "q4";
    if (!strcmp(t, "F16") || !strcmp(t, "BF16")) return "bf16";
    return !strcmp(t, "F32") ? "f32" : "q8";
}

int plume_convert(const char *hf_dir, const char *out_dir, const plume_convert_params *p, char **err) {
    plume_convert_params d = plume_convert_default_params();
    if (!p) p = &d;
    if (!hf_dir || !out_dir) return plume_fail(err, PLUME_EINVAL, "convert: no checkpoint or output directory given");
    if (p->n_ctx < 0) return plume_fail(err, PLUME_EINVAL, "convert: n_ctx must be >= 0 (not %d)", p->n_ctx);
    conv_source src;
    const int gguf = gguf_is_gguf(hf_dir);
    int rc = gguf ? source_gguf_open(&src, hf_dir, err) : source_hf_open(&src, hf_dir, err);
    if (rc) return rc;
    const char *w = p->weights;
    if (!w || !strcmp(w, "auto")) w = gguf ? gguf_weights(&src) : "q8";
    conv_options opt = {
        .weights = w, .n_ctx = p->n_ctx, .progress = p->progress, .layout = p->layout, .head = p->head,
        .q4_scale = p->q4_scale, .report = p->report};
    rc = convert_run(&src, &opt, out_dir, err);
    if (gguf) source_gguf_close(&src);
    else source_hf_close(&src);
    return rc;
}
