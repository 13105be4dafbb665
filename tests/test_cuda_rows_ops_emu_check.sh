#!/bin/sh
# test_cuda_rows_ops_emu_check.sh - the per-row cache ops' kernels (arange, kv_write and attention over
# cache rows) through the host emulator in its check mode (COL_CUDA_EMU_CHECK=1), as
# tests/test_cuda_ops_emu_check.sh does for the other ops: each launch runs in two thread and block
# orders and must give the same bytes, then the results are compared with the CPU backend's.
set -u
: "${BUILDDIR:?}"
COL_CUDA_EMU_CHECK=1
export COL_CUDA_EMU_CHECK
exec "$BUILDDIR/tests/test_cuda_rows_ops_emu"
