/* optim_scalars.h - the per-step scalars of the optimizers, for the host
 * loops (optim.c) and the CUDA kernels (cuda/cuda_optim.cu) alike: both
 * include these expressions rather than repeat them, so each element of a
 * step is computed from the same rounded scalars on either device.
 *
 * Plain C that also compiles as C++ (nvcc's host code): no compound
 * literals, no designated initializers.
 */
#ifndef COL_OPTIM_SCALARS_H
#define COL_OPTIM_SCALARS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "optim.h"
#ifdef __cplusplus
}
#endif

/* AdamW and LAMB moments: m = b1 m + omb1 g, v = b2 v + (omb2 g) g, with
 * omb = 1 - beta rounded from double. */
typedef struct {
    float b1, b2, omb1, omb2;
} col_opt_moments;

static inline col_opt_moments col_opt_moments_of(const col_opt_config *c)
{
    col_opt_moments k;
    k.b1 = c->beta1, k.b2 = c->beta2;
    k.omb1 = (float)(1.0 - (double)k.b1), k.omb2 = (float)(1.0 - (double)k.b2);
    return k;
}

/* AdamW at `step` (1-based): w = w * keep - step_size * (m / (sqrt(v) / bc2_sqrt + eps)) */
typedef struct {
    col_opt_moments mo;
    float step_size; /* lr / (1 - b1^t) */
    float bc2_sqrt;  /* sqrt(1 - b2^t) */
    float eps;
} col_adamw_scalars;

static inline col_adamw_scalars col_adamw_scalars_of(const col_opt_config *c, float lr, int64_t step)
{
    col_adamw_scalars s;
    s.mo = col_opt_moments_of(c);
    const double bc1 = 1.0 - pow(s.mo.b1, (double)step), bc2 = 1.0 - pow(s.mo.b2, (double)step);
    s.step_size = (float)(lr / bc1), s.bc2_sqrt = (float)sqrt(bc2);
    s.eps = c->eps;
    return s;
}

/* AdamW's decoupled decay as a factor: 1 - lr * wd, or 1 for a tensor without decay */
static inline float col_adamw_keep(const col_opt_config *c, float lr, bool decay)
{
    return decay ? (float)(1.0 - (double)lr * c->weight_decay) : 1.0f;
}

/* SGD's update rule: 0 plain, 1 momentum, 2 Nesterov momentum */
static inline int col_sgd_mode(const col_opt_config *c) { return c->momentum == 0.0f ? 0 : c->nesterov ? 2 : 1; }

#endif
