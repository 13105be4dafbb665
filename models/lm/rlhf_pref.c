/* rlhf_pref.c - the preference losses (DPO, SimPO, ORPO, reward model, KTO)
 * on per-pair sums of completion log-probabilities, with their derivatives
 * (rlhf_loss.h; docs/RLHF.md has the formulas and the TRL code they follow). */
#include "rlhf_loss.h"

#include <math.h>
#include <stddef.h>

/* log sigmoid(x) without overflow */
static double log_sigmoid(double x)
{
    return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x));
}

static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* log(1 - exp(x)) for x < 0, branching at -ln 2 as TRL's log1mexp does */
static double log1mexp(double x)
{
    return x < -0.6931471805599453 ? log1p(-exp(x)) : log(-expm1(x));
}

static const char *kind_name(col_pref_kind k)
{
    switch (k) {
    case COL_PREF_DPO:
        return "DPO";
    case COL_PREF_SIMPO:
        return "SimPO";
    case COL_PREF_ORPO:
        return "ORPO";
    case COL_PREF_RM:
        return "reward-model";
    }
    return "preference";
}

static col_status check_array(const double *a, int n, const char *what, const char *loss, col_err *err)
{
    if (!a)
        return col_err_set(err, COL_EINVAL, "%s loss: the %s are missing", loss, what);
    for (int i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return col_err_set(err, COL_EINVAL, "%s loss: %s %d is not finite (%g)", loss, what, i, a[i]);
    return COL_OK;
}

static col_status check_counts(const int *a, int n, const char *what, const char *loss, col_err *err)
{
    if (!a)
        return col_err_set(err, COL_EINVAL, "%s loss: the %s are missing", loss, what);
    for (int i = 0; i < n; i++)
        if (a[i] < 1)
            return col_err_set(err, COL_EINVAL, "%s loss: %s %d is %d (a completion needs a token)", loss, what,
                               i, a[i]);
    return COL_OK;
}

/* -(1-e) log s(z) - e log s(-z), or the robust (z - flipped) / (1 - 2e) form;
 * *dz = d loss / d z */
static double smoothed_sigmoid_loss(double z, double e, bool robust, double *dz)
{
    double lc = -log_sigmoid(z), lf = -log_sigmoid(-z);
    double sp = sigmoid(z), sn = sigmoid(-z); /* d/dz -log s(z) = -s(-z); d/dz -log s(-z) = s(z) */
    if (robust) {
        double k = 1.0 / (1.0 - 2.0 * e);
        *dz = k * ((1.0 - e) * -sn - e * sp);
        return k * ((1.0 - e) * lc - e * lf);
    }
    *dz = (1.0 - e) * -sn + e * sp;
    return (1.0 - e) * lc + e * lf;
}

static col_status check_cfg(col_pref_kind k, const col_pref_cfg *c, const char *loss, col_err *err)
{
    if (k == COL_PREF_RM)
        return COL_OK;
    if (!c)
        return col_err_set(err, COL_EINVAL, "%s loss: no settings given", loss);
    if (!isfinite(c->beta) || c->beta <= 0)
        return col_err_set(err, COL_EINVAL, "%s loss: beta must be a finite number above 0 (got %g)", loss, c->beta);
    if (k == COL_PREF_ORPO) {
        if (c->label_smoothing != 0 || c->robust)
            return col_err_set(err, COL_EINVAL, "ORPO loss: label smoothing is not defined for ORPO");
        return COL_OK;
    }
    if (!isfinite(c->label_smoothing) || c->label_smoothing < 0 || c->label_smoothing >= 0.5)
        return col_err_set(err, COL_EINVAL, "%s loss: label smoothing must lie in [0, 0.5) (got %g)", loss,
                           c->label_smoothing);
    if (c->robust && k != COL_PREF_DPO)
        return col_err_set(err, COL_EINVAL, "%s loss: the robust form is defined for DPO only", loss);
    if (k == COL_PREF_SIMPO && !isfinite(c->gamma))
        return col_err_set(err, COL_EINVAL, "SimPO loss: gamma must be finite (got %g)", c->gamma);
    return COL_OK;
}

static col_status check_batch(col_pref_kind k, const col_pref_batch *b, double *dpc, double *dpr, const char *loss,
                              col_err *err)
{
    if (!b)
        return col_err_set(err, COL_EINVAL, "%s loss: no batch given", loss);
    if (b->n <= 0)
        return col_err_set(err, COL_EINVAL, "%s loss: the batch has %d pairs (needs at least 1)", loss, b->n);
    if (!dpc || !dpr)
        return col_err_set(err, COL_EINVAL, "%s loss: no arrays for the derivatives", loss);
    const bool rm = k == COL_PREF_RM;
    col_status st;
    if ((st = check_array(b->pc, b->n, rm ? "chosen rewards" : "chosen log-probabilities", loss, err)) ||
        (st = check_array(b->pr, b->n, rm ? "rejected rewards" : "rejected log-probabilities", loss, err)))
        return st;
    if (k == COL_PREF_DPO) {
        if (!b->rc != !b->rr)
            return col_err_set(err, COL_EINVAL,
                               "DPO loss: reference log-probabilities given for one side only (both or neither)");
        if (b->rc && ((st = check_array(b->rc, b->n, "chosen reference log-probabilities", loss, err)) ||
                      (st = check_array(b->rr, b->n, "rejected reference log-probabilities", loss, err))))
            return st;
    }
    if (k == COL_PREF_SIMPO || k == COL_PREF_ORPO) {
        if ((st = check_counts(b->nc, b->n, "chosen token count", loss, err)) ||
            (st = check_counts(b->nr, b->n, "rejected token count", loss, err)))
            return st;
    }
    if (k == COL_PREF_ORPO) {
        if ((st = check_array(b->pnll, b->n, "NLL log-probability sums", loss, err)))
            return st;
        if (!b->nnll)
            return col_err_set(err, COL_EINVAL, "ORPO loss: the NLL token counts are missing");
        long long tot = 0;
        for (int i = 0; i < b->n; i++) {
            if (b->nnll[i] < 0)
                return col_err_set(err, COL_EINVAL, "ORPO loss: NLL token count %d is negative (%d)", i,
                                   b->nnll[i]);
            tot += b->nnll[i];
        }
        if (tot == 0)
            return col_err_set(err, COL_EINVAL, "ORPO loss: the chosen sequences have no NLL token");
        for (int i = 0; i < b->n; i++) {
            double ac = b->pc[i] / b->nc[i], ar = b->pr[i] / b->nr[i];
            if (!(ac < 0) || !(ar < 0))
                return col_err_set(err, COL_EINVAL,
                                   "ORPO loss: pair %d has an average log-probability of %g (the odds need it below 0)",
                                   i, ac < 0 ? ar : ac);
        }
    }
    return COL_OK;
}

col_status col_pref_loss(col_pref_kind k, const col_pref_cfg *c, const col_pref_batch *b, double *dpc,
                         double *dpr, col_pref_stats *s, col_err *err)
{
    const char *loss = kind_name(k);
    if (k != COL_PREF_DPO && k != COL_PREF_SIMPO && k != COL_PREF_ORPO && k != COL_PREF_RM)
        return col_err_set(err, COL_EINVAL, "preference loss: unknown kind %d", (int)k);
    col_status st;
    if ((st = check_cfg(k, c, loss, err)) || (st = check_batch(k, b, dpc, dpr, loss, err)))
        return st;
    const int n = b->n;
    const double inv_n = 1.0 / n;
    double sum = 0, rc_sum = 0, rr_sum = 0, acc = 0, lc_sum = 0, lr_sum = 0, lo_sum = 0, ratio_sum = 0;
    double nll = 0, dnll = 0;
    if (k == COL_PREF_ORPO) {
        double ps = 0;
        long long tot = 0;
        for (int i = 0; i < n; i++) {
            ps += b->pnll[i];
            tot += b->nnll[i];
        }
        nll = -ps / (double)tot;
        dnll = -1.0 / (double)tot;
    }
    for (int i = 0; i < n; i++) {
        double li, gc, gr, rew_c, rew_r, lpc = b->pc[i], lpr = b->pr[i];
        switch (k) {
        case COL_PREF_DPO: {
            double xc = b->pc[i] - (b->rc ? b->rc[i] : 0), xr = b->pr[i] - (b->rr ? b->rr[i] : 0), dz;
            li = smoothed_sigmoid_loss(c->beta * (xc - xr), c->label_smoothing, c->robust, &dz);
            gc = dz * c->beta;
            gr = -gc;
            rew_c = c->beta * xc;
            rew_r = c->beta * xr;
            break;
        }
        case COL_PREF_SIMPO: {
            double ac = b->pc[i] / b->nc[i], ar = b->pr[i] / b->nr[i], dz;
            li = smoothed_sigmoid_loss(c->beta * (ac - ar) - c->gamma, c->label_smoothing, false, &dz);
            gc = dz * c->beta / b->nc[i];
            gr = -dz * c->beta / b->nr[i];
            rew_c = c->beta * ac;
            rew_r = c->beta * ar;
            lpc = ac;
            lpr = ar;
            break;
        }
        case COL_PREF_ORPO: {
            double ac = b->pc[i] / b->nc[i], ar = b->pr[i] / b->nr[i];
            double lo = (ac - ar) - (log1mexp(ac) - log1mexp(ar));
            double ratio = log_sigmoid(lo);
            /* per pair -beta log s(lo); d lo / d a = 1 + e^a / (1 - e^a) = 1 / (1 - e^a) = -1 / expm1(a) */
            double dlo = -c->beta * sigmoid(-lo);
            li = -c->beta * ratio;
            gc = dlo * (-1.0 / expm1(ac)) / b->nc[i];
            gr = -dlo * (-1.0 / expm1(ar)) / b->nr[i];
            rew_c = c->beta * ac;
            rew_r = c->beta * ar;
            lpc = ac;
            lpr = ar;
            lo_sum += lo;
            ratio_sum += ratio;
            break;
        }
        default: { /* COL_PREF_RM */
            double z = b->pc[i] - b->pr[i];
            li = -log_sigmoid(z);
            gc = -sigmoid(-z);
            gr = -gc;
            rew_c = b->pc[i];
            rew_r = b->pr[i];
            break;
        }
        }
        sum += li;
        dpc[i] = gc * inv_n;
        dpr[i] = gr * inv_n;
        rc_sum += rew_c;
        rr_sum += rew_r;
        acc += rew_c > rew_r;
        lc_sum += lpc;
        lr_sum += lpr;
    }
    if (s) {
        s->loss = sum * inv_n + nll;
        s->chosen_reward = rc_sum * inv_n;
        s->rejected_reward = rr_sum * inv_n;
        s->margin = (rc_sum - rr_sum) * inv_n;
        s->accuracy = acc * inv_n;
        s->chosen_logp = lc_sum * inv_n;
        s->rejected_logp = lr_sum * inv_n;
        s->nll_loss = nll;
        s->log_odds_ratio = ratio_sum * inv_n;
        s->log_odds_chosen = lo_sum * inv_n;
        s->dnll = dnll;
        s->kl = 0;
    }
    return COL_OK;
}

double col_kto_kl(int n, const double *p_kl, const double *r_kl)
{
    if (n <= 0 || !p_kl || !r_kl)
        return NAN;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += p_kl[i] - r_kl[i];
    double kl = sum / n;
    return kl < 0 ? 0.0 : kl; /* TRL's clamp(min=0); NaN stays NaN */
}

col_status col_kto_loss(const col_kto_cfg *c, int n, const double *p, const double *r, const bool *desirable,
                        double kl, double *dp, col_pref_stats *s, col_err *err)
{
    if (!c)
        return col_err_set(err, COL_EINVAL, "KTO loss: no settings given");
    if (!isfinite(c->beta) || c->beta <= 0)
        return col_err_set(err, COL_EINVAL, "KTO loss: beta must be a finite number above 0 (got %g)", c->beta);
    if (!isfinite(c->desirable_weight) || c->desirable_weight < 0 || !isfinite(c->undesirable_weight) ||
        c->undesirable_weight < 0)
        return col_err_set(err, COL_EINVAL, "KTO loss: the class weights must be finite and not negative (got %g, %g)",
                           c->desirable_weight, c->undesirable_weight);
    if (n <= 0)
        return col_err_set(err, COL_EINVAL, "KTO loss: the batch has %d examples (needs at least 1)", n);
    if (!isfinite(kl))
        return col_err_set(err, COL_EINVAL, "KTO loss: the KL estimate is not finite (%g)", kl);
    if (!desirable || !dp)
        return col_err_set(err, COL_EINVAL, "KTO loss: the labels or the derivative array are missing");
    col_status st;
    if ((st = check_array(p, n, "log-probabilities", "KTO", err)) ||
        (st = check_array(r, n, "reference log-probabilities", "KTO", err)))
        return st;
    const double inv_n = 1.0 / n, beta = c->beta;
    double sum = 0, rc = 0, rr = 0, lc = 0, lr = 0;
    int nc = 0, nr = 0;
    for (int i = 0; i < n; i++) {
        double x = p[i] - r[i];
        if (desirable[i]) {
            double z = beta * (x - kl);
            sum += c->desirable_weight * (1.0 - sigmoid(z));
            /* d/dx (1 - s(z)) = -s(z) s(-z) beta */
            dp[i] = -c->desirable_weight * sigmoid(z) * sigmoid(-z) * beta * inv_n;
            rc += beta * x;
            lc += p[i];
            nc++;
        } else {
            double z = beta * (kl - x);
            sum += c->undesirable_weight * (1.0 - sigmoid(z));
            dp[i] = c->undesirable_weight * sigmoid(z) * sigmoid(-z) * beta * inv_n;
            rr += beta * x;
            lr += p[i];
            nr++;
        }
    }
    if (s) {
        s->loss = sum * inv_n;
        s->chosen_reward = nc ? rc / nc : NAN;
        s->rejected_reward = nr ? rr / nr : NAN;
        s->margin = nc && nr ? s->chosen_reward - s->rejected_reward : NAN;
        s->accuracy = NAN;
        s->chosen_logp = nc ? lc / nc : NAN;
        s->rejected_logp = nr ? lr / nr : NAN;
        s->nll_loss = 0;
        s->log_odds_ratio = 0;
        s->log_odds_chosen = 0;
        s->dnll = 0;
        s->kl = kl;
    }
    return COL_OK;
}
