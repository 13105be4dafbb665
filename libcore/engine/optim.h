/* optim.h - optimizers (SGD, AdamW, LAMB, LARS), gradient clipping and
 * learning-rate schedules on plain float arrays.
 *
 * The optimizer does not own memory: the caller describes every parameter
 * tensor with a col_opt_tensor (weights, gradient and the state slots the
 * kind needs, see col_opt_state_slots) and calls col_opt_step once per
 * training step. State slots must start zeroed (memtier chunks are zeroed).
 *
 * Every rule follows PyTorch / the paper exactly (formulas in optim.c), is
 * computed in f32 with norms in double, and gives bit-identical results for
 * any number of OpenMP threads.
 */
#ifndef COL_OPTIM_H
#define COL_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef enum { COL_OPT_SGD, COL_OPT_ADAMW, COL_OPT_LAMB, COL_OPT_LARS } col_opt_kind;

typedef struct {
    col_opt_kind kind;
    float lr;           /* base learning rate (feed it to a schedule; col_opt_step takes the step's lr) */
    float beta1, beta2; /* AdamW / LAMB moment decay rates, each in [0, 1) */
    float eps;          /* AdamW / LAMB denominator term, >= 0 */
    float weight_decay; /* >= 0; applied only to tensors with decay = true */
    float momentum;     /* SGD / LARS, >= 0 (SGD: 0 = plain SGD, no state) */
    bool nesterov;      /* SGD only; needs momentum > 0 */
    float eta;          /* LARS trust coefficient, > 0 */
} col_opt_config;

/* Defaults of each kind:
 *   SGD:   lr 1e-2, momentum 0, weight_decay 0, nesterov false (torch.optim.SGD but with an lr)
 *   AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2 (torch.optim.AdamW)
 *   LAMB:  lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight_decay 1e-2 (You et al. 2019; apex FusedLAMB eps)
 *   LARS:  lr 0.1, momentum 0.9, weight_decay 5e-4, eta 1e-3 (You et al. 2017)
 * Fields a kind does not use are set to the AdamW/SGD values and ignored. */
col_opt_config col_opt_defaults(col_opt_kind kind);
const char *col_opt_kind_name(col_opt_kind kind);

/* One parameter tensor: n floats of weights w and gradient g, and the state
 * slots m (slot 0) and v (slot 1), each n floats, NULL when the kind does
 * not use them. decay = false exempts the tensor from weight decay (biases,
 * norm weights); LAMB/LARS still apply their trust ratio to it.
 * g is read by col_opt_step and scaled in place by col_clip_grad_norm. */
typedef struct {
    float *w;
    float *g;
    float *m;
    float *v;
    int64_t n;
    bool decay;
} col_opt_tensor;

/* Float slots of state per parameter element: SGD 0 (momentum 0) or 1,
 * AdamW and LAMB 2 (m, v), LARS 1 (momentum buffer); -1 for an unknown kind. */
int col_opt_state_slots(col_opt_kind kind, float momentum);

/* Checks a configuration (ranges above); COL_EINVAL with a message naming
 * the field and its value otherwise. col_opt_step calls it. */
col_status col_opt_validate(const col_opt_config *c, col_err *e);

/* Applies one update of kind c->kind to every tensor of ts[0..nt), with
 * learning rate lr (>= 0) at `step` (1-based; AdamW/LAMB use it for bias
 * correction). All arguments are checked before anything is written: on
 * error (COL_EINVAL) weights and state are unchanged. The buffers of one
 * tensor must not overlap each other. */
col_status col_opt_step(const col_opt_config *c, float lr, int64_t step, col_opt_tensor *ts, int nt, col_err *e);
/* The checks col_opt_step makes before it writes anything (the config, lr,
 * step, the list, and every tensor's buffers for the state slots of its
 * kind), for other steppers to make too; messages start with `who`. */
col_status col_opt_check_step(const char *who, const col_opt_config *c, float lr, int64_t step,
                              const col_opt_tensor *ts, int nt, col_err *e);

/* sqrt(sum of g^2 over all tensors), accumulated in double. */
double col_grad_global_norm(const col_opt_tensor *ts, int nt);
/* The sum of g^2 of the tensors, tensor by tensor in order: the global norm
 * of tensors seen one at a time is sqrt of the running sum of these (the
 * same bits as col_grad_global_norm of them all). */
double col_grad_sumsq(const col_opt_tensor *ts, int nt);
/* The clipping of col_clip_grad_norm with the global norm already known (for
 * gradients seen one tensor at a time): multiplies the tensors' g by
 * max_norm / (norm + 1e-6) when that is below 1. */
void col_clip_grad_scale(col_opt_tensor *ts, int nt, double max_norm, double norm);

/* torch.nn.utils.clip_grad_norm_: norm = col_grad_global_norm(ts, nt);
 * coef = max_norm / (norm + 1e-6); when coef < 1 (i.e. norm > max_norm - 1e-6)
 * every g is multiplied by coef, otherwise the gradients are left untouched.
 * *norm_before (may be NULL) receives norm. max_norm must be > 0. A
 * non-finite norm leaves the gradients unscaled and returns COL_EINVAL
 * (PyTorch's error_if_nonfinite=True), so the caller can skip the step. */
col_status col_clip_grad_norm(col_opt_tensor *ts, int nt, double max_norm, double *norm_before, col_err *e);

/* ---- learning-rate schedules ---- */

typedef enum { COL_LR_CONSTANT, COL_LR_COSINE, COL_LR_LINEAR } col_lr_kind;

typedef struct {
    col_lr_kind kind;
    float lr_max, lr_min;
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* COSINE / LINEAR: step at which lr_min is reached */
} col_lr_sched;

/* lr at 0-based step s (W = warmup_steps, T = total_steps):
 *   s < W:                lr_max * (s + 1) / W              (linear warmup, reaches lr_max at s = W-1)
 *   CONSTANT, s >= W:     lr_max
 *   COSINE, W <= s < T:   lr_min + 0.5 (lr_max - lr_min) (1 + cos(pi p)),  p = (s - W) / (T - W)
 *   LINEAR, W <= s < T:   lr_max + (lr_min - lr_max) p
 *   COSINE/LINEAR, s >= T: lr_min
 * Negative steps count as step 0. */
float col_lr_at(const col_lr_sched *s, int64_t step);

/* Checks a schedule: 0 <= lr_min <= lr_max, warmup_steps >= 0, and for
 * COSINE/LINEAR total_steps > warmup_steps. COL_EINVAL otherwise. */
col_status col_lr_validate(const col_lr_sched *s, col_err *e);

#endif
