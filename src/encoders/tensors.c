/* tensors.c -- a tower's safetensors file as float32 views (encoders.h).
 *
 * The bundle's tower files hold float32 (viewed in place, no copy); the tests and the
 * converter also read a Hugging Face checkpoint directly, whose towers are BF16: those tensors
 * are converted into copies once, at open. The header was checked by st_open (offsets inside
 * the file, no overlaps, shapes that agree with sizes); this file checks names, dtypes and
 * shapes against what the tower expects. */
#include <stdio.h>
#include <stdlib.h>

#include "encoders.h"

int enc_tensors_open(enc_tensors *ts, const char *path, char **err) {
    memset(ts, 0, sizeof *ts);
    int rc = st_open(&ts->st, path, err);
    if (rc) return rc;
    rc = plume_map_open_dense(&ts->map, path, err);
    if (!rc && ts->map.size != ts->st.file_size)
        rc = plume_fail(err, PLUME_EFORMAT, "%s: changed while it was being opened", path);
    if (rc) enc_tensors_free(ts);
    return rc;
}

void enc_tensors_free(enc_tensors *ts) {
    if (!ts) return;
    for (int32_t i = 0; i < ts->n_owned; i++) free(ts->owned[i]);
    free(ts->owned);
    plume_map_free(&ts->map);
    st_close(&ts->st);
    memset(ts, 0, sizeof *ts);
}

/* Keep a converted copy until enc_tensors_free; PLUME_ENOMEM (p freed) when the list cannot grow. */
static int keep(enc_tensors *ts, float *p) {
    if (ts->n_owned == ts->cap_owned) {
        int32_t cap = ts->cap_owned ? 2 * ts->cap_owned : 64;
        float **o = realloc(ts->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(p);
            return PLUME_ENOMEM;
        }
        ts->owned = o;
        ts->cap_owned = cap;
    }
    ts->owned[ts->n_owned++] = p;
    return 0;
}

/* "[a, b, c]" of a shape, into out[cap]. */
static void shape_str(char *out, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(out, cap, "[");
    for (int32_t i = 0; i < ndim && o < cap; i++) o += (size_t)snprintf(out + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(out + o, cap - o, "]");
}

/* The float32 values of t: in place or a converted copy. */
static int tensor_f32(enc_tensors *ts, const st_tensor *t, const float **out, char **err) {
    const uint8_t *p = ts->map.data + t->offset;
    if (t->dtype == ST_F32 && (uintptr_t)p % sizeof(float) == 0) {
        *out = (const float *)p;
        return 0;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s is %s; a tower's tensors are F32, BF16 or F16", ts->st.path,
                          t->name, st_dtype_name(t->dtype));
    float *f = malloc((size_t)(t->count ? t->count : 1) * sizeof(float));
    if (!f) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory for %s", ts->st.path, t->name);
    for (int64_t i = 0; i < t->count; i++) {
        if (t->dtype == ST_F32) {
            memcpy(&f[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = t->dtype == ST_BF16 ? plume_bf16_to_f32(h) : plume_f16_to_f32(h);
        }
    }
    if (keep(ts, f)) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", ts->st.path);
    *out = f;
    return 0;
}

int enc_tensors_get(enc_tensors *ts, const char *name, int32_t ndim, const int64_t *shape, const float **out,
                    char **err) {
    const st_tensor *t = st_find(&ts->st, name);
    if (!t) return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s is missing", ts->st.path, name);
    int ok = ndim == 0 ? t->count == 1 && t->ndim <= 1 : t->ndim == ndim;
    for (int32_t i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[96], have[96];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(have, sizeof have, t->ndim, t->shape);
        return plume_fail(err, PLUME_EFORMAT, "%s: tensor %s has shape %s, want %s", ts->st.path, name, have, want);
    }
    return tensor_f32(ts, t, out, err);
}

int enc_tensors_scalar(enc_tensors *ts, const char *name, float *v, char **err) {
    if (!st_find(&ts->st, name)) return 0;
    const float *p = NULL;
    int rc = enc_tensors_get(ts, name, 0, NULL, &p, err);
    if (!rc) *v = *p;
    return rc;
}
