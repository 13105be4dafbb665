/* test_comm_nccl.c - the NCCL transport (libcore/comm/comm_nccl.h) on GPUs,
 * one per process, on the CUDA backend's stream. Skipped without a GPU; in
 * `make check` it runs as one process (a world of one: NCCL refuses two ranks
 * on one GPU); under mpirun on a machine with several GPUs it runs on all.
 *
 * Inputs are small integers in every dtype, so every reduction is exact and
 * each rank computes what it must get: rank r's element i is v(i) * (r + 1)
 * with v(i) = i % 7 - 3 (sums, max, min), and v(i) on every rank for avg. The
 * input is written by a device memset and a copy queued on the backend's
 * stream right before each operation, so a collective that did not run in
 * order on that stream would read stale data. TAP lines come from rank 0.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "comm.h"
#include "comm_nccl.h"
#include "testlib.h"

static col_comm *g_world;
static int g_rank, g_size;

/* one TAP line for a check every rank made (ok where all are) */
static void check(bool ok, const char *detail, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *detail, const char *fmt, ...)
{
    int32_t mine = ok, all = 0;
    col_err e = {0};
    if (col_comm_all_reduce(g_world, &mine, &all, 1, COL_I32, COL_RED_MIN, &e) != COL_OK)
        all = 0;
    char name[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (!ok)
        printf("# rank %d: %s\n", g_rank, detail);
    if (g_rank == 0)
        TL_OK(all, "%s", name);
}

static double v(size_t i) { return (double)((int)(i % 7) - 3); }

static void put(col_dtype dt, void *buf, size_t i, double x)
{
    switch (dt) {
    case COL_F32: ((float *)buf)[i] = (float)x; break;
    case COL_BF16: ((uint16_t *)buf)[i] = col_f32_to_bf16((float)x); break;
    case COL_F16: ((uint16_t *)buf)[i] = col_f32_to_f16((float)x); break;
    case COL_I32: ((int32_t *)buf)[i] = (int32_t)x; break;
    default: ((int64_t *)buf)[i] = (int64_t)x; break;
    }
}

typedef struct {
    const col_backend *be;
    void *dsend, *drecv; /* device buffers */
    char *hsend, *hrecv, *hwant;
    size_t cap;          /* bytes each */
    char detail[COL_ERR_MSG_MAX + 200];
} bufs;

/* the host input into the device send buffer, queued on the stream after a memset that spoils it */
static col_status upload(bufs *b, size_t bytes, col_err *e)
{
    col_status st = col_cuda_memset(b->be, b->dsend, 0x7f, b->cap, e);
    if (st == COL_OK)
        st = col_cuda_memset(b->be, b->drecv, 0x7f, b->cap, e);
    return st == COL_OK ? col_cuda_to_device(b->be, b->dsend, b->hsend, bytes, e) : st;
}

static bool same(bufs *b, size_t bytes, const char *what, col_err *e)
{
    if (col_cuda_to_host(b->be, b->hrecv, b->drecv, bytes, e) != COL_OK) {
        snprintf(b->detail, sizeof b->detail, "%s: %s", what, e->msg);
        return false;
    }
    if (memcmp(b->hrecv, b->hwant, bytes) != 0) {
        snprintf(b->detail, sizeof b->detail, "%s: the result differs from the expected one", what);
        return false;
    }
    return true;
}

static void test_reductions(col_comm *c, bufs *b, col_dtype dt)
{
    size_t n = 1001, es = col_dtype_size(dt);
    bool ok = true;
    b->detail[0] = '\0';
    for (int o = 0; o < COL_RED_COUNT && ok; o++) {
        col_red_op op = (col_red_op)o;
        if (op == COL_RED_AVG && !col_dtype_is_float(dt))
            continue;
        for (int rs = 0; rs < 2 && ok; rs++) {
            /* all-reduce of n, or reduce-scatter of n per rank */
            size_t total = rs ? n * (size_t)g_size : n;
            for (size_t i = 0; i < total; i++)
                put(dt, b->hsend, i, op == COL_RED_AVG ? v(i) : v(i) * (g_rank + 1));
            for (size_t k = 0; k < n; k++) {
                size_t i = rs ? (size_t)g_rank * n + k : k;
                double w = op == COL_RED_AVG ? v(i)
                           : op == COL_RED_SUM ? v(i) * g_size * (g_size + 1) / 2
                           : op == COL_RED_MAX ? (v(i) >= 0 ? v(i) * g_size : v(i))
                                               : (v(i) >= 0 ? v(i) : v(i) * g_size);
                put(dt, b->hwant, k, w);
            }
            col_err e = {0};
            col_status st = upload(b, total * es, &e);
            if (st == COL_OK)
                st = rs ? col_comm_reduce_scatter(c, b->dsend, b->drecv, n, dt, op, &e)
                        : col_comm_all_reduce(c, b->dsend, b->drecv, n, dt, op, &e);
            if (st != COL_OK) {
                snprintf(b->detail, sizeof b->detail, "%s %s: %s", rs ? "reduce-scatter" : "all-reduce",
                         col_red_op_name(op), e.msg);
                ok = false;
            } else {
                ok = same(b, n * es, rs ? "reduce-scatter" : "all-reduce", &e);
            }
        }
    }
    check(ok, b->detail, "NCCL all-reduce and reduce-scatter %s, sum/max/min%s, on %d ranks", col_dtype_name(dt),
          col_dtype_is_float(dt) ? "/avg" : "", g_size);
}

static void test_movement(col_comm *c, bufs *b, col_dtype dt)
{
    size_t n = 333, es = col_dtype_size(dt), N = n * (size_t)g_size;
    bool ok = true;
    col_err e = {0};
    /* all-gather: block j = rank j's v * (j + 1) */
    for (size_t i = 0; i < n; i++)
        put(dt, b->hsend, i, v(i) * (g_rank + 1));
    for (int j = 0; j < g_size; j++)
        for (size_t i = 0; i < n; i++)
            put(dt, b->hwant, (size_t)j * n + i, v(i) * (j + 1));
    col_status st = upload(b, n * es, &e);
    if (st == COL_OK)
        st = col_comm_all_gather(c, b->dsend, b->drecv, n, dt, &e);
    ok = st == COL_OK ? same(b, N * es, "all-gather", &e) : (snprintf(b->detail, sizeof b->detail, "%s", e.msg), false);
    /* all-to-all: block j of rank r's input holds 100 j + r + v */
    if (ok) {
        for (int j = 0; j < g_size; j++)
            for (size_t i = 0; i < n; i++) {
                put(dt, b->hsend, (size_t)j * n + i, 10 * j + g_rank + v(i));
                put(dt, b->hwant, (size_t)j * n + i, 10 * g_rank + j + v(i));
            }
        st = upload(b, N * es, &e);
        if (st == COL_OK)
            st = col_comm_all_to_all(c, b->dsend, b->drecv, n, dt, &e);
        ok = st == COL_OK ? same(b, N * es, "all-to-all", &e) : (snprintf(b->detail, sizeof b->detail, "%s", e.msg), false);
    }
    /* broadcast from the last rank, into the recv buffer */
    if (ok) {
        for (size_t i = 0; i < n; i++) {
            put(dt, b->hsend, i, v(i) + g_rank);
            put(dt, b->hwant, i, v(i) + g_size - 1);
        }
        st = upload(b, n * es, &e);
        if (st == COL_OK)
            st = col_cuda_copy(b->be, b->drecv, b->dsend, n * es, &e);
        if (st == COL_OK)
            st = col_comm_broadcast(c, b->drecv, n, dt, g_size - 1, &e);
        ok = st == COL_OK ? same(b, n * es, "broadcast", &e) : (snprintf(b->detail, sizeof b->detail, "%s", e.msg), false);
    }
    check(ok, b->detail, "NCCL all-gather, all-to-all, broadcast %s on %d ranks", col_dtype_name(dt), g_size);
}

static void test_rest(col_comm *c, bufs *b)
{
    col_err e = {0};
    /* asynchronous, moved by col_comm_test */
    size_t n = 1 << 20;
    bool ok = n * 4 <= b->cap;
    for (size_t i = 0; ok && i < n; i++) {
        put(COL_F32, b->hsend, i, v(i) * (g_rank + 1));
        put(COL_F32, b->hwant, i, v(i) * g_size * (g_size + 1) / 2);
    }
    col_comm_req *q = NULL;
    col_status st = ok ? upload(b, n * 4, &e) : COL_EINVAL;
    if (st == COL_OK)
        st = col_comm_all_reduce_async(c, b->dsend, b->drecv, n, COL_F32, COL_RED_SUM, &q, &e);
    bool done = false;
    for (long polls = 0; st == COL_OK && !done && polls < 100000000; polls++)
        st = col_comm_test(q, &done, &e);
    col_status sw = q ? col_comm_wait(q, &e) : COL_OK;
    ok = st == COL_OK && sw == COL_OK && done && same(b, n * 4, "async all-reduce", &e);
    check(ok, b->detail[0] ? b->detail : e.msg, "NCCL asynchronous all-reduce of 1M f32 completes under col_comm_test");

    st = col_comm_barrier(c, &e);
    check(st == COL_OK, e.msg, "NCCL barrier");

    /* a split (everyone in one group, reversed) works like the parent */
    col_comm *s = NULL;
    st = col_comm_split(c, 0, -g_rank, &s, &e);
    ok = st == COL_OK && s && col_comm_size(s) == g_size && col_comm_rank(s) == g_size - 1 - g_rank &&
         strcmp(col_comm_transport_name(s), "nccl") == 0;
    if (ok) {
        for (size_t i = 0; i < 7; i++) {
            put(COL_I64, b->hsend, i, (double)(g_rank + 1));
            put(COL_I64, b->hwant, i, (double)g_size * (g_size + 1) / 2);
        }
        st = upload(b, 7 * 8, &e);
        if (st == COL_OK)
            st = col_comm_all_reduce(s, b->dsend, b->drecv, 7, COL_I64, COL_RED_SUM, &e);
        ok = st == COL_OK && same(b, 7 * 8, "all-reduce on the split", &e);
    }
    col_comm_free(s);
    check(ok, e.msg, "NCCL split (ncclCommSplit beside MPI's): ranks and an all-reduce");

    col_comm_set_order(c, COL_ORDER_RANK);
    st = col_comm_all_reduce(c, b->dsend, b->drecv, 7, COL_F32, COL_RED_SUM, &e);
    col_comm_set_order(c, COL_ORDER_TRANSPORT);
    check(st == COL_EUNSUPPORTED && strstr(e.msg, "rank-ordered") && !col_comm_broken(c, NULL), e.msg,
          "NCCL: a rank-ordered sum is refused (COL_EUNSUPPORTED), the communicator stays usable");
}

int main(void)
{
    int ndev = 0;
    col_err why = {0};
    if (!col_cuda_device_count(&ndev, &why) || ndev < 1) {
        printf("1..0 # SKIP no CUDA device (%s)\n", why.msg[0] ? why.msg : "none found");
        return 0;
    }
    col_err e = {0};
    if (col_comm_init_mpi(&g_world, &e) != COL_OK) {
        printf("Bail out! %s\n", e.msg);
        return 1;
    }
    g_rank = col_comm_rank(g_world);
    g_size = col_comm_size(g_world);
    col_backend be;
    int dev = col_comm_device(g_world, ndev);
    if (col_cuda_backend_init(&be, dev, &e) != COL_OK) {
        printf("Bail out! rank %d: CUDA backend on device %d: %s\n", g_rank, dev, e.msg);
        return 1;
    }
    col_comm *c = NULL;
    col_status st = col_comm_init_nccl(g_world, dev, col_cuda_backend_stream(&be), &c, &e);
    check(st == COL_OK, e.msg, "an NCCL communicator of %d ranks on the CUDA backend's stream (device %d)", g_size, dev);
    if (st != COL_OK) {
        col_cuda_backend_free(&be);
        col_comm_free(g_world);
        return g_rank == 0 ? tl_done() : 1;
    }
    bufs b = {.be = &be, .cap = (size_t)8 * 1001 * (size_t)(g_size < 4 ? 4 : g_size) + (4u << 20)};
    b.hsend = malloc(b.cap);
    b.hrecv = malloc(b.cap);
    b.hwant = malloc(b.cap);
    if (col_cuda_alloc(&be, b.cap, &b.dsend, &e) != COL_OK || col_cuda_alloc(&be, b.cap, &b.drecv, &e) != COL_OK) {
        printf("Bail out! %s\n", e.msg);
        return 1;
    }
    static const col_dtype dts[] = {COL_F32, COL_BF16, COL_F16, COL_I32, COL_I64};
    for (int d = 0; d < 5; d++) {
        test_reductions(c, &b, dts[d]);
        test_movement(c, &b, dts[d]);
    }
    test_rest(c, &b);
    col_comm_free(c);
    col_cuda_free(&be, b.dsend);
    col_cuda_free(&be, b.drecv);
    free(b.hsend);
    free(b.hrecv);
    free(b.hwant);
    col_cuda_backend_free(&be);
    col_comm_free(g_world);
    return g_rank == 0 ? tl_done() : 0;
}
