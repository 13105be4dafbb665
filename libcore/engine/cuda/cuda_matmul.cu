/* cuda_matmul.cu - MATMUL through cuBLASLt.
 *
 * Row-major C [M,N] = A [M,K] B [K,N] is computed as the column-major
 * C^T = B^T A^T, so cuBLASLt's first operand is b and its second a. Each
 * operand is read in place (the builder makes it BLAS-readable: unit stride
 * along one of the last two dims); batch dims that collapse to one stride
 * per operand become one strided-batched call, the rest a loop of calls.
 * f32 operands: f32 compute, or TF32 when the backend's tf32 flag is on.
 * bf16 / f16 operands: f32 accumulation, output of the node's dtype.
 * The cuBLASLt descriptors and the heuristic's algorithm are cached per call
 * shape in the backend (below): a call of a known shape only sets pointers.
 * The kernels of one backend are called from one host thread at a time.
 * cu_gemm_f32 runs one f32 GEMM of other kernels (cuda_image.cu's conv2d)
 * through the same cache. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

static cudaDataType_t cu_type(col_dtype dt)
{
    return dt == COL_BF16 ? CUDA_R_16BF : dt == COL_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* largest power of two (<= 256) dividing both the address and the batch stride in bytes */
static uint32_t align_of(const void *p, int64_t stride_bytes)
{
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes | 256u;
    return (uint32_t)(v & (~v + 1));
}

/* ---- the descriptors of a call shape, cached ----
 * A matmul descriptor, three layouts and the preference, and the algorithm
 * cuBLASLt's heuristic picked for them depend only on what the key holds;
 * between two calls of the same shape only the pointers change. The
 * backend keeps the last LT_CACHE_SIZE shapes (least recently used out),
 * so a training step builds them once per shape, not once per call. */

typedef struct {
    int dta, dtc;            /* operand and output dtypes (col_dtype) */
    int ta, tb, tf32;        /* transposes (a, b as the builder gave them), TF32 compute */
    int64_t M, N, K, lda, ldb, ldc;
    int64_t inner, sa, sb;   /* strided batch: count and strides of a and b (c's is M N) */
    uint32_t al_a, al_b, al_c; /* alignments of cuBLASLt's A (= b), B (= a), C/D in bytes */
} lt_key;

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
} lt_objs;

#define LT_CACHE_SIZE 64

typedef struct {
    lt_key key;
    lt_objs o;
    cublasLtMatmulAlgo_t algo;
    uint64_t used; /* the cache's tick at the last use; 0: empty */
} lt_entry;

struct cu_lt_cache {
    lt_entry e[LT_CACHE_SIZE];
    uint64_t tick;
    uint64_t hits, misses; /* for benchmarks and tests */
};

static void lt_free(lt_objs *o)
{
    if (o->pref)
        cublasLtMatmulPreferenceDestroy(o->pref);
    if (o->lc)
        cublasLtMatrixLayoutDestroy(o->lc);
    if (o->lb)
        cublasLtMatrixLayoutDestroy(o->lb);
    if (o->la)
        cublasLtMatrixLayoutDestroy(o->la);
    if (o->op)
        cublasLtMatmulDescDestroy(o->op);
    memset(o, 0, sizeof *o);
}

void cu_lt_cache_free(col_cuda_ctx *c)
{
    if (!c->lt_cache)
        return;
    for (int i = 0; i < LT_CACHE_SIZE; i++)
        if (c->lt_cache->e[i].used)
            lt_free(&c->lt_cache->e[i].o);
    free(c->lt_cache);
    c->lt_cache = NULL;
}

extern "C" void col_cuda_backend_matmul_cache(const col_backend *be, uint64_t *hits, uint64_t *misses)
{
    const col_cuda_ctx *c = be && be->ctx ? (const col_cuda_ctx *)be->ctx : NULL;
    *hits = c && c->lt_cache ? c->lt_cache->hits : 0;
    *misses = c && c->lt_cache ? c->lt_cache->misses : 0;
}

static col_status layout_batch(cublasLtMatrixLayout_t l, int64_t count, int64_t stride)
{
    int32_t cnt = (int32_t)count;
    if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &cnt, sizeof cnt) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride) !=
            CUBLAS_STATUS_SUCCESS)
        return COL_EINTERNAL;
    return COL_OK;
}

/* the descriptors of k and the heuristic's algorithm; *found = 0 when it has none */
static cublasStatus_t lt_build(const col_cuda_ctx *c, const lt_key *k, lt_objs *o, cublasLtMatmulAlgo_t *algo, int *found)
{
    memset(o, 0, sizeof *o);
    *found = 0;
    cublasComputeType_t ct = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    /* cuBLASLt operand 1 = b: stored as column-major [N, K] (no transpose) or [K, N] (transpose) */
    cublasOperation_t op1 = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dt = cu_type((col_dtype)k->dta);
    int64_t M = k->M, N = k->N, K = k->K;
    cublasStatus_t s = cublasLtMatmulDescCreate(&o->op, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o->la, dt, k->tb ? K : N, k->tb ? N : K, k->ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o->lb, dt, k->ta ? M : K, k->ta ? K : M, k->lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o->lc, cu_type((col_dtype)k->dtc), N, M, k->ldc);
    if (s == CUBLAS_STATUS_SUCCESS && k->inner > 1) {
        if (layout_batch(o->la, k->inner, k->sb) != COL_OK || layout_batch(o->lb, k->inner, k->sa) != COL_OK ||
            layout_batch(o->lc, k->inner, M * N) != COL_OK)
            s = CUBLAS_STATUS_INVALID_VALUE;
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceCreate(&o->pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->ws_bytes,
                                                 sizeof c->ws_bytes);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al_a,
                                                 sizeof k->al_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al_b,
                                                 sizeof k->al_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->al_c,
                                                 sizeof k->al_c);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al_c,
                                                 sizeof k->al_c);
    cublasLtMatmulHeuristicResult_t heur;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->lt, o->op, o->la, o->lb, o->lc, o->lc, o->pref, 1, &heur, found);
    if (s != CUBLAS_STATUS_SUCCESS || *found < 1) {
        *found = 0;
        lt_free(o);
    } else {
        *algo = heur.algo;
    }
    return s;
}

/* the cached entry for k, built on a miss (the least recently used one
 * replaced); NULL with *st set when cuBLASLt fails or has no algorithm */
static const lt_entry *lt_lookup(col_cuda_ctx *c, const lt_key *k, cublasStatus_t *st)
{
    *st = CUBLAS_STATUS_SUCCESS;
    if (!c->lt_cache) {
        c->lt_cache = (cu_lt_cache *)calloc(1, sizeof *c->lt_cache);
        if (!c->lt_cache) {
            *st = CUBLAS_STATUS_ALLOC_FAILED;
            return NULL;
        }
    }
    cu_lt_cache *lc = c->lt_cache;
    lt_entry *victim = &lc->e[0];
    lc->tick++;
    for (int i = 0; i < LT_CACHE_SIZE; i++) {
        lt_entry *e = &lc->e[i];
        if (e->used && memcmp(&e->key, k, sizeof *k) == 0) {
            e->used = lc->tick;
            lc->hits++;
            return e;
        }
        if (e->used < victim->used)
            victim = e;
    }
    lc->misses++;
    lt_objs o;
    cublasLtMatmulAlgo_t algo;
    int found = 0;
    *st = lt_build(c, k, &o, &algo, &found);
    if (!found)
        return NULL;
    if (victim->used)
        lt_free(&victim->o);
    victim->key = *k;
    victim->o = o;
    victim->algo = algo;
    victim->used = lc->tick;
    return victim;
}

static col_status k_matmul(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    int nd = n->t.ndim;
    if (col_dtype_is_quant(b->dtype)) /* x @ W^T, W quantized (cuda_quant.cu) */
        return cu_matmul_quant(n, ex, err);
    int64_t M = n->t.shape[nd - 2], N = n->t.shape[nd - 1], K = a->shape[nd - 1];
    size_t esc = col_dtype_size(n->t.dtype), esa = col_dtype_size(a->dtype), esb = col_dtype_size(b->dtype);
    if (a->dtype != b->dtype || (a->dtype != COL_F32 && a->dtype != COL_BF16 && a->dtype != COL_F16) ||
        (n->t.dtype != COL_F32 && n->t.dtype != a->dtype))
        return col_err_set(err, COL_EDTYPE, "matmul: %s @ %s -> %s is not supported", col_dtype_name(a->dtype),
                           col_dtype_name(b->dtype), col_dtype_name(n->t.dtype));
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: a dimension exceeds 2^31");
    int64_t total = col_numel(&n->t);
    if (total == 0)
        return COL_OK;
    if (K == 0)
        return cu_status(cudaMemsetAsync(n->t.data, 0, (size_t)total * esc, c->stream), err, "matmul");

    /* batch dims: the longest suffix that collapses to one stride in a and in b */
    int nb = nd - 2, inner_from = nb;
    int64_t inner = 1, sa = 0, sb = 0;
    for (int d = nb - 1; d >= 0; d--) {
        int64_t s = n->t.shape[d];
        if (s == 1) {
            inner_from = d;
            continue;
        }
        if (inner == 1) {
            sa = a->stride[d];
            sb = b->stride[d];
        } else if (a->stride[d] != sa * inner || b->stride[d] != sb * inner) {
            break;
        }
        inner *= s;
        inner_from = d;
    }
    if (inner > INT32_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: %lld batches in one call", (long long)inner);
    int64_t outer = 1;
    for (int d = 0; d < inner_from; d++)
        outer *= n->t.shape[d];

    lt_key key;
    memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
    bool ta, tb;
    col_matrix_layout(a, &ta, &key.lda);
    col_matrix_layout(b, &tb, &key.ldb);
    key.ta = ta, key.tb = tb;
    key.dta = (int)a->dtype, key.dtc = (int)n->t.dtype;
    key.tf32 = c->tf32 && a->dtype == COL_F32;
    key.M = M, key.N = N, key.K = K, key.ldc = N;
    if (inner > 1)
        key.inner = inner, key.sa = sa, key.sb = sb;
    /* the alignment every call's pointers have (the loop's offsets included) */
    uint32_t al_a = align_of(b->data, sb * (int64_t)esb), al_b = align_of(a->data, sa * (int64_t)esa);
    uint32_t al_c = align_of(n->t.data, M * N * (int64_t)esc);
    for (int d = 0; d < inner_from; d++) {
        al_a = al_a < align_of(b->data, b->stride[d] * (int64_t)esb) ? al_a : align_of(b->data, b->stride[d] * (int64_t)esb);
        al_b = al_b < align_of(a->data, a->stride[d] * (int64_t)esa) ? al_b : align_of(a->data, a->stride[d] * (int64_t)esa);
    }
    key.al_a = al_a, key.al_b = al_b, key.al_c = al_c;
    cublasStatus_t s;
    const lt_entry *e = lt_lookup(c, &key, &s);
    if (!e && s != CUBLAS_STATUS_SUCCESS)
        return cu_blas_status(s, err, "matmul");
    if (!e)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: cuBLASLt has no algorithm for [%lld,%lld] @ [%lld,%lld] %s",
                           (long long)M, (long long)K, (long long)K, (long long)N, col_dtype_name(a->dtype));
    const float one = 1.0f, zero = 0.0f;
    for (int64_t bi = 0; bi < outer && s == CUBLAS_STATUS_SUCCESS; bi++) {
        int64_t oa, ob;
        col_batch_offsets(n->t.shape, inner_from, bi, a, b, &oa, &ob);
        const char *pa = (const char *)a->data + oa * (int64_t)esa, *pb = (const char *)b->data + ob * (int64_t)esb;
        char *pc = (char *)n->t.data + bi * inner * M * N * (int64_t)esc;
        s = cublasLtMatmul(c->lt, e->o.op, &one, pb, e->o.la, pa, e->o.lb, &zero, pc, e->o.lc, pc, e->o.lc, &e->algo, c->ws,
                           c->ws_bytes, c->stream);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_blas_status(s, err, "matmul");
    return cu_launch(err, "matmul");
}

col_status cu_gemm_f32(col_cuda_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *out, int64_t ldc, col_err *err, const char *what)
{
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: a GEMM dimension exceeds 2^31", what);
    if (M == 0 || N == 0)
        return COL_OK;
    lt_key key;
    memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
    key.dta = key.dtc = (int)COL_F32;
    key.ta = ta, key.tb = tb, key.tf32 = c->tf32;
    key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.al_a = align_of(b, 0), key.al_b = align_of(a, 0), key.al_c = align_of(out, 0);
    cublasStatus_t s;
    const lt_entry *e = lt_lookup(c, &key, &s);
    if (!e && s != CUBLAS_STATUS_SUCCESS)
        return cu_blas_status(s, err, what);
    if (!e)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: cuBLASLt has no algorithm for [%lld,%lld] @ [%lld,%lld] f32", what,
                           (long long)M, (long long)K, (long long)K, (long long)N);
    const float one = 1.0f;
    s = cublasLtMatmul(c->lt, e->o.op, &one, b, e->o.la, a, e->o.lb, &beta, out, e->o.lc, out, e->o.lc, &e->algo, c->ws,
                       c->ws_bytes, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_blas_status(s, err, what);
    return cu_launch(err, what);
}

void cu_register_matmul(col_backend *be) { be->kernel[COL_OP_MATMUL] = k_matmul; }
