/* test_comm_stats.c - the traffic counters of libcore/comm (col_comm_stats),
 * under mpirun with 2, 3 and 4 processes (tests/test_comm.sh).
 *
 * Every operation, dtype and a few sizes: the counters' change is compared
 * with the per-rank formulas of comm.h, computed here on their own (plain
 * integer arithmetic, not the library's). Also: a request counts when it is
 * waited for (not when col_comm_test sees it done), a call refused before it
 * starts and a failed wait add no bytes, split communicators count apart
 * from their parent, col_comm_stats_add sums, and wait_s holds the time a
 * rank was blocked waiting for a late peer (at least the peer's delay, at
 * most the wall time of the call). Checks are combined over the ranks with
 * plain MPI; rank 0 prints the TAP lines.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm.h"
#include "testlib.h"

static int g_rank, g_size, g_failed;

/* one TAP line for a check every rank made; the failing ranks' details as comments */
static void check(bool ok, const char *detail, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *detail, const char *fmt, ...)
{
    int mine = ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char name[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (!all) {
        enum { D = 400 };
        char d[D] = "";
        if (!ok)
            snprintf(d, sizeof d, "%s", detail && *detail ? detail : "(no detail)");
        char *alld = g_rank == 0 ? calloc((size_t)g_size, D) : NULL;
        MPI_Gather(d, D, MPI_CHAR, alld, D, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (g_rank == 0) {
            for (int r = 0; r < g_size; r++)
                if (alld[(size_t)r * D])
                    printf("# rank %d: %s\n", r, alld + (size_t)r * D);
            free(alld);
        }
        g_failed++;
    }
    if (g_rank == 0)
        TL_OK(all, "%s", name);
}

typedef struct {
    bool ok;
    char detail[400];
} res;

static void fail(res *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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

static void expect_ok(res *r, col_status st, const col_err *e, const char *what)
{
    if (st != COL_OK)
        fail(r, "%s: %s (%s)", what, col_status_name(st), e->msg);
}

/* the change of c's counters since *before must be (sent, recv, ops); *before becomes now */
static void expect_delta(res *r, const col_comm *c, col_comm_stats *before, uint64_t sent, uint64_t recv, uint64_t ops,
                         const char *what)
{
    col_comm_stats now;
    col_comm_get_stats(c, &now);
    uint64_t ds = now.bytes_sent - before->bytes_sent, dr = now.bytes_recv - before->bytes_recv,
             dops = now.ops - before->ops;
    if (ds != sent || dr != recv || dops != ops)
        fail(r, "%s on %d ranks: sent %llu recv %llu ops %llu; want %llu %llu %llu", what, col_comm_size(c),
             (unsigned long long)ds, (unsigned long long)dr, (unsigned long long)dops, (unsigned long long)sent,
             (unsigned long long)recv, (unsigned long long)ops);
    if (now.wait_s < before->wait_s)
        fail(r, "%s: wait_s went down (%g -> %g)", what, before->wait_s, now.wait_s);
    *before = now;
}

static const col_dtype dtypes[] = {COL_F32, COL_BF16, COL_I64};
static const size_t counts[] = {0, 1, 7, 1001};
#define NDT (int)(sizeof dtypes / sizeof dtypes[0])
#define NCOUNT (int)(sizeof counts / sizeof counts[0])

/* every collective, dtype and count against the formulas of comm.h, on c */
static void test_collectives(col_comm *c, const char *label)
{
    uint64_t p = (uint64_t)col_comm_size(c);
    int rank = col_comm_rank(c);
    col_err e = {0};
    res ar = {true, ""}, rs = {true, ""}, ag = {true, ""}, aa = {true, ""}, bc = {true, ""}, pt = {true, ""},
        ba = {true, ""};
    col_comm_stats s;
    col_comm_get_stats(c, &s);
    for (int d = 0; d < NDT; d++)
        for (int k = 0; k < NCOUNT; k++) {
            col_dtype dt = dtypes[d];
            size_t n = counts[k];
            uint64_t b = (uint64_t)n * col_dtype_size(dt);
            char *x = calloc(n * p + 1, col_dtype_size(dt)), *y = calloc(n * p + 1, col_dtype_size(dt));
            char what[80];
            snprintf(what, sizeof what, "%zu %s", n, col_dtype_name(dt));
            expect_ok(&ar, col_comm_all_reduce(c, x, y, n, dt, COL_RED_SUM, &e), &e, "all-reduce");
            expect_delta(&ar, c, &s, 2 * (p - 1) * b / p, 2 * (p - 1) * b / p, 1, what);
            expect_ok(&rs, col_comm_reduce_scatter(c, x, y, n, dt, COL_RED_MAX, &e), &e, "reduce-scatter");
            expect_delta(&rs, c, &s, (p - 1) * b, (p - 1) * b, 1, what);
            expect_ok(&ag, col_comm_all_gather(c, x, y, n, dt, &e), &e, "all-gather");
            expect_delta(&ag, c, &s, (p - 1) * b, (p - 1) * b, 1, what);
            expect_ok(&aa, col_comm_all_to_all(c, x, y, n, dt, &e), &e, "all-to-all");
            expect_delta(&aa, c, &s, (p - 1) * b, (p - 1) * b, 1, what);
            for (int root = 0; root < (int)p; root++) {
                expect_ok(&bc, col_comm_broadcast(c, x, n, dt, root, &e), &e, "broadcast");
                /* the chain root, root+1, ...: everyone but its last rank sends, everyone but the root receives */
                bool last = p > 1 && (uint64_t)((rank - root + (int)p) % (int)p) == p - 1;
                char w2[120];
                snprintf(w2, sizeof w2, "%s from root %d", what, root);
                expect_delta(&bc, c, &s, p > 1 && !last ? b : 0, p > 1 && rank != root ? b : 0, 1, w2);
            }
            if (p > 1) {
                /* a ring: even ranks send first, odd ranks receive first */
                int next = (rank + 1) % (int)p, prev = (rank + (int)p - 1) % (int)p;
                col_comm_req *q[2] = {NULL, NULL};
                expect_ok(&pt, col_comm_send_async(c, x, n, dt, next, 3, &q[0], &e), &e, "send");
                expect_ok(&pt, col_comm_recv_async(c, y, n, dt, prev, 3, &q[1], &e), &e, "recv");
                expect_ok(&pt, col_comm_wait_all(q, 2, &e), &e, "wait send and recv");
                expect_delta(&pt, c, &s, b, b, 2, what);
            }
            free(x), free(y);
        }
    expect_ok(&ba, col_comm_barrier(c, &e), &e, "barrier");
    expect_delta(&ba, c, &s, 0, 0, 1, "barrier");
    check(ar.ok, ar.detail, "%s: all-reduce counts floor(2(P-1)/P * bytes) sent and received", label);
    check(rs.ok, rs.detail, "%s: reduce-scatter counts (P-1) * block bytes sent and received", label);
    check(ag.ok, ag.detail, "%s: all-gather counts (P-1) * block bytes sent and received", label);
    check(aa.ok, aa.detail, "%s: all-to-all counts (P-1) * block bytes sent and received", label);
    check(bc.ok, bc.detail, "%s: broadcast from every root counts the chain (bytes sent but by its last rank, "
                            "received but by the root)", label);
    /* every rank makes every check (they are collective over the world), also where its communicator has
       no peer to send to (a rank alone, half of 3 ranks split by parity) */
    check(pt.ok, pt.detail, "%s: send and recv count their bytes exactly, one op each", label);
    check(ba.ok, ba.detail, "%s: a barrier is an op of 0 bytes", label);
}

/* an asynchronous operation counts once waited for, not when test sees it done */
static void test_async(col_comm *c)
{
    res r = {true, ""};
    col_err e = {0};
    col_comm_stats s;
    col_comm_get_stats(c, &s);
    float x[64] = {0}, y[64];
    col_comm_req *q = NULL;
    expect_ok(&r, col_comm_all_reduce_async(c, x, y, 64, COL_F32, COL_RED_SUM, &q, &e), &e, "all-reduce async");
    bool done = false;
    for (int i = 0; r.ok && !done; i++) {
        expect_ok(&r, col_comm_test(q, &done, &e), &e, "test");
        if (!done) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    expect_delta(&r, c, &s, 0, 0, 0, "done by col_comm_test, not yet waited for");
    expect_ok(&r, col_comm_wait(q, &e), &e, "wait");
    uint64_t p = (uint64_t)g_size, want = 2 * (p - 1) * 256 / p;
    expect_delta(&r, c, &s, want, want, 1, "after col_comm_wait");
    check(r.ok, r.detail, "an async all-reduce counts when col_comm_wait ends it, not when col_comm_test sees it done");
}

/* calls refused before they start add nothing */
static void test_refused(col_comm *c)
{
    res r = {true, ""};
    col_err e = {0};
    col_comm_stats s;
    col_comm_get_stats(c, &s);
    float x[4] = {0};
    if (col_comm_send(c, x, 4, COL_F32, g_size, 0, &e) != COL_EINVAL)
        fail(&r, "a send to rank %d was not refused", g_size);
    if (col_comm_all_reduce(c, x, x + 1, 3, COL_F32, COL_RED_SUM, &e) != COL_EINVAL)
        fail(&r, "an all-reduce of overlapping buffers was not refused");
    if (col_comm_all_reduce(c, x, x, 4, COL_I32, COL_RED_AVG, &e) != COL_EDTYPE)
        fail(&r, "an integer average was not refused");
    expect_delta(&r, c, &s, 0, 0, 0, "refused calls");
    col_comm_stats z;
    col_comm_get_stats(NULL, &z);
    if (z.bytes_sent || z.bytes_recv || z.ops || z.wait_s != 0)
        fail(&r, "the counters of no communicator are not zero");
    check(r.ok, r.detail, "calls refused before they start count nothing; a NULL communicator's counters are zero");
}

/* split communicators count their own; the sum of several */
static void test_split(col_comm *c)
{
    res r = {true, ""};
    col_err e = {0};
    col_comm *sub = NULL;
    expect_ok(&r, col_comm_split(c, g_rank % 2, g_rank, &sub, &e), &e, "split");
    if (!r.ok) {
        check(false, r.detail, "split communicators count apart from their parent");
        return;
    }
    col_comm_stats parent0, sub0, sum;
    col_comm_get_stats(c, &parent0);
    col_comm_get_stats(sub, &sub0);
    if (sub0.bytes_sent || sub0.bytes_recv || sub0.ops || sub0.wait_s != 0)
        fail(&r, "a new split communicator's counters are not zero (ops %llu)", (unsigned long long)sub0.ops);
    uint64_t sp = (uint64_t)col_comm_size(sub);
    int64_t v[100] = {0}, w[100];
    expect_ok(&r, col_comm_all_reduce(sub, v, w, 100, COL_I64, COL_RED_SUM, &e), &e, "all-reduce on the split");
    expect_delta(&r, sub, &sub0, 2 * (sp - 1) * 800 / sp, 2 * (sp - 1) * 800 / sp, 1, "all-reduce on the split");
    expect_delta(&r, c, &parent0, 0, 0, 0, "the parent, after an all-reduce on its split");
    sum = parent0;
    col_comm_stats_add(&sum, &sub0);
    if (sum.bytes_sent != parent0.bytes_sent + sub0.bytes_sent || sum.bytes_recv != parent0.bytes_recv + sub0.bytes_recv
        || sum.ops != parent0.ops + sub0.ops || sum.wait_s != parent0.wait_s + sub0.wait_s)
        fail(&r, "col_comm_stats_add: not the field-by-field sum");
    col_comm_free(sub);
    check(r.ok, r.detail, "a split communicator starts at zero and counts its own operations (its parent's do not "
                          "change); col_comm_stats_add sums them");
}

/* wait_s: the time blocked for a late rank (at least its delay, at most the call's wall time) */
static void test_wait_time(col_comm *c)
{
    if (g_size < 2) {
        if (g_rank == 0)
            tl_skip_check("waiting for a late rank", "a run of one process");
        return;
    }
    res r = {true, ""};
    col_err e = {0};
    col_comm_stats s0, s1;
    MPI_Barrier(MPI_COMM_WORLD);
    col_comm_get_stats(c, &s0);
    double t0 = MPI_Wtime();
    if (g_rank == 1) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    expect_ok(&r, col_comm_barrier(c, &e), &e, "barrier");
    double wall = MPI_Wtime() - t0;
    col_comm_get_stats(c, &s1);
    double waited = s1.wait_s - s0.wait_s;
    /* rank 0 reached the barrier at t0 (within the MPI barrier's skew); rank 1 joined 0.3 s later */
    if (g_rank != 1 && waited < 0.2)
        fail(&r, "waited %.3f s for a rank 0.3 s late", waited);
    if (waited > wall + 1e-3)
        fail(&r, "waited %.3f s within a call of %.3f s", waited, wall);
    check(r.ok, r.detail, "wait_s: the others count at least 0.2 s blocked for rank 1, late by 0.3 s; no rank more "
                          "than the call's wall time");
}

/* a wait that fails: its time counts, no bytes and no op */
static void test_failed_wait(col_comm *c)
{
    if (g_size < 2) {
        if (g_rank == 0)
            tl_skip_check("a failed wait", "a run of one process");
        return;
    }
    res r = {true, ""};
    col_err e = {0};
    col_comm *t = NULL;
    expect_ok(&r, col_comm_split(c, 0, g_rank, &t, &e), &e, "split");
    if (r.ok && g_rank == 0) {
        col_comm_set_timeout(t, 0.3, &e);
        col_comm_stats s;
        col_comm_get_stats(t, &s);
        double before = s.wait_s;
        float buf[5];
        if (col_comm_recv(t, buf, 5, COL_F32, 1, 9, &e) != COL_EIO)
            fail(&r, "a recv that nobody sends did not time out (%s)", e.msg);
        col_comm_stats now;
        col_comm_get_stats(t, &now);
        expect_delta(&r, t, &s, 0, 0, 0, "a timed-out recv");
        if (now.wait_s - before < 0.3)
            fail(&r, "the timed-out recv counted %.3f s of waiting; its bound is 0.3 s", now.wait_s - before);
    }
    col_comm_free(t);
    check(r.ok, r.detail, "a recv that times out counts its wait (at least the 0.3 s bound) but no bytes or op");
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    col_comm *c = NULL;
    col_err e = {0};
    if (col_comm_init_mpi(&c, &e) != COL_OK) {
        printf("Bail out! rank %d: %s\n", g_rank, e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    col_comm_stats s0;
    col_comm_get_stats(c, &s0);
    check(s0.bytes_sent == 0 && s0.bytes_recv == 0 && s0.ops == 0 && s0.wait_s == 0, "counters not zero",
          "a new communicator's counters are zero");
    test_collectives(c, "world");
    /* the formulas again on communicators of other sizes: halves by parity, and one rank alone */
    col_comm *half = NULL, *alone = NULL;
    if (col_comm_split(c, g_rank % 2, g_rank, &half, &e) != COL_OK ||
        col_comm_split(c, g_rank, 0, &alone, &e) != COL_OK) {
        printf("Bail out! rank %d: split: %s\n", g_rank, e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    test_collectives(half, "split by parity");
    test_collectives(alone, "one rank alone (all 0 bytes)");
    col_comm_free(half);
    col_comm_free(alone);
    test_async(c);
    test_refused(c);
    test_split(c);
    test_wait_time(c);
    test_failed_wait(c);
    col_comm_free(c);
    MPI_Finalize();
    if (g_rank == 0)
        return tl_done();
    return g_failed ? 1 : 0;
}
