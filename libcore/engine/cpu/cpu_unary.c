/* cpu_unary.c - CPU kernels for the elementwise activations, their backward
 * ops, and dropout.
 *
 * Every kernel walks its output in fixed pieces: blocks of BLK elements when
 * all sources are contiguous, else tiles of rows x columns. A source whose
 * rows are contiguous is read in place; a strided one (transpose, expand of
 * the last dim) is gathered into a stack buffer first, so each op is one
 * plain contiguous loop that gcc vectorises. Threads share out whole pieces
 * and a piece is computed the same way on any thread, so results do not
 * depend on the thread count.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "rng.h"
#include "vmath.h"

#define BLK 1024

#define SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2/pi) */
#define INV_SQRT_2 0.7071067811865476f     /* 1/sqrt(2) */
#define INV_SQRT_2PI 0.3989422804014327f   /* 1/sqrt(2 pi) */
#define GELU_KAPPA 0.044715f

/* One block: up to BLK elements starting at logical index `start`. */
typedef struct {
    const float *in[3]; /* contiguous views of the sources over the block */
    float *out[2];      /* output(s); SWIGLU_BWD writes da to out[0], db to out[1] */
    int64_t n;
    int64_t start;
    const col_op_params *p;
} blk;

typedef void (*blk_fn)(const blk *b);

/* ---- forward ---- */

static void b_exp(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = expf(x[i]);
}

static void b_log(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = logf(x[i]);
}

static void b_tanh(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = tanhf(x[i]);
}

static void b_sigmoid(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = 1.0f / (1.0f + expf(-x[i]));
}

static void b_relu(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN passes through, as in PyTorch */
}

/* 0.5 x (1 + erf(x / sqrt 2)) */
static void b_gelu_erf(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT_2));
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static void b_gelu_tanh(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++) {
        float v = x[i];
        float u = SQRT_2_OVER_PI * (v + GELU_KAPPA * v * v * v);
        o[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

static void b_silu(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = x[i] / (1.0f + expf(-x[i]));
}

/* silu(a) * b */
static void b_swiglu(const blk *b)
{
    const float *restrict a = b->in[0], *restrict u = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = a[i] / (1.0f + expf(-a[i])) * u[i];
}

/* ---- backward: in[0] = y or x, in[1] = dy ---- */

/* dx = dy (1 - y^2) */
static void b_tanh_bwd(const blk *b)
{
    const float *restrict y = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = dy[i] * (1.0f - y[i] * y[i]);
}

/* dx = dy y (1 - y) */
static void b_sigmoid_bwd(const blk *b)
{
    const float *restrict y = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = dy[i] * y[i] * (1.0f - y[i]);
}

/* dx = dy where x > 0 (0 at the kink, as in PyTorch) */
static void b_relu_bwd(const blk *b)
{
    const float *restrict x = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++)
        o[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* dx = dy (Phi(x) + x phi(x)) */
static void b_gelu_erf_bwd(const blk *b)
{
    const float *restrict x = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * INV_SQRT_2));
        float pdf = INV_SQRT_2PI * expf(-0.5f * v * v);
        o[i] = dy[i] * (cdf + v * pdf);
    }
}

/* dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 kappa x^2)), t = tanh(u) */
static void b_gelu_tanh_bwd(const blk *b)
{
    const float *restrict x = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++) {
        float v = x[i], v2 = v * v;
        float t = tanhf(SQRT_2_OVER_PI * (v + GELU_KAPPA * v2 * v));
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_KAPPA * v2);
        o[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

/* dx = dy s (1 + x (1 - s)), s = sigmoid(x) */
static void b_silu_bwd(const blk *b)
{
    const float *restrict x = b->in[0], *restrict dy = b->in[1];
    float *restrict o = b->out[0];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++) {
        float s = 1.0f / (1.0f + expf(-x[i]));
        o[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* out = silu(a) * u: da = dy u s (1 + a (1 - s)), du = dy silu(a) */
static void b_swiglu_bwd(const blk *b)
{
    const float *restrict a = b->in[0], *restrict u = b->in[1], *restrict dy = b->in[2];
    float *restrict da = b->out[0], *restrict du = b->out[1];
#pragma omp simd
    for (int64_t i = 0; i < b->n; i++) {
        float s = 1.0f / (1.0f + expf(-a[i]));
        da[i] = dy[i] * u[i] * s * (1.0f + a[i] * (1.0f - s));
        du[i] = dy[i] * a[i] * s;
    }
}

/* ---- dropout ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* w[4j .. 4j+3] = col_philox(seed, ctr + j) for j < nctr: the same function
 * as rng.c, written as a loop over blocks that gcc vectorises. The four
 * 32-bit words live in 64-bit lanes (only the low halves matter), which
 * vectorises better than 32-bit lanes widened for each product. */
static void philox_words(uint64_t seed, uint64_t ctr, int64_t nctr, uint32_t *restrict w)
{
    const uint64_t lo = 0xffffffffu;
    uint64_t k0[10], k1[10];
    for (int r = 0; r < 10; r++) {
        k0[r] = (uint32_t)((uint32_t)seed + (uint32_t)r * PHILOX_W0);
        k1[r] = (uint32_t)((uint32_t)(seed >> 32) + (uint32_t)r * PHILOX_W1);
    }
#pragma omp simd
    for (int64_t j = 0; j < nctr; j++) {
        uint64_t c = ctr + (uint64_t)j;
        uint64_t c0 = c & lo, c1 = c >> 32, c2 = 0, c3 = 0;
        for (int r = 0; r < 10; r++) {
            uint64_t p0 = (c0 & lo) * PHILOX_M0, p1 = (c2 & lo) * PHILOX_M1;
            c0 = (p1 >> 32) ^ c1 ^ k0[r];
            c2 = (p0 >> 32) ^ c3 ^ k1[r];
            c1 = p1 & lo;
            c3 = p0 & lo;
        }
        w[4 * j + 0] = (uint32_t)c0;
        w[4 * j + 1] = (uint32_t)c1;
        w[4 * j + 2] = (uint32_t)c2;
        w[4 * j + 3] = (uint32_t)c3;
    }
}

/* out = x * (u >= p ? 1/(1-p) : 0), u = col_rand_uniform(seed, offset + index).
 * Dropped elements are x * 0, as in PyTorch (a NaN stays NaN). */
static void b_dropout(const blk *b)
{
    const float *restrict x = b->in[0];
    float *restrict o = b->out[0];
    int64_t n = b->n;
    float p = b->p->f[0];
    if (p <= 0.0f) {
        memcpy(o, x, sizeof *o * (size_t)n);
        return;
    }
    if (p >= 1.0f) {
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] * 0.0f;
        return;
    }
    float scale = 1.0f / (1.0f - p);
    uint64_t seed = (uint64_t)b->p->i[0];
    uint64_t first = (uint64_t)b->p->i[1] + (uint64_t)b->start; /* stream index of element 0 */
    int64_t sh = (int64_t)(first & 3);
    _Alignas(64) uint32_t w[BLK + 8];
    philox_words(seed, first >> 2, (sh + n + 3) / 4, w);
    const uint32_t *restrict ws = w + sh;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        o[i] = x[i] * (col_u32_to_unit(ws[i]) >= p ? scale : 0.0f);
}

/* ---- driver ---- */

static blk_fn fn_of(col_op op)
{
    switch (op) {
    case COL_OP_EXP: return b_exp;
    case COL_OP_LOG: return b_log;
    case COL_OP_TANH: return b_tanh;
    case COL_OP_SIGMOID: return b_sigmoid;
    case COL_OP_RELU: return b_relu;
    case COL_OP_GELU_ERF: return b_gelu_erf;
    case COL_OP_GELU_TANH: return b_gelu_tanh;
    case COL_OP_SILU: return b_silu;
    case COL_OP_SWIGLU: return b_swiglu;
    case COL_OP_TANH_BWD: return b_tanh_bwd;
    case COL_OP_SIGMOID_BWD: return b_sigmoid_bwd;
    case COL_OP_RELU_BWD: return b_relu_bwd;
    case COL_OP_GELU_ERF_BWD: return b_gelu_erf_bwd;
    case COL_OP_GELU_TANH_BWD: return b_gelu_tanh_bwd;
    case COL_OP_SILU_BWD: return b_silu_bwd;
    case COL_OP_SWIGLU_BWD: return b_swiglu_bwd;
    case COL_OP_DROPOUT: return b_dropout;
    default: return NULL;
    }
}

/* Strided tiles: TILE_R rows x TILE_C columns, gathered column by column so
 * that a transposed source is read along its own rows (cache lines, pages). */
#define TILE_R 16
#define TILE_C (BLK / TILE_R)

/* buf[rr * nc + j] = element (r0 + rr, c0 + j) of t, rows as in col_row_offset */
static void gather_tile(const col_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *restrict buf)
{
    const float *base = t->data;
    int64_t cs = col_col_stride(t), off[TILE_R];
    for (int64_t rr = 0; rr < nr; rr++)
        off[rr] = col_row_offset(t, r0 + rr) + c0 * cs;
    for (int64_t j = 0; j < nc; j++)
        for (int64_t rr = 0; rr < nr; rr++)
            buf[rr * nc + j] = base[off[rr] + j * cs];
}

/* All sources have the shape of one output; SWIGLU_BWD has two outputs
 * packed one after the other. */
static col_status k_elementwise(const col_node *n, const col_exec *ex, col_err *err)
{
    blk_fn f = fn_of(n->op);
    int nin = n->nsrc, nout = n->op == COL_OP_SWIGLU_BWD ? 2 : 1;
    if (!f || nin < 1 || nin > 3)
        return col_err_set(err, COL_EINTERNAL, "%s: not an elementwise op with 1..3 sources", col_op_name(n->op));
    col_op_params prm = n->p;
    if (n->op == COL_OP_DROPOUT) {
        /* src1 is the run counter, not an elementwise input; p 0 (dropout off) passes x through */
        nin = 1;
        if (ex->dropout_off)
            prm.f[0] = 0.0f;
        int64_t c = n->nsrc > 1 ? *(const int64_t *)n->src[1]->t.data : 0;
        if (c != 0) {
            col_philox_out h = col_philox((uint64_t)prm.i[0], (uint64_t)c);
            prm.i[0] = (int64_t)(((uint64_t)h.v[0] << 32) | h.v[1]);
        }
    }
    const col_tensor *src[3] = {0};
    bool all_contig = true, unit_cols = true;
    for (int k = 0; k < nin; k++) {
        src[k] = &n->src[k]->t;
        all_contig = all_contig && col_is_contiguous(src[k]);
        unit_cols = unit_cols && col_col_stride(src[k]) == 1;
    }
    const col_tensor *t = src[0];
    int64_t numel = col_numel(t), rows = col_rows(t), cols = col_cols(t);
    float *out = n->t.data;
    if (numel == 0)
        return COL_OK;

    if (all_contig) { /* fast path: flat blocks */
        int64_t nblk = (numel + BLK - 1) / BLK;
#pragma omp parallel for schedule(static) if (numel * nout > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
        for (int64_t bi = 0; bi < nblk; bi++) {
            blk b = {.start = bi * BLK, .p = &prm};
            b.n = numel - b.start < BLK ? numel - b.start : BLK;
            for (int k = 0; k < nin; k++)
                b.in[k] = (const float *)src[k]->data + b.start;
            for (int k = 0; k < nout; k++)
                b.out[k] = out + k * numel + b.start;
            f(&b);
        }
        return COL_OK;
    }

    /* strided: tiles of tr rows x tc columns. Sources with unit column
     * stride (slices, expanded rows) are read in place, row by row; the
     * others are gathered into per-thread buffers. */
    int64_t tr = unit_cols ? 1 : TILE_R, tc = unit_cols ? BLK : TILE_C;
    int64_t nrt = (rows + tr - 1) / tr, nct = (cols + tc - 1) / tc;
#pragma omp parallel for schedule(static) if (numel * nout > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t u = 0; u < nrt * nct; u++) {
        _Alignas(64) float buf[3][BLK];
        int64_t r0 = (u / nct) * tr, c0 = (u % nct) * tc;
        int64_t nr = rows - r0 < tr ? rows - r0 : tr, nc = cols - c0 < tc ? cols - c0 : tc;
        for (int k = 0; k < nin; k++)
            if (col_col_stride(src[k]) != 1)
                gather_tile(src[k], r0, nr, c0, nc, buf[k]);
        for (int64_t rr = 0; rr < nr; rr++) {
            blk b = {.n = nc, .start = (r0 + rr) * cols + c0, .p = &prm};
            for (int k = 0; k < nin; k++)
                b.in[k] = col_col_stride(src[k]) == 1
                              ? (const float *)src[k]->data + col_row_offset(src[k], r0 + rr) + c0
                              : buf[k] + rr * nc;
            for (int k = 0; k < nout; k++)
                b.out[k] = out + k * numel + b.start;
            f(&b);
        }
    }
    return COL_OK;
}

void col_cpu_register_unary(col_backend *be)
{
    for (int op = 0; op < COL_OP_COUNT; op++)
        if (col_op_is_elementwise((col_op)op))
            be->kernel[op] = k_elementwise;
}
