/* cuda_nn.cu - CUDA kernels: embedding (+ its gradient), fused
 * cross-entropy (+ its gradient).
 *
 * Token ids and targets are checked on the device; the check's result comes
 * back to the host (one stream synchronisation per call) so that a bad id is
 * COL_EINVAL with the CPU kernel's message, before anything is written. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"

#define NO_BAD 0x7f7f7f7f7f7f7f7fLL /* the flag's bytes memset to 0x7f: no bad position */

__device__ __forceinline__ int64_t index_at(const void *p, int i64, int64_t i)
{
    return i64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* flag = min position whose id is outside [0, V) and is not `ign` (use_ign) */
__global__ void k_check_ids(long long *flag, const void *ids, int i64, int64_t n, int64_t V, int use_ign, int64_t ign)
{
    CU_GRID_LOOP(i, n) {
        int64_t id = index_at(ids, i64, i);
        if ((!use_ign || id != ign) && (id < 0 || id >= V))
            atomicMin(flag, (long long)i);
    }
}

/* runs the check; *bad = first bad position (and *bad_id its id), or -1 */
static col_status check_ids(const col_cuda_ctx *c, const col_tensor *ids, int64_t V, bool use_ign, int64_t ign,
                            int64_t *bad, int64_t *bad_id, col_err *err, const char *what)
{
    *bad = -1;
    int64_t n = col_numel(ids);
    if (n == 0)
        return COL_OK;
    int i64 = ids->dtype == COL_I64;
    col_status st = cu_status(cudaMemsetAsync(c->flag_dev, 0x7f, sizeof(int64_t), c->stream), err, what);
    if (st != COL_OK)
        return st;
    k_check_ids<<<cu_blocks(c, n), CU_THREADS, 0, c->stream>>>((long long *)c->flag_dev, ids->data, i64, n, V, use_ign,
                                                              ign);
    st = cu_launch(err, what);
    if (st == COL_OK)
        st = cu_status(cudaMemcpyAsync(c->flag_host, c->flag_dev, sizeof(int64_t), cudaMemcpyDeviceToHost, c->stream),
                       err, what);
    if (st == COL_OK)
        st = cu_status(cudaStreamSynchronize(c->stream), err, what);
    if (st != COL_OK || *c->flag_host == NO_BAD)
        return st;
    *bad = *c->flag_host;
    size_t es = col_dtype_size(ids->dtype);
    int64_t v = 0;
    st = cu_status(cudaMemcpyAsync(&v, (const char *)ids->data + *bad * (int64_t)es, es, cudaMemcpyDeviceToHost,
                                   c->stream), err, what);
    if (st == COL_OK)
        st = cu_status(cudaStreamSynchronize(c->stream), err, what);
    *bad_id = i64 ? v : (int64_t)(int32_t)v;
    return st;
}

/* ---- embedding ---- */

__global__ void k_embedding_g(float *__restrict__ out, const float *__restrict__ w, int64_t ws, const void *ids, int i64,
                              int64_t N, int64_t C)
{
    CU_GRID_LOOP(i, N * C) {
        int64_t r = i / C, c = i % C;
        out[i] = w[index_at(ids, i64, r) * ws + c];
    }
}

/* rows of a bf16 (is_bf16) or f16 table, converted to f32 */
__global__ void k_embedding_16(float *__restrict__ out, const unsigned short *__restrict__ w, int is_bf16, int64_t ws,
                               const void *ids, int i64, int64_t N, int64_t C)
{
    CU_GRID_LOOP(i, N * C) {
        int64_t r = i / C, c = i % C;
        unsigned short h = w[index_at(ids, i64, r) * ws + c];
        out[i] = is_bf16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
    }
}

static col_status k_embedding(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *w = &n->src[0]->t, *ids = &n->src[1]->t;
    int64_t V = w->shape[0], C = w->shape[1], N = col_numel(ids), bad, bad_id;
    col_status st = check_ids(c, ids, V, false, 0, &bad, &bad_id, err, "embedding");
    if (st != COL_OK)
        return st;
    if (bad >= 0)
        return col_err_set(err, COL_EINVAL, "embedding: token id %lld at position %lld is outside the vocabulary (0..%lld)",
                           (long long)bad_id, (long long)bad, (long long)(V - 1));
    if (N * C == 0)
        return COL_OK;
    if (w->dtype != COL_F32)
        k_embedding_16<<<cu_blocks(c, N * C), CU_THREADS, 0, c->stream>>>((float *)n->t.data,
                                                                         (const unsigned short *)w->data,
                                                                         w->dtype == COL_BF16, w->stride[0], ids->data,
                                                                         ids->dtype == COL_I64, N, C);
    else
        k_embedding_g<<<cu_blocks(c, N * C), CU_THREADS, 0, c->stream>>>((float *)n->t.data, (const float *)w->data,
                                                                        w->stride[0], ids->data, ids->dtype == COL_I64,
                                                                        N, C);
    return cu_launch(err, "embedding");
}

/* dw[ids[r], c] += dy[r, c] for r in order: a thread owns a column, so each
 * sum has the CPU's order (and no atomics). */
__global__ void k_embedding_bwd_g(float *__restrict__ dw, const float *__restrict__ dy, const void *ids, int i64, int64_t N,
                                  int64_t C)
{
    CU_GRID_LOOP(c, C) {
        for (int64_t r = 0; r < N; r++)
            dw[index_at(ids, i64, r) * C + c] += dy[r * C + c];
    }
}

static col_status k_embedding_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *ids = &n->src[0]->t, *dy = &n->src[1]->t;
    int64_t V = n->p.i[0], C = n->t.shape[1], N = col_numel(ids), bad, bad_id;
    col_status st = check_ids(c, ids, V, false, 0, &bad, &bad_id, err, "embedding_bwd");
    if (st != COL_OK)
        return st;
    if (bad >= 0)
        return col_err_set(err, COL_EINVAL,
                           "embedding_bwd: token id %lld at position %lld is outside the vocabulary (0..%lld)",
                           (long long)bad_id, (long long)bad, (long long)(V - 1));
    st = cu_status(cudaMemsetAsync(n->t.data, 0, sizeof(float) * (size_t)(V * C), c->stream), err, "embedding_bwd");
    if (st != COL_OK || N * C == 0)
        return st;
    k_embedding_bwd_g<<<cu_blocks(c, C, 64), 64, 0, c->stream>>>((float *)n->t.data, (const float *)dy->data, ids->data,
                                                                 ids->dtype == COL_I64, N, C);
    return cu_launch(err, "embedding_bwd");
}

/* ---- cross-entropy ---- */

/* lse[r] = logsumexp(x[r, :]) (0 for ignored rows) */
__global__ void k_ce_lse(float *__restrict__ lse, const float *__restrict__ x, const void *tg, int i64, int64_t N,
                         int64_t V, int64_t ign)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        if (index_at(tg, i64, r) == ign) {
            if (threadIdx.x == 0)
                lse[r] = 0.0f;
            continue;
        }
        const float *xr = x + r * V;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
            m = xr[j] > m ? xr[j] : m;
        m = cu_block_max(m, shf);
        double s = 0.0;
        if (m != -INFINITY)
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
                s += (double)expf(xr[j] - m);
        s = cu_block_sum(s, shd);
        if (threadIdx.x == 0)
            lse[r] = (float)((double)m + log(s));
    }
}

/* one block: loss = mean over counted rows of lse - x[target]; count into the extra area */
__global__ void k_ce_loss(float *__restrict__ loss, long long *__restrict__ count_out, const float *__restrict__ lse,
                          const float *__restrict__ x, const void *tg, int i64, int64_t N, int64_t V, int64_t ign)
{
    __shared__ double shd[32];
    __shared__ long long shc[32];
    double s = 0.0;
    long long cnt = 0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        int64_t t = index_at(tg, i64, r);
        if (t == ign)
            continue;
        s += (double)lse[r] - (double)x[r * V + t];
        cnt++;
    }
    s = cu_block_sum(s, shd);
    cnt = cu_block_sum(cnt, shc);
    if (threadIdx.x == 0) {
        *count_out = cnt;
        *loss = cnt ? (float)(s / (double)cnt) : NAN;
    }
}

static col_status k_cross_entropy(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0], bad, bad_t;
    col_status st = check_ids(c, tt, V, true, ign, &bad, &bad_t, err, "cross_entropy");
    if (st != COL_OK)
        return st;
    if (bad >= 0)
        return col_err_set(err, COL_EINVAL,
                           "cross_entropy: target %lld at row %lld is outside the classes (0..%lld) and is not "
                           "ignore_index (%lld)",
                           (long long)bad_t, (long long)bad, (long long)(V - 1), (long long)ign);
    float *lse = (float *)col_extra(n);
    int i64 = tt->dtype == COL_I64;
    if (N > 0) {
        int64_t cap = (int64_t)c->sm_count * 64;
        k_ce_lse<<<(unsigned)(N < cap ? N : cap), cu_row_threads(V), 0, c->stream>>>(lse, (const float *)lt->data,
                                                                                     tt->data, i64, N, V, ign);
    }
    k_ce_loss<<<1, 1024, 0, c->stream>>>((float *)n->t.data, (long long *)((char *)lse + n->p.i[1]), lse,
                                         (const float *)lt->data, tt->data, i64, N, V, ign);
    return cu_launch(err, "cross_entropy");
}

/* dlogits [N, V] = (softmax(row) - onehot(target)) dloss / count; ignored rows 0 */
__global__ void k_ce_bwd_g(float *__restrict__ out, const float *__restrict__ x, const float *__restrict__ lse,
                           const long long *__restrict__ count, const float *__restrict__ dloss, const void *tg, int i64,
                           int64_t N, int64_t V, int64_t ign)
{
    long long cnt = *count;
    float scale = cnt ? dloss[0] / (float)cnt : 0.0f;
    CU_GRID_LOOP(i, N * V) {
        int64_t r = i / V, j = i % V, t = index_at(tg, i64, r);
        if (t == ign) {
            out[i] = 0.0f;
            continue;
        }
        float o = __fmul_rn(expf(x[i] - lse[r]), scale);
        out[i] = j == t ? o - scale : o;
    }
}

static col_status k_cross_entropy_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    const col_node *ce = n->src[2];
    int64_t N = lt->shape[0], V = lt->shape[1];
    if (N * V == 0)
        return COL_OK;
    const float *lse = (const float *)col_extra(ce);
    k_ce_bwd_g<<<cu_blocks(c, N * V), CU_THREADS, 0, c->stream>>>(
        (float *)n->t.data, (const float *)lt->data, lse, (const long long *)((const char *)lse + ce->p.i[1]),
        (const float *)n->src[3]->t.data, tt->data, tt->dtype == COL_I64, N, V, n->p.i[0]);
    return cu_launch(err, "cross_entropy_bwd");
}

void cu_register_nn(col_backend *be)
{
    be->kernel[COL_OP_EMBEDDING] = k_embedding;
    be->kernel[COL_OP_EMBEDDING_BWD] = k_embedding_bwd;
    be->kernel[COL_OP_CROSS_ENTROPY] = k_cross_entropy;
    be->kernel[COL_OP_CROSS_ENTROPY_BWD] = k_cross_entropy_bwd;
}
