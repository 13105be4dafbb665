#!/bin/sh
# test_demo_cli.sh - colossal-demo on good and bad input: one clear line on
# stderr and a non-zero exit for each bad case (TAP output).
demo=${DEMO:-./apps/colossal-demo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

# check NAME WANT_RC PATTERN -- ARGS...: runs the demo, compares exit code and stderr
check() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$demo" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    n=$((n + 1))
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$tmp/err" "$tmp/out"; then
        echo "ok $n - $name (exit $rc: $(head -n 1 "$tmp/err"))"
    else
        fails=$((fails + 1))
        echo "not ok $n - $name: exit $rc, wanted $want and '$pattern'"
        sed 's/^/# /' "$tmp/err" | head -5
    fi
}

awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) printf "the quick brown fox %d jumps\n", int(rand() * 100) }' > "$tmp/small.txt"
printf 'too short' > "$tmp/short.txt"
gzip -c "$tmp/small.txt" | head -c 200 > "$tmp/cut.gz"

check "trains a few steps on a small text" 0 "step     3/3" -- --data "$tmp/small.txt" --steps 3 --seq 16 --batch 2
gzip -k "$tmp/small.txt"
check "gzip-compressed data" 0 "step     2/2" -- --data "$tmp/small.txt.gz" --steps 2 --seq 16 --batch 2
check "missing data file" 1 "cannot open $tmp/missing.txt: No such file" -- --data "$tmp/missing.txt" --steps 1
check "data is a directory" 1 "is a directory" -- --data "$tmp" --steps 1
check "data too short" 1 "too short" -- --data "$tmp/short.txt" --steps 1
check "truncated gzip" 1 "corrupt or truncated" -- --data "$tmp/cut.gz" --steps 1
check "unknown option" 2 "usage:" -- --bogus
check "non-numeric step count" 2 "--steps must be an integer" -- --steps many
check "learning rate out of range" 2 "--lr must be" -- --lr 5
check "extra argument" 2 "unexpected argument" -- extra

echo "1..$n"
[ "$fails" -eq 0 ]
