/* cuda_testutil.h - the start of every GPU test: the CUDA backend on device
 * 0, or the TAP line that skips the whole file when there is no usable
 * device (no driver, no GPU, an unsupported one). Include after testlib.h. */
#ifndef COL_TESTS_CUDA_TESTUTIL_H
#define COL_TESTS_CUDA_TESTUTIL_H

#include <stdio.h>

#include "backend_cuda.h"

/* true with *gpu ready; false after printing "1..0 # SKIP ..." (exit 0 then) */
static inline bool tl_cuda_backend_or_skip(col_backend *gpu)
{
    int ndev = 0;
    col_err why = {0};
    if (!col_cuda_device_count(&ndev, &why)) {
        printf("1..0 # SKIP no CUDA device (%s)\n", why.msg);
        return false;
    }
    if (col_cuda_backend_init(gpu, 0, &why) != COL_OK) {
        printf("1..0 # SKIP no usable CUDA device (%s)\n", why.msg);
        return false;
    }
    return true;
}

#endif
