/* test_comm.c - the collectives of libcore/comm over MPI, run under mpirun
 * with several processes (tests/test_comm.sh: 2, 3 and 4).
 *
 * Every rank's input is a deterministic function of (rank, element, salt),
 * so each rank computes locally what every operation must give and checks
 * its own results; the checks are combined over the ranks with plain MPI
 * (not the library under test) and rank 0 alone prints the TAP lines, with
 * the failing ranks' details. Exact results are compared bit for bit
 * (movement, max/min, integer sums, rank-ordered sums); the transport's own
 * floating-point sums within a bound of the dtype's precision.
 *
 * test_comm --kill R --timeout S [--log DIR] runs a loop of all-reduces in
 * which rank R kills itself (SIGKILL) at iteration 20: every other rank
 * prints one line "test_comm rank N: ..." saying why it stops (the library's
 * message, or the signal the launcher sent), also into DIR/rank-N.log, and
 * exits non-zero; test_comm.sh checks them.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "comm.h"
#include "comm_mpi.h"
#include "testlib.h"

static int g_rank, g_size, g_failed;

/* one TAP line for a check every rank made: ok when every rank's ok; the
 * details of the ranks that failed go to rank 0 as comments */
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

/* the first failure of a check over many cases */
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

/* ---- inputs ---- */

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 0x165667B1u) * 0xC2B2AE3Du;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    h *= 0x297A2D39u;
    h ^= h >> 15;
    return h;
}

static void put(col_dtype dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case COL_F32: ((float *)buf)[i] = (float)v; break;
    case COL_BF16: ((uint16_t *)buf)[i] = col_f32_to_bf16((float)v); break;
    case COL_F16: ((uint16_t *)buf)[i] = col_f32_to_f16((float)v); break;
    case COL_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(col_dtype dt, const void *buf, size_t i)
{
    switch (dt) {
    case COL_F32: return ((const float *)buf)[i];
    case COL_BF16: return col_bf16_to_f32(((const uint16_t *)buf)[i]);
    case COL_F16: return col_f16_to_f32(((const uint16_t *)buf)[i]);
    case COL_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* element e of rank's input, as the dtype holds it: floats of mixed signs and
 * magnitudes (so the order of a sum shows in its bits), integers past 32 bits for i64 */
static double input(col_dtype dt, int rank, size_t e, uint32_t salt)
{
    uint32_t h = mix((uint32_t)rank, (uint32_t)e, salt);
    double v;
    if (dt == COL_I32)
        v = (double)((int)(h % 2001) - 1000);
    else if (dt == COL_I64)
        v = (double)((int)(h % 2001) - 1000) * 4294967296.0 + (double)(h % 7);
    else
        v = ldexp(((double)(h >> 8) / 16777216.0) * 2 - 1, (int)(h & 7) - 3);
    uint64_t tmp;
    put(dt, &tmp, 0, v);
    return get(dt, &tmp, 0);
}

static void *fill(col_dtype dt, size_t n, int rank, uint32_t salt)
{
    void *p = malloc((n ? n : 1) * col_dtype_size(dt));
    for (size_t i = 0; i < n; i++)
        put(dt, p, i, input(dt, rank, i, salt));
    return p;
}

static const col_dtype dtypes[] = {COL_F32, COL_BF16, COL_F16, COL_I32, COL_I64};
enum { NDT = 5 };

/* ---- reductions against the locally computed reference ---- */

/* checks got[k], k < count, = op over ranks of their input element base + k */
static void expect_reduced(res *r, const char *what, size_t count, col_dtype dt, col_red_op op, bool ranked,
                           size_t base, uint32_t salt, const void *got)
{
    int n = g_size;
    double tol = dt == COL_F32 ? 1e-6 : dt == COL_BF16 ? 1.0 / 128 : 1.0 / 1024;
    for (size_t k = 0; k < count && r->ok; k++) {
        size_t e = base + k;
        uint64_t want = 0;
        bool exact = true;
        double refd = 0, sumabs = 0;
        if (!col_dtype_is_float(dt)) {
            int64_t a = (int64_t)input(dt, 0, e, salt);
            for (int j = 1; j < n; j++) {
                int64_t b = (int64_t)input(dt, j, e, salt);
                a = op == COL_RED_MAX ? (b > a ? b : a) : op == COL_RED_MIN ? (b < a ? b : a) : a + b;
            }
            put(dt, &want, 0, (double)a);
        } else if (op == COL_RED_MAX || op == COL_RED_MIN) {
            double a = input(dt, 0, e, salt);
            for (int j = 1; j < n; j++) {
                double b = input(dt, j, e, salt);
                a = op == COL_RED_MAX ? fmax(a, b) : fmin(a, b);
            }
            put(dt, &want, 0, a);
        } else if (ranked) {
            /* what one process gets adding the ranks' contributions in rank order, in f32 */
            float acc = (float)input(dt, 0, e, salt);
            for (int j = 1; j < n; j++)
                acc = acc + (float)input(dt, j, e, salt);
            if (op == COL_RED_AVG)
                acc = acc / (float)n;
            put(dt, &want, 0, acc);
        } else {
            exact = false;
            for (int j = 0; j < n; j++) {
                double v = input(dt, j, e, salt);
                refd += v;
                sumabs += fabs(v);
            }
            if (op == COL_RED_AVG) {
                refd /= n;
                sumabs /= n;
            }
        }
        size_t es = col_dtype_size(dt);
        const char *g = (const char *)got + k * es;
        if (exact && memcmp(g, &want, es) != 0)
            fail(r, "%s: count %zu element %zu: got %.9g, want %.9g (bitwise)", what, count, k, get(dt, g, 0),
                 get(dt, &want, 0));
        if (!exact && !(fabs(get(dt, g, 0) - refd) <= tol * (fabs(refd) + sumabs)))
            fail(r, "%s: count %zu element %zu: got %.9g, want %.9g", what, count, k, get(dt, g, 0), refd);
    }
}

static const size_t ar_sizes[] = {0, 1, 7, 1001, 65537};
static const size_t blk_sizes[] = {0, 1, 7, 333};

static void test_all_reduce(col_comm *c, col_dtype dt, col_red_op op, bool ranked, bool in_place)
{
    res r = {true, ""};
    col_comm_set_order(c, ranked ? COL_ORDER_RANK : COL_ORDER_TRANSPORT);
    for (size_t si = 0; si < sizeof ar_sizes / sizeof *ar_sizes; si++) {
        size_t n = ar_sizes[si];
        uint32_t salt = 100 + (uint32_t)si + 10u * (uint32_t)op;
        void *x = fill(dt, n, g_rank, salt);
        void *y = in_place ? x : malloc((n ? n : 1) * col_dtype_size(dt));
        col_err e = {0};
        /* count 0 goes with NULL buffers: nothing is read or written */
        col_status st = col_comm_all_reduce(c, n ? x : NULL, n ? y : NULL, n, dt, op, &e);
        expect_ok(&r, st, &e, "all-reduce");
        if (st == COL_OK)
            expect_reduced(&r, "all-reduce", n, dt, op, ranked, 0, salt, y);
        if (!in_place)
            free(y);
        free(x);
    }
    col_comm_set_order(c, COL_ORDER_TRANSPORT);
    check(r.ok, r.detail, "all-reduce %s %s%s%s: sizes 0, 1, 7, 1001, 65537 on %d ranks", col_red_op_name(op),
          col_dtype_name(dt), ranked ? ", rank order (bitwise)" : "", in_place ? ", in place" : "", g_size);
}

static void test_reduce_scatter(col_comm *c, col_dtype dt, col_red_op op, bool ranked, bool in_place)
{
    res r = {true, ""};
    size_t es = col_dtype_size(dt);
    col_comm_set_order(c, ranked ? COL_ORDER_RANK : COL_ORDER_TRANSPORT);
    for (size_t si = 0; si < sizeof blk_sizes / sizeof *blk_sizes; si++) {
        size_t n = blk_sizes[si], total = n * (size_t)g_size;
        uint32_t salt = 200 + (uint32_t)si + 10u * (uint32_t)op;
        char *x = fill(dt, total, g_rank, salt);
        void *y = in_place ? x + (size_t)g_rank * n * es : malloc((n ? n : 1) * es);
        col_err e = {0};
        col_status st = col_comm_reduce_scatter(c, x, y, n, dt, op, &e);
        expect_ok(&r, st, &e, "reduce-scatter");
        if (st == COL_OK)
            expect_reduced(&r, "reduce-scatter", n, dt, op, ranked, (size_t)g_rank * n, salt, y);
        if (!in_place)
            free(y);
        free(x);
    }
    col_comm_set_order(c, COL_ORDER_TRANSPORT);
    check(r.ok, r.detail, "reduce-scatter %s %s%s%s: 0, 1, 7, 333 per rank on %d ranks", col_red_op_name(op),
          col_dtype_name(dt), ranked ? ", rank order (bitwise)" : "", in_place ? ", in place" : "", g_size);
}

/* got (count elements) = element base+k of rank src's input, bitwise */
static void expect_input(res *r, const char *what, const void *got, size_t count, col_dtype dt, int src, size_t base,
                         uint32_t salt)
{
    size_t es = col_dtype_size(dt);
    for (size_t k = 0; k < count && r->ok; k++) {
        uint64_t want = 0;
        put(dt, &want, 0, input(dt, src, base + k, salt));
        if (memcmp((const char *)got + k * es, &want, es) != 0)
            fail(r, "%s: count %zu, rank %d's element %zu: got %.9g, want %.9g", what, count, src, base + k,
                 get(dt, (const char *)got + k * es, 0), get(dt, &want, 0));
    }
}

static void test_all_gather(col_comm *c, col_dtype dt, bool in_place)
{
    res r = {true, ""};
    size_t es = col_dtype_size(dt);
    for (size_t si = 0; si < sizeof blk_sizes / sizeof *blk_sizes; si++) {
        size_t n = blk_sizes[si];
        uint32_t salt = 300 + (uint32_t)si;
        char *y = malloc((n ? n : 1) * (size_t)g_size * es);
        void *x = fill(dt, n, g_rank, salt);
        void *src = x;
        if (in_place) {
            memcpy(y + (size_t)g_rank * n * es, x, n * es);
            src = y + (size_t)g_rank * n * es;
        }
        col_err e = {0};
        col_status st = col_comm_all_gather(c, src, y, n, dt, &e);
        expect_ok(&r, st, &e, "all-gather");
        for (int j = 0; j < g_size && st == COL_OK; j++)
            expect_input(&r, "all-gather", y + (size_t)j * n * es, n, dt, j, 0, salt);
        free(x);
        free(y);
    }
    check(r.ok, r.detail, "all-gather %s%s: 0, 1, 7, 333 per rank on %d ranks", col_dtype_name(dt),
          in_place ? ", in place" : "", g_size);
}

static void test_broadcast(col_comm *c, col_dtype dt)
{
    res r = {true, ""};
    for (int root = 0; root < g_size; root++) {
        for (size_t si = 0; si < 4; si++) {
            size_t n = ar_sizes[si];
            uint32_t salt = 400 + (uint32_t)si;
            /* the others start from different values, which must be overwritten */
            void *x = fill(dt, n, g_rank, g_rank == root ? salt : salt + 77);
            col_err e = {0};
            col_status st = col_comm_broadcast(c, x, n, dt, root, &e);
            expect_ok(&r, st, &e, "broadcast");
            if (st == COL_OK)
                expect_input(&r, "broadcast", x, n, dt, root, 0, salt);
            free(x);
        }
    }
    check(r.ok, r.detail, "broadcast %s from each root: 0, 1, 7, 1001 elements on %d ranks", col_dtype_name(dt), g_size);
}

static void test_all_to_all(col_comm *c, col_dtype dt)
{
    res r = {true, ""};
    size_t es = col_dtype_size(dt);
    for (size_t si = 0; si < sizeof blk_sizes / sizeof *blk_sizes; si++) {
        size_t n = blk_sizes[si];
        uint32_t salt = 500 + (uint32_t)si;
        void *x = fill(dt, n * (size_t)g_size, g_rank, salt);
        char *y = malloc((n ? n : 1) * (size_t)g_size * es);
        col_err e = {0};
        col_status st = col_comm_all_to_all(c, x, y, n, dt, &e);
        expect_ok(&r, st, &e, "all-to-all");
        /* block j of what this rank got is block `rank` of rank j's input */
        for (int j = 0; j < g_size && st == COL_OK; j++)
            expect_input(&r, "all-to-all", y + (size_t)j * n * es, n, dt, j, (size_t)g_rank * n, salt);
        free(x);
        free(y);
    }
    check(r.ok, r.detail, "all-to-all %s: 0, 1, 7, 333 per pair on %d ranks", col_dtype_name(dt), g_size);
}

static void test_ring(col_comm *c, col_dtype dt)
{
    res r = {true, ""};
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    for (size_t si = 0; si < sizeof ar_sizes / sizeof *ar_sizes; si++) {
        size_t n = ar_sizes[si];
        uint32_t salt = 600 + (uint32_t)si;
        void *x = fill(dt, n, g_rank, salt);
        void *y = malloc((n ? n : 1) * col_dtype_size(dt));
        col_comm_req *rq[2] = {NULL, NULL};
        col_err e = {0};
        col_status st = col_comm_recv_async(c, y, n, dt, prev, 3, &rq[0], &e);
        if (st == COL_OK)
            st = col_comm_send_async(c, x, n, dt, next, 3, &rq[1], &e);
        if (st == COL_OK)
            st = col_comm_wait_all(rq, 2, &e);
        expect_ok(&r, st, &e, "send/recv");
        if (st == COL_OK)
            expect_input(&r, "ring", y, n, dt, prev, 0, salt);
        free(x);
        free(y);
    }
    check(r.ok, r.detail, "send/recv ring %s: 0, 1, 7, 1001, 65537 elements on %d ranks", col_dtype_name(dt), g_size);
}

/* messages match by tag: two sent in one order are received in the other */
static void test_tags(col_comm *c)
{
    res r = {true, ""};
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    void *a = fill(COL_I32, 5, g_rank, 700), *b = fill(COL_I32, 9, g_rank, 701);
    int32_t ga[5], gb[9];
    col_comm_req *s[2] = {NULL, NULL};
    col_err e = {0};
    col_status st = col_comm_send_async(c, a, 5, COL_I32, next, 1, &s[0], &e);
    if (st == COL_OK)
        st = col_comm_send_async(c, b, 9, COL_I32, next, 2, &s[1], &e);
    if (st == COL_OK)
        st = col_comm_recv(c, gb, 9, COL_I32, prev, 2, &e);
    if (st == COL_OK)
        st = col_comm_recv(c, ga, 5, COL_I32, prev, 1, &e);
    col_status sw = col_comm_wait_all(s, 2, &e);
    expect_ok(&r, st != COL_OK ? st : sw, &e, "tags");
    expect_input(&r, "tag 1", ga, 5, COL_I32, prev, 0, 700);
    expect_input(&r, "tag 2", gb, 9, COL_I32, prev, 0, 701);
    free(a);
    free(b);
    check(r.ok, r.detail, "send/recv: two messages sent with tags 1, 2 are received as 2, 1");
}

/* ---- communicators ---- */

static void test_identity(col_comm *c)
{
    MPI_Comm shm;
    int lr = -1, ls = -1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &shm);
    MPI_Comm_rank(shm, &lr);
    MPI_Comm_size(shm, &ls);
    MPI_Comm_free(&shm);
    bool ok = col_comm_rank(c) == g_rank && col_comm_size(c) == g_size && col_comm_world_rank(c, g_rank) == g_rank &&
              col_comm_world_rank(c, g_size) == -1 && strcmp(col_comm_transport_name(c), "mpi") == 0;
    char d[200];
    snprintf(d, sizeof d, "rank %d size %d world %d transport %s", col_comm_rank(c), col_comm_size(c),
             col_comm_world_rank(c, g_rank), col_comm_transport_name(c));
    check(ok, d, "the world communicator: rank, size, world ranks as MPI_COMM_WORLD's, transport mpi");
    ok = col_comm_local_rank(c) == lr && col_comm_local_size(c) == ls && col_comm_device(c, 2) == lr % 2 &&
         col_comm_device(c, 0) == 0;
    snprintf(d, sizeof d, "local rank %d of %d, MPI's shared-memory split says %d of %d", col_comm_local_rank(c),
             col_comm_local_size(c), lr, ls);
    check(ok, d, "local rank and size as MPI_Comm_split_type(SHARED); device = local rank mod devices");
}

/* an i64 all-reduce (sum of world rank + 1) over sub: what its members make */
static int64_t member_sum(col_comm *sub, col_err *e, col_status *st)
{
    int64_t v = g_rank + 1, s = 0;
    *st = col_comm_all_reduce(sub, &v, &s, 1, COL_I64, COL_RED_SUM, e);
    return s;
}

static void test_split(col_comm *c)
{
    col_err e = {0};
    res r = {true, ""};
    /* by parity, ordered by descending rank */
    col_comm *sub = NULL;
    col_status st = col_comm_split(c, g_rank % 2, -g_rank, &sub, &e);
    expect_ok(&r, st, &e, "split");
    int members = 0, above = 0;
    int64_t want = 0;
    for (int q = 0; q < g_size; q++)
        if (q % 2 == g_rank % 2) {
            members++;
            above += q > g_rank;
            want += q + 1;
        }
    if (r.ok && (col_comm_size(sub) != members || col_comm_rank(sub) != above))
        fail(&r, "rank %d of %d, want %d of %d", col_comm_rank(sub), col_comm_size(sub), above, members);
    for (int w = g_size - 1, q = 0; r.ok && w >= 0; w--) /* sub rank q: the q-th of the group from the top */
        if (w % 2 == g_rank % 2 && col_comm_world_rank(sub, q++) != w)
            fail(&r, "sub rank %d is world rank %d, want %d", q - 1, col_comm_world_rank(sub, q - 1), w);
    if (r.ok) {
        int64_t s = member_sum(sub, &e, &st);
        expect_ok(&r, st, &e, "all-reduce on the split");
        if (r.ok && s != want)
            fail(&r, "sum %lld, want %lld", (long long)s, (long long)want);
    }
    col_comm_free(sub);
    check(r.ok, r.detail, "split by parity, keys reversing the order: sizes, ranks, world ranks, an all-reduce");

    /* a grid of D data-parallel by P pipeline groups, rank = d*P + p */
    r = (res){true, ""};
    int P = g_size % 2 == 0 ? 2 : g_size, D = g_size / P, d = g_rank / P, p = g_rank % P;
    col_comm *pp = NULL, *dp = NULL;
    st = col_comm_split(c, d, p, &pp, &e);
    expect_ok(&r, st, &e, "split pipeline");
    if (st == COL_OK) {
        st = col_comm_split(c, p, d, &dp, &e);
        expect_ok(&r, st, &e, "split data-parallel");
    }
    if (r.ok && (col_comm_size(pp) != P || col_comm_rank(pp) != p || col_comm_size(dp) != D || col_comm_rank(dp) != d))
        fail(&r, "pipeline group rank %d of %d, data-parallel rank %d of %d; want %d of %d, %d of %d",
             col_comm_rank(pp), col_comm_size(pp), col_comm_rank(dp), col_comm_size(dp), p, P, d, D);
    if (r.ok) {
        int32_t me = g_rank, all[8] = {0};
        st = col_comm_all_gather(dp, &me, all, 1, COL_I32, &e);
        expect_ok(&r, st, &e, "all-gather over the data-parallel group");
        for (int q = 0; r.ok && q < D; q++)
            if (all[q] != q * P + p)
                fail(&r, "data-parallel group of stage %d: member %d is rank %d, want %d", p, q, all[q], q * P + p);
    }
    if (r.ok) {
        int64_t s = member_sum(pp, &e, &st), w = 0;
        for (int q = 0; q < P; q++)
            w += d * P + q + 1;
        expect_ok(&r, st, &e, "all-reduce over the pipeline group");
        if (r.ok && s != w)
            fail(&r, "pipeline group %d: sum %lld, want %lld", d, (long long)s, (long long)w);
    }
    col_comm_free(pp);
    col_comm_free(dp);
    check(r.ok, r.detail, "a %d x %d grid: data-parallel and pipeline groups with the right members", D, P);

    /* color < 0: rank 0 joins none */
    r = (res){true, ""};
    st = col_comm_split(c, g_rank == 0 ? -1 : 5, g_rank, &sub, &e);
    expect_ok(&r, st, &e, "split without rank 0");
    if (r.ok && g_rank == 0 && sub)
        fail(&r, "rank 0 got a communicator");
    if (r.ok && g_rank > 0) {
        if (!sub || col_comm_size(sub) != g_size - 1 || col_comm_rank(sub) != g_rank - 1)
            fail(&r, "rank %d of %d, want %d of %d", col_comm_rank(sub), col_comm_size(sub), g_rank - 1, g_size - 1);
        int64_t s = r.ok ? member_sum(sub, &e, &st) : 0;
        int64_t w = (int64_t)g_size * (g_size + 1) / 2 - 1;
        if (r.ok)
            expect_ok(&r, st, &e, "all-reduce without rank 0");
        if (r.ok && s != w)
            fail(&r, "sum %lld, want %lld", (long long)s, (long long)w);
    }
    col_comm_free(sub);
    check(r.ok, r.detail, "split with color < 0: that rank gets no communicator, the others one without it");

    /* a communicator of the program's own MPI communicator */
    r = (res){true, ""};
    col_comm *own = NULL;
    st = col_comm_from_mpi(MPI_COMM_WORLD, &own, &e);
    expect_ok(&r, st, &e, "from MPI_COMM_WORLD");
    if (r.ok) {
        int64_t s = member_sum(own, &e, &st);
        expect_ok(&r, st, &e, "all-reduce");
        if (r.ok && s != (int64_t)g_size * (g_size + 1) / 2)
            fail(&r, "sum %lld", (long long)s);
        if (r.ok && col_comm_mpi_handle(own) == MPI_COMM_WORLD)
            fail(&r, "the communicator is MPI_COMM_WORLD itself, not a duplicate");
    }
    col_comm_free(own);
    check(r.ok, r.detail, "col_comm_from_mpi: a duplicate of the program's communicator that works");
}

/* ---- asynchronous operations ---- */

/* a request moved by col_comm_test from a compute loop completes there, with the right result */
static void test_overlap(col_comm *c, bool ranked)
{
    res r = {true, ""};
    size_t n = 1 << 18;
    uint32_t salt = 800 + ranked;
    col_comm_set_order(c, ranked ? COL_ORDER_RANK : COL_ORDER_TRANSPORT);
    float *x = fill(COL_F32, n, g_rank, salt), *y = malloc(n * sizeof *y);
    double *work = calloc(256, sizeof *work);
    col_comm_req *q = NULL;
    col_err e = {0};
    col_status st = col_comm_all_reduce_async(c, x, y, n, COL_F32, COL_RED_SUM, &q, &e);
    expect_ok(&r, st, &e, "start");
    bool done = false;
    long polls = 0;
    /* the compute: each pass adds 1 to every element of work; polls are bounded (tens of seconds) so a
       request that never completes in test fails the check instead of spinning. A rank-ordered all-reduce's
       second collective starts in col_comm_wait only (comm.h): test moves its first half along for a while
       and must never report it done */
    long most = ranked ? 200000 : 20000000;
    while (st == COL_OK && !done && polls < most) {
        for (int i = 0; i < 256; i++)
            work[i] += 1.0;
        polls++;
        st = col_comm_test(q, &done, &e);
    }
    expect_ok(&r, st, &e, "test");
    if (r.ok && !ranked && !done)
        fail(&r, "not complete after %ld polls", polls);
    if (r.ok && ranked && done)
        fail(&r, "reported done by col_comm_test after %ld polls, before its second collective could start", polls);
    if (r.ok && work[255] != (double)polls)
        fail(&r, "the compute between polls went wrong: %g after %ld passes", work[255], polls);
    st = col_comm_wait(q, &e);
    expect_ok(&r, st, &e, "wait");
    if (r.ok)
        expect_reduced(&r, "overlapped all-reduce", n, COL_F32, COL_RED_SUM, ranked, 0, salt, y);
    expect_input(&r, "the input after the all-reduce", x, n, COL_F32, g_rank, 0, salt);
    col_comm_set_order(c, COL_ORDER_TRANSPORT);
    free(x);
    free(y);
    free(work);
    check(r.ok, r.detail, "asynchronous all-reduce of %zu f32%s", n,
          ranked ? " in rank order: its first half moves under col_comm_test, its second (started in col_comm_wait "
                   "only, at the same point on every rank) ends in the wait" : " completes under col_comm_test from a compute loop");
}

/* three requests out at once, waited for in the reverse order */
static void test_outstanding(col_comm *c)
{
    res r = {true, ""};
    size_t n = 1003;
    float *a = fill(COL_F32, n, g_rank, 900), *ra = malloc(n * sizeof *ra);
    void *b = fill(COL_BF16, n, g_rank, 901);
    uint16_t *rb = malloc(n * (size_t)g_size * sizeof *rb);
    void *cbuf = fill(COL_I64, n, g_rank, g_rank == g_size - 1 ? 902 : 903);
    col_comm_req *q[3] = {NULL, NULL, NULL};
    col_err e = {0};
    col_status st = col_comm_all_reduce_async(c, a, ra, n, COL_F32, COL_RED_MAX, &q[0], &e);
    if (st == COL_OK)
        st = col_comm_all_gather_async(c, b, rb, n, COL_BF16, &q[1], &e);
    if (st == COL_OK)
        st = col_comm_broadcast_async(c, cbuf, n, COL_I64, g_size - 1, &q[2], &e);
    expect_ok(&r, st, &e, "start");
    for (int i = 2; i >= 0; i--) {
        col_err we = {0};
        col_status sw = col_comm_wait(q[i], &we);
        expect_ok(&r, sw, &we, "wait");
    }
    expect_reduced(&r, "max", n, COL_F32, COL_RED_MAX, false, 0, 900, ra);
    for (int j = 0; j < g_size; j++)
        expect_input(&r, "all-gather", rb + (size_t)j * n, n, COL_BF16, j, 0, 901);
    expect_input(&r, "broadcast", cbuf, n, COL_I64, g_size - 1, 0, 902);
    free(a);
    free(ra);
    free(b);
    free(rb);
    free(cbuf);
    check(r.ok, r.detail, "three requests out at once (all-reduce, all-gather, broadcast), waited for in reverse");
}

/* ---- errors ---- */

static bool msg_has(const col_err *e, const char *s) { return strstr(e->msg, s) != NULL; }

static void test_bad_arguments(col_comm *c)
{
    res r = {true, ""};
    float x[8] = {0}, y[8];
    int32_t xi[4] = {0};
    col_err e = {0};
    col_status st = col_comm_broadcast(c, x, 8, COL_F32, g_size, &e);
    if (st != COL_EINVAL || !msg_has(&e, "is not in this communicator"))
        fail(&r, "root out of range: %s (%s)", col_status_name(st), e.msg);
    st = col_comm_all_reduce(c, xi, xi, 4, COL_I32, COL_RED_AVG, &e);
    if (st != COL_EDTYPE || !msg_has(&e, "avg of i32"))
        fail(&r, "avg of i32: %s (%s)", col_status_name(st), e.msg);
    st = col_comm_all_reduce(c, x, x + 1, 4, COL_F32, COL_RED_SUM, &e);
    if (st != COL_EINVAL || !msg_has(&e, "overlap"))
        fail(&r, "overlapping buffers: %s (%s)", col_status_name(st), e.msg);
    st = col_comm_send(c, x, 1, COL_F32, 0, 40000, &e);
    if (st != COL_EINVAL || !msg_has(&e, "tag 40000"))
        fail(&r, "tag 40000: %s (%s)", col_status_name(st), e.msg);
    st = col_comm_all_gather(c, x, NULL, 2, COL_F32, &e);
    if (st != COL_EINVAL || !msg_has(&e, "NULL"))
        fail(&r, "NULL recv: %s (%s)", col_status_name(st), e.msg);
    st = col_comm_set_timeout(c, 0, &e);
    if (st != COL_EINVAL || col_comm_timeout(c) != COL_COMM_DEFAULT_TIMEOUT_S)
        fail(&r, "timeout 0: %s, timeout now %g", col_status_name(st), col_comm_timeout(c));
    if (col_comm_broken(c, NULL))
        fail(&r, "a refused call broke the communicator");
    /* nothing was started: the ranks are still in step */
    for (int i = 0; i < 8; i++)
        x[i] = (float)(g_rank + i);
    st = col_comm_all_reduce(c, x, y, 8, COL_F32, COL_RED_MIN, &e);
    expect_ok(&r, st, &e, "all-reduce after the refused calls");
    if (r.ok && y[7] != 7.0f)
        fail(&r, "min %g, want 7", y[7]);
    check(r.ok, r.detail, "bad arguments are refused on the calling rank (root, avg of i32, overlap, tag, NULL, "
                          "timeout 0) with a message, leaving the communicator usable");
}

/* a receive whose sender is alive but never sends ends after the bound, naming it */
static void test_timeout_p2p(col_comm *c)
{
    if (g_size < 2) {
        if (g_rank == 0)
            tl_skip_check("a check between two ranks", "a run of one process");
        return;
    }
    res r = {true, ""};
    col_comm *t = NULL;
    col_err e = {0};
    col_status st = col_comm_split(c, 0, g_rank, &t, &e);
    expect_ok(&r, st, &e, "split");
    if (r.ok && g_rank == 0) {
        col_comm_set_timeout(t, 0.5, &e);
        float buf[3];
        st = col_comm_recv(t, buf, 3, COL_F32, 1, 7, &e);
        if (st != COL_EIO || !msg_has(&e, "comm: recv of 3 f32 from rank 1 (tag 7): not complete after waiting 0.") ||
            !msg_has(&e, "is still running"))
            fail(&r, "recv: %s (%s)", col_status_name(st), e.msg);
        col_err why = {0};
        if (r.ok && (!col_comm_broken(t, &why) || strcmp(why.msg, e.msg) != 0))
            fail(&r, "the communicator is not broken with the message (%s)", why.msg);
        float x = 1, y;
        st = col_comm_all_reduce(t, &x, &y, 1, COL_F32, COL_RED_SUM, &e);
        if (r.ok && (st != COL_ESTATE || !msg_has(&e, "unusable after an earlier failure")))
            fail(&r, "an all-reduce after it: %s (%s)", col_status_name(st), e.msg);
        if (r.ok)
            printf("# the message: %s\n", why.msg);
    }
    col_comm_free(t);
    check(r.ok, r.detail, "a recv from a live rank that never sends: COL_EIO after 0.5 s naming rank 1 as still "
                          "running; the communicator is broken after it");
}

/* a collective that one live rank never joins: the others stop after the bound */
static void test_timeout_collective(col_comm *c)
{
    res r = {true, ""};
    col_comm *t = NULL;
    col_err e = {0};
    col_status st = col_comm_split(c, 0, g_rank, &t, &e);
    expect_ok(&r, st, &e, "split");
    if (r.ok && g_rank != g_size - 1) {
        col_comm_set_timeout(t, 0.5, &e);
        float x[4] = {1, 2, 3, 4}, y[4];
        st = col_comm_all_reduce(t, x, y, 4, COL_F32, COL_RED_SUM, &e);
        char want[120];
        snprintf(want, sizeof want, "comm: all-reduce (sum) of 4 f32 on %d ranks: not complete after waiting 0.",
                 g_size);
        if (st != COL_EIO || !msg_has(&e, want) || !msg_has(&e, "every rank on this host is still running"))
            fail(&r, "all-reduce: %s (%s)", col_status_name(st), e.msg);
    }
    col_comm_free(t);
    check(r.ok, r.detail, "an all-reduce that rank %d never joins: COL_EIO after 0.5 s on the others", g_size - 1);
}

/* a message shorter than the receive is an error naming both counts */
static void test_short_message(col_comm *c)
{
    if (g_size < 2) {
        if (g_rank == 0)
            tl_skip_check("a check between two ranks", "a run of one process");
        return;
    }
    res r = {true, ""};
    col_comm *t = NULL;
    col_err e = {0};
    col_status st = col_comm_split(c, 0, g_rank, &t, &e);
    expect_ok(&r, st, &e, "split");
    if (r.ok && g_rank == 0) {
        float x[5] = {0};
        st = col_comm_send(t, x, 5, COL_F32, 1, 4, &e);
        expect_ok(&r, st, &e, "send");
    } else if (r.ok && g_rank == 1) {
        float y[7];
        st = col_comm_recv(t, y, 7, COL_F32, 0, 4, &e);
        if (st != COL_EINVAL || !msg_has(&e, "recv of 7 f32 from rank 0 (tag 4): the message held 5 elements"))
            fail(&r, "recv: %s (%s)", col_status_name(st), e.msg);
    }
    col_comm_free(t);
    check(r.ok, r.detail, "a recv of 7 elements given a message of 5: COL_EINVAL naming both");
}

/* ---- a rank that dies ---- */

static int g_log = -1; /* kill mode: this rank's own record of why it stopped (the launcher may drop output) */

/* line to stdout and to the rank's record */
static void say(const char *line, size_t n)
{
    if (write(STDOUT_FILENO, line, n) < 0 || (g_log >= 0 && write(g_log, line, n) < 0)) {
    }
}

static void on_term(int sig)
{
    char line[160];
    int n = snprintf(line, sizeof line, "test_comm rank %d: stopped by signal %d from the launcher (another rank "
                     "failed)\n", g_rank, sig);
    say(line, (size_t)n);
    _exit(3);
}

static int kill_mode(int victim, double timeout, const char *logdir)
{
    col_comm *c = NULL;
    col_err e = {0};
    /* MPI is not initialised yet: the library does it, and finalises it with the communicator */
    if (col_comm_init_mpi(&c, &e) != COL_OK) {
        printf("test_comm: %s\n", e.msg);
        return 1;
    }
    g_rank = col_comm_rank(c);
    if (logdir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/rank-%d.log", logdir, g_rank);
        g_log = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    signal(SIGTERM, on_term);
    col_comm_set_timeout(c, timeout, &e);
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = (float)(g_rank + i);
    for (int it = 0; it < 2000; it++) {
        if (g_rank == victim && it == 20) {
            printf("test_comm rank %d: killing itself at iteration %d\n", g_rank, it);
            fflush(stdout);
            raise(SIGKILL);
        }
        if (col_comm_all_reduce(c, x, y, 1000, COL_F32, COL_RED_SUM, &e) != COL_OK) {
            char line[COL_ERR_MSG_MAX + 100];
            int n = snprintf(line, sizeof line, "test_comm rank %d: stops at iteration %d: %s\n", g_rank, it, e.msg);
            say(line, (size_t)n);
            return 1; /* no free: the communicator is broken and MPI cannot be finalised */
        }
    }
    printf("test_comm rank %d: all iterations completed\n", g_rank);
    col_comm_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "--kill") == 0 && strcmp(argv[3], "--timeout") == 0)
        return kill_mode(atoi(argv[2]), atof(argv[4]), argc == 7 && strcmp(argv[5], "--log") == 0 ? argv[6] : NULL);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    col_comm *c = NULL;
    col_err e = {0};
    /* MPI is initialised: the library uses it and leaves finalising to this program */
    if (col_comm_init_mpi(&c, &e) != COL_OK) {
        printf("Bail out! rank %d: %s\n", g_rank, e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    test_identity(c);
    static const col_red_op reds[] = {COL_RED_SUM, COL_RED_MAX, COL_RED_MIN, COL_RED_AVG};
    for (int d = 0; d < NDT; d++)
        for (int o = 0; o < 4; o++) {
            if (reds[o] == COL_RED_AVG && !col_dtype_is_float(dtypes[d]))
                continue;
            test_all_reduce(c, dtypes[d], reds[o], false, false);
            test_reduce_scatter(c, dtypes[d], reds[o], false, false);
            if (col_dtype_is_float(dtypes[d]) && (reds[o] == COL_RED_SUM || reds[o] == COL_RED_AVG)) {
                test_all_reduce(c, dtypes[d], reds[o], true, false);
                test_reduce_scatter(c, dtypes[d], reds[o], true, false);
            }
        }
    test_all_reduce(c, COL_F32, COL_RED_SUM, false, true);
    test_all_reduce(c, COL_BF16, COL_RED_AVG, false, true);
    test_all_reduce(c, COL_F16, COL_RED_SUM, true, true);
    test_reduce_scatter(c, COL_F32, COL_RED_AVG, false, true);
    test_reduce_scatter(c, COL_BF16, COL_RED_SUM, false, true);
    test_reduce_scatter(c, COL_F32, COL_RED_SUM, true, true);
    for (int d = 0; d < NDT; d++) {
        test_all_gather(c, dtypes[d], false);
        test_broadcast(c, dtypes[d]);
        test_all_to_all(c, dtypes[d]);
        test_ring(c, dtypes[d]);
    }
    test_all_gather(c, COL_F16, true);
    test_tags(c);
    test_split(c);
    test_overlap(c, false);
    test_overlap(c, true);
    test_outstanding(c);
    test_bad_arguments(c);
    test_short_message(c);
    test_timeout_p2p(c);
    test_timeout_collective(c);
    col_comm_free(c);
    MPI_Finalize();
    if (g_rank == 0)
        return tl_done();
    return g_failed ? 1 : 0;
}
