#!/bin/sh
# bench_load.sh - how a CPU training step slows down when other processes
# compete for the CPUs, against the proportional ideal.
#
#   bench/bench_load.sh [LOADS ("0 2 4")]
#
# For each N in LOADS: start N busy loops (sh -c 'while :; do :; done'), wait
# a second, run the benchmark RUNS times, stop the loops (by their process
# ids). Prints each run's step time, the median per N, the slowdown
# loaded/quiet (N = 0 must come first) and the proportional ideal: with N
# busy processes on C CPUs the fair share is C / (C + N) of the machine, so
# the ideal slowdown is (C + N) / C. The last column is slowdown / ideal
# (target: within ~1.5). If the benchmark also prints "N.NN CPU s/step"
# (bench_lm does: user + system time of all its threads), its median is
# shown too: CPU time per step that grows with the load is time spent
# waiting actively (spinning) rather than working.
#
# Environment:
#   RUNS    runs per load (default 3); each prints a median of REPS steps
#   REPS    steps per run after one warm-up step (default 3)
#   CPUS    C in the ideal (default: the CPUs this process may use, nproc)
#   BENCH   the command printing "... NNN ms/step ..." (default:
#           bench/bench_lm train $REPS, a GPT-2 124M training step)
#   BENCH_B a second command to compare with (e.g. the same benchmark built
#           from an older commit, or "env GOMP_SPINCOUNT=300000 bench/bench_lm
#           train 3"); its runs alternate with BENCH's under the same loops
#   OMP_WAIT_POLICY, GOMP_SPINCOUNT, OMP_NUM_THREADS, OPENBLAS_CORETYPE
#           passed through; the programs choose their own when unset (see
#           docs/DESIGN.md "CPU backend"). GOMP_SPINCOUNT=300000 is libgomp's
#           own default: the behaviour before the programs chose passive
#           waiting.
#
# Other work on the machine adds to the busy loops: the load average is
# printed before and with each run; measure on a quiet machine.
set -eu
LOADS=${1:-"0 2 4"}
RUNS=${RUNS:-3}
REPS=${REPS:-3}
CPUS=${CPUS:-$(nproc)}
HERE=$(dirname "$0")
BENCH=${BENCH:-"$HERE/bench_lm train $REPS"}
BENCH_B=${BENCH_B:-}

# the program a command runs (after "env VAR=value ...")
program() {
    set -- $1
    if [ "$1" = env ]; then
        shift
        while [ $# -gt 1 ]; do case $1 in *=*) shift ;; *) break ;; esac; done
    fi
    echo "$1"
}
for cmd in "$BENCH" "$BENCH_B"; do
    [ -z "$cmd" ] && continue
    prog=$(program "$cmd")
    if [ ! -x "$prog" ]; then
        echo "bench_load.sh: $prog not found; build it first (make $prog)" >&2
        exit 1
    fi
done

PIDS=""
stop_loops() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    PIDS=""
}
trap 'stop_loops' EXIT
trap 'stop_loops; exit 130' INT TERM

quota() {
    if [ -r /sys/fs/cgroup/cpu.max ]; then
        cat /sys/fs/cgroup/cpu.max
    elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
        echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
    else
        echo "unknown"
    fi
}

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# run LABEL CMD: one run; prints its line, appends the time to the file times.LABEL.N
run() {
    out=$($2)
    [ "$r" -eq 0 ] && echo "$out" | grep '^#' | sed "s/^/#   $1: /"
    ms=$(echo "$out" | sed -n 's/.* \([0-9][0-9.]*\) ms\/step.*/\1/p' | head -n 1)
    if [ -z "$ms" ]; then
        echo "bench_load.sh: no 'ms/step' in the output of $2:" >&2
        echo "$out" >&2
        exit 1
    fi
    cpu=$(echo "$out" | sed -n 's/.* \([0-9][0-9.]*\) CPU s\/step.*/\1/p' | head -n 1)
    echo "$1 load $N run $((r + 1)): $ms ms/step${cpu:+, $cpu CPU s/step} (load average $(cut -d' ' -f1 /proc/loadavg))"
    echo "$ms" >> "$TMP/times.$1.$N"
    echo "${cpu:--}" >> "$TMP/cpu.$1.$N"
}

# table LABEL: the summary for one command
table() {
    quiet=""
    echo
    echo "$1: $( [ "$1" = A ] && echo "$BENCH" || echo "$BENCH_B")"
    echo "| busy loops N | median ms/step | runs (ms) | slowdown | ideal (C+N)/C | slowdown / ideal | CPU s/step |"
    echo "|---:|---:|---|---:|---:|---:|---:|"
    for N in $LOADS; do
        med=$(median < "$TMP/times.$1.$N")
        cpu=-
        grep -q '[0-9]' "$TMP/cpu.$1.$N" && cpu=$(grep '[0-9]' "$TMP/cpu.$1.$N" | median)
        [ -z "$quiet" ] && quiet=$med
        awk -v n="$N" -v m="$med" -v q="$quiet" -v c="$CPUS" -v t="$(tr '\n' ' ' < "$TMP/times.$1.$N")" -v u="$cpu" 'BEGIN {
            ideal = (c + n) / c; s = m / q
            printf "| %d | %.0f | %s| %.2f | %.2f | %.2f | %s |\n", n, m, t, s, ideal, s / ideal, u }'
    done
}

TMP=$(mktemp -d)
trap 'stop_loops; rm -rf "$TMP"' EXIT

echo "# bench_load.sh: date $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# machine: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'); $(grep -c ^processor /proc/cpuinfo) cpus online, $(nproc) usable, cgroup cpu quota: $(quota)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine adds to the busy loops)"
echo "# environment: OMP_WAIT_POLICY=${OMP_WAIT_POLICY-(unset)} GOMP_SPINCOUNT=${GOMP_SPINCOUNT-(unset)} OMP_NUM_THREADS=${OMP_NUM_THREADS-(unset)} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}"
echo "# A: $BENCH"
[ -n "$BENCH_B" ] && echo "# B: $BENCH_B"
echo "# $RUNS runs per load; C = $CPUS"

for N in $LOADS; do
    i=0
    while [ "$i" -lt "$N" ]; do
        sh -c 'while :; do :; done' &
        PIDS="$PIDS $!"
        i=$((i + 1))
    done
    [ "$N" -gt 0 ] && sleep 1
    r=0
    while [ "$r" -lt "$RUNS" ]; do
        run A "$BENCH"
        [ -n "$BENCH_B" ] && run B "$BENCH_B"
        r=$((r + 1))
    done
    stop_loops
done
table A
[ -n "$BENCH_B" ] && table B
exit 0
