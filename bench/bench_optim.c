/* bench_optim - host-tier AdamW and LAMB steps (col_opt_step) against a
 * STREAM-like memory ceiling measured in the same run.
 *
 * A configuration is a set of N f32 parameters (w, g, m, v: 16 N bytes) cut
 * into tensors of at most 4M elements, as memtier chunks hold them. Bytes
 * counted per parameter (what the algorithm must move; caches do not help
 * at these sizes):
 *   AdamW: reads w, g, m, v and writes w, m, v: 28 bytes, one pass.
 *   LAMB:  the trust ratio needs ||w|| and ||u|| over the whole tensor before
 *          any weight can change, so two passes are the minimum: pass 1
 *          reads w, g, m, v and writes m, v (24 bytes); pass 2 reads w, m, v
 *          and writes w (16 bytes): 40 bytes. (Storing u in pass 1 instead of
 *          recomputing it moves the same 40 bytes.)
 *
 * Each array is its own aligned_alloc, as each memtier chunk is (large
 * allocations are separate mmaps, so the arrays start at the same offset
 * within a page; carving them out of one buffer at power-of-two distances
 * instead halves every kernel's speed here through cache-set conflicts).
 *
 * The ceiling: parallel OpenMP loops (schedule(static), the same threads)
 * over arrays of the same 16 N bytes in all: copy a[i] = b[i] over two
 * arrays of 2N floats (8 bytes/elem counted, STREAM's convention) and triad
 * a[i] = b[i] + s c[i] over three of 4N/3 (12 bytes).
 * The ratio is against copy, whose 1:1 read:write mix is nearer AdamW's 4:3
 * than triad's 2:1. It can exceed 1: AdamW writes only lines it has just
 * read, so its counted bytes are all the traffic there is, while copy's and
 * triad's destination lines are also read before being written (write
 * allocate), which STREAM's counts leave out; copy's real traffic is 1.5x
 * its counted bytes (triad's 4/3x), so an optimizer at the memory's real
 * rate shows about 1.5 of copy.
 * Every rep runs copy, triad, AdamW and LAMB back to back, and the ratio is
 * the median over reps of each rep's own ratio, so load from other programs
 * on a shared machine falls on both sides of it.
 *
 * Usage: bench_optim [--quick] [reps]   (reps 5..31, default 7; --quick: 16M only, 5 reps) */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "bench_util.h"
#include "procsetup.h"

#define TENSOR_MAX ((int64_t)1 << 22)

/* deterministic values in [lo, hi) from the element index, filled in parallel */
static void fill(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = lo + (hi - lo) * (float)((double)(z >> 40) / 16777216.0);
    }
}

/* one parallel copy b -> a of n floats; GB/s counted as 8 bytes per element */
static double copy_once(float *restrict a, const float *restrict b, int64_t n)
{
    double t0 = bench_now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        a[i] = b[i];
    return 8.0 * (double)n / (bench_now() - t0) / 1e9;
}

/* one parallel triad a = b + s c over n floats; GB/s counted as 12 bytes per element */
static double triad_once(float *restrict a, const float *restrict b, const float *restrict c, int64_t n)
{
    const float s = 0.5f;
    double t0 = bench_now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
    return 12.0 * (double)n / (bench_now() - t0) / 1e9;
}

/* the parameter set over arrays[0..4) = w, g, m, v of n floats each */
static col_opt_tensor *make_set(float **arr, int64_t n, int *nt_out)
{
    int nt = (int)((n + TENSOR_MAX - 1) / TENSOR_MAX);
    col_opt_tensor *ts = malloc(sizeof *ts * (size_t)nt);
    if (!ts)
        return NULL;
    float *w = arr[0], *g = arr[1], *m = arr[2], *v = arr[3];
    fill(w, n, 1, -0.1f, 0.1f);
    fill(g, n, 2, -0.01f, 0.01f);
    fill(m, n, 0, 0.0f, 0.0f);
    fill(v, n, 0, 0.0f, 0.0f);
    for (int i = 0; i < nt; i++) {
        int64_t o = (int64_t)i * TENSOR_MAX, len = n - o < TENSOR_MAX ? n - o : TENSOR_MAX;
        ts[i] = (col_opt_tensor){w + o, g + o, m + o, v + o, len, true};
    }
    *nt_out = nt;
    return ts;
}

/* seconds of one col_opt_step over the set */
static double step_once(const col_opt_config *c, int64_t step, col_opt_tensor *ts, int nt)
{
    col_err err = {0};
    double t0 = bench_now();
    if (col_opt_step(c, c->lr, step, ts, nt, &err) != COL_OK) {
        fprintf(stderr, "bench_optim: %s\n", err.msg);
        exit(1);
    }
    return bench_now() - t0;
}

static void minmax(const double *x, int n, double *lo, double *hi)
{
    *lo = *hi = x[0];
    for (int i = 1; i < n; i++)
        *lo = x[i] < *lo ? x[i] : *lo, *hi = x[i] > *hi ? x[i] : *hi;
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    int quick = 0, reps = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1, reps = 5;
        else if (atoi(argv[i]) >= 5 && atoi(argv[i]) <= 31)
            reps = atoi(argv[i]);
        else {
            fprintf(stderr, "bench_optim: bad argument '%s'; usage: bench_optim [--quick] [reps 5..31]\n", argv[i]);
            return 2;
        }
    }
    static const int64_t sizes[] = {(int64_t)16 << 20, (int64_t)64 << 20, (int64_t)256 << 20};
    int nsizes = quick ? 1 : 3;
    printf("# bench_optim: host AdamW / LAMB step vs STREAM-like copy and triad, %d threads, median of %d%s\n",
           omp_get_max_threads(), reps, quick ? " (quick)" : "");
    printf("# bytes per parameter: AdamW 28 (w,g,m,v read; w,m,v written), LAMB 40 (two passes: 24 + 16)\n");
    printf("# each rep runs copy, triad, AdamW, LAMB back to back; ratio = median over reps of optimizer GB/s /\n"
           "# copy GB/s of the same rep (copy's 1:1 mix is nearest AdamW's 4:3), [min..max] over reps\n");
    printf("%8s %4s %9s %9s %9s %9s %9s %9s %16s %16s\n", "params", "nt", "copy GB/s", "triad", "adamw ms", "GB/s",
           "lamb ms", "GB/s", "adamw/copy", "lamb/copy");
    double worst_a = 1e9, worst_l = 1e9;
    for (int si = 0; si < nsizes; si++) {
        int64_t n = sizes[si];
        /* arrays 0..3: w, g, m, v; 4, 5: copy (2N each); 6..8: triad (4N/3 each, rounded up to 64 bytes:
         * aligned_alloc takes sizes that are multiples of the alignment) */
        int64_t tn = (4 * n / 3 + 15) & ~(int64_t)15, len[9] = {n, n, n, n, 2 * n, 2 * n, tn, tn, tn};
        float *arr[9];
        int ok = 1;
        for (int k = 0; k < 9; k++)
            ok &= (arr[k] = aligned_alloc(64, sizeof(float) * (size_t)len[k])) != NULL;
        int nt = 0;
        col_opt_tensor *ts = ok ? make_set(arr, n, &nt) : NULL;
        if (!ts) {
            fprintf(stderr, "bench_optim: cannot allocate %lld MB; free memory or run with --quick\n",
                    (long long)(n * 37 >> 20));
            return 1;
        }
        for (int k = 4; k < 9; k++)
            fill(arr[k], len[k], (uint64_t)k, -1.0f, 1.0f);
        col_opt_config ca = col_opt_defaults(COL_OPT_ADAMW), cl = col_opt_defaults(COL_OPT_LAMB);
        double cp[32], tr[32], ta[32], tl[32], ra[32], rl[32];
        for (int r = -1; r < reps; r++) { /* r = -1: warm-up, not recorded */
            double c1 = copy_once(arr[4], arr[5], 2 * n), t1 = triad_once(arr[6], arr[7], arr[8], tn);
            double a1 = step_once(&ca, r + 2, ts, nt), l1 = step_once(&cl, r + 2, ts, nt);
            if (r < 0)
                continue;
            cp[r] = c1, tr[r] = t1, ta[r] = a1, tl[r] = l1;
            ra[r] = 28.0 * (double)n / a1 / 1e9 / c1;
            rl[r] = 40.0 * (double)n / l1 / 1e9 / c1;
        }
        double ralo, rahi, rllo, rlhi;
        minmax(ra, reps, &ralo, &rahi);
        minmax(rl, reps, &rllo, &rlhi);
        double mcp = bench_median(cp, reps), mtr = bench_median(tr, reps), mta = bench_median(ta, reps),
               mtl = bench_median(tl, reps), mra = bench_median(ra, reps), mrl = bench_median(rl, reps);
        printf("%7lldM %4d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %5.2f [%.2f..%.2f] %5.2f [%.2f..%.2f]\n",
               (long long)(n >> 20), nt, mcp, mtr, 1000 * mta, 28.0 * (double)n / mta / 1e9, 1000 * mtl,
               40.0 * (double)n / mtl / 1e9, mra, ralo, rahi, mrl, rllo, rlhi);
        worst_a = mra < worst_a ? mra : worst_a;
        worst_l = mrl < worst_l ? mrl : worst_l;
        free(ts);
        for (int k = 0; k < 9; k++)
            free(arr[k]);
    }
    printf("summary: adamw/copy lowest median %.2f (target >= 0.70: %s), lamb/copy lowest median %.2f\n", worst_a,
           worst_a >= 0.70 ? "met" : "NOT met", worst_l);
    return 0;
}
