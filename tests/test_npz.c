/* test_npz.c - NumPy .npz archives through col_ckpt_open (libcore/formats/npz.c, zipread.c).
 *
 * 1. good.npz (np.savez: stored), good_compressed.npz (np.savez_compressed: deflated) and versions.npz
 *    (hand-written .npy headers of format 1.0/2.0/3.0 numpy reads) opened with col_ckpt_open: format
 *    "npz", the arrays in np.savez's order, and for every array its dtype, shape and bytes equal to what
 *    np.load read ("raw/NAME" of the *.ref.safetensors written by tools/refgen/make_npz_fixtures.py) and
 *    col_ckpt_read_f32 bit-equal to numpy's .astype(np.float32) ("f32/NAME"); stored arrays lie in the
 *    file mapping, deflated ones do not. col_npz_parse from a misaligned copy reads the same.
 * 2. Each bad file is refused with COL_EFORMAT and its own one-line message naming file and array.
 * 3. Format detection: a PyTorch zip still opens as "pytorch"; an .npz named *.bin opens as "npz"; a
 *    PyTorch zip named *.npz is refused by the .npz reader, naming its pickle entry.
 * 4. A 64 MiB stored .npz written here (libarchive, data descriptors) reads in place, value for value.
 * 5. Random byte flips and truncations of the good files never crash, and every refusal has a message.
 */
#include <archive.h>
#include <archive_entry.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/npz"
#endif
#ifndef PT_FIXTURES
#define PT_FIXTURES "tests/fixtures/torchbin"
#endif

static char tmpdir[] = "/tmp/col_npz_XXXXXX";

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *fix(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", FIXTURES, name);
    return buf[k];
}

static uint8_t *slurp(const char *path, size_t *len)
{
    char *data = NULL;
    col_err err = {0};
    if (col_read_file(path, 0, &data, len, &err) != COL_OK) {
        TL_NOTE("cannot read %s: %s", path, err.msg);
        return NULL;
    }
    return (uint8_t *)data;
}

static void copy_file(const char *from, const char *to)
{
    size_t len = 0;
    uint8_t *d = slurp(from, &len);
    FILE *f = d ? fopen(to, "wb") : NULL;
    if (f) {
        fwrite(d, 1, len, f);
        fclose(f);
    }
    free(d);
}

static size_t numel_of(const col_ckpt_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* f32 values equal bit for bit (any NaN equals any NaN) */
static bool same_f32(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i])))
            return false;
    return true;
}

/* Compares every array of npz (opened as a checkpoint) with the reference; expect_mapped: 1 all stored
 * arrays are mapped, 0 none is, -1 not checked. */
static void check_against_reference(const char *npz, const char *ref_name, int expect_mapped)
{
    col_err err = {0};
    col_ckpt *c = NULL, *ref = NULL;
    col_st_file *rf = NULL;
    col_status st = col_ckpt_open(npz, &c, &err);
    TL_OK(st == COL_OK && !strcmp(col_ckpt_format(c), "npz"), "%s opens as npz (%s)", npz,
          st == COL_OK ? col_ckpt_format(c) : err.msg);
    if (st != COL_OK)
        return;
    if (col_ckpt_open(fix(ref_name), &ref, &err) != COL_OK || col_st_open(fix(ref_name), &rf, &err) != COL_OK) {
        TL_OK(false, "reference %s: %s", ref_name, err.msg);
        col_ckpt_close(c);
        col_ckpt_close(ref);
        return;
    }
    /* the order np.savez was given the arrays */
    const char *order = col_st_metadata(rf, "order");
    int n = 0, in_order = 0;
    for (const char *p = order; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t k = nl ? (size_t)(nl - p) : strlen(p);
        const col_ckpt_tensor *t = col_ckpt_get(c, n);
        in_order += t && strlen(t->name) == k && !strncmp(t->name, p, k);
        n++;
        p += k + (nl ? 1 : 0);
    }
    TL_OK(order && n == col_ckpt_count(c) && in_order == n && 2 * n == col_ckpt_count(ref),
          "%s: %d arrays, in np.savez's order (%d of %d)", npz, col_ckpt_count(c), in_order, n);

    int same_raw = 0, same_conv = 0, mapped_ok = 0, found = 0;
    char first_bad[300] = "";
    for (int i = 0; i < col_ckpt_count(c); i++) {
        const col_ckpt_tensor *t = col_ckpt_get(c, i);
        char rn[600];
        snprintf(rn, sizeof rn, "raw/%s", t->name);
        const col_ckpt_tensor *r = col_ckpt_find(ref, rn);
        snprintf(rn, sizeof rn, "f32/%s", t->name);
        const col_ckpt_tensor *r32 = col_ckpt_find(ref, rn);
        found += col_ckpt_find(c, t->name) == t;
        if (!r || !r32)
            continue;
        bool raw = t->dtype == r->dtype && t->ndim == r->ndim && t->nbytes == r->nbytes &&
                   !memcmp(t->shape, r->shape, (size_t)t->ndim * sizeof t->shape[0]) &&
                   (t->nbytes == 0 || !memcmp(t->data, r->data, t->nbytes)) && !strcmp(t->file, npz);
        size_t ne = numel_of(t);
        float *got = malloc((ne + 1) * sizeof *got), *want = malloc((ne + 1) * sizeof *want);
        bool conv = got && want && col_ckpt_read_f32(t, t->ndim, t->shape, got, &err) == COL_OK &&
                    col_ckpt_read_f32(r32, t->ndim, t->shape, want, &err) == COL_OK && r32->dtype == COL_ST_F32 &&
                    same_f32(got, want, ne);
        free(got);
        free(want);
        same_raw += raw;
        same_conv += conv;
        mapped_ok += expect_mapped < 0 || t->nbytes == 0 || t->mapped == (expect_mapped == 1);
        if ((!raw || !conv) && !first_bad[0])
            snprintf(first_bad, sizeof first_bad, " (first mismatch: '%.200s'%s%s)", t->name, raw ? "" : " bytes",
                     conv ? "" : " f32");
    }
    int nt = col_ckpt_count(c);
    TL_OK(found == nt, "%s: col_ckpt_find finds each of the %d arrays by name", npz, nt);
    TL_OK(same_raw == nt, "%s: dtype, shape and bytes of %d/%d arrays equal np.load's%s", npz, same_raw, nt,
          first_bad);
    TL_OK(same_conv == nt, "%s: col_ckpt_read_f32 of %d/%d arrays bit-equal to numpy's astype(float32)", npz,
          same_conv, nt);
    if (expect_mapped >= 0)
        TL_OK(mapped_ok == nt, "%s: %s", npz, expect_mapped ? "stored arrays are used in place (mapped)"
                                                            : "deflated arrays are decompressed (not mapped)");
    col_st_close(rf);
    col_ckpt_close(ref);
    col_ckpt_close(c);
}

static void test_good(void)
{
    check_against_reference(fix("good.npz"), "good.ref.safetensors", 1);
    check_against_reference(fix("good_compressed.npz"), "good.ref.safetensors", 0);
    check_against_reference(fix("versions.npz"), "versions.ref.safetensors", -1);

    /* the AlphaFold-style name, '/' and '//' included, and the scalar */
    col_ckpt *c = NULL;
    col_err err = {0};
    if (col_ckpt_open(fix("good.npz"), &c, &err) == COL_OK) {
        const col_ckpt_tensor *w = col_ckpt_find(
            c, "alphafold/alphafold_iteration/evoformer/evoformer_iteration/msa_transition/transition1//weights");
        const col_ckpt_tensor *s = col_ckpt_find(c, "scalar");
        TL_OK(w && w->ndim == 3 && w->shape[0] == 2 && w->shape[1] == 3 && w->shape[2] == 4 && w->dtype == COL_ST_F32 &&
              !col_ckpt_find(c, "alphafold/alphafold_iteration/evoformer/evoformer_iteration/msa_transition/"
                                "transition1//weights.npy"),
              "an array is found by its name without .npy (shape [2,3,4] f32)");
        TL_OK(s && s->ndim == 0 && s->nbytes == 4, "a 0-d array has ndim 0 and one element");
        col_ckpt_close(c);
    }

    /* col_npz_parse from a misaligned copy of each */
    const char *names[] = {"good.npz", "good_compressed.npz", "versions.npz"};
    for (size_t k = 0; k < 3; k++) {
        size_t len = 0;
        uint8_t *img = slurp(fix(names[k]), &len);
        uint8_t *buf = img ? malloc(len + 3) : NULL;
        col_npz_file *a = NULL, *b = NULL;
        bool same = false;
        if (buf) {
            memcpy(buf + 3, img, len);
            if (col_npz_parse(img, len, names[k], &a, &err) == COL_OK &&
                col_npz_parse(buf + 3, len, names[k], &b, &err) == COL_OK && col_npz_count(a) == col_npz_count(b)) {
                same = col_npz_count(a) > 0;
                for (int i = 0; i < col_npz_count(a) && same; i++) {
                    const col_ckpt_tensor *x = col_npz_get(a, i), *y = col_npz_get(b, i);
                    same = !strcmp(x->name, y->name) && x->nbytes == y->nbytes && x->dtype == y->dtype &&
                           !memcmp(x->data, y->data, x->nbytes) && !x->mapped && !y->mapped;
                }
            }
        }
        TL_OK(same, "%s parsed in memory, aligned and misaligned by 3 bytes: the same %d arrays (%s)", names[k],
              col_npz_count(a), same ? "ok" : err.msg);
        col_npz_close(a);
        col_npz_close(b);
        free(buf);
        free(img);
    }
}

static void test_bad(void)
{
    static const struct {
        const char *file, *array, *msg;
    } cases[] = {
        {"bad_truncated.npz", NULL, "the zip's end record is missing: the file is truncated"},
        {"bad_magic.npz", "'x'", "is not a .npy array (no \\x93NUMPY magic)"},
        {"bad_fortran.npz", "'w'", "is Fortran-ordered; only C-ordered arrays are read"},
        {"bad_big_endian.npz", "'w'", "is big-endian ('>f4'); only little-endian arrays are read"},
        {"bad_length.npz", "'w'", "has 20 bytes of data, but shape (2, 3) of '<f4' needs 24"},
        {"bad_length_long.npz", "'w'", "has 28 bytes of data, but shape (2, 3) of '<f4' needs 24"},
        {"bad_extra_key.npz", "'w'", ".npy header key 'foo' is not one of 'descr', 'fortran_order', 'shape'"},
        {"bad_missing_key.npz", "'w'", "its .npy header has no 'shape'"},
        {"bad_not_npy.npz", "'readme.txt'", "zip entry 'readme.txt' is not a .npy array"},
        {"bad_object.npz", "'w'", "holds Python objects (dtype '|O'), which are never read"},
        {"bad_structured.npz", "'w'", "is a structured array"},
        {"bad_complex.npz", "'w'", "has dtype '<c8', which is not read"},
        {"bad_version.npz", "'w'", ".npy format version 4.0 is not supported"},
        {"bad_header_past_end.npz", "'w'", "its .npy header (500 bytes) runs past the end of the entry (25 bytes)"},
        {"bad_dims9.npz", "'w'", "has more than 8 dimensions"},
        {"bad_paren_shape.npz", "'w'", "'shape' is a parenthesized integer, not a tuple"},
        {"bad_duplicate.npz", "'ok.npy'", "zip entry 'ok.npy' appears twice"},
        {"bad_single_npy.npz", NULL, "this is a single .npy array, not an .npz archive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_ckpt *c = NULL;
        col_err err = {0};
        const char *path = fix(cases[i].file);
        col_status st = col_ckpt_open(path, &c, &err);
        TL_OK(st == COL_EFORMAT && !c && strstr(err.msg, path) && strstr(err.msg, cases[i].msg) &&
                  (!cases[i].array || strstr(err.msg, cases[i].array)) && !strchr(err.msg, '\n'),
              "%s refused: %s", cases[i].file, err.msg);
        col_ckpt_close(c);
    }
}

static void test_detection(void)
{
    col_ckpt *c = NULL;
    col_err err = {0};
    col_status st = col_ckpt_open(PT_FIXTURES "/module.bin", &c, &err);
    TL_OK(st == COL_OK && !strcmp(col_ckpt_format(c), "pytorch") && col_ckpt_count(c) > 0,
          "a PyTorch zip (torchbin/module.bin) still opens as pytorch (%s)", st == COL_OK ? col_ckpt_format(c) : err.msg);
    col_ckpt_close(c);
    c = NULL;
    st = col_ckpt_open(PT_FIXTURES "/module_deflate.bin", &c, &err);
    TL_OK(st == COL_OK && !strcmp(col_ckpt_format(c), "pytorch"), "its deflated copy too");
    col_ckpt_close(c);

    copy_file(fix("good.npz"), tmp_path("weights.bin"));
    c = NULL;
    st = col_ckpt_open(tmp_path("weights.bin"), &c, &err);
    TL_OK(st == COL_OK && !strcmp(col_ckpt_format(c), "npz") && col_ckpt_find(c, "arr_0"),
          "an .npz named weights.bin opens as npz by its content (%s)", st == COL_OK ? col_ckpt_format(c) : err.msg);
    col_ckpt_close(c);

    copy_file(PT_FIXTURES "/module.bin", tmp_path("module.npz"));
    c = NULL;
    st = col_ckpt_open(tmp_path("module.npz"), &c, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "data.pkl' is not a .npy array"),
          "a PyTorch zip named *.npz is read as an .npz and refused: %s", err.msg);
    col_ckpt_close(c);

    size_t len = 0;
    uint8_t *pt = slurp(PT_FIXTURES "/module.bin", &len);
    size_t nlen = 0;
    uint8_t *nz = slurp(fix("good_compressed.npz"), &nlen);
    TL_OK(pt && nz && !col_npz_sniff(pt, len) && col_npz_sniff(nz, nlen) && !col_npz_sniff(nz, nlen / 2),
          "col_npz_sniff: the torch zip is not an npz, the npz is, a truncated one is not");
    free(pt);
    free(nz);
}

/* This process's resident memory (KiB), or -1. */
static long rss_kib(void)
{
    long pages = -1, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A large stored .npz written with libarchive (streamed: sizes in data descriptors). */
static void test_large(void)
{
    const size_t n = (size_t)16 << 20;   /* 64 MiB of f32 */
    const char *path = tmp_path("large.npz");
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, 1024), }", n / 1024);
    size_t total = 10 + (size_t)hl + 1, pad = (64 - total % 64) % 64;
    uint8_t *npy = malloc(total + pad + n * 4);
    float *v = (float *)malloc(n * sizeof *v);
    if (!npy || !v) {
        TL_OK(false, "out of memory for the large .npz");
        free(npy);
        free(v);
        return;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 100003) * 0.25f - (float)(i % 7);
    size_t h = (size_t)hl + pad + 1;
    memcpy(npy, "\x93NUMPY\x01\x00", 8);
    npy[8] = (uint8_t)(h & 0xff);
    npy[9] = (uint8_t)(h >> 8);
    memcpy(npy + 10, hdr, (size_t)hl);
    memset(npy + 10 + hl, ' ', pad);
    npy[10 + hl + pad] = '\n';
    memcpy(npy + 10 + h, v, n * 4);
    struct archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    archive_write_zip_set_compression_store(a);
    bool written = archive_write_open_filename(a, path) == ARCHIVE_OK;
    const char *names[] = {"alphafold/alphafold_iteration/evoformer/evoformer_iteration/big//weights.npy", "b.npy"};
    for (int k = 0; k < 2 && written; k++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, names[k]);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        size_t sz = k == 0 ? 10 + h + n * 4 : 10 + h + 1024 * 4;   /* b: the first 1024 values, shape (1, 1024) */
        if (k == 1) {
            int hl2 = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1024), }");
            memset(npy + 10, ' ', h - 1);
            memcpy(npy + 10, hdr, (size_t)hl2);
        }
        archive_entry_set_size(e, (la_int64_t)sz);
        written = archive_write_header(a, e) == ARCHIVE_OK && archive_write_data(a, npy, sz) == (la_ssize_t)sz;
        archive_entry_free(e);
    }
    written = archive_write_close(a) == ARCHIVE_OK && written;
    archive_write_free(a);
    free(npy);
    TL_OK(written, "wrote a 64 MiB stored .npz with libarchive");

    struct timespec t0, t1, t2;
    long rss0 = rss_kib();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    col_ckpt *c = NULL;
    col_err err = {0};
    col_status st = col_ckpt_open(path, &c, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long grew = rss_kib() - rss0;
    if (TL_RSS_MEANINGFUL)
        TL_OK(st == COL_OK && rss0 > 0 && grew < 16 * 1024, "opening it leaves the file's pages out of resident "
              "memory (RSS grew by %ld KiB)", grew);
    else
        tl_skip_check("resident memory after opening a 64 MiB .npz", TL_RSS_SKIP_WHY);
    const col_ckpt_tensor *t =
        st == COL_OK ? col_ckpt_find(c, "alphafold/alphafold_iteration/evoformer/evoformer_iteration/big//weights") : NULL;
    const col_ckpt_tensor *b = st == COL_OK ? col_ckpt_find(c, "b") : NULL;
    float *got = malloc(n * sizeof *got);
    int64_t shape[2] = {(int64_t)(n / 1024), 1024}, bshape[2] = {1, 1024};
    bool ok = t && b && got && t->mapped && col_ckpt_read_f32(t, 2, shape, got, &err) == COL_OK &&
              !memcmp(got, v, n * 4);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    ok = ok && col_ckpt_read_f32(b, 2, bshape, got, &err) == COL_OK && !memcmp(got, v, 1024 * 4);
    TL_OK(st == COL_OK && ok, "the 64 MiB array reads in place (mapped), value for value (%s)",
          st == COL_OK ? (ok ? "ok" : err.msg) : err.msg);
    TL_NOTE("64 MiB stored .npz: open %.1f ms (zip listing + CRC of every entry), read_f32 %.1f ms",
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
            (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e6);
    col_ckpt_close(c);
    free(got);
    free(v);
    unlink(path);
}

static void test_damage(void)
{
    static const char *files[] = {"good.npz", "good_compressed.npz", "versions.npz"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        size_t len = 0;
        uint8_t *img = slurp(fix(files[fi]), &len);
        uint8_t *buf = img ? malloc(len) : NULL;
        int refused = 0, read = 0;
        for (int trial = 0; buf && trial < 300; trial++) {
            memcpy(buf, img, len);
            int flips = 1 + trial % 4;
            for (int k = 0; k < flips; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                buf[(rng >> 8) % len] ^= (uint8_t)(1u << (rng & 7));
            }
            size_t n = trial % 10 == 9 ? (size_t)(rng >> 20) % len : len;
            col_npz_file *f = NULL;
            col_err err = {0};
            if (col_npz_parse(buf, n, files[fi], &f, &err) == COL_OK) {
                volatile unsigned sum = 0;
                for (int i = 0; i < col_npz_count(f); i++) {
                    const col_ckpt_tensor *t = col_npz_get(f, i);
                    for (size_t k = 0; k < t->nbytes; k++)
                        sum += ((const uint8_t *)t->data)[k];
                }
                (void)sum;
                read++;
            } else {
                refused += err.code == COL_EFORMAT && strstr(err.msg, files[fi]) != NULL;
            }
            col_npz_close(f);
        }
        TL_OK(refused + read == 300, "%s: 300 damaged copies: %d refused with a message naming the file, %d read",
              files[fi], refused, read);
        free(buf);
        free(img);
    }
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        TL_OK(false, "mkdtemp");
        return tl_done();
    }
    test_good();
    test_bad();
    test_detection();
    test_large();
    test_damage();
    nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return tl_done();
}
