/* test_tp_pp.c - tensor and sequence parallelism inside pipeline stages (lm_pipeline.h with cfg.par, lm_par.h)
 * under mpirun (tests/test_tp_pp.sh: 4, 8 and 16 processes; the 2.5D and 3D cases take 16).
 *
 * The layout is colossal-finetune's: world rank r = (d * P + p) * M + q with M = tp x sp; the model-parallel group
 * of (d, p) splits each stage's layers (or positions), the pipeline communicator joins equal (d, q), the data
 * parallel group equal (p, q). The reference is one process: every rank also runs a whole-model session on the
 * step's whole batch. For each layout of the world size and each family (GPT-2: tied embeddings, so the first and
 * the last stage share the vocabulary-parallel embedding's block; LLaMA: grouped key/value heads, its own head) it
 * compares
 *   - the first step's loss and gradient norm, and every parameter's gradient after it (each stage's blocks
 *     gathered whole, against the reference's tensor of the same global index; both clipped by the same norm) -
 *     the bar, 1e-5 relative, a gradient relative to its tensor's largest |value| (test_tp.c says why the
 *     key bias needs a floor);
 *   - the losses and gradient norms of 5 clipped AdamW steps, and the weights after them as one vector
 *     ||w - w_1|| / ||w_1|| over the whole model once (the tied embedding's last-stage copy compared on its own);
 *   - the pipeline's saved model.safetensors: whole tensors, equal to the stages' weights gathered (bit for bit)
 *     and to the reference's (as one vector, 1e-5); a fresh pipeline loaded from the directory (weights and
 *     optimizer states) takes the next step bit for bit as the one that saved it.
 * Targets hold -1s unevenly, so the micro-batches' weighting by their counted targets is exercised. Dropout off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "comm.h"
#include "hf_config.h"
#include "lm_par.h"
#include "lm_pipeline.h"
#include "lm_trainer.h"
#include "rng.h"
#include "testlib.h"
#include "mpi_testutil.h"

enum { B = 4, T = 8, V = 97, STEPS = 5 };

static col_backend be;
static col_comm *world;
static int rank, size;

typedef struct {
    const char *name;
    col_tp_mode mode;
    int tp, depth, sp;
    col_sp_mode sp_mode;
    int P, v, dp;
    int mb;        /* micro-batches */
} layout_case;

static const char *const llama_json =
    "{\"model_type\":\"llama\",\"vocab_size\":97,\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":4,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":32,\"rms_norm_eps\":1e-5,"
    "\"tie_word_embeddings\":false,\"attention_bias\":true}";

static bool model_of(int f, col_lm_config *c, col_err *err)
{
    if (f == 0) {
        *c = col_gpt2_config(V, 32, 32, 4, 4);
        return true;
    }
    return col_hf_parse_config(llama_json, strlen(llama_json), "test", c, err) == COL_OK;
}

static col_lm_train_config config(const col_lm_config *m, int rows, col_comm *dp, const col_lm_par *par)
{
    col_lm_train_config c = {
        .model = *m,
        .batch = rows, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 0.5f, .seed = 7,
        .dp = dp, .zero = 2,
        .par = par,
    };
    c.model.dropout = 0;
    return c;
}

/* step s's B rows; the -1s more frequent in later rows (the micro-batches count different targets) */
static void batch(int s, int32_t *ids, int32_t *tg)
{
    col_rng r;
    col_rng_init(&r, 900 + (uint64_t)s);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)col_rng_below(&r, V);
        tg[i] = col_rng_below(&r, 100) < (uint64_t)(5 + 10 * (i / T)) ? -1 : (int32_t)col_rng_below(&r, V);
    }
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

static double max_all(double x)
{
    double y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

static bool all_ok(bool ok)
{
    int mine = ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* every gradient of this process's stages gathered whole against ref's of the same global index: the worst
 * max |x - y| / max(max |y|, 1e-2 * the model's largest gradient), over every process */
static double compare_grads(col_lm_pipeline *pp, col_lm_trainer *ref, bool *ok, col_err *err)
{
    double top = 0, worst = 0;
    for (int i = 0; i < col_lm_trainer_n_params(ref); i++) {
        const col_param_spec *sp;
        col_lm_trainer_param(ref, i, &sp);
        const float *y = col_lm_trainer_grad(ref, i);
        for (int64_t j = 0; j < col_param_numel(sp); j++)
            top = fmax(top, fabs((double)y[j]));
    }
    for (int s = 0; *ok && s < col_lm_pipeline_n_stages(pp); s++) {
        col_lm_trainer *t = col_lm_pipeline_stage(pp, s, NULL, NULL, NULL);
        for (int i = 0; *ok && i < col_lm_trainer_n_params(t); i++) {
            int gi = col_lm_trainer_global_index(t, i);
            const col_param_spec *rs;
            const float *y = col_lm_trainer_param(ref, gi, &rs);
            y = col_lm_trainer_grad(ref, gi);
            int64_t n = col_param_numel(rs);
            float *x = malloc(sizeof(float) * (size_t)n);
            *ok = x && col_lm_trainer_gather(t, i, 1, x, err) == COL_OK;
            double d = 0, m = 1e-2 * top;
            for (int64_t j = 0; *ok && j < n; j++) {
                d = fmax(d, fabs((double)x[j] - y[j]));
                m = fmax(m, fabs((double)y[j]));
            }
            worst = fmax(worst, d / m);
            free(x);
        }
    }
    return max_all(*ok ? worst : INFINITY);
}

/* the weights of every stage gathered whole against ref's: ||w - w_1|| / ||w_1|| over the whole model once (the
 * lead of each model-parallel group of the first data parallel group adds them), *elements the elements covered;
 * the last stage's copy of a tied embedding on its own in *tied */
static double compare_weights(col_lm_pipeline *pp, col_lm_trainer *ref, bool lead, bool *ok, int64_t *elements,
                              double *tied, col_err *err)
{
    double sums[4] = {0}, all[4] = {0};
    int64_t covered = 0;
    for (int s = 0; *ok && s < col_lm_pipeline_n_stages(pp); s++) {
        int lo;
        col_lm_trainer *t = col_lm_pipeline_stage(pp, s, NULL, &lo, NULL);
        for (int i = 0; *ok && i < col_lm_trainer_n_params(t); i++) {
            int gi = col_lm_trainer_global_index(t, i);
            const col_param_spec *rs;
            const float *y = col_lm_trainer_param(ref, gi, &rs);
            int64_t n = col_param_numel(rs);
            float *x = malloc(sizeof(float) * (size_t)n);
            *ok = x && col_lm_trainer_gather(t, i, 0, x, err) == COL_OK;
            bool dup = gi == 0 && lo > 0; /* the last stage's copy of the tied embedding */
            for (int64_t j = 0; *ok && lead && j < n; j++) {
                sums[dup ? 2 : 0] += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                sums[dup ? 3 : 1] += (double)y[j] * y[j];
            }
            if (lead && !dup)
                covered += n;
            free(x);
        }
    }
    MPI_Allreduce(sums, all, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&covered, elements, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    *tied = sqrt(all[2] / (all[3] > 0 ? all[3] : 1));
    return sqrt(all[0] / (all[1] > 0 ? all[1] : 1));
}

/* the pipeline saved (collective), then model.safetensors read back: every process compares its stages' tensors
 * gathered whole with the file's bit for bit (*bits: the largest difference anywhere), and the file's weights
 * against ref's as one vector ||w_file - w_1|| / ||w_1|| (returned; INFINITY when a tensor is missing or not
 * whole); optimizer.safetensors written too */
static double check_saved(col_lm_pipeline *pp, col_lm_trainer *ref, char *dir, bool *ok, double *bits,
                          col_err *err)
{
    int made = rank == 0 && mkdtemp(dir) ? 1 : 0;
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(dir, 64, MPI_CHAR, 0, MPI_COMM_WORLD);
    *ok = made && col_lm_pipeline_save(pp, dir, true, err) == COL_OK;
    *ok = all_ok(*ok);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    col_ckpt *ck = NULL;
    *ok = *ok && col_ckpt_open(path, &ck, err) == COL_OK;
    double d = 0, m = 0, diff = 0;
    for (int i = 0; *ok && i < col_lm_trainer_n_params(ref); i++) {
        const col_param_spec *sp;
        const float *y = col_lm_trainer_param(ref, i, &sp);
        int64_t n = col_param_numel(sp);
        float *x = malloc(sizeof(float) * (size_t)n);
        const col_ckpt_tensor *ct = col_ckpt_find(ck, sp->name);
        *ok = x && ct && col_ckpt_read_f32(ct, sp->ndim, sp->shape, x, err) == COL_OK;
        for (int64_t j = 0; *ok && j < n; j++) {
            d += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
            m += (double)y[j] * y[j];
        }
        free(x);
    }
    for (int s = 0; *ok && s < col_lm_pipeline_n_stages(pp); s++) {
        col_lm_trainer *t = col_lm_pipeline_stage(pp, s, NULL, NULL, NULL);
        for (int i = 0; *ok && i < col_lm_trainer_n_params(t); i++) {
            const col_param_spec *sp;
            col_lm_trainer_param(ref, col_lm_trainer_global_index(t, i), &sp);
            int64_t n = col_param_numel(sp);
            float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
            const col_ckpt_tensor *ct = col_ckpt_find(ck, sp->name);
            *ok = x && y && ct && col_lm_trainer_gather(t, i, 0, x, err) == COL_OK &&
                  col_ckpt_read_f32(ct, sp->ndim, sp->shape, y, err) == COL_OK;
            for (int64_t j = 0; *ok && j < n; j++)
                diff = fmax(diff, fabs((double)x[j] - y[j]));
            free(x), free(y);
        }
    }
    col_ckpt_close(ck);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    *ok = *ok && access(path, R_OK) == 0;
    *ok = all_ok(*ok);
    *bits = max_all(*ok ? diff : INFINITY);
    return max_all(*ok ? sqrt(d / (m > 0 ? m : 1)) : INFINITY);
}

static void run_case(const layout_case *L, int f)
{
    col_err err = {0};
    char detail[COL_ERR_MSG_MAX + 200] = "";
    col_lm_config m;
    if (!model_of(f, &m, &err)) {
        tl_mpi_check(false, err.msg, "%s: the model config", L->name);
        return;
    }
    const char *fam = col_arch_name(m.arch);
    int Mq = L->tp * L->sp, q = rank % Mq, p = (rank / Mq) % L->P, d = rank / (Mq * L->P);
    col_comm *mp = NULL, *pipe = NULL, *dp = NULL;
    bool ok = (Mq == 1 || col_comm_split(world, d * L->P + p, q, &mp, &err) == COL_OK) &&
              col_comm_split(world, d * Mq + q, p, &pipe, &err) == COL_OK &&
              (L->dp == 1 || col_comm_split(world, p * Mq + q, d, &dp, &err) == COL_OK);
    col_par_layout l = {.mode = L->mode, .tp = L->tp, .d = L->depth, .sp = L->sp, .sp_mode = L->sp_mode};
    col_lm_par par = {0};
    int rows = B / L->dp;
    ok = ok && col_par_layout_check(&l, &m, T, rows / L->mb, &err) == COL_OK && col_lm_par_open(&par, &l, mp, &err) == COL_OK;
    col_lm_train_config rc = config(&m, B, NULL, NULL);
    col_lm_pipeline_config pc = {.train = config(&m, rows, dp, &par), .pipe = pipe, .micro_batches = L->mb,
                                 .virtual_stages = L->v};
    col_lm_trainer *ref = NULL;
    col_lm_pipeline *pp = NULL;
    ok = ok && col_lm_trainer_create(&rc, &be, &ref, &err) == COL_OK && col_lm_pipeline_create(&pc, &be, &pp, &err) == COL_OK;
    ok = all_ok(ok);
    tl_mpi_check(ok, err.msg, "%s, %s: the reference and the pipeline's stage sessions are made", L->name, fam);
    int32_t ids[B * T], tg[B * T];
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < STEPS && ok; s++) {
        col_lm_step_info a, b;
        batch(s, ids, tg);
        ok = col_lm_trainer_step(ref, ids, tg, &a, &err) == COL_OK &&
             col_lm_pipeline_step(pp, ids + d * rows * T, tg + d * rows * T, &b, &err) == COL_OK;
        ok = all_ok(ok);
        if (!ok)
            break;
        worst_loss = max_all(fmax(worst_loss, rel(b.loss, a.loss)));
        worst_norm = max_all(fmax(worst_norm, rel(b.grad_norm, a.grad_norm)));
        if (s == 0 && L->dp == 1) { /* the gradients of the first step, clipped alike */
            double g = compare_grads(pp, ref, &ok, &err);
            ok = all_ok(ok);
            snprintf(detail, sizeof detail, "loss %.7f vs %.7f, norm %.7f vs %.7f, worst gradient %.2e: %s", b.loss,
                     a.loss, b.grad_norm, a.grad_norm, g, err.msg);
            tl_mpi_check(ok && worst_loss <= 1e-5 && worst_norm <= 1e-5 && g <= 1e-5, detail,
                         "%s, %s: the first step's loss (%.6f), gradient norm and every parameter's gradient equal "
                         "one process's within 1e-5 (worst gradient %.1e)", L->name, fam, b.loss, g);
        }
    }
    if (ok) /* the weights whole (ZeRO) */
        for (int s = 0; ok && s < col_lm_pipeline_n_stages(pp); s++)
            ok = col_lm_trainer_sync_params(col_lm_pipeline_stage(pp, s, NULL, NULL, NULL), &err) == COL_OK;
    ok = all_ok(ok);
    int64_t elements = 0;
    double tied = 0, w = ok ? compare_weights(pp, ref, q == 0 && d == 0, &ok, &elements, &tied, &err) : INFINITY;
    ok = all_ok(ok);
    int64_t want = col_lm_trainer_param_count(ref);
    snprintf(detail, sizeof detail, "losses %.2e, norms %.2e, weights %.2e (%lld of %lld elements), tied copy %.2e: %s",
             worst_loss, worst_norm, w, (long long)elements, (long long)want, tied, err.msg);
    tl_mpi_check(ok && worst_loss <= 1e-5 && worst_norm <= 1e-5 && w <= 1e-5 && tied <= 1e-5 && elements == want,
                 detail, "%s, %s: %d clipped AdamW steps' losses and gradient norms within 1e-5 (%.1e, %.1e), the "
                 "weights after them within 1e-5 (%.1e), the whole model once", L->name, fam, STEPS, worst_loss,
                 worst_norm, w);
    char dir[64] = "/tmp/col_tp_pp_XXXXXX";
    double bits = INFINITY, sv = ok ? check_saved(pp, ref, dir, &ok, &bits, &err) : INFINITY;
    tl_mpi_check(ok && sv <= 1e-5 && bits == 0, err.msg, "%s, %s: the saved model.safetensors holds whole tensors, "
                 "the stages' gathered weights bit for bit (%.1e), one process's within 1e-5 (%.1e)", L->name, fam,
                 bits, sv);
    /* resumed from the directory into a fresh pipeline of the same layout: the next step bitwise the same */
    col_lm_pipeline *re = NULL;
    col_ckpt *ck = NULL;
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    col_lm_step_info a = {0}, b = {0};
    if (ok) {
        ok = col_lm_pipeline_create(&pc, &be, &re, &err) == COL_OK && col_ckpt_open(path, &ck, &err) == COL_OK &&
             col_lm_pipeline_load(re, dir, ck, true, &err) == COL_OK;
        batch(STEPS, ids, tg);
        ok = all_ok(ok) && col_lm_pipeline_step(pp, ids + d * rows * T, tg + d * rows * T, &a, &err) == COL_OK &&
             col_lm_pipeline_step(re, ids + d * rows * T, tg + d * rows * T, &b, &err) == COL_OK;
        double wdiff = 0; /* the weights after it (the optimizer states' doing), gathered whole */
        for (int s = 0; ok && s < col_lm_pipeline_n_stages(pp); s++) {
            col_lm_trainer *x = col_lm_pipeline_stage(pp, s, NULL, NULL, NULL), *y = col_lm_pipeline_stage(re, s, NULL, NULL, NULL);
            ok = col_lm_trainer_sync_params(x, &err) == COL_OK && col_lm_trainer_sync_params(y, &err) == COL_OK;
            for (int i = 0; ok && i < col_lm_trainer_n_params(x); i++) {
                int64_t n = col_param_numel(col_lm_trainer_whole_spec(x, i));
                float *u = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
                ok = u && v && col_lm_trainer_gather(x, i, 0, u, &err) == COL_OK &&
                     col_lm_trainer_gather(y, i, 0, v, &err) == COL_OK;
                for (int64_t j = 0; ok && j < n; j++)
                    wdiff = fmax(wdiff, fabs((double)u[j] - v[j]));
                free(u), free(v);
            }
        }
        ok = all_ok(ok);
        wdiff = max_all(ok ? wdiff : INFINITY);
        tl_mpi_check(ok && a.loss == b.loss && a.grad_norm == b.grad_norm && a.step == b.step && wdiff == 0, err.msg,
                     "%s, %s: a pipeline loaded from the directory (weights and optimizer states) takes the next step "
                     "bit for bit as the one that saved it (loss %.7f vs %.7f, step %lld, weights after it %.1e)",
                     L->name, fam, b.loss, a.loss, (long long)b.step, wdiff);
    }
    col_ckpt_close(ck);
    col_lm_pipeline_free(re);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && strcmp(dir + strlen(dir) - 6, "XXXXXX") != 0) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    col_lm_pipeline_free(pp);
    col_lm_trainer_free(ref);
    col_lm_par_close(&par);
    col_comm_free(mp);
    col_comm_free(pipe);
    col_comm_free(dp);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    if (col_comm_init_mpi(&world, &err) != COL_OK || col_cpu_backend_init(&be, &err) != COL_OK) {
        if (rank == 0)
            printf("Bail out! %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    static const layout_case cases[] = {
        {"1D x2, pipeline x2", COL_TP_1D, 2, 1, 1, COL_SP_RING, 2, 1, 1, 2},
        {"ring x2, pipeline x2", COL_TP_1D, 1, 1, 2, COL_SP_RING, 2, 1, 1, 2},
        {"Ulysses x2, pipeline x2", COL_TP_1D, 1, 1, 2, COL_SP_ULYSSES, 2, 1, 1, 2},
        {"1D x2, interleaved pipeline x2 (v=2)", COL_TP_1D, 2, 1, 1, COL_SP_RING, 2, 2, 1, 2},
        {"2D 2x2, pipeline x2", COL_TP_2D, 4, 1, 1, COL_SP_RING, 2, 1, 1, 2},
        {"1D x2, pipeline x2, data parallel x2", COL_TP_1D, 2, 1, 1, COL_SP_RING, 2, 1, 2, 2},
        {"1D x2, ring x2, pipeline x2", COL_TP_1D, 2, 1, 2, COL_SP_RING, 2, 1, 1, 2},
        /* 16 processes; the grids split a micro-batch's 4 rows */
        {"2.5D 2x2x2, pipeline x2", COL_TP_25D, 8, 2, 1, COL_SP_RING, 2, 1, 1, 1},
        {"3D 2x2x2, pipeline x2", COL_TP_3D, 8, 1, 1, COL_SP_RING, 2, 1, 1, 1},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const layout_case *L = &cases[i];
        if (L->tp * L->sp * L->P * L->dp != size || !col_tp_ops_of(L->mode))
            continue;
        for (int f = 0; f < 2; f++) {
            col_lm_config m;
            col_par_layout l = {.mode = L->mode, .tp = L->tp, .d = L->depth, .sp = L->sp, .sp_mode = L->sp_mode};
            if (!model_of(f, &m, &err) || col_par_layout_check(&l, &m, T, B / L->dp / L->mb, &err) != COL_OK) {
                if (rank == 0) /* a layout the model does not allow */
                    printf("# %s, %s: not a layout of this model: %s\n", L->name, f ? "llama" : "gpt2", err.msg);
                continue;
            }
            run_case(L, f);
            n++;
        }
    }
    tl_mpi_check(n > 0, "", "%d processes: %d layout and model cases ran", size, n);
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
