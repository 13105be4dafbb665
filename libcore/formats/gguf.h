/* gguf.h - GGUF files (llama.cpp's model format), versions 2 and 3, read.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64
 * metadata count; each metadata entry a key (u64 length + bytes, no NUL), a
 * u32 value type and the value (arrays: u32 element type, u64 count, the
 * elements; arrays may hold arrays); each tensor a name, u32 n_dims (<= 4),
 * n_dims u64 dims innermost first (ne[0] is the length of a row), u32 ggml
 * type and u64 offset; padding to the alignment (general.alignment, default
 * 32); the data section, where each tensor starts at its offset, a multiple
 * of the alignment.
 *
 * Every length, count, offset and size is untrusted: each is checked for
 * overflow and against the bytes that are there before use, so a bad file
 * gives COL_EFORMAT (COL_EUNSUPPORTED for version 1 or a big-endian file)
 * and one line naming the file and what is wrong, never a crash. Refused at
 * open: a key or tensor name given twice, more than 4 dims, a tensor of a
 * known type whose rows are not whole blocks or whose data lies outside the
 * file, an offset that is not a multiple of the alignment, a value type that
 * does not exist. A tensor of a ggml type this reader does not know is
 * listed (its size unknown, nbytes 0) and refused only when its data is asked
 * for (col_gguf_tensor_data), so a file with one exotic tensor still opens.
 *
 * col_gguf_open maps the file read-only; tensor data points into the
 * mapping (aligned as the file aligns it). Nothing is printed. */
#ifndef COL_GGUF_H
#define COL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Metadata value types (the numbers in the file). */
typedef enum {
    COL_GGUF_U8 = 0, COL_GGUF_I8 = 1, COL_GGUF_U16 = 2, COL_GGUF_I16 = 3, COL_GGUF_U32 = 4, COL_GGUF_I32 = 5,
    COL_GGUF_F32 = 6, COL_GGUF_BOOL = 7, COL_GGUF_STRING = 8, COL_GGUF_ARRAY = 9, COL_GGUF_U64 = 10,
    COL_GGUF_I64 = 11, COL_GGUF_F64 = 12,
    COL_GGUF_VTYPE_COUNT
} col_gguf_vtype;

/* ggml tensor types (the numbers in the file; gaps are types ggml removed). */
typedef enum {
    COL_GGML_F32 = 0, COL_GGML_F16 = 1, COL_GGML_Q4_0 = 2, COL_GGML_Q4_1 = 3, COL_GGML_Q5_0 = 6,
    COL_GGML_Q5_1 = 7, COL_GGML_Q8_0 = 8, COL_GGML_Q8_1 = 9, COL_GGML_Q2_K = 10, COL_GGML_Q3_K = 11,
    COL_GGML_Q4_K = 12, COL_GGML_Q5_K = 13, COL_GGML_Q6_K = 14, COL_GGML_Q8_K = 15, COL_GGML_IQ2_XXS = 16,
    COL_GGML_IQ2_XS = 17, COL_GGML_IQ3_XXS = 18, COL_GGML_IQ1_S = 19, COL_GGML_IQ4_NL = 20, COL_GGML_IQ3_S = 21,
    COL_GGML_IQ2_S = 22, COL_GGML_IQ4_XS = 23, COL_GGML_I8 = 24, COL_GGML_I16 = 25, COL_GGML_I32 = 26,
    COL_GGML_I64 = 27, COL_GGML_F64 = 28, COL_GGML_IQ1_M = 29, COL_GGML_BF16 = 30, COL_GGML_TQ1_0 = 34,
    COL_GGML_TQ2_0 = 35, COL_GGML_MXFP4 = 39, COL_GGML_NVFP4 = 40, COL_GGML_Q1_0 = 41,
    COL_GGML_Q2_0 = 42,
} col_ggml_type;

/* The type's name ("Q4_K"), or NULL for a number that names no type. */
const char *col_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block (F32: 1, 4; Q8_0: 32, 34; Q4_K: 256, 144); false for an unknown type. */
bool col_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);
/* Bytes of a row of n elements of type: 0 when the type is unknown or n is not whole blocks. */
uint64_t col_ggml_row_bytes(uint32_t type, int64_t n);
const char *col_gguf_vtype_name(col_gguf_vtype t); /* "u32", "string", ...; "?" outside the enum */

typedef struct col_gguf col_gguf;

/* Maps path read-only and parses it. COL_EIO when it cannot be read. */
col_status col_gguf_open(const char *path, col_gguf **out, col_err *err);
/* Parses an image in memory (data/len must outlive the file; name is used in messages). */
col_status col_gguf_parse(const void *data, size_t len, const char *name, col_gguf **out, col_err *err);
void col_gguf_close(col_gguf *g);

uint32_t col_gguf_version(const col_gguf *g);   /* 2 or 3 */
uint32_t col_gguf_alignment(const col_gguf *g); /* general.alignment, or 32 */
uint64_t col_gguf_data_offset(const col_gguf *g); /* where the data section starts in the file */
const char *col_gguf_name(const col_gguf *g);   /* the path or name given at open */

/* ---- metadata ---- */

/* A value in the file. Scalars: data points at its bytes (little-endian, possibly unaligned: use the
 * accessors). Strings: data points at the bytes (not NUL-terminated, may hold any byte), count is the
 * length. Arrays: elem is the elements' type, count their number, data points at the first element. */
typedef struct {
    col_gguf_vtype type;
    col_gguf_vtype elem;    /* arrays only */
    uint64_t count;         /* strings: bytes; arrays: elements */
    const uint8_t *data;
    uint64_t nbytes;        /* the bytes the value (its elements for an array, the text for a string) spans */
    const uint64_t *index;  /* arrays of strings at the top level: each element's offset from data (internal) */
} col_gguf_value;

int64_t col_gguf_kv_count(const col_gguf *g);
/* The i-th key (NUL-terminated copy; keys with a NUL byte are refused at open) and its value; NULL / false
 * out of range. */
const char *col_gguf_key(const col_gguf *g, int64_t i);
bool col_gguf_kv_value(const col_gguf *g, int64_t i, col_gguf_value *v);
/* The index of key, or -1. */
int64_t col_gguf_find_key(const col_gguf *g, const char *key);

/* Typed lookups: COL_OK and the value; COL_EFORMAT with a line naming the file and the key when the key is
 * absent or holds another type (the line says which). Strict: get_u32 wants a u32. */
col_status col_gguf_get_u32(const col_gguf *g, const char *key, uint32_t *v, col_err *err);
col_status col_gguf_get_i32(const col_gguf *g, const char *key, int32_t *v, col_err *err);
col_status col_gguf_get_u64(const col_gguf *g, const char *key, uint64_t *v, col_err *err);
col_status col_gguf_get_f32(const col_gguf *g, const char *key, float *v, col_err *err);
col_status col_gguf_get_bool(const col_gguf *g, const char *key, bool *v, col_err *err);
/* A string: its bytes (not NUL-terminated) and length. */
col_status col_gguf_get_str(const col_gguf *g, const char *key, const char **s, size_t *len, col_err *err);
/* Lenient: any integer type whose value fits in int64 (u64 above INT64_MAX is refused), or any of
 * f32/f64 for get_num (integers too, converted). */
col_status col_gguf_get_int(const col_gguf *g, const char *key, int64_t *v, col_err *err);
col_status col_gguf_get_num(const col_gguf *g, const char *key, double *v, col_err *err);
/* An array whose elements are of type elem (COL_GGUF_VTYPE_COUNT: any). */
col_status col_gguf_get_array(const col_gguf *g, const char *key, col_gguf_vtype elem, col_gguf_value *arr,
                              col_err *err);

/* Elements of an array value (out of range or the wrong kind: false / COL_EINVAL). */
bool col_gguf_array_elem(const col_gguf_value *arr, uint64_t i, col_gguf_value *elem);
/* The i-th string of an array of strings (O(1) for top-level arrays). */
bool col_gguf_array_str(const col_gguf_value *arr, uint64_t i, const char **s, size_t *len);
/* Every element of a numeric array converted: to double (any integer or float type), or to int64 (integer
 * types; a u64 above INT64_MAX fails). dst holds arr->count values. */
col_status col_gguf_array_nums(const col_gguf_value *arr, double *dst, col_err *err);
col_status col_gguf_array_ints(const col_gguf_value *arr, int64_t *dst, col_err *err);
/* A scalar's value as int64 / double (integers, floats, bools); false for strings, arrays, a u64 above
 * INT64_MAX (scalar_int). */
bool col_gguf_scalar_int(const col_gguf_value *v, int64_t *out);
bool col_gguf_scalar_num(const col_gguf_value *v, double *out);

/* ---- tensors ---- */

#define COL_GGUF_MAX_DIMS 4

typedef struct {
    const char *name;       /* NUL-terminated copy */
    int n_dims;             /* 0..4 */
    int64_t ne[COL_GGUF_MAX_DIMS]; /* ggml order: ne[0] = elements of a row (PyTorch's last dim); 1 past n_dims */
    uint32_t type;          /* col_ggml_type, or a number this reader does not know */
    uint64_t offset;        /* from the start of the data section */
    const void *data;       /* in the mapping; NULL when the type is unknown */
    uint64_t nbytes;        /* 0 when the type is unknown */
} col_gguf_tensor;

int64_t col_gguf_tensor_count(const col_gguf *g);
const col_gguf_tensor *col_gguf_tensor_at(const col_gguf *g, int64_t i); /* NULL out of range */
const col_gguf_tensor *col_gguf_tensor_find(const col_gguf *g, const char *name); /* NULL if absent */
int64_t col_gguf_tensor_numel(const col_gguf_tensor *t);
/* The tensor's bytes: COL_EUNSUPPORTED naming the tensor and its type number when the type is unknown. */
col_status col_gguf_tensor_data(const col_gguf *g, const col_gguf_tensor *t, const void **data, uint64_t *nbytes,
                                col_err *err);

#endif
