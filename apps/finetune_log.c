/* finetune_log.c - what each step of colossal-finetune shows and records: the progress line (fitted to the
 * terminal), the statistics for colossal-top and --tui, and the run's logs in --out (train_log.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "finetune.h"
#include "memtier.h"
#include "mt_resident.h"
#include "progress.h"
#include "statpub.h"
#include "timer.h"
#include "top_view.h"
#include "units.h"

typedef ft_run run;

static void fmt_secs(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

void ft_progress(run *r, const col_lm_step_info *info, double tok_s, double elapsed)
{
    const ft_opts *o = &r->o;
    /* what this step wrote to NVMe (SSD endurance is a cost): includes any save since the last step */
    uint64_t nvme_total = mt_nvme_bytes_written(col_lm_trainer_pool(r->tr)), nvme_step = nvme_total - r->nvme_written;
    r->nvme_written = nvme_total;
    if (o->json) {
        /* %.9g: the float loss exactly, so runs can be compared bit for bit */
        printf("{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tok_per_s\":%.1f,\"elapsed_s\":%.3f,"
               "\"compute_s\":%.4f,\"wait_s\":%.4f,\"optim_s\":%.4f,\"nvme_written\":%llu,\"loss_scale\":%.9g,"
               "\"skipped\":%lld}\n",
               (long long)info->step, info->loss, info->lr, info->grad_norm, tok_s, elapsed, info->compute_s,
               info->wait_s, info->optim_s, (unsigned long long)nvme_step, info->loss_scale,
               (long long)info->skipped_total);
        fflush(stdout);
    }
    mt_pool_stats ms;
    mt_stats(col_lm_trainer_pool(r->tr), &ms);
    /* the compute tier: the activation arena, plus the chunk copies when it has a budget */
    size_t compute = col_lm_trainer_arena_bytes(r->tr), on_nvme = 0;
    mt_resident *ct = col_lm_trainer_compute_tier(r->tr);
    if (ct) {
        mt_resident_stats rs;
        mt_resident_get_stats(ct, &rs);
        compute = rs.peak;
    }
    for (int k = 0; k < MT_NKINDS; k++)
        on_nvme += ms.bytes[k][MT_TIER_NVME];
    r->last = (train_log_step){.step = info->step, .loss = info->loss, .lr = info->lr, .grad_norm = info->grad_norm,
                               .tokens_per_s = tok_s, .elapsed_s = elapsed, .mem_compute = compute,
                               .mem_host = ms.host_bytes, .mem_nvme = on_nvme};
    if (o->json || (o->quiet && !r->tui))
        return;
    char eta[32], host[32], comp[96], nvme[32];
    fmt_secs((double)(o->steps - info->step) * (elapsed / (double)(info->step - r->start_step)), eta, sizeof eta);
    col_fmt_bytes(host, sizeof host, ms.host_bytes);
    col_fmt_bytes(comp, sizeof comp, compute);
    col_fmt_bytes(nvme, sizeof nvme, on_nvme);
    size_t dfree, dtotal; /* on a GPU: its memory in use (every process's) and its size, beside the compute tier's */
    if (app_device_memory(&r->dev, &dfree, &dtotal)) {
        char du[32], dt[32];
        col_fmt_bytes(du, sizeof du, dtotal - dfree);
        col_fmt_bytes(dt, sizeof dt, dtotal);
        size_t k = strlen(comp);
        snprintf(comp + k, sizeof comp - k, " (%s %s/%s)", r->dev.name, du, dt);
    }
    /* in their order on the line; rank: what goes first when the line is too long (the highest) */
    char f_step[48], f_loss[32], f_lr[32], f_tok[32], f_eta[48], f_comp[128], f_host[48], f_nvme[48], line[512];
    snprintf(f_step, sizeof f_step, "step %lld/%d", (long long)info->step, o->steps);
    snprintf(f_loss, sizeof f_loss, "loss %.4f", info->loss);
    snprintf(f_lr, sizeof f_lr, "lr %.2e", info->lr);
    snprintf(f_tok, sizeof f_tok, "%.0f tok/s", tok_s);
    snprintf(f_eta, sizeof f_eta, "ETA %s", eta);
    snprintf(f_comp, sizeof f_comp, "mem: compute %s", comp);
    snprintf(f_host, sizeof f_host, "host %s", host);
    snprintf(f_nvme, sizeof f_nvme, "nvme %s", nvme);
    const progress_field fields[] = {{f_step, 0, NULL}, {f_loss, 1, NULL}, {f_lr, 3, NULL},   {f_tok, 4, NULL},
                                     {f_eta, 2, NULL},  {f_comp, 5, NULL}, {f_host, 6, " "}, {f_nvme, 7, " "}};
    int nf = (int)(sizeof fields / sizeof fields[0]);
    if (r->tui) { /* under the view, as wide as the screen */
        progress_fit(fields, nf, COLS - 2, line, sizeof line);
        top_tui_set_status(r->tui, line);
    } else if (r->tty) {
        if (r->cols == 0 || progress_resized())
            r->cols = progress_width(STDERR_FILENO);
        progress_fit(fields, nf, r->cols, line, sizeof line);
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
    } else if (info->step % ft_log_every(o) == 0 || info->step == o->steps || info->step == 1) {
        progress_fit(fields, nf, (int)sizeof line, line, sizeof line); /* a log file: the whole line */
        ft_say(r, "%s", line);
    }
}

void ft_publish(run *r, const col_lm_step_info *info, double tok_s, double step_s)
{
    if (!r->pub)
        return;
    mt_stats_data *d = r->sd;
    mt_stats_fill_from_pool(d, col_lm_trainer_pool(r->tr));
    ft_rl_publish(r, d); /* RLHF: each model's share, and the others' memory in the totals */
    d->tier_used[MT_TIER_GPU] = col_lm_trainer_arena_bytes(r->tr);
    d->tier_budget[MT_TIER_HOST] = r->o.mem.cpu_mem;
    d->nvme_written = mt_nvme_bytes_written(col_lm_trainer_pool(r->tr));
    d->link_bytes[MT_LINK_H2N] = d->nvme_written;
    d->link_bytes[MT_LINK_N2H] = mt_nvme_bytes_read(col_lm_trainer_pool(r->tr));
    app_stats_compute(d, &r->dev, col_lm_trainer_compute_tier(r->tr)); /* the device's memory, the compute tier */
    d->step = info->step;
    d->total_steps = r->o.steps;
    d->tokens_per_s = tok_s;
    mt_stats_push_loss(d, info->loss);
    /* what the trainer did not count (data loading, evaluation, this) goes with compute */
    double other = step_s - info->compute_s - info->wait_s - info->optim_s;
    mt_stats_add_step_times(d, info->compute_s + (other > 0 ? other : 0), info->wait_s, info->optim_s);
    ft_par_stats_step(&r->par, d);
    mt_stats_publish(r->pub, d);
}

void ft_log_start(run *r)
{
    if (r->tty)
        progress_watch_resize();
}

/* the logs, opened once the first step is done (a run that fails before leaves no directory behind) */
static col_status log_open(run *r, col_err *err)
{
    const ft_opts *o = &r->o;
    size_t ntrain = r->ds ? col_dataset_n_train(r->ds) : 0; /* (RLHF: examples, not tokens: no epoch) */
    double per_step = ntrain && !r->rl ? (double)o->batch * o->seq * o->grad_accum / (double)ntrain : NAN;
    col_status st = train_log_open(&r->log, o->out, o->resume[0] != 0, r->start_step, o->tensorboard, per_step, err);
    if (st != COL_OK)
        return st;
    r->logging = true;
    /* the sparkline of --tui and colossal-top goes on from the saved history */
    for (size_t i = 0; r->sd && i < r->log.n; i++)
        if (isfinite(r->log.pts[i].loss))
            mt_stats_push_loss(r->sd, r->log.pts[i].loss);
    return COL_OK;
}

col_status ft_log_step(run *r, col_err *err)
{
    if (!ft_par_leader(&r->par))
        return COL_OK;
    col_status st = r->logging ? COL_OK : log_open(r, err);
    return st == COL_OK ? train_log_step_done(&r->log, &r->last, err) : st;
}

col_status ft_log_eval(run *r, int64_t step, double eval_loss, col_err *err)
{
    return r->logging ? train_log_eval(&r->log, step, eval_loss, err) : COL_OK;
}

col_status ft_log_save(run *r, const char *stage, col_err *err)
{
    if (!r->logging)
        return COL_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/loss.png", stage);
    return train_log_plot(&r->log, path, err);
}

/* transformers' estimate of a step's floating point operations (PreTrainedModel.floating_point_ops): 6 x the
 * tokens of the step x the parameters outside the embeddings (token and learned positions; a tied head is the
 * token embedding), adapters included */
static double flos_per_step(const run *r)
{
    const col_lm_config *c = &r->src.config;
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    if (!specs)
        return NAN;
    col_lm_param_specs(c, specs);
    double n = 0;
    for (int i = 0; i < np; i++)
        if (specs[i].role != COL_ROLE_EMBED && specs[i].role != COL_ROLE_POS)
            n += (double)col_param_numel(&specs[i]);
    free(specs);
    int nt = r->tr ? col_lm_trainer_n_params(r->tr) : 0;
    for (int i = np; i < nt; i++) { /* LoRA adapters */
        const col_param_spec *s = NULL;
        col_lm_trainer_param(r->tr, i, &s);
        n += s ? (double)col_param_numel(s) : 0;
    }
    return 6.0 * (double)r->o.batch * r->o.seq * r->o.grad_accum * n;
}

cJSON *ft_log_history(const run *r, bool finished)
{
    if (!r->logging)
        return NULL;
    cJSON *h = train_log_history(&r->log, ft_log_every(&r->o));
    if (h && finished && !r->rl) {
        train_log_end e = {.step = ft_steps_done(r), .start_step = r->start_step,
                           .runtime_s = col_seconds() - r->train_t0,
                           .samples_per_step = (double)r->o.batch * r->o.grad_accum, .flos_per_step = flos_per_step(r)};
        cJSON *end = train_log_summary(&r->log, &e);
        if (end)
            cJSON_AddItemToArray(h, end);
    }
    return h;
}
