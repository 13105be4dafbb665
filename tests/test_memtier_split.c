/* test_memtier_split.c - what data parallelism needs from memtier: chunk
 * capacities that are multiples of a given size (so a chunk splits into
 * equal aligned pieces), sealing a kind's open chunk, and giving back the
 * memory of a range of a chunk (mt_chunk_discard). */
#include <string.h>

#include "memtier.h"
#include "procmem.h"
#include "testlib.h"

#define MIB ((size_t)1 << 20)

static void test_capacity_multiple(void)
{
    col_err err = {0};
    mt_pool *pool = NULL;
    size_t mult = 3 * MT_ALIGN; /* 3 processes */
    bool ok = mt_create(&(mt_config){.chunk_bytes = 4096, .capacity_multiple = mult}, &pool, &err) == COL_OK;
    mt_ref a, b, c;
    ok = ok && mt_alloc(pool, MT_PARAM, 1000, &a, &err) == COL_OK && mt_alloc(pool, MT_PARAM, 10000, &b, &err) == COL_OK &&
         mt_alloc(pool, MT_PARAM, 3000, &c, &err) == COL_OK;
    mt_chunk_info ia, ib, ic;
    ok = ok && mt_chunk_get(pool, a.chunk, &ia, &err) == COL_OK && mt_chunk_get(pool, b.chunk, &ib, &err) == COL_OK &&
         mt_chunk_get(pool, c.chunk, &ic, &err) == COL_OK;
    /* 4096 rounds up to 4224 (22 x 192); the 10000-byte tensor gets a chunk of its own of 10176 (53 x 192) */
    TL_OK(ok && ia.capacity == 4224 && ib.capacity == 10176 && ic.capacity == 4224 && a.chunk != b.chunk &&
              c.chunk != a.chunk && c.chunk != b.chunk,
          "capacities are multiples of 192 bytes: the chunk size 4096 -> %zu, an oversize chunk %zu, the new chunk "
          "after it %zu", ia.capacity, ib.capacity, ic.capacity);
    mt_destroy(pool);
    pool = NULL;
    col_status st = mt_create(&(mt_config){.chunk_bytes = 4096, .capacity_multiple = 100}, &pool, &err);
    TL_OK(st == COL_EINVAL && !pool, "a multiple that is not one of 64 bytes is refused: %s", err.msg);
    st = mt_create(&(mt_config){.chunk_bytes = 4096, .capacity_multiple = 8192}, &pool, &err);
    TL_OK(st == COL_EINVAL && !pool, "a multiple above the chunk size is refused: %s", err.msg);
}

static void test_seal(void)
{
    col_err err = {0};
    mt_pool *pool = NULL;
    mt_ref a, b, c;
    bool ok = mt_create(&(mt_config){.chunk_bytes = 4096}, &pool, &err) == COL_OK &&
              mt_alloc(pool, MT_GRAD, 100, &a, &err) == COL_OK;
    mt_seal(pool, MT_PARAM); /* another kind's: nothing changes for gradients */
    ok = ok && mt_alloc(pool, MT_GRAD, 100, &b, &err) == COL_OK;
    mt_seal(pool, MT_GRAD);
    ok = ok && mt_alloc(pool, MT_GRAD, 100, &c, &err) == COL_OK;
    TL_OK(ok && a.chunk == b.chunk && c.chunk != b.chunk && c.offset == 0,
          "mt_seal starts the kind's next tensor in a new chunk (and only that kind's)");
    mt_destroy(pool);
}

static void test_discard(void)
{
    col_err err = {0};
    mt_pool *pool = NULL;
    mt_ref big, small;
    bool ok = mt_create(&(mt_config){.chunk_bytes = 8 * MIB}, &pool, &err) == COL_OK &&
              mt_alloc(pool, MT_GRAD, 8 * MIB, &big, &err) == COL_OK;
    unsigned char *p = mt_ptr(pool, big);
    ok = ok && p;
    if (!ok) {
        TL_OK(false, "an 8 MiB chunk: %s", err.msg);
        mt_destroy(pool);
        return;
    }
    memset(p, 0x5a, big.bytes);
    col_procmem before, after;
    col_procmem_read(&before);
    /* a range that starts and ends inside pages: its whole pages go back, its edges are zeroed in place */
    size_t lo = 100, len = 6 * MIB + 77;
    size_t back = mt_chunk_discard(pool, big.chunk, lo, len);
    col_procmem_read(&after);
    bool zeros = true, kept = true;
    for (size_t i = 0; i < big.bytes; i++) {
        if (i >= lo && i < lo + len)
            zeros &= p[i] == 0;
        else
            kept &= p[i] == 0x5a;
    }
    TL_OK(zeros && kept, "the discarded range reads as zeros; the bytes around it are untouched");
    TL_OK(back >= 6 * MIB - 8192 && back <= len && before.rss - after.rss + 1 * MIB >= back,
          "%.2f MiB of whole pages given back (resident memory %.2f -> %.2f MiB)", back / (double)MIB,
          before.rss / (double)MIB, after.rss / (double)MIB);
    memset(p + lo, 0x11, 4096);
    TL_OK(p[lo] == 0x11 && p[lo + 4095] == 0x11, "the range takes memory again once written");
    TL_OK(mt_chunk_discard(pool, big.chunk, 9 * MIB, 10) == 0 && mt_chunk_discard(pool, 99, 0, 10) == 0,
          "a range past the chunk or a chunk that does not exist: nothing happens");
    mt_destroy(pool);
    pool = NULL;
    ok = mt_create(&(mt_config){.chunk_bytes = 4096}, &pool, &err) == COL_OK &&
         mt_alloc(pool, MT_PARAM, 1000, &small, &err) == COL_OK;
    unsigned char *q = ok ? mt_ptr(pool, small) : NULL;
    size_t sb = 1;
    if (q) {
        memset(q, 0x77, small.bytes);
        sb = mt_chunk_discard(pool, small.chunk, 10, 20);
    }
    TL_OK(q && sb == 0 && q[9] == 0x77 && q[10] == 0 && q[29] == 0 && q[30] == 0x77,
          "a chunk of less than 1 MiB (not its own mapping) is zeroed in place, nothing given back");
    mt_destroy(pool);
}

int main(void)
{
    test_capacity_multiple();
    test_seal();
    test_discard();
    return tl_done();
}
