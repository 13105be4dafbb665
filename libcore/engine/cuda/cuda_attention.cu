/* cuda_attention.cu - CUDA kernels: attention (flash, f32) and its gradient.
 *
 *   q [B,Hq,T,D], k,v [B,Hkv,S,D] (any strides of dims 0..2, unit stride
 *   along D); query head h reads kv head h / (Hq/Hkv) (GQA).
 *   causal: query t sees key j iff j <= t + off, off = S - T (the queries are
 *   the last T positions), or off = start over a key/value cache (start
 *   read by the forward kernel on the device; a start past the cache gives
 *   zeros and is reported at the next synchronisation, cuda_check.cu).
 *   Rows (col_attention_cached_rows): k, v [R,Hkv,S,D] hold R sequences;
 *   batch row b reads cache row rows[b] and off = start[b] (both read on the
 *   device; a bad one gives that batch row zeros, a check kernel reports it).
 *   out [B,Hq,T,D] contiguous; extra (col_extra): logsumexp [B,Hq,T] f32 of
 *   each row of scaled scores, as the CPU kernel (cpu_attention.c) saves it,
 *   so either backend's backward can consume either backend's forward.
 *
 * Forward (FlashAttention-2 style): one block per (b, h, tile of BR
 * queries), 4 threads per query row. The block walks the key tiles of BC keys
 * (only those before the causal diagonal) keeping, per row, the running max m
 * and sum l of exp(score - m) and the unnormalised output in registers
 * (online softmax, f32): memory is linear in T and S, no T x S matrix exists.
 *
 * Backward, with P = exp(scores * scale - lse) recomputed tile by tile and
 * dS = P * (dP - Dt), dP = dO V^T, Dt[i] = dO[i] . O[i] (a first pass into
 * the backend's workspace):
 *   KV kernel, one block per (b, kv head, tile of BC keys), 4 threads per
 *     key row: dV = sum P^T dO, dK = scale * sum dS^T Q over the query heads
 *     of the group and the query tiles that see those keys;
 *   Q kernel, one block per (b, q head, tile of BR queries), 4 threads per
 *     query row: dQ = scale * sum dS K over the visible key tiles.
 * Every output element is summed by one thread in a fixed order: no atomics,
 * the bits do not depend on scheduling. Output packed [dq | dk | dv].
 *
 * The masking and NaN conventions are the CPU kernel's: masked scores are
 * -inf, exp of anything below -86 (and of NaN, -inf - -inf) is 0, a row
 * that met a NaN score gives NaN output and logsumexp.
 *
 * Tiles live in shared memory with rows padded to DM + 1 floats (no bank
 * conflicts on column walks), DM = head dim rounded up to 32, 64 or 128,
 * the padding columns zero; head dims above 128 are COL_EUNSUPPORTED. Tile
 * sizes keep every kernel under 75 KiB of shared memory (sm_86/89 allow 99).
 */
#include <limits.h>
#include <math.h>

#include "cuda_internal.h"

#define ATT_MAX_D 128

typedef struct {
    const float *q, *k, *v;
    int64_t qs[3], ks[3], vs[3]; /* strides of dims 0..2 in elements; dim 3 has stride 1 */
    int64_t B, Hq, Hkv, T, S, D, grp, off;
    int causal;
    float scale;
    /* over a key/value cache of S positions (forward only): the first
     * *pos + T are valid (S = *pos + T, off = *pos on the device); a bad
     * *pos gives zeros and goes to the check slot */
    const int64_t *pos;
    cu_check_slot *slot;
    /* rows (forward only): pos holds start [B], batch row b reads cache row rows[b] (b when rows
     * is NULL) of the R in k, v and its first start[b] + T positions (S = the cache length); a bad
     * row or start gives zeros for that batch row (the check kernel reports it) */
    int rowmode;
    const int64_t *rows;
    int64_t R;
} att_geom;

__device__ __forceinline__ int64_t dmin64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t dmax64(int64_t a, int64_t b) { return a > b ? a : b; }

/* exp as the CPU kernel's vexp treats its range: below -86 (and NaN) gives 0 */
__device__ __forceinline__ float att_exp(float y) { return y >= -86.0f ? expf(y) : 0.0f; }

/* max / sum / or over the 4 lanes of a row (lanes 4r..4r+3 of a warp) */
__device__ __forceinline__ float quad_max(float v)
{
    for (int o = 1; o < 4; o <<= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
__device__ __forceinline__ float quad_sum(float v)
{
    for (int o = 1; o < 4; o <<= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ int quad_or(int v)
{
    for (int o = 1; o < 4; o <<= 1)
        v |= __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* dst [ROWS][DM + 1] = mul * src rows 0..rows-1 (row stride rstride, D
 * values each); rows >= rows and columns >= D are zero. All threads. */
template <int DM, int ROWS>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t rstride, int rows, int D, float mul)
{
    for (int e = threadIdx.x; e < ROWS * DM; e += blockDim.x) {
        int i = e / DM, d = e % DM;
        dst[i * (DM + 1) + d] = i < rows && d < D ? src[i * rstride + d] * mul : 0.0f;
    }
}

/* ---- forward ----
 * Block: BR queries [t0, t0 + mr) of head h, batch b; 4 * BR threads, thread
 * (r, part) = (tid / 4, tid % 4) owns query row r: the scores of keys
 * part + 4c (c < BC/4) of each tile and output columns part + 4c (c < DM/4). */
template <int DM, int BR, int BC>
__global__ void __launch_bounds__(4 * BR) k_att_fwd(att_geom g, float *__restrict__ out, float *__restrict__ lse)
{
    constexpr int LD = DM + 1, LP = BC + 1, NS = BC / 4, NO = DM / 4;
    extern __shared__ float att_sm[];
    float *qs = att_sm;        /* [BR][LD] Q tile * scale */
    float *ks = qs + BR * LD;  /* [BC][LD] K tile */
    float *vs = ks + BC * LD;  /* [BC][LD] V tile */
    float *ps = vs + BC * LD;  /* [BR][LP] probabilities exp(s - m) of the tile */
    const int tid = threadIdx.x, r = tid >> 2, part = tid & 3, D = (int)g.D;
    const int64_t nqt = (g.T + BR - 1) / BR;
    const int64_t bh = blockIdx.x / nqt, t0 = (nqt - 1 - (int64_t)blockIdx.x % nqt) * BR; /* last tiles (most keys) first */
    const int64_t b = bh / g.Hq, h = bh % g.Hq, hk = h / g.grp;
    const int mr = (int)dmin64(BR, g.T - t0);
    const int64_t t = t0 + r; /* this thread's query */
    int64_t S = g.S, off = g.off, kvb = b;
    if (g.rowmode) { /* this batch row's cache row and positions: the same for the whole block */
        int64_t start = g.pos[b];
        kvb = g.rows ? g.rows[b] : b;
        if (kvb < 0 || kvb >= g.R || start < 0 || start > g.S - g.T) {
            for (int e = tid; e < mr * D; e += blockDim.x)
                out[(bh * g.T + t0 + e / D) * g.D + e % D] = 0.0f;
            if (tid < mr)
                lse[bh * g.T + t0 + tid] = 0.0f;
            return;
        }
        S = start + g.T;
        off = start;
    } else if (g.pos) { /* over a cache: the same for the whole block, so all threads return or none */
        int64_t start = *g.pos;
        if (start < 0 || start > g.S - g.T) {
            if (blockIdx.x == 0 && tid == 0) {
                g.slot->val = start;
                g.slot->pos = 0;
            }
            for (int e = tid; e < mr * D; e += blockDim.x)
                out[(bh * g.T + t0 + e / D) * g.D + e % D] = 0.0f;
            if (tid < mr)
                lse[bh * g.T + t0 + tid] = 0.0f;
            return;
        }
        S = start + g.T;
        off = start;
    }
    const float *kb = g.k + kvb * g.ks[0] + hk * g.ks[1];
    const float *vb = g.v + kvb * g.vs[0] + hk * g.vs[1];
    load_tile<DM, BR>(qs, g.q + b * g.qs[0] + h * g.qs[1] + t0 * g.qs[2], g.qs[2], mr, D, g.scale);

    float m = -INFINITY, l = 0.0f, o[NO];
    int bad = 0; /* a visible score was NaN */
#pragma unroll
    for (int c = 0; c < NO; c++)
        o[c] = 0.0f;
    const int64_t jend = g.causal ? dmin64(S, t0 + mr + off) : S; /* keys >= jend are masked for all rows */
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        const int nc = (int)dmin64(BC, jend - j0);
        __syncthreads(); /* the previous tile's K, V and P are no longer read */
        load_tile<DM, BC>(ks, kb + j0 * g.ks[2], g.ks[2], nc, D, 1.0f);
        load_tile<DM, BC>(vs, vb + j0 * g.vs[2], g.vs[2], nc, D, 1.0f);
        __syncthreads();
        float s[NS]; /* s[c]: score of key j0 + part + 4c */
#pragma unroll
        for (int c = 0; c < NS; c++)
            s[c] = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd = qs[r * LD + d];
#pragma unroll
            for (int c = 0; c < NS; c++)
                s[c] = fmaf(qd, ks[(part + 4 * c) * LD + d], s[c]);
        }
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < NS; c++) {
            int jl = part + 4 * c;
            bool vis = jl < nc && (!g.causal || j0 + jl <= t + off);
            float x = vis ? s[c] : -INFINITY;
            bad |= x != x;
            mx = x > mx ? x : mx; /* NaN dropped, as on the CPU */
            s[c] = x;
        }
        mx = quad_max(mx);
        float mnew = m > mx ? m : mx, sum = 0.0f;
#pragma unroll
        for (int c = 0; c < NS; c++) {
            float p = att_exp(s[c] - mnew); /* nothing visible yet: exp(-inf - -inf) = 0 */
            ps[r * LP + part + 4 * c] = p;
            sum += p;
        }
        sum = quad_sum(sum);
        float alpha = att_exp(m - mnew);
        l = l * alpha + sum;
        m = mnew;
#pragma unroll
        for (int c = 0; c < NO; c++)
            o[c] *= alpha;
        __syncthreads(); /* P of the whole tile written */
        for (int jl = 0; jl < nc; jl++) {
            float p = ps[r * LP + jl];
            const float *vr = vs + jl * LD + part;
#pragma unroll
            for (int c = 0; c < NO; c++)
                o[c] = fmaf(p, vr[4 * c], o[c]);
        }
    }
    bad = quad_or(bad);
    if (r < mr) {
        float inv = 1.0f / l, nanv = bad ? NAN : 0.0f;
        int64_t row = bh * g.T + t;
        float *orow = out + row * g.D;
#pragma unroll
        for (int c = 0; c < NO; c++) {
            int d = part + 4 * c;
            if (d < D)
                orow[d] = o[c] * inv + nanv;
        }
        if (part == 0)
            lse[row] = m + logf(l) + nanv;
    }
}

/* ---- backward ---- */

/* dt[r] = dO[r] . O[r] for the rows r = (b, h, t); one warp per row */
__global__ void k_att_rowdot(float *__restrict__ dt, const float *__restrict__ o, const float *__restrict__ dout,
                             int64_t ds0, int64_t ds1, int64_t ds2, int64_t Hq, int64_t T, int64_t D, int64_t rows)
{
    const int lane = threadIdx.x & 31;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += nw) {
        int64_t t = r % T, h = (r / T) % Hq, b = r / (T * Hq);
        const float *x = dout + b * ds0 + h * ds1 + t * ds2, *y = o + r * D;
        float acc = 0.0f;
        for (int64_t d = lane; d < D; d += 32)
            acc = fmaf(x[d], y[d], acc);
        acc = cu_warp_sum(acc);
        if (lane == 0)
            dt[r] = acc;
    }
}

typedef struct {
    att_geom g;
    const float *lse, *dt, *dout; /* lse, dt [B,Hq,T]; dout strided like q */
    int64_t ds[3];
    float *dq, *dk, *dv;
} att_bwd;

/* KV kernel. Block: keys [j0, j0 + nc) of kv head hk, batch b; 4 * BC
 * threads, thread (j, part) owns key row j: per query tile the scores of
 * queries part + 4c (c < BR/4), and columns part + 4c (c < DM/4) of dK, dV. */
template <int DM, int BC, int BR>
__global__ void __launch_bounds__(4 * BC) k_att_bwd_kv(att_bwd a)
{
    constexpr int LD = DM + 1, LP = BR + 1, NS = BR / 4, NO = DM / 4;
    extern __shared__ float att_sm[];
    float *ks = att_sm;         /* [BC][LD] K tile */
    float *vs = ks + BC * LD;   /* [BC][LD] V tile */
    float *qs = vs + BC * LD;   /* [BR][LD] Q tile */
    float *dos = qs + BR * LD;  /* [BR][LD] dO tile */
    float *pt = dos + BR * LD;  /* [BC][LP] P^T */
    float *dst = pt + BC * LP;  /* [BC][LP] dS^T */
    float *lses = dst + BC * LP; /* [BR] */
    float *dts = lses + BR;      /* [BR] */
    const att_geom &g = a.g;
    const int tid = threadIdx.x, j = tid >> 2, part = tid & 3, D = (int)g.D;
    const int64_t nkt = (g.S + BC - 1) / BC;
    const int64_t bk = blockIdx.x / nkt, j0 = ((int64_t)blockIdx.x % nkt) * BC;
    const int64_t b = bk / g.Hkv, hk = bk % g.Hkv;
    const int nc = (int)dmin64(BC, g.S - j0);
    load_tile<DM, BC>(ks, g.k + b * g.ks[0] + hk * g.ks[1] + j0 * g.ks[2], g.ks[2], nc, D, 1.0f);
    load_tile<DM, BC>(vs, g.v + b * g.vs[0] + hk * g.vs[1] + j0 * g.vs[2], g.vs[2], nc, D, 1.0f);

    float dk[NO], dv[NO];
#pragma unroll
    for (int c = 0; c < NO; c++)
        dk[c] = dv[c] = 0.0f;
    /* query tiles before tfirst see none of these keys */
    const int64_t tfirst = g.causal ? dmax64(0, j0 - g.off) / BR * BR : 0;
    for (int64_t h = hk * g.grp; h < (hk + 1) * g.grp; h++) {
        for (int64_t t0 = tfirst; t0 < g.T; t0 += BR) {
            const int mr = (int)dmin64(BR, g.T - t0);
            const int64_t row0 = (b * g.Hq + h) * g.T + t0;
            __syncthreads(); /* the previous tile's Q, dO, P^T, dS^T are no longer read (K, V stored, first time) */
            load_tile<DM, BR>(qs, g.q + b * g.qs[0] + h * g.qs[1] + t0 * g.qs[2], g.qs[2], mr, D, 1.0f);
            load_tile<DM, BR>(dos, a.dout + b * a.ds[0] + h * a.ds[1] + t0 * a.ds[2], a.ds[2], mr, D, 1.0f);
            for (int i = tid; i < BR; i += blockDim.x) {
                lses[i] = i < mr ? a.lse[row0 + i] : 0.0f;
                dts[i] = i < mr ? a.dt[row0 + i] : 0.0f;
            }
            __syncthreads();
            float s[NS], dp[NS]; /* of query part + 4c: S = K Q^T, dP = V dO^T */
#pragma unroll
            for (int c = 0; c < NS; c++)
                s[c] = dp[c] = 0.0f;
            for (int d = 0; d < D; d++) {
                float kd = ks[j * LD + d], vd = vs[j * LD + d];
#pragma unroll
                for (int c = 0; c < NS; c++) {
                    s[c] = fmaf(kd, qs[(part + 4 * c) * LD + d], s[c]);
                    dp[c] = fmaf(vd, dos[(part + 4 * c) * LD + d], dp[c]);
                }
            }
#pragma unroll
            for (int c = 0; c < NS; c++) {
                int i = part + 4 * c;
                bool vis = i < mr && j < nc && (!g.causal || j0 + j <= t0 + i + g.off);
                float p = vis ? att_exp(s[c] * g.scale - lses[i]) : 0.0f;
                pt[j * LP + i] = p;
                dst[j * LP + i] = p * (dp[c] - dts[i]);
            }
            __syncthreads(); /* P^T, dS^T of the tile written */
            const float *pr = pt + j * LP, *dsr = dst + j * LP;
            for (int i = 0; i < mr; i++) {
                float p = pr[i], ds = dsr[i];
                const float *qr = qs + i * LD + part, *dr = dos + i * LD + part;
#pragma unroll
                for (int c = 0; c < NO; c++) {
                    dv[c] = fmaf(p, dr[4 * c], dv[c]);
                    dk[c] = fmaf(ds, qr[4 * c], dk[c]);
                }
            }
        }
    }
    if (j < nc) {
        int64_t row = bk * g.S + j0 + j;
        float *dkr = a.dk + row * g.D, *dvr = a.dv + row * g.D;
#pragma unroll
        for (int c = 0; c < NO; c++) {
            int d = part + 4 * c;
            if (d < D) {
                dkr[d] = dk[c] * g.scale;
                dvr[d] = dv[c];
            }
        }
    }
}

/* Q kernel. Block: queries [t0, t0 + mr) of head h, batch b; 4 * BR threads,
 * thread (i, part) owns query row i: per key tile the scores of keys
 * part + 4c (c < BC/4), and columns part + 4c (c < DM/4) of dQ. */
template <int DM, int BR, int BC>
__global__ void __launch_bounds__(4 * BR) k_att_bwd_q(att_bwd a)
{
    constexpr int LD = DM + 1, LP = BC + 1, NS = BC / 4, NO = DM / 4;
    extern __shared__ float att_sm[];
    float *qs = att_sm;         /* [BR][LD] Q tile */
    float *dos = qs + BR * LD;  /* [BR][LD] dO tile */
    float *ks = dos + BR * LD;  /* [BC][LD] K tile */
    float *vs = ks + BC * LD;   /* [BC][LD] V tile */
    float *dss = vs + BC * LD;  /* [BR][LP] dS */
    const att_geom &g = a.g;
    const int tid = threadIdx.x, i = tid >> 2, part = tid & 3, D = (int)g.D;
    const int64_t nqt = (g.T + BR - 1) / BR;
    const int64_t bh = blockIdx.x / nqt, t0 = (nqt - 1 - (int64_t)blockIdx.x % nqt) * BR;
    const int64_t b = bh / g.Hq, h = bh % g.Hq, hk = h / g.grp;
    const int mr = (int)dmin64(BR, g.T - t0);
    const int64_t t = t0 + i, row = bh * g.T + t;
    const float *kb = g.k + b * g.ks[0] + hk * g.ks[1], *vb = g.v + b * g.vs[0] + hk * g.vs[1];
    load_tile<DM, BR>(qs, g.q + b * g.qs[0] + h * g.qs[1] + t0 * g.qs[2], g.qs[2], mr, D, 1.0f);
    load_tile<DM, BR>(dos, a.dout + b * a.ds[0] + h * a.ds[1] + t0 * a.ds[2], a.ds[2], mr, D, 1.0f);
    const float lse_i = i < mr ? a.lse[row] : 0.0f, dt_i = i < mr ? a.dt[row] : 0.0f;

    float dq[NO];
#pragma unroll
    for (int c = 0; c < NO; c++)
        dq[c] = 0.0f;
    const int64_t jend = g.causal ? dmin64(g.S, t0 + mr + g.off) : g.S;
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        const int nc = (int)dmin64(BC, jend - j0);
        __syncthreads(); /* the previous tile's K, V, dS are no longer read (Q, dO stored, first time) */
        load_tile<DM, BC>(ks, kb + j0 * g.ks[2], g.ks[2], nc, D, 1.0f);
        load_tile<DM, BC>(vs, vb + j0 * g.vs[2], g.vs[2], nc, D, 1.0f);
        __syncthreads();
        float s[NS], dp[NS]; /* of key part + 4c: S = Q K^T, dP = dO V^T */
#pragma unroll
        for (int c = 0; c < NS; c++)
            s[c] = dp[c] = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd = qs[i * LD + d], dd = dos[i * LD + d];
#pragma unroll
            for (int c = 0; c < NS; c++) {
                s[c] = fmaf(qd, ks[(part + 4 * c) * LD + d], s[c]);
                dp[c] = fmaf(dd, vs[(part + 4 * c) * LD + d], dp[c]);
            }
        }
#pragma unroll
        for (int c = 0; c < NS; c++) {
            int jl = part + 4 * c;
            bool vis = i < mr && jl < nc && (!g.causal || j0 + jl <= t + g.off);
            float p = vis ? att_exp(s[c] * g.scale - lse_i) : 0.0f;
            dss[i * LP + jl] = p * (dp[c] - dt_i);
        }
        __syncthreads(); /* dS of the tile written */
        for (int jl = 0; jl < nc; jl++) {
            float ds = dss[i * LP + jl];
            const float *kr = ks + jl * LD + part;
#pragma unroll
            for (int c = 0; c < NO; c++)
                dq[c] = fmaf(ds, kr[4 * c], dq[c]);
        }
    }
    if (i < mr) {
        float *dqr = a.dq + row * g.D;
#pragma unroll
        for (int c = 0; c < NO; c++) {
            int d = part + 4 * c;
            if (d < D)
                dqr[d] = dq[c] * g.scale;
        }
    }
}

/* ---- host side ---- */

static void geom_of(att_geom *g, const col_node *n)
{
    const col_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *v = &n->src[2]->t;
    g->B = q->shape[0], g->Hq = q->shape[1], g->T = q->shape[2], g->D = q->shape[3];
    g->Hkv = k->shape[1], g->S = k->shape[2];
    g->grp = g->Hkv > 0 ? g->Hq / g->Hkv : 0;
    g->off = g->S - g->T;
    g->causal = n->p.i[0] != 0;
    g->scale = n->p.f[0];
    g->pos = NULL;
    g->slot = NULL;
    g->rowmode = n->op == COL_OP_ATTENTION && n->p.i[1] != 0;
    g->rows = NULL;
    g->R = k->shape[0];
    g->q = (const float *)q->data, g->k = (const float *)k->data, g->v = (const float *)v->data;
    for (int d = 0; d < 3; d++)
        g->qs[d] = q->stride[d], g->ks[d] = k->stride[d], g->vs[d] = v->stride[d];
}

/* what the kernels assume (the builders guarantee it; checked, not trusted) */
static col_status check_geom(const att_geom *g, const col_node *n, const char *what, col_err *err)
{
    const col_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *v = &n->src[2]->t;
    bool unit = (q->shape[3] <= 1 || q->stride[3] == 1) && (k->shape[3] <= 1 || k->stride[3] == 1) &&
                (v->shape[3] <= 1 || v->stride[3] == 1);
    int64_t kB = g->rowmode ? g->R : g->B; /* rows: the caches' rows */
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != kB || k->shape[3] != g->D ||
        v->shape[0] != kB || v->shape[1] != g->Hkv || v->shape[2] != g->S || v->shape[3] != g->D || g->Hkv <= 0 ||
        g->Hq % g->Hkv != 0 || g->S <= 0 || g->D <= 0 || !unit)
        return col_err_set(err, COL_EINVAL,
                           "%s: bad shapes q [%lld,%lld,%lld,%lld], k/v [%lld,%lld,%lld,%lld] or a non-unit stride along D",
                           what, (long long)g->B, (long long)g->Hq, (long long)g->T, (long long)g->D,
                           (long long)k->shape[0], (long long)g->Hkv, (long long)g->S, (long long)k->shape[3]);
    if (g->causal && g->off < 0)
        return col_err_set(err, COL_EINVAL, "%s: causal with %lld queries but %lld keys (needs T <= S)", what,
                           (long long)g->T, (long long)g->S);
    if (g->D > ATT_MAX_D)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: head dim %lld, the CUDA kernels take at most %d", what,
                           (long long)g->D, ATT_MAX_D);
    return COL_OK;
}

/* tiles: forward BR x BC, KV kernel BC keys x BR queries, Q kernel BR x BC */
template <int DM> struct att_tiles {
    static constexpr int FWD_BR = 64, FWD_BC = DM == 128 ? 32 : 64;
    static constexpr int KV_BC = DM == 128 ? 32 : 64, KV_BR = DM == 32 ? 64 : 32;
    static constexpr int Q_BR = DM == 128 ? 32 : 64, Q_BC = DM == 32 ? 64 : 32;
    static constexpr size_t fwd_smem = sizeof(float) * ((FWD_BR + 2 * FWD_BC) * (DM + 1) + FWD_BR * (FWD_BC + 1));
    static constexpr size_t kv_smem =
        sizeof(float) * ((2 * KV_BC + 2 * KV_BR) * (DM + 1) + 2 * KV_BC * (KV_BR + 1) + 2 * KV_BR);
    static constexpr size_t q_smem = sizeof(float) * ((2 * Q_BR + 2 * Q_BC) * (DM + 1) + Q_BR * (Q_BC + 1));
};

static col_status grid_of(int64_t blocks, const char *what, col_err *err, unsigned *out)
{
    if (blocks > INT_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: %lld thread blocks, more than a CUDA grid holds", what,
                           (long long)blocks);
    *out = (unsigned)blocks;
    return COL_OK;
}

template <int DM>
static col_status fwd_launch(const col_cuda_ctx *c, const att_geom &g, float *out, float *lse, col_err *err)
{
    typedef att_tiles<DM> tl;
    constexpr int BR = tl::FWD_BR, BC = tl::FWD_BC;
    unsigned grid = 0;
    col_status st = grid_of(g.B * g.Hq * ((g.T + BR - 1) / BR), "attention", err, &grid);
    if (st == COL_OK)
        st = cu_status(cudaFuncSetAttribute(k_att_fwd<DM, BR, BC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)tl::fwd_smem),
                       err, "attention");
    if (st != COL_OK)
        return st;
    CU_LAUNCH(k_att_fwd<DM, BR, BC>, grid, 4 * BR, tl::fwd_smem, c->stream)(g, out, lse);
    return cu_launch(err, "attention");
}

static col_status k_attention(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    att_geom g;
    geom_of(&g, n);
    col_status st = check_geom(&g, n, "attention", err);
    if (st != COL_OK)
        return st;
    if (g.B * g.Hq * g.T == 0)
        return COL_OK; /* (a cache position is not checked without queries: nothing is read) */
    cu_check_slot *slot = NULL;
    if (g.rowmode) { /* each batch row over its own cache row and positions, read on the device */
        if (n->nsrc < 4)
            return col_err_set(err, COL_EINVAL, "attention: a per-row node without its start positions");
        cu_check_info info = {"attention", CU_CHECK_ROWS, g.S, g.R, g.T};
        st = cu_check_begin(c, &info, &slot, err);
        if (st != COL_OK)
            return st;
        g.pos = (const int64_t *)n->src[3]->t.data;
        g.rows = n->nsrc > 4 ? (const int64_t *)n->src[4]->t.data : NULL;
        g.slot = slot;
        st = cu_check_rows(c, slot, g.pos, g.rows, g.B, g.R, g.S, g.T, err, "attention");
        if (st != COL_OK) {
            cu_check_end(c);
            return st;
        }
    } else if (n->nsrc > 3) { /* over a cache: the first start+T keys are valid, start read on the device */
        cu_check_info info = {"attention", CU_CHECK_ATT, g.S, 0, g.T};
        st = cu_check_begin(c, &info, &slot, err);
        if (st != COL_OK)
            return st;
        g.pos = (const int64_t *)n->src[3]->t.data;
        g.slot = slot;
    }
    float *out = (float *)n->t.data, *lse = (float *)col_extra(n);
    if (g.D <= 32)
        st = fwd_launch<32>(c, g, out, lse, err);
    else if (g.D <= 64)
        st = fwd_launch<64>(c, g, out, lse, err);
    else
        st = fwd_launch<128>(c, g, out, lse, err);
    if (slot)
        cu_check_end(c);
    return st;
}

template <int DM> static col_status bwd_launch(const col_cuda_ctx *c, const att_bwd &a, col_err *err)
{
    typedef att_tiles<DM> tl;
    const att_geom &g = a.g;
    unsigned gkv = 0, gq = 0;
    col_status st = grid_of(g.B * g.Hkv * ((g.S + tl::KV_BC - 1) / tl::KV_BC), "attention_bwd", err, &gkv);
    if (st == COL_OK)
        st = grid_of(g.B * g.Hq * ((g.T + tl::Q_BR - 1) / tl::Q_BR), "attention_bwd", err, &gq);
    if (st == COL_OK)
        st = cu_status(cudaFuncSetAttribute(k_att_bwd_kv<DM, tl::KV_BC, tl::KV_BR>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tl::kv_smem),
                       err, "attention_bwd");
    if (st == COL_OK)
        st = cu_status(cudaFuncSetAttribute(k_att_bwd_q<DM, tl::Q_BR, tl::Q_BC>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tl::q_smem),
                       err, "attention_bwd");
    if (st != COL_OK)
        return st;
    if (gkv > 0) /* also when T == 0: dK = dV = 0 */
        CU_LAUNCH(k_att_bwd_kv<DM, tl::KV_BC, tl::KV_BR>, gkv, 4 * tl::KV_BC, tl::kv_smem, c->stream)(a);
    if (gq > 0)
        CU_LAUNCH(k_att_bwd_q<DM, tl::Q_BR, tl::Q_BC>, gq, 4 * tl::Q_BR, tl::q_smem, c->stream)(a);
    return cu_launch(err, "attention_bwd");
}

static col_status k_attention_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    att_bwd a;
    geom_of(&a.g, n); /* sources 0..2 are q, k, v; params copied from the forward */
    const att_geom &g = a.g;
    col_status st = check_geom(&g, n, "attention_bwd", err);
    if (st != COL_OK)
        return st;
    if (n->nsrc < 5)
        return col_err_set(err, COL_EINVAL, "attention_bwd: %d sources, needs q, k, v, the attention node and dO", n->nsrc);
    const col_node *fwd = n->src[3];
    const col_tensor *dt = &n->src[4]->t;
    if (fwd->op != COL_OP_ATTENTION || fwd->nsrc > 3 || dt->ndim != 4 || dt->shape[0] != g.B ||
        dt->shape[1] != g.Hq || dt->shape[2] != g.T || dt->shape[3] != g.D || (g.D > 1 && dt->stride[3] != 1))
        return col_err_set(err, COL_EINVAL, "attention_bwd: sources are not q, k, v, the attention node and dO [B,Hq,T,D]");
    int64_t rows = g.B * g.Hq * g.T;
    if ((size_t)rows * sizeof(float) > c->ws_bytes)
        return col_err_set(err, COL_EUNSUPPORTED, "attention_bwd: %lld query rows, the workspace holds %zu", (long long)rows,
                           c->ws_bytes / sizeof(float));
    const float *o = (const float *)fwd->t.data;
    a.lse = (const float *)col_extra(fwd);
    a.dout = (const float *)dt->data;
    for (int d = 0; d < 3; d++)
        a.ds[d] = dt->stride[d];
    a.dq = (float *)n->t.data;
    a.dk = a.dq + g.B * g.Hq * g.T * g.D;
    a.dv = a.dk + g.B * g.Hkv * g.S * g.D;
    float *dtr = (float *)c->ws;
    a.dt = dtr;
    if (g.B * g.Hkv * g.S == 0)
        return COL_OK;
    if (rows > 0) {
        CU_LAUNCH(k_att_rowdot, cu_blocks(c, rows * 32), CU_THREADS, 0, c->stream)(
            dtr, o, a.dout, a.ds[0], a.ds[1], a.ds[2], g.Hq, g.T, g.D, rows);
        st = cu_launch(err, "attention_bwd");
        if (st != COL_OK)
            return st;
    }
    if (g.D <= 32)
        return bwd_launch<32>(c, a, err);
    if (g.D <= 64)
        return bwd_launch<64>(c, a, err);
    return bwd_launch<128>(c, a, err);
}

void cu_register_attention(col_backend *be)
{
    be->kernel[COL_OP_ATTENTION] = k_attention;
    be->kernel[COL_OP_ATTENTION_BWD] = k_attention_bwd;
}
