/* backend_cuda.cu - CUDA backend: device, stream, cuBLASLt handle, workspace,
 * and the kernel table, which the kernel modules (cuda_*.cu) fill. Device
 * memory is cuda_mem.cu's; CUDA errors as col_status are cuda_util.cu's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

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
    if (c->copy) {
        cudaStreamSynchronize(c->copy);
        cudaStreamDestroy(c->copy);
    }
    cu_lt_cache_free(c);
    if (c->lt)
        cublasLtDestroy(c->lt);
    cudaFree(c->ws);
    cu_check_free(c);
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
    if (st == COL_OK)
        st = cu_status(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking), err,
                       "cuda backend: cudaStreamCreate (copies)");
    if (st == COL_OK) {
        c->ws_bytes = CU_WS_BYTES;
        st = cu_status(cudaMalloc(&c->ws, c->ws_bytes), err, "cuda backend: workspace");
    }
    if (st == COL_OK)
        st = cu_check_init(c, err);
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
    cu_register_image(be);
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

void *col_cuda_backend_stream(const col_backend *be)
{
    return be && be->ctx ? (void *)((const col_cuda_ctx *)be->ctx)->stream : NULL;
}

int col_cuda_backend_device(const col_backend *be)
{
    return be && be->ctx ? ((const col_cuda_ctx *)be->ctx)->device : -1;
}

} /* extern "C" */
