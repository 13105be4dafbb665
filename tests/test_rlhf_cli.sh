#!/bin/sh
# test_rlhf_cli.sh - colossal-finetune --method rm|dpo|simpo|orpo|kto|ppo|grpo end to end (TAP): every method runs
# and writes a model; a reward model is saved as transformers' *ForSequenceClassification and scores pairs; DPO
# raises the chosen-vs-rejected margin on held-out pairs; LoRA's reference is the base model; every bad input gets
# one clear line and a non-zero exit.
ft=${FINETUNE:-./apps/colossal-finetune}
src=$(cd "${SRCDIR:-.}" && pwd)
fx=$src/tests/fixtures/rlhf_step
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# check NAME WANT_RC PATTERN -- ARGS...: runs colossal-finetune in $tmp, compares exit code and output
check() {
    name=$1 want=$2 pattern=$3
    shift 4
    (cd "$tmp" && "$ft" "$@") > "$tmp/out" 2> "$tmp/err"
    rc=$?
    if [ "$rc" -eq "$want" ] && { [ -z "$pattern" ] || grep -q -- "$pattern" "$tmp/err" "$tmp/out"; }; then
        ok "$name (exit $rc: $(head -n 1 "$tmp/err"))"
    else
        notok "$name: exit $rc, wanted $want and '$pattern'"
        sed 's/^/# /' "$tmp/err" | head -5
    fi
}
# the value of "key": in the last line of FILE that has it
jget() { grep "\"$2\"" "$1" | tail -n 1 | sed "s/.*\"$2\":\([-0-9.e+]*\).*/\1/"; }

pol=$fx/policy
common="--seq 32 --val-percent 0 --quiet"

# ---- every method runs from the command line and writes a model ----
for m in rm dpo simpo orpo; do
    check "--method $m trains" 0 "" -- "$pol" "$fx/pairs.jsonl" --method $m --steps 3 --batch 2 $common --out $m
    [ -s "$tmp/$m/model.safetensors" ] && [ -s "$tmp/$m/config.json" ] && ok "$m: the model is written" ||
        notok "$m: no model written"
done
check "--method kto trains" 0 "" -- "$pol" "$fx/kto.jsonl" --method kto --steps 3 --batch 2 $common --out kto
grep -q '"GPT2ForSequenceClassification"' "$tmp/rm/config.json" && grep -q '"LABEL_0"' "$tmp/rm/config.json" &&
    ok "rm: saved as GPT2ForSequenceClassification with one label" || notok "rm: config.json is not a classifier's"
check "grpo with an exact-answer reward" 0 "" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo --reward exact \
    --rollout-batch 2 --num-generations 2 --max-new-tokens 4 --steps 2 $common --out grpo
check "grpo with a regex reward" 0 "" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo --reward 'regex:([0-9]+)' \
    --rollout-batch 2 --num-generations 2 --max-new-tokens 4 --steps 2 $common --out grpo2
check "ppo with the reward model (and a critic made from it)" 0 "" -- "$pol" "$fx/grpo_prompts.jsonl" --method ppo \
    --reward-model rm --rollout-batch 2 --max-new-tokens 4 --steps 2 --ppo-epochs 2 $common --out ppo --json
(cd "$tmp" && "$ft" "$pol" "$fx/grpo_prompts.jsonl" --method ppo --reward-model rm --rollout-batch 2 \
    --max-new-tokens 4 --steps 2 --ppo-epochs 2 --seq 32 --val-percent 0 --out ppo2 --json) > "$tmp/ppo.json" 2>&1
for k in reward_mean reward_std kl clip_fraction value_loss entropy response_length gen_tok_per_s; do
    v=$(jget "$tmp/ppo.json" $k)
    [ -n "$v" ] && ok "ppo --json reports $k ($v)" || notok "ppo --json lacks $k"
done
steps=$(grep -c '"method":"ppo"' "$tmp/ppo.json")
[ "$steps" = 2 ] && ok "ppo: --steps counts rollouts (2 rollouts of 2 updates)" || notok "ppo: $steps rollouts, wanted 2"

# ---- the reward model scores pairs; its scores are those it was trained to give ----
check "rm --eval-only prints every pair's rewards" 0 "line 4: chosen" -- rm "$fx/pairs.jsonl" --method rm \
    --eval-only --batch 2 --seq 32
grep -c '^line [0-9]*: chosen' "$tmp/out" | grep -q '^4$' && ok "four pairs scored" || notok "not four pairs scored"

# ---- DPO learns: the held-out margin goes from 0 to clearly positive ----
i=0
: > "$tmp/pref.jsonl"
while [ $i -lt 40 ]; do
    printf '{"prompt":"Q%d: is %d a number?","chosen":" yes","rejected":" no"}\n' $i $((i * 7)) >> "$tmp/pref.jsonl"
    i=$((i + 1))
done
tail -n 8 "$tmp/pref.jsonl" > "$tmp/heldout.jsonl"
check "dpo before training: margin 0 (the policy is its reference)" 0 "margin 0.0000" -- "$pol" "$tmp/heldout.jsonl" \
    --method dpo --eval-only --batch 4 --seq 32
check "dpo trains on 32 pairs, 8 held out" 0 "" -- "$pol" "$tmp/pref.jsonl" --method dpo --steps 30 --batch 4 \
    --seq 32 --val-percent 20 --lr 3e-3 --warmup 2 --eval-every 10 --eval-batches 2 --out dpo_learn --json
m1=$(grep '"val_margin"' "$tmp/out" | head -n 1 | sed 's/.*"val_margin":\([-0-9.e+]*\).*/\1/')
check "dpo after training, on the held-out pairs" 0 "pairs: loss" -- dpo_learn "$tmp/heldout.jsonl" --method dpo \
    --eval-only --batch 4 --seq 32 --ref-model "$pol"
m2=$(sed -n 's/.*margin \([-0-9.]*\) .*/\1/p' "$tmp/out")
acc=$(sed -n 's/.*accuracy \([0-9.]*\).*/\1/p' "$tmp/out")
if [ -n "$m2" ] && awk "BEGIN { exit !($m2 > 0.5 && $acc >= 0.99) }"; then
    ok "dpo raised the held-out margin to $m2 (accuracy $acc; $m1 at step 10)"
else
    notok "dpo: held-out margin $m2, accuracy $acc"
fi

# ---- LoRA: the reference is the base model with the adapters off ----
check "dpo with LoRA, no --ref-model" 0 '"step":1' -- "$pol" "$tmp/pref.jsonl" --method dpo --lora-rank 4 \
    --steps 2 --batch 4 --seq 32 --val-percent 0 --out lora --json
l1=$(grep '"method":"dpo"' "$tmp/out" | head -n 1 | sed 's/.*"loss":\([-0-9.e+]*\).*/\1/')
awk "BEGIN { exit !($l1 > 0.693147 - 1e-6 && $l1 < 0.693148) }" &&
    ok "LoRA dpo step 1: loss ln 2 ($l1): adapters start at zero, so the policy is its base" ||
    notok "LoRA dpo step 1 loss $l1, wanted ln 2"
[ -s "$tmp/lora/adapter_model.safetensors" ] && ok "LoRA dpo writes the adapter" || notok "LoRA dpo: no adapter"

# ---- bad input: one line, non-zero exit ----
printf '{"prompt":"a","chosen":"b","rejected":"c"}\n{"prompt":"a","chosen":"b"}\n' > "$tmp/bad1.jsonl"
check "a pair without rejected: file and line" 1 "bad1.jsonl:2:" -- "$pol" "$tmp/bad1.jsonl" --method dpo --out x
printf 'not json\n' > "$tmp/bad2.jsonl"
check "a line that is not JSON" 1 "bad2.jsonl:1:" -- "$pol" "$tmp/bad2.jsonl" --method dpo --out x
printf '{"prompt":"a","completion":"b","label":"yes"}\n' > "$tmp/bad3.jsonl"
check "kto: a label that is not a bool" 1 "bad3.jsonl:1:" -- "$pol" "$tmp/bad3.jsonl" --method kto --out x
printf '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}\n' > "$tmp/bad4.jsonl"
check "prompts must end with a user turn" 1 "user turn" -- "$pol" "$tmp/bad4.jsonl" --method grpo --reward exact \
    --rollout-batch 1 --num-generations 2 --out x
: > "$tmp/empty.jsonl"
check "empty data" 1 "empty.jsonl" -- "$pol" "$tmp/empty.jsonl" --method dpo --out x
check "an unknown method" 2 "must be sft, rm, dpo" -- "$pol" "$fx/pairs.jsonl" --method rlhf --out x
check "an option of another method" 2 "does not apply to --method dpo" -- "$pol" "$fx/pairs.jsonl" --method dpo \
    --gamma 1 --out x
check "grpo without a reward" 2 "needs --reward" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo --out x
check "grpo with a group of one" 2 "at least 2" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo --reward exact \
    --num-generations 1 --out x
check "ppo without a reward model" 2 "needs --reward-model" -- "$pol" "$fx/grpo_prompts.jsonl" --method ppo --out x
check "--no-ref with --ref-model" 2 "contradict" -- "$pol" "$fx/pairs.jsonl" --method dpo --no-ref --ref-model "$pol" \
    --out x
check "an RLHF method needs MODEL and DATA" 2 "needs MODEL and DATA" -- --method dpo
check "a reward model with LoRA" 2 "without --lora-rank" -- "$pol" "$fx/pairs.jsonl" --method rm --lora-rank 4 --out x
check "a bad reward pattern" 1 "not a regular expression" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo \
    --reward 'regex:(' --rollout-batch 2 --num-generations 2 --seq 32 --out x
check "a language model as --reward-model" 1 "not a reward model" -- "$pol" "$fx/grpo_prompts.jsonl" --method ppo \
    --reward-model "$pol" --rollout-batch 2 --seq 32 --out x
check "a reward model as MODEL of another method" 1 "is a reward model" -- rm "$fx/pairs.jsonl" --method dpo --out x
check "a reward model as MODEL of sft" 1 "is a reward model" -- rm "$fx/pairs.jsonl" --out x
check "more pairs per step than the data has" 1 "a step takes 8" -- "$pol" "$fx/pairs.jsonl" --method dpo --batch 8 \
    --val-percent 0 --out x
check "a prompt with no room for new tokens" 1 "do not fit rows" -- "$pol" "$fx/grpo_prompts.jsonl" --method grpo \
    --reward exact --rollout-batch 2 --num-generations 2 --max-new-tokens 40 --seq 32 --out x
check "--resume of an RLHF run" 1 "resuming RLHF runs is not supported" -- --resume dpo
check "a missing --ref-model" 1 "ref-model" -- "$pol" "$fx/pairs.jsonl" --method dpo --ref-model "$tmp/nothere" \
    --batch 2 --seq 32 --out x
[ ! -e "$tmp/x" ] && ok "no output directory left by the failed runs" || notok "a failed run left $tmp/x"

echo "1..$n"
[ "$fails" -eq 0 ]
