#!/bin/sh
# test_comm.sh - the collectives (libcore/comm) under mpirun: tests/test_comm
# and tests/test_comm_stats (the traffic counters) with 2, 3 and 4 processes,
# tests/test_stats_comm (a rank's statistics for colossal-top) with 3 (their
# TAP lines come from rank 0, renumbered here),
# then a rank killed with -9 in the middle of a loop of all-reduces: the job
# must end well within a few times the survivors' 5-second wait bound, with a
# message naming the dead rank. Under the launcher's default the launcher
# itself ends them and names it; with --enable-recovery it leaves them running
# and the library's bounded wait must end them, naming the dead rank.
# Skipped without mpirun.
set -u
TEST_COMM=${TEST_COMM:-tests/test_comm}
TEST_COMM_STATS=${TEST_COMM_STATS:-tests/test_comm_stats}
TEST_STATS_COMM=${TEST_STATS_COMM:-tests/test_stats_comm}
MPIRUN=${MPIRUN:-mpirun}
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
check() { if [ "$1" -eq 0 ]; then ok "$2"; else notok "$2"; fi; }

if ! command -v "$MPIRUN" > /dev/null 2>&1; then
    echo "1..0 # SKIP no MPI launcher (mpirun) installed"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Open MPI refuses root and more processes than cores unless told
flags=
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    flags="--allow-run-as-root --oversubscribe"
fi
# Open MPI keeps memory until the process ends, in plugins it has unloaded by then (so LeakSanitizer can
# neither name nor suppress them): under the sanitizers the MPI runs check memory errors, not leaks
if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
fi

# ---- every operation, dtype and size, then the traffic counters, with 2, 3 and 4 processes ----
# run_np PROGRAM LABEL NP MIN: PROGRAM under mpirun -np NP; rank 0's TAP lines renumbered into this script's
# stream, then one check that mpirun exited 0 and rank 0 reported all of its (at least MIN) checks
run_np() {
    prog=$1 label=$2 np=$3 min=$4
    out="$tmp/$label-out$np" err="$tmp/$label-err$np"
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np "$np" "$prog" > "$out" 2> "$err"
    rc=$?
    while IFS= read -r line; do
        case "$line" in
        "ok "*) ok "$label np=$np: ${line#ok * - }" ;;
        "not ok "*) notok "$label np=$np: ${line#not ok * - }" ;;
        "#"*) echo "$line" ;;
        esac
    done < "$out"
    planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$out")
    ran=$(grep -cE '^(not )?ok ' "$out")
    [ "$rc" -eq 0 ] && [ -n "$planned" ] && [ "$planned" -eq "$ran" ] && [ "$ran" -ge "$min" ]
    check $? "$label np=$np: mpirun exits 0 and rank 0 reported all $planned checks"
    if [ "$rc" -ne 0 ] || [ -z "$planned" ]; then
        echo "# mpirun -np $np $prog exited $rc; its stderr:"
        sed 's/^/#   /' "$err" | head -30
    fi
}
for np in 2 3 4; do
    run_np "$TEST_COMM" comm "$np" 51
done
for np in 2 3 4; do
    run_np "$TEST_COMM_STATS" counters "$np" 20
done
# a rank of a parallel run in the published statistics (apps/stats_comm)
run_np "$TEST_STATS_COMM" stats 3 4

# ---- a rank killed with -9 in the middle of the collectives ----
# kill_run NAME MPIRUN-OPTIONS...: 3 processes, rank 1 dies at iteration 20; the output in $tmp/NAME, each
# rank's own record of why it stopped in $tmp/NAME.d/rank-N.log (the launcher may drop output when it ends
# a job), mpirun's status in $rc, seconds in $secs. With the launcher's default each rank is the test
# itself (so the launcher sees the signal that killed rank 1); when the launcher keeps the job, a shell
# around each rank prints its exit status.
kill_run() {
    name=$1
    shift
    mkdir -p "$tmp/$name.d"
    t0=$(date +%s)
    if [ "$name" = default ]; then
        # shellcheck disable=SC2086
        timeout 120 "$MPIRUN" $flags -np 3 "$TEST_COMM" --kill 1 --timeout 5 --log "$tmp/$name.d" \
            > "$tmp/$name" 2>&1 < /dev/null
    else
        # shellcheck disable=SC2086
        timeout 120 "$MPIRUN" $flags "$@" -np 3 sh -c '"$0" --kill 1 --timeout 5 --log "$1"; echo "exit-status $OMPI_COMM_WORLD_RANK $?"' \
            "$TEST_COMM" "$tmp/$name.d" > "$tmp/$name" 2>&1 < /dev/null
    fi
    rc=$?
    secs=$(($(date +%s) - t0))
    sed 's/^/#   /' "$tmp/$name" | grep -v 'PMIX ERROR' | head -20
}

# The launcher's default: it notices the death, names it, and ends the job (SIGTERM, then SIGKILL a second
# later). A survivor that runs its handler in that second says so (noted here); one the SIGKILL reaches
# first cannot, so the launcher's line is the message that must be there.
kill_run default
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]
check $? "killed rank, launcher's default: mpirun exits non-zero ($rc)"
grep -q "process rank 1 .*signal 9" "$tmp/default"
check $? "killed rank, launcher's default: the launcher names rank 1 as killed by signal 9"
! grep -q "all iterations completed" "$tmp/default"
check $? "killed rank, launcher's default: no rank completes the loop"
[ "$secs" -le 30 ]
check $? "killed rank, launcher's default: over within 30 s ($secs s)"
for r in 0 2; do
    if [ -s "$tmp/default.d/rank-$r.log" ]; then echo "# rank $r: $(cat "$tmp/default.d/rank-$r.log")"
    else echo "# rank $r was ended before it could say why"; fi
done

# The launcher keeps the job: only the library's bounded wait can end the survivors. Each must stop at the
# iteration rank 1 never joined, with the library's message naming rank 1 as exited (one that gives up after
# the other survivor has gone names both), and exit 1.
if [ -n "$flags" ]; then
    kill_run recovery --enable-recovery
    if grep -qi "unrecognized\|unknown option" "$tmp/recovery"; then
        n=$((n + 1)); echo "ok $n # SKIP this mpirun has no --enable-recovery"
    else
        for r in 0 2; do
            grep -q "^test_comm rank $r: stops at iteration 20: comm: all-reduce (sum) of 1000 f32 on 3 ranks: not complete after waiting [0-9]\.[0-9] s; \(.*, \)*rank 1 (pid [0-9]* on [^)]*)[^;]* ha[sv]e* exited" "$tmp/recovery.d/rank-$r.log" &&
                grep -q "exit-status $r 1" "$tmp/recovery"
            check $? "killed rank, launcher keeps the job: rank $r stops at its 5 s bound naming rank 1 as exited, status 1"
        done
        [ "$secs" -le 30 ]
        check $? "killed rank, launcher keeps the job: over within 30 s ($secs s)"
    fi
fi

echo "1..$n"
[ "$fails" -eq 0 ]
