/* npy.c -- NumPy .npy v1/v2/v3 reader (untrusted bytes, every length checked) and v1 writer. */
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>

/* Find "'key':" in the header dict h[0..n) and return its value (the first byte after the
 * colon and spaces), or NULL when the key is absent or the header ends before a value. */
static const char *dict_find(const char *h, size_t n, const char *key) {
    size_t k = strlen(key);
    for (size_t i = 0; i + k + 3 <= n; i++)
        if (h[i] == '\'' && !memcmp(h + i + 1, key, k) && h[i + 1 + k] == '\'') {
            const char *p = h + i + k + 2;
            while (p < h + n && (*p == ':' || *p == ' ')) p++;
            return p < h + n ? p : NULL;
        }
    return NULL;
}

int npy_parse(const uint8_t *buf, size_t len, const char *name, npy_view *v, char **err) {
    memset(v, 0, sizeof *v);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
        return plume_fail(err, PLUME_EFORMAT, "%s: not an .npy file (bad magic)", name);
    int major = buf[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return plume_fail(err, PLUME_EFORMAT, "%s: truncated .npy header", name);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        hstart = 12;
    } else {
        return plume_fail(err, PLUME_EFORMAT, "%s: unsupported .npy version %d", name, major);
    }
    if (hlen > len - hstart) return plume_fail(err, PLUME_EFORMAT, "%s: truncated .npy header", name);
    const char *h = (const char *)buf + hstart;
    const char *d = dict_find(h, hlen, "descr");
    const char *fo = dict_find(h, hlen, "fortran_order");
    const char *sh = dict_find(h, hlen, "shape");
    if (!d || !fo || !sh) return plume_fail(err, PLUME_EFORMAT, "%s: .npy header lacks a key", name);
    const char *hend = h + hlen;
    if (hend - d < 5 || d[0] != '\'' || (d[1] != '<' && d[1] != '|') || !d[2] || !strchr("fibu", d[2]) || d[3] < '1' ||
        d[3] > '8' || d[4] != '\'')
        return plume_fail(err, PLUME_EFORMAT, "%s: unsupported .npy dtype (want little-endian f2/f4/f8/i4, b1 or u1)", name);
    v->kind = d[2];
    v->itemsize = d[3] - '0';
    if (v->kind == 'b' || v->kind == 'u' ? v->itemsize != 1
                                         : !(v->itemsize == 2 || v->itemsize == 4 || v->itemsize == 8) ||
                                               (v->kind == 'i' && v->itemsize != 4))
        return plume_fail(err, PLUME_EFORMAT, "%s: unsupported .npy dtype", name);
    if (hend - fo < 5 || memcmp(fo, "False", 5))
        return plume_fail(err, PLUME_EFORMAT, "%s: Fortran-order .npy is not supported", name);
    if (*sh != '(') return plume_fail(err, PLUME_EFORMAT, "%s: bad .npy shape", name);
    const char *p = sh + 1;
    int64_t count = 1;
    while (p < hend && *p != ')') {
        while (p < hend && (*p == ' ' || *p == ',')) p++;
        if (p < hend && *p == ')') break;
        if (p >= hend || *p < '0' || *p > '9' || v->ndim == 8)
            return plume_fail(err, PLUME_EFORMAT, "%s: bad .npy shape", name);
        int64_t dim = 0;
        while (p < hend && *p >= '0' && *p <= '9') {
            if (dim > (INT64_MAX - 9) / 10) return plume_fail(err, PLUME_EFORMAT, "%s: .npy shape too large", name);
            dim = dim * 10 + (*p++ - '0');
        }
        if (dim > 0 && count > INT64_MAX / 8 / dim)
            return plume_fail(err, PLUME_EFORMAT, "%s: .npy shape too large", name);
        count *= dim;
        v->shape[v->ndim++] = dim;
    }
    if (p >= hend) return plume_fail(err, PLUME_EFORMAT, "%s: bad .npy shape", name);
    v->count = count;
    size_t data_at = hstart + hlen;
    if ((uint64_t)count * (uint64_t)v->itemsize > len - data_at)
        return plume_fail(err, PLUME_EFORMAT, "%s: truncated .npy data (%lld elements expected)", name,
                          (long long)count);
    v->data = buf + data_at;
    return 0;
}

int npy_open(const char *path, plume_map *m, npy_view *v, char **err) {
    int rc = plume_map_open(m, path, err);
    if (rc) return rc;
    rc = npy_parse(m->data, m->size, path, v, err);
    if (rc) plume_map_free(m);
    return rc;
}

void npy_to_f32(const npy_view *v, float *out) {
    for (int64_t i = 0; i < v->count; i++) {
        const uint8_t *b = v->data + i * v->itemsize;
        if (v->itemsize == 1) { /* b1 (0 or 1) and u1 */
            out[i] = (float)b[0];
        } else if (v->kind == 'i') {
            int32_t x;
            memcpy(&x, b, 4);
            out[i] = (float)x;
        } else if (v->itemsize == 2) {
            uint16_t x;
            memcpy(&x, b, 2);
            out[i] = plume_f16_to_f32(x);
        } else if (v->itemsize == 4) {
            memcpy(&out[i], b, 4);
        } else {
            double x;
            memcpy(&x, b, 8);
            out[i] = (float)x;
        }
    }
}

int npy_write(const char *path, const char *descr, const int64_t *shape, int32_t ndim,
              const void *data, char **err) {
    char dict[256], shp[160] = "";
    int64_t count = 1;
    for (int32_t i = 0; i < ndim; i++) {
        size_t o = strlen(shp);
        snprintf(shp + o, sizeof shp - o, "%lld,%s", (long long)shape[i], i + 1 < ndim ? " " : "");
        count *= shape[i];
    }
    if (ndim > 1) shp[strlen(shp) - 1] = 0; /* (a, b) but (a,) */
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shp);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)n + pad + 1;
    size_t item = (size_t)(descr[2] - '0'); /* "<f4" -> 4, "|u1" -> 1 */
    size_t bytes = 10 + hlen + (size_t)count * item;
    uint8_t *buf = malloc(bytes);
    if (!buf) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(hlen & 0xff);
    buf[9] = (uint8_t)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    memcpy(buf + 10 + hlen, data, (size_t)count * item);
    int rc = plume_write_file(path, buf, bytes, 0, err);
    free(buf);
    return rc;
}
