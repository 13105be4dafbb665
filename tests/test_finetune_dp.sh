#!/bin/sh
# test_finetune_dp.sh - colossal-finetune under mpirun (TAP output): data
# parallel runs with ZeRO 1, 2 and 3 compute the steps one process computes
# on the same command line (losses within 1e-5 relative; dropout off, as each
# process draws its own masks), write the same Hugging Face directory (one
# process's file layout, weights that evaluate to the same loss), refuse bad
# layouts with one line and exit 2, and a process killed with -9 stops the
# others with a message, after which --resume continues exactly. Skipped
# without mpirun.
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

run="gpt2-tiny corpus.txt --steps 12 --batch 12 --seq 32 --grad-accum 2 --dropout 0 --json --lr 3e-3 --eval-every 6 --eval-batches 2"
"$ft" $run --out one > one.json 2> one.err
[ "$(losses one.json | wc -l)" -eq 12 ] && ok "one process: 12 steps" || notok "one process failed: $(head -n 2 one.err)"

# ---- ZeRO 1, 2, 3 with 2, 3 and 4 processes: the same steps ----
for case in "2 1" "3 2" "4 3" "2 3"; do
    np=${case% *} z=${case#* }
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np "$np" "$ft" $run --zero "$z" --out "dp$np-$z" > "dp$np-$z.json" 2> "dp$np-$z.err"
    rc=$?
    w=$(worst "dp$np-$z.json" one.json)
    g=$(worst "dp$np-$z.json" one.json 3)
    if [ "$rc" -eq 0 ] && below "$w" 1e-5 && below "$g" 1e-3; then
        ok "$np processes, ZeRO $z: 12 steps' losses within 1e-5 of one process's (worst $w; gradient norms $g)"
    else
        notok "$np processes, ZeRO $z: exit $rc, worst difference $w (gradient norms $g)"
        sed 's/^/# /' "dp$np-$z.err" | head -5
    fi
    # process 0 alone prints: one line per step, one validation line per evaluation
    v1=$(grep -c '"val_loss"' one.json)
    v2=$(grep -c '"val_loss"' "dp$np-$z.json")
    [ "$v1" -eq "$v2" ] && [ "$v1" -gt 0 ] && below "$(grep '"val_loss"' "dp$np-$z.json" | tail -n 1 | sed 's/.*"val_loss":\([^}]*\)}/\1/')" 1e9 &&
        ok "$np processes, ZeRO $z: one JSON line per step and per evaluation ($v2 evaluations)" ||
        notok "$np processes, ZeRO $z: $v2 evaluation lines, one process printed $v1"
done
# the saved directories: one process's file layout, the same evaluation loss
for f in model.safetensors optimizer.safetensors; do
    st_header one/$f > h1 && st_header dp3-2/$f > h2 && cmp -s h1 h2 &&
        ok "3 processes write $f with one process's tensors and layout" || notok "$f: layout differs from one process's"
done
for f in config.json tokenizer.json trainer_state.json; do
    [ -s "dp3-2/$f" ] && ok "3 processes write $f" || notok "3 processes wrote no $f"
done
e1=$("$ft" one corpus.txt --eval-only --batch 12 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
e2=$("$ft" dp3-2 corpus.txt --eval-only --batch 12 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
[ -n "$e1" ] && [ -n "$e2" ] && below "$(awk "BEGIN { d = $e1 - $e2; if (d < 0) d = -d; print d / $e1 }")" 1e-5 &&
    ok "the 3-process model evaluates as one process's: $e2 vs $e1" || notok "evaluation of the saved models: '$e2' vs '$e1'"

# ---- pipelines: 2 stages (1F1B, 4 micro-batches), and 2 data parallel groups of 2 stages ----
pipe="gpt2-tiny corpus.txt --steps 10 --batch 8 --seq 32 --dropout 0 --json --lr 3e-3 --eval-every 100 --warmup 2"
"$ft" $pipe --out p1 > p1.json 2> p1.err
"$ft" $pipe --grad-clip 0 --out p1n > p1n.json 2> p1n.err
c=0
for case in "2 p1 --pp 2 --micro-batches 4" "4 p1 --pp 2 --dp 2" "4 p1n --pp 2 --dp 2 --grad-clip 0"; do
    np=${case%% *} rest=${case#* } ref=${rest%% *} args=${rest#* }
    c=$((c + 1))
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np "$np" "$ft" $pipe $args --out "pp$c" > "pp$c.json" 2> "pp$c.err"
    rc=$?
    w=$(worst "pp$c.json" "$ref.json")
    if [ "$rc" -eq 0 ] && below "$w" 1e-5; then
        ok "$np processes, $args: 10 steps' losses within 1e-5 of one process's (worst $w)"
    else
        notok "$np processes, $args: exit $rc, worst difference $w"
        sed 's/^/# /' "pp$c.err" | head -5
    fi
done
for f in model.safetensors optimizer.safetensors; do
    st_header p1n/$f > h1 && st_header pp3/$f > h2 && cmp -s h1 h2 &&
        ok "2 x 2 pipeline processes write $f with one process's tensors and layout" ||
        notok "pipeline's $f: layout differs from one process's"
done
e1=$("$ft" p1n corpus.txt --eval-only --batch 8 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
e2=$("$ft" pp3 corpus.txt --eval-only --batch 8 --seq 32 --eval-batches 2 2>&1 | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
[ -n "$e1" ] && [ -n "$e2" ] && below "$(awk "BEGIN { d = $e1 - $e2; if (d < 0) d = -d; print d / $e1 }")" 1e-5 &&
    ok "the pipelined model evaluates as one process's: $e2 vs $e1" || notok "evaluation of the pipelined model: '$e2' vs '$e1'"
# the interleaved schedule (2 stages per process) needs 4 layers: p1n's model with its 2 layers repeated
if python3 - p1n deep4 << 'PY'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blobs, off = {}, [], 0
def put(name, meta):
    global off
    b = data[meta["data_offsets"][0]:meta["data_offsets"][1]]
    out[name] = {"dtype": meta["dtype"], "shape": meta["shape"], "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
for name, meta in head.items():
    if name == "__metadata__":
        continue
    if ".h." in name:
        i = int(name.split(".h.")[1].split(".")[0])
        for j in (i, i + 2):
            put(name.replace(".h.%d." % i, ".h.%d." % j), meta)
    else:
        put(name, meta)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
cfg = json.load(open(os.path.join(src, "config.json")))
cfg["n_layer"] = 4
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
for f in os.listdir(src):
    if f.startswith("tokenizer"):
        open(os.path.join(dst, f), "wb").write(open(os.path.join(src, f), "rb").read())
PY
then
    deep="deep4 corpus.txt --steps 6 --batch 8 --seq 32 --dropout 0 --json --lr 1e-3 --warmup 2 --eval-every 100"
    "$ft" $deep --out d1 > d1.json 2> d1.err
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" $flags -np 2 "$ft" $deep --pp 2 --virtual-stages 2 --micro-batches 4 --out d2 > d2.json 2> d2.err
    rc=$?
    w=$(worst d2.json d1.json)
    [ "$rc" -eq 0 ] && below "$w" 1e-5 &&
        ok "2 processes, --pp 2 --virtual-stages 2 (interleaved, 4 stages of a 4-layer model): losses within 1e-5 of one process's (worst $w)" ||
        { notok "interleaved pipeline: exit $rc, worst difference $w"; sed 's/^/# /' d2.err | head -3; }
else
    n=$((n + 1)); echo "ok $n # SKIP no python3 to make a 4-layer model"
fi

# resumed under the same layout: the run that never stopped
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" gpt2-tiny corpus.txt --steps 10 --batch 8 --seq 32 --dropout 0.1 --json \
    --lr 3e-3 --warmup 2 --pp 2 --save-every 5 --out pfull > pfull.json 2> /dev/null
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" gpt2-tiny corpus.txt --steps 10 --batch 8 --seq 32 --dropout 0.1 --json \
    --lr 3e-3 --warmup 2 --pp 2 --save-every 5 --out phalf > /dev/null 2>&1 &
bg=$!
while [ "$(saved_step phalf)" = "" ] && kill -0 $bg 2>/dev/null; do sleep 0.01; done
kill -9 $bg 2>/dev/null
pkill -9 -f -- "$ft .*--out phalf" 2>/dev/null
wait $bg 2>/dev/null
k=$(saved_step phalf)
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 2 "$ft" --resume phalf --json > presumed.json 2> presumed.err
losses pfull.json | awk -v k="$k" '$1 > k' > want.txt
losses presumed.json > got.txt
[ -n "$k" ] && [ -s want.txt ] && cmp -s want.txt got.txt &&
    ok "a pipelined run (dropout 0.1) killed after its save at step $k resumes with bitwise the losses of the run that never stopped" ||
    { notok "pipelined --resume from step '$k': the losses differ"; sed 's/^/# /' presumed.err | head -3; }

# ---- bad layouts: one line from process 0, exit 2 ----
bad() {
    want=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 120 "$MPIRUN" $flags -np "$np" "$ft" gpt2-tiny corpus.txt --steps 2 --out bad "$@" > bad.out 2> bad.err
    rc=$?
    lines=$(grep -c "^colossal-finetune: " bad.err)
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" bad.err; then
        ok "$np processes with $*: exit 2 and one line: $(grep '^colossal-finetune: ' bad.err)"
    else
        notok "$np processes with $*: exit $rc, $lines lines, wanted '$want'"
        sed 's/^/# /' bad.err | head -5
    fi
}
bad "run has 3" 3 --dp 2 --batch 4
bad "multiple of 3" 3 --batch 4
bad "at most one stage per layer" 4 --pp 4
bad "cannot split the 6 rows" 2 --pp 2 --batch 6 --micro-batches 4
bad "accumulates its micro-batches" 2 --pp 2 --grad-accum 2
bad "multiple of the pipeline" 2 --pp 2 --virtual-stages 2 --micro-batches 3 --batch 6
bad "at most one stage per layer" 2 --pp 2 --virtual-stages 2 --batch 4
"$ft" gpt2-tiny corpus.txt --dp 2 --out bad > bad.out 2> bad.err
[ $? -eq 2 ] && grep -q "mpirun -np 2" bad.err && ok "--dp 2 without a launcher: exit 2, $(cat bad.err)" ||
    notok "--dp 2 without a launcher"

# ---- kill -9 one process mid-run: the others stop with a message; --resume continues exactly ----
long="gpt2-tiny corpus.txt --steps 300 --batch 6 --seq 32 --dropout 0 --json --lr 3e-3 --save-every 3 --eval-every 100"
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 3 "$ft" $long --out ref > ref.json 2> ref.err
[ "$(losses ref.json | wc -l)" -eq 300 ] && ok "3 processes: 300 uninterrupted steps" || notok "uninterrupted run failed"
t0=$(date +%s)
# shellcheck disable=SC2086
"$MPIRUN" $flags -np 3 "$ft" $long --out killed > killed.json 2> killed.err &
bg=$!
tries=0
while [ "$(saved_step killed)" = "" ] || [ "$(saved_step killed)" -lt 6 ]; do
    tries=$((tries + 1))
    [ $tries -gt 6000 ] && break
    kill -0 $bg 2>/dev/null || break
    sleep 0.01
done
victim=$(pgrep -f -- "$ft .*--out killed" | grep -v "^$bg$" | tail -n 1) # a process of the run, not mpirun
[ -n "$victim" ] && kill -9 "$victim"
wait $bg
rc=$?
secs=$(($(date +%s) - t0))
k=$(saved_step killed)
if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$secs" -lt 60 ] && [ -n "$k" ] && [ "$k" -lt 300 ] && [ -s killed.err ]; then
    ok "a process killed with -9 after step $k: the run ends in ${secs}s (exit $rc) with a message: $(grep -m1 -iE "colossal-finetune|exited|signal|killed" killed.err)"
else
    notok "kill -9 of process $victim: exit $rc after ${secs}s, saved step '$k'"
    sed 's/^/# /' killed.err | head -5
fi
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" $flags -np 3 "$ft" --resume killed --json > resumed.json 2> resumed.err
losses ref.json | awk -v k="$k" '$1 > k' > want.txt
losses resumed.json > got.txt
if [ -s want.txt ] && cmp -s want.txt got.txt; then
    ok "--resume under 3 processes continues from step $k with bitwise the losses of the uninterrupted run"
else
    notok "--resume from step $k: the losses differ from the uninterrupted run's"
    sed 's/^/# /' resumed.err | head -5
fi

# the same when the launcher leaves the others running (--enable-recovery): their own bounded wait ends them,
# naming the process that is gone
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
    t0=$(date +%s)
    # shellcheck disable=SC2086
    "$MPIRUN" $flags --enable-recovery -np 3 "$ft" $long --comm-timeout 5 --out killed2 > killed2.json 2> killed2.err &
    bg=$!
    tries=0
    while [ "$(saved_step killed2)" = "" ] || [ "$(saved_step killed2)" -lt 6 ]; do
        tries=$((tries + 1))
        [ $tries -gt 6000 ] && break
        kill -0 $bg 2>/dev/null || break
        sleep 0.01
    done
    victim=$(pgrep -f -- "$ft .*--out killed2" | grep -v "^$bg$" | tail -n 1)
    [ -n "$victim" ] && kill -9 "$victim"
    wait $bg
    rc=$?
    secs=$(($(date +%s) - t0))
    # (the launcher's own status may then be 0: the processes' lines tell)
    if [ -n "$victim" ] && [ "$secs" -lt 60 ] && grep -q "rank 2 .*exited" killed2.err; then
        ok "with --enable-recovery the others stop by themselves in ${secs}s: $(grep -m1 "rank 2 .*exited" killed2.err)"
    else
        notok "with --enable-recovery: exit $rc after ${secs}s"
        sed 's/^/# /' killed2.err | head -5
    fi
fi

echo "1..$n"
[ "$fails" -eq 0 ]
