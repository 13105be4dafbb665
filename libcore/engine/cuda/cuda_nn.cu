/* cuda_nn.cu - CUDA kernels: embedding (+ its gradient), fused
 * cross-entropy and per-token log-probabilities (+ their gradients).
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

/* rows of a bf16 (is_bf16) or f16 table, converted to f32 */
__global__ void k_embedding_16(float *__restrict__ out, const unsigned short *__restrict__ w, int is_bf16, int64_t ws,
                               const void *ids, int i64, int64_t N, int64_t C, int64_t V)
{
    CU_GRID_LOOP(i, N * C) {
        int64_t r = i / C, c = i % C, id = index_at(ids, i64, r);
        if (id < 0 || id >= V) { /* a bad id (reported at the sync): zeros */
            out[i] = 0.0f;
            continue;
        }
        unsigned short h = w[id * ws + c];
        out[i] = is_bf16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
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
    if (col_dtype_is_quant(w->dtype)) /* rows decoded (cuda_quant.cu) */
        return cu_embedding_quant(c, w, ids, (float *)n->t.data, err);
    if (w->dtype != COL_F32)
        CU_LAUNCH(k_embedding_16, cu_blocks(c, N * C), CU_THREADS, 0, c->stream)(
            (float *)n->t.data, (const unsigned short *)w->data, w->dtype == COL_BF16, w->stride[0], ids->data,
            ids->dtype == COL_I64, N, C, V);
    else
        CU_LAUNCH(k_embedding_g, cu_blocks(c, N * C), CU_THREADS, 0, c->stream)(
            (float *)n->t.data, (const float *)w->data, w->stride[0], ids->data, ids->dtype == COL_I64, N, C, V);
    return cu_launch(err, "embedding");
}

/* Backward: dw [V, C] = 0, then dw[ids[r], :] += dy[r, :] for r in order.
 * The rows are grouped by token with a sort of the keys id << 32 | row
 * (unique, so the sorted order is the same whatever the schedule): a block
 * takes a run of equal ids and its threads, one per column, add the run's
 * rows in row order. Each element of dw is then summed in the CPU's order:
 * the bits equal the CPU's and do not change from run to run. The keys live
 * in the backend workspace; more rows than it holds are done in chunks of
 * rows, each adding to what the chunks before it left (the same order). */

#define EB_SORT_BLOCK 2048 /* keys one block sorts in shared memory (16 KiB) */
#define EB_NONE (~0ull)    /* a padding key or a bad id's: sorts last, adds nothing */

/* keys[i] for i < P: id << 32 | i for the rows r0 + i < r0 + n with a good id, else EB_NONE */
__global__ void k_eb_keys(unsigned long long *keys, const void *ids, int i64, int64_t r0, int64_t n, int64_t P, int64_t V)
{
    CU_GRID_LOOP(i, P) {
        unsigned long long k = EB_NONE;
        if (i < n) {
            int64_t id = index_at(ids, i64, r0 + i);
            if (id >= 0 && id < V)
                k = (unsigned long long)id << 32 | (unsigned long long)i;
        }
        keys[i] = k;
    }
}

/* bitonic compare-exchange of keys i and i + j: ascending where bit k of gi is clear */
__device__ __forceinline__ void eb_cmpx(unsigned long long *a, int64_t i, int64_t j, int64_t gi, int64_t k)
{
    unsigned long long x = a[i], y = a[i + j];
    if ((x > y) == ((gi & k) == 0)) {
        a[i] = y;
        a[i + j] = x;
    }
}

/* blocks of SB = 2 blockDim.x keys in shared memory: kstage 0 sorts each
 * block (stages 2..SB; directions by the global index, as the whole sort
 * needs); kstage > SB does the steps j < SB of merge stage kstage */
__global__ void k_eb_sort_shared(unsigned long long *keys, int64_t kstage)
{
    __shared__ unsigned long long sh[EB_SORT_BLOCK];
    const int SB = 2 * (int)blockDim.x, t = (int)threadIdx.x;
    const int64_t base = (int64_t)blockIdx.x * SB;
    for (int e = t; e < SB; e += blockDim.x)
        sh[e] = keys[base + e];
    for (int64_t k = kstage ? kstage : 2; k <= (kstage ? kstage : SB); k <<= 1)
        for (int j = (int)((kstage ? SB : k) >> 1); j > 0; j >>= 1) {
            __syncthreads();
            int i = 2 * j * (t / j) + t % j;
            eb_cmpx(sh, i, j, base + i, k);
        }
    __syncthreads();
    for (int e = t; e < SB; e += blockDim.x)
        keys[base + e] = sh[e];
}

/* one global step j >= SB of merge stage k over P keys */
__global__ void k_eb_sort_step(unsigned long long *keys, int64_t P, int64_t k, int64_t j)
{
    CU_GRID_LOOP(t, P / 2) {
        int64_t i = 2 * j * (t / j) + t % j;
        eb_cmpx(keys, i, j, i, k);
    }
}

#define EB_UNROLL 16 /* rows of a run whose loads a thread has in flight at once */

/* the blocks take the sorted positions i in turn; where a run of equal ids
 * starts, the block's threads (columns) add its rows in order to dw. A run
 * of one row is added at once; longer ones are read EB_UNROLL rows at a time, all loads issued before the adds (a
 * long run is bound by memory latency otherwise); the adds keep row order. */
__global__ void k_eb_accumulate(float *__restrict__ dw, const float *__restrict__ dy, const unsigned long long *keys,
                                int64_t r0, int64_t n, int64_t C)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        unsigned long long k = keys[i];
        if (k == EB_NONE)
            return; /* sorted: no good key follows */
        unsigned long long id = k >> 32;
        if (i > 0 && keys[i - 1] >> 32 == id)
            continue; /* inside a run: its first position's block adds it */
        if (i + 1 >= n || keys[i + 1] >> 32 != id) { /* a run of one row (most, with many distinct ids): no batch */
            const float *row = dy + (r0 + (int64_t)(k & 0xffffffffu)) * C;
            for (int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.y * blockDim.x)
                dw[id * C + c] += row[c];
            continue;
        }
        for (int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.y * blockDim.x) {
            float acc = dw[id * C + c];
            for (int64_t j = i;; j += EB_UNROLL) {
                unsigned long long kk[EB_UNROLL];
                float v[EB_UNROLL];
#pragma unroll
                for (int u = 0; u < EB_UNROLL; u++)
                    kk[u] = j + u < n ? keys[j + u] : EB_NONE;
#pragma unroll
                for (int u = 0; u < EB_UNROLL; u++) /* the run's rows are a prefix (sorted); EB_NONE >> 32 is no id */
                    v[u] = kk[u] >> 32 == id ? dy[(r0 + (int64_t)(kk[u] & 0xffffffffu)) * C + c] : 0.0f;
#pragma unroll
                for (int u = 0; u < EB_UNROLL; u++)
                    if (kk[u] >> 32 == id)
                        acc += v[u];
                if (kk[EB_UNROLL - 1] >> 32 != id)
                    break;
            }
            dw[id * C + c] = acc;
        }
    }
}

/* sorts keys[0..P) ascending, P a power of two >= 2 */
static void eb_sort(const col_cuda_ctx *c, unsigned long long *keys, int64_t P)
{
    int64_t SB = P < EB_SORT_BLOCK ? P : EB_SORT_BLOCK;
    CU_LAUNCH(k_eb_sort_shared, (unsigned)(P / SB), (unsigned)(SB / 2), 0, c->stream)(keys, 0);
    for (int64_t k = 2 * SB; k <= P; k <<= 1) {
        for (int64_t j = k / 2; j >= SB; j >>= 1)
            CU_LAUNCH(k_eb_sort_step, cu_blocks(c, P / 2), CU_THREADS, 0, c->stream)(keys, P, k, j);
        CU_LAUNCH(k_eb_sort_shared, (unsigned)(P / SB), (unsigned)(SB / 2), 0, c->stream)(keys, k);
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
    if (V > ((int64_t)1 << 31))
        return col_err_set(err, COL_EUNSUPPORTED, "embedding_bwd: a vocabulary of %lld, the CUDA kernel takes 2^31",
                           (long long)V);
    /* rows per chunk: the largest power of two of keys the workspace holds */
    int64_t cap = 2;
    while (cap * 2 * (int64_t)sizeof(unsigned long long) <= (int64_t)c->ws_bytes)
        cap *= 2;
    unsigned long long *keys = (unsigned long long *)c->ws;
    const int th = 128;
    unsigned gy = (unsigned)((C + th - 1) / th < 64 ? (C + th - 1) / th : 64);
    for (int64_t r0 = 0; r0 < N; r0 += cap) {
        int64_t m = N - r0 < cap ? N - r0 : cap, P = 2;
        while (P < m)
            P *= 2;
        CU_LAUNCH(k_eb_keys, cu_blocks(c, P), CU_THREADS, 0, c->stream)(keys, ids->data, ids->dtype == COL_I64, r0, m, P, V);
        eb_sort(c, keys, P);
        int64_t gx = m < (int64_t)c->sm_count * 16 ? m : (int64_t)c->sm_count * 16;
        CU_LAUNCH(k_eb_accumulate, dim3((unsigned)gx, gy), th, 0, c->stream)(
            (float *)n->t.data, (const float *)dy->data, keys, r0, m, C);
    }
    return cu_launch(err, "embedding_bwd");
}

/* ---- cross-entropy ---- */

/* logsumexp of the row xr [V], by the whole block (every thread gets it; shf, shd: 32 slots of shared memory) */
__device__ __forceinline__ float row_lse(const float *__restrict__ xr, int64_t V, float *shf, double *shd)
{
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
        m = xr[j] > m ? xr[j] : m;
    m = cu_block_max(m, shf);
    double s = 0.0;
    if (m != -INFINITY)
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
            s += (double)expf(xr[j] - m);
    s = cu_block_sum(s, shd);
    return (float)((double)m + log(s));
}

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
        float l = row_lse(x + r * V, V, shf, shd);
        if (threadIdx.x == 0)
            lse[r] = l;
    }
}

/* The loss, mean over counted rows of lse - x[target], in two passes: a
 * block per part of the rows (parts by N alone) sums into the workspace,
 * then one block adds the parts; the count goes to the extra area. */
#define CE_ROWS_PER_PART 1024
#define CE_PARTS_MAX 256

__global__ void k_ce_loss_part(double *__restrict__ ps, long long *__restrict__ pc, const float *__restrict__ lse,
                               const float *__restrict__ x, const void *tg, int i64, int64_t N, int64_t V, int64_t ign,
                               int64_t P)
{
    __shared__ double shd[32];
    __shared__ long long shc[32];
    int64_t p = blockIdx.x, r1 = N * (p + 1) / P;
    double s = 0.0;
    long long cnt = 0;
    for (int64_t r = N * p / P + threadIdx.x; r < r1; r += blockDim.x) {
        int64_t t = index_at(tg, i64, r);
        if (t == ign || t < 0 || t >= V) /* a bad target (reported at the sync) adds nothing */
            continue;
        s += (double)lse[r] - (double)x[r * V + t];
        cnt++;
    }
    s = cu_block_sum(s, shd);
    cnt = cu_block_sum(cnt, shc);
    if (threadIdx.x == 0) {
        ps[p] = s;
        pc[p] = cnt;
    }
}

__global__ void k_ce_loss_final(float *__restrict__ loss, long long *__restrict__ count_out, const double *__restrict__ ps,
                                const long long *__restrict__ pc, int64_t P)
{
    __shared__ double shd[32];
    __shared__ long long shc[32];
    double s = 0.0;
    long long cnt = 0;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
        s += ps[p];
        cnt += pc[p];
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
    int64_t P = N / CE_ROWS_PER_PART;
    P = P < 1 ? 1 : P > CE_PARTS_MAX ? CE_PARTS_MAX : P;
    double *ps = (double *)c->ws;
    long long *pc = (long long *)(ps + P);
    CU_LAUNCH(k_ce_loss_part, (unsigned)P, CU_THREADS, 0, c->stream)(
        ps, pc, lse, (const float *)lt->data, tt->data, i64, N, V, ign, P);
    CU_LAUNCH(k_ce_loss_final, 1, CU_THREADS, 0, c->stream)(
        (float *)n->t.data, (long long *)((char *)lse + n->p.i[1]), ps, pc, P);
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

/* ---- per-token log-probabilities ---- */

/* a block per row: lse[r] = logsumexp(x[r, :]), out[r] = x[r, target] - lse[r]; ignored rows 0, 0; a bad
 * target (reported at the sync) gives out 0 */
__global__ void k_tlp(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ x, const void *tg,
                      int i64, int64_t N, int64_t V, int64_t ign)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        int64_t t = index_at(tg, i64, r);
        if (t == ign) {
            if (threadIdx.x == 0)
                lse[r] = out[r] = 0.0f;
            continue;
        }
        float l = row_lse(x + r * V, V, shf, shd);
        if (threadIdx.x == 0) {
            lse[r] = l;
            out[r] = t >= 0 && t < V ? x[r * V + t] - l : 0.0f;
        }
    }
}

static col_status k_token_logprob(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0];
    col_status st = check_ids(c, tt, V, true, ign, err, "token_logprob");
    if (st != COL_OK || N == 0)
        return st;
    int64_t cap = (int64_t)c->sm_count * 64;
    CU_LAUNCH(k_tlp, (unsigned)(N < cap ? N : cap), cu_row_threads(V), 0, c->stream)(
        (float *)n->t.data, (float *)col_extra(n), (const float *)lt->data, tt->data, tt->dtype == COL_I64, N, V, ign);
    return cu_launch(err, "token_logprob");
}

/* dlogits [N, V] = d[r] (onehot(target) - softmax(row)); ignored rows and bad targets 0 */
__global__ void k_tlp_bwd(float *__restrict__ out, const float *__restrict__ x, const float *__restrict__ lse,
                          const float *__restrict__ d, const void *tg, int i64, int64_t N, int64_t V, int64_t ign)
{
    CU_GRID_LOOP(i, N * V) {
        int64_t r = i / V, j = i % V, t = index_at(tg, i64, r);
        if (t == ign || t < 0 || t >= V) {
            out[i] = 0.0f;
            continue;
        }
        float g = d[r], o = -__fmul_rn(expf(x[i] - lse[r]), g);
        out[i] = j == t ? __fadd_rn(o, g) : o;
    }
}

static col_status k_token_logprob_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1];
    if (N * V == 0)
        return COL_OK;
    CU_LAUNCH(k_tlp_bwd, cu_blocks(c, N * V), CU_THREADS, 0, c->stream)(
        (float *)n->t.data, (const float *)lt->data, (const float *)col_extra(n->src[2]),
        (const float *)n->src[3]->t.data, tt->data, tt->dtype == COL_I64, N, V, n->p.i[0]);
    return cu_launch(err, "token_logprob_bwd");
}

void cu_register_nn(col_backend *be)
{
    be->kernel[COL_OP_EMBEDDING] = k_embedding;
    be->kernel[COL_OP_EMBEDDING_BWD] = k_embedding_bwd;
    be->kernel[COL_OP_CROSS_ENTROPY] = k_cross_entropy;
    be->kernel[COL_OP_CROSS_ENTROPY_BWD] = k_cross_entropy_bwd;
    be->kernel[COL_OP_TOKEN_LOGPROB] = k_token_logprob;
    be->kernel[COL_OP_TOKEN_LOGPROB_BWD] = k_token_logprob_bwd;
}
