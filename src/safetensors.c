/* safetensors.c -- parse safetensors headers as untrusted input; write aligned files.
 * The parser never trusts a length or offset from the file: every one is checked against the
 * file size and against the shape it claims. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) /* safetensors' own limit is 100 MB */

static const struct {
    const char *name;
    int32_t size;
} dtypes[ST_NDTYPES] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I8", 1}, {"U8", 1},
                        {"I32", 4}, {"F64", 8}, {"I64", 8}, {"BOOL", 1}};

int32_t st_dtype_size(st_dtype d) { return dtypes[d].size; }
const char *st_dtype_name(st_dtype d) { return dtypes[d].name; }

/* dtype from its name, or -1. */
static int dtype_of(const char *s) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (!strcmp(s, dtypes[i].name)) return i;
    return -1;
}

int st_pread(const char *path, uint64_t off, void *buf, size_t n, char **err) {
    int fd = plume_open_regular(path, err);
    if (fd < 0) return PLUME_EIO;
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            close(fd);
            return plume_fail(err, PLUME_EIO, "%s: short read at offset %llu", path, (unsigned long long)off);
        }
        p += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    close(fd);
    return 0;
}

/* Sort helper: tensors by offset. */
static int by_offset(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Fill one entry from its JSON object; errors name the tensor. */
static int parse_entry(st_file *f, const cJSON *e, st_tensor *t, uint64_t data_size, char **err) {
    const char *path = f->path;
    if (!cJSON_IsObject(e)) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: entry is not an object", path, t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: needs dtype, shape and data_offsets", path, t->name);
    int d = dtype_of(dt->valuestring);
    if (d < 0) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: unknown dtype %s", path, t->name, dt->valuestring);
    t->dtype = (st_dtype)d;
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > 8) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: too many dimensions", path, t->name);
    uint64_t count = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        const cJSON *x = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9.0e15 ||
            x->valuedouble != (double)(int64_t)x->valuedouble)
            return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: bad shape", path, t->name);
        t->shape[i] = (int64_t)x->valuedouble;
        if (t->shape[i] && count > (UINT64_MAX / 8) / (uint64_t)t->shape[i])
            return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: shape too large", path, t->name);
        count *= (uint64_t)t->shape[i];
    }
    t->count = (int64_t)count;
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e2 = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(of, 1)) || b < 0 ||
        e2 < b || e2 > 9.0e15 || b != (double)(uint64_t)b || e2 != (double)(uint64_t)e2)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: bad data_offsets", path, t->name);
    uint64_t ub = (uint64_t)b, ue = (uint64_t)e2;
    if (ue > data_size)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: data runs past the end of the file (truncated?)", path, t->name);
    t->nbytes = ue - ub;
    if (t->nbytes != count * (uint64_t)dtypes[d].size)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: data_offsets span %llu bytes, shape needs %llu", path,
                          t->name, (unsigned long long)t->nbytes, (unsigned long long)(count * (uint64_t)dtypes[d].size));
    t->offset = f->data_start + ub;
    return 0;
}

/* qsort order of key pointers: by the key's bytes. */
static int by_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Refuse an object with a key twice (cJSON keeps both): a second "__metadata__" or a tensor
 * named twice would otherwise be counted twice. 0, PLUME_EFORMAT naming the key, or
 * PLUME_ENOMEM. */
static int st_check_unique(const cJSON *obj, const char *path, const char *what, char **err) {
    int32_t n = cJSON_GetArraySize(obj), i = 0;
    const char **keys = malloc(((size_t)n + 1) * sizeof *keys);
    if (!keys) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    for (const cJSON *e = obj->child; e && i < n; e = e->next) keys[i++] = e->string ? e->string : "";
    qsort(keys, (size_t)i, sizeof *keys, by_key);
    int rc = 0;
    for (int32_t k = 1; k < i && !rc; k++)
        if (!strcmp(keys[k - 1], keys[k]))
            rc = plume_fail(err, PLUME_EFORMAT, "%s: %s has the key \"%s\" twice", path, what, keys[k]);
    free(keys);
    return rc;
}

/* The JSON header of the file at path: its length (the u64 that opens the file, checked
 * against the file size), then its text into *hdr (malloc'd, NUL-terminated); sets
 * f->file_size and f->data_start. */
static int st_read_header(st_file *f, const char *path, char **hdr, char **err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return plume_fail(err, PLUME_EIO, "%s: cannot open: %s", path, strerror(errno));
    f->file_size = (uint64_t)sb.st_size;
    if (f->file_size < 8)
        return plume_fail(err, PLUME_EFORMAT, "%s: shorter than 8 bytes (truncated safetensors)", path);
    uint8_t lenb[8];
    int rc = st_pread(path, 0, lenb, 8, err);
    if (rc) return rc;
    uint64_t hlen = plume_rd_u64le(lenb);
    if (hlen > f->file_size - 8 || hlen > ST_MAX_HEADER || hlen < 2)
        return plume_fail(err, PLUME_EFORMAT, "%s: header length %llu does not fit the file (%llu bytes)", path,
                          (unsigned long long)hlen, (unsigned long long)f->file_size);
    *hdr = malloc(hlen + 1);
    if (!*hdr) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    if ((rc = st_pread(path, 8, *hdr, hlen, err))) return rc;
    (*hdr)[hlen] = 0;
    f->data_start = 8 + hlen;
    return 0;
}

/* The __metadata__ object e: string values only, each key once, copied into f->meta. */
static int st_read_meta(st_file *f, const cJSON *e, const char *path, char **err) {
    if (!cJSON_IsObject(e)) return plume_fail(err, PLUME_EFORMAT, "%s: __metadata__ is not an object", path);
    int rc = st_check_unique(e, path, "__metadata__", err);
    if (rc) return rc;
    f->meta = calloc((size_t)cJSON_GetArraySize(e) * 2 + 1, sizeof *f->meta);
    if (!f->meta) return PLUME_ENOMEM;
    for (const cJSON *m = e->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return plume_fail(err, PLUME_EFORMAT, "%s: __metadata__ value of %s is not a string", path, m->string);
        f->meta[2 * f->n_meta] = strdup(m->string);
        f->meta[2 * f->n_meta + 1] = strdup(m->valuestring);
        f->n_meta++;
        if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1]) return PLUME_ENOMEM;
    }
    return 0;
}

/* Refuse tensors whose bytes overlap (sorted by offset, each must end before the next). */
static int st_check_overlap(const st_file *f, const char *path, char **err) {
    const st_tensor **sorted = calloc((size_t)f->n + 1, sizeof *sorted);
    if (!sorted) return PLUME_ENOMEM;
    for (int32_t i = 0; i < f->n; i++) sorted[i] = &f->t[i];
    qsort(sorted, (size_t)f->n, sizeof *sorted, by_offset);
    int rc = 0;
    for (int32_t i = 1; i < f->n && !rc; i++)
        if (sorted[i]->offset < sorted[i - 1]->offset + sorted[i - 1]->nbytes)
            rc = plume_fail(err, PLUME_EFORMAT, "%s: tensors %s and %s overlap", path, sorted[i - 1]->name, sorted[i]->name);
    free(sorted);
    return rc;
}

int st_open(st_file *f, const char *path, char **err) {
    memset(f, 0, sizeof *f);
    int rc = PLUME_ENOMEM;
    cJSON *root = NULL;
    char *hdr = NULL;
    f->path = strdup(path);
    if (!f->path) goto fail;
    if ((rc = st_read_header(f, path, &hdr, err))) goto fail;
    root = cJSON_ParseWithLength(hdr, f->data_start - 8);
    if (!cJSON_IsObject(root)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }
    if ((rc = st_check_unique(root, path, "the header", err))) goto fail;
    f->t = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof *f->t);
    if (!f->t) { rc = PLUME_ENOMEM; goto fail; }
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if ((rc = st_read_meta(f, e, path, err))) goto fail;
            continue;
        }
        st_tensor *t = &f->t[f->n++];
        t->name = strdup(e->string);
        if (!t->name) { rc = PLUME_ENOMEM; goto fail; }
        if ((rc = parse_entry(f, e, t, f->file_size - f->data_start, err))) goto fail;
    }
    if ((rc = st_check_overlap(f, path, err))) goto fail;
    free(hdr);
    cJSON_Delete(root);
    return 0;
fail:
    if (rc == PLUME_ENOMEM) plume_fail(err, rc, "%s: out of memory", path);
    free(hdr);
    cJSON_Delete(root);
    st_close(f);
    return rc;
}

void st_close(st_file *f) {
    if (!f) return;
    for (int32_t i = 0; i < f->n; i++) free(f->t[i].name);
    for (int32_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->t);
    free(f->meta);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int32_t i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    for (int32_t i = 0; i < f->n_meta; i++)
        if (f->meta[2 * i] && !strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
    return NULL;
}

/* ---- writer ---------------------------------------------------------------------------- */

int st_writer_init(st_writer *w, const char *path, uint32_t align, char **err) {
    memset(w, 0, sizeof *w);
    w->align = align ? align : 1;
    w->f.fd = -1;
    if (!(w->path = strdup(path))) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    return 0;
}

/* Append a planned entry (no alignment logic). */
static int plan(st_writer *w, const char *name, st_dtype dtype, int32_t ndim, const int64_t *shape, char **err) {
    if (plume_grow(&w->t, &w->cap, (size_t)w->n + 1, sizeof *w->t))
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    uint64_t count = 1;
    for (int32_t i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        count *= (uint64_t)shape[i];
    }
    t->nbytes = count * (uint64_t)st_dtype_size(dtype);
    t->rel = w->pos;
    w->pos += t->nbytes;
    w->n++;
    return 0;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int32_t ndim, const int64_t *shape, char **err) {
    if (ndim > 4) return plume_fail(err, PLUME_EINVAL, "%s: tensor %s has too many dimensions", w->path, name);
    uint64_t mis = w->pos % w->align;
    if (mis) { /* a padding tensor keeps the byte buffer free of holes */
        char pad[32];
        int64_t n = (int64_t)(w->align - mis);
        snprintf(pad, sizeof pad, "__pad.%d", w->n);
        int rc = plan(w, pad, ST_U8, 1, &n, err);
        if (rc) return rc;
    }
    return plan(w, name, dtype, ndim, shape, err);
}

int st_writer_meta(st_writer *w, const char *key, const char *value, char **err) {
    if (w->n_meta >= 32) return plume_fail(err, PLUME_EINVAL, "%s: too many metadata keys", w->path);
    w->meta[2 * w->n_meta] = strdup(key);
    w->meta[2 * w->n_meta + 1] = strdup(value);
    w->n_meta++;
    return 0;
}

/* Write zero bytes for padding tensors at the cursor. */
static int skip_padding(st_writer *w, char **err) {
    static const uint8_t zeros[64];
    while (w->next < w->n && !strncmp(w->t[w->next].name, "__pad.", 6)) {
        int rc = plume_wfile_write(&w->f, zeros, w->t[w->next].nbytes, err);
        if (rc) return rc;
        w->next++;
    }
    return 0;
}

int st_writer_begin(st_writer *w, char **err) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (w->n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int32_t i = 0; i < w->n_meta; i++) cJSON_AddStringToObject(m, w->meta[2 * i], w->meta[2 * i + 1]);
    }
    for (int32_t i = 0; i < w->n; i++) {
        const st_wtensor *t = &w->t[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int32_t k = 0; k < t->ndim; k++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[k]));
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)t->rel));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(t->rel + t->nbytes)));
    }
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!js) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    size_t n = strlen(js);
    size_t hlen = n;
    while ((8 + hlen) % w->align) hlen++; /* space padding: the data start is aligned too */
    int rc = plume_wfile_open(&w->f, w->path, PLUME_WRITE_REPLACE, err);
    if (rc) {
        free(js);
        return rc;
    }
    w->open = 1;
    uint8_t lenb[8];
    plume_wr_u64le(lenb, hlen);
    rc = plume_wfile_write(&w->f, lenb, 8, err);
    if (!rc) rc = plume_wfile_write(&w->f, js, n, err);
    for (size_t i = n; !rc && i < hlen; i++) rc = plume_wfile_write(&w->f, " ", 1, err);
    free(js);
    if (rc) return rc;
    w->next = 0;
    w->written = 0;
    return skip_padding(w, err);
}

int st_writer_write(st_writer *w, const void *data, size_t n, char **err) {
    const uint8_t *p = data;
    while (n > 0) {
        if (w->next >= w->n) return plume_fail(err, PLUME_EINVAL, "%s: more bytes than the planned tensors hold", w->path);
        const st_wtensor *t = &w->t[w->next];
        size_t take = (size_t)(t->nbytes - w->written) < n ? (size_t)(t->nbytes - w->written) : n;
        int rc = take ? plume_wfile_write(&w->f, p, take, err) : 0;
        if (rc) return rc;
        p += take;
        n -= take;
        w->written += take;
        if (w->written == t->nbytes) {
            w->next++;
            w->written = 0;
            if ((rc = skip_padding(w, err))) return rc;
        }
    }
    return 0;
}

int st_writer_finish(st_writer *w, char **err) {
    if (w->next != w->n || !w->open)
        return plume_fail(err, PLUME_EINVAL, "%s: tensor %s was not written", w->path,
                          w->next < w->n ? w->t[w->next].name : "?");
    w->open = 0;
    return plume_wfile_commit(&w->f, err);
}

void st_writer_free(st_writer *w) {
    if (!w) return;
    if (w->open) plume_wfile_abort(&w->f);
    free(w->path);
    for (int32_t i = 0; i < w->n; i++) free(w->t[i].name);
    for (int32_t i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    free(w->t);
    memset(w, 0, sizeof *w);
}
