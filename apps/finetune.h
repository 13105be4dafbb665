/* finetune.h - colossal-finetune's pieces: the options (finetune_opts.c),
 * the run state saved beside the model (finetune_state.c) and the training
 * loop (finetune.c). */
#ifndef COL_APPS_FINETUNE_H
#define COL_APPS_FINETUNE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "apperr.h"
#include "device.h"
#include "memopts.h"
#include "memwatch.h"
#include "lm_source.h"
#include "sampling.h"
#include "mt_stats.h"
#include "dataset.h"
#include "lm_par.h"
#include "lm_trainer.h"
#include "optim.h"
#include "rlhf_rollout.h"
#include "train_log.h"

enum { FT_MAX_ARGS = 96 };

/* --method and the RLHF options (finetune_rl_opts.c); floats NaN / ints 0: the method's default */
typedef struct {
    col_rl_method method;
    float beta, gamma, label_smoothing, desirable_weight, undesirable_weight;
    char ref_model[4096], reward_model[4096], critic_model[4096];
    char reward[512];            /* grpo: "exact" or "regex:PATTERN" */
    bool no_ref;
    float kl_coef, clip_range, value_clip, vf_coef, gae_lambda, gamma_discount, score_clip;
    int num_generations, rollout_batch, ppo_epochs, max_new_tokens;
    float temperature, top_p;
    int top_k;
} ft_rl_opts;

typedef struct {
    /* what and where */
    char model[4096], data[4096], tokenizer[4096], out[4096], resume[4096];
    char chat_template[32];      /* "" = the model's own */
    bool embedded;               /* no MODEL: the embedded default run */
    /* batches */
    int steps, batch, seq, grad_accum;
    bool shuffle;
    uint64_t seed;
    double val_percent;
    size_t data_max;             /* the most data held in memory once decompressed; 0 = half the machine's memory */
    /* evaluation, samples, saving */
    int eval_every, eval_batches;
    bool eval_only;
    int sample_every, sample_len;
    char sample_prompt[256];
    float sample_temperature;
    int save_every;
    /* optimisation: NaN = the optimizer's default */
    col_opt_kind optimizer;
    float lr, beta1, beta2, eps, weight_decay, momentum;
    bool nesterov;
    col_lr_kind schedule;
    float min_lr_ratio;          /* lr_min = lr * ratio */
    int64_t warmup;
    float grad_clip;
    float dropout;               /* < 0: the model config's */
    bool checkpointing;
    col_dtype precision;         /* the compute dtype: f32, or bf16/f16 mixed precision (lm_trainer.h) */
    bool ignore_extra;           /* load MODEL's weights even with tensors the model does not use */
    mem_opts mem;                /* --cpu-mem, --gpu-mem, --chunk-size, --nvme-* */
    app_device_choice device;    /* --device (a runtime option: a run may resume on another device) */
    /* LoRA */
    int lora_rank;
    float lora_alpha;
    char lora_targets[256];
    bool merge_lora;
    /* several processes: 0 = the default (dp = processes / pp, pp 1, micro-batches pp) */
    int dp, pp, zero, micro_batches, virtual_stages;
    /* tensor and sequence parallelism (lm_par.h): 0 = none (1) */
    int tp, tp_depth, sp;        /* tp ranks, 2.5D's depth d, sequence-parallel ranks */
    col_tp_mode tp_mode;
    col_sp_mode sp_mode;
    bool tp_seq_split;           /* --tp-seq-split: Megatron's sequence-parallel regions under 1D */
    bool parallel_auto;          /* --parallel auto: the planner picks dp/tp/pp/sp, ZeRO and micro-batches */
    bool plan_only;              /* --plan-only: print the planner's ranking and exit */
    double comm_timeout;         /* seconds */
    /* output */
    bool json, quiet, overwrite, tui;
    bool tensorboard;            /* --tensorboard: TensorBoard event files in OUT/runs/ */
    ft_rl_opts rl;               /* --method and its options */
    /* the options as given (name, value) - what a resumed run replays */
    int nargs;
    char *arg_name[FT_MAX_ARGS], *arg_value[FT_MAX_ARGS];
} ft_opts;

/* ---- finetune_opts.c ---- */
/* Exit codes: 0 done, 1 error, 2 usage error, 130 interrupted (and saved). */
void ft_usage(FILE *f);
void ft_defaults(ft_opts *o);
/* Parses argv; on a usage error prints one line and returns false with
 * *exit_code 2 (or 0 for --help). */
bool ft_parse(int argc, char **argv, ft_opts *o, int *exit_code);
/* Sets one option by its long name ("lr", "batch", ...) from text; false
 * with a message in msg when the value is invalid or the name unknown. */
bool ft_set(ft_opts *o, const char *name, const char *value, char *msg, size_t n);
/* Options that do not change the math of a run and may differ on --resume. */
bool ft_runtime_option(const char *name);
/* The option (without "--") that sets s, named beside a library error that
 * marks s (apperr.h); NULL when no option of colossal-finetune does. */
const char *ft_flag_of(col_setting s);
/* The compute precision on a GPU when --precision is not given: bf16 (every GPU the CUDA backend accepts,
 * compute capability 8.0 and up, has bf16 tensor cores), except with LoRA (fp32 only for now). On an H100 a GPT-2 run in bf16 stayed within
 * 9e-4 of the CPU's fp32 losses (tools/gpu-check, docs/PERF.md). The CPU's default is fp32 (finetune_opts.c). */
#define FT_GPU_DEFAULT_PRECISION COL_BF16
/* whether option name (without "--") was given on the command line */
bool ft_given(const ft_opts *o, const char *name);
/* --precision's spelling of a compute dtype: fp32, bf16, fp16. */
const char *ft_precision_name(col_dtype dt);
/* An option's number: an integer in [lo, hi], a finite float in [lo, hi] (lo excluded when lo_open) */
bool ft_int_in(const char *v, long lo, long hi, int *out);
bool ft_num_in(const char *v, double lo, double hi, bool lo_open, float *out);
/* Records an option as given (for the run state); false when out of room. */
bool ft_remember(ft_opts *o, const char *name, const char *value);
void ft_free(ft_opts *o);
/* No MODEL: the embedded default run's options (gpt2-bytes on the bundled
 * corpus), with the options o was given on top; false with msg (n bytes)
 * when one of them is refused. */
bool ft_embedded_defaults(ft_opts *o, char *msg, size_t n);

/* ---- finetune_rl_opts.c ---- */
typedef struct {
    const char *name;
    bool has_arg;
} ft_rl_optdef;
extern const ft_rl_optdef ft_rl_optdefs[];
extern const int ft_rl_noptdefs;
extern const char ft_rl_help[];
void ft_rl_defaults(ft_rl_opts *r);
/* 1 set, 0 a bad value (message in msg), -1 not an RLHF option */
int ft_rl_set(ft_rl_opts *r, const char *name, const char *v, char *msg, size_t n);
/* After parsing: options of another method, a method's missing options (false with msg) */
bool ft_rl_check(const ft_opts *o, char *msg, size_t n);
/* The method's defaults for what was not given. */
void ft_rl_finish(ft_rl_opts *r);

/* ---- finetune_rl.c: --method rm|dpo|simpo|orpo|kto|ppo|grpo ---- */
typedef struct ft_rl ft_rl;
struct ft_run;
/* The run's steps done: the session's optimizer steps, or for ppo and grpo its rollouts (each followed by
 * --ppo-epochs optimizer steps) */
int64_t ft_steps_done(const struct ft_run *r);
/* rows of the trained session per step (pairs: 2 per pair; rollouts: prompts x generations) */
int ft_rl_rows(const ft_opts *o);
/* DATA as the method's examples (r->rl made), rendered with the chat template fam */
col_status ft_rl_open_data(struct ft_run *r, col_chat_family fam, col_err *err);
/* After the trained session is made: the reference, the reward model and the critic the method needs */
col_status ft_rl_open_models(struct ft_run *r, col_err *err);
/* One step of the method; tokens gets the tokens it processed, line a summary of its figures (--json: an object
 * of them is printed) */
col_status ft_rl_step(struct ft_run *r, col_lm_step_info *info, double *tokens, char *line, size_t n, col_err *err);
/* The held-out pairs (rm, dpo, simpo, orpo): whether there are enough, and their mean loss, margin, accuracy */
typedef struct {
    double loss, margin, accuracy;
    int batches;
} ft_rl_eval_out;
bool ft_rl_can_eval(const struct ft_run *r);
col_status ft_rl_eval(struct ft_run *r, ft_rl_eval_out *e, col_err *err);
/* --eval-only: rm prints every pair's rewards, the other pair methods the loss, margin and accuracy of DATA */
col_status ft_rl_eval_only(struct ft_run *r, col_err *err);
/* colossal-top: the share of each model of the method (policy, reference, reward model, critic) */
void ft_rl_publish(const struct ft_run *r, mt_stats_data *d);
void ft_rl_free(struct ft_run *r);

/* ---- finetune_par.c: several processes (mpirun, srun) ---- */
struct col_comm;
typedef struct {
    struct col_comm *world, *dp; /* NULL for a run of one process */
    struct col_comm *pipe;       /* the pipeline group (NULL without --pp) */
    int rank, size;              /* in the run */
    int dp_size, dp_rank;        /* the data parallel group: processes splitting a step's rows */
    int pp_size;                 /* pipeline stages (1 without --pp) */
    /* tensor and sequence parallelism (--tp, --sp): the tp x sp processes of a model-parallel group (mp, NULL
     * without), this process's place in the layout (lpar; lpar.ops NULL without), world rank r =
     * (d * pp + p) * (tp * sp) + s * tp + t */
    int tp_size, sp_size;
    struct col_comm *mp;
    col_lm_par lpar;
} ft_par;
/* Joins the run when a launcher started this process (MPI's environment): 0, or 1 after one line on stderr. A
 * process started alone is a run of one (p->world NULL). */
int ft_par_open(ft_opts *o, ft_par *p);
void ft_par_close(ft_par *p);
/* After the run's options are final (--resume replayed): the layout (--dp, --pp: D x P processes, the groups
 * split), the rows split between the groups and the micro-batches - else exit code 2 after one line from process
 * 0 (1 for a failure to split) - and the other processes made quiet. */
int ft_par_check(ft_opts *o, ft_par *p);
/* Once the model and the sequence length are known: its layers hold the pipeline's stages, and the tensor and
 * sequence parallel layout splits it (then p->lpar is opened) - else exit code 2 as above (1 for a failure to
 * split the processes). */
int ft_par_check_layers(const ft_opts *o, ft_par *p, const col_lm_config *c);
/* whether this process prints and writes files: process 0, or the only one */
static inline bool ft_par_leader(const ft_par *p) { return p->rank == 0; }
/* This process's rows of na micro-batches of batch rows of seq tokens, moved to the front of ids and tg. */
void ft_par_share(const ft_par *p, int batch, int seq, int na, int32_t *ids, int32_t *tg);
/* colossal-top: this process shown as a rank of the run - joining (collective: every process calls it, d NULL
 * for one without statistics) and the collectives' traffic before each publish. Nothing for a run of one. */
void ft_par_stats_join(const ft_par *p, mt_stats_data *d);
void ft_par_stats_step(const ft_par *p, mt_stats_data *d);
/* The bound of every wait on the run's communicators (seconds): raised while process 0 writes a save the others
 * wait for, which may take minutes for a large model. */
void ft_par_set_timeout(const ft_par *p, double seconds);
/* Whether every process succeeded (ok here): false on all when one failed. A process that succeeded gets in
 * why (may be NULL) the reason it is told otherwise: the collective's own error when the others cannot be
 * reached, else that another process failed. */
bool ft_par_all_ok(const ft_par *p, bool ok, col_err *why);

/* ---- finetune_state.c ---- */
typedef struct {
    int64_t step;                /* optimizer steps done */
    col_batch_state batches;     /* where the data stream stands */
    uint64_t data_tokens;        /* the data's token count and hash: resuming on other data is refused */
    uint64_t data_hash;
} ft_state;

/* (finetune_opts.c) --resume DIR: o becomes the options saved in DIR/trainer_state.json (its
 * state into *s) with the runtime options o was given on top; false with
 * err set (COL_EINVAL when an option given may not change on resume). */
bool ft_resume_options(ft_opts *o, ft_state *s, col_err *err);
/* Writes dir/trainer_state.json: the state plus the options to replay, and log_history (transformers' list of
 * logged steps and evaluations, train_log.h; taken over and freed; NULL: an empty list) beside global_step,
 * max_steps and logging_steps as transformers' TrainerState names them. */
col_status ft_state_write(const char *dir, const ft_opts *o, const ft_state *s, cJSON *log_history, col_err *err);
/* Reads dir/trainer_state.json into *s and replays its options into *o
 * (which holds the defaults). */
col_status ft_state_read(const char *dir, ft_opts *o, ft_state *s, col_err *err);
/* The same on the file's text (len bytes; path names it in messages). */
col_status ft_state_parse(const char *text, size_t len, const char *path, ft_opts *o, ft_state *s, col_err *err);
/* The output directory must be ours to replace: absent, empty, or an
 * earlier colossal-finetune output (then only with --resume or --overwrite, or
 * for the embedded default one that trained no further than it would; the
 * user's own files in it are kept, outdir.h). */
bool ft_check_out(const ft_opts *o, col_err *err);

/* ---- finetune.c and finetune_session.c: a run ---- */
struct col_lm_pipeline;
typedef struct ft_run {
    ft_opts o;
    ft_state state;
    col_lm_source src;
    col_dataset *ds;
    col_lm_trainer *tr;     /* the session; with --pp this process's first stage session (pipe owns it) */
    struct col_lm_pipeline *pipe;  /* --pp: this process's stages of the pipeline */
    app_device dev;         /* --device: the backend the graphs run on */
    int32_t *ids, *tg;      /* [grad_accum * batch * seq] */
    col_sampler sampler;
    bool tty;               /* progress on a terminal: one live line */
    double t0;
    int64_t start_step;     /* where this process started (for the ETA) */
    double train_t0;        /* when its first step began (transformers' train_runtime counts from there) */
    mt_stats_pub *pub;      /* statistics for colossal-top (NULL when shared memory is unavailable) */
    uint64_t nvme_written;  /* bytes written to the NVMe tier before this step */
    mt_stats_data *sd;
    mt_stats_snapshot *snap;
    struct top_tui *tui;           /* --tui */
    bool quiet_saved;
    struct col_outdir *od;         /* the output directory, locked for the run (NULL for --eval-only) */
    memwatch mw;            /* peak resident memory per phase, against the budgets' bound */
    ft_par par;             /* the run's processes (mpirun, srun); one without a launcher */
    ft_rl *rl;              /* --method other than sft: the method's data and models (finetune_rl.c) */
    train_log log;          /* metrics.jsonl, --tensorboard, loss.png (process 0 of a training run) */
    bool logging;           /* log is open */
    int cols;               /* the live line's width (0: to be asked) */
    train_log_step last;    /* the figures of the last progress line, which ft_log_step records */
    bool write_chat;        /* the data is chat, rendered with chat_family, which the model's tokenizer_config.json
                               does not name: the output's tokenizer_config.json gets it (save) */
    col_chat_family chat_family;
} ft_run;

/* A line above the live progress line (or a plain line on stdout); nothing with --quiet or --json. */
void ft_say(ft_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- finetune_log.c: what a step shows and records ---- */
/* The steps between two plain progress lines (not on a terminal), which are also transformers' logging_steps in
 * log_history: steps/20, at least 1. */
static inline int ft_log_every(const ft_opts *o) { return o->steps >= 20 ? o->steps / 20 : 1; }
/* The step's progress: a JSON line (--json), the live line fitted to the terminal, or a plain line every
 * steps/20 steps; with --tui the same line under the view. */
void ft_progress(ft_run *r, const col_lm_step_info *info, double tok_s, double elapsed);
/* The run's statistics for colossal-top and --tui. */
void ft_publish(ft_run *r, const col_lm_step_info *info, double tok_s, double step_s);
/* Before the first step: the live line's resize handler. */
void ft_log_start(ft_run *r);
/* Records a step (after ft_progress, whose figures it logs; before ft_publish) and an evaluation, on process 0.
 * The first step opens metrics.jsonl (and --tensorboard's events) in --out, the history resumed from it and put
 * into the loss ring (--tui's sparkline). */
col_status ft_log_step(ft_run *r, col_err *err);
col_status ft_log_eval(ft_run *r, int64_t step, double eval_loss, col_err *err);
/* Into a save's stage dir: loss.png; and transformers' log_history for trainer_state.json (NULL without logs),
 * ending with the summary Trainer.train() logs when finished is true (the run reached --steps). */
col_status ft_log_save(ft_run *r, const char *stage, col_err *err);
cJSON *ft_log_history(const ft_run *r, bool finished);

/* The training session of the run (finetune_session.c): the options as a trainer configuration, the session
 * made (with --pp this process's stages of a pipeline) and filled from MODEL's weights or the run resumed. */
col_status ft_make_session(ft_run *r, col_err *err);


#endif
