#!/bin/sh
# test_tp_pp.sh - tensor and sequence parallelism inside pipeline stages against one process (tests/test_tp_pp)
# with 4, 8 and 16 processes (16: 2.5D and 3D grids of 8 times 2 stages; tiny tensors, a few seconds).
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_TP_PP:-tests/test_tp_pp}" 4 8 16
