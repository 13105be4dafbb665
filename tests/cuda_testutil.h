/* cuda_testutil.h - the start of every GPU test: the CUDA backend on device
 * 0, or the TAP line that skips the whole file when there is no usable
 * device (no driver, no GPU, an unsupported one). Include after testlib.h.
 * Built with -DCOL_CUDA_EMU (the *_emu programs, linked to the host
 * emulator) the test says so in a TAP comment: it never skips there. */
#ifndef COL_TESTS_CUDA_TESTUTIL_H
#define COL_TESTS_CUDA_TESTUTIL_H

#include <stdio.h>

#include "backend_cuda.h"

#ifdef COL_CUDA_EMU
/* the emulator's check mode is on (libcore/engine/cuda/emu/cuda_emu.h) */
int cuemu_check(void);
#endif

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
#ifdef COL_CUDA_EMU
    printf("# the CUDA emulator (libengine_cuda_emu.a, %s): these results check the kernels' logic run on the CPU, "
           "not CUDA or a GPU\n",
           cuemu_check() ? "check mode: every launch in two thread orders, compared" : "normal mode");
#endif
    return true;
}

#endif
