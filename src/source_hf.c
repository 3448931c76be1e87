/* source_hf.c -- a converter source over a Hugging Face checkpoint: config.json plus
 * model.safetensors, or shards listed by model.safetensors.index.json. Tensor bytes are
 * read with pread a block of rows at a time; nothing is mapped or read whole. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "source.h"
#include "safetensors.h"

typedef struct {
    int32_t n_files;
    st_file *files;
    int32_t n_names;     /* the tensors: the index's weight_map, or the single file's header */
    char **names;        /* [n_names] */
    int32_t *name_file;  /* [n_names] the file that holds each (the index's word) */
    char *config;
    uint8_t *buf;  /* raw rows */
    size_t buf_cap;
} hf_ctx;

/* Find the entry of a tensor in the file the index names for it (a shard may carry a tensor
 * of the same name that the index does not point to). */
static const st_tensor *hf_find(hf_ctx *h, const char *name, const st_file **file) {
    for (int32_t i = 0; i < h->n_names; i++) {
        if (strcmp(h->names[i], name)) continue;
        const st_file *f = &h->files[h->name_file[i]];
        if (file) *file = f;
        return st_find(f, name);
    }
    return NULL;
}

/* The name of tensor i (in the index's or the file's order), or NULL past the last. */
static const char *hf_name_at(void *ctx, int32_t i) {
    const hf_ctx *h = ctx;
    return i >= 0 && i < h->n_names ? h->names[i] : NULL;
}

/* Record tensor name as held by file fi. 0 or -1 (out of memory). */
static int hf_add_name(hf_ctx *h, const char *name, int32_t fi) {
    if (h->n_names % 256 == 0) {
        char **nn = realloc(h->names, sizeof *nn * (size_t)(h->n_names + 256));
        int32_t *nf = nn ? realloc(h->name_file, sizeof *nf * (size_t)(h->n_names + 256)) : NULL;
        if (nn) h->names = nn;
        if (nf) h->name_file = nf;
        if (!nn || !nf) return -1;
    }
    if (!(h->names[h->n_names] = strdup(name))) return -1;
    h->name_file[h->n_names++] = fi;
    return 0;
}

static int hf_shape(void *ctx, const char *name, int32_t *ndim, int64_t *shape) {
    const st_tensor *t = hf_find(ctx, name, NULL);
    if (!t) return 1;
    *ndim = t->ndim;
    for (int32_t i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    return 0;
}

static int hf_read(void *ctx, const char *name, int64_t r0, int64_t n, float *out, char **err) {
    hf_ctx *h = ctx;
    const st_file *f;
    const st_tensor *t = hf_find(h, name, &f);
    if (!t) return plume_fail(err, PLUME_EFORMAT, "checkpoint: missing tensor %s", name);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_I64 && t->dtype != ST_I32)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has dtype %s (want BF16, F16, F32 or an integer index)", f->path, name,
                          st_dtype_name(t->dtype));
    int64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : t->count; /* [rows..., cols]: rows = the rest */
    int64_t rows = t->ndim >= 2 && cols ? t->count / cols : 1;
    if (r0 < 0 || n < 0 || r0 + n > rows) return plume_fail(err, PLUME_EINVAL, "%s: row range out of bounds", name);
    int32_t es = st_dtype_size(t->dtype);
    size_t bytes = (size_t)(n * cols * es);
    if (bytes > h->buf_cap) {
        uint8_t *nb = realloc(h->buf, bytes);
        if (!nb) return plume_fail(err, PLUME_ENOMEM, "out of memory reading %s", name);
        h->buf = nb;
        h->buf_cap = bytes;
    }
    int rc = st_pread(f->path, t->offset + (uint64_t)(r0 * cols * es), h->buf, bytes, err);
    if (rc) return rc;
    int64_t count = n * cols;
    for (int64_t i = 0; i < count; i++) {
        uint16_t v16;
        if (t->dtype == ST_I64 || t->dtype == ST_I32) { /* indices (token_ordering): exact below 2^24 */
            int64_t v = 0;
            int32_t v32;
            if (t->dtype == ST_I64) memcpy(&v, h->buf + 8 * i, 8);
            else memcpy(&v32, h->buf + 4 * i, 4), v = v32;
            if (v < -(1 << 24) || v > (1 << 24))
                return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s holds %lld, beyond an index plume reads", f->path,
                                  name, (long long)v);
            out[i] = (float)v;
        } else if (t->dtype == ST_F32) memcpy(&out[i], h->buf + 4 * i, 4);
        else {
            memcpy(&v16, h->buf + 2 * i, 2);
            out[i] = t->dtype == ST_BF16 ? plume_bf16_to_f32(v16) : plume_f16_to_f32(v16);
        }
    }
    return 0;
}

/* The shard file names of an index (deduplicated, in first-seen order). */
static int read_index(hf_ctx *h, const char *dir, const char *index_path, char **err) {
    char *text;
    int rc = plume_read_file(index_path, &text, NULL, err);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON or no weight_map", index_path);
    }
    char **names = calloc((size_t)cJSON_GetArraySize(wm) + 1, sizeof *names);
    int32_t n = 0;
    for (const cJSON *e = wm->child; e && names; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            rc = plume_fail(err, PLUME_EFORMAT, "%s: bad shard name for %s", index_path, e->string);
            break;
        }
        int32_t k = 0;
        while (k < n && strcmp(names[k], e->valuestring)) k++;
        if (k == n) names[n++] = e->valuestring;
    }
    if (!names) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    h->files = rc ? NULL : calloc((size_t)n + 1, sizeof *h->files);
    for (int32_t i = 0; !rc && i < n; i++) {
        char *p = plume_path_join(dir, names[i]);
        rc = p ? st_open(&h->files[i], p, err) : PLUME_ENOMEM;
        free(p);
        if (!rc) h->n_files++;
    }
    for (const cJSON *e = wm->child; !rc && e; e = e->next) {
        int32_t k = 0;
        while (k < n && strcmp(names[k], e->valuestring)) k++;
        /* a name the shard does not hold stays unknown: "missing tensor" if the converter needs it */
        if (st_find(&h->files[k], e->string) && hf_add_name(h, e->string, k)) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    free(names);
    cJSON_Delete(root);
    return rc;
}

int source_hf_open(conv_source *src, const char *dir, char **err) {
    memset(src, 0, sizeof *src);
    hf_ctx *h = calloc(1, sizeof *h);
    if (!h) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    src->ctx = h;
    src->dir = dir;
    src->shape = hf_shape;
    src->read = hf_read;
    src->name_at = hf_name_at;
    char *cfg = plume_path_join(dir, "config.json");
    char *index = plume_path_join(dir, "model.safetensors.index.json");
    char *single = plume_path_join(dir, "model.safetensors");
    int rc = plume_read_file(cfg, &h->config, NULL, err);
    if (!rc) {
        if (plume_file_exists(index)) rc = read_index(h, dir, index, err);
        else if (plume_file_exists(single)) {
            h->files = calloc(1, sizeof *h->files);
            rc = h->files ? st_open(&h->files[0], single, err) : PLUME_ENOMEM;
            if (!rc) h->n_files = 1;
            for (int32_t i = 0; !rc && i < h->files[0].n; i++)
                if (strncmp(h->files[0].t[i].name, "__", 2) && hf_add_name(h, h->files[0].t[i].name, 0))
                    rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        } else {
            rc = plume_fail(err, PLUME_EIO, "%s: neither model.safetensors nor model.safetensors.index.json", dir);
        }
    }
    free(cfg);
    free(index);
    free(single);
    src->config_json = h->config;
    if (rc) source_hf_close(src);
    return rc;
}

void source_hf_close(conv_source *src) {
    hf_ctx *h = src->ctx;
    if (!h) return;
    for (int32_t i = 0; i < h->n_files; i++) st_close(&h->files[i]);
    free(h->files);
    for (int32_t i = 0; i < h->n_names; i++) free(h->names[i]);
    free(h->names);
    free(h->name_file);
    free(h->config);
    free(h->buf);
    free(h);
    src->ctx = NULL;
}
