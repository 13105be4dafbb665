/* test_cuda_ops.c - every CUDA kernel against the CPU backend (issue 6).
 *
 * Each case builds a small graph (forward and, through autodiff, backward)
 * on random inputs: odd sizes, broadcasting, transposed and sliced views.
 * Every node is marked as an output, so the CPU run leaves each node's value
 * in its own place. Then, for every computing node in schedule order, the
 * CUDA kernel runs alone: all storage is mirrored on the device with the CPU
 * values (leaves and gradient buffers as they were before the run), the
 * node's output is poisoned (NaN bytes), the kernel is called directly, and
 * its result is compared with the CPU's (f32: |d - c| <= tol (|c| + mean |c|),
 * tol 1e-5, TF32 matmul 2e-3; other dtypes bitwise); the harness is
 * tests/cuda_opcase.h (tests/test_cuda_image_ops.c uses it too). Also: bad ids,
 * targets (cross_entropy, token_logprob) and cache positions give COL_EINVAL
 * at the next synchronisation, an impossible allocation COL_ENOMEM.
 *
 * Without a CUDA device it prints "1..0 # SKIP ..." and passes.
 * Run alone: make tests/test_cuda_ops && ./tests/test_cuda_ops */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "graph.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "cuda_testutil.h"
#include "backend_cpu.h"

/* cudart reserves address space that ASan's shadow gap would block, and the
 * CUDA driver keeps allocations until exit (for sanitizer builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcuda.so\nleak:libcudart.so\nleak:libcublas\n"; }

#include "cuda_opcase.h"

/* ---- the cases ---- */

static void case_copy_cast(void)
{
    tcase c = begin("copy/cast", TOL);
    int64_t s[3] = {5, 7, 3};
    col_node *x = input(&c, "x", COL_F32, 3, s, R_WIDE, 0, false);
    col_node *xt = col_transpose(c.g, x, 0, 2);
    col_contiguous(c.g, xt);
    col_node *sl = col_slice(c.g, xt, 1, 2, 4);
    const col_dtype dts[] = {COL_BF16, COL_F16, COL_I32, COL_I64};
    for (int i = 0; i < 4; i++) {
        col_node *y = col_cast(c.g, sl, dts[i]);
        col_cast(c.g, col_transpose(c.g, y, 0, 1), COL_F32);
        col_contiguous(c.g, col_transpose(c.g, y, 1, 2));
    }
    col_node *b = input(&c, "b", COL_BF16, 3, s, R_NORMAL, 0, false);
    col_cast(c.g, b, COL_F16);
    col_node *i64 = input(&c, "i", COL_I64, 3, s, R_WIDE, 0, false);
    col_cast(c.g, col_transpose(c.g, i64, 0, 1), COL_BF16);
    col_fill(c.g, COL_F32, 3, s, 0.25f);
    col_fill(c.g, COL_BF16, 2, s, -3.5f);
    col_fill(c.g, COL_I32, 1, s, 7.0f);
    finish(&c);
}

static void case_binary(int variant)
{
    static const char *names[] = {"binary [2,3,33]+[33]", "binary [7,1]x[1,5]", "binary transposed"};
    tcase c = begin(names[variant], TOL);
    int64_t sa[3] = {2, 3, 33}, sb[1] = {33}, s71[2] = {7, 1}, s15[2] = {1, 5}, s43[2] = {4, 3};
    col_node *a, *b;
    if (variant == 0) {
        a = param(&c, "a", 3, sa, R_NORMAL);
        b = param(&c, "b", 1, sb, R_POSITIVE);
    } else if (variant == 1) {
        a = param(&c, "a", 2, s71, R_NORMAL);
        b = param(&c, "b", 2, s15, R_POSITIVE);
    } else {
        a = col_transpose(c.g, param(&c, "a", 2, s43, R_NORMAL), 0, 1);
        b = param(&c, "b", 1, &s43[1], R_POSITIVE); /* [3] as [3,1], broadcast over the rows of [4,3]^T */
        b = col_reshape(c.g, b, 2, (int64_t[]){3, 1});
    }
    col_node *y = col_add(c.g, col_mul(c.g, a, b), col_div(c.g, a, b));
    y = col_sub(c.g, y, col_scale(c.g, b, 0.5f, 1.25f));
    backward_of(&c, y);
    finish(&c);
}

typedef col_node *(*un_fn)(col_graph *, col_node *);

static void case_unary(const char *name, un_fn f, int kind, bool transpose)
{
    tcase c = begin(name, TOL);
    int64_t s[3] = {3, 17, 5};
    col_node *x = param(&c, "x", 3, s, kind);
    if (transpose)
        x = col_transpose(c.g, x, 1, 2);
    backward_of(&c, f(c.g, x));
    finish(&c);
}

static void case_swiglu(void)
{
    tcase c = begin("swiglu", TOL);
    int64_t s[2] = {9, 130}, s1[2] = {1, 130};
    col_node *a = param(&c, "a", 2, s, R_NORMAL), *u = param(&c, "u", 2, s1, R_NORMAL);
    backward_of(&c, col_swiglu(c.g, a, col_expand(c.g, u, 2, s)));
    finish(&c);
}

static void case_dropout(void)
{
    tcase c = begin("dropout", TOL);
    int64_t s[2] = {4, 1029};
    col_node *x = param(&c, "x", 2, s, R_NORMAL);
    col_graph_set_rng_counter(c.g, 3);
    backward_of(&c, col_dropout(c.g, col_transpose(c.g, col_reshape(c.g, x, 2, (int64_t[]){1029, 4}), 0, 1), 0.3f, 1234));
    col_dropout(c.g, x, 0.5f, 99);
    finish(&c);
}

/* the same graph run with dropout off: every dropout (backward ones too) passes its input through */
static void case_dropout_off(void)
{
    tcase c = begin("dropout off", TOL);
    c.dropout_off = true;
    int64_t s[2] = {4, 1029};
    col_node *x = param(&c, "x", 2, s, R_NORMAL);
    col_graph_set_rng_counter(c.g, 3);
    backward_of(&c, col_dropout(c.g, col_transpose(c.g, col_reshape(c.g, x, 2, (int64_t[]){1029, 4}), 0, 1), 0.3f, 1234));
    col_dropout(c.g, x, 0.5f, 99);
    finish(&c);
}

static void case_reduce(void)
{
    tcase c = begin("reduce", TOL);
    int64_t s[3] = {4, 6, 70};
    col_node *x = param(&c, "x", 3, s, R_NORMAL);
    col_node *xt = col_transpose(c.g, x, 0, 2);
    backward_of(&c, col_sum(c.g, x, 1u << 1, 0));
    backward_of(&c, col_mean(c.g, xt, (1u << 0) | (1u << 2), 1));
    backward_of(&c, col_max(c.g, x, 1u << 2, 1));
    backward_of(&c, col_max(c.g, xt, (1u << 1) | (1u << 2), 0));
    col_sum(c.g, x, 7u, 0);
    col_sum(c.g, x, 1u, 0);
    finish(&c);
}

/* long slabs with few outputs: the two-pass reductions (parts of at least
 * 2048 elements), the reduced axes inner and outer */
static void case_reduce_long(void)
{
    tcase c = begin("reduce: long slabs", TOL);
    int64_t s[3] = {2, 4500, 5};
    col_node *x = param(&c, "x", 3, s, R_NORMAL);
    backward_of(&c, col_sum(c.g, x, 7u, 0));                           /* everything: one output */
    backward_of(&c, col_mean(c.g, x, (1u << 1) | (1u << 2), 1));       /* [2]: 22500 each, inner */
    backward_of(&c, col_max(c.g, x, 1u << 1, 0));                      /* [2, 5]: 4500 each, strided by 5 */
    backward_of(&c, col_max(c.g, x, 7u, 0));                           /* everything */
    col_sum(c.g, col_transpose(c.g, x, 0, 2), (1u << 1) | (1u << 2), 0); /* [5]: 9000 each, strided */
    finish(&c);
}

static void case_softmax(int causal, bool mask)
{
    char name[64];
    snprintf(name, sizeof name, "softmax causal=%d mask=%d", causal, (int)mask);
    tcase c = begin(name, TOL);
    int64_t s[4] = {2, 3, 5, 37}, sm[4] = {1, 1, 5, 37};
    col_node *x = param(&c, "x", 4, s, R_NORMAL);
    col_node *m = NULL;
    if (mask) {
        m = input(&c, "mask", COL_F32, 4, sm, R_NORMAL, 0, false);
        float *md = m->bound;
        for (int64_t i = 0; i < 37; i++)
            md[2 * 37 + i] = -INFINITY; /* a fully masked query row */
        md[4 * 37 + 3] = -INFINITY;
    }
    backward_of(&c, col_softmax(c.g, x, m, causal));
    backward_of(&c, col_log_softmax(c.g, col_transpose(c.g, x, 2, 3)));
    finish(&c);
}

static void case_norm(bool rms, bool w, bool b, int64_t rows, int64_t C)
{
    char name[80];
    snprintf(name, sizeof name, "%s w=%d b=%d [%lld,%lld]", rms ? "rmsnorm" : "layernorm", (int)w, (int)b, (long long)rows,
             (long long)C);
    /* the backward's sums run over up to n = max(rows, C) terms in orders that differ between the backends:
     * besides TOL, the standard bound for such a sum's rounding, n u (u = FLT_EPSILON / 2) - 3.1e-5 at 515
     * (an ASan build's CPU reference once differed by 1.22e-5 over 300 x 515) */
    int64_t nsum = rows > C ? rows : C;
    double tol = (double)nsum * FLT_EPSILON / 2 > TOL ? (double)nsum * FLT_EPSILON / 2 : TOL;
    tcase c = begin(name, tol);
    int64_t s[2] = {rows, C};
    col_node *x = param(&c, "x", 2, s, R_NORMAL);
    col_node *wt = w ? param(&c, "w", 1, &C, R_NORMAL) : NULL, *bt = b ? param(&c, "b", 1, &C, R_NORMAL) : NULL;
    backward_of(&c, rms ? col_rmsnorm(c.g, x, wt, 1e-5f) : col_layernorm(c.g, x, wt, bt, 1e-5f));
    finish(&c);
}

static void case_matmul(bool tf32)
{
    tcase c = begin(tf32 ? "matmul tf32" : "matmul f32", tf32 ? 2e-3 : TOL);
    col_cuda_backend_set_tf32(&gpu, tf32);
    int64_t sa[3] = {3, 17, 33}, sb[2] = {33, 29}, sa4[4] = {2, 3, 5, 40}, sb4[4] = {2, 1, 40, 31}, sw[2] = {29, 33};
    col_node *a = param(&c, "a", 3, sa, R_NORMAL), *b = param(&c, "b", 2, sb, R_NORMAL);
    backward_of(&c, col_matmul(c.g, a, b));
    col_node *a4 = param(&c, "a4", 4, sa4, R_NORMAL), *b4 = param(&c, "b4", 4, sb4, R_NORMAL);
    backward_of(&c, col_matmul(c.g, a4, b4));
    col_node *w = param(&c, "w", 2, sw, R_NORMAL);
    col_node *xa = input(&c, "xa", COL_F32, 3, sa, R_NORMAL, 0, true);
    backward_of(&c, col_linear(c.g, xa, w, NULL));
    /* one row (decode) and a transposed left operand */
    col_node *v = input(&c, "v", COL_F32, 2, (int64_t[]){1, 33}, R_NORMAL, 0, false);
    col_matmul(c.g, v, b);
    col_matmul(c.g, col_transpose(c.g, w, 0, 1), w);
    finish(&c);
    col_cuda_backend_set_tf32(&gpu, false);
}

/* ids [B, T] below V into a table [V, C]; the backward's dw must equal the
 * CPU's bitwise (the same row order per element). Large B T: more rows than
 * one block sorts (2048), so the sort's global merge steps run too. */
/* more matmul shapes than the backend caches descriptors for (64): each
 * call's result against the CPU (a descriptor of another shape would show),
 * then one shape again and again: found in the cache */
static void case_matmul_cache(void)
{
    uint64_t h0, m0, h1, m1, h2, m2;
    col_cuda_backend_matmul_cache(&gpu, &h0, &m0);
    tcase c = begin("matmul: 70 shapes through the descriptor cache", TOL);
    int64_t sa[2] = {5, 80}, sb[2] = {80, 4};
    col_node *a = param(&c, "a", 2, sa, R_NORMAL), *b = param(&c, "b", 2, sb, R_NORMAL);
    for (int64_t k = 3; k < 73; k++)
        col_matmul(c.g, col_slice(c.g, a, 1, 0, k), col_slice(c.g, b, 0, 0, k));
    finish(&c);
    col_cuda_backend_matmul_cache(&gpu, &h1, &m1);
    TL_OK(m1 - m0 >= 70, "70 shapes: %llu descriptor builds", (unsigned long long)(m1 - m0));
    tcase d = begin("matmul: one shape 4 times", TOL);
    a = param(&d, "a", 2, (int64_t[]){9, 13}, R_NORMAL), b = param(&d, "b", 2, (int64_t[]){13, 6}, R_NORMAL);
    for (int i = 0; i < 4; i++)
        col_matmul(d.g, a, b);
    finish(&d);
    col_cuda_backend_matmul_cache(&gpu, &h2, &m2);
    TL_OK(m2 - m1 <= 1 && h2 - h1 >= 3, "one shape 4 times: %llu builds, %llu found cached",
          (unsigned long long)(m2 - m1), (unsigned long long)(h2 - h1));
}

static void case_embedding(col_dtype idt, int64_t V, int64_t C, int64_t B, int64_t T)
{
    char name[96];
    snprintf(name, sizeof name, "embedding %s V=%lld C=%lld ids [%lld,%lld]", col_dtype_name(idt), (long long)V,
             (long long)C, (long long)B, (long long)T);
    tcase c = begin(name, TOL);
    int64_t sw[2] = {V, C}, si[2] = {B, T};
    col_node *w = param(&c, "w", 2, sw, R_NORMAL);
    col_node *ids = input(&c, "ids", idt, 2, si, R_NORMAL, V, false);
    backward_of(&c, col_embedding(c.g, w, ids));
    finish(&c);
}

/* mixed precision: 16-bit parameters and gradient buffers; matmuls of cast inputs, an embedding table read in 16
 * bits, a bias cast to f32 (the gradients come back in f32 and are rounded into the 16-bit buffers) */
static void case_mixed(col_dtype dt)
{
    char name[64];
    snprintf(name, sizeof name, "mixed precision %s", col_dtype_name(dt));
    tcase c = begin(name, TOL);
    int64_t sw[2] = {29, 33}, sx[3] = {3, 5, 33}, sb[1] = {29}, se[2] = {11, 33}, si[2] = {3, 5};
    col_node *p[3];
    const int64_t *shapes[3] = {sw, sb, se};
    int nds[3] = {2, 1, 2};
    for (int k = 0; k < 3; k++) {
        p[k] = col_param(c.g, "p16", dt, nds[k], shapes[k]);
        int64_t num = col_numel(&p[k]->t);
        void *d = own(&c, 2 * (size_t)num), *gr = own(&c, 2 * (size_t)num);
        fill_random(dt, d, num, R_NORMAL, 0);
        fill_random(dt, gr, num, R_NORMAL, 0);
        col_bind(p[k], d, NULL);
        col_bind_grad(p[k], gr, NULL);
    }
    col_node *x = input(&c, "x", COL_F32, 3, sx, R_NORMAL, 0, true);
    col_node *y = col_linear(c.g, col_cast(c.g, x, dt), p[0], col_cast(c.g, p[1], COL_F32));
    backward_of(&c, y);
    col_node *ids = input(&c, "ids", COL_I32, 2, si, R_NORMAL, 11, false);
    col_node *e = col_embedding(c.g, p[2], ids);
    backward_of(&c, col_matmul(c.g, col_cast(c.g, e, dt), col_transpose(c.g, p[0], 0, 1)));
    finish(&c);
}

static void case_cross_entropy(col_dtype tdt, int64_t N, int64_t V)
{
    char name[64];
    snprintf(name, sizeof name, "cross_entropy %s [%lld,%lld]", col_dtype_name(tdt), (long long)N, (long long)V);
    tcase c = begin(name, TOL);
    int64_t sl[2] = {N, V};
    col_node *x = param(&c, "logits", 2, sl, R_NORMAL);
    col_node *t = input(&c, "targets", tdt, 1, &N, R_NORMAL, V, false);
    if (tdt == COL_I64)
        ((int64_t *)t->bound)[1] = -100;
    else
        ((int32_t *)t->bound)[N - 1] = -100;
    c.loss = col_cross_entropy(c.g, x, t, -100);
    finish(&c);
}

/* token_logprob of logits [B, T, V] with two ignored targets; the backward of sum(y * r) */
static void case_token_logprob(col_dtype tdt, int64_t B, int64_t T, int64_t V)
{
    char name[80];
    snprintf(name, sizeof name, "token_logprob %s [%lld,%lld,%lld]", col_dtype_name(tdt), (long long)B, (long long)T,
             (long long)V);
    tcase c = begin(name, TOL);
    int64_t sl[3] = {B, T, V}, st[2] = {B, T}, N = B * T;
    col_node *x = param(&c, "logits", 3, sl, R_NORMAL);
    col_node *t = input(&c, "targets", tdt, 2, st, R_NORMAL, V, false);
    for (int64_t r = 0; r < N; r += N > 2 ? N - 2 : 1) /* rows 0 and N - 2 */
        if (tdt == COL_I64)
            ((int64_t *)t->bound)[r] = -100;
        else
            ((int32_t *)t->bound)[r] = -100;
    backward_of(&c, col_token_logprob(c.g, x, t, -100));
    finish(&c);
}

static void case_data_movement(void)
{
    tcase c = begin("concat/slice/arange/kv_write", TOL);
    int64_t s1[2] = {3, 4}, s2[2] = {3, 6}, sc[4] = {1, 2, 8, 4}, sn[4] = {1, 2, 3, 4}, one = 1;
    col_node *a = param(&c, "a", 2, s1, R_NORMAL), *b = param(&c, "b", 2, s2, R_NORMAL);
    col_node *parts[2] = {a, col_transpose(c.g, col_reshape(c.g, b, 2, (int64_t[]){6, 3}), 0, 1)};
    col_node *cat = col_concat(c.g, 2, parts, 1);
    backward_of(&c, col_slice(c.g, cat, 1, 2, 5));
    col_node *start = input(&c, "start", COL_I64, 1, &one, R_NORMAL, 0, false);
    *(int64_t *)start->bound = 2;
    col_arange(c.g, start, 9, 3);
    col_arange(c.g, NULL, 5, 0);
    col_node *cache = input(&c, "cache", COL_F32, 4, sc, R_NORMAL, 0, false);
    col_node *nw = input(&c, "new", COL_F32, 4, sn, R_NORMAL, 0, false);
    col_kv_write(c.g, cache, nw, start);
    finish(&c);
}

/* rope: x [B,H,T,D] (optionally a transposed [B,T,H,D] view), positions
 * [T] i32 or [B,T] i64 up to max_pos, rotary dims rd (0 = all), theta,
 * optional LLaMA-3 scaling; the backward is a ROPE node with the inverse flag */
static void case_rope(int64_t B, int64_t H, int64_t T, int64_t D, int rd, bool per_batch, bool transposed, float theta,
                      bool llama3, int64_t max_pos)
{
    char name[128];
    snprintf(name, sizeof name, "rope [%lld,%lld,%lld,%lld] rd=%d pos%s theta=%g llama3=%d%s", (long long)B, (long long)H,
             (long long)T, (long long)D, rd, per_batch ? "[B,T]" : "[T]", (double)theta, (int)llama3,
             transposed ? " transposed" : "");
    tcase c = begin(name, TOL);
    col_node *x;
    if (transposed)
        x = col_transpose(c.g, param(&c, "x", 4, (int64_t[]){B, T, H, D}, R_NORMAL), 1, 2);
    else
        x = param(&c, "x", 4, (int64_t[]){B, H, T, D}, R_NORMAL);
    col_node *pos = per_batch ? input(&c, "pos", COL_I64, 2, (int64_t[]){B, T}, R_NORMAL, max_pos, false)
                              : input(&c, "pos", COL_I32, 1, &T, R_NORMAL, max_pos, false);
    col_rope_cfg cfg = {.rotary_dims = rd, .theta = theta};
    if (llama3) {
        cfg.llama3_factor = 8.0f;
        cfg.llama3_low_freq_factor = 1.0f;
        cfg.llama3_high_freq_factor = 4.0f;
        cfg.llama3_original_max_pos = 8192.0f;
    }
    backward_of(&c, col_rope(c.g, x, pos, &cfg));
    finish(&c);
}

/* Tolerance of the attention cases: the CUDA kernels sum scores, softmax
 * denominators and gradients in another order than the CPU (and use CUDA's
 * expf, 2 ulp). With the kernels run in a host emulation of CUDA (same code,
 * same fmaf order, glibc expf) the worst error of these cases was 3.1e-6
 * (the backward at T = 1024); 5e-5 leaves a margin for the device's expf
 * and nvcc's fused multiply-adds. */
#define ATT_TOL 5e-5

/* attention q [B,Hq,T,D], k,v [B,Hkv,S,D] and its gradient; transposed: q,
 * k, v are [B,T,H,D] tensors seen as [B,H,T,D] (strided, as after a
 * projection) */
static void case_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t S, int64_t D, int causal,
                           bool transposed)
{
    char name[128];
    snprintf(name, sizeof name, "attention B=%lld Hq=%lld Hkv=%lld T=%lld S=%lld D=%lld causal=%d%s", (long long)B,
             (long long)Hq, (long long)Hkv, (long long)T, (long long)S, (long long)D, causal,
             transposed ? " transposed" : "");
    tcase c = begin(name, ATT_TOL);
    col_node *q, *k, *v;
    if (transposed) {
        q = col_transpose(c.g, param(&c, "q", 4, (int64_t[]){B, T, Hq, D}, R_NORMAL), 1, 2);
        k = col_transpose(c.g, param(&c, "k", 4, (int64_t[]){B, S, Hkv, D}, R_NORMAL), 1, 2);
        v = col_transpose(c.g, param(&c, "v", 4, (int64_t[]){B, S, Hkv, D}, R_NORMAL), 1, 2);
    } else {
        q = param(&c, "q", 4, (int64_t[]){B, Hq, T, D}, R_NORMAL);
        k = param(&c, "k", 4, (int64_t[]){B, Hkv, S, D}, R_NORMAL);
        v = param(&c, "v", 4, (int64_t[]){B, Hkv, S, D}, R_NORMAL);
    }
    backward_of(&c, col_attention(c.g, q, k, v, causal, 0.0f));
    finish(&c);
}

/* decoding: T new queries over the first start+T positions of a cache of S */
static void case_attention_cached(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t S, int64_t D, int64_t start)
{
    char name[128];
    snprintf(name, sizeof name, "attention cached B=%lld Hq=%lld Hkv=%lld T=%lld start=%lld S=%lld D=%lld", (long long)B,
             (long long)Hq, (long long)Hkv, (long long)T, (long long)start, (long long)S, (long long)D);
    tcase c = begin(name, ATT_TOL);
    int64_t one = 1;
    col_node *q = input(&c, "q", COL_F32, 4, (int64_t[]){B, Hq, T, D}, R_NORMAL, 0, false);
    col_node *kc = input(&c, "kcache", COL_F32, 4, (int64_t[]){B, Hkv, S, D}, R_NORMAL, 0, false);
    col_node *vc = input(&c, "vcache", COL_F32, 4, (int64_t[]){B, Hkv, S, D}, R_NORMAL, 0, false);
    col_node *st = input(&c, "start", COL_I64, 1, &one, R_NORMAL, 0, false);
    *(int64_t *)st->bound = start;
    col_attention_cached(c.g, q, kc, vc, st, 0.0f);
    finish(&c);
}

/* attention: a head dim over 128 is COL_EUNSUPPORTED (before any device
 * access); a cache position past the cache is COL_EINVAL */
static void case_attention_errors(void)
{
    col_exec ex = {.be = &gpu};
    col_graph *g = col_graph_new();
    int64_t sq[4] = {1, 2, 5, 160}, one = 1;
    col_node *q = col_input(g, "q", COL_F32, 4, sq), *k = col_input(g, "k", COL_F32, 4, sq);
    col_node *v = col_input(g, "v", COL_F32, 4, sq);
    q->flags |= COL_NODE_NEEDS_GRAD;
    col_node *a = col_attention(g, q, k, v, 1, 0.0f);
    col_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};
    col_status st = a ? gpu.kernel[COL_OP_ATTENTION](a, &ex, &e1) : COL_EINTERNAL;
    TL_OK(st == COL_EUNSUPPORTED && strstr(e1.msg, "head dim 160"), "attention: head dim 160 is COL_EUNSUPPORTED: %s",
          e1.msg);
    col_node *bw = NULL;
    if (a && col_graph_backward(g, col_sum(g, a, 15u, 0), &e4) == COL_OK)
        for (int i = 0; i < col_graph_count(g); i++)
            if (col_graph_node(g, i)->op == COL_OP_ATTENTION_BWD)
                bw = col_graph_node(g, i);
    st = bw ? gpu.kernel[COL_OP_ATTENTION_BWD](bw, &ex, &e4) : COL_EINTERNAL;
    TL_OK(st == COL_EUNSUPPORTED && strstr(e4.msg, "head dim 160"),
          "attention_bwd: head dim 160 is COL_EUNSUPPORTED: %s", e4.msg);
    col_graph_free(g);

    /* cached: start 38 + 3 new tokens over a cache of 40 */
    g = col_graph_new();
    int64_t s3[4] = {1, 1, 3, 8}, sc[4] = {1, 1, 40, 8};
    col_node *qc = col_input(g, "q", COL_F32, 4, s3), *kc = col_input(g, "k", COL_F32, 4, sc);
    col_node *vc = col_input(g, "v", COL_F32, 4, sc), *start = col_input(g, "start", COL_I64, 1, &one);
    col_node *ac = col_attention_cached(g, qc, kc, vc, start, 0.0f);
    void *dstart = NULL;
    int64_t hs = 38;
    bool ok = ac && col_cuda_alloc(&gpu, sizeof hs, &dstart, &e2) == COL_OK &&
              col_cuda_to_device(&gpu, dstart, &hs, sizeof hs, &e2) == COL_OK;
    TL_OK(ok, "cached attention error setup %s", e2.msg);
    void *dq = NULL, *dkv = NULL, *dout = NULL;
    ok = ok && col_cuda_alloc(&gpu, sizeof(float) * 24, &dq, &e2) == COL_OK &&
         col_cuda_alloc(&gpu, sizeof(float) * 320, &dkv, &e2) == COL_OK &&
         col_cuda_alloc(&gpu, node_bytes(ac), &dout, &e2) == COL_OK &&
         col_cuda_memset(&gpu, dq, 0, sizeof(float) * 24, &e2) == COL_OK &&
         col_cuda_memset(&gpu, dkv, 0, sizeof(float) * 320, &e2) == COL_OK &&
         col_cuda_memset(&gpu, dout, 0xff, node_bytes(ac), &e2) == COL_OK;
    if (ok) {
        /* the kernel is queued without a look at the position; the next synchronisation reports it */
        ac->src[0]->t.data = dq, ac->src[1]->t.data = dkv, ac->src[2]->t.data = dkv, ac->t.data = dout;
        ac->src[3]->t.data = dstart;
        st = gpu.kernel[COL_OP_ATTENTION](ac, &ex, &e3);
        TL_OK(st == COL_OK, "attention: a start past the cache is queued: %s", e3.msg);
        st = col_cuda_sync(&gpu, &e3);
        TL_OK(st == COL_EINVAL && strstr(e3.msg, "attention: cache position 38 + 3 new tokens exceeds the cache of 40"),
              "attention: start past the cache is COL_EINVAL at the sync: %s", e3.msg);
        col_err_clear(&e3);
        size_t nb = node_bytes(ac), lo = col_extra_offset(ac);
        char *back = malloc(nb);
        ok = back && col_cuda_to_host(&gpu, back, dout, nb, &e3) == COL_OK;
        bool zeros = ok;
        for (int i = 0; i < 24 && ok; i++)
            zeros = zeros && ((float *)back)[i] == 0.0f;
        for (int i = 0; i < 3 && ok; i++)
            zeros = zeros && ((float *)(back + lo))[i] == 0.0f;
        free(back);
        TL_OK(zeros, "attention: output and logsumexp are zeros for a bad start %s", e3.msg);
        col_err_clear(&e3);
        TL_OK(col_cuda_sync(&gpu, &e3) == COL_OK, "the next sync is clean: %s", e3.msg);
    }
    col_cuda_free(&gpu, dq), col_cuda_free(&gpu, dkv), col_cuda_free(&gpu, dout);
    col_cuda_free(&gpu, dstart);
    col_graph_free(g);
}

/* bad ids, targets and cache positions: every kernel is queued, the next
 * synchronisation (col_cuda_sync, a synchronous copy) reports the first bad
 * input as COL_EINVAL with the CPU kernel's message, and the kernels wrote
 * nothing out of bounds (zeros for a bad embedding row). An impossible
 * allocation is COL_ENOMEM. */
static void case_errors(void)
{
    col_err err = {0};
    void *p = NULL;
    col_status st = col_cuda_alloc(&gpu, (size_t)1 << 52, &p, &err);
    TL_OK(st == COL_ENOMEM && p == NULL, "a 4 PiB allocation is COL_ENOMEM: %s", err.msg);
    col_err_clear(&err);

    int64_t sw[2] = {5, 3}, n = 4, one = 1;
    col_graph *g = col_graph_new();
    col_node *w = col_input(g, "w", COL_F32, 2, sw), *ids = col_input(g, "ids", COL_I64, 1, &n);
    w->flags |= COL_NODE_NEEDS_GRAD;
    col_node *e = col_embedding(g, w, ids);
    col_node *t = col_input(g, "t", COL_I32, 1, &n);
    col_node *lg = col_input(g, "lg", COL_F32, 2, (int64_t[]){4, 5});
    col_node *ce = col_cross_entropy(g, lg, t, -1);
    col_node *tl = col_token_logprob(g, lg, t, -1);
    col_node *eb = NULL; /* embedding_bwd, from the graph's backward */
    if (e && col_graph_backward(g, col_sum(g, e, 3u, 0), &err) == COL_OK)
        for (int i = 0; i < col_graph_count(g); i++)
            if (col_graph_node(g, i)->op == COL_OP_EMBEDDING_BWD)
                eb = col_graph_node(g, i);
    col_node *cache = col_input(g, "cache", COL_F32, 4, (int64_t[]){1, 1, 6, 2});
    col_node *nw = col_input(g, "new", COL_F32, 4, (int64_t[]){1, 1, 2, 2});
    col_node *start = col_input(g, "start", COL_I64, 1, &one);
    col_node *kv = col_kv_write(g, cache, nw, start);
    int64_t hid[4] = {0, 4, 5, 1}, hstart = 5;
    int32_t ht[4] = {0, -1, 9, 2};
    float hw[15], hcache[12], hnew[4];
    for (int i = 0; i < 15; i++)
        hw[i] = (float)(i + 1);
    for (int i = 0; i < 12; i++)
        hcache[i] = 100.0f + (float)i;
    for (int i = 0; i < 4; i++)
        hnew[i] = -1.0f - (float)i;
    void *dw = NULL, *dids = NULL, *de = NULL, *dt = NULL, *dl = NULL, *dce = NULL, *ddy = NULL, *deb = NULL;
    void *dcache = NULL, *dnew = NULL, *dstart = NULL, *dtl = NULL;
    bool ok = e && ce && tl && eb && kv && col_cuda_alloc(&gpu, sizeof hw, &dw, &err) == COL_OK &&
              col_cuda_alloc(&gpu, 256, &dtl, &err) == COL_OK &&
              col_cuda_alloc(&gpu, 64, &dids, &err) == COL_OK && col_cuda_alloc(&gpu, 256, &de, &err) == COL_OK &&
              col_cuda_alloc(&gpu, 64, &dt, &err) == COL_OK && col_cuda_alloc(&gpu, 128, &dl, &err) == COL_OK &&
              col_cuda_alloc(&gpu, 256, &dce, &err) == COL_OK && col_cuda_alloc(&gpu, 64, &ddy, &err) == COL_OK &&
              col_cuda_alloc(&gpu, 64, &deb, &err) == COL_OK && col_cuda_alloc(&gpu, sizeof hcache, &dcache, &err) == COL_OK &&
              col_cuda_alloc(&gpu, sizeof hnew, &dnew, &err) == COL_OK && col_cuda_alloc(&gpu, 8, &dstart, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dw, hw, sizeof hw, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dids, hid, sizeof hid, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dt, ht, sizeof ht, &err) == COL_OK &&
              col_cuda_memset(&gpu, dl, 0, 128, &err) == COL_OK && col_cuda_memset(&gpu, ddy, 0, 64, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dcache, hcache, sizeof hcache, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dnew, hnew, sizeof hnew, &err) == COL_OK &&
              col_cuda_to_device(&gpu, dstart, &hstart, sizeof hstart, &err) == COL_OK;
    TL_OK(ok, "error-case setup %s", err.msg);
    if (ok) {
        col_exec ex = {.be = &gpu};
        e->src[0]->t.data = dw, e->src[1]->t.data = dids, e->t.data = de;
        col_node *lgv = ce->src[0], *tv = ce->src[1]; /* contiguous already: the leaves themselves */
        lgv->t.data = dl, tv->t.data = dt, ce->t.data = dce;
        eb->src[1]->t.data = ddy, eb->t.data = deb;
        kv->src[0]->t.data = dcache, kv->src[1]->t.data = dnew, kv->src[2]->t.data = dstart, kv->t.data = dcache;
        col_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};

        st = gpu.kernel[COL_OP_EMBEDDING](e, &ex, &e1);
        TL_OK(st == COL_OK, "embedding: a bad id is queued: %s", e1.msg);
        st = col_cuda_sync(&gpu, &e1);
        TL_OK(st == COL_EINVAL && strstr(e1.msg, "embedding: token id 5 at position 2 is outside the vocabulary (0..4)"),
              "embedding: bad id is COL_EINVAL at the sync: %s", e1.msg);
        float back[12] = {0};
        col_err_clear(&e1);
        st = col_cuda_to_host(&gpu, back, de, sizeof back, &e1);
        bool rows_ok = st == COL_OK;
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                rows_ok = rows_ok && back[r * 3 + c] == (r == 2 ? 0.0f : hw[hid[r] * 3 + c]);
        TL_OK(rows_ok, "embedding: the good rows are gathered, the bad one is zeros (and the copy is clean) %s", e1.msg);

        /* two bad calls before one synchronisation: the first is reported; a copy to the host reports too */
        st = gpu.kernel[COL_OP_CROSS_ENTROPY](ce, &ex, &e2);
        if (st == COL_OK)
            st = gpu.kernel[COL_OP_EMBEDDING_BWD](eb, &ex, &e2);
        TL_OK(st == COL_OK, "cross_entropy, embedding_bwd: bad input is queued: %s", e2.msg);
        float loss = 0.0f;
        st = col_cuda_to_host(&gpu, &loss, dce, sizeof loss, &e2);
        TL_OK(st == COL_EINVAL &&
                  strstr(e2.msg, "cross_entropy: target 9 at row 2 is outside the classes (0..4) and is not ignore_index (-1)"),
              "cross_entropy: bad target is COL_EINVAL at a copy to the host: %s", e2.msg);
        TL_OK(loss == logf(5.0f) || fabsf(loss - logf(5.0f)) < 1e-6f,
              "cross_entropy: the bad row adds nothing: loss %g, ln 5 over the good rows", (double)loss);
        col_err_clear(&e2);
        TL_OK(col_cuda_sync(&gpu, &e2) == COL_OK, "the next sync is clean: %s", e2.msg);
        /* token_logprob, the same targets: rows 0 and 3 ln(1/5) (zero logits), the ignored and the bad row 0 */
        tl->t.data = dtl;
        st = gpu.kernel[COL_OP_TOKEN_LOGPROB](tl, &ex, &e2);
        TL_OK(st == COL_OK, "token_logprob: a bad target is queued: %s", e2.msg);
        float lp[4] = {1, 1, 1, 1};
        st = col_cuda_to_host(&gpu, lp, dtl, sizeof lp, &e2);
        TL_OK(st == COL_EINVAL &&
                  strstr(e2.msg, "token_logprob: target 9 at row 2 is outside the classes (0..4) and is not ignore_index (-1)"),
              "token_logprob: bad target is COL_EINVAL at a copy to the host: %s", e2.msg);
        TL_OK(fabsf(lp[0] + logf(5.0f)) < 1e-6f && lp[1] == 0.0f && lp[2] == 0.0f && fabsf(lp[3] + logf(5.0f)) < 1e-6f,
              "token_logprob: -ln 5, 0 (ignored), 0 (the bad row), -ln 5: %g %g %g %g", (double)lp[0], (double)lp[1],
              (double)lp[2], (double)lp[3]);
        col_err_clear(&e2);
        TL_OK(col_cuda_sync(&gpu, &e2) == COL_OK, "the next sync is clean: %s", e2.msg);
        st = gpu.kernel[COL_OP_EMBEDDING_BWD](eb, &ex, &e2);
        if (st == COL_OK)
            st = col_cuda_sync(&gpu, &e2);
        TL_OK(st == COL_EINVAL && strstr(e2.msg, "embedding_bwd: token id 5 at position 2 is outside the vocabulary"),
              "embedding_bwd: bad id is COL_EINVAL at the sync: %s", e2.msg);

        /* kv_write at 5 + 2 tokens over a cache of 6: nothing written */
        st = gpu.kernel[COL_OP_KV_WRITE](kv, &ex, &e3);
        TL_OK(st == COL_OK, "kv_write: a bad position is queued: %s", e3.msg);
        st = col_cuda_sync(&gpu, &e3);
        TL_OK(st == COL_EINVAL && strstr(e3.msg, "kv_write: position 5 + 2 tokens exceeds the cache of 6"),
              "kv_write: bad position is COL_EINVAL at the sync: %s", e3.msg);
        float cb[12];
        col_err_clear(&e3);
        TL_OK(col_cuda_to_host(&gpu, cb, dcache, sizeof cb, &e3) == COL_OK && memcmp(cb, hcache, sizeof cb) == 0,
              "kv_write: the cache is untouched %s", e3.msg);
        hstart = 4; /* and a good one writes */
        st = col_cuda_to_device(&gpu, dstart, &hstart, sizeof hstart, &e3);
        if (st == COL_OK)
            st = gpu.kernel[COL_OP_KV_WRITE](kv, &ex, &e3);
        if (st == COL_OK)
            st = col_cuda_to_host(&gpu, cb, dcache, sizeof cb, &e3);
        TL_OK(st == COL_OK && memcmp(cb, hcache, 8 * sizeof(float)) == 0 && memcmp(cb + 8, hnew, sizeof hnew) == 0,
              "kv_write at 4 + 2 fills the last two positions: %s", e3.msg);

        /* a full ring of check slots: the call that finds none free reports the earlier bad input */
        hstart = 5;
        st = col_cuda_to_device(&gpu, dstart, &hstart, sizeof hstart, &e4);
        if (st == COL_OK)
            st = gpu.kernel[COL_OP_KV_WRITE](kv, &ex, &e4);
        int calls = 1;
        for (; st == COL_OK && calls < 10000; calls++)
            st = gpu.kernel[COL_OP_EMBEDDING](e, &ex, &e4);
        TL_OK(st == COL_EINVAL && calls > 8 && calls < 10000 && strstr(e4.msg, "kv_write: position 5 + 2"),
              "with the check slots full, call %d reports the first bad input: %s", calls, e4.msg);
        col_err_clear(&e4); /* that call queued nothing; what the ring held was read */
        TL_OK(col_cuda_sync(&gpu, &e4) == COL_OK, "then the sync is clean: %s", e4.msg);
        st = gpu.kernel[COL_OP_EMBEDDING](e, &ex, &e4);
        if (st == COL_OK)
            st = col_cuda_sync(&gpu, &e4);
        TL_OK(st == COL_EINVAL && strstr(e4.msg, "embedding: token id 5"), "and the slots work again: %s", e4.msg);
    }
    col_cuda_free(&gpu, dw), col_cuda_free(&gpu, dids), col_cuda_free(&gpu, de);
    col_cuda_free(&gpu, dt), col_cuda_free(&gpu, dl), col_cuda_free(&gpu, dce);
    col_cuda_free(&gpu, ddy), col_cuda_free(&gpu, deb), col_cuda_free(&gpu, dcache);
    col_cuda_free(&gpu, dnew), col_cuda_free(&gpu, dstart), col_cuda_free(&gpu, dtl);
    col_graph_free(g);
}

static col_node *u_exp(col_graph *g, col_node *x) { return col_exp(g, x); }
static col_node *u_log(col_graph *g, col_node *x) { return col_log(g, x); }
static col_node *u_tanh(col_graph *g, col_node *x) { return col_tanh(g, x); }
static col_node *u_sigmoid(col_graph *g, col_node *x) { return col_sigmoid(g, x); }
static col_node *u_relu(col_graph *g, col_node *x) { return col_relu(g, x); }
static col_node *u_gelu(col_graph *g, col_node *x) { return col_gelu(g, x); }
static col_node *u_gelu_tanh(col_graph *g, col_node *x) { return col_gelu_tanh(g, x); }
static col_node *u_silu(col_graph *g, col_node *x) { return col_silu(g, x); }

int main(void)
{
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    tl_cpu_backend(&cpu);
    col_rng_init(&rng, 20240606);
    TL_NOTE("device: %s", col_cuda_backend_device_name(&gpu));

    case_copy_cast();
    for (int v = 0; v < 3; v++)
        case_binary(v);
    case_unary("exp", u_exp, R_NORMAL, false);
    case_unary("log", u_log, R_POSITIVE, true);
    case_unary("tanh", u_tanh, R_NORMAL, true);
    case_unary("sigmoid", u_sigmoid, R_NORMAL, false);
    case_unary("relu", u_relu, R_NORMAL, true);
    case_unary("gelu", u_gelu, R_NORMAL, false);
    case_unary("gelu_tanh", u_gelu_tanh, R_NORMAL, true);
    case_unary("silu", u_silu, R_NORMAL, false);
    case_swiglu();
    case_dropout();
    case_dropout_off();
    case_reduce();
    case_reduce_long();
    case_softmax(0, false);
    case_softmax(1, false);
    case_softmax(1, true);
    case_norm(false, true, true, 6, 33);
    case_norm(false, false, true, 5, 3000);
    case_norm(false, false, false, 129, 64);
    case_norm(true, true, false, 6, 33);
    case_norm(true, true, false, 300, 515);
    case_matmul(false);
    case_matmul(true);
    case_matmul_cache();
    case_embedding(COL_I32, 11, 7, 3, 5);
    case_embedding(COL_I64, 11, 7, 3, 5);
    case_embedding(COL_I32, 37, 130, 3, 1100); /* 3300 rows: 4096 keys, two sort blocks and a merge */
    case_embedding(COL_I64, 1, 20, 2, 40);     /* one id: a run of 80 rows, 5 x the rows read at once */
    case_mixed(COL_BF16);
    case_mixed(COL_F16);
    case_cross_entropy(COL_I64, 9, 13);
    case_cross_entropy(COL_I32, 5, 3001);
    case_cross_entropy(COL_I64, 2500, 7); /* the loss in two passes: 2 parts */
    case_token_logprob(COL_I64, 2, 5, 13);
    case_token_logprob(COL_I32, 1, 5, 3001);
    case_token_logprob(COL_I64, 3, 900, 7); /* more rows than the grid's blocks */
    case_data_movement();
    case_rope(2, 3, 17, 64, 0, false, false, 10000.0f, false, 4096);
    case_rope(2, 4, 9, 128, 64, true, true, 500000.0f, true, 131072);
    case_rope(1, 2, 33, 80, 32, false, true, 10000.0f, false, 2048);
    case_attention(2, 4, 1, 77, 77, 32, 1, false);      /* GQA 4:1, T not a multiple of the tiles */
    case_attention(1, 8, 2, 37, 100, 64, 1, true);      /* S != T (queries at the end), strided views */
    case_attention(1, 2, 2, 50, 130, 128, 0, false);    /* not causal, S != T */
    case_attention(2, 2, 1, 70, 45, 80, 0, true);       /* T > S (not causal), head dim 80 padded to 128 */
    case_attention(1, 4, 1, 1, 200, 64, 1, false);      /* one query (decode step) */
    case_attention(1, 4, 1, 1024, 1024, 64, 1, false);  /* long: many tiles, most skipped by the causal mask */
    case_attention(1, 2, 1, 300, 300, 128, 0, true);    /* long, not causal, head dim 128 */
    case_attention_cached(1, 4, 2, 3, 40, 32, 5);
    case_attention_cached(2, 2, 1, 1, 70, 64, 66);
    case_attention_errors();
    case_errors();

    col_cuda_backend_free(&gpu);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
