/* cuda_unary.cu - CUDA kernels for the elementwise activations, their
 * backward ops, and dropout (the CPU's Philox stream, so the same mask).
 *
 * Sources are read through their strides; the output is contiguous
 * (SWIGLU_BWD: [da | db], 2 * numel). Formulas are the CPU kernels'. */
#include "cuda_internal.h"

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f
#define GELU_KAPPA 0.044715f

template <int OP> __device__ __forceinline__ float f1(float x)
{
    switch (OP) {
    case COL_OP_EXP: return expf(x);
    case COL_OP_LOG: return logf(x);
    case COL_OP_TANH: return tanhf(x);
    case COL_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case COL_OP_RELU: return x < 0.0f ? 0.0f : x;
    case COL_OP_GELU_ERF: return 0.5f * x * (1.0f + erff(x * INV_SQRT_2));
    case COL_OP_GELU_TANH: {
        float u = SQRT_2_OVER_PI * (x + GELU_KAPPA * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    default: return x / (1.0f + expf(-x)); /* SILU */
    }
}

/* two-input ops: SWIGLU (a, b) and the backward ops (x or y, dy) */
template <int OP> __device__ __forceinline__ float f2(float x, float dy)
{
    switch (OP) {
    case COL_OP_SWIGLU: return x / (1.0f + expf(-x)) * dy;
    case COL_OP_TANH_BWD: return dy * (1.0f - x * x);
    case COL_OP_SIGMOID_BWD: return dy * x * (1.0f - x);
    case COL_OP_RELU_BWD: return x > 0.0f ? dy : 0.0f;
    case COL_OP_GELU_ERF_BWD: {
        float cdf = 0.5f * (1.0f + erff(x * INV_SQRT_2));
        float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
        return dy * (cdf + x * pdf);
    }
    case COL_OP_GELU_TANH_BWD: {
        float v2 = x * x;
        float t = tanhf(SQRT_2_OVER_PI * (x + GELU_KAPPA * v2 * x));
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_KAPPA * v2);
        return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
    default: { /* SILU_BWD */
        float s = 1.0f / (1.0f + expf(-x));
        return dy * s * (1.0f + x * (1.0f - s));
    }
    }
}

template <int OP> __global__ void k_un1(float *__restrict__ o, const float *__restrict__ x, cu_td tx, int64_t n)
{
    CU_GRID_LOOP(i, n) o[i] = f1<OP>(x[cu_off(tx, i)]);
}

template <int OP>
__global__ void k_un2(float *__restrict__ o, const float *__restrict__ x, cu_td tx, const float *__restrict__ y, cu_td ty,
                      int64_t n)
{
    CU_GRID_LOOP(i, n) o[i] = f2<OP>(x[cu_off(tx, i)], y[cu_off(ty, i)]);
}

__global__ void k_swiglu_bwd(float *__restrict__ o, const float *__restrict__ a, cu_td ta, const float *__restrict__ u,
                             cu_td tu, const float *__restrict__ dy, cu_td td, int64_t n)
{
    CU_GRID_LOOP(i, n) {
        float av = a[cu_off(ta, i)], uv = u[cu_off(tu, i)], g = dy[cu_off(td, i)];
        float s = 1.0f / (1.0f + expf(-av));
        o[i] = g * uv * s * (1.0f + av * (1.0f - s));
        o[n + i] = g * av * s;
    }
}

/* ---- dropout: Philox-4x32-10 exactly as rng.c ---- */

__device__ __forceinline__ uint4 philox(uint64_t seed, uint64_t ctr)
{
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return make_uint4(c0, c1, c2, c3);
}

__global__ void k_dropout_g(float *__restrict__ o, const float *__restrict__ x, cu_td tx, int64_t n, float p,
                            uint64_t seed, uint64_t offset, const int64_t *counter)
{
    int64_t cnt = counter ? *counter : 0;
    if (cnt != 0) {
        uint4 h = philox(seed, (uint64_t)cnt);
        seed = ((uint64_t)h.x << 32) | h.y;
    }
    float scale = p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
    CU_GRID_LOOP(i, n) {
        float v = x[cu_off(tx, i)];
        if (p <= 0.0f) { /* dropout off (col_exec.dropout_off): the input unchanged */
            o[i] = v;
            continue;
        }
        if (p >= 1.0f) {
            o[i] = v * 0.0f;
            continue;
        }
        uint64_t e = offset + (uint64_t)i;
        uint4 w = philox(seed, e >> 2);
        uint32_t word = (e & 3) == 0 ? w.x : (e & 3) == 1 ? w.y : (e & 3) == 2 ? w.z : w.w;
        float u = (float)(word >> 8) * (1.0f / 16777216.0f);
        o[i] = v * (u >= p ? scale : 0.0f);
    }
}

#define UN1(OP) case OP: CU_LAUNCH(k_un1<OP>, g, CU_THREADS, 0, c->stream)(o, x0, t0, num); break
#define UN2(OP) case OP: CU_LAUNCH(k_un2<OP>, g, CU_THREADS, 0, c->stream)(o, x0, t0, x1, t1, num); break

static col_status k_elementwise(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *s0 = &n->src[0]->t;
    int64_t num = col_numel(s0);
    if (num == 0)
        return COL_OK;
    unsigned g = cu_blocks(c, num);
    float *o = (float *)n->t.data;
    const float *x0 = (const float *)s0->data;
    cu_td t0 = cu_td_of(s0), t1 = {};
    const float *x1 = NULL;
    if (n->nsrc > 1 && n->op != COL_OP_DROPOUT) {
        x1 = (const float *)n->src[1]->t.data;
        t1 = cu_td_of(&n->src[1]->t);
    }
    switch (n->op) {
        UN1(COL_OP_EXP);
        UN1(COL_OP_LOG);
        UN1(COL_OP_TANH);
        UN1(COL_OP_SIGMOID);
        UN1(COL_OP_RELU);
        UN1(COL_OP_GELU_ERF);
        UN1(COL_OP_GELU_TANH);
        UN1(COL_OP_SILU);
        UN2(COL_OP_SWIGLU);
        UN2(COL_OP_TANH_BWD);
        UN2(COL_OP_SIGMOID_BWD);
        UN2(COL_OP_RELU_BWD);
        UN2(COL_OP_GELU_ERF_BWD);
        UN2(COL_OP_GELU_TANH_BWD);
        UN2(COL_OP_SILU_BWD);
    case COL_OP_SWIGLU_BWD:
        CU_LAUNCH(k_swiglu_bwd, g, CU_THREADS, 0, c->stream)(
            o, x0, t0, x1, t1, (const float *)n->src[2]->t.data, cu_td_of(&n->src[2]->t), num);
        break;
    case COL_OP_DROPOUT:
        CU_LAUNCH(k_dropout_g, g, CU_THREADS, 0, c->stream)(
            o, x0, t0, num, ex->dropout_off ? 0.0f : n->p.f[0], (uint64_t)n->p.i[0], (uint64_t)n->p.i[1],
            n->nsrc > 1 ? (const int64_t *)n->src[1]->t.data : NULL);
        break;
    default: return col_err_set(err, COL_EINTERNAL, "%s: not an elementwise op", col_op_name(n->op));
    }
    return cu_launch(err, col_op_name(n->op));
}

void cu_register_unary(col_backend *be)
{
    for (int op = 0; op < COL_OP_COUNT; op++)
        if (col_op_is_elementwise((col_op)op))
            be->kernel[op] = k_elementwise;
}
