#!/bin/sh
# test_cuda_ops_emu_check.sh - every CUDA op test through the host emulator in
# its check mode (COL_CUDA_EMU_CHECK=1): each kernel launch runs twice, its
# threads and blocks in two different orders from the same memory, and a
# result that depends on the order (a missing __syncthreads or __syncwarp, a
# race, a read of uninitialised shared memory) fails the launch, as do
# threads that miss a barrier the others wait at. The kernels' results are
# then compared with the CPU backend's as in tests/test_cuda_ops_emu.
set -u
: "${BUILDDIR:?}"
COL_CUDA_EMU_CHECK=1
export COL_CUDA_EMU_CHECK
exec "$BUILDDIR/tests/test_cuda_ops_emu"
