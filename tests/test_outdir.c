/* test_outdir.c - replacing an output directory in one step, stale staging
 * directories, refusal to delete what is not ours, and crash recovery. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outdir.h"
#include "testlib.h"
#include "textio.h"

static char root[] = "/tmp/col_outdir_XXXXXX";

static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    col_err e = {0};
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (col_write_file_atomic(p, text, strlen(text), &e) != COL_OK)
        TL_NOTE("write %s: %s", p, e.msg);
}

/* the text of dir/name, or "" */
static const char *get(const char *dir, const char *name)
{
    static char buf[256];
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    buf[0] = '\0';
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

int main(void)
{
    tl_mkdtemp(root);
    char dir[256], stage[512], p[512];
    col_err err = {0};
    snprintf(dir, sizeof dir, "%s/out", root);

    /* first save: the directory appears whole */
    TL_OK(col_outdir_begin(dir, stage, sizeof stage, &err) == COL_OK && strstr(stage, "out.partial"), "staging %s",
          stage);
    put(stage, "a.txt", "one");
    put(stage, "b.txt", "one");
    TL_OK(!exists(dir), "the target does not exist before the commit");
    TL_OK(col_outdir_commit(dir, stage, &err) == COL_OK, "first commit: %s", err.msg);
    TL_OK(strcmp(get(dir, "a.txt"), "one") == 0 && !exists(stage), "the target holds the files, the stage is gone");

    /* second save replaces every file, and drops files the new save lacks */
    TL_OK(col_outdir_begin(dir, stage, sizeof stage, &err) == COL_OK, "second staging");
    put(stage, "a.txt", "two");
    TL_OK(strcmp(get(dir, "a.txt"), "one") == 0, "until the commit the old contents stay");
    TL_OK(col_outdir_commit(dir, stage, &err) == COL_OK, "second commit: %s", err.msg);
    snprintf(p, sizeof p, "%s/b.txt", dir);
    TL_OK(strcmp(get(dir, "a.txt"), "two") == 0 && !exists(p) && !exists(stage), "replaced as a whole");

    /* a stale staging directory (a crash mid-save) is cleared by the next begin */
    snprintf(p, sizeof p, "%s.partial", dir);
    mkdir(p, 0755);
    put(p, "junk", "half a checkpoint");
    TL_OK(col_outdir_begin(dir, stage, sizeof stage, &err) == COL_OK && strcmp(get(stage, "junk"), "") == 0,
          "a stale staging directory is emptied");
    col_outdir_abort(stage);
    TL_OK(!exists(stage), "abort removes the staging directory");

    /* a staging path holding a directory is not ours to delete */
    mkdir(p, 0755);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/keep", p);
    mkdir(sub, 0755);
    TL_OK(col_outdir_begin(dir, stage, sizeof stage, &err) == COL_EIO && strstr(err.msg, "keep") &&
              exists(sub),
          "refuses to delete a subdirectory: %s", err.msg);
    rmdir(sub);
    rmdir(p);

    /* a parent that cannot hold directories */
    snprintf(p, sizeof p, "%s/file", root);
    put(root, "file", "x");
    snprintf(sub, sizeof sub, "%s/out", p);
    TL_OK(col_outdir_begin(sub, stage, sizeof stage, &err) == COL_EIO && strstr(err.msg, "cannot write the output"),
          "an unwritable output location: %s", err.msg);
    TL_OK(col_outdir_begin(p, stage, sizeof stage, &err) == COL_OK &&
              col_outdir_commit(p, stage, &err) == COL_EIO && strstr(err.msg, "not a directory") && exists(stage),
          "a file in the way: %s", err.msg);
    col_outdir_abort(stage);

    /* crash between the fallback's two renames: dir missing, dir.old complete */
    snprintf(p, sizeof p, "%s.old", dir);
    TL_OK(rename(dir, p) == 0, "simulated crash state");
    TL_OK(col_outdir_recover(dir, &err) == COL_OK && strcmp(get(dir, "a.txt"), "two") == 0 && !exists(p),
          "recover renames the old directory back");
    TL_OK(col_outdir_recover(dir, &err) == COL_OK, "nothing to recover is fine");

    TL_OK(col_outdir_remove(dir, &err) == COL_OK && !exists(dir), "remove");
    snprintf(p, sizeof p, "%s/file", root);
    unlink(p);
    rmdir(root);
    return tl_done();
}
