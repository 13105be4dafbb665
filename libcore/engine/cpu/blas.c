#include "blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <link.h>
#include <omp.h>
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

bool col_cpu_has_avx512_bf16(void)
{
    const char *c = col_blas_preferred_core();
    return c && strcmp(c, "COOPERLAKE") == 0;
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

/* the file behind a loaded library: what the loader found (a bare name goes
 * through the search path and /etc/alternatives links), links resolved */
static void loaded_file(void *h, const char *asked, char *out, size_t n)
{
    struct link_map *lm = NULL;
    const char *name = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name[0] ? lm->l_name : asked;
    char *real = realpath(name, NULL);
    snprintf(out, n, "%s", real ? real : name);
    free(real);
}

/* the first of blas_paths that loads */
static void *open_blas(col_blas *b)
{
    for (size_t i = 0; i < sizeof blas_paths / sizeof blas_paths[0]; i++) {
        void *h = dlopen(blas_paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            loaded_file(h, blas_paths[i], b->path, sizeof b->path);
            return h;
        }
    }
    return NULL;
}

/* what the loaded library says about itself: kernel set, threading, thread-count calls */
static void describe_blas(col_blas *b)
{
    char *(*corename)(void) = (char *(*)(void))dlsym(b->handle, "openblas_get_corename");
    int (*parallel)(void) = (int (*)(void))dlsym(b->handle, "openblas_get_parallel");
    b->set_threads = (void (*)(int))dlsym(b->handle, "openblas_set_num_threads");
    b->get_threads = (int (*)(void))dlsym(b->handle, "openblas_get_num_threads");
    b->parallel = parallel ? parallel() : -1;
    const char *c = corename ? corename() : NULL;
    if (c)
        snprintf(b->core, sizeof b->core, "%s", c);
}

col_status col_blas_load(col_blas *b, col_err *err)
{
    memset(b, 0, sizeof *b);
    /* read, never set: the program chooses (see blas.h); OpenBLAS's constructor reads it at dlopen */
    const char *asked = getenv("OPENBLAS_CORETYPE");
    if (asked)
        snprintf(b->chosen, sizeof b->chosen, "%s", asked);
    b->handle = open_blas(b);
    if (!b->handle)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "cannot load OpenBLAS (libopenblas.so.0): install the Debian package libopenblas0");
    b->sgemm = (col_sgemm_fn)dlsym(b->handle, "cblas_sgemm");
    b->sgemv = (col_sgemv_fn)dlsym(b->handle, "cblas_sgemv");
    if (!b->sgemm || !b->sgemv) {
        dlclose(b->handle);
        b->handle = NULL;
        return col_err_set(err, COL_EUNSUPPORTED, "the loaded OpenBLAS has no cblas_sgemm or cblas_sgemv");
    }
    b->sbgemm = (col_sbgemm_fn)dlsym(b->handle, "cblas_sbgemm"); /* optional */
    describe_blas(b);
    return COL_OK;
}

/* The OpenMP build follows omp_get_max_threads() of the caller at each call
 * (its openblas_set_num_threads is omp_set_num_threads plus its own count),
 * so that is what is compared and restored; the pthread build has its own
 * count, global to the process: calls from several threads at once with
 * different counts race on it (OpenBLAS's limitation). */
int col_blas_threads_begin(const col_blas *b, int n)
{
    if (!b->set_threads || b->parallel == COL_BLAS_SEQUENTIAL)
        return 0;
    if (b->parallel == COL_BLAS_OPENMP && omp_in_parallel())
        return 0; /* there it runs on the calling thread alone; setting its count would race with the team */
    n = n > 0 ? n : 1;
    int now = b->parallel == COL_BLAS_OPENMP ? omp_get_max_threads() : b->get_threads ? b->get_threads() : 0;
    if (now == n || now < 1)
        return 0;
    b->set_threads(n);
    return now;
}

void col_blas_threads_end(const col_blas *b, int saved)
{
    if (saved > 0 && b->set_threads)
        b->set_threads(saved);
}

void col_blas_unload(col_blas *b)
{
    /* OpenBLAS keeps worker threads; unloading it under them is unsafe, so
     * the handle stays open for the life of the process (dlopen refcounts). */
    b->sgemm = NULL;
    b->handle = NULL;
}
