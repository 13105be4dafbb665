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
        e->settings = 0;
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

col_status col_err_set_on(col_err *e, col_setting s, col_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    col_err_vset(e, code, fmt, ap);
    va_end(ap);
    col_err_add_setting(e, s);
    return code;
}

void col_err_add_setting(col_err *e, col_setting s)
{
    if (e && s > COL_SETTING_NONE && s < COL_NSETTINGS)
        e->settings |= 1u << s;
}

bool col_err_has_setting(const col_err *e, col_setting s)
{
    return e && s > COL_SETTING_NONE && s < COL_NSETTINGS && (e->settings & (1u << s));
}

col_status col_err_prefix(col_err *e, const char *fmt, ...)
{
    if (!e)
        return COL_OK;
    char buf[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    /* then ": " and the message, cut at the record's size */
    for (const char *p = ": "; *p && len + 1 < sizeof buf; p++)
        buf[len++] = *p;
    size_t rest = strnlen(e->msg, sizeof e->msg);
    if (rest > sizeof buf - 1 - len)
        rest = sizeof buf - 1 - len;
    memcpy(buf + len, e->msg, rest);
    buf[len + rest] = '\0';
    memcpy(e->msg, buf, sizeof buf);
    return e->code;
}

col_status col_err_copy(col_err *dst, const col_err *src)
{
    if (dst && src && dst != src)
        *dst = *src;
    return src ? src->code : COL_OK;
}

void col_err_clear(col_err *e)
{
    if (e) {
        e->code = COL_OK;
        e->msg[0] = '\0';
        e->settings = 0;
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

const char *col_setting_name(col_setting s)
{
    switch (s) {
    case COL_SETTING_NONE: return "none";
    case COL_SETTING_HOST_BUDGET: return "host memory budget";
    case COL_SETTING_COMPUTE_BUDGET: return "compute tier budget";
    case COL_SETTING_CHUNK_SIZE: return "chunk size";
    case COL_SETTING_NVME_DIR: return "NVMe directory";
    case COL_SETTING_NVME_MAX: return "NVMe size limit";
    case COL_SETTING_NVME_KINDS: return "NVMe tensor kinds";
    case COL_SETTING_TOKENIZER: return "tokenizer";
    case COL_SETTING_CHAT_TEMPLATE: return "chat template";
    case COL_SETTING_OUTPUT_DIR: return "output directory";
    case COL_SETTING_EXTRA_TENSORS: return "accepting unused checkpoint tensors";
    case COL_SETTING_PRECISION: return "compute precision";
    case COL_NSETTINGS: break;
    }
    return "unknown setting";
}
