#!/bin/sh
# test_dep_cycles.sh - the library files call each other in one direction:
# tools/dep_cycles.py, run on the object files of this build, finds no cycle of
# calls between the source files of libcore/, memtier/ and models/ (inside the
# engine, for instance: graph.c below the forward builders, below grad.c,
# below the backward builders, below autodiff.c). The script is first shown to
# find a planted cycle and to pass the same files without it. Skipped without
# python3 or nm (binutils).
set -u
: "${SRCDIR:?}"
builddir=${BUILDDIR:-.}
script="$SRCDIR/tools/dep_cycles.py"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

for tool in python3 nm; do
    if ! command -v "$tool" > /dev/null 2>&1; then
        echo "1..0 # SKIP $tool is not installed"
        exit 0
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${LAYER_CC:-cc}

# ---- controls: a planted cycle is found, the same files without it pass ----
# plant DIR CYCLIC: libcore/x/{a,b,c}.c compiled beside their sources; a calls b,
# b calls c, and with CYCLIC c calls a
plant() {
    mkdir -p "$1/libcore/x"
    printf 'int b(int);\nint a(int v) { return b(v) + 1; }\n' > "$1/libcore/x/a.c"
    printf 'int c(int);\nint b(int v) { return c(v) * 2; }\n' > "$1/libcore/x/b.c"
    if [ "$2" = yes ]; then
        printf 'int a(int);\nint c(int v) { return v > 0 ? a(v - 1) : 0; }\n' > "$1/libcore/x/c.c"
    else
        printf 'int c(int v) { return v - 1; }\n' > "$1/libcore/x/c.c"
    fi
    for f in a b c; do
        $cc -c -o "$1/libcore/x/$f.o" "$1/libcore/x/$f.c" || return 1
    done
}
if plant "$tmp/cyclic" yes && plant "$tmp/acyclic" no; then
    python3 "$script" "$tmp/cyclic" > "$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -eq 1 ] && grep -q "cycle 1: libcore/x/a.c libcore/x/b.c libcore/x/c.c" "$tmp/out"; then
        ok "a planted cycle a -> b -> c -> a is found (control)"
    else
        notok "a planted cycle is not found (exit $rc)"; sed 's/^/# /' "$tmp/out"
    fi
    python3 "$script" "$tmp/acyclic" > "$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "0 cycle(s)" "$tmp/out"; then
        ok "the same files without c -> a pass (control)"
    else
        notok "files without a cycle are refused (exit $rc)"; sed 's/^/# /' "$tmp/out"
    fi
else
    notok "the control files compile with $cc"
fi

# ---- this build ----
python3 "$script" --edges libcore/engine "$builddir" > "$tmp/out" 2>&1
rc=$?
if grep -q "^libcore/engine/autodiff.c -> libcore/engine/graph.c" "$tmp/out"; then
    ok "the engine's object files are read (autodiff.c calls graph.c)"
else
    notok "the engine's object files are not read from $builddir (exit $rc)"; sed 's/^/# /' "$tmp/out" | tail -5
fi
if [ "$rc" -eq 0 ]; then
    ok "no file-level call cycles in libcore, memtier, models: $(grep 'cycle(s)' "$tmp/out")"
else
    notok "file-level call cycles (exit $rc):"; sed -n '/cycle(s)$/,$p' "$tmp/out" | sed 's/^/# /'
fi

echo "1..$n"
[ "$fails" -eq 0 ]
