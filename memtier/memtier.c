/* memtier.c - the chunk store (layout rules and tiers in memtier.h). */
#include "memtier.h"
#include "units.h"

#include "nvme.h"
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    mt_kind kind;
    mt_tier tier;
    bool dirty;
    size_t capacity, used;
    int ntensors;
    void *host; /* MT_ALIGN-aligned, capacity bytes; NULL when tier is MT_TIER_NONE or NVME */
    void *addr; /* mt_chunk_addr: host, or (NVME) a PROT_NONE reservation of capacity bytes */
    int slot, nslots; /* NVME: its slots in the store */
    bool on_disk;     /* NVME: written (else it reads as zeros) */
    bool pinned;      /* host memory page-locked by mt_pin_host */
} mt_chunk;

struct mt_pool {
    size_t chunk_bytes, host_budget;
    size_t cap_mult;     /* every chunk's capacity is a multiple of it (mt_config.capacity_multiple) */
    mt_chunk *chunks;
    int nchunks, cap;
    int open[MT_NKINDS]; /* chunk taking the next tensor of each kind, -1 for none */
    int tensors[MT_NKINDS];
    size_t tensor_bytes[MT_NKINDS];
    size_t host_bytes, host_peak, needed_bytes;
    mt_nvme *nv;         /* the NVMe tier, or NULL */
    unsigned nvme_kinds;
    uint64_t nvme_max;
    size_t slot_bytes;
    int next_slot;
    /* the pool's requests to the store, so that a full queue never refuses a transfer: when all
     * qd are outstanding, the oldest is finished early and its result kept for its own wait */
    int qd;
    mt_nvme_req *pending; /* outstanding, oldest first */
    int npending;
    struct mt_done {
        mt_nvme_req req;
        col_err err; /* its result (code and message) */
    } *done;
    int ndone, done_cap;
    const col_backend *pin_be; /* whose host_pin page-locked chunks (mt_pin_host), or NULL */
};


static size_t align_up(size_t x) { return (x + (MT_ALIGN - 1)) & ~(size_t)(MT_ALIGN - 1); }

/* The placement rule (memtier.h), shared by mt_alloc and mt_chunk_bytes_auto: where a tensor of
 * `bytes` goes when the kind's open chunk (of chunk_bytes) ends at `used`, or no chunk is open. */
typedef struct {
    bool fresh;      /* it starts a new chunk, at offset 0 */
    size_t off;      /* else its offset in the open chunk */
    size_t cap;      /* fresh: the new chunk's capacity */
    bool open_after; /* fresh: whether the next tensor may join the new chunk (not for an oversize one) */
} mt_place;

static mt_place place_rule(size_t chunk_bytes, size_t cap_mult, bool open, size_t used, size_t bytes)
{
    if (open) {
        size_t off = align_up(used);
        if (off <= chunk_bytes && bytes <= chunk_bytes - off)
            return (mt_place){.off = off};
    }
    bool oversize = bytes > chunk_bytes;
    size_t cap = oversize ? (bytes + cap_mult - 1) / cap_mult * cap_mult : chunk_bytes;
    return (mt_place){.fresh = true, .cap = cap, .open_after = !oversize};
}

const char *mt_kind_name(mt_kind kind)
{
    switch (kind) {
    case MT_PARAM: return "param";
    case MT_GRAD: return "grad";
    case MT_OPTSTATE: return "optstate";
    case MT_NKINDS: break;
    }
    return "unknown";
}

const char *mt_link_name(mt_link link)
{
    static const char *const names[MT_NLINKS] = {[MT_LINK_H2C] = "host->compute", [MT_LINK_C2H] = "compute->host",
                                                 [MT_LINK_H2N] = "host->nvme", [MT_LINK_N2H] = "nvme->host"};
    return link >= 0 && link < MT_NLINKS ? names[link] : "?";
}

const char *mt_tier_name(mt_tier tier)
{
    switch (tier) {
    case MT_TIER_HOST: return "host";
    case MT_TIER_GPU: return "gpu";
    case MT_TIER_NVME: return "nvme";
    case MT_TIER_NONE: return "none";
    case MT_NTIERS: break;
    }
    return "unknown";
}

col_status mt_create(const mt_config *cfg, mt_pool **pool, col_err *e)
{
    if (!pool)
        return col_err_set(e, COL_EINVAL, "memtier: mt_create needs a place for the pool");
    *pool = NULL;
    size_t chunk = cfg && cfg->chunk_bytes ? cfg->chunk_bytes : MT_DEFAULT_CHUNK_BYTES;
    if (chunk > SIZE_MAX / 4)
        return col_err_set_on(e, COL_SETTING_CHUNK_SIZE, COL_EINVAL, "memtier: chunk size %zu bytes is too large",
                              chunk);
    mt_pool *p = calloc(1, sizeof *p);
    if (!p)
        return col_err_set(e, COL_ENOMEM, "memtier: out of host memory creating a pool");
    size_t mult = cfg && cfg->capacity_multiple ? cfg->capacity_multiple : MT_ALIGN;
    if (mult % MT_ALIGN || mult > chunk) {
        free(p);
        return col_err_set(e, COL_EINVAL, "memtier: a capacity multiple of %zu bytes (a multiple of %d up to the chunk "
                           "size)", mult, MT_ALIGN);
    }
    p->cap_mult = mult;
    p->chunk_bytes = (chunk + mult - 1) / mult * mult;
    p->host_budget = cfg ? cfg->host_budget : 0;
    for (int k = 0; k < MT_NKINDS; k++)
        p->open[k] = -1;
    if (cfg && cfg->nvme_dir && cfg->nvme_kinds) {
        p->slot_bytes = (p->chunk_bytes + MT_NVME_ALIGN - 1) / MT_NVME_ALIGN * MT_NVME_ALIGN;
        mt_nvme_config nc = {.dir = cfg->nvme_dir, .max_bytes = cfg->nvme_max, .slot_bytes = p->slot_bytes,
                             .queue_depth = cfg->nvme_queue_depth, .faults = cfg->nvme_faults};
        col_status st = mt_nvme_open(&nc, &p->nv, e);
        if (st != COL_OK) {
            free(p);
            return st;
        }
        p->nvme_kinds = cfg->nvme_kinds;
        p->nvme_max = cfg->nvme_max;
        mt_nvme_stats ns;
        mt_nvme_stats_get(p->nv, &ns);
        p->qd = ns.queue_depth;
        p->pending = malloc((size_t)p->qd * sizeof *p->pending);
        if (!p->pending) {
            mt_nvme_close(p->nv);
            free(p);
            return col_err_set(e, COL_ENOMEM, "memtier: out of host memory creating a pool");
        }
    }
    *pool = p;
    return COL_OK;
}

/* Host memory for a chunk, zero-filled. From 1 MiB up it is mapped on its
 * own: it goes back to the system when freed (a freed heap block of that
 * size could stay resident among others), and its pages count only once
 * touched. Smaller ones come from aligned_alloc. */
#define HOST_MAP_MIN ((size_t)1 << 20)

static void *host_alloc(size_t capacity)
{
    if (capacity >= HOST_MAP_MIN) {
        void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = aligned_alloc(MT_ALIGN, capacity);
    if (p)
        memset(p, 0, capacity);
    return p;
}

static void host_free(void *p, size_t capacity)
{
    if (p && capacity >= HOST_MAP_MIN)
        munmap(p, capacity);
    else
        free(p);
}

size_t mt_pin_host(mt_pool *pool, const col_backend *be, unsigned kinds)
{
    if (!be || !col_mem_async(be->mem) || (pool->pin_be && pool->pin_be != be))
        return 0;
    size_t pinned = 0;
    for (int i = 0; i < pool->nchunks; i++) {
        mt_chunk *c = &pool->chunks[i];
        if (!c->pinned && c->host && c->tier == MT_TIER_HOST && (kinds >> c->kind & 1u))
            c->pinned = be->mem->host_pin(be, c->host, c->capacity, NULL) == COL_OK;
        pinned += c->pinned ? c->capacity : 0;
    }
    if (pinned)
        pool->pin_be = be;
    return pinned;
}

void mt_destroy(mt_pool *pool)
{
    if (!pool)
        return;
    for (int i = 0; i < pool->nchunks; i++) {
        const mt_chunk *c = &pool->chunks[i];
        if (c->pinned)
            pool->pin_be->mem->host_unpin(pool->pin_be, c->host);
        host_free(c->host, c->capacity);
        if (c->tier == MT_TIER_NVME && c->addr)
            munmap(c->addr, c->capacity);
    }
    mt_nvme_close(pool->nv); /* waits for what is in flight; the scratch file goes with it */
    free(pool->pending);
    free(pool->done);
    free(pool->chunks);
    free(pool);
}

/* Appends a chunk of `capacity` bytes for `kind`; gives it host memory when
 * the budget allows (tier HOST), otherwise plans it without memory (tier
 * NONE). Returns its index, or -1 when the chunk table or the host memory
 * cannot be allocated. */
static int new_chunk(mt_pool *p, mt_kind kind, size_t capacity, col_err *e)
{
    if (p->nchunks == p->cap) {
        int ncap = p->cap ? 2 * p->cap : 16;
        mt_chunk *nc = realloc(p->chunks, (size_t)ncap * sizeof *nc);
        if (!nc) {
            col_err_set(e, COL_ENOMEM, "memtier: out of host memory growing the chunk table");
            return -1;
        }
        p->chunks = nc;
        p->cap = ncap;
    }
    mt_chunk c = {.kind = kind, .tier = MT_TIER_NONE, .capacity = capacity};
    if (p->nv && (p->nvme_kinds & (1u << kind))) { /* a chunk of the NVMe tier: slots, no host memory */
        c.nslots = (int)((capacity + p->slot_bytes - 1) / p->slot_bytes);
        uint64_t end = (uint64_t)(p->next_slot + c.nslots) * p->slot_bytes;
        if (p->nvme_max && end > p->nvme_max) {
            char have[32], need[32];
            col_fmt_bytes(have, sizeof have, p->nvme_max);
            col_fmt_bytes(need, sizeof need, end);
            col_err_set_on(e, COL_SETTING_NVME_MAX, COL_ENOMEM, "memtier: the NVMe tier's size limit of %s is too "
                           "small: this model needs at least %s there", have, need);
            return -1;
        }
        /* its address: reserved, never backed (any access faults) */
        c.addr = mmap(NULL, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (c.addr == MAP_FAILED) {
            char cb[COL_BYTES_STR];
            col_err_set(e, COL_ENOMEM, "memtier: out of address space reserving a %s chunk of %s on the NVMe tier",
                        mt_kind_name(kind), col_fmt_bytes(cb, sizeof cb, capacity));
            return -1;
        }
        c.slot = p->next_slot;
        p->next_slot += c.nslots;
        c.tier = MT_TIER_NVME;
        p->chunks[p->nchunks] = c;
        return p->nchunks++;
    }
    bool fits = !p->host_budget || (p->host_bytes <= p->host_budget && capacity <= p->host_budget - p->host_bytes);
    if (fits) {
        c.host = host_alloc(capacity);
        if (!c.host) {
            char cb[COL_BYTES_STR];
            col_err_set(e, COL_ENOMEM, "memtier: out of host memory allocating a %s chunk of %s",
                        mt_kind_name(kind), col_fmt_bytes(cb, sizeof cb, capacity));
            return -1;
        }
        c.addr = c.host;
        c.tier = MT_TIER_HOST;
        p->host_bytes += capacity;
        if (p->host_bytes > p->host_peak)
            p->host_peak = p->host_bytes;
    }
    p->needed_bytes += capacity;
    p->chunks[p->nchunks] = c;
    return p->nchunks++;
}

col_status mt_alloc(mt_pool *pool, mt_kind kind, size_t bytes, mt_ref *ref, col_err *e)
{
    if (ref)
        *ref = (mt_ref){.chunk = -1};
    if (!pool || !ref)
        return col_err_set(e, COL_EINVAL, "memtier: mt_alloc needs a pool and a ref");
    if ((int)kind < 0 || kind >= MT_NKINDS)
        return col_err_set(e, COL_EINVAL, "memtier: unknown storage kind %d", (int)kind);
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return col_err_set(e, COL_EINVAL, "memtier: cannot allocate a %s tensor of %zu bytes", mt_kind_name(kind),
                           bytes);
    /* the open chunk of this kind (always chunk_bytes: an oversize chunk is never open), if the tensor
     * fits after its last one; else a new chunk */
    int ci = pool->open[kind];
    mt_place pl = place_rule(pool->chunk_bytes, pool->cap_mult, ci >= 0, ci >= 0 ? pool->chunks[ci].used : 0, bytes);
    if (pl.fresh) {
        ci = new_chunk(pool, kind, pl.cap, e);
        if (ci < 0)
            return COL_ENOMEM;
        pool->open[kind] = pl.open_after ? ci : -1;
    }
    size_t off = pl.off;
    mt_chunk *c = &pool->chunks[ci];
    c->used = off + bytes;
    c->ntensors++;
    if (c->tier == MT_TIER_NONE)
    {
        char have[32], need[32];
        col_fmt_bytes(have, sizeof have, pool->host_budget);
        col_fmt_bytes(need, sizeof need, pool->needed_bytes);
        return col_err_set_on(e, COL_SETTING_HOST_BUDGET, COL_ENOMEM,
                              "memtier: the host budget of %s is too small: this model needs at least %s", have, need);
    }
    pool->tensors[kind]++;
    pool->tensor_bytes[kind] += bytes;
    *ref = (mt_ref){.chunk = ci, .offset = off, .bytes = bytes};
    return COL_OK;
}

/* ref's bytes in its chunk's host memory (addr false) or at the chunk's
 * address (addr true); NULL when ref is not an allocation of pool or the
 * chunk has no such memory */
static void *ref_at(const mt_pool *pool, mt_ref ref, bool addr)
{
    if (!pool || ref.chunk < 0 || ref.chunk >= pool->nchunks)
        return NULL;
    const mt_chunk *c = &pool->chunks[ref.chunk];
    char *base = addr ? c->addr : c->host;
    if (!base || ref.bytes == 0 || ref.offset > c->used || ref.bytes > c->used - ref.offset)
        return NULL;
    return base + ref.offset;
}

void *mt_ptr(const mt_pool *pool, mt_ref ref) { return ref_at(pool, ref, false); }

void *mt_chunk_addr(const mt_pool *pool, int chunk)
{
    return pool && chunk >= 0 && chunk < pool->nchunks ? pool->chunks[chunk].addr : NULL;
}

void *mt_addr(const mt_pool *pool, mt_ref ref) { return ref_at(pool, ref, true); }

col_status mt_chunk_bytes_auto(const size_t *tensor_bytes, int n, size_t max_bytes, size_t *chunk_bytes,
                               size_t *waste, col_err *e)
{
    if (!tensor_bytes || n <= 0 || !chunk_bytes)
        return col_err_set(e, COL_EINVAL, "memtier: mt_chunk_bytes_auto needs tensor sizes (%d given) and a place "
                           "for the chunk size", n);
    size_t largest = 0;
    for (int i = 0; i < n; i++) {
        if (tensor_bytes[i] == 0 || tensor_bytes[i] > SIZE_MAX / 4)
            return col_err_set(e, COL_EINVAL, "memtier: tensor %d of %zu bytes cannot be placed in a chunk", i,
                               tensor_bytes[i]);
        if (tensor_bytes[i] > largest)
            largest = tensor_bytes[i];
    }
    size_t hi = max_bytes ? max_bytes : MT_DEFAULT_CHUNK_BYTES;
    if (hi > SIZE_MAX / 4)
        return col_err_set(e, COL_EINVAL, "memtier: chunk size %zu bytes is too large", hi);
    size_t lo = align_up(largest);
    hi = hi / MT_ALIGN * MT_ALIGN; /* the sizes a pool can have: multiples of MT_ALIGN */
    if (hi < lo)
        hi = lo;
    size_t step = align_up((hi - lo) / 64);
    if (step < MT_ALIGN)
        step = MT_ALIGN;
    size_t best = 0, best_waste = SIZE_MAX;
    for (size_t cs = lo;; cs = cs > hi - step ? hi : cs + step) { /* lo, lo + step, ..., and hi itself */
        /* the tail bytes of every chunk closed so far, then of the last */
        size_t w = 0, cap = 0, used = 0;
        bool open = false;
        for (int i = 0; i < n && w < best_waste; i++) {
            mt_place pl = place_rule(cs, MT_ALIGN, open, used, tensor_bytes[i]);
            if (pl.fresh) {
                w += cap - used; /* 0 before the first chunk */
                cap = pl.cap;
                open = pl.open_after;
            }
            used = pl.off + tensor_bytes[i];
        }
        w += cap - used;
        if (w < best_waste) /* ties keep the smaller size */
            best = cs, best_waste = w;
        if (cs == hi)
            break;
    }
    *chunk_bytes = best;
    if (waste)
        *waste = best_waste;
    return COL_OK;
}

#define ZERO_PIECE ((size_t)1 << 20)

void mt_zero(mt_pool *pool, mt_kind kind)
{
    if (!pool || (int)kind < 0 || kind >= MT_NKINDS)
        return;
    for (int i = 0; i < pool->nchunks; i++) {
        mt_chunk *c = &pool->chunks[i];
        if (c->kind == kind && c->tier == MT_TIER_NVME)
            c->on_disk = false; /* reads as zeros again */
        if (c->kind != kind || !c->host)
            continue;
        /* only [0, used) was ever handed out; 1 MiB pieces across threads */
        char *base = c->host;
        size_t used = c->used;
        int64_t npiece = (int64_t)((used + ZERO_PIECE - 1) / ZERO_PIECE);
#pragma omp parallel for schedule(static) if (npiece > 4)
        for (int64_t k = 0; k < npiece; k++) {
            size_t lo = (size_t)k * ZERO_PIECE;
            size_t len = used - lo < ZERO_PIECE ? used - lo : ZERO_PIECE;
            memset(base + lo, 0, len);
        }
        c->dirty = true;
    }
}

void mt_stats(const mt_pool *pool, mt_pool_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!pool)
        return;
    s->chunk_bytes = pool->chunk_bytes;
    s->host_budget = pool->host_budget;
    for (int i = 0; i < pool->nchunks; i++) {
        const mt_chunk *c = &pool->chunks[i];
        if (c->tier == MT_TIER_NONE)
            continue;
        s->chunks[c->kind][c->tier]++;
        s->bytes[c->kind][c->tier] += c->capacity;
    }
    for (int k = 0; k < MT_NKINDS; k++) {
        s->tensors[k] = pool->tensors[k];
        s->tensor_bytes[k] = pool->tensor_bytes[k];
    }
    s->host_bytes = pool->host_bytes;
    s->host_peak = pool->host_peak;
    s->needed_bytes = pool->needed_bytes;
}

int mt_chunk_count(const mt_pool *pool) { return pool ? pool->nchunks : 0; }

col_status mt_chunk_get(const mt_pool *pool, int idx, mt_chunk_info *info, col_err *e)
{
    if (!pool || !info || idx < 0 || idx >= pool->nchunks)
        return col_err_set(e, COL_EINVAL, "memtier: chunk %d does not exist (pool has %d chunks)", idx,
                           pool ? pool->nchunks : 0);
    const mt_chunk *c = &pool->chunks[idx];
    *info = (mt_chunk_info){.kind = c->kind, .tier = c->tier, .dirty = c->dirty, .capacity = c->capacity,
                            .used = c->used, .ntensors = c->ntensors};
    return COL_OK;
}

void mt_mark_dirty(mt_pool *pool, int chunk)
{
    if (pool && chunk >= 0 && chunk < pool->nchunks)
        pool->chunks[chunk].dirty = true;
}

void mt_mark_clean(mt_pool *pool, int chunk)
{
    if (pool && chunk >= 0 && chunk < pool->nchunks)
        pool->chunks[chunk].dirty = false;
}

bool mt_locate(const mt_pool *pool, const void *ptr, int *chunk, size_t *offset)
{
    const char *c = ptr;
    for (int i = 0; pool && c && i < pool->nchunks; i++) {
        const char *h = pool->chunks[i].addr;
        if (h && c >= h && c < h + pool->chunks[i].used) {
            *chunk = i;
            *offset = (size_t)(c - h);
            return true;
        }
    }
    return false;
}

void *mt_chunk_host(const mt_pool *pool, int chunk)
{
    return pool && chunk >= 0 && chunk < pool->nchunks ? pool->chunks[chunk].host : NULL;
}

size_t mt_chunk_io_bytes(const mt_pool *pool, int chunk)
{
    if (!pool || chunk < 0 || chunk >= pool->nchunks)
        return 0;
    const mt_chunk *c = &pool->chunks[chunk];
    return c->tier == MT_TIER_NVME ? (size_t)c->nslots * pool->slot_bytes : c->capacity;
}

static col_status chunk_error(mt_pool *pool, int chunk, col_status st, col_err *e)
{
    col_err_prefix(e, "memtier: %s chunk %d on the NVMe tier", mt_kind_name(pool->chunks[chunk].kind), chunk);
    return st;
}

int mt_chunk_slots(const mt_pool *pool, int chunk)
{
    if (!pool || chunk < 0 || chunk >= pool->nchunks || pool->chunks[chunk].tier != MT_TIER_NVME)
        return 0;
    return pool->chunks[chunk].nslots;
}

/* Room in the store's queue for one more request: when all qd are outstanding, finishes the oldest
 * (another io's, or an earlier slot of this one) and keeps its result for finish(). */
static col_status make_room(mt_pool *pool, col_err *e)
{
    if (pool->npending < pool->qd)
        return COL_OK;
    if (pool->ndone == pool->done_cap) {
        int ncap = pool->done_cap ? 2 * pool->done_cap : 4;
        struct mt_done *nd = realloc(pool->done, (size_t)ncap * sizeof *nd);
        if (!nd)
            return col_err_set(e, COL_ENOMEM, "memtier: out of host memory waiting for NVMe transfers");
        pool->done = nd;
        pool->done_cap = ncap;
    }
    struct mt_done *d = &pool->done[pool->ndone++];
    d->req = pool->pending[0];
    col_err_clear(&d->err);
    d->err.code = mt_nvme_wait(pool->nv, d->req, &d->err);
    memmove(pool->pending, pool->pending + 1, (size_t)--pool->npending * sizeof *pool->pending);
    return COL_OK;
}

/* Finishes one of the pool's requests: its kept result when it was finished early, else waits. */
static col_status finish(mt_pool *pool, mt_nvme_req req, col_err *e)
{
    for (int i = 0; i < pool->ndone; i++)
        if (pool->done[i].req == req) {
            col_status st = pool->done[i].err.code;
            if (st != COL_OK)
                col_err_copy(e, &pool->done[i].err);
            pool->done[i] = pool->done[--pool->ndone];
            return st;
        }
    for (int i = 0; i < pool->npending; i++)
        if (pool->pending[i] == req) {
            memmove(pool->pending + i, pool->pending + i + 1, (size_t)(pool->npending - i - 1) * sizeof *pool->pending);
            pool->npending--;
            break;
        }
    return mt_nvme_wait(pool->nv, req, e);
}

/* submits slots [k0, k1) of an NVMe chunk (at most MT_CHUNK_IO_MAX) */
static col_status submit(mt_pool *pool, mt_chunk *c, int k0, int k1, void *buf, bool write, uint64_t *req, int *n,
                         col_err *e)
{
    col_status st = COL_OK;
    *n = 0;
    for (int k = k0; k < k1 && st == COL_OK; k++) {
        char *b = (char *)buf + (size_t)k * pool->slot_bytes;
        st = make_room(pool, e);
        if (st == COL_OK)
            st = write ? mt_nvme_write(pool->nv, c->slot + k, b, &req[*n], e)
                       : mt_nvme_read(pool->nv, c->slot + k, b, &req[*n], e);
        if (st == COL_OK)
            pool->pending[pool->npending++] = req[(*n)++];
    }
    return st;
}

/* waits for every request, keeping the first error */
static col_status wait_all(mt_pool *pool, const uint64_t *req, int n, col_status st, col_err *e)
{
    for (int i = 0; i < n; i++) {
        col_err e2 = {0};
        col_status w = finish(pool, req[i], &e2);
        if (w != COL_OK && st == COL_OK)
            st = col_err_copy(e, &e2);
    }
    return st;
}

col_status mt_chunk_io_start(mt_pool *pool, int chunk, void *buf, bool write, mt_chunk_io *io, col_err *e)
{
    *io = (mt_chunk_io){.chunk = chunk, .write = write};
    if (!pool || chunk < 0 || chunk >= pool->nchunks || pool->chunks[chunk].tier != MT_TIER_NVME)
        return col_err_set(e, COL_EINVAL, "memtier: chunk %d is not on the NVMe tier", chunk);
    mt_chunk *c = &pool->chunks[chunk];
    if (!write && !c->on_disk) { /* never written: zeros, no I/O */
        memset(buf, 0, (size_t)c->nslots * pool->slot_bytes);
        return COL_OK;
    }
    col_status st = COL_OK;
    if (c->nslots > MT_CHUNK_IO_MAX) { /* too many slots to leave in flight: move it now */
        for (int k0 = 0; k0 < c->nslots && st == COL_OK; k0 += MT_CHUNK_IO_MAX) {
            int k1 = k0 + MT_CHUNK_IO_MAX < c->nslots ? k0 + MT_CHUNK_IO_MAX : c->nslots, n = 0;
            st = submit(pool, c, k0, k1, buf, write, io->req, &n, e);
            st = wait_all(pool, io->req, n, st, e);
        }
        if (st == COL_OK && write)
            c->on_disk = true;
        return st == COL_OK ? COL_OK : chunk_error(pool, chunk, st, e);
    }
    st = submit(pool, c, 0, c->nslots, buf, write, io->req, &io->n, e);
    if (st != COL_OK) {
        wait_all(pool, io->req, io->n, st, e);
        io->n = 0;
        return chunk_error(pool, chunk, st, e);
    }
    return COL_OK;
}

col_status mt_chunk_io_wait(mt_pool *pool, mt_chunk_io *io, col_err *e)
{
    if (io->n == 0)
        return COL_OK;
    col_status st = wait_all(pool, io->req, io->n, COL_OK, e);
    io->n = 0;
    if (st != COL_OK)
        return chunk_error(pool, io->chunk, st, e);
    if (io->write)
        pool->chunks[io->chunk].on_disk = true;
    return COL_OK;
}

col_status mt_chunk_read(mt_pool *pool, int chunk, void *buf, col_err *e)
{
    mt_chunk_io io;
    col_status st = mt_chunk_io_start(pool, chunk, buf, false, &io, e);
    return st == COL_OK ? mt_chunk_io_wait(pool, &io, e) : st;
}

col_status mt_chunk_write(mt_pool *pool, int chunk, const void *buf, col_err *e)
{
    mt_chunk_io io;
    col_status st = mt_chunk_io_start(pool, chunk, (void *)buf, true, &io, e);
    if (st == COL_OK)
        st = mt_chunk_io_wait(pool, &io, e);
    if (st == COL_OK)
        pool->chunks[chunk].on_disk = true;
    return st;
}

uint64_t mt_nvme_bytes_written(const mt_pool *pool)
{
    if (!pool || !pool->nv)
        return 0;
    mt_nvme_stats st;
    mt_nvme_stats_get(pool->nv, &st);
    return st.bytes_written;
}

uint64_t mt_nvme_bytes_read(const mt_pool *pool)
{
    if (!pool || !pool->nv)
        return 0;
    mt_nvme_stats st;
    mt_nvme_stats_get(pool->nv, &st);
    return st.bytes_read;
}

void mt_seal(mt_pool *pool, mt_kind kind)
{
    if (pool && (int)kind >= 0 && kind < MT_NKINDS)
        pool->open[kind] = -1;
}

size_t mt_chunk_discard(mt_pool *pool, int chunk, size_t offset, size_t bytes)
{
    if (!pool || chunk < 0 || chunk >= pool->nchunks)
        return 0;
    mt_chunk *c = &pool->chunks[chunk];
    if (!c->host || offset >= c->capacity)
        return 0;
    if (bytes > c->capacity - offset)
        bytes = c->capacity - offset;
    char *lo = (char *)c->host + offset, *hi = lo + bytes;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *plo = (char *)(((uintptr_t)lo + page - 1) / page * page), *phi = (char *)((uintptr_t)hi / page * page);
    /* whole pages of an own mapping go back to the system (they read as zeros when touched again); the rest is
     * zeroed in place. Page-locked memory stays: unlocking it would slow every later copy. */
    if (c->capacity < HOST_MAP_MIN || c->pinned || phi <= plo || madvise(plo, (size_t)(phi - plo), MADV_DONTNEED)) {
        memset(lo, 0, bytes);
        return 0;
    }
    memset(lo, 0, (size_t)(plo - lo));
    memset(phi, 0, (size_t)(hi - phi));
    return (size_t)(phi - plo);
}
