/* cuda_emu_runtime.cc - the CUDA runtime API on the host: one emulated
 * device ("CUDA emulator on the host CPU", few SMs), its memory (host memory
 * in a registry, so a pointer's kind is known and a copy running past an
 * allocation or in the wrong direction is an error), streams, events, errors.
 *
 * The prototypes, types and constants are the toolkit's cuda_runtime_api.h;
 * every function here has its exact signature (extern "C", so a mismatch does
 * not compile). Everything runs at once and in order: a copy or memset
 * "queued" on a stream has happened when the call returns, an event records
 * the host clock, a stream or event is always complete. Handles are checked:
 * a destroyed stream or event is cudaErrorInvalidResourceHandle.
 *
 * The emulator is process-wide state, as the CUDA runtime is: the registry of
 * memory, streams, events and kernel attributes sits behind one mutex; the
 * last error is per host thread, as in CUDA. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "cuda_emu_internal.h"

namespace cuemu {
namespace {

std::mutex mu;
std::map<uintptr_t, region> regions; /* by base address */
std::set<const void *> streams, events;
std::map<const void *, int> smem_limits;
size_t device_used;

thread_local cudaError_t last_error = cudaSuccess;
thread_local cudaError_t detail_code = cudaSuccess;
thread_local char detail[900];
thread_local char detail_full[1000];

std::atomic<int> check_env{-1}; /* the check mode: -1 until read from the environment */

size_t device_total()
{
    size_t mb = 8192;
    const char *e = getenv("COL_CUDA_EMU_MEM_MB");
    if (e && atol(e) > 0)
        mb = (size_t)atol(e);
    return mb << 20;
}

/* the region holding [p, p + n) (mu held) */
const region *lookup(uintptr_t p)
{
    auto it = regions.upper_bound(p);
    if (it == regions.begin())
        return nullptr;
    --it;
    const region &r = it->second;
    return p <= r.base + r.bytes ? &r : nullptr;
}

const char *kind_name(mem_kind k)
{
    switch (k) {
    case MEM_DEVICE: return "device memory";
    case MEM_MANAGED: return "managed memory";
    case MEM_PINNED: return "pinned host memory";
    case MEM_REGISTERED: return "registered host memory";
    default: return "pageable host memory";
    }
}

} /* namespace */

cudaError_t classify(const char *what, const char *role, const void *p, size_t n, mem_kind *k)
{
    std::lock_guard<std::mutex> g(mu);
    const region *r = lookup((uintptr_t)p);
    *k = r ? r->kind : MEM_NONE;
    if (r && (uintptr_t)p + n > r->base + r->bytes)
        return fail(cudaErrorInvalidValue, "%s: the %s range [%p, +%zu) runs past the end of the %zu-byte %s at %p", what,
                    role, p, n, r->bytes, kind_name(r->kind), (void *)r->base);
    return cudaSuccess;
}

bool device_side(mem_kind k) { return k == MEM_DEVICE || k == MEM_MANAGED || k == MEM_PINNED || k == MEM_REGISTERED; }

cudaError_t check_copy(const char *what, void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    mem_kind kd, ks;
    cudaError_t e = classify(what, "destination", dst, n, &kd);
    if (e == cudaSuccess)
        e = classify(what, "source", src, n, &ks);
    if (e != cudaSuccess)
        return e;
    if (n && (!dst || !src))
        return fail(cudaErrorInvalidValue, "%s: a NULL pointer", what);
    bool dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost && !dev_dst && !dev_src)
        return fail(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", what, (int)kind);
    if (kind != cudaMemcpyDefault) {
        if (dev_dst ? !device_side(kd) : kd == MEM_DEVICE)
            return fail(cudaErrorInvalidValue, "%s: the destination %p is %s, which a %s copy cannot write", what, dst,
                        kind_name(kd), dev_dst ? "to-device" : "to-host");
        if (dev_src ? !device_side(ks) : ks == MEM_DEVICE)
            return fail(cudaErrorInvalidValue, "%s: the source %p is %s, which a %s copy cannot read", what, src,
                        kind_name(ks), dev_src ? "from-device" : "from-host");
    }
    uintptr_t a = (uintptr_t)dst, b = (uintptr_t)src;
    if (n && a < b + n && b < a + n && a != b)
        return fail(cudaErrorInvalidValue, "%s: the source and destination ranges of %zu bytes overlap", what, n);
    return cudaSuccess;
}

cudaError_t check_stream(const char *what, cudaStream_t s)
{
    return stream_ok(s) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "%s: %p is not a live stream", what, (void *)s);
}

bool handle_ok(const void *h, bool is_event)
{
    std::lock_guard<std::mutex> g(mu);
    return h && (is_event ? events : streams).count(h) != 0;
}

void handle_add(const void *h, bool is_event)
{
    std::lock_guard<std::mutex> g(mu);
    (is_event ? events : streams).insert(h);
}

bool handle_drop(const void *h, bool is_event)
{
    std::lock_guard<std::mutex> g(mu);
    return (is_event ? events : streams).erase(h) != 0;
}

cudaError_t add_region(void *p, size_t n, mem_kind k)
{
    std::lock_guard<std::mutex> g(mu);
    uintptr_t b = (uintptr_t)p;
    auto it = regions.lower_bound(b);
    if ((it != regions.end() && it->first < b + (n ? n : 1)) ||
        (it != regions.begin() && std::prev(it)->second.base + std::prev(it)->second.bytes > b))
        return fail(cudaErrorHostMemoryAlreadyRegistered, "the range [%p, +%zu) overlaps memory the device knows already", p,
                    n);
    regions[b] = region{b, n, k};
    return cudaSuccess;
}

/* removes the region starting at p if its kind is one of kinds; false if none */
bool drop_region(const void *p, std::initializer_list<mem_kind> kinds, region *out)
{
    std::lock_guard<std::mutex> g(mu);
    auto it = regions.find((uintptr_t)p);
    if (it == regions.end())
        return false;
    for (mem_kind k : kinds)
        if (it->second.kind == k) {
            *out = it->second;
            if (k == MEM_DEVICE || k == MEM_MANAGED)
                device_used -= it->second.bytes;
            regions.erase(it);
            return true;
        }
    return false;
}

cudaError_t alloc_device(void **p, size_t n, mem_kind k, const char *what)
{
    if (!p)
        return fail(cudaErrorInvalidValue, "%s: NULL result pointer", what);
    *p = nullptr;
    if (n == 0)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(mu);
        size_t total = device_total();
        if (n > total - device_used)
            return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: the emulated device has %zu of %zu bytes free", what, n,
                        total - device_used, total);
        device_used += n;
    }
    void *m = nullptr;
    if (posix_memalign(&m, 256, n) != 0) {
        std::lock_guard<std::mutex> g(mu);
        device_used -= n;
        return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: out of host memory", what, n);
    }
    memset(m, 0xff, n); /* device memory starts as garbage: NaN bytes, not zeros */
    cudaError_t e = add_region(m, n, k);
    if (e != cudaSuccess) {
        free(m);
        return e;
    }
    *p = m;
    return cudaSuccess;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    detail_code = e;
    last_error = e;
    return e;
}

bool find_region(const void *p, region *out)
{
    std::lock_guard<std::mutex> g(mu);
    const region *r = lookup((uintptr_t)p);
    if (r)
        *out = *r;
    return r != nullptr;
}

bool stream_ok(cudaStream_t s)
{
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return true;
    std::lock_guard<std::mutex> g(mu);
    return streams.count(s) != 0;
}

int func_smem_limit(const void *kernel)
{
    std::lock_guard<std::mutex> g(mu);
    auto it = smem_limits.find(kernel);
    return it == smem_limits.end() ? 0 : it->second;
}

} /* namespace cuemu */

using namespace cuemu;

extern "C" {

void cuemu_set_check(int on) { check_env = on ? 1 : 0; }

int cuemu_check(void)
{
    int c = check_env;
    if (c < 0) {
        const char *e = getenv("COL_CUDA_EMU_CHECK");
        c = e && *e && strcmp(e, "0") != 0;
        check_env = c;
    }
    return c;
}

const char *cuemu_last_detail(void) { return detail_code != cudaSuccess ? detail : ""; }

/* ---- errors ---- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

static const struct {
    cudaError_t e;
    const char *name, *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &x : error_table)
        if (x.e == e)
            return x.name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    const char *text = "unknown error";
    for (const auto &x : error_table)
        if (x.e == e)
            text = x.text;
    if (e != cudaSuccess && e == detail_code && detail[0]) {
        snprintf(detail_full, sizeof detail_full, "%s (CUDA emulator: %s)", text, detail);
        return detail_full;
    }
    return text;
}

/* ---- the device ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: NULL");
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the emulator has device 0", device);
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return fail(cudaErrorInvalidValue, "cudaGetDevice: NULL");
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) { return (void)flags, cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

cudaError_t cudaDriverGetVersion(int *v)
{
    if (v)
        *v = CUDART_VERSION;
    return v ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaDriverGetVersion: NULL");
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (v)
        *v = CUDART_VERSION;
    return v ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: NULL");
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: NULL");
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): the emulator has device 0", device);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulator on the host CPU");
    p->totalGlobalMem = device_total();
    p->sharedMemPerBlock = SMEM_STATIC_MAX;
    p->sharedMemPerBlockOptin = SMEM_OPTIN_MAX;
    p->sharedMemPerMultiprocessor = SMEM_OPTIN_MAX + 1024;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->memPitch = (size_t)1 << 31;
    p->maxThreadsPerBlock = MAX_THREADS;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9; /* what the backend needs (8.0 or newer); the emulator has no architecture of its own */
    p->minor = 0;
    p->textureAlignment = 512;
    p->multiProcessorCount = SM_COUNT;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 1 << 20;
    p->memoryBusWidth = 64;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->managedMemory = 1;
    p->pageableMemoryAccess = 0;
    p->streamPrioritiesSupported = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: NULL");
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device %d): the emulator has device 0", device);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = MAX_THREADS; break;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)SMEM_STATIC_MAX; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)SMEM_OPTIN_MAX; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = SM_COUNT; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrAsyncEngineCount: *value = 2; break;
    default: *value = 0; break;
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    std::lock_guard<std::mutex> g(mu);
    size_t t = device_total();
    if (free_bytes)
        *free_bytes = t - device_used;
    if (total)
        *total = t;
    return cudaSuccess;
}

/* ---- kernels' attributes ---- */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: NULL function");
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPTIN_MAX)
            return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared memory, the device has %zu",
                        value, SMEM_OPTIN_MAX);
        std::lock_guard<std::mutex> g(mu);
        smem_limits[func] = value;
    }
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr || !func)
        return fail(cudaErrorInvalidValue, "cudaFuncGetAttributes: NULL");
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = MAX_THREADS;
    attr->numRegs = 32;
    int lim = func_smem_limit(func);
    attr->maxDynamicSharedSizeBytes = lim > 0 ? lim : (int)SMEM_STATIC_MAX;
    attr->ptxVersion = attr->binaryVersion = 90;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block, size_t smem)
{
    if (!n || !func || block <= 0)
        return fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: bad arguments");
    int by_threads = 2048 / block, by_smem = smem ? (int)((SMEM_OPTIN_MAX + 1024) / smem) : 32;
    *n = by_threads < by_smem ? by_threads : by_smem;
    return cudaSuccess;
}

} /* extern "C" */
