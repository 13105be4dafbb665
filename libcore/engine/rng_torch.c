/* rng_torch.c - PyTorch's CPU generator and its rand/randn kernels (see rng_torch.h).
 *
 * Every floating-point step below is its own statement, and every fused
 * multiply-add of torch's build is an explicit fmaf: a compiler that
 * contracts a*b+c within one expression (clang's default) finds none here,
 * so the results do not depend on the compiler or on the machine. */
#include "rng_torch.h"

#include <math.h>
#include <string.h>

#define MT_M 397

void col_torch_gen_seed(col_torch_gen *g, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    g->seed = seed;
    g->mt[0] = (uint32_t)seed;
    for (uint32_t j = 1; j < COL_TORCH_MT_N; j++)
        g->mt[j] = 1812433253u * (g->mt[j - 1] ^ (g->mt[j - 1] >> 30)) + j;
    /* torch twists before the first word: left = 1, next = 0 */
    g->left = 1;
    g->next = 0;
    g->path = COL_TORCH_NORMAL_AVX2;
}

static inline uint32_t mt_mix(uint32_t u, uint32_t v)
{
    uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
    return (y >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_twist(col_torch_gen *g)
{
    uint32_t *p = g->mt;
    int k = 0;
    for (; k < COL_TORCH_MT_N - MT_M; k++)
        p[k] = p[k + MT_M] ^ mt_mix(p[k], p[k + 1]);
    for (; k < COL_TORCH_MT_N - 1; k++)
        p[k] = p[k + MT_M - COL_TORCH_MT_N] ^ mt_mix(p[k], p[k + 1]);
    p[k] = p[MT_M - 1] ^ mt_mix(p[k], p[0]);
    g->left = COL_TORCH_MT_N;
    g->next = 0;
}

uint32_t col_torch_gen_u32(col_torch_gen *g)
{
    if (--g->left == 0)
        mt_twist(g);
    uint32_t y = g->mt[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t col_torch_gen_u64(col_torch_gen *g)
{
    uint64_t hi = col_torch_gen_u32(g);
    uint64_t lo = col_torch_gen_u32(g);
    return hi << 32 | lo;
}

void col_torch_gen_skip(col_torch_gen *g, uint64_t n)
{
    while (n > 0) {
        if (g->left == 1) {    /* the next word twists first */
            (void)col_torch_gen_u32(g);
            n--;
            continue;
        }
        uint64_t here = (uint64_t)(g->left - 1);   /* words available without a twist */
        uint64_t take = n < here ? n : here;
        g->left -= (int)take;
        g->next += (int)take;
        n -= take;
    }
}

/* uniform_real_distribution<float>(0, 1): the low 24 bits over 2^24 (exact) */
static inline float unit24(uint32_t w)
{
    return (float)(w & 0xffffffu) * 0x1p-24f;
}

void col_torch_rand(col_torch_gen *g, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = unit24(col_torch_gen_u32(g));
}

static inline float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The constants of avx_mathfun.h as torch's binary holds them (float bits in the comments). */
#define K_SQRTHF 0x1.6a09e6p-1f    /* 0x3f3504f3 */
#define K_LOG_P0 0x1.204376p-4f    /* 0x3d9021bb */
#define K_LOG_P1 -0x1.d7a370p-4f   /* 0xbdebd1b8 */
#define K_LOG_P2 0x1.de4a34p-4f    /* 0x3def251a */
#define K_LOG_P3 -0x1.fcba9ep-4f   /* 0xbdfe5d4f */
#define K_LOG_P4 0x1.23d37ep-3f    /* 0x3e11e9bf */
#define K_LOG_P5 -0x1.555ca0p-3f   /* 0xbe2aae50 */
#define K_LOG_P6 0x1.999d58p-3f    /* 0x3e4cceac */
#define K_LOG_P7 -0x1.fffff8p-3f   /* 0xbe7ffffc */
#define K_LOG_P8 0x1.555554p-2f    /* 0x3eaaaaaa */
#define K_LOG_Q1 -0x1.bd0106p-13f  /* 0xb95e8083 */
#define K_LOG_Q2 0x1.63p-1f        /* 0x3f318000 */
#define K_FOPI 0x1.45f306p+0f      /* 0x3fa2f983, 4/pi */
#define K_DP1 -0x1.92p-1f          /* 0xbf490000 */
#define K_DP2 -0x1.fb4p-13f        /* 0xb97da000 */
#define K_DP3 -0x1.4442d2p-25f     /* 0xb3222169 */
#define K_COS_P0 0x1.99eb9cp-16f   /* 0x37ccf5ce */
#define K_COS_P1 -0x1.6c0c34p-10f  /* 0xbab6061a */
#define K_COS_P2 0x1.55554ap-5f    /* 0x3d2aaaa5 */
#define K_SIN_P0 -0x1.9943f2p-13f  /* 0xb94ca1f9 */
#define K_SIN_P1 0x1.11073cp-7f    /* 0x3c08839e */
#define K_SIN_P2 -0x1.555546p-3f   /* 0xbe2aaaa3 */
#define K_TWO_PI_F 0x1.921fb6p+2f  /* 0x40c90fdb, (float)(2 pi) */
#define K_TWO_PI_D 0x1.921fb54442d18p+2

/* log256_ps for one lane, with the contractions of torch's AVX2 build */
static float avx2_log(float x)
{
    bool invalid = !(x > 0.0f);   /* _CMP_LE_OS: x <= 0 (a NaN compares false) */
    if (!(x > 0x1p-126f))         /* _mm256_max_ps(x, min_norm_pos) returns the second operand unless x > it */
        x = 0x1p-126f;
    uint32_t b = f_bits(x);
    int32_t ei = (int32_t)(b >> 23) - 0x7f;
    x = bits_f((b & ~0x7f800000u) | 0x3f000000u);
    float e = (float)ei;
    e = e + 1.0f;
    bool m = x < K_SQRTHF;
    float tmp = m ? x : 0.0f;
    x = x + -1.0f;
    e = e - (m ? 1.0f : 0.0f);
    x = x + tmp;
    float z = x * x;
    float y = fmaf(K_LOG_P0, x, K_LOG_P1);
    y = fmaf(y, x, K_LOG_P2);
    y = fmaf(y, x, K_LOG_P3);
    y = fmaf(y, x, K_LOG_P4);
    y = fmaf(y, x, K_LOG_P5);
    y = fmaf(y, x, K_LOG_P6);
    y = fmaf(y, x, K_LOG_P7);
    y = fmaf(y, x, K_LOG_P8);
    y = y * x;
    float eq1 = e * K_LOG_Q1;
    y = fmaf(y, z, eq1);
    y = fmaf(-z, 0.5f, y);
    x = x + y;
    x = fmaf(e, K_LOG_Q2, x);
    if (invalid)
        x = bits_f(0xffffffffu);
    return x;
}

/* sincos256_ps for one lane, with the contractions of torch's AVX2 build */
static void avx2_sincos(float x, float *s, float *c)
{
    uint32_t sign_sin = f_bits(x) & 0x80000000u;
    x = bits_f(f_bits(x) & 0x7fffffffu);
    float y = x * K_FOPI;
    int32_t j = (int32_t)y;       /* cvttps2dq: the arguments here are below 8 */
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t swap_sin = (uint32_t)(j & 4) << 29;
    bool poly = (j & 2) == 0;
    sign_sin ^= swap_sin;
    uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    x = fmaf(y, K_DP1, x);
    x = fmaf(y, K_DP2, x);
    x = fmaf(y, K_DP3, x);
    float z = x * x;
    float half_z = z * 0.5f;
    float yc = fmaf(K_COS_P0, z, K_COS_P1);
    yc = fmaf(yc, z, K_COS_P2);
    yc = yc * z;
    yc = fmaf(yc, z, -half_z);
    yc = yc + 1.0f;
    float ys = fmaf(K_SIN_P0, z, K_SIN_P1);
    ys = fmaf(ys, z, K_SIN_P2);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    /* the selection by masks, zeros and all */
    float ysin2 = poly ? ys : 0.0f;
    float ysin1 = poly ? 0.0f : yc;
    ys = ys - ysin2;
    yc = yc - ysin1;
    float sv = ysin1 + ysin2;
    float cv = yc + ys;
    *s = bits_f(f_bits(sv) ^ sign_sin);
    *c = bits_f(f_bits(cv) ^ sign_cos);
}

void col_torch_normal16(col_torch_normal_path path, float *u)
{
    for (int j = 0; j < 8; j++) {
        float s, c, r;
        if (path == COL_TORCH_NORMAL_LIBM) {
            float u1 = 1.0f - u[j];
            float l = logf(u1);
            l = l * -2.0f;
            r = sqrtf(l);
            double td = (double)u[j + 8] * K_TWO_PI_D;
            float t = (float)td;
            s = sinf(t);
            c = cosf(t);
        } else {
            float u1 = 1.0f - u[j];
            float l = avx2_log(u1);
            l = l * -2.0f;
            r = sqrtf(l);
            float t = K_TWO_PI_F * u[j + 8];
            avx2_sincos(t, &s, &c);
        }
        /* fma(n, std, mean) with std 1, mean 0: n + 0 (a -0 becomes +0, as there) */
        float n1 = r * c;
        float n2 = r * s;
        u[j] = n1 + 0.0f;
        u[j + 8] = n2 + 0.0f;
    }
}

/* at::normal_distribution<double> (mean 0, std 1), the n < 16 path */
static double normal_double(col_torch_gen *g)
{
    if (g->has_next_normal) {
        g->has_next_normal = false;
        return g->next_normal + 0.0;
    }
    const uint64_t mask53 = (UINT64_C(1) << 53) - 1;
    double u1 = (double)(col_torch_gen_u64(g) & mask53) * 0x1p-53;
    double u2 = (double)(col_torch_gen_u64(g) & mask53) * 0x1p-53;
    double l = log1p(-u2);
    l = l * -2.0;
    double r = sqrt(l);
    double t = K_TWO_PI_D * u1;
    double s = sin(t);
    double c = cos(t);
    g->next_normal = r * s;
    g->has_next_normal = true;
    double v = c * r;
    return v + 0.0;
}

void col_torch_randn(col_torch_gen *g, float *out, int64_t n)
{
    if (n <= 0)
        return;
    if (n < 16) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)normal_double(g);
        return;
    }
    col_torch_rand(g, out, n);
    for (int64_t i = 0; i + 16 <= n; i += 16)
        col_torch_normal16(g->path, out + i);
    if (n % 16 != 0) {
        col_torch_rand(g, out + n - 16, 16);
        col_torch_normal16(g->path, out + n - 16);
    }
}
