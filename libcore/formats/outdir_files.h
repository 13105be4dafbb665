/* outdir_files.h - the pieces of outdir.c that work on one directory: its
 * manifest, its listing, and clearing a directory colossal left behind.
 * Every call works relative to an open directory and never follows a
 * symbolic link. Internal to outdir*.c (and its fuzz harness). */
#ifndef COL_OUTDIR_FILES_H
#define COL_OUTDIR_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#define OD_MANIFEST ".colossal-manifest"
/* the manifest's first line: a stage being written (every plain file in it
 * is colossal's), or a sealed save followed by its file names */
#define OD_TAG_STAGING "colossal staging directory 1"
#define OD_TAG_OUTPUT "colossal output directory 1"

typedef struct {
    bool present;  /* the directory has a manifest */
    bool staging;  /* OD_TAG_STAGING */
    size_t n;
    char **names;  /* the listed names (into text) */
    char *text;
} od_manifest;

typedef struct {
    size_t n;
    char **names;
} od_list;

/* Parses a manifest's text (len bytes, not NUL-terminated; where names it in
 * messages). Names are non-empty, without '/', not "." or "..". */
col_status od_manifest_parse(const char *text, size_t len, const char *where, od_manifest *m, col_err *err);
/* Reads dirfd's manifest; m->present is false when there is none. shown is
 * the directory's path for messages. */
col_status od_manifest_read(int dirfd, const char *shown, od_manifest *m, col_err *err);
/* Writes dirfd's manifest (through a temporary file, fsynced): the staging
 * tag, or the output tag and the names. */
col_status od_manifest_write(int dirfd, const char *shown, bool staging, const od_list *names, col_err *err);
bool od_manifest_lists(const od_manifest *m, const char *name);
void od_manifest_free(od_manifest *m);
/* The manifest or its temporary file: colossal's in every directory. */
bool od_is_manifest_file(const char *name);

/* The entries of dirfd but "." and "..". */
col_status od_list_dir(int dirfd, const char *shown, od_list *l, col_err *err);
bool od_list_has(const od_list *l, const char *name);
col_status od_list_add(od_list *l, const char *name, col_err *err);
void od_list_free(od_list *l);

/* fsyncs an open directory (file systems that cannot are fine). */
col_status od_sync_dir(int fd, const char *shown, col_err *err);

/* Moves entry e of the open directory from into into_fd, never over an
 * entry of that name (shown, into_shown: the directories, for messages). */
col_status od_move_entry(int from, const char *e, const char *shown, int into_fd, const char *into_shown, col_err *err);

/* Opens the directory name in parent (shown for messages) if it is
 * colossal's: a real directory (not a link) of this user with a manifest.
 * Anything else is refused with a line naming it. */
col_status od_open_ours(int parent, const char *name, const char *shown, int *fd, od_manifest *m, col_err *err);
/* Clears the directory name in parent, which must be colossal's: its own
 * files are unlinked, every other entry is moved into the directory into
 * (also in parent), and it is removed. Nothing is unlinked that the manifest
 * does not make colossal's. */
/* A subdirectory colossal made in it (one level down, with a manifest of
 * its own, listed by the parent's manifest or inside a stage) is cleared
 * the same way, what is not colossal's in it going into into's
 * subdirectory of that name. */
col_status od_sweep(int parent, const char *name, const char *shown, const char *into, const char *into_shown,
                    col_err *err);
/* Removes the directory name in parent when it is what a save stopped
 * between making its stage and writing the stage's manifest leaves: a
 * directory of this user holding nothing, or only the manifest's temporary
 * file. True when it removed it; false (nothing touched) otherwise. */
bool od_remove_bare_stage(int parent, const char *name);

#endif
