/* ops_basic.c - elementwise binary ops, scale, matmul, linear (gradients: ops_basic_bwd.c). */
#include "backend.h"
#include "graph_internal.h"

#include <string.h>

bool col_broadcast_shape(const col_tensor *a, const col_tensor *b, int *ndim, int64_t *shape)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return false;
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = nd;
    return true;
}

static col_node *binary(col_graph *g, col_op op, col_node *a, col_node *b)
{
    if (!a || !b)
        return NULL;
    char b1[96], b2[96];
    const char *name = col_op_name(op);
    if (!col_check(g, a->t.dtype == COL_F32 && b->t.dtype == COL_F32, COL_EDTYPE, "%s: needs f32 operands, got %s and %s",
                   name, col_dtype_name(a->t.dtype), col_dtype_name(b->t.dtype)))
        return NULL;
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    if (!col_check(g, col_broadcast_shape(&a->t, &b->t, &nd, shape), COL_ESHAPE, "%s: shapes %s and %s do not broadcast",
                   name, col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2)))
        return NULL;
    col_node *src[2] = {col_expand(g, a, nd, shape), col_expand(g, b, nd, shape)};
    return col_new_node(g, op, COL_F32, nd, shape, 2, src);
}

col_node *col_add(col_graph *g, col_node *a, col_node *b) { return binary(g, COL_OP_ADD, a, b); }
col_node *col_sub(col_graph *g, col_node *a, col_node *b) { return binary(g, COL_OP_SUB, a, b); }
col_node *col_mul(col_graph *g, col_node *a, col_node *b) { return binary(g, COL_OP_MUL, a, b); }
col_node *col_div(col_graph *g, col_node *a, col_node *b) { return binary(g, COL_OP_DIV, a, b); }

col_node *col_scale(col_graph *g, col_node *x, float mul, float add)
{
    if (!x)
        return NULL;
    if (!col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "scale: needs f32, got %s", col_dtype_name(x->t.dtype)))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_SCALE, COL_F32, x->t.ndim, x->t.shape, 1, &x);
    if (n) {
        n->p.f[0] = mul;
        n->p.f[1] = add;
    }
    return n;
}

/* A matrix operand BLAS can read in place: unit stride along one of the last
 * two dims and a leading dimension that covers the other. */
static bool blas_ok(const col_tensor *t)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
    int64_t sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if ((sc == 1 || c == 1) && sr >= (c > 1 ? c : 1))
        return true;
    if ((sr == 1 || r == 1) && sc >= (r > 1 ? r : 1))
        return true;
    return false;
}

/* x [..., M, K] f32 @ W^T, W [N, K] a quantized weight read through its transpose b [K, N] (unit stride
 * along K, whole blocks between rows): one MATMUL node of x as [M', K] rows and b, reshaped back */
static col_node *matmul_quant(col_graph *g, col_node *a, col_node *b)
{
    char b1[96], b2[96];
    col_dtype qt = b->t.dtype;
    int64_t blk = col_dtype_block(qt);
    if (!col_check(g, !col_dtype_is_quant(a->t.dtype), COL_EDTYPE,
                   "matmul: %s @ %s: a quantized (%s) weight W [N, K] must be the second operand, read as W^T",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2),
                   col_dtype_name(a->t.dtype)) ||
        !col_check(g, a->t.dtype == COL_F32, COL_EDTYPE, "matmul: x @ W^T with a quantized (%s) W needs an f32 x, got %s",
                   col_dtype_name(qt), col_dtype_name(a->t.dtype)) ||
        !col_check(g, a->t.ndim >= 2 && b->t.ndim == 2, COL_ESHAPE,
                   "matmul: %s @ %s: x @ W^T with a quantized W needs x [..., M, K] and W^T [K, N]",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2)))
        return NULL;
    int64_t K = b->t.shape[0], N = b->t.shape[1], ld = b->t.stride[1];
    if (!col_check(g, b->t.stride[0] == 1 && ld >= K && K % blk == 0 && ld % blk == 0, COL_ESHAPE,
                   "matmul: the quantized (%s) operand %s is read only as W^T (col_transpose of a weight W [N, K] with "
                   "contiguous rows, K a multiple of %lld)",
                   col_dtype_name(qt), col_shape_str(&b->t, b1, sizeof b1), (long long)blk) ||
        !col_check(g, a->t.shape[a->t.ndim - 1] == K, COL_ESHAPE, "matmul: %s @ %s: inner sizes %lld and %lld differ",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2),
                   (long long)a->t.shape[a->t.ndim - 1], (long long)K))
        return NULL;
    int64_t flat[2] = {-1, K};
    col_node *x = col_reshape(g, col_contiguous(g, a), 2, flat);
    if (!x)
        return NULL;
    int64_t shape[2] = {x->t.shape[0], N};
    col_node *src[2] = {x, b};
    col_node *n = col_new_node(g, COL_OP_MATMUL, COL_F32, 2, shape, 2, src);
    if (!n)
        return NULL;
    n->scratch_bytes = col_matmul_quant_scratch(shape[0], K, N, qt);
    if (a->t.ndim == 2)
        return n;
    int64_t out[COL_MAX_DIMS];
    memcpy(out, a->t.shape, sizeof(int64_t) * (size_t)a->t.ndim);
    out[a->t.ndim - 1] = N;
    return col_reshape(g, n, a->t.ndim, out);
}

col_node *col_matmul(col_graph *g, col_node *a, col_node *b)
{
    if (!a || !b)
        return NULL;
    if (col_dtype_is_quant(a->t.dtype) || col_dtype_is_quant(b->t.dtype))
        return matmul_quant(g, a, b);
    char b1[96], b2[96];
    col_dtype dt = a->t.dtype;
    bool float_dt = dt == COL_F32 || dt == COL_BF16 || dt == COL_F16;
    if (!col_check(g, dt == b->t.dtype && float_dt, COL_EDTYPE,
                   "matmul: needs two f32, two bf16 or two f16 operands, got %s and %s", col_dtype_name(a->t.dtype),
                   col_dtype_name(b->t.dtype)) ||
        !col_check(g, a->t.ndim >= 2 && b->t.ndim >= 2, COL_ESHAPE, "matmul: operands need 2+ dims, got %s and %s",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2)))
        return NULL;
    int na = a->t.ndim, nb = b->t.ndim;
    int64_t M = a->t.shape[na - 2], K = a->t.shape[na - 1], N = b->t.shape[nb - 1];
    if (!col_check(g, b->t.shape[nb - 2] == K, COL_ESHAPE, "matmul: %s @ %s: inner sizes %lld and %lld differ",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2), (long long)K,
                   (long long)b->t.shape[nb - 2]))
        return NULL;
    col_tensor ba = a->t, bb = b->t; /* batch parts */
    ba.ndim = na - 2;
    bb.ndim = nb - 2;
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    if (!col_check(g, col_broadcast_shape(&ba, &bb, &nd, shape), COL_ESHAPE, "matmul: batch dims of %s and %s do not broadcast",
                   col_shape_str(&a->t, b1, sizeof b1), col_shape_str(&b->t, b2, sizeof b2)))
        return NULL;
    int64_t ea[COL_MAX_DIMS], eb[COL_MAX_DIMS];
    memcpy(ea, shape, sizeof(int64_t) * (size_t)nd);
    memcpy(eb, shape, sizeof(int64_t) * (size_t)nd);
    ea[nd] = M, ea[nd + 1] = K;
    eb[nd] = K, eb[nd + 1] = N;
    if (!blas_ok(&a->t))
        a = col_contiguous(g, a);
    if (!blas_ok(&b->t))
        b = col_contiguous(g, b);
    col_node *src[2] = {col_expand(g, a, nd + 2, ea), col_expand(g, b, nd + 2, eb)};
    shape[nd] = M;
    shape[nd + 1] = N;
    col_node *n = col_new_node(g, COL_OP_MATMUL, COL_F32, nd + 2, shape, 2, src);
    if (n && dt != COL_F32) /* f32 accumulation; a host without a GEMM for dt converts tiles (backend.h) */
        n->scratch_bytes = col_matmul_lowp_scratch(M, K, N);
    return n;
}

/* Tiles of about TILE elements: K in slices of at most 2048 (one slice for most layers), rows and columns
 * in panels that keep each tile near TILE */
enum { LOWP_TILE = 1 << 21, LOWP_KB = 2048 };

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

col_lowp_tiles col_matmul_lowp_tiles(int64_t M, int64_t K, int64_t N)
{
    col_lowp_tiles t;
    t.kb = K < 1 ? 1 : min64(K, LOWP_KB);
    int64_t across = LOWP_TILE / t.kb;
    t.mb = M < 1 ? 1 : min64(M, across);
    t.nb = N < 1 ? 1 : min64(N, across);
    return t;
}

size_t col_matmul_lowp_scratch(int64_t M, int64_t K, int64_t N)
{
    col_lowp_tiles t = col_matmul_lowp_tiles(M, K, N);
    size_t a = ((size_t)(t.mb * t.kb) * sizeof(float) + 63) & ~(size_t)63;
    size_t b = ((size_t)(t.kb * t.nb) * sizeof(float) + 63) & ~(size_t)63;
    return a + b;
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

int64_t col_matmul_quant_panel(int64_t K, int64_t N)
{
    int64_t p = (1 << 17) / (K > 1 ? K : 1); /* about 512 KiB of f32, 16 to 256 rows */
    p = p < 16 ? 16 : p > 256 ? 256 : p & ~(int64_t)15;
    return N < p ? (N > 0 ? N : 1) : p;
}

size_t col_matmul_quant_xrow_bytes(int64_t K)
{
    return align64((size_t)K) * 2 + align64((size_t)(K / 32) * 4) * 2;
}

size_t col_matmul_quant_scratch(int64_t M, int64_t K, int64_t N, col_dtype dt)
{
    (void)dt;
    size_t panel = (size_t)col_max_threads() * align64((size_t)(col_matmul_quant_panel(K, N) * K) * sizeof(float));
    size_t rows = (size_t)(M < COL_QMV_ROWS ? M : COL_QMV_ROWS) * col_matmul_quant_xrow_bytes(K);
    return M > COL_QMV_ROWS ? panel : rows;
}

col_node *col_linear(col_graph *g, col_node *x, col_node *w, col_node *bias)
{
    if (!x || !w)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, w->t.ndim == 2 && x->t.ndim >= 1 && x->t.shape[x->t.ndim - 1] == w->t.shape[1], COL_ESHAPE,
                   "linear: input %s does not match weight %s (expected [out, in])",
                   col_shape_str(&x->t, b1, sizeof b1), col_shape_str(&w->t, b2, sizeof b2)))
        return NULL;
    int64_t in = w->t.shape[1], out = w->t.shape[0];
    int64_t flat[2] = {-1, in};
    col_node *x2 = col_reshape(g, x, 2, flat);
    col_node *y = col_matmul(g, x2, col_transpose(g, w, 0, 1));
    if (bias) {
        if (!col_check(g, bias->t.ndim == 1 && bias->t.shape[0] == out, COL_ESHAPE, "linear: bias %s for %lld outputs",
                       col_shape_str(&bias->t, b1, sizeof b1), (long long)out))
            return NULL;
        y = col_add(g, y, bias);
    }
    int64_t shape[COL_MAX_DIMS];
    memcpy(shape, x->t.shape, sizeof shape);
    shape[x->t.ndim - 1] = out;
    return col_reshape(g, y, x->t.ndim, shape);
}

void col_matrix_layout(const col_tensor *t, bool *trans, int64_t *ld)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
    int64_t sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if ((sc == 1 || c == 1) && sr >= (c > 1 ? c : 1)) { /* rows contiguous: column-major [c, r], as is */
        *trans = false;
        *ld = sr > 0 ? sr : 1;
        if (*ld < c)
            *ld = c;
    } else { /* columns contiguous: column-major [r, c], transposed */
        *trans = true;
        *ld = sc > 0 ? sc : 1;
        if (*ld < r)
            *ld = r;
    }
}
