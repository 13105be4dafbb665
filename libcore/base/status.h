/* status.h - status codes and error records for every libcore call.
 *
 * Library code never prints and never exits: a failing call returns a
 * col_status and writes one human-readable line into the caller's col_err.
 */
#ifndef COL_STATUS_H
#define COL_STATUS_H

#include <stdarg.h>

typedef enum {
    COL_OK = 0,
    COL_EINVAL,      /* bad argument */
    COL_ESHAPE,      /* shapes do not fit together */
    COL_EDTYPE,      /* unsupported or mismatched dtype */
    COL_ENOMEM,      /* allocation failed or budget exceeded */
    COL_EIO,         /* read/write failure */
    COL_EFORMAT,     /* malformed input file */
    COL_EUNSUPPORTED,/* valid request that this build cannot do */
    COL_ESTATE,      /* call made in the wrong state (e.g. run before plan) */
    COL_EINTERNAL,   /* a bug: an invariant did not hold */
    COL_EBUSY        /* held by another process (a lock) */
} col_status;

#define COL_ERR_MSG_MAX 512

typedef struct {
    col_status code;
    char msg[COL_ERR_MSG_MAX];
} col_err;

/* Records code and a printf-style message in e (if e is non-NULL) and
 * returns code, so callers can write `return col_err_set(e, ...)`. */
col_status col_err_set(col_err *e, col_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
col_status col_err_vset(col_err *e, col_status code, const char *fmt, va_list ap);
void col_err_clear(col_err *e);
const char *col_status_name(col_status s);

#endif
