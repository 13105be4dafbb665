#!/bin/sh
# test_ring_attention.sh - ring self-attention (libcore/comm/comm_graph.h, col_comm_graph_ring_attention) under
# mpirun with 1, 2 and 4 processes (tests/test_ring_attention).
exec "${SRCDIR:-.}/tests/mpi_run.sh" "${TEST_RING_ATTENTION:-tests/test_ring_attention}" 1 2 4
