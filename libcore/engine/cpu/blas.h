/* blas.h - OpenBLAS, loaded at run time so its kernel set can be chosen.
 *
 * OpenBLAS picks its CPU kernels when the library is loaded, from
 * OPENBLAS_CORETYPE or its own CPU detection, and its detection can fall back
 * to AVX2 kernels on AVX-512 CPUs it does not know. col_blas_load() therefore
 * looks at the CPU first and, unless the user set OPENBLAS_CORETYPE, asks for
 * the AVX-512 kernels the CPU supports before it loads the library.
 */
#ifndef COL_BLAS_H
#define COL_BLAS_H

#include "status.h"

enum { COL_BLAS_ROW_MAJOR = 101, COL_BLAS_NO_TRANS = 111, COL_BLAS_TRANS = 112 };

typedef void (*col_sgemm_fn)(int order, int transa, int transb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

typedef void (*col_sgemv_fn)(int order, int trans, int m, int n, float alpha, const float *a, int lda, const float *x,
                             int incx, float beta, float *y, int incy);

typedef struct {
    void *handle;
    col_sgemm_fn sgemm;
    col_sgemv_fn sgemv;
    char core[64];              /* kernel set OpenBLAS reports */
    char chosen[64];            /* what we asked for ("" = left to OpenBLAS) */
    char path[256];             /* the library file loaded */
} col_blas;

/* The core type we would ask for on this CPU, or NULL to leave it to OpenBLAS. */
const char *col_blas_preferred_core(void);
col_status col_blas_load(col_blas *b, col_err *err);
void col_blas_unload(col_blas *b);

#endif
