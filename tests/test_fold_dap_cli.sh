#!/bin/sh
# test_fold_dap_cli.sh - `mpirun -np N colossal-fold ...` (FastFold's dynamic axial parallelism): with 2 and
# 4 processes the PDB and scores files are those one process writes, and only process 0 writes or
# prints (TAP). The model is tests/fixtures/fold_model/narrow.npz; 14 residues split unevenly over 4.
fold=${FOLD:-./apps/colossal-fold}
src=${SRCDIR:-${srcdir:-.}}
fx="$src/tests/fixtures/fold_model"
MPIRUN=${MPIRUN:-mpirun}
if ! command -v "$MPIRUN" > /dev/null 2>&1; then
    echo "1..0 # SKIP no MPI launcher (mpirun) installed"
    exit 0
fi
flags=
"$MPIRUN" --version 2>&1 | grep -q "Open MPI" && flags="--allow-run-as-root --oversubscribe"
if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
# close A B TOL: the files have the same text, their numbers within TOL (the processes' GEMMs add in other
# orders, so a value printed with 3 decimals may round the other way; test_fold_dap.c bounds the raw values)
close() {
    tr -c '0-9.eE+-' ' ' < "$1" | tr -s ' ' '\n' > "$tmp/a.num"
    tr -c '0-9.eE+-' ' ' < "$2" | tr -s ' ' '\n' > "$tmp/b.num"
    [ "$(tr -d '0-9.eE+ \n-' < "$1")" = "$(tr -d '0-9.eE+ \n-' < "$2")" ] || return 1
    paste "$tmp/a.num" "$tmp/b.num" | awk -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > tol) bad++ }
        END { exit bad > 0 }'
}
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/err" | head -5; }
args="-q --recycles 1 --msa $fx/msa.a3m --max-msa-clusters 4 --max-extra-msa 8 --chunk-size none"
if "$fold" $args -o "$tmp/one.pdb" "$fx/narrow.npz" "$fx/query.fasta" > "$tmp/one.out" 2> "$tmp/err"; then
    pass "one process"
else fail "one process"; fi
for np in 2 4; do
    # shellcheck disable=SC2086
    if timeout 600 "$MPIRUN" $flags -np $np "$fold" $args -o "$tmp/p$np.pdb" "$fx/narrow.npz" "$fx/query.fasta" \
        > "$tmp/p$np.out" 2> "$tmp/err" < /dev/null; then pass "$np processes run"
    else fail "$np processes run"; fi
    if close "$tmp/one.pdb" "$tmp/p$np.pdb" 0.0015 && close "$tmp/one_scores.json" "$tmp/p$np""_scores.json" 0.0105; then
        pass "$np processes write the PDB and scores of one process (to the last printed digit)"
    else fail "$np processes write the PDB and scores of one process"; fi
    if [ "$(wc -l < "$tmp/p$np.out")" -eq 1 ]; then pass "$np processes: only process 0 prints"
    else fail "$np processes: only process 0 prints ($(wc -l < "$tmp/p$np.out") lines)"; fi
done
echo "1..$n"
[ "$fails" -eq 0 ]
