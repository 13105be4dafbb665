#!/bin/sh
# test_lm_par_grid.sh - the grid modes of tensor parallelism (models/lm/lm_par_grid.c: 2D, 2.5D, 3D) against one
# process under mpirun with 1, 4 and 8 processes (tests/test_lm_par_grid).
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_LM_PAR_GRID:-tests/test_lm_par_grid}" 1 4 8
