#include "blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *col_blas_preferred_core(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return NULL;
    /* AVX-512 F, DQ, BW, VL: what OpenBLAS's SkylakeX kernels use */
    const unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    if ((b & need) != need)
        return NULL;
    /* the OS must save the ZMM state (XCR0 bits 1,2,5,6,7) */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6u) != 0xe6u)
        return NULL;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5)))
        return "COOPERLAKE"; /* AVX512_BF16 */
    return "SKYLAKEX";
#else
    return NULL;
#endif
}

/* The OpenMP build of OpenBLAS first: it shares libgomp's threads with our
 * kernels, where the pthread build's threads and OpenMP's spin against each
 * other between calls (measured: block benchmark 0.6-0.8 of the sgemm rate
 * with the pthread build, 0.85-0.9 with the OpenMP one; docs/PERF.md). */
static const char *const blas_paths[] = {
    "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "libopenblas.so",
};

col_status col_blas_load(col_blas *b, col_err *err)
{
    memset(b, 0, sizeof *b);
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (user && *user) {
        strncpy(b->chosen, user, sizeof b->chosen - 1);
    } else {
        const char *pref = col_blas_preferred_core();
        if (pref) {
            /* read by OpenBLAS's loader constructor, before it is loaded */
            setenv("OPENBLAS_CORETYPE", pref, 0);
            strncpy(b->chosen, pref, sizeof b->chosen - 1);
        }
    }
    for (size_t i = 0; i < sizeof blas_paths / sizeof blas_paths[0] && !b->handle; i++) {
        b->handle = dlopen(blas_paths[i], RTLD_NOW | RTLD_LOCAL);
        if (b->handle)
            snprintf(b->path, sizeof b->path, "%s", blas_paths[i]);
    }
    if (!b->handle)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "cannot load OpenBLAS (libopenblas.so.0): install the Debian package libopenblas0");
    b->sgemm = (col_sgemm_fn)dlsym(b->handle, "cblas_sgemm");
    b->sgemv = (col_sgemv_fn)dlsym(b->handle, "cblas_sgemv");
    char *(*corename)(void) = (char *(*)(void))dlsym(b->handle, "openblas_get_corename");
    if (!b->sgemm || !b->sgemv) {
        dlclose(b->handle);
        b->handle = NULL;
        return col_err_set(err, COL_EUNSUPPORTED, "the loaded OpenBLAS has no cblas_sgemm or cblas_sgemv");
    }
    if (corename) {
        const char *c = corename();
        if (c)
            strncpy(b->core, c, sizeof b->core - 1);
    }
    return COL_OK;
}

void col_blas_unload(col_blas *b)
{
    /* OpenBLAS keeps worker threads; unloading it under them is unsafe, so
     * the handle stays open for the life of the process (dlopen refcounts). */
    b->sgemm = NULL;
    b->handle = NULL;
}
