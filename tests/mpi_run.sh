#!/bin/sh
# mpi_run.sh - runs a TAP test program under mpirun with each of the given
# process counts and renumbers rank 0's TAP lines into one stream:
#     mpi_run.sh PROGRAM NP... [-- ARGS...]
# Each run must exit 0 and report every check it planned. Skipped without
# mpirun. Shared by the tests of parallel training (test_dp.sh, ...).
set -u
prog=$1
shift
nps=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    nps="$nps $1"
    shift
done
[ $# -gt 0 ] && shift
MPIRUN=${MPIRUN:-mpirun}
if ! command -v "$MPIRUN" > /dev/null 2>&1; then
    echo "1..0 # SKIP no MPI launcher (mpirun) installed"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    flags="--allow-run-as-root --oversubscribe"
fi
if [ -n "${ASAN_OPTIONS:-}" ]; then # Open MPI's plugins keep memory LeakSanitizer cannot name (see test_comm.sh)
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
fi
n=0
fails=0
for np in $nps; do
    # shellcheck disable=SC2086
    timeout 600 "$MPIRUN" $flags -np "$np" "$prog" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    rc=$?
    while IFS= read -r line; do
        case "$line" in
        "ok "*) n=$((n + 1)); echo "ok $n - np=$np: ${line#ok * - }" ;;
        "not ok "*) n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - np=$np: ${line#not ok * - }" ;;
        "#"*) echo "$line" ;;
        esac
    done < "$tmp/out"
    planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tmp/out")
    ran=$(grep -cE '^(not )?ok ' "$tmp/out")
    n=$((n + 1))
    if [ "$rc" -eq 0 ] && [ -n "$planned" ] && [ "$planned" -eq "$ran" ] && [ "$ran" -gt 0 ]; then
        echo "ok $n - np=$np: mpirun exits 0 and rank 0 reported all $planned checks"
    else
        fails=$((fails + 1))
        echo "not ok $n - np=$np: mpirun exits 0 and rank 0 reported all its checks (exit $rc, planned ${planned:-none}, ran $ran)"
        echo "# stderr:"
        sed 's/^/#   /' "$tmp/err" | head -30
    fi
done
echo "1..$n"
[ "$fails" -eq 0 ]
