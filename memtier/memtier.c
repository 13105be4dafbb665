/* memtier.c - the chunk store (host tier only; layout rules in memtier.h). */
#include "memtier.h"

#include "nvme.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mt_kind kind;
    mt_tier tier;
    bool dirty;
    size_t capacity, used;
    int ntensors;
    void *host; /* MT_ALIGN-aligned, capacity bytes; NULL when tier is MT_TIER_NONE or NVME */
    int slot, nslots; /* NVME: its slots in the store */
    bool on_disk;     /* NVME: written (else it reads as zeros) */
} mt_chunk;

struct mt_pool {
    size_t chunk_bytes, host_budget;
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
};

#define MIB(x) ((double)(x) / (1024.0 * 1024.0))

/* MiB with one decimal, or KiB when that would read 0.0 */
static void fmt_size(size_t v, char *buf, size_t n)
{
    if (v >= ((size_t)1 << 20) / 10)
        snprintf(buf, n, "%.1f MiB", MIB(v));
    else
        snprintf(buf, n, "%.1f KiB", (double)v / 1024.0);
}

static size_t align_up(size_t x) { return (x + (MT_ALIGN - 1)) & ~(size_t)(MT_ALIGN - 1); }

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
        return col_err_set(e, COL_EINVAL, "memtier: chunk size %zu bytes is too large", chunk);
    mt_pool *p = calloc(1, sizeof *p);
    if (!p)
        return col_err_set(e, COL_ENOMEM, "memtier: out of host memory creating a pool");
    p->chunk_bytes = align_up(chunk);
    p->host_budget = cfg ? cfg->host_budget : 0;
    for (int k = 0; k < MT_NKINDS; k++)
        p->open[k] = -1;
    if (cfg && cfg->nvme_dir && cfg->nvme_kinds) {
        p->slot_bytes = (p->chunk_bytes + MT_NVME_ALIGN - 1) / MT_NVME_ALIGN * MT_NVME_ALIGN;
        mt_nvme_config nc = {.dir = cfg->nvme_dir, .max_bytes = cfg->nvme_max, .slot_bytes = p->slot_bytes,
                             .faults = cfg->nvme_faults};
        col_status st = mt_nvme_open(&nc, &p->nv, e);
        if (st != COL_OK) {
            free(p);
            return st;
        }
        p->nvme_kinds = cfg->nvme_kinds;
        p->nvme_max = cfg->nvme_max;
    }
    *pool = p;
    return COL_OK;
}

void mt_destroy(mt_pool *pool)
{
    if (!pool)
        return;
    for (int i = 0; i < pool->nchunks; i++)
        free(pool->chunks[i].host);
    mt_nvme_close(pool->nv); /* the scratch file goes with it */
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
            fmt_size(p->nvme_max, have, sizeof have);
            fmt_size(end, need, sizeof need);
            col_err_set(e, COL_ENOMEM, "memtier: the NVMe tier's %s (--nvme-max) is too small: this model needs at "
                        "least %s there", have, need);
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
        c.host = aligned_alloc(MT_ALIGN, capacity);
        if (!c.host) {
            col_err_set(e, COL_ENOMEM, "memtier: out of host memory allocating a %s chunk of %.1f MiB",
                        mt_kind_name(kind), MIB(capacity));
            return -1;
        }
        memset(c.host, 0, capacity);
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
    /* the open chunk of this kind, if the tensor fits after its last one */
    int ci = pool->open[kind];
    size_t off = 0;
    if (ci >= 0) {
        const mt_chunk *c = &pool->chunks[ci];
        off = align_up(c->used);
        if (off > c->capacity || bytes > c->capacity - off)
            ci = -1;
    }
    if (ci < 0) {
        /* a new chunk: the standard size, or its own chunk for an oversize tensor */
        bool oversize = bytes > pool->chunk_bytes;
        ci = new_chunk(pool, kind, oversize ? align_up(bytes) : pool->chunk_bytes, e);
        if (ci < 0)
            return COL_ENOMEM;
        pool->open[kind] = oversize ? -1 : ci;
        off = 0;
    }
    mt_chunk *c = &pool->chunks[ci];
    c->used = off + bytes;
    c->ntensors++;
    if (c->tier == MT_TIER_NONE)
    {
        char have[32], need[32];
        fmt_size(pool->host_budget, have, sizeof have);
        fmt_size(pool->needed_bytes, need, sizeof need);
        return col_err_set(e, COL_ENOMEM, "memtier: host budget %s is too small: this model needs at least %s (--cpu-mem)",
                           have, need);
    }
    pool->tensors[kind]++;
    pool->tensor_bytes[kind] += bytes;
    *ref = (mt_ref){.chunk = ci, .offset = off, .bytes = bytes};
    return COL_OK;
}

void *mt_ptr(const mt_pool *pool, mt_ref ref)
{
    if (!pool || ref.chunk < 0 || ref.chunk >= pool->nchunks)
        return NULL;
    const mt_chunk *c = &pool->chunks[ref.chunk];
    if (!c->host || ref.bytes == 0 || ref.offset > c->used || ref.bytes > c->used - ref.offset)
        return NULL;
    return (char *)c->host + ref.offset;
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
        const char *h = pool->chunks[i].host;
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
    return col_err_set(e, st, "memtier: %s chunk %d on the NVMe tier: %s", mt_kind_name(pool->chunks[chunk].kind), chunk,
                       e->msg);
}

int mt_chunk_slots(const mt_pool *pool, int chunk)
{
    if (!pool || chunk < 0 || chunk >= pool->nchunks || pool->chunks[chunk].tier != MT_TIER_NVME)
        return 0;
    return pool->chunks[chunk].nslots;
}

/* submits the slots of an NVMe chunk (at most BATCH) */
static col_status submit(mt_pool *pool, mt_chunk *c, int k0, int k1, void *buf, bool write, uint64_t *req, int *n,
                         col_err *e)
{
    col_status st = COL_OK;
    *n = 0;
    for (int k = k0; k < k1 && st == COL_OK; k++) {
        char *b = (char *)buf + (size_t)k * pool->slot_bytes;
        st = write ? mt_nvme_write(pool->nv, c->slot + k, b, &req[*n], e) : mt_nvme_read(pool->nv, c->slot + k, b, &req[*n], e);
        if (st == COL_OK)
            (*n)++;
    }
    return st;
}

/* waits for every request, keeping the first error */
static col_status wait_all(mt_pool *pool, const uint64_t *req, int n, col_status st, col_err *e)
{
    for (int i = 0; i < n; i++) {
        col_err e2 = {0};
        col_status w = mt_nvme_wait(pool->nv, req[i], &e2);
        if (w != COL_OK && st == COL_OK)
            st = col_err_set(e, w, "%s", e2.msg);
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
