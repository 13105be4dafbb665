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

/* COL_Q8_0 .. COL_Q6_K: weights quantized in blocks along the last dim, byte for byte ggml's (GGUF's)
 * block layouts (quant.h), so a GGUF tensor's bytes are used in place. They have no element size
 * (col_dtype_size 0): a row of n values takes col_dtype_row_bytes(dt, n) bytes, n a multiple of
 * col_dtype_block(dt). The graph takes them only as leaves (contiguous, the last dim a multiple of
 * the block) read by a matmul (x @ W^T, the Linear pattern) or an embedding, never with a gradient. */
typedef enum {
    COL_F32 = 0, COL_BF16, COL_F16, COL_I32, COL_I64,
    COL_Q8_0,  /* 32 values: f16 scale d, 32 int8 q; x = d q                                 (34 bytes) */
    COL_Q4_0,  /* 32 values: f16 d, 16 bytes of nibbles (j low, j+16 high); x = d (q - 8)    (18 bytes) */
    COL_Q4_K,  /* 256 values: f16 d, dmin, 8 6-bit scales and mins, 4-bit q; x = d sc q - dmin m (144) */
    COL_Q6_K,  /* 256 values: 4 + 2 bit q, 16 int8 scales, f16 d; x = d sc (q - 32)          (210 bytes) */
    COL_DTYPE_COUNT
} col_dtype;

#define COL_MAX_DIMS 8

typedef struct {
    col_dtype dtype;
    int ndim;                       /* 0 (scalar) .. COL_MAX_DIMS */
    int64_t shape[COL_MAX_DIMS];
    int64_t stride[COL_MAX_DIMS];   /* in elements */
    void *data;                     /* address of element [0,..,0]; NULL until planned */
} col_tensor;

/* bytes of one element; 0 for the quantized dtypes (and unknown ones): use col_dtype_row_bytes */
size_t col_dtype_size(col_dtype dt);
const char *col_dtype_name(col_dtype dt);
/* f32, bf16, f16 (not the quantized dtypes) */
bool col_dtype_is_float(col_dtype dt);
/* a block-quantized dtype (COL_Q8_0 .. COL_Q6_K) */
bool col_dtype_is_quant(col_dtype dt);
/* values per block: 32 (q8_0, q4_0), 256 (q4_K, q6_K), 1 for the other dtypes; 0 for an unknown one */
int64_t col_dtype_block(col_dtype dt);
/* bytes per block: 34, 18, 144, 210; the element size for the other dtypes */
size_t col_dtype_block_bytes(col_dtype dt);
/* bytes of n consecutive values (a row, or a whole contiguous tensor of n elements): n / block * block
 * bytes. 0 when n is negative or not a multiple of the block, or the dtype is unknown (a caller that
 * may see those checks first: 0 is also the size of n = 0) */
size_t col_dtype_row_bytes(col_dtype dt, int64_t n);
/* bytes of a contiguous tensor of t's dtype and shape (col_dtype_row_bytes of its element count) */
size_t col_tensor_bytes(const col_tensor *t);

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
/* Quantizes n values (n a multiple of col_dtype_block(dt)) into out, col_dtype_row_bytes(dt, n)
 * bytes: q8_0 and q4_0 exactly as ggml's reference quantizers (gguf-py's numpy quantize() gives the
 * same bytes); q4_K and q6_K by ggml's reference algorithm (the iterative scale and min search).
 * False, nothing written, when dt is not quantized or n is not a multiple of the block (quant.c). */
bool col_quantize_row(col_dtype dt, const float *x, int64_t n, void *out);
/* The values of n quantized values (n a multiple of the block): as gguf-py's dequantize(), bit for
 * bit (each value d * q, or d sc q - dmin m, in f32). False, nothing written, as above. */
bool col_dequantize_row(col_dtype dt, const void *q, int64_t n, float *out);
/* value i of the quantized values at q (the same number col_dequantize_row gives); 0 for a dtype
 * that is not quantized */
float col_quant_value(col_dtype dt, const void *q, int64_t i);
/* Reads/writes element at element offset off (relative to t->data) as double. A quantized tensor has
 * no elements: reading one gives NaN (col_quant_value decodes value i), writing one does nothing. */
double col_get_as_f64(const col_tensor *t, int64_t off);
void col_set_from_f64(const col_tensor *t, int64_t off, double v);

#endif
