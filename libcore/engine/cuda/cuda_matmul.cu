/* cuda_matmul.cu - MATMUL through cuBLASLt.
 *
 * Row-major C [M,N] = A [M,K] B [K,N] is computed as the column-major
 * C^T = B^T A^T, so cuBLASLt's first operand is b and its second a. Each
 * operand is read in place (the builder makes it BLAS-readable: unit stride
 * along one of the last two dims); batch dims that collapse to one stride
 * per operand become one strided-batched call, the rest a loop of calls.
 * f32 operands: f32 compute, or TF32 when the backend's tf32 flag is on.
 * bf16 / f16 operands: f32 accumulation, output of the node's dtype. */
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

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
} lt_objs;

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

static col_status k_matmul(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    int nd = n->t.ndim;
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

    bool ta, tb;
    int64_t lda, ldb;
    col_matrix_layout(a, &ta, &lda);
    col_matrix_layout(b, &tb, &ldb);
    /* cuBLASLt operand 1 = b: stored as column-major [N, K] (no transpose) or [K, N] (transpose) */
    lt_objs o;
    memset(&o, 0, sizeof o);
    bool tf32 = c->tf32 && a->dtype == COL_F32;
    cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s = cublasLtMatmulDescCreate(&o.op, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o.la, cu_type(b->dtype), tb ? K : N, tb ? N : K, ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o.lb, cu_type(a->dtype), ta ? M : K, ta ? K : M, lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&o.lc, cu_type(n->t.dtype), N, M, N);
    if (s == CUBLAS_STATUS_SUCCESS && inner > 1) {
        if (layout_batch(o.la, inner, sb) != COL_OK || layout_batch(o.lb, inner, sa) != COL_OK ||
            layout_batch(o.lc, inner, M * N) != COL_OK)
            s = CUBLAS_STATUS_INVALID_VALUE;
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceCreate(&o.pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->ws_bytes,
                                                 sizeof c->ws_bytes);
    /* the alignment every call's pointers have (the loop's offsets included) */
    uint32_t al_a = align_of(b->data, sb * (int64_t)esb), al_b = align_of(a->data, sa * (int64_t)esa);
    uint32_t al_c = align_of(n->t.data, M * N * (int64_t)esc);
    for (int d = 0; d < inner_from; d++) {
        al_a = al_a < align_of(b->data, b->stride[d] * (int64_t)esb) ? al_a : align_of(b->data, b->stride[d] * (int64_t)esb);
        al_b = al_b < align_of(a->data, a->stride[d] * (int64_t)esa) ? al_b : align_of(a->data, a->stride[d] * (int64_t)esa);
    }
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->lt, o.op, o.la, o.lb, o.lc, o.lc, o.pref, 1, &heur, &found);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt_free(&o);
        return cu_blas_status(s, err, "matmul");
    }
    if (found < 1) {
        lt_free(&o);
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: cuBLASLt has no algorithm for [%lld,%lld] @ [%lld,%lld] %s",
                           (long long)M, (long long)K, (long long)K, (long long)N, col_dtype_name(a->dtype));
    }
    const float one = 1.0f, zero = 0.0f;
    for (int64_t bi = 0; bi < outer && s == CUBLAS_STATUS_SUCCESS; bi++) {
        int64_t oa, ob;
        col_batch_offsets(n->t.shape, inner_from, bi, a, b, &oa, &ob);
        const char *pa = (const char *)a->data + oa * (int64_t)esa, *pb = (const char *)b->data + ob * (int64_t)esb;
        char *pc = (char *)n->t.data + bi * inner * M * N * (int64_t)esc;
        s = cublasLtMatmul(c->lt, o.op, &one, pb, o.la, pa, o.lb, &zero, pc, o.lc, pc, o.lc, &heur.algo, c->ws,
                           c->ws_bytes, c->stream);
    }
    lt_free(&o);
    if (s != CUBLAS_STATUS_SUCCESS)
        return cu_blas_status(s, err, "matmul");
    return cu_launch(err, "matmul");
}

void cu_register_matmul(col_backend *be) { be->kernel[COL_OP_MATMUL] = k_matmul; }
