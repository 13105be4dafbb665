/* apperr.h - a library error as one line of a program: the library's message,
 * then the program's options for the settings the error marks (status.h's
 * col_err.settings), e.g. "NVMe directory /x is not a directory; choose
 * another NVMe directory (--nvme-dir)". Each program says in one function
 * which of its options sets which setting. */
#ifndef COL_APPS_APPERR_H
#define COL_APPS_APPERR_H

#include <stddef.h>
#include <stdio.h>

#include "lm_trainer.h"
#include "status.h"

/* The long option (without "--") that sets s in this program; NULL when none does. */
typedef const char *app_flag_fn(col_setting s);

enum { APP_ERR_LINE_MAX = COL_ERR_MSG_MAX + 160 };

/* Writes e's message, then " (--a, --b)" for the options of the settings it
 * marks (in col_setting order, each once), into buf (n bytes); returns buf. */
const char *app_err_line(const col_err *e, app_flag_fn *flag_of, char *buf, size_t n);

/* What a checkpoint load reported, as warnings on f, each line starting "PROG: warning: ": one line
 * per parameter holding NaN or Inf values ("tensor 'x' holds 3 NaN/Inf values"), a line for those
 * past the report's names, and one line for the tensors accepted unused (--ignore-extra-tensors).
 * Nothing when the report is clean; r may be NULL. */
void app_load_warnings(FILE *f, const char *prog, const col_lm_load_report *r);

#endif
