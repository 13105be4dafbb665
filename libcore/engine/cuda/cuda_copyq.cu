/* cuda_copyq.cu - the CUDA backend's asynchronous transfers (backend.h
 * col_backend_mem, the optional part): a second stream for host<->device
 * copies beside the kernels' stream, CUDA events to order the two without
 * stopping the host, and page-locking of host memory so those copies run on
 * the copy engine while kernels run. memtier's compute tier uses them to
 * fetch a chunk while the ops before its first use compute. */
#include "cuda_internal.h"

extern "C" {

static cudaStream_t queue_of(const col_cuda_ctx *c, int q) { return q == COL_QUEUE_COPY ? c->copy : c->stream; }

static col_status ready(const col_backend *be, col_err *err, const char *what)
{
    if (!be || !be->ctx)
        return col_err_set(err, COL_ESTATE, "%s: the CUDA backend is not initialised", what);
    return cu_status(cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device), err, what);
}

col_status cu_event_create(const col_backend *be, void **ev, col_err *err)
{
    *ev = NULL;
    col_status st = ready(be, err, "cuda event");
    cudaEvent_t e = NULL;
    if (st == COL_OK && (st = cu_status(cudaEventCreate(&e), err, "cuda event")) == COL_OK)
        *ev = (void *)e;
    return st;
}

void cu_event_free(const col_backend *be, void *ev)
{
    if (!ev || !be || !be->ctx)
        return;
    cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device);
    cudaEventDestroy((cudaEvent_t)ev);
}

col_status cu_event_record(const col_backend *be, int q, void *ev, col_err *err)
{
    col_status st = ready(be, err, "cuda event record");
    if (st != COL_OK)
        return st;
    return cu_status(cudaEventRecord((cudaEvent_t)ev, queue_of((const col_cuda_ctx *)be->ctx, q)), err,
                     "cuda event record");
}

col_status cu_queue_wait(const col_backend *be, int q, void *ev, col_err *err)
{
    col_status st = ready(be, err, "cuda stream wait");
    if (st != COL_OK)
        return st;
    return cu_status(cudaStreamWaitEvent(queue_of((const col_cuda_ctx *)be->ctx, q), (cudaEvent_t)ev, 0), err,
                     "cuda stream wait");
}

col_status cu_event_sync(const col_backend *be, void *ev, col_err *err)
{
    col_status st = ready(be, err, "cuda event sync");
    if (st != COL_OK)
        return st;
    return cu_status(cudaEventSynchronize((cudaEvent_t)ev), err, "cuda event sync");
}

col_status cu_event_elapsed(const col_backend *be, void *a, void *b, double *s, col_err *err)
{
    *s = 0;
    col_status st = ready(be, err, "cuda event time");
    float ms = 0;
    if (st == COL_OK &&
        (st = cu_status(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b), err, "cuda event time")) == COL_OK)
        *s = ms > 0 ? 1e-3 * ms : 0;
    return st;
}

col_status cu_copy_async(const col_backend *be, bool to_device, void *dst, const void *src, size_t bytes,
                         col_err *err)
{
    col_status st = ready(be, err, to_device ? "cuda async copy to device" : "cuda async copy to host");
    if (st != COL_OK || !bytes)
        return st;
    return cu_status(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                     ((const col_cuda_ctx *)be->ctx)->copy),
                     err, to_device ? "cuda async copy to device" : "cuda async copy to host");
}

col_status cu_host_pin(const col_backend *be, void *p, size_t bytes, col_err *err)
{
    col_status st = ready(be, err, "cuda host pin");
    if (st != COL_OK)
        return st;
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e != cudaSuccess)
        cudaGetLastError(); /* not sticky: the memory stays pageable */
    return cu_status(e, err, "cuda host pin (cudaHostRegister)");
}

void cu_host_unpin(const col_backend *be, void *p)
{
    if (!p || !be || !be->ctx)
        return;
    cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device);
    if (cudaHostUnregister(p) != cudaSuccess)
        cudaGetLastError();
}

} /* extern "C" */
