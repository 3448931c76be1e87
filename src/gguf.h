/* gguf.h -- a bounded reader of GGUF files (llama.cpp's container; versions 2 and 3) over a
 * memory map: the header, the metadata and the tensor table are parsed with every count,
 * length, offset and size checked against the file, and tensor rows are dequantized to
 * float32 on request (F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K).
 *
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *   n_kv x      {string key, u32 type, value}        string: u64 length + bytes
 *   n_tensors x {string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset}
 *   padding to general.alignment (default 32), then the tensor data (offsets relative to it)
 * ne[0] is the innermost (contiguous) dimension: a weight [rows, cols] has ne = {cols, rows}. */
#ifndef PLUME_GGUF_H
#define PLUME_GGUF_H

#include "common.h"

/* GGUF metadata value types. */
enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
};

/* The ggml tensor types plume reads. */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_BF16 = 30,
};

/* One metadata entry: its value's bytes stay in the map. */
typedef struct {
    const char *key;    /* NUL-terminated copy (in the file's name arena) */
    uint32_t type;      /* GGUF_* */
    uint32_t arr_type;  /* GGUF_ARRAY: the element type */
    uint64_t n;         /* GGUF_ARRAY: elements; else 1 */
    const uint8_t *val; /* the value (an array: its first element) */
    uint64_t size;      /* bytes of the value (an array: of its elements) */
} gguf_kv;

/* One tensor of the table. */
typedef struct {
    const char *name;  /* NUL-terminated copy */
    uint32_t type;     /* GGML_* */
    int32_t ndim;      /* 1..4 */
    int64_t ne[4];     /* ne[0] innermost; unused dimensions 1 */
    int64_t rows;      /* product of ne[1..] */
    const uint8_t *data;
    uint64_t nbytes;
} gguf_tensor;

/* An open GGUF file. */
typedef struct {
    plume_map map;
    char *path;
    uint32_t version;
    uint32_t alignment;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;      /* [n_kv] */
    gguf_tensor *t;   /* [n_tensors] */
    char *names;      /* arena of the keys' and names' copies */
} gguf_file;

/* Whether a file starts with the GGUF magic (reads 4 bytes; 0 if unreadable). */
int gguf_is_gguf(const char *path);
/* Map and parse path; PLUME_EFORMAT naming the file and what is wrong. */
int gguf_open(gguf_file *f, const char *path, char **err);
void gguf_close(gguf_file *f);

/* The entry of a key, or NULL. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
/* An integer entry (any integer type or bool) into *v; -1 if missing or not an integer. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *v);
/* A float entry (F32, F64 or an integer) into *v; -1 if missing. */
int gguf_get_float(const gguf_file *f, const char *key, double *v);
/* A string entry (pointer into the map, not NUL-terminated) and its length; NULL if missing. */
const char *gguf_get_str(const gguf_file *f, const char *key, uint64_t *len);
/* Element i of a numeric array entry as int64 / double; -1 if out of range or not numeric. */
int gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *v);
int gguf_arr_float(const gguf_kv *kv, uint64_t i, double *v);
/* Walk a string array: *pos starts at 0; the next string and its length, or NULL at the end
 * (lengths were checked at open). */
const char *gguf_arr_next_str(const gguf_kv *kv, uint64_t *pos, uint64_t *len);

/* The tensor of a name, or NULL. */
const gguf_tensor *gguf_find(const gguf_file *f, const char *name);
/* A ggml type's name ("Q4_0"...), or "?". */
const char *gguf_type_name(uint32_t type);
/* Whether rows of the type convert without loss into plume's formats (F32, F16, BF16, Q4_0),
 * as opposed to Q8_0 (a step per 32 where plume's q8 has one per row) and the K-quants, which
 * are requantized (exact only in an f32 bundle). */
int gguf_type_exact(uint32_t type);
/* Rows [r0, r0 + n) of a tensor (seen as [rows, ne[0]]) as float32. */
int gguf_read_rows(const gguf_tensor *t, int64_t r0, int64_t n, float *out, char **err);

#endif
