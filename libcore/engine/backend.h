/* backend.h - a backend is a table of kernels, one per op.
 *
 * The executor (plan.c) resolves every node's data pointer and calls
 * be->kernel[node->op] (an EXTERN node's function it calls itself: no table
 * has an entry for it, ops.h col_extern). A kernel reads its sources through col_node_tensor()
 * (strides honoured unless the builder made them contiguous) and writes the
 * whole of its output; it must not allocate: workspace comes from ex->scratch
 * (node->scratch_bytes, asked for by the builder). A backend with a memory
 * table (mem, below) runs kernels on its own memory, queued: see plan.h.
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
    bool dropout_off;           /* the plan runs with dropout off (col_plan_set_dropout): a dropout kernel
                                   writes its input unchanged */
} col_exec;

typedef col_status (*col_kernel_fn)(const col_node *n, const col_exec *ex, col_err *err);

/* The memory of a backend whose kernels do not work on host memory (a GPU).
 * Plans made for such a backend (col_plan_create_on) take their activation
 * arena and scratch from alloc, and callers move data with to_device/to_host
 * (or col_plan_upload/col_plan_download). Every function gets the backend
 * the table belongs to. */
typedef struct {
    /* *out = bytes of the backend's memory, at least 64-byte aligned (bytes 0
     * gives a valid, freeable block); COL_ENOMEM with a message when it has
     * none left, and *out = NULL on any error. */
    col_status (*alloc)(const col_backend *be, size_t bytes, void **out, col_err *err);
    void (*free)(const col_backend *be, void *p); /* p may be NULL */
    /* Synchronous copies: they return once the data has arrived, ordered after
     * the kernels already queued (host memory may be pageable). */
    col_status (*to_device)(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
    col_status (*to_host)(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
    /* Waits for every queued kernel (and, with the asynchronous functions
     * below, every queued copy); reports an asynchronous kernel error. */
    col_status (*sync)(const col_backend *be, col_err *err);
    /* Device-to-device copy of bytes between two ranges of the backend's
     * memory that do not overlap, ordered after the kernels already queued
     * (and before those queued after it). NULL when the backend has none
     * (the compute tier then cannot compact its arena). */
    col_status (*copy)(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);

    /* ---- optional: asynchronous transfers (all of these, or none) ----
     * Two queues run in order each, and concurrently with each other: the
     * kernels (COL_QUEUE_COMPUTE, where the kernels and the copies above go)
     * and the copies between host and device (COL_QUEUE_COPY, a GPU's copy
     * engine). Events order them without stopping the host: a copy queued
     * after queue_wait(COPY, e) starts once e has completed. */
    /* *ev = a new event (never recorded: waiting for it returns at once) */
    col_status (*event_create)(const col_backend *be, void **ev, col_err *err);
    void (*event_free)(const col_backend *be, void *ev); /* ev may be NULL */
    /* ev completes when everything queued on queue q so far has (re-recording replaces what it marked) */
    col_status (*event_record)(const col_backend *be, int q, void *ev, col_err *err);
    /* work queued on q after this call starts after ev's work has completed; the host does not wait */
    col_status (*queue_wait)(const col_backend *be, int q, void *ev, col_err *err);
    /* the host waits until ev has completed; reports an asynchronous error */
    col_status (*event_sync)(const col_backend *be, void *ev, col_err *err);
    /* *s = seconds from a to b, both recorded on the same queue and completed (b after a) */
    col_status (*event_elapsed)(const col_backend *be, void *a, void *b, double *s, col_err *err);
    /* a copy host -> device (to_device true) or device -> host queued on COL_QUEUE_COPY; it may start at
     * once: the caller orders it with queue_wait and must keep both buffers untouched until an event
     * recorded after it has completed. Pinned host memory (host_pin) lets it overlap the kernels. */
    col_status (*copy_async)(const col_backend *be, bool to_device, void *dst, const void *src, size_t bytes,
                             col_err *err);
    /* page-locks host memory for copy_async (an error leaves it pageable: copies stay correct, only slower);
     * host_unpin undoes it (before the memory is freed) */
    col_status (*host_pin)(const col_backend *be, void *p, size_t bytes, col_err *err);
    void (*host_unpin)(const col_backend *be, void *p);
} col_backend_mem;

enum { COL_QUEUE_COMPUTE = 0, COL_QUEUE_COPY = 1 };

/* whether m has the asynchronous transfer functions */
static inline bool col_mem_async(const col_backend_mem *m)
{
    return m && m->event_create && m->event_free && m->event_record && m->queue_wait && m->event_sync &&
           m->event_elapsed && m->copy_async && m->host_pin && m->host_unpin;
}

struct col_backend {
    const char *name;
    col_kernel_fn kernel[COL_OP_COUNT];
    void *ctx;                  /* backend-private state (e.g. the BLAS table) */
    /* NULL: the kernels work on host memory (the CPU backend). Otherwise node
     * data must be this backend's memory (the CUDA backend's device memory). */
    const col_backend_mem *mem;
};

/* Address of the saved-for-backward area that follows a node's output. */
void *col_extra(const col_node *n);
size_t col_extra_offset(const col_node *n);
/* The inverse frequencies of a ROPE node's params, inv[i] for i < rd/2 (rd =
 * rotary dims), in f32 exactly as Hugging Face transformers computes them:
 * 1 / theta^(2i/rd), then LLaMA-3 scaling when f[1] > 0 (ops_nn.c). Every
 * backend's RoPE kernel takes them from here, so they agree to the bit. */
void col_rope_inv_freq(const col_op_params *p, int64_t rd, float *inv);
/* How a GEMM library (column-major) reads the last two dims of t, a matrix
 * whose rows or columns are contiguous: row-major with row stride ld is
 * column-major [c, r] untransposed (trans false); columns contiguous is
 * [r, c] transposed. Shared by the CPU (BLAS) and CUDA (cuBLASLt) matmuls. */
void col_matrix_layout(const col_tensor *t, bool *trans, int64_t *ld);
/* A bf16 or f16 matmul C[M,N] = A[M,K] B[K,N] on a host without a GEMM for
 * those types converts tiles of its operands to f32 and multiplies them with
 * sgemm: for each column panel of nb and each slice of kb along K (C adds
 * the slices in K order), rows in panels of mb. The tiles depend on the shape
 * only (so do the results); scratch is the f32 tiles of A and B, as the
 * builder asks for it (ops_basic.c). */
typedef struct {
    int64_t mb, kb, nb;
} col_lowp_tiles;
col_lowp_tiles col_matmul_lowp_tiles(int64_t M, int64_t K, int64_t N);
/* bytes of scratch for those tiles: each one 64-byte aligned */
size_t col_matmul_lowp_scratch(int64_t M, int64_t K, int64_t N);
/* A MATMUL of x [M, K] f32 (contiguous) and b [K, N], the transpose of a quantized weight W [N, K] whose
 * row n starts col_dtype_row_bytes(dt, n * b->stride[1]) bytes after b's data (ops_basic.c). The
 * backends decode W's blocks as they read them. With M <= COL_QMV_ROWS (decoding: a row per sequence, or
 * a short prompt) a matrix-vector kernel reads each block once for all M rows, on the host from x's rows
 * quantized to 8 bits the way llama.cpp does (cpu_quant.c); with more rows, panels of col_matmul_quant_panel(K, N) rows
 * of W are dequantized to f32 and multiplied with a GEMM, each panel by one thread (on the host: one
 * panel of scratch per thread, col_max_threads() of them when the node was built). The panels depend on
 * the shape only. The scratch the builder asks for covers both: 64-byte aligned pieces. */
#define COL_QMV_ROWS 32
int64_t col_matmul_quant_panel(int64_t K, int64_t N);
size_t col_matmul_quant_scratch(int64_t M, int64_t K, int64_t N, col_dtype dt);
/* the quantized rows of x (M <= COL_QMV_ROWS) as the host kernels lay them out: per row, K int8 values,
 * then K / 32 f32 scales, then K / 32 i32 sums of the values, then K / 32 vectors of 8 i32 that start each
 * block's integer dot product (each piece 64-byte aligned) */
size_t col_matmul_quant_xrow_bytes(int64_t K);
/* The geometry of a CONV2D, CONV2D_BWD_DATA or CONV2D_BWD_FILTER node, read from its shapes and params
 * (ops_image.c), for every backend's kernels. Output pixel (oy, ox) reads input pixel
 * (oy * sh - pt + ky, ox * sw - pl + kx) for kernel tap (ky, kx), zero outside [0,H) x [0,W). */
typedef struct {
    int64_t B, Cin, H, W, Cout, kh, kw, Ho, Wo;
    int64_t sh, sw, pt, pl;     /* strides; top and left padding */
    int64_t K, N;               /* GEMM sizes: K = Cin*kh*kw (w as [Cout, K]), N = Ho*Wo pixels per image */
    bool direct;                /* 1x1, stride 1, no padding: x [Cin, H*W] is the GEMM operand itself */
} col_conv2d_geom;
col_conv2d_geom col_conv2d_geom_of(const col_node *n);
/* The host kernels' im2col tile: columns (output pixels of one image) per tile of K rows, from the shape
 * only; 0 for a direct convolution (no tile). The builders ask for K * tile floats of scratch. */
int64_t col_conv2d_tile(const col_conv2d_geom *g);
/* Splits x into the dims a reduction keeps (in output order) and the dims
 * it reduces (bits of axes), shapes and strides, for every backend's
 * reduction kernels. */
void col_split_axes(const col_tensor *x, uint32_t axes, col_tensor *kept, col_tensor *red);
/* Threads kernels may use (OpenMP max threads, at least 1). */
int col_max_threads(void);

#endif
