/* cuda_rope.cu - CUDA kernel: rotary position embedding (COL_OP_ROPE).
 *
 * The same op serves the forward and the backward: autodiff (ops_nn.c,
 * col_bwd_rope) differentiates a ROPE node with another ROPE node whose i[1]
 * (inverse) is flipped, a rotation by the negated angle.
 *
 *   x [B,H,T,D] (any strides, unit last-dim stride), pos [T] or [B,T]
 *   (contiguous i32/i64) -> out [B,H,T,D] contiguous. For i < half = rd/2,
 *   a = pos * inv_freq[i] (f32) and s = sin(a), negated when inverse:
 *     out[i]      = x[i] cos a - x[i+half] s
 *     out[i+half] = x[i+half] cos a + x[i] s;      dims >= rd pass through.
 *
 * The inverse frequencies (with the LLaMA-3 scaling) are computed on the
 * host with the CPU kernel's f32 code (col_rope_inv_freq in ops_nn.c), so both
 * backends rotate by the same f32 angles; they travel to the device inside
 * the kernel's parameters (no copy, no workspace). The products are rounded
 * one by one as on the CPU (no fused multiply-add); only cosf/sinf differ
 * (CUDA's are within 2 ulp). */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"

/* rd/2 at most this (2 KiB of kernel parameters); larger is COL_EUNSUPPORTED */
#define ROPE_MAX_HALF 512

typedef struct {
    float inv[ROPE_MAX_HALF];
} rope_freqs;


/* One work item per (row, k), k < D - half: k < half rotates the pair
 * (k, k + half), k >= half copies dim rd + (k - half). Rows are (b, h, t). */
__global__ void k_rope_g(float *__restrict__ out, const float *__restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2,
                         const void *pos, int pos64, int per_batch, int64_t H, int64_t T, int64_t D, int64_t rd,
                         int inverse, int64_t items, rope_freqs f)
{
    const int64_t half = rd / 2, W = D - half;
    CU_GRID_LOOP(e, items) {
        int64_t r = e / W, k = e % W;
        int64_t t = r % T, h = (r / T) % H, b = r / (T * H);
        const float *xr = x + b * xs0 + h * xs1 + t * xs2;
        float *o = out + r * D;
        if (k < half) {
            int64_t pi = per_batch ? b * T + t : t;
            float p = pos64 ? (float)((const int64_t *)pos)[pi] : (float)((const int32_t *)pos)[pi];
            float a = __fmul_rn(p, f.inv[k]);
            float cs = cosf(a), sn = sinf(a);
            if (inverse)
                sn = -sn;
            float x1 = xr[k], x2 = xr[k + half];
            o[k] = __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
            o[k + half] = __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
        } else {
            int64_t i = rd + (k - half);
            o[i] = xr[i];
        }
    }
}

static col_status k_rope(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *x = &n->src[0]->t, *pt = &n->src[1]->t;
    int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3];
    int64_t rd = n->p.i[0], half = rd / 2;
    if (rd <= 0 || rd % 2 != 0 || rd > D)
        return col_err_set(err, COL_EINVAL, "rope: rotary dims %lld must be even, positive and at most the head dim %lld",
                           (long long)rd, (long long)D);
    if (half > ROPE_MAX_HALF)
        return col_err_set(err, COL_EUNSUPPORTED, "rope: %lld rotary dims, the CUDA kernel takes at most %d",
                           (long long)rd, 2 * ROPE_MAX_HALF);
    bool per_batch = pt->ndim == 2;
    if (!(pt->dtype == COL_I32 || pt->dtype == COL_I64) || (per_batch ? pt->shape[0] != B || pt->shape[1] != T
                                                                       : pt->ndim != 1 || pt->shape[0] != T))
        return col_err_set(err, COL_EINVAL, "rope: positions must be i32/i64 [T] or [B, T] for x [%lld,%lld,%lld,%lld]",
                           (long long)B, (long long)H, (long long)T, (long long)D);
    int64_t items = B * H * T * (D - half);
    if (items == 0)
        return COL_OK;
    rope_freqs f;
    memset(&f, 0, sizeof f);
    col_rope_inv_freq(&n->p, rd, f.inv);
    CU_LAUNCH(k_rope_g, cu_blocks(c, items), CU_THREADS, 0, c->stream)(
        (float *)n->t.data, (const float *)x->data, x->stride[0], x->stride[1], x->stride[2], pt->data,
        pt->dtype == COL_I64, per_batch, H, T, D, rd, n->p.i[1] != 0, items, f);
    return cu_launch(err, "rope");
}

void cu_register_rope(col_backend *be) { be->kernel[COL_OP_ROPE] = k_rope; }
