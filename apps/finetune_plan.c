/* finetune_plan.c - --parallel auto and --plan-only (finetune_plan.h). */
#include "finetune_plan.h"
#include "units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lm_parplan.h"
#include "plan_probe.h"

/* Layouts colossal-finetune cannot run yet (--plan-only with COLOSSAL_PLAN_ALL=1 still shows them): none now
 * (tensor and sequence parallelism run inside pipeline stages too). */
static const unsigned FT_PLAN_CANNOT = 0;

static int say_usage(const ft_par *p, const char *fmt, const char *a)
{
    if (p->rank == 0) {
        fprintf(stderr, "colossal-finetune: ");
        fprintf(stderr, fmt, a);
        fputc('\n', stderr);
    }
    return 2;
}

static int opt_state_bytes(const ft_opts *o)
{
    switch (o->optimizer) {
    case COL_OPT_SGD: return o->momentum > 0 ? 4 : 0; /* NaN (the default: none) compares false */
    case COL_OPT_LARS: return 4;
    default: return 8; /* AdamW, LAMB: two moments */
    }
}

static void json_entry(const col_plan_entry *e, int rank, const char *key)
{
    char name[128];
    col_plan_layout_name(&e->l, name, sizeof name);
    cJSON *j = cJSON_CreateObject(), *x = j;
    if (key)
        x = cJSON_AddObjectToObject(j, key);
    if (!j || !x) {
        cJSON_Delete(j);
        return;
    }
    if (rank > 0)
        cJSON_AddNumberToObject(x, "rank", rank);
    cJSON_AddStringToObject(x, "layout", name);
    cJSON_AddNumberToObject(x, "dp", e->l.dp);
    cJSON_AddNumberToObject(x, "tp", e->l.par.tp);
    cJSON_AddStringToObject(x, "tp_mode", col_tp_mode_name(e->l.par.mode));
    cJSON_AddNumberToObject(x, "tp_depth", e->l.par.d);
    cJSON_AddNumberToObject(x, "pp", e->l.pp);
    cJSON_AddNumberToObject(x, "sp", e->l.par.sp);
    cJSON_AddStringToObject(x, "sp_mode", col_sp_mode_name(e->l.par.sp_mode));
    cJSON_AddNumberToObject(x, "zero", e->l.zero);
    cJSON_AddNumberToObject(x, "micro_batches", e->l.micro_batches);
    cJSON_AddBoolToObject(x, "fits", e->fits);
    cJSON_AddNumberToObject(x, "step_s", e->t_step);
    cJSON_AddNumberToObject(x, "compute_s", e->t_compute);
    cJSON_AddNumberToObject(x, "memory_s", e->t_memory);
    cJSON_AddNumberToObject(x, "bubble_s", e->t_bubble);
    cJSON_AddNumberToObject(x, "dp_s", e->t_dp);
    cJSON_AddNumberToObject(x, "tp_s", e->t_tp);
    cJSON_AddNumberToObject(x, "sp_s", e->t_sp);
    cJSON_AddNumberToObject(x, "pp_s", e->t_pp);
    cJSON_AddNumberToObject(x, "nvme_s", e->t_nvme + e->t_tier);
    cJSON_AddNumberToObject(x, "dp_bytes", e->b_dp);
    cJSON_AddNumberToObject(x, "tp_bytes", e->b_tp);
    cJSON_AddNumberToObject(x, "sp_bytes", e->b_sp);
    cJSON_AddNumberToObject(x, "pp_bytes", e->b_pp);
    cJSON_AddNumberToObject(x, "states_bytes", e->params + e->grads + e->states);
    cJSON_AddNumberToObject(x, "activations_bytes", e->activations);
    cJSON_AddNumberToObject(x, "host_bytes", e->host);
    cJSON_AddNumberToObject(x, "nvme_bytes", e->nvme);
    cJSON_AddNumberToObject(x, "device_bytes", e->device);
    char *s = cJSON_PrintUnformatted(j);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(j);
}

static void set_layout(ft_opts *o, const col_plan_layout *l)
{
    o->dp = l->dp;
    o->pp = l->pp;
    o->tp = l->par.tp;
    o->tp_mode = l->par.mode;
    o->tp_depth = l->par.mode == COL_TP_25D ? l->par.d : 0;
    o->sp = l->par.sp;
    o->sp_mode = l->par.sp_mode;
    if (l->zero)
        o->zero = l->zero;
    o->micro_batches = l->pp > 1 ? l->micro_batches : 0;
}

int ft_plan(ft_opts *o, ft_par *p)
{
    static const char *const explicit[] = {"dp", "tp", "pp", "sp", "tp-mode", "sp-mode", "tp-depth"};
    for (size_t i = 0; i < sizeof explicit / sizeof explicit[0]; i++)
        if (ft_given(o, explicit[i]))
            return say_usage(p, o->parallel_auto ? "--parallel auto chooses the layout itself: leave out --%s (or "
                             "drop --parallel auto)" : "--plan-only ranks the layouts itself: leave out --%s",
                             explicit[i]);
    int world = p->size;
    const char *env = getenv("COLOSSAL_PLAN_PROCS");
    if (env && env[0] && p->size == 1) {
        int n = 0;
        if (!o->plan_only)
            return say_usage(p, "COLOSSAL_PLAN_PROCS plans another process count: it goes with --plan-only (start %s "
                             "under mpirun to train)", "the run");
        if (!ft_int_in(env, 1, 4096, &n))
            return say_usage(p, "COLOSSAL_PLAN_PROCS must be an integer in 1..4096 (got '%s')", env);
        world = n;
    }
    col_err err = {0};
    col_lm_source src;
    if (col_lm_source_open(o->model, o->tokenizer[0] ? o->tokenizer : NULL, false, &src, &err) != COL_OK) {
        if (p->rank == 0)
            fprintf(stderr, "colossal-finetune: %s\n", err.msg);
        return err.code == COL_EINVAL ? 2 : 1;
    }
    col_plan_input in = {.model = src.config, .batch = o->batch, .seq = o->seq, .world = world,
                         .device_bytes = o->mem.gpu_mem, .host_bytes = o->mem.cpu_mem, .nvme = o->mem.nvme_dir[0] != 0,
                         .precision = o->precision, .opt_state_bytes = opt_state_bytes(o),
                         .checkpointing = o->checkpointing, .exclude = FT_PLAN_CANNOT};
    col_lm_source_close(&src);
    if (!in.seq)
        in.seq = in.model.max_positions < 256 ? in.model.max_positions : 256;
    if (o->plan_only && getenv("COLOSSAL_PLAN_ALL") && atoi(getenv("COLOSSAL_PLAN_ALL")) == 1)
        in.exclude = 0;
    if (o->grad_accum > 1 || o->lora_rank || o->eval_only) /* what a pipeline refuses (ft_par_check, lm_pipeline.h) */
        in.exclude |= COL_PLAN_NO_PP;
    /* what a tensor- or sequence-parallel session refuses (lm_trainer_par.c): LoRA, mixed precision, the NVMe tier,
     * RLHF's per-token objectives */
    if (o->lora_rank || o->precision != COL_F32 || o->mem.nvme_dir[0] || o->rl.method != COL_RLM_SFT)
        in.exclude |= COL_PLAN_NO_TP | COL_PLAN_NO_SP;
    if (ft_given(o, "zero"))
        in.zero = o->zero;
    if (ft_given(o, "micro-batches"))
        in.micro_batches = o->micro_batches;
    /* the matmuls of an MLP's first product on one process's share of a step's tokens (at most 4 GFlop) */
    double tokens = (double)in.batch * in.seq / world;
    double kn = (double)in.model.hidden * (in.model.ffn < 4096 ? in.model.ffn : 4096);
    double m = tokens < 1024 ? tokens : 1024;
    if (2 * m * kn > 4e9)
        m = 4e9 / (2 * kn);
    plan_probe pr;
    if (plan_probe_run(p->size > 1 ? p->world : NULL, m < 16 ? 16 : (int)m, in.model.hidden,
                       in.model.ffn < 4096 ? in.model.ffn : 4096, &pr, &err) != COL_OK) {
        if (p->rank == 0)
            fprintf(stderr, "colossal-finetune: the planner's probe failed: %s\n", err.msg);
        return 1;
    }
    in.rates = pr.rates;
    col_plan_entry *e = NULL;
    int n = 0;
    if (col_plan_rank(&in, &e, &n, &err) != COL_OK) {
        if (p->rank == 0)
            fprintf(stderr, "colossal-finetune: the planner: %s\n", err.msg);
        return err.code == COL_EINVAL ? 2 : 1;
    }
    bool lead = p->rank == 0;
    int rc = 0;
    char line[512], name[128];
    if (n == 0) {
        snprintf(line, sizeof line, "no layout of %d processes suits %.200s with --batch %d --seq %d: the rows must "
                 "split between the data parallel groups and the pipelines' micro-batches (try a --batch with more "
                 "divisors)", world, o->model, in.batch, in.seq);
        rc = say_usage(p, "%s", line);
    } else if (!e[0].fits && !o->plan_only) {
        col_plan_layout_name(&e[0].l, name, sizeof name);
        snprintf(line, sizeof line, "no layout of %d processes fits the memory budgets (the smallest, %s: %s): raise "
                 "--cpu-mem or --gpu-mem, or give --nvme-dir", world, name, e[0].why_not);
        rc = say_usage(p, "%s", line);
    }
    if (lead && n > 0) {
        if (o->plan_only && o->json) {
            for (int i = 0; i < n; i++)
                json_entry(&e[i], i + 1, NULL);
        } else if (o->plan_only) {
            printf("planner: %d processes, %s, %d rows x %d tokens per step; rates: %.3g GFlop/s per process, link "
                   "%.3g GB/s and %.3g us per message, memory %.3g GB/s (%s, %.2f s)\n",
                   world, o->model, in.batch, in.seq, in.rates.flops / 1e9, in.rates.link_bw / 1e9,
                   in.rates.link_lat * 1e6, in.rates.mem_bw / 1e9, pr.from_cache ? "cached" : "measured", pr.seconds);
            if (pr.note[0])
                printf("note: %s\n", pr.note);
            size_t cap = 64 * 1024;
            char *buf = malloc(cap);
            if (buf) {
                col_plan_format(&in, e, n, 10, buf, cap);
                fputs(buf, stdout);
                free(buf);
            }
            if (n > 10)
                printf("(%d layouts in all)\n", n);
        }
        if (e[0].fits) {
            col_plan_explain(&in, &e[0], line, sizeof line);
            col_plan_layout_name(&e[0].l, name, sizeof name);
            char ts[32];
            snprintf(ts, sizeof ts, "%.4g ms", e[0].t_step * 1e3);
            char ms[COL_BYTES_STR], ma[COL_BYTES_STR];
            col_fmt_bytes(ms, sizeof ms, (uint64_t)(e[0].params + e[0].grads + e[0].states));
            col_fmt_bytes(ma, sizeof ma, (uint64_t)e[0].activations);
            if (o->json && !o->plan_only)
                json_entry(&e[0], 0, "plan");
            else if (!o->json)
                fprintf(o->plan_only ? stdout : stderr, "planner: chose %s: predicted step %s, model states %s "
                        "+ activations %s per process; %s\n", name, ts, ms, ma, line);
        } else if (o->plan_only) {
            col_plan_layout_name(&e[0].l, name, sizeof name);
            fprintf(stderr, "colossal-finetune: no layout of %d processes fits the memory budgets (the smallest, %s: "
                    "%s): raise --cpu-mem or --gpu-mem, or give --nvme-dir\n", world, name, e[0].why_not);
            rc = 2;
        }
        fflush(stdout);
    } else if (o->plan_only && n > 0 && !e[0].fits) {
        rc = 2;
    }
    if (rc == 0 && n > 0) {
        if (o->plan_only)
            rc = FT_PLAN_DONE;
        else
            set_layout(o, &e[0].l);
    }
    free(e);
    return rc;
}
