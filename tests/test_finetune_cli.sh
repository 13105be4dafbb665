#!/bin/sh
# test_finetune_cli.sh - colossal-finetune end to end: training writes a
# complete Hugging Face directory, kill -9 and Ctrl-C followed by --resume
# give exactly the losses of a run that never stopped, and every bad input
# gets one clear line and a non-zero exit (TAP output).
ft=${FINETUNE:-./apps/colossal-finetune}
src=$(cd "${SRCDIR:-.}" && pwd)
tmp=$(mktemp -d)
trap 'kill -9 $bg 2>/dev/null; tmux -L colft$$ kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
bg=
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
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$tmp/err" "$tmp/out"; then
        ok "$name (exit $rc: $(head -n 1 "$tmp/err"))"
    else
        notok "$name: exit $rc, wanted $want and '$pattern'"
        sed 's/^/# /' "$tmp/err" | head -5
    fi
}
# the per-step JSON lines without the timing fields
losses() { grep '"loss"' "$1" | sed 's/,"tok_per_s".*//'; }
# step number in DIR/trainer_state.json (0 if none)
saved_step() { sed -n 's/.*"step":[[:space:]]*"\([0-9]*\)".*/\1/p' "$1/trainer_state.json" 2>/dev/null | head -n 1; }

# a small fast configuration of the embedded default's architecture
small="--steps 40 --batch 4 --seq 32 --eval-every 20 --eval-batches 2 --warmup 4 --lr 3e-3"

# ---- the embedded default, shortened: it learns and writes a complete output ----
check "embedded default runs (shortened)" 0 "the model is in colossal-default" -- $small
for f in config.json model.safetensors optimizer.safetensors tokenizer.json tokenizer_config.json trainer_state.json; do
    [ -s "$tmp/colossal-default/$f" ] && ok "output has $f" || notok "output lacks $f"
done
first=$(grep -m1 '^step 1/' "$tmp/out" | sed 's/.*loss \([0-9.]*\).*/\1/')
last=$(grep '^step 40/' "$tmp/out" | sed 's/.*loss \([0-9.]*\).*/\1/')
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($last < $first - 1.0) }"; then
    ok "the loss falls by more than 1 nat in 40 steps ($first -> $last)"
else
    notok "the loss did not fall enough ($first -> $last)"
fi
grep -q "validation loss" "$tmp/out" && ok "evaluation runs" || notok "no evaluation line"
if nvidia-smi -L > /dev/null 2>&1; then
    n=$((n + 1)); echo "ok $n # SKIP the default device is the CPU: this machine has a GPU"
else
    grep -q "^cpu: [0-9]* threads, OpenBLAS [A-Za-z0-9]*; training to 40 steps into colossal-default/$" "$tmp/out" &&
        ok "without a GPU the default device is the CPU, said at the start: $(grep '^cpu: ' "$tmp/out")" ||
        notok "no 'cpu: ...' start line"
fi
[ ! -e "$tmp/colossal-default.partial" ] && ok "no staging directory left behind" || notok "staging directory left"
# colossal-chat loads the result: its greedy text equals the greedy sample the training run printed
chat=${CHAT:-$(dirname "$ft")/colossal-chat}
check "a greedy sample at the end" 0 '"sample"' -- --steps 10 --batch 4 --seq 32 --out greedy \
    --sample-every 10 --sample-temperature 0 --sample-len 40 --sample-prompt "And God said" --json
want=$(grep '"sample"' "$tmp/out" | tail -n 1 | sed 's/.*"sample":"\(.*\)"}$/\1/')
got=$(cd "$tmp" && "$chat" greedy --prompt "And God said" --raw --temperature 0 --max-new-tokens 40 2>/dev/null)
if [ -n "$want" ] && [ "$(printf '%s' "And God said$got" | head -c ${#want})" = "$want" ]; then
    ok "colossal-chat on the output continues exactly as the trained model did: '$want'"
else
    notok "chat on the output: '$got' vs sample '$want'"
fi
check "a second default run that would train less keeps the first" 1 "holds a run trained further (40 steps)" -- \
    --steps 2 --batch 2 --seq 16
check "a second default run replaces the first with --overwrite" 0 "the model is in colossal-default" -- --steps 2 \
    --batch 2 --seq 16 --overwrite

# ---- kill -9 in the middle, resume: the same losses as the uninterrupted run ----
run="gpt2-tiny $tmp/corpus.txt --steps 150 --batch 4 --seq 32 --save-every 3 --dropout 0.1 --json --lr 3e-3"
awk 'BEGIN { srand(3); for (i = 0; i < 4000; i++) printf "line %d of the %s corpus\n", i, (rand() < 0.5 ? "small" : "test") }' > "$tmp/corpus.txt"
(cd "$tmp" && "$ft" $run --out ref) > "$tmp/ref.json" 2> "$tmp/err"
[ "$(losses "$tmp/ref.json" | wc -l)" -eq 150 ] && ok "reference run: 150 steps" || notok "reference run failed: $(head -n 2 "$tmp/err")"

(cd "$tmp" && exec "$ft" $run --out killed) > "$tmp/killed.json" 2> /dev/null &
bg=$!
tries=0
noted=
while [ "$(saved_step "$tmp/killed")" = "" ] || [ "$(saved_step "$tmp/killed")" -lt 20 ]; do
    # the user's own file, put into the run directory between two saves: it must survive them all
    [ -z "$noted" ] && noted=$(saved_step "$tmp/killed") && [ -n "$noted" ] &&
        echo "my notes on run $noted" > "$tmp/killed/notes.txt"
    tries=$((tries + 1))
    [ $tries -gt 3000 ] && break
    kill -0 $bg 2>/dev/null || break
    sleep 0.01
done
kill -9 $bg 2>/dev/null
wait $bg 2>/dev/null
k=$(saved_step "$tmp/killed")
if [ -n "$k" ] && [ "$k" -lt 150 ]; then
    ok "killed with -9 after the save of step $k"
else
    notok "the run was not killed mid-way (saved step '$k')"
fi
[ -n "$noted" ] && [ "$(cat "$tmp/killed/notes.txt" 2>/dev/null)" = "my notes on run $noted" ] &&
    ok "a file of the user's put in at step $noted survives the saves up to step $k and kill -9" ||
    notok "the user's notes.txt (put in at step '$noted') did not survive the saves: $(ls -A "$tmp/killed" | tr '\n' ' ')"
cp -r "$tmp/killed" "$tmp/killed_copy"
check "resume after kill -9 (on --device cpu: a runtime option)" 0 "" -- --resume killed --json --device cpu
losses "$tmp/out" > "$tmp/resumed.txt"
losses "$tmp/ref.json" | sed -n "$((k + 1)),\$p" > "$tmp/ref_tail.txt"
if [ -s "$tmp/resumed.txt" ] && cmp -s "$tmp/resumed.txt" "$tmp/ref_tail.txt"; then
    ok "steps $((k + 1))..150 after kill -9 + resume are bit-identical to the uninterrupted run"
else
    notok "resumed losses differ from the uninterrupted run"
    diff "$tmp/resumed.txt" "$tmp/ref_tail.txt" | head -4 | sed 's/^/# /'
fi
cmp -s "$tmp/killed/model.safetensors" "$tmp/ref/model.safetensors" && ok "final weights are byte-identical" ||
    notok "final weights differ"
[ "$(cat "$tmp/killed/notes.txt" 2>/dev/null)" = "my notes on run $noted" ] &&
    ok "the user's notes.txt survives the resumed run's saves too" || notok "notes.txt lost on --resume"

# ---- a compute tier too small for the model: chunks move around every op, the math does not change ----
mkdir -p "$tmp/nvme"
(cd "$tmp" && "$ft" $run --out nvme_run --save-every 50 --chunk-size 16K --nvme-dir "$tmp/nvme") > "$tmp/nvme.json" 2> "$tmp/err"
if [ "$(losses "$tmp/nvme.json" | wc -l)" -eq 150 ] && [ "$(losses "$tmp/nvme.json")" = "$(losses "$tmp/ref.json")" ] &&
    [ -z "$(ls -A "$tmp/nvme")" ]; then
    ok "optimizer states on the NVMe tier (saved every 50 steps): the same losses bit for bit, nothing left in --nvme-dir"
else
    notok "the NVMe run differs: $(head -n 1 "$tmp/err")"
fi
# a library error says what is wrong in the library's words; the line names the option that sets it
check "a missing --nvme-dir" 1 "does not exist; create it or choose another NVMe directory (--nvme-dir)$" -- $run \
    --out e12 --nvme-dir "$tmp/no/such/dir"
check "an --nvme-dir that is a file" 1 "is not a directory; choose another NVMe directory (--nvme-dir)$" -- $run \
    --out e17 --nvme-dir "$tmp/corpus.txt"
check "an --nvme-max below what the states need" 1 "size limit of 16.0 KiB is too small: .* at least .* there (--nvme-max)$" \
    -- $run --out e18 --chunk-size 16K --nvme-dir "$tmp/nvme" --nvme-max 16K
check "a compute tier below the smallest the model needs" 1 "needs at least [0-9]* bytes .* (--gpu-mem)$" -- $run \
    --out e11 --chunk-size 16K --gpu-mem 8K
least=$(sed -n 's/.*needs at least \([0-9]*\) bytes.*/\1/p' "$tmp/err")
(cd "$tmp" && "$ft" $run --out tiered --save-every 0 --chunk-size 16K --gpu-mem "$least") > "$tmp/tiered.json" 2> "$tmp/err"
if [ -n "$least" ] && [ "$(losses "$tmp/tiered.json" | wc -l)" -eq 150 ] &&
    [ "$(losses "$tmp/tiered.json")" = "$(losses "$tmp/ref.json")" ]; then
    ok "150 steps through the smallest compute tier ($least bytes) give the unconstrained run's losses bit for bit"
else
    notok "the tiered run differs: $(head -n 1 "$tmp/err")"
fi
# all three tiers at once: the smallest compute tier, parameters and gradients on the host, states on NVMe
(cd "$tmp" && "$ft" $run --out three --save-every 0 --chunk-size 16K --gpu-mem "$least" --nvme-dir "$tmp/nvme") \
    > "$tmp/three.json" 2> "$tmp/err"
if [ -n "$least" ] && [ "$(losses "$tmp/three.json" | wc -l)" -eq 150 ] &&
    [ "$(losses "$tmp/three.json")" = "$(losses "$tmp/ref.json")" ]; then
    ok "compute, host and NVMe tiers together: the unconstrained run's losses bit for bit"
else
    notok "the three-tier run differs: $(head -n 1 "$tmp/err")"
fi

# everything on NVMe (parameters, gradients, states), reached through the smallest compute tier that holds its chunks
check "everything on NVMe: a compute tier too small for its chunks" 1 "needs at least .* (--gpu-mem)$" -- $run --out e13 \
    --chunk-size 16K --gpu-mem 8K --nvme-dir "$tmp/nvme" --nvme-kinds all
least_nv=$(sed -n 's/.*needs at least \([0-9]*\) bytes.*/\1/p' "$tmp/err")
(cd "$tmp" && "$ft" $run --out allnv --save-every 60 --chunk-size 16K --gpu-mem "$least_nv" --nvme-dir "$tmp/nvme" \
    --nvme-kinds all) > "$tmp/allnv.json" 2> "$tmp/err"
if [ -n "$least_nv" ] && [ "$(losses "$tmp/allnv.json" | wc -l)" -eq 150 ] &&
    [ "$(losses "$tmp/allnv.json")" = "$(losses "$tmp/ref.json")" ] && [ -z "$(ls -A "$tmp/nvme")" ] &&
    cmp -s "$tmp/allnv/model.safetensors" "$tmp/ref/model.safetensors"; then
    ok "parameters, gradients and states on NVMe: the same losses and final weights bit for bit, nothing left behind"
else
    notok "the all-NVMe run differs: $(head -n 1 "$tmp/err")"
fi
split=$(grep '"step":150,"loss"' "$tmp/allnv.json" | grep -c '"compute_s":[0-9.]*,"wait_s":[0-9.]*,"optim_s":[0-9.]*,"nvme_written":[1-9]')
[ "$split" -eq 1 ] && ok "--json reports the step's split (compute, transfer wait, optimizer) and its bytes written to NVMe" ||
    notok "no step-time split in --json: $(grep '"step":150,"loss"' "$tmp/allnv.json")"
check "--nvme-kinds without --gpu-mem" 1 "need a compute tier to run on: set a compute tier budget (--gpu-mem)$" -- \
    $run --out e14 --nvme-dir "$tmp/nvme" --nvme-kinds params
check "a bad --nvme-kinds" 2 "--nvme-kinds must be" -- $run --out e15 --nvme-kinds everything
check "a bad --nvme-queue-depth" 2 "--nvme-queue-depth must be" -- $run --out e16 --nvme-queue-depth 0

# ---- Ctrl-C: finishes the step, saves, exits 130; resume continues exactly ----
(cd "$tmp" && exec "$ft" $run --out intr --save-every 0) > "$tmp/intr.json" 2> "$tmp/intr.err" &
bg=$!
tries=0
while [ "$(losses "$tmp/intr.json" | wc -l)" -lt 10 ] && [ $tries -lt 3000 ] && kill -0 $bg 2>/dev/null; do
    tries=$((tries + 1))
    sleep 0.01
done
kill -INT $bg
wait $bg
rc=$?
k=$(saved_step "$tmp/intr")
if [ "$rc" -eq 130 ] && grep -q "interrupted: step $k saved" "$tmp/intr.err" && [ "$k" -lt 150 ]; then
    ok "Ctrl-C saves step $k and exits 130"
else
    notok "Ctrl-C: exit $rc, saved step '$k': $(head -n 1 "$tmp/intr.err")"
fi
[ "$(losses "$tmp/intr.json" | wc -l)" -eq "$k" ] && ok "the interrupted run stopped right after the saved step" ||
    notok "steps printed and saved differ"
check "resume after Ctrl-C (given with a trailing slash)" 0 "" -- --resume intr/ --json
losses "$tmp/out" > "$tmp/resumed.txt"
losses "$tmp/ref.json" | sed -n "$((k + 1)),\$p" > "$tmp/ref_tail.txt"
cmp -s "$tmp/resumed.txt" "$tmp/ref_tail.txt" && ok "resumed after Ctrl-C: identical losses" ||
    notok "resumed after Ctrl-C: losses differ"

# ---- fine-tuning a model directory; --eval-only; in-order batches ----
python_free_llmc() { # an llm.c token file (magic 20240520, version 1, uint16 tokens) of $2 tokens < 96
    awk -v n="$2" 'function u32(v) { printf "%c%c%c%c", v % 256, int(v / 256) % 256, int(v / 65536) % 256, int(v / 16777216) }
        BEGIN { u32(20240520); u32(1); u32(n); for (i = 3; i < 256; i++) u32(0);
                srand(5); for (i = 0; i < n; i++) { t = int(rand() * 95) + 1; printf "%c%c", t, 0 } }' > "$1"
}
LC_ALL=C python_free_llmc "$tmp/tokens.bin" 3000
check "fine-tunes a model directory on llm.c tokens, in order" 0 "the model is in ft" -- \
    "$src/tests/fixtures/hf/gpt2" tokens.bin --out ft --steps 5 --batch 2 --seq 16 --no-shuffle
check "--eval-only prints the loss" 0 "validation loss" -- ft tokens.bin --eval-only --batch 2 --seq 16
check "resuming with a changed option is refused" 2 "cannot change when resuming" -- --resume ft --lr 1
sed 's/small/SMALL/' "$tmp/corpus.txt" > "$tmp/other.txt"
sed -i 's|"data":[^,]*,|"data": "'"$tmp"'/other.txt",|' "$tmp/killed_copy/trainer_state.json"
check "resuming on other data is refused" 1 "changed since the run started" -- --resume killed_copy

# ---- mixed precision: bf16 follows fp32, fp16 skips overflows and resumes exactly, the model stays f32 ----
mp="gpt2-tiny corpus.txt --steps 40 --batch 4 --seq 32 --json --lr 3e-3 --dropout 0"
(cd "$tmp" && "$ft" $mp --out mp32) > "$tmp/mp32.json" 2> "$tmp/err"
(cd "$tmp" && "$ft" $mp --out mp16 --precision bf16) > "$tmp/mp16.json" 2> "$tmp/err"
if [ "$(losses "$tmp/mp16.json" | wc -l)" -eq 40 ] &&
    paste -d' ' "$tmp/mp32.json" "$tmp/mp16.json" | grep '"loss"' | sed 's/[^ ]*"loss":\([^,]*\),[^ ]* [^ ]*"loss":\([^,]*\),.*/\1 \2/' |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { print "# worst relative difference " w; exit !(NR == 40 && w <= 2e-2) }'; then
    ok "--precision bf16: 40 steps, every loss within 2e-2 of the fp32 run's"
else
    notok "--precision bf16 against fp32: $(head -n 2 "$tmp/err")"
fi
hdr() { head -c 65536 "$1" | tr -d '\000' | head -c 8192; }
hdr "$tmp/mp16/model.safetensors" | grep -q '"F32"' && ! hdr "$tmp/mp16/model.safetensors" | grep -q 'BF16' &&
    ok "the bf16 run's model.safetensors is f32" || notok "the bf16 run saved a model that is not f32"
grep -q '\["precision", "bf16"\]' "$tmp/mp16/trainer_state.json" && grep -q '\["precision", "fp32"\]' "$tmp/mp32/trainer_state.json" &&
    ok "the run state records the precision, the default one too" || notok "the run state lacks the precision"
check "--eval-only of the bf16 output in bf16" 0 "validation loss" -- mp16 corpus.txt --eval-only --batch 2 --seq 32 --precision bf16
check "resuming with another precision is refused" 2 "cannot change when resuming" -- --resume mp16 --precision fp32
check "a bad --precision" 2 "--precision must be fp32, bf16 or fp16" -- $mp --out e20 --precision half
check "LoRA in bf16 is refused, naming the option" 1 "LoRA adapters are trained in f32 only.*(--precision)$" -- \
    $mp --out e21 --precision bf16 --lora-rank 2
fp16run="gpt2-tiny corpus.txt --steps 300 --batch 4 --seq 32 --save-every 3 --json --lr 3e-3 --dropout 0.1 --precision fp16"
(cd "$tmp" && "$ft" $fp16run --out h_ref) > "$tmp/h_ref.json" 2> "$tmp/err"
skipped=$(grep '"step":300,"loss"' "$tmp/h_ref.json" | sed 's/.*"skipped":\([0-9]*\).*/\1/')
[ "$(losses "$tmp/h_ref.json" | wc -l)" -eq 300 ] && [ -n "$skipped" ] &&
    ok "--precision fp16: 300 steps, $skipped skipped for overflow (counted in --json)" || notok "fp16 run: $(head -n 2 "$tmp/err")"
(cd "$tmp" && exec "$ft" $fp16run --out h_killed) > /dev/null 2>&1 &
bg=$!
tries=0
while [ "$(saved_step "$tmp/h_killed")" = "" ] || [ "$(saved_step "$tmp/h_killed")" -lt 30 ]; do
    tries=$((tries + 1))
    [ $tries -gt 3000 ] && break
    kill -0 $bg 2>/dev/null || break
    sleep 0.01
done
kill -9 $bg 2>/dev/null
wait $bg 2>/dev/null
k=$(saved_step "$tmp/h_killed")
check "fp16: resume after kill -9 at step $k" 0 "" -- --resume h_killed --json
losses "$tmp/out" > "$tmp/resumed.txt"
losses "$tmp/h_ref.json" | sed -n "$((k + 1)),\$p" > "$tmp/ref_tail.txt"
if [ -n "$k" ] && [ "$k" -lt 300 ] && [ -s "$tmp/resumed.txt" ] && cmp -s "$tmp/resumed.txt" "$tmp/ref_tail.txt" &&
    [ "$(grep '"step":300,"loss"' "$tmp/out" | sed 's/.*"skipped":\([0-9]*\).*/\1/')" = "$skipped" ] &&
    cmp -s "$tmp/h_killed/model.safetensors" "$tmp/h_ref/model.safetensors"; then
    ok "fp16: steps $((k + 1))..300 after kill -9 + resume are bit-identical (losses, skip count, final model)"
else
    notok "fp16: the resumed run differs from the uninterrupted one (killed at '$k')"
    diff "$tmp/resumed.txt" "$tmp/ref_tail.txt" | head -4 | sed 's/^/# /'
fi

# ---- LoRA: adapter files, merged export, loading an adapter directory ----
lora="$src/tests/fixtures/hf/gpt2 tokens.bin --steps 6 --batch 2 --seq 16 --lr 1e-2 --lora-rank 4 --lora-targets c_attn,c_fc"
check "LoRA fine-tune" 0 "trained by LoRA" -- $lora --out lora
[ -s "$tmp/lora/adapter_model.safetensors" ] && grep -Eq '"r":[[:space:]]*4' "$tmp/lora/adapter_config.json" &&
    ok "the output has a PEFT adapter" || notok "no adapter files"
check "LoRA fine-tune merged on export" 0 "the model is in lora_merged" -- $lora --out lora_merged --merge-lora
[ ! -e "$tmp/lora_merged/adapter_model.safetensors" ] && ok "a merged export has no adapter files" ||
    notok "adapter files beside a merged export"
evalloss() { (cd "$tmp" && "$ft" "$1" tokens.bin --eval-only --batch 2 --seq 16 --json) | grep '"val_loss"' |
    sed 's/.*"val_loss":\([^}]*\)}.*/\1/'; }
a=$(evalloss lora) b=$(evalloss lora_merged) base=$(evalloss "$src/tests/fixtures/hf/gpt2")
if [ -n "$a" ] && awk "BEGIN { d = $a - $b; if (d < 0) d = -d; exit !(d <= 1e-5 * $a && $a != $base) }"; then
    ok "base + adapter and the merged export give the same loss ($a, $b; base model $base)"
else
    notok "adapter vs merged loss: '$a' vs '$b' (base '$base')"
fi
check "LoRA adapter directory trained further with another rank" 1 "rank 4 LoRA adapter" -- lora tokens.bin --out e6 --lora-rank 8
check "LoRA target the model lacks" 1 "c_attn" -- "$src/tests/fixtures/hf/gpt2" tokens.bin --out e7 --lora-rank 2 --lora-targets q_proj

# ---- supervised fine-tuning on chat data ----
awk 'BEGIN { for (i = 0; i < 300; i++) printf "{\"messages\": [{\"role\": \"user\", \"content\": \"what is %d plus %d?\"}, {\"role\": \"assistant\", \"content\": \"%d\"}]}\n", i, i + 1, 2 * i + 1 }' > "$tmp/chat.jsonl"
check "trains on .jsonl chat data" 0 "the model is in sft" -- gpt2-tiny chat.jsonl --out sft --steps 3 --batch 2 --seq 64 --template plain
printf '{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [{"role": "wizard", "content": "x"}]}\n' > "$tmp/bad.jsonl"
check "bad chat line is named" 1 "bad.jsonl:2" -- gpt2-tiny bad.jsonl --out e5 --steps 1
check "unknown chat template" 2 "--template must be" -- gpt2-tiny chat.jsonl --template jinja
# a compressed file that expands far beyond --data-max is refused early, with the option named
head -c 67108864 /dev/zero | tr '\0' 'a' | xz -1 > "$tmp/bomb.txt.xz"
check "data past --data-max once decompressed" 1 "raise --data-max" -- gpt2-tiny bomb.txt.xz --out e18 --steps 1 \
    --data-max 8M
check "a bad --data-max" 2 "--data-max must be" -- gpt2-tiny bomb.txt.xz --out e19 --data-max 0
# a model whose own chat template is none colossal knows: chat data is refused (not trained in another format)
mkdir -p "$tmp/jinja"
cp "$src/tests/fixtures/chat_model/base/"* "$tmp/jinja/"
printf '{"chat_template": "{%% for m in messages %%}{{ m.content }}{%% endfor %%}", "eos_token": "<|endoftext|>"}\n' \
    > "$tmp/jinja/tokenizer_config.json"
check "a model's unknown chat template refuses chat data" 1 "chat template is not one colossal knows" -- \
    jinja chat.jsonl --out e16 --steps 1 --batch 2 --seq 64
check "... and --template chooses the format" 0 "the model is in e17" -- jinja chat.jsonl --out e17 --steps 1 \
    --batch 2 --seq 64 --template chatml

# ---- every optimizer and schedule, accumulation, dropout, checkpointing ----
for opt in sgd adamw lamb lars; do
    check "optimizer $opt" 0 "the model is in opt_$opt" -- gpt2-tiny corpus.txt --out opt_$opt --steps 3 --batch 2 --seq 16 --optimizer $opt
done
check "linear schedule, warmup, momentum, nesterov" 0 "the model is in sched" -- gpt2-tiny corpus.txt --out sched --steps 4 \
    --batch 2 --seq 16 --optimizer sgd --momentum 0.9 --nesterov --schedule linear --warmup 2 --min-lr-ratio 0
check "gradient accumulation, dropout, activation checkpointing" 0 "with accumulation" -- gpt2-tiny corpus.txt --out acc \
    --steps 3 --batch 2 --seq 16 --grad-accum 3 --dropout 0.2 --checkpointing
check "host memory budget too small" 1 "host budget of 64.0 KiB is too small: .* at least .* (--cpu-mem)$" -- \
    gpt2-tiny corpus.txt --out e9 --steps 1 --cpu-mem 64K
check "a host budget that only a compute tier could meet names both options" 1 \
    "the gradients could move to the NVMe tier, .* set a compute tier budget (--cpu-mem, --gpu-mem)$" -- \
    gpt2-tiny corpus.txt --out e19 --steps 1 --cpu-mem 64K --nvme-dir "$tmp/nvme"

# ---- statistics for colossal-top; --tui ----
top=${TOP:-$(dirname "$ft")/colossal-top}
(cd "$tmp" && exec "$ft" gpt2-tiny corpus.txt --out stats --steps 100000 --batch 2 --seq 32 --quiet) 2>/dev/null &
bg=$!
tries=0
while ! "$top" --json -p $bg 2>/dev/null | grep -q '"step":[1-9]'; do
    tries=$((tries + 1)); [ $tries -gt 500 ] && break; sleep 0.02
done
snap=$("$top" --json -p $bg 2>/dev/null)
# a second process on the same output directory: refused at once, naming the first (which the kill below shows unharmed)
check "a second run on an --out in use is refused, naming the process" 2 "in use by process $bg" -- \
    gpt2-tiny corpus.txt --out stats --overwrite --steps 1 --batch 2 --seq 32
check "so is a --resume of it" 2 "in use by process $bg" -- --resume stats
kill -INT $bg; wait $bg; rc=$?
if echo "$snap" | grep -q '"program":"colossal-finetune"' && echo "$snap" | grep -q '"run":"gpt2-tiny"' &&
    echo "$snap" | grep -q '"total_steps":100000' && [ "$rc" -eq 130 ]; then
    ok "a running fine-tune is visible in colossal-top --json (then Ctrl-C: exit $rc)"
else
    notok "colossal-top does not see the run (exit $rc): $(echo "$snap" | head -c 300)"
fi
# (checked on the file itself: colossal-top would clean up a dead process's segment on its own)
[ -e "/dev/shm/colossal-$bg" ] && notok "the segment outlived the run" || ok "the statistics segment is removed at exit"
[ -s "$tmp/stats/trainer_state.json" ] && [ ! -e "$tmp/stats.lock" ] &&
    ok "the first run saved on Ctrl-C and removed its lock" || notok "the first run's save or lock: $(ls -A "$tmp")"
if command -v tmux >/dev/null 2>&1; then
    T="tmux -L colft$$ -f /dev/null"
    $T new-session -d -s ft -x 110 -y 30 "cd '$tmp' && LC_ALL=C.UTF-8 '$ft' gpt2-tiny corpus.txt --out tui --steps 100000 --batch 2 --seq 32 --tui; echo \$? > '$tmp/tui_rc'; sleep 1"
    i=0
    while [ $i -lt 100 ] && ! $T capture-pane -p -t ft 2>/dev/null | grep -q "colossal-finetune.*gpt2-tiny.*step"; do
        sleep 0.1; i=$((i + 1))
    done
    $T capture-pane -p -t ft > "$tmp/tui_screen" 2>/dev/null
    grep -q "host" "$tmp/tui_screen" && grep -q "colossal-finetune" "$tmp/tui_screen" &&
        ok "--tui shows the run's own view" || { notok "--tui screen"; sed 's/^/# /' "$tmp/tui_screen" | head -8; }
    $T send-keys -t ft q
    i=0
    while [ $i -lt 100 ] && [ ! -s "$tmp/tui_rc" ]; do sleep 0.1; i=$((i + 1)); done
    [ "$(cat "$tmp/tui_rc" 2>/dev/null)" = 130 ] && [ -s "$tmp/tui/trainer_state.json" ] &&
        ok "q in --tui stops like Ctrl-C: saved, exit 130" || notok "q in --tui: exit '$(cat "$tmp/tui_rc" 2>/dev/null)'"
    # without --tui a terminal gets one live progress line (a second session beside the first)
    $T new-session -d -s live -x 150 -y 20 "cd '$tmp' && '$ft' gpt2-tiny corpus.txt --out live --steps 100000 --batch 2 --seq 32; sleep 1"
    i=0
    while [ $i -lt 100 ] && ! $T capture-pane -p -t live 2>/dev/null | grep -q "^step [0-9]*/100000 .*tok/s.*ETA.*mem: compute.*host.*nvme"; do
        sleep 0.1; i=$((i + 1))
    done
    $T capture-pane -p -t live > "$tmp/live_screen" 2>/dev/null
    [ "$(grep -c '^step [0-9]*/100000' "$tmp/live_screen")" -eq 1 ] &&
        ok "a terminal gets one live line: $(grep '^step' "$tmp/live_screen" | head -c 110)" ||
        { notok "no single live progress line"; sed 's/^/# /' "$tmp/live_screen" | head -8; }
    $T kill-server 2>/dev/null
else
    for i in 1 2 3; do n=$((n + 1)); echo "ok $n # SKIP tmux not installed"; done
fi
check "--tui without a terminal" 1 "needs a terminal" -- gpt2-tiny corpus.txt --out e8 --tui --steps 1

# ---- the output directory: links, trailing slashes, a full disk ----
# a link to a colossal output with a file of the user's: writing through it would replace what it points to
mkdir -p "$tmp/victim" && cp "$tmp/greedy/"* "$tmp/victim/" && echo mine > "$tmp/victim/precious.txt"
victim_sum=$(cd "$tmp/victim" && ls && cat ./* | cksum)
ln -s victim "$tmp/linked"
check "a symbolic link as --out is refused" 2 "linked is a symbolic link; colossal does not write through links" -- \
    gpt2-tiny corpus.txt --out linked --overwrite --steps 1 --batch 2 --seq 16
check "also as --resume" 2 "linked is a symbolic link" -- --resume linked/
ln -s victim "$tmp/planted.partial"
check "a link at OUT.partial is refused, not followed" 1 "planted.partial is a symbolic link" -- \
    gpt2-tiny corpus.txt --out planted --steps 1 --batch 2 --seq 16
[ "$(cd "$tmp/victim" && ls && cat ./* | cksum)" = "$victim_sum" ] && ok "the directory behind the links is untouched" ||
    notok "the directory behind the links changed: $(ls -A "$tmp/victim" | tr '\n' ' ')"
check "--out with a trailing slash trains and saves" 0 "the model is in slash/" -- \
    gpt2-tiny corpus.txt --out slash/ --steps 4 --save-every 2 --batch 2 --seq 16
[ -s "$tmp/slash/trainer_state.json" ] && [ ! -e "$tmp/slash.partial" ] && [ ! -e "$tmp/slash/.partial" ] &&
    ok "the save is in slash, nothing staged inside it" || notok "slash/: $(ls -A "$tmp/slash" | tr '\n' ' ')"
# the disk fills up while the final save is written (a file size limit): the previous save stays byte for byte
# (metrics.jsonl is not part of a save: the new run's log, started anew by --overwrite)
check "a run to overwrite" 0 "the model is in full" -- gpt2-tiny corpus.txt --out full --steps 2 --batch 2 --seq 16
cp -r "$tmp/full" "$tmp/full_before"
(cd "$tmp" && trap '' XFSZ && ulimit -f 200 && exec "$ft" gpt2-tiny corpus.txt --out full --overwrite --steps 2 --batch 2 \
    --seq 16 --quiet) > /dev/null 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "saving step 2: .*File too large" "$tmp/err" &&
    diff -r -x metrics.jsonl "$tmp/full" "$tmp/full_before" > /dev/null && [ ! -e "$tmp/full.partial" ]; then
    ok "a save that fills the disk: one line ($(cat "$tmp/err")), the previous save byte for byte, no stage left"
else
    notok "a save that fills the disk: exit $rc: $(head -n 2 "$tmp/err")"
fi

# ---- bad input ----
mkdir -p "$tmp/badcfg" && echo '{"model_type": "gpt2", "n_embd": "wide"' > "$tmp/badcfg/config.json"
: > "$tmp/empty.txt"
printf 'tiny' > "$tmp/short.txt"
mkdir -p "$tmp/foreign" && echo keep > "$tmp/foreign/notes.txt"
check "missing model" 1 "nosuch" -- "$tmp/nosuch" corpus.txt
check "corrupt config.json" 1 "config.json" -- "$tmp/badcfg" corpus.txt
mkdir -p "$tmp/badweights" && cp "$src/tests/fixtures/hf/gpt2/config.json" "$tmp/badweights/" &&
    head -c 5000 "$src/tests/fixtures/hf/gpt2/model.safetensors" > "$tmp/badweights/model.safetensors"
check "truncated model.safetensors" 1 "model.safetensors" -- "$tmp/badweights" tokens.bin --out e10
# weights holding a tensor the model does not use: llama2's own lm_head under a config that ties
mkdir -p "$tmp/tied" && cp "$src/tests/fixtures/hf/llama2/model.safetensors" "$tmp/tied/" &&
    sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$src/tests/fixtures/hf/llama2/config.json" \
    > "$tmp/tied/config.json"
check "a tensor the model does not use names it and the option" 1 \
    "has a tensor 'lm_head.weight' that a 2-layer LLaMA model with tied embeddings does not use .*(--ignore-extra-tensors)$" \
    -- "$tmp/tied" tokens.bin --eval-only --batch 2 --seq 16
check "--ignore-extra-tensors loads it, with a warning" 0 \
    "^colossal-finetune: warning: ignored 1 checkpoint tensor the model does not use: 'lm_head.weight'$" \
    -- "$tmp/tied" tokens.bin --eval-only --batch 2 --seq 16 --ignore-extra-tensors
check "unknown architecture" 1 "not a directory, a hub id" -- gpt5 corpus.txt
check "empty data" 1 "empty.txt" -- gpt2-tiny empty.txt --out e1
check "data too short" 1 "training tokens" -- gpt2-tiny short.txt --out e2
check "missing data" 1 "missing.txt" -- gpt2-tiny missing.txt --out e3
check "sequence longer than the model allows" 1 "longer than" -- gpt2-tiny corpus.txt --seq 4096 --out e4
check "tokenizer that does not fit the model" 1 "do not belong together (--tokenizer)$" -- "$src/tests/fixtures/hf/gpt2" \
    corpus.txt --tokenizer bytes
check "unknown option" 2 "unknown option" -- --bogus
# --device: a bad value is a usage error; a GPU that is not there is one line, exit 2, and nothing written
check "--device gpu" 2 "--device must be cpu, cuda or cuda:N .*(got 'gpu')" -- gpt2-tiny corpus.txt --out d1 --device gpu
check "--device cuda:x" 2 "(got 'cuda:x')" -- gpt2-tiny corpus.txt --out d1 --device cuda:x
check "--device cuda:-1" 2 "(got 'cuda:-1')" -- gpt2-tiny corpus.txt --out d1 --device cuda:-1
check "--device cuda:1023 (no machine has so many)" 2 "^colossal-finetune: --device cuda:1023: .*; use --device" -- \
    gpt2-tiny corpus.txt --out d1 --device cuda:1023
if nvidia-smi -L > /dev/null 2>&1; then
    n=$((n + 1)); echo "ok $n # SKIP --device cuda without a GPU: this machine has one"
else
    check "--device cuda without a usable GPU" 2 "^colossal-finetune: --device cuda: no usable GPU: .*; use --device cpu$" \
        -- gpt2-tiny corpus.txt --out d1 --device cuda
fi
[ "$(wc -l < "$tmp/err")" -eq 1 ] && [ ! -e "$tmp/d1" ] && [ ! -e "$tmp/d1.lock" ] && [ ! -e "$tmp/d1.partial" ] &&
    ok "... one line, and nothing written for --out" || notok "--device cuda: $(ls -A "$tmp" | grep d1) $(cat "$tmp/err")"
"$ft" --help | grep -q -- "--device DEV .*cpu, or a GPU" && ok "--help names --device" || notok "--help lacks --device"
check "option without its value" 2 "needs a value" -- --steps
check "bad number" 2 "--lr must be" -- --lr fast
check "a learning rate that is 0 as a float" 2 "--lr must be" -- --lr 2e-88
check "MODEL without DATA" 2 "give DATA" -- gpt2-tiny
check "output directory not writable" 1 "cannot write the output directory .*; choose another output directory (--out)$" -- \
    gpt2-tiny corpus.txt --out "$tmp/corpus.txt/x" --steps 1
check "output directory holds other files" 1 "not a colossal-finetune output (it holds notes.txt)" -- gpt2-tiny corpus.txt --out foreign --steps 1
[ "$(cat "$tmp/foreign/notes.txt")" = keep ] && ok "the foreign directory is untouched" || notok "foreign files touched"
check "existing run without --resume or --overwrite" 1 "holds a run already" -- gpt2-tiny corpus.txt --out ref --steps 1
check "resume from a directory that is no run" 1 "trainer_state.json" -- --resume foreign
echo '{"format": "colossal-finetune run state 1", "step": "x"}' > "$tmp/foreign/trainer_state.json"
check "damaged run state" 1 "damaged" -- --resume foreign

echo "1..$n"
[ "$fails" -eq 0 ]
