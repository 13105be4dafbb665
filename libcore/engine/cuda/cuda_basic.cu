/* cuda_basic.cu - CUDA kernels: copy, cast, fill, accumulate, scatter_slice,
 * binary elementwise, scale, concat, arange, kv_write (and their per-row forms).
 *
 * Sources are read through their strides (cu_td: logical index -> offset);
 * outputs are contiguous. Arithmetic is the CPU kernels' (no fused
 * multiply-add where they have none), so most results are bitwise equal. */
#include <string.h>

#include "cuda_internal.h"

/* ---- element moves ---- */

/* dst[off_d(i)] = src[off_s(i)] for i < n, T of the element size */
template <typename T> __global__ void k_move(T *__restrict__ dst, const T *__restrict__ src, cu_td td, cu_td ts, int64_t n)
{
    CU_GRID_LOOP(i, n) dst[cu_off(td, i)] = src[cu_off(ts, i)];
}

/* copies the elements of s (its logical shape) into the view d of the same shape */
static col_status move(const col_cuda_ctx *c, const col_tensor *d, const col_tensor *s, col_err *err, const char *what)
{
    int64_t n = col_numel(s);
    if (n == 0)
        return COL_OK;
    cu_td td = cu_td_of(d), ts = cu_td_of(s);
    unsigned g = cu_blocks(c, n);
    switch (col_dtype_size(s->dtype)) {
    case 2:
        CU_LAUNCH(k_move<uint16_t>, g, CU_THREADS, 0, c->stream)((uint16_t *)d->data, (const uint16_t *)s->data, td, ts, n);
        break;
    case 4:
        CU_LAUNCH(k_move<uint32_t>, g, CU_THREADS, 0, c->stream)((uint32_t *)d->data, (const uint32_t *)s->data, td, ts, n);
        break;
    case 8:
        CU_LAUNCH(k_move<uint64_t>, g, CU_THREADS, 0, c->stream)((uint64_t *)d->data, (const uint64_t *)s->data, td, ts, n);
        break;
    default: return col_err_set(err, COL_EDTYPE, "%s: element size %zu", what, col_dtype_size(s->dtype));
    }
    return cu_launch(err, what);
}

/* contiguous tensor of s's shape at data */
static col_tensor contig_like(const col_tensor *s, void *data, col_dtype dt)
{
    col_tensor t = *s;
    t.dtype = dt;
    t.data = data;
    col_set_contiguous_strides(&t);
    return t;
}

static col_status k_copy(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *s = &n->src[0]->t;
    col_tensor d = contig_like(s, n->t.data, s->dtype);
    return move(cu_ctx(ex), &d, s, err, "copy");
}

/* ---- cast: through double, as col_get_as_f64 / col_set_from_f64 ---- */

__device__ __forceinline__ double load_f64(const void *p, int dt, int64_t off)
{
    switch (dt) {
    case COL_F32: return ((const float *)p)[off];
    case COL_BF16: return __bfloat162float(__ushort_as_bfloat16(((const unsigned short *)p)[off]));
    case COL_F16: return __half2float(__ushort_as_half(((const unsigned short *)p)[off]));
    case COL_I32: return ((const int32_t *)p)[off];
    default: return (double)((const int64_t *)p)[off];
    }
}

__device__ __forceinline__ void store_f64(void *p, int dt, int64_t off, double v)
{
    switch (dt) {
    case COL_F32: ((float *)p)[off] = (float)v; break;
    case COL_BF16: ((unsigned short *)p)[off] = __bfloat16_as_ushort(__float2bfloat16_rn((float)v)); break;
    case COL_F16: ((unsigned short *)p)[off] = __half_as_ushort(__float2half_rn((float)v)); break;
    case COL_I32: ((int32_t *)p)[off] = (int32_t)v; break;
    default: ((int64_t *)p)[off] = (int64_t)v; break;
    }
}

__global__ void k_cast_g(void *dst, int ddt, const void *src, int sdt, cu_td ts, int64_t n, int trunc)
{
    CU_GRID_LOOP(i, n) {
        double v = load_f64(src, sdt, cu_off(ts, i));
        if (trunc)
            v = v < 0 ? -floor(-v) : floor(v);
        store_f64(dst, ddt, i, v);
    }
}

static col_status k_cast(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *s = &n->src[0]->t;
    int64_t num = col_numel(s);
    if (num == 0)
        return COL_OK;
    int trunc = col_dtype_is_float(s->dtype) && !col_dtype_is_float(n->t.dtype);
    CU_LAUNCH(k_cast_g, cu_blocks(c, num), CU_THREADS, 0, c->stream)(
        n->t.data, (int)n->t.dtype, s->data, (int)s->dtype, cu_td_of(s), num, trunc);
    return cu_launch(err, "cast");
}

__global__ void k_fill_f32(float *dst, float v, int64_t n)
{
    CU_GRID_LOOP(i, n) dst[i] = v;
}

__global__ void k_fill_any(void *dst, int dt, double v, int64_t n)
{
    CU_GRID_LOOP(i, n) store_f64(dst, dt, i, v);
}

static col_status k_fill(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    int64_t num = col_numel(&n->t);
    if (num == 0)
        return COL_OK;
    if (n->t.dtype == COL_F32)
        CU_LAUNCH(k_fill_f32, cu_blocks(c, num), CU_THREADS, 0, c->stream)((float *)n->t.data, n->p.f[0], num);
    else
        CU_LAUNCH(k_fill_any, cu_blocks(c, num), CU_THREADS, 0, c->stream)(
            n->t.data, (int)n->t.dtype, (double)n->p.f[0], num);
    return cu_launch(err, "fill");
}

/* ---- accumulate: out (the parameter's gradient buffer) += src ---- */

__global__ void k_accumulate_g(float *out, const float *src, cu_td ts, int64_t n)
{
    CU_GRID_LOOP(i, n) out[i] += src[cu_off(ts, i)];
}

/* a bf16 or f16 gradient buffer (a 16-bit parameter's): converted to f32, added, rounded back, as on the CPU */
__global__ void k_accumulate_16(void *out, int dt, const float *src, cu_td ts, int64_t n)
{
    CU_GRID_LOOP(i, n) store_f64(out, dt, i, (double)((float)load_f64(out, dt, i) + src[cu_off(ts, i)]));
}

static col_status k_accumulate(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *s = &n->src[0]->t;
    int64_t num = col_numel(s);
    if (num == 0)
        return COL_OK;
    if (n->t.dtype != COL_F32)
        CU_LAUNCH(k_accumulate_16, cu_blocks(c, num), CU_THREADS, 0, c->stream)(
            n->t.data, (int)n->t.dtype, (const float *)s->data, cu_td_of(s), num);
    else
        CU_LAUNCH(k_accumulate_g, cu_blocks(c, num), CU_THREADS, 0, c->stream)(
            (float *)n->t.data, (const float *)s->data, cu_td_of(s), num);
    return cu_launch(err, "accumulate");
}

/* ---- scatter_slice: zeros of the output's shape, src0 written at [start, start+len) of axis i[0] ---- */

static col_status k_scatter_slice(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    size_t es = col_dtype_size(n->t.dtype);
    col_status st = cu_status(cudaMemsetAsync(n->t.data, 0, (size_t)col_numel(&n->t) * es, c->stream), err,
                              "scatter_slice");
    if (st != COL_OK)
        return st;
    int axis = (int)n->p.i[0];
    col_tensor view = n->t;
    view.shape[axis] = n->src[0]->t.shape[axis];
    view.data = (char *)n->t.data + n->p.i[1] * n->t.stride[axis] * (int64_t)es;
    return move(c, &view, &n->src[0]->t, err, "scatter_slice");
}

/* ---- binary elementwise and scale ---- */

template <int OP>
__global__ void k_binary_g(float *__restrict__ out, const float *__restrict__ a, cu_td ta, const float *__restrict__ b,
                           cu_td tb, int64_t n)
{
    CU_GRID_LOOP(i, n) {
        float x = a[cu_off(ta, i)], y = b[cu_off(tb, i)];
        out[i] = OP == COL_OP_ADD ? x + y : OP == COL_OP_SUB ? x - y : OP == COL_OP_MUL ? x * y : x / y;
    }
}

static col_status k_binary(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    int64_t num = col_numel(&n->t);
    if (num == 0)
        return COL_OK;
    cu_td ta = cu_td_of(a), tb = cu_td_of(b);
    float *o = (float *)n->t.data;
    const float *x = (const float *)a->data, *y = (const float *)b->data;
    unsigned g = cu_blocks(c, num);
    switch (n->op) {
    case COL_OP_ADD: CU_LAUNCH(k_binary_g<COL_OP_ADD>, g, CU_THREADS, 0, c->stream)(o, x, ta, y, tb, num); break;
    case COL_OP_SUB: CU_LAUNCH(k_binary_g<COL_OP_SUB>, g, CU_THREADS, 0, c->stream)(o, x, ta, y, tb, num); break;
    case COL_OP_MUL: CU_LAUNCH(k_binary_g<COL_OP_MUL>, g, CU_THREADS, 0, c->stream)(o, x, ta, y, tb, num); break;
    default: CU_LAUNCH(k_binary_g<COL_OP_DIV>, g, CU_THREADS, 0, c->stream)(o, x, ta, y, tb, num); break;
    }
    return cu_launch(err, col_op_name(n->op));
}

__global__ void k_scale_g(float *__restrict__ out, const float *__restrict__ x, cu_td tx, float m, float k, int64_t n)
{
    CU_GRID_LOOP(i, n) out[i] = __fadd_rn(__fmul_rn(x[cu_off(tx, i)], m), k);
}

static col_status k_scale(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *a = &n->src[0]->t;
    int64_t num = col_numel(&n->t);
    if (num == 0)
        return COL_OK;
    CU_LAUNCH(k_scale_g, cu_blocks(c, num), CU_THREADS, 0, c->stream)(
        (float *)n->t.data, (const float *)a->data, cu_td_of(a), n->p.f[0], n->p.f[1], num);
    return cu_launch(err, "scale");
}

/* ---- concat along i[0] ---- */

static col_status k_concat(const col_node *n, const col_exec *ex, col_err *err)
{
    int axis = (int)n->p.i[0];
    size_t es = col_dtype_size(n->t.dtype);
    int64_t start = 0;
    for (int k = 0; k < n->nsrc; k++) {
        const col_tensor *s = &n->src[k]->t;
        col_tensor view = n->t;
        view.shape[axis] = s->shape[axis];
        view.data = (char *)n->t.data + start * n->t.stride[axis] * (int64_t)es;
        col_status st = move(cu_ctx(ex), &view, s, err, "concat");
        if (st != COL_OK)
            return st;
        start += s->shape[axis];
    }
    return COL_OK;
}

/* ---- arange: i32 [n] = start + i[0] + k, start read on the device ---- */

__global__ void k_arange_g(int32_t *o, const int64_t *start, int64_t base, int64_t n)
{
    int64_t s = start ? *start : 0;
    CU_GRID_LOOP(k, n) o[k] = (int32_t)(s + base + k);
}

/* rows: i32 [B,n], row b from start[b] */
__global__ void k_arange_rows_g(int32_t *o, const int64_t *start, int64_t base, int64_t n, int64_t num)
{
    CU_GRID_LOOP(i, num) o[i] = (int32_t)(start[i / n] + base + i % n);
}

static col_status k_arange(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    int64_t len = col_numel(&n->t);
    if (len == 0)
        return COL_OK;
    if (n->p.i[1]) {
        CU_LAUNCH(k_arange_rows_g, cu_blocks(c, len), CU_THREADS, 0, c->stream)(
            (int32_t *)n->t.data, (const int64_t *)n->src[0]->t.data, n->p.i[0], n->t.shape[1], len);
        return cu_launch(err, "arange");
    }
    CU_LAUNCH(k_arange_g, cu_blocks(c, len), CU_THREADS, 0, c->stream)(
        (int32_t *)n->t.data, n->nsrc ? (const int64_t *)n->src[0]->t.data : NULL, n->p.i[0], len);
    return cu_launch(err, "arange");
}

/* ---- kv_write: cache[:, :, start:start+T] = x, start read on the device.
 * A start outside [0, S - T] writes nothing and is reported at the next
 * synchronisation (cuda_check.cu). ---- */

/* dst = the cache at position 0 seen with x's shape (view td); position
 * start is stride2 elements further per step */
template <typename T>
__global__ void k_kv_write_g(T *__restrict__ dst, const T *__restrict__ src, cu_td td, cu_td ts, int64_t n,
                             const int64_t *startp, int64_t stride2, int64_t Tn, int64_t S, cu_check_slot *slot)
{
    int64_t start = *startp;
    if (start < 0 || start > S - Tn) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            slot->val = start;
            slot->pos = 0;
        }
        return;
    }
    dst += start * stride2;
    CU_GRID_LOOP(i, n) dst[cu_off(td, i)] = src[cu_off(ts, i)];
}

/* rows: x [B,H,T,D] element i into cache[rows[b], h, start[b] + t, d] (strides cs). Nothing is
 * written when the check kernel before it (stream order) found a bad row or start; every
 * element's row and position are checked again, so nothing is ever written out of bounds. */
template <typename T>
__global__ void k_kv_write_rows_g(T *__restrict__ dst, const T *__restrict__ src, cu_td ts, int64_t n, int64_t H,
                                  int64_t Tn, int64_t D, int64_t cs0, int64_t cs1, int64_t cs2, int64_t cs3,
                                  const int64_t *startp, const int64_t *rows, int64_t R, int64_t L,
                                  const cu_check_slot *slot)
{
    if (slot->pos != CU_CHECK_NONE)
        return;
    CU_GRID_LOOP(i, n) {
        int64_t d = i % D, t = (i / D) % Tn, h = (i / (D * Tn)) % H, b = i / (D * Tn * H);
        int64_t r = rows ? rows[b] : b, start = startp[b];
        if (r < 0 || r >= R || start < 0 || start > L - Tn)
            continue;
        dst[r * cs0 + h * cs1 + (start + t) * cs2 + d * cs3] = src[cu_off(ts, i)];
    }
}

static col_status kv_write_rows(col_cuda_ctx *c, const col_node *n, col_err *err)
{
    const col_tensor *ct = &n->src[0]->t, *x = &n->src[1]->t;
    int64_t B = x->shape[0], T = x->shape[2], num = col_numel(x), R = ct->shape[0], L = ct->shape[2];
    const int64_t *sp = (const int64_t *)n->src[2]->t.data;
    const int64_t *rows = n->nsrc > 3 ? (const int64_t *)n->src[3]->t.data : NULL;
    size_t es = col_dtype_size(x->dtype);
    if (es != 2 && es != 4 && es != 8)
        return col_err_set(err, COL_EDTYPE, "kv_write: element size %zu", es);
    cu_check_info info = {"kv_write", CU_CHECK_ROWS, L, R, T};
    cu_check_slot *slot;
    col_status st = cu_check_begin(c, &info, &slot, err);
    if (st != COL_OK)
        return st;
    st = cu_check_rows(c, slot, sp, rows, B, R, L, T, err, "kv_write");
    if (st == COL_OK && num > 0) {
        cu_td ts = cu_td_of(x);
        unsigned g = cu_blocks(c, num);
        const int64_t *cs = ct->stride;
#define KV_ROWS(TY)                                                                                                   \
    CU_LAUNCH(k_kv_write_rows_g<TY>, g, CU_THREADS, 0, c->stream)((TY *)ct->data, (const TY *)x->data, ts, num,        \
                                                                 x->shape[1], T, x->shape[3], cs[0], cs[1], cs[2],   \
                                                                 cs[3], sp, rows, R, L, slot)
        switch (es) {
        case 2: KV_ROWS(uint16_t); break;
        case 4: KV_ROWS(uint32_t); break;
        default: KV_ROWS(uint64_t); break;
        }
#undef KV_ROWS
        st = cu_launch(err, "kv_write");
    }
    cu_check_end(c);
    return st;
}

static col_status k_kv_write(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    if (n->p.i[0])
        return kv_write_rows(c, n, err);
    const col_tensor *ct = &n->src[0]->t, *x = &n->src[1]->t;
    int64_t T = x->shape[2], num = col_numel(x);
    cu_check_info info = {"kv_write", CU_CHECK_KV, ct->shape[2], 0, T};
    col_tensor view = *ct;
    view.shape[2] = T;
    cu_td td = cu_td_of(&view), ts = cu_td_of(x);
    const int64_t *sp = (const int64_t *)n->src[2]->t.data;
    unsigned g = cu_blocks(c, num);
    size_t es = col_dtype_size(x->dtype);
    if (es != 2 && es != 4 && es != 8)
        return col_err_set(err, COL_EDTYPE, "kv_write: element size %zu", es);
    cu_check_slot *slot;
    col_status st = cu_check_begin(c, &info, &slot, err);
    if (st != COL_OK)
        return st;
    switch (es) { /* also with no elements: the position is checked */
    case 2:
        CU_LAUNCH(k_kv_write_g<uint16_t>, g, CU_THREADS, 0, c->stream)(
            (uint16_t *)ct->data, (const uint16_t *)x->data, td, ts, num, sp, ct->stride[2], T, ct->shape[2], slot);
        break;
    case 4:
        CU_LAUNCH(k_kv_write_g<uint32_t>, g, CU_THREADS, 0, c->stream)(
            (uint32_t *)ct->data, (const uint32_t *)x->data, td, ts, num, sp, ct->stride[2], T, ct->shape[2], slot);
        break;
    default:
        CU_LAUNCH(k_kv_write_g<uint64_t>, g, CU_THREADS, 0, c->stream)(
            (uint64_t *)ct->data, (const uint64_t *)x->data, td, ts, num, sp, ct->stride[2], T, ct->shape[2], slot);
        break;
    }
    cu_check_end(c);
    return cu_launch(err, "kv_write");
}

void cu_register_basic(col_backend *be)
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
}
