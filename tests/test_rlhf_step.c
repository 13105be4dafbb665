/* test_rlhf_step.c - one step of each RLHF method against TRL's trainers (PPO: tools/refgen/ppo_ref.py) on a tiny GPT-2
 * (tools/refgen/make_rlhf_step_fixtures.py): the batch's tokens, the loss and every parameter's gradient.
 * Built with RLHF_TEST_CUDA (tests/test_rlhf_step_emu: the CUDA backend's kernels through the emulator;
 * tests/test_rlhf_step_cuda on a GPU) every session runs on the CUDA backend through a compute tier. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_source.h"
#include "rlhf_rollout.h"
#include "testlib.h"
#ifdef RLHF_TEST_CUDA
#include "backend_cuda.h"
#endif

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/rlhf_step"
#endif

enum { SEQ = 32 };
static col_backend be;
static const double TOL = 1e-5; /* the bound: max |ours - TRL| / max |TRL| per tensor, and the loss */

static col_ckpt *open_ref(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, FIXTURES "/%s.safetensors", name);
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &ck, &err) != COL_OK)
        printf("# %s\n", err.msg);
    return ck;
}

/* a reference tensor as doubles (f64 or i64 in the file) */
static double *ref_values(const col_ckpt *ck, const char *name, int64_t *n, int64_t *cols)
{
    const col_ckpt_tensor *x = col_ckpt_find(ck, name);
    if (!x || (x->dtype != COL_ST_I64 && x->dtype != COL_ST_F64))
        return NULL;
    int64_t m = 1;
    for (int d = 0; d < x->ndim; d++)
        m *= x->shape[d];
    double *v = malloc(sizeof *v * (size_t)(m ? m : 1));
    for (int64_t i = 0; i < m; i++)
        v[i] = x->dtype == COL_ST_I64 ? (double)((const int64_t *)x->data)[i] : ((const double *)x->data)[i];
    *n = m;
    if (cols)
        *cols = x->ndim == 2 ? x->shape[1] : m;
    return v;
}

static col_lm_trainer *session(const char *dir, int batch, bool inference, col_lm_objective obj, col_lm_source *src)
{
    col_err err = {0};
    char path[512];
    snprintf(path, sizeof path, FIXTURES "/%s", dir);
    if (col_lm_source_open(path, NULL, false, src, &err) != COL_OK) {
        printf("# %s\n", err.msg);
        return NULL;
    }
    col_lm_train_config tc = {.model = src->config, .batch = batch, .seq = SEQ, .objective = obj,
                              .opt = col_opt_defaults(COL_OPT_ADAMW), .inference = inference};
#ifdef RLHF_TEST_CUDA
    tc.compute_budget = (size_t)64 << 20; /* the device reaches the weights through a compute tier */
#endif
    tc.lr = (col_lr_sched){.kind = COL_LR_CONSTANT, .lr_max = 1e-3f, .total_steps = 10};
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&tc, &be, &t, &err) != COL_OK || col_lm_trainer_load(t, src->weights, &err) != COL_OK) {
        printf("# %s: %s\n", dir, err.msg);
        col_lm_trainer_free(t);
        return NULL;
    }
    return t;
}

/* the loss and every parameter's gradient against the reference */
/* loss_key's reference against loss, and every parameter's gradient against "<prefix><param>" */
static void check_against(const char *what, col_lm_trainer *t, const col_ckpt *ck, const char *loss_key, double loss,
                          const char *prefix)
{
    int64_t n;
    double *l = ref_values(ck, loss_key, &n, NULL);
    TL_OK(l && fabs(loss - l[0]) <= TOL * fabs(l[0]) + 1e-7, "%s: %s %.8f, reference %.8f", what, loss_key, loss, l ? l[0] : NAN);
    free(l);
    double worst = 0;
    int missing = 0, compared = 0;
    char worst_name[96] = "";
    for (int i = 0; i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        col_lm_trainer_param(t, i, &s);
        const float *g = col_lm_trainer_grad(t, i);
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefix, s->name);
        int64_t m;
        double *r = ref_values(ck, name, &m, NULL);
        if (!r || !g || m != col_param_numel(s)) {
            missing++;
            printf("# %s: no reference gradient for %s\n", what, s->name);
            free(r);
            continue;
        }
        double diff = 0, scale = 0;
        for (int64_t k = 0; k < m; k++) {
            diff = fmax(diff, fabs((double)g[k] - r[k]));
            scale = fmax(scale, fabs(r[k]));
        }
        double rel = scale > 0 ? diff / scale : diff;
        if (rel > worst) {
            worst = rel;
            snprintf(worst_name, sizeof worst_name, "%s", s->name);
        }
        compared++;
        free(r);
    }
    TL_OK(missing == 0 && compared > 0 && worst <= TOL, "%s: %d gradients, worst relative error %.2e (%s)", what,
          compared, worst, worst_name);
}

static void check_grads(const char *what, col_lm_trainer *t, const col_ckpt *ck, double loss)
{
    check_against(what, t, ck, "loss", loss, "grad.");
}

/* row i of a TRL batch (input_ids with its completion mask): does our row hold the same tokens and span? */
static bool same_row(const col_rl_rows *r, int i, const double *ids, const double *mask, int64_t L, int j)
{
    int np = -1, nc = 0;
    for (int64_t p = 0; p < L; p++)
        if (mask[j * L + p] != 0) {
            if (np < 0)
                np = (int)p;
            nc++;
        }
    if (np != r->np[i] || nc != r->nc[i])
        return false;
    for (int p = 0; p < np + nc; p++)
        if (r->ids[(size_t)i * r->T + p] != (int32_t)ids[j * L + p])
            return false;
    return true;
}

static const col_rl_example **examples(const col_rl_data *d, int n)
{
    const col_rl_example **ex = calloc((size_t)n, sizeof *ex);
    for (int i = 0; i < n; i++)
        ex[i] = col_rl_data_get(d, i);
    return ex;
}

static col_rl_data *load_data(const char *file, col_rl_kind kind, const col_tokenizer *tok)
{
    col_rl_data_opts o = {.family = COL_CHAT_CHATML, .append_eos = true};
    col_rl_data *d = NULL;
    col_err err = {0};
    if (col_rl_data_load(file, kind, tok, &o, &d, &err) != COL_OK)
        printf("# %s\n", err.msg);
    return d;
}

static void test_pairs(col_rl_method method, const char *name, int32_t pad)
{
    col_lm_source src = {0}, rsrc = {0};
    bool rm = method == COL_RLM_RM;
    col_lm_trainer *t = session(rm ? "rm" : "policy", 4, false, rm ? COL_LM_OBJ_VALUES : COL_LM_OBJ_TOKEN_LOGPROB,
                                &src);
    col_lm_trainer *ref = method == COL_RLM_DPO ? session("ref", 4, true, COL_LM_OBJ_TOKEN_LOGPROB, &rsrc) : NULL;
    col_rl_data *d = src.tok ? load_data(FIXTURES "/pairs.jsonl", COL_RL_PAIRS, src.tok) : NULL;
    col_ckpt *ck = open_ref(name);
    TL_OK(t && d && ck && (method != COL_RLM_DPO || ref), "%s: model, data and reference open", name);
    if (t && d && ck) {
        const col_rl_example **ex = examples(d, 2);
        col_rl_config c = {.method = method, .pref = {.beta = 0.1}};
        col_rl_models m = {.policy = t, .ref = ref};
        col_rl_pref_out out;
        col_err err = {0};
        col_status st = col_rl_pref_step(&c, &m, ex, 2, pad, COL_RL_GRADS, NULL, &out, &err);
        TL_OK(st == COL_OK, "%s: step (%s)", name, err.msg);
        /* the rows TRL built from the same file: chosen rows then rejected rows */
        int64_t n, L, nm;
        double *ids = ref_values(ck, "input_ids", &n, &L);
        double *mask = rm ? NULL : ref_values(ck, "completion_mask", &nm, NULL);
        col_rl_rows rows;
        col_rl_rows_init(&rows, 4, SEQ, &err);
        bool same = ids != NULL;
        for (int i = 0; i < 2 && same; i++) {
            int c1, c2;
            col_rl_rows_set(&rows, i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->a, ex[i]->n_a, pad, &c1, &err);
            col_rl_rows_set(&rows, 2 + i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->b, ex[i]->n_b, pad, &c2, &err);
            for (int k = 0; k < 2 && same; k++) {
                int row = k * 2 + i;
                if (mask)
                    same = same_row(&rows, row, ids, mask, L, row);
                else /* the reward model's rows: the whole sequence */
                    for (int p = 0; p < rows.np[row] + rows.nc[row]; p++)
                        same = same && rows.ids[(size_t)row * SEQ + p] == (int32_t)ids[row * L + p];
            }
        }
        TL_OK(same, "%s: the rows hold the tokens and completion spans TRL's batch holds", name);
        col_rl_rows_free(&rows);
        free(ids);
        free(mask);
        if (st == COL_OK)
            check_grads(name, t, ck, out.loss);
        if (rm && st == COL_OK) { /* the rewards where transformers reads them: before the final EOS (= padding) */
            double r[4], *want = ref_values(ck, "rewards", &n, NULL);
            st = col_rl_rm_score(&m, ex, 2, pad, r, &err);
            double worst = 0; /* TRL's batch order: chosen 0, chosen 1, rejected 0, rejected 1 */
            for (int i = 0; i < 2 && want; i++)
                worst = fmax(worst, fmax(fabs(r[2 * i] - want[i]), fabs(r[2 * i + 1] - want[2 + i])));
            TL_OK(st == COL_OK && want && worst < 1e-5, "rm: rewards as transformers gives them (max error %.2e)",
                  worst);
            free(want);
        }
        free(ex);
    }
    col_ckpt_close(ck);
    col_rl_data_free(d);
    col_lm_trainer_free(t);
    col_lm_trainer_free(ref);
    col_lm_source_close(&src);
    col_lm_source_close(&rsrc);
}

/* SimPO and ORPO: TRL's CPO/ORPO trainers tokenize their own way (a BOS before the prompt): the rows are taken
 * from their batch, which then holds the same prompts and completions */
static void test_cpo_style(col_rl_method method, const char *name)
{
    col_lm_source src = {0};
    col_lm_trainer *t = session("policy", 4, false, COL_LM_OBJ_TOKEN_LOGPROB, &src);
    col_ckpt *ck = open_ref(name);
    TL_OK(t && ck, "%s: model and reference open", name);
    if (!t || !ck) {
        col_lm_trainer_free(t);
        col_ckpt_close(ck);
        col_lm_source_close(&src);
        return;
    }
    col_rl_example ex[2] = {0};
    const col_rl_example *exp[2] = {&ex[0], &ex[1]};
    int32_t buf[2][3][SEQ];
    static const char *const keys[2][3] = {{"chosen_input_ids", "chosen_labels", "chosen_attention_mask"},
                                           {"rejected_input_ids", "rejected_labels", "rejected_attention_mask"}};
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        int64_t n, L;
        double *ids = ref_values(ck, keys[k][0], &n, &L), *lab = ref_values(ck, keys[k][1], &n, NULL);
        double *att = ref_values(ck, keys[k][2], &n, NULL);
        ok = ok && ids && lab && att && L <= SEQ;
        for (int i = 0; i < 2 && ok; i++) {
            int np = 0, len = 0;
            while (np < L && lab[i * L + np] == -100)
                np++;
            for (int p = 0; p < L; p++)
                len += att[i * L + p] != 0;
            for (int p = 0; p < len; p++)
                buf[i][1 + k][p] = (int32_t)ids[i * L + p];
            memcpy(buf[i][0], buf[i][1 + k], sizeof(int32_t) * (size_t)np);
            ex[i].prompt = buf[i][0];
            ex[i].n_prompt = np;
            if (k == 0)
                ex[i].a = buf[i][1] + np, ex[i].n_a = len - np;
            else
                ex[i].b = buf[i][2] + np, ex[i].n_b = len - np;
        }
        free(ids);
        free(lab);
        free(att);
    }
    col_rl_config c = {.method = method};
    c.pref.beta = method == COL_RLM_SIMPO ? 2.0 : 0.1;
    c.pref.gamma = method == COL_RLM_SIMPO ? 0.5 : 0;
    col_rl_models m = {.policy = t};
    col_rl_pref_out out;
    col_err err = {0};
    col_status st = ok ? col_rl_pref_step(&c, &m, exp, 2, 256, COL_RL_GRADS, NULL, &out, &err) : COL_EINVAL;
    TL_OK(st == COL_OK, "%s: step (%s)", name, err.msg);
    if (st == COL_OK)
        check_grads(name, t, ck, out.loss);
    col_ckpt_close(ck);
    col_lm_trainer_free(t);
    col_lm_source_close(&src);
}

static void test_kto(int32_t pad)
{
    col_lm_source src = {0}, rsrc = {0};
    col_lm_trainer *t = session("policy", 4, false, COL_LM_OBJ_TOKEN_LOGPROB, &src);
    col_lm_trainer *ref = session("ref", 4, true, COL_LM_OBJ_TOKEN_LOGPROB, &rsrc);
    col_rl_data *d = src.tok ? load_data(FIXTURES "/kto.jsonl", COL_RL_KTO, src.tok) : NULL;
    col_ckpt *ck = open_ref("kto");
    TL_OK(t && ref && d && ck, "kto: models, data and reference open");
    if (t && ref && d && ck) {
        const col_rl_example **ex = examples(d, 4);
        col_rl_config c = {.method = COL_RLM_KTO, .kto = {.beta = 0.1, .desirable_weight = 1, .undesirable_weight = 1}};
        col_rl_models m = {.policy = t, .ref = ref};
        col_rl_pref_out out;
        col_err err = {0};
        col_status st = col_rl_kto_step(&c, &m, ex, 4, pad, COL_RL_GRADS, NULL, &out, &err);
        TL_OK(st == COL_OK, "kto: step (%s)", err.msg);
        int64_t n, L, nm;
        double *ids = ref_values(ck, "input_ids", &n, &L), *mask = ref_values(ck, "completion_mask", &nm, NULL);
        col_rl_rows rows;
        col_rl_rows_init(&rows, 4, SEQ, &err);
        bool same = ids && mask;
        for (int i = 0; i < 4 && same; i++) {
            col_rl_rows_set(&rows, i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->a, ex[i]->n_a, pad, NULL, &err);
            same = same_row(&rows, i, ids, mask, L, i);
        }
        TL_OK(same, "kto: the rows hold the tokens and completion spans TRL's batch holds");
        col_rl_rows_free(&rows);
        free(ids);
        free(mask);
        if (st == COL_OK)
            check_grads("kto", t, ck, out.loss);
        free(ex);
    }
    col_ckpt_close(ck);
    col_rl_data_free(d);
    col_lm_trainer_free(t);
    col_lm_trainer_free(ref);
    col_lm_source_close(&src);
    col_lm_source_close(&rsrc);
}

static void test_grpo(int32_t pad)
{
    col_lm_source src = {0}, rsrc = {0};
    col_lm_trainer *t = session("policy", 4, false, COL_LM_OBJ_TOKEN_LOGPROB, &src);
    col_lm_trainer *ref = session("ref", 4, true, COL_LM_OBJ_TOKEN_LOGPROB, &rsrc);
    col_rl_data *d = src.tok ? load_data(FIXTURES "/grpo_prompts.jsonl", COL_RL_PROMPTS, src.tok) : NULL;
    col_ckpt *ck = open_ref("grpo");
    TL_OK(t && ref && d && ck, "grpo: models, prompts and reference open");
    if (!(t && ref && d && ck))
        goto out;
    const col_rl_example **ex = examples(d, 2);
    int64_t n, L, nm;
    double *ids = ref_values(ck, "input_ids", &n, &L), *mask = ref_values(ck, "completion_mask", &nm, NULL);
    double *rw = ref_values(ck, "rewards", &nm, NULL);
    int32_t comp[4][SEQ];
    const int32_t *cp[4];
    int cn[4];
    bool prompts_same = ids && mask && rw;
    for (int i = 0; i < 4 && prompts_same; i++) {
        int np = 0;
        cn[i] = 0;
        while (np < L && mask[i * L + np] == 0)
            np++;
        for (int p = np; p < L; p++)
            if (mask[i * L + p] != 0)
                comp[i][cn[i]++] = (int32_t)ids[i * L + p];
        cp[i] = comp[i];
        prompts_same = np == ex[i / 2]->n_prompt;
        for (int p = 0; p < np && prompts_same; p++)
            prompts_same = ex[i / 2]->prompt[p] == (int32_t)ids[i * L + p];
    }
    TL_OK(prompts_same, "grpo: the prompts' tokens are TRL's");
    col_rl_rollout ro = {0};
    col_err err = {0};
    col_rl_config c = {.method = COL_RLM_GRPO, .grpo = {.beta = 0.04, .eps_low = 0.2, .eps_high = 0.2,
                                                        .scale_rewards = true}};
    col_rl_models m = {.policy = t, .ref = ref};
    col_rl_pg_out out;
    col_status st = prompts_same ? col_rl_rollout_set(t, ex, 2, 2, cp, cn, pad, &ro, &err) : COL_EINVAL;
    for (int i = 0; i < 4 && st == COL_OK; i++)
        ro.scores[i] = (float)rw[i];
    if (st == COL_OK)
        st = col_rl_prepare(&c, &m, &ro, &out, &err);
    double *adv = ref_values(ck, "advantages", &nm, NULL), worst = 0;
    for (int i = 0; i < 4 && st == COL_OK && adv; i++)
        worst = fmax(worst, fabs(ro.adv[i] - adv[i]));
    TL_OK(st == COL_OK && adv && worst < 1e-5, "grpo: group-normalised advantages (max error %.2e)", worst);
    if (st == COL_OK)
        st = col_rl_update(&c, &m, &ro, false, NULL, &out, &err);
    TL_OK(st == COL_OK, "grpo: update (%s)", err.msg);
    if (st == COL_OK)
        check_grads("grpo", t, ck, out.loss);
    col_rl_rollout_free(&ro);
    free(adv);
    free(ids);
    free(mask);
    free(rw);
    free(ex);
out:
    col_ckpt_close(ck);
    col_rl_data_free(d);
    col_lm_trainer_free(t);
    col_lm_trainer_free(ref);
    col_lm_source_close(&src);
    col_lm_source_close(&rsrc);
}

/* PPO against tools/refgen/ppo_ref.py: the GRPO case's rollout, scored by rm/, with a critic started from rm/ */
static void test_ppo(int32_t pad)
{
    col_lm_source src = {0}, rsrc = {0}, wsrc = {0}, csrc = {0};
    col_lm_trainer *t = session("policy", 4, false, COL_LM_OBJ_TOKEN_LOGPROB, &src);
    col_lm_trainer *ref = session("ref", 4, true, COL_LM_OBJ_TOKEN_LOGPROB, &rsrc);
    col_lm_trainer *rw = session("rm", 4, true, COL_LM_OBJ_VALUES, &wsrc);
    col_lm_trainer *cr = session("rm", 4, false, COL_LM_OBJ_VALUES, &csrc);
    col_rl_data *d = src.tok ? load_data(FIXTURES "/grpo_prompts.jsonl", COL_RL_PROMPTS, src.tok) : NULL;
    col_ckpt *ck = open_ref("ppo");
    TL_OK(t && ref && rw && cr && d && ck, "ppo: models, prompts and reference open");
    if (t && ref && rw && cr && d && ck) {
        const col_rl_example **ex = examples(d, 2);
        int64_t n, L, nm;
        double *ids = ref_values(ck, "input_ids", &n, &L), *mask = ref_values(ck, "completion_mask", &nm, NULL);
        int64_t W = mask ? nm / 4 : 0; /* the completions' width: the mask is [4, W], the ids [4, prompt + W] */
        double *want = ref_values(ck, "scores", &nm, NULL);
        int32_t comp[4][SEQ];
        const int32_t *cp[4];
        int cn[4];
        for (int i = 0; i < 4 && ids && mask; i++) {
            cn[i] = 0;
            for (int64_t p = 0; p < W; p++)
                if (mask[i * W + p] != 0)
                    comp[i][cn[i]++] = (int32_t)ids[i * L + (L - W) + p];
            cp[i] = comp[i];
        }
        col_rl_rollout ro = {0};
        col_err err = {0};
        col_rl_config c = {.method = COL_RLM_PPO,
                           .ppo = {.kl_coef = 0.05, .clip_range = 0.2, .value_clip = 0.2, .gamma = 1, .lambda = 0.95,
                                   .vf_coef = 0.1, .whiten_advantages = true}};
        col_rl_models m = {.policy = t, .ref = ref, .reward = rw, .critic = cr};
        col_rl_pg_out out;
        col_status st = ids && mask && want ? col_rl_rollout_set(t, ex, 2, 2, cp, cn, pad, &ro, &err) : COL_EINVAL;
        if (st == COL_OK)
            st = col_rl_model_score(&m, &ro, &err);
        double worst = 0;
        for (int i = 0; i < 4 && st == COL_OK; i++)
            worst = fmax(worst, fabs(ro.scores[i] - want[i]));
        TL_OK(st == COL_OK && worst < 1e-5, "ppo: the reward model's scores (max error %.2e) (%s)", worst, err.msg);
        if (st == COL_OK)
            st = col_rl_prepare(&c, &m, &ro, &out, &err);
        if (st == COL_OK)
            st = col_rl_update(&c, &m, &ro, false, NULL, &out, &err);
        TL_OK(st == COL_OK, "ppo: update (%s)", err.msg);
        if (st == COL_OK) {
            check_grads("ppo", t, ck, out.loss);
            check_against("ppo critic", cr, ck, "value_loss", out.value_loss, "cgrad.");
        }
        col_rl_rollout_free(&ro);
        free(ids);
        free(mask);
        free(want);
        free(ex);
    }
    col_ckpt_close(ck);
    col_rl_data_free(d);
    col_lm_trainer_free(t);
    col_lm_trainer_free(ref);
    col_lm_trainer_free(rw);
    col_lm_trainer_free(cr);
    col_lm_source_close(&src);
    col_lm_source_close(&rsrc);
    col_lm_source_close(&wsrc);
    col_lm_source_close(&csrc);
}

int main(void)
{
    const int32_t pad = 256; /* the byte tokenizer's <|endoftext|>: EOS and padding, as TRL sets it */
#ifdef RLHF_TEST_CUDA
    col_err berr = {0};
    if (col_cuda_backend_init(&be, 0, &berr) != COL_OK) {
        printf("1..0 # SKIP no CUDA device: %s\n", berr.msg);
        return 0;
    }
    col_cuda_backend_set_tf32(&be, false); /* f32 GEMMs, as the reference */
#else
    tl_cpu_backend(&be);
#endif
    test_pairs(COL_RLM_DPO, "dpo", pad);
    test_pairs(COL_RLM_RM, "rm", pad);
    test_cpo_style(COL_RLM_SIMPO, "simpo");
    test_cpo_style(COL_RLM_ORPO, "orpo");
    test_kto(pad);
    test_grpo(pad);
    test_ppo(pad);
#ifdef RLHF_TEST_CUDA
    col_cuda_backend_free(&be);
#else
    col_cpu_backend_free(&be);
#endif
    return tl_done();
}
