/* sched_internal.h - what the scheduler's files share (not for users of scheduler.h). */
#ifndef COL_DM_SCHED_INTERNAL_H
#define COL_DM_SCHED_INTERNAL_H

#include <stddef.h>

#include "scheduler.h"

struct dm_sched {
    dm_sched_config cfg;       /* a copy (trained_betas owned) */
    int T;                     /* num_train_timesteps */
    float *betas, *acp;        /* [T]: betas, alphas_cumprod */
    float final_acp;           /* final_alpha_cumprod (ddim, pndm, lcm) */
    /* set_timesteps */
    bool ready;
    int n_inference;           /* num_inference_steps as diffusers keeps it */
    int n_ts;                  /* length of the timesteps array */
    int64_t *ts;               /* integer timesteps (not the euler kinds) */
    float *ts_f;               /* euler kinds: float32 timesteps */
    float *sigmas;             /* euler kinds, dpm++: n_ts + 1 */
    float init_sigma;
    int begin;                 /* first loop step (img2img) */
    int index;                 /* the next step (index into the timesteps) */
    /* pndm: PRK timesteps count and the lengths of its lists */
    int n_prk;
    /* multistep state, n values each, allocated at the first step */
    int64_t n;
    float *hist[4];            /* dpm++: model outputs (oldest first); pndm: ets (oldest first) */
    int n_hist;
    int lower_order_nums;      /* dpm++ */
    int counter;               /* pndm */
    float *cur_mo;             /* pndm: cur_model_output */
    bool cur_mo_set;           /* pndm: false while cur_model_output is the integer 0 */
    float *cur_sample;         /* pndm: saved sample (NULL = None) */
    bool have_cur_sample;
    float *tmp[3];             /* scratch */
};

col_status dm_sched_config_check(const dm_sched_config *c, col_err *err);

/* ---- sched_tables.c: the train-time tables and numpy's arithmetic ---- */
/* betas and alphas_cumprod as diffusers' __init__ makes them (float32) */
col_status dm_sched_tables(dm_sched *s, col_err *err);
/* numpy.linspace(start, stop, num, endpoint) in float64 */
void dm_np_linspace(double start, double stop, int num, bool endpoint, double *out);
/* numpy.arange(start, stop, step) in float64: the count (at most cap values written) */
int dm_np_arange(double start, double stop, double step, double *out, int cap);
/* numpy.interp(x, arange(len), fp) for one x */
double dm_np_interp(double x, const double *fp, int len);
/* numpy's float32 log (its AVX2/AVX-512 kernel) */
float dm_np_logf(float x);
/* numpy's round (half to even) */
double dm_np_round(double x);
/* EulerDiscrete/DPMSolver _convert_to_karras: num sigmas from sigma_max to sigma_min */
void dm_karras(double sigma_min, double sigma_max, int num, double *out);
/* _sigma_to_t(sigma, log_sigmas) with float32 log_sigmas[T] */
double dm_sigma_to_t(double sigma, const float *log_sigmas, int T);
/* ((1 - acp) / acp) ** 0.5 in float32, as torch computes it */
float dm_sigma_of_acp(float acp);

#endif
