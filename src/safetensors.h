/* safetensors.h -- the safetensors container: a bounded header parser, a reader that works
 * with pread (converter) or a map (runtime), and a streaming writer with 64-byte alignment.
 *
 *   [u64 le: header length N][N bytes JSON header, space padded][tensor bytes ...]
 *   header: {"name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]}, ...,
 *            "__metadata__": {"key": "value", ...}}   offsets relative to the data start.
 */
#ifndef PLUME_SAFETENSORS_H
#define PLUME_SAFETENSORS_H

#include "common.h"

typedef enum { ST_F32, ST_F16, ST_BF16, ST_I8, ST_U8, ST_I32, ST_F64, ST_I64, ST_BOOL, ST_NDTYPES } st_dtype;

/* One tensor's entry. */
typedef struct {
    char *name;
    st_dtype dtype;
    int32_t ndim;
    int64_t shape[8];
    int64_t count;   /* elements */
    uint64_t offset; /* absolute byte offset in the file */
    uint64_t nbytes;
} st_tensor;

/* A parsed file: header entries and metadata. */
typedef struct {
    char *path;
    uint64_t file_size;
    uint64_t data_start; /* 8 + header length */
    int32_t n;
    st_tensor *t;        /* [n], in header order */
    int32_t n_meta;
    char **meta;         /* [2 * n_meta]: key, value, key, value ... */
} st_file;

/* Bytes per element of a dtype. */
int32_t st_dtype_size(st_dtype d);
/* "F32", "BF16", ... */
const char *st_dtype_name(st_dtype d);

/* Read and validate the header of path (pread; tensor bytes are not read). Checks: the
 * header length, JSON, dtypes, shapes, that offsets agree with shapes, lie inside the file
 * and do not overlap. */
int st_open(st_file *f, const char *path, char **err);
void st_close(st_file *f);
/* The entry of a name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* A metadata value, or NULL. */
const char *st_meta(const st_file *f, const char *key);
/* pread n bytes at an absolute offset; errors name the file. */
int st_pread(const char *path, uint64_t off, void *buf, size_t n, char **err);

/* ---- writer ---------------------------------------------------------------------------- */

/* A planned tensor of a writer. */
typedef struct {
    char *name;
    st_dtype dtype;
    int32_t ndim;
    int64_t shape[4];
    uint64_t rel;    /* offset relative to the data start */
    uint64_t nbytes;
} st_wtensor;

typedef struct {
    char *path;       /* final path; the bytes go to a temporary file beside it until st_writer_finish */
    plume_wfile f;    /* common.h's safe writer: open between st_writer_begin and finish */
    int open;         /* f is open */
    uint32_t align;   /* 1 (plain) or 64: tensor offsets and the data start are multiples */
    st_wtensor *t;    /* [n] planned tensors (room for cap) */
    int32_t n;
    size_t cap;
    int32_t n_meta;
    char *meta[64];   /* key, value pairs */
    int32_t next;     /* next tensor to write */
    uint64_t written; /* bytes of the current tensor so far */
    uint64_t pos;     /* data bytes written */
} st_writer;

/* Start planning a file at path (a name plume owns: whatever is there is replaced, never
 * followed, PLUME_WRITE_REPLACE); align is 1 or 64. */
int st_writer_init(st_writer *w, const char *path, uint32_t align, char **err);
/* Plan one tensor (all tensors are planned before the first write, in write order). */
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int32_t ndim,
                  const int64_t *shape, char **err);
/* Add a metadata key/value. */
int st_writer_meta(st_writer *w, const char *key, const char *value, char **err);
/* Write the header; afterwards tensor bytes are appended in plan order. */
int st_writer_begin(st_writer *w, char **err);
/* Append n bytes of the current tensor (a tensor may take several calls). */
int st_writer_write(st_writer *w, const void *data, size_t n, char **err);
/* Check every tensor is complete, flush, fsync, rename into place. */
int st_writer_finish(st_writer *w, char **err);
/* Abandon: remove the temporary file, free everything. Safe after finish. */
void st_writer_free(st_writer *w);

#endif
