/* cpu_lowp.c - CPU kernels for the 16-bit float types: casts between the
 * float dtypes, and the bf16/f16 matmul (f32 accumulation and output).
 *
 * The matmul uses OpenBLAS's cblas_sbgemm for bf16 when the loaded library
 * has it and the CPU has AVX512_BF16 (elsewhere OpenBLAS's sbgemm is a plain
 * loop). Otherwise, and for f16, operands are converted to f32 one tile at a
 * time into the node's scratch and multiplied with sgemm (backend.h,
 * col_matmul_lowp_tiles): the tiles depend on the shape only and the
 * conversions are exact element by element, so results do not depend on the
 * thread count any more than sgemm's do (DESIGN.md, "CPU backend"). */
#include <string.h>

#include "cpu_internal.h"

/* ---- casts ---- */

static bool is_float(col_dtype dt) { return dt == COL_F32 || dt == COL_BF16 || dt == COL_F16; }

col_status col_cpu_cast_float(const col_node *n, const col_exec *ex)
{
    const col_tensor *s = &n->src[0]->t;
    col_dtype dt = n->t.dtype;
    size_t ses = col_dtype_size(s->dtype), des = col_dtype_size(dt);
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)s->data + col_row_offset(s, r) * (int64_t)ses;
        char *dst = (char *)n->t.data + r * cols * (int64_t)des;
        if (cs == 1) {
            col_convert(dst, dt, src, s->dtype, cols);
            continue;
        }
        for (int64_t c = 0; c < cols; c++) /* strided: element by element, the same conversions */
            col_convert(dst + c * (int64_t)des, dt, src + c * cs * (int64_t)ses, s->dtype, 1);
    }
    return COL_OK;
}

bool col_cpu_cast_is_float(const col_node *n) { return is_float(n->t.dtype) && is_float(n->src[0]->t.dtype); }

/* ---- accumulate ---- */

col_status col_cpu_accumulate_lowp(const col_node *n, const col_exec *ex)
{
    enum { BLK = 256 };
    const col_tensor *s = &n->src[0]->t;
    col_dtype dt = n->t.dtype;
    size_t es = col_dtype_size(dt);
    int64_t rows = col_rows(s), cols = col_cols(s), cs = col_col_stride(s);
#pragma omp parallel for schedule(static) if (rows * cols > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)s->data + col_row_offset(s, r);
        char *y = (char *)n->t.data + r * cols * (int64_t)es;
        for (int64_t c0 = 0; c0 < cols; c0 += BLK) {
            int64_t k = cols - c0 < BLK ? cols - c0 : BLK;
            float buf[BLK];
            col_convert(buf, COL_F32, y + c0 * (int64_t)es, dt, k);
            for (int64_t c = 0; c < k; c++)
                buf[c] += x[(c0 + c) * cs];
            col_convert(y + c0 * (int64_t)es, dt, buf, COL_F32, k);
        }
    }
    return COL_OK;
}

/* ---- matmul ---- */

/* Rows [r0, r1) x columns [c0, c1) of matrix t (its last two dims, element [0, 0] at base) as f32 at dst,
 * in t's own orientation: rows contiguous -> row-major (*trans false, *ld the tile's width), columns
 * contiguous -> column-major (*trans true, *ld its height); each contiguous run converted at once */
static void tile_f32(const col_tensor *t, const char *base, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                     float *dst, bool *trans, int *ld, int nt)
{
    int64_t l;
    col_matrix_layout(t, trans, &l);
    size_t es = col_dtype_size(t->dtype);
    int64_t runs = *trans ? c1 - c0 : r1 - r0, len = *trans ? r1 - r0 : c1 - c0;
    int64_t first = *trans ? c0 : r0, at = *trans ? r0 : c0;
    *ld = (int)len;
#pragma omp parallel for schedule(static) if (runs * len > COL_PAR_MIN) num_threads(nt)
    for (int64_t j = 0; j < runs; j++)
        col_convert(dst + j * len, COL_F32, base + ((first + j) * l + at) * (int64_t)es, t->dtype, len);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* one product C[M,N] (row stride N) = A B through f32 tiles in scratch */
static void gemm_tiles(const col_cpu_ctx *ctx, const col_exec *ex, const col_tensor *a, const char *pa,
                       const col_tensor *b, const char *pb, float *c, int64_t M, int64_t N, int64_t K, int nt)
{
    col_lowp_tiles tl = col_matmul_lowp_tiles(M, K, N);
    float *ta = ex->scratch;
    float *tb = (float *)((char *)ex->scratch + (((size_t)(tl.mb * tl.kb) * sizeof(float) + 63) & ~(size_t)63));
    for (int64_t n0 = 0; n0 < N; n0 += tl.nb) {
        int64_t n1 = min64(N, n0 + tl.nb);
        for (int64_t k0 = 0; k0 < K; k0 += tl.kb) {
            int64_t k1 = min64(K, k0 + tl.kb);
            bool trb, tra;
            int ldb, lda;
            tile_f32(b, pb, k0, k1, n0, n1, tb, &trb, &ldb, nt);
            for (int64_t m0 = 0; m0 < M; m0 += tl.mb) {
                int64_t m1 = min64(M, m0 + tl.mb);
                tile_f32(a, pa, m0, m1, k0, k1, ta, &tra, &lda, nt);
                ctx->blas.sgemm(COL_BLAS_ROW_MAJOR, tra ? COL_BLAS_TRANS : COL_BLAS_NO_TRANS,
                                trb ? COL_BLAS_TRANS : COL_BLAS_NO_TRANS, (int)(m1 - m0), (int)(n1 - n0), (int)(k1 - k0),
                                1.0f, ta, lda, tb, ldb, k0 ? 1.0f : 0.0f, c + m0 * N + n0, (int)N);
            }
        }
    }
}

col_status col_cpu_matmul_lowp(const col_node *n, const col_exec *ex, int64_t M, int64_t N, int64_t K, int64_t batches,
                               col_err *err)
{
    const col_cpu_ctx *ctx = ex->be->ctx;
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    int nd = n->t.ndim;
    float *c = n->t.data;
    bool native = a->dtype == COL_BF16 && ctx->sbgemm_on && ctx->blas.sbgemm;
    if (!native && ex->scratch_bytes < col_matmul_lowp_scratch(M, K, N))
        return col_err_set(err, COL_EINTERNAL, "matmul: %zu bytes of scratch for %s tiles, %zu needed",
                           ex->scratch_bytes, col_dtype_name(a->dtype), col_matmul_lowp_scratch(M, K, N));
    size_t es = col_dtype_size(a->dtype);
    int nt = omp_in_parallel() ? 1 : col_cpu_threads(ex);
    int restore = col_blas_threads_begin(&ctx->blas, nt);
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t oa, ob;
        col_batch_offsets(n->t.shape, nd - 2, bi, a, b, &oa, &ob);
        const char *pa = (const char *)a->data + oa * (int64_t)es, *pb = (const char *)b->data + ob * (int64_t)es;
        if (native) {
            bool tra, trb;
            int64_t lda, ldb;
            col_matrix_layout(a, &tra, &lda);
            col_matrix_layout(b, &trb, &ldb);
            ctx->blas.sbgemm(COL_BLAS_ROW_MAJOR, tra ? COL_BLAS_TRANS : COL_BLAS_NO_TRANS,
                             trb ? COL_BLAS_TRANS : COL_BLAS_NO_TRANS, (int)M, (int)N, (int)K, 1.0f,
                             (const uint16_t *)pa, (int)lda, (const uint16_t *)pb, (int)ldb, 0.0f, c + bi * M * N,
                             (int)N);
        } else {
            gemm_tiles(ctx, ex, a, pa, b, pb, c + bi * M * N, M, N, K, nt);
        }
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}
