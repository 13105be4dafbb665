/* nvme_testutil.h - a fault hook for the NVMe tier's store (memtier/nvme.h)
 * that fails the k-th read with EIO, shared by the tests of sessions with
 * tensors on NVMe. Include after nvme.h. */
#ifndef COL_TESTS_NVME_TESTUTIL_H
#define COL_TESTS_NVME_TESTUTIL_H

#include <errno.h>

#include "nvme.h"

typedef struct {
    int reads, fail_at; /* reads so far; the one to fail (1-based; -1: none, just count) */
} tl_read_fault;

/* mt_nvme_faults.before_submit: user is a tl_read_fault */
static inline int tl_fail_read(void *user, int op, int slot, size_t bytes)
{
    (void)slot, (void)bytes;
    tl_read_fault *f = user;
    if (op == MT_NVME_OP_READ && ++f->reads == f->fail_at)
        return -EIO;
    return 0;
}

#endif
