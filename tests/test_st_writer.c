/* test_st_writer.c - the piecewise safetensors writer (col_st_writer_*):
 * pieces in any order give the bytes of col_st_write_f32 and of the Python
 * library; a tensor not written whole, a piece outside its tensor, an
 * abandoned file leave the old file as it was and no temporary file. And the
 * other way: a mapped file read tensor by tensor does not stay resident. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "procmem.h"
#include "rng.h"
#include "testlib.h"
#include "textio.h"
#include "file_testutil.h"

#ifdef COL_SRC_ASSET_DIR
#define FIX COL_SRC_ASSET_DIR "/../tests/fixtures/safetensors"
#else
#define FIX "tests/fixtures/safetensors"
#endif

static char tmpdir[] = "/tmp/col_stw_XXXXXX";

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

static int64_t numel_of(const col_st_out *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static int temp_files(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp") != NULL;
    if (d)
        closedir(d);
    return n;
}

typedef struct {
    int i;
    int64_t off, len; /* elements */
} piece;

/* Every tensor cut into pieces of up to max_len elements, shuffled. */
static int cut(const col_st_out *t, int n, int64_t max_len, col_rng *rng, piece *out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        int64_t m = numel_of(&t[i]);
        for (int64_t off = 0; off < m;) {
            int64_t len = 1 + (int64_t)(col_rng_u32(rng) % (uint32_t)max_len);
            if (len > m - off)
                len = m - off;
            out[k++] = (piece){i, off, len};
            off += len;
        }
        if (m == 0)
            out[k++] = (piece){i, 0, 0};
    }
    for (int a = k - 1; a > 0; a--) {
        int b = (int)(col_rng_u32(rng) % (uint32_t)(a + 1));
        piece x = out[a];
        out[a] = out[b];
        out[b] = x;
    }
    return k;
}

static col_status write_pieces(const char *path, const col_st_out *t, int n, const char *const *meta,
                               const piece *p, int np, int skip, col_err *err)
{
    col_st_writer *w = NULL;
    col_status st = col_st_writer_begin(path, t, n, meta, &w, err);
    for (int k = 0; st == COL_OK && k < np; k++)
        if (k != skip)
            st = col_st_writer_put(w, p[k].i, (uint64_t)p[k].off * 4, t[p[k].i].data + p[k].off,
                                   (size_t)p[k].len * 4, err);
    if (st != COL_OK) {
        col_st_writer_end(w, false, NULL);
        return st;
    }
    return col_st_writer_end(w, true, err);
}

/* the tensors of roundtrip_ref.safetensors (written by the Python library) */
static void test_python_bytes(void)
{
    col_st_out t[5] = {
        {"b.weight", 2, {2, 3}, NULL}, {"a.bias", 1, {4}, NULL}, {"c.scalar", 0, {0}, NULL},
        {"d.conv", 4, {2, 1, 2, 3}, NULL}, {"e.empty", 2, {0, 5}, NULL},
    };
    float *buf[5];
    for (int i = 0; i < 5; i++) {
        int64_t m = numel_of(&t[i]);
        buf[i] = malloc((size_t)(m ? m : 1) * sizeof(float));
        for (int64_t j = 0; j < m; j++)
            buf[i][j] = (float)j * 0.25f - 1.0f;
        t[i].data = buf[i];
    }
    const char *meta[] = {"format", "pt", NULL};
    piece p[64];
    col_rng rng;
    col_rng_init(&rng, 5);
    int np = cut(t, 5, 3, &rng, p);
    char path[512];
    path_in(path, sizeof path, "ref.safetensors");
    col_err err = {0};
    col_status st = write_pieces(path, t, 5, meta, p, np, -1, &err);
    TL_OK(st == COL_OK, "%d pieces of 5 tensors in shuffled order: %s", np, err.msg);
    TL_OK(tl_same_file(path, FIX "/roundtrip_ref.safetensors"), "the bytes of the Python library's file");
    for (int i = 0; i < 5; i++)
        free(buf[i]);
}

/* random shapes and pieces against col_st_write_f32; then the errors */
static void test_random_and_errors(void)
{
    enum { N = 24 };
    col_rng rng;
    col_rng_init(&rng, 77);
    col_st_out t[N];
    char names[N][32];
    float *buf[N];
    int64_t total = 0;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layer.%d.w%u.%d", i % 7, col_rng_u32(&rng) % 1000, i);
        t[i] = (col_st_out){.name = names[i], .ndim = 1 + i % 3};
        for (int d = 0; d < t[i].ndim; d++)
            t[i].shape[d] = (int64_t)(col_rng_u32(&rng) % 40) + (i == 3 ? 0 : 1);
        int64_t m = numel_of(&t[i]);
        buf[i] = malloc((size_t)(m ? m : 1) * sizeof(float));
        for (int64_t j = 0; j < m; j++)
            buf[i][j] = col_rng_normal(&rng);
        t[i].data = buf[i];
        total += m;
    }
    const char *meta[] = {"step", "12", "seed", "3", NULL};
    char whole[512], streamed[512];
    path_in(whole, sizeof whole, "whole.safetensors");
    path_in(streamed, sizeof streamed, "streamed.safetensors");
    col_err err = {0};
    TL_OK(col_st_write_f32(whole, t, N, meta, &err) == COL_OK, "col_st_write_f32: %s", err.msg);
    piece *p = malloc(sizeof *p * (size_t)(total + N));
    int np = cut(t, N, 17, &rng, p);
    TL_OK(write_pieces(streamed, t, N, meta, p, np, -1, &err) == COL_OK, "%d pieces: %s", np, err.msg);
    TL_OK(tl_same_file(whole, streamed), "streamed in shuffled pieces = written whole (%lld floats)", (long long)total);

    /* one piece missing: refused, the old file stays */
    int skip = 0;
    while (p[skip].len == 0)
        skip++;
    col_status st = write_pieces(streamed, t, N, meta, p, np, skip, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "bytes"), "a tensor not written whole is refused: %s", err.msg);
    TL_OK(tl_same_file(whole, streamed) && temp_files() == 0, "the old file is untouched, no temporary file left");

    /* a piece outside its tensor */
    col_st_writer *w = NULL;
    st = col_st_writer_begin(streamed, t, N, meta, &w, &err);
    float x[2] = {0};
    col_status a = col_st_writer_put(w, 0, (uint64_t)numel_of(&t[0]) * 4 - 4, x, 8, &err);
    col_status b = col_st_writer_put(w, N, 0, x, 4, &err);
    TL_OK(st == COL_OK && a == COL_EINVAL && b == COL_EINVAL, "pieces past a tensor's end or of no tensor are refused");
    col_st_writer_end(w, false, NULL);
    TL_OK(tl_same_file(whole, streamed) && temp_files() == 0, "an abandoned file leaves the old one and no temporary");

    /* the checks of col_st_write_f32 hold for the writer too (data pointers aside) */
    col_st_out dup[2] = {{"x", 1, {2}, NULL}, {"x", 1, {3}, NULL}};
    st = col_st_writer_begin(streamed, dup, 2, NULL, &w, &err);
    TL_OK(st == COL_EINVAL && !w && strstr(err.msg, "twice"), "a name given twice: %s", err.msg);
    col_st_out nodata[1] = {{"y", 1, {2}, NULL}};
    st = col_st_writer_begin(streamed, nodata, 1, NULL, &w, &err);
    TL_OK(st == COL_OK, "begin needs no data pointers");
    col_st_writer_end(w, false, NULL);
    st = col_st_write_f32(streamed, nodata, 1, NULL, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "no data"), "col_st_write_f32 still does: %s", err.msg);
    TL_OK(tl_same_file(whole, streamed) && temp_files() == 0, "after all that the file is the first one");
    free(p);
    for (int i = 0; i < N; i++)
        free(buf[i]);
    remove(whole);
    remove(streamed);
}

/* 96 MB of tensors written, then read back one at a time into one buffer: the file's pages leave memory */
static void test_read_releases(void)
{
    enum { N = 12, M = 2 << 20 }; /* 12 tensors of 2M floats (8 MB) */
    float *buf = malloc(sizeof(float) * M);
    col_st_out t[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t%02d", i);
        t[i] = (col_st_out){.name = names[i], .ndim = 1, .shape = {M}, .data = buf};
    }
    char path[512];
    path_in(path, sizeof path, "big.safetensors");
    col_err err = {0};
    col_st_writer *w = NULL;
    col_status st = col_st_writer_begin(path, t, N, NULL, &w, &err);
    for (int i = 0; i < N && st == COL_OK; i++) {
        for (int j = 0; j < M; j++)
            buf[j] = (float)(i * M + j);
        st = col_st_writer_put(w, i, 0, buf, sizeof(float) * M, &err);
    }
    st = st == COL_OK ? col_st_writer_end(w, true, &err) : col_st_writer_end(w, false, NULL);
    col_procmem before, m;
    col_ckpt *c = NULL;
    bool have = col_procmem_read(&before);
    if (st == COL_OK)
        st = col_ckpt_open(path, &c, &err);
    size_t most = 0;
    bool right = st == COL_OK && col_ckpt_count(c) == N;
    for (int i = 0; right && i < N; i++) {
        const col_ckpt_tensor *x = col_ckpt_find(c, names[i]);
        right = x && x->mapped && col_ckpt_read_f32(x, 1, (int64_t[]){M}, buf, &err) == COL_OK &&
                buf[0] == (float)(i * M) && buf[M - 1] == (float)(i * M + M - 1);
        col_procmem_read(&m);
        if (m.file > before.file && m.file - before.file > most)
            most = m.file - before.file;
    }
    TL_OK(right, "96 MB written in pieces, read back tensor by tensor: %s", err.msg);
    if (have)
        TL_OK(most < ((size_t)24 << 20), "the mapped file never held more than %.1f MB resident (of 96)",
              (double)most / 1e6);
    col_ckpt_close(c);
    remove(path);
    free(buf);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_python_bytes();
    test_random_and_errors();
    test_read_releases();
    char path[512];
    path_in(path, sizeof path, "ref.safetensors");
    remove(path);
    rmdir(tmpdir);
    return tl_done();
}
