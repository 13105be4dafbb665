/* test_quant.c - the block-quantized dtypes (tensor.h, quant.h): sizes, quantizing and dequantizing
 * rows against gguf-py's bytes and values (tests/fixtures/quant, tools/refgen/make_quant_fixtures.py),
 * the error of a round trip for the K types (gguf-py has no quantizer for them); x @ W^T with W
 * quantized against the same product in double (M = 1 .. 64, N = 37: not a multiple of any split),
 * the same bits on 1 and 3 threads, a view of W's rows, embedding rows, and what the graph refuses.
 * The host's kernels round x to 8 bits for up to COL_QMV_ROWS rows (cpu_quant.c): there the reference
 * is the product of the same rounded x, and the distance to the exact product is checked against what
 * the rounding allows (sum |w| step/2 a row).
 *
 * Built with QUANT_TEST_CUDA (test_quant_emu: the CUDA emulator; test_quant_cuda: a GPU, skipped without
 * one) the products and embeddings run on the CUDA backend, which does not round x: every product is
 * checked against the exact one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#ifdef QUANT_TEST_CUDA
/* cudart reserves address space that ASan's shadow gap would block, and the CUDA driver keeps
 * allocations until exit (for sanitizer builds) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcuda.so\nleak:libcudart.so\nleak:libcublas\n"; }
#endif

#include "graph.h"
#include "plan.h"
#include "quant.h"
#include "tensor.h"
#include "testlib.h"
#ifdef QUANT_TEST_CUDA
#include "cuda_testutil.h"
#endif

/* two f32 arrays equal bit for bit (any NaN equals any NaN: the payload is the FPU's) */
static int64_t first_bit_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        if (ua != ub && !(isnan(a[i]) && isnan(b[i])))
            return i;
    }
    return -1;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float fnormal(void)
{
    float s = 0;
    for (int i = 0; i < 12; i++)
        s += frand();
    return s * 0.5f;
}

#ifndef QUANT_TEST_CUDA /* the host's own checks */

/* ---- the fixture file ---- */

typedef struct {
    col_dtype dt;
    int64_t rows, cols;
    bool has_x;
    float *x, *dq;
    uint8_t *q;
} qcase;

static col_dtype dtype_of_ggml(uint32_t t)
{
    switch (t) {
    case 8: return COL_Q8_0;
    case 2: return COL_Q4_0;
    case 12: return COL_Q4_K;
    case 14: return COL_Q6_K;
    default: return COL_DTYPE_COUNT;
    }
}

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

/* the cases of quant.bin, or 0 (with a failed check) */
static int load_cases(qcase *cs, int max)
{
    FILE *f = fopen(FIXTURES "/quant.bin", "rb");
    TL_OK(f != NULL, "open %s", FIXTURES "/quant.bin");
    if (!f)
        return 0;
    char magic[8];
    uint32_t hdr[2];
    int n = 0;
    if (read_exact(f, magic, 8) && !memcmp(magic, "COLQUANT", 8) && read_exact(f, hdr, sizeof hdr) && hdr[0] == 1 &&
        hdr[1] <= (uint32_t)max) {
        for (uint32_t i = 0; i < hdr[1]; i++) {
            uint32_t h[4];
            if (!read_exact(f, h, sizeof h))
                break;
            qcase *c = &cs[n];
            c->dt = dtype_of_ggml(h[0]);
            c->rows = h[1], c->cols = h[2], c->has_x = h[3] != 0;
            size_t rb = col_dtype_row_bytes(c->dt, c->cols), nv = (size_t)(c->rows * c->cols);
            if (c->dt == COL_DTYPE_COUNT || rb == 0 || c->rows <= 0 || c->rows > 64)
                break;
            c->x = malloc(nv * 4), c->dq = malloc(nv * 4), c->q = malloc(rb * (size_t)c->rows);
            if (!read_exact(f, c->x, nv * 4) || !read_exact(f, c->q, rb * (size_t)c->rows) || !read_exact(f, c->dq, nv * 4))
                break;
            n++;
        }
        TL_OK(n == (int)hdr[1], "quant.bin: %d of %u cases read", n, hdr[1]);
    } else {
        TL_OK(false, "quant.bin: header");
    }
    fclose(f);
    return n;
}

static void free_cases(qcase *cs, int n)
{
    for (int i = 0; i < n; i++)
        free(cs[i].x), free(cs[i].dq), free(cs[i].q);
}

/* ---- sizes ---- */

static void test_sizes(void)
{
    TL_OK(col_dtype_block(COL_Q8_0) == 32 && col_dtype_block_bytes(COL_Q8_0) == 34 && col_dtype_block(COL_Q4_0) == 32 &&
              col_dtype_block_bytes(COL_Q4_0) == 18 && col_dtype_block(COL_Q4_K) == 256 &&
              col_dtype_block_bytes(COL_Q4_K) == 144 && col_dtype_block(COL_Q6_K) == 256 &&
              col_dtype_block_bytes(COL_Q6_K) == 210,
          "blocks: q8_0 32/34, q4_0 32/18, q4_K 256/144, q6_K 256/210 (ggml's)");
    TL_OK(col_dtype_block(COL_F32) == 1 && col_dtype_block_bytes(COL_BF16) == 2 && col_dtype_row_bytes(COL_F16, 7) == 14 &&
              col_dtype_row_bytes(COL_I64, 3) == 24,
          "plain dtypes: block 1 of their element size");
    TL_OK(col_dtype_row_bytes(COL_Q4_0, 4096) == 128 * 18 && col_dtype_row_bytes(COL_Q6_K, 512) == 420 &&
              col_dtype_row_bytes(COL_Q8_0, 33) == 0 && col_dtype_row_bytes(COL_Q4_K, -256) == 0 &&
              col_dtype_row_bytes(COL_DTYPE_COUNT, 32) == 0,
          "row bytes: whole blocks; 0 for a partial block, a negative count, an unknown dtype");
    TL_OK(col_dtype_size(COL_Q8_0) == 0 && col_dtype_is_quant(COL_Q4_K) && !col_dtype_is_quant(COL_F16) &&
              !col_dtype_is_float(COL_Q8_0) && !strcmp(col_dtype_name(COL_Q4_K), "q4_K") &&
              !strcmp(col_dtype_name(COL_Q6_K), "q6_K"),
          "quantized dtypes: no element size, not float, named as ggml names them");
    col_tensor t = {.dtype = COL_Q4_0, .ndim = 2, .shape = {3, 64}};
    TL_OK(col_tensor_bytes(&t) == 3 * 2 * 18, "col_tensor_bytes of a [3,64] q4_0 tensor: 108");
    float x[32];
    uint8_t out[64];
    TL_OK(!col_quantize_row(COL_F32, x, 32, out) && !col_quantize_row(COL_Q8_0, x, 31, out) &&
              !col_dequantize_row(COL_Q4_0, out, 16, x) && !col_dequantize_row(COL_BF16, out, 32, x),
          "quantize/dequantize refuse a plain dtype and a partial block");
}

/* ---- against gguf-py ---- */

static void test_fixtures(void)
{
    qcase cs[16];
    int n = load_cases(cs, 16);
    for (int i = 0; i < n; i++) {
        qcase *c = &cs[i];
        size_t rb = col_dtype_row_bytes(c->dt, c->cols);
        int64_t nv = c->rows * c->cols;
        const char *name = col_dtype_name(c->dt);
        float *dq = malloc((size_t)nv * 4);
        bool ok = true;
        for (int64_t r = 0; r < c->rows; r++)
            ok = ok && col_dequantize_row(c->dt, c->q + r * (int64_t)rb, c->cols, dq + r * c->cols);
        int64_t bad = first_bit_diff(dq, c->dq, nv);
        TL_OK(ok && bad < 0, "%s [%lld,%lld]: dequantized as gguf-py, bit for bit (first difference at %lld)", name,
              (long long)c->rows, (long long)c->cols, (long long)bad);
        bool same_value = true;
        for (int64_t j = 0; j < nv && same_value; j += 7) {
            float v = col_quant_value(c->dt, c->q + (j / c->cols) * (int64_t)rb, j % c->cols);
            same_value = first_bit_diff(&v, &dq[j], 1) < 0;
        }
        TL_OK(same_value, "%s: col_quant_value gives the dequantized values", name);
        if (c->has_x) {
            uint8_t *q = malloc(rb * (size_t)c->rows);
            for (int64_t r = 0; r < c->rows; r++)
                col_quantize_row(c->dt, c->x + r * c->cols, c->cols, q + r * (int64_t)rb);
            int64_t at = -1;
            for (size_t k = 0; k < rb * (size_t)c->rows && at < 0; k++)
                if (q[k] != c->q[k])
                    at = (int64_t)k;
            TL_OK(at < 0, "%s [%lld,%lld] (edge cases: zeros, f16 overflow and underflow, negative max, ties): "
                          "quantized as gguf-py, byte for byte (first difference at byte %lld)",
                  name, (long long)c->rows, (long long)c->cols, (long long)at);
            free(q);
        }
        free(dq);
    }
    free_cases(cs, n);
}

/* ---- K types: the round trip ---- */

/* rms error / rms of quantizing n values of weight-like data and back */
static double round_trip(col_dtype dt, const float *x, int64_t n)
{
    uint8_t *q = malloc(col_dtype_row_bytes(dt, n));
    float *y = malloc((size_t)n * 4);
    col_quantize_row(dt, x, n, q);
    col_dequantize_row(dt, q, n, y);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++)
        e += (double)(y[i] - x[i]) * (y[i] - x[i]), s += (double)x[i] * x[i];
    free(q), free(y);
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void test_round_trip(void)
{
    enum { N = 4096 };
    float *x = malloc(N * 4), *z = calloc(512, 4);
    for (int i = 0; i < N; i++)
        x[i] = fnormal() * 0.02f;
    /* the relative rms error on normal data is about a level / sqrt(12) over the block's largest value
     * (~2 sigma): q8_0 (127 levels a side) ~0.5%, q6_K (32 a side, 16 values a scale) ~2%, the 4-bit
     * types ~7-9% */
    double e8 = round_trip(COL_Q8_0, x, N), e40 = round_trip(COL_Q4_0, x, N), e4k = round_trip(COL_Q4_K, x, N),
           e6k = round_trip(COL_Q6_K, x, N);
    TL_NOTE("relative rms error of a round trip: q8_0 %.4f q4_0 %.4f q4_K %.4f q6_K %.4f", e8, e40, e4k, e6k);
    TL_OK(e8 < 0.006 && e6k < 0.02 && e4k < 0.1 && e40 < 0.12 && e6k < e4k && e4k < e40 && e8 < e6k,
          "round trip errors in the expected ranges and order (q8_0 < q6_K < q4_K < q4_0)");
    TL_OK(round_trip(COL_Q4_K, z, 512) == 0 && round_trip(COL_Q6_K, z, 512) == 0, "K types: zeros come back as zeros");
    /* q4_K's min (x = d sc q - dmin m, the min never above 0): values in [-1.1, -0.9] take 15 levels over
     * their own range of 0.2 (a level / sqrt(12) ~ 0.4%); values in [0.9, 1.1] take them over [0, 1.1] */
    for (int i = 0; i < 512; i++)
        z[i] = -1.0f + 0.1f * frand();
    double e4s = round_trip(COL_Q4_K, z, 512);
    TL_OK(e4s < 0.006, "q4_K: values in [-1.1, -0.9] use the min (relative rms error %.5f)", e4s);
    free(x), free(z);
}

#endif

/* ---- matmul and embedding through a plan ---- */

static const col_dtype QTYPES[4] = {COL_Q8_0, COL_Q4_0, COL_Q4_K, COL_Q6_K};

static void fill_normal(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = fnormal() * scale;
}

/* W [N, K] quantized (rows of n values each), and its dequantized f32 copy */
static uint8_t *make_weight(col_dtype dt, int64_t N, int64_t K, float **wf)
{
    size_t rb = col_dtype_row_bytes(dt, K);
    float *w = malloc((size_t)(N * K) * 4);
    uint8_t *q = malloc(rb * (size_t)N + 1);
    fill_normal(w, N * K, 0.05f);
    for (int64_t n = 0; n < N; n++) {
        col_quantize_row(dt, w + n * K, K, q + n * (int64_t)rb);
        col_dequantize_row(dt, q + n * (int64_t)rb, K, w + n * K);
    }
    *wf = w;
    return q;
}

/* y [M, N] = x @ W^T through a plan on be: W a quantized input leaf, x an f32 input (3-D [2, M/2, K]
 * when M is even and batched: the builder's reshape) */
static col_status run_matmul(const col_backend *be, col_dtype dt, const float *x, const uint8_t *wq, int64_t M, int64_t K,
                             int64_t N, bool batched, float *y, col_err *err)
{
    col_graph *g = col_graph_new();
    int64_t sx3[3] = {2, M / 2, K}, sx[2] = {M, K}, sw[2] = {N, K};
    col_node *xn = batched ? col_input(g, "x", COL_F32, 3, sx3) : col_input(g, "x", COL_F32, 2, sx);
    col_node *wn = col_input(g, "w", dt, 2, sw);
    col_node *out = col_matmul(g, xn, col_transpose(g, wn, 0, 1));
    col_mark_output(out);
    col_plan *p = NULL;
    col_status st = col_graph_status(g);
    if (st != COL_OK)
        col_err_copy(err, col_graph_error(g));
    if (st == COL_OK) /* the leaves in the plan's arena (the device's memory on a GPU), uploaded */
        st = col_plan_create_on(g, be, &p, err);
    if (st == COL_OK)
        st = col_plan_upload(p, xn, x, (size_t)(M * K) * 4, err);
    if (st == COL_OK)
        st = col_plan_upload(p, wn, wq, col_dtype_row_bytes(dt, K) * (size_t)N, err);
    if (st == COL_OK)
        st = col_plan_run(p, be, err);
    if (st == COL_OK)
        st = col_plan_download(p, out, y, (size_t)(M * N) * 4, err);
    col_plan_free(p);
    col_graph_free(g);
    return st;
}

/* the rows of x as the decoding kernels use them: blocks of 32 rounded to 8 bits with an f32 scale
 * (ggml's q8_0 without rounding the scale to f16); *half_step[k] = half the block's step */
static void x_as_q8(const float *x, int64_t n, float *xq, float *half_step)
{
    for (int64_t b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) {
            xq[32 * b + j] = d * roundf(v[j] * id);
            half_step[32 * b + j] = d / 2;
        }
    }
}

typedef struct {
    double err_ref;   /* max |y - ref| / sum |w x| (ref: the same x the kernel multiplies, in double) */
    double err_exact; /* max |y - (W x in double)| / sum |w x| */
    bool in_bound;    /* every |y - W x| <= the rounding of x allows (sum |w| d/2) + 1e-5 sum |w x| */
} mm_err;

static mm_err compare(const float *y, const float *x, const float *wf, int64_t M, int64_t K, int64_t N, bool q8x)
{
    mm_err e = {0, 0, true};
    float *xq = malloc((size_t)K * 4), *hs = malloc((size_t)K * 4);
    for (int64_t m = 0; m < M; m++) {
        if (q8x)
            x_as_q8(x + m * K, K, xq, hs);
        else
            memcpy(xq, x + m * K, (size_t)K * 4), memset(hs, 0, (size_t)K * 4);
        for (int64_t n = 0; n < N; n++) {
            double r = 0, ex = 0, mag = 0, bound = 0;
            for (int64_t k = 0; k < K; k++) {
                double w = wf[n * K + k];
                r += w * xq[k], ex += w * x[m * K + k], mag += fabs(w * x[m * K + k]), bound += fabs(w) * hs[k];
            }
            mag = mag > 0 ? mag : 1;
            double got = y[m * N + n], er = fabs(got - r) / mag, ee = fabs(got - ex) / mag;
            e.err_ref = er > e.err_ref ? er : e.err_ref;
            e.err_exact = ee > e.err_exact ? ee : e.err_exact;
            if (fabs(got - ex) > bound + 1e-5 * mag)
                e.in_bound = false;
        }
    }
    free(xq), free(hs);
    return e;
}

/* q8_rows: the most rows of x the backend rounds to 8 bits (0: none) */
static void test_matmul(const col_backend *be, const char *bname, int64_t q8_rows)
{
    static const int64_t Ms[] = {1, 3, 8, 17, 33, 64};
    for (int t = 0; t < 4; t++) {
        col_dtype dt = QTYPES[t];
        int64_t K = col_dtype_block(dt) == 32 ? 160 : 768, N = 37; /* odd block counts: 5, 3 */
        float *wf;
        uint8_t *wq = make_weight(dt, N, K, &wf);
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++) {
            int64_t M = Ms[i];
            float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4), *y1 = malloc((size_t)(M * N) * 4);
            fill_normal(x, M * K, 1.0f);
            x[0] = 30.0f; /* an outlier: its block's step is coarse */
            col_err err = {COL_OK};
            bool batched = M % 2 == 0;
            omp_set_num_threads(3);
            col_status st = run_matmul(be, dt, x, wq, M, K, N, batched, y, &err);
            omp_set_num_threads(1);
            col_status st1 = run_matmul(be, dt, x, wq, M, K, N, batched, y1, &err);
            omp_set_num_threads(omp_get_num_procs());
            bool q8x = M <= q8_rows;
            mm_err e = compare(y, x, wf, M, K, N, q8x);
            TL_OK(st == COL_OK && st1 == COL_OK && e.err_ref < 1e-5 && e.in_bound,
                  "%s: x [%lld,%lld]%s @ W^T, W [%lld,%lld] %s: against the same product in double%s: %.2e; against exact "
                  "x %.2e, within the rounding of x: %s (%s)",
                  bname, (long long)M, (long long)K, batched ? " as [2,M/2,K]" : "", (long long)N, (long long)K,
                  col_dtype_name(dt), q8x ? " of x rounded to 8 bits a block" : "", e.err_ref, e.err_exact,
                  e.in_bound ? "yes" : "no", st == COL_OK && st1 == COL_OK ? "ran" : err.msg);
            TL_OK(st == COL_OK && !memcmp(y, y1, (size_t)(M * N) * 4), "%s: %s M=%lld: 3 threads and 1 give the same bits",
                  bname, col_dtype_name(dt), (long long)M);
            free(x), free(y), free(y1);
        }
        free(wq), free(wf);
    }
}

#ifndef QUANT_TEST_CUDA /* the host kernels' promise (the CUDA kernels make none) */
/* Row m of an M-row product has the bits of row m multiplied alone, for every M up to max_rows: what lets a
 * server decode many sequences in one product and give each the numbers it gets alone (tests/test_lm_batch
 * checks it through whole models). K spans several blocks of each kind, odd counts included. */
static void test_rows_alone(const col_backend *be, const char *bname, int64_t max_rows)
{
    for (int t = 0; t < 4; t++) {
        col_dtype dt = QTYPES[t];
        int64_t K = col_dtype_block(dt) == 32 ? 32 * 13 : 256 * 3, N = 21;
        float *wf;
        uint8_t *wq = make_weight(dt, N, K, &wf);
        float *x = malloc((size_t)(max_rows * K) * 4), *alone = malloc((size_t)(max_rows * N) * 4),
              *y = malloc((size_t)(max_rows * N) * 4);
        fill_normal(x, max_rows * K, 1.0f);
        col_err err = {COL_OK};
        col_status st = COL_OK;
        for (int64_t m = 0; m < max_rows && st == COL_OK; m++)
            st = run_matmul(be, dt, x + m * K, wq, 1, K, N, false, alone + m * N, &err);
        int64_t worst = -1;
        for (int64_t M = 2; M <= max_rows && st == COL_OK; M++) {
            st = run_matmul(be, dt, x, wq, M, K, N, false, y, &err);
            if (st == COL_OK && memcmp(y, alone, (size_t)(M * N) * 4) && worst < 0)
                worst = M;
        }
        char where[48] = "";
        if (worst >= 0)
            snprintf(where, sizeof where, "; first differs at M = %lld", (long long)worst);
        TL_OK(st == COL_OK && worst < 0,
              "%s: %s: every row of an M-row product (M = 2..%lld) has the bits of that row alone%s (%s)", bname,
              col_dtype_name(dt), (long long)max_rows, where, st == COL_OK ? "ran" : err.msg);
        free(x), free(alone), free(y), free(wq), free(wf);
    }
}
#endif

/* a slice of W's rows (a view that starts at a whole row), and an embedding of W's rows */
static void test_views_embedding(const col_backend *be, bool q8x)
{
    for (int t = 0; t < 4; t++) {
        col_dtype dt = QTYPES[t];
        int64_t K = col_dtype_block(dt) * 2, N = 24, M = 2;
        float *wf, x[2 * 512], y[2 * 24], emb[5 * 512];
        uint8_t *wq = make_weight(dt, N, K, &wf);
        fill_normal(x, M * K, 1.0f);
        col_graph *g = col_graph_new();
        int64_t sx[2] = {M, K}, sw[2] = {N, K}, sid[2] = {1, 5};
        int32_t ids[5] = {3, 0, 23, 3, 11};
        col_node *xn = col_input(g, "x", COL_F32, 2, sx), *wn = col_input(g, "w", dt, 2, sw);
        col_node *idn = col_input(g, "ids", COL_I32, 2, sid);
        col_node *ws = col_slice(g, wn, 0, 5, 10); /* rows 5..14 */
        col_node *yn = col_matmul(g, xn, col_transpose(g, ws, 0, 1)), *en = col_embedding(g, wn, idn);
        col_mark_output(yn), col_mark_output(en);
        col_plan *p = NULL;
        col_err err = {COL_OK};
        col_status st = col_graph_status(g) == COL_OK ? col_plan_create_on(g, be, &p, &err) : col_graph_status(g);
        if (st == COL_OK)
            st = col_plan_upload(p, xn, x, sizeof(float) * (size_t)(M * K), &err);
        if (st == COL_OK)
            st = col_plan_upload(p, wn, wq, col_dtype_row_bytes(dt, K) * (size_t)N, &err);
        if (st == COL_OK)
            st = col_plan_upload(p, idn, ids, sizeof ids, &err);
        if (st == COL_OK)
            st = col_plan_run(p, be, &err);
        if (st == COL_OK)
            st = col_plan_download(p, yn, y, sizeof(float) * (size_t)(M * 10), &err);
        if (st == COL_OK)
            st = col_plan_download(p, en, emb, sizeof(float) * (size_t)(5 * K), &err);
        mm_err e = compare(y, x, wf + 5 * K, M, K, 10, q8x);
        TL_OK(st == COL_OK && e.err_ref < 1e-5 && yn->t.shape[1] == 10, "%s: x @ W[5:15]^T (a view of whole rows): %.2e",
              col_dtype_name(dt), e.err_ref);
        bool same = st == COL_OK;
        for (int r = 0; r < 5 && same; r++)
            same = first_bit_diff(emb + r * K, wf + ids[r] * K, K) < 0;
        TL_OK(same, "%s: embedding rows are the dequantized rows, bit for bit", col_dtype_name(dt));
        col_plan_free(p);
        col_graph_free(g);
        free(wq), free(wf);
    }
}

#ifndef QUANT_TEST_CUDA
/* what the graph refuses, with a message that says why */
static bool refused(col_graph *g, col_node *n, col_status code, const char *word)
{
    const col_err *e = col_graph_error(g);
    bool ok = n == NULL && e->code == code && strstr(e->msg, word) != NULL;
    if (!ok)
        TL_NOTE("got status %d: %s", (int)e->code, e->msg);
    col_graph_free(g);
    return ok;
}

static void test_refusals(void)
{
    int64_t sw[2] = {8, 64}, sx[2] = {2, 64}, bad[2] = {8, 48}, s4[2] = {8, 8};
    col_graph *g = col_graph_new();
    TL_OK(refused(g, col_input(g, "w", COL_Q4_0, 2, bad), COL_ESHAPE, "multiple of its block of 32"),
          "a q4_0 leaf with K = 48 is refused");
    g = col_graph_new();
    TL_OK(refused(g, col_param(g, "w", COL_Q8_0, 2, sw), COL_EDTYPE, "cannot be trained"), "a q8_0 parameter is refused");
    g = col_graph_new();
    col_node *w = col_input(g, "w", COL_Q4_0, 2, sw), *x = col_input(g, "x", COL_F32, 2, sx);
    TL_OK(refused(g, col_add(g, w, w), COL_EDTYPE, "f32 operands"), "add of quantized tensors is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q4_0, 2, sw);
    TL_OK(refused(g, col_cast(g, w, COL_F32), COL_EDTYPE, "only matmul (x @ W^T) and embedding"),
          "a cast of a quantized weight is refused");
    g = col_graph_new();
    x = col_input(g, "x", COL_F32, 2, sx);
    TL_OK(refused(g, col_cast(g, x, COL_Q8_0), COL_EDTYPE, "cannot compute a q8_0 tensor"), "a cast to q8_0 is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q4_0, 2, sw), x = col_input(g, "x", COL_F32, 2, sx);
    TL_OK(refused(g, col_matmul(g, col_transpose(g, w, 0, 1), col_transpose(g, x, 0, 1)), COL_EDTYPE, "second operand"),
          "matmul with the quantized operand first is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q4_0, 2, sw), x = col_input(g, "x", COL_F32, 2, s4);
    TL_OK(refused(g, col_matmul(g, x, w), COL_ESHAPE, "read only as W^T"), "x @ W (not transposed) is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q4_0, 2, sw), x = col_input(g, "x", COL_BF16, 2, sx);
    TL_OK(refused(g, col_matmul(g, x, col_transpose(g, w, 0, 1)), COL_EDTYPE, "needs an f32 x"),
          "a bf16 x against a quantized W is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q4_0, 2, sw);
    TL_OK(refused(g, col_contiguous(g, col_transpose(g, w, 0, 1)), COL_EDTYPE, "cannot compute a q4_0"),
          "a copy of a quantized view is refused");
    g = col_graph_new();
    w = col_input(g, "w", COL_Q8_0, 2, sw);
    TL_OK(refused(g, col_slice(g, w, 1, 16, 32), COL_ESHAPE, "inside a block"), "a view starting inside a block is refused");
    g = col_graph_new(); /* a gradient to x through a quantized weight */
    col_node *xp = col_param(g, "x", COL_F32, 2, sx);
    w = col_input(g, "w", COL_Q4_0, 2, sw);
    col_node *loss = col_sum(g, col_matmul(g, xp, col_transpose(g, w, 0, 1)), 3, 0);
    col_err err = {COL_OK};
    col_status st = col_graph_backward(g, loss, &err);
    TL_OK(st == COL_EUNSUPPORTED && strstr(err.msg, "quantized"), "backward through x @ W^T with W quantized is refused: %s",
          err.msg);
    col_graph_free(g);
    g = col_graph_new(); /* an input marked for a gradient */
    w = col_input(g, "w", COL_Q8_0, 2, sw);
    w->flags |= COL_NODE_NEEDS_GRAD;
    int64_t one = 3;
    col_node *ids = col_input(g, "ids", COL_I32, 1, &one);
    loss = col_sum(g, col_embedding(g, w, ids), 3, 0);
    err = (col_err){COL_OK};
    st = col_graph_backward(g, loss, &err);
    TL_OK(st == COL_EUNSUPPORTED && strstr(err.msg, "no gradient"), "a gradient into a quantized table is refused: %s",
          err.msg);
    col_graph_free(g);
}

#endif

int main(void)
{
#ifdef QUANT_TEST_CUDA
    col_backend gpu;
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    test_matmul(&gpu, "cuda", 0);
    test_views_embedding(&gpu, false);
    col_cuda_backend_free(&gpu);
#else
    test_sizes();
    test_fixtures();
    test_round_trip();
    col_backend be;
    col_err err = {COL_OK};
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        TL_OK(false, "CPU backend: %s", err.msg);
        return tl_done();
    }
    test_matmul(&be, "cpu", COL_QMV_ROWS);
    test_rows_alone(&be, "cpu", COL_QMV_ROWS);
    test_views_embedding(&be, true);
    test_refusals();
    col_cpu_backend_free(&be);
#endif
    return tl_done();
}
