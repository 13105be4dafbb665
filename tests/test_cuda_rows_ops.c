/* test_cuda_rows_ops.c - the CUDA kernels of the per-row cache ops
 * (serving: col_arange_rows, col_kv_write_rows, col_attention_cached_rows)
 * against the CPU backend, with tests/cuda_opcase.h's harness: one decode
 * step of B sequences at their own positions in their own cache rows
 * (positions, the new keys and values written, attention over the written
 * caches), GQA and MHA, one and three new tokens, rows permuted and the
 * identity, head dims 32 to 128, a start past several key tiles. f32
 * tolerance TOL (1e-5 of |cpu| + mean |cpu|); the positions and the caches
 * bitwise. Then the errors: a cache row outside the cache, a position past
 * it or negative are queued and reported at the next synchronisation as
 * COL_EINVAL with the CPU kernel's message; kv_write writes nothing, the
 * attention gives the bad batch row zeros and the others their values.
 *
 * Without a CUDA device it prints "1..0 # SKIP ..." and passes; the
 * _emu program runs it through the host emulator.
 * Run alone: make tests/test_cuda_rows_ops_emu && ./tests/test_cuda_rows_ops_emu */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "graph.h"
#include "testlib.h"
#include "cuda_testutil.h"
#include "backend_cpu.h"

/* cudart reserves address space that ASan's shadow gap would block, and the
 * CUDA driver keeps allocations until exit (for sanitizer builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcuda.so\nleak:libcudart.so\nleak:libcublas\n"; }

#include "cuda_opcase.h"

/* an i64 [B] leaf holding v */
static col_node *index_leaf(tcase *c, const char *name, int64_t B, const int64_t *v)
{
    col_node *n = input(c, name, COL_I64, 1, &B, R_NORMAL, 1, false);
    if (n)
        memcpy(n->bound, v, sizeof(int64_t) * (size_t)B);
    return n;
}

/* one decode step: caches [R,Hkv,L,D], B rows of T new tokens at start[b] in cache row rows[b] */
static void case_step(int64_t R, int64_t Hq, int64_t Hkv, int64_t L, int64_t D, int64_t B, int64_t T,
                      const int64_t *rows, const int64_t *start)
{
    char name[160];
    snprintf(name, sizeof name, "rows step R=%lld Hq=%lld Hkv=%lld L=%lld D=%lld B=%lld T=%lld%s", (long long)R,
             (long long)Hq, (long long)Hkv, (long long)L, (long long)D, (long long)B, (long long)T,
             rows ? "" : " (no row map)");
    tcase c = begin(name, TOL);
    col_node *q = input(&c, "q", COL_F32, 4, (int64_t[]){B, Hq, T, D}, R_NORMAL, 0, false);
    col_node *kc = input(&c, "kcache", COL_F32, 4, (int64_t[]){R, Hkv, L, D}, R_NORMAL, 0, false);
    col_node *vc = input(&c, "vcache", COL_F32, 4, (int64_t[]){R, Hkv, L, D}, R_NORMAL, 0, false);
    /* the new keys as after a projection: [B,T,Hkv,D] seen as [B,Hkv,T,D] */
    col_node *kn = col_transpose(c.g, input(&c, "knew", COL_F32, 4, (int64_t[]){B, T, Hkv, D}, R_NORMAL, 0, false), 1, 2);
    col_node *vn = input(&c, "vnew", COL_F32, 4, (int64_t[]){B, Hkv, T, D}, R_NORMAL, 0, false);
    col_node *st = index_leaf(&c, "start", B, start), *rw = rows ? index_leaf(&c, "rows", B, rows) : NULL;
    col_arange_rows(c.g, st, T, 1);
    col_node *kw = col_kv_write_rows(c.g, kc, kn, st, rw), *vw = col_kv_write_rows(c.g, vc, vn, st, rw);
    col_attention_cached_rows(c.g, q, kw, vw, st, rw, 0.0f);
    finish(&c);
}

/* device copies of host buffers; false (and a failed TL line) on an error */
static bool upload(void **dev, const void *host, size_t bytes, col_err *err)
{
    return col_cuda_alloc(&gpu, bytes, dev, err) == COL_OK && col_cuda_to_device(&gpu, *dev, host, bytes, err) == COL_OK;
}

/* bad rows and positions: queued, reported at the next synchronisation, nothing out of bounds */
static void case_errors(void)
{
    enum { R = 2, H = 1, L = 6, D = 4, B = 2, T = 2 };
    col_graph *g = col_graph_new();
    int64_t nb = B, sc[4] = {R, H, L, D}, sx[4] = {B, H, T, D};
    col_node *cache = col_input(g, "cache", COL_F32, 4, sc), *x = col_input(g, "x", COL_F32, 4, sx);
    col_node *st = col_input(g, "start", COL_I64, 1, &nb), *rw = col_input(g, "rows", COL_I64, 1, &nb);
    col_node *kv = col_kv_write_rows(g, cache, x, st, rw);
    col_node *at = col_attention_cached_rows(g, x, cache, cache, st, rw, 0.0f);
    float hc[R * H * L * D], hx[B * H * T * D];
    for (int i = 0; i < R * H * L * D; i++)
        hc[i] = 100.0f + (float)i;
    for (int i = 0; i < B * H * T * D; i++)
        hx[i] = -1.0f - 0.01f * (float)i;
    int64_t zeros2[2] = {0, 0};
    void *dc = NULL, *dx = NULL, *dst = NULL, *drw = NULL, *dout = NULL;
    col_err err = {0};
    bool ok = kv && at && upload(&dc, hc, sizeof hc, &err) && upload(&dx, hx, sizeof hx, &err) &&
              upload(&dst, zeros2, sizeof zeros2, &err) && upload(&drw, zeros2, sizeof zeros2, &err) &&
              col_cuda_alloc(&gpu, node_bytes(at), &dout, &err) == COL_OK;
    TL_OK(ok, "rows error-case setup %s", err.msg);
    if (ok) {
        col_exec ex = {.be = &gpu};
        kv->src[0]->t.data = dc, kv->src[1]->t.data = dx, kv->t.data = dc;
        st->t.data = dst, rw->t.data = drw;
        at->src[0]->t.data = dx, at->src[1]->t.data = dc, at->src[2]->t.data = dc, at->t.data = dout;
        struct {
            int64_t rows[2], start[2];
            const char *want;
        } bad[] = {
            {{1, 2}, {0, 1}, "batch row 1 uses cache row 2, outside the cache's 2 rows"},
            {{-1, 0}, {0, 1}, "batch row 0 uses cache row -1, outside the cache's 2 rows"},
            {{1, 0}, {0, 5}, "batch row 1 at position 5 + 2 tokens exceeds the cache of 6"},
            {{1, 0}, {-1, 0}, "batch row 0 at position -1 + 2 tokens exceeds the cache of 6"},
        };
        for (int i = 0; i < 4; i++) {
            col_err e = {0};
            col_status s = col_cuda_to_device(&gpu, drw, bad[i].rows, sizeof bad[i].rows, &e);
            if (s == COL_OK)
                s = col_cuda_to_device(&gpu, dst, bad[i].start, sizeof bad[i].start, &e);
            if (s == COL_OK)
                s = gpu.kernel[COL_OP_KV_WRITE](kv, &ex, &e);
            TL_OK(s == COL_OK, "kv_write rows: bad input is queued: %s", e.msg);
            s = col_cuda_sync(&gpu, &e);
            TL_OK(s == COL_EINVAL && strstr(e.msg, "kv_write: ") && strstr(e.msg, bad[i].want),
                  "kv_write rows: COL_EINVAL at the sync: %s", e.msg);
            float back[R * H * L * D];
            col_err_clear(&e);
            TL_OK(col_cuda_to_host(&gpu, back, dc, sizeof back, &e) == COL_OK && memcmp(back, hc, sizeof hc) == 0,
                  "kv_write rows: the cache is untouched (%s) %s", bad[i].want, e.msg);
            col_err_clear(&e);
            s = gpu.kernel[COL_OP_ATTENTION](at, &ex, &e);
            TL_OK(s == COL_OK, "attention rows: bad input is queued: %s", e.msg);
            s = col_cuda_sync(&gpu, &e);
            TL_OK(s == COL_EINVAL && strstr(e.msg, "attention: ") && strstr(e.msg, bad[i].want),
                  "attention rows: COL_EINVAL at the sync: %s", e.msg);
            col_err_clear(&e);
            /* the bad batch row's output and logsumexp are zeros, the good one's finite and not all zero */
            size_t nbytes = node_bytes(at), lo = col_extra_offset(at);
            char *ob = malloc(nbytes);
            bool shape_ok = ob && col_cuda_to_host(&gpu, ob, dout, nbytes, &e) == COL_OK;
            int badrow = (int)(strstr(bad[i].want, "batch row 1") != NULL);
            bool good_nonzero = false;
            for (int b = 0; b < B && shape_ok; b++)
                for (int j = 0; j < H * T * D; j++) {
                    float v = ((float *)ob)[b * H * T * D + j];
                    if (b == badrow)
                        shape_ok = shape_ok && v == 0.0f;
                    else
                        shape_ok = shape_ok && isfinite(v), good_nonzero = good_nonzero || v != 0.0f;
                }
            for (int j = 0; j < H * T && shape_ok; j++)
                shape_ok = ((float *)(ob + lo))[badrow * H * T + j] == 0.0f;
            free(ob);
            TL_OK(shape_ok && good_nonzero, "attention rows: batch row %d zeros, the other computed %s", badrow, e.msg);
            col_err_clear(&e);
            TL_OK(col_cuda_sync(&gpu, &e) == COL_OK, "the next sync is clean: %s", e.msg);
        }
        /* and good rows write where they say: row 0 -> cache row 1 at 4..5, row 1 -> cache row 0 at 0..1 */
        int64_t rows[2] = {1, 0}, start[2] = {4, 0};
        float want[R * H * L * D], back[R * H * L * D];
        memcpy(want, hc, sizeof hc);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                memcpy(&want[(rows[b] * L + start[b] + t) * D], &hx[(b * T + t) * D], sizeof(float) * D);
        col_err e = {0};
        col_status s = col_cuda_to_device(&gpu, drw, rows, sizeof rows, &e);
        if (s == COL_OK)
            s = col_cuda_to_device(&gpu, dst, start, sizeof start, &e);
        if (s == COL_OK)
            s = gpu.kernel[COL_OP_KV_WRITE](kv, &ex, &e);
        if (s == COL_OK)
            s = col_cuda_to_host(&gpu, back, dc, sizeof back, &e);
        TL_OK(s == COL_OK && memcmp(back, want, sizeof want) == 0,
              "kv_write rows {1,0} at {4,0}: the two rows land where they say, the rest untouched %s", e.msg);
    }
    col_cuda_free(&gpu, dc), col_cuda_free(&gpu, dx), col_cuda_free(&gpu, dst);
    col_cuda_free(&gpu, drw), col_cuda_free(&gpu, dout);
    col_graph_free(g);
}

int main(void)
{
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    tl_cpu_backend(&cpu);
    col_rng_init(&rng, 20250219);
    TL_NOTE("device: %s", col_cuda_backend_device_name(&gpu));
    (void)param, (void)backward_of; /* the harness's, for cases with gradients: these ops have none */

    static const int64_t rows3[3] = {2, 0, 3}, st3[3] = {37, 0, 70}, st1[3] = {5, 12, 0};
    case_step(4, 4, 2, 80, 32, 3, 3, rows3, st3); /* GQA, three new tokens, rows permuted, two key tiles */
    case_step(4, 4, 2, 80, 32, 3, 1, rows3, st3); /* GQA, one new token */
    case_step(4, 3, 3, 16, 64, 3, 1, NULL, st1);  /* MHA, the identity */
    case_step(4, 2, 2, 16, 24, 3, 3, rows3, st1); /* MHA, head dim 24 (padded to 32) */
    case_step(4, 2, 1, 80, 128, 3, 3, rows3, st3); /* head dim 128: key tiles of 32 */
    case_errors();

    col_cuda_backend_free(&gpu);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
