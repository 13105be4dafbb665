#!/bin/sh
# test_tp_pp.sh - tensor and sequence parallelism inside pipeline stages against one process (tests/test_tp_pp)
# with 4 and 8 processes.
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_TP_PP:-tests/test_tp_pp}" 4 8
