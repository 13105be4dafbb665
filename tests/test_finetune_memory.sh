#!/bin/sh
# test_finetune_memory.sh - colossal-finetune reports its peak resident
# memory against the bound its budgets promise (host budget + compute tier +
# the session's fixed overhead + what the process held before the session),
# phase by phase, and keeps within it: with everything on the NVMe tier, a
# host budget of 1 MiB, training, evaluation, saving and resuming (TAP).
ft=${FINETUNE:-./apps/colossal-finetune}
src=$(cd "${SRCDIR:-.}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# field NAME FILE: a number from the last {"memory":...} line
field() { grep '"memory"' "$2" | tail -n 1 | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
# within FILE WHAT: the report says so, and its figures agree
# a sanitizer build's resident memory holds ASan's shadow and quarantine: no bound to check
asan=false
ldd "$ft" 2>/dev/null | grep -q libasan && asan=true
within() {
    if $asan; then
        n=$((n + 1)); echo "ok $n # SKIP $2: AddressSanitizer's shadow memory and quarantine count as resident"
        return
    fi
    peak=$(field peak_rss "$1") bound=$(field bound "$1")
    if grep -q '"within":true' "$1" && [ -n "$peak" ] && [ -n "$bound" ] && [ "$peak" -le "$bound" ]; then
        ok "$2: peak resident $peak within the bound $bound"
    else
        notok "$2: peak '$peak', bound '$bound'"
        tail -n 3 "$1" | sed 's/^/# /'
    fi
}

data="$src/assets/corpus/kjv.txt.gz"
mem="--cpu-mem 1M --gpu-mem 96M --nvme-dir $tmp"
run="gpt2-bytes $data --batch 4 --seq 64 --eval-every 2 --eval-batches 1 --save-every 2 --seed 3"

(cd "$tmp" && "$ft" $run --steps 2 $mem --out a --json) > "$tmp/a.json" 2> "$tmp/a.err"
rc=$?
[ "$rc" -eq 0 ] && ok "2 steps with everything on NVMe under a 1 MiB host budget" || notok "exit $rc: $(head -n 2 "$tmp/a.err")"
within "$tmp/a.json" "training, evaluation, saving"
for p in load train eval save; do
    grep '"memory"' "$tmp/a.json" | grep -q "\"$p\":[1-9]" && ok "the $p phase has its peak" || notok "no $p peak"
done
for k in host_budget compute overhead staging tables process_base; do
    [ -n "$(field $k "$tmp/a.json")" ] && ok "the report names $k" || notok "the report lacks $k"
done

# stopped by Ctrl-C once it has saved, then resumed: loading the model and the optimizer state from NVMe too
(cd "$tmp" && exec "$ft" $run --steps 8 $mem --out b --json) > "$tmp/b.json" 2> "$tmp/b.err" &
pid=$!
i=0
while [ ! -s "$tmp/b/trainer_state.json" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
[ "$rc" -eq 130 ] && ok "stopped by Ctrl-C after a save (exit 130)" || notok "Ctrl-C: exit $rc"
within "$tmp/b.json" "stopped run"
(cd "$tmp" && "$ft" --resume b $mem --json) > "$tmp/r.json" 2> "$tmp/r.err"
rc=$?
[ "$rc" -eq 0 ] && grep -q '"step":8' "$tmp/r.json" && ok "resumed to step 8" || notok "resume: exit $rc: $(head -n 2 "$tmp/r.err")"
within "$tmp/r.json" "resuming (the model and the optimizer state loaded), training, saving"
grep '"memory"' "$tmp/r.json" | grep -q '"load":[1-9]' && ok "the resumed run's load phase has its peak" || notok "no load peak"

(cd "$tmp" && "$ft" $run --steps 1 $mem --out c) > "$tmp/c.out" 2> "$tmp/c.err"
if grep -q "^memory: peak resident .* within the bound .* (host .* + compute tier .* + overhead .*" "$tmp/c.out"; then
    ok "without --json a line says it: $(grep '^memory:' "$tmp/c.out" | cut -c1-90)..."
else
    notok "no memory line: $(tail -n 2 "$tmp/c.out")"
fi
echo "1..$n"
[ "$fails" -eq 0 ]
