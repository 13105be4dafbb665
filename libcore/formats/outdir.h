/* outdir.h - an output directory that is replaced whole, and never loses or
 * deletes anything that is not colossal's.
 *
 * A training checkpoint is several files (weights, optimizer state, run
 * state) that only make sense together. They are written into a staging
 * directory beside the target ("OUT.partial"), each file fsynced, and the
 * staging directory then takes the target's place in one step: Linux's
 * renameat2(RENAME_EXCHANGE) swaps the two names atomically, after which the
 * old contents (now under the staging name) are cleared. A crash at any point
 * leaves OUT either wholly old or wholly new. Where the file system cannot
 * exchange names, OUT is first renamed to "OUT.old" and the stage to OUT; a
 * crash between the two renames leaves OUT missing and OUT.old complete,
 * which the next col_outdir_open renames back.
 *
 * What is colossal's: every directory colossal writes holds a manifest,
 * ".colossal-manifest". Its first line is a format tag; a staging directory
 * gets one at creation saying "everything in here is colossal's", and at the
 * commit it is rewritten to list the files of the save. Only names a manifest
 * lists (or, in a staging directory, its plain files) are ever unlinked.
 * Entries of OUT that its manifest does not list - the user's notes, data,
 * subdirectories - are moved into the new OUT at each commit, never deleted.
 * An OUT written by an earlier colossal (no manifest) counts as colossal's
 * only for the names the new save writes again.
 *
 * Links and other users: the directory holding OUT is opened once and all
 * work is relative to it, never following a symbolic link: a link at OUT is
 * refused, and a link, file or foreign directory at OUT.partial or OUT.old is
 * refused, named, and left alone.
 *
 * The run lock: col_outdir_open takes an exclusive flock on "OUT.lock"
 * (beside OUT, holding the PID) for the life of the handle, so two processes
 * never write one OUT; the second one gets COL_EBUSY naming the first's PID.
 * col_outdir_close removes the lock file while still holding it.
 *
 * Messages name paths, never command-line options: the caller adds those. */
#ifndef COL_OUTDIR_H
#define COL_OUTDIR_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct col_outdir col_outdir;

enum {
    /* commit with the two renames through OUT.old even where the file
     * system could exchange (what file systems without the exchange get;
     * for tests) */
    COL_OUTDIR_TWO_RENAMES = 1u << 0,
};

/* Opens the output directory dir for a run: strips trailing slashes
 * (refusing an empty path, "/", "." and ".."), opens the directory that
 * holds it, refuses a dir that is a symbolic link or not a directory
 * (COL_EINVAL), takes the run lock (COL_EBUSY with the holder's PID when
 * another process has it; COL_EIO when the location is not writable) and
 * finishes an interrupted commit (col_outdir_recover). dir need not exist. */
col_status col_outdir_open(const char *dir, unsigned flags, col_outdir **od, col_err *err);
/* The normalised path of OUT (no trailing slash), for messages and readers. */
const char *col_outdir_path(const col_outdir *od);
/* Finishes what an interrupted commit left behind: renames OUT.old back
 * when OUT is missing, else clears OUT.old and a stale OUT.partial (their
 * colossal files are removed, anything else is moved into OUT). Refuses,
 * naming it, a staging or old path that is a link, a file, a directory of
 * another user or one without a colossal manifest. COL_OK when there was
 * nothing to do. col_outdir_open calls it. */
col_status col_outdir_recover(col_outdir *od, col_err *err);
/* Creates the staging directory (clearing a stale one as recover does) and
 * sets *stage to its path, where the writers put the save's files. */
col_status col_outdir_begin(col_outdir *od, const char **stage, col_err *err);
/* Creates the subdirectory name (a plain name: no '/', not "." or "..") in
 * the begun save's stage, for a save laid out in folders (a diffusers model:
 * unet/, vae/, ...); *path (n bytes) receives its path. It may hold plain
 * files only. At the commit it gets a manifest of its own listing them and
 * is listed in OUT's: it is colossal's as a whole, and entries a user adds
 * inside it are kept as in OUT itself (moved into the next save's folder of
 * that name, which is created for them when that save has none). */
col_status col_outdir_mkdir(col_outdir *od, const char *name, char *path, size_t n, col_err *err);
/* Seals the stage (its manifest lists its files, fsynced) and makes it OUT,
 * moving the entries of the old OUT that are not colossal's into it, then
 * clears the old contents. On failure before the replacement the previous
 * OUT is intact, and the message says where the new save is (the stage, which
 * the next col_outdir_begin or col_outdir_open clears). */
col_status col_outdir_commit(col_outdir *od, col_err *err);
/* Removes the staging directory after a failed save (nothing when no save is
 * begun, or after a commit). */
void col_outdir_abort(col_outdir *od);
/* Aborts a begun save, removes the lock file and releases the lock. */
void col_outdir_close(col_outdir *od);

#endif
