/* rng.h - counter-based random numbers (Philox-4x32-10).
 *
 * A draw is a pure function of (seed, counter): element i of a dropout mask
 * or of a random init depends only on the seed and i, never on the thread
 * that computes it or on how many threads there are.
 */
#ifndef COL_RNG_H
#define COL_RNG_H

#include <stdint.h>

typedef struct {
    uint32_t v[4];
} col_philox_out;

/* Philox-4x32-10 as specified by Salmon et al. (Random123). */
void col_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The four 32-bit words of block `counter` of the stream `seed`. */
col_philox_out col_philox(uint64_t seed, uint64_t counter);
/* Uniform in [0, 1) from the word (24-bit resolution). */
static inline float col_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
/* Uniform [0,1) for logical element index i (4 elements per Philox block). */
float col_rand_uniform(uint64_t seed, uint64_t i);
/* Standard normal for element i (Box-Muller on a pair of words). */
float col_rand_normal(uint64_t seed, uint64_t i);

/* A sequential generator over the same function, for host-side use. */
typedef struct {
    uint64_t seed, counter;
} col_rng;

void col_rng_init(col_rng *r, uint64_t seed);
uint32_t col_rng_u32(col_rng *r);
float col_rng_uniform(col_rng *r);
float col_rng_normal(col_rng *r);
/* Uniform integer in [0, n). */
uint64_t col_rng_below(col_rng *r, uint64_t n);
/* Fills x[0..n) with normal(0, std) drawn from (seed, element index). */
void col_fill_normal(float *x, int64_t n, uint64_t seed, float std);
void col_fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi);

#endif
