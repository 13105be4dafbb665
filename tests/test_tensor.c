/* test_tensor.c - shapes, strides, and dtype conversions checked against
 * their definitions (nearest representable value, ties to even). */
#include <math.h>
#include <string.h>

#include "rng.h"
#include "tensor.h"
#include "testlib.h"

static float next_up(float x) { return nextafterf(x, INFINITY); }

/* true if h is a correctly rounded 16-bit float for x (to_f32 decodes the
 * format, exp_mask is its exponent field): no other finite value of the
 * format is closer, and on a tie the even one was chosen */
static bool is_nearest(float x, uint16_t h, float (*to_f32)(uint16_t), uint16_t exp_mask)
{
    double v = to_f32(h);
    double e = fabs((double)x - v);
    for (int d = -1; d <= 1; d += 2) {
        uint16_t n = (uint16_t)(h + d);
        if ((n & exp_mask) == exp_mask || ((n ^ h) & 0x8000u))
            continue; /* inf/nan or crossed the sign */
        double ev = fabs((double)x - to_f32(n));
        if (ev < e || (ev == e && (h & 1u)))
            return false;
    }
    return true;
}

static bool f16_is_nearest(float x, uint16_t h) { return is_nearest(x, h, col_f16_to_f32, 0x7c00u); }
static bool bf16_is_nearest(float x, uint16_t h) { return is_nearest(x, h, col_bf16_to_f32, 0x7f80u); }

/* how many finite values h of a 16-bit format (exp_mask: its exponent field) give
 * from_f32(to_f32(h)) != h */
static int roundtrip_failures(float (*to_f32)(uint16_t), uint16_t (*from_f32)(float), uint16_t exp_mask)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & exp_mask) == exp_mask)
            continue;
        if (from_f32(to_f32((uint16_t)h)) != h)
            bad++;
    }
    return bad;
}

int main(void)
{
    col_tensor t = {.dtype = COL_F32, .ndim = 3, .shape = {2, 3, 4}};
    col_set_contiguous_strides(&t);
    TL_OK(t.stride[0] == 12 && t.stride[1] == 4 && t.stride[2] == 1, "contiguous strides are row-major");
    TL_OK(col_numel(&t) == 24 && col_is_contiguous(&t), "numel and contiguity");
    char buf[64];
    TL_OK(strcmp(col_shape_str(&t, buf, sizeof buf), "[2,3,4]") == 0, "shape string %s", buf);
    col_tensor tt = t;
    tt.shape[1] = 4, tt.shape[2] = 3, tt.stride[1] = 1, tt.stride[2] = 4;
    TL_OK(!col_is_contiguous(&tt), "a transposed layout is not contiguous");
    int64_t idx[3] = {1, 2, 3};
    TL_OK(col_offset_of(&t, idx) == 23, "offset of the last element");
    int steps = 1;
    memset(idx, 0, sizeof idx);
    while (col_index_next(&t, idx))
        steps++;
    TL_OK(steps == 24, "index iteration visits every element (%d)", steps);
    TL_OK(col_dtype_size(COL_BF16) == 2 && col_dtype_size(COL_I64) == 8, "dtype sizes");

    /* f16, bf16: every finite value round-trips exactly */
    int bad = roundtrip_failures(col_f16_to_f32, col_f32_to_f16, 0x7c00u);
    TL_OK(bad == 0, "f16 -> f32 -> f16 is exact for all finite values (%d bad)", bad);
    bad = roundtrip_failures(col_bf16_to_f32, col_f32_to_bf16, 0x7f80u);
    TL_OK(bad == 0, "bf16 -> f32 -> bf16 is exact for all finite values (%d bad)", bad);

    /* random floats round to the nearest representable value, ties to even */
    col_rng r;
    col_rng_init(&r, 42);
    int bad16 = 0, badb = 0;
    for (int i = 0; i < 200000; i++) {
        float x = (col_rng_uniform(&r) - 0.5f) * powf(2.0f, (float)col_rng_below(&r, 36) - 26.0f);
        if (fabsf(x) < 65504.0f && !f16_is_nearest(x, col_f32_to_f16(x)))
            bad16++;
        if (!bf16_is_nearest(x, col_f32_to_bf16(x)))
            badb++;
    }
    TL_OK(bad16 == 0, "f32 -> f16 is correctly rounded (%d bad of 200000)", bad16);
    TL_OK(badb == 0, "f32 -> bf16 is correctly rounded (%d bad of 200000)", badb);
    /* exact halfway cases pick the even neighbour */
    float half = col_f16_to_f32(0x3c00) + (col_f16_to_f32(0x3c01) - col_f16_to_f32(0x3c00)) / 2;
    TL_OK(col_f32_to_f16(half) == 0x3c00, "f16 tie rounds to even (down)");
    half = col_f16_to_f32(0x3c01) + (col_f16_to_f32(0x3c02) - col_f16_to_f32(0x3c01)) / 2;
    TL_OK(col_f32_to_f16(half) == 0x3c02, "f16 tie rounds to even (up)");
    TL_OK(col_f32_to_f16(70000.0f) == 0x7c00 && col_f32_to_f16(-70000.0f) == 0xfc00, "f16 overflow gives infinity");
    TL_OK(isnan(col_f16_to_f32(col_f32_to_f16(NAN))) && isnan(col_bf16_to_f32(col_f32_to_bf16(NAN))),
          "NaN stays NaN");
    TL_OK(col_f32_to_bf16(next_up(1.0f)) == col_f32_to_bf16(1.0f), "bf16 rounds a tiny step above 1 down to 1");
    return tl_done();
}
