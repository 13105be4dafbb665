/* procsetup.c - the process settings of colossal's programs (procsetup.h). */
#include "procsetup.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "blas.h"
#include "cpus.h"

static void choose_blas_core(void)
{
    const char *core = col_blas_preferred_core();
    if (core && !getenv("OPENBLAS_CORETYPE"))
        setenv("OPENBLAS_CORETYPE", core, 0);
}

/* sets OMP_WAIT_POLICY=passive and executes the program again; returns if
 * the user chose a policy or the exec failed */
static void choose_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || !argv || !argv[0])
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 0) != 0)
        return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* libgomp keeps its default: do not claim otherwise */
}

static void choose_threads(void)
{
    int cpus = col_cpus_available();
    if (!getenv("OMP_NUM_THREADS") && cpus < omp_get_max_threads())
        omp_set_num_threads(cpus);
}

void col_proc_setup(char **argv)
{
    choose_blas_core();
    choose_wait_policy(argv);
    choose_threads();
}

void col_proc_setup_decode(char **argv)
{
    (void)argv;
    choose_blas_core();
    choose_threads();
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v ? v : dflt;
}

void col_proc_describe(char *buf, size_t n)
{
    snprintf(buf, n, "OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s, %d OpenMP threads (%d CPUs available), OPENBLAS_CORETYPE=%s",
             env_or("OMP_WAIT_POLICY", "(unset)"), env_or("GOMP_SPINCOUNT", "(unset)"), omp_get_max_threads(),
             col_cpus_available(), env_or("OPENBLAS_CORETYPE", "(unset)"));
}

bool col_proc_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}
