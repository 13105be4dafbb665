#!/bin/sh
# test_plan_cli.sh - colossal-finetune --plan-only and --parallel auto (TAP output): one process and, under
# mpirun, 4: the output names a layout, the chosen one is legal for the run (D x T x P x S = the processes, the
# rows split) and within the budget given, a budget too small for every layout is one line and exit 2, an
# explicit layout beside --parallel auto is refused, the probe's cache is written, reused, and rewritten when
# corrupt, and --parallel auto trains with the layout it chose. The mpirun part is skipped without mpirun.
ft=${FINETUNE:-./apps/colossal-finetune}
ft=$(cd "$(dirname "$ft")" && pwd)/$(basename "$ft")
MPIRUN=${MPIRUN:-mpirun}
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
XDG_CACHE_HOME=$tmp/cache
export XDG_CACHE_HOME
unset COLOSSAL_PLAN_PROCS COLOSSAL_PLAN_ALL
awk 'BEGIN { srand(5); for (i = 0; i < 3000; i++) printf "line %d of a %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > corpus.txt
base="gpt2-tiny corpus.txt --batch 12 --seq 32 --out never"
# "D T P S Z M" of the layout a line names ("dp2 tp1 pp2 sp1 zero3 mb4"; tp4(2d), sp2(ring) keep their counts)
layout_of() {
    sed -n 's/.*chose dp\([0-9]*\) tp\([0-9]*\)[^ ]* pp\([0-9]*\) sp\([0-9]*\)[^ ]* zero\([0-9]*\) mb\([0-9]*\).*/\1 \2 \3 \4 \5 \6/p' "$1" |
        head -n 1
}
# whether "D T P S Z M" is legal for np processes and 12 rows
legal() {
    echo "$1" | awk -v np="$2" '{ d = $1; t = $2; p = $3; s = $4; m = $6
        exit !(d * t * p * s == np && 12 % d == 0 && (12 / d) % m == 0 && (p > 1 || m == 1) && p <= 2) }'
}

# ---- one process ----
"$ft" $base --plan-only > one.out 2> one.err
rc=$?
l=$(layout_of one.out)
if [ "$rc" -eq 0 ] && [ -n "$l" ] && legal "$l" 1 && grep -q '^   1  dp1 ' one.out; then
    ok "one process: --plan-only ranks and chooses '$l'"
else
    notok "one process: exit $rc, layout '$l'"
    sed 's/^/# /' one.err one.out | head -8
fi
[ ! -e never ] && ok "--plan-only writes no output directory" || notok "--plan-only created --out"
cache=$(ls "$XDG_CACHE_HOME"/colossal/probe-*-1.json 2> /dev/null | head -n 1)
if [ -n "$cache" ] && grep -q '"matmul"' "$cache" && grep -q "(measured" one.out; then
    ok "the probe measured and wrote its cache $(basename "$cache")"
else
    notok "no probe cache (measured: $(grep -c measured one.out))"
fi
"$ft" $base --plan-only > two.out 2>&1
grep -q "(cached" two.out && ok "the second run reads the cache" || notok "the second run did not use the cache"
printf '{"version":1,"threads":' > "$cache"
"$ft" $base --plan-only > three.out 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "(measured" three.out && grep -q '"matmul"' "$cache"; then
    ok "a corrupt cache is ignored and rewritten"
else
    notok "corrupt cache: exit $rc"
    sed 's/^/# /' three.out | head -4
fi
printf '{"version":1,"threads":1000000,"mem_bw":-5,"matmul":{"a":1}}' > "$cache"
"$ft" $base --plan-only > four.out 2>&1
grep -q "(measured" four.out && ok "a cache with numbers out of range is ignored" || notok "a bad cache was used"

# another process count planned from one process
COLOSSAL_PLAN_PROCS=4 "$ft" $base --plan-only --cpu-mem 700K > four.out 2> four.err
rc=$?
l=$(layout_of four.out)
st=$(COLOSSAL_PLAN_PROCS=4 "$ft" $base --plan-only --cpu-mem 700K --json 2> /dev/null | head -n 1 |
     sed -n 's/.*"fits":\([a-z]*\).*"states_bytes":\([0-9.e+]*\).*/\1 \2/p')
if [ "$rc" -eq 0 ] && [ -n "$l" ] && legal "$l" 4 && [ "${st% *}" = true ] &&
    awk -v b="${st#* }" 'BEGIN { exit !(b <= 700 * 1024) }'; then
    ok "COLOSSAL_PLAN_PROCS=4 --cpu-mem 700K: '$l', model states ${st#* } bytes per process"
else
    notok "planning 4 processes with --cpu-mem 700K: exit $rc, layout '$l', json '$st'"
    sed 's/^/# /' four.err | head -3
fi
# (a tighter budget: at 700K the ten best layouts, tensor parallel pipelines among them, all fit)
COLOSSAL_PLAN_PROCS=4 "$ft" $base --plan-only --cpu-mem 500K > tight.out 2> /dev/null
grep -q "does not fit" tight.out && ok "the layouts over the budget are ranked and marked" ||
    notok "no layout marked as not fitting"

# ---- refusals: one line, exit 2 ----
check_refusal() { # what expect-pattern command...
    what=$1 pat=$2
    shift 2
    "$@" > r.out 2> r.err
    rc=$?
    if [ "$rc" -eq 2 ] && [ "$(wc -l < r.err)" -eq 1 ] && grep -q "$pat" r.err; then
        ok "$what: exit 2, one line: $(cat r.err)"
    else
        notok "$what: exit $rc, $(wc -l < r.err) lines"
        sed 's/^/# /' r.err | head -3
    fi
}
check_refusal "--parallel auto --dp 1" "leave out --dp" "$ft" $base --parallel auto --dp 1
check_refusal "--plan-only --pp 1" "leave out --pp" "$ft" $base --plan-only --pp 1
check_refusal "--cpu-mem 4K" "no layout of 1 processes fits the memory budgets" "$ft" $base --plan-only --cpu-mem 4K
check_refusal "--parallel auto --cpu-mem 4K" "raise --cpu-mem" "$ft" $base --parallel auto --cpu-mem 4K --steps 2
[ ! -e never ] && ok "a refused plan writes nothing" || notok "a refused plan created --out"

# ---- under mpirun ----
if ! command -v "$MPIRUN" > /dev/null 2>&1; then
    echo "ok $((n + 1)) # SKIP no MPI launcher (mpirun) installed"
    n=$((n + 1))
    echo "1..$n"
    exit $((fails > 0))
fi
flags=
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    flags="--allow-run-as-root --oversubscribe"
fi
if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
fi
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" $flags -np 4 "$ft" $base --plan-only --cpu-mem 700K > mpi.out 2> mpi.err
rc=$?
l=$(layout_of mpi.out)
if [ "$rc" -eq 0 ] && [ -n "$l" ] && legal "$l" 4 && grep -q "link .* GB/s" mpi.out &&
    [ "$(grep -c 'planner: chose' mpi.out)" -eq 1 ]; then
    ok "mpirun -np 4 --plan-only: process 0 alone prints, chooses '$l' with the link measured"
else
    notok "mpirun -np 4 --plan-only: exit $rc, layout '$l'"
    sed 's/^/# /' mpi.err mpi.out | head -6
fi
ls "$XDG_CACHE_HOME"/colossal/probe-*-4.json > /dev/null 2>&1 && grep -q '"link_bw"' "$XDG_CACHE_HOME"/colossal/probe-*-4.json &&
    ok "the 4-process cache holds the link's rates" || notok "no 4-process cache with the link"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" $flags -np 4 "$ft" $base --plan-only --cpu-mem 4K > mpi2.out 2> mpi2.err
rc=$?
# (mpirun adds its own lines on a process's exit code: count ours)
lines=$(grep -c "^colossal-finetune: " mpi2.err)
[ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q "fits the memory budgets" mpi2.err &&
    ok "mpirun -np 4 --cpu-mem 4K: one line from process 0, exit 2" || notok "mpirun -np 4 --cpu-mem 4K: exit $rc, $lines lines"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" $flags -np 4 "$ft" $base --parallel auto --tp 2 --steps 2 > mpi3.out 2> mpi3.err
rc=$?
lines=$(grep -c "^colossal-finetune: " mpi3.err)
[ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q "leave out --tp" mpi3.err &&
    ok "mpirun -np 4 --parallel auto --tp 2: one line, exit 2" || notok "mpirun -np 4 --parallel auto --tp 2: exit $rc, $lines lines"
# --parallel auto trains with its choice
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 4 "$ft" gpt2-tiny corpus.txt --batch 12 --seq 32 --steps 4 --dropout 0 --json \
    --parallel auto --out auto > auto.json 2> auto.err
rc=$?
pl=$(grep -c '"plan"' auto.json)
steps=$(grep -c '"loss"' auto.json)
if [ "$rc" -eq 0 ] && [ "$pl" -eq 1 ] && [ "$steps" -eq 4 ]; then
    ok "mpirun -np 4 --parallel auto: $(sed -n 's/.*"layout":"\([^"]*\)".*/\1/p' auto.json), 4 steps trained"
else
    notok "mpirun -np 4 --parallel auto: exit $rc, $pl plan lines, $steps steps"
    sed 's/^/# /' auto.err | head -5
fi
echo "1..$n"
exit $((fails > 0))
