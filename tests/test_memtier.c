/* test_memtier.c - chunk packing, alignment, oversize tensors, the host
 * budget, pointer stability, zeroing and statistics. */
#include <string.h>

#include "memtier.h"
#include "rng.h"
#include "testlib.h"

#define MIB ((size_t)1 << 20)

/* packing rule written out: per kind an open chunk; a tensor goes at the
 * next 64-byte boundary if it fits, else into a new chunk; an oversize
 * tensor gets a chunk of its own and closes the kind's open chunk */
typedef struct {
    int nchunks, open[MT_NKINDS];
    size_t used[1024], cap[1024];
    mt_kind kind[1024];
} packer;

static void pack_init(packer *p)
{
    memset(p, 0, sizeof *p);
    for (int k = 0; k < MT_NKINDS; k++)
        p->open[k] = -1;
}

static mt_ref pack(packer *p, size_t chunk, mt_kind kind, size_t bytes)
{
    int c = p->open[kind];
    size_t off = c >= 0 ? (p->used[c] + 63) / 64 * 64 : 0;
    if (c < 0 || off + bytes > p->cap[c]) {
        c = p->nchunks++;
        p->kind[c] = kind;
        p->cap[c] = bytes > chunk ? (bytes + 63) / 64 * 64 : chunk;
        p->open[kind] = bytes > chunk ? -1 : c;
        off = 0;
    }
    p->used[c] = off + bytes;
    return (mt_ref){c, off, bytes};
}

static void test_small_layout(void)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    mt_config cfg = {.chunk_bytes = 1000}; /* rounded up to 1024 */
    TL_OK(mt_create(&cfg, &pool, &err) == COL_OK, "create with 1000-byte chunks%s", err.msg);
    const size_t sizes[] = {100, 200, 300, 500, 24, 3000, 8};
    /* 0..100 | 128..328 | 384..684 | (704 + 500 > 1024) chunk 1: 0..500 | 512..536 |
     * 3000 > 1024: chunk 2 of 3008 bytes | 8: a new chunk 3 at 0 */
    const mt_ref want[] = {{0, 0, 100}, {0, 128, 200}, {0, 384, 300}, {1, 0, 500}, {1, 512, 24}, {2, 0, 3000}, {3, 0, 8}};
    bool ok = true;
    for (int i = 0; i < 7; i++) {
        mt_ref r;
        ok &= mt_alloc(pool, MT_PARAM, sizes[i], &r, &err) == COL_OK;
        ok &= r.chunk == want[i].chunk && r.offset == want[i].offset && r.bytes == want[i].bytes;
        if (r.chunk != want[i].chunk || r.offset != want[i].offset)
            TL_NOTE("tensor %d: chunk %d offset %zu, want chunk %d offset %zu", i, r.chunk, r.offset, want[i].chunk,
                    want[i].offset);
    }
    TL_OK(ok, "packing: 64-byte steps, a tensor that does not fit starts a new chunk, oversize gets its own");
    mt_chunk_info ci[4];
    for (int c = 0; c < 4; c++)
        mt_chunk_get(pool, c, &ci[c], &err);
    TL_OK(mt_chunk_count(pool) == 4 && ci[0].capacity == 1024 && ci[0].used == 684 && ci[0].ntensors == 3 &&
              ci[1].used == 536 && ci[2].capacity == 3008 && ci[2].ntensors == 1 && ci[3].capacity == 1024 &&
              ci[3].tier == MT_TIER_HOST && !ci[3].dirty && ci[0].kind == MT_PARAM,
          "chunk info: capacity 1024 (1000 rounded), oversize 3008, used/ntensors, host tier, clean");

    /* kinds never share chunks */
    mt_ref g, o, p2;
    mt_alloc(pool, MT_GRAD, 64, &g, &err);
    mt_alloc(pool, MT_OPTSTATE, 64, &o, &err);
    mt_alloc(pool, MT_PARAM, 64, &p2, &err);
    mt_chunk_info gi, oi;
    mt_chunk_get(pool, g.chunk, &gi, &err);
    mt_chunk_get(pool, o.chunk, &oi, &err);
    TL_OK(g.chunk == 4 && o.chunk == 5 && p2.chunk == 3 && p2.offset == 64 && gi.kind == MT_GRAD &&
              oi.kind == MT_OPTSTATE,
          "each kind packs into its own chunks (grad %d, optstate %d, param back in chunk %d)", g.chunk, o.chunk,
          p2.chunk);
    TL_OK(mt_chunk_get(pool, 6, &gi, &err) == COL_EINVAL && strstr(err.msg, "chunk 6"), "chunk out of range: %s",
          err.msg);

    mt_pool_stats st;
    mt_stats(pool, &st);
    TL_OK(st.chunk_bytes == 1024 && st.chunks[MT_PARAM][MT_TIER_HOST] == 4 &&
              st.bytes[MT_PARAM][MT_TIER_HOST] == 3 * 1024 + 3008 && st.chunks[MT_GRAD][MT_TIER_HOST] == 1 &&
              st.bytes[MT_OPTSTATE][MT_TIER_HOST] == 1024 && st.chunks[MT_PARAM][MT_TIER_NVME] == 0 &&
              st.tensors[MT_PARAM] == 8 && st.tensor_bytes[MT_PARAM] == 100 + 200 + 300 + 500 + 24 + 3000 + 8 + 64 &&
              st.host_bytes == 5 * 1024 + 3008 && st.host_peak == st.host_bytes && st.needed_bytes == st.host_bytes &&
              st.host_budget == 0,
          "stats: chunks and bytes per kind and tier, tensors, host bytes, peak, needed");

    TL_OK(mt_alloc(pool, MT_PARAM, 0, &g, &err) == COL_EINVAL && g.chunk == -1 && strstr(err.msg, "0 bytes"),
          "zero bytes: %s", err.msg);
    TL_OK(mt_alloc(pool, (mt_kind)7, 8, &g, &err) == COL_EINVAL && strstr(err.msg, "kind"), "bad kind: %s", err.msg);
    TL_OK(mt_ptr(pool, (mt_ref){-1, 0, 8}) == NULL && mt_ptr(pool, (mt_ref){9, 0, 8}) == NULL &&
              mt_ptr(pool, (mt_ref){0, 680, 8}) == NULL && mt_ptr(pool, (mt_ref){0, 0, 100}) != NULL,
          "mt_ptr: NULL for refs outside what was placed");
    mt_mark_dirty(pool, 1);
    mt_chunk_get(pool, 1, &gi, &err);
    bool d1 = gi.dirty;
    mt_mark_clean(pool, 1);
    mt_chunk_get(pool, 1, &gi, &err);
    TL_OK(d1 && !gi.dirty, "mark dirty / clean");
    mt_destroy(pool);

    TL_OK(mt_create(NULL, &pool, &err) == COL_OK, "create with default config");
    mt_stats(pool, &st);
    TL_OK(st.chunk_bytes == MT_DEFAULT_CHUNK_BYTES && st.chunk_bytes == 32 * MIB && st.host_bytes == 0,
          "default chunk size 32 MiB, nothing allocated up front");
    mt_destroy(pool);
    mt_destroy(NULL);
}

/* many random allocations: layout as the rule says, aligned, zeroed,
 * stable, non-overlapping; zeroing one kind leaves the others */
static void test_random(void)
{
    enum { NA = 400 };
    static packer pk;
    static mt_ref refs[NA];
    static void *ptrs[NA];
    static mt_kind kinds[NA];
    mt_pool *pool = NULL;
    col_err err = {0};
    const size_t chunk = 16384;
    mt_create(&(mt_config){.chunk_bytes = chunk}, &pool, &err);
    pack_init(&pk);
    col_rng rng;
    col_rng_init(&rng, 42);
    bool layout = true, aligned = true, zeroed = true;
    for (int i = 0; i < NA; i++) {
        kinds[i] = (mt_kind)col_rng_below(&rng, MT_NKINDS);
        size_t bytes = 1 + col_rng_below(&rng, col_rng_below(&rng, 20) == 0 ? 40000 : 3000);
        mt_ref want = pack(&pk, chunk, kinds[i], bytes);
        if (mt_alloc(pool, kinds[i], bytes, &refs[i], &err) != COL_OK) {
            TL_OK(false, "alloc %d: %s", i, err.msg);
            return;
        }
        layout &= refs[i].chunk == want.chunk && refs[i].offset == want.offset && refs[i].bytes == bytes;
        ptrs[i] = mt_ptr(pool, refs[i]);
        aligned &= ptrs[i] && (uintptr_t)ptrs[i] % 64 == 0;
        for (size_t b = 0; b < bytes; b++)
            zeroed &= ((unsigned char *)ptrs[i])[b] == 0;
        /* write the pattern now: later allocations must not disturb it */
        for (size_t b = 0; b < bytes; b++)
            ((unsigned char *)ptrs[i])[b] = (unsigned char)(i * 131 + b * 7 + 1);
    }
    TL_OK(layout, "%d random allocations over 3 kinds follow the packing rule (%d chunks)", NA, pk.nchunks);
    TL_OK(aligned && zeroed, "every allocation is 64-byte aligned and starts zeroed");
    bool chunks_ok = mt_chunk_count(pool) == pk.nchunks;
    for (int c = 0; c < pk.nchunks && chunks_ok; c++) {
        mt_chunk_info ci;
        mt_chunk_get(pool, c, &ci, &err);
        chunks_ok &= ci.kind == pk.kind[c] && ci.capacity == pk.cap[c] && ci.used == pk.used[c];
    }
    TL_OK(chunks_ok, "chunk kinds, capacities and fill match the rule");

    bool stable = true, intact = true, disjoint = true;
    for (int i = 0; i < NA; i++) {
        stable &= mt_ptr(pool, refs[i]) == ptrs[i];
        for (size_t b = 0; b < refs[i].bytes; b++)
            intact &= ((unsigned char *)ptrs[i])[b] == (unsigned char)(i * 131 + b * 7 + 1);
    }
    for (int i = 0; i < NA; i++)
        for (int j = i + 1; j < NA; j++) {
            uintptr_t a0 = (uintptr_t)ptrs[i], a1 = a0 + refs[i].bytes;
            uintptr_t b0 = (uintptr_t)ptrs[j], b1 = b0 + refs[j].bytes;
            disjoint &= a1 <= b0 || b1 <= a0;
        }
    TL_OK(stable && intact && disjoint, "pointers stable, patterns intact, no two allocations overlap");

    mt_zero(pool, MT_GRAD);
    bool grads_zero = true, others = true;
    for (int i = 0; i < NA; i++)
        for (size_t b = 0; b < refs[i].bytes; b++) {
            unsigned char x = ((unsigned char *)ptrs[i])[b];
            if (kinds[i] == MT_GRAD)
                grads_zero &= x == 0;
            else
                others &= x == (unsigned char)(i * 131 + b * 7 + 1);
        }
    bool dirty_ok = true;
    for (int c = 0; c < pk.nchunks; c++) {
        mt_chunk_info ci;
        mt_chunk_get(pool, c, &ci, &err);
        dirty_ok &= ci.dirty == (ci.kind == MT_GRAD);
    }
    TL_OK(grads_zero && others && dirty_ok, "mt_zero(grad) clears every gradient, keeps params and states, marks "
                                            "only grad chunks dirty");

    mt_pool_stats st;
    mt_stats(pool, &st);
    bool st_ok = true;
    size_t host = 0;
    for (int k = 0; k < MT_NKINDS; k++) {
        int nc = 0, nt = 0;
        size_t cb = 0, tb = 0;
        for (int c = 0; c < pk.nchunks; c++)
            if (pk.kind[c] == (mt_kind)k)
                nc++, cb += pk.cap[c];
        for (int i = 0; i < NA; i++)
            if (kinds[i] == (mt_kind)k)
                nt++, tb += refs[i].bytes;
        st_ok &= st.chunks[k][MT_TIER_HOST] == nc && st.bytes[k][MT_TIER_HOST] == cb && st.tensors[k] == nt &&
                 st.tensor_bytes[k] == tb && st.chunks[k][MT_TIER_GPU] == 0;
        host += cb;
    }
    TL_OK(st_ok && st.host_bytes == host && st.host_peak == host && st.needed_bytes == host,
          "stats per kind match the allocations (%zu host bytes)", host);
    mt_destroy(pool);
}

/* a large gradient chunk (zeroed in parallel pieces) next to a parameter */
static void test_zero_large(void)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    mt_create(&(mt_config){.chunk_bytes = 6 * MIB}, &pool, &err);
    mt_ref p, g;
    mt_alloc(pool, MT_PARAM, 4096, &p, &err);
    mt_alloc(pool, MT_GRAD, 11 * MIB / 2 + 3, &g, &err);
    unsigned char *pp = mt_ptr(pool, p), *gp = mt_ptr(pool, g);
    memset(pp, 0xab, p.bytes);
    memset(gp, 0xcd, g.bytes);
    mt_zero(pool, MT_GRAD);
    bool gz = true, pk = true;
    for (size_t i = 0; i < g.bytes; i++)
        gz &= gp[i] == 0;
    for (size_t i = 0; i < p.bytes; i++)
        pk &= pp[i] == 0xab;
    TL_OK(gz && pk, "mt_zero on a 5.5 MiB gradient clears all of it and leaves the parameter");
    mt_destroy(pool);
}

static void test_budget(void)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    mt_ref r;
    /* nothing is allocated when the first chunk already exceeds the budget */
    mt_create(&(mt_config){.chunk_bytes = 32 * MIB, .host_budget = 64 * MIB}, &pool, &err);
    col_status s = mt_alloc(pool, MT_PARAM, 96 * MIB, &r, &err);
    TL_OK(s == COL_ENOMEM && r.chunk == -1 &&
              strcmp(err.msg, "memtier: host budget 64.0 MiB is too small: this model needs at least 96.0 MiB "
                              "(--cpu-mem)") == 0,
          "budget message: %s", err.msg);
    mt_destroy(pool);

    /* 1 MiB chunks, 2.5 MiB budget: two chunks fit, the third does not */
    mt_create(&(mt_config){.chunk_bytes = MIB, .host_budget = 5 * MIB / 2}, &pool, &err);
    mt_ref a, b, c;
    bool ok = mt_alloc(pool, MT_PARAM, 600000, &a, &err) == COL_OK && mt_alloc(pool, MT_GRAD, 600000, &b, &err) == COL_OK;
    ok &= mt_alloc(pool, MT_PARAM, 300000, &c, &err) == COL_OK && c.chunk == a.chunk; /* fits in chunk 0 */
    s = mt_alloc(pool, MT_PARAM, 600000, &r, &err);
    TL_OK(ok && s == COL_ENOMEM && r.chunk == -1 && strstr(err.msg, "host budget 2.5 MiB") &&
              strstr(err.msg, "needs at least 3.0 MiB"),
          "third chunk refused: %s", err.msg);
    /* later requests are still planned: a small param joins the refused chunk, a big grad needs one more */
    s = mt_alloc(pool, MT_PARAM, 1000, &r, &err);
    TL_OK(s == COL_ENOMEM && strstr(err.msg, "needs at least 3.0 MiB"), "request into the refused chunk: %s",
          err.msg);
    s = mt_alloc(pool, MT_GRAD, 600000, &r, &err);
    TL_OK(s == COL_ENOMEM && strstr(err.msg, "needs at least 4.0 MiB"), "the total keeps growing: %s", err.msg);
    ok = mt_alloc(pool, MT_OPTSTATE, 0, &r, &err) == COL_EINVAL;
    mt_pool_stats st;
    mt_stats(pool, &st);
    TL_OK(ok && st.host_bytes == 2 * MIB && st.needed_bytes == 4 * MIB && st.chunks[MT_PARAM][MT_TIER_HOST] == 1 &&
              st.chunks[MT_GRAD][MT_TIER_HOST] == 1 && st.tensors[MT_PARAM] == 2 && st.host_budget == 5 * MIB / 2,
          "stats after refusals: 2 MiB held, 4 MiB needed, refused chunks in no tier");
    mt_chunk_info ci;
    TL_OK(mt_chunk_count(pool) == 4 && mt_chunk_get(pool, 2, &ci, &err) == COL_OK && ci.tier == MT_TIER_NONE &&
              ci.ntensors == 2 && mt_ptr(pool, (mt_ref){2, 0, 8}) == NULL,
          "a refused chunk is planned without memory");
    mt_destroy(pool);
}

int main(void)
{
    test_small_layout();
    test_random();
    test_zero_large();
    test_budget();
    return tl_done();
}
