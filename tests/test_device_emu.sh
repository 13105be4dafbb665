#!/bin/sh
# test_device_emu.sh - colossal-finetune and colossal-chat with --device cuda end to end through the CUDA
# backend's own code: test builds of the apps whose GPU glue is the real one (apps/device_cuda.c) linked
# against the CUDA emulator (libengine_cuda_emu.a: the backend's .cu kernels compiled for the CPU, the
# CUDA runtime and cuBLASLt emulated; libcore/engine/cuda/emu/README.md). This checks the apps' GPU path
# and the kernels' logic on any machine, not CUDA itself: tools/gpu-check does that on a GPU.
#   - fp32 on the emulated GPU against the CPU: losses within 1e-4 relative at every step
#   - the default precision there is bf16: within 2e-2 of the CPU's fp32
#   - a compute tier too small for the parameters and gradients: the same losses, bit for bit
#   - colossal-chat: transformers' greedy ids on the tiny HF fixtures
# (TAP output)
ft=${FINETUNE:-$PWD/apps/colossal-finetune}
fe=${FINETUNE_EMU:-$PWD/tests/finetune_emu}
ce=${CHAT_EMU:-$(dirname "$fe")/chat_emu}
src=$(cd "${SRCDIR:-.}" && pwd)
hf="$src/tests/fixtures/hf"
if [ ! -x "$fe" ] || [ ! -x "$ce" ]; then
    echo "1..0 # SKIP the apps built against the CUDA emulator are missing (configure found no CUDA headers)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; }
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | cut -d: -f2; }
# close A B TOL: every loss of B within TOL (relative) of A's, as many of each; prints the largest difference
close() {
    [ "$(losses "$1" | wc -l)" -gt 0 ] && [ "$(losses "$1" | wc -l)" -eq "$(losses "$2" | wc -l)" ] || return 1
    losses "$1" > "$tmp/a"
    losses "$2" > "$tmp/b"
    paste "$tmp/a" "$tmp/b" | awk -v tol="$3" '
        { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r; if (r > tol) bad++ }
        END { printf "%.2g", m; exit bad > 0 }'
}

awk 'BEGIN { srand(5); for (i = 0; i < 3000; i++) printf "line %d of the %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > "$tmp/corpus.txt"
run="gpt2-tiny corpus.txt --steps 8 --batch 4 --seq 32 --dropout 0 --no-shuffle --eval-every 100 --eval-batches 1 --json"

(cd "$tmp" && "$ft" $run --out cpu --device cpu) > "$tmp/cpu.json" 2> "$tmp/cpu.err"
(cd "$tmp" && "$fe" gpt2-tiny corpus.txt --steps 1 --batch 2 --seq 16 --out first) > "$tmp/first.txt" 2>&1
grep -q "^cuda:0: CUDA emulator on the host CPU" "$tmp/first.txt" && grep -q "^compute tier .* free on cuda:0" "$tmp/first.txt" &&
    ok "the default device is the (emulated) GPU, with a compute tier from its free memory" ||
    notok "default device: $(head -n 4 "$tmp/first.txt" | tr '\n' '|')"
(cd "$tmp" && "$fe" $run --out emu --precision fp32) > "$tmp/emu.json" 2> "$tmp/emu.err"
if d=$(close "$tmp/cpu.json" "$tmp/emu.json" 1e-4); then
    ok "--device cuda --precision fp32 through the emulated kernels: the CPU's losses within $d (relative; 1e-4)"
else
    notok "fp32 on the emulated GPU against the CPU ($d): $(head -n 2 "$tmp/emu.err") $(head -n 2 "$tmp/cpu.err")"
fi
[ -f "$tmp/emu/model.safetensors" ] && [ -f "$tmp/emu/config.json" ] &&
    ok "the emulated GPU run wrote its model directory" || notok "no model from the emulated GPU run"

(cd "$tmp" && "$fe" $run --out emu16) > "$tmp/emu16.json" 2> "$tmp/emu16.err"
if d=$(close "$tmp/cpu.json" "$tmp/emu16.json" 2e-2) &&
    tr -d ' \n' < "$tmp/emu16/trainer_state.json" | grep -q '\["precision","bf16"\]'; then
    ok "no --precision on the GPU: bf16, within $d of the CPU's fp32 losses (2e-2)"
else
    notok "bf16 on the emulated GPU ($d): $(head -n 2 "$tmp/emu16.err")"
fi

# a compute tier below the parameters and gradients: chunks move op by op, the results do not change
(cd "$tmp" && "$fe" $run --out e1 --precision fp32 --chunk-size 16K --gpu-mem 8K) > /dev/null 2> "$tmp/e1.err"
least=$(sed -n 's/.*needs at least \([0-9]*\) bytes.*(--gpu-mem)$/\1/p' "$tmp/e1.err")
(cd "$tmp" && "$fe" $run --out small --precision fp32 --chunk-size 16K --gpu-mem "$least") > "$tmp/small.json" 2> "$tmp/small.err"
if [ -n "$least" ] && [ "$(losses "$tmp/small.json")" = "$(losses "$tmp/emu.json")" ] &&
    [ "$(losses "$tmp/small.json" | wc -l)" -eq 8 ]; then
    ok "through the smallest compute tier ($least bytes) on the emulated GPU: the same losses bit for bit"
else
    notok "smallest compute tier ('$least'): $(head -n 2 "$tmp/e1.err") $(head -n 2 "$tmp/small.err")"
fi

# ---- colossal-chat: transformers' greedy ids (tests/fixtures/hf/*_ref.safetensors, as test_chat_cli.sh) ----
check_greedy() { # MODEL PROMPT WANT
    k=$(echo "$3" | tr ',' '\n' | wc -l)
    got=$("$ce" "$hf/$1" --prompt-ids "$2" --temperature 0 --max-new-tokens "$k" --json 2> "$tmp/chat.err")
    if [ "$got" = "{\"ids\":[$3]}" ]; then
        ok "colossal-chat --device cuda (emulated) on $1: transformers' greedy ids"
    else
        notok "chat on $1: got '$got', wanted [$3]: $(head -n 2 "$tmp/chat.err")"
    fi
}
check_greedy gpt2 77,66,52,52,78,68 22,74,87,58,4,80,58,58,24,27
check_greedy llama3 63,11,32,83,37,55 35,35,31,35,31,35,31,78,78,78
echo "1..$n"
