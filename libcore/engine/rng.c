#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void col_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

col_philox_out col_philox(uint64_t seed, uint64_t counter)
{
    const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    col_philox_out o;
    col_philox4x32(ctr, key, o.v);
    return o;
}

float col_rand_uniform(uint64_t seed, uint64_t i)
{
    col_philox_out o = col_philox(seed, i >> 2);
    return col_u32_to_unit(o.v[i & 3]);
}

float col_rand_normal(uint64_t seed, uint64_t i)
{
    /* block i/2 gives two pairs; element parity picks cos or sin of pair 0 */
    col_philox_out o = col_philox(seed ^ 0x6e6f726d616cull, i >> 1);
    float u1 = ((float)(o.v[0] >> 8) + 1.0f) * (1.0f / 16777216.0f); /* (0, 1] */
    float u2 = col_u32_to_unit(o.v[1]);
    float r = sqrtf(-2.0f * logf(u1));
    float a = 6.28318530717958647692f * u2;
    return (i & 1) ? r * sinf(a) : r * cosf(a);
}

void col_rng_init(col_rng *r, uint64_t seed)
{
    r->seed = seed;
    r->counter = 0;
}

uint32_t col_rng_u32(col_rng *r)
{
    uint64_t i = r->counter++;
    return col_philox(r->seed, i >> 2).v[i & 3];
}

float col_rng_uniform(col_rng *r) { return col_u32_to_unit(col_rng_u32(r)); }

float col_rng_normal(col_rng *r) { return col_rand_normal(r->seed, r->counter++); }

uint64_t col_rng_below(col_rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n; /* rejection keeps it unbiased */
    for (;;) {
        uint64_t x = ((uint64_t)col_rng_u32(r) << 32) | col_rng_u32(r);
        if (x < lim)
            return x % n;
    }
}

void col_fill_normal(float *x, int64_t n, uint64_t seed, float std)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        x[i] = std * col_rand_normal(seed, (uint64_t)i);
}

void col_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * col_rand_uniform(seed, (uint64_t)i);
}
