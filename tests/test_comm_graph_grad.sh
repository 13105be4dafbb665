#!/bin/sh
# test_comm_graph_grad.sh - collectives with gradients (libcore/comm/comm_graph.h, issue 18) under mpirun with
# 1, 2 and 4 processes (tests/test_comm_graph_grad).
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_COMM_GRAPH_GRAD:-tests/test_comm_graph_grad}" 1 2 4
