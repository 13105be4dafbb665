/* cuda_nn.cu - CUDA kernels: embedding (+ its gradient), fused
 * cross-entropy (+ its gradient).
 *
 * Token ids and targets are checked on the device without stopping the
 * host: a bad one is reported as COL_EINVAL with the CPU kernel's message at
 * the next synchronisation (cuda_check.cu); until then the kernels skip it
 * (an embedding row of zeros, no gradient, no loss term), so nothing is read
 * or written out of bounds. */
#include <math.h>
#include <string.h>

#include "cuda_internal.h"

__device__ __forceinline__ int64_t index_at(const void *p, int i64, int64_t i)
{
    return i64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* the smallest position whose id is outside [0, V) and is not `ign` (use_ign) goes to the slot */
__global__ void k_check_ids(cu_check_slot *slot, const void *ids, int i64, int64_t n, int64_t V, int use_ign, int64_t ign)
{
    CU_GRID_LOOP(i, n) {
        int64_t id = index_at(ids, i64, i);
        if ((!use_ign || id != ign) && (id < 0 || id >= V))
            cu_check_bad(slot, i);
    }
}

/* after k_check_ids (stream order): the id at the bad position */
__global__ void k_check_id_value(cu_check_slot *slot, const void *ids, int i64)
{
    if (slot->pos != CU_CHECK_NONE)
        slot->val = index_at(ids, i64, slot->pos);
}

/* queues the check of ids against [0, V) (and ign when use_ign) into a new check slot */
static col_status check_ids(col_cuda_ctx *c, const col_tensor *ids, int64_t V, bool use_ign, int64_t ign, col_err *err,
                            const char *what)
{
    int64_t n = col_numel(ids);
    if (n == 0)
        return COL_OK;
    cu_check_info info = {what, use_ign ? CU_CHECK_TARGETS : CU_CHECK_IDS, V, ign, 0};
    cu_check_slot *slot;
    col_status st = cu_check_begin(c, &info, &slot, err);
    if (st != COL_OK)
        return st;
    int i64 = ids->dtype == COL_I64;
    CU_LAUNCH(k_check_ids, cu_blocks(c, n), CU_THREADS, 0, c->stream)(slot, ids->data, i64, n, V, use_ign, ign);
    CU_LAUNCH(k_check_id_value, 1, 1, 0, c->stream)(slot, ids->data, i64);
    cu_check_end(c);
    return cu_launch(err, what);
}

/* ---- embedding ---- */

__global__ void k_embedding_g(float *__restrict__ out, const float *__restrict__ w, int64_t ws, const void *ids, int i64,
                              int64_t N, int64_t C, int64_t V)
{
    CU_GRID_LOOP(i, N * C) {
        int64_t r = i / C, c = i % C, id = index_at(ids, i64, r);
        out[i] = id >= 0 && id < V ? w[id * ws + c] : 0.0f; /* a bad id (reported at the sync): zeros */
    }
}

static col_status k_embedding(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *w = &n->src[0]->t, *ids = &n->src[1]->t;
    int64_t V = w->shape[0], C = w->shape[1], N = col_numel(ids);
    col_status st = check_ids(c, ids, V, false, 0, err, "embedding");
    if (st != COL_OK || N * C == 0)
        return st;
    CU_LAUNCH(k_embedding_g, cu_blocks(c, N * C), CU_THREADS, 0, c->stream)(
        (float *)n->t.data, (const float *)w->data, w->stride[0], ids->data, ids->dtype == COL_I64, N, C, V);
    return cu_launch(err, "embedding");
}

/* dw[ids[r], c] += dy[r, c] for r in order: a thread owns a column, so each
 * sum has the CPU's order (and no atomics). */
__global__ void k_embedding_bwd_g(float *__restrict__ dw, const float *__restrict__ dy, const void *ids, int i64, int64_t N,
                                  int64_t C, int64_t V)
{
    CU_GRID_LOOP(c, C) {
        for (int64_t r = 0; r < N; r++) {
            int64_t id = index_at(ids, i64, r);
            if (id >= 0 && id < V) /* a bad id (reported at the sync) adds nothing */
                dw[id * C + c] += dy[r * C + c];
        }
    }
}

static col_status k_embedding_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *ids = &n->src[0]->t, *dy = &n->src[1]->t;
    int64_t V = n->p.i[0], C = n->t.shape[1], N = col_numel(ids);
    col_status st = check_ids(c, ids, V, false, 0, err, "embedding_bwd");
    if (st != COL_OK)
        return st;
    st = cu_status(cudaMemsetAsync(n->t.data, 0, sizeof(float) * (size_t)(V * C), c->stream), err, "embedding_bwd");
    if (st != COL_OK || N * C == 0)
        return st;
    CU_LAUNCH(k_embedding_bwd_g, cu_blocks(c, C, 64), 64, 0, c->stream)(
        (float *)n->t.data, (const float *)dy->data, ids->data, ids->dtype == COL_I64, N, C, V);
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
        if (t == ign || t < 0 || t >= V) /* a bad target (reported at the sync) adds nothing */
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
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0];
    col_status st = check_ids(c, tt, V, true, ign, err, "cross_entropy");
    if (st != COL_OK)
        return st;
    float *lse = (float *)col_extra(n);
    int i64 = tt->dtype == COL_I64;
    if (N > 0) {
        int64_t cap = (int64_t)c->sm_count * 64;
        CU_LAUNCH(k_ce_lse, (unsigned)(N < cap ? N : cap), cu_row_threads(V), 0, c->stream)(
            lse, (const float *)lt->data, tt->data, i64, N, V, ign);
    }
    CU_LAUNCH(k_ce_loss, 1, 1024, 0, c->stream)(
        (float *)n->t.data, (long long *)((char *)lse + n->p.i[1]), lse, (const float *)lt->data, tt->data, i64, N, V,
        ign);
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
    CU_LAUNCH(k_ce_bwd_g, cu_blocks(c, N * V), CU_THREADS, 0, c->stream)(
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
