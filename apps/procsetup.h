/* procsetup.h - the process settings a colossal program makes first thing in
 * main, before any library work. The libraries never change the process
 * environment (docs/DESIGN.md, "CPU backend"); these are the program's
 * choices, and each gives way to the user's own setting:
 *
 *  - OpenMP threads wait passively (sleep in the kernel at a barrier instead
 *    of spinning) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set: on a busy
 *    machine spinning threads burn the CPU share the working ones need.
 *    Decoding programs (col_proc_setup_decode) keep libgomp's default instead:
 *    a thread spins a while (GOMP_SPINCOUNT, 300000 turns) before it sleeps.
 *    A token runs ~100 small parallel products in a few milliseconds, and
 *    waking sleeping threads for each cost a quarter of the time (measured on
 *    a 2-core Zen 4 VM: q4_0 decode 49 tok/s passive, 58-64 spinning a while).
 *    There is no OpenMP call for it, and libgomp reads the variables once,
 *    while it is loaded (before main), so the program sets
 *    OMP_WAIT_POLICY=passive and executes itself again (/proc/self/exe, same
 *    arguments and process id; the environment then says so). If that exec
 *    fails the program goes on with libgomp's default.
 *  - OpenMP's thread count is the CPUs this process may use
 *    (col_cpus_available: affinity mask and cgroup quota) unless
 *    OMP_NUM_THREADS is set: omp_set_num_threads, no variable.
 *  - OpenBLAS's kernel set: OPENBLAS_CORETYPE = col_blas_preferred_core()
 *    unless set; OpenBLAS reads it when the CPU backend loads it.
 *
 * The OpenBLAS of the OpenMP build shares these threads and this count. */
#ifndef COL_PROCSETUP_H
#define COL_PROCSETUP_H

#include <stddef.h>

/* argv: main's (for the exec). Call before anything else, while the process
 * has one thread. Returns only in the process that goes on. */
void col_proc_setup(char **argv);
/* The same for a program whose work is decoding (colossal-chat, colossal-serve): OpenMP's wait policy stays
 * libgomp's default (spin a while, then sleep) unless the user set one. */
void col_proc_setup_decode(char **argv);

/* Whether a launcher (mpirun, srun) started this process as one of a parallel run: its environment
 * names a rank or a size (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, PMI_RANK, SLURM_PROCID). */
#include <stdbool.h>
bool col_proc_launched(void);

/* One line on the settings in force (for benchmark headers). */
void col_proc_describe(char *buf, size_t n);

#endif
