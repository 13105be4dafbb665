#!/bin/sh
# bench_planner.sh - the layout planner's predicted step time against measured runs: for each layout, the
# prediction of `colossal-finetune --plan-only --json` under mpirun with that many processes (the probe's rates
# of this machine, cached after the first run of each process count) and the measured step time: REPS short
# training runs with that layout, each run's mean step time after its first WARM steps (--json's elapsed_s),
# the median over the runs; as a markdown table with the ratio measured / predicted.
#
#   bench/bench_planner.sh [LAYOUT_FILE]
#
# LAYOUT_FILE: one layout per line, "NP colossal-finetune options" (blank lines and # comments skipped), e.g.
#   4 --dp 2 --pp 2 --micro-batches 6 --zero 3
#   4 --tp 2 --tp-mode 1d --dp 2
# Without one, the built-in list below (data parallel x pipeline x ZeRO, tensor parallel 1D/2D/2.5D/3D, ring and
# Ulysses sequence parallel and their combinations with data parallelism; 1 to 8 processes). Environment:
# FINETUNE (the program), MPIRUN, MODEL (gpt2-tiny), BATCH (12), SEQ (32), STEPS (20), WARM (4), REPS (3),
# XDG_CACHE_HOME (where the probe's cache lives; by default the user's). Every layout runs the same model, data
# and rows per step. Needs mpirun for more than one process.
set -u
FT=${FINETUNE:-$(dirname "$0")/../apps/colossal-finetune}
FT=$(cd "$(dirname "$FT")" && pwd)/$(basename "$FT")
MPIRUN=${MPIRUN:-mpirun}
MODEL=${MODEL:-gpt2-tiny}
BATCH=${BATCH:-12}
SEQ=${SEQ:-32}
STEPS=${STEPS:-20}
WARM=${WARM:-4}
REPS=${REPS:-3}
[ -x "$FT" ] || { echo "bench_planner.sh: $FT not found: build it first (make)" >&2; exit 1; }
layouts=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$layouts"' EXIT
if [ $# -ge 1 ]; then
    grep -v '^[[:space:]]*\(#\|$\)' "$1" > "$layouts" || { echo "bench_planner.sh: no layouts in $1" >&2; exit 2; }
else
    cat > "$layouts" << 'EOF'
1
2 --dp 2 --zero 1
2 --dp 2 --zero 3
2 --pp 2 --micro-batches 4
2 --tp 2 --tp-mode 1d
2 --sp 2 --sp-mode ring
2 --sp 2 --sp-mode ulysses
3 --dp 3 --zero 2
4 --dp 4 --zero 1
4 --dp 2 --pp 2 --micro-batches 6 --zero 3
4 --tp 4 --tp-mode 1d
4 --tp 4 --tp-mode 2d
4 --sp 4 --sp-mode ring
4 --sp 4 --sp-mode ulysses
4 --tp 2 --tp-mode 1d --dp 2
4 --tp 2 --tp-mode 1d --sp 2 --sp-mode ring
4 --sp 2 --sp-mode ulysses --dp 2
8 --tp 8 --tp-mode 2.5d --tp-depth 2
8 --tp 8 --tp-mode 3d
EOF
fi
flags=
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    flags="--allow-run-as-root --oversubscribe"
fi
cd "$tmp" || exit 1
awk 'BEGIN { srand(5); for (i = 0; i < 20000; i++) printf "line %d of a %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > corpus.txt
run() { # np args...: the program under mpirun (or alone for one process)
    np=$1
    shift
    if [ "$np" -eq 1 ]; then
        "$FT" "$@" < /dev/null
    else
        # shellcheck disable=SC2086
        timeout 600 "$MPIRUN" $flags -np "$np" "$FT" "$@" < /dev/null
    fi
}
# the planner's name of the layout the options give ("dp2 tp1 pp2 sp1 zero3 mb6")
layout_name() { # np args...
    np=$1
    shift
    echo "$*" | awk -v np="$np" '{
        dp = 0; pp = 1; tp = 1; sp = 1; z = 2; mb = 0; tm = "1d"; sm = "ring"; td = 1
        for (i = 1; i <= NF; i++) {
            if ($i == "--dp") dp = $(i + 1); if ($i == "--pp") pp = $(i + 1); if ($i == "--tp") tp = $(i + 1)
            if ($i == "--sp") sp = $(i + 1); if ($i == "--zero") z = $(i + 1); if ($i == "--micro-batches") mb = $(i + 1)
            if ($i == "--tp-mode") tm = $(i + 1); if ($i == "--sp-mode") sm = $(i + 1); if ($i == "--tp-depth") td = $(i + 1)
        }
        if (!dp) dp = np / (pp * tp * sp)
        if (dp == 1) z = 0
        if (pp == 1) mb = 1; else if (!mb) mb = pp
        t = tp > 1 ? (tm == "2.5d" ? sprintf("tp%d(2.5d,d%d)", tp, td) : sprintf("tp%d(%s)", tp, tm)) : "tp1"
        s = sp > 1 ? sprintf("sp%d(%s)", sp, sm) : "sp1"
        printf "dp%d %s pp%d %s zero%d mb%d\n", dp, t, pp, s, z, mb }'
}
common="$MODEL corpus.txt --batch $BATCH --seq $SEQ --dropout 0"
echo "| processes | layout | predicted step (ms) | measured median (ms) | measured / predicted | predicted: what dominates |"
echo "|---|---|---|---|---|---|"
i=0
while IFS= read -r line; do
    i=$((i + 1))
    np=${line%% *}
    args=
    [ "$np" != "$line" ] && args=${line#* }
    name=$(layout_name "$np" $args)
    # shellcheck disable=SC2086
    COLOSSAL_PLAN_ALL=1 run "$np" $common --plan-only --json > "plan$i.json" 2> "plan$i.err"
    pred=$(grep -F "\"layout\":\"$name\"" "plan$i.json" | head -n 1)
    ps=$(echo "$pred" | sed -n 's/.*"step_s":\([^,]*\),.*/\1/p')
    dom=$(echo "$pred" | awk '{ n = split("compute_s memory_s bubble_s dp_s tp_s sp_s pp_s nvme_s", k, " "); best = ""; bv = -1
        for (j = 1; j <= n; j++) { if (match($0, "\"" k[j] "\":[^,}]*")) { v = substr($0, RSTART + length(k[j]) + 3, RLENGTH - length(k[j]) - 3) + 0
            if (v > bv) { bv = v; best = k[j] } } }
        sub(/_s$/, "", best); print best }')
    # REPS runs; each run's mean step time after the first WARM steps (elapsed_s is printed to the millisecond:
    # the mean over the run is finer than any single step's), then the median over the runs
    rc=0
    : > "times$i.txt"
    r=0
    while [ "$r" -lt "$REPS" ]; do
        r=$((r + 1))
        # shellcheck disable=SC2086
        run "$np" $common $args --steps "$STEPS" --eval-every 100000 --json --out "run$i-$r" > "run$i.json" 2> "run$i.err" || rc=$?
        grep '"elapsed_s"' "run$i.json" | sed 's/.*"elapsed_s":\([^,]*\),.*/\1/' |
            awk -v w="$WARM" 'NR == w { a = $1; k = NR } { b = $1; n = NR } END { if (n > k && k) printf "%.6f\n", (b - a) / (n - k) }' \
            >> "times$i.txt"
    done
    ms=$(sort -g "times$i.txt" | awk '{ v[++m] = $1 } END { if (m) printf "%.3f\n", (m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2) * 1000 }')
    if [ -z "$ps" ]; then
        pms="(not planned: $(head -c 120 "plan$i.err" | tr '\n' ' '))"
        ratio=-
    else
        pms=$(awk -v p="$ps" 'BEGIN { printf "%.3f", p * 1000 }')
        ratio=$( [ -n "$ms" ] && awk -v m="$ms" -v p="$pms" 'BEGIN { printf "%.2f", m / p }' || echo -)
    fi
    [ "$rc" -eq 0 ] && [ -n "$ms" ] || ms="(failed: exit $rc: $(grep -m1 'colossal-finetune' "run$i.err" | head -c 120))"
    echo "| $np | \`$name\` | $pms | $ms | $ratio | $dom |"
done < "$layouts"
