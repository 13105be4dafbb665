/* mpi_testutil.h - TAP checks for tests that run under mpirun: every rank
 * makes the same checks in the same order; a check passes when it passed on
 * every rank (combined with plain MPI, not the library under test), and
 * rank 0 alone prints its TAP line, after the failing ranks' details as
 * comments. Include after testlib.h and <mpi.h>. A test that counts its
 * failed checks can wrap it:
 *     #define check(ok, detail, ...) (g_failed += !tl_mpi_check((ok), (detail), __VA_ARGS__)) */
#ifndef COL_TESTS_MPI_TESTUTIL_H
#define COL_TESTS_MPI_TESTUTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

static bool tl_mpi_check(bool ok, const char *detail, const char *fmt, ...) __attribute__((format(printf, 3, 4), unused));
static bool tl_mpi_check(bool ok, const char *detail, const char *fmt, ...)
{
    int rank = 0, size = 1, mine = ok, all = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char name[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (!all) {
        enum { D = 400 };
        char d[D] = "";
        if (!ok)
            snprintf(d, sizeof d, "%s", detail && *detail ? detail : "(no detail)");
        char *alld = rank == 0 ? calloc((size_t)size, D) : NULL;
        MPI_Gather(d, D, MPI_CHAR, alld, D, MPI_CHAR, 0, MPI_COMM_WORLD);
        for (int r = 0; alld && r < size; r++)
            if (alld[(size_t)r * D])
                printf("# rank %d: %s\n", r, alld + (size_t)r * D);
        free(alld);
    }
    if (rank == 0)
        TL_OK(all, "%s", name);
    return all;
}

/* The first failure of a check over many cases (its detail goes beside the check's line). */
typedef struct {
    bool ok;
    char detail[400];
} res;

static void fail(res *r, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void fail(res *r, const char *fmt, ...)
{
    if (!r->ok)
        return;
    r->ok = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
}

static void expect_ok(res *r, col_status st, const col_err *e, const char *what) __attribute__((unused));
static void expect_ok(res *r, col_status st, const col_err *e, const char *what)
{
    if (st != COL_OK)
        fail(r, "%s: %s (%s)", what, col_status_name(st), e->msg);
}

#endif
