/* test_comm_graph.c - collectives as graph nodes (libcore/comm/comm_graph.h)
 * under mpirun with 1, 2 and 4 processes (tests/test_comm_graph.sh).
 *
 * Every rank fills its input from its rank number (and a run's seed) by a
 * formula, so each rank computes here what every other rank holds and hence
 * what it must receive. Checked on each rank, element by element and exactly
 * (the collectives copy bytes): all-gather along every axis (and a negative
 * one) of a 3-d tensor, of a strided view, in f32, i32, i64 and bf16;
 * all-to-all for every pair of split and concat axes; FastFold's pattern on a
 * pair representation Z [N, N, C] split by rows over the ranks: ordinary ops,
 * then the all-to-all to columns and back, and the all-gather of the rows, in
 * one plan. Every plan runs twice with other inputs. Shapes that do not divide,
 * axes out of range and a missing communicator are refused when the graph is
 * built, with a message; an MPI communicator refuses a plan on device memory
 * when it runs (a fake device's table). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm.h"
#include "comm_graph.h"
#include "plan.h"
#include "testlib.h"
#include "mpi_testutil.h"

static col_backend be;
static col_comm *world;
static int rank, size;

#define check(ok, detail, ...) tl_mpi_check((ok), (detail), __VA_ARGS__)

/* ---- what every rank holds ---- */

/* element i of rank r's input in a run with seed s: small integers, exact in every dtype used here */
static double value(col_dtype dt, int r, int64_t i, int s)
{
    if (dt == COL_BF16 || dt == COL_F16)
        return (double)((r * 37 + i * 11 + s * 5) % 251) - 125.0;
    return (double)r * 10000.0 + (double)i * 7.0 + (double)s * 3.0 - 5000.0;
}

static int64_t numel(int ndim, const int64_t *sh)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= sh[i];
    return n;
}

/* row-major flat index of idx in shape sh */
static int64_t flat(int ndim, const int64_t *sh, const int64_t *idx)
{
    int64_t f = 0;
    for (int i = 0; i < ndim; i++)
        f = f * sh[i] + idx[i];
    return f;
}

/* idx of flat index f in shape sh */
static void unflat(int ndim, const int64_t *sh, int64_t f, int64_t *idx)
{
    for (int i = ndim - 1; i >= 0; i--) {
        idx[i] = f % sh[i];
        f /= sh[i];
    }
}

/* a host tensor description of a contiguous buffer (to read and write any dtype as doubles) */
static col_tensor host_tensor(col_dtype dt, int ndim, const int64_t *sh, void *data)
{
    col_tensor t = {.dtype = dt, .ndim = ndim, .data = data};
    memcpy(t.shape, sh, sizeof(int64_t) * (size_t)ndim);
    col_set_contiguous_strides(&t);
    return t;
}

/* ---- one collective on one input ---- */

typedef enum { GATHER, ALL_TO_ALL } kind;

typedef struct {
    kind k;
    col_dtype dt;
    int ndim;
    int64_t shape[4];   /* every rank's input (for a transposed case: the leaf's shape, before the transpose) */
    int a, b;           /* gather: axis; all-to-all: split and concat axes */
    bool transposed;    /* the collective's input is the leaf with dims 0 and 1 swapped (a strided view) */
} coll_case;

/* element idx of the input x of rank r (the collective's operand: after the transpose) with seed s */
static double input_at(const coll_case *k, int r, const int64_t *idx, int s)
{
    int64_t li[4];
    memcpy(li, idx, sizeof li);
    if (k->transposed) {
        li[0] = idx[1];
        li[1] = idx[0];
    }
    return value(k->dt, r, flat(k->ndim, k->shape, li), s);
}

/* the operand's shape */
static void operand_shape(const coll_case *k, int64_t *sh)
{
    memcpy(sh, k->shape, sizeof(int64_t) * 4);
    if (k->transposed) {
        sh[0] = k->shape[1];
        sh[1] = k->shape[0];
    }
}

/* what this rank must hold at output index idx (output shape out) */
static double expected_at(const coll_case *k, const int64_t *xs, const int64_t *idx, int s)
{
    int64_t xi[4];
    memcpy(xi, idx, sizeof xi);
    if (k->k == GATHER) {
        int ax = k->a < 0 ? k->a + k->ndim : k->a;
        int r = (int)(idx[ax] / xs[ax]);
        xi[ax] = idx[ax] % xs[ax];
        return input_at(k, r, xi, s);
    }
    int sa = k->a < 0 ? k->a + k->ndim : k->a, ca = k->b < 0 ? k->b + k->ndim : k->b;
    int64_t part[4];
    memcpy(part, xs, sizeof part);
    part[sa] /= size;
    int from = (int)(idx[ca] / part[ca]); /* the rank this block came from */
    xi[ca] = idx[ca] % part[ca];          /* index within the part ... */
    xi[sa] += (int64_t)rank * part[sa];   /* ... which was part `rank` of the sender's x */
    return input_at(k, from, xi, s);
}

static const char *kind_name(const coll_case *k) { return k->k == GATHER ? "all-gather" : "all-to-all"; }

static void run_case(const coll_case *k)
{
    res r = {true, ""};
    col_graph *g = col_graph_new();
    col_node *leaf = col_input(g, "x", k->dt, k->ndim, k->shape);
    col_node *x = k->transposed ? col_transpose(g, leaf, 0, 1) : leaf;
    col_node *y = k->k == GATHER ? col_comm_graph_all_gather(g, world, x, k->a)
                                 : col_comm_graph_all_to_all(g, world, x, k->a, k->b);
    int64_t xs[4] = {1, 1, 1, 1};
    operand_shape(k, xs);
    /* the output shape */
    int64_t os[4];
    memcpy(os, xs, sizeof os);
    if (k->k == GATHER) {
        os[k->a < 0 ? k->a + k->ndim : k->a] *= size;
    } else {
        os[k->a < 0 ? k->a + k->ndim : k->a] /= size;
        os[k->b < 0 ? k->b + k->ndim : k->b] *= size;
    }
    col_plan *p = NULL;
    col_err err = {0};
    if (!y)
        fail(&r, "build: %s", col_graph_error(g)->msg);
    else if (y->t.ndim != k->ndim || memcmp(y->t.shape, os, sizeof(int64_t) * (size_t)k->ndim) != 0)
        fail(&r, "the output's shape is not the expected one");
    else {
        col_mark_output(y);
        expect_ok(&r, col_plan_create(g, &p, &err), &err, "plan");
    }
    size_t es = col_dtype_size(k->dt);
    int64_t nx = numel(k->ndim, k->shape), ny = numel(k->ndim, os);
    void *xb = calloc((size_t)nx, es), *yb = calloc((size_t)ny, es);
    for (int s = 1; s <= 2 && r.ok && p; s++) {
        col_tensor xt = host_tensor(k->dt, k->ndim, k->shape, xb), yt = host_tensor(k->dt, k->ndim, os, yb);
        for (int64_t i = 0; i < nx; i++)
            col_set_from_f64(&xt, i, value(k->dt, rank, i, s));
        memset(yb, 0, (size_t)ny * es);
        col_status st = col_plan_upload(p, leaf, xb, (size_t)nx * es, &err);
        if (st == COL_OK)
            st = col_plan_run(p, &be, &err);
        if (st == COL_OK)
            st = col_plan_download(p, y, yb, (size_t)ny * es, &err);
        expect_ok(&r, st, &err, s == 1 ? "first run" : "second run");
        int64_t idx[4] = {0, 0, 0, 0};
        for (int64_t i = 0; r.ok && i < ny; i++) {
            unflat(k->ndim, os, i, idx);
            double want = expected_at(k, xs, idx, s), got = col_get_as_f64(&yt, i);
            if (got != want)
                fail(&r, "run %d: element %lld is %g, expected %g", s, (long long)i, got, want);
        }
    }
    free(xb);
    free(yb);
    col_plan_free(p);
    col_graph_free(g);
    check(r.ok, r.detail, "%s of %s [%lld,%lld,%lld]%s, axes %d %d: every rank's result, two runs", kind_name(k),
          col_dtype_name(k->dt), (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
          k->transposed ? " transposed" : "", k->a, k->k == GATHER ? 0 : k->b);
}

/* ---- FastFold's pattern: the pair representation split by rows ---- */

enum { NRES = 8, CZ = 3 };

/* Z[i][j][c] of run s: the same on every rank (each holds rows rank*n .. rank*n + n-1) */
static float zval(int64_t i, int64_t j, int64_t c, int s) { return (float)(i * 100 + j * 10 + c + s * 1000); }

static void test_dap(void)
{
    res r = {true, ""};
    const int64_t n = NRES / size;
    int64_t rows[3] = {n, NRES, CZ};
    col_graph *g = col_graph_new();
    col_node *z = col_input(g, "z_rows", COL_F32, 3, rows);
    col_node *a = col_scale(g, z, 2.0f, 1.0f);                         /* a row-split op */
    col_node *cols = col_comm_graph_all_to_all(g, world, a, 1, 0);     /* [N, n, C]: columns */
    col_node *cs = col_scale(g, cols, 1.0f, -1.0f);                    /* a column-split op */
    col_node *back = col_comm_graph_all_to_all(g, world, cs, 0, 1);    /* [n, N, C]: rows again */
    col_node *full = col_comm_graph_all_gather(g, world, a, 0);        /* [N, N, C] */
    col_node *outs[3] = {cols, back, full};
    col_plan *p = NULL;
    col_err err = {0};
    if (col_graph_status(g) != COL_OK)
        fail(&r, "build: %s", col_graph_error(g)->msg);
    else
        expect_ok(&r, col_plan_create_for(g, &be, outs, 3, &p, &err), &err, "plan");
    float *zb = malloc(sizeof(float) * (size_t)(n * NRES * CZ)), *cb = malloc(sizeof(float) * (size_t)(NRES * n * CZ)),
          *bb = malloc(sizeof(float) * (size_t)(n * NRES * CZ)), *fb = malloc(sizeof(float) * (size_t)(NRES * NRES * CZ));
    for (int s = 1; s <= 2 && r.ok && p; s++) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < NRES; j++)
                for (int64_t c = 0; c < CZ; c++)
                    zb[(i * NRES + j) * CZ + c] = zval(rank * n + i, j, c, s);
        col_status st = col_plan_upload(p, z, zb, sizeof(float) * (size_t)(n * NRES * CZ), &err);
        if (st == COL_OK)
            st = col_plan_run(p, &be, &err);
        if (st == COL_OK)
            st = col_plan_download(p, cols, cb, sizeof(float) * (size_t)(NRES * n * CZ), &err);
        if (st == COL_OK)
            st = col_plan_download(p, back, bb, sizeof(float) * (size_t)(n * NRES * CZ), &err);
        if (st == COL_OK)
            st = col_plan_download(p, full, fb, sizeof(float) * (size_t)(NRES * NRES * CZ), &err);
        expect_ok(&r, st, &err, s == 1 ? "first run" : "second run");
        for (int64_t i = 0; r.ok && i < NRES; i++)
            for (int64_t j = 0; r.ok && j < n; j++)
                for (int64_t c = 0; c < CZ; c++) {
                    float want = 2.0f * zval(i, rank * n + j, c, s) + 1.0f, got = cb[(i * n + j) * CZ + c];
                    if (got != want) {
                        fail(&r, "run %d: columns [%lld,%lld,%lld] = %g, expected %g", s, (long long)i, (long long)j,
                             (long long)c, got, want);
                        break;
                    }
                }
        for (int64_t i = 0; r.ok && i < n; i++)
            for (int64_t j = 0; r.ok && j < NRES; j++)
                for (int64_t c = 0; c < CZ; c++) {
                    float want = 2.0f * zval(rank * n + i, j, c, s), got = bb[(i * NRES + j) * CZ + c];
                    if (got != want) {
                        fail(&r, "run %d: rows again [%lld,%lld,%lld] = %g, expected %g", s, (long long)i,
                             (long long)j, (long long)c, got, want);
                        break;
                    }
                }
        for (int64_t i = 0; r.ok && i < NRES; i++)
            for (int64_t j = 0; r.ok && j < NRES; j++)
                for (int64_t c = 0; c < CZ; c++) {
                    float want = 2.0f * zval(i, j, c, s) + 1.0f, got = fb[(i * NRES + j) * CZ + c];
                    if (got != want) {
                        fail(&r, "run %d: gathered [%lld,%lld,%lld] = %g, expected %g", s, (long long)i, (long long)j,
                             (long long)c, got, want);
                        break;
                    }
                }
    }
    free(zb);
    free(cb);
    free(bb);
    free(fb);
    col_plan_free(p);
    col_graph_free(g);
    check(r.ok, r.detail,
          "FastFold's pattern on Z [%d,%d,%d] split by rows: all-to-all to columns and back, all-gather of the "
          "rows, with ordinary ops between, one plan run twice", NRES, NRES, CZ);
}

/* ---- refusals ---- */

/* a builder's message (the graph's first error) when it refuses: "" when it accepted */
static void refused(col_node *(*build)(col_graph *, col_node *, int), int arg, int64_t d0, col_status *st, char *msg,
                    size_t n)
{
    col_graph *g = col_graph_new();
    int64_t sh[3] = {d0, 4, 2};
    col_node *x = col_input(g, "x", COL_F32, 3, sh);
    col_node *y = build(g, x, arg);
    *st = col_graph_status(g);
    snprintf(msg, n, "%s", y ? "" : col_graph_error(g)->msg);
    col_graph_free(g);
}

static col_node *gather_axis(col_graph *g, col_node *x, int axis) { return col_comm_graph_all_gather(g, world, x, axis); }
static col_node *a2a_split(col_graph *g, col_node *x, int axis) { return col_comm_graph_all_to_all(g, world, x, axis, 1); }
static col_node *a2a_concat(col_graph *g, col_node *x, int axis) { return col_comm_graph_all_to_all(g, world, x, 1, axis); }
static col_node *gather_nocomm(col_graph *g, col_node *x, int axis) { return col_comm_graph_all_gather(g, NULL, x, axis); }

static void test_refusals(void)
{
    col_status st;
    char msg[COL_ERR_MSG_MAX];
    refused(gather_axis, 3, 4, &st, msg, sizeof msg);
    check(st == COL_ESHAPE && strstr(msg, "axis 3 is not a dimension"), msg, "all-gather along axis 3 of a 3-d x is "
          "refused: %s", msg);
    refused(gather_axis, -4, 4, &st, msg, sizeof msg);
    check(st == COL_ESHAPE && strstr(msg, "axis -4"), msg, "all-gather along axis -4 of a 3-d x is refused: %s", msg);
    refused(a2a_concat, 5, 4, &st, msg, sizeof msg);
    check(st == COL_ESHAPE && strstr(msg, "concat axis 5"), msg, "all-to-all concatenating along axis 5 is refused: %s",
          msg);
    refused(gather_nocomm, 0, 4, &st, msg, sizeof msg);
    check(st == COL_EINVAL && strstr(msg, "no communicator"), msg, "a collective without a communicator is refused: %s",
          msg);
    if (size > 1) {
        refused(a2a_split, 0, 2 * size + 1, &st, msg, sizeof msg);
        check(st == COL_ESHAPE && strstr(msg, "does not split into") && strstr(msg, "equal parts"), msg,
              "all-to-all splitting %d rows over %d ranks is refused: %s", 2 * size + 1, size, msg);
    }
    refused(a2a_split, 0, 2 * size, &st, msg, sizeof msg);
    check(st == COL_OK, msg, "all-to-all splitting %d rows over %d ranks is accepted", 2 * size, size);
}

/* an MPI communicator and a plan whose data are a device's memory (a fake device: host memory behind a table) */
static col_status fk_alloc(const col_backend *b, size_t bytes, void **out, col_err *err)
{
    (void)b;
    *out = aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
    return *out ? COL_OK : col_err_set(err, COL_ENOMEM, "fake device: out of memory");
}
static void fk_free(const col_backend *b, void *p) { (void)b, free(p); }
static col_status fk_copy(const col_backend *b, void *dst, const void *src, size_t bytes, col_err *err)
{
    (void)b, (void)err;
    memcpy(dst, src, bytes);
    return COL_OK;
}
static col_status fk_sync(const col_backend *b, col_err *err) { (void)b, (void)err; return COL_OK; }

static void test_device_memory_refused(void)
{
    static const col_backend_mem fk_mem = {fk_alloc, fk_free, fk_copy, fk_copy, fk_sync, fk_copy};
    col_backend dev = be;
    dev.name = "fakedev";
    dev.mem = &fk_mem;
    col_graph *g = col_graph_new();
    int64_t sh[2] = {2, 3};
    col_node *x = col_input(g, "x", COL_F32, 2, sh);
    col_node *y = col_comm_graph_all_gather(g, world, x, 0);
    col_mark_output(y);
    col_plan *p = NULL;
    col_err err = {0};
    col_status st = col_plan_create_on(g, &dev, &p, &err);
    if (st == COL_OK)
        st = col_plan_run(p, &dev, &err);
    check(st == COL_EUNSUPPORTED && strstr(err.msg, "mpi transport moves host memory"), err.msg,
          "an MPI communicator refuses a plan on a device's memory when it runs: %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK;
    if (!ok || 4 % size) {
        if (rank == 0)
            printf("Bail out! %s\n", ok ? "the world size must divide 4" : err.msg);
        MPI_Finalize();
        return 1;
    }
    col_comm_set_timeout(world, 60.0, &err);
    /* all-gather: every axis of a 3-d x, a negative axis, dtypes, a strided operand */
    static const coll_case gathers[] = {
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, 0, 0, false},
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, 1, 0, false},
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, 2, 0, false},
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, -2, 0, false},
        {GATHER, COL_I32, 3, {3, 1, 5, 1}, 2, 0, false},
        {GATHER, COL_I64, 3, {2, 3, 2, 1}, 1, 0, false},
        {GATHER, COL_BF16, 3, {2, 3, 4, 1}, 1, 0, false},
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, 0, 0, true},
        {GATHER, COL_F32, 3, {2, 3, 4, 1}, 2, 0, true},
    };
    for (size_t i = 0; i < sizeof gathers / sizeof gathers[0]; i++)
        run_case(&gathers[i]);
    /* all-to-all: every pair of split and concat axes of x [4, 8, 4] (each divides by 1, 2 and 4) */
    for (int sa = 0; sa < 3; sa++)
        for (int ca = 0; ca < 3; ca++) {
            coll_case k = {ALL_TO_ALL, COL_F32, 3, {4, 8, 4, 1}, sa, ca, false};
            run_case(&k);
        }
    static const coll_case a2as[] = {
        {ALL_TO_ALL, COL_I32, 3, {8, 4, 3, 1}, -2, -3, false},
        {ALL_TO_ALL, COL_BF16, 3, {4, 4, 2, 1}, 0, 2, false},
        {ALL_TO_ALL, COL_F32, 3, {4, 8, 4, 1}, 1, 0, true},
        {ALL_TO_ALL, COL_F32, 3, {8, 4, 4, 1}, 2, 1, true},
    };
    for (size_t i = 0; i < sizeof a2as / sizeof a2as[0]; i++)
        run_case(&a2as[i]);
    test_dap();
    test_refusals();
    test_device_memory_refused();
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
