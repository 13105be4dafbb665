/* apperr.c - see apperr.h. */
#include "apperr.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* whether an earlier marked setting of e maps to the same option */
static bool named_before(const col_err *e, app_flag_fn *flag_of, int s, const char *flag)
{
    for (int i = COL_SETTING_NONE + 1; i < s; i++) {
        const char *f = col_err_has_setting(e, (col_setting)i) ? flag_of((col_setting)i) : NULL;
        if (f && strcmp(f, flag) == 0)
            return true;
    }
    return false;
}

const char *app_err_line(const col_err *e, app_flag_fn *flag_of, char *buf, size_t n)
{
    if (!buf || n == 0)
        return buf;
    size_t len = (size_t)snprintf(buf, n, "%s", e ? e->msg : "");
    int named = 0;
    for (int s = COL_SETTING_NONE + 1; e && flag_of && s < COL_NSETTINGS && len < n; s++) {
        const char *flag = col_err_has_setting(e, (col_setting)s) ? flag_of((col_setting)s) : NULL;
        if (!flag || named_before(e, flag_of, s, flag))
            continue;
        len += (size_t)snprintf(buf + len, n - len, "%s--%s", named++ ? ", " : " (", flag);
    }
    if (named && len < n)
        snprintf(buf + len, n - len, ")");
    return buf;
}

void app_load_warnings(FILE *f, const char *prog, const col_lm_load_report *r)
{
    if (!r)
        return;
    int named = r->n_nonfinite < COL_LM_LOAD_NAMES ? r->n_nonfinite : COL_LM_LOAD_NAMES;
    for (int i = 0; i < named; i++)
        fprintf(f, "%s: warning: tensor '%s' holds %lld NaN/Inf value%s\n", prog, r->nonfinite[i].name,
                (long long)r->nonfinite[i].count, r->nonfinite[i].count == 1 ? "" : "s");
    if (r->n_nonfinite > named)
        fprintf(f, "%s: warning: %d more tensors hold NaN/Inf values\n", prog, r->n_nonfinite - named);
    if (r->n_extra > 0) {
        fprintf(f, "%s: warning: ignored %d checkpoint tensor%s the model does not use:", prog, r->n_extra,
                r->n_extra == 1 ? "" : "s");
        int shown = r->n_extra < 3 ? r->n_extra : 3;
        for (int i = 0; i < shown; i++)
            fprintf(f, "%s '%s'", i ? "," : "", r->extra[i]);
        fprintf(f, "%s\n", r->n_extra > shown ? ", ..." : "");
    }
}
