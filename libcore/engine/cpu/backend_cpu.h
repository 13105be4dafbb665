/* backend_cpu.h - the CPU backend: OpenBLAS for GEMM, OpenMP + vectorised
 * loops for the rest.
 *
 * OpenBLAS's kernel set is the program's choice (OPENBLAS_CORETYPE, set
 * before col_cpu_backend_init; col_blas_preferred_core() says what to ask
 * for, see blas.h): the backend never changes the process environment. Its
 * thread count is fixed when it is made: OpenMP's thread count for the
 * calling thread, capped by the CPUs available (cpus.h) unless
 * OMP_NUM_THREADS is set; kernels and OpenBLAS calls use it (or the caller's
 * count, if the caller sets OpenMP's count after the backend is made). */
#ifndef COL_BACKEND_CPU_H
#define COL_BACKEND_CPU_H

#include "backend.h"

col_status col_cpu_backend_init(col_backend *be, col_err *err);
void col_cpu_backend_free(col_backend *be);
/* Name of the OpenBLAS kernel set in use (e.g. "Cooperlake"). */
const char *col_cpu_backend_blas_core(const col_backend *be);
/* Threads the backend's kernels and GEMMs use. */
int col_cpu_backend_threads(const col_backend *be);
/* How the loaded OpenBLAS runs threads: COL_BLAS_OPENMP (2, it shares the
 * program's OpenMP threads), COL_BLAS_PTHREAD (1), COL_BLAS_SEQUENTIAL (0),
 * -1 unknown. */
int col_cpu_backend_blas_parallel(const col_backend *be);
/* How bf16 matmuls run: COL_CPU_BF16_AUTO (made so) uses OpenBLAS's
 * cblas_sbgemm when the loaded library has it and the CPU has AVX512_BF16,
 * else converts tiles to f32 for sgemm (f16 matmuls always do); _TILES always
 * converts; _SBGEMM uses sbgemm whenever the library has one (benchmarks).
 * Returns what is in use now: "sbgemm" or "f32 tiles". */
typedef enum { COL_CPU_BF16_AUTO, COL_CPU_BF16_TILES, COL_CPU_BF16_SBGEMM } col_cpu_bf16_gemm;
const char *col_cpu_backend_set_bf16_gemm(col_backend *be, col_cpu_bf16_gemm how);
const char *col_cpu_backend_bf16_gemm(const col_backend *be);

#endif
