/* test_cuda_emu.cu - the host emulator of CUDA itself (issue 13): CUDA C++
 * kernels compiled by g++ with -DCOL_CUDA_EMU (libcore/engine/cuda/emu).
 *
 * Each result is checked against what CUDA defines, computed here on the
 * host: __syncthreads as a barrier of the whole block (a warp that waits on
 * another), the warp shuffles, votes and __syncwarp (sub-warp widths, a
 * warp-only reduction beside a block barrier), static and dynamic shared
 * memory, atomics over many blocks, 3-D blocks and grids, launch limits;
 * what the check mode catches (a missing __syncthreads, threads that return
 * before a barrier, a divergent barrier, a shuffle naming a lane that has
 * returned, a write past the dynamic shared memory); the runtime's checks
 * (copies past an allocation, in the wrong direction, host pointers given to
 * a kernel, destroyed streams); cuBLASLt against a plain triple loop.
 *
 * Run alone: make tests/test_cuda_emu && ./tests/test_cuda_emu */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_launch.h"

extern "C" {
#include "testlib.h"
}

/* ---- kernels ---- */

/* out[b*n + t] = in of thread (t + 1) % n of the same block, through shared memory */
__global__ void k_rotate(int *out, int with_sync)
{
    __shared__ int sh[1024];
    int t = threadIdx.x, n = blockDim.x;
    sh[t] = (int)(blockIdx.x * 1000 + t);
    if (with_sync)
        __syncthreads();
    out[blockIdx.x * n + t] = sh[(t + 1) % n];
}

/* warp 0 reduces alone while the other warps wait at the barrier; then every thread reads it */
__global__ void k_warp0_sum(float *out, const float *in)
{
    __shared__ float total;
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    if (threadIdx.x < 32) {
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0)
            total = v;
    }
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = total;
}

/* each lane's results of the shuffles and votes */
__global__ void k_shuffles(int *out)
{
    int lane = threadIdx.x & 31, v = (int)threadIdx.x * 3 + 1;
    int *o = out + threadIdx.x * 9;
    o[0] = __shfl_sync(0xffffffffu, v, 5);       /* broadcast lane 5 */
    o[1] = __shfl_up_sync(0xffffffffu, v, 3);    /* lane - 3, own below 3 */
    o[2] = __shfl_down_sync(0xffffffffu, v, 2);  /* lane + 2, own at the top */
    o[3] = __shfl_xor_sync(0xffffffffu, v, 6);   /* lane ^ 6 */
    o[4] = __shfl_sync(0xffffffffu, v, 3, 8);    /* lane 3 of its group of 8 */
    o[5] = __shfl_down_sync(0xffffffffu, v, 1, 4);
    o[6] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[7] = __all_sync(0xffffffffu, v > 0) * 2 + __any_sync(0xffffffffu, lane == 31);
    __syncwarp();
    unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u; /* two independent half-warps */
    o[8] = __shfl_xor_sync(half, v, 1);
}

__constant__ int c_scale[4];

/* sm_80's warp reductions, min/max, constant memory */
__global__ void k_reductions(int *out)
{
    int lane = threadIdx.x & 31, v = (lane * 7) % 13 - 6;
    int *o = out + threadIdx.x * 6;
    o[0] = __reduce_add_sync(0xffffffffu, v);
    o[1] = __reduce_min_sync(0xffffffffu, v);
    o[2] = (int)__reduce_max_sync(0xffffffffu, (unsigned)v); /* as unsigned: -1 is the largest */
    o[3] = (int)__reduce_or_sync(0xffffffffu, 1u << (lane % 8));
    o[4] = min(v, 2) + max(lane, 30) * (int)max(1.5f, -2.0f);
    o[5] = c_scale[lane & 3];
}

/* dynamic shared memory: a block-wide reversal of its slice of in */
__global__ void k_reverse(float *out, const float *in)
{
    extern __shared__ float att_sm[];
    int t = threadIdx.x, n = blockDim.x;
    att_sm[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = att_sm[n - 1 - t];
}

/* writes one float past n floats of dynamic shared memory */
__global__ void k_overrun(int n)
{
    extern __shared__ float att_sm[];
    if (threadIdx.x == 0)
        att_sm[n] = 1.0f;
}

__global__ void k_atomics(int *count, float *fsum, unsigned long long *u, int *mx, long long *mn, int *cas)
{
    int g = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
    atomicAdd(u, 2ull);
    atomicMax(mx, g);
    atomicMin(mn, (long long)(1000 - g));
    if (g == 17)
        atomicCAS(cas, 0, 42);
}

/* 3-D blocks and grids: each thread writes its coordinates at its global slot */
__global__ void k_coords(int *out)
{
    int bx = blockDim.x, by = blockDim.y, bz = blockDim.z;
    int b = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    int t = (int)(threadIdx.x + bx * (threadIdx.y + by * threadIdx.z));
    int *o = out + ((size_t)b * bx * by * bz + t) * 6;
    o[0] = (int)threadIdx.x, o[1] = (int)threadIdx.y, o[2] = (int)threadIdx.z;
    o[3] = (int)blockIdx.x, o[4] = (int)blockIdx.y, o[5] = (int)blockIdx.z;
}

/* threads 32.. return while warp 0 waits at a barrier */
__global__ void k_early_return(int *out)
{
    if (threadIdx.x >= 32)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* odd and even threads at two different __syncthreads */
__global__ void k_divergent(int *out)
{
    if (threadIdx.x & 1)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}

/* the upper half of the warp returns; the lower half shuffles with all 32 lanes */
__global__ void k_shfl_exited(int *out)
{
    int lane = threadIdx.x & 31;
    if (lane >= 16)
        return;
    out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
}

__global__ void k_nothing(int *out) { out[threadIdx.x] = 0; }

/* every block writes the same word: the last block wins, whichever that is (a race between blocks) */
__global__ void k_block_race(int *out)
{
    if (threadIdx.x == 0)
        out[0] = (int)blockIdx.x;
}

/* lanes exchange through shared memory; with_sync: __syncwarp between the write and the read */
__global__ void k_lane_swap(int *out, int with_sync)
{
    __shared__ int sh[32];
    int l = threadIdx.x & 31;
    sh[l] = l * 10 + (int)blockIdx.x;
    if (with_sync)
        __syncwarp();
    out[blockIdx.x * 32 + l] = sh[l ^ 1];
}

/* ---- helpers ---- */

static void *dev(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        printf("Bail out! cudaMalloc of %zu bytes: %s\n", bytes, cudaGetErrorString(cudaGetLastError()));
        exit(1);
    }
    return p;
}

/* the launch's error (cudaGetLastError) and the emulator's message containing want */
static bool launch_failed(cudaError_t code, const char *want)
{
    cudaError_t e = cudaGetLastError();
    const char *msg = cudaGetErrorString(e);
    bool ok = e == code && strstr(msg, want) != NULL;
    if (!ok)
        TL_NOTE("got %s: %s", cudaGetErrorName(e), msg);
    return ok;
}

/* a runtime call refused with cudaErrorInvalidValue and the emulator's message saying why */
static void refused(cudaError_t got, const char *want, const char *what)
{
    const char *msg = cudaGetErrorString(got);
    TL_OK(got == cudaErrorInvalidValue && strstr(msg, want) != NULL, "%s is refused: %s", what, msg);
    cudaGetLastError();
}

/* ---- the tests ---- */

static void test_barrier(void)
{
    const int nb = 3, n = 256;
    int *d = (int *)dev(sizeof(int) * nb * n), h[3 * 256];
    for (int check = 0; check < 2; check++) {
        cuemu_set_check(check);
        CU_LAUNCH(k_rotate, nb, n, 0, 0)(d, 1);
        cudaError_t e = cudaGetLastError();
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int b = 0; b < nb; b++)
            for (int t = 0; t < n; t++)
                bad += h[b * n + t] != b * 1000 + (t + 1) % n;
        TL_OK(e == cudaSuccess && bad == 0, "__syncthreads: every thread reads its neighbour's value (%s mode, %d wrong)",
              check ? "check" : "normal", bad);
    }
    /* without the barrier the check mode sees the result change with the order of the threads */
    cuemu_set_check(1);
    CU_LAUNCH(k_rotate, nb, n, 0, 0)(d, 0);
    TL_OK(launch_failed(cudaErrorLaunchFailure, "depends on the order of the threads"),
          "check mode: a missing __syncthreads is a launch error");
    CU_LAUNCH(k_lane_swap, nb, 32, 0, 0)(d, 1);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(h, d, sizeof(int) * nb * 32, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int b = 0; b < nb; b++)
        for (int l = 0; l < 32; l++)
            bad += h[b * 32 + l] != (l ^ 1) * 10 + b;
    TL_OK(e == cudaSuccess && bad == 0, "check mode: lanes exchanging through shared memory after __syncwarp (%d wrong)", bad);
    CU_LAUNCH(k_lane_swap, nb, 32, 0, 0)(d, 0);
    TL_OK(launch_failed(cudaErrorLaunchFailure, "depends on the order of the threads"),
          "check mode: the same without __syncwarp is a launch error");
    CU_LAUNCH(k_block_race, 5, 32, 0, 0)(d);
    TL_OK(launch_failed(cudaErrorLaunchFailure, "depends on the order of the threads"),
          "check mode: blocks writing the same word is a launch error");
    cuemu_set_check(0);
    cudaFree(d);
}

static void test_warp_reduce(void)
{
    const int nb = 4, n = 128;
    float hin[4 * 128], hout[4 * 128];
    for (int i = 0; i < nb * n; i++)
        hin[i] = (float)(i % 7) - 2.0f;
    float *in = (float *)dev(sizeof hin), *out = (float *)dev(sizeof hout);
    cudaMemcpy(in, hin, sizeof hin, cudaMemcpyHostToDevice);
    for (int check = 0; check < 2; check++) {
        cuemu_set_check(check);
        CU_LAUNCH(k_warp0_sum, nb, n, 0, 0)(out, in);
        cudaError_t e = cudaGetLastError();
        cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int b = 0; b < nb; b++) {
            float s = 0;
            for (int t = 0; t < 32; t++)
                s += hin[b * n + t];
            for (int t = 0; t < n; t++)
                bad += hout[b * n + t] != s;
        }
        TL_OK(e == cudaSuccess && bad == 0,
              "warp 0 reduces by shuffles while warps 1-3 wait at __syncthreads (%s mode): %d wrong", check ? "check" : "normal",
              bad);
    }
    cuemu_set_check(0);
    cudaFree(in), cudaFree(out);
}

static void test_shuffles(void)
{
    const int n = 64;
    int *d = (int *)dev(sizeof(int) * n * 9), h[64 * 9];
    CU_LAUNCH(k_shuffles, 1, n, 0, 0)(d);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int bad[9] = {0};
    for (int t = 0; t < n; t++) {
        int l = t & 31, w = t - l;
#define V(lane) ((w + (lane)) * 3 + 1)
        int exp[9] = {V(5),
                      l >= 3 ? V(l - 3) : V(l),
                      l + 2 < 32 ? V(l + 2) : V(l),
                      V(l ^ 6),
                      V((l & ~7) + 3),
                      (l & 3) + 1 < 4 ? V(l + 1) : V(l),
                      0,
                      2 + 1,
                      V(l ^ 1)};
#undef V
        for (int l2 = 0; l2 < 32; l2 += 3)
            exp[6] |= 1 << l2;
        for (int k = 0; k < 9; k++)
            bad[k] += h[t * 9 + k] != exp[k];
    }
    TL_OK(e == cudaSuccess, "the shuffle kernel runs: %s", cudaGetErrorString(e));
    static const char *what[9] = {"__shfl_sync broadcast", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__shfl_sync width 8", "__shfl_down_sync width 4", "__ballot_sync", "__all_sync/__any_sync",
                                  "__shfl_xor_sync over two half-warp masks"};
    for (int k = 0; k < 9; k++)
        TL_OK(bad[k] == 0, "%s: every lane of two warps gets CUDA's value (%d wrong)", what[k], bad[k]);
    cudaFree(d);
}

static void test_reductions(void)
{
    const int n = 64;
    int *d = (int *)dev(sizeof(int) * n * 6), h[64 * 6], cs[4] = {3, -1, 7, 11};
    cudaError_t e1 = cudaMemcpyToSymbol(c_scale, cs, sizeof cs);
    CU_LAUNCH(k_reductions, 1, n, 0, 0)(d);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int sum = 0, mn = 1 << 30;
    unsigned umx = 0;
    for (int l = 0; l < 32; l++) {
        int v = (l * 7) % 13 - 6;
        sum += v;
        mn = v < mn ? v : mn;
        umx = (unsigned)v > umx ? (unsigned)v : umx;
    }
    int bad[6] = {0};
    for (int t = 0; t < n; t++) {
        int l = t & 31, v = (l * 7) % 13 - 6;
        int exp[6] = {sum, mn, (int)umx, 0xff, (v < 2 ? v : 2) + (l > 30 ? l : 30) * 1, cs[l & 3]};
        for (int k = 0; k < 6; k++)
            bad[k] += h[t * 6 + k] != exp[k];
    }
    TL_OK(e1 == cudaSuccess && e == cudaSuccess && !bad[0] && !bad[1] && !bad[2] && !bad[3],
          "__reduce_add/min/max/or_sync over two warps, int and unsigned (%d, %d, %d, %d wrong)", bad[0], bad[1], bad[2],
          bad[3]);
    TL_OK(bad[4] == 0, "min and max of device code, ints and floats (%d wrong)", bad[4]);
    TL_OK(bad[5] == 0, "__constant__ memory written by cudaMemcpyToSymbol (%d wrong)", bad[5]);
    cudaFree(d);
}

static void test_dynamic_smem(void)
{
    const int nb = 2, n = 512;
    float hin[2 * 512], hout[2 * 512];
    for (int i = 0; i < nb * n; i++)
        hin[i] = (float)i;
    float *in = (float *)dev(sizeof hin), *out = (float *)dev(sizeof hout);
    cudaMemcpy(in, hin, sizeof hin, cudaMemcpyHostToDevice);
    CU_LAUNCH(k_reverse, nb, n, n * sizeof(float), 0)(out, in);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < n; t++)
            bad += hout[b * n + t] != hin[b * n + n - 1 - t];
    TL_OK(e == cudaSuccess && bad == 0, "extern __shared__ of the launch's size: a block-wide reversal (%d wrong)", bad);

    /* over 48 KiB needs cudaFuncSetAttribute, as on a GPU */
    size_t big = 64 * 1024;
    CU_LAUNCH(k_reverse, 1, 32, big, 0)(out, in);
    TL_OK(launch_failed(cudaErrorInvalidValue, "dynamic shared memory"),
          "64 KiB of dynamic shared memory without cudaFuncSetAttribute is refused");
    cudaError_t a = cudaFuncSetAttribute(k_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big);
    CU_LAUNCH(k_reverse, 1, 32, big, 0)(out, in);
    TL_OK(a == cudaSuccess && cudaGetLastError() == cudaSuccess, "... and runs after it");

#if !defined(__SANITIZE_ADDRESS__) /* under AddressSanitizer the write stops the program: the emulator poisons those bytes */
    cuemu_set_check(1);
    CU_LAUNCH(k_overrun, 1, 32, 64 * sizeof(float), 0)(64);
    TL_OK(launch_failed(cudaErrorLaunchFailure, "past the 256 bytes"),
          "check mode: a write past the launch's dynamic shared memory is a launch error");
    cuemu_set_check(0);
#else
    tl_skip_check("a write past the dynamic shared memory", "AddressSanitizer reports it (the emulator poisons those bytes)");
#endif
    cudaFree(in), cudaFree(out);
}

static void test_atomics(void)
{
    int *count = (int *)dev(sizeof(int)), *mx = (int *)dev(sizeof(int)), *cas = (int *)dev(sizeof(int));
    float *fsum = (float *)dev(sizeof(float));
    unsigned long long *u = (unsigned long long *)dev(8);
    long long *mn = (long long *)dev(8);
    int zero = 0, minus = -1;
    float fz = 0.0f;
    long long big = 1 << 30;
    unsigned long long uz = 0;
    cudaMemcpy(count, &zero, 4, cudaMemcpyHostToDevice), cudaMemcpy(cas, &zero, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(mx, &minus, 4, cudaMemcpyHostToDevice), cudaMemcpy(fsum, &fz, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(u, &uz, 8, cudaMemcpyHostToDevice), cudaMemcpy(mn, &big, 8, cudaMemcpyHostToDevice);
    const int nb = 37, n = 96; /* blocks spread over OpenMP threads */
    CU_LAUNCH(k_atomics, nb, n, 0, 0)(count, fsum, u, mx, mn, cas);
    cudaError_t e = cudaGetLastError();
    int hc, hm, hcas;
    float hf;
    unsigned long long hu;
    long long hmn;
    cudaMemcpy(&hc, count, 4, cudaMemcpyDeviceToHost), cudaMemcpy(&hm, mx, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hcas, cas, 4, cudaMemcpyDeviceToHost), cudaMemcpy(&hf, fsum, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hu, u, 8, cudaMemcpyDeviceToHost), cudaMemcpy(&hmn, mn, 8, cudaMemcpyDeviceToHost);
    int total = nb * n;
    TL_OK(e == cudaSuccess && hc == total && hf == 0.5f * (float)total && hu == 2ull * (unsigned long long)total &&
              hm == total - 1 && hmn == 1000 - (total - 1) && hcas == 42,
          "atomics over %d threads: add int %d, float %g, u64 %llu, max %d, min %lld, CAS %d", total, hc, (double)hf, hu, hm,
          hmn, hcas);
    cudaFree(count), cudaFree(mx), cudaFree(cas), cudaFree(fsum), cudaFree(u), cudaFree(mn);
}

static void test_coords(void)
{
    dim3 grid(2, 3, 2), block(4, 3, 5);
    int nthreads = 2 * 3 * 2 * 4 * 3 * 5;
    int *d = (int *)dev(sizeof(int) * 6 * nthreads), *h = (int *)malloc(sizeof(int) * 6 * nthreads);
    CU_LAUNCH(k_coords, grid, block, 0, 0)(d);
    cudaError_t e = cudaGetLastError();
    cudaMemcpy(h, d, sizeof(int) * 6 * nthreads, cudaMemcpyDeviceToHost);
    int bad = 0, i = 0;
    for (int bz = 0; bz < 2; bz++)
        for (int by = 0; by < 3; by++)
            for (int bx = 0; bx < 2; bx++)
                for (int tz = 0; tz < 5; tz++)
                    for (int ty = 0; ty < 3; ty++)
                        for (int tx = 0; tx < 4; tx++, i++) {
                            int *o = h + i * 6;
                            bad += o[0] != tx || o[1] != ty || o[2] != tz || o[3] != bx || o[4] != by || o[5] != bz;
                        }
    TL_OK(e == cudaSuccess && bad == 0, "3-D grid and blocks: threadIdx, blockIdx of every thread (%d wrong)", bad);
    free(h);
    cudaFree(d);
}

static void test_kernel_errors(void)
{
    int *d = (int *)dev(sizeof(int) * 1024);
    for (int check = 0; check < 2; check++) {
        cuemu_set_check(check);
        const char *m = check ? "check" : "normal";
        CU_LAUNCH(k_early_return, 2, 128, 0, 0)(d);
        TL_OK(launch_failed(cudaErrorLaunchFailure, "has returned while thread"),
              "%s mode: threads that return before a __syncthreads others wait at are a launch error", m);
        CU_LAUNCH(k_divergent, 1, 64, 0, 0)(d);
        TL_OK(launch_failed(cudaErrorLaunchFailure, "divergent __syncthreads"),
              "%s mode: threads at two different __syncthreads are a launch error", m);
        CU_LAUNCH(k_shfl_exited, 1, 32, 0, 0)(d);
        TL_OK(launch_failed(cudaErrorLaunchFailure, "has returned"),
              "%s mode: a shuffle whose mask names lanes that returned is a launch error", m);
    }
    cuemu_set_check(0);
    CU_LAUNCH(k_nothing, 1, 1025, 0, 0)(d);
    TL_OK(launch_failed(cudaErrorInvalidConfiguration, "1025"), "a block of 1025 threads is refused");
    CU_LAUNCH(k_nothing, dim3(1, 70000), 32, 0, 0)(d);
    TL_OK(launch_failed(cudaErrorInvalidConfiguration, "70000"), "a grid.y of 70000 is refused");
    int host[32];
    CU_LAUNCH(k_nothing, 1, 32, 0, 0)(host);
    TL_OK(launch_failed(cudaErrorIllegalAddress, "pointer argument 1"), "a pageable host pointer given to a kernel is refused");
    CU_LAUNCH(k_nothing, 1, 32, 0, 0)(d);
    TL_OK(cudaGetLastError() == cudaSuccess, "after them a good launch succeeds (the errors are not sticky)");
    cudaFree(d);
}

static void test_runtime(void)
{
    char *d = (char *)dev(100), host[200];
    memset(host, 1, sizeof host);
    refused(cudaMemcpy(d, host, 101, cudaMemcpyHostToDevice), "runs past the end of the 100-byte device memory",
            "a copy of 101 bytes into 100 of device memory");
    refused(cudaMemcpy(host, d, 10, cudaMemcpyHostToDevice), "which a to-device copy cannot write",
            "a to-device copy into host memory");
    refused(cudaMemcpy(host, d, 10, cudaMemcpyHostToHost), "which a from-host copy cannot read",
            "a host-to-host copy from device memory");
    refused(cudaMemcpy(d + 10, d, 20, cudaMemcpyDeviceToDevice), "overlap", "a copy between overlapping ranges");
    refused(cudaMemset(host, 0, 10), "not memory the device can reach", "cudaMemset on pageable host memory");
    refused(cudaFree(d + 1), "not the start of a cudaMalloc allocation", "cudaFree inside an allocation");
    cudaMemcpy(d, host, 100, cudaMemcpyHostToDevice);
    char back[100];
    cudaMemset(d + 50, 7, 10);
    cudaMemcpy(back, d, 100, cudaMemcpyDeviceToHost);
    TL_OK(back[0] == 1 && back[49] == 1 && back[50] == 7 && back[59] == 7 && back[60] == 1, "copies and memset move the bytes");

    cudaPointerAttributes at;
    void *pinned = NULL;
    cudaMallocHost(&pinned, 64);
    cudaPointerGetAttributes(&at, d + 5);
    bool a1 = at.type == cudaMemoryTypeDevice;
    cudaPointerGetAttributes(&at, pinned);
    bool a2 = at.type == cudaMemoryTypeHost;
    cudaPointerGetAttributes(&at, host);
    bool a3 = at.type == cudaMemoryTypeUnregistered;
    TL_OK(a1 && a2 && a3, "pointer attributes: device, pinned host, pageable host");
    TL_OK(cudaHostRegister(host, sizeof host, 0) == cudaSuccess && cudaMemcpy(host, d, 10, cudaMemcpyDeviceToDevice) == cudaSuccess &&
              cudaHostUnregister(host) == cudaSuccess,
          "registered host memory is device-accessible until unregistered");
    cudaGetLastError();

    cudaStream_t s;
    cudaEvent_t e0, e1;
    float ms = -1;
    bool ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
              cudaEventCreate(&e1) == cudaSuccess && cudaEventRecord(e0, s) == cudaSuccess &&
              cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
              cudaStreamWaitEvent(s, e0, 0) == cudaSuccess && cudaEventRecord(e1, s) == cudaSuccess &&
              cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms >= 0.0f &&
              cudaEventQuery(e1) == cudaSuccess && cudaStreamQuery(s) == cudaSuccess;
    TL_OK(ok && memcmp(pinned, back, 64) == 0, "streams and events: async copy to pinned memory, elapsed %.3f ms", (double)ms);
    cudaStreamDestroy(s);
    TL_OK(cudaMemcpyAsync(pinned, d, 8, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidResourceHandle,
          "a destroyed stream is an invalid handle");
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFreeHost(pinned);
    size_t fr = 0, tot = 0;
    void *huge = NULL;
    cudaMemGetInfo(&fr, &tot);
    TL_OK(cudaMalloc(&huge, tot + 1) == cudaErrorMemoryAllocation && huge == NULL,
          "an allocation over the device's %zu bytes is cudaErrorMemoryAllocation", tot);
    cudaGetLastError();
    cudaFree(d);
}

/* cuBLASLt against a plain loop: op(A) [m,k] op(B) [k,n], column-major, batches */
static double gemm_case(int m, int n, int k, bool ta, bool tb, int batch, cudaDataType_t ab, cudaDataType_t cd, float beta,
                        cublasComputeType_t ct)
{
    int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 3;
    int64_t sa = (int64_t)lda * (ta ? m : k) + 5, sb = (int64_t)ldb * (tb ? k : n) + 1, sc = (int64_t)ldc * n;
    size_t ea = ab == CUDA_R_32F ? 4 : 2, ec = cd == CUDA_R_32F ? 4 : 2;
    size_t na = (size_t)(sa * batch), nb = (size_t)(sb * batch), nc = (size_t)(sc * batch);
    float *fa = (float *)malloc(na * 4), *fb = (float *)malloc(nb * 4), *fc = (float *)malloc(nc * 4);
    unsigned char *ha = (unsigned char *)malloc(na * ea), *hb = (unsigned char *)malloc(nb * ea);
    unsigned char *hc = (unsigned char *)malloc(nc * ec);
    for (size_t i = 0; i < na; i++) /* values with more bits than TF32 or bf16 hold */
        fa[i] = (float)((i * 7919) % 1001) / 1000.0f - 0.5f;
    for (size_t i = 0; i < nb; i++)
        fb[i] = (float)((i * 104729) % 997) / 996.0f - 0.5f;
    for (size_t i = 0; i < nc; i++)
        fc[i] = (float)(i % 5) - 2.0f;
    /* the host copies in the operands' types, and the values they hold */
    for (size_t i = 0; i < na + nb + nc; i++) {
        bool isc = i >= na + nb;
        float *f = i < na ? &fa[i] : i < na + nb ? &fb[i - na] : &fc[i - na - nb];
        unsigned char *h = i < na ? ha + i * ea : i < na + nb ? hb + (i - na) * ea : hc + (i - na - nb) * ec;
        cudaDataType_t t = isc ? cd : ab;
        if (t == CUDA_R_32F)
            memcpy(h, f, 4);
        else if (t == CUDA_R_16BF) {
            __nv_bfloat16 v = __float2bfloat16_rn(*f);
            memcpy(h, &v, 2), *f = __bfloat162float(v);
        } else {
            __half v = __float2half_rn(*f);
            memcpy(h, &v, 2), *f = __half2float(v);
        }
    }
    void *da = dev(na * ea), *db = dev(nb * ea), *dc = dev(nc * ec);
    cudaMemcpy(da, ha, na * ea, cudaMemcpyHostToDevice), cudaMemcpy(db, hb, nb * ea, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, hc, nc * ec, cudaMemcpyHostToDevice);
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t bc = batch;
    cublasLtCreate(&lt);
    cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
    cublasLtMatrixLayoutCreate(&la, ab, ta ? k : m, ta ? m : k, lda);
    cublasLtMatrixLayoutCreate(&lb, ab, tb ? n : k, tb ? k : n, ldb);
    cublasLtMatrixLayoutCreate(&lc, cd, m, n, ldc);
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa);
    cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb);
    cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc);
    cublasLtMatmulPreferenceCreate(&pref);
    uint32_t al = 2; /* the odd batch strides: 2-byte alignment promised */
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
        cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t hr;
    int found = 0;
    float alpha = 0.75f;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &hr, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found == 1)
        st = cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dc, lc, dc, lc, &hr.algo, NULL, 0, 0);
    cudaMemcpy(hc, dc, nc * ec, cudaMemcpyDeviceToHost);
    double worst = st == CUBLAS_STATUS_SUCCESS && found == 1 ? 0.0 : INFINITY;
    for (int bi = 0; bi < batch && isfinite(worst); bi++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int l = 0; l < k; l++) {
                    double x = fa[bi * sa + (ta ? l + (size_t)i * lda : i + (size_t)l * lda)];
                    double y = fb[bi * sb + (tb ? j + (size_t)l * ldb : l + (size_t)j * ldb)];
                    s += x * y;
                }
                size_t ci = (size_t)(bi * sc) + i + (size_t)j * ldc;
                double want = alpha * s + beta * fc[ci], got;
                if (cd == CUDA_R_32F) {
                    float g;
                    memcpy(&g, hc + ci * 4, 4);
                    got = g;
                } else if (cd == CUDA_R_16BF) {
                    __nv_bfloat16 g;
                    memcpy(&g, hc + ci * 2, 2);
                    got = __bfloat162float(g);
                } else {
                    __half g;
                    memcpy(&g, hc + ci * 2, 2);
                    got = __half2float(g);
                }
                double e = fabs(got - want) / (fabs(want) + 1.0);
                worst = e > worst ? e : worst;
            }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    cudaFree(da), cudaFree(db), cudaFree(dc);
    free(fa), free(fb), free(fc), free(ha), free(hb), free(hc);
    return worst;
}

static void test_blaslt(void)
{
    struct {
        int m, n, k;
        bool ta, tb;
        int batch;
        cudaDataType_t ab, cd;
        float beta;
        cublasComputeType_t ct;
        double tol;
        const char *what;
    } cs[] = {
        {17, 9, 33, false, false, 1, CUDA_R_32F, CUDA_R_32F, 0.0f, CUBLAS_COMPUTE_32F, 1e-6, "f32 NN"},
        {17, 9, 33, true, false, 3, CUDA_R_32F, CUDA_R_32F, 0.5f, CUBLAS_COMPUTE_32F, 1e-6, "f32 TN, 3 batches, beta 0.5"},
        {5, 12, 7, false, true, 2, CUDA_R_32F, CUDA_R_32F, 1.0f, CUBLAS_COMPUTE_32F, 1e-6, "f32 NT, 2 batches, beta 1"},
        {6, 4, 40, true, true, 1, CUDA_R_32F, CUDA_R_32F, 0.0f, CUBLAS_COMPUTE_32F_FAST_TF32, 2e-3, "f32 TT in TF32"},
        {16, 8, 24, false, true, 2, CUDA_R_16BF, CUDA_R_32F, 0.0f, CUBLAS_COMPUTE_32F, 1e-6, "bf16 in, f32 out"},
        {16, 8, 24, true, false, 1, CUDA_R_16BF, CUDA_R_16BF, 0.5f, CUBLAS_COMPUTE_32F, 8e-3, "bf16 in and out, beta 0.5"},
        {9, 10, 11, false, false, 2, CUDA_R_16F, CUDA_R_16F, 0.0f, CUBLAS_COMPUTE_32F, 1e-3, "f16 in and out"},
    };
    for (const auto &c : cs) {
        double w = gemm_case(c.m, c.n, c.k, c.ta, c.tb, c.batch, c.ab, c.cd, c.beta, c.ct);
        TL_OK(w <= c.tol, "cuBLASLt %s [%d,%d,%d]: worst relative error %.2e (bound %.0e)", c.what, c.m, c.n, c.k, w, c.tol);
    }
    /* TF32 rounds the inputs: the error against f32 is that of 10-bit mantissas, not 0 */
    double w = gemm_case(6, 4, 40, true, true, 1, CUDA_R_32F, CUDA_R_32F, 0.0f, CUBLAS_COMPUTE_32F_FAST_TF32);
    TL_OK(w > 1e-5, "cuBLASLt TF32 is not full f32: error %.2e against the f32 product", w);
}

int main(void)
{
    int n = 0;
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n == 1 && cudaGetDeviceProperties(&p, 0) == cudaSuccess;
    TL_OK(ok && strstr(p.name, "emulator") && p.major >= 8, "one emulated device: %s, sm_%d%d, %d SMs", p.name, p.major,
          p.minor, p.multiProcessorCount);
    test_barrier();
    test_warp_reduce();
    test_shuffles();
    test_reductions();
    test_dynamic_smem();
    test_atomics();
    test_coords();
    test_kernel_errors();
    test_runtime();
    test_blaslt();
    return tl_done();
}
