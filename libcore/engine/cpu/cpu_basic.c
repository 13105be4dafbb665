/* cpu_basic.c - CPU kernels: copy, cast, fill, accumulate, scatter_slice,
 * binary elementwise, scale, concat, matmul. */
#include <string.h>

#include "cpu_internal.h"

/* copies row-wise from a strided tensor into contiguous memory (same dtype) */
static void copy_strided(const col_tensor *s, void *dst, int nt)
{
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
    size_t es = col_dtype_size(s->dtype);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(nt)
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)s->data + col_row_offset(s, r) * (int64_t)es;
        char *d = (char *)dst + r * cols * (int64_t)es;
        if (cs == 1) {
            memcpy(d, src, (size_t)cols * es);
        } else if (es == 4) {
            for (int64_t c = 0; c < cols; c++)
                ((uint32_t *)d)[c] = ((const uint32_t *)src)[c * cs];
        } else if (es == 2) {
            for (int64_t c = 0; c < cols; c++)
                ((uint16_t *)d)[c] = ((const uint16_t *)src)[c * cs];
        } else {
            for (int64_t c = 0; c < cols; c++)
                ((uint64_t *)d)[c] = ((const uint64_t *)src)[c * cs];
        }
    }
}

static col_status k_copy(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    copy_strided(&n->src[0]->t, n->t.data, col_cpu_threads(ex));
    return COL_OK;
}

static col_status k_cast(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    if (col_cpu_cast_is_float(n)) /* vector loops (cpu_lowp.c); the same results as the loop below */
        return col_cpu_cast_float(n, ex);
    const col_tensor *s = &n->src[0]->t;
    col_tensor d = n->t;
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = col_row_offset(s, r);
        for (int64_t c = 0; c < cols; c++) {
            double v = col_get_as_f64(s, so + c * cs);
            if (col_dtype_is_float(s->dtype) && !col_dtype_is_float(d.dtype))
                v = v < 0 ? -__builtin_floor(-v) : __builtin_floor(v); /* truncate like PyTorch */
            col_set_from_f64(&d, r * cols + c, v);
        }
    }
    return COL_OK;
}

static col_status k_fill(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
    int64_t num = col_numel(&n->t);
    if (n->t.dtype == COL_F32) {
        float v = n->p.f[0], *d = n->t.data;
        for (int64_t i = 0; i < num; i++)
            d[i] = v;
    } else {
        for (int64_t i = 0; i < num; i++)
            col_set_from_f64(&n->t, i, n->p.f[0]);
    }
    return COL_OK;
}

static col_status k_accumulate(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *s = &n->src[0]->t;
    if (n->t.dtype != COL_F32) /* a 16-bit gradient buffer (cpu_lowp.c) */
        return col_cpu_accumulate_lowp(n, ex);
    float *d = n->t.data;
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)s->data + col_row_offset(s, r);
        float *y = d + r * cols;
        if (cs == 1)
            for (int64_t c = 0; c < cols; c++)
                y[c] += x[c];
        else
            for (int64_t c = 0; c < cols; c++)
                y[c] += x[c * cs];
    }
    return COL_OK;
}

static col_status k_scatter_slice(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
    size_t es = col_dtype_size(n->t.dtype);
    memset(n->t.data, 0, (size_t)col_numel(&n->t) * es);
    col_tensor view = n->t; /* the slice region of the output */
    int axis = (int)n->p.i[0];
    view.shape[axis] = n->src[0]->t.shape[axis];
    view.data = (char *)n->t.data + n->p.i[1] * n->t.stride[axis] * (int64_t)es;
    const col_tensor *s = &n->src[0]->t;
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)s->data + col_row_offset(s, r) * (int64_t)es;
        char *dst = (char *)view.data + col_row_offset(&view, r) * (int64_t)es;
        for (int64_t c = 0; c < cols; c++)
            memcpy(dst + c * (int64_t)es, src + c * cs * (int64_t)es, es);
    }
    return COL_OK;
}

static col_status k_binary(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    float *out = n->t.data;
    int64_t rows = col_rows(&n->t), cols = col_cols(&n->t);
    int64_t sa = col_col_stride(a), sb = col_col_stride(b);
    col_op op = n->op;
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)a->data + col_row_offset(a, r);
        const float *y = (const float *)b->data + col_row_offset(b, r);
        float *o = out + r * cols;
        if (sa == 1 && sb == 1) {
            switch (op) {
            case COL_OP_ADD: for (int64_t c = 0; c < cols; c++) o[c] = x[c] + y[c]; break;
            case COL_OP_SUB: for (int64_t c = 0; c < cols; c++) o[c] = x[c] - y[c]; break;
            case COL_OP_MUL: for (int64_t c = 0; c < cols; c++) o[c] = x[c] * y[c]; break;
            default: for (int64_t c = 0; c < cols; c++) o[c] = x[c] / y[c]; break;
            }
        } else {
            switch (op) {
            case COL_OP_ADD: for (int64_t c = 0; c < cols; c++) o[c] = x[c * sa] + y[c * sb]; break;
            case COL_OP_SUB: for (int64_t c = 0; c < cols; c++) o[c] = x[c * sa] - y[c * sb]; break;
            case COL_OP_MUL: for (int64_t c = 0; c < cols; c++) o[c] = x[c * sa] * y[c * sb]; break;
            default: for (int64_t c = 0; c < cols; c++) o[c] = x[c * sa] / y[c * sb]; break;
            }
        }
    }
    return COL_OK;
}

static col_status k_scale(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *a = &n->src[0]->t;
    float *out = n->t.data, m = n->p.f[0], k = n->p.f[1];
    int64_t rows = col_rows(&n->t), cols = col_cols(&n->t), sa = col_col_stride(a);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)a->data + col_row_offset(a, r);
        float *o = out + r * cols;
        if (sa == 1)
            for (int64_t c = 0; c < cols; c++)
                o[c] = x[c] * m + k;
        else
            for (int64_t c = 0; c < cols; c++)
                o[c] = x[c * sa] * m + k;
    }
    return COL_OK;
}

static col_status k_concat(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    int axis = (int)n->p.i[0];
    size_t es = col_dtype_size(n->t.dtype);
    int64_t start = 0;
    for (int k = 0; k < n->nsrc; k++) {
        const col_tensor *s = &n->src[k]->t;
        col_tensor view = n->t;
        view.shape[axis] = s->shape[axis];
        view.data = (char *)n->t.data + start * n->t.stride[axis] * (int64_t)es;
        int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s), vs = col_col_stride(&view);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
        for (int64_t r = 0; r < rows; r++) {
            const char *src = (const char *)s->data + col_row_offset(s, r) * (int64_t)es;
            char *dst = (char *)view.data + col_row_offset(&view, r) * (int64_t)es;
            if (cs == 1 && vs == 1)
                memcpy(dst, src, (size_t)cols * es);
            else
                for (int64_t c = 0; c < cols; c++)
                    memcpy(dst + c * vs * (int64_t)es, src + c * cs * (int64_t)es, es);
        }
        start += s->shape[axis];
    }
    return COL_OK;
}

/* trans flag and leading dimension of a BLAS-readable matrix (see blas_ok) */
static void blas_layout(const col_tensor *t, int *trans, int *ld)
{
    bool tr;
    int64_t l;
    col_matrix_layout(t, &tr, &l);
    *trans = tr ? COL_BLAS_TRANS : COL_BLAS_NO_TRANS;
    *ld = (int)l;
}

static col_status k_matmul(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cpu_ctx *ctx = ex->be->ctx;
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    int nd = n->t.ndim;
    int64_t M = n->t.shape[nd - 2], N = n->t.shape[nd - 1], K = a->shape[nd - 1];
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: a dimension exceeds 2^31");
    int64_t batches = 1;
    for (int d = 0; d < nd - 2; d++)
        batches *= n->t.shape[d];
    float *c = n->t.data; /* f32 for every operand dtype */
    if (K == 0) {
        memset(c, 0, sizeof(float) * (size_t)(batches * M * N));
        return COL_OK;
    }
    if (col_dtype_is_quant(b->dtype)) /* x @ W^T, W quantized (cpu_quant.c) */
        return col_cpu_matmul_quant(n, ex, err);
    if (a->dtype != COL_F32)
        return col_cpu_matmul_lowp(n, ex, M, N, K, batches, err);
    int ta, tb, lda, ldb;
    blas_layout(a, &ta, &lda);
    blas_layout(b, &tb, &ldb);
    /* OpenBLAS on the backend's threads; on one inside a parallel region (never nested teams) */
    int restore = col_blas_threads_begin(&ctx->blas, omp_in_parallel() ? 1 : col_cpu_threads(ex));
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t oa, ob;
        col_batch_offsets(n->t.shape, nd - 2, bi, a, b, &oa, &ob);
        const float *pa = (const float *)a->data + oa, *pb = (const float *)b->data + ob;
        if (M <= COL_CPU_SMALL_M && ta == COL_BLAS_NO_TRANS) { /* decoding: rows that match whatever M is */
            col_cpu_matmul_small(ex, M, N, K, pa, lda, pb, ldb, tb == COL_BLAS_TRANS, c + bi * M * N);
            continue;
        }
        if (M == 1) { /* one row (decoding a token): a matrix-vector product, bandwidth-bound */
            int inca = ta == COL_BLAS_NO_TRANS ? 1 : lda;
            if (tb == COL_BLAS_NO_TRANS) /* c = b^T a, b stored K x N */
                ctx->blas.sgemv(COL_BLAS_ROW_MAJOR, COL_BLAS_TRANS, (int)K, (int)N, 1.0f, pb, ldb, pa, inca, 0.0f,
                                c + bi * N, 1);
            else /* b stored N x K */
                ctx->blas.sgemv(COL_BLAS_ROW_MAJOR, COL_BLAS_NO_TRANS, (int)N, (int)K, 1.0f, pb, ldb, pa, inca, 0.0f,
                                c + bi * N, 1);
            continue;
        }
        ctx->blas.sgemm(COL_BLAS_ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, 1.0f, pa, lda, pb, ldb, 0.0f,
                        c + bi * M * N, (int)N);
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}

static col_status k_arange(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
    int32_t *o = n->t.data;
    if (n->p.i[1]) { /* rows: i32 [B,n], row b from start[b] */
        const int64_t *start = n->src[0]->t.data;
        int64_t B = n->t.shape[0], len = n->t.shape[1];
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < len; k++)
                o[b * len + k] = (int32_t)(start[b] + n->p.i[0] + k);
        return COL_OK;
    }
    int64_t start = n->nsrc ? *(const int64_t *)n->src[0]->t.data : 0, len = col_numel(&n->t);
    for (int64_t k = 0; k < len; k++)
        o[k] = (int32_t)(start + n->p.i[0] + k);
    return COL_OK;
}

/* x [B,H,T,D] into cache row c (of cache [R,H,L,D]) at positions start..start+T-1, batch row b of x */
static void kv_copy_row(const col_tensor *c, const col_tensor *x, int64_t b, int64_t crow, int64_t start)
{
    size_t es = col_dtype_size(x->dtype);
    int64_t T = x->shape[2], D = x->shape[3];
    for (int64_t h = 0; h < x->shape[1]; h++)
        for (int64_t t = 0; t < T; t++) {
            const char *src = (const char *)x->data + (b * x->stride[0] + h * x->stride[1] + t * x->stride[2]) * (int64_t)es;
            char *dst = (char *)c->data + (crow * c->stride[0] + h * c->stride[1] + (start + t) * c->stride[2]) * (int64_t)es;
            if (x->stride[3] == 1)
                memcpy(dst, src, (size_t)D * es);
            else
                for (int64_t d = 0; d < D; d++)
                    memcpy(dst + d * (int64_t)es, src + d * x->stride[3] * (int64_t)es, es);
        }
}

/* rows: cache[rows[b], :, start[b]:start[b]+T] = x[b]; every row checked before anything is written */
static col_status kv_write_rows(const col_node *n, col_err *err)
{
    const col_tensor *c = &n->src[0]->t, *x = &n->src[1]->t;
    const int64_t *start = n->src[2]->t.data, *rows = n->nsrc > 3 ? n->src[3]->t.data : NULL;
    int64_t B = x->shape[0], T = x->shape[2], R = c->shape[0], L = c->shape[2];
    for (int64_t b = 0; b < B; b++) {
        int64_t r = rows ? rows[b] : b;
        if (r < 0 || r >= R)
            return col_err_set(err, COL_EINVAL, "kv_write: batch row %lld uses cache row %lld, outside the cache's %lld rows",
                               (long long)b, (long long)r, (long long)R);
        if (start[b] < 0 || start[b] > L - T)
            return col_err_set(err, COL_EINVAL,
                               "kv_write: batch row %lld at position %lld + %lld tokens exceeds the cache of %lld",
                               (long long)b, (long long)start[b], (long long)T, (long long)L);
    }
    for (int64_t b = 0; b < B; b++)
        kv_copy_row(c, x, b, rows ? rows[b] : b, start[b]);
    return COL_OK;
}

/* cache[:, :, start:start+T] = x; the output aliases the cache */
static col_status k_kv_write(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex;
    if (n->p.i[0])
        return kv_write_rows(n, err);
    const col_tensor *c = &n->src[0]->t, *x = &n->src[1]->t;
    int64_t start = *(const int64_t *)n->src[2]->t.data, T = x->shape[2];
    if (start < 0 || start + T > c->shape[2])
        return col_err_set(err, COL_EINVAL, "kv_write: position %lld + %lld tokens exceeds the cache of %lld",
                           (long long)start, (long long)T, (long long)c->shape[2]);
    for (int64_t b = 0; b < x->shape[0]; b++)
        kv_copy_row(c, x, b, b, start);
    return COL_OK;
}

void col_cpu_register_basic(col_backend *be)
{
    be->kernel[COL_OP_ARANGE] = k_arange;
    be->kernel[COL_OP_KV_WRITE] = k_kv_write;
    be->kernel[COL_OP_COPY] = k_copy;
    be->kernel[COL_OP_CAST] = k_cast;
    be->kernel[COL_OP_FILL] = k_fill;
    be->kernel[COL_OP_ACCUMULATE] = k_accumulate;
    be->kernel[COL_OP_SCATTER_SLICE] = k_scatter_slice;
    be->kernel[COL_OP_ADD] = k_binary;
    be->kernel[COL_OP_SUB] = k_binary;
    be->kernel[COL_OP_MUL] = k_binary;
    be->kernel[COL_OP_DIV] = k_binary;
    be->kernel[COL_OP_SCALE] = k_scale;
    be->kernel[COL_OP_CONCAT] = k_concat;
    be->kernel[COL_OP_MATMUL] = k_matmul;
}
