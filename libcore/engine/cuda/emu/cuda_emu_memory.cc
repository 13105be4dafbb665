/* cuda_emu_memory.cc - the emulator's memory, stream and event API: device,
 * managed, pinned and registered memory (host memory the registry of
 * cuda_emu_runtime.cc knows), copies and memsets with their checks, streams,
 * events, host functions on a stream. Everything happens when called; a
 * stream is always idle, an event complete once recorded. */
#include <stdlib.h>
#include <time.h>

#include "cuda_emu_internal.h"

using namespace cuemu;

namespace {

struct emu_stream {
    unsigned flags;
    int priority;
};

struct emu_event {
    unsigned flags;
    bool recorded;
    double ms; /* the host clock when recorded */
};

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

cudaError_t copy(const char *what, void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
    cudaError_t e = check_stream(what, s);
    if (e == cudaSuccess)
        e = check_copy(what, dst, src, n, kind);
    if (e == cudaSuccess && n && dst != src)
        memcpy(dst, src, n);
    return e;
}

cudaError_t copy2d(const char *what, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t s)
{
    if (width > dpitch || width > spitch)
        return fail(cudaErrorInvalidPitchValue, "%s: width %zu is wider than a pitch (%zu, %zu)", what, width, dpitch, spitch);
    cudaError_t e = check_stream(what, s);
    for (size_t r = 0; r < height && e == cudaSuccess; r++)
        e = copy(what, (char *)dst + r * dpitch, (const char *)src + r * spitch, width, kind, s);
    return e;
}

cudaError_t set(const char *what, void *dst, int value, size_t n, cudaStream_t s)
{
    cudaError_t e = check_stream(what, s);
    mem_kind k;
    if (e == cudaSuccess)
        e = classify(what, "destination", dst, n, &k);
    if (e == cudaSuccess && n && !device_side(k))
        e = fail(cudaErrorInvalidValue, "%s: %p is not memory the device can reach", what, dst);
    if (e == cudaSuccess && n)
        memset(dst, value, n);
    return e;
}

cudaError_t host_alloc(void **p, size_t n, const char *what)
{
    if (!p)
        return fail(cudaErrorInvalidValue, "%s: NULL result pointer", what);
    *p = nullptr;
    void *m = nullptr;
    if (posix_memalign(&m, 256, n ? n : 1) != 0)
        return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: out of host memory", what, n);
    cudaError_t e = add_region(m, n ? n : 1, MEM_PINNED);
    if (e != cudaSuccess) {
        free(m);
        return e;
    }
    *p = m;
    return cudaSuccess;
}

} /* namespace */

extern "C" {

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t n) { return alloc_device(p, n, MEM_DEVICE, "cudaMalloc"); }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags)
{
    return (void)flags, alloc_device(p, n, MEM_MANAGED, "cudaMallocManaged");
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    cudaError_t e = check_stream("cudaMallocAsync", s);
    return e == cudaSuccess ? alloc_device(p, n, MEM_DEVICE, "cudaMallocAsync") : e;
}

cudaError_t cudaFree(void *p)
{
    region r;
    if (!p)
        return cudaSuccess;
    if (!drop_region(p, {MEM_DEVICE, MEM_MANAGED}, &r))
        return fail(cudaErrorInvalidValue, "cudaFree(%p): not the start of a cudaMalloc allocation", p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    cudaError_t e = check_stream("cudaFreeAsync", s);
    return e == cudaSuccess ? cudaFree(p) : e;
}

cudaError_t cudaMallocHost(void **p, size_t n) { return host_alloc(p, n, "cudaMallocHost"); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) { return (void)flags, host_alloc(p, n, "cudaHostAlloc"); }

cudaError_t cudaFreeHost(void *p)
{
    region r;
    if (!p)
        return cudaSuccess;
    if (!drop_region(p, {MEM_PINNED}, &r))
        return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not the start of a cudaMallocHost/cudaHostAlloc block", p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags)
{
    (void)flags;
    if (!p || !n)
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu): nothing to register", p, n);
    mem_kind k;
    cudaError_t e = classify("cudaHostRegister", "host", p, 0, &k);
    if (e == cudaSuccess && k == MEM_DEVICE)
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p): that is device memory", p);
    return e == cudaSuccess ? add_region(p, n, MEM_REGISTERED) : e;
}

cudaError_t cudaHostUnregister(void *p)
{
    region r;
    if (!drop_region(p, {MEM_REGISTERED}, &r))
        return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister(%p): not the start of a registered range", p);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int flags)
{
    (void)flags;
    region r;
    if (!d || !find_region(h, &r) || (r.kind != MEM_PINNED && r.kind != MEM_REGISTERED))
        return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer(%p): not pinned or registered host memory", h);
    *d = h; /* one address space */
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    if (!a)
        return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: NULL");
    memset(a, 0, sizeof *a);
    region r;
    a->device = 0;
    if (!find_region(p, &r) || (uintptr_t)p == r.base + r.bytes) {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        return cudaSuccess;
    }
    a->type = r.kind == MEM_DEVICE ? cudaMemoryTypeDevice : r.kind == MEM_MANAGED ? cudaMemoryTypeManaged : cudaMemoryTypeHost;
    a->devicePointer = (void *)p;
    a->hostPointer = r.kind == MEM_DEVICE ? nullptr : (void *)p;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy("cudaMemcpy", dst, src, n, kind, nullptr);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return copy("cudaMemcpyAsync", dst, src, n, kind, s);
}
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind)
{
    return copy2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, nullptr);
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s)
{
    return copy2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, s);
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return set("cudaMemset", p, v, n, nullptr); }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { return set("cudaMemsetAsync", p, v, n, s); }

/* ---- streams ---- */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority)
{
    if (!s)
        return fail(cudaErrorInvalidValue, "cudaStreamCreate: NULL");
    emu_stream *x = new emu_stream{flags, priority};
    *s = (cudaStream_t)x;
    handle_add(x, false);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) { return cudaStreamCreateWithPriority(s, flags, 0); }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || !handle_drop(s, false))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void *)s);
    delete (emu_stream *)s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { return check_stream("cudaStreamSynchronize", s); }
cudaError_t cudaStreamQuery(cudaStream_t s) { return check_stream("cudaStreamQuery", s); }

cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *flags)
{
    cudaError_t e = check_stream("cudaStreamGetFlags", s);
    if (e == cudaSuccess && flags)
        *flags = handle_ok(s, false) ? ((emu_stream *)s)->flags : 0;
    return e;
}

cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority)
{
    cudaError_t e = check_stream("cudaStreamGetPriority", s);
    if (e == cudaSuccess && priority)
        *priority = handle_ok(s, false) ? ((emu_stream *)s)->priority : 0;
    return e;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags)
{
    (void)flags;
    cudaError_t e = check_stream("cudaStreamWaitEvent", s);
    if (e == cudaSuccess && !handle_ok(ev, true))
        e = fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: %p is not a live event", (void *)ev);
    return e; /* the event's work is done already */
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *user)
{
    cudaError_t e = check_stream("cudaLaunchHostFunc", s);
    if (e == cudaSuccess && !fn)
        e = fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: NULL function");
    if (e == cudaSuccess)
        fn(user);
    return e;
}

cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *user, unsigned int flags)
{
    (void)flags;
    cudaError_t e = check_stream("cudaStreamAddCallback", s);
    if (e == cudaSuccess && !cb)
        e = fail(cudaErrorInvalidValue, "cudaStreamAddCallback: NULL function");
    if (e == cudaSuccess)
        cb(s, cudaSuccess, user);
    return e;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags)
{
    if (!ev)
        return fail(cudaErrorInvalidValue, "cudaEventCreate: NULL");
    emu_event *x = new emu_event{flags, false, 0.0};
    *ev = (cudaEvent_t)x;
    handle_add(x, true);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    if (!ev || !handle_drop(ev, true))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void *)ev);
    delete (emu_event *)ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t s, unsigned int flags)
{
    (void)flags;
    cudaError_t e = check_stream("cudaEventRecord", s);
    if (e == cudaSuccess && !handle_ok(ev, true))
        e = fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live event", (void *)ev);
    if (e == cudaSuccess) {
        emu_event *x = (emu_event *)ev;
        x->recorded = true;
        x->ms = now_ms();
    }
    return e;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) { return cudaEventRecordWithFlags(ev, s, 0); }

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    return handle_ok(ev, true) ? cudaSuccess
                               : fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: %p is not a live event", (void *)ev);
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    return handle_ok(ev, true)
               ? cudaSuccess
               : fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: %p is not a live event", (void *)ev);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!ms)
        return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: NULL");
    if (!handle_ok(a, true) || !handle_ok(b, true))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not live events");
    const emu_event *x = (const emu_event *)a, *y = (const emu_event *)b;
    if ((x->flags | y->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event made with cudaEventDisableTiming");
    if (!x->recorded || !y->recorded)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event that was never recorded");
    *ms = (float)(y->ms - x->ms);
    return cudaSuccess;
}

} /* extern "C" */
