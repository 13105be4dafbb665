/* rlhf_step.c - rows of prompts and completions, and the steps of the preference methods and KTO (rlhf_step.h). */
#include "rlhf_step.h"

#include <stdlib.h>
#include <string.h>

/* ---- rows ---- */

col_status col_rl_rows_init(col_rl_rows *r, int B, int T, col_err *err)
{
    memset(r, 0, sizeof *r);
    if (B < 1 || T < 2)
        return col_err_set(err, COL_EINVAL, "rows: %d rows of %d tokens (at least 1 row of 2)", B, T);
    size_t n = (size_t)B * (size_t)T;
    r->B = B;
    r->T = T;
    r->ids = malloc(sizeof *r->ids * n);
    r->tg = malloc(sizeof *r->tg * n);
    r->np = calloc((size_t)B, sizeof *r->np);
    r->nc = calloc((size_t)B, sizeof *r->nc);
    if (!r->ids || !r->tg || !r->np || !r->nc) {
        col_rl_rows_free(r);
        return col_err_set(err, COL_ENOMEM, "rows: out of memory");
    }
    for (int i = 0; i < B; i++)
        col_rl_rows_clear(r, i, 0);
    return COL_OK;
}

void col_rl_rows_free(col_rl_rows *r)
{
    free(r->ids);
    free(r->tg);
    free(r->np);
    free(r->nc);
    memset(r, 0, sizeof *r);
}

void col_rl_rows_clear(col_rl_rows *r, int i, int32_t pad)
{
    int32_t *ids = r->ids + (size_t)i * (size_t)r->T, *tg = r->tg + (size_t)i * (size_t)r->T;
    for (int p = 0; p < r->T; p++) {
        ids[p] = pad;
        tg[p] = -1;
    }
    r->np[i] = r->nc[i] = 0;
    r->pad = pad;
}

col_status col_rl_rows_set(col_rl_rows *r, int i, const int32_t *prompt, int np, const int32_t *comp, int nc,
                           int32_t pad, int *cut, col_err *err)
{
    if (cut)
        *cut = 0;
    if (i < 0 || i >= r->B)
        return col_err_set(err, COL_EINVAL, "rows: row %d of %d", i, r->B);
    if (np < 1 || nc < 1)
        return col_err_set(err, COL_EINVAL, "rows: a prompt of %d and a completion of %d tokens (at least 1 each)", np,
                           nc);
    if (np >= r->T)
        return col_err_set(err, COL_EINVAL, "a prompt of %d tokens leaves no room for a completion in rows of %d tokens",
                           np, r->T);
    col_rl_rows_clear(r, i, pad);
    int keep = nc < r->T - np ? nc : r->T - np;
    if (cut)
        *cut = nc - keep;
    int32_t *ids = r->ids + (size_t)i * (size_t)r->T, *tg = r->tg + (size_t)i * (size_t)r->T;
    memcpy(ids, prompt, sizeof *ids * (size_t)np);
    memcpy(ids + np, comp, sizeof *ids * (size_t)keep);
    for (int p = 0; p + 1 < np + keep; p++) /* position p scores token p+1: np-1+k completion token k */
        tg[p] = ids[p + 1];
    r->np[i] = np;
    r->nc[i] = keep;
    return COL_OK;
}

void col_rl_rows_sum(const col_rl_rows *r, const float *tok, double *sum)
{
    for (int i = 0; i < r->B; i++) {
        const float *x = tok + (size_t)i * (size_t)r->T + (r->np[i] > 0 ? r->np[i] - 1 : 0);
        double s = 0;
        for (int k = 0; k < r->nc[i]; k++)
            s += (double)x[k];
        sum[i] = s;
    }
}

void col_rl_rows_spread(const col_rl_rows *r, const double *d, float *dout)
{
    memset(dout, 0, sizeof *dout * (size_t)r->B * (size_t)r->T);
    for (int i = 0; i < r->B; i++) {
        float *x = dout + (size_t)i * (size_t)r->T + (r->np[i] > 0 ? r->np[i] - 1 : 0);
        for (int k = 0; k < r->nc[i]; k++)
            x[k] = (float)d[i];
    }
}

int col_rl_rows_width(const col_rl_rows *r)
{
    int w = 1;
    for (int i = 0; i < r->B; i++)
        if (r->nc[i] > w)
            w = r->nc[i];
    return w;
}

void col_rl_rows_gather(const col_rl_rows *r, const float *tok, int W, float *out, uint8_t *mask)
{
    for (int i = 0; i < r->B; i++) {
        const float *x = tok + (size_t)i * (size_t)r->T + (r->np[i] > 0 ? r->np[i] - 1 : 0);
        for (int k = 0; k < W; k++) {
            bool in = k < r->nc[i];
            out[(size_t)i * (size_t)W + (size_t)k] = in ? x[k] : 0.0f;
            if (mask)
                mask[(size_t)i * (size_t)W + (size_t)k] = in;
        }
    }
}

void col_rl_rows_scatter(const col_rl_rows *r, const float *in, int W, float *dout)
{
    memset(dout, 0, sizeof *dout * (size_t)r->B * (size_t)r->T);
    for (int i = 0; i < r->B; i++) {
        float *x = dout + (size_t)i * (size_t)r->T + (r->np[i] > 0 ? r->np[i] - 1 : 0);
        for (int k = 0; k < r->nc[i] && k < W; k++)
            x[k] = in[(size_t)i * (size_t)W + (size_t)k];
    }
}

/* ---- the steps ---- */

/* the sessions' shape must be the rows' */
static col_status check_session(const col_lm_trainer *t, const char *what, int B, col_lm_objective obj, col_err *err)
{
    if (!t)
        return col_err_set(err, COL_EINVAL, "RLHF step: no %s model", what);
    const col_lm_train_config *tc = col_lm_trainer_config(t);
    if (tc->batch != B)
        return col_err_set(err, COL_EINVAL, "RLHF step: the %s session has rows of %d sequences, the step needs %d", what,
                           tc->batch, B);
    if (tc->objective != obj)
        return col_err_set(err, COL_EINVAL, "RLHF step: the %s session ends in %s", what,
                           tc->objective == COL_LM_OBJ_VALUES ? "values, not log-probabilities"
                                                              : "no values (not a value model)");
    return COL_OK;
}

/* the reference's log-probabilities of the rows: its own session, the policy's base model (LoRA), or zeros */
static col_status ref_logps(const col_rl_models *m, const col_rl_rows *r, float *out, col_err *err)
{
    size_t n = (size_t)r->B * (size_t)r->T;
    if (m->no_ref) {
        memset(out, 0, sizeof *out * n);
        return COL_OK;
    }
    if (m->ref) {
        col_status st = check_session(m->ref, "reference", r->B, COL_LM_OBJ_TOKEN_LOGPROB, err);
        return st == COL_OK ? col_lm_trainer_forward_tokens(m->ref, r->ids, r->tg, 0, out, err) : st;
    }
    if (col_lm_trainer_config(m->policy)->lora.rank > 0)
        return col_lm_trainer_forward_tokens(m->policy, r->ids, r->tg, COL_LM_FWD_BASE, out, err);
    return col_err_set(err, COL_EINVAL, "RLHF step: the method compares with a reference model and none was given");
}

size_t col_rl_rows_reward_pos(const col_rl_rows *r, int i)
{
    const int32_t *ids = r->ids + (size_t)i * (size_t)r->T;
    int p = r->T - 1;
    while (p >= 0 && ids[p] == r->pad)
        p--;
    return (size_t)i * (size_t)r->T + (size_t)(p >= 0 ? p : r->T - 1);
}


/* the step's working memory: rows and three [B, T] float arrays */
typedef struct {
    col_rl_rows rows;
    float *tok, *ref, *dout;
    double *sum, *rsum, *d;
    int *cnt, *nll_n;
} work;

static void work_free(work *w)
{
    col_rl_rows_free(&w->rows);
    free(w->tok);
    free(w->ref);
    free(w->dout);
    free(w->sum);
    free(w->rsum);
    free(w->d);
    free(w->cnt);
    free(w->nll_n);
}

static col_status work_init(work *w, int B, int T, col_err *err)
{
    memset(w, 0, sizeof *w);
    col_status st = col_rl_rows_init(&w->rows, B, T, err);
    if (st != COL_OK)
        return st;
    size_t n = (size_t)B * (size_t)T;
    w->tok = malloc(sizeof *w->tok * n);
    w->ref = malloc(sizeof *w->ref * n);
    w->dout = malloc(sizeof *w->dout * n);
    w->sum = calloc((size_t)B, sizeof *w->sum);
    w->rsum = calloc((size_t)B, sizeof *w->rsum);
    w->d = calloc((size_t)B, sizeof *w->d);
    w->cnt = calloc((size_t)B, sizeof *w->cnt);
    w->nll_n = calloc((size_t)B, sizeof *w->nll_n);
    if (!w->tok || !w->ref || !w->dout || !w->sum || !w->rsum || !w->d || !w->cnt || !w->nll_n) {
        work_free(w);
        return col_err_set(err, COL_ENOMEM, "RLHF step: out of memory");
    }
    return COL_OK;
}

/* pairs into rows: chosen i at row i, rejected i at row n+i */
static col_status pair_rows(work *w, const col_rl_example *const *ex, int n, int32_t pad, int *cut, col_err *err)
{
    *cut = 0;
    col_status st = COL_OK;
    for (int i = 0; i < n && st == COL_OK; i++) {
        int c1 = 0, c2 = 0;
        st = col_rl_rows_set(&w->rows, i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->a, ex[i]->n_a, pad, &c1, err);
        if (st == COL_OK)
            st = col_rl_rows_set(&w->rows, n + i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->b, ex[i]->n_b, pad, &c2, err);
        if (st != COL_OK)
            col_err_prefix(err, "line %lld", (long long)ex[i]->line);
        *cut += c1 + c2;
    }
    for (int i = 0; i < 2 * n; i++)
        w->cnt[i] = w->rows.nc[i];
    return st;
}

/* the rewards of the rows in tok: the value at each row's last real token */
static void rewards_of(const col_rl_rows *r, const float *tok, double *out)
{
    for (int i = 0; i < r->B; i++)
        out[i] = (double)tok[col_rl_rows_reward_pos(r, i)];
}

static col_pref_kind pref_kind(col_rl_method m)
{
    switch (m) {
    case COL_RLM_SIMPO: return COL_PREF_SIMPO;
    case COL_RLM_ORPO: return COL_PREF_ORPO;
    case COL_RLM_RM: return COL_PREF_RM;
    default: return COL_PREF_DPO;
    }
}

/* the backward pass seeded with w->dout and, when mode says so, the optimizer step */
static col_status backward(col_lm_trainer *t, const work *w, double loss, col_rl_mode mode, col_lm_step_info *info,
                           col_err *err)
{
    if (mode == COL_RL_EVAL)
        return COL_OK;
    bool apply = mode == COL_RL_APPLY;
    col_lm_trainer_zero_grads(t);
    col_status st = col_lm_trainer_backward_tokens(t, w->rows.ids, w->rows.tg, w->dout, NULL, err);
    if (st == COL_OK && apply)
        st = col_lm_trainer_apply(t, (float)loss, info, err);
    return st;
}

col_status col_rl_pref_step(const col_rl_config *c, const col_rl_models *m, const col_rl_example *const *ex, int n,
                            int32_t pad, col_rl_mode mode, col_lm_step_info *info, col_rl_pref_out *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    bool rm = c->method == COL_RLM_RM;
    if (n < 1)
        return col_err_set(err, COL_EINVAL, "RLHF step: no pairs");
    col_status st = check_session(m->policy, rm ? "reward" : "policy", 2 * n,
                                  rm ? COL_LM_OBJ_VALUES : COL_LM_OBJ_TOKEN_LOGPROB, err);
    if (st != COL_OK)
        return st;
    work w;
    if ((st = work_init(&w, 2 * n, col_lm_trainer_config(m->policy)->seq, err)) != COL_OK)
        return st;
    st = pair_rows(&w, ex, n, pad, &out->cut, err);
    if (st == COL_OK)
        st = col_lm_trainer_forward_tokens(m->policy, w.rows.ids, rm ? NULL : w.rows.tg, 0, w.tok, err);
    bool with_ref = c->method == COL_RLM_DPO && !m->no_ref;
    if (st == COL_OK && with_ref)
        st = ref_logps(m, &w.rows, w.ref, err);
    if (st == COL_OK) {
        if (rm)
            rewards_of(&w.rows, w.tok, w.sum);
        else
            col_rl_rows_sum(&w.rows, w.tok, w.sum);
        if (with_ref)
            col_rl_rows_sum(&w.rows, w.ref, w.rsum);
        col_pref_batch b = {.n = n, .pc = w.sum, .pr = w.sum + n, .rc = with_ref ? w.rsum : NULL,
                            .rr = with_ref ? w.rsum + n : NULL, .nc = w.cnt, .nr = w.cnt + n};
        if (c->method == COL_RLM_ORPO) { /* the NLL term: every target of the chosen sequences */
            for (int i = 0; i < n; i++) {
                int len = w.rows.np[i] + w.rows.nc[i] - 1;
                const float *x = w.tok + (size_t)i * (size_t)w.rows.T;
                double s = 0;
                for (int p = 0; p < len; p++)
                    s += (double)x[p];
                w.rsum[i] = s;
                w.nll_n[i] = len;
            }
            b.pnll = w.rsum;
            b.nnll = w.nll_n;
        }
        st = col_pref_loss(pref_kind(c->method), &c->pref, &b, w.d, w.d + n, &out->pref, err);
        out->loss = out->pref.loss;
    }
    if (st == COL_OK) {
        if (rm) {
            memset(w.dout, 0, sizeof *w.dout * (size_t)w.rows.B * (size_t)w.rows.T);
            for (int i = 0; i < 2 * n; i++)
                w.dout[col_rl_rows_reward_pos(&w.rows, i)] = (float)w.d[i];
        } else {
            col_rl_rows_spread(&w.rows, w.d, w.dout);
        }
        if (c->method == COL_RLM_ORPO) /* every NLL token's seed on top of its completion seed */
            for (int i = 0; i < n; i++)
                for (int p = 0; p < w.nll_n[i]; p++)
                    w.dout[(size_t)i * (size_t)w.rows.T + (size_t)p] += (float)out->pref.dnll;
        st = backward(m->policy, &w, out->loss, mode, info, err);
    }
    work_free(&w);
    return st;
}

col_status col_rl_rm_score(const col_rl_models *m, const col_rl_example *const *ex, int n, int32_t pad, double *r,
                           col_err *err)
{
    col_status st = check_session(m->policy, "reward", 2 * n, COL_LM_OBJ_VALUES, err);
    if (st != COL_OK)
        return st;
    work w;
    int cut;
    if ((st = work_init(&w, 2 * n, col_lm_trainer_config(m->policy)->seq, err)) != COL_OK)
        return st;
    st = pair_rows(&w, ex, n, pad, &cut, err);
    if (st == COL_OK)
        st = col_lm_trainer_forward_tokens(m->policy, w.rows.ids, NULL, 0, w.tok, err);
    if (st == COL_OK) {
        rewards_of(&w.rows, w.tok, w.sum); /* rows: the chosen, then the rejected */
        for (int i = 0; i < n; i++) {
            r[2 * i] = w.sum[i];
            r[2 * i + 1] = w.sum[n + i];
        }
    }
    work_free(&w);
    return st;
}

col_status col_rl_kto_step(const col_rl_config *c, const col_rl_models *m, const col_rl_example *const *ex, int n,
                           int32_t pad, col_rl_mode mode, col_lm_step_info *info, col_rl_pref_out *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    if (n < 1)
        return col_err_set(err, COL_EINVAL, "RLHF step: no examples");
    col_status st = check_session(m->policy, "policy", n, COL_LM_OBJ_TOKEN_LOGPROB, err);
    if (st != COL_OK)
        return st;
    work w;
    if ((st = work_init(&w, n, col_lm_trainer_config(m->policy)->seq, err)) != COL_OK)
        return st;
    bool *good = calloc((size_t)n, sizeof *good);
    double *pk = calloc((size_t)n, sizeof *pk), *rk = calloc((size_t)n, sizeof *rk);
    if (!good || !pk || !rk)
        st = col_err_set(err, COL_ENOMEM, "RLHF step: out of memory");
    /* the mismatched pairs first: example i's prompt with example i-1's completion (the last one's for the first) */
    for (int i = 0; i < n && st == COL_OK; i++) {
        const col_rl_example *e = ex[i], *o = ex[(i + n - 1) % n];
        int cut;
        st = col_rl_rows_set(&w.rows, i, e->prompt, e->n_prompt, o->a, o->n_a, pad, &cut, err);
        if (st != COL_OK)
            col_err_prefix(err, "line %lld", (long long)e->line);
        good[i] = e->desirable;
    }
    if (st == COL_OK)
        st = col_lm_trainer_forward_tokens(m->policy, w.rows.ids, w.rows.tg, 0, w.tok, err);
    if (st == COL_OK)
        st = ref_logps(m, &w.rows, w.ref, err);
    double kl = 0;
    if (st == COL_OK) {
        col_rl_rows_sum(&w.rows, w.tok, pk);
        col_rl_rows_sum(&w.rows, w.ref, rk);
        kl = col_kto_kl(n, pk, rk);
    }
    for (int i = 0; i < n && st == COL_OK; i++) {
        int cut = 0;
        st = col_rl_rows_set(&w.rows, i, ex[i]->prompt, ex[i]->n_prompt, ex[i]->a, ex[i]->n_a, pad, &cut, err);
        if (st != COL_OK)
            col_err_prefix(err, "line %lld", (long long)ex[i]->line);
        out->cut += cut;
    }
    if (st == COL_OK)
        st = col_lm_trainer_forward_tokens(m->policy, w.rows.ids, w.rows.tg, 0, w.tok, err);
    if (st == COL_OK)
        st = ref_logps(m, &w.rows, w.ref, err);
    if (st == COL_OK) {
        col_rl_rows_sum(&w.rows, w.tok, w.sum);
        col_rl_rows_sum(&w.rows, w.ref, w.rsum);
        st = col_kto_loss(&c->kto, n, w.sum, w.rsum, good, kl, w.d, &out->pref, err);
        out->loss = out->pref.loss;
    }
    if (st == COL_OK) {
        col_rl_rows_spread(&w.rows, w.d, w.dout);
        st = backward(m->policy, &w, out->loss, mode, info, err);
    }
    free(good);
    free(pk);
    free(rk);
    work_free(&w);
    return st;
}
