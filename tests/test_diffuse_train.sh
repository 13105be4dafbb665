#!/bin/sh
# test_diffuse_train.sh - colossal-diffuse --train from the command line (TAP output).
# The model is tests/fixtures/sd_pipeline/model, the images tests/fixtures/sd_train/images
# (tools/refgen/make_sd_train_fixtures.py); the numbers against diffusers are
# tests/test_sd_train.c's. Here: the output folder (a diffusers model, or a LoRA file)
# and that colossal-diffuse generates from it, --resume giving bitwise the uninterrupted
# run, the user's files in the output kept, and one clear line with a non-zero exit for
# every bad input. (That diffusers loads such a folder was checked by hand with
# make_sd_train_fixtures.py --check-output: tools/refgen/README.md.)
diffuse=${DIFFUSE:-./apps/colossal-diffuse}
src=${SRCDIR:-${srcdir:-.}}
model="$src/tests/fixtures/sd_pipeline/model"
images="$src/tests/fixtures/sd_train/images"
class="$src/tests/fixtures/sd_train/class"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}
run() { "$diffuse" "$@" > "$tmp/out" 2> "$tmp/err"; }
full="--train $model $images --batch 2 --grad-accum 2 --flip --lr 1e-3 --seed 5 -q"
lora="--train $model $images --lora 4 --instance-prompt sks --class-dir $class --class-prompt cat --prior-weight 0.5 --lr 1e-2 --seed 9 -q"

# check NAME FIXED_STRING -- ARGS...: a non-zero exit, the string on stderr, one line on stderr
check() {
    name=$1 pattern=$2
    shift 3
    "$diffuse" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -ne 0 ] && grep -qF -- "$pattern" "$tmp/err" && [ "$lines" -eq 1 ]; then
        pass "$name"
    else
        fail "$name: exit $rc, $lines stderr lines, want '$pattern'"
    fi
}

if "$diffuse" --help > "$tmp/out" 2>&1 && grep -q -- "--instance-prompt" "$tmp/out"; then pass "--help shows the training options"
else fail "--help shows the training options"; fi

# full training: a diffusers folder, named on stdout
if run $full --steps 4 --out "$tmp/full" && [ "$(cat "$tmp/out")" = "$tmp/full" ] &&
   [ -s "$tmp/full/unet/diffusion_pytorch_model.safetensors" ] && [ -s "$tmp/full/unet/config.json" ] &&
   [ -s "$tmp/full/vae/config.json" ] && [ -s "$tmp/full/text_encoder/config.json" ] &&
   [ -s "$tmp/full/tokenizer/vocab.json" ] && [ -s "$tmp/full/scheduler/scheduler_config.json" ] &&
   [ -s "$tmp/full/model_index.json" ] && [ -s "$tmp/full/optimizer.safetensors" ] && [ -s "$tmp/full/trainer_state.json" ]
then pass "four steps of full training write a diffusers folder and the run's state"
else fail "four steps of full training write a diffusers folder and the run's state"; fi
if ! cmp -s "$tmp/full/unet/diffusion_pytorch_model.safetensors" "$model/unet/diffusion_pytorch_model.safetensors" &&
   cmp -s "$tmp/full/vae/diffusion_pytorch_model.safetensors" "$model/vae/diffusion_pytorch_model.safetensors"; then
    pass "the UNet changed, the frozen VAE did not"
else fail "the UNet changed, the frozen VAE did not"; fi
if run "$tmp/full" "a photo of a cat" --size 16x16 --steps 2 --seed 1 -q -o "$tmp/from_full.png" && [ -s "$tmp/from_full.png" ]
then pass "colossal-diffuse generates from the trained folder"
else fail "colossal-diffuse generates from the trained folder"; fi

# resume: 2 steps, then 2 more, bitwise the 4-step run
if run $full --steps 2 --out "$tmp/res" && run $full --steps 4 --out "$tmp/res" --resume &&
   cmp -s "$tmp/full/unet/diffusion_pytorch_model.safetensors" "$tmp/res/unet/diffusion_pytorch_model.safetensors" &&
   cmp -s "$tmp/full/optimizer.safetensors" "$tmp/res/optimizer.safetensors" &&
   cmp -s "$tmp/full/trainer_state.json" "$tmp/res/trainer_state.json"; then
    pass "--resume continues bitwise (weights, optimizer state, generator)"
else fail "--resume continues bitwise (weights, optimizer state, generator)"; fi
# the run's log: a line per step, the resumed run going on from the saved steps; its loss in the uninterrupted
# run's; loss.png beside the save
if [ "$(sed -n 's/^{"step":\([0-9]*\),.*/\1/p' "$tmp/res/metrics.jsonl" | tr '\n' ' ')" = "1 2 3 4 " ] &&
   [ "$(sed 's/,"elapsed_s":[^,}]*//' "$tmp/res/metrics.jsonl")" = "$(sed 's/,"elapsed_s":[^,}]*//' "$tmp/full/metrics.jsonl")" ] &&
   grep -q '"loss":[0-9.]*,"lr":' "$tmp/full/metrics.jsonl" && [ -s "$tmp/full/loss.png" ]; then
    pass "metrics.jsonl: steps 1..4, the resumed run's the same as the uninterrupted one's; loss.png"
else fail "metrics.jsonl of the runs: $(head -c 200 "$tmp/res/metrics.jsonl")"; fi

# LoRA with prior preservation, saved every 2 steps, resumed
if run $lora --steps 4 --out "$tmp/lora" && [ -s "$tmp/lora/pytorch_lora_weights.safetensors" ] && [ ! -e "$tmp/lora/unet" ] &&
   run $lora --steps 3 --save-every 2 --out "$tmp/lres" && run $lora --steps 4 --out "$tmp/lres" --resume &&
   cmp -s "$tmp/lora/pytorch_lora_weights.safetensors" "$tmp/lres/pytorch_lora_weights.safetensors"; then
    pass "LoRA with prior preservation: the adapters file, resumed bitwise"
else fail "LoRA with prior preservation: the adapters file, resumed bitwise"; fi
if run "$model" "a photo of sks" --lora "$tmp/lora/pytorch_lora_weights.safetensors" --size 16x16 --steps 2 -q \
       -o "$tmp/from_lora.png" && [ -s "$tmp/from_lora.png" ]; then pass "colossal-diffuse generates with the trained LoRA"
else fail "colossal-diffuse generates with the trained LoRA"; fi

# the user's files in the output survive later saves, inside the model's folders too
echo mine > "$tmp/res/notes.txt"
echo mine > "$tmp/res/unet/notes.txt"
if run $full --steps 5 --out "$tmp/res" --resume && grep -q mine "$tmp/res/notes.txt" && grep -q mine "$tmp/res/unet/notes.txt" &&
   [ ! -e "$tmp/res.partial" ] && [ ! -e "$tmp/res.old" ]; then pass "the user's files in the output are kept"
else fail "the user's files in the output are kept"; fi

# bad inputs: one line, non-zero exit
mkdir "$tmp/empty" "$tmp/nocap" "$tmp/broken"
cp "$images/cat.png" "$tmp/nocap/"
cp "$images/cat.png" "$images/cat.txt" "$tmp/broken/"
printf 'not an image' > "$tmp/broken/bad.png"
echo caption > "$tmp/broken/bad.txt"
echo x > "$tmp/file"
check "an empty image folder" "holds no PNG or JPEG images" -- --train "$model" "$tmp/empty" --out "$tmp/o1" -q
check "an image without its caption" "cat.png has no caption" -- --train "$model" "$tmp/nocap" --out "$tmp/o2" -q
check "an unreadable image" "bad.png" -- --train "$model" "$tmp/broken" --out "$tmp/o3" -q
check "an output that is a file" "is not a directory" -- --train "$model" "$images" --out "$tmp/file" -q
check "a folder that is not there" "/nonexistent" -- --train "$model" /nonexistent --out "$tmp/o4" -q
check "a run without --resume" "holds a training run already" -- $full --steps 6 --out "$tmp/full"
check "--resume without a run" "holds no colossal-diffuse training run" -- $full --steps 6 --out "$tmp/o5" --resume
check "--resume with other options" "--resume: lr was" -- $full --steps 6 --out "$tmp/full" --resume --lr 2e-3
check "--resume with no steps left" "has done 4 steps already" -- $full --steps 4 --out "$tmp/full" --resume
check "a folder of someone else's" "is not empty" -- --train "$model" "$images" --out "$tmp/nocap" -q
check "no --out" "needs --out" -- --train "$model" "$images"
check "--lora that is not a rank" "rank" -- --train "$model" "$images" --out "$tmp/o6" --lora x.safetensors
check "--class-dir without --class-prompt" "go together" -- --train "$model" "$images" --out "$tmp/o7" --class-dir "$class"
check "a training option without --train" "goes with --train" -- "$model" "a cat" --resolution 16
check "a generation option with --train" "not of --train" -- --train "$model" "$images" --out "$tmp/o8" --cfg 3
check "a resolution the VAE cannot halve" "multiple" -- --train "$model" "$images" --out "$tmp/o9" --resolution 15 -q
if [ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o2" ] && [ ! -e "$tmp/o3" ] && grep -q x "$tmp/file" && [ ! -e "$tmp/nocap/.colossal-manifest" ]
then pass "failed runs leave nothing behind and touch nothing"
else fail "failed runs leave nothing behind and touch nothing"; fi

echo "1..$n"
[ "$fails" -eq 0 ]
