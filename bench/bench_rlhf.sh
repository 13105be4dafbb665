#!/bin/sh
# bench_rlhf.sh - PPO with four GPT-2 124M-sized models (policy, frozen reference, reward model, critic) on this
# machine: the step split (generation vs training, tokens/s of each) against colossal-chat's decoding and a
# supervised step on the same rows, and the smallest --cpu-mem (with --nvme-dir) that runs the four models,
# against the sum of their sizes. Random weights (the gpt2 architecture trained one step from scratch): speed and
# memory do not depend on the values. Prints a block for docs/PERF.md.
#   bench/bench_rlhf.sh [BUILD_DIR]      (default: the current directory)
set -e
b=$(cd "${1:-.}" && pwd)
ft=$b/apps/colossal-finetune
chat=$b/apps/colossal-chat
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}/bench_rlhf.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
corpus=$src/assets/corpus/kjv.txt.gz
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }

echo "# machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(date -u +%F)"
# the models: gpt2 (124M) from scratch for one step, then a reward model made from it
"$ft" gpt2 "$corpus" --steps 1 --batch 1 --seq 64 --out "$tmp/gpt2" --quiet
i=0
: > "$tmp/pairs.jsonl"
: > "$tmp/prompts.jsonl"
while [ $i -lt 16 ]; do
    printf '{"prompt":"Question %d: what did the servant say to the king about the harvest?","chosen":" He said it was good.","rejected":" Nothing."}\n' $i >> "$tmp/pairs.jsonl"
    printf '{"prompt":"Question %d: what did the servant say to the king about the harvest of the year?"}\n' $i >> "$tmp/prompts.jsonl"
    i=$((i + 1))
done
"$ft" "$tmp/gpt2" "$tmp/pairs.jsonl" --method rm --steps 1 --batch 2 --seq 64 --val-percent 0 --out "$tmp/rm" --quiet

if [ -z "$MEM_ONLY" ]; then
# PPO: 4 prompts x 1 completion of 32 new tokens, rows of 64 tokens, one update per rollout
"$ft" "$tmp/gpt2" "$tmp/prompts.jsonl" --method ppo --reward-model "$tmp/rm" --rollout-batch 4 --max-new-tokens 32 \
    --seq 64 --steps 5 --ppo-epochs 1 --json --out "$tmp/ppo" > "$tmp/ppo.json"
grep '"method":"ppo"' "$tmp/ppo.json" | tail -n 4 > "$tmp/steps.json"
gen_s=$(field gen_s < "$tmp/steps.json" | median)
gen_tps=$(field gen_tok_per_s < "$tmp/steps.json" | median)
train_s=$(field train_s < "$tmp/steps.json" | median)
len=$(field response_length < "$tmp/steps.json" | median)
# the rows trained: 4 x (prompt + completion) tokens
ptok=$(printf 'Question 1: what did the servant say to the king about the harvest of the year?' |
       "$b/apps/colossal-tokenize" --no-special "$tmp/gpt2" | tr ',' '\n' | grep -c '[0-9]')
train_tps=$(awk "BEGIN { printf \"%.0f\", 4 * ($ptok + $len) / $train_s }")

# colossal-chat's decoding of the same model: 128 new tokens minus 1, median of 3
dec() {
    s=$(date +%s.%N)
    "$chat" "$tmp/gpt2" --prompt "Question 1: what did the servant say" --max-new-tokens "$1" --temperature 0 > /dev/null 2>&1
    e=$(date +%s.%N)
    awk "BEGIN { print $e - $s }"
}
for k in 1 2 3; do
    t128=$(dec 128)
    t1=$(dec 1)
    awk "BEGIN { print 127 / ($t128 - $t1) }"
done > "$tmp/dec"
chat_tps=$(median < "$tmp/dec")

# a supervised step on rows of the same shape (4 x 64)
"$ft" "$tmp/gpt2" "$corpus" --steps 5 --batch 4 --seq 64 --json --out "$tmp/sft" --val-percent 0 > "$tmp/sft.json"
sft_tps=$(grep '"tok_per_s"' "$tmp/sft.json" | tail -n 4 | field tok_per_s | median)

echo "ppo step (4 prompts x 32 new tokens, rows of 64, 1 update): generation ${gen_s}s (${gen_tps} tok/s), training ${train_s}s (${train_tps} tok/s)"
echo "colossal-chat greedy decoding: ${chat_tps} tok/s; generation/chat ratio $(awk "BEGIN { printf \"%.2f\", $gen_tps / $chat_tps }")"
echo "sft step on 4 x 64: ${sft_tps} tok/s; ppo training/sft ratio $(awk "BEGIN { printf \"%.2f\", $train_tps / $sft_tps }")"

fi

# memory: four models of 124M parameters; the policy and the critic also hold gradients and AdamW states
params=124439808
echo "sum of the four models' weights (f32): $(awk "BEGIN { printf \"%.0f\", 4 * $params * 4 / 2^20 }") MiB; with the two trained models' gradients and AdamW states: $(awk "BEGIN { printf \"%.0f\", (4 * $params * 4 + 2 * $params * 12) / 2^20 }") MiB"
# every budget applies to each of the four models' sessions (each has its own memtier pool and compute tier)
ppo_mem() {
    mkdir -p "$tmp/nvme"
    if /usr/bin/time -f "%M" -o "$tmp/rss" "$ft" "$tmp/gpt2" "$tmp/prompts.jsonl" --method ppo --reward-model "$tmp/rm" \
        --rollout-batch 2 --max-new-tokens 8 --seq 64 --steps 1 --ppo-epochs 1 "$@" --out "$tmp/ppo_mem" --quiet \
        2> "$tmp/err"; then
        echo "$*: runs, peak resident $(awk '{ printf "%.0f", $1 / 1024 }' "$tmp/rss") MiB"
    else
        echo "$*: refused: $(head -n 1 "$tmp/err")"
    fi
    rm -rf "$tmp/ppo_mem" "$tmp/nvme"
}
ppo_mem
for mem in 1G 512M 256M 128M 64M; do
    ppo_mem --cpu-mem $mem --gpu-mem 640M --nvme-dir "$tmp/nvme"
done
