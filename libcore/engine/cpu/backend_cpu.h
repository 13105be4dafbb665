/* backend_cpu.h - the CPU backend: OpenBLAS for GEMM (loaded with the best
 * kernels for this CPU), OpenMP + vectorised loops for the rest. */
#ifndef COL_BACKEND_CPU_H
#define COL_BACKEND_CPU_H

#include "backend.h"

col_status col_cpu_backend_init(col_backend *be, col_err *err);
void col_cpu_backend_free(col_backend *be);
/* Name of the OpenBLAS kernel set in use (e.g. "Cooperlake"). */
const char *col_cpu_backend_blas_core(const col_backend *be);

#endif
