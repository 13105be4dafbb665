/* nvme.c - the NVMe tier's slot store over io_uring (contract in nvme.h).
 *
 * Request life: a free entry of the request table is filled by
 * mt_nvme_write/read and submitted (INFLIGHT); its completion is handled by
 * whichever call reaps the ring (wait, poll, a later submit), which retries
 * a short transfer once or marks the entry DONE with its result; the
 * caller's wait/poll then formats the result and frees the entry. The
 * handle carries the entry's generation, so a spent handle is recognised. */
#include "nvme.h"
#include "units.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"

#define MAX_SLOT_BYTES ((size_t)1 << 30) /* one kernel transfer moves < 2 GiB */
#define MAX_REG_BUFFERS 16384            /* the kernel's limit on registered buffers */
#define HUGE_BYTES ((size_t)2 << 20)     /* an x86-64 / arm64 transparent huge page */

enum { RQ_FREE, RQ_INFLIGHT, RQ_DONE };
enum { FAIL_NONE, FAIL_ERRNO, FAIL_SHORT, FAIL_CRC };
enum { SLOT_VALID = 1, SLOT_RESERVED = 2 };

typedef struct {
    uint32_t gen;        /* bumped when the entry is freed; part of the handle */
    int state, op, slot;
    bool retried;
    unsigned char *buf;
    size_t done;         /* bytes at the front of the slot known to be moved */
    int buf_index;       /* registered buffer holding buf, or -1 */
    uint32_t crc;        /* write: CRC of the data; read: CRC found */
    int fail, err;       /* FAIL_*, errno for FAIL_ERRNO */
    size_t moved;        /* FAIL_SHORT: bytes moved in the end */
} nvme_rq;

typedef struct {
    uint32_t crc;
    int busy;            /* 1 + request entry using the slot, 0 = none */
    unsigned flags;      /* SLOT_VALID | SLOT_RESERVED */
} nvme_slot;

struct mt_nvme {
    char *dir, *path;
    int fd;
    bool direct, fixed_file, no_fallocate, ring_ok;
    size_t slot_bytes;
    uint64_t max_bytes;
    int qd, inflight;
    struct io_uring ring;
    mt_nvme_faults faults;
    nvme_rq *rq;
    nvme_slot *slots;
    int nslots;
    struct iovec *bufs;
    int nbufs;
    int slots_valid;
    uint64_t file_bytes;
    uint64_t bytes_written, bytes_read, mark_written, mark_read;
    uint64_t writes, reads, retries, io_errors, crc_errors;
};

static const char *op_name(int op) { return op == MT_NVME_OP_WRITE ? "write" : "read"; }

static uint64_t fs_free_bytes(const char *dir)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0)
        return 0;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* The message for every out-of-space case: the directory, what was needed,
 * what is free, why it did not fit and what would help; the setting at fault
 * is the size limit (COL_SETTING_NVME_MAX) or the directory (NVME_DIR). */
static col_status space_error(const mt_nvme *nv, int slot, const char *why, col_setting at, col_err *err)
{
    uint64_t free_b = fs_free_bytes(nv->dir);
    char h1[32], h2[32];
    return col_err_set_on(err, at, COL_ENOMEM,
                          "NVMe store in %s is out of space: slot %d needs %zu bytes (%s) at offset %" PRIu64
                          "; %s; the file system has %" PRIu64 " bytes (%s) free; %s or lower the NVMe use",
                          nv->dir, slot, nv->slot_bytes, col_fmt_bytes(h1, sizeof h1, nv->slot_bytes),
                          (uint64_t)slot * nv->slot_bytes, why, free_b, col_fmt_bytes(h2, sizeof h2, free_b),
                          at == COL_SETTING_NVME_MAX ? "raise the size limit"
                                                     : "free space there, choose another NVMe directory");
}

/* ---- open / close ---- */

static col_status check_dir(const char *dir, col_err *err)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EIO,
                              "NVMe directory %s %s; create it or choose another NVMe directory", dir,
                              errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EIO,
                              "NVMe directory %s is not a directory; choose another NVMe directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EIO,
                              "NVMe directory %s is not writable (%s); choose another NVMe directory", dir,
                              strerror(errno));
    return COL_OK;
}

/* Creates the scratch file (O_DIRECT unless buffered) under a fresh name. */
static col_status create_file(mt_nvme *nv, bool buffered, col_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t tag = (uint64_t)ts.tv_nsec ^ ((uint64_t)(uintptr_t)nv >> 4);
    size_t len = strlen(nv->dir) + 64;
    nv->path = malloc(len);
    if (!nv->path)
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory");
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(nv->path, len, "%s/colossal-nvme-%ld-%08" PRIx32 ".tmp", nv->dir, (long)getpid(),
                 (uint32_t)(tag + (uint64_t)attempt * 0x9e3779b9u));
        int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
        nv->fd = buffered ? -1 : open(nv->path, flags | O_DIRECT, 0600);
        nv->direct = nv->fd >= 0;
        if (nv->fd < 0 && !buffered && errno == EINVAL)
            unlink(nv->path); /* some kernels create the file before refusing O_DIRECT */
        if (nv->fd < 0) /* refused O_DIRECT (or failed): the plain open says why */
            nv->fd = open(nv->path, flags, 0600);
        if (nv->fd >= 0)
            return COL_OK;
        if (errno != EEXIST)
            return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EIO,
                                  "cannot create the NVMe scratch file %s: %s; choose another NVMe directory", nv->path,
                                  strerror(errno));
    }
    return col_err_set(err, COL_EIO, "cannot find a free name for the NVMe scratch file in %s", nv->dir);
}

/* Some file systems accept O_DIRECT at open and refuse it at the first
 * transfer: try one aligned block and drop O_DIRECT if it is refused. */
static col_status probe_direct(mt_nvme *nv, col_err *err)
{
    void *blk = aligned_alloc(MT_NVME_ALIGN, MT_NVME_ALIGN);
    if (!blk)
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory");
    memset(blk, 0, MT_NVME_ALIGN);
    ssize_t w = pwrite(nv->fd, blk, MT_NVME_ALIGN, 0);
    int e = errno;
    if (w < 0 && e == EINVAL && nv->direct) {
        int fl = fcntl(nv->fd, F_GETFL);
        if (fl >= 0 && fcntl(nv->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
            nv->direct = false;
            w = pwrite(nv->fd, blk, MT_NVME_ALIGN, 0);
            e = errno;
        }
    }
    free(blk);
    if (w < 0 && e == ENOSPC)
        return space_error(nv, 0, "the file system is full", COL_SETTING_NVME_DIR, err);
    if (w != MT_NVME_ALIGN)
        return col_err_set(err, COL_EIO, "cannot write the NVMe scratch file %s: %s", nv->path,
                           w < 0 ? strerror(e) : "short write");
    if (ftruncate(nv->fd, 0) != 0)
        return col_err_set(err, COL_EIO, "cannot truncate the NVMe scratch file %s: %s", nv->path, strerror(errno));
    return COL_OK;
}

col_status mt_nvme_open(const mt_nvme_config *cfg, mt_nvme **out, col_err *err)
{
    if (!out)
        return col_err_set(err, COL_EINVAL, "mt_nvme_open needs a place for the store");
    *out = NULL;
    if (!cfg || !cfg->dir || !cfg->dir[0])
        return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EINVAL, "NVMe store: no directory given");
    if (cfg->slot_bytes == 0 || cfg->slot_bytes % MT_NVME_ALIGN || cfg->slot_bytes > MAX_SLOT_BYTES)
        return col_err_set(err, COL_EINVAL,
                           "NVMe store: slot size %zu bytes must be a positive multiple of %d up to %zu bytes",
                           cfg->slot_bytes, MT_NVME_ALIGN, MAX_SLOT_BYTES);
    int qd = cfg->queue_depth ? cfg->queue_depth : MT_NVME_DEFAULT_QUEUE_DEPTH;
    if (qd < 1 || qd > MT_NVME_MAX_QUEUE_DEPTH)
        return col_err_set(err, COL_EINVAL, "NVMe store: queue depth %d is not in 1..%d", cfg->queue_depth,
                           MT_NVME_MAX_QUEUE_DEPTH);
    if (cfg->max_bytes && cfg->max_bytes < cfg->slot_bytes)
        return col_err_set_on(err, COL_SETTING_NVME_MAX, COL_EINVAL,
                              "NVMe store: a size limit of %" PRIu64 " bytes is less than one slot (%zu bytes)",
                              cfg->max_bytes, cfg->slot_bytes);
    col_status st = check_dir(cfg->dir, err);
    if (st != COL_OK)
        return st;

    mt_nvme *nv = calloc(1, sizeof *nv);
    if (!nv)
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory");
    nv->fd = -1;
    nv->slot_bytes = cfg->slot_bytes;
    nv->max_bytes = cfg->max_bytes;
    nv->qd = qd;
    if (cfg->faults)
        nv->faults = *cfg->faults;
    nv->dir = strdup(cfg->dir);
    nv->rq = calloc((size_t)qd, sizeof *nv->rq);
    if (!nv->dir || !nv->rq) {
        mt_nvme_close(nv);
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory");
    }
    for (int i = 0; i < qd; i++)
        nv->rq[i].gen = 1;
    st = create_file(nv, cfg->buffered, err);
    if (st == COL_OK) {
        /* unlinked at once: the space returns to the file system when the
         * descriptor is closed, even if the process dies */
        st = probe_direct(nv, err);
        if (unlink(nv->path) != 0 && st == COL_OK)
            st = col_err_set(err, COL_EIO, "cannot unlink the NVMe scratch file %s: %s", nv->path, strerror(errno));
    }
    if (st != COL_OK) {
        mt_nvme_close(nv);
        return st;
    }
    int r = io_uring_queue_init((unsigned)qd, &nv->ring, 0);
    if (r < 0) {
        st = col_err_set(err, r == -ENOMEM ? COL_ENOMEM : COL_EUNSUPPORTED,
                         "NVMe store: the kernel refused io_uring (%s); it is needed for the NVMe tier "
                         "(check sysctl kernel.io_uring_disabled)",
                         strerror(-r));
        mt_nvme_close(nv);
        return st;
    }
    nv->ring_ok = true;
    /* a registered file saves a file-table lookup per request; optional */
    nv->fixed_file = io_uring_register_files(&nv->ring, &nv->fd, 1) == 0;
    *out = nv;
    return COL_OK;
}

void mt_nvme_close(mt_nvme *nv)
{
    if (!nv)
        return;
    if (nv->ring_ok) {
        mt_nvme_drain(nv, NULL);
        io_uring_queue_exit(&nv->ring);
    }
    if (nv->fd >= 0)
        close(nv->fd);
    free(nv->bufs);
    free(nv->slots);
    free(nv->rq);
    free(nv->path);
    free(nv->dir);
    free(nv);
}

/* ---- buffers ---- */

void *mt_nvme_alloc_buffer(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - MT_NVME_ALIGN)
        return NULL;
    /* Buffers of 2 MiB and more are placed on 2 MiB boundaries and offered
     * transparent huge pages: physically contiguous memory lets the kernel
     * send a chunk to the device in a few large segments instead of one per
     * 4 KiB page (on a virtio disk this moved reads from ~1.0 to ~1.5 GB/s). */
    size_t align = bytes >= HUGE_BYTES ? HUGE_BYTES : MT_NVME_ALIGN;
    bytes = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, bytes);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (align == HUGE_BYTES)
        madvise(p, bytes, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    memset(p, 0, bytes);
    return p;
}

col_status mt_nvme_register(mt_nvme *nv, void *const *bufs, int n, size_t bytes, col_err *err)
{
    if (!nv || !bufs || n < 1 || n > MAX_REG_BUFFERS)
        return col_err_set(err, COL_EINVAL, "mt_nvme_register: needs 1..%d buffers", MAX_REG_BUFFERS);
    if (bytes < nv->slot_bytes || bytes % MT_NVME_ALIGN || bytes > MAX_SLOT_BYTES)
        return col_err_set(err, COL_EINVAL,
                           "mt_nvme_register: buffer size %zu must be a multiple of %d, at least the slot size %zu "
                           "and at most %zu",
                           bytes, MT_NVME_ALIGN, nv->slot_bytes, MAX_SLOT_BYTES);
    if (nv->nbufs || nv->inflight)
        return col_err_set(err, COL_ESTATE, "mt_nvme_register: %s",
                           nv->nbufs ? "buffers are already registered" : "requests are in flight");
    for (int i = 0; i < n; i++)
        if (!bufs[i] || (uintptr_t)bufs[i] % MT_NVME_ALIGN)
            return col_err_set(err, COL_EINVAL, "mt_nvme_register: buffer %d is not aligned to %d bytes", i,
                               MT_NVME_ALIGN);
    struct iovec *iov = malloc((size_t)n * sizeof *iov);
    if (!iov)
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory");
    for (int i = 0; i < n; i++)
        iov[i] = (struct iovec){bufs[i], bytes};
    int r = io_uring_register_buffers(&nv->ring, iov, (unsigned)n);
    if (r < 0) {
        free(iov);
        char h[COL_BYTES_STR];
        if (r == -ENOMEM || r == -EPERM)
            return col_err_set(err, COL_ENOMEM,
                               "NVMe store: the kernel cannot pin %d buffers of %s for io_uring (%s); raise the "
                               "locked-memory limit (ulimit -l) or use unregistered buffers",
                               n, col_fmt_bytes(h, sizeof h, bytes), strerror(-r));
        return col_err_set(err, COL_EIO, "NVMe store: registering %d buffers with io_uring failed: %s", n,
                           strerror(-r));
    }
    nv->bufs = iov;
    nv->nbufs = n;
    return COL_OK;
}

col_status mt_nvme_unregister(mt_nvme *nv, col_err *err)
{
    if (!nv)
        return col_err_set(err, COL_EINVAL, "mt_nvme_unregister: no store");
    if (nv->inflight)
        return col_err_set(err, COL_ESTATE, "mt_nvme_unregister: requests are in flight");
    if (nv->nbufs)
        io_uring_unregister_buffers(&nv->ring);
    free(nv->bufs);
    nv->bufs = NULL;
    nv->nbufs = 0;
    return COL_OK;
}

static int find_buffer(const mt_nvme *nv, const void *buf)
{
    uintptr_t p = (uintptr_t)buf;
    for (int i = 0; i < nv->nbufs; i++) {
        uintptr_t b = (uintptr_t)nv->bufs[i].iov_base;
        if (p >= b && p - b <= nv->bufs[i].iov_len - nv->slot_bytes)
            return i;
    }
    return -1;
}

/* ---- requests ---- */

static void complete(mt_nvme *nv, nvme_rq *q, int res);

static void finish(mt_nvme *nv, nvme_rq *q, int fail)
{
    q->fail = fail;
    q->state = RQ_DONE;
    nv->inflight--;
    nvme_slot *s = &nv->slots[q->slot];
    s->busy = 0;
    if (fail == FAIL_NONE && q->op == MT_NVME_OP_WRITE) {
        s->crc = q->crc;
        s->flags |= SLOT_VALID;
        nv->slots_valid++;
    }
    if (fail == FAIL_NONE)
        *(q->op == MT_NVME_OP_WRITE ? &nv->writes : &nv->reads) += 1;
    else if (fail == FAIL_CRC)
        nv->crc_errors++;
    else
        nv->io_errors++;
}

/* Hands q's remaining bytes to the kernel (or to the fault hook). */
static void submit(mt_nvme *nv, nvme_rq *q)
{
    size_t len = nv->slot_bytes - q->done;
    if (nv->faults.before_submit) {
        int r = nv->faults.before_submit(nv->faults.user, q->op, q->slot, len);
        if (r < 0) {
            complete(nv, q, r);
            return;
        }
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&nv->ring);
    if (!sqe) { /* cannot happen: the ring has a place per request entry */
        q->err = EBUSY;
        finish(nv, q, FAIL_ERRNO);
        return;
    }
    int fd = nv->fixed_file ? 0 : nv->fd;
    unsigned char *p = q->buf + q->done;
    uint64_t off = (uint64_t)q->slot * nv->slot_bytes + q->done;
    if (q->op == MT_NVME_OP_WRITE) {
        if (q->buf_index >= 0)
            io_uring_prep_write_fixed(sqe, fd, p, (unsigned)len, off, q->buf_index);
        else
            io_uring_prep_write(sqe, fd, p, (unsigned)len, off);
    } else {
        if (q->buf_index >= 0)
            io_uring_prep_read_fixed(sqe, fd, p, (unsigned)len, off, q->buf_index);
        else
            io_uring_prep_read(sqe, fd, p, (unsigned)len, off);
    }
    if (nv->fixed_file)
        io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data(sqe, q);
    /* a failed submit leaves the entry queued: the next reap submits it */
    io_uring_submit(&nv->ring);
}

/* Handles one transfer's result: success, one retry of a short or
 * interrupted transfer, or failure. */
static void complete(mt_nvme *nv, nvme_rq *q, int res)
{
    if (nv->faults.after_complete)
        nv->faults.after_complete(nv->faults.user, q->op, q->slot, q->buf, &res);
    size_t want = nv->slot_bytes - q->done;
    if (res > 0) {
        size_t got = (size_t)res < want ? (size_t)res : want;
        *(q->op == MT_NVME_OP_WRITE ? &nv->bytes_written : &nv->bytes_read) += got;
    }
    if (res < 0 && ((res != -EINTR && res != -EAGAIN) || q->retried)) {
        q->err = -res;
        finish(nv, q, FAIL_ERRNO);
        return;
    }
    if (res < 0 || (size_t)res < want) {
        if (q->retried) {
            q->moved = q->done + (size_t)res;
            finish(nv, q, FAIL_SHORT);
            return;
        }
        q->retried = true;
        nv->retries++;
        /* O_DIRECT needs aligned offsets: redo the partial block too */
        if (res > 0)
            q->done = (q->done + (size_t)res) / MT_NVME_ALIGN * MT_NVME_ALIGN;
        submit(nv, q);
        return;
    }
    q->done = nv->slot_bytes;
    if (q->op == MT_NVME_OP_READ) {
        q->crc = mt_crc32c(0, q->buf, nv->slot_bytes);
        if (q->crc != nv->slots[q->slot].crc) {
            finish(nv, q, FAIL_CRC);
            return;
        }
    }
    finish(nv, q, FAIL_NONE);
}

/* Handles every completion the ring holds; with block, first waits for at
 * least one (submitting anything still queued). */
static void reap(mt_nvme *nv, bool block)
{
    if (block) {
        int r;
        do
            r = io_uring_submit_and_wait(&nv->ring, 1);
        while (r == -EINTR);
    } else if (io_uring_sq_ready(&nv->ring)) {
        io_uring_submit(&nv->ring);
    }
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&nv->ring, &cqe) == 0) {
        nvme_rq *q = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&nv->ring, cqe);
        if (q && q->state == RQ_INFLIGHT)
            complete(nv, q, res);
    }
}

static col_status grow_slots(mt_nvme *nv, int slot, col_err *err)
{
    if (slot < nv->nslots)
        return COL_OK;
    size_t ncap = nv->nslots ? 2 * (size_t)nv->nslots : 64;
    if (ncap < (size_t)slot + 1)
        ncap = (size_t)slot + 1;
    if (ncap > INT32_MAX)
        ncap = INT32_MAX;
    nvme_slot *ns = realloc(nv->slots, ncap * sizeof *ns);
    if (!ns)
        return col_err_set(err, COL_ENOMEM, "NVMe store: out of host memory for the slot table");
    memset(ns + nv->nslots, 0, (ncap - (size_t)nv->nslots) * sizeof *ns);
    nv->slots = ns;
    nv->nslots = (int)ncap;
    return COL_OK;
}

/* Reserves a slot's bytes in the file (first write only), so a full file
 * system or the size limit is reported before any transfer. */
static col_status reserve(mt_nvme *nv, int slot, col_err *err)
{
    nvme_slot *s = &nv->slots[slot];
    if (s->flags & SLOT_RESERVED)
        return COL_OK;
    uint64_t end = ((uint64_t)slot + 1) * nv->slot_bytes;
    if (nv->max_bytes && end > nv->max_bytes) {
        char why[160], h[32];
        snprintf(why, sizeof why, "its size limit of %" PRIu64 " bytes (%s) holds %" PRIu64 " slots", nv->max_bytes,
                 col_fmt_bytes(h, sizeof h, nv->max_bytes), nv->max_bytes / nv->slot_bytes);
        return space_error(nv, slot, why, COL_SETTING_NVME_MAX, err);
    }
    if (!nv->no_fallocate) {
        int r = fallocate(nv->fd, 0, (off_t)((uint64_t)slot * nv->slot_bytes), (off_t)nv->slot_bytes);
        if (r != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
            nv->no_fallocate = true; /* the writes themselves will report ENOSPC */
        } else if (r != 0 && errno == ENOSPC) {
            return space_error(nv, slot, "the file system is full", COL_SETTING_NVME_DIR, err);
        } else if (r != 0) {
            return col_err_set(err, COL_EIO, "cannot reserve NVMe slot %d in %s: %s", slot, nv->path,
                               strerror(errno));
        }
    }
    s->flags |= SLOT_RESERVED;
    nv->file_bytes += nv->slot_bytes;
    return COL_OK;
}

static col_status start(mt_nvme *nv, int op, int slot, const void *buf, mt_nvme_req *req, col_err *err)
{
    if (req)
        *req = 0;
    if (!nv || !buf || !req)
        return col_err_set(err, COL_EINVAL, "mt_nvme_%s: needs a store, a buffer and a place for the handle",
                           op_name(op));
    if ((uintptr_t)buf % MT_NVME_ALIGN)
        return col_err_set(err, COL_EINVAL, "mt_nvme_%s: buffer %p is not aligned to %d bytes", op_name(op), buf,
                           MT_NVME_ALIGN);
    if (slot < 0 || (uint64_t)slot >= (uint64_t)INT64_MAX / nv->slot_bytes - 1)
        return col_err_set(err, COL_EINVAL, "mt_nvme_%s: slot %d is out of range", op_name(op), slot);
    if (op == MT_NVME_OP_READ && (slot >= nv->nslots || !(nv->slots[slot].flags & SLOT_VALID)) &&
        !(slot < nv->nslots && nv->slots[slot].busy))
        return col_err_set(err, COL_ESTATE, "NVMe slot %d of %s holds no data: it was never written successfully", slot,
                           nv->path);
    if (slot < nv->nslots && nv->slots[slot].busy)
        return col_err_set(err, COL_ESTATE, "NVMe slot %d has a request in flight; wait for it first", slot);
    int idx = -1;
    for (int i = 0; i < nv->qd && idx < 0; i++)
        if (nv->rq[i].state == RQ_FREE)
            idx = i;
    if (idx < 0)
        return col_err_set(err, COL_ESTATE, "NVMe store: all %d requests are outstanding; wait for one first", nv->qd);
    col_status st = grow_slots(nv, slot, err);
    if (st == COL_OK && op == MT_NVME_OP_WRITE)
        st = reserve(nv, slot, err);
    if (st != COL_OK)
        return st;
    nvme_rq *q = &nv->rq[idx];
    uint32_t gen = q->gen;
    *q = (nvme_rq){.gen = gen, .state = RQ_INFLIGHT, .op = op, .slot = slot, .buf = (unsigned char *)buf,
                   .buf_index = find_buffer(nv, buf)};
    nvme_slot *s = &nv->slots[slot];
    if (op == MT_NVME_OP_WRITE) {
        q->crc = mt_crc32c(0, buf, nv->slot_bytes);
        if (s->flags & SLOT_VALID) /* the old data is gone whatever happens */
            nv->slots_valid--;
        s->flags &= ~(unsigned)SLOT_VALID;
    }
    s->busy = idx + 1;
    nv->inflight++;
    *req = (uint64_t)gen << 16 | (uint64_t)(idx + 1);
    submit(nv, q);
    return COL_OK;
}

col_status mt_nvme_write(mt_nvme *nv, int slot, const void *buf, mt_nvme_req *req, col_err *err)
{
    return start(nv, MT_NVME_OP_WRITE, slot, buf, req, err);
}

col_status mt_nvme_read(mt_nvme *nv, int slot, void *buf, mt_nvme_req *req, col_err *err)
{
    return start(nv, MT_NVME_OP_READ, slot, buf, req, err);
}

static nvme_rq *lookup(mt_nvme *nv, mt_nvme_req req)
{
    if (!nv)
        return NULL;
    uint64_t idx = (req & 0xffff) - 1;
    if (req == 0 || idx >= (uint64_t)nv->qd)
        return NULL;
    nvme_rq *q = &nv->rq[idx];
    return q->state != RQ_FREE && q->gen == (uint32_t)(req >> 16) ? q : NULL;
}

/* Formats a finished request's result and frees its entry. */
static col_status result(mt_nvme *nv, nvme_rq *q, col_err *err)
{
    col_status st = COL_OK;
    const char *op = op_name(q->op);
    switch (q->fail) {
    case FAIL_ERRNO:
        if (q->err == ENOSPC || q->err == EDQUOT)
            st = space_error(nv, q->slot, q->err == ENOSPC ? "the file system is full (No space left on device)"
                                                          : "the disk quota is exhausted", COL_SETTING_NVME_DIR, err);
        else
            st = col_err_set(err, COL_EIO, "NVMe %s of slot %d in %s failed: %s", op, q->slot, nv->path,
                             strerror(q->err));
        break;
    case FAIL_SHORT:
        st = col_err_set(err, COL_EIO, "short NVMe %s of slot %d in %s: %zu of %zu bytes moved, also after a retry",
                         op, q->slot, nv->path, q->moved, nv->slot_bytes);
        break;
    case FAIL_CRC:
        st = col_err_set(err, COL_EIO,
                         "checksum mismatch in NVMe slot %d of %s: the SSD returned different data than was written "
                         "(CRC-32C %08" PRIx32 ", expected %08" PRIx32 ")",
                         q->slot, nv->path, q->crc, nv->slots[q->slot].crc);
        break;
    default:
        break;
    }
    q->state = RQ_FREE;
    q->gen = (q->gen + 1) & 0xffffffffu;
    if (!q->gen)
        q->gen = 1;
    return st;
}

col_status mt_nvme_wait(mt_nvme *nv, mt_nvme_req req, col_err *err)
{
    nvme_rq *q = lookup(nv, req);
    if (!q)
        return col_err_set(err, COL_EINVAL, "mt_nvme_wait: %#" PRIx64 " is not an outstanding request", req);
    while (q->state == RQ_INFLIGHT)
        reap(nv, true);
    return result(nv, q, err);
}

col_status mt_nvme_poll(mt_nvme *nv, mt_nvme_req req, bool *done, col_err *err)
{
    nvme_rq *q = lookup(nv, req);
    if (done)
        *done = false;
    if (!q || !done)
        return col_err_set(err, COL_EINVAL, "mt_nvme_poll: %#" PRIx64 " is not an outstanding request", req);
    if (q->state == RQ_INFLIGHT)
        reap(nv, false);
    if (q->state == RQ_INFLIGHT)
        return COL_OK;
    *done = true;
    return result(nv, q, err);
}

col_status mt_nvme_drain(mt_nvme *nv, col_err *err)
{
    if (!nv)
        return COL_OK;
    col_status first = COL_OK;
    for (int i = 0; i < nv->qd; i++) {
        nvme_rq *q = &nv->rq[i];
        if (q->state == RQ_FREE)
            continue;
        col_err e = {0};
        while (q->state == RQ_INFLIGHT)
            reap(nv, true);
        col_status st = result(nv, q, &e);
        if (st != COL_OK && first == COL_OK) {
            first = st;
            if (err)
                *err = e;
        }
    }
    return first;
}

col_status mt_nvme_write_sync(mt_nvme *nv, int slot, const void *buf, col_err *err)
{
    mt_nvme_req r;
    col_status st = mt_nvme_write(nv, slot, buf, &r, err);
    return st != COL_OK ? st : mt_nvme_wait(nv, r, err);
}

col_status mt_nvme_read_sync(mt_nvme *nv, int slot, void *buf, col_err *err)
{
    mt_nvme_req r;
    col_status st = mt_nvme_read(nv, slot, buf, &r, err);
    return st != COL_OK ? st : mt_nvme_wait(nv, r, err);
}

/* ---- state ---- */

bool mt_nvme_slot_valid(const mt_nvme *nv, int slot)
{
    return nv && slot >= 0 && slot < nv->nslots && (nv->slots[slot].flags & SLOT_VALID);
}

void mt_nvme_stats_get(const mt_nvme *nv, mt_nvme_stats *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof *st);
    if (!nv)
        return;
    st->direct = nv->direct;
    st->registered_file = nv->fixed_file;
    st->registered_buffers = nv->nbufs;
    st->slot_bytes = nv->slot_bytes;
    st->queue_depth = nv->qd;
    st->max_bytes = nv->max_bytes;
    st->slots_written = nv->slots_valid;
    st->file_bytes = nv->file_bytes;
    st->bytes_written = nv->bytes_written;
    st->bytes_read = nv->bytes_read;
    st->bytes_written_since = nv->bytes_written - nv->mark_written;
    st->bytes_read_since = nv->bytes_read - nv->mark_read;
    st->writes = nv->writes;
    st->reads = nv->reads;
    st->retries = nv->retries;
    st->io_errors = nv->io_errors;
    st->crc_errors = nv->crc_errors;
}

void mt_nvme_reset_counters(mt_nvme *nv)
{
    if (!nv)
        return;
    nv->mark_written = nv->bytes_written;
    nv->mark_read = nv->bytes_read;
}

const char *mt_nvme_path(const mt_nvme *nv)
{
    return nv && nv->path ? nv->path : "";
}
