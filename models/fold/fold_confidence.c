/* fold_confidence.c - pLDDT, predicted aligned error and pTM from the heads' logits (confidence.py). */
#include "fold_confidence.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

void fold_breaks(double first, double last, int num_bins, double *breaks)
{
    int n = num_bins - 1;
    for (int i = 0; i < n; i++) breaks[i] = i == n - 1 ? last : first + (last - first) * i / (n - 1);
}

/* softmax of one row of logits into p (double); false when a logit is not finite */
static bool softmax_row(const float *x, int n, double *p)
{
    double m = -INFINITY;
    for (int k = 0; k < n; k++) {
        if (!isfinite(x[k])) return false;
        if (x[k] > m) m = x[k];
    }
    double s = 0;
    for (int k = 0; k < n; k++) s += p[k] = exp((double)x[k] - m);
    for (int k = 0; k < n; k++) p[k] /= s;
    return true;
}

static col_status check_sizes(const char *what, int64_t n_res, int num_bins, int min_bins, col_err *err)
{
    if (n_res <= 0 || n_res > (int64_t)1 << 24)
        return col_err_set(err, COL_EINVAL, "%s: %lld residues (1 to %d)", what, (long long)n_res, 1 << 24);
    if (num_bins < min_bins || num_bins > 4096)
        return col_err_set(err, COL_EINVAL, "%s: %d bins (%d to 4096)", what, num_bins, min_bins);
    return COL_OK;
}

col_status fold_plddt(const float *logits, int64_t n_res, int num_bins, float *plddt, col_err *err)
{
    col_status st = check_sizes("pLDDT", n_res, num_bins, 1, err);
    if (st != COL_OK) return st;
    double *p = malloc(sizeof(double) * (size_t)num_bins);
    if (!p) return col_err_set(err, COL_ENOMEM, "pLDDT: out of memory");
    double width = 1.0 / num_bins;
    for (int64_t i = 0; i < n_res; i++) {
        if (!softmax_row(logits + i * num_bins, num_bins, p)) {
            free(p);
            return col_err_set(err, COL_EINVAL, "pLDDT: the logits of residue %lld are not finite", (long long)i + 1);
        }
        double e = 0;
        for (int k = 0; k < num_bins; k++) e += p[k] * ((k + 0.5) * width);
        plddt[i] = (float)(e * 100.0);
    }
    free(p);
    return COL_OK;
}

/* confidence._calculate_bin_centers of linspace(0, max_error_bin, num_bins - 1): num_bins centres */
static col_status error_bin_centres(const char *what, int64_t n_res, int num_bins, double max_error_bin, double **out,
                                    double **probs, col_err *err)
{
    col_status st = check_sizes(what, n_res, num_bins, 3, err);
    if (st != COL_OK) return st;
    if (!(max_error_bin > 0) || !isfinite(max_error_bin))
        return col_err_set(err, COL_EINVAL, "%s: the largest error bin is not a positive number", what);
    double *c = malloc(sizeof(double) * (size_t)num_bins * 2);
    if (!c) return col_err_set(err, COL_ENOMEM, "%s: out of memory", what);
    fold_breaks(0.0, max_error_bin, num_bins, c);
    double step = c[1] - c[0];
    for (int k = 0; k < num_bins - 1; k++) c[k] += step / 2;
    c[num_bins - 1] = c[num_bins - 2] + step;
    *out = c;
    *probs = c + num_bins;
    return COL_OK;
}

col_status fold_pae(const float *logits, int64_t n_res, int num_bins, double max_error_bin, float *pae,
                    double *max_pae, col_err *err)
{
    double *c, *p;
    col_status st = error_bin_centres("predicted aligned error", n_res, num_bins, max_error_bin, &c, &p, err);
    if (st != COL_OK) return st;
    for (int64_t ij = 0; pae && ij < n_res * n_res; ij++) {
        if (!softmax_row(logits + ij * num_bins, num_bins, p)) {
            free(c);
            return col_err_set(err, COL_EINVAL, "predicted aligned error: the logits of residues %lld, %lld are not finite",
                               (long long)(ij / n_res) + 1, (long long)(ij % n_res) + 1);
        }
        double e = 0;
        for (int k = 0; k < num_bins; k++) e += p[k] * c[k];
        pae[ij] = (float)e;
    }
    if (max_pae) *max_pae = c[num_bins - 1];
    free(c);
    return COL_OK;
}

col_status fold_ptm(const float *logits, int64_t n_res, int num_bins, double max_error_bin,
                    const float *residue_weights, double *ptm, col_err *err)
{
    double *c, *p;
    col_status st = error_bin_centres("pTM", n_res, num_bins, max_error_bin, &c, &p, err);
    if (st != COL_OK) return st;
    double wsum = 0;
    for (int64_t i = 0; i < n_res; i++) {
        double w = residue_weights ? residue_weights[i] : 1.0;
        if (!(w >= 0 && w <= 1)) {
            free(c);
            return col_err_set(err, COL_EINVAL, "pTM: the weight of residue %lld is not in [0, 1]", (long long)i + 1);
        }
        wsum += w;
    }
    double d0 = 1.24 * pow(fmax(wsum, 19.0) - 15.0, 1.0 / 3) - 1.8;
    /* tm_per_bin = 1 / (1 + centre^2 / d0^2), in place of the centres */
    for (int k = 0; k < num_bins; k++) c[k] = 1.0 / (1.0 + (c[k] * c[k]) / (d0 * d0));
    double best = -INFINITY;
    for (int64_t i = 0; i < n_res; i++) {
        double wi = residue_weights ? residue_weights[i] : 1.0, norm = 0, acc = 0;
        for (int64_t j = 0; j < n_res; j++) norm += wi * (residue_weights ? residue_weights[j] : 1.0);
        for (int64_t j = 0; j < n_res; j++) {
            if (!softmax_row(logits + (i * n_res + j) * num_bins, num_bins, p)) {
                free(c);
                return col_err_set(err, COL_EINVAL, "pTM: the logits of residues %lld, %lld are not finite",
                                   (long long)i + 1, (long long)j + 1);
            }
            double t = 0;
            for (int k = 0; k < num_bins; k++) t += p[k] * c[k];
            acc += t * (wi * (residue_weights ? residue_weights[j] : 1.0) / (1e-8 + norm));
        }
        if (acc * wi > best) best = acc * wi;
    }
    *ptm = best;
    free(c);
    return COL_OK;
}
