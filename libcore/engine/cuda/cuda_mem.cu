/* cuda_mem.cu - the CUDA backend's device memory: allocation, copies and
 * memset on the backend's stream, and its memory table (backend.h
 * col_backend_mem) of them, so plans made with col_plan_create_on(g, cuda,
 * ...) keep their arena on the device; and CUDA events on the backend's
 * stream for timing. */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_internal.h"

/* ---- device memory ---- */

extern "C" {

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
    col_cuda_ctx *c = (col_cuda_ctx *)be->ctx;
    st = cu_status(cudaMemcpyAsync(dst, src, bytes, kind, c->stream), err, what);
    if (st == COL_OK) /* and the input checks of the kernels before it (cuda_check.cu) */
        st = cu_sync_checked(c, err, what);
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
    col_cuda_ctx *c = (col_cuda_ctx *)be->ctx;
    st = cu_sync_checked(c, err, "cuda sync"); /* bad input found by the kernels is reported here */
    if (st == COL_OK && c->copy) /* and the copy queue (cuda_copyq.cu) */
        st = cu_status(cudaStreamSynchronize(c->copy), err, "cuda sync (copies)");
    return st;
}

col_status col_cuda_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err)
{
    *free_bytes = *total_bytes = 0;
    col_status st = use_device(be, err, "cuda memory info");
    if (st != COL_OK)
        return st;
    size_t f = 0, t = 0;
    st = cu_status(cudaMemGetInfo(&f, &t), err, "cuda memory info: cudaMemGetInfo");
    if (st == COL_OK)
        *free_bytes = f, *total_bytes = t;
    return st;
}

} /* extern "C" */

/* the device memory helpers above have the table's signatures: alloc
 * 256-byte aligned cudaMalloc (COL_ENOMEM when out of memory), copies ordered
 * after queued kernels that return when the data has arrived, sync waiting
 * for the stream and reporting a kernel fault, copy a device-to-device
 * cudaMemcpyAsync on the stream (ordered with the kernels) */
static const col_backend_mem cu_mem = {
    col_cuda_alloc,  col_cuda_free,   col_cuda_to_device, col_cuda_to_host, col_cuda_sync,    col_cuda_copy,
    cu_event_create, cu_event_free,   cu_event_record,    cu_queue_wait,    cu_event_sync,    cu_event_elapsed,
    cu_copy_async,   cu_host_pin,     cu_host_unpin,
};

extern "C" const col_backend_mem *col_cuda_mem_table(void) { return &cu_mem; }

/* ---- events on the backend's stream (benchmarks) ---- */

struct col_cuda_event {
    cudaEvent_t e;
    int device;
};

extern "C" col_status col_cuda_event_create(const col_backend *be, col_cuda_event **ev, col_err *err)
{
    *ev = NULL;
    if (!be || !be->ctx)
        return col_err_set(err, COL_ESTATE, "cuda event: the CUDA backend is not initialised");
    const col_cuda_ctx *c = (const col_cuda_ctx *)be->ctx;
    col_cuda_event *x = (col_cuda_event *)calloc(1, sizeof *x);
    if (!x)
        return col_err_set(err, COL_ENOMEM, "cuda event: out of host memory");
    x->device = c->device;
    col_status st = cu_status(cudaSetDevice(c->device), err, "cuda event");
    if (st == COL_OK)
        st = cu_status(cudaEventCreate(&x->e), err, "cuda event: cudaEventCreate");
    if (st != COL_OK) {
        free(x);
        return st;
    }
    *ev = x;
    return COL_OK;
}

extern "C" void col_cuda_event_free(col_cuda_event *ev)
{
    if (!ev)
        return;
    cudaSetDevice(ev->device);
    cudaEventDestroy(ev->e);
    cudaGetLastError();
    free(ev);
}

extern "C" col_status col_cuda_event_record(const col_backend *be, col_cuda_event *ev, col_err *err)
{
    if (!be || !be->ctx || !ev)
        return col_err_set(err, COL_ESTATE, "cuda event record: no backend or event");
    const col_cuda_ctx *c = (const col_cuda_ctx *)be->ctx;
    col_status st = cu_status(cudaSetDevice(c->device), err, "cuda event record");
    if (st == COL_OK)
        st = cu_status(cudaEventRecord(ev->e, c->stream), err, "cuda event record");
    return st;
}

extern "C" col_status col_cuda_event_ms(const col_cuda_event *a, const col_cuda_event *b, float *ms, col_err *err)
{
    *ms = 0.0f;
    if (!a || !b)
        return col_err_set(err, COL_EINVAL, "cuda event time: NULL event");
    col_status st = cu_status(cudaSetDevice(b->device), err, "cuda event time");
    if (st == COL_OK)
        st = cu_status(cudaEventSynchronize(b->e), err, "cuda event time: cudaEventSynchronize");
    if (st == COL_OK)
        st = cu_status(cudaEventElapsedTime(ms, a->e, b->e), err, "cuda event time: cudaEventElapsedTime");
    return st;
}
