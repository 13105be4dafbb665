#!/bin/sh
# test_cuda_gpt_emu_check.sh - the GPT-2/LLaMA training step and the fused
# optimizer steps through the host emulator in its check mode
# (COL_CUDA_EMU_CHECK=1; see tests/test_cuda_ops_emu_check.sh): every launch of
# a whole step, run twice in two thread orders, must give the same bytes.
set -u
: "${BUILDDIR:?}"
COL_CUDA_EMU_CHECK=1
export COL_CUDA_EMU_CHECK
exec "$BUILDDIR/tests/test_cuda_gpt_emu"
