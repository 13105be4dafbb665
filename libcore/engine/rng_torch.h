/* rng_torch.h - PyTorch's CPU random numbers, bit for bit.
 *
 * torch.Generator() on the CPU is a Mersenne Twister (MT19937, 32-bit
 * words) seeded by manual_seed(seed) with the seed's low 32 bits. On it:
 *
 *   torch.rand(n)   (float32): each element takes one 32-bit word w and is
 *                   (w & 0xffffff) * 2^-24.
 *   torch.randn(n)  (float32, a fresh contiguous tensor):
 *     n >= 16: n words become uniforms u[0..n) as for rand; each block of 16
 *              is Box-Muller'd in place, u[j] and u[j+8] (j < 8) giving
 *              r*cos(t) and r*sin(t) with r = sqrt(-2 log(1 - u[j])) and
 *              t = 2 pi u[j+8]; when n % 16 != 0, 16 more words are drawn
 *              into u[n-16..n) (overwriting the tail already computed) and
 *              that block is transformed again. The log, sin and cos are
 *              those of torch's CPU kernel, which depends on the CPU
 *              capability torch chose at start-up (see col_torch_normal_path).
 *     n < 16:  element after element, from two 64-bit draws (each two words,
 *              the first the high half) u1, u2 = (d & (2^53-1)) * 2^-53 in
 *              double: r = sqrt(-2 log1p(-u2)), t = 2 pi u1; the element is
 *              (float)(r cos t) and r sin t is kept in the generator for the
 *              next small draw (one element of a later call may use it).
 *              Large draws leave that cached value alone; manual_seed drops it.
 *
 * The generator is a plain struct: a copy is an independent generator at the
 * same place (how a caller forks or rewinds a stream). No global state.
 */
#ifndef COL_RNG_TORCH_H
#define COL_RNG_TORCH_H

#include <stdbool.h>
#include <stdint.h>

#define COL_TORCH_MT_N 624

/* How torch's float32 normal kernel for n >= 16 computes log, sin and cos.
 * torch picks its kernel by the CPU it starts on (ATEN_CPU_CAPABILITY
 * overrides it; torch.backends.cpu.get_cpu_capability() tells which):
 *   AVX2: vectorised polynomials (Cephes, as in avx_mathfun.h) with the
 *         fused multiply-adds torch's build contracts them into. Reproduced
 *         here in portable C (fmaf), bit for bit on any machine.
 *   LIBM: DEFAULT and AVX512 capabilities: logf, sincosf of the C library
 *         and the angle rounded from double. Bit for bit only where this
 *         program's C library computes logf/sinf/cosf as torch's did
 *         (glibc on Linux x86-64). */
typedef enum {
    COL_TORCH_NORMAL_AVX2 = 0,
    COL_TORCH_NORMAL_LIBM
} col_torch_normal_path;

typedef struct {
    uint32_t mt[COL_TORCH_MT_N];   /* the twister's state */
    int left;                      /* words left before the next twist, as torch counts them (1..624) */
    int next;                      /* index of the next word to temper */
    uint64_t seed;                 /* the seed as given (initial_seed()) */
    bool has_next_normal;          /* a cached second Box-Muller value of the n < 16 path */
    double next_normal;
    col_torch_normal_path path;
} col_torch_gen;

/* torch.Generator().manual_seed(seed) (a Python int below 0 is taken modulo
 * 2^64 by torch: pass (uint64_t)seed). The path is AVX2; set g->path after
 * seeding for the other one. */
void col_torch_gen_seed(col_torch_gen *g, uint64_t seed);
/* The next 32-bit word (CPUGeneratorImpl::random) and 64-bit draw (random64:
 * two words, the first in the high half). */
uint32_t col_torch_gen_u32(col_torch_gen *g);
uint64_t col_torch_gen_u64(col_torch_gen *g);
/* Advances the stream by n words (as n calls of col_torch_gen_u32). */
void col_torch_gen_skip(col_torch_gen *g, uint64_t n);

/* torch.rand(n, generator=g) in float32: uniform on [0, 1). */
void col_torch_rand(col_torch_gen *g, float *out, int64_t n);
/* torch.randn(n, generator=g) in float32 (any shape: n is its numel). */
void col_torch_randn(col_torch_gen *g, float *out, int64_t n);
/* The Box-Muller step of the n >= 16 path on one block of 16 uniforms, in
 * place (for tests and callers that draw the uniforms themselves). */
void col_torch_normal16(col_torch_normal_path path, float *u);

#endif
