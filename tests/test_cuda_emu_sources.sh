#!/bin/sh
# test_cuda_emu_sources.sh - the emulated CUDA library (libengine_cuda_emu.a) compiles every .cu file
# of the real one (libengine_cuda.a): a kernel file added to one list only would leave the emulated
# tests without its kernels (a link error at best). TAP output.
am=${srcdir:-.}/Makefile.am
real=$(sed -n '/^libcore_engine_cuda_libengine_cuda_a_SOURCES/,/^[^	]/p' "$am" |
    grep -o 'libcore/engine/cuda/[a-z_]*\.cu' | sed 's|.*/||; s|\.cu$||' | sort -u)
emu=$(sed -n '/^CUDA_EMU_OBJS/,/^[^	]/p' "$am" | grep -o 'emu_a-[a-z_]*' | sed 's|emu_a-||' | sort -u)
echo "1..2"
n=$(echo "$real" | grep -c .)
if [ "$n" -ge 10 ]; then echo "ok 1 - libengine_cuda.a lists $n .cu files"; else echo "not ok 1 - found only $n .cu files in Makefile.am"; fi
missing=$(for f in $real; do echo "$emu" | grep -qx "$f" || printf '%s ' "$f"; done)
extra=$(for f in $emu; do echo "$real" | grep -qx "$f" || printf '%s ' "$f"; done)
if [ -z "$missing$extra" ]; then
    echo "ok 2 - the emulated library compiles the same $n files"
else
    echo "not ok 2 - CUDA_EMU_OBJS lacks: ${missing:-none}; has beyond the real library: ${extra:-none}"
fi
