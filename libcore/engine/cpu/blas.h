/* blas.h - OpenBLAS, loaded at run time.
 *
 * OpenBLAS picks its CPU kernels when the library is loaded, from the
 * environment variable OPENBLAS_CORETYPE or its own CPU detection, and its
 * detection can fall back to AVX2 kernels on AVX-512 CPUs it does not know.
 * There is no call to change the kernel set once loaded, and this library
 * never changes the process environment; so the choice is the program's: it
 * sets OPENBLAS_CORETYPE to col_blas_preferred_core() (unless the user set
 * it) before the CPU backend loads OpenBLAS (apps/procsetup.c does this for
 * colossal's programs). col_blas_load() only reads the variable, to report it.
 *
 * OpenBLAS's thread count: the OpenMP build (preferred; it runs on the
 * program's libgomp threads) takes the calling thread's OpenMP thread count
 * at every call and runs on one thread inside a parallel region; the pthread
 * build keeps its own count. col_blas_threads_begin/end run calls on a given
 * number of threads in both and restore what was there. */
#ifndef COL_BLAS_H
#define COL_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

enum { COL_BLAS_ROW_MAJOR = 101, COL_BLAS_NO_TRANS = 111, COL_BLAS_TRANS = 112 };

/* openblas_get_parallel(): how the loaded library runs its threads */
enum { COL_BLAS_SEQUENTIAL = 0, COL_BLAS_PTHREAD = 1, COL_BLAS_OPENMP = 2 };

typedef void (*col_sgemm_fn)(int order, int transa, int transb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

typedef void (*col_sgemv_fn)(int order, int trans, int m, int n, float alpha, const float *a, int lda, const float *x,
                             int incx, float beta, float *y, int incy);

/* cblas_sbgemm: bf16 operands (OpenBLAS's bfloat16 is a uint16_t holding the top half of an f32), f32
 * accumulation and output; only in OpenBLAS builds made with BUILD_BFLOAT16 */
typedef void (*col_sbgemm_fn)(int order, int transa, int transb, int m, int n, int k, float alpha,
                              const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta, float *c, int ldc);

typedef struct {
    void *handle;
    col_sgemm_fn sgemm;
    col_sgemv_fn sgemv;
    col_sbgemm_fn sbgemm;       /* NULL when the library has none */
    void (*set_threads)(int);   /* openblas_set_num_threads, or NULL */
    int (*get_threads)(void);   /* openblas_get_num_threads, or NULL */
    int parallel;               /* COL_BLAS_SEQUENTIAL / _PTHREAD / _OPENMP (-1 unknown) */
    char core[64];              /* kernel set OpenBLAS reports */
    char chosen[64];            /* OPENBLAS_CORETYPE when it was loaded ("" = left to OpenBLAS) */
    char path[256];             /* the library file loaded (links resolved) */
} col_blas;

/* The core type to ask for on this CPU (the AVX-512 kernels it supports), or
 * NULL to leave it to OpenBLAS. Looks at the CPU only. */
const char *col_blas_preferred_core(void);
/* Whether the CPU has AVX512_BF16 (and the OS saves the AVX-512 state): the
 * instructions that make OpenBLAS's sbgemm faster than converting to f32. */
bool col_cpu_has_avx512_bf16(void);
col_status col_blas_load(col_blas *b, col_err *err);
void col_blas_unload(col_blas *b);

/* Make the calling thread's next OpenBLAS calls run on n threads (at least
 * 1). Returns what col_blas_threads_end needs to put back (0: nothing was
 * changed, the common case). */
int col_blas_threads_begin(const col_blas *b, int n);
void col_blas_threads_end(const col_blas *b, int saved);

#endif
