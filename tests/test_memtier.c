/* test_memtier.c - chunk packing, alignment, oversize tensors, the host
 * budget, pointer stability, zeroing and statistics; addresses of NVMe
 * chunks, the automatic chunk size, NVMe byte counts and queue depths. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memtier.h"
#include "nvme.h"
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
              strcmp(err.msg, "memtier: the host budget of 64.0 MiB is too small: this model needs at least "
                              "96.0 MiB") == 0,
          "budget message: %s", err.msg);
    TL_OK(err.settings == 1u << COL_SETTING_HOST_BUDGET, "the budget failure marks the host budget (0x%x)",
          err.settings);
    mt_destroy(pool);

    /* 1 MiB chunks, 2.5 MiB budget: two chunks fit, the third does not */
    mt_create(&(mt_config){.chunk_bytes = MIB, .host_budget = 5 * MIB / 2}, &pool, &err);
    mt_ref a, b, c;
    bool ok = mt_alloc(pool, MT_PARAM, 600000, &a, &err) == COL_OK && mt_alloc(pool, MT_GRAD, 600000, &b, &err) == COL_OK;
    ok &= mt_alloc(pool, MT_PARAM, 300000, &c, &err) == COL_OK && c.chunk == a.chunk; /* fits in chunk 0 */
    s = mt_alloc(pool, MT_PARAM, 600000, &r, &err);
    TL_OK(ok && s == COL_ENOMEM && r.chunk == -1 && strstr(err.msg, "host budget of 2.5 MiB") &&
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

/* ---- addresses of NVMe chunks ---- */

static char root[512]; /* a temporary directory for the NVMe tier */

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* the permissions /proc/self/maps gives the mapping holding p ("" when none) */
static void map_perms(const void *p, char perms[5])
{
    perms[0] = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char pr[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi) {
            memcpy(perms, pr, 5);
            break;
        }
    }
    if (f)
        fclose(f);
}

/* whether [p, p + n) is mapped at all (mincore refuses unmapped ranges with ENOMEM), without touching it */
static bool mapped(void *p, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    static unsigned char vec[4096];
    n = n < (size_t)page * sizeof vec ? n : (size_t)page * sizeof vec;
    return mincore(p, n, vec) == 0;
}

static void test_addresses(void)
{
    enum { NA = 60 };
    mt_pool *pool = NULL;
    col_err err = {0};
    /* params and grads on the host, optimizer states on NVMe; 4 KiB chunks */
    mt_config cfg = {.chunk_bytes = 4096, .nvme_dir = root, .nvme_kinds = 1u << MT_OPTSTATE};
    if (mt_create(&cfg, &pool, &err) != COL_OK) {
        TL_OK(false, "create a pool with an NVMe tier in %s: %s", root, err.msg);
        return;
    }
    static mt_ref refs[NA];
    static mt_kind kinds[NA];
    col_rng rng;
    col_rng_init(&rng, 5);
    bool ok = true;
    for (int i = 0; i < NA; i++) {
        kinds[i] = i % 3 == 0 ? MT_PARAM : MT_OPTSTATE;
        size_t bytes = 1 + col_rng_below(&rng, i % 7 == 6 ? 12000 : 1500); /* some oversize (own chunks) */
        ok &= mt_alloc(pool, kinds[i], bytes, &refs[i], &err) == COL_OK;
    }
    TL_OK(ok, "%d allocations, %d chunks, optimizer states on NVMe", NA, mt_chunk_count(pool));

    int nc = mt_chunk_count(pool), nnvme = 0, nhost = 0;
    bool nvme_ok = true, host_ok = true, disjoint = true;
    for (int c = 0; c < nc; c++) {
        mt_chunk_info ci;
        mt_chunk_get(pool, c, &ci, &err);
        char *a = mt_chunk_addr(pool, c);
        if (ci.tier == MT_TIER_NVME) {
            nnvme++;
            nvme_ok &= a && (uintptr_t)a % MT_ALIGN == 0 && !mt_chunk_host(pool, c) && mt_chunk_slots(pool, c) >= 1;
        } else {
            nhost++;
            host_ok &= ci.tier == MT_TIER_HOST && a && a == mt_chunk_host(pool, c);
        }
        for (int d = 0; d < c; d++) {
            mt_chunk_info di;
            mt_chunk_get(pool, d, &di, &err);
            char *b = mt_chunk_addr(pool, d);
            disjoint &= a + ci.capacity <= b || b + di.capacity <= a;
        }
    }
    TL_OK(nnvme >= 10 && nhost >= 5 && nvme_ok,
          "%d NVMe chunks: each has an address, MT_ALIGN-aligned, and no host copy (mt_chunk_host NULL)", nnvme);
    TL_OK(host_ok, "%d host chunks: mt_chunk_addr is the host memory", nhost);
    TL_OK(disjoint, "no two chunks' address ranges overlap (placeholders included)");

    bool ref_ok = true, loc_ok = true;
    for (int i = 0; i < NA; i++) {
        char *a = mt_addr(pool, refs[i]);
        bool on_nvme = kinds[i] == MT_OPTSTATE;
        ref_ok &= a == (char *)mt_chunk_addr(pool, refs[i].chunk) + refs[i].offset &&
                  (on_nvme ? mt_ptr(pool, refs[i]) == NULL : mt_ptr(pool, refs[i]) == a);
        int c = -1, c2 = -1;
        size_t off = 0, off2 = 0;
        loc_ok &= mt_locate(pool, a, &c, &off) && c == refs[i].chunk && off == refs[i].offset;
        loc_ok &= mt_locate(pool, a + refs[i].bytes - 1, &c2, &off2) && c2 == refs[i].chunk &&
                  off2 == refs[i].offset + refs[i].bytes - 1;
    }
    TL_OK(ref_ok, "mt_addr = chunk address + offset; mt_ptr NULL for NVMe tensors, the same address for host ones");
    TL_OK(loc_ok, "mt_locate maps the first and last byte of every tensor back to its chunk and offset");

    int c = -1;
    size_t off = 0;
    char *nv0 = NULL;
    size_t nv0_used = 0, nv0_cap = 0;
    for (int k = 0; k < nc && !nv0; k++) {
        mt_chunk_info ci;
        mt_chunk_get(pool, k, &ci, &err);
        if (ci.tier == MT_TIER_NVME && ci.used < ci.capacity)
            nv0 = mt_chunk_addr(pool, k), nv0_used = ci.used, nv0_cap = ci.capacity;
    }
    TL_OK(nv0 && !mt_locate(pool, nv0 + nv0_used, &c, &off) && !mt_locate(pool, nv0 - 1, &c, &off) &&
              !mt_locate(pool, &c, &c, &off) && !mt_locate(pool, NULL, &c, &off),
          "mt_locate: nothing past a chunk's used bytes, before it, on the stack or at NULL");
    TL_OK(mt_chunk_addr(pool, -1) == NULL && mt_chunk_addr(pool, nc) == NULL && mt_chunk_addr(NULL, 0) == NULL &&
              mt_addr(pool, (mt_ref){-1, 0, 8}) == NULL && mt_addr(pool, (mt_ref){nc, 0, 8}) == NULL &&
              mt_addr(pool, (mt_ref){refs[1].chunk, 0, 0}) == NULL &&
              mt_addr(pool, (mt_ref){refs[1].chunk, 4096, 8}) == NULL,
          "mt_chunk_addr / mt_addr: NULL out of range, for no bytes and past what was placed");
    char perms[5];
    map_perms(nv0, perms);
    TL_OK(strcmp(perms, "---p") == 0 && mapped(nv0, nv0_cap), "a placeholder is mapped without access (%s)", perms);
    mt_destroy(pool);
    TL_OK(!mapped(nv0, nv0_cap) && count_entries(root) == 0, "mt_destroy unmaps the placeholders, leaves %s empty",
          root);

    /* a chunk refused by the host budget has no address */
    mt_create(&(mt_config){.chunk_bytes = 4096, .host_budget = 4096}, &pool, &err);
    mt_ref a, b;
    mt_alloc(pool, MT_PARAM, 4000, &a, &err);
    col_status s = mt_alloc(pool, MT_PARAM, 4000, &b, &err);
    TL_OK(s == COL_ENOMEM && mt_chunk_count(pool) == 2 && mt_chunk_addr(pool, 0) == mt_chunk_host(pool, 0) &&
              mt_chunk_addr(pool, 0) && mt_chunk_addr(pool, 1) == NULL && mt_addr(pool, (mt_ref){1, 0, 8}) == NULL,
          "a planned chunk without memory (MT_TIER_NONE) has no address");
    mt_destroy(pool);
}

/* ---- the automatic chunk size ---- */

/* waste of a chunk size by the test's own packer: tail bytes of every chunk */
static size_t ref_waste(const size_t *sz, int n, size_t chunk)
{
    static packer pk;
    pack_init(&pk);
    for (int i = 0; i < n; i++)
        pack(&pk, chunk, MT_PARAM, sz[i]);
    size_t w = 0;
    for (int c = 0; c < pk.nchunks; c++)
        w += pk.cap[c] - pk.used[c];
    return w;
}

/* brute force over every MT_ALIGN multiple in [lo, hi]: the smallest size of least waste */
static size_t brute_best(const size_t *sz, int n, size_t lo, size_t hi, size_t *waste)
{
    size_t best = 0, bw = SIZE_MAX;
    for (size_t cs = lo; cs <= hi; cs += MT_ALIGN) {
        size_t w = ref_waste(sz, n, cs);
        if (w < bw)
            best = cs, bw = w;
    }
    *waste = bw;
    return best;
}

/* the pool's unused tail bytes after mt_alloc placed the list at chunk size cs */
static size_t pool_waste(const size_t *sz, int n, size_t cs, bool *ok)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    *ok = mt_create(&(mt_config){.chunk_bytes = cs}, &pool, &err) == COL_OK;
    for (int i = 0; i < n && *ok; i++) {
        mt_ref r;
        *ok &= mt_alloc(pool, MT_PARAM, sz[i], &r, &err) == COL_OK;
    }
    mt_pool_stats st;
    mt_stats(pool, &st);
    *ok &= st.chunk_bytes == cs;
    size_t w = 0;
    for (int c = 0; c < mt_chunk_count(pool); c++) {
        mt_chunk_info ci;
        mt_chunk_get(pool, c, &ci, &err);
        w += ci.capacity - ci.used;
    }
    mt_destroy(pool);
    return w;
}

static void test_chunk_auto(void)
{
    col_err err = {0};
    size_t cs = 0, w = 0;
    /* largest 1000 -> the search starts at 1024; max 5120: a range of 4096 bytes, so steps of 64 cover every size */
    const size_t hand[] = {1000, 300, 700, 64, 900, 130, 500, 1000, 20, 640, 333, 999, 64, 128, 700, 410};
    const int nh = (int)(sizeof hand / sizeof hand[0]);
    size_t bw, bc = brute_best(hand, nh, 1024, 5120, &bw);
    col_status s = mt_chunk_bytes_auto(hand, nh, 5120, &cs, &w, &err);
    TL_OK(s == COL_OK && cs == bc && w == bw,
          "hand-made list: %zu bytes wasting %zu (brute force over every 64-byte size: %zu wasting %zu; "
          "1024 wastes %zu, 5120 wastes %zu)",
          cs, w, bc, bw, ref_waste(hand, nh, 1024), ref_waste(hand, nh, 5120));
    TL_OK(bc != 1024 && bc != 5120, "the answer lies strictly inside the range");
    bool agree;
    size_t pw = pool_waste(hand, nh, cs, &agree);
    TL_OK(agree && pw == w, "mt_alloc at %zu bytes leaves %zu unused bytes (the search said %zu)", cs, pw, w);

    /* random lists: against brute force where the step is 64, against mt_alloc always */
    col_rng rng;
    col_rng_init(&rng, 11);
    static size_t sz[3000];
    bool brute_ok = true, pool_ok = true, lower_ok = true;
    int inside = 0;
    for (int t = 0; t < 40; t++) {
        int n = 1 + (int)col_rng_below(&rng, t < 30 ? 40 : 3000);
        size_t top = 64 + col_rng_below(&rng, t < 30 ? 3000 : 200000);
        size_t largest = 0;
        for (int i = 0; i < n; i++) {
            sz[i] = 1 + col_rng_below(&rng, col_rng_below(&rng, 4) == 0 ? top : top / 4 + 1);
            largest = sz[i] > largest ? sz[i] : largest;
        }
        size_t lo = (largest + 63) / 64 * 64;
        size_t max = t < 30 ? lo + 64 * col_rng_below(&rng, 65) + col_rng_below(&rng, 64) : lo * 4 + 100;
        if (mt_chunk_bytes_auto(sz, n, max, &cs, &w, &err) != COL_OK) {
            TL_OK(false, "list %d: %s", t, err.msg);
            return;
        }
        size_t hi = max / 64 * 64;
        if (t < 30) { /* range <= 4096 bytes: exact */
            bc = brute_best(sz, n, lo, hi, &bw);
            brute_ok &= cs == bc && w == bw;
            inside += bc != lo && bc != hi;
        } else { /* coarse steps: never better than every size, never worse than the ends */
            brute_best(sz, n, lo, hi, &bw);
            lower_ok &= w >= bw && w <= ref_waste(sz, n, lo) && w <= ref_waste(sz, n, hi) && cs >= lo && cs <= hi &&
                        cs % 64 == 0 && w == ref_waste(sz, n, cs);
        }
        pool_ok &= pool_waste(sz, n, cs, &agree) == w && agree;
    }
    TL_OK(brute_ok, "30 random lists, ranges up to 4096 bytes: size and waste equal brute force (%d answers inside "
                    "the range)", inside);
    TL_OK(lower_ok, "10 random lists of up to 3000 tensors, coarse steps: waste exact for the size chosen, at least "
                    "brute force's, at most either end's");
    TL_OK(pool_ok, "mt_alloc at the chosen size leaves exactly the waste reported, all 40 lists");

    /* the default range (32 MiB) for many tensors: time it */
    enum { NBIG = 5000 };
    static size_t big[NBIG];
    for (int i = 0; i < NBIG; i++)
        big[i] = 4 * (1 + col_rng_below(&rng, i % 50 == 0 ? 3 << 20 : 300000));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s = mt_chunk_bytes_auto(big, NBIG, 0, &cs, &w, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    size_t pw2 = pool_waste(big, NBIG, cs, &agree);
    TL_OK(s == COL_OK && cs <= MT_DEFAULT_CHUNK_BYTES && cs % 64 == 0 && pw2 == w && agree,
          "%d tensors, default range: %.2f MiB wasting %.2f MiB, in %.1f ms", NBIG, cs / 1048576.0, w / 1048576.0, ms);

    /* a single tensor: its own size rounded up; the tail is the rounding */
    size_t one = 4096, odd = 1000;
    TL_OK(mt_chunk_bytes_auto(&one, 1, 0, &cs, &w, &err) == COL_OK && cs == 4096 && w == 0,
          "one tensor of 4096 bytes: a 4096-byte chunk, no waste");
    TL_OK(mt_chunk_bytes_auto(&odd, 1, 0, &cs, &w, &err) == COL_OK && cs == 1024 && w == 24,
          "one tensor of 1000 bytes: a 1024-byte chunk, 24 bytes of rounding");
    /* a tensor larger than max_bytes: that size is the whole range */
    const size_t two[] = {100, 10000};
    s = mt_chunk_bytes_auto(two, 2, 4096, &cs, &w, &err);
    TL_OK(s == COL_OK && cs == 10048 && w == ref_waste(two, 2, 10048),
          "largest tensor above max_bytes: its rounded size (%zu), waste %zu", cs, w);
    TL_OK(mt_chunk_bytes_auto(two, 2, 0, &cs, NULL, &err) == COL_OK && cs == 10048, "waste may be NULL");
    /* 64 and 128 both waste nothing for two 64-byte tensors: the smaller wins */
    const size_t tie[] = {64, 64};
    s = mt_chunk_bytes_auto(tie, 2, 1024, &cs, &w, &err);
    TL_OK(s == COL_OK && cs == 64 && w == 0 && ref_waste(tie, 2, 128) == 0, "a tie goes to the smaller size (%zu)", cs);

    size_t zero[] = {64, 0, 64};
    TL_OK(mt_chunk_bytes_auto(hand, 0, 0, &cs, &w, &err) == COL_EINVAL, "n = 0: %s", err.msg);
    TL_OK(mt_chunk_bytes_auto(hand, -3, 0, &cs, &w, &err) == COL_EINVAL, "n < 0: %s", err.msg);
    TL_OK(mt_chunk_bytes_auto(NULL, 3, 0, &cs, &w, &err) == COL_EINVAL, "no sizes: %s", err.msg);
    TL_OK(mt_chunk_bytes_auto(hand, nh, 0, NULL, &w, &err) == COL_EINVAL, "no place for the size: %s", err.msg);
    TL_OK(mt_chunk_bytes_auto(zero, 3, 0, &cs, &w, &err) == COL_EINVAL && strstr(err.msg, "tensor 1 of 0 bytes"),
          "a zero size: %s", err.msg);
    TL_OK(mt_chunk_bytes_auto(hand, nh, SIZE_MAX, &cs, &w, &err) == COL_EINVAL, "a huge max_bytes: %s", err.msg);
}

/* ---- NVMe: bytes read, queue depths ---- */

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 37 + i * 13 + (i >> 9));
}

static void test_nvme_bytes_read(void)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    if (mt_create(&(mt_config){.chunk_bytes = 8192, .nvme_dir = root, .nvme_kinds = 1u << MT_GRAD}, &pool, &err) !=
        COL_OK) {
        TL_OK(false, "create: %s", err.msg);
        return;
    }
    mt_ref a, b, p;
    mt_alloc(pool, MT_GRAD, 5000, &a, &err);
    mt_alloc(pool, MT_GRAD, 5000, &b, &err); /* a second chunk */
    mt_alloc(pool, MT_PARAM, 5000, &p, &err);
    size_t n = mt_chunk_io_bytes(pool, a.chunk);
    unsigned char *src = mt_nvme_alloc_buffer(n), *dst = mt_nvme_alloc_buffer(n);
    fill(src, n, 3);
    uint64_t r0 = mt_nvme_bytes_read(pool), w0 = mt_nvme_bytes_written(pool);
    bool ok = mt_chunk_read(pool, b.chunk, dst, &err) == COL_OK; /* never written: zeros, no I/O */
    uint64_t r1 = mt_nvme_bytes_read(pool);
    ok &= mt_chunk_write(pool, a.chunk, src, &err) == COL_OK;
    uint64_t r2 = mt_nvme_bytes_read(pool), w2 = mt_nvme_bytes_written(pool);
    ok &= mt_chunk_read(pool, a.chunk, dst, &err) == COL_OK && memcmp(src, dst, n) == 0;
    uint64_t r3 = mt_nvme_bytes_read(pool);
    TL_OK(ok && n == 8192 && r0 == 0 && w0 == 0 && r1 == 0 && r2 == 0 && w2 == n && r3 == n,
          "bytes read: 0 for an unwritten chunk and after a write, %zu after reading the chunk back (%s)", n, err.msg);
    ok = mt_chunk_read(pool, a.chunk, dst, &err) == COL_OK;
    TL_OK(ok && mt_nvme_bytes_read(pool) == 2 * n && mt_nvme_bytes_written(pool) == n, "a second read counts again");
    mt_destroy(pool);
    mt_create(NULL, &pool, &err);
    TL_OK(mt_nvme_bytes_read(pool) == 0 && mt_nvme_bytes_read(NULL) == 0, "0 without an NVMe tier");
    mt_destroy(pool);
    free(src);
    free(dst);
}

/* fails the completion of writes to one slot */
typedef struct {
    int fail_slot;
    int completions;
} qd_faults;

static void after_complete(void *user, int op, int slot, void *buf, int *res)
{
    qd_faults *f = user;
    f->completions++;
    if (op == MT_NVME_OP_WRITE && slot == f->fail_slot)
        *res = -EIO;
}

/* two chunks (1 slot, and 3 slots) written with both ios in flight at once, then read back the same way */
static void test_queue_depth(int qd)
{
    mt_pool *pool = NULL;
    col_err err = {0};
    mt_config cfg = {.chunk_bytes = 4096, .nvme_dir = root, .nvme_kinds = 1u << MT_OPTSTATE, .nvme_queue_depth = qd};
    if (mt_create(&cfg, &pool, &err) != COL_OK) {
        TL_OK(false, "queue depth %d: %s", qd, err.msg);
        return;
    }
    mt_ref a, b;
    mt_alloc(pool, MT_OPTSTATE, 4000, &a, &err);
    mt_alloc(pool, MT_OPTSTATE, 3 * 4096, &b, &err);
    size_t na = mt_chunk_io_bytes(pool, a.chunk), nb = mt_chunk_io_bytes(pool, b.chunk);
    unsigned char *sa = mt_nvme_alloc_buffer(na), *sb = mt_nvme_alloc_buffer(nb);
    unsigned char *da = mt_nvme_alloc_buffer(na), *db = mt_nvme_alloc_buffer(nb);
    fill(sa, na, 1);
    fill(sb, nb, 2);
    mt_chunk_io ia, ib;
    bool ok = mt_chunk_slots(pool, a.chunk) == 1 && mt_chunk_slots(pool, b.chunk) == 3;
    ok &= mt_chunk_io_start(pool, a.chunk, sa, true, &ia, &err) == COL_OK;
    ok &= mt_chunk_io_start(pool, b.chunk, sb, true, &ib, &err) == COL_OK;
    ok &= mt_chunk_io_wait(pool, &ib, &err) == COL_OK && mt_chunk_io_wait(pool, &ia, &err) == COL_OK;
    TL_OK(ok, "queue depth %d: writes of a 1-slot and a 3-slot chunk in flight together (%s)", qd, err.msg);
    ok = mt_chunk_io_start(pool, b.chunk, db, false, &ib, &err) == COL_OK;
    ok &= mt_chunk_io_start(pool, a.chunk, da, false, &ia, &err) == COL_OK;
    ok &= mt_chunk_io_wait(pool, &ia, &err) == COL_OK && mt_chunk_io_wait(pool, &ib, &err) == COL_OK;
    TL_OK(ok && !memcmp(sa, da, na) && !memcmp(sb, db, nb) && mt_nvme_bytes_read(pool) == na + nb &&
              mt_nvme_bytes_written(pool) == na + nb,
          "queue depth %d: both read back intact (%s)", qd, err.msg);
    ok = mt_chunk_read(pool, b.chunk, db, &err) == COL_OK && !memcmp(sb, db, nb);
    TL_OK(ok, "queue depth %d: synchronous read", qd);
    mt_destroy(pool);
    free(sa), free(sb), free(da), free(db);
}

static void test_queue_depth_errors(void)
{
    mt_pool *pool = (mt_pool *)1;
    col_err err = {0};
    const int bad[] = {-1, MT_NVME_MAX_QUEUE_DEPTH + 1};
    for (int i = 0; i < 2; i++) {
        mt_config cfg = {.chunk_bytes = 4096, .nvme_dir = root, .nvme_kinds = 1u << MT_OPTSTATE,
                         .nvme_queue_depth = bad[i]};
        col_status s = mt_create(&cfg, &pool, &err);
        TL_OK(s == COL_EINVAL && pool == NULL && strstr(err.msg, "queue depth") && count_entries(root) == 0,
              "queue depth %d refused: %s", bad[i], err.msg);
    }
    mt_config cfg = {.nvme_queue_depth = -1};
    TL_OK(mt_create(&cfg, &pool, &err) == COL_OK, "without an NVMe tier the queue depth is not used");
    mt_destroy(pool);

    /* queue depth 1: a failed write finished early (to make room for the next io) reports at its own wait */
    qd_faults f = {.fail_slot = 0};
    mt_nvme_faults nf = {.after_complete = after_complete, .user = &f};
    cfg = (mt_config){.chunk_bytes = 4096, .nvme_dir = root, .nvme_kinds = 1u << MT_OPTSTATE, .nvme_queue_depth = 1,
                      .nvme_faults = &nf};
    if (mt_create(&cfg, &pool, &err) != COL_OK) {
        TL_OK(false, "create: %s", err.msg);
        return;
    }
    mt_ref a, b;
    mt_alloc(pool, MT_OPTSTATE, 4096, &a, &err);
    mt_alloc(pool, MT_OPTSTATE, 4096, &b, &err);
    unsigned char *sa = mt_nvme_alloc_buffer(4096), *sb = mt_nvme_alloc_buffer(4096);
    fill(sa, 4096, 5);
    fill(sb, 4096, 6);
    mt_chunk_io ia, ib;
    bool started = mt_chunk_io_start(pool, a.chunk, sa, true, &ia, &err) == COL_OK;
    int before = f.completions;
    started &= mt_chunk_io_start(pool, b.chunk, sb, true, &ib, &err) == COL_OK;
    int finished_early = f.completions - before;
    col_err eb = {0}, ea = {0};
    col_status sbs = mt_chunk_io_wait(pool, &ib, &eb), sas = mt_chunk_io_wait(pool, &ia, &ea);
    TL_OK(started && finished_early == 1 && sbs == COL_OK && sas == COL_EIO && strstr(ea.msg, "slot 0") &&
              strstr(ea.msg, "chunk 0"),
          "queue depth 1: the first write was finished to start the second; its error comes from its own wait: %s",
          ea.msg);
    unsigned char *d = mt_nvme_alloc_buffer(4096);
    TL_OK(mt_chunk_read(pool, b.chunk, d, &err) == COL_OK && !memcmp(d, sb, 4096), "the second chunk reads back");
    mt_destroy(pool);
    free(sa), free(sb), free(d);
}

int main(void)
{
    test_small_layout();
    test_random();
    test_zero_large();
    test_budget();
    test_chunk_auto();
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/test_memtier.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        printf("Bail out! cannot create a directory under %s\n", tmp && *tmp ? tmp : "/tmp");
        return 1;
    }
    test_addresses();
    test_nvme_bytes_read();
    test_queue_depth(1);
    test_queue_depth(64);
    test_queue_depth_errors();
    TL_OK(count_entries(root) == 0 && rmdir(root) == 0, "test directory %s left empty", root);
    return tl_done();
}
