/* outdir_files.c - one output directory's manifest, listing and clearing
 * (see outdir_files.h and outdir.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, fdopendir */
#endif
#include "outdir_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OD_MANIFEST_TMP OD_MANIFEST ".tmp"
#define OD_MANIFEST_MAX ((size_t)1 << 20)

/* ---- listings ---- */

col_status od_list_add(od_list *l, const char *name, col_err *err)
{
    char **grown = realloc(l->names, (l->n + 1) * sizeof *grown);
    char *copy = strdup(name);
    if (grown)
        l->names = grown;
    if (!grown || !copy) {
        free(copy);
        return col_err_set(err, COL_ENOMEM, "out of memory listing a directory");
    }
    l->names[l->n++] = copy;
    return COL_OK;
}

bool od_list_has(const od_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return true;
    return false;
}

void od_list_free(od_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->n = 0;
}

col_status od_list_dir(int dirfd, const char *shown, od_list *l, col_err *err)
{
    l->n = 0;
    l->names = NULL;
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return col_err_set(err, COL_EIO, "cannot read %s: %s", shown, strerror(e));
    }
    rewinddir(d); /* the offset is shared with dirfd: an earlier listing moved it */
    col_status st = COL_OK;
    struct dirent *e;
    errno = 0;
    while (st == COL_OK && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            st = od_list_add(l, e->d_name, err);
    if (st == COL_OK && errno != 0)
        st = col_err_set(err, COL_EIO, "cannot read %s: %s", shown, strerror(errno));
    closedir(d);
    if (st != COL_OK)
        od_list_free(l);
    return st;
}

col_status od_sync_dir(int fd, const char *shown, col_err *err)
{
    if (fsync(fd) != 0 && errno != EINVAL) /* some file systems cannot sync a directory */
        return col_err_set(err, COL_EIO, "cannot sync %s: %s", shown, strerror(errno));
    return COL_OK;
}

/* ---- the manifest ---- */

bool od_is_manifest_file(const char *name)
{
    return strcmp(name, OD_MANIFEST) == 0 || strcmp(name, OD_MANIFEST_TMP) == 0;
}

static bool valid_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

void od_manifest_free(od_manifest *m)
{
    free(m->names);
    free(m->text);
    memset(m, 0, sizeof *m);
}

bool od_manifest_lists(const od_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0)
            return true;
    return false;
}

col_status od_manifest_parse(const char *text, size_t len, const char *where, od_manifest *m, col_err *err)
{
    memset(m, 0, sizeof *m);
    if (memchr(text, '\0', len))
        return col_err_set(err, COL_EFORMAT, "%s is damaged (a NUL byte)", where);
    m->text = malloc(len + 1);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    m->names = malloc(lines * sizeof *m->names);
    if (!m->text || !m->names) {
        od_manifest_free(m);
        return col_err_set(err, COL_ENOMEM, "out of memory reading %s", where);
    }
    memcpy(m->text, text, len);
    m->text[len] = '\0';
    if (len > 0 && m->text[len - 1] == '\n')
        m->text[len - 1] = '\0';
    char *line = m->text, *next;
    bool first = true;
    col_status st = COL_OK;
    for (; line && st == COL_OK; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (first) {
            m->staging = strcmp(line, OD_TAG_STAGING) == 0;
            if (!m->staging && strcmp(line, OD_TAG_OUTPUT) != 0)
                st = col_err_set(err, COL_EFORMAT, "%s is not a colossal manifest (its first line is not \"%s\")",
                                 where, OD_TAG_OUTPUT);
            first = false;
        } else if (m->staging || !valid_name(line)) {
            st = col_err_set(err, COL_EFORMAT, "%s is damaged (line %zu)", where, m->n + 2);
        } else {
            m->names[m->n++] = line;
        }
    }
    if (st != COL_OK)
        od_manifest_free(m);
    else
        m->present = true;
    return st;
}

col_status od_manifest_read(int dirfd, const char *shown, od_manifest *m, col_err *err)
{
    char where[4200];
    snprintf(where, sizeof where, "%s/%s", shown, OD_MANIFEST);
    memset(m, 0, sizeof *m);
    int fd = openat(dirfd, OD_MANIFEST, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return COL_OK;
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > OD_MANIFEST_MAX) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return col_err_set(err, COL_EFORMAT, "%s is not a colossal manifest (%s)", where,
                           fd < 0 ? strerror(e) : "not a small plain file");
    }
    size_t len = (size_t)sb.st_size, got = 0;
    char *text = malloc(len + 1);
    ssize_t r = 1;
    while (text && got < len && (r = read(fd, text + got, len - got)) > 0)
        got += (size_t)r;
    int e = errno;
    close(fd);
    col_status st;
    if (!text)
        st = col_err_set(err, COL_ENOMEM, "out of memory reading %s", where);
    else if (r < 0)
        st = col_err_set(err, COL_EIO, "cannot read %s: %s", where, strerror(e));
    else
        st = od_manifest_parse(text, got, where, m, err);
    free(text);
    return st;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* the manifest's text: the tag, then one name a line (*out is malloc'ed) */
static col_status manifest_text(bool staging, const od_list *names, char **out, size_t *len, col_err *err)
{
    size_t n = strlen(OD_TAG_STAGING) + strlen(OD_TAG_OUTPUT) + 2;
    for (size_t i = 0; names && i < names->n; i++)
        n += strlen(names->names[i]) + 1;
    char *t = malloc(n);
    if (!t)
        return col_err_set(err, COL_ENOMEM, "out of memory writing a manifest");
    size_t at = (size_t)snprintf(t, n, "%s\n", staging ? OD_TAG_STAGING : OD_TAG_OUTPUT);
    for (size_t i = 0; !staging && names && i < names->n; i++)
        at += (size_t)snprintf(t + at, n - at, "%s\n", names->names[i]);
    *out = t;
    *len = at;
    return COL_OK;
}

col_status od_manifest_write(int dirfd, const char *shown, bool staging, const od_list *names, col_err *err)
{
    char *text = NULL;
    size_t len = 0;
    col_status st = manifest_text(staging, names, &text, &len, err);
    if (st != COL_OK)
        return st;
    int fd = openat(dirfd, OD_MANIFEST_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, text, len) && fsync(fd) == 0;
    int e = errno;
    free(text);
    if (fd >= 0 && close(fd) != 0 && ok)
        ok = false, e = errno;
    if (ok && renameat(dirfd, OD_MANIFEST_TMP, dirfd, OD_MANIFEST) != 0)
        ok = false, e = errno;
    if (!ok) {
        if (fd >= 0)
            unlinkat(dirfd, OD_MANIFEST_TMP, 0);
        return col_err_set(err, COL_EIO, "cannot write %s/%s: %s", shown, OD_MANIFEST, strerror(e));
    }
    return COL_OK;
}

/* ---- directories colossal left behind ---- */

col_status od_open_ours(int parent, const char *name, const char *shown, int *fd, od_manifest *m, col_err *err)
{
    struct stat sb;
    *fd = -1;
    memset(m, 0, sizeof *m);
    if (fstatat(parent, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return col_err_set(err, COL_EIO, "cannot read %s: %s", shown, strerror(errno));
    if (S_ISLNK(sb.st_mode))
        return col_err_set(err, COL_EIO, "%s is a symbolic link, not a directory colossal made: remove the link "
                           "(colossal does not follow links)", shown);
    if (!S_ISDIR(sb.st_mode))
        return col_err_set(err, COL_EIO, "%s is not a directory colossal made: move it away", shown);
    int d = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", shown, strerror(errno));
    col_status st = COL_OK;
    if (fstat(d, &sb) != 0)
        st = col_err_set(err, COL_EIO, "cannot read %s: %s", shown, strerror(errno));
    else if (sb.st_uid != geteuid())
        st = col_err_set(err, COL_EIO, "%s belongs to another user, not to this colossal run: move it away", shown);
    else if ((st = od_manifest_read(d, shown, m, err)) == COL_OK && !m->present)
        st = col_err_set(err, COL_EIO, "%s was not made by colossal (it has no %s): move it away", shown,
                         OD_MANIFEST);
    if (st != COL_OK) {
        close(d);
        od_manifest_free(m);
        return st;
    }
    *fd = d;
    return COL_OK;
}

col_status od_move_entry(int from, const char *e, const char *shown, int into_fd, const char *into_shown, col_err *err)
{
    int rc = renameat2(from, e, into_fd, e, RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP)) { /* no RENAME_NOREPLACE here */
        struct stat sb;
        if (fstatat(into_fd, e, &sb, AT_SYMLINK_NOFOLLOW) == 0)
            errno = EEXIST;
        else
            rc = renameat(from, e, into_fd, e);
    }
    if (rc == 0)
        return COL_OK;
    if (errno == EEXIST)
        return col_err_set(err, COL_EIO, "%s/%s is not colossal's and %s has an entry of that name: move one of "
                           "them away", shown, e, into_shown);
    return col_err_set(err, COL_EIO, "cannot move %s/%s into %s: %s", shown, e, into_shown, strerror(errno));
}

typedef struct {
    int parent, fd, into_fd;
    int into_parent;        /* the directory holding into (-1: none: foreign entries cannot go anywhere) */
    int depth;              /* 0 for OUT's level, 1 inside one of its subdirectories */
    const char *shown, *into, *into_shown;
    od_manifest m;
} sweep_ctx;

static col_status sweep_at(int parent, const char *name, const char *shown, int into_parent, const char *into,
                           const char *into_shown, int depth, col_err *err);

/* whether the directory e of dirfd holds a manifest (a subdirectory colossal made) */
static bool has_manifest(int dirfd, const char *e)
{
    char p[NAME_MAX + sizeof OD_MANIFEST + 2];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", e, OD_MANIFEST);
    return strlen(e) <= NAME_MAX && fstatat(dirfd, p, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

/* the directory foreign entries go into, opened on first use */
static bool open_into(sweep_ctx *c)
{
    if (c->into_fd < 0 && c->into_parent >= 0)
        c->into_fd = openat(c->into_parent, c->into, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return c->into_fd >= 0;
}

/* one entry of a directory being cleared: unlinked if it is colossal's,
 * else moved into OUT */
static col_status sweep_entry(sweep_ctx *c, const char *e, col_err *err)
{
    struct stat sb;
    if (fstatat(c->fd, e, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? COL_OK : col_err_set(err, COL_EIO, "cannot read %s/%s: %s", c->shown, e,
                                                      strerror(errno));
    /* a subdirectory colossal made (one level below OUT) has a manifest of its own: in a stage every such
     * directory is colossal's, in a sealed save those the manifest lists */
    bool sub = S_ISDIR(sb.st_mode) && c->depth == 0 && has_manifest(c->fd, e);
    bool ours = od_is_manifest_file(e) || (c->m.staging ? S_ISREG(sb.st_mode) || sub : od_manifest_lists(&c->m, e));
    if (ours && sub) { /* cleared the same way; what is not colossal's in it goes into into's subdirectory e */
        char shown[4200], into_shown[4200];
        snprintf(shown, sizeof shown, "%s/%s", c->shown, e);
        snprintf(into_shown, sizeof into_shown, "%s/%s", c->into_shown, e);
        return sweep_at(c->fd, e, shown, open_into(c) ? c->into_fd : -1, e, into_shown, c->depth + 1, err);
    }
    if (ours && S_ISDIR(sb.st_mode))
        return col_err_set(err, COL_EIO, "%s/%s is a directory where colossal wrote a file: move it away", c->shown,
                           e);
    if (ours)
        return unlinkat(c->fd, e, 0) == 0 || errno == ENOENT
                   ? COL_OK
                   : col_err_set(err, COL_EIO, "cannot remove %s/%s: %s", c->shown, e, strerror(errno));
    if (c->m.staging)
        return col_err_set(err, COL_EIO, "%s holds %s, which colossal did not write: move it away", c->shown, e);
    if (!open_into(c))
        return col_err_set(err, COL_EIO, "%s holds %s, which is not colossal's, and it cannot go into %s (%s): move "
                           "it away", c->shown, e, c->into_shown, strerror(errno));
    return od_move_entry(c->fd, e, c->shown, c->into_fd, c->into_shown, err);
}

/* one pass over the directory; the manifest goes last, so that until the
 * directory is empty it still says what is colossal's */
static col_status sweep_pass(sweep_ctx *c, col_err *err)
{
    od_list l;
    col_status st = od_list_dir(c->fd, c->shown, &l, err);
    for (size_t i = 0; st == COL_OK && i < l.n; i++)
        if (strcmp(l.names[i], OD_MANIFEST) != 0)
            st = sweep_entry(c, l.names[i], err);
    od_list_free(&l);
    if (st == COL_OK && unlinkat(c->fd, OD_MANIFEST, 0) != 0 && errno != ENOENT)
        st = col_err_set(err, COL_EIO, "cannot remove %s/%s: %s", c->shown, OD_MANIFEST, strerror(errno));
    return st;
}

col_status od_sweep(int parent, const char *name, const char *shown, const char *into, const char *into_shown,
                    col_err *err)
{
    return sweep_at(parent, name, shown, parent, into, into_shown, 0, err);
}

static col_status sweep_at(int parent, const char *name, const char *shown, int into_parent, const char *into,
                           const char *into_shown, int depth, col_err *err)
{
    sweep_ctx c = {.parent = parent, .into_fd = -1, .into_parent = into_parent, .depth = depth, .shown = shown,
                   .into = into, .into_shown = into_shown};
    col_status st = od_open_ours(parent, name, shown, &c.fd, &c.m, err);
    bool gone = false;
    /* another pass when an entry appeared meanwhile (rmdir: not empty) */
    for (int pass = 0; st == COL_OK && !gone && pass < 8; pass++) {
        if ((st = sweep_pass(&c, err)) != COL_OK)
            break;
        gone = unlinkat(parent, name, AT_REMOVEDIR) == 0;
        if (!gone && errno != ENOTEMPTY && errno != EEXIST)
            st = col_err_set(err, COL_EIO, "cannot remove %s: %s", shown, strerror(errno));
    }
    if (st == COL_OK && !gone)
        st = col_err_set(err, COL_EIO, "cannot remove %s: entries keep appearing in it", shown);
    if (c.fd >= 0)
        close(c.fd);
    if (c.into_fd >= 0)
        close(c.into_fd);
    od_manifest_free(&c.m);
    return st;
}

bool od_remove_bare_stage(int parent, const char *name)
{
    int d = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        return false;
    struct stat sb;
    DIR *dir = fstat(d, &sb) == 0 && sb.st_uid == geteuid() ? fdopendir(d) : NULL;
    if (!dir) {
        close(d);
        return false;
    }
    bool bare = true, tmp = false;
    for (struct dirent *e; bare && (e = readdir(dir));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!strcmp(e->d_name, OD_MANIFEST_TMP))
            tmp = true;
        else
            bare = false;
    }
    bool gone = bare && (!tmp || unlinkat(dirfd(dir), OD_MANIFEST_TMP, 0) == 0) &&
                unlinkat(parent, name, AT_REMOVEDIR) == 0;
    closedir(dir);
    return gone;
}
