#!/bin/sh
# test_diffuse_cli.sh - colossal-diffuse from the command line (TAP output).
# The model is tests/fixtures/sd_pipeline/model (tools/refgen/make_sd_pipeline_fixtures.py:
# a tiny random Stable Diffusion pipeline); the pixel parity with diffusers is
# tests/test_sd_pipeline.c's. Here: the PNG and its parameters, batches, replacing
# outputs (only our own, or with --force), img2img, and one clear line with a
# non-zero exit for every bad input.
diffuse=${DIFFUSE:-./apps/colossal-diffuse}
src=${SRCDIR:-${srcdir:-.}}
model="$src/tests/fixtures/sd_pipeline/model"
init="$src/tests/fixtures/sd_pipeline/init.png"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}
fast="--size 16x16 --steps 2 --seed 7 -q"

# check NAME WANT_RC FIXED_STRING -- ARGS...: exit code, the string on stderr, one line on stderr
check() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$diffuse" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" "$tmp/err" && [ "$lines" -eq 1 ]; then
        pass "$name"
    else
        fail "$name: exit $rc (want $want), $lines stderr lines, want '$pattern'"
    fi
}

# --help
if "$diffuse" --help > "$tmp/out" 2> "$tmp/err" && grep -q -- "--scheduler" "$tmp/out"; then pass "--help"
else fail "--help"; fi

# a first image: the PNG, its name on stdout, its parameters in a text chunk
if "$diffuse" $fast -o "$tmp/a.png" "$model" "a photo of a cat" > "$tmp/out" 2> "$tmp/err" &&
   [ "$(cat "$tmp/out")" = "$tmp/a.png" ] && head -c 8 "$tmp/a.png" | od -An -c | grep -q "P   N   G"; then
    pass "an image is written and named on stdout"
else fail "an image is written and named on stdout"; fi
if grep -aq "Steps: 2, Sampler: pndm, CFG scale: 7.5, Seed: 7, Size: 16x16" "$tmp/a.png" &&
   grep -aq "a photo of a cat" "$tmp/a.png"; then pass "the PNG carries the generation parameters"
else fail "the PNG carries the generation parameters"; fi

# the same seed gives the same file; another seed another image
"$diffuse" $fast -o "$tmp/b.png" "$model" "a photo of a cat" > /dev/null 2> "$tmp/err"
if cmp -s "$tmp/a.png" "$tmp/b.png"; then pass "same seed, same bytes"; else fail "same seed, same bytes"; fi
"$diffuse" --size 16x16 --steps 2 --seed 8 -q -o "$tmp/c.png" "$model" "a photo of a cat" > /dev/null 2> "$tmp/err"
if [ -s "$tmp/c.png" ] && ! cmp -s "$tmp/a.png" "$tmp/c.png"; then pass "another seed, another image"
else fail "another seed, another image"; fi

# each scheduler runs
for s in ddim pndm euler euler-a dpm++2m dpm++2m-karras lcm ddpm; do
    if "$diffuse" $fast --scheduler "$s" -o "$tmp/s.png" "$model" "the lighthouse" > /dev/null 2> "$tmp/err" &&
       grep -aq "Sampler: $s," "$tmp/s.png"; then pass "--scheduler $s"; else fail "--scheduler $s"; fi
done

# a batch: FILE-1.png, FILE-2.png
if "$diffuse" $fast --batch 2 -o "$tmp/batch.png" "$model" "a cat" > "$tmp/out" 2> "$tmp/err" &&
   [ -s "$tmp/batch-1.png" ] && [ -s "$tmp/batch-2.png" ] && ! cmp -s "$tmp/batch-1.png" "$tmp/batch-2.png" &&
   grep -aq "Batch: 2 of 2" "$tmp/batch-2.png"; then pass "--batch 2 writes two different images"
else fail "--batch 2 writes two different images"; fi

# replacing: our own PNG yes, another file no (unless --force), nothing written on refusal
echo "my notes" > "$tmp/notes.png"
check "a file colossal-diffuse did not write is kept" 1 "not written by colossal-diffuse" -- $fast -o "$tmp/notes.png" "$model" "x"
if [ "$(cat "$tmp/notes.png")" = "my notes" ]; then pass "and is unchanged"; else fail "and is unchanged"; fi
if "$diffuse" $fast --force -o "$tmp/notes.png" "$model" "x" > /dev/null 2> "$tmp/err" &&
   grep -aq "Seed: 7" "$tmp/notes.png"; then pass "--force replaces it"; else fail "--force replaces it"; fi
if "$diffuse" $fast -o "$tmp/a.png" "$model" "another prompt" > /dev/null 2> "$tmp/err" &&
   grep -aq "another prompt" "$tmp/a.png"; then pass "our own PNG is replaced"; else fail "our own PNG is replaced"; fi

# img2img
if "$diffuse" --steps 4 --seed 3 -q --init "$init" --strength 0.6 -o "$tmp/i2i.png" "$model" "a cat" > /dev/null 2> "$tmp/err" &&
   grep -aq "Denoising strength: 0.6" "$tmp/i2i.png"; then pass "--init --strength"; else fail "--init --strength"; fi

# bad inputs: one line, non-zero exit
check "no model" 2 "no MODEL" --
check "no prompt" 2 "no PROMPT" -- "$model"
check "unknown scheduler" 2 "unknown scheduler 'heun'" -- --scheduler heun "$model" "x"
check "size not a multiple of 8" 2 "multiples of 8" -- --size 15x16 "$model" "x"
check "bad steps" 2 "--steps" -- --steps 0 "$model" "x"
check "strength without init" 2 "--strength goes with --init" -- --strength 0.5 "$model" "x"
check "mask without init" 2 "--mask needs --init" -- --mask "$init" "$model" "x"
check "missing model folder" 1 "neither a directory nor a hub id" -- $fast "$tmp/nope" "x"
check "a folder without model_index.json" 1 "no model_index.json" -- $fast "$tmp" "x"
check "a hub id not in the cache" 1 "not in the Hugging Face cache" -- $fast "org/nothing-here" "x"
mkdir -p "$tmp/broken" && cp -r "$model"/. "$tmp/broken/" && rm "$tmp/broken/unet/diffusion_pytorch_model.safetensors"
check "a component without weights" 1 "holds no weights" -- $fast "$tmp/broken" "x"
printf 'not a png' > "$tmp/bad.png"
check "a corrupt --init image" 1 "bad.png" -- $fast --init "$tmp/bad.png" "$model" "x"
check "--mask with a text-to-image model" 1 "needs an inpainting model" -- $fast --init "$init" --mask "$init" "$model" "x"
check "an output folder that does not exist" 1 "$tmp/none/o.png" -- $fast -o "$tmp/none/o.png" "$model" "x"
mkdir "$tmp/ro" && chmod a-w "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
    check "an output folder not writable" 1 "$tmp/ro" -- $fast -o "$tmp/ro/o.png" "$model" "x"
else
    n=$((n + 1)); echo "ok $n # SKIP an output folder not writable (root writes anywhere)"
fi
# LoRA files (tests/fixtures/sd_lora: adapters of this very model) change the image; a bad one is refused
lora="$src/tests/fixtures/sd_lora"
"$diffuse" $fast -o "$tmp/plain.png" "$model" "a cat" > /dev/null 2> "$tmp/err"
if "$diffuse" $fast --lora "$lora/a_peft.safetensors:0.7" -o "$tmp/lora.png" "$model" "a cat" > /dev/null 2> "$tmp/err" &&
   [ -s "$tmp/lora.png" ] && ! cmp -s "$tmp/plain.png" "$tmp/lora.png" && grep -aq "LoRA: .*a_peft.safetensors:0.7" "$tmp/lora.png"
then pass "--lora FILE:W changes the image and is recorded"; else fail "--lora FILE:W changes the image and is recorded"; fi
if "$diffuse" $fast --lora "$lora/a_kohya.safetensors" --lora "$lora/b_kohya.safetensors:-0.5" -o "$tmp/lora2.png" "$model" "a cat" \
   > /dev/null 2> "$tmp/err"; then pass "two stacked --lora files"; else fail "two stacked --lora files"; fi
check "a LoRA file that is not one" 1 "a.png" -- $fast --lora "$tmp/a.png" "$model" "x"
check "a missing LoRA file" 1 "nope.safetensors" -- $fast --lora "$tmp/nope.safetensors" "$model" "x"

# a single-file checkpoint (LDM key names; tests/test_sd_pipeline.c shows it gives its diffusers twin's latents)
sf="$src/tests/fixtures/sd_pipeline/sf_model"
if "$diffuse" $fast --tokenizer "$sf/tokenizer" -o "$tmp/sf.png" "$sf.safetensors" "a cat" > /dev/null 2> "$tmp/err" &&
   grep -aq "Model: .*sf_model.safetensors" "$tmp/sf.png"; then pass "a single-file checkpoint"
else fail "a single-file checkpoint"; fi
check "a single file's tiny vocabulary against the bundled CLIP tokenizer" 1 "embeddings" -- $fast "$sf.safetensors" "x"
check "a --tokenizer folder that is not one" 1 "tokenizer" -- $fast --tokenizer "$tmp" "$model" "x"

echo "1..$n"
[ "$fails" -eq 0 ]
