#!/bin/sh
# test_fold_cli.sh - colossal-fold from the command line (TAP output).
# The model is tests/fixtures/fold_model/narrow.npz (tools/refgen/make_fold_model_fixtures.py:
# random AlphaFold2 parameters at narrow widths in DeepMind's npz layout); the parity with
# DeepMind's JAX code is tests/test_fold_model.c's. Here: the PDB/mmCIF and PAE files, several
# records and models, replacing outputs only with --force, and one clear line with a non-zero
# exit for every bad input.
fold=${FOLD:-./apps/colossal-fold}
src=${SRCDIR:-${srcdir:-.}}
fx="$src/tests/fixtures/fold_model"
params="$fx/narrow.npz"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}
fast="--recycles 1 -q --device cpu"

# check NAME WANT_RC FIXED_STRING -- ARGS...: exit code, the string on stderr, one line on stderr
check() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$fold" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" "$tmp/err" && [ "$lines" -eq 1 ]; then
        pass "$name"
    else
        fail "$name: exit $rc (want $want), $lines stderr lines, want '$pattern'"
    fi
}

if "$fold" --help > "$tmp/out" 2> "$tmp/err" && grep -q -- "--recycles" "$tmp/out"; then pass "--help"
else fail "--help"; fi

# a structure with its MSA: the PDB named on stdout, pLDDT in the B-factor column, TER and END, the PAE file
if "$fold" $fast --msa "$fx/msa.a3m" -o "$tmp/a.pdb" "$params" "$fx/query.fasta" > "$tmp/out" 2> "$tmp/err" &&
   grep -q "^$tmp/a.pdb	mean pLDDT [0-9.]*	pTM 0\.[0-9]*$" "$tmp/out"; then pass "a PDB is written and named on stdout"
else fail "a PDB is written and named on stdout"; cat "$tmp/out"; fi
if [ "$(grep -c '^ATOM  ' "$tmp/a.pdb")" -gt 50 ] && grep -q '^TER ' "$tmp/a.pdb" && grep -q '^END' "$tmp/a.pdb" &&
   grep '^ATOM  ' "$tmp/a.pdb" | cut -c61-66 | grep -qv '^ *[0-9][0-9]*\.[0-9][0-9]$'; then
    fail "ATOM records carry pLDDT as B-factors"
elif [ "$(grep -c '^ATOM  ' "$tmp/a.pdb")" -gt 50 ]; then pass "ATOM records carry pLDDT as B-factors, TER, END"
else fail "ATOM records carry pLDDT as B-factors"; fi
if [ "$(grep -c '^ATOM  .\{6\} CA ' "$tmp/a.pdb")" -eq 14 ]; then pass "one CA per residue (14)"
else fail "one CA per residue (14)"; fi
if grep -q '"pae": \[\[' "$tmp/a_scores.json" && grep -q '"ptm": 0\.' "$tmp/a_scores.json"; then
    pass "the scores file (PAE, pTM) of a pTM model"
else fail "the scores file (PAE, pTM) of a pTM model"; fi

# the same run gives the same file; an existing file is kept without --force
cp "$tmp/a.pdb" "$tmp/a.first"
check "an existing output is kept" 1 "exists: choose another --out, or --force" -- $fast --msa "$fx/msa.a3m" -o "$tmp/a.pdb" "$params" "$fx/query.fasta"
if cmp -s "$tmp/a.pdb" "$tmp/a.first"; then pass "the kept file is untouched"; else fail "the kept file is untouched"; fi
if "$fold" $fast --force --msa "$fx/msa.a3m" -o "$tmp/a.pdb" "$params" "$fx/query.fasta" > "$tmp/out" 2> "$tmp/err" &&
   cmp -s "$tmp/a.pdb" "$tmp/a.first"; then pass "--force replaces it, with the same result"
else fail "--force replaces it, with the same result"; fi
# a symlink at the output path: never followed into the file it points at
echo "user data" > "$tmp/user.txt"
ln -s "$tmp/user.txt" "$tmp/link.pdb"
check "a symlinked output is kept" 1 "exists" -- $fast -o "$tmp/link.pdb" "$params" "$fx/query.fasta"
"$fold" $fast --force -o "$tmp/link.pdb" "$params" "$fx/query.fasta" > /dev/null 2>&1
if [ "$(cat "$tmp/user.txt")" = "user data" ]; then pass "--force replaces the link, not the file it points at"
else fail "--force replaces the link, not the file it points at"; fi

# chunked: the same structure
if "$fold" $fast --chunk-size 4 --msa "$fx/msa.a3m" -o "$tmp/c.pdb" "$params" "$fx/query.fasta" > /dev/null 2> "$tmp/err" &&
   cmp -s "$tmp/c.pdb" "$tmp/a.first"; then pass "--chunk-size 4 gives the same PDB"
else fail "--chunk-size 4 gives the same PDB"; fi

# mmCIF, --json
if "$fold" $fast --cif -o "$tmp/m.cif" "$params" "$fx/query.fasta" > /dev/null 2> "$tmp/err" &&
   head -1 "$tmp/m.cif" | grep -q '^data_' && grep -q '_atom_site' "$tmp/m.cif"; then pass "--cif writes mmCIF"
else fail "--cif writes mmCIF"; fi
if "$fold" $fast --json -o "$tmp/j.pdb" "$params" "$fx/query.fasta" > "$tmp/out" 2> "$tmp/err" &&
   grep -q '"length": 14, "passes": 2' "$tmp/out" && grep -q '"plddt": \[[0-9]' "$tmp/out" && grep -q '"ptm": 0\.' "$tmp/out"; then
    pass "--json prints the summary"
else fail "--json prints the summary"; fi

# several records: one file each in the --out directory
printf '>first protein\nMKTAYIAKGR\n>second\nGSHMAAQW\n' > "$tmp/two.fasta"
if "$fold" $fast -o "$tmp/outdir" "$params" "$tmp/two.fasta" > "$tmp/out" 2> "$tmp/err" &&
   [ -s "$tmp/outdir/first.pdb" ] && [ -s "$tmp/outdir/second.pdb" ]; then pass "several records, one PDB each"
else fail "several records, one PDB each"; fi
# a directory of parameter files: every model runs
mkdir "$tmp/params"
ln -s "$(cd "$fx" && pwd)/narrow.npz" "$tmp/params/params_model_3_ptm.npz"
ln -s "$(cd "$fx" && pwd)/narrow.npz" "$tmp/params/params_model_4_ptm.npz"
if "$fold" $fast -o "$tmp/models" "$tmp/params" "$fx/query.fasta" > "$tmp/out" 2> "$tmp/err" &&
   [ -s "$tmp/models/query_model_3_ptm.pdb" ] && [ -s "$tmp/models/query_model_4_ptm.pdb" ]; then
    pass "a parameter directory runs each model"
else fail "a parameter directory runs each model"; fi

# bad inputs: one line, non-zero exit
check "no arguments" 2 "expected PARAMS and PROTEIN.fasta" --
check "a bad --chunk-size" 2 "--chunk-size must be" -- --chunk-size zero "$params" "$fx/query.fasta"
check "a bad --recycles" 2 "--recycles must be" -- --recycles -1 "$params" "$fx/query.fasta"
check "a missing parameter file" 1 "no-such.npz" -- $fast "$tmp/no-such.npz" "$fx/query.fasta"
check "not an AlphaFold parameter file" 1 "has no array alphafold/" -- $fast -o "$tmp/x.pdb" "$fx/real_msa_ref.safetensors" "$fx/query.fasta"
printf '>bad\nMKTBAYI\n' > "$tmp/bad.fasta"
check "an unknown residue letter" 1 "B" -- $fast -o "$tmp/x.pdb" "$params" "$tmp/bad.fasta"
printf '>empty\n\n>next\nMKT\n' > "$tmp/empty.fasta"
check "an empty record" 1 "empty" -- $fast -o "$tmp/x.pdb" "$params" "$tmp/empty.fasta"
check "a missing FASTA file" 1 "nothing.fasta" -- $fast "$params" "$tmp/nothing.fasta"
printf '>query\nMKTAYIAKGRQWSA\n' > "$tmp/other.a3m"
check "an MSA whose first row is another sequence" 1 "query" -- $fast --msa "$tmp/other.a3m" -o "$tmp/x.pdb" "$params" "$fx/query.fasta"
check "--msa with several records" 1 "several sequences" -- $fast --msa "$fx/msa.a3m" "$params" "$tmp/two.fasta"
[ ! -e "$tmp/x.pdb" ] && pass "no output after an error" || fail "no output after an error"

echo "1..$n"
[ "$fails" -eq 0 ]
