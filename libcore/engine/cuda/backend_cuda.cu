/* backend_cuda.cu - CUDA backend: device, stream, cuBLASLt handle, workspace;
 * device memory helpers; CUDA errors as col_status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

col_status cu_status(cudaError_t e, col_err *err, const char *what)
{
    if (e == cudaSuccess)
        return COL_OK;
    col_status code = COL_EINTERNAL;
    switch (e) {
    case cudaErrorMemoryAllocation: code = COL_ENOMEM; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: code = COL_EUNSUPPORTED; break;
    default: break;
    }
    return col_err_set(err, code, "%s: CUDA error %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

col_status cu_blas_status(cublasStatus_t s, col_err *err, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return COL_OK;
    col_status code = s == CUBLAS_STATUS_ALLOC_FAILED ? COL_ENOMEM
                      : s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH ? COL_EUNSUPPORTED
                                                                                              : COL_EINTERNAL;
    return col_err_set(err, code, "%s: cuBLAS error %s: %s", what, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

col_status cu_launch(col_err *err, const char *what) { return cu_status(cudaGetLastError(), err, what); }

cu_td cu_td_of(const col_tensor *t)
{
    cu_td d;
    memset(&d, 0, sizeof d);
    /* drop size-1 dims, then merge d-1 into d when stride[d-1] == stride[d] * shape[d] */
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue;
        if (d.ndim > 0 && d.stride[d.ndim - 1] == t->stride[i] * t->shape[i]) {
            d.shape[d.ndim - 1] *= t->shape[i];
            d.stride[d.ndim - 1] = t->stride[i];
        } else {
            d.shape[d.ndim] = t->shape[i];
            d.stride[d.ndim] = t->stride[i];
            d.ndim++;
        }
    }
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) { /* empty: nothing is addressed */
            d.ndim = 0;
            break;
        }
    d.contig = d.ndim == 0 || (d.ndim == 1 && d.stride[0] == 1);
    return d;
}

extern "C" {

bool col_cuda_device_count(int *n, col_err *why)
{
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess || c <= 0) {
        *n = 0;
        if (e != cudaSuccess)
            cu_status(e, why, "cudaGetDeviceCount");
        else
            col_err_set(why, COL_EUNSUPPORTED, "the CUDA runtime found no device");
        cudaGetLastError(); /* clear it */
        return false;
    }
    *n = c;
    return true;
}

void col_cuda_backend_free(col_backend *be)
{
    if (!be || !be->ctx)
        return;
    col_cuda_ctx *c = (col_cuda_ctx *)be->ctx;
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->lt)
        cublasLtDestroy(c->lt);
    cudaFree(c->ws);
    cudaFree(c->flag_dev);
    cudaFreeHost(c->flag_host);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    be->ctx = NULL;
    cudaGetLastError();
}

col_status col_cuda_backend_init(col_backend *be, int device, col_err *err)
{
    memset(be, 0, sizeof *be);
    int n = 0;
    col_err why = {};
    if (!col_cuda_device_count(&n, &why))
        return col_err_set(err, COL_EUNSUPPORTED, "cuda backend: no CUDA device (%s)", why.msg);
    if (device < 0 || device >= n)
        return col_err_set(err, COL_EUNSUPPORTED, "cuda backend: device %d does not exist (%d device%s)", device, n,
                           n == 1 ? "" : "s");
    col_cuda_ctx *c = (col_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return col_err_set(err, COL_ENOMEM, "cuda backend: out of host memory");
    c->device = device;
    be->ctx = c;
    be->name = "cuda";
    be->mem = col_cuda_mem_table(); /* device memory for plans (cuda_mem.cu) */
    col_status st = cu_status(cudaSetDevice(device), err, "cuda backend: cudaSetDevice");
    cudaDeviceProp prop;
    if (st == COL_OK)
        st = cu_status(cudaGetDeviceProperties(&prop, device), err, "cuda backend: cudaGetDeviceProperties");
    if (st == COL_OK) {
        c->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
        snprintf(c->name, sizeof c->name, "%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor, c->sm_count);
        if (prop.major < 8)
            st = col_err_set(err, COL_EUNSUPPORTED, "cuda backend: %s: compute capability %d.%d, 8.0 or newer needed",
                             prop.name, prop.major, prop.minor);
    }
    if (st == COL_OK)
        st = cu_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err,
                       "cuda backend: cudaStreamCreate");
    if (st == COL_OK) {
        c->ws_bytes = CU_WS_BYTES;
        st = cu_status(cudaMalloc(&c->ws, c->ws_bytes), err, "cuda backend: workspace");
    }
    if (st == COL_OK)
        st = cu_status(cudaMalloc((void **)&c->flag_dev, sizeof(int64_t)), err, "cuda backend: flag");
    if (st == COL_OK)
        st = cu_status(cudaMallocHost((void **)&c->flag_host, sizeof(int64_t)), err, "cuda backend: pinned flag");
    if (st == COL_OK) {
        cublasStatus_t s = cublasLtCreate(&c->lt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            c->lt = NULL;
            st = cu_blas_status(s, err, "cuda backend: cublasLtCreate");
        }
    }
    if (st != COL_OK) {
        col_cuda_backend_free(be);
        memset(be, 0, sizeof *be);
        return st;
    }
    cu_register_basic(be);
    cu_register_matmul(be);
    cu_register_unary(be);
    cu_register_reduce(be);
    cu_register_norm(be);
    cu_register_nn(be);
    cu_register_rope(be);
    cu_register_attention(be);
    return COL_OK;
}

void col_cuda_backend_set_tf32(col_backend *be, bool on)
{
    if (be && be->ctx)
        ((col_cuda_ctx *)be->ctx)->tf32 = on;
}

bool col_cuda_backend_tf32(const col_backend *be) { return be && be->ctx && ((const col_cuda_ctx *)be->ctx)->tf32; }

const char *col_cuda_backend_device_name(const col_backend *be)
{
    return be && be->ctx ? ((const col_cuda_ctx *)be->ctx)->name : "";
}

/* ---- device memory ---- */

static col_status use_device(const col_backend *be, col_err *err, const char *what)
{
    if (!be || !be->ctx)
        return col_err_set(err, COL_ESTATE, "%s: the CUDA backend is not initialised", what);
    return cu_status(cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device), err, what);
}

col_status col_cuda_alloc(const col_backend *be, size_t bytes, void **out, col_err *err)
{
    *out = NULL;
    col_status st = use_device(be, err, "cuda alloc");
    if (st != COL_OK)
        return st;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        char what[64];
        snprintf(what, sizeof what, "cuda alloc of %zu bytes", bytes);
        return cu_status(e, err, what);
    }
    return COL_OK;
}

void col_cuda_free(const col_backend *be, void *p)
{
    if (!p || !be || !be->ctx)
        return;
    cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device);
    cudaFree(p);
}

static col_status copy_sync(const col_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            col_err *err, const char *what)
{
    col_status st = use_device(be, err, what);
    if (st != COL_OK || !bytes)
        return st;
    cudaStream_t s = ((const col_cuda_ctx *)be->ctx)->stream;
    st = cu_status(cudaMemcpyAsync(dst, src, bytes, kind, s), err, what);
    if (st == COL_OK)
        st = cu_status(cudaStreamSynchronize(s), err, what);
    return st;
}

col_status col_cuda_to_device(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    return copy_sync(be, dst, src, bytes, cudaMemcpyHostToDevice, err, "cuda copy to device");
}

col_status col_cuda_to_host(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    return copy_sync(be, dst, src, bytes, cudaMemcpyDeviceToHost, err, "cuda copy to host");
}

col_status col_cuda_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    col_status st = use_device(be, err, "cuda copy");
    if (st != COL_OK || !bytes)
        return st;
    return cu_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ((const col_cuda_ctx *)be->ctx)->stream),
                     err, "cuda copy");
}

col_status col_cuda_memset(const col_backend *be, void *dst, int value, size_t bytes, col_err *err)
{
    col_status st = use_device(be, err, "cuda memset");
    if (st != COL_OK || !bytes)
        return st;
    return cu_status(cudaMemsetAsync(dst, value, bytes, ((const col_cuda_ctx *)be->ctx)->stream), err, "cuda memset");
}

col_status col_cuda_sync(const col_backend *be, col_err *err)
{
    col_status st = use_device(be, err, "cuda sync");
    if (st != COL_OK)
        return st;
    return cu_status(cudaStreamSynchronize(((const col_cuda_ctx *)be->ctx)->stream), err, "cuda sync");
}

} /* extern "C" */
