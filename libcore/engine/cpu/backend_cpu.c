/* backend_cpu.c - the CPU backend: loads OpenBLAS (blas.c) and has each kernel
 * module (cpu_*.c) fill its entries of the table; the modules never call back. */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "backend_cpu.h"
#include "cpus.h"

/* OpenMP's thread count for this thread, capped by the CPUs this process may
 * use (a cgroup quota can be below the affinity mask OpenMP counts), unless
 * the user asked for a count (OMP_NUM_THREADS) */
static int backend_threads(int omp)
{
    int cpus = col_cpus_available();
    if (omp < 1)
        return 1;
    return getenv("OMP_NUM_THREADS") || omp < cpus ? omp : cpus;
}

col_status col_cpu_backend_init(col_backend *be, col_err *err)
{
    memset(be, 0, sizeof *be);
    col_cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return col_err_set(err, COL_ENOMEM, "cpu backend: out of memory");
    col_status st = col_blas_load(&ctx->blas, err);
    if (st != COL_OK) {
        free(ctx);
        return st;
    }
    ctx->omp_made = omp_get_max_threads();
    ctx->nthreads = backend_threads(ctx->omp_made);
    be->name = "cpu";
    be->ctx = ctx;
    col_cpu_backend_set_bf16_gemm(be, COL_CPU_BF16_AUTO);
    col_cpu_register_basic(be);
    col_cpu_register_unary(be);
    col_cpu_register_reduce(be);
    col_cpu_register_norm(be);
    col_cpu_register_nn(be);
    col_cpu_register_attention(be);
    col_cpu_register_image(be);
    return COL_OK;
}

void col_cpu_backend_free(col_backend *be)
{
    if (!be || !be->ctx)
        return;
    col_cpu_ctx *ctx = be->ctx;
    col_blas_unload(&ctx->blas);
    free(ctx);
    be->ctx = NULL;
}

const char *col_cpu_backend_blas_core(const col_backend *be)
{
    const col_cpu_ctx *ctx = be->ctx;
    return ctx ? ctx->blas.core : "";
}

int col_cpu_backend_threads(const col_backend *be)
{
    const col_cpu_ctx *ctx = be->ctx;
    return ctx ? ctx->nthreads : 0;
}

int col_cpu_backend_blas_parallel(const col_backend *be)
{
    const col_cpu_ctx *ctx = be->ctx;
    return ctx ? ctx->blas.parallel : -1;
}

const char *col_cpu_backend_set_bf16_gemm(col_backend *be, col_cpu_bf16_gemm how)
{
    col_cpu_ctx *ctx = be->ctx;
    if (!ctx)
        return "";
    ctx->sbgemm_on = ctx->blas.sbgemm && (how == COL_CPU_BF16_SBGEMM || (how == COL_CPU_BF16_AUTO && col_cpu_has_avx512_bf16()));
    return col_cpu_backend_bf16_gemm(be);
}

const char *col_cpu_backend_bf16_gemm(const col_backend *be)
{
    const col_cpu_ctx *ctx = be->ctx;
    return ctx && ctx->sbgemm_on ? "sbgemm" : "f32 tiles";
}
