/* bench_quant - the matrix-vector product of decoding (x [1, K] @ W^T, W [N, K]) with W in f32 and
 * quantized (q8_0, q4_0, q4_K, q6_K) through the CPU backend's kernels, against a read-bandwidth
 * ceiling measured in the same run.
 *
 * A configuration is one shape and dtype with enough copies of W (each its own leaf, as a model's
 * layers are) that they take at least 256 MiB together, far beyond the last-level cache: one plan
 * multiplies x by every copy in turn, so each product reads its weight from memory as decoding does.
 * The time of a product is the plan's time over the copies (the plan's own overhead included, as a
 * model pays it). GB/s counts the weight bytes only (x and y are a few KiB): N K 4 for f32,
 * col_dtype_row_bytes(dt, K) N quantized.
 *
 * The ceiling: a parallel read of 256 MiB summed as 64-bit integers (OpenMP, the same threads, vector
 * loads, four streams of memory a thread: read_once), GB/s of bytes read, the better of two reads
 * made before the products of every rep; each rep's ratio is its product's GB/s over its own ceiling, and the figure
 * printed is the median over reps (other programs on a shared machine then fall on both sides of it).
 *
 * Usage: bench_quant [--quick] [reps]   (reps 3..31, default 7; --quick: 2048 x 2048 only, 3 reps) */
#include <omp.h>
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "bench_util.h"
#include "graph.h"
#include "plan.h"
#include "procsetup.h"
#include "tensor.h"

#define SET_BYTES ((size_t)256 << 20)
#define MAX_REPS 31

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / 16777216.0) - 0.5f;
}

/* GB/s of one parallel read of n bytes (a multiple of 64 KiB): each thread sums its pieces of 64 KiB as
 * 64-bit words, four streams of 16 KiB side by side (one core reads memory at about 60% of the rate of
 * four streams with one here; OpenBLAS's sgemv reads four rows of W at a time) */
static double read_once(const uint64_t *a, int64_t n, volatile uint64_t *sink)
{
    enum { PIECE = 1 << 16, STREAM = PIECE / 4 };
    double t0 = bench_now();
    uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
    {
#ifdef __AVX2__
        __m256i s = _mm256_setzero_si256();
#pragma omp for schedule(static)
        for (int64_t pc = 0; pc < n / PIECE; pc++) {
            const char *p = (const char *)a + pc * PIECE;
            for (int off = 0; off < STREAM; off += 64)
                for (int k = 0; k < 4; k++) {
                    const __m256i *l = (const __m256i *)(p + k * STREAM + off);
                    s = _mm256_add_epi64(s, _mm256_add_epi64(_mm256_load_si256(l), _mm256_load_si256(l + 1)));
                }
        }
        uint64_t part[4];
        _mm256_storeu_si256((__m256i *)part, s);
        total += part[0] + part[1] + part[2] + part[3];
#else
#pragma omp for schedule(static)
        for (int64_t pc = 0; pc < n / PIECE; pc++) {
            const uint64_t *p = a + pc * (PIECE / 8);
            for (int off = 0; off < STREAM / 8; off++)
                for (int k = 0; k < 4; k++)
                    total += p[k * (STREAM / 8) + off];
        }
#endif
    }
    double t = bench_now() - t0;
    *sink = total;
    return (double)n / t / 1e9;
}

typedef struct {
    col_graph *g;
    col_plan *p;
    char *w;         /* the copies of W */
    float *x;
    int copies;
    size_t wbytes;   /* bytes of one copy */
} config;

static bool make_config(config *c, col_dtype dt, int64_t N, int64_t K, col_err *err)
{
    memset(c, 0, sizeof *c);
    size_t rb = dt == COL_F32 ? (size_t)K * 4 : col_dtype_row_bytes(dt, K);
    c->wbytes = rb * (size_t)N;
    c->copies = (int)((SET_BYTES + c->wbytes - 1) / c->wbytes);
    c->w = aligned_alloc(64, ((c->wbytes * (size_t)c->copies) + 63) & ~(size_t)63);
    c->x = malloc((size_t)K * 4);
    float *row = malloc((size_t)K * 4);
    if (!c->w || !c->x || !row) {
        free(row);
        col_err_set(err, COL_ENOMEM, "bench: out of memory");
        return false;
    }
    uint64_t s = 1;
    for (int64_t k = 0; k < K; k++)
        c->x[k] = frand(&s);
    for (int64_t r = 0; r < N; r++) { /* one copy made, the others its bytes */
        for (int64_t k = 0; k < K; k++)
            row[k] = frand(&s) * 0.1f;
        char *dst = c->w + (size_t)r * rb;
        if (dt == COL_F32)
            memcpy(dst, row, rb);
        else
            col_quantize_row(dt, row, K, dst);
    }
    free(row);
    for (int l = 1; l < c->copies; l++)
        memcpy(c->w + (size_t)l * c->wbytes, c->w, c->wbytes);
    c->g = col_graph_new();
    int64_t sx[2] = {1, K}, sw[2] = {N, K};
    col_node *x = col_input(c->g, "x", COL_F32, 2, sx);
    col_bind(x, c->x, NULL);
    for (int l = 0; l < c->copies; l++) {
        col_node *w = col_input(c->g, "w", dt, 2, sw);
        col_bind(w, c->w + (size_t)l * c->wbytes, NULL);
        col_mark_output(col_matmul(c->g, x, col_transpose(c->g, w, 0, 1)));
    }
    if (col_graph_status(c->g) != COL_OK) {
        col_err_copy(err, col_graph_error(c->g));
        return false;
    }
    return col_plan_create(c->g, &c->p, err) == COL_OK;
}

static void free_config(config *c)
{
    col_plan_free(c->p);
    col_graph_free(c->g);
    free(c->w);
    free(c->x);
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    int reps = quick ? 3 : 7;
    if (argc > 1 + quick)
        reps = atoi(argv[1 + quick]);
    if (reps < 3 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_quant [--quick] [reps 3..31]\n");
        return 2;
    }
    col_backend be;
    col_err err = {COL_OK};
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        fprintf(stderr, "bench_quant: %s\n", err.msg);
        return 1;
    }
    int64_t shapes[3][2] = {{2048, 2048}, {5632, 2048}, {8192, 2048}};
    col_dtype dts[5] = {COL_F32, COL_Q8_0, COL_Q4_0, COL_Q4_K, COL_Q6_K};
    int nshapes = quick ? 1 : 3, maxt = omp_get_num_procs() < 2 ? 1 : 2;
    int64_t nread = (int64_t)SET_BYTES;
    uint64_t *rd = aligned_alloc(64, SET_BYTES);
    for (int64_t i = 0; i < nread / 8; i++)
        rd[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    volatile uint64_t sink;
    char setup[256];
    col_proc_describe(setup, sizeof setup);
    printf("# %s; OpenBLAS %s\n", setup, col_cpu_backend_blas_core(&be));
    printf("# x [1, K] @ W^T, W [N, K]: each product reads its W (copies of >= 256 MiB in all) from memory\n");
    printf("# ceiling: a parallel read of 256 MiB (GB/s of bytes read); ratio: median over %d reps\n", reps);
    printf("%-4s %-10s %-5s %6s %9s %8s %9s %6s\n", "thr", "N x K", "dtype", "copies", "us/prod", "GB/s", "read GB/s",
           "ratio");
    for (int t = 1; t <= maxt; t++) {
        omp_set_num_threads(t);
        for (int si = 0; si < nshapes; si++)
            for (int di = 0; di < 5; di++) {
                int64_t N = shapes[si][0], K = shapes[si][1];
                config c;
                if (!make_config(&c, dts[di], N, K, &err)) {
                    fprintf(stderr, "bench_quant: %s\n", err.msg);
                    return 1;
                }
                col_plan_run(c.p, &be, &err); /* warm: pages touched, code loaded */
                double us[MAX_REPS], gbs[MAX_REPS], rbw[MAX_REPS], ratio[MAX_REPS];
                for (int r = 0; r < reps; r++) {
                    double r1 = read_once(rd, nread, &sink), r2 = read_once(rd, nread, &sink);
                    rbw[r] = r1 > r2 ? r1 : r2;
                    double t0 = bench_now();
                    if (col_plan_run(c.p, &be, &err) != COL_OK) {
                        fprintf(stderr, "bench_quant: %s\n", err.msg);
                        return 1;
                    }
                    double sec = (bench_now() - t0) / c.copies;
                    us[r] = sec * 1e6;
                    gbs[r] = (double)c.wbytes / sec / 1e9;
                    ratio[r] = gbs[r] / rbw[r];
                }
                char shape[32];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)N, (long long)K);
                printf("%-4d %-10s %-5s %6d %9.1f %8.2f %9.2f %6.2f\n", t, shape, col_dtype_name(dts[di]), c.copies,
                       bench_median(us, reps), bench_median(gbs, reps), bench_median(rbw, reps),
                       bench_median(ratio, reps));
                fflush(stdout);
                free_config(&c);
            }
    }
    free(rd);
    col_cpu_backend_free(&be);
    return 0;
}
