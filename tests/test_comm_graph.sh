#!/bin/sh
# test_comm_graph.sh - collectives as graph nodes (libcore/comm/comm_graph.h) under mpirun with 1, 2 and 4
# processes (tests/test_comm_graph).
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_COMM_GRAPH:-tests/test_comm_graph}" 1 2 4
