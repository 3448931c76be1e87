/* npy.h -- NumPy .npy files: a bounded reader over mapped bytes and a writer. */
#ifndef PLUME_NPY_H
#define PLUME_NPY_H

#include "common.h"

/* A view of an .npy array. */
typedef struct {
    char kind;          /* 'f' float, 'i' signed int, 'b' bool, 'u' uint8 */
    int32_t itemsize;   /* bytes per element: 2, 4 or 8 (f, i); 1 (b, u) */
    int32_t ndim;
    int64_t shape[8];
    int64_t count;      /* elements */
    const uint8_t *data;
} npy_view;

/* Parse an .npy held in buf[len] (little-endian, C order only); name is for messages. */
int npy_parse(const uint8_t *buf, size_t len, const char *name, npy_view *v, char **err);
/* Map path and parse it; free m with plume_map_free. */
int npy_open(const char *path, plume_map *m, npy_view *v, char **err);
/* Copy a view's elements into floats (f2, f4, f8, i4, b1, u1 sources); out holds v->count. */
void npy_to_f32(const npy_view *v, float *out);
/* Write an array; descr is "<f4", "<f2", "<i4" or "|u1"; crash-safe. */
int npy_write(const char *path, const char *descr, const int64_t *shape, int32_t ndim,
              const void *data, char **err);

#endif
