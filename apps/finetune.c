/* colossal-finetune - trains a language model (GPT-2, OPT, LLaMA; full or
 * LoRA) on text, llm.c token files or chat data, and writes it as a Hugging
 * Face model directory that also holds what --resume needs to continue the
 * run bit for bit. With no arguments it runs the embedded default: a small
 * byte-level GPT trained from scratch on the bundled corpus. */
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend.h"
#include "chat_sft.h"
#include "finetune.h"
#include "finetune_plan.h"
#include "lm_source.h"
#include "memtier.h"
#include "memwatch.h"
#include "mt_resident.h"
#include "mt_stats.h"
#include "outdir.h"
#include "lm_pipeline.h"
#include "procsetup.h"
#include "sampling.h"
#include "top_view.h"
#include "timer.h"
#include "termsafe.h"

/* Ctrl-C / SIGTERM: finish the step, save, exit 130. The one piece of global
 * state: a signal handler can reach nothing else. SA_RESETHAND makes a
 * second Ctrl-C stop the program at once. */
static volatile sig_atomic_t g_interrupted;
static void on_signal(int sig) { g_interrupted = sig; }

typedef ft_run run; /* (finetune.h) */

static double now(void) { return col_seconds(); }

/* one line for a failed call: the message, and the option of the setting at fault */
/* With several processes, process 0 speaks for the run; another one only about the others (a timeout, a dead
 * process), which process 0 may be unable to report. */
static int fail_on(const ft_par *p, const col_err *e)
{
    if (p && !ft_par_leader(p)) {
        if (e->code == COL_EIO && strstr(e->msg, "comm: "))
            fprintf(stderr, "colossal-finetune: process %d: %s\n", p->rank, e->msg);
        return 1;
    }
    char line[APP_ERR_LINE_MAX];
    fprintf(stderr, "colossal-finetune: %s\n", app_err_line(e, ft_flag_of, line, sizeof line));
    return 1;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* a path given on the command line, made absolute so --resume works from
 * any directory (names that are not files - presets, hub ids - stay as they are) */
static void absolutize(char *p, size_t n)
{
    char buf[PATH_MAX];
    if (p[0] && exists(p) && realpath(p, buf) && strlen(buf) < n)
        snprintf(p, n, "%s", buf);
}

/* --out (or --resume), opened and locked for the whole run: its path from
 * here on is the normalised one (no trailing slash) */
static int open_out(run *r, col_err *err)
{
    ft_opts *o = &r->o;
    char *dir = o->resume[0] ? o->resume : o->out;
    col_status st = col_outdir_open(dir, 0, &r->od, err);
    if (st != COL_OK) {
        if (o->resume[0]) { /* the directory came from --resume: name that option, not --out */
            err->settings &= ~(1u << COL_SETTING_OUTPUT_DIR);
            col_err_prefix(err, "--resume");
        }
        return st == COL_EINVAL || st == COL_EBUSY ? 2 : 1;
    }
    snprintf(dir, sizeof o->out, "%s", col_outdir_path(r->od));
    return 0;
}

/* writes the whole output directory at once (outdir.h) */
enum { SAVE_TIMEOUT_S = 3600 };

/* With several processes every one takes part (the tensors come to process 0 chunk by chunk); process 0 alone
 * writes, and all agree on the outcome. */
static col_status save(run *r, bool final, col_err *err)
{
    const char *stage = "";
    bool leader = ft_par_leader(&r->par);
    /* LoRA: checkpoints keep base + adapter (resumable); the final export may merge */
    unsigned flags = final && r->o.merge_lora ? COL_SAVE_MERGE_LORA : 0;
    col_status st = leader ? col_outdir_begin(r->od, &stage, err) : COL_OK;
    if (!ft_par_all_ok(&r->par, st == COL_OK, err)) {
        if (st == COL_OK && leader)
            col_outdir_abort(r->od);
        return st != COL_OK ? st : err->code;
    }
    r->state.step = col_lm_trainer_steps(r->tr);
    /* the others wait while process 0 writes: not bounded by --comm-timeout (a large model takes minutes), but
     * still bounded: a process that dies during a save ends the others within the hour */
    ft_par_set_timeout(&r->par, r->o.comm_timeout > SAVE_TIMEOUT_S ? r->o.comm_timeout : SAVE_TIMEOUT_S);
    if (r->pipe)
        st = col_lm_pipeline_save(r->pipe, stage, true, err);
    else if ((st = col_lm_trainer_save_model_ex(r->tr, stage, flags, err)) == COL_OK)
        st = col_lm_trainer_save_optimizer(r->tr, stage, err);
    if (st == COL_OK && leader &&
        (st = col_lm_source_copy_tokenizer(&r->src, stage, err)) == COL_OK &&
        (st = ft_log_save(r, stage, err)) == COL_OK &&
        (!r->write_chat || (st = col_lm_source_write_chat_template(&r->src, stage, r->chat_family, err)) == COL_OK) &&
        (st = ft_state_write(stage, &r->o, &r->state, ft_log_history(r, final), err)) == COL_OK)
        st = col_outdir_commit(r->od, err);
    if (st != COL_OK && leader)
        col_outdir_abort(r->od); /* a stage that could not be put in place is kept (the message says where) */
    if (!ft_par_all_ok(&r->par, st == COL_OK, err) && st == COL_OK)
        st = err->code;
    ft_par_set_timeout(&r->par, r->o.comm_timeout);
    return st;
}

/* the default --data-max: half of the machine's physical memory (1 GiB when it cannot be told) */
static size_t default_data_max(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)1 << 30;
    return (size_t)pages / 2 * (size_t)page;
}

static col_status open_data(run *r, col_err *err)
{
    const ft_opts *o = &r->o;
    /* chat data goes through the model's template (or --template; ChatML when the model names none) */
    col_chat_family fam = COL_CHAT_CHATML;
    col_status st = COL_OK;
    if (o->chat_template[0])
        st = col_chat_family_parse(o->chat_template, &fam, err);
    else if (r->src.has_chat)
        fam = r->src.chat;
    else if (r->src.chat_unknown[0] && col_dataset_is_chat_path(o->data))
        /* the model has a template of its own: training its chats in another format would be wrong */
        return col_err_set(err, COL_EUNSUPPORTED, "the model's chat template is not one colossal knows (%s); choose "
                           "the format of the chat data with --template llama2|llama3|chatml|plain",
                           r->src.chat_unknown);
    /* the output, a chat model now, names its template (unless the model's own, kept as it is, was used) */
    r->chat_family = fam;
    r->write_chat = st == COL_OK && col_dataset_is_chat_path(o->data) && !(r->src.has_chat && r->src.chat == fam);
    if (st == COL_OK && o->rl.method != COL_RLM_SFT)
        return ft_rl_open_data(r, fam, err);
    col_chat_sft *sft = NULL;
    if (st == COL_OK)
        st = col_chat_sft_new(fam, &sft, err);
    if (st != COL_OK)
        return st;
    col_dataset_opts dopts = {.tok = r->src.tok, .vocab_size = r->src.config.vocab_size, .val_percent = o->val_percent,
                              .tmpl = col_chat_sft_tmpl(sft)};
    dopts.max_bytes = o->data_max ? o->data_max : default_data_max();
    st = col_dataset_load(o->data, &dopts, &r->ds, err);
    if (st == COL_ENOMEM && strstr(err->msg, "limit")) {
        char why[COL_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        col_err_set(err, st, "%.400s: raise --data-max, or give the data as an uncompressed llm.c token file "
                    "(.bin), which is mapped rather than read into memory", why);
    }
    col_chat_sft_free(sft);
    if (st != COL_OK)
        return st;
    int64_t need = o->shuffle ? (int64_t)o->seq + 1 : (int64_t)o->batch * o->seq + 1;
    size_t ntrain = col_dataset_n_train(r->ds);
    if (!o->eval_only && (int64_t)ntrain < need)
        return col_err_set(err, COL_EINVAL,
                           "%s has %zu training tokens; --batch %d --seq %d needs at least %lld: use a smaller --seq "
                           "or --batch, or more data", o->data, ntrain, o->batch, o->seq, (long long)need);
    r->state.data_tokens = col_dataset_n_tokens(r->ds);
    r->state.data_hash = col_dataset_hash(r->ds);
    return COL_OK;
}

/* mean loss over the first eval_batches validation batches; NAN when the
 * validation split is shorter than one batch */
static col_status evaluate(run *r, double *loss, int *nb, col_err *err)
{
    int64_t avail = col_dataset_n_val_batches(r->ds, r->o.batch, r->o.seq);
    int n = avail < r->o.eval_batches ? (int)avail : r->o.eval_batches;
    *nb = n;
    *loss = NAN;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        float l;
        col_status st = col_dataset_val_batch(r->ds, k, r->o.batch, r->o.seq, r->ids, r->tg, err);
        ft_par_share(&r->par, r->o.batch, r->o.seq, 1, r->ids, r->tg);
        if (st == COL_OK)
            st = col_lm_trainer_eval(r->tr, r->ids, r->tg, &l, NULL, err);
        if (st != COL_OK)
            return st;
        sum += l;
    }
    if (n > 0)
        *loss = sum / n;
    return COL_OK;
}

/* a sample of sample_len tokens after the prompt (or the first tokens of
 * the validation data); *text is malloc'ed */
static col_status sample(run *r, char **text, col_err *err)
{
    const ft_opts *o = &r->o;
    const col_lm_config *c = &col_lm_trainer_config(r->tr)->model;
    int32_t *prompt = NULL;
    size_t np = 0;
    col_status st;
    *text = NULL;
    if (!r->src.tok)
        return col_err_set(err, COL_EINVAL, "samples need a tokenizer");
    if (o->sample_prompt[0]) {
        if ((st = col_tok_encode(r->src.tok, o->sample_prompt, strlen(o->sample_prompt), false, &prompt, &np, err)) != COL_OK)
            return st;
    } else {
        np = 8;
        prompt = malloc(np * sizeof *prompt);
        if (!prompt)
            return col_err_set(err, COL_ENOMEM, "sample: out of memory");
        size_t from = col_dataset_n_train(r->ds), nval = col_dataset_n_tokens(r->ds) - from;
        if (nval < np)
            from = 0, nval = col_dataset_n_tokens(r->ds);
        np = nval < np ? nval : np;
        for (size_t i = 0; i < np; i++)
            prompt[i] = col_dataset_token_at(r->ds, from + i);
    }
    int len = (int)np + o->sample_len;
    if (len > c->max_positions)
        len = c->max_positions;
    if (np == 0 || (int)np >= len) {
        free(prompt);
        return col_err_set(err, COL_EINVAL, "sample prompt of %zu tokens leaves no room in the model's %d positions",
                           np, c->max_positions);
    }
    int32_t *seq = malloc((size_t)len * sizeof *seq);
    if (!seq) {
        free(prompt);
        return col_err_set(err, COL_ENOMEM, "sample: out of memory");
    }
    memcpy(seq, prompt, np * sizeof *seq);
    free(prompt);
    col_sample_opts so = col_sample_defaults();
    so.temperature = o->sample_temperature;
    so.seed = o->seed + (uint64_t)col_lm_trainer_steps(r->tr);
    const float *lg;
    int n = (int)np;
    st = col_lm_trainer_decode_reset(r->tr, len, err);
    if (st == COL_OK)
        st = col_lm_trainer_decode(r->tr, seq, n, &lg, err);
    while (st == COL_OK && n < len) {
        if ((st = col_sample(&r->sampler, lg, seq, n, &so, (uint64_t)n, &seq[n], err)) != COL_OK)
            break;
        n++;
        if (seq[n - 1] == col_tok_eos_id(r->src.tok) || n == len)
            break;
        st = col_lm_trainer_decode(r->tr, &seq[n - 1], 1, &lg, err);
    }
    size_t tl;
    if (st == COL_OK)
        st = col_tok_decode(r->src.tok, seq, (size_t)n, true, text, &tl, err);
    free(seq);
    return st;
}

void ft_say(run *r, const char *fmt, ...)
{
    if (r->o.quiet || r->o.json)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (r->tty)
        fputs("\r\033[K", stderr), vfprintf(stderr, fmt, ap), fputc('\n', stderr);
    else
        vprintf(fmt, ap), putchar('\n'), fflush(stdout);
    va_end(ap);
}

/* a sample's text: model output, so on a terminal its control characters are shown, not sent (termsafe.h) */
static void say_sample(run *r, long long step, const char *text)
{
    if (r->o.quiet || r->o.json)
        return;
    FILE *f = r->tty ? stderr : stdout;
    if (r->tty)
        fputs("\r\033[K", f);
    fprintf(f, "sample at step %lld:\n", step);
    if (isatty(fileno(f)))
        term_safe_puts(f, text);
    else
        fputs(text, f);
    fputs("\n\n", f);
    fflush(f);
}

static void json_event(const char *key, double step, const char *skey, const char *sval, const char *nkey, double nval)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, key, step);
    if (skey)
        cJSON_AddStringToObject(j, skey, sval);
    if (nkey)
        cJSON_AddNumberToObject(j, nkey, nval);
    char *s = cJSON_PrintUnformatted(j);
    if (s)
        puts(s), fflush(stdout);
    free(s);
    cJSON_Delete(j);
}

static int train(run *r)
{
    ft_opts *o = &r->o;
    col_err err = {0};
    int eval_every = o->eval_every > 0 ? o->eval_every : (o->steps >= 10 ? o->steps / 10 : 1);
    bool can_eval = r->rl ? ft_rl_can_eval(r) : col_dataset_n_val_batches(r->ds, o->batch, o->seq) > 0 && !r->pipe;
    /* generation under tensor parallelism: not with sequence parallelism yet (lm_trainer.h) */
    bool can_sample = !r->pipe && r->par.sp_size == 1;
    if (r->pipe && (o->eval_every > 0 || o->sample_every > 0 || o->val_percent > 0))
        ft_say(r, "note: a pipelined run (--pp) does not evaluate or sample yet: training only");
    else if (!can_sample && o->sample_every > 0)
        ft_say(r, "note: --sample-every: generation does not run under --sp yet: no samples");
    else if (!can_eval && o->val_percent > 0)
        ft_say(r, "note: the validation split is shorter than one batch of %d x %d tokens: no evaluation", o->batch, o->seq);
    col_batch_state bs = o->resume[0] ? r->state.batches
                                      : col_batch_state_init(o->shuffle ? COL_BATCH_SHUFFLED : COL_BATCH_SEQUENTIAL,
                                                             o->seed);
    int64_t n = (int64_t)o->batch * o->seq;
    double t_start = now();
    int rc = 0;
    r->start_step = ft_steps_done(r);
    r->train_t0 = t_start;
    ft_log_start(r);
    /* SA_RESTART: a signal during a save must not turn a write into EINTR */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (ft_steps_done(r) < o->steps && !g_interrupted) {
        double t_step = now();
        mw_enter(&r->mw, MW_TRAIN);
        col_status st = COL_OK;
        col_lm_step_info info;
        double tokens = (double)(n * o->grad_accum);
        char rl_line[256] = "";
        if (r->rl) {
            st = ft_rl_step(r, &info, &tokens, rl_line, sizeof rl_line, &err);
        } else {
            for (int k = 0; k < o->grad_accum && st == COL_OK; k++)
                st = col_dataset_next_batch(r->ds, &bs, o->batch, o->seq, r->ids + k * n, r->tg + k * n, &err);
            ft_par_share(&r->par, o->batch, o->seq, o->grad_accum, r->ids, r->tg); /* this process's rows */
            if (st == COL_OK)
                st = r->pipe ? col_lm_pipeline_step(r->pipe, r->ids, r->tg, &info, &err)
                             : col_lm_trainer_step(r->tr, r->ids, r->tg, &info, &err);
        }
        if (st != COL_OK) {
            ft_say(r, "%s", "");
            rc = fail_on(&r->par, &err);
            break;
        }
        r->state.batches = bs;
        double t = now();
        ft_progress(r, &info, tokens / (t - t_step), t - t_start);
        if (ft_log_step(r, &err) != COL_OK) {
            ft_say(r, "%s", "");
            col_err_prefix(&err, "the run's log");
            rc = fail_on(&r->par, &err);
            break;
        }
        ft_publish(r, &info, tokens / (t - t_step), t - t_step);
        if (rl_line[0] && !r->tty && (info.step % ft_log_every(o) == 0 || info.step == 1 ||
                                      info.step == o->steps))
            ft_say(r, "  %s", rl_line);
        if (r->tui) {
            mt_stats_pub_snapshot(r->pub, r->snap);
            if (top_tui_show(r->tui, r->snap))
                g_interrupted = SIGINT; /* q: stop as Ctrl-C does */
        }
        int64_t s = info.step;
        if (can_eval && (s % eval_every == 0 || s == o->steps)) {
            double vl;
            int nb;
            mw_enter(&r->mw, MW_EVAL);
            ft_rl_eval_out ev = {0};
            if ((r->rl ? ft_rl_eval(r, &ev, &err) : evaluate(r, &vl, &nb, &err)) != COL_OK) {
                rc = fail_on(&r->par, &err);
                break;
            }
            if (ft_log_eval(r, s, r->rl ? ev.loss : vl, &err) != COL_OK) {
                ft_say(r, "%s", "");
                rc = fail_on(&r->par, &err);
                break;
            }
            if (r->rl && o->json)
                printf("{\"step\":%lld,\"val_loss\":%.9g,\"val_margin\":%.9g,\"val_accuracy\":%.9g}\n", (long long)s,
                       ev.loss, ev.margin, ev.accuracy);
            else if (r->rl)
                ft_say(r, "step %lld: held-out pairs: loss %.4f  margin %.4f  accuracy %.2f (%d batches)", (long long)s,
                    ev.loss, ev.margin, ev.accuracy, ev.batches);
            else if (o->json)
                json_event("step", (double)s, NULL, NULL, "val_loss", vl);
            else
                ft_say(r, "step %lld: validation loss %.4f (%d batches)", (long long)s, vl, nb);
        }
        if (o->sample_every > 0 && (s % o->sample_every == 0 || s == o->steps) && r->src.tok && can_sample &&
            o->rl.method != COL_RLM_RM) {
            char *text = NULL;
            mw_enter(&r->mw, MW_EVAL);
            if (sample(r, &text, &err) != COL_OK) {
                rc = fail_on(&r->par, &err);
                break;
            }
            if (o->json)
                json_event("step", (double)s, "sample", text, NULL, 0);
            else
                say_sample(r, (long long)s, text);
            free(text);
        }
        col_err why = {0};
        if (!ft_par_all_ok(&r->par, !g_interrupted, &why) && !g_interrupted) { /* one process stopped: all stop */
            if (why.code != COL_EIO || strncmp(why.msg, "comm:", 5) != 0) {
                g_interrupted = SIGTERM;
            } else { /* the others are gone: nothing can be saved together */
                rc = fail_on(&r->par, &why);
                break;
            }
        }
        bool last = s == o->steps || g_interrupted;
        if (last || (o->save_every > 0 && s % o->save_every == 0)) {
            mw_enter(&r->mw, MW_SAVE);
            if (save(r, s == o->steps, &err) != COL_OK) {
                ft_say(r, "%s", "");
                col_err_prefix(&err, "saving step %lld", (long long)s);
                rc = fail_on(&r->par, &err);
                break;
            }
        }
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (r->tui) {
        top_tui_close(r->tui);
        r->tui = NULL;
        r->o.quiet = r->quiet_saved;
    }
    if (rc == 0 && g_interrupted) {
        ft_say(r, "%s", "");
        if (ft_par_leader(&r->par))
            fprintf(stderr, "colossal-finetune: interrupted: step %lld saved in %s; continue with --resume %s\n",
                (long long)ft_steps_done(r), o->out, o->out);
        return 130;
    }
    if (rc == 0 && !o->quiet && !o->json) {
        if (r->tty)
            fputc('\n', stderr);
        /* what this process did (a resumed run counts from where it started) */
        printf("done: %lld steps in %.1f s; the model is in %s/\n", (long long)(ft_steps_done(r) - r->start_step),
               now() - r->t0, o->out);
        if (r->src.tok)
            printf("talk to it: colossal-chat %s%s\n", o->out,
                   r->src.has_chat || r->write_chat ? ""
                   : o->embedded                          ? " --prompt \"And God said\""
                                                          : " --prompt \"...\"");
    }
    return rc;
}

static void cleanup(run *r)
{
    if (r->tui)
        top_tui_close(r->tui);
    mt_stats_destroy(r->pub);
    free(r->sd);
    free(r->snap);
    if (r->pipe)
        col_lm_pipeline_free(r->pipe); /* its stage sessions, r->tr among them */
    else
        col_lm_trainer_free(r->tr);
    col_dataset_free(r->ds);
    ft_rl_free(r);
    col_lm_source_close(&r->src);
    col_sampler_free(&r->sampler);
    app_device_close(&r->dev);
    ft_par_close(&r->par);
    free(r->ids);
    free(r->tg);
    col_err ignored;
    if (r->logging)
        train_log_close(&r->log, &ignored);
    col_outdir_close(r->od);
    ft_free(&r->o);
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    run r = {0};
    r.t0 = now();
    ft_opts *o = &r.o;
    col_err err = {0};
    char msg[512];
    int rc;
    mw_start(&r.mw);
    ft_defaults(o);
    if (!ft_parse(argc, argv, o, &rc)) {
        ft_free(o);
        return rc;
    }
    if (o->embedded && !ft_embedded_defaults(o, msg, sizeof msg)) {
        ft_free(o);
        return fprintf(stderr, "colossal-finetune: %s\n", msg), 2;
    }
    /* the run's processes (mpirun, srun) and their layout, before anything is opened */
    if ((rc = ft_par_open(o, &r.par)) != 0) {
        cleanup(&r);
        return rc;
    }
    bool leader = ft_par_leader(&r.par), agreed = false;
    /* the device first: a GPU asked for but not usable is refused before anything is written */
    if ((rc = app_device_open(&o->device, &r.dev, &err)) != 0) {
        fail_on(&r.par, &err);
        cleanup(&r);
        return rc;
    }
    if (r.dev.gpu) /* the GPU runtime's own host memory grows as kernels are first used (memwatch.h) */
        mw_set_runtime(&r.mw, MW_GPU_RUNTIME_ALLOWANCE);
    /* (a resumed run keeps what its state says; LoRA runs in fp32 only, lm_precision.c) */
    if (r.dev.gpu && !o->resume[0] && !ft_given(o, "precision") && o->lora_rank == 0)
        o->precision = FT_GPU_DEFAULT_PRECISION;
    /* --parallel auto, --plan-only: the planner sets the layout (or prints its ranking) before anything is written */
    if ((o->parallel_auto || o->plan_only) && (rc = ft_plan(o, &r.par)) != 0) {
        cleanup(&r);
        return rc == FT_PLAN_DONE ? 0 : rc;
    }
    if (leader && (o->resume[0] || !o->eval_only) && (rc = open_out(&r, &err)) != 0) {
        fail_on(&r.par, &err);
        cleanup(&r);
        return rc;
    }
    if (o->resume[0] && !ft_resume_options(o, &r.state, &err)) {
        rc = fail_on(&r.par, &err) + (err.code == COL_EINVAL);
        cleanup(&r);
        return rc;
    }
    if (o->resume[0] && o->rl.method != COL_RLM_SFT) {
        col_err_set(&err, COL_EUNSUPPORTED, "%s holds a --method %s run: resuming RLHF runs is not supported yet; "
                    "start it again (its last save is a model directory to start from)", o->resume,
                    col_rl_method_name(o->rl.method));
        rc = fail_on(&r.par, &err);
        cleanup(&r);
        return rc;
    }
    if ((rc = ft_par_check(o, &r.par)) != 0) {
        cleanup(&r);
        return rc;
    }
    if (o->resume[0] && r.state.step >= o->steps && !o->eval_only) {
        if (leader)
            printf("%s holds a finished run (%lld of %d steps): nothing to resume\n", o->resume, (long long)r.state.step,
               o->steps);
        cleanup(&r);
        return 0;
    }
    absolutize(o->model, sizeof o->model);
    absolutize(o->data, sizeof o->data);
    absolutize(o->tokenizer, sizeof o->tokenizer);
    r.tty = isatty(STDERR_FILENO) && !o->json && !o->quiet;
    rc = 1;
    if (leader && !o->eval_only && !ft_check_out(o, &err))
        goto out;
    if (col_lm_source_open(o->model, o->tokenizer[0] ? o->tokenizer : NULL, false, &r.src, &err) != COL_OK)
        goto out;
    if (r.src.config.value_head && o->rl.method != COL_RLM_RM) {
        col_err_set(&err, COL_EINVAL, "%s is a reward model (a value head, no language-model head): it trains with "
                    "--method rm only; give it to ppo or grpo as --reward-model", o->model);
        goto out;
    }
    if (o->seq == 0)
        o->seq = r.src.config.max_positions < 256 ? r.src.config.max_positions : 256;
    if ((rc = ft_par_check_layers(o, &r.par, &r.src.config)) != 0) {
        cleanup(&r);
        return rc;
    }
    rc = 1;
    if (o->seq > r.src.config.max_positions) {
        col_err_set(&err, COL_EINVAL, "--seq %d is longer than %s allows (%d positions)", o->seq, o->model,
                    r.src.config.max_positions);
        goto out;
    }
    uint64_t saved_tokens = r.state.data_tokens, saved_hash = r.state.data_hash;
    if (open_data(&r, &err) != COL_OK)
        goto out;
    if (o->resume[0] && (saved_tokens != r.state.data_tokens || saved_hash != r.state.data_hash)) {
        col_err_set(&err, COL_EFORMAT, "%s changed since the run started (other tokens): resuming needs the same data",
                    o->data);
        goto out;
    }
    size_t nb = (size_t)o->grad_accum * (size_t)o->batch * (size_t)o->seq;
    r.ids = malloc(nb * sizeof *r.ids);
    r.tg = malloc(nb * sizeof *r.tg);
    if (!r.ids || !r.tg) {
        col_err_set(&err, COL_ENOMEM, "out of memory for the batches");
        goto out;
    }
    char budget_line[256]; /* on a GPU without --gpu-mem: the compute tier's size from its free memory */
    if (app_device_default_budget(&r.dev, &o->mem.gpu_mem, budget_line, sizeof budget_line, &err) != 0)
        goto out;
    mw_enter(&r.mw, MW_LOAD);
    if (ft_make_session(&r, &err) != COL_OK ||
        col_sampler_init(&r.sampler, r.src.config.vocab_size, &err) != COL_OK)
        goto out;
    if (r.rl && ft_rl_open_models(&r, &err) != COL_OK)
        goto out;
    if (o->eval_only && r.rl) {
        mw_enter(&r.mw, MW_EVAL);
        if (ft_rl_eval_only(&r, &err) == COL_OK)
            rc = 0;
        goto out;
    }
    if (o->eval_only) {
        double vl;
        int nbat;
        mw_enter(&r.mw, MW_EVAL);
        if (evaluate(&r, &vl, &nbat, &err) != COL_OK)
            goto out;
        if (nbat == 0) {
            col_err_set(&err, COL_EINVAL, "the validation split of %s (%.1f%%) is shorter than one batch of %d x %d "
                        "tokens: raise --val-percent or lower --batch/--seq", o->data, o->val_percent, o->batch, o->seq);
            goto out;
        }
        if (o->json)
            json_event("step", (double)col_lm_trainer_steps(r.tr), NULL, NULL, "val_loss", vl);
        else if (leader)
            printf("validation loss %.6f over %d batches of %d x %d tokens\n", vl, nbat, o->batch, o->seq);
        rc = 0;
        goto out;
    }
    if (!o->quiet && !o->json) {
        const col_lm_config *c = &r.src.config;
        double total = (double)col_lm_trainer_param_count(r.tr), trained = (double)col_lm_trainer_trainable_count(r.tr);
        if (r.pipe) { /* r.tr holds one stage: count the whole model */
            col_param_spec *sp = calloc((size_t)col_lm_param_count(c), sizeof *sp);
            total = 0;
            if (sp) {
                col_lm_param_specs(c, sp);
                for (int i = 0; i < col_lm_param_count(c); i++)
                    total += (double)col_param_numel(&sp[i]);
            }
            free(sp);
            trained = total;
        }
        ft_say(&r, "model: %s (%s, %d layers, width %d, %.2fM parameters, %.2fM trained%s)", o->model,
            col_arch_name(c->arch), c->n_layer, c->hidden, total / 1e6, trained / 1e6,
            o->lora_rank ? " by LoRA" : r.src.weights || o->resume[0] ? "" : ", from scratch");
        if (r.par.size > 1 && r.par.tp_size * r.par.sp_size > 1) {
            char pp[64] = "";
            if (r.par.pp_size > 1)
                snprintf(pp, sizeof pp, " x %d pipeline stages (%d micro-batches)", r.par.pp_size, o->micro_batches);
            ft_say(&r, "%d processes: %d data parallel (ZeRO %d) x %d tensor parallel (%s) x %d sequence parallel (%s)%s",
                r.par.size, r.par.dp_size, o->zero, r.par.tp_size, col_tp_mode_name(o->tp_mode), r.par.sp_size,
                col_sp_mode_name(o->sp_mode), pp);
        }
        else if (r.par.size > 1)
            ft_say(&r, "%d processes: %d data parallel (ZeRO %d) x %d pipeline stages (%d micro-batches)", r.par.size,
                r.par.dp_size, o->zero, r.par.pp_size, o->micro_batches);
        if (r.rl)
            ft_say(&r, "data: %s: %lld examples for --method %s; %d rows of %d tokens per step, %s", o->data,
                (long long)r.state.data_tokens, col_rl_method_name(o->rl.method), ft_rl_rows(o), o->seq,
                o->shuffle ? "shuffled" : "in order");
        else
            ft_say(&r, "data: %s: %zu tokens, %zu for training; batch %d x %d%s, %s", o->data, col_dataset_n_tokens(r.ds),
                col_dataset_n_train(r.ds), o->batch, o->seq, o->grad_accum > 1 ? " with accumulation" : "",
                o->shuffle ? "shuffled" : "in order");
        ft_say(&r, "%s; %s to %d steps into %s/", r.dev.desc, o->resume[0] ? "resuming" : "training", o->steps, o->out);
        if (r.dev.note[0])
            ft_say(&r, "note: %s", r.dev.note);
        if (budget_line[0])
            ft_say(&r, "%s", budget_line);
    }
    if (mt_stats_create("colossal-finetune", &r.pub, &err) == COL_OK) {
        r.sd = calloc(1, sizeof *r.sd);
        r.snap = calloc(1, sizeof *r.snap);
        if (r.sd && r.snap)
            mt_stats_set_run(r.sd, o->model);
        else
            mt_stats_destroy(r.pub), r.pub = NULL;
    } else {
        ft_say(&r, "note: no statistics for colossal-top (%s)", err.msg);
        r.pub = NULL;
    }
    col_err_clear(&err);
    if (o->tui) {
        if (!r.pub || !(r.tui = top_tui_open("colossal-finetune"))) {
            col_err_set(&err, COL_EINVAL, "--tui needs a terminal (and shared memory for the statistics)");
            goto out;
        }
        r.quiet_saved = o->quiet;
        o->quiet = true;
        r.tty = false;
    }
    /* every process ready (a failure before this point meets this agreement at out:) */
    agreed = true;
    if (!ft_par_all_ok(&r.par, true, &err))
        goto out;
    ft_par_stats_join(&r.par, r.pub ? r.sd : NULL);
    rc = train(&r);
out:
    if (!agreed && rc != 0 && !o->eval_only)
        ft_par_all_ok(&r.par, false, NULL);
    if (r.tr && (rc == 0 || rc == 130) && (o->json || !o->quiet))
        mw_report(&r.mw, r.tr, o->json, stdout); /* peak resident memory against the budgets' bound */
    if (rc == 1 && err.msg[0])
        fail_on(&r.par, &err);
    cleanup(&r);
    return rc;
}
