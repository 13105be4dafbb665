/* memtier.h - the chunk store for parameters, gradients and optimizer states.
 *
 * Tensors are packed, in allocation order (the graph's first-use order),
 * into fixed-size chunks of their storage kind: a chunk holds only tensors
 * of one kind, each tensor starts on a 64-byte boundary, and a tensor that
 * does not fit in the rest of the current chunk starts a new one (the tail
 * of the old chunk stays unused). A tensor larger than the chunk size gets a
 * chunk of its own, sized to fit it (rounded up to 64 bytes); the next
 * tensor of that kind starts a new chunk. So the chunks of a kind, and the
 * tensors inside them, follow allocation order: a later planner can move
 * whole chunks between tiers in the order the graph needs them.
 *
 * mt_chunk_bytes_auto picks the chunk size that leaves the fewest unused
 * bytes for a list of tensors, by this same rule.
 *
 * Tiers: every chunk records the tier that holds it and a dirty flag. A
 * host chunk's memory is zero-filled (from 1 MiB up mapped on its own, so
 * its pages count once touched and go back whole when freed; smaller ones
 * from aligned_alloc(64, ...)), never
 * moved or freed before mt_destroy, so mt_ptr addresses stay valid for the
 * pool's life. Chunks of the kinds configured for the NVMe tier live in
 * slots of a scratch file (see below); each still has an address of its own
 * (mt_chunk_addr), so graphs can be bound to it. The compute tier's copies
 * are managed outside the pool (mt_resident.h).
 *
 * A pool is not thread-safe: allocate from one thread. Pools share no
 * global state.
 */
#ifndef MT_MEMTIER_H
#define MT_MEMTIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct col_backend;

#define MT_ALIGN 64
#define MT_DEFAULT_CHUNK_BYTES ((size_t)32 << 20)

typedef enum { MT_PARAM, MT_GRAD, MT_OPTSTATE, MT_NKINDS } mt_kind;

/* Where a chunk's bytes live. MT_TIER_NONE: a chunk planned but never
 * given memory (an allocation refused by the host budget, see mt_alloc). */
typedef enum { MT_TIER_HOST, MT_TIER_GPU, MT_TIER_NVME, MT_NTIERS, MT_TIER_NONE = -1 } mt_tier;
/* The links a chunk crosses between tiers: host<->compute, host<->NVMe (a
 * chunk at home on NVMe travels NVMe->host->compute and back the same way). */
typedef enum { MT_LINK_H2C, MT_LINK_C2H, MT_LINK_H2N, MT_LINK_N2H, MT_NLINKS } mt_link;

struct mt_nvme_faults;

typedef struct {
    size_t chunk_bytes; /* 0 = MT_DEFAULT_CHUNK_BYTES; rounded up to a multiple of MT_ALIGN */
    size_t host_budget; /* 0 = unlimited; total host bytes of all chunks */
    /* the NVMe tier (memtier/nvme.h): chunks of the kinds in nvme_kinds (bit 1 << kind) live in
     * slots of a scratch file in nvme_dir instead of host memory; NULL = no NVMe tier */
    const char *nvme_dir;
    uint64_t nvme_max;  /* the NVMe tier's size limit: bytes the scratch file may take; 0 = unlimited */
    unsigned nvme_kinds;
    const struct mt_nvme_faults *nvme_faults; /* tests: fault injection for the store */
    /* the store's queue depth (mt_nvme_config.queue_depth): 0 = its default; 1..MT_NVME_MAX_QUEUE_DEPTH,
     * anything else makes mt_create fail with COL_EINVAL. Any depth works with the chunk I/O below. */
    int nvme_queue_depth;
    /* every chunk's capacity is a multiple of this many bytes (a multiple of MT_ALIGN; 0 = MT_ALIGN): the chunk
     * size is rounded up to it, and so is an oversize tensor's chunk. Data parallel runs split each chunk into
     * equal pieces, one per process, each MT_ALIGN-aligned: world size * MT_ALIGN. */
    size_t capacity_multiple;
} mt_config;

typedef struct mt_pool mt_pool;

/* Where a tensor lives: bytes at offset (a multiple of MT_ALIGN) in chunk. */
typedef struct {
    int chunk;
    size_t offset;
    size_t bytes;
} mt_ref;

typedef struct {
    mt_kind kind;
    mt_tier tier;
    bool dirty;      /* changed since created (zero-filled) or last marked clean (written back) */
    size_t capacity; /* bytes of the chunk (chunk_bytes, or the oversize tensor rounded up) */
    size_t used;     /* end of the last tensor placed in it */
    int ntensors;    /* tensors placed in it (for a MT_TIER_NONE chunk: planned) */
} mt_chunk_info;

typedef struct {
    size_t chunk_bytes, host_budget;
    int chunks[MT_NKINDS][MT_NTIERS];    /* chunks per kind and tier */
    size_t bytes[MT_NKINDS][MT_NTIERS];  /* chunk capacity per kind and tier */
    int tensors[MT_NKINDS];              /* successful allocations per kind */
    size_t tensor_bytes[MT_NKINDS];      /* sum of their requested bytes */
    size_t host_bytes;                   /* host memory held by chunks now */
    size_t host_peak;                    /* the most host memory held at once */
    size_t needed_bytes;                 /* host budget that would have held every request so far */
} mt_pool_stats;

col_status mt_create(const mt_config *cfg, mt_pool **pool, col_err *e);
void mt_destroy(mt_pool *pool);

/* Places a tensor of `bytes` (> 0) of kind `kind`; *ref receives its place.
 * Fails with COL_ENOMEM when a new chunk would take the pool's host memory
 * past host_budget; the message names the budget and the smallest budget
 * that would have held every allocation requested so far, and
 * COL_SETTING_HOST_BUDGET is marked (a chunk past nvme_max on the NVMe tier:
 * COL_SETTING_NVME_MAX). After such a
 * failure the chunk is still planned (tier MT_TIER_NONE, no memory), so
 * later requests keep being planned and refused with an updated total: a
 * caller may go on allocating the whole model and report the last message.
 * A failed allocation leaves *ref = {-1, 0, 0}. */
col_status mt_alloc(mt_pool *pool, mt_kind kind, size_t bytes, mt_ref *ref, col_err *e);

/* Host address of ref, or NULL when ref is not a placed allocation or its
 * chunk has no host memory (an NVMe chunk). */
void *mt_ptr(const mt_pool *pool, mt_ref ref);

/* A chunk's address for binding and for mt_locate: its host memory for a
 * host chunk (= mt_chunk_host); for an NVMe chunk a range of capacity
 * bytes reserved for it alone when it was allocated (mmap PROT_NONE,
 * MAP_NORESERVE: address space, no memory), page-aligned, stable for the
 * pool's life and unmapped by mt_destroy. Any access to a placeholder
 * faults: code that reads a parameter on NVMe outside the compute tier
 * crashes instead of reading garbage; the data is moved with mt_chunk_read
 * and mt_chunk_write. NULL for an index out of range or a chunk without
 * memory (MT_TIER_NONE). */
void *mt_chunk_addr(const mt_pool *pool, int chunk);
/* mt_chunk_addr(ref.chunk) + ref.offset, or NULL when ref is not a placed
 * allocation (as mt_ptr) or its chunk has no address. */
void *mt_addr(const mt_pool *pool, mt_ref ref);

/* The chunk size that wastes least for tensors of tensor_bytes[0..n)
 * placed in this order by mt_alloc's rule (one kind): waste is the unused
 * tail (capacity - used) summed over all chunks, the oversize ones'
 * rounding included; the 64-byte gaps between tensors are not counted.
 * Searched: from the largest tensor rounded up to MT_ALIGN (every tensor
 * fits a chunk) up to max_bytes rounded down to MT_ALIGN (0 =
 * MT_DEFAULT_CHUNK_BYTES; only the first size when the largest tensor is
 * bigger), in steps of 1/64 of that range rounded up to MT_ALIGN (at least
 * MT_ALIGN), the top of the range included: at most 66 sizes, each costing
 * O(n). Ties go to the smaller size. *chunk_bytes receives the size (a
 * valid mt_config.chunk_bytes), *waste (may be NULL) its waste. COL_EINVAL
 * for NULL tensor_bytes or chunk_bytes, n <= 0, a zero or huge size. */
col_status mt_chunk_bytes_auto(const size_t *tensor_bytes, int n, size_t max_bytes, size_t *chunk_bytes,
                               size_t *waste, col_err *e);

/* Closes the kind's open chunk: the next tensor of the kind starts a new chunk (e.g. so that the tensors a
 * run trains share no chunk with frozen ones). */
void mt_seal(mt_pool *pool, mt_kind kind);
/* Zeroes bytes [offset, offset + bytes) of a chunk's host memory (clipped to its capacity) and gives the whole
 * pages inside that range back to the system when the chunk has a mapping of its own (1 MiB and more) and is not
 * page-locked: a data parallel process releases the pieces of a chunk other processes own. They read as zeros
 * and take memory again once written. Returns the bytes given back; nothing happens to a chunk without host
 * memory. */
size_t mt_chunk_discard(mt_pool *pool, int chunk, size_t offset, size_t bytes);

/* Zeroes every chunk of a kind (the part holding tensors; e.g. clears the
 * gradients) and marks those chunks dirty. */
void mt_zero(mt_pool *pool, mt_kind kind);

void mt_stats(const mt_pool *pool, mt_pool_stats *stats);

int mt_chunk_count(const mt_pool *pool);

/* Page-locks the host memory of the chunks of the kinds in kinds (bit
 * 1 << mt_kind) that have host memory now, with be's memory table
 * (host_pin), so that a device's asynchronous copies of them overlap its
 * kernels; mt_destroy unlocks them (free the pool before the backend).
 * Returns the bytes pinned; 0 when be has no asynchronous transfers
 * (col_mem_async) or, for every chunk, pinning failed (the copies then stay
 * correct, only slower). Pins for one backend only. */
size_t mt_pin_host(mt_pool *pool, const struct col_backend *be, unsigned kinds);
/* Describes chunk idx; COL_EINVAL for an index out of range. */
col_status mt_chunk_get(const mt_pool *pool, int idx, mt_chunk_info *info, col_err *e);
/* Dirty-tracking for the tiers to come: callers that write a chunk's
 * tensors (the optimizer step) mark it dirty; a write-back marks it clean. */
void mt_mark_dirty(mt_pool *pool, int chunk);
void mt_mark_clean(mt_pool *pool, int chunk);

/* ---- chunks on the NVMe tier ----
 * They have no host memory (mt_ptr and mt_chunk_host give NULL; their
 * mt_chunk_addr is a placeholder that faults when touched): their contents are read
 * into and written from caller buffers of mt_chunk_io_bytes() bytes,
 * MT_NVME_ALIGN-aligned (mt_nvme_alloc_buffer). A chunk never written reads
 * as zeros (without I/O); mt_zero of its kind makes it so again. Every read
 * is checked against the CRC-32C of what was written. */
size_t mt_chunk_io_bytes(const mt_pool *pool, int chunk);
int mt_chunk_slots(const mt_pool *pool, int chunk); /* NVMe slots it takes (0 for other tiers) */
col_status mt_chunk_read(mt_pool *pool, int chunk, void *buf, col_err *e);
col_status mt_chunk_write(mt_pool *pool, int chunk, const void *buf, col_err *e);
/* The same in two halves, so that a transfer runs while the caller computes:
 * start submits it (a chunk of more than MT_CHUNK_IO_MAX slots is moved at
 * once, synchronously), wait completes it; every started io must be waited
 * for, and its buffer left alone until then. A full queue (nvme_queue_depth
 * requests outstanding) never refuses a start: the pool finishes its
 * oldest request early and keeps the result for that io's wait, so a
 * transfer's error is always reported by its own wait. */
enum { MT_CHUNK_IO_MAX = 8 };
typedef struct {
    int chunk, n;
    bool write;
    uint64_t req[MT_CHUNK_IO_MAX];
} mt_chunk_io;
col_status mt_chunk_io_start(mt_pool *pool, int chunk, void *buf, bool write, mt_chunk_io *io, col_err *e);
col_status mt_chunk_io_wait(mt_pool *pool, mt_chunk_io *io, col_err *e);
/* Bytes written to NVMe since the pool was made (SSD endurance), and
 * bytes read back (the nvme->host link); reads of never-written chunks move
 * nothing. 0 without an NVMe tier. */
uint64_t mt_nvme_bytes_written(const mt_pool *pool);
uint64_t mt_nvme_bytes_read(const mt_pool *pool);

/* The chunk whose placed tensors span address ptr - its host memory or its
 * NVMe placeholder, [mt_chunk_addr, + used) - and the offset in it (false
 * when no chunk of the pool holds it). */
bool mt_locate(const mt_pool *pool, const void *ptr, int *chunk, size_t *offset);
/* The host copy of a chunk (NULL for a chunk holding no memory). */
void *mt_chunk_host(const mt_pool *pool, int chunk);

const char *mt_kind_name(mt_kind kind);
const char *mt_tier_name(mt_tier tier);
const char *mt_link_name(mt_link link); /* "host->compute", ... */

#endif
