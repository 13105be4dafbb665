/* cuda_emu.h - the host emulator of CUDA: the backend's .cu kernel sources,
 * compiled by g++ as C++ with -DCOL_CUDA_EMU, run on the CPU (issue 13).
 *
 * What a .cu file sees (see README.md beside this file for the design):
 *   - the toolkit's own headers (cuda_runtime.h, cublasLt.h, cuda_bf16.h,
 *     cuda_fp16.h) for every type, constant and prototype; the functions are
 *     the emulator's (cuda_emu_runtime.cc, cuda_emu_blaslt.cc): nothing of
 *     libcudart, libcublasLt or a driver is linked.
 *   - __global__, __device__, __host__ empty; __shared__ is thread_local (one
 *     block runs at a time on an OS thread, so an OS thread's copy is its
 *     block's); threadIdx, blockIdx, blockDim, gridDim read the emulated
 *     thread now running (all of a block's threads are fibers of one OS
 *     thread, so a plain thread_local could not tell them apart).
 *   - __syncthreads, __syncwarp, the warp shuffles and votes, which switch
 *     fibers (cuda_emu_sched.cc); atomics as __atomic builtins; the float
 *     intrinsics the kernels use, rounded as IEEE operations (compiled with
 *     -ffp-contract=off so no multiply-add is fused unless fmaf says so).
 *   - cuemu::launch_of, what CU_LAUNCH (cuda_launch.h) becomes: it copies the
 *     arguments, as a launch does, and runs the grid before it returns.
 *
 * Every kernel launch is synchronous and in order; so is every "async" API
 * call. The checking mode (COL_CUDA_EMU_CHECK=1 or cuemu_set_check) runs each
 * launch twice in two thread orders and reports a result that depends on the
 * order (a missing __syncthreads, a race) as a launch error. */
#ifndef COL_CUDA_EMU_H
#define COL_CUDA_EMU_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <type_traits>

/* ---- the emulator's own controls (tests and the checking mode) ---- */
extern "C" {
/* 1: every launch runs twice (threads and blocks in two orders) and a result
 * that differs is a launch error; 0: once, blocks spread over OpenMP threads.
 * The start value is COL_CUDA_EMU_CHECK from the environment (default 0). */
void cuemu_set_check(int on);
int cuemu_check(void);
/* the emulator's message for the last error it reported on this host thread ("" if none) */
const char *cuemu_last_detail(void);
}

namespace cuemu {

/* one emulated CUDA thread (its fiber, its state at a barrier) */
struct thread_state {
    uint3 tid;          /* threadIdx */
    unsigned linear;    /* x + y dim.x + z dim.x dim.y */
    unsigned lane, warp;
};

/* the block now running on this OS thread */
struct block_state {
    uint3 idx;          /* blockIdx */
    dim3 dim;           /* blockDim */
    dim3 grid;          /* gridDim */
};

/* __thread, not thread_local: constant-initialised, so reading them costs no TLS wrapper call */
extern __thread thread_state *cur;
extern __thread const block_state *cur_block;

/* block barrier; warp barrier (mask); warp data exchange (kinds below) */
void syncthreads(const char *file, int line);
void syncwarp(const char *file, int line, unsigned mask = 0xffffffffu);
enum { W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ALL, W_ANY, W_SYNC, W_RADD, W_RMIN, W_RMAX, W_RAND, W_ROR, W_RXOR };
uint64_t warp_op(const char *file, int line, int kind, unsigned mask, uint64_t value, int arg, int width);

template <typename T> inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of a type over 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> inline T from_bits(uint64_t b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
template <typename T> inline T shfl(const char *f, int l, int kind, unsigned mask, T v, int arg, int width = 32)
{
    return from_bits<T>(warp_op(f, l, kind, mask, to_bits(v), arg, width));
}
/* __reduce_*_sync (sm_80): over 32-bit ints or unsigneds; arg tells the signedness */
template <typename T> inline T reduce(const char *f, int l, int kind, unsigned mask, T v)
{
    static_assert(std::is_integral<T>::value && sizeof(T) == 4, "__reduce_*_sync takes int or unsigned");
    return (T)(uint32_t)warp_op(f, l, kind, mask, (uint32_t)v, std::is_signed<T>::value, 32);
}

/* ---- launches ---- */

/* the closure of one launch: run(closure) runs the kernel as the current thread */
struct launch_desc {
    const void *kernel;           /* for cudaFuncSetAttribute's limits */
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    void (*run)(void *closure);
    void *closure;
    const void *args;             /* the copied arguments: pointers in them name what the check mode snapshots */
    size_t args_bytes;
    const void *const *ptr_args;  /* the pointer-typed arguments (checked to be device-accessible) */
    int nptr;
};
/* runs the grid (launch errors become cudaGetLastError's) */
void launch(const launch_desc &d);

template <typename T> inline const void *as_ptr(const T &v)
{
    if constexpr (std::is_pointer<T>::value)
        return (const void *)v;
    else
        return nullptr;
}

template <typename... P> struct launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    const char *name, *file;
    int line;
    /* takes exactly the kernel's parameter types, so the arguments convert as in a call */
    void operator()(P... a) const
    {
        struct closure {
            void (*k)(P...);
            std::tuple<P...> args;
        } c{kernel, std::tuple<P...>(a...)};
        const void *ptrs[sizeof...(P) + 1] = {as_ptr<P>(a)...};
        const bool isptr[sizeof...(P) + 1] = {std::is_pointer<P>::value...};
        const void *plist[sizeof...(P) + 1];
        int np = 0;
        for (size_t i = 0; i < sizeof...(P); i++)
            if (isptr[i])
                plist[np++] = ptrs[i];
        launch_desc d = {(const void *)kernel, name, file, line, grid, block, shmem, stream,
                         [](void *p) {
                             closure *cl = (closure *)p;
                             std::apply(cl->k, cl->args); /* each thread gets its own copies of the parameters */
                         },
                         &c, &c.args, sizeof c.args, plist, np};
        launch(d);
    }
};

template <typename... P>
inline launcher<P...> launch_of(void (*k)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, const char *name,
                                const char *file, int line)
{
    return launcher<P...>{k, grid, block, shmem, stream, name, file, line};
}

} /* namespace cuemu */

/* the runtime's calls that name a kernel, for a kernel function (nvcc's cuda_runtime.h has these templates) */
template <typename... P> inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), enum cudaFuncAttribute a, int v)
{
    return cudaFuncSetAttribute((const void *)k, a, v);
}
template <typename... P> inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, void (*k)(P...))
{
    return cudaFuncGetAttributes(a, (const void *)k);
}
template <typename... P>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void (*k)(P...), int block, size_t smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, (const void *)k, block, smem);
}

/* ---- CUDA C++'s device-side words ---- */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __launch_bounds__
#undef __forceinline__
#undef __noinline__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ thread_local
#define __launch_bounds__(...)
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))

#define threadIdx (::cuemu::cur->tid)
#define blockIdx (::cuemu::cur_block->idx)
#define blockDim (::cuemu::cur_block->dim)
#define gridDim (::cuemu::cur_block->grid)
#undef warpSize
constexpr int warpSize = 32; /* a constant, not a macro: cudaDeviceProp has a field of that name */

/* Dynamic shared memory: the arrays the kernels declare `extern __shared__ T
 * name[];` are the emulator's one buffer (its size is the launch's; past it
 * reads AddressSanitizer and the check mode catch). A new name needs its line
 * here, or the link fails on an undefined `name`. */
#define att_sm cuemu_dyn_smem

#define __syncthreads() ::cuemu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::cuemu::syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(m, v, ...) ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_SHFL, m, v, __VA_ARGS__)
#define __shfl_up_sync(m, v, ...) ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_UP, m, v, __VA_ARGS__)
#define __shfl_down_sync(m, v, ...) ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_DOWN, m, v, __VA_ARGS__)
#define __shfl_xor_sync(m, v, ...) ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_XOR, m, v, __VA_ARGS__)
#define __ballot_sync(m, p) ((unsigned)::cuemu::warp_op(__FILE__, __LINE__, ::cuemu::W_BALLOT, m, (p) != 0, 0, 32))
#define __all_sync(m, p) ((int)::cuemu::warp_op(__FILE__, __LINE__, ::cuemu::W_ALL, m, (p) != 0, 0, 32))
#define __any_sync(m, p) ((int)::cuemu::warp_op(__FILE__, __LINE__, ::cuemu::W_ANY, m, (p) != 0, 0, 32))
#undef __reduce_add_sync
#undef __reduce_min_sync
#undef __reduce_max_sync
#undef __reduce_and_sync
#undef __reduce_or_sync
#undef __reduce_xor_sync
#define __reduce_add_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_RADD, m, v)
#define __reduce_min_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_RMIN, m, v)
#define __reduce_max_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_RMAX, m, v)
#define __reduce_and_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_RAND, m, v)
#define __reduce_or_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_ROR, m, v)
#define __reduce_xor_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_RXOR, m, v)

/* CUDA's min and max of device code: the usual arithmetic conversions; floats as fminf / fmaxf */
template <typename A, typename B> inline typename std::common_type<A, B>::type min(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value)
        return std::fmin((C)a, (C)b);
    else
        return (C)a < (C)b ? (C)a : (C)b;
}
template <typename A, typename B> inline typename std::common_type<A, B>::type max(A a, B b)
{
    typedef typename std::common_type<A, B>::type C;
    if constexpr (std::is_floating_point<C>::value)
        return std::fmax((C)a, (C)b);
    else
        return (C)a > (C)b ? (C)a : (C)b;
}

/* __constant__ and __device__ variables are host globals: the symbol copies are memcpy */
template <typename T>
inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t count, size_t offset = 0,
                                      enum cudaMemcpyKind kind = cudaMemcpyHostToDevice)
{
    if (offset + count > sizeof(T) || !src)
        return cudaErrorInvalidValue;
    memcpy((char *)&symbol + offset, src, count);
    return (void)kind, cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count, size_t offset = 0,
                                        enum cudaMemcpyKind kind = cudaMemcpyDeviceToHost)
{
    if (offset + count > sizeof(T) || !dst)
        return cudaErrorInvalidValue;
    memcpy(dst, (const char *)&symbol + offset, count);
    return (void)kind, cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMemcpyToSymbolAsync(const T &symbol, const void *src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return (void)stream, cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
template <typename T>
inline cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const T &symbol, size_t count, size_t offset,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return (void)stream, cudaMemcpyFromSymbol(dst, symbol, count, offset, kind);
}

/* ---- atomics (blocks may run on several OS threads) ---- */
/* the value's type is the pointer's (not deduced from it), as CUDA's overloads convert */
template <typename T> struct cuemu_same { typedef T type; };
template <typename T> inline T atomicAdd(T *p, typename cuemu_same<T>::type v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicSub(T *p, typename cuemu_same<T>::type v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicAnd(T *p, typename cuemu_same<T>::type v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicOr(T *p, typename cuemu_same<T>::type v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicXor(T *p, typename cuemu_same<T>::type v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
template <typename T> inline T atomicExch(T *p, typename cuemu_same<T>::type v)
{
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <typename T> inline T atomicCAS(T *p, typename cuemu_same<T>::type expected, typename cuemu_same<T>::type desired)
{
    __atomic_compare_exchange(p, &expected, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected; /* the old value either way */
}
/* read-modify-write by compare-and-swap: float/double add, min, max */
template <typename T, typename F> inline T cuemu_atomic_rmw(T *p, F f)
{
    T old, nv;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do
        nv = f(old);
    while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
inline float atomicAdd(float *p, float v) { return cuemu_atomic_rmw(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double *p, double v) { return cuemu_atomic_rmw(p, [v](double o) { return o + v; }); }
template <typename T> inline T atomicMin(T *p, typename cuemu_same<T>::type v) { return cuemu_atomic_rmw(p, [v](T o) { return v < o ? v : o; }); }
template <typename T> inline T atomicMax(T *p, typename cuemu_same<T>::type v) { return cuemu_atomic_rmw(p, [v](T o) { return v > o ? v : o; }); }

/* ---- intrinsics: IEEE operations in round-to-nearest (no fusing: -ffp-contract=off) ---- */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float a) { return expf(a); }
inline float __logf(float a) { return logf(a); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __tanf(float a) { return tanf(a); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __saturatef(float a) { return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a == a ? a : 0.0f; }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
inline float __int_as_float(int v) { return ::cuemu::from_bits<float>((uint32_t)v); }
inline int __float_as_int(float v) { return (int)(uint32_t)::cuemu::to_bits(v); }
inline float __uint_as_float(unsigned v) { return ::cuemu::from_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return (unsigned)::cuemu::to_bits(v); }
inline double __longlong_as_double(long long v) { return ::cuemu::from_bits<double>((uint64_t)v); }
inline long long __double_as_longlong(double v) { return (long long)::cuemu::to_bits(v); }
inline int __float2int_rz(float v) { return (int)v; }
inline int __float2int_rn(float v) { return (int)nearbyintf(v); }
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcs(const T *p) { return *p; }
template <typename T> inline void __stcs(T *p, T v) { *p = v; }
inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

#endif
