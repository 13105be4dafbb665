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
