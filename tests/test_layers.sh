#!/bin/sh
# test_layers.sh - the build enforces the layers (Makefile.am, "the layers").
# Each library is compiled with only the include paths of what it may use.
# For every library this compiles, with that library's flags exactly as the
# build passes them, one file including each header of every library it may
# NOT use (must fail: "No such file") and each header of what it may use
# (must compile: the control that the flags are real). A header included from
# a directory the library may not reach is a build error, so a wrong include
# cannot land.
set -u
: "${SRCDIR:?}" "${LAYER_CC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

# headers of a library directory (C headers only: the CUDA ones need nvcc)
headers() { (cd "$SRCDIR/$1" && ls *.h 2>/dev/null | grep -v '^cuda_internal\.h$'); }

# try LAYER FLAGS HEADER: 0 if a file including HEADER compiles with FLAGS
try() {
    printf '#include "%s"\nint col_layer_probe;\n' "$3" > "$tmp/probe.c"
    # shellcheck disable=SC2086
    # run from the build directory, where the flags' relative paths point; the probe
    # itself lies in an empty directory, so its own directory adds no header
    $LAYER_CC -std=c11 -D_GNU_SOURCE $2 $LAYER_EXTRA -fsyntax-only "$tmp/probe.c" > "$tmp/out" 2>&1
}

# check LAYER FLAGS ALLOWED_DIRS FORBIDDEN_DIRS
check() {
    layer=$1 flags=$2
    for d in $3; do
        for h in $(headers "$d"); do
            if try "$layer" "$flags" "$h"; then ok "$layer may include $d/$h"
            else notok "$layer may include $d/$h"; sed 's/^/# /' "$tmp/out" | head -5; fi
        done
    done
    for d in $4; do
        for h in $(headers "$d"); do
            # a header of the same name in an allowed directory is that one, not this
            for a in $3; do [ -f "$SRCDIR/$a/$h" ] && continue 2; done
            if try "$layer" "$flags" "$h"; then notok "$layer must not reach $d/$h"
            elif grep -q "No such file" "$tmp/out"; then ok "$layer cannot include $d/$h"
            else notok "$layer: $d/$h failed for another reason"; sed 's/^/# /' "$tmp/out" | head -5; fi
        done
    done
}

B=libcore/base E=libcore/engine C=libcore/engine/cpu G=libcore/engine/cuda F=libcore/formats T=libcore/text
K=libcore/comm M=memtier L=models/lm D=models/diffusion O=models/common P=models/fold A=apps
check base "$LAYER_base" "$B" "$E $C $G $F $T $K $M $L $D $A $O $P"
check engine "$LAYER_engine" "$B $E" "$C $G $F $T $K $M $L $D $A $O $P"
check engine/cpu "$LAYER_cpu" "$B $E $C" "$G $F $T $K $M $L $D $A $O $P"
check formats "$LAYER_formats" "$B $E $F" "$C $G $T $K $M $L $D $A $O $P"
check text "$LAYER_text" "$B $E $F $T" "$C $G $K $M $L $D $A $O $P"
check comm "$LAYER_comm" "$B $E $K" "$C $G $F $T $M $L $D $A $O $P"
check memtier "$LAYER_memtier" "$B $E $M" "$C $G $F $T $K $L $D $A $O $P"
check models "$LAYER_models" "$B $E $F $T $M $L" "$C $G $K $D $A $O $P"
check diffusion "$LAYER_diffusion" "$B $E $F $T $M $O $D" "$C $G $K $L $A $P"
check common "$LAYER_common" "$B $E $F $M $O" "$C $G $T $K $L $D $P $A"
check fold "$LAYER_fold" "$B $E $F $K $M $O $P" "$C $G $T $L $D $A"
echo "1..$n"
[ "$fails" -eq 0 ]
