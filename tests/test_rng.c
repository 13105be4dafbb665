/* test_rng.c - Philox-4x32-10 against the Random123 known-answer vectors,
 * and the statistics of the derived distributions. */
#include <math.h>

#include "rng.h"
#include "testlib.h"

int main(void)
{
    /* known-answer tests published with Random123 (kat_vectors, philox4x32 10 rounds) */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int k = 0; k < 3; k++) {
        uint32_t o[4];
        col_philox4x32(kat[k].ctr, kat[k].key, o);
        TL_OK(o[0] == kat[k].out[0] && o[1] == kat[k].out[1] && o[2] == kat[k].out[2] && o[3] == kat[k].out[3],
              "Philox KAT %d: %08x %08x %08x %08x", k, o[0], o[1], o[2], o[3]);
    }
    /* element i is a pure function of (seed, i) */
    TL_OK(col_rand_uniform(5, 12345) == col_rand_uniform(5, 12345), "uniform is deterministic");
    TL_OK(col_rand_uniform(5, 12345) != col_rand_uniform(6, 12345), "seeds give different streams");

    enum { N = 400000 };
    double s = 0, s2 = 0, n1 = 0, n2 = 0, n4 = 0;
    float lo = 1, hi = 0;
    for (int i = 0; i < N; i++) {
        float u = col_rand_uniform(9, (uint64_t)i);
        s += u, s2 += (double)u * u;
        lo = u < lo ? u : lo, hi = u > hi ? u : hi;
        double z = col_rand_normal(9, (uint64_t)i);
        n1 += z, n2 += z * z, n4 += z * z * z * z;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    /* tolerances: 6 standard errors of the estimates */
    TL_OK(fabs(mean - 0.5) < 6 * sqrt(1.0 / 12 / N), "uniform mean %.5f", mean);
    TL_OK(fabs(var - 1.0 / 12) < 6 * sqrt(1.0 / 180 / N), "uniform variance %.5f", var);
    TL_OK(lo >= 0.0f && hi < 1.0f, "uniform in [0,1): [%g, %g]", lo, hi);
    TL_OK(fabs(n1 / N) < 6 / sqrt(N), "normal mean %.5f", n1 / N);
    TL_OK(fabs(n2 / N - 1) < 6 * sqrt(2.0 / N), "normal variance %.5f", n2 / N);
    TL_OK(fabs(n4 / N - 3) < 6 * sqrt(96.0 / N), "normal 4th moment %.4f", n4 / N);

    col_rng r;
    col_rng_init(&r, 3);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++)
        counts[col_rng_below(&r, 7)]++;
    int ok = 1;
    for (int k = 0; k < 7; k++)
        ok &= fabs(counts[k] - 10000.0) < 6 * sqrt(10000.0 * 6 / 7);
    TL_OK(ok, "below(7) is uniform: %d %d %d %d %d %d %d", counts[0], counts[1], counts[2], counts[3], counts[4],
          counts[5], counts[6]);
    float a[1000], b[1000];
    col_fill_normal(a, 1000, 11, 0.02f);
    for (int i = 0; i < 1000; i++)
        b[i] = 0.02f * col_rand_normal(11, (uint64_t)i);
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= a[i] == b[i];
    TL_OK(same, "fill_normal matches element-wise draws");
    return tl_done();
}
