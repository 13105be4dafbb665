/* status.h - status codes and error records for every libcore call.
 *
 * Library code never prints and never exits: a failing call returns a
 * col_status and writes one human-readable line into the caller's col_err.
 *
 * The line speaks of the library, never of a program's command line: where
 * the fault lies in a setting the caller chose (a budget too small, a
 * directory that cannot be used), the library says so in its own words ("the
 * compute tier budget of 2.0 MiB is too small: ...") and marks the setting in
 * col_err.settings. A program maps each setting to its own option (a
 * command-line flag, a configuration key) and names it beside the message.
 */
#ifndef COL_STATUS_H
#define COL_STATUS_H

#include <stdarg.h>
#include <stdbool.h>

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

/* A setting of the library's caller that an error can be about. */
typedef enum {
    COL_SETTING_NONE = 0,
    COL_SETTING_HOST_BUDGET,    /* host memory for parameters, gradients and states (host_budget) */
    COL_SETTING_COMPUTE_BUDGET, /* the compute tier's budget (compute_budget) */
    COL_SETTING_CHUNK_SIZE,     /* memtier chunk bytes (chunk_bytes) */
    COL_SETTING_NVME_DIR,       /* the NVMe tier's directory (nvme_dir) */
    COL_SETTING_NVME_MAX,       /* the most bytes the NVMe tier may take (nvme_max) */
    COL_SETTING_NVME_KINDS,     /* what lives on the NVMe tier (nvme_kinds) */
    COL_SETTING_TOKENIZER,      /* the tokenizer given apart from a model */
    COL_SETTING_CHAT_TEMPLATE,  /* the chat template family */
    COL_SETTING_OUTPUT_DIR,     /* a directory to write results into */
    COL_SETTING_EXTRA_TENSORS,  /* accepting checkpoint tensors the model does not use */
    COL_SETTING_PRECISION,      /* the compute dtype of mixed precision (compute_dtype) */
    COL_NSETTINGS
} col_setting;

#define COL_ERR_MSG_MAX 512

typedef struct {
    col_status code;
    char msg[COL_ERR_MSG_MAX];
    unsigned settings; /* the settings at fault: bit (1u << s) for each col_setting s; 0 = none named */
} col_err;

/* Records code and a printf-style message in e (if e is non-NULL) and
 * returns code, so callers can write `return col_err_set(e, ...)`. A new
 * message names no setting: e->settings becomes 0. */
col_status col_err_set(col_err *e, col_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
col_status col_err_vset(col_err *e, col_status code, const char *fmt, va_list ap);
/* col_err_set for an error about one setting: e->settings holds just it. */
col_status col_err_set_on(col_err *e, col_setting s, col_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Marks one more setting at fault (another way out the message names). */
void col_err_add_setting(col_err *e, col_setting s);
/* Whether e marks s. */
bool col_err_has_setting(const col_err *e, col_setting s);
/* Puts a printf-style context and ": " before e's message, keeping its code
 * and settings; returns the code. */
col_status col_err_prefix(col_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies src (code, message, settings) into dst, if non-NULL; returns the code. */
col_status col_err_copy(col_err *dst, const col_err *src);
void col_err_clear(col_err *e);
const char *col_status_name(col_status s);
/* The setting in the library's words ("compute tier budget"). */
const char *col_setting_name(col_setting s);

#endif
