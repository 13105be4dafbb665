/* cuda_reduce.cu - CUDA kernels for sum / mean / max over a set of axes,
 * and max's gradient.
 *
 * The input is split into kept axes (the output's order) and reduced axes;
 * each output element reduces its slab, sums in double as on the CPU. A warp
 * reduces one slab when the reduced axes are the inner ones, a thread one
 * slab when the kept axes are (then neighbouring threads read neighbouring
 * elements). max propagates NaN like the CPU kernel.
 *
 * Few outputs over long slabs (a full reduction: one output) would leave
 * most of the device idle that way, so they go in two passes: each slab is
 * cut into parts by its length alone (not by the device or the timing), a
 * block or a thread reduces each part into the backend workspace, then one
 * warp per output reduces its parts in a fixed order. The result is the
 * same from run to run. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"

template <typename T> __device__ __forceinline__ T max_nan(T m, T v) { return (v > m || isnan(v)) ? v : m; }

template <int OP>
__global__ void k_red_thread(float *__restrict__ out, const float *__restrict__ x, cu_td kept, cu_td red, int64_t nout,
                             int64_t nred)
{
    CU_GRID_LOOP(o, nout) {
        const float *b = x + cu_off(kept, o);
        if (OP == COL_OP_MAX) {
            float m = -INFINITY;
            for (int64_t r = 0; r < nred; r++)
                m = max_nan(m, b[cu_off(red, r)]);
            out[o] = m;
        } else {
            double s = 0.0;
            for (int64_t r = 0; r < nred; r++)
                s += b[cu_off(red, r)];
            out[o] = OP == COL_OP_MEAN ? (nred ? (float)(s / (double)nred) : NAN) : (float)s;
        }
    }
}

template <int OP>
__global__ void k_red_warp(float *__restrict__ out, const float *__restrict__ x, cu_td kept, cu_td red, int64_t nout,
                           int64_t nred)
{
    int lane = threadIdx.x & 31;
    int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t o = w0; o < nout; o += nw) {
        const float *b = x + cu_off(kept, o);
        if (OP == COL_OP_MAX) {
            float m = -INFINITY;
            for (int64_t r = lane; r < nred; r += 32)
                m = max_nan(m, b[cu_off(red, r)]);
            for (int k = 16; k > 0; k >>= 1)
                m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, k));
            if (lane == 0)
                out[o] = m;
        } else {
            double s = 0.0;
            for (int64_t r = lane; r < nred; r += 32)
                s += b[cu_off(red, r)];
            s = cu_warp_sum(s);
            if (lane == 0)
                out[o] = OP == COL_OP_MEAN ? (nred ? (float)(s / (double)nred) : NAN) : (float)s;
        }
    }
}

template <int OP>
static void launch_reduce(const col_cuda_ctx *c, bool warp, float *out, const float *x, cu_td kept, cu_td red, int64_t nout,
                          int64_t nred)
{
    if (warp)
        CU_LAUNCH(k_red_warp<OP>, cu_blocks(c, nout * 32), CU_THREADS, 0, c->stream)(out, x, kept, red, nout, nred);
    else
        CU_LAUNCH(k_red_thread<OP>, cu_blocks(c, nout), CU_THREADS, 0, c->stream)(out, x, kept, red, nout, nred);
}

/* ---- two passes: parts of P per slab, partial results (double) in the workspace ---- */

#define RED_PART_MIN 2048 /* elements a part has at least */
#define RED_PARTS_MAX 1024

/* pass 1, the reduced axes inner: a block per (output o, part p) over
 * elements [p nred / P, (p+1) nred / P) of slab o; part[o P + p] */
template <int OP>
__global__ void k_red_part_block(double *__restrict__ part, const float *__restrict__ x, cu_td kept, cu_td red,
                                 int64_t nout, int64_t nred, int64_t P)
{
    __shared__ double sh[32];
    for (int64_t q = blockIdx.x; q < nout * P; q += gridDim.x) {
        int64_t o = q / P, p = q % P, r0 = nred * p / P, r1 = nred * (p + 1) / P;
        const float *b = x + cu_off(kept, o);
        /* four loads in flight per thread (four running values, joined in a fixed order) */
        const double init = OP == COL_OP_MAX ? -INFINITY : 0.0;
        double v = init, w[3] = {init, init, init};
        int64_t r = r0 + threadIdx.x;
        const int64_t bd = blockDim.x;
        for (; r + 3 * bd < r1; r += 4 * bd) {
            double e0 = b[cu_off(red, r)], e1 = b[cu_off(red, r + bd)], e2 = b[cu_off(red, r + 2 * bd)],
                   e3 = b[cu_off(red, r + 3 * bd)];
            v = OP == COL_OP_MAX ? max_nan(v, e0) : v + e0;
            w[0] = OP == COL_OP_MAX ? max_nan(w[0], e1) : w[0] + e1;
            w[1] = OP == COL_OP_MAX ? max_nan(w[1], e2) : w[1] + e2;
            w[2] = OP == COL_OP_MAX ? max_nan(w[2], e3) : w[2] + e3;
        }
        for (; r < r1; r += bd) {
            double e = b[cu_off(red, r)];
            v = OP == COL_OP_MAX ? max_nan(v, e) : v + e;
        }
        for (int k = 0; k < 3; k++)
            v = OP == COL_OP_MAX ? max_nan(v, w[k]) : v + w[k];
        if (OP == COL_OP_MAX) {
            for (int k = 16; k > 0; k >>= 1)
                v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, k));
            __syncthreads(); /* sh of the previous q is read */
            if ((threadIdx.x & 31) == 0)
                sh[threadIdx.x >> 5] = v;
            __syncthreads();
            if (threadIdx.x < 32) {
                v = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : -INFINITY;
                for (int k = 16; k > 0; k >>= 1)
                    v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, k));
            }
        } else {
            __syncthreads();
            v = cu_block_sum(v, sh);
        }
        if (threadIdx.x == 0)
            part[q] = v;
    }
}

/* pass 1, the kept axes inner: a thread per (output o, part p), neighbouring
 * threads on neighbouring outputs; part[o P + p] */
template <int OP>
__global__ void k_red_part_thread(double *__restrict__ part, const float *__restrict__ x, cu_td kept, cu_td red,
                                  int64_t nout, int64_t nred, int64_t P)
{
    CU_GRID_LOOP(q, nout * P) {
        int64_t p = q / nout, o = q % nout, r0 = nred * p / P, r1 = nred * (p + 1) / P;
        const float *b = x + cu_off(kept, o);
        double v = OP == COL_OP_MAX ? -INFINITY : 0.0;
        for (int64_t r = r0; r < r1; r++) {
            double e = b[cu_off(red, r)];
            v = OP == COL_OP_MAX ? max_nan(v, e) : v + e;
        }
        part[o * P + p] = v;
    }
}

/* pass 2: a warp per output over its P parts (lanes strided, then a fixed tree) */
template <int OP>
__global__ void k_red_final(float *__restrict__ out, const double *__restrict__ part, int64_t nout, int64_t nred, int64_t P)
{
    int lane = threadIdx.x & 31;
    int64_t w0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t o = w0; o < nout; o += nw) {
        double v = OP == COL_OP_MAX ? -INFINITY : 0.0;
        for (int64_t p = lane; p < P; p += 32)
            v = OP == COL_OP_MAX ? max_nan(v, part[o * P + p]) : v + part[o * P + p];
        for (int k = 16; k > 0; k >>= 1) {
            double w = __shfl_xor_sync(0xffffffffu, v, k);
            v = OP == COL_OP_MAX ? max_nan(v, w) : v + w;
        }
        if (lane == 0)
            out[o] = OP == COL_OP_MAX ? (float)v : OP == COL_OP_MEAN ? (float)(v / (double)nred) : (float)v;
    }
}

template <int OP>
static void launch_two_pass(const col_cuda_ctx *c, bool by_block, float *out, const float *x, cu_td kept, cu_td red,
                            int64_t nout, int64_t nred, int64_t P)
{
    double *part = (double *)c->ws;
    if (by_block)
        CU_LAUNCH(k_red_part_block<OP>, cu_blocks(c, nout * P * CU_THREADS), CU_THREADS, 0, c->stream)(
            part, x, kept, red, nout, nred, P);
    else
        CU_LAUNCH(k_red_part_thread<OP>, cu_blocks(c, nout * P), CU_THREADS, 0, c->stream)(
            part, x, kept, red, nout, nred, P);
    CU_LAUNCH(k_red_final<OP>, cu_blocks(c, nout * 32), CU_THREADS, 0, c->stream)(out, part, nout, nred, P);
}

/* parts per slab for the two passes, or 0 for one pass: by the shape alone */
static int64_t two_pass_parts(const col_cuda_ctx *c, bool warp, int64_t nout, int64_t nred)
{
    int64_t P = nred / RED_PART_MIN;
    P = P > RED_PARTS_MAX ? RED_PARTS_MAX : P;
    /* one pass already has this many threads at work: enough */
    if (P < 2 || (warp ? nout * 32 : nout) >= ((int64_t)1 << 16))
        return 0;
    int64_t fit = (int64_t)(c->ws_bytes / sizeof(double)) / nout;
    P = P > fit ? fit : P;
    return P < 2 ? 0 : P;
}

static col_status k_reduce(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *x = &n->src[0]->t;
    col_tensor kt, rt;
    col_split_axes(x, (uint32_t)n->p.i[0], &kt, &rt);
    int64_t nout = col_numel(&kt), nred = col_numel(&rt);
    if (nout == 0)
        return COL_OK;
    cu_td kept = cu_td_of(&kt), red = cu_td_of(&rt);
    bool kept_inner = kept.ndim > 0 && kept.stride[kept.ndim - 1] == 1;
    bool red_inner = red.ndim > 0 && red.stride[red.ndim - 1] == 1;
    bool warp = nred > 32 && !(kept_inner && !red_inner);
    float *out = (float *)n->t.data;
    const float *xd = (const float *)x->data;
    int64_t P = nred > 0 ? two_pass_parts(c, warp, nout, nred) : 0;
    if (P) {
        switch (n->op) {
        case COL_OP_SUM: launch_two_pass<COL_OP_SUM>(c, warp, out, xd, kept, red, nout, nred, P); break;
        case COL_OP_MEAN: launch_two_pass<COL_OP_MEAN>(c, warp, out, xd, kept, red, nout, nred, P); break;
        default: launch_two_pass<COL_OP_MAX>(c, warp, out, xd, kept, red, nout, nred, P); break;
        }
        return cu_launch(err, col_op_name(n->op));
    }
    switch (n->op) {
    case COL_OP_SUM: launch_reduce<COL_OP_SUM>(c, warp, out, xd, kept, red, nout, nred); break;
    case COL_OP_MEAN: launch_reduce<COL_OP_MEAN>(c, warp, out, xd, kept, red, nout, nred); break;
    default: launch_reduce<COL_OP_MAX>(c, warp, out, xd, kept, red, nout, nred); break;
    }
    return cu_launch(err, col_op_name(n->op));
}

/* dx = dy at the first position of each slab's maximum (out zeroed before) */
__global__ void k_max_bwd_g(float *__restrict__ out, cu_td kout, cu_td rout, const float *__restrict__ x, cu_td kx,
                            cu_td rx, const float *__restrict__ y, cu_td ky, const float *__restrict__ dy, cu_td kd,
                            int64_t nout, int64_t nred)
{
    CU_GRID_LOOP(o, nout) {
        const float *xb = x + cu_off(kx, o);
        float m = y[cu_off(ky, o)], g = dy[cu_off(kd, o)];
        for (int64_t r = 0; r < nred; r++) {
            float v = xb[cu_off(rx, r)];
            if (v == m || (isnan(m) && isnan(v))) {
                out[cu_off(kout, o) + cu_off(rout, r)] = g;
                break;
            }
        }
    }
}

static col_status k_max_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *x = &n->src[0]->t, *y = &n->src[1]->t, *dy = &n->src[2]->t;
    uint32_t axes = (uint32_t)n->p.i[0];
    col_tensor kx, rx, ky, ry, kd, rd, ko, ro;
    col_split_axes(x, axes, &kx, &rx);
    col_split_axes(y, axes, &ky, &ry);
    col_split_axes(dy, axes, &kd, &rd);
    col_split_axes(&n->t, axes, &ko, &ro);
    int64_t nout = col_numel(&kx), nred = col_numel(&rx);
    col_status st = cu_status(cudaMemsetAsync(n->t.data, 0, sizeof(float) * (size_t)col_numel(&n->t), c->stream), err,
                              "max_bwd");
    if (st != COL_OK || nout == 0)
        return st;
    CU_LAUNCH(k_max_bwd_g, cu_blocks(c, nout), CU_THREADS, 0, c->stream)(
        (float *)n->t.data, cu_td_of(&ko), cu_td_of(&ro), (const float *)x->data, cu_td_of(&kx), cu_td_of(&rx),
        (const float *)y->data, cu_td_of(&ky), (const float *)dy->data, cu_td_of(&kd), nout, nred);
    return cu_launch(err, "max_bwd");
}

void cu_register_reduce(col_backend *be)
{
    be->kernel[COL_OP_SUM] = k_reduce;
    be->kernel[COL_OP_MEAN] = k_reduce;
    be->kernel[COL_OP_MAX] = k_reduce;
    be->kernel[COL_OP_MAX_BWD] = k_max_bwd;
}
