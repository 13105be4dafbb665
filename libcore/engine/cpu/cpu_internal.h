/* cpu_internal.h - what the CPU kernel modules share. Not installed. */
#ifndef COL_CPU_INTERNAL_H
#define COL_CPU_INTERNAL_H

#include <omp.h>

#include "backend.h"
#include "blas.h"

typedef struct {
    col_blas blas;
    int nthreads;  /* threads for kernels and GEMMs, fixed when the backend is made (backend_cpu.c) */
    int omp_made;  /* omp_get_max_threads() then */
    bool sbgemm_on;/* bf16 matmuls through OpenBLAS's sbgemm (col_cpu_backend_set_bf16_gemm), else f32 tiles */
} col_cpu_ctx;

/* Threads for a kernel's parallel region or a GEMM: the backend's count; but
 * if the caller has set OpenMP's thread count since the backend was made
 * (omp_set_num_threads; the tests do, to compare thread counts), that. Work
 * partitions do not depend on it, so neither do the results. */
static inline int col_cpu_threads(const col_exec *ex)
{
    const col_cpu_ctx *ctx = ex->be->ctx;
    int n = omp_get_max_threads();
    return n == ctx->omp_made ? ctx->nthreads : n;
}

/* Elements below which a kernel stays on one thread. */
#define COL_PAR_MIN 32768

/* Offset (in elements) of row `row` of t, rows being all dims but the last
 * in row-major order. */
static inline int64_t col_row_offset(const col_tensor *t, int64_t row)
{
    int64_t off = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        int64_t s = t->shape[d];
        off += (row % s) * t->stride[d];
        row /= s;
    }
    return off;
}

static inline int64_t col_rows(const col_tensor *t)
{
    int64_t r = 1;
    for (int d = 0; d < t->ndim - 1; d++)
        r *= t->shape[d];
    return r;
}

static inline int64_t col_cols(const col_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }
static inline int64_t col_col_stride(const col_tensor *t) { return t->ndim ? t->stride[t->ndim - 1] : 1; }

/* cpu_lowp.c, for cpu_basic.c's cast and matmul kernels: a cast between two float dtypes, and a matmul
 * of bf16 or f16 operands */
bool col_cpu_cast_is_float(const col_node *n);
col_status col_cpu_cast_float(const col_node *n, const col_exec *ex);
/* a MATMUL of bf16 or f16 operands, K > 0 (k_matmul checked the shape: M, N, K < 2^31; batches = the product of
 * the batch dims) */
/* f32 products of at most COL_CPU_SMALL_M rows (cpu_matmul_small.c): c [M, N] = a [M, K] (row stride lda)
 * times b, stored [N, K] (b_nk) or [K, N], row stride ldb; each row of c the same bits whatever M is */
#define COL_CPU_SMALL_M 16
void col_cpu_matmul_small(const col_exec *ex, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                          const float *b, int64_t ldb, bool b_nk, float *c);
col_status col_cpu_matmul_lowp(const col_node *n, const col_exec *ex, int64_t M, int64_t N, int64_t K, int64_t batches,
                               col_err *err);
/* an ACCUMULATE into a bf16 or f16 gradient buffer: each element converted to f32, added, rounded back */
col_status col_cpu_accumulate_lowp(const col_node *n, const col_exec *ex);

/* cpu_quant.c: a MATMUL of x [M, K] f32 and a quantized weight read as W^T (backend.h), K > 0; the rows
 * ids (contiguous i32/i64, checked) of a quantized embedding table w [V, C] decoded into out [N, C] */
col_status col_cpu_matmul_quant(const col_node *n, const col_exec *ex, col_err *err);
void col_cpu_embedding_quant(const col_tensor *w, const col_tensor *ids, float *out, int nt);

/* Each kernel module fills its entries of the table. */
void col_cpu_register_basic(col_backend *be);     /* cpu_basic.c */
void col_cpu_register_unary(col_backend *be);     /* cpu_unary.c */
void col_cpu_register_reduce(col_backend *be);    /* cpu_reduce.c */
void col_cpu_register_norm(col_backend *be);      /* cpu_norm.c */
void col_cpu_register_nn(col_backend *be);        /* cpu_nn.c */
void col_cpu_register_attention(col_backend *be); /* cpu_attention.c */
void col_cpu_register_image(col_backend *be);     /* cpu_image.c */

#endif
