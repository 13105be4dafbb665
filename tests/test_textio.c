/* test_textio.c - whole-file reads of plain and compressed data, bad files,
 * and atomic writes. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"
#include "archive_testutil.h"
#include "testlib.h"
#include "textio.h"

static char dir[] = "/tmp/col_textio_XXXXXX";

static char *path_of(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_plain(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

/* Files whose contents need a decoder colossal does not enable: each is one
 * clear COL_EFORMAT naming the kind, and no program is started. $PATH is
 * pointed at a directory of fake lzop/lrzip/grzip/uudecode programs that
 * leave a marker file when run, as libarchive's external filters would. */
static void test_no_external_filters(void)
{
    static const struct {
        const char *name, *what;
        const char *bytes;
        size_t len;
    } cases[] = {
        {"x.lzo", "lzop-compressed", "\x89LZO\0\r\n\x1a\n\x10\x30\x20\xa0", 13},
        {"x.lrz", "lrzip-compressed", "LRZI\0\6\0\0\0\0\0\0\0\0\0\0", 16},
        {"x.grz", "grzip-compressed", "GRZipII\0\2\0:)\0\0\0\0", 16},
        {"x.lz", "lzip-compressed", "LZIP\1\x0c\0\0\0\0\0\0", 12},
        {"x.lz4", "lz4-compressed", "\x04\x22\x4d\x18\x64\x40\xa7\0\0\0\0", 11},
        {"x.Z", "compress(1)-compressed", "\x1f\x9d\x90hello", 8},
        {"x.uu", "uuencoded", "begin 644 config.json\n%>V5\n`\nend\n", 31},
        {"x.b64", "uuencoded", "begin-base64 600 a\neyJ9\n====\n", 29},
    };
    char bin[300], marker[300], cmd[700];
    snprintf(bin, sizeof bin, "%s/bin", dir);
    snprintf(marker, sizeof marker, "%s/ran", dir);
    mkdir(bin, 0755);
    const char *progs[] = {"lzop", "lrzip", "grzip", "uudecode", "lzip", "lz4", "uncompress", "gzip"};
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", bin, progs[i]);
        FILE *f = fopen(p, "w");
        fprintf(f, "#!/bin/sh\necho %s >> %s\ncat\n", progs[i], marker);
        fclose(f);
        chmod(p, 0755);
    }
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("PATH", bin, 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_plain(path_of(cases[i].name), cases[i].bytes, cases[i].len);
        char *got = NULL;
        size_t glen = 0;
        col_err err = {0};
        col_status st = col_read_file(path_of(cases[i].name), 0, &got, &glen, &err);
        TL_OK(st == COL_EFORMAT && strstr(err.msg, cases[i].what) && strstr(err.msg, cases[i].name) && !got,
              "%s: refused as %s (%s)", cases[i].name, cases[i].what, err.msg);
        free(got);
    }
    /* text that only starts like a uuencode header is text */
    const char *text = "begin the reading at chapter 1\n";
    write_plain(path_of("begin.txt"), text, strlen(text));
    char *got = NULL;
    size_t glen = 0;
    col_err err = {0};
    TL_OK(col_read_file(path_of("begin.txt"), 0, &got, &glen, &err) == COL_OK && glen == strlen(text) &&
              memcmp(got, text, glen) == 0, "text starting with 'begin ' is read as text");
    free(got);
    if (saved)
        setenv("PATH", saved, 1);
    else
        unsetenv("PATH");
    free(saved);
    TL_OK(access(marker, F_OK) != 0, "no external decompression program was started");
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", bin, marker);
    TL_OK(system(cmd) == 0, "fake programs removed");
}

int main(void)
{
    tl_mkdtemp(dir);
    size_t len = 300000;
    char *text = malloc(len);
    col_rng r;
    col_rng_init(&r, 7);
    for (size_t i = 0; i < len; i++)
        text[i] = (char)(" etaoinshrdlu\n"[col_rng_below(&r, 14)]);

    struct {
        const char *name;
        int (*filter)(struct archive *);
    } kinds[] = {
        {"t.gz", archive_write_add_filter_gzip},
        {"t.xz", archive_write_add_filter_xz},
        {"t.zst", archive_write_add_filter_zstd},
        {"t.bz2", archive_write_add_filter_bzip2},
    };
    write_plain(path_of("t.txt"), text, len);
    char *got;
    size_t glen;
    col_err err = {0};
    col_status st = col_read_file(path_of("t.txt"), 0, &got, &glen, &err);
    TL_OK(st == COL_OK && glen == len && memcmp(got, text, len) == 0 && got[len] == '\0', "plain file read back");
    free(got);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if (write_compressed(path_of(kinds[k].name), text, len, kinds[k].filter) != 0) {
            TL_OK(false, "could not write %s", kinds[k].name);
            continue;
        }
        st = col_read_file(path_of(kinds[k].name), 0, &got, &glen, &err);
        TL_OK(st == COL_OK && glen == len && memcmp(got, text, len) == 0, "%s decompresses to the original (%s)",
              kinds[k].name, st == COL_OK ? "ok" : err.msg);
        free(got);
    }

    /* a truncated .gz is an error naming the file, not a crash or short data */
    {
        char *gz;
        size_t gzlen;
        FILE *f = fopen(path_of("t.gz"), "rb");
        fseek(f, 0, SEEK_END);
        gzlen = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        gz = malloc(gzlen);
        TL_OK(fread(gz, 1, gzlen, f) == gzlen, "read the gz back");
        fclose(f);
        write_plain(path_of("cut.gz"), gz, gzlen / 2);
        st = col_read_file(path_of("cut.gz"), 0, &got, &glen, &err);
        TL_OK(st != COL_OK && strstr(err.msg, "cut.gz"), "truncated gz is an error: %s", err.msg);
        free(gz);
    }
    st = col_read_file(path_of("missing.txt"), 0, &got, &glen, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "missing.txt") && strstr(err.msg, "No such file"), "missing file: %s", err.msg);
    st = col_read_file(dir, 0, &got, &glen, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "directory"), "directory: %s", err.msg);
    write_plain(path_of("empty.txt"), "", 0);
    st = col_read_file(path_of("empty.txt"), 0, &got, &glen, &err);
    TL_OK(st == COL_OK && glen == 0 && got && got[0] == '\0', "empty file reads as empty");
    free(got);
    st = col_read_file(path_of("t.txt"), 1000, &got, &glen, &err);
    TL_OK(st == COL_ENOMEM && strstr(err.msg, "limit"), "size limit enforced: %s", err.msg);

    /* atomic write: replaces the file whole; a failing write leaves the old one */
    st = col_write_file_atomic(path_of("out.bin"), text, 1000, &err);
    TL_OK(st == COL_OK, "atomic write");
    st = col_read_file(path_of("out.bin"), 0, &got, &glen, &err);
    TL_OK(st == COL_OK && glen == 1000 && memcmp(got, text, 1000) == 0, "atomic write content");
    free(got);
    st = col_write_file_atomic("/nonexistent-dir/x.bin", text, 10, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "/nonexistent-dir/x.bin"), "unwritable path: %s", err.msg);

    /* a write that runs out of space (file size limit standing in for a full
     * disk) fails, keeps the previous file intact and leaves no temp file */
    {
        struct rlimit old, small = {.rlim_cur = 100, .rlim_max = RLIM_INFINITY};
        getrlimit(RLIMIT_FSIZE, &old);
        small.rlim_max = old.rlim_max;
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &small);
        st = col_write_file_atomic(path_of("out.bin"), text + 1, 5000, &err);
        setrlimit(RLIMIT_FSIZE, &old);
        TL_OK(st == COL_EIO && strstr(err.msg, "out.bin"), "write past the space limit fails: %s", err.msg);
        st = col_read_file(path_of("out.bin"), 0, &got, &glen, &err);
        TL_OK(st == COL_OK && glen == 1000 && memcmp(got, text, 1000) == 0, "previous file intact after failed write");
        free(got);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls %s | grep tmp)\"", dir);
        TL_OK(system(cmd) == 0, "no temporary file left behind");
    }
    free(text);
    test_no_external_filters();
    TL_OK(tl_remove_tree(dir), "cleanup");
    return tl_done();
}
