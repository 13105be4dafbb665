/* cuda_emu_blaslt.cc - the cuBLASLt calls of the backend, on the host:
 * D = alpha op(A) op(B) + beta C (column-major unless a layout says rows),
 * strided batches, f32 / bf16 / f16 operands with f32 accumulation and an f32
 * or same-type output, the DEFAULT and BIAS epilogues.
 *
 * Each output element is a plain loop over k in f32 (products and sums
 * rounded one by one), as a GPU's f32 GEMM accumulates; the 32F_FAST_TF32
 * compute type first rounds the f32 inputs to TF32 (10-bit mantissa, to
 * nearest), FAST_16BF / FAST_16F to bf16 / f16, so the results differ from
 * full f32 as on the device. The checks are what cuBLASLt documents: the
 * attribute sizes, the layouts' shapes against the transposes (m, n, k),
 * ld >= rows, batch counts, the preference's promised alignments (the
 * algorithm the heuristic returns records them, and a pointer less aligned
 * is CUBLAS_STATUS_INVALID_VALUE), and every matrix inside one allocation of
 * memory the device can reach. */
#include <stdlib.h>

#include <vector>

#include "cuda_emu_internal.h"

using namespace cuemu;

namespace {

constexpr uint64_t MAGIC_HANDLE = 0x6c74656d75686e64ull, MAGIC_DESC = 0x6c74656d75646573ull,
                   MAGIC_LAYOUT = 0x6c74656d756c6179ull, MAGIC_PREF = 0x6c74656d75707266ull;

struct lt_handle {
    uint64_t magic;
};
struct lt_desc {
    uint64_t magic;
    int32_t compute, scale, pointer_mode;
    int32_t trans_a, trans_b;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;
    int64_t bias_stride;
};
struct lt_layout {
    uint64_t magic;
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
struct lt_pref {
    uint64_t magic;
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D */
    uint32_t search;
};

template <typename T> T *obj(void *p, uint64_t magic)
{
    T *o = (T *)p;
    return o && o->magic == magic ? o : nullptr;
}

/* copies an attribute value of exactly sizeof(T) bytes */
template <typename T> bool put(T *dst, const void *buf, size_t n)
{
    if (!buf || n != sizeof(T))
        return false;
    memcpy(dst, buf, sizeof(T));
    return true;
}
template <typename T> cublasStatus_t get(const T &v, void *buf, size_t n, size_t *written)
{
    if (written)
        *written = sizeof(T);
    if (n == 0)
        return written ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (!buf || n != sizeof(T))
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &v, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

size_t type_size(uint32_t t)
{
    return t == CUDA_R_32F ? 4 : (t == CUDA_R_16BF || t == CUDA_R_16F) ? 2 : 0;
}

/* the problem a descriptor and its layouts pose; false when they do not fit together */
struct problem {
    uint64_t m, n, k;
    int32_t batch;
};

bool shape_of(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c, const lt_layout *dd, problem *p)
{
    bool ta = d->trans_a != CUBLAS_OP_N, tb = d->trans_b != CUBLAS_OP_N;
    p->m = ta ? a->cols : a->rows;
    p->k = ta ? a->rows : a->cols;
    uint64_t kb = tb ? b->cols : b->rows;
    p->n = tb ? b->rows : b->cols;
    if (kb != p->k || c->rows != p->m || c->cols != p->n || dd->rows != p->m || dd->cols != p->n)
        return false;
    for (const lt_layout *l : {a, b, c, dd}) {
        uint64_t lead = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
        if ((l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW) || l->ld < 1 || (uint64_t)l->ld < lead ||
            l->batch < 1)
            return false;
    }
    p->batch = dd->batch;
    for (const lt_layout *l : {a, b, c})
        if (l->batch != p->batch)
            return false;
    return c->type == dd->type && c->order == dd->order;
}

/* the compute, scale and data types cuBLASLt pairs (what the emulator computes) */
bool types_ok(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c)
{
    bool f32c = d->compute == CUBLAS_COMPUTE_32F || d->compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 || d->compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                d->compute == CUBLAS_COMPUTE_32F_FAST_16F;
    if (!f32c || d->scale != CUDA_R_32F || a->type != b->type || !type_size(a->type))
        return false;
    if (a->type != CUDA_R_32F && d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_PEDANTIC)
        return false; /* the FAST_* types are for f32 inputs */
    return c->type == CUDA_R_32F || c->type == a->type;
}

/* element (r, c) of batch i of a matrix in its layout */
inline size_t offset(const lt_layout *l, uint64_t r, uint64_t c, int32_t i)
{
    uint64_t o = l->order == CUBLASLT_ORDER_ROW ? r * (uint64_t)l->ld + c : c * (uint64_t)l->ld + r;
    return (size_t)((int64_t)o + (int64_t)i * l->stride);
}

inline float load(uint32_t t, const void *p, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    if (t == CUDA_R_16BF)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}
inline void store(uint32_t t, void *p, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else if (t == CUDA_R_16BF)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else
        ((__half *)p)[i] = __float2half_rn(v);
}

/* f32 inputs as the fast compute types read them */
inline float round_input(int32_t compute, float v)
{
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF)
        return __bfloat162float(__float2bfloat16_rn(v));
    if (compute == CUBLAS_COMPUTE_32F_FAST_16F)
        return __half2float(__float2half_rn(v));
    if (compute != CUBLAS_COMPUTE_32F_FAST_TF32 || !isfinite(v))
        return v;
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0xfffu + ((u >> 13) & 1u); /* to nearest, ties to even, at 10 mantissa bits */
    u &= ~0x1fffu;
    memcpy(&v, &u, 4);
    return v;
}

/* the span of bytes a matrix occupies: inside one region the device reaches, aligned as promised */
bool matrix_ok(const void *p, const lt_layout *l, uint32_t align)
{
    size_t es = type_size(l->type);
    uint64_t outer = l->order == CUBLASLT_ORDER_ROW ? l->rows : l->cols;
    uint64_t inner = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
    int64_t lo = 0, hi = (int64_t)((outer - 1) * (uint64_t)l->ld + inner); /* elements, batch 0 */
    if (l->batch > 1) {
        int64_t span = (int64_t)(l->batch - 1) * l->stride;
        lo = span < 0 ? span : 0;
        hi += span > 0 ? span : 0;
    }
    if (!p || ((uintptr_t)p % (align ? align : 1)) != 0 || (uintptr_t)p % es != 0)
        return false;
    region r;
    uintptr_t a = (uintptr_t)p + (uintptr_t)(lo * (int64_t)es), b = (uintptr_t)p + (uintptr_t)(hi * (int64_t)es);
    return find_region((const void *)a, &r) && device_side(r.kind) && a >= r.base && b <= r.base + r.bytes;
}

} /* namespace */

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    *h = (cublasLtHandle_t) new lt_handle{MAGIC_HANDLE};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    lt_handle *o = obj<lt_handle>(h, MAGIC_HANDLE);
    if (!o)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    o->magic = 0;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the handle or a descriptor is not initialised (CUDA emulator)";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value: sizes, layouts, pointers or alignment (CUDA emulator)";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported by the CUDA emulator's GEMM";
    default: return "error (CUDA emulator)";
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *o = new lt_desc();
    o->magic = MAGIC_DESC;
    o->compute = compute, o->scale = scale;
    o->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    o->trans_a = o->trans_b = CUBLAS_OP_N;
    o->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    o->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    lt_desc *o = obj<lt_desc>(d, MAGIC_DESC);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    o->magic = 0;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
    lt_desc *o = obj<lt_desc>(d, MAGIC_DESC);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ok;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: ok = put(&o->compute, buf, n); break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: ok = put(&o->scale, buf, n); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: ok = put(&o->pointer_mode, buf, n); break;
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = put(&o->trans_a, buf, n); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = put(&o->trans_b, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = put(&o->epilogue, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = put(&o->bias, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = put(&o->bias_type, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: ok = put(&o->bias_stride, buf, n); break;
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: {
        int32_t v;
        ok = put(&v, buf, n);
        break;
    }
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: {
        int8_t v;
        ok = put(&v, buf, n);
        break;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf, size_t n,
                                              size_t *written)
{
    lt_desc *o = obj<lt_desc>(d, MAGIC_DESC);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get(o->compute, buf, n, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get(o->scale, buf, n, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return get(o->pointer_mode, buf, n, written);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(o->trans_a, buf, n, written);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(o->trans_b, buf, n, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(o->epilogue, buf, n, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(o->bias, buf, n, written);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *o = new lt_layout();
    o->magic = MAGIC_LAYOUT;
    o->type = (uint32_t)type, o->order = CUBLASLT_ORDER_COL;
    o->rows = rows, o->cols = cols, o->ld = ld;
    o->batch = 1;
    *l = (cublasLtMatrixLayout_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    lt_layout *o = obj<lt_layout>(l, MAGIC_LAYOUT);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    o->magic = 0;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *buf,
                                                size_t n)
{
    lt_layout *o = obj<lt_layout>(l, MAGIC_LAYOUT);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ok;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: ok = put(&o->type, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: ok = put(&o->order, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: ok = put(&o->rows, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: ok = put(&o->cols, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = put(&o->ld, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: ok = put(&o->batch, buf, n); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = put(&o->stride, buf, n); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf,
                                                size_t n, size_t *written)
{
    lt_layout *o = obj<lt_layout>(l, MAGIC_LAYOUT);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return get(o->type, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get(o->order, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return get(o->rows, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return get(o->cols, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_LD: return get(o->ld, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get(o->batch, buf, n, written);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get(o->stride, buf, n, written);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *o = new lt_pref();
    o->magic = MAGIC_PREF;
    for (uint32_t &a : o->align)
        a = 256; /* cuBLASLt's default: the pointers are promised 256-byte alignment */
    *p = (cublasLtMatmulPreference_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    lt_pref *o = obj<lt_pref>(p, MAGIC_PREF);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    o->magic = 0;
    delete o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n)
{
    lt_pref *o = obj<lt_pref>(p, MAGIC_PREF);
    if (!o)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ok;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: ok = put(&o->search, buf, n); break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = put(&o->max_ws, buf, n); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = put(&o->align[0], buf, n); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = put(&o->align[1], buf, n); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = put(&o->align[2], buf, n); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = put(&o->align[3], buf, n); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                              cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *found)
{
    lt_desc *d = obj<lt_desc>(desc, MAGIC_DESC);
    lt_layout *a = obj<lt_layout>(la, MAGIC_LAYOUT), *b = obj<lt_layout>(lb, MAGIC_LAYOUT);
    lt_layout *c = obj<lt_layout>(lc, MAGIC_LAYOUT), *dd = obj<lt_layout>(ld, MAGIC_LAYOUT);
    lt_pref *p = obj<lt_pref>(pref, MAGIC_PREF);
    if (!obj<lt_handle>(h, MAGIC_HANDLE))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    problem pr;
    if (!d || !a || !b || !c || !dd || !p || requested < 1 || !results || !found || !shape_of(d, a, b, c, dd, &pr))
        return CUBLAS_STATUS_INVALID_VALUE;
    *found = 0;
    uint32_t e = d->epilogue;
    if (!types_ok(d, a, b, c) || (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    memcpy(results[0].algo.data, p->align, sizeof p->align); /* the alignments the pointers were promised */
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream)
{
    (void)ws, (void)ws_bytes;
    lt_desc *d = obj<lt_desc>(desc, MAGIC_DESC);
    lt_layout *a = obj<lt_layout>(la, MAGIC_LAYOUT), *b = obj<lt_layout>(lb, MAGIC_LAYOUT);
    lt_layout *c = obj<lt_layout>(lc, MAGIC_LAYOUT), *dl = obj<lt_layout>(ld, MAGIC_LAYOUT);
    if (!obj<lt_handle>(h, MAGIC_HANDLE))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    problem pr;
    if (!d || !a || !b || !c || !dl || !alpha || !beta || !stream_ok(stream) || !shape_of(d, a, b, c, dl, &pr))
        return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t e = d->epilogue;
    if (!types_ok(d, a, b, c) || (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    float al = *(const float *)alpha, be = *(const float *)beta; /* host or device pointer: one address space */
    uint32_t align[4] = {256, 256, 256, 256};
    if (algo)
        memcpy(align, algo->data, sizeof align);
    if (pr.m == 0 || pr.n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if ((pr.k > 0 && (!matrix_ok(A, a, align[0]) || !matrix_ok(B, b, align[1]))) || !matrix_ok(D, dl, align[3]) ||
        (be != 0.0f && !matrix_ok(C, c, align[2])))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool bias = e == CUBLASLT_EPILOGUE_BIAS;
    uint32_t bias_t = d->bias_type >= 0 ? (uint32_t)d->bias_type : dl->type;
    if (bias && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    bool ta = d->trans_a != CUBLAS_OP_N, tb = d->trans_b != CUBLAS_OP_N;
    int32_t comp = a->type == CUDA_R_32F ? d->compute : CUBLAS_COMPUTE_32F;
    uint64_t M = pr.m, N = pr.n, K = pr.k;
    std::vector<float> opa(M * K), opb(K * N), out(M * N);
    for (int32_t bi = 0; bi < pr.batch; bi++) {
        /* op(A) as rows of K, op(B) as columns of K: every dot product reads contiguous memory */
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t l = 0; l < K; l++)
                opa[i * K + l] = round_input(comp, load(a->type, A, ta ? offset(a, l, i, bi) : offset(a, i, l, bi)));
        for (uint64_t j = 0; j < N; j++)
            for (uint64_t l = 0; l < K; l++)
                opb[j * K + l] = round_input(comp, load(b->type, B, tb ? offset(b, j, l, bi) : offset(b, l, j, bi)));
#pragma omp parallel for schedule(static) if (M * N * K > (1u << 20))
        for (uint64_t j = 0; j < N; j++)
            for (uint64_t i = 0; i < M; i++) {
                const float *x = &opa[i * K], *y = &opb[j * K];
                float s = 0.0f;
                for (uint64_t l = 0; l < K; l++)
                    s += x[l] * y[l];
                out[j * M + i] = s;
            }
        /* then D = alpha acc + beta C (+ bias[i]): C read before D is written, so C may be D */
        for (uint64_t j = 0; j < N; j++)
            for (uint64_t i = 0; i < M; i++) {
                float v = al * out[j * M + i];
                if (be != 0.0f)
                    v += be * load(c->type, C, offset(c, i, j, bi));
                if (bias)
                    v += load(bias_t, d->bias, (size_t)((int64_t)i + (int64_t)bi * d->bias_stride));
                store(dl->type, D, offset(dl, i, j, bi), v);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
