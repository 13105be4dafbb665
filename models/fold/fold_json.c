/* fold_json.c - AlphaFold's and ColabFold's confidence JSON files, with Python's float repr. */
#include "fold_json.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* repr(v) as json.dumps writes a float: the shortest digits that read back as v (among those the
 * closest), positional when the decimal exponent is in -4 < decpt <= 16, else d.ddde+XX */
static void py_repr(char *out, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(out, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, n, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (v == 0) {
        snprintf(out, n, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    char dig[24];
    int nd = 0;
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') dig[nd++] = *s;
    int x10 = atoi(s + 1), decpt = x10 + 1;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    char *o = out;
    size_t left = n;
#define PUT(...)                                          \
    do {                                                  \
        int k_ = snprintf(o, left, __VA_ARGS__);          \
        if (k_ < 0 || (size_t)k_ >= left) return;         \
        o += k_;                                          \
        left -= (size_t)k_;                               \
    } while (0)
    if (neg) PUT("-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0)
            PUT("0.%.*s%.*s", -decpt, "0000", nd, dig);
        else if (decpt >= nd)
            PUT("%.*s%.*s.0", nd, dig, decpt - nd, "0000000000000000");
        else
            PUT("%.*s.%.*s", decpt, dig, nd - decpt, dig + decpt);
    } else {
        PUT("%c", dig[0]);
        if (nd > 1) PUT(".%.*s", nd - 1, dig + 1);
        PUT("e%c%02d", x10 < 0 ? '-' : '+', x10 < 0 ? -x10 : x10);
    }
#undef PUT
}

/* repr of v, a value rounded to d decimals: "%.*f" without its trailing zeros (one kept) when that
 * reads back as v (at most 15 significant digits: the shortest), else the general repr */
static void put_rounded(col_strbuf *b, double v, int d)
{
    char s[64];
    if (isfinite(v) && fabs(v) < 1e12 && v != 0) {
        snprintf(s, sizeof s, "%.*f", d, v);
        size_t len = strlen(s);
        while (len > 2 && s[len - 1] == '0' && s[len - 2] != '.') s[--len] = '\0';
        if (strtod(s, NULL) == v) {
            col_strbuf_put(b, s, len);
            return;
        }
    }
    py_repr(s, sizeof s, v);
    col_strbuf_puts(b, s);
}

/* np.round(x, d) / np.around for float64: x * 10^d, rint, / 10^d */
static double np_round(double x, int d)
{
    double f = d == 1 ? 10.0 : 100.0;
    return rint(x * f) / f;
}

/* Python's round(x, 2): correctly rounded to 2 decimals (printf's rounding of the exact value) */
static double py_round2(double x)
{
    if (!isfinite(x)) return x;
    char s[64];
    snprintf(s, sizeof s, "%.2f", x);
    return strtod(s, NULL);
}

static col_status check_n(const char *what, const void *a, int64_t n_res, col_err *err)
{
    if (!a) return col_err_set(err, COL_EINVAL, "%s: no values", what);
    if (n_res < 1 || n_res > (int64_t)1 << 20)
        return col_err_set(err, COL_EINVAL, "%s: %lld residues (1 to %d)", what, (long long)n_res, 1 << 20);
    return COL_OK;
}

/* the rows of pae rounded to d decimals, elements and rows separated by sep */
static void put_matrix(col_strbuf *b, const float *pae, int64_t n, int d, const char *sep)
{
    col_strbuf_puts(b, "[");
    for (int64_t i = 0; i < n && !b->oom; i++) {
        if (i) col_strbuf_puts(b, sep);
        col_strbuf_puts(b, "[");
        for (int64_t j = 0; j < n; j++) {
            if (j) col_strbuf_puts(b, sep);
            put_rounded(b, np_round(pae[i * n + j], d), d);
        }
        col_strbuf_puts(b, "]");
    }
    col_strbuf_puts(b, "]");
}

static col_status done(col_strbuf *b, const char *what, col_err *err)
{
    return b->oom ? col_err_set(err, COL_ENOMEM, "%s: out of memory", what) : COL_OK;
}

col_status fold_json_pae(const float *pae, int64_t n_res, double max_pae, col_strbuf *out, col_err *err)
{
    col_status st = check_n("PAE JSON", pae, n_res, err);
    if (st != COL_OK) return st;
    col_strbuf_puts(out, "[{\"predicted_aligned_error\":");
    put_matrix(out, pae, n_res, 1, ",");
    char s[64];
    py_repr(s, sizeof s, max_pae);
    col_strbuf_puts(out, ",\"max_predicted_aligned_error\":");
    col_strbuf_puts(out, s);
    col_strbuf_puts(out, "}]");
    return done(out, "PAE JSON", err);
}

col_status fold_json_confidence(const float *plddt, int64_t n_res, col_strbuf *out, col_err *err)
{
    col_status st = check_n("confidence JSON", plddt, n_res, err);
    if (st != COL_OK) return st;
    for (int64_t i = 0; i < n_res; i++)
        if (!(plddt[i] >= 0 && plddt[i] <= 100))
            return col_err_set(err, COL_EINVAL, "confidence JSON: the pLDDT of residue %lld is not in [0, 100]",
                               (long long)i + 1);
    col_strbuf_puts(out, "{\"residueNumber\":[");
    for (int64_t i = 0; i < n_res; i++) {
        char s[32];
        snprintf(s, sizeof s, i ? ",%lld" : "%lld", (long long)i + 1);
        col_strbuf_puts(out, s);
    }
    col_strbuf_puts(out, "],\"confidenceScore\":[");
    for (int64_t i = 0; i < n_res && !out->oom; i++) {
        if (i) col_strbuf_puts(out, ",");
        put_rounded(out, py_round2(plddt[i]), 2);
    }
    col_strbuf_puts(out, "],\"confidenceCategory\":[");
    for (int64_t i = 0; i < n_res; i++) {
        float s = plddt[i];
        const char *c = s < 50 ? "\"D\"" : s < 70 ? "\"L\"" : s < 90 ? "\"M\"" : "\"H\"";
        if (i) col_strbuf_puts(out, ",");
        col_strbuf_puts(out, c);
    }
    col_strbuf_puts(out, "]}");
    return done(out, "confidence JSON", err);
}

col_status fold_json_scores(const float *plddt, const float *pae, int64_t n_res, double ptm, col_strbuf *out,
                            col_err *err)
{
    col_status st = check_n("scores JSON", plddt, n_res, err);
    if (st != COL_OK) return st;
    col_strbuf_puts(out, "{\"plddt\": [");
    for (int64_t i = 0; i < n_res && !out->oom; i++) {
        if (i) col_strbuf_puts(out, ", ");
        put_rounded(out, np_round(plddt[i], 2), 2);
    }
    col_strbuf_puts(out, "]");
    if (pae) {
        float m = pae[0];
        for (int64_t k = 1; k < n_res * n_res && !isnan(m); k++)   /* numpy's max: a NaN wins */
            if (isnan(pae[k]) || pae[k] > m) m = pae[k];
        char s[64];
        py_repr(s, sizeof s, m);
        col_strbuf_puts(out, ", \"max_pae\": ");
        col_strbuf_puts(out, s);
        col_strbuf_puts(out, ", \"pae\": ");
        put_matrix(out, pae, n_res, 2, ", ");
        col_strbuf_puts(out, ", \"ptm\": ");
        put_rounded(out, np_round(ptm, 2), 2);
    }
    col_strbuf_puts(out, "}");
    return done(out, "scores JSON", err);
}
