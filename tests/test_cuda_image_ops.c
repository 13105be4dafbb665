/* test_cuda_image_ops.c - the CUDA kernels of the image ops (issue 15)
 * against the CPU backend, with tests/cuda_opcase.h's harness: conv2d and its
 * gradients (1x1, padded, strided, asymmetric padding, a strided input, a
 * convolution over several im2col tiles), and the kernels group norm and
 * nearest upsampling are made of. f32 tolerance: TOL, or the standard bound
 * n u for a sum of n terms (u = FLT_EPSILON / 2) where the longest sum of the
 * case is longer (the backends add in different orders).
 *
 * Without a CUDA device it prints "1..0 # SKIP ..." and passes; the
 * _emu program runs it through the host emulator.
 * Run alone: make tests/test_cuda_image_ops_emu && ./tests/test_cuda_image_ops_emu */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "graph.h"
#include "testlib.h"
#include "cuda_testutil.h"
#include "backend_cpu.h"

/* cudart reserves address space that ASan's shadow gap would block, and the
 * CUDA driver keeps allocations until exit (for sanitizer builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcuda.so\nleak:libcudart.so\nleak:libcublas\n"; }

#include "cuda_opcase.h"

static double sum_tol(int64_t nsum)
{
    double t = (double)nsum * FLT_EPSILON / 2;
    return t > TOL ? t : TOL;
}

/* x [B,Cin,H,W] (transposed: a leaf [B,Cin,W,H] read through a transpose), w [Cout,Cin,kh,kw], bias */
static void case_conv(int64_t B, int64_t Cin, int64_t H, int64_t W, int64_t Cout, int64_t kh, int64_t kw,
                      col_conv2d_cfg cfg, bool bias, bool transposed)
{
    char name[160];
    snprintf(name, sizeof name, "conv2d x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] stride (%d,%d) pad (%d,%d,%d,%d)%s%s",
             (long long)B, (long long)Cin, (long long)H, (long long)W, (long long)Cout, (long long)Cin, (long long)kh,
             (long long)kw, cfg.stride_h, cfg.stride_w, cfg.pad_top, cfg.pad_bottom, cfg.pad_left, cfg.pad_right,
             bias ? " bias" : "", transposed ? " strided x" : "");
    int64_t Ho = (H + cfg.pad_top + cfg.pad_bottom - kh) / cfg.stride_h + 1;
    int64_t Wo = (W + cfg.pad_left + cfg.pad_right - kw) / cfg.stride_w + 1;
    int64_t longest = Cin * kh * kw; /* y; dx sums Cout * taps; dw and db B * Ho * Wo */
    if (Cout * kh * kw > longest)
        longest = Cout * kh * kw;
    if (B * Ho * Wo > longest)
        longest = B * Ho * Wo;
    tcase c = begin(name, sum_tol(longest));
    int64_t sx[4] = {B, Cin, transposed ? W : H, transposed ? H : W}, sw[4] = {Cout, Cin, kh, kw};
    col_node *x = param(&c, "x", 4, sx, R_NORMAL);
    if (transposed)
        x = col_transpose(c.g, x, 2, 3);
    col_node *w = param(&c, "w", 4, sw, R_NORMAL), *b = bias ? param(&c, "b", 1, &Cout, R_NORMAL) : NULL;
    backward_of(&c, col_conv2d_ex(c.g, x, w, b, &cfg));
    finish(&c);
}

/* a UNet-like chain: group norm, silu, upsampling, a 3x3 conv; and a group norm of a 3-D input */
static void case_norm_upsample(void)
{
    int64_t B = 2, C = 64, H = 9, W = 7, G = 32;
    tcase c = begin("group_norm [2,64,9,7] 32 groups -> silu -> upsample x2 -> conv 3x3", sum_tol(B * H * W * 4 * 9));
    int64_t sx[4] = {B, C, H, W}, sw[4] = {8, C, 3, 3}, s3[3] = {2, 6, 11};
    col_node *x = param(&c, "x", 4, sx, R_NORMAL);
    col_node *gw = param(&c, "gw", 1, &C, R_NORMAL), *gb = param(&c, "gb", 1, &C, R_NORMAL);
    col_node *y = col_silu(c.g, col_group_norm(c.g, x, gw, gb, (int)G, 1e-6f));
    y = col_conv2d(c.g, col_upsample_nearest(c.g, y, 2), param(&c, "w", 4, sw, R_NORMAL), NULL, 1, 1);
    backward_of(&c, y);
    backward_of(&c, col_group_norm(c.g, param(&c, "x3", 3, s3, R_NORMAL), NULL, NULL, 3, 1e-5f));
    finish(&c);
}

/* the kernels' own refusals: no scratch where a tile is needed */
static void case_errors(void)
{
    col_graph *g = col_graph_new();
    int64_t sx[4] = {1, 2, 5, 5}, sw[4] = {3, 2, 3, 3};
    col_node *x = col_input(g, "x", COL_F32, 4, sx), *w = col_input(g, "w", COL_F32, 4, sw);
    col_node *y = col_conv2d(g, x, w, NULL, 1, 1);
    col_err err = {0};
    col_exec ex = {.scratch = NULL, .scratch_bytes = 0, .be = &gpu};
    col_status st = y ? gpu.kernel[COL_OP_CONV2D](y, &ex, &err) : COL_EINTERNAL;
    TL_OK(st == COL_EINVAL && strstr(err.msg, "scratch") != NULL, "conv2d without its scratch: \"%s\"", err.msg);
    col_graph_free(g);
}

int main(void)
{
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    tl_cpu_backend(&cpu);
    col_rng_init(&rng, 20250116);
    TL_NOTE("device: %s", col_cuda_backend_device_name(&gpu));

    case_conv(2, 3, 5, 6, 5, 1, 1, (col_conv2d_cfg){1, 1, 0, 0, 0, 0}, true, false);  /* direct GEMMs */
    case_conv(2, 5, 4, 3, 6, 1, 1, (col_conv2d_cfg){1, 1, 0, 0, 0, 0}, false, true); /* direct, strided x */
    case_conv(2, 3, 9, 11, 7, 3, 3, (col_conv2d_cfg){1, 1, 1, 1, 1, 1}, true, false);
    case_conv(2, 4, 8, 8, 4, 3, 3, (col_conv2d_cfg){2, 2, 0, 1, 0, 1}, true, false);  /* VAE downsampler */
    case_conv(1, 7, 6, 9, 3, 2, 3, (col_conv2d_cfg){1, 2, 2, 0, 1, 1}, false, true);
    case_conv(2, 3, 7, 6, 5, 1, 1, (col_conv2d_cfg){2, 2, 0, 0, 0, 0}, true, false);  /* 1x1 stride 2: im2col */
    case_conv(1, 2, 6, 5, 3, 5, 5, (col_conv2d_cfg){1, 1, 2, 2, 2, 2}, true, false);
    case_conv(1, 64, 91, 89, 4, 3, 3, (col_conv2d_cfg){1, 1, 1, 1, 1, 1}, true, false); /* 2 im2col tiles */
    case_norm_upsample();
    case_errors();

    col_cuda_backend_free(&gpu);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
