#!/bin/sh
# test_finetune_tp.sh - colossal-finetune with tensor and sequence parallelism under mpirun (TAP output): 1D
# tensor parallel runs (gpt2-tiny's vocabulary of 257 padded to the parts), ring and Ulysses sequence parallel
# runs and their combinations with --dp and --pp compute the steps one process computes (losses within 1e-5 relative;
# dropout off, as each process draws masks for its own shapes), write one process's Hugging Face directory
# (whole tensors, which evaluate to the same loss, and which another layout starts from), resume exactly, and
# refuse layouts the model or the build cannot split with one line and exit 2. Skipped without mpirun.
ft=${FINETUNE:-./apps/colossal-finetune}
ft=$(cd "$(dirname "$ft")" && pwd)/$(basename "$ft")
MPIRUN=${MPIRUN:-mpirun}
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
if ! command -v "$MPIRUN" > /dev/null 2>&1; then
    echo "1..0 # SKIP no MPI launcher (mpirun) installed"
    exit 0
fi
tmp=$(mktemp -d)
bg=
trap 'kill -9 $bg 2>/dev/null; rm -rf "$tmp"' EXIT
flags=
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    flags="--allow-run-as-root --oversubscribe"
fi
if [ -n "${ASAN_OPTIONS:-}" ]; then # see test_comm.sh
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
fi
cd "$tmp" || exit 1
awk 'BEGIN { srand(5); for (i = 0; i < 3000; i++) printf "line %d of a %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > corpus.txt
# the per-step losses and gradient norms of a --json run: "step loss grad_norm" per line
losses() { grep '"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),"lr":[^,]*,"grad_norm":\([^,]*\),.*/\1 \2 \3/'; }
# the largest relative difference between two such lists in column c (2: losses, 3: gradient norms; 2 when their
# steps differ). The gradient norms drift further than the losses: a tensor whose true gradient is zero (GPT-2's
# key bias) gets rounding noise that AdamW turns into steps of the learning rate's size, differently for any two
# summation orders, and the norm is sensitive to those weights.
worst() {
    losses "$1" > "$tmp/a.txt"
    losses "$2" > "$tmp/b.txt"
    [ -s "$tmp/a.txt" ] && [ "$(wc -l < "$tmp/a.txt")" -eq "$(wc -l < "$tmp/b.txt")" ] || { echo 2; return; }
    paste -d ' ' "$tmp/a.txt" "$tmp/b.txt" | awk -v c="${3:-2}" 'function r(x, y) { d = x - y; if (d < 0) d = -d;
        if (y < 0) y = -y; return y > 0 ? d / y : d } { if ($1 != $4) w = 2; a = r($c, $(c + 3)); if (a > w) w = a }
        END { printf "%.3g\n", w + 0 }'
}
below() { awk "BEGIN { exit !($1 <= $2) }"; }
saved_step() { sed -n 's/.*"step":[[:space:]]*"\([0-9]*\)".*/\1/p' "$1/trainer_state.json" 2>/dev/null | head -n 1; }
# the 8-byte length and JSON header of a safetensors file (names, dtypes, shapes, offsets)
st_header() {
    len=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
    head -c $((8 + len)) "$1"
}

run="gpt2-tiny corpus.txt --steps 8 --batch 8 --seq 32 --dropout 0 --json --lr 3e-3 --eval-every 4 --eval-batches 2"
"$ft" $run --out one > one.json 2> one.err
[ "$(losses one.json | wc -l)" -eq 8 ] && ok "one process: 8 steps" || notok "one process failed: $(head -n 2 one.err)"
llama="llama-tiny corpus.txt --steps 6 --batch 4 --seq 32 --dropout 0 --json --lr 3e-3 --eval-every 100"
"$ft" $llama --out lone > lone.json 2> lone.err

c=0
for case in "2 one --tp 2" "2 one --sp 2" "2 one --sp 2 --sp-mode ulysses" "4 one --tp 4" "4 one --tp 2 --dp 2" \
    "4 one --tp 2 --sp 2" "4 one --sp 2 --sp-mode ulysses --dp 2" "2 lone --tp 2" "2 lone --sp 2" \
    "2 one --tp 2 --tp-seq-split" "2 lone --tp 2 --tp-seq-split" \
    "4 one --tp 2 --pp 2" "4 one --sp 2 --pp 2" "4 lone --tp 2 --pp 2 --micro-batches 2"; do
    np=${case%% *} rest=${case#* } ref=${rest%% *} args=${rest#* }
    c=$((c + 1))
    base=$run
    [ "$ref" = lone ] && base=$llama
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np "$np" "$ft" $base $args --out "tp$c" > "tp$c.json" 2> "tp$c.err"
    rc=$?
    w=$(worst "tp$c.json" "$ref.json")
    if [ "$rc" -eq 0 ] && below "$w" 1e-5; then
        ok "$np processes, $args ($( [ "$ref" = lone ] && echo llama || echo gpt2)): losses within 1e-5 of one process's (worst $w)"
    else
        notok "$np processes, $args: exit $rc, worst difference $w"
        sed 's/^/# /' "tp$c.err" | head -5
    fi
done
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 4 "$ft" gpt2-tiny corpus.txt --steps 1 --batch 8 --seq 32 --tp 2 --sp 2 --out said \
    > said.out 2> said.err
grep -q "4 processes: 1 data parallel (ZeRO 2) x 2 tensor parallel (1d) x 2 sequence parallel (ring)" said.err said.out &&
    ok "the run names its layout" || notok "no layout line: $(grep processes said.err said.out | head -n 2)"

# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 4 "$ft" gpt2-tiny corpus.txt --steps 1 --batch 8 --seq 32 --tp 2 --pp 2 --out said2 \
    > said2.out 2> said2.err
grep -q "4 processes: 1 data parallel (ZeRO 2) x 2 tensor parallel (1d) x 1 sequence parallel (ring) x 2 pipeline stages" \
    said2.err said2.out && ok "a --tp 2 --pp 2 run names its pipeline stages too" ||
    notok "no --tp 2 --pp 2 layout line: $(grep processes said2.err said2.out | head -n 2)"

# samples during training: printed under --tp 2 (sampling is not compared with one process's text: a draw near a
# boundary between two tokens turns a last-bit difference of the logits into another token; tests/test_tp.c
# compares greedy ids); a note, and training, where generation does not run yet
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" gpt2-tiny corpus.txt --steps 2 --batch 8 --seq 32 --dropout 0 --lr 3e-3 \
    --sample-every 2 --sample-len 8 --json --tp 2 --out s2 > s2.json 2> s2.err
[ "$(grep -a -c '"sample":"[^"]' s2.json)" -eq 1 ] && ok "--tp 2 --sample-every: a sample, printed once" ||
    { notok "--tp 2 samples: $(grep -a -c '"sample"' s2.json) sample lines"; sed 's/^/# /' s2.err | head -3; }
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" gpt2-tiny corpus.txt --steps 2 --batch 8 --seq 32 --dropout 0 --lr 3e-3 \
    --sample-every 2 --sp 2 --out s3 > s3.out 2> s3.err
rc=$?
[ "$rc" -eq 0 ] && grep -q "no samples" s3.err s3.out && ok "--sp 2 --sample-every: a note, and the run trains" ||
    { notok "--sp 2 --sample-every: exit $rc"; sed 's/^/# /' s3.err | head -3; }

# the saved directory: one process's tensors and layout, the same evaluation (tp10: --tp 2 --pp 2)
for d in tp5 tp10; do
    for f in model.safetensors optimizer.safetensors; do
        st_header one/$f > h1 && st_header $d/$f > h2 && cmp -s h1 h2 &&
            ok "$d writes $f with one process's tensors and layout" || notok "$d/$f: layout differs from one process's"
    done
done
e1=$("$ft" one corpus.txt --eval-only --batch 8 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
e2=$("$ft" tp5 corpus.txt --eval-only --batch 8 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
[ -n "$e1" ] && [ -n "$e2" ] && below "$(awk "BEGIN { d = $e1 - $e2; if (d < 0) d = -d; print d / $e1 }")" 1e-5 &&
    ok "the tensor-parallel model evaluates as one process's: $e2 vs $e1" || notok "evaluation of the saved models: '$e2' vs '$e1'"
e3=$("$ft" tp10 corpus.txt --eval-only --batch 8 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
[ -n "$e1" ] && [ -n "$e3" ] && below "$(awk "BEGIN { d = $e1 - $e3; if (d < 0) d = -d; print d / $e1 }")" 1e-5 &&
    ok "the --tp 2 --pp 2 model evaluates as one process's: $e3 vs $e1" || notok "evaluation of the --tp 2 --pp 2 model: '$e3' vs '$e1'"
# another layout starts from that directory (the optimizer starts afresh: MODEL is a model directory)
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" tp5 corpus.txt --steps 2 --batch 8 --seq 32 --dropout 0 --json --sp 2 --out re > re.json 2> re.err &&
    [ "$(losses re.json | wc -l)" -eq 2 ] && ok "a run under --sp 2 starts from the --tp 2 --dp 2 directory" ||
    { notok "starting --sp 2 from the tensor-parallel directory"; sed 's/^/# /' re.err | head -3; }

# resumed under the same layout: the run that never stopped
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" $run --tp 2 --save-every 4 --out full > full.json 2> /dev/null
# shellcheck disable=SC2086
"$MPIRUN" $flags -np 2 "$ft" $run --tp 2 --save-every 4 --out half > /dev/null 2>&1 &
bg=$!
while [ "$(saved_step half)" = "" ] && kill -0 $bg 2>/dev/null; do sleep 0.01; done
kill -9 $bg 2>/dev/null
pkill -9 -f -- "$ft .*--out half" 2>/dev/null
wait $bg 2>/dev/null
k=$(saved_step half)
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" --resume half --json > resumed.json 2> resumed.err
losses full.json | awk -v k="$k" '$1 > k' > want.txt
losses resumed.json > got.txt
[ -n "$k" ] && [ -s want.txt ] && cmp -s want.txt got.txt &&
    ok "a --tp 2 run killed after its save at step $k resumes with bitwise the losses of the run that never stopped" ||
    { notok "--tp 2 --resume from step '$k': the losses differ"; sed 's/^/# /' resumed.err | head -3; }

# ---- bad layouts: one line from process 0, exit 2 ----
bad() {
    want=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 120 "$MPIRUN" $flags -np "$np" "$ft" ${MODEL:-gpt2-tiny} corpus.txt --steps 2 --seq 32 --out bad --overwrite "$@" \
        > bad.out 2> bad.err
    rc=$?
    lines=$(grep -c "^colossal-finetune: " bad.err)
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" bad.err; then
        ok "$np processes with $*: exit 2 and one line: $(grep '^colossal-finetune: ' bad.err)"
    else
        notok "$np processes with $*: exit $rc, $lines lines, wanted '$want'"
        sed 's/^/# /' bad.err | head -5
    fi
}
bad "attention heads" 3 --tp 3
bad "process count" 4 --tp 2 --sp 2 --dp 2
bad "rows per step" 8 --tp 4 --tp-mode 2d --pp 2 --batch 8 --micro-batches 8
bad "square number" 2 --tp 2 --tp-mode 2d
bad "cube" 4 --tp 4 --tp-mode 3d
bad "sequence length" 3 --sp 3
MODEL=llama-tiny bad "whole heads" 4 --sp 4 --sp-mode ulysses
"$ft" gpt2-tiny corpus.txt --tp 2 --out bad --overwrite > bad.out 2> bad.err
[ $? -eq 2 ] && grep -q "mpirun -np 2" bad.err && ok "--tp 2 without a launcher: exit 2, $(cat bad.err)" ||
    notok "--tp 2 without a launcher"
for args in "--tp-mode 2d" "--sp-mode ulysses" "--tp 2 --tp-depth 2" "--tp-seq-split"; do
    # shellcheck disable=SC2086
    "$ft" gpt2-tiny corpus.txt $args --out bad --overwrite > bad.out 2> bad.err
    rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < bad.err)" -eq 1 ] && ok "$args alone: exit 2, $(cat bad.err)" ||
        { notok "$args alone: exit $rc"; sed 's/^/# /' bad.err | head -3; }
done
"$ft" gpt2-tiny corpus.txt --tp-mode 4d --out bad --overwrite > bad.out 2> bad.err
[ $? -eq 2 ] && grep -q "tp-mode" bad.err && ok "--tp-mode 4d: exit 2, $(cat bad.err)" || notok "--tp-mode 4d accepted"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" $flags -np 2 "$ft" gpt2-tiny corpus.txt --steps 2 --seq 32 --tp 2 --lora-rank 4 --out bad --overwrite \
    > bad.out 2> bad.err
rc=$?
[ "$rc" -ne 0 ] && [ "$(grep -c "^colossal-finetune: " bad.err)" -eq 1 ] && grep -q "LoRA" bad.err &&
    ok "--tp 2 --lora-rank 4: refused in one line (exit $rc): $(grep '^colossal-finetune: ' bad.err)" ||
    { notok "--tp 2 with LoRA: exit $rc"; sed 's/^/# /' bad.err | head -3; }

echo "1..$n"
[ "$fails" -eq 0 ]
