/* cuda_internal.h - what the CUDA kernel modules share. Not installed;
 * included only by the .cu files (compiled as C++ by nvcc). */
#ifndef COL_CUDA_INTERNAL_H
#define COL_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "cuda_launch.h" /* CU_LAUNCH: every kernel launch (and the host emulator with -DCOL_CUDA_EMU) */

extern "C" {
#include "backend.h"
#include "graph.h"
#include "tensor.h"
}
#include "backend_cuda.h"

/* ---- input checks reported at the next synchronisation (cuda_check.cu) ---- */
/* a device check slot: the first bad position (CU_CHECK_NONE: none found) and the value there */
typedef struct {
    long long pos, val;
} cu_check_slot;
#define CU_CHECK_NONE 0x7f7f7f7f7f7f7f7fLL /* a slot's bytes reset to 0x7f */
#define CU_CHECK_SLOTS 256
/* CU_CHECK_ROWS (per-row cache ops): position 2b: batch row b's cache row is outside the cache,
 * 2b + 1: its start is outside [0, limit - T]; the value is the row or the start */
enum { CU_CHECK_IDS, CU_CHECK_TARGETS, CU_CHECK_KV, CU_CHECK_ATT, CU_CHECK_ROWS };
/* what a slot checks, kept on the host for the message */
typedef struct {
    const char *op;   /* "embedding", "cross_entropy", ... */
    int kind;         /* CU_CHECK_* */
    int64_t limit;    /* vocabulary / classes / cache length */
    int64_t ign;      /* targets: the ignore index; CU_CHECK_ROWS: the cache's rows */
    int64_t T;        /* positions: the new tokens */
} cu_check_info;

typedef struct {
    int device;
    cudaStream_t stream;        /* the kernels (COL_QUEUE_COMPUTE) */
    cudaStream_t copy;          /* asynchronous host<->device copies (COL_QUEUE_COPY, cuda_copyq.cu) */
    cublasLtHandle_t lt;
    void *ws;                   /* workspace: cuBLASLt and the kernels' partial sums */
    size_t ws_bytes;
    cu_check_slot *chk_dev;     /* CU_CHECK_SLOTS device check slots (cuda_check.cu) */
    cu_check_slot *chk_host;    /* pinned: where a synchronisation reads the used ones back */
    cu_check_info chk_info[CU_CHECK_SLOTS];
    int chk_used;               /* slots taken since the last synchronisation */
    pthread_mutex_t chk_mu;     /* taking a slot and queueing its kernels; the read-back */
    bool chk_mu_ok;
    struct cu_lt_cache *lt_cache; /* cuBLASLt descriptors and algorithms per matmul shape (cuda_matmul.cu) */
    bool tf32;
    int sm_count;
    char name[320];
} col_cuda_ctx;

#define CU_WS_BYTES ((size_t)32 << 20)
#define CU_THREADS 256

static inline col_cuda_ctx *cu_ctx(const col_exec *ex) { return (col_cuda_ctx *)ex->be->ctx; }

/* ---- errors (cuda_util.cu) ---- */
/* CUDA error -> col_status with the CUDA message (COL_OK for cudaSuccess) */
col_status cu_status(cudaError_t e, col_err *err, const char *what);
/* cuBLAS(Lt) status -> col_status with its message */
col_status cu_blas_status(cublasStatus_t s, col_err *err, const char *what);
/* the launch error of the kernel(s) just queued for op `what` */
col_status cu_launch(col_err *err, const char *what);

/* ---- the matmul's cache of cuBLASLt descriptors (cuda_matmul.cu) ---- */
typedef struct cu_lt_cache cu_lt_cache;
void cu_lt_cache_free(col_cuda_ctx *c);
/* Row-major f32 out[M,N] = op(a)[M,K] op(b)[K,N] + beta out, queued on the kernel stream through that
 * cache (TF32 when the backend's flag is on). ta false: a is stored [M,K] with row stride lda; true: a is
 * stored [K,M] (a^T) with row stride lda; likewise tb for b. ldc: out's row stride. */
col_status cu_gemm_f32(col_cuda_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *out, int64_t ldc, col_err *err, const char *what);

/* ---- input checks (cuda_check.cu) ---- */
col_status cu_check_init(col_cuda_ctx *c, col_err *err);
void cu_check_free(col_cuda_ctx *c);
/* Takes the next check slot for a call described by info and returns with
 * the slots' mutex held: queue the call's kernels, then cu_check_end. A full
 * ring synchronises first: an earlier call's bad input is reported here
 * (then nothing is held and *slot is NULL). */
col_status cu_check_begin(col_cuda_ctx *c, const cu_check_info *info, cu_check_slot **slot, col_err *err);
void cu_check_end(col_cuda_ctx *c);
/* Waits for the kernel stream and reports the first bad input the checked
 * calls since the last synchronisation found (COL_EINVAL with its message);
 * the slots are free again. */
col_status cu_sync_checked(col_cuda_ctx *c, col_err *err, const char *what);
/* Queues (between cu_check_begin and cu_check_end, info kind CU_CHECK_ROWS) the check of
 * batch rows b < B: 0 <= rows[b] < R (rows NULL: b) and 0 <= start[b] <= L - T. */
col_status cu_check_rows(col_cuda_ctx *c, cu_check_slot *slot, const int64_t *start, const int64_t *rows, int64_t B,
                         int64_t R, int64_t L, int64_t T, col_err *err, const char *what);
/* device side: position pos is bad (the smallest bad position wins) */
__device__ __forceinline__ void cu_check_bad(cu_check_slot *s, int64_t pos) { atomicMin(&s->pos, (long long)pos); }

/* ---- strided tensors on the device: offset of logical (row-major) index i ---- */
typedef struct {
    int ndim;                   /* after merging dims; 0 = scalar */
    int contig;                 /* offset(i) == i */
    int64_t shape[COL_MAX_DIMS];
    int64_t stride[COL_MAX_DIMS];
} cu_td;

/* Describes t with adjacent dims merged where its strides allow (the
 * logical-index -> offset map is unchanged; cuda_util.cu). */
cu_td cu_td_of(const col_tensor *t);

__device__ __forceinline__ int64_t cu_off(const cu_td &t, int64_t i)
{
    if (t.contig)
        return i;
    int64_t off = 0;
    for (int d = t.ndim - 1; d >= 0; d--) {
        int64_t s = t.shape[d];
        off += (i % s) * t.stride[d];
        i /= s;
    }
    return off;
}

/* blocks for a grid-stride loop over n items */
static inline unsigned cu_blocks(const col_cuda_ctx *c, int64_t n, int threads = CU_THREADS)
{
    int64_t b = (n + threads - 1) / threads, cap = (int64_t)c->sm_count * 32;
    if (b > cap)
        b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

#define CU_GRID_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- block reductions (blockDim.x a multiple of 32, at most 1024) ---- */
template <typename T> __device__ __forceinline__ T cu_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
/* every thread gets the block's total; sh: 32 slots of shared memory */
template <typename T> __device__ __forceinline__ T cu_block_sum(T v, T *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    if (nw == 1)
        return v;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (T)0;
    return cu_warp_sum(v);
}
__device__ __forceinline__ float cu_block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    if (nw == 1)
        return v;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return cu_warp_max(v);
}
/* threads per row for a row-wise kernel over rows of C elements */
static inline int cu_row_threads(int64_t C)
{
    return C <= 256 ? 32 : C <= 2048 ? 128 : C <= 8192 ? 256 : 512;
}

/* ---- asynchronous transfers (cuda_copyq.cu): the optional part of the memory table ---- */
extern "C" {
col_status cu_event_create(const col_backend *be, void **ev, col_err *err);
void cu_event_free(const col_backend *be, void *ev);
col_status cu_event_record(const col_backend *be, int q, void *ev, col_err *err);
col_status cu_queue_wait(const col_backend *be, int q, void *ev, col_err *err);
col_status cu_event_sync(const col_backend *be, void *ev, col_err *err);
col_status cu_event_elapsed(const col_backend *be, void *a, void *b, double *s, col_err *err);
col_status cu_copy_async(const col_backend *be, bool to_device, void *dst, const void *src, size_t bytes,
                         col_err *err);
col_status cu_host_pin(const col_backend *be, void *p, size_t bytes, col_err *err);
void cu_host_unpin(const col_backend *be, void *p);
}

/* ---- the kernel modules: backend_cuda.cu registers them; they call only cuda_util.cu and cuda_check.cu
 * (and cuda_image.cu cuda_matmul.cu's cu_gemm_f32) ---- */
void cu_register_basic(col_backend *be);   /* cuda_basic.cu */
void cu_register_matmul(col_backend *be);  /* cuda_matmul.cu */
void cu_register_unary(col_backend *be);   /* cuda_unary.cu */
void cu_register_reduce(col_backend *be);  /* cuda_reduce.cu */
void cu_register_norm(col_backend *be);    /* cuda_norm.cu */
void cu_register_nn(col_backend *be);      /* cuda_nn.cu */
void cu_register_rope(col_backend *be);    /* cuda_rope.cu */
void cu_register_attention(col_backend *be); /* cuda_attention.cu */
void cu_register_image(col_backend *be);   /* cuda_image.cu */
/* cuda_quant.cu (called by cuda_matmul.cu's MATMUL and cuda_nn.cu's EMBEDDING): x @ W^T with W quantized
 * (backend.h); the rows ids (checked by the caller) of a quantized table w decoded into out [N, C] */
col_status cu_matmul_quant(const col_node *n, const col_exec *ex, col_err *err);
col_status cu_embedding_quant(col_cuda_ctx *c, const col_tensor *w, const col_tensor *ids, float *out, col_err *err);

#endif
