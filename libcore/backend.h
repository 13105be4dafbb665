/* backend.h - a backend is a table of kernels, one per op.
 *
 * The executor (plan.c) resolves every node's data pointer and calls
 * be->kernel[node->op]. A kernel reads its sources through col_node_tensor()
 * (strides honoured unless the builder made them contiguous) and writes the
 * whole of its output; it must not allocate: workspace comes from ex->scratch
 * (node->scratch_bytes, asked for by the builder).
 */
#ifndef COL_BACKEND_H
#define COL_BACKEND_H

#include "graph.h"
#include "status.h"

typedef struct col_backend col_backend;

typedef struct {
    void *scratch;              /* at least node->scratch_bytes, 64-byte aligned */
    size_t scratch_bytes;
    const col_backend *be;
} col_exec;

typedef col_status (*col_kernel_fn)(const col_node *n, const col_exec *ex, col_err *err);

struct col_backend {
    const char *name;
    col_kernel_fn kernel[COL_OP_COUNT];
    void *ctx;                  /* backend-private state (e.g. the BLAS table) */
};

/* CPU backend: OpenBLAS for GEMM (loaded with the best kernels for this CPU),
 * OpenMP + vectorised loops for the rest. */
col_status col_cpu_backend_init(col_backend *be, col_err *err);
void col_cpu_backend_free(col_backend *be);
/* Name of the OpenBLAS kernel set in use (e.g. "Cooperlake"). */
const char *col_cpu_backend_blas_core(const col_backend *be);

/* Address of the saved-for-backward area that follows a node's output. */
void *col_extra(const col_node *n);
size_t col_extra_offset(const col_node *n);
/* Threads kernels may use (OpenMP max threads, at least 1). */
int col_max_threads(void);

#endif
