/* testlib.h - a few lines of TAP for the test programs.
 *
 * Each test program calls TL_OK() for every assertion and returns
 * tl_done(); automake's TAP driver counts the results. */
#ifndef COL_TESTLIB_H
#define COL_TESTLIB_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "gradcheck.h"
#include "backend_cpu.h"

static int tl_count, tl_failed;

static void tl_vok(bool cond, const char *file, int line, const char *fmt, va_list ap)
{
    tl_count++;
    if (!cond)
        tl_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tl_count);
    vprintf(fmt, ap);
    if (!cond)
        printf(" (%s:%d)", file, line);
    printf("\n");
    fflush(stdout);
}

static void tl_ok_at(bool cond, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void tl_ok_at(bool cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tl_vok(cond, file, line, fmt, ap);
    va_end(ap);
}

#define TL_OK(cond, ...) tl_ok_at((cond), __FILE__, __LINE__, __VA_ARGS__)

/* A check that cannot be made in this build: a TAP skip line with the reason. */
static inline void tl_skip_check(const char *what, const char *why)
{
    tl_count++;
    printf("ok %d # SKIP %s: %s\n", tl_count, what, why);
    fflush(stdout);
}

/* Under AddressSanitizer the resident memory holds its shadow and its
 * quarantine of freed blocks: checks of peak RSS against a bound are skipped. */
#if defined(__SANITIZE_ADDRESS__)
#define TL_RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TL_RSS_MEANINGFUL 0
#endif
#endif
#ifndef TL_RSS_MEANINGFUL
#define TL_RSS_MEANINGFUL 1
#endif
#define TL_RSS_SKIP_WHY "AddressSanitizer's shadow memory and quarantine count as resident"

/* Diagnostics (TAP comment lines). */
#define TL_NOTE(...) (printf("# " __VA_ARGS__), printf("\n"))

static inline int tl_done(void)
{
    printf("1..%d\n", tl_count);
    return tl_failed ? 1 : 0;
}

/* Runs a gradient check and records one result line. */
static inline void tl_gradcheck(const col_backend *be, const char *name, col_gc_build_fn build, void *user, int n,
                                const col_gc_input *in, const col_gc_opts *opts)
{
    col_gc_result r;
    col_err err = {COL_OK}; /* COL_OK, not 0: C++ includes this too (tests/test_cuda_emu.cu) */
    col_status st = col_gradcheck(be, build, user, n, in, opts, &r, &err);
    if (st != COL_OK) {
        TL_OK(false, "gradcheck %s: %s", name, err.msg);
        return;
    }
    TL_OK(r.failed == 0 && r.checked > 0, "gradcheck %s: %d points, max |err| %.2e (input %d [%lld]: analytic %.6g numeric %.6g)",
          name, r.checked, r.max_abs_err, r.worst_input, (long long)r.worst_index, r.worst_analytic, r.worst_numeric);
}

/* A CPU backend or a bail-out: every test needs one. */
static inline void tl_cpu_backend(col_backend *be)
{
    col_err err = {COL_OK}; /* COL_OK, not 0: C++ includes this too (tests/test_cuda_emu.cu) */
    if (col_cpu_backend_init(be, &err) != COL_OK) {
        printf("Bail out! cpu backend: %s\n", err.msg);
        fflush(stdout);
        exit(1);
    }
}

/* mkdtemp on templ (a path ending in XXXXXX), or a bail-out: the tests that need a directory */
static inline void tl_mkdtemp(char *templ)
{
    if (!mkdtemp(templ)) {
        printf("Bail out! mkdtemp %s failed\n", templ);
        fflush(stdout);
        exit(1);
    }
}

/* rm -rf of a test's directory tree (a path with no quote in it); true when it went */
static inline bool tl_remove_tree(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd) == 0;
}

#endif
