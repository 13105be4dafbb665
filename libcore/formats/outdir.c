/* outdir.c - an output directory replaced whole, under a run lock, keeping
 * what is not colossal's (see outdir.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2 */
#endif
#include "outdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "outdir_files.h"

enum { OD_PATH_MAX = 4096 };

struct col_outdir {
    unsigned flags;
    int parent;                     /* the directory holding OUT, opened once */
    int lock;                       /* OUT.lock, flock'ed; -1 when not held */
    int stage;                      /* the staging directory of a begun save; -1 when none */
    char path[OD_PATH_MAX];         /* OUT, normalised */
    char stage_path[OD_PATH_MAX + 16], old_path[OD_PATH_MAX + 16], lock_path[OD_PATH_MAX + 16];
    char parent_path[OD_PATH_MAX];
    char name[NAME_MAX + 1];        /* OUT's last component, and its siblings' names */
    char stage_name[NAME_MAX + 1], old_name[NAME_MAX + 1], lock_name[NAME_MAX + 1];
};

const char *col_outdir_path(const col_outdir *od) { return od->path; }

/* ---- the path ---- */

/* appends " (note path)" to err's message, keeping its code and settings */
static col_status add_note(col_err *err, const char *note, const char *path)
{
    if (!err)
        return COL_EIO;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    unsigned settings = err->settings;
    col_status st = col_err_set(err, err->code, "%.300s (%s %s)", msg, note, path);
    err->settings = settings;
    return st;
}

/* path without trailing slashes, split into the directory holding it and
 * its last component; refuses what cannot be replaced by a rename */
static col_status split_path(col_outdir *od, const char *dir, col_err *err)
{
    size_t len = strlen(dir);
    if (len == 0)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "the output directory is an empty path: give a directory");
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len >= sizeof od->path)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "the output path %.64s... is too long", dir);
    memcpy(od->path, dir, len);
    od->path[len] = '\0';
    if (strcmp(od->path, "/") == 0)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "the output directory cannot be /: give a directory below it");
    char *slash = strrchr(od->path, '/');
    const char *base = slash ? slash + 1 : od->path;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "the output directory %s ends in %s: give the directory by its name",
                           od->path, base);
    if (strlen(base) + sizeof ".partial" > sizeof od->name)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "the output directory's name %.64s... is too long", base);
    snprintf(od->name, sizeof od->name, "%s", base);
    snprintf(od->stage_name, sizeof od->stage_name, "%s.partial", base);
    snprintf(od->old_name, sizeof od->old_name, "%s.old", base);
    snprintf(od->lock_name, sizeof od->lock_name, "%s.lock", base);
    snprintf(od->stage_path, sizeof od->stage_path, "%s.partial", od->path);
    snprintf(od->old_path, sizeof od->old_path, "%s.old", od->path);
    snprintf(od->lock_path, sizeof od->lock_path, "%s.lock", od->path);
    if (!slash) {
        snprintf(od->parent_path, sizeof od->parent_path, ".");
    } else {
        size_t plen = (size_t)(slash - od->path);
        while (plen > 1 && od->path[plen - 1] == '/')
            plen--;
        snprintf(od->parent_path, sizeof od->parent_path, "%.*s", plen ? (int)plen : 1, plen ? od->path : "/");
    }
    return COL_OK;
}

/* what is at a name in the parent: 0 nothing, 'd' directory, 'l' link, 'f' anything else */
static int entry_kind(const col_outdir *od, const char *name)
{
    struct stat sb;
    if (fstatat(od->parent, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    return S_ISDIR(sb.st_mode) ? 'd' : S_ISLNK(sb.st_mode) ? 'l' : 'f';
}

static col_status check_target(const col_outdir *od, col_err *err)
{
    int k = entry_kind(od, od->name);
    if (k == 'l')
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "%s is a symbolic link; colossal does not "
                              "write through links: give the real directory", od->path);
    if (k == 'f')
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "%s exists and is not a directory", od->path);
    return COL_OK;
}

/* ---- the run lock ---- */

/* the PID written in a lock file (0 if none yet: its holder writes it right
 * after locking, so wait for it a moment) */
static long lock_holder(int fd)
{
    for (int tries = 0; tries < 20; tries++) {
        char buf[32];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        long pid = 0;
        if (n > 0) {
            buf[n] = '\0';
            pid = strtol(buf, NULL, 10);
        }
        if (pid > 0)
            return pid;
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
    return 0;
}

/* opens OUT.lock (created if missing, never through a link) */
static col_status open_lock_file(const col_outdir *od, int *fd, struct stat *sb, col_err *err)
{
    *fd = openat(od->parent, od->lock_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (*fd < 0 && errno == ELOOP)
        return col_err_set(err, COL_EINVAL, "%s is a symbolic link; colossal does not write through links: remove "
                           "the link", od->lock_path);
    if (*fd < 0)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EIO, "cannot write the output directory %s: %s: %s; choose "
                         "another output directory", od->path, od->parent_path,
                           strerror(errno));
    const char *bad = fstat(*fd, sb) != 0  ? strerror(errno)
                      : !S_ISREG(sb->st_mode) ? "it is not a plain file"
                      : sb->st_uid != geteuid() ? "it belongs to another user"
                                                : NULL;
    if (bad) {
        close(*fd);
        *fd = -1;
        return col_err_set(err, COL_EINVAL, "%s cannot be the run's lock file (%s): move it away", od->lock_path, bad);
    }
    return COL_OK;
}

/* the lock file at its name is still the one we locked (not removed by the
 * process that held it before us) */
static bool lock_is_current(const col_outdir *od, const struct stat *locked)
{
    struct stat now;
    return fstatat(od->parent, od->lock_name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == locked->st_dev &&
           now.st_ino == locked->st_ino;
}

static col_status take_lock(col_outdir *od, col_err *err)
{
    for (int tries = 0; tries < 100; tries++) {
        int fd;
        struct stat sb;
        col_status st = open_lock_file(od, &fd, &sb, err);
        if (st != COL_OK)
            return st;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long pid = e == EWOULDBLOCK ? lock_holder(fd) : 0;
            close(fd);
            if (e != EWOULDBLOCK)
                return col_err_set(err, COL_EIO, "cannot lock %s: %s", od->lock_path, strerror(e));
            if (pid > 0)
                return col_err_set(err, COL_EBUSY, "%s is in use by process %ld (another colossal run writes it; "
                                   "its lock is %s)", od->path, pid, od->lock_path);
            return col_err_set(err, COL_EBUSY, "%s is in use by another process (its lock is %s)", od->path,
                               od->lock_path);
        }
        if (lock_is_current(od, &sb)) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
                int e = errno;
                close(fd);
                return col_err_set(err, COL_EIO, "cannot write %s: %s", od->lock_path, strerror(e));
            }
            od->lock = fd;
            return COL_OK;
        }
        close(fd); /* its holder removed it as we opened it: take the new one */
    }
    return col_err_set(err, COL_EIO, "cannot lock %s: the file keeps being replaced", od->lock_path);
}

static void release_lock(col_outdir *od)
{
    if (od->lock < 0)
        return;
    struct stat sb;
    if (fstat(od->lock, &sb) == 0 && lock_is_current(od, &sb))
        unlinkat(od->parent, od->lock_name, 0); /* while still held: no one can take a file about to vanish */
    close(od->lock);
    od->lock = -1;
}

/* ---- open, recover, close ---- */

col_status col_outdir_open(const char *dir, unsigned flags, col_outdir **out, col_err *err)
{
    *out = NULL;
    col_outdir *od = calloc(1, sizeof *od);
    if (!od)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", dir);
    od->flags = flags;
    od->parent = od->lock = od->stage = -1;
    col_status st = split_path(od, dir, err);
    if (st == COL_OK && (od->parent = open(od->parent_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        st = col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EIO, "cannot write the output directory %s: %s: %s; choose "
                         "another output directory", od->path, od->parent_path,
                         strerror(errno));
    if (st == COL_OK)
        st = check_target(od, err);
    if (st == COL_OK)
        st = take_lock(od, err);
    if (st == COL_OK)
        st = col_outdir_recover(od, err);
    if (st != COL_OK) {
        col_outdir_close(od);
        return st;
    }
    *out = od;
    return COL_OK;
}

col_status col_outdir_recover(col_outdir *od, col_err *err)
{
    col_status st = COL_OK;
    if (entry_kind(od, od->old_name)) {
        int fd;
        od_manifest m;
        if ((st = od_open_ours(od->parent, od->old_name, od->old_path, &fd, &m, err)) != COL_OK)
            return st;
        close(fd);
        od_manifest_free(&m);
        if (!entry_kind(od, od->name)) { /* a crash between the fallback's two renames: OUT.old is the last save */
            if (renameat(od->parent, od->old_name, od->parent, od->name) != 0)
                return col_err_set(err, COL_EIO, "%s is missing and %s holds the last complete save, but renaming it "
                                   "back failed: %s", od->path, od->old_path, strerror(errno));
            if ((st = od_sync_dir(od->parent, od->parent_path, err)) != COL_OK)
                return st;
        } else if ((st = od_sweep(od->parent, od->old_name, od->old_path, od->name, od->path, err)) != COL_OK) {
            return st;
        }
    }
    /* a stage left by a save that stopped before its manifest was written holds nothing: removed */
    if (entry_kind(od, od->stage_name) && od->stage < 0 && !od_remove_bare_stage(od->parent, od->stage_name))
        st = od_sweep(od->parent, od->stage_name, od->stage_path, od->name, od->path, err);
    return st;
}

void col_outdir_close(col_outdir *od)
{
    if (!od)
        return;
    col_outdir_abort(od);
    release_lock(od);
    if (od->parent >= 0)
        close(od->parent);
    free(od);
}

/* ---- a save ---- */

col_status col_outdir_begin(col_outdir *od, const char **stage, col_err *err)
{
    *stage = NULL;
    col_outdir_abort(od);
    col_status st = check_target(od, err);
    if (st == COL_OK && entry_kind(od, od->stage_name) && !od_remove_bare_stage(od->parent, od->stage_name))
        st = od_sweep(od->parent, od->stage_name, od->stage_path, od->name, od->path, err);
    if (st != COL_OK)
        return st;
    if (mkdirat(od->parent, od->stage_name, 0755) != 0)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EIO, "cannot write the output directory %s: %s: %s; choose "
                         "another output directory", od->path, od->parent_path,
                           strerror(errno));
    int fd = openat(od->parent, od->stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        st = col_err_set(err, COL_EIO, "cannot open %s: %s", od->stage_path, strerror(errno));
    else
        st = od_manifest_write(fd, od->stage_path, true, NULL, err);
    if (st != COL_OK) {
        if (fd >= 0)
            close(fd);
        unlinkat(od->parent, od->stage_name, AT_REMOVEDIR);
        return st;
    }
    od->stage = fd;
    *stage = od->stage_path;
    return COL_OK;
}

col_status col_outdir_mkdir(col_outdir *od, const char *name, char *path, size_t n, col_err *err)
{
    if (od->stage < 0)
        return col_err_set(err, COL_ESTATE, "%s: a folder made without a begun save", od->path);
    if (!name[0] || strchr(name, '/') || strchr(name, '\n') || !strcmp(name, ".") || !strcmp(name, "..") ||
        od_is_manifest_file(name) || strlen(name) > NAME_MAX)
        return col_err_set(err, COL_EINVAL, "'%s' cannot name a folder of a save", name);
    int k = snprintf(path, n, "%s/%s", od->stage_path, name);
    if (k < 0 || (size_t)k >= n)
        return col_err_set(err, COL_EINVAL, "%s/%s: the path is too long", od->stage_path, name);
    if (mkdirat(od->stage, name, 0755) != 0)
        return col_err_set(err, COL_EIO, "cannot make %s: %s", path, strerror(errno));
    int fd = openat(od->stage, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    col_status st = fd < 0 ? col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno))
                           : od_manifest_write(fd, path, true, NULL, err);
    if (fd >= 0)
        close(fd);
    return st;
}

void col_outdir_abort(col_outdir *od)
{
    if (od->stage < 0)
        return;
    close(od->stage);
    od->stage = -1;
    col_err e = {0};
    (void)od_sweep(od->parent, od->stage_name, od->stage_path, od->name, od->path, &e);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* a folder of the stage (col_outdir_mkdir) sealed: its manifest lists its files, all on disk */
static col_status seal_folder(col_outdir *od, const char *name, col_err *err)
{
    char shown[sizeof od->stage_path + NAME_MAX + 2];
    snprintf(shown, sizeof shown, "%s/%s", od->stage_path, name);
    int fd;
    od_manifest m;
    col_status st = od_open_ours(od->stage, name, shown, &fd, &m, err);
    if (st != COL_OK)
        return col_err_set(err, COL_EINTERNAL, "%s is a folder col_outdir_mkdir did not make", shown);
    od_manifest_free(&m);
    od_list all, files = {0};
    st = od_list_dir(fd, shown, &all, err);
    for (size_t i = 0; st == COL_OK && i < all.n; i++) {
        struct stat sb;
        const char *e = all.names[i];
        if (od_is_manifest_file(e))
            continue;
        if (fstatat(fd, e, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode) || strchr(e, '\n'))
            st = col_err_set(err, COL_EINTERNAL, "%s/%s is not a plain file: a save's folders hold only files", shown,
                             e);
        else
            st = od_list_add(&files, e, err);
    }
    od_list_free(&all);
    if (st == COL_OK && files.n > 1)
        qsort(files.names, files.n, sizeof *files.names, by_name);
    if (st == COL_OK)
        st = od_manifest_write(fd, shown, false, &files, err);
    if (st == COL_OK)
        st = od_sync_dir(fd, shown, err);
    od_list_free(&files);
    close(fd);
    return st;
}

/* the stage's manifest lists its files and folders, and all of it is on disk; *saved
 * gets the names */
static col_status seal_stage(col_outdir *od, od_list *saved, col_err *err)
{
    od_list all;
    col_status st = od_list_dir(od->stage, od->stage_path, &all, err);
    saved->n = 0;
    saved->names = NULL;
    for (size_t i = 0; st == COL_OK && i < all.n; i++) {
        struct stat sb;
        const char *e = all.names[i];
        if (od_is_manifest_file(e))
            continue;
        bool ok = fstatat(od->stage, e, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !strchr(e, '\n');
        if (ok && S_ISDIR(sb.st_mode))
            st = seal_folder(od, e, err);
        else if (!ok || !S_ISREG(sb.st_mode))
            st = col_err_set(err, COL_EINTERNAL, "%s/%s is not a plain file: a save writes only files (and "
                             "folders made by col_outdir_mkdir)", od->stage_path, e);
        if (st == COL_OK)
            st = od_list_add(saved, e, err);
    }
    od_list_free(&all);
    if (st == COL_OK && saved->n > 1)
        qsort(saved->names, saved->n, sizeof *saved->names, by_name);
    if (st == COL_OK)
        st = od_manifest_write(od->stage, od->stage_path, false, saved, err);
    if (st == COL_OK)
        st = od_sync_dir(od->stage, od->stage_path, err);
    if (st != COL_OK)
        od_list_free(saved);
    return st;
}

/* the entries of the old OUT (open as out) that are not colossal's: they
 * move into the new save. An OUT without a manifest (an earlier colossal
 * wrote it) gets one listing the names the new save writes again; an entry
 * that is not colossal's but has the name of a saved file would be in the
 * way, and stops the commit. */
/* the entries of OUT's folder e (colossal's, open as fd with manifest m) that are not colossal's, as "e/name" */
static col_status folder_foreign(int fd, const char *e, const char *shown, const od_manifest *m, od_list *nested,
                                 col_err *err)
{
    od_list have = {0};
    col_status st = od_list_dir(fd, shown, &have, err);
    for (size_t i = 0; st == COL_OK && i < have.n; i++) {
        const char *x = have.names[i];
        if (od_is_manifest_file(x) || od_manifest_lists(m, x))
            continue;
        char rel[2 * NAME_MAX + 2];
        snprintf(rel, sizeof rel, "%s/%s", e, x);
        st = od_list_add(nested, rel, err);
    }
    od_list_free(&have);
    return st;
}

static col_status find_foreign(col_outdir *od, int out, const od_list *saved, od_list *foreign, od_list *nested,
                               col_err *err)
{
    od_manifest m;
    od_list have = {0}, adopt = {0};
    col_status st = od_manifest_read(out, od->path, &m, err);
    if (st == COL_OK)
        st = od_list_dir(out, od->path, &have, err);
    bool adopting = st == COL_OK && (!m.present || m.staging);
    for (size_t i = 0; st == COL_OK && i < have.n; i++) {
        const char *e = have.names[i];
        struct stat sb;
        bool is_file = fstatat(out, e, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
        bool is_dir = fstatat(out, e, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode);
        if (!adopting && is_dir && od_manifest_lists(&m, e)) { /* a folder of the last save */
            char shown[OD_PATH_MAX + NAME_MAX + 2];
            snprintf(shown, sizeof shown, "%s/%s", od->path, e);
            int fd;
            od_manifest fm;
            if ((st = od_open_ours(out, e, shown, &fd, &fm, err)) == COL_OK) {
                st = folder_foreign(fd, e, shown, &fm, nested, err);
                close(fd);
                od_manifest_free(&fm);
            }
            continue;
        }
        if (od_is_manifest_file(e) || (!adopting && od_manifest_lists(&m, e)))
            continue;
        if (!od_list_has(saved, e))
            st = od_list_add(foreign, e, err);
        else if (adopting && is_file)
            st = od_list_add(&adopt, e, err);
        else
            st = col_err_set(err, COL_EIO, "%s holds %s, which colossal did not write, and the new save has a file "
                             "of that name: move it away", od->path, e);
    }
    if (st == COL_OK && adopting)
        st = od_manifest_write(out, od->path, false, &adopt, err);
    od_list_free(&have);
    od_list_free(&adopt);
    od_manifest_free(&m);
    return st;
}

/* moves the named entries between two open directories; on a failure the
 * ones already moved go back */
static col_status move_entries(const od_list *names, int from, const char *from_shown, int to, const char *to_shown,
                               col_err *err)
{
    col_status st = COL_OK;
    size_t i = 0;
    for (; st == COL_OK && i < names->n; i++)
        st = od_move_entry(from, names->names[i], from_shown, to, to_shown, err);
    if (st != COL_OK) {
        col_err ignored;
        for (size_t j = 0; j + 1 < i; j++)
            (void)od_move_entry(to, names->names[j], to_shown, from, from_shown, &ignored);
    }
    return st;
}

/* the stage becomes OUT where there was none */
static col_status commit_first(col_outdir *od, col_err *err)
{
    int rc = renameat2(od->parent, od->stage_name, od->parent, od->name, RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) { /* no RENAME_NOREPLACE here */
        if (entry_kind(od, od->name))
            errno = EEXIST;
        else
            rc = renameat(od->parent, od->stage_name, od->parent, od->name);
    }
    if (rc != 0)
        return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s; the new save is in %s", od->stage_path, od->path,
                           strerror(errno), od->stage_path);
    return od_sync_dir(od->parent, od->parent_path, err);
}

/* no exchange on this file system: two renames, which col_outdir_recover
 * finishes after a crash between them. On failure nothing has changed
 * (unless putting OUT back failed too, which the message says). */
static col_status two_renames(col_outdir *od, col_err *err)
{
    col_status st = COL_OK;
    if (entry_kind(od, od->old_name) &&
        (st = od_sweep(od->parent, od->old_name, od->old_path, od->name, od->path, err)) != COL_OK)
        return st;
    if (renameat(od->parent, od->name, od->parent, od->old_name) != 0)
        return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s", od->path, od->old_path, strerror(errno));
    if (renameat(od->parent, od->stage_name, od->parent, od->name) != 0) {
        int e = errno;
        if (renameat(od->parent, od->old_name, od->parent, od->name) != 0)
            return col_err_set(err, COL_EIO, "cannot rename %s to %s (%s); the previous save is in %s and the new one "
                               "in %s", od->stage_path, od->path, strerror(e), od->old_path, od->stage_path);
        return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s", od->stage_path, od->path, strerror(e));
    }
    return COL_OK;
}

/* the stage and OUT trade places; *old_name is where the old contents are
 * then. On failure nothing has changed. */
static col_status swap(col_outdir *od, const char **old_name, const char **old_path, col_err *err)
{
    *old_name = od->stage_name;
    *old_path = od->stage_path;
    if (!(od->flags & COL_OUTDIR_TWO_RENAMES)) {
        if (renameat2(od->parent, od->stage_name, od->parent, od->name, RENAME_EXCHANGE) == 0)
            return COL_OK;
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return col_err_set(err, COL_EIO, "cannot replace %s with %s: %s", od->path, od->stage_path,
                               strerror(errno));
    }
    *old_name = od->old_name;
    *old_path = od->old_path;
    return two_renames(od, err);
}

/* the stage's folder for each "folder/name" of nested: the save's own, or, where the save has no folder of that
 * name, a plain one (not colossal's) made to hold them */
static col_status folders_for(col_outdir *od, const od_list *nested, col_err *err)
{
    for (size_t i = 0; i < nested->n; i++) {
        char dir[NAME_MAX + 1];
        const char *slash = strchr(nested->names[i], '/');
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - nested->names[i]), nested->names[i]);
        struct stat sb;
        if (fstatat(od->stage, dir, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
            continue;
        if (mkdirat(od->stage, dir, 0755) != 0)
            return col_err_set(err, COL_EIO, "cannot make %s/%s for the entries of %s/%s that are not colossal's: %s",
                               od->stage_path, dir, od->path, dir, strerror(errno));
    }
    return COL_OK;
}

/* the stage takes OUT's place, with the entries of the old OUT that are not
 * colossal's moved into it first (those inside its folders into the same
 * folders); then the old contents are cleared */
static col_status replace(col_outdir *od, const od_list *saved, col_err *err)
{
    if (!entry_kind(od, od->name))
        return commit_first(od, err);
    od_list foreign = {0}, nested = {0};
    const char *old_name, *old_path;
    int out = -1;
    bool moved = false, nmoved = false;
    col_status st = check_target(od, err);
    if (st == COL_OK && (out = openat(od->parent, od->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        st = col_err_set(err, COL_EIO, "cannot open %s: %s", od->path, strerror(errno));
    if (st == COL_OK)
        st = find_foreign(od, out, saved, &foreign, &nested, err);
    if (st == COL_OK)
        st = folders_for(od, &nested, err);
    if (st == COL_OK && (st = move_entries(&nested, out, od->path, od->stage, od->stage_path, err)) == COL_OK)
        nmoved = true;
    if (st == COL_OK && (st = move_entries(&foreign, out, od->path, od->stage, od->stage_path, err)) == COL_OK)
        moved = true;
    if (st == COL_OK)
        st = swap(od, &old_name, &old_path, err);
    if (st != COL_OK) { /* put them back */
        col_err ignored;
        if (moved)
            (void)move_entries(&foreign, od->stage, od->stage_path, out, od->path, &ignored);
        if (nmoved)
            (void)move_entries(&nested, od->stage, od->stage_path, out, od->path, &ignored);
        for (size_t i = 0; i < nested.n; i++) { /* the folders made for them, now empty (the save's own are not) */
            char dir[NAME_MAX + 1];
            snprintf(dir, sizeof dir, "%.*s", (int)(strchr(nested.names[i], '/') - nested.names[i]), nested.names[i]);
            unlinkat(od->stage, dir, AT_REMOVEDIR);
        }
    }
    od_list_free(&foreign);
    od_list_free(&nested);
    if (out >= 0)
        close(out);
    if (st != COL_OK && !strstr(err->msg, od->stage_path))
        return add_note(err, "the previous save is intact; the new one is in", od->stage_path);
    if (st != COL_OK)
        return st;
    if ((st = od_sync_dir(od->parent, od->parent_path, err)) == COL_OK)
        st = od_sweep(od->parent, old_name, old_path, od->name, od->path, err);
    return st == COL_OK ? st : add_note(err, "the new save is in place in", od->path);
}

col_status col_outdir_commit(col_outdir *od, col_err *err)
{
    if (od->stage < 0)
        return col_err_set(err, COL_ESTATE, "%s: commit without a begun save", od->path);
    od_list saved;
    col_status st = seal_stage(od, &saved, err);
    if (st != COL_OK) {
        col_outdir_abort(od);
        return st;
    }
    /* from here on the stage is a complete save: kept when it cannot be put in place */
    st = replace(od, &saved, err);
    close(od->stage);
    od->stage = -1;
    od_list_free(&saved);
    return st;
}
