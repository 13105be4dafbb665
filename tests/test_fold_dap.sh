#!/bin/sh
# test_fold_dap.sh - AlphaFold2's trunk with dynamic axial parallelism (models/fold/fold_dap.h) under mpirun
# with 1, 2 and 4 processes (tests/test_fold_dap). One thread a process: the ranks share the machine's cores.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_NUM_THREADS
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_FOLD_DAP:-tests/test_fold_dap}" 1 2 4
