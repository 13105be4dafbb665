/* nvme.h - the NVMe tier's I/O layer: a store of fixed-size slots in one
 * scratch file on a local SSD, read and written asynchronously through
 * io_uring, every slot guarded by a CRC-32C.
 *
 * The file is created in the configured directory with O_DIRECT (so chunk
 * traffic does not fill the page cache) and unlinked at once, so nothing is
 * left behind, whether the store is closed or the process dies. When the
 * file system refuses O_DIRECT (some tmpfs, network file systems) the store
 * falls back to buffered I/O and says so in mt_nvme_stats.direct.
 *
 * Slot i lives at byte offset i * slot_bytes. Its CRC-32C is computed when
 * the write is submitted and kept in memory; every read is checked against
 * it. A slot's space is reserved (fallocate) when it is first written, so a
 * full file system is reported before any data moves.
 *
 * Requests are asynchronous: mt_nvme_write / mt_nvme_read submit and return
 * a handle, mt_nvme_wait / mt_nvme_poll finish it. At most queue_depth
 * handles are outstanding (submitted and not yet waited for); the buffer of
 * a request belongs to the store until its handle is finished. Two
 * outstanding requests may not name the same slot (their order would be
 * undefined); that is refused with COL_ESTATE.
 *
 * Buffers: every buffer must be aligned to MT_NVME_ALIGN and hold
 * slot_bytes. Buffers registered once with mt_nvme_register (pinned by the
 * kernel) skip a per-request page mapping; any other aligned buffer works
 * too.
 *
 * Errors: COL_ENOMEM for space (the size limit reached: COL_SETTING_NVME_MAX
 * marked; the file system full: COL_SETTING_NVME_DIR), with the directory,
 * the bytes needed and the bytes free; COL_EIO for failed or
 * short transfers (a short one is retried once for the remainder) and for a
 * checksum mismatch, naming the slot and the file; COL_EIO with
 * COL_SETTING_NVME_DIR for a directory that cannot hold the file;
 * COL_EINVAL / COL_ESTATE for misuse. A failed write leaves its slot unwritten (reading it is
 * refused), a failed read leaves the buffer's contents undefined.
 *
 * A store is not thread-safe: use it from one thread. Stores share no
 * global state.
 */
#ifndef MT_NVME_H
#define MT_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define MT_NVME_ALIGN 4096            /* buffer alignment, slot size granule */
#define MT_NVME_DEFAULT_QUEUE_DEPTH 16
#define MT_NVME_MAX_QUEUE_DEPTH 1024

typedef enum { MT_NVME_OP_WRITE = 0, MT_NVME_OP_READ = 1 } mt_nvme_op;

/* Fault injection for tests; every member may be NULL.
 * before_submit: called before each submission to the kernel (also a
 *   retry's, with the remaining bytes); returning a negative errno fails
 *   that transfer as if the kernel had returned it, 0 lets it go.
 * after_complete: called for each kernel completion with the request's
 *   whole buffer and the kernel's result in *res (bytes moved or -errno),
 *   which it may change (shorten it, make it -EIO) or leave; it may also
 *   change the buffer (flip a byte after a read to provoke a CRC error). */
typedef struct mt_nvme_faults {
    int (*before_submit)(void *user, int op, int slot, size_t bytes);
    void (*after_complete)(void *user, int op, int slot, void *buf, int *res);
    void *user;
} mt_nvme_faults;

typedef struct {
    const char *dir;        /* an existing, writable directory (COL_SETTING_NVME_DIR) */
    uint64_t max_bytes;     /* file size limit (COL_SETTING_NVME_MAX); 0 = unlimited */
    size_t slot_bytes;      /* bytes per slot (a chunk); a multiple of MT_NVME_ALIGN */
    int queue_depth;        /* most outstanding requests; 0 = MT_NVME_DEFAULT_QUEUE_DEPTH */
    bool buffered;          /* do not try O_DIRECT (tests of the fallback path) */
    const mt_nvme_faults *faults; /* NULL = none; copied at open */
} mt_nvme_config;

typedef struct mt_nvme mt_nvme;

/* A request handle; 0 is never a valid one. */
typedef uint64_t mt_nvme_req;

typedef struct {
    bool direct;                 /* O_DIRECT in use; false = buffered fallback */
    bool registered_file;        /* the file is registered with the ring */
    int registered_buffers;      /* buffers registered by mt_nvme_register */
    size_t slot_bytes;
    int queue_depth;
    uint64_t max_bytes;
    int slots_written;           /* slots holding valid data now */
    uint64_t file_bytes;         /* bytes reserved in the file */
    uint64_t bytes_written, bytes_read;             /* moved by the kernel since open */
    uint64_t bytes_written_since, bytes_read_since; /* since mt_nvme_reset_counters */
    uint64_t writes, reads;      /* requests finished successfully */
    uint64_t retries;            /* short transfers retried */
    uint64_t io_errors, crc_errors;
} mt_nvme_stats;

/* Opens a store (creates its file and ring). Fails with COL_EIO naming the
 * directory when it does not exist, is not a directory or is not writable;
 * COL_EINVAL for a bad slot size or queue depth; COL_EUNSUPPORTED when the
 * kernel refuses io_uring. On failure nothing is left in the directory and
 * *out is NULL. */
col_status mt_nvme_open(const mt_nvme_config *cfg, mt_nvme **out, col_err *err);

/* Waits for every outstanding request, closes the ring and the file (its
 * space goes back to the file system) and frees nv. NULL is a no-op. */
void mt_nvme_close(mt_nvme *nv);

/* Registers n caller-owned buffers of `bytes` each (MT_NVME_ALIGN-aligned,
 * bytes >= slot_bytes and a multiple of MT_NVME_ALIGN) with the kernel.
 * Requests whose buffer lies inside one of them use it as a fixed buffer.
 * The buffers must stay allocated until mt_nvme_unregister or close. Fails
 * with COL_ESTATE while requests are outstanding or buffers are already
 * registered, COL_ENOMEM when the kernel cannot pin them (RLIMIT_MEMLOCK). */
col_status mt_nvme_register(mt_nvme *nv, void *const *bufs, int n, size_t bytes, col_err *err);
col_status mt_nvme_unregister(mt_nvme *nv, col_err *err);

/* Submits a write of slot_bytes from buf to slot (>= 0) / a read of slot
 * (which must have been written) into buf. *req receives the handle. */
col_status mt_nvme_write(mt_nvme *nv, int slot, const void *buf, mt_nvme_req *req, col_err *err);
col_status mt_nvme_read(mt_nvme *nv, int slot, void *buf, mt_nvme_req *req, col_err *err);

/* Waits for req to finish and returns its result; the handle is then
 * spent (using it again is COL_EINVAL). */
col_status mt_nvme_wait(mt_nvme *nv, mt_nvme_req req, col_err *err);

/* Like mt_nvme_wait without blocking: when req has not finished, sets
 * *done = false and returns COL_OK (the handle stays valid). */
col_status mt_nvme_poll(mt_nvme *nv, mt_nvme_req req, bool *done, col_err *err);

/* Waits for every outstanding request, spending all handles; returns the
 * first failure among them (the rest are counted in the stats). */
col_status mt_nvme_drain(mt_nvme *nv, col_err *err);

/* Submit-and-wait conveniences. */
col_status mt_nvme_write_sync(mt_nvme *nv, int slot, const void *buf, col_err *err);
col_status mt_nvme_read_sync(mt_nvme *nv, int slot, void *buf, col_err *err);

/* Whether slot holds data written successfully. */
bool mt_nvme_slot_valid(const mt_nvme *nv, int slot);

void mt_nvme_stats_get(const mt_nvme *nv, mt_nvme_stats *st);
/* Starts a new period for bytes_*_since (e.g. per training step). */
void mt_nvme_reset_counters(mt_nvme *nv);
/* The file's name as created (it is unlinked: for messages only). */
const char *mt_nvme_path(const mt_nvme *nv);

/* A zeroed buffer for chunk I/O: MT_NVME_ALIGN-aligned; from 2 MiB up it is
 * 2 MiB-aligned and advised to use transparent huge pages, which lets the
 * kernel move it in few large segments (much faster on some devices).
 * Callers with their own chunk memory should do the same. NULL when out of
 * memory. Free with free(). */
void *mt_nvme_alloc_buffer(size_t bytes);

#endif
