/* test_mt_stage.c - the NVMe stage (memtier/mt_stage.h) with a byte limit:
 * its buffers never hold more than the limit (but for one chunk larger than
 * it), what it frees to stay within it is written back first, read-ahead
 * stays within it, and the data survive every eviction. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtier.h"
#include "mt_stage.h"
#include "rng.h"
#include "testlib.h"

static char root[] = "/tmp/col_mt_stage_XXXXXX";

enum { NT = 40 };

typedef struct {
    mt_pool *pool;
    mt_ref ref[NT];
    size_t largest; /* the largest chunk's io bytes */
} fixture;

/* 40 optimizer-state tensors on NVMe in 16 KiB chunks, every 9th one oversize (its own chunk) */
static bool make(fixture *f, col_err *err)
{
    mt_config cfg = {.chunk_bytes = 16 << 10, .nvme_dir = root, .nvme_kinds = 1u << MT_OPTSTATE};
    if (mt_create(&cfg, &f->pool, err) != COL_OK)
        return false;
    for (int i = 0; i < NT; i++) {
        size_t bytes = i % 9 == 8 ? (size_t)(40 << 10) + (size_t)i * 64 : (size_t)(3000 + 100 * i);
        if (mt_alloc(f->pool, MT_OPTSTATE, bytes & ~(size_t)3, &f->ref[i], err) != COL_OK)
            return false;
    }
    f->largest = 0;
    for (int c = 0; c < mt_chunk_count(f->pool); c++)
        if (mt_chunk_io_bytes(f->pool, c) > f->largest)
            f->largest = mt_chunk_io_bytes(f->pool, c);
    return true;
}

static float value(int i, size_t j, int round) { return (float)(i * 1000003 + (int)j * 7 + round); }

/* one pass over the tensors in order, k at a time (as the optimizer holds several kinds at once): each
 * tensor is checked against the last round and rewritten; returns false on a wrong value or an error */
static bool pass(fixture *f, mt_stage *s, int round, int k, bool prefetch, size_t *over, col_err *err)
{
    for (int i = 0; i + k <= NT; i += k) {
        float *p[4];
        for (int j = 0; j < k; j++)
            if (mt_stage_get(s, f->ref[i + j], true, (void **)&p[j], err) != COL_OK)
                return false;
        if (prefetch && i + k < NT && mt_stage_prefetch(s, f->ref[i + k], k, err) != COL_OK)
            return false;
        for (int j = 0; j < k; j++) {
            size_t n = f->ref[i + j].bytes / 4;
            for (size_t e = 0; e < n; e++) {
                if (round > 0 && p[j][e] != value(i + j, e, round - 1))
                    return false;
                p[j][e] = value(i + j, e, round);
            }
        }
        size_t lim = mt_stage_limit(s);
        if (lim && mt_stage_held(s) > lim && mt_stage_held(s) - lim > *over)
            *over = mt_stage_held(s) - lim;
    }
    return mt_stage_flush(s, err) == COL_OK;
}

static void test_limit(void)
{
    fixture f = {0};
    col_err err = {0};
    if (!make(&f, &err)) {
        TL_OK(false, "a pool with states on NVMe in %s: %s", root, err.msg);
        mt_destroy(f.pool);
        return;
    }
    TL_OK(f.largest >= (40 << 10), "%d chunks, the largest %zu bytes", mt_chunk_count(f.pool), f.largest);

    /* no limit: 12 buffers grow to the largest chunk they held */
    mt_stage *s = NULL;
    mt_stage_create(f.pool, 12, &s, &err);
    size_t over = 0;
    bool ok = pass(&f, s, 0, 1, false, &over, &err) && pass(&f, s, 1, 2, true, &over, &err);
    TL_OK(ok, "without a limit the data go round: %s", err.msg);
    size_t free_peak = mt_stage_peak(s);
    mt_stage_free(s);

    /* a limit of two of the largest chunks: pairs of tensors at once, as the optimizer holds w and m */
    size_t limit = 2 * f.largest;
    mt_stage_create(f.pool, 12, &s, &err);
    mt_stage_set_limit(s, limit);
    over = 0;
    ok = true;
    for (int r = 2; r < 6 && ok; r++)
        ok = pass(&f, s, r, 2, r % 2 == 0, &over, &err);
    TL_OK(ok, "with a limit of %zu bytes, 4 passes of pairs with and without read-ahead: every value survives "
          "eviction, write-back and read: %s", limit, err.msg);
    TL_OK(over == 0 && mt_stage_peak(s) <= limit, "the buffers held at most %zu bytes (limit %zu; %zu without one)",
          mt_stage_peak(s), limit, free_peak);
    TL_OK(free_peak > limit, "(without the limit they held more: %zu)", free_peak);

    /* a limit below one chunk: that chunk still gets its buffer, and only it is held */
    mt_stage_set_limit(s, 1024);
    TL_OK(mt_stage_held(s) == 0, "setting a lower limit frees the idle buffers (%zu bytes left)", mt_stage_held(s));
    ok = pass(&f, s, 6, 1, true, &over, &err);
    TL_OK(ok && mt_stage_held(s) <= f.largest, "a limit below one chunk: one buffer at a time (%zu held): %s",
          mt_stage_held(s), err.msg);
    mt_stage_free(s);
    mt_destroy(f.pool);
}

int main(void)
{
    if (!mkdtemp(root)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_limit();
    rmdir(root);
    return tl_done();
}
