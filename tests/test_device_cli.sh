#!/bin/sh
# test_device_cli.sh - colossal-finetune and colossal-chat on a GPU, end to
# end on any machine: test builds of the two apps whose GPU glue is a fake
# GPU (tests/device_fake.c: the CPU kernels, run only on blocks of a fake
# device memory whose table refuses any copy that is not between a host
# buffer and one of its blocks) take the GPU path - the default choice, the
# compute budget from the free memory, plans, batches, logits and the
# key/value cache in device memory, the device's memory in the progress line
# and in colossal-top - and must give the CPU's results bit for bit; a run
# stopped on the GPU resumes on the CPU exactly. (TAP output)
ft=${FINETUNE:-$PWD/apps/colossal-finetune}
fg=${FINETUNE_FAKEGPU:-$PWD/tests/finetune_fakegpu}
chat=${CHAT:-$(dirname "$ft")/colossal-chat}
cg=${CHAT_FAKEGPU:-$(dirname "$fg")/chat_fakegpu}
top=${TOP:-$(dirname "$ft")/colossal-top}
src=$(cd "${SRCDIR:-.}" && pwd)
tmp=$(mktemp -d)
trap 'kill -9 $bg 2>/dev/null; rm -rf "$tmp"' EXIT
bg=
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# the per-step JSON lines without the timing fields
losses() { grep '"loss"' "$1" | sed 's/,"tok_per_s".*//'; }
# a fake GPU must give back every block and never see memory outside them (device_fake.c says so on stderr)
clean() { ! grep -q "^fake GPU:" "$1"; }

awk 'BEGIN { srand(3); for (i = 0; i < 4000; i++) printf "line %d of the %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > "$tmp/corpus.txt"
run="gpt2-tiny corpus.txt --steps 40 --batch 4 --seq 32 --dropout 0.1 --lr 3e-3 --eval-every 10 --eval-batches 2"

# ---- the default choice, the budget from the free memory, the device in the progress line ----
(cd "$tmp" && "$fg" $run --out g) > "$tmp/g.out" 2> "$tmp/g.err"
rc=$?
# 768 MiB free (nothing allocated yet), less 512 MiB + 768 MiB / 32 kept back: 232 MiB
if [ $rc -eq 0 ] && grep -q "^cuda:0: Fake GPU: CPU kernels on fake device memory, 768\.0 MiB; training to 40 steps into g/$" "$tmp/g.out" &&
    grep -q "^compute tier 232\.0 MiB: the 768\.0 MiB free on cuda:0 less 536\.0 MiB kept back (--gpu-mem sets it)$" "$tmp/g.out"; then
    ok "with a GPU the default is cuda:0, and the compute tier its free memory less the reserve: $(grep '^compute tier' "$tmp/g.out")"
else
    notok "default device or budget: exit $rc: $(head -n 5 "$tmp/g.out" | tr '\n' '|') $(head -n 2 "$tmp/g.err")"
fi
grep -q "^step 40/40 .* mem: compute [0-9.]* [KMG]\?i\?B (cuda:0 [0-9.]* MiB/768.0 MiB) host [0-9.]* [KMG]\?i\?B nvme 0 B$" "$tmp/g.out" &&
    ok "the progress line shows the GPU's memory used/total beside the compute tier: $(grep '^step 40/40' "$tmp/g.out" | sed 's/.*mem:/mem:/')" ||
    notok "no GPU memory in the progress line: $(grep '^step 40/40' "$tmp/g.out")"
grep -q "^memory: peak resident .* (host .* + compute tier .* + overhead .* + gpu runtime 256\.0 MiB + before the session" "$tmp/g.out" &&
    ok "the memory report allows for the GPU runtime's host memory" || notok "memory report: $(grep '^memory' "$tmp/g.out")"
clean "$tmp/g.err" && ok "every fake device block given back, no memory outside them" || notok "$(cat "$tmp/g.err")"

# ---- on a GPU the default precision is bf16 (the CPU's is fp32), written to the run state ----
(cd "$tmp" && "$fg" $run --out dflt --steps 2 && "$ft" $run --out dflt_cpu --steps 2 --device cpu) > /dev/null 2> "$tmp/err"
tr -d ' \n' < "$tmp/dflt/trainer_state.json" | grep -q '\["precision","bf16"\]' &&
    tr -d ' \n' < "$tmp/dflt_cpu/trainer_state.json" | grep -q '\["precision","fp32"\]' &&
    ok "no --precision: bf16 on the GPU, fp32 on the CPU, in the run state" ||
    notok "default precision: $(head -n 2 "$tmp/err") $(grep -o '"precision"[^]]*' "$tmp/dflt/trainer_state.json")"

# ---- the GPU's results are the CPU's, bit for bit (--precision fp32): default budget, the smallest budget (chunks move) ----
(cd "$tmp" && "$ft" $run --out cpu --json --device cpu) > "$tmp/cpu.json" 2> "$tmp/err"
(cd "$tmp" && "$fg" $run --out gpu --json --precision fp32) > "$tmp/gpu.json" 2> "$tmp/gpu.err"
if [ "$(losses "$tmp/cpu.json" | wc -l)" -eq 40 ] && [ "$(losses "$tmp/cpu.json")" = "$(losses "$tmp/gpu.json")" ] &&
    [ "$(grep val_loss "$tmp/cpu.json")" = "$(grep val_loss "$tmp/gpu.json")" ] &&
    cmp -s "$tmp/cpu/model.safetensors" "$tmp/gpu/model.safetensors" && clean "$tmp/gpu.err"; then
    ok "40 steps on the GPU: the CPU's losses, validation losses and final weights bit for bit"
else
    notok "the GPU run differs from the CPU's: $(head -n 2 "$tmp/gpu.err")"
fi
grep -q '"gpu_runtime":268435456,' "$tmp/gpu.json" && ! grep -q gpu_runtime "$tmp/cpu.json" &&
    ok "--json's memory report: gpu_runtime on the GPU only" || notok "gpu_runtime field: $(tail -n 1 "$tmp/gpu.json")"
(cd "$tmp" && "$fg" $run --out e1 --precision fp32 --chunk-size 16K --gpu-mem 8K) > /dev/null 2> "$tmp/err"
least=$(sed -n 's/.*needs at least \([0-9]*\) bytes.*(--gpu-mem)$/\1/p' "$tmp/err")
(cd "$tmp" && "$fg" $run --out small --json --precision fp32 --chunk-size 16K --gpu-mem "$least") > "$tmp/small.json" 2> "$tmp/small.err"
if [ -n "$least" ] && [ "$(losses "$tmp/small.json")" = "$(losses "$tmp/cpu.json")" ] &&
    cmp -s "$tmp/cpu/model.safetensors" "$tmp/small/model.safetensors" && clean "$tmp/small.err"; then
    ok "through the smallest compute tier on the GPU ($least bytes): the same losses and weights"
else
    notok "the smallest GPU compute tier ('$least'): $(head -n 2 "$tmp/err") $(head -n 2 "$tmp/small.err")"
fi

# ---- stopped on the GPU, resumed on the CPU: the run that never stopped ----
(cd "$tmp" && exec "$fg" $run --out moved --json --precision fp32 --save-every 0) > "$tmp/moved.json" 2> /dev/null &
bg=$!
tries=0
while [ "$(losses "$tmp/moved.json" | wc -l)" -lt 8 ] && [ $tries -lt 3000 ] && kill -0 $bg 2>/dev/null; do
    tries=$((tries + 1)); sleep 0.01
done
# held still meanwhile (Ctrl-C pending), colossal-top sees the GPU under the compute tier
kill -STOP $bg
snap=$("$top" --json -p $bg 2>/dev/null)
kill -INT $bg; kill -CONT $bg; wait $bg; rc=$?
k=$(losses "$tmp/moved.json" | wc -l)
echo "$snap" | grep -q '"compute":{"used":[0-9]*,"budget":[0-9]*,"device":"cuda:0: Fake GPU: CPU kernels on fake device memory","device_used":[0-9]*,"device_total":805306368}' &&
    ok "colossal-top --json: the GPU's name, memory used and total with the compute tier" ||
    notok "colossal-top: $(echo "$snap" | grep -o '"tiers":{"compute":{[^}]*}')"
(cd "$tmp" && "$ft" --resume moved --json --device cpu) > "$tmp/resumed.json" 2> "$tmp/err"
losses "$tmp/cpu.json" | sed -n "$((k + 1)),\$p" > "$tmp/tail.txt"
if [ "$rc" -eq 130 ] && [ "$k" -lt 40 ] && [ "$(losses "$tmp/resumed.json")" = "$(cat "$tmp/tail.txt")" ] &&
    cmp -s "$tmp/cpu/model.safetensors" "$tmp/moved/model.safetensors"; then
    ok "Ctrl-C on the GPU at step $k, --resume --device cpu: steps $((k + 1))..40 and the weights as the CPU run's"
else
    notok "resume on another device: exit $rc at step $k: $(head -n 2 "$tmp/err")"
fi

# ---- no usable GPU, or too little free memory ----
(cd "$tmp" && COL_FAKE_GPU_COUNT=0 "$fg" $run --out none --steps 2) > "$tmp/out" 2> "$tmp/err"
grep -q "^cpu: [0-9]* threads" "$tmp/out" && ok "no GPU: the default is the CPU" || notok "no GPU, default: $(head -n 3 "$tmp/out")"
(cd "$tmp" && COL_FAKE_GPU_COUNT=0 "$fg" $run --out none2 --device cuda) > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(cat "$tmp/err")" = "colossal-finetune: --device cuda: no usable GPU: the fake GPU library was told there is none; use --device cpu" ] &&
    [ ! -e "$tmp/none2" ] && [ ! -e "$tmp/none2.lock" ]; then
    ok "--device cuda without a GPU: exit 2, one line, nothing written"
else
    notok "--device cuda without a GPU: exit $rc: $(cat "$tmp/err")"
fi
(cd "$tmp" && "$fg" $run --out far --device cuda:1) > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "^colossal-finetune: --device cuda:1: there is no GPU 1 (this machine has 1: cuda:0); use --device cuda:0 or --device cpu$" "$tmp/err" &&
    ok "--device cuda:1 with one GPU: exit 2, $(cat "$tmp/err")" || notok "cuda:1: exit $rc: $(cat "$tmp/err")"
(cd "$tmp" && COL_FAKE_GPU_MEM=600000000 "$fg" $run --out full) > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "^colossal-finetune: cuda:0 has 572\.2 MiB free, too little beside the 529\.9 MiB kept back .*--gpu-mem$" "$tmp/err" &&
    ok "a GPU with too little free memory: $(cat "$tmp/err")" || notok "too little free: exit $rc: $(cat "$tmp/err")"

# ---- colossal-chat on the GPU: the CPU's greedy ids ----
fx="$src/tests/fixtures/chat_model/base"
"$chat" "$fx" --prompt "The cat" --temperature 0 --max-new-tokens 24 --json --device cpu > "$tmp/c_cpu" 2> "$tmp/err"
"$cg" "$fx" --prompt "The cat" --temperature 0 --max-new-tokens 24 --json > "$tmp/c_gpu" 2> "$tmp/c_gpu.err"
if grep -q '^{"ids":\[[0-9,]*\]}$' "$tmp/c_cpu" && cmp -s "$tmp/c_cpu" "$tmp/c_gpu" && clean "$tmp/c_gpu.err"; then
    ok "colossal-chat on the GPU (key/value cache in device memory): the CPU's greedy ids"
else
    notok "chat on the GPU: $(cat "$tmp/c_gpu") vs $(cat "$tmp/c_cpu"): $(head -n 2 "$tmp/c_gpu.err")"
fi
"$chat" "$fx" --prompt "The cat" --temperature 0.8 --seed 7 --max-new-tokens 24 --device cpu > "$tmp/c_cpu" 2> /dev/null
printf 'The cat\n' | "$cg" "$fx" --temperature 0.8 --seed 7 --max-new-tokens 24 --raw > "$tmp/c_gpu" 2> "$tmp/c_gpu.err"
[ -s "$tmp/c_cpu" ] && cmp -s "$tmp/c_cpu" "$tmp/c_gpu" && clean "$tmp/c_gpu.err" &&
    ok "piped and sampled: the same text as on the CPU" || notok "sampled chat on the GPU: $(cat "$tmp/c_gpu")"
COL_FAKE_GPU_COUNT=0 "$cg" "$fx" --prompt hi --device cuda:0 > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "^colossal-chat: --device cuda:0: no usable GPU: " "$tmp/err" &&
    ok "colossal-chat --device cuda:0 without a GPU: exit 2, one line" || notok "chat without a GPU: exit $rc: $(cat "$tmp/err")"

# interactive: the device and the compute tier are said before the first prompt
if command -v tmux > /dev/null 2>&1; then
    T="tmux -L coldev$$ -f /dev/null"
    $T new-session -d -s chat -x 160 -y 20 "'$cg' '$fx' --temperature 0 --max-new-tokens 4; sleep 1"
    i=0
    while [ $i -lt 50 ] && ! $T capture-pane -p -t chat 2>/dev/null | grep -q '^> *$'; do sleep 0.1; i=$((i + 1)); done
    $T capture-pane -p -t chat > "$tmp/screen" 2>/dev/null
    $T send-keys -t chat C-d
    sleep 0.3
    $T kill-server 2>/dev/null
    if grep -q "^cuda:0: Fake GPU: CPU kernels on fake device memory, 768\.0 MiB$" "$tmp/screen" &&
        grep -q "^compute tier 232\.0 MiB: the 768\.0 MiB free on cuda:0 less 536\.0 MiB kept back (--gpu-mem sets it)$" "$tmp/screen"; then
        ok "an interactive chat starts by naming the device and its compute tier"
    else
        notok "interactive start lines:"; sed 's/^/# /' "$tmp/screen" | head -5
    fi
else
    n=$((n + 1)); echo "ok $n # SKIP tmux not installed"
fi

echo "1..$n"
[ "$fails" -eq 0 ]
