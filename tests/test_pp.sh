#!/bin/sh
# test_pp.sh - pipeline parallelism against one process (tests/test_pp) with 2 and 4 processes.
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_PP:-tests/test_pp}" 2 4
