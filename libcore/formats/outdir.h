/* outdir.h - replacing a whole output directory at once.
 *
 * A training checkpoint is several files (weights, optimizer state, run
 * state) that only make sense together. They are written into a staging
 * directory beside the target ("DIR.partial"), each file fsynced, and the
 * staging directory then takes the target's place in one step: Linux's
 * renameat2(RENAME_EXCHANGE) swaps the two names atomically, after which the
 * old contents (now under the staging name) are removed. A crash at any
 * point leaves DIR either wholly old or wholly new; a stale DIR.partial is
 * removed by the next col_outdir_begin.
 *
 * Where the file system cannot exchange names, the target is first renamed
 * to "DIR.old" and the staging directory to DIR; a crash between the two
 * renames leaves DIR missing and DIR.old complete, which
 * col_outdir_recover() renames back.
 *
 * Only directories that hold regular files are ever removed: a staging or
 * old directory with a subdirectory in it is left alone with an error. */
#ifndef COL_OUTDIR_H
#define COL_OUTDIR_H

#include <stddef.h>

#include "status.h"

/* Creates the staging directory for dir (removing a stale one) and writes
 * its path into stage (size n). Fails when the parent of dir is not
 * writable, with a line saying so and COL_SETTING_OUTPUT_DIR marked. */
col_status col_outdir_begin(const char *dir, char *stage, size_t n, col_err *err);
/* fsyncs stage, makes it dir (replacing the old dir, if any) and fsyncs the
 * parent. On failure dir is unchanged and stage is still there. */
col_status col_outdir_commit(const char *dir, const char *stage, col_err *err);
/* Removes the staging directory (after a failed save). */
void col_outdir_abort(const char *stage);
/* When dir is missing and dir.old exists (a crash in the middle of the
 * fallback commit), renames it back. COL_OK when there was nothing to do. */
col_status col_outdir_recover(const char *dir, col_err *err);
/* Removes a directory that holds only regular files (and the directory). */
col_status col_outdir_remove(const char *path, col_err *err);

#endif
