/* fake_device.h - a fake "device" memory table (backend.h's col_backend_mem)
 * for testing device plans and sessions on the CPU: blocks of host memory
 * handed out by the table (filled with NaN bytes so what nobody wrote
 * shows), counters for every call, and copies refused unless they go
 * between a host buffer and one of its blocks (to_device / to_host) or
 * between two non-overlapping ranges of its blocks (copy). Allocation and
 * sync can be told to fail. Register the backends that may call the table
 * with fk_own(). One state per test program (a static in this header).
 * Include after testlib.h. */
#ifndef COL_TESTS_FAKE_DEVICE_H
#define COL_TESTS_FAKE_DEVICE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define FK_MAXBLK 512

static struct {
    void *blk[FK_MAXBLK];
    size_t size[FK_MAXBLK];
    int allocs, frees, live, to_dev, to_host, copies, syncs;
    int refused;            /* copies that were not host<->block or block<->block */
    bool fail_alloc, fail_sync;
    char first[200];        /* the first refusal (a test may record its own refusals here too) */
    const col_backend *owner[4];
} fk;

/* lets be call the table (at most 4 backends) */
static inline void fk_own(const col_backend *be)
{
    for (int i = 0; i < 4; i++)
        if (!fk.owner[i] || fk.owner[i] == be) {
            fk.owner[i] = be;
            return;
        }
}

static inline bool fk_is_owner(const col_backend *be)
{
    for (int i = 0; i < 4; i++)
        if (be && fk.owner[i] == be)
            return true;
    return false;
}

/* the block holding [p, p + bytes), or -1 */
static inline int fk_find_block(const void *p, size_t bytes)
{
    for (int i = 0; i < FK_MAXBLK; i++)
        if (fk.blk[i] && (const char *)p >= (char *)fk.blk[i] &&
            (const char *)p + bytes <= (char *)fk.blk[i] + fk.size[i])
            return i;
    return -1;
}

static inline col_status fk_refuse(col_err *err, const char *what, const void *a, const void *b)
{
    if (!fk.refused++ && !fk.first[0])
        snprintf(fk.first, sizeof fk.first, "%s %p %p", what, a, b);
    return col_err_set(err, COL_EINVAL, "fake %s: %p / %p is not the right kind of memory", what, a, b);
}

static inline col_status fk_alloc(const col_backend *be, size_t bytes, void **out, col_err *err)
{
    *out = NULL;
    if (!fk_is_owner(be))
        return col_err_set(err, COL_EINTERNAL, "fake alloc: called with another backend");
    if (fk.fail_alloc)
        return col_err_set(err, COL_ENOMEM, "fake device out of memory (%zu bytes)", bytes);
    int i = 0;
    while (i < FK_MAXBLK && fk.blk[i])
        i++;
    size_t b = (bytes + 63) & ~(size_t)63;
    void *p = i < FK_MAXBLK ? aligned_alloc(64, b ? b : 64) : NULL;
    if (!p)
        return col_err_set(err, COL_ENOMEM, "fake alloc: no block for %zu bytes", bytes);
    memset(p, 0xff, b ? b : 64); /* NaN bytes: what nobody wrote shows */
    fk.blk[i] = p;
    fk.size[i] = bytes;
    fk.allocs++;
    fk.live++;
    *out = p;
    return COL_OK;
}

static inline void fk_free(const col_backend *be, void *p)
{
    (void)be;
    if (!p)
        return;
    for (int i = 0; i < FK_MAXBLK; i++)
        if (fk.blk[i] == p) {
            free(p);
            fk.blk[i] = NULL;
            fk.frees++;
            fk.live--;
            return;
        }
    fk.frees += 1000; /* not ours: fails every balance check */
}

static inline col_status fk_to_device(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    if (!fk_is_owner(be) || fk_find_block(dst, bytes) < 0 || fk_find_block(src, 1) >= 0)
        return fk_refuse(err, "to_device", dst, src);
    memcpy(dst, src, bytes);
    fk.to_dev++;
    return COL_OK;
}

static inline col_status fk_to_host(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    if (!fk_is_owner(be) || fk_find_block(src, bytes) < 0 || fk_find_block(dst, 1) >= 0)
        return fk_refuse(err, "to_host", dst, src);
    memcpy(dst, src, bytes);
    fk.to_host++;
    return COL_OK;
}

static inline col_status fk_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    const char *d = dst, *s = src;
    if (!fk_is_owner(be) || fk_find_block(dst, bytes) < 0 || fk_find_block(src, bytes) < 0 ||
        (d < s + bytes && s < d + bytes))
        return fk_refuse(err, "copy", dst, src);
    memcpy(dst, src, bytes); /* not memmove: overlapping ranges were refused above */
    fk.copies++;
    return COL_OK;
}

static inline col_status fk_sync(const col_backend *be, col_err *err)
{
    (void)be;
    fk.syncs++;
    if (fk.fail_sync)
        return col_err_set(err, COL_EINTERNAL, "fake device fault at sync");
    return COL_OK;
}

static const col_backend_mem fk_mem = {fk_alloc, fk_free, fk_to_device, fk_to_host, fk_sync, fk_copy};
static const col_backend_mem fk_mem_nocopy = {fk_alloc, fk_free, fk_to_device, fk_to_host, fk_sync, NULL};
static const col_backend_mem fk_mem_nosync = {fk_alloc, fk_free, fk_to_device, fk_to_host, NULL, fk_copy};

#endif
