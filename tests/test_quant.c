/* test_quant.c - the block-quantized dtypes (tensor.h, quant.h): sizes, quantizing and dequantizing
 * rows against gguf-py's bytes and values (tests/fixtures/quant, tools/refgen/make_quant_fixtures.py),
 * the error of a round trip for the K types (gguf-py has no quantizer for them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "tensor.h"
#include "testlib.h"

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

int main(void)
{
    test_sizes();
    test_fixtures();
    test_round_trip();
    return tl_done();
}
