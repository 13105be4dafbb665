/* cpu_attention.c - CPU kernels for causal / grouped-query attention, blocked
 * like FlashAttention-2: query tiles x key tiles with an online softmax, so
 * no more than one BR x BC tile of scores exists per thread and the scratch
 * does not depend on T or S.
 *
 *   q [B,Hq,T,D], k,v [B,Hkv,S,D]; query head h reads kv head h / (Hq/Hkv).
 *   causal: query t sees key j iff j <= t + (S - T).
 *   Over a cache (col_attention_cached): S = start + T, the first keys of the
 *   cache. Rows (col_attention_cached_rows): batch row b reads cache row
 *   rows[b] with its own S = start[b] + T, through the same task code, so a
 *   row's bits are those of col_attention_cached over that row alone.
 *
 * Forward: one task per (b, h, query tile). Scores are kept transposed (keys
 * x queries) so that Q is transposed once per task, K is read in place, and
 * the running max / sum of 16 queries sit in one vector. Key tiles past the
 * causal diagonal are skipped. Writes O and the logsumexp of every row.
 *
 * Backward, with P = exp(S * scale - lse), dS = P * (dP - rowsum(dO * O))
 * recomputed per tile and every output written by one task only, so the bits
 * do not depend on the thread count:
 *   A: per (b, kv head, key tile): dV = sum P^T dO, dK = sum dS^T Q over the
 *      query heads of the group and the query tiles that see those keys;
 *   B: per (b, q head, query tile): dQ = sum dS K over the key tiles.
 * When there are enough (b, kv head) pairs to keep the threads busy, one
 * task per pair runs A over all its key tiles and adds dS K into dQ on the
 * way (5 tile products per tile pair instead of 7), with the same operations
 * in the same order as B, so both schedules give identical results.
 *
 * Tile products use one register-blocked micro-kernel on GCC vector
 * extensions (AVX-512 / AVX2 FMA when the target has them). On the 2-core
 * Zen 4 it beat OpenBLAS sgemm called per 64x64 tile: forward, B=4, H=12,
 * T=1024, D=64, causal, 2 threads: 138 against 109 GFLOP/s.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_internal.h"
#include "graph_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* Vectors as wide as the target has registers for; rows are padded to PAD
 * floats (a multiple of every VL). NV: vectors per micro-kernel row. */
#if defined(__AVX512F__)
#define VBYTES 64
#define NV 4
#elif defined(__AVX__)
#define VBYTES 32
#define NV 2
#else
#define VBYTES 16
#define NV 2
#endif
enum { BR = COL_ATTENTION_TILE, BC = COL_ATTENTION_TILE, MR = 4, VL = VBYTES / 4, PAD = COL_ATTENTION_PAD };
/* the per-thread workspace is laid out as col_attention_scratch_per_thread (ops_attention.c) counts it */

typedef float vf __attribute__((vector_size(VBYTES)));
typedef int32_t vi __attribute__((vector_size(VBYTES)));
typedef uint32_t vu __attribute__((vector_size(VBYTES)));
typedef float vfu __attribute__((vector_size(VBYTES), aligned(4), may_alias));

static const float iota[PAD] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline vf vld(const float *p) { return *(const vfu *)p; }
static inline void vst(float *p, vf x) { *(vfu *)p = x; }
static inline vf vset1(float a)
{
#if defined(__AVX512F__)
    return (vf)_mm512_set1_ps(a);
#else
    vf r;
    for (int i = 0; i < VL; i++)
        r[i] = a;
    return r;
#endif
}
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
static inline vf vmax(vf a, vf b) { return vsel(a > b, a, b); }

static inline vf vfma(vf a, vf b, vf c)
{
#if defined(__AVX512F__)
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* exp(x) for x <= 0 (about 2 ulp); x < -86 (and -inf) gives 0. */
static inline vf vexp(vf x)
{
    const vf lo = vset1(-86.0f);
    vi keep = x >= lo;
    x = vsel(keep, x, lo);
    vf t = vfma(x, vset1(1.44269504088896341f), vset1(12582912.0f)); /* round(x / ln2) + 1.5 * 2^23 */
    vf n = t - vset1(12582912.0f);
    vf f = vfma(n, vset1(-0.693359375f), x);
    f = vfma(n, vset1(2.12194440e-4f), f);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, f, vset1(1.3981999507e-3f));
    p = vfma(p, f, vset1(8.3334519073e-3f));
    p = vfma(p, f, vset1(4.1665795894e-2f));
    p = vfma(p, f, vset1(1.6666665459e-1f));
    p = vfma(p, f, vset1(5.0000001201e-1f));
    p = vfma(p, f * f, f + vset1(1.0f));
    vu e = (vu)t << 23; /* 2^n in the exponent field (n + 1.5 * 2^23 in the low bits of t) */
    return (vf)(((vu)p + e) & (vu)keep);
}

static inline int64_t round16(int64_t x) { return (x + PAD - 1) / PAD * PAD; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- micro-kernel: C[M][N] (+)= A(M x K) B[K][N], N a multiple of 16 ----
 * A(i, k) = A[i * ras + k * cas] (row-major: cas = 1; transposed: ras = 1);
 * B and C row-major with leading dimensions ldb, ldc. */
static inline __attribute__((always_inline)) void mk_block(const int mr, const int nv, int64_t K, const float *A,
                                                           int64_t ras, int64_t cas, const float *B, int64_t ldb,
                                                           float *C, int64_t ldc, bool acc)
{
    vf c[MR][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            c[r][v] = acc ? vld(C + r * ldc + VL * v) : (vf){0};
    for (int64_t k = 0; k < K; k++) {
        vf b[4];
        for (int v = 0; v < nv; v++) {
            b[v] = vld(B + k * ldb + VL * v);
#if defined(__AVX512F__)
            __asm__("" : "+v"(b[v])); /* keep B in registers: one load per vector, not one per row */
#endif
        }
        for (int r = 0; r < mr; r++) {
            vf a = vset1(A[r * ras + k * cas]);
            for (int v = 0; v < nv; v++)
                c[r][v] = vfma(a, b[v], c[r][v]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++)
            vst(C + r * ldc + VL * v, c[r][v]);
}

static void mk(int64_t M, int64_t N, int64_t K, const float *A, int64_t ras, int64_t cas, const float *B, int64_t ldb,
               float *C, int64_t ldc, bool acc)
{
    for (int64_t n0 = 0; n0 < N; n0 += NV * VL) {
        int nv = (int)min64(NV, (N - n0) / VL);
        for (int64_t i = 0; i < M; i += MR) {
            int mr = (int)min64(MR, M - i);
            const float *a = A + i * ras, *b = B + n0;
            float *c = C + i * ldc + n0;
#define MK_CASE(R, V) \
    case (R) * 8 + (V): mk_block(R, V, K, a, ras, cas, b, ldb, c, ldc, acc); break;
#define MK_ROW(R) MK_CASE(R, 4) MK_CASE(R, 3) MK_CASE(R, 2) MK_CASE(R, 1)
            switch (mr * 8 + nv) {
                MK_ROW(1) MK_ROW(2) MK_ROW(3) MK_ROW(4)
            default: break;
            }
#undef MK_ROW
#undef MK_CASE
        }
    }
}

/* ---- geometry ---- */
typedef struct {
    int64_t B, Hq, Hkv, T, S, D, Dp, grp, off;
    bool causal;
    float scale;
    const float *q, *k, *v;
    int64_t qs[3], ks[3], vs[3]; /* strides of dims 0..2; the last dim has stride 1 */
    /* rows (forward only): batch row b reads cache row rows[b] (b without rows), its first
     * start[b] + T keys (S and off per row); NULL otherwise */
    const int64_t *rstart, *rrows;
} att_geom;

static void geom_init(att_geom *g, const col_node *n)
{
    const col_tensor *q = &n->src[0]->t, *k = &n->src[1]->t, *v = &n->src[2]->t;
    g->B = q->shape[0], g->Hq = q->shape[1], g->T = q->shape[2], g->D = q->shape[3];
    g->Hkv = k->shape[1], g->S = k->shape[2];
    g->Dp = round16(g->D);
    g->grp = g->Hq / g->Hkv;
    g->off = g->S - g->T;
    g->causal = n->p.i[0] != 0;
    g->scale = n->p.f[0];
    g->q = q->data, g->k = k->data, g->v = v->data;
    for (int d = 0; d < 3; d++)
        g->qs[d] = q->stride[d], g->ks[d] = k->stride[d], g->vs[d] = v->stride[d];
    g->rstart = g->rrows = NULL;
}

/* number of valid keys of row t (absolute) in the key tile starting at j0 with nc keys */
static inline int64_t row_limit(const att_geom *g, int64_t t, int64_t j0, int64_t nc)
{
    if (!g->causal)
        return nc;
    return max64(0, min64(nc, t + g->off - j0 + 1));
}

/* dst[d][j] = mul * (src row j, element d) (j < nc), zero for nc <= j < ld: a transposed tile */
static void pack_t(float *dst, int64_t ld, const float *src, int64_t sstride, int64_t nc, int64_t D, float mul)
{
    for (int64_t d = 0; d < D; d++)
        for (int64_t j = nc; j < ld; j++)
            dst[d * ld + j] = 0.0f;
    for (int64_t j = 0; j < nc; j++) {
        const float *s = src + j * sstride;
        for (int64_t d = 0; d < D; d++)
            dst[d * ld + j] = s[d] * mul;
    }
}

/* dst[r][0..Dp) = src row r (D values), zero padded */
static void pack_rows(float *dst, int64_t Dp, const float *src, int64_t sstride, int64_t rows, int64_t D)
{
    for (int64_t r = 0; r < rows; r++) {
        memcpy(dst + r * Dp, src + r * sstride, sizeof(float) * (size_t)D);
        for (int64_t d = D; d < Dp; d++)
            dst[r * Dp + d] = 0.0f;
    }
}

/* ---- scratch (per thread, in floats; every region a multiple of 16 floats) ---- */
static inline int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* the backend's threads as far as the scratch area allows (at least 1), or 0 if it is too small */
static int scratch_threads(const col_exec *ex, size_t per)
{
    size_t n = ex->scratch_bytes / per;
    int mt = col_cpu_threads(ex);
    return n >= (size_t)mt ? mt : (int)n;
}

/* ---- forward ----
 * Scores are kept transposed, keys x queries (st[j][i]), so the softmax
 * statistics of VL queries sit in one vector and Q is transposed once per
 * task rather than K once per key tile. */

/* one query tile [t0, t0 + mr) of head h in batch b */
static void fwd_task(const att_geom *g, int64_t b, int64_t h, int64_t t0, float *ws, float *out, float *lse)
{
    const int64_t D = g->D, Dp = g->Dp, mr = min64(BR, g->T - t0), mrp = round16(mr);
    float *qt = ws;              /* [D][BR]  Q tile transposed, times scale */
    float *vp = qt + D * BR;     /* [BC][Dp] V tile, padded (when D % 16) */
    float *st = vp + BC * Dp;    /* [BC][BR] scores k q^T, then probabilities */
    float *o = st + BC * BR;     /* [BR][Dp] output accumulator */
    float *m = o + BR * Dp, *l = m + BR, *alpha = l + BR; /* [BR] running max, sum, rescale */
    float *nanrow = alpha + BR; /* [BR] NaN once a row has seen a NaN score, else 0 */
    int64_t hk = h / g->grp, S = g->S, off = g->off, kvb = b;
    if (g->rstart) { /* rows: this batch row's cache row and valid keys */
        off = g->rstart[b];
        S = off + g->T;
        kvb = g->rrows ? g->rrows[b] : b;
    }
    const float *kb = g->k + kvb * g->ks[0] + hk * g->ks[1];
    const float *vb = g->v + kvb * g->vs[0] + hk * g->vs[1];
    const vf jidx = vld(iota);
    const vf ninf = vset1(-INFINITY);

    pack_t(qt, BR, g->q + b * g->qs[0] + h * g->qs[1] + t0 * g->qs[2], g->qs[2], mr, D, g->scale);
    memset(o, 0, sizeof(float) * (size_t)(mr * Dp));
    for (int64_t i = 0; i < BR; i++)
        m[i] = -INFINITY, l[i] = 0.0f, nanrow[i] = 0.0f;
    int64_t jend = g->causal ? min64(S, t0 + mr + off) : S; /* keys past jend are masked for all rows */
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        int64_t nc = min64(BC, jend - j0);
        const float *kr = kb + j0 * g->ks[2];
        mk(nc, mrp, D, kr, g->ks[2], 1, qt, BR, st, BR, false); /* st = k q^T * scale */
        bool full = !g->causal || j0 + nc - 1 <= t0 + off;      /* no masked entry in this tile */
        int64_t shift = j0 - t0 - off;                          /* key j0 + j is seen by queries i >= j + shift */
        for (int64_t iv = 0; iv < mrp; iv += VL) {
            vf ivec = jidx + (float)iv, mx = ninf;
            vi bad = {0}; /* max and exp drop NaN scores: remember them, to give NaN rows as softmax does */
            for (int64_t j = 0; j < nc; j++) {
                vf x = vld(st + j * BR + iv);
                if (!full) {
                    x = vsel(ivec >= (float)(j + shift), x, ninf);
                    vst(st + j * BR + iv, x);
                }
                mx = vmax(mx, x);
                bad |= x != x;
            }
            vst(nanrow + iv, vsel(bad, vset1(NAN), vld(nanrow + iv)));
            vf mold = vld(m + iv), mnew = vmax(mold, mx), sum = {0};
            for (int64_t j = 0; j < nc; j++) { /* a row with nothing visible yet gives exp(nan) = 0 */
                vf p = vexp(vld(st + j * BR + iv) - mnew);
                vst(st + j * BR + iv, p);
                sum += p;
            }
            vf a = vexp(mold - mnew);
            vst(alpha + iv, a);
            vst(l + iv, vld(l + iv) * a + sum);
            vst(m + iv, mnew);
        }
        for (int64_t i = 0; i < mr; i++) {
            if (alpha[i] != 1.0f) {
                float *orow = o + i * Dp;
                vf a = vset1(alpha[i]);
                for (int64_t d = 0; d < Dp; d += VL)
                    vst(orow + d, vld(orow + d) * a);
            }
        }
        const float *vt = vb + j0 * g->vs[2];
        int64_t ldv = g->vs[2];
        if (D % PAD) {
            pack_rows(vp, Dp, vt, ldv, nc, D);
            vt = vp, ldv = Dp;
        }
        mk(mr, Dp, nc, st, 1, BR, vt, ldv, o, Dp, true); /* o += p v */
    }
    int64_t row0 = (b * g->Hq + h) * g->T + t0;
    for (int64_t i = 0; i < mr; i++) {
        float inv = 1.0f / l[i];
        float *dst = out + (row0 + i) * D;
        const float *orow = o + i * Dp;
        for (int64_t d = 0; d < D; d++)
            dst[d] = orow[d] * inv + nanrow[i];
        lse[row0 + i] = m[i] + logf(l[i]) + nanrow[i];
    }
}

/* rows: every batch row's cache row and positions checked; *keys = the keys all rows see */
static col_status check_rows(att_geom *g, const col_node *n, int64_t *keys, col_err *err)
{
    const int64_t *start = n->src[3]->t.data, *rows = n->nsrc > 4 ? n->src[4]->t.data : NULL;
    int64_t R = n->src[1]->t.shape[0], L = g->S, sum = 0;
    for (int64_t b = 0; b < g->B; b++) {
        int64_t r = rows ? rows[b] : b;
        if (r < 0 || r >= R)
            return col_err_set(err, COL_EINVAL, "attention: batch row %lld uses cache row %lld, outside the cache's %lld rows",
                               (long long)b, (long long)r, (long long)R);
        if (start[b] < 0 || start[b] > L - g->T)
            return col_err_set(err, COL_EINVAL,
                               "attention: batch row %lld at position %lld + %lld tokens exceeds the cache of %lld",
                               (long long)b, (long long)start[b], (long long)g->T, (long long)L);
        sum += start[b] + g->T;
    }
    g->rstart = start, g->rrows = rows;
    *keys = sum;
    return COL_OK;
}

static col_status k_attention(const col_node *n, const col_exec *ex, col_err *err)
{
    att_geom g;
    geom_init(&g, n);
    int64_t keys = g.B * g.S; /* the keys of all batch rows, for the size of the work */
    if (n->p.i[1]) {          /* rows: each batch row over its own cache row and positions */
        col_status st = check_rows(&g, n, &keys, err);
        if (st != COL_OK)
            return st;
    } else if (n->nsrc > 3) { /* over a cache: only the first start+T keys are valid */
        int64_t start = *(const int64_t *)n->src[3]->t.data;
        if (start < 0 || start + g.T > g.S)
            return col_err_set(err, COL_EINVAL, "attention: cache position %lld + %lld new tokens exceeds the cache of %lld",
                               (long long)start, (long long)g.T, (long long)g.S);
        g.S = start + g.T;
        g.off = start;
        keys = g.B * g.S;
    }
    size_t per = col_attention_scratch_per_thread(g.D, false);
    int nthr = scratch_threads(ex, per);
    if (nthr < 1)
        return col_err_set(err, COL_EINTERNAL, "attention: scratch of %zu bytes, needs %zu per thread",
                           ex->scratch_bytes, per);
    float *out = n->t.data, *lse = col_extra(n);
    int64_t nqt = (g.T + BR - 1) / BR, ntasks = g.B * g.Hq * nqt;
    bool par = ntasks > 1 && g.Hq * g.T * keys * g.D > COL_PAR_MIN;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr) if (par)
    for (int64_t task = 0; task < ntasks; task++) {
        int64_t qt = nqt - 1 - task % nqt, bh = task / nqt; /* one head at a time (its K, V stay in cache) */
        float *ws = (float *)((char *)ex->scratch + (size_t)thread_id() * per);
        fwd_task(&g, bh / g.Hq, bh % g.Hq, qt * BR, ws, out, lse);
    }
    return COL_OK;
}

/* ---- backward ---- */
typedef struct {
    att_geom g;
    const float *o, *lse, *dout;
    int64_t ds[3]; /* strides of dout dims 0..2 */
    float *dq, *dk, *dv;
} att_bwd;

/* Dt[i] = dO[i] . O[i] */
static void row_dots(const att_bwd *a, const float *dor, const float *orow, int64_t mr, float *dt)
{
    const int64_t D = a->g.D;
    for (int64_t i = 0; i < mr; i++) {
        const float *x = dor + i * a->ds[2], *y = orow + i * D;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < D; d++)
            acc += x[d] * y[d];
        dt[i] = acc;
    }
}

/* s (scores) -> P = exp(s * scale - lse), dp -> dS = P * (dP - Dt); masked entries 0 */
static void probs_grads(const att_geom *g, float *s, float *dp, int64_t mr, int64_t t0, int64_t j0, int64_t nc,
                        const float *lse, const float *dt)
{
    const vf jidx = vld(iota);
    int64_t ncp = round16(nc);
    for (int64_t i = 0; i < mr; i++) {
        float *sr = s + i * BC, *dr = dp + i * BC;
        vf lim = vset1((float)row_limit(g, t0 + i, j0, nc));
        vf l = vset1(lse[i]), dti = vset1(dt[i]);
        for (int64_t c = 0; c < ncp; c += VL) {
            vf p = vexp(vld(sr + c) * g->scale - l);
            p = vsel(jidx + (float)c < lim, p, (vf){0});
            vst(sr + c, p);
            vst(dr + c, p * (vld(dr + c) - dti));
        }
    }
}

/* pass A: dK, dV of keys [j0, j0 + nc) of kv head hk. With dq (single pass,
 * D % 16 == 0) also adds dS K into the (unscaled) dQ rows of the group, in
 * the same order of operations as pass B. */
static void bwd_kv_task(const att_bwd *a, int64_t b, int64_t hk, int64_t j0, float *ws, bool dq)
{
    const att_geom *g = &a->g;
    const int64_t D = g->D, Dp = g->Dp, nc = min64(BC, g->S - j0), ncp = round16(nc);
    float *kt = ws;              /* [D][BC] */
    float *vt = kt + D * BC;     /* [D][BC] */
    float *s = vt + D * BC;      /* [BR][BC] P */
    float *dp = s + BR * BC;     /* [BR][BC] dP, then dS */
    float *dk = dp + BR * BC;    /* [BC][Dp] */
    float *dv = dk + BC * Dp;    /* [BC][Dp] */
    float *qp = dv + BC * Dp;    /* [BR][Dp] (when D % 16) */
    float *dop = qp + BR * Dp;   /* [BR][Dp] (when D % 16) */
    float *dt = dop + BR * Dp;   /* [BR] */
    pack_t(kt, BC, g->k + b * g->ks[0] + hk * g->ks[1] + j0 * g->ks[2], g->ks[2], nc, D, 1.0f);
    pack_t(vt, BC, g->v + b * g->vs[0] + hk * g->vs[1] + j0 * g->vs[2], g->vs[2], nc, D, 1.0f);
    memset(dk, 0, sizeof(float) * (size_t)(2 * BC * Dp));
    int64_t tfirst = g->causal ? max64(0, j0 - g->off) / BR * BR : 0; /* earlier query tiles see none of these keys */
    for (int64_t h = hk * g->grp; h < (hk + 1) * g->grp; h++) {
        for (int64_t t0 = tfirst; t0 < g->T; t0 += BR) {
            int64_t mr = min64(BR, g->T - t0), row0 = (b * g->Hq + h) * g->T + t0;
            const float *qr = g->q + b * g->qs[0] + h * g->qs[1] + t0 * g->qs[2];
            const float *dor = a->dout + b * a->ds[0] + h * a->ds[1] + t0 * a->ds[2];
            mk(mr, ncp, D, qr, g->qs[2], 1, kt, BC, s, BC, false);     /* S = Q K^T */
            mk(mr, ncp, D, dor, a->ds[2], 1, vt, BC, dp, BC, false);   /* dP = dO V^T */
            row_dots(a, dor, a->o + row0 * D, mr, dt);
            probs_grads(g, s, dp, mr, t0, j0, nc, a->lse + row0, dt);
            if (dq) { /* dQ += dS K over the keys this query tile sees (pass B's tile) */
                int64_t ncq = g->causal ? min64(nc, t0 + mr + g->off - j0) : nc;
                mk(mr, D, ncq, dp, BC, 1, g->k + b * g->ks[0] + hk * g->ks[1] + j0 * g->ks[2], g->ks[2],
                   a->dq + row0 * D, D, true);
            }
            const float *qb = qr, *db = dor;
            int64_t ldq = g->qs[2], ldd = a->ds[2];
            if (D % PAD) {
                pack_rows(qp, Dp, qr, ldq, mr, D);
                pack_rows(dop, Dp, dor, ldd, mr, D);
                qb = qp, db = dop, ldq = ldd = Dp;
            }
            mk(nc, Dp, mr, s, 1, BC, db, ldd, dv, Dp, true);  /* dV += P^T dO */
            mk(nc, Dp, mr, dp, 1, BC, qb, ldq, dk, Dp, true); /* dK += dS^T Q */
        }
    }
    int64_t row0 = (b * g->Hkv + hk) * g->S + j0;
    for (int64_t j = 0; j < nc; j++) {
        float *dkr = a->dk + (row0 + j) * D, *dvr = a->dv + (row0 + j) * D;
        for (int64_t d = 0; d < D; d++) {
            dkr[d] = dk[j * Dp + d] * g->scale;
            dvr[d] = dv[j * Dp + d];
        }
    }
}

/* single pass: dK, dV of kv head hk and dQ of its query heads */
static void bwd_head_task(const att_bwd *a, int64_t b, int64_t hk, float *ws)
{
    const att_geom *g = &a->g;
    float *dq = a->dq + (b * g->Hq + hk * g->grp) * g->T * g->D;
    int64_t n = g->grp * g->T * g->D;
    memset(dq, 0, sizeof(float) * (size_t)n);
    for (int64_t j0 = 0; j0 < g->S; j0 += BC)
        bwd_kv_task(a, b, hk, j0, ws, true);
    for (int64_t i = 0; i < n; i++)
        dq[i] *= g->scale;
}

/* transposed layout (keys x queries): st -> P^T, dpt -> dS^T, for nc keys and
 * mrp queries; lse, dt per query */
static void probs_grads_t(const att_geom *g, float *st, float *dpt, int64_t nc, int64_t mrp, int64_t t0, int64_t j0,
                          const float *lse, const float *dt)
{
    const vf jidx = vld(iota);
    bool full = !g->causal || j0 + nc - 1 <= t0 + g->off;
    int64_t shift = j0 - t0 - g->off;
    for (int64_t j = 0; j < nc; j++) {
        float *sr = st + j * BR, *dr = dpt + j * BR;
        for (int64_t iv = 0; iv < mrp; iv += VL) {
            vf p = vexp(vld(sr + iv) * g->scale - vld(lse + iv));
            if (!full)
                p = vsel(jidx + (float)iv >= (float)(j + shift), p, (vf){0});
            vst(sr + iv, p);
            vst(dr + iv, p * (vld(dr + iv) - vld(dt + iv)));
        }
    }
}

/* pass B: dQ of query rows [t0, t0 + mr) of head h (scores transposed, as in the forward) */
static void bwd_q_task(const att_bwd *a, int64_t b, int64_t h, int64_t t0, float *ws)
{
    const att_geom *g = &a->g;
    const int64_t D = g->D, Dp = g->Dp, mr = min64(BR, g->T - t0), mrp = round16(mr), hk = h / g->grp;
    float *qt = ws;              /* [D][BR] Q tile transposed */
    float *dot = qt + D * BR;    /* [D][BR] dO tile transposed */
    float *kp = dot + D * BR;    /* [BC][Dp] K tile, padded (when D % 16) */
    float *st = kp + BC * Dp;    /* [BC][BR] P^T */
    float *dpt = st + BC * BR;   /* [BC][BR] dP^T, then dS^T */
    float *dq = dpt + BC * BR;   /* [BR][Dp] */
    float *lse = dq + BR * Dp, *dt = lse + BR; /* [BR] each */
    int64_t row0 = (b * g->Hq + h) * g->T + t0;
    const float *qr = g->q + b * g->qs[0] + h * g->qs[1] + t0 * g->qs[2];
    const float *dor = a->dout + b * a->ds[0] + h * a->ds[1] + t0 * a->ds[2];
    const float *kb = g->k + b * g->ks[0] + hk * g->ks[1], *vb = g->v + b * g->vs[0] + hk * g->vs[1];
    pack_t(qt, BR, qr, g->qs[2], mr, D, 1.0f);
    pack_t(dot, BR, dor, a->ds[2], mr, D, 1.0f);
    row_dots(a, dor, a->o + row0 * D, mr, dt);
    for (int64_t i = 0; i < BR; i++) {
        lse[i] = i < mr ? a->lse[row0 + i] : 0.0f;
        dt[i] = i < mr ? dt[i] : 0.0f;
    }
    memset(dq, 0, sizeof(float) * (size_t)(BR * Dp));
    int64_t jend = g->causal ? min64(g->S, t0 + mr + g->off) : g->S;
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        int64_t nc = min64(BC, jend - j0);
        const float *kr = kb + j0 * g->ks[2];
        mk(nc, mrp, D, kr, g->ks[2], 1, qt, BR, st, BR, false);                      /* S^T = K Q^T */
        mk(nc, mrp, D, vb + j0 * g->vs[2], g->vs[2], 1, dot, BR, dpt, BR, false);    /* dP^T = V dO^T */
        probs_grads_t(g, st, dpt, nc, mrp, t0, j0, lse, dt);
        int64_t ldk = g->ks[2];
        if (D % PAD) {
            pack_rows(kp, Dp, kr, ldk, nc, D);
            kr = kp, ldk = Dp;
        }
        mk(mr, Dp, nc, dpt, 1, BR, kr, ldk, dq, Dp, true); /* dQ += dS K */
    }
    for (int64_t i = 0; i < mr; i++) {
        float *dst = a->dq + (row0 + i) * D;
        for (int64_t d = 0; d < D; d++)
            dst[d] = dq[i * Dp + d] * g->scale;
    }
}

static col_status k_attention_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    att_bwd a;
    geom_init(&a.g, n); /* sources 0..2 are q, k, v; params copied from the forward */
    const att_geom *g = &a.g;
    const col_node *fwd = n->src[3];
    const col_tensor *dt = &n->src[4]->t;
    a.o = fwd->t.data;
    a.lse = col_extra(fwd);
    a.dout = dt->data;
    for (int d = 0; d < 3; d++)
        a.ds[d] = dt->stride[d];
    a.dq = n->t.data;
    a.dk = a.dq + g->B * g->Hq * g->T * g->D;
    a.dv = a.dk + g->B * g->Hkv * g->S * g->D;
    size_t per = col_attention_scratch_per_thread(g->D, true);
    int nthr = scratch_threads(ex, per);
    if (nthr < 1)
        return col_err_set(err, COL_EINTERNAL, "attention_bwd: scratch of %zu bytes, needs %zu per thread",
                           ex->scratch_bytes, per);
    bool par = g->B * g->Hq * g->T * g->S * g->D > COL_PAR_MIN;
    /* One pass over (b, kv head) does 10 tile products per tile pair against
     * 14 for the two passes, but has only B * Hkv tasks: take it when they
     * keep the threads at least 80% busy. Both give the same bits. */
    int64_t used = par ? nthr : 1, heads = g->B * g->Hkv, rounds = (heads + used - 1) / used;
    bool single = g->D % PAD == 0 && heads * 5 >= used * rounds * 4;
    int64_t nkt = (g->S + BC - 1) / BC, nqt = (g->T + BR - 1) / BR;
    int64_t na = single ? 0 : heads * nkt, nb = single ? 0 : g->B * g->Hq * nqt;
#pragma omp parallel num_threads(nthr) if (par)
    {
        float *ws = (float *)((char *)ex->scratch + (size_t)thread_id() * per);
        if (single) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t bh = 0; bh < heads; bh++)
                bwd_head_task(&a, bh / g->Hkv, bh % g->Hkv, ws);
        }
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t task = 0; task < na; task++) { /* one head at a time, first key tiles (most queries) first */
            int64_t kt = task % nkt, bh = task / nkt;
            bwd_kv_task(&a, bh / g->Hkv, bh % g->Hkv, kt * BC, ws, false);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < nb; task++) { /* one head at a time, last query tiles (most keys) first */
            int64_t qt = nqt - 1 - task % nqt, bh = task / nqt;
            bwd_q_task(&a, bh / g->Hq, bh % g->Hq, qt * BR, ws);
        }
    }
    return COL_OK;
}

void col_cpu_register_attention(col_backend *be)
{
    be->kernel[COL_OP_ATTENTION] = k_attention;
    be->kernel[COL_OP_ATTENTION_BWD] = k_attention_bwd;
}
