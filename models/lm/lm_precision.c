/* lm_precision.c - mixed precision in a session (lm_trainer.h,
 * compute_dtype): the f32 masters beside the 16-bit parameters, the
 * optimizer step that goes from 16-bit gradients to f32 updates and back, and
 * f16's dynamic loss scaling.
 *
 * Every tensor is reached through the session's stage (in place for a host
 * chunk, an NVMe chunk read into a buffer), and the arithmetic on an element
 * does not depend on where its chunks live or on the thread count, so a run
 * gives the same bits at any memory budget, as an f32 one does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lm_trainer_internal.h"
#include "units.h"

enum { BLK = 1 << 16 }; /* elements per conversion block: blocks fixed by the length, threads over blocks */
enum { GROWTH_WINDOW = 2000 };
#define FIRST_SCALE 65536.0f

static int64_t nblocks(int64_t n) { return (n + BLK - 1) / BLK; }

/* dst[0..n) = f32 of src (dtype dt) times mul, then divided by div (each skipped when 1: the f32 step's
 * averaging is a division too) */
static void widen(float *dst, const void *src, col_dtype dt, int64_t n, float mul, float div)
{
    size_t es = col_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n > BLK)
    for (int64_t b = 0; b < nblocks(n); b++) {
        int64_t lo = b * BLK, len = n - lo < BLK ? n - lo : BLK;
        float *d = dst + lo;
        col_convert(d, COL_F32, (const char *)src + lo * (int64_t)es, dt, len);
        if (mul != 1.0f)
            for (int64_t i = 0; i < len; i++)
                d[i] *= mul;
        if (div != 1.0f)
            for (int64_t i = 0; i < len; i++)
                d[i] /= div;
    }
}

/* dst (dtype dt) = src rounded to nearest even */
static void narrow(void *dst, col_dtype dt, const float *src, int64_t n)
{
    size_t es = col_dtype_size(dt);
#pragma omp parallel for schedule(static) if (n > BLK)
    for (int64_t b = 0; b < nblocks(n); b++) {
        int64_t lo = b * BLK, len = n - lo < BLK ? n - lo : BLK;
        col_convert((char *)dst + lo * (int64_t)es, dt, src + lo, COL_F32, len);
    }
}

col_status lmt_mixed_init(col_lm_trainer *t, col_err *err)
{
    t->scale = 1.0f;
    if (!lmt_mixed(t))
        return COL_OK;
    if (t->dt == COL_F16)
        t->scale = t->cfg.loss_scale > 0 ? t->cfg.loss_scale : FIRST_SCALE;
    size_t most = 0;
    for (int i = 0; i < t->nt; i++)
        most = (size_t)t->ot[i].n > most ? (size_t)t->ot[i].n : most;
    /* mapped on its own: its pages come and go with the session, never left in the heap */
    void *p = mmap(NULL, sizeof(float) * (most ? most : 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char b[COL_BYTES_STR];
    if (p == MAP_FAILED)
        return col_err_set(err, COL_ENOMEM, "mixed precision: no memory for a %s conversion buffer",
                           col_fmt_bytes(b, sizeof b, (uint64_t)most * 4));
    t->conv = p;
    t->conv_n = most ? most : 1;
    return COL_OK;
}

void lmt_mixed_free(col_lm_trainer *t)
{
    if (t->conv)
        munmap(t->conv, sizeof(float) * t->conv_n);
    t->conv = NULL;
    t->conv_n = 0;
}

/* the kinds a trained tensor has, in the order the step gets them */
static int step_kinds(const col_lm_trainer *t, int *kinds)
{
    int nk = 0;
    kinds[nk++] = 1;
    kinds[nk++] = 0;
    for (int s = 0; s < t->slots; s++)
        kinds[nk++] = 2 + s;
    kinds[nk++] = LMT_MASTER;
    return nk;
}

/* GradScaler's update after a step: back off on an overflow, grow after a window of good steps */
static void scale_update(col_lm_trainer *t, bool overflow)
{
    if (t->dt != COL_F16)
        return;
    int64_t window = t->cfg.loss_scale_window > 0 ? t->cfg.loss_scale_window : GROWTH_WINDOW;
    if (overflow) {
        t->scale *= 0.5f;
        t->good = 0;
        t->skipped++;
    } else if (++t->good >= window) {
        t->scale *= 2.0f;
        t->good = 0;
    }
}

/* Pass 1 (with clipping, or f16 whose overflow must be known before any update): every gradient converted
 * once, its square sum added (the f32 step's order: tensor by tensor). */
static col_status grad_norm(col_lm_trainer *t, float inv, int na, double *sum, col_err *err)
{
    col_status st = COL_OK;
    for (int i = t->train0; i < t->nt && st == COL_OK; i++) {
        int64_t off, n = lmt_span(t, i, &off);
        if (n == 0)
            continue;
        void *g = NULL;
        st = lmt_get(t, 1, i, false, &g, err);
        if (st == COL_OK && lmt_next_chunk(t, 1, i) < t->nt)
            st = mt_stage_prefetch(t->stage, t->ref[t->nt + lmt_next_chunk(t, 1, i)], 1, err);
        if (st != COL_OK)
            break;
        col_opt_tensor o = {.g = t->conv, .n = n};
        widen(t->conv, (char *)g + off * (int64_t)col_dtype_size(t->dt), t->dt, o.n, inv, (float)na);
        *sum += col_grad_sumsq(&o, 1);
    }
    return st == COL_OK ? lmt_dp_sum_d(t, *sum, sum, err) : st;
}

col_status lmt_mixed_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, bool *skipped, col_err *err)
{
    bool f16 = t->dt == COL_F16, first_pass = clip > 0 || f16;
    float inv = f16 ? 1.0f / t->scale : 1.0f; /* a power of two: exact */
    double sum = 0;
    *norm = 0;
    *skipped = false;
    mt_stage_forget(t->stage);
    col_status st = first_pass ? grad_norm(t, inv, na, &sum, err) : COL_OK;
    if (st != COL_OK) {
        mt_stage_forget(t->stage);
        return st;
    }
    *norm = sqrt(sum);
    if (first_pass && !isfinite(*norm)) {
        mt_stage_forget(t->stage);
        if (f16) { /* an overflow: skip the step, nothing changes but the scale */
            *skipped = true;
            scale_update(t, true);
            return COL_OK;
        }
        return col_err_set(err, COL_EINVAL, "clip_grad_norm: total gradient norm is %g (non-finite gradients)", *norm);
    }
    int kinds[LMT_KINDS], nk = step_kinds(t, kinds);
    int64_t updates = t->step - t->skipped + 1; /* the optimizer's own count (bias corrections): skipped steps are not */
    size_t es = col_dtype_size(t->dt);
    for (int i = t->train0; i < t->nt && st == COL_OK; i++) {
        int64_t off, n = lmt_span(t, i, &off);
        if (n == 0)
            continue;
        void *p[LMT_KINDS] = {0};
        for (int k = 0; k < nk && st == COL_OK; k++)
            st = lmt_get(t, kinds[k], i, kinds[k] != 1, &p[kinds[k]], err);
        for (int k = 0; k < nk && st == COL_OK; k++) {
            int j = lmt_next_chunk(t, kinds[k], i);
            if (j < t->nt)
                st = mt_stage_prefetch(t->stage, t->ref[kinds[k] * t->nt + j], nk, err);
        }
        if (st != COL_OK)
            break;
        col_opt_tensor o = {.w = p[LMT_MASTER], .g = t->conv, .m = p[2], .v = p[3], .n = n, .decay = t->ot[i].decay};
        widen(t->conv, (char *)p[1] + off * (int64_t)es, t->dt, o.n, inv, (float)na);
        if (clip > 0)
            col_clip_grad_scale(&o, 1, clip, *norm);
        else if (!first_pass)
            sum += col_grad_sumsq(&o, 1);
        st = col_opt_step(&t->cfg.opt, lr, updates, &o, 1, err);
        if (st == COL_OK)
            narrow((char *)p[0] + off * (int64_t)es, t->dt, o.w, o.n);
    }
    if (st == COL_OK && !first_pass && (st = lmt_dp_sum_d(t, sum, &sum, err)) == COL_OK)
        *norm = sqrt(sum);
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    mt_stage_forget(t->stage);
    if (st == COL_OK)
        scale_update(t, false);
    return st;
}
