#!/bin/sh
# test_tp.sh - tensor and sequence parallelism against one process (tests/test_tp) with 2, 4 and 8 processes.
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_TP:-tests/test_tp}" 2 4 8
