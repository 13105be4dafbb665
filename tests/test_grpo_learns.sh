#!/bin/sh
# test_grpo_learns.sh - GRPO with a verifiable reward raises exact-match accuracy on a small arithmetic task (TAP).
# A tiny byte-level GPT-2 (tests/fixtures/chat_model/base, 2 blocks of width 32) is first fine-tuned briefly on
# "a+b=c" lines (a, b in 0..4), which teaches the format and a few sums; then --method grpo --reward exact trains it
# on the 25 prompts with their gt_answer. The greedy answers of all 25 prompts are counted before and after, by
# colossal-chat. Fixed seeds; the thresholds are loose (measured: 4/25 before, 13/25 and 21/25 after 150 rollouts
# with seeds 1 and 2).
ft=${FINETUNE:-./apps/colossal-finetune}
chat=${CHAT:-$(dirname "$ft")/colossal-chat}
src=$(cd "${SRCDIR:-.}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

# the supervised lines (a fixed pseudo-random order) and the prompts
awk 'BEGIN { s = 7; for (i = 0; i < 3000; i++) { s = (s * 1103515245 + 12345) % 2147483648; a = int(s / 65536) % 5;
             s = (s * 1103515245 + 12345) % 2147483648; b = int(s / 65536) % 5; printf "%d+%d=%d\n", a, b, a + b } }' \
    > "$tmp/sums.txt"
: > "$tmp/prompts.jsonl"
for a in 0 1 2 3 4; do
    for b in 0 1 2 3 4; do
        printf '{"prompt":"%d+%d=","gt_answer":"%d"}\n' $a $b $((a + b)) >> "$tmp/prompts.jsonl"
    done
done

# greedy answers right out of 25
correct() {
    c=0
    for a in 0 1 2 3 4; do
        for b in 0 1 2 3 4; do
            o=$("$chat" "$1" --prompt "$a+$b=" --max-new-tokens 1 --temperature 0 2>/dev/null | head -c 1)
            [ "$o" = "$((a + b))" ] && c=$((c + 1))
        done
    done
    echo $c
}

if "$ft" "$src/tests/fixtures/chat_model/base" "$tmp/sums.txt" --steps 200 --batch 8 --seq 32 --lr 3e-3 --warmup 5 \
    --seed 1337 --val-percent 0 --out "$tmp/sft" --quiet 2> "$tmp/err"; then
    ok "supervised start (200 steps)"
else
    notok "supervised start failed: $(head -n 1 "$tmp/err")"
fi
before=$(correct "$tmp/sft")
if "$ft" "$tmp/sft" "$tmp/prompts.jsonl" --method grpo --reward exact --rollout-batch 25 --num-generations 8 \
    --max-new-tokens 2 --steps 150 --seq 16 --lr 1e-3 --warmup 2 --beta 0.04 --schedule constant --seed 1 \
    --out "$tmp/grpo" --json > "$tmp/grpo.json" 2> "$tmp/err"; then
    ok "grpo ran 150 rollouts of 25 prompts x 8 completions"
else
    notok "grpo failed: $(head -n 1 "$tmp/err")"
fi
after=$(correct "$tmp/grpo")
if [ "$after" -ge $((before + 5)) ] && [ "$after" -ge 9 ]; then
    ok "grpo raised the greedy exact-match accuracy from $before/25 to $after/25"
else
    notok "grpo: greedy exact-match accuracy $before/25 -> $after/25"
fi
first=$(grep '"method":"grpo"' "$tmp/grpo.json" | head -n 10 | sed 's/.*"reward_mean":\([-0-9.e]*\).*/\1/' |
        awk '{ s += $1 } END { printf "%.3f", s / NR }')
last=$(grep '"method":"grpo"' "$tmp/grpo.json" | tail -n 10 | sed 's/.*"reward_mean":\([-0-9.e]*\).*/\1/' |
       awk '{ s += $1 } END { printf "%.3f", s / NR }')
awk "BEGIN { exit !($last > $first) }" && ok "the sampled reward rose: mean $first over the first 10 rollouts, $last over the last 10" ||
    notok "the sampled reward did not rise ($first -> $last)"

echo "1..$n"
[ "$fails" -eq 0 ]
