#!/bin/sh
# test_comm.sh - the collectives (libcore/comm) under mpirun: tests/test_comm
# with 2, 3 and 4 processes (its TAP lines come from rank 0, renumbered here),
# then a rank killed with -9 in the middle of a loop of all-reduces: the
# others must stop with a line saying why, well within a few times their
# 5-second wait bound. Under the launcher's default the launcher itself ends
# them (they report its signal); with --enable-recovery it leaves them
# running and the library's bounded wait must end them, naming the dead rank.
# Skipped without mpirun.
set -u
TEST_COMM=${TEST_COMM:-tests/test_comm}
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

# ---- every operation, dtype and size, with 2, 3 and 4 processes ----
for np in 2 3 4; do
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np $np "$TEST_COMM" > "$tmp/out$np" 2> "$tmp/err$np"
    rc=$?
    # rank 0's TAP lines, renumbered into this script's stream
    while IFS= read -r line; do
        case "$line" in
        "ok "*) ok "np=$np: ${line#ok * - }" ;;
        "not ok "*) notok "np=$np: ${line#not ok * - }" ;;
        "#"*) echo "$line" ;;
        esac
    done < "$tmp/out$np"
    planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tmp/out$np")
    ran=$(grep -cE '^(not )?ok ' "$tmp/out$np")
    [ "$rc" -eq 0 ] && [ -n "$planned" ] && [ "$planned" -eq "$ran" ] && [ "$ran" -gt 50 ]
    check $? "np=$np: mpirun exits 0 and rank 0 reported all $planned checks"
    if [ "$rc" -ne 0 ] || [ -z "$planned" ]; then
        echo "# mpirun -np $np exited $rc; its stderr:"
        sed 's/^/#   /' "$tmp/err$np" | head -30
    fi
done

# ---- a rank killed with -9 in the middle of the collectives ----
# kill_run NAME MPIRUN-OPTIONS...: 3 processes, rank 1 dies at iteration 20; output in $tmp/NAME, status in $rc,
# seconds in $secs. With the launcher's default each rank is the test itself (so the launcher sees the signal
# that killed rank 1); when the launcher keeps the job, a shell around each rank prints its exit status.
kill_run() {
    name=$1
    shift
    t0=$(date +%s)
    if [ "$name" = default ]; then
        # shellcheck disable=SC2086
        timeout 120 "$MPIRUN" $flags -np 3 "$TEST_COMM" --kill 1 --timeout 5 > "$tmp/$name" 2>&1
    else
        # shellcheck disable=SC2086
        timeout 120 "$MPIRUN" $flags "$@" -np 3 \
            sh -c '"$0" --kill 1 --timeout 5; echo "exit-status $OMPI_COMM_WORLD_RANK $?"' "$TEST_COMM" > "$tmp/$name" 2>&1
    fi
    rc=$?
    secs=$(($(date +%s) - t0))
    sed 's/^/#   /' "$tmp/$name" | grep -v 'PMIX ERROR' | head -20
}

kill_run default
# the launcher ends the job: its status is not 0, and every other rank says why it stopped
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]
check $? "killed rank, launcher's default: mpirun exits non-zero ($rc) in $secs s"
grep -q "test_comm rank 0: " "$tmp/default" && grep -q "test_comm rank 2: " "$tmp/default" &&
    ! grep -q "all iterations completed" "$tmp/default"
check $? "killed rank, launcher's default: ranks 0 and 2 each print why they stop"
grep -q "process rank 1 .*signal 9" "$tmp/default" || grep -q "rank 1 (pid [0-9]* on .*) has exited" "$tmp/default"
check $? "killed rank, launcher's default: the output names rank 1 as killed"
[ "$secs" -le 30 ]
check $? "killed rank, launcher's default: over within 30 s ($secs s)"

if [ -n "$flags" ]; then
    kill_run recovery --enable-recovery
    if grep -qi "unrecognized\|unknown option" "$tmp/recovery"; then
        n=$((n + 1)); echo "ok $n # SKIP this mpirun has no --enable-recovery"
    else
        # (a rank that gives up after the other survivor has exited names both)
        for r in 0 2; do
            grep -q "test_comm rank $r: stops at iteration 20: comm: all-reduce (sum) of 1000 f32 on 3 ranks: not complete after waiting 5\.[0-9] s; \(.*, \)*rank 1 (pid [0-9]* on [^)]*)[^;]* ha[sv]e* exited" "$tmp/recovery" &&
                grep -q "exit-status $r 1" "$tmp/recovery"
            check $? "killed rank, launcher keeps the job: rank $r stops at its 5 s bound naming rank 1 as exited, status 1"
        done
        [ "$secs" -le 30 ]
        check $? "killed rank, launcher keeps the job: over within 30 s ($secs s)"
    fi
fi

echo "1..$n"
[ "$fails" -eq 0 ]
