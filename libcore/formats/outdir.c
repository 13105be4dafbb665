/* outdir.c - atomic replacement of an output directory (see outdir.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2 */
#endif
#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static col_status fsync_path(const char *path, col_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) /* some file systems cannot sync a directory */
        return col_err_set(err, COL_EIO, "cannot sync %s: %s", path, strerror(e));
    return COL_OK;
}

/* the directory holding path ("." for a bare name) */
static void parent_of(const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s", path);
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

col_status col_outdir_remove(const char *path, col_err *err)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? COL_OK : col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    struct dirent *e;
    col_status st = COL_OK;
    char p[4200];
    /* check first, then delete: a directory with a subdirectory is not ours */
    while ((e = readdir(d)) && st == COL_OK) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (lstat(p, &sb) != 0 || S_ISDIR(sb.st_mode))
            st = col_err_set(err, COL_EIO, "%s holds %s, which is not a file colossal wrote: remove it by hand", path,
                             e->d_name);
    }
    rewinddir(d);
    while (st == COL_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (unlink(p) != 0)
            st = col_err_set(err, COL_EIO, "cannot remove %s: %s", p, strerror(errno));
    }
    closedir(d);
    if (st == COL_OK && rmdir(path) != 0)
        st = col_err_set(err, COL_EIO, "cannot remove %s: %s", path, strerror(errno));
    return st;
}

col_status col_outdir_begin(const char *dir, char *stage, size_t n, col_err *err)
{
    if (snprintf(stage, n, "%s.partial", dir) >= (int)n)
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EINVAL, "output path %s is too long", dir);
    col_status st = col_outdir_remove(stage, err);
    if (st != COL_OK)
        return st;
    if (mkdir(stage, 0755) != 0) {
        char parent[4096];
        parent_of(dir, parent, sizeof parent);
        return col_err_set_on(err, COL_SETTING_OUTPUT_DIR, COL_EIO,
                              "cannot write the output directory %s: %s: %s; choose another output directory", dir,
                              parent, strerror(errno));
    }
    return COL_OK;
}

col_status col_outdir_commit(const char *dir, const char *stage, col_err *err)
{
    char parent[4096], old[4200];
    parent_of(dir, parent, sizeof parent);
    col_status st = fsync_path(stage, err);
    if (st != COL_OK)
        return st;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (rename(stage, dir) != 0)
            return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s", stage, dir, strerror(errno));
        return fsync_path(parent, err);
    }
    if (!S_ISDIR(sb.st_mode))
        return col_err_set(err, COL_EIO, "%s exists and is not a directory", dir);
    if (renameat2(AT_FDCWD, stage, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        if ((st = fsync_path(parent, err)) != COL_OK)
            return st;
        return col_outdir_remove(stage, err); /* the old contents */
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return col_err_set(err, COL_EIO, "cannot replace %s with %s: %s", dir, stage, strerror(errno));
    /* no exchange on this file system: two renames, recoverable (outdir.h) */
    snprintf(old, sizeof old, "%s.old", dir);
    if ((st = col_outdir_remove(old, err)) != COL_OK)
        return st;
    if (rename(dir, old) != 0)
        return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s", dir, old, strerror(errno));
    if (rename(stage, dir) != 0) {
        int e = errno;
        if (rename(old, dir) != 0) /* put the old one back */
            return col_err_set(err, COL_EIO, "cannot rename %s to %s (%s); the previous output is in %s", stage, dir,
                               strerror(e), old);
        return col_err_set(err, COL_EIO, "cannot rename %s to %s: %s", stage, dir, strerror(e));
    }
    if ((st = fsync_path(parent, err)) != COL_OK)
        return st;
    return col_outdir_remove(old, err);
}

void col_outdir_abort(const char *stage)
{
    col_err e = {0};
    (void)col_outdir_remove(stage, &e);
}

col_status col_outdir_recover(const char *dir, col_err *err)
{
    char old[4200];
    snprintf(old, sizeof old, "%s.old", dir);
    struct stat sb;
    if (stat(dir, &sb) == 0 || stat(old, &sb) != 0)
        return COL_OK;
    if (rename(old, dir) != 0)
        return col_err_set(err, COL_EIO, "%s is missing and %s holds the last complete save, but renaming it back "
                           "failed: %s", dir, old, strerror(errno));
    return COL_OK;
}
