#!/bin/sh
# test_dp.sh - data parallelism with ZeRO 1/2/3 against one process (tests/test_dp) with 2, 3 and 4 processes.
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_DP:-tests/test_dp}" 2 3 4
