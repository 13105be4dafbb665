#include "status.h"

#include <stdio.h>
#include <string.h>

col_status col_err_vset(col_err *e, col_status code, const char *fmt, va_list ap)
{
    if (e) {
        /* formatted aside first: a message may quote the previous one (e->msg as an argument) */
        char buf[sizeof e->msg];
        vsnprintf(buf, sizeof buf, fmt, ap);
        memcpy(e->msg, buf, sizeof buf);
        e->code = code;
    }
    return code;
}

col_status col_err_set(col_err *e, col_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    col_err_vset(e, code, fmt, ap);
    va_end(ap);
    return code;
}

void col_err_clear(col_err *e)
{
    if (e) {
        e->code = COL_OK;
        e->msg[0] = '\0';
    }
}

const char *col_status_name(col_status s)
{
    switch (s) {
    case COL_OK: return "ok";
    case COL_EINVAL: return "invalid argument";
    case COL_ESHAPE: return "shape mismatch";
    case COL_EDTYPE: return "dtype mismatch";
    case COL_ENOMEM: return "out of memory";
    case COL_EIO: return "I/O error";
    case COL_EFORMAT: return "malformed input";
    case COL_EUNSUPPORTED: return "unsupported";
    case COL_ESTATE: return "wrong state";
    case COL_EINTERNAL: return "internal error";
    case COL_EBUSY: return "busy";
    }
    return "unknown status";
}
