#!/bin/sh
# test_quant_emu_check.sh - the quantized matmul and embedding kernels (cuda_quant.cu) through the host
# emulator in its check mode (COL_CUDA_EMU_CHECK=1), as tests/test_cuda_ops_emu_check.sh does for the
# other ops: each launch runs in two thread and block orders and must give the same bytes, then the
# results are checked as tests/test_quant.c checks them.
set -u
: "${BUILDDIR:?}"
COL_CUDA_EMU_CHECK=1
export COL_CUDA_EMU_CHECK
exec "$BUILDDIR/tests/test_quant_emu"
