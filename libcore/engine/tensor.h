/* tensor.h - dtypes and strided tensor descriptors.
 *
 * Dimension order and strides follow PyTorch: shape[0] is the outermost
 * dimension, a contiguous tensor has stride[ndim-1] == 1, and strides are
 * counted in elements (not bytes). A stride of 0 is a broadcast (expand).
 */
#ifndef COL_TENSOR_H
#define COL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum { COL_F32 = 0, COL_BF16, COL_F16, COL_I32, COL_I64, COL_DTYPE_COUNT } col_dtype;

#define COL_MAX_DIMS 8

typedef struct {
    col_dtype dtype;
    int ndim;                       /* 0 (scalar) .. COL_MAX_DIMS */
    int64_t shape[COL_MAX_DIMS];
    int64_t stride[COL_MAX_DIMS];   /* in elements */
    void *data;                     /* address of element [0,..,0]; NULL until planned */
} col_tensor;

size_t col_dtype_size(col_dtype dt);
const char *col_dtype_name(col_dtype dt);
bool col_dtype_is_float(col_dtype dt);

int64_t col_numel(const col_tensor *t);
/* Fills stride[] for a contiguous row-major layout of shape[]. */
void col_set_contiguous_strides(col_tensor *t);
bool col_is_contiguous(const col_tensor *t);
bool col_same_shape(const col_tensor *a, const col_tensor *b);
/* Writes "[2,3,4]" into buf; returns buf (for use in messages). */
const char *col_shape_str(const col_tensor *t, char *buf, size_t n);

/* Element addressing for generic (slow-path) code. idx has t->ndim entries. */
int64_t col_offset_of(const col_tensor *t, const int64_t *idx);
/* Advances a multi-index in row-major order; returns false after the last. */
bool col_index_next(const col_tensor *t, int64_t *idx);
/* Batch bi of a batched op whose batch index runs row-major over the first
 * nd dims of `shape`: the element offsets *oa, *ob of its operands a and b,
 * which carry those dims with their own strides (0 where broadcast). */
void col_batch_offsets(const int64_t *shape, int nd, int64_t bi, const col_tensor *a, const col_tensor *b, int64_t *oa,
                       int64_t *ob);

/* Scalar conversions. bf16 and f16 round to nearest even. */
float col_bf16_to_f32(uint16_t h);
uint16_t col_f32_to_bf16(float f);
float col_f16_to_f32(uint16_t h);
uint16_t col_f32_to_f16(float f);
/* Converts n elements of src (dtype st) into dst (dtype dt), both float
 * dtypes (f32, bf16, f16), contiguous and not overlapping: what the scalar
 * conversions above give for every number (round to nearest even), a NaN
 * stays a NaN; between bf16 and f16 through f32, so one rounding. One
 * thread, vector loops (convert.c). False, nothing written, when a dtype is
 * not a float or n < 0. */
bool col_convert(void *dst, col_dtype dt, const void *src, col_dtype st, int64_t n);
/* Reads/writes element at element offset off (relative to t->data) as double. */
double col_get_as_f64(const col_tensor *t, int64_t off);
void col_set_from_f64(const col_tensor *t, int64_t off, double v);

#endif
