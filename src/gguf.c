/* gguf.c -- the bounded GGUF reader of gguf.h: nothing is trusted, every length and count is
 * checked against the bytes left before it is used, tensors must lie inside the file, be
 * aligned and not overlap; dequantization of the block formats plume imports. */
#include "gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ENTRIES (1 << 22) /* tensors or metadata entries: E4B has ~700 tensors */
#define GGUF_MAX_NAME 4096         /* a key or a tensor name */

/* ---- the cursor ------------------------------------------------------------------------ */

/* Bytes of the file still to parse. */
typedef struct {
    const uint8_t *p;
    uint64_t left;
    const char *path;
} cur;

/* Take n bytes (a pointer to them), or fail naming what was being read. */
static int take(cur *c, uint64_t n, const uint8_t **out, const char *what, char **err) {
    if (n > c->left) return plume_fail(err, PLUME_EFORMAT, "%s: truncated GGUF (%s runs past the end of the file)", c->path, what);
    *out = c->p;
    c->p += n;
    c->left -= n;
    return 0;
}

/* A little-endian u32 / u64. */
static int take_u32(cur *c, uint32_t *v, const char *what, char **err) {
    const uint8_t *b = NULL;
    if (take(c, 4, &b, what, err)) return PLUME_EFORMAT;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}
static int take_u64(cur *c, uint64_t *v, const char *what, char **err) {
    const uint8_t *b = NULL;
    if (take(c, 8, &b, what, err)) return PLUME_EFORMAT;
    *v = plume_rd_u64le(b);
    return 0;
}

/* A GGUF string (u64 length + bytes): its bytes and length. */
static int take_str(cur *c, const uint8_t **s, uint64_t *len, const char *what, char **err) {
    if (take_u64(c, len, what, err)) return PLUME_EFORMAT;
    return take(c, *len, s, what, err);
}

/* ---- types ------------------------------------------------------------------------------ */

/* Bytes of a scalar metadata type; 0 for strings, arrays and unknown types. */
static uint64_t kv_scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Elements per block and bytes per block of a ggml type; 0 if plume does not read it. */
static int type_block(uint32_t t, int64_t *elems, int64_t *bytes) {
    switch (t) {
    case GGML_F32: *elems = 1, *bytes = 4; return 1;
    case GGML_F16: case GGML_BF16: *elems = 1, *bytes = 2; return 1;
    case GGML_Q4_0: *elems = 32, *bytes = 18; return 1;
    case GGML_Q4_1: *elems = 32, *bytes = 20; return 1;
    case GGML_Q5_0: *elems = 32, *bytes = 22; return 1;
    case GGML_Q5_1: *elems = 32, *bytes = 24; return 1;
    case GGML_Q8_0: *elems = 32, *bytes = 34; return 1;
    case GGML_Q4_K: *elems = 256, *bytes = 144; return 1;
    case GGML_Q5_K: *elems = 256, *bytes = 176; return 1;
    case GGML_Q6_K: *elems = 256, *bytes = 210; return 1;
    default: return 0;
    }
}

const char *gguf_type_name(uint32_t t) {
    static const char *const names[] = {"F32", "F16", "Q4_0", "Q4_1", "?", "?", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",
                                        "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
                                        "I32", "I64", "F64", "IQ1_M", "BF16"};
    return t < sizeof names / sizeof *names ? names[t] : "?";
}

int gguf_type_exact(uint32_t t) {
    return t == GGML_F32 || t == GGML_F16 || t == GGML_BF16 || t == GGML_Q4_0;
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* A NUL-terminated copy of a key or name (refused if empty, too long or holding a NUL). */
static int copy_name(const cur *c, const uint8_t *s, uint64_t len, char **out, const char *what, char **err) {
    if (len == 0 || len > GGUF_MAX_NAME || memchr(s, 0, (size_t)len))
        return plume_fail(err, PLUME_EFORMAT, "%s: bad %s (empty, over %d bytes or holding a NUL)", c->path, what,
                          GGUF_MAX_NAME);
    if (!(*out = malloc((size_t)len + 1))) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    memcpy(*out, s, (size_t)len);
    (*out)[len] = 0;
    return 0;
}

/* One metadata value of type t into kv (arrays of arrays are refused). */
static int parse_value(cur *c, gguf_kv *kv, char **err) {
    const uint8_t *b = NULL;
    uint64_t sz = kv_scalar_size(kv->type);
    kv->n = 1;
    if (sz) { kv->size = sz; return take(c, sz, &kv->val, kv->key, err); }
    if (kv->type == GGUF_STRING) {
        uint64_t len;
        if (take_str(c, &kv->val, &len, kv->key, err)) return PLUME_EFORMAT;
        kv->val -= 8; /* val points at the length: gguf_get_str reads it */
        kv->size = len + 8;
        return 0;
    }
    if (kv->type != GGUF_ARRAY)
        return plume_fail(err, PLUME_EFORMAT, "%s: metadata %s has an unknown type %u", c->path, kv->key, kv->type);
    if (take_u32(c, &kv->arr_type, kv->key, err) || take_u64(c, &kv->n, kv->key, err)) return PLUME_EFORMAT;
    sz = kv_scalar_size(kv->arr_type);
    if (sz) {
        if (kv->n > c->left / sz)
            return plume_fail(err, PLUME_EFORMAT, "%s: metadata %s: %llu elements run past the end of the file",
                              c->path, kv->key, (unsigned long long)kv->n);
        kv->size = kv->n * sz;
        return take(c, kv->size, &kv->val, kv->key, err);
    }
    if (kv->arr_type != GGUF_STRING)
        return plume_fail(err, PLUME_EFORMAT, "%s: metadata %s is an array of type %u (not read)", c->path, kv->key,
                          kv->arr_type);
    if (kv->n > c->left / 8)
        return plume_fail(err, PLUME_EFORMAT, "%s: metadata %s: %llu strings run past the end of the file", c->path,
                          kv->key, (unsigned long long)kv->n);
    kv->val = c->p;
    const uint64_t before = c->left;
    for (uint64_t i = 0; i < kv->n; i++) {
        uint64_t len;
        if (take_str(c, &b, &len, kv->key, err)) return PLUME_EFORMAT;
    }
    kv->size = before - c->left;
    return 0;
}

/* One tensor's entry into t (data resolved later, once the data start is known). */
static int parse_tensor(cur *c, gguf_tensor *t, uint64_t *offset, char **err) {
    const uint8_t *s;
    uint64_t len;
    uint32_t nd;
    if (take_str(c, &s, &len, "a tensor name", err) || copy_name(c, s, len, (char **)&t->name, "tensor name", err))
        return PLUME_EFORMAT;
    if (take_u32(c, &nd, t->name, err)) return PLUME_EFORMAT;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has %u dimensions (1 to %d)", c->path, t->name, nd,
                          GGUF_MAX_DIMS);
    t->ndim = (int32_t)nd;
    t->rows = 1;
    for (int32_t i = 0; i < GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    for (int32_t i = 0; i < (int32_t)nd; i++) {
        uint64_t ne;
        if (take_u64(c, &ne, t->name, err)) return PLUME_EFORMAT;
        if (ne < 1 || ne > ((uint64_t)1 << 40))
            return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has a dimension of %llu", c->path, t->name,
                              (unsigned long long)ne);
        t->ne[i] = (int64_t)ne;
        if (i > 0) {
            if (t->rows > ((int64_t)1 << 40) / t->ne[i])
                return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s is too large", c->path, t->name);
            t->rows *= t->ne[i];
        }
    }
    if (take_u32(c, &t->type, t->name, err) || take_u64(c, offset, t->name, err)) return PLUME_EFORMAT;
    int64_t be, bb;
    if (!type_block(t->type, &be, &bb))
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has type %s (%u), which plume does not read", c->path,
                          t->name, gguf_type_name(t->type), t->type);
    if (t->ne[0] % be)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: a row of %lld is not whole %s blocks of %lld", c->path,
                          t->name, (long long)t->ne[0], gguf_type_name(t->type), (long long)be);
    const uint64_t row_bytes = (uint64_t)(t->ne[0] / be) * (uint64_t)bb; /* <= 2^40 * 4 */
    if ((uint64_t)t->rows > (UINT64_MAX / 2) / row_bytes)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s is too large", c->path, t->name);
    t->nbytes = row_bytes * (uint64_t)t->rows;
    return 0;
}

/* qsort order of tensor indices by their data pointer. */
static const gguf_tensor *sort_base;
static int by_data(const void *a, const void *b) {
    const uint8_t *x = sort_base[*(const int64_t *)a].data, *y = sort_base[*(const int64_t *)b].data;
    return x < y ? -1 : x > y;
}

/* Tensors inside the file, aligned, not overlapping; names unique. */
static int check_layout(gguf_file *f, const uint64_t *offs, uint64_t data_start, char **err) {
    const uint64_t size = f->map.size;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->t[i];
        if (offs[i] % f->alignment)
            return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s: offset %llu is not a multiple of the alignment %u",
                              f->path, t->name, (unsigned long long)offs[i], f->alignment);
        if (offs[i] > size - data_start || t->nbytes > size - data_start - offs[i])
            return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s (%llu bytes at %llu) runs past the end of the file",
                              f->path, t->name, (unsigned long long)t->nbytes, (unsigned long long)offs[i]);
        t->data = f->map.data + data_start + offs[i];
    }
    int64_t *ix = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *ix);
    if (!ix) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (int64_t i = 0; i < f->n_tensors; i++) ix[i] = i;
    sort_base = f->t;
    qsort(ix, (size_t)f->n_tensors, sizeof *ix, by_data);
    int rc = 0;
    for (int64_t i = 1; !rc && i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->t[ix[i - 1]], *b = &f->t[ix[i]];
        if (a->data + a->nbytes > b->data)
            rc = plume_fail(err, PLUME_EFORMAT, "%s: tensors %s and %s overlap", f->path, a->name, b->name);
    }
    free(ix);
    for (int64_t i = 0; !rc && i < f->n_tensors; i++) /* names unique (E4B: ~700, quadratic is fine) */
        for (int64_t j = 0; !rc && j < i; j++)
            if (!strcmp(f->t[i].name, f->t[j].name))
                rc = plume_fail(err, PLUME_EFORMAT, "%s: tensor %s appears twice", f->path, f->t[i].name);
    return rc;
}

/* Parse the whole header (f->map set). */
static int parse(gguf_file *f, char **err) {
    cur c = {f->map.data, f->map.size, f->path};
    const uint8_t *magic = NULL;
    uint64_t nt, nkv;
    if (f->map.size < 4 || memcmp(f->map.data, "GGUF", 4))
        return plume_fail(err, PLUME_EFORMAT, "%s: not a GGUF file (bad magic)", f->path);
    take(&c, 4, &magic, "magic", err);
    if (take_u32(&c, &f->version, "the version", err) || take_u64(&c, &nt, "the tensor count", err) ||
        take_u64(&c, &nkv, "the metadata count", err))
        return PLUME_EFORMAT;
    if (f->version != 2 && f->version != 3)
        return plume_fail(err, PLUME_EFORMAT, "%s: GGUF version %u (plume reads 2 and 3)", f->path, f->version);
    /* an entry takes at least 14 bytes (metadata) or 29 (tensor): bound the counts by the file */
    if (nkv > GGUF_MAX_ENTRIES || nkv > c.left / 14 || nt > GGUF_MAX_ENTRIES || nt > c.left / 29)
        return plume_fail(err, PLUME_EFORMAT, "%s: %llu tensors and %llu metadata entries cannot fit in the file",
                          f->path, (unsigned long long)nt, (unsigned long long)nkv);
    f->kv = calloc((size_t)nkv + 1, sizeof *f->kv);
    f->t = calloc((size_t)nt + 1, sizeof *f->t);
    uint64_t *offs = malloc(((size_t)nt + 1) * sizeof *offs);
    if (!f->kv || !f->t || !offs) { free(offs); return plume_fail(err, PLUME_ENOMEM, "out of memory"); }
    int rc = 0;
    f->alignment = 32;
    for (uint64_t i = 0; !rc && i < nkv; i++) {
        gguf_kv *kv = &f->kv[i];
        const uint8_t *s;
        uint64_t len;
        rc = take_str(&c, &s, &len, "a metadata key", err) || copy_name(&c, s, len, (char **)&kv->key, "metadata key", err);
        f->n_kv = (int64_t)i + 1;
        if (!rc && gguf_find_kv(f, kv->key) != kv)
            rc = plume_fail(err, PLUME_EFORMAT, "%s: metadata %s appears twice", f->path, kv->key);
        if (!rc) rc = take_u32(&c, &kv->type, kv->key, err) || parse_value(&c, kv, err);
        if (!rc && !strcmp(kv->key, "general.alignment")) {
            int64_t a;
            if (gguf_get_int(f, "general.alignment", &a) || a < 1 || a > 65536 || (a & (a - 1)))
                rc = plume_fail(err, PLUME_EFORMAT, "%s: general.alignment must be a power of two up to 65536", f->path);
            else f->alignment = (uint32_t)a;
        }
    }
    for (uint64_t i = 0; !rc && i < nt; i++) {
        f->n_tensors = (int64_t)i + 1;
        rc = parse_tensor(&c, &f->t[i], &offs[i], err);
    }
    if (rc) { free(offs); return PLUME_EFORMAT; }
    const uint64_t pos = f->map.size - c.left, data_start = (pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && data_start > f->map.size) rc = plume_fail(err, PLUME_EFORMAT, "%s: no tensor data", f->path);
    if (!rc) rc = check_layout(f, offs, data_start, err);
    free(offs);
    return rc;
}

int gguf_is_gguf(const char *path) {
    FILE *fp = fopen(path, "rb");
    char m[4] = {0};
    int ok = fp && fread(m, 1, 4, fp) == 4 && !memcmp(m, "GGUF", 4);
    if (fp) fclose(fp);
    return ok;
}

int gguf_open(gguf_file *f, const char *path, char **err) {
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = plume_map_open(&f->map, path, err);
    if (!rc) rc = parse(f, err);
    if (rc) gguf_close(f);
    return rc;
}

void gguf_close(gguf_file *f) {
    for (int64_t i = 0; f->kv && i < f->n_kv; i++) free((char *)f->kv[i].key);
    for (int64_t i = 0; f->t && i < f->n_tensors; i++) free((char *)f->t[i].name);
    free(f->kv);
    free(f->t);
    free(f->path);
    if (f->map.data) plume_map_free(&f->map);
    memset(f, 0, sizeof *f);
}

/* ---- metadata ----------------------------------------------------------------------------- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && !strcmp(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

/* A scalar of type t at b as int64 (integers, bool) or double (floats too); -1 if not numeric. */
static int scalar(uint32_t t, const uint8_t *b, int64_t *iv, double *dv) {
    uint64_t u = 0;
    uint64_t sz = kv_scalar_size(t);
    if (!sz) return -1;
    for (uint64_t i = 0; i < sz; i++) u |= (uint64_t)b[i] << (8 * i);
    int64_t v;
    switch (t) {
    case GGUF_I8: v = (int8_t)u; break;
    case GGUF_I16: v = (int16_t)u; break;
    case GGUF_I32: v = (int32_t)u; break;
    case GGUF_I64: v = (int64_t)u; break;
    case GGUF_F32: { float x; uint32_t w = (uint32_t)u; memcpy(&x, &w, 4); if (dv) *dv = x; return iv ? -1 : 0; }
    case GGUF_F64: { double x; memcpy(&x, &u, 8); if (dv) *dv = x; return iv ? -1 : 0; }
    case GGUF_U64: if (u > INT64_MAX) return -1; v = (int64_t)u; break;
    default: v = (int64_t)u; break;
    }
    if (iv) *iv = v;
    if (dv) *dv = (double)v;
    return 0;
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *v) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type != GGUF_ARRAY ? scalar(kv->type, kv->val, v, NULL) : -1;
}

int gguf_get_float(const gguf_file *f, const char *key, double *v) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type != GGUF_ARRAY ? scalar(kv->type, kv->val, NULL, v) : -1;
}

const char *gguf_get_str(const gguf_file *f, const char *key, uint64_t *len) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_STRING) return NULL;
    *len = plume_rd_u64le(kv->val);
    return (const char *)kv->val + 8;
}

int gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *v) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->n) return -1;
    return scalar(kv->arr_type, kv->val + i * kv_scalar_size(kv->arr_type), v, NULL);
}

int gguf_arr_float(const gguf_kv *kv, uint64_t i, double *v) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->n) return -1;
    return scalar(kv->arr_type, kv->val + i * kv_scalar_size(kv->arr_type), NULL, v);
}

const char *gguf_arr_next_str(const gguf_kv *kv, uint64_t *pos, uint64_t *len) {
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || *pos + 8 > kv->size) return NULL;
    *len = plume_rd_u64le(kv->val + *pos);
    const char *s = (const char *)kv->val + *pos + 8;
    *pos += 8 + *len; /* checked at open: every string lies inside the array's bytes */
    return s;
}

/* ---- tensors ------------------------------------------------------------------------------ */

const gguf_tensor *gguf_find(const gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* An fp16 at b. */
static float h2f(const uint8_t *b) { return plume_f16_to_f32((uint16_t)(b[0] | b[1] << 8)); }

/* The 6-bit scale and min j (0..7) of a Q4_K/Q5_K block's 12 packed bytes q. */
static void k_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One block of a type (elements: 32 or 256) into y. */
static void block_f32(uint32_t type, const uint8_t *b, float *y) {
    switch (type) {
    case GGML_Q4_0: { /* d, then 16 bytes: element j in the low nibble of byte j, j + 16 in its high one */
        const float d = h2f(b);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[2 + j] & 15) - 8) * d;
            y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
        break;
    }
    case GGML_Q4_1: { /* d, min, then Q4_0's nibbles unsigned: y = q * d + min */
        const float d = h2f(b), m = h2f(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[4 + j] & 15) * d + m;
            y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
        break;
    }
    case GGML_Q5_0: case GGML_Q5_1: { /* d, [Q5_1: min], 32 high bits (bit j: element j), Q4_0's nibbles */
        const int has_min = type == GGML_Q5_1;
        const float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
        const uint8_t *qh = b + 2 + 2 * has_min, *qs = qh + 4;
        const uint32_t hi = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        const int off = has_min ? 0 : 16;
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((qs[j] & 15) | (hi >> j & 1) << 4) - off;
            const int x1 = (int)((qs[j] >> 4) | (hi >> (j + 16) & 1) << 4) - off;
            y[j] = has_min ? (float)x0 * d + m : (float)x0 * d;
            y[j + 16] = has_min ? (float)x1 * d + m : (float)x1 * d;
        }
        break;
    }
    case GGML_Q8_0: {
        const float d = h2f(b);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
        break;
    }
    case GGML_Q4_K: case GGML_Q5_K: { /* d, dmin, 12 bytes of scales/mins, [Q5_K: 32 bytes of high bits], 128 nibbles */
        const float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *q = type == GGML_Q4_K ? b + 16 : b + 48;
        for (int j = 0; j < 4; j++) { /* 64 elements: 32 low nibbles, then 32 high ones */
            int s0, m0, s1, m1;
            k_scale_min(2 * j, sc, &s0, &m0);
            k_scale_min(2 * j + 1, sc, &s1, &m1);
            for (int l = 0; l < 32; l++) {
                int lo = q[32 * j + l] & 15, hi = q[32 * j + l] >> 4;
                if (type == GGML_Q5_K) {
                    lo += (qh[l] >> (2 * j) & 1) << 4;
                    hi += (qh[l] >> (2 * j + 1) & 1) << 4;
                }
                y[64 * j + l] = d * (float)s0 * (float)lo - dmin * (float)m0;
                y[64 * j + 32 + l] = d * (float)s1 * (float)hi - dmin * (float)m1;
            }
        }
        break;
    }
    case GGML_Q6_K: { /* 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, d */
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = h2f(b + 208);
        for (int h = 0; h < 2; h++) { /* two halves of 128 */
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[64 * h + l] & 15) | ((qh[32 * h + l] >> 0 & 3) << 4)) - 32;
                const int q2 = ((ql[64 * h + l + 32] & 15) | ((qh[32 * h + l] >> 2 & 3) << 4)) - 32;
                const int q3 = ((ql[64 * h + l] >> 4) | ((qh[32 * h + l] >> 4 & 3) << 4)) - 32;
                const int q4 = ((ql[64 * h + l + 32] >> 4) | ((qh[32 * h + l] >> 6 & 3) << 4)) - 32;
                float *o = y + 128 * h;
                const int8_t *s = sc + 8 * h;
                o[l] = d * (float)s[is] * (float)q1;
                o[l + 32] = d * (float)s[is + 2] * (float)q2;
                o[l + 64] = d * (float)s[is + 4] * (float)q3;
                o[l + 96] = d * (float)s[is + 6] * (float)q4;
            }
        }
        break;
    }
    default: break;
    }
}

int gguf_read_rows(const gguf_tensor *t, int64_t r0, int64_t n, float *out, char **err) {
    if (r0 < 0 || n < 0 || r0 > t->rows - n)
        return plume_fail(err, PLUME_EINVAL, "GGUF tensor %s: rows [%lld, %lld) outside its %lld", t->name,
                          (long long)r0, (long long)(r0 + n), (long long)t->rows);
    int64_t be, bb;
    type_block(t->type, &be, &bb);
    const int64_t cols = t->ne[0], row_bytes = cols / be * bb;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *src = t->data + (r0 + r) * row_bytes;
        float *y = out + r * cols;
        if (t->type == GGML_F32) memcpy(y, src, (size_t)cols * 4);
        else if (t->type == GGML_F16) for (int64_t i = 0; i < cols; i++) y[i] = h2f(src + 2 * i);
        else if (t->type == GGML_BF16) for (int64_t i = 0; i < cols; i++) y[i] = plume_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        else for (int64_t k = 0; k < cols / be; k++) block_f32(t->type, src + k * bb, y + k * be);
    }
    return 0;
}
